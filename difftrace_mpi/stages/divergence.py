"""Did a stopped faulty trace leave the normal path before it stopped?

A faulty trace that hung or was killed either stopped *on* the normal path (its events
are the first events of the normal trace of the same rank and thread: it was waiting
for others) or left that path first (a likely cause of the hang).  The normal and faulty
traces of one (rank, thread) usually sit on different MPI ranks, so they are compared
through block hashes instead of being moved: with L the faulty trace's length, both
sides cut their first L events at the same boundaries and hash each block.  The first
block whose hashes differ, or where the normal trace has already ended, holds the first
difference; the faulty side also gives the calls entered before each block, which turns
that block into a bracket of calls.  Exact up to a 64-bit hash collision per block.

Plain functions over numpy arrays: ``shard_blocks`` runs on every MPI rank over its own
traces, ``divergences`` on the root over what they send.
"""
import hashlib

import numpy as np

MAX_BLOCKS = 64     # hashes per trace, however long: a hang can stop every trace of a large job
MIN_BLOCK = 16      # events per block at least; short traces get fewer, still useful, blocks


def block_size(length):
    """Events per block for a faulty trace of ``length`` events (the last block may be shorter)."""
    return max(MIN_BLOCK, -(-int(length) // MAX_BLOCKS))


def prefix_blocks(events, length):
    """(hashes uint64, calls_before int64) of the blocks of ``events[:length]``.

    The blocks are those of a trace of ``length`` events (``block_size(length)`` each);
    only the blocks ``events`` holds entirely get a hash, so a trace shorter than
    ``length`` gets fewer.  ``calls_before[j]``: calls entered (non-zero ids) before block j."""
    length, size = int(length), block_size(length)
    held = min(len(events), length)
    data = np.ascontiguousarray(events[:held], dtype="<i4")      # one byte order on every rank
    starts = np.arange(0, length, size, dtype=np.int64)
    starts = starts[np.minimum(starts + size, length) <= held]    # the blocks held entirely
    ends = np.minimum(starts + size, length)
    raw = memoryview(data).cast("B")       # byte slices of it cost far less than array slices
    digests = b"".join(hashlib.blake2b(raw[4 * a:4 * b], digest_size=8).digest()
                       for a, b in zip(starts.tolist(), ends.tolist()))
    # calls per block (the last one may also count a partial block after it: never used)
    calls = np.add.reduceat(data != 0, starts, dtype=np.int64) if len(starts) else np.empty(0, np.int64)
    return np.frombuffer(digests, dtype="<u8").astype(np.uint64), np.cumsum(calls) - calls


def first_different_block(normal_hashes, faulty_hashes):
    """Index of the first block where the faulty trace leaves the normal one, or -1 when
    the faulty trace is the start of the normal one.  ``normal_hashes`` may be shorter
    (the normal trace ended before the faulty one): its first missing block differs."""
    common = len(normal_hashes)
    differ = np.flatnonzero(np.asarray(normal_hashes) != np.asarray(faulty_hashes)[:common])
    if len(differ):
        return int(differ[0])
    return common if common < len(faulty_hashes) else -1


def bracket(normal_hashes, faulty_hashes, faulty_calls_before, faulty_calls):
    """(calls entered before the first different block, calls entered by its end) of the
    faulty trace (``faulty_calls`` in all), or (-1, -1) when it stopped on the normal path.
    In 0-based call indices the first difference lies in calls [from, to)."""
    block = first_different_block(normal_hashes, faulty_hashes)
    if block < 0:
        return -1, -1
    end = faulty_calls_before[block + 1] if block + 1 < len(faulty_calls_before) else faulty_calls
    return int(faulty_calls_before[block]), int(end)


def shard_blocks(gevents, runs, objs, probe_objs, probe_lengths):
    """One shard's part: for each local trace of a probed object (``probe_objs``, whose
    faulty traces have ``probe_lengths`` events), the blocks of its first L events.
    Returns (runs, objs, offsets, hashes, calls_before): block j of local probed trace i
    is at offsets[i] + j."""
    length_of = dict(zip(np.asarray(probe_objs).tolist(), np.asarray(probe_lengths).tolist()))
    picked = [i for i, o in enumerate(np.asarray(objs).tolist()) if o in length_of]
    blocks = [prefix_blocks(gevents[i], length_of[int(objs[i])]) for i in picked]
    offsets = np.zeros(len(picked) + 1, dtype=np.int64)
    np.cumsum([len(h) for h, _ in blocks], out=offsets[1:])
    picked = np.array(picked, dtype=np.int64)
    return (np.asarray(runs, dtype=np.int64)[picked], np.asarray(objs, dtype=np.int64)[picked], offsets,
            np.concatenate([h for h, _ in blocks] + [np.empty(0, np.uint64)]),
            np.concatenate([c for _, c in blocks] + [np.empty(0, np.int64)]))


def divergences(parts, probe_objs, faulty_calls, n_objects):
    """(diverged_at, diverged_to), int64 per object, from every shard's ``shard_blocks``:
    the bracket of the first difference (see ``bracket``), -1 for objects not probed or
    whose faulty trace stopped on the normal path.  A probed object without a normal
    trace left the normal path at its first block."""
    blocks = {}                 # (run, object) -> (hashes, calls_before)
    for runs, objs, offsets, hashes, calls_before in parts:
        for i, (run, obj) in enumerate(zip(runs.tolist(), objs.tolist())):
            at = slice(offsets[i], offsets[i + 1])
            blocks[(run, obj)] = (hashes[at], calls_before[at])
    diverged_at = np.full(n_objects, -1, dtype=np.int64)
    diverged_to = np.full(n_objects, -1, dtype=np.int64)
    empty = (np.empty(0, np.uint64), np.empty(0, np.int64))
    for obj in np.asarray(probe_objs).tolist():
        normal_hashes, _ = blocks.get((0, obj), empty)
        faulty_hashes, calls_before = blocks.get((1, obj), empty)
        diverged_at[obj], diverged_to[obj] = bracket(normal_hashes, faulty_hashes, calls_before,
                                                     int(faulty_calls[obj]))
    return diverged_at, diverged_to
