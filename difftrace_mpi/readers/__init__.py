"""Finding and loading the traces of a run directory, whatever its format.

Discovery is cheap (file names and sizes) and runs on one MPI rank; loading is per trace,
so any rank can load any trace.  Formats, tried in this order: the text format
(``r<rank>.t<thread>.txt``, :mod:`.text`), uftrace record directories (:mod:`.uftrace`),
OTF2 archives (:mod:`.otf2`) and ParLOT (``<prefix>.<pid>.info`` + ``<prefix>.<pid>.<tid>``,
:mod:`.parlot`).  ParLOT files name a pid, not an MPI rank: the rank comes from a
``<prefix>.<pid>.rank`` sidecar written by our tracer, else processes are numbered 0.. by
ascending pid (``rank_source`` says which).

A directory holding several formats is read in the first of that order; a note names the
formats found and says the others were ignored.  Files that belong to no trace are listed
in a note (a few names and a count, one line however many there are).  An entry named like
a trace that is not a regular file (a directory, a FIFO, a broken symbolic link) is an
error naming it.

Every format is one :class:`.base.Format` in :data:`FORMATS`; this module only dispatches.
Every reader checks the memory budget (:mod:`.budget`, :func:`set_memory_budget`) before it
allocates what a file decodes to: over it, or out of memory, is one error naming the file.
Entries that are not regular files (FIFOs, broken links) are errors wherever they lie in a
run, never a hang; files that plainly are no trace (HDF5, .info, metadata) are refused by
:func:`load_file` and ``decode``.
"""
import dataclasses
import os

from . import budget, otf2, parlot, parlot_counted, text, uftrace
from .base import NARROW_EVENTS, Format
from .budget import memory_budget, set_memory_budget
from ..errors import DiffTraceError
from ..fsutil import describe_entry
from ..model import ID_LIMIT, Run, RunIndex, TraceRef

__all__ = ["FORMATS", "Format", "RunIndex", "TraceRef", "discover_run", "file_format", "load_file",
           "load_run", "load_trace", "names_of", "memory_budget", "set_memory_budget", "not_a_trace",
           "refuse_non_trace", "comparison_cache", "NARROW_EVENTS"]

#: Every format, in the order they are tried.
FORMATS = (text.FORMAT, uftrace.FORMAT, otf2.FORMAT, parlot.FORMAT)
_BY_NAME = {fmt.name: fmt for fmt in FORMATS}
# Read when no format is recognised: ParLOT's discovery then names a thread file whose .info
# is missing, and reading a lone file names what is wrong with it.
_FALLBACK = parlot.FORMAT


def _list_directory(path):
    """{name: "file", "dir" or "other"} of a directory's entries, in one pass (no stat
    for most entries: the kinds come from the directory listing)."""
    listing = {}
    try:
        with os.scandir(path) as it:
            for e in it:
                try:
                    listing[e.name] = "file" if e.is_file() else "dir" if e.is_dir() else "other"
                except OSError:
                    listing[e.name] = "other"
    except OSError as exc:
        raise DiffTraceError(f"{path}: cannot list directory ({exc.strerror or exc})") from None
    return listing


def _no_run_dir(path):
    if os.path.islink(path):
        return DiffTraceError(f"{path}: no such run directory; it is {describe_entry(path)}")
    return DiffTraceError(f"{path}: no such run directory")


def _no_traces(path):
    expected = [fmt.expected for fmt in FORMATS]
    return DiffTraceError(f"{path}: no traces found (expected {', '.join(expected[:-1])} or {expected[-1]})")


def discover_run(path):
    """Index the traces of one run directory (no trace is read)."""
    path = str(path)
    if not os.path.exists(path):
        raise _no_run_dir(path)
    if not os.path.isdir(path):
        raise DiffTraceError(f"{path}: not a directory (give the directory that holds one run's traces)")
    listing = _list_directory(path)
    found = [(fmt, what) for fmt in FORMATS if (what := fmt.detect(path, listing))]
    notes = []
    if len(found) > 1:
        notes.append(f"holds several trace formats ({'; '.join(f'{fmt.title}: {what}' for fmt, what in found)}); "
                     f"read as {found[0][0].name} only (the first of "
                     f"{', '.join(fmt.title for fmt in FORMATS)}); to analyse the others, move them to a "
                     f"directory of their own")
    fmt = found[0][0] if found else _FALLBACK
    index = fmt.discover(path, listing)
    if index is None and fmt is not _FALLBACK:       # the directory changed since it was listed
        index = _FALLBACK.discover(path, listing)
    if index is None:
        raise _no_traces(path)
    _check_ids(index)
    return dataclasses.replace(index, notes=[f"{path}: {note}" for note in notes + index.notes])




def _check_ids(index):
    """Ranks and thread ids a results file can hold: one clear error, not an overflow
    when they are written."""
    for ref in index.refs:
        if not (0 <= ref.rank < ID_LIMIT and 0 <= ref.thread < ID_LIMIT):
            raise DiffTraceError(f"{ref.path}: rank {ref.rank} thread {ref.thread} is out of range "
                                 f"(ranks and threads must be below 2^63)")


def _out_of_memory(path):
    """A MemoryError while reading (the budget's estimates are estimates, and a process limit
    may be lower than the budget): one clear line naming the file, never a traceback."""
    return DiffTraceError(f"{path}: out of memory reading it (more than this process may allocate; "
                          f"{memory_budget_text()}); set a smaller --memory-budget or "
                          f"DIFFTRACE_MEMORY_BUDGET to stop earlier, or read fewer traces per process")


def memory_budget_text():
    size = memory_budget()
    return f"memory budget {budget.format_size(size)}" if size else "no memory budget"


def load_trace(ref, info_cache=None, earlier=None):
    """Read one trace (any format) into the common model.  ``info_cache`` (a dict) lets the
    traces of one run share what they have in common (ParLOT: one read of a process's .info
    file and one names array for its threads).  ``earlier``: the same thread's trace in an
    earlier run; a format that can tell, without decoding, that this trace holds the same
    events (ParLOT: the same bytes and names) returns it with ``events`` None."""
    fmt = _BY_NAME[ref.fmt]
    try:
        if earlier is not None and fmt.loads_after:
            return fmt.load(ref, info_cache, earlier)
        return fmt.load(ref, info_cache)
    except MemoryError:
        raise _out_of_memory(ref.path) from None


def comparison_cache(paths):
    """(cache, notes): the ``info_cache`` every read of one comparison shares (``paths``:
    the run directories compared, the normal run first), set up with what a format must
    know of all the runs before it reads one trace, and the notes that knowledge gives.
    ParLOT's automatic leaves (:mod:`.parlot_counted`): the functions any of the runs
    counted instead of recording are left out of every trace, and leaf call counts that
    differ between the runs are noted.  Small files only: one process reads them and
    hands the cache on."""
    leaves = parlot_counted.counted_leaves(paths)
    return parlot_counted.shared_cache(None, leaves), list(leaves.notes)


def names_of(ref, cache):
    """A trace's name table without its events, where its format can tell (ParLOT's .info);
    None where the names come only with the events (``cache`` as in :func:`load_trace`)."""
    fmt = _BY_NAME[ref.fmt]
    return None if fmt.names is None else fmt.names(ref, cache)


def load_run(path):
    """Every trace of one run directory, as a :class:`model.Run`."""
    index = discover_run(path)
    cache = {}
    return Run(path=index.path, traces=[load_trace(ref, cache) for ref in index.refs],
               rank_source=index.rank_source, notes=index.notes)


def file_format(path):
    """The format of one trace file given on its own (the fallback when none recognises it)."""
    return next((fmt for fmt in FORMATS if fmt.recognises is not None and fmt.recognises(path)), _FALLBACK)


# Files found beside traces, or written by this tool, that hold no trace: read as a ParLOT
# stream (the fallback) they "decode" to garbage, as much as the memory allows.
_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
_SIDE_FILES = (
    (lambda name: name.endswith(".info"), "a ParLOT .info file (function names)"),
    (lambda name: name.endswith(".rank"), "a ParLOT .rank file (the process's MPI rank)"),
    (lambda name: name.endswith(".end"), "a ParLOT .end file (how the process ended)"),
    (lambda name: name.endswith((".otf2", ".def", ".evt")), "a file of an OTF2 archive (give its directory)"),
    (lambda name: name in ("info", "task.txt") or name.endswith((".map", ".sym")),
     "a file of a uftrace data directory (give its <tid>.dat, or the directory)"),
    (lambda name: name.endswith((".h5", ".hdf5", ".html", ".svg", ".dot", ".png", ".json")),
     "an output of difftrace_mpi"),
)


def not_a_trace(path):
    """What ``path`` is when it is plainly no trace file (an HDF5 file, a ParLOT .info or
    sidecar, a uftrace or OTF2 metadata file), else None.  Reads at most a few bytes."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:           # HDF5 puts its signature at 0, 512, 1024, ...
            for at in (0, 512, 1024, 2048):
                fh.seek(at)
                if fh.read(8) == _HDF5_MAGIC:
                    return "an HDF5 file (a results file of analyze?)"
    except OSError:
        return None
    name = os.path.basename(path)
    return next((what for test, what in _SIDE_FILES if test(name)), None)


def refuse_non_trace(path):
    """DiffTraceError when ``path`` is plainly not a trace file (see :func:`not_a_trace`)."""
    what = not_a_trace(path)
    if what:
        raise DiffTraceError(f"{path}: {what}, not a trace file (give a ParLOT <prefix>.<pid>.<tid>, "
                             f"a uftrace <tid>.dat or a text r<rank>.t<thread>.txt)")


def load_file(path):
    """One trace file given on its own (rank and thread as its name says, else 0)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DiffTraceError(f"{path}: no such trace file")
    refuse_non_trace(path)
    try:
        return file_format(path).load_file(path)
    except MemoryError:
        raise _out_of_memory(path) from None
