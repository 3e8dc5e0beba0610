/*
 * parlot_core.h -- what the modules of the tracer's core share (not an installed header;
 * the MPI and OpenMP wrappers see only parlot_internal.h).
 *
 * The core of libparlot.so, one job per file:
 *   parlot_events.c     per-thread state, function ids, the -finstrument-functions hooks,
 *                       the event path (the only hot code), the leaf filter
 *   parlot_leaves.c     automatic leaves (the default): the rule, leaf counts, .counted
 *   parlot_symbols.c    names of functions from the ELF symbol tables (symbolisation)
 *   parlot_runfiles.c   the run's files besides the traces: .info, .rank, the .end record,
 *                       the probe's .leaves
 *   parlot_signals.c    completing every file at once (sync), the background flusher, the
 *                       signal handlers and the sigaction/signal interposition
 *   parlot_interpose.c  pthread_create (thread indices), fork, exec*
 *   parlot_setup.c      the constructor/destructor, the environment, the trace-time filters
 *   parlot_util.c       async-signal-safe helpers: formatting into a caller's buffer,
 *                       write loops, the one-message-per-job `say`, errno texts
 *
 * Every symbol here has hidden visibility (the library is built with -fvisibility=hidden):
 * only the hooks and the interposed functions are exported.
 */
#ifndef PARLOT_CORE_H
#define PARLOT_CORE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

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
#define TLS_IE __attribute__((tls_model("initial-exec")))

/* ------------------------------------------------------------------ per-thread state */

typedef struct frame {
    const void *key;              /* function address or parlot_site */
    uintptr_t sp;                 /* stack position at the entry (call-stack correction) */
    uint32_t shown;               /* recorded frames open down to this one, itself included */
    uint16_t state;               /* FR_* (filters; 0 without them) */
    uint16_t id;                  /* its function id (the leaf probe marks callers by it) */
} frame;

/* Frame states under the trace-time filters (PARLOT_EXCLUDE, PARLOT_INCLUDE, PARLOT_DEPTH).
 * A hidden frame is kept on the stack like any other (so exits and the call-stack
 * correction match as without filters) but neither its entry nor its return is written. */
enum {
    FR_HIDDEN = 1,                /* not recorded */
    FR_EXCLUDED = 2,              /* an excluded function or a call under one */
    FR_INCLUDED = 4               /* an included function or a call under one */
};

/* What the filters say about a function, whatever its caller (kept with its id).
 * KEY_LEAF: a function of the leaf list (PARLOT_LEAVES): counted, never recorded, no frame.
 * KEY_AUTO: an automatic leaf (PARLOT_AUTO_LEAVES), in one thread's cache only: this thread
 * counts its calls from now on (set by the thread itself, never while the function is open
 * in it; never in the process's table, so a cache refill asks again: auto_enter). */
enum { KEY_EXCLUDE = 1, KEY_INCLUDE = 2, KEY_LEAF = 4, KEY_AUTO = 8 };

typedef struct cache_ent {
    const void *key;
    uint16_t id;
    uint16_t match;               /* KEY_* */
    uint32_t count;               /* KEY_LEAF, KEY_AUTO: calls counted since it was filled or
                                   * spilled (leaf_spill: at LEAF_SPILL, or when replaced) */
} cache_ent;
#define LEAF_SPILL (1u << 31)

/* Automatic leaves, per thread and function id: calls recorded, and the value of calls when
 * the function last had a recorded callee (calls - mark: its calls in a row without one). */
typedef struct autocount {
    uint32_t calls, mark;
} autocount;

/* The leaf probe (PARLOT_LEAF_PROBE=N): per function id of this thread, its calls, and the
 * caller -> callee pairs seen (a set; when it is full, a caller is simply marked as one, so
 * it cannot be listed).  Lazily mapped (pages are touched as ids and pairs appear). */
#define PROBE_EDGE_BITS 16
typedef struct leafprobe {
    uint32_t calls[MAX_IDS + 1];
    uint8_t caller[MAX_IDS + 1];  /* 1: had a callee not kept in edges (the set was full) */
    uint8_t hookable[MAX_IDS + 1];/* 1: entered through __cyg_profile_func_enter */
    uint32_t nedges;
    uint32_t edges[1u << PROBE_EDGE_BITS];   /* caller << 16 | callee; 0 = free */
} leafprobe;

typedef struct tstate {
    volatile int lock;            /* a syncer's claim (own_lock: also the owner's, without membarrier) */
    volatile int busy;            /* the owner is recording an event (with membarrier) */
    int tid;
    int fd;
    int disabled;                 /* an I/O error: this thread records nothing more */
    int finished;                 /* thread exited: file final, state released */
    volatile int dirty;           /* events recorded since the last checkpoint */
    unsigned long leaf_calls;     /* calls of listed leaf functions, counted, not recorded */
    leafprobe *probe;             /* PARLOT_LEAF_PROBE only */
    autocount *ac;                /* PARLOT_AUTO_LEAVES only: [MAX_IDS + 1], lazily mapped */
    parlot_file file;
    frame *stack;
    uint32_t depth, cap;
    cache_ent cache[CACHE_SIZE];
    parlot_enc enc;               /* large (140 kB): last */
} tstate;

extern __thread tstate *t_self TLS_IE;
extern __thread int t_pre_tid TLS_IE;          /* tid + 1 given at creation */
extern __thread int t_dead TLS_IE;             /* thread has exited */
extern __thread int t_in_mpi TLS_IE;
extern __thread int t_in_sync TLS_IE;
/* inside an event (or other tracer work): a signal for this thread waits until it is done */
extern __thread volatile sig_atomic_t t_in_event TLS_IE;
extern __thread volatile sig_atomic_t t_pending_sig TLS_IE;
extern __thread siginfo_t t_pending_info TLS_IE;

/* ------------------------------------------------------------------ process state */

/* parlot_setup.c */
extern int g_warn_errno;
extern volatile int g_finalized;          /* files are final: drop further events */
extern int g_pid;
extern char g_dir[PATH_MAX];
extern char g_prefix[256];
extern char g_exe[PATH_MAX];
extern int g_quiet;
extern int g_env_rank;                    /* the launcher's rank (PMI_RANK, ...), -1: none */
extern int g_flush_ms;
extern pthread_key_t g_key;
/* trace-time filters (README.md, "Filters"): regular expressions on the names, a depth limit */
extern int g_filtering;                   /* any of them is set */
extern int g_has_exclude, g_has_include;
extern uint32_t g_max_depth;              /* 0 = no limit */
/* leaf filter (README.md, "Leaf functions"): the list, and the probe's threshold */
extern int g_has_leaves;                  /* PARLOT_LEAVES named a usable list */
extern unsigned long g_leaf_probe;        /* PARLOT_LEAF_PROBE: calls per thread; 0 = off */
/* automatic leaves (README.md, "Automatic leaves"): a function is counted, not recorded, in
 * every thread once some thread called it more than g_auto_leaves times in a row with no
 * recorded callee; 0 = off (PARLOT_AUTO_LEAVES=0, parlot-run -e; -l and -P turn it off) */
#define AUTO_LEAVES_DEFAULT 10000ul
extern unsigned long g_auto_leaves;
int parlot_name_matches(const char *name, int *exclude, int *include, int *leaf) NI;

/* parlot_events.c */
extern tstate *volatile g_threads[MAX_THREADS];
extern volatile int g_nthreads;           /* slots used in g_threads */
extern volatile int g_next_tid;           /* 0 is the main thread */
extern volatile int g_rank;
extern char *g_names[MAX_IDS + 1];
extern volatile uint32_t g_nnames;        /* ids 1..g_nnames are in use */
extern pthread_mutex_t g_names_mx;
extern unsigned g_ann_max;
extern volatile int g_flusher_started;
extern volatile unsigned g_leaf_fns;      /* distinct listed leaf functions met */
extern volatile uint8_t g_auto[MAX_IDS + 1];            /* 1: an automatic leaf (by id) */
extern volatile unsigned long long g_auto_spilled[MAX_IDS + 1];   /* its counted calls spilled */
extern volatile unsigned g_nauto;         /* automatic leaves so far */
extern volatile int g_auto_dirty;         /* the .counted file is behind */
void leaf_spill(tstate *t, cache_ent *c) NI;
int auto_enter(tstate *t, cache_ent *c, const void *key, int hooked) NI;
void auto_leaf_fault(int sig, const siginfo_t *si, const void *uc) NI;   /* parlot_leaves.c */
void record_fault_in(tstate *t, uint16_t id) NI;                       /* parlot_events.c */
tstate *thread_start(void) NI;
void thread_end(void *arg) NI;
void checkpoint(tstate *t) NI;
void checkpoint_own(tstate *t) NI;
int current_tid(void) NI;

/* parlot_symbols.c: the name of the function at fn (malloc'd, one line) */
char *parlot_symbolize(const void *fn) NI;
size_t parlot_symbol_size(const void *fn) NI;     /* 0: unknown (under g_names_mx) */

/* parlot_runfiles.c */
extern uint32_t g_info_written;           /* names in the .info file on disk */
void write_info_locked(void) NI;
void refresh_info(void) NI;
void write_rank_file(int rank) NI;
int end_write(int final, const char *how, int have_code, long code, int sig, const char *call,
              const char *error) NI;
void end_withdraw(void) NI;
void on_exit_handler(int status, void *arg) NI;
void write_leaf_probe(void) NI;
void write_counted(void) NI;              /* <prefix>.<pid>.counted: the automatic leaves */
unsigned long long listed_leaf_calls(void) NI;
unsigned long long auto_leaf_calls(void) NI;
enum { END_NONE = 0, END_PROVISIONAL = 1, END_FINAL = 2 };
extern volatile int g_end_state;
extern volatile int g_end_sig;            /* the signal of a provisional record */

/* parlot_signals.c */
void handle_signal_now(int sig, siginfo_t *si, void *uc) NI;
void start_flusher(void) NI;
void setup_signals(void) NI;

/* parlot_interpose.c */
void at_fork_child(void) NI;

/* ------------------------------------------------------------------ parlot_util.c */

/* Text built into a caller's buffer: no allocation, no stdio, no locale (async-signal-safe).
 * Output past the capacity is dropped; pb_cstr ends it with a NUL (within the capacity). */
typedef struct pbuf {
    char *s;
    size_t cap, n;
} pbuf;
void pb_init(pbuf *b, char *s, size_t cap) NI;
void pb_put(pbuf *b, const char *p, size_t l) NI;
void pb_str(pbuf *b, const char *p) NI;
void pb_unum(pbuf *b, unsigned long long u) NI;
void pb_num(pbuf *b, long long v) NI;
void pb_hex(pbuf *b, unsigned long long u) NI;    /* lower case, no 0x */
int pb_full(const pbuf *b) NI;                    /* something was dropped */
const char *pb_cstr(pbuf *b) NI;

/* "<dir>/<prefix>.<pid>.<suffix>" and the hidden temporary name of a writer
 * "<dir>/.<prefix>.<pid>.<suffix>.<tid>.tmp"; 0, or -1 when it does not fit */
int path_of(char *out, size_t n, const char *suffix) NI;
int tmp_path_of(char *out, size_t n, const char *suffix) NI;

/* The decimal text of v in num (24 bytes), returned. */
const char *num_text(char num[24], long long v) NI;
/* glibc's strerror text of the common errors, else "error N" in num (24 bytes). */
const char *err_text(int err, char num[24]) NI;

/* One message per job (only the process of rank 0, or an unranked one, speaks): the
 * strings up to the NULL, one line on stderr.  Async-signal-safe: small stack chunks and
 * write(2). */
void say(const char *first, ...) __attribute__((sentinel)) NI;

int write_all(int fd, const void *p, size_t n) NI;
int pwrite_all(int fd, const void *p, size_t n, off_t off) NI;
int is_main_thread(void) NI;
int env_rank(void) NI;

/* A spin lock: an uncontended atomic exchange; waiting, the CPU is told so (x86 pause,
 * aarch64/arm yield, POWER's low priority hint, else a compiler barrier), and after 64
 * spins the thread yields the CPU (sched_yield: a bare system call). */
static inline HOT void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield" ::: "memory");
#elif defined(__powerpc__) || defined(__powerpc64__)
    __asm__ __volatile__("or 27,27,27" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

static inline HOT void spin_lock(volatile int *l)
{
    unsigned spins = 0;
    while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE)) {
        while (__atomic_load_n(l, __ATOMIC_RELAXED)) {
            if (++spins > 64)
                sched_yield();
            else
                cpu_relax();
        }
    }
}

static inline HOT void spin_unlock(volatile int *l)
{
    __atomic_store_n(l, 0, __ATOMIC_RELEASE);
}

/* A thread's state is shared by its owner (every event) and the syncers (the flusher, a
 * signal handler completing every file, exit): never both at once.  Where the kernel has
 * membarrier(2) (Linux 4.14+, registered by the constructor: g_asym), the owner takes it
 * with plain stores and loads -- busy = 1, then it checks that no syncer has claimed it --
 * and a syncer claims it (an atomic exchange on lock), makes every running thread of the
 * process execute a full memory barrier (parlot_fence_all), then waits until busy is 0:
 * either the owner's busy = 1 is visible to the syncer, or the syncer's claim to the owner,
 * who then steps back and waits (Dekker's mutual exclusion, its heavy fence on the rare
 * side).  The events then pay no locked instruction: the atomic exchange and the store
 * buffer drain it forces were most of an event's cost (perf, real LULESH).  Without
 * membarrier, owner and syncers take lock with an atomic exchange, as before. */
extern int g_asym;
void parlot_fence_setup(void) NI;
void parlot_fence_all(void) NI;

static inline HOT void own_lock(tstate *t)
{
    if (likely(g_asym)) {
        for (;;) {
            __atomic_store_n(&t->busy, 1, __ATOMIC_RELAXED);
            __atomic_signal_fence(__ATOMIC_SEQ_CST);   /* the compiler keeps the order */
            if (likely(!__atomic_load_n(&t->lock, __ATOMIC_ACQUIRE)))
                return;
            __atomic_store_n(&t->busy, 0, __ATOMIC_RELEASE);
            while (__atomic_load_n(&t->lock, __ATOMIC_ACQUIRE))
                cpu_relax();
        }
    }
    if (unlikely(__atomic_exchange_n(&t->lock, 1, __ATOMIC_ACQUIRE)))
        spin_lock(&t->lock);
}

static inline HOT void own_unlock(tstate *t)
{
    if (likely(g_asym))
        __atomic_store_n(&t->busy, 0, __ATOMIC_RELEASE);
    else
        spin_unlock(&t->lock);
}

/* A syncer: claims (waiting for other syncers), then -- for all its claims at once -- one
 * parlot_fence_all() and a wait (or a test) for the owners to be outside their events. */
static inline HOT void sync_claim(tstate *t)
{
    spin_lock(&t->lock);
}

static inline HOT int sync_tryclaim(tstate *t)
{
    return !__atomic_exchange_n(&t->lock, 1, __ATOMIC_ACQUIRE);
}

static inline HOT int owner_busy(tstate *t)
{
    return g_asym && __atomic_load_n(&t->busy, __ATOMIC_ACQUIRE);
}

static inline HOT void sync_release(tstate *t)
{
    spin_unlock(&t->lock);
}

/* Tracer work on this thread begins: a signal for it waits (see on_signal). */
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

#endif
