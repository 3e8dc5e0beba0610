"""What the HTML report and its PNG pictures read from the results (``store.read``), read
once and shaped for drawing.  The drawings (``svg``, ``png``) and the page (``report``)
work on what this gives them."""
import numpy as np

from .svg import block_max_diff, block_mean, grid_shape
from .text import key_label
from ..errors import DiffTraceError
from ..config import combo_name
from ..results import Skipped


class Level:
    """One (combo, attributes, level) block of the results (a ``results.Level``)."""

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

    def grids(self, max_cells):
        block, _ = grid_shape(self.n, max_cells)
        (cn, cf), (jn, jf) = self.classes, self.jsm
        return block, (block_mean(jn, cn, block), block_mean(jf, cf, block),
                       block_max_diff(jn, cn, jf, cf, block))


class ReportData:
    """What the page needs from the results, shaped once."""

    def __init__(self, results, path, max_cells):
        self.results = results
        self.path = str(path)
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

    def labels(self, level):
        keys = self.objects if level == "thread" else self.processes
        return [key_label(k, self.multi_thread) for k in keys]

    def lattice(self, combo, aname, run_name):
        """(lattice, None) of one run; (None, why) when it was not built; (None, None) when
        there is none (analyze ran with --no-lattice)."""
        found = self.setting(combo, aname).lattices[("normal", "faulty").index(run_name)]
        if found is None:
            return None, None
        if isinstance(found, Skipped):
            return None, found.reason
        return self.setting(combo, aname).lattice(("normal", "faulty").index(run_name)), None
