"""The DiffTrace analysis of two runs, stage by stage, over the MPI choreography.

Each stage is a plain function from the core modules (filters, nlr, attributes, lattice,
cluster); this module only sequences them and tells the choreography what to share.
With one rank every collective is a no-op, so the serial tool and the MPI job are the
same code.
"""
import json
from dataclasses import dataclass, field

import numpy as np

from ..stages import attributes as attrs
from ..stages import cluster, divergence, filters, nlr, timing
from .choreography import Choreography, Skipped, peak_rss_mb
from ..stages.rows import LONG_ROWS, bytes_labels, pairs_csr, row_labels, take_rows
from ..errors import DiffTraceError
from ..stages.lattice import Lattice, cross_subsumption, jaccard_subsumption_direct, jaccard_subsumption_rows, merge
from ..kernels.nlr import open_calls
from ..model import RETURN_NAME
from ..readers import discover_run, load_trace

RUN_LABELS = ("normal", "faulty")
DEFAULT_FILTERS = ("11.mpi", "11.every")
DEFAULT_KS = (10,)
DEFAULT_ATTRIBUTES = ("sing.noFreq", "sing.actual", "doub.noFreq", "doub.log10")
DEFAULT_LINKAGES = ("ward", "average", "complete", "single")
DEFAULT_MAX_CONCEPTS = 100_000
DEFAULT_ROW_BLOCK_MIN = 2048   # class JSMs this large are computed in row blocks on all ranks
DEFAULT_FULL_LIMIT = 1024      # above this many objects only class-level JSMs are kept (8 MiB a matrix)
MIN_SHARED_NAMES = 0.5         # below this share of function names in common, warn: different programs?


@dataclass
class Grid:
    """The parameter grid of the ranking table."""
    filters: tuple = DEFAULT_FILTERS          # FilterSpec objects (or spec strings)
    ks: tuple = DEFAULT_KS
    attributes: tuple = DEFAULT_ATTRIBUTES    # "sing.noFreq" ...
    linkages: tuple = DEFAULT_LINKAGES
    custom: str = None

    def __post_init__(self):
        self.filters = tuple(f if isinstance(f, filters.FilterSpec) else filters.parse_filter(f, self.custom)
                             for f in self.filters)
        self.attributes = tuple(a if isinstance(a, tuple) else attrs.parse_attribute(a) for a in self.attributes)
        for method in self.linkages:
            if method not in cluster.LINKAGES:
                raise DiffTraceError(f"unknown linkage {method!r}; choose from {', '.join(cluster.LINKAGES)}")
        for k in self.ks:
            if int(k) < 2:
                raise DiffTraceError(f"K must be at least 2 (got {k})")
        if not (self.filters and self.attributes and self.linkages and (self.ks or all(f.k for f in self.filters))):
            raise DiffTraceError("the parameter grid is empty: give at least one filter, K, attribute and linkage")

    def combos(self):
        """(filter, K) pairs: a K inside a filter spec overrides the --k list for it."""
        out = []
        for spec in self.filters:
            for k in ((spec.k,) if spec.k else self.ks):
                if (spec.label, int(k)) not in [(s.label, kk) for s, kk in out]:
                    out.append((spec, int(k)))
        return out


def combo_name(spec, k):
    return f"{spec.label}.K{k}"


def attr_name(kind, freq):
    return f"{kind}.{freq}"


@dataclass
class Row:
    """One row of the ranking table."""
    filter: str
    k: int
    attributes: str
    linkage: str
    bscore: float
    clusters: int
    top_processes: list
    top_threads: list
    grid_index: int
    changes: dict = field(default_factory=dict)   # suspect key -> (kind, shared/normal, shared/faulty)
    structured: bool = True        # the normal run has classes (see cluster.has_structure)
    localised: bool = True         # the suspects touch fewer than half of the ranks (cluster.localises)

    def change_of(self, key):
        kind, share_n, share_f = self.changes.get(key, (0, 1.0, 1.0))
        return {"change": cluster.CHANGE_KINDS[int(kind)], "shared_of_normal": share_n, "shared_of_faulty": share_f}

    def as_dict(self):
        return {
            "filter": self.filter, "k": self.k, "attributes": self.attributes, "linkage": self.linkage,
            "bscore": self.bscore, "clusters": self.clusters, "structured": self.structured,
            "localised": self.localised,
            "top_processes": [{"rank": r, "score": s, **self.change_of(("p", r))} for r, s in self.top_processes],
            "top_threads": [{"rank": r, "thread": t, "score": s, **self.change_of((r, t))}
                            for (r, t), s in self.top_threads],
        }


@dataclass
class Results:
    """Everything the root knows at the end; written to HDF5 by ``store``."""
    normal_path: str
    faulty_path: str
    names: list
    objects: list                  # [(rank, thread)] thread-level objects (both runs)
    processes: list                # [rank]
    present: np.ndarray            # bool (2, N): trace present in normal / faulty
    complete: np.ndarray           # bool (2, N)
    formats: list
    rank_sources: list
    notes: list
    entries: np.ndarray = None     # int64 (2, N): calls entered per trace (0 where missing)
    open_calls: list = None        # [normal, faulty]: per object, calls open at the end ("a > b")
    # stopped faulty traces that left the normal path first: the first difference lies in
    # their calls [diverged_at, diverged_to) (0-based, in the order entered); -1 elsewhere
    diverged_at: np.ndarray = None     # int64 (N,)
    diverged_to: np.ndarray = None     # int64 (N,)
    combos: dict = field(default_factory=dict)    # name -> dict of arrays/matrices
    rows: list = field(default_factory=list)      # sorted Rows
    grid: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    # per step, each MPI rank's own work before the step's agreement (stragglers show here):
    # (step names, float64 (mpi_ranks, steps) seconds), or None
    busy_by_rank: tuple = None
    mpi_ranks: int = 1

    def __post_init__(self):
        n = len(self.objects)
        if self.entries is None:
            self.entries = np.zeros((2, n), dtype=np.int64)
        if self.open_calls is None:
            self.open_calls = [[""] * n, [""] * n]
        if self.diverged_at is None:
            self.diverged_at = np.full(n, -1, dtype=np.int64)
        if self.diverged_to is None:
            self.diverged_to = np.full(n, -1, dtype=np.int64)

    def hang_view(self, limit=5):
        """Progress of the faulty run where it stopped early (killed or hung); see the
        module-level ``hang_view``."""
        return hang_view(self, limit, self.nlr_tail)

    def nlr_tail(self, obj, tokens=3):
        """Where in the loop nest a faulty trace ended: its last NLR tokens under the best
        row's setting, e.g. "L1^7 MPI_Recv" (loops with their iteration counts)."""
        if not self.rows:
            return ""
        combo = f"{self.rows[0].filter}.K{self.rows[0].k}"
        ids, counts = self.nlr_of(combo, 1, obj)
        labels = [self.names[i] if i >= 0 else f"L{-i - 1}^{c}" for i, c in zip(ids.tolist(), counts.tolist())]
        return " ".join(labels[-tokens:])

    @property
    def no_difference(self):
        return all(not block[level]["scores"].any() for c in self.combos.values()
                   for block in c["attrs"].values() for level in ("thread", "process"))

    def nlr_of(self, combo, run, obj):
        """(ids, counts) of object ``obj``'s NLR in run 0 (normal) or 1 (faulty)."""
        rows, index = self.combos[combo]["nlr"][run]
        return rows[index[obj]]

    def timing_flags(self):
        """{combo: [timing.TimingFlag]} for the settings whose traces carry timestamps
        (uftrace, OTF2): loops whose iteration time changed while their structure did not,
        ranked.  None when no trace had timestamps."""
        return {c: v["loop_timing"]["flags"] for c, v in self.combos.items() if "loop_timing" in v} or None

    def loop_labels(self, combo, loop):
        """Loop ``loop``'s body as labels, e.g. ["MPI_Send", "L0^4"]."""
        return nlr.token_labels(nlr.NLR(*self.combos[combo]["loops"][loop]), self.names)

    def _timing_json(self):
        flags = self.timing_flags()
        if flags is None:
            return {}
        return {"timing": {c: {"rule": self.combos[c]["loop_timing"]["rule"],
                               "flags": [dict(f.as_dict(), body=self.loop_labels(c, f.loop)) for f in fl]}
                           for c, fl in flags.items()}}

    def ranking_json(self):
        consensus = {
            "processes": [{"rank": r, "rows": n, "best_position": b}
                          for r, n, b in cluster.consensus(self.rows, "top_processes")],
            "threads": [{"rank": r, "thread": t, "rows": n, "best_position": b}
                        for (r, t), n, b in cluster.consensus(self.rows, "top_threads")]}
        hang = self.hang_view()
        if hang:
            hang = {"stopped": hang["stopped"], "stuck_in": [{"call": c, "traces": n} for c, n in hang["stuck_in"]],
                    "least_progressed": [{"rank": r, "thread": t, "progress": p, "open_calls": o,
                                         "nlr_tail": tail} for (r, t), p, o, tail in hang["least"]],
                    # calls_from, calls_to: the first difference lies in calls [from, to), 0-based
                    "left_normal_path": [{"rank": r, "thread": t, "calls_from": a, "calls_to": b, "progress": p}
                                         for (r, t), p, (a, b, _) in hang["left_normal_path"]],
                    "left_normal_path_count": hang["left_normal_path_count"],
                    "on_normal_path": [{"rank": r, "thread": t} for (r, t), _ in hang["on_normal_path"]],
                    "on_normal_path_count": hang["on_normal_path_count"],
                    "left_singles_out": hang["left_singles_out"]}
        return json.dumps({"normal": self.normal_path, "faulty": self.faulty_path,
                           "no_difference": self.no_difference, "consensus": consensus, "hang": hang,
                           **self._timing_json(), "rows": [r.as_dict() for r in self.rows]}, indent=2)


def hang_view(state, limit=5, tail=lambda i: ""):
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

    ``state``: Results, or anything with its objects, present, complete, entries,
    open_calls, diverged_at and diverged_to (the report reads them from a results file);
    ``tail(i)``: where object i's faulty trace ended in the loop nest."""
    stopped = stopped_traces(state.present, state.complete, state.open_calls)
    if not stopped:
        return None
    progress = {i: state.entries[1, i] / state.entries[0, i] if state.entries[0, i] else 1.0 for i in stopped}
    innermost = {}
    for i in stopped:
        call = state.open_calls[1][i].rsplit(" > ", 1)[-1] or "(no open call)"
        innermost[call] = innermost.get(call, 0) + 1
    by_progress = sorted(stopped, key=lambda i: (progress[i], state.objects[i]))
    left = [i for i in by_progress if state.diverged_at[i] >= 0]
    on_path = [i for i in by_progress if state.diverged_at[i] < 0]
    return {"stopped": len(stopped),
            "stuck_in": sorted(innermost.items(), key=lambda x: (-x[1], x[0])),
            "least": [(state.objects[i], float(progress[i]), state.open_calls[1][i], tail(i))
                      for i in by_progress[:limit]],
            "left_normal_path": [(state.objects[i], float(progress[i]),
                                  (int(state.diverged_at[i]), int(state.diverged_to[i]), int(state.entries[1, i])))
                                 for i in left[:limit]],
            "on_normal_path": [(state.objects[i], float(progress[i])) for i in on_path[:limit]],
            "left_normal_path_count": len(left), "on_normal_path_count": len(on_path),
            # as for ranking rows: most stopped traces leaving the path (OpenMP scheduling,
            # or an effect that spread everywhere) singles out no cause
            "left_singles_out": bool(left) and cluster.localises(len(left), len(stopped))}


def stopped_traces(present, complete, open_calls):
    """Objects whose faulty trace stopped early (hung or killed): it ends inside calls the
    normal trace had left, or its file is incomplete.  ``open_calls``: [normal, faulty]."""
    return [i for i in range(present.shape[1])
            if present[1, i] and (open_calls[1][i] != open_calls[0][i] or not complete[1, i])]


def compact_ranges(values):
    """[1, 2, 3, 4, 6, 9, 10] -> '1-4, 6, 9-10'."""
    values = sorted(set(values))
    parts, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            parts.append(f"{start}" if start == v else f"{start}-{v}")
            start = None
    return ", ".join(parts)


def describe_keys(keys):
    """(rank, thread) keys in words: 'ranks 0-14 thread 0' or 'rank 3 threads 0-7' or a list."""
    threads = sorted({t for _, t in keys})
    ranks = sorted({r for r, _ in keys})
    if len(threads) == 1:
        return f"rank{'s' if len(ranks) > 1 else ''} {compact_ranges(ranks)} thread {threads[0]}"
    if len(ranks) == 1:
        return f"rank {ranks[0]} threads {compact_ranges(threads)}"
    shown = ", ".join(f"{r}.{t}" for r, t in keys[:12])
    return f"traces (rank.thread) {shown}" + (f" and {len(keys) - 12} more" if len(keys) > 12 else "")


class ClassRows(list):
    """Distinct rows as a list of (indices, data) pairs, views into one CSR block kept as
    ``csr`` = (indptr, indices, data), all int64."""

    def __init__(self, indptr, indices, data):
        super().__init__((indices[a:b], data[a:b]) for a, b in zip(indptr[:-1].tolist(), indptr[1:].tolist()))
        self.csr = (indptr, indices, data)


def _csr_arrays(matrix):
    """(indptr, indices, data) of a CSR matrix as int64 arrays, its rows as stored."""
    matrix = matrix.tocsr()
    return tuple(a.astype(np.int64, copy=False) for a in (matrix.indptr, matrix.indices, matrix.data))


def _rows_csr(rows):
    """(indptr, indices, data) of distinct rows: a ClassRows' own block, else assembled."""
    csr = getattr(rows, "csr", None)
    return csr if csr is not None else pairs_csr(rows)


def analyze(normal_path, faulty_path, grid=None, *, top=5, max_concepts=DEFAULT_MAX_CONCEPTS,
            lattices=True, full_limit=DEFAULT_FULL_LIMIT, row_block_min=DEFAULT_ROW_BLOCK_MIN,
            choreography=None, timing_ratio=timing.MIN_RATIO, timing_clock=timing.DEFAULT_CLOCK):
    """Run DiffTrace on two run directories. Collective; returns Results on the root, None elsewhere.

    ``timing_ratio`` and ``timing_clock``: the timing view's rule (``timing.compare_runs``:
    the factor an iteration time must change by, and which clocks may flag: both, wall or
    own, i.e. outside MPI calls), applied on the root to traces with timestamps."""
    grid = grid or Grid()
    timing.check_rule(timing_ratio, timing_clock)       # every rank, before any collective step
    ch = choreography or Choreography()

    # -- discovery (root) and the object list every rank agrees on -------------------
    runs = ch.on_root("finding traces", lambda: [discover_run(normal_path), discover_run(faulty_path)])
    objects = sorted({(r.rank, r.thread) for run in runs for r in run.refs})
    obj_index = {key: i for i, key in enumerate(objects)}
    processes = sorted({rank for rank, _ in objects})
    proc_index = {rank: i for i, rank in enumerate(processes)}
    n_obj, n_proc = len(objects), len(processes)
    ch.say(f"{sum(len(r.refs) for r in runs)} traces: {len(runs[0].refs)} normal, {len(runs[1].refs)} faulty; "
           f"{n_proc} processes; {ch.size} MPI rank(s)")

    # -- sharding: a unit is one process of one run, so process-level rows stay local --
    units = sorted({(ri, ref.rank) for ri, run in enumerate(runs) for ref in run.refs})
    unit_refs = {u: [] for u in units}
    for ri, run in enumerate(runs):
        for ref in run.refs:
            unit_refs[(ri, ref.rank)].append(ref)
    mine = ch.shard([sum(ref.size for ref in unit_refs[u]) for u in units])[ch.rank]
    my_refs = [(units[u][0], ref) for u in mine for ref in unit_refs[units[u]]]

    info_cache = {}         # threads of a process share its names: each .info is read once
    traces = ch.step("reading traces", lambda: [(ri, load_trace(ref, info_cache))
                                                for ri, ref in ch.each(my_refs, "reading")])
    info_cache.clear()
    ch.say(f"read {ch.comm.allreduce(len(traces))} traces")

    # -- global function names: sorted union, so ids do not depend on the sharding -----
    local_names = (set(), set())                # per run, for the same-program check below
    for ri, t in traces:
        local_names[ri].update(list(t.names)[1:])
    parts = ch.allgather(local_names)
    run_names = [set().union(*(p[ri] for p in parts)) - {RETURN_NAME} for ri in (0, 1)]
    union = run_names[0] | run_names[1]
    names = [RETURN_NAME] + sorted(union)
    name_id = {n: i for i, n in enumerate(names)}
    gevents = []
    id_maps = {}            # threads of a process share one names array: map it once
    for _, t in traces:
        ids = id_maps.get(id(t.names))
        if ids is None:
            ids = id_maps[id(t.names)] = np.asarray([name_id[n] for n in t.names], dtype=np.int32)
        gevents.append(ids[t.events])
        t.events = None     # only the global-id copy is needed from here on
    local_runs = np.array([ri for ri, _ in traces], dtype=np.int64)
    local_objs = np.array([obj_index[t.key] for _, t in traces], dtype=np.int64)
    local_order = local_runs * n_obj + local_objs          # analysis order: normal before faulty
    local_procs = np.array([proc_index[t.rank] for _, t in traces], dtype=np.int64)

    results = None
    if ch.is_root:
        present = np.zeros((2, n_obj), dtype=bool)
        complete = np.ones((2, n_obj), dtype=bool)
        notes = [n for run in runs for n in run.notes]
        missing = {}
        for ri, run in enumerate(runs):
            for ref in run.refs:
                present[ri, obj_index[(ref.rank, ref.thread)]] = True
        for i, key in enumerate(objects):
            for ri in (0, 1):
                if not present[ri, i]:
                    missing.setdefault(ri, []).append(key)
        for ri, keys in sorted(missing.items()):
            notes.append(f"{len(keys)} trace(s) missing from the {RUN_LABELS[ri]} run, counted as empty: "
                         f"{describe_keys(keys)}")
        shared = len(run_names[0] & run_names[1])
        if all(run_names) and shared < MIN_SHARED_NAMES * len(union):
            notes.append(f"the two runs share only {shared} of their {len(union)} function names: are they runs "
                         f"of the same program, built the same way? (differences then say little about a fault)")
        results = Results(str(normal_path), str(faulty_path), names, objects, processes, present, complete,
                          [r.fmt for r in runs], [r.rank_source for r in runs], notes, mpi_ranks=ch.size)
    # open calls mean something only in traces that record returns (not entry-only ones).
    # A shard's states travel as arrays: per trace run, object, complete, calls entered;
    # the open calls as CSR (offsets, ids); the notes only of traces that have some
    entries = np.array([np.count_nonzero(ev) for ev in gevents], dtype=np.int64)
    n_events = np.array([len(ev) for ev in gevents], dtype=np.int64)
    with_returns = np.flatnonzero(entries < n_events)
    stacks = [open_calls(gevents[i]) for i in with_returns.tolist()]
    stack_offsets = np.zeros(len(traces) + 1, dtype=np.int64)
    stack_offsets[with_returns + 1] = [len(s) for s in stacks]
    np.cumsum(stack_offsets, out=stack_offsets)
    trace_states = ch.gather((local_runs, local_objs, np.array([bool(t.complete) for _, t in traces], dtype=bool),
                              entries, n_events, stack_offsets, np.concatenate(stacks + [np.empty(0, np.int32)]),
                              [(i, list(t.notes)) for i, (_, t) in enumerate(traces) if t.notes]))
    probes = None
    if ch.is_root:
        by_note = {}
        faulty_events = np.zeros(n_obj, dtype=np.int64)
        for runs_, objs_, done, entered, events_, offsets, stack_ids, tnotes in trace_states:
            results.complete[runs_, objs_] = done
            results.entries[runs_, objs_] = entered
            faulty_events[objs_[runs_ == 1]] = events_[runs_ == 1]
            for i in np.flatnonzero(np.diff(offsets)).tolist():
                results.open_calls[int(runs_[i])][int(objs_[i])] = \
                    " > ".join(names[c] for c in stack_ids[offsets[i]:offsets[i + 1]].tolist())
            for i, tnotes_i in tnotes:
                for note in tnotes_i:
                    by_note.setdefault((int(runs_[i]), note), []).append(objects[int(objs_[i])])
        for (ri, note), keys in sorted(by_note.items()):
            results.notes.append(f"{RUN_LABELS[ri]} run, {describe_keys(sorted(keys))}: {note}")
        stopped = np.array(stopped_traces(results.present, results.complete, results.open_calls), dtype=np.int64)
        probes = (stopped, faulty_events[stopped])

    # -- did each stopped faulty trace leave the normal path first?  Its normal twin is
    # usually on another rank: both sides hash the same blocks of the faulty length
    # (divergence.py) and only the hashes travel
    probe_objs, probe_lengths = ch.bcast(probes)
    if len(probe_objs):
        blocks = ch.step("normal path check", divergence.shard_blocks, gevents, local_runs, local_objs,
                         probe_objs, probe_lengths)
        gathered_blocks = ch.gather(blocks)
        if ch.is_root:
            results.diverged_at, results.diverged_to = divergence.divergences(
                gathered_blocks, probe_objs, results.entries[1], n_obj)

    # -- the grid: per (filter, K) NLR; per attribute mode JSMs; per linkage a row ----
    tasks = []          # (combo name, spec, k, attribute kind, freq): one JSM task each
    local_lattices = []     # this rank's (normal, faulty) lattices, one pair per task
    waiting = timing.waiting_mask(names)      # MPI calls: time inside them is waiting (timing view)
    for spec, k in grid.combos():
        cname = combo_name(spec, k)
        mask = filters.keep_mask(names, spec)
        seqs = ch.step(f"filter {spec.label}", lambda: [filters.apply_filter(ev, names, spec, mask) for ev in gevents])
        found = ch.step(f"NLR discovery {cname}", nlr.discover_bodies, seqs, k)
        known = set().union(*ch.allgather(found))
        nlrs, table = ch.step(f"NLR {cname}", nlr.reduce_with_known, ch.each(seqs, f"NLR {cname}"), k, known)
        first = {}
        for part in ch.allgather(nlr.first_appearances(nlrs, local_order, table)):
            for key, where in part.items():
                if key not in first or where < first[key]:
                    first[key] = where
        loop_ids = nlr.assign_loop_ids(first)
        nlrs = nlr.relabel(nlrs, table, loop_ids)
        gtable = nlr.global_table(loop_ids)
        n_codes = len(names) + len(gtable)
        ch.say(f"{cname}: {len(gtable)} loops")
        gathered_nlrs = ch.gather(_dedupe([(n.ids, n.counts) for n in nlrs], local_runs, local_objs))
        # loop iteration times where traces carry timestamps (uftrace, OTF2); others yield nothing
        lengths = timing.iteration_lengths(gtable)
        loop_times = ch.step(f"loop timing {cname}", lambda: [
            timing.trace_timing(int(ri), int(o), nl.ids, nl.counts, gtable, ev, t.timestamps,
                                filters.kept_positions(ev, names, spec, mask), waiting, lengths)
            for (ri, t), o, ev, nl in zip(traces, local_objs, gevents, nlrs)
            if getattr(t, "timestamps", None) is not None])
        gathered_times = ch.gather(loop_times)
        if ch.is_root:
            results.combos[cname] = {
                "filter": spec.label, "k": k, "loops": [gtable.body(i) for i in range(len(gtable))],
                "nlr": _unify(gathered_nlrs, n_obj), "attrs": {}}
            if any(gathered_times):
                results.combos[cname]["loop_timing"] = timing.timing_view(
                    gathered_times, objects, results.combos[cname]["nlr"], min_ratio=timing_ratio,
                    clock=timing_clock)

        proc_keys = sorted(set(zip(local_runs.tolist(), local_procs.tolist())))
        proc_number = {key: i for i, key in enumerate(proc_keys)}
        proc_group = [proc_number[key] for key in zip(local_runs.tolist(), local_procs.tolist())]
        proc_runs = np.array([r for r, _ in proc_keys], dtype=np.int64)
        proc_ids = np.array([p for _, p in proc_keys], dtype=np.int64)
        for kind, freq in grid.attributes:
            aname = attr_name(kind, freq)
            def weighted_rows():
                counts = (attrs.call_count_matrix(gevents, mask, len(names)) if kind == "call"
                          else attrs.count_matrix(nlrs, kind, len(names), n_codes))
                return (attrs.weight_matrix(counts, freq),
                        attrs.weight_matrix(attrs.group_rows(counts, proc_group, len(proc_keys)), freq))
            thread_rows, proc_rows = ch.step(f"attributes {cname} {aname}", weighted_rows)
            if lattices:      # both runs' lattices in one step; merged across ranks after the grid
                local_lattices.extend(ch.step(f"lattice {cname} {aname}", lambda: [
                    _local_lattice(thread_rows, local_runs == ri, local_objs, max_concepts) for ri in (0, 1)]))
            # class rows travel, not trace rows: identical rows are merged on each rank first
            pieces = ch.allgather((_dedupe(_csr_arrays(thread_rows), local_runs, local_objs),
                                   _dedupe(_csr_arrays(proc_rows), proc_runs, proc_ids)))
            tasks.append((cname, spec, k, aname, pieces, []))
            ch.say(f"{cname} {aname}: attributes gathered")

    # -- the lattices of every task in one binomial tree: one message per tree edge ---
    if lattices:
        merged = ch.tree_reduce("lattice merge", tuple(local_lattices), _merge_lattice_lists,
                                _pack_lattices, _unpack_lattices)
        if ch.is_root:
            merged = [merged] * len(local_lattices) if isinstance(merged, Skipped) else list(merged)
            for t in range(len(tasks)):
                tasks[t][5].extend(merged[2 * t:2 * t + 2])

    # -- JSMs and ranking rows: tasks spread round-robin over the ranks ---------------
    def my_tasks():
        # every rank walks every task in the same order, so the row-blocked JSMs (collective)
        # line up; a failure is kept until the end of the walk for the same reason
        done, failure = [], None
        for t, (cname, spec, k, aname, pieces, _) in enumerate(tasks):
            owner = t % ch.size
            if ch.rank != owner and not _may_row_block(pieces, row_block_min):
                continue        # small enough for its owner alone: the others skip even the unification
            try:
                unified = {level: _unify([p[which] for p in pieces], n)
                           for level, n, which in (("thread", n_obj, 0), ("process", n_proc, 1))}
                # per level and run: (class JSM, class subsumption matrix), from one intersection matrix
                mats = {level: tuple(_class_jsm(rows, ch, owner, row_block_min, f"JSM rows {cname} {aname}")
                                     for rows, _ in unified[level]) for level in unified}
                jsms = {level: (m[0][0], m[1][0]) for level, m in mats.items()}
                subs = {level: (m[0][1], m[1][1]) for level, m in mats.items()}
                if ch.rank == owner and failure is None:
                    block = compare_runs(unified, jsms, full_limit, subs)
                    rows = [_rank_row(spec, k, aname, method, block, objects, processes, top,
                                      t * len(grid.linkages) + m) for m, method in enumerate(grid.linkages)]
                    done.append((t, block, rows))
            except Exception as exc:   # noqa: BLE001  re-raised below, after the walk
                failure = failure or exc
        if failure is not None:
            raise failure
        return done
    computed = ch.step("JSMs and clustering", my_tasks)
    gathered = ch.gather(computed)
    peak_rss = ch.gather(peak_rss_mb())
    busy = ch.gather(dict(ch.busy))
    if ch.is_root:
        rows = []
        for part in gathered:
            for t, block, task_rows in part:
                cname, _, _, aname, _, merged = tasks[t]
                block["lattice"] = merged
                results.combos[cname]["attrs"][aname] = block
                rows.extend(task_rows)
        for combo in results.combos.values():     # grid order, whoever computed them
            combo["attrs"] = {a: combo["attrs"][a] for a in (attr_name(*x) for x in grid.attributes)}
        # settings that saw no change at all go last; before them, those whose normal run
        # has no class structure; before those, the ones whose suspects do not localise
        rows.sort(key=lambda r: (not r.top_threads and not r.top_processes, not r.structured,
                                 not r.localised, r.bscore, r.grid_index))
        results.rows = rows
        results.grid = {"filters": [f.label for f in grid.filters], "ks": list(grid.ks),
                        "attributes": [attr_name(*a) for a in grid.attributes], "linkages": list(grid.linkages),
                        "custom": grid.custom or "", "top": top}
        results.timings = dict(ch.timings)
        results.timings.update({f"peak_rss_mb_rank{r}": mb for r, mb in enumerate(peak_rss)})
        steps = list(busy[0])
        results.busy_by_rank = (steps, np.array([[b.get(s, 0.0) for s in steps] for b in busy], dtype=np.float64))
    return results


def _dedupe(rows, runs, objs):
    """Merge identical rows of local objects.  ``rows``: a row per object, as a CSR
    block (indptr, indices, data), int64, or a list of (indices, data) pairs.  Returns
    (indptr, indices, data, members): the distinct rows in order of first appearance as
    one CSR block, and members (k x 3 int64: run, object, distinct row), so that a shard
    ships four arrays."""
    if isinstance(rows, list) and sum(len(a) for a, _ in rows) > LONG_ROWS * len(rows):
        labels = bytes_labels(rows)            # long rows: no copy of them all
        firsts = np.flatnonzero(labels == np.arange(len(labels)))
        block = pairs_csr([rows[i] for i in firsts.tolist()])
    else:
        csr = pairs_csr(rows) if isinstance(rows, list) else rows
        labels = row_labels(*csr)
        firsts = np.flatnonzero(labels == np.arange(len(labels)))
        block = take_rows(*csr, firsts)
    number = np.zeros(len(labels), dtype=np.int64)
    number[firsts] = np.arange(len(firsts))
    members = np.empty((len(labels), 3), dtype=np.int64)
    members[:, 0], members[:, 1], members[:, 2] = runs, objs, number[labels]
    return (*block, members)


def _unify(parts, n_objects):
    """Global classes from every rank's deduplicated rows (``_dedupe`` blocks): per run
    (class rows as ClassRows, class_of).

    Classes are numbered by the first object (in object order) that has them, normal run
    first, so numbering never depends on the sharding; an object absent from a run has
    the empty row there."""
    parts = list(parts)
    n_rows = np.cumsum([0] + [len(p[0]) - 1 for p in parts])
    n_nnz = np.cumsum([0] + [int(p[0][-1]) for p in parts])
    # every part's rows, then one empty row (index n_rows[-1]) for the absent objects
    indptr = np.concatenate([np.zeros(1, np.int64)] + [p[0][1:] + n_nnz[i] for i, p in enumerate(parts)]
                            + [n_nnz[-1:]]).astype(np.int64)
    indices = np.concatenate([p[1] for p in parts] + [np.empty(0, np.int64)]).astype(np.int64)
    data = np.concatenate([p[2] for p in parts] + [np.empty(0, np.int64)]).astype(np.int64)
    row_of = np.full((2, n_objects), n_rows[-1], dtype=np.int64)
    for p, base in zip(parts, n_rows.tolist()):
        row_of[p[3][:, 0], p[3][:, 1]] = p[3][:, 2] + base
    labels = row_labels(indptr, indices, data)    # equal rows of different ranks meet here
    out = []
    for run in (0, 1):
        label = labels[row_of[run]]
        distinct, first, inverse = np.unique(label, return_index=True, return_inverse=True)
        by_first = np.argsort(first)
        number = np.empty(len(distinct), dtype=np.int64)
        number[by_first] = np.arange(len(distinct))
        out.append((ClassRows(*take_rows(indptr, indices, data, distinct[by_first])),
                    number[inverse.reshape(-1)]))
    return out


def _may_row_block(pieces, row_block_min):
    """Whether any of a task's class JSMs could be large enough for the row-blocked path:
    a run has at most as many classes as all ranks' distinct rows together, plus the
    empty row of absent objects.  Every rank decides the same from the same pieces."""
    return any(sum(len(p[which][0]) - 1 for p in pieces) + 1 >= row_block_min for which in (0, 1))


def _class_jsm(rows, ch, owner, row_block_min, name):
    """(class x class JSM, class x class subsumption matrix) of distinct rows, both from
    one intersection matrix, on ``owner`` ((None, None) elsewhere).  Large ones
    (>= row_block_min classes) are computed in row blocks on every rank (each block
    carries its JSM rows and subsumption rows side by side)."""
    csr = _rows_csr(rows)
    n = len(rows)
    if ch.size > 1 and n >= row_block_min:
        both = ch.row_blocked(name, n, lambda lo, hi: np.hstack(jaccard_subsumption_rows(*csr, lo, hi)), owner)
        if both is None:
            return None, None
        return np.ascontiguousarray(both[:, :n]), np.ascontiguousarray(both[:, n:])
    if ch.rank != owner:
        return None, None
    return jaccard_subsumption_direct(*csr, expand=False)[:2]


def _cross_view(rows_n, rows_f, class_f, flagged, keep_shares):
    """Cross-run subsumption of the suspects: for every faulty-run class that holds a
    suspect (``faulty_classes``, ascending), the normal-run classes whose whole weighted
    row its faulty row holds (``subsumes``: it does at least everything they did) and
    those that hold its whole faulty row (``subsumed_by``: they did everything it does),
    each as CSR (offsets, normal class ids).  With ``keep_shares`` also the shares behind
    them, (M, C_normal) float64: ``normal_in_faulty`` (share of normal class c found in the
    faulty row; 1 = subsumes) and ``faulty_in_normal`` (share of the faulty row found in
    normal class c; 1 = subsumed by)."""
    sus = np.unique(np.asarray(class_f)[np.asarray(flagged, dtype=bool)]).astype(np.int64)
    f_in_n, n_in_f = cross_subsumption([rows_f[c] for c in sus], rows_n)

    def csr(mask):
        offsets = np.zeros(len(mask) + 1, dtype=np.int64)
        np.cumsum(mask.sum(axis=1), out=offsets[1:])
        return offsets, np.nonzero(mask)[1].astype(np.int64)
    out = {"faulty_classes": sus, "subsumes": csr(n_in_f == 1.0), "subsumed_by": csr(f_in_n == 1.0)}
    if keep_shares:
        out["normal_in_faulty"], out["faulty_in_normal"] = n_in_f, f_in_n
    return out


def compare_runs(unified, jsms, full_limit, subsumption):
    """Change scores, suspects and (small N) the full matrices from the class JSMs of
    both runs, for thread and process level.

    Subsumption: ``subsumption`` gives per level the class x class subsumption matrices
    (normal, faulty) that ``_class_jsm`` made with the JSMs.
    Each level keeps them as ``subsumption_classes``, expanded to N x N as
    ``subsumption_normal`` / ``subsumption_faulty`` when N <= full_limit, and the
    cross-run view of the suspects as ``subsumption_cross`` (see ``_cross_view``)."""
    block = {}
    for level, ((rows_n, class_n), (rows_f, class_f)) in unified.items():
        jn, jf = jsms[level]
        sn, sf = subsumption[level]
        scores, flagged = cluster.class_change_scores(jn, class_n, jf, class_f)
        # how each trace changed (more / less / different work), once per (normal, faulty) class pair
        kinds = {pair: cluster.change_kind(rows_n[pair[0]], rows_f[pair[1]])
                 for pair in set(zip(class_n.tolist(), class_f.tolist()))}
        change = np.array([kinds[pair] for pair in zip(class_n.tolist(), class_f.tolist())],
                          dtype=np.float64).reshape(-1, 3)
        entry = {"classes": (class_n, class_f), "jsm_classes": (jn, jf), "scores": scores, "suspect": flagged,
                 "change": change}
        if len(class_n) <= full_limit:
            entry["normal"] = jn[np.ix_(class_n, class_n)]
            entry["faulty"] = jf[np.ix_(class_f, class_f)]
            entry["diff"] = cluster.jsm_diff(entry["normal"], entry["faulty"])
            entry["subsumption_normal"] = sn[np.ix_(class_n, class_n)]
            entry["subsumption_faulty"] = sf[np.ix_(class_f, class_f)]
        entry["subsumption_classes"] = (sn, sf)
        entry["subsumption_cross"] = _cross_view(rows_n, rows_f, class_f, flagged, len(class_n) <= full_limit)
        block[level] = entry
    return block


def _local_lattice(rows, selected, objs, max_concepts):
    lattice = Lattice(max_concepts=max_concepts)
    try:
        lattice.add_objects(objs[selected], *_selected_rows(rows.tocsr(), selected))
    except DiffTraceError as exc:       # over the cap: the same message on any sharding
        return Skipped(str(exc))
    return lattice


def _selected_rows(rows, selected):
    """(indptr, indices, data) of the selected rows of a CSR matrix.  A shard's traces are
    ordered run first, so one run's rows are usually one block: sliced, not copied."""
    sel = np.flatnonzero(selected)
    if len(sel) and sel[-1] - sel[0] + 1 == len(sel):
        a, b = int(sel[0]), int(sel[-1]) + 1
        lo, hi = rows.indptr[a], rows.indptr[b]
        return rows.indptr[a:b + 1] - lo, rows.indices[lo:hi], rows.data[lo:hi]
    part = rows[sel]
    return part.indptr, part.indices, part.data


def _merge_lattice_lists(a, b):
    """Two ranks' partial lattices merged position by position; one over the concept cap
    stays Skipped without affecting the others."""
    def one(x, y):
        if isinstance(x, Skipped) or isinstance(y, Skipped):
            return x if isinstance(x, Skipped) else y
        try:
            # both are this tree's partials, read once; their objects come from disjoint shards
            return merge(x, y, consume=True, disjoint=True)
        except DiffTraceError as exc:
            return Skipped(str(exc))
    return tuple(one(x, y) for x, y in zip(a, b))


def _pack_lattices(lattices):
    return tuple(x if isinstance(x, Skipped) else x.to_arrays() for x in lattices)


def _unpack_lattices(packed):       # exported by a peer rank just now: trusted
    return tuple(x if isinstance(x, Skipped) else Lattice.from_arrays(x, trusted=True) for x in packed)


def _rank_row(spec, k, aname, method, block, objects, processes, top, grid_index):
    level = block["thread"]
    (jn, jf), (cn, cf) = level["jsm_classes"], level["classes"]
    b, clusters = cluster.compare_classes(jn, cn, jf, cf, method)
    procs = cluster.ranked_suspects(block["process"]["scores"], processes, top, block["process"]["suspect"])
    threads = cluster.ranked_suspects(level["scores"], objects, top, level["suspect"])
    changes = {key: tuple(level["change"][objects.index(key)]) for key, _ in threads}
    changes.update({("p", r): tuple(block["process"]["change"][processes.index(r)]) for r, _ in procs})
    # localisation counts every suspect, not only the ``top`` shown: ranks named at either
    # level, or threads when there is a single process
    named_threads = np.flatnonzero(level["suspect"])
    if len(processes) > 1:
        named = {objects[i][0] for i in named_threads} | \
            {processes[i] for i in np.flatnonzero(block["process"]["suspect"])}
        localised = cluster.localises(len(named), len(processes))
    else:
        localised = cluster.localises(len(named_threads), len(objects))
    return Row(spec.label, k, aname, method, b, clusters, procs, threads, grid_index, changes,
               cluster.has_structure(jn.shape[0], len(objects)), localised)
