"""The verdict: one answer built from every trace's first divergence, how each process
ended, and where the faulty run stopped.

The rule, in order:

* **kind**: a process that died abnormally (a fatal signal, an MPI error, MPI_Abort, a
  non-zero exit the normal run did not have) makes it a *crash*; otherwise a faulty trace
  that stopped early (inside calls its normal twin had left, or cut short) makes it a
  *hang*; otherwise a trace that differs from its twin makes it *changed* behaviour;
  otherwise flagged loop timings make it *timing* only; otherwise *none*: every trace
  equals its normal twin.
* **culprits**: the traces that left the normal path (a call, argument or length
  difference) and the processes that died, ordered by the logical clock at which that
  happened (``divergence``: MPI collectives entered before it; a worker thread on its
  process's clock).  At one clock, main threads that left the path come before deaths,
  deaths before worker threads.  Traces that only stopped on the normal path are victims
  of the others; when nothing left the path and nothing died, the least progressed
  stopped main threads are the culprits.  Equal clocks are reported as ties.
* **where**: the first culprit's call path, loop and iteration (call-tree folding), and
  what the normal run called there against what the faulty one did.
* **victims**: stopped traces grouped by the calls they stopped in (STAT-style classes).
"""
import re
from dataclasses import dataclass, field, replace

from ... import config
from ...naming import describe_members, token_label
from . import criteria
from ..compare import divergence as dv
from .confidence import confidence
from .wording import (NORMAL_RUN, describe_ending, died_reason, least_progressed_reason, left_path_reason,
                      progress_measure, ranking_pick_reason, shared_change, summary,
                      through_collective_reason)
from .criteria import Candidate, Evidence
from ..model.calltree import is_collective, plain_name

# the signals a launcher, ``timeout`` or the batch system ends a job with: a process ended
# by one of them was stopped from outside (a hang's victims); any other signal killed it
STOP_SIGNALS = frozenset({"SIGTERM", "SIGKILL", "SIGINT"})


@dataclass
class Divergence:
    """One trace's first difference from its normal twin (faulty view)."""
    key: tuple                    # (rank, thread)
    status: str                   # divergence.SAME ... divergence.LOST
    position: int                 # event index of the first difference (-1: none)
    clock: object                 # collectives before it on the process's clock, None: unknown
    normal: list                  # call names the normal made there (short)
    faulty: list                  # call names the faulty made instead
    call_path: list               # open calls there, outermost first (plain names)
    loops: list                   # [(frame name, body labels, iteration, iterations)] outermost first
    stopped: bool = False         # the faulty trace stopped early (hung, killed or died)
    clock_end: object = None      # collectives entered by the faulty trace in all
    stack_end: str = ""           # calls open where the faulty trace ended
    progress: float = 1.0         # calls the faulty trace entered / those of its normal twin
    notes: list = field(default_factory=list)
    order: tuple = ()             # program order of the first difference within its time step (see ``_program_order``)
    repeats: int = 0              # LIVELOCK: how often the faulty trace repeated its last unit

    @property
    def iteration(self):
        return self.loops[0][2] if self.loops else None

    @property
    def left_path(self):
        return self.status in dv.LEFT_PATH

    def as_dict(self):
        return {"rank": self.key[0], "thread": self.key[1], "status": self.status, "position": self.position,
                "clock": self.clock, "normal": self.normal, "faulty": self.faulty, "call_path": self.call_path,
                "loops": [{"in": f, "body": b, "iteration": i, "iterations": n} for f, b, i, n in self.loops],
                "stopped": self.stopped, "clock_end": self.clock_end}


# -- how processes ended ---------------------------------------------------------------
def died(ending, normal_ending=None):
    """Whether a faulty process's end record says it died abnormally."""
    if not ending:
        return False
    how = ending.get("how")
    if how == "signal":
        signal = ending.get("signal")
        same_as_normal = (normal_ending or {}).get("how") == "signal" and (normal_ending or {}).get("signal") == signal
        return signal not in STOP_SIGNALS and not same_as_normal
    if how in ("mpi_error", "abort"):
        return True
    if how in ("exit", "finalized"):
        normal_code = (normal_ending or {}).get("code", 0)
        return ending.get("code") not in (None, 0, normal_code)
    return False


def ended_normally(ending):
    return bool(ending) and ending.get("how") in ("exit", "finalized") and ending.get("code") in (0, None)


# -- per-trace divergences ----------------------------------------------------------
def _plain(names, ids):
    return [names[i] for i in ids]


def body_labels(body, names):
    """A loop body (``calltree.body_ids``) in words: plain names, inner loops as
    ``[a b]^3``."""
    return [token_label(f"[{' '.join(body_labels(item, names))}]", count) if isinstance(item, list)
            else plain_name(names[item]) for item, count in body]


def frame_words(frame, names):
    return "the thread" if frame < 0 else plain_name(names[frame])


def _loops(where, names):
    """``calltree.locate`` output as [(frame name, body labels, pass, passes)], the loop
    nest outermost first: per call level holding a loop, its time step
    (``calltree.step_of``, the level's outermost loop where it is alone there), then the
    passes of the loops inside that step at the same level."""
    out = []
    for frame, _, loops, step, _ in where:
        if step is None:
            continue
        words = frame_words(frame, names)
        out.append((words, body_labels(step[0], names), step[1], step[2]))
        inner = next((k for k, (body, _, _) in enumerate(loops) if body == step[0]), None)
        if inner is not None:
            out += [(words, body_labels(body, names), it, n) for body, it, n in loops[inner + 1:]]
    return out


def where_loops(d):
    """A divergence's loop nest as the JSON gives it: [{"in", "body", "pass", "of"}]."""
    return [{"in": frame, "body": list(body), "pass": it, "of": n} for frame, body, it, n in d.loops]


def _program_order(where):
    """Where a position lies in program order, comparable between the ranks of one
    program: per call level from the outermost time step down, (step, children into
    the step), else (0, child index).  Levels above the first step are left out (a rank
    with more set-up calls must not come later in every step)."""
    levels = [(step[1], offset) if step is not None else (0, j) for _, j, _, step, offset in where]
    first = next((i for i, (_, _, _, step, _) in enumerate(where) if step is not None), 0)
    return tuple(levels[first:])


def trace_divergences(objects, names, plain, stopped_mask, open_calls, points, contexts, noise=None,
                      equal_elsewhere=(), normal_cut=None):
    """Per object whose traces differ: its Divergence.  ``points``: (objs, positions);
    ``contexts``: {(run, obj): divergence.context}; ``stopped_mask``: per object, the
    faulty trace stopped early; ``open_calls``: [normal, faulty] calls open at the end.
    With more normal runs: ``noise`` {obj: (position, call path ids)}: where two normal
    runs' traces first differ; a faulty trace that did not stop and differs there or
    later, or at the same call path, differs as the normal runs do (status NOISE); and
    ``equal_elsewhere``: objects whose faulty trace equals another normal run's (SAME).
    ``normal_cut``: per object, its normal trace is incomplete (cut short)."""
    out = {}
    noise = noise or {}
    for obj, position in zip(points[0].tolist(), points[1].tolist()):
        if obj in equal_elsewhere and not stopped_mask[obj]:
            continue
        normal, faulty = contexts.get((0, obj)), contexts.get((1, obj))
        stopped = bool(stopped_mask[obj]) and faulty is not None
        status, n_ids, f_ids = dv.classify(normal, faulty, plain, stopped,
                                           normal_cut=normal_cut is not None and bool(normal_cut[obj]))
        ref = normal if normal is not None else faulty
        # where: the normal's view (its loops are complete); the first difference's calls
        where = ref["where"]
        # a worker's time step is its main thread's, where that opened the worker's region
        main_where = ref.get("main_where")
        clock = None if status in (dv.NEW, dv.LOST) else (faulty or normal).get("process_clock")
        call_path = [plain_name(names[level[0]]) for level in where if level[0] >= 0]
        order = (_program_order(main_where) if main_where else ()) + _program_order(where)
        repeats = dv.livelock(faulty)[1] if status == dv.LIVELOCK else 0
        if obj in noise and not stopped and status in dv.LEFT_PATH:
            noise_at, noise_path = noise[obj]
            if position >= noise_at or [f for f, *_ in where if f >= 0] == noise_path:
                status = dv.NOISE
        out[obj] = Divergence(tuple(objects[obj]), status, int(position), clock, _plain(names, n_ids),
                              _plain(names, f_ids), call_path,
                              _loops(main_where, names)[:1] + _loops(where, names) if main_where else _loops(where, names),
                              stopped,
                              None if faulty is None else faulty.get("process_clock_end"),
                              open_calls[1][obj] if stopped else "",
                              faulty["calls"] / normal["calls"] if faulty and normal and normal["calls"] else 1.0,
                              order=order, repeats=repeats)
    return out


def stopped_objects(present, complete, open_calls, endings, objects, entry_only_prefix):
    """Per object: whether its faulty trace stopped early: it ends inside calls the
    normal had left or was cut short, or (entry-only traces) is a strict prefix of its
    normal twin; not when its process ended normally, always when it died.  A process
    stops as a whole: when one of its threads stopped, all did (a killed process's idle
    workers end outside any call, as in a finished run)."""
    # (a faulty trace that ends with no call open returned from all of them: it did not stop,
    # whatever calls its normal twin, cut short, ended inside)
    early = [bool(present[1, i]) and ((open_calls[1][i] and open_calls[1][i] != open_calls[0][i])
                                      or not complete[1, i] or bool(entry_only_prefix[i]))
             for i in range(len(objects))]
    stopped_ranks = set()
    for i, (rank, _) in enumerate(objects):
        ending = endings.get((1, rank))
        if died(ending, endings.get((0, rank))) or (early[i] and not ended_normally(ending)):
            stopped_ranks.add(rank)
    return [bool(present[1, i]) and rank in stopped_ranks for i, (rank, _) in enumerate(objects)]


# -- the verdict ----------------------------------------------------------------------
# statuses that are no change of the faulty run's behaviour
NO_CHANGE = (dv.SAME, dv.NOISE, dv.CUT)
def _culprit(d, reason, clock):
    return {"rank": d.key[0], "thread": d.key[1], "why": reason, "clock": clock, "status": d.status,
            "iteration": d.loops[0][2] if d.loops else None,
            "call": (d.faulty or d.normal or [None])[0]}


def _unchanged(key):
    """A trace equal to its normal twin (a culprit named by its death or by the ranking)."""
    return Divergence(key, dv.SAME, -1, None, [], [], [], [])


def _order(clock):
    return float("inf") if clock is None else clock


def build(objects, divergences, stopped_mask, endings, open_calls, timing_flagged, limit=config.VERDICT_CULPRITS,
          ranking=None, arguments=True, reference=NORMAL_RUN, free=frozenset()):
    """The verdict dict (the JSON contract, docs/verdict.md) from the per-trace
    divergences (``trace_divergences``), the stopped mask and the end records.

    ``ranking``: (the traces the ranking table singles out, the setting in words), or
    None.  When the earliest difference is one most traces share alike (the faulty run
    was started with other input, say), it singles out nobody: those traces then come
    first, and the shared change is said once.  ``arguments``: the traces carry MPI
    arguments (peers, tags, counts), which the confidence depends on; ``free``: the names
    met inside order-free blocks (``stages.compare.order``), where a difference may come from
    arrival, not from a fault."""
    processes = sorted({r for r, _ in objects})
    deaths = {r: endings[(1, r)] for r in processes
              if died(endings.get((1, r)), endings.get((0, r)))}
    by_key = {d.key: d for d in divergences.values()}
    entries = []        # the candidates (stages.diagnose.criteria)
    for d in divergences.values():
        if d.left_path:
            group = criteria.LEFT_PATH_MAIN if d.key[1] == 0 else criteria.LEFT_PATH_WORKER
            death = deaths[d.key[0]] if d.key[0] in deaths and deaths[d.key[0]].get("thread", 0) == d.key[1] \
                else None
            entries.append(Candidate(_order(d.clock), group, d.key, d, left_path_reason(d, reference, death)))
    for rank, ending in deaths.items():
        key = (rank, int(ending.get("thread") or 0))
        d = by_key.get(key)
        if d is not None and d.left_path:
            continue        # named above, with its death
        if d is None:
            d = _unchanged(key)
        elif _death_path(d):
            d = replace(d, call_path=_death_path(d))
        clock = d.clock_end if d.clock_end is not None else ending.get("mpi_calls")
        entries.append(Candidate(_order(clock), criteria.DIED, key, d, died_reason(d, ending)))
    stopped = [d for d in divergences.values() if d.stopped and not d.left_path]
    named = {e.key for e in entries}
    if not entries and stopped:
        entries = _odd_stops(stopped, progress_measure(reference))
        named = {e.key for e in entries}
    evidence = Evidence(_waited_on([d for d in divergences.values() if d.stopped], open_calls, objects, processes),
                        deaths)
    entries = criteria.ordered(entries, evidence)
    shared = _shared_change(entries, objects)
    if shared and ranking and ranking[0]:
        keys, setting = ranking
        lead = []
        for key in keys:
            d = by_key.get(tuple(key)) or _unchanged(tuple(key))
            lead.append(Candidate(shared[0].clock, criteria.RANKING_PICK, tuple(key), d,
                                  ranking_pick_reason(setting, len(shared))))
        entries = lead + [e for e in entries if e.key not in set(map(tuple, keys))]
    culprits = [_culprit(e.divergence, e.why, None if e.clock == float("inf") else e.clock) for e in entries[:limit]]
    # ties: candidates at the same point (clock, step, program order) that no evidence separates
    same_point = [e for e in entries if criteria.point(e) == criteria.point(entries[0])] if entries else []
    ties = len(criteria.tied_with_first(same_point, evidence))
    victims = _victims([d for d in stopped if d.key not in named], open_calls, objects)
    if deaths:
        kind = "crash"
    elif any(stopped_mask):
        kind = "hang"
    elif any(d.status not in NO_CHANGE for d in divergences.values()):
        kind = "changed"
    elif timing_flagged:
        kind = "timing"
    else:
        kind = "none"
    first = entries[0].divergence if entries else None
    unknown = {"call_path": None, "loop": None, "iteration": None, "iterations": None, "loops": [], "normal": None,
               "faulty": None}
    # a culprit named by the ranking: its first difference is the shared one, not its own
    where = _where(first) if first is not None and entries[0].group != criteria.RANKING_PICK else unknown
    if first is not None and first.key[0] in deaths and not first.left_path:
        where["faulty"] = describe_ending(deaths[first.key[0]])
    died_first = _died_first(deaths)
    verdict = {"kind": kind, "culprits": culprits, "tied": ties, "where": where, "victims": victims,
               "died": [{"rank": r, "thread": int(e.get("thread") or 0), "how": describe_ending(e)}
                        for r, e in died_first],
               "changed_traces": sum(1 for d in divergences.values() if d.status not in NO_CHANGE),
               "noise_traces": sum(1 for d in divergences.values() if d.status == dv.NOISE),
               "cut_traces": sum(1 for d in divergences.values() if d.status == dv.CUT),
               "candidates": len(entries),
               "same_point": len(same_point), "alone": False,
               "waited_on": int(evidence.waited_on.get(entries[0].key[0], 0)) if entries else 0}
    verdict["shared_change"] = shared_change(shared, reference) if shared else None
    verdict["confidence"] = confidence(verdict, entries, arguments, free)
    verdict["summary"] = summary(verdict, entries, len(objects),
                                 sum(1 for d in divergences.values() if d.stopped))
    return verdict


_PEER = re.compile(r"(?:\[|,)(?:src|source|dest|peer)=([+-]?\d+)")


def _waited_on(stopped, open_calls, objects, processes):
    """{rank: how many stopped traces of other ranks are in an MPI call naming it as
    their peer} (relative peers "+k" as the tracer writes them, modulo the world size;
    calls on other communicators are left out: their ranks are not world ranks)."""
    index = {key: i for i, key in enumerate(objects)}
    contiguous = processes == list(range(len(processes)))
    counts = {}
    for d in stopped:
        stack = open_calls[1][index[d.key]] if d.key in index else ""
        last = stack.rsplit(" > ", 1)[-1] if stack else ""
        if not last.startswith("MPI_") or ",comm=" in last or "[comm=" in last:
            continue
        peers = set()
        for value in _PEER.findall(last):
            if value[0] in "+-":
                if contiguous:
                    peers.add((d.key[0] + int(value)) % len(processes))
            else:
                peers.add(int(value))
        for rank in peers - {d.key[0]}:
            counts[rank] = counts.get(rank, 0) + 1
    return counts


def _shared_change(entries, objects):
    """The first group of culprits when more than half of the traces of their kind (main
    threads, or all traces) are in it and all made the same change (status and calls,
    wherever in their loops), else []."""
    if not entries:
        return []
    group = [e for e in entries if (e.clock, e.group) == (entries[0].clock, entries[0].group)]
    changes = {(e.divergence.status, tuple(map(plain_name, e.divergence.normal)),
                tuple(map(plain_name, e.divergence.faulty))) for e in group}
    mains = all(e.key[1] == 0 for e in group)
    of_kind = sum(1 for _, t in objects if t == 0) if mains else len(objects)
    if 2 * len(group) > of_kind and len(changes) == 1:
        return group
    return []


def _odd_stops(stopped, measure="its normal calls"):
    """When nothing left the normal path and nothing died: which stopped traces stand out.
    Main threads only (idle workers would crowd them out), unless there are none.

    * A few got through a collective the others are all still inside (their logical clock
      one more, every other trace stopped in a collective): the others cannot leave it, so
      those few entered it differently (a count of 0, another root): they stand out.
    * Otherwise the least progressed: by the collectives they entered, then by the share
      of their normal twin's calls they made; ties together.  (A group merely ahead of
      the others is not the cause: on real hangs the few ranks that got through one more
      collective, while the rest waited in point-to-point calls, were victims.)"""
    mains = [d for d in stopped if d.key[1] == 0] or stopped
    ahead = max(_order(d.clock_end) for d in mains)
    front = [d for d in mains if _order(d.clock_end) == ahead]
    rest = [d for d in mains if _order(d.clock_end) != ahead]
    if rest and 2 * len(front) < len(mains) and ahead != float("inf") and all(
            _order(d.clock_end) == ahead - 1 and is_collective(d.stack_end.rsplit(" > ", 1)[-1]) for d in rest):
        inside = plain_name(rest[0].stack_end.rsplit(" > ", 1)[-1])
        return [Candidate(ahead, criteria.STANDS_OUT, d.key, d, through_collective_reason(d, inside)) for d in front]
    def progress(d):
        return _order(d.clock_end), round(d.progress, 6)
    low = min(progress(d) for d in mains)
    behind = [d for d in mains if progress(d) == low]
    return [Candidate(_order(d.clock_end), criteria.STANDS_OUT, d.key, d,
                      least_progressed_reason(d, _order(d.clock_end), measure)) for d in behind]


def _died_first(deaths):
    """Dead processes, the first to die first (end time, else rank)."""
    return sorted(deaths.items(), key=lambda kv: (kv[1].get("time_ns") is None, kv[1].get("time_ns") or 0, kv[0]))


def _death_path(d):
    """The calls a dead trace had open when it died, where they extend the path of its
    first difference (a death inside a block whose order is free, which the comparison
    left out: ``stages.compare.order``), else None."""
    stack = [plain_name(c) for c in d.stack_end.split(" > ")] if d.stack_end else []
    return stack if len(stack) > len(d.call_path) and stack[:len(d.call_path)] == d.call_path else None


def _where(d):
    frame, body, iteration, iterations = d.loops[0] if d.loops else (None, None, None, None)
    return {"call_path": " > ".join(d.call_path) or None,
            "loop": f"[{' '.join(body)}] in {frame}" if body else None,
            "iteration": iteration, "iterations": iterations, "loops": where_loops(d),
            "normal": d.normal[0] if d.normal else None, "faulty": d.faulty[0] if d.faulty else None}


def _victims(stopped, open_calls, objects, groups=config.VERDICT_VICTIM_GROUPS):
    """Stopped traces grouped by the calls open where they stopped (plain names), main
    threads apart from worker threads (idle workers would crowd them out), largest group
    first: [{"stack", "count", "members", "main"}]."""
    by_stack = {}
    for d in stopped:
        i = objects.index(d.key)
        stack = " > ".join(plain_name(c) for c in open_calls[1][i].split(" > ")) if open_calls[1][i] else ""
        by_stack.setdefault((d.key[1] != 0, stack or "(no open call)"), []).append(d.key)
    ordered = sorted(by_stack.items(), key=lambda kv: (kv[0][0], -len(kv[1]), kv[0][1]))
    multi = any(t for keys in by_stack.values() for _, t in keys)
    return [{"stack": stack, "count": len(keys), "members": describe_members(sorted(keys), multi), "main": not worker}
            for (worker, stack), keys in ordered[:groups]]
