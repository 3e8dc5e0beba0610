"""The records the stages produce and the results carry: a ranking row (``Row``), one
level of one attribute setting (``Level``) and a partial result that could not be made
(``Skipped``).  Plain data: ``results.Results`` gathers them, ``store`` writes and reads
them."""
from dataclasses import dataclass, field

from ...config import combo_name
from .cluster import CHANGE_KINDS


class Skipped:
    """A partial result that could not be produced (a lattice whose building failed; one
    over its concept cap or work budget is kept as a stated partial lattice instead, see
    ``stages.classify.classrows.Coverage``)."""

    def __init__(self, reason):
        self.reason = reason

    def __repr__(self):
        return f"Skipped({self.reason!r})"


@dataclass
class Row:
    """One row of the ranking table: one (filter, K, attributes, linkage) setting."""
    filter: str
    k: int
    attributes: str
    linkage: str
    bscore: float
    clusters: int
    top_processes: list            # [(rank, score)]
    top_threads: list              # [((rank, thread), score)]
    grid_index: int                # position in the grid (ties of the sort; read back: table position)
    changes: dict = field(default_factory=dict)   # suspect key -> (kind, shared/normal, shared/faulty)
    structured: bool = True        # the normal run has classes (see cluster.has_structure)
    localised: bool = True         # the suspects touch fewer than half of the ranks (cluster.localises)

    @property
    def combo(self):
        """The name of this row's (filter, K) setting, e.g. ``11.mpi.K10``."""
        return combo_name(self.filter, self.k)

    @property
    def changed_clustering(self):
        """Whether the faulty run's clustering differs from the normal one (B < 1): a row
        whose clustering did not change is never the most changed setting."""
        return self.bscore < 1.0 - 1e-9

    def change_of(self, key):
        kind, share_n, share_f = self.changes.get(key, (0, 1.0, 1.0))
        return {"change": CHANGE_KINDS[int(kind)], "shared_of_normal": share_n, "shared_of_faulty": share_f}

    def as_dict(self):
        return {
            "filter": self.filter, "k": self.k, "attributes": self.attributes, "linkage": self.linkage,
            "bscore": self.bscore, "clusters": self.clusters, "structured": self.structured,
            "localised": self.localised,
            "top_processes": [{"rank": r, "score": s, **self.change_of(("p", r))} for r, s in self.top_processes],
            "top_threads": [{"rank": r, "thread": t, "score": s, **self.change_of((r, t))}
                            for (r, t), s in self.top_threads],
        }

    @classmethod
    def from_dict(cls, d, grid_index):
        """The inverse of ``as_dict`` (the store keeps rows as their dicts)."""
        kind = {name: i for i, name in enumerate(CHANGE_KINDS)}
        changes = {("p", p["rank"]): (kind[p["change"]], p["shared_of_normal"], p["shared_of_faulty"])
                   for p in d["top_processes"]}
        changes.update({(t["rank"], t["thread"]): (kind[t["change"]], t["shared_of_normal"], t["shared_of_faulty"])
                        for t in d["top_threads"]})
        return cls(d["filter"], int(d["k"]), d["attributes"], d["linkage"], float(d["bscore"]), int(d["clusters"]),
                   [(p["rank"], p["score"]) for p in d["top_processes"]],
                   [((t["rank"], t["thread"]), t["score"]) for t in d["top_threads"]],
                   grid_index, changes, bool(d["structured"]), bool(d["localised"]))


class Level:
    """One level (``thread`` or ``process``) of one attribute setting: per run the objects'
    classes and the class x class matrices, the change scores and suspects.

    Fields (each a pair is (normal, faulty)):
      classes             pair of int64 (N,): object -> class (identical attributes)
      jsm_classes         pair of (C, C) float64 class JSMs
      scores              float64 (N,): row sums of JSM_D (the suspect score)
      suspect             bool (N,): named a suspect (greedy cover of the changed pairs)
      change              float64 (N, 3): change kind (CHANGE_KINDS), shared/normal, shared/faulty
      subsumption_classes pair of (C, C) class subsumption matrices, or None
      subsumption_cross   the suspects' cross-run subsumption (see stages.classify.classes.cross_view), or None
      normal, faulty, diff, subsumption_normal, subsumption_faulty
                          the same expanded to N x N when N <= config.FULL_LIMIT, else None
    A value may be given as a zero-argument loader (a results file read back loads its
    large matrices on first use)."""

    FIELDS = ("classes", "jsm_classes", "scores", "suspect", "change", "subsumption_classes",
              "subsumption_cross", "normal", "faulty", "diff", "subsumption_normal", "subsumption_faulty")

    def __init__(self, loaders=None, **values):
        unknown = set(values) - set(self.FIELDS)
        if unknown:
            raise TypeError(f"Level has no field {sorted(unknown)}")
        self._loaders = dict(loaders or {})
        for name in self.FIELDS:
            if name not in self._loaders:
                setattr(self, name, values.get(name))

    def __getattr__(self, name):          # only reached for fields not loaded yet
        loaders = self.__dict__.get("_loaders", {})
        if name not in loaders:
            raise AttributeError(name)
        value = loaders.pop(name)()
        setattr(self, name, value)
        return value

    def has(self, name):
        """Whether field ``name`` holds a value, without loading it."""
        return name in self.__dict__.get("_loaders", {}) or self.__dict__.get(name) is not None
