# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
# distutils: language = c++
"""Concept lattice kernel: incremental construction (AddIntent), merge, canonical order,
extents, least-common-ancestor intersections and direct Jaccard sums.

The Python face is ``difftrace_mpi/stages/classify/lattice.py``; see its docstring for the semantics.
The kernel raises only on malformed input (ValueError, IndexError, KeyError); a limit that
is reached (the concept cap, the work budget) is a status code (``TRIP_*``, ``LatticeCore.trip``)
that the Python face turns into its own error or into a partial lattice.

Storage (one entry per concept, indexed by an *internal* id = creation order; concepts are
never deleted, so internal ids are stable):

* ``ia[c]``, ``iw[c]``: the intent, sorted attribute ids and their positive weights;
  ``tot[c]`` = sum of the weights.
* ``par[c]`` / ``chl[c]``: upper / lower covers (Hasse diagram).  "Parent" means the more
  general concept: larger extent, dominated intent.  The top has no parents.
* ``own[c]``: the objects whose object concept is ``c`` (their intent equals ``c``'s).
  Extents are never stored: the extent of ``c`` is the union of ``own`` over the down-set
  of ``c``, so an insertion never touches the extents of the concepts above it.
* a hash table (intent hash -> chain of concepts) for the equivalence-class fast path,
  and ``objc``: object id -> its object concept.  ``objc`` may be stale after a trusted
  merge or load (the MPI tree's partials, whose objects are disjoint by construction): it
  is rebuilt from ``own`` on the first query, so a merge costs no per-object map work.
* ``work``: the sum over concepts of 1 + the intent's length (the lattice's size in
  intent entries; it grows with every insertion and, as a function of the set of objects,
  never shrinks when objects are added: a bound on it bounds both memory and time).

Every insertion is atomic: its changes are logged, and an insertion that reaches the
concept cap or the work budget is undone, leaving the lattice of the objects inserted
before it (status ``trip``), never a broken one.
"""
from libc.stdint cimport int64_t, int32_t, int8_t, uint64_t, INT64_MAX
from libcpp.vector cimport vector
from libcpp.unordered_map cimport unordered_map
from libcpp.algorithm cimport sort as cpp_sort
from cython.operator cimport dereference as deref

import numpy as np

ctypedef vector[int64_t] I64Vec
ctypedef vector[int32_t] I32Vec

FORMAT_VERSION = 1

# why an insertion stopped (LatticeCore.trip; status codes, never exceptions)
TRIP_NONE = 0
TRIP_CONCEPTS = 1       # the lattice would have more than max_concepts concepts
TRIP_WORK = 2           # its work (sum of 1 + intent length) would exceed max_work
NO_LIMIT = INT64_MAX


# ----------------------------------------------------------------------------------------
# intents as sorted (attribute, weight) arrays

cdef inline uint64_t _fmix(uint64_t x) noexcept nogil:
    x ^= x >> 33
    x *= <uint64_t>0xff51afd7ed558ccd
    x ^= x >> 33
    x *= <uint64_t>0xc4ceb9fe1a85ec53
    x ^= x >> 33
    return x


cdef inline uint64_t _hash(const int64_t* a, const int64_t* w, Py_ssize_t n) noexcept nogil:
    """An intent's hash, for hash tables only (exact compares follow): two multiply-rotate
    lanes over alternate (attribute, weight) entries and an avalanche at the end.  A full
    avalanche per entry, as before, was a chain of dependent multiplies a third of the
    lattices' time on real LULESH (the lookups of every meet)."""
    cdef uint64_t h = <uint64_t>n * <uint64_t>0x9e3779b97f4a7c15, g = <uint64_t>0xc2b2ae3d27d4eb4f
    cdef Py_ssize_t i = 0
    while i + 1 < n:
        h = (h ^ (<uint64_t>a[i] * <uint64_t>0xff51afd7ed558ccd + <uint64_t>w[i])) * <uint64_t>0x9e3779b97f4a7c15
        g = (g ^ (<uint64_t>a[i + 1] * <uint64_t>0xff51afd7ed558ccd + <uint64_t>w[i + 1])) * \
            <uint64_t>0xc4ceb9fe1a85ec53
        h = (h << 31) | (h >> 33)
        g = (g << 29) | (g >> 35)
        i += 2
    if i < n:
        h ^= (<uint64_t>a[i] * <uint64_t>0xff51afd7ed558ccd + <uint64_t>w[i]) * <uint64_t>0x94d049bb133111eb
    return _fmix(h ^ _fmix(g))


cdef inline int _cmp_raw(const int64_t* a, const int64_t* aw, size_t na, int64_t ta,
                         const int64_t* b, const int64_t* bw, size_t nb, int64_t tb) noexcept nogil:
    """The canonical order of intents: total weight, then the (attribute, weight) sequence
    lexicographically (a prefix first).  -1, 0 or 1."""
    cdef size_t n = na if na < nb else nb, k
    if ta != tb:
        return -1 if ta < tb else 1
    for k in range(n):
        if a[k] != b[k]:
            return -1 if a[k] < b[k] else 1
        if aw[k] != bw[k]:
            return -1 if aw[k] < bw[k] else 1
    if na == nb:
        return 0
    return -1 if na < nb else 1


cdef inline bint _leq(const int64_t* a, const int64_t* aw, Py_ssize_t na, int64_t ta,
                      const int64_t* b, const int64_t* bw, Py_ssize_t nb, int64_t tb) noexcept nogil:
    """Intent a <= intent b in the weighted-subset order: every attribute of a is in b
    with at least a's weight (b dominates a)."""
    cdef Py_ssize_t i = 0, j = 0
    cdef int64_t x
    if na > nb or ta > tb:
        return False
    while i < na:
        if nb - j < na - i:
            return False
        x = a[i]
        while b[j] < x:
            j += 1
            if j == nb:
                return False
        if b[j] != x or bw[j] < aw[i]:
            return False
        i += 1
        j += 1
    return True


cdef int64_t _meet(const int64_t* a, const int64_t* aw, Py_ssize_t na,
                   const int64_t* b, const int64_t* bw, Py_ssize_t nb,
                   I64Vec& oa, I64Vec& ow) except -1:
    """oa, ow = a ^ b (common attributes, min weight); returns the total weight."""
    cdef Py_ssize_t i = 0, j = 0
    cdef int64_t t = 0, m
    oa.clear()
    ow.clear()
    while i < na and j < nb:
        if a[i] < b[j]:
            i += 1
        elif a[i] > b[j]:
            j += 1
        else:
            m = aw[i] if aw[i] < bw[j] else bw[j]
            oa.push_back(a[i])
            ow.push_back(m)
            t += m
            i += 1
            j += 1
    return t


cdef int64_t _join(const int64_t* a, const int64_t* aw, Py_ssize_t na,
                   const int64_t* b, const int64_t* bw, Py_ssize_t nb,
                   I64Vec& oa, I64Vec& ow) except -1:
    """oa, ow = a v b (all attributes, max weight); returns the total weight."""
    cdef Py_ssize_t i = 0, j = 0
    cdef int64_t t = 0, m
    oa.clear()
    ow.clear()
    while i < na or j < nb:
        if j == nb or (i < na and a[i] < b[j]):
            oa.push_back(a[i])
            ow.push_back(aw[i])
            t += aw[i]
            i += 1
        elif i == na or b[j] < a[i]:
            oa.push_back(b[j])
            ow.push_back(bw[j])
            t += bw[j]
            j += 1
        else:
            m = aw[i] if aw[i] > bw[j] else bw[j]
            oa.push_back(a[i])
            ow.push_back(m)
            t += m
            i += 1
            j += 1
    return t


cdef inline int64_t _min_sum(const int64_t* a, const int64_t* aw, Py_ssize_t na,
                             const int64_t* b, const int64_t* bw, Py_ssize_t nb) noexcept nogil:
    cdef Py_ssize_t i = 0, j = 0
    cdef int64_t t = 0
    while i < na and j < nb:
        if a[i] < b[j]:
            i += 1
        elif a[i] > b[j]:
            j += 1
        else:
            t += aw[i] if aw[i] < bw[j] else bw[j]
            i += 1
            j += 1
    return t


cdef int _check_intent(const int64_t* a, const int64_t* w, Py_ssize_t n, int64_t* total) except -1:
    cdef Py_ssize_t i
    cdef int64_t t = 0
    for i in range(n):
        if i > 0 and a[i] <= a[i - 1]:
            raise ValueError("attribute ids of an intent must be sorted and unique "
                             f"(position {i}: {a[i - 1]} then {a[i]})")
        if w[i] <= 0:
            raise ValueError(f"attribute weights must be positive integers "
                             f"(attribute {a[i]} has weight {w[i]})")
        t += w[i]
    total[0] = t
    return 0


cdef inline bint _remove_value(I32Vec& v, int32_t x) noexcept:
    """Remove x from v (order not kept); whether it was there."""
    cdef size_t k
    for k in range(v.size()):
        if v[k] == x:
            v[k] = v[v.size() - 1]
            v.pop_back()
            return True
    return False


cdef object _i32_array(I32Vec& v):
    return np.asarray(<int32_t[:v.size()]> v.data()).copy() if v.size() else np.empty(0, dtype=np.int32)


# ----------------------------------------------------------------------------------------

cdef struct _CSRRows:
    const int64_t *indptr
    const int64_t *ind
    const int64_t *wt
    const int64_t *tot

ctypedef _CSRRows* _CSRRowsPtr

# the two kinds of rows put in the canonical order of intents: a lattice's concepts and
# CSR rows (a fused type: one merge sort, compiled for each with its comparison inlined)
cdef class LatticeCore


ctypedef fused _Rows:
    LatticeCore
    _CSRRowsPtr


cdef inline int _order(_Rows rows, int64_t a, int64_t b) noexcept:
    if _Rows is _CSRRowsPtr:
        return _cmp_raw(rows.ind + rows.indptr[a], rows.wt + rows.indptr[a], rows.indptr[a + 1] - rows.indptr[a],
                        rows.tot[a], rows.ind + rows.indptr[b], rows.wt + rows.indptr[b],
                        rows.indptr[b + 1] - rows.indptr[b], rows.tot[b])
    else:
        return rows._cmp(<int32_t> a, <int32_t> b)


cdef int64_t* _merge_sort(int64_t *src, int64_t *dst, Py_ssize_t n, _Rows rows) noexcept:
    """Stable bottom-up merge sort of the row ids src[:n] in the canonical order of intents
    (dst: scratch of the same size); returns the buffer that holds the sorted ids."""
    cdef Py_ssize_t width = 1, lo, mid, hi, i, j, k
    cdef int64_t *sw
    while width < n:
        lo = 0
        while lo < n:
            mid = lo + width if lo + width < n else n
            hi = lo + 2 * width if lo + 2 * width < n else n
            i = lo
            j = mid
            k = lo
            while i < mid and j < hi:
                if _order(rows, src[j], src[i]) < 0:
                    dst[k] = src[j]
                    j += 1
                else:
                    dst[k] = src[i]
                    i += 1
                k += 1
            while i < mid:
                dst[k] = src[i]
                i += 1
                k += 1
            while j < hi:
                dst[k] = src[j]
                j += 1
                k += 1
            lo = hi
        sw = src
        src = dst
        dst = sw
        width *= 2
    return src


cdef class LatticeCore:
    """The lattice storage and its algorithms, in internal (creation-order) ids."""
    cdef vector[I64Vec] ia
    cdef vector[I64Vec] iw
    cdef I64Vec tot
    cdef vector[I32Vec] par
    cdef vector[I32Vec] chl
    cdef vector[I64Vec] own
    cdef vector[uint64_t] hval
    cdef I32Vec hnext
    cdef unordered_map[uint64_t, int32_t] hhead
    cdef unordered_map[int64_t, int32_t] objc
    cdef bint objc_stale            # objc misses objects appended by a trusted merge/load
    cdef int64_t n_obj
    cdef readonly int64_t max_concepts
    cdef readonly int64_t max_work
    cdef readonly int64_t work      # sum over concepts of 1 + intent length
    cdef readonly int32_t bottom
    cdef readonly int64_t version
    cdef readonly int trip          # TRIP_* of the last insertion (0: it went in)
    # soft_cap: the concept cap is judged on the whole insertion (which then runs on as
    # far as the work budget allows), so that which limit stopped it depends only on the
    # set of objects, not on the order the lattice was built in; else it stops at once
    cdef public bint soft_cap
    # the undo log of the insertion in progress
    cdef int32_t _n0, _bottom0
    cdef int64_t _work0
    cdef I64Vec _log_edges          # (p << 1 | unlinked, c) pairs, oldest first
    cdef I32Vec _log_rc             # retargeted concepts, with their old intents
    cdef vector[I64Vec] _log_ra
    cdef vector[I64Vec] _log_rw
    cdef I64Vec _log_rt
    # AddIntent's explicit stack (scratch, reused between insertions)
    cdef vector[I64Vec] _fa
    cdef vector[I64Vec] _fw
    cdef I64Vec _ft
    cdef I32Vec _fgen
    cdef I64Vec _fk
    cdef vector[I32Vec] _fgpar
    cdef vector[I32Vec] _fnew

    def __cinit__(self, int64_t max_concepts=200000):
        if max_concepts < 1 or max_concepts > 2**31 - 2:
            raise ValueError(f"max_concepts must be in 1 .. 2**31 - 2, got {max_concepts}")
        self.max_concepts = max_concepts
        self.max_work = NO_LIMIT
        self.work = 0
        self.soft_cap = False
        self.bottom = -1
        self.version = 0
        self.trip = TRIP_NONE
        self.objc_stale = False
        self.n_obj = 0

    def set_max_work(self, int64_t max_work):
        """The work budget of further insertions (NO_LIMIT: none)."""
        if max_work < 0:
            raise ValueError(f"max_work must be at least 0, got {max_work}")
        self.max_work = max_work

    def set_max_concepts(self, int64_t max_concepts):
        if max_concepts < 1 or max_concepts > 2**31 - 2:
            raise ValueError(f"max_concepts must be in 1 .. 2**31 - 2, got {max_concepts}")
        self.max_concepts = max_concepts

    @property
    def n_concepts(self):
        return <Py_ssize_t>self.ia.size()

    @property
    def n_objects(self):
        return <Py_ssize_t>self.n_obj

    def copy(self):
        cdef LatticeCore o = LatticeCore.__new__(LatticeCore, self.max_concepts)
        o.ia = self.ia
        o.iw = self.iw
        o.tot = self.tot
        o.par = self.par
        o.chl = self.chl
        o.own = self.own
        o.hval = self.hval
        o.hnext = self.hnext
        o.hhead = self.hhead
        o.objc = self.objc
        o.objc_stale = self.objc_stale
        o.n_obj = self.n_obj
        o.bottom = self.bottom
        o.max_work = self.max_work
        o.work = self.work
        o.soft_cap = self.soft_cap
        o.version = 0
        return o

    # -- internal helpers -------------------------------------------------------------

    cdef void _fresh_objc(self) noexcept:
        """Bring objc up to date with the own lists (after a trusted merge or load)."""
        cdef size_t c, k
        if not self.objc_stale:
            return
        self.objc.clear()
        self.objc.reserve(<size_t>self.n_obj)
        for c in range(self.own.size()):
            for k in range(self.own[c].size()):
                self.objc[self.own[c][k]] = <int32_t>c
        self.objc_stale = False

    cdef void _begin(self) noexcept:
        """Start an insertion: remember what its undo needs."""
        self._n0 = <int32_t>self.ia.size()
        self._bottom0 = self.bottom
        self._work0 = self.work
        self._log_edges.clear()
        self._log_rc.clear()
        self._log_ra.clear()
        self._log_rw.clear()
        self._log_rt.clear()
        self.trip = TRIP_NONE

    cdef void _rollback(self) noexcept:
        """Undo the insertion begun by _begin (the objects are only added once it is in)."""
        cdef Py_ssize_t i
        cdef int32_t c, p
        cdef size_t n0 = <size_t>self._n0
        for i in range(<Py_ssize_t>self._log_rc.size() - 1, -1, -1):
            c = self._log_rc[i]
            self._hash_remove(c)
            self.ia[c] = self._log_ra[i]
            self.iw[c] = self._log_rw[i]
            self.tot[c] = self._log_rt[i]
            self._hash_insert(c)
        for i in range(<Py_ssize_t>self._log_edges.size() - 2, -1, -2):
            p = <int32_t>(self._log_edges[i] >> 1)
            c = <int32_t>self._log_edges[i + 1]
            if self._log_edges[i] & 1:         # was unlinked: link again
                self.chl[p].push_back(c)
                self.par[c].push_back(p)
            else:
                _remove_value(self.chl[p], c)
                _remove_value(self.par[c], p)
        for c in range(<int32_t>self.ia.size() - 1, self._n0 - 1, -1):
            self._hash_remove(c)
        self.ia.resize(n0)
        self.iw.resize(n0)
        self.tot.resize(n0)
        self.par.resize(n0)
        self.chl.resize(n0)
        self.own.resize(n0)
        self.hval.resize(n0)
        self.hnext.resize(n0)
        self.bottom = self._bottom0
        self.work = self._work0
        self.version += 1

    cdef void _hash_insert(self, int32_t c) noexcept:
        cdef uint64_t h = _hash(self.ia[c].data(), self.iw[c].data(), self.ia[c].size())
        cdef unordered_map[uint64_t, int32_t].iterator it = self.hhead.find(h)
        self.hval[c] = h
        if it == self.hhead.end():
            self.hnext[c] = -1
        else:
            self.hnext[c] = deref(it).second
        self.hhead[h] = c

    cdef void _hash_remove(self, int32_t c) noexcept:
        cdef uint64_t h = self.hval[c]
        cdef int32_t k = self.hhead[h], prev = -1
        while k != c:
            prev = k
            k = self.hnext[k]
        if prev == -1:
            if self.hnext[c] == -1:
                self.hhead.erase(h)
            else:
                self.hhead[h] = self.hnext[c]
        else:
            self.hnext[prev] = self.hnext[c]
        self.hnext[c] = -1

    cdef int32_t _find(self, const int64_t* a, const int64_t* w, Py_ssize_t n, int64_t t) noexcept:
        """Internal id of the concept with exactly this intent, or -1."""
        cdef uint64_t h = _hash(a, w, n)
        cdef unordered_map[uint64_t, int32_t].iterator it = self.hhead.find(h)
        cdef int32_t k
        cdef Py_ssize_t i
        cdef bint same
        if it == self.hhead.end():
            return -1
        k = deref(it).second
        while k != -1:
            if self.tot[k] == t and <Py_ssize_t>self.ia[k].size() == n:
                same = True
                for i in range(n):
                    if self.ia[k][i] != a[i] or self.iw[k][i] != w[i]:
                        same = False
                        break
                if same:
                    return k
            k = self.hnext[k]
        return -1

    cdef int32_t _new(self, I64Vec& a, I64Vec& w, int64_t t) except -2:
        """A new concept; -1 (and trip set) where a limit stops the insertion."""
        cdef int32_t c = <int32_t>self.ia.size()
        cdef int64_t grow = 1 + <int64_t>a.size()
        if <int64_t>self.ia.size() >= self.max_concepts and not self.soft_cap:
            self.trip = TRIP_CONCEPTS
            return -1
        if grow > self.max_work - self.work:
            self.trip = TRIP_WORK
            return -1
        if <int64_t>self.ia.size() >= 2**31 - 2:
            self.trip = TRIP_CONCEPTS
            return -1
        self.work += grow
        self.ia.push_back(a)
        self.iw.push_back(w)
        self.tot.push_back(t)
        self.par.push_back(I32Vec())
        self.chl.push_back(I32Vec())
        self.own.push_back(I64Vec())
        self.hval.push_back(0)
        self.hnext.push_back(-1)
        self._hash_insert(c)
        self.version += 1
        return c

    cdef inline void _link(self, int32_t p, int32_t c) noexcept:
        self.chl[p].push_back(c)
        self.par[c].push_back(p)
        self._log_edges.push_back(<int64_t>p << 1)
        self._log_edges.push_back(c)

    cdef inline void _unlink(self, int32_t p, int32_t c) noexcept:
        """Remove the cover p -> c if there is one (AddIntent moves covers that may not be)."""
        if _remove_value(self.chl[p], c):
            _remove_value(self.par[c], p)
            self._log_edges.push_back((<int64_t>p << 1) | 1)
            self._log_edges.push_back(c)

    cdef inline bint _c_leq_c(self, int32_t x, int32_t y) noexcept:
        """intent(x) <= intent(y)"""
        return _leq(self.ia[x].data(), self.iw[x].data(), self.ia[x].size(), self.tot[x],
                    self.ia[y].data(), self.iw[y].data(), self.ia[y].size(), self.tot[y])

    cdef inline bint _v_leq_c(self, I64Vec& a, I64Vec& w, int64_t t, int32_t x) noexcept:
        """(a, w) <= intent(x)"""
        return _leq(a.data(), w.data(), a.size(), t,
                    self.ia[x].data(), self.iw[x].data(), self.ia[x].size(), self.tot[x])

    cdef int32_t _maximal(self, I64Vec& a, I64Vec& w, int64_t t, int32_t gen) noexcept:
        """From gen (whose intent dominates (a, w)) climb to the most general concept whose
        intent still dominates (a, w): the closure of (a, w) in the current lattice."""
        cdef bint moved = True
        cdef size_t k
        cdef int32_t p
        while moved:
            moved = False
            for k in range(self.par[gen].size()):
                p = self.par[gen][k]
                if self._v_leq_c(a, w, t, p):
                    gen = p
                    moved = True
                    break
        return gen

    cdef void _add_parent(self, I32Vec& newpar, int32_t cand) noexcept:
        """Keep newpar the most specific of the candidates seen (an antichain)."""
        cdef size_t q, r = 0
        for q in range(newpar.size()):
            if self._c_leq_c(cand, newpar[q]):
                return
        for q in range(newpar.size()):
            if not self._c_leq_c(newpar[q], cand):
                newpar[r] = newpar[q]
                r += 1
        newpar.resize(r)
        newpar.push_back(cand)

    cdef int32_t _add_intent(self, I64Vec& a0, I64Vec& w0, int64_t t0, int32_t gen0) except -2:
        """AddIntent (van der Merwe, Obiedkov & Kourie 2004) over weighted intents: returns
        the concept with intent (a0, w0), creating it and every missing meet with it.

        AddIntent(x, gen):
            gen = maximal(x, gen)            # climb to the closure of x
            if intent(gen) == x: return gen
            newpar = {}
            for cand in parents(gen):
                if not intent(cand) <= x: cand = AddIntent(intent(cand) ^ x, cand)
                keep cand in newpar unless it is above a member; drop members above it
            nc = new concept x; move the covers newpar -> gen to newpar -> nc; nc -> gen

        The recursion runs on an explicit stack of frames (d = depth), because lattices
        of weighted intents can be deep enough to overflow the C stack.  Frame d holds
        its intent (_fa/_fw/_ft), generator, the generator's parents, the next parent to
        try and the new parents found; frame d+1's intent slot receives each meet.
        Returns -1 where a limit stopped it (trip set; the caller undoes the insertion)."""
        cdef Py_ssize_t d = 0
        cdef int32_t cand, r, g, nc, p
        cdef int64_t mt
        cdef size_t k
        g = self._maximal(a0, w0, t0, gen0)
        if self.tot[g] == t0:           # a0 <= intent(g) with the same total: equal
            return g
        if self._fa.size() < 2:
            self._fa.resize(2)
            self._fw.resize(2)
            self._ft.resize(2)
            self._fgen.resize(2)
            self._fk.resize(2)
            self._fgpar.resize(2)
            self._fnew.resize(2)
        self._fa[0] = a0
        self._fw[0] = w0
        self._ft[0] = t0
        self._fgen[0] = g
        self._fgpar[0] = self.par[g]
        self._fk[0] = 0
        self._fnew[0].clear()
        while True:
            if self._fk[d] < <int64_t>self._fgpar[d].size():
                if <Py_ssize_t>self._fa.size() < d + 2:
                    k = 2 * self._fa.size()
                    self._fa.resize(k)
                    self._fw.resize(k)
                    self._ft.resize(k)
                    self._fgen.resize(k)
                    self._fk.resize(k)
                    self._fgpar.resize(k)
                    self._fnew.resize(k)
                cand = self._fgpar[d][self._fk[d]]
                mt = _meet(self.ia[cand].data(), self.iw[cand].data(), self.ia[cand].size(),
                           self._fa[d].data(), self._fw[d].data(), self._fa[d].size(),
                           self._fa[d + 1], self._fw[d + 1])
                if mt == self.tot[cand]:
                    r = cand                    # intent(cand) <= x already
                else:
                    # the concept for intent(cand) ^ x: an existing one is where AddIntent
                    # would climb to, and the hash table finds it directly
                    r = self._find(self._fa[d + 1].data(), self._fw[d + 1].data(),
                                   self._fa[d + 1].size(), mt)
                    if r < 0:
                        g = self._maximal(self._fa[d + 1], self._fw[d + 1], mt, cand)
                        if self.tot[g] == mt:
                            r = g
                        else:           # "call" AddIntent(meet, cand): open frame d+1
                            d += 1
                            self._ft[d] = mt
                            self._fgen[d] = g
                            self._fgpar[d] = self.par[g]
                            self._fk[d] = 0
                            self._fnew[d].clear()
                            continue
                self._add_parent(self._fnew[d], r)
                self._fk[d] += 1
            else:                       # all parents done: create the concept of frame d
                nc = self._new(self._fa[d], self._fw[d], self._ft[d])
                if nc < 0:
                    return -1
                g = self._fgen[d]
                for k in range(self._fnew[d].size()):
                    p = self._fnew[d][k]
                    self._unlink(p, g)
                    self._link(p, nc)
                self._link(nc, g)
                if d == 0:
                    return nc
                d -= 1                  # "return" nc to frame d
                self._add_parent(self._fnew[d], nc)
                self._fk[d] += 1

    cdef void _retarget(self, int32_t c, I64Vec& a, I64Vec& w, int64_t t) noexcept:
        """Replace the intent of c (callers guarantee the covers stay right); the new
        intent always dominates the old one, so the work only grows."""
        self._log_rc.push_back(c)
        self._log_ra.push_back(self.ia[c])
        self._log_rw.push_back(self.iw[c])
        self._log_rt.push_back(self.tot[c])
        self.work += <int64_t>a.size() - <int64_t>self.ia[c].size()
        self._hash_remove(c)
        self.ia[c] = a
        self.iw[c] = w
        self.tot[c] = t
        self._hash_insert(c)
        self.version += 1

    cdef int32_t _insert(self, I64Vec& a, I64Vec& w, int64_t t,
                         const int64_t* objs, Py_ssize_t nobj) except -2:
        """Insert one equivalence class (objects sharing the intent x = (a, w)), atomically:
        where a limit stops it, everything it changed is undone and -1 returned (trip says
        which limit).  Else the concept of x."""
        cdef int32_t c
        cdef Py_ssize_t i
        self._begin()
        c = self._insert_concepts(a, w, t)
        if c >= 0 and self.work > self.max_work:
            self.trip = TRIP_WORK
            c = -1
        if c >= 0 and <int64_t>self.ia.size() > self.max_concepts:
            self.trip = TRIP_CONCEPTS
            c = -1
        if c < 0:
            self._rollback()
            return -1
        for i in range(nobj):
            self.own[c].push_back(objs[i])
        if not self.objc_stale:
            for i in range(nobj):
                self.objc[objs[i]] = c
        self.n_obj += nobj
        self.version += 1
        return c

    cdef int32_t _insert_concepts(self, I64Vec& a, I64Vec& w, int64_t t) except -2:
        """The concept changes of _insert: the concept of x, or -1 where a limit stopped."""
        cdef int32_t c, b, k, nb
        cdef I64Vec ja, jw, xa, xw
        cdef int64_t jt, xt
        cdef Py_ssize_t i
        cdef size_t q
        cdef bint b_empty, real
        if self.ia.size() == 0:
            c = self._new(a, w, t)
            if c < 0:
                return -1
            self.bottom = c
        else:
            c = self._find(a.data(), w.data(), a.size(), t)       # an existing class
            b = self.bottom
            if c >= 0:
                pass
            elif self._v_leq_c(a, w, t, b):
                c = self._add_intent(a, w, t, b)
                if c < 0:
                    return -1
            else:
                # x is not below the bottom (the join J of all intents so far): it has
                # new attributes or larger weights.  For every old concept y,
                # y ^ x = y ^ x' with x' = x ^ J, so the new meets are those of x', and
                # AddIntent(x', bottom) creates them (climbing from the bottom to the
                # closure of x' instead of meeting x with every co-atom).  Then x hangs
                # below the concept K of x', and the bottom grows to J v x.
                b_empty = self.own[b].size() == 0
                xt = _meet(self.ia[b].data(), self.iw[b].data(), self.ia[b].size(),
                           a.data(), w.data(), a.size(), xa, xw)
                jt = _join(self.ia[b].data(), self.iw[b].data(), self.ia[b].size(),
                           a.data(), w.data(), a.size(), ja, jw)
                k = self._find(xa.data(), xw.data(), xa.size(), xt)
                if k < 0:
                    k = self._add_intent(xa, xw, xt, b)
                    if k < 0:
                        return -1
                if k == b:                      # x' = J, so x > J: x is the new join
                    if b_empty:
                        self._retarget(b, ja, jw, jt)
                        c = b
                    else:
                        c = self._new(a, w, t)
                        if c < 0:
                            return -1
                        self._link(b, c)
                        self.bottom = c
                else:
                    # K is a meet of objects unless it was just created from the
                    # empty-extent bottom (extent(K) = extent(bottom) = {} then)
                    real = self.own[k].size() > 0 or not b_empty
                    if not real:
                        for q in range(self.chl[k].size()):
                            if self.chl[k][q] != b:
                                real = True
                                break
                    if real:
                        c = self._new(a, w, t)
                        if c < 0:
                            return -1
                        self._link(k, c)
                        if b_empty:
                            self._unlink(k, b)  # if K covered the bottom, x is between
                            self._retarget(b, ja, jw, jt)
                            self._link(c, b)
                        else:
                            nb = self._new(ja, jw, jt)
                            if nb < 0:
                                return -1
                            self._link(b, nb)
                            self._link(c, nb)
                            self.bottom = nb
                    else:
                        # x' is no meet of objects: its fresh concept becomes x's
                        self._retarget(k, a, w, t)
                        self._retarget(b, ja, jw, jt)
                        c = k
        return c

    cdef int _check_new_objects(self, const int64_t* objs, Py_ssize_t n) except -1:
        cdef Py_ssize_t i
        cdef unordered_map[int64_t, int32_t] seen
        self._fresh_objc()
        # every checked object is about to be inserted: size both maps once, not by rehashing
        seen.reserve(n)
        self.objc.reserve(self.objc.size() + n)
        for i in range(n):
            if self.objc.count(objs[i]) or seen.count(objs[i]):
                raise ValueError(f"object {objs[i]} is already in the lattice")
            seen[objs[i]] = 0
        return 0

    # -- insertion --------------------------------------------------------------------

    def add_class(self, const int64_t[::1] attrs, const int64_t[::1] weights,
                  const int64_t[::1] objs):
        """Insert objects sharing one intent; returns the internal id of their concept, or
        -1 where a limit stopped it (``trip`` says which; the lattice is as before)."""
        cdef int64_t t = 0
        cdef I64Vec a, w
        cdef Py_ssize_t n = attrs.shape[0], i
        if weights.shape[0] != n:
            raise ValueError(f"{n} attributes but {weights.shape[0]} weights")
        if objs.shape[0] == 0:
            raise ValueError("an equivalence class needs at least one object")
        if n:
            _check_intent(&attrs[0], &weights[0], n, &t)
        else:
            t = 0
        self._check_new_objects(&objs[0], objs.shape[0])
        a.resize(n)
        w.resize(n)
        for i in range(n):
            a[i] = attrs[i]
            w[i] = weights[i]
        return self._insert(a, w, t, &objs[0], objs.shape[0])

    def add_csr(self, const int64_t[::1] indptr, const int64_t[::1] indices,
                const int64_t[::1] weights, const int64_t[::1] objs):
        """Insert objects objs[r] with intent row r of a CSR (rows sorted, unique), in row
        order; returns how many went in: all, or the rows before the one a limit stopped
        (``trip`` says which; the lattice is that of the rows before it)."""
        cdef Py_ssize_t r, s, e, n = objs.shape[0], i
        cdef int64_t t = 0
        cdef I64Vec a, w
        if indptr.shape[0] != n + 1:
            raise ValueError(f"indptr has {indptr.shape[0]} entries for {n} objects")
        if indices.shape[0] != weights.shape[0] or indptr[n] != indices.shape[0] or indptr[0] != 0:
            raise ValueError("inconsistent CSR arrays (indptr, indices, weights)")
        for r in range(n):
            if indptr[r + 1] < indptr[r]:
                raise ValueError("indptr must be non-decreasing")
        for r in range(n):
            s = indptr[r]
            e = indptr[r + 1]
            if e > s:
                _check_intent(&indices[s], &weights[s], e - s, &t)
        if n:
            self._check_new_objects(&objs[0], n)
        for r in range(n):
            s = indptr[r]
            e = indptr[r + 1]
            a.resize(e - s)
            w.resize(e - s)
            t = 0
            for i in range(e - s):
                a[i] = indices[s + i]
                w[i] = weights[s + i]
                t += w[i]
            if self._insert(a, w, t, &objs[r], 1) < 0:
                return r
        return n

    def add_classes(self, const int64_t[::1] indptr, const int64_t[::1] indices,
                    const int64_t[::1] weights, const int64_t[::1] obj_indptr,
                    const int64_t[::1] objs, bint trusted=False):
        """Insert equivalence classes in row order: class r has intent row r of the CSR
        (indptr, indices, weights; rows sorted, unique) and the objects
        objs[obj_indptr[r]:obj_indptr[r + 1]] (at least one).  Returns how many went in:
        all, or the classes before the one a limit stopped (``trip`` says which; the
        lattice is that of the classes before it).  ``trusted``: the objects are new and
        distinct (not checked; the object map is built on the first query)."""
        cdef Py_ssize_t r, s, e, n = indptr.shape[0] - 1, i
        cdef int64_t t = 0
        cdef I64Vec a, w
        if n < 0 or obj_indptr.shape[0] != n + 1:
            raise ValueError("add_classes: indptr and obj_indptr lengths disagree")
        if indices.shape[0] != weights.shape[0] or indptr[n] != indices.shape[0] or indptr[0] != 0 \
                or obj_indptr[0] != 0 or obj_indptr[n] != objs.shape[0]:
            raise ValueError("inconsistent class arrays (indptr, indices, weights, objects)")
        for r in range(n):
            if indptr[r + 1] < indptr[r] or obj_indptr[r + 1] <= obj_indptr[r]:
                raise ValueError("every class needs an intent row and at least one object")
            s = indptr[r]
            e = indptr[r + 1]
            if e > s:
                _check_intent(&indices[s], &weights[s], e - s, &t)
        if trusted:
            self.objc_stale = True
        elif objs.shape[0]:
            self._check_new_objects(&objs[0], objs.shape[0])
        for r in range(n):
            s = indptr[r]
            e = indptr[r + 1]
            a.resize(e - s)
            w.resize(e - s)
            t = 0
            for i in range(e - s):
                a[i] = indices[s + i]
                w[i] = weights[s + i]
                t += w[i]
            if self._insert(a, w, t, &objs[obj_indptr[r]], obj_indptr[r + 1] - obj_indptr[r]) < 0:
                return r
        return n

    def merge_from(self, LatticeCore other, const int32_t[::1] order, bint disjoint=False):
        """Insert other's object concepts (one per distinct intent, with all their
        objects), in the order of ``order`` (internal ids of other's concepts; those
        without objects are skipped).  Objects must be disjoint: checked, unless the
        caller guarantees it (``disjoint``: the MPI tree's shards), and then the object
        map is left stale, to be rebuilt on the first query.  Returns how many entries of
        ``order`` were taken: all, or those before the one a limit stopped (``trip``)."""
        cdef int32_t c
        cdef size_t k
        cdef Py_ssize_t i
        cdef I64Vec allobj
        if disjoint:
            self.objc_stale = True
        else:
            for c in range(<int32_t>other.ia.size()):
                for k in range(other.own[c].size()):
                    allobj.push_back(other.own[c][k])
            if allobj.size():
                self._check_new_objects(allobj.data(), allobj.size())
        for i in range(order.shape[0]):
            c = order[i]
            if c < 0 or c >= <int32_t>other.ia.size():
                raise IndexError(f"concept {c} out of range")
            if other.own[c].size():
                if self._insert(other.ia[c], other.iw[c], other.tot[c],
                                other.own[c].data(), other.own[c].size()) < 0:
                    return i
        return order.shape[0]

    # -- canonical order --------------------------------------------------------------

    cdef int _cmp(self, int32_t x, int32_t y) noexcept:
        return _cmp_raw(self.ia[x].data(), self.iw[x].data(), self.ia[x].size(), self.tot[x],
                        self.ia[y].data(), self.iw[y].data(), self.ia[y].size(), self.tot[y])

    def canonical_order(self):
        """perm[pos] = internal id of the concept at canonical position pos: ascending
        total intent weight, ties by the (attribute, weight) sequence, lexicographic."""
        cdef Py_ssize_t n = self.ia.size()
        ids = np.arange(n, dtype=np.int64)
        tmp = np.empty(n, dtype=np.int64)
        cdef int64_t[::1] a = ids, b = tmp
        cdef int64_t *out = _merge_sort(&a[0], &b[0], n, self) if n else NULL
        return (ids if n == 0 or out == &a[0] else tmp).astype(np.int32)

    # -- queries (internal ids) -------------------------------------------------------

    def intent(self, int32_t c):
        cdef Py_ssize_t n = self.ia[c].size(), i
        a = np.empty(n, dtype=np.int64)
        w = np.empty(n, dtype=np.int64)
        cdef int64_t[::1] av = a, wv = w
        for i in range(n):
            av[i] = self.ia[c][i]
            wv[i] = self.iw[c][i]
        return a, w

    def total(self, int32_t c):
        return self.tot[c]

    def totals(self):
        cdef Py_ssize_t n = self.tot.size(), i
        out = np.empty(n, dtype=np.int64)
        cdef int64_t[::1] o = out
        for i in range(n):
            o[i] = self.tot[i]
        return out

    def parents(self, int32_t c):
        return _i32_array(self.par[c])

    def children(self, int32_t c):
        return _i32_array(self.chl[c])

    def own_objects(self, int32_t c):
        cdef size_t k
        out = np.empty(self.own[c].size(), dtype=np.int64)
        cdef int64_t[::1] o = out
        for k in range(self.own[c].size()):
            o[k] = self.own[c][k]
        out.sort()
        return out

    def object_concept(self, int64_t obj):
        self._fresh_objc()
        cdef unordered_map[int64_t, int32_t].iterator it = self.objc.find(obj)
        if it == self.objc.end():
            return -1
        return deref(it).second

    def object_concepts(self, const int64_t[::1] objs):
        cdef Py_ssize_t i
        cdef unordered_map[int64_t, int32_t].iterator it
        self._fresh_objc()
        out = np.empty(objs.shape[0], dtype=np.int32)
        cdef int32_t[::1] o = out
        for i in range(objs.shape[0]):
            it = self.objc.find(objs[i])
            if it == self.objc.end():
                raise KeyError(f"object {objs[i]} is not in the lattice")
            o[i] = deref(it).second
        return out

    def count_known(self, const int64_t[::1] indptr, const int64_t[::1] indices,
                    const int64_t[::1] weights):
        """How many CSR rows (sorted, unique) are the intent of a concept already."""
        cdef Py_ssize_t n = indptr.shape[0] - 1, r, k
        cdef int64_t t, found = 0
        if n < 0 or indptr[n] != indices.shape[0] or weights.shape[0] != indices.shape[0]:
            raise ValueError("inconsistent CSR arrays (indptr, indices, weights)")
        cdef const int64_t* ind = &indices[0] if indices.shape[0] else NULL
        cdef const int64_t* wt = &weights[0] if weights.shape[0] else NULL
        for r in range(n):
            t = 0
            for k in range(indptr[r], indptr[r + 1]):
                t += weights[k]
            if self._find(ind + indptr[r], wt + indptr[r], indptr[r + 1] - indptr[r], t) >= 0:
                found += 1
        return found

    def class_arrays(self):
        """The equivalence classes (object concepts), in internal order, as CSR arrays:
        (indptr, attrs, weights) of their intents and (obj_indptr, objects) of their
        objects (each sorted)."""
        cdef I32Vec cl
        cdef int32_t c
        cdef const int32_t* order = NULL
        for c in range(<int32_t>self.ia.size()):
            if self.own[c].size():
                cl.push_back(c)
        if cl.size():
            order = cl.data()
        return self._intents_csr(order, cl.size()) + self._objects_csr(order, cl.size())

    cdef tuple _intents_csr(self, const int32_t* order, Py_ssize_t n):
        """(indptr, attrs, weights) of the intents of the concepts order[0..n), in that order."""
        cdef Py_ssize_t pos, k
        cdef int32_t c
        cdef int64_t na = 0, j
        for pos in range(n):
            na += self.ia[order[pos]].size()
        indptr = np.zeros(n + 1, dtype=np.int64)
        attrs = np.empty(na, dtype=np.int64)
        weights = np.empty(na, dtype=np.int64)
        cdef int64_t[::1] ip = indptr, at = attrs, wt = weights
        for pos in range(n):
            c = order[pos]
            j = ip[pos]
            for k in range(<Py_ssize_t>self.ia[c].size()):
                at[j + k] = self.ia[c][k]
                wt[j + k] = self.iw[c][k]
            ip[pos + 1] = j + self.ia[c].size()
        return indptr, attrs, weights

    cdef tuple _objects_csr(self, const int32_t* order, Py_ssize_t n):
        """(indptr, objects) of the objects each concept of order[0..n) owns, each sorted."""
        cdef Py_ssize_t pos, k, nn
        cdef int32_t c
        cdef int64_t no = 0, j
        for pos in range(n):
            no += self.own[order[pos]].size()
        indptr = np.zeros(n + 1, dtype=np.int64)
        objects = np.empty(no, dtype=np.int64)
        cdef int64_t[::1] ip = indptr, ob = objects
        for pos in range(n):
            c = order[pos]
            j = ip[pos]
            nn = self.own[c].size()
            for k in range(nn):
                ob[j + k] = self.own[c][k]
            if nn > 1:
                cpp_sort(&ob[j], &ob[0] + j + nn)
            ip[pos + 1] = j + nn
        return indptr, objects

    def class_concepts(self):
        """Internal ids of the object concepts (concepts that own objects)."""
        cdef I32Vec v
        cdef int32_t c
        for c in range(<int32_t>self.ia.size()):
            if self.own[c].size():
                v.push_back(c)
        return _i32_array(v)

    def object_ids(self):
        cdef I64Vec v
        cdef size_t c, k
        for c in range(self.own.size()):
            for k in range(self.own[c].size()):
                v.push_back(self.own[c][k])
        out = np.empty(v.size(), dtype=np.int64)
        cdef int64_t[::1] o = out
        for k in range(v.size()):
            o[k] = v[k]
        out.sort()
        return out

    def extent(self, int32_t c):
        """Sorted object ids of the extent of c (its own objects and its down-set's)."""
        cdef I32Vec stack
        cdef I64Vec objs
        cdef vector[char] seen
        cdef int32_t x, y
        cdef size_t k
        seen.resize(self.ia.size(), 0)
        stack.push_back(c)
        seen[c] = 1
        while stack.size():
            x = stack.back()
            stack.pop_back()
            for k in range(self.own[x].size()):
                objs.push_back(self.own[x][k])
            for k in range(self.chl[x].size()):
                y = self.chl[x][k]
                if not seen[y]:
                    seen[y] = 1
                    stack.push_back(y)
        out = np.empty(objs.size(), dtype=np.int64)
        cdef int64_t[::1] o = out
        for k in range(objs.size()):
            o[k] = objs[k]
        out.sort()
        return out

    def extents(self, const int32_t[::1] perm):
        """CSR (indptr, objects) of all extents, rows in the order of perm, each sorted.
        Built from the up-set of every object concept."""
        cdef Py_ssize_t n = self.ia.size(), pos, i
        cdef int32_t c, x, p
        cdef size_t k, m
        cdef I32Vec stack
        cdef I64Vec stamp, cnt, fill
        stamp.resize(n, -1)
        cnt.resize(n, 0)
        for c in range(n):
            m = self.own[c].size()
            if m == 0:
                continue
            stack.push_back(c)
            stamp[c] = c
            while stack.size():
                x = stack.back()
                stack.pop_back()
                cnt[x] += m
                for k in range(self.par[x].size()):
                    p = self.par[x][k]
                    if stamp[p] != c:
                        stamp[p] = c
                        stack.push_back(p)
        indptr = np.zeros(n + 1, dtype=np.int64)
        cdef int64_t[::1] ip = indptr
        fill.resize(n, 0)
        for pos in range(n):
            ip[pos + 1] = ip[pos] + cnt[perm[pos]]
            fill[perm[pos]] = ip[pos]
        objs = np.empty(ip[n], dtype=np.int64)
        cdef int64_t[::1] ov = objs
        for i in range(n):
            stamp[i] = -1
        for c in range(n):
            m = self.own[c].size()
            if m == 0:
                continue
            stack.push_back(c)
            stamp[c] = c
            while stack.size():
                x = stack.back()
                stack.pop_back()
                for k in range(m):
                    ov[fill[x]] = self.own[c][k]
                    fill[x] += 1
                for k in range(self.par[x].size()):
                    p = self.par[x][k]
                    if stamp[p] != c:
                        stamp[p] = c
                        stack.push_back(p)
        for pos in range(n):
            if ip[pos + 1] - ip[pos] > 1:
                cpp_sort(&ov[ip[pos]], &ov[0] + ip[pos + 1])
        return indptr, objs

    # -- serialization ----------------------------------------------------------------

    cdef dict _export_links(self, const int32_t[::1] perm, int64_t[::1] iv):
        """export()'s object and child arrays (concepts in the order of perm; iv its
        inverse, filled here)."""
        cdef Py_ssize_t n = self.ia.size(), pos, k, j, nn
        cdef int32_t c
        cdef int64_t nc = 0
        for pos in range(n):
            iv[perm[pos]] = pos
        for c in range(n):
            nc += self.chl[c].size()
        own_indptr, own_objects = self._objects_csr(&perm[0] if n else NULL, n)
        child_indptr = np.zeros(n + 1, dtype=np.int64)
        children = np.empty(nc, dtype=np.int64)
        cdef int64_t[::1] cip = child_indptr, cch = children
        for pos in range(n):
            c = perm[pos]
            j = cip[pos]
            nn = self.chl[c].size()
            for k in range(nn):
                cch[j + k] = iv[self.chl[c][k]]
            if nn > 1:
                cpp_sort(&cch[j], &cch[0] + j + nn)
            cip[pos + 1] = j + nn
        return {"own_indptr": own_indptr, "own_objects": own_objects, "child_indptr": child_indptr,
                "children": children}

    def export(self, const int32_t[::1] perm):
        """Arrays of the lattice with concepts in the order of perm (see lattice.py)."""
        cdef Py_ssize_t n = self.ia.size()
        if perm.shape[0] != n:
            raise ValueError("perm must list every concept once")
        inv = np.empty(n, dtype=np.int64)
        links = self._export_links(perm, inv)
        intent_indptr, intent_attrs, intent_weights = self._intents_csr(&perm[0] if n else NULL, n)
        return {"intent_indptr": intent_indptr, "intent_attrs": intent_attrs, "intent_weights": intent_weights,
                **links}

    def export_stored(self, const int32_t[::1] perm):
        """export()'s arrays with each intent as the results file keeps it: a parent listed
        before the concept (its upper neighbour with the longest intent, the first listed
        of equals; -1 where none lies within the concept's intent, never in a lattice) and
        the entries added to the parent's intent (attributes it lacks or holds with
        another weight).  Made from the concepts' own intents: the whole intents are never
        written out (real LULESH 216 x 1: 15.5 M entries, where the added ones are 174 K)."""
        cdef Py_ssize_t n = self.ia.size(), pos, k, i, j, ie, je
        cdef int32_t c, q, pc = -1
        cdef int64_t p, length, best
        cdef bint within
        cdef I64Vec parent, out_ptr, out_a, out_w
        if perm.shape[0] != n:
            raise ValueError("perm must list every concept once")
        inv = np.empty(n, dtype=np.int64)
        links = self._export_links(perm, inv)
        cdef int64_t[::1] iv = inv
        parent.assign(n, -1)
        out_ptr.push_back(0)
        for pos in range(n):
            c = perm[pos]
            best, p = -1, -1
            for k in range(<Py_ssize_t>self.par[c].size()):
                q = self.par[c][k]
                length = self.ia[q].size()
                if iv[q] < pos and (length > best or (length == best and iv[q] < p)):
                    best, p, pc = length, iv[q], q
            ie = self.ia[c].size()
            within = p >= 0
            if within:              # every entry of the parent's intent within the concept's?
                i, je = 0, self.ia[pc].size()
                for j in range(je):
                    while i < ie and self.ia[c][i] < self.ia[pc][j]:
                        i += 1
                    if not (i < ie and self.ia[c][i] == self.ia[pc][j] and self.iw[c][i] >= self.iw[pc][j]):
                        within = False
                        break
            if not within:
                for i in range(ie):
                    out_a.push_back(self.ia[c][i])
                    out_w.push_back(self.iw[c][i])
            else:
                parent[pos] = p
                j, je = 0, self.ia[pc].size()
                for i in range(ie):
                    while j < je and self.ia[pc][j] < self.ia[c][i]:
                        j += 1
                    if j < je and self.ia[pc][j] == self.ia[c][i] and self.iw[pc][j] == self.iw[c][i]:
                        continue
                    out_a.push_back(self.ia[c][i])
                    out_w.push_back(self.iw[c][i])
            out_ptr.push_back(<int64_t>out_a.size())
        return {"intent_parent": _i64_array(parent), "intent_added_indptr": _i64_array(out_ptr),
                "intent_added_attrs": _i64_array(out_a), "intent_added_weights": _i64_array(out_w), **links}

    def load(self, const int64_t[::1] intent_indptr, const int64_t[::1] intent_attrs,
             const int64_t[::1] intent_weights, const int64_t[::1] own_indptr,
             const int64_t[::1] own_objects, const int64_t[::1] child_indptr,
             const int64_t[::1] children, bint trusted=False):
        """Fill an empty core from export() arrays (any concept order).  ``trusted``
        (arrays this code exported, as between MPI ranks): the objects are not checked
        for repeats and the object map is built on the first query.  Returns TRIP_NONE,
        or TRIP_CONCEPTS (nothing loaded) for more concepts than max_concepts."""
        cdef Py_ssize_t n = intent_indptr.shape[0] - 1, c, k, s, e
        cdef int64_t t
        cdef I64Vec a, w
        cdef int32_t ch, nbottom = 0
        if self.ia.size():
            raise ValueError("load() needs an empty lattice")
        if n < 0 or own_indptr.shape[0] != n + 1 or child_indptr.shape[0] != n + 1:
            raise ValueError("lattice arrays: indptr lengths disagree")
        if n > self.max_concepts:
            self.trip = TRIP_CONCEPTS
            return TRIP_CONCEPTS
        for ip, data, name in ((intent_indptr, intent_attrs, "intent"),
                               (own_indptr, own_objects, "own"),
                               (child_indptr, children, "child")):
            if ip[0] != 0 or ip[n] != data.shape[0] or np.any(np.diff(np.asarray(ip)) < 0):
                raise ValueError(f"lattice arrays: bad {name}_indptr")
        if intent_weights.shape[0] != intent_attrs.shape[0]:
            raise ValueError("lattice arrays: intent_attrs and intent_weights differ in length")
        for c in range(n):
            s = intent_indptr[c]
            e = intent_indptr[c + 1]
            t = 0
            if e > s:
                _check_intent(&intent_attrs[s], &intent_weights[s], e - s, &t)
            a.resize(e - s)
            w.resize(e - s)
            for k in range(e - s):
                a[k] = intent_attrs[s + k]
                w[k] = intent_weights[s + k]
            if self._find(a.data(), w.data(), a.size(), t) >= 0:
                raise ValueError("lattice arrays: two concepts with the same intent")
            self.work += 1 + <int64_t>a.size()
            self.ia.push_back(a)
            self.iw.push_back(w)
            self.tot.push_back(t)
            self.par.push_back(I32Vec())
            self.chl.push_back(I32Vec())
            self.own.push_back(I64Vec())
            self.hval.push_back(0)
            self.hnext.push_back(-1)
            self._hash_insert(<int32_t>c)
        self.objc_stale = trusted
        for c in range(n):
            s = own_indptr[c]
            e = own_indptr[c + 1]
            if e > s and not trusted:
                self._check_new_objects(&own_objects[s], e - s)
            for k in range(s, e):
                self.own[c].push_back(own_objects[k])
                if not trusted:
                    self.objc[own_objects[k]] = <int32_t>c
            self.n_obj += e - s
            for k in range(child_indptr[c], child_indptr[c + 1]):
                if children[k] < 0 or children[k] >= n or children[k] == c:
                    raise ValueError("lattice arrays: bad cover edge")
                ch = <int32_t>children[k]
                if not self._c_leq_c(<int32_t>c, ch):
                    raise ValueError("lattice arrays: a cover edge contradicts the intents")
                self._link(<int32_t>c, ch)
        self.bottom = -1
        for c in range(n):
            if self.chl[c].size() == 0:
                self.bottom = <int32_t>c
                nbottom += 1
        if n and nbottom != 1:
            raise ValueError("lattice arrays: the lattice must have exactly one bottom")
        self._log_edges.clear()
        self.trip = TRIP_NONE
        self.version += 1
        return TRIP_NONE

    # -- Jaccard ----------------------------------------------------------------------

    def lca_inter(self, const int32_t[::1] cls, const int32_t[::1] topo, int method=0):
        """inter[i, j] = total weight of the intent of the least common ancestor (the
        lattice join) of concepts cls[i] and cls[j], found by walking the Hasse diagram.

        For each i the up-set U of cls[i] is marked.  The common ancestors of cls[i] and
        c are the marked part of c's up-set, and the least of them is the one with the
        largest intent weight.  Two walks find it, the cheaper one is taken per row:

        * climb from each cls[j] through unmarked concepts, stopping at marked ones, and
          keep the heaviest marked concept reached; or
        * one sweep over all concepts in a top-down order (topo: parents before
          children): best(c) = weight(c) for c in U, else the max of best over c's
          parents.  For c outside U the join with cls[i] lies above some parent p of c
          that is below the join, and join(cls[i], p) = join(cls[i], c); any other
          parent's join is more general (lighter), so the max picks it.

        method: 0 picks per row, 1 always climbs, 2 always sweeps."""
        cdef Py_ssize_t m = cls.shape[0], i, j, n = self.ia.size(), pos
        cdef int32_t x, p, ci, cj
        cdef int64_t k, e
        cdef I32Vec stack, pos_of, pptr, pidx, cpos
        cdef I64Vec mark, seen, best_of, upsize, tots
        cdef int64_t stamp = 0, best, climb_cost
        cdef int64_t sweep_cost
        if topo.shape[0] != n:
            raise ValueError("topo must list every concept once")
        out = np.empty((m, m), dtype=np.int64)
        cdef int64_t[:, ::1] o = out
        # the Hasse diagram renumbered by topo position, parents as one CSR
        pos_of.resize(n)
        for pos in range(n):
            pos_of[topo[pos]] = <int32_t>pos
        pptr.resize(n + 1, 0)
        tots.resize(n)
        for pos in range(n):
            x = topo[pos]
            pptr[pos + 1] = pptr[pos] + <int32_t>self.par[x].size()
            tots[pos] = self.tot[x]
        pidx.resize(pptr[n])
        for pos in range(n):
            x = topo[pos]
            for k in range(<int64_t>self.par[x].size()):
                pidx[pptr[pos] + k] = pos_of[self.par[x][k]]
        cpos.resize(m)
        for i in range(m):
            cpos[i] = pos_of[cls[i]]
        sweep_cost = n + pptr[n]
        mark.resize(n, -1)
        seen.resize(n, -1)
        best_of.resize(n, -1)
        upsize.resize(m + 1, 0)
        # up-set sizes of the classes (suffix sums): the cost bound of the climbs
        for i in range(m):
            ci = cpos[i]
            stamp += 1
            seen[ci] = stamp
            stack.push_back(ci)
            while stack.size():
                x = stack.back()
                stack.pop_back()
                upsize[i] += 1 + pptr[x + 1] - pptr[x]
                for k in range(pptr[x], pptr[x + 1]):
                    p = pidx[k]
                    if seen[p] != stamp:
                        seen[p] = stamp
                        stack.push_back(p)
        for i in range(m - 2, -1, -1):
            upsize[i] += upsize[i + 1]
        for i in range(m):
            ci = cpos[i]
            stack.push_back(ci)
            mark[ci] = i
            while stack.size():
                x = stack.back()
                stack.pop_back()
                for k in range(pptr[x], pptr[x + 1]):
                    p = pidx[k]
                    if mark[p] != i:
                        mark[p] = i
                        stack.push_back(p)
            o[i, i] = tots[ci]
            climb_cost = upsize[i + 1] if i + 1 < m else 0
            if method == 2 or (method == 0 and climb_cost > sweep_cost):
                e = 0                   # sweep only as far as the furthest class
                for j in range(i + 1, m):
                    if cpos[j] > e:
                        e = cpos[j]
                for pos in range(e + 1):
                    if mark[pos] == i:
                        best_of[pos] = tots[pos]
                    else:
                        best = -1
                        for k in range(pptr[pos], pptr[pos + 1]):
                            if best_of[pidx[k]] > best:
                                best = best_of[pidx[k]]
                        best_of[pos] = best
                for j in range(i + 1, m):
                    o[i, j] = best_of[cpos[j]]
                    o[j, i] = o[i, j]
                continue
            for j in range(i + 1, m):
                cj = cpos[j]
                if mark[cj] == i:
                    best = tots[cj]
                else:
                    best = -1
                    stamp += 1
                    seen[cj] = stamp
                    stack.push_back(cj)
                    while stack.size():
                        x = stack.back()
                        stack.pop_back()
                        for k in range(pptr[x], pptr[x + 1]):
                            p = pidx[k]
                            if seen[p] != stamp:
                                seen[p] = stamp
                                if mark[p] == i:
                                    if tots[p] > best:
                                        best = tots[p]
                                else:
                                    stack.push_back(p)
                o[i, j] = best
                o[j, i] = best
        return out


# ----------------------------------------------------------------------------------------
# rows in the canonical order of intents (the order a bounded lattice takes classes in)

def csr_canonical_order(const int64_t[::1] indptr, const int64_t[::1] indices,
                        const int64_t[::1] weights):
    """(perm, same): the CSR rows (sorted, unique attributes; positive weights) in the
    canonical order of intents (total weight, then the (attribute, weight) sequence; a
    stable merge sort), and same[k] = 1 where row perm[k] equals row perm[k - 1]."""
    cdef Py_ssize_t n = indptr.shape[0] - 1, k, r
    if n < 0 or indptr[n] != indices.shape[0] or weights.shape[0] != indices.shape[0]:
        raise ValueError("inconsistent CSR arrays (indptr, indices, weights)")
    tot = np.zeros(n, dtype=np.int64)
    cdef int64_t[::1] tv = tot
    for r in range(n):
        for k in range(indptr[r], indptr[r + 1]):
            tv[r] += weights[k]
    out = np.arange(n, dtype=np.int64)
    tmp = np.empty(n, dtype=np.int64)
    same = np.zeros(n, dtype=np.int8)
    if n == 0:
        return out, same.view(np.bool_)
    cdef int64_t[::1] a = out, b = tmp
    cdef int8_t[::1] sv = same
    cdef _CSRRows rows
    rows.indptr = &indptr[0]
    rows.ind = &indices[0] if indices.shape[0] else NULL
    rows.wt = &weights[0] if weights.shape[0] else NULL
    rows.tot = &tv[0]
    cdef int64_t *src = _merge_sort(&a[0], &b[0], n, &rows)
    for k in range(1, n):
        sv[k] = _order(&rows, src[k - 1], src[k]) == 0
    return (out if src == &a[0] else tmp), same.view(np.bool_)


def csr_first_equal(const int64_t[::1] indptr, const int64_t[::1] indices,
                    const int64_t[::1] weights):
    """Per CSR row, the first row (lowest index) with the same indices and weights: one
    hash per row, rows of equal hash compared entry by entry (linear in the entries)."""
    cdef Py_ssize_t n = indptr.shape[0] - 1, r, q, k, na
    cdef uint64_t h
    cdef int64_t cand
    cdef bint same
    cdef unordered_map[uint64_t, int64_t] head
    cdef unordered_map[uint64_t, int64_t].iterator it
    if n < 0 or indptr[n] != indices.shape[0] or weights.shape[0] != indices.shape[0]:
        raise ValueError("inconsistent CSR arrays (indptr, indices, weights)")
    cdef const int64_t* ind = &indices[0] if indices.shape[0] else NULL
    cdef const int64_t* wt = &weights[0] if weights.shape[0] else NULL
    first = np.empty(n, dtype=np.int64)
    nxt = np.full(n, -1, dtype=np.int64)        # the next first-row of the same hash
    cdef int64_t[::1] fv = first, nv = nxt
    head.reserve(n)
    for r in range(n):
        na = indptr[r + 1] - indptr[r]
        h = _hash(ind + indptr[r], wt + indptr[r], na)
        it = head.find(h)
        fv[r] = r
        if it == head.end():
            head[h] = r
            continue
        cand = deref(it).second
        while True:
            same = indptr[cand + 1] - indptr[cand] == na
            if same:
                for k in range(na):
                    q = indptr[cand] + k
                    if ind[q] != ind[indptr[r] + k] or wt[q] != wt[indptr[r] + k]:
                        same = False
                        break
            if same:
                fv[r] = cand
                break
            if nv[cand] < 0:
                nv[cand] = r                    # a collision: r starts its own class
                break
            cand = nv[cand]
    return first


def csr_before(const int64_t[::1] indptr, const int64_t[::1] indices,
               const int64_t[::1] weights, const int64_t[::1] key_attrs,
               const int64_t[::1] key_weights):
    """Per CSR row, whether its intent comes before the key intent in the canonical order."""
    cdef Py_ssize_t n = indptr.shape[0] - 1, r, k
    cdef int64_t t, kt = 0
    cdef const int64_t* ind = &indices[0] if indices.shape[0] else NULL
    cdef const int64_t* wt = &weights[0] if weights.shape[0] else NULL
    cdef const int64_t* ka = &key_attrs[0] if key_attrs.shape[0] else NULL
    cdef const int64_t* kw = &key_weights[0] if key_weights.shape[0] else NULL
    for k in range(key_weights.shape[0]):
        kt += key_weights[k]
    out = np.zeros(n, dtype=np.bool_)
    cdef char[::1] o = out.view(np.int8)
    for r in range(n):
        t = 0
        for k in range(indptr[r], indptr[r + 1]):
            t += weights[k]
        o[r] = _cmp_raw(ind + indptr[r], wt + indptr[r], indptr[r + 1] - indptr[r], t,
                        ka, kw, key_attrs.shape[0], kt) < 0
    return out


# ----------------------------------------------------------------------------------------
# direct path

def csr_min_sums(const int64_t[::1] indptr, const int64_t[::1] indices,
                 const int64_t[::1] weights):
    """inter[i, j] = sum over common attributes of min(weight_i, weight_j), rows sorted."""
    cdef Py_ssize_t m = indptr.shape[0] - 1, i, j
    cdef int64_t si, ei, sj, ej, t
    out = np.empty((m, m), dtype=np.int64)
    cdef int64_t[:, ::1] o = out
    cdef const int64_t* ind = &indices[0] if indices.shape[0] else NULL
    cdef const int64_t* wt = &weights[0] if weights.shape[0] else NULL
    with nogil:
        for i in range(m):
            si = indptr[i]
            ei = indptr[i + 1]
            t = 0
            for j in range(si, ei):
                t += wt[j]
            o[i, i] = t
            for j in range(i + 1, m):
                sj = indptr[j]
                ej = indptr[j + 1]
                t = _min_sum(ind + si, wt + si, ei - si, ind + sj, wt + sj, ej - sj)
                o[i, j] = t
                o[j, i] = t
    return out


def csr_min_sums_rows(const int64_t[::1] indptr, const int64_t[::1] indices,
                      const int64_t[::1] weights, Py_ssize_t lo, Py_ssize_t hi):
    """Rows lo..hi-1 of csr_min_sums: out[r, j] = inter[lo + r, j] (a row block, so that
    ranks can share one big class x class matrix)."""
    cdef Py_ssize_t m = indptr.shape[0] - 1, i, j
    if lo < 0 or hi > m or lo > hi:
        raise ValueError("row block outside the matrix")
    out = np.empty((hi - lo, m), dtype=np.int64)
    cdef int64_t[:, ::1] o = out
    cdef const int64_t* ind = &indices[0] if indices.shape[0] else NULL
    cdef const int64_t* wt = &weights[0] if weights.shape[0] else NULL
    cdef int64_t si, ei, sj, ej
    with nogil:
        for i in range(lo, hi):
            si = indptr[i]
            ei = indptr[i + 1]
            for j in range(m):
                sj = indptr[j]
                ej = indptr[j + 1]
                o[i - lo, j] = _min_sum(ind + si, wt + si, ei - si, ind + sj, wt + sj, ej - sj)
    return out


def check_csr_rows(const int64_t[::1] indptr, const int64_t[::1] indices,
                   const int64_t[::1] weights):
    """0 if every row is sorted and unique with positive weights, 1 if only the sorting
    is wrong; raises ValueError on non-positive weights or bad indptr."""
    cdef Py_ssize_t m = indptr.shape[0] - 1, r, k
    cdef int unsorted = 0
    if m < 0 or indptr[0] != 0 or indptr[m] != indices.shape[0] \
            or weights.shape[0] != indices.shape[0]:
        raise ValueError("inconsistent CSR arrays (indptr, indices, weights)")
    for r in range(m):
        if indptr[r + 1] < indptr[r]:
            raise ValueError("indptr must be non-decreasing")
        for k in range(indptr[r], indptr[r + 1]):
            if weights[k] <= 0:
                raise ValueError(f"row {r}: attribute {indices[k]} has weight {weights[k]}; "
                                 "weights must be positive integers")
            if k > indptr[r] and indices[k] <= indices[k - 1]:
                unsorted = 1
    return unsorted


ctypedef fused exact_sums:
    int64_t
    float


def jaccard_from_inter(const exact_sums[:, ::1] inter, const int64_t[::1] w, Py_ssize_t lo=0, out=None,
                       Py_ssize_t col_lo=0):
    """J[i, j] = inter / (w_i + w_j - inter) from exact integer sums (int64, or float32
    holding integers below 2^24), one float64 division each; 1.0 where the union is empty.
    ``inter`` holds rows lo..lo+h-1 and columns col_lo..col_lo+m-1 of the intersection
    matrix (all of it by default); ``out`` (h x len(w) float64, whole rows), if given,
    receives the result in its columns col_lo.. (returned: out, or a new h x m array).
    The one place every Jaccard path divides: both sum types, every row blocking and the
    triangle path give the same bits (w_i + w_j == w_j + w_i exactly in doubles)."""
    cdef Py_ssize_t h = inter.shape[0], m = inter.shape[1], n = w.shape[0], i, j
    cdef double p, u, wi, empty
    if lo < 0 or col_lo < 0 or lo + h > n or col_lo + m != n:
        raise ValueError("inter must be rows lo..lo+h-1 and columns col_lo..len(w)-1 "
                         "of the len(w) x len(w) intersection matrix")
    cdef Py_ssize_t skip = col_lo
    if out is None:
        out = np.empty((h, m), dtype=np.float64)
        skip = 0
    cdef double[:, ::1] o = out
    if o.shape[0] != h or o.shape[1] != skip + m:
        raise ValueError("out must have inter's rows and len(w) columns")
    cdef const int64_t[::1] wc = w[col_lo:]
    with nogil:
        for i in range(h):
            wi = <double>w[lo + i]
            for j in range(m):
                # doubles hold these integers exactly (< 2^53); branch-free so the loop
                # vectorises: an empty union has inter = 0, and (0 + 1) / (0 + 1) = 1.0
                p = <double>inter[i, j]
                u = wi + <double>wc[j] - p
                empty = u == 0.0
                o[i, skip + j] = (p + empty) / (u + empty)
    return out


MIRROR_TILE = 64


def mirror_upper(double[:, ::1] a):
    """a[j, i] = a[i, j] for j > i: fill the lower triangle of a square matrix from its
    upper one, in square tiles so both the reads and the transposed writes stay in cache."""
    cdef Py_ssize_t n = a.shape[0], t = MIRROR_TILE, nt, bi, bj, ti, tj, i, j, i_end, j_end
    if a.shape[1] != n:
        raise ValueError("mirror_upper needs a square matrix")
    nt = (n + t - 1) // t
    with nogil:
        for bi in range(nt):
            ti = bi * t
            i_end = min(ti + t, n)
            for bj in range(bi, nt):
                tj = bj * t
                j_end = min(tj + t, n)
                for i in range(ti, i_end):
                    for j in range(max(tj, i + 1), j_end):
                        a[j, i] = a[i, j]


# ----------------------------------------------------------------------------------------
# intents as stored: each concept's entries beyond one parent's (results layout 5)

INTENTS_OK = 0
INTENTS_BAD = 1         # a child or parent index out of range, a parent after its child, rows not sorted
INTENTS_TOO_BIG = 2     # the whole intents would exceed the entries allowed


cdef object _i64_array(I64Vec& v):
    return np.asarray(<int64_t[:v.size()]> v.data()).copy() if v.size() else np.empty(0, dtype=np.int64)


def intents_whole(const int64_t[::1] parent, const int64_t[::1] added_indptr, const int64_t[::1] added_attrs,
                  const int64_t[::1] added_weights, int64_t max_entries):
    """The inverse of ``LatticeCore.export_stored``: each concept's intent is its parent's (listed
    before it) with the added entries put in (an added attribute's weight replaces the
    parent's).  Returns (status, indptr, attrs, weights); INTENTS_TOO_BIG past
    ``max_entries`` entries in all (a damaged file could ask for far more than memory)."""
    cdef Py_ssize_t n = parent.shape[0], c, i, ie, j, je
    cdef int64_t p, x, y
    cdef I64Vec ptr, a, w
    if added_indptr.shape[0] != n + 1 or added_attrs.shape[0] != added_weights.shape[0] \
            or (n >= 0 and (added_indptr[0] != 0 or added_indptr[n] != added_attrs.shape[0])):
        return INTENTS_BAD, None, None, None
    ptr.push_back(0)
    for c in range(n):
        p = parent[c]
        i, ie = added_indptr[c], added_indptr[c + 1]
        if p < -1 or p >= c or ie < i or ie > added_attrs.shape[0]:
            return INTENTS_BAD, None, None, None
        for j in range(i + 1, ie):
            if added_attrs[j] <= added_attrs[j - 1]:
                return INTENTS_BAD, None, None, None
        j = je = 0
        if p >= 0:
            j, je = ptr[p], ptr[p + 1]
        if <int64_t>a.size() + (je - j) + (ie - i) > max_entries:
            return INTENTS_TOO_BIG, None, None, None
        while i < ie or j < je:
            if j >= je or (i < ie and added_attrs[i] <= a[j]):
                if j < je and added_attrs[i] == a[j]:
                    j += 1              # the added weight replaces the parent's
                a.push_back(added_attrs[i])
                w.push_back(added_weights[i])
                i += 1
            else:
                x, y = a[j], w[j]       # (copied first: the push may move the vector)
                a.push_back(x)
                w.push_back(y)
                j += 1
        ptr.push_back(<int64_t>a.size())
    return INTENTS_OK, _i64_array(ptr), _i64_array(a), _i64_array(w)
