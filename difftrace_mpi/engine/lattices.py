"""The concept lattices across ranks: each rank builds bounded lattices over its own
traces (``stages.lattice.bounded``: on class representatives, within the concept cap and
the work budget, else a stated partial lattice); the partials of every task meet in one
binomial tree per task (``Choreography.tree_reduce``, rooted on different ranks) with these
merge, pack and unpack functions.
``merge_bounded`` makes the root's lattice, complete or partial, the one a single rank
builds over all traces, on any sharding.  A ``Skipped`` is left only for an error."""
import numpy as np

from ..errors import DiffTraceError
from ..stages.records import Skipped
from ..stages.classrows import ClassRows
from ..stages.lattice import Lattice, bounded, merge_bounded
from ..stages.rows import take_rows


def local_lattice(rows, selected, objs, max_concepts):
    """The bounded lattice of the selected rows (objects ``objs[selected]``)."""
    try:
        return bounded(*selected_rows(rows, selected), objs[selected], max_concepts)
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
    """Two ranks' partial lattices of one task merged (``Choreography.tree_reduce`` keeps
    a Skipped, an error on some rank, as it is without affecting the other tasks)."""
    # both are this tree's partials, read once; their objects come from disjoint shards
    return merge_bounded(a, b, consume=True)


def pack(lattice):
    """What travels: the lattice's arrays, its work factor and, for a partial one, the
    classes left out of it (the merge may take some of them in)."""
    return lattice.to_arrays(), lattice.work_factor, None if lattice._left is None else lattice._left.to_dict()


def unpack(packed):       # exported by a peer rank just now: trusted
    arrays, factor, left = packed
    out = Lattice.from_arrays(arrays, trusted=True)
    out.work_factor = factor
    out._left = None if left is None else ClassRows.from_dict(left)
    return out
