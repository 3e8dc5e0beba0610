/*
 * parlot_trace.c -- the core of libparlot.so, a ParLOT-format call tracer for programs built
 * with -finstrument-functions, loaded with LD_PRELOAD (see parlot-run and README.md).
 *
 * Per thread: one file <dir>/<prefix>.<pid>.<tid>, the compressed stream of function ids
 * (id on entry, 0 on return), coded one event at a time by parlot_codec.h.  Per process:
 * <prefix>.<pid>.info (one image block: "+", the executable, one name per id from 1) and
 * <prefix>.<pid>.rank (the MPI rank, once MPI_Init has returned) and, when the process ends,
 * <prefix>.<pid>.end (how it ended: key=value lines, written once, atomically).
 *
 * Completeness: a file is made complete (pending groups + trailer) at every checkpoint: when
 * its buffer fills, at the entry of each blocking MPI call, at GOMP_barrier, on a fatal or
 * terminating signal (all threads), at exit, before exec.  A later checkpoint overwrites the
 * tail, so a process killed even by SIGKILL leaves files complete up to its last checkpoint.
 *
 * Concurrency: each thread owns its state and takes its own lock (an uncontended atomic
 * exchange) around each event.  Whoever completes all files at once (a signal handler, exit)
 * takes every thread's lock first, so it never sees a half-recorded event.  A signal that
 * arrives while its own thread is inside an event is deferred to the end of that event.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <regex.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "parlot_codec.h"
#include "parlot_internal.h"

#define MAX_THREADS 4096
#define MAX_IDS 65535u            /* ids are uint16, 0 = return */
#define KEYTAB_BITS 17
#define KEYTAB_SIZE (1u << KEYTAB_BITS)
#define CACHE_SIZE 1024u
#define MAX_OBJS 512

/* the per-event path: inlined into the hooks */
#define HOT __attribute__((always_inline, no_instrument_function))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* ------------------------------------------------------------------ per-thread state */

typedef struct frame {
    const void *key;              /* function address or parlot_site */
    uintptr_t sp;                 /* stack position at the entry (call-stack correction) */
    uint32_t shown;               /* recorded frames open down to this one, itself included */
    uint32_t state;               /* FR_* (filters; 0 without them) */
} frame;

/* Frame states under the trace-time filters (PARLOT_EXCLUDE, PARLOT_INCLUDE, PARLOT_DEPTH).
 * A hidden frame is kept on the stack like any other (so exits and the call-stack
 * correction match as without filters) but neither its entry nor its return is written. */
enum {
    FR_HIDDEN = 1,                /* not recorded */
    FR_EXCLUDED = 2,              /* an excluded function or a call under one */
    FR_INCLUDED = 4               /* an included function or a call under one */
};

/* What the filters say about a function, whatever its caller (kept with its id). */
enum { KEY_EXCLUDE = 1, KEY_INCLUDE = 2 };

typedef struct cache_ent {
    const void *key;
    uint16_t id;
    uint16_t match;               /* KEY_* */
} cache_ent;

typedef struct tstate {
    volatile int lock;            /* held while an event is recorded or a syncer works on it */
    int tid;
    int fd;
    int disabled;                 /* an I/O error: this thread records nothing more */
    int finished;                 /* thread exited: file final, state released */
    volatile int dirty;           /* events recorded since the last checkpoint */
    parlot_file file;
    frame *stack;
    uint32_t depth, cap;
    cache_ent cache[CACHE_SIZE];
    parlot_enc enc;               /* large (140 kB): last */
} tstate;

static __thread tstate *t_self __attribute__((tls_model("initial-exec")));
static __thread int t_pre_tid __attribute__((tls_model("initial-exec")));   /* tid + 1 given at creation */
static __thread int t_dead __attribute__((tls_model("initial-exec")));      /* thread has exited */
static __thread int t_in_mpi __attribute__((tls_model("initial-exec")));
static __thread int t_in_sync __attribute__((tls_model("initial-exec")));
/* inside an event (or other tracer work): a signal for this thread waits until it is done */
static __thread volatile sig_atomic_t t_in_event __attribute__((tls_model("initial-exec")));
static __thread volatile sig_atomic_t t_pending_sig __attribute__((tls_model("initial-exec")));
static __thread siginfo_t t_pending_info __attribute__((tls_model("initial-exec")));

/* ------------------------------------------------------------------ process state */

volatile int parlot_on = 0;               /* recording */
volatile int parlot_warn_pending = 0;     /* the output directory is unusable: say so once */
static int g_warn_errno;
static volatile int g_finalized = 0;      /* files are final: drop further events */
static int g_pid;
static char g_dir[PATH_MAX];
static char g_prefix[256];
static char g_exe[PATH_MAX];
static int g_quiet;

static tstate *volatile g_threads[MAX_THREADS];
static volatile int g_nthreads;           /* slots used in g_threads */
static volatile int g_next_tid = 1;       /* 0 is the main thread */
static volatile int g_sync_lock;
static pthread_key_t g_key;
static volatile int g_rank = -1;

/* function table: key -> id (open addressing), id -> name */
static const void *g_keys[KEYTAB_SIZE];
static uint16_t g_keyids[KEYTAB_SIZE];
static char *g_names[MAX_IDS + 1];
static volatile uint32_t g_nnames;        /* ids 1..g_nnames are in use */
static uint32_t g_info_written = (uint32_t)-1;   /* names in the .info file on disk */
static pthread_mutex_t g_names_mx = PTHREAD_MUTEX_INITIALIZER;
static uint8_t g_keymatch[KEYTAB_SIZE];   /* KEY_* of each key */

/* trace-time filters (README.md, "Filters"): regular expressions on the names, a depth limit */
static int g_filtering;                   /* any of them is set */
static int g_has_exclude, g_has_include;
static regex_t g_exclude_re, g_include_re;
static uint32_t g_max_depth;              /* 0 = no limit */

/* ------------------------------------------------------------------ helpers */

static NI int env_rank(void)
{
    static const char *vars[] = {"PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID",
                                 "MV2_COMM_WORLD_RANK", "PALS_RANKID", NULL};
    for (int i = 0; vars[i]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) {
            char *end;
            long r = strtol(v, &end, 10);
            if (*end == '\0' && r >= 0 && r < INT_MAX)
                return (int)r;
        }
    }
    return -1;
}

/* One message per job: only the process of rank 0 (or an unranked one) speaks. */
static NI void say(const char *fmt, ...)
{
    if (g_quiet || env_rank() > 0)
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (n > (int)sizeof buf - 2)
        n = sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(2, buf, n);
    (void)w;
}

static NI int write_all(int fd, const void *p, size_t n)
{
    const char *c = (const char *)p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static NI int pwrite_all(int fd, const void *p, size_t n, off_t off)
{
    const char *c = (const char *)p;
    while (n) {
        ssize_t w = pwrite(fd, c, n, off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        c += w;
        n -= (size_t)w;
        off += w;
    }
    return 0;
}

static NI void spin_lock(volatile int *l)
{
    unsigned spins = 0;
    while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE)) {
        while (*l) {
            if (++spins > 64)
                sched_yield();
            else
                __builtin_ia32_pause();
        }
    }
}

static NI void spin_unlock(volatile int *l)
{
    __atomic_store_n(l, 0, __ATOMIC_RELEASE);
}

static NI int is_main_thread(void)
{
    return (pid_t)syscall(SYS_gettid) == getpid();
}

static NI void path_of(char *out, size_t n, const char *suffix)
{
    snprintf(out, n, "%s/%s.%d.%s", g_dir, g_prefix, g_pid, suffix);
}

/* ------------------------------------------------------------------ symbols */

typedef struct psym {
    uintptr_t value, size;
    const char *name;
    int rank;                     /* preference among aliases: lower is better */
} psym;

typedef struct pobj {
    const void *lm;               /* link_map of the object */
    psym *syms;
    size_t n;
} pobj;

static pobj g_objs[MAX_OBJS];
static int g_nobjs;

static NI int sym_cmp(const void *a, const void *b)
{
    const psym *x = (const psym *)a, *y = (const psym *)b;
    if (x->value != y->value)
        return x->value < y->value ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank - y->rank;
    return strcmp(x->name, y->name);
}

/* Function symbols of an ELF file (.symtab, else .dynsym).  The mapping stays for the
 * process's lifetime: the names point into it. */
static NI void load_syms(pobj *o, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
        close(fd);
        return;
    }
    size_t size = (size_t)st.st_size;
    const uint8_t *map = (const uint8_t *)mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)map;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff == 0 ||
        eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) > size)
        goto fail;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(map + eh->e_shoff);
    int pick = -1;
    for (int pass = 0; pass < 2 && pick < 0; pass++)
        for (int i = 0; i < eh->e_shnum; i++)
            if (sh[i].sh_type == (pass == 0 ? SHT_SYMTAB : SHT_DYNSYM)) {
                pick = i;
                break;
            }
    if (pick < 0)
        goto fail;
    const Elf64_Shdr *ss = &sh[pick];
    if (ss->sh_link >= eh->e_shnum || ss->sh_offset + ss->sh_size > size)
        goto fail;
    const Elf64_Shdr *strs = &sh[ss->sh_link];
    if (strs->sh_offset + strs->sh_size > size || strs->sh_size == 0)
        goto fail;
    const Elf64_Sym *sym = (const Elf64_Sym *)(map + ss->sh_offset);
    const char *str = (const char *)(map + strs->sh_offset);
    size_t nsym = ss->sh_size / sizeof(Elf64_Sym), nf = 0;
    psym *out = (psym *)malloc(sizeof(psym) * (nsym ? nsym : 1));
    if (!out)
        goto fail;
    for (size_t i = 0; i < nsym; i++) {
        int type = ELF64_ST_TYPE(sym[i].st_info), bind = ELF64_ST_BIND(sym[i].st_info);
        if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym[i].st_shndx == SHN_UNDEF ||
            sym[i].st_value == 0 || sym[i].st_name >= strs->sh_size)
            continue;
        const char *nm = str + sym[i].st_name;
        if (!memchr(nm, '\0', strs->sh_size - sym[i].st_name) || !*nm)
            continue;
        out[nf].value = sym[i].st_value;
        out[nf].size = sym[i].st_size;
        out[nf].name = nm;
        out[nf].rank = (bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 1 : 2) * 2 + (nm[0] == '_');
        nf++;
    }
    qsort(out, nf, sizeof(psym), sym_cmp);
    o->syms = out;
    o->n = nf;
    return;
fail:
    munmap((void *)map, size);
}

static NI const psym *find_sym(const pobj *o, uintptr_t off, int *exact)
{
    size_t lo = 0, hi = o->n;
    while (lo < hi) {             /* first symbol with value > off */
        size_t mid = (lo + hi) / 2;
        if (o->syms[mid].value <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const psym *s = &o->syms[lo - 1];
    while (s > o->syms && (s - 1)->value == s->value)
        s--;                      /* the preferred alias comes first */
    if (s->value == off) {
        *exact = 1;
        return s;
    }
    *exact = 0;
    if (off < s->value + s->size)
        return s;
    return NULL;
}

typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);

static NI char *demangle(const char *name)
{
    static demangle_fn dm;
    static int looked;
    if (name[0] != '_' || name[1] != 'Z')
        return NULL;
    if (!looked) {
        dm = (demangle_fn)dlsym(RTLD_DEFAULT, "__cxa_demangle");
        looked = 1;
    }
    if (!dm)
        return NULL;
    int status = 0;
    char *d = dm(name, NULL, NULL, &status);
    if (status != 0) {
        free(d);
        return NULL;
    }
    return d;
}

/* Name of the function at address fn (malloc'd, one line). */
static NI char *symbolize(const void *fn)
{
    Dl_info info;
    struct link_map *lm = NULL;
    char buf[512];
    const char *name = NULL;
    uintptr_t off = 0;
    int exact = 0;
    memset(&info, 0, sizeof info);
    if (dladdr1(fn, &info, (void **)&lm, RTLD_DL_LINKMAP) && lm) {
        off = (uintptr_t)fn - (uintptr_t)lm->l_addr;     /* PIE-aware: minus the load bias */
        pobj *o = NULL;
        for (int i = 0; i < g_nobjs; i++)
            if (g_objs[i].lm == lm)
                o = &g_objs[i];
        if (!o && g_nobjs < MAX_OBJS) {
            o = &g_objs[g_nobjs++];
            o->lm = lm;
            const char *path = (lm->l_name && lm->l_name[0]) ? lm->l_name : "/proc/self/exe";
            load_syms(o, path);
        }
        const psym *s = o ? find_sym(o, off, &exact) : NULL;
        if (s && exact)
            name = s->name;
        else if (info.dli_sname && info.dli_saddr == fn)
            name = info.dli_sname;
        else if (s) {
            snprintf(buf, sizeof buf, "%s+0x%lx", s->name, (unsigned long)(off - s->value));
            name = buf;
        }
    }
    if (!name) {
        const char *obj = info.dli_fname && info.dli_fname[0] ? strrchr(info.dli_fname, '/') : NULL;
        obj = obj ? obj + 1 : (info.dli_fname && info.dli_fname[0] ? info.dli_fname : "?");
        snprintf(buf, sizeof buf, "%s@0x%lx", obj, (unsigned long)(lm ? off : (uintptr_t)fn));
        name = buf;
    }
    char *d = demangle(name);
    char *res = d ? d : strdup(name);
    if (res)
        for (char *c = res; *c; c++)
            if (*c == '\n' || *c == '\r')
                *c = ' ';
    if (res && strcmp(res, "+") == 0) {   /* "+" starts an image block in .info */
        free(res);
        res = strdup("+ ");
    }
    return res;
}

/* ------------------------------------------------------------------ .info and .rank */

/* Rewrite the .info file (temporary file + rename: a reader never sees half of it).
 * Async-signal-safe: only open/write/rename.  Callers keep the name table still. */
static NI void write_info_locked(void)
{
    char path[PATH_MAX + 64], tmp[PATH_MAX + 128];
    path_of(path, sizeof path, "info");
    /* a hidden temporary name per writer, never taken for a trace */
    snprintf(tmp, sizeof tmp, "%s/.%s.%d.info.%ld.tmp", g_dir, g_prefix, g_pid, (long)syscall(SYS_gettid));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    char buf[8192];
    size_t len = 0;
    uint32_t n = g_nnames;
    int bad = 0;
#define PUT(s, l)                                                        \
    do {                                                                 \
        size_t l_ = (l);                                                 \
        if (len + l_ > sizeof buf) {                                     \
            bad |= write_all(fd, buf, len);                              \
            len = 0;                                                     \
        }                                                                \
        if (l_ > sizeof buf)                                             \
            bad |= write_all(fd, (s), l_);                               \
        else {                                                           \
            memcpy(buf + len, (s), l_);                                  \
            len += l_;                                                   \
        }                                                                \
    } while (0)
    PUT("+\n", 2);
    PUT(g_exe, strlen(g_exe));
    PUT("\n", 1);
    for (uint32_t i = 1; i <= n; i++) {
        const char *nm = g_names[i] ? g_names[i] : "?";
        PUT(nm, strlen(nm));
        PUT("\n", 1);
    }
#undef PUT
    bad |= write_all(fd, buf, len);
    close(fd);
    if (!bad && rename(tmp, path) == 0)
        g_info_written = n;
    else
        unlink(tmp);
}

static NI void refresh_info(void)
{
    if (g_info_written == g_nnames)
        return;
    pthread_mutex_lock(&g_names_mx);
    write_info_locked();
    pthread_mutex_unlock(&g_names_mx);
}

static NI void write_rank_file(int rank)
{
    char path[PATH_MAX + 64], num[32];
    path_of(path, sizeof path, "rank");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    int n = snprintf(num, sizeof num, "%d\n", rank);
    if (write_all(fd, num, (size_t)n) != 0)
        say("parlot: cannot write %s: %s", path, strerror(errno));
    close(fd);
}

void parlot_set_rank(int rank)
{
    if (!parlot_on || rank < 0)
        return;
    if (rank != g_rank) {
        g_rank = rank;
        write_rank_file(rank);
    }
}

/* ------------------------------------------------------------------ function ids */

static NI uint32_t key_hash(const void *k)
{
    uint64_t x = (uint64_t)(uintptr_t)k;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (uint32_t)x & (KEYTAB_SIZE - 1);
}

/* Id of a key (and, above bit 16, its KEY_* filter match), given a name on first sight (site)
 * or resolved from the symbol tables.  An excluded function gets no id: it is never written. */
static NI uint32_t global_id(const void *key, const char *fixed_name)
{
    pthread_mutex_lock(&g_names_mx);
    uint32_t h = key_hash(key), id = 0, match = 0;
    for (;;) {
        if (g_keys[h] == key) {
            id = g_keyids[h];
            match = g_keymatch[h];
            break;
        }
        if (g_keys[h] == NULL) {
            char *nm = NULL;
            if (g_filtering) {
                nm = fixed_name ? strdup(fixed_name) : symbolize(key);
                const char *text = nm ? nm : "?";
                if (g_has_exclude && regexec(&g_exclude_re, text, 0, NULL, 0) == 0)
                    match |= KEY_EXCLUDE;
                if (g_has_include && regexec(&g_include_re, text, 0, NULL, 0) == 0)
                    match |= KEY_INCLUDE;
            }
            if (match & KEY_EXCLUDE) {
                free(nm);
            } else if (g_nnames < MAX_IDS - 1) {
                if (!g_filtering)
                    nm = fixed_name ? strdup(fixed_name) : symbolize(key);
                id = g_nnames + 1;
                g_names[id] = nm ? nm : strdup("?");
                __atomic_store_n(&g_nnames, id, __ATOMIC_RELEASE);
            } else {              /* the id space is full: one shared id for the rest */
                free(nm);
                id = MAX_IDS;
                if (!g_names[MAX_IDS]) {
                    g_names[MAX_IDS] = strdup("<parlot: more than 65534 functions>");
                    for (uint32_t i = g_nnames + 1; i < MAX_IDS; i++)
                        g_names[i] = strdup("?");
                    __atomic_store_n(&g_nnames, MAX_IDS, __ATOMIC_RELEASE);
                }
            }
            g_keyids[h] = (uint16_t)id;
            g_keymatch[h] = (uint8_t)match;
            g_keys[h] = key;
            break;
        }
        h = (h + 1) & (KEYTAB_SIZE - 1);
    }
    pthread_mutex_unlock(&g_names_mx);
    return id | match << 16;
}

/* id | KEY_* << 16, from the thread's cache (no lock, no symbol look-up once seen) */
static inline HOT uint32_t lookup_id(tstate *t, const void *key, const char *fixed_name)
{
    cache_ent *c = &t->cache[((uintptr_t)key >> 4) & (CACHE_SIZE - 1)];
    if (likely(c->key == key))
        return c->id | (uint32_t)c->match << 16;
    uint32_t v = global_id(key, fixed_name);
    c->key = key;
    c->id = (uint16_t)v;
    c->match = (uint16_t)(v >> 16);
    return v;
}

/* ------------------------------------------------------------------ annotated MPI names */

/* By default (PARLOT_MPI_ARGS unset or not 0) the MPI wrappers name their events after the
 * call and its relevant arguments.  Each distinct name gets one parlot_site here (its address is the key of the
 * function table, like a wrapper's static site), so the id path above is unchanged.  At most
 * g_ann_max distinct names per process: beyond that the plain name is used. */
int parlot_mpi_args = 0;
static unsigned g_ann_max = 4096;

#define ANN_BUCKETS 4096u

typedef struct ann_site {
    parlot_site site;             /* first: the key handed to parlot_enter/parlot_exit */
    struct ann_site *next;
    uint32_t hash;
    char name[];
} ann_site;

static ann_site *g_ann[ANN_BUCKETS];
static unsigned g_ann_n;
static int g_ann_warned;
static pthread_mutex_t g_ann_mx = PTHREAD_MUTEX_INITIALIZER;

const parlot_site *parlot_annotated(const parlot_site *plain, const char *name)
{
    uint32_t h = 2166136261u;     /* FNV-1a */
    for (const char *c = name; *c; c++) {
        h ^= (unsigned char)*c;
        h *= 16777619u;
    }
    int warn = 0;
    pthread_mutex_lock(&g_ann_mx);
    ann_site **bucket = &g_ann[h & (ANN_BUCKETS - 1)], *e;
    for (e = *bucket; e; e = e->next)
        if (e->hash == h && strcmp(e->name, name) == 0)
            break;
    if (!e) {
        size_t len = strlen(name);
        if (g_ann_n < g_ann_max && (e = (ann_site *)malloc(sizeof(ann_site) + len + 1)) != NULL) {
            memcpy(e->name, name, len + 1);
            e->site.name = e->name;
            e->hash = h;
            e->next = *bucket;
            *bucket = e;
            g_ann_n++;
        } else if (!g_ann_warned) {
            g_ann_warned = warn = 1;
        }
    }
    pthread_mutex_unlock(&g_ann_mx);
    if (warn)                     /* one message per job, as every message here */
        say("parlot: more than %u distinct argument-annotated MPI calls in one process; further ones "
            "are recorded under their plain names (PARLOT_MPI_ARGS_MAX raises the cap)", g_ann_max);
    return e ? &e->site : plain;
}

/* ------------------------------------------------------------------ files */

static NI int fd_pwrite(void *ctx, const void *data, uint32_t n, uint64_t off)
{
    return pwrite_all(*(int *)ctx, data, n, (off_t)off);
}

static NI int fd_truncate(void *ctx, uint64_t len)
{
    int rc;
    do
        rc = ftruncate(*(int *)ctx, (off_t)len);
    while (rc != 0 && errno == EINTR);
    return rc;
}

static NI void checkpoint(tstate *t)
{
    if (t->disabled || t->finished || t->fd < 0)
        return;
    t->dirty = 0;
    if (parlot_checkpoint(&t->enc, &t->file) != 0) {
        t->disabled = 1;
        say("parlot: cannot write the trace of thread %d: %s; this thread is no longer traced",
            t->tid, strerror(errno));
    }
}

/* A thread's own checkpoint: the .info first, so that it names every id of the data. */
static NI void checkpoint_own(tstate *t)
{
    refresh_info();
    checkpoint(t);
}

/* ------------------------------------------------------------------ thread start/end */

static NI void thread_end(void *arg);
static NI void handle_signal_now(int sig, siginfo_t *si, void *uc);
static NI void start_flusher(void);
static volatile int g_flusher_started;

static inline HOT void enter_busy(void)
{
    t_in_event = 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

/* End of tracer work on this thread: a signal that came meanwhile is handled now. */
static inline HOT void leave_busy(void)
{
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    t_in_event = 0;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (unlikely(t_pending_sig)) {
        int sig = t_pending_sig;
        t_pending_sig = 0;
        handle_signal_now(sig, &t_pending_info, NULL);
    }
}

static NI tstate *thread_start(void)
{
    if (!parlot_on || g_finalized || t_dead)
        return NULL;
    int tid;
    if (is_main_thread())
        tid = 0;
    else if (t_pre_tid > 0)
        tid = t_pre_tid - 1;
    else
        tid = __atomic_fetch_add(&g_next_tid, 1, __ATOMIC_RELAXED);
    int slot = __atomic_fetch_add(&g_nthreads, 1, __ATOMIC_RELAXED);
    if (slot >= MAX_THREADS) {
        t_dead = 1;
        if (slot == MAX_THREADS)
            say("parlot: more than %d threads; further threads are not traced", MAX_THREADS);
        return NULL;
    }
    tstate *t = (tstate *)mmap(NULL, sizeof(tstate), PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (t == MAP_FAILED) {
        t_dead = 1;
        return NULL;
    }
    t->tid = tid;
    t->fd = -1;
    t->cap = 256;
    t->stack = (frame *)malloc(sizeof(frame) * t->cap);
    char path[PATH_MAX + 64], num[16];
    snprintf(num, sizeof num, "%d", tid);
    path_of(path, sizeof path, num);
    t->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (t->fd >= 0 && t->fd < 512) {
        /* out of the way of the program's own descriptors (a program that closes and
         * reopens low numbers must not receive trace bytes) */
        int hi = fcntl(t->fd, F_DUPFD_CLOEXEC, 512);
        if (hi >= 0) {
            close(t->fd);
            t->fd = hi;
        }
    }
    if (t->fd < 0 || !t->stack) {
        say("parlot: cannot create %s: %s; this thread is not traced", path, strerror(errno));
        t->disabled = 1;
    }
    t->file.pwrite_fn = fd_pwrite;
    t->file.truncate_fn = fd_truncate;
    t->file.ctx = &t->fd;
    checkpoint_own(t);            /* an empty, complete stream from the start */
    if (tid == 0 && g_rank < 0) {
        int r = env_rank();       /* the launcher's rank; MPI_Init confirms it */
        if (r >= 0) {
            g_rank = r;
            write_rank_file(r);
        }
    }
    t_self = t;
    pthread_setspecific(g_key, t);
    __atomic_store_n(&g_threads[slot], t, __ATOMIC_RELEASE);
    if (!g_flusher_started)
        start_flusher();
    return t;
}

/* Thread exit (pthread key destructor): the file is made final. */
static NI void thread_end(void *arg)
{
    tstate *t = (tstate *)arg;
    t_dead = 1;
    if (!t)
        return;
    enter_busy();
    spin_lock(&t->lock);
    if (!g_finalized && parlot_on)
        checkpoint_own(t);
    t->finished = 1;
    if (t->fd >= 0)
        close(t->fd);
    t->fd = -1;
    spin_unlock(&t->lock);
    t_self = NULL;
    leave_busy();
}

void parlot_thread_touch(void)
{
    if (unlikely(!t_self) && parlot_on && !t_dead) {
        enter_busy();
        thread_start();
        leave_busy();
    }
}

/* ------------------------------------------------------------------ events */

/* Start of an event: the thread's state, locked; NULL when nothing is to be recorded.
 * Order matters: busy before the lock is taken, unlocked before busy ends, so a signal
 * handler never waits for a lock its own thread holds. */
static inline HOT tstate *ev_begin(void)
{
    tstate *t = t_self;
    if (unlikely(!t)) {
        if (!parlot_on || t_dead) {
            if (unlikely(parlot_warn_pending))
                parlot_warn_once();
            return NULL;
        }
        enter_busy();
        t = thread_start();
        if (!t) {
            leave_busy();
            return NULL;
        }
    } else
        enter_busy();
    if (unlikely(__atomic_exchange_n(&t->lock, 1, __ATOMIC_ACQUIRE)))
        spin_lock(&t->lock);
    if (unlikely(g_finalized || t->disabled || t->finished || !parlot_on)) {
        spin_unlock(&t->lock);
        leave_busy();
        return NULL;
    }
    return t;
}

static inline HOT void ev_end(tstate *t)
{
    spin_unlock(&t->lock);
    leave_busy();
}

static inline HOT void put(tstate *t, uint16_t v)
{
    t->dirty = 1;
    if (unlikely(parlot_enc_put(&t->enc, v)))
        checkpoint_own(t);
}

static NI int grow_stack(tstate *t)
{
    uint32_t cap = t->cap * 2;
    frame *s = (frame *)realloc(t->stack, sizeof(frame) * cap);
    if (!s) {
        t->disabled = 1;
        say("parlot: out of memory for the call stack of thread %d", t->tid);
        return -1;
    }
    t->stack = s;
    t->cap = cap;
    return 0;
}

/* The state of a new frame under the filters, from its caller's frame (NULL: the thread's
 * first) and what the filters say about its function. */
static NI uint32_t filter_state(const frame *caller, uint32_t match)
{
    uint32_t up = caller ? caller->state : 0;
    if ((up & FR_EXCLUDED) || (match & KEY_EXCLUDE))
        return FR_HIDDEN | FR_EXCLUDED;
    uint32_t st = 0;
    if (g_has_include)
        st = ((up & FR_INCLUDED) || (match & KEY_INCLUDE)) ? FR_INCLUDED : FR_HIDDEN;
    if (!(st & FR_HIDDEN) && g_max_depth && caller && caller->shown >= g_max_depth)
        st |= FR_HIDDEN;
    return st;
}

/* close the top frame (its return, when it was recorded) */
static inline HOT void pop_frame(tstate *t)
{
    t->depth--;
    if (likely(!(t->stack[t->depth].state & FR_HIDDEN)))
        put(t, 0);
}

static inline HOT void do_enter(tstate *t, const void *key, const char *fixed_name, uintptr_t sp)
{
    /* ParLOT's call-stack correction: a frame recorded below the current stack position
     * (the stack grows down) has returned without an exit event (longjmp): close it.  Equal
     * positions are kept: a function inlined into its caller reports the caller's frame. */
    while (t->depth && t->stack[t->depth - 1].sp < sp)
        pop_frame(t);
    uint32_t v = lookup_id(t, key, fixed_name);
    if (unlikely(t->depth == t->cap) && grow_stack(t) != 0)
        return;
    frame *f = &t->stack[t->depth];
    f->key = key;
    f->sp = sp;
    if (likely(!g_filtering)) {
        f->state = 0;
        t->depth++;
        put(t, (uint16_t)v);
        return;
    }
    const frame *caller = t->depth ? f - 1 : NULL;
    f->state = filter_state(caller, v >> 16);
    f->shown = (caller ? caller->shown : 0) + !(f->state & FR_HIDDEN);
    t->depth++;
    if (!(f->state & FR_HIDDEN))
        put(t, (uint16_t)v);
}

static inline HOT void do_exit(tstate *t, const void *key)
{
    uint32_t d = t->depth;
    if (likely(d && t->stack[d - 1].key == key)) {
        pop_frame(t);
        return;
    }
    /* not on top: close the frames above it (their exits were missed); a function that is
     * not open at all (entered before tracing began, e.g. in a forked child) is ignored */
    uint32_t i = d;
    while (i > 0 && t->stack[i - 1].key != key)
        i--;
    if (i == 0)
        return;
    while (t->depth >= i)
        pop_frame(t);
}

void parlot_enter(const parlot_site *site, int flags)
{
    tstate *t = ev_begin();
    if (!t)
        return;
    do_enter(t, site, site->name, (uintptr_t)__builtin_frame_address(0));
    if (flags & PARLOT_CKPT)
        checkpoint_own(t);
    ev_end(t);
}

void parlot_exit(const parlot_site *site)
{
    tstate *t = ev_begin();
    if (!t)
        return;
    do_exit(t, site);
    ev_end(t);
}

void parlot_checkpoint_self(void)
{
    tstate *t = ev_begin();
    if (!t)
        return;
    checkpoint_own(t);
    ev_end(t);
}

void parlot_enter_fn(void *fn)
{
    tstate *t = ev_begin();
    if (!t)
        return;
    do_enter(t, fn, NULL, (uintptr_t)__builtin_frame_address(0));
    ev_end(t);
}

void parlot_exit_fn(void *fn)
{
    tstate *t = ev_begin();
    if (!t)
        return;
    do_exit(t, fn);
    ev_end(t);
}

PARLOT_API void __cyg_profile_func_enter(void *fn, void *site)
{
    (void)site;
    tstate *t = ev_begin();
    if (!t)
        return;
    do_enter(t, fn, NULL, (uintptr_t)__builtin_frame_address(0));
    ev_end(t);
}

PARLOT_API void __cyg_profile_func_exit(void *fn, void *site)
{
    (void)site;
    tstate *t = ev_begin();
    if (!t)
        return;
    do_exit(t, fn);
    ev_end(t);
}

void parlot_mpi_in(void) { t_in_mpi++; }
void parlot_mpi_out(void) { t_in_mpi--; }

/* ------------------------------------------------------------------ all threads at once */

void parlot_sync_all(int final)
{
    if (!parlot_on || t_in_sync)
        return;
    t_in_sync = 1;
    int was_busy = t_in_event;
    enter_busy();
    spin_lock(&g_sync_lock);
    if (!g_finalized) {
        int n = g_nthreads < MAX_THREADS ? g_nthreads : MAX_THREADS;
        tstate *held[MAX_THREADS];
        int nh = 0;
        for (int i = 0; i < n; i++) {
            tstate *s = __atomic_load_n(&g_threads[i], __ATOMIC_ACQUIRE);
            if (!s)
                continue;
            spin_lock(&s->lock);
            held[nh++] = s;
        }
        /* every thread is outside an event now: nobody holds the name table.  The names
         * first, then the data that uses them (as a thread's own checkpoint does): a
         * process killed in between (mpiexec's SIGKILL after one rank aborts) leaves a
         * .info naming every id of its files, never a file with ids it does not name. */
        if (g_info_written != g_nnames)
            write_info_locked();
        for (int i = 0; i < nh; i++)
            checkpoint(held[i]);
        if (final)
            g_finalized = 1;
        for (int i = 0; i < nh; i++)
            spin_unlock(&held[i]->lock);
    }
    spin_unlock(&g_sync_lock);
    t_in_sync = 0;
    if (!was_busy)
        leave_busy();
}

/* ------------------------------------------------------------------ how the process ended */

/* <prefix>.<pid>.end: one "key=value" line per fact (README.md, docs/parlot-format.md):
 *   how=finalized|exit|signal|mpi_error|abort, code, signal, thread, call, error, time_ns,
 *   mpi_calls.
 * Written once, when the process ends (exit status through on_exit, a terminating signal, an
 * MPI error under the default fatal handling, MPI_Abort), before the trace files are made
 * final: whoever ends the process may be killed any moment after (mpiexec kills the other
 * ranks).  The first final record wins: MPI_Abort's exit() or the SIGKILL that follows an
 * abort do not replace "abort".  A record written before a program's own signal handler runs
 * is provisional: an exit from the handler replaces it, a return from it withdraws it.
 * Async-signal-safe: stack buffers, hand-formatted numbers, open/write/rename only; a spin
 * lock taken with this thread's signals deferred (as for events) orders concurrent writers. */
volatile int parlot_mpi_state = PARLOT_MPI_NONE;
volatile unsigned long parlot_mpi_calls = 0;

enum { END_NONE = 0, END_PROVISIONAL = 1, END_FINAL = 2 };
static volatile int g_end_state;
static volatile int g_end_lock;
static volatile int g_end_sig;            /* the signal of a provisional record */

typedef struct ebuf {
    char s[1024];
    size_t n;
} ebuf;

static NI void eb_put(ebuf *b, const char *p, size_t l)
{
    if (l > sizeof b->s - b->n)
        l = sizeof b->s - b->n;
    memcpy(b->s + b->n, p, l);
    b->n += l;
}

static NI void eb_str(ebuf *b, const char *p)
{
    eb_put(b, p, strlen(p));
}

static NI void eb_unum(ebuf *b, unsigned long long u)
{
    char num[24], *e = num + sizeof num, *p = e;
    do
        *--p = (char)('0' + u % 10);
    while ((u /= 10) != 0);
    eb_put(b, p, (size_t)(e - p));
}

static NI void eb_num(ebuf *b, long v)
{
    if (v < 0) {
        eb_put(b, "-", 1);
        eb_unum(b, 0ull - (unsigned long long)v);
    } else
        eb_unum(b, (unsigned long long)v);
}

/* "key=" value "\n"; a value is one line of printable ASCII, at most 200 characters */
static NI void eb_kv(ebuf *b, const char *key, const char *val)
{
    eb_str(b, key);
    eb_put(b, "=", 1);
    size_t i = 0;
    for (; val[i] && i < 200; i++) {
        char c = val[i];
        eb_put(b, (c >= 0x20 && c < 0x7f) ? &c : "?", 1);
    }
    eb_put(b, "\n", 1);
}

static NI void eb_knum(ebuf *b, const char *key, long v)
{
    eb_str(b, key);
    eb_put(b, "=", 1);
    eb_num(b, v);
    eb_put(b, "\n", 1);
}

static NI const char *signal_name(int sig)
{
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    case SIGABRT: return "SIGABRT";
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGALRM: return "SIGALRM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGPIPE: return "SIGPIPE";
    case SIGSYS: return "SIGSYS";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    case SIGTRAP: return "SIGTRAP";
    default: return NULL;
    }
}

/* The tracer's index of the calling thread, -1 when it has none (a thread of the MPI
 * library that never recorded anything). */
static NI int current_tid(void)
{
    tstate *t = t_self;
    if (t)
        return t->tid;
    if (is_main_thread())
        return 0;
    return t_pre_tid > 0 ? t_pre_tid - 1 : -1;
}

static NI void end_path(char *out, size_t n)
{
    path_of(out, n, "end");
}

/* Write the record (final or provisional); returns 1 when written. */
static NI int end_write(int final, const char *how, int have_code, long code, int sig, const char *call,
                        const char *error)
{
    if (!parlot_on || getpid() != g_pid)
        return 0;
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0)
        now.tv_sec = now.tv_nsec = 0;
    int was_busy = t_in_event;
    enter_busy();                 /* a signal for this thread waits: the lock below is safe */
    spin_lock(&g_end_lock);
    int written = 0;
    if (g_end_state != END_FINAL) {
        ebuf b;
        b.n = 0;
        eb_kv(&b, "how", how);
        if (have_code)
            eb_knum(&b, "code", code);
        if (sig > 0) {
            const char *nm = signal_name(sig);
            if (nm)
                eb_kv(&b, "signal", nm);
            else {
                eb_str(&b, "signal=SIG");
                eb_num(&b, sig);
                eb_put(&b, "\n", 1);
            }
        }
        int tid = current_tid();
        if (tid >= 0)
            eb_knum(&b, "thread", tid);
        if (call)
            eb_kv(&b, "call", call);
        if (error)
            eb_kv(&b, "error", error);
        eb_str(&b, "time_ns=");
        eb_unum(&b, (unsigned long long)now.tv_sec * 1000000000ull + (unsigned long long)now.tv_nsec);
        eb_put(&b, "\n", 1);
        eb_str(&b, "mpi_calls=");
        eb_unum(&b, __atomic_load_n(&parlot_mpi_calls, __ATOMIC_RELAXED));
        eb_put(&b, "\n", 1);
        {   /* MPI objects still open (open_requests=1 ...): leaks show at the rank that leaked */
            char ob[256];
            eb_put(&b, ob, (size_t)parlot_mpi_open_record(ob, (int)sizeof ob));
        }

        char path[PATH_MAX + 64], tmp[PATH_MAX + 128];
        end_path(path, sizeof path);
        /* a hidden temporary name per writer, never taken for a trace */
        ebuf t;
        t.n = 0;
        eb_str(&t, g_dir);
        eb_str(&t, "/.");
        eb_str(&t, g_prefix);
        eb_put(&t, ".", 1);
        eb_num(&t, g_pid);
        eb_str(&t, ".end.");
        eb_num(&t, (long)syscall(SYS_gettid));
        eb_str(&t, ".tmp");
        if (t.n < sizeof tmp) {
            memcpy(tmp, t.s, t.n);
            tmp[t.n] = '\0';
            int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            if (fd >= 0) {
                int bad = write_all(fd, b.s, b.n);
                close(fd);
                if (!bad && rename(tmp, path) == 0) {
                    g_end_state = final ? END_FINAL : END_PROVISIONAL;
                    g_end_sig = final ? 0 : sig;
                    written = 1;
                } else
                    unlink(tmp);
            }
        }
    }
    spin_unlock(&g_end_lock);
    if (!was_busy)
        leave_busy();
    return written;
}

/* A program's signal handler returned: the process goes on, the provisional record goes. */
static NI void end_withdraw(void)
{
    if (!parlot_on || getpid() != g_pid)
        return;
    int was_busy = t_in_event;
    enter_busy();
    spin_lock(&g_end_lock);
    if (g_end_state == END_PROVISIONAL) {
        char path[PATH_MAX + 64];
        end_path(path, sizeof path);
        unlink(path);
        g_end_state = END_NONE;
        g_end_sig = 0;
    }
    spin_unlock(&g_end_lock);
    if (!was_busy)
        leave_busy();
}

int parlot_end_record(const char *how, int have_code, long code, const char *call, const char *error)
{
    return end_write(1, how, have_code, code, 0, call, error);
}

/* exit() or a return from main (glibc's on_exit gives the status of both).  Registered in the
 * constructor, so it runs after the program's own atexit handlers (one may call
 * MPI_Finalize).  A signal whose handler called exit is kept as signal=. */
static NI void on_exit_handler(int status, void *arg)
{
    (void)arg;
    const char *how = parlot_mpi_state == PARLOT_MPI_INITED ? "exit" : "finalized";
    end_write(1, how, 1, status, g_end_state == END_PROVISIONAL ? g_end_sig : 0, NULL, NULL);
    parlot_sync_all(1);
}

/* ------------------------------------------------------------------ background flusher */

/* Every PARLOT_FLUSH_MS (default 100 ms) a tracer thread completes the files of the threads
 * that recorded events since their last checkpoint, when they are not inside an event (it
 * never waits for them).  So a blocked or idle thread's file is complete within that time,
 * even if the process is then killed with SIGKILL (as mpiexec does to the other ranks when
 * one rank dies).  The thread records nothing and has no thread index. */
static int g_flush_ms = 100;

static NI void *flusher_main(void *arg)
{
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    struct timespec ts = {g_flush_ms / 1000, (long)(g_flush_ms % 1000) * 1000000L};
    while (parlot_on && !g_finalized) {
        nanosleep(&ts, NULL);
        int n = g_nthreads < MAX_THREADS ? g_nthreads : MAX_THREADS;
        for (int i = 0; i < n && !g_finalized; i++) {
            tstate *s = __atomic_load_n(&g_threads[i], __ATOMIC_ACQUIRE);
            if (!s || !s->dirty || s->finished)
                continue;
            if (__atomic_exchange_n(&s->lock, 1, __ATOMIC_ACQUIRE))
                continue;         /* busy: it will be dirty next time too */
            if (!g_finalized && !s->finished && parlot_on) {
                refresh_info();
                checkpoint(s);
            }
            spin_unlock(&s->lock);
        }
    }
    return NULL;
}

static NI void start_flusher(void)
{
    if (g_flush_ms <= 0 || __atomic_exchange_n(&g_flusher_started, 1, __ATOMIC_ACQ_REL))
        return;
    static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    if (!real)
        real = (int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *))parlot_real("pthread_create");
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    if (real(&th, &attr, flusher_main, NULL) != 0)
        g_flusher_started = 0;
    pthread_attr_destroy(&attr);
}

/* ------------------------------------------------------------------ signals */

#define NSIG_MAX 65
static const int g_managed[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGABRT, SIGSEGV, SIGBUS,
                                SIGFPE, SIGILL, SIGALRM, SIGXCPU, SIGXFSZ, SIGPIPE, SIGSYS, 0};
static struct sigaction g_app_act[NSIG_MAX];     /* what the program asked for */
static char g_is_managed[NSIG_MAX];
static int g_signals_ready;
static int (*real_sigaction)(int, const struct sigaction *, struct sigaction *);

static NI void on_signal(int sig, siginfo_t *si, void *uc);

static NI void install_ours(int sig, const struct sigaction *app)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    if (app)
        sa.sa_mask = app->sa_mask;
    else
        sigemptyset(&sa.sa_mask);
    real_sigaction(sig, &sa, NULL);
}

static NI void die_by(int sig)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    real_sigaction(sig, &sa, NULL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
}

static NI void handle_signal_now(int sig, siginfo_t *si, void *uc)
{
    struct sigaction app = g_app_act[sig];
    int has_handler = (app.sa_flags & SA_SIGINFO) ? app.sa_sigaction != NULL
                                                  : (app.sa_handler != SIG_DFL && app.sa_handler != SIG_IGN);
    if (!has_handler && app.sa_handler == SIG_IGN && !(app.sa_flags & SA_SIGINFO))
        return;
    /* the end record first: the launcher may kill this process while the files complete;
     * provisional when the program's handler decides what happens */
    end_write(!has_handler, "signal", 0, 0, sig, NULL, NULL);
    parlot_sync_all(!has_handler);   /* the default action of every managed signal ends the process */
    if (has_handler) {
        if (app.sa_flags & SA_RESETHAND) {
            memset(&g_app_act[sig], 0, sizeof g_app_act[sig]);
            g_app_act[sig].sa_handler = SIG_DFL;
        }
        if (app.sa_flags & SA_SIGINFO)
            app.sa_sigaction(sig, si, uc);
        else
            app.sa_handler(sig);
        end_withdraw();           /* the handler returned: the process goes on */
        return;
    }
    die_by(sig);
}

static NI void on_signal(int sig, siginfo_t *si, void *uc)
{
    int saved = errno;
    if (t_in_event) {
        if (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL) {
            /* a fault inside the tracer itself: no flushing from here */
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = SIG_DFL;
            real_sigaction(sig, &sa, NULL);
            errno = saved;
            return;
        }
        if (si)
            t_pending_info = *si;
        t_pending_sig = sig;      /* handled at the end of the event */
        errno = saved;
        return;
    }
    handle_signal_now(sig, si, uc);
    errno = saved;
}

static NI void setup_signals(void)
{
    real_sigaction = (int (*)(int, const struct sigaction *, struct sigaction *))dlsym(RTLD_NEXT, "sigaction");
    if (!real_sigaction)
        return;
    for (int i = 0; g_managed[i]; i++) {
        int sig = g_managed[i];
        struct sigaction old;
        if (real_sigaction(sig, NULL, &old) != 0)
            continue;
        g_app_act[sig] = old;
        g_is_managed[sig] = 1;
        if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN)
            continue;             /* ignored: it cannot end the process */
        install_ours(sig, &old);
    }
    g_signals_ready = 1;
}

/* The program's view of signal handling stays its own: we keep our handler in front for the
 * signals that can end the process, and call the program's handler from it. */
PARLOT_API int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (!real_sigaction)
        real_sigaction = (int (*)(int, const struct sigaction *, struct sigaction *))dlsym(RTLD_NEXT, "sigaction");
    if (!g_signals_ready || sig <= 0 || sig >= NSIG_MAX || !g_is_managed[sig] || !parlot_on)
        return real_sigaction(sig, act, old);
    if (old)
        *old = g_app_act[sig];
    if (act) {
        g_app_act[sig] = *act;
        if (!(act->sa_flags & SA_SIGINFO) && act->sa_handler == SIG_IGN)
            return real_sigaction(sig, act, NULL);
        install_ours(sig, act);
    }
    return 0;
}

PARLOT_API sighandler_t signal(int sig, sighandler_t handler)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(sig, &sa, &old) != 0)
        return SIG_ERR;
    return (old.sa_flags & SA_SIGINFO) ? (sighandler_t)(void *)old.sa_sigaction : old.sa_handler;
}

/* ------------------------------------------------------------------ threads, fork, exec */

typedef struct tramp {
    void *(*start)(void *);
    void *arg;
    int tid;
} tramp;

static NI void *thread_tramp(void *p)
{
    tramp tr = *(tramp *)p;
    free(p);
    t_pre_tid = tr.tid + 1;
    return tr.start(tr.arg);
}

/* Threads get their index when they are created (in creation order, as Pin numbers them),
 * so OpenMP threads have the same index in every run.  Threads that the MPI library starts
 * (inside an MPI call) get one only if they ever record an event. */
PARLOT_API int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*start)(void *), void *arg)
{
    static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    if (!real)
        real = (int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *))parlot_real("pthread_create");
    if (!parlot_on || g_finalized || t_in_mpi > 0)
        return real(th, attr, start, arg);
    tramp *p = (tramp *)malloc(sizeof(tramp));
    if (!p)
        return real(th, attr, start, arg);
    p->start = start;
    p->arg = arg;
    p->tid = __atomic_fetch_add(&g_next_tid, 1, __ATOMIC_RELAXED);
    int rc = real(th, attr, thread_tramp, p);
    if (rc != 0)
        free(p);
    return rc;
}

static NI void at_fork_child(void)
{
    /* the child is not traced: its copies of our files belong to the parent */
    parlot_on = 0;
}

/* Before the process image is replaced: files final, and the new image is told not to
 * trace itself under the same pid (it would overwrite them). */
static NI void before_exec(void)
{
    if (!parlot_on || getpid() != g_pid)
        return;
    parlot_sync_all(1);
    char v[32];
    snprintf(v, sizeof v, "%d", g_pid);
    setenv("PARLOT_EXECED", v, 1);
}

static NI void after_failed_exec(void)
{
    if (parlot_on && getpid() == g_pid) {
        g_finalized = 0;
        unsetenv("PARLOT_EXECED");
    }
}

static NI char **env_with_marker(char *const envp[], char *marker)
{
    size_t n = 0;
    while (envp && envp[n])
        n++;
    char **e = (char **)malloc(sizeof(char *) * (n + 2));
    if (!e)
        return (char **)envp;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(envp[i], "PARLOT_EXECED=", 14) != 0)
            e[k++] = envp[i];
    e[k++] = marker;
    e[k] = NULL;
    return e;
}

typedef int (*exec_env_fn)(const char *, char *const[], char *const[]);
typedef int (*exec_fn)(const char *, char *const[]);

/* execve/execvpe in the traced process: finish the trace, pass the marker that tells the new
 * image it was exec'ed from us, and resume tracing if the exec fails */
static int traced_exec_env(exec_env_fn real, const char *file, char *const argv[], char *const envp[])
{
    if (!parlot_on || getpid() != g_pid)
        return real(file, argv, envp);
    char marker[48];
    snprintf(marker, sizeof marker, "PARLOT_EXECED=%d", g_pid);
    before_exec();
    char **e = env_with_marker(envp, marker);
    int rc = real(file, argv, e);
    int err = errno;
    if (e != (char **)envp)
        free(e);
    after_failed_exec();
    errno = err;
    return rc;
}

/* execv/execvp: the environment is inherited as it is */
static int traced_exec(exec_fn real, const char *file, char *const argv[])
{
    before_exec();
    int rc = real(file, argv);
    int err = errno;
    after_failed_exec();
    errno = err;
    return rc;
}

PARLOT_API int execve(const char *path, char *const argv[], char *const envp[])
{
    static exec_env_fn real;
    if (!real)
        real = (exec_env_fn)parlot_real("execve");
    return traced_exec_env(real, path, argv, envp);
}

PARLOT_API int execvpe(const char *file, char *const argv[], char *const envp[])
{
    static exec_env_fn real;
    if (!real)
        real = (exec_env_fn)parlot_real("execvpe");
    return traced_exec_env(real, file, argv, envp);
}

PARLOT_API int execv(const char *path, char *const argv[])
{
    static exec_fn real;
    if (!real)
        real = (exec_fn)parlot_real("execv");
    return traced_exec(real, path, argv);
}

PARLOT_API int execvp(const char *file, char *const argv[])
{
    static exec_fn real;
    if (!real)
        real = (exec_fn)parlot_real("execvp");
    return traced_exec(real, file, argv);
}

#define VA_ARGV(first, argv, envp_out)                                   \
    size_t n_ = 1;                                                       \
    va_list ap_;                                                         \
    va_start(ap_, first);                                                \
    while (va_arg(ap_, char *))                                          \
        n_++;                                                            \
    va_end(ap_);                                                         \
    char **argv = (char **)alloca(sizeof(char *) * (n_ + 1));            \
    argv[0] = (char *)(first);                                           \
    va_start(ap_, first);                                                \
    for (size_t i_ = 1; i_ <= n_; i_++)                                  \
        argv[i_] = va_arg(ap_, char *);                                  \
    envp_out;                                                            \
    va_end(ap_)

PARLOT_API int execl(const char *path, const char *arg, ...)
{
    VA_ARGV(arg, argv, (void)0);
    return execv(path, argv);
}

PARLOT_API int execlp(const char *file, const char *arg, ...)
{
    VA_ARGV(arg, argv, (void)0);
    return execvp(file, argv);
}

PARLOT_API int execle(const char *path, const char *arg, ...)
{
    char **envp;
    VA_ARGV(arg, argv, envp = va_arg(ap_, char **));
    return execve(path, argv, envp);
}

/* ------------------------------------------------------------------ start and end */

void parlot_warn_once(void)
{
    if (__atomic_exchange_n(&parlot_warn_pending, 0, __ATOMIC_ACQ_REL))
        say("parlot: cannot write traces to '%s': %s; running untraced", g_dir, strerror(g_warn_errno));
}

void *parlot_real(const char *name)
{
    void *p = dlsym(RTLD_NEXT, name);
    if (!p)
        p = dlsym(RTLD_DEFAULT, name);
    if (!p) {
        char msg[256];
        int n = snprintf(msg, sizeof msg, "parlot: cannot find %s in the libraries of this program\n", name);
        ssize_t w = write(2, msg, (size_t)n);
        (void)w;
        _exit(127);
    }
    return p;
}

static NI int make_dirs(const char *dir)
{
    char tmp[PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof tmp)
        return (errno = ENAMETOOLONG), -1;
    memcpy(tmp, dir, n + 1);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

static NI int probe_dir(const char *dir)
{
    char path[PATH_MAX + 64];
    if (make_dirs(dir) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/.parlot-probe.%d", dir, (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    int ok = write(fd, "x", 1) == 1;
    int err = errno;
    close(fd);
    unlink(path);
    if (!ok)
        return (errno = err ? err : EIO), -1;
    return 0;
}

/* PARLOT_EXCLUDE / PARLOT_INCLUDE (POSIX extended regular expressions, matched anywhere in a
 * name) and PARLOT_DEPTH (a positive number).  Returns 0, after one message, when one is
 * malformed. */
static NI int setup_filters(void)
{
    static const char *vars[2] = {"PARLOT_EXCLUDE", "PARLOT_INCLUDE"};
    regex_t *res[2] = {&g_exclude_re, &g_include_re};
    int *have[2] = {&g_has_exclude, &g_has_include};
    const char *v;
    for (int i = 0; i < 2; i++) {
        if (!(v = getenv(vars[i])) || !*v)
            continue;
        int rc = regcomp(res[i], v, REG_EXTENDED | REG_NOSUB);
        if (rc != 0) {
            char why[256];
            regerror(rc, res[i], why, sizeof why);
            say("parlot: %s='%s' is not a valid extended regular expression (%s); running untraced", vars[i], v, why);
            return 0;
        }
        *have[i] = 1;
    }
    if ((v = getenv("PARLOT_DEPTH")) && *v) {
        char *end;
        long d = strtol(v, &end, 10);
        if (*end != '\0' || d <= 0 || d > 1000000) {
            say("parlot: PARLOT_DEPTH='%s' is not a positive number; running untraced", v);
            return 0;
        }
        g_max_depth = (uint32_t)d;
    }
    g_filtering = g_has_exclude || g_has_include || g_max_depth;
    return 1;
}

__attribute__((constructor, no_instrument_function)) static void parlot_init(void)
{
    const char *v;
    g_pid = getpid();
    g_quiet = (v = getenv("PARLOT_QUIET")) && *v && strcmp(v, "0") != 0;
    if ((v = getenv("PARLOT_FLUSH_MS")) && *v)
        g_flush_ms = atoi(v);
    if ((v = getenv("PARLOT_DISABLE")) && *v && strcmp(v, "0") != 0)
        return;
    /* MPI arguments in event names: on unless PARLOT_MPI_ARGS=0 (parlot-run -A) */
    parlot_mpi_args = PARLOT_ARGS_REL;
    if ((v = getenv("PARLOT_MPI_ARGS")) && *v)
        parlot_mpi_args = strcmp(v, "0") == 0 ? 0 : strcmp(v, "abs") == 0 ? PARLOT_ARGS_ABS : PARLOT_ARGS_REL;
    if ((v = getenv("PARLOT_MPI_ARGS_MAX")) && *v) {
        long m = strtol(v, NULL, 10);
        g_ann_max = m < 0 ? 0u : m > 60000 ? 60000u : (unsigned)m;
    }
    /* parlot-run names the process it starts; others (children, shells) stay untraced */
    if ((v = getenv("PARLOT_PID")) && *v && atoi(v) != g_pid)
        return;
    if ((v = getenv("PARLOT_EXECED")) && *v && atoi(v) == g_pid)
        return;                   /* an exec of a traced process: its files are final */
    if (!setup_filters())
        return;                   /* said why: run untraced rather than trace what was not asked */
    v = getenv("PARLOT_DIR");
    snprintf(g_dir, sizeof g_dir, "%s", v && *v ? v : ".");
    size_t dl = strlen(g_dir);
    while (dl > 1 && g_dir[dl - 1] == '/')
        g_dir[--dl] = '\0';
    if (probe_dir(g_dir) != 0) {
        /* said by the first process that would record something (not by launchers) */
        g_warn_errno = errno;
        parlot_warn_pending = 1;
        return;
    }
    if ((v = getenv("PARLOT_PREFIX")) && *v && !strchr(v, '/'))
        snprintf(g_prefix, sizeof g_prefix, "%s", v);
    else {
        char host[128] = "localhost";
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = '\0';
        char *dot = strchr(host, '.');
        if (dot)
            *dot = '\0';
        for (char *c = host; *c; c++)
            if (*c == '/' || *c == ' ')
                *c = '_';
        snprintf(g_prefix, sizeof g_prefix, "parlot.%s", host);
    }
    ssize_t n = readlink("/proc/self/exe", g_exe, sizeof g_exe - 1);
    g_exe[n > 0 ? n : 0] = '\0';
    if (n <= 0)
        snprintf(g_exe, sizeof g_exe, "main");
    if (pthread_key_create(&g_key, thread_end) != 0)
        return;
    pthread_atfork(NULL, NULL, at_fork_child);
    write_info_locked();          /* a .info exists as soon as any trace file does */
    setup_signals();
    on_exit(on_exit_handler, NULL);   /* the end record and final files, with the exit status */
    __atomic_store_n(&parlot_on, 1, __ATOMIC_RELEASE);
}

__attribute__((destructor, no_instrument_function)) static void parlot_fini(void)
{
    parlot_sync_all(1);
}
