"""A verdict from the failed run alone (issue 26): no normal run, the norm is the run itself.

Kinds of evidence, each one that a correct run does not give:

* **Collectives across ranks.**  Every rank enters the collectives of ``MPI_COMM_WORLD``
  in the same order with the same significant arguments (operation, root, count and type
  where MPI requires them equal).  The first collective at which a few ranks entered
  another call, or the same call with other arguments, than the rest names them.
* **Messages across ranks.**  Over the whole run, a send that no rank receives with that
  peer and tag (a wrong peer or tag on the sending side), a receive for a source and tag
  nobody sends it (the receiving side), and the sender that MPI names in a truncation
  error when it had changed that message's arguments (``message_evidence``).
* **Time steps against peers and against the rank's own steady state.**  Per thread, its
  time-step loop (``time_steps``: the loop around its middle collective or MPI call; an
  outer loop holding an inner one steps by the inner one; set-up code that ends in the
  body's calls is no step; counted on past an anomalous step; a stopped trace's one or two
  whole steps count) and per step how often it called each function (by name with peers
  and tags, counts stripped).  A rank whose count of a function in step k differs from
  what it made itself in most of its steps, while most other ranks made their usual count
  there, left the norm there; a function every rank calls in some steps only (a check
  every N steps) is held to what all the others did in that step.  Set-up ranks that
  always do more (rank 0's output) are their own norm; many calls against none (a data
  loop that another thread ran this step) is no fault.
* **How the run ended:** end records (deaths), stopped traces and where they stopped (a
  stopped step that is no prefix of the trace's whole steps, by skeleton; the hang
  evidence of the two-run verdict: least progressed, peers waited for), livelocks, and
  threads a process had beyond the others.

Plain functions over numpy arrays: ``summary`` runs where a trace is; the rest on the root.
"""
import re
from collections import Counter

import numpy as np

from ... import config
from ...model import stored_events
from ..model import calltree
from ..compare import divergence as dv
from .collectives import MIN_PEERS, collective_points
from .messages import message_evidence
from ..model.timesteps import rotation_free, time_steps
from .verdict import Divergence, body_labels, frame_words

MANY = 32               # a call count from which a step's calls are "many" (data-dependent loops)

_COUNTS = re.compile(r"(?<=[\[,])(?:count|scount|rcount|counts|size)=[^,\]]*,?")


def row_keys(names):
    """Per global id: the id the time-step rows count it under, its name without message
    counts (sizes vary with the data; peers, tags, ops and roots do not)."""
    first, out = {}, np.empty(len(names), dtype=np.int64)
    for i, name in enumerate(names):
        key = _COUNTS.sub("", name).replace(",]", "]").replace("[]", "") if name.endswith("]") else name
        out[i] = first.setdefault(key, i)
    return out


CHUNK = 1 << 23         # events looked at together (a livelocked trace holds 10^9)


def summary(events, maps, coll_keys, K, rows_by=None, p2p=None, free_rows=None, repeated=0):
    """One trace's evidence (see the module doc): its world collectives' keys in order and
    their event positions; its point-to-point calls ({global id: (calls, first position)}
    of ``p2p``'s ids); its time steps (frame, body, start and end positions, their rows
    (``StepRows``: per step {row id: (count, MANY for many; first offset; depth there)}),
    whether it stopped in one); its calls, its length and the repetition it ends in, if
    long (a livelock).  ``free_rows``: row ids left out of the step rows and skeletons
    (calls whose count and presence depend on arrival order).  Chunked: no temporary of
    the trace's length."""
    plain = maps[0]
    ev = stored_events(events)
    n = len(ev)
    # one gather per chunk: 2 a world collective, 1 another MPI call
    # one gather per chunk: 2 a world collective, 3 a point-to-point call, 1 another MPI call
    code = np.where(coll_keys >= 0, 2, maps[2]).astype(np.int8)
    if p2p is not None:
        code[p2p] = 3
    code[0] = 0
    at, keys, calls, mpi_calls, messages = [], [], 0, [], {}
    for c in range(0, n, CHUNK):
        seg = np.asarray(ev[c:c + CHUNK])
        calls += int(np.count_nonzero(seg))
        kinds = code[seg]
        mpi_calls.append(int(np.count_nonzero(kinds)))
        hit = np.flatnonzero(kinds == 2)
        at.append(hit + c)
        keys.append(coll_keys[seg[hit]])
        sent = np.flatnonzero(kinds == 3)
        if len(sent):
            ids, firsts, counts = np.unique(seg[sent], return_index=True, return_counts=True)
            for i, f, k in zip(ids.tolist(), firsts.tolist(), counts.tolist()):
                old = messages.get(i)
                messages[i] = (k, int(sent[f]) + c) if old is None else (old[0] + k, old[1])
    out = {"collectives": np.concatenate(keys).astype(np.int32) if keys else np.empty(0, np.int32),
           "collective_at": np.concatenate(at) if at else np.empty(0, np.int64), "calls": calls,
           "length": n, "steps": None, "tail": None, "messages": messages,
           "first_call": next((int(e) for e in np.asarray(ev[:64]).tolist() if e), -1)}
    tail = dv.repeating_tail(ev, 0)
    # ``repeated``: events of that repetition summarised while read (Trace.repeated_at_end)
    reps = 0 if tail is None else (n - tail[1] + repeated) // tail[0]
    if reps >= config.LIVELOCK_REPEATS:
        unit = np.asarray(ev[tail[1]:tail[1] + tail[0]])
        out["tail"] = (tail[0], tail[1], [int(e) for e in unit[unit != 0]][:3], reps)
    # the middle world collective (time steps communicate), else the middle MPI call
    middle = int(out["collective_at"][len(out["collective_at"]) // 2]) if len(out["collective_at"]) else \
        _middle(ev, code, mpi_calls)
    found = time_steps(ev, plain, K, middle)
    if found is None:
        return out
    frame, body, starts, ends, cut = found
    by = plain if rows_by is None else rows_by
    rows = step_rows(ev, by, starts, ends, free_rows)
    out["after"] = step_rows(ev, by, ends[-1:], [n], free_rows).row(0)     # a stopped trace's last step, or epilogue
    mpi = maps[2]
    # a stopped trace's unfinished step is held to its last few whole steps only
    free_mask = None
    if free_rows is not None and len(free_rows):
        free_mask = np.zeros(int(by.max()) + 1, dtype=bool)
        free_mask[np.asarray(free_rows)] = True
    out["skeletons"] = [_skeleton(ev, by, mpi, a, b, free_mask=free_mask) for a, b in
                        zip(starts.tolist()[-SKELETON_STEPS:], ends.tolist()[-SKELETON_STEPS:])]
    out["after_skeleton"] = _skeleton(ev, by, mpi, int(ends[-1]), n, free_mask=free_mask)
    out["steps"] = {"frame": frame, "body": body, "starts": starts, "ends": ends, "rows": rows,
                    "shape": (int(plain[frame]) if frame >= 0 else -1, rotation_free(body)), "cut": cut}
    return out


def _middle(ev, code, per_chunk):
    """The position of the middle MPI call of a trace (its time steps communicate: the
    middle event may lie in a long set-up, a loop of its own), or None without MPI calls."""
    total = sum(per_chunk)
    if not total:
        return None
    want = total // 2
    for k, m in enumerate(per_chunk):
        if want < m:
            seg = np.asarray(ev[k * CHUNK:(k + 1) * CHUNK])
            return k * CHUNK + int(np.flatnonzero(code[seg])[want])
        want -= m
    return None


SKELETON_DEPTH = 3      # calls this deep in a step, and MPI calls at any depth, make its skeleton
SKELETON_STEPS = 3      # whole steps an unfinished step is held to (the last ones)


def _skeleton(ev, plain, mpi, a, b, limit=1 << 16, free_mask=None):
    """The calls of events [a, b) that give a step its shape: those at most
    ``SKELETON_DEPTH`` deep and every MPI call, in order, a run of one call kept once
    (loops over the data repeat), as (plain id, depth, offset) for at most ``limit``;
    not the row ids ``free_mask`` marks (calls inside free blocks, ``stages.compare.order``)."""
    out, depth, last = [], 0, -1
    for c in range(a, b, CHUNK):
        seg = np.asarray(ev[c:min(b, c + CHUNK)])
        depths = depth + np.cumsum(np.where(seg != 0, 1, -1))
        kept = (seg != 0) & ((depths <= SKELETON_DEPTH) | mpi[seg])
        if free_mask is not None:           # calls whose presence depends on arrival order
            kept &= ~free_mask[plain[seg]]
        keep = np.flatnonzero(kept)
        ids = plain[seg[keep]]
        first = np.ones(len(ids), dtype=bool)          # a run of one call kept once
        first[1:] = ids[1:] != ids[:-1]
        if len(ids):
            first[0] = ids[0] != last
            last = int(ids[-1])
        at = np.flatnonzero(first)[:limit - len(out) + 1]
        out.extend(zip(ids[at].tolist(), depths[keep[at]].tolist(), (keep[at] + c - a).tolist()))
        if len(out) > limit:
            return out[:limit]
        depth = int(depths[-1]) if len(depths) else depth
    return out


class StepRows:
    """A trace's time-step rows, all steps at once (``step_rows``): step k's entries are
    ``ptr[k]:ptr[k + 1]`` of ``ids`` (row ids, ascending), ``counts`` (capped at MANY),
    ``first`` (offset of the first call from the step's start) and ``depth`` (the call
    depth there, relative to the step's start).  ``row(k)``: {id: (count, first, depth)}."""

    def __init__(self, ptr, ids, counts, first, depth):
        self.ptr, self.ids, self.counts, self.first, self.depth = ptr, ids, counts, first, depth

    def __len__(self):
        return len(self.ptr) - 1

    def row(self, k):
        """Step ``k``'s {id: (count, first, depth)}, by the chunk of the first call, then id."""
        a, b = int(self.ptr[k]), int(self.ptr[k + 1])
        at = a + np.lexsort((self.ids[a:b], self.first[a:b] // CHUNK))
        return dict(zip(self.ids[at].tolist(), zip(self.counts[at].tolist(), self.first[at].tolist(),
                                                    self.depth[at].tolist())))


def step_rows(ev, plain, starts, ends, leave_out=None):
    """The rows of steps [starts[i], ends[i]) of ``ev``, calls counted by ``plain`` id but
    the ids of ``leave_out``: a StepRows.  One pass in chunks: each call labelled with its
    step and depth, (step, id) pairs grouped by a stable sort; the step a chunk ends in is
    held, and grouped again with the next chunk's calls."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.maximum(starts, np.asarray(ends, dtype=np.int64))     # (a step that ends first holds no call)
    if (starts[1:] < ends[:-1]).any():          # out of order or overlapping (time_steps makes none): one by one
        parts = [step_rows(ev, plain, starts[i:i + 1], ends[i:i + 1], leave_out) for i in range(len(starts))]
        return StepRows(np.cumsum([0] + [p.ptr[-1] for p in parts]),
                        *(np.concatenate([getattr(p, f) for p in parts]) for f in ("ids", "counts", "first", "depth")))
    R = int(plain.max()) + 1 if len(plain) else 1
    drop = np.isin(np.arange(R), np.asarray([] if leave_out is None else leave_out, dtype=np.int64))
    wide = np.int64 if len(starts) and int((ends - starts).max()) >= 1 << 31 else np.int32
    types = (np.int64, np.int32, np.int8, wide, wide)       # step, id, count, first offset, depth
    cols, held, base, depth = [[] for _ in types], None, 0, 0   # base: the depth before the last step began
    hi, part = int(ends[-1]) if len(starts) else 0, max(1, CHUNK >> 3)     # (a dozen temporaries per event)
    for c in range(int(starts[0]) if len(starts) else 0, hi, part):
        seg = np.asarray(ev[c:min(hi, c + part)])
        calls = np.flatnonzero(seg)
        i0, i1 = np.searchsorted(starts, [c, c + len(seg)]).tolist()
        q = starts[i0:i1] - c               # the steps beginning in the chunk, and the depth before each
        bases = np.concatenate([[base], depth + 2 * np.searchsorted(calls, q) - q])
        base = int(bases[-1])
        s = i0 - 1 + np.cumsum(np.bincount(q, minlength=len(seg)))[calls]      # the step of each call
        rid = plain[seg[calls]]
        w = np.flatnonzero((s >= 0) & (calls + c < ends[np.maximum(s, 0)]) & ~drop[rid])
        s, rid, n = s[w], rid[w], np.ones(len(w), dtype=np.int64)
        # the depth after the w-th call of the chunk: w + 1 entries, the rest of its events returns
        at_depth = depth + 2 * (w + 1) - (calls[w] + 1) - bases[s - i0 + 1]
        offset = calls[w] + c - starts[s]
        depth += 2 * len(calls) - len(seg)
        if not len(w):
            continue
        if held is not None:        # the held step's calls come first: they were made first
            s, rid, n, offset, at_depth = (np.concatenate(x) for x in zip(held, (s, rid, n, offset, at_depth)))
        key = (s - s[0]) * R + rid
        perm = np.argsort(key, kind="stable")       # a group's first member is its first call
        group = np.flatnonzero(np.diff(key[perm], prepend=-1))
        lead = perm[group]
        entries = [s[lead], rid[lead], np.add.reduceat(n[perm], group), offset[lead], at_depth[lead]]
        cut = int(np.searchsorted(entries[0], entries[0][-1]))
        held = [e[cut:] for e in entries]
        for col, e, t in zip(cols, entries, types):
            col.append((np.minimum(e[:cut], MANY) if t is np.int8 else e[:cut]).astype(t, copy=False))
    for col, e, t in zip(cols, held or [np.empty(0, np.int64)] * 5, types):
        col.append((np.minimum(e, MANY) if t is np.int8 else e).astype(t, copy=False))
    steps, *rest = (np.concatenate(col) for col in cols)
    return StepRows(np.searchsorted(steps, np.arange(len(starts) + 1)), *rest)


def step_deviants(objects, summaries, stopped):
    """The first time step where some traces called a function another number of times
    than they usually do (their own most common count over their steps) while most of
    their peers (traces of the same thread index with the same loop) made their usual
    count of it in that step: (step index, {obj: [(id, own count, usual count, depth,
    offset)]}), or None.  A step every trace makes differently (output every N steps) and
    a function whose counts vary with the data (most peers off their usual) are no fault;
    what a rank always does (rank 0's output) is its own usual.  Only ``_Norms.steps`` are read."""
    shape = usual_shape(objects, summaries)
    groups = {}
    for o, s in summaries.items():
        if s["steps"] is not None and s["steps"]["shape"] == shape.get(objects[o][1]) and \
                len(s["steps"]["rows"]) >= 3:
            groups.setdefault(objects[o][1], {})[o] = s["steps"]["rows"]
    # main threads first: the steps of different loops do not compare by index, and a
    # worker's region skipped follows its main thread's call skipped
    for _, rows in sorted(groups.items()):
        norms = _Norms(rows) if len(rows) >= 2 else None
        for k in norms.steps() if norms else []:
            found = _step_found(rows, k, norms)
            if found:
                return k, found
    return None


def _step_found(rows, k, norms):
    """``step_deviants``' finding in step ``k``, {} for none."""
    usual = norms.usual()
    there = {o: r.row(k) for o, r in rows.items() if len(r) > k}
    off, varies = {}, set()
    for o, row in there.items():
        for f in set(row) | set(usual[o]):
            own, norm = row.get(f, (0,))[0], usual[o].get(f, 0)
            if norm is None:
                varies.add(f)
            elif own != norm and MANY not in (own, norm):
                # (many calls against none: a data loop that another thread ran this
                # step, dynamic scheduling, not a fault)
                off.setdefault(f, []).append(o)
    for f in varies:        # a function whose count varies in some trace is off nowhere
        off.pop(f, None)
    for f in [f for f, odd in off.items() if _handed_on(there, usual, odd, f)]:
        off.pop(f, None)
    found = _off_the_peers(there, k, varies, norms.follows)
    for f, odd in off.items():
        # most of the other traces must make their usual count here (else it is
        # the step, or the data, not a fault)
        if 2 * (len(odd) - 1) >= len(there) - 1:
            continue
        for o in odd:
            entry = there[o].get(f) or next((r[f] for r in there.values() if f in r), (0, 0, 0))
            found.setdefault(o, []).append((f, there[o].get(f, (0,))[0], usual[o].get(f, 0), entry[2], entry[1]))
    return found


def _handed_on(there, usual, odd, f):
    """Whether the traces off their usual count of ``f`` in a step made, together, their
    usual total: some more, some fewer (a role the data or arrival hands from rank to rank:
    who updates the champion, which worker gets the task), not a call skipped or added."""
    deltas = [there[o].get(f, (0,))[0] - usual[o].get(f, 0) for o in odd]
    return len(deltas) >= 2 and min(deltas) < 0 < max(deltas) and sum(deltas) == 0


def _off_the_peers(there, k, functions, follows):
    """Of ``functions`` (whose counts vary over the steps of some trace: a check every N
    steps), the traces that made another count of one in step ``k`` (``there``: the rows
    that have it) than every other trace did there, while in every other step where the
    others agreed it made their count (``_Norms.follows``): {obj: [(id, own count, their
    count, depth, offset)]}.  The step every trace takes differently is the peers' norm;
    a rank that always differs (rank 0's output) leaves it at more than one step, or never
    follows it, and is its own norm."""
    found = {}
    if len(there) < MIN_PEERS:
        return found
    for f in functions:
        counts = {o: row.get(f, (0,))[0] for o, row in there.items()}
        values = set(counts.values())
        if len(values) != 2:
            continue
        for o, own in counts.items():
            others = {c for p, c in counts.items() if p != o}
            if len(others) != 1 or own in others or MANY in (own, *others):
                continue
            if follows(o, f, k):
                entry = there[o].get(f) or next((r[f] for r in there.values() if f in r), (0, 0, 0))
                found.setdefault(o, []).append((f, own, next(iter(others)), entry[2], entry[1]))
    return found


OFF_STEPS = 1           # a trace's usual count of a function: made in every step but at most this many


class _Norms:
    """A group's norms, over all steps at once: per trace its usual count of each function
    (made in every step but ``OFF_STEPS`` at most, 0 for none; None when it varies more:
    dynamic scheduling, alternating phases, a different first step: no false culprit in a
    correct run), per function the first two steps where its counts split the traces."""

    def __init__(self, rows):
        self.rows, sizes = rows, sorted((len(r) for r in rows.values()), reverse=True)
        # from ``two`` fewer than two traces have the step, from ``peers`` fewer than MIN_PEERS
        self.two, self.peers = sizes[1], (sizes[MIN_PEERS - 1] if len(sizes) >= MIN_PEERS else 0)
        self.counts, self._usual = {o: _usual_counts(r) for o, r in rows.items()}, None
        self.split = _first_splits(rows, self.peers, [c[0] for c in self.counts.values()])

    def steps(self):
        """The steps that can hold a finding, in order: where a trace left a usual count, and
        each function's first split (a trace off the others' there must follow them elsewhere)."""
        at = np.unique(np.concatenate([c[2] for c in self.counts.values()] + [self.split[:, 0]]))
        return at[at < self.two].tolist()

    def usual(self):
        """{obj: {id: usual count, or None}}, by id."""
        if self._usual is None:
            self._usual = {}
            for o, r in self.rows.items():
                ids, usual, _ = self.counts[o]
                value = dict(zip(ids.tolist(), (None if u < 0 else u for u in usual.tolist())))
                self._usual[o] = value          # by id
        return self._usual

    def follows(self, o, f, k):
        """Whether trace ``o`` made the count of ``f`` every other trace made in each step but
        ``k`` (two such steps at least), and they agreed in every step: a count they make
        differently in some step depends on the data, and one trace off it once is chance."""
        n = min(len(self.rows[o]), self.peers)      # its steps where enough others have one
        at = np.searchsorted(self.split[:, 2], f)
        first, second = self.split[at, :2] if at < len(self.split) and self.split[at, 2] == f else (n, n)
        return not (first < n and first != k or first == k and second < n) and n - (k < n) >= 2


def _usual_counts(r):
    """(ids, the usual count of each or -1 where it varies, the steps where a usual count
    was not made) of a trace's StepRows ``r``."""
    n, has = len(r), np.bincount(r.ids) > 0
    ids, inv = np.flatnonzero(has), (np.cumsum(has) - 1)[r.ids]        # (ids are small: no sort)
    freq = np.bincount(inv * (MANY + 1) + r.counts, minlength=len(ids) * (MANY + 1)).reshape(len(ids), MANY + 1)
    freq[:, 0] = n - freq[:, 1:].sum(axis=1)            # steps without a call of it
    common = freq.argmax(axis=1)
    usual = np.where(freq[np.arange(len(ids)), common] >= n - OFF_STEPS, common, -1)
    kept, step = usual[inv] >= 0, np.repeat(np.arange(n), np.diff(r.ptr))
    made = np.bincount(step[kept & (r.counts == usual[inv])], minlength=n)
    other = np.bincount(step[kept & (r.counts != usual[inv])], minlength=n)
    return ids, usual, np.flatnonzero((made < np.count_nonzero(usual > 0)) | (other > 0))


def _first_splits(rows, peers, ids):
    """Per function where the traces that have a step (below ``peers``: at least
    ``MIN_PEERS`` do) did not all make one count of it: rows (first step, second step, id)
    by id, ``1 << 62`` for none; in blocks of steps, counts compared by sums and squares."""
    ids = np.unique(np.concatenate(ids))           # (each trace's, ``_usual_counts``)
    sizes, best = np.sort([len(r) for r in rows.values()]), np.full((len(ids), 2), 1 << 62)
    block = max(1, CHUNK // max(1, len(ids) * len(rows)))
    for j0 in range(0, peers, block):
        j1, keys, counts = min(peers, j0 + block), [], []
        for r in (r for r in rows.values() if len(r) > j0):
            e = min(j1, len(r))         # its steps in the block: [j0, e)
            step = np.repeat(np.arange(j0, e), np.diff(r.ptr[j0:e + 1]))
            keys.append((step - j0) * len(ids) + np.searchsorted(ids, r.ids[r.ptr[j0]:r.ptr[e]]))
            counts.append(r.counts[r.ptr[j0]:r.ptr[e]].astype(np.float64))
        keys, counts, size = np.concatenate(keys), np.concatenate(counts), (j1 - j0) * len(ids)
        made, total, square = (np.bincount(keys, w, minlength=size) for w in (None, counts, counts * counts))
        have = np.repeat(len(sizes) - np.searchsorted(sizes, np.arange(j0, j1), side="right"), len(ids))
        odd = np.flatnonzero((made > 0) & ((made < have) | (square * made != total * total)))
        f, j = odd % len(ids), odd // len(ids) + j0
        for _ in range(2):              # the first two steps of each id (``odd`` is by step, then id)
            which, at = np.unique(f, return_index=True)
            best[which] = np.sort(np.column_stack([best[which], j[at]]), axis=1)[:, :2]
            f, j = np.delete(f, at), np.delete(j, at)
    return np.column_stack([best, ids])[best[:, 0] < 1 << 62]


def unseen_calls(objects, summaries, stopped):
    """Stopped main threads whose last, unfinished step called a function that no other
    main thread called in any step and that they had not called before: {obj: [(id,
    depth, offset, step index)]} (an extra call, an MPI_Barrier no one else entered, say:
    a step cut short cannot be held to the norm's counts, but a call the norm never makes
    stands out)."""
    shape = usual_shape(objects, summaries)
    mains = {o: s for o, s in summaries.items()
             if objects[o][1] == 0 and s["steps"] and s["steps"]["shape"] == shape.get(0)}
    whole = {o: set(np.unique(s["steps"]["rows"].ids).tolist()) for o, s in mains.items()}
    seen = Counter(f for o, s in mains.items() for f in whole[o] | set(s["after"]))    # main threads per function
    new = {o: [(f, depth, offset, len(s["steps"]["rows"])) for f, (_, offset, depth) in s["after"].items()
               if stopped[o] and seen[f] == 1 and f not in whole[o]] for o, s in mains.items()}
    return {o: calls for o, calls in new.items() if calls and len(mains) >= 2}


def broken_steps(objects, summaries, stopped):
    """Stopped traces whose unfinished step is no prefix of any whole step they made (by
    skeleton, ``_skeleton``): {obj: (status, normal id, faulty id, offset, step index)} at
    the first call where it departs from its most common step (a call skipped: MISSING; a
    call no step makes there: EXTRA; else DIFFERENT).  A victim stopped on its usual path."""
    out = {}
    shape = usual_shape(objects, summaries)
    for o, s in summaries.items():
        if not stopped[o] or not s["steps"] or not s.get("skeletons") or objects[o][1] != 0 or \
                not s["steps"].get("cut") or \
                s["steps"]["shape"] != shape.get(0):
            continue
        part = [i for i, _, _ in s["after_skeleton"]]
        wholes = [[i for i, _, _ in sk] for sk in s["skeletons"]]
        if not part or any(w[:len(part)] == part for w in wholes):
            continue
        keyed = [tuple(w) for w in wholes]
        usual = list(max(set(keyed), key=keyed.count))
        i = next((j for j, (a, b) in enumerate(zip(part, usual)) if a != b), min(len(part), len(usual)))
        if i >= len(usual):
            continue
        offset = s["after_skeleton"][i][2] if i < len(part) else s["length"] - s["steps"]["ends"][-1]
        if part[i:i + 3] == usual[i + 1:i + 4]:
            out[o] = (dv.MISSING, usual[i], None, offset, len(s["steps"]["starts"]))
        elif i < len(part) and part[i + 1:i + 4] == usual[i:i + 3]:
            out[o] = (dv.EXTRA, None, part[i], offset, len(s["steps"]["starts"]))
        elif i < len(part):
            out[o] = (dv.DIFFERENT, usual[i], part[i], offset, len(s["steps"]["starts"]))
    return out


def new_threads(objects):
    """The threads of processes that have more threads than most processes (a parallel
    region run with more threads than the others): their objects."""
    threads = {}
    for rank, t in objects:
        threads.setdefault(rank, set()).add(t)
    sizes = [len(v) for v in threads.values()]
    usual = max(set(sizes), key=sizes.count)
    if sizes.count(usual) < 2:
        return []
    return [i for i, (rank, t) in enumerate(objects) if len(threads[rank]) > usual and t >= usual]


def usual_shape(objects, summaries):
    """{thread index: the time-step loop most of its traces have (frame and body)}: a
    trace that stopped early may show another loop (a set-up loop), not comparable."""
    shapes = {}
    for o, s in summaries.items():
        if s["steps"]:
            shapes.setdefault(objects[o][1], []).append(s["steps"]["shape"])
    return {t: max(set(v), key=v.count) for t, v in shapes.items()}


def points(objects, names, summaries, stopped, endings=None):
    """Where to describe each trace the verdict will name: {obj: (position, status, normal
    names, faulty names, program order)}: the deviants of the first collective or time step
    that has any (collective deviants first), then every stopped trace at its end."""
    out = collective_points(objects, names, summaries, stopped)
    for o, point in message_evidence(objects, names, summaries, endings).items():
        out.setdefault(o, point)
    step = step_deviants(objects, summaries, stopped)
    if step is not None:
        k, found = step
        for o, flagged in found.items():
            if o in out:
                continue
            f, own, norm, _, offset = min(flagged, key=lambda x: (x[3], x[4]))
            steps = summaries[o]["steps"]
            position = int(min(steps["starts"][k] + offset, steps["ends"][k] - 1))
            name = calltree.plain_name(names[f])
            missing = own < norm
            out[o] = (position, dv.MISSING if missing else dv.EXTRA, [name] if missing else [],
                      [] if missing else [name], (k, offset))
    for o in new_threads(objects):
        first = summaries[o].get("first_call", -1) if o in summaries else -1
        out.setdefault(o, (0, dv.NEW, [], [names[first]] if first > 0 else [], ()))
    for o in np.flatnonzero(stopped).tolist():
        tail = summaries[o]["tail"] if o in summaries and o not in out else None
        if tail is not None:        # stopped while repeating one short unit: a livelock
            out[o] = (tail[1], dv.LIVELOCK, [], [names[e] for e in tail[2]], ())
    if not out:
        for o, (status, n_id, f_id, offset, k) in broken_steps(objects, summaries, stopped).items():
            steps = summaries[o]["steps"]
            n_name, f_name = (None if i is None else calltree.plain_name(names[i]) for i in (n_id, f_id))
            if n_name is not None and n_name == f_name:       # the same call, other peers or tags
                n_name, f_name = (_COUNTS.sub("", names[i]).replace(",]", "]") for i in (n_id, f_id))
            out[o] = (int(min(steps["ends"][-1] + offset, summaries[o]["length"] - 1)),
                      dv.ARGUMENTS if n_name is not None and calltree.plain_name(n_name) == calltree.plain_name(
                          f_name or "") else status,
                      [] if n_name is None else [n_name], [] if f_name is None else [f_name], (k, offset))
    if not out:
        for o, new in unseen_calls(objects, summaries, stopped).items():
            f, _, offset, k = min(new, key=lambda x: (x[1], x[2]))
            steps = summaries[o]["steps"]
            at = steps["starts"][k] if k < len(steps["starts"]) else steps["ends"][-1]
            out[o] = (int(min(at + offset, summaries[o]["length"] - 1)), dv.EXTRA, [],
                      [calltree.plain_name(names[f])], (k, offset))
    for o in np.flatnonzero(stopped).tolist():
        if o in summaries and o not in out:
            out[o] = (summaries[o]["length"], dv.STOPPED, [], [], ())
    return out


def _loops_of(steps, k, names, steps_in_all):
    """The verdict's loops entry for step ``k`` (0-based) of a trace's time steps."""
    return [(frame_words(steps["frame"], names), body_labels(steps["body"], names), k + 1,
             max(steps_in_all or 0, len(steps["starts"]), k + 1))]


def divergences(objects, names, found, contexts, summaries, stopped, open_calls, loops_of):
    """The Divergences the two-run verdict takes (``verdict.build``): ``found`` from
    ``points``, ``contexts`` {obj: divergence.context there (its own call-tree view)};
    ``loops_of(where)`` turns a view into verdict loops.  A stopped trace's progress is its
    calls against the most any trace of its thread index made."""
    most = {}
    for o, s in summaries.items():
        most[objects[o][1]] = max(most.get(objects[o][1], 1), s["calls"])
    shape = usual_shape(objects, summaries)
    in_all = {}             # per thread index: the most whole steps of its usual loop
    for o, s in summaries.items():
        t = objects[o][1]
        if s["steps"] and s["steps"]["shape"] == shape.get(t):
            in_all[t] = max(in_all.get(t, 0), len(s["steps"]["starts"]))
    out = {}
    for o, (position, status, normal, faulty, order) in found.items():
        ctx = contexts.get(o)
        where = (ctx or {}).get("where") or []
        main_where = (ctx or {}).get("main_where")
        loops = loops_of(main_where)[:1] + loops_of(where) if main_where else loops_of(where)
        steps = summaries[o]["steps"]
        steps_in_all = in_all.get(0 if main_where else objects[o][1])
        if steps and objects[o][1] == 0 and (steps["shape"] == shape.get(0) or not loops):
            # the step from the trace's own whole steps, as its peers count them (its own
            # fold of a trace cut short may see another loop, or none)
            k = int(np.searchsorted(steps["starts"], position, side="right"))
            if position >= steps["ends"][-1]:
                k = len(steps["starts"]) + 1 if stopped[o] else 0   # the unfinished step; an epilogue
            if k > 0:
                loops = _loops_of(steps, k - 1, names, steps_in_all) + loops[1:]
        elif loops and steps_in_all:
            frame, body, step, count = loops[0]
            loops[0] = (frame, body, step, max(count, steps_in_all))     # a stopped trace's own count is short
        call_path = [calltree.plain_name(names[f]) for f, *_ in where if f >= 0]
        clock = None if ctx is None or status == dv.NEW else ctx.get("process_clock", ctx["clock"])
        if clock is None and status == dv.MISSING and len(order) == 1:
            clock = order[0]        # a skipped world collective (an empty trace too): the ones before it
        tail = summaries[o]["tail"]
        out[o] = Divergence(tuple(objects[o]), status, int(position), clock, normal, faulty, call_path, loops,
                            bool(stopped[o]), None if ctx is None else ctx["clock_end"],
                            open_calls[o] if stopped[o] else "",
                            summaries[o]["calls"] / most[objects[o][1]], order=order,
                            repeats=tail[3] if status == dv.LIVELOCK and tail else 0)
    return out
