"""Where order is free: calls whose order or number depends on message arrival or on a
dynamic schedule, and the canonical form that compares traces modulo that freedom.

Two good runs of a program that completes messages in arrival order (``MPI_Waitany``,
``MPI_Testsome``, ``MPI_Test`` or ``MPI_Iprobe`` polling, ``MPI_ANY_SOURCE`` receives) or
shares a loop out dynamically (OpenMP ``schedule(dynamic|guided|runtime)``) make the same
calls in another order and number.  Each such stretch of sibling calls (a *free block*,
``kernels/order.pyx``) is rewritten as the set of call paths it holds, so a trace is
compared with its twin modulo reordering: what the blocks hold still counts (a call no
good run makes, a message with another count, tag or peer, a reduction with another op
are other names), their order and repetition do not.

The names decide (plain name and the tracer's argument annotation):

- free: ``MPI_Waitany``, ``Waitsome``, ``Testany``, ``Testsome``, ``Test``, ``Testall``,
  ``Iprobe``, ``Probe``, ``Improbe``, ``Mprobe``, ``Request_get_status``, and receives
  from ``src=ANY`` or with ``tag=ANY``;
- synchronising (ends a block): MPI collectives, ``MPI_Wait``, ``Waitall``, ``Sendrecv``,
  ``Finalize``, OpenMP barriers;
- dynamic: ``GOMP_parallel_loop_{dynamic,guided,runtime}`` and their nonmonotonic forms,
  whose region body is one free block in every thread of the process (the main thread
  names the body; its worker threads run the same body, ``learn_bodies``).

Plain functions over numpy arrays; the kernel returns status codes and this face raises.
"""
import re
from dataclasses import dataclass

import numpy as np

from .. import config
from ..errors import DiffTraceError
from ..kernels import order as kernel
from ..model import plain_name, stored_events
from .divergence import repeating_tail
from .filters import CLASSES

FREE, SYNC, DYNAMIC, BODY = kernel.ORDER_FREE, kernel.ORDER_SYNC, kernel.ORDER_DYNAMIC, kernel.ORDER_BODY

_FREE = re.compile(r"^P?MPIX?_(Waitany|Waitsome|Testany|Testsome|Test|Testall|Iprobe|Probe|Improbe|Mprobe|"
                   r"Request_get_status)(_c)?$", re.IGNORECASE)
_RECEIVE = re.compile(r"^P?MPIX?_(Recv|Irecv|Recv_init|Sendrecv|Sendrecv_replace)(_c)?$", re.IGNORECASE)
_ANY = re.compile(r"[\[,](src|source|tag)=ANY[,\]]")
_COLLECTIVE = re.compile(CLASSES["mpicol"][0], re.IGNORECASE)
_SYNC = re.compile(r"^(P?MPIX?_(Wait|Waitall|Sendrecv|Sendrecv_replace|Finalize)(_c)?|GOMP_barrier)$", re.IGNORECASE)
_DYNAMIC = re.compile(r"^GOMP_parallel_loop_(nonmonotonic_|maybe_nonmonotonic_)?(dynamic|guided|runtime)$")


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
    return flags


def needs_folding(flags):
    """Whether any name of the table can open a free block (else every trace is its own
    canonical form and nothing need be scanned)."""
    return bool(np.any(flags & (FREE | DYNAMIC | BODY)))


def learn_bodies(events, flags):
    """The flags with BODY set on the bodies of dynamic regions this trace opens (a
    process's main thread: its workers' traces start inside those bodies)."""
    events = stored_events(events)
    if not np.any(flags & DYNAMIC):
        return flags
    status, ids = kernel.dynamic_bodies(np.ascontiguousarray(events), flags)
    _check(status)
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
        return bool(self.blocks or self.dropped)


def fold(events, flags):
    """(canonical events, Folding): ``events`` with every free block as the sorted set of
    its call paths (the same array when nothing is free).  Traces without returns have no
    call structure to bound a block: they are left as they are."""
    events = stored_events(events)
    if not len(events) or not needs_folding(flags):
        return events, Folding()
    ev = np.ascontiguousarray(events)
    status, has_returns, has_free = kernel.scan_order(ev, flags, FREE | DYNAMIC | BODY)
    _check(status)
    if not (has_returns and has_free):
        return events, Folding()
    out = np.empty_like(ev)
    stats = np.zeros(6, dtype=np.int64)
    _check(kernel.canonical_order(ev, flags, out, stats))
    length, blocks, held, dropped, regions, cut = stats.tolist()
    if dropped and _spins(ev, cut):
        # a block that never ends because it repeats one unit forever is a livelock, not
        # a wait whose order depends on arrival: kept as it is, for the verdict to see
        return np.concatenate([out[:length], ev[cut:]]), Folding(blocks, held, 0, regions)
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
