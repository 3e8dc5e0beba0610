/* Bugs that only MPI calls outside the original 49 wrappers show (tests/test_tracer_mpi_all.py):
 *   bugs [BUG RANK]
 *   igather-root      rank RANK gathers to root 1, the others to root 0 (MPI_Igather)
 *   recv-init-source  rank RANK's persistent receive names rank+2 instead of its left neighbour
 *   put-target        rank RANK puts into rank+2 instead of its right neighbour (MPI_Put)
 *   leak-request      rank RANK never frees its persistent send request
 * Without arguments: the normal run.  At least 4 ranks; a wrong root or source may hang. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    const char *bug = argc > 1 ? argv[1] : "none";
    int bug_rank = argc > 2 ? atoi(argv[2]) : -1;
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    int here = rank == bug_rank;

    /* a gather of every rank's number to rank 0 */
    int all[64], root = 0;
    MPI_Request r, pr[2];
    if (here && !strcmp(bug, "igather-root"))
        root = 1;
    MPI_Igather(&rank, 1, MPI_INT, all, 1, MPI_INT, root, MPI_COMM_WORLD, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);

    /* a ring with persistent requests */
    int in = -1, out = rank, src = left;
    if (here && !strcmp(bug, "recv-init-source"))
        src = (rank + 2) % size;
    MPI_Recv_init(&in, 1, MPI_INT, src, 3, MPI_COMM_WORLD, &pr[0]);
    MPI_Send_init(&out, 1, MPI_INT, right, 3, MPI_COMM_WORLD, &pr[1]);
    for (int it = 0; it < 3; it++) {
        MPI_Startall(2, pr);
        MPI_Waitall(2, pr, MPI_STATUSES_IGNORE);
    }
    MPI_Request_free(&pr[0]);
    if (!(here && !strcmp(bug, "leak-request")))
        MPI_Request_free(&pr[1]);

    /* one-sided: each rank writes its number into its right neighbour's window */
    int slot[2] = {-1, -1};
    MPI_Win win;
    MPI_Win_create(slot, sizeof slot, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_fence(0, win);
    int target = right;
    if (here && !strcmp(bug, "put-target"))
        target = (rank + 2) % size;
    MPI_Put(&rank, 1, MPI_INT, target, 0, 1, MPI_INT, win);
    MPI_Win_fence(0, win);
    MPI_Win_free(&win);

    MPI_Finalize();
    if (rank == 0)
        printf("bugs done\n");
    return 0;
}
