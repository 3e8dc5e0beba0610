"""What the HTML report and its PNG pictures read from a results file (``analyze --out``),
read once: the one place the report touches the file's layout (``store``).  The drawings
(``svg``, ``png``) and the page (``report``) work on what this gives them."""
import json

import numpy as np

from .svg import block_max_diff, block_mean, grid_shape
from .text import key_label
from ..errors import DiffTraceError


class Level:
    """One (combo, attributes, level) block of a results file."""

    def __init__(self, group, keys):
        self.keys = keys
        self.classes = (group["classes_normal"][()].astype(np.int64), group["classes_faulty"][()].astype(np.int64))
        self.jsm = (group["jsm_classes_normal"][()], group["jsm_classes_faulty"][()])
        self.scores = group["change_score"][()]
        # the suspects (bool per object); files written before it was stored lack it
        self.suspect = group["suspect"][()].astype(bool) if "suspect" in group else None
        self.full = all(f"jsm_{w}" in group for w in ("normal", "faulty", "diff"))
        # subsumption heatmaps only where the full matrices are kept (small N)
        self.sub = None
        if all(f"subsumption_{w}" in group for w in ("normal", "faulty", "classes_normal", "classes_faulty")):
            self.sub = (group["subsumption_classes_normal"][()], group["subsumption_classes_faulty"][()])
        self.cross = None
        if "subsumption_cross" in group:
            cg = group["subsumption_cross"]
            self.cross = {k: cg[k][()] for k in cg}

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
    """What the page needs from a results file, read once."""

    def __init__(self, stored, max_cells):
        f = stored.file
        self.stored = stored
        self.path = stored.path
        self.max_cells = max_cells
        ranking = stored.ranking()
        self.rows = ranking.get("rows", [])
        self.consensus = ranking.get("consensus", {"processes": [], "threads": []})
        self.normal = str(f.attrs.get("normal", ranking.get("normal", "")))
        self.faulty = str(f.attrs.get("faulty", ranking.get("faulty", "")))
        self.no_difference = bool(f.attrs.get("no_difference", ranking.get("no_difference", False)))
        self.formats = [str(f.attrs.get(f"{r}_format", "")) for r in ("normal", "faulty")]
        self.rank_sources = [str(f.attrs.get(f"{r}_rank_source", "")) for r in ("normal", "faulty")]
        self.objects = stored.objects
        self.processes = f["processes"][()].tolist()
        self.present = f["objects/present"][()].astype(bool)
        self.complete = f["objects/complete"][()].astype(bool)
        self.notes = [n.decode("utf-8", "replace") if isinstance(n, bytes) else str(n) for n in f["notes"][()]]
        self.grid = {k: json.loads(v) for k, v in f["grid"].attrs.items()}
        self.mpi_ranks = int(f["timing"].attrs.get("mpi_ranks", 1)) if "timing" in f else 1
        self.multi_thread = any(t != 0 for _, t in self.objects)
        self.has_process_level = len(self.processes) != len(self.objects)
        self._levels = {}

    @staticmethod
    def combo_of(row):
        return f"{row['filter']}.K{row['k']}"

    def level(self, combo, aname, level):
        key = (combo, aname, level)
        if key not in self._levels:
            path = f"combos/{combo}/attributes/{aname}/{level}"
            if path not in self.stored.file:
                raise DiffTraceError(f"{self.path}: no {path}")
            keys = self.objects if level == "thread" else self.processes
            self._levels[key] = Level(self.stored.file[path], keys)
        return self._levels[key]

    def labels(self, level):
        keys = self.objects if level == "thread" else self.processes
        return [key_label(k, self.multi_thread) for k in keys]

    def lattice(self, combo, aname, run_name):
        """(lattice, None) of one run; (None, why) when it was not built; (None, None) when
        the file holds none (analyze ran with --no-lattice)."""
        from ..stages.lattice import Lattice
        path = f"combos/{combo}/attributes/{aname}/lattice/{run_name}"
        if path not in self.stored.file:
            return None, None
        group = self.stored.file[path]
        if "skipped" in group.attrs:
            return None, str(group.attrs["skipped"])
        return Lattice.from_arrays({key: group[key][()] for key in group}), None
