"""Where order is free: calls whose order or number depends on message arrival or on a
dynamic schedule, and the canonical form that compares traces modulo that freedom.

Two good runs of a program that completes messages in arrival order (``MPI_Waitany``,
``MPI_Testsome``, ``MPI_Test`` or ``MPI_Iprobe`` polling, ``MPI_ANY_SOURCE`` receives),
hands out work to whoever asks first, or shares a loop out dynamically make the same
calls in another order and number.  Each such stretch of sibling calls (a *free block*,
``kernels/order.pyx``) is rewritten as the set of calls it holds, so a trace is compared
with its twin modulo reordering: what the blocks hold still counts (a call no good run
makes, a message with another count, tag or peer, a reduction with another op are other
names), their order and repetition do not.  docs/verdict.md has the rules as a table.

The names decide (plain name and the tracer's argument annotation):

- free: ``MPI_Waitany``, ``Waitsome``, ``Testany``, ``Testsome``, ``Test``, ``Testall``,
  ``Iprobe``, ``Probe``, ``Improbe``, ``Mprobe``, ``Request_get_status``, and receives
  from ``src=ANY`` or with ``tag=ANY``;
- synchronising (ends a block): MPI collectives, ``MPI_Wait``, ``Waitall``, ``Sendrecv``,
  ``Finalize``, OpenMP barriers;
- dynamic: ``GOMP_parallel_loop_{dynamic,guided,runtime}`` and their nonmonotonic forms,
  whose region body is a thread's share in every thread of the process (the main thread
  names the body: ``learn_bodies``), and ``GOMP_loop_end(_nowait)``, which GCC calls only
  after a loop it did not schedule statically (the calls before it are a share).

The trace itself decides (``learn_varying``): a function whose calls in the normal trace
make the same calls in other numbers, with no synchronisation below, has a free body.

Plain functions over numpy arrays; the kernel returns status codes and this face raises.
"""
import re
from dataclasses import dataclass

import numpy as np

from ... import config
from ...errors import DiffTraceError
from ...kernels import order as kernel
from ...model import plain_name, stored_events
from .divergence import repeating_tail
from ..model.filters import CLASSES

FREE, SYNC, DYNAMIC, BODY, SHARE, SHARE_END, RUN = (kernel.ORDER_FREE, kernel.ORDER_SYNC, kernel.ORDER_DYNAMIC,
                                                    kernel.ORDER_BODY, kernel.ORDER_SHARE, kernel.ORDER_SHARE_END,
                                                    kernel.ORDER_RUN)
OPENING = FREE | DYNAMIC | BODY | SHARE | SHARE_END | RUN      # the flags that can begin a block

_FREE = re.compile(r"^P?MPIX?_(Waitany|Waitsome|Testany|Testsome|Test|Testall|Iprobe|Probe|Improbe|Mprobe|"
                   r"Request_get_status)(_c)?$", re.IGNORECASE)
_RECEIVE = re.compile(r"^P?MPIX?_(Recv|Irecv|Recv_init|Sendrecv|Sendrecv_replace)(_c)?$", re.IGNORECASE)
_ANY = re.compile(r"[\[,](src|source|tag)=ANY[,\]]")
_COLLECTIVE = re.compile(CLASSES["mpicol"][0], re.IGNORECASE)
_SYNC = re.compile(r"^(P?MPIX?_(Wait|Waitall|Sendrecv|Sendrecv_replace|Finalize)(_c)?|GOMP_barrier)$", re.IGNORECASE)
_DYNAMIC = re.compile(r"^GOMP_parallel_loop_(nonmonotonic_|maybe_nonmonotonic_)?(dynamic|guided|runtime)$")
# GCC calls these only at the end of a loop it did not schedule statically
_SHARE_END = re.compile(r"^GOMP_loop_end(_nowait|_cancel)?$")
# an OpenMP region's outlined body (GCC, Clang)
_REGION_BODY = re.compile(r"\._omp_fn\.\d+$|\.omp_outlined\.")


def name_flags(names):
    """Per global id (names[0] is the return): FREE, SYNC or DYNAMIC bits, as uint8."""
    flags = np.zeros(len(names), dtype=np.uint8)
    for i, name in enumerate(names):
        if i == 0:
            continue
        plain = plain_name(name)
        if _FREE.match(plain) or (_RECEIVE.match(plain) and _ANY.search(name)):
            flags[i] = FREE
        elif _COLLECTIVE.search(plain) or _SYNC.match(plain):
            flags[i] = SYNC
        elif _DYNAMIC.match(plain):
            flags[i] = DYNAMIC
        elif _SHARE_END.match(plain):
            flags[i] = SHARE_END
    return flags


def needs_folding(flags):
    """Whether any name of the table can open a free block (else every trace is its own
    canonical form and nothing need be scanned)."""
    return bool(np.any(flags & OPENING))


def learn_bodies(events, flags):
    """The flags with SHARE set on the bodies of dynamic regions this trace opens (a
    process's main thread: its workers' traces start inside those bodies)."""
    events = stored_events(events)
    if not np.any(flags & DYNAMIC):
        return flags
    status, ids = kernel.dynamic_bodies(np.ascontiguousarray(events), flags)
    _check(status)
    if not len(ids):
        return flags
    out = flags.copy()
    out[ids] |= SHARE
    return out


def learn_varying(events, flags):
    """What a normal run's trace teaches its twins, in one pass: (the ids (int32) of the
    functions whose calls make the same children in other numbers from call to call, with
    no synchronisation below (``kernels.order.varying_parents``): a worker's share of
    tasks handed out in arrival order, a thread's share of items that arrive by message;
    uint8 per id: whether the trace makes that call).  The twin traces of other runs are
    folded with what their normal trace taught, so a fault that changes a count where the
    normal run's counts never vary still shows."""
    ev = np.ascontiguousarray(stored_events(events))
    made = np.zeros(len(flags), dtype=np.uint8)
    if not len(ev):
        return np.empty(0, np.int32), made
    status, ids = kernel.varying_parents(ev, flags, made)
    _check(status)
    return ids, made


def region_bodies(names):
    """The ids (int32) of OpenMP region bodies (outlined functions) among ``names``."""
    return np.array([i for i, name in enumerate(names) if i and _REGION_BODY.search(plain_name(name))],
                    dtype=np.int32)


def with_runs(flags, bodies, inside):
    """``flags`` with RUN set on the region ``bodies`` that a process's main thread ran
    inside a free block (``inside``, as ``fold`` marks it): its worker threads run them
    in the order the main thread met arrivals, so a run of them in a worker is a block
    too.  A copy; the same array when there are none."""
    ids = bodies[inside[bodies] != 0] if len(bodies) else bodies
    if not len(ids) or np.all(flags[ids] & RUN):
        return flags
    out = flags.copy()
    out[ids] |= RUN
    return out


def with_bodies(flags, ids):
    """``flags`` with BODY set on ``ids`` (a copy; the same array when there are none)."""
    if not len(ids):
        return flags
    out = flags.copy()
    out[ids] |= BODY
    return out


@dataclass(frozen=True)
class Folding:
    """What folding did to one trace: blocks folded, the events they held, the events
    dropped with an unfinished block at the end, dynamic region bodies met."""
    blocks: int = 0
    held: int = 0
    dropped: int = 0
    regions: int = 0

    def __bool__(self):
        return bool(self.blocks or self.dropped or self.held or self.regions)


def fold(events, flags, inside=None, opened=None, learnt=False, seen=None):
    """(canonical events, Folding): ``events`` with every free block as the sorted set of
    its call paths (the same array when nothing is free).  Traces without returns have no
    call structure to bound a block: they are left as they are.  ``inside`` (uint8, one
    per id, optional): set for the ids met inside a free block (their counts and
    presence per step depend on arrival: the failed run alone does not count them).
    ``opened`` (uint8, one per id): the functions that return with a block still open,
    set here, or read with ``learnt`` (a twin folded as its normal trace was: a function
    that a fault left with an unclosed block still keeps its calls to itself).  ``seen``
    (uint8, one per id, with ``learnt``): the ids the normal twin made; a block this trace
    did not finish keeps the calls the twin never made (what depends on arrival is cut,
    a wrong tag or peer sent before a hang is not)."""
    events = stored_events(events)
    if not len(events) or not needs_folding(flags):
        return events, Folding()
    ev = np.ascontiguousarray(events)
    status, has_returns, has_free = kernel.scan_order(ev, flags, OPENING)
    _check(status)
    if not (has_returns and has_free):
        return events, Folding()
    out = np.empty_like(ev)
    stats = np.zeros(7, dtype=np.int64)
    marks = np.zeros(len(flags), dtype=np.uint8) if inside is None else inside
    opens = np.zeros(len(flags), dtype=np.uint8) if opened is None else opened
    learnt = bool(learnt and opened is not None)
    known = seen if learnt and seen is not None else np.ones(len(flags), dtype=np.uint8)
    _check(kernel.canonical_order(ev, flags, out, stats, marks, opens, known, learnt))
    length, blocks, held, dropped, regions, cut, cut_out = stats.tolist()
    if dropped and _spins(ev, cut):
        # a block that never ends because it repeats one unit forever is a livelock, not
        # a wait whose order depends on arrival: kept as it is, for the verdict to see
        return np.concatenate([out[:cut_out], ev[cut:]]), Folding(blocks, held, 0, regions)
    result = Folding(blocks, held, dropped, regions)
    if not result:
        return events, result
    return out[:length].copy(), result


def _spins(events, start, repeats=config.LIVELOCK_REPEATS):
    tail = repeating_tail(events, start)
    return tail is not None and (len(events) - tail[1]) // tail[0] >= repeats and tail[1] <= start + 2 * tail[0]


def _check(status):
    if status == kernel.ORDER_BAD_ID:
        raise DiffTraceError("a trace holds an event id outside its name table (order folding)")
