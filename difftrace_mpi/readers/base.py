"""What every trace format offers the registry in :mod:`difftrace_mpi.readers`.

Each format module (text, uftrace, otf2, parlot) exposes one :class:`Format` named
``FORMAT``.  A *listing* is ``{entry name: "file", "dir" or "other"}`` of a run directory,
made once by discovery and shared by every format, so that no format lists it again.
"""
from dataclasses import dataclass
from typing import Callable, Optional

# a read cache (``readers.load_trace``) holding this key True may get ``events`` as uint16
# local ids, a new array the caller owns, from formats that decode to them (ParLOT), instead
# of int32 ones (``model.Trace``): for the engine's reading, which maps them to global ids
# in place at once; every other caller gets int32
NARROW_EVENTS = ("events", "uint16 local ids")


@dataclass(frozen=True)
class Format:
    name: str           # RunIndex.fmt and TraceRef.fmt of its runs: "text", "uftrace", ...
    title: str          # how messages name it: "text", "uftrace", "OTF2", "ParLOT"
    expected: str       # what a run holds, for the message of a directory without traces
    # (run directory, listing) -> what was found ("2 r<rank>.t<thread>.txt files"), or None
    detect: Callable[[str, dict], Optional[str]]
    # (run directory, listing) -> RunIndex whose notes do not yet name the directory, or None
    # when the directory holds no run of this format after all
    discover: Callable[[str, dict], object]
    # (TraceRef, cache dict or None) -> Trace; the cache lets the traces of one run share
    # what they have in common (ParLOT: a process's .info names)
    load: Callable[[object, Optional[dict]], object]
    # load also takes earlier= (the same thread's Trace in an earlier run) and returns the
    # trace with events None when it knows, without decoding, that they are earlier's
    loads_after: bool = False
    # one trace file given on its own: (path) -> bool, and (path) -> Trace.  recognises is
    # None for the fallback format (ParLOT reads what no other format recognises) and, with
    # load_file, for a format without single-file traces (an OTF2 archive holds many locations)
    recognises: Optional[Callable[[str], bool]] = None
    load_file: Optional[Callable[[str], object]] = None
    # (TraceRef, cache dict) -> the trace's name table without reading its events (ParLOT:
    # the process's .info), or None for a format whose names come only with the events;
    # lets the analysis number names globally before any trace is read
    names: Optional[Callable[[object, dict], object]] = None
