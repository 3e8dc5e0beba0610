"""The bug zoo (bench/zoo.py, issue 12): minilulesh builds and runs deterministically at
several rank counts, a sample of the injected bugs hangs, crashes or changes the run as the
table says, the table covers what the issue asks, and (where traces are committed) each
culprit's trace first differs at the table's iteration and call.

Every test here starts processes (mpiexec, the tracer, the zoo script) or reads the zoo's
traces, and is marked integration.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "bench" / "zoo.py"
sys.path.insert(0, str(ROOT / "examples" / "programs"))
sys.path.insert(0, str(ROOT / "bench"))
import scenarios  # noqa: E402
import zoo  # noqa: E402

pytestmark = pytest.mark.integration

HANG_S = 8            # a small run ends in well under a second; one still running after this hangs
SMALL = ("--size", "2", "--iters", "4")


def run(build_dir, ranks, *args, threads=2, limit=60):
    """Run minilulesh untraced; (exit code, stdout, stderr).  124: still running at the limit."""
    cmd = ["timeout", "-s", "TERM", str(limit), scenarios.venv_mpiexec(), "-n", str(ranks),
           str(build_dir / "minilulesh"), *map(str, args)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="passive")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=limit + 30)
    return p.returncode, p.stdout, p.stderr


def result_line(out):
    lines = [line for line in out.splitlines() if line.startswith("minilulesh: ")]
    assert len(lines) == 1, out
    return lines[0]


# --------------------------------------------------------------------------- normal runs

@pytest.mark.parametrize("ranks,grid", [(1, "1x1x1"), (2, "2x1x1"), (4, "2x2x1"), (8, "2x2x2")])
def test_minilulesh_runs_and_is_deterministic(build_dir, ranks, grid):
    rc, out, err = run(build_dir, ranks)
    assert rc == 0, err[-2000:]
    line = result_line(out)
    assert f"{ranks} ranks ({grid}), 4^3 elements per rank, 10 steps" in line, line
    m = re.search(r"checksum (\S+)", line)
    assert m and float(m[1]) > 0 and "nan" not in line, line
    rc2, out2, err2 = run(build_dir, ranks)          # the same run again
    assert rc2 == 0, err2[-2000:]
    assert result_line(out2) == line
    rc3, out3, err3 = run(build_dir, ranks, threads=1)    # no result depends on the thread count
    assert rc3 == 0, err3[-2000:]
    assert result_line(out3) == line


@pytest.mark.parametrize("ranks,grid", [(3, "3x1x1"), (6, "3x2x1"), (12, "3x2x2")])
def test_minilulesh_decomposition_of_other_rank_counts(build_dir, ranks, grid):
    rc, out, err = run(build_dir, ranks, "--size", "1", "--iters", "2", threads=1)
    assert rc == 0, err[-2000:]
    assert f"{ranks} ranks ({grid})" in result_line(out)


def test_minilulesh_dynamic_schedule_gives_the_same_result(build_dir):
    rc, out, err = run(build_dir, 2, *SMALL)
    rc2, out2, err2 = run(build_dir, 2, *SMALL, "--schedule", "dynamic")
    assert rc == rc2 == 0, err + err2
    assert result_line(out2) == result_line(out)


def test_minilulesh_rejects_bad_options(build_dir):
    rc, out, err = run(build_dir, 1, "--bug", "nosuchbug", threads=1)
    assert rc != 0 and "unknown bug" in err


def test_minilulesh_physics_stays_sane_over_many_steps(build_dir):
    rc, out, err = run(build_dir, 2, "--size", "3", "--iters", "200", threads=1)
    assert rc == 0, err[-2000:]
    line = result_line(out)
    assert "200 steps" in line and "nan" not in line.lower() and "inf" not in line.lower(), line


# --------------------------------------------------------------------------- bugs, untraced

@pytest.mark.parametrize("ranks,kind,rank,step", [
    (2, "wrongtag", 1, 1),           # point-to-point: a receive nobody matches
    (4, "collorder", 3, 2),          # collectives in a different order
])
def test_minilulesh_bug_hangs(build_dir, ranks, kind, rank, step):
    rc, out, err = run(build_dir, ranks, *SMALL, *zoo._ml(kind, rank, step), limit=HANG_S)
    assert rc == 124, f"{kind} should hang; exit {rc}: {out}{err[-1500:]}"


@pytest.mark.parametrize("ranks,kind,rank,step,says", [
    # MPICH ends the job with the error's class as the exit status, MPI_ERR_TRUNCATE (14);
    # its "Message truncated" line, like MPI_Abort's below, was lost once (a loaded CI run:
    # stdout and stderr both empty), since hydra tears the job down as it forwards them
    (4, "truncate", 3, 1, 14),
    (2, "segv", 1, 2, ""),
    # MPI_Abort(MPI_COMM_WORLD, 3): hydra passes the code on as mpiexec's exit status, while
    # its "application called MPI_Abort" line is lost in about one run of three
    (2, "abort", 0, 1, 3),
])
def test_minilulesh_bug_crashes(build_dir, ranks, kind, rank, step, says):
    """``says``: what the launcher prints, or (an int) the exit status it must end with."""
    rc, out, err = run(build_dir, ranks, *SMALL, *zoo._ml(kind, rank, step), limit=HANG_S)
    assert rc not in (0, 124), f"{kind} should crash; exit {rc}: {out}{err[-1500:]}"
    if isinstance(says, int):
        assert rc == says, f"{kind}: exit {rc}, expected {says}: {err[-1500:]}"
    else:
        assert says in out + err
    assert not any(line.startswith("minilulesh: ") for line in out.splitlines())


@pytest.mark.parametrize("kind,thread", [("extracall", None), ("skipregion", 1)])
def test_minilulesh_bug_changes_the_result(build_dir, kind, thread):
    rc, out, err = run(build_dir, 2, *SMALL)
    assert rc == 0, err[-2000:]
    rc2, out2, err2 = run(build_dir, 2, *SMALL, *zoo._ml(kind, 0, 1, thread))
    assert rc2 == 0, err2[-2000:]
    assert result_line(out2) != result_line(out)


# --------------------------------------------------------------------------- bugs, traced

@pytest.mark.parametrize("kind,rank,step,thread,call", [
    ("nocrit", 1, 2, 1, "GOMP_critical_start"),      # leaves the result as it is: only the trace shows it
    ("skipcall", 0, 1, None, "CalcQForElems"),
])
def test_minilulesh_bug_changes_the_culprits_trace(build_dir, tmp_path, kind, rank, step, thread, call):
    normal = zoo.Case("t", "normal", "minilulesh", 2, 2, SMALL)
    case = zoo.Case("t", kind, "minilulesh", 2, 2, SMALL + zoo._ml(kind, rank, step, thread), "x", "changed",
                    rank, thread, step + 1, call)
    for c in (normal, case):
        res = scenarios.run_scenario(c.scenario(), tmp_path / c.name, build_dir)
        assert res.returncode == 0, res.stderr[-2000:]
    normal_runs, faulty_runs = zoo.load_labels(tmp_path / "normal"), zoo.load_labels(tmp_path / kind)
    assert zoo.check_case(case, normal_runs, faulty_runs) == []
    other = 1 - rank                      # the bug is on one rank only
    assert all(faulty_runs[k] == normal_runs[k] for k in normal_runs if k[0] == other)
    # and the check can fail: the wrong iteration and call are noticed
    wrong = zoo.Case("t", kind, "minilulesh", 2, 2, case.args, "x", "changed", rank, thread, step + 2, "main")
    assert len(zoo.check_case(wrong, normal_runs, faulty_runs)) == 2


# --------------------------------------------------------------------------- the table

def test_zoo_list_covers_the_issue():
    p = subprocess.run([sys.executable, str(ZOO), "list"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    m = re.search(r"^(\d+) bug cases in (\d+) programs", p.stdout, re.M)
    assert m and int(m[1]) >= 30 and int(m[2]) >= 3, p.stdout
    p = subprocess.run([sys.executable, str(ZOO), "list", "--json"], capture_output=True, text=True, timeout=60,
                       cwd=ROOT)
    assert p.returncode == 0, p.stderr
    cases = json.loads(p.stdout)
    bugs = [c for c in cases if c["bug_class"]]
    assert len(bugs) >= 30 and len({c["program"] for c in bugs}) >= 3
    assert "minilulesh" in {c["program"] for c in bugs}
    assert {c["bug_class"] for c in bugs} == set(zoo.CLASSES)
    assert {2, 4, 8, 27} <= {c["ranks"] for c in bugs}
    assert sum(c["ranks"] == 27 and c["program"] == "minilulesh" for c in bugs) >= 5
    assert {"hang", "crash", "changed"} == {c["expected"] for c in bugs}
    # the issue's bug kinds, on minilulesh
    kinds = {c["name"] for c in bugs if c["program"] == "minilulesh"}
    assert {"wrongtag", "truncate", "nosend", "norecv", "wrongpeer", "collorder", "nocoll", "collcount",
            "wrongroot", "wrongcomm", "nowait", "segv", "abort", "nocrit", "threads", "skipregion",
            "skipcall", "extracall", "livelock"} <= kinds
    # culprits on many ranks: not only rank 0 or 1, also a last and an inner rank
    assert len({c["bug_rank"] for c in bugs}) >= 6
    assert any(c["bug_rank"] == c["ranks"] - 1 for c in bugs)
    assert any(c["ranks"] == 27 and c["bug_rank"] == 13 for c in bugs)
    # one normal run per group; normal2 for minilulesh-8 and one more OpenMP program
    groups = {c["group"] for c in cases}
    assert all(any(c["group"] == g and c["name"] == "normal" for c in cases) for g in groups)
    normal2 = {c["group"] for c in cases if c["name"] == "normal2"}
    assert "minilulesh-8" in normal2 and any(c["threads"] > 1 for c in cases if c["group"] in normal2 - {"minilulesh-8"})
    assert zoo.check_table() == []


def test_zoo_table_rules_catch_mistakes():
    c = zoo.find("minilulesh-8", "wrongtag")
    import dataclasses
    broken = (dataclasses.replace(c, bug_rank=8), dataclasses.replace(c, hangs=False),
              dataclasses.replace(c, bug_class="other"), dataclasses.replace(c, args=("--iters", "3")))
    for b in broken:
        assert zoo.check_table([zoo.find("minilulesh-8", "normal"), b]), b


def test_committed_zoo_traces_match_the_table():
    """Each committed case's culprit first differs from its normal twin at the table's
    iteration and call (a fresh `zoo.py trace` must keep this true)."""
    traces = zoo.DEFAULT_OUT
    if not traces.is_dir():
        pytest.skip("no committed zoo traces (run: python bench/zoo.py trace)")
    p = subprocess.run([sys.executable, str(ZOO), "check"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "all as the table says" in p.stdout
    for c in zoo.CASES:
        assert (traces / c.group / c.name).is_dir(), c.key


# --------------------------------------------------------------------------- cgsolve (issue 21)

def run_cg(build_dir, ranks, *args, limit=60):
    """Run cgsolve untraced; (exit code, stdout, stderr).  124: still running at the limit."""
    cmd = ["timeout", "-s", "TERM", str(limit), scenarios.venv_mpiexec(), "-n", str(ranks),
           str(build_dir / "cgsolve"), *map(str, args)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"),
                       timeout=limit + 30)
    return p.returncode, p.stdout, p.stderr


def cg_line(out):
    lines = [line for line in out.splitlines() if line.startswith("cgsolve: ")]
    assert len(lines) == 1, out
    return lines[0]


@pytest.mark.parametrize("ranks,grid", [(4, "2x2"), (8, "4x2")])
def test_cgsolve_converges_and_is_deterministic(build_dir, ranks, grid):
    rc, out, err = run_cg(build_dir, ranks, "--iters", "40")
    assert rc == 0, err[-2000:]
    line = cg_line(out)
    assert f"{ranks} ranks ({grid}), 6x6 cells per rank, 40 iterations" in line, line
    m = re.search(r"residual (\S+) -> (\S+)", line)
    assert m and float(m[2]) < 1e-8 * float(m[1]), line          # CG converges on the 9-point matrix
    rc2, out2, err2 = run_cg(build_dir, ranks, "--iters", "40")
    assert rc2 == 0 and cg_line(out2).split(" in ")[0] == line.split(" in ")[0], err2[-2000:]


def test_cgsolve_rejects_bad_options(build_dir):
    rc, out, err = run_cg(build_dir, 1, "--bug", "nosuchbug")
    assert rc != 0 and "unknown bug" in err


@pytest.mark.parametrize("kind,expect", [("nowait", 0), ("skipproduct", 0), ("wrongop", 0),
                                         ("barrier", 124), ("stall", 124), ("wrongtag", 124)])
def test_cgsolve_bugs_do_what_the_table_says(build_dir, kind, expect):
    rc, out, err = run_cg(build_dir, 4, "--bug", kind, "--bug-rank", "3", "--bug-iter", "2", limit=HANG_S)
    assert rc == expect, f"{kind}: exit {rc}: {out}{err[-1500:]}"


def test_zoo_check_counts_iterations_after_the_setup(monkeypatch):
    """cgsolve's marker (localProduct) is also entered once by the setup: the check subtracts
    it; a run that skipped a call and went on to the next iteration's marker is still in the
    normal run's iteration."""
    body = ["localProduct", "<", "globalDot", "<", "haloExchange", "<"]
    normal = ["cgSolve", "haloExchange", "<", "localProduct", "<"] + body * 3 + ["<"]
    skipped = normal[:5] + body + body[:4] + body * 1 + ["<"]            # iteration 2's haloExchange skipped
    d = zoo.first_difference(normal, skipped, "cgsolve")
    assert (d["normal"], d["faulty"], d["iteration"]) == ("haloExchange", "localProduct", 2)
    extra = normal[:5] + body + ["MPI_Barrier", "<"] + body * 2 + ["<"]   # an extra call starting iteration 2
    d = zoo.first_difference(normal, extra, "cgsolve")
    assert (d["normal"], d["faulty"], d["iteration"]) == ("localProduct", "MPI_Barrier", 2)
    # without the setup's entry subtracted the same difference would be in iteration 3
    monkeypatch.setitem(zoo.MARKERS, "cgsolve", ("localProduct", None))
    assert zoo.first_difference(normal, extra, "cgsolve")["iteration"] == 3


def test_zoo_check_compares_unordered_calls_as_sets():
    """arrival's regions: callees in another order or number are no difference; a callee the
    normal call never made, a kind of callee it made and the faulty one did not, and a trace
    that ends inside the region are, each at its own place."""
    def step(*unpacks, extra=(), sends=("MPI_Isend[dest=1]", "MPI_Isend[dest=2]")):
        body = [ev for s in sends for ev in (s, "<")] + [ev for u in unpacks for ev in ("MPI_Waitany", "<", "unpack_face", u, "<", "<")]
        return ["exchange_faces", *body, *extra, "<", "relax", "<", "MPI_Allreduce", "<"]
    regions = ("exchange_faces",)
    normal = ["main", *step("copy_row", "copy_column"), *step("copy_column", "copy_row"), "<"]
    reordered = ["main", *step("copy_column", "copy_row"), *step("copy_row", "copy_column", "copy_row"), "<"]
    assert zoo.first_difference(normal, reordered, "arrival") is not None          # in order: differs
    assert zoo.first_difference(normal, reordered, "arrival", unordered=regions) is None
    extra = ["main", *step("copy_row", "copy_column"), *step("copy_column", "copy_row", extra=("MPI_Barrier", "<")), "<"]
    d = zoo.first_difference(normal, extra, "arrival", unordered=regions)
    assert (d["normal"], d["faulty"], d["iteration"], d["open"]) == (None, "MPI_Barrier", 2, ["main", "exchange_faces"])
    nosend = ["main", *step("copy_row", "copy_column"), *step("copy_column", "copy_row", sends=("MPI_Isend[dest=2]",)), "<"]
    d = zoo.first_difference(normal, nosend, "arrival", unordered=regions)
    assert (d["normal"], d["faulty"], d["iteration"]) == ("MPI_Isend[dest=1]", "<", 2)
    crash = ["main", *step("copy_row", "copy_column"), *step("copy_column", "copy_row")[:7], "unpack_face"]
    d = zoo.first_difference(normal, crash, "arrival", unordered=regions)
    assert (d["faulty"], d["iteration"], d["open"][-1]) == (None, 2, "unpack_face")
    second = step("copy_row", "copy_column")
    skipped = ["main", *step("copy_row", "copy_column"), *second[:second.index("relax")], "MPI_Allreduce", "<", "<"]
    d = zoo.first_difference(normal, skipped, "arrival", unordered=regions)
    assert (d["normal"], d["faulty"], d["iteration"]) == ("relax", "MPI_Allreduce", 2)


def run_arrival(build_dir, ranks, *args, limit=60):
    """Run arrival untraced (2 threads); (exit code, stdout, stderr).  124: still running."""
    cmd = ["timeout", "-s", "TERM", str(limit), scenarios.venv_mpiexec(), "-n", str(ranks),
           str(build_dir / "arrival"), *map(str, args)]
    env = dict(os.environ, OMP_NUM_THREADS="2", OMP_WAIT_POLICY="passive")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=limit + 30)
    return p.returncode, p.stdout, p.stderr


def arrival_result(out):
    lines = [line for line in out.splitlines() if line.startswith("arrival: ")]
    assert len(lines) == 1, out
    return lines[0].split(" in ")[0]          # without the seconds


def test_arrival_results_are_deterministic_and_bugs_do_what_the_table_says(build_dir):
    """Good runs of arrival differ in call order, never in the residual they print; a sample
    of its bugs changes the result, hangs or crashes."""
    rc, out, err = run_arrival(build_dir, 4)
    assert rc == 0, err[-2000:]
    line = arrival_result(out)
    assert "4 ranks x 2 threads, 10 steps" in line, line
    rc2, out2, err2 = run_arrival(build_dir, 4)
    assert rc2 == 0 and arrival_result(out2) == line, err2[-2000:]
    for kind, expect in (("wrongop", 0), ("skipcall", 0), ("workerstop", 124), ("segv", 11)):
        rc, out, err = run_arrival(build_dir, 4, "--iters", "4", *zoo._ml(kind, 1, 1), limit=HANG_S)
        assert rc == expect, f"{kind}: exit {rc}: {out}{err[-1500:]}"
        if kind in ("wrongop", "skipcall"):
            assert arrival_result(out) != arrival_result(run_arrival(build_dir, 4, "--iters", "4")[1])


def test_committed_arrival_normal_runs_differ_in_order_only():
    """The committed good runs of arrival differ from each other trace by trace, and not at
    all once the callees of its arrival-order regions are compared as sets."""
    for group in ("arrival-4", "arrival-8"):
        normal, normal2 = _committed(zoo.find(group, "normal2"))[0], zoo.load_labels(
            zoo.DEFAULT_OUT / group / "normal2")
        assert normal.keys() == normal2.keys()
        assert all(normal[k] != normal2[k] for k in normal)
        assert all(zoo.first_difference(normal[k], normal2[k], "arrival", k[1] == 0, zoo.ARRIVAL_UNORDERED) is None
                   for k in normal)


def _committed(case):
    traces = zoo.DEFAULT_OUT
    if not (traces / case.group / case.name).is_dir():
        pytest.skip(f"no committed traces of {case.key}")
    return zoo.load_labels(traces / case.group / "normal"), zoo.load_labels(traces / case.group / case.name)


def _collectives(labels):
    return sum(1 for ev in labels if ev.startswith(("MPI_Allreduce", "MPI_Barrier")))


@pytest.mark.parametrize("group", ["cgsolve-4", "cgsolve-8"])
def test_cgsolve_nowait_consequence_a_step_later_at_the_same_clock(group):
    """Issue 21 class 1 on the committed traces: the culprit's first difference (its missing
    MPI_Wait, iteration K) and a lower-ranked neighbour's (an extra call, iteration K+1)
    come after the same number of collectives."""
    case = zoo.find(group, "nowait")
    normal, faulty = _committed(case)
    culprit = zoo.first_difference(normal[(case.bug_rank, 0)], faulty[(case.bug_rank, 0)], "cgsolve")
    clock = _collectives(faulty[(case.bug_rank, 0)][:culprit["index"]])
    others = {}
    for (rank, t), labels in faulty.items():
        d = zoo.first_difference(normal[(rank, t)], labels, "cgsolve")
        if rank != case.bug_rank and d is not None:
            others[rank] = (d["iteration"], d["faulty"], _collectives(labels[:d["index"]]))
    assert culprit["iteration"] == case.iteration and culprit["normal"] == "MPI_Wait"
    lower = {r: o for r, o in others.items() if r < case.bug_rank}
    assert lower, others
    assert all(o == (case.iteration + 1, "repairGhost", clock) for o in lower.values()), (clock, others)


def test_cgsolve_setup_and_epilogue_make_the_loop_bodys_calls():
    """Issue 21 class 2: cgSolve's own calls before and after the loop are calls of the loop
    body (no call marks the loop), on the committed normal run."""
    normal, _ = _committed(zoo.find("cgsolve-4", "nowait"))
    labels = normal[(0, 0)]
    start = labels.index("cgSolve")
    depth, top = 0, []
    for ev in labels[start + 1:]:
        if ev == "<":
            depth -= 1
            if depth < 0:
                break
        else:
            if depth == 0:
                top.append(ev.split("[", 1)[0])
            depth += 1
    first = top.index("localProduct", top.index("localProduct") + 1)    # the setup has the first one
    setup, rest = top[:first], top[first:]
    body = rest[:rest.index("localProduct", 1)]
    iters = int(zoo.find("cgsolve-4", "normal").args[-1])
    epilogue = rest[len(body) * iters:]
    assert rest[:len(body) * iters] == body * iters
    assert set(setup) <= set(body) and set(epilogue) <= set(body) and len(epilogue) >= 3
    assert setup[:2] == ["haloExchange", "localProduct"] == epilogue[:2]


@pytest.mark.parametrize("group", ["cgsolve-4", "cgsolve-8"])
def test_cgsolve_livelock_repeats_a_program_function(group):
    """Issue 21 class 4: the culprit's trace ends repeating a small program function far more
    often than the normal run calls it."""
    case = zoo.find(group, "livelock")
    normal, faulty = _committed(case)
    spins = faulty[(case.bug_rank, 0)].count(case.call)
    assert spins > 100 * normal[(case.bug_rank, 0)].count(case.call), spins
    assert faulty[(case.bug_rank, 0)][-4:].count(case.call) >= 1


@pytest.mark.parametrize("group", ["cgsolve-4", "cgsolve-8"])
def test_cgsolve_stall_is_a_plain_hang_of_the_least_progressed(group):
    """Issue 21 class 5: every faulty trace is a prefix of its normal twin (nothing left the
    path, nothing died) and the culprit passed the fewest collectives."""
    case = zoo.find(group, "stall")
    normal, faulty = _committed(case)
    for key, labels in faulty.items():
        assert labels == normal[key][:len(labels)], key
    passed = {rank: _collectives(labels) for (rank, _), labels in faulty.items()}
    assert passed[case.bug_rank] < min(v for r, v in passed.items() if r != case.bug_rank), passed
