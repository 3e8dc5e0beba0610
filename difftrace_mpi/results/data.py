"""The results model: the data classes (``Results``, ``Combo``, ``Setting``) and their
lookups; each is made once and never changed (frozen dataclasses: the arrays inside are
the caller's to leave alone)."""
from dataclasses import dataclass, field

import numpy as np

from ..config import combo_name
from ..errors import DiffTraceError
from ..h5tables import intents_whole
from ..naming import token_label
from ..stages.diagnose import hang
from ..stages.classify.records import Level, Skipped
from . import notebook, tables


# what a results file that is damaged (edited, truncated, another layout) raises while it is read
DAMAGE_ERRORS = (KeyError, ValueError, IndexError, TypeError, OSError)


def damaged(path, exc):
    """The one error for a damaged results file (a JSONDecodeError is a ValueError)."""
    return DiffTraceError(f"damaged results file {path}: {type(exc).__name__}: {exc}")


class LatticeRef:
    """A concept lattice in the form the results file keeps (``h5tables.narrowed``:
    each intent as the entries added to a parent's, integers narrowed): ``stored()`` gives
    those arrays, ``load()`` the whole ones ``Lattice.from_arrays`` reads.  ``stored`` is the
    dict itself (what the analysis keeps: it pickles, to travel between ranks) or a
    function that reads it on first use (a results file); ``load``, if given, replaces the
    default rebuild (the file's guarded one)."""

    def __init__(self, stored, load=None):
        self._stored, self._load = stored, load

    def stored(self):
        return self._stored() if callable(self._stored) else self._stored

    def load(self):
        return self._load() if self._load is not None else intents_whole(self.stored())


@dataclass(frozen=True)
class Setting:
    """One attribute mode of one (filter, K) setting: both levels and the concept lattices
    (per run a ``LatticeRef``, a ``Skipped`` with the reason, a ``stages.classify.lattice.Lattice``,
    or None when lattices were not built)."""
    thread: Level
    process: Level
    lattices: tuple = (None, None)

    def level(self, name):
        return self.thread if name == "thread" else self.process

    def lattice(self, run):
        """Run ``run``'s lattice (0 normal, 1 faulty); DiffTraceError when it was not built."""
        from ..stages.classify.lattice import Lattice
        found = self.lattices[run]
        if found is None:
            raise DiffTraceError("no concept lattice was built for this setting (--no-lattice, lattices=False)")
        if isinstance(found, LatticeRef):
            found = Lattice.from_arrays(found.load())
        elif isinstance(found, Skipped):
            raise DiffTraceError(f"that lattice was not built: {found.reason}")
        return found


@dataclass(frozen=True)
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


@dataclass(repr=False, frozen=True)
class Results:
    """Everything the root knows at the end of an analysis (or reads back from a file),
    made once: no field is set afterwards (``engine.assembly.make_results``,
    ``store.read``).

    Read it through ``verdict`` (the answer: a dict, docs/results-format.md) and the
    tables, DataFrames (``culprits_table``, ``divergence_table``, ``hang_table``,
    ``ranking_table``, ``suspects_table``, ``traces_table``: ``results.tables``);
    ``events(rank, thread)`` reads one trace's events again;
    ``difftrace_mpi.diffnlr(results, rank, thread)`` diffs one trace.  In a notebook it
    shows as HTML, verdict first (``results.notebook``)."""
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
    # the results file these were read from (``store.StoredFile``: its path, its HDF5 handle),
    # None for results fresh from an analysis
    file: object = field(default=None, compare=False)
    # every faulty trace makes the same calls as its normal twin (the verdict's "none", or
    # "timing": only loop times changed); for results written before the verdict: JSM_D = 0
    # in every setting.  Set when made, from the fields above
    no_difference: bool = field(init=False, compare=False)

    def __post_init__(self):
        n, put = len(self.objects), lambda name, value: object.__setattr__(self, name, value)
        if self.entries is None:
            put("entries", np.zeros((2, n), dtype=np.int64))
        if self.open_calls is None:
            put("open_calls", [[""] * n, [""] * n])
        if self.diverged_at is None:
            put("diverged_at", np.full(n, -1, dtype=np.int64))
        if self.diverged_to is None:
            put("diverged_to", np.full(n, -1, dtype=np.int64))
        if self.stopped is None:
            put("stopped", np.zeros(n, dtype=bool))
        put("no_difference", no_difference(self.verdict, self.combos))

    def __repr__(self):
        kind = (self.verdict or {}).get("kind", "no verdict")
        return (f"<Results {kind}: {self.faulty_path} vs {self.normal_path or 'its own ranks and steps'}, "
                f"{len(self.objects)} traces, {len(self.rows)} ranking rows>")

    def _repr_html_(self):
        return notebook.html(self)

    @property
    def source(self):
        """The results file these were read from (``store.read``), or None for results fresh
        from an analysis."""
        return None if self.file is None else self.file.path

    def close(self):
        """Release the results file these were read from (``store.read``); nothing for
        results fresh from an analysis."""
        if self.file is not None:
            self.file.close()

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

    # -- tables for scripts and notebooks, and the JSON output (``results.tables``) -----
    def ranking_table(self, as_frame=None):
        return tables.ranking_table(self, as_frame)

    def suspects_table(self, as_frame=None):
        return tables.suspects_table(self, as_frame)

    def culprits_table(self, as_frame=None):
        return tables.culprits_table(self, as_frame)

    def divergence_table(self, as_frame=None):
        return tables.divergence_table(self, as_frame)

    def hang_table(self, as_frame=None):
        return tables.hang_table(self, as_frame)

    def traces_table(self, combo=None, as_frame=None):
        return tables.traces_table(self, combo, as_frame)

    def events(self, rank, thread=0, run="faulty", start=0, stop=None, max_events=tables.EVENTS_MAX, path=None):
        return tables.events(self, rank, thread, run, start, stop, max_events, path)

    def as_dict(self):
        return tables.as_dict(self)

    for _method in (ranking_table, suspects_table, culprits_table, divergence_table, hang_table, traces_table,
                    events, as_dict):
        _method.__doc__ = getattr(tables, _method.__name__).__doc__     # help() reads the one text
    del _method

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
        """Every object, the traces whose diffNLRs the views show first (``nlr_priority``)."""
        return nlr_priority(self.objects, self.verdict, self.rows, self.hang_view(limit=1), self.diverged_at)

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
        from ..stages.model import nlr
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

    # -- views of the data ------------------------------------------------------------
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
        return tail_labels(self.names, self.combos[self.best_combo()].tails[1][obj], tokens)

    def timing_flags(self):
        """{combo: [timing.TimingFlag]} for the settings whose traces carry timestamps
        (uftrace, OTF2): loops whose iteration time changed while their structure did not,
        ranked.  None when no trace had timestamps."""
        return {c: v.loop_timing["flags"] for c, v in self.combos.items() if v.loop_timing is not None} or None


def no_difference(verdict, combos):
    """Every faulty trace makes the same calls as its normal twin: the verdict says "none"
    or "timing"; for results written before the verdict, JSM_D = 0 in every setting."""
    if verdict:
        return verdict["kind"] in ("none", "timing")
    return all(not setting.level(level).scores.any() for c in combos.values()
               for setting in c.attrs.values() for level in ("thread", "process"))


def tail_labels(names, tail, tokens=3):
    """An NLR's last ``tokens`` tokens (``tail``: (ids, counts)) as text, e.g.
    "L1^7 MPI_Recv" (loops with their iteration counts)."""
    ids, counts = tail
    labels = [names[i] if i >= 0 else token_label(f"L{-i - 1}", c) for i, c in zip(ids.tolist(), counts.tolist())]
    return " ".join(labels[-tokens:])


def nlr_priority(objects, verdict, rows, hang_first, diverged_at):
    """Every object, the traces whose diffNLRs the views show first: the verdict's
    culprits, the best row's top suspects, the hang's likely cause (``hang_first``: the
    hang view of one trace, or None), each other row's top suspects, the traces that left
    their twin's path, then the rest in (rank, thread) order (the order in which the
    analysis keeps whole NLRs, ``stages.classify.nlr_keep``)."""
    index = {key: i for i, key in enumerate(objects)}
    named = [(c["rank"], c["thread"]) for c in (verdict or {}).get("culprits", [])]
    if rows:
        named += [key for key, _ in rows[0].top_threads]
    named += [left[0] for left in (hang_first or {}).get("left_normal_path", [])]
    named += [key for row in rows[1:] for key, _ in row.top_threads]
    order = dict.fromkeys(index[tuple(key)] for key in named if tuple(key) in index)
    order.update(dict.fromkeys(np.flatnonzero(np.asarray(diverged_at) >= 0).tolist()))
    order.update(dict.fromkeys(range(len(objects))))
    return list(order)
