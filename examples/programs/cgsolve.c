/*
 * cgsolve.c -- a distributed conjugate-gradient solver, shaped like the CG proxy codes
 * (setup, loop and epilogue share their calls), with injectable bugs for the bug zoo
 * (bench/zoo.py, issue 21).  Build and trace:
 *
 *   make -C examples/programs
 *   mpiexec -n 4 pin/parlot-run -a -d runs/normal examples/programs/build/cgsolve
 *
 * The grid: each rank owns --nx x --ny cells of a 2-D grid decomposed over the ranks
 * (MPI_Dims_create: 4 ranks 2 x 2, 8 ranks 4 x 2; rank = cx + px * cy).  The matrix is the
 * 9-point Laplacian (8.5 on the diagonal, -1 to each of the 8 neighbours; zero Dirichlet
 * values outside the domain), held as CSR rows over the rank's cells whose columns index
 * a local array with one ghost ring.  A 9-point product needs the corner ghosts, so the
 * halo exchange has two phases, as such codes do: x (left/right columns), then y (rows
 * that include the corner ghosts just received), each MPI_Irecv, MPI_Isend, then one
 * MPI_Wait per send and per receive, each receive's followed by its unpack from a
 * separate buffer.  The ghost cells a neighbour fills are set to NaN first: a ghost never
 * received shows as NaN, and the product treats it as a boundary value (repairGhost).
 *
 * The solver, all in cgSolve (initial guess x0 != 0):
 *   setup      haloExchange(x) localProduct(x) waxpby (r = b - A x) globalDot(r, r)
 *              waxpby (p = r) haloExchange(p)
 *   k = 1..I   localProduct(p) globalDot(p, Ap) waxpby (x) waxpby (r) globalDot(r, r)
 *              waxpby (p = r + beta p) haloExchange(p)          [no call tests convergence]
 *   epilogue   haloExchange(x) localProduct(x) waxpby (r = b - A x) globalDot(r, r)
 * The setup and the epilogue (the true residual) make the loop body's calls, as a CG code
 * does.  The product calls small accessors per row and entry (rowStart, entryColumn,
 * entryValue, cellOf); globalDot ends in MPI_Allreduce.
 *
 * Options:
 *   --nx N --ny N    cells per rank (default 6 x 6)
 *   --iters I        CG iterations (default 12; the loop never stops early)
 *   --bug KIND --bug-rank R --bug-iter K     K: the 1-based iteration k
 *   nowait       R skips the MPI_Wait (and the unpack) of its first x-phase receive (from the
 *                left, else the right) in iteration K's exchange: its ghost column stays
 *                NaN, and its y-phase rows carry the NaN corner to its y neighbours, which
 *                repair it in iteration K+1's product, before any collective: they make
 *                extra calls a step later at the same logical clock.  The request leaks;
 *                the run completes with another result.
 *   skipexchange R skips haloExchange(p) at the end of iteration K: its neighbours wait for
 *                its messages, the others in the next MPI_Allreduce (hang).
 *   skipproduct  R skips localProduct(p) in iteration K (Ap keeps the last iteration's
 *                values): the run completes with another result.
 *   livelock     R's exchange in iteration K waits for its send buffers to be released
 *                (buffersReleased, polled every 1 ms), a release that never comes: it spins
 *                until killed; the others wait for it.
 *   stall        R's vector update in iteration K loops forever without a call (a stride
 *                of 0): its trace stops on the normal path, the least progressed.
 *   barrier      R calls an extra MPI_Barrier before globalDot(p, Ap) in iteration K (hang).
 *   wrongtag     R sends its first y-phase row (down, else up) with tag 12 instead of 11 in
 *                iteration K: that neighbour waits for it (hang).
 *   wrongop      R's globalDot(p, Ap) reduces with MPI_MAX instead of MPI_SUM in iteration K:
 *                the run completes with another result.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG_X 10
#define TAG_Y 11

enum { BUG_NONE, BUG_NOWAIT, BUG_SKIPEXCHANGE, BUG_SKIPPRODUCT, BUG_LIVELOCK, BUG_STALL, BUG_BARRIER,
       BUG_WRONGTAG, BUG_WRONGOP, NUM_BUGS };
static const char *bug_names[NUM_BUGS] = {"none", "nowait", "skipexchange", "skipproduct", "livelock", "stall",
                                          "barrier", "wrongtag", "wrongop"};

static int rank, nprocs, px, py, cx, cy;
static int left = -1, right = -1, down = -1, up = -1;
static int nx = 6, ny = 6, iters = 12;
static int bug = BUG_NONE, bug_rank = 1, bug_iter = 4;
static int iteration;                      /* the current k (0: setup, iters + 1: epilogue) */
static volatile int stride = 1;            /* the vector loops' row stride (stall: 0) */
static volatile int sendBusy;              /* livelock: the release that never comes */

/* CSR rows of the local matrix; columns index the ghost-ring layout */
static int *rowPtr, *colIdx;
static double *val;
/* vectors in the ghost-ring layout: (nx + 2) x (ny + 2) */
static double *x, *b, *r, *p, *Ap, *Ax;
/* exchange buffers: 0 left, 1 right (ny values), 2 down, 3 up (nx + 2 values) */
static double *sbuf[4], *rbuf[4];

#define IDX(i, j) (((j) + 1) * (nx + 2) + (i) + 1)

/* a macro, not a function: the bug switches add no call to the trace */
#define fires(kind) (bug == (kind) && rank == bug_rank && iteration == bug_iter)

static void usage(const char *msg)
{
    if (rank == 0)
        fprintf(stderr, "cgsolve: %s\nusage: cgsolve [--nx N] [--ny N] [--iters I] [--bug KIND] "
                        "[--bug-rank R] [--bug-iter K]\n", msg);
    MPI_Finalize();
    exit(2);
}

static void parseArgs(int argc, char **argv)
{
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage("missing value");
        if (!strcmp(a, "--nx"))
            nx = atoi(v);
        else if (!strcmp(a, "--ny"))
            ny = atoi(v);
        else if (!strcmp(a, "--iters"))
            iters = atoi(v);
        else if (!strcmp(a, "--bug-rank"))
            bug_rank = atoi(v);
        else if (!strcmp(a, "--bug-iter"))
            bug_iter = atoi(v);
        else if (!strcmp(a, "--bug")) {
            int k = 0;
            while (k < NUM_BUGS && strcmp(v, bug_names[k]))
                k++;
            if (k == NUM_BUGS)
                usage("unknown bug");
            bug = k;
        } else
            usage("unknown option");
    }
    if (nx < 2 || ny < 2 || iters < 1)
        usage("--nx and --ny must be at least 2, --iters positive");
}

/* ------------------------------------------------------------------ accessors */

static inline int localRows(void) { return nx * ny; }
static inline int rowStart(int row) { return rowPtr[row]; }
static inline int entryColumn(int k) { return colIdx[k]; }
static inline double entryValue(int k) { return val[k]; }
static inline int cellOf(int row) { return IDX(row % nx, row / nx); }
/* where the k-th value of an exchange buffer lives: dir 0/1 a column, 2/3 a row with corners */
static inline int ghostSlot(int dir, int k, int ghost)
{
    switch (dir) {
    case 0: return IDX(ghost ? -1 : 0, k);
    case 1: return IDX(ghost ? nx : nx - 1, k);
    case 2: return IDX(k - 1, ghost ? -1 : 0);
    default: return IDX(k - 1, ghost ? ny : ny - 1);
    }
}

/* A ghost value that never arrived (still NaN): the product uses the boundary value. */
static double repairGhost(int col)
{
    (void)col;
    return 0.0;
}

/* ------------------------------------------------------------------ setup */

static void decompose(void)
{
    int dims[2] = {0, 0};
    MPI_Dims_create(nprocs, 2, dims);
    px = dims[0];
    py = dims[1];
    cx = rank % px;
    cy = rank / px;
    left = cx > 0 ? rank - 1 : -1;
    right = cx < px - 1 ? rank + 1 : -1;
    down = cy > 0 ? rank - px : -1;
    up = cy < py - 1 ? rank + px : -1;
}

static void buildMatrix(void)
{
    int n = nx * ny;
    rowPtr = malloc(sizeof(int) * (n + 1));
    colIdx = malloc(sizeof(int) * 9 * n);
    val = malloc(sizeof(double) * 9 * n);
    int k = 0;
    for (int row = 0; row < n; row++) {
        int i = row % nx, j = row / nx;
        rowPtr[row] = k;
        for (int dj = -1; dj <= 1; dj++)
            for (int di = -1; di <= 1; di++) {
                colIdx[k] = IDX(i + di, j + dj);
                val[k] = (di == 0 && dj == 0) ? 8.5 : -1.0;
                k++;
            }
    }
    rowPtr[n] = k;
}

static double *vector(void)
{
    return calloc((size_t)(nx + 2) * (ny + 2), sizeof(double));
}

static void initVectors(void)
{
    x = vector(); b = vector(); r = vector(); p = vector(); Ap = vector(); Ax = vector();
    for (int j = 0; j < ny; j++)
        for (int i = 0; i < nx; i++) {
            double gx = (double)(cx * nx + i + 1) / (px * nx + 1), gy = (double)(cy * ny + j + 1) / (py * ny + 1);
            b[IDX(i, j)] = 1.0 + gx * gy;
            x[IDX(i, j)] = 0.1 * sin(3.0 * gx) * cos(2.0 * gy);     /* initial guess x0 */
        }
    for (int d = 0; d < 4; d++) {
        int len = d < 2 ? ny : nx + 2;
        sbuf[d] = calloc(len, sizeof(double));
        rbuf[d] = calloc(len, sizeof(double));
    }
}

/* ------------------------------------------------------------------ kernels */

/* out = A v over the local rows (v's ghost cells filled) */
static void localProduct(const double *v, double *out)
{
    int n = localRows();
    for (int row = 0; row < n; row++) {
        double s = 0.0;
        int end = rowStart(row + 1);
        for (int k = rowStart(row); k < end; k++) {
            int c = entryColumn(k);
            double vc = v[c];
            if (isnan(vc))
                vc = repairGhost(c);
            s += entryValue(k) * vc;
        }
        out[cellOf(row)] = s;
    }
}

/* w = alpha a + beta c over the local cells */
static void waxpby(double alpha, const double *a, double beta, const double *c, double *w)
{
    if (fires(BUG_STALL))
        stride = 0;                      /* BUG: the row stride is lost: an endless loop */
    for (int j = 0; j < ny; j += stride)
        for (int i = 0; i < nx; i++)
            w[IDX(i, j)] = alpha * a[IDX(i, j)] + beta * c[IDX(i, j)];
}

/* the global dot product a . c */
static double globalDot(const double *a, const double *c, int pap)
{
    double local = 0.0, global = 0.0;
    for (int j = 0; j < ny; j++)
        for (int i = 0; i < nx; i++)
            local += a[IDX(i, j)] * c[IDX(i, j)];
    MPI_Op op = pap && fires(BUG_WRONGOP) ? MPI_MAX : MPI_SUM;
    MPI_Allreduce(&local, &global, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
    return global;
}

/* ------------------------------------------------------------------ halo exchange */

/* Whether the last exchange's send buffers may be reused (polls: waits 1 ms when not). */
static int buffersReleased(void)
{
    if (!sendBusy)
        return 1;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
    return 0;
}

/* NaN in every ghost cell a neighbour will fill: the x phase fills columns 0..ny-1, the
 * y phase whole rows, corners included (a corner without a y neighbour stays a boundary 0) */
static void poisonGhosts(double *v)
{
    const double nan = NAN;
    for (int j = 0; j < ny; j++) {
        if (left >= 0)
            v[IDX(-1, j)] = nan;
        if (right >= 0)
            v[IDX(nx, j)] = nan;
    }
    for (int i = -1; i <= nx; i++) {
        if (down >= 0)
            v[IDX(i, -1)] = nan;
        if (up >= 0)
            v[IDX(i, ny)] = nan;
    }
}

static void pack(const double *v, int dir, int len)
{
    for (int k = 0; k < len; k++)
        sbuf[dir][k] = v[ghostSlot(dir, k, 0)];
}

static void unpack(double *v, int dir, int len)
{
    for (int k = 0; k < len; k++)
        v[ghostSlot(dir, k, 1)] = rbuf[dir][k];
}

/* One phase: exchange with the two neighbours nb[0], nb[1] (dirs d0, d0 + 1). */
static void exchangePhase(double *v, int d0, const int nb[2], int len, int tag)
{
    MPI_Request rreq[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL}, sreq[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    int first = nb[0] >= 0 ? 0 : 1;        /* the first neighbour this rank has in this phase */
    for (int s = 0; s < 2; s++)
        if (nb[s] >= 0)
            MPI_Irecv(rbuf[d0 + s], len, MPI_DOUBLE, nb[s], tag, MPI_COMM_WORLD, &rreq[s]);
    for (int s = 0; s < 2; s++)
        if (nb[s] >= 0) {
            pack(v, d0 + s, len);
            int t = tag == TAG_Y && s == first && fires(BUG_WRONGTAG) ? tag + 1 : tag;
            MPI_Isend(sbuf[d0 + s], len, MPI_DOUBLE, nb[s], t, MPI_COMM_WORLD, &sreq[s]);
        }
    for (int s = 0; s < 2; s++)
        if (nb[s] >= 0)
            MPI_Wait(&sreq[s], MPI_STATUS_IGNORE);
    for (int s = 0; s < 2; s++)
        if (nb[s] >= 0) {
            if (tag == TAG_X && s == first && fires(BUG_NOWAIT))
                continue;                  /* BUG: no MPI_Wait (and no unpack) for this receive */
            MPI_Wait(&rreq[s], MPI_STATUS_IGNORE);
            unpack(v, d0 + s, len);
        }
}

static void haloExchange(double *v)
{
    if (fires(BUG_LIVELOCK))
        sendBusy = 1;                      /* BUG: the buffers are never released */
    while (!buffersReleased())
        ;
    poisonGhosts(v);
    const int xnb[2] = {left, right}, ynb[2] = {down, up};
    exchangePhase(v, 0, xnb, ny, TAG_X);
    exchangePhase(v, 2, ynb, nx + 2, TAG_Y);
}

/* ------------------------------------------------------------------ the solver */

static double cgSolve(double *residual0)
{
    /* setup: r = b - A x0, p = r */
    iteration = 0;
    haloExchange(x);
    localProduct(x, Ax);
    waxpby(1.0, b, -1.0, Ax, r);
    double rr = globalDot(r, r, 0);
    *residual0 = sqrt(rr);
    waxpby(1.0, r, 0.0, r, p);
    haloExchange(p);
    for (iteration = 1; iteration <= iters; iteration++) {
        if (!fires(BUG_SKIPPRODUCT))
            localProduct(p, Ap);
        if (fires(BUG_BARRIER))
            MPI_Barrier(MPI_COMM_WORLD);   /* BUG: a leftover barrier */
        double alpha = rr / globalDot(p, Ap, 1);
        waxpby(1.0, x, alpha, p, x);
        waxpby(1.0, r, -alpha, Ap, r);
        double rrNew = globalDot(r, r, 0);
        double beta = rrNew / rr;
        rr = rrNew;
        waxpby(1.0, r, beta, p, p);
        if (!fires(BUG_SKIPEXCHANGE))
            haloExchange(p);
    }
    /* epilogue: the true residual b - A x */
    haloExchange(x);
    localProduct(x, Ax);
    waxpby(1.0, b, -1.0, Ax, r);
    return sqrt(globalDot(r, r, 0));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    parseArgs(argc, argv);
    decompose();
    buildMatrix();
    initVectors();
    double t0 = MPI_Wtime(), res0;
    double res = cgSolve(&res0);
    if (rank == 0)
        printf("cgsolve: %d ranks (%dx%d), %dx%d cells per rank, %d iterations, residual %.6e -> %.6e in %.3f s\n",
               nprocs, px, py, nx, ny, iters, res0, res, MPI_Wtime() - t0);
    MPI_Finalize();
    return 0;
}
