# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
# distutils: language = c++
"""Sparse integer rows (CSR: indptr, indices, data, all int64): the few operations on them
the analysis needs, each a pass in C where numpy would sort, loop in Python or build
temporaries the size of the matrix (they replaced scipy.sparse, ~90 ms of start-up).

The Python faces are ``difftrace_mpi/stages/classify/rows.py`` (``SparseRows``, ``take_rows``),
``stages/classify/attributes.py`` (``group_rows``) and the layered intersection sums of
``stages/classify/jsm.py``.  Kernels return arrays, or a status code (``BLOCK_*``) that the face
turns into its error; they raise only on malformed input (an index outside the matrix),
as the lattice kernel does.
"""
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy
from libcpp.vector cimport vector
from libcpp.pair cimport pair
from libcpp.algorithm cimport sort as cpp_sort

import numpy as np

BLOCK_OK = 0
BLOCK_OUTSIDE = 1       # the row block or the column start lies outside the matrix
BLOCK_SHAPE = 2         # ``out`` is not (hi - lo) x (rows - col_lo)


cdef inline Py_ssize_t _slot(const int64_t* keys, int64_t key, uint64_t mask) noexcept nogil:
    """The slot holding ``key``, or the empty one (-1) where it goes (linear probing)."""
    cdef uint64_t s = (<uint64_t>key * <uint64_t>0x9E3779B97F4A7C15ULL >> 17) & mask
    while keys[s] != -1 and keys[s] != key:
        s = (s + 1) & mask
    return <Py_ssize_t>s


def sum_duplicates(const int64_t[::1] indptr, const int64_t[::1] indices, const int64_t[::1] data):
    """The CSR (indptr, indices, data) of the same rows with each row's indices ascending
    and an index given more than once in a row given once, with the sum of its values
    (COO entries grouped by row).  Indices must not be negative (ValueError).  Each row
    is summed in a hash table, then only its distinct indices are sorted: a trace's every
    call is read once, never sorted."""
    cdef Py_ssize_t n = indptr.shape[0] - 1, r, k, s, m = 0
    cdef uint64_t cap = 64, mask = 63
    cdef int64_t key
    for k in range(indices.shape[0]):
        if indices[k] < 0:
            raise ValueError(f"negative column index {indices[k]}")
    cdef vector[int64_t] keys = vector[int64_t](cap, -1)
    cdef vector[int64_t] sums = vector[int64_t](cap, 0)
    cdef vector[Py_ssize_t] touched                 # the slots this row filled
    cdef vector[pair[int64_t, int64_t]] row         # this row's (index, sum), then sorted
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    cdef vector[int64_t] out_ind, out_val
    cdef int64_t[::1] op = out_ptr
    with nogil:
        for r in range(n):
            for k in range(indptr[r], indptr[r + 1]):
                if 2 * (touched.size() + 1) > cap:      # keep the load under one half: a 4x table
                    row.clear()
                    for s in touched:
                        row.push_back(pair[int64_t, int64_t](keys[s], sums[s]))
                    cap *= 4
                    mask = cap - 1
                    keys.assign(cap, -1)
                    sums.assign(cap, 0)
                    touched.clear()
                    for s in range(<Py_ssize_t>row.size()):
                        touched.push_back(_slot(keys.data(), row[s].first, mask))
                        keys[touched.back()] = row[s].first
                        sums[touched.back()] = row[s].second
                key = indices[k]
                s = _slot(keys.data(), key, mask)
                if keys[s] == -1:
                    keys[s] = key
                    touched.push_back(s)
                sums[s] += data[k]
            row.clear()                                 # this row in index order; the table left empty
            for s in touched:
                row.push_back(pair[int64_t, int64_t](keys[s], sums[s]))
                keys[s], sums[s] = -1, 0
            touched.clear()
            cpp_sort(row.begin(), row.end())
            for s in range(<Py_ssize_t>row.size()):
                out_ind.push_back(row[s].first)
                out_val.push_back(row[s].second)
            m += <Py_ssize_t>row.size()
            op[r + 1] = m
    out_indices = np.empty(m, dtype=np.int64)
    out_data = np.empty(m, dtype=np.int64)
    cdef int64_t[::1] oi = out_indices, ov = out_data
    for k in range(m):
        oi[k] = out_ind[k]
        ov[k] = out_val[k]
    return out_ptr, out_indices, out_data


cdef Py_ssize_t _merge_sum(const int64_t* ia, const int64_t* va, Py_ssize_t na,
                           const int64_t* ib, const int64_t* vb, Py_ssize_t nb,
                           int64_t* io, int64_t* vo) noexcept nogil:
    """Merges two ascending rows into (io, vo), summing the values of an index in both;
    returns the merged length."""
    cdef Py_ssize_t i = 0, j = 0, m = 0
    while i < na and j < nb:
        if ia[i] < ib[j]:
            io[m], vo[m] = ia[i], va[i]
            i += 1
        elif ib[j] < ia[i]:
            io[m], vo[m] = ib[j], vb[j]
            j += 1
        else:
            io[m], vo[m] = ia[i], va[i] + vb[j]
            i += 1
            j += 1
        m += 1
    while i < na:
        io[m], vo[m] = ia[i], va[i]
        i += 1
        m += 1
    while j < nb:
        io[m], vo[m] = ib[j], vb[j]
        j += 1
        m += 1
    return m


def sum_rows_by_group(const int64_t[::1] indptr, const int64_t[::1] indices, const int64_t[::1] data,
                      const int64_t[::1] members, const int64_t[::1] member_ptr):
    """The CSR (indptr, indices, data) whose row g is the sum of rows
    members[member_ptr[g]:member_ptr[g + 1]] of a CSR with ascending rows (each index once):
    the rows merged pairwise, log2(k) linear passes for k rows, no sort.  IndexError for
    a member outside 0..n-1."""
    cdef Py_ssize_t n = indptr.shape[0] - 1, n_groups = member_ptr.shape[0] - 1, g, i, r, k, runs
    cdef Py_ssize_t total = 0, m = 0, a, b
    for i in range(members.shape[0]):
        r = members[i]
        if r < 0 or r >= n:
            raise IndexError(f"row {r} outside 0..{n - 1}")
        total += indptr[r + 1] - indptr[r]      # at most this many entries out (a row may be named twice)
    cdef vector[int64_t] cur_ind, cur_val, nxt_ind, nxt_val
    cdef vector[Py_ssize_t] cur_run, nxt_run      # run starts, then the end
    out_ptr = np.zeros(n_groups + 1, dtype=np.int64)
    out_ind = np.empty(total, dtype=np.int64)
    out_val = np.empty(total, dtype=np.int64)
    cdef int64_t[::1] op = out_ptr, oi = out_ind, ov = out_val
    with nogil:
        for g in range(n_groups):
            # the members end to end, one run each
            cur_ind.clear()
            cur_val.clear()
            cur_run.clear()
            for i in range(member_ptr[g], member_ptr[g + 1]):
                r = members[i]
                cur_run.push_back(<Py_ssize_t>cur_ind.size())
                for k in range(indptr[r], indptr[r + 1]):
                    cur_ind.push_back(indices[k])
                    cur_val.push_back(data[k])
            cur_run.push_back(<Py_ssize_t>cur_ind.size())
            runs = <Py_ssize_t>cur_run.size() - 1
            while runs > 1:                         # pairs of runs merged into one
                nxt_ind.resize(cur_ind.size())
                nxt_val.resize(cur_val.size())
                nxt_run.clear()
                total = 0
                for i in range(0, runs, 2):
                    nxt_run.push_back(total)
                    a = cur_run[i]
                    if i + 1 < runs:
                        b = cur_run[i + 1]
                        total += _merge_sum(cur_ind.data() + a, cur_val.data() + a, b - a,
                                            cur_ind.data() + b, cur_val.data() + b, cur_run[i + 2] - b,
                                            nxt_ind.data() + total, nxt_val.data() + total)
                    else:
                        for k in range(a, cur_run[i + 1]):
                            nxt_ind[total] = cur_ind[k]
                            nxt_val[total] = cur_val[k]
                            total += 1
                nxt_run.push_back(total)
                nxt_ind.resize(total)
                nxt_val.resize(total)
                cur_ind.swap(nxt_ind)
                cur_val.swap(nxt_val)
                cur_run.swap(nxt_run)
                runs = <Py_ssize_t>cur_run.size() - 1
            for k in range(<Py_ssize_t>cur_ind.size()):
                oi[m] = cur_ind[k]
                ov[m] = cur_val[k]
                m += 1
            op[g + 1] = m
    return out_ptr, out_ind[:m].copy(), out_val[:m].copy()


def take_rows(const int64_t[::1] indptr, const int64_t[::1] indices, const int64_t[::1] data,
              const int64_t[::1] rows):
    """The CSR (indptr, indices, data) of rows ``rows`` of a CSR, in that order (a row may
    come more than once); IndexError for a row outside 0..n-1."""
    cdef Py_ssize_t n = indptr.shape[0] - 1, i, r, a, length
    out_ptr = np.zeros(rows.shape[0] + 1, dtype=np.int64)
    cdef int64_t[::1] op = out_ptr
    for i in range(rows.shape[0]):
        r = rows[i]
        if r < 0 or r >= n:
            raise IndexError(f"row {r} outside 0..{n - 1}")
        op[i + 1] = op[i] + indptr[r + 1] - indptr[r]
    out_indices = np.empty(op[rows.shape[0]], dtype=np.int64)
    out_data = np.empty(op[rows.shape[0]], dtype=np.int64)
    cdef int64_t[::1] oi = out_indices, od = out_data
    with nogil:
        for i in range(rows.shape[0]):
            a = indptr[rows[i]]
            length = op[i + 1] - op[i]
            if length:
                memcpy(&oi[op[i]], &indices[a], length * sizeof(int64_t))
                memcpy(&od[op[i]], &data[a], length * sizeof(int64_t))
    return out_ptr, out_indices, out_data


def column_rows(const int64_t[::1] indptr, const int64_t[::1] cols, Py_ssize_t n_cols):
    """The transpose of a 0/1 CSR whose column ids are 0..n_cols-1: (col_ptr, col_rows),
    the rows holding each column, ascending (a counting sort, no comparison sort)."""
    cdef Py_ssize_t n = indptr.shape[0] - 1, r, k, c
    col_ptr = np.zeros(n_cols + 1, dtype=np.int64)
    col_rows = np.empty(cols.shape[0], dtype=np.int64)
    cdef int64_t[::1] cp = col_ptr, cr = col_rows
    fill = np.empty(n_cols, dtype=np.int64)
    cdef int64_t[::1] at = fill
    for k in range(cols.shape[0]):
        c = cols[k]
        if c < 0 or c >= n_cols:
            raise IndexError(f"column id {c} outside 0..{n_cols - 1}")
        cp[c + 1] += 1
    with nogil:
        for c in range(n_cols):
            cp[c + 1] += cp[c]
            at[c] = cp[c]
        for r in range(n):
            for k in range(indptr[r], indptr[r + 1]):
                c = cols[k]
                cr[at[c]] = r
                at[c] += 1
    return col_ptr, col_rows


def binary_product_rows(const int64_t[::1] indptr, const int64_t[::1] cols,
                        const int64_t[::1] col_ptr, const int64_t[::1] col_rows,
                        Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t col_lo, int64_t[:, ::1] out):
    """Adds rows lo..hi-1, columns col_lo.. of A A^T to ``out`` ((hi - lo) x (n - col_lo)),
    A the 0/1 matrix of the CSR (indptr, cols) and (col_ptr, col_rows) its transpose
    (``column_rows``): out[i - lo, j - col_lo] += the number of columns rows i and j
    share.  Each row scatters into its dense output row directly (no sparse product to
    assemble and densify).  Returns BLOCK_OK, or BLOCK_OUTSIDE (the block, or a column id
    of its rows, outside the matrix) / BLOCK_SHAPE with ``out`` untouched."""
    cdef Py_ssize_t n = indptr.shape[0] - 1, n_cols = col_ptr.shape[0] - 1, i, k, c, p, a, b, mid
    if lo < 0 or hi > n or lo > hi or col_lo < 0 or col_lo > n:
        return BLOCK_OUTSIDE
    if out.shape[0] != hi - lo or out.shape[1] != n - col_lo:
        return BLOCK_SHAPE
    if hi == lo or col_lo == n:
        return BLOCK_OK
    for k in range(indptr[lo], indptr[hi]):
        if cols[k] < 0 or cols[k] >= n_cols:
            return BLOCK_OUTSIDE
    # per column, the first of its rows at or after col_lo (each column's rows ascend)
    first_arr = np.empty(n_cols, dtype=np.int64)
    cdef int64_t[::1] first = first_arr
    cdef int64_t* o
    cdef const int64_t* rows = &col_rows[0] if col_rows.shape[0] else NULL
    with nogil:
        for c in range(n_cols):
            a, b = col_ptr[c], col_ptr[c + 1]
            while a < b:
                mid = (a + b) // 2
                if rows[mid] < col_lo:
                    a = mid + 1
                else:
                    b = mid
            first[c] = a
        for i in range(lo, hi):
            o = &out[i - lo, 0]
            for k in range(indptr[i], indptr[i + 1]):
                c = cols[k]
                for p in range(first[c], col_ptr[c + 1]):
                    o[rows[p] - col_lo] += 1
    return BLOCK_OK
