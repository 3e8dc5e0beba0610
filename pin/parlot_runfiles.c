/*
 * parlot_runfiles.c -- the files of a process besides its thread traces:
 *   <prefix>.<pid>.info    one image block: "+", the executable, one name per id from 1
 *   <prefix>.<pid>.rank    the MPI rank, once known
 *   <prefix>.<pid>.end     how the process ended: key=value lines, written once, atomically
 *   <prefix>.<pid>.leaves  the leaf probe's finding (PARLOT_LEAF_PROBE only)
 *   (<prefix>.<pid>.counted, the automatic leaves: parlot_leaves.c)
 * (docs/parlot-format.md, README.md).
 *
 * The .info and .end writers run in signal handlers too: their text is formatted by hand
 * (parlot_util.c) into static buffers, each guarded by a spin lock taken with this thread's
 * signals deferred (enter_busy), and written with open/write/rename.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "parlot_core.h"

/* ------------------------------------------------------------------ .info and .rank */

uint32_t g_info_written = (uint32_t)-1;
static volatile int g_info_lock;
static char g_info_path[PATH_MAX + 64], g_info_tmp[PATH_MAX + 128];
static char g_info_buf[8192];

/* Rewrite the .info file (temporary file + rename: a reader never sees half of it).
 * Async-signal-safe: hand-formatted names into static buffers, open/write/rename.  Callers
 * keep the name table still (its mutex, or every thread's lock) and have this thread's
 * signals deferred (or blocked), so the spin lock below cannot wait for its own thread. */
void write_info_locked(void)
{
    int was_busy = t_in_event;
    enter_busy();
    spin_lock(&g_info_lock);
    uint32_t n = g_nnames;
    if (path_of(g_info_path, sizeof g_info_path, "info") != 0 ||
        tmp_path_of(g_info_tmp, sizeof g_info_tmp, "info") != 0)
        goto out;
    int fd = open(g_info_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        goto out;
    char *buf = g_info_buf;
    size_t len = 0;
    int bad = 0;
#define PUT(s, l)                                                        \
    do {                                                                 \
        size_t l_ = (l);                                                 \
        if (len + l_ > sizeof g_info_buf) {                              \
            bad |= write_all(fd, buf, len);                              \
            len = 0;                                                     \
        }                                                                \
        if (l_ > sizeof g_info_buf)                                      \
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
    if (!bad && rename(g_info_tmp, g_info_path) == 0)
        g_info_written = n;
    else
        unlink(g_info_tmp);
out:
    spin_unlock(&g_info_lock);
    if (!was_busy)
        leave_busy();
}

void refresh_info(void)
{
    if (unlikely(g_auto_dirty))
        write_counted();          /* new automatic leaves: named on disk soon after */
    if (g_info_written == g_nnames)
        return;
    pthread_mutex_lock(&g_names_mx);
    write_info_locked();
    pthread_mutex_unlock(&g_names_mx);
}

void write_rank_file(int rank)
{
    char path[PATH_MAX + 64], num[24];
    if (path_of(path, sizeof path, "rank") != 0)
        return;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    pbuf b;
    pb_init(&b, num, sizeof num);
    pb_num(&b, rank);
    pb_put(&b, "\n", 1);
    if (write_all(fd, num, b.n) != 0) {
        char en[24];
        say("parlot: cannot write ", path, ": ", err_text(errno, en), NULL);
    }
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

/* ------------------------------------------------------------------ how the process ended */

/* <prefix>.<pid>.end: one "key=value" line per fact (README.md, docs/parlot-format.md):
 *   how=finalized|exit|signal|mpi_error|abort, code, signal, thread, call, error, time_ns,
 *   mpi_calls, open_<kind> (MPI objects still open), leaf_functions/leaf_calls (the leaf
 *   list: what the traces leave out), auto_leaves/auto_leaf_functions/auto_leaf_calls (the
 *   automatic leaves: their threshold, how many, their calls left out), spawned (processes started by MPI_Comm_spawn).
 * Written once, when the process ends (exit status through on_exit, a terminating signal, an
 * MPI error under the default fatal handling, MPI_Abort), before the trace files are made
 * final: whoever ends the process may be killed any moment after (mpiexec kills the other
 * ranks).  The first final record wins: MPI_Abort's exit() or the SIGKILL that follows an
 * abort do not replace "abort".  A record written before a program's own signal handler runs
 * is provisional: an exit from the handler replaces it, a return from it withdraws it.
 * Async-signal-safe: static buffers under g_end_lock, hand-formatted numbers,
 * open/write/rename only; the spin lock is taken with this thread's signals deferred (as for
 * events), so it never waits for its own thread. */
volatile int parlot_mpi_state = PARLOT_MPI_NONE;
volatile unsigned long parlot_mpi_calls = 0;

volatile int g_end_state;
volatile int g_end_sig;
static volatile unsigned long g_spawned;  /* processes started by MPI_Comm_spawn (not traced) */
static volatile int g_end_lock;
static char g_end_text[1024], g_end_path[PATH_MAX + 64], g_end_tmp[PATH_MAX + 128], g_end_open[256];

/* "key=" value "\n"; a value is one line of printable ASCII, at most 200 characters */
static NI void eb_kv(pbuf *b, const char *key, const char *val)
{
    pb_str(b, key);
    pb_put(b, "=", 1);
    size_t i = 0;
    for (; val[i] && i < 200; i++) {
        char c = val[i];
        pb_put(b, (c >= 0x20 && c < 0x7f) ? &c : "?", 1);
    }
    pb_put(b, "\n", 1);
}

static NI void eb_knum(pbuf *b, const char *key, long long v)
{
    pb_str(b, key);
    pb_put(b, "=", 1);
    pb_num(b, v);
    pb_put(b, "\n", 1);
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

/* Write the record (final or provisional); returns 1 when written. */
int end_write(int final, const char *how, int have_code, long code, int sig, const char *call, const char *error)
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
        pbuf b;
        pb_init(&b, g_end_text, sizeof g_end_text);
        eb_kv(&b, "how", how);
        if (have_code)
            eb_knum(&b, "code", code);
        if (sig > 0) {
            const char *nm = signal_name(sig);
            if (nm)
                eb_kv(&b, "signal", nm);
            else {
                pb_str(&b, "signal=SIG");
                pb_num(&b, sig);
                pb_put(&b, "\n", 1);
            }
        }
        int tid = current_tid();
        if (tid >= 0)
            eb_knum(&b, "thread", tid);
        if (call)
            eb_kv(&b, "call", call);
        if (error)
            eb_kv(&b, "error", error);
        pb_str(&b, "time_ns=");
        pb_unum(&b, (unsigned long long)now.tv_sec * 1000000000ull + (unsigned long long)now.tv_nsec);
        pb_put(&b, "\n", 1);
        pb_str(&b, "mpi_calls=");
        pb_unum(&b, __atomic_load_n(&parlot_mpi_calls, __ATOMIC_RELAXED));
        pb_put(&b, "\n", 1);
        /* MPI objects still open (open_requests=1 ...): leaks show at the rank that leaked */
        pb_put(&b, g_end_open, (size_t)parlot_mpi_open_record(g_end_open, (int)sizeof g_end_open));
        if (g_spawned)            /* processes the run does not hold: say it */
            eb_knum(&b, "spawned", (long long)__atomic_load_n(&g_spawned, __ATOMIC_RELAXED));
        if (g_has_leaves) {       /* what the traces leave out: say it */
            pb_str(&b, "leaf_functions=");
            pb_unum(&b, __atomic_load_n(&g_leaf_fns, __ATOMIC_RELAXED));
            pb_str(&b, "\nleaf_calls=");
            pb_unum(&b, listed_leaf_calls());
            pb_put(&b, "\n", 1);
        }
        if (g_auto_leaves && g_nauto) {   /* automatic leaves: the threshold, what they left out */
            pb_str(&b, "auto_leaves=");
            pb_unum(&b, g_auto_leaves);
            pb_str(&b, "\nauto_leaf_functions=");
            pb_unum(&b, __atomic_load_n(&g_nauto, __ATOMIC_RELAXED));
            pb_str(&b, "\nauto_leaf_calls=");
            pb_unum(&b, auto_leaf_calls());
            pb_put(&b, "\n", 1);
        }
        size_t len = b.n < sizeof g_end_text ? b.n : sizeof g_end_text;

        if (path_of(g_end_path, sizeof g_end_path, "end") == 0 &&
            tmp_path_of(g_end_tmp, sizeof g_end_tmp, "end") == 0) {
            int fd = open(g_end_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            if (fd >= 0) {
                int bad = write_all(fd, g_end_text, len);
                close(fd);
                if (!bad && rename(g_end_tmp, g_end_path) == 0) {
                    g_end_state = final ? END_FINAL : END_PROVISIONAL;
                    g_end_sig = final ? 0 : sig;
                    written = 1;
                } else
                    unlink(g_end_tmp);
            }
        }
    }
    spin_unlock(&g_end_lock);
    if (!was_busy)
        leave_busy();
    return written;
}

/* A program's signal handler returned: the process goes on, the provisional record goes. */
void end_withdraw(void)
{
    if (!parlot_on || getpid() != g_pid)
        return;
    int was_busy = t_in_event;
    enter_busy();
    spin_lock(&g_end_lock);
    if (g_end_state == END_PROVISIONAL) {
        if (path_of(g_end_path, sizeof g_end_path, "end") == 0)
            unlink(g_end_path);
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
 * MPI_Finalize).  A signal whose handler called exit is kept as signal=.  The code recorded is
 * the status the parent sees: its low 8 bits (exit(271) is 15 to the shell; the bits above
 * are whatever the caller passed, which is not always a meaningful value). */
void on_exit_handler(int status, void *arg)
{
    (void)arg;
    const char *how = parlot_mpi_state == PARLOT_MPI_INITED ? "exit" : "finalized";
    end_write(1, how, 1, status & 0xff, g_end_state == END_PROVISIONAL ? g_end_sig : 0, NULL, NULL);
    write_leaf_probe();
    parlot_sync_all(1);
}

/* ------------------------------------------------------------------ MPI_Comm_spawn */

/* The processes MPI_Comm_spawn starts are not traced: parlot-run does not reach them (the
 * launcher starts them with its own environment), and a preloaded one leaves the run (below).
 * Their parents' end records say how many there were. */
void parlot_count_spawned(int n)
{
    if (!parlot_on || n <= 0)
        return;
    if (__atomic_fetch_add(&g_spawned, (unsigned long)n, __ATOMIC_RELAXED) == 0) {
        char num[24];
        say("parlot: the ", num_text(num, n), " processes started by MPI_Comm_spawn are not traced", NULL);
    }
}

/* A process started by MPI_Comm_spawn (MPI_Init found a parent) under a preloaded tracer:
 * its MPI_COMM_WORLD ranks repeat its parents', which would make the run unreadable, so it
 * stops tracing and removes its files.  They are made final first, so that no thread, the
 * flusher or a signal handler writes one again. */
void parlot_leave_run(void)
{
    if (!parlot_on)
        return;
    parlot_sync_all(1);
    parlot_on = 0;
    char path[PATH_MAX + 64], num[24];
    static const char *const own[] = {"rank", "end", "leaves", "info"};
    for (int tid = 0; tid < g_next_tid; tid++)
        if (path_of(path, sizeof path, num_text(num, tid)) == 0)
            unlink(path);
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (path_of(path, sizeof path, own[i]) == 0)
            unlink(path);
}

/* ------------------------------------------------------------------ the leaf probe */

/* PARLOT_LEAF_PROBE=N: <prefix>.<pid>.leaves lists, one name per line, the functions
 * entered through -finstrument-functions' hook that some thread called at least N times and
 * whose calls, in every thread, had no recorded callee but functions listed too: leaves, and
 * functions whose whole subtree is listed (Domain::x(int) calling only
 * std::vector::operator[]); never one that had an MPI or OpenMP call, or an unlisted
 * function, under it.  What PARLOT_LEAVES (parlot-run -l) may leave out of later runs.
 * Written once, at a normal exit (not from a signal handler: a crashed probe run lists
 * nothing). */
void write_leaf_probe(void)
{
    static volatile int done;
    if (!g_leaf_probe || !parlot_on || getpid() != g_pid || __atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL))
        return;
    char path[PATH_MAX + 64], tmp[PATH_MAX + 128];
    if (path_of(path, sizeof path, "leaves") != 0 || tmp_path_of(tmp, sizeof tmp, "leaves") != 0)
        return;
    /* signals wait meanwhile: a handler completing every file must not find the flusher
     * waiting for the name table this thread holds */
    int was_busy = t_in_event;
    enter_busy();
    pthread_mutex_lock(&g_names_mx);
    uint32_t n = g_nnames < MAX_IDS ? g_nnames : MAX_IDS - 1;
    int nt = g_nthreads < MAX_THREADS ? g_nthreads : MAX_THREADS;
    uint8_t *ok = (uint8_t *)calloc(n + 1, 1);
    if (!ok) {
        pthread_mutex_unlock(&g_names_mx);
        if (!was_busy)
            leave_busy();
        return;
    }
    /* candidates: hot in some thread, hooked, never a caller beyond the pair sets */
    for (uint32_t id = 1; id <= n; id++) {
        int hot = 0, hooked = 0, caller = 0;
        for (int i = 0; i < nt; i++) {
            tstate *s = __atomic_load_n(&g_threads[i], __ATOMIC_ACQUIRE);
            if (!s || !s->probe)
                continue;
            hot |= s->probe->calls[id] >= g_leaf_probe;
            hooked |= s->probe->hookable[id];
            caller |= s->probe->caller[id];
        }
        ok[id] = hot && hooked && !caller && g_names[id];
    }
    /* then the largest set closed under "every callee is in it": drop a candidate with a
     * callee outside, until nothing changes */
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < nt; i++) {
            tstate *s = __atomic_load_n(&g_threads[i], __ATOMIC_ACQUIRE);
            if (!s || !s->probe)
                continue;
            for (uint32_t k = 0; k < (1u << PROBE_EDGE_BITS); k++) {
                uint32_t e = s->probe->edges[k], up = e >> 16, down = e & 0xffff;
                if (e && up <= n && ok[up] && (down > n || !ok[down])) {
                    ok[up] = 0;
                    changed = 1;
                }
            }
        }
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int bad = fd < 0;
    if (fd >= 0) {
        char head[200], num[24];
        pbuf h;
        pb_init(&h, head, sizeof head);
        pb_str(&h, "# parlot leaf probe: called at least ");
        pb_str(&h, num_text(num, (long long)g_leaf_probe));
        pb_str(&h, " times in one thread, never with a recorded callee but listed ones\n");
        bad |= write_all(fd, head, h.n < sizeof head ? h.n : sizeof head);
        for (uint32_t id = 1; id <= n && !bad; id++)
            if (ok[id]) {
                bad |= write_all(fd, g_names[id], strlen(g_names[id]));
                bad |= write_all(fd, "\n", 1);
            }
        close(fd);
    }
    pthread_mutex_unlock(&g_names_mx);
    free(ok);
    if (fd >= 0 && (bad || rename(tmp, path) != 0))
        unlink(tmp);
    if (!was_busy)
        leave_busy();
}
