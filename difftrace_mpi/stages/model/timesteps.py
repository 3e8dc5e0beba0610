"""The time steps of one trace from its own call tree, for the failed run alone
(``stages.diagnose.failed_run``): which loop is the time-step loop and where each whole step starts
and ends, when no normal run's complete trace says so.

``calltree.time_steps``' rule (the outermost level, among the calls open at a position,
whose widest loop repeats) from the calls open at the trace's middle collective or MPI
call, with refinements that traces of faulty runs need: an outer loop holding an inner
one steps by the inner loop; set-up code that ends in the body's calls is no step; steps
go on past a step that skipped or added a call; a trace stopped in its second or third
step, too short to fold, still has its whole steps.

Plain functions over numpy arrays of plain ids.
"""
import numpy as np

from . import calltree

RESYNC = 4              # steps of other calls two runs of whole steps may be apart and still be one loop


def _resync(children, unit, starts, tail):
    """Step starts widened past anomalies: a step that skipped or added a call breaks the
    stretch folding found, and the steps on its other side repeat the same ``unit``.
    Backward and forward from ``starts`` (ending at ``tail``), the next exact copy of the
    unit within ``RESYNC`` steps' length is found; the children between are one step or more
    (each starting at the unit's first call, or as many as their length holds), or, when
    fewer than half a step, part of the step before."""
    unit = np.asarray(unit, dtype=children.dtype)
    L, m = len(unit), len(children)
    if L == 0:
        return starts, tail
    c0 = int(unit[0])
    starts = list(starts)
    # backward
    while True:
        s0 = starts[0]
        run = _copies(children, unit, s0, -1)
        if run:                     # whole steps right before: the fold's stretch left them out
            starts = list(range(s0 - run * L, s0, L)) + starts
            continue
        j = _next_copy(children, unit, max(0, s0 - (RESYNC + 1) * L), s0 - L, last=True)
        if j is None:
            break
        starts = [j] + _gap_steps(children, j + L, s0, c0, L) + starts
    # forward
    pos = tail
    while pos < m:
        j = _next_copy(children, unit, pos, min(m - L, pos + RESYNC * L))
        if j is None:
            break
        starts = starts + _gap_steps(children, pos, j, c0, L)
        run = _copies(children, unit, j, 1)
        starts.extend(range(j, j + run * L, L))
        pos = j + run * L
    return starts, max(tail, pos)


def _copies(children, unit, j, way):
    """How many exact copies of ``unit`` follow position ``j`` (``way`` 1) or end there
    (-1), one after another."""
    L = len(unit)
    q = (len(children) - j) // L if way > 0 else j // L
    if q <= 0:
        return 0
    block = (children[j:j + q * L] if way > 0 else children[j - q * L:j]).reshape(q, L)
    ok = (block == unit).all(axis=1)
    if way < 0:
        ok = ok[::-1]
    return q if ok.all() else int(np.argmin(ok))


def _next_copy(children, unit, lo, hi, last=False):
    """The first (``last``: the last) position in [lo, hi] where an exact copy of ``unit``
    starts, or None."""
    L = len(unit)
    hi = min(hi, len(children) - L)
    if hi < lo or lo < 0:
        return None
    windows = np.lib.stride_tricks.sliding_window_view(children[lo:hi + L], L)
    at = np.flatnonzero((windows == unit).all(axis=1))
    return None if not len(at) else lo + int(at[-1] if last else at[0])


def _gap_steps(children, a, b, c0, L):
    """The step starts among children [a, b) between two runs of whole steps (see
    ``_resync``)."""
    if b <= a:
        return []
    marks = [a + int(i) for i in np.flatnonzero(children[a:b] == c0)]
    if marks:
        return marks if marks[0] == a else [a] + marks if marks[0] - a >= L / 2 else marks
    k = int((b - a) / L + 0.5)
    return [a + (i * (b - a)) // k for i in range(k)]


def _set_up_phase(children, unit, starts, tail):
    """Steps moved to begin where set-up code ends (``time_steps``): when the call just
    before the children start repeating the unit is one the unit makes once, the steps
    start at it; else at the first repeating call.  (starts, tail, shift)."""
    L, m = len(unit), len(children)
    e = starts[0]
    while e > 0 and e - 1 + L < m and children[e - 1] == children[e - 1 + L]:
        e -= 1
    rotated = children[e:e + L].tolist()
    c = int(children[e - 1]) if e > 0 and rotated.count(int(children[e - 1])) == 1 else int(children[e])
    first = e + rotated.index(c) if c in rotated else starts[0]
    delta = first - starts[0]
    if not delta:
        return starts, tail, 0
    moved = [s + delta for s in starts]
    end = tail + delta
    if delta > 0 and (end > m or children[tail:end].tolist() != list(unit[:delta])):
        moved, end = moved[:-1], moved[-1]        # the last step is not whole once moved
    if len(moved) < 2:
        return starts, tail, 0
    return moved, end, delta


CUT_PERIOD = 64         # the longest step a stopped trace's few repetitions are looked for with


def _cut_repeat(children):
    """(start, period) of the widest stretch at the end of ``children`` that repeats with
    one period (the shortest of the widest), holding one whole period and at least one
    call more, and ending in a call made once a period; or None."""
    m, best = len(children), None
    for p in range(1, min(CUT_PERIOD, m - 1) + 1):
        same = children[:-p] == children[p:]
        run = m - p - (int(np.flatnonzero(~same)[-1]) + 1 if not same.all() else 0)
        span = run + p
        if run >= 1 and (best is None or span > best[0]):
            best = (span, p)
    if best is None:
        return None
    span, p = best
    lo = m - span
    unit = children[lo:lo + p].tolist()
    if (unit.count(unit[(span - 1) % p]) != 1 and span < p + 2) or (p == 1 and span < 3):
        return None
    return lo, p


def flat_body(body):
    out = []
    for item, count in body:
        out.extend(flat_body(item) * count if isinstance(item, list) else [item])
    return out


def rotation_free(body):
    """A loop body's shape, the same whichever call folding started it at (traces cut
    at different points fold one loop rotated): its least rotation, flat."""
    flat = flat_body(body)
    return repr(min(tuple(flat[i:] + flat[:i]) for i in range(len(flat))) if flat else ())


def time_steps(ev, plain, K, middle=None):
    """The time steps of a trace with returns (``calltree.time_steps``'s rule, from the
    calls open at ``middle``, the middle MPI call, and then at the middle event): (frame
    id, body, start and end positions of each whole step, whether the trace ended inside
    the frame: in a step), or None.  Two refinements:

    * a loop whose body holds an inner loop (``[residual MPI_Allreduce [swap exchange
      relax]^5]``: a check every N steps) steps by the inner loop's iterations, each
      from one call its body makes once (``calltree.anchor``), the outer body's other
      calls in the step they follow;
    * set-up code that ends in the body's calls (a solver's ``r = b - A x``) is no step:
      when the call just before the repeating stretch is one the body makes once, the
      steps start at that call (the set-up made it, then the body's tail)."""
    n = len(ev)
    if n == 0 or np.count_nonzero(ev) == n:
        return None
    for at in dict.fromkeys(([] if middle is None else [middle]) + [n // 2]):
        found = _steps_at(ev, plain, K, at)
        if found is not None:
            return found
    return None


def _steps_at(ev, plain, K, middle):
    n = len(ev)
    ids, opened = calltree.open_frames(ev, middle)
    for frame, first in [(-1, 0)] + [(int(i), int(s) + 1) for i, s in zip(ids.tolist(), opened.tolist())]:
        child_ids, child_pos = calltree.child_calls(ev, first, frame < 0)
        if len(child_ids) < 2:
            continue
        children = plain[child_ids]
        f_ids, f_counts, table = calltree.fold(children, K)
        memo, start, widest = {}, 0, None
        for i, c in zip(f_ids.tolist(), f_counts.tolist()):
            span = 1 if i >= 0 else calltree._body_length(table, -i - 1, memo) * c
            if i < 0 and (widest is None or span > widest[1]):
                widest = (start, span, -i - 1)
            start += span
        m = len(children)
        if widest is None:
            cut = _cut_repeat(children)
            if cut is None or frame < 0 or calltree._frame_end(ev, first) is not None:
                continue
            # a trace stopped in its second or third step: too few repetitions to fold,
            # but the calls it was making when it stopped repeat its first steps'
            lo, period = cut
            whole = (m - lo - 1) // period
            first_child = lo + period * np.arange(whole, dtype=np.int64)
            bounds = np.append(child_pos, n)
            return frame, [(int(i), 1) for i in children[lo:lo + period].tolist()], bounds[first_child], \
                bounds[first_child + period], True
        loop = widest[2]
        period = calltree._body_length(table, loop, memo)
        lo, hi = calltree._repeating_stretch(children, widest[0], widest[0] + widest[1], period)
        if (hi - lo) // period < 2:
            continue
        end = n if frame < 0 else calltree._frame_end(ev, first)
        inner = [-int(i) - 1 for i in table.body(loop)[0].tolist() if i < 0]
        body = calltree.body_ids(table, loop)
        marker = calltree.anchor(children, table, inner[0]) if inner else None
        if marker is not None:
            starts = (lo + np.flatnonzero(children[lo:hi] == marker)).tolist()
            body = calltree.body_ids(table, inner[0])
            flat = flat_body(body)
            r = flat.index(int(marker))
            unit = flat[r:] + flat[:r]
            tail = hi
        else:
            starts = list(range(lo, hi - period + 1, period))
            unit = children[lo:lo + period].tolist()
            tail = starts[-1] + period
        if not starts:
            continue
        starts, tail = _resync(children, unit, starts, tail)
        starts, tail, delta = _set_up_phase(children, unit, starts, tail)
        if delta:
            # again from the first step in its new phase: the other steps' starts follow it
            k = delta % len(unit)
            unit = list(unit[k:]) + list(unit[:k])
            if children[starts[0]:starts[0] + len(unit)].tolist() == unit:
                starts, tail = _resync(children, unit, starts[:1], starts[0] + len(unit))
        if delta and all(not isinstance(item, list) and count == 1 for item, count in body):
            flat = [i for i, _ in body]
            at = (flat.index(int(children[starts[0]])) if int(children[starts[0]]) in flat else 0)
            body = body[at:] + body[:at]
        first_child = np.array(starts, dtype=np.int64)
        last_child = np.append(first_child[1:], tail).astype(np.int64)
        if end is None and len(last_child) and last_child[-1] == m:
            # the trace stopped inside the frame, in its loop's last step (all its calls entered)
            first_child, last_child = first_child[:-1], last_child[:-1]
        if len(first_child) < 2:
            continue
        bounds = np.append(child_pos, n if end is None else end)
        return frame, body, bounds[first_child], bounds[last_child], end is None
    return None
