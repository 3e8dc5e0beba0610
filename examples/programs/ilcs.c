/*
 * ilcs.c -- an ILCS-like hybrid MPI+OpenMP iterative local search (DiffTrace paper, section
 * IV, Listing 1), solving a small travelling-salesman instance with 2-opt, with injectable
 * bugs.  Build and trace (4 ranks x 4 threads: 1 master + 3 workers per rank):
 *
 *   make -C examples/programs
 *   OMP_NUM_THREADS=4 mpiexec -n 4 pin/parlot-run -d runs/normal examples/programs/build/ilcs
 *   OMP_NUM_THREADS=4 mpiexec -n 4 pin/parlot-run -d runs/nocrit examples/programs/build/ilcs \
 *       --bug nocrit --bug-rank 2 --bug-thread 3
 *
 * Every rank runs one OpenMP team.  Worker threads (1..T-1) evaluate seeds: CPU_Exec builds
 * a random tour from the seed and improves it with 2-opt; a better tour than the thread's
 * champion is copied into the shared champion table inside `omp critical`.  After each round
 * the master thread (0) scans the table for the local champion, finds the global champion
 * length with MPI_Allreduce(MIN) and its owner with a second MPI_Allreduce(MIN), the owner
 * copies its tour into the broadcast buffer (again inside `omp critical`), and MPI_Bcast
 * sends it to every rank.  The search ends after --patience rounds without improvement (or
 * --rounds rounds).  Unlike the real ILCS the rounds are synchronous (omp barrier) and the
 * seeds are a function of (rank, thread, round, i), so that two runs of the same program
 * produce the same traces; only the injected bug makes them differ.
 *
 * Options:
 *   --cities N      cities of the instance (default 48)
 *   --seeds S       seeds per worker and round (default 1)
 *   --rounds R      at most R rounds (default 8)
 *   --patience P    stop after P rounds without a better global champion (default 3)
 *   --bug none|nocrit|wrongsize|wrongop|wrongroot|abort
 *   --bug-rank R    default 1
 *   --bug-thread T  (nocrit) the worker thread that skips the critical section (default 2)
 *   --bug-round K   (wrongsize, wrongop, wrongroot, abort) first faulty round (default 1)
 *   nocrit:    worker T of rank R updates its champion without `omp critical` (a data race;
 *              the program still ends).
 *   wrongsize: in round K, rank R passes count 0 instead of 1 to the first MPI_Allreduce.
 *              With MPICH (4 ranks) its call returns at once and its next MPI_Allreduce (the
 *              owner vote) is matched with the others' first one, so wrong data crosses;
 *              then rank R waits in MPI_Bcast while the others wait in their second
 *              MPI_Allreduce: a deadlock.  (A count larger than the others' makes MPICH stop
 *              the job with "Message truncated" instead.)
 *   wrongop:   from round K, rank R reduces with MPI_MAX instead of MPI_MIN (the ranks
 *              disagree on the global champion).
 *   wrongroot: in round K, rank R broadcasts with root (owner + 1) mod P where the others
 *              use the champion's owner.
 *   abort:     in round K, rank R's check of the broadcast champion tests the wrong
 *              condition and calls MPI_Abort(MPI_COMM_WORLD, 3).
 */
#include <limits.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXC 64

typedef struct champ {
    int len;
    int tour[MAXC];
} champ;

static int rank, nprocs, nthreads;
static int ncities = 48, nseeds = 1, max_rounds = 8, patience = 3;
static enum { BUG_NONE, BUG_NOCRIT, BUG_WRONGSIZE, BUG_WRONGOP, BUG_WRONGROOT, BUG_ABORT } bug = BUG_NONE;
static int bug_rank = 1, bug_thread = 2, bug_round = 1;
static int dist[MAXC][MAXC];
static champ *champs;             /* one per thread: the best tour each worker found */
static champ bcast_buf;
static volatile int cont = 1;
static int best_so_far = INT_MAX, stale, rounds_done;

static void usage(const char *msg)
{
    if (rank == 0)
        fprintf(stderr, "ilcs: %s\nusage: ilcs [--cities N] [--seeds S] [--rounds R] [--patience P] "
                        "[--bug none|nocrit|wrongsize|wrongop|wrongroot|abort] [--bug-rank R] [--bug-thread T] "
                        "[--bug-round K]\n", msg);
    MPI_Finalize();
    exit(2);
}

static void parseArgs(int argc, char **argv)
{
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage("missing value");
        if (!strcmp(a, "--cities"))
            ncities = atoi(v);
        else if (!strcmp(a, "--seeds"))
            nseeds = atoi(v);
        else if (!strcmp(a, "--rounds"))
            max_rounds = atoi(v);
        else if (!strcmp(a, "--patience"))
            patience = atoi(v);
        else if (!strcmp(a, "--bug-rank"))
            bug_rank = atoi(v);
        else if (!strcmp(a, "--bug-thread"))
            bug_thread = atoi(v);
        else if (!strcmp(a, "--bug-round"))
            bug_round = atoi(v);
        else if (!strcmp(a, "--bug")) {
            if (!strcmp(v, "none"))
                bug = BUG_NONE;
            else if (!strcmp(v, "nocrit"))
                bug = BUG_NOCRIT;
            else if (!strcmp(v, "wrongsize"))
                bug = BUG_WRONGSIZE;
            else if (!strcmp(v, "wrongop"))
                bug = BUG_WRONGOP;
            else if (!strcmp(v, "wrongroot"))
                bug = BUG_WRONGROOT;
            else if (!strcmp(v, "abort"))
                bug = BUG_ABORT;
            else
                usage("unknown bug");
        } else
            usage("unknown option");
    }
    if (ncities < 4 || ncities > MAXC)
        usage("--cities must be 4..64");
}

static unsigned nextRandom(unsigned *s)
{
    unsigned x = *s;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *s = x ? x : 0x9e3779b9u;
}

/* Read the instance (here: generate it from a fixed seed, the same on every rank); returns
 * the champion size in ints, as ILCS's CPU_Init does. */
static int CPU_Init(void)
{
    unsigned s = 12345u, x[MAXC], y[MAXC];
    for (int i = 0; i < ncities; i++) {
        x[i] = nextRandom(&s) % 1000;
        y[i] = nextRandom(&s) % 1000;
    }
    for (int i = 0; i < ncities; i++)
        for (int j = 0; j < ncities; j++) {
            int dx = (int)x[i] - (int)x[j], dy = (int)y[i] - (int)y[j];
            dist[i][j] = abs(dx) + abs(dy);
        }
    return ncities + 1;
}

static int tourLength(const int *t)
{
    int len = 0;
    for (int i = 0; i < ncities; i++)
        len += dist[t[i]][t[(i + 1) % ncities]];
    return len;
}

/* Gain of the 2-opt move that reverses t[i+1..j].  A macro, so the innermost step is not a
 * call; built with -DILCS_GAIN_CALL it is a function (a call-dense variant for bench/). */
#ifdef ILCS_GAIN_CALL
static int twoOptGain(const int *t, int i, int j)
{
    int a = t[i], b = t[i + 1], c = t[j], d = t[(j + 1) % ncities];
    return dist[a][b] + dist[c][d] - dist[a][c] - dist[b][d];
}
#define TWO_OPT_GAIN(t, i, j) twoOptGain(t, i, j)
#else
#define TWO_OPT_GAIN(t, i, j)                                                                   \
    (dist[(t)[i]][(t)[(i) + 1]] + dist[(t)[j]][(t)[((j) + 1) % ncities]] - dist[(t)[i]][(t)[j]] - \
     dist[(t)[(i) + 1]][(t)[((j) + 1) % ncities]])
#endif

static void reverseSegment(int *t, int i, int j)
{
    while (i < j) {
        int tmp = t[i];
        t[i++] = t[j];
        t[j--] = tmp;
    }
}

/* Evaluate one seed: a random tour improved by 2-opt until no move helps. */
static int CPU_Exec(unsigned seed, int *tour)
{
    unsigned s = seed * 2654435761u + 1u;
    for (int i = 0; i < ncities; i++)
        tour[i] = i;
    for (int i = ncities - 1; i > 0; i--) {
        int j = (int)(nextRandom(&s) % (unsigned)(i + 1)), tmp = tour[i];
        tour[i] = tour[j];
        tour[j] = tmp;
    }
    int improved = 1;
    while (improved) {
        improved = 0;
        for (int i = 0; i < ncities - 2; i++)
            for (int j = i + 2; j < ncities - (i == 0); j++)
                if (TWO_OPT_GAIN(tour, i, j) > 0) {
                    reverseSegment(tour, i + 1, j);
                    improved = 1;
                }
    }
    return tourLength(tour);
}

static void updateChampion(champ *c, const int *tour, int len)
{
    c->len = len;
    memcpy(c->tour, tour, sizeof(int) * ncities);
}

static void workerRound(int tid, int round)
{
    int tour[MAXC];
    for (int i = 0; i < nseeds; i++) {
        unsigned seed = (unsigned)(((rank * 64 + tid) * 1024 + round) * 64 + i);
        int len = CPU_Exec(seed, tour);
        if (len < champs[tid].len) {
            if (bug == BUG_NOCRIT && rank == bug_rank && tid == bug_thread) {
                updateChampion(&champs[tid], tour, len);        /* BUG: no critical section */
            } else {
#pragma omp critical
                updateChampion(&champs[tid], tour, len);
            }
        }
    }
}

/* The master's local champion: the best of the workers' champions. */
static int scanChampions(int *owner)
{
    int best = INT_MAX;
    *owner = 0;
    for (int t = 1; t < nthreads; t++)
        if (champs[t].len < best) {
            best = champs[t].len;
            *owner = t;
        }
    return best;
}

static void masterRound(int round)
{
    int owner, local[2], global[2] = {INT_MAX, INT_MAX}, cand, champ_rank;
    local[0] = scanChampions(&owner);
    local[1] = local[0];
    int count = 1;
    MPI_Op op = MPI_MIN;
    if (rank == bug_rank && round >= bug_round) {
        if (bug == BUG_WRONGSIZE && round == bug_round)
            count = 0;                                          /* BUG: wrong size */
        if (bug == BUG_WRONGOP)
            op = MPI_MAX;                                       /* BUG: wrong operation */
    }
    MPI_Allreduce(local, global, count, MPI_INT, op, MPI_COMM_WORLD);    /* global champion */
    cand = local[0] == global[0] ? rank : INT_MAX;
    MPI_Allreduce(&cand, &champ_rank, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);  /* its owner */
    if (champ_rank < 0 || champ_rank >= nprocs)
        champ_rank = 0;           /* nobody owns it (the ranks disagree): rank 0 sends */
    if (rank == champ_rank) {
#pragma omp critical
        memcpy(&bcast_buf, &champs[owner], sizeof(champ));
    }
    int root = champ_rank;
    if (bug == BUG_WRONGROOT && rank == bug_rank && round == bug_round)
        root = (champ_rank + 1) % nprocs;                       /* BUG: wrong root */
    MPI_Bcast(&bcast_buf, ncities + 1, MPI_INT, root, MPI_COMM_WORLD);
    if (bug == BUG_ABORT && rank == bug_rank && round == bug_round && bcast_buf.len > 0)
        MPI_Abort(MPI_COMM_WORLD, 3);                           /* BUG: inverted check */
    if (bcast_buf.len < best_so_far) {
        best_so_far = bcast_buf.len;
        stale = 0;
    } else
        stale++;
    rounds_done = round + 1;
    cont = stale < patience && rounds_done < max_rounds;
}

static void CPU_Output(double seconds)
{
    printf("ilcs: %d ranks x %d threads, %d rounds, best tour length %d in %.3f s\n", nprocs,
           nthreads, rounds_done, best_so_far, seconds);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    parseArgs(argc, argv);
    double t0 = MPI_Wtime();
    nthreads = omp_get_max_threads();
    if (nthreads < 2)
        nthreads = 2;
    int lCPUs = nthreads - 1, gCPUs = 0;
    MPI_Reduce(&lCPUs, &gCPUs, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);     /* total workers */
    int champSize = CPU_Init();
    champs = calloc((size_t)nthreads, sizeof(champ));
    for (int t = 0; t < nthreads; t++)
        champs[t].len = INT_MAX;
    (void)champSize;
    MPI_Barrier(MPI_COMM_WORLD);
#pragma omp parallel num_threads(nthreads)
    {
        int tid = omp_get_thread_num();
        for (int round = 0;; round++) {
            if (tid != 0)
                workerRound(tid, round);
#pragma omp barrier
            if (tid == 0)
                masterRound(round);
#pragma omp barrier
            if (!cont)
                break;
        }
    }
    if (rank == 0)
        CPU_Output(MPI_Wtime() - t0);
    MPI_Finalize();
    return 0;
}
