# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False, language_level=3
"""ParLOT per-thread trace codec (decoder and byte-identical encoder).

A ParLOT thread file holds a stream of uint16 values (function id on entry, 0 on
return) compressed in two layers:

* LZ layer (word level).  Encoder and decoder keep the same history: ``hbuf[4096]``
  (last position seen for each hash), ``pbuf[65536]`` (ring of past values), ``ppos``
  and ``hash``.  Whenever the candidate ``lpos = hbuf[hash]`` has the same three-value
  context as the current position, a count word follows (number of values copied from
  ``pbuf[lpos], pbuf[lpos+1], ...``), then -- if the stream goes on -- a literal word.
* ZE layer (byte level).  Words are grouped four at a time (8 little-endian bytes);
  each group is a bitmap byte (bit b = byte b non-zero) followed by the non-zero bytes.
  The last group holds n = 1..4 words (its bitmap covers 2n bytes) and is followed by a
  trailer byte n.  An empty stream is the single byte 0.  A stream whose word count is
  a multiple of 4 ends with a full group and trailer 4 (groups are flushed lazily).

Every index into the history tables is masked, so no input can make the decoder read
or write out of bounds; output grows geometrically up to ``max_values``.
"""
from cpython.pyport cimport PY_SSIZE_T_MAX
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t
from libc.stdlib cimport malloc, calloc, realloc, free
from libc.string cimport memcmp, memcpy, memset
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_New

import numpy as np
cimport numpy as cnp

cnp.import_array()

# Status codes returned by decode().
cdef enum:
    S_OK = 0
    S_TRUNCATED = 1
    S_CORRUPT = 2
    S_LIMIT = 3

OK = S_OK                # valid trailer found, whole stream decoded
TRUNCATED = S_TRUNCATED  # no valid trailer: file cut short (thread killed); complete groups recovered
CORRUPT = S_CORRUPT      # never produced today (every malformed tail reads as a truncation); reserved
LIMIT = S_LIMIT          # output would exceed max_values

STATUS_NAMES = {OK: "ok", TRUNCATED: "missing trailer", CORRUPT: "corrupt",
                LIMIT: "too many values"}

DEFAULT_MAX_VALUES = (1 << 31) - 1

cdef uint8_t POPCNT[256]
cdef int _i
for _i in range(256):
    POPCNT[_i] = bin(_i).count("1")


cdef inline void _remember(uint16_t* hbuf, uint16_t* pbuf, uint32_t* h, uint32_t* ppos, uint16_t v) noexcept nogil:
    """The history both sides keep, one value on: where the context hash last led, the
    next hash, the value at the next position (encoder and decoder share this one update:
    a difference between them would desynchronise every file)."""
    hbuf[h[0]] = <uint16_t>ppos[0]
    h[0] = ((h[0] << 4) ^ v) & 0xFFF
    pbuf[ppos[0]] = v
    ppos[0] = (ppos[0] + 1) & 0xFFFF


cdef enum:
    PERIODIC_MIN_DIST = 3        # h at a value hashes the 3 before it: all inside the copy
    PERIODIC_MIN_REST = 32       # values past the first period worth replicating


cdef void _copy_periodic(Kept* s, Py_ssize_t start, uint32_t head, uint32_t cnt, uint16_t* hbuf, uint16_t* pbuf,
                         uint32_t* h, uint32_t* ppos) noexcept nogil:
    """The values [head, cnt) of a copy from ``head`` values back whose first ``head`` values
    are kept at ``s.out[start:]`` and remembered already: each repeats the value ``head``
    before it.  The kept values are replicated a block at a time, the history ring takes
    them in one or two blocks, and of the hash table's entries only the last write of
    each slot is made: the hash at a value is that of the 3 before it, so from the 4th
    value of the copy on it repeats with the values, and every slot written in the copy
    is written again in its last ``head`` values.  The call depth is followed over the
    new values as the value-by-value copy does."""
    cdef uint16_t* out = s.out + start
    cdef uint32_t filled = head, block, n, k, at, first
    cdef uint32_t ppos0 = (ppos[0] - head) & 0xFFFF         # where the copy's first value went
    cdef int64_t depth = s.depth, low = s.low
    cdef uint16_t v
    while filled < cnt:         # out[filled:] = out[filled - block:], block a multiple of head
        block = (filled // head) * head
        n = cnt - filled if cnt - filled < block else block
        memcpy(out + filled, out + filled - block, sizeof(uint16_t) * n)
        filled += n
    at = (ppos0 + head) & 0xFFFF
    n = cnt - head
    first = 65536 - at if n > 65536 - at else n
    memcpy(pbuf + at, out + head, sizeof(uint16_t) * first)
    if first < n:
        memcpy(pbuf, out + head + first, sizeof(uint16_t) * (n - first))
    k = cnt - head if cnt - head > head else head
    while k < cnt:
        hbuf[((<uint32_t> out[k - 3] << 8) ^ (<uint32_t> out[k - 2] << 4) ^ out[k - 1]) & 0xFFF] = \
            <uint16_t> ((ppos0 + k) & 0xFFFF)
        k += 1
    h[0] = ((<uint32_t> out[cnt - 3] << 8) ^ (<uint32_t> out[cnt - 2] << 4) ^ out[cnt - 1]) & 0xFFF
    ppos[0] = (ppos0 + cnt) & 0xFFFF
    for k in range(head, cnt):
        v = out[k]
        depth += 2 * (v != 0) - 1
        low = depth if depth < low else low
    s.depth, s.low = depth, low
    s.o = start + cnt


cdef inline bint _ctx_match(const uint16_t* pbuf, uint32_t lpos, uint32_t ppos) noexcept nogil:
    return (pbuf[(lpos - 1) & 0xFFFF] == pbuf[(ppos - 1) & 0xFFFF]
            and pbuf[(lpos - 2) & 0xFFFF] == pbuf[(ppos - 2) & 0xFFFF]
            and pbuf[(lpos - 3) & 0xFFFF] == pbuf[(ppos - 3) & 0xFFFF])


cdef Py_ssize_t _ze_decode(const uint8_t* data, Py_ssize_t n, uint16_t* words,
                           int* status, Py_ssize_t* offset) noexcept nogil:
    """Undo the ZE layer into ``words`` (capacity >= 4 * n).  Returns the word count.

    ``status``: OK when a valid last group + trailer was found, TRUNCATED otherwise;
    ``offset``: byte offset of the first byte not consumed (n when OK).
    """
    cdef Py_ssize_t pos = 0, nw = 0, end, p
    cdef uint8_t bm, last
    cdef int b, k
    cdef uint8_t grp[8]
    status[0] = S_TRUNCATED
    if n == 0:
        offset[0] = 0
        return 0
    if n == 1 and data[0] == 0:        # the empty stream
        status[0] = S_OK
        offset[0] = 1
        return 0
    last = data[n - 1]
    while pos < n:
        bm = data[pos]
        end = pos + 1 + POPCNT[bm]
        if end > n:                     # group cut short
            break
        p = pos + 1
        for b in range(8):
            if (bm >> b) & 1:
                grp[b] = data[p]
                p += 1
            else:
                grp[b] = 0
        if end == n - 1 and 1 <= last <= 4 and (bm >> (2 * last)) == 0:
            # last (partial) group followed by its trailer
            for k in range(last):
                words[nw + k] = <uint16_t>(grp[2 * k] | (<uint16_t>grp[2 * k + 1] << 8))
            nw += last
            pos = n
            status[0] = S_OK
            break
        for k in range(4):
            words[nw + k] = <uint16_t>(grp[2 * k] | (<uint16_t>grp[2 * k + 1] << 8))
        nw += 4
        pos = end
    offset[0] = pos
    return nw


cdef Py_ssize_t _ze_group_offset(const uint8_t* data, Py_ssize_t n, Py_ssize_t group) noexcept nogil:
    """Byte offset where ZE group number ``group`` starts (for error messages)."""
    cdef Py_ssize_t pos = 0, g = 0
    while pos < n and g < group:
        pos += 1 + POPCNT[data[pos]]
        g += 1
    return pos if pos < n else n


# Repetition folding (a livelocked thread's file decodes to billions of values: an endless
# loop of one short unit, which compresses to almost nothing).  The decoder watches the
# values it keeps: at every checkpoint it looks for a unit of at most FOLD_PERIOD values
# (calls and returns balanced) repeating up to the end of what it holds.  Once such a
# repetition is ``fold_after`` values long, all but its first ``fold_keep`` values (whole
# units) are given back, and the values that go on repeating it are counted, not kept.
# When the stream leaves the repetition (or ends), the part unit counted last is kept,
# and the fold is recorded (kept values before it, period, units not kept): the values
# kept are those of the same trace with fewer repetitions.
cdef enum:
    FOLD_PERIOD = 64             # config.LIVELOCK_PERIOD
    FOLD_WINDOW = 4096           # values a repetition is first recognised on
    FOLD_CHECK = 1 << 17         # values kept between checkpoints


cdef struct Kept:
    uint16_t* out
    Py_ssize_t o, cap, max_values, check_at
    Py_ssize_t fold_after, fold_keep
    int per_p                    # period of the repetition the kept values end in (0: none)
    Py_ssize_t per_start, verified
    int fold_p                   # period being counted (0: keeping values)
    Py_ssize_t fold_at           # kept values before the counted ones
    Py_ssize_t phase             # values counted past the last whole unit
    int64_t units                # whole units counted
    int64_t* folds               # (position, period, units, to_end) rows
    # what decode_checked needs to know that no kept value must be looked at again: the
    # largest value kept through _put (a fast copy repeats earlier values), calls minus
    # returns kept so far and its least value (below 0: a return with no call open)
    uint16_t top
    int64_t depth, low
    Py_ssize_t nfolds, folds_cap
    bint nomem


cdef int _grow(Kept* s, Py_ssize_t need) noexcept nogil:
    """Room for ``need`` values: 0, or 1 past max_values / out of memory (``nomem``)."""
    cdef Py_ssize_t newcap
    cdef uint16_t* tmp
    if need <= s.cap:
        return 0
    if need > s.max_values:
        return 1
    newcap = s.cap * 2
    if newcap < need:
        newcap = need
    if newcap > s.max_values:
        newcap = s.max_values
    tmp = <uint16_t*>realloc(s.out, sizeof(uint16_t) * (newcap + 1))
    if tmp == NULL:
        s.nomem = True
        return 1
    s.out = tmp
    s.cap = newcap
    return 0


cdef int _end_fold(Kept* s, int64_t to_end) noexcept nogil:
    """Leave the counted repetition: keep its last part unit, record the fold (``to_end``:
    the stream ended inside it)."""
    cdef Py_ssize_t p = s.fold_p, part = s.phase
    cdef int64_t* tmp
    s.fold_p = 0
    s.per_p = 0
    if _grow(s, s.o + part):
        return 1
    if part:
        memcpy(&s.out[s.o], &s.out[s.o - p], sizeof(uint16_t) * part)
        s.o += part
    if s.nfolds == s.folds_cap:
        s.folds_cap = 2 * s.folds_cap + 4
        tmp = <int64_t*>realloc(s.folds, sizeof(int64_t) * 4 * s.folds_cap)
        if tmp == NULL:
            s.nomem = True
            return 1
        s.folds = tmp
    s.folds[4 * s.nfolds] = s.fold_at
    s.folds[4 * s.nfolds + 1] = p
    s.folds[4 * s.nfolds + 2] = s.units
    s.folds[4 * s.nfolds + 3] = to_end
    s.nfolds += 1
    s.check_at = s.o + FOLD_CHECK
    return 0


cdef void _checkpoint(Kept* s) noexcept nogil:
    """Follow the repetition the kept values end in; fold it once it is long."""
    cdef Py_ssize_t o = s.o, i, p, w, keep, returns
    s.check_at = o + FOLD_CHECK
    if s.per_p:
        p = s.per_p
        i = s.verified
        while i < o and s.out[i] == s.out[i - p]:
            i += 1
        if i < o:
            s.per_p = 0
        else:
            s.verified = o
    if not s.per_p:
        w = FOLD_WINDOW
        if o < 2 * w:
            return
        for p in range(1, FOLD_PERIOD + 1):
            if memcmp(&s.out[o - w], &s.out[o - w - p], sizeof(uint16_t) * w) == 0:
                break
        else:
            return
        returns = 0
        for i in range(o - p, o):
            returns += s.out[i] == 0
        if 2 * returns != p:        # a unit that calls more than it returns is no loop
            return
        i = o - w
        while i > p and o - i < s.fold_after and s.out[i - 1] == s.out[i - 1 - p]:
            i -= 1
        s.per_p, s.per_start, s.verified = <int>p, i, o
    p = s.per_p
    if o - s.per_start < s.fold_after:
        return
    keep = (s.fold_keep // p + 1) * p
    s.fold_at = s.per_start + keep
    s.units = (o - s.fold_at) // p
    s.phase = (o - s.fold_at) % p
    s.o = s.fold_at
    s.fold_p = <int>p


cdef void _free_values(object capsule) noexcept:
    free(PyCapsule_GetPointer(capsule, NULL))


cdef object _own_values(Kept* s):
    """The kept values as a uint16 array over the decoder's own buffer (cut to size; the
    array frees it): no copy of a trace, and no fresh pages touched a second time."""
    cdef cnp.npy_intp n = s.o
    cdef uint16_t* kept = <uint16_t*>realloc(s.out, sizeof(uint16_t) * (s.o + 1))
    if kept != NULL:
        s.out = kept
    capsule = PyCapsule_New(s.out, NULL, _free_values)
    s.out = NULL            # the capsule owns it now
    cdef cnp.ndarray arr = cnp.PyArray_SimpleNewFromData(1, &n, cnp.NPY_UINT16, PyCapsule_GetPointer(capsule, NULL))
    cnp.set_array_base(arr, capsule)
    return arr


cdef inline int _put(Kept* s, uint16_t v) noexcept nogil:
    """One decoded value: counted inside a folded repetition, else kept.  1: no room."""
    if s.fold_p:
        if v == s.out[s.o - s.fold_p + s.phase]:
            s.phase += 1
            if s.phase == s.fold_p:
                s.phase = 0
                s.units += 1
            return 0
        if _end_fold(s, 0):
            return 1
    if s.o >= s.cap and _grow(s, s.o + 1):
        return 1
    s.out[s.o] = v
    s.o += 1
    s.top = v if v > s.top else s.top
    s.depth += 2 * (v != 0) - 1
    s.low = s.depth if s.depth < s.low else s.low
    if s.o >= s.check_at:
        _checkpoint(s)
    return 0


def decode(const unsigned char[::1] data, Py_ssize_t max_values=DEFAULT_MAX_VALUES,
           Py_ssize_t fold_after=0, Py_ssize_t fold_keep=0):
    """Decode one compressed ParLOT thread file.

    Returns ``(values, status, offset, folds)``: ``values`` a uint16 array, ``status`` one
    of OK, TRUNCATED (no trailer: values of the complete groups, ``offset`` = byte where
    the stream broke off), LIMIT (more than ``max_values`` values kept; ``values`` holds
    those decoded before the step that overflowed and ``offset`` the start of the group
    holding that step).  ``fold_after`` > 0: repetitions longer than that are folded (see
    above), ``folds`` an int64 array of rows (kept values before the fold, period, units
    not kept, 1 when the stream ended inside it), else empty.
    """
    cdef Kept s
    return _decode(data, max_values, fold_after, fold_keep, &s)


def decode_checked(const unsigned char[::1] data, Py_ssize_t n_names, Py_ssize_t max_values=DEFAULT_MAX_VALUES,
                   Py_ssize_t fold_after=0, Py_ssize_t fold_keep=0):
    """``decode`` and ``check_ids`` of its values: ``(values, status, offset, folds, bad,
    unmatched)``.  The decoder follows the largest value and the call depth as it keeps
    values, so a trace with no value beyond the names and no return before its call (all
    but damaged ones) is not read again."""
    cdef Kept s
    values, status, offset, folds = _decode(data, max_values, fold_after, fold_keep, &s)
    if s.top < n_names and s.low >= 0 and not s.nfolds and not s.fold_p:
        return values, status, offset, folds, -1, -1
    return (values, status, offset, folds) + check_ids(values, n_names)


cdef object _decode(const unsigned char[::1] data, Py_ssize_t max_values, Py_ssize_t fold_after,
                    Py_ssize_t fold_keep, Kept* kept):
    """``decode``, the decoder's state left in ``kept``."""
    cdef Py_ssize_t n = data.shape[0]
    cdef Py_ssize_t nw, wi = 0, wi_step = 0, o_step = 0, j
    cdef int status = S_OK
    cdef Py_ssize_t offset = 0, limit_word = -1
    cdef uint16_t* words = NULL
    cdef uint16_t* hbuf = NULL
    cdef uint16_t* pbuf = NULL
    cdef uint32_t h = 0, ppos = 0, lpos, cnt, dist, head
    cdef uint16_t v
    cdef int64_t depth, low
    cdef Py_ssize_t start
    cdef const uint8_t* src
    cdef int64_t[:, ::1] fres
    cdef Kept s
    memset(&s, 0, sizeof(Kept))
    s.max_values = max_values if max_values > 0 else 0
    s.fold_after = fold_after if fold_after > 2 * FOLD_WINDOW else 0
    s.fold_keep = fold_keep if fold_keep < s.fold_after else s.fold_after // 2
    s.check_at = FOLD_CHECK if s.fold_after else PY_SSIZE_T_MAX
    try:
        words = <uint16_t*>malloc(sizeof(uint16_t) * (4 * n + 4))
        hbuf = <uint16_t*>calloc(4096, sizeof(uint16_t))
        pbuf = <uint16_t*>calloc(65536, sizeof(uint16_t))
        if words == NULL or hbuf == NULL or pbuf == NULL:
            raise MemoryError()
        src = &data[0] if n > 0 else NULL
        with nogil:
            nw = _ze_decode(src, n, words, &status, &offset)
            # room for the values of most files at once (real LULESH: ~50 per word): pages
            # never written cost nothing, each growth copies what is kept; less if refused
            j = 64
            while s.out == NULL and j >= 4:
                s.cap = j * nw + 1024
                if s.cap > s.max_values:
                    s.cap = s.max_values
                s.out = <uint16_t*>malloc(sizeof(uint16_t) * (s.cap + 1))
                j //= 16
            if s.out == NULL:
                s.nomem = True
            while wi < nw and not s.nomem:
                wi_step, o_step = wi, s.o
                lpos = hbuf[h]
                if _ctx_match(pbuf, lpos, ppos):
                    cnt = words[wi]
                    wi += 1
                    if not s.fold_p and s.o + cnt < s.cap and s.o + cnt < s.check_at:
                        # the common case: room, no checkpoint.  A copy from ``dist`` values
                        # back that is longer than ``dist`` repeats its first ``dist`` values
                        # (it reads what it writes): those are copied value by value, the rest
                        # is replicated (``_copy_periodic``)
                        dist = (ppos - lpos) & 0xFFFF
                        head = dist if PERIODIC_MIN_DIST <= dist and cnt >= dist + PERIODIC_MIN_REST else cnt
                        depth, low = s.depth, s.low
                        start = s.o
                        for j in range(head):
                            v = pbuf[lpos]
                            lpos = (lpos + 1) & 0xFFFF
                            s.out[s.o] = v
                            s.o += 1
                            depth += 2 * (v != 0) - 1       # (no branch: calls and returns alternate)
                            low = depth if depth < low else low
                            _remember(hbuf, pbuf, &h, &ppos, v)
                        s.depth, s.low = depth, low
                        if head < cnt:
                            _copy_periodic(&s, start, head, cnt, hbuf, pbuf, &h, &ppos)
                        cnt = 0
                    for j in range(cnt):
                        v = pbuf[lpos]
                        lpos = (lpos + 1) & 0xFFFF
                        _remember(hbuf, pbuf, &h, &ppos, v)
                        if _put(&s, v):
                            break
                    else:
                        if wi >= nw:
                            break
                        j = -1
                    if j >= 0:
                        limit_word = wi_step
                        break
                v = words[wi]
                wi += 1
                _remember(hbuf, pbuf, &h, &ppos, v)
                if _put(&s, v):
                    limit_word = wi_step
                    break
            if s.fold_p and limit_word < 0 and not s.nomem and _end_fold(&s, 1):
                limit_word = nw
        if s.nomem:
            raise MemoryError()
        if limit_word >= 0:
            status = S_LIMIT
            offset = _ze_group_offset(src, n, limit_word // 4)
            if s.o > o_step:
                s.o = o_step
            while s.nfolds and s.folds[4 * (s.nfolds - 1)] > s.o:
                s.nfolds -= 1
        arr = _own_values(&s)
        folds = np.zeros((s.nfolds, 4), dtype=np.int64)
        if s.nfolds:
            fres = folds
            memcpy(&fres[0, 0], s.folds, sizeof(int64_t) * 4 * s.nfolds)
        return arr, status, (n if status == S_OK else offset), folds
    finally:
        kept[0] = s         # (its buffers go here: the callers read the counts)
        free(words)
        free(s.out)
        free(s.folds)
        free(hbuf)
        free(pbuf)


def decode_words(const unsigned char[::1] data):
    """Undo only the ZE layer: ``(words uint16 array, status, offset)`` (for tests/diagnostics)."""
    cdef Py_ssize_t n = data.shape[0], nw
    cdef int status = S_OK
    cdef Py_ssize_t offset = 0
    cdef uint16_t* words = <uint16_t*>malloc(sizeof(uint16_t) * (4 * n + 4))
    cdef uint16_t[::1] res
    if words == NULL:
        raise MemoryError()
    try:
        nw = _ze_decode(&data[0] if n > 0 else NULL, n, words, &status, &offset)
        arr = np.empty(nw, dtype=np.uint16)
        if nw > 0:
            res = arr
            memcpy(&res[0], words, sizeof(uint16_t) * nw)
        return arr, status, offset
    finally:
        free(words)


def encode(const uint16_t[::1] values):
    """Compress a value stream exactly as ParLOT does; returns the file's bytes."""
    cdef Py_ssize_t n = values.shape[0]
    cdef Py_ssize_t i = 0, nw = 0, ngroups, g, q, nb = 0, k, b
    cdef uint16_t* words = NULL
    cdef uint16_t* hbuf = NULL
    cdef uint16_t* pbuf = NULL
    cdef uint8_t* outb = NULL
    cdef uint32_t h = 0, ppos = 0, lpos, cnt
    cdef uint16_t v
    cdef uint8_t bm, byte
    cdef Py_ssize_t bmpos, last
    cdef const uint16_t* vals
    try:
        words = <uint16_t*>malloc(sizeof(uint16_t) * (2 * n + 2))
        hbuf = <uint16_t*>calloc(4096, sizeof(uint16_t))
        pbuf = <uint16_t*>calloc(65536, sizeof(uint16_t))
        # worst case: ceil(nw/4) groups of 9 bytes + trailer
        outb = <uint8_t*>malloc(9 * ((2 * n + 2) // 4 + 1) + 2)
        if words == NULL or hbuf == NULL or pbuf == NULL or outb == NULL:
            raise MemoryError()
        vals = &values[0] if n > 0 else NULL
        with nogil:
            # ---- LZ layer
            while i < n:
                lpos = hbuf[h]
                if _ctx_match(pbuf, lpos, ppos):
                    cnt = 0
                    while i < n and cnt < 65535 and vals[i] == pbuf[lpos]:
                        v = vals[i]
                        i += 1
                        cnt += 1
                        lpos = (lpos + 1) & 0xFFFF
                        _remember(hbuf, pbuf, &h, &ppos, v)
                    words[nw] = <uint16_t>cnt
                    nw += 1
                    if i >= n:
                        break
                v = vals[i]
                i += 1
                words[nw] = v
                nw += 1
                _remember(hbuf, pbuf, &h, &ppos, v)
            # ---- ZE layer (groups flushed lazily: the last group holds 1..4 words)
            if nw == 0:
                outb[0] = 0
                nb = 1
            else:
                ngroups = (nw + 3) // 4
                for g in range(ngroups):
                    q = nw - 4 * g
                    if q > 4:
                        q = 4
                    bmpos = nb
                    nb += 1
                    bm = 0
                    for k in range(q):
                        v = words[4 * g + k]
                        byte = <uint8_t>(v & 0xFF)
                        if byte != 0:
                            bm |= <uint8_t>(1 << (2 * k))
                            outb[nb] = byte
                            nb += 1
                        byte = <uint8_t>(v >> 8)
                        if byte != 0:
                            bm |= <uint8_t>(1 << (2 * k + 1))
                            outb[nb] = byte
                            nb += 1
                    outb[bmpos] = bm
                last = nw - 4 * (ngroups - 1)
                outb[nb] = <uint8_t>last
                nb += 1
        return outb[:nb]
    finally:
        free(words)
        free(hbuf)
        free(pbuf)
        free(outb)


def check_ids(const uint16_t[::1] values, Py_ssize_t n_names):
    """(index of the first value >= ``n_names`` or -1, index of the first return with no
    call open before that value or -1).  The first such return is where calls minus
    returns first drops below 0, so the depth needs no clamping and the loop no branch
    on calls and returns (they alternate as the program did, which no branch predictor
    guesses: several times slower on real traces)."""
    cdef Py_ssize_t n = values.shape[0], j, bad = -1, unmatched = -1
    cdef long long depth = 0
    cdef uint16_t v
    with nogil:
        for j in range(n):
            v = values[j]
            if v >= n_names:
                bad = j
                break
            depth += 2 * (v != 0) - 1
            if depth < 0:
                unmatched = j
                break
        if unmatched >= 0:
            for j in range(unmatched + 1, n):
                if values[j] >= n_names:
                    bad = j
                    break
    return bad, unmatched
