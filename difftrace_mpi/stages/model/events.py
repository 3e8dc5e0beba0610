"""The call structure of one trace's event stream, for tables of events: each event's call
depth and, for a return, the function it returns from (functional core, numpy only)."""
import numpy as np


def call_levels(events):
    """``(depth, callee)`` of an event stream (ids, 0 = a return): ``depth`` is the number
    of calls open around the event's call (0: outermost), the same for a call and its
    return; ``callee`` is the event's function id, for a return the id of the call it
    closes (0 where the stream returns past its start, as a trace cut in the middle of a
    call does)."""
    events = np.asarray(events, dtype=np.int64)
    is_return = events == 0
    after = np.cumsum(np.where(is_return, -1, 1))
    depth = np.where(is_return, after, after - 1)
    callee = events.copy()
    if is_return.any():
        # at one depth, calls and their returns alternate in stream order: a return's call is
        # the event just before it among the events at its depth
        order = np.lexsort((np.arange(len(events)), depth))
        previous = np.empty_like(order)
        previous[1:] = order[:-1]
        previous[0] = -1
        rets = np.flatnonzero(is_return[order])
        before = previous[rets]
        matched = (before >= 0) & (depth[np.maximum(before, 0)] == depth[order[rets]]) \
            & ~is_return[np.maximum(before, 0)]
        callee[order[rets]] = np.where(matched, events[np.maximum(before, 0)], 0)
    return depth, callee
