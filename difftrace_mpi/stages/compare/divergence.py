"""Where each faulty trace first leaves its normal twin, and how.

The normal and faulty traces of one (rank, thread) usually sit on different MPI ranks,
so they are compared through hashes instead of being moved.  First each trace's length
and hash: equal ones are done.  For the others the search narrows an interval of events
that holds the first difference: both sides cut it into the same ``DIVERGENCE_BLOCKS``
blocks and hash each; the first block whose hashes differ is the next interval, until it
is one event wide (a few rounds: 32 blocks a round find one event in 100 M in 6).  Exact
up to a 64-bit hash collision per block.

Then each side describes its trace at that position (``context``): the calls open there,
the loops and iterations holding it (``calltree.locate``), a logical clock (MPI
collectives entered before it: every rank of an SPMD program enters the same ones in the
same order, so the clock orders positions across ranks without timestamps), and the next
few events.  ``classify`` turns the two sides' contexts into what happened: the faulty
trace stopped on the normal path, ended early, went on past the normal end, made an extra
call, missed one, made a different call, or the same call with other arguments.

Plain functions over numpy arrays: ``digests``, ``probe_hashes`` and ``contexts`` run on
every MPI rank over its own traces; ``Search`` and ``classify`` on the root.
"""
import numpy as np

from ... import config
from ...kernels.nlr import hash_events, match_returns
from ...model import stored_events
from ..model import calltree

SAME, STOPPED, ENDED, CONTINUED, EXTRA, MISSING, DIFFERENT, ARGUMENTS, NEW, LOST, NOISE, LIVELOCK, CUT = (
    "same", "stopped", "ended", "continued", "extra", "missing", "different", "arguments", "new", "lost", "noise",
    "livelock", "cut")
# CUT: the normal trace was cut short (its run killed, its file cut) where the faulty one
# goes on: what follows has nothing to be compared with, so it is no difference
# statuses of a trace that left the normal path (a possible cause), not one that only stopped on it
LEFT_PATH = (ENDED, CONTINUED, EXTRA, MISSING, DIFFERENT, ARGUMENTS, NEW, LOST, LIVELOCK)


def _events(events):
    return stored_events(events)


def digests(gevents, runs, objs, hashes=None, shared=None):
    """This shard's (runs, objs, lengths, hashes uint64, shared) of whole traces (``hashes``:
    those already computed, if any; ``shared``: per trace, how many first events it shares
    with the other run's trace of its object where the shard knows it, else -1; None:
    nowhere)."""
    lengths = np.array([len(e) for e in gevents], dtype=np.int64)
    if hashes is None:
        hashes = np.array([hash_events(_events(e)) for e in gevents], dtype=np.uint64)
    shared = np.full(len(gevents), -1, dtype=np.int64) if shared is None else np.asarray(shared, dtype=np.int64)
    return np.asarray(runs, dtype=np.int64), np.asarray(objs, dtype=np.int64), lengths, hashes, shared


def block_edges(lo, hi, blocks=config.DIVERGENCE_BLOCKS):
    """Start positions of the blocks of [lo, hi) and the block size."""
    size = max(1, -(-(int(hi) - int(lo)) // int(blocks)))
    return np.arange(int(lo), int(hi), size, dtype=np.int64), size


def probe_hashes(gevents, runs, objs, probes):
    """For each local trace of a probed object (``probes``: objs, lo, hi arrays), the
    hashes of the blocks of its events [lo, hi).  Returns (runs, objs, offsets, hashes)."""
    interval = {o: (a, b) for o, a, b in zip(*(np.asarray(p).tolist() for p in probes))}
    out_runs, out_objs, pieces = [], [], []
    for ev, run, obj in zip(gevents, np.asarray(runs).tolist(), np.asarray(objs).tolist()):
        if obj not in interval:
            continue
        lo, hi = interval[obj]
        starts, size = block_edges(lo, hi)
        ev = _events(ev)
        pieces.append(np.array([hash_events(ev, a, min(a + size, hi)) for a in starts.tolist()], dtype=np.uint64))
        out_runs.append(run)
        out_objs.append(obj)
    offsets = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in pieces], out=offsets[1:])
    hashes = np.concatenate(pieces) if pieces else np.empty(0, np.uint64)
    return np.array(out_runs, dtype=np.int64), np.array(out_objs, dtype=np.int64), offsets, hashes


class Search:
    """The root's state of the first-difference search over all objects."""

    def __init__(self, parts, n_objects):
        self.length = np.full((2, n_objects), -1, dtype=np.int64)     # -1: no trace in that run
        self.hash = np.zeros((2, n_objects), dtype=np.uint64)
        known = np.full(n_objects, -1, dtype=np.int64)
        for runs, objs, lengths, hashes, shared in parts:
            self.length[runs, objs] = lengths
            self.hash[runs, objs] = hashes
            np.maximum.at(known, objs, shared)
        both = (self.length >= 0).all(axis=0)
        self.differs = ~(both & (self.length[0] == self.length[1]) & (self.hash[0] == self.hash[1]))
        self.differs &= (self.length >= 0).any(axis=0)
        self.point = np.full(n_objects, -1, dtype=np.int64)
        shortest = np.where(both, self.length.min(axis=0), 0)
        self.lo = np.zeros(n_objects, dtype=np.int64)
        self.hi = shortest.copy()
        self.point[self.differs & (shortest == 0)] = 0
        # where a shard compared the two traces event by event already, no block is hashed
        self.point[self.differs & (known >= 0)] = known[self.differs & (known >= 0)]
        self.rounds = 0

    def probes(self):
        """(objs, lo, hi) of the objects still searched: every rank hashes their blocks."""
        open_ = np.flatnonzero(self.differs & (self.point < 0))
        return open_, self.lo[open_], self.hi[open_]

    def advance(self, parts):
        """One round: every shard's ``probe_hashes`` narrow each open interval; returns
        the next probes."""
        blocks = {}
        for runs, objs, offsets, hashes in parts:
            for i, (run, obj) in enumerate(zip(runs.tolist(), objs.tolist())):
                blocks[(run, obj)] = hashes[offsets[i]:offsets[i + 1]]
        for obj in self.probes()[0].tolist():
            normal, faulty = blocks[(0, obj)], blocks[(1, obj)]
            starts, size = block_edges(self.lo[obj], self.hi[obj])
            differ = np.flatnonzero(normal != faulty)
            if not len(differ):             # the shorter trace is the start of the longer one
                self.point[obj] = self.hi[obj]
            elif size == 1:
                self.point[obj] = starts[differ[0]]
            else:
                self.lo[obj] = starts[differ[0]]
                self.hi[obj] = min(self.lo[obj] + size, self.hi[obj])
        self.rounds += 1
        return self.probes()

    def lone(self):
        """The differing objects the normal run has no trace of (its faulty trace is new)."""
        return np.flatnonzero(self.differs & (self.length[0] < 0))

    def points(self):
        """(objs, positions) of every object whose traces differ: the first event where
        they do (0 when one run has no trace or an empty one)."""
        objs = np.flatnonzero(self.differs)
        return objs, self.point[objs]


def context(gevents, local, maps, position, K=config.CALLTREE_K, window=config.DIVERGENCE_WINDOW, where=True,
            faulty=False, memo=None, before=None):
    """One trace described at ``position``: see the module doc.  ``local``: this trace's
    index in ``gevents``; ``maps``: ``calltree.id_maps`` of the global names.  ``where``
    False: without the call-tree view (the other side's is used); ``faulty``: also the
    repetition the trace ends in, if any (``repeating_tail``); ``memo``: the call-tree
    levels already scanned (``calltree.frame_children``); ``before``: (calls, collective
    calls) before ``position``, where the other run's trace counted them (the two share
    every event before their first difference): only the events after it are read."""
    plain, collective, _, _ = maps
    ev = gevents[local]
    position = int(position)
    scanned = None
    if position < 0:        # (no search gives one) as the slices read it
        clock, calls_before = 0, int(np.count_nonzero(ev[:position]))
        calls = calls_before + int(np.count_nonzero(ev[position:]))
        clock_end = calltree.count_before(ev, collective, len(ev))
    elif where:             # one pass: entries and collectives before the position and in all, and the call levels
        (calls_before, calls, clock, clock_end), scanned = calltree.position_counts(ev, collective, position, True)
    elif before is not None:
        calls_before, clock = before
        _, calls_after, _, clock_after = calltree.position_counts(ev[position:], collective, 0)
        calls, clock_end = calls_before + calls_after, clock + clock_after
    else:
        calls_before, calls, clock, clock_end = calltree.position_counts(ev, collective, position)
    returns = calls < len(ev)
    return {"length": len(ev), "position": position,
            "clock": clock,
            "clock_end": clock_end,
            "calls_before": calls_before,
            "calls": calls,
            "where": calltree.locate(ev, position, plain, K, memo, returns, scanned) if where else None,
            "next": np.asarray(ev[position:position + window], dtype=np.int32),
            "siblings": sibling_calls(ev, position) if returns else None,
            "tail": repeating_tail(ev, position) if faulty else None,
            "returns": returns}


def sibling_calls(events, position, count=config.DIVERGENCE_SIBLINGS, limit=config.DIVERGENCE_SCAN):
    """The next ``count`` calls made at the level of ``position`` (in the call open there),
    each as a whole with its callees: (ids, hashes of their events, returned flags, end),
    ``end`` "return" when that call returns after them, "end" when the trace ends there,
    "more" otherwise.  A call still open where the trace ends (or beyond ``limit`` events)
    has returned False.  So a skipped call with callees is one missing item, named by
    itself, not by its first callee."""
    ev = stored_events(events)
    n, size = len(ev), 4096
    while True:
        hi = min(n, position + size)
        seg = np.asarray(ev[position:hi])
        depth = np.cumsum(np.where(seg != 0, 1, -1))       # depth after each event, relative
        out_of_frame = np.flatnonzero(depth < 0)
        stop = int(out_of_frame[0]) if len(out_of_frame) else len(seg)
        starts = np.flatnonzero((seg[:stop] != 0) & (depth[:stop] == 1))[:count]
        ends = np.flatnonzero((seg[:stop] == 0) & (depth[:stop] == 0))
        closing = np.searchsorted(ends, starts)
        complete = closing < len(ends)
        settled = complete.all() and (len(starts) == count or stop < len(seg) or hi == n)
        if settled or hi == n or size >= limit:
            break
        size *= 4
    ids, hashes = [], []
    for s_, c, done in zip(starts.tolist(), closing.tolist(), complete.tolist()):
        e = int(ends[c]) + 1 if done else stop
        ids.append(int(seg[s_]))
        hashes.append(hash_events(ev, position + s_, position + e))
    end = "return" if stop < len(seg) and len(starts) < count else ("end" if hi == n and len(starts) < count
                                                                     else "more")
    return {"ids": ids, "hashes": hashes, "returned": complete.tolist(), "end": end}


def repeating_tail(events, lo, longest=config.LIVELOCK_PERIOD, last=4096, chunk=1 << 22):
    """How the trace ends when it ends repeating one short unit: (period, start) with the
    repetition holding from ``start`` (not before ``lo``) to the end, else None."""
    ev = stored_events(events)
    n = len(ev)
    w = min(last, n - lo)
    if w < 4:
        return None
    seg = np.asarray(ev[n - w:])
    period = next((p for p in range(1, min(longest, w // 2) + 1) if np.array_equal(seg[p:], seg[:-p])), None)
    if period is None:
        return None
    start = n - w
    while start > lo:
        a = max(lo, start - chunk)
        bad = np.flatnonzero(np.asarray(ev[a:start]) != np.asarray(ev[a + period:start + period]))
        if len(bad):
            start = a + int(bad[-1]) + 1
            break
        start = a
    return period, max(start, lo)


def contexts(gevents, runs, objs, objects, points, maps, K=config.CALLTREE_K, lone=(), repeated=None):
    """This shard's contexts of the traces of every object in ``points`` (objs,
    positions), both runs: [(run, obj, context)].  ``repeated``: per trace, the events
    of the repetition it ends in that were summarised while read (``Trace.repeated_at_end``).  The call-tree view is the normal
    trace's (its loops are complete); a faulty trace gets one only when it has no normal
    twin (``lone``).  Worker threads also get their position on their process's clock
    and the main thread's call-tree view of it (``calltree.regions_in_main``; a
    process's threads share a shard)."""
    at = dict(zip(np.asarray(points[0]).tolist(), np.asarray(points[1]).tolist()))
    lone = set(np.asarray(lone).tolist())
    runs, objs = np.asarray(runs).tolist(), np.asarray(objs).tolist()
    local_of = {(r, objects[o]): i for i, (r, o) in enumerate(zip(runs, objs))}
    out, memo = [], {}      # a process's main thread is located for itself and for its workers
    counted = {}            # obj -> (calls, collective calls) before its point, from its normal trace
    for i in sorted(range(len(runs)), key=lambda i: runs[i]):      # normal traces first
        run, obj = runs[i], objs[i]
        if obj not in at:
            continue
        where = run == 0 or obj in lone
        ctx = context(gevents, i, maps, at[obj], K, where=where, faulty=run == 1, memo=memo,
                      before=None if where else counted.get(obj))
        if run == 0 and 0 <= at[obj] <= ctx["length"]:
            counted[obj] = (ctx["calls_before"], ctx["clock"])
        ctx["repeated"] = 0 if repeated is None else int(repeated[i])
        rank, thread = objects[obj]
        if thread != 0:
            # an entry-only worker trace has no top-level calls to match with the main
            # thread's region starts: its place on the process's clock is unknown
            main = local_of.get((run, (rank, 0))) if ctx["returns"] else None
            start, end = ((None, None) if main is None else
                          calltree.regions_in_main(gevents[i], gevents[main], maps[3], [at[obj], len(gevents[i])],
                                                   memo))
            ctx["process_clock"], ctx["process_clock_end"] = (
                None if p is None else calltree.count_before(gevents[main], maps[1], p, memo) for p in (start, end))
            # where the main thread was when it opened that region: its time step
            ctx["main_where"] = None if start is None or not where else \
                calltree.locate(gevents[main], start, maps[0], K, memo)
        else:
            ctx["process_clock"], ctx["process_clock_end"] = ctx["clock"], ctx["clock_end"]
        out.append((i, (run, obj, ctx)))
    return [item for _, item in sorted(out, key=lambda pair: pair[0])]      # in the shard's order


def without_calls(events, drop):
    """A trace without the calls of the functions ``drop`` marks (bool per global id):
    their entries and the returns that close them (a leaf call leaves no trace)."""
    if not drop.any():
        return events
    closes = match_returns(stored_events(events))
    return events[~drop[np.maximum(closes, 0)] | (closes < 0)]


def calls_at_differences(points, contexts, plain):
    """Plain ids of the calls at the first differences of pairs of traces (``classify``:
    the calls one side made more, or the two made instead of each other), from
    ``contexts`` gathered over the shards."""
    by_key = {(run, obj): ctx for part in contexts for run, obj, ctx in part}
    found = set()
    for obj in points[0].tolist():
        _, one, other = classify(by_key.get((0, obj)), by_key.get((1, obj)), plain, stopped=False)
        found.update(int(plain[e]) for e in one + other)    # the calls one run made more, or instead
    return found


def _entries(events):
    return [int(e) for e in events if e != 0]


def _realigns(shifted, other, minimum=4, span=8):
    """Whether ``shifted`` continues as ``other`` begins (on ``span`` events or as many as
    both hold, at least ``minimum`` unless one of them ends): a local insertion or skip,
    whatever comes later."""
    m = min(len(shifted), len(other), span)
    if m == 0:
        return len(shifted) == len(other)
    return bool(np.array_equal(shifted[:m], other[:m])) and (m >= minimum or m in (len(shifted), len(other)))


def classify(normal, faulty, plain, stopped, normal_cut=False):
    """What happened where a faulty trace first differs: (status, normal ids, faulty ids):
    the calls (global ids) the normal made there and the faulty made instead, each a
    short list.  ``normal``/``faulty``: contexts (None when that run has no trace);
    ``stopped``: the faulty trace stopped early (hung, killed or crashed); ``normal_cut``:
    the normal trace is incomplete (cut short), so where it ends is no end of the run.  With returns,
    whole calls at the level of the difference are compared (``sibling_calls``), so a
    skipped or added call is named itself, not by its callees."""
    if faulty is None:
        return LOST, _entries(normal["next"])[:1], []
    if normal is None:
        return NEW, [], _entries(faulty["next"])[:1]
    n_next, f_next = normal["next"], faulty["next"]
    if not len(f_next):
        # the faulty trace is the start of the normal one
        return (STOPPED if stopped else ENDED), _entries(n_next)[:1], []
    if not len(n_next):
        return (CUT if normal_cut else CONTINUED), [], _entries(f_next)[:1]
    if stopped and livelock(faulty) is not None:
        period, start = faulty["tail"]
        return LIVELOCK, _entries(n_next)[:1], _entries(f_next[max(0, start - faulty["position"]):][:period])[:3]
    if normal.get("siblings") and faulty.get("siblings"):
        found = _sibling_difference(normal["siblings"], faulty["siblings"], plain)
        if found:
            return found
    a, b = int(n_next[0]), int(f_next[0])
    # a call skipped or added exactly (its neighbours unchanged) before an argument change:
    # a skipped MPI_Isend to one neighbour must not read as the next Isend's arguments
    found = _shifted(n_next, f_next, n_next, f_next, limit=_EXACT_SHIFT)
    if found:
        return found
    n_plain, f_plain = plain[n_next], plain[f_next]
    same_call = bool(a and b and plain[a] == plain[b])
    if same_call and b not in n_next[1:_EXACT_SHIFT + 1].tolist():
        return ARGUMENTS, [a], [b]          # a call the normal run did not make there: its arguments changed
    # realign on plain names: a skipped MPI_Isend also changes the next MPI_Waitall's count
    found = _shifted(n_plain, f_plain, n_next, f_next)
    if found:
        return found
    if same_call:
        return ARGUMENTS, [a], [b]
    return DIFFERENT, _entries(n_next)[:1], _entries(f_next)[:1]


def livelock(ctx, repeats=config.LIVELOCK_REPEATS):
    """(period, repetitions) when a faulty trace's context shows it ending in a long
    repetition that starts at its first difference (within two periods), else None."""
    tail = ctx.get("tail")
    if not tail:
        return None
    period, start = tail
    reps = (ctx["length"] - start + ctx.get("repeated", 0)) // period
    if start > ctx["position"] + 2 * period or reps < repeats:
        return None
    return period, reps


_RETURN = -1        # the token of the calling frame's return in a sibling sequence


def _sibling_tokens(sib, key):
    out = [int(key(i)) for i in sib["ids"]]
    return out + ([_RETURN] if sib["end"] == "return" else [])


def _runs_on(sib):
    """Whether more calls may follow the listed ones (the list was cut, or the trace
    stopped inside its last call): running out of them is then no end."""
    return sib["end"] == "more" or (sib["end"] == "end" and not all(sib["returned"]))


def _sibling_difference(normal, faulty, plain):
    """EXTRA, MISSING or ARGUMENTS over whole calls at one level (see ``classify``), or
    None when the calls do not realign (then the events decide)."""
    n_ids, f_ids = normal["ids"], faulty["ids"]
    open_ = (_runs_on(normal), _runs_on(faulty))
    exact = (_sibling_tokens(normal, lambda i: i), _sibling_tokens(faulty, lambda i: i))
    found = _shifted_calls(*exact, n_ids, f_ids, open_, limit=3)
    if found:
        return found
    # the same call with other arguments, unless the normal run makes that very call next
    # (then one call was skipped and the next one's arguments follow: a Waitall's count)
    if n_ids and f_ids and plain[n_ids[0]] == plain[f_ids[0]] and f_ids[0] not in n_ids[1:]:
        return ARGUMENTS, n_ids[:1], f_ids[:1]
    names = (_sibling_tokens(normal, lambda i: plain[i]), _sibling_tokens(faulty, lambda i: plain[i]))
    return _shifted_calls(*names, n_ids, f_ids, open_)


def _calls_realign(shifted, other, shifted_open, other_open, span=4):
    m = min(len(shifted), len(other), span)
    if shifted[:m] != other[:m]:
        return False
    # fewer than two calls compared: only where a side really ends (its caller returns)
    return m >= 2 or (m == len(shifted) and not shifted_open) or (m == len(other) and not other_open)


def _shifted_calls(n_seq, f_seq, n_ids, f_ids, open_, limit=None):
    """EXTRA or MISSING with the whole calls, when leaving out the first calls of one side
    makes it go on as the other (``_shifted`` over calls: ``_calls_realign``)."""
    return _shifted(n_seq, f_seq, n_ids, f_ids, limit,
                    realigns=lambda shifted, other, side: _calls_realign(shifted, other, open_[side],
                                                                         open_[1 - side]),
                    calls=lambda ids: list(ids)[:3])


_EXACT_SHIFT = 6        # events of an exactly skipped or added call (with its callees)


def _shifted(n_seq, f_seq, n_next, f_next, limit=None, realigns=lambda shifted, other, side: _realigns(shifted, other),
             calls=lambda events: _entries(events)[:3]):
    """EXTRA or MISSING with the calls, when skipping the first items of one side makes it
    continue as the other (smallest shift first, within ``limit``), else None.
    ``realigns(shifted, other, side)`` tells (side 1: the faulty one shifted); ``calls``
    names the items left out (events: their entries)."""
    longest = max(len(n_seq), len(f_seq)) if limit is None else min(limit + 1, max(len(n_seq), len(f_seq)))
    for shift in range(1, longest):
        if shift < len(f_seq) and realigns(f_seq[shift:], n_seq, 1):
            return EXTRA, [], calls(f_next[:shift])
        if shift < len(n_seq) and realigns(n_seq[shift:], f_seq, 0):
            return MISSING, calls(n_next[:shift]), []
    return None
