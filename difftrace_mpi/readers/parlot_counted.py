"""Automatic leaves of our tracer: functions counted, not recorded (functional core of the reader).

By default pin/ turns a tiny hot function into an *automatic leaf* during the run: once
some thread has called it more than N times in a row without a recorded callee, its calls
are counted, not recorded, in every thread of the process (pin/README.md, "Automatic
leaves").  Its first calls, before that moment, are in the trace; the moment depends on the
run (thread timing, a run cut short).  ``<prefix>.<pid>.counted`` names the process's
automatic leaves, one a line: ``calls<TAB>counted<TAB>name`` (calls: every call in the
process; counted: those not in the traces), after ``#`` comment lines.

So that two runs compare as if the same leaves had been counted from the start, the reader
leaves out the calls of every function that *any* run of the analysis counted (the union
over the runs' ``.counted`` files), in both runs: a trace with the first N calls of a leaf
and one without them read the same.  The union is a set of names fixed before the first
trace is read:

* the engine, which knows every run, puts ``counted_leaves(paths).names`` into the cache
  the reads share, under :data:`CACHE_KEY` (on every rank the same set);
* failing that, the union over the run directories whose names were asked for through that
  cache (``Format.names``: the engine asks for every trace's names, both runs, before it
  reads any), and always over the trace's own run directory.

A call of a left-out function is its entry and the return that closes it; a call it made
(a path it had not taken when it became a leaf) stays, under its caller, as the tracer
records it after that moment.  One exception keeps a livelock visible: a thread whose
trace ends in at least ``config.LIVELOCK_REPEATS`` calls of left-out functions, with
nothing else recorded after them (it called a leaf in a loop until it was killed), keeps
those last calls.
"""
import os
from dataclasses import dataclass

import numpy as np

from .. import config
from ..fsutil import read_whole_file

SUFFIX = ".counted"
CACHE_KEY = ("parlot", "counted leaves")          # frozenset of names (the engine's, or the union)
DIRS_KEY = ("parlot", "run directories")          # run directories seen through the cache, in order
_DIR_KEY = "parlot counted of"                    # (_DIR_KEY, directory) -> {stem: {name: (calls, counted)}}
MAX_BYTES = 16 * 1024 * 1024                      # a .counted file names at most 65534 functions
AUTO_NOTE = ("traced with automatic leaves (the tracer's default): tiny hot functions were counted, not "
             "recorded; the calls of every function a compared run counted (.counted files) are left out of both")


def parse_counted(text):
    """``{name: (calls, counted)}`` of a ``.counted`` file's text (lines that do not parse are
    skipped: a file cut short by a kill still names its complete lines)."""
    out = {}
    for line in text.split("\n"):
        if not line or line.startswith("#"):
            continue
        calls, tab, rest = line.partition("\t")
        counted, tab2, name = rest.partition("\t")
        if not (tab and tab2 and name and calls.isdigit() and counted.isdigit()):
            continue
        out[name.rstrip("\r")] = (int(calls), int(counted))
    return out


def read_counted(path):
    """:func:`parse_counted` of one file; {} when it cannot be read or is oversized."""
    try:
        if os.path.getsize(path) > MAX_BYTES:
            return {}
        return parse_counted(read_whole_file(path).decode("utf-8", errors="surrogateescape"))
    except OSError:
        return {}


def run_counted(directory, cache=None):
    """``{process stem: {name: (calls, counted)}}`` of a run directory's ``.counted`` files
    (``stem``: ``<prefix>.<pid>``); read once per directory when ``cache`` is given."""
    key = (_DIR_KEY, os.path.abspath(str(directory)))
    if cache is not None and key in cache:
        return cache[key]
    found = {}
    try:
        with os.scandir(directory) as it:
            names = sorted(e.name for e in it if e.name.endswith(SUFFIX) and not e.name.startswith("."))
    except OSError:
        names = []
    for name in names:
        path = os.path.join(str(directory), name)
        if os.path.isfile(path):
            found[name[: -len(SUFFIX)]] = read_counted(path)
    if cache is not None:
        cache[key] = found
    return found


def _rank_of(directory, stem):
    try:
        text = read_whole_file(os.path.join(str(directory), stem + ".rank")).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else stem
    except OSError:
        return stem


def _totals(directory):
    """{rank (or stem): {name: calls}} of a run."""
    return {_rank_of(directory, stem): {name: calls for name, (calls, _) in leaves.items()}
            for stem, leaves in run_counted(directory).items()}


@dataclass(frozen=True)
class CountedLeaves:
    names: frozenset        # every function any of the runs counted: left out of all of them
    notes: list             # the counts that differ between the first run and another


def counted_leaves(paths, max_notes=20):
    """The automatic leaves of the runs an analysis compares (``paths``: the normal run
    first, then the faulty run and any more normal runs): the union of their names, and
    notes on the processes whose calls of a counted function differ from the first run's
    (a bug inside a hot leaf, which the traces no longer show, shows in its count)."""
    paths = [str(p) for p in paths if p is not None]
    names = set()
    for p in paths:
        for leaves in run_counted(p).values():
            names.update(leaves)
    notes = []
    if len(paths) > 1 and names:
        base = _totals(paths[0])
        for p in paths[1:]:
            other = _totals(p)
            for rank in sorted(set(base) & set(other), key=str):
                for name in sorted(set(base[rank]) | set(other[rank])):
                    a, b = base[rank].get(name), other[rank].get(name)
                    if a is not None and b is not None and a != b:
                        notes.append(f"rank {rank}: the automatic leaf {name} was called {a:,} times in "
                                     f"{paths[0]} and {b:,} times in {p} (its calls are counted, not in the "
                                     f"traces compared)")
        if len(notes) > max_notes:
            notes = notes[:max_notes] + [f"... and {len(notes) - max_notes} more differing leaf call counts "
                                         f"(the .counted files)"]
    return CountedLeaves(frozenset(names), notes)


def note_directory(cache, directory):
    """Remember a run directory read through ``cache`` (its traces' names were asked for)."""
    if cache is None:
        return
    d = os.path.abspath(str(directory))
    dirs = cache.setdefault(DIRS_KEY, [])
    if d not in dirs:
        dirs.append(d)


def drop_set(cache, directory):
    """The names whose calls are left out of a trace of ``directory``: the engine's set
    (``cache[CACHE_KEY]``), else the union over the directories seen through the cache and
    this one, fixed at the first call."""
    if cache is None:
        return frozenset(n for leaves in run_counted(directory).values() for n in leaves)
    got = cache.get(CACHE_KEY)
    if got is None:
        note_directory(cache, directory)
        got = cache[CACHE_KEY] = frozenset(n for d in cache[DIRS_KEY]
                                           for leaves in run_counted(d, cache).values() for n in leaves)
    return got


def drop_mask(names, drop):
    """Per function id of a names array: True where its calls are left out (never id 0)."""
    if not drop:
        return None
    mask = np.fromiter((n in drop for n in names.tolist()), dtype=bool, count=len(names))
    mask[0] = False
    return mask if mask.any() else None


def drop_calls(events, mask, folds=None, keep_tail=None):
    """``events`` (ids, 0 = return) without the calls of the ids ``mask`` marks, entries and
    the returns that close them: ``(events, folds, dropped)``.  ``folds`` (rows of position,
    ...) get their positions moved with the events.  A last event that enters a left-out
    function stays (the thread died in it).  A trailing run of at least
    ``keep_tail`` (default ``config.LIVELOCK_REPEATS``) left-out calls after the last event
    kept is kept (a thread that called a leaf in a loop until it was killed)."""
    keep_tail = config.LIVELOCK_REPEATS if keep_tail is None else keep_tail
    ev = np.asarray(events)
    n = len(ev)
    if mask is None or n == 0:
        return events, folds, 0
    if int(ev.min()) < 0 or int(ev.max()) >= len(mask):
        raise ValueError(f"function ids 0..{len(mask) - 1} expected, found {int(ev.min())}..{int(ev.max())}")
    hit = mask[ev]
    starts = np.flatnonzero(hit)
    if not len(starts):
        return events, folds, 0
    gone = hit
    nxt = starts + 1
    leaf = nxt < n
    leaf[leaf] = ev[nxt[leaf]] == 0
    gone[nxt[leaf]] = True
    rest = starts[~leaf]
    if len(rest):               # calls with callees: the first return at their level closes them
        is_call = ev != 0
        depth = np.cumsum(np.where(is_call, 1, -1).astype(np.int32), dtype=np.int32)
        at = depth[rest]                        # the level of each such call (depth after its entry)
        for level in np.unique(at).tolist():
            returns = np.flatnonzero(~is_call & (depth == level - 1))
            opened = rest[at == level]
            k = np.searchsorted(returns, opened)
            ok = k < len(returns)
            gone[returns[k[ok]]] = True
    if ev[-1] != 0 and gone[-1]:
        gone[-1] = False        # the thread ended inside a leaf (a fault there): its last call stays
    kept = np.flatnonzero(~gone)
    last = int(kept[-1]) if len(kept) else -1
    tail = starts[starts > last]
    if len(tail) >= keep_tail:   # a livelock on leaf calls: its last calls stay
        p = int(tail[0])
        step = np.where(ev[p:] != 0, 1, -1)
        run = np.cumsum(step)
        low = np.minimum.accumulate(np.concatenate(([0], run[:-1])))
        older = (step < 0) & (run < low)        # a return closing a call opened before p
        gone[p:] = older
    dropped = int(np.count_nonzero(gone))
    if not dropped:
        return events, folds, 0
    out = np.ascontiguousarray(ev[~gone])
    if folds is not None and len(folds):
        folds = np.array(folds, copy=True)
        before = np.concatenate(([0], np.cumsum(gone)))
        pos = np.clip(folds[:, 0], 0, n)
        folds[:, 0] = pos - before[pos]
    return out, folds, dropped


def shared_cache(paths, leaves=None):
    """A cache for ``readers.load_trace`` (and ``names_of``) whose ParLOT reads leave out the
    calls of every automatic leaf of the runs ``paths`` (all the runs compared: normal,
    faulty, more normal runs), whichever run a trace belongs to; ``leaves``: their
    :func:`counted_leaves` if computed already (e.g. on one rank and broadcast)."""
    leaves = counted_leaves(paths) if leaves is None else leaves
    return {CACHE_KEY: leaves.names}
