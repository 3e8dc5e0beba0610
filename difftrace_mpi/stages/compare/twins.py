"""Traces grouped by content, and each faulty trace's twin (functional core).

Most traces of a run pair hold the same events as another one: a faulty trace equal to its
normal twin (every rank but the culprit's, when the fault changed one rank), or a prefix of
it (a hung or crashed job: the others were stopped on the normal path).  Holding such a
trace costs nothing: it *is* the earlier array, or a view of the first events of it.
``Contents`` decides this as the traces arrive, so a shard holds one array per distinct
content and never two copies of a prefix; ``first_equal`` and ``twin_prefixes`` then index
what was kept (who equals whom, how many first events each faulty trace shares with its
twin).  Equality is by length and hash, always confirmed event by event.
"""
import numpy as np

from ...kernels.nlr import hash_events
from ...model import stored_events

CHUNK = 1 << 16         # events compared at a time: the first difference is found without a full pass


def same_memory_prefix(a, b):
    """Whether ``a`` starts where ``b`` starts, in the same memory (a view of b's first events)."""
    return len(a) == 0 or (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
                           and a.dtype == b.dtype and np.shares_memory(a[:1], b[:1]))


def shared_prefix(a, b):
    """How many first events ``a`` and ``b`` have in common (chunk by chunk, so an early
    difference costs little and no temporary is the size of a trace)."""
    m = min(len(a), len(b))
    if same_memory_prefix(a[:m], b[:m]):
        return m
    for lo in range(0, m, CHUNK):
        hi = min(lo + CHUNK, m)
        differ = np.flatnonzero(a[lo:hi] != b[lo:hi])
        if len(differ):
            return lo + int(differ[0])
    return m


class Contents:
    """The distinct event arrays of a shard, kept as traces arrive (``add``): a trace equal
    to one kept already is that array, a trace that is a prefix of its twin (given) is a
    view of the twin's events."""

    def __init__(self):
        self._by_key = {}       # (length, hash) -> arrays kept with them

    def add(self, events, twin=None, h=None):
        """(``events`` (int32 or uint16 ids), or the array already held with the same content;
        its hash: ``h`` where the caller has it, ``hash_events`` of them)."""
        events = stored_events(events)
        h = hash_events(events) if h is None else h
        kept = self._by_key.setdefault((len(events), h), [])
        for earlier in kept:
            if earlier is events or np.array_equal(earlier, events):
                return earlier, h
        if twin is not None and 0 < len(events) < len(twin) and shared_prefix(events, twin) == len(events):
            events = twin[:len(events)]
        kept.append(events)
        return events, h


def first_equal(gevents, hashes):
    """Per trace, the index of the first trace with the same events (its own index when
    none comes before it): candidates by length and hash, confirmed event by event (at
    no cost for arrays ``Contents`` already shared)."""
    same_as = np.arange(len(gevents), dtype=np.int64)
    seen = {}       # (length, hash) -> the first traces with them
    for i, (ev, h) in enumerate(zip(gevents, hashes.tolist())):
        firsts = seen.setdefault((len(ev), h), [])
        match = next((j for j in firsts if gevents[j] is ev or np.array_equal(gevents[j], ev)), None)
        if match is None:
            firsts.append(i)
        else:
            same_as[i] = match
    return same_as


def twin_prefixes(gevents, runs, objs, same_as):
    """Per trace: the index of the normal trace of its object for a faulty trace (-1 for
    the others), and how many first events the two share (``same_as`` from
    ``first_equal``: equal twins share them all)."""
    normal = {int(o): i for i, (r, o) in enumerate(zip(runs.tolist(), objs.tolist())) if r == 0}
    twin = np.full(len(gevents), -1, dtype=np.int64)
    shared = np.zeros(len(gevents), dtype=np.int64)
    for i, (r, o) in enumerate(zip(runs.tolist(), objs.tolist())):
        j = normal.get(int(o))
        if r == 1 and j is not None:
            twin[i] = j
            shared[i] = (min(len(gevents[i]), len(gevents[j])) if same_as[i] == same_as[j]
                         else shared_prefix(gevents[i], gevents[j]))
    return twin, shared
