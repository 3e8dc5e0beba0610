"""The one HDF5 layout of difftrace_mpi results, and the only module that knows its paths:
``write(results, path)`` and ``read(path) -> Results`` (the same ``results.Results`` the
analysis produced; large matrices and lattices load on first use, from a file kept open
until ``Results.close()``).  Every group, dataset, column and dtype is documented in
docs/results-format.md; a change to the layout bumps FORMAT_VERSION there and here.

Tables are compound datasets (one field per column: h5py and pandas read them as they
are, ``pandas.DataFrame(f["ranking"][()])``), ragged data long-format tables or CSR
columns (offsets + values); no dataset or attribute holds JSON.  A file of another
layout version is refused with one message, never half-read.

Written by the root only (the pip h5py is serial HDF5), atomically: a temporary file in
the same directory, renamed over the target when complete, so a failed job never leaves
a half-written file that looks complete.
"""
import os

import h5py
import numpy as np

from .config import RUN_LABELS
from .errors import DiffTraceError
from .fsutil import KeepFirstWriteError, atomic_path, check_regular_file
from .h5tables import (NONE, decoded, intents_whole, narrowed, read_csr, read_table, shared_rows,
                       Writing, strings, table_records, text, text_array, write_csr, write_table)
from .results import DAMAGE_ERRORS, Combo, LatticeRef, Results, Setting, damaged
from .stages.classify.records import Level, Row, Skipped
from .stages.diagnose.timing import COLUMNS, TimingFlag

FORMAT = "difftrace_mpi.results"
FORMAT_VERSION = 5         # 5: intents as entries added to a parent's (4: whole NLRs of some traces only)
_STR = h5py.string_dtype("utf-8")
_LEVEL_PAIRS = (("classes", "classes"), ("jsm_classes", "jsm_classes"),
                ("subsumption_classes", "subsumption_classes"))
_LEVEL_FULL = ("normal", "faulty", "diff")          # stored as jsm_<which>
_FLAG_FLOATS = ("normal_ns", "faulty_ns", "ratio", "own_normal_ns", "own_faulty_ns", "own_ratio")
# what reading a damaged file raises: h5py reports the HDF5 library's own failures (a
# corrupt heap, a loop of links) as RuntimeError
_READ_ERRORS = DAMAGE_ERRORS + (RuntimeError,)


# -- writing ------------------------------------------------------------------------------
_CULPRIT_COLUMNS = [("rank", "i8"), ("thread", "i8"), ("clock", "i8"), ("iteration", "i8"), ("status", "str"),
                    ("call", "str"), ("why", "str")]
_VICTIM_COLUMNS = [("stack", "str"), ("count", "i8"), ("members", "str"), ("main", "?")]
_DIED_COLUMNS = [("rank", "i8"), ("thread", "i8"), ("how", "str")]
_DIVERGENCE_COLUMNS = [("rank", "i8"), ("thread", "i8"), ("status", "str"), ("position", "i8"), ("clock", "i8"),
                       ("clock_end", "i8"), ("stopped", "?"), ("stack_end", "str")]
# the ragged parts of a divergence, long format: one row per call name, per loop level
_DIVERGENCE_LISTS = ("normal", "faulty", "call_path")
_DIVERGENCE_CALL_COLUMNS = [("row", "i8"), ("part", "str"), ("level", "i8"), ("position", "i8"), ("call", "str")]
_DIVERGENCE_LOOP_COLUMNS = [("row", "i8"), ("level", "i8"), ("loop_in", "str"), ("iteration", "i8"),
                            ("iterations", "i8")]
_LOOP_BODY = "loop_body"           # the part of a loop's body labels in /divergence_calls
_RANKING_COLUMNS = [("filter", "str"), ("k", "i8"), ("attributes", "str"), ("linkage", "str"), ("bscore", "f8"),
                    ("clusters", "i8"), ("structured", "?"), ("localised", "?")]
_SUSPECT_LEVELS = {"process": "top_processes", "thread": "top_threads"}      # level -> Row.as_dict key
_SUSPECT_COLUMNS = [("row", "i8"), ("level", "str"), ("position", "i8"), ("rank", "i8"), ("thread", "i8"),
                    ("score", "f8"), ("change", "str"), ("shared_of_normal", "f8"), ("shared_of_faulty", "f8")]
_ENDING_COLUMNS = [("run", "i8"), ("rank", "i8"), ("how", "str"), ("code", "i8"), ("signal", "str"),
                   ("thread", "i8"), ("call", "str"), ("error", "str"), ("time_ns", "i8"), ("mpi_calls", "i8")]
_WHERE_TEXT = ("call_path", "loop", "normal", "faulty")
_WHERE_INT = ("iteration", "iterations")
# what was compared modulo order (absent: nothing)
_ORDER_FREE = ("traces", "blocks", "events", "unfinished")
# the verdict's counts (a file written before cut_traces reads 0 for it)
_VERDICT_COUNTS = ("tied", "candidates", "changed_traces", "noise_traces", "cut_traces")


def _write_verdict(f, res):
    v = res.verdict
    g = f.create_group("verdict")
    for key in ("kind", "summary"):
        _put_attr(g.attrs, key, v[key])
    for key in _VERDICT_COUNTS:
        g.attrs[key] = int(v.get(key, 0))
    w = g.create_group("where")
    for key in _WHERE_TEXT:
        _put_attr(w.attrs, key, v["where"][key] or "")
    for key in _WHERE_INT:
        w.attrs[key] = NONE if v["where"][key] is None else int(v["where"][key])
    if v.get("confidence"):
        c = g.create_group("confidence")
        for key in ("level", "why", "raise"):
            _put_attr(c.attrs, key, v["confidence"][key])
    for key in ("same_point", "waited_on", "alone"):
        g.attrs[key] = int(v.get(key, 0))
    if v.get("shared_change"):
        sc = g.create_group("shared_change")
        sc.attrs["traces"] = int(v["shared_change"]["traces"])
        for key in ("members", "what"):
            _put_attr(sc.attrs, key, v["shared_change"][key])
    if v.get("order_free"):
        of = g.create_group("order_free")
        for key in _ORDER_FREE:
            of.attrs[key] = int(v["order_free"][key])
    write_table(g, "culprits", _CULPRIT_COLUMNS, v["culprits"])
    write_table(g, "victims", _VICTIM_COLUMNS, v["victims"])
    write_table(g, "died", _DIED_COLUMNS, v["died"])
    _write_divergences(f, [d for _, d in sorted(res.divergences.items())])
    write_table(f, "endings", _ENDING_COLUMNS, [dict(e, run=run, rank=rank) for (run, rank), e in sorted(res.endings.items())])


def _read_verdict(f, objects):
    """(verdict, order_free, divergences {object: Divergence}, endings {(run, rank): end
    record}) as written; (None, None, {}, {}) for a file written before the verdict."""
    if "verdict" not in f:
        return None, None, {}, {}
    g = f["verdict"]
    v = {key: _as_str(g.attrs[key]) for key in ("kind", "summary")}
    v.update({key: int(g.attrs.get(key, 0)) for key in _VERDICT_COUNTS})
    w = g["where"].attrs
    v["where"] = {**{key: _as_str(w[key]) or None for key in _WHERE_TEXT},
                  **{key: None if int(w[key]) == NONE else int(w[key]) for key in _WHERE_INT}}
    for key, columns in (("culprits", _CULPRIT_COLUMNS), ("victims", _VICTIM_COLUMNS), ("died", _DIED_COLUMNS)):
        v[key] = read_table(g[key], columns)
    sc = g.get("shared_change")
    v["shared_change"] = None if sc is None else {"traces": int(sc.attrs["traces"]),
                                                  "members": _as_str(sc.attrs["members"]),
                                                  "what": _as_str(sc.attrs["what"])}
    c = g.get("confidence")
    v["confidence"] = None if c is None else {key: _as_str(c.attrs[key]) for key in ("level", "why", "raise")}
    v.update({key: int(g.attrs.get(key, 0)) for key in ("same_point", "waited_on")})
    v["alone"] = bool(g.attrs.get("alone", 0))
    of = g.get("order_free")
    v["order_free"] = None if of is None else {key: int(of.attrs[key]) for key in _ORDER_FREE}
    verdict = {key: v[key] for key in ("kind", "culprits", "tied", "where", "victims", "died", "changed_traces",
                                       "noise_traces", "cut_traces", "candidates", "shared_change", "summary",
                                       "confidence", "same_point", "waited_on", "alone", "order_free")}
    index = {key: i for i, key in enumerate(objects)}
    divergences = {index[d.key]: d for d in _read_divergences(f)}
    # the loop nest of the first culprit's divergence (the where it was built from)
    from .stages.diagnose.verdict import where_loops
    first = verdict["culprits"][0] if verdict["culprits"] else None
    d = first and divergences.get(index.get((first["rank"], first["thread"])))
    verdict["where"]["loops"] = where_loops(d) if d is not None and verdict["where"]["iteration"] is not None else []
    endings = {}
    for row in read_table(f["endings"], _ENDING_COLUMNS):
        run, rank = row.pop("run"), row.pop("rank")
        endings[(run, rank)] = {k: val for k, val in row.items() if val is not None}
    return verdict, v["order_free"], divergences, endings


def _write_divergences(f, divergences):
    """/divergence, one row per trace that differs; its call lists and loop levels in the
    long tables /divergence_calls and /divergence_loops (``row`` = the /divergence row)."""
    calls, loops = [], []
    for row, d in enumerate(divergences):
        for part in _DIVERGENCE_LISTS:
            calls += [{"row": row, "part": part, "position": i, "call": c} for i, c in enumerate(getattr(d, part))]
        for level, (frame, body, iteration, iterations) in enumerate(d.loops):
            loops.append({"row": row, "level": level, "loop_in": frame, "iteration": iteration,
                          "iterations": iterations})
            calls += [{"row": row, "part": _LOOP_BODY, "level": level, "position": i, "call": c}
                      for i, c in enumerate(body)]
    write_table(f, "divergence", _DIVERGENCE_COLUMNS,
           [{"rank": d.key[0], "thread": d.key[1], "status": d.status, "position": d.position, "clock": d.clock,
             "clock_end": d.clock_end, "stopped": d.stopped, "stack_end": d.stack_end} for d in divergences])
    write_table(f, "divergence_calls", _DIVERGENCE_CALL_COLUMNS, calls)
    write_table(f, "divergence_loops", _DIVERGENCE_LOOP_COLUMNS, loops)


def _read_divergences(f):
    from .stages.diagnose.verdict import Divergence
    rows = read_table(f["divergence"], _DIVERGENCE_COLUMNS)
    loops = [{} for _ in rows]                         # per row: level -> (frame, body, iteration, iterations)
    for loop in read_table(f["divergence_loops"], _DIVERGENCE_LOOP_COLUMNS):
        _check_row("divergence_loops", loop["row"], len(rows))
        loops[loop["row"]][loop["level"]] = (loop["loop_in"] or "", [], loop["iteration"], loop["iterations"])
    lists = [{part: [] for part in _DIVERGENCE_LISTS} for _ in rows]
    # one list per (row, part, level): numpy groups the long table (a million calls at 32k traces)
    calls = table_records(f["divergence_calls"], _DIVERGENCE_CALL_COLUMNS)
    parts = _DIVERGENCE_LISTS + (_LOOP_BODY,)
    code = np.full(len(calls), -1)
    for i, part in enumerate(parts):
        code[calls["part"] == part.encode()] = i
    if (code < 0).any() or len(calls) and not (0 <= calls["row"].min() and calls["row"].max() < len(rows)):
        raise ValueError(f"/divergence_calls: a part not one of {', '.join(parts)}, or a row outside "
                         f"the {len(rows)} of /divergence")
    order = np.lexsort((calls["position"], calls["level"], code, calls["row"]))
    row, code, level = calls["row"][order], code[order], calls["level"][order]
    names = decoded(calls["call"][order])
    starts = np.flatnonzero(np.r_[len(row) > 0, (row[1:] != row[:-1]) | (code[1:] != code[:-1])
                                  | (level[1:] != level[:-1])])
    for start, end in zip(starts.tolist(), np.r_[starts[1:], len(order)].tolist()):
        r, part, lv = int(row[start]), parts[code[start]], int(level[start])
        if part != _LOOP_BODY:
            lists[r][part] = names[start:end]
        elif lv in loops[r]:
            loops[r][lv][1].extend(names[start:end])
        else:
            raise ValueError(f"/divergence_calls: loop level {lv} of row {r} is not in /divergence_loops")
    return [Divergence((d["rank"], d["thread"]), d["status"], d["position"], d["clock"],
                       named["normal"], named["faulty"], named["call_path"], [levels[lv] for lv in sorted(levels)],
                       d["stopped"], d["clock_end"], d["stack_end"] or "")
            for d, named, levels in zip(rows, lists, loops)]


def _check_row(table, row, rows):
    """A long table's ``row`` must point into its main table (a negative one would wrap)."""
    if row is None or not 0 <= row < rows:
        raise ValueError(f"/{table}: row {row} outside the {rows} rows it belongs to")


def write(results, path, force=False):
    """Write ``results`` to ``path`` atomically; refuses to overwrite unless ``force``.

    HDF5 writes through a Python file object that keeps the first write error (a full
    disk) from it: HDF5 meeting one itself crashes or prints pages of tracebacks.  The
    error is then one line ("disk full writing X"), the old file kept."""
    path = os.fspath(path)
    if os.path.exists(path) and not force:
        raise DiffTraceError(f"{path} exists; not overwritten without --force (force=True in the API)")
    with atomic_path(path, force) as tmp, open(tmp, "r+b") as fh:
        sink = KeepFirstWriteError(fh)
        try:
            with h5py.File(sink, "w") as f:
                _write(Writing(f), results)
        except Exception:
            if sink.error is None:
                raise
        sink.raise_error()          # an OSError: atomic_path makes it the one message
        fh.flush()
        os.fsync(fh.fileno())


def _write(f, res):
    f.attrs["format"] = FORMAT
    f.attrs["format_version"] = FORMAT_VERSION
    for key in RUN_LABELS:      # a directory's name may hold bytes that are not UTF-8
        _put_attr(f.attrs, key, getattr(res, f"{key}_path"))
    for ri, label in enumerate(RUN_LABELS):
        f.attrs[f"{label}_format"] = res.formats[ri]
        f.attrs[f"{label}_rank_source"] = res.rank_sources[ri]
    f.attrs["no_difference"] = bool(res.no_difference)
    f.create_dataset("names", data=text_array(res.names), dtype=_STR)
    obj = f.create_group("objects")
    obj["rank"] = np.array([r for r, _ in res.objects], dtype=np.int64)
    obj["thread"] = np.array([t for _, t in res.objects], dtype=np.int64)
    obj["present"] = res.present
    obj["complete"] = res.complete
    obj["entries"] = res.entries
    obj.create_dataset("open_calls", data=text_array(res.open_calls[0] + res.open_calls[1]).reshape(2, -1), dtype=_STR)
    obj["diverged_at"] = np.asarray(res.diverged_at, dtype=np.int64)
    obj["diverged_to"] = np.asarray(res.diverged_to, dtype=np.int64)
    obj["stopped"] = np.asarray(res.stopped, dtype=bool)
    f["processes"] = np.array(res.processes, dtype=np.int64)
    if res.verdict:
        _write_verdict(f, res)
    f.create_dataset("notes", data=text_array(res.notes), dtype=_STR)
    grid = f.create_group("grid")
    for key, value in res.grid.items():
        _put_attr(grid.attrs, key, value)
    _write_ranking(f, res.rows)
    combos = f.create_group("combos")
    for cname, combo in res.combos.items():
        g = combos.create_group(cname)
        g.attrs["filter"] = combo.filter
        g.attrs["k"] = combo.k
        write_csr(g.create_group("loops"), combo.loops)
        rows, indexes = shared_rows(combo.nlr)
        write_csr(g.create_group("nlr/rows"), rows)
        g["nlr/same"] = np.asarray(combo.same, dtype=bool)
        for ri, (label, index) in enumerate(zip(RUN_LABELS, indexes)):
            g[f"nlr/{label}/index"] = index
            g[f"nlr/{label}/length"] = np.asarray(combo.lengths[ri], dtype=np.int64)
            write_csr(g.create_group(f"nlr/{label}/tail"), combo.tails[ri])
        if combo.loop_timing is not None:
            _write_loop_timing(g.create_group("loop_timing"), combo.loop_timing, res.objects)
        for aname, setting in combo.attrs.items():
            a = g.create_group(f"attributes/{aname}")
            _write_level(a, "thread", setting.thread)
            if setting.process is setting.thread:       # one thread per process: one group, two names
                a.link("process", "thread")
            else:
                _write_level(a, "process", setting.process)
            for ri, lattice in enumerate(setting.lattices):
                if lattice is None:
                    continue
                lg = a.create_group(f"lattice/{RUN_LABELS[ri]}")
                if isinstance(lattice, Skipped):
                    lg.attrs["skipped"] = lattice.reason
                else:
                    stored = lattice.stored() if isinstance(lattice, LatticeRef) else narrowed(lattice.to_arrays(stored=True))
                    for key, arr in stored.items():
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
        _put_attr(timing["busy_by_rank"].attrs, "steps", steps)


def _put_attr(attrs, key, value):
    """A plain value as a typed attribute: a list of integers an int64 array, any other
    list a string array, a string as ``text`` (names may hold bytes that are not UTF-8), any
    other single value as it is."""
    if isinstance(value, str):
        attrs[key] = text(value)
    elif not isinstance(value, (list, tuple)):
        attrs[key] = value
    elif value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        attrs.create(key, np.array(value, dtype=np.int64))
    else:
        attrs.create(key, text_array(value), dtype=_STR)


def _plain(value):
    """An attribute read back as plain Python (the inverse of ``_put_attr``)."""
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value.item() if isinstance(value, np.generic) else value


def _write_ranking(f, rows):
    """/ranking, one row per ranking row in its sorted order, and its suspects, long
    format, in /ranking_suspects (``row`` = the /ranking row)."""
    rows = [r.as_dict() for r in rows]
    write_table(f, "ranking", _RANKING_COLUMNS, rows)
    write_table(f, "ranking_suspects", _SUSPECT_COLUMNS,
           [dict(suspect, row=i, level=level, position=position)
            for i, row in enumerate(rows) for level, key in _SUSPECT_LEVELS.items()
            for position, suspect in enumerate(row[key])])


def _read_ranking(f):
    rows = [dict(row, **{key: [] for key in _SUSPECT_LEVELS.values()})
            for row in read_table(f["ranking"], _RANKING_COLUMNS)]
    for suspect in sorted(read_table(f["ranking_suspects"], _SUSPECT_COLUMNS),
                          key=lambda s: (s["row"], s["position"])):
        _check_row("ranking_suspects", suspect["row"], len(rows))
        level = suspect.pop("level")
        if level not in _SUSPECT_LEVELS:
            raise ValueError(f"/ranking_suspects: level {level!r} is not one of {', '.join(_SUSPECT_LEVELS)}")
        if level == "process":
            del suspect["thread"]
        rows[suspect.pop("row")][_SUSPECT_LEVELS[level]].append(suspect)
    return [Row.from_dict(row, i) for i, row in enumerate(rows)]


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
    check_regular_file(path, "results file")
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise DiffTraceError(f"{path}: not a readable HDF5 file ({exc})") from None
    try:
        if f.attrs.get("format") != FORMAT:
            raise DiffTraceError(f"{path}: not a difftrace_mpi results file")
        version = _plain(f.attrs.get("format_version"))
        if version != FORMAT_VERSION or not isinstance(version, int) or isinstance(version, bool):
            if version is None:
                written = "an unknown layout"
            elif not isinstance(version, int) or isinstance(version, bool):
                written = f"an unknown layout (its format_version {version!r} is not a layout number)"
            else:
                written = f"layout {version}"
            raise DiffTraceError(f"{path}: written by difftrace_mpi {written}; this version reads layout "
                                 f"{FORMAT_VERSION}: re-run analyze")
        _check_sizes(f, path)
        results = _read(f, StoredFile(path, f))
    except DiffTraceError:
        f.close()
        raise
    except _READ_ERRORS as exc:
        f.close()
        raise damaged(path, exc) from None
    except MemoryError:
        f.close()
        raise _too_big(path, "reading it") from None
    return results


class StoredFile:
    """The results file a ``Results`` was read from: its ``path`` (failures inside the
    Results' ``with`` block name it), and the HDF5 file its large parts load from."""
    def __init__(self, path, h5file):
        self.path, self._h5file = path, h5file

    def close(self):
        h5file, self._h5file = self._h5file, None
        h5file is not None and h5file.close()


def _too_big(path, what):
    return DiffTraceError(f"damaged results file {path}: out of memory {what} (a dataset larger than this "
                          f"process may allocate)")


def _check_sizes(f, path):
    """Every dataset's declared size against the memory the process has left: a damaged
    file may declare a dataset of 2^40 values in a few bytes, which numpy would try to
    allocate when it is read (a MemoryError, or worse, memory taken)."""
    from .readers import budget
    left = budget.remaining()
    if left is None:
        return
    found = []

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset) and obj.size * obj.dtype.itemsize > left:
            found.append((name, obj.shape, obj.size * obj.dtype.itemsize))
    f.visititems(visit)
    if found:
        name, shape, size = found[0]
        raise DiffTraceError(f"damaged results file {path}: /{name} declares {shape} values "
                             f"({budget.format_size(size)}), more than the {budget.format_size(left)} this process "
                             f"has left (its memory budget)")


def _read_nlr(group):
    """(per run (the kept distinct NLRs of both runs, each object's row among them or -1),
    lengths (2, N), same (N,), per run each object's NLR tail)."""
    rows = read_csr(group["rows"])
    nlr = tuple((rows, group[f"{label}/index"][()]) for label in RUN_LABELS)
    lengths = np.stack([group[f"{label}/length"][()] for label in RUN_LABELS]).astype(np.int64)
    return nlr, lengths, group["same"][()].astype(bool), tuple(read_csr(group[f"{label}/tail"]) for label in RUN_LABELS)


def _read(f, stored):
    """The Results in open file ``f``, made once; ``stored``: the ``StoredFile`` they keep."""
    attr = lambda key: f.attrs[key].decode() if isinstance(f.attrs[key], bytes) else str(f.attrs[key])  # noqa: E731
    g = f["objects"]
    objects = list(zip(g["rank"][()].tolist(), g["thread"][()].tolist()))
    calls = [[c.decode("utf-8", "replace") if isinstance(c, bytes) else str(c) for c in run]
             for run in g["open_calls"][()]]
    verdict, order_free, divergences, endings = _read_verdict(f, objects)
    rows = _read_ranking(f)
    combos = {}
    for cname, cg in f["combos"].items():
        attrs = {aname: Setting(*_read_levels(ag), tuple(_read_lattice(ag, label) for label in RUN_LABELS))
                 for aname, ag in cg.get("attributes", {}).items()}
        combos[cname] = Combo(_as_str(cg.attrs["filter"]), int(cg.attrs["k"]), read_csr(cg["loops"]),
                              *_read_nlr(cg["nlr"]), attrs=attrs,
                              loop_timing=_read_loop_timing(cg["loop_timing"], objects) if "loop_timing" in cg
                              else None)
    # the grid's order, as the analysis produced them (HDF5 lists groups by name)
    order = {name: i for i, name in enumerate(dict.fromkeys(r.combo for r in rows))}
    combos = dict(sorted(combos.items(), key=lambda kv: order.get(kv[0], len(order))))
    t = f["timing"]
    return Results(attr("normal"), attr("faulty"), strings(f["names"]), objects, f["processes"][()].tolist(),
                   g["present"][()].astype(bool), g["complete"][()].astype(bool),
                   [attr(f"{label}_format") for label in RUN_LABELS],
                   [attr(f"{label}_rank_source") for label in RUN_LABELS], strings(f["notes"]),
                   entries=g["entries"][()], open_calls=calls,
                   diverged_at=g["diverged_at"][()], diverged_to=g["diverged_to"][()],
                   stopped=g["stopped"][()].astype(bool), verdict=verdict, order_free=order_free,
                   divergences=divergences, endings=endings, rows=rows, combos=combos,
                   grid={key: _plain(value) for key, value in f["grid"].attrs.items()},
                   mpi_ranks=int(t.attrs.get("mpi_ranks", 1)),
                   timings={k: float(v) for k, v in t.attrs.items() if k not in ("mpi_ranks", "h5py_parallel_available")},
                   busy_by_rank=(_plain(t["busy_by_rank"].attrs["steps"]), t["busy_by_rank"][()])
                   if "busy_by_rank" in t else None, file=stored)


def _as_str(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def _loader(dataset):
    return _guarded(dataset, lambda: dataset[()])


def _guarded(node, load):
    """``load`` for a lazy field: what a damaged file raises when it runs becomes the one
    damaged-file error naming the file."""
    def guarded():
        from .readers import budget
        if isinstance(node, h5py.Dataset):
            left = budget.remaining()
            size = node.size * node.dtype.itemsize
            if left is not None and size > left:
                raise DiffTraceError(f"damaged results file {node.file.filename}: {node.name} declares "
                                     f"{node.shape} values ({budget.format_size(size)}), more than the "
                                     f"{budget.format_size(left)} this process has left (its memory budget)")
        try:
            return load()
        except _READ_ERRORS as exc:
            raise damaged(node.file.filename, exc) from None
        except MemoryError:
            raise _too_big(node.file.filename, f"reading {node.name}") from None
    return guarded


def _read_levels(ag):
    """(thread level, process level) of one attribute mode: the very same Level where the
    file holds one group under both names (one thread per process), as the analysis had it."""
    thread = _read_level(ag["thread"])
    return thread, thread if ag["process"] == ag["thread"] else _read_level(ag["process"])


def _read_level(g):
    values = {"classes": (g["classes_normal"][()], g["classes_faulty"][()]),
              "jsm_classes": (g["jsm_classes_normal"][()], g["jsm_classes_faulty"][()]),
              "scores": g["change_score"][()],
              "suspect": g["suspect"][()].astype(bool),
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
    def stored():
        return {key: g[key][()] for key in g}
    return LatticeRef(_guarded(g, stored), load=_guarded(g, lambda: intents_whole(stored())))


def _read_loop_timing(g, objects):
    """A combo's loop timing as written: {"table": {column: array}, "flags": [TimingFlag], "rule"}."""
    fg = g["flags"]
    cols = ("loop",) + _FLAG_FLOATS[:3] + ("iterations", "same_nlr") + _FLAG_FLOATS[3:]
    values = {c: fg[c][()].tolist() for c in cols}
    flags = [TimingFlag(rank=objects[o][0], thread=objects[o][1], **{c: values[c][i] for c in cols})
             for i, o in enumerate(fg["object"][()].tolist())]
    rule = {k: v.decode() if isinstance(v, bytes) else v for k, v in g.attrs.items()}
    return {"table": {c: g[c][()] for c in COLUMNS}, "flags": flags, "rule": rule}
