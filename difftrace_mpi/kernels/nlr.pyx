# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# distutils: language = c++
"""Nested loop recognition (DiffTrace Procedure 1) and event-stream helpers.

An NLR element is a pair (id, count).  id >= 0 is a function (count is 1); id < 0 is the
loop ``-id - 1`` of a LoopTable (count >= 2 iterations).  Two elements are equal when both
id and count are equal, so ``L1^3`` and ``L1^4`` differ, as in the original DiffTrace.

Reduce step, run after every push and restarted after every change, for i = 2 .. 3K-1:
  * when i is a multiple of 3 (b = i/3) and the top three b-long blocks are equal, they
    become one loop (body = one block, count 3; bodies of new loops are at most K-1 long);
  * when ``known_pairs`` is on, i is even (b = i/2 <= K-1), the top two b-long blocks are
    equal and their body is a loop body known before this pass, they become that loop with
    count 2 (the paper's cross-trace use of the loop table: Table III's ``L0^2``);
  * when i <= K+1 and the i-th element from the top is a loop whose body equals the top
    i-1 elements, those are popped and the loop's count grows by one.
No bottom-of-stack flushing: the stack is the output, so the result is exact.
"""
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libcpp.vector cimport vector
from libcpp.utility cimport pair
from libcpp.algorithm cimport sort
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memcmp, memset
from cpython.bytes cimport PyBytes_FromStringAndSize

import numpy as np

# how a run's events are held: int32 ids, or uint16 where the run's names fit (half the memory)
ctypedef fused stored_event:
    int32_t
    uint16_t


cdef extern from *:
    """
    #include <stdint.h>
    #if defined(__SSE2__)
    #include <emmintrin.h>
    #endif
    static inline int dt_ctz64(unsigned long long x) { return __builtin_ctzll(x); }

    /* The 32-bit tag of a packed element: equal elements have equal tags (the scan
       compares tags, four at a time; a tag match is confirmed on the elements). */
    static inline uint32_t dt_tag(uint64_t e) {
        return (uint32_t)e ^ ((uint32_t)(e >> 32) * 0x9E3779B1u);
    }

    static inline int dt_same(const uint64_t *a, const uint64_t *b, int64_t m) {
        for (int64_t k = 0; k < m; k++)
            if (a[k] != b[k]) return 0;
        return 1;
    }

    static const uint8_t dt_rev4[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};

    static inline uint32_t dt_rev16(uint32_t x) {
        x = ((x >> 1) & 0x5555u) | ((x & 0x5555u) << 1);
        x = ((x >> 2) & 0x3333u) | ((x & 0x3333u) << 2);
        x = ((x >> 4) & 0x0F0Fu) | ((x & 0x0F0Fu) << 4);
        x = ((x >> 8) & 0x00FFu) | ((x & 0x00FFu) << 8);
        return x;
    }

    /* One reduce round's scan of the jmax (<= 32) elements under the top ``top``:
       bit j of *eq: tg[top - j] == tg[top] (a tag match, to be confirmed); bit j of *lm:
       ln[top - j] == j.  Reads up to 16 entries below top - jmax: the arrays are padded. */
    static inline void dt_scan(const uint32_t *tg, const uint8_t *ln, int64_t top, int jmax,
                               uint64_t *eq, uint64_t *lm) {
        uint64_t e = 0, l = 0;
        uint64_t keep = (2ULL << jmax) - 2;          /* bits 1..jmax */
    #if defined(__SSE2__)
        __m128i t = _mm_set1_epi32((int)tg[top]);
        __m128i depth = _mm_setr_epi8(16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1);
        for (int g = 0; 4 * g < jmax; g++) {
            __m128i v = _mm_loadu_si128((const __m128i *)(tg + top - 4 * g - 4));
            int m = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(v, t)));
            e |= (uint64_t)dt_rev4[m] << (4 * g + 1);
        }
        for (int g = 0; 16 * g < jmax; g++) {
            __m128i v = _mm_loadu_si128((const __m128i *)(ln + top - 16 * g - 16));
            int m = _mm_movemask_epi8(_mm_cmpeq_epi8(v, depth));
            l |= (uint64_t)dt_rev16((uint32_t)m) << (16 * g + 1);
            depth = _mm_add_epi8(depth, _mm_set1_epi8(16));
        }
    #else
        uint32_t t = tg[top];
        for (int j = 1; j <= jmax; j++) {
            e |= (uint64_t)(tg[top - j] == t) << j;
            l |= (uint64_t)(ln[top - j] == j) << j;
        }
    #endif
        *eq = e & keep;
        *lm = l & keep;
    }

    /* Period runs (K <= 17): row ``top`` of R (16 bytes per stack position; lane a is the
       period b = 16 - a) is the length, capped at 32, of the run of positions q <= top with
       tg[q] == tg[q - b], from row top - 1 (the tests below need runs up to 2b <= 32 only;
       the cap makes a row a function of the 48 tags up to its own: _Memo stores rows).
       Returns the periods whose run is >= b (*s1: two equal blocks of b on top) and >= 2b
       (*s0: three), as bits b.  Tag runs: a bit
       is to be confirmed on the elements.  Reads 16 tags and a row below top: padded. */
    static inline void dt_runs(const uint32_t *tg, uint8_t *R, int64_t top, uint64_t *s1, uint64_t *s0) {
    #if defined(__SSE2__)
        __m128i t = _mm_set1_epi32((int)tg[top]);
        const uint32_t *base = tg + top - 16;
        __m128i c0 = _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(base)), t);
        __m128i c1 = _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(base + 4)), t);
        __m128i c2 = _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(base + 8)), t);
        __m128i c3 = _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(base + 12)), t);
        __m128i eqb = _mm_packs_epi16(_mm_packs_epi32(c0, c1), _mm_packs_epi32(c2, c3));
        __m128i prev = _mm_loadu_si128((const __m128i *)(R + 16 * (top - 1)));
        __m128i r = _mm_and_si128(_mm_min_epu8(_mm_adds_epu8(prev, _mm_set1_epi8(1)), _mm_set1_epi8(32)), eqb);
        _mm_storeu_si128((__m128i *)(R + 16 * top), r);
        const __m128i thr1 = _mm_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
        const __m128i thr0 = _mm_setr_epi8(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
        uint32_t m1 = (uint32_t)_mm_movemask_epi8(_mm_cmpgt_epi8(r, thr1));
        if (m1 == 0) {            /* the common case: no two equal blocks on top */
            *s1 = 0;
            *s0 = 0;
            return;
        }
        *s1 = (uint64_t)dt_rev16(m1) << 1;
        *s0 = (uint64_t)dt_rev16((uint32_t)_mm_movemask_epi8(_mm_cmpgt_epi8(r, thr0))) << 1;
    #else
        uint64_t a1 = 0, a0 = 0;
        for (int a = 0; a < 16; a++) {
            int b = 16 - a;
            int v = R[16 * (top - 1) + a] + 1;
            if (v > 32) v = 32;
            if (tg[top - b] != tg[top]) v = 0;
            R[16 * top + a] = (uint8_t)v;
            if (v >= b) a1 |= 1ULL << b;
            if (v >= 2 * b) a0 |= 1ULL << b;
        }
        *s1 = a1;
        *s0 = a0;
    #endif
    }

    /* bit j of the result: ln[top - j] == j, for j <= jmax (<= 32) */
    static inline uint64_t dt_loops(const uint8_t *ln, int64_t top, int jmax) {
        uint64_t l = 0;
    #if defined(__SSE2__)
        __m128i depth = _mm_setr_epi8(16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1);
        for (int g = 0; 16 * g < jmax; g++) {
            __m128i v = _mm_loadu_si128((const __m128i *)(ln + top - 16 * g - 16));
            int m = _mm_movemask_epi8(_mm_cmpeq_epi8(v, depth));
            if (m)
                l |= (uint64_t)dt_rev16((uint32_t)m) << (16 * g + 1);
            depth = _mm_add_epi8(depth, _mm_set1_epi8(16));
        }
    #else
        for (int j = 1; j <= jmax; j++)
            l |= (uint64_t)(ln[top - j] == j) << j;
    #endif
        return l & ((2ULL << jmax) - 2);
    }
    """
    int dt_ctz64(unsigned long long x) noexcept nogil
    uint32_t dt_tag(uint64_t e) noexcept nogil
    int dt_same(const uint64_t *a, const uint64_t *b, int64_t m) noexcept nogil
    void dt_scan(const uint32_t *tg, const uint8_t *ln, int64_t top, int jmax, uint64_t *eq, uint64_t *lm) noexcept nogil
    void dt_runs(const uint32_t *tg, uint8_t *R, int64_t top, uint64_t *s1, uint64_t *s0) noexcept nogil
    uint64_t dt_loops(const uint8_t *ln, int64_t top, int jmax) noexcept nogil

# ---- packed stack elements (fast kernel) -------------------------------------------------
# One uint64 per NLR element: the id as int32 in the low half, the count (uint32) in the
# high half, so element equality is one compare and a block compare is a memcmp.

cdef inline uint64_t _pack(int64_t i, int64_t c) noexcept nogil:
    return (<uint64_t> <uint32_t> <int32_t> i) | ((<uint64_t> c) << 32)


cdef inline int64_t _unpack_id(uint64_t e) noexcept nogil:
    return <int64_t> <int32_t> <uint32_t> (e & 0xFFFFFFFFULL)


cdef inline int64_t _unpack_cnt(uint64_t e) noexcept nogil:
    return <int64_t> (e >> 32)


cdef inline uint64_t _hash_body(const uint64_t *body, int64_t b) noexcept nogil:
    cdef uint64_t h = 0x9E3779B97F4A7C15ULL ^ <uint64_t> b
    cdef int64_t j
    for j in range(b):
        h = (h ^ body[j]) * 0xBF58476D1CE4E5B9ULL
        h ^= h >> 31
    return h


cdef class LoopTable:
    """Append-only table of loop bodies; a body's index is its (provisional) loop number.

    Bodies are stored flat (ids and counts) so the kernel reads them without Python objects;
    ``index`` maps the raw bytes of a body to its number, used only when a loop is created.
    """
    cdef int64_t *start
    cdef int64_t *length
    cdef uint8_t *known
    cdef int64_t *ids
    cdef int64_t *cnts
    cdef int64_t n, cap, flat_n, flat_cap
    cdef dict index
    # the fast kernel's view: every body packed (one uint64 per element, see _pack) and
    # an open-addressing index over those (body hash -> loop), so neither loop lookups
    # nor creations need Python objects; ``packable`` turns off when an element does not
    # fit (an id beyond int32 or a count beyond uint32: the reference kernel runs then)
    cdef uint64_t *pk
    cdef uint64_t *hsh
    cdef int64_t *slots
    cdef uint64_t slot_mask
    cdef bint packable
    cdef object memo            # the fast kernel's _Memo for this table (None: none yet)

    def __cinit__(self):
        self.n = 0
        self.cap = 16
        self.flat_n = 0
        self.flat_cap = 64
        self.start = <int64_t *> malloc(self.cap * sizeof(int64_t))
        self.length = <int64_t *> malloc(self.cap * sizeof(int64_t))
        self.known = <uint8_t *> malloc(self.cap * sizeof(uint8_t))
        self.ids = <int64_t *> malloc(self.flat_cap * sizeof(int64_t))
        self.cnts = <int64_t *> malloc(self.flat_cap * sizeof(int64_t))
        self.pk = <uint64_t *> malloc(self.flat_cap * sizeof(uint64_t))
        self.hsh = <uint64_t *> malloc(self.cap * sizeof(uint64_t))
        self.slots = <int64_t *> malloc(64 * sizeof(int64_t))
        self.slot_mask = 63
        self.packable = True
        if not (self.start and self.length and self.known and self.ids and self.cnts and self.pk
                and self.hsh and self.slots):
            raise MemoryError()
        memset(self.slots, 0xFF, 64 * sizeof(int64_t))
        self.index = {}
        self.memo = None

    def __dealloc__(self):
        free(self.start)
        free(self.length)
        free(self.known)
        free(self.ids)
        free(self.cnts)
        free(self.pk)
        free(self.hsh)
        free(self.slots)

    def __len__(self):
        return self.n

    cdef int64_t _add(self, int64_t *ids, int64_t *cnts, int64_t b, object key, uint8_t known) except -1:
        cdef int64_t loop = self.n
        cdef int64_t j, s
        cdef uint64_t h
        if self.n == self.cap:
            self.cap *= 2
            self.start = <int64_t *> realloc(self.start, self.cap * sizeof(int64_t))
            self.length = <int64_t *> realloc(self.length, self.cap * sizeof(int64_t))
            self.known = <uint8_t *> realloc(self.known, self.cap * sizeof(uint8_t))
            self.hsh = <uint64_t *> realloc(self.hsh, self.cap * sizeof(uint64_t))
            if not (self.start and self.length and self.known and self.hsh):
                raise MemoryError()
        while self.flat_n + b > self.flat_cap:
            self.flat_cap *= 2
            self.ids = <int64_t *> realloc(self.ids, self.flat_cap * sizeof(int64_t))
            self.cnts = <int64_t *> realloc(self.cnts, self.flat_cap * sizeof(int64_t))
            self.pk = <uint64_t *> realloc(self.pk, self.flat_cap * sizeof(uint64_t))
            if not (self.ids and self.cnts and self.pk):
                raise MemoryError()
        memcpy(self.ids + self.flat_n, ids, b * sizeof(int64_t))
        memcpy(self.cnts + self.flat_n, cnts, b * sizeof(int64_t))
        for j in range(b):
            if ids[j] < -2147483648 or ids[j] > 2147483647 or cnts[j] < 0 or cnts[j] > 4294967295:
                self.packable = False
            self.pk[self.flat_n + j] = _pack(ids[j], cnts[j])
        self.start[loop] = self.flat_n
        self.length[loop] = b
        self.known[loop] = known
        h = _hash_body(self.pk + self.flat_n, b)
        self.hsh[loop] = h
        self.flat_n += b
        self.n += 1
        self.index[key] = loop
        if 2 * self.n > <int64_t> self.slot_mask:     # keep the load under one half
            free(self.slots)
            self.slot_mask = 2 * self.slot_mask + 1
            self.slots = <int64_t *> malloc((self.slot_mask + 1) * sizeof(int64_t))
            if not self.slots:
                raise MemoryError()
            memset(self.slots, 0xFF, (self.slot_mask + 1) * sizeof(int64_t))
            for j in range(self.n):
                self._slot_insert(j)
        else:
            self._slot_insert(loop)
        return loop

    cdef inline void _slot_insert(self, int64_t loop) noexcept nogil:
        cdef uint64_t s = self.hsh[loop] & self.slot_mask
        while self.slots[s] != -1:
            s = (s + 1) & self.slot_mask
        self.slots[s] = loop

    cdef inline int64_t _find(self, const uint64_t *body, int64_t b, uint64_t h) noexcept nogil:
        """Loop number of the packed body ``body`` (``b`` elements, hash ``h``), or -1."""
        cdef uint64_t s = h & self.slot_mask
        cdef int64_t loop
        while True:
            loop = self.slots[s]
            if loop == -1:
                return -1
            if self.hsh[loop] == h and self.length[loop] == b \
                    and dt_same(self.pk + self.start[loop], body, b):
                return loop
            s = (s + 1) & self.slot_mask

    cdef int64_t _add_packed(self, const uint64_t *body, int64_t b) except -1:
        """Add a new packed body (not in the table yet); returns its number."""
        cdef vector[int64_t] flat = vector[int64_t](2 * b)
        cdef int64_t j
        for j in range(b):
            flat[j] = _unpack_id(body[j])
            flat[b + j] = _unpack_cnt(body[j])
        return self._add(&flat[0], &flat[b], b, self._key(&flat[0], &flat[b], b), 0)

    cdef object _key(self, int64_t *ids, int64_t *cnts, int64_t b):
        cdef bytes k = PyBytes_FromStringAndSize(<char *> ids, b * sizeof(int64_t))
        return k + PyBytes_FromStringAndSize(<char *> cnts, b * sizeof(int64_t))

    cdef int64_t _lookup(self, int64_t *ids, int64_t *cnts, int64_t b):
        """Loop number of this body, or -1."""
        return self.index.get(self._key(ids, cnts, b), -1)

    cdef int64_t _lookup_or_add(self, int64_t *ids, int64_t *cnts, int64_t b) except -1:
        key = self._key(ids, cnts, b)
        found = self.index.get(key)
        if found is not None:
            return found
        return self._add(ids, cnts, b, key, 0)

    def add_body(self, ids, counts, bint known=False):
        """Add a body (element ids and counts; loops as -(number+1)); returns its number."""
        cdef int64_t[::1] i = np.ascontiguousarray(ids, dtype=np.int64)
        cdef int64_t[::1] c = np.ascontiguousarray(counts, dtype=np.int64)
        cdef int64_t b = i.shape[0]
        if b == 0 or c.shape[0] != b:
            raise ValueError("a loop body needs one or more elements, ids and counts alike")
        self.memo = None        # what a chunk did may depend on the known flags
        existing = self._lookup(&i[0], &c[0], b)
        if existing >= 0:
            if known:
                self.known[existing] = 1
            return existing
        return self._add(&i[0], &c[0], b, self._key(&i[0], &c[0], b), known)

    def body(self, int64_t loop):
        """(ids, counts) of loop ``loop`` as int64 arrays."""
        if loop < 0 or loop >= self.n:
            raise IndexError(loop)
        cdef int64_t s = self.start[loop], b = self.length[loop]
        ids = np.empty(b, dtype=np.int64)
        cnts = np.empty(b, dtype=np.int64)
        cdef int64_t[::1] iv = ids, cv = cnts
        memcpy(&iv[0], self.ids + s, b * sizeof(int64_t))
        memcpy(&cv[0], self.cnts + s, b * sizeof(int64_t))
        return ids, cnts

    def memo_stats(self):
        """The chunk memo's counters (None: no memo yet)."""
        return None if self.memo is None else self.memo.stats()

    def drop_memo(self):
        """Free the chunk memo (up to its cap in memory) once no more sequences come."""
        self.memo = None

    def is_known(self, int64_t loop):
        return bool(self.known[loop])

    def holds(self, bytes key):
        """Whether the body named by a bytes key (its int64 ids, then its int64 counts: the
        form of ``nlr``'s recorded pairs) is in the table."""
        return key in self.index


cdef inline bint _blocks_equal(int64_t *ids, int64_t *cnts, int64_t a, int64_t b, int64_t n) nogil:
    """Elements a..a+n-1 equal elements b..b+n-1."""
    cdef int64_t j
    for j in range(n):
        if ids[a + j] != ids[b + j] or cnts[a + j] != cnts[b + j]:
            return False
    return True


ctypedef fused event_ids:
    int32_t      # what the filters produce: read as is, no int64 copy of every trace
    int64_t


cdef void _settle_pairs(vector[int64_t] &ends, vector[int64_t] &widths, list keys, set pairs_seen,
                        int64_t q, int64_t b, object body) except *:
    """A reduction rewrote the stack from index ``q`` up: every pending pair ending above
    ``q`` is settled.  The pair that three blocks of width ``b`` with the same body turn
    into a loop at ``q`` is healed (a second pass would have made the same loop from it);
    the others go to ``pairs_seen``."""
    cdef int64_t end, width
    while ends.size() > 0 and ends.back() > q:
        end, width = ends.back(), widths.back()
        key = keys.pop()
        ends.pop_back()
        widths.pop_back()
        if not (body is not None and width == b and end == q + 2 * b and key == body):
            pairs_seen.add(key)


def nlr_reference(const event_ids[::1] seq, int K, LoopTable table, bint known_pairs=False, set pairs_seen=None,
                  Py_ssize_t start=0, tuple stack=None, snapshots=None, scratch=None):
    """``nlr`` as first written (``scratch`` is accepted and unused, so the two are
    interchangeable) (separate int64 id and count stacks, bytes keys and Python
    dicts for bodies): what ``nlr`` runs where its fast form does not apply (K > 22, ids
    beyond int32), and the second implementation the tests hold the fast one to.

    Its arguments and results are those of ``nlr`` (see there).
    """
    if K < 2:
        raise ValueError("K must be at least 2")
    cdef bint record_pairs = pairs_seen is not None and not known_pairs
    cdef bint try_pairs = known_pairs or record_pairs
    cdef Py_ssize_t n_in = seq.shape[0]
    if start < 0 or start > n_in or (start > 0 and stack is None):
        raise ValueError(f"cannot resume at {start} of {n_in} events without the state there")
    # pairs recorded but not settled yet: where they end on the stack, their width, body
    cdef vector[int64_t] pend_ends, pend_widths
    pend_keys = []
    if stack is not None and len(stack) > 3 and record_pairs:
        for end, width, key in stack[3]:
            pend_ends.push_back(end)
            pend_widths.push_back(width)
            pend_keys.append(key)
    cdef int64_t[::1] start_ids = np.ascontiguousarray(stack[0] if stack else [], dtype=np.int64)
    cdef int64_t[::1] start_cnts = np.ascontiguousarray(stack[1] if stack else [], dtype=np.int64)
    cdef Py_ssize_t n_start = start_ids.shape[0]
    out_ids = np.empty(max(n_in - start + n_start, 1), dtype=np.int64)
    out_cnts = np.empty(max(n_in - start + n_start, 1), dtype=np.int64)
    cdef int64_t[::1] vi = out_ids, vc = out_cnts
    cdef int64_t *ids = &vi[0]
    cdef int64_t *cnts = &vc[0]
    cdef int64_t n = n_start          # stack height
    cdef Py_ssize_t p
    wanted = sorted(set(int(x) for x in snapshots)) if snapshots is not None else []
    if wanted and (wanted[0] < start or max(wanted) > n_in):
        raise ValueError(f"snapshots outside [{start}, {n_in}]")
    states = {}
    cdef Py_ssize_t next_snapshot = wanted[0] if wanted else -1, k_snapshot = 0
    if n_start:
        memcpy(ids, &start_ids[0], n_start * sizeof(int64_t))
        memcpy(cnts, &start_cnts[0], n_start * sizeof(int64_t))
    cdef int64_t b, e, loop, top_id, top_cnt, j, s0, jmax, c, best, i
    cdef bint changed, same
    # the table's flat arrays, re-read after every table change (realloc may move them)
    cdef int64_t *t_start = table.start
    cdef int64_t *t_len = table.length
    cdef int64_t *t_ids = table.ids
    cdef int64_t *t_cnts = table.cnts
    # Candidate reductions of one reduce round, as (i, kind) with kind 0 = three equal
    # blocks, 1 = two blocks of a known body, 2 = loop extension.  Procedure 1 tries i
    # ascending and, at one i, the kinds in that order; every reduction at i needs a
    # cheap precondition on the element j = i/3, i/2 or i-1 below the top, so one scan of
    # the K elements under the top finds all candidates and only they are checked fully.
    cdef int64_t cap = 3 * K + 3, nc
    cand_i_arr = np.empty(cap, dtype=np.int64)
    cand_k_arr = np.empty(cap, dtype=np.int64)
    cdef int64_t[::1] cand_i = cand_i_arr, cand_k = cand_k_arr
    for p in range(start, n_in + 1):
        if p == next_snapshot:
            states[p] = (out_ids[:n].copy(), out_cnts[:n].copy(),
                         set(pairs_seen) if pairs_seen is not None else None,
                         [(pend_ends[c], pend_widths[c], pend_keys[c]) for c in range(<Py_ssize_t> pend_ends.size())])
            k_snapshot += 1
            next_snapshot = wanted[k_snapshot] if k_snapshot < len(wanted) else -1
        if p == n_in:
            break
        if seq[p] < 0:
            raise ValueError("function ids must be >= 0")
        ids[n] = seq[p]
        cnts[n] = 1
        n += 1
        changed = True
        while changed:
            changed = False
            top_id = ids[n - 1]
            top_cnt = cnts[n - 1]
            nc = 0
            jmax = K if K < n - 1 else n - 1
            for j in range(1, jmax + 1):
                e = ids[n - 1 - j]
                if e == top_id and cnts[n - 1 - j] == top_cnt and j <= K - 1:
                    if 3 * j <= n:
                        cand_i[nc] = 3 * j
                        cand_k[nc] = 0
                        nc += 1
                    if try_pairs and 2 * j <= n:
                        cand_i[nc] = 2 * j
                        cand_k[nc] = 1
                        nc += 1
                if e < 0 and t_len[-e - 1] == j:
                    cand_i[nc] = j + 1
                    cand_k[nc] = 2
                    nc += 1
            while nc > 0 and not changed:
                best = 0                      # the first (i, kind) in Procedure 1's order
                for c in range(1, nc):
                    if cand_i[c] < cand_i[best] or (cand_i[c] == cand_i[best] and cand_k[c] < cand_k[best]):
                        best = c
                i = cand_i[best]
                if cand_k[best] == 0:
                    b = i // 3
                    if (ids[n - 1 - 2 * b] == top_id and cnts[n - 1 - 2 * b] == top_cnt
                            and _blocks_equal(ids, cnts, n - b, n - 2 * b, b)
                            and _blocks_equal(ids, cnts, n - b, n - 3 * b, b)):
                        if record_pairs and pend_ends.size() > 0 and pend_ends.back() > n - 3 * b:
                            _settle_pairs(pend_ends, pend_widths, pend_keys, pairs_seen, n - 3 * b, b,
                                          table._key(ids + n - b, cnts + n - b, b))
                        loop = table._lookup_or_add(ids + n - b, cnts + n - b, b)
                        t_start, t_len, t_ids, t_cnts = table.start, table.length, table.ids, table.cnts
                        n -= 3 * b
                        ids[n] = -loop - 1
                        cnts[n] = 3
                        n += 1
                        changed = True
                elif cand_k[best] == 1:
                    b = i // 2
                    if record_pairs:
                        if _blocks_equal(ids, cnts, n - b, n - 2 * b, b):
                            pend_ends.push_back(n)
                            pend_widths.push_back(b)
                            pend_keys.append(table._key(ids + n - b, cnts + n - b, b))
                    elif _blocks_equal(ids, cnts, n - b, n - 2 * b, b):
                        loop = table._lookup(ids + n - b, cnts + n - b, b)
                        if loop >= 0 and table.known[loop]:
                            n -= 2 * b
                            ids[n] = -loop - 1
                            cnts[n] = 2
                            n += 1
                            changed = True
                else:
                    loop = -ids[n - i] - 1
                    s0 = t_start[loop]
                    same = True
                    for j in range(i - 1):
                        if t_ids[s0 + j] != ids[n - i + 1 + j] or t_cnts[s0 + j] != cnts[n - i + 1 + j]:
                            same = False
                            break
                    if same:
                        if record_pairs and pend_ends.size() > 0 and pend_ends.back() > n - i:
                            _settle_pairs(pend_ends, pend_widths, pend_keys, pairs_seen, n - i, 0, None)
                        n -= i - 1
                        cnts[n - 1] += 1
                        changed = True
                nc -= 1                       # drop the candidate just tried
                cand_i[best] = cand_i[nc]
                cand_k[best] = cand_k[nc]
    if record_pairs:        # pairs still open at the end were never healed
        _settle_pairs(pend_ends, pend_widths, pend_keys, pairs_seen, -1, 0, None)
    if snapshots is not None:
        return out_ids[:n].copy(), out_cnts[:n].copy(), states
    return out_ids[:n].copy(), out_cnts[:n].copy()


# ---- the fast kernel ---------------------------------------------------------------------

cdef bytes _body_key(const uint64_t *body, int64_t b):
    """The bytes key of a packed body: its int64 ids, then its int64 counts (as LoopTable._key)."""
    cdef vector[int64_t] flat = vector[int64_t](2 * b + 1)
    cdef int64_t j
    for j in range(b):
        flat[j] = _unpack_id(body[j])
        flat[b + j] = _unpack_cnt(body[j])
    return PyBytes_FromStringAndSize(<char *> &flat[0], 2 * b * sizeof(int64_t))


cdef class _Pairs:
    """Pass 1's pair bookkeeping without Python objects: the pending pairs (a stack of
    (end, width, packed body)) and the settled bodies (a set, handed to ``pairs_seen`` as
    bytes keys by ``flush``: each distinct body once, not once per occurrence)."""
    cdef vector[int64_t] pend_end, pend_width, pend_off
    cdef vector[uint64_t] pend_body
    cdef vector[uint64_t] seen_body, seen_hash
    cdef vector[int64_t] seen_off, seen_len, slots
    cdef uint64_t mask
    cdef Py_ssize_t flushed
    cdef vector[int8_t] ext         # per loop: _ext_class, -1 not computed yet

    def __cinit__(self):
        self.slots.assign(64, -1)
        self.mask = 63
        self.flushed = 0

    cdef inline void push(self, int64_t end, int64_t width, const uint64_t *body):
        cdef int64_t j
        self.pend_end.push_back(end)
        self.pend_width.push_back(width)
        self.pend_off.push_back(<int64_t> self.pend_body.size())
        for j in range(width):
            self.pend_body.push_back(body[j])

    cdef void add_seen(self, const uint64_t *body, int64_t b):
        cdef uint64_t h = _hash_body(body, b), s = h & self.mask
        cdef int64_t k, j
        while self.slots[s] != -1:
            k = self.slots[s]
            if self.seen_hash[k] == h and self.seen_len[k] == b and \
                    memcmp(&self.seen_body[self.seen_off[k]], body, b * sizeof(uint64_t)) == 0:
                return
            s = (s + 1) & self.mask
        k = <int64_t> self.seen_off.size()
        self.seen_off.push_back(<int64_t> self.seen_body.size())
        self.seen_len.push_back(b)
        self.seen_hash.push_back(h)
        for j in range(b):
            self.seen_body.push_back(body[j])
        self.slots[s] = k
        if 2 * (k + 1) > <int64_t> self.mask:
            self.mask = 2 * self.mask + 1
            self.slots.assign(self.mask + 1, -1)
            for j in range(k + 1):
                s = self.seen_hash[j] & self.mask
                while self.slots[s] != -1:
                    s = (s + 1) & self.mask
                self.slots[s] = j

    cdef void settle(self, int64_t q, int64_t b, const uint64_t *body):
        """As _settle_pairs: pending pairs ending above ``q`` are settled; the one that
        three blocks of width ``b`` equal to ``body`` heal (``body`` NULL: none) is dropped,
        the others are seen."""
        cdef int64_t end, width, off
        while self.pend_end.size() > 0 and self.pend_end.back() > q:
            end, width, off = self.pend_end.back(), self.pend_width.back(), self.pend_off.back()
            if not (body != NULL and width == b and end == q + 2 * b
                    and memcmp(&self.pend_body[off], body, b * sizeof(uint64_t)) == 0):
                self.add_seen(&self.pend_body[off], width)
            self.pend_end.pop_back()
            self.pend_width.pop_back()
            self.pend_off.pop_back()
            self.pend_body.resize(off)

    cdef flush(self, set target):
        cdef Py_ssize_t k
        for k in range(self.flushed, <Py_ssize_t> self.seen_off.size()):
            target.add(_body_key(&self.seen_body[self.seen_off[k]], self.seen_len[k]))
        self.flushed = <Py_ssize_t> self.seen_off.size()

    cdef list pending(self):
        return [(self.pend_end[k], self.pend_width[k], _body_key(&self.pend_body[self.pend_off[k]], self.pend_width[k]))
                for k in range(<Py_ssize_t> self.pend_end.size())]



cdef inline bint _periodic(const uint64_t *top, int64_t b, int64_t m) noexcept nogil:
    """The m elements below ``top`` (top[-1] down to top[-m]) repeat with period b:
    top[-1-k] == top[-1-k-b] for k < m (k = 0 is known to hold)."""
    cdef int64_t k
    for k in range(1, m):
        if top[-1 - k] != top[-1 - k - b]:
            return False
    return True


cdef int _ext_class(LoopTable table, int64_t loop, int K, bint record, bint try_pairs, _Pairs ctx) except -1:
    """Whether the copies of loop ``loop``'s body that follow it in the input can be
    folded into its count without running Procedure 1 over them (the loop fast path):
    0 no; 1 yes; 2 yes, and each fold records the body's squares as seen pairs (pass 1).

    Yes needs a body of functions only (the events are then the body itself), at most K
    long (the extension is a candidate), without a cube of width <= K-1 (it would become a
    loop before the extension), and, with known bodies (pass 2), without a square whose
    body is known (it would become L^2).  The stack below must be checked too (_alone)."""
    cdef int64_t b, j, w, e
    cdef const uint64_t *B
    cdef int cls
    while <int64_t> ctx.ext.size() < table.n:
        ctx.ext.push_back(-1)
    if ctx.ext[loop] >= 0:
        return ctx.ext[loop]
    b = table.length[loop]
    B = table.pk + table.start[loop]
    cls = 1 if b <= K else 0
    for j in range(b):
        if _unpack_id(B[j]) < 0 or _unpack_cnt(B[j]) != 1:
            cls = 0
    for w in range(1, K):
        for e in range(2 * w - 1, b):          # a square of width w ending at B[e]
            if cls == 0:
                break
            if _periodic(B + e + 1, w, 2 * w) and B[e] == B[e - w]:
                if e >= 3 * w - 1 and _periodic(B + e + 1, w, 3 * w):
                    cls = 0
                elif record:
                    cls = 2
                elif try_pairs:
                    j = table._find(B + e + 1 - w, w, _hash_body(B + e + 1 - w, w))
                    if j >= 0 and table.known[j]:
                        cls = 0
    ctx.ext[loop] = cls
    return cls


cdef void _record_squares(const uint64_t *B, int64_t b, int K, _Pairs ctx):
    """Every square of width <= K-1 in B, as the seen pair it leaves behind (its top block)."""
    cdef int64_t w, e
    for w in range(1, K):
        for e in range(2 * w - 1, b):
            if _periodic(B + e + 1, w, 2 * w) and B[e] == B[e - w]:
                ctx.add_seen(B + e + 1 - w, w)


cdef bint _alone(const uint64_t *S, int64_t t, int64_t W, int64_t loop, LoopTable table) noexcept:
    """No element of S[t-W:t] is loop ``loop`` (at any count) or a loop whose body holds it."""
    cdef int64_t idx, m, j, s0
    cdef int64_t me = -loop - 1
    for idx in range(t - W if t >= W else 0, t):
        m = _unpack_id(S[idx])
        if m < 0:
            if m == me:
                return False
            m = -m - 1
            s0 = table.start[m]
            for j in range(table.length[m]):
                if _unpack_id(table.pk[s0 + j]) == me:
                    return False
    return True


cdef int64_t _reduce_events(uint64_t *S, uint8_t *LN, uint32_t *TG, uint8_t *R, int64_t n, const int32_t *seq, Py_ssize_t p0,
                            Py_ssize_t p1, int K, bint record, bint try_pairs, LoopTable table,
                            _Pairs pairs, int64_t *reach=NULL) except -1:
    """Push seq[p0:p1] onto the packed stack S (height n) reducing after every push, as
    nlr_reference does; returns the new height.  LN[k]: the body length of the loop at
    S[k] (0 for a function), so the loop-extension candidates need no table read.

    One reduce round: bit j of ``eq`` says the element j below the top equals the top
    (j <= K-1), bit j of ``lm`` that it is a loop whose body is j long (j <= K); the
    candidates, as bits i of m0 (three blocks of i/3), m1 (two blocks of i/2) and m2
    (loop extension over i-1 elements), are tried by ascending i, then kind, as in
    Procedure 1; the first that holds rewrites the stack and starts a new round.

    ``reach`` (or NULL): reach[0] becomes the lowest top index any round looked from (every
    read of a round is at most _depth(K) below its top) and reach[1] the height of the part
    of the stack left untouched (elements below it are as they were), for _Memo."""
    cdef uint64_t top, eq, lm, m0, m1, m2, cand, h, s0
    cdef int64_t low_top = n - 1, kept = n
    cdef uint64_t kmask = ((1ULL << K) - 1) & ~1ULL
    cdef bint runs = R != NULL
    cdef int64_t x, i, b, j, jmax, loop, r
    cdef Py_ssize_t p = p0, q
    cdef bint changed, reduced
    cdef const uint64_t *B
    cdef int cls
    while p < p1:
        reduced = False
        x = seq[p]
        if x < 0:
            raise ValueError("function ids must be >= 0")
        S[n] = (1ULL << 32) | <uint64_t> x
        LN[n] = 0
        TG[n] = dt_tag(S[n])
        n += 1
        while True:
            top = S[n - 1]
            if n - 1 < low_top:
                low_top = n - 1
            jmax = K if K < n - 1 else n - 1
            m0 = 0
            m1 = 0
            if runs:        # K <= 17: only the periods whose blocks repeat become candidates
                dt_runs(TG, R, n - 1, &eq, &s0)
                lm = dt_loops(LN, n - 1, <int> jmax)
            else:           # every period whose first element matches is a candidate
                dt_scan(TG, LN, n - 1, <int> jmax, &eq, &lm)
                s0 = ~(<uint64_t> 0)                # no run test: every period may start a triple
            eq &= kmask
            if (eq | lm) == 0:
                break
            while eq:
                j = dt_ctz64(eq)
                eq &= eq - 1
                if S[n - 1 - j] != top:       # a tag match only
                    continue
                if (s0 >> j) & 1 and 3 * j <= n:
                    m0 |= 1ULL << (3 * j)
                if try_pairs and 2 * j <= n:
                    m1 |= 1ULL << (2 * j)
            m2 = lm << 1
            cand = m0 | m1 | m2
            changed = False
            while cand:
                i = dt_ctz64(cand)
                cand &= cand - 1
                if (m0 >> i) & 1:
                    b = i // 3
                    if _periodic(S + n, b, 2 * b):
                        if record and pairs.pend_end.size() > 0 and pairs.pend_end.back() > n - 3 * b:
                            pairs.settle(n - 3 * b, b, S + n - b)
                        loop = table._find(S + n - b, b, _hash_body(S + n - b, b))
                        if loop < 0:
                            loop = table._add_packed(S + n - b, b)
                        n -= 3 * b
                        if n < kept:
                            kept = n
                        S[n] = _pack(-loop - 1, 3)
                        LN[n] = <uint8_t> b
                        TG[n] = dt_tag(S[n])
                        n += 1
                        changed = True
                        break
                if (m1 >> i) & 1:
                    b = i // 2
                    if _periodic(S + n, b, b):
                        if record:
                            pairs.push(n, b, S + n - b)
                        else:
                            loop = table._find(S + n - b, b, _hash_body(S + n - b, b))
                            if loop >= 0 and table.known[loop]:
                                n -= 2 * b
                                if n < kept:
                                    kept = n
                                S[n] = _pack(-loop - 1, 2)
                                LN[n] = <uint8_t> b
                                TG[n] = dt_tag(S[n])
                                n += 1
                                changed = True
                                break
                if (m2 >> i) & 1:
                    loop = -_unpack_id(S[n - i]) - 1
                    if dt_same(table.pk + table.start[loop], S + n - i + 1, i - 1):
                        if record and pairs.pend_end.size() > 0 and pairs.pend_end.back() > n - i:
                            pairs.settle(n - i, 0, NULL)
                        n -= i - 1
                        if n - 1 < kept:
                            kept = n - 1
                        S[n - 1] += 1ULL << 32
                        TG[n - 1] = dt_tag(S[n - 1])
                        changed = True
                        break
            if not changed:
                break
            reduced = True
        p += 1
        # Loop fast path: a reduction left loop L on top and L's body follows in the
        # input: when _ext_class and _alone allow, Procedure 1 would only extend L over
        # every whole copy (the proof is in _ext_class's and _alone's conditions: no
        # candidate but the extension can hold while a copy is pushed), so count them.
        if reduced and _unpack_id(S[n - 1]) < 0:
            loop = -_unpack_id(S[n - 1]) - 1
            b = table.length[loop]
            if p + b <= p1:
                B = table.pk + table.start[loop]
                q = 0
                while q < b and ((1ULL << 32) | <uint64_t> <uint32_t> seq[p + q]) == B[q]:
                    q += 1
                if q == b and (not record or pairs.pend_end.size() == 0 or pairs.pend_end.back() <= n - 1):
                    cls = _ext_class(table, loop, K, record, try_pairs, pairs)
                    if cls and _alone(S, n - 1, 2 * K - 2, loop, table):
                        r = 1
                        q = p + b
                        while q + b <= p1:
                            j = 0
                            while j < b and ((1ULL << 32) | <uint64_t> <uint32_t> seq[q + j]) == B[j]:
                                j += 1
                            if j < b:
                                break
                            q += b
                            r += 1
                        S[n - 1] += (<uint64_t> r) << 32
                        if n - 1 < kept:
                            kept = n - 1
                        TG[n - 1] = dt_tag(S[n - 1])
                        if runs:
                            dt_runs(TG, R, n - 1, &eq, &s0)
                        if cls == 2:
                            _record_squares(B, b, K, pairs)
                        p = q
    if reach != NULL:
        reach[0] = low_top
        reach[1] = kept
    return n


# ---- chunk memo: a repeated stretch of input over the same stack top, replayed ----------
# Reduction over a stretch of input reads the stack only near its top: a round at top t
# reads at most _depth(K) elements below t (the three-block test 3(K-1) - 1, the runs and
# the scan masked beyond K-1 and K, _alone 2K-2), and what it writes is a function of what
# it reads, of the input and of the table.  So where the same events follow the same top
# w elements of the stack, Procedure 1 does the same again (pops as many elements and
# pushes the same ones) when either w is the whole stack (w < W: the padding below is
# zeros) or, with w = W, the first time every round's top stayed within W - _depth(K) of
# the stretch's starting height and every new element's run row (a function of the 48
# tags up to it, dt_runs) had its tags within the window.  The table holds every body the
# first time made (a later _find gets the same number) and known flags never change
# within a pass (LoopTable.add_body drops the memo).  Stretches ("chunks") end at
# content-defined points (a pair of events whose hash has its top bits clear), so repeated
# input, in one trace or across traces (global ids), cuts into the same chunks.  A chunk
# that followed another chains to it: where the first left the top W elements a function
# of its own window and output (it pushed at least what it popped, or its window was the
# whole stack), the second's window is known equal and only its events are compared.
# Not used while pass 1 records pairs (pending pairs reach below any window).

cdef struct _MemoEntry:
    uint64_t hash
    int64_t win_off     # into wins
    int64_t ev_off      # into evs (bytes)
    int64_t out_off     # into outs, out_ln, out_tg (and 16x into out_r)
    int64_t next        # the entry that followed this one last time (-1: none)
    int32_t w           # window length (< W: the whole stack)
    int32_t clen        # events of the chunk
    int32_t pop
    int32_t nout
    int8_t closed       # ended at a cut point or the longest length (not at the input's end)


cdef int _memo_min = 64         # a chunk's least events (then up to a cut point)
cdef int _memo_max = 4096       # and most
cdef int _memo_cut_bits = 4     # a cut after a pair of events with this many top hash bits clear
cdef int _memo_margin = 16      # W = max(_depth(K), 48) + margin (48: a run row's tags)
cdef int64_t _memo_cap = 128 << 20      # bytes one memo may hold (then it stores no more)
cdef bint _memo_on = True


def memo_settings(min_chunk=None, max_chunk=None, cut_bits=None, margin=None, cap_bytes=None, enabled=None):
    """Read (and with arguments, set) the chunk memo's parameters (tests and benchmarks):
    returns the settings before the call as a dict.  Results never depend on them."""
    global _memo_min, _memo_max, _memo_cut_bits, _memo_margin, _memo_cap, _memo_on
    before = dict(min_chunk=_memo_min, max_chunk=_memo_max, cut_bits=_memo_cut_bits, margin=_memo_margin,
                  cap_bytes=_memo_cap, enabled=bool(_memo_on))
    if min_chunk is not None:
        if min_chunk < 1:
            raise ValueError("min_chunk must be >= 1")
        _memo_min = min_chunk
    if max_chunk is not None:
        _memo_max = max(max_chunk, 1)
    if cut_bits is not None:
        if not 0 <= cut_bits <= 32:
            raise ValueError("cut_bits must be within 0..32")
        _memo_cut_bits = cut_bits
    if margin is not None:
        if margin < 1:
            raise ValueError("margin must be >= 1")
        _memo_margin = margin
    if cap_bytes is not None:
        _memo_cap = cap_bytes
    if enabled is not None:
        _memo_on = bool(enabled)
    return before


cdef inline int64_t _depth(int K) noexcept nogil:
    """How far below its top a reduce round reads the stack, at most (see above)."""
    return 3 * K


cdef inline int64_t _window(int K) noexcept nogil:
    """W: the longest stack window a chunk is keyed by."""
    return (_depth(K) if _depth(K) > 48 else 48) + _memo_margin


cdef inline uint64_t _hash_window(const uint64_t *w, int64_t m) noexcept nogil:
    """A hash of m packed elements, four lanes at a time."""
    cdef uint64_t a = 0x9E3779B97F4A7C15ULL ^ <uint64_t> m, b = 0xC2B2AE3D27D4EB4FULL
    cdef uint64_t c = 0x165667B19E3779F9ULL, d = 0x27D4EB2F165667C5ULL
    cdef int64_t j = 0
    while j + 4 <= m:
        a = (a ^ w[j]) * 0xBF58476D1CE4E5B9ULL
        b = (b ^ w[j + 1]) * 0x94D049BB133111EBULL
        c = (c ^ w[j + 2]) * 0xBF58476D1CE4E5B9ULL
        d = (d ^ w[j + 3]) * 0x94D049BB133111EBULL
        j += 4
    while j < m:
        a = (a ^ w[j]) * 0xBF58476D1CE4E5B9ULL
        j += 1
    a ^= (b >> 29) ^ (c << 17) ^ (d >> 41) ^ b ^ (c >> 7) ^ (d << 23)
    a ^= a >> 32
    a *= 0xD6E8FEB86659FD93ULL
    a ^= a >> 32
    return a


cdef class _Memo:
    """Chunks met and what reducing them did: per entry the stack window and the chunk's
    events (the key, compared whole on a lookup), how many elements it popped and the
    elements it pushed (with their body lengths, tags and run rows).  ``sig``: what the
    entries hold for (K, pass kind, window, event type and filter flags)."""
    cdef int K, W
    cdef bint try_pairs
    cdef object sig
    cdef vector[_MemoEntry] entries
    cdef vector[uint64_t] wins, outs
    cdef vector[char] evs
    cdef vector[uint32_t] out_tg
    cdef vector[uint8_t] out_ln, out_r
    cdef vector[int64_t] slots
    cdef uint64_t mask
    cdef int64_t used
    cdef public int64_t hits, chained, misses, hit_events, miss_events, uncacheable

    def __cinit__(self, int K, bint try_pairs, sig):
        self.K = K
        self.W = <int> _window(K)
        self.try_pairs = try_pairs
        self.sig = sig
        self.slots.assign(1024, -1)
        self.mask = 1023
        self.used = 0

    def stats(self):
        return dict(entries=self.entries.size(), bytes=self.used, hits=self.hits, chained=self.chained,
                    misses=self.misses, hit_events=self.hit_events, miss_events=self.miss_events,
                    uncacheable=self.uncacheable)

    cdef inline bint storing(self) noexcept nogil:
        """Whether a missed chunk is worth storing: always for the first 2^20 events
        reduced, then while replays cover at least as many events as reductions (input
        that does not repeat pays the copies of a store only up to there)."""
        return self.miss_events <= (1 << 20) or self.hit_events >= self.miss_events

    cdef inline uint64_t key(self, const uint64_t *window, int64_t w, const char *ev, int64_t nbytes) noexcept nogil:
        cdef uint64_t h = _hash_window(window, w), x = 0
        h ^= (<uint64_t> nbytes) * 0x9E3779B97F4A7C15ULL
        memcpy(&x, ev, 8 if nbytes >= 8 else nbytes)
        h ^= x * 0xC2B2AE3D27D4EB4FULL
        x = 0
        memcpy(&x, ev + nbytes - (8 if nbytes >= 8 else nbytes), 8 if nbytes >= 8 else nbytes)
        h ^= x * 0x165667B19E3779F9ULL
        h ^= h >> 29
        return h

    cdef inline int64_t find(self, uint64_t h, const uint64_t *window, int64_t w, const char *ev, int64_t clen,
                             int64_t nbytes) noexcept nogil:
        cdef uint64_t s = h & self.mask
        cdef int64_t e
        while True:
            e = self.slots[s]
            if e < 0:
                return -1
            if self.entries[e].hash == h and self.entries[e].clen == clen and self.entries[e].w == w \
                    and memcmp(&self.wins[self.entries[e].win_off], window, w * sizeof(uint64_t)) == 0 \
                    and memcmp(&self.evs[self.entries[e].ev_off], ev, nbytes) == 0:
                return e
            s = (s + 1) & self.mask

    cdef int64_t add(self, uint64_t h, const uint64_t *window, int64_t w, const char *ev, int64_t clen,
                     int64_t nbytes, bint closed, int64_t pop, const uint64_t *out, const uint8_t *ln,
                     const uint32_t *tg, const uint8_t *r, int64_t nout):
        """Store an entry; returns its number, or -1 when the memo is full."""
        cdef _MemoEntry m
        cdef int64_t e = <int64_t> self.entries.size(), j
        cdef uint64_t s
        cdef int64_t cost = w * 8 + nbytes + nout * (13 if r == NULL else 29) + 80
        if self.used + cost > _memo_cap:
            return -1
        self.used += cost
        m.hash = h
        m.win_off = <int64_t> self.wins.size()
        m.ev_off = <int64_t> self.evs.size()
        m.out_off = <int64_t> self.outs.size()
        m.next = -1
        m.w = <int32_t> w
        m.clen = <int32_t> clen
        m.pop = <int32_t> pop
        m.nout = <int32_t> nout
        m.closed = closed
        self.entries.push_back(m)
        self.wins.insert(self.wins.end(), window, window + w)
        self.evs.insert(self.evs.end(), ev, ev + nbytes)
        self.outs.insert(self.outs.end(), out, out + nout)
        self.out_ln.insert(self.out_ln.end(), ln, ln + nout)
        self.out_tg.insert(self.out_tg.end(), tg, tg + nout)
        if r != NULL:
            self.out_r.insert(self.out_r.end(), r, r + 16 * nout)
        if 2 * (e + 1) > <int64_t> self.mask:
            self.mask = 2 * self.mask + 1
            self.slots.assign(self.mask + 1, -1)
            for j in range(e + 1):
                s = self.entries[j].hash & self.mask
                while self.slots[s] >= 0:
                    s = (s + 1) & self.mask
                self.slots[s] = j
        else:
            s = h & self.mask
            while self.slots[s] >= 0:
                s = (s + 1) & self.mask
            self.slots[s] = e
        return e

    cdef inline bint leads(self, int64_t e) noexcept nogil:
        """Whether the window after entry e is a function of e (so a chunk may chain to it)."""
        return self.entries[e].w < self.W or self.entries[e].nout >= self.entries[e].pop

    cdef int64_t replay(self, int64_t e, uint64_t *S, uint8_t *LN, uint32_t *TG, uint8_t *R, int64_t n0) noexcept nogil:
        """The stack after entry e's chunk, from height n0: returns the new height."""
        cdef int64_t u = n0 - self.entries[e].pop, nout = self.entries[e].nout, off = self.entries[e].out_off
        if nout:
            memcpy(S + u, &self.outs[off], nout * sizeof(uint64_t))
            memcpy(LN + u, &self.out_ln[off], nout * sizeof(uint8_t))
            memcpy(TG + u, &self.out_tg[off], nout * sizeof(uint32_t))
            if R != NULL:
                memcpy(R + 16 * u, &self.out_r[16 * off], 16 * nout * sizeof(uint8_t))
        return u + nout


cdef int64_t _reduce_chunks(uint64_t *S, uint8_t *LN, uint32_t *TG, uint8_t *R, int64_t n,
                            const stored_event *seq, const uint8_t *flags, Py_ssize_t n_flags,
                            Py_ssize_t p0, Py_ssize_t p1, int K, bint try_pairs, LoopTable table, _Pairs pairs,
                            _Memo memo) except -1:
    """_reduce_events over seq[p0:p1] (not recording pairs), chunk by chunk through ``memo``.
    ``flags`` (or NULL: seq holds the kept events, int32): seq holds a trace's events and
    the kept ones are its entries (ids != 0) whose flag is set (what ``kept_calls``
    keeps), filtered here a chunk at a time."""
    cdef Py_ssize_t p = p0, q, lim, j
    cdef int64_t W = memo.W, D = _depth(K), n0, e, w, prev = -1, nb, m
    cdef int64_t reach[2]
    cdef uint64_t h = 0, g
    cdef int sh = 64 - _memo_cut_bits
    cdef vector[uint64_t] saved = vector[uint64_t](W)
    cdef vector[int32_t] kept
    cdef const char *ev
    cdef int x
    cdef bint closed, store, direct = flags == NULL and stored_event is int32_t
    while p < p1:
        n0 = n
        if prev >= 0 and memo.entries[prev].next >= 0:      # the chunk that followed last time
            e = memo.entries[prev].next
            nb = memo.entries[e].clen * sizeof(stored_event)
            if p + memo.entries[e].clen <= p1 and \
                    memcmp(&memo.evs[memo.entries[e].ev_off], <const char *> (seq + p), nb) == 0:
                n = memo.replay(e, S, LN, TG, R, n0)
                memo.chained += 1
                memo.hit_events += memo.entries[e].clen
                p += memo.entries[e].clen
                prev = e if memo.leads(e) else -1
                continue
        lim = p1 if p1 - p <= _memo_max else p + _memo_max
        q = p + _memo_min
        if q >= lim:
            q = lim
        else:
            while q < lim:
                g = ((<uint64_t> <uint32_t> seq[q - 1]) * 0x9E3779B97F4A7C15ULL) \
                    ^ ((<uint64_t> <uint32_t> seq[q]) * 0xC2B2AE3D27D4EB4FULL)
                q += 1
                if sh >= 64 or (g >> sh) == 0:
                    break
        closed = q < p1 or q - p == _memo_max
        ev = <const char *> (seq + p)
        nb = (q - p) * sizeof(stored_event)
        w = W if n0 >= W else n0
        h = memo.key(S + n0 - w, w, ev, nb)
        e = memo.find(h, S + n0 - w, w, ev, q - p, nb)
        if e >= 0:
            n = memo.replay(e, S, LN, TG, R, n0)
            memo.hits += 1
            memo.hit_events += q - p
            if prev >= 0 and memo.entries[e].closed:
                memo.entries[prev].next = e
            prev = e if memo.leads(e) else -1
            p = q
            continue
        store = memo.storing()
        if store:
            memcpy(&saved[0], S + n0 - w, w * sizeof(uint64_t))
        if direct:
            n = _reduce_events(S, LN, TG, R, n0, <const int32_t *> seq, p, q, K, False, try_pairs, table, pairs,
                               reach)
        else:
            kept.clear()
            for j in range(p, q):
                x = <int> seq[j]
                if flags == NULL:
                    if x < 0:
                        raise ValueError("function ids must be >= 0")
                    kept.push_back(x)
                elif x < 0 or x >= n_flags:
                    raise IndexError(f"event id {x} beyond the filter's {n_flags} names")
                elif flags[x]:
                    kept.push_back(x)
            m = <int64_t> kept.size()
            n = _reduce_events(S, LN, TG, R, n0, kept.data(), 0, m, K, False, try_pairs, table, pairs, reach)
            if m == 0:
                reach[0] = n0 - 1
                reach[1] = n0
        memo.misses += 1
        memo.miss_events += q - p
        e = -1
        # stored where the window is the whole stack, or every read and every new run
        # row's tags stayed within it
        if store and (w < W or (reach[0] - D >= n0 - W and (R == NULL or reach[1] - 48 >= n0 - W))):
            e = memo.add(h, &saved[0], w, ev, q - p, nb, closed, n0 - reach[1], S + reach[1], LN + reach[1],
                         TG + reach[1], <const uint8_t *> NULL if R == NULL else R + 16 * reach[1], n - reach[1])
        elif store:
            memo.uncacheable += 1
        if e >= 0 and prev >= 0 and closed:
            memo.entries[prev].next = e
        prev = e if e >= 0 and memo.leads(e) else -1
        p = q
    return n


cdef class KeptEvents:
    """A trace's events (int32 or uint16 ids, 0 = return) with a drop-returns filter's
    flags: what ``nlr`` reduces without a filtered copy, filtering a chunk at a time (and
    not at all where a chunk repeats).  Its NLR is that of ``filtered()``; positions given
    with it (``start``, ``snapshots``) count the trace's events, not the kept ones, so a
    trace sharing its first L events with another resumes from that one's state at L."""
    cdef readonly object events, flags

    def __init__(self, events, keep):
        ev = np.asarray(events)
        if ev.dtype not in (np.int32, np.uint16) or ev.ndim != 1:
            ev = np.asarray(ev, dtype=np.int32)
        self.events = np.ascontiguousarray(ev)
        flags = np.array(keep, dtype=np.uint8).reshape(-1)
        flags = (flags != 0).astype(np.uint8)
        if len(flags):
            flags[0] = 0            # returns are dropped
        self.flags = flags

    def __len__(self):
        return len(self.events)

    def filtered(self):
        """The kept events (int32), as ``kept_calls`` makes them."""
        return kept_calls(self.events, self.flags)

    def kept_before(self, Py_ssize_t position):
        """How many kept events precede ``position`` (a count of the trace's events)."""
        return count_flagged(self.events, self.flags, position)


cdef _reduce_kept(const stored_event[::1] events, const uint8_t[::1] flags, uint64_t *S, uint8_t *LN,
                  uint32_t *TG, uint8_t *R, int64_t *n, Py_ssize_t p0, Py_ssize_t p1, int K, bint try_pairs,
                  LoopTable table, _Pairs pairs, _Memo memo):
    """_reduce_chunks over a KeptEvents' events (typed by their dtype)."""
    cdef uint8_t none = 0       # no flags: every id is beyond them
    n[0] = _reduce_chunks(S, LN, TG, R, n[0], &events[0] if events.shape[0] else NULL,
                          &flags[0] if flags.shape[0] else &none, flags.shape[0], p0, p1, K, try_pairs, table,
                          pairs, memo)


def _through_filtered(KeptEvents raw, int K, LoopTable table, bint known_pairs, set pairs_seen, Py_ssize_t start,
                      tuple stack, snapshots, scratch):
    """``nlr`` of a KeptEvents through its filtered copy (positions translated both ways):
    what runs where the chunked form does not (pass 1 recording pairs, the reference
    kernel's cases, the memo turned off)."""
    if start < 0 or start > len(raw) or (start > 0 and stack is None):
        raise ValueError(f"cannot resume at {start} of {len(raw)} events without the state there")
    arr = raw.filtered()
    kstart = raw.kept_before(start) if start else 0
    if snapshots is None:
        return nlr(arr, K, table, known_pairs, pairs_seen, kstart, stack, None, scratch)
    wanted = sorted(set(int(x) for x in snapshots))
    if wanted and (wanted[0] < start or max(wanted) > len(raw)):
        raise ValueError(f"snapshots outside [{start}, {len(raw)}]")
    kept_at = {at: raw.kept_before(at) for at in wanted}
    ids, cnts, states = nlr(arr, K, table, known_pairs, pairs_seen, kstart, stack, sorted(set(kept_at.values())),
                            scratch)
    return ids, cnts, {at: states[kept_at[at]] for at in wanted}


cdef tuple _unpack_stack(const uint64_t *S, int64_t n, bint narrow=False):
    """The stack as (ids, counts): int64, or with ``narrow`` int32 where every count fits
    (ids always do), so the caller needs no int64 copy of an NLR the size of a third of
    the trace on its way to int32."""
    cdef int64_t j
    cdef uint64_t most = 0
    cdef int32_t[::1] ni, nc
    if narrow:          # one pass: int32 as it goes, int64 after all where a count does not fit
        ids = np.empty(n, dtype=np.int32)
        cnts = np.empty(n, dtype=np.int32)
        ni, nc = ids, cnts
        for j in range(n):
            ni[j] = <int32_t> _unpack_id(S[j])
            nc[j] = <int32_t> _unpack_cnt(S[j])
            most |= S[j]
        if (most >> 63) == 0:       # every count <= 2^31 - 1
            return ids, cnts
    ids = np.empty(n, dtype=np.int64)
    cnts = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] vi = ids, vc = cnts
    for j in range(n):
        vi[j] = _unpack_id(S[j])
        vc[j] = _unpack_cnt(S[j])
    return ids, cnts


FAST_K_MAX = 22     # the fast kernel's candidate masks hold i <= 3K - 3 in 64 bits
DEF _PAD = 32       # >= 16 + FAST_K_MAX: how far below the stack's bottom dt_scan may read


class Scratch:
    """Working memory the fast kernel may reuse from one call to the next (give the same
    object to every ``nlr`` call of a pass): its stack buffers take about 29 bytes per
    NLR element, and fresh pages cost as much as the reduction itself on some machines."""

    def __init__(self):
        self.buffers = None

    def get(self, size):
        if self.buffers is None or len(self.buffers[0]) < size:
            self.buffers = None          # let the old ones go first
            self.buffers = (np.empty(size, dtype=np.uint64), np.empty(size, dtype=np.uint8),
                            np.empty(size, dtype=np.uint32), np.empty(16 * size, dtype=np.uint8))
        return self.buffers


def nlr(seq, int K, LoopTable table, bint known_pairs=False, set pairs_seen=None,
        Py_ssize_t start=0, tuple stack=None, snapshots=None, scratch=None):
    """Nested loop representation of ``seq`` (function ids >= 0), bound ``K`` (>= 2).

    Returns (ids, counts) arrays of the NLR elements, int32 where every count fits (else,
    and from the reference kernel, int64); new loop bodies are appended to ``table``.  With ``known_pairs``, two repetitions of a body that was known to ``table``
    before (``known`` flag) already make a loop.

    ``pairs_seen`` (without ``known_pairs``): a set that receives, as bytes (the body's
    int64 ids then its int64 counts, loops numbered by ``table``), every body whose two
    repetitions a ``known_pairs`` run would have made a loop of here, were the body known,
    and not healed: a pair is healed when a third repetition follows and this run makes
    the loop ``L^3`` at the same place, which the other run reaches too (``L^2`` extended).
    Such a run takes the same steps as this one, up to healed detours, until one of the
    recorded bodies is known, so a trace none of whose recorded bodies is known needs no
    second run.

    Resuming: ``stack`` (ids, counts[, pairs_seen, pending pairs]) is the state after
    ``seq[:start]``, and reduction goes on from ``seq[start]``.  With ``snapshots``
    (positions in ``[start, len(seq)]``), the state after ``seq[:p]`` for each p is
    returned too, as a third item {p: (ids, counts, copy of pairs_seen or None, pending
    pairs)}: a sequence sharing those first events resumes from it.

    ``scratch``: a ``Scratch`` whose buffers this call may use (and grow).

    When ``start`` is the end of ``seq`` (nothing left to reduce), the arrays returned may
    be those of ``stack`` themselves.

    Runs on a packed stack (one uint64 per element) with C-side body sets; falls back to
    ``nlr_reference`` (same results) for K > FAST_K_MAX, ids or counts that do not pack,
    or input that is neither int32 nor int64.
    """
    if K < 2:
        raise ValueError("K must be at least 2")
    cdef KeptEvents raw = seq if isinstance(seq, KeptEvents) else None
    cdef bint record = pairs_seen is not None and not known_pairs
    if raw is not None:
        if K > FAST_K_MAX or not table.packable or not _memo_on or record:
            return _through_filtered(raw, K, table, known_pairs, pairs_seen, start, stack, snapshots, scratch)
        arr = raw.events
    else:
        arr = seq if isinstance(seq, np.ndarray) else np.asarray(seq)
        if K > FAST_K_MAX or not table.packable or arr.ndim != 1 or arr.dtype not in (np.int32, np.int64):
            return nlr_reference(seq, K, table, known_pairs, pairs_seen, start, stack, snapshots)
        if arr.dtype == np.int64:
            if len(arr) and (arr.min() < 0 or arr.max() > 2147483647):
                return nlr_reference(seq, K, table, known_pairs, pairs_seen, start, stack, snapshots)
            arr = arr.astype(np.int32)
        arr = np.ascontiguousarray(arr)
    cdef const int32_t[::1] ev = arr if raw is None else None
    cdef Py_ssize_t n_in = len(arr)
    if start < 0 or start > n_in or (start > 0 and stack is None):
        raise ValueError(f"cannot resume at {start} of {n_in} events without the state there")
    start_ids = np.ascontiguousarray(stack[0] if stack else [], dtype=np.int64)
    start_cnts = np.ascontiguousarray(stack[1] if stack else [], dtype=np.int64)
    if len(start_ids) and (start_ids.min() < -2147483648 or start_ids.max() > 2147483647
                           or start_cnts.min() < 0 or int(start_cnts.max()) + n_in > 4294967295
                           or -int(start_ids.min()) > len(table)) or n_in > 4294967295:
        if raw is not None:
            return _through_filtered(raw, K, table, known_pairs, pairs_seen, start, stack, snapshots, scratch)
        return nlr_reference(seq, K, table, known_pairs, pairs_seen, start, stack, snapshots)
    cdef bint try_pairs = known_pairs or record
    wanted = sorted(set(int(x) for x in snapshots)) if snapshots is not None else []
    if wanted and (wanted[0] < start or max(wanted) > n_in):
        raise ValueError(f"snapshots outside [{start}, {n_in}]")
    if start == n_in and not wanted:
        # nothing left to reduce (a faulty trace that is a prefix of its twin, as a hung
        # run's are): the NLR is the state given, as given (no copy: fresh pages cost),
        # and every pending pair is settled unhealed, i.e. seen (its key as flush makes it)
        if record and stack is not None and len(stack) > 3:
            pairs_seen.update([key for _, _, key in stack[3]])
        if snapshots is not None:
            return start_ids, start_cnts, {}
        return start_ids, start_cnts
    cdef _Pairs pairs = _Pairs()
    cdef int64_t w, j
    cdef const int64_t[::1] fv
    cdef uint64_t[::1] bv
    if stack is not None and len(stack) > 3 and record:
        for end, width, key in stack[3]:
            fv = np.frombuffer(key, dtype=np.int64)
            w = width
            if fv.shape[0] != 2 * w or w < 1:
                raise ValueError("a pending pair's key does not match its width")
            bv = np.empty(w, dtype=np.uint64)
            for j in range(w):
                bv[j] = _pack(fv[j], fv[w + j])
            pairs.push(end, w, &bv[0])
    cdef int64_t[::1] si = start_ids, sc = start_cnts
    cdef Py_ssize_t n_start = si.shape[0], k
    # the stack (packed elements), each element's loop body length (0: a function) and
    # tag; PAD entries below the bottom, which the scan may read (and masks out)
    # (np.empty: a page is only touched, and so only paid for, when the stack reaches it)
    stack_buf, len_buf, tag_buf, runs_buf = (scratch if scratch is not None else Scratch()).get(
        n_in - start + n_start + _PAD)
    stack_buf[:_PAD] = 0
    len_buf[:_PAD] = 0
    tag_buf[:_PAD] = 0
    cdef uint64_t[::1] sv = stack_buf
    cdef uint8_t[::1] lv = len_buf
    cdef uint32_t[::1] tv = tag_buf
    cdef uint64_t *S = &sv[_PAD]
    cdef uint8_t *LN = &lv[_PAD]
    cdef uint32_t *TG = &tv[_PAD]
    # K <= 17: period runs, 16 bytes per stack position (dt_runs), zero rows below the bottom
    runs_buf[:16 * _PAD] = 0
    cdef uint8_t[::1] rv = runs_buf
    cdef uint8_t *R = &rv[16 * _PAD] if K <= 17 else NULL
    cdef uint64_t e1, e0
    cdef int64_t n = n_start, loop
    for k in range(n_start):
        S[k] = _pack(si[k], sc[k])
        if si[k] < 0:
            loop = -si[k] - 1
            LN[k] = <uint8_t> (table.length[loop] if table.length[loop] < 255 else 255)
        else:
            LN[k] = 0
        TG[k] = dt_tag(S[k])
        if R != NULL:
            dt_runs(TG, R, k, &e1, &e0)
    states = {}
    cdef Py_ssize_t p = start
    cdef _Memo memo = None
    if _memo_on and not record:
        sig = (K, try_pairs, _window(K), None if raw is None else raw.events.dtype.str,
               None if raw is None else raw.flags.tobytes())
        memo = table.memo
        if memo is None or memo.sig != sig:
            memo = table.memo = _Memo(K, try_pairs, sig)
    for at in wanted + [n_in]:
        if raw is not None:
            if raw.events.dtype == np.uint16:
                _reduce_kept[uint16_t](raw.events, raw.flags, S, LN, TG, R, &n, p, at, K, try_pairs, table, pairs,
                                       memo)
            else:
                _reduce_kept[int32_t](raw.events, raw.flags, S, LN, TG, R, &n, p, at, K, try_pairs, table, pairs,
                                      memo)
        elif memo is not None:
            n = _reduce_chunks[int32_t](S, LN, TG, R, n, &ev[0] if n_in else <const int32_t *> NULL,
                                        <const uint8_t *> NULL, 0, p, at, K, try_pairs, table, pairs, memo)
        else:
            n = _reduce_events(S, LN, TG, R, n, &ev[0] if n_in else NULL, p, at, K, record, try_pairs, table,
                               pairs)
        p = at
        if snapshots is not None and len(states) < len(wanted):
            if record:
                pairs.flush(pairs_seen)
            ids_now, cnts_now = _unpack_stack(S, n)
            states[at] = (ids_now, cnts_now, set(pairs_seen) if pairs_seen is not None else None, pairs.pending())
    if record:        # pairs still open at the end were never healed
        pairs.settle(-1, 0, NULL)
        pairs.flush(pairs_seen)
    out_ids, out_cnts = _unpack_stack(S, n, True)
    if snapshots is not None:
        return out_ids, out_cnts, states
    return out_ids, out_cnts


def expand(ids, counts, LoopTable table):
    """Inverse of ``nlr``: the flat function-id sequence an NLR stands for."""
    out = []
    _expand_into(np.asarray(ids, dtype=np.int64), np.asarray(counts, dtype=np.int64), table, out)
    return np.array(out, dtype=np.int64)


cdef _expand_into(int64_t[:] ids, int64_t[:] counts, LoopTable table, list out):
    cdef Py_ssize_t j
    cdef int64_t r
    for j in range(ids.shape[0]):
        if ids[j] >= 0:
            out.append(ids[j])
        else:
            body_ids, body_cnts = table.body(-ids[j] - 1)
            for r in range(counts[j]):
                _expand_into(body_ids, body_cnts, table, out)


def match_returns(const stored_event[::1] events):
    """For each event: for a return (0), the id of the call it closes (or -1 when nothing
    is open); for an entry, its own id.  Calls left open at the end are fine."""
    cdef Py_ssize_t n = events.shape[0], j
    res = np.empty(n, dtype=np.int32)
    cdef int[::1] r = res
    stack = np.empty(n + 1, dtype=np.int32)
    cdef int[::1] s = stack
    cdef Py_ssize_t depth = 0
    for j in range(n):
        if events[j] != 0:
            s[depth] = events[j]
            depth += 1
            r[j] = events[j]
        elif depth > 0:
            depth -= 1
            r[j] = s[depth]
        else:
            r[j] = -1
    return res


def open_calls(const stored_event[::1] events):
    """Ids of the calls still open at the end of an event stream, outermost first
    (returns with nothing open are ignored, as in match_returns).  The stack grows with
    the call depth only (not a scratch array of the trace's length)."""
    cdef Py_ssize_t n = events.shape[0], j
    cdef vector[int32_t] stack
    with nogil:
        for j in range(n):
            if events[j] != 0:
                stack.push_back(events[j])
            elif stack.size() > 0:
                stack.pop_back()
    out = np.empty(stack.size(), dtype=np.int32)
    cdef int32_t[::1] o = out
    for j in range(<Py_ssize_t> stack.size()):
        o[j] = stack[j]
    return out


def call_pairs(const int[::1] events, const unsigned char[::1] keep):
    """Caller -> callee pairs of the kept calls: for every entry of a kept function, the
    innermost open kept call (0 = the virtual root when none is open) and the function.
    Calls that are not kept are transparent: their kept callees hang from the nearest kept
    ancestor.  Returns with nothing open are ignored."""
    cdef Py_ssize_t n = events.shape[0], j, depth = 0, m = 0
    cdef int v, parent
    stack = np.empty(n + 1, dtype=np.int32)       # open calls
    kept_parent = np.empty(n + 1, dtype=np.int32)  # innermost kept call at each depth
    parents = np.empty(n, dtype=np.int32)
    children = np.empty(n, dtype=np.int32)
    cdef int[::1] s = stack, kp = kept_parent, po = parents, co = children
    kp[0] = 0
    for j in range(n):
        v = events[j]
        if v != 0:
            parent = kp[depth]
            if keep[v]:
                po[m] = parent
                co[m] = v
                m += 1
                parent = v
            s[depth] = v
            depth += 1
            kp[depth] = parent
        elif depth > 0:
            depth -= 1
    return parents[:m].copy(), children[:m].copy()


# ----------------------------------------------------------------------------------------
# attribute counting (attributes.count_matrix): one pass over each NLR, an open-addressing
# table per row instead of sorting the whole shard's tokens (a long trace's NLR has ~50k
# tokens but only a few dozen distinct attributes)

cdef inline uint64_t _slot(const int64_t[::1] keys, int64_t key, uint64_t mask) noexcept nogil:
    """The slot holding ``key``, or the empty slot (-1) where it goes (linear probing)."""
    cdef uint64_t s = (<uint64_t>key * <uint64_t>0x9E3779B97F4A7C15ULL >> 17) & mask
    while keys[s] != -1 and keys[s] != key:
        s = (s + 1) & mask
    return s


# attribute columns up to this many are counted in a plain array indexed by the code (a
# table of 8 MiB): no hash probing (real LULESH 11.every: 540 codes, 292 K pairs)
DENSE_COUNT_COLUMNS = 1 << 20


ctypedef fused nlr_id:
    int32_t
    int64_t


def count_token_attributes_of(tuple kinds, list nlrs, int64_t n_functions, int64_t n_codes):
    """Per kind in ``kinds`` (False: sing, True: doub), CSR arrays (indptr, indices, data)
    of attribute counts, one row per NLR, indices sorted; a list in the order of
    ``kinds``.  A token's code is its function id, or n_functions + loop id.  sing: each
    token counts its iterations (1 for a function); doub: each pair of consecutive tokens
    ``first * n_codes + second`` counts 1.  Counted in an array of every column where
    they are few (``DENSE_COUNT_COLUMNS``) and every code is below ``n_codes``, the kinds
    together in one pass over the tokens (an NLR of a real trace is a million of them);
    else in a hash table per row and kind (``_count_hashed``).  The same arrays either way."""
    dense = tuple(p for p in kinds if 0 < n_codes and (n_codes * n_codes if p else n_codes) <= DENSE_COUNT_COLUMNS)
    found = dict(zip(dense, _count_dense(nlrs, dense, n_functions, n_codes) or ())) if dense else {}
    return [found[p] if p in found else _count_hashed(nlrs, p, n_functions, n_codes) for p in kinds]


cdef bint _compact(nl):
    """Whether an NLR is held as int32 ids and counts (the compact ones), read as they are:
    no int64 copy of each row."""
    return all(isinstance(a, np.ndarray) and a.dtype == np.int32 and a.flags.c_contiguous
               for a in (nl.ids, nl.counts))


cdef struct _Counts:
    int64_t *vals
    uint8_t *seen
    vector[int64_t] *touched


cdef inline void _count_key(_Counts *t, int64_t key, int64_t occ) noexcept nogil:
    if not t.seen[key]:
        t.seen[key] = 1
        t.touched.push_back(key)
    t.vals[key] += occ


cdef Py_ssize_t _count_row(const nlr_id *ids, const nlr_id *cnts, Py_ssize_t length, _Counts *sing, _Counts *doub,
                           int64_t n_functions, int64_t n_codes) noexcept nogil:
    """One NLR's counts added into ``sing`` (each token's iterations) and ``doub`` (each
    pair of consecutive tokens once), either of them NULL where not wanted; -1 where a
    code is outside the columns (nothing left half done matters: the caller counts every
    row again with the hash table), else 0."""
    cdef Py_ssize_t j
    cdef int64_t tok, code, prev = 0
    for j in range(length):
        tok = ids[j]
        code = tok if tok >= 0 else n_functions + (-tok - 1)
        if <uint64_t> code >= <uint64_t> n_codes:
            return -1
        if sing != NULL:
            _count_key(sing, code, cnts[j])
        if doub != NULL and j:
            _count_key(doub, prev * n_codes + code, 1)
        prev = code
    return 0


def _count_dense(list nlrs, tuple kinds, int64_t n_functions, int64_t n_codes):
    """``count_token_attributes_of`` of every kind in ``kinds`` in one pass over the
    tokens, each in an array of its columns; None where a code is outside them."""
    cdef Py_ssize_t n_rows = len(nlrs), r, k, status = 0, length, w
    cdef _Counts parts[2]
    cdef _Counts *sing = NULL
    cdef _Counts *doub = NULL
    cdef vector[int64_t] touched[2]
    cdef vector[int64_t] out_idx[2]
    cdef vector[int64_t] out_val[2]
    cdef const int32_t[::1] ids32
    cdef const int32_t[::1] cnts32
    cdef const int64_t[::1] ids64
    cdef const int64_t[::1] cnts64
    cdef int64_t[::1] vals
    cdef uint8_t[::1] seen
    cdef int64_t key
    held = []
    for w, pairs in enumerate(kinds):
        held.append((np.zeros(n_codes * n_codes if pairs else n_codes, dtype=np.int64),
                     np.zeros(n_codes * n_codes if pairs else n_codes, dtype=np.uint8),
                     np.zeros(n_rows + 1, dtype=np.int64)))
        vals, seen = held[w][0], held[w][1]
        parts[w].vals, parts[w].seen, parts[w].touched = &vals[0], &seen[0], &touched[w]
        if pairs:
            doub = &parts[w]
        else:
            sing = &parts[w]
    for r in range(n_rows):
        nl = nlrs[r]
        if _compact(nl):
            ids32, cnts32 = nl.ids, nl.counts
            length = min(ids32.shape[0], cnts32.shape[0])
            if length:
                with nogil:
                    status = _count_row(&ids32[0], &cnts32[0], length, sing, doub, n_functions, n_codes)
        else:
            ids64 = np.ascontiguousarray(nl.ids, dtype=np.int64)
            cnts64 = np.ascontiguousarray(nl.counts, dtype=np.int64)
            length = min(ids64.shape[0], cnts64.shape[0])
            if length:
                with nogil:
                    status = _count_row(&ids64[0], &cnts64[0], length, sing, doub, n_functions, n_codes)
        if status < 0:
            return None
        for w in range(len(kinds)):
            sort(touched[w].begin(), touched[w].end())
            vals, seen = held[w][0], held[w][1]
            for k in range(<Py_ssize_t>touched[w].size()):
                key = touched[w][k]
                out_idx[w].push_back(key)
                out_val[w].push_back(vals[key])
                vals[key], seen[key] = 0, 0
            held[w][2][r + 1] = held[w][2][r] + <int64_t>touched[w].size()
            touched[w].clear()
    out = []
    for w in range(len(kinds)):
        out.append((held[w][2], _int64_array(out_idx[w]), _int64_array(out_val[w])))
    return out


def _count_hashed(list nlrs, bint pairs, int64_t n_functions, int64_t n_codes):
    """``count_token_attributes_of`` of one kind with a hash table per row: any codes."""
    cdef Py_ssize_t n_rows = len(nlrs), r, j, k
    cdef uint64_t cap = 64, mask = 63, s
    cdef int64_t code, prev = 0, key, occ, tok, cnt
    cdef const int64_t[::1] ids
    cdef const int64_t[::1] cnts
    cdef const int32_t[::1] ids32
    cdef const int32_t[::1] cnts32
    cdef bint narrow
    cdef Py_ssize_t length
    keys_arr = np.full(cap, -1, dtype=np.int64)
    vals_arr = np.zeros(cap, dtype=np.int64)
    cdef int64_t[::1] keys = keys_arr, vals = vals_arr
    cdef vector[uint64_t] touched            # the slots this row filled
    cdef vector[pair[int64_t, int64_t]] row  # this row's (code, count), then sorted
    cdef vector[int64_t] out_idx, out_val
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    cdef int64_t[::1] ip = indptr
    for r in range(n_rows):
        nl = nlrs[r]
        narrow = _compact(nl)
        if narrow:
            ids32, cnts32 = nl.ids, nl.counts
            length = ids32.shape[0]
        else:
            ids = np.ascontiguousarray(nl.ids, dtype=np.int64)
            cnts = np.ascontiguousarray(nl.counts, dtype=np.int64)
            length = ids.shape[0]
        for j in range(length):
            if narrow:
                tok, cnt = ids32[j], cnts32[j]
            else:
                tok, cnt = ids[j], cnts[j]
            code = tok if tok >= 0 else n_functions + (-tok - 1)
            if pairs:
                key, occ, prev = prev * n_codes + code, 1, code
                if j == 0:
                    continue
            else:
                key, occ = code, cnt
            if 2 * (touched.size() + 1) > cap:   # keep the load under one half: move to a 4x table
                row.clear()
                for k in range(<Py_ssize_t>touched.size()):
                    row.push_back(pair[int64_t, int64_t](keys[touched[k]], vals[touched[k]]))
                cap *= 4
                mask = cap - 1
                keys_arr = np.full(cap, -1, dtype=np.int64)
                vals_arr = np.zeros(cap, dtype=np.int64)
                keys, vals = keys_arr, vals_arr
                touched.clear()
                for k in range(<Py_ssize_t>row.size()):
                    s = _slot(keys, row[k].first, mask)
                    keys[s], vals[s] = row[k].first, row[k].second
                    touched.push_back(s)
            s = _slot(keys, key, mask)
            if keys[s] == -1:
                keys[s] = key
                touched.push_back(s)
            vals[s] += occ
        # this row in code order; the table is left empty for the next
        row.clear()
        for k in range(<Py_ssize_t>touched.size()):
            row.push_back(pair[int64_t, int64_t](keys[touched[k]], vals[touched[k]]))
            keys[touched[k]], vals[touched[k]] = -1, 0
        touched.clear()
        sort(row.begin(), row.end())
        for k in range(<Py_ssize_t>row.size()):
            out_idx.push_back(row[k].first)
            out_val.push_back(row[k].second)
        ip[r + 1] = ip[r] + <int64_t>row.size()
    indices = np.empty(out_idx.size(), dtype=np.int64)
    data = np.empty(out_val.size(), dtype=np.int64)
    cdef int64_t[::1] oi = indices, od = data
    for k in range(<Py_ssize_t>out_idx.size()):
        oi[k] = out_idx[k]
        od[k] = out_val[k]
    return indptr, indices, data


cdef int _relabel_ids(nlr_id[::1] ids, const int64_t[::1] mapping) except -1:
    cdef Py_ssize_t j
    cdef int64_t v, w
    for j in range(ids.shape[0]):
        v = ids[j]
        if v < 0:
            if -v - 1 >= mapping.shape[0]:
                raise IndexError("a loop id beyond the mapping")
            w = -mapping[-v - 1] - 1
            if nlr_id is int32_t and w < -2147483648:
                raise OverflowError("a loop id beyond int32")
            ids[j] = <nlr_id> w
    return 0


def relabel_loops(list nlrs, const int64_t[::1] mapping):
    """Loop ids of every NLR renumbered in place: element -l-1 becomes -mapping[l]-1
    (functions untouched).  One C pass per NLR instead of numpy temporaries per NLR; ids
    that are not a writable int32 or int64 array (the kernel's and the compact NLRs are)
    go through an int64 copy written back."""
    for nl in nlrs:
        arr = nl.ids
        if isinstance(arr, np.ndarray) and arr.dtype in (np.int32, np.int64) and arr.flags.c_contiguous \
                and arr.flags.writeable:
            if arr.dtype == np.int64:
                _relabel_ids[int64_t](arr, mapping)
            else:
                _relabel_ids[int32_t](arr, mapping)
        else:
            tmp = np.array(arr, dtype=np.int64)
            _relabel_ids[int64_t](tmp, mapping)
            arr[...] = tmp


cdef object _first_loops(const nlr_id[::1] ids, Py_ssize_t n_loops):
    cdef vector[uint8_t] seen = vector[uint8_t](n_loops, 0)
    cdef vector[int64_t] order
    cdef Py_ssize_t j
    cdef int64_t loop
    for j in range(ids.shape[0]):
        if ids[j] < 0:
            loop = -<int64_t> ids[j] - 1
            if loop >= n_loops:
                raise IndexError("a loop id beyond the table")
            if not seen[loop]:
                seen[loop] = 1
                order.push_back(loop)
    return _int64_array(order)


def first_loops(ids, Py_ssize_t n_loops):
    """The loops (numbers < ``n_loops``) an NLR's ids use, in the order of their first
    occurrence (one pass instead of a sort of every loop token)."""
    arr = np.ascontiguousarray(ids)
    if arr.dtype == np.int32:
        return _first_loops[int32_t](arr, n_loops)
    return _first_loops[int64_t](np.ascontiguousarray(arr, dtype=np.int64), n_loops)


def open_frames(const stored_event[::1] events, Py_ssize_t stop):
    """(ids, starts) of the calls open just before position ``stop``, outermost first:
    the call stack there and the positions of those calls' entries (int32, int64).
    Returns with nothing open are ignored, as in open_calls."""
    cdef Py_ssize_t n = min(events.shape[0], max(stop, 0)), j
    cdef vector[int32_t] stack
    cdef vector[int64_t] entered
    with nogil:
        for j in range(n):
            if events[j] != 0:
                stack.push_back(events[j])
                entered.push_back(j)
            elif stack.size() > 0:
                stack.pop_back()
                entered.pop_back()
    ids = np.empty(stack.size(), dtype=np.int32)
    starts = np.empty(stack.size(), dtype=np.int64)
    cdef int32_t[::1] s = ids
    cdef int64_t[::1] p = starts
    for j in range(<Py_ssize_t> stack.size()):
        s[j] = stack[j]
        p[j] = entered[j]
    return ids, starts


cdef struct _ScanState:
    Py_ssize_t calls        # entries
    Py_ssize_t found        # flagged events
    int marks               # 2 set: an id beyond the flags met
    Py_ssize_t depth        # call depth (returns with nothing open ignored)
    bint outer              # the children of the current top-level call are still listed
    bint cut                # ... and were cut at ``limit``
    Py_ssize_t limit        # the position from which they are no longer listed


cdef inline Py_ssize_t _count_span(const stored_event *ev, Py_ssize_t j, Py_ssize_t b, const uint8_t *table,
                                    Py_ssize_t n_table, uint64_t mask, bint deep, Py_ssize_t *calls,
                                    Py_ssize_t *found, Py_ssize_t *depth) noexcept nogil:
    """Events from j on counted (entries, flagged ones) and, when ``deep``, the depth
    followed while it is above 1 at each event (nothing to list there); returns where it
    stopped: at b, at an id beyond the flags (not counted), or where the depth is 1 or less.
    A loop of its own over locals: where the listing code shares it, the compiler keeps
    the position and the pointers in memory, and a scan took twice as long."""
    cdef Py_ssize_t c = calls[0], f = found[0], d = depth[0]
    cdef int64_t e, nz
    while j < b and (d > 1 or not deep):
        e = ev[j]
        if <uint64_t> e >= <uint64_t> n_table:
            break
        f += table[e & mask]
        nz = e != 0
        c += nz
        d += 2 * nz - 1
        j += 1
    calls[0], found[0] = c, f
    if deep:
        depth[0] = d
    return j


cdef inline void _scan_events(const stored_event *ev, Py_ssize_t a, Py_ssize_t b, const uint8_t *table,
                              Py_ssize_t n_table, uint64_t mask, _ScanState *st, bint levels, bint before,
                              vector[int32_t] *top_ids, vector[int64_t] *top_pos,
                              vector[int32_t] *outer_ids, vector[int64_t] *outer_pos) noexcept nogil:
    """Events [a, b): entries and flagged ones counted (``table[e & mask]``: 1 flagged, 0
    not; ids from ``n_table`` on are beyond the flags: the scan stops there, marked); with
    ``levels`` the depth followed and the entries at depth 0 (top level) and 1 (children
    of the current top-level call: ``before`` the position, the list restarts with each
    top-level call; after it, it stops when that call returns or at ``st.limit``) listed."""
    cdef Py_ssize_t j = a, c = 0, f = 0, d = st.depth
    cdef int64_t e, nz
    if not levels:
        j = _count_span(ev, j, b, table, n_table, mask, False, &c, &f, &d)
        if j < b:
            st.marks = 2
    else:
        while j < b:
            if d > 1:           # most events: deep inside a call, nothing to list
                j = _count_span(ev, j, b, table, n_table, mask, True, &c, &f, &d)
                if j < b and d > 1:
                    st.marks = 2
                    break
                continue
            e = ev[j]
            if <uint64_t> e >= <uint64_t> n_table:
                st.marks = 2
                break
            f += table[e & mask]
            nz = e != 0
            c += nz
            if d == 0:
                if nz:
                    top_ids.push_back(<int32_t> e)
                    top_pos.push_back(<int64_t> j)
                    if before:
                        outer_ids.clear()
                        outer_pos.clear()
                    d = 1
            elif nz:
                if st.outer:
                    if j >= st.limit:
                        st.outer = False
                        st.cut = True
                    else:
                        outer_ids.push_back(<int32_t> e)
                        outer_pos.push_back(<int64_t> j)
                d = 2
            else:
                d = 0
                if not before:
                    st.outer = False
            j += 1
    st.calls += c
    st.found += f
    st.depth = d


def position_scan(const stored_event[::1] events, flags, Py_ssize_t position, bint levels=False,
                  Py_ssize_t span=-1):
    """One pass over a trace for a position in it (clamped to [0, len]): (entries before
    it, entries in all, events before it whose ``flags`` entry is set, such events in all;
    0 when ``flags`` is None).  With ``levels`` three more: the calls open there
    ((ids int32, entry positions int64), outermost first, as ``open_frames``), the
    thread's top-level children (as ``child_calls(events, 0, True)``) and the children of
    the outermost open call (as ``child_calls`` from after its entry; None when no call
    is open there, or when ``span`` >= 0 and it has children from ``span`` events after
    the position on: a call spinning until killed need not be listed whole).  An id
    beyond the flags is an error (IndexError)."""
    cdef Py_ssize_t n = events.shape[0], p = min(n, max(position, 0)), j, n_flags, n_table, depth_at, b, need
    cdef const uint8_t[::1] fl
    cdef vector[uint8_t] table
    cdef vector[int32_t] top_ids, outer_ids, inner_ids
    cdef vector[int64_t] top_pos, outer_pos, inner_pos
    cdef _ScanState st
    cdef int e
    cdef Py_ssize_t calls_before, found_before
    cdef uint64_t mask = ~(<uint64_t> 0)
    if flags is None:           # nothing flagged: every id reads the one zero entry
        n_flags = n_table = 1 << 62
        mask = 0
        table.assign(1, 0)
    else:
        fl = np.ascontiguousarray(flags, dtype=np.uint8)
        n_flags = n_table = fl.shape[0]
        table.assign(max(n_table, 1), 0)
        for j in range(n_table):
            table[j] = fl[j] != 0
    st.calls = st.found = st.depth = 0
    st.marks = 0
    st.outer = True
    st.cut = False
    st.limit = p + span if 0 <= span < (1 << 62) else 1 << 62
    cdef const stored_event *ev = &events[0] if n else NULL
    cdef const uint8_t *tp = table.data()
    with nogil:
        _scan_events(ev, 0, p, tp, n_table, mask, &st, levels, True, &top_ids, &top_pos, &outer_ids, &outer_pos)
        calls_before, found_before, depth_at = st.calls, st.found, st.depth
        st.outer = depth_at > 0
        if not st.marks:
            _scan_events(ev, p, n, tp, n_table, mask, &st, levels, False, &top_ids, &top_pos, &outer_ids,
                         &outer_pos)
    if st.marks & 2:
        for j in range(n):
            if events[j] < 0 or events[j] >= n_flags:
                raise IndexError(f"event id {events[j]} beyond the {n_flags} flags")
    counts = (calls_before, st.calls, found_before, st.found)
    if not levels:
        return counts
    if depth_at == 0:
        frames = (np.empty(0, dtype=np.int32), np.empty(0, dtype=np.int64))
        return counts + (frames, (_int32_array(top_ids), _int64_array(top_pos)), None)
    # the outermost open call is the last top-level one entered before the position; the
    # calls open inside it, innermost first, from a scan back to it
    cdef Py_ssize_t outer = top_pos[top_pos.size() - 1] if p == n else top_pos[_last_before(top_pos, p)]
    inner_ids.push_back(events[outer])
    inner_pos.push_back(outer)
    need, b, j = depth_at - 1, 0, p - 1
    with nogil:
        while need > 0 and j > outer:
            e = events[j]
            if e == 0:
                b += 1
            elif b > 0:
                b -= 1
            else:
                inner_ids.push_back(e)
                inner_pos.push_back(j)
                need -= 1
            j -= 1
    frame_ids, frame_pos = _int32_array(inner_ids), _int64_array(inner_pos)
    frame_ids[1:] = frame_ids[1:][::-1].copy()
    frame_pos[1:] = frame_pos[1:][::-1].copy()
    return counts + ((frame_ids, frame_pos), (_int32_array(top_ids), _int64_array(top_pos)),
                     None if st.cut else (_int32_array(outer_ids), _int64_array(outer_pos)))


cdef Py_ssize_t _last_before(const vector[int64_t] &pos, Py_ssize_t p):
    """The index of the last value below ``p`` in ascending ``pos`` (one is)."""
    cdef Py_ssize_t lo = 0, hi = pos.size()
    while hi - lo > 1:
        if pos[(lo + hi) // 2] < p:
            lo = (lo + hi) // 2
        else:
            hi = (lo + hi) // 2
    return lo


cdef object _new_array(const void* data, size_t n, size_t itemsize, dtype):
    """A new array of ``dtype`` holding the ``n`` values at ``data``."""
    out = np.empty(n, dtype=dtype)
    cdef uint8_t[::1] o = out.view(np.uint8)
    if n:
        memcpy(&o[0], data, n * itemsize)
    return out


cdef object _int64_array(const vector[int64_t] &values):
    """A new int64 array of a vector's values."""
    return _new_array(values.data(), values.size(), sizeof(int64_t), np.int64)


cdef object _int32_array(const vector[int32_t] &values):
    """A new int32 array of a vector's values."""
    return _new_array(values.data(), values.size(), sizeof(int32_t), np.int32)


def child_calls(const stored_event[::1] events, Py_ssize_t first, bint top):
    """(ids, positions) of the calls entered directly inside one frame: scanning from
    ``first`` (the position after the frame's entry), the entries one level down, until
    the frame's own return.  ``top``: the thread itself is the frame (from position 0 to
    the end; returns with nothing open are ignored).  One pass; the children grow a
    vector (a frame has far fewer children than events)."""
    cdef vector[int32_t] ids
    cdef vector[int64_t] pos
    cdef Py_ssize_t n = events.shape[0], j, depth = 0
    cdef int e
    with nogil:
        for j in range(max(first, 0), n):
            e = events[j]
            if e != 0:
                if depth == 0:
                    ids.push_back(e)
                    pos.push_back(j)
                depth += 1
            elif depth > 0:
                depth -= 1
            elif not top:
                break
    return _int32_array(ids), _int64_array(pos)


def call_tree(const int[::1] events):
    """Every call's children, as CSR: frame 0 is the thread itself, frame i > 0 the i-th
    call entered; ``offsets[f]:offsets[f + 1]`` index ``children``, the ids of the calls
    entered directly inside frame f, in order.  Returns (frame ids int32 (0 for the
    thread), offsets int64, children int32).  Returns with nothing open are ignored."""
    cdef Py_ssize_t n = events.shape[0], j, depth = 0, frames = 1, k
    for j in range(n):
        if events[j] != 0:
            frames += 1
    ids = np.zeros(frames, dtype=np.int32)
    counts = np.zeros(frames + 1, dtype=np.int64)
    parent_of = np.zeros(frames, dtype=np.int64)
    stack = np.zeros(frames + 1, dtype=np.int64)
    cdef int[::1] fid = ids
    cdef int64_t[::1] cnt = counts, par = parent_of, st = stack
    k = 0
    for j in range(n):                       # pass 1: each call's parent, children per frame
        if events[j] != 0:
            k += 1
            fid[k] = events[j]
            par[k] = st[depth]
            cnt[st[depth] + 1] += 1
            depth += 1
            st[depth] = k
        elif depth > 0:
            depth -= 1
    offsets = np.cumsum(counts)
    children = np.empty(k, dtype=np.int32)
    fill = offsets[:-1].copy()
    cdef int64_t[::1] fl = fill
    cdef int[::1] ch = children
    for j in range(1, k + 1):                # pass 2: calls in entry order into their parent's list
        ch[fl[par[j]]] = fid[j]
        fl[par[j]] += 1
    return ids, offsets, children


def kept_calls(const stored_event[::1] events, const uint8_t[::1] keep, out_buffer=None):
    """The entries (ids != 0) whose ``keep`` flag is set, in order: a drop-returns filter
    in one pass, without the boolean temporaries of the numpy form.  ``out_buffer``: an
    int32 array of at least len(events) + 1 to write into; the result is then a view of
    it (valid until the buffer is written again): fresh pages of a new array of the
    trace's length cost more than the pass itself."""
    cdef Py_ssize_t n = events.shape[0], j, m = 0, bad = -1
    cdef Py_ssize_t n_keep = keep.shape[0]
    cdef int e
    # the flags with returns (id 0) and ids beyond the names (index n_keep) never kept, so
    # the loop stores every event and only counts the kept ones: no branch to mispredict
    flags_arr = np.zeros(n_keep + 1, dtype=np.uint8)
    cdef uint8_t[::1] flags = flags_arr
    for j in range(1, n_keep):
        flags[j] = keep[j] != 0
    reuse = out_buffer is not None
    if reuse and (out_buffer.dtype != np.int32 or out_buffer.ndim != 1 or len(out_buffer) < n + 1
                  or not out_buffer.flags.c_contiguous):
        raise ValueError(f"the output buffer must be a contiguous int32 array of at least {n + 1} entries")
    out = out_buffer if reuse else np.empty(n + 1, dtype=np.int32)
    cdef int[::1] o = out
    with nogil:
        for j in range(n):
            e = events[j]
            if e < 0 or e >= n_keep:
                e = <int> n_keep
                if bad < 0:
                    bad = j
            o[m] = e
            m += flags[e]
    if bad >= 0:
        raise IndexError(f"event id {events[bad]} beyond the filter's {n_keep} names")
    if reuse:
        return out[:m]
    return out[:m].copy() if m < n // 2 else out[:m]


cdef inline uint64_t _mix(uint64_t h) noexcept nogil:
    h ^= h >> 33
    h *= 0xFF51AFD7ED558CCDULL
    h ^= h >> 33
    h *= 0xC4CEB9FE1A85EC53ULL
    h ^= h >> 33
    return h


# hash_events' state: four multiply-rotate lanes, pair k of events (the first in the low
# half) into lane k mod 4, then an avalanche; map_ids_summarised computes the same hash as
# it maps, so both step through these.  Four independent chains, not one or two: a lane's
# multiply waits for its previous one, and with fewer lanes that wait bounded the reading
# of every trace (real LULESH: 0.71 ns per event with two lanes, hashing alone)
cdef struct _Lanes:
    uint64_t x[4]


cdef inline void _hash_start(_Lanes* h) noexcept nogil:
    h.x[0] = 0x9E3779B97F4A7C15ULL
    h.x[1] = 0xD6E8FEB86659FD93ULL
    h.x[2] = 0xC2B2AE3D27D4EB4FULL
    h.x[3] = 0x165667B19E3779F9ULL


cdef inline void _hash_pair(_Lanes* h, Py_ssize_t k, uint64_t w) noexcept nogil:
    """Pair ``k`` of the events (``w``: the first in the low half) into its lane."""
    cdef int lane = k & 3
    cdef uint64_t x = h.x[lane] ^ w
    if lane == 0:
        x *= 0x9E3779B97F4A7C15ULL
        x = (x << 29) | (x >> 35)
    elif lane == 1:
        x *= 0xBF58476D1CE4E5B9ULL
        x = (x << 31) | (x >> 33)
    elif lane == 2:
        x *= 0x94D049BB133111EBULL
        x = (x << 27) | (x >> 37)
    else:
        x *= 0xFF51AFD7ED558CCDULL
        x = (x << 33) | (x >> 31)
    h.x[lane] = x


cdef inline uint64_t _pair(uint64_t first, uint64_t second) noexcept nogil:
    return (first & 0xFFFFFFFFULL) | (second << 32)


cdef inline uint64_t _hash_end(_Lanes* h, bint odd, uint64_t last, uint64_t n) noexcept nogil:
    """The hash of ``n`` events from the lanes (``odd``: ``last``, the event after the
    last pair, is not in them)."""
    cdef uint64_t a = h.x[0]
    if odd:
        a ^= last * 0x94D049BB133111EBULL
    return _mix(a ^ _mix(h.x[1] ^ _mix(h.x[2] ^ _mix(h.x[3] + n))))


def hash_events(const stored_event[::1] events, Py_ssize_t lo=0, Py_ssize_t hi=-1):
    """A 64-bit hash of events[lo:hi] (int32 ids, or uint16 as a run's events are held when
    its names fit: the same values give the same hash in either): four multiply-rotate
    lanes over pairs of events and a final avalanche, a few GB/s.  Deterministic on every
    rank of one machine type; equal ranges give equal hashes, different ones collide with
    odds ~2^-64."""
    cdef Py_ssize_t n = events.shape[0]
    if hi < 0 or hi > n:
        hi = n
    if lo < 0 or lo > hi:
        raise IndexError(f"bad event range [{lo}, {hi}) of {n}")
    cdef _Lanes lanes
    cdef uint64_t h
    cdef Py_ssize_t j = lo, k
    _hash_start(&lanes)
    with nogil:
        while j + 8 <= hi:
            _hash_pair(&lanes, 0, _pair(<uint32_t> events[j], <uint32_t> events[j + 1]))
            _hash_pair(&lanes, 1, _pair(<uint32_t> events[j + 2], <uint32_t> events[j + 3]))
            _hash_pair(&lanes, 2, _pair(<uint32_t> events[j + 4], <uint32_t> events[j + 5]))
            _hash_pair(&lanes, 3, _pair(<uint32_t> events[j + 6], <uint32_t> events[j + 7]))
            j += 8
        k = (j - lo) >> 1
        while j + 1 < hi:
            _hash_pair(&lanes, k, _pair(<uint32_t> events[j], <uint32_t> events[j + 1]))
            j += 2
            k += 1
        h = _hash_end(&lanes, j < hi, <uint64_t> <uint32_t> events[j] if j < hi else 0, <uint64_t> (hi - lo))
    return int(h)


cdef inline void _count_one(uint64_t m, Py_ssize_t *entries, Py_ssize_t *depth, Py_ssize_t *low) noexcept nogil:
    """map_ids_summarised's count of a mapped event.  No branch on calls and returns: they
    alternate as the program did, which no branch predictor guesses."""
    entries[0] += m != 0
    depth[0] += 2 * (m != 0) - 1
    low[0] = depth[0] if depth[0] < low[0] else low[0]


def map_ids_summarised(uint16_t[::1] values, const int32_t[::1] ids):
    """Every value v becomes ``ids[v]``, in place (uint16 local ids to uint16 global ones, no
    second array), and the mapped events are summarised in the same pass (each trace is
    read once more, not once per fact): returns (``hash_events`` of them, calls entered,
    whether no call is open at the end: True when calls and returns balance with no return
    before its call, so ``open_calls`` would find none; False: it must look).  A value
    beyond ``ids`` or an id it maps to beyond uint16 is an error (the values before it are
    mapped already)."""
    cdef Py_ssize_t j = 0, t, n = values.shape[0], n_ids = ids.shape[0], bad = -1
    cdef Py_ssize_t entries = 0, depth = 0, low = 0
    cdef uint64_t g[8]
    cdef uint64_t seen
    cdef _Lanes lanes
    # a table over every uint16 value, a value beyond ``ids`` or mapped beyond uint16
    # marked by one beyond uint16: a test on eight events at a time, not two on each
    full = np.full(65536, 65536, dtype=np.uint32)
    given = np.asarray(ids)[:65536]
    full[:len(given)] = np.where((given >= 0) & (given <= 65535), given, 65536)
    cdef const uint32_t[::1] table = full
    cdef uint16_t *vp = &values[0] if n else NULL
    cdef const uint32_t *tp = &table[0]
    cdef uint16_t v
    _hash_start(&lanes)
    with nogil:
        while j + 8 <= n:       # eight events, four pairs, one into each lane
            seen = 0
            for t in range(8):
                g[t] = tp[vp[j + t]]
                seen |= g[t]
            if seen > 65535:
                break           # found below, this block's values as they were
            for t in range(8):
                vp[j + t] = <uint16_t> g[t]
                _count_one(g[t], &entries, &depth, &low)
            _hash_pair(&lanes, 0, _pair(g[0], g[1]))
            _hash_pair(&lanes, 1, _pair(g[2], g[3]))
            _hash_pair(&lanes, 2, _pair(g[4], g[5]))
            _hash_pair(&lanes, 3, _pair(g[6], g[7]))
            j += 8
        while j < n:
            g[j & 1] = tp[vp[j]]
            if g[j & 1] > 65535:
                bad = j
                break
            vp[j] = <uint16_t> g[j & 1]
            _count_one(g[j & 1], &entries, &depth, &low)
            if j & 1:
                _hash_pair(&lanes, j >> 1, _pair(g[0], g[1]))
            j += 1
    if bad >= 0:
        v = values[bad]
        if v >= n_ids:
            raise IndexError(f"event id {v} beyond the {n_ids} names")
        raise OverflowError(f"event id {v} maps to {ids[v]}, beyond uint16")
    return int(_hash_end(&lanes, n & 1, g[0], <uint64_t> n)), entries, depth == 0 and low == 0


cdef Py_ssize_t _scan_flagged(const stored_event[::1] events, const uint8_t[::1] flags, Py_ssize_t n,
                              Py_ssize_t *found, vector[int64_t] *positions) noexcept nogil:
    """Count (and, when ``positions`` is given, list) the events of ``events[:n]`` whose
    flag is set; returns the index of the first id beyond the flags, or -1."""
    cdef Py_ssize_t j, n_flags = flags.shape[0]
    cdef int e
    for j in range(n):
        e = events[j]
        if e < 0 or e >= n_flags:
            return j
        if flags[e]:
            found[0] += 1
            if positions != NULL:
                positions.push_back(j)
    return -1


def count_flagged(const stored_event[::1] events, const uint8_t[::1] flags, Py_ssize_t stop):
    """How many of ``events[:stop]`` have their ``flags`` entry set (one pass, no temporaries).
    An id beyond the flags is an error (IndexError)."""
    cdef Py_ssize_t n = events.shape[0] if stop < 0 or stop > events.shape[0] else stop
    cdef Py_ssize_t found = 0, bad
    with nogil:
        bad = _scan_flagged(events, flags, n, &found, NULL)
    if bad >= 0:
        raise IndexError(f"event id {events[bad]} beyond the {flags.shape[0]} flags")
    return found


def flagged_positions(const stored_event[::1] events, const uint8_t[::1] flags):
    """The positions (int64, ascending) of the events whose ``flags`` entry is set, without
    a boolean array of the trace's length.  An id beyond the flags is an error."""
    cdef Py_ssize_t found = 0, bad
    cdef vector[int64_t] positions
    with nogil:
        bad = _scan_flagged(events, flags, events.shape[0], &found, &positions)
    if bad >= 0:
        raise IndexError(f"event id {events[bad]} beyond the {flags.shape[0]} flags")
    return _int64_array(positions)


def mapped_ids_uint16(const int[::1] events, const int[::1] ids):
    """A new uint16 array of ``ids[e]`` for every event id e (local ids to global ones,
    held narrow, in one pass instead of a mapping pass and a narrowing copy).  An id beyond
    ``ids`` or a mapped id beyond uint16 is an error."""
    cdef Py_ssize_t j, n = events.shape[0], n_ids = ids.shape[0], bad = -1
    cdef int e, g
    out = np.empty(n, dtype=np.uint16)
    cdef uint16_t[::1] o = out
    with nogil:
        for j in range(n):
            e = events[j]
            if e < 0 or e >= n_ids:
                bad = j
                break
            g = ids[e]
            if g < 0 or g > 65535:
                bad = j
                break
            o[j] = <uint16_t> g
    if bad >= 0:
        e = events[bad]
        if e < 0 or e >= n_ids:
            raise IndexError(f"event id {e} beyond the {n_ids} names")
        raise OverflowError(f"event id {e} maps to {ids[e]}, beyond uint16")
    return out


def map_ids_in_place(int[::1] events, const int[::1] ids):
    """Every event id e becomes ``ids[e]``, in place (local ids to global ones without a
    second array the size of the trace)."""
    cdef Py_ssize_t j, n_ids = ids.shape[0]
    cdef int e
    for j in range(events.shape[0]):
        e = events[j]
        if e < 0 or e >= n_ids:
            raise IndexError(f"event id {e} beyond the {n_ids} names")
        events[j] = ids[e]
