"""The failed run alone (issue 26): ``analyze FAULTY_DIR`` and ``engine.alone.analyze_alone``
give a verdict of the same shape with no normal run, from the run's own ranks and time
steps.  On the bug zoos' committed traces, in process, one rank; and once through the CLI."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from difftrace_mpi.engine.alone import analyze_alone
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
             "minilulesh-8/nocrit", "minilulesh-8/skipcall", "minilulesh-8/livelock", "cgsolve-4/stall"]


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


@pytest.mark.integration
def test_the_outside_zoo_alone_meets_the_targets(ext):
    """Top-1 >= 85 %, iteration >= 80 % where the truth has one, kind >= 95 %, and every
    normal run alone says none."""
    marks, normals = ext
    assert sum(m["kind"] for m in marks) >= 0.95 * len(marks)
    assert sum(m["top1"] for m in marks) >= 0.85 * len(marks), [m["said"] for m in marks if not m["top1"]]
    assert sum(m["iteration"] for m in marks) >= 0.80 * len(marks)
    assert normals and all(n["kind"] == "none" for n in normals), normals


@pytest.mark.integration
@pytest.mark.xfail(strict=True, reason="issue 26 open: on the own zoo alone, top-1 81 %, iteration 59 %, kind 94 % "
                                       "(oddeven's exchanges, halo, cgsolve's step phase, new threads)")
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
