"""The analysis of a failed run alone (no normal run, issue 26): the MPI shell around
``stages.diagnose.failed_run``.  Reading, global ids and trace states as in the two-run pipeline; then
every rank summarises its traces (collectives, time steps), the root finds who left the
run's own norm, every rank describes those traces there, and the root gives the verdict."""
import numpy as np

from .. import config
from ..model import RunIndex
from ..readers import discover_run
from ..stages.diagnose import failed_run as alone, collectives, messages, verdict, wording
from ..stages.model import calltree
from ..stages.compare import divergence
from . import assembly
from .choreography import Choreography
from .pipeline import read_runs


def analyze_alone(faulty_path, *, choreography=None, arguments=True, K=config.CALLTREE_K):
    """Results of the faulty run alone: the verdict from the run's own norm (its peers and
    its own time steps), how processes ended and where traces stopped.  No ranking grid
    (there is no normal clustering to compare with)."""
    ch = choreography or Choreography()
    run = ch.on_root("finding traces", lambda: discover_run(faulty_path))
    runs = [RunIndex(path="", fmt=run.fmt, refs=[], rank_source="", notes=[]), run]
    shard, _, gevents, names, _, _, _, pieces = read_runs(ch, runs, (), arguments, None, faulty_path)

    maps = calltree.id_maps(names)
    keys, rows_by, p2p = collectives.collective_keys(names)[0], alone.row_keys(names), messages.p2p_ids(names)
    # calls made inside free blocks (arrival order, polling, dynamic shares) vary per step
    # in a good run: their counts are no norm
    free = np.unique(rows_by[np.flatnonzero(shard.free_ids)]) if shard.free_ids.any() else None
    summaries = ch.gather(ch.step("run alone: evidence", lambda: [
        (int(obj), alone.summary(ev, maps, keys, K, rows_by, p2p, free, repeated))
        for ev, obj, repeated in zip(gevents, shard.objs.tolist(), shard.repeated.tolist())]))
    found = ch.on_root("run alone: norm", _points, pieces, summaries)
    objs = np.array(sorted(found), dtype=np.int64)
    at = (objs, np.array([found[o][0] for o in objs.tolist()], dtype=np.int64))
    contexts = ch.gather(ch.step("divergence context", divergence.contexts, gevents, shard.runs, shard.objs,
                                 shard.objects, at, maps, K, lone=objs, repeated=shard.repeated))
    ch.root_only("verdict", _verdict, pieces, found, summaries, contexts, names)
    return ch.root_only("results", assembly.make_results, pieces)      # made once, from the steps' pieces


def _points(pieces, summaries):
    """The root: stopped traces, and where to describe the traces the verdict will name
    (``alone.points`` of every trace's summary, livelocks included)."""
    n = len(pieces.objects)
    pieces.stopped = np.array(verdict.stopped_objects(pieces.present, pieces.complete, pieces.open_calls,
                                                      pieces.endings, pieces.objects, np.zeros(n, dtype=bool)),
                              dtype=bool)
    return alone.points(pieces.objects, pieces.names, _by_object(summaries), pieces.stopped, pieces.endings)


def _by_object(summaries):
    return {o: s for part in summaries for o, s in part}


def _verdict(pieces, found, summaries, gathered, names):
    contexts = {obj: ctx for part in gathered for run, obj, ctx in part}
    divs = alone.divergences(pieces.objects, names, found, contexts, _by_object(summaries), pieces.stopped,
                             pieces.open_calls[1], lambda where: verdict._loops(where, names))
    pieces.divergences = divs
    pieces.verdict = verdict.build(pieces.objects, divs, pieces.stopped, pieces.endings, pieces.open_calls,
                                    False, arguments=any(n.startswith("MPI_") and n.endswith("]") for n in names),
                                    reference=wording.PEERS)
    v = pieces.verdict
    if v["kind"] == "none":
        v["summary"] = wording.alone_no_difference(len(pieces.objects))
    v["alone"] = True
    v["order_free"] = pieces.order_free
    v["confidence"]["why"] = wording.alone_confidence_why(v["confidence"]["why"])
    if v["kind"] != "none" and v["confidence"]["level"] == "high" and v["culprits"] and \
            v["culprits"][0]["status"] in (divergence.MISSING, divergence.EXTRA):
        v["confidence"]["level"] = "medium"
        v["confidence"]["raise"] = wording.ALONE_RAISE
