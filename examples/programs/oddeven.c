/*
 * oddeven.c -- the odd/even transposition sort of the DiffTrace paper (Figure 2), as a real
 * MPI program with injectable bugs.  Build and trace:
 *
 *   make -C examples/programs
 *   mpiexec -n 16 pin/parlot-run -d runs/normal  examples/programs/build/oddeven
 *   mpiexec -n 16 pin/parlot-run -d runs/swapbug examples/programs/build/oddeven --bug swap
 *   timeout -s TERM 10 mpiexec -n 16 pin/parlot-run -d runs/dlbug examples/programs/build/oddeven --bug dl
 *
 * Each rank holds a block of numbers; in phase i it exchanges its block with the partner of
 * that phase (even phases: even ranks pair with rank+1; odd phases: odd ranks pair with
 * rank+1) and keeps the lower or upper half of the merged blocks.  After P phases (P ranks)
 * the numbers are sorted across the ranks.  Even ranks send first, odd ranks receive first.
 *
 * Options:
 *   --block N       numbers per rank (default 4)
 *   --seed S        data seed (default 2019)
 *   --bug none|swap|dl|wrongpeer|truncate
 *   --bug-rank R    the rank that misbehaves (default 5)
 *   --bug-iter I    after I completed exchanges (default 7)
 *   --check         afterwards, check across the ranks that the numbers are sorted (more MPI
 *                   calls after the sort; off by default, as in the paper's program)
 *   swap (swapBug): from then on the rank does the other order (an odd rank sends first).
 *                   Small messages are sent eagerly, so the run still ends (maybe unsorted).
 *   dl (dlBug):     in its next exchange the rank receives with a tag nobody sends: it waits
 *                   forever, and its partners block on it in turn.  The run must be killed.
 *   wrongpeer:      in its next exchange the rank sends its block to the rank beyond its
 *                   partner (two ranks away; the other way at the end of the line) instead of
 *                   to the partner.
 *   truncate:       in its next exchange the rank sends block + 1 numbers where its partner
 *                   receives block: MPI stops the job with a truncation error.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DATA_TAG 0
#define WRONG_TAG 1

static int rank, nprocs, block = 4, seed = 2019;
static int bug_rank = 5, bug_iter = 7;
static enum { BUG_NONE, BUG_SWAP, BUG_DL, BUG_WRONGPEER, BUG_TRUNCATE } bug = BUG_NONE;
static int *mine, *theirs, *merged;
static int exchanges;              /* completed exchanges of this rank */
static int check;

static void usage(const char *msg)
{
    if (rank == 0)
        fprintf(stderr, "oddeven: %s\nusage: oddeven [--block N] [--seed S] "
                        "[--bug none|swap|dl|wrongpeer|truncate] "
                        "[--bug-rank R] [--bug-iter I] [--check]\n", msg);
    MPI_Finalize();
    exit(2);
}

static void parseArgs(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--check")) {
            check = 1;
            continue;
        }
        if (!v)
            usage("missing value");
        if (!strcmp(a, "--block"))
            block = atoi(v);
        else if (!strcmp(a, "--seed"))
            seed = atoi(v);
        else if (!strcmp(a, "--bug-rank"))
            bug_rank = atoi(v);
        else if (!strcmp(a, "--bug-iter"))
            bug_iter = atoi(v);
        else if (!strcmp(a, "--bug")) {
            if (!strcmp(v, "none"))
                bug = BUG_NONE;
            else if (!strcmp(v, "swap"))
                bug = BUG_SWAP;
            else if (!strcmp(v, "dl"))
                bug = BUG_DL;
            else if (!strcmp(v, "wrongpeer"))
                bug = BUG_WRONGPEER;
            else if (!strcmp(v, "truncate"))
                bug = BUG_TRUNCATE;
            else
                usage("unknown bug");
        } else
            usage("unknown option");
        i++;
    }
    if (block < 1)
        usage("--block must be positive");
}

static void initData(void)
{
    unsigned s = (unsigned)seed * 2654435761u + (unsigned)rank * 40503u + 1u;
    mine = malloc(sizeof(int) * (block + 1));          /* one spare number */
    theirs = malloc(sizeof(int) * block);
    merged = malloc(sizeof(int) * 2 * block);
    for (int i = 0; i < block; i++) {
        s = s * 1103515245u + 12345u;
        mine[i] = (int)((s >> 8) % 1000);
    }
}

static void localSort(void)
{
    for (int i = 1; i < block; i++) {          /* insertion sort */
        int v = mine[i], j = i - 1;
        while (j >= 0 && mine[j] > v) {
            mine[j + 1] = mine[j];
            j--;
        }
        mine[j + 1] = v;
    }
}

/* Partner of phase i, or -1 when this rank sits the phase out. */
static int findPtr(int i, int r)
{
    int p = (i % 2 == r % 2) ? r + 1 : r - 1;
    return (p < 0 || p >= nprocs) ? -1 : p;
}

/* Keep the lower half (if this rank is left of its partner) or the upper half. */
static void mergeSplit(int ptr)
{
    int a = 0, b = 0;
    for (int k = 0; k < 2 * block; k++)
        merged[k] = (b >= block || (a < block && mine[a] <= theirs[b])) ? mine[a++] : theirs[b++];
    memcpy(mine, rank < ptr ? merged : merged + block, sizeof(int) * block);
}

static void exchange(int ptr)
{
    int send_first = (rank % 2 == 0);
    int recv_tag = DATA_TAG, send_count = block, dest = ptr;
    if (rank == bug_rank && exchanges >= bug_iter) {
        if (bug == BUG_SWAP)
            send_first = !send_first;
        if (bug == BUG_DL && exchanges == bug_iter)
            recv_tag = WRONG_TAG;
        if (bug == BUG_TRUNCATE && exchanges == bug_iter)
            send_count = block + 1;
        if (bug == BUG_WRONGPEER && exchanges == bug_iter) {
            dest = ptr + (ptr - rank);
            if (dest < 0 || dest >= nprocs)
                dest = rank - (ptr - rank);
            if (dest < 0 || dest >= nprocs)
                dest = rank;
        }
    }
    if (send_first) {
        MPI_Send(mine, send_count, MPI_INT, dest, DATA_TAG, MPI_COMM_WORLD);
        MPI_Recv(theirs, block, MPI_INT, ptr, recv_tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(theirs, block, MPI_INT, ptr, recv_tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(mine, send_count, MPI_INT, dest, DATA_TAG, MPI_COMM_WORLD);
    }
    exchanges++;
}

static void oddEvenSort(int r, int cp)
{
    localSort();
    for (int i = 0; i < cp; i++) {
        int ptr = findPtr(i, r);
        if (ptr >= 0) {
            exchange(ptr);
            mergeSplit(ptr);
        }
    }
}

static int checkSorted(void)
{
    int ok = 1, prev;
    for (int i = 1; i < block; i++)
        ok &= mine[i - 1] <= mine[i];
    /* the last number of the left neighbour must not exceed my first */
    if (rank + 1 < nprocs)
        MPI_Send(&mine[block - 1], 1, MPI_INT, rank + 1, 2, MPI_COMM_WORLD);
    if (rank > 0) {
        MPI_Recv(&prev, 1, MPI_INT, rank - 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        ok &= prev <= mine[0];
    }
    int all;
    MPI_Reduce(&ok, &all, 1, MPI_INT, MPI_LAND, 0, MPI_COMM_WORLD);
    return all;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    parseArgs(argc, argv);
    double t0 = MPI_Wtime();
    initData();
    oddEvenSort(rank, nprocs);
    if (check) {
        int sorted = checkSorted();
        if (rank == 0)
            printf("oddeven: %d ranks x %d numbers: %s in %.3f s\n", nprocs, block,
                   sorted ? "sorted" : "NOT SORTED", MPI_Wtime() - t0);
    } else if (rank == 0)
        printf("oddeven: %d ranks x %d numbers done in %.3f s\n", nprocs, block, MPI_Wtime() - t0);
    MPI_Finalize();
    return 0;
}
