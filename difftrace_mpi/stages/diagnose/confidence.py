"""How far a verdict can be trusted (``stages.diagnose.verdict.build``'s last step): a level,
why, and what would make it firmer, from the first candidate's evidence.  Candidates
are ``stages.diagnose.criteria.Candidate`` as ``build`` orders them."""
from . import criteria
from ..compare import divergence as dv


def confidence(verdict, entries, arguments, free=frozenset()):
    """How far the verdict can be trusted, in words: {"level": high/medium/low, "why",
    "raise": what would make it firmer ("" when nothing)}.  A difference in calls met
    inside order-free blocks (``free``) is not "high": which block a message falls in
    can depend on when it arrived."""
    kind = verdict["kind"]
    if kind in ("none", "timing") or not entries:
        return {"level": "high" if kind == "none" else "medium", "why": "every trace was compared with its twin",
                "raise": ""}
    first = entries[0]
    d = first.divergence
    trace_with = ("" if arguments else
                  "trace with pin/ (parlot-run), which records MPI peers, tags, counts and roots, so that the "
                  "culprit's own calls can differ from its twin's")
    if first.group == criteria.RANKING_PICK:
        return {"level": "medium", "why": "the earliest change is one most traces share; the culprit is the ranking "
                "table's pick", "raise": "compare against a normal run started with the same input"}
    if first.group == criteria.STANDS_OUT:
        return {"level": "low", "why": "no trace left the normal path and no process died: the culprit is only the "
                "least progressed", "raise": trace_with or "trace longer runs of the hang (stop it later) or with "
                "more of the program's functions"}
    if verdict["tied"] > 1:
        return {"level": "low", "why": f"{verdict['tied']} candidates left the normal path at the same point and "
                "nothing in the traces tells them apart", "raise": trace_with or "a second normal run "
                "(--also-normal) or a run at another scale"}
    if first.group == criteria.DIED:
        return {"level": "high", "why": "its process's end record says it died", "raise": ""}
    if d.left_path and set(d.faulty[:1] or d.normal[:1]) & free:
        runner = entries[1] if len(entries) > 1 else None
        return {"level": "medium", "why": "the culprit's own calls differ from its twin's, in calls whose order and "
                "number depend on message arrival (compared as sets): a message that arrived a synchronisation "
                "later would look alike" + (f"; runner-up: rank {runner.key[0]} thread {runner.key[1]}" if runner else ""),
                "raise": "a second good run (--also-normal, also_normal=) shows whether good runs differ there"}
    if d.status in (dv.ARGUMENTS, dv.LIVELOCK):
        return {"level": "high", "why": "the culprit's own calls differ from its twin's", "raise": ""}
    if d.left_path:
        return {"level": "high" if arguments else "medium", "why": "the culprit's own calls differ from its twin's"
                + ("" if arguments else ", but without MPI arguments a message's peer or tag cannot be seen"),
                "raise": trace_with}
    return {"level": "medium", "why": "the culprit stopped on the normal path", "raise": trace_with}
