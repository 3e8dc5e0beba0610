/*
 * parlot_mpi.c -- PMPI wrappers of libparlot.so: each MPI call becomes an entry event named
 * like the MPI function and an exit event around the real call (PMPI_*, found with dlsym so
 * the library does not depend on libmpi and can be preloaded into any process).
 *
 * Built with the MPI compiler wrapper whose mpi.h matches the library the programs use
 * (MPICC in the Makefile); the prototypes below are checked against that mpi.h.
 *
 * Blocking calls make this thread's file complete before they start (PARLOT_CKPT): when a
 * rank then hangs or is killed, its trace still shows the call it was in.
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "parlot_internal.h"

#define CK PARLOT_CKPT
#define NOCK 0

/* W(name, flags, (parameters), (arguments)): int name(parameters) calling Pname(arguments). */
#define W(name, flags, params, args)                                          \
    PARLOT_API int name params                                                \
    {                                                                         \
        static const parlot_site site = {#name};                              \
        static int(*real) params;                                             \
        if (__builtin_expect(!real, 0))                                       \
            real = (int(*) params)parlot_real("P" #name);                     \
        if (!parlot_on) {                                                     \
            if (parlot_warn_pending)                                          \
                parlot_warn_once();                                           \
            return real args;                                                 \
        }                                                                     \
        parlot_enter(&site, flags);                                           \
        parlot_mpi_in();                                                      \
        int rc_ = real args;                                                  \
        parlot_mpi_out();                                                     \
        parlot_exit(&site);                                                   \
        return rc_;                                                           \
    }

static void NI after_init(void)
{
    int rank = -1, inited = 0;
    static int (*initialized)(int *);
    static int (*comm_rank)(MPI_Comm, int *);
    if (!initialized)
        initialized = (int (*)(int *))parlot_real("PMPI_Initialized");
    if (!comm_rank)
        comm_rank = (int (*)(MPI_Comm, int *))parlot_real("PMPI_Comm_rank");
    if (initialized(&inited) == MPI_SUCCESS && inited && comm_rank(MPI_COMM_WORLD, &rank) == MPI_SUCCESS)
        parlot_set_rank(rank);
}

PARLOT_API int MPI_Init(int *argc, char ***argv)
{
    static const parlot_site site = {"MPI_Init"};
    static int (*real)(int *, char ***);
    if (!real)
        real = (int (*)(int *, char ***))parlot_real("PMPI_Init");
    if (!parlot_on) {
        if (parlot_warn_pending)
            parlot_warn_once();
        return real(argc, argv);
    }
    parlot_enter(&site, CK);
    parlot_mpi_in();
    int rc = real(argc, argv);
    parlot_mpi_out();
    after_init();
    parlot_exit(&site);
    return rc;
}

PARLOT_API int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    static const parlot_site site = {"MPI_Init_thread"};
    static int (*real)(int *, char ***, int, int *);
    if (!real)
        real = (int (*)(int *, char ***, int, int *))parlot_real("PMPI_Init_thread");
    if (!parlot_on) {
        if (parlot_warn_pending)
            parlot_warn_once();
        return real(argc, argv, required, provided);
    }
    parlot_enter(&site, CK);
    parlot_mpi_in();
    int rc = real(argc, argv, required, provided);
    parlot_mpi_out();
    after_init();
    parlot_exit(&site);
    return rc;
}

PARLOT_API int MPI_Finalize(void)
{
    static const parlot_site site = {"MPI_Finalize"};
    static int (*real)(void);
    if (!real)
        real = (int (*)(void))parlot_real("PMPI_Finalize");
    if (!parlot_on)
        return real();
    parlot_enter(&site, NOCK);
    parlot_sync_all(0);           /* every thread's file complete, .info current */
    parlot_mpi_in();
    int rc = real();
    parlot_mpi_out();
    parlot_exit(&site);
    return rc;
}

PARLOT_API int MPI_Abort(MPI_Comm comm, int errorcode)
{
    static const parlot_site site = {"MPI_Abort"};
    static int (*real)(MPI_Comm, int);
    if (!real)
        real = (int (*)(MPI_Comm, int))parlot_real("PMPI_Abort");
    if (parlot_on) {
        parlot_enter(&site, NOCK);
        parlot_sync_all(1);       /* the launcher may kill this process any moment now */
    }
    return real(comm, errorcode);
}

/* environment */
W(MPI_Comm_rank, NOCK, (MPI_Comm comm, int *rank), (comm, rank))
W(MPI_Comm_size, NOCK, (MPI_Comm comm, int *size), (comm, size))
W(MPI_Comm_split, CK, (MPI_Comm comm, int color, int key, MPI_Comm *newcomm), (comm, color, key, newcomm))
W(MPI_Comm_dup, CK, (MPI_Comm comm, MPI_Comm *newcomm), (comm, newcomm))
W(MPI_Comm_free, NOCK, (MPI_Comm *comm), (comm))

/* point to point */
W(MPI_Send, CK, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm),
  (buf, count, datatype, dest, tag, comm))
W(MPI_Ssend, CK, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm),
  (buf, count, datatype, dest, tag, comm))
W(MPI_Bsend, CK, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm),
  (buf, count, datatype, dest, tag, comm))
W(MPI_Rsend, CK, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm),
  (buf, count, datatype, dest, tag, comm))
W(MPI_Recv, CK,
  (void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Status *status),
  (buf, count, datatype, source, tag, comm, status))
W(MPI_Isend, NOCK,
  (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request *request),
  (buf, count, datatype, dest, tag, comm, request))
W(MPI_Issend, NOCK,
  (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request *request),
  (buf, count, datatype, dest, tag, comm, request))
W(MPI_Irecv, NOCK,
  (void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Request *request),
  (buf, count, datatype, source, tag, comm, request))
W(MPI_Sendrecv, CK,
  (const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void *recvbuf,
   int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Status *status),
  (sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag, comm, status))
W(MPI_Sendrecv_replace, CK,
  (void *buf, int count, MPI_Datatype datatype, int dest, int sendtag, int source, int recvtag,
   MPI_Comm comm, MPI_Status *status),
  (buf, count, datatype, dest, sendtag, source, recvtag, comm, status))
W(MPI_Probe, CK, (int source, int tag, MPI_Comm comm, MPI_Status *status), (source, tag, comm, status))
W(MPI_Iprobe, NOCK, (int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status),
  (source, tag, comm, flag, status))

/* completion */
W(MPI_Wait, CK, (MPI_Request *request, MPI_Status *status), (request, status))
W(MPI_Waitall, CK, (int count, MPI_Request array_of_requests[], MPI_Status *array_of_statuses),
  (count, array_of_requests, array_of_statuses))
W(MPI_Waitany, CK, (int count, MPI_Request array_of_requests[], int *indx, MPI_Status *status),
  (count, array_of_requests, indx, status))
W(MPI_Waitsome, CK,
  (int incount, MPI_Request array_of_requests[], int *outcount, int array_of_indices[],
   MPI_Status *array_of_statuses),
  (incount, array_of_requests, outcount, array_of_indices, array_of_statuses))
W(MPI_Test, NOCK, (MPI_Request *request, int *flag, MPI_Status *status), (request, flag, status))
W(MPI_Testall, NOCK, (int count, MPI_Request array_of_requests[], int *flag, MPI_Status *array_of_statuses),
  (count, array_of_requests, flag, array_of_statuses))
W(MPI_Testany, NOCK, (int count, MPI_Request array_of_requests[], int *indx, int *flag, MPI_Status *status),
  (count, array_of_requests, indx, flag, status))
W(MPI_Testsome, NOCK,
  (int incount, MPI_Request array_of_requests[], int *outcount, int array_of_indices[],
   MPI_Status *array_of_statuses),
  (incount, array_of_requests, outcount, array_of_indices, array_of_statuses))

/* collectives */
W(MPI_Barrier, CK, (MPI_Comm comm), (comm))
W(MPI_Bcast, CK, (void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm),
  (buffer, count, datatype, root, comm))
W(MPI_Reduce, CK,
  (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm),
  (sendbuf, recvbuf, count, datatype, op, root, comm))
W(MPI_Allreduce, CK,
  (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm),
  (sendbuf, recvbuf, count, datatype, op, comm))
W(MPI_Gather, CK,
  (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
   MPI_Datatype recvtype, int root, MPI_Comm comm),
  (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm))
W(MPI_Gatherv, CK,
  (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
   const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm),
  (sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm))
W(MPI_Scatter, CK,
  (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
   MPI_Datatype recvtype, int root, MPI_Comm comm),
  (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm))
W(MPI_Scatterv, CK,
  (const void *sendbuf, const int sendcounts[], const int displs[], MPI_Datatype sendtype, void *recvbuf,
   int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm),
  (sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm))
W(MPI_Allgather, CK,
  (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
   MPI_Datatype recvtype, MPI_Comm comm),
  (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm))
W(MPI_Allgatherv, CK,
  (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
   const int displs[], MPI_Datatype recvtype, MPI_Comm comm),
  (sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm))
W(MPI_Alltoall, CK,
  (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
   MPI_Datatype recvtype, MPI_Comm comm),
  (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm))
W(MPI_Alltoallv, CK,
  (const void *sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype, void *recvbuf,
   const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm),
  (sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm))
W(MPI_Reduce_scatter, CK,
  (const void *sendbuf, void *recvbuf, const int recvcounts[], MPI_Datatype datatype, MPI_Op op, MPI_Comm comm),
  (sendbuf, recvbuf, recvcounts, datatype, op, comm))
W(MPI_Reduce_scatter_block, CK,
  (const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm),
  (sendbuf, recvbuf, recvcount, datatype, op, comm))
W(MPI_Scan, CK,
  (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm),
  (sendbuf, recvbuf, count, datatype, op, comm))
W(MPI_Exscan, CK,
  (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm),
  (sendbuf, recvbuf, count, datatype, op, comm))

/* nonblocking collectives */
W(MPI_Ibarrier, NOCK, (MPI_Comm comm, MPI_Request *request), (comm, request))
W(MPI_Ibcast, NOCK, (void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request *request),
  (buffer, count, datatype, root, comm, request))
W(MPI_Ireduce, NOCK,
  (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm,
   MPI_Request *request),
  (sendbuf, recvbuf, count, datatype, op, root, comm, request))
W(MPI_Iallreduce, NOCK,
  (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
   MPI_Request *request),
  (sendbuf, recvbuf, count, datatype, op, comm, request))
