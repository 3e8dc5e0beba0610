/*
 * parlot_events.c -- events and ids: the per-thread state, the function table (key -> id,
 * id -> name), the -finstrument-functions hooks and the entry points the MPI and OpenMP
 * wrappers call, the leaf filter and probe.  This file holds the only hot code of the
 * tracer (ev_begin .. ev_end, inlined into each hook).
 *
 * Per thread: one file <dir>/<prefix>.<pid>.<tid>, the compressed stream of function ids
 * (id on entry, 0 on return), coded one event at a time by parlot_codec.h.
 *
 * Completeness: a file is made complete (pending groups + trailer) at every checkpoint: when
 * its buffer fills, at the entry of each blocking MPI call, at GOMP_barrier, on a fatal or
 * terminating signal (all threads), at exit, before exec.  A later checkpoint overwrites the
 * tail, so a process killed even by SIGKILL leaves files complete up to its last checkpoint.
 *
 * Concurrency: each thread owns its state and marks it busy around each event (own_lock in
 * parlot_core.h: plain stores where membarrier(2) serves the rare side, else an uncontended
 * atomic exchange).  Whoever completes all files at once (a signal handler, exit) claims
 * every thread's state and waits until it is not busy, so it never sees a half-recorded
 * event.  A signal that
 * arrives while its own thread is inside an event is deferred to the end of that event.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "parlot_core.h"

__thread tstate *t_self TLS_IE;
__thread int t_pre_tid TLS_IE;
__thread int t_dead TLS_IE;
__thread int t_in_mpi TLS_IE;
__thread int t_in_sync TLS_IE;
__thread volatile sig_atomic_t t_in_event TLS_IE;
__thread volatile sig_atomic_t t_pending_sig TLS_IE;
__thread siginfo_t t_pending_info TLS_IE;
/* inside a wrapped Fortran MPI entry point: a C wrapper it reaches records no second event */
static __thread int t_in_fortran TLS_IE;

volatile int parlot_on = 0;               /* recording */
tstate *volatile g_threads[MAX_THREADS];
volatile int g_nthreads;
volatile int g_next_tid = 1;
volatile int g_rank = -1;
volatile int g_flusher_started;
volatile unsigned g_leaf_fns;

/* function table: key -> id (open addressing), id -> name */
static const void *g_keys[KEYTAB_SIZE];
static uint16_t g_keyids[KEYTAB_SIZE];
static uint8_t g_keymatch[KEYTAB_SIZE];   /* KEY_* of each key */
char *g_names[MAX_IDS + 1];
volatile uint32_t g_nnames;
pthread_mutex_t g_names_mx = PTHREAD_MUTEX_INITIALIZER;

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
 * or resolved from the symbol tables.  An excluded function gets no id: it is never written;
 * nor does a function of the leaf list (only one entered through the compiler's hook: never
 * an MPI or OpenMP event, never an OpenMP outlined body). */
static NI uint32_t global_id(const void *key, const char *fixed_name, int hooked)
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
            if (g_filtering || g_has_leaves) {
                nm = fixed_name ? strdup(fixed_name) : parlot_symbolize(key);
                int ex = 0, in = 0, leaf = 0;
                parlot_name_matches(nm ? nm : "?", &ex, &in, &leaf);
                match = (ex ? KEY_EXCLUDE : 0) | (in ? KEY_INCLUDE : 0) | (leaf && hooked ? KEY_LEAF : 0);
            }
            if (match & (KEY_EXCLUDE | KEY_LEAF)) {
                free(nm);
                if (match & KEY_LEAF)
                    __atomic_fetch_add(&g_leaf_fns, 1, __ATOMIC_RELAXED);
            } else if (g_nnames < MAX_IDS - 1) {
                if (!nm)
                    nm = fixed_name ? strdup(fixed_name) : parlot_symbolize(key);
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

/* The thread's cache entry of a key: id and KEY_* (no lock, no symbol look-up once seen).  A
 * refill first spills the calls the entry counted (leaf_spill). */
static inline HOT cache_ent *lookup_id(tstate *t, const void *key, const char *fixed_name, int hooked)
{
    cache_ent *c = &t->cache[((uintptr_t)key >> 4) & (CACHE_SIZE - 1)];
    if (likely(c->key == key))
        return c;
    uint32_t v = global_id(key, fixed_name, hooked);
    if (unlikely(c->count))
        leaf_spill(t, c);
    c->key = key;
    c->id = (uint16_t)v;
    c->match = (uint16_t)(v >> 16);
    return c;
}

/* ------------------------------------------------------------------ annotated MPI names */

/* By default (PARLOT_MPI_ARGS unset or not 0) the MPI wrappers name their events after the
 * call and its relevant arguments.  Each distinct name gets one parlot_site here (its address
 * is the key of the function table, like a wrapper's static site), so the id path above is
 * unchanged.  At most g_ann_max distinct names per process: beyond that the plain name is
 * used. */
int parlot_mpi_args = 0;
unsigned g_ann_max = 4096;

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
    if (warn) {                   /* one message per job, as every message here */
        char num[24];
        say("parlot: more than ", num_text(num, g_ann_max), " distinct argument-annotated MPI calls in one "
            "process; further ones are recorded under their plain names (PARLOT_MPI_ARGS_MAX raises the cap)",
            NULL);
    }
    return e ? &e->site : plain;
}

/* ------------------------------------------------------------------ checkpoints */

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

/* Make the thread's file complete (async-signal-safe: the codec writes with pwrite). */
void checkpoint(tstate *t)
{
    if (t->disabled || t->finished || t->fd < 0)
        return;
    t->dirty = 0;
    if (parlot_checkpoint(&t->enc, &t->file) != 0) {
        int err = errno;
        char num[24], en[24];
        t->disabled = 1;
        say("parlot: cannot write the trace of thread ", num_text(num, t->tid), ": ", err_text(err, en),
            "; this thread is no longer traced", NULL);
    }
}

/* A thread's own checkpoint: the .info first, so that it names every id of the data. */
void checkpoint_own(tstate *t)
{
    refresh_info();
    checkpoint(t);
}

/* ------------------------------------------------------------------ thread start/end */

tstate *thread_start(void)
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
        if (slot == MAX_THREADS) {
            char num[24];
            say("parlot: more than ", num_text(num, MAX_THREADS), " threads; further threads are not traced", NULL);
        }
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
    if (g_leaf_probe) {
        void *p = mmap(NULL, sizeof(leafprobe), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        t->probe = p == MAP_FAILED ? NULL : (leafprobe *)p;
    }
    if (g_auto_leaves) {          /* touched page by page, as ids are met */
        void *p = mmap(NULL, sizeof(autocount) * (MAX_IDS + 1), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        t->ac = p == MAP_FAILED ? NULL : (autocount *)p;
    }
    char path[PATH_MAX + 64], num[24];
    path_of(path, sizeof path, num_text(num, tid));
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
        char en[24];
        say("parlot: cannot create ", path, ": ", err_text(errno, en), "; this thread is not traced", NULL);
        t->disabled = 1;
    }
    t->file.pwrite_fn = fd_pwrite;
    t->file.truncate_fn = fd_truncate;
    t->file.ctx = &t->fd;
    checkpoint_own(t);            /* an empty, complete stream from the start */
    if (tid == 0 && g_rank < 0) {
        int r = g_env_rank;       /* the launcher's rank; MPI_Init confirms it */
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
void thread_end(void *arg)
{
    tstate *t = (tstate *)arg;
    t_dead = 1;
    if (!t)
        return;
    enter_busy();
    own_lock(t);
    if (!g_finalized && parlot_on)
        checkpoint_own(t);
    t->finished = 1;
    if (t->fd >= 0)
        close(t->fd);
    t->fd = -1;
    own_unlock(t);
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

/* The tracer's index of the calling thread, -1 when it has none (a thread of the MPI
 * library that never recorded anything). */
int current_tid(void)
{
    tstate *t = t_self;
    if (t)
        return t->tid;
    if (is_main_thread())
        return 0;
    return t_pre_tid > 0 ? t_pre_tid - 1 : -1;
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
    own_lock(t);
    if (unlikely(g_finalized || t->disabled || t->finished || !parlot_on)) {
        own_unlock(t);
        leave_busy();
        return NULL;
    }
    return t;
}

static inline HOT void ev_end(tstate *t)
{
    own_unlock(t);
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
        char num[24];
        t->disabled = 1;
        say("parlot: out of memory for the call stack of thread ", num_text(num, t->tid), NULL);
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

/* The leaf probe: this entry's function was called once more, its caller had it as callee
 * (id 0, an excluded function, counts as a callee that is no leaf). */
static NI void probe_entry(tstate *t, uint32_t id, int hooked)
{
    leafprobe *p = t->probe;
    if (!p)
        return;
    if (t->depth) {
        uint32_t up = t->stack[t->depth - 1].id;
        uint32_t e = up << 16 | id, mask = (1u << PROBE_EDGE_BITS) - 1;
        uint32_t h = (e * 2654435761u) >> (32 - PROBE_EDGE_BITS);
        if (!id || up >= MAX_IDS || id >= MAX_IDS)
            p->caller[up] = 1;
        else
            for (;;) {
                if (p->edges[h] == e)
                    break;
                if (p->edges[h] == 0) {
                    if (p->nedges >= (mask + 1) / 2) {  /* full enough: no more pairs */
                        p->caller[up] = 1;
                        break;
                    }
                    p->edges[h] = e;
                    p->nedges++;
                    break;
                }
                h = (h + 1) & mask;
            }
    }
    if (id && id < MAX_IDS) {
        if (p->calls[id] != UINT32_MAX)
            p->calls[id]++;
        if (hooked)
            p->hookable[id] = 1;
    }
}

/* close the top frame (its return, when it was recorded) */
static inline HOT void pop_frame(tstate *t)
{
    t->depth--;
    if (likely(!(t->stack[t->depth].state & FR_HIDDEN)))
        put(t, 0);
}

static inline HOT void do_enter(tstate *t, const void *key, const char *fixed_name, uintptr_t sp, int hooked)
{
    /* ParLOT's call-stack correction: a frame recorded below the current stack position
     * (the stack grows down) has returned without an exit event (longjmp): close it.  Equal
     * positions are kept: a function inlined into its caller reports the caller's frame. */
    while (t->depth && t->stack[t->depth - 1].sp < sp)
        pop_frame(t);
    cache_ent *c = lookup_id(t, key, fixed_name, hooked);
    if (unlikely(c->match & (KEY_LEAF | KEY_AUTO))) {    /* a leaf: counted, no frame */
        if (unlikely(++c->count >= LEAF_SPILL))
            leaf_spill(t, c);
        return;
    }
    if (unlikely(g_auto_leaves) && auto_enter(t, c, key, hooked))
        return;                   /* it has just become an automatic leaf in this thread */
    uint32_t v = c->id | (uint32_t)c->match << 16;
    if (unlikely(g_leaf_probe))
        probe_entry(t, v & 0xffff, hooked);
    if (unlikely(t->depth == t->cap) && grow_stack(t) != 0)
        return;
    frame *f = &t->stack[t->depth];
    f->key = key;
    f->sp = sp;
    f->id = (uint16_t)v;
    if (likely(!g_filtering)) {
        f->state = 0;
        t->depth++;
        put(t, (uint16_t)v);
        return;
    }
    const frame *caller = t->depth ? f - 1 : NULL;
    f->state = (uint16_t)filter_state(caller, v >> 16);
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
     * not open at all (entered before tracing began, e.g. in a forked child; a listed leaf
     * function) is ignored */
    uint32_t i = d;
    while (i > 0 && t->stack[i - 1].key != key)
        i--;
    if (i == 0)
        return;
    while (t->depth >= i)
        pop_frame(t);
}

/* A fatal fault of this thread inside one of its automatic leaves (parlot_leaves.c): the
 * leaf's entry is recorded, so that the trace ends inside it, as it would with every call
 * recorded.  Called from the signal path, outside any event, when the fault ends the process. */
void record_fault_in(tstate *t, uint16_t id)
{
    int was_busy = t_in_event;
    enter_busy();
    own_lock(t);
    if (!(g_finalized || t->disabled || t->finished || !parlot_on) &&
        !(t->depth && (t->stack[t->depth - 1].state & FR_HIDDEN)))
        put(t, id);
    own_unlock(t);
    if (!was_busy)
        leave_busy();
}

void parlot_fortran_in(void) { t_in_fortran++; }
void parlot_fortran_out(void) { t_in_fortran--; }

void parlot_enter(const parlot_site *site, int flags)
{
    if (unlikely(t_in_fortran))
        return;
    tstate *t = ev_begin();
    if (!t)
        return;
    do_enter(t, site, site->name, (uintptr_t)__builtin_frame_address(0), 0);
    if (flags & PARLOT_CKPT)
        checkpoint_own(t);
    ev_end(t);
}

void parlot_exit(const parlot_site *site)
{
    if (unlikely(t_in_fortran))
        return;
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
    do_enter(t, fn, NULL, (uintptr_t)__builtin_frame_address(0), 0);
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

/* A leaf function (listed, or an automatic leaf of this thread) whose id is in the thread's
 * cache: counted without the lock (the cache is the thread's own; only the end record and the
 * .counted file read it, racily, while the thread runs). */
static inline HOT int leaf_hit(const void *fn, int entry)
{
    tstate *t = t_self;
    if (likely(t)) {
        cache_ent *c = &t->cache[((uintptr_t)fn >> 4) & (CACHE_SIZE - 1)];
        if (c->key == fn && unlikely(c->match & (KEY_LEAF | KEY_AUTO))) {
            if (entry && unlikely(++c->count >= LEAF_SPILL))
                leaf_spill(t, c);
            return 1;
        }
    }
    return 0;
}

/* The hooks: the listed-leaf test first, in a function small enough to need no saved
 * registers, then the event path (its own function: its prologue is paid only by events).
 * The stack position is the hook's own frame, as ever (the call-stack correction compares
 * it with the positions of other events). */
static NI __attribute__((noinline)) void hook_enter(void *fn, uintptr_t sp)
{
    tstate *t = ev_begin();
    if (!t)
        return;
    do_enter(t, fn, NULL, sp, 1);
    ev_end(t);
}

static NI __attribute__((noinline)) void hook_exit(void *fn)
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
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
    if (leaf_hit(fn, 1))
        return;
    hook_enter(fn, sp);
}

PARLOT_API void __cyg_profile_func_exit(void *fn, void *site)
{
    (void)site;
    if (leaf_hit(fn, 0))
        return;
    hook_exit(fn);
}

void parlot_mpi_in(void) { t_in_mpi++; }
void parlot_mpi_out(void) { t_in_mpi--; }
