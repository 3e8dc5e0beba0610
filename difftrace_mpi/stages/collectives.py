"""World collectives across ranks, for the failed run alone (``stages.alone``): every rank
enters the collectives of ``MPI_COMM_WORLD`` in the same order with the same significant
arguments (operation, root, count and type where MPI requires them equal), so the first
collective a few ranks entered otherwise, or never entered though their traces ran to
their end, names them.

Plain functions over numpy arrays.
"""
import re

import numpy as np

from . import calltree

FEW_DEVIANTS = 0.25     # at most this share of the peers may leave the norm at one point
MIN_PEERS = 3           # peers needed for a norm

# arguments MPI requires equal on every rank of a collective, per call (others: none)
_SIGNIFICANT = {"MPI_Allreduce": ("count", "type", "op"), "MPI_Iallreduce": ("count", "type", "op"),
                "MPI_Reduce": ("count", "type", "op", "root"), "MPI_Ireduce": ("count", "type", "op", "root"),
                "MPI_Bcast": ("count", "type", "root"), "MPI_Ibcast": ("count", "type", "root"),
                "MPI_Scan": ("count", "type", "op"), "MPI_Exscan": ("count", "type", "op")}
_ROOTED = ("root",)
_FIELD = re.compile(r"([a-z_]+)=([^,\]]*)")
def collective_keys(names):
    """Per global id: the key of a world collective (its plain name and the arguments MPI
    requires equal on every rank), -1 for any other call.  Keys are small ints."""
    keys, out = {}, np.full(len(names), -1, dtype=np.int64)
    for i, name in enumerate(names):
        if i == 0 or not calltree.is_collective(name) or "comm=" in name:
            continue
        plain = calltree.plain_name(name)
        fields = dict(_FIELD.findall(name[len(plain):]))
        wanted = _SIGNIFICANT.get(plain, _ROOTED)
        key = (plain,) + tuple(f"{k}={fields[k]}" for k in wanted if k in fields)
        out[i] = keys.setdefault(key, len(keys))
    return out, {v: k for k, v in keys.items()}


def collective_deviants(objects, summaries, stopped=None):
    """The first world collective (by index) where a few main threads entered another one
    than the rest, or none at all though their trace ran to its end (``stopped``: per
    object, it stopped early): (index, {obj: (own key, or None for none, norm key)}), or
    None."""
    seqs = {o: s["collectives"] for o, s in summaries.items() if objects[o][1] == 0}
    longest = max((len(s) for s in seqs.values()), default=0)
    for k in range(longest):
        there = {o: int(s[k]) for o, s in seqs.items() if len(s) > k}
        # every rank enters each world collective: a finished trace that never entered
        # the one all the others did skipped it
        skipped = [o for o in seqs if len(seqs[o]) <= k and not (stopped is not None and stopped[o])]
        if skipped and len(set(there.values())) == 1 and len(seqs) >= MIN_PEERS and \
                len(skipped) <= FEW_DEVIANTS * len(seqs):
            return k, {o: (None, next(iter(there.values()))) for o in skipped}
        if len(there) < 2:
            return None
        values, counts = np.unique(list(there.values()), return_counts=True)
        if len(values) == 1:
            continue
        norm = int(values[np.argmax(counts)])
        odd = {o: (v, norm) for o, v in there.items() if v != norm}
        if len(there) >= MIN_PEERS and len(odd) <= FEW_DEVIANTS * len(there):
            ref = seqs[next(o for o, v in there.items() if v == norm)]
            # one that goes on as the others do after it skipped it
            return k, {o: (None if _goes_on(seqs[o], ref, k) else v, n) for o, (v, n) in odd.items()}
        # no clear majority (two ranks, say): the ranks that entered it as they never did
        # before, when the others entered it as before
        new = {o for o, v in there.items() if v not in seqs[o][:k].tolist()}
        if new and len(new) < len(there):
            usual = [v for o, v in there.items() if o not in new]
            norm = max(set(usual), key=usual.count)
            return k, {o: (there[o], norm) for o in new}
        return None         # no clear norm: the ranks disagree among themselves
    return None


def _goes_on(seq, ref, k, window=3):
    """Whether ``seq`` from its ``k``-th collective is ``ref`` from its ``k+1``-th (the
    ``k``-th skipped), over a few collectives."""
    n = min(window, len(ref) - k - 1, len(seq) - k)
    return n > 0 and np.array_equal(seq[k:k + n], ref[k + 1:k + 1 + n])


def where_peers_entered(summaries, o, peer, k):
    """Where in trace ``o`` the ``k``-th collective would be: at the place in the same time
    step where ``peer`` entered it (else right after ``o``'s last collective before it)."""
    at, mine = summaries[peer]["collective_at"], summaries[o]
    steps, own = summaries[peer]["steps"], mine["steps"]
    if steps is not None and own is not None and len(at) > k:
        j = int(np.searchsorted(steps["starts"], at[k], side="right")) - 1
        if 0 <= j < len(own["starts"]) and at[k] < steps["ends"][j]:
            return int(min(own["starts"][j] + at[k] - steps["starts"][j], own["ends"][j] - 1))
    return int(mine["collective_at"][k - 1]) + 1 if k else 0
