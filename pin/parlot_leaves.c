/*
 * parlot_leaves.c -- automatic leaves (PARLOT_AUTO_LEAVES, the default; README.md,
 * "Automatic leaves"): tiny hot functions found during the run and from then on counted, not
 * recorded; the counts of every leaf (listed or automatic); the <prefix>.<pid>.counted file.
 *
 * The rule.  Each thread counts, per function id, the calls it recorded and remembers that
 * count whenever the function had a recorded callee (a function, MPI or OpenMP call entered
 * while it was the innermost open frame).  A function entered through the compiler's hook
 * (never an MPI or OpenMP event, never an outlined body, never a -F match) becomes an
 * automatic leaf of the process when some thread has called it more than g_auto_leaves
 * times in a row without a recorded callee.  From then on each thread, at its next entry of
 * it, marks it KEY_AUTO in its own cache (not while the function is open in that thread, so
 * an exit whose entry was recorded is never swallowed) and counts its calls in the cache
 * entry, as for a listed leaf: no lock, no frame, no event.  A function whose callees all
 * became leaves has no recorded callee any more, so it can follow (Domain::x(int), which
 * calls std::vector::operator[]).  Once a leaf, always a leaf: a callee it makes later (a
 * path not taken before) is recorded under the leaf's caller, as with a list (the tracer
 * cannot see that the leaf is its caller: it has no frame).  The first calls, before the
 * function became a leaf, are in the trace; the reader takes them out of both runs
 * (difftrace_mpi/readers/parlot_counted.py), so when a leaf became one does not matter.
 *
 * <prefix>.<pid>.counted names them, one a line, "calls<TAB>counted<TAB>name" (calls: every
 * call of the process, the recorded ones included), written when new leaves have appeared
 * (at the next checkpoint of any thread or the flusher's next round: a process later killed
 * by SIGKILL still names them) and again, with the final counts, when the process ends.
 * Async-signal-safe like the .info writer: static buffers under a spin lock taken with this
 * thread's signals deferred, hand-formatted numbers, open/write/rename.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <ucontext.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "parlot_core.h"

volatile uint8_t g_auto[MAX_IDS + 1];
volatile unsigned long long g_auto_spilled[MAX_IDS + 1];
volatile unsigned g_nauto;
volatile int g_auto_dirty;
static uintptr_t g_auto_end[MAX_IDS + 1];   /* where each automatic leaf's code ends (0: unknown) */

/* A cache entry's counted calls go to the thread's total (a listed leaf: it has no id) or to
 * the function's (an automatic leaf).  The thread's own work; racy readers may miss a spill. */
void leaf_spill(tstate *t, cache_ent *c)
{
    uint32_t n = c->count;
    c->count = 0;
    if (c->match & KEY_AUTO)
        __atomic_fetch_add(&g_auto_spilled[c->id], (unsigned long long)n, __ATOMIC_RELAXED);
    else
        __atomic_store_n(&t->leaf_calls, t->leaf_calls + n, __ATOMIC_RELAXED);
}

static NI int open_in(const tstate *t, const void *key)
{
    for (uint32_t i = 0; i < t->depth; i++)
        if (t->stack[i].key == key)
            return 1;
    return 0;
}

/* An entry about to be recorded (auto leaves on): its caller had a recorded callee; and is
 * this function an automatic leaf now?  Then this call is counted (returns 1: no frame). */
int auto_enter(tstate *t, cache_ent *c, const void *key, int hooked)
{
    autocount *ac = t->ac;
    if (!ac)
        return 0;
    if (t->depth) {
        uint32_t up = t->stack[t->depth - 1].id;
        if (up && up < MAX_IDS)
            ac[up].mark = ac[up].calls;
    }
    uint32_t id = c->id;
    if (!hooked || !id || id >= MAX_IDS || (c->match & (KEY_INCLUDE | KEY_EXCLUDE)))
        return 0;
    if (!__atomic_load_n(&g_auto[id], __ATOMIC_RELAXED)) {
        uint32_t n = ++ac[id].calls;
        if (likely(n - ac[id].mark <= g_auto_leaves) || open_in(t, key))
            return 0;
        if (!g_auto_end[id]) {    /* its extent, for a fault inside it (auto_leaf_fault) */
            pthread_mutex_lock(&g_names_mx);
            size_t size = parlot_symbol_size(key);
            pthread_mutex_unlock(&g_names_mx);
            if (size)
                g_auto_end[id] = (uintptr_t)key + size;
        }
        if (!__atomic_exchange_n(&g_auto[id], 1, __ATOMIC_ACQ_REL)) {
            __atomic_fetch_add(&g_nauto, 1, __ATOMIC_RELAXED);
            __atomic_store_n(&g_auto_dirty, 1, __ATOMIC_RELEASE);
        }
        ac[id].calls--;           /* this call is counted, not recorded */
    } else if (open_in(t, key)) {
        ac[id].calls++;
        return 0;
    }
    c->match |= KEY_AUTO;
    c->count++;
    return 1;
}

/* A fault (SIGSEGV, SIGBUS, SIGFPE, SIGILL raised by the kernel) that ends the process: when
 * the faulting instruction lies in one of this thread's automatic leaves, the leaf's entry is
 * recorded (it has no frame): the trace ends inside it, as with every call recorded, and the
 * reader keeps such a last entry.  Async-signal-safe: the thread's own cache, no look-up. */
void auto_leaf_fault(int sig, const siginfo_t *si, const void *uc)
{
    tstate *t = t_self;
    if (!t || !uc || !si || si->si_code <= 0 || !__atomic_load_n(&g_nauto, __ATOMIC_RELAXED) ||
        !(sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL))
        return;
    uintptr_t pc;
#if defined(__x86_64__)
    pc = (uintptr_t)((const ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    pc = (uintptr_t)((const ucontext_t *)uc)->uc_mcontext.pc;
#else
    return;
#endif
    for (uint32_t k = 0; k < CACHE_SIZE; k++) {
        const cache_ent *c = &t->cache[k];
        if ((c->match & KEY_AUTO) && c->id && c->id < MAX_IDS && (uintptr_t)c->key <= pc &&
            pc < g_auto_end[c->id]) {
            record_fault_in(t, c->id);
            return;
        }
    }
}

/* ------------------------------------------------------------------ counts */

static tstate *thread_at(int i)
{
    return __atomic_load_n(&g_threads[i], __ATOMIC_ACQUIRE);
}

static int nthreads(void)
{
    return g_nthreads < MAX_THREADS ? g_nthreads : MAX_THREADS;
}

/* calls of listed leaf functions counted so far, every thread (racy reads of counters their
 * threads may still raise: exact once they have stopped) */
unsigned long long listed_leaf_calls(void)
{
    unsigned long long sum = 0;
    for (int i = 0, n = nthreads(); i < n; i++) {
        tstate *s = thread_at(i);
        if (!s)
            continue;
        sum += __atomic_load_n(&s->leaf_calls, __ATOMIC_RELAXED);
        for (uint32_t k = 0; k < CACHE_SIZE; k++)
            if (s->cache[k].match & KEY_LEAF)
                sum += s->cache[k].count;
    }
    return sum;
}

/* per automatic leaf id: calls counted (g_counted) and recorded (g_recorded), every thread */
static unsigned long long g_counted[MAX_IDS + 1], g_recorded[MAX_IDS + 1];

static unsigned long long tally(void)
{
    uint32_t n = g_nnames < MAX_IDS ? g_nnames : MAX_IDS - 1;
    unsigned long long total = 0;
    for (uint32_t id = 1; id <= n; id++) {
        g_counted[id] = g_auto[id] ? __atomic_load_n(&g_auto_spilled[id], __ATOMIC_RELAXED) : 0;
        g_recorded[id] = 0;
    }
    for (int i = 0, nt = nthreads(); i < nt; i++) {
        tstate *s = thread_at(i);
        if (!s)
            continue;
        for (uint32_t k = 0; k < CACHE_SIZE; k++) {
            const cache_ent *c = &s->cache[k];
            if ((c->match & KEY_AUTO) && c->id && c->id <= n)
                g_counted[c->id] += c->count;
        }
        if (s->ac)
            for (uint32_t id = 1; id <= n; id++)
                if (g_auto[id])
                    g_recorded[id] += s->ac[id].calls;
    }
    for (uint32_t id = 1; id <= n; id++)
        total += g_counted[id];
    return total;
}

static volatile int g_counted_lock;

unsigned long long auto_leaf_calls(void)
{
    int was_busy = t_in_event;
    enter_busy();
    spin_lock(&g_counted_lock);
    unsigned long long total = tally();
    spin_unlock(&g_counted_lock);
    if (!was_busy)
        leave_busy();
    return total;
}

/* ------------------------------------------------------------------ the .counted file */

static char g_counted_path[PATH_MAX + 64], g_counted_tmp[PATH_MAX + 128], g_counted_buf[8192];

void write_counted(void)
{
    if (!g_auto_leaves || !parlot_on || getpid() != g_pid || !__atomic_load_n(&g_nauto, __ATOMIC_ACQUIRE))
        return;
    int was_busy = t_in_event;
    enter_busy();
    spin_lock(&g_counted_lock);
    __atomic_store_n(&g_auto_dirty, 0, __ATOMIC_RELAXED);
    tally();
    uint32_t n = g_nnames < MAX_IDS ? g_nnames : MAX_IDS - 1;
    int fd = -1, bad = 0;
    if (path_of(g_counted_path, sizeof g_counted_path, "counted") == 0 &&
        tmp_path_of(g_counted_tmp, sizeof g_counted_tmp, "counted") == 0)
        fd = open(g_counted_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        pbuf b;
        pb_init(&b, g_counted_buf, sizeof g_counted_buf);
        pb_str(&b, "# parlot automatic leaves: counted, not recorded, once a thread had called them more than ");
        pb_unum(&b, g_auto_leaves);
        pb_str(&b, " times in a row without a recorded callee (PARLOT_AUTO_LEAVES)\n"
                   "# calls<TAB>counted<TAB>name: calls = all calls in this process, counted = those not in the traces\n");
        for (uint32_t id = 1; id <= n && !bad; id++) {
            if (!g_auto[id] || !g_names[id])
                continue;
            const char *nm = g_names[id];
            size_t l = strlen(nm);
            if (b.n + l + 48 > sizeof g_counted_buf) {
                bad |= write_all(fd, g_counted_buf, b.n);
                b.n = 0;
            }
            pb_unum(&b, g_recorded[id] + g_counted[id]);
            pb_put(&b, "\t", 1);
            pb_unum(&b, g_counted[id]);
            pb_put(&b, "\t", 1);
            if (l + 48 > sizeof g_counted_buf) {      /* a name longer than the buffer */
                bad |= write_all(fd, g_counted_buf, b.n);
                b.n = 0;
                bad |= write_all(fd, nm, l);
            } else
                pb_put(&b, nm, l);
            pb_put(&b, "\n", 1);
        }
        bad |= write_all(fd, g_counted_buf, b.n);
        close(fd);
        if (bad || rename(g_counted_tmp, g_counted_path) != 0) {
            unlink(g_counted_tmp);
            __atomic_store_n(&g_auto_dirty, 1, __ATOMIC_RELAXED);
        }
    }
    spin_unlock(&g_counted_lock);
    if (!was_busy)
        leave_busy();
}
