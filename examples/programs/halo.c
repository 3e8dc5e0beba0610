/*
 * halo.c -- 1-D heat diffusion (Jacobi) with halo exchange: a typical MPI+OpenMP stencil
 * code, with two injectable bugs a user meets in such codes.  Build and trace:
 *
 *   make -C examples/programs
 *   OMP_NUM_THREADS=3 mpiexec -n 6 pin/parlot-run -d runs/normal examples/programs/build/halo
 *   OMP_NUM_THREADS=3 timeout -s TERM 10 mpiexec -n 6 pin/parlot-run -d runs/lost \
 *       examples/programs/build/halo --bug lost
 *
 * Each rank owns --cells cells plus one ghost cell per side.  Per iteration: exchangeHalo
 * (MPI_Irecv from both neighbours, MPI_Isend to both, MPI_Waitall), then relax (an OpenMP
 * parallel region: each thread updates its share of the cells).  Every --check-every
 * iterations the residual is computed (OpenMP reduction) and summed with MPI_Allreduce.
 * Messages carry a fixed tag, as in most such codes.
 *
 * Options:
 *   --cells N        cells per rank (default 1024)
 *   --iters I        iterations (default 20)
 *   --check-every C  residual check period (default 5)
 *   --bug none|lost|extra|nowait|wrongtag|segv
 *   --bug-rank R     default 2
 *   --bug-iter I     default 6
 *   lost:  in iteration I, rank R forgets to send its right boundary (no MPI_Isend to R+1).
 *          With the fixed tag, R+1 takes R's next message instead and runs on, one message
 *          ahead, with shifted data, until the next residual check: there R waits in
 *          MPI_Allreduce for R+1 while R+1 waits in MPI_Waitall for a boundary R sends only
 *          after the MPI_Allreduce.  A hang a few iterations after the cause.
 *   extra: in iteration I, rank R computes the residual once more (a leftover debugging
 *          call: an extra OpenMP region, no communication).  The run ends normally.
 *   nowait:   in iteration I, rank R does not wait for its exchange (no MPI_Waitall): it
 *          relaxes with whatever ghost values have arrived, and the requests are never
 *          completed.
 *   wrongtag: in iteration I, rank R receives from its first neighbour (the left one, or the
 *          right one on rank 0) with tag + 1, which nobody sends: a hang.
 *   segv:  in iteration I, rank R stores its boundary value through a NULL pointer (a buffer
 *          that was never allocated): a segmentation fault.
 */
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HALO_TAG 7

static int rank, nprocs;
static int ncells = 1024, iters = 20, check_every = 5;
static enum { BUG_NONE, BUG_LOST, BUG_EXTRA, BUG_NOWAIT, BUG_WRONGTAG, BUG_SEGV } bug = BUG_NONE;
static double *volatile boundaryCopy;   /* never allocated: only the segv bug stores into it */
static int bug_rank = 2, bug_iter = 6;
static double *u, *unew;           /* ncells + 2 (ghosts at 0 and ncells + 1) */

static void usage(const char *msg)
{
    if (rank == 0)
        fprintf(stderr, "halo: %s\nusage: halo [--cells N] [--iters I] [--check-every C] "
                        "[--bug none|lost|extra|nowait|wrongtag|segv] [--bug-rank R] [--bug-iter I]\n", msg);
    MPI_Finalize();
    exit(2);
}

static void parseArgs(int argc, char **argv)
{
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage("missing value");
        if (!strcmp(a, "--cells"))
            ncells = atoi(v);
        else if (!strcmp(a, "--iters"))
            iters = atoi(v);
        else if (!strcmp(a, "--check-every"))
            check_every = atoi(v);
        else if (!strcmp(a, "--bug-rank"))
            bug_rank = atoi(v);
        else if (!strcmp(a, "--bug-iter"))
            bug_iter = atoi(v);
        else if (!strcmp(a, "--bug")) {
            if (!strcmp(v, "none"))
                bug = BUG_NONE;
            else if (!strcmp(v, "lost"))
                bug = BUG_LOST;
            else if (!strcmp(v, "extra"))
                bug = BUG_EXTRA;
            else if (!strcmp(v, "nowait"))
                bug = BUG_NOWAIT;
            else if (!strcmp(v, "wrongtag"))
                bug = BUG_WRONGTAG;
            else if (!strcmp(v, "segv"))
                bug = BUG_SEGV;
            else
                usage("unknown bug");
        } else
            usage("unknown option");
    }
    if (ncells < 1 || iters < 1 || check_every < 1)
        usage("--cells, --iters and --check-every must be positive");
}

static void initField(void)
{
    u = calloc((size_t)ncells + 2, sizeof(double));
    unew = calloc((size_t)ncells + 2, sizeof(double));
    for (int i = 1; i <= ncells; i++) {
        double x = (double)(rank * ncells + i) / (double)(nprocs * ncells);
        u[i] = sin(3.14159265358979 * x) + (rank == nprocs / 2 && i == ncells / 2 ? 10.0 : 0.0);
    }
}

static void exchangeHalo(int it)
{
    MPI_Request req[4];
    int n = 0;
    int left = rank - 1, right = rank + 1;
    int fires = rank == bug_rank && it == bug_iter;
    int left_tag = HALO_TAG, right_tag = HALO_TAG;
    if (bug == BUG_WRONGTAG && fires) {
        if (left >= 0)
            left_tag = HALO_TAG + 1;
        else
            right_tag = HALO_TAG + 1;
    }
    if (bug == BUG_SEGV && fires)
        boundaryCopy[0] = u[1];
    if (left >= 0)
        MPI_Irecv(&u[0], 1, MPI_DOUBLE, left, left_tag, MPI_COMM_WORLD, &req[n++]);
    if (right < nprocs)
        MPI_Irecv(&u[ncells + 1], 1, MPI_DOUBLE, right, right_tag, MPI_COMM_WORLD, &req[n++]);
    if (left >= 0)
        MPI_Isend(&u[1], 1, MPI_DOUBLE, left, HALO_TAG, MPI_COMM_WORLD, &req[n++]);
    if (right < nprocs && !(bug == BUG_LOST && fires))
        MPI_Isend(&u[ncells], 1, MPI_DOUBLE, right, HALO_TAG, MPI_COMM_WORLD, &req[n++]);
    if (!(bug == BUG_NOWAIT && fires))
        MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
}

/* This thread's share [lo, hi) of the cells 1..ncells. */
static void myRange(int *lo, int *hi)
{
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    *lo = 1 + (int)((long)ncells * t / nt);
    *hi = 1 + (int)((long)ncells * (t + 1) / nt);
}

static void relaxRange(int lo, int hi)
{
    for (int i = lo; i < hi; i++)
        unew[i] = u[i] + 0.25 * (u[i - 1] - 2.0 * u[i] + u[i + 1]);
}

static double residualRange(int lo, int hi)
{
    double s = 0.0;
    for (int i = lo; i < hi; i++)
        s += fabs(unew[i] - u[i]);
    return s;
}

static void relax(void)
{
#pragma omp parallel
    {
        int lo, hi;
        myRange(&lo, &hi);
        relaxRange(lo, hi);
    }
}

static double residual(void)
{
    double sum = 0.0;
#pragma omp parallel reduction(+ : sum)
    {
        int lo, hi;
        myRange(&lo, &hi);
        sum += residualRange(lo, hi);
    }
    return sum;
}

static void swapFields(void)
{
    double *t = u;
    u = unew;
    unew = t;
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    parseArgs(argc, argv);
    double t0 = MPI_Wtime();
    initField();
    double global = 0.0;
    for (int it = 0; it < iters; it++) {
        exchangeHalo(it);
        relax();
        if (bug == BUG_EXTRA && rank == bug_rank && it == bug_iter)
            (void)residual();                         /* BUG: a leftover extra call */
        if ((it + 1) % check_every == 0) {
            double local = residual();
            MPI_Allreduce(&local, &global, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        }
        swapFields();
    }
    if (rank == 0)
        printf("halo: %d ranks x %d threads, %d iterations, last residual %.6g in %.3f s\n", nprocs,
               omp_get_max_threads(), iters, global, MPI_Wtime() - t0);
    MPI_Finalize();
    return 0;
}
