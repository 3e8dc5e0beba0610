"""The project's CSR rows (stages.classify.rows.SparseRows) and the sparse kernels
(kernels/sparse.pyx) against scipy.sparse on generated inputs: the analysis no longer
imports scipy.sparse, and every attribute matrix and intersection sum must stay the
integers scipy gave."""
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

from difftrace_mpi.kernels import sparse as kernel
from difftrace_mpi.stages.classify import attributes as attrs
from difftrace_mpi.stages.classify import jsm
from difftrace_mpi.stages.model.nlr import NLR
from difftrace_mpi.stages.classify.rows import SparseRows

SETTINGS = settings(max_examples=150, deadline=None)


@st.composite
def coo_rows(draw, max_rows=12, max_cols=20, max_len=15, max_value=5):
    """(indptr, indices, data, n_cols): rows of COO entries, indices in any order and
    repeated, positive values; empty rows and empty matrices included."""
    n_rows = draw(st.integers(0, max_rows))
    n_cols = draw(st.integers(1, max_cols))
    rows = [draw(st.lists(st.tuples(st.integers(0, n_cols - 1), st.integers(1, max_value)), max_size=max_len))
            for _ in range(n_rows)]
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=indptr[1:])
    entries = [e for r in rows for e in r]
    indices = np.array([i for i, _ in entries], dtype=np.int64)
    data = np.array([v for _, v in entries], dtype=np.int64)
    return indptr, indices, data, n_cols


def scipy_summed(indptr, indices, data, n_cols):
    """The reference: COO -> CSR, duplicates summed, indices sorted (as attributes did)."""
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    out = sp.coo_matrix((data, (rows, indices)), shape=(len(indptr) - 1, n_cols)).tocsr()
    out.sum_duplicates()
    out.sort_indices()
    return out


def same(ours, ref):
    """Equal CSR arrays, shape and dtype (int64), entry for entry."""
    assert isinstance(ours, SparseRows)
    assert ours.shape == ref.shape and ours.nnz == ref.nnz
    for a, b in ((ours.indptr, ref.indptr), (ours.indices, ref.indices), (ours.data, ref.data)):
        assert a.dtype == np.int64
        assert a.tolist() == b.tolist()


@SETTINGS
@given(coo_rows())
def test_summed_rows_equal_scipy_coo_to_csr(case):
    ours = SparseRows.summed(*case)
    same(ours, scipy_summed(*case))
    assert np.array_equal(ours.toarray(), scipy_summed(*case).toarray())


@settings(max_examples=40, deadline=None)
@given(coo_rows(max_rows=5, max_cols=2000, max_len=600, max_value=10**12))
def test_summed_long_rows_equal_scipy(case):
    """Rows with more distinct indices than the kernel's first hash table holds (it grows
    mid-row, and later rows reuse the grown one); large values sum exactly."""
    same(SparseRows.summed(*case), scipy_summed(*case))


def test_summed_rows_edges():
    empty = SparseRows.summed(np.zeros(1, np.int64), np.empty(0, np.int64), np.empty(0, np.int64), 1)
    assert empty.shape == (0, 1) and empty.nnz == 0 and empty.toarray().shape == (0, 1)
    rows = SparseRows.summed([0, 0, 5, 5], [4, 1, 4, 4, 1], [1, 2, 3, 4, 5], 6)   # empty rows around one
    assert rows.indptr.tolist() == [0, 0, 2, 2] and rows.indices.tolist() == [1, 4] and rows.data.tolist() == [7, 8]
    rng = np.random.default_rng(1)                      # one long row, many repeats, then a short one
    indices = np.concatenate([rng.integers(0, 5000, 200000), [7, 7]])
    case = (np.array([0, 200000, 200002]), indices, rng.integers(1, 4, len(indices)), 5000)
    same(SparseRows.summed(*case), scipy_summed(*case))
    with pytest.raises(ValueError):
        SparseRows.summed([0, 2], [3, -1], [1, 1], 4)


@SETTINGS
@given(coo_rows(), st.data())
def test_row_selection_equals_scipy(case, data):
    ours, ref = SparseRows.summed(*case), scipy_summed(*case)
    picked = np.array(data.draw(st.lists(st.integers(0, max(ours.shape[0] - 1, 0)),
                                         max_size=3 * ours.shape[0])), dtype=np.int64)
    same(ours[picked], ref[picked])
    for i in range(ours.shape[0]):
        same(ours.getrow(i), ref.getrow(i))
    for outside in (-1, ours.shape[0]):
        with pytest.raises(IndexError):
            ours[np.array([outside])]


@SETTINGS
@given(coo_rows(), st.data())
def test_group_rows_equal_the_indicator_product(case, data):
    counts, ref = SparseRows.summed(*case), scipy_summed(*case)
    n = counts.shape[0]
    n_groups = data.draw(st.integers(1, 6))
    groups = np.array(data.draw(st.lists(st.integers(0, n_groups - 1), min_size=n, max_size=n)), dtype=np.int64)
    indicator = sp.csr_matrix((np.ones(n, dtype=np.int64), (groups, np.arange(n))), shape=(n_groups, n))
    expect = (indicator @ ref).tocsr()
    expect.sort_indices()
    same(attrs.group_rows(counts, groups, n_groups), expect)


def test_group_rows_many_rows_per_group():
    """Groups of 0 to 37 rows (odd and even numbers of runs at every merge level), rows
    sharing most of their codes or none."""
    rng = np.random.default_rng(2)
    for shared in (0, 40):
        rows = [np.union1d(np.arange(shared), rng.choice(np.arange(shared, 3000), int(rng.integers(0, 60)),
                                                         replace=False)) for _ in range(300)]
        indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
        indices = np.concatenate(rows).astype(np.int64)
        data = rng.integers(1, 10**9, len(indices)).astype(np.int64)
        counts, ref = SparseRows(indptr, indices, data, 3000), sp.csr_matrix((data, indices, indptr), shape=(300, 3000))
        groups = np.minimum(rng.integers(0, 14, 300), rng.integers(0, 14, 300))    # uneven sizes; group 14 empty
        indicator = sp.csr_matrix((np.ones(300, dtype=np.int64), (groups, np.arange(300))), shape=(15, 300))
        expect = (indicator @ ref).tocsr()
        expect.sort_indices()
        same(attrs.group_rows(counts, groups, 15), expect)


def test_sum_rows_by_group_kernel_edges():
    indptr, indices, data = np.array([0, 2, 3]), np.array([1, 4, 4]), np.array([5, 6, 7])
    members, member_ptr = np.array([0, 0, 1, 1]), np.array([0, 3, 3, 4])      # a row twice; an empty group
    out = kernel.sum_rows_by_group(indptr, indices, data, members, member_ptr)
    assert [a.tolist() for a in out] == [[0, 2, 2, 3], [1, 4, 4], [10, 19, 7]]
    with pytest.raises(IndexError):
        kernel.sum_rows_by_group(indptr, indices, data, np.array([2]), np.array([0, 1]))


def test_group_rows_refuses_groups_outside():
    counts = SparseRows([0, 1, 2], [0, 1], [1, 1], 2)
    with pytest.raises(ValueError):
        attrs.group_rows(counts, [0, 2], 2)
    with pytest.raises(ValueError):
        attrs.group_rows(counts, [0], 2)


@SETTINGS
@given(coo_rows(max_value=3000), st.sampled_from(attrs.FREQS))
def test_weight_matrix_equals_scipy(case, freq):
    indptr, indices, data, n_cols = case
    data = data - 1                          # some zero counts, dropped by both
    ours = attrs.weight_matrix(SparseRows.summed(indptr, indices, data, n_cols), freq)
    expect = scipy_summed(indptr, indices, data, n_cols)
    expect.eliminate_zeros()
    expect.data = attrs.freq_weights(expect.data, freq)
    same(ours, expect)


@SETTINGS
@given(st.lists(st.lists(st.integers(0, 6), max_size=40), max_size=6), st.lists(st.booleans(), min_size=7, max_size=7))
def test_call_count_matrix_equals_scipy(streams, keep):
    """Call pairs of event streams (0 = a return) counted as scipy's COO -> CSR did."""
    from difftrace_mpi.kernels.nlr import call_pairs
    keep = np.array(keep, dtype=np.uint8)
    events = [np.array(s, dtype=np.int32) for s in streams]
    ours = attrs.call_count_matrix(events, keep, 7)
    codes, rows = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for r, ev in enumerate(events):
        if (ev == 0).any():
            parents, children = call_pairs(ev, keep)
        else:
            children = ev[keep[ev].astype(bool)]
            parents = np.zeros_like(children)
        codes.append(parents.astype(np.int64) * 7 + children)
        rows.append(np.full(len(children), r, dtype=np.int64))
    codes, rows = np.concatenate(codes), np.concatenate(rows)
    expect = sp.coo_matrix((np.ones(len(codes), dtype=np.int64), (rows, codes)), shape=(len(events), 49)).tocsr()
    expect.sum_duplicates()
    expect.sort_indices()
    same(ours, expect)


def test_count_matrix_shape_and_rows():
    nlrs = [NLR(np.array([1, -1, 2, -1]), np.array([1, 7, 1, 3])), NLR(np.array([], np.int64), np.array([], np.int64))]
    m = attrs.count_matrix(nlrs, "sing", 3, 4)
    assert m.shape == (2, 4) and m.toarray().tolist() == [[0, 1, 1, 10], [0, 0, 0, 0]]
    assert attrs.count_matrix(nlrs, "doub", 3, 4).shape == (2, 16)
    assert attrs.count_matrix([], "sing", 0, 0).shape == (0, 1)


# ----------------------------------------------------------------------------------------
# the 0/1 product kernel and the layered intersection sums

@st.composite
def binary_rows(draw, max_rows=14, max_cols=25):
    """(indptr, cols, n_cols) of a 0/1 matrix, each row's columns ascending and distinct."""
    n_rows = draw(st.integers(0, max_rows))
    n_cols = draw(st.integers(1, max_cols))
    rows = [sorted(draw(st.sets(st.integers(0, n_cols - 1), max_size=n_cols))) for _ in range(n_rows)]
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=indptr[1:])
    return indptr, np.array([c for r in rows for c in r], dtype=np.int64), n_cols


@SETTINGS
@given(binary_rows(), st.data())
def test_binary_product_rows_equal_scipy(case, data):
    indptr, cols, n_cols = case
    n = len(indptr) - 1
    a = sp.csr_matrix((np.ones(len(cols), dtype=np.int64), cols, indptr), shape=(n, n_cols))
    col_ptr, col_rows = kernel.column_rows(indptr, cols, n_cols)
    at = a.T.tocsr()
    assert col_ptr.tolist() == at.indptr.tolist() and col_rows.tolist() == at.indices.tolist()
    lo = data.draw(st.integers(0, n))
    hi = data.draw(st.integers(lo, n))
    col_lo = data.draw(st.integers(0, n))
    expect = (a[lo:hi] @ a.T).toarray()[:, col_lo:]
    out = np.full((hi - lo, n - col_lo), 3, dtype=np.int64)          # the kernel adds to what is there
    assert kernel.binary_product_rows(indptr, cols, col_ptr, col_rows, lo, hi, col_lo, out) == kernel.BLOCK_OK
    assert np.array_equal(out, expect + 3)


def test_binary_product_rows_status_codes():
    indptr, cols = np.array([0, 2, 3], dtype=np.int64), np.array([0, 1, 1], dtype=np.int64)
    col_ptr, col_rows = kernel.column_rows(indptr, cols, 2)
    out = np.zeros((2, 2), dtype=np.int64)
    assert kernel.binary_product_rows(indptr, cols, col_ptr, col_rows, 0, 2, 0, out) == kernel.BLOCK_OK
    assert out.tolist() == [[2, 1], [1, 1]]
    for lo, hi, col_lo in ((1, 3, 0), (2, 1, 0), (-1, 1, 0), (0, 2, 3)):
        assert kernel.binary_product_rows(indptr, cols, col_ptr, col_rows, lo, hi, col_lo, out) == kernel.BLOCK_OUTSIDE
    assert kernel.binary_product_rows(indptr, cols, col_ptr, col_rows, 0, 2, 1, out) == kernel.BLOCK_SHAPE
    bad = np.array([0, 5, 1], dtype=np.int64)                                  # a column id past the transpose
    assert kernel.binary_product_rows(indptr, bad, col_ptr, col_rows, 0, 2, 0, out) == kernel.BLOCK_OUTSIDE
    assert out.tolist() == [[2, 1], [1, 1]]                                    # refused calls leave it alone
    with pytest.raises(IndexError):
        kernel.column_rows(indptr, bad, 2)


@st.composite
def weighted_rows(draw, max_weight):
    """(indptr, indices, weights) of a CSR of intents: sorted distinct attributes, positive weights."""
    indptr, cols, _ = draw(binary_rows(max_rows=16, max_cols=30))
    weights = np.array(draw(st.lists(st.integers(1, max_weight), min_size=len(cols), max_size=len(cols))),
                       dtype=np.int64)
    return indptr, cols, weights


def scipy_min_sums(indptr, indices, weights):
    """sum over t of [w >= t] [w >= t]^T through scipy's sparse product (what jsm did)."""
    n = len(indptr) - 1
    cols = int(indices.max()) + 1 if len(indices) else 1
    out = np.zeros((n, n), dtype=np.int64)
    for t in range(1, int(weights.max()) + 1 if len(weights) else 1):
        layer = sp.csr_matrix(((weights >= t).astype(np.int64), indices, indptr), shape=(n, cols))
        layer.eliminate_zeros()
        out += (layer @ layer.T.tocsr()).toarray()
    return out


@SETTINGS
@given(weighted_rows(max_weight=6), st.sampled_from([0.0, 0.3, 2.0]), st.data())
def test_layered_sums_equal_scipy(case, dense_density, data):
    """Every layer dense (BLAS), some, or none: the same integers as scipy's products, for
    any row block and column start, and float32 only where every layer went through BLAS."""
    indptr, indices, weights = case
    n = len(indptr) - 1
    expect = scipy_min_sums(indptr, indices, weights)
    old = jsm.DENSE_MIN_DENSITY
    jsm.DENSE_MIN_DENSITY = dense_density
    try:
        layers = jsm._Layers(indptr, indices, weights)
        lo = data.draw(st.integers(0, n))
        hi = data.draw(st.integers(lo, n))
        col_lo = data.draw(st.integers(0, n))
        block = layers.block(lo, hi, col_lo)
        assert block.shape == (hi - lo, n - col_lo)
        assert block.dtype == (np.float32 if layers.dense and not layers.sparse else np.int64)
        assert np.array_equal(block.astype(np.int64), expect[lo:hi, col_lo:])
        assert np.array_equal(jsm.min_sums(indptr, indices, weights), expect)
    finally:
        jsm.DENSE_MIN_DENSITY = old


def test_layers_split_between_dense_and_sparse(monkeypatch):
    """A shared core of attributes (dense layer) and rare ones (sparse layers) in one matrix."""
    rng = np.random.default_rng(4)
    rows = [np.union1d(np.arange(10), rng.choice(np.arange(10, 5000), 30, replace=False)) for _ in range(40)]
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    indices = np.concatenate(rows).astype(np.int64)
    weights = np.where(indices < 10, 3, 1).astype(np.int64)
    monkeypatch.setattr(jsm, "DENSE_MIN_DENSITY", 0.5)
    layers = jsm._Layers(indptr, indices, weights)
    assert len(layers.dense) == 2 and len(layers.sparse) == 1
    assert np.array_equal(layers.block(0, 40), scipy_min_sums(indptr, indices, weights))
    assert np.array_equal(layers.block(5, 17, 5), scipy_min_sums(indptr, indices, weights)[5:17, 5:])
