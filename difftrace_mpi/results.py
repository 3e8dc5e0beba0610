"""The one results model: what the analysis produces, what the store writes and reads back,
and all that the views and the CLI read.

``engine.pipeline.analyze`` builds a :class:`Results` on the root; ``store.write`` saves it
and ``store.read`` gives back the same types (large matrices and lattices load on first
use), so the text output, the HTML report and the commands on a results file share one
code path.  Objects are thread-level traces ``(rank, thread)`` in sorted order; run 0 is
the normal run, run 1 the faulty one.
"""
import os
from dataclasses import dataclass, field

import numpy as np

from .config import combo_name
from .errors import DiffTraceError
from .escape import html_text
from .model import plain_name
from .naming import token_label
from .stages.classify import cluster
from .stages.model import event_window
from .stages.diagnose import hang
from .stages.classify.records import Level, Skipped


# what a results file that is damaged (edited, truncated, another layout) raises while it is read
DAMAGE_ERRORS = (KeyError, ValueError, IndexError, TypeError, OSError)


def damaged(path, exc):
    """The one error for a damaged results file (a JSONDecodeError is a ValueError)."""
    return DiffTraceError(f"damaged results file {path}: {type(exc).__name__}: {exc}")


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
REPR_CULPRITS = 5         # culprits a notebook shows
REPR_NOTES = 5            # notes it lists
HANG_COLUMNS = ("rank", "thread", "progress", "open_calls", "nlr_tail", "left_normal_path", "calls_from", "calls_to")
TRACE_COLUMNS = ("rank", "thread", "present_normal", "present_faulty", "complete_normal", "complete_faulty",
                 "calls_normal", "calls_faulty", "open_calls_normal", "open_calls_faulty", "stopped", "calls_from",
                 "calls_to", "nlr_tokens_normal", "nlr_tokens_faulty", "nlr_same")
EVENT_COLUMNS = ("rank", "thread", "position", "event", "name", "function", "depth", "matching", "parent", "call",
                 "timestamp")
EVENTS_MAX = 10_000_000   # events one events() call gives unless asked for more (about 60 bytes each)
RUNS = {"normal": 0, "faulty": 1}


class LatticeRef:
    """A stored concept lattice, loaded on first use (``load`` gives its arrays)."""

    def __init__(self, load):
        self.load = load


@dataclass
class Setting:
    """One attribute mode of one (filter, K) setting: both levels and the concept lattices
    (per run a ``stages.classify.lattice.Lattice``, a ``Skipped`` with the reason, a ``LatticeRef``,
    or None when lattices were not built)."""
    thread: Level
    process: Level
    lattices: tuple = (None, None)

    def level(self, name):
        return self.thread if name == "thread" else self.process

    def lattice(self, run):
        """Run ``run``'s lattice (0 normal, 1 faulty); DiffTraceError when it was not built."""
        from .stages.classify.lattice import Lattice
        found = self.lattices[run]
        if found is None:
            raise DiffTraceError("no concept lattice was built for this setting (--no-lattice, lattices=False)")
        if isinstance(found, LatticeRef):
            found = Lattice.from_arrays(found.load())
        elif isinstance(found, Skipped):
            raise DiffTraceError(f"that lattice was not built: {found.reason}")
        return found


@dataclass
class Combo:
    """One (filter, K) setting: its loop table, what the analysis keeps of both runs' NLRs
    (``stages.classify.nlr_keep``: every trace's length, sameness and last tokens; the whole NLRs
    of the traces the verdict names first) and its attribute settings."""
    filter: str
    k: int
    loops: list                    # loop i's body: (ids, counts); id >= 0 function, < 0 loop -id-1
    nlr: tuple                     # per run: (distinct kept NLRs [(ids, counts)], index int64 (N,), -1: not kept)
    lengths: np.ndarray            # (2, N) int64: tokens of each object's NLR per run (absent: 0)
    same: np.ndarray               # (N,) bool: the object's NLR is identical in both runs
    tails: tuple                   # per run: N (ids, counts) pairs, each NLR's last tokens
    attrs: dict = field(default_factory=dict)   # attribute name -> Setting, grid order
    loop_timing: dict = None       # {"table", "flags" [TimingFlag], "rule"} where traces had timestamps

    @property
    def name(self):
        return combo_name(self.filter, self.k)


@dataclass(repr=False)
class Results:
    """Everything the root knows at the end of an analysis (or reads back from a file).

    Read it through ``verdict`` (the answer: a dict, docs/results-format.md) and the
    tables, DataFrames (``culprits_table``, ``divergence_table``, ``hang_table``,
    ``ranking_table``, ``suspects_table``, ``traces_table``); ``events(rank, thread)``
    reads one trace's events again; ``difftrace_mpi.diffnlr(results, rank, thread)`` diffs
    one trace.  In a notebook it shows as HTML, verdict first."""
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
    combos: dict = field(default_factory=dict)    # name -> Combo, grid order
    rows: list = field(default_factory=list)      # sorted Rows
    grid: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    # per step, each MPI rank's own work before the step's agreement (stragglers show here):
    # (step names, float64 (mpi_ranks, steps) seconds), or None
    busy_by_rank: tuple = None
    mpi_ranks: int = 1
    path_checked: bool = True      # False for files written before the normal-path check
    endings: dict = field(default_factory=dict)   # {(run, rank): end record} where the tracer wrote one
    stopped: np.ndarray = None     # bool (N,): the faulty trace stopped early (hung, killed, died)
    divergences: dict = field(default_factory=dict)   # object -> verdict.Divergence (traces that differ)
    verdict: dict = None           # stages.diagnose.verdict.build: the answer (the JSON contract)
    # what was compared modulo order (stages.compare.order): traces, free blocks, the events they
    # held, events of unfinished blocks left out; None where nothing was
    order_free: dict = None
    search_rounds: int = 0

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
        if self.stopped is None:
            self.stopped = np.zeros(n, dtype=bool)

    def __setattr__(self, name, value):      # the file handle's own ("_...") stay settable
        if self.__dict__.get("_made") and not name.startswith("_"):
            raise AttributeError(f"Results are made once: {name} cannot be set afterwards")
        object.__setattr__(self, name, value)

    def made(self):
        """The Results complete: no field is set afterwards.  Returns them."""
        self._made = True
        return self

    def __repr__(self):
        kind = (self.verdict or {}).get("kind", "no verdict")
        return (f"<Results {kind}: {self.faulty_path} vs {self.normal_path or 'its own ranks and steps'}, "
                f"{len(self.objects)} traces, {len(self.rows)} ranking rows>")

    def _repr_html_(self):
        """The verdict first (kind, confidence, the first culprits), then where to look next."""
        v = self.verdict or {}
        culprits = v.get("culprits", [])[:REPR_CULPRITS]
        cells = lambda c: "".join(f"<td>{html_text('' if c.get(k) is None else c.get(k))}</td>"  # noqa: E731
                                  for k in CULPRIT_COLUMNS)
        table = ("<table><thead><tr>" + "".join(f"<th>{k}</th>" for k in CULPRIT_COLUMNS) + "</tr></thead><tbody>"
                 + "".join(f"<tr>{cells(c)}</tr>" for c in culprits) + "</tbody></table>") if culprits else ""
        confidence = v.get("confidence") or {}
        against = html_text(self.normal_path) if self.normal_path else "its own ranks and time steps (no normal run)"
        notes = "".join(f"<li>{html_text(n)}</li>" for n in self.notes[:REPR_NOTES])
        return (f'<div class="difftrace-results"><p><b>Verdict: {html_text(v.get("kind", "none written"))}</b>'
                + (f' (confidence {html_text(confidence.get("level"))})' if confidence else "")
                + f"</p><p>{html_text(v.get('summary', ''))}</p>{table}"
                f"<p>{html_text(self.faulty_path)} against {against}: {len(self.objects)} traces, "
                f"{len(self.combos)} settings, {len(self.rows)} ranking rows. More: <code>culprits_table()</code>, "
                "<code>divergence_table()</code>, <code>hang_table()</code>, <code>ranking_table()</code>, "
                "<code>events(rank, thread)</code>, <code>difftrace_mpi.diffnlr(r, rank, thread)</code>.</p>"
                + (f"<details><summary>{len(self.notes)} notes</summary><ul>{notes}</ul></details>" if notes else "")
                + "</div>")

    @property
    def source(self):
        """The results file these were read from (``store.read``), or None for results fresh
        from an analysis."""
        return self.__dict__.get("_source")

    def close(self):
        """Release the results file these were read from (``store.read``); nothing for
        results fresh from an analysis."""
        closer, self._closer = self.__dict__.get("_closer"), None
        if closer is not None:
            closer()

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        self.close()
        # read from a file, a lookup that fails inside the ``with`` block (a dataset missing,
        # an index out of range, JSON that does not parse) means the file is damaged; an
        # OSError there may be an output being written, so it stays what it is
        source = self.source
        if source is not None and isinstance(exc, DAMAGE_ERRORS) and not isinstance(exc, OSError):
            raise damaged(source, exc) from exc

    # -- lookups -----------------------------------------------------------------------
    def object_index(self, key):
        """Index of trace ``(rank, thread)``; DiffTraceError naming it when absent."""
        try:
            return self.objects.index(tuple(key))
        except ValueError:
            raise DiffTraceError(f"no trace rank {key[0]} thread {key[1]} in {self.normal_path} "
                                 f"or {self.faulty_path}") from None

    def combo(self, name=None):
        """A (filter, K) setting by name; default: the best row's (else the first)."""
        name = name or self.best_combo()
        if name not in self.combos:
            raise DiffTraceError(f"no setting {name!r} in these results; they have {', '.join(self.combos)}")
        return self.combos[name]

    def best_combo(self):
        """The name of the best row's (filter, K) setting, else of the first one;
        DiffTraceError when no setting was analysed (the failed run alone has none)."""
        if self.rows:
            return self.rows[0].combo
        if not self.combos:
            raise DiffTraceError("these results hold no NLRs: no (filter, K) setting was analysed"
                                 + (" (the failed run was analysed alone)" if not self.normal_path else ""))
        return next(iter(self.combos))

    def differing_combo(self, obj):
        """The best row's setting, or the first in grid order where object ``obj``'s normal
        and faulty NLRs differ (a worker thread's calls are not in an MPI-only filter)."""
        best = self.best_combo()
        for name in [best] + [c for c in self.combos if c != best]:
            if not self.combos[name].same[obj]:
                return name
        return best

    def nlr_priority(self):
        """Every object, the traces whose diffNLRs the views show first: the verdict's
        culprits, the best row's top suspects, the hang's likely cause, each other row's top
        suspects, the traces that left their twin's path, then the rest in (rank, thread)
        order (the order in which the analysis keeps whole NLRs, ``stages.classify.nlr_keep``)."""
        index = {key: i for i, key in enumerate(self.objects)}
        named = self.culprit_keys(len((self.verdict or {}).get("culprits", [])))
        hang = self.hang_view(limit=1)
        if self.rows:
            named += self.top_keys(len(self.rows[0].top_threads))
        named += [left[0] for left in (hang or {}).get("left_normal_path", [])]
        named += [key for row in self.rows[1:] for key, _ in row.top_threads]
        order = dict.fromkeys(index[tuple(key)] for key in named if tuple(key) in index)
        order.update(dict.fromkeys(np.flatnonzero(np.asarray(self.diverged_at) >= 0).tolist()))
        order.update(dict.fromkeys(range(len(self.objects))))
        return list(order)

    def nlrs_kept(self, key):
        """Whether the results hold trace ``key`` = (rank, thread)'s whole NLRs (they hold
        those of the traces the verdict names first, up to a token budget; every setting's
        or none)."""
        obj = self.object_index(key)
        return all(combo.nlr[1][1][obj] >= 0 for combo in self.combos.values())

    def nlr_of(self, combo, run, obj):
        """(ids, counts) of object ``obj``'s NLR in run 0 (normal) or 1 (faulty);
        DiffTraceError when the results did not keep it (``nlrs_kept``)."""
        rows, index = self.combos[combo].nlr[run]
        if index[obj] < 0:
            rank, thread = self.objects[obj]
            raise DiffTraceError(
                f"the NLRs of rank {rank} thread {thread} ({combo}) are not in these results: they keep those of "
                f"the traces the verdict names first, up to --keep-nlrs tokens; diff them from the traces "
                f"('difftrace-mpi diffnlr NORMAL FAULTY --rank {rank} --thread {thread}') or analyze again "
                f"with a larger --keep-nlrs")
        return rows[index[obj]]

    def loop_labels(self, combo, loop):
        """Loop ``loop``'s body as labels, e.g. ["MPI_Send", "L0^4"]."""
        from .stages.model import nlr
        return nlr.token_labels(nlr.NLR(*self.combos[combo].loops[loop]), self.names)

    def culprit_keys(self, count):
        """The verdict's first ``count`` culprits as (rank, thread) keys."""
        return [(c["rank"], c["thread"]) for c in (self.verdict or {}).get("culprits", [])[:count]]

    def top_keys(self, count):
        """The best row's ``count`` top thread suspects."""
        return [key for key, _ in self.rows[0].top_threads[:count]] if self.rows else []

    def why_no_ranking(self):
        """Why the ranking table is empty, in words (None when it has rows)."""
        if self.rows:
            return None
        if not self.normal_path:
            return "made from the faulty run alone: no normal run to cluster against"
        if self.combos:         # the grid ran: every setting was over the class cap
            return "every setting has more classes than the class cap: see the notes"
        return "every trace equals its twin event for event"

    # -- derived views of the data -------------------------------------------------------
    @property
    def no_difference(self):
        """Every faulty trace makes the same calls as its normal twin (the verdict's "none",
        or "timing": only loop times changed); for results written before the verdict:
        JSM_D = 0 in every setting."""
        if self.verdict:
            return self.verdict["kind"] in ("none", "timing")
        return all(not setting.level(level).scores.any() for c in self.combos.values()
                   for setting in c.attrs.values() for level in ("thread", "process"))

    def hang_view(self, limit=5):
        """Progress of the faulty run where it stopped early (``stages.diagnose.hang.hang_view``),
        or None; also None for a file written before the normal-path check."""
        if not self.path_checked:
            return None
        return hang.hang_view(self.objects, self.present, self.complete, self.entries, self.open_calls,
                              self.diverged_at, self.diverged_to, limit, self.nlr_tail)

    def nlr_tail(self, obj, tokens=3):
        """Where in the loop nest a faulty trace ended: its last NLR tokens under the best
        row's setting, e.g. "L1^7 MPI_Recv" (loops with their iteration counts)."""
        if not self.rows:
            return ""
        ids, counts = self.combos[self.best_combo()].tails[1][obj]
        labels = [self.names[i] if i >= 0 else token_label(f"L{-i - 1}", c) for i, c in zip(ids.tolist(), counts.tolist())]
        return " ".join(labels[-tokens:])

    def timing_flags(self):
        """{combo: [timing.TimingFlag]} for the settings whose traces carry timestamps
        (uftrace, OTF2): loops whose iteration time changed while their structure did not,
        ranked.  None when no trace had timestamps."""
        return {c: v.loop_timing["flags"] for c, v in self.combos.items() if v.loop_timing is not None} or None

    # -- tables for scripts and notebooks (difftrace_mpi.api; docs/api.md) --------------
    # each a pandas DataFrame; ``as_frame=False`` gives its rows as a list of dicts.  One
    # meaning of ``position`` in all of them: an event's index in its trace as read (0-based,
    # what ``events()`` and ``api.load_run`` number); ranking rows are ``row``s
    def ranking_table(self, as_frame=None):
        """The ranking table, one row per setting, best first (``row`` 1 leads):
        ``top_processes`` lists ranks, ``top_threads`` (rank, thread) pairs, most
        suspect first."""
        return as_table([{"row": i, "combo": r.combo, "filter": r.filter, "k": r.k, "attributes": r.attributes,
                          "linkage": r.linkage, "bscore": r.bscore, "clusters": r.clusters,
                          "changed_clustering": r.changed_clustering, "structured": r.structured,
                          "localised": r.localised, "top_processes": [p for p, _ in r.top_processes],
                          "top_threads": [tuple(t) for t, _ in r.top_threads]}
                         for i, r in enumerate(self.rows, 1)], RANKING_COLUMNS, as_frame)

    def suspects_table(self, as_frame=None):
        """Every ranking row's top suspects, one row each (long format): the ranking
        table's ``row``, ``level`` (``process``: ``thread`` is None; or ``thread``),
        ``place`` in that row (1 = most suspect), the score and how the suspect changed
        (``Row.change_of``)."""
        records = []
        for i, r in enumerate(self.rows, 1):
            for level, items in (("process", [((p, None), s, ("p", p)) for p, s in r.top_processes]),
                                 ("thread", [(tuple(t), s, tuple(t)) for t, s in r.top_threads])):
                for place, ((rank, thread), score, key) in enumerate(items, 1):
                    records.append({"row": i, "combo": r.combo, "attributes": r.attributes,
                                    "linkage": r.linkage, "level": level, "place": place, "rank": rank,
                                    "thread": thread, "score": score, **r.change_of(key)})
        return as_table(records, SUSPECT_COLUMNS, as_frame)

    def culprits_table(self, as_frame=None):
        """The verdict's culprits, first first (empty for results written before the
        verdict); ``clock`` and ``iteration`` are None where unknown."""
        return as_table([{c: culprit.get(c) for c in CULPRIT_COLUMNS}
                         for culprit in (self.verdict or {}).get("culprits", [])], CULPRIT_COLUMNS, as_frame)

    def divergence_table(self, as_frame=None):
        """One row per trace that differs from its normal twin, in (rank, thread) order:
        where its first difference is (``position``: the index of the first event that
        differs, in both runs' traces as read: ``events(rank, thread, run)`` has it at that
        ``position``; ``clock``: MPI collectives before it), the calls there (``normal``,
        ``faulty``, space-separated), the call path (``a > b``) and its outermost loop with
        the iteration.  (Where order was compared as free, ``order_free``, or calls of
        more normal runs left out as noise, positions count the trace as compared.)"""
        records = []
        for _, d in sorted(self.divergences.items()):
            frame, body, iteration, iterations = d.loops[0] if d.loops else (None, None, None, None)
            records.append({"rank": d.key[0], "thread": d.key[1], "status": d.status, "position": d.position,
                            "clock": d.clock, "clock_end": d.clock_end, "stopped": d.stopped,
                            "normal": " ".join(d.normal), "faulty": " ".join(d.faulty),
                            "call_path": " > ".join(d.call_path),
                            "loop": f"[{' '.join(body)}] in {frame}" if body else None,
                            "iteration": iteration, "iterations": iterations})
        return as_table(records, DIVERGENCE_COLUMNS, as_frame)

    def hang_table(self, as_frame=None):
        """The hang view as a table: every faulty trace that stopped early, least
        progressed first (``progress``: calls entered / its normal twin's), with the calls
        open where it stopped, where its NLR ends, and whether it left the normal path
        before stopping (its first difference in calls [calls_from, calls_to): call
        numbers, 0-based in the order entered, ``events()``'s ``call`` column).  Empty when
        no trace stopped early; ``hang_view()`` has the same as a dict."""
        view = self.hang_view(limit=len(self.objects))
        if not view:
            return as_table([], HANG_COLUMNS, as_frame)
        left = {key: where for key, _, where in view["left_normal_path"]}
        return as_table([{"rank": key[0], "thread": key[1], "progress": progress, "open_calls": calls,
                          "nlr_tail": tail, "left_normal_path": key in left,
                          "calls_from": left[key][0] if key in left else None,
                          "calls_to": left[key][1] if key in left else None}
                         for key, progress, calls, tail in view["least"]], HANG_COLUMNS, as_frame)

    def traces_table(self, combo=None, as_frame=None):
        """The per-trace arrays by name, one row per trace in ``objects`` order: present
        and read to the end (``complete``) in each run, ``calls`` entered and
        ``open_calls`` at the end in each run, ``stopped`` (the faulty trace stopped
        early), ``calls_from``/``calls_to`` (where a stopped trace left the normal path:
        call numbers, missing elsewhere), and the NLR of setting ``combo`` (default: the
        best row's; missing without settings): its tokens in each run, ``nlr_same``."""
        pandas = pandas_module()
        n, both = len(self.objects), (("normal", 0), ("faulty", 1))
        columns = {"rank": np.array([r for r, _ in self.objects], dtype=np.int64),
                   "thread": np.array([t for _, t in self.objects], dtype=np.int64)}
        for name, values in (("present", self.present), ("complete", self.complete), ("calls", self.entries),
                             ("open_calls", self.open_calls)):
            columns.update({f"{name}_{label}": np.asarray(values[run]) for label, run in both})
        columns["stopped"] = np.asarray(self.stopped, dtype=bool)
        columns["calls_from"] = optional_ints(pandas, self.diverged_at)
        columns["calls_to"] = optional_ints(pandas, self.diverged_to)
        setting = self.combo(combo) if self.combos else None
        for label, run in both:
            columns[f"nlr_tokens_{label}"] = optional_ints(pandas, setting.lengths[run] if setting else np.full(n, -1))
        columns["nlr_same"] = pandas.arrays.BooleanArray(np.asarray(setting.same if setting else np.zeros(n), bool),
                                                         np.full(n, setting is None))
        frame = pandas.DataFrame(columns, columns=list(TRACE_COLUMNS))
        if as_frame is False:
            return [{k: (None if v is pandas.NA else v) for k, v in row.items()}
                    for row in frame.astype(object).to_dict("records")]
        return frame

    def events(self, rank, thread=0, run="faulty", start=0, stop=None, max_events=EVENTS_MAX, path=None):
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
        from .readers import discover_run, load_trace
        if run not in RUNS:
            raise DiffTraceError(f"run must be 'normal' or 'faulty', not {run!r}")
        index, key = RUNS[run], (int(rank), int(thread))
        obj = self.object_index(key)
        where = os.fspath(path) if path is not None else (self.normal_path, self.faulty_path)[index]
        if not where:
            raise DiffTraceError("these results have no normal run (the faulty run was analysed alone)")
        if not os.path.isdir(where):
            relative = "" if os.path.isabs(where) else " a relative path counts from the current directory"
            raise DiffTraceError(f"the {run} run directory of these results, {where}, is not there any more (moved or "
                                 f"deleted since the analysis?{relative}): give where it is now, events(..., path=DIR)")
        if not self.present[index, obj]:
            raise DiffTraceError(f"rank {key[0]} thread {key[1]} has no trace in the {run} run of these results")
        ref = next((r for r in discover_run(where).refs if (r.rank, r.thread) == key), None)
        if ref is None:
            raise DiffTraceError(f"{where}: the trace of rank {key[0]} thread {key[1]} is not there any more: the run "
                                 f"changed since the analysis")
        trace = load_trace(ref, {})
        calls = int(np.count_nonzero(trace.events))
        if calls != int(self.entries[index, obj]) and self.order_free is None:
            raise DiffTraceError(f"{ref.path}: {calls:,} calls, where the analysed trace had "
                                 f"{int(self.entries[index, obj]):,}: the run changed since the analysis")
        first, last, _ = slice(start, stop).indices(len(trace.events))
        if max_events is not None and last - first > max_events:
            raise DiffTraceError(f"rank {key[0]} thread {key[1]}: {last - first:,} events in the window, more than "
                                 f"max_events={max_events:,}: give start= and stop= (or max_events=None)")
        frame = events_frame(pandas, trace, first, max(first, last))
        frame.index = frame["position"].to_numpy()
        return frame

    def as_dict(self):
        """The ranking table, consensus, hang view and timing flags as plain data (the
        JSON output)."""
        consensus = {
            "processes": [{"rank": r, "rows": n, "best_position": b}
                          for r, n, b in cluster.consensus(self.rows, "top_processes")],
            "threads": [{"rank": r, "thread": t, "rows": n, "best_position": b}
                        for (r, t), n, b in cluster.consensus(self.rows, "top_threads")]}
        view = self.hang_view()
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
        flags = self.timing_flags()
        if flags is not None:
            timing = {"timing": {c: {"rule": self.combos[c].loop_timing["rule"],
                                     "flags": [dict(f.as_dict(), body=self.loop_labels(c, f.loop)) for f in fl]}
                                 for c, fl in flags.items()}}
        return {"verdict": self.verdict, "normal": self.normal_path, "faulty": self.faulty_path,
                "no_difference": self.no_difference,
                "divergences": [d.as_dict() for _, d in sorted(self.divergences.items())],
                "consensus": consensus, "hang": view, **timing, "rows": [r.as_dict() for r in self.rows]}


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
