"""The hang view: where a faulty run that stopped early (hung or killed) stopped, and
which of its stopped traces left the normal path before stopping."""
from ..classify import cluster


def stopped_traces(present, complete, open_calls):
    """Objects whose faulty trace stopped early (hung or killed): it ends inside calls the
    normal trace had left, or its file is incomplete.  ``open_calls``: [normal, faulty]."""
    return [i for i in range(present.shape[1])
            if present[1, i] and (open_calls[1][i] != open_calls[0][i] or not complete[1, i])]


def hang_view(objects, present, complete, entries, open_calls, diverged_at, diverged_to, limit=5,
              tail=lambda i: ""):
    """Progress of the faulty run where it stopped early (killed or hung): the traces
    that stopped with calls open, least progressed first.  Progress = calls entered in
    the faulty trace / in the normal trace of the same rank and thread.  Returns
    {"stopped": count, "stuck_in": [(innermost call, count)], "least": [(key, progress,
    open calls, NLR tail)], "left_normal_path": [(key, progress, (calls_from, calls_to,
    calls))], "on_normal_path": [(key, progress)], "left_normal_path_count",
    "on_normal_path_count"} or None when no faulty trace stopped inside a call the
    normal left.  The two groups split the stopped traces: those whose events are not
    the start of their normal trace's (likely causes; the first difference lies in
    their calls [calls_from, calls_to) of ``calls``, 0-based) and those that stopped on
    the normal path (waiting for others); least progressed first, ``limit`` of each.
    "left_singles_out": the first group names a likely cause only when it is fewer than
    half of the stopped traces (``cluster.localises``, the rule of the ranking rows).

    Arrays as in ``results.Results``; ``tail(i)``: where object i's faulty trace ended
    in the loop nest."""
    stopped = stopped_traces(present, complete, open_calls)
    if not stopped:
        return None
    progress = {i: entries[1, i] / entries[0, i] if entries[0, i] else 1.0 for i in stopped}
    innermost = {}
    for i in stopped:
        call = open_calls[1][i].rsplit(" > ", 1)[-1] or "(no open call)"
        innermost[call] = innermost.get(call, 0) + 1
    by_progress = sorted(stopped, key=lambda i: (progress[i], objects[i]))
    left = [i for i in by_progress if diverged_at[i] >= 0]
    on_path = [i for i in by_progress if diverged_at[i] < 0]
    return {"stopped": len(stopped),
            "stuck_in": sorted(innermost.items(), key=lambda x: (-x[1], x[0])),
            "least": [(objects[i], float(progress[i]), open_calls[1][i], tail(i)) for i in by_progress[:limit]],
            "left_normal_path": [(objects[i], float(progress[i]),
                                  (int(diverged_at[i]), int(diverged_to[i]), int(entries[1, i])))
                                 for i in left[:limit]],
            "on_normal_path": [(objects[i], float(progress[i])) for i in on_path[:limit]],
            "left_normal_path_count": len(left), "on_normal_path_count": len(on_path),
            # as for ranking rows: most stopped traces leaving the path (OpenMP scheduling,
            # or an effect that spread everywhere) singles out no cause
            "left_singles_out": bool(left) and cluster.localises(len(left), len(stopped))}
