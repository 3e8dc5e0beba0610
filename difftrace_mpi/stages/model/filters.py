"""Filters (paper Table I): which events of a trace go on to NLR.

Decided once per distinct function name (a boolean mask over a name table), applied to
event streams with numpy indexing; no regular expression ever runs per event.

Filter spec grammar (the original DiffTrace's folder names, e.g. ``11.mpi.cust.K10``)::

    SPEC  := [BITS "."] CLASS ("." CLASS)* ["." ["0"] "K" INT]
    BITS  := two digits 0/1: first = drop returns, second = drop PLT stubs
             (default "11": both dropped)
    CLASS := mpi | mpicol | mpisr | mpiall | ompall | ompcrit | ompmutex
           | mem | net | poll | str | cust | every

An event is kept when its function matches ANY listed class (each event at most once).
With no class, or ``every``, all functions are kept (after the BITS drops).  ``cust`` uses
the regular expression given separately (``--custom``).  A return is kept when returns
are not dropped and the call it closes was kept.  ``K<n>`` sets the NLR bound in the same
spec (the CLI's ``--k`` is used otherwise).
"""
import re
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ...errors import DiffTraceError
from ...kernels.nlr import KeptEvents, count_flagged, kept_calls, match_returns
from ...model import RETURN_NAME, stored_events

_MPI_COLLECTIVES = (
    "Barrier|Bcast|Reduce|Allreduce|Gather|Gatherv|Allgather|Allgatherv|Scatter|Scatterv|"
    "Alltoall|Alltoallv|Alltoallw|Reduce_scatter|Reduce_scatter_block|Scan|Exscan|"
    "Ibarrier|Ibcast|Ireduce|Iallreduce|Igather|Igatherv|Iallgather|Iallgatherv|Iscatter|"
    "Iscatterv|Ialltoall|Ialltoallv|Ialltoallw|Ireduce_scatter|Ireduce_scatter_block|Iscan|Iexscan|"
    # persistent collectives (MPI 4) and neighbourhood collectives, blocking and not
    "(Barrier|Bcast|Reduce|Allreduce|Gather|Gatherv|Allgather|Allgatherv|Scatter|Scatterv|Alltoall|"
    "Alltoallv|Alltoallw|Reduce_scatter|Reduce_scatter_block|Scan|Exscan)_init|"
    "I?[Nn]eighbor_(allgather|allgatherv|alltoall|alltoallv|alltoallw)(_init)?")
_MPI_SENDRECV = (
    "Send|Isend|Ssend|Issend|Bsend|Ibsend|Rsend|Irsend|Recv|Irecv|Sendrecv|"
    "Sendrecv_replace|Isendrecv|Isendrecv_replace|Wait|Waitall|Waitany|Waitsome|Test|Testall|"
    "Testany|Testsome|Probe|Iprobe|Mprobe|Improbe|Mrecv|Imrecv|"
    "Send_init|Ssend_init|Bsend_init|Rsend_init|Recv_init|Start|Startall")

# name -> (regex, meaning); the regexes are searched in each distinct function name
CLASSES = {
    "mpi": (r"^P?MPIX?_", "MPI calls (names starting with MPI_ or MPIX_)"),
    # an optional "[...]" suffix: the tracer's argument-annotated names (parlot-run -a)
    "mpicol": (rf"^P?MPIX?_({_MPI_COLLECTIVES})(_c)?(\[.*\])?$", "MPI collectives (large-count _c too)"),
    "mpisr": (rf"^P?MPIX?_({_MPI_SENDRECV})(_c)?(\[.*\])?$",
              "MPI point-to-point send/recv, persistent requests and wait/test (large-count _c too)"),
    "mpiall": (r"(?i)mpi", "MPI calls and MPI library internals (MPI anywhere in the name)"),
    "ompall": (r"(?i)^(GOMP_|omp_|__kmpc_|kmp_|OMP_|pthread_)", "OpenMP runtime and pthread calls"),
    "ompcrit": (r"(?i)(GOMP_critical|__kmpc_(end_)?critical|OMP_CRITICAL)", "OpenMP critical sections"),
    "ompmutex": (r"(?i)(omp_(init_|destroy_|set_|unset_|test_)(nest_)?lock|pthread_mutex_|"
                 r"pthread_spin_|__kmpc_.*lock|OMP_MUTEX)", "OpenMP locks and mutexes"),
    "mem": (r"(?i)(mem(cpy|move|set|chr|cmp)|alloc|^free$|^_?_?free|mmap|munmap|^brk$|^sbrk$)",
            "memory functions (memcpy, malloc, free, ...)"),
    "net": (r"(?i)(socket|connect|accept|bind|listen|tcp|udp|network|getaddrinfo|sendto|"
            r"recvfrom|sendmsg|recvmsg|epoll|sched)", "network functions"),
    "poll": (r"(?i)(poll|yield|sched|select|futex|usleep|nanosleep)", "polling and waiting functions"),
    "str": (r"(?i)(^_*(str|wcs|strn)[a-z_]*$|printf|scanf)", "string functions (strlen, strcpy, printf, ...)"),
    "cust": (None, "the custom regular expression (--custom)"),
    "every": (r"", "everything"),
}
_PLT = re.compile(r"(@plt$|\.plt$|@plt\b)")
_SPEC_K = re.compile(r"^0?K(\d+)$", re.ASCII)
K_MAX = 100_000             # an NLR bound beyond any loop body worth finding; keeps K a machine int


@dataclass(frozen=True)
class FilterSpec:
    drop_returns: bool = True
    drop_plt: bool = True
    classes: tuple = ()          # empty = keep everything
    custom: Optional[str] = None
    k: Optional[int] = None

    def __str__(self):
        parts = [f"{int(self.drop_returns)}{int(self.drop_plt)}"] + list(self.classes or ("every",))
        if self.k is not None:
            parts.append(f"K{self.k}")
        return ".".join(parts)

    @property
    def label(self):
        """The spec without the K part (the K is a separate grid axis)."""
        return str(FilterSpec(self.drop_returns, self.drop_plt, self.classes, self.custom, None))


def parse_filter(spec, custom=None):
    """Parse a spec string such as ``11.mpi.cust.K10``; raises DiffTraceError with the
    grammar on a bad spec."""
    parts = [p for p in str(spec).strip().split(".") if p != ""]
    drop_returns = drop_plt = True
    k = None
    classes = []
    if parts and re.fullmatch(r"[01]{2}", parts[0]):
        drop_returns, drop_plt = parts[0][0] == "1", parts[0][1] == "1"
        parts = parts[1:]
    for part in parts:
        m = _SPEC_K.match(part)
        if m:
            k = int(m.group(1))
            if not 2 <= k <= K_MAX:
                raise DiffTraceError(f"filter spec {spec!r}: K must be between 2 and {K_MAX}")
            continue
        name = part.lower()
        if name not in CLASSES:
            raise DiffTraceError(
                f"filter spec {spec!r}: unknown class {part!r}; known classes: "
                + ", ".join(CLASSES) + ". Grammar: [drop-returns drop-plt bits '.'] "
                "class('.'class)* ['.K'n], e.g. 11.mpi.K10")
        if name == "cust" and not custom:
            raise DiffTraceError(f"filter spec {spec!r} uses 'cust' but no custom regular expression was given "
                                 "(--custom REGEX, custom= in the API)")
        if name not in classes:
            classes.append(name)
    if "every" in classes:
        classes = []
    if custom:
        try:
            re.compile(custom)
        except re.error as exc:
            raise DiffTraceError(f"the custom regular expression (--custom, custom=) {custom!r} is not valid: {exc}")
    return FilterSpec(drop_returns, drop_plt, tuple(classes), custom if "cust" in classes else None, k)


def keep_mask(names, spec):
    """Boolean mask over a name table: which function names the filter keeps.

    Index 0 (returns) is decided per event by ``apply_filter``, not here."""
    regexes = []
    for cls in spec.classes:
        pattern = spec.custom if cls == "cust" else CLASSES[cls][0]
        regexes.append(re.compile(pattern))
    mask = np.ones(len(names), dtype=bool)
    for idx, name in enumerate(names):
        if idx == 0 and name == RETURN_NAME:
            continue
        if spec.drop_plt and _PLT.search(name):
            mask[idx] = False
        elif regexes:
            mask[idx] = any(rx.search(name) for rx in regexes)
    return mask


class FilterBuffer:
    """One output array for the filtered sequences of a pass (each is consumed before the
    next is made): ``apply_filter`` then writes into it instead of a new array per trace."""

    def __init__(self):
        self.array = None

    def get(self, n):
        if self.array is None or len(self.array) < n:
            self.array = None           # the old one goes first
            self.array = np.empty(n, dtype=np.int32)
        return self.array


def apply_filter(events, names, spec, mask=None, buffer=None):
    """The kept events of one trace (int32 ids, 0 = return).  ``buffer``: a
    ``FilterBuffer``; the result is then a view of it, valid until its next use."""
    events = stored_events(events)
    if spec.drop_returns:       # the common case in one kernel pass
        mask = keep_mask(names, spec) if mask is None else mask
        out = None if buffer is None else buffer.get(len(events) + 1)
        return kept_calls(events, np.ascontiguousarray(mask, dtype=np.uint8), out)
    return events[_kept(events, names, spec, mask)].astype(np.int32, copy=False)


def nlr_input(events, names, spec, mask=None, buffer=None):
    """What the NLR kernel reduces for one trace: where returns are dropped, the events
    with the filter's flags (a ``KeptEvents``: the kernel filters them a chunk at a time,
    and not at all where a chunk repeats, instead of a filtered copy of the trace); else
    the filtered events (``apply_filter``).  Positions in it: ``nlr_position``."""
    if spec.drop_returns:
        mask = keep_mask(names, spec) if mask is None else mask
        return KeptEvents(stored_events(events), np.ascontiguousarray(mask, dtype=np.uint8))
    return apply_filter(events, names, spec, mask, buffer)


def nlr_position(events, stop, names, spec, mask=None):
    """The position in ``nlr_input(events, ...)`` that follows the first ``stop`` events
    of the trace (where a resumed reduction starts): ``stop`` itself where the kernel reads
    the events (returns dropped), else the number of kept events among them."""
    if spec.drop_returns:
        return int(stop)
    return kept_count(events[:stop], names, spec, mask)


def kept_count(events, names, spec, mask=None):
    """How many events ``apply_filter`` keeps (without making the filtered copy)."""
    if spec.drop_returns:
        flags = np.array(keep_mask(names, spec) if mask is None else mask, dtype=np.uint8)
        if len(flags):
            flags[0] = 0        # returns are dropped
        return count_flagged(stored_events(events), flags, -1)
    return len(apply_filter(events, names, spec, mask))


def kept_positions(events, names, spec, mask=None):
    """Indices (int64, ascending) of the events ``apply_filter`` keeps: position j of the
    filtered sequence (and so of its NLR's expansion) is event ``kept_positions[j]`` of
    the trace, which is how per-event data such as timestamps follow the filter."""
    events = stored_events(events)
    return np.flatnonzero(_kept(events, names, spec, mask))


def _kept(events, names, spec, mask):
    """Boolean mask over the events of one trace: which of them the filter keeps."""
    mask = keep_mask(names, spec) if mask is None else mask
    if spec.drop_returns:
        return (events != 0) & mask[events]
    closed = match_returns(events)          # returns -> id of the call they close, or -1
    return np.where(closed >= 0, mask[np.maximum(closed, 0)], False)
