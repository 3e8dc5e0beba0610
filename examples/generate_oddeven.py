#!/usr/bin/env python3
"""Generate text traces of the paper's odd/even transposition sort (DiffTrace, Figure 2).

This is a small discrete-event simulation of the MPI program, not hand-written traces:
every rank runs its program as a Python generator that yields MPI point-to-point
operations to a scheduler.

* Sends are eager (buffered): the message is queued on channel (src, dst) and the send
  returns at once.
* A receive blocks until a message from its source with its tag is queued on the channel
  (MPI matching: the oldest message with that tag; non-overtaking).
* The scheduler runs the ranks round-robin, one operation per turn, until every rank has
  finished or none can progress (a deadlock).  The run is then "killed": ranks still
  blocked keep their open calls (``> main``, ``> oddEvenSort``, ``> MPI_Recv`` with no
  matching ``<``) and their files start with ``# incomplete``.

The program of one rank (Figure 2, with the usual block odd/even sort helpers)::

    main:
        MPI_Init; MPI_Comm_rank; MPI_Comm_size
        initData                         # this rank's block of numbers
        oddEvenSort(rank, cp):
            localSort
            for i in 0..cp-1:
                ptr = findPtr(i, rank)   # partner of this phase, or -1 (none)
                if ptr >= 0:
                    even rank: MPI_Send(ptr); MPI_Recv(ptr)
                    odd rank:  MPI_Recv(ptr); MPI_Send(ptr)
                    mergeSplit           # keep the lower / upper half of both blocks
        MPI_Finalize                     # local: does not wait for the other ranks

Phase partners: in even phases even ranks pair with rank+1 and odd ranks with rank-1; in
odd phases odd ranks pair with rank+1 and even ranks with rank-1.  A partner outside
0..cp-1 means no exchange in that phase (findPtr is still called).

Bugs (planted in ``--bug-rank`` once it has completed ``--bug-iter`` exchanges):

* ``swap`` (swapBug): from then on the rank does the other order (an odd rank sends
  before it receives).  With eager sends the run still terminates.
* ``dl`` (dlBug): in its next exchange the rank receives with a tag its partner never
  sends (a tag mismatch), so that receive can never be matched.  Which other ranks end up
  blocked is left entirely to the simulation.

Usage::

    python examples/generate_oddeven.py OUTDIR [--ranks 16] [--bug {none,swap,dl}]
                                               [--bug-rank 5] [--bug-iter 7] [--seed 2019]
    python examples/generate_oddeven.py        # regenerate examples/traces/oddeven/*
"""
import argparse
import os
import random
import sys
from collections import deque
from dataclasses import dataclass, field

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from difftrace_mpi.readers import text as textfmt  # noqa: E402
from difftrace_mpi.model import RETURN_NAME  # noqa: E402

BUGS = ("none", "swap", "dl")
DATA_TAG = 0          # the tag every exchange uses
WRONG_TAG = 1         # the dlBug receive's tag: nobody ever sends it
BLOCK_SIZE = 4        # numbers per rank
DEFAULT_SEED = 2019
BUNDLED_DIR = os.path.join(_HERE, "traces", "oddeven")
#: (directory name under BUNDLED_DIR, bug) of the bundled example runs.
BUNDLED = (("normal", "none"), ("swapbug", "swap"), ("dlbug", "dl"))


# ----------------------------------------------------------------------------- simulation

@dataclass(frozen=True)
class Send:
    dst: int
    tag: int
    payload: tuple


@dataclass(frozen=True)
class Recv:
    src: int
    tag: int


@dataclass
class Message:
    seq: int              # global send order, identifies the message
    src: int
    dst: int
    tag: int
    payload: tuple


@dataclass
class RankState:
    rank: int
    calls: list = field(default_factory=list)    # (">" or "<", name), in order
    stack: list = field(default_factory=list)    # names of the calls now open
    finished: bool = False
    blocked_on: object = None                    # the Recv it waits on when the run ended
    exchanges: int = 0                           # completed exchanges
    data_in: tuple = ()
    data_out: tuple = ()
    sent: list = field(default_factory=list)     # Message objects sent
    received: list = field(default_factory=list)  # Message objects received

    def enter(self, name):
        self.calls.append((">", name))
        self.stack.append(name)

    def leave(self, name):
        assert self.stack and self.stack[-1] == name, (self.stack, name)
        self.stack.pop()
        self.calls.append(("<", name))


@dataclass
class SimResult:
    nranks: int
    bug: str
    bug_rank: int
    bug_iter: int
    ranks: list                  # RankState per rank
    messages: list               # every Message sent, in send order
    undelivered: list            # messages still queued when the run ended
    deadlock: bool

    @property
    def blocked(self):
        return [r.rank for r in self.ranks if not r.finished]


def find_ptr(phase, rank, nranks):
    """The partner of ``rank`` in ``phase``, or -1 when it has none (edge of the line)."""
    if phase % 2 == rank % 2:
        partner = rank + 1
    else:
        partner = rank - 1
    return partner if 0 <= partner < nranks else -1


def merge_split(mine, theirs, keep_low):
    merged = sorted(mine + theirs)
    n = len(mine)
    return tuple(merged[:n]) if keep_low else tuple(merged[len(merged) - n:])


def _rank_program(st, nranks, bug, bug_rank, bug_iter, seed):
    """The MPI program of one rank, as a generator of Send/Recv operations.

    Local functions are recorded directly; an MPI call is entered, its operation yielded to
    the scheduler, and it is left only when the scheduler resumes the generator.
    """
    rank = st.rank

    def local(name):
        st.enter(name)
        st.leave(name)

    def mpi_send(dst, tag, payload):
        st.enter("MPI_Send")
        yield Send(dst, tag, payload)
        st.leave("MPI_Send")

    def mpi_recv(src, tag):
        st.enter("MPI_Recv")
        msg = yield Recv(src, tag)
        st.leave("MPI_Recv")
        return msg.payload

    st.enter("main")
    local("MPI_Init")
    local("MPI_Comm_rank")
    local("MPI_Comm_size")

    st.enter("initData")
    rng = random.Random(seed * 1000003 + rank)
    data = tuple(rng.randrange(1000) for _ in range(BLOCK_SIZE))
    st.data_in = data
    st.leave("initData")

    st.enter("oddEvenSort")
    local("localSort")
    data = tuple(sorted(data))
    for phase in range(nranks):
        st.enter("findPtr")
        ptr = find_ptr(phase, rank, nranks)
        st.leave("findPtr")
        if ptr < 0:
            continue
        buggy = rank == bug_rank and st.exchanges >= bug_iter
        if bug == "dl" and buggy:
            # The tag mismatch: this receive can never be matched, the rank blocks here.
            if rank % 2 == 0:
                yield from mpi_send(ptr, DATA_TAG, data)
            yield from mpi_recv(ptr, WRONG_TAG)
            raise AssertionError("a receive of a never-sent tag completed")
        send_first = (rank % 2 == 0) != (bug == "swap" and buggy)
        if send_first:
            yield from mpi_send(ptr, DATA_TAG, data)
            theirs = yield from mpi_recv(ptr, DATA_TAG)
        else:
            theirs = yield from mpi_recv(ptr, DATA_TAG)
            yield from mpi_send(ptr, DATA_TAG, data)
        st.enter("mergeSplit")
        data = merge_split(data, theirs, keep_low=rank < ptr)
        st.leave("mergeSplit")
        st.exchanges += 1
    st.leave("oddEvenSort")
    st.data_out = data

    local("MPI_Finalize")
    st.leave("main")


def simulate(nranks=16, bug="none", bug_rank=5, bug_iter=7, seed=DEFAULT_SEED):
    """Run the odd/even sort on ``nranks`` simulated ranks; returns a :class:`SimResult`."""
    if bug not in BUGS:
        raise ValueError(f"bug must be one of {BUGS}, not {bug!r}")
    if nranks < 1:
        raise ValueError("need at least one rank")
    if bug != "none" and not 0 <= bug_rank < nranks:
        raise ValueError(f"bug rank {bug_rank} is not a rank of a {nranks}-rank run")
    if bug_iter < 0:
        raise ValueError("bug iteration must be >= 0")

    states = [RankState(r) for r in range(nranks)]
    programs = [_rank_program(st, nranks, bug, bug_rank, bug_iter, seed) for st in states]
    pending = [None] * nranks          # the operation each rank waits to have performed
    started = [False] * nranks
    channels = {}                      # (src, dst) -> deque of Message
    messages = []

    def advance(r, value=None):
        """Resume rank r's program until its next operation (or its end)."""
        try:
            pending[r] = programs[r].send(value) if started[r] else next(programs[r])
            started[r] = True
        except StopIteration:
            pending[r] = None
            states[r].finished = True

    def take(src, dst, tag):
        q = channels.get((src, dst))
        if q:
            for k, msg in enumerate(q):
                if msg.tag == tag:
                    del q[k]
                    return msg
        return None

    while True:
        progressed = False
        for r in range(nranks):
            st = states[r]
            if st.finished:
                continue
            if not started[r]:
                advance(r)
                progressed = True
                continue
            op = pending[r]
            if isinstance(op, Send):
                msg = Message(len(messages), r, op.dst, op.tag, op.payload)
                messages.append(msg)
                channels.setdefault((r, op.dst), deque()).append(msg)
                st.sent.append(msg)
                advance(r)
                progressed = True
            elif isinstance(op, Recv):
                msg = take(op.src, r, op.tag)
                if msg is not None:
                    st.received.append(msg)
                    advance(r, msg)
                    progressed = True
            else:
                raise AssertionError(f"rank {r} yielded {op!r}")
        if all(st.finished for st in states) or not progressed:
            break

    deadlock = not all(st.finished for st in states)
    for r, st in enumerate(states):
        if not st.finished:
            # The run is killed here: the open calls stay open (closing the generator later
            # raises GeneratorExit at its yield, which records nothing).
            st.blocked_on = pending[r]
    undelivered = [m for q in channels.values() for m in q]
    return SimResult(nranks, bug, bug_rank, bug_iter, states, messages, undelivered, deadlock)


# ----------------------------------------------------------------------------- output

def trace_table(st):
    """(names, events) of one rank's calls, in difftrace_mpi's model encoding."""
    names, ids, events = [RETURN_NAME], {}, []
    for kind, name in st.calls:
        if kind == "<":
            events.append(0)
            continue
        if name not in ids:
            ids[name] = len(names)
            names.append(name)
        events.append(ids[name])
    return names, events


def describe(result):
    """One header comment for every file of the run."""
    what = {"none": "no bug",
            "swap": f"swapBug in rank {result.bug_rank} after {result.bug_iter} exchanges",
            "dl": f"dlBug in rank {result.bug_rank} after {result.bug_iter} exchanges"}[result.bug]
    return f"odd/even sort, {result.nranks} ranks, {what} (generated by examples/generate_oddeven.py)"


def write_run(result, outdir):
    """Write one ``r<rank>.t0.txt`` per rank (entry/exit style); removes stale trace files."""
    os.makedirs(outdir, exist_ok=True)
    written = set()
    header = describe(result)
    for st in result.ranks:
        comments = [header]
        if not st.finished:
            op = st.blocked_on
            comments.append(f"killed while blocked in MPI_Recv(source={op.src}, tag={op.tag}) "
                            f"after {st.exchanges} exchanges")
        names, events = trace_table(st)
        name = textfmt.trace_file_name(st.rank, 0)
        textfmt.write_text_trace(os.path.join(outdir, name), names, events,
                                 style="entryexit", complete=st.finished, comments=comments)
        written.add(name)
    for entry in os.listdir(outdir):
        if textfmt.TRACE_FILE_RE.match(entry) and entry not in written:
            os.unlink(os.path.join(outdir, entry))


def summary(result):
    lines = [describe(result)]
    for st in result.ranks:
        if st.finished:
            state = "finished"
        else:
            op = st.blocked_on
            state = (f"BLOCKED in {' > '.join(st.stack)} (source={op.src}, tag={op.tag})")
        lines.append(f"  rank {st.rank:3d}: {st.exchanges:3d} exchanges, {state}")
    return "\n".join(lines)


def generate_bundled(base=BUNDLED_DIR, nranks=16, bug_rank=5, bug_iter=7, seed=DEFAULT_SEED,
                     verbose=False):
    """(Re)generate the bundled example runs normal/, swapbug/, dlbug/ under ``base``."""
    for sub, bug in BUNDLED:
        result = simulate(nranks, bug, bug_rank, bug_iter, seed)
        write_run(result, os.path.join(base, sub))
        if verbose:
            print(f"{os.path.join(base, sub)}:\n{summary(result)}")


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Simulate the odd/even sort of the DiffTrace paper and write its traces "
                    "(one r<rank>.t0.txt per rank). With no OUTDIR, regenerate the bundled "
                    "examples under examples/traces/oddeven/.")
    p.add_argument("outdir", nargs="?", help="directory to write the run into")
    p.add_argument("--ranks", type=int, default=16)
    p.add_argument("--bug", choices=BUGS, default="none")
    p.add_argument("--bug-rank", type=int, default=5)
    p.add_argument("--bug-iter", type=int, default=7,
                   help="the bug strikes once the rank has completed this many exchanges")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of the data to sort")
    p.add_argument("-q", "--quiet", action="store_true")
    args = p.parse_args(argv)
    try:
        if args.outdir is None:
            generate_bundled(nranks=args.ranks, bug_rank=args.bug_rank, bug_iter=args.bug_iter,
                             seed=args.seed, verbose=not args.quiet)
            return 0
        result = simulate(args.ranks, args.bug, args.bug_rank, args.bug_iter, args.seed)
    except ValueError as exc:
        p.error(str(exc))
    write_run(result, args.outdir)
    if not args.quiet:
        print(f"{args.outdir}:\n{summary(result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
