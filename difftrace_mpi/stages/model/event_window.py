"""The call structure of a window of one trace's events, for the events tables
(``Results.events``, ``api.load_run``): each event's depth, its call/return partner, the
call around it and the call's number, computed for events [start, stop) only.

One rule throughout, the analysis's (``kernels.nlr.match_returns``, ``open_frames``): the
events are a stack of open calls; a return with nothing open is ignored (it closes
nothing: depth 0, no partner, no parent).  A window of a long trace costs memory in the
window's size: the calls open where the window starts come from one pass of the kernel
(memory in the call depth), the returns of calls still open where it stops from a
forward scan in chunks.  Numpy only.
"""
import numpy as np

from ...kernels.nlr import open_frames
from ...model import stored_events

SCAN_CHUNK = 1 << 20          # events per step of the forward scan for returns past the window


def window(events, start=0, stop=None):
    """The call structure of ``events[start:stop]`` (ids, 0 = a return) as a dict of arrays,
    one entry per event of the window (``start``/``stop`` as a slice takes them):

    - ``position`` (int64): the event's index in ``events``;
    - ``is_return`` (bool);
    - ``callee`` (int64): the function id; for a return that of the call it closes
      (0: a return with nothing open);
    - ``depth`` (int64): calls open around the event's call (0: outermost), the same for a
      call and its return; 0 for a return with nothing open;
    - ``matching`` (int64): for a call the position of its return, for a return that of
      its call (-1: a call still open at the end, a return with nothing open);
    - ``parent`` (int64): the position of the call the event's call was made in (-1: at
      depth 0);
    - ``call`` (int64): the number of the event's call among the trace's calls, 0-based in
      the order entered (what ``Results.diverged_at`` and the hang table's ``calls_from``
      count); for a return that of the call it closes (-1: nothing open).
    """
    full = stored_events(events)
    start, stop, _ = slice(start, stop).indices(len(full))
    stop = max(start, stop)
    ev = np.asarray(full[start:stop], dtype=np.int64)
    n = len(ev)
    before_ids, before_pos = open_frames(full, start)        # the calls open at ``start``, outermost first
    before_ids, before_pos = before_ids.astype(np.int64), before_pos.astype(np.int64)
    is_return = ev == 0
    # stack size after each event, a return with nothing open ignored: the running sum
    # reflected at 0 (s = c - min(0, min c)), from the calls open at the start
    c = len(before_ids) + np.cumsum(np.where(is_return, -1, 1))
    size = c - np.minimum(np.minimum.accumulate(c), 0) if n else c
    prior = np.empty(n, dtype=np.int64)
    if n:
        prior[0] = len(before_ids)
        prior[1:] = size[:-1]
    stray = is_return & (prior == 0)
    depth = np.where(is_return, size, size - 1)
    position = np.arange(start, stop, dtype=np.int64)

    matching = np.full(n, -1, dtype=np.int64)
    callee = np.where(is_return, 0, ev)
    call = np.full(n, -1, dtype=np.int64)
    calls_before = int(np.count_nonzero(full[:start]))
    entered = np.flatnonzero(~is_return)
    call[entered] = calls_before + np.arange(len(entered), dtype=np.int64)

    # at one depth, calls and their returns alternate in stream order
    live = np.flatnonzero(~stray)
    order = live[np.lexsort((live, depth[live]))]
    same_depth_prev = np.zeros(len(order), dtype=bool)
    if len(order) > 1:
        same_depth_prev[1:] = depth[order[1:]] == depth[order[:-1]]
    rets = np.flatnonzero(is_return[order])
    inside = rets[same_depth_prev[rets]]                   # the call is in the window, just before
    closes, opened = order[inside], order[inside - 1]
    matching[closes], matching[opened] = opened + start, closes + start
    callee[closes], call[closes] = ev[opened], call[opened]
    outside = order[rets[~same_depth_prev[rets]]]          # the call was open at ``start``
    if len(outside):
        d = depth[outside]
        matching[outside] = before_pos[d]
        callee[outside] = before_ids[d]
        call[outside] = _call_numbers(full, before_pos)[d]

    # calls whose return lies past the window: the k-th new low of the stack after ``stop``
    still_open = entered[matching[entered] < 0]
    if len(still_open):
        closing = _returns_after(full, stop, int(size[-1]), int(depth[still_open].min()))
        matching[still_open] = closing[depth[still_open]]

    # the call an event's call was made in: the last call one level up before it
    parent = np.full(n, -1, dtype=np.int64)
    nested = np.flatnonzero((depth > 0) & ~stray)
    if len(nested):
        calls_sorted = entered[np.lexsort((entered, depth[entered]))]
        width = n + 1
        keys = depth[calls_sorted] * width + calls_sorted
        want = (depth[nested] - 1) * width + nested
        at = np.searchsorted(keys, want, side="left") - 1
        ok = at >= 0
        ok[ok] = depth[calls_sorted[at[ok]]] == depth[nested[ok]] - 1
        parent[nested[ok]] = calls_sorted[at[ok]] + start
        rest = nested[~ok]
        parent[rest] = before_pos[depth[rest] - 1]
    return {"position": position, "is_return": is_return, "callee": callee, "depth": depth,
            "matching": matching, "parent": parent, "call": call}


def _call_numbers(events, positions):
    """The number of the call at each of ``positions`` (sorted call entries) among the
    calls of ``events``: one pass over the events before the last of them."""
    out = np.empty(len(positions), dtype=np.int64)
    total, at = 0, 0
    for i, p in enumerate(positions.tolist()):
        total += int(np.count_nonzero(events[at:p]))
        out[i], at = total, p
    return out


def _returns_after(events, stop, open_at_stop, lowest):
    """Positions of the returns that close the calls open at ``stop`` (``open_at_stop`` of
    them), by depth: entry d closes the call at depth d (-1: never closed).  Scans forward
    in chunks until the call at depth ``lowest`` is closed or the events end."""
    found = np.full(open_at_stop, -1, dtype=np.int64)
    low = now = open_at_stop            # the lowest stack so far, the stack now
    at, n = stop, len(events)
    while low > lowest and at < n:
        chunk = np.asarray(events[at:at + SCAN_CHUNK])
        running = now + np.cumsum(np.where(chunk == 0, -1, 1))
        lows = np.minimum(np.minimum.accumulate(running), low)
        # each new low is the stack one step down: the call at that depth returned
        new = np.flatnonzero((lows < np.concatenate(([low], lows[:-1]))) & (running >= 0))
        found[running[new]] = at + new
        low, now = min(low, max(0, int(lows[-1]))), max(0, int(running[-1]))
        at += len(chunk)
    return found
