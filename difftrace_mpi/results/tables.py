"""The results as tables for scripts and notebooks (``difftrace_mpi.api``, docs/api.md), and
as plain data for JSON: functions of a ``Results``, which offers each as a method.

Each table is a pandas DataFrame; ``as_frame=False`` gives its rows as a list of dicts.
One meaning of ``position`` in all of them: an event's index in its trace as read
(0-based, what ``events()`` and ``api.load_run`` number); ranking rows are ``row``s."""
import os

import numpy as np

from ..errors import DiffTraceError
from ..model import plain_name
from ..stages.classify import cluster
from ..stages.model import event_window


def pandas_module():
    """pandas (a dependency of the package); DiffTraceError saying so where it is missing."""
    try:
        import pandas
    except ImportError:
        raise DiffTraceError("pandas is not installed, and difftrace_mpi's tables are pandas DataFrames: "
                             "pip install pandas (a dependency of difftrace_mpi: reinstalling it brings pandas)"
                             ) from None
    return pandas


def as_table(records, columns, as_frame=None):
    """Table rows (dicts) as a pandas DataFrame with ``columns`` in that order (None or
    True), or, asked with ``as_frame=False``, as the list of dicts itself (plain data, for
    JSON or tests).  Without pandas: DiffTraceError (pandas is a dependency)."""
    if as_frame is False:
        return records
    pandas = pandas_module()
    frame = pandas.DataFrame.from_records(records, columns=list(columns))
    for column in columns:          # integers with gaps stay integers (pandas' Int64), not floats
        values = [r.get(column) for r in records]
        if None in values and _all_ints(v for v in values if v is not None):
            frame[column] = pandas.array(values, dtype="Int64")
    return frame


def _all_ints(values):
    found = False
    for v in values:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            return False
        found = True
    return found


RANKING_COLUMNS = ("row", "combo", "filter", "k", "attributes", "linkage", "bscore", "clusters",
                   "changed_clustering", "structured", "localised", "top_processes", "top_threads")
SUSPECT_COLUMNS = ("row", "combo", "attributes", "linkage", "level", "place", "rank", "thread", "score",
                   "change", "shared_of_normal", "shared_of_faulty")
CULPRIT_COLUMNS = ("rank", "thread", "status", "clock", "iteration", "call", "why")
DIVERGENCE_COLUMNS = ("rank", "thread", "status", "position", "clock", "clock_end", "stopped", "normal", "faulty",
                      "call_path", "loop", "iteration", "iterations")
HANG_COLUMNS = ("rank", "thread", "progress", "open_calls", "nlr_tail", "left_normal_path", "calls_from", "calls_to")
TRACE_COLUMNS = ("rank", "thread", "present_normal", "present_faulty", "complete_normal", "complete_faulty",
                 "calls_normal", "calls_faulty", "open_calls_normal", "open_calls_faulty", "stopped", "calls_from",
                 "calls_to", "nlr_tokens_normal", "nlr_tokens_faulty", "nlr_same")
EVENT_COLUMNS = ("rank", "thread", "position", "event", "name", "function", "depth", "matching", "parent", "call",
                 "timestamp")
EVENTS_MAX = 10_000_000   # events one events() call gives unless asked for more (about 60 bytes each)
RUNS = {"normal": 0, "faulty": 1}


def ranking_table(results, as_frame=None):
    """The ranking table, one row per setting, best first (``row`` 1 leads):
    ``top_processes`` lists ranks, ``top_threads`` (rank, thread) pairs, most
    suspect first."""
    return as_table([{"row": i, "combo": r.combo, "filter": r.filter, "k": r.k, "attributes": r.attributes,
                      "linkage": r.linkage, "bscore": r.bscore, "clusters": r.clusters,
                      "changed_clustering": r.changed_clustering, "structured": r.structured,
                      "localised": r.localised, "top_processes": [p for p, _ in r.top_processes],
                      "top_threads": [tuple(t) for t, _ in r.top_threads]}
                     for i, r in enumerate(results.rows, 1)], RANKING_COLUMNS, as_frame)


def suspects_table(results, as_frame=None):
    """Every ranking row's top suspects, one row each (long format): the ranking
    table's ``row``, ``level`` (``process``: ``thread`` is None; or ``thread``),
    ``place`` in that row (1 = most suspect), the score and how the suspect changed
    (``Row.change_of``)."""
    records = []
    for i, r in enumerate(results.rows, 1):
        for level, items in (("process", [((p, None), s, ("p", p)) for p, s in r.top_processes]),
                             ("thread", [(tuple(t), s, tuple(t)) for t, s in r.top_threads])):
            for place, ((rank, thread), score, key) in enumerate(items, 1):
                records.append({"row": i, "combo": r.combo, "attributes": r.attributes,
                                "linkage": r.linkage, "level": level, "place": place, "rank": rank,
                                "thread": thread, "score": score, **r.change_of(key)})
    return as_table(records, SUSPECT_COLUMNS, as_frame)


def culprits_table(results, as_frame=None):
    """The verdict's culprits, first first (empty for results written before the
    verdict); ``clock`` and ``iteration`` are None where unknown."""
    return as_table([{c: culprit.get(c) for c in CULPRIT_COLUMNS}
                     for culprit in (results.verdict or {}).get("culprits", [])], CULPRIT_COLUMNS, as_frame)


def divergence_table(results, as_frame=None):
    """One row per trace that differs from its normal twin, in (rank, thread) order:
    where its first difference is (``position``: the index of the first event that
    differs, in both runs' traces as read: ``events(rank, thread, run)`` has it at that
    ``position``; ``clock``: MPI collectives before it), the calls there (``normal``,
    ``faulty``, space-separated), the call path (``a > b``) and its outermost loop with
    the iteration.  (Where order was compared as free, ``order_free``, or calls of
    more normal runs left out as noise, positions count the trace as compared.)"""
    records = []
    for _, d in sorted(results.divergences.items()):
        frame, body, iteration, iterations = d.loops[0] if d.loops else (None, None, None, None)
        records.append({"rank": d.key[0], "thread": d.key[1], "status": d.status, "position": d.position,
                        "clock": d.clock, "clock_end": d.clock_end, "stopped": d.stopped,
                        "normal": " ".join(d.normal), "faulty": " ".join(d.faulty),
                        "call_path": " > ".join(d.call_path),
                        "loop": f"[{' '.join(body)}] in {frame}" if body else None,
                        "iteration": iteration, "iterations": iterations})
    return as_table(records, DIVERGENCE_COLUMNS, as_frame)


def hang_table(results, as_frame=None):
    """The hang view as a table: every faulty trace that stopped early, least
    progressed first (``progress``: calls entered / its normal twin's), with the calls
    open where it stopped, where its NLR ends, and whether it left the normal path
    before stopping (its first difference in calls [calls_from, calls_to): call
    numbers, 0-based in the order entered, ``events()``'s ``call`` column).  Empty when
    no trace stopped early; ``hang_view()`` has the same as a dict."""
    view = results.hang_view(limit=len(results.objects))
    if not view:
        return as_table([], HANG_COLUMNS, as_frame)
    left = {key: where for key, _, where in view["left_normal_path"]}
    return as_table([{"rank": key[0], "thread": key[1], "progress": progress, "open_calls": calls,
                      "nlr_tail": tail, "left_normal_path": key in left,
                      "calls_from": left[key][0] if key in left else None,
                      "calls_to": left[key][1] if key in left else None}
                     for key, progress, calls, tail in view["least"]], HANG_COLUMNS, as_frame)


def traces_table(results, combo=None, as_frame=None):
    """The per-trace arrays by name, one row per trace in ``objects`` order: present
    and read to the end (``complete``) in each run, ``calls`` entered and
    ``open_calls`` at the end in each run, ``stopped`` (the faulty trace stopped
    early), ``calls_from``/``calls_to`` (where a stopped trace left the normal path:
    call numbers, missing elsewhere), and the NLR of setting ``combo`` (default: the
    best row's; missing without settings): its tokens in each run, ``nlr_same``."""
    pandas = pandas_module()
    n, both = len(results.objects), (("normal", 0), ("faulty", 1))
    columns = {"rank": np.array([r for r, _ in results.objects], dtype=np.int64),
               "thread": np.array([t for _, t in results.objects], dtype=np.int64)}
    for name, values in (("present", results.present), ("complete", results.complete), ("calls", results.entries),
                         ("open_calls", results.open_calls)):
        columns.update({f"{name}_{label}": np.asarray(values[run]) for label, run in both})
    columns["stopped"] = np.asarray(results.stopped, dtype=bool)
    columns["calls_from"] = optional_ints(pandas, results.diverged_at)
    columns["calls_to"] = optional_ints(pandas, results.diverged_to)
    setting = results.combo(combo) if results.combos else None
    for label, run in both:
        columns[f"nlr_tokens_{label}"] = optional_ints(pandas, setting.lengths[run] if setting else np.full(n, -1))
    columns["nlr_same"] = pandas.arrays.BooleanArray(np.asarray(setting.same if setting else np.zeros(n), bool),
                                                     np.full(n, setting is None))
    frame = pandas.DataFrame(columns, columns=list(TRACE_COLUMNS))
    if as_frame is False:
        return [{k: (None if v is pandas.NA else v) for k, v in row.items()}
                for row in frame.astype(object).to_dict("records")]
    return frame


def events(results, rank, thread=0, run="faulty", start=0, stop=None, max_events=EVENTS_MAX, path=None):
    """One trace's events as a DataFrame (Pipit's ``Trace.events``), read again from
    the run directory these results were made from: events [start, stop) (as a
    slice), one row each, indexed by ``position``.

    Columns: ``rank``, ``thread``; ``position`` (the event's index in the trace as
    read, 0-based: the one meaning of ``position`` in every table, so the divergence
    table's row of this trace points at its first differing event here); ``event``
    (``call`` or ``return``: Pipit's Enter and Leave); ``name`` (as traced, MPI
    arguments included; for a return the call it closes), ``function`` (plain name);
    ``depth`` (calls open around the call, 0 outermost; a call and its return share
    it); ``matching`` (the position of the call's return or the return's call, Pipit's
    ``_matching_event``; missing for a call still open at the end); ``parent`` (the
    position of the call it was made in); ``call`` (the call's number, 0-based in the
    order entered: the hang table's ``calls_from``); ``timestamp`` (ns, uftrace and
    OTF2 traces).  A return with nothing open closes nothing: no name, depth 0.

    ``run``: "faulty" or "normal"; ``path``: the run directory now, where it moved
    since the analysis.  A window of more than ``max_events`` events (None: no limit)
    is refused: a trace may hold 10^8 events, about 60 bytes each here.  DiffTraceError
    when the run directory is gone, the trace is not in it, or it changed since."""
    pandas = pandas_module()
    from ..readers import comparison_cache, discover_run, load_trace
    if run not in RUNS:
        raise DiffTraceError(f"run must be 'normal' or 'faulty', not {run!r}")
    index, key = RUNS[run], (int(rank), int(thread))
    obj = results.object_index(key)
    where = os.fspath(path) if path is not None else (results.normal_path, results.faulty_path)[index]
    if not where:
        raise DiffTraceError("these results have no normal run (the faulty run was analysed alone)")
    if not os.path.isdir(where):
        relative = "" if os.path.isabs(where) else " a relative path counts from the current directory"
        raise DiffTraceError(f"the {run} run directory of these results, {where}, is not there any more (moved or "
                             f"deleted since the analysis?{relative}): give where it is now, events(..., path=DIR)")
    if not results.present[index, obj]:
        raise DiffTraceError(f"rank {key[0]} thread {key[1]} has no trace in the {run} run of these results")
    ref = next((r for r in discover_run(where).refs if (r.rank, r.thread) == key), None)
    if ref is None:
        raise DiffTraceError(f"{where}: the trace of rank {key[0]} thread {key[1]} is not there any more: the run "
                             f"changed since the analysis")
    # read as the analysis read it: without the calls of the functions either run's tracer
    # counted instead of recording (ParLOT's automatic leaves)
    other = (results.normal_path, results.faulty_path)[1 - index]
    trace = load_trace(ref, comparison_cache([where] + ([other] if other else []))[0])
    calls = int(np.count_nonzero(trace.events))
    if calls != int(results.entries[index, obj]) and results.order_free is None:
        raise DiffTraceError(f"{ref.path}: {calls:,} calls, where the analysed trace had "
                             f"{int(results.entries[index, obj]):,}: the run changed since the analysis")
    first, last, _ = slice(start, stop).indices(len(trace.events))
    if max_events is not None and last - first > max_events:
        raise DiffTraceError(f"rank {key[0]} thread {key[1]}: {last - first:,} events in the window, more than "
                             f"max_events={max_events:,}: give start= and stop= (or max_events=None)")
    frame = events_frame(pandas, trace, first, max(first, last))
    frame.index = frame["position"].to_numpy()
    return frame


def as_dict(results):
    """The ranking table, consensus, hang view and timing flags as plain data (the
    JSON output)."""
    consensus = {
        "processes": [{"rank": r, "rows": n, "best_position": b}
                      for r, n, b in cluster.consensus(results.rows, "top_processes")],
        "threads": [{"rank": r, "thread": t, "rows": n, "best_position": b}
                    for (r, t), n, b in cluster.consensus(results.rows, "top_threads")]}
    view = results.hang_view()
    if view:
        view = {"stopped": view["stopped"], "stuck_in": [{"call": c, "traces": n} for c, n in view["stuck_in"]],
                "least_progressed": [{"rank": r, "thread": t, "progress": p, "open_calls": o,
                                      "nlr_tail": tail} for (r, t), p, o, tail in view["least"]],
                # calls_from, calls_to: the first difference lies in calls [from, to), 0-based
                "left_normal_path": [{"rank": r, "thread": t, "calls_from": a, "calls_to": b, "progress": p}
                                     for (r, t), p, (a, b, _) in view["left_normal_path"]],
                "left_normal_path_count": view["left_normal_path_count"],
                "on_normal_path": [{"rank": r, "thread": t} for (r, t), _ in view["on_normal_path"]],
                "on_normal_path_count": view["on_normal_path_count"],
                "left_singles_out": view["left_singles_out"]}
    timing = {}
    flags = results.timing_flags()
    if flags is not None:
        timing = {"timing": {c: {"rule": results.combos[c].loop_timing["rule"],
                                 "flags": [dict(f.as_dict(), body=results.loop_labels(c, f.loop)) for f in fl]}
                             for c, fl in flags.items()}}
    return {"verdict": results.verdict, "normal": results.normal_path, "faulty": results.faulty_path,
            "no_difference": results.no_difference,
            "divergences": [d.as_dict() for _, d in sorted(results.divergences.items())],
            "consensus": consensus, "hang": view, **timing, "rows": [r.as_dict() for r in results.rows]}


def events_frame(pandas, trace, start, stop, names=None):
    """Events [start, stop) of one ``model.Trace`` as a DataFrame of ``EVENT_COLUMNS``
    (``stages.model.event_window``); ``names``: the categories of ``name`` (default: the
    trace's own names), so that the frames of several traces share them."""
    w = event_window.window(trace.events, start, stop)
    own = [str(x) for x in trace.names]
    names = sorted(set(own[1:])) if names is None else names
    code_of = {x: i for i, x in enumerate(names)}
    codes = np.array([-1] + [code_of[x] for x in own[1:]], dtype=np.int64)[w["callee"]]
    plain = {x: plain_name(x) for x in names}
    plain_code = {x: i for i, x in enumerate(sorted(set(plain.values())))}
    plain_of = np.array([plain_code[plain[x]] for x in names] + [-1], dtype=np.int64)     # [-1]: no name
    n, stamps = len(codes), trace.timestamps
    return pandas.DataFrame(columns=list(EVENT_COLUMNS), data={
        "rank": np.full(n, trace.rank, dtype=np.int64), "thread": np.full(n, trace.thread, dtype=np.int64),
        "position": w["position"],
        "event": pandas.Categorical.from_codes(w["is_return"].astype(np.int8), ["call", "return"]),
        "name": pandas.Categorical.from_codes(codes, names),
        "function": pandas.Categorical.from_codes(plain_of[codes], list(plain_code)),
        "depth": w["depth"], "matching": optional_ints(pandas, w["matching"]),
        "parent": optional_ints(pandas, w["parent"]), "call": optional_ints(pandas, w["call"]),
        "timestamp": (pandas.array(np.asarray(stamps[start:stop]).astype(np.int64), dtype="Int64")
                      if stamps is not None else optional_ints(pandas, np.full(n, -1)))})


def optional_ints(pandas, values):
    """int64 ``values`` as pandas' Int64, missing where negative (-1: none)."""
    values = np.asarray(values, dtype=np.int64)
    return pandas.arrays.IntegerArray(np.maximum(values, 0), values < 0)
