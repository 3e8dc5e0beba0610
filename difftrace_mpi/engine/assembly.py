"""The Results assembled from what the steps computed (functional core, on the root): the
inputs and notes, the trace states, the divergences and noise of more normal runs, and the
last step that files every setting, orders the ranking and gives the verdict.

While the steps run, the root collects their outputs in ``Pieces`` (engine-private: the
keyword arguments of ``results.Results``, each setting as those of ``results.Combo``);
``make_results`` makes the Results from them once, at the end."""
from types import SimpleNamespace

import numpy as np

from .. import config
from ..config import attr_name, combo_name
from ..kernels.nlr import open_calls
from ..naming import describe_keys
from ..results import Combo, Results, Setting
from ..results.data import nlr_priority as priority
from ..stages.classify.classes import class_cap_note
from ..stages.classify.records import Skipped
from ..stages.compare import divergence as dv
from ..stages.classify import nlr_keep, ranking
from ..stages.diagnose import hang, timing, verdict, wording


class Pieces(SimpleNamespace):
    """The root's parts of the Results while the steps run: ``results.Results``' keyword
    arguments by name, ``combos`` as {name: ``results.Combo``'s keyword arguments}."""


def new_pieces(normal_path, faulty_path, runs, objects, processes, names, run_names, mpi_ranks, first_notes=()):
    """The root's pieces with the inputs: which traces each run has, and notes on
    missing traces and on runs that share few function names (``normal_path`` None: the
    faulty run alone, no normal run to miss traces); ``first_notes`` go first."""
    obj_index = {key: i for i, key in enumerate(objects)}
    present = np.zeros((2, len(objects)), dtype=bool)
    complete = np.ones((2, len(objects)), dtype=bool)
    notes = list(first_notes) + [n for run in runs for n in run.notes]
    for ri, run in enumerate(runs):
        for ref in run.refs:
            present[ri, obj_index[(ref.rank, ref.thread)]] = True
    for ri in (0, 1) if normal_path is not None else (1,):
        missing = [key for i, key in enumerate(objects) if not present[ri, i]]
        if missing:
            notes.append(f"{len(missing)} trace(s) missing from the {config.RUN_LABELS[ri]} run, counted as "
                         f"empty: {describe_keys(missing)}")
    # a run that crashed or hung early never reached its output code: only the names the
    # smaller side called can be expected in both
    shared = len(run_names[0] & run_names[1])
    fewer = min(len(run_names[0]), len(run_names[1]))
    if all(run_names) and shared < config.MIN_SHARED_NAMES * fewer:
        notes.append(f"only {shared} of the {fewer} function names of the run that called fewer are in the "
                     f"other: are they runs of the same program, built the same way? (differences then say "
                     f"little about a fault)")
    n = len(objects)
    return Pieces(normal_path="" if normal_path is None else str(normal_path), faulty_path=str(faulty_path),
                  names=names, objects=objects, processes=processes, present=present, complete=complete,
                  formats=[r.fmt for r in runs], rank_sources=[r.rank_source for r in runs], notes=notes,
                  mpi_ranks=mpi_ranks, entries=np.zeros((2, n), dtype=np.int64), open_calls=[[""] * n, [""] * n],
                  diverged_at=np.full(n, -1, dtype=np.int64), diverged_to=np.full(n, -1, dtype=np.int64),
                  stopped=np.zeros(n, dtype=bool), endings={}, combos={}, divergences={}, rows=[], verdict=None,
                  order_free=None)


def make_results(pieces):
    """The Results, made once from the root's pieces."""
    fields = dict(vars(pieces))
    fields["combos"] = {name: Combo(**parts) for name, parts in pieces.combos.items()}
    return Results(**fields)


def add_setting(pieces, filter_label, k, gtable, summaries, times, timing_ratio, timing_clock):
    """One (filter, K) setting's pieces (``results.Combo``'s fields; its attribute settings
    and whole NLRs come later): its loop table, every trace's NLR length, sameness and tail
    (``nlr_keep.combine`` of the shards' summaries), and its loop timing where traces had
    timestamps."""
    lengths, same, tails = nlr_keep.combine(summaries, len(pieces.objects))
    pieces.combos[combo_name(filter_label, k)] = dict(
        filter=filter_label, k=k, loops=[gtable.body(i) for i in range(len(gtable))], nlr=None, lengths=lengths,
        same=same, tails=tails, attrs={},
        loop_timing=timing.timing_view(times, pieces.objects, same, min_ratio=timing_ratio, clock=timing_clock)
        if any(times) else None)


def nlr_priority(pieces):
    """``Results.nlr_priority`` of the pieces (the hang's first trace that left the normal
    path needs no NLR tail)."""
    first = hang.hang_view(pieces.objects, pieces.present, pieces.complete, pieces.entries, pieces.open_calls,
                           pieces.diverged_at, pieces.diverged_to, limit=1)
    return priority(pieces.objects, pieces.verdict, pieces.rows, first, pieces.diverged_at)


def note_folding(pieces, folded):
    """What was compared modulo order (``stages.compare.order``, summed over the shards): kept in
    the Results and said in a note."""
    traces, blocks, held, dropped = (int(x) for x in folded)
    if not traces:
        return
    pieces.order_free = {"traces": traces, "blocks": blocks, "events": held, "unfinished": dropped}
    pieces.notes.append(
        f"order compared as free in {traces} traces: {blocks} blocks of calls after arrival-order completions, "
        f"polling or dynamic schedules ({held} events) were compared as the set of calls they hold, not their "
        f"order or number" + (f"; {dropped} events of blocks still unfinished where a trace stopped were left "
                              f"out (what a stopped trace did there depends on arrival)" if dropped else ""))


def once_per_array(arrays, fn):
    """``fn`` of each array, computed once per array object: traces of one content share
    one array (``stages.compare.twins.Contents``)."""
    done = {}
    return [done[id(a)] if id(a) in done else done.setdefault(id(a), fn(a)) for a in arrays]


NO_CALLS = np.empty(0, dtype=np.int32)


def trace_states(traces, gevents, counted, runs, objs, complete, notes, endings):
    """This shard's trace states as arrays: per trace run, object, complete, calls
    entered, events; the calls open at the end as CSR (offsets, ids), meaningful only in
    traces that record returns (not entry-only ones); the notes of traces that have some;
    the end records of its processes.  ``counted``: per trace, (calls entered, whether no call
    is open at the end) where reading counted them (``engine.reading.Reading``), else None:
    counted here; a trace whose calls may be open at the end is scanned for them."""
    uncounted = [i for i, c in enumerate(counted) if c is None]
    entries = np.array([0 if c is None else c[0] for c in counted], dtype=np.int64)
    entries[uncounted] = once_per_array([gevents[i] for i in uncounted], np.count_nonzero)
    n_events = np.array([len(ev) for ev in gevents], dtype=np.int64)
    records_returns = np.array([getattr(t, "returns", True) for _, t in traces], dtype=bool)
    with_returns = np.flatnonzero(records_returns | (entries < n_events))     # cut before a return too
    closed = [counted[i] is not None and counted[i][1] for i in with_returns.tolist()]
    scanned = iter(once_per_array([gevents[i] for i, c in zip(with_returns.tolist(), closed) if not c], open_calls))
    stacks = [NO_CALLS if c else next(scanned) for c in closed]
    # a trace that stopped inside a free block lost the block's calls (``stages.compare.order``):
    # where it waits is what its own events had open
    stacks = [getattr(traces[i][1], "open_at_end", None) if getattr(traces[i][1], "open_at_end", None) is not None
              else stack for i, stack in zip(with_returns.tolist(), stacks)]
    offsets = np.zeros(len(traces) + 1, dtype=np.int64)
    offsets[with_returns + 1] = [len(s) for s in stacks]
    np.cumsum(offsets, out=offsets)
    return (runs, objs, complete, entries, n_events, offsets, np.concatenate(stacks + [np.empty(0, np.int32)]),
            notes, endings)


def apply_trace_states(pieces, states):
    """Every shard's trace states into the pieces (notes grouped by text, end records
    by process)."""
    by_note = {}
    for runs, objs, done, entered, events, offsets, stack_ids, notes, endings in states:
        pieces.complete[runs, objs] = done
        pieces.entries[runs, objs] = entered
        for i in np.flatnonzero(np.diff(offsets)).tolist():
            pieces.open_calls[int(runs[i])][int(objs[i])] = \
                " > ".join(pieces.names[c] for c in stack_ids[offsets[i]:offsets[i + 1]].tolist())
        for i, trace_notes in notes:
            for note in trace_notes:
                by_note.setdefault((int(runs[i]), note), []).append(pieces.objects[int(objs[i])])
        pieces.endings.update(endings)
    for (ri, note), keys in sorted(by_note.items()):
        pieces.notes.append(f"{config.RUN_LABELS[ri]} run, {describe_keys(sorted(keys))}: {note}")
    leaks = [(r, k[5:], e[k]) for (ri, r), e in sorted(pieces.endings.items()) if ri == 1
             for k in sorted(e) if k.startswith("open_") and e[k] > pieces.endings.get((0, r), {}).get(k, 0)]
    if leaks:
        shown = ", ".join(f"rank {r}: {n} {kind}" for r, kind, n in leaks[:6])
        pieces.notes.append(f"MPI objects left open at the end of the faulty run, more than in the normal run "
                             f"({shown}{' ...' if len(leaks) > 6 else ''}): a leak?")
    note_swapped(pieces)


SWAPPED = ": were the two runs given the other way round? (the normal run comes first)"


def _stopped_traces(pieces, ri):
    """The traces of run ``ri`` that stopped early: with calls still open at their end, or
    of a process killed by a signal (a hung run ended from outside)."""
    killed = {r for (run, r), e in pieces.endings.items() if run == ri and e.get("how") == "signal"}
    return sorted(key for o, key in enumerate(pieces.objects)
                  if pieces.present[ri][o] and (pieces.open_calls[ri][o] or key[0] in killed))


def note_swapped(pieces):
    """A normal run that looks like the failed one (it crashed, or its traces stopped early)
    beside a faulty run that does not: the two were probably given the other way round,
    and every difference would then read backwards; one note says so."""
    normal_deaths = sorted(r for (ri, r), e in pieces.endings.items() if ri == 0 and verdict.died(e))
    faulty_deaths = [r for (ri, r), e in pieces.endings.items() if ri == 1 and verdict.died(e)]
    if normal_deaths and not faulty_deaths:
        first = pieces.endings[(0, normal_deaths[0])]
        pieces.notes.append(f"the NORMAL run crashed (rank {normal_deaths[0]}: {wording.describe_ending(first)}"
                             + (f", and {len(normal_deaths) - 1} more" if len(normal_deaths) > 1 else "")
                             + ") and the faulty one did not" + SWAPPED)
        return
    stopped = _stopped_traces(pieces, 0)
    if stopped and not faulty_deaths and not _stopped_traces(pieces, 1):
        killed = sorted({e.get("signal", "a signal") for (ri, _), e in pieces.endings.items()
                         if ri == 0 and e.get("how") == "signal"})
        pieces.notes.append(f"the NORMAL run looks like the failed one: {len(stopped)} of its traces stopped early "
                             f"({describe_keys(stopped)}" + (f"; killed by {', '.join(killed)}" if killed else "")
                             + ") while every trace of the faulty run ran to its end" + SWAPPED)


def note_noise(noise, points, contexts):
    """Where a normal run's traces first differ from another normal run's: {obj: (event
    position, call path ids)}, the earliest over the normal runs."""
    where = {obj: ctx for part in contexts for run, obj, ctx in part if run == 0}
    for obj, position in zip(*(p.tolist() for p in points)):
        path = [f for f, *_ in where[obj]["where"] if f >= 0] if obj in where else []
        if obj not in noise or position < noise[obj][0]:
            noise[obj] = (position, path)


def note_equal(equal_elsewhere, points, objs):
    """The objects whose faulty trace equals another normal run's."""
    differing = set(points[0].tolist())
    equal_elsewhere |= {o for o in set(objs.tolist()) if o not in differing}


def set_divergences(pieces, maps, points, gathered, search, noise=None, equal_elsewhere=(), noisy_calls=()):
    """The per-trace divergences and stopped traces into the pieces; the hang view's
    bracket of the first difference for stopped traces that left the normal path."""
    contexts = {(run, obj): ctx for part in gathered for run, obj, ctx in part}
    n = len(pieces.objects)
    entry_only_prefix = np.zeros(n, dtype=bool)
    for obj, position in zip(points[0].tolist(), points[1].tolist()):
        normal, faulty = contexts.get((0, obj)), contexts.get((1, obj))
        if normal is not None and faulty is not None and not faulty["returns"]:
            entry_only_prefix[obj] = position == faulty["length"] < normal["length"]
    pieces.stopped = np.array(verdict.stopped_objects(pieces.present, pieces.complete, pieces.open_calls,
                                                       pieces.endings, pieces.objects, entry_only_prefix),
                               dtype=bool)
    normal_cut = pieces.present[0] & ~pieces.complete[0]
    pieces.divergences = verdict.trace_divergences(pieces.objects, pieces.names, maps[0], pieces.stopped,
                                                    pieces.open_calls, points, contexts, noise, equal_elsewhere,
                                                    normal_cut)
    cut = sorted(d.key for d in pieces.divergences.values() if d.status == dv.CUT)
    if cut:
        pieces.notes.append(f"{len(cut)} normal trace(s) cut short ({describe_keys(cut)}): the faulty trace equals "
                             f"each up to where it ends and goes on; what it did after cannot be compared (no "
                             f"difference is counted there): compare with a normal run traced to its end")
    for obj, d in pieces.divergences.items():
        faulty = contexts.get((1, obj))
        if d.stopped and d.left_path and faulty is not None:
            pieces.diverged_at[obj] = faulty["calls_before"]
            pieces.diverged_to[obj] = faulty["calls_before"] + 1
    pieces.search_rounds = search.rounds
    if noisy_calls:
        pieces.notes.append(f"the normal runs differ in their calls to {len(noisy_calls)} function(s), left out of "
                             f"the comparison of each trace with its twin: {', '.join(noisy_calls[:8])}"
                             + (" ..." if len(noisy_calls) > 8 else ""))


def finish(pieces, tasks, gathered, merged, grid, top, timings, peak_rss, busy, max_classes, free_ids=None):
    """The root's last step: every task's levels and lattices into their setting (a task
    over the class cap stated in one note instead), the rows sorted, the grid and the
    timings recorded.  ``free_ids``: per name, met inside an order-free block (the
    verdict's confidence)."""
    if isinstance(merged, Skipped):
        merged = [merged] * (2 * len(tasks))
    rows, skipped = [], []
    for part in gathered:
        for t, block, task_rows in part:
            cname, aname = tasks[t][0], tasks[t][3]
            if isinstance(block, Skipped):      # over the class cap: stated, no setting
                skipped.append((t, f"{cname} {aname}", block.reason))
                continue
            pair = tuple(merged[2 * t:2 * t + 2]) if merged is not None else (None, None)
            pieces.combos[cname]["attrs"][aname] = Setting(block["thread"], block["process"], pair)
            rows.extend(task_rows)
    for combo in pieces.combos.values():     # grid order, whoever computed them
        combo["attrs"] = {a: combo["attrs"][a] for a in (attr_name(*x) for x in grid.attributes) if a in combo["attrs"]}
    note = class_cap_note([(name, over) for _, name, over in sorted(skipped)], max_classes)   # grid order
    if note:
        pieces.notes.append(note)
    pieces.rows = ranking.ordered(rows)
    pieces.verdict = verdict.build(pieces.objects, pieces.divergences, pieces.stopped, pieces.endings,
                                    pieces.open_calls,
                                    any(c["loop_timing"] is not None and bool(c["loop_timing"]["flags"])
                                        for c in pieces.combos.values()),     # a loop's timing flagged
                                    ranking=ranking.lead(pieces.rows),
                                    arguments=any(n.startswith("MPI_") and n.endswith("]") for n in pieces.names),
                                    free=frozenset(pieces.names[i] for i in np.flatnonzero(free_ids).tolist())
                                    if free_ids is not None else frozenset())
    pieces.verdict["order_free"] = pieces.order_free
    pieces.grid = grid.as_dict(top)
    pieces.timings = dict(timings)
    pieces.timings.update({f"peak_rss_mb_rank{r}": mb for r, mb in enumerate(peak_rss)})
    steps = list(busy[0])
    pieces.busy_by_rank = (steps, np.array([[b.get(s, 0.0) for s in steps] for b in busy], dtype=np.float64))
