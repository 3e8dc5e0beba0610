"""The JSMs and clustering step: which rank computes which (setting, attribute mode) task,
and the class JSMs of each, whole on its owner or in row blocks on every rank.  Every rank
decides the same from the same gathered class pieces (``pipeline.attribute_steps``)."""
import numpy as np

from ..stages.classify import ranking
from ..stages.classify.classes import compare_runs, rows_csr, unify
from ..stages.classify.jsm import jaccard_subsumption_direct, jaccard_subsumption_rows
from ..stages.classify.records import Skipped


def jsm_tasks(ch, tasks, shard, grid, full_limit, row_block_min, top):
    """The JSMs and ranking rows of the tasks this rank owns (``task_owners``).  Every rank
    walks every task in the same order, so the row-blocked JSMs (collective) line up; a
    failure is kept until the end of the walk for the same reason.  A task over the class
    cap gives its owner a ``Skipped`` block."""
    n_obj, n_proc = len(shard.objects), len(shard.processes)
    owners = task_owners(ch, tasks)
    done, failure = [], None
    for t, (cname, spec, k, aname, pieces, over) in enumerate(tasks):
        owner = owners[t]
        if over is not None:        # over the class cap: every rank decided alike (attribute_steps)
            if ch.rank == owner:
                done.append((t, Skipped(over), []))
            continue
        if ch.rank != owner and not may_row_block(pieces, row_block_min):
            continue        # small enough for its owner alone: the others skip even the unification
        try:
            unified = {"thread": unify([p[0] for p in pieces], n_obj)}
            # one thread per process: the pieces carry one level under both names, computed
            # once and filed as both below; else a process has several threads and its own classes
            if not all(p[0] is p[1] for p in pieces):
                unified["process"] = unify([p[1] for p in pieces], n_proc)
            # per level and run: (class JSM, class subsumption matrix), from one intersection matrix
            mats = {level: tuple(class_jsm(rows, ch, owner, row_block_min, f"JSM rows {cname} {aname}")
                                 for rows, _ in unified[level]) for level in unified}
            jsms = {level: (m[0][0], m[1][0]) for level, m in mats.items()}
            subs = {level: (m[0][1], m[1][1]) for level, m in mats.items()}
            if ch.rank == owner and failure is None:
                block = compare_runs(unified, jsms, full_limit, subs)
                block.setdefault("process", block["thread"])
                rows = [ranking.rank_row(spec, k, aname, method, block, shard.objects, shard.processes, top,
                                 t * len(grid.linkages) + m) for m, method in enumerate(grid.linkages)]
                done.append((t, block, rows))
        except Exception as exc:   # noqa: BLE001  re-raised below, after the walk
            failure = failure or exc
    if failure is not None:
        raise failure
    return done


# a task's cost besides its quadratic part, in classes squared (real LULESH: a task of 55
# classes per level took 0.01 s, one of 432 0.14 s)
JSM_TASK_FIXED = 128 ** 2


def task_owners(ch, tasks):
    """Each task's owner rank: the tasks shared out by their estimated cost
    (``Choreography.shard``), the sum over both levels of its classes squared (at most as
    many as all ranks' distinct rows: the JSMs and the clustering are quadratic in them)
    plus a fixed part.  Round-robin gave one of 2 ranks 0.33 s of real LULESH 216 x 1's
    0.58 s, most of the expensive settings.  Every rank decides the same from the same
    pieces."""
    costs = [JSM_TASK_FIXED + (0 if over is not None else sum(classes_at_most(pieces, which) ** 2 for which in (0, 1)))
             for *_, pieces, over in tasks]
    owners = [0] * len(tasks)
    for rank, owned in enumerate(ch.shard(costs)):
        for t in owned:
            owners[t] = rank
    return owners


def classes_at_most(pieces, which):
    """A bound on a level's classes in a run (``which``: 0 thread, 1 process): all ranks'
    distinct rows together, plus the empty row of absent objects."""
    return sum(len(p[which][0]) - 1 for p in pieces) + 1


def may_row_block(pieces, row_block_min):
    """Whether any of a task's class JSMs could be large enough for the row-blocked path
    (``classes_at_most``).  Every rank decides the same from the same pieces."""
    return any(classes_at_most(pieces, which) >= row_block_min for which in (0, 1))


def class_jsm(rows, ch, owner, row_block_min, name):
    """(class x class JSM, class x class subsumption matrix) of distinct rows, both from
    one intersection matrix, on ``owner`` ((None, None) elsewhere).  Large ones
    (>= row_block_min classes) are computed in row blocks on every rank (each block
    carries its JSM rows and subsumption rows side by side)."""
    csr = rows_csr(rows)
    n = len(rows)
    if ch.size > 1 and n >= row_block_min:
        both = ch.row_blocked(name, n, lambda lo, hi: np.hstack(jaccard_subsumption_rows(*csr, lo, hi)), owner)
        if both is None:
            return None, None
        return np.ascontiguousarray(both[:, :n]), np.ascontiguousarray(both[:, n:])
    if ch.rank != owner:
        return None, None
    return jaccard_subsumption_direct(*csr, expand=False)[:2]
