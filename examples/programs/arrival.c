/*
 * arrival.c -- an MPI+OpenMP time-step code whose good runs differ from run to run in the
 * ORDER of their calls (not in their results): messages are taken as they arrive, tasks go
 * to whichever worker asks first, a polling loop polls as often as it takes, and OpenMP
 * threads share loop iterations dynamically.  A bug zoo program for order nondeterminism.
 *
 *   make -C examples/programs
 *   OMP_NUM_THREADS=2 mpiexec -n 4 pin/parlot-run -d runs/normal examples/programs/build/arrival
 *
 * The ranks form a periodic 2-D grid (MPI_Dims_create); each owns NX x NY cells with one
 * ghost cell on each side.  Per time step main calls:
 *
 *   exchange_faces    MPI_Irecv from the 4 neighbours (one tag per face), MPI_Isend to them,
 *                     then one MPI_Waitany per face: the face that completed is unpacked
 *                     (unpack_face -> copy_column for west/east, copy_row for south/north),
 *                     so the unpack calls follow the arrival order; MPI_Waitall on the sends.
 *   distribute_tasks  rank 0 is a master: it hands one task to each worker, then receives
 *                     results with MPI_Recv(MPI_ANY_SOURCE) and answers each with the next
 *                     task (MPI_Send to status.MPI_SOURCE) or a stop message.  Workers loop
 *                     MPI_Recv task / work_task / MPI_Send result until stopped.  How many
 *                     tasks each worker does varies from run to run; the results are summed
 *                     by task number, so the sum does not.
 *   poll_particles    NPART particles are sent (MPI_Isend) to the east neighbour while the
 *                     west neighbour's are polled for (MPI_Iprobe, then receive_particle:
 *                     MPI_Recv and track_particle); whenever a poll finds nothing one local
 *                     particle is tracked (track_particle).  Once the local particles are
 *                     done, the missing ones are waited for (receive_particle), and local
 *                     particles left are tracked after that.  The number of polls varies;
 *                     the set of tracked particles does not.
 *   relax             an OpenMP region over the rows: each thread updates one row first, the
 *                     other rows are shared with schedule(dynamic,1): cell_update per row,
 *                     with uneven costs: which thread updates which row varies.
 *   MPI_Allreduce     of the step's residual (a deterministic synchronisation).
 *
 * Small random pauses (usleep, a PRNG seeded from the clock and the rank) make the arrival
 * order really vary between runs even on few cores.  Results never depend on them: the
 * residual printed at the end is the same in every good run.
 *
 * Options:
 *   --iters N          time steps (default 10)
 *   --bug KIND         none (default) or one of the kinds below
 *   --bug-rank R       the rank with the bug (default 1)
 *   --bug-iter S       the 0-based time step where it strikes (default 3)
 *   --bug-thread T     the OpenMP thread of threadsegv (default 1)
 *
 *   wrongop       MPI_Allreduce with MPI_MAX instead of MPI_SUM (the run completes, changed)
 *   wrongtag      the east face is sent with another tag: the neighbour's MPI_Waitany hangs
 *   nosend        the east face's MPI_Isend is skipped: the neighbour's MPI_Waitany hangs
 *   segv          a store through a NULL pointer in the first unpack_face of the step
 *   abort         MPI_Abort in the worker's first work_task of the step (R must not be 0)
 *   skipcall      relax is not called in the step (the run completes, changed)
 *   extrabarrier  an MPI_Barrier before the MPI_Allreduce: hang (the others are in it)
 *   livelock      after its particles, polls with MPI_Iprobe (every 2 ms) for a steering
 *                 message nobody sends: hang, the rank's trace keeps growing
 *   wrongcount    the second particle is sent with 3 numbers instead of 4 (changed)
 *   threadsegv    thread T's first cell_update of the step (its own first row) stores
 *                 through NULL: SIGSEGV
 *   workerstop    the worker stops after its first task of the step without returning the
 *                 result (R must not be 0): the master waits for it forever
 */
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NX 16                 /* rows (relax's loop) */
#define NY 16                 /* columns */
#define NPART 4               /* particles sent to the east neighbour per step */
#define NLOCAL 6              /* local particles tracked per step */
#define PLEN 4                /* numbers per particle */
#define MAXTASKS 256
#define TAG_FACE 100          /* + the receiver's face */
#define TAG_TASK 200
#define TAG_RESULT 201
#define TAG_PART 300
#define TAG_STEER 400         /* nobody sends it (livelock) */

enum { WEST, EAST, SOUTH, NORTH };
static const int opposite[4] = {EAST, WEST, NORTH, SOUTH};

enum bug_kind { BUG_NONE, BUG_WRONGOP, BUG_WRONGTAG, BUG_NOSEND, BUG_SEGV, BUG_ABORT, BUG_SKIPCALL,
                BUG_EXTRABARRIER, BUG_LIVELOCK, BUG_WRONGCOUNT, BUG_THREADSEGV, BUG_WORKERSTOP };
static const char *bug_names[] = {"none", "wrongop", "wrongtag", "nosend", "segv", "abort", "skipcall",
                                  "extrabarrier", "livelock", "wrongcount", "threadsegv", "workerstop"};

static int rank, nprocs, iters = 10;
static enum bug_kind bug = BUG_NONE;
static int bug_rank = 1, bug_iter = 3, bug_thread = 1;
static int nbr[4];                                  /* neighbour rank per face */
static double u[NX + 2][NY + 2], unew[NX + 2][NY + 2];
static double face_out[4][NX], face_in[4][NX];
static double *volatile nowhere;                    /* never allocated: segv, threadsegv */
static unsigned jitter_seed;

/* Two helpers kept out of the trace (no -finstrument-functions hooks): they are called a
 * varying number of times and carry no behaviour of their own. */
#define UNTRACED __attribute__((no_instrument_function))

/* Whether the bug of this kind strikes here and now. */
static UNTRACED int strikes(enum bug_kind kind, int step)
{
    return bug == kind && rank == bug_rank && step == bug_iter;
}

/* A pause of 0..max_us microseconds: only the timing, never a result, depends on it. */
static UNTRACED void jitter(int max_us)
{
    usleep((useconds_t)(rand_r(&jitter_seed) % (max_us + 1)));
}

static void usage(const char *msg)
{
    if (rank == 0)
        fprintf(stderr, "arrival: %s\nusage: arrival [--iters N] [--bug KIND] [--bug-rank R] "
                        "[--bug-iter S] [--bug-thread T]\n", msg);
    MPI_Finalize();
    exit(2);
}

static void parse_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage("missing value");
        if (!strcmp(a, "--iters"))
            iters = atoi(v);
        else if (!strcmp(a, "--bug-rank"))
            bug_rank = atoi(v);
        else if (!strcmp(a, "--bug-iter"))
            bug_iter = atoi(v);
        else if (!strcmp(a, "--bug-thread"))
            bug_thread = atoi(v);
        else if (!strcmp(a, "--bug")) {
            int k = 0;
            while (k < (int)(sizeof bug_names / sizeof *bug_names) && strcmp(v, bug_names[k]))
                k++;
            if (k == (int)(sizeof bug_names / sizeof *bug_names))
                usage("unknown bug");
            bug = (enum bug_kind)k;
        } else
            usage("unknown option");
    }
    if (iters < 1)
        usage("--iters must be positive");
    if ((bug == BUG_ABORT || bug == BUG_WORKERSTOP) && bug_rank == 0)
        usage("abort and workerstop need a worker rank (not 0)");
}

static void init_grid(void)
{
    int dims[2] = {0, 0}, periods[2] = {1, 1}, coords[2];
    MPI_Comm cart;
    MPI_Dims_create(nprocs, 2, dims);
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
    MPI_Cart_coords(cart, rank, 2, coords);
    MPI_Cart_shift(cart, 0, 1, &nbr[WEST], &nbr[EAST]);
    MPI_Cart_shift(cart, 1, 1, &nbr[SOUTH], &nbr[NORTH]);
    MPI_Comm_free(&cart);
    for (int i = 1; i <= NX; i++)
        for (int j = 1; j <= NY; j++)
            u[i][j] = sin(0.3 * (i + NX * coords[0])) * cos(0.2 * (j + NY * coords[1])) + 0.01 * rank;
}

/* ------------------------------------------------------------------ exchange_faces */

static void pack_faces(void)
{
    for (int k = 0; k < NX; k++) {
        face_out[WEST][k] = u[k + 1][1];
        face_out[EAST][k] = u[k + 1][NY];
        face_out[SOUTH][k] = u[1][k + 1];
        face_out[NORTH][k] = u[NX][k + 1];
    }
}

static void copy_column(int face)
{
    int j = face == WEST ? 0 : NY + 1;
    for (int k = 0; k < NX; k++)
        u[k + 1][j] = face_in[face][k];
}

static void copy_row(int face)
{
    int i = face == SOUTH ? 0 : NX + 1;
    for (int k = 0; k < NY; k++)
        u[i][k + 1] = face_in[face][k];
}

/* Unpack the face that has just arrived into the ghost cells. */
static void unpack_face(int face, int step, int first)
{
    if (first && strikes(BUG_SEGV, step))
        nowhere[face] = face_in[face][0];             /* BUG: a buffer never allocated */
    if (face == WEST || face == EAST)
        copy_column(face);
    else
        copy_row(face);
}

static void exchange_faces(int step)
{
    MPI_Request rreq[4], sreq[4];
    for (int f = 0; f < 4; f++)
        MPI_Irecv(face_in[f], NX, MPI_DOUBLE, nbr[f], TAG_FACE + f, MPI_COMM_WORLD, &rreq[f]);
    pack_faces();
    jitter(400);
    for (int f = 0; f < 4; f++) {
        int tag = TAG_FACE + opposite[f];             /* the receiver's face */
        sreq[f] = MPI_REQUEST_NULL;
        if (f == EAST && strikes(BUG_NOSEND, step))
            continue;                                 /* BUG: the east face is never sent */
        if (f == EAST && strikes(BUG_WRONGTAG, step))
            tag += 10;                                /* BUG: a tag nobody receives */
        MPI_Isend(face_out[f], NX, MPI_DOUBLE, nbr[f], tag, MPI_COMM_WORLD, &sreq[f]);
        jitter(150);
    }
    for (int k = 0; k < 4; k++) {
        int face;
        MPI_Waitany(4, rreq, &face, MPI_STATUS_IGNORE);
        unpack_face(face, step, k == 0);              /* in arrival order */
    }
    MPI_Waitall(4, sreq, MPI_STATUSES_IGNORE);
}

/* ------------------------------------------------------------------ distribute_tasks */

/* One task: a small deterministic computation, of random duration. */
static double work_task(int id, int step, int first)
{
    if (first && strikes(BUG_ABORT, step)) {
        fprintf(stderr, "arrival: rank %d: task %d of step %d is inconsistent\n", rank, id, step);
        MPI_Abort(MPI_COMM_WORLD, 3);                 /* BUG: a check that always fails here */
    }
    jitter(500);
    double s = 0.0;
    for (int k = 1; k <= 200; k++)
        s += sin(0.001 * k * (id + 1) + 0.01 * step) / k;
    return s;
}

/* The step's task sum (rank 0; 0 elsewhere). */
static double distribute_tasks(int step)
{
    int ntasks = 2 * (nprocs - 1) + step % 3 + 1;    /* at least one per worker */
    int msg[2];
    double res[2];
    if (nprocs == 1) {
        double s = 0.0;
        for (int id = 0; id < ntasks; id++)
            s += work_task(id, step, id == 0);
        return s;
    }
    if (rank == 0) {
        static double results[MAXTASKS];
        int next = 0, active = nprocs - 1;
        MPI_Status st;
        for (int w = 1; w < nprocs; w++) {            /* one task each to start with */
            msg[0] = next++;
            msg[1] = step;
            MPI_Send(msg, 2, MPI_INT, w, TAG_TASK, MPI_COMM_WORLD);
        }
        while (active > 0) {                          /* then to whoever returns a result */
            MPI_Recv(res, 2, MPI_DOUBLE, MPI_ANY_SOURCE, TAG_RESULT, MPI_COMM_WORLD, &st);
            results[(int)res[0]] = res[1];
            msg[0] = next < ntasks ? next++ : -1;     /* -1: stop */
            msg[1] = step;
            if (msg[0] < 0)
                active--;
            MPI_Send(msg, 2, MPI_INT, st.MPI_SOURCE, TAG_TASK, MPI_COMM_WORLD);
        }
        double s = 0.0;
        for (int id = 0; id < ntasks; id++)           /* by task number: the same every run */
            s += results[id];
        return s;
    }
    for (int done = 0;; done++) {
        MPI_Recv(msg, 2, MPI_INT, 0, TAG_TASK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (msg[0] < 0)
            break;
        res[0] = msg[0];
        res[1] = work_task(msg[0], step, done == 0);
        if (strikes(BUG_WORKERSTOP, step))
            break;                                    /* BUG: leaves without its result */
        MPI_Send(res, 2, MPI_DOUBLE, 0, TAG_RESULT, MPI_COMM_WORLD);
    }
    return 0.0;
}

/* ------------------------------------------------------------------ poll_particles */

/* Advance one particle; returns its energy. */
static double track_particle(const double *p)
{
    double x = p[0], y = p[1], vx = p[2], vy = p[3];
    for (int k = 0; k < 50; k++) {
        x += 0.01 * vx;
        y += 0.01 * vy;
        vx -= 0.01 * sin(x);
        vy -= 0.01 * cos(y);
    }
    return 0.5 * (vx * vx + vy * vy) + 0.1 * (x + y);
}

/* Receive the west neighbour's next particle (waiting for it) and track it. */
static void receive_particle(double *energy)
{
    double p[PLEN] = {0};
    MPI_Recv(p, PLEN, MPI_DOUBLE, nbr[WEST], TAG_PART, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    *energy += track_particle(p);
}

/* Whether the west neighbour's next particle is there. */
#define PARTICLE_WAITING(flag) \
    MPI_Iprobe(nbr[WEST], TAG_PART, MPI_COMM_WORLD, &(flag), MPI_STATUS_IGNORE)

/* The energy of the step's particles (received and local): the same every run. */
static double poll_particles(int step)
{
    double out[NPART][PLEN], local[NLOCAL][PLEN], energy_in = 0.0, energy_local[NLOCAL];
    MPI_Request sreq[NPART];
    int received = 0, tracked = 0, flag;
    for (int k = 0; k < NPART; k++)
        for (int c = 0; c < PLEN; c++)
            out[k][c] = 0.1 * (rank + 1) + 0.01 * k + 0.001 * c + 0.0001 * step;
    for (int k = 0; k < NLOCAL; k++)
        for (int c = 0; c < PLEN; c++)
            local[k][c] = 0.2 * (rank + 1) - 0.01 * k + 0.003 * c + 0.0002 * step;
    for (int k = 0; k < NPART; k++) {                 /* send one, poll once */
        int count = PLEN;
        if (k == 1 && strikes(BUG_WRONGCOUNT, step))
            count = PLEN - 1;                         /* BUG: one number short */
        jitter(200);
        MPI_Isend(out[k], count, MPI_DOUBLE, nbr[EAST], TAG_PART, MPI_COMM_WORLD, &sreq[k]);
        PARTICLE_WAITING(flag);
        if (flag) {
            receive_particle(&energy_in);
            received++;
        }
    }
    while (received < NPART && tracked < NLOCAL) {    /* poll; between polls, local work */
        PARTICLE_WAITING(flag);
        if (flag) {
            receive_particle(&energy_in);
            received++;
        } else {
            energy_local[tracked] = track_particle(local[tracked]);
            tracked++;
        }
    }
    for (; received < NPART; received++)              /* no local work left: wait for them */
        receive_particle(&energy_in);
    for (; tracked < NLOCAL; tracked++)
        energy_local[tracked] = track_particle(local[tracked]);
    if (strikes(BUG_LIVELOCK, step)) {                /* BUG: waits for a message nobody sends */
        flag = 0;
        while (!flag) {
            MPI_Iprobe(MPI_ANY_SOURCE, TAG_STEER, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
            usleep(2000);
        }
    }
    MPI_Waitall(NPART, sreq, MPI_STATUSES_IGNORE);
    double e = energy_in;
    for (int k = 0; k < NLOCAL; k++)
        e += energy_local[k];
    return e;
}

/* ------------------------------------------------------------------ relax */

/* One row of the Jacobi update; row i costs about (i % 4 + 1) units. */
static void cell_update(int i, int step)
{
    if (strikes(BUG_THREADSEGV, step) && omp_get_thread_num() == bug_thread)
        nowhere[i] = 1.0;                             /* BUG: thread T stores through NULL */
    for (int j = 1; j <= NY; j++)
        unew[i][j] = u[i][j] + 0.2 * (u[i - 1][j] + u[i + 1][j] + u[i][j - 1] + u[i][j + 1] - 4.0 * u[i][j]);
    volatile double burn = 0.0;                       /* the uneven cost */
    for (int k = 0; k < 20000 * (i % 4 + 1); k++)
        burn += sqrt((double)k);
}

/* Each thread updates one row to start with (every thread has work every step), then the
 * rest of the rows go to whichever thread is free (schedule(dynamic, 1)). */
static void relax(int step)
{
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        if (t < NX)
            cell_update(1 + t, step);
#pragma omp for schedule(dynamic, 1)
        for (int i = nt + 1; i <= NX; i++)
            cell_update(i, step);
    }
}

/* Sum of the changes; u becomes unew (the ghosts stay for the next exchange). */
static double residual_and_swap(void)
{
    double r = 0.0;
    for (int i = 1; i <= NX; i++)
        for (int j = 1; j <= NY; j++) {
            r += fabs(unew[i][j] - u[i][j]);
            u[i][j] = unew[i][j];
        }
    return r;
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    parse_args(argc, argv);
    jitter_seed = (unsigned)time(NULL) * 2654435761u ^ (unsigned)getpid() ^ (unsigned)(rank * 7919);
    double t0 = MPI_Wtime();
    init_grid();
    double global = 0.0, history = 0.0, tasks = 0.0, energy = 0.0;
    for (int step = 0; step < iters; step++) {
        exchange_faces(step);
        tasks = distribute_tasks(step);
        energy = poll_particles(step);
        if (!strikes(BUG_SKIPCALL, step))
            relax(step);                              /* BUG (skipcall): not in that step */
        else
            memcpy(unew, u, sizeof u);
        double local = residual_and_swap() + 1e-3 * (tasks + energy);
        if (strikes(BUG_EXTRABARRIER, step))
            MPI_Barrier(MPI_COMM_WORLD);              /* BUG: the others are in MPI_Allreduce */
        MPI_Allreduce(&local, &global, 1, MPI_DOUBLE, strikes(BUG_WRONGOP, step) ? MPI_MAX : MPI_SUM,
                      MPI_COMM_WORLD);
        history += global;                            /* every step's residual counts */
        for (int i = 1; i <= NX; i++)                 /* and damps the field */
            for (int j = 1; j <= NY; j++)
                u[i][j] /= 1.0 + 1e-4 * global;
    }
    if (rank == 0)
        printf("arrival: %d ranks x %d threads, %d steps, residual %.12g (sum %.12g) in %.3f s\n", nprocs,
               omp_get_max_threads(), iters, global, history, MPI_Wtime() - t0);
    MPI_Finalize();
    return 0;
}
