#!/usr/bin/env python3
"""The bug zoo: MPI(+OpenMP) programs with injected bugs, one table of cases, and the runs
that trace them with pin/ (issue 12, "A bug zoo of your own").

    .venv/bin/python bench/zoo.py list [--json]
    .venv/bin/python bench/zoo.py trace [--only GROUP[/NAME] ...] [--out DIR]
    .venv/bin/python bench/zoo.py check [--only GROUP[/NAME] ...] [--out DIR]

``CASES`` is the table, as plain data: per case the program (examples/programs/), ranks x
OpenMP threads, the arguments (which bug, on which rank, thread and time step), the class
of the bug, what the run is expected to do (hang, crash, or complete with changed
behaviour), and where the culprit is: rank, thread, the 1-based iteration of the
program's time-step loop and the call where the culprit's own trace first differs from
its normal twin.  Every group (program at one rank count) has a ``normal`` run; the
groups of two OpenMP programs also have ``normal2``, a second normal run (for noise
tests).  Every run is traced with MPI arguments in the event names (``parlot-run -a``).

``trace`` builds pin/ and the programs, traces each selected case into
DIR/GROUP/NAME (default bench/zoo/traces/), replacing what was there, and prints one line
per case: the exit code, the seconds, and what the run did against what the table says.
Hanging runs are ended by SIGTERM once their trace files stop changing (a livelocked run,
whose files never stop changing, by the case's time limit); crashing runs end by
themselves with a non-zero exit code, as expected.  It writes DIR/runs.json (the outcome
of every case traced there, merged with earlier ones) and exits 1 if any case did not do
what the table says.  ``check`` reads traced runs and checks that each culprit's trace
first differs from its normal twin at the table's call and iteration (and says how many
traces of each normal2 differ from normal).

The ``call`` of a case is the plain name of the call at the culprit's first difference:
the call it made with different arguments, in place of the normal call (oddeven's swap:
MPI_Send where the normal run receives first) or in addition (an extra MPI_Barrier), or,
when it skipped one, the call the normal run made there; for a crash outside MPI (segv)
the function it died in; for a team with one thread more the function whose OpenMP
region it is (the new thread runs its outlined body, e.g. CalcVelocityForNodes._omp_fn.N).
``iteration`` counts from 1: minilulesh's and halo's time steps, oddeven's sort phases,
ilcs's search rounds, cgsolve's CG iterations (its set-up's localProduct is not one).
"""
import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "programs"))
import scenarios  # noqa: E402

DEFAULT_OUT = ROOT / "bench" / "zoo" / "traces"
CLASSES = ("p2p", "collective", "wait", "crash", "openmp", "call", "livelock", "stall", "order")
KINDS = ("normal", "hang", "crash", "changed")


@dataclass(frozen=True)
class Case:
    group: str                  # program-ranks, e.g. "minilulesh-8"
    name: str                   # "normal", "normal2" or the bug, e.g. "wrongtag"
    program: str                # executable in examples/programs/build
    ranks: int
    threads: int                # OMP_NUM_THREADS
    args: tuple                 # the program's arguments (the bug's included)
    bug_class: str = None       # one of CLASSES (None: a normal run)
    expected: str = "normal"    # "hang", "crash" or "changed" ("normal" for normal runs)
    bug_rank: int = None
    bug_thread: int = None      # None: the main thread / the whole process
    iteration: int = None       # 1-based step where the culprit's trace first differs
    call: str = None            # plain function or MPI call name at the culprit's first difference
    hangs: bool = False         # the tracer runner ends it with SIGTERM
    note: str = ""
    limit_s: float = 60.0       # hard time limit of the run (timeout -s TERM)
    noise: tuple = ()           # calls that land on other threads from run to run (normal vs
                                # normal2 differ in them); the check ignores them
    unordered: tuple = ()       # calls whose callees' order and repetitions vary from run to run
                                # (arrival order, dynamic scheduling, polling): the check compares
                                # their callees as sets (see first_difference)

    @property
    def key(self):
        return f"{self.group}/{self.name}"

    def scenario(self):
        return scenarios.Scenario(self.group, self.name, self.program, self.ranks, self.threads,
                                  tuple(self.args), hangs=self.hangs, bug_rank=self.bug_rank,
                                  bug_thread=self.bug_thread, note=self.note, annotate=True)


# --------------------------------------------------------------------------- the table

def _group(program, ranks, threads, base, bugs, normals=("normal",), group=None, noise=(), unordered=()):
    """The cases of one group: its normal run(s), then one case per bug.  ``bugs``:
    (name, bug args, class, expected, rank, thread, iteration, call, note[, limit_s])."""
    group = group or f"{program}-{ranks}"
    out = [Case(group, n, program, ranks, threads, tuple(base), noise=noise, unordered=unordered)
           for n in normals]
    for b in bugs:
        name, args, cls, expected, rank, thread, iteration, call, note = b[:9]
        extra = {"limit_s": b[9]} if len(b) > 9 else {}
        out.append(Case(group, name, program, ranks, threads, tuple(base) + tuple(args), cls, expected,
                        rank, thread, iteration, call, expected == "hang", note, noise=noise,
                        unordered=unordered, **extra))
    return tuple(out)


def _ml(kind, rank, step, thread=None):
    """minilulesh's bug arguments (step is 0-based, as the program takes it)."""
    args = ("--bug", kind, "--bug-rank", str(rank), "--bug-iter", str(step))
    return args + (("--bug-thread", str(thread)) if thread is not None else ())


def _minilulesh(ranks, base, bugs, normals=("normal",), group=None, noise=()):
    """bugs: (kind, class, expected, rank, step (0-based), thread, call, note[, limit_s])."""
    rows = []
    for b in bugs:
        kind, cls, expected, rank, step, thread, call, note = b[:8]
        rows.append((kind, _ml(kind, rank, step, thread), cls, expected, rank, thread, step + 1, call, note,
                     *b[8:]))
    return _group("minilulesh", ranks, 2, base, rows, normals, group, noise)


LIVELOCK_LIMIT = 10.0     # a livelocked rank's files never stop changing: ended by the time limit


def _cg(kind, rank, k):
    """cgsolve's bug arguments (k is the 1-based CG iteration, as the program takes it)."""
    return ("--bug", kind, "--bug-rank", str(rank), "--bug-iter", str(k))

# arrival's regions whose calls come in arrival order (exchange_faces: MPI_Waitany picks the
# face to unpack; distribute_tasks: the master serves whoever asks; poll_particles: as many
# MPI_Iprobe as it takes; relax: OpenMP rows handed out dynamically)
ARRIVAL_UNORDERED = ("exchange_faces", "distribute_tasks", "poll_particles", "relax")


def _arrival(ranks, bugs, normals=("normal", "normal2", "normal3"), iters=10):
    """arrival's group at ``ranks`` x 2 threads, every bug of class "order" (its good runs
    differ in call order).  bugs: (kind, expected, rank, step (0-based), thread, call, note[,
    limit_s])."""
    rows = []
    for b in bugs:
        kind, expected, rank, step, thread, call, note = b[:7]
        rows.append((kind, _ml(kind, rank, step, thread), "order", expected, rank, thread, step + 1, call,
                     f"{kind}: {note}", *b[7:]))
    return _group("arrival", ranks, 2, ("--iters", str(iters)), rows, normals, unordered=ARRIVAL_UNORDERED)


CASES = (
    # ---- minilulesh, 8 ranks (2x2x2: every rank a corner with 3 neighbours) x 2 threads
    *_minilulesh(8, ("--size", "4", "--iters", "10"), (
        ("wrongtag", "p2p", "hang", 5, 3, None, "MPI_Irecv",
         "force-exchange MPI_Irecv from its first neighbour (rank 4) with tag 1026 instead of 1025"),
        ("truncate", "p2p", "crash", 3, 4, None, "MPI_Isend",
         "sends 36 nodes' forces to rank 2, which receives 25: MPI truncation error kills rank 2"),
        ("nosend", "p2p", "hang", 6, 2, None, "MPI_Isend",
         "skips its force-exchange MPI_Isend to rank 7; rank 7 waits in MPI_Wait"),
        ("norecv", "p2p", "crash", 2, 5, None, "MPI_Irecv",
         "skips its force-exchange MPI_Irecv and MPI_Wait for rank 3; reads one message behind "
         "from then on; the left-over message makes MPICH fail in MPI_Finalize"),
        ("wrongpeer", "p2p", "hang", 7, 6, None, "MPI_Isend",
         "sends the force message meant for rank 6 to rank 5; rank 6 waits in MPI_Wait"),
        ("collorder", "collective", "hang", 4, 3, None, "MPI_Barrier",
         "an MPI_Barrier before TimeIncrement's MPI_Allreduce (the others are in the Allreduce)"),
        ("nocoll", "collective", "hang", 1, 5, None, "MPI_Allreduce",
         "skips TimeIncrement's MPI_Allreduce; waits in the halo exchange, the others in the Allreduce"),
        ("collcount", "collective", "crash", 6, 2, None, "MPI_Allreduce",
         "TimeIncrement's MPI_Allreduce with count 2 instead of 1: truncation error on a partner"),
        ("wrongroot", "collective", "changed", 3, 4, None, "MPI_Reduce",
         "the energy MPI_Reduce with root 1 instead of 0; MPICH's small reduction completes anyway, "
         "with the same result: only the call's root argument differs"),
        ("wrongcomm", "collective", "hang", 2, 6, None, "MPI_Allreduce",
         "TimeIncrement's MPI_Allreduce on the report communicator (a dup of MPI_COMM_WORLD)"),
        ("nowait", "wait", "changed", 5, 4, None, "MPI_Wait",
         "skips the MPI_Wait of its force receive from rank 4 and reads the buffer anyway; "
         "the request leaks (MPICH reports a pending reference at exit)"),
        ("segv", "crash", "crash", 7, 5, None, "EvalEOSForElems",
         "writes through a NULL work array in EvalEOSForElems (region 1): SIGSEGV"),
        ("abort", "crash", "crash", 0, 3, None, "MPI_Abort",
         "the volume check in CalcLagrangeElements uses the wrong bound: MPI_Abort(MPI_COMM_WORLD, 3)"),
        ("nocrit", "openmp", "changed", 4, 6, 1, "GOMP_critical_start",
         "thread 1 adds its energy to the rank's sum without omp critical"),
        ("threads", "openmp", "changed", 6, 4, None, "CalcVelocityForNodes",
         "CalcVelocityForNodes' region runs with 3 threads instead of 2: a new thread (index 2) "
         "whose trace has no normal twin"),
        ("skipregion", "openmp", "changed", 1, 2, 0, "CalcFBHourglassForceForElems",
         "the main thread does not call CalcFBHourglassForceForElems in its share of the "
         "hourglass region"),
        ("skipcall", "call", "changed", 0, 5, None, "CalcQForElems",
         "skips CalcQForElems in one step"),
        ("extracall", "call", "changed", 3, 7, None, "CalcPositionForNodes",
         "calls CalcPositionForNodes twice in one step"),
        ("livelock", "livelock", "hang", 5, 3, None, "MPI_Iprobe",
         "polls with MPI_Iprobe (every 2 ms) for a steering message nobody sends; the others wait "
         "in MPI_Allreduce", LIVELOCK_LIMIT),
    ), normals=("normal", "normal2")),
    # ---- minilulesh, 27 ranks (3x3x3; rank 13 is the centre, with 6 neighbours) x 2 threads
    *_minilulesh(27, ("--size", "2", "--iters", "6"), (
        ("wrongtag", "p2p", "hang", 13, 2, None, "MPI_Irecv",
         "the centre rank's force-exchange MPI_Irecv from rank 12 with tag 1026 instead of 1025"),
        ("nosend", "p2p", "hang", 26, 3, None, "MPI_Isend",
         "the last rank skips its force-exchange MPI_Isend to rank 25"),
        ("collorder", "collective", "hang", 9, 1, None, "MPI_Barrier",
         "an MPI_Barrier before TimeIncrement's MPI_Allreduce"),
        ("wrongcomm", "collective", "hang", 17, 4, None, "MPI_Allreduce",
         "TimeIncrement's MPI_Allreduce on the report communicator"),
        ("segv", "crash", "crash", 22, 2, None, "EvalEOSForElems",
         "writes through a NULL work array in EvalEOSForElems: SIGSEGV"),
        ("skipcall", "call", "changed", 13, 3, None, "CalcQForElems",
         "the centre rank skips CalcQForElems in one step"),
        ("nocrit", "openmp", "changed", 20, 4, 1, "GOMP_critical_start",
         "thread 1 adds its energy without omp critical"),
    )),
    # ---- minilulesh, 4 ranks (2x2x1) x 2 threads
    *_minilulesh(4, ("--size", "4", "--iters", "8"), (
        ("truncate", "p2p", "crash", 3, 2, None, "MPI_Isend",
         "the last rank sends 36 nodes' forces to rank 2, which receives 25: truncation error"),
        ("nocoll", "collective", "hang", 2, 4, None, "MPI_Allreduce",
         "skips TimeIncrement's MPI_Allreduce"),
        ("threads", "openmp", "changed", 1, 3, None, "CalcVelocityForNodes",
         "CalcVelocityForNodes' region with 3 threads instead of 2"),
        ("abort", "crash", "crash", 3, 5, None, "MPI_Abort",
         "the volume check uses the wrong bound: MPI_Abort(MPI_COMM_WORLD, 3)"),
        ("wrongroot", "collective", "hang", 1, 2, None, "MPI_Reduce",
         "the energy MPI_Reduce with root 1 instead of 0 on rank 1, which then waits as the root"),
    )),
    # ---- minilulesh, 2 ranks (2x1x1) x 2 threads
    *_minilulesh(2, ("--size", "4", "--iters", "8"), (
        ("wrongpeer", "p2p", "hang", 1, 2, None, "MPI_Isend",
         "its only neighbour's force message goes to itself"),
        ("extracall", "call", "changed", 0, 4, None, "CalcPositionForNodes",
         "calls CalcPositionForNodes twice in one step"),
        ("collcount", "collective", "hang", 1, 3, None, "MPI_Allreduce",
         "TimeIncrement's MPI_Allreduce with count 2 instead of 1; at 2 ranks MPICH waits for the "
         "rest of the message (at 8 ranks it is a truncation error)"),
    )),
    # ---- minilulesh, 4 ranks x 2 threads, with OpenMP scheduling noise: CalcKinematicsForElems
    #      hands out its elements dynamically, so which thread calls CalcElemVolume for which
    #      element (and how often) differs between any two runs, normal2 included
    *_minilulesh(4, ("--size", "4", "--iters", "8", "--schedule", "dynamic"), (
        ("wrongtag", "p2p", "hang", 1, 3, None, "MPI_Irecv",
         "force-exchange MPI_Irecv from rank 0 with tag 1026 instead of 1025, amid scheduling noise"),
        ("skipcall", "call", "changed", 2, 5, None, "CalcQForElems",
         "skips CalcQForElems in one step, amid scheduling noise"),
        ("nocrit", "openmp", "changed", 3, 2, 1, "GOMP_critical_start",
         "thread 1 adds its energy without omp critical, amid scheduling noise"),
    ), normals=("normal", "normal2", "normal3"), group="minilulesh-dyn-4", noise=("CalcElemVolume",)),
    # ---- oddeven (the paper's odd/even sort), 4 ranks, no threads; iteration = sort phase
    *_group("oddeven", 4, 1, ("--block", "4"), (
        ("swap", ("--bug", "swap", "--bug-rank", "1", "--bug-iter", "1"), "p2p", "changed", 1, None, 2,
         "MPI_Send", "rank 1 swaps Send/Recv from its 2nd exchange on (small messages: no deadlock)"),
        ("dl", ("--bug", "dl", "--bug-rank", "2", "--bug-iter", "2"), "p2p", "hang", 2, None, 3,
         "MPI_Recv", "rank 2 receives with a tag nobody sends in its 3rd exchange"),
        ("wrongpeer", ("--bug", "wrongpeer", "--bug-rank", "2", "--bug-iter", "1"), "p2p", "hang", 2, None, 2,
         "MPI_Send", "rank 2 sends its block to rank 0 instead of its partner 1 in its 2nd exchange"),
        ("truncate", ("--bug", "truncate", "--bug-rank", "3", "--bug-iter", "1"), "p2p", "crash", 3, None, 3,
         "MPI_Send", "the last rank sends 5 numbers where rank 2 receives 4 (its 2nd exchange, phase 3)"),
    )),
    # ---- halo (1-D Jacobi, nonblocking exchange + OpenMP), 4 ranks x 2 threads
    *_group("halo", 4, 2, ("--cells", "64", "--iters", "20"), (
        ("lost", ("--bug", "lost", "--bug-rank", "1", "--bug-iter", "6"), "p2p", "hang", 1, None, 7,
         "MPI_Isend", "rank 1 skips its MPI_Isend to rank 2 in iteration 6: hang at the next check"),
        ("extra", ("--bug", "extra", "--bug-rank", "2", "--bug-iter", "8"), "call", "changed", 2, None, 9,
         "residual", "rank 2 computes the residual once more (an extra OpenMP region)"),
        ("nowait", ("--bug", "nowait", "--bug-rank", "3", "--bug-iter", "5"), "wait", "changed", 3, None, 6,
         "MPI_Waitall", "the last rank skips MPI_Waitall once and relaxes with whatever arrived"),
        ("wrongtag", ("--bug", "wrongtag", "--bug-rank", "0", "--bug-iter", "4"), "p2p", "hang", 0, None, 5,
         "MPI_Irecv", "rank 0 receives from rank 1 with tag 8 instead of 7"),
        ("segv", ("--bug", "segv", "--bug-rank", "2", "--bug-iter", "11"), "crash", "crash", 2, None, 12,
         "exchangeHalo", "rank 2 stores its boundary through a NULL pointer in exchangeHalo"),
    ), normals=("normal", "normal2")),
    # ---- cgsolve (distributed CG: setup and epilogue make the loop body's calls, accessor
    #      calls per matrix entry, a two-phase halo exchange with one MPI_Wait per request),
    #      4 ranks (2x2) x 1 thread; iteration = CG iteration k (issue 21's classes)
    *_group("cgsolve", 4, 1, ("--nx", "6", "--ny", "6", "--iters", "12"), (
        ("nowait", _cg("nowait", 3, 4), "wait", "changed", 3, None, 4, "MPI_Wait",
         "rank 3 skips the MPI_Wait (and unpack) of its x-phase receive from rank 2 at the end of "
         "iteration 4; its NaN corner reaches rank 1, which repairs it in iteration 5's product: "
         "extra calls a step later at the same logical clock, on a lower rank"),
        ("skipexchange", _cg("skipexchange", 1, 5), "call", "hang", 1, None, 5, "haloExchange",
         "rank 1 skips haloExchange(p) (its 2 phases, 4 MPI_Wait) at the end of iteration 5"),
        ("skipproduct", _cg("skipproduct", 2, 6), "call", "changed", 2, None, 6, "localProduct",
         "rank 2 skips localProduct(p) (36 rows of accessor calls) in iteration 6"),
        ("livelock", _cg("livelock", 2, 3), "livelock", "hang", 2, None, 3, "buffersReleased",
         "rank 2 polls buffersReleased (every 1 ms) for a release that never comes, in iteration 3's "
         "exchange; killed by the time limit", LIVELOCK_LIMIT),
        ("stall", _cg("stall", 3, 7), "stall", "hang", 3, None, 7, "waxpby",
         "rank 3 loops forever without a call in waxpby (a row stride of 0) in iteration 7: its trace "
         "stops on the normal path, the least progressed"),
        ("barrier", _cg("barrier", 1, 7), "collective", "hang", 1, None, 7, "MPI_Barrier",
         "rank 1 calls an extra MPI_Barrier before globalDot(p, Ap)'s MPI_Allreduce in iteration 7"),
        ("wrongtag", _cg("wrongtag", 2, 8), "p2p", "hang", 2, None, 8, "MPI_Isend",
         "rank 2 sends its y-phase row to rank 0 with tag 12 instead of 11 in iteration 8"),
        ("wrongop", _cg("wrongop", 3, 5), "collective", "changed", 3, None, 5, "MPI_Allreduce",
         "rank 3 reduces globalDot(p, Ap) with MPI_MAX instead of MPI_SUM in iteration 5"),
    ), normals=("normal", "normal2")),
    # ---- cgsolve, 8 ranks (4x2: ranks 0-3 the bottom row, 4-7 the top)
    *_group("cgsolve", 8, 1, ("--nx", "6", "--ny", "6", "--iters", "12"), (
        ("nowait", _cg("nowait", 6, 3), "wait", "changed", 6, None, 3, "MPI_Wait",
         "rank 6 skips the MPI_Wait (and unpack) of its x-phase receive from rank 5 at the end of "
         "iteration 3; its NaN corner reaches rank 2, which repairs it in iteration 4's product"),
        ("skipexchange", _cg("skipexchange", 5, 9), "call", "hang", 5, None, 9, "haloExchange",
         "rank 5 (4 neighbours) skips haloExchange(p) at the end of iteration 9"),
        ("livelock", _cg("livelock", 7, 6), "livelock", "hang", 7, None, 6, "buffersReleased",
         "the last rank polls buffersReleased forever in iteration 6's exchange", LIVELOCK_LIMIT),
        ("stall", _cg("stall", 4, 2), "stall", "hang", 4, None, 2, "waxpby",
         "rank 4 loops forever without a call in waxpby in iteration 2"),
    ), normals=("normal", "normal2")),
    # ---- ilcs (hybrid iterative search), 2 ranks x 3 threads; iteration = search round
    *_group("ilcs", 2, 3, (), (
        ("nocrit", ("--bug", "nocrit", "--bug-rank", "0", "--bug-thread", "2"), "openmp", "changed", 0, 2, 1,
         "GOMP_critical_start", "worker 2 of rank 0 updates its champion outside omp critical"),
        ("wrongop", ("--bug", "wrongop", "--bug-rank", "1", "--bug-round", "1"), "collective", "changed", 1,
         None, 2, "MPI_Allreduce", "rank 1 reduces with MPI_MAX instead of MPI_MIN from round 1"),
        ("wrongsize", ("--bug", "wrongsize", "--bug-rank", "1", "--bug-round", "2"), "collective", "hang", 1,
         None, 3, "MPI_Allreduce", "rank 1 passes count 0 to MPI_Allreduce in round 2"),
        ("wrongroot", ("--bug", "wrongroot", "--bug-rank", "1", "--bug-round", "1"), "collective", "hang", 1,
         None, 2, "MPI_Bcast", "rank 1 broadcasts with the wrong root in round 1"),
        ("abort", ("--bug", "abort", "--bug-rank", "1", "--bug-round", "2"), "crash", "crash", 1, None, 3,
         "MPI_Abort", "rank 1's check of the broadcast champion is inverted: MPI_Abort"),
    )),
    # ---- arrival (order nondeterminism: faces unpacked in arrival order, a master/worker task
    #      pool, particle polling, dynamic OpenMP rows), 4 ranks (2x2 torus) x 2 threads; good
    #      runs differ from each other in call order, never in results; iteration = time step
    *_arrival(4, (
        ("wrongop", "changed", 2, 4, None, "MPI_Allreduce",
         "the step's MPI_Allreduce with MPI_MAX instead of MPI_SUM"),
        ("wrongtag", "hang", 1, 2, None, "MPI_Isend",
         "its east face sent with tag 110 instead of 100: rank 3 waits in MPI_Waitany"),
        ("nosend", "hang", 3, 5, None, "MPI_Isend",
         "skips the MPI_Isend of its east face: rank 1 waits in MPI_Waitany"),
        ("segv", "crash", 0, 6, None, "unpack_face",
         "stores through a NULL pointer in the step's first unpack_face (whichever face came first)"),
        ("abort", "crash", 3, 3, None, "MPI_Abort",
         "MPI_Abort(MPI_COMM_WORLD, 3) in its first work_task of the step"),
        ("skipcall", "changed", 1, 7, None, "relax",
         "does not call relax in one step"),
        ("extrabarrier", "hang", 2, 2, None, "MPI_Barrier",
         "an MPI_Barrier before the step's MPI_Allreduce (the others are in the MPI_Allreduce)"),
        ("livelock", "hang", 1, 4, None, "MPI_Iprobe",
         "after its particles, polls with MPI_Iprobe (every 2 ms) for a steering message nobody "
         "sends; the others wait in MPI_Allreduce", LIVELOCK_LIMIT),
        ("wrongcount", "changed", 0, 5, None, "MPI_Isend",
         "its second particle sent with count 3 instead of 4: rank 2 tracks a wrong particle"),
        ("threadsegv", "crash", 2, 6, 1, "cell_update",
         "thread 1's first cell_update of the step stores through a NULL pointer"),
        ("workerstop", "hang", 2, 8, None, "MPI_Send",
         "the worker leaves after its first task without sending the result; the master waits "
         "in MPI_Recv(MPI_ANY_SOURCE)"),
    )),
    # ---- arrival, 8 ranks (4x2 torus: east = rank + 2, north/south = rank ^ 1) x 2 threads,
    #      8 steps (the traces stay small)
    *_arrival(8, (
        ("nosend", "hang", 5, 3, None, "MPI_Isend",
         "skips the MPI_Isend of its east face: rank 7 waits in MPI_Waitany"),
        ("segv", "crash", 2, 1, None, "unpack_face",
         "stores through a NULL pointer in the step's first unpack_face"),
        ("abort", "crash", 7, 2, None, "MPI_Abort",
         "the last rank calls MPI_Abort(MPI_COMM_WORLD, 3) in its first work_task of the step"),
        ("wrongcount", "changed", 4, 5, None, "MPI_Isend",
         "its second particle sent with count 3 instead of 4: rank 6 tracks a wrong particle"),
        ("threadsegv", "crash", 6, 4, 1, "cell_update",
         "thread 1's first cell_update of the step stores through a NULL pointer"),
        ("workerstop", "hang", 3, 6, None, "MPI_Send",
         "the worker leaves after its first task without sending the result"),
    ), iters=8),
)


def groups():
    seen = []
    for c in CASES:
        if c.group not in seen:
            seen.append(c.group)
    return seen


def find(group, name):
    for c in CASES:
        if c.group == group and c.name == name:
            return c
    raise KeyError(f"{group}/{name}")


def select(only):
    """The cases named by --only (GROUP or GROUP/NAME; all when empty)."""
    if not only:
        return list(CASES)
    known = set(groups()) | {c.key for c in CASES}
    unknown = [o for o in only if o not in known]
    if unknown:
        raise SystemExit(f"zoo.py: unknown group or case: {', '.join(unknown)} (see: zoo.py list)")
    return [c for c in CASES if c.group in only or c.key in only]


def check_table(cases=CASES):
    """The table's own rules; returns a list of problems (empty when it is consistent)."""
    problems = []
    keys = [c.key for c in cases]
    if len(set(keys)) != len(keys):
        problems.append("duplicate cases")
    for c in cases:
        normal = c.name.startswith("normal")
        if normal != (c.bug_class is None) or normal != (c.expected == "normal"):
            problems.append(f"{c.key}: normal runs (and only they) have no class and expect 'normal'")
        if not normal:
            if c.bug_class not in CLASSES or c.expected not in KINDS:
                problems.append(f"{c.key}: bad class or expected kind")
            if c.bug_rank is None or not 0 <= c.bug_rank < c.ranks or not c.call:
                problems.append(f"{c.key}: needs a bug rank in 0..{c.ranks - 1} and a call")
            if c.bug_thread is not None and not 0 <= c.bug_thread < c.threads:
                problems.append(f"{c.key}: bug thread out of range")
            if c.hangs != (c.expected == "hang"):
                problems.append(f"{c.key}: hangs must be set exactly for expected hangs")
            base = find(c.group, "normal")
            if c.args[:len(base.args)] != base.args:
                problems.append(f"{c.key}: arguments must extend the normal run's")
    return problems


# --------------------------------------------------------------------------- list

def cmd_list(args):
    cases = CASES
    if args.json:
        print(json.dumps([dict(asdict(c), args=list(c.args)) for c in cases], indent=1))
        return 0
    print(f"{'case':<26} {'ranks':>5} {'thr':>3}  {'class':<10} {'expected':<8} {'culprit':<8} "
          f"{'iter':>4}  {'call':<28} note")
    for c in cases:
        culprit = "" if c.bug_rank is None else f"{c.bug_rank}" + ("" if c.bug_thread is None else f".{c.bug_thread}")
        print(f"{c.key:<26} {c.ranks:>5} {c.threads:>3}  {c.bug_class or '-':<10} {c.expected:<8} {culprit:<8} "
              f"{'' if c.iteration is None else c.iteration:>4}  {c.call or '':<28} {c.note}")
    bugs = [c for c in cases if c.bug_class]
    programs = sorted({c.program for c in bugs})
    print(f"\n{len(bugs)} bug cases in {len(programs)} programs ({', '.join(programs)}), "
          f"{len(cases) - len(bugs)} normal runs")
    print("per class: " + ", ".join(f"{k} {sum(c.bug_class == k for c in bugs)}" for k in CLASSES))
    ranks = sorted({c.ranks for c in bugs})
    print("per rank count: " + ", ".join(f"{r} ranks {sum(c.ranks == r for c in bugs)}" for r in ranks))
    print("expected: " + ", ".join(f"{k} {sum(c.expected == k for c in bugs)}" for k in KINDS[1:]))
    problems = check_table(cases)
    for p in problems:
        print(f"table problem: {p}", file=sys.stderr)
    return 1 if problems else 0


# --------------------------------------------------------------------------- trace

def outcome(case, res):
    """What the run did: hang (we ended it), crash (it ended with an error) or completed."""
    if res.terminated or res.returncode == 124:         # ended by us or by the time limit
        return "hang"
    return "completed" if res.returncode == 0 else "crash"


def as_expected(case, did):
    want = {"normal": "completed", "changed": "completed"}.get(case.expected, case.expected)
    return did == want


def cmd_trace(args):
    cases = select(args.only)
    out = Path(args.out).resolve() if args.out else DEFAULT_OUT
    t0 = time.monotonic()
    build = scenarios.build()             # examples/programs/build: the path the .info files name
    print(f"built pin/ and examples/programs in {time.monotonic() - t0:.1f} s; tracing {len(cases)} "
          f"case(s) into {out}", flush=True)
    summary_path = out / "runs.json"
    summary = {}
    if summary_path.exists():
        try:
            summary = json.loads(summary_path.read_text())
        except ValueError:
            summary = {}
    bad = []
    t1 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="zoo-") as tmp:
        for c in cases:
            staging = Path(tmp) / c.group / c.name
            res = scenarios.run_scenario(c.scenario(), staging, build, limit_s=c.limit_s)
            did = outcome(c, res)
            ok = as_expected(c, did)
            for junk in staging.glob(".*"):       # temporary files of killed processes
                if junk.is_file():
                    junk.unlink()
            dest = out / c.group / c.name
            if dest.exists():
                shutil.rmtree(dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if staging.exists():
                shutil.copytree(staging, dest)
            files = sum(1 for _ in dest.iterdir()) if dest.exists() else 0
            print(f"{c.key:<26} {c.ranks:>2} x {c.threads}  exit {res.returncode:>3}  {res.seconds:5.1f} s  "
                  f"{did:<9} {files:>4} files" + ("" if ok else f"  <-- expected {c.expected}"), flush=True)
            if not ok:
                bad.append(c.key)
                sys.stderr.write(res.stderr[-1500:])
            summary[c.key] = {"returncode": res.returncode, "seconds": round(res.seconds, 2), "outcome": did,
                              "expected": c.expected, "as_expected": ok, "stdout": res.stdout.strip()[-400:]}
    out.mkdir(parents=True, exist_ok=True)
    tmp_summary = summary_path.with_suffix(".json.tmp")
    tmp_summary.write_text(json.dumps(dict(sorted(summary.items())), indent=1) + "\n")
    tmp_summary.replace(summary_path)
    print(f"traced {len(cases)} case(s) in {time.monotonic() - t1:.0f} s"
          + (f"; not as expected: {', '.join(bad)}" if bad else "; every run did what the table says"))
    return 1 if bad else 0


# --------------------------------------------------------------------------- check

# Per program, the call entered once per iteration by the main thread and by a worker, as
# the iteration's first such call; optionally how often the main thread's marker is also
# entered before the loop (cgsolve's setup computes r = b - A x with the body's localProduct).
MARKERS = {
    "minilulesh": ("TimeIncrement", "InitStressTermsForElems._omp_fn"),
    "halo": ("exchangeHalo", "relax._omp_fn"),
    "oddeven": ("findPtr", None),
    "ilcs": ("scanChampions", "workerRound"),
    "cgsolve": ("localProduct", None, 1),
    "arrival": ("exchange_faces", "relax._omp_fn"),
}


def plain(name):
    """An event name without its MPI arguments: MPI_Irecv[count=75,...] -> MPI_Irecv."""
    return name.split("[", 1)[0] if name.startswith("MPI_") else name


def load_labels(run_dir):
    """{(rank, thread): [event names, "<" for a return]} of one traced run."""
    sys.path.insert(0, str(ROOT))
    from difftrace_mpi.readers import load_run
    run = load_run(str(run_dir))
    return {t.key: [str(t.names[v]) if v else "<" for v in t.events.tolist()] for t in run.traces}


class _Node:
    """A call of a trace: its name, its entry's and return's event indices (end None: the
    trace ends inside it) and its callees."""
    __slots__ = ("name", "start", "end", "children", "key")

    def __init__(self, name, start):
        self.name, self.start, self.end, self.children, self.key = name, start, None, [], None


def _call_tree(labels):
    root = _Node(None, -1)
    stack = [root]
    for i, ev in enumerate(labels):
        if ev == "<":
            if len(stack) > 1:
                stack.pop().end = i
        else:
            node = _Node(ev, i)
            stack[-1].children.append(node)
            stack.append(node)
    root.end = len(labels)
    return root


def _is_unordered(name, unordered):
    p = plain(name)
    return p in unordered or any(p.startswith(u + "._omp_fn") for u in unordered)


def _key(node, unordered):
    """A call's subtree as a value; the callees of an unordered call as a sorted set."""
    if node.key is None:
        kids = [_key(c, unordered) for c in node.children]
        if node.name is not None and _is_unordered(node.name, unordered):
            kids = sorted(set(kids))
        node.key = (node.name, node.end is not None, tuple(kids))
    return node.key


def _tree_difference(n, f, path, unordered, end):
    """(index, normal event, faulty event, open calls) of the first difference of the faulty
    call f from its normal twin n, or None; callees of unordered calls compared as sets."""
    if f.name is None or not _is_unordered(f.name, unordered):
        for k, fc in enumerate(f.children):
            if k >= len(n.children):
                return fc.start, ("<" if n.end is not None else None), fc.name, path
            nc = n.children[k]
            if nc.name != fc.name:
                return fc.start, nc.name, fc.name, path
            if _key(nc, unordered) != _key(fc, unordered):
                d = _tree_difference(nc, fc, path + [fc.name], unordered, end)
                if d is not None:
                    return d
        if len(f.children) < len(n.children):
            nc = n.children[len(f.children)]
            return (f.end, nc.name, "<", path) if f.end is not None else (end, nc.name, None, path)
        if f.end is None and n.end is not None:
            return end, "<", None, path
        return None
    # an unordered call: each callee must be one the normal call made (in any order, any number
    # of times), and each kind of callee the normal call made must be there
    have = {_key(c, unordered) for c in n.children}
    for fc in f.children:
        if _key(fc, unordered) in have:
            continue
        best = None
        seen = set()
        for nc in n.children:
            if nc.name == fc.name and nc.key not in seen:
                seen.add(nc.key)
                d = _tree_difference(nc, fc, path + [fc.name], unordered, end)
                if d is not None and (best is None or d[0] > best[0]):
                    best = d
        return best if best is not None else (fc.start, None, fc.name, path)
    made = {_key(c, unordered) for c in f.children}
    missing = [c for c in n.children if c.key not in made]
    if f.end is None:              # the trace ends in this call (a hang or crash in it)
        return end, (missing[0].name if missing else "<"), None, path
    if missing:
        return f.end, missing[0].name, "<", path
    return None


def first_difference(normal, faulty, program=None, main_thread=True, unordered=()):
    """Where a faulty trace (a list of names, "<" = return) first leaves its normal twin:
    None when they are equal, else a dict with the event index, both sides' events there
    (None past an end), the calls still open in the faulty trace at that point, and the
    1-based iteration (counted with the program's per-iteration marker; None without one).

    ``unordered``: calls whose callees come in an order (and number) that varies from good
    run to good run (arrival order, polling, dynamic scheduling).  Their callees are compared
    as sets: the first difference is the first callee (in the faulty trace) that the normal
    call never made, else the first kind of callee the normal call made and the faulty one
    did not, or where the faulty trace ends; outside them, calls are compared in order."""
    if unordered:
        d = _tree_difference(_call_tree(normal), _call_tree(faulty), [], tuple(unordered), len(faulty))
        if d is None:
            return None
        i, at_n, at_f, stack = d
    else:
        n = min(len(normal), len(faulty))
        i = next((k for k in range(n) if normal[k] != faulty[k]), n)
        if i == len(normal) == len(faulty):
            return None
        stack = []
        for ev in faulty[:i]:
            if ev == "<":
                if stack:
                    stack.pop()
            else:
                stack.append(ev)
        at_n = normal[i] if i < len(normal) else None
        at_f = faulty[i] if i < len(faulty) else None
    main, worker, *before = MARKERS.get(program) or (None, None)
    marker = main if main_thread else worker
    iteration = None
    if marker and normal:
        iteration = sum(1 for ev in faulty[:i] if ev.startswith(marker))
        # the iteration the marker at the difference starts: the normal run's (a faulty run
        # that skipped a call and went on to the next iteration's marker is still in this one)
        at = at_n if at_n is not None else at_f
        if at and at.startswith(marker):
            iteration += 1
        if main_thread and before:
            iteration -= before[0]
    return {"index": i, "normal": at_n, "faulty": at_f, "open": stack, "iteration": iteration}


def culprit_difference(case, normal_runs, faulty_run):
    """(thread, first_difference) of the case's culprit: its bug thread, or for a whole
    process the first of its threads (main thread first) whose trace differs."""
    threads = sorted({t for r, t in (*normal_runs, *faulty_run) if r == case.bug_rank})
    if case.bug_thread is not None:
        threads = [case.bug_thread]
    for t in threads:
        d = first_difference(normal_runs.get((case.bug_rank, t), []), faulty_run.get((case.bug_rank, t), []),
                             case.program, t == 0, case.unordered)
        if d is not None:
            return t, d
    return None, None


def without(labels, names):
    """A trace without the calls named (each entry through its matching return)."""
    if not names:
        return labels
    out, skip = [], 0
    for ev in labels:
        if skip:
            skip += -1 if ev == "<" else 1
        elif ev != "<" and plain(ev) in names:
            skip = 1
        else:
            out.append(ev)
    return out


def check_case(case, normal_runs, faulty_run):
    """Problems (a list of strings) between the table and the traces of one bug case."""
    if case.noise:
        noise = set(case.noise)
        normal_runs = {k: without(v, noise) for k, v in normal_runs.items()}
        faulty_run = {k: without(v, noise) for k, v in faulty_run.items()}
    thread, d = culprit_difference(case, normal_runs, faulty_run)
    if d is None:
        return [f"the culprit's traces (rank {case.bug_rank}) equal the normal run's"]
    problems = []
    calls = {plain(x) for x in (d["normal"], d["faulty"]) if x and x != "<"}
    if d["faulty"] is None and d["open"]:
        calls.add(plain(d["open"][-1]))           # stopped (crashed) inside this call
    if not any(c == case.call or c.startswith(case.call + ".") for c in calls):
        problems.append(f"call {case.call} not at the first difference (thread {thread}, event {d['index']}: "
                        f"normal {d['normal']}, faulty {d['faulty']}, open {d['open'][-3:]})")
    twin = bool(normal_runs.get((case.bug_rank, thread)))
    if case.iteration is not None and twin and d["iteration"] is not None and d["iteration"] != case.iteration:
        problems.append(f"iteration {d['iteration']} where the table says {case.iteration} (thread {thread})")
    return problems


def cmd_check(args):
    """Check the table against traced runs: each culprit's trace first differs at the
    table's call and iteration; normal2 against normal (noise) is reported."""
    out = Path(args.out).resolve() if args.out else DEFAULT_OUT
    cases = select(args.only)
    bad, cache = [], {}

    def runs(c):
        if c.key not in cache:
            cache[c.key] = load_labels(out / c.group / c.name)
        return cache[c.key]

    for c in cases:
        if not (out / c.group / c.name).is_dir():
            print(f"{c.key:<26} not traced")
            bad.append(c.key)
            continue
        normal = runs(find(c.group, "normal"))
        if c.bug_class is None:
            if c.name != "normal":
                differ = sorted(k for k in set(normal) | set(runs(c)) if normal.get(k) != runs(c).get(k))
                quiet = sorted(k for k in differ if without(normal.get(k, []), set(c.noise))
                               != without(runs(c).get(k, []), set(c.noise)))
                if c.unordered:                   # differences beyond the order of unordered calls
                    quiet = sorted(k for k in differ if first_difference(
                        normal.get(k, []), runs(c).get(k, []), c.program, k[1] == 0, c.unordered) is not None)
                print(f"{c.key:<26} {len(differ)} of {len(normal)} traces differ from normal's"
                      + (f" ({len(quiet)} without the noise calls {', '.join(c.noise)})" if c.noise else "")
                      + (f" ({len(quiet)} with the callees of {', '.join(c.unordered)} as sets)"
                         if c.unordered else ""))
                if (c.noise or c.unordered) and quiet:
                    bad.append(c.key)
            continue
        problems = check_case(c, normal, runs(c))
        print(f"{c.key:<26} " + ("OK" if not problems else "; ".join(problems)))
        if problems:
            bad.append(c.key)
        del cache[c.key]
    print(f"checked {len(cases)} case(s)" + (f"; problems: {', '.join(bad)}" if bad else "; all as the table says"))
    return 1 if bad else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("list", help="print the table of cases")
    p.add_argument("--json", action="store_true", help="as JSON")
    p = sub.add_parser("trace", help="build and trace the cases")
    p.add_argument("--only", nargs="+", metavar="GROUP[/NAME]", help="only these groups or cases")
    p.add_argument("--out", help=f"output directory (default {DEFAULT_OUT.relative_to(ROOT)})")
    p = sub.add_parser("check", help="check the table against the traced runs")
    p.add_argument("--only", nargs="+", metavar="GROUP[/NAME]", help="only these groups or cases")
    p.add_argument("--out", help=f"traces directory (default {DEFAULT_OUT.relative_to(ROOT)})")
    args = ap.parse_args(argv)
    return {"list": cmd_list, "trace": cmd_trace, "check": cmd_check}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
