# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Hierarchical clustering of equivalence classes with multiplicities, and its flat cut.

Traces of SPMD programs fall into few classes of identical attribute sets.  Clustering
the N traces is the same as first merging every class at height 0 and then clustering the
classes, each starting as a cluster of its multiplicity.  This kernel does the second part
directly, in O(C^2) time and memory for C classes:

* single linkage: Prim's minimum spanning tree grown from class 0, one merge row per
  class it reaches (sizes do not matter);
* complete, average, weighted, ward: nearest-neighbour-chain agglomeration (valid for these
  reducible methods) with Lance-Williams updates that use the cluster sizes.

With every size 1 the tree is the one ``scipy.cluster.hierarchy.linkage`` builds, bit for
bit (tests/test_cluster_linkage.py).  Its conventions are followed on purpose: SPMD traces
give many exactly equal distances, and on ties the conventions decide the tree.  A chain
keeps its previous element unless another cluster is strictly nearer, else takes the
lowest slot; of two merged clusters the higher slot lives on; the updates evaluate in
the same order of operations; the merges are sorted by height (stable) and numbered
with a union-find, a new cluster taking the next number, its two parts in ascending order.

Ward's update on distances: d(xy,i) = sqrt(((n_i+n_x) d_xi^2 + (n_i+n_y) d_yi^2 - n_i d_xy^2) / (n_x+n_y+n_i)).

``maxclust`` cuts such a tree into at most k flat clusters with the labels that SciPy's
``fcluster(Z, k, criterion="maxclust")`` gives.
"""
from libc.math cimport sqrt, isfinite, INFINITY

import numpy as np

cdef enum:
    SINGLE, COMPLETE, AVERAGE, WEIGHTED, WARD

METHODS = {"single": SINGLE, "complete": COMPLETE, "average": AVERAGE, "weighted": WEIGHTED, "ward": WARD}

# status codes of linkage_tree
OK = 0
NOT_FINITE = 1          # a distance is NaN or infinite: no tree


cdef inline double _merged_distance(int method, double d_xi, double d_yi, double d_xy,
                                    double n_x, double n_y, double n_i) noexcept nogil:
    """Distance from cluster i to the union of clusters x and y (Lance-Williams), in
    SciPy's order of operations: equal inputs give equal bits."""
    cdef double t
    if method == COMPLETE:
        return d_xi if d_xi > d_yi else d_yi
    if method == AVERAGE:
        return (n_x * d_xi + n_y * d_yi) / (n_x + n_y)
    if method == WEIGHTED:
        return 0.5 * (d_xi + d_yi)
    # ward: the radicand is never negative, as x and y are mutual nearest neighbours
    # (d_xy <= d_xi, d_yi) and rounding is monotonic
    t = 1.0 / (n_x + n_y + n_i)
    return sqrt((n_i + n_x) * t * d_xi * d_xi + (n_i + n_y) * t * d_yi * d_yi - n_i * t * d_xy * d_xy)


cdef void _spanning_tree_merges(const double[:, ::1] dist, double[::1] reach, unsigned char[::1] in_tree,
                                double[:, ::1] merges) noexcept nogil:
    """Prim's algorithm: row s = (class added before, class added now, its distance to the
    tree).  Scratch (C each): ``reach``, each class's distance to the tree; ``in_tree``, zeros."""
    cdef Py_ssize_t C = dist.shape[0], step, i, last = 0, nearest = 0
    cdef double best
    for i in range(C):
        reach[i] = INFINITY
    for step in range(C - 1):
        in_tree[last] = 1
        best = INFINITY
        for i in range(C):
            if in_tree[i]:
                continue
            if dist[last, i] < reach[i]:
                reach[i] = dist[last, i]
            if reach[i] < best:
                best = reach[i]
                nearest = i
        merges[step, 0] = last
        merges[step, 1] = nearest
        merges[step, 2] = best
        last = nearest


cdef void _chain_merges(double[:, ::1] dist, double[::1] size, int method, Py_ssize_t[::1] chain,
                        unsigned char[::1] merged, double[:, ::1] merges) noexcept nogil:
    """Nearest-neighbour chain: rows (slot x < slot y, height) in the order the mutual
    nearest neighbours are found; y holds the union afterwards.  ``dist`` and ``size`` are
    updated in place; ``chain`` (C) and ``merged`` (C, zeros) are scratch."""
    cdef Py_ssize_t C = dist.shape[0], length = 0, step, i, x = 0, y = 0
    cdef double best, d, n_x, n_y
    for step in range(C - 1):
        if length == 0:                 # a new chain starts at the lowest live slot
            for i in range(C):
                if not merged[i]:
                    chain[0] = i
                    length = 1
                    break
        while True:
            x = chain[length - 1]
            # nearest neighbour of x: the previous element unless another is strictly
            # nearer (no cycles on ties), else the lowest slot of the nearest
            if length > 1:
                y = chain[length - 2]
                best = dist[x, y]
            else:
                best = INFINITY
            for i in range(C):
                if not merged[i] and i != x and dist[x, i] < best:
                    best = dist[x, i]
                    y = i
            if length > 1 and y == chain[length - 2]:
                break
            chain[length] = y
            length += 1
        length -= 2
        if x > y:
            x, y = y, x
        merges[step, 0] = x
        merges[step, 1] = y
        merges[step, 2] = best
        n_x, n_y = size[x], size[y]
        merged[x] = 1
        size[y] = n_x + n_y
        for i in range(C):
            if not merged[i] and i != y:
                d = _merged_distance(method, dist[x, i], dist[y, i], best, n_x, n_y, size[i])
                dist[y, i] = d
                dist[i, y] = d


cdef void _number_clusters(double[:, ::1] Z, Py_ssize_t C, Py_ssize_t[::1] parent, double[::1] count) noexcept nogil:
    """Rewrites the slot pairs of merge rows sorted by height into cluster numbers (leaves
    0..C-1, row s makes cluster C+s) and fills in each cluster's number of leaves.
    ``parent`` and ``count`` (2C-1): scratch."""
    cdef Py_ssize_t s, side, node, root, nxt
    cdef Py_ssize_t found[2]
    for node in range(2 * C - 1):
        parent[node] = node
        count[node] = 1.0
    for s in range(C - 1):
        for side in range(2):
            root = <Py_ssize_t>Z[s, side]
            while parent[root] != root:
                root = parent[root]
            node = <Py_ssize_t>Z[s, side]
            while parent[node] != root:         # path compression: later finds are short
                nxt = parent[node]
                parent[node] = root
                node = nxt
            found[side] = root
        if found[0] > found[1]:
            found[0], found[1] = found[1], found[0]
        parent[found[0]] = parent[found[1]] = C + s
        count[C + s] = count[found[0]] + count[found[1]]
        Z[s, 0] = found[0]
        Z[s, 1] = found[1]
        Z[s, 3] = count[C + s]


def linkage_tree(double[:, ::1] dist, double[::1] sizes, int method):
    """(status, Z): the SciPy-format linkage matrix (C-1 rows of cluster, cluster, height,
    number of leaves) of C >= 2 clusters with initial ``sizes`` at distances ``dist``
    (C x C, overwritten; only its upper triangle is read, as SciPy's ``squareform`` reads a
    square matrix), ``method`` from METHODS; Z is None unless status is OK."""
    cdef Py_ssize_t C = dist.shape[0], i, j
    for i in range(C):
        for j in range(i + 1, C):
            if not isfinite(dist[i, j]):
                return NOT_FINITE, None
            dist[j, i] = dist[i, j]
    merges = np.empty((C - 1, 3), dtype=np.float64)
    if method == SINGLE:
        _spanning_tree_merges(dist, np.empty(C, dtype=np.float64), np.zeros(C, dtype=np.uint8), merges)
    else:
        _chain_merges(dist, np.array(sizes, dtype=np.float64), method, np.empty(C, dtype=np.intp),
                      np.zeros(C, dtype=np.uint8), merges)
    Z = np.empty((C - 1, 4), dtype=np.float64)
    Z[:, :3] = merges[np.argsort(merges[:, 2], kind="mergesort")]
    _number_clusters(Z, C, np.empty(2 * C - 1, dtype=np.intp), np.empty(2 * C - 1, dtype=np.float64))
    return OK, Z


cdef Py_ssize_t _clusters_at(const double[::1] highest, double cutoff) noexcept nogil:
    """Number of flat clusters when every subtree whose highest merge is <= cutoff is one:
    the merges above the cutoff form a subtree at the root, and each splits one more off."""
    cdef Py_ssize_t r, above = 0
    for r in range(highest.shape[0]):
        if highest[r] > cutoff:
            above += 1
    return above + 1


cdef void _number_flat_clusters(const double[:, ::1] Z, const double[::1] highest, double cutoff,
                                Py_ssize_t[::1] stack, unsigned char[::1] next_side,
                                int[::1] label_of) noexcept nogil:
    """Depth-first walk of the merges above ``cutoff`` from the root: a child subtree whose
    highest merge is <= cutoff gets the next label when the walk meets it; a leaf child
    gets one after both of its parent's subtrees are done, the left leaf first.  Scratch
    (C-1 each): ``stack`` of rows; ``next_side``, zeros: which child of a row comes next."""
    cdef Py_ssize_t C = Z.shape[0] + 1, depth = 0, r, child, side
    cdef int count = 0
    stack[0] = C - 2
    while depth >= 0:
        r = stack[depth]
        if next_side[r] < 2:
            child = <Py_ssize_t>Z[r, next_side[r]]
            next_side[r] += 1
            if child >= C:
                if highest[child - C] <= cutoff:
                    count += 1
                    label_of[child] = count
                else:
                    depth += 1
                    stack[depth] = child - C
            continue
        for side in range(2):
            child = <Py_ssize_t>Z[r, side]
            if child < C:
                count += 1
                label_of[child] = count
        depth -= 1


def maxclust(const double[:, ::1] Z, Py_ssize_t k):
    """Labels 1, 2, ... of the C leaves of a linkage matrix cut into at most k >= 1 flat
    clusters (fcluster's "maxclust"): the lowest cutoff among the subtrees' highest merges,
    found by bisection over the rows, at which there are at most k; a flat cluster is a
    largest subtree whose highest merge is <= the cutoff.  Numbered in a depth-first walk
    from the root, left before right, each flat cluster when the walk reaches its top,
    a leaf left on its own after its parent's other subtrees."""
    cdef Py_ssize_t C = Z.shape[0] + 1, r, side, child, leaf, lo, hi, mid
    cdef double h, cutoff
    labels_arr = np.arange(1, C + 1, dtype=np.intc)
    cdef int[::1] labels = labels_arr
    if k >= C:
        return labels_arr
    if k < 1:
        k = 1                           # the Python face rejects k < 1; this keeps the bisection in range
    # the highest merge in each subtree (a row's children are earlier rows)
    highest_arr = np.empty(C - 1, dtype=np.float64)
    cdef double[::1] highest = highest_arr
    for r in range(C - 1):
        h = Z[r, 2]
        for side in range(2):
            child = <Py_ssize_t>Z[r, side]
            if child >= C and highest[child - C] > h:
                h = highest[child - C]
        highest[r] = h
    # bisection over the rows (the highest merges need not grow with the row where
    # heights are not monotonic, so the probes are SciPy's: hi starts past the last row);
    # the root's row C-2 always qualifies (one cluster), so hi ends on a row
    lo, hi = -1, C - 1
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if _clusters_at(highest, highest[mid]) > k:
            lo = mid
        else:
            hi = mid
    cutoff = highest[hi]
    label_of_arr = np.zeros(2 * C - 1, dtype=np.intc)
    cdef int[::1] label_of = label_of_arr
    if highest[C - 2] <= cutoff:
        label_of[2 * C - 2] = 1
    else:
        _number_flat_clusters(Z, highest, cutoff, np.empty(C - 1, dtype=np.intp), np.zeros(C - 1, dtype=np.uint8),
                              label_of)
    # a flat cluster's label goes down to all its members (children are earlier rows)
    for r in range(C - 2, -1, -1):
        if label_of[C + r]:
            for side in range(2):
                label_of[<Py_ssize_t>Z[r, side]] = label_of[C + r]
    for leaf in range(C):
        labels[leaf] = label_of[leaf]
    return labels_arr
