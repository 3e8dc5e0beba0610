"""The failed run alone (issue 26): ``analyze FAULTY_DIR`` and ``engine.alone.analyze_alone``
give a verdict of the same shape with no normal run, from the run's own ranks and time
steps.  On the bug zoos' committed traces, in process, one rank; and once through the CLI."""
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from difftrace_mpi.engine.alone import analyze_alone
from difftrace_mpi.stages.diagnose import messages
from difftrace_mpi.stages.model import timesteps
from difftrace_mpi.engine.choreography import Choreography, SerialComm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import accuracy  # noqa: E402
import zoo  # noqa: E402

TRACES = zoo.DEFAULT_OUT


def alone(path):
    return analyze_alone(path, choreography=Choreography(SerialComm()))


@pytest.fixture(scope="module")
def ext(tmp_path_factory):
    return accuracy.run_ext(accuracy.EXT, tmp_path_factory.mktemp("ext-alone"), alone=True)


NORMALS = sorted({(c.group, c.name) for c in zoo.CASES if c.name.startswith("normal")})


@pytest.mark.parametrize("group,name", NORMALS, ids=[f"{g}/{n}" for g, n in NORMALS])
def test_a_normal_run_alone_names_nobody(group, name):
    v = alone(TRACES / group / name).verdict
    assert v["kind"] == "none" and not v["culprits"], v["summary"]
    assert v["summary"].startswith("no difference found") and v["alone"]


# one case of each bug class the single-run verdict gets, with its truth from the zoo table
PER_CLASS = ["minilulesh-8/wrongtag", "minilulesh-8/wrongroot", "minilulesh-8/nowait", "minilulesh-8/segv",
             "minilulesh-8/nocrit", "minilulesh-8/skipcall", "minilulesh-8/livelock", "cgsolve-4/stall",
             "arrival-4/skipcall"]


def test_the_per_class_cases_cover_every_class():
    assert {zoo.find(*key.split("/")).bug_class for key in PER_CLASS} == set(zoo.CLASSES)


@pytest.mark.parametrize("key", PER_CLASS)
def test_each_bug_class_alone(key):
    case = zoo.find(*key.split("/"))
    res = alone(TRACES / case.group / case.name)
    marks = accuracy.score(case, res)
    assert marks["kind"] and marks["top1"], res.verdict["summary"]
    if case.iteration is not None:
        assert marks["iteration"], res.verdict["summary"]
    assert "other ranks" in res.verdict["summary"] or case.expected in ("crash", "hang") or \
        res.verdict["culprits"][0]["status"] in ("missing", "extra")


# ---- the bug classes the first cut missed, one zoo case each: (case, what it shows)
FIXED = [
    ("ilcs-2/wrongroot", "the time step is the loop around the middle MPI call, not a long set-up loop"),
    ("ilcs-2/wrongsize", "a stopped trace's one whole step and the one it stopped in count as steps"),
    ("minilulesh-27/collorder", "one whole step before the hang is iteration 2 at the hang"),
    ("minilulesh-8/collcount", "two whole steps before the crash (too few to fold) still number the third"),
    ("cgsolve-4/skipexchange", "set-up code that ends in the body's calls is no step (the steps' phase)"),
    ("cgsolve-8/livelock", "the same, 8 ranks"),
    ("halo-4/nowait", "an outer loop holding an inner one (a check every N steps) steps by the inner loop"),
    ("halo-4/extra", "a call every peer makes every N steps, made once more by one rank"),
    ("halo-4/lost", "steps counted on past an anomalous step"),
    ("cgsolve-4/skipproduct", "a step missing its first call: the steps on its other side still count"),
    ("halo-4/wrongtag", "a receive for a tag its source never sends it"),
    ("oddeven-4/dl", "the same, blocking calls, no collectives"),
    ("oddeven-4/wrongpeer", "a send no rank receives from it with that tag, not the rank left waiting"),
    ("minilulesh-8/truncate", "the sender MPI names in a truncation error, when it changed that message"),
    ("oddeven-4/truncate", "the same, blocking calls"),
    ("minilulesh-dyn-4/wrongtag", "many calls against none in a step is scheduling, not a fault"),
    ("minilulesh-8/nosend", "one Isend of three skipped in the step a stopped trace was in"),
    ("cgsolve-8/stall", "a trace that left its step's frame is not held to that step's calls"),
]


@pytest.mark.parametrize("key,what", FIXED, ids=[k for k, _ in FIXED])
def test_a_bug_class_the_first_cut_missed_alone(key, what):
    case = zoo.find(*key.split("/"))
    res = alone(TRACES / case.group / case.name)
    marks = accuracy.score(case, res)
    assert marks["kind"] and marks["top1"], (what, res.verdict["summary"])
    # where the culprit's step can be told (oddeven's end rank has no loop of its own)
    if key not in ("oddeven-4/truncate", "cgsolve-8/stall"):
        assert marks["iteration"], (what, res.verdict["summary"])


@pytest.mark.parametrize("key", ["minilulesh-8/threads", "ilcs-2/abort"])
def test_the_call_is_named_alone(key):
    """A new thread is named with the region it runs; a process that aborted in its step
    called MPI_Abort where its steps went on (not 'skipped' the call after it)."""
    case = zoo.find(*key.split("/"))
    res = alone(TRACES / case.group / case.name)
    assert accuracy.score(case, res)["call"], res.verdict["summary"]


def _trace(children, cut=False):
    """A thread that calls function 1 (main), whose children are ``children`` (leaf calls);
    ``cut``: it stopped inside its last child."""
    ev = [1]
    for c in children:
        ev += [c, 0]
    ev = ev[:-1] if cut else ev + [0]
    return np.array(ev, dtype=np.int32)


def _steps(children, cut=False):
    """The child index where each whole step starts, of the last step's end, and whether
    the trace stopped inside the frame."""
    found = timesteps.time_steps(_trace(children, cut), np.arange(32, dtype=np.int32), 32)
    if found is None:
        return None
    _, _, starts, ends, open_ = found
    return [(int(x) - 1) // 2 for x in starts], (int(ends[-1]) - 1) // 2, open_


def test_time_steps_set_up_ending_in_the_body_calls_is_no_step():
    # a CG solver: r = b - A x (exchange, product, update, dot), p = r, exchange; then
    # [product dot update update dot update exchange] x 6, then the true residual
    halo, prod, upd, dot = 4, 5, 2, 3
    body = [prod, dot, upd, upd, dot, upd, halo]
    starts, end, open_ = _steps([halo, prod, upd, dot, upd, halo] + body * 6 + [halo, prod, upd, dot])
    assert starts == [6 + 7 * k for k in range(6)] and end == 48 and not open_


def test_time_steps_go_on_past_a_step_with_a_call_skipped():
    starts, end, _ = _steps([7] + [1, 2, 3] * 4 + [2, 3] + [1, 2, 3] * 5 + [8])
    assert starts == [1, 4, 7, 10, 13, 15, 18, 21, 24, 27] and end == 30


def test_time_steps_of_an_outer_loop_are_its_inner_loops_iterations():
    # exchange relax swap, a residual and its reduction every 5 steps
    starts, end, _ = _steps([8] + ([1, 2, 3] * 5 + [6, 7]) * 4 + [9])
    assert len(starts) == 20 and starts[:6] == [1, 4, 7, 10, 13, 18] and end == 69


def test_time_steps_of_a_trace_stopped_in_its_second_step():
    assert _steps([8, 9, 1, 2, 1], cut=True) == ([2], 4, True)
    assert timesteps._cut_repeat(np.array([8, 9, 1, 1])) is None       # a call twice is no loop


def test_messages_no_rank_matches():
    """A send no rank receives (wrong peer), a receive for a tag nobody sends (wrong tag),
    on world ranks from relative peers; a normal exchange names nobody."""
    names = ["", "MPI_Send[count=4,type=MPI_INT,dest=+1,tag=0]", "MPI_Recv[count=4,type=MPI_INT,src=-1,tag=0]",
             "MPI_Recv[count=4,type=MPI_INT,src=-1,tag=1]", "MPI_Send[count=4,type=MPI_INT,dest=+2,tag=0]"]
    objects = [(0, 0), (1, 0), (2, 0), (3, 0)]

    def run(calls):
        return {o: {"messages": {g: (1, 10 * o + g) for g in gids}} for o, gids in enumerate(calls)}

    normal = run([[1], [2, 1], [2, 1], [2]])
    assert messages.message_evidence(objects, names, normal) == {}
    # rank 2 receives tag 1 from rank 1 in a later step, tag 0 before (a send matched once)
    wrong_tag = run([[1], [2, 1], [2, 3, 1], [2]])
    assert list(messages.message_evidence(objects, names, wrong_tag)) == [2]
    wrong_peer = run([[1], [2, 4], [2, 1], [2]])         # rank 1 sends to 3, which receives from 2 only
    found = messages.message_evidence(objects, names, wrong_peer)
    assert list(found) == [1] and found[1][3] == [names[4]]     # not rank 2, left waiting for it


def test_a_truncation_names_the_sender_that_changed_the_message():
    names = ["", "MPI_Send[count=4,type=MPI_INT,dest=-1,tag=0]", "MPI_Send[count=5,type=MPI_INT,dest=-1,tag=0]",
             "MPI_Recv[count=4,type=MPI_INT,src=+1,tag=0]"]
    objects = [(0, 0), (1, 0)]
    summaries = {0: {"messages": {3: (2, 5)}}, 1: {"messages": {1: (1, 3), 2: (1, 9)}}}
    died = {(1, 0): {"how": "mpi_error", "error": "Message truncated, error stack: ... Message from rank 1 and tag 0 "
                                                   "truncated; 20 bytes received but buffer size is 16"}}
    found = messages.message_evidence(objects, names, summaries, died)
    assert list(found) == [1] and found[1][0] == 9 and found[1][3] == [names[2]]
    same = {0: summaries[0], 1: {"messages": {2: (2, 3)}}}      # it always sent that: the receiver's
    assert messages.message_evidence(objects, names, same, died) == {}


def rotated_copy(src, dst, shift):
    """A copy of a run with every rank r renumbered r + shift (mod P): relative peers in
    MPI arguments (``dest=+1``) stay right, as in a run whose ranks were laid out so."""
    ranks = {int(f.read_text()) for f in src.glob("*.rank")}
    return renumbered_copy(src, dst, {r: (r + shift) % len(ranks) for r in ranks})


@pytest.mark.parametrize("key", ["halo-4/wrongtag", "oddeven-4/wrongpeer", "cgsolve-4/skipproduct"])
def test_rotated_ranks_rotate_the_message_and_step_answers(tmp_path, key):
    case = zoo.find(*key.split("/"))
    before = alone(TRACES / case.group / case.name).verdict
    after = alone(rotated_copy(TRACES / case.group / case.name, tmp_path / "f", 1)).verdict
    assert before["culprits"][0]["rank"] == case.bug_rank
    assert [((c["rank"] + 1) % case.ranks, c["thread"]) for c in before["culprits"]][:1] == \
        [(c["rank"], c["thread"]) for c in after["culprits"]][:1]
    assert before["kind"] == after["kind"] and before["where"]["iteration"] == after["where"]["iteration"]


def renumbered_copy(src, dst, perm):
    shutil.copytree(src, dst)
    for f in dst.glob("*.rank"):
        f.write_text(f"{perm[int(f.read_text())]}\n")
    return dst


@pytest.mark.parametrize("key", ["minilulesh-8/collorder", "minilulesh-8/skipcall", "minilulesh-8/segv"])
def test_renumbered_ranks_renumber_the_answer_alone(tmp_path, key):
    case = zoo.find(*key.split("/"))
    perm = {r: (5 * r + 3) % case.ranks for r in range(case.ranks)}
    before = alone(TRACES / case.group / case.name).verdict
    after = alone(renumbered_copy(TRACES / case.group / case.name, tmp_path / "f", perm)).verdict
    assert [(perm[c["rank"]], c["thread"]) for c in before["culprits"]][:1] == \
        [(c["rank"], c["thread"]) for c in after["culprits"]][:1]
    assert before["kind"] == after["kind"] and before["where"] == after["where"]


# the programs whose single-run figures meet the targets; miniGhost (added with issue 35)
# does not yet: its set-up broadcasts parameters in a loop of MPI_Bcast that the failed
# run alone takes for the time steps (top-1 50 %, step 0 %: bench/README.md), which is
# open work, not a target met
ALONE_TARGETS = {"CoMD"}


@pytest.mark.integration
def test_the_outside_zoo_alone_meets_the_targets(ext):
    """Top-1 >= 85 %, iteration >= 80 % where the truth has one, kind >= 95 % (on the
    programs that meet them), and every normal run alone of every program says none."""
    marks, normals = ext
    assert {m["case"].split("/")[0] for m in marks} >= ALONE_TARGETS
    marks = [m for m in marks if m["case"].split("/")[0] in ALONE_TARGETS]
    assert sum(m["kind"] for m in marks) >= 0.95 * len(marks)
    assert sum(m["top1"] for m in marks) >= 0.85 * len(marks), [m["said"] for m in marks if not m["top1"]]
    assert sum(m["iteration"] for m in marks) >= 0.80 * len(marks)
    assert normals and all(n["kind"] == "none" for n in normals), normals


@pytest.mark.integration
def test_the_own_zoo_alone_meets_the_targets():
    marks, normals = accuracy.run(TRACES, alone=True)
    stepped = [m for m in marks if zoo.find(*m["case"].split("/")).iteration is not None]
    assert all(n["kind"] == "none" for n in normals), normals
    assert sum(m["kind"] for m in marks) >= 0.95 * len(marks)
    assert sum(m["top1"] for m in marks) >= 0.85 * len(marks)
    assert sum(m["iteration"] for m in stepped) >= 0.80 * len(stepped)


@pytest.mark.integration
def test_the_cli_analyses_one_directory(tmp_path):
    case = zoo.find("minilulesh-8", "collorder")
    out = tmp_path / "alone.h5"
    res = subprocess.run([sys.executable, "-m", "difftrace_mpi", "analyze", str(TRACES / case.group / case.name),
                          "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "normal: none" in res.stdout and f"rank {case.bug_rank} thread 0" in res.stdout
    from difftrace_mpi.api import load
    v = load(out).verdict
    assert v["alone"] and v["culprits"][0]["rank"] == case.bug_rank
    bad = subprocess.run([sys.executable, "-m", "difftrace_mpi", "analyze", str(TRACES / case.group / case.name),
                          "--also-normal", str(TRACES / case.group / "normal")], capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 2 and "needs a normal run" in bad.stderr and "Traceback" not in bad.stderr


REAL = ROOT / "bench" / "data" / "lulesh-real"
# (run, kind, culprit rank, time step) from bench/data/lulesh-real/README.md; None: a normal run
LULESH = [("l8x2_normal", "none", None, None), ("l27x1_normal", "none", None, None),
          ("l64x1_normal", "none", None, None), ("l8x2_barrier", "hang", 3, 11),
          ("l27x1_wrongop", "changed", 13, 9), ("l64x1_segv", "crash", 37, 5)]


@pytest.mark.integration
@pytest.mark.parametrize("run,kind,rank,step", LULESH, ids=[r[0] for r in LULESH])
def test_real_lulesh_alone(tmp_path, run, kind, rank, step):
    """Real LULESH 2.0 traces (not written for this project), each run alone: the normal
    runs name nobody (boundary and interior ranks, rank 0's extra work, the first step's
    special case), the faults name their rank and time step."""
    import tarfile
    with tarfile.open(REAL / f"{run}.tar.xz") as tar:
        tar.extractall(tmp_path, filter="data")
    v = alone(next(p for p in tmp_path.rglob("*.info")).parent).verdict
    assert v["kind"] == kind, v["summary"]
    if rank is not None:
        assert (v["culprits"][0]["rank"], v["where"]["iteration"]) == (rank, step), v["summary"]
