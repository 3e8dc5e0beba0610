"""The verdict in words: every sentence the verdict carries (``verdict.build``'s culprits'
``why``, ``summary``, how processes ended, the shared change), built from the verdict's data
here, so that the rules that choose the culprits (``verdict``, ``criteria``) hold no
English.  The sentences are part of the verdict's JSON contract (docs/verdict.md): the
HDF5 file, ``--json`` and the API carry them, so they are made with the verdict, not
by a view."""
from ...naming import describe_members, shorten
from . import criteria
from ..compare import divergence as dv

NAME_SHOWN = 80           # characters of a call name in a sentence


def _cut(name):
    return shorten(name, NAME_SHOWN)


def _call(names):
    return _cut(names[0]) if names else None


def _calls(names):
    """One to three calls in words: "a", "a and b", "a, b and c"."""
    shown = [_cut(x) for x in names[:3]]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1] if shown else "?"


NORMAL_RUN = "the normal run"


PEERS = "the other ranks"       # the reference of a verdict made from the failed run alone


def why(d, reference=NORMAL_RUN):
    """What a trace did at its first difference, in words (``reference``: whom it is
    compared with)."""
    n, f = _call(d.normal), _call(d.faulty)
    there = f"; {reference} called {n} there" if n else ""
    calling = f", calling {f}" if f else ""      # a trace that went on only returning from its calls names none
    words = {
        dv.ARGUMENTS: f"called {f} where {reference} called {n}",
        dv.DIFFERENT: f"called {f} where {reference} called {n}",
        dv.EXTRA: f"made an extra call to {_calls(d.faulty)}" if len(d.faulty) < 2 else
        f"made extra calls to {_calls(d.faulty)}",
        dv.MISSING: f"skipped {_calls(d.normal)}",
        dv.LIVELOCK: f"kept repeating {_calls(d.faulty)} ({d.repeats:,} times{there}) until it was stopped from "
                     f"outside",
        dv.ENDED: f"ended early, before {n}" if n else "ended early",
        dv.CONTINUED: f"went on after {reference} had ended{calling}",
        dv.CUT: f"went on where {reference}'s trace is cut short{calling}",
        dv.NEW: f"is a thread {reference} did not have" + (f", running {f}" if f else ""),
        dv.LOST: f"is missing: {reference} had this thread",
        dv.STOPPED: f"stopped before {n}" if n else "stopped",
    }
    return words.get(d.status, d.status)


def place_words(d):
    """Where in the program, in words: the outermost loop iteration, else the call path."""
    if d.loops:
        frame, body, iteration, iterations = d.loops[0]
        return f"in iteration {iteration} of {iterations} of [{_body_text(body)}] in {frame}"
    return f"in {' > '.join(d.call_path)}" if d.call_path else "at the start"


def _body_text(body, shown=4):
    return " ".join(body[:shown]) + (" ..." if len(body) > shown else "")


def describe_ending(ending):
    """A process's end record in words: "SIGSEGV", "an MPI error in MPI_Recv (...)"."""
    how = ending.get("how")
    if how == "signal":
        return f"{ending.get('signal', 'a signal')}"
    if how == "mpi_error":
        text = f": {_cut(ending['error'])}" if ending.get("error") else ""
        return f"an MPI error in {ending.get('call', 'an MPI call')}{text}"
    if how == "abort":
        return f"MPI_Abort (error code {ending.get('code')})"
    if how in ("exit", "finalized"):
        return f"exit code {ending.get('code')}" + (" without MPI_Finalize" if how == "exit" else "")
    return str(how)


def _stack_words(d):
    """", in <the calls it stopped in>" unless ``place_words`` already named them."""
    return f", in {d.stack_end}" if d.stack_end and d.loops else ""


def _clock_words(clock):
    return "an unknown number of collectives" if clock == float("inf") else \
        f"{int(clock)} collective{'s' if clock != 1 else ''}"




# -- the culprits' reasons (``Candidate.why``), one per criterion --------------------
def left_path_reason(d, reference, death=None):
    """A trace that left the normal path: what it did, where; and how its process died
    after, if it did (``death``: the end record)."""
    reason = why(d, reference) + " " + place_words(d)
    return reason + (f"; then the process died of {describe_ending(death)}" if death else "")


def died_reason(d, ending):
    """A process that died (``d``: its trace's divergence, SAME where it equals the normal
    one)."""
    place = ("after making every call its normal twin made (its trace equals the normal one)"
             if d.status == dv.SAME else place_words(d))
    return f"died of {describe_ending(ending)} {place}"


def ranking_pick_reason(setting, shared):
    """A trace the ranking table singles out beyond a change ``shared`` traces share."""
    return f"is singled out by the ranking table ({setting}) beyond a change {shared} traces share"


def through_collective_reason(d, inside):
    """One of the few traces that got through the collective ``inside`` the others are in."""
    return f"got through the collective the others are still in ({inside}), {place_words(d)}{_stack_words(d)}"


def least_progressed_reason(d, clock, measure):
    """One of the least progressed stopped traces (``clock``: collectives it entered;
    ``measure``: what its progress is a share of)."""
    return (f"progressed least (stopped after {_clock_words(clock)}, {100 * d.progress:.1f}% of {measure}), "
            f"{place_words(d)}" + _stack_words(d))


def progress_measure(reference):
    """What a stopped trace's progress is measured against."""
    return "its normal calls" if reference == NORMAL_RUN else "the calls of the trace of its kind that made most"


def shared_change(shared, reference):
    """The change most traces share, said once: {"traces", "members", "what"}."""
    return {"traces": len(shared), "members": describe_members(sorted(e.key for e in shared),
                                                               any(e.key[1] for e in shared)),
            "what": why(shared[0].divergence, reference)}


def summary(verdict, entries, n_objects, n_stopped):
    """The verdict in one line."""
    kind = verdict["kind"]
    if kind == "none":
        noise, cut = verdict.get("noise_traces", 0), verdict.get("cut_traces", 0)
        head = (f"no difference where the traces can be compared: {cut} of the {n_objects} traces went on where "
                f"the normal twin's trace is cut short, the others equal their normal twin" if cut else
                f"no difference: each of the {n_objects} traces equals its normal twin")
        differs = "differ" if cut else "differs"
        return head + (f" or {differs} only as the normal runs differ from each other ({noise} traces)" if noise else "")
    if kind == "timing":
        return "timing only: every trace made the same calls, but some loop iterations took much longer or shorter"
    head = {"crash": "crash", "hang": "hang", "changed": "changed behaviour"}[kind]
    parts = []
    if verdict["died"]:
        d = verdict["died"][0]
        parts.append(f"rank {d['rank']} died first ({d['how']})")
    if entries and entries[0].group == criteria.RANKING_PICK:
        c, shared = verdict["culprits"][0], verdict["shared_change"]
        parts.append(f"rank {c['rank']} thread {c['thread']} {c['why']} ({shared['members']} {shared['what']})")
    elif entries:
        c = verdict["culprits"][0]
        tied = entries[:verdict["tied"]]
        if len(tied) > 1 and len({e.why for e in tied}) == 1:
            # the same change in every tied trace: say it once, for all of them
            keys = sorted(e.key for e in tied)
            every = "every trace, " if len(tied) == n_objects else ""
            parts.append(f"{every}{describe_members(keys, any(t for _, t in keys))} {c['why']}")
        else:
            tie = ""
            if verdict["tied"] > 1:
                tie = (f" (tied with {verdict['tied'] - 1} other{'s' if verdict['tied'] > 2 else ''} at the same "
                       f"point: nothing in the traces tells them apart)")
            elif verdict["same_point"] > 1 and verdict["waited_on"]:
                tie = (f" (before {verdict['same_point'] - 1} other{'s' if verdict['same_point'] > 2 else ''} at the "
                       f"same point: {verdict['waited_on']} stopped trace{'s' if verdict['waited_on'] > 1 else ''} "
                       f"wait{'' if verdict['waited_on'] > 1 else 's'} for it)")
            parts.append(f"rank {c['rank']} thread {c['thread']} {c['why']}{tie}")
    if n_stopped and kind != "changed":
        v = verdict["victims"]
        stuck = f", most in {v[0]['stack'].rsplit(' > ', 1)[-1]}" if v else ""
        parts.append(f"{n_stopped} trace{'s' if n_stopped != 1 else ''} stopped early{stuck}")
    return f"{head}: " + "; ".join(parts) if parts else head


# -- the failed run alone (``engine.alone``): its norm is the run's own ranks and steps --
ALONE_RAISE = "compare with a normal run (analyze NORMAL_DIR FAULTY_DIR)"


def alone_no_difference(n_objects):
    return (f"no difference found: in the faulty run alone, none of the {n_objects} traces left the norm of its "
            f"peers or of its own time steps, and no process died or stopped")


def alone_confidence_why(why_text):
    """The confidence's reason reworded for a verdict made without a normal run."""
    return (why_text.replace("its twin's", "the other ranks'").replace("the normal path", "the norm")
            + "; made without a normal run (the norm: the run's own ranks and time steps)")
