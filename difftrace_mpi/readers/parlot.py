"""Reading and writing ParLOT traces.

A ParLOT run directory holds, per traced process, ``<prefix>.<pid>.info`` (the function
names) and one ``<prefix>.<pid>.<tid>`` per thread (the compressed call/return stream).
The codec itself lives in :mod:`difftrace_mpi.kernels.parlot`; this module is the Python
face: file handling, validation, rank assignment and user-facing errors.

Ranks: ParLOT names a process by pid, not by MPI rank.  When a sidecar
``<prefix>.<pid>.rank`` (text, one integer) sits beside the info file -- our tracer writes
one -- it gives the rank; otherwise processes are numbered 0..P-1 by ascending pid.

How a process ended: our tracer writes ``<prefix>.<pid>.end`` (``key=value`` lines: how,
code, signal, thread, call, error, time_ns, mpi_calls) when the process ends; every thread
of the process gets it as ``Trace.ending`` (None when the file is missing, e.g. after
SIGKILL, or malformed -- then with a note).
"""
import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from . import budget, parlot_counted
from .base import NARROW_EVENTS, Format
from .. import config
from ..errors import DiffTraceError, TraceFormatError
from ..fsutil import describe_entry, read_whole_file, shown_names
from ..kernels import parlot as _k
from ..model import ID_LIMIT, RETURN_NAME, RunIndex, Trace, TraceRef
# the .end record's reader lives in parlot_end; its names stay importable from here
from .parlot_end import (END_HOWS, END_INT_KEYS, END_MAX_BYTES, END_OPEN_KEYS, LEAF_NOTE, SPAWN_NOTE,  # noqa: F401
                         end_path_for, parse_end, read_end, write_end)

__all__ = [
    "DEFAULT_MAX_VALUES", "FORMAT", "read_info", "parse_info", "write_info", "info_path_for",
    "decode_bytes", "decode_file", "encode_values", "write_trace", "find_parlot_traces",
    "parlot_ranks", "read_parlot_thread", "info_name_of", "end_path_for", "parse_end", "read_end",
    "write_end", "END_HOWS", "END_MAX_BYTES", "load_thread_file",
]

DEFAULT_MAX_VALUES = 1 << 30          # 2 GiB of uint16; a guard against decompression bombs
NO_FOLDS = np.zeros((0, 4), dtype=np.int64)   # decode_bytes: no repetition summarised
# Bytes held per value while a thread file is decoded (the codec's buffer, which grows by
# doubling, the uint16 result and the int32 events): the codec may produce no more values
# than the memory budget left holds at this rate.
DECODE_BYTES_PER_VALUE = 8
_RANK_RE = re.compile(r"[0-9]+")         # ASCII digits only (re's [0-9] is ASCII)
_BYTES_PER_NAME = 120                 # a routine name's str, list and array slots

_TRACE_RE = re.compile(r"^(?P<prefix>.+)\.(?P<pid>[0-9]+)\.(?P<tid>[0-9]+)$")


# --------------------------------------------------------------------------- .info files

def parse_info(text, path="<info>"):
    """Parse the text of a ``.info`` file.

    Returns ``(names, images)``: ``names`` an object array (index 0 = RETURN_NAME, index i =
    routine with function id i) and ``images`` a list of ``(image_path, first_id, last_id)``
    (``last_id < first_id`` for an image without routines).
    """
    if text.startswith("\ufeff"):
        text = text[1:]                  # a BOM, as editors on Windows write
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()                      # the newline ending the last line
    if "\r" in text:
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    # a '+' line starts an image block and the next line names the image (even a '+');
    # the routines follow, one per line (a list operation per block, not per line: a
    # real program's .info has thousands of names, and a run hundreds of them)
    starts = []
    for i in (i for i, line in enumerate(lines) if line == "+"):
        if not starts or i != starts[-1] + 1:
            starts.append(i)
    if lines and (not starts or starts[0] != 0):
        raise TraceFormatError(path, f"line 1: expected '+' starting an image block, found {lines[0][:60]!r}")
    names = [RETURN_NAME]
    images = []
    for b, end in zip(starts, starts[1:] + [len(lines)]):
        body = lines[b + 2:end]
        if RETURN_NAME in body:          # would read as returns wherever it is called
            raise TraceFormatError(path, f"line {b + 3 + body.index(RETURN_NAME)}: the routine name "
                                         f"{RETURN_NAME!r} is reserved (it stands for a return)")
        images.append((lines[b + 1] if b + 1 < len(lines) else "", len(names), len(names) + len(body) - 1))
        names.extend(body)
    arr = np.empty(len(names), dtype=object)
    arr[:] = names
    return arr, images


def _read_file(path, what):
    """The bytes of ``path``; a TraceFormatError naming ``what`` when it cannot be read."""
    try:
        return read_whole_file(path)
    except FileNotFoundError:
        raise TraceFormatError(path, f"{what} not found") from None
    except OSError as e:
        raise TraceFormatError(path, f"cannot read {what}: {e.strerror or e}") from None


def read_info(path):
    """Function names of one process: object array, index 0 = RETURN_NAME, index i = id i."""
    raw = _read_file(path, "ParLOT .info file")
    budget.check(path, 2 * len(raw) + _BYTES_PER_NAME * raw.count(b"\n"), "reading its names")
    return parse_info(raw.decode("utf-8", errors="surrogateescape"), path)[0]


def write_info(path, names, image="main"):
    """Write a one-image ``.info`` file; the inverse of :func:`read_info`.

    ``names`` are the routines with ids 1, 2, ...; a leading RETURN_NAME (as read_info
    returns) is skipped.
    """
    names = [str(n) for n in names]
    if names and names[0] == RETURN_NAME:
        names = names[1:]
    for n in [image] + names:
        if "\n" in n:
            raise ValueError(f"name {n!r} contains a newline")
    for n in names:
        if n == "+":
            raise ValueError("a routine cannot be named '+' (it starts an image block)")
    text = "+\n" + image + "\n" + "".join(n + "\n" for n in names)
    Path(path).write_bytes(text.encode("utf-8", errors="surrogateescape"))


def info_path_for(trace_path):
    """``<prefix>.<pid>.<tid>`` -> ``<prefix>.<pid>.info``."""
    p = Path(trace_path)
    stem, dot, _ = p.name.rpartition(".")
    if not dot:
        raise TraceFormatError(p, "not a ParLOT trace file name (<prefix>.<pid>.<tid>)")
    return p.with_name(stem + ".info")


# --------------------------------------------------------------------------- thread files

def decode_bytes(data, compressed=True, max_values=DEFAULT_MAX_VALUES, path="<bytes>", fold=False):
    """Decode the bytes of one thread file: ``(values uint16, complete, offset, folds)``.

    ``complete`` is False when the stream lacks its trailer; ``offset`` is then the byte
    where it broke off (values are those of the complete groups).  ``fold``: a repetition
    of a short unit longer than ``config.LIVELOCK_FOLD_AFTER`` values is summarised while
    it is decoded (``folds``: rows of position, period, units not kept, ended inside it;
    see ``kernels.parlot.decode``), so a livelocked thread's file holds no more values
    than its other calls need.  Raises TraceFormatError for a stream that cannot be
    decoded (too many values, corrupt).
    """
    return decode_and_check(data, None, compressed, max_values, path, fold)[:4]


def decode_and_check(data, n_names, compressed=True, max_values=DEFAULT_MAX_VALUES, path="<bytes>", fold=False):
    """``decode_bytes`` and ``kernels.parlot.check_ids`` of the values against ``n_names``
    names (None: not checked, -1s): ``(values, complete, offset, folds, index of the first
    value beyond the names or -1, index of the first return with no call open before it
    or -1)``; the decoder tells when nothing needs looking at again (``decode_checked``)."""
    data = bytes(data) if not isinstance(data, (bytes, bytearray, memoryview)) else data
    allowed = budget.value_limit(DECODE_BYTES_PER_VALUE, max_values)
    if not compressed:
        n = len(data)
        nvals = n // 2
        if nvals > max_values:
            raise TraceFormatError(path, f"more than {max_values} values", 2 * max_values)
        if nvals > allowed:
            raise budget.over_budget(path, nvals * DECODE_BYTES_PER_VALUE, "decoding it")
        values = np.frombuffer(data, dtype="<u2", count=nvals).astype(np.uint16)
        complete = (n % 2 == 1 and data[-1] == 0)
        checked = (-1, -1) if n_names is None else _k.check_ids(values, n_names)
        return (values, complete, (n if complete else 2 * nvals), NO_FOLDS) + checked
    try:        # never grows past `allowed` values
        if n_names is None:
            values, status, offset, folds = _k.decode(data, allowed, *_fold_sizes(fold))
            checked = (-1, -1)
        else:
            values, status, offset, folds, *checked = _k.decode_checked(data, n_names, allowed, *_fold_sizes(fold))
    except MemoryError:          # a process limit below the budget
        raise budget.over_budget(path, 0, "decoding it") from None
    if status == _k.OK:
        return (values, True, offset, folds, *checked)
    if status == _k.TRUNCATED:
        return (values, False, offset, folds, *checked)
    if status == _k.LIMIT and allowed < max_values:
        raise budget.over_budget(path, (allowed + 1) * DECODE_BYTES_PER_VALUE,
                                 f"decoding it (more than {allowed} values by byte {offset})")
    if status == _k.LIMIT:
        cap = f"2^{max_values.bit_length() - 1}" if max_values > 0 and max_values & (max_values - 1) == 0 \
            else f"{max_values}"
        raise TraceFormatError(path, f"stream decodes to more than {max_values} values (the most a thread file "
                                     f"may hold, {cap}: corrupt or a decompression bomb?)", offset)
    raise TraceFormatError(path, "corrupt ParLOT stream", offset)


def _fold_sizes(fold):
    return (config.LIVELOCK_FOLD_AFTER, config.LIVELOCK_FOLD_KEEP) if fold else (0, 0)


def value_offset(data, index, fold=False):
    """Byte offset in a compressed thread file of the ZE group that produces value number
    ``index`` (for messages; ``fold``: of the values kept when decoded so): decoding stops
    at that value, and says where."""
    values, status, offset, _ = _k.decode(data, index, *_fold_sizes(fold))
    return int(offset) if status == _k.LIMIT else len(data)


def fold_words(fold):
    """A note's words for one fold row (``decode_bytes``)."""
    position, period, units, to_end = fold
    if to_end:
        return (f"it ends repeating one unit of {period} events {units:,} times more than the analysis keeps "
                f"(from value {position}; summarised while read: a livelock?)")
    return (f"a unit of {period} events repeated {units:,} times more than the analysis keeps (from value "
            f"{position}; summarised while read)")


def _truncation_message(nvalues, offset, size):
    return (f"file lacks its trailer (thread probably killed): stream breaks off at byte "
            f"{offset} of {size}; {nvalues} values recovered from the complete part")


def decode_file(path, compressed=True, strict=False, max_values=DEFAULT_MAX_VALUES):
    """Decode one thread file: ``(values uint16 array, complete)``.

    Corrupt data raises TraceFormatError(path, message, offset).  A file without its
    trailer (a killed thread) returns the recovered values with ``complete=False``, or
    raises when ``strict``.  ``compressed=False`` reads the uncompressed ParLOT variant
    (raw little-endian uint16 values + one 0x00 byte).
    """
    values, complete, _ = _decode_path(path, compressed, strict, max_values)
    return values, complete


def _decode_path(path, compressed, strict, max_values):
    data = _read_file(path, "ParLOT trace file")
    values, complete, offset, _ = decode_bytes(data, compressed, max_values, path)
    if not complete and strict:
        raise TraceFormatError(path, _truncation_message(len(values), offset, len(data)), offset)
    return values, complete, (offset, len(data))


def _as_uint16(values):
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"expected a 1-d sequence of values, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.uint16)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"values must be integers, got dtype {arr.dtype}")
    if arr.dtype != np.uint16 and (int(arr.min()) < 0 or int(arr.max()) > 0xFFFF):
        raise ValueError("values must lie in 0..65535")
    return np.ascontiguousarray(arr, dtype=np.uint16)


def encode_values(values, compressed=True):
    """Bytes of a thread file holding ``values`` (ParLOT's exact encoding)."""
    arr = _as_uint16(values)
    if not compressed:
        return arr.astype("<u2").tobytes() + b"\x00"
    return _k.encode(arr)


def write_trace(path, values, compressed=True):
    """Write one thread file."""
    Path(path).write_bytes(encode_values(values, compressed))


# --------------------------------------------------------------------------- directories

def info_name_of(name):
    """``<prefix>.<pid>.info`` for a file name shaped like a thread file
    ``<prefix>.<pid>.<tid>``, else None."""
    m = _TRACE_RE.match(name)
    return f"{m['prefix']}.{m['pid']}.info" if m else None


def find_parlot_traces(directory, is_file):
    """Thread files of a ParLOT run directory: list of ``(pid, tid, trace_path, info_path)``.

    Sorted by (pid, info path, tid).  A thread file without its ``.info`` raises, and so does
    an entry named like a thread file of an existing ``.info`` (or such an ``.info``) that is
    not a regular file (a directory, a FIFO, a broken symbolic link): reading it could
    block, and skipping it would count that thread as an empty trace.  Other entries named
    ``<prefix>.<pid>.<tid>`` without an ``.info`` that are not regular files are skipped.
    ``is_file``: {entry name: regular file?} of the directory, from discovery's listing.
    """
    d = str(directory)           # plain strings: Path objects cost ~0.4 s per 65k files
    found = []
    infos = {}
    prefix = os.path.join(d, "")
    for name in sorted(is_file):
        m = _TRACE_RE.match(name)
        if not m:
            continue
        info_name = f"{m['prefix']}.{m['pid']}.info"
        if not is_file[name]:
            if info_name in is_file:
                raise TraceFormatError(prefix + name, f"named like a thread file of {info_name} but is "
                                                     f"{describe_entry(prefix + name)}")
            continue
        if info_name not in is_file:
            raise TraceFormatError(prefix + name, f"ParLOT .info file {info_name} is missing "
                                                 f"(needed for the function names)")
        info = infos.get(info_name)
        if info is None:
            if not is_file[info_name]:
                raise TraceFormatError(prefix + info_name, f"ParLOT .info file is "
                                                          f"{describe_entry(prefix + info_name)}, not a regular file")
            info = infos[info_name] = prefix + info_name
        found.append((int(m["pid"]), int(m["tid"]), prefix + name, info))
    found.sort(key=lambda t: (t[0], str(t[3]), t[1]))
    return found


def _rank_sidecar(info_path):
    return str(info_path)[: -len(".info")] + ".rank"


def _read_rank(path):
    try:
        text = read_whole_file(path).decode("utf-8", errors="replace").strip()
    except OSError as e:
        raise TraceFormatError(path, f"cannot read rank file: {e.strerror or e}") from None
    if not _RANK_RE.fullmatch(text):     # int() would take "1_0", "+1" and non-ASCII digits
        raise TraceFormatError(path, f"rank file does not hold a rank (a non-negative integer in ASCII "
                                     f"digits): {text[:40]!r}")
    digits = text.lstrip("0") or "0"
    if len(digits) > 19 or int(digits) >= ID_LIMIT:
        raise TraceFormatError(path, f"rank {text[:40]}{'...' if len(text) > 40 else ''} is out of range "
                                     f"(ranks are below 2^63)")
    return int(digits)


def parlot_ranks(found):
    """MPI rank of every process of a run: ``({info_path: rank}, rank_source, notes)``.

    Ranks come from ``<prefix>.<pid>.rank`` sidecars when every process has one
    (rank_source="sidecar"), else from ascending pid order (rank_source="pid-order").
    """
    procs = []          # processes in pid order (info path breaks ties between hosts)
    for pid, _, _, info in found:
        if not procs or procs[-1] != (pid, info):
            procs.append((pid, info))
    sidecars = {info: _rank_sidecar(info) for _, info in procs}
    is_file = {info: os.path.isfile(sidecars[info]) for _, info in procs}
    for info in is_file:
        if not is_file[info] and os.path.lexists(sidecars[info]):     # reading a FIFO would block
            raise TraceFormatError(sidecars[info], f"rank file is {describe_entry(sidecars[info])}, "
                                                   f"not a regular file")
    have = [info for _, info in procs if is_file[info]]
    if not have:
        notes = ["ranks assigned by ascending pid (no .rank sidecar files)"] if len(procs) > 1 else []
        return {info: i for i, (_, info) in enumerate(procs)}, "pid-order", notes
    missing = [info for _, info in procs if not is_file[info]]
    if missing:
        raise TraceFormatError(sidecars[missing[0]],
                               f"rank file missing while {len(have)} other process(es) of this run have one")
    ranks, seen = {}, {}
    for _, info in procs:
        r = _read_rank(sidecars[info])
        if r in seen:
            raise TraceFormatError(sidecars[info], f"rank {r} also claimed by {os.path.basename(sidecars[seen[r]])}")
        seen[r] = info
        ranks[info] = r
    return ranks, "sidecar", []


_UNREAD = object()


@dataclass(frozen=True)
class Decoded:
    """What a thread file's bytes decide, kept as ``Trace.raw``, so that the same thread of
    a later run with the same bytes and names is not decoded again (its events are the
    earlier trace's: ids come from the bytes alone).  ``unnamed``: the first value no name
    covers, (value index, value, byte); ``unmatched``: the first return with no call open,
    (value index, byte); ``values``, ``offset``: how far decoding got (for the note of a
    file cut short)."""
    data: bytes
    names: np.ndarray
    compressed: bool
    complete: bool
    values: int
    offset: int
    unnamed: Optional[tuple]
    unmatched: Optional[tuple]
    folds: np.ndarray          # repetitions summarised while read (decode_bytes)

    def notes(self, trace_path, info_path):
        base, n = os.path.basename(trace_path), len(self.names)
        if self.unnamed is not None:
            i, value, byte = self.unnamed
            notes = [f"{base}: function id {value} (value {i}, byte {byte}) is not named in "
                     f"{os.path.basename(info_path)} (ids 0..{n - 1}): read as cut there, as a thread "
                     f"cut short ({i} values kept; the tracer killed between writing the data and its names, or "
                     f"damaged data)"]
        else:
            notes = [] if self.complete else [f"{base}: " + _truncation_message(self.values, self.offset,
                                                                                 len(self.data))]
        if self.unmatched is not None:
            i, byte = self.unmatched
            notes.append(f"{base}: damaged? a return with no call open at byte {byte} "
                         f"(value {i}), which the tracer cannot write; ParLOT has no checksum, so "
                         f"the calls decoded from there on may be wrong")
        notes.extend(f"{base}: " + fold_words(fold) for fold in self.folds.tolist())
        return notes

    def same_file(self, data, names, compressed, memo=None):
        """Whether a file of these bytes and names decodes as this one; ``memo`` (a dict)
        compares two names arrays once (a process's threads share one)."""
        if compressed != self.compressed or data != self.data:
            return False
        if names is self.names:
            return True
        key = ("same names", id(names), id(self.names))      # the arrays live in the cache
        if memo is None:
            return np.array_equal(names, self.names)
        if key not in memo:
            memo[key] = np.array_equal(names, self.names)
        return memo[key]


def _decode_thread(data, names, compressed, path, narrow=False):
    """(events, :class:`Decoded`) of one thread file's bytes: int32 ids, or with ``narrow``
    the decoded uint16 values themselves (no int32 copy; see :data:`NARROW_EVENTS`)."""
    values, complete, offset, folds, i, unmatched = decode_and_check(data, len(names), compressed, DEFAULT_MAX_VALUES,
                                                                     path, fold=True)
    events = values if narrow else values.astype(np.int32)
    at = (lambda index: value_offset(data, index, fold=True)) if compressed else (lambda index: 2 * index)
    unnamed = None
    if i >= 0:
        unnamed = (i, int(values[i]), at(i))
        events, complete = events[:i].copy(), False
        folds = folds[folds[:, 0] <= i]
    found = (unmatched, at(unmatched)) if unmatched >= 0 else None      # (before the cut: check_ids looks no further)
    return events, Decoded(data, names, compressed, complete, len(values), offset, unnamed, found, folds)


def read_parlot_thread(trace_path, info_path, rank, tid, names=None, ending=_UNREAD, compressed=True, data=None,
                       earlier=None, memo=None, drop=None, narrow=False):
    """One thread file as a :class:`Trace` (``names``: the process's info names, if read already;
    ``ending``: its :func:`read_end` pair, if read already; ``data``: the file's bytes, if read).

    Every value must name a function of the info file: a value that does not (the tracer
    killed between writing a thread's data and the names it uses, or damaged data) cuts
    the trace there, as a thread cut short is: the events before it, ``complete=False``
    and a note naming the id and its byte.  ``Trace.ending`` is the process's end record.

    ``earlier``: the same thread's trace in an earlier run; when this file holds the same
    bytes and its process the same names, it is not decoded: the trace comes back with
    ``events`` None, meaning the earlier trace's events (``memo``: see ``Decoded.same_file``;
    the earlier trace must have been read with the same ``drop``).

    ``drop``: names of automatic leaves whose calls are left out (:mod:`.parlot_counted`;
    None: those of the trace's own run directory).

    ``narrow``: ``events`` are the decoded uint16 values, a new array the caller owns,
    instead of int32 ids (:data:`NARROW_EVENTS`)."""
    names = read_info(info_path) if names is None else names
    ending, end_note = read_end(end_path_for(info_path)) if ending is _UNREAD else ending
    data = _read_file(trace_path, "ParLOT trace file") if data is None else data
    if drop is None:
        drop = parlot_counted.drop_set(None, os.path.dirname(os.path.abspath(str(info_path))))
    mask = parlot_counted.drop_mask(names, drop)
    known = getattr(earlier, "raw", None)
    if isinstance(known, Decoded) and known.same_file(data, names, compressed, memo):
        events, decoded = None, known
    else:
        events, decoded = _decode_thread(data, names, compressed, trace_path, narrow)
        if mask is not None:
            events, folds, _ = parlot_counted.drop_calls(events, mask, decoded.folds)
            decoded = dataclasses.replace(decoded, folds=folds)
    notes = decoded.notes(trace_path, info_path)
    if end_note:
        notes.append(end_note)
    if ending and "leaf_calls" in ending:
        notes.append(LEAF_NOTE)
    if mask is not None:
        notes.append(parlot_counted.AUTO_NOTE)
    if ending and ending.get("spawned"):
        notes.append(SPAWN_NOTE)
    return Trace(rank=rank, thread=tid, names=names, events=events, source=str(trace_path),
                 complete=decoded.complete, notes=notes, ending=ending, raw=decoded, folds=decoded.folds)


PROBE_VALUES = 1 << 12      # values decoded first to judge a file given on its own


def load_thread_file(path, compressed=True):
    """One thread file given on its own (``decode``, ``nlr``, ``diffnlr`` of two files), as a
    :class:`Trace` of rank 0, thread 0.  A ParLOT file has no magic number, so it is judged
    by the run it belongs to: its ``.info`` must be there and its first values must be
    function ids that .info names; anything else is refused as not a trace, after
    decoding a few thousand values (never the whole of a large file that is no trace): a
    trace starts with a call of a named function.  A file not named like a thread file is
    refused at once.
    Past a good start, an unnamed id cuts it as :func:`read_parlot_thread` does."""
    path = os.fspath(path)
    if info_name_of(os.path.basename(path)) is None:
        raise TraceFormatError(path, "not a trace file: a ParLOT thread file is named <prefix>.<pid>.<tid> "
                                     "(beside its <prefix>.<pid>.info), a text trace r<rank>.t<thread>.txt, "
                                     "a uftrace one <tid>.dat")
    data = _read_file(path, "ParLOT trace file")     # a missing file is an error naming it
    info = info_path_for(path)
    names = read_info(info)          # and so is a missing .info
    if compressed:
        try:
            probe, status, _, _ = _k.decode(data, PROBE_VALUES)
        except MemoryError:
            raise budget.over_budget(path, 0, "decoding it") from None
        if status == _k.LIMIT and not len(probe):
            # the first step alone copies more values than the probe holds: from the empty
            # history, so returns, which no trace starts with
            probe = np.zeros(1, dtype=np.uint16)
    else:
        probe = np.frombuffer(data, dtype="<u2", count=min(len(data) // 2, PROBE_VALUES))
    if len(probe) and not 0 < int(probe[0]) < len(names):
        first = "a return" if int(probe[0]) == 0 else f"{int(probe[0])}"
        raise TraceFormatError(path, f"not a trace of this run: its first value is {first}, not a call of a "
                                     f"function {info.name} names (ids 1..{len(names) - 1})")
    return read_parlot_thread(path, info, 0, 0, names=names, compressed=compressed, data=data)


# --------------------------------------------------------------------------- the format

def _detect(path, listing):
    threads = sum(1 for name in listing if (info := info_name_of(name)) is not None and info in listing)
    return f"{threads} thread file{'s' if threads != 1 else ''}" if threads else None


def _discover(path, listing):
    """The traces of a ParLOT run, ranks as in :func:`parlot_ranks`; None without any."""
    found = find_parlot_traces(path, {name: kind == "file" for name, kind in listing.items()})
    if not found:
        return None
    ranks, source, notes = parlot_ranks(found)
    used = set()
    for _, _, trace_path, info_path in found:
        info_name = os.path.basename(info_path)
        stem = info_name[: -len(".info")]
        used.update((os.path.basename(trace_path), info_name, stem + ".rank", stem + ".end", stem + ".leaves",
                     stem + parlot_counted.SUFFIX))
    others = sorted(name for name in listing if name not in used)
    if others:
        notes.append(f"read as a ParLOT run; other files ignored: {shown_names(others)}")
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


def _load(ref, cache, earlier=None):
    """One thread of a discovered run; the threads of a process share one read of its .info
    and of its .end (the same ``ending`` dict).  ``earlier``: as in :func:`read_parlot_thread`."""
    if cache is None:
        return read_parlot_thread(ref.path, ref.info, ref.rank, ref.thread, earlier=earlier)
    names = _names(ref, cache)
    ending = cache.get(("end", ref.info))
    if ending is None:
        ending = cache[("end", ref.info)] = read_end(end_path_for(ref.info))
    drop = parlot_counted.drop_set(cache, os.path.dirname(os.path.abspath(str(ref.info))))
    return read_parlot_thread(ref.path, ref.info, ref.rank, ref.thread, names=names, ending=ending,
                              earlier=earlier, memo=cache, drop=drop, narrow=bool(cache.get(NARROW_EVENTS)))


def _names(ref, cache):
    """The names of a thread's process (its .info), read once per process; its run
    directory is remembered for the automatic leaves' union (:mod:`.parlot_counted`)."""
    parlot_counted.note_directory(cache, os.path.dirname(os.path.abspath(str(ref.info))))
    names = cache.get(ref.info)
    if names is None:
        names = cache[ref.info] = read_info(ref.info)
    return names


FORMAT = Format(
    name="parlot", title="ParLOT", expected="ParLOT files <prefix>.<pid>.info + <prefix>.<pid>.<tid>",
    detect=_detect, discover=_discover, load=_load, names=_names,
    load_file=load_thread_file, loads_after=True)
