"""Finding and loading the traces of a run directory, whatever its format.

Discovery is cheap (file names and sizes) and runs on one MPI rank; loading is per trace,
so any rank can load any trace.  Formats, tried in this order: the text format
(``r<rank>.t<thread>.txt``), uftrace record directories (:mod:`.uftrace`), OTF2 archives
(:mod:`.otf2fmt`) and ParLOT (``<prefix>.<pid>.info`` + ``<prefix>.<pid>.<tid>``).  ParLOT
files name a pid, not an MPI rank: the rank comes from a ``<prefix>.<pid>.rank`` sidecar
written by our tracer, else processes are numbered 0.. by ascending pid (``rank_source``
says which).
"""
import os
import re
from dataclasses import dataclass

from . import otf2fmt, parlot, textfmt, uftrace
from .errors import DiffTraceError

_TEXT_NAME = re.compile(r"^r(\d+)\.t(\d+)\.txt$")


@dataclass(frozen=True)
class TraceRef:
    rank: int
    thread: int
    path: str
    info: str          # ParLOT .info file, "" for text traces; uftrace: the data directory;
                       # otf2: the location reference (decimal)
    size: int          # bytes on disk (load balancing)
    fmt: str           # "text", "parlot", "uftrace" or "otf2"


@dataclass
class RunIndex:
    path: str
    fmt: str
    refs: list         # list[TraceRef] sorted by (rank, thread)
    rank_source: str
    notes: list


def discover_run(path):
    """Index the traces of one run directory (no trace is read)."""
    path = str(path)
    if not os.path.exists(path):
        raise DiffTraceError(f"{path}: no such run directory")
    if not os.path.isdir(path):
        raise DiffTraceError(f"{path}: not a directory (give the directory that holds one run's traces)")
    try:
        entries = sorted(os.listdir(path))
    except OSError as exc:
        raise DiffTraceError(f"{path}: cannot list directory ({exc.strerror})")
    text = [e for e in entries if _TEXT_NAME.match(e)]
    notes = []
    if text:
        others = [e for e in entries if not _TEXT_NAME.match(e)]
        if others:
            shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
            notes.append(f"{path}: read as a text-format run; other files ignored: {shown}")
        refs, seen = [], {}
        for name in text:
            m = _TEXT_NAME.match(name)
            key = (int(m.group(1)), int(m.group(2)))
            if key in seen:
                raise DiffTraceError(f"{path}: {seen[key]} and {name} are both rank {key[0]} thread {key[1]}")
            seen[key] = name
            full = os.path.join(path, name)
            refs.append(TraceRef(key[0], key[1], full, "", os.path.getsize(full), "text"))
        refs.sort(key=lambda r: (r.rank, r.thread))
        return RunIndex(path, "text", refs, "filename", notes)
    found = uftrace.find_uftrace_run(path)
    if found is not None:
        entries, source, run_notes = found
        notes.extend(f"{path}: {n}" for n in run_notes)
        refs = [TraceRef(e.rank, e.thread, e.dat, e.data_dir, e.size, "uftrace") for e in entries]
        return RunIndex(path, "uftrace", refs, source, notes)
    found = otf2fmt.find_otf2_run(path)
    if found is not None:
        entries, source, run_notes = found
        notes.extend(f"{path}: {n}" for n in run_notes)
        refs = [TraceRef(e.rank, e.thread, e.anchor, str(e.location), e.size, "otf2") for e in entries]
        return RunIndex(path, "otf2", refs, source, notes)
    found = parlot.find_parlot_traces(path)
    if not found:
        raise DiffTraceError(
            f"{path}: no traces found (expected text traces r<rank>.t<thread>.txt, uftrace data "
            f"directories (uftrace record -d DIR.<rank>), an OTF2 archive (traces.otf2) or ParLOT "
            f"files <prefix>.<pid>.info + <prefix>.<pid>.<tid>)")
    ranks, source, rank_notes = parlot.parlot_ranks(found)
    notes.extend(f"{path}: {n}" for n in rank_notes)
    refs, seen = [], {}
    for pid, tid, trace_path, info_path in found:
        rank = ranks[info_path]
        if (rank, tid) in seen:
            raise DiffTraceError(f"{path}: {seen[(rank, tid)]} and {trace_path} are both rank {rank} thread {tid}")
        seen[(rank, tid)] = trace_path
        refs.append(TraceRef(rank, tid, str(trace_path), str(info_path), os.path.getsize(trace_path), "parlot"))
    refs.sort(key=lambda r: (r.rank, r.thread))
    return RunIndex(path, "parlot", refs, source, notes)


def load_trace(ref):
    """Read one trace (any format) into the common model."""
    if ref.fmt == "text":
        trace = textfmt.read_text_trace(ref.path)
        trace.rank, trace.thread = ref.rank, ref.thread
        return trace
    if ref.fmt == "uftrace":
        return uftrace.read_uftrace_thread(ref.path, ref.info, ref.rank, ref.thread)
    if ref.fmt == "otf2":
        return otf2fmt.read_otf2_location(ref.path, int(ref.info), ref.rank, ref.thread)
    return parlot.read_parlot_thread(ref.path, ref.info, ref.rank, ref.thread)
