# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False, language_level=3
"""Text trace tokeniser: a whole file's bytes into int32 name ids, in one pass.

The format is :mod:`difftrace_mpi.readers.text`'s (one event per line, entry-only or
``> name`` / ``< name``; blank and ``#`` lines skipped; ``# incomplete`` marks a cut
trace).  :func:`tokenize` fills ``events`` and keeps the distinct names as byte spans of
the buffer in a C hash table; :meth:`Tokens.names` decodes them once each.  It returns a
status code and the positions of the first problem; the Python face
(``readers.text.read_text_trace``) words the errors, so that the messages are those of
the reader's documentation.  Errors come in the order a reader that first decides the
file's style, then reads its event lines in order, would meet them.

``utf8_error_at`` is the strict UTF-8 check the reader runs first (Python's own decoder
words the error).  Lines holding non-ASCII bytes and only whitespace otherwise are asked
of Python (``str.isspace``: Unicode whitespace counts as blank); comment lines are passed
to ``is_marker`` until one is an ``# incomplete`` marker.
"""
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memchr, memcmp, memcpy
from cpython.unicode cimport PyUnicode_DecodeUTF8

import numpy as np
cimport numpy as cnp

cnp.import_array()

cdef enum:
    S_OK = 0
    S_RESERVED = 1          # a name equal to RETURN_NAME
    S_EMPTY = 2             # "> " with nothing after it
    S_NEITHER = 3           # entry/exit style, a line that is neither "> name" nor "< name"
    S_NONE_OPEN = 4         # "< name" with no call open
    S_MISMATCH = 5          # "< name" that is not the innermost open call

OK, RESERVED, EMPTY, NEITHER, NONE_OPEN, MISMATCH = S_OK, S_RESERVED, S_EMPTY, S_NEITHER, S_NONE_OPEN, S_MISMATCH

# str.isspace() of the ASCII characters: \t \n \v \f \r, \x1c-\x1f and the space
cdef uint8_t ASCII_SPACE[128]
cdef int _c
for _c in range(128):
    ASCII_SPACE[_c] = 1 if chr(_c).isspace() else 0


cdef struct NameTable:
    int64_t* off          # span of name i (0-based; its id is i + 1) in the buffer
    int64_t* length
    uint64_t* hash
    Py_ssize_t count, cap
    int32_t* slots        # open addressing: 0 empty, else name index + 1
    uint64_t mask


cdef inline uint64_t _hash(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    """A multiplicative hash over 8-byte words (names are short: a few words each)."""
    cdef uint64_t h = <uint64_t>n * 0x9E3779B97F4A7C15ULL, w
    cdef Py_ssize_t i
    while n >= 8:
        memcpy(&w, p, 8)
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL
        h ^= h >> 32
        p += 8
        n -= 8
    if n:
        w = 0
        for i in range(n):
            w |= (<uint64_t>p[i]) << (8 * i)
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL
    return h ^ (h >> 29)


cdef int _grow_slots(NameTable* t) noexcept nogil:
    cdef uint64_t size = (t.mask + 1) * 2 if t.slots != NULL else 1024
    cdef int32_t* slots = <int32_t*>malloc(size * sizeof(int32_t))
    cdef Py_ssize_t i
    cdef uint64_t j
    if slots == NULL:
        return -1
    for j in range(size):
        slots[j] = 0
    for i in range(t.count):
        j = t.hash[i] & (size - 1)
        while slots[j] != 0:
            j = (j + 1) & (size - 1)
        slots[j] = <int32_t>(i + 1)
    free(t.slots)
    t.slots = slots
    t.mask = size - 1
    return 0


cdef int _grow_names(NameTable* t) noexcept nogil:
    cdef Py_ssize_t cap = t.cap * 2 if t.cap else 256
    cdef int64_t* off = <int64_t*>realloc(t.off, cap * sizeof(int64_t))
    if off == NULL:
        return -1
    t.off = off
    cdef int64_t* length = <int64_t*>realloc(t.length, cap * sizeof(int64_t))
    if length == NULL:
        return -1
    t.length = length
    cdef uint64_t* hsh = <uint64_t*>realloc(t.hash, cap * sizeof(uint64_t))
    if hsh == NULL:
        return -1
    t.hash = hsh
    t.cap = cap
    return 0


cdef int32_t _find(NameTable* t, const uint8_t* buf, Py_ssize_t a, Py_ssize_t n, uint64_t h) noexcept nogil:
    """The id of the name buf[a:a+n], or 0 when it is not in the table."""
    cdef uint64_t j = h & t.mask
    cdef int32_t s
    while True:
        s = t.slots[j]
        if s == 0:
            return 0
        s -= 1
        if t.hash[s] == h and t.length[s] == n and memcmp(buf + t.off[s], buf + a, n) == 0:
            return s + 1
        j = (j + 1) & t.mask


cdef int32_t _add(NameTable* t, Py_ssize_t a, Py_ssize_t n, uint64_t h) noexcept nogil:
    """Add a name not in the table; its id, or -1 when out of memory."""
    cdef uint64_t j
    if t.count >= t.cap and _grow_names(t) < 0:
        return -1
    if 2 * (t.count + 1) > <Py_ssize_t>(t.mask + 1) and _grow_slots(t) < 0:
        return -1
    t.off[t.count] = a
    t.length[t.count] = n
    t.hash[t.count] = h
    j = h & t.mask
    while t.slots[j] != 0:
        j = (j + 1) & t.mask
    t.count += 1
    t.slots[j] = <int32_t>t.count
    return <int32_t>t.count


cdef Py_ssize_t _utf8_error_at(const uint8_t* buf, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t k, need
    cdef uint8_t c, lo, hi
    cdef uint64_t w
    while i < n:
        if i + 8 <= n:                             # ASCII runs: eight bytes at a time
            memcpy(&w, buf + i, 8)
            if w & 0x8080808080808080ULL == 0:
                i += 8
                continue
        c = buf[i]
        if c < 0x80:
            i += 1
            continue
        lo, hi = 0x80, 0xBF
        if 0xC2 <= c <= 0xDF:
            need = 1
        elif 0xE0 <= c <= 0xEF:
            need = 2
            if c == 0xE0:
                lo = 0xA0                  # overlong
            elif c == 0xED:
                hi = 0x9F                  # surrogates
        elif 0xF0 <= c <= 0xF4:
            need = 3
            if c == 0xF0:
                lo = 0x90                  # overlong
            elif c == 0xF4:
                hi = 0x8F                  # above U+10FFFF
        else:
            return i
        for k in range(1, need + 1):
            if i + k >= n:
                return i
            c = buf[i + k]
            if c < lo or c > hi:
                return i
            lo, hi = 0x80, 0xBF
        i += need + 1
    return -1


def utf8_error_at(const uint8_t[::1] buf, Py_ssize_t start=0):
    """Offset of the first byte that makes ``buf[start:]`` invalid strict UTF-8 (as
    Python's decoder), or -1 when it is valid."""
    cdef Py_ssize_t at
    if buf.shape[0] <= start:
        return -1
    with nogil:
        at = _utf8_error_at(&buf[0], start, buf.shape[0])
    return at


def count_lines(const uint8_t[::1] buf, Py_ssize_t start=0):
    """Lines of ``buf[start:]``, as the reader counts them for sizing its arrays: the
    newlines plus one (a loop the compiler vectorises; bytes.count is several times slower)."""
    cdef Py_ssize_t i, n = buf.shape[0], count = 1
    with nogil:
        for i in range(start, n):
            count += buf[i] == 10
    return count


cdef class Tokens:
    """What :func:`tokenize` found: counts, the style, the first problem, the open calls."""
    cdef NameTable table
    cdef object buf
    cdef readonly int status
    cdef readonly Py_ssize_t count              # events written
    cdef readonly bint complete
    cdef readonly int64_t entry_exit_at          # line of the first "> "/"< " line; 0: entry-only
    # the first problem: its line, the span of the offending text (the name, or the whole
    # line for NEITHER), and for MISMATCH the open call's id and the line it was entered at
    cdef readonly int64_t err_line, err_start, err_end, err_open_id, err_open_line
    cdef int32_t* stack_ids
    cdef int64_t* stack_lines
    cdef readonly Py_ssize_t depth
    cdef Py_ssize_t stack_cap

    def __dealloc__(self):
        free(self.table.off)
        free(self.table.length)
        free(self.table.hash)
        free(self.table.slots)
        free(self.stack_ids)
        free(self.stack_lines)

    @property
    def name_count(self):
        return self.table.count

    @property
    def name_bytes(self):
        """Total length of the distinct names (what decoding them holds, with their count)."""
        cdef Py_ssize_t i, total = 0
        for i in range(self.table.count):
            total += self.table.length[i]
        return total

    def names(self, first):
        """Object array: ``first`` at index 0, then the distinct names (str), by id."""
        cdef Py_ssize_t i
        cdef const uint8_t[::1] view = self.buf
        cdef const char* base = <const char*>&view[0] if view.shape[0] else NULL
        out = np.empty(self.table.count + 1, dtype=object)
        out[0] = first
        for i in range(self.table.count):
            out[i + 1] = PyUnicode_DecodeUTF8(base + self.table.off[i], self.table.length[i], NULL)
        return out

    def open_calls(self):
        """Ids of the calls still open at the end (entry/exit style), outermost first."""
        return [self.stack_ids[i] for i in range(self.depth)]

    cdef int push(self, int32_t name_id, int64_t line) noexcept nogil:
        cdef Py_ssize_t cap
        cdef int32_t* ids
        cdef int64_t* lines
        if self.depth >= self.stack_cap:
            cap = self.stack_cap * 2 if self.stack_cap else 64
            ids = <int32_t*>realloc(self.stack_ids, cap * sizeof(int32_t))
            if ids == NULL:
                return -1
            self.stack_ids = ids
            lines = <int64_t*>realloc(self.stack_lines, cap * sizeof(int64_t))
            if lines == NULL:
                return -1
            self.stack_lines = lines
            self.stack_cap = cap
        self.stack_ids[self.depth] = name_id
        self.stack_lines[self.depth] = line
        self.depth += 1
        return 0


cdef inline bint _is_reserved(const uint8_t* p, Py_ssize_t n, const uint8_t* reserved, Py_ssize_t rn) noexcept nogil:
    return n == rn and memcmp(p, reserved, n) == 0


def tokenize(data, Py_ssize_t start, cnp.int32_t[::1] events, bytes reserved, is_blank, is_marker):
    """Read the lines of ``data[start:]`` (a bytes-like object, valid UTF-8, that slices:
    bytes or a memoryview) into ``events`` (capacity:
    at least the number of lines).  ``reserved``: the UTF-8 of the reserved name;
    ``is_blank(bytes)``: whether a line with non-ASCII bytes is whitespace only;
    ``is_marker(bytes)``: whether a comment line marks the trace incomplete (both get a
    slice of ``data``).  Returns a
    :class:`Tokens`; MemoryError when the C tables cannot grow."""
    cdef const uint8_t[::1] view = data
    cdef const uint8_t* buf = &view[0] if view.shape[0] else NULL
    cdef const uint8_t* rbuf = reserved
    cdef Py_ssize_t rn = len(reserved)
    cdef Py_ssize_t n = view.shape[0], pos = start, eol, end, a, k, i, nlen
    cdef Py_ssize_t cap = events.shape[0], count = 0
    cdef int64_t lineno = 0
    cdef int64_t first_event_line = 0, first_event_start = 0, first_event_end = 0
    cdef int64_t deferred_line = 0, deferred_start = 0, deferred_end = 0
    cdef const uint8_t* p
    cdef uint8_t c
    cdef bint blank, wide, entry_style_known = False, entry_exit = False
    cdef int32_t name_id
    cdef uint64_t h
    cdef Tokens tok = Tokens()
    tok.buf = data
    tok.complete = True
    tok.status = S_OK
    if _grow_slots(&tok.table) < 0:
        raise MemoryError()

    while pos < n:
        lineno += 1
        p = <const uint8_t*>memchr(buf + pos, 10, n - pos)
        eol = (p - buf) if p != NULL else n
        end = eol
        if end > pos and buf[end - 1] == 13:
            end -= 1
        a = pos
        pos = eol + 1
        # blank: empty or whitespace only (Unicode whitespace too, as str.strip)
        if end == a:
            continue
        c = buf[a]
        if c >= 128 or ASCII_SPACE[c]:
            blank, wide = True, False
            for k in range(a, end):
                c = buf[k]
                if c >= 128:
                    wide = True
                elif not ASCII_SPACE[c]:
                    blank = False
                    break
            if blank and wide:
                blank = is_blank(data[a:end])
            if blank:
                continue
            c = buf[a]
        if c == 35:                                       # '#': a comment
            if tok.complete and is_marker(data[a:end]):
                tok.complete = False
            continue
        # an event line
        if count >= cap:                                  # the caller sizes events by lines
            raise ValueError("events array smaller than the line count")
        if not entry_style_known:
            entry_style_known = True
            entry_exit = end - a >= 2 and (c == 62 or c == 60) and buf[a + 1] == 32
            if entry_exit:
                tok.entry_exit_at = lineno
            else:
                first_event_line, first_event_start, first_event_end = lineno, a, end
        if not entry_exit:
            if end - a >= 2 and (c == 62 or c == 60) and buf[a + 1] == 32:
                # the file is in entry/exit style after all: its first event line is wrong
                tok.entry_exit_at = lineno
                tok.status = S_NEITHER
                tok.err_line, tok.err_start, tok.err_end = first_event_line, first_event_start, first_event_end
                break
            if deferred_line:
                continue                                  # only a style error may still come first
            nlen = end - a
            h = _hash(buf + a, nlen)
            name_id = _find(&tok.table, buf, a, nlen, h)
            if name_id == 0:
                if _is_reserved(buf + a, nlen, rbuf, rn):
                    deferred_line, deferred_start, deferred_end = lineno, a, end
                    continue
                name_id = _add(&tok.table, a, nlen, h)
                if name_id < 0:
                    raise MemoryError()
            events[count] = name_id
            count += 1
            continue
        # entry/exit style
        if end - a < 2 or buf[a + 1] != 32 or (c != 62 and c != 60):
            tok.status = S_NEITHER
            tok.err_line, tok.err_start, tok.err_end = lineno, a, end
            break
        nlen = end - a - 2
        if c == 62:                                       # "> name"
            h = _hash(buf + a + 2, nlen)
            name_id = _find(&tok.table, buf, a + 2, nlen, h)
            if name_id == 0:
                if _is_reserved(buf + a + 2, nlen, rbuf, rn) or nlen == 0:
                    tok.status = S_RESERVED if nlen else S_EMPTY
                    tok.err_line, tok.err_start, tok.err_end = lineno, a + 2, end
                    break
                name_id = _add(&tok.table, a + 2, nlen, h)
                if name_id < 0:
                    raise MemoryError()
            if tok.push(name_id, lineno) < 0:
                raise MemoryError()
            events[count] = name_id
            count += 1
        else:                                             # "< name"
            if tok.depth == 0:
                tok.status = S_NONE_OPEN
                tok.err_line, tok.err_start, tok.err_end = lineno, a + 2, end
                break
            name_id = tok.stack_ids[tok.depth - 1]
            i = name_id - 1
            if tok.table.length[i] != nlen or memcmp(buf + tok.table.off[i], buf + a + 2, nlen) != 0:
                tok.status = S_MISMATCH
                tok.err_line, tok.err_start, tok.err_end = lineno, a + 2, end
                tok.err_open_id, tok.err_open_line = name_id, tok.stack_lines[tok.depth - 1]
                break
            tok.depth -= 1
            events[count] = 0
            count += 1
    if tok.status == S_OK and deferred_line:
        tok.status = S_RESERVED
        tok.err_line, tok.err_start, tok.err_end = deferred_line, deferred_start, deferred_end
    tok.count = count
    return tok
