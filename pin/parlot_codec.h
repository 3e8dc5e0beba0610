/*
 * parlot_codec.h -- ParLOT's two-layer trace compression, incremental (one value at a time).
 *
 * Shared by both tracers of this directory: libparlot.so (compiler instrumentation,
 * parlot_events.c) and the Pin tool (parlot.cpp).  Plain C99, also valid C++; no allocation,
 * no I/O: the caller owns the memory and writes the bytes.
 *
 * Format (see docs/parlot-format.md and difftrace_mpi/kernels/parlot.pyx for the decoder):
 *
 *   LZ layer (16-bit words).  History: hbuf[4096] (last position seen per hash),
 *   pbuf[65536] (ring of past values), ppos, hash; all zero at the start.  Before a value
 *   is coded, the candidate lpos = hbuf[hash] is tested: when the three values before lpos
 *   equal the three values before ppos (the context matches), a count word follows: the
 *   number of values, from this one on, equal to pbuf[lpos], pbuf[lpos+1], ... (at most
 *   65535).  Each value, counted or not, enters the history.  A value that ends a count
 *   (it differs, or the count is full) is written as a literal word, without a new context
 *   test.  At the end of the stream a pending count is written.
 *
 *   ZE layer (bytes).  Words are taken four at a time as eight little-endian bytes; a
 *   group is a bitmap byte (bit b set = byte b non-zero) and then the non-zero bytes.  The
 *   last group holds n = 1..4 words and is followed by the trailer byte n; an empty stream
 *   is the single byte 0.  A full group may be written as soon as its fourth word is known:
 *   when the stream ends right after it, the trailer is 4.
 *
 * Incremental use (what "never buffer the raw trace" means here): parlot_enc_put() codes one
 * value at once; whole ZE groups go to enc->buf as soon as they are complete.  The bytes
 * that would end the stream if it ended now (pending count, pending words, trailer) are
 * produced on demand by parlot_enc_tail() without changing the state, so a file can be made
 * complete at any moment (a checkpoint) and extended afterwards by overwriting that tail.
 *
 *   parlot_enc enc;  parlot_enc_init(&enc);
 *   for each value v:  if (parlot_enc_put(&enc, v)) { write enc.buf[0..enc.len); enc.len = 0; }
 *   at the end:        write enc.buf[0..enc.len), then the parlot_enc_tail() bytes.
 */
#ifndef PARLOT_CODEC_H
#define PARLOT_CODEC_H

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define PARLOT_INLINE static inline __attribute__((always_inline, no_instrument_function))
#define PARLOT_FUNC static __attribute__((unused, no_instrument_function))
#else
#define PARLOT_INLINE static inline
#define PARLOT_FUNC static
#endif

#define PARLOT_HBUF_SIZE 4096u
#define PARLOT_PBUF_SIZE 65536u
#define PARLOT_BUF_SIZE 16384u  /* parlot_enc_put() asks for a write once this much is buffered */
#define PARLOT_BUF_SLACK 64u    /* room after PARLOT_BUF_SIZE: one more group plus a tail */
#define PARLOT_TAIL_MAX 20u     /* longest tail: a 9-byte group, a 5-byte group, the trailer */

typedef struct parlot_enc {
    uint16_t hbuf[PARLOT_HBUF_SIZE];  /* last ring position seen for each hash */
    uint16_t pbuf[PARLOT_PBUF_SIZE];  /* ring of the last 65536 values */
    uint32_t ppos;                    /* next ring position */
    uint32_t hash;                    /* hash of the recent values (12 bits) */
    uint32_t counting;                /* 1 while a count word is being extended */
    uint32_t lpos;                    /* ring position the count copies from */
    uint32_t cnt;                     /* values counted so far */
    uint32_t npend;                   /* words of the current, unfinished ZE group (0..3) */
    uint16_t pend[4];
    uint64_t nvalues;                 /* values coded so far (statistics) */
    uint64_t nwords;                  /* LZ words emitted so far (pending ones included) */
    uint64_t nbytes;                  /* bytes of complete ZE groups produced so far */
    uint32_t len;                     /* bytes waiting in buf */
    uint8_t buf[PARLOT_BUF_SIZE + PARLOT_BUF_SLACK];
} parlot_enc;

PARLOT_FUNC void parlot_enc_init(parlot_enc *e)
{
    memset(e, 0, sizeof *e);
}

/* One ZE group of q = 1..4 words into out; returns its length (1..9 bytes). */
PARLOT_INLINE uint32_t parlot_ze_group(const uint16_t *w, uint32_t q, uint8_t *out)
{
    uint32_t n = 1, k;
    uint8_t bm = 0;
    for (k = 0; k < q; k++) {
        uint8_t lo = (uint8_t)(w[k] & 0xFFu), hi = (uint8_t)(w[k] >> 8);
        if (lo) { bm |= (uint8_t)(1u << (2 * k)); out[n++] = lo; }
        if (hi) { bm |= (uint8_t)(1u << (2 * k + 1)); out[n++] = hi; }
    }
    out[0] = bm;
    return n;
}

PARLOT_INLINE void parlot_enc_word(parlot_enc *e, uint16_t w)
{
    e->nwords++;
    e->pend[e->npend++] = w;
    if (e->npend == 4) {
        uint32_t n = parlot_ze_group(e->pend, 4, e->buf + e->len);
        e->len += n;
        e->nbytes += n;
        e->npend = 0;
    }
}

PARLOT_INLINE void parlot_enc_hist(parlot_enc *e, uint16_t v)
{
    e->hbuf[e->hash] = (uint16_t)e->ppos;
    e->hash = ((e->hash << 4) ^ v) & (PARLOT_HBUF_SIZE - 1);
    e->pbuf[e->ppos] = v;
    e->ppos = (e->ppos + 1) & (PARLOT_PBUF_SIZE - 1);
}

PARLOT_INLINE int parlot_enc_ctx(const parlot_enc *e, uint32_t lpos)
{
    const uint32_t m = PARLOT_PBUF_SIZE - 1;
    uint32_t p = e->ppos;
    return e->pbuf[(lpos - 1) & m] == e->pbuf[(p - 1) & m]
        && e->pbuf[(lpos - 2) & m] == e->pbuf[(p - 2) & m]
        && e->pbuf[(lpos - 3) & m] == e->pbuf[(p - 3) & m];
}

/* Code one value.  Returns non-zero when enc->buf holds PARLOT_BUF_SIZE bytes or more: the
 * caller must then write buf[0..len) and set len = 0 before the next call. */
PARLOT_INLINE int parlot_enc_put(parlot_enc *e, uint16_t v)
{
    e->nvalues++;
    if (!e->counting) {
        uint32_t lpos = e->hbuf[e->hash];
        if (parlot_enc_ctx(e, lpos)) {
            e->counting = 1;
            e->lpos = lpos;
            e->cnt = 0;
        }
    }
    if (e->counting) {
        if (v == e->pbuf[e->lpos] && e->cnt < 65535u) {
            e->cnt++;
            e->lpos = (e->lpos + 1) & (PARLOT_PBUF_SIZE - 1);
            parlot_enc_hist(e, v);
            return 0;
        }
        parlot_enc_word(e, (uint16_t)e->cnt);
        e->counting = 0;
    }
    parlot_enc_word(e, v);
    parlot_enc_hist(e, v);
    return e->len >= PARLOT_BUF_SIZE;
}

/* The bytes that end the stream if it ends now: the pending count word (if any), the
 * pending words as the last group, the trailer.  Does not change the state.  out must
 * hold PARLOT_TAIL_MAX bytes; returns the length (1..PARLOT_TAIL_MAX). */
PARLOT_FUNC uint32_t parlot_enc_tail(const parlot_enc *e, uint8_t *out)
{
    uint16_t w[5];
    uint32_t q = e->npend, n = 0;
    memcpy(w, e->pend, sizeof(uint16_t) * 4);
    if (e->counting)
        w[q++] = (uint16_t)e->cnt;
    if (q == 0) {
        out[0] = (uint8_t)(e->nwords == 0 ? 0 : 4);   /* empty stream, or a full last group */
        return 1;
    }
    if (q == 5) {                       /* 4 words: one full group, then the fifth alone */
        n = parlot_ze_group(w, 4, out);
        n += parlot_ze_group(w + 4, 1, out + n);
        out[n++] = 1;
        return n;
    }
    n = parlot_ze_group(w, q, out);
    out[n++] = (uint8_t)q;
    return n;
}

/* A trace file written by checkpoints.  Every checkpoint writes the buffered groups at
 * `committed` followed by the current tail, so the file is always a complete stream (up to
 * the last checkpoint) even if the process is then killed without warning; the next
 * checkpoint overwrites the tail and truncates the file when the new end is shorter.
 * The I/O is the caller's: pwrite_fn(ctx, bytes, n, offset) and truncate_fn(ctx, length)
 * return 0 on success. */
typedef struct parlot_file {
    uint64_t committed;               /* bytes of complete groups already in the file */
    uint64_t end;                     /* current file length (committed + tail) */
    int (*pwrite_fn)(void *ctx, const void *data, uint32_t n, uint64_t offset);
    int (*truncate_fn)(void *ctx, uint64_t length);
    void *ctx;
} parlot_file;

/* Make the file hold the whole stream coded so far.  Returns 0, or -1 when an I/O call
 * failed (the state is then unchanged but for the buffer, which has been consumed). */
PARLOT_FUNC int parlot_checkpoint(parlot_enc *e, parlot_file *f)
{
    uint32_t data = e->len;
    uint32_t tail = parlot_enc_tail(e, e->buf + data);
    uint64_t new_end = f->committed + data + tail;
    int rc = f->pwrite_fn(f->ctx, e->buf, data + tail, f->committed);
    e->len = 0;
    if (rc != 0)
        return -1;
    f->committed += data;
    if (new_end < f->end && f->truncate_fn(f->ctx, new_end) != 0)
        return -1;
    f->end = new_end;
    return 0;
}

/* Whole-buffer convenience (tests, tools): compress n values into out, which must hold
 * parlot_bound(n) bytes; e is scratch state.  Returns the byte count. */
static inline uint64_t parlot_bound(uint64_t n) { return 9 * ((2 * n + 3) / 4) + PARLOT_TAIL_MAX; }

PARLOT_FUNC uint64_t parlot_encode_all(parlot_enc *e, const uint16_t *v, uint64_t n, uint8_t *out)
{
    uint64_t i, o = 0;
    parlot_enc_init(e);
    for (i = 0; i < n; i++) {
        if (parlot_enc_put(e, v[i])) {
            memcpy(out + o, e->buf, e->len);
            o += e->len;
            e->len = 0;
        }
    }
    memcpy(out + o, e->buf, e->len);
    o += e->len;
    e->len = 0;
    o += parlot_enc_tail(e, out + o);
    return o;
}

#ifdef __cplusplus
}
#endif

#endif /* PARLOT_CODEC_H */
