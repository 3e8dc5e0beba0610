"""Where a position of a trace lies in its call tree: the calls open there, and in which
iteration of which loop of each enclosing call (call-tree loop folding).

With entry and exit events, the calls made directly inside one call (its children) are a
short sequence even when the whole trace is long: a time-step loop in ``main`` is
``TimeIncrement LagrangeLeapFrog`` repeated, however many thousand events each step
holds.  Folding each level's children with the NLR kernel (by plain name, arguments
stripped, so a message size that changes every step does not break the loop) gives the
loop and the iteration of any position without a K bound on the events below.  Traces
without returns (entry-only) have one level: the flat sequence, folded the same way.

Plain functions over numpy arrays in global ids; names enter only through id maps.
"""
import re

import numpy as np

from ... import config
from ...kernels.nlr import LoopTable, child_calls, count_flagged, flagged_positions, nlr, open_frames, position_scan
from ...model import plain_name, stored_events  # noqa: F401 (plain_name: the stages' name for it)
from .filters import CLASSES

_COLLECTIVE = re.compile(CLASSES["mpicol"][0])
_MPI = re.compile(CLASSES["mpi"][0])
# a parallel region's start in the thread that opens it (GCC's libgomp, LLVM's runtime)
_REGION_START = re.compile(r"^(GOMP_parallel|__kmpc_fork_call)")




def is_collective(name):
    """Whether a call name is an MPI collective's (arguments or not)."""
    return bool(_COLLECTIVE.search(plain_name(name)))


def id_maps(names):
    """Per global id: the id of its plain name (the first id with that plain name, so two
    annotated names of one call map to one id), whether it is an MPI collective, an MPI
    call, and a parallel region's start."""
    first = {}
    plain = np.empty(len(names), dtype=np.int32)
    for i, name in enumerate(names):
        plain[i] = first.setdefault(plain_name(name), i)
    flags = [(bool(_COLLECTIVE.search(n)), bool(_MPI.search(n)), bool(_REGION_START.search(n))) for n in names]
    arr = np.array(flags, dtype=bool).reshape(len(names), 3)
    if len(names):
        arr[0] = False          # id 0 is the return
    return plain, arr[:, 0], arr[:, 1], arr[:, 2]


def count_before(events, mask, stop, memo=None):
    """How many entries of ``mask``ed ids the trace made before position ``stop``;
    ``memo`` (as in ``frame_children``): from their positions, listed once per trace and
    mask (a process's worker threads all ask its main thread, at their own positions)."""
    if memo is None:
        return count_flagged(stored_events(events), np.ascontiguousarray(mask, dtype=np.uint8), max(int(stop), 0))
    return int(np.searchsorted(flagged_at(events, mask, memo), max(int(stop), 0)))


def flagged_at(events, mask, memo):
    """The positions of the entries of ``mask``ed ids in a trace (ascending), listed once
    per trace and mask in ``memo`` (as in ``frame_children``)."""
    key = ("flagged", id(events), id(mask))
    if key not in memo:
        memo[key] = (events, mask, flagged_positions(stored_events(events), np.ascontiguousarray(mask, dtype=np.uint8)))
    return memo[key][2]


def position_counts(events, mask, position, levels=False):
    """(entries before ``position``, entries in all, entries of ``mask``ed ids before it,
    those in all) of a trace, in one pass (``position`` clamped to [0, len]); with
    ``levels`` also what ``locate`` scans for (its ``scanned``) from the same pass."""
    found = position_scan(stored_events(events), np.ascontiguousarray(mask, dtype=np.uint8), int(position), levels,
                          config.LOCATE_SPAN)
    return found if not levels else (found[:4], found[4:])


def fold(ids, K=config.CALLTREE_K):
    """The NLR of one level's children: (ids, counts, LoopTable) with a fresh table."""
    table = LoopTable()
    out_ids, out_counts = nlr(np.ascontiguousarray(ids, dtype=np.int32), int(K), table, False)
    return out_ids, out_counts, table


def _body_length(table, loop, memo):
    if loop not in memo:
        ids, counts = table.body(loop)
        memo[loop] = int(sum(_body_length(table, -int(i) - 1, memo) * int(c) if i < 0 else 1
                             for i, c in zip(ids.tolist(), counts.tolist())))
    return memo[loop]


def place(ids, counts, table, j):
    """The loops holding element ``j`` of the folded sequence, outermost first:
    [(loop number, iteration 1-based, iterations)]."""
    memo, path = {}, []
    ids, counts = np.asarray(ids).tolist(), np.asarray(counts).tolist()
    while True:
        pos = 0
        for i, c in zip(ids, counts):
            span = 1 if i >= 0 else _body_length(table, -i - 1, memo) * c
            if j < pos + span:
                break
            pos += span
        else:
            return path
        if i >= 0:
            return path
        loop = -i - 1
        length = _body_length(table, loop, memo)
        iteration = (j - pos) // length
        path.append((loop, iteration + 1, c))
        j -= pos + iteration * length
        body_ids, body_counts = table.body(loop)
        ids, counts = body_ids.tolist(), body_counts.tolist()


def body_ids(table, loop):
    """A loop's body as (ids, counts) lists, inner loops as ("loop", body, count) tuples."""
    ids, counts = table.body(loop)
    return [(int(i), 1) if i >= 0 else (body_ids(table, -int(i) - 1), int(c))
            for i, c in zip(ids.tolist(), counts.tolist())]


def _flat_body(table, loop):
    ids, counts = table.body(loop)
    out = []
    for i, c in zip(ids.tolist(), counts.tolist()):
        out.extend([i] if i >= 0 else _flat_body(table, -i - 1) * c)
    return out


def anchor(children, table, loop):
    """The call that marks one iteration of ``loop`` among a level's children: of the
    calls its body makes exactly once, the one met first in the sequence (so a body
    that greedy folding rotated, ``[b c a]`` for ``a b c a b c ...``, still counts from
    ``a``).  None when every call of the body repeats."""
    body = _flat_body(table, loop)
    once = [i for i in set(body) if body.count(i) == 1]
    firsts = [(int(np.flatnonzero(children == i)[0]), i) for i in once if (children == i).any()]
    return min(firsts)[1] if firsts else None


def step_of(children, ids, counts, table, j):
    """The time step of child ``j`` of one level (see ``_step_of``): (loop, step 1-based,
    steps in all), or None."""
    found = _step_of(children, ids, counts, table, j)
    return None if found is None else found[:3]


def _step_of(children, ids, counts, table, j):
    """The time step of child ``j`` of one level: (loop, step 1-based, steps in all) of
    the outermost loop holding it (``checks_every``: a loop that is a check every N
    passes of its inner loop steps by the inner one), or None.  A step is one occurrence of the loop's
    ``anchor`` among all the level's children, so a loop that folding split or rotated
    (``[a b c]^4 a b [x y [c a b]^5]^3``) still counts from the start; a child between
    the iterations of a loop nested in that one (``x``) is placed after the nested
    loop's last iteration.  A fourth value: how many children into its step ``j`` is
    (program order within a step, comparable between the ranks of one program)."""
    path = place(ids, counts, table, j)
    if not path:
        # between loops (greedy folding left one iteration out): the loop whose body holds
        # this call and that repeats most, counted by its anchor
        holding = [loop for loop in range(len(table)) if int(children[j]) in _flat_body(table, loop)]
        marked = [(int(np.count_nonzero(children == m)), loop, m) for loop in holding
                  for m in [anchor(children, table, loop)] if m is not None]
        if not marked:
            return None
        total, loop, m = max(marked)
        return loop, int(np.count_nonzero(children[:j + 1] == m)), total, _since(children, m, j)
    # the outermost loop of the level first (the time step, not a pass of a loop inside
    # it: issue 35), when it is alone at its level
    found = _periodic_step(children, ids, counts, table, j)
    if found is not None:
        return found
    # the outermost loop holding it, unless that loop is a check every N passes of the
    # loop inside it (then that one, and so on inward)
    loop = path[0][0]
    while True:
        body, _ = table.body(loop)
        inner = next((-int(i) - 1 for i in body.tolist() if i < 0), None)
        if inner is None or not checks_every(children, table, loop, inner):
            break
        marker = anchor(children, table, inner)
        if marker is None or not (children[:j + 1] == marker).any():
            break
        loop = inner
    marker = anchor(children, table, loop)
    if marker is None:
        return loop, path[-1][1], path[-1][2], 0
    return (loop, int(np.count_nonzero(children[:j + 1] == marker)), int(np.count_nonzero(children == marker)),
            _since(children, marker, j))


def checks_every(children, table, loop, inner):
    """Whether ``loop`` is a check made every N passes of ``inner`` (``[[a b c]^5 check]``:
    one source loop with a periodic extra) rather than a loop around it (``[t x [a b
    c]^4 y]``: a time step around a per-variable loop): every call of its body that the
    inner body does not make first occurs after the inner loop's first pass began (a
    check comes after N steps; a step's own calls come before its first inner pass)."""
    own = set(_flat_body(table, inner))
    extra = [i for i in set(_flat_body(table, loop)) if i not in own]
    marker = anchor(children, table, inner)
    if marker is None or not (children == marker).any():
        return False
    first_inner = int(np.flatnonzero(children == marker)[0])
    return all(int(np.flatnonzero(children == i)[0]) > first_inner for i in extra if (children == i).any())


def _since(children, marker, j):
    """Children from the last ``marker`` up to ``j`` (0: ``j`` is the marker)."""
    before = np.flatnonzero(children[:j + 1] == marker)
    return int(j - before[-1]) if len(before) else 0


def _periodic_step(children, ids, counts, table, j):
    """The step of child ``j`` of a loop that folding found as one run at the top of the
    level (``x [a b c d]^n y``) and nowhere else: iterations are the whole periods of the
    stretch where the children repeat with the body's period.  So set-up code that makes
    the body's first or last calls before the loop (``a b [a b c d]^n``, ``c d [a b c
    d]^n``) and an epilogue that makes them once more after it are no iterations (an
    anchor call counted over the whole level would count them).  None
    when the loop is not alone at its level or ``j`` is outside its whole periods."""
    memo, start, run = {}, 0, None
    ids, counts = np.asarray(ids).tolist(), np.asarray(counts).tolist()
    for i, c in zip(ids, counts):
        span = 1 if i >= 0 else _body_length(table, -i - 1, memo) * c
        if i < 0:
            if run is not None:
                return None         # a second loop at this level: the anchor rule counts across them
            run = (-i - 1, start, start + span)
        start += span
    if run is None:
        return None
    loop, lo, hi = run
    period = _body_length(table, loop, memo)
    lo, hi = _repeating_stretch(np.asarray(children), lo, hi, period)
    steps = (hi - lo) // period
    # a part of a period is left over: set-up code that makes the body's last calls
    # before the loop (a CG solver's r = b - A x; dot(r, r)) or an epilogue that makes
    # its first calls after it.  The former is what real solvers showed (the latter
    # seldom repeats the body exactly): the whole periods are taken to end at ``hi``.
    lo += (hi - lo) % period
    if not lo <= j < lo + steps * period:
        return None
    return loop, (j - lo) // period + 1, steps, (j - lo) % period


def flat_step(ids, j, K=256):
    """The time step of position ``j`` of an entry-only trace, whose loop body is too long
    to fold whole: the calls made at most as often as the count most functions share (a
    time-step loop calls most of its functions once a step) and at least 3 times are
    folded alone, and the step is theirs (``_step_of``: whole periods of a loop alone at
    its level, so set-up and epilogue calls are no steps).  ((body, step, steps), offset)
    or (None, j) when no such loop is found."""
    ids = np.asarray(ids)
    values, counts = np.unique(ids, return_counts=True)
    loop = counts >= 3
    shared, how_many = np.unique(counts[loop], return_counts=True)
    if not len(shared) or how_many.max() < 2:
        return None, j
    most = int(shared[np.flatnonzero(how_many == how_many.max())[0]])
    at = np.flatnonzero(np.isin(ids, values[loop & (counts <= most)]))
    k = int(np.searchsorted(at, j, side="right")) - 1
    if k < 0:
        return None, j
    sub = ids[at]
    f_ids, f_counts, table = fold(sub, K)
    found = _step_of(sub, f_ids, f_counts, table, k)
    if found is None:
        return None, j
    loop_id, step, steps, offset = found
    return (body_ids(table, loop_id), step, steps), int(j - at[k - offset])


def _repeating_stretch(children, lo, hi, period):
    """[lo, hi) of a folded loop's run widened to where the children still repeat with the
    loop's period (a part of a period on either side: set-up and epilogue calls)."""
    n = len(children)
    while lo > 0 and lo - 1 + period < n and children[lo - 1] == children[lo - 1 + period]:
        lo -= 1
    while hi < n and children[hi] == children[hi - period]:
        hi += 1
    return lo, hi


def frame_children(events, first, top, memo=None, stop=None):
    """``child_calls`` of one frame of ``events[:stop]``, kept in ``memo`` (a dict the
    caller holds while ``events`` lives) when given: the thread and ``main`` levels of a
    trace are the same frames for every position looked up in it, and each is a scan of
    the whole trace."""
    view = events if stop is None or stop >= len(events) else events[:stop]
    if memo is None:
        return child_calls(view, first, top)
    key = (id(events), len(view), int(first), bool(top))
    if key not in memo:
        memo[key] = (events, child_calls(view, first, top))     # the array held: its id stays its own
    return memo[key][1]


def _scan_levels(events, position, memo, scanned):
    """The calls open at ``position`` as (frame id, first event) and, in ``memo`` (as
    ``frame_children`` keys them), the thread's top level and the outermost open call's
    children, all from one pass (``scanned``: ``position_scan``'s levels there, when the
    caller made that pass) unless the memo already holds the top level.  That call's
    children are left to ``frame_children`` when it has some ``LOCATE_SPAN`` events past
    the position (``locate`` may not need them all)."""
    n = len(events)
    top = outer = None
    if scanned is None and (id(events), n, 0, True) in memo:
        ids, starts = open_frames(events, position)
    else:
        if scanned is None:
            scanned = position_scan(events, None, position, True, config.LOCATE_SPAN)[4:]
        (ids, starts), top, outer = scanned
    frames = [(-1, 0)] + [(int(i), int(s) + 1) for i, s in zip(ids.tolist(), starts.tolist())]
    if top is not None:
        memo.setdefault((id(events), n, 0, True), (events, top))
    if outer is not None:
        memo.setdefault((id(events), n, frames[1][1], False), (events, outer))
    return frames


def locate(events, position, plain, K=config.CALLTREE_K, memo=None, returns=None, scanned=None):
    """Where ``position`` lies in the trace's call tree, outermost level first:
    [(frame id (-1: the thread itself), child index, [(body, iteration, iterations)],
    step, offset)].  The child index is that of the child call holding ``position`` or the
    last one entered before it (-1: none yet); body is ``body_ids`` in plain ids; step is
    ``step_of`` as (body, step, steps) or None, offset the child's place within its step
    (the child index when there is no step).  Entry-only traces (no returns) have one
    level, the flat sequence.  ``memo``: as in ``frame_children``; ``returns``: whether
    the trace has returns and ``scanned``: ``position_counts``'s levels at ``position``,
    when the caller knows them (else they are scanned for)."""
    events = stored_events(events)
    position = max(0, min(int(position), len(events)))
    if returns is None:
        returns = np.count_nonzero(events) < len(events)
    flat = len(events) > 0 and not returns
    if flat:
        frames = [(-1, 0)]
    else:
        memo = {} if memo is None else memo
        frames = _scan_levels(events, position, memo, scanned)
    out, stop = [], None
    for frame, first in frames:
        if flat:
            child_ids, child_pos = events, np.arange(len(events))
        else:
            child_ids, child_pos = frame_children(events, first, frame < 0, memo, stop)
        j = int(np.searchsorted(child_pos, position, side="right")) - 1
        loops, step, offset = [], None, j
        if j >= 0:
            f_ids, f_counts, table = fold(plain[child_ids], K)
            loops = [(body_ids(table, loop), it, n) for loop, it, n in place(f_ids, f_counts, table, j)]
            found = _step_of(plain[child_ids], f_ids, f_counts, table, j)
            if found is not None:
                step, offset = (body_ids(table, found[0]), found[1], found[2]), found[3]
            elif flat:
                step, offset = flat_step(plain[child_ids], j)
        out.append((frame, j, loops, step, offset))
        if step is not None:
            # below the time step, a level's later calls say nothing of the position: a
            # rank spinning in a call until killed must not be folded whole (10^9 calls)
            stop = position + config.LOCATE_SPAN
    return out


def time_steps(events, plain, K=config.CALLTREE_K):
    """The time steps of a trace with returns: (frame id (-1: the thread), body in plain
    ids, the event positions where each whole step starts and ends) of the outermost call
    level, among those open at the middle of the trace, whose widest loop repeats at least
    twice; or None (no loop, or an entry-only trace).  Steps are the whole periods of the
    stretch where that level's children repeat, counted from its start, so the traces of
    one program, cut short or not, cut their steps alike."""
    events = stored_events(events)
    n = len(events)
    if n == 0 or np.count_nonzero(events) == n:
        return None
    ids, starts = open_frames(events, n // 2)
    for frame, first in [(-1, 0)] + [(int(i), int(s) + 1) for i, s in zip(ids.tolist(), starts.tolist())]:
        child_ids, child_pos = child_calls(events, first, frame < 0)
        if len(child_ids) < 2:
            continue
        children = plain[child_ids]
        f_ids, f_counts, table = fold(children, K)
        memo, start, widest = {}, 0, None
        for i, c in zip(f_ids.tolist(), f_counts.tolist()):
            span = 1 if i >= 0 else _body_length(table, -i - 1, memo) * c
            if i < 0 and (widest is None or span > widest[1]):
                widest = (start, span, -i - 1)
            start += span
        if widest is None:
            continue
        loop = widest[2]
        period = _body_length(table, loop, memo)
        m = len(children)
        lo, hi = _repeating_stretch(children, widest[0], widest[0] + widest[1], period)
        steps = (hi - lo) // period
        if steps < 2:
            continue
        end = n if frame < 0 else _frame_end(events, first)
        if end is None and hi == m and (hi - lo) % period == 0:
            steps -= 1          # the trace stopped inside the frame, in its loop's last step (all its calls entered)
        if steps < 2:
            continue
        bounds = np.append(child_pos, n if end is None else end)
        first_child = lo + period * np.arange(steps, dtype=np.int64)
        return frame, body_ids(table, loop), bounds[first_child], bounds[first_child + period]
    return None


def _frame_end(events, first, chunk=1 << 22):
    """The position of the return that closes the call whose events start at ``first``
    (the position after its entry), or None when the trace ends inside it."""
    depth = 0
    for c in range(first, len(events), chunk):
        seg = np.asarray(events[c:c + chunk])
        running = depth + np.cumsum(np.where(seg != 0, 1, -1))
        closed = np.flatnonzero(running < 0)
        if len(closed):
            return c + int(closed[0])
        depth = int(running[-1])
    return None


def regions_in_main(worker, main, region_mask, positions, memo=None):
    """For each position of a worker thread: the position in its main thread of the
    parallel region start that opened the region the worker is in there (the k-th region
    a worker ran, one of its top-level calls, is the main thread's k-th region start), or
    None when that cannot be told.  ``memo``: as in ``frame_children``."""
    _, entered = frame_children(stored_events(worker), 0, True, memo)
    starts = flagged_at(main, region_mask, {} if memo is None else memo)
    ks = np.searchsorted(entered, np.asarray(positions), side="right").tolist()
    return [int(starts[k - 1]) if 0 < k <= len(starts) else None for k in ks]
