"""What the HTML report and its PNG pictures read from the results (``store.read``), read
once and shaped for drawing.  The drawings (``svg``, ``png``) and the page (``report``)
work on what this gives them."""
import numpy as np

from .svg import Layout, block_max_diff, block_mean, change_histogram, joint_classes
from ..errors import DiffTraceError
from ..config import combo_name
from ..stages.classify.records import Skipped


class Level:
    """One (combo, attributes, level) block of the results (a ``stages.classify.records.Level``)."""

    def __init__(self, level, keys):
        self.keys = keys
        self.classes = tuple(np.asarray(c, dtype=np.int64) for c in level.classes)
        self.jsm = level.jsm_classes
        self.scores = level.scores
        self.suspect = level.suspect
        self.full = all(level.has(w) for w in ("normal", "faulty", "diff"))
        # subsumption heatmaps only where the full matrices are kept (small N)
        self.sub = None
        if level.subsumption_classes is not None and all(level.has(f"subsumption_{w}") for w in ("normal", "faulty")):
            self.sub = level.subsumption_classes
        self.cross = None
        if level.subsumption_cross is not None:      # flat, as the file names them
            self.cross = {}
            for key, value in level.subsumption_cross.items():
                if isinstance(value, tuple):
                    self.cross[f"{key}_offsets"], self.cross[key] = value
                else:
                    self.cross[key] = value

    @property
    def n(self):
        return len(self.keys)

    def members(self, run):
        """Object indices of every class of ``run`` (0 normal, 1 faulty)."""
        cls = self.classes[run]
        order = np.argsort(cls, kind="stable")
        bounds = np.searchsorted(cls[order], np.arange(self.jsm[run].shape[0] + 1))
        return [order[bounds[c]:bounds[c + 1]] for c in range(self.jsm[run].shape[0])]

    def grids(self, layout):
        """The normal and faulty JSMs (mean J per cell) and JSM_D (max per cell) on
        ``layout``'s cells (a ``svg.Layout``)."""
        cells = layout.object_cells()
        (cn, cf), (jn, jf) = self.classes, self.jsm
        return block_mean(jn, cn, cells), block_mean(jf, cf, cells), block_max_diff(jn, cn, jf, cf, cells)

    def joint_view(self, layout, limit):
        """The per-class blocks of a large run: (groups, (J normal, J faulty, JSM_D), left
        out).  A group is a joint class, the objects in one normal class and one faulty
        class, so every value between two groups is exact; ``groups``: each group's object
        indices, in the order of their first object on ``layout``.  With more than
        ``limit`` groups, the ``limit`` most changed (largest JSM_D) are kept."""
        (cn, cf), (jn, jf) = self.classes, self.jsm
        joint, joint_of, _ = joint_classes(cn, cf)
        d = np.abs(jf[np.ix_(joint[:, 1], joint[:, 1])] - jn[np.ix_(joint[:, 0], joint[:, 0])]) \
            if len(joint) <= 4 * limit else None
        chosen = np.arange(len(joint))
        if len(joint) > limit:
            change = d.max(axis=1) if d is not None else np.array(
                [np.abs(jf[j[1], joint[:, 1]] - jn[j[0], joint[:, 0]]).max() for j in joint])
            chosen = np.sort(np.argsort(-change, kind="stable")[:limit])
        first = np.full(len(joint), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, joint_of[layout.order], np.arange(layout.n))
        chosen = chosen[np.argsort(first[chosen], kind="stable")]
        groups = [np.flatnonzero(joint_of == j) for j in chosen]
        sel = joint[chosen]
        jn_g, jf_g = jn[np.ix_(sel[:, 0], sel[:, 0])], jf[np.ix_(sel[:, 1], sel[:, 1])]
        return groups, (jn_g, jf_g, np.abs(jf_g - jn_g)), len(joint) - len(chosen)

    def change_histogram(self):
        """(unchanged, counts per JSM_D bin) over every pair of objects (``svg.change_histogram``)."""
        (cn, cf), (jn, jf) = self.classes, self.jsm
        return change_histogram(jn, cn, jf, cf)


class ReportData:
    """What the page needs from the results, shaped once."""

    def __init__(self, results, max_cells, graphviz=None):
        self.results = results
        self.graphviz = graphviz            # the path of Graphviz's dot, or None
        # what the page calls the results: their file, or the runs for results fresh from an analysis
        self.path = str(results.source or f"{results.faulty_path} vs {results.normal_path}")
        self.max_cells = max_cells
        summary = results.as_dict()
        self.rows = summary["rows"]
        self.consensus = summary["consensus"]
        self.normal, self.faulty = results.normal_path, results.faulty_path
        self.no_difference = bool(summary["no_difference"])
        self.formats, self.rank_sources = results.formats, results.rank_sources
        self.objects, self.processes = results.objects, results.processes
        self.present, self.complete = results.present, results.complete
        self.notes, self.grid, self.mpi_ranks = results.notes, results.grid, results.mpi_ranks
        self.multi_thread = any(t != 0 for _, t in self.objects)
        self.has_process_level = len(self.processes) != len(self.objects)
        # the verdict (None in files written before it) and the traces that differ from
        # their normal twins, in (rank, thread) order
        self.verdict = results.verdict
        self.divergences = [d for _, d in sorted(results.divergences.items())]
        self._levels = {}

    @property
    def stopped(self):
        """The divergences of the faulty traces that stopped early (hung, killed or died)."""
        return [d for d in self.divergences if d.stopped]

    @property
    def culprit_keys(self):
        """Every culprit the verdict lists, as (rank, thread) keys, in its order."""
        return self.results.culprit_keys(len((self.verdict or {}).get("culprits", [])))

    @staticmethod
    def combo_of(row):
        return combo_name(row["filter"], row["k"])

    def setting(self, combo, aname):
        setting = self.results.combos.get(combo, None)
        setting = setting.attrs.get(aname) if setting is not None else None
        if setting is None:
            raise DiffTraceError(f"{self.path}: no setting {combo} {aname}")
        return setting

    def level(self, combo, aname, level):
        key = (combo, aname, level)
        if key not in self._levels:
            keys = self.objects if level == "thread" else self.processes
            self._levels[key] = Level(self.setting(combo, aname).level(level), keys)
        return self._levels[key]

    def layout(self, level, thread=None):
        """The heatmap axis of ``level`` (``svg.Layout``): traces grouped by thread index,
        then by rank; ``thread``: that thread index only."""
        keys = self.objects if level == "thread" else self.processes
        return Layout(keys, self.max_cells, thread, self.multi_thread)

    @property
    def thread_ids(self):
        """The thread indices present, in order."""
        return sorted({int(t) for _, t in self.objects})

    def lattice(self, combo, aname, run_name):
        """(lattice, None) of one run; (None, why) when it was not built; (None, None) when
        there is none (analyze ran with --no-lattice)."""
        found = self.setting(combo, aname).lattices[("normal", "faulty").index(run_name)]
        if found is None:
            return None, None
        if isinstance(found, Skipped):
            return None, found.reason
        return self.setting(combo, aname).lattice(("normal", "faulty").index(run_name)), None
