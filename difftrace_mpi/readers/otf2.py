"""Reading OTF2 archives (Score-P traces) through the ``otf2`` Python package.

An archive is an anchor file ``<name>.otf2`` beside ``<name>.def`` (global definitions) and
a directory ``<name>/`` of per-location files (``<location>.evt``, ``<location>.def``).
Score-P writes one as ``scorep-<date>_<time>_<id>/traces.otf2``.

Model:

* a **location group** of type PROCESS is one MPI rank; ranks are the numbers ending the
  group names when every group has one and they differ (Score-P names them
  ``MPI Rank <r>``; rank_source "location-group-name"), else the groups are numbered 0..
  by definition reference (rank_source "location-group-order");
* a **location** of type CPU_THREAD is one thread; a rank's threads are numbered 0.. by
  location reference (Score-P: the master thread first).  Other locations (GPU streams,
  metric locations) are skipped, with a note;
* **Enter** / **Leave** events become entries (the region's name) and returns.  A Leave
  that does not close the innermost open region closes the regions opened after the one it
  names (a note counts them), or is dropped when that region is not open.  Other events
  (MPI messages, OpenMP, metrics, ...) are not calls and are skipped.

Events are read with the library's low-level per-location reader and C callbacks
(:mod:`..kernels.otf2read`, registered through the library's C API: no Python call per
event, unlike the package's own readers); the nesting is checked with numpy and repaired
by a loop only when it must be.  Timestamps are kept as ``Trace.timestamps`` (uint64 ns,
converted from the archive's timer resolution).

The ``otf2`` package is optional (PyPI ``otf2``; binary wheels exist for CPython up to
3.11).  Without it an archive is still recognised, and reading it says to install it.
"""
import contextlib
import ctypes
import functools
import io
import os
import re
import sys
from dataclasses import dataclass

import numpy as np

from ..errors import DiffTraceError, TraceFormatError
from ..fsutil import describe_entry
from ..kernels import otf2read as _kernel
from . import budget
from .base import Format
from ..model import RETURN_NAME, RunIndex, Trace, TraceRef

__all__ = ["INSTALL_MESSAGE", "FORMAT", "find_anchor", "otf2_available", "find_otf2_run",
           "read_otf2_location", "Otf2Entry"]

INSTALL_MESSAGE = "install the otf2 package to read OTF2 archives (pip install otf2)"
_RANK_NAME_RE = re.compile(r"([0-9]+)\s*$")
_BATCH = 1 << 16
# Bytes held per Enter/Leave event while a location is read (the C arrays, twice while
# they double, the numpy copies, the nesting's and the trace's arrays): the memory budget
# is checked with the location's event count before reading, and as the events come
_BYTES_PER_EVENT = 80
_MAX_EVENTS = 1 << 40


def _modules(path=None):
    """(otf2, _otf2), or DiffTraceError (naming ``path``) saying to install the package."""
    where = f"{path}: " if path else ""
    try:
        import otf2            # noqa: F401
        import _otf2           # noqa: F401
    except ImportError:
        raise DiffTraceError(where + INSTALL_MESSAGE) from None
    except Exception as e:     # a broken install (missing shared library, ...)
        raise DiffTraceError(f"{where}{INSTALL_MESSAGE}: importing it failed ({e})") from None
    return otf2, _otf2


def otf2_available():
    try:
        _modules()
        return True
    except DiffTraceError:
        return False


# --------------------------------------------------------------------------- detection

def _anchors_in(d):
    try:
        return sorted(os.path.join(d, e) for e in os.listdir(d)
                      if e.endswith(".otf2") and os.path.isfile(os.path.join(d, e)))
    except OSError:
        return []


def find_anchor(path):
    """The anchor file of the OTF2 archive a run directory holds, or None.

    Accepted: the archive directory itself (holding ``traces.otf2``) or a directory holding
    exactly one archive directory (a Score-P experiment directory ``scorep-*/``).  Several
    anchors raise DiffTraceError.  Does not need the ``otf2`` package.
    """
    path = os.fspath(path)
    if os.path.isfile(path) and path.endswith(".otf2"):
        return path
    here = _anchors_in(path)
    if not here:
        try:
            subs = sorted(e for e in os.listdir(path) if os.path.isdir(os.path.join(path, e)))
        except OSError:
            return None
        for s in subs:
            here.extend(_anchors_in(os.path.join(path, s)))
    if not here:
        return None
    if len(here) > 1:
        shown = ", ".join(os.path.relpath(a, path) for a in here[:4])
        raise DiffTraceError(f"{path}: several OTF2 archives ({shown}{' ...' if len(here) > 4 else ''}); "
                             f"give the directory of one run")
    return here[0]


# --------------------------------------------------------------------------- definitions

@dataclass
class _Defs:
    anchor: str
    resolution: int
    regions: dict           # region ref -> name
    locations: list         # (rank, thread, location ref, number of events, name)
    rank_source: str
    notes: list


_LIBRARY_LINE_RE = re.compile(r"^\[OTF2\] [^:]*:[0-9]+: (?:error|warning): (.*)$")


class _LibraryStderr:
    """What the OTF2 C library writes on file descriptor 2 (``[OTF2] src/...`` lines, 6-9 per
    error) while this is active: kept out of the user's terminal, and its first line --
    the root cause -- put into our one-line message."""

    def __enter__(self):
        import tempfile
        sys.stderr.flush()
        self._file = tempfile.TemporaryFile()
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        return self

    def __exit__(self, *exc):
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        self.text = self._file.read().decode("utf-8", errors="replace")
        self._file.close()
        return False

    def cause(self):
        """The library's first error message ("Invalid or inconsistent record data: This is
        no chunk header!"), or ""."""
        text = getattr(self, "text", None)
        if text is None:                 # still capturing: what was written so far
            text = os.pread(self._file.fileno(), 1 << 16, 0).decode("utf-8", errors="replace")
        for line in text.splitlines():
            m = _LIBRARY_LINE_RE.match(line.strip())
            if m:
                return m[1].strip()
        return ""


def _reason(e, library=None):
    """Why the library failed, in one line: its own first message rather than the Python
    binding's error code ("INVALID (1): Unknown error code")."""
    cause = library.cause() if library is not None else ""
    return cause or str(e).strip() or type(e).__name__


def _archive_error(anchor, e, detail="", library=None):
    msg = _reason(e, library)
    if detail:
        msg += f" ({detail.strip()[:200]})"
    return TraceFormatError(anchor, f"cannot read OTF2 archive: {msg}")


def _check_regular(path, what):
    """The library would block on a FIFO, and names a broken link only as a read error."""
    if os.path.lexists(path) and not os.path.isfile(path):
        raise TraceFormatError(path, f"OTF2 {what} is {describe_entry(path)}, not a regular file")


def _read_defs(anchor):
    otf2, _ = _modules(anchor)
    if not os.path.isfile(anchor):
        raise TraceFormatError(anchor, "OTF2 anchor file not found")
    _check_regular(anchor[:-len(".otf2")] + ".def", "definition file")
    # The package's definition callbacks print a Python traceback on stderr when a string is
    # not valid UTF-8 (then fail the read): keep that out of the user's terminal, and put its
    # last line into our message instead.
    captured = io.StringIO()
    library = _LibraryStderr()
    try:
        with library, contextlib.redirect_stderr(captured), otf2.reader.open(anchor) as tr:
            d = tr.definitions
            clock = d.clock_properties
            resolution = int(clock.timer_resolution) if clock is not None else 0
            regions = {r._ref: str(r.name) for r in d.regions}
            groups = [(g._ref, str(g.name)) for g in d.location_groups
                      if g.location_group_type == otf2.LocationGroupType.PROCESS]
            locs = [(l._ref, str(l.name), l.group._ref if l.group is not None else None,
                     l.type == otf2.LocationType.CPU_THREAD, int(l.number_of_events))
                    for l in d.locations]
    except DiffTraceError:
        raise
    except Exception as e:                 # the library's own errors (corrupt or truncated files)
        lines = [ln for ln in captured.getvalue().splitlines() if ln.strip()]
        raise _archive_error(anchor, e, "" if library.cause() else (lines[-1] if lines else ""),
                             library) from None
    notes = []
    groups.sort()
    nums = [_RANK_NAME_RE.search(name) for _, name in groups]
    if groups and all(nums) and len({int(m[1]) for m in nums}) == len(groups):
        rank_of = {ref: int(m[1]) for (ref, _), m in zip(groups, nums)}
        source = "location-group-name"
    else:
        rank_of = {ref: i for i, (ref, _) in enumerate(groups)}
        source = "location-group-order"
        if len(groups) > 1:
            notes.append("ranks assigned by location-group order (the group names do not end in "
                         "distinct rank numbers)")
    skipped = [name for ref, name, g, cpu, _ in locs if not cpu or g not in rank_of]
    if skipped:
        notes.append(f"skipped {len(skipped)} location(s) that are not CPU threads of a process: "
                     + ", ".join(skipped[:5]) + (" ..." if len(skipped) > 5 else ""))
    per_rank = {}
    for ref, name, g, cpu, nev in sorted(locs):
        if cpu and g in rank_of:
            per_rank.setdefault(rank_of[g], []).append((ref, nev, name))
    locations = [(rank, t, ref, nev, name) for rank in sorted(per_rank)
                 for t, (ref, nev, name) in enumerate(per_rank[rank])]
    return _Defs(anchor, resolution, regions, locations, source, notes)


def _defs_key(anchor):
    try:
        st = os.stat(anchor)
        defs = os.stat(anchor[:-len(".otf2")] + ".def") if anchor.endswith(".otf2") else None
        return (os.path.abspath(anchor), st.st_mtime_ns, st.st_size,
                defs and (defs.st_mtime_ns, defs.st_size))
    except OSError:
        return (os.path.abspath(anchor), None, None, None)


@functools.lru_cache(maxsize=8)
def _cached_defs(key):
    return _read_defs(key[0])


def _defs(anchor):
    return _cached_defs(_defs_key(anchor))


@dataclass(frozen=True)
class Otf2Entry:
    rank: int
    thread: int
    anchor: str
    location: int       # location reference
    size: int           # bytes of the location's .evt file (load balancing)


def _evt_path(anchor, location):
    return os.path.join(anchor[:-len(".otf2")], f"{location}.evt")


def find_otf2_run(path):
    """Index the OTF2 archive of a run directory: ``(entries, rank_source, notes)``, or None
    when the directory holds no archive.  Needs the ``otf2`` package (else DiffTraceError)."""
    anchor = find_anchor(path)
    if anchor is None:
        return None
    _modules(anchor)
    defs = _defs(anchor)
    if not defs.locations:
        raise TraceFormatError(anchor, "OTF2 archive defines no CPU-thread locations")
    entries = []
    for rank, thread, ref, nev, _ in defs.locations:
        evt = _evt_path(anchor, ref)
        size = os.path.getsize(evt) if os.path.isfile(evt) else 16 * nev
        entries.append(Otf2Entry(rank, thread, anchor, ref, size))
    return entries, defs.rank_source, list(defs.notes)


# --------------------------------------------------------------------------- events

def _to_ns(ticks, resolution):
    t = np.asarray(ticks, dtype=np.uint64)
    if resolution == 1_000_000_000 or resolution <= 0:
        return t
    res = np.uint64(resolution)
    if resolution <= (1 << 64) // 1_000_000_000:
        return (t // res) * np.uint64(1_000_000_000) + (t % res) * np.uint64(1_000_000_000) // res
    return (t.astype(np.float64) * (1e9 / resolution)).astype(np.uint64)


def _c_function(lib, name, *argtypes):
    """A C function of the OTF2 library with our own prototype (the package sets its own
    argument types on its function objects at every call: these are separate objects)."""
    address = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(address)


def _register(lib, callbacks, evt_reader, collector):
    """Register the C callbacks of :mod:`..kernels.otf2read` (Enter, Leave, and the
    calling-context events, only counted) and their user data."""
    vp = ctypes.c_void_p
    for event, fn in (("enter", "Enter"), ("leave", "Leave"), ("cc_enter", "CallingContextEnter"),
                      ("cc_leave", "CallingContextLeave"), ("cc_sample", "CallingContextSample")):
        code = _c_function(lib, f"OTF2_EvtReaderCallbacks_Set{fn}Callback", vp, vp)(
            ctypes.cast(callbacks, vp), vp(collector.callbacks[event]))
        if code != 0:
            raise RuntimeError(f"OTF2_EvtReaderCallbacks_Set{fn}Callback failed (error {code})")
    code = _c_function(lib, "OTF2_EvtReader_SetCallbacks", vp, vp, vp)(
        ctypes.cast(evt_reader, vp), ctypes.cast(callbacks, vp), vp(collector.user_data))
    if code != 0:
        raise RuntimeError(f"OTF2_EvtReader_SetCallbacks failed (error {code})")


def _nest_fast(region, enter):
    """Whether the Enter/Leave events are well nested as they are: the depth never goes
    below 0 and every Leave names the region of the innermost open Enter (the common
    case; then no repair is needed).  Vectorised: per nesting level, events alternate
    Enter, Leave, Enter, ... and each Leave names the Enter before it at that level."""
    n = enter.size
    if n == 0:
        return True
    after = np.cumsum(np.where(enter, 1, -1))
    if int(after.min()) < 0:
        return False
    level = np.where(enter, after - 1, after)
    order = np.lexsort((np.arange(n), level))
    lv = level[order]
    first = np.flatnonzero(np.r_[True, lv[1:] != lv[:-1]])
    rank_in_level = np.arange(n) - np.repeat(first, np.diff(np.r_[first, n]))
    if not np.array_equal(enter[order], rank_in_level % 2 == 0):
        return False
    leaves = np.flatnonzero(~enter[order])
    return bool(np.array_equal(region[order][leaves], region[order][leaves - 1]))


def _nest_repair(region, time, enter):
    """Enter/Leave events out of nesting: a Leave closes the regions opened after the one it
    names, or is dropped when that region is not open.  Returns (entered region or -1 for
    a return, time, closed, dropped) per event."""
    out_region, out_time = [], []
    stack, open_count = [], {}          # open region refs; ref -> times on the stack
    closed = dropped = 0
    for r, t, is_enter in zip(region.tolist(), time.tolist(), enter.tolist()):
        if is_enter:
            stack.append(r)
            open_count[r] = open_count.get(r, 0) + 1
            out_region.append(r)
            out_time.append(t)
        elif open_count.get(r):
            while stack[-1] != r:
                open_count[stack.pop()] -= 1
                out_region.append(-1)
                out_time.append(t)
                closed += 1
            open_count[stack.pop()] -= 1
            out_region.append(-1)
            out_time.append(t)
        else:
            dropped += 1
    return (np.asarray(out_region, dtype=np.int64), np.asarray(out_time, dtype=np.uint64),
            closed, dropped)


def read_otf2_location(anchor, location, rank=0, thread=0):
    """The Enter/Leave events of one location as a :class:`Trace` (``timestamps``: uint64 ns
    per event).  The events are collected by C callbacks (:mod:`..kernels.otf2read`)."""
    anchor = os.fspath(anchor)
    location = int(location)
    otf2, _otf2 = _modules(anchor)
    defs = _defs(anchor)
    evt = _evt_path(anchor, location)
    regions = defs.regions
    _check_regular(evt, "event file")
    _check_regular(evt[:-len(".evt")] + ".def", "local definition file")
    declared = next((nev for _, _, ref, nev, _ in defs.locations if ref == location), 0)
    budget.check(evt, declared * _BYTES_PER_EVENT, "reading it")
    left = budget.remaining()
    collector = _kernel.Collector(_MAX_EVENTS if left is None else min(_MAX_EVENTS, left // _BYTES_PER_EVENT))
    lib = _otf2.Config.conf.lib

    complete, failure = True, None
    library = _LibraryStderr()
    with library:             # the library's own error lines stay off the terminal
        try:
            reader = _otf2.Reader_Open(anchor)
        except Exception as e:
            raise _archive_error(anchor, e, library=library) from None
        evt_reader = None
        evt_files = False
        try:
            _otf2.Reader_SetSerialCollectiveCallbacks(reader)
            # the global definitions must be read before local ones (ids are mapped onto them)
            gdr = _otf2.Reader_GetGlobalDefReader(reader)
            gcb = _otf2.GlobalDefReaderCallbacks_New()
            _otf2.Reader_RegisterGlobalDefCallbacks(reader, gdr, gcb, None)
            _otf2.GlobalDefReaderCallbacks_Delete(gcb)
            _otf2.Reader_ReadAllGlobalDefinitions(reader, gdr)
            _otf2.Reader_CloseGlobalDefReader(reader, gdr)
            _otf2.Reader_SelectLocation(reader, location)
            try:
                _otf2.Reader_OpenDefFiles(reader)
                def_files = True
            except _otf2.Error:
                def_files = False
            _otf2.Reader_OpenEvtFiles(reader)
            evt_files = True
            if def_files:
                dr = _otf2.Reader_GetDefReader(reader, location)
                if dr:
                    try:
                        _otf2.Reader_ReadAllLocalDefinitions(reader, dr)
                    finally:
                        _otf2.Reader_CloseDefReader(reader, dr)
                _otf2.Reader_CloseDefFiles(reader)
            evt_reader = _otf2.Reader_GetEvtReader(reader, location)
            cbs = _otf2.EvtReaderCallbacks_New()
            try:
                _register(lib, cbs, evt_reader, collector)
            finally:
                _otf2.EvtReaderCallbacks_Delete(cbs)
            while True:
                try:
                    got = _otf2.EvtReader_ReadEvents(evt_reader, _BATCH)
                except Exception as e:
                    complete, failure = False, e
                    break
                if collector.out_of_memory:
                    raise MemoryError()
                if collector.over_limit:
                    raise budget.over_budget(evt, collector.count * _BYTES_PER_EVENT,
                                             f"reading it (more than {collector.count} events)")
                if got < _BATCH:
                    break
        except (DiffTraceError, MemoryError):
            raise
        except Exception as e:
            raise TraceFormatError(evt if os.path.exists(evt) else anchor,
                                   f"cannot read OTF2 location {location}: {_reason(e, library)}") from None
        finally:
            try:
                if evt_reader is not None:
                    _otf2.Reader_CloseEvtReader(reader, evt_reader)
                if evt_files:
                    _otf2.Reader_CloseEvtFiles(reader)
                _otf2.Reader_Close(reader)
            except Exception:
                pass

    if not complete and not collector.count:
        raise TraceFormatError(evt if os.path.exists(evt) else anchor,
                               f"cannot read the events of OTF2 location {location} (corrupt or "
                               f"truncated): {_reason(failure, library)}")
    region, times, enter = collector.arrays()
    kept, calling_context = collector.count, collector.calling_context
    del collector                       # its C arrays: the numpy copies are what is kept
    if _nest_fast(region, enter):
        entered = np.where(enter, region.astype(np.int64), -1)
        closed = dropped = 0
    else:
        entered, times, closed, dropped = _nest_repair(region, times, enter)
    events, names = _name_ids(anchor, location, entered, regions)
    notes = []
    base = f"{os.path.basename(anchor)} location {location}"
    if not complete:
        notes.append(f"{base}: event data unreadable after {kept} Enter/Leave events "
                     f"(truncated or corrupt) "
                     f"({os.path.relpath(evt, os.path.dirname(anchor))}: "
                     f"{_reason(failure, library)})")
    if closed or dropped:
        notes.append(f"{base}: Leave events out of nesting: {closed} region(s) closed implicitly, "
                     f"{dropped} Leave(s) of regions not open dropped")
    if calling_context:
        notes.append(f"{base}: {calling_context} calling-context events (Score-P sampling/unwinding) "
                     f"ignored; only Enter/Leave events are read")
    return Trace(rank=int(rank), thread=int(thread), names=names, events=events,
                 source=f"{anchor}#{location}", complete=complete, notes=notes,
                 timestamps=_to_ns(times, defs.resolution))


def _name_ids(anchor, location, entered, regions):
    """(events int32, names) from the entered region per event (-1: a return): names by
    first entry, one id per distinct name (regions of one name share it)."""
    events = np.zeros(entered.size, dtype=np.int32)
    is_entry = entered >= 0
    uniq, first, inverse = np.unique(entered[is_entry], return_index=True, return_inverse=True)
    names, id_of = [RETURN_NAME], {}
    ids = np.empty(uniq.size, dtype=np.int32)
    for u in np.argsort(first, kind="stable").tolist():
        ref = int(uniq[u])
        name = regions.get(ref)
        if name is None:
            name = f"region#{ref}"
        if name not in id_of:
            if name == RETURN_NAME:         # would read as returns wherever it is entered
                raise TraceFormatError(anchor, f"location {location}: the region name "
                                               f"{RETURN_NAME!r} is reserved (it stands for a return)")
            id_of[name] = len(names)
            names.append(name)
        ids[u] = id_of[name]
    events[is_entry] = ids[inverse.reshape(-1)]
    arr = np.empty(len(names), dtype=object)
    arr[:] = names
    return events, arr


# --------------------------------------------------------------------------- the format

def _detect(path, listing):
    """Whether the directory, or one of its subdirectories, holds an ``*.otf2`` file (found
    without the otf2 package, so that an archive it cannot read is still named)."""
    if any(kind == "file" and name.endswith(".otf2") for name, kind in listing.items()):
        return "an archive"
    for name, kind in listing.items():
        if kind == "dir":
            try:
                with os.scandir(os.path.join(path, name)) as it:
                    if any(e.name.endswith(".otf2") and e.is_file() for e in it):
                        return "an archive"
            except OSError:
                pass
    return None


def _discover(path, listing):
    found = find_otf2_run(path)
    if found is None:
        return None
    entries, source, notes = found
    refs = [TraceRef(e.rank, e.thread, e.anchor, str(e.location), e.size, "otf2") for e in entries]
    return RunIndex(path, "otf2", refs, source, notes)


FORMAT = Format(
    name="otf2", title="OTF2", expected="an OTF2 archive (traces.otf2)", detect=_detect, discover=_discover,
    load=lambda ref, cache: read_otf2_location(ref.path, int(ref.info), ref.rank, ref.thread))
