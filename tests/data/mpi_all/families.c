/* One call of each MPI call family whose arguments the generated wrappers of libparlot.so
 * record (tests/test_tracer_mpi_all.py): persistent point-to-point, nonblocking and
 * persistent collectives, large-count (_c) variants next to the hand-wrapped calls they
 * mirror, one-sided, communicators/groups/topologies, datatypes, matched probes, MPI-IO.
 * Any number of ranks >= 2.  Arguments: "leak" (leave a request, a datatype and a group
 * unfreed), "io DIR" (also write DIR/families.dat with MPI-IO). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rank, size, leak = 0;
    const char *io = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "leak"))
            leak = 1;
        else if (!strcmp(argv[i], "io") && i + 1 < argc)
            io = argv[++i];
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    int sbuf[64], rbuf[256];
    double dbuf[16] = {0};
    for (int i = 0; i < 64; i++)
        sbuf[i] = rank * 100 + i;
    MPI_Request r, pr[2];

    /* persistent point-to-point: MPI_Start(all) carry the *_init's peer and tag */
    MPI_Recv_init(rbuf, 2, MPI_INT, left, 5, MPI_COMM_WORLD, &pr[0]);
    MPI_Send_init(sbuf, 2, MPI_INT, right, 5, MPI_COMM_WORLD, &pr[1]);
    for (int it = 0; it < 2; it++) {
        MPI_Startall(2, pr);
        MPI_Waitall(2, pr, MPI_STATUSES_IGNORE);
    }
    MPI_Start(&pr[0]);
    MPI_Start(&pr[1]);
    MPI_Wait(&pr[0], MPI_STATUS_IGNORE);
    MPI_Wait(&pr[1], MPI_STATUS_IGNORE);
    MPI_Request_free(&pr[0]);
    MPI_Request_free(&pr[1]);

    /* nonblocking collectives (generated) next to blocking ones (hand-written) */
    MPI_Igather(sbuf, 1, MPI_INT, rbuf, 1, MPI_INT, 1, MPI_COMM_WORLD, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    MPI_Gather(sbuf, 1, MPI_INT, rbuf, 1, MPI_INT, 1, MPI_COMM_WORLD);
    MPI_Iscatter(sbuf, 2, MPI_INT, rbuf, 2, MPI_INT, size - 1, MPI_COMM_WORLD, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    MPI_Scatter(sbuf, 2, MPI_INT, rbuf, 2, MPI_INT, size - 1, MPI_COMM_WORLD);
    MPI_Iallgather(sbuf, 1, MPI_INT, rbuf, 1, MPI_INT, MPI_COMM_WORLD, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    MPI_Allgather(sbuf, 1, MPI_INT, rbuf, 1, MPI_INT, MPI_COMM_WORLD);
    MPI_Ialltoall(sbuf, 1, MPI_INT, rbuf, 1, MPI_INT, MPI_COMM_WORLD, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    MPI_Alltoall(sbuf, 1, MPI_INT, rbuf, 1, MPI_INT, MPI_COMM_WORLD);
    MPI_Iscan(sbuf, rbuf, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    MPI_Scan(sbuf, rbuf, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);

#if MPI_VERSION >= 4
    /* large-count variants beside the calls they mirror; a persistent collective */
    MPI_Isend_c(sbuf, 3, MPI_INT, right, 9, MPI_COMM_WORLD, &r);
    MPI_Recv_c(rbuf, 3, MPI_INT, left, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    MPI_Isend(sbuf, 3, MPI_INT, right, 9, MPI_COMM_WORLD, &r);
    MPI_Recv(rbuf, 3, MPI_INT, left, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    MPI_Gather_c(sbuf, 1, MPI_INT, rbuf, 1, MPI_INT, 1, MPI_COMM_WORLD);
    MPI_Allreduce_c(sbuf, rbuf, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(sbuf, rbuf, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Bcast_init(sbuf, 4, MPI_INT, size - 1, MPI_COMM_WORLD, MPI_INFO_NULL, &r);
    MPI_Start(&r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    MPI_Request_free(&r);
#endif

    /* one-sided: targets relative to the caller in the window's group */
    MPI_Win win;
    MPI_Win_create(rbuf, 256 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_fence(0, win);
    MPI_Put(sbuf, 2, MPI_INT, right, 4, 2, MPI_INT, win);
    MPI_Win_fence(0, win);
    MPI_Get(sbuf + 8, 1, MPI_INT, left, 0, 1, MPI_INT, win);
    MPI_Win_fence(0, win);
    MPI_Win_lock(MPI_LOCK_SHARED, left, 0, win);
    MPI_Accumulate(sbuf, 1, MPI_INT, left, 10, 1, MPI_INT, MPI_SUM, win);
    MPI_Win_unlock(left, win);
    MPI_Win_free(&win);

    /* communicators, groups, a topology and a neighbourhood collective */
    MPI_Group wg, eg;
    MPI_Comm ec, cart;
    int evens[2] = {0, 2 % size};
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_incl(wg, size > 2 ? 2 : 1, evens, &eg);
    MPI_Comm_create(MPI_COMM_WORLD, eg, &ec);
    if (ec != MPI_COMM_NULL) {
        MPI_Allreduce(sbuf, rbuf, 1, MPI_INT, MPI_SUM, ec);
        MPI_Comm_free(&ec);
    }
    MPI_Group_free(&eg);
    if (!leak)
        MPI_Group_free(&wg);
    int dims[1] = {size}, periods[1] = {1}, src, dst;
    MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &cart);
    MPI_Cart_shift(cart, 0, 1, &src, &dst);
    MPI_Neighbor_allgather(sbuf, 1, MPI_INT, rbuf, 1, MPI_INT, cart);
    MPI_Comm_free(&cart);

    /* datatypes */
    MPI_Datatype vec;
    MPI_Type_vector(3, 2, 4, MPI_DOUBLE, &vec);
    MPI_Type_commit(&vec);
    MPI_Bcast(dbuf, 1, vec, 0, MPI_COMM_WORLD);
    if (!leak)
        MPI_Type_free(&vec);

    /* matched probe */
    MPI_Message msg;
    MPI_Isend(sbuf, 1, MPI_INT, right, 11, MPI_COMM_WORLD, &r);
    MPI_Mprobe(left, 11, MPI_COMM_WORLD, &msg, MPI_STATUS_IGNORE);
    MPI_Mrecv(rbuf, 1, MPI_INT, &msg, MPI_STATUS_IGNORE);
    if (!leak)
        MPI_Wait(&r, MPI_STATUS_IGNORE);
    else
        MPI_Barrier(MPI_COMM_WORLD);      /* the send is matched; its request is never completed */

    if (io) {
        char path[4096];
        MPI_File fh;
        snprintf(path, sizeof path, "%s/families.dat", io);
        MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
        MPI_File_write_at(fh, (MPI_Offset)rank * 4, sbuf, 1, MPI_INT, MPI_STATUS_IGNORE);
        MPI_File_close(&fh);
    }
    MPI_Finalize();
    if (rank == 0)
        printf("families ok\n");
    return 0;
}
