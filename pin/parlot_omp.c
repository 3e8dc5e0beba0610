/*
 * parlot_omp.c -- libgomp entry points of libparlot.so (GCC's OpenMP runtime).
 *
 * Each wrapped call becomes an entry and an exit event named like the libgomp symbol
 * (GOMP_parallel, GOMP_critical_start, GOMP_barrier, omp_set_lock, ...).  The functions
 * that start a parallel region get the outlined body replaced by a trampoline, so every
 * thread of the team gets its trace file and records the body (GCC does not instrument the
 * outlined `main._omp_fn.N` functions with -finstrument-functions; the trampoline records
 * its entry and exit, named from the symbol table, as Pin's main-image tool would).
 *
 * The prototypes follow libgomp's ABI (GCC 4.9+ for GOMP_parallel*, GCC 9 for
 * GOMP_parallel_reductions).  GOMP_task is not wrapped: its argument list changes between
 * GCC versions.
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdlib.h>

#include "parlot_internal.h"

typedef void (*omp_body)(void *);

typedef struct region {
    omp_body fn;
    void *data;
} region;

static NI void region_tramp(void *p)
{
    region *r = (region *)p;
    parlot_thread_touch();
    parlot_enter_fn((void *)r->fn);
    r->fn(r->data);
    parlot_exit_fn((void *)r->fn);
}

#define REAL(var, type, name)                                                  \
    static __typeof__(type) var;                                               \
    if (__builtin_expect(!var, 0))                                             \
        var = (type)parlot_real(name)

/* ---- regions */

PARLOT_API void GOMP_parallel(omp_body fn, void *data, unsigned num_threads, unsigned flags)
{
    static const parlot_site site = {"GOMP_parallel"};
    REAL(real, void (*)(omp_body, void *, unsigned, unsigned), "GOMP_parallel");
    if (!parlot_on) {
        real(fn, data, num_threads, flags);
        return;
    }
    region r = {fn, data};
    parlot_enter(&site, 0);
    real(region_tramp, &r, num_threads, flags);
    parlot_exit(&site);
}

PARLOT_API unsigned GOMP_parallel_reductions(omp_body fn, void *data, unsigned num_threads, unsigned flags)
{
    static const parlot_site site = {"GOMP_parallel_reductions"};
    REAL(real, unsigned (*)(omp_body, void *, unsigned, unsigned), "GOMP_parallel_reductions");
    if (!parlot_on)
        return real(fn, data, num_threads, flags);
    region r = {fn, data};
    parlot_enter(&site, 0);
    unsigned rc = real(region_tramp, &r, num_threads, flags);
    parlot_exit(&site);
    return rc;
}

#define PAR_LOOP(name)                                                                        \
    PARLOT_API void name(omp_body fn, void *data, unsigned num_threads, long start, long end, \
                         long incr, long chunk_size, unsigned flags)                          \
    {                                                                                         \
        static const parlot_site site = {#name};                                              \
        REAL(real, void (*)(omp_body, void *, unsigned, long, long, long, long, unsigned), #name); \
        if (!parlot_on) {                                                                     \
            real(fn, data, num_threads, start, end, incr, chunk_size, flags);                 \
            return;                                                                           \
        }                                                                                     \
        region r = {fn, data};                                                                \
        parlot_enter(&site, 0);                                                               \
        real(region_tramp, &r, num_threads, start, end, incr, chunk_size, flags);             \
        parlot_exit(&site);                                                                   \
    }

PAR_LOOP(GOMP_parallel_loop_static)
PAR_LOOP(GOMP_parallel_loop_dynamic)
PAR_LOOP(GOMP_parallel_loop_guided)
PAR_LOOP(GOMP_parallel_loop_nonmonotonic_dynamic)
PAR_LOOP(GOMP_parallel_loop_nonmonotonic_guided)

#define PAR_LOOP_RT(name)                                                                     \
    PARLOT_API void name(omp_body fn, void *data, unsigned num_threads, long start, long end, \
                         long incr, unsigned flags)                                           \
    {                                                                                         \
        static const parlot_site site = {#name};                                              \
        REAL(real, void (*)(omp_body, void *, unsigned, long, long, long, unsigned), #name);  \
        if (!parlot_on) {                                                                     \
            real(fn, data, num_threads, start, end, incr, flags);                             \
            return;                                                                           \
        }                                                                                     \
        region r = {fn, data};                                                                \
        parlot_enter(&site, 0);                                                               \
        real(region_tramp, &r, num_threads, start, end, incr, flags);                         \
        parlot_exit(&site);                                                                   \
    }

PAR_LOOP_RT(GOMP_parallel_loop_runtime)
PAR_LOOP_RT(GOMP_parallel_loop_nonmonotonic_runtime)
PAR_LOOP_RT(GOMP_parallel_loop_maybe_nonmonotonic_runtime)

PARLOT_API void GOMP_parallel_sections(omp_body fn, void *data, unsigned num_threads, unsigned count,
                                       unsigned flags)
{
    static const parlot_site site = {"GOMP_parallel_sections"};
    REAL(real, void (*)(omp_body, void *, unsigned, unsigned, unsigned), "GOMP_parallel_sections");
    if (!parlot_on) {
        real(fn, data, num_threads, count, flags);
        return;
    }
    region r = {fn, data};
    parlot_enter(&site, 0);
    real(region_tramp, &r, num_threads, count, flags);
    parlot_exit(&site);
}

/* The GCC < 4.9 interface: the master runs the body itself between _start and _end; the
 * workers' trampoline data lives until _end (one per nesting level of this thread). */
static __thread region *t_old_regions[64];
static __thread int t_old_depth;

PARLOT_API void GOMP_parallel_start(omp_body fn, void *data, unsigned num_threads)
{
    static const parlot_site site = {"GOMP_parallel_start"};
    REAL(real, void (*)(omp_body, void *, unsigned), "GOMP_parallel_start");
    region *r = NULL;
    if (parlot_on && t_old_depth < 64 && (r = (region *)malloc(sizeof(region)))) {
        r->fn = fn;
        r->data = data;
        t_old_regions[t_old_depth++] = r;
    }
    parlot_enter(&site, 0);
    if (r)
        real(region_tramp, r, num_threads);
    else
        real(fn, data, num_threads);
    parlot_exit(&site);
}

PARLOT_API void GOMP_parallel_end(void)
{
    static const parlot_site site = {"GOMP_parallel_end"};
    REAL(real, void (*)(void), "GOMP_parallel_end");
    parlot_enter(&site, 0);
    real();
    parlot_exit(&site);
    if (t_old_depth > 0)
        free(t_old_regions[--t_old_depth]);
}

/* ---- synchronisation: no arguments */

#define SYNC0(name, flags)                                                     \
    PARLOT_API void name(void)                                                 \
    {                                                                          \
        static const parlot_site site = {#name};                               \
        REAL(real, void (*)(void), #name);                                     \
        parlot_enter(&site, flags);                                            \
        real();                                                                \
        parlot_exit(&site);                                                    \
    }

SYNC0(GOMP_critical_start, 0)
SYNC0(GOMP_critical_end, 0)
SYNC0(GOMP_atomic_start, 0)
SYNC0(GOMP_atomic_end, 0)
SYNC0(GOMP_barrier, PARLOT_CKPT)
SYNC0(GOMP_loop_end, 0)
SYNC0(GOMP_loop_end_nowait, 0)
SYNC0(GOMP_ordered_start, 0)
SYNC0(GOMP_ordered_end, 0)
SYNC0(GOMP_taskwait, 0)
SYNC0(GOMP_taskgroup_start, 0)
SYNC0(GOMP_taskgroup_end, 0)

PARLOT_API bool GOMP_single_start(void)
{
    static const parlot_site site = {"GOMP_single_start"};
    REAL(real, bool (*)(void), "GOMP_single_start");
    parlot_enter(&site, 0);
    bool rc = real();
    parlot_exit(&site);
    return rc;
}

#define SYNCP(name)                                                            \
    PARLOT_API void name(void **pptr)                                          \
    {                                                                          \
        static const parlot_site site = {#name};                               \
        REAL(real, void (*)(void **), #name);                                  \
        parlot_enter(&site, 0);                                                \
        real(pptr);                                                            \
        parlot_exit(&site);                                                    \
    }

SYNCP(GOMP_critical_name_start)
SYNCP(GOMP_critical_name_end)

/* ---- locks (omp.h: omp_lock_t and omp_nest_lock_t are passed by address) */

#define LOCKFN(name)                                                           \
    PARLOT_API void name(void *lock)                                           \
    {                                                                          \
        static const parlot_site site = {#name};                               \
        REAL(real, void (*)(void *), #name);                                   \
        parlot_enter(&site, 0);                                                \
        real(lock);                                                            \
        parlot_exit(&site);                                                    \
    }

#define TESTFN(name)                                                           \
    PARLOT_API int name(void *lock)                                            \
    {                                                                          \
        static const parlot_site site = {#name};                               \
        REAL(real, int (*)(void *), #name);                                    \
        parlot_enter(&site, 0);                                                \
        int rc = real(lock);                                                   \
        parlot_exit(&site);                                                    \
        return rc;                                                             \
    }

LOCKFN(omp_set_lock)
LOCKFN(omp_unset_lock)
LOCKFN(omp_set_nest_lock)
LOCKFN(omp_unset_nest_lock)
TESTFN(omp_test_lock)
TESTFN(omp_test_nest_lock)
