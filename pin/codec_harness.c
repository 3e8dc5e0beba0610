/*
 * codec_harness -- drive parlot_codec.h from the command line (for the tests).
 *
 *   codec_harness < values.u16 > trace            compress little-endian uint16 values
 *   codec_harness --checkpoints N1,N2,... DIR < values.u16 > trace
 *       write the trace as the tracer does, through checkpoints after N1, N2, ... values
 *       (and whenever the buffer fills); after checkpoint k the file as it stands is
 *       copied to DIR/ckpt.k, so a test can check that every intermediate file is a
 *       complete stream of the values coded so far.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parlot_codec.h"

typedef struct {
    uint8_t *data;
    uint64_t len, cap;
} memfile;

static int mem_pwrite(void *ctx, const void *src, uint32_t n, uint64_t off)
{
    memfile *m = (memfile *)ctx;
    if (off + n > m->cap) {
        uint64_t cap = m->cap ? m->cap : 4096;
        while (cap < off + n)
            cap *= 2;
        uint8_t *p = (uint8_t *)realloc(m->data, cap);
        if (!p)
            return -1;
        memset(p + m->cap, 0, cap - m->cap);
        m->data = p;
        m->cap = cap;
    }
    memcpy(m->data + off, src, n);
    if (off + n > m->len)
        m->len = off + n;
    return 0;
}

static int mem_truncate(void *ctx, uint64_t len)
{
    memfile *m = (memfile *)ctx;
    if (len < m->len)
        m->len = len;
    return 0;
}

static uint16_t *read_values(uint64_t *n)
{
    uint64_t cap = 1 << 16, len = 0;
    uint8_t *raw = (uint8_t *)malloc(cap);
    size_t got;
    while (raw && (got = fread(raw + len, 1, cap - len, stdin)) > 0) {
        len += got;
        if (len == cap) {
            cap *= 2;
            raw = (uint8_t *)realloc(raw, cap);
        }
    }
    if (!raw) {
        fprintf(stderr, "codec_harness: out of memory\n");
        exit(1);
    }
    if (len % 2) {
        fprintf(stderr, "codec_harness: odd number of input bytes\n");
        exit(2);
    }
    *n = len / 2;
    uint16_t *v = (uint16_t *)malloc(sizeof(uint16_t) * (*n + 1));
    for (uint64_t i = 0; i < *n; i++)
        v[i] = (uint16_t)(raw[2 * i] | (raw[2 * i + 1] << 8));
    free(raw);
    return v;
}

static int write_file(const char *path, const uint8_t *data, uint64_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        fprintf(stderr, "codec_harness: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t n;
    uint16_t *v = read_values(&n);
    static parlot_enc enc;
    if (argc == 1) {
        uint8_t *out = (uint8_t *)malloc(parlot_bound(n));
        uint64_t len = parlot_encode_all(&enc, v, n, out);
        fwrite(out, 1, len, stdout);
        return fflush(stdout) != 0;
    }
    if (argc != 4 || strcmp(argv[1], "--checkpoints") != 0) {
        fprintf(stderr, "usage: codec_harness [--checkpoints N1,N2,... DIR] < values > trace\n");
        return 2;
    }
    memfile m = {NULL, 0, 0};
    parlot_file f;
    memset(&f, 0, sizeof f);
    f.pwrite_fn = mem_pwrite;
    f.truncate_fn = mem_truncate;
    f.ctx = &m;
    parlot_enc_init(&enc);
    /* checkpoint positions, ascending */
    uint64_t cps[4096];
    int ncp = 0, j = 0, k = 0;
    char *spec = argv[2], path[4096];
    while (*spec && ncp < 4096) {
        cps[ncp++] = strtoull(spec, &spec, 10);
        if (*spec == ',')
            spec++;
        else if (*spec) {
            fprintf(stderr, "codec_harness: bad checkpoint list\n");
            return 2;
        }
    }
    for (uint64_t i = 0; i <= n; i++) {
        while (j < ncp && cps[j] == i) {
            if (parlot_checkpoint(&enc, &f) != 0)
                return 1;
            snprintf(path, sizeof path, "%s/ckpt.%d", argv[3], k++);
            if (write_file(path, m.data, m.len) != 0)
                return 1;
            j++;
        }
        if (i < n && parlot_enc_put(&enc, v[i]) && parlot_checkpoint(&enc, &f) != 0)
            return 1;
    }
    if (parlot_checkpoint(&enc, &f) != 0)
        return 1;
    fwrite(m.data, 1, m.len, stdout);
    return fflush(stdout) != 0;
}
