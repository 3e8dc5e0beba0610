"""Finding and loading the traces of a run directory, whatever its format.

Discovery is cheap (file names and sizes) and runs on one MPI rank; loading is per trace,
so any rank can load any trace.  Formats, tried in this order: the text format
(``r<rank>.t<thread>.txt``), uftrace record directories (:mod:`.uftrace`), OTF2 archives
(:mod:`.otf2fmt`) and ParLOT (``<prefix>.<pid>.info`` + ``<prefix>.<pid>.<tid>``).  ParLOT
files name a pid, not an MPI rank: the rank comes from a ``<prefix>.<pid>.rank`` sidecar
written by our tracer, else processes are numbered 0.. by ascending pid (``rank_source``
says which).

A directory holding several formats is read in the first of that order; a note names the
formats found and says the others were ignored.  Files that belong to no trace are listed
in a note (a few names and a count, one line however many there are).  An entry named like
a trace that is not a regular file (a directory, a FIFO, a broken symbolic link) is an
error naming it.
"""
import os
import re
from dataclasses import dataclass

from . import otf2 as otf2fmt, parlot, text as textfmt, uftrace
from ..errors import DiffTraceError, TraceFormatError
from ..fsutil import describe_entry, shown_names

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


def _scan(path):
    """{name: "file", "dir" or "other"} of a directory's entries, in one pass (no stat
    for most entries: the kinds come from the directory listing)."""
    kinds = {}
    try:
        with os.scandir(path) as it:
            for e in it:
                try:
                    kinds[e.name] = "file" if e.is_file() else "dir" if e.is_dir() else "other"
                except OSError:
                    kinds[e.name] = "other"
    except OSError as exc:
        raise DiffTraceError(f"{path}: cannot list directory ({exc.strerror or exc})") from None
    return kinds


def _has_otf2(path, kinds):
    """True when the directory, or one of its subdirectories, holds an ``*.otf2`` file."""
    if any(k == "file" and n.endswith(".otf2") for n, k in kinds.items()):
        return True
    for n, k in kinds.items():
        if k == "dir":
            try:
                with os.scandir(os.path.join(path, n)) as it:
                    if any(e.name.endswith(".otf2") and e.is_file() for e in it):
                        return True
            except OSError:
                pass
    return False


def _formats(path, kinds):
    """[(fmt, what was found)] of every format present, in the order formats are tried."""
    found = []
    text = sum(1 for n in kinds if _TEXT_NAME.match(n))
    if text:
        found.append(("text", f"text: {text} r<rank>.t<thread>.txt file{'s' if text != 1 else ''}"))
    if uftrace.is_uftrace_dir(path):
        found.append(("uftrace", "uftrace: the directory is a uftrace data directory"))
    else:
        ut = sum(1 for n, k in kinds.items() if k == "dir" and uftrace.is_uftrace_dir(os.path.join(path, n)))
        if ut:
            found.append(("uftrace", f"uftrace: {ut} data director{'ies' if ut != 1 else 'y'}"))
    if _has_otf2(path, kinds):
        found.append(("otf2", "OTF2: an archive"))
    threads = sum(1 for n in kinds if (info := parlot.info_name_of(n)) is not None and info in kinds)
    if threads:
        found.append(("parlot", f"ParLOT: {threads} thread file{'s' if threads != 1 else ''}"))
    return found


def _no_run_dir(path):
    if os.path.islink(path):
        return DiffTraceError(f"{path}: no such run directory; it is {describe_entry(path)}")
    return DiffTraceError(f"{path}: no such run directory")


def discover_run(path):
    """Index the traces of one run directory (no trace is read)."""
    path = str(path)
    if not os.path.exists(path):
        raise _no_run_dir(path)
    if not os.path.isdir(path):
        raise DiffTraceError(f"{path}: not a directory (give the directory that holds one run's traces)")
    kinds = _scan(path)
    formats = _formats(path, kinds)
    notes = []
    if len(formats) > 1:
        notes.append(f"{path}: holds several trace formats ({'; '.join(w for _, w in formats)}); read as "
                     f"{formats[0][0]} only (the first of text, uftrace, OTF2, ParLOT); to analyse the "
                     f"others, move them to a directory of their own")
    fmt = formats[0][0] if formats else None
    if fmt == "text":
        text = sorted(e for e in kinds if _TEXT_NAME.match(e))
        others = sorted(e for e in kinds if not _TEXT_NAME.match(e))
        if others:
            notes.append(f"{path}: read as a text-format run; other files ignored: {shown_names(others)}")
        refs, seen = [], {}
        prefix = os.path.join(path, "")
        for name in text:
            m = _TEXT_NAME.match(name)
            key = (int(m.group(1)), int(m.group(2)))
            if key in seen:
                raise DiffTraceError(f"{path}: {seen[key]} and {name} are both rank {key[0]} thread {key[1]}")
            seen[key] = name
            full = prefix + name
            if kinds[name] != "file":
                raise TraceFormatError(full, f"named like a text trace but is {describe_entry(full)}")
            try:
                size = os.path.getsize(full)
            except OSError as exc:
                raise TraceFormatError(full, f"cannot read trace file: {exc.strerror or exc}") from None
            refs.append(TraceRef(key[0], key[1], full, "", size, "text"))
        refs.sort(key=lambda r: (r.rank, r.thread))
        return RunIndex(path, "text", refs, "filename", notes)
    found = uftrace.find_uftrace_run(path) if fmt == "uftrace" else None
    if found is not None:
        entries, source, run_notes = found
        notes.extend(f"{path}: {n}" for n in run_notes)
        refs = [TraceRef(e.rank, e.thread, e.dat, e.data_dir, e.size, "uftrace") for e in entries]
        return RunIndex(path, "uftrace", refs, source, notes)
    found = otf2fmt.find_otf2_run(path) if fmt == "otf2" else None
    if found is not None:
        entries, source, run_notes = found
        notes.extend(f"{path}: {n}" for n in run_notes)
        refs = [TraceRef(e.rank, e.thread, e.anchor, str(e.location), e.size, "otf2") for e in entries]
        return RunIndex(path, "otf2", refs, source, notes)
    found = parlot.find_parlot_traces(path, {name: kind == "file" for name, kind in kinds.items()})
    if not found:
        raise DiffTraceError(
            f"{path}: no traces found (expected text traces r<rank>.t<thread>.txt, uftrace data "
            f"directories (uftrace record -d DIR.<rank>), an OTF2 archive (traces.otf2) or ParLOT "
            f"files <prefix>.<pid>.info + <prefix>.<pid>.<tid>)")
    ranks, source, rank_notes = parlot.parlot_ranks(found)
    notes.extend(f"{path}: {n}" for n in rank_notes)
    used = set()
    for _, _, trace_path, info_path in found:
        info_name = os.path.basename(info_path)
        used.update((os.path.basename(trace_path), info_name, info_name[: -len(".info")] + ".rank"))
    others = sorted(e for e in kinds if e not in used)
    if others:
        notes.append(f"{path}: read as a ParLOT run; other files ignored: {shown_names(others)}")
    refs, seen = [], {}
    for pid, tid, trace_path, info_path in found:
        rank = ranks[info_path]
        if (rank, tid) in seen:
            raise DiffTraceError(f"{path}: {seen[(rank, tid)]} and {trace_path} are both rank {rank} thread {tid}")
        seen[(rank, tid)] = trace_path
        try:
            size = os.path.getsize(trace_path)
        except OSError as exc:
            raise TraceFormatError(trace_path, f"cannot read ParLOT trace file: {exc.strerror or exc}") from None
        refs.append(TraceRef(rank, tid, trace_path, info_path, size, "parlot"))
    refs.sort(key=lambda r: (r.rank, r.thread))
    return RunIndex(path, "parlot", refs, source, notes)


def load_trace(ref, info_cache=None):
    """Read one trace (any format) into the common model.  ``info_cache`` (a dict) lets the
    threads of one ParLOT process share one read of its .info file and one names array."""
    if ref.fmt == "text":
        trace = textfmt.read_text_trace(ref.path)
        trace.rank, trace.thread = ref.rank, ref.thread
        return trace
    if ref.fmt == "uftrace":
        return uftrace.read_uftrace_thread(ref.path, ref.info, ref.rank, ref.thread)
    if ref.fmt == "otf2":
        return otf2fmt.read_otf2_location(ref.path, int(ref.info), ref.rank, ref.thread)
    if info_cache is None:
        return parlot.read_parlot_thread(ref.path, ref.info, ref.rank, ref.thread)
    names = info_cache.get(ref.info)
    if names is None:
        names = info_cache[ref.info] = parlot.read_info(ref.info)
    return parlot.read_parlot_thread(ref.path, ref.info, ref.rank, ref.thread, names=names)
