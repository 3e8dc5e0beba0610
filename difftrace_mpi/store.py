"""The one HDF5 layout of difftrace_mpi results (documented in the README), and the only
module that knows its paths: ``write(results, path)`` and ``read(path) -> Results`` (the
same ``results.Results`` the analysis produced; large matrices and lattices load on first
use, from a file kept open until ``Results.close()``).

Written by the root only (the pip h5py is serial HDF5), atomically: a temporary file in
the same directory, renamed over the target when complete, so a failed job never leaves
a half-written file that looks complete.

    /                      attrs: format, format_version, normal, faulty, normal_format,
                           faulty_format, normal_rank_source, faulty_rank_source, no_difference
    /names                 function names; global id = index, 0 = <return>
    /objects/rank, thread  thread-level objects (union of both runs), in (rank, thread) order
    /objects/present       bool (2, N): trace exists in the normal / faulty run
    /objects/complete      bool (2, N): trace file complete (False: killed/truncated)
    /objects/entries       int64 (2, N): calls entered per trace (progress of hung runs)
    /objects/open_calls    str (2, N): calls still open at the end, outermost first ("a > b")
    /objects/diverged_at, diverged_to
                           int64 (N,): faulty traces that stopped early (hung or killed) and
                           left the normal path first (their events are not the start of the
                           normal trace's): the first difference lies in their calls
                           [diverged_at, diverged_to) (0-based, in the order entered); -1 for
                           traces that stopped on the normal path or did not stop
    /objects/stopped       bool (N,): the faulty trace stopped early (hung, killed or died)
    /processes             process-level objects (MPI ranks)
    /verdict               the answer (README, "The verdict"); attrs kind (crash, hang, changed,
                           timing, none), summary, tied, candidates, changed_traces, noise_traces
        where              attrs call_path, loop, normal, faulty ("" = unknown), iteration,
                           iterations (-1 = unknown)
        culprits           table, ordered: rank, thread, clock (-1 = unknown), iteration (-1),
                           status, call, why
        victims            table: stack, count, members, main (bool: main threads)
        shared_change      only when the earliest difference is one most traces share alike:
                           attrs traces, members, what
        died               table: rank, thread, how (the first to die first)
    /divergence            table, one row per trace that differs from its normal twin: rank,
                           thread, status, position (event index of the first difference),
                           clock (MPI collectives before it, -1 unknown), clock_end, normal, faulty
                           (calls there), call_path, loop (outermost, in loop_in), iteration,
                           iterations (-1 unknown), stopped, stack_end (calls open where it
                           stopped), loops (every level: one line each, frame TAB body TAB
                           step TAB steps)
    /endings               table, how each process ended where the tracer recorded it: run
                           (0 normal, 1 faulty), rank, how, code, signal, thread, call, error,
                           time_ns, mpi_calls (-1 = not recorded)
    /notes                 warnings about the input (missing traces, truncated files, ...)
    /grid                  attrs: filters, ks, attributes, linkages, custom, top (JSON)
    /ranking/<column>      the ranking table in its sorted order: filter, k, attributes, linkage,
                           bscore, clusters, structured and localised (bool: the sort tiers),
                           top_processes, top_threads (JSON strings); attr ``json`` holds the
                           whole table as JSON
    /combos/<filter>.K<k>/ one per (filter, K): attrs filter, k
        loops/offsets, ids, counts     loop table as CSR: loop i's body is
                                       ids[offsets[i]:offsets[i+1]] (>= 0 function id,
                                       < 0 loop -id-1) with iteration counts
        nlr/normal|faulty/offsets, ids, counts, index
                                       distinct NLRs (same encoding); object o's NLR is
                                       row index[o] (traces missing from a run: the empty NLR)
        loop_timing/                   only where traces carry timestamps (uftrace, OTF2);
                                       attrs min_ratio, k, clock (the flag rule, see timing.py;
                                       clock: both, wall or own = outside MPI calls)
            run, object, loop, instances, iterations, periods, span_ns, own_ns
                                       int64, one row per (run, object, loop), sorted: mean
                                       iteration time (ns) = span_ns / periods; own_ns: the
                                       same span outside MPI calls
            flags/object, loop, normal_ns, faulty_ns, ratio, iterations, same_nlr,
                  own_normal_ns, own_faulty_ns, own_ratio
                                       loops whose iteration time changed while their structure
                                       did not, ranked (largest change first)
        attributes/<kind>.<freq>/
            thread/classes_normal|faulty          object -> equivalence class (identical attributes)
            thread/jsm_classes_normal|faulty      class x class JSMs (C x C float64)
            thread/change_score                   row sums of JSM_D per object (the suspect score)
            thread/suspect                        bool per object: named a suspect (the greedy cover of
                                                  the changed pairs; the ranking shows the top ones)
            thread/change_kind                    (N, 3): kind (0 same, 1 more, 2 less, 3 different
                                                  work in the faulty run), shared/normal, shared/faulty
            thread/jsm_normal, jsm_faulty, jsm_diff      N x N float64, only when N <= 1024
            thread/subsumption_classes_normal|faulty     class x class subsumption S (C x C float64,
                                                  asymmetric): S[i, j] = share of class i's weighted
                                                  attributes that class j also has (1: j subsumes i)
            thread/subsumption_normal, subsumption_faulty  the same N x N, only when N <= 1024
            thread/subsumption_cross/             the suspects against the normal run: faulty_classes
                                                  (faulty classes holding a suspect, M); subsumes_offsets,
                                                  subsumes (CSR per row: normal classes the faulty row holds
                                                  entirely); subsumed_by_offsets, subsumed_by (normal
                                                  classes holding the whole faulty row); when N <= 1024
                                                  also normal_in_faulty, faulty_in_normal (M x C_normal shares)
            process/...                           the same for processes (threads summed)
            lattice/normal|faulty/<arrays>               concept lattice (Lattice.to_arrays),
                                                         or attr ``skipped`` with the reason
    /timing                attrs: mpi_ranks and seconds per stage on the root, including the
                           wait for the slowest rank (not part of the results)
    /timing/busy_by_rank   float64 (mpi_ranks, steps): each rank's own seconds per step,
                           before the step's agreement (max over mean = imbalance); attr
                           ``steps``: JSON list of the step names
"""
import json
import os

import h5py
import numpy as np

from .config import RUN_LABELS
from .errors import DiffTraceError
from .fsutil import KeepFirstWriteError, atomic_path
from .results import DAMAGE_ERRORS, Combo, LatticeRef, Level, Results, Row, Setting, Skipped, damaged
from .stages.timing import COLUMNS, TimingFlag

FORMAT = "difftrace_mpi.results"
FORMAT_VERSION = 1
_STR = h5py.string_dtype("utf-8")
_LEVEL_PAIRS = (("classes", "classes"), ("jsm_classes", "jsm_classes"),
                ("subsumption_classes", "subsumption_classes"))
_LEVEL_FULL = ("normal", "faulty", "diff")          # stored as jsm_<which>
_FLAG_FLOATS = ("normal_ns", "faulty_ns", "ratio", "own_normal_ns", "own_faulty_ns", "own_ratio")


def _text(values):
    return np.array([str(v).encode("utf-8", "surrogateescape").decode("utf-8", "replace") for v in values],
                    dtype=object)


def _strings(dataset):
    return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in dataset[()].tolist()]


def _csr(group, seqs):
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    for i, s in enumerate(seqs):
        offsets[i + 1] = offsets[i] + (0 if s is None else len(s[0]))
    group["offsets"] = offsets
    group["ids"] = np.concatenate([s[0] for s in seqs if s is not None] or [np.empty(0, np.int64)]).astype(np.int64)
    group["counts"] = np.concatenate([s[1] for s in seqs if s is not None] or [np.empty(0, np.int64)]).astype(np.int64)


def _read_csr(group):
    off, ids, counts = group["offsets"][()], group["ids"][()], group["counts"][()]
    return [(ids[off[i]:off[i + 1]], counts[off[i]:off[i + 1]]) for i in range(len(off) - 1)]


# -- writing ------------------------------------------------------------------------------
_NONE = -1          # an unknown integer in a table


def _table(group, name, columns, rows):
    """A compound dataset (h5py and pandas read it as a table) from dict rows; columns:
    [(name, "i8" | "?" | "str")]."""
    dtype = np.dtype([(c, _STR if t == "str" else t) for c, t in columns])
    data = np.zeros(len(rows), dtype=dtype)
    for i, row in enumerate(rows):
        data[i] = tuple((_NONE if row.get(c) is None else row[c]) if t == "i8" else
                        bool(row.get(c)) if t == "?" else _text([row.get(c) or ""])[0] for c, t in columns)
    group.create_dataset(name, data=data)


def _read_table(dataset):
    """A compound dataset back to dict rows (strings decoded, -1 -> None, "" -> None)."""
    rows = []
    for rec in dataset[()]:
        row = {}
        for c in dataset.dtype.names:
            v = rec[c]
            if isinstance(v, bytes):
                v = v.decode("utf-8", "replace") or None
            elif isinstance(v, np.bool_):
                v = bool(v)
            elif isinstance(v, np.integer):
                v = None if v == _NONE else int(v)
            row[c] = v
        rows.append(row)
    return rows


_CULPRIT_COLUMNS = [("rank", "i8"), ("thread", "i8"), ("clock", "i8"), ("iteration", "i8"), ("status", "str"),
                    ("call", "str"), ("why", "str")]
_VICTIM_COLUMNS = [("stack", "str"), ("count", "i8"), ("members", "str"), ("main", "?")]
_DIED_COLUMNS = [("rank", "i8"), ("thread", "i8"), ("how", "str")]
_DIVERGENCE_COLUMNS = [("rank", "i8"), ("thread", "i8"), ("status", "str"), ("position", "i8"), ("clock", "i8"),
                       ("clock_end", "i8"), ("normal", "str"), ("faulty", "str"), ("call_path", "str"),
                       ("loop", "str"), ("loop_in", "str"), ("iteration", "i8"), ("iterations", "i8"),
                       ("stopped", "?"), ("stack_end", "str"), ("loops", "str")]
_ENDING_COLUMNS = [("run", "i8"), ("rank", "i8"), ("how", "str"), ("code", "i8"), ("signal", "str"),
                   ("thread", "i8"), ("call", "str"), ("error", "str"), ("time_ns", "i8"), ("mpi_calls", "i8")]
_WHERE_TEXT = ("call_path", "loop", "normal", "faulty")
_WHERE_INT = ("iteration", "iterations")


def _write_verdict(f, res):
    v = res.verdict
    g = f.create_group("verdict")
    for key in ("kind", "summary"):
        g.attrs[key] = v[key]
    for key in ("tied", "candidates", "changed_traces", "noise_traces"):
        g.attrs[key] = int(v.get(key, 0))
    w = g.create_group("where")
    for key in _WHERE_TEXT:
        w.attrs[key] = v["where"][key] or ""
    for key in _WHERE_INT:
        w.attrs[key] = _NONE if v["where"][key] is None else int(v["where"][key])
    if v.get("shared_change"):
        sc = g.create_group("shared_change")
        sc.attrs["traces"] = int(v["shared_change"]["traces"])
        sc.attrs["members"] = v["shared_change"]["members"]
        sc.attrs["what"] = v["shared_change"]["what"]
    _table(g, "culprits", _CULPRIT_COLUMNS, v["culprits"])
    _table(g, "victims", _VICTIM_COLUMNS, v["victims"])
    _table(g, "died", _DIED_COLUMNS, v["died"])
    rows = []
    for _, d in sorted(res.divergences.items()):
        frame, body, iteration, iterations = d.loops[0] if d.loops else (None, None, None, None)
        rows.append({"rank": d.key[0], "thread": d.key[1], "status": d.status, "position": d.position,
                     "clock": d.clock, "clock_end": d.clock_end, "normal": " ".join(d.normal),
                     "faulty": " ".join(d.faulty), "call_path": " > ".join(d.call_path),
                     "loop": " ".join(body) if body else "", "loop_in": frame, "iteration": iteration,
                     "iterations": iterations, "stopped": d.stopped, "stack_end": d.stack_end,
                     # every level's loop, one per line: frame TAB body TAB step TAB steps
                     "loops": "\n".join(f"{fr}\t{' '.join(b)}\t{i}\t{n}" for fr, b, i, n in d.loops)})
    _table(f, "divergence", _DIVERGENCE_COLUMNS, rows)
    _table(f, "endings", _ENDING_COLUMNS, [dict(e, run=run, rank=rank) for (run, rank), e in sorted(res.endings.items())])


def _read_verdict(f, res):
    from .stages.verdict import Divergence
    if "verdict" not in f:
        return
    g = f["verdict"]
    v = {key: _as_str(g.attrs[key]) for key in ("kind", "summary")}
    v.update({key: int(g.attrs.get(key, 0)) for key in ("tied", "candidates", "changed_traces", "noise_traces")})
    w = g["where"].attrs
    v["where"] = {**{key: _as_str(w[key]) or None for key in _WHERE_TEXT},
                  **{key: None if int(w[key]) == _NONE else int(w[key]) for key in _WHERE_INT}}
    for key in ("culprits", "victims", "died"):
        v[key] = _read_table(g[key])
    sc = g.get("shared_change")
    v["shared_change"] = None if sc is None else {"traces": int(sc.attrs["traces"]),
                                                  "members": _as_str(sc.attrs["members"]),
                                                  "what": _as_str(sc.attrs["what"])}
    res.verdict = {key: v[key] for key in ("kind", "culprits", "tied", "where", "victims", "died", "changed_traces",
                                           "noise_traces", "candidates", "shared_change", "summary")}
    index = {key: i for i, key in enumerate(res.objects)}
    for row in _read_table(f["divergence"]):
        key = (row["rank"], row["thread"])
        loops = [(fr, b.split(" "), int(i), int(n)) for fr, b, i, n in
                 (line.split("\t") for line in (row["loops"] or "").split("\n") if line)]
        res.divergences[index[key]] = Divergence(
            key, row["status"], row["position"], row["clock"], (row["normal"] or "").split(" ") if row["normal"] else [],
            (row["faulty"] or "").split(" ") if row["faulty"] else [],
            row["call_path"].split(" > ") if row["call_path"] else [], loops, row["stopped"], row["clock_end"],
            row["stack_end"] or "")
    for row in _read_table(f["endings"]):
        run, rank = row.pop("run"), row.pop("rank")
        res.endings[(run, rank)] = {k: val for k, val in row.items() if val is not None}



def write(results, path, force=False):
    """Write ``results`` to ``path`` atomically; refuses to overwrite unless ``force``.

    HDF5 writes through a Python file object that keeps the first write error (a full
    disk) from it: HDF5 meeting one itself crashes or prints pages of tracebacks.  The
    error is then one line ("disk full writing X"), the old file kept."""
    path = os.fspath(path)
    if os.path.exists(path) and not force:
        raise DiffTraceError(f"{path} exists; use --force to overwrite it")
    with atomic_path(path, force) as tmp, open(tmp, "r+b") as fh:
        sink = KeepFirstWriteError(fh)
        try:
            with h5py.File(sink, "w") as f:
                _write(f, results)
        except Exception:
            if sink.error is None:
                raise
        sink.raise_error()          # an OSError: atomic_path makes it the one message
        fh.flush()
        os.fsync(fh.fileno())


def _write(f, res):
    f.attrs["format"] = FORMAT
    f.attrs["format_version"] = FORMAT_VERSION
    f.attrs["normal"] = res.normal_path
    f.attrs["faulty"] = res.faulty_path
    for ri, label in enumerate(RUN_LABELS):
        f.attrs[f"{label}_format"] = res.formats[ri]
        f.attrs[f"{label}_rank_source"] = res.rank_sources[ri]
    f.attrs["no_difference"] = bool(res.no_difference)
    f.create_dataset("names", data=_text(res.names), dtype=_STR)
    obj = f.create_group("objects")
    obj["rank"] = np.array([r for r, _ in res.objects], dtype=np.int64)
    obj["thread"] = np.array([t for _, t in res.objects], dtype=np.int64)
    obj["present"] = res.present
    obj["complete"] = res.complete
    obj["entries"] = res.entries
    obj.create_dataset("open_calls", data=_text(res.open_calls[0] + res.open_calls[1]).reshape(2, -1), dtype=_STR)
    obj["diverged_at"] = np.asarray(res.diverged_at, dtype=np.int64)
    obj["diverged_to"] = np.asarray(res.diverged_to, dtype=np.int64)
    obj["stopped"] = np.asarray(res.stopped, dtype=bool)
    f["processes"] = np.array(res.processes, dtype=np.int64)
    if res.verdict:
        _write_verdict(f, res)
    f.create_dataset("notes", data=_text(res.notes), dtype=_STR)
    grid = f.create_group("grid")
    for key, value in res.grid.items():
        grid.attrs[key] = json.dumps(value)
    ranking = f.create_group("ranking")
    ranking.attrs["json"] = json.dumps(res.as_dict(), indent=2)
    rows = [r.as_dict() for r in res.rows]
    for col in ("filter", "attributes", "linkage"):
        ranking.create_dataset(col, data=_text([r[col] for r in rows]), dtype=_STR)
    ranking["k"] = np.array([r["k"] for r in rows], dtype=np.int64)
    ranking["bscore"] = np.array([r["bscore"] for r in rows], dtype=np.float64)
    ranking["clusters"] = np.array([r["clusters"] for r in rows], dtype=np.int64)
    for col in ("structured", "localised"):          # the sort tiers (README, "Rules")
        ranking[col] = np.array([r[col] for r in rows], dtype=bool)
    for col in ("top_processes", "top_threads"):
        ranking.create_dataset(col, data=_text([json.dumps(r[col]) for r in rows]), dtype=_STR)
    combos = f.create_group("combos")
    for cname, combo in res.combos.items():
        g = combos.create_group(cname)
        g.attrs["filter"] = combo.filter
        g.attrs["k"] = combo.k
        _csr(g.create_group("loops"), combo.loops)
        for ri, label in enumerate(RUN_LABELS):
            unique, index = combo.nlr[ri]
            ng = g.create_group(f"nlr/{label}")
            _csr(ng, unique)
            ng["index"] = index
        if combo.loop_timing is not None:
            _write_loop_timing(g.create_group("loop_timing"), combo.loop_timing, res.objects)
        for aname, setting in combo.attrs.items():
            a = g.create_group(f"attributes/{aname}")
            for level in ("thread", "process"):
                _write_level(a, level, setting.level(level))
            for ri, lattice in enumerate(setting.lattices):
                if lattice is None:
                    continue
                lg = a.create_group(f"lattice/{RUN_LABELS[ri]}")
                if isinstance(lattice, Skipped):
                    lg.attrs["skipped"] = lattice.reason
                else:
                    arrays = lattice.load() if isinstance(lattice, LatticeRef) else lattice.to_arrays()
                    for key, arr in arrays.items():
                        lg[key] = arr
    timing = f.create_group("timing")
    timing.attrs["mpi_ranks"] = res.mpi_ranks
    # parallel HDF5 (driver="mpio") is detected, never required: the root writes the
    # gathered class-level results, which stay small however many traces there are
    timing.attrs["h5py_parallel_available"] = bool(h5py.get_config().mpi)
    for stage, seconds in res.timings.items():
        timing.attrs[stage] = seconds
    if res.busy_by_rank is not None:
        steps, seconds = res.busy_by_rank
        timing.create_dataset("busy_by_rank", data=seconds)
        timing["busy_by_rank"].attrs["steps"] = json.dumps(steps)


def _write_level(a, level, lv):
    for field, stored in _LEVEL_PAIRS[:2]:
        a[f"{level}/{stored}_normal"], a[f"{level}/{stored}_faulty"] = getattr(lv, field)
    a[f"{level}/change_score"] = lv.scores
    a[f"{level}/suspect"] = np.asarray(lv.suspect, dtype=bool)
    a[f"{level}/change_kind"] = lv.change
    for which in _LEVEL_FULL:
        if getattr(lv, which) is not None:
            a[f"{level}/jsm_{which}"] = getattr(lv, which)
    if lv.subsumption_classes is not None:
        a[f"{level}/subsumption_classes_normal"], a[f"{level}/subsumption_classes_faulty"] = lv.subsumption_classes
        for which in ("normal", "faulty"):
            if getattr(lv, f"subsumption_{which}") is not None:
                a[f"{level}/subsumption_{which}"] = getattr(lv, f"subsumption_{which}")
    if lv.subsumption_cross is not None:
        cross, cg = lv.subsumption_cross, a.create_group(f"{level}/subsumption_cross")
        cg["faulty_classes"] = cross["faulty_classes"]
        for name in ("subsumes", "subsumed_by"):
            cg[f"{name}_offsets"], cg[name] = cross[name]
        for name in ("normal_in_faulty", "faulty_in_normal"):
            if name in cross:
                cg[name] = cross[name]


def _write_loop_timing(g, view, objects):
    """One combo's loop timing: the per-(run, object, loop) table and the ranked flags."""
    for key, value in view["rule"].items():
        g.attrs[key] = value
    for col in COLUMNS:
        g[col] = view["table"][col]
    flags = view["flags"]
    fg = g.create_group("flags")
    fg["object"] = np.array([objects.index((f.rank, f.thread)) for f in flags], dtype=np.int64)
    fg["loop"] = np.array([f.loop for f in flags], dtype=np.int64)
    for col in _FLAG_FLOATS:
        fg[col] = np.array([getattr(f, col) for f in flags], dtype=np.float64)
    fg["iterations"] = np.array([f.iterations for f in flags], dtype=np.int64)
    fg["same_nlr"] = np.array([f.same_nlr for f in flags], dtype=bool)


# -- reading ------------------------------------------------------------------------------

def read(path):
    """The Results stored at ``path``.  Small arrays are read at once; the N x N matrices
    and the lattices load on first use from the file, which stays open until
    ``results.close()`` (or the end of a ``with`` block).  DiffTraceError for anything
    that is not a readable results file of this layout."""
    path = os.fspath(path)
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise DiffTraceError(f"{path}: not a readable HDF5 file ({exc})") from None
    try:
        if f.attrs.get("format") != FORMAT:
            raise DiffTraceError(f"{path}: not a difftrace_mpi results file")
        results = _read(f)
    except DiffTraceError:
        f.close()
        raise
    except DAMAGE_ERRORS as exc:
        f.close()
        raise damaged(path, exc) from None
    results._closer = f.close
    results._source = path          # later failures inside its ``with`` block name the file
    return results


def _read(f):
    attr = lambda key: f.attrs[key].decode() if isinstance(f.attrs[key], bytes) else str(f.attrs[key])  # noqa: E731
    g = f["objects"]
    objects = list(zip(g["rank"][()].tolist(), g["thread"][()].tolist()))
    calls = [[c.decode("utf-8", "replace") if isinstance(c, bytes) else str(c) for c in run]
             for run in g["open_calls"][()]]
    checked = "diverged_at" in g
    res = Results(attr("normal"), attr("faulty"), _strings(f["names"]), objects, f["processes"][()].tolist(),
                  g["present"][()].astype(bool), g["complete"][()].astype(bool),
                  [attr(f"{label}_format") for label in RUN_LABELS],
                  [attr(f"{label}_rank_source") for label in RUN_LABELS], _strings(f["notes"]),
                  entries=g["entries"][()], open_calls=calls,
                  diverged_at=g["diverged_at"][()] if checked else None,
                  diverged_to=g["diverged_to"][()] if checked else None, path_checked=checked)
    if "stopped" in g:
        res.stopped = g["stopped"][()].astype(bool)
    _read_verdict(f, res)
    res.grid = {key: json.loads(value) for key, value in f["grid"].attrs.items()}
    ranking = json.loads(f["ranking"].attrs["json"])
    res.rows = [Row.from_dict(d, i) for i, d in enumerate(ranking["rows"])]
    for cname, cg in f["combos"].items():
        combo = Combo(_as_str(cg.attrs["filter"]), int(cg.attrs["k"]), _read_csr(cg["loops"]),
                      tuple((_read_csr(cg[f"nlr/{label}"]), cg[f"nlr/{label}/index"][()]) for label in RUN_LABELS))
        if "loop_timing" in cg:
            combo.loop_timing = _read_loop_timing(cg["loop_timing"], objects)
        for aname, ag in cg.get("attributes", {}).items():
            lattices = tuple(_read_lattice(ag, label) for label in RUN_LABELS)
            combo.attrs[aname] = Setting(_read_level(ag["thread"]), _read_level(ag["process"]), lattices)
        res.combos[cname] = combo
    # the grid's order, as the analysis produced them (HDF5 lists groups by name)
    order = {name: i for i, name in enumerate(dict.fromkeys(r.combo for r in res.rows))}
    res.combos = dict(sorted(res.combos.items(), key=lambda kv: order.get(kv[0], len(order))))
    t = f["timing"]
    res.mpi_ranks = int(t.attrs.get("mpi_ranks", 1))
    res.timings = {k: float(v) for k, v in t.attrs.items() if k not in ("mpi_ranks", "h5py_parallel_available")}
    if "busy_by_rank" in t:
        res.busy_by_rank = (json.loads(t["busy_by_rank"].attrs["steps"]), t["busy_by_rank"][()])
    return res


def _as_str(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def _loader(dataset):
    return _guarded(dataset, lambda: dataset[()])


def _guarded(node, load):
    """``load`` for a lazy field: what a damaged file raises when it runs becomes the one
    damaged-file error naming the file."""
    def guarded():
        try:
            return load()
        except DAMAGE_ERRORS as exc:
            raise damaged(node.file.filename, exc) from None
    return guarded


def _read_level(g):
    values = {"classes": (g["classes_normal"][()], g["classes_faulty"][()]),
              "jsm_classes": (g["jsm_classes_normal"][()], g["jsm_classes_faulty"][()]),
              "scores": g["change_score"][()],
              # files written before the suspects were stored lack them
              "suspect": g["suspect"][()].astype(bool) if "suspect" in g else None,
              "change": g["change_kind"][()]}
    loaders = {which: _loader(g[f"jsm_{which}"]) for which in _LEVEL_FULL if f"jsm_{which}" in g}
    loaders.update({f"subsumption_{which}": _loader(g[f"subsumption_{which}"])
                    for which in ("normal", "faulty") if f"subsumption_{which}" in g})
    if "subsumption_classes_normal" in g:
        values["subsumption_classes"] = (g["subsumption_classes_normal"][()], g["subsumption_classes_faulty"][()])
    if "subsumption_cross" in g:
        cg = g["subsumption_cross"]
        cross = {"faulty_classes": cg["faulty_classes"][()]}
        for name in ("subsumes", "subsumed_by"):
            cross[name] = (cg[f"{name}_offsets"][()], cg[name][()])
        for name in ("normal_in_faulty", "faulty_in_normal"):
            if name in cg:
                cross[name] = cg[name][()]
        values["subsumption_cross"] = cross
    return Level(loaders, **values)


def _read_lattice(ag, label):
    g = ag.get(f"lattice/{label}")
    if g is None:
        return None
    if "skipped" in g.attrs:
        return Skipped(_as_str(g.attrs["skipped"]))
    return LatticeRef(_guarded(g, lambda: {key: g[key][()] for key in g}))


def _read_loop_timing(g, objects):
    """A combo's loop timing as written: {"table": {column: array}, "flags": [TimingFlag], "rule"}."""
    fg = g["flags"]
    cols = ("loop",) + _FLAG_FLOATS[:3] + ("iterations", "same_nlr") + _FLAG_FLOATS[3:]
    values = {c: fg[c][()].tolist() for c in cols}
    flags = [TimingFlag(rank=objects[o][0], thread=objects[o][1], **{c: values[c][i] for c in cols})
             for i, o in enumerate(fg["object"][()].tolist())]
    rule = {k: v.decode() if isinstance(v, bytes) else v for k, v in g.attrs.items()}
    return {"table": {c: g[c][()] for c in COLUMNS}, "flags": flags, "rule": rule}
