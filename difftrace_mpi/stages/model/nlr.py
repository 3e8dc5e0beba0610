"""Nested loop recognition with global, deterministic loop ids (functional core).

The kernel (``kernels/nlr.pyx``) numbers loops in the order it meets them, which depends
on which traces one process sees.  To make loop ids global and independent of how traces
are spread over MPI ranks, the analysis runs in two passes:

1. **Discovery**: every trace is reduced on its own (loops need three repetitions);
   the bodies found, written as canonical keys, are united over all traces.  Each trace
   also records the bodies that pass 2 would try as known pairs.
2. **Final**: every trace is reduced again with that union marked as *known*, so two
   repetitions of a known body already form a loop (this is how the paper's Table III gets
   ``L0^2`` for the end ranks of the odd/even sort: the body was seen in other traces).
   The result of a trace depends only on the trace and on the union from pass 1.  A
   trace none of whose recorded pair bodies is in the union reduces exactly as in pass 1,
   so only the others are reduced again.  Recording the pairs costs pass 1 a third or
   more, so a shard whose traces mostly hold known pairs (real programs' traces all do)
   stops recording and reduces the rest again (``_Recording``).

Loop ids are then assigned by first appearance: traces in analysis order (normal run
before faulty, each by rank and thread), tokens left to right, inner loops before the
loops that contain them.  Loops never seen in any final NLR get no id.

A *canonical key* names a body without any numbering: function ids as decimals, a loop as
``(<body key>)^<count>``, elements joined by commas, e.g. ``"(12,13)^3,14"``.
"""
from dataclasses import dataclass

import numpy as np

from ...naming import token_label
from ...kernels.nlr import (KeptEvents, LoopTable, Scratch, expand, first_loops,  # noqa: F401  (expand re-exported)
                            nlr, relabel_loops)


@dataclass
class NLR:
    """One trace's nested loop representation: element ids (>= 0 function, < 0 loop
    ``-id-1``) and counts (1 for functions, iterations for loops); int64, or int32 where
    they fit (``compact``)."""
    ids: np.ndarray
    counts: np.ndarray

    def __len__(self):
        return len(self.ids)


def canonical_keys(table):
    """Canonical key of every loop of ``table``, by loop number."""
    keys = [None] * len(table)

    def key_of(loop):
        if keys[loop] is None:
            ids, counts = table.body(loop)
            keys[loop] = ",".join(
                str(int(i)) if i >= 0 else f"({key_of(-int(i) - 1)})^{int(c)}"
                for i, c in zip(ids, counts))
        return keys[loop]

    for loop in range(len(table)):
        key_of(loop)
    return keys


def _split_top_level(key):
    """Split a canonical key at its top-level commas."""
    parts, depth, start = [], 0, 0
    for pos, ch in enumerate(key):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(key[start:pos])
            start = pos + 1
    parts.append(key[start:])
    return parts


def table_from_keys(keys, known=True):
    """A LoopTable holding the bodies named by ``keys`` (inner bodies added as needed).

    Returns (table, number_of_key) where number_of_key maps every key, inner ones too, to
    its loop number in the new table."""
    table = LoopTable()
    number = {}

    def add(key):
        if key in number:
            return number[key]
        ids, counts = [], []
        for part in _split_top_level(key):
            if part.startswith("("):
                inner, count = part.rsplit(")^", 1)
                ids.append(-add(inner[1:]) - 1)
                counts.append(int(count))
            else:
                ids.append(int(part))
                counts.append(1)
        number[key] = table.add_body(ids, counts, known=known)
        return number[key]

    for key in keys:
        add(key)
    return table, number


def _event_ids(seq):
    """A sequence as the kernel reads it: int32 or int64 as given (the filters make int32),
    anything else as int64; a ``KeptEvents`` (a trace and its filter's flags) as it is."""
    if isinstance(seq, KeptEvents):
        return seq
    seq = np.asarray(seq)
    return np.ascontiguousarray(seq, dtype=seq.dtype if seq.dtype in (np.int32, np.int64) else np.int64)


@dataclass
class Discovery:
    """Pass 1 over a shard's sequences: its loop table, each sequence's NLR numbered by that
    table, per sequence the bodies a pass-2 run would try as known pairs (kernel bytes
    keys, see ``kernels.nlr.nlr``; None: not recorded, reduced again in pass 2), and for
    sequences that resumed from another's prefix (``resume``) whose source recorded its
    pairs (pass 2 may keep the source's NLR) the state they resumed from."""
    table: LoopTable
    nlrs: list
    pairs: list
    resume: dict
    prefix_states: dict

    def found_keys(self):
        """The canonical keys of every loop body found (a set)."""
        return set(canonical_keys(self.table))


class _Recording:
    """Pass 1's choice, per sequence, whether to record its pairs.  Recording costs pass 1
    a third or more, and saves pass 2 only for the sequences none of whose pairs is a known
    body; a sequence left unrecorded is simply reduced again in pass 2 (the same NLR: pass
    2's result depends only on the sequence and the known bodies).  So recording stops once
    at least two sequences were recorded and most of them already hold a pair whose body
    this shard found (real traces of one program: every one of them).  The choice changes
    the cost only, never an NLR."""

    def __init__(self):
        self.on, self.recorded, self.bound = True, 0, 0

    def saw(self, pairs, table):
        self.recorded += 1
        self.bound += any(table.holds(p) for p in pairs)
        if self.recorded >= 2 and 2 * self.bound > self.recorded:
            self.on = False


def _reduce(sequences, K, table, known_pairs, resume, states, scratch=None):
    """Reduce ``sequences`` (an iterable, each dropped after use) into ``table``.  A
    sequence d with ``resume[d] = (j, L)`` shares its first L events with the earlier
    sequence j, so it starts from j's state there instead of from the beginning: a faulty
    trace redoes only what follows its first difference from its normal twin.  ``states``:
    {d: state} to start from, given (pass 2) or filled (pass 1).  ``sequences`` yields
    (d, sequence).  ``scratch``: the kernel's ``Scratch`` to use (one for every pass of an
    analysis saves touching its pages again).  Returns ({d: NLR}, {d: recorded pairs, or
    None where pass 2 must reduce it again (``_Recording``)})."""
    snapshots, users = {}, {}
    for j, at in resume.values():
        snapshots.setdefault(j, set()).add(at)
        users[(j, at)] = users.get((j, at), 0) + 1
    held = {}          # (sequence, position) -> its state there, for the sequences resuming from it
    nlrs, pairs = {}, {}
    scratch = Scratch() if scratch is None else scratch     # one set of stack buffers, not one per sequence
    recording = _Recording()
    for d, seq in sequences:
        seen = None if known_pairs or not recording.on else set()
        start, stack = 0, None
        if d in resume and (resume[d] in held or d in states):
            start = resume[d][1]
            stack = held[resume[d]] if resume[d] in held else states[d]
            users[resume[d]] -= 1
            if not users[resume[d]]:
                held.pop(resume[d], None)       # its last user: a snapshot is a whole NLR prefix
            if not known_pairs:
                seen = set(stack[2]) if seen is not None and stack[2] is not None else None
                if pairs[resume[d][0]] is not None:
                    # pass 2 may keep the source's pass-1 NLR and redo this one from the
                    # state; a source left unrecorded is redone, and so gives it again
                    states[d] = stack
        out = nlr(_event_ids(seq), K, table, known_pairs, seen, start, stack, snapshots.get(d), scratch)
        if len(out) == 3:
            held.update(((d, at), state) for at, state in out[2].items())
        if seen is not None:
            recording.saw(seen, table)
        nlrs[d], pairs[d] = compact(out[0], out[1]), seen
    return nlrs, pairs


_INT32 = np.iinfo(np.int32)


def compact(ids, counts):
    """An NLR held as int32 ids and counts where every value fits (half the memory of the
    kernel's int64 output; an NLR of a real trace is a third of its events), else as
    int64; new arrays either way (the kernel may return a resumed state's own arrays, which
    other sequences resume from)."""
    if ids.dtype == counts.dtype == np.int32:
        return NLR(ids, counts)         # the kernel's own new arrays, narrowed already
    if len(ids) and (int(ids.min()) < _INT32.min or int(ids.max()) > _INT32.max or int(counts.max()) > _INT32.max):
        return NLR(ids.copy(), counts.copy())
    return NLR(ids.astype(np.int32), counts.astype(np.int32))


def resolved(resume):
    """``resume`` with every sequence resuming from one that holds the state it needs: a
    sequence j that itself resumes at position s from its source has no state before s,
    and shares those first events with its source, so a sequence resuming from j at a
    position before s resumes from j's source there instead (a faulty trace whose twin,
    the normal trace cut short, is a prefix of another faulty trace's content)."""
    out = {}
    for d, (j, at) in resume.items():
        while j in resume and at < resume[j][1]:
            j = resume[j][0]
        out[d] = (j, at)
    return out


def discover(sequences, K, resume=None, scratch=None):
    """Pass 1 of every sequence (an iterable: each is filtered, reduced and dropped in
    turn, so a shard never holds all its filtered sequences at once); ``resume`` as in
    ``_reduce`` (``resolved`` first), and ``scratch``."""
    table, states = LoopTable(), {}
    resume = resolved(resume or {})
    nlrs, pairs = _reduce(enumerate(sequences), K, table, False, resume, states, scratch)
    table.drop_memo()
    return Discovery(table, list(nlrs.values()), list(pairs.values()), resume, states)


def _pair_key(key, loop_keys):
    """The canonical key of a body given as kernel bytes (int64 ids then counts)."""
    flat = np.frombuffer(key, dtype=np.int64)
    half = len(flat) // 2
    return ",".join(str(i) if i >= 0 else f"({loop_keys[-i - 1]})^{c}"
                    for i, c in zip(flat[:half].tolist(), flat[half:].tolist()))


def reduce_with_known(discovery, sequence_at, K, known_keys, scratch=None):
    """Pass 2: the NLR of every sequence of ``discovery`` with ``known_keys`` known.

    A sequence none of whose recorded pair bodies is known reduces exactly as in pass 1,
    so its pass-1 NLR is kept (renumbered); the others are reduced again from
    ``sequence_at(i)`` (resuming from a twin's prefix as in pass 1: from the twin's pass-2
    state when the twin is reduced again too, else from its pass-1 state, renumbered).
    Returns (nlrs, table): NLRs numbered by ``table`` (rank-local)."""
    table, number = table_from_keys(sorted(known_keys), known=True)
    loop_keys = canonical_keys(discovery.table)
    mapping = np.array([number[key] for key in loop_keys] or [-1], dtype=np.int64)
    pair_keys = {}          # bytes -> canonical key: the same bodies recur across traces

    def known(pair):
        if pair not in pair_keys:
            pair_keys[pair] = _pair_key(pair, loop_keys) in known_keys
        return pair_keys[pair]
    again = {d for d, pairs in enumerate(discovery.pairs) if pairs is None or any(known(p) for p in pairs)}
    states = {}
    for d in again & set(discovery.resume):
        if discovery.resume[d][0] not in again:      # the twin's pass-1 state is its pass-2 state
            ids, counts = discovery.prefix_states[d][:2]
            state = NLR(ids.copy(), counts)
            relabel_loops([state], mapping)
            states[d] = (state.ids, state.counts)
    resume = {d: r for d, r in discovery.resume.items() if d in again and (d in states or r[0] in again)}
    discovery.prefix_states = None      # what pass 2 needs of them is in ``states`` now
    nlrs = discovery.nlrs

    def sequences():
        for d in sorted(again):
            nlrs[d] = None      # its pass-1 NLR is replaced: freed before the new one is made
            yield d, sequence_at(d)
    redone, _ = _reduce(sequences(), K, table, True, resume, states, scratch)
    table.drop_memo()
    relabel_loops([nl for d, nl in enumerate(nlrs) if d not in again], mapping)
    discovery.nlrs = None       # handed over (renumbered in place)
    return [redone.get(d, nl) for d, nl in enumerate(nlrs)], table


def first_appearances(nlrs, order, table):
    """For each canonical key used by ``nlrs``: (order of its trace, ordinal of its first
    visit in that trace), visiting tokens left to right and inner loops before outer."""
    keys = canonical_keys(table)
    first = {}
    for nl, trace_order in zip(nlrs, order):
        ordinal = 0
        seen = set()

        def visit(loop):
            nonlocal ordinal
            if loop in seen:
                return
            seen.add(loop)
            body_ids, _ = table.body(loop)
            for i in body_ids:
                if i < 0:
                    visit(-int(i) - 1)
            key = keys[loop]
            here = (int(trace_order), ordinal)
            if key not in first or here < first[key]:
                first[key] = here
            ordinal += 1

        # only a loop's first occurrence can visit anything: those, left to right
        for loop in first_loops(nl.ids, len(table)).tolist():
            visit(loop)
    return first


def assign_loop_ids(first):
    """Global loop id of every key: ordered by first appearance (then by key, for ties
    that cannot arise between distinct keys of one trace but keep the order total)."""
    ordered = sorted(first, key=lambda k: (first[k], k))
    return {key: gid for gid, key in enumerate(ordered)}


def relabel(nlrs, table, loop_id_of_key):
    """Renumber loops of ``nlrs`` from ``table`` numbers to global ids, in place (the
    local numbering is not needed afterwards, and a copy of every NLR of a shard is the
    size of the shard's NLR output); returns ``nlrs``."""
    keys = canonical_keys(table)
    mapping = np.array([loop_id_of_key.get(k, -1) for k in keys] or [-1], dtype=np.int64)
    relabel_loops(list(nlrs), mapping)
    return nlrs


def global_table(loop_id_of_key):
    """The final loop table: loop ``gid`` has the body of the key with that id, with inner
    loops referenced by their global ids."""
    ordered = sorted(loop_id_of_key, key=loop_id_of_key.get)
    table, number = table_from_keys(ordered, known=False)
    # table_from_keys numbers keys in the order given; inner keys always precede their
    # outer keys in first-appearance order, so numbers equal the global ids.
    assert all(number[k] == loop_id_of_key[k] for k in ordered)
    return table


def reduce_all(sequences, K, order=None):
    """Serial composition of the passes (what the MPI engine does with one rank).

    Returns (nlrs with global loop ids, global LoopTable)."""
    order = range(len(sequences)) if order is None else order
    discovery = discover(sequences, K)
    nlrs, table = reduce_with_known(discovery, sequences.__getitem__, K, discovery.found_keys())
    ids = assign_loop_ids(first_appearances(nlrs, order, table))
    return relabel(nlrs, table, ids), global_table(ids)


def tokens(nl, names, keys=None):
    """An NLR as (label, count) tokens: ``(name, 0)`` for a function, ``("L<id>", count)``
    for a loop (the form diffNLR and the report use).  ``keys``: its ``token_keys``; then
    each distinct token is made once and shared (a real NLR has 10^5-10^6 tokens, few
    distinct: real LULESH 216 x 1's culprit pair, 0.065 -> 0.02 s)."""
    if keys is None:
        return [(names[i], 0) if i >= 0 else (f"L{-i - 1}", c) for i, c in zip(nl.ids.tolist(), nl.counts.tolist())]
    keys = np.asarray(keys, dtype=np.int64)
    first = np.full(int(keys.max(initial=-1)) + 1, -1, dtype=np.int64)
    first[keys[::-1]] = np.arange(len(keys) - 1, -1, -1)           # each key's first token
    present = np.flatnonzero(first >= 0)
    table = [None] * len(first)
    for key, token in zip(present.tolist(), tokens(NLR(nl.ids[first[present]], nl.counts[first[present]]), names)):
        table[key] = token
    return list(map(table.__getitem__, keys.tolist()))


def token_keys(*nlrs):
    """Per NLR, one int per token, equal exactly where the tokens (``tokens``) are: a
    function by its id, a loop by its id and count (what ``diff.diff_tokens`` compares,
    found with numpy instead of Python tuples)."""
    ids = np.concatenate([np.asarray(nl.ids, dtype=np.int64) for nl in nlrs] + [np.empty(0, np.int64)])
    counts = np.concatenate([np.asarray(nl.counts, dtype=np.int64) for nl in nlrs] + [np.empty(0, np.int64)])
    keys = ids.copy()                   # a function: its id (a token with no count)
    loops = ids < 0
    if loops.any():                     # a loop: numbered by (id, count) after every function id
        loop, count = -ids[loops], counts[loops]
        if count.min() >= 0 and count.max() < (1 << 32) and loop.max() < (1 << 31):
            # one int64 per pair: a 1-D sort, not np.unique's structured rows (0.13 s on a
            # 64 x 1 LULESH trace's diffNLR, a tenth of that this way)
            _, number = np.unique((loop << 32) | count, return_inverse=True)
        else:
            _, number = np.unique(np.stack([loop, count]), axis=1, return_inverse=True)
        keys[loops] = int(ids.max(initial=-1)) + 1 + number.reshape(-1)
    return np.split(keys, np.cumsum([len(nl.ids) for nl in nlrs])[:-1])


def token_labels(nl, names):
    """Human labels of an NLR's tokens: a function name, or ``L<id>^<count>``."""
    return [token_label(label, count) for label, count in tokens(nl, names)]


def loop_body_tokens(table, names, loops=None):
    """{"L3": [("MPI_Send", 0), ("L1", 4), ...]} for ``loops`` (default: all)."""
    loops = range(len(table)) if loops is None else loops
    return {f"L{loop}": tokens(NLR(*table.body(loop)), names) for loop in loops}


def loop_bodies(table, names, loops=None):
    """{"L3": ["MPI_Send", "L1^4", ...]} for ``loops`` (default: all)."""
    return {label: [token_label(name, c) for name, c in body]
            for label, body in loop_body_tokens(table, names, loops).items()}
