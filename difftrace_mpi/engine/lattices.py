"""The concept lattices across ranks.  One rank builds each bounded lattice over its traces
(``stages.classify.lattice.bounded``: on class representatives, within the concept cap and the work
budget, else a stated partial lattice).  With more ranks, each tries the complete lattice
of its own classes on a share of their work budget (``LOCAL_TRIAL_SHARE``); the partials
of every task meet in one binomial tree per task (``Choreography.tree_reduce``, rooted on
different ranks) with these merge, pack, unpack and finish functions:
- two complete lattices merge into one (``merge_bounded``: the lattice a single rank builds
  over both shards' traces, complete or partial);
- once either side is partial, or a trial was dropped, only the class rows travel on
  (``Classes``) and the tree's root builds the bounded lattice of the union once
  (``finish``): a partial lattice is never built on a shard only to be rebuilt at every
  level of the tree (on 64 x 1 LULESH that doubled the lattices' time on 2 ranks).
Either way the root's lattice is the one a single rank builds, on any sharding; each
tree's root leaves it in the results' stored form (``finish``), the form it travels to
rank 0 in.  A ``Skipped`` is left only for an error."""
import numpy as np

from .. import config
from ..errors import DiffTraceError
from ..h5tables import narrowed
from ..results import LatticeRef
from ..stages.classify.records import Skipped
from ..stages.classify.classrows import ClassRows
from ..stages.classify.lattice import Lattice, bounded, build, complete_within, merge_bounded, merged_work_factor
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
    """At the tree's root: the lattice (of classes not built yet), in the form the results
    keep (``LatticeRef``: intents as added entries, ``h5tables.narrowed``), rebuilt
    only when asked for (``Setting.lattice``).  Encoded where it was built: what goes to
    the root is that compact form (real LULESH 216 x 1: 15.5 M intent entries -> 174 K),
    and the root's write, serial, only copies it out."""
    lattice = build(part.rows, part.max_concepts, part.work_factor) if isinstance(part, Classes) else part
    return LatticeRef(narrowed(lattice.to_arrays(stored=True)))


def pack(part):
    """What travels: a lattice's arrays, its work factor and, for a partial one, the
    classes left out of it (the merge may take some of them in); the class rows; or a
    finished lattice's stored arrays."""
    if isinstance(part, LatticeRef):
        return "stored", part.stored()
    if isinstance(part, Classes):
        return "classes", part.rows.arrays(), part.max_concepts, part.work_factor
    return "lattice", part.to_arrays(), part.work_factor, None if part._left is None else part._left.to_dict()


def unpack(packed):       # exported by a peer rank just now: trusted
    if packed[0] == "stored":
        return LatticeRef(packed[1])
    if packed[0] == "classes":
        _, arrays, cap, factor = packed
        return Classes(ClassRows(*arrays), cap, factor)
    _, arrays, factor, left = packed
    out = Lattice.from_arrays(arrays, trusted=True)
    out.work_factor = factor
    out._left = None if left is None else ClassRows.from_dict(left)
    return out
