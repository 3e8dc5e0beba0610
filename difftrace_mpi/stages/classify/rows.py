"""CSR rows of integer weights (``SparseRows``) and their exact de-duplication
(functional core).

Attribute rows are the project's own CSR type, not scipy.sparse: importing scipy.sparse
costs every analysing process ~90 ms of start-up, and the analysis needs only a few
operations (``SparseRows``; the kernels in ``kernels/sparse.pyx``).

Equal attribute or NLR rows are merged into classes before anything is compared: on each
MPI rank before the rows travel, globally when they meet (analysis), and again before a
JSM (lattice).  ``row_labels`` gives, per row, the first row with the same entries; a
64-bit hash sorts candidates together and every merge is confirmed entry by entry, so a
collision can never merge two different rows.
"""
import numpy as np

from ...kernels import lattice as _lattice_kernel
from ...kernels.nlr import hash_events
from ...kernels import sparse as _sparse_kernel

_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_K1, _K2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F)
LONG_ROWS = 64      # mean entries per row above which per-row bytes keys beat the numpy hash


def _mix(x):
    """splitmix64's finaliser, elementwise on uint64 (wrapping)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def row_hash(indptr, indices, data):
    """A 64-bit hash per row of a CSR block (int64 arrays) from its entries (index,
    value) and their positions in the row: equal rows hash equal, unequal rows almost
    never (``row_labels`` checks)."""
    x = np.multiply(indices.view(np.uint64), _K1)     # per entry f(index, value), in place
    x ^= data.view(np.uint64)
    x *= _M1
    x ^= x >> np.uint64(29)
    x *= _M2
    sums = np.zeros(len(x) + 1, dtype=np.uint64)
    np.cumsum(x, out=sums[1:])
    plain = sums[indptr[1:]] - sums[indptr[:-1]]                     # sum of f over the row
    x *= np.arange(len(x), dtype=np.uint64)
    np.cumsum(x, out=sums[1:])
    # sum of f * position in the row = sum of f * position in the block - row start * sum of f
    placed = sums[indptr[1:]] - sums[indptr[:-1]] - indptr[:-1].view(np.uint64) * plain
    return _mix(_mix(plain ^ (np.diff(indptr).view(np.uint64) * _K2)) + placed)


def _digest(a):
    """A 64-bit hash of an array's bytes, read in place (no copy of a long row): the event
    hash kernel over the bytes as 32-bit words, a few GB/s."""
    raw = np.ascontiguousarray(a).view(np.uint8)
    words = raw[:len(raw) // 4 * 4].view(np.int32)
    return hash_events(words), raw[len(words) * 4:].tobytes()


def bytes_labels(rows):
    """Per row of a list of (indices, data) pairs, the first row with the same bytes:
    candidates by length, then by digest where several share a length, confirmed entry by
    entry (so long rows, such as the NLRs of real traces, are never copied into keys, and
    a row no other has the length of is not even hashed: 426 of 432 on real LULESH 216 x 1).
    A row given again as the very same arrays (equal traces share one NLR) is that row at
    once, neither hashed nor compared."""
    same_arrays, by_shape = {}, {}
    labels = np.arange(len(rows), dtype=np.int64)
    for i, (a, b) in enumerate(rows):
        seen = same_arrays.setdefault((id(a), id(b)), i)       # the rows are alive: their ids are theirs
        if seen != i:
            labels[i] = seen
        else:
            by_shape.setdefault((len(a), a.dtype.str, b.dtype.str), []).append(i)
    for group in by_shape.values():
        first = {}
        for i in group if len(group) > 1 else ():
            a, b = rows[i]
            candidates = first.setdefault((_digest(a), _digest(b)), [])
            labels[i] = next((j for j in candidates
                              if np.array_equal(rows[j][0], a) and np.array_equal(rows[j][1], b)), i)
            if labels[i] == i:
                candidates.append(i)
    labels = labels[labels]         # a row given again takes the label of the row it repeats
    return labels


def _same_as_previous(indptr, indices, data, order, check):
    """Bool per position p of ``order``: row order[p] equals row order[p - 1], entry by
    entry; only where ``check`` (False elsewhere)."""
    lengths = np.diff(indptr)[order]
    check = check & (np.r_[-1, lengths[:-1]] == lengths)
    ends = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(lengths, out=ends[1:])
    at = np.repeat(indptr[order] - ends[:-1], lengths)     # the rows in ``order``, one block
    at += np.arange(ends[-1], dtype=np.int64)
    ix, d = indices[at], data[at]
    np.subtract(np.arange(ends[-1], dtype=np.int64), np.repeat(np.where(check, lengths, 0), lengths), out=at)
    differ = ix != ix[at]                                  # each checked row against the one before
    differ |= d != d[at]
    count = np.zeros(len(differ) + 1, dtype=np.int64)
    np.cumsum(differ, out=count[1:])
    return check & (count[ends[1:]] == count[ends[:-1]])


def row_labels(indptr, indices, data, long_rows=LONG_ROWS):
    """Exact row dedupe of a CSR block (int64 arrays): per row, the first row (lowest
    index) with the same indices and data in the same order.

    Rows are sorted by ``row_hash`` and each is compared entry by entry with the one
    before it; a hash group whose rows are not all equal (a collision) is sorted out by
    bytes.  Long rows (a mean over ``long_rows`` entries) go by bytes directly."""
    n = len(indptr) - 1
    if n == 0:
        return np.empty(0, dtype=np.int64)
    if len(indices) > long_rows * n:
        return bytes_labels([(indices[a:b], data[a:b]) for a, b in zip(indptr[:-1].tolist(), indptr[1:].tolist())])
    hashes = row_hash(indptr, indices, data)
    order = np.argsort(hashes, kind="stable")            # equal hashes keep row order
    hashes = hashes[order]
    new = np.ones(n, dtype=bool)                          # a hash group starts here
    np.not_equal(hashes[1:], hashes[:-1], out=new[1:])
    same = _same_as_previous(indptr, indices, data, order, ~new)
    starts = np.flatnonzero(new)
    group = np.cumsum(new) - 1
    labels = np.empty(n, dtype=np.int64)
    labels[order] = order[starts][group]                 # a group's first row has the lowest index
    for g in np.unique(group[~new & ~same]).tolist():    # collisions
        rows = order[starts[g]:(starts[g + 1] if g + 1 < len(starts) else n)]
        labels[rows] = rows[bytes_labels([(indices[indptr[r]:indptr[r + 1]], data[indptr[r]:indptr[r + 1]])
                                           for r in rows.tolist()])]
    return labels


def pairs_csr(pairs):
    """(indptr, indices, data), int64, of a list of (indices, data) pairs."""
    indptr = np.zeros(len(pairs) + 1, dtype=np.int64)
    np.cumsum([len(a) for a, _ in pairs], out=indptr[1:])
    empty = [np.empty(0, np.int64)]
    return (indptr, np.concatenate([a for a, _ in pairs] + empty).astype(np.int64, copy=False),
            np.concatenate([b for _, b in pairs] + empty).astype(np.int64, copy=False))


def take_rows(indptr, indices, data, rows):
    """The CSR block (int64) of rows ``rows`` (in that order) of a CSR block: one copy
    of each row, no temporaries the size of the block."""
    return _sparse_kernel.take_rows(int64_array(indptr), int64_array(indices), int64_array(data),
                                    int64_array(rows).reshape(-1))


def int64_array(x):
    """``x`` as a contiguous int64 array (the kernels' type)."""
    return np.ascontiguousarray(x, dtype=np.int64)


class SparseRows:
    """Rows of integer weights as CSR: ``indptr``, ``indices`` (each row's ascending, each
    once), ``data``, all int64, and ``shape`` (rows, columns).  Never modified in place:
    what is made from one shares its arrays."""
    __slots__ = ("indptr", "indices", "data", "shape")

    def __init__(self, indptr, indices, data, n_cols):
        self.indptr, self.indices, self.data = int64_array(indptr), int64_array(indices), int64_array(data)
        self.shape = (len(self.indptr) - 1, int(n_cols))

    @classmethod
    def summed(cls, indptr, indices, data, n_cols):
        """The rows of a CSR whose rows may hold an index more than once, in any order (COO
        entries grouped by row): each index once per row, ascending, with the sum of its
        values."""
        summed = _sparse_kernel.sum_duplicates(int64_array(indptr), int64_array(indices), int64_array(data))
        return cls(*summed, n_cols)

    @property
    def nnz(self):
        return len(self.indices)

    def __getitem__(self, rows):
        """The rows ``rows`` (an integer array), in that order."""
        return SparseRows(*take_rows(self.indptr, self.indices, self.data, rows), self.shape[1])

    def getrow(self, i):
        """Row i, as a one-row SparseRows."""
        return self[[i]]

    def toarray(self):
        """The dense int64 matrix (small matrices: tests)."""
        out = np.zeros(self.shape, dtype=np.int64)
        out[np.repeat(np.arange(self.shape[0]), np.diff(self.indptr)), self.indices] = self.data
        return out

    def __repr__(self):
        return f"SparseRows(shape={self.shape}, nnz={self.nnz})"


def csr_args(indptr, indices, weights):
    """A CSR of intents as int64 (indptr, indices, weights), from arrays or a CSR matrix
    alone (a ``SparseRows``, or anything with indptr, indices and data: a scipy CSR
    matrix too; weights None: all 1); rows with an attribute twice are refused."""
    if indices is None and hasattr(indptr, "indptr"):      # a CSR matrix
        m = indptr
        indptr, indices, weights = m.indptr, m.indices, m.data
    indptr, indices = int64_array(indptr), int64_array(indices)
    weights = np.ones(len(indices), dtype=np.int64) if weights is None else int64_array(weights)
    if _lattice_kernel.check_csr_rows(indptr, indices, weights):
        rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
        order = np.lexsort((indices, rows))
        indices, weights = indices[order], weights[order]
        dup = (np.diff(indices) == 0) & (np.diff(rows) == 0)
        if dup.any():
            k = int(np.flatnonzero(dup)[0])
            raise ValueError(f"row {rows[k]}: attribute {indices[k]} appears twice")
    return indptr, indices, weights
