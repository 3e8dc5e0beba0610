# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
# distutils: language = c++
"""Order-free blocks of a call/return stream folded into a canonical form.

Where a program completes messages in arrival order (``MPI_Waitany``, ``MPI_Test`` polling,
``MPI_ANY_SOURCE``) or shares a loop out dynamically, the order and number of the calls
that follow differ between two good runs.  ``canonical_order`` rewrites such a stretch of
sibling calls as the set of calls it holds (each distinct id once, as a leaf, sorted):
two stretches that differ only in order or repetition become equal, while a call or an
argument (an annotated name) that no good run makes there stays visible.

A stretch (a *free block*) starts, among the children of one call, at the first child
that is a nondeterministic completion or that returns with a block still open (a helper
that polls), and ends before the next child that synchronises deterministically (a
collective, ``MPI_Wait``/``Waitall``, a child that holds one), when such a child is
entered, or at the parent's return.  A body known to be free (BODY: its call counts vary,
learnt by ``varying_parents`` from the normal trace) is one block; a dynamic region's
body and the calls before ``GOMP_loop_end`` (SHARE: a thread's share) are dropped.  A
trace that stops inside a block (a hung or killed run) loses the unfinished block: what it
did there depends on arrival, so it stops where the block began.

Flags per id (``ORDER_*``).  Status codes, never exceptions: the face
(``stages/compare/order.py``) raises.
"""
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint64_t
from libcpp.vector cimport vector
from libcpp.algorithm cimport fill, sort as cpp_sort

import numpy as np

ctypedef fused stored_event:
    int32_t
    uint16_t

# flags per global id (C constants in the loops, the same values for Python)
cdef enum:
    FREE_BIT = 1        # a nondeterministic completion: what follows depends on arrival
    SYNC_BIT = 2        # a deterministic synchronisation: ends a free block
    DYNAMIC_BIT = 4     # starts a dynamically scheduled region: its child's body is free
    BODY_BIT = 8        # a body known to be free: its calls' numbers vary from call to call
    SHARE_BIT = 16      # a dynamically scheduled region's body: a thread's share, any (even none)
    SHARE_END_BIT = 32  # ends a dynamically scheduled loop: the calls before it are a share
    RUN_BIT = 64        # a region body its process's main thread ran inside a free block: a
                        # worker runs such bodies in arrival order (a run of them is a block)
ORDER_FREE, ORDER_SYNC, ORDER_DYNAMIC, ORDER_BODY, ORDER_SHARE, ORDER_SHARE_END, ORDER_RUN = (
    FREE_BIT, SYNC_BIT, DYNAMIC_BIT, BODY_BIT, SHARE_BIT, SHARE_END_BIT, RUN_BIT)

cdef enum:
    SMALLEST = -2       # a block's wrapper: the smallest id of its set

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
    bint share              # ... and its content is not compared (a dynamic share)
    int64_t boundary        # output position after its last synchronising child (or its own event)
    int32_t first           # the call that began its block (-1: a free body; SMALLEST: a run of bodies)
    bint run_only           # its block is a run of RUN bodies: it ends at the first other child


cdef struct Node:
    int32_t fid
    int32_t child           # first child (-1)
    int32_t sibling         # next sibling (-1)


cdef class _Trie:
    cdef vector[Node] nodes

    cdef int32_t new(self, int32_t fid) noexcept:
        cdef Node n
        n.fid, n.child, n.sibling = fid, -1, -1
        self.nodes.push_back(n)
        return <int32_t>(self.nodes.size() - 1)

    cdef int32_t child_of(self, int32_t parent, int32_t fid) noexcept:
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
                  uint8_t[::1] inside, int32_t* member) noexcept:
    """Add the calls of the slice out[a:b] to the block's set under root (one leaf per
    distinct id, whatever its depth: which helper handled a message depends on arrival
    too); each id added is marked in ``inside``."""
    cdef int64_t i
    cdef int32_t e
    for i in range(a, b):
        e = <int32_t>out[i]
        if e != 0 and member[e] != root:
            # (member: the root each id went into last, so a repeated call skips the set's
            # search; an id that went into another block meanwhile is searched for again)
            inside[e] = 1
            trie.child_of(root, e)
            member[e] = root


cdef int64_t _emit_block(_Trie trie, int32_t root, int32_t first, stored_event[::1] out, int64_t pos,
                         vector[int32_t] &kids) noexcept:
    """Write a block's set at out[pos]: under the call that began it (``first``: one
    call in the caller's sequence, as deterministic as the calls before it, so the
    caller's loops stay short), or bare (-1: a free body, whose own call holds it).
    ``SMALLEST``: under its smallest id (a set whose first call varies).  Returns the
    next output position."""
    cdef int32_t c, prev = -1
    if first == SMALLEST:
        c = trie.nodes[root].child
        first = -1
        while c >= 0:
            if first < 0 or trie.nodes[c].fid < first:
                first = trie.nodes[c].fid
            c = trie.nodes[c].sibling
    if first >= 0:
        # the call that began it is the wrapper, not one more leaf (what is written is then
        # never longer than the block: each distinct call at most once, as a call and a return)
        c = trie.nodes[root].child
        while c >= 0 and trie.nodes[c].fid != first:
            prev, c = c, trie.nodes[c].sibling
        if c >= 0:
            if prev < 0:
                trie.nodes[root].child = trie.nodes[c].sibling
            else:
                trie.nodes[prev].sibling = trie.nodes[c].sibling
        out[pos] = <stored_event>first
        pos = _emit(trie, root, out, pos + 1, kids)
        out[pos] = 0
        return pos + 1
    return _emit(trie, root, out, pos, kids)


cdef int64_t _emit(_Trie trie, int32_t root, stored_event[::1] out, int64_t pos, vector[int32_t] &kids) noexcept:
    """Write the set under root (one level: ``_insert`` keeps it flat) as leaf calls, a
    call and its return each, by ascending id; returns the next output position."""
    cdef int32_t c = trie.nodes[root].child
    cdef size_t k
    kids.clear()
    while c >= 0:
        kids.push_back(trie.nodes[c].fid)
        c = trie.nodes[c].sibling
    cpp_sort(kids.begin(), kids.end())
    for k in range(kids.size()):
        out[pos] = <stored_event>kids[k]
        out[pos + 1] = 0
        pos += 2
    return pos


def canonical_order(stored_event[::1] events, const uint8_t[::1] flags, stored_event[::1] out, int64_t[::1] stats,
                    uint8_t[::1] inside, uint8_t[::1] opened, const uint8_t[::1] seen, bint learnt):
    """Write the canonical form of ``events`` into ``out`` (as long as ``events``); set
    ``inside[id]`` (as long as ``flags``) for every id met inside a free block.
    ``opened`` (as long as ``flags``): the functions that returned with a block still
    open, so that their calls make a block in their caller (a helper that polls): set
    here, or with ``learnt``, read (what the normal twin taught: a function whose block
    a fault left unclosed, an MPI_Allreduce skipped, keeps its calls to itself).
    ``flags``: ORDER_* per id.  ``stats`` (7 int64, written): [output length, free blocks
    folded, events those blocks held, events dropped with an unfinished block, regions
    found free, the raw position where an unfinished block was cut (-1: none), the output
    position where it began].  ``seen`` (as long as ``flags``, read with ``learnt``): the
    ids the normal twin made; of an unfinished block only the calls it never made are
    kept (a message with a wrong tag sent before the hang), under the call that began
    it.  Returns a status code; bodies of dynamic regions met are set BODY_BIT
    by ``dynamic_bodies`` and the face, not here."""
    cdef int64_t n = events.shape[0], nflags = flags.shape[0]
    cdef int64_t i, j, pos = 0, a, b, k, folded = 0, held = 0, dropped = 0, regions = 0
    cdef int32_t e
    cdef uint8_t fl
    cdef vector[Frame] stack         # stack[0]: the top level; stack[depth]: the innermost call
    cdef int64_t depth = 0           # (frames are written and read in place: copying them cost
    cdef Frame* fp                   # a third of the loop on miniGhost's 378 M events)
    cdef Frame* top_ptr
    cdef _Trie trie = _Trie()
    cdef vector[int32_t] kids
    cdef vector[stored_event] aside
    cdef vector[int32_t] member = vector[int32_t](nflags, -1)
    cdef int active = 0
    cdef bint synced_above = False
    cdef bint child_free, child_sync, child_run, synced_here
    cdef int64_t cut_at = -1, unseen
    cdef int32_t wrap, root
    stack.resize(64)
    fp = &stack[0]
    fp.fid, fp.start, fp.raw, fp.raw_block, fp.block, fp.root, fp.has_sync, fp.free_body = -1, 0, 0, 0, -1, -1, False, False
    fp.share, fp.boundary, fp.first, fp.run_only = False, 0, -1, False
    for i in range(n):
        e = <int32_t>events[i]
        if e < 0 or e >= nflags:
            return ORDER_BAD_ID
        if e != 0:
            top_ptr = &stack[depth]
            if (flags[e] & SYNC_BIT) and top_ptr.block >= 0:
                # a synchronisation entered ends the block even if it never returns (a hang)
                pos = _emit_block(trie, top_ptr.root, top_ptr.first, out, top_ptr.block, kids)
                top_ptr.block = -1
                folded += 1
                active -= 1
            if flags[e] & SHARE_END_BIT:
                # the end of a dynamically scheduled loop: what this thread did since the
                # last synchronisation was its share, any (even none): not compared
                if top_ptr.block >= 0 or pos > top_ptr.boundary:
                    folded += 1
                if top_ptr.block >= 0:
                    top_ptr.block = -1
                    active -= 1
                for k in range(top_ptr.boundary, pos):
                    inside[<int32_t>out[k]] = 1
                pos = min(pos, top_ptr.boundary)
            depth += 1
            if depth == <int64_t>stack.size():
                stack.resize(2 * stack.size())
            top_ptr = &stack[depth - 1]
            fp = &stack[depth]
            fp.fid, fp.start, fp.raw, fp.block, fp.root, fp.has_sync = e, pos, i, -1, -1, False
            fp.first, fp.run_only = -1, False
            fp.share = (flags[e] & SHARE_BIT) != 0 or (top_ptr.fid >= 0 and (flags[top_ptr.fid] & DYNAMIC_BIT) != 0)
            fp.free_body = fp.share or (flags[e] & BODY_BIT) != 0
            out[pos] = events[i]
            pos += 1
            fp.boundary = pos
            if fp.free_body:
                regions += 1
                fp.block, fp.root, fp.raw_block, fp.first = pos, trie.new(-1), i + 1, -1
                active += 1
            continue
        if depth == 0:                  # a return with no open call: kept as it is
            out[pos] = 0
            pos += 1
            continue
        fp = &stack[depth]              # popped: read in place until the next call is entered
        depth -= 1
        top_ptr = &stack[depth]
        child_free = (flags[fp.fid] & FREE_BIT) != 0
        if fp.block >= 0:               # its block ends with it: fold it (a share: drop it)
            pos = fp.block if fp.share else _emit_block(trie, fp.root, fp.first, out, fp.block, kids)
            folded += 1
            active -= 1
            if not fp.free_body:         # still open when it returned
                if learnt:
                    child_free = child_free or opened[fp.fid] != 0
                else:
                    child_free = True
                    opened[fp.fid] = 1
        out[pos] = 0
        pos += 1
        fl = flags[fp.fid]
        child_sync = ((fl & SYNC_BIT) != 0 or fp.has_sync) and not child_free
        child_run = (fl & RUN_BIT) != 0 and not child_sync
        if fp.has_sync or (fl & SYNC_BIT):
            top_ptr.has_sync = True
        if child_sync or (fl & SHARE_END_BIT):
            top_ptr.boundary = pos
        if top_ptr.block >= 0 and (child_sync or (top_ptr.run_only and not child_run and not child_free)):
            # the block ends before this child: fold, then the child
            aside.assign(&out[fp.start], &out[fp.start] + (pos - fp.start))
            pos = _emit_block(trie, top_ptr.root, top_ptr.first, out, top_ptr.block, kids)
            for k in range(<int64_t>aside.size()):
                out[pos + k] = aside[k]
            pos += <int64_t>aside.size()
            top_ptr.block = -1
            folded += 1
            active -= 1
        elif top_ptr.block >= 0:        # one more call of the block
            if child_free:
                top_ptr.run_only = False
            held += pos - fp.start
            _insert(trie, top_ptr.root, out, fp.start, pos, inside, member.data())
            pos = fp.start
        elif child_free or child_run:   # a block starts with this child
            top_ptr.block, top_ptr.root, top_ptr.raw_block = fp.start, trie.new(-1), fp.raw
            # (a run of region bodies begins with whichever came first: it is written
            # under its smallest id, one call as its main thread's block holds one region
            # start, so a worker's k-th call still meets its main thread's k-th region)
            top_ptr.first, top_ptr.run_only = (fp.fid if child_free else SMALLEST), not child_free
            active += 1
            held += pos - fp.start
            _insert(trie, top_ptr.root, out, fp.start, pos, inside, member.data())
            pos = fp.start
        if active == 0 and trie.nodes.size() > 4096:
            trie.nodes.clear()
            fill(member.begin(), member.end(), -1)      # the roots' numbers start again
    stack.resize(depth + 1)             # the calls still open, for the end
    # the end: a block still open in a call still open is unfinished: cut there, unless a
    # call opened after it entered a synchronisation (that call would have ended the
    # block: it is folded, as it would have been).  A block open at the top level of a
    # trace whose calls all returned ends with the trace.
    # (a frame's has_sync counts its children before its block began too; the frames
    # deeper than it were all entered after it)
    synced_above = 0
    for k in range(<int64_t>stack.size() - 1, -1, -1):     # frames above k entered a sync?
        synced_here = stack[k].has_sync or (stack[k].fid >= 0 and (flags[stack[k].fid] & SYNC_BIT))
        stack[k].has_sync = synced_above
        synced_above = synced_above or synced_here
    for k in range(<int64_t>stack.size()):
        if stack[k].block < 0:
            continue
        if k == 0 and stack.size() == 1:
            pos = _emit_block(trie, stack[0].root, stack[0].first, out, stack[0].block, kids)
            folded += 1
            break
        if k + 1 < <int64_t>stack.size() and stack[k].has_sync:
            a = stack[k].block
            aside.assign(&out[a], &out[a] + (pos - a))
            b = _emit_block(trie, stack[k].root, stack[k].first, out, a, kids)
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
        a, b, wrap = stack[k].block, stack[k].raw_block, stack[k].first
        # a function known to return with its block open (a polling helper) had opened a
        # block in its caller at its own call: the unfinished block begins there
        j = k
        while j >= 1 and opened[stack[j].fid] and stack[j - 1].block < 0:
            a, b, wrap = stack[j].start, stack[j].raw, stack[j].fid
            j -= 1
        dropped = n - b
        pos = a
        cut_at = a
        if learnt:
            root = trie.new(-1)
            unseen = 0
            for j in range(b, n):
                e = <int32_t>events[j]
                if e != 0 and seen[e] == 0 and e != wrap:
                    trie.child_of(root, e)
                    unseen += 1
            if unseen and a + 2 * unseen + 2 <= n:
                pos = _emit_block(trie, root, wrap, out, a, kids)
        break
    stats[0], stats[1], stats[2], stats[3], stats[4] = pos, folded, held, dropped, regions
    stats[5] = n - dropped if dropped else -1
    stats[6] = cut_at
    return ORDER_OK


def dynamic_bodies(stored_event[::1] events, const uint8_t[::1] flags):
    """The ids called directly inside an DYNAMIC_BIT call (the outlined bodies of
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
            if stack.size() and (flags[stack.back()] & DYNAMIC_BIT):
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


cdef inline uint64_t _mix(uint64_t x):
    x ^= x >> 33
    x *= 0xff51afd7ed558ccdULL
    x ^= x >> 33
    x *= 0xc4ceb9fe1a85ec53ULL
    x ^= x >> 33
    return x


cdef struct Count:
    int32_t fid
    uint64_t bloom          # which children (a 64-bit Bloom filter of their ids)
    uint64_t tally          # how many of each (a sum of their hashes)
    bint sync               # a child synchronises (or holds a synchronisation)


def varying_parents(stored_event[::1] events, const uint8_t[::1] flags, uint8_t[::1] made):
    """The ids of the functions whose calls in this trace make the same set of children
    but in other numbers from one call to the next (a worker that takes as many tasks as
    the master hands it, a thread's share of a loop whose items arrive by message), none
    of them a synchronisation: their bodies are free (BODY_BIT).  ``made`` (as long as
    ``flags``, written): 1 for every id the trace calls.  Returns (status, ids).  Sets
    and numbers are compared through a 64-bit Bloom filter and a sum of hashes."""
    cdef int64_t n = events.shape[0], nflags = flags.shape[0], i, depth = 0
    cdef int32_t e, fid
    cdef vector[Count] stack         # stack[0]: the top level; frames are written in place
    cdef Count* done
    cdef Count* parent
    cdef vector[uint64_t] first_bloom, first_tally, hashes
    cdef vector[uint8_t] state              # 0 unseen, 1 seen once or alike, 2 varies, 3 never (sync)
    cdef uint64_t h
    if made.shape[0] != nflags:
        raise ValueError("varying_parents: made must be as long as flags")
    first_bloom.resize(nflags)
    first_tally.resize(nflags)
    state.resize(nflags)
    hashes.resize(nflags)
    for i in range(nflags):
        hashes[i] = _mix(<uint64_t>i + 1)
        made[i] = 0
    stack.resize(64)
    stack[0].fid, stack[0].bloom, stack[0].tally, stack[0].sync = -1, 0, 0, False
    for i in range(n):
        e = <int32_t>events[i]
        if e < 0 or e >= nflags:
            return ORDER_BAD_ID, np.empty(0, np.int32)
        if e != 0:
            made[e] = 1
            depth += 1
            if depth == <int64_t>stack.size():
                stack.resize(2 * stack.size())
            done = &stack[depth]
            done.fid, done.bloom, done.tally, done.sync = e, 0, 0, False
            continue
        if depth == 0:
            continue
        done = &stack[depth]
        depth -= 1
        fid = done.fid
        if done.sync:
            state[fid] = 3
        elif state[fid] == 0:
            state[fid] = 1
            first_bloom[fid], first_tally[fid] = done.bloom, done.tally
        elif state[fid] == 1 and done.tally != first_tally[fid] and done.bloom == first_bloom[fid]:
            state[fid] = 2
        h = hashes[fid]
        parent = &stack[depth]
        parent.bloom |= (<uint64_t>1) << (h & 63)
        parent.tally += h
        if done.sync or (flags[fid] & SYNC_BIT):
            parent.sync = True
    found = [k for k in range(nflags) if state[k] == 2]
    return ORDER_OK, np.asarray(found, dtype=np.int32)
