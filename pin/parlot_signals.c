/*
 * parlot_signals.c -- completing every file of the process at once (parlot_sync_all: at a
 * terminating signal, at exit, before exec), the background flusher, and signals: the
 * tracer's handler in front of the program's for the signals that can end the process, and
 * the sigaction/signal interposition that keeps the program's view of them its own.
 *
 * The handler path (on_signal -> handle_signal_now -> end_write, parlot_sync_all ->
 * write_info_locked, checkpoint) is async-signal-safe: no allocation, no stdio, no
 * formatting but parlot_util.c's, only small buffers on the stack (the handler runs on the
 * program's alternate signal stack when it has one: SA_ONSTACK); the rest is in static
 * buffers guarded by spin locks taken with this thread's signals deferred.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "parlot_core.h"

/* ------------------------------------------------------------------ all threads at once */

static volatile int g_sync_lock;
static tstate *g_held[MAX_THREADS];       /* the thread states a syncer holds (g_sync_lock) */

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
        tstate **held = g_held;   /* static: no 32 KiB array on a signal stack */
        int nh = 0;
        for (int i = 0; i < n; i++) {
            tstate *s = __atomic_load_n(&g_threads[i], __ATOMIC_ACQUIRE);
            if (!s)
                continue;
            sync_claim(s);
            held[nh++] = s;
        }
        if (g_asym) {             /* then wait for the owners still inside an event */
            parlot_fence_all();
            for (int i = 0; i < nh; i++)
                while (owner_busy(held[i]))
                    cpu_relax();
        }
        /* every thread is outside an event now: nobody holds the name table.  The names
         * first, then the data that uses them (as a thread's own checkpoint does): a
         * process killed in between (mpiexec's SIGKILL after one rank aborts) leaves a
         * .info naming every id of its files, never a file with ids it does not name. */
        if (g_info_written != g_nnames)
            write_info_locked();
        if (final || g_auto_dirty)
            write_counted();      /* the automatic leaves' names and counts */
        for (int i = 0; i < nh; i++)
            checkpoint(held[i]);
        if (final)
            g_finalized = 1;
        for (int i = 0; i < nh; i++)
            sync_release(held[i]);
    }
    spin_unlock(&g_sync_lock);
    t_in_sync = 0;
    if (!was_busy)
        leave_busy();
}

/* ------------------------------------------------------------------ background flusher */

/* Every PARLOT_FLUSH_MS (default 100 ms) a tracer thread completes the files of the threads
 * that recorded events since their last checkpoint, when they are not inside an event (it
 * never waits for them).  So a blocked or idle thread's file is complete within that time,
 * even if the process is then killed with SIGKILL (as mpiexec does to the other ranks when
 * one rank dies).  The thread records nothing and has no thread index. */
int g_flush_ms = 100;
static tstate *g_flush_held[MAX_THREADS];   /* the flusher's claims of one round */

static NI void *flusher_main(void *arg)
{
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    struct timespec ts = {g_flush_ms / 1000, (long)(g_flush_ms % 1000) * 1000000L};
    while (parlot_on && !g_finalized) {
        nanosleep(&ts, NULL);
        int n = g_nthreads < MAX_THREADS ? g_nthreads : MAX_THREADS, nh = 0;
        for (int i = 0; i < n && !g_finalized; i++) {
            tstate *s = __atomic_load_n(&g_threads[i], __ATOMIC_ACQUIRE);
            if (!s || !s->dirty || s->finished)
                continue;
            if (sync_tryclaim(s))  /* else another syncer has it */
                g_flush_held[nh++] = s;
        }
        if (nh && g_asym)
            parlot_fence_all();
        for (int i = 0; i < nh; i++) {
            tstate *s = g_flush_held[i];
            /* busy: inside an event; it will be dirty next time too */
            if (!owner_busy(s) && !g_finalized && !s->finished && parlot_on) {
                refresh_info();
                checkpoint(s);
            }
            sync_release(s);
        }
    }
    return NULL;
}

void start_flusher(void)
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
    /* born with every signal blocked: a signal for the process must never land in the
     * flusher (no thread index), not even before flusher_main blocks them itself */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    if (real(&th, &attr, flusher_main, NULL) != 0)
        g_flusher_started = 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
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

void handle_signal_now(int sig, siginfo_t *si, void *uc)
{
    struct sigaction app = g_app_act[sig];
    int has_handler = (app.sa_flags & SA_SIGINFO) ? app.sa_sigaction != NULL
                                                  : (app.sa_handler != SIG_DFL && app.sa_handler != SIG_IGN);
    if (!has_handler && app.sa_handler == SIG_IGN && !(app.sa_flags & SA_SIGINFO))
        return;
    if (!has_handler)             /* a fault inside an automatic leaf: the trace ends in it */
        auto_leaf_fault(sig, si, uc);
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
        if ((sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL) && si && si->si_code > 0) {
            /* a fault inside the tracer itself (si_code > 0: raised by the kernel for this
             * instruction): no flushing from here; the return re-executes the instruction,
             * which dies of the default action.  The same signal sent by kill, tkill or
             * sigqueue (si_code <= 0) would not come back: it waits like any other, below. */
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

void setup_signals(void)
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

