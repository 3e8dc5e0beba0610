/*
 * parlot_interpose.c -- what the tracer interposes besides MPI and OpenMP: pthread_create
 * (thread indices in creation order, as Pin numbers them), fork (the child is not traced)
 * and the exec family (the files are made final first; the new image is told not to trace
 * itself under the same pid).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <alloca.h>
#include <unistd.h>

#include "parlot_core.h"

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

void at_fork_child(void)
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

