"""Jaccard similarity matrices (JSMs) and subsumption of weighted intents: through a concept
lattice (``jaccard_from_lattice``) or directly from CSR rows of intents.

JSM from the lattice (``jaccard_from_lattice``): for two classes, |A meet B| is the total
weight of the intent of their least common ancestor, found by walking the Hasse diagram
(climbing from one class's concept, or sweeping the lattice top-down; see
``LatticeCore.lca_inter``);
|A join B| = w(A) + w(B) - |A meet B|; J = one float division of the two exact int64
numbers (1.0 when both are empty).  ``jaccard_direct`` computes the same integers from a
CSR of intents; both divide in the same kernel, so they agree bit for bit.

Subsumption (``subsumption_from_inter``, Brendel 2013 section 3.5): the asymmetric
S[i, j] = |A_i meet A_j| / w(A_i), the share of i's weighted attributes that j also has
(1 on the diagonal and for an empty A_i).  S[i, j] = 1 means j subsumes i: j does at
least everything i does ("does more work than"), S[i, j] = 1 > S[j, i] means strictly
more; both below 1 means different work.  It divides the same exact intersection
integers as the JSM, so ``jaccard_subsumption_direct`` / ``jaccard_subsumption_rows``
give both matrices for the cost of one.
"""
import numpy as np

from .rows import csr_args, int64_array, pairs_csr, row_labels, take_rows
from ...kernels import lattice as _k
from ...kernels import sparse as _sparse


def _expand(jc, inverse, expand):
    if not expand:
        return jc, inverse
    return jc.take(inverse, axis=0).take(inverse, axis=1)     # ~15x faster than np.ix_


_LCA_METHODS = {"auto": 0, "climb": 1, "sweep": 2}


def jaccard_from_lattice(lattice, object_ids=None, expand=True, method="auto"):
    """Pairwise (weighted) Jaccard similarity of objects, through the lattice.

    Works per pair of equivalence classes: intersection = intent weight of the least
    common ancestor of the two object concepts (walked in the Hasse diagram), union =
    w_i + w_j - intersection.  object_ids: the row/column order (default: all objects,
    sorted).  Returns the n x n float64 matrix, or with expand=False the class matrix and
    the class index of each object (J = Jc[np.ix_(inv, inv)]).  method: how the least
    common ancestors are walked ("climb" from each class through the cover edges, "sweep"
    the lattice top-down once per class, or "auto": the cheaper per class); all give
    the same numbers."""
    if method not in _LCA_METHODS:
        raise ValueError(f"method must be one of {', '.join(_LCA_METHODS)}, got {method!r}")
    core = lattice._core
    perm, _ = lattice.canonical_order()          # a top-down order; refuses a lattice broken by the cap
    if object_ids is None:
        object_ids = core.object_ids()
    cons = core.object_concepts(int64_array(object_ids).reshape(-1))
    cls, inverse = np.unique(cons, return_inverse=True)
    cls = np.ascontiguousarray(cls, dtype=np.int32)
    inter = core.lca_inter(cls, perm, _LCA_METHODS[method])
    w = np.ascontiguousarray(np.diagonal(inter), dtype=np.int64)
    return _expand(_k.jaccard_from_inter(inter, w), inverse.reshape(-1), expand)


def _class_rows(indptr, indices, weights):
    """Distinct rows of a CSR of intents: (indptr, indices, weights of the distinct rows in
    order of first appearance, class index of each row, each class's total weight)."""
    indptr, indices, weights = csr_args(indptr, indices, weights)
    first_of = row_labels(indptr, indices, weights)       # per row, the first equal row
    firsts, inverse = np.unique(first_of, return_inverse=True)   # ascending = first appearance
    uptr, uind, uwt = take_rows(indptr, indices, weights, firsts)
    return uptr, uind, uwt, inverse.reshape(-1).astype(np.int64), _row_totals(uptr, uwt)


def _row_totals(indptr, weights):
    """Each row's total weight = its intersection with itself (the JSM's diagonal)."""
    cumulative = np.concatenate([[0], np.cumsum(weights, dtype=np.int64)])
    return cumulative[indptr[1:]] - cumulative[indptr[:-1]]


INTER_BLOCK_BYTES = 64 << 20     # one row block of the intersection sums (float32 or int64)


def _class_matrices(indptr, indices, weights, jaccard=True, subsumption=False):
    """Class Jaccard and/or subsumption matrices of the distinct rows.  Returns ([J], [S],
    class index of each row)."""
    uptr, uind, uwt, inverse, w = _class_rows(indptr, indices, weights)
    jc, sc = _blocked_matrices(uptr, uind, uwt, w, 0, len(w), jaccard, subsumption)
    return jc, sc, inverse


def _blocked_matrices(indptr, indices, weights, w, lo, hi, jaccard, subsumption):
    """Rows lo..hi-1 of the Jaccard and/or subsumption matrix of the CSR rows (totals
    ``w``), the intersection sums computed in row blocks of about INTER_BLOCK_BYTES, so
    that only the float64 results are ever as large as the whole row range.  For the
    whole matrix only the upper triangle is summed and divided (the sums are symmetric),
    then mirrored: half the products and divisions, the same bits."""
    n = len(w)
    whole = lo == 0 and hi == n
    jc = np.empty((hi - lo, n), dtype=np.float64) if jaccard else None
    sc = np.empty((hi - lo, n), dtype=np.float64) if subsumption else None
    step = max(1, INTER_BLOCK_BYTES // (8 * max(n, 1)))
    layers = _Layers(indptr, indices, weights)
    for a in range(lo, hi, step):
        b = min(hi, a + step)
        c = a if whole else 0                   # first column summed
        block = layers.block(a, b, c)
        if jaccard:
            _k.jaccard_from_inter(block, w, a, jc[a - lo:b - lo], c)
        if subsumption:
            if whole:                           # exact sums kept; divided after mirroring
                sc[a:b, c:] = block
            else:
                sc[a - lo:b - lo] = subsumption_from_inter(block, w[a:b])
        del block
    if whole:
        for m in (jc, sc):
            if m is not None:
                _k.mirror_upper(m)
        if subsumption:
            for a in range(0, n, step):
                b = min(n, a + step)
                sc[a:b] = subsumption_from_inter(sc[a:b], w[a:b])
    return jc, sc


def jaccard_direct(indptr, indices=None, weights=None, expand=True):
    """Pairwise weighted Jaccard sum(min)/sum(max) straight from a CSR of intents (rows =
    objects; weights None = binary; or pass a CSR matrix alone, ``rows.SparseRows``).
    Identical rows are merged first; the result is bit-identical to jaccard_from_lattice.
    With expand=False returns (class matrix, class index of each row); classes are
    numbered in order of first appearance."""
    jc, _, inverse = _class_matrices(indptr, indices, weights)
    return _expand(jc, inverse, expand)


# ----------------------------------------------------------------------------------------
# Subsumption (asymmetric; Brendel 2013, section 3.5, a Tversky index)

def subsumption_from_inter(inter, w_rows):
    """S[i, j] = inter[i, j] / w_i: the share of row i's (weighted) attributes that j also
    has.  ``inter`` holds rows lo..hi-1 of the intersection matrix, ``w_rows`` those rows'
    total weights; one float64 division of two exact integers per cell (so every path
    gives the same bits), and 1.0 where w_i = 0 (an empty trace is subsumed by anything).
    S[i, i] = 1; S[i, j] = 1 means j subsumes i (does at least everything i does)."""
    w_rows = np.asarray(w_rows, dtype=np.int64).reshape(-1, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = inter.astype(np.float64) / w_rows.astype(np.float64)
    out[np.broadcast_to(w_rows == 0, out.shape)] = 1.0
    return out


def jaccard_subsumption_direct(indptr, indices=None, weights=None, expand=True):
    """Jaccard and subsumption matrices from one intersection matrix (the cost of one
    JSM): (J, S), or with expand=False (class J, class S, class index of each row).  J is
    bit-identical to ``jaccard_direct``; S as ``subsumption_from_inter``."""
    jc, sc, inverse = _class_matrices(indptr, indices, weights, subsumption=True)
    if not expand:
        return jc, sc, inverse
    return _expand(jc, inverse, True), _expand(sc, inverse, True)


def subsumption_direct(indptr, indices=None, weights=None, expand=True):
    """The N x N subsumption matrix S[i, j] = |A_i meet A_j| / |A_i| of the rows of a CSR
    of intents (arguments as ``jaccard_direct``); with expand=False (class matrix, class
    index of each row)."""
    _, sc, inverse = _class_matrices(indptr, indices, weights, jaccard=False, subsumption=True)
    return _expand(sc, inverse, expand)


def cross_subsumption(rows_a, rows_b):
    """Subsumption between two lists of rows ((sorted codes, weights) pairs), e.g. the
    faulty rows of suspects against the normal run's classes: (a_in_b, b_in_a), both
    len(rows_a) x len(rows_b) float64; a_in_b[i, j] = share of a_i's weight that b_j also
    has (1: b_j subsumes a_i), b_in_a[i, j] = share of b_j's weight that a_i has (1: a_i
    subsumes b_j); 1.0 for an empty row.  One ``min_sums`` over the stacked rows."""
    m = len(rows_a)
    indptr, indices, weights = csr_args(*pairs_csr(list(rows_a) + list(rows_b)))
    inter = min_sums(indptr, indices, weights, 0, m)[:, m:]
    w = _row_totals(indptr, weights)
    return subsumption_from_inter(inter, w[:m]), subsumption_from_inter(inter.T, w[m:]).T


LAYERED_MAX_WEIGHT = 64     # up to this weight, min-sums go through sparse products


def min_sums(indptr, indices, weights, lo=0, hi=None):
    """inter[i, j] = sum over common attributes of min(w_i, w_j), rows lo..hi-1 against all.

    Exact int64 either way.  Small weights (presence, log2, log10) use matrix products over
    weight layers: min(a, b) = #{t >= 1 : a >= t and b >= t}, so the sum is the sum over t
    of the product of the indicator matrices [w >= t] (one layer for presence); large
    weights (actual counts) use the pairwise merge kernel."""
    return inter_sums(indptr, indices, weights, lo, hi).astype(np.int64, copy=False)


def inter_sums(indptr, indices, weights, lo=0, hi=None):
    """``min_sums`` without the final int64 copy: float32 when every layer went through
    BLAS and no row's total weight reaches 2^24 (so every sum is an exact float32
    integer), int64 otherwise.  Both Jaccard paths divide exactly the same integers."""
    n = len(indptr) - 1
    return _Layers(indptr, indices, weights).block(lo, n if hi is None else hi)


class _Layers:
    """The weight layers of a CSR of intents, prepared once for any number of row blocks
    of the intersection sums (dense 0/1 float32 matrices where BLAS pays, 0/1 rows and
    their transpose for the sparse product kernel elsewhere, their columns renumbered to
    the used ones; the pairwise merge kernel for large weights)."""

    def __init__(self, indptr, indices, weights):
        self.indptr, self.indices, self.weights = indptr, indices, weights
        self.n = n = len(indptr) - 1
        top = int(weights.max()) if len(weights) else 0
        self.merge = top > LAYERED_MAX_WEIGHT
        self.dense, self.sparse = [], []
        if self.merge or top == 0:
            return
        self.exact32 = int(_row_totals(indptr, weights).max()) < (1 << 24)
        # the attributes renumbered 0..m-1 once, for every layer: no index the size of the codes
        n_attrs, attr_ids = _renumbered(indices)
        kept_before = np.zeros(len(weights) + 1, dtype=np.int64)
        for t in range(1, top + 1):
            kept = weights >= t                     # layer t: the attributes of weight >= t
            np.cumsum(kept, out=kept_before[1:])
            nnz = int(kept_before[-1])
            if nnz == 0:
                break
            layer_ptr, cols = kept_before[indptr], attr_ids[kept]
            used = np.bincount(cols, minlength=n_attrs) > 0
            n_used = int(np.count_nonzero(used))
            if _dense_pays(nnz, n, n_used):
                # SPMD traces share most attributes: a dense 0/1 product through BLAS beats
                # the sparse one by ~8x there, and float32 sums of 0/1 terms are exact below 2^24
                dense = np.zeros((n, n_used), dtype=np.float32)
                dense[np.repeat(np.arange(n), np.diff(layer_ptr)), (np.cumsum(used) - 1)[cols]] = 1.0
                self.dense.append(dense)
            else:
                self.sparse.append((layer_ptr, cols, *_sparse.column_rows(layer_ptr, cols, n_attrs)))

    def block(self, lo, hi, col_lo=0):
        """Rows lo..hi-1, columns col_lo..n-1 of the intersection sums."""
        if self.merge:
            args = (self.indptr, np.ascontiguousarray(self.indices), np.ascontiguousarray(self.weights))
            if lo == 0 and hi == self.n:
                full = _k.csr_min_sums(*args)
            else:
                full = _k.csr_min_sums_rows(*args, lo, hi)
            return full if col_lo == 0 else np.ascontiguousarray(full[:, col_lo:])
        inter = None
        if self.sparse or not self.dense:
            inter = np.zeros((hi - lo, self.n - col_lo), dtype=np.int64)
        for layer in self.sparse:               # summed in place, exact int64
            status = _sparse.binary_product_rows(*layer, lo, hi, col_lo, inter)
            if status != _sparse.BLOCK_OK:
                raise ValueError(f"rows {lo}..{hi - 1}, columns {col_lo}.. outside the {self.n} rows")
        for dense in self.dense:
            part = dense[lo:hi] @ dense[col_lo:].T
            if inter is None:
                inter = part if self.exact32 else part.astype(np.int64)
            elif inter.dtype == part.dtype:
                inter += part
            else:
                np.add(inter, part, out=inter, casting="unsafe")
            del part
        return inter


def _renumbered(indices):
    """(m, each entry's attribute as 0..m-1 in ascending order), m distinct attributes."""
    distinct, inverse = np.unique(indices, return_inverse=True)
    return len(distinct), inverse.reshape(-1).astype(np.int64, copy=False)


DENSE_MIN_DENSITY = 0.02             # share of ones in the used columns above which BLAS wins
DENSE_MAX_BYTES = 1 << 30            # the dense 0/1 matrix of one layer


def _dense_pays(nnz, n_rows, n_cols):
    return (n_cols < (1 << 24) and n_rows * n_cols * 4 <= DENSE_MAX_BYTES
            and nnz >= DENSE_MIN_DENSITY * n_rows * n_cols)


def _row_range(indptr, indices, weights, lo, hi, jaccard, subsumption):
    indptr, indices, weights = csr_args(indptr, indices, weights)
    return _blocked_matrices(indptr, indices, weights, _row_totals(indptr, weights), lo, hi, jaccard, subsumption)


def jaccard_rows(indptr, indices, weights, lo, hi):
    """Rows lo..hi-1 of the Jaccard matrix of the (distinct) CSR rows, bit-identical to the
    same rows of ``jaccard_direct(..., expand=False)[0]`` (the same exact sums and the one
    division kernel)."""
    return _row_range(indptr, indices, weights, lo, hi, True, False)[0]


def jaccard_subsumption_rows(indptr, indices, weights, lo, hi):
    """Rows lo..hi-1 of the Jaccard and of the subsumption matrix of the (distinct) CSR
    rows, from the same intersection blocks; bit-identical to the same rows of
    ``jaccard_subsumption_direct(..., expand=False)``."""
    return _row_range(indptr, indices, weights, lo, hi, True, True)


# ----------------------------------------------------------------------------------------
# DOT export: a view, moved to views.dot; importable from here only until cli.py and
# tests/test_lattice.py import it from there
