"""Loop timing: how long loop iterations take, and which changed while the structure did not.

Why: DiffTrace compares structure only, so a rank whose loops run exactly as in the normal
run, only slower (AutomaDeD's timing faults: interference, a slow node, a delay injected
into a computation), leaves every JSM unchanged.  Where traces carry timestamps (uftrace,
OTF2), the NLR tells where every loop iteration starts, and the timestamps how long it
took.

Functional core: plain functions over numpy arrays; the MPI shell (``analysis``) runs
:func:`trace_timing` on each rank's traces and :func:`timing_view` (which merges the
rows and applies :func:`compare_runs`) on the root.

Measure.  The NLR of a trace expands exactly to its filtered event sequence, and one
iteration of a loop always expands to the same number of kept events, so the start of
every iteration of every loop instance (nested ones too) is a known position in that
sequence.  An instance of ``L^c`` spans from the first kept event of its first iteration
to the first kept event of its last one: ``c - 1`` whole iterations (start to start, so
the work between kept events, e.g. the computation between MPI calls under ``11.mpi``,
counts), without guessing where the last iteration ends.  A loop's *mean iteration time*
in a trace is the sum of its instances' spans over the sum of their ``c - 1``.

Two clocks.  Wall time, and time *outside MPI calls* (the trace's time minus the time some
MPI call was open, from the raw events with their returns; filtered-out calls still
count).  A slowed computation makes its own rank's outside-MPI time grow; the ranks that
exchange messages with it wait longer inside MPI calls, so only their wall time grows.
The two together tell the slow rank from the ranks it holds up (AutomaDeD keeps
computation and MPI calls as separate states for the same reason).

Rule (:func:`compare_runs`).  Loop ``L`` of trace (rank, thread) is flagged when
  1. its structure did not change: in both runs the trace has the same number of
     instances of ``L`` and the same total number of iterations of it; and, for wall
     time or for time outside MPI calls (``clock="both"``, the default; ``"wall"`` or
     ``"own"`` tests that clock only),
  2. its mean iteration time changed by a factor of at least ``min_ratio`` (default 2),
     slower or faster: ``max(f / n, n / f) >= min_ratio``;
  3. the change is beyond the normal run's variation of that loop across traces:
     ``|f - n| > k * 1.4826 * MAD`` (default k = 3), the MAD taken over the mean
     iteration times of ``L`` (same clock) in every trace of the normal run that has it
     (1.4826 * MAD estimates a standard deviation robustly; one slow trace cannot widen
     it; a loop that only one normal trace has has no spread, and the ratio decides).
Flags are ranked by the largest factor that passed, then by (rank, thread, loop).
Only one normal run is compared, so run-to-run noise that hits every trace alike (an
oversubscribed node) is not told from a fault: give the rule runs from quiet machines.
On noisy or oversubscribed nodes the wall clock is the first to suffer (a rank waits
for the CPU inside and outside MPI calls alike, and its partners wait on it), so
``clock="own"`` flags on the time outside MPI calls only (``analyze --timing-clock own``).
"""
import math
import re
from typing import NamedTuple

import numpy as np

from ... import config
from ...errors import DiffTraceError
from ..model.filters import CLASSES
from ...kernels.nlr import match_returns

MIN_RATIO = config.TIMING_MIN_RATIO
MAD_K = 3.0
MAD_SCALE = 1.4826          # MAD -> standard deviation of a normal distribution
#: which clocks the rule tests: the table columns behind each choice of ``clock``
CLOCKS = {"both": ("span_ns", "own_ns"), "wall": ("span_ns",), "own": ("own_ns",)}
DEFAULT_CLOCK = config.TIMING_CLOCK

#: columns of a timing table (one row per run, object, loop), all int64
COLUMNS = ("run", "object", "loop", "instances", "iterations", "periods", "span_ns", "own_ns")


class TimingFlag(NamedTuple):
    """One loop of one trace whose iteration time changed while its structure did not."""
    rank: int
    thread: int
    loop: int
    normal_ns: float        # mean iteration time, normal run
    faulty_ns: float        # mean iteration time, faulty run
    ratio: float            # faulty / normal (> 1: slower)
    iterations: int         # iterations of the loop in the trace (equal in both runs)
    same_nlr: bool          # the trace's whole NLR is identical in both runs
    own_normal_ns: float    # mean iteration time outside MPI calls, normal run
    own_faulty_ns: float    # the same, faulty run
    own_ratio: float        # faulty / normal, outside MPI calls

    def as_dict(self):
        return dict(self._asdict())


def change_factor(ratio):
    """How many times slower or faster a faulty / normal ratio is (>= 1)."""
    return max(ratio, 1.0 / ratio) if ratio > 0 else float("inf")


def waiting_mask(names):
    """Bool per function name: an MPI call (``mpi`` filter class; name 0, the return, is
    never one).  Time inside one is communication or waiting for another rank."""
    rx = re.compile(CLASSES["mpi"][0])
    return np.array([i > 0 and bool(rx.search(str(n))) for i, n in enumerate(names)], dtype=bool)


def own_clock(events, times, waiting):
    """Per event, the time (ns, int64) spent so far outside the calls ``waiting`` marks:
    the clock of a trace's own work.  ``events``: the raw events with returns (0);
    ``times``: their timestamps.  An interval between two events counts when no marked
    call is open at its start (nested marked calls, e.g. MPI_Send -> PMPI_Send, count once)."""
    events = np.ascontiguousarray(events, dtype=np.int32)
    times = np.asarray(times).astype(np.int64)
    if events.size == 0:
        return times.copy()
    closed = match_returns(events)           # entries: their own id; returns: the call closed, or -1
    marked = (closed >= 0) & waiting[np.maximum(closed, 0)]
    depth = np.cumsum(np.where(marked, np.where(events == 0, -1, 1), 0))
    return np.concatenate(([0], np.cumsum(np.diff(times) * (depth[:-1] == 0)))) + times[0]


def iteration_lengths(table):
    """Kept events in one iteration of every loop of ``table`` (int64, by loop number):
    what turns NLR positions into positions in the filtered sequence."""
    n = len(table)
    lengths = np.full(n, -1, dtype=np.int64)

    def length(loop):
        if lengths[loop] < 0:
            ids, counts = table.body(loop)
            lengths[loop] = sum(1 if i >= 0 else length(-int(i) - 1) * int(c)
                                for i, c in zip(ids.tolist(), counts.tolist()))
        return lengths[loop]

    for loop in range(n):
        length(loop)
    return lengths


def loop_instances(ids, counts, table, times, lengths=None):
    """Every loop instance of one NLR, nested ones included.

    ``ids``/``counts``: the NLR (loops as ``-id - 1``, numbered by ``table``); ``times``:
    the timestamps (ns) of the filtered events it expands to, one each.  Returns int64
    arrays (loop, count, start, span_ns) sorted by (start, loop): ``start`` is the
    position of the instance's first event in the filtered sequence, ``span_ns`` the time
    from its first iteration's start to its last one's (``count - 1`` iterations)."""
    ids = np.asarray(ids, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    times = np.asarray(times).astype(np.int64)
    lengths = iteration_lengths(table) if lengths is None else lengths
    loops = ids < 0
    tok_len = np.ones(ids.size, dtype=np.int64)
    tok_len[loops] = lengths[-ids[loops] - 1] * counts[loops]
    offsets = np.concatenate(([0], np.cumsum(tok_len)))
    if offsets[-1] != times.size:
        raise ValueError(f"the NLR expands to {offsets[-1]} events but {times.size} timestamps were given")
    parts = []
    body_loops = {}         # loop -> [(offset in one iteration, inner loop, count)]

    def inner_of(loop):
        if loop not in body_loops:
            b_ids, b_counts = table.body(loop)
            out, q = [], 0
            for i, c in zip(b_ids.tolist(), b_counts.tolist()):
                if i < 0:
                    out.append((q, -i - 1, c))
                    q += int(lengths[-i - 1]) * c
                else:
                    q += 1
            body_loops[loop] = out
        return body_loops[loop]

    def visit(loop, count, starts):
        step = lengths[loop]
        parts.append((np.full(starts.size, loop, np.int64), np.full(starts.size, count, np.int64), starts,
                      instance_spans(loop, count, starts, times, lengths)))
        inner = inner_of(loop)
        if inner:
            iters = (starts[:, None] + step * np.arange(count, dtype=np.int64)[None, :]).ravel()
            for q, sub, c in inner:
                visit(sub, c, iters + q)

    top = np.flatnonzero(loops)
    top = top[np.lexsort((top, counts[top], -ids[top]))]           # grouped by (loop, count)
    top_loop, top_count = -ids[top] - 1, counts[top]
    cuts = np.flatnonzero((np.diff(top_loop) != 0) | (np.diff(top_count) != 0)) + 1
    for group in np.split(np.arange(top.size), cuts) if top.size else []:
        visit(int(top_loop[group[0]]), int(top_count[group[0]]), offsets[top[group]])
    if not parts:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty.copy(), empty.copy(), empty.copy()
    loop_a, count_a, start_a, span_a = (np.concatenate(col) for col in zip(*parts))
    order = np.lexsort((loop_a, start_a))
    return loop_a[order], count_a[order], start_a[order], span_a[order]


def instance_spans(loop, count, start, clock, lengths):
    """Time on ``clock`` (one value per filtered event) from the first to the last
    iteration's start of each instance (loop, count, start) (scalars or arrays)."""
    clock = np.asarray(clock).astype(np.int64)
    start = np.asarray(start, dtype=np.int64)
    return clock[start + (np.asarray(count) - 1) * np.asarray(lengths)[loop]] - clock[start]


def instance_means(count, span_ns):
    """Mean iteration time (ns, float64) of each loop instance."""
    return np.asarray(span_ns, dtype=np.float64) / (np.asarray(count, dtype=np.int64) - 1)


def summarize(loop, count, span_ns):
    """Per loop id of one trace, from its instances: int64 arrays (loop, instances,
    iterations, periods, span_ns); mean iteration time = span_ns / periods."""
    loop = np.asarray(loop, dtype=np.int64)
    ids, inverse = np.unique(loop, return_inverse=True)
    n = ids.size
    inverse = inverse.reshape(-1)

    def total(values):
        return np.bincount(inverse, weights=None if values is None else values, minlength=n)

    count = np.asarray(count, dtype=np.int64)
    span = np.asarray(span_ns, dtype=np.int64)
    out = [ids, total(None).astype(np.int64)]
    for values in (count, count - 1, span):     # integer sums, exact (np.add.at keeps int64)
        acc = np.zeros(n, dtype=np.int64)
        np.add.at(acc, inverse, values)
        out.append(acc)
    return tuple(out)


def trace_loops(run, obj, ids, counts, table, times, lengths=None, own=None):
    """The timing rows of one trace: a dict of int64 arrays keyed by ``COLUMNS``.
    ``times``: timestamps of the filtered events; ``own``: the :func:`own_clock` at the
    same events (default: ``times``, i.e. nothing counted as waiting)."""
    lengths = iteration_lengths(table) if lengths is None else lengths
    loop, count, start, span = loop_instances(ids, counts, table, times, lengths)
    own_span = span if own is None else instance_spans(loop, count, start, own, lengths)
    loops, instances, iterations, periods, span_ns = summarize(loop, count, span)
    own_ns = summarize(loop, count, own_span)[4]
    n = loops.size
    return {"run": np.full(n, run, np.int64), "object": np.full(n, obj, np.int64), "loop": loops,
            "instances": instances, "iterations": iterations, "periods": periods, "span_ns": span_ns,
            "own_ns": own_ns}


def trace_timing(run, obj, ids, counts, table, events, timestamps, kept, waiting, lengths=None):
    """:func:`trace_loops` from a raw trace: ``events`` with returns and their
    ``timestamps``; ``kept``: the positions of the filtered events the NLR stands for
    (``filters.kept_positions``); ``waiting``: :func:`waiting_mask` of the names."""
    timestamps = np.asarray(timestamps)
    return trace_loops(run, obj, ids, counts, table, timestamps[kept], lengths,
                       own_clock(events, timestamps, waiting)[kept])


def merge_tables(parts):
    """One timing table from the rows of many traces (any order), sorted by (run, object,
    loop), so the result does not depend on which MPI rank computed what."""
    parts = [p for p in parts if p is not None]
    table = {c: np.concatenate([p[c] for p in parts] or [np.empty(0, np.int64)]).astype(np.int64)
             for c in COLUMNS}
    order = np.lexsort((table["loop"], table["object"], table["run"]))
    return {c: v[order] for c, v in table.items()}


def mean_ns(table, column="span_ns"):
    """Mean iteration time (ns) of every row of a timing table (``own_ns``: outside MPI)."""
    return table[column].astype(np.float64) / np.maximum(table["periods"], 1)


def normal_spread(table, column="span_ns"):
    """{loop: robust standard deviation (1.4826 * MAD) of its mean iteration times over
    the traces of the normal run that have it}."""
    sel = table["run"] == 0
    loops, means = table["loop"][sel], mean_ns(table, column)[sel]
    out = {}
    for loop in np.unique(loops).tolist():
        m = means[loops == loop]
        out[loop] = MAD_SCALE * float(np.median(np.abs(m - np.median(m))))
    return out


def check_rule(min_ratio=MIN_RATIO, clock=DEFAULT_CLOCK):
    """Raise DiffTraceError unless (``min_ratio``, ``clock``) is a usable rule: a finite
    ratio of at least 1 and a clock of :data:`CLOCKS`."""
    if clock not in CLOCKS:
        raise DiffTraceError(f"unknown timing clock {clock!r}; choose from {', '.join(CLOCKS)}")
    try:
        ok = math.isfinite(float(min_ratio)) and float(min_ratio) >= 1.0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise DiffTraceError(f"the timing ratio must be a number of at least 1 (got {min_ratio!r})")


def compare_runs(table, keys, same_nlr=None, min_ratio=MIN_RATIO, k=MAD_K, clock=DEFAULT_CLOCK):
    """The flagged loops (see the module docstring for the rule), ranked: a list of
    :class:`TimingFlag`.  ``keys``: (rank, thread) of each object; ``same_nlr``: optional
    bool per object, whether its whole NLR is identical in both runs (reported only);
    ``clock``: which clocks may flag (``both``, ``wall`` or ``own``; both are measured
    and reported whatever it is)."""
    check_rule(min_ratio, clock)
    tested = CLOCKS[clock]
    clocks = [(c in tested, mean_ns(table, c), normal_spread(table, c)) for c in ("span_ns", "own_ns")]
    rows = {}
    for i, (run, obj, loop) in enumerate(zip(table["run"].tolist(), table["object"].tolist(),
                                             table["loop"].tolist())):
        rows[(run, obj, loop)] = i
    flags = []
    for (run, obj, loop), i in rows.items():
        j = rows.get((1, obj, loop)) if run == 0 else None
        if j is None:
            continue
        if (table["instances"][i] != table["instances"][j] or table["iterations"][i] != table["iterations"][j]):
            continue                                        # the structure changed: not a timing fault
        measured, best = [], 0.0
        for used, means, spread in clocks:
            n, f = float(means[i]), float(means[j])
            ratio = max(f, 1.0) / max(n, 1.0)               # timestamps are whole ns: no division by 0
            measured += [n, f, ratio]
            if used and change_factor(ratio) >= min_ratio and abs(f - n) > k * spread.get(loop, 0.0):
                best = max(best, change_factor(ratio))
        if not best:
            continue
        rank, thread = keys[obj]
        flags.append((best, TimingFlag(int(rank), int(thread), int(loop), *measured[:3],
                                       int(table["iterations"][i]),
                                       bool(same_nlr[obj]) if same_nlr is not None else False, *measured[3:])))
    flags.sort(key=lambda x: (-x[0], x[1].rank, x[1].thread, x[1].loop))
    return [f for _, f in flags]


def format_ns(ns):
    """A duration for people: 850 ns, 35.0 us, 1.25 ms, 2.00 s."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            value = ns / scale
            return f"{value:.{2 if abs(value) < 10 else 1 if abs(value) < 100 else 0}f} {unit}"
    return f"{ns:.0f} ns"


def timing_view(parts, keys, same_nlr=None, min_ratio=MIN_RATIO, k=MAD_K, clock=DEFAULT_CLOCK):
    """What the analysis keeps per (filter, K): {"table": merged timing table, "flags":
    ranked TimingFlags, "rule": {"min_ratio", "k", "clock"}}.  ``parts``: per MPI rank,
    the :func:`trace_loops` rows of its traces; ``same_nlr``: per object, whether its NLR
    is identical in both runs."""
    table = merge_tables([rows for part in parts for rows in part])
    flags = compare_runs(table, keys, same_nlr, min_ratio, k, clock)
    return {"table": table, "flags": flags,
            "rule": {"min_ratio": float(min_ratio), "k": float(k), "clock": str(clock)}}
