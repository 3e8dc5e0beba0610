"""The verdict's details on traces shaped like real programs (issue 21), one test per class
of error: consequence before cause at one clock, the iteration counted with set-up and
epilogue calls, a skipped call named by itself, a livelock, plain hangs, false notes,
hostile endings, ties broken by evidence, and the confidence.  The traces are ParLOT runs
written here (``readers.parlot`` writers), so every case is small and in process."""
import shutil

import numpy as np

import pytest

from difftrace_mpi.stages.classify.grid import Grid
from difftrace_mpi.engine.pipeline import analyze
from difftrace_mpi.readers import parlot as P
from difftrace_mpi.views.text import ticket_summary

GRID = Grid(filters=("11.mpi",), attributes=("sing.noFreq",), linkages=("ward",))


def calls(*items):
    """Events of nested calls: "f" is a leaf call, ("f", [children]) a call with callees,
    ("f", [children], "open") a call the thread never returned from."""
    out = []
    for item in items:
        if isinstance(item, str):
            out += [item, None]
        else:
            name, kids, *state = item
            out += [name] + calls(*kids) + ([] if state else [None])
    return out


def write_run(d, traces, endings=None):
    """A ParLOT run: ``traces`` {(rank, thread): event list from ``calls``}; ``endings``
    {rank: .end fields}.  A trace that ends inside calls stopped early (hung or killed)."""
    d.mkdir(parents=True, exist_ok=True)
    names = sorted({e for ev in traces.values() for e in ev if e is not None})
    ids = {n: i + 1 for i, n in enumerate(names)}
    for rank in sorted({r for r, _ in traces}):
        pid = 1000 + rank
        P.write_info(d / f"p.{pid}.info", names)
        (d / f"p.{pid}.rank").write_text(str(rank))
        for (r, t), ev in traces.items():
            if r != rank:
                continue
            values = [0 if e is None else ids[e] for e in ev]
            P.write_trace(d / f"p.{pid}.{t}", values)
        if endings and rank in endings:
            (d / f"p.{pid}.end").write_text("".join(f"{k}={v}\n" for k, v in endings[rank].items()))
    return d


def verdict_of(normal, faulty, **kw):
    return analyze(normal, faulty, GRID, lattices=False, **kw)


# -- 1. consequence before cause at one clock ------------------------------------------
def halo_step(rank, step, skip_wait=False, repair=False, check=False):
    waits = ["MPI_Wait"] * (3 if skip_wait else 4)
    body = [("exchange", ["MPI_Irecv[src=-1,tag=1]", "MPI_Irecv[src=+1,tag=1]", "MPI_Isend[dest=-1,tag=1]",
                          "MPI_Isend[dest=+1,tag=1]"] + waits),
            ("compute", ["stencil"] + (["repair"] if repair else []))]
    if check:
        body.append(("check", ["MPI_Allreduce[count=1,type=MPI_DOUBLE,op=MPI_MAX]"]))
    return ("step", body)


def halo_run(d, culprit=None, neighbours=(), ranks=4, steps=12, perm=lambda r: r):
    traces = {}
    for r in range(ranks):
        body = [halo_step(r, s, skip_wait=(r == culprit and s == 7), repair=(r in neighbours and s == 8),
                          check=(s % 5 == 0)) for s in range(1, steps + 1)]
        traces[(perm(r), 0)] = calls(("main", ["MPI_Init", *body, "MPI_Finalize"]))
    return write_run(d, traces)


@pytest.mark.parametrize("perm", [lambda r: r, lambda r: (r + 3) % 4], ids=["ranks", "renumbered"])
def test_cause_comes_before_its_consequence_at_one_clock(tmp_path, perm):
    """Rank 2 skips one MPI_Wait in step 7; ranks 1 and 3 repair the damage in step 8.  No
    collective lies between (the check runs every 5 steps): all share one clock.  The
    culprit is first and the text does not call the others "at the same point"."""
    normal = halo_run(tmp_path / "n", perm=perm)
    faulty = halo_run(tmp_path / "f", culprit=2, neighbours=(1, 3), perm=perm)
    v = verdict_of(normal, faulty).verdict
    clocks = {c["clock"] for c in v["culprits"]}
    assert len(clocks) == 1, v["culprits"]                 # one clock: the order rests on the step
    assert (v["culprits"][0]["rank"], v["where"]["iteration"]) == (perm(2), 7), v["summary"]
    assert v["where"]["normal"] == "MPI_Wait" and v["culprits"][0]["status"] == "missing"
    assert {c["rank"] for c in v["culprits"][1:3]} == {perm(1), perm(3)}
    assert all(c["iteration"] == 8 for c in v["culprits"][1:3])
    assert v["tied"] == 1 and "same point" not in v["summary"]


# -- 2. the iteration with set-up and epilogue calls -----------------------------------
def solver_run(d, bad_step=None, entry_only=False, steps=10):
    """CG-like: the set-up makes the body's first calls (matvec, dot) before the loop, the
    epilogue once more after it."""
    def body(k):
        return ["matvec", "dot", "axpy", "axpy"] + (["axpy"] if k == bad_step else []) + ["update"]
    children = ["init", "matvec", "dot"] + [c for k in range(1, steps + 1) for c in body(k)] + \
        ["matvec", "dot", "finish"]
    traces = {}
    for r in range(2):
        ev = calls(("main", children))
        traces[(r, 0)] = [e for e in ev if e is not None] if entry_only else ev
    return write_run(d, traces)


@pytest.mark.parametrize("entry_only", [False, True], ids=["entry-exit", "entry-only"])
def test_set_up_and_epilogue_calls_are_no_iterations(tmp_path, entry_only):
    """The fault is in step 4 of 10: not 5 (the set-up's calls counted as a step), not "of
    11" or "of 12" (the epilogue's); entry-only traces get a step too."""
    normal = solver_run(tmp_path / "n", entry_only=entry_only)
    faulty = solver_run(tmp_path / "f", bad_step=4, entry_only=entry_only)
    v = verdict_of(normal, faulty).verdict
    assert (v["where"]["iteration"], v["where"]["iterations"]) == (4, 10), v["summary"]
    assert "at the start" not in v["summary"]


# -- 3. a skipped call is named by itself ----------------------------------------------
def comm_run(d, skip_send_at=None, steps=6):
    def step(k):
        # both start with the same inlined accessor calls, more of them than a window holds
        send = ("CommSend", ["Domain::sizeZ"] * 16 + ["MPI_Isend[dest=+1,tag=3]"])
        return ("LagrangeNodal", ([] if k == skip_send_at else [send]) +
                [("CommMonoQ", ["Domain::sizeZ"] * 16 + ["MPI_Wait"]), "CalcForce"])
    return write_run(d, {(r, 0): calls(("main", [step(k) for k in range(1, steps + 1)])) for r in range(2)})


def test_a_skipped_call_with_callees_is_named_itself(tmp_path):
    v = verdict_of(comm_run(tmp_path / "n"), comm_run(tmp_path / "f", skip_send_at=3)).verdict
    assert v["culprits"][0]["status"] == "missing"
    assert v["where"]["normal"] == "CommSend" and v["where"]["faulty"] is None, v["where"]
    assert "skipped CommSend" in v["summary"] and "sizeZ" not in v["summary"]
    assert v["where"]["iteration"] == 3


# -- 4. a livelock is not a skip --------------------------------------------------------
def test_a_livelock_is_called_one(tmp_path):
    """Rank 1 spins in a program function until the job is killed: its trace ends in
    thousands of the same call; the others wait in the next collective."""
    def run(d, spin):
        traces = {}
        for r in range(3):
            steps = [("step", ["work", "MPI_Allreduce[count=1,type=MPI_INT,op=MPI_SUM]"]) for _ in range(4)]
            if spin and r == 1:
                traces[(r, 0)] = calls(("main", steps[:2] + [("step", ["getMyRank"] * 5000, "open")], "open"))
            elif spin:
                traces[(r, 0)] = calls(("main", steps[:2] + [("step", ["work", (
                    "MPI_Allreduce[count=1,type=MPI_INT,op=MPI_SUM]", [], "open")], "open")], "open"))
            else:
                traces[(r, 0)] = calls(("main", steps))
        return write_run(d, traces)
    v = verdict_of(run(tmp_path / "n", False), run(tmp_path / "f", True)).verdict
    first = v["culprits"][0]
    assert v["kind"] == "hang" and (first["rank"], first["status"]) == (1, "livelock"), v["summary"]
    assert "kept repeating getMyRank" in first["why"] and "5,000 times" in first["why"]
    assert "skipped" not in first["why"] and v["where"]["iteration"] == 3
    assert v["confidence"]["level"] == "high"


# -- 5. plain hangs ---------------------------------------------------------------------
STEP = ["work", "MPI_Recv", "more", "MPI_Barrier"]       # plain names: no MPI arguments


def plain_hang(d, stops):
    """4 ranks x 6 steps of ``STEP``; ``stops`` {rank: (step, k)}: the rank stopped inside
    the k-th call of that step, on the normal path (nothing left it)."""
    traces = {}
    for r in range(4):
        steps = [("step", STEP) for _ in range(6)]
        if r in stops:
            s, k = stops[r]
            last = ("step", STEP[:k] + [(STEP[k], [], "open")], "open")
            traces[(r, 0)] = calls(("main", steps[:s - 1] + [last], "open"))
        else:
            traces[(r, 0)] = calls(("main", steps))
    return write_run(d, traces)


def test_a_plain_hang_names_the_least_progressed_not_the_one_ahead(tmp_path):
    """Rank 0 got through one more barrier and waits in a receive; rank 2 is the least
    progressed (stuck in its computation): it is the culprit, with low confidence."""
    normal = plain_hang(tmp_path / "n", {})
    faulty = plain_hang(tmp_path / "f", {0: (4, 1), 1: (3, 1), 2: (3, 0), 3: (3, 1)})
    v = verdict_of(normal, faulty).verdict
    assert [c["rank"] for c in v["culprits"]] == [2], v["summary"]
    assert "progressed least" in v["summary"]
    assert v["confidence"]["level"] == "low" and "pin/" in v["confidence"]["raise"]


def test_a_plain_hang_names_the_rank_through_a_collective_the_others_are_in(tmp_path):
    """Rank 1 got through the barrier all the others are still inside and waits in the
    next one (it entered the first differently): it stands out, though the others made
    fewer calls."""
    normal = plain_hang(tmp_path / "n", {})
    faulty = plain_hang(tmp_path / "f", {0: (3, 3), 1: (4, 3), 2: (3, 3), 3: (3, 3)})
    v = verdict_of(normal, faulty).verdict
    assert [c["rank"] for c in v["culprits"]] == [1], v["summary"]
    assert "got through the collective" in v["summary"]


# -- 6. false notes ---------------------------------------------------------------------
def test_a_crashed_run_is_not_called_another_program(tmp_path):
    """The faulty run died before its output code: it called few of the normal run's
    names, but every name it called is the normal run's."""
    many = [f"output{i}" for i in range(30)]
    normal = write_run(tmp_path / "n", {(r, 0): calls(("main", ["MPI_Init", "solve", *many, "MPI_Finalize"]))
                                        for r in range(2)})
    traces = {(r, 0): calls(("main", ["MPI_Init", ("solve", [], "open")], "open")) for r in range(2)}
    faulty = write_run(tmp_path / "f", traces, endings={0: {"how": "signal", "signal": "SIGSEGV", "thread": 0}})
    res = verdict_of(normal, faulty)
    assert res.verdict["kind"] == "crash" and res.verdict["culprits"][0]["rank"] == 0
    assert not [n for n in res.notes if "function names" in n], res.notes


# -- 7. hostile endings -----------------------------------------------------------------
@pytest.mark.parametrize("ending", [{"how": "signal", "signal": "SIGUSR1"}, {"how": "signal", "signal": "SIGPIPE"},
                                    {"how": "signal", "signal": "SIGRTMIN+3"}, {"how": "signal"}],
                         ids=["SIGUSR1", "SIGPIPE", "realtime", "unnamed"])
def test_any_signal_but_a_stop_signal_is_a_death(tmp_path, ending):
    normal = halo_run(tmp_path / "n")
    faulty = halo_run(tmp_path / "f")
    (faulty / "p.1002.end").write_text("".join(f"{k}={v}\n" for k, v in dict(ending, thread=0).items()))
    res = verdict_of(normal, faulty)
    v = res.verdict
    assert v["kind"] == "crash" and v["culprits"][0]["rank"] == 2, v["summary"]
    # every trace equals its twin (it died after MPI_Finalize): said so, nothing "stopped early"
    assert "stopped early" not in v["summary"] and "equals the normal one" in v["culprits"][0]["why"]
    assert "Verdict:" in ticket_summary(res, [])          # no ranking rows: no IndexError
    (faulty / "p.1002.end").write_text("how=signal\nsignal=SIGTERM\nthread=0\n")
    assert verdict_of(normal, faulty).verdict["kind"] == "none"


def test_a_crashed_normal_run_is_pointed_out(tmp_path):
    good = halo_run(tmp_path / "good")
    bad = halo_run(tmp_path / "bad", culprit=2)
    (bad / "p.1002.end").write_text("how=signal\nsignal=SIGSEGV\nthread=0\n")
    swapped = verdict_of(bad, good)
    assert any("NORMAL run crashed" in n for n in swapped.notes), swapped.notes
    assert not any("NORMAL run crashed" in n for n in verdict_of(good, bad).notes)


def test_the_faulty_run_given_as_another_normal_run_is_left_out(tmp_path):
    normal = halo_run(tmp_path / "n")
    faulty = halo_run(tmp_path / "f", culprit=2)
    copy = shutil.copytree(faulty, tmp_path / "copy")
    res = verdict_of(normal, faulty, also_normal=(copy,))
    assert res.verdict["kind"] == "changed" and res.verdict["culprits"][0]["rank"] == 2
    assert any("has the faulty run's traces" in n for n in res.notes)


def test_a_change_every_main_thread_shares_is_shared_with_workers_present(tmp_path):
    """Every main thread calls parse once more (other input); the worker threads do not
    change: the change is one most traces of its kind share, said once."""
    def run(d, extra):
        traces = {}
        for r in range(4):
            traces[(r, 0)] = calls(("main", ["MPI_Init", "read"] + (["parse"] if extra else []) +
                                    [("solve", ["GOMP_parallel"])] * 3 + ["MPI_Finalize"]))
            traces[(r, 1)] = calls(("solve._omp_fn.0", ["kernel"]))
        return write_run(d, traces)
    v = verdict_of(run(tmp_path / "n", False), run(tmp_path / "f", True)).verdict
    assert v["shared_change"] is not None and v["shared_change"]["traces"] == 4, v["summary"]


# -- 8. ties broken by evidence ---------------------------------------------------------
def pair_run(d, wrong=(), stuck_on=None):
    """4 ranks; ranks in ``wrong`` send with tag 9 in step 2 (both at the same point);
    with ``stuck_on``, ranks 0 and 3 stop in a receive from that rank (relative peer)."""
    traces = {}
    for r in range(4):
        steps = []
        for s in range(1, 4):
            tag = 9 if (r in wrong and s == 2) else 1
            steps.append(("step", [f"MPI_Send[dest=+1,tag={tag}]", "MPI_Recv[src=-1,tag=1]", "MPI_Barrier"]))
        if stuck_on is not None and r in (0, 3):
            offset = (stuck_on - r + 2) % 4 - 2
            recv = f"MPI_Recv[src={offset:+d},tag=1]"
            traces[(r, 0)] = calls(("main", steps[:1] + [("step", ["MPI_Send[dest=+1,tag=1]", (recv, [], "open")],
                                                          "open")], "open"))
        elif stuck_on is not None:
            traces[(r, 0)] = calls(("main", steps[:1] + [("step", [steps[1][1][0], ("MPI_Recv[src=-1,tag=1]", [],
                                                                                    "open")], "open")], "open"))
        else:
            traces[(r, 0)] = calls(("main", steps))
    return write_run(d, traces)


@pytest.mark.parametrize("waited_on", [1, 2])
def test_ties_are_broken_by_the_peer_the_stopped_ranks_wait_for(tmp_path, waited_on):
    normal = pair_run(tmp_path / "n")
    faulty = pair_run(tmp_path / f"f{waited_on}", wrong=(1, 2), stuck_on=waited_on)
    v = verdict_of(normal, faulty).verdict
    assert v["culprits"][0]["rank"] == waited_on, v["summary"]
    # ranks 0 and 3 name it; so does the other culprit when its left neighbour is the one
    assert v["tied"] == 1 and v["same_point"] == 2 and v["waited_on"] == (3 if waited_on == 1 else 2)
    assert "wait for it" in v["summary"]


def test_a_tie_nothing_separates_is_said_plainly(tmp_path):
    normal = pair_run(tmp_path / "n")
    faulty = pair_run(tmp_path / "f", wrong=(1, 2))
    v = verdict_of(normal, faulty).verdict
    assert v["tied"] == 2 and "nothing in the traces tells them apart" in v["summary"] + v["confidence"]["why"]
    assert v["confidence"]["level"] == "low"


# -- a normal trace cut short is no difference of the faulty run -------------------------
def text_run(d, traces, cut=None, cut_mid_line=False):
    """A text run of ``traces`` {(rank, thread): event list from ``calls``}; ``cut``:
    (key, events kept) of one trace cut short, marked '# incomplete' or, with
    ``cut_mid_line``, its file cut inside the next line (a writer killed mid-line)."""
    from difftrace_mpi.model import RETURN_NAME, Trace
    from difftrace_mpi.readers.text import write_text_run
    out = []
    for key, ev in sorted(traces.items()):
        names = [RETURN_NAME] + sorted({e for e in ev if e is not None})
        ids = {n: i for i, n in enumerate(names)}
        keep = cut[1] if cut and cut[0] == key else len(ev)
        out.append(Trace(key[0], key[1], np.array(names, dtype=object),
                         np.array([0 if e is None else ids[e] for e in ev[:keep]], dtype=np.int32),
                         complete=keep == len(ev) or cut_mid_line))
    write_text_run(d, out)
    if cut and cut_mid_line:
        path = d / f"r{cut[0][0]}.t{cut[0][1]}.txt"
        nxt = traces[cut[0]][cut[1]]
        path.write_bytes(path.read_bytes() + (b"> " + nxt.encode()[:3] if nxt else b"< " + b"mai"))
    return d


@pytest.mark.parametrize("mid_line", [False, True], ids=["marked", "mid-line"])
@pytest.mark.parametrize("perm", [lambda r: r, lambda r: (r + 2) % 4], ids=["ranks", "renumbered"])
def test_a_normal_trace_cut_short_is_no_difference(tmp_path, perm, mid_line):
    """The normal run's trace of one rank is cut short (its run killed, its file cut
    mid-line); the faulty run is the same program run to its end.  Where the normal
    record stops, the faulty trace has nothing to be compared with: no culprit, no hang,
    and a note naming the cut trace (it used to be blamed: "went on after the normal run
    had ended", or a cut name read as another call)."""
    full = {(perm(r), 0): calls(("main", ["MPI_Init", *[halo_step(r, s) for s in range(1, 13)], "MPI_Finalize"]))
            for r in range(4)}
    key = (perm(2), 0)
    normal = text_run(tmp_path / "n", full, cut=(key, len(full[key]) // 2), cut_mid_line=mid_line)
    res = analyze(normal, text_run(tmp_path / "f", full), GRID, lattices=False)
    v = res.verdict
    assert v["kind"] == "none" and not v["culprits"] and v["cut_traces"] == 1, v["summary"]
    assert not res.stopped.any()
    assert any("cut short" in n and f"rank {key[0]} thread 0" in n for n in res.notes), res.notes
    # a real fault elsewhere is still found, and the cut trace does not stand before it
    faulty = {k: ev for k, ev in full.items()}
    faulty[(perm(1), 0)] = calls(("main", ["MPI_Init", *[halo_step(1, s, skip_wait=s == 3) for s in range(1, 13)],
                                           "MPI_Finalize"]))
    v = analyze(normal, text_run(tmp_path / "f2", faulty), GRID, lattices=False).verdict
    assert v["kind"] == "changed" and (v["culprits"][0]["rank"], v["culprits"][0]["thread"]) == (perm(1), 0)
    assert all((c["rank"], c["thread"]) != key for c in v["culprits"])


def test_a_faulty_trace_cut_mid_line_stopped(tmp_path):
    """The converse: the faulty run's file cut inside a line is a trace that stopped there
    (a hang, the cut rank named), not a call of a cut name."""
    full = {(r, 0): calls(("main", ["MPI_Init", *[halo_step(r, s) for s in range(1, 13)], "MPI_Finalize"]))
            for r in range(4)}
    key = (3, 0)
    v = analyze(text_run(tmp_path / "n", full), text_run(tmp_path / "f", full, cut=(key, 200), cut_mid_line=True),
                GRID, lattices=False).verdict
    assert v["kind"] == "hang" and (v["culprits"][0]["rank"], v["culprits"][0]["thread"]) == key, v["summary"]
