# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
# distutils: language = c++
"""Order-free blocks of a call/return stream folded into a canonical form.

Where a program completes messages in arrival order (``MPI_Waitany``, ``MPI_Test`` polling,
``MPI_ANY_SOURCE``) or shares a loop out dynamically, the order and number of the calls
that follow differ between two good runs.  ``canonical_order`` rewrites such a stretch of
sibling calls as the set of call paths it holds, each path once, children sorted by id:
two stretches that differ only in order or repetition become equal, while a call or an
argument (an annotated name) that no good run makes there stays visible.

A stretch (a *free block*) starts, among the children of one call, at the first child
that is a nondeterministic completion or that ends with one still open (a helper that
polls), and ends before the next child that synchronises deterministically (a collective,
``MPI_Wait``/``Waitall``, a child that holds one and is itself closed), or at the parent's
return.  The body of a dynamically scheduled OpenMP region is one block.  A trace that
stops inside a block (a hung or killed run) loses the unfinished block: what it did there
depends on arrival order, so it stops where the block began.

Flags per id (``ORDER_*``).  Status codes, never exceptions: the face
(``stages/order.py``) raises.
"""
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t
from libcpp.vector cimport vector
from libcpp.algorithm cimport sort as cpp_sort
from libcpp.pair cimport pair

import numpy as np

ctypedef fused stored_event:
    int32_t
    uint16_t

# flags per global id
ORDER_FREE = 1          # a nondeterministic completion: what follows depends on arrival
ORDER_SYNC = 2          # a deterministic synchronisation: ends a free block
ORDER_DYNAMIC = 4       # starts a dynamically scheduled region: its child's body is free
ORDER_BODY = 8          # a region body known (from its process's main thread) to be free

# status codes
ORDER_OK = 0
ORDER_BAD_ID = 1        # an event outside the flag table


cdef struct Frame:
    int32_t fid             # the call's id (-1: the trace's top level)
    int64_t start           # output position of the call's own event
    int64_t raw             # input position of the call's own event
    int64_t raw_block       # input position where its free block began
    int64_t block           # output position where its free block began (-1: none)
    int32_t root            # the block's trie root (a node index)
    bint has_sync           # a deterministic synchronisation somewhere below
    bint free_body          # its whole body is one free block


cdef struct Node:
    int32_t fid
    int32_t child           # first child (-1)
    int32_t sibling         # next sibling (-1)


cdef class _Trie:
    cdef vector[Node] nodes

    cdef int32_t new(self, int32_t fid):
        cdef Node n
        n.fid, n.child, n.sibling = fid, -1, -1
        self.nodes.push_back(n)
        return <int32_t>(self.nodes.size() - 1)

    cdef int32_t child_of(self, int32_t parent, int32_t fid):
        cdef int32_t c = self.nodes[parent].child
        while c >= 0:
            if self.nodes[c].fid == fid:
                return c
            c = self.nodes[c].sibling
        c = self.new(fid)
        self.nodes[c].sibling = self.nodes[parent].child
        self.nodes[parent].child = c
        return c


cdef void _insert(_Trie trie, int32_t root, stored_event[::1] out, int64_t a, int64_t b,
                  vector[int32_t] &path):
    """Add the balanced slice out[a:b] (one or more whole calls) to the trie under root."""
    cdef int64_t i
    cdef int32_t cur = root
    cdef int32_t e
    path.clear()
    for i in range(a, b):
        e = <int32_t>out[i]
        if e != 0:
            path.push_back(cur)
            cur = trie.child_of(cur, e)
        elif path.size():
            cur = path.back()
            path.pop_back()


cdef int64_t _emit(_Trie trie, int32_t root, stored_event[::1] out, int64_t pos,
                   vector[pair[int32_t, int32_t]] &work, vector[int32_t] &kids):
    """Write the trie under root as calls and returns, children by ascending id; returns
    the next output position."""
    cdef int32_t c, n
    cdef size_t k, first
    cdef pair[int32_t, int32_t] item
    work.clear()
    # (node, 0): enter it; (node, 1): its return.  Children pushed in descending id.
    kids.clear()
    c = trie.nodes[root].child
    while c >= 0:
        kids.push_back(c)
        c = trie.nodes[c].sibling
    _push_sorted(trie, kids, work)
    while work.size():
        item = work.back()
        work.pop_back()
        n = item.first
        if item.second == 1:
            out[pos] = 0
            pos += 1
            continue
        out[pos] = <stored_event>trie.nodes[n].fid
        pos += 1
        item.second = 1
        work.push_back(item)
        kids.clear()
        c = trie.nodes[n].child
        while c >= 0:
            kids.push_back(c)
            c = trie.nodes[c].sibling
        _push_sorted(trie, kids, work)
    return pos


cdef void _push_sorted(_Trie trie, vector[int32_t] &kids, vector[pair[int32_t, int32_t]] &work):
    cdef vector[pair[int32_t, int32_t]] keyed
    cdef size_t k
    for k in range(kids.size()):
        keyed.push_back(pair[int32_t, int32_t](trie.nodes[kids[k]].fid, kids[k]))
    cpp_sort(keyed.begin(), keyed.end())
    for k in range(keyed.size()):       # the smallest id last: popped first
        work.push_back(pair[int32_t, int32_t](keyed[keyed.size() - 1 - k].second, 0))


def canonical_order(stored_event[::1] events, const uint8_t[::1] flags, stored_event[::1] out, int64_t[::1] stats):
    """Write the canonical form of ``events`` into ``out`` (as long as ``events``).
    ``flags``: ORDER_* per id.  ``stats`` (5 int64, written): [output length, free blocks
    folded, events those blocks held, events dropped with an unfinished block, regions
    found free].  Returns a status code; bodies of dynamic regions met are set ORDER_BODY
    by ``dynamic_bodies`` and the face, not here."""
    cdef int64_t n = events.shape[0], nflags = flags.shape[0]
    cdef int64_t i, j, pos = 0, a, b, k, folded = 0, held = 0, dropped = 0, regions = 0
    cdef int32_t e
    cdef uint8_t fl
    cdef vector[Frame] stack
    cdef Frame f, top
    cdef _Trie trie = _Trie()
    cdef vector[int32_t] path, kids
    cdef vector[pair[int32_t, int32_t]] work
    cdef vector[stored_event] aside
    cdef int active = 0
    cdef bint synced_above = False
    cdef bint child_free, child_sync
    f.fid, f.start, f.raw, f.raw_block, f.block, f.root, f.has_sync, f.free_body = -1, 0, 0, 0, -1, -1, False, False
    stack.push_back(f)
    for i in range(n):
        e = <int32_t>events[i]
        if e < 0 or e >= nflags:
            return ORDER_BAD_ID
        if e != 0:
            if (flags[e] & ORDER_SYNC) and stack.back().block >= 0:
                # a synchronisation entered ends the block even if it never returns (a hang)
                pos = _emit(trie, stack.back().root, out, stack.back().block, work, kids)
                stack.back().block = -1
                folded += 1
                active -= 1
            f.fid, f.start, f.raw, f.block, f.root, f.has_sync = e, pos, i, -1, -1, False
            f.free_body = (flags[e] & ORDER_BODY) != 0 or (stack.back().fid >= 0 and
                                                           (flags[stack.back().fid] & ORDER_DYNAMIC) != 0)
            out[pos] = events[i]
            pos += 1
            if f.free_body:
                regions += 1
                f.block, f.root, f.raw_block = pos, trie.new(-1), i + 1
                active += 1
            stack.push_back(f)
            continue
        if stack.size() == 1:           # a return with no open call: kept as it is
            out[pos] = 0
            pos += 1
            continue
        f = stack.back()
        stack.pop_back()
        child_free = (flags[f.fid] & ORDER_FREE) != 0
        if f.block >= 0:                # its block ends with it: fold it
            pos = _emit(trie, f.root, out, f.block, work, kids)
            folded += 1
            active -= 1
            child_free = child_free or not f.free_body      # still open when it returned
        out[pos] = 0
        pos += 1
        fl = flags[f.fid]
        child_sync = ((fl & ORDER_SYNC) != 0 or f.has_sync) and not child_free
        top = stack.back()
        if f.has_sync or (fl & ORDER_SYNC):
            stack.back().has_sync = True
        if top.block >= 0:
            if child_sync:              # the block ends before this child: fold, then the child
                aside.assign(&out[f.start], &out[f.start] + (pos - f.start))
                pos = _emit(trie, top.root, out, top.block, work, kids)
                for k in range(<int64_t>aside.size()):
                    out[pos + k] = aside[k]
                pos += <int64_t>aside.size()
                stack.back().block = -1
                folded += 1
                active -= 1
            else:                       # one more call of the block
                held += pos - f.start
                _insert(trie, top.root, out, f.start, pos, path)
                pos = f.start
        elif child_free:                # a block starts with this child
            stack.back().block, stack.back().root, stack.back().raw_block = f.start, trie.new(-1), f.raw
            active += 1
            held += pos - f.start
            _insert(trie, stack.back().root, out, f.start, pos, path)
            pos = f.start
        if active == 0 and trie.nodes.size() > 4096:
            trie.nodes.clear()
    # the end: a block still open in a call still open is unfinished: cut there, unless a
    # call opened after it entered a synchronisation (that call would have ended the
    # block: it is folded, as it would have been).  A block open at the top level of a
    # trace whose calls all returned ends with the trace.
    synced_above = 0
    for k in range(<int64_t>stack.size() - 1, -1, -1):     # frames above k entered a sync?
        stack[k].has_sync = stack[k].has_sync or synced_above
        synced_above = synced_above or stack[k].has_sync or (stack[k].fid >= 0 and (flags[stack[k].fid] & ORDER_SYNC))
    for k in range(<int64_t>stack.size()):
        if stack[k].block < 0:
            continue
        if k == 0 and stack.size() == 1:
            pos = _emit(trie, stack[0].root, out, stack[0].block, work, kids)
            folded += 1
            break
        if k + 1 < <int64_t>stack.size() and stack[k].has_sync:
            a = stack[k].block
            aside.assign(&out[a], &out[a] + (pos - a))
            b = _emit(trie, stack[k].root, out, a, work, kids)
            for j in range(<int64_t>aside.size()):
                out[b + j] = aside[j]
            pos = b + <int64_t>aside.size()
            for j in range(k + 1, <int64_t>stack.size()):
                stack[j].start += b - a
                if stack[j].block >= 0:
                    stack[j].block += b - a
            stack[k].block = -1
            folded += 1
            continue
        dropped = n - stack[k].raw_block
        pos = stack[k].block
        break
    stats[0], stats[1], stats[2], stats[3], stats[4] = pos, folded, held, dropped, regions
    stats[5] = n - dropped if dropped else -1
    return ORDER_OK


def dynamic_bodies(stored_event[::1] events, const uint8_t[::1] flags):
    """The ids called directly inside an ORDER_DYNAMIC call (the outlined bodies of
    dynamically scheduled regions), as a sorted int32 array; -1 entries never occur.
    Returns (status, ids)."""
    cdef int64_t n = events.shape[0], nflags = flags.shape[0], i
    cdef int32_t e
    cdef vector[int32_t] stack
    cdef vector[int32_t] found
    for i in range(n):
        e = <int32_t>events[i]
        if e < 0 or e >= nflags:
            return ORDER_BAD_ID, np.empty(0, np.int32)
        if e != 0:
            if stack.size() and (flags[stack.back()] & ORDER_DYNAMIC):
                found.push_back(e)
            stack.push_back(e)
        elif stack.size():
            stack.pop_back()
    arr = np.unique(np.asarray([found[k] for k in range(<int64_t>found.size())], dtype=np.int32))
    return ORDER_OK, arr


def scan_order(stored_event[::1] events, const uint8_t[::1] flags, uint8_t mask):
    """(status, has_returns, has_flagged): whether the trace holds a return and an event
    whose flags meet ``mask``; one pass, stopping as soon as both are known."""
    cdef int64_t n = events.shape[0], nflags = flags.shape[0], i
    cdef int32_t e
    cdef bint ret = False, hit = False
    for i in range(n):
        e = <int32_t>events[i]
        if e < 0 or e >= nflags:
            return ORDER_BAD_ID, False, False
        if e == 0:
            ret = True
        elif flags[e] & mask:
            hit = True
        if ret and hit:
            break
    return ORDER_OK, ret, hit
