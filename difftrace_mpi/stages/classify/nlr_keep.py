"""What the root keeps of the NLRs (functional core): a summary of every trace's NLR, and
the NLRs themselves of a bounded set of traces.

An NLR of a real trace is millions of tokens (LULESH: ~1.3 M per thread), so gathering
every trace's NLR on the root grows with the events of the whole job: 82 MB of an 8 x 2
run's results file, hundreds of GB at 4,096 x 8.  The ranks keep their NLRs; the root
gets per trace only its length, whether it equals its twin's, and its last tokens (all a
hang view and the choice of a setting need), and, once the verdict is known, the NLRs of
the traces it names first, up to a token budget (``config.NLR_KEEP_TOKENS``).

A rank's NLRs are a ``classes.dedupe`` block: its distinct rows and ``members`` (run,
object, row) per local trace.  A trace meets its twin on the same rank (a rank's work
is whole processes of both runs), so equal rows of one object are the same row."""
import numpy as np

from .classes import block_rows, dedupe, unify

TAIL_TOKENS = 3         # the last tokens kept of every NLR: where in the loop nest a trace ended


def summary(block, tail_tokens=TAIL_TOKENS):
    """(members, row lengths, tail offsets, tail ids, tail counts) of a rank's NLR block:
    what the root needs of every trace without its tokens, as five arrays (a pickle of one
    small array per row costs ~15 us each: seconds for the rows of 32,768 traces)."""
    rows = block_rows(block)
    lengths = np.diff(np.asarray(block[0], dtype=np.int64))
    kept = np.minimum(lengths, tail_tokens)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(kept, out=offsets[1:])
    ids = np.empty(int(offsets[-1]), dtype=np.int64)
    counts = np.empty(int(offsets[-1]), dtype=np.int64)
    for r, (a, b) in enumerate(zip(offsets[:-1].tolist(), offsets[1:].tolist())):
        row_ids, row_counts = rows[r]
        ids[a:b] = row_ids[len(row_ids) - (b - a):]
        counts[a:b] = row_counts[len(row_counts) - (b - a):]
    return np.asarray(block[3], dtype=np.int64), lengths, offsets, ids, counts


def combine(summaries, n_objects):
    """Every rank's ``summary`` -> (lengths (2, N) int64, same (N,) bool, tails per run: N
    (ids, counts) pairs).  A trace absent from a run has the empty NLR there; ``same``:
    the object's NLR is identical in both runs."""
    lengths = np.zeros((2, n_objects), dtype=np.int64)
    row_of = np.full((2, n_objects), -1, dtype=np.int64)       # a row number unique across ranks
    empty = (np.empty(0, np.int64), np.empty(0, np.int64))
    tails = [[empty] * n_objects for _ in range(2)]
    base = 0
    for members, row_lengths, offsets, ids, counts in summaries:
        runs, objs, rows = members[:, 0], members[:, 1], members[:, 2]
        lengths[runs, objs] = row_lengths[rows]
        row_of[runs, objs] = rows + base
        starts, ends = offsets[rows].tolist(), offsets[rows + 1].tolist()
        for run, obj, a, b in zip(runs.tolist(), objs.tolist(), starts, ends):
            tails[run][obj] = (ids[a:b], counts[a:b])
        base += len(row_lengths)
    # absent (-1) equals an empty NLR: compare row numbers where both are present, else lengths
    both = (row_of >= 0).all(axis=0)
    same = np.where(both, row_of[0] == row_of[1], (lengths == 0).all(axis=0))
    return lengths, same, tuple(tails)


def keep_set(priority, lengths_by_setting, same_by_setting, budget, n_objects):
    """Objects whose NLRs the root keeps: ``priority`` (object indices, most wanted first,
    each once) taken while the kept tokens stay within ``budget`` (None: all); the first
    one always.  An object costs its NLRs in every setting, both runs, an NLR equal in
    both counted once.  Returns a sorted int64 array."""
    priority = np.asarray(priority, dtype=np.int64)
    if budget is None or not len(priority):
        return np.sort(priority)
    cost = np.zeros(n_objects, dtype=np.int64)
    for lengths, same in zip(lengths_by_setting, same_by_setting):
        cost += np.where(same, lengths[1], lengths[0] + lengths[1])
    spent = np.cumsum(cost[priority])
    taken = max(1, int(np.searchsorted(spent, budget, side="right")))
    return np.sort(priority[:taken])


def kept_part(block, wanted):
    """The rows of a rank's NLR block whose object is in ``wanted`` (sorted object
    indices), as a smaller dedupe block: what the rank sends to the root."""
    members = np.asarray(block[3], dtype=np.int64)
    take = np.flatnonzero(np.isin(members[:, 1], wanted))
    rows = block_rows(block)
    pairs = [rows[int(r)] for r in members[take, 2].tolist()]
    return dedupe(pairs, members[take, 0], members[take, 1])


def kept_nlrs(parts, n_objects, wanted):
    """Per run (distinct NLR rows, index int64 (N,)) from every rank's ``kept_part``: an
    object's row among the rows, -1 where its NLR was not kept."""
    kept = np.zeros(n_objects, dtype=bool)
    kept[np.asarray(wanted, dtype=np.int64)] = True
    out = []
    for rows, index in unify(parts, n_objects):
        index = np.where(kept, np.asarray(index, dtype=np.int64), -1)
        out.append((rows, index))
    return tuple(out)
