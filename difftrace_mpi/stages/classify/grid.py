"""The parameter grid of the ranking table (filters x K x attributes x linkages), its
settings validated by the stage each belongs to; the defaults are config's."""
from dataclasses import dataclass

from . import attributes, cluster

from ..model import filters
from ...config import DEFAULT_ATTRIBUTES, DEFAULT_FILTERS, DEFAULT_KS, DEFAULT_LINKAGES, attr_name
from ...errors import DiffTraceError


@dataclass
class Grid:
    """The parameter grid of the ranking table: filters x K x attributes x linkages."""
    filters: tuple = DEFAULT_FILTERS          # FilterSpec objects (or spec strings)
    ks: tuple = DEFAULT_KS
    attributes: tuple = DEFAULT_ATTRIBUTES    # "sing.noFreq" ...
    linkages: tuple = DEFAULT_LINKAGES
    custom: str = None

    def __post_init__(self):
        self.filters = tuple(f if isinstance(f, filters.FilterSpec) else filters.parse_filter(f, self.custom)
                             for f in self.filters)
        self.attributes = tuple(a if isinstance(a, tuple) else attributes.parse_attribute(a)
                                for a in self.attributes)
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

    def as_dict(self, top):
        """The grid as stored with the results (JSON-able)."""
        return {"filters": [f.label for f in self.filters], "ks": list(self.ks),
                "attributes": [attr_name(*a) for a in self.attributes], "linkages": list(self.linkages),
                "custom": self.custom or "", "top": top}
