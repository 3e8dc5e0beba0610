/*
 * parlot_fortran.c -- the MPI calls of Fortran programs.
 *
 * What reaches the C wrappers of parlot_mpi.c from a Fortran program depends on the MPI:
 * - Open MPI (4.1): nothing: its bindings (mpif.h, use mpi, use mpi_f08) call PMPI_* directly.
 *   Wrapped here: gfortran's entry points mpi_send_ (mpif.h, use mpi), mpi_send_f08_ and
 *   mpi_send_f08ts_ (use mpi_f08).
 * - MPICH (4.0 tested): mpif.h and use mpi call MPI_* (the C wrappers see them, with their
 *   arguments: not wrapped here); use mpi_f08's entry points with a choice buffer
 *   (mpi_send_f08ts_) call MPI_* too, the others (mpi_barrier_f08_, mpi_init_f08_,
 *   mpi_comm_rank_f08_, ...) go to PMPI_* by way of pmpir_*: wrapped here, mpi_x_f08_ only.
 * For every MPI function of mpi.h (the list: gen_mpi_wrappers.py, build/gen/
 * parlot_fortran_gen.c).  Should a wrapped entry point reach a C wrapper after all, the C
 * wrapper records no second event (parlot_fortran_in: the Fortran event stands for it).
 *
 * Each is an event named like the C function, without arguments (the Fortran handles are
 * integers or derived types; the C wrappers' annotations are not repeated here), with a
 * checkpoint before the calls that may wait (always, without the C wrappers' "would it
 * wait?" question).  A Fortran entry point takes only addresses (and, at the end, the
 * lengths of character arguments: integers too), so one forwarding wrapper with enough
 * integer-class parameters passes any of them on unchanged (x86-64 and AArch64 calling
 * conventions: the extra parameters are never read by the real function).
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <mpi.h>

#include "parlot_internal.h"

#if defined(PARLOT_MPI_GEN) && (defined(__x86_64__) || defined(__aarch64__)) && \
    (defined(OPEN_MPI) || defined(MPICH_VERSION) || defined(MPICH))

#define FARGS void *a0, void *a1, void *a2, void *a3, void *a4, void *a5, void *a6, void *a7, void *a8,    \
              void *a9, void *a10, void *a11, void *a12, void *a13, void *a14, void *a15, void *a16,      \
              void *a17, void *a18, void *a19
#define FPASS a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19
typedef void (*ffn)(FARGS);

extern volatile unsigned long parlot_mpi_calls;

/* one Fortran entry point: the event around the real one; ``when_off`` runs instead while
 * tracing is off, ``before`` and ``after`` around the event (statements, or (void)0) */
#define FWRAP(sym, cname, flags, when_off, before, after)                                       \
    PARLOT_API void sym(FARGS)                                                                  \
    {                                                                                           \
        static const parlot_site site = {cname};                                                \
        static ffn real;                                                                        \
        if (!real)                                                                              \
            real = (ffn)parlot_real(#sym);                                                      \
        if (!parlot_on) {                                                                       \
            when_off;                                                                           \
            real(FPASS);                                                                        \
            return;                                                                             \
        }                                                                                       \
        __atomic_fetch_add(&parlot_mpi_calls, 1, __ATOMIC_RELAXED);                             \
        before;                                                                                 \
        parlot_enter(&site, flags);                                                             \
        parlot_mpi_in();                                                                        \
        parlot_fortran_in();                                                                    \
        real(FPASS);                                                                            \
        parlot_fortran_out();                                                                   \
        parlot_mpi_out();                                                                       \
        after;                                                                                  \
        parlot_exit(&site);                                                                     \
    }
#define FW1(sym, cname, flags) FWRAP(sym, cname, flags, (void)0, (void)0, (void)0)
#ifdef OPEN_MPI
#define FW(lname, cname, flags)                                                                 \
    FW1(lname##_, cname, flags) FW1(lname##_f08_, cname, flags) FW1(lname##_f08ts_, cname, flags)
#define F_FORMS(m, name, ...) m(name##_, __VA_ARGS__) m(name##_f08_, __VA_ARGS__)
#else
#define FW(lname, cname, flags) FW1(lname##_f08_, cname, flags)
#define F_FORMS(m, name, ...) m(name##_f08_, __VA_ARGS__)
#endif
#include "parlot_fortran_gen.c"

/* MPI_Init, MPI_Init_thread: the rank and the error handler once MPI is up (ierr is the last
 * argument: 0 = MPI_SUCCESS) */
#define FINIT(sym, cname, ierr_arg)                                                             \
    FWRAP(sym, cname, PARLOT_CKPT, if (parlot_warn_pending) parlot_warn_once(),                 \
          parlot_mpi_state = PARLOT_MPI_INITED,                                                 \
          parlot_mpi_after_init(ierr_arg && *(const MPI_Fint *)ierr_arg == 0))
F_FORMS(FINIT, mpi_init, "MPI_Init", a0)
F_FORMS(FINIT, mpi_init_thread, "MPI_Init_thread", a2)

#define FFINALIZE(sym, unused)                                                                  \
    FWRAP(sym, "MPI_Finalize", PARLOT_CKPT, (void)0, (void)0, parlot_mpi_state = PARLOT_MPI_FINALIZED)
F_FORMS(FFINALIZE, mpi_finalize, 0)

/* MPI_Abort(comm, errorcode, ierr): the end record first, as the C wrapper does */
#define FABORT(sym, unused)                                                                           \
    PARLOT_API void sym(FARGS)                                                                  \
    {                                                                                           \
        static const parlot_site site = {"MPI_Abort"};                                          \
        static ffn real;                                                                        \
        if (!real)                                                                              \
            real = (ffn)parlot_real(#sym);                                                      \
        if (parlot_on) {                                                                        \
            __atomic_fetch_add(&parlot_mpi_calls, 1, __ATOMIC_RELAXED);                         \
            parlot_enter(&site, 0);                                                             \
            parlot_end_record("abort", a1 != NULL, a1 ? (long)*(const MPI_Fint *)a1 : 0,        \
                              "MPI_Abort", NULL);                                               \
            parlot_sync_all(1);                                                                 \
        }                                                                                       \
        parlot_fortran_in();                                                                    \
        real(FPASS);                                                                            \
        parlot_fortran_out();                                                                   \
    }
F_FORMS(FABORT, mpi_abort, 0)

#endif
