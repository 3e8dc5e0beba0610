"""The ranking table's rules (functional core): one row per setting and linkage, the
order of the rows (``ROW_ORDER``: named criteria compared in turn, as docs/verdict.md
lists them), and the row whose suspects the verdict may cite."""
from typing import Callable, NamedTuple

import numpy as np

from .records import Row
from . import cluster


def rank_row(spec, k, aname, method, block, objects, processes, top, grid_index):
    """One ranking row: B-score and clusters of one linkage, the top suspects, how each
    changed, and whether the setting has structure and localises the fault."""
    level = block["thread"]
    b, clusters = cluster.compare_classes(level.jsm_classes[0], level.classes[0], level.jsm_classes[1],
                                          level.classes[1], method)
    procs = cluster.ranked_suspects(block["process"].scores, processes, top, block["process"].suspect)
    threads = cluster.ranked_suspects(level.scores, objects, top, level.suspect)
    changes = {key: tuple(level.change[objects.index(key)]) for key, _ in threads}
    changes.update({("p", r): tuple(block["process"].change[processes.index(r)]) for r, _ in procs})
    # localisation counts every suspect, not only the ``top`` shown: ranks named at either
    # level, or threads when there is a single process
    named_threads = np.flatnonzero(level.suspect)
    if len(processes) > 1:
        named = {objects[i][0] for i in named_threads} | \
            {processes[i] for i in np.flatnonzero(block["process"].suspect)}
        localised = cluster.localises(len(named), len(processes))
    else:
        localised = cluster.localises(len(named_threads), len(objects))
    return Row(spec.label, k, aname, method, b, clusters, procs, threads, grid_index, changes,
               cluster.has_structure(level.jsm_classes[0].shape[0], len(objects)), localised)


class RowCriterion(NamedTuple):
    name: str
    why: str
    value: Callable     # Row -> a sortable value, lower first


ROW_ORDER = (
    RowCriterion("names a suspect", "a setting that saw no change at all names nobody",
                 lambda r: not r.top_threads and not r.top_processes),
    RowCriterion("clustering changed", "a B-score of 1 (the same clusters in both runs) says nothing",
                 lambda r: not r.changed_clustering),
    RowCriterion("normal run structured", "without classes in the normal run every trace is an outlier",
                 lambda r: not r.structured),
    RowCriterion("suspects localise", "suspects covering half of the ranks or more (~) point nowhere",
                 lambda r: not r.localised),
    RowCriterion("lowest B-score", "the setting where the fault changed the clustering most",
                 lambda r: r.bscore),
    RowCriterion("grid order", "only so that the order is the same every time", lambda r: r.grid_index),
)


def ordered(rows):
    """The rows in ranking order: compared criterion by criterion (``ROW_ORDER``)."""
    return sorted(rows, key=lambda r: tuple(c.value(r) for c in ROW_ORDER))


def lead(rows):
    """The ranking's word for the verdict where the earliest difference is one most traces
    share: (its first suspect, the setting in words) of the first row whose clustering
    changed and whose suspects single out a few ranks; None without one."""
    row = next((r for r in rows if r.changed_clustering and r.localised and r.top_threads), None)
    if row is None:
        return None
    return ([key for key, _ in row.top_threads[:1]],
            f"{row.combo} {row.attributes} {row.linkage}, B-score {row.bscore:.3f}")
