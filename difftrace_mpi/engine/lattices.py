"""The concept lattices across ranks: each rank builds partial lattices over its own
traces; the partials of every task meet in one binomial tree (``Choreography.tree_reduce``)
with these merge, pack and unpack functions.  A lattice over the concept cap becomes a
``Skipped`` carrying the same message on any sharding."""
import numpy as np

from ..errors import DiffTraceError
from ..results import Skipped
from ..stages.lattice import Lattice, merge


def local_lattice(rows, selected, objs, max_concepts):
    lattice = Lattice(max_concepts=max_concepts)
    try:
        lattice.add_objects(objs[selected], *selected_rows(rows.tocsr(), selected))
    except DiffTraceError as exc:       # over the cap: the same message on any sharding
        return Skipped(str(exc))
    return lattice


def selected_rows(rows, selected):
    """(indptr, indices, data) of the selected rows of a CSR matrix.  A shard's traces are
    ordered run first, so one run's rows are usually one block: sliced, not copied."""
    sel = np.flatnonzero(selected)
    if len(sel) and sel[-1] - sel[0] + 1 == len(sel):
        a, b = int(sel[0]), int(sel[-1]) + 1
        lo, hi = rows.indptr[a], rows.indptr[b]
        return rows.indptr[a:b + 1] - lo, rows.indices[lo:hi], rows.data[lo:hi]
    part = rows[sel]
    return part.indptr, part.indices, part.data


def merge_lists(a, b):
    """Two ranks' partial lattices merged position by position; one over the concept cap
    stays Skipped without affecting the others."""
    def one(x, y):
        if isinstance(x, Skipped) or isinstance(y, Skipped):
            return x if isinstance(x, Skipped) else y
        try:
            # both are this tree's partials, read once; their objects come from disjoint shards
            return merge(x, y, consume=True, disjoint=True)
        except DiffTraceError as exc:
            return Skipped(str(exc))
    return tuple(one(x, y) for x, y in zip(a, b))


def pack(lattices):
    return tuple(x if isinstance(x, Skipped) else x.to_arrays() for x in lattices)


def unpack(packed):       # exported by a peer rank just now: trusted
    return tuple(x if isinstance(x, Skipped) else Lattice.from_arrays(x, trusted=True) for x in packed)
