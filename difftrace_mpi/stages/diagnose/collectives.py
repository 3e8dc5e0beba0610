"""World collectives across ranks, for the failed run alone (``stages.diagnose.failed_run``): every rank
enters the collectives of ``MPI_COMM_WORLD`` in the same order with the same significant
arguments (operation, root, count and type where MPI requires them equal), so the first
collective a few ranks entered otherwise, or never entered though their traces ran to
their end, names them.

Plain functions over numpy arrays.
"""
import re

import numpy as np

from ..model import calltree
from ..compare import divergence as dv

FEW_DEVIANTS = 0.25     # at most this share of the peers may leave the norm at one point
CHUNK = 1 << 23         # collectives compared together
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
    for k in _turns(seqs, stopped):
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
        new = {o for o, v in there.items() if not (seqs[o][:k] == v).any()}
        if new and len(new) < len(there):
            usual = [v for o, v in there.items() if o not in new]
            norm = max(set(usual), key=usual.count)
            return k, {o: (there[o], norm) for o in new}
        return None         # no clear norm: the ranks disagree among themselves
    return None


def _turns(seqs, stopped):
    """The indices where ``collective_deviants``' look ends, in order (below the longest
    sequence): the first where the sequences that have one differ, where fewer than two
    have one, and where the first finished trace has none (a skip told there, or never).
    At every other index all the sequences that have one agree and none skipped it."""
    if not seqs:
        return []
    ref = max(seqs.values(), key=len)
    sizes = sorted(len(s) for s in seqs.values())
    end = sizes[-2] if len(sizes) > 1 else 0
    for s in seqs.values():            # the first index where one differs from the longest
        for c in range(0, min(len(s), end), CHUNK):
            odd = np.flatnonzero(s[c:min(len(s), c + CHUNK)] != ref[c:min(len(s), c + CHUNK)])
            if len(odd):
                end = min(end, c + int(odd[0]))
                break
    finished = [len(s) for o, s in seqs.items() if stopped is None or not stopped[o]]
    return sorted({t for t in (end, min(finished, default=end)) if t <= end and t < len(ref)})


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


def collective_points(objects, names, summaries, stopped):
    """``stages.diagnose.failed_run.points`` of the collective deviants: {obj: (position, status, normal
    names, faulty names, (index,))}, a skipped collective placed where its peers entered it."""
    out, coll = {}, collective_deviants(objects, summaries, stopped)
    if coll is None:
        return out
    k, odd = coll
    key_names = collective_keys(names)[1]
    for o, (own, norm) in odd.items():
        if own is None:         # skipped
            peer = next(p for p, s in summaries.items() if objects[p][1] == 0 and p not in odd
                        and len(s["collectives"]) > k)
            out[o] = (where_peers_entered(summaries, o, peer, k), dv.MISSING, [_key_words(key_names[norm])], [], (k,))
            continue
        same = key_names[own][0] == key_names[norm][0]
        out[o] = (int(summaries[o]["collective_at"][k]), dv.ARGUMENTS if same else dv.DIFFERENT,
                  [_key_words(key_names[norm])], [_key_words(key_names[own])], (k,))
    return out


def _key_words(key):
    return key[0] + (f"[{','.join(key[1:])}]" if len(key) > 1 else "")
