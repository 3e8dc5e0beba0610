/*
 * minilulesh.c -- a LULESH-like Lagrangian hydrodynamics mini-app (MPI + OpenMP) with
 * injectable bugs, for the bug zoo (bench/zoo.py).  Written for this project: it has LULESH's
 * shape (a cube of ranks, a time-step loop of TimeIncrement + LagrangeLeapFrog, nodal and
 * element phases with LULESH's function names, face halo exchanges with MPI_Irecv, MPI_Isend
 * and MPI_Wait, an MPI_Allreduce of the time step, OpenMP loops) around much simpler physics.
 * Build and trace:
 *
 *   make -C examples/programs
 *   OMP_NUM_THREADS=2 mpiexec -n 8 pin/parlot-run -d runs/normal examples/programs/build/minilulesh
 *   OMP_NUM_THREADS=2 timeout -s TERM 20 mpiexec -n 8 pin/parlot-run -d runs/wrongtag \
 *       examples/programs/build/minilulesh --bug wrongtag --bug-rank 5 --bug-iter 3
 *
 * Decomposition: P ranks (any P) form a px x py x pz grid with balanced factors, as
 * MPI_Dims_create gives them (2 = 2x1x1, 4 = 2x2x1, 8 = 2x2x2, 12 = 3x2x2, 27 = 3x3x3); rank r
 * sits at (r % px, r / px % py, r / (px py)).  Each rank owns a block of S x S x S hexahedral
 * elements and its (S+1)^3 nodes (a node on a face shared with a neighbour exists on both
 * ranks).  Not periodic: ranks on the edge of the grid have fewer neighbours; only the six face
 * neighbours exchange data.  A blast is deposited in the element at the origin (rank 0).
 *
 * One time step (main calls TimeIncrement and LagrangeLeapFrog, nothing else):
 *   TimeIncrement              CheckSteering (one MPI_Iprobe for a steering message; nobody
 *                              sends one), MPI_Allreduce(MPI_MIN) of the next dt
 *   LagrangeLeapFrog
 *     LagrangeNodal            CalcForceForNodes: CommRecv (MPI_Irecv from every neighbour),
 *                                CalcVolumeForceForElems (stress, hourglass), CommSend
 *                                (MPI_Isend to every neighbour, MPI_Waitall), CommSBN (MPI_Wait
 *                                per neighbour, sums the shared nodes' forces);
 *                              acceleration, boundary conditions, velocity, position;
 *                              CommRecv, CommSend, CommSyncPosVel for positions and velocities
 *     LagrangeElements         kinematics, artificial viscosity, material properties and EOS
 *                              per region, volumes
 *     CalcTimeConstraintsForElems   Courant and hydro constraints (OpenMP min reductions)
 *     CalcEnergyDiagnostics    per-thread energy summed under omp critical, MPI_Reduce to rank 0
 * Tags: message type + direction of travel (forces 1024 + d, positions 2048 + d, d = 0..5 for
 * -x +x -y +y -z +z).  Element and node loops are `omp parallel for schedule(static)` (two
 * regions split the elements by hand); no result depends on the thread count.  Rank 0 prints
 * one line with a checksum: runs with the same rank count print the same line, whatever
 * OMP_NUM_THREADS.
 *
 * Options:
 *   --size S        elements per edge of a rank's block (default 4)
 *   --iters N       time steps (default 10)
 *   --schedule static|dynamic   how CalcKinematicsForElems' loop gives its elements to the
 *                   threads (default static; dynamic: the traces differ between two runs)
 *   --bug KIND      inject a bug (default none) on rank --bug-rank R (default 0) in time step
 *   --bug-rank R    --bug-iter I (0-based, default 3), in OpenMP thread --bug-thread T
 *   --bug-iter I    (default 1) for the thread bugs.  "The first neighbour" is R's first
 *   --bug-thread T  neighbour in the order -x +x -y +y -z +z.  KIND (and what follows):
 *   wrongtag   R's force-exchange MPI_Irecv from its first neighbour uses tag + 1    (hang)
 *   truncate   R's force-exchange MPI_Isend to its first neighbour sends (S+2)^2 nodes' data
 *              where the neighbour receives (S+1)^2: MPI truncation error there      (crash)
 *   nosend     R skips its force-exchange MPI_Isend to its first neighbour           (hang)
 *   norecv     R skips its force-exchange MPI_Irecv (and MPI_Wait) from its first neighbour;
 *              the message stays queued and R reads one message behind from then on (changed)
 *   wrongpeer  R sends its force-exchange message for its first neighbour to its next
 *              neighbour (to itself when it has one neighbour)                        (hang)
 *   collorder  R calls MPI_Barrier before TimeIncrement's MPI_Allreduce               (hang)
 *   nocoll     R skips TimeIncrement's MPI_Allreduce and keeps its local dt          (hang)
 *   collcount  R's TimeIncrement MPI_Allreduce has count 2 instead of 1
 *   wrongroot  R's energy MPI_Reduce names root 1 instead of 0
 *   wrongcomm  R's TimeIncrement MPI_Allreduce is on the report communicator (a duplicate of
 *              MPI_COMM_WORLD) instead of MPI_COMM_WORLD                              (hang)
 *   nowait     R skips the MPI_Wait of its force-exchange receive from its first neighbour
 *              (and reads the buffer anyway)                                       (changed)
 *   segv       R writes through a NULL work array in EvalEOSForElems                 (crash)
 *   abort      R's volume check in CalcLagrangeElements uses the wrong bound:
 *              MPI_Abort(MPI_COMM_WORLD, 3)                                          (crash)
 *   nocrit     thread T of R adds its energy to the rank's sum without omp critical (changed)
 *   threads    R runs CalcVelocityForNodes' region with one thread more          (changed)
 *   skipregion thread T of R does not call CalcFBHourglassForceForElems in its share of the
 *              hourglass region                                                   (changed)
 *   skipcall   R skips CalcQForElems                                              (changed)
 *   extracall  R calls CalcPositionForNodes twice                                  (changed)
 *   livelock   R polls for the steering message with MPI_Iprobe (every 2 ms) until one comes;
 *              none does, and the others wait in MPI_Allreduce                          (hang)
 */
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NDIR 6                        /* -x +x -y +y -z +z */
#define OPPOSITE(d) ((d) ^ 1)
#define MSG_COMM_SBN 1024
#define MSG_SYNC_POS_VEL 2048
#define MSG_STEER 4096
#define MAX_FIELDS 6
#define NUM_REG 2                     /* material regions */
#define ENERGY_SCALE 1.0e6            /* fixed point of the energy diagnostic: exact sums */
#define VOLUME_ERROR 3

typedef enum {
    BUG_NONE, BUG_WRONGTAG, BUG_TRUNCATE, BUG_NOSEND, BUG_NORECV, BUG_WRONGPEER, BUG_COLLORDER,
    BUG_NOCOLL, BUG_COLLCOUNT, BUG_WRONGROOT, BUG_WRONGCOMM, BUG_NOWAIT, BUG_SEGV, BUG_ABORT,
    BUG_NOCRIT, BUG_THREADS, BUG_SKIPREGION, BUG_SKIPCALL, BUG_EXTRACALL, BUG_LIVELOCK, NUM_BUGS
} BugKind;

static const char *bugNames[NUM_BUGS] = {
    "none", "wrongtag", "truncate", "nosend", "norecv", "wrongpeer", "collorder",
    "nocoll", "collcount", "wrongroot", "wrongcomm", "nowait", "segv", "abort",
    "nocrit", "threads", "skipregion", "skipcall", "extracall", "livelock"};

typedef struct Domain {
    int size;                         /* elements per edge */
    int numElem, numNode, edgeNodes, faceNodes;
    int px, py, pz, cx, cy, cz;
    int nbr[NDIR];                    /* neighbour rank per direction, -1 at the edge */
    int firstNbr;                     /* first direction with a neighbour */
    int *faceList[NDIR];              /* the nodes of each face, in the same order on both sides */
    int *nodelist;                    /* 8 nodes per element */
    /* nodes */
    double *x, *y, *z, *xd, *yd, *zd, *xdd, *ydd, *zdd, *fx, *fy, *fz, *nodalMass;
    /* elements */
    double *e, *p, *q, *v, *vnew, *vnewc, *delv, *vdov, *volo, *elemMass, *ss, *arealg, *sig;
    double *delvGrad, *fxElem, *fyElem, *fzElem;
    int *regElemList[NUM_REG], regElemSize[NUM_REG];
    double *regWork[NUM_REG];
    /* communication */
    double *sendBuf[NDIR], *recvBuf[NDIR];
    MPI_Request sendReq[NDIR], recvReq[NDIR];
    MPI_Comm reportComm;
    /* time */
    double time, dt, dtmax, dtcourant, dthydro;
    int cycle, stepping, numThreads;
    /* constants */
    double hgcoef, qlc, qqc, gamma, emin, pmin, eosvmin, eosvmax, ucut, dvovmax;
    /* diagnostics */
    long long energySum, energyTotal;
    unsigned long long energyHistory;
} Domain;

static int myRank, numRanks;
static BugKind bug = BUG_NONE;
static int bugRank = 0, bugIter = 3, bugThread = 1;
static int numIters = 10;
static int dynamicSchedule;           /* --schedule dynamic */
static Domain domain;

/* The injected bug fires here: on rank R, in time step I. */
#define BUG(k) (bug == (k) && myRank == bugRank && domain.stepping && domain.cycle == bugIter)
#define BUG_THREAD(k) (BUG(k) && omp_get_thread_num() == bugThread)

static void Usage(const char *msg)
{
    if (myRank == 0)
        fprintf(stderr, "minilulesh: %s\nusage: minilulesh [--size S] [--iters N] [--schedule static|dynamic] "
                        "[--bug KIND] "
                        "[--bug-rank R] [--bug-iter I] [--bug-thread T]\n", msg);
    MPI_Finalize();
    exit(2);
}

static void ParseCommandLineOptions(int argc, char **argv, Domain *dom)
{
    dom->size = 4;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!val)
            Usage("missing value");
        if (!strcmp(a, "--size"))
            dom->size = atoi(val);
        else if (!strcmp(a, "--iters"))
            numIters = atoi(val);
        else if (!strcmp(a, "--schedule")) {
            if (strcmp(val, "static") && strcmp(val, "dynamic"))
                Usage("--schedule is static or dynamic");
            dynamicSchedule = !strcmp(val, "dynamic");
        }
        else if (!strcmp(a, "--bug-rank"))
            bugRank = atoi(val);
        else if (!strcmp(a, "--bug-iter"))
            bugIter = atoi(val);
        else if (!strcmp(a, "--bug-thread"))
            bugThread = atoi(val);
        else if (!strcmp(a, "--bug")) {
            int k;
            for (k = 0; k < NUM_BUGS && strcmp(val, bugNames[k]); k++)
                ;
            if (k == NUM_BUGS)
                Usage("unknown bug");
            bug = (BugKind)k;
        } else
            Usage("unknown option");
    }
    if (dom->size < 1 || dom->size > 64 || numIters < 1)
        Usage("--size must be 1..64 and --iters positive");
}

/* Balanced px >= py >= pz with px py pz = P (what MPI_Dims_create gives). */
static void InitDecomposition(Domain *dom)
{
    int best = -1;
    for (int pz = 1; pz * pz * pz <= numRanks; pz++) {
        if (numRanks % pz)
            continue;
        for (int py = pz; py * py <= numRanks / pz; py++) {
            if ((numRanks / pz) % py)
                continue;
            int px = numRanks / pz / py;
            if (best < 0 || px - pz < best) {
                best = px - pz;
                dom->px = px;
                dom->py = py;
                dom->pz = pz;
            }
        }
    }
    dom->cx = myRank % dom->px;
    dom->cy = myRank / dom->px % dom->py;
    dom->cz = myRank / (dom->px * dom->py);
    int plane = dom->px * dom->py;
    dom->nbr[0] = dom->cx > 0 ? myRank - 1 : -1;
    dom->nbr[1] = dom->cx < dom->px - 1 ? myRank + 1 : -1;
    dom->nbr[2] = dom->cy > 0 ? myRank - dom->px : -1;
    dom->nbr[3] = dom->cy < dom->py - 1 ? myRank + dom->px : -1;
    dom->nbr[4] = dom->cz > 0 ? myRank - plane : -1;
    dom->nbr[5] = dom->cz < dom->pz - 1 ? myRank + plane : -1;
    dom->firstNbr = -1;
    for (int d = NDIR - 1; d >= 0; d--)
        if (dom->nbr[d] >= 0)
            dom->firstNbr = d;
}

static double *AllocReal(int n)
{
    double *a = calloc((size_t)n, sizeof(double));
    if (!a) {
        fprintf(stderr, "minilulesh: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return a;
}

#define NODE(dom, i, j, k) (((k) * (dom)->edgeNodes + (j)) * (dom)->edgeNodes + (i))

/* The three averaged edge vectors of an element (sums over its four edges along i, j, k). */
#define EDGE_VECTORS(dom, n, a, b, c)                                                           \
    for (int e_ = 0; e_ < 3; e_++)                                                              \
        a[e_] = b[e_] = c[e_] = 0.0;                                                            \
    for (int c_ = 0; c_ < 8; c_++) {                                                            \
        double p_[3] = {(dom)->x[n[c_]], (dom)->y[n[c_]], (dom)->z[n[c_]]};                     \
        for (int e_ = 0; e_ < 3; e_++) {                                                        \
            a[e_] += (c_ & 1 ? 1.0 : -1.0) * p_[e_];                                            \
            b[e_] += (c_ & 2 ? 1.0 : -1.0) * p_[e_];                                            \
            c[e_] += (c_ & 4 ? 1.0 : -1.0) * p_[e_];                                            \
        }                                                                                       \
    }

/* Volume of a hexahedron from its averaged edge vectors (exact for parallelepipeds). */
static double CalcElemVolume(const Domain *dom, int el)
{
    const int *n = &dom->nodelist[8 * el];
    double a[3], b[3], c[3];
    EDGE_VECTORS(dom, n, a, b, c)
    return (a[0] * (b[1] * c[2] - b[2] * c[1]) - a[1] * (b[0] * c[2] - b[2] * c[0]) +
            a[2] * (b[0] * c[1] - b[1] * c[0])) / 64.0;
}

static void BuildMesh(Domain *dom)
{
    int s = dom->size;
    dom->edgeNodes = s + 1;
    dom->numElem = s * s * s;
    dom->numNode = dom->edgeNodes * dom->edgeNodes * dom->edgeNodes;
    dom->faceNodes = dom->edgeNodes * dom->edgeNodes;
    double **nodeFields[] = {&dom->x, &dom->y, &dom->z, &dom->xd, &dom->yd, &dom->zd, &dom->xdd,
                             &dom->ydd, &dom->zdd, &dom->fx, &dom->fy, &dom->fz, &dom->nodalMass};
    for (size_t f = 0; f < sizeof nodeFields / sizeof *nodeFields; f++)
        *nodeFields[f] = AllocReal(dom->numNode);
    double **elemFields[] = {&dom->e, &dom->p, &dom->q, &dom->v, &dom->vnew, &dom->vnewc,
                             &dom->delv, &dom->vdov, &dom->volo, &dom->elemMass, &dom->ss,
                             &dom->arealg, &dom->sig, &dom->delvGrad};
    for (size_t f = 0; f < sizeof elemFields / sizeof *elemFields; f++)
        *elemFields[f] = AllocReal(dom->numElem);
    dom->fxElem = AllocReal(8 * dom->numElem);
    dom->fyElem = AllocReal(8 * dom->numElem);
    dom->fzElem = AllocReal(8 * dom->numElem);
    dom->nodelist = malloc(sizeof(int) * 8 * (size_t)dom->numElem);
    double h = 1.0 / s;
    for (int k = 0; k <= s; k++)
        for (int j = 0; j <= s; j++)
            for (int i = 0; i <= s; i++) {
                int n = NODE(dom, i, j, k);
                dom->x[n] = (dom->cx * s + i) * h;
                dom->y[n] = (dom->cy * s + j) * h;
                dom->z[n] = (dom->cz * s + k) * h;
            }
    for (int k = 0; k < s; k++)
        for (int j = 0; j < s; j++)
            for (int i = 0; i < s; i++) {
                int el = (k * s + j) * s + i;
                for (int c = 0; c < 8; c++)
                    dom->nodelist[8 * el + c] = NODE(dom, i + (c & 1), j + (c >> 1 & 1), k + (c >> 2));
            }
}

static void CreateRegionIndexSets(Domain *dom)
{
    for (int r = 0; r < NUM_REG; r++) {
        dom->regElemSize[r] = 0;
        dom->regElemList[r] = malloc(sizeof(int) * (size_t)dom->numElem);
        dom->regWork[r] = AllocReal(dom->numElem);
    }
    for (int el = 0; el < dom->numElem; el++) {
        int r = (el / dom->size) % NUM_REG;   /* alternating rows of elements */
        dom->regElemList[r][dom->regElemSize[r]++] = el;
    }
}

static void InitElemState(Domain *dom)
{
    dom->hgcoef = 0.03;
    dom->qlc = 0.5;
    dom->qqc = 2.0;
    dom->gamma = 5.0 / 3.0;
    dom->emin = 1.0e-9;
    dom->pmin = 0.0;
    dom->eosvmin = 0.1;
    dom->eosvmax = 1.0e9;
    dom->ucut = 1.0e-10;
    dom->dvovmax = 0.1;
    for (int el = 0; el < dom->numElem; el++) {
        dom->volo[el] = CalcElemVolume(dom, el);
        dom->elemMass[el] = dom->volo[el];
        dom->v[el] = 1.0;
        dom->e[el] = 1.0e-3;
        dom->arealg[el] = cbrt(dom->volo[el]);
    }
    if (myRank == 0)
        dom->e[0] = 10.0 * dom->size * dom->size * dom->size;    /* the blast */
    for (int el = 0; el < dom->numElem; el++) {
        dom->p[el] = (dom->gamma - 1.0) * dom->e[el] / dom->v[el];
        dom->ss[el] = sqrt(dom->gamma * dom->p[el] * dom->v[el]);
    }
}

static void SetupCommBuffers(Domain *dom)
{
    int s = dom->size, m = dom->edgeNodes;
    size_t cap = (size_t)MAX_FIELDS * (s + 2) * (s + 2);
    for (int d = 0; d < NDIR; d++) {
        dom->sendBuf[d] = AllocReal((int)cap);
        dom->recvBuf[d] = AllocReal((int)cap);
        dom->sendReq[d] = dom->recvReq[d] = MPI_REQUEST_NULL;
        dom->faceList[d] = malloc(sizeof(int) * (size_t)dom->faceNodes);
        int fixed = (d & 1) ? s : 0, k = 0;
        for (int b = 0; b < m; b++)
            for (int a = 0; a < m; a++) {
                int n = d < 2 ? NODE(dom, fixed, a, b) : d < 4 ? NODE(dom, a, fixed, b) : NODE(dom, a, b, fixed);
                dom->faceList[d][k++] = n;
            }
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &dom->reportComm);
}

/* Post the receives of one exchange: nf values per face node from every neighbour. */
static void CommRecv(Domain *dom, int msgType, int nf)
{
    int count = nf * dom->faceNodes;
    int sbn = msgType == MSG_COMM_SBN;
    for (int d = 0; d < NDIR; d++) {
        dom->recvReq[d] = MPI_REQUEST_NULL;
        if (dom->nbr[d] < 0 || (sbn && d == dom->firstNbr && BUG(BUG_NORECV)))
            continue;
        int tag = msgType + OPPOSITE(d);
        if (sbn && d == dom->firstNbr && BUG(BUG_WRONGTAG))
            tag++;
        MPI_Irecv(dom->recvBuf[d], count, MPI_DOUBLE, dom->nbr[d], tag, MPI_COMM_WORLD, &dom->recvReq[d]);
    }
}

/* Pack and send the face values of nf fields to every neighbour; wait for the sends. */
static void CommSend(Domain *dom, int msgType, int nf, double **fields)
{
    int sbn = msgType == MSG_COMM_SBN;
    for (int d = 0; d < NDIR; d++) {
        dom->sendReq[d] = MPI_REQUEST_NULL;
        if (dom->nbr[d] < 0)
            continue;
        double *buf = dom->sendBuf[d];
        const int *fl = dom->faceList[d];
        for (int k = 0; k < dom->faceNodes; k++)
            for (int f = 0; f < nf; f++)
                buf[k * nf + f] = fields[f][fl[k]];
        int count = nf * dom->faceNodes, dest = dom->nbr[d];
        if (sbn && d == dom->firstNbr) {
            if (BUG(BUG_NOSEND))
                continue;
            if (BUG(BUG_TRUNCATE))
                count = nf * (dom->size + 2) * (dom->size + 2);
            if (BUG(BUG_WRONGPEER)) {
                int d2 = (d + 1) % NDIR;
                while (d2 != d && dom->nbr[d2] < 0)
                    d2 = (d2 + 1) % NDIR;
                dest = d2 == d ? myRank : dom->nbr[d2];
            }
        }
        MPI_Isend(buf, count, MPI_DOUBLE, dest, msgType + d, MPI_COMM_WORLD, &dom->sendReq[d]);
    }
    MPI_Waitall(NDIR, dom->sendReq, MPI_STATUSES_IGNORE);
}

/* Wait for the force messages and add the neighbours' share of the shared nodes' forces. */
static void CommSBN(Domain *dom, int nf, double **fields)
{
    for (int d = 0; d < NDIR; d++) {
        if (dom->nbr[d] < 0 || (d == dom->firstNbr && BUG(BUG_NORECV)))
            continue;
        if (!(d == dom->firstNbr && BUG(BUG_NOWAIT)))
            MPI_Wait(&dom->recvReq[d], MPI_STATUS_IGNORE);
        const double *buf = dom->recvBuf[d];
        const int *fl = dom->faceList[d];
        for (int k = 0; k < dom->faceNodes; k++)
            for (int f = 0; f < nf; f++)
                fields[f][fl[k]] += buf[k * nf + f];
    }
}

/* Wait for the positions and velocities and average the shared nodes' copies. */
static void CommSyncPosVel(Domain *dom)
{
    double *fields[6] = {dom->x, dom->y, dom->z, dom->xd, dom->yd, dom->zd};
    for (int d = 0; d < NDIR; d++) {
        if (dom->nbr[d] < 0)
            continue;
        MPI_Wait(&dom->recvReq[d], MPI_STATUS_IGNORE);
        const double *buf = dom->recvBuf[d];
        const int *fl = dom->faceList[d];
        for (int k = 0; k < dom->faceNodes; k++)
            for (int f = 0; f < 6; f++)
                fields[f][fl[k]] = 0.5 * (fields[f][fl[k]] + buf[k * 6 + f]);
    }
}

static void InitNodalMass(Domain *dom)
{
    for (int el = 0; el < dom->numElem; el++)
        for (int c = 0; c < 8; c++)
            dom->nodalMass[dom->nodelist[8 * el + c]] += dom->elemMass[el] / 8.0;
    double *mass[1] = {dom->nodalMass};
    CommRecv(dom, MSG_COMM_SBN, 1);
    CommSend(dom, MSG_COMM_SBN, 1, mass);
    CommSBN(dom, 1, mass);
}

/* This thread's share [lo, hi) of n items. */
static void ThreadRange(int n, int *lo, int *hi)
{
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    *lo = (int)((long)n * t / nt);
    *hi = (int)((long)n * (t + 1) / nt);
}

/* ------------------------------------------------------------------ time constraints */

static void CalcCourantConstraintForElems(Domain *dom)
{
    double dtc = 1.0e20;
#pragma omp parallel for schedule(static) reduction(min : dtc)
    for (int el = 0; el < dom->numElem; el++) {
        double c = dom->ss[el] * dom->ss[el];
        if (dom->vdov[el] < 0.0)
            c += 4.0 * dom->qqc * dom->qqc * dom->arealg[el] * dom->arealg[el] * dom->vdov[el] * dom->vdov[el];
        double dt = 0.25 * dom->arealg[el] / sqrt(c > 1.0e-30 ? c : 1.0e-30);
        if (dt < dtc)
            dtc = dt;
    }
    dom->dtcourant = dtc;
}

static void CalcHydroConstraintForElems(Domain *dom)
{
    double dth = 1.0e20;
#pragma omp parallel for schedule(static) reduction(min : dth)
    for (int el = 0; el < dom->numElem; el++)
        if (dom->vdov[el] != 0.0) {
            double dt = dom->dvovmax / (fabs(dom->vdov[el]) + 1.0e-20);
            if (dt < dth)
                dth = dt;
        }
    dom->dthydro = dth;
}

static void CalcTimeConstraintsForElems(Domain *dom)
{
    CalcCourantConstraintForElems(dom);
    CalcHydroConstraintForElems(dom);
}

static void InitTimeStep(Domain *dom)
{
    CalcTimeConstraintsForElems(dom);
    dom->dt = 0.1 * dom->dtcourant;
    dom->dtmax = 10.0 * dom->dtcourant;
    dom->time = 0.0;
    dom->cycle = 0;
    dom->numThreads = omp_get_max_threads();
}

/* ------------------------------------------------------------------ TimeIncrement */

/* A steering message (from a monitoring tool) would stop the run; none is sent here. */
static void CheckSteering(Domain *dom)
{
    int flag = 0;
    MPI_Status st;
    const struct timespec backoff = {0, 2000000};
    for (;;) {
        MPI_Iprobe(MPI_ANY_SOURCE, MSG_STEER, MPI_COMM_WORLD, &flag, &st);
        if (flag || !BUG(BUG_LIVELOCK))
            break;
        nanosleep(&backoff, NULL);            /* poll politely: every 2 ms */
    }
    if (flag) {
        int cmd;
        MPI_Recv(&cmd, 1, MPI_INT, st.MPI_SOURCE, MSG_STEER, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (cmd == 0)
            dom->dtmax *= 0.5;
    }
}

static void TimeIncrement(Domain *dom)
{
    dom->stepping = 1;
    CheckSteering(dom);
    double olddt = dom->dt, local[2], global[2];
    double gnewdt = 1.0e20;
    if (dom->dtcourant / 2.0 < gnewdt)
        gnewdt = dom->dtcourant / 2.0;
    if (dom->dthydro * 2.0 / 3.0 < gnewdt)
        gnewdt = dom->dthydro * 2.0 / 3.0;
    local[0] = gnewdt;
    local[1] = dom->dtcourant;
    global[0] = global[1] = 0.0;
    int count = BUG(BUG_COLLCOUNT) ? 2 : 1;
    MPI_Comm comm = BUG(BUG_WRONGCOMM) ? dom->reportComm : MPI_COMM_WORLD;
    if (BUG(BUG_COLLORDER))
        MPI_Barrier(MPI_COMM_WORLD);
    if (BUG(BUG_NOCOLL))
        global[0] = local[0];
    else
        MPI_Allreduce(local, global, count, MPI_DOUBLE, MPI_MIN, comm);
    double newdt = global[0];
    if (newdt > 1.2 * olddt)
        newdt = 1.2 * olddt;
    if (newdt > dom->dtmax)
        newdt = dom->dtmax;
    dom->dt = newdt;
    dom->time += newdt;
}

/* ------------------------------------------------------------------ LagrangeNodal */

static void InitStressTermsForElems(Domain *dom)
{
#pragma omp parallel for schedule(static)
    for (int el = 0; el < dom->numElem; el++)
        dom->sig[el] = -(dom->p[el] + dom->q[el]);
}

/* Corner forces (p + q) dV/dx of each corner: the work they do is what CalcEnergyForElems
 * takes from the element's internal energy. */
static void IntegrateStressForElems(Domain *dom)
{
#pragma omp parallel for schedule(static)
    for (int el = 0; el < dom->numElem; el++) {
        const int *n = &dom->nodelist[8 * el];
        double a[3], b[3], c[3];
        EDGE_VECTORS(dom, n, a, b, c)
        double bc[3] = {b[1] * c[2] - b[2] * c[1], b[2] * c[0] - b[0] * c[2], b[0] * c[1] - b[1] * c[0]};
        double ca[3] = {c[1] * a[2] - c[2] * a[1], c[2] * a[0] - c[0] * a[2], c[0] * a[1] - c[1] * a[0]};
        double ab[3] = {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
        double w = -dom->sig[el] / 64.0;
        for (int k = 0; k < 8; k++) {
            double sa = k & 1 ? 1.0 : -1.0, sb = k & 2 ? 1.0 : -1.0, sc = k & 4 ? 1.0 : -1.0;
            dom->fxElem[8 * el + k] = w * (sa * bc[0] + sb * ca[0] + sc * ab[0]);
            dom->fyElem[8 * el + k] = w * (sa * bc[1] + sb * ca[1] + sc * ab[1]);
            dom->fzElem[8 * el + k] = w * (sa * bc[2] + sb * ca[2] + sc * ab[2]);
        }
    }
}

/* Hourglass damping of the elements [lo, hi): corner velocities pulled to their mean. */
static void CalcFBHourglassForceForElems(Domain *dom, int lo, int hi)
{
    for (int el = lo; el < hi; el++) {
        const int *n = &dom->nodelist[8 * el];
        double xm = 0, ym = 0, zm = 0;
        for (int c = 0; c < 8; c++) {
            xm += dom->xd[n[c]];
            ym += dom->yd[n[c]];
            zm += dom->zd[n[c]];
        }
        double coef = dom->hgcoef * dom->elemMass[el] / (dom->arealg[el] > 0 ? dom->arealg[el] : 1.0);
        for (int c = 0; c < 8; c++) {
            dom->fxElem[8 * el + c] -= coef * (dom->xd[n[c]] - xm / 8.0);
            dom->fyElem[8 * el + c] -= coef * (dom->yd[n[c]] - ym / 8.0);
            dom->fzElem[8 * el + c] -= coef * (dom->zd[n[c]] - zm / 8.0);
        }
    }
}

static void CalcHourglassControlForElems(Domain *dom)
{
#pragma omp parallel
    {
        int lo, hi;
        ThreadRange(dom->numElem, &lo, &hi);
        if (!BUG_THREAD(BUG_SKIPREGION))
            CalcFBHourglassForceForElems(dom, lo, hi);
    }
}

/* Each node's force: the corner forces of its elements, in a fixed order. */
static void SumElemForcesToNodes(Domain *dom)
{
    int s = dom->size, m = dom->edgeNodes;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < dom->numNode; n++) {
        int i = n % m, j = n / m % m, k = n / (m * m);
        double fx = 0, fy = 0, fz = 0;
        for (int c = 0; c < 8; c++) {
            int ei = i - (c & 1), ej = j - (c >> 1 & 1), ek = k - (c >> 2);
            if (ei < 0 || ej < 0 || ek < 0 || ei >= s || ej >= s || ek >= s)
                continue;
            int el = (ek * s + ej) * s + ei;
            fx += dom->fxElem[8 * el + c];
            fy += dom->fyElem[8 * el + c];
            fz += dom->fzElem[8 * el + c];
        }
        dom->fx[n] = fx;
        dom->fy[n] = fy;
        dom->fz[n] = fz;
    }
}

static void CalcVolumeForceForElems(Domain *dom)
{
    InitStressTermsForElems(dom);
    IntegrateStressForElems(dom);
    CalcHourglassControlForElems(dom);
    SumElemForcesToNodes(dom);
}

static void CalcForceForNodes(Domain *dom)
{
    double *forces[3] = {dom->fx, dom->fy, dom->fz};
    CommRecv(dom, MSG_COMM_SBN, 3);
    CalcVolumeForceForElems(dom);
    CommSend(dom, MSG_COMM_SBN, 3, forces);
    CommSBN(dom, 3, forces);
}

static void CalcAccelerationForNodes(Domain *dom)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < dom->numNode; n++) {
        dom->xdd[n] = dom->fx[n] / dom->nodalMass[n];
        dom->ydd[n] = dom->fy[n] / dom->nodalMass[n];
        dom->zdd[n] = dom->fz[n] / dom->nodalMass[n];
    }
}

/* Symmetry planes x = 0, y = 0, z = 0 (on the ranks that hold them). */
static void ApplyAccelerationBoundaryConditionsForNodes(Domain *dom)
{
    for (int k = 0; k < dom->faceNodes; k++) {
        if (dom->cx == 0)
            dom->xdd[dom->faceList[0][k]] = 0.0;
        if (dom->cy == 0)
            dom->ydd[dom->faceList[2][k]] = 0.0;
        if (dom->cz == 0)
            dom->zdd[dom->faceList[4][k]] = 0.0;
    }
}

static void CalcVelocityForNodes(Domain *dom)
{
    int nt = dom->numThreads;
    if (BUG(BUG_THREADS))
        nt++;
    double dt = dom->dt, ucut = dom->ucut;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int n = 0; n < dom->numNode; n++) {
        double u = dom->xd[n] + dom->xdd[n] * dt, w = dom->yd[n] + dom->ydd[n] * dt,
               t = dom->zd[n] + dom->zdd[n] * dt;
        dom->xd[n] = fabs(u) < ucut ? 0.0 : u;
        dom->yd[n] = fabs(w) < ucut ? 0.0 : w;
        dom->zd[n] = fabs(t) < ucut ? 0.0 : t;
    }
}

static void CalcPositionForNodes(Domain *dom)
{
    double dt = dom->dt;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < dom->numNode; n++) {
        dom->x[n] += dom->xd[n] * dt;
        dom->y[n] += dom->yd[n] * dt;
        dom->z[n] += dom->zd[n] * dt;
    }
}

static void LagrangeNodal(Domain *dom)
{
    double *posvel[6] = {dom->x, dom->y, dom->z, dom->xd, dom->yd, dom->zd};
    CalcForceForNodes(dom);
    CalcAccelerationForNodes(dom);
    ApplyAccelerationBoundaryConditionsForNodes(dom);
    CalcVelocityForNodes(dom);
    CalcPositionForNodes(dom);
    if (BUG(BUG_EXTRACALL))
        CalcPositionForNodes(dom);
    CommRecv(dom, MSG_SYNC_POS_VEL, 6);
    CommSend(dom, MSG_SYNC_POS_VEL, 6, posvel);
    CommSyncPosVel(dom);
}

/* ------------------------------------------------------------------ LagrangeElements */

#define KINEMATICS_OF_ELEM(dom, el, dt)                                                         \
    do {                                                                                        \
        double vol = CalcElemVolume(dom, el);                                                   \
        double vrel = vol / (dom)->volo[el];                                                    \
        (dom)->vnew[el] = vrel;                                                                 \
        (dom)->delv[el] = vrel - (dom)->v[el];                                                  \
        (dom)->vdov[el] = (dom)->delv[el] / ((dom)->v[el] * (dt));                              \
        (dom)->arealg[el] = cbrt(vol > 0.0 ? vol : 0.0);                                        \
    } while (0)

/* New volumes.  With --schedule dynamic the elements go to the threads dynamically: which
 * thread calls CalcElemVolume for which element changes from run to run (scheduling noise
 * in the traces; the results stay the same). */
static void CalcKinematicsForElems(Domain *dom)
{
    double dt = dom->dt;
    if (!dynamicSchedule) {
#pragma omp parallel for schedule(static)
        for (int el = 0; el < dom->numElem; el++)
            KINEMATICS_OF_ELEM(dom, el, dt);
    } else {
#pragma omp parallel for schedule(dynamic, 1)
        for (int el = 0; el < dom->numElem; el++)
            KINEMATICS_OF_ELEM(dom, el, dt);
    }
}

static void CalcLagrangeElements(Domain *dom)
{
    CalcKinematicsForElems(dom);
    double vbound = BUG(BUG_ABORT) ? dom->eosvmax : 0.0;
    for (int el = 0; el < dom->numElem; el++)
        if (dom->vnew[el] <= vbound)
            MPI_Abort(MPI_COMM_WORLD, VOLUME_ERROR);
}

static void CalcMonotonicQGradientsForElems(Domain *dom)
{
#pragma omp parallel for schedule(static)
    for (int el = 0; el < dom->numElem; el++)
        dom->delvGrad[el] = dom->vdov[el] * dom->arealg[el];
}

static void CalcMonotonicQRegionForElems(Domain *dom)
{
#pragma omp parallel for schedule(static)
    for (int el = 0; el < dom->numElem; el++) {
        double g = dom->delvGrad[el], rho = dom->elemMass[el] / (dom->volo[el] * dom->vnew[el]);
        dom->q[el] = g < 0.0 ? rho * (dom->qqc * g * g - dom->qlc * dom->ss[el] * g) : 0.0;
    }
}

static void CalcQForElems(Domain *dom)
{
    CalcMonotonicQGradientsForElems(dom);
    CalcMonotonicQRegionForElems(dom);
}

static void CalcEnergyForElems(Domain *dom, int r)
{
    const int *list = dom->regElemList[r];
    double emin = dom->emin;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < dom->regElemSize[r]; i++) {
        int el = list[i];
        double e = dom->e[el] - dom->delv[el] * (dom->p[el] + dom->q[el]);
        dom->e[el] = e < emin ? emin : e;
    }
}

static void CalcPressureForElems(Domain *dom, int r)
{
    const int *list = dom->regElemList[r];
    const double *compression = dom->regWork[r];
#pragma omp parallel for schedule(static)
    for (int i = 0; i < dom->regElemSize[r]; i++) {
        int el = list[i];
        double p = (dom->gamma - 1.0) * dom->e[el] * (1.0 + compression[i]);
        dom->p[el] = p < dom->pmin ? dom->pmin : p;
    }
}

static void CalcSoundSpeedForElems(Domain *dom, int r)
{
    const int *list = dom->regElemList[r];
#pragma omp parallel for schedule(static)
    for (int i = 0; i < dom->regElemSize[r]; i++) {
        int el = list[i];
        double c2 = dom->gamma * dom->p[el] * dom->vnewc[el];
        dom->ss[el] = sqrt(c2 > 1.0e-20 ? c2 : 1.0e-20);
    }
}

static void EvalEOSForElems(Domain *dom, int r)
{
    const int *list = dom->regElemList[r];
    double *compression = dom->regWork[r];
    if (r == NUM_REG - 1 && BUG(BUG_SEGV))
        compression = NULL;
    for (int i = 0; i < dom->regElemSize[r]; i++)
        compression[i] = 1.0 / dom->vnewc[list[i]] - 1.0;
    CalcEnergyForElems(dom, r);
    CalcPressureForElems(dom, r);
    CalcSoundSpeedForElems(dom, r);
}

static void ApplyMaterialPropertiesForElems(Domain *dom)
{
    double vmin = dom->eosvmin, vmax = dom->eosvmax;
#pragma omp parallel for schedule(static)
    for (int el = 0; el < dom->numElem; el++) {
        double vc = dom->vnew[el];
        dom->vnewc[el] = vc < vmin ? vmin : vc > vmax ? vmax : vc;
    }
    for (int r = 0; r < NUM_REG; r++)
        EvalEOSForElems(dom, r);
}

static void UpdateVolumesForElems(Domain *dom)
{
#pragma omp parallel for schedule(static)
    for (int el = 0; el < dom->numElem; el++)
        dom->v[el] = fabs(dom->vnew[el] - 1.0) < 1.0e-12 ? 1.0 : dom->vnew[el];
}

static void LagrangeElements(Domain *dom)
{
    CalcLagrangeElements(dom);
    if (!BUG(BUG_SKIPCALL))
        CalcQForElems(dom);
    ApplyMaterialPropertiesForElems(dom);
    UpdateVolumesForElems(dom);
}

/* ------------------------------------------------------------------ diagnostics */

static void CalcEnergyDiagnostics(Domain *dom)
{
    dom->energySum = 0;
#pragma omp parallel
    {
        int lo, hi;
        long long part = 0;
        ThreadRange(dom->numElem, &lo, &hi);
        for (int el = lo; el < hi; el++)
            part += llround(dom->e[el] * dom->elemMass[el] * ENERGY_SCALE);
        if (BUG_THREAD(BUG_NOCRIT))
            dom->energySum += part;
        else {
#pragma omp critical
            dom->energySum += part;
        }
    }
    int root = BUG(BUG_WRONGROOT) ? 1 : 0;
    dom->energyTotal = 0;
    MPI_Reduce(&dom->energySum, &dom->energyTotal, 1, MPI_LONG_LONG, MPI_SUM, root, MPI_COMM_WORLD);
    if (myRank == 0)
        dom->energyHistory = dom->energyHistory * 1000003ull + (unsigned long long)dom->energyTotal;
}

static void LagrangeLeapFrog(Domain *dom)
{
    LagrangeNodal(dom);
    LagrangeElements(dom);
    CalcTimeConstraintsForElems(dom);
    CalcEnergyDiagnostics(dom);
    dom->cycle++;
}

static void VerifyAndWriteFinalOutput(Domain *dom)
{
    double local = 0.0, global = 0.0;
    for (int el = 0; el < dom->numElem; el++)
        local += dom->e[el] + dom->p[el] + dom->q[el] + dom->v[el];
    for (int n = 0; n < dom->numNode; n++)
        local += dom->x[n] + 2.0 * dom->y[n] + 3.0 * dom->z[n] + dom->xd[n] + dom->yd[n] + dom->zd[n];
    MPI_Reduce(&local, &global, 1, MPI_DOUBLE, MPI_SUM, 0, dom->reportComm);
    if (myRank == 0)
        printf("minilulesh: %d ranks (%dx%dx%d), %d^3 elements per rank, %d steps, "
               "time %.9e, energy %lld (history %016llx), checksum %.12e\n",
               numRanks, dom->px, dom->py, dom->pz, dom->size, dom->cycle, dom->time,
               dom->energyTotal, dom->energyHistory, global);
    MPI_Comm_free(&dom->reportComm);
}

int main(int argc, char **argv)
{
    int provided;
    Domain *dom = &domain;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &myRank);
    MPI_Comm_size(MPI_COMM_WORLD, &numRanks);
    ParseCommandLineOptions(argc, argv, dom);
    InitDecomposition(dom);
    BuildMesh(dom);
    CreateRegionIndexSets(dom);
    InitElemState(dom);
    SetupCommBuffers(dom);
    InitNodalMass(dom);
    InitTimeStep(dom);
    for (int it = 0; it < numIters; it++) {
        TimeIncrement(dom);
        LagrangeLeapFrog(dom);
    }
    VerifyAndWriteFinalOutput(dom);
    MPI_Finalize();
    return 0;
}
