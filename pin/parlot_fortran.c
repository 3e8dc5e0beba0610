/*
 * parlot_fortran.c -- the MPI calls of Fortran programs.
 *
 * MPICH's Fortran bindings (mpif.h, use mpi) call the C functions MPI_*, so the wrappers of
 * parlot_mpi.c see them.  Open MPI's (mpif.h, use mpi, use mpi_f08) call PMPI_* directly:
 * a C-only tracer sees none of a Fortran program's MPI calls.  With Open MPI this file
 * therefore wraps the Fortran entry points themselves, gfortran's names (mpi_send_ for
 * mpif.h and use mpi, mpi_send_f08_ for use mpi_f08), for every MPI function of mpi.h that
 * has them (the list is written by gen_mpi_wrappers.py: build/gen/parlot_fortran_gen.c).
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
#include <mpi.h>

#include "parlot_internal.h"

#if defined(OPEN_MPI) && defined(PARLOT_MPI_GEN) && (defined(__x86_64__) || defined(__aarch64__))

#define FARGS void *a0, void *a1, void *a2, void *a3, void *a4, void *a5, void *a6, void *a7, void *a8,    \
              void *a9, void *a10, void *a11, void *a12, void *a13, void *a14, void *a15, void *a16,      \
              void *a17, void *a18, void *a19
#define FPASS a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19
typedef void (*ffn)(FARGS);

extern volatile unsigned long parlot_mpi_calls;

/* one Fortran entry point: the event around the real one */
#define FW1(sym, cname, flags)                                                                  \
    PARLOT_API void sym(FARGS)                                                                  \
    {                                                                                           \
        static const parlot_site site = {cname};                                                \
        static ffn real;                                                                        \
        if (!real)                                                                              \
            real = (ffn)parlot_real(#sym);                                                      \
        if (!parlot_on) {                                                                       \
            real(FPASS);                                                                        \
            return;                                                                             \
        }                                                                                       \
        __atomic_fetch_add(&parlot_mpi_calls, 1, __ATOMIC_RELAXED);                             \
        parlot_enter(&site, flags);                                                             \
        parlot_mpi_in();                                                                        \
        real(FPASS);                                                                            \
        parlot_mpi_out();                                                                       \
        parlot_exit(&site);                                                                     \
    }
#define FW(lname, cname, flags) FW1(lname##_, cname, flags) FW1(lname##_f08_, cname, flags)
#include "parlot_fortran_gen.c"

/* MPI_Init, MPI_Init_thread: the rank and the error handler once MPI is up (ierr is the last
 * argument: 0 = MPI_SUCCESS) */
#define FINIT(sym, cname, ierr_arg)                                                             \
    PARLOT_API void sym(FARGS)                                                                  \
    {                                                                                           \
        static const parlot_site site = {cname};                                                \
        static ffn real;                                                                        \
        if (!real)                                                                              \
            real = (ffn)parlot_real(#sym);                                                      \
        if (!parlot_on) {                                                                       \
            if (parlot_warn_pending)                                                            \
                parlot_warn_once();                                                             \
            real(FPASS);                                                                        \
            return;                                                                             \
        }                                                                                       \
        __atomic_fetch_add(&parlot_mpi_calls, 1, __ATOMIC_RELAXED);                             \
        parlot_mpi_state = PARLOT_MPI_INITED;                                                   \
        parlot_enter(&site, PARLOT_CKPT);                                                       \
        parlot_mpi_in();                                                                        \
        real(FPASS);                                                                            \
        parlot_mpi_out();                                                                       \
        parlot_mpi_after_init(ierr_arg && *(const MPI_Fint *)ierr_arg == 0);                    \
        parlot_exit(&site);                                                                     \
    }
FINIT(mpi_init_, "MPI_Init", a0)
FINIT(mpi_init_f08_, "MPI_Init", a0)
FINIT(mpi_init_thread_, "MPI_Init_thread", a2)
FINIT(mpi_init_thread_f08_, "MPI_Init_thread", a2)

#define FFINALIZE(sym)                                                                          \
    PARLOT_API void sym(FARGS)                                                                  \
    {                                                                                           \
        static const parlot_site site = {"MPI_Finalize"};                                       \
        static ffn real;                                                                        \
        if (!real)                                                                              \
            real = (ffn)parlot_real(#sym);                                                      \
        if (!parlot_on) {                                                                       \
            real(FPASS);                                                                        \
            return;                                                                             \
        }                                                                                       \
        __atomic_fetch_add(&parlot_mpi_calls, 1, __ATOMIC_RELAXED);                             \
        parlot_enter(&site, PARLOT_CKPT);                                                       \
        parlot_mpi_in();                                                                        \
        real(FPASS);                                                                            \
        parlot_mpi_out();                                                                       \
        parlot_mpi_state = PARLOT_MPI_FINALIZED;                                                \
        parlot_exit(&site);                                                                     \
    }
FFINALIZE(mpi_finalize_)
FFINALIZE(mpi_finalize_f08_)

/* MPI_Abort(comm, errorcode, ierr): the end record first, as the C wrapper does */
#define FABORT(sym)                                                                             \
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
        real(FPASS);                                                                            \
    }
FABORT(mpi_abort_)
FABORT(mpi_abort_f08_)

#endif
