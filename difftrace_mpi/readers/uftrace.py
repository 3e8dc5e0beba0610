"""Reading uftrace record directories (``uftrace record -d DIR ...``) without uftrace.

Run layouts accepted as a run directory (see :func:`find_uftrace_run`):

* a directory of uftrace data directories, one per MPI rank, whose names end in the rank:
  ``mpiexec -n 4 sh -c 'uftrace record --no-sched -d run/ut.$PMI_RANK ./app'`` (any prefix;
  ``$OMPI_COMM_WORLD_RANK`` or ``$SLURM_PROCID`` work the same).  Without such numbers,
  ranks follow the pids (rank_source "pid-order", with a note);
* one uftrace data directory: one rank per process in it (usually one, rank 0).

What a uftrace data directory holds (data file version 4, written by uftrace 0.9 and later;
checked against Debian 12's uftrace 0.13; little-endian data only):

* ``info``: a binary header (``"Ftrace!\\0"``, version, header size, endianness, ELF class,
  feature mask, ...) followed by ``key:value`` text lines (exename, cmdline, taskinfo...).
* ``<tid>.dat``: one per thread, a sequence of 16-byte records, two little-endian uint64:
  ``time`` (ns, CLOCK_MONOTONIC) and a bit field word: ``type:2`` (0 ENTRY, 1 EXIT, 2 LOST,
  3 EVENT), ``more:1`` (a payload follows), ``magic:3`` (always 5), ``depth:10``,
  ``addr:48`` (function address; for LOST the number of lost records; for EVENT the event
  id).  An EVENT record with ``more`` is followed by a uint16 length and that many bytes,
  padded so that length + 2 is a multiple of 8.  ENTRY/EXIT records with ``more`` carry
  recorded arguments/return values (``-A``/``-R``/``-a``), whose layout needs the argument
  specs: they are refused with a clear message.
* ``task.txt``: ``SESS`` (a process image: pid, session id, exename), ``TASK`` (tid -> pid),
  ``FORK`` (child pid -> parent pid) and ``DLOP`` (a dlopen'ed library: session, base,
  path) lines, each with a ``timestamp=<sec>.<nsec>``.
* ``sid-<session>.map``: the executable mappings of a session, ``/proc/<pid>/maps`` style
  (``start-end perms offset dev inode path``).
* ``<module basename>.sym``: the module's symbols, nm-like: ``<hex addr> <type> <name>`` (or
  ``<hex addr> <hex size> <type> <name>`` in newer versions), addresses relative to the
  module's load base (feature bit SYM_REL_ADDR; absolute in very old recordings);
  ``?`` lines (``__sym_end``, ``__dynsym_end``, ``__func_end``) only mark ends.

Addresses are resolved as uftrace does: the map line that holds the address gives the
module and its load base (the lowest start among that module's lines), the module's
``.sym`` file the symbol that holds ``address - base``.  Library calls through the PLT
(``P`` symbols, e.g. ``MPI_Send``) are named plainly, as ``uftrace replay`` names them.
uftrace writes the ``.sym`` files when the recording ends, so a program that crashed or was
killed under it may leave none; then, as uftrace does, the module's own ELF file (the path
in the map) gives the symbols, provided its build-id is the one the map recorded (a note
says so).  An address no symbol holds is named ``<module>+0x<offset>`` (or ``0x<address>``
outside every mapping).

How the process ended: the ``exit_status`` of the ``info`` file (a wait status) gives
``Trace.ending`` of the process uftrace started (``{"how": "exit", "code": n}`` or
``{"how": "signal", "signal": "SIGSEGV"}``), so that a run that ended normally with calls
still open (``exit()`` called inside them, or exits uftrace did not record, as with a
binary built with both ``-pg`` and ``-finstrument-functions``) is not taken for a hang.

Events: ENTRY -> entry of the function, EXIT -> return (0).  The ``depth`` field keeps the
stream well nested: an EXIT closes the open call at its depth (calls left open above it,
whose exits were lost, are closed first); an EXIT with no open call at its depth (its entry
was never recorded) is dropped; an ENTRY at a depth where calls are still open closes them
first.  Without LOST records none of this happens.  LOST records (uftrace's buffer
overran) and EVENT records are not events of the trace; lost ones are counted in the notes.

Traces of one data directory: one per ``<tid>.dat``.  Threads are numbered per process:
the main thread (tid == pid) is thread 0, the others follow by ascending tid.  A data
directory holding several processes (a traced program that forks) numbers the threads of
its first process first (by the pid of the first session), then those of the next ones,
and says so in the notes.
"""
import os
import re
from dataclasses import dataclass, field

import numpy as np

from . import budget
from .base import Format
from .uftrace_meta import MAGIC, not_a_file, parse_task_txt, pid_of, read_bytes, read_data_dir
from ..errors import TraceFormatError
from ..model import RETURN_NAME, RunIndex, Trace, TraceRef

__all__ = [
    "MAGIC", "RECORD_MAGIC", "ENTRY", "EXIT", "LOST", "EVENT", "FORMAT", "RecordStream", "UftraceEntry",
    "is_uftrace_dir", "is_uftrace_thread_file", "parse_records", "nest", "find_uftrace_run",
    "read_uftrace_thread",
]

RECORD_MAGIC = 5
ENTRY, EXIT, LOST, EVENT = 0, 1, 2, 3
_RECORD = 16
_DAT_RE = re.compile(r"^([0-9]+)\.dat$")
_SUFFIX_RE = re.compile(r"([0-9]+)$")
_MAX_NOTE_ITEMS = 5
# Bytes held per 16-byte record while a thread file is read (its fields, the nesting and
# the events with their timestamps), checked against the memory budget before reading
_BYTES_PER_RECORD = 100


# --------------------------------------------------------------------------- records

@dataclass
class RecordStream:
    """The decoded records of one ``<tid>.dat`` file (ENTRY and EXIT records only)."""
    time: np.ndarray          # uint64 ns
    kind: np.ndarray          # uint8: ENTRY or EXIT
    depth: np.ndarray         # uint16
    addr: np.ndarray          # uint64
    complete: bool = True     # False: the file ends inside a record (offset = where)
    offset: int = 0           # bytes parsed (== file size when complete)
    lost: list = field(default_factory=list)   # (record index in ``time``, count) per LOST record
    events: int = 0           # EVENT records skipped


def _fields(words):
    w = words
    return ((w & 3).astype(np.uint8), ((w >> 2) & 1).astype(np.uint8), ((w >> 3) & 7).astype(np.uint8),
            ((w >> 6) & 0x3FF).astype(np.uint16), (w >> 16) & 0xFFFFFFFFFFFF)


def parse_records(data, path="<bytes>"):
    """Parse the bytes of a ``<tid>.dat`` file into a :class:`RecordStream`.

    A file whose end cuts a record (or an event payload) gives the complete records with
    ``complete=False`` and ``offset`` = the byte where the partial one starts.  A record
    whose magic is not 5 raises TraceFormatError naming the byte offset, and so does an
    ENTRY/EXIT record carrying arguments (recorded with -A/-R/-a), whose size cannot be
    known without uftrace's argument specs.  Work and memory are linear in the file size.
    """
    data = memoryview(bytes(data) if not isinstance(data, (bytes, bytearray)) else data)
    size = len(data)
    parts = []                 # (time, word) arrays of clean stretches
    lost, nevents = [], 0
    nrec = 0                   # ENTRY/EXIT records kept so far
    pos = 0
    window = 1 << 16
    complete = True
    while pos < size:
        avail = (size - pos) // _RECORD
        if avail == 0:
            complete = False
            break
        n = min(avail, window)
        arr = np.frombuffer(data, dtype="<u8", count=2 * n, offset=pos).reshape(n, 2)
        words = arr[:, 1]
        hard = np.flatnonzero((((words >> 3) & 7) != RECORD_MAGIC) | (((words >> 2) & 1) == 1))
        clean = n if hard.size == 0 else int(hard[0])
        if clean:
            block = arr[:clean]
            calls = (block[:, 1] & 2) == 0                  # ENTRY/EXIT; else LOST or EVENT
            if calls.all():
                parts.append(block)
            else:
                kept_before = np.cumsum(calls) - calls
                for i in np.flatnonzero(~calls).tolist():
                    if int(block[i, 1]) & 3 == LOST:
                        lost.append((nrec + int(kept_before[i]), int(block[i, 1]) >> 16))
                    else:
                        nevents += 1
                block = block[calls]
                parts.append(block)
            nrec += block.shape[0]
            pos += clean * _RECORD
        if clean == n:
            window = min(window * 2, 1 << 20)
            continue
        # one special record at pos
        w = int(arr[clean, 1])
        rtype, more, rmagic = w & 3, (w >> 2) & 1, (w >> 3) & 7
        if rmagic != RECORD_MAGIC:
            raise TraceFormatError(path, f"not a uftrace record (magic {rmagic}, expected "
                                         f"{RECORD_MAGIC}): corrupt or not a uftrace .dat file", pos)
        if rtype in (ENTRY, EXIT):          # with a payload
            raise TraceFormatError(
                path, f"{'entry' if rtype == ENTRY else 'exit'} record carries recorded arguments or "
                      f"return values (uftrace record -A/-R/-a/--auto-args); these cannot be read "
                      f"without uftrace's argument specs: record without them", pos)
        end = pos + _RECORD
        if more:
            if end + 2 > size:
                complete = False
                break
            plen = int.from_bytes(data[end:end + 2], "little")
            pad = (plen + 2 + 7) // 8 * 8
            if end + pad > size:
                complete = False
                break
            end += pad
        if rtype == LOST:
            lost.append((nrec, (w >> 16) & 0xFFFFFFFFFFFF))
        else:
            nevents += 1
        pos = end
        window = 64
    if parts:
        allr = np.concatenate(parts) if len(parts) > 1 else parts[0]
        time, words = allr[:, 0].astype(np.uint64), allr[:, 1]
    else:
        time = np.zeros(0, dtype=np.uint64)
        words = np.zeros(0, dtype=np.uint64)
    kind, _, _, depth, addr = _fields(words)
    return RecordStream(time=time, kind=kind, depth=depth, addr=addr.astype(np.uint64),
                        complete=complete, offset=pos, lost=lost, events=nevents)


def nest(stream):
    """Turn ENTRY/EXIT records into a well-nested stream.

    Returns ``(record_index, is_return, time, stats)``: for every output event the index of
    the record it comes from, whether it is a return, its timestamp, and
    counts of the repairs made (``closed``: returns added for calls whose exit was lost;
    ``dropped``: exits without a recorded entry; ``mismatched``: exits whose address
    differs from the open call's).
    """
    kind, depth, addr, time = stream.kind, stream.depth, stream.addr, stream.time
    n = kind.size
    # Fast path, the common case: depths exactly those of a well-nested stream from depth 0
    # (exit addresses are then uftrace's own pairing and are not re-checked here).
    if n:
        step = np.where(kind == ENTRY, 1, -1)
        after = np.cumsum(step)
        before = after - step
        expect = np.where(kind == ENTRY, before, before - 1)
        if int(after.min()) >= 0 and np.array_equal(depth.astype(np.int64), expect):
            return (np.arange(n, dtype=np.int64), kind == EXIT, time,
                    {"closed": 0, "dropped": 0, "mismatched": 0})
    idx, ret, ts = [], [], []
    stack = []                           # (depth, addr); depths strictly increase upwards
    open_depths = set()                  # the depths on the stack: an O(1) test, not a scan
    closed = dropped = mismatched = 0
    kl, dl, al, tl = kind.tolist(), depth.tolist(), addr.tolist(), time.tolist()
    for i in range(n):
        d = dl[i]
        if kl[i] == ENTRY:
            while stack and stack[-1][0] >= d:
                open_depths.discard(stack.pop()[0])
                idx.append(i); ret.append(True); ts.append(tl[i])
                closed += 1
            stack.append((d, al[i]))
            open_depths.add(d)
            idx.append(i); ret.append(False); ts.append(tl[i])
        else:
            if d not in open_depths:
                dropped += 1
                continue
            while stack[-1][0] > d:
                open_depths.discard(stack.pop()[0])
                idx.append(i); ret.append(True); ts.append(tl[i])
                closed += 1
            if stack[-1][1] != al[i]:
                mismatched += 1
            open_depths.discard(stack.pop()[0])
            idx.append(i); ret.append(True); ts.append(tl[i])
    return (np.asarray(idx, dtype=np.int64), np.asarray(ret, dtype=bool),
            np.asarray(ts, dtype=np.uint64),
            {"closed": closed, "dropped": dropped, "mismatched": mismatched})


# --------------------------------------------------------------------------- detection

def is_uftrace_dir(path):
    """True when ``path`` is a directory with a uftrace ``info`` file (``Ftrace!`` magic)."""
    info = os.path.join(path, "info")
    if not os.path.isfile(info):        # a FIFO named info would block the open
        return False
    try:
        with open(info, "rb") as fh:
            return fh.read(8) == MAGIC
    except OSError:
        return False


def is_uftrace_thread_file(path):
    """True for a ``<tid>.dat`` file inside a uftrace data directory."""
    path = os.fspath(path)
    return bool(_DAT_RE.match(os.path.basename(path))) and os.path.isfile(path) and \
        is_uftrace_dir(os.path.dirname(os.path.abspath(path)))


@dataclass(frozen=True)
class UftraceEntry:
    rank: int
    thread: int
    dat: str           # <tid>.dat path
    data_dir: str      # the uftrace data directory
    size: int


def _thread_files(d):
    """[(pid, tid, path, size)] of one data directory, in thread order (see module doc)."""
    try:
        entries = os.listdir(d)
    except OSError as e:
        raise TraceFormatError(d, f"cannot list directory: {e.strerror or e}") from None
    tasks = parse_task_txt(os.path.join(d, "task.txt"))
    sess_pids = [p for _, p, _, _ in tasks.sessions]
    out = []
    for e in entries:
        m = _DAT_RE.match(e)
        if not m:
            continue
        full = os.path.join(d, e)
        if not os.path.isfile(full):        # skipped, it would count as an empty trace
            raise not_a_file(full, "thread file")
        tid = int(m[1])
        pid = pid_of(tasks, tid)
        out.append((pid, tid, full, os.path.getsize(full)))
    order = []
    for p in sess_pids + sorted({o[0] for o in out}):
        if p not in order:
            order.append(p)
    rank_of_pid = {p: i for i, p in enumerate(order)}
    out.sort(key=lambda o: (rank_of_pid[o[0]], o[1] != o[0], o[1]))
    return out


def find_uftrace_run(path):
    """Index a run given as uftrace data: ``(entries, rank_source, notes)``.

    Accepted layouts:

    * ``path`` holds uftrace data directories (one per MPI rank, e.g. ``ut.0``, ``ut.1`` or
      ``uftrace.data.3``): ranks come from the trailing number of each directory name
      (rank_source "dirname"); when a name has none, or two share one, processes are
      numbered 0.. by the pid of their first session (rank_source "pid-order").
    * ``path`` is itself one uftrace data directory: each process in it is a rank, numbered
      0.. by pid (rank_source "pid-order"; one process = rank 0).

    Returns None when ``path`` is neither.  Entries are sorted by (rank, thread).
    """
    path = os.fspath(path)
    notes = []
    if is_uftrace_dir(path):
        files = _thread_files(path)
        if not files:
            raise TraceFormatError(path, "uftrace data directory without <tid>.dat files")
        pids = []
        for pid, *_ in files:
            if pid not in pids:
                pids.append(pid)
        entries, tcount = [], {}
        for pid, tid, full, size in files:
            rank = pids.index(pid)
            t = tcount.get(rank, 0)
            tcount[rank] = t + 1
            entries.append(UftraceEntry(rank, t, full, path, size))
        if len(pids) > 1:
            notes.append(f"{len(pids)} processes in one uftrace data directory: ranks assigned "
                         f"by pid order ({', '.join(map(str, pids[:8]))}{' ...' if len(pids) > 8 else ''})")
        return sorted(entries, key=lambda e: (e.rank, e.thread)), "pid-order", notes
    try:
        subs = sorted(e for e in os.listdir(path) if os.path.isdir(os.path.join(path, e)))
    except OSError:
        return None
    dirs = [s for s in subs if is_uftrace_dir(os.path.join(path, s))]
    if not dirs:
        return None
    suffix = {s: _SUFFIX_RE.search(s) for s in dirs}
    by_name = all(suffix.values()) and len({int(m[1]) for m in suffix.values()}) == len(dirs)
    per_dir = {s: _thread_files(os.path.join(path, s)) for s in dirs}
    if by_name:
        ranks = {s: int(suffix[s][1]) for s in dirs}
        source = "dirname"
    else:
        def first_pid(s):
            f = per_dir[s]
            return (f[0][0] if f else float("inf"), s)
        ordered = sorted(dirs, key=first_pid)
        ranks = {s: i for i, s in enumerate(ordered)}
        source = "pid-order"
        why = ("some names do not end in a rank number" if not all(suffix.values())
               else "two directory names end in the same number")
        notes.append(f"ranks assigned by ascending pid ({why}): "
                     + ", ".join(f"{s}->{ranks[s]}" for s in ordered[:_MAX_NOTE_ITEMS])
                     + (" ..." if len(ordered) > _MAX_NOTE_ITEMS else ""))
    entries = []
    multi = []
    for s in dirs:
        files = per_dir[s]
        if not files:
            notes.append(f"{s}: uftrace data directory without <tid>.dat files (no traces)")
            continue
        if len({f[0] for f in files}) > 1:
            multi.append(s)
        for t, (pid, tid, full, size) in enumerate(files):
            entries.append(UftraceEntry(ranks[s], t, full, os.path.join(path, s), size))
    if multi:
        notes.append(f"{len(multi)} uftrace data director{'y holds' if len(multi) == 1 else 'ies hold'} "
                     f"several processes (the program forked): their threads are numbered one "
                     f"after the other ({', '.join(multi[:_MAX_NOTE_ITEMS])})")
    if not entries:
        raise TraceFormatError(path, "uftrace data directories hold no <tid>.dat files")
    ignored = [s for s in subs if s not in dirs]
    if ignored:
        notes.append(f"ignored {len(ignored)} subdirector{'y' if len(ignored) == 1 else 'ies'} that "
                     f"are not uftrace data: {', '.join(ignored[:_MAX_NOTE_ITEMS])}")
    return sorted(entries, key=lambda e: (e.rank, e.thread)), source, notes


# --------------------------------------------------------------------------- reading

def read_uftrace_thread(dat_path, data_dir=None, rank=0, thread=0):
    """One ``<tid>.dat`` file as a :class:`Trace` (``timestamps``: uint64 ns, one per
    event).  ``data_dir`` defaults to the file's directory."""
    dat_path = os.fspath(dat_path)
    data_dir = os.path.dirname(os.path.abspath(dat_path)) if data_dir is None else os.fspath(data_dir)
    m = _DAT_RE.match(os.path.basename(dat_path))
    if not m:
        raise TraceFormatError(dat_path, "not a uftrace thread file (<tid>.dat)")
    tid = int(m[1])
    meta = read_data_dir(data_dir)
    try:
        size = os.path.getsize(dat_path)
    except OSError:
        size = 0                      # read_bytes names what is wrong
    budget.check(dat_path, size + size // _RECORD * _BYTES_PER_RECORD, "reading it")
    data = read_bytes(dat_path, "thread file")
    stream = parse_records(data, dat_path)
    order, is_ret, times, stats = nest(stream)

    # names: resolve each distinct (session, address) of the entries once
    entry_rec = order[~is_ret]
    addrs = stream.addr[entry_rec]
    sessions = meta.sessions_of(meta.pid_of(tid))
    if len(sessions) <= 1:
        sess_idx = np.zeros(entry_rec.size, dtype=np.int64)
    else:
        starts = np.asarray([s.ts for s in sessions], dtype=np.uint64)
        sess_idx = np.maximum(np.searchsorted(starts, stream.time[entry_rec], side="right") - 1, 0)
    keys = (sess_idx.astype(np.uint64) << np.uint64(48)) | addrs
    uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    name_ids, names, id_of = np.empty(uniq.size, dtype=np.int32), [RETURN_NAME], {}
    modules = set()
    for u in np.argsort(first, kind="stable").tolist():       # ids by first appearance
        key = int(uniq[u])
        s = sessions[key >> 48] if sessions else None
        name = meta.resolve(s, key & 0xFFFFFFFFFFFF, modules)
        if name == RETURN_NAME:         # would read as returns wherever it is called
            raise TraceFormatError(dat_path, f"the function name {RETURN_NAME!r} is reserved (it "
                                             f"stands for a return)")
        if name not in id_of:
            id_of[name] = len(names)
            names.append(name)
        name_ids[u] = id_of[name]
    events = np.zeros(order.size, dtype=np.int32)
    events[~is_ret] = name_ids[inverse.reshape(-1)] if entry_rec.size else 0

    notes = [meta.symbol_notes[m] for m in sorted(modules) if m in meta.symbol_notes]
    base = os.path.basename(dat_path)
    if not stream.complete:
        notes.append(f"{base}: file ends inside a record at byte {stream.offset} of {len(data)} "
                     f"(recording cut short?); {stream.time.size} complete records read")
    if stream.lost:
        total = sum(c for _, c in stream.lost)
        notes.append(f"{base}: uftrace lost {total} record{'s' if total != 1 else ''} "
                     f"({len(stream.lost)} LOST marker{'s' if len(stream.lost) != 1 else ''}; "
                     f"buffer overrun): the trace has gaps")
    if stats["closed"] or stats["dropped"] or stats["mismatched"]:
        notes.append(f"{base}: call nesting repaired from the depth fields: {stats['closed']} call(s) "
                     f"closed whose exit was not recorded, {stats['dropped']} exit(s) without a "
                     f"recorded entry dropped, {stats['mismatched']} exit(s) naming another function")
    arr = np.empty(len(names), dtype=object)
    arr[:] = names
    return Trace(rank=int(rank), thread=int(thread), names=arr, events=events, source=dat_path,
                 complete=stream.complete, notes=notes, timestamps=times.astype(np.uint64),
                 ending=meta.ending_of(meta.pid_of(tid)))


# --------------------------------------------------------------------------- the format

def _detect(path, listing):
    if is_uftrace_dir(path):
        return "the directory is a uftrace data directory"
    count = sum(1 for name, kind in listing.items()
                if kind == "dir" and is_uftrace_dir(os.path.join(path, name)))
    return f"{count} data director{'ies' if count != 1 else 'y'}" if count else None


def _discover(path, listing):
    found = find_uftrace_run(path)
    if found is None:
        return None
    entries, source, notes = found
    refs = [TraceRef(e.rank, e.thread, e.dat, e.data_dir, e.size, "uftrace") for e in entries]
    return RunIndex(path, "uftrace", refs, source, notes)


FORMAT = Format(
    name="uftrace", title="uftrace", expected="uftrace data directories (uftrace record -d DIR.<rank>)",
    detect=_detect, discover=_discover,
    load=lambda ref, cache: read_uftrace_thread(ref.path, ref.info, ref.rank, ref.thread),
    recognises=is_uftrace_thread_file, load_file=read_uftrace_thread)
