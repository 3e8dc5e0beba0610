"""The in-memory trace model every reader produces and every stage consumes.

A trace is one thread of one process: a stream of events over a local name table.
Event value v > 0 is the entry of function ``names[v]``; v == 0 is a return (ParLOT's
convention). ``names[0]`` is always RETURN_NAME.
"""
from dataclasses import dataclass, field

import numpy as np

RETURN_NAME = "<return>"


@dataclass
class Trace:
    rank: int
    thread: int
    names: np.ndarray          # object array of str, local id -> name; names[0] == RETURN_NAME
    events: np.ndarray         # int32 local ids, 0 = return
    source: str = ""           # file the trace came from (for messages)
    complete: bool = True      # False when the file was cut short (killed thread, no trailer)
    notes: list = field(default_factory=list)   # warnings worth showing the user

    @property
    def key(self):
        return (self.rank, self.thread)


@dataclass
class Run:
    """All traces of one execution (one directory)."""
    path: str
    traces: list               # list[Trace], sorted by (rank, thread)
    rank_source: str = ""      # how ranks were assigned: "info", "sidecar", "pid-order", "filename"
    notes: list = field(default_factory=list)
