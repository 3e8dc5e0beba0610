"""The concept lattices across ranks.  A bounded lattice (``stages.classify.lattice.bounded``:
on class representatives, within the concept cap and the work budget, else a stated partial
lattice) depends on the whole set of its run's classes, and every rank already holds that
set: the shards' distinct thread rows were gathered for the JSMs (``dedupe`` blocks, one
per rank).  So the pipeline builds each lattice once, on one rank, from those rows
(``build_lattices``):
- the lattices (two per setting: normal, faulty) are dealt to the ranks by their expected
  cost, the work budget of their classes (largest first, each to the least loaded rank;
  the same deal on every rank, no message): on 2 ranks each builds about half the work;
- per setting, step ``lattice <setting>``: each rank gathers the classes of the lattices
  it builds (``run_classes``); step ``lattice merge``: it builds them, all ranks at once
  (``build``, the one-rank build exactly); the finished arrays are gathered to the root,
  which keeps them as stored (``kept``).
Nothing is built twice and no class row travels again.  On 216 x 1 LULESH the tree
below built a trial lattice on every shard that the budget then dropped (the budget is
the whole job's), then sent, re-sorted and built the union at each tree's root anyway:
the merge cost what building costs, plus the trials and the travel.

The tree (``local_lattice``, ``merge``, ``pack``, ``unpack``, ``finish``, for
``Choreography.tree_reduce``) merges shards' parts where the class rows were not gathered:
each tries the complete lattice of its own classes on a share of their work budget
(``LOCAL_TRIAL_SHARE``); two complete lattices merge into one (``merge_bounded``); once
either side is partial, or a trial was dropped, only the class rows travel on
(``Classes``) and the tree's root builds the bounded lattice of the union once
(``finish``).  Either way the root's lattice is the one a single rank builds, on any
sharding.  A ``Skipped`` is left only for an error."""
import numpy as np

from .. import config
from ..errors import DiffTraceError
from ..results import LatticeRef
from ..stages.classify.records import Skipped
from ..stages.classify.classrows import ClassRows
from ..stages.classify.lattice import (Lattice, bounded, build, complete_within, merge_bounded, merged_work_factor,
                                       work_budget)
from ..stages.classify.rows import take_rows

# a shard's own lattice is tried on this share of its work budget: a complete lattice
# that needs more is built at the tree's root instead, so a dropped trial costs little
LOCAL_TRIAL_SHARE = 4


class Classes:
    """The class rows of a lattice not built yet (its cap and work factor with them)."""

    def __init__(self, rows, max_concepts, work_factor):
        self.rows, self.max_concepts, self.work_factor = rows, int(max_concepts), int(work_factor)


def local_lattice(rows, selected, objs, max_concepts, shards=1):
    """This shard's part of the lattice of the selected rows (objects ``objs[selected]``):
    alone (``shards`` 1), the bounded lattice; else its complete lattice when the trial
    affords it, or its ``Classes``."""
    try:
        if shards == 1:
            return bounded(*selected_rows(rows, selected), objs[selected], max_concepts)
        classes = ClassRows.from_rows(*selected_rows(rows, selected), objs[selected])
        factor = config.LATTICE_WORK_FACTOR
        whole = complete_within(classes, max_concepts, factor, LOCAL_TRIAL_SHARE)
        return whole if whole is not None else Classes(classes, max_concepts, factor)
    except DiffTraceError as exc:
        return Skipped(str(exc))


def selected_rows(rows, selected):
    """(indptr, indices, data) of the selected rows of a CSR matrix (``SparseRows``).  A
    shard's traces are ordered run first, so one run's rows are usually one block:
    sliced, not copied."""
    sel = np.flatnonzero(selected)
    if len(sel) and sel[-1] - sel[0] + 1 == len(sel):
        a, b = int(sel[0]), int(sel[-1]) + 1
        lo, hi = rows.indptr[a], rows.indptr[b]
        return rows.indptr[a:b + 1] - lo, rows.indices[lo:hi], rows.data[lo:hi]
    return take_rows(rows.indptr, rows.indices, rows.data, sel)


def merge(a, b):
    """Two ranks' parts of one task's lattice merged (``Choreography.tree_reduce`` keeps
    a Skipped, an error on some rank, as it is without affecting the other tasks).  The
    cap and work factor are a's."""
    if isinstance(a, Lattice) and isinstance(b, Lattice) and a.coverage is None and b.coverage is None:
        # both are this tree's partials, read once; their objects come from disjoint shards
        return merge_bounded(a, b, consume=True)
    return Classes(ClassRows.union([_rows(a), _rows(b)]), a.max_concepts, merged_work_factor(a, b))


def _rows(part):
    return part.rows if isinstance(part, Classes) else part.class_rows()


def finish(part):
    """At the tree's root: the lattice of classes not built yet."""
    return build(part.rows, part.max_concepts, part.work_factor) if isinstance(part, Classes) else part


def pack(part):
    """What travels: a lattice's arrays, its work factor and, for a partial one, the
    classes left out of it (the merge may take some of them in); or the class rows."""
    if isinstance(part, Classes):
        return "classes", part.rows.arrays(), part.max_concepts, part.work_factor
    return "lattice", part.to_arrays(), part.work_factor, None if part._left is None else part._left.to_dict()


def kept(packed):
    """What the root keeps of a peer's finished lattice: its arrays, as the results file
    stores them, rebuilt into a lattice only when asked for (``Setting.lattice``): on the
    8^3 every-distinct cube the root spent 0.5 s rebuilding lattices nothing read."""
    if packed[0] == "classes":
        return unpack(packed)
    arrays = packed[1]
    return LatticeRef(lambda: arrays)


def unpack(packed):       # exported by a peer rank just now: trusted
    if packed[0] == "classes":
        _, arrays, cap, factor = packed
        return Classes(ClassRows(*arrays), cap, factor)
    _, arrays, factor, left = packed
    out = Lattice.from_arrays(arrays, trusted=True)
    out.work_factor = factor
    out._left = None if left is None else ClassRows.from_dict(left)
    return out


# -- each lattice built once, by the rank it is dealt to ---------------------------------

def run_classes(pieces, run):
    """The classes (``ClassRows``) of run ``run``'s traces from the shards' distinct thread
    rows: ``pieces``, one ``dedupe`` block (indptr, indices, data, members) per rank."""
    ptrs, inds, wts, counts, objs = [np.zeros(1, dtype=np.int64)], [], [], [], []
    shift = 0
    for indptr, indices, data, members in pieces:
        mine = members[members[:, 0] == run]
        if not len(mine):
            continue
        order = np.argsort(mine[:, 2], kind="stable")       # objects grouped by their row
        used, count = np.unique(mine[order, 2], return_counts=True)
        p, i, w = take_rows(indptr, indices, data, used)
        ptrs.append(p[1:] + shift)
        shift += len(i)
        inds.append(i)
        wts.append(w)
        counts.append(count)
        objs.append(mine[order, 1])
    cat = lambda parts: np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)  # noqa: E731
    optr = np.zeros(sum(len(c) for c in counts) + 1, dtype=np.int64)
    np.cumsum(cat(counts), out=optr[1:])
    return ClassRows.sorted(cat(ptrs), cat(inds), cat(wts), optr, cat(objs))


def expected_cost(pieces, run):
    """What building run ``run``'s lattice may cost, the same on every rank: the work budget
    of its classes' size (counting a row every shard holds once per shard)."""
    size = 0
    for indptr, _, _, members in pieces:
        used = np.zeros(len(indptr) - 1, dtype=bool)
        used[members[members[:, 0] == run, 2]] = True
        size += int(np.count_nonzero(used)) + int(np.diff(indptr)[used].sum())
    return work_budget(size)


def deal(costs, ranks):
    """The rank that builds each item: largest expected cost first, each to the least loaded
    rank (the root last among equals: it also gathers and stores)."""
    loads = [0] * ranks
    owner = [0] * len(costs)
    for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        r = min(range(ranks), key=lambda r: (loads[r], -r))
        owner[i] = r
        loads[r] += costs[i]
    return owner


def build_lattices(ch, settings, max_concepts):
    """Both runs' lattices of every setting (``settings``: (name, the shards' thread
    ``dedupe`` blocks, or None for a setting over the class cap), grid order; normal then
    faulty), each built by the rank it is dealt to: the list of them on the root, as
    ``Lattice`` (its own), ``LatticeRef`` (gathered arrays) or ``Skipped``; None elsewhere."""
    items = [(pieces, run) for _, pieces in settings for run in (0, 1)]
    costs = [0 if pieces is None else expected_cost(pieces, run) for pieces, run in items]
    owner = deal(costs, ch.size)
    classes = {}
    for s, (name, pieces) in enumerate(settings):
        if pieces is not None:      # over the class cap: stated with the setting, no step
            ch.step(f"lattice {name}", lambda: classes.update(
                (i, run_classes(pieces, i % 2)) for i in (2 * s, 2 * s + 1) if owner[i] == ch.rank))

    def build_own():
        out = {}
        for i, part in classes.items():
            try:
                out[i] = build(part, max_concepts, config.LATTICE_WORK_FACTOR)
            except DiffTraceError as exc:
                out[i] = Skipped(str(exc))
        classes.clear()
        if ch.is_root:
            own.update(out)         # the root's own lattices stay here, whole
            return {}
        return {i: lat if isinstance(lat, Skipped) else lat.to_arrays() for i, lat in out.items()}
    own = {}
    built = ch.gather(ch.step("lattice merge", build_own))
    if not ch.is_root:
        return None
    merged = [Skipped("over the class cap") if pieces is None else None for pieces, _ in items]
    merged[:] = [own.get(i, item) for i, item in enumerate(merged)]
    for part in built:
        for i, item in part.items():
            merged[i] = item if isinstance(item, Skipped) else kept(("lattice", item))
    return merged
