"""The in-memory trace model every reader produces and every stage consumes.

A trace is one thread of one process: a stream of events over a local name table.
Event value v > 0 is the entry of function ``names[v]``; v == 0 is a return (ParLOT's
convention). ``names[0]`` is always RETURN_NAME.
"""
import re
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

# the tracer's argument annotation in an event name (pin/parlot_mpi.c): only MPI events
# carry one, ``P?MPI_<name>`` (or MPIX_) followed by ``[``, stripped from that ``[`` on,
# closed or not (a name cut short lost its ``]``); ``operator[]`` and other names stay
_ANNOTATED = re.compile(r"(P?MPIX?_[A-Za-z0-9_]+)\[")


def plain_name(name):
    """``MPI_Send[count=4,...]`` -> ``MPI_Send``; ``MPI_Recv[count=3,tag=`` (cut short) ->
    ``MPI_Recv``; any other name unchanged."""
    m = _ANNOTATED.match(name)
    return m[1] if m else name


RETURN_NAME = "<return>"
COMPACT_IDS = 1 << 16      # a run whose names fit holds its events as uint16 ids (half the memory)
ID_LIMIT = 2 ** 63          # ranks and thread ids are stored as int64


def stored_events(events):
    """Events as the event kernels read them: a contiguous int32 or uint16 array as it is
    (no copy), anything else as int32."""
    events = np.asarray(events)
    if events.dtype in (np.int32, np.uint16):
        return np.ascontiguousarray(events)
    return np.ascontiguousarray(events, dtype=np.int32)


@dataclass
class Trace:
    rank: int
    thread: int
    names: np.ndarray          # object array of str, local id -> name; names[0] == RETURN_NAME
    events: np.ndarray         # int32 local ids, 0 = return
    source: str = ""           # file the trace came from (for messages)
    complete: bool = True      # False when the file was cut short (killed thread, no trailer)
    notes: list = field(default_factory=list)   # warnings worth showing the user
    timestamps: Optional[np.ndarray] = None     # uint64 ns, one per event (uftrace, OTF2); None: no clock
    ending: Optional[dict] = None  # how the process ended (ParLOT .end record: how, code, signal, ...); None: unknown
    returns: bool = True       # the format records returns (False: entry-only text traces), so a
                               # trace cut before its first return still has calls open
    raw: object = None         # what the format keeps of the file (ParLOT: readers.parlot.Decoded)
                               # to know the same thread of a later run without decoding it
    folds: Optional[np.ndarray] = None  # repetitions summarised while read (ParLOT): rows of
                               # (position in events, period, units not kept, the trace ended in it)

    @property
    def key(self):
        return (self.rank, self.thread)

    @property
    def repeated_at_end(self):
        """Events of the repetition the trace ends in that were summarised while read
        (not in ``events``: a livelock), else 0."""
        if self.folds is None or not len(self.folds) or not self.folds[-1, 3]:
            return 0
        return int(self.folds[-1, 1] * self.folds[-1, 2])


@dataclass(frozen=True)
class TraceRef:
    """Where one trace of a run lies, as discovery found it (nothing read yet)."""
    rank: int
    thread: int
    path: str
    info: str          # ParLOT .info file, "" for text traces; uftrace: the data directory;
                       # otf2: the location reference (decimal)
    size: int          # bytes on disk (load balancing)
    fmt: str           # the name of the trace's format: "text", "parlot", "uftrace" or "otf2"


@dataclass
class RunIndex:
    """The traces of one run directory, as discovery found them."""
    path: str
    fmt: str
    refs: list         # list[TraceRef] sorted by (rank, thread)
    rank_source: str
    notes: list


@dataclass
class Run:
    """All traces of one execution (one directory)."""
    path: str
    traces: list               # list[Trace], sorted by (rank, thread)
    rank_source: str = ""      # how ranks were assigned: "info", "sidecar", "pid-order", "filename"
    notes: list = field(default_factory=list)
