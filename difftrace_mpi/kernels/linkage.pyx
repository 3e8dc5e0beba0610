# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Hierarchical clustering of equivalence classes with multiplicities.

Traces of SPMD programs fall into few classes of identical attribute sets.  Clustering
the N traces is the same as first merging every class at height 0 and then clustering the
classes, each starting as a cluster of its multiplicity.  This kernel does the second part
directly: nearest-neighbour-chain agglomeration (valid for the reducible methods single,
complete, average, weighted and ward) with Lance-Williams updates that use the initial
cluster sizes, in O(C^2) time and memory for C classes.

Ward uses SciPy's recurrence on distances:
d(ij,k) = sqrt(((n_i+n_k) d_ik^2 + (n_j+n_k) d_jk^2 - n_k d_ij^2) / (n_i+n_j+n_k)).
"""
from libc.math cimport sqrt, INFINITY

import numpy as np

METHODS = {"single": 0, "complete": 1, "average": 2, "weighted": 3, "ward": 4}


cdef inline double _update(int method, double d_ik, double d_jk, double d_ij,
                           double n_i, double n_j, double n_k) nogil:
    if method == 0:
        return d_ik if d_ik < d_jk else d_jk
    if method == 1:
        return d_ik if d_ik > d_jk else d_jk
    if method == 2:
        return (n_i * d_ik + n_j * d_jk) / (n_i + n_j)
    if method == 3:
        return 0.5 * (d_ik + d_jk)
    cdef double t = ((n_i + n_k) * d_ik * d_ik + (n_j + n_k) * d_jk * d_jk - n_k * d_ij * d_ij) / (n_i + n_j + n_k)
    return sqrt(t) if t > 0 else 0.0


def nn_chain(double[:, ::1] dist, double[::1] sizes, str method):
    """Merges of C clusters with initial ``sizes``: array (C-1, 3) of (i, j, height), where
    i, j index the slot of the surviving clusters (slot of a merge = its smaller index).
    ``dist`` (C x C, symmetric) is overwritten."""
    cdef int m = METHODS[method]
    cdef Py_ssize_t C = dist.shape[0]
    merges = np.empty((max(C - 1, 0), 3), dtype=np.float64)
    cdef double[:, ::1] out = merges
    active_arr = np.ones(C, dtype=np.uint8)
    cdef unsigned char[::1] active = active_arr
    chain_arr = np.empty(C, dtype=np.intp)
    cdef Py_ssize_t[::1] chain = chain_arr
    size_arr = np.array(sizes, dtype=np.float64)
    cdef double[::1] n = size_arr
    cdef Py_ssize_t length = 0, step, a, b, k, c, best_k
    cdef double best, d, d_ab
    for step in range(C - 1):
        if length == 0:
            for k in range(C):
                if active[k]:
                    chain[0] = k
                    length = 1
                    break
        while True:
            a = chain[length - 1]
            # nearest active neighbour of a; prefer the previous chain element on ties
            best = INFINITY
            best_k = -1
            if length > 1:
                best_k = chain[length - 2]
                best = dist[a, best_k]
            for k in range(C):
                if active[k] and k != a and dist[a, k] < best:
                    best = dist[a, k]
                    best_k = k
            if length > 1 and best_k == chain[length - 2]:
                break
            chain[length] = best_k
            length += 1
        b = chain[length - 2]
        length -= 2
        if a > b:
            a, b = b, a
        d_ab = dist[a, b]
        out[step, 0] = a
        out[step, 1] = b
        out[step, 2] = d_ab
        for k in range(C):
            if active[k] and k != a and k != b:
                d = _update(m, dist[a, k], dist[b, k], d_ab, n[a], n[b], n[k])
                dist[a, k] = d
                dist[k, a] = d
        n[a] = n[a] + n[b]
        active[b] = 0
    return merges
