"""Point-to-point messages no rank matches, over a whole run: evidence for the failed run
alone (``stages.diagnose.failed_run``).  From each trace's point-to-point calls as named with their MPI
arguments (``MPI_Isend[count=6,type=MPI_DOUBLE,dest=+1,tag=10]``, peers relative to the
caller), by process: a send that no rank receives, a receive for what nobody sends, and
the sender a truncation error names.

Plain functions over names and small dicts; they run on the root.
"""
import re

import numpy as np

from ..model import calltree
from ..compare import divergence as dv

_FIELD = re.compile(r"([a-z_]+)=([^,\]]*)")

_PROBE = re.compile(r"probe|Mrecv|_init$|Start", re.I)


def p2p_ids(names):
    """Per global id: whether it is a point-to-point send or receive on the world
    communicator with its peer and tag in its name (probes, persistent requests and calls
    on other communicators left out)."""
    out = np.zeros(len(names), dtype=bool)
    for i, name in enumerate(names):
        if i and name.startswith("MPI_") and name.endswith("]") and "comm=" not in name and \
                ("dest=" in name or "src=" in name or "source=" in name) and \
                not _PROBE.search(calltree.plain_name(name)):
            out[i] = True
    return out


def _messages(name, rank, size):
    """The (side, peer, tag) a point-to-point call's name gives ("send" or "recv"; peers
    as world ranks, "ANY"; tags as ints or "ANY"), none where a peer is MPI_PROC_NULL or
    unknown."""
    fields = dict(_FIELD.findall(name[len(calltree.plain_name(name)):]))
    out = []
    for side, peer_keys, tag_keys in (("send", ("dest",), ("stag", "tag")),
                                      ("recv", ("src", "source"), ("rtag", "tag"))):
        peer = next((fields[k] for k in peer_keys if k in fields), None)
        tag = next((fields[k] for k in tag_keys if k in fields), None)
        if peer is None or tag is None:
            continue
        if peer == "ANY":
            at = "ANY"
        elif re.fullmatch(r"[+-]\d+", peer):
            at = (rank + int(peer)) % size
        elif peer.isdigit():
            at = int(peer)
        else:
            continue
        out.append((side, at, "ANY" if tag == "ANY" else int(tag) if re.fullmatch(r"-?\d+", tag) else None))
    return [m for m in out if m[2] is not None]


_TRUNCATED = re.compile(r"[Mm]essage from rank (\d+) and tag (\d+) truncated")


def message_evidence(objects, names, summaries, endings=None):
    """Traces whose point-to-point calls no other rank's calls match, over the whole run:
    {obj: (position, status, normal names, faulty names, ())}.

    * a send to a rank that never receives from it with that tag (nor from any source or
      with any tag), where that rank does receive that tag from others or other tags from
      it: a wrong peer or tag on the sending side;
    * a receive for a source and tag nobody sends it, where that source does send it other
      tags or others send it that tag (and the source sends anything at all): a wrong tag
      or source on the receiving side; a
      rank whose message went astray (a send of the first kind) is named instead of the
      rank that waited for it;
    * a process that died of a truncated message, whose sender (MPI names it) sent that
      rank that tag with arguments it had not used for them before: the sender.

    Peers relative to the caller (``dest=+1``) are taken modulo the world size; the ranks
    must be 0..P-1."""
    ranks = sorted({r for r, _ in objects})
    if ranks != list(range(len(ranks))):
        return {}
    size = len(ranks)
    calls = []          # (side, rank, peer, tag, obj, gid, count, first position)
    for o, s in summaries.items():
        rank = objects[o][0]
        for gid, (count, first) in (s.get("messages") or {}).items():
            for side, peer, tag in _messages(names[gid], rank, size):
                calls.append((side, rank, peer, tag, o, gid, count, first))
    sends, recvs, senders = {}, {}, {}
    for side, rank, peer, tag, *_ in calls:
        if side == "send":
            sends.setdefault(rank, set()).add((peer, tag))
            senders.setdefault((peer, tag), set()).add(rank)
        else:
            recvs.setdefault(rank, set()).add((peer, tag))
    out, astray = {}, set()

    def flag(o, at, status, normal, faulty):
        if o not in out or at < out[o][0]:
            out[o] = (at, status, normal, faulty, ())

    for side, rank, peer, tag, o, gid, count, first in sorted(calls, key=lambda c: c[7]):
        if side != "send" or peer == "ANY":
            continue
        theirs = recvs.get(peer, set())
        if any(p in (rank, "ANY") and t in (tag, "ANY") for p, t in theirs):
            continue
        if any(p == rank for p, _ in theirs) or any(t == tag for _, t in theirs):
            astray.add((rank, tag))
            flag(o, first, dv.ARGUMENTS, [f"a send that rank {peer} receives"], [names[gid]])
    for side, rank, peer, tag, o, gid, count, first in sorted(calls, key=lambda c: c[7]):
        if side != "recv" or peer == "ANY" or tag == "ANY" or (peer, tag) in astray:
            continue
        if peer not in sends:
            continue        # a source that sent nothing at all (its trace empty, say) is its own fault
        theirs = sends[peer]
        if (rank, tag) in theirs:
            continue
        if any(p == rank for p, _ in theirs) or senders.get((rank, tag), set()) - {peer}:
            flag(o, first, dv.ARGUMENTS, [f"a receive for what rank {peer} sends"], [names[gid]])
    for (run, dead), ending in (endings or {}).items():
        found = _TRUNCATED.search(str((ending or {}).get("error") or "")) if run == 1 else None
        if not found or int(found.group(1)) not in ranks:
            continue
        sender, tag = int(found.group(1)), int(found.group(2))
        used = sorted((first, o, gid) for side, rank, peer, t, o, gid, count, first in calls
                      if side == "send" and rank == sender and peer == dead and t == tag)
        if len(used) >= 2 and used[-1][2] != used[0][2]:
            # the sender's last new way of sending that message: where its arguments changed
            first, o, gid = used[-1]
            flag(o, first, dv.ARGUMENTS, [names[used[0][2]]], [names[gid]])
    return out
