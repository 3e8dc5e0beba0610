"""The engine's guarantees: root-only work runs inside agreed steps, so an exception there
ends every rank promptly with one message (before the re-layering, an exception in a
root-only block left the other ranks waiting until they were killed); commands that
never communicate do not import MPI; the serial choreography needs no MPI."""
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import EXAMPLES, ROOT, run_cli

#: root-only functions the pipeline calls (each runs on the root alone, between collectives),
#: as module:name (results assembly lives in engine/assembly, the sequence in engine/pipeline)
ROOT_ONLY = ["engine.assembly:new_pieces", "engine.assembly:apply_trace_states", "engine.assembly:set_divergences",
             "engine.assembly:add_setting", "engine.assembly:finish", "engine.assembly:make_results"]

INJECT = """
import importlib, sys
from difftrace_mpi.engine import choreography
where, kind = sys.argv[1], sys.argv[2]
module, name = where.split(":")
module = importlib.import_module("difftrace_mpi." + module)
real = getattr(module, name)
def failing(*args, **kwargs):
    if choreography.world_rank() == 0:
        if kind == "user":
            from difftrace_mpi.errors import DiffTraceError
            raise DiffTraceError("injected user error")
        raise RuntimeError("injected failure")
    return real(*args, **kwargs)
setattr(module, name, failing)
from difftrace_mpi.cli import main
sys.exit(main(sys.argv[3:]))
"""


def run_injected(name, kind, ranks, tmp_path):
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    out = tmp_path / f"{name.replace(':', '_')}.h5"
    cmd = [mpiexec, "-n", str(ranks), sys.executable, "-c", INJECT, name, kind, "analyze",
           str(EXAMPLES / "normal"), str(EXAMPLES / "dlbug"), "--out", str(out), "--quiet"]   # errors alone
    start = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1"))
    return res, time.monotonic() - start, out


@pytest.mark.integration
@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("name", ROOT_ONLY)
def test_exception_in_root_only_work_ends_every_rank(name, ranks, tmp_path):
    """dlBug has stopped traces, so every root-only function runs (the normal-path check
    included).  A bug there: exit 1 on every rank within seconds, the traceback once."""
    res, seconds, out = run_injected(name, "bug", ranks, tmp_path)
    assert res.returncode == 1, (res.returncode, res.stderr[-2000:])
    assert seconds < 60
    assert res.stderr.count("internal error RuntimeError: injected failure") == 1, res.stderr[-2000:]
    assert not out.exists()


@pytest.mark.integration
def test_user_error_in_root_only_work_is_one_line(tmp_path):
    res, seconds, out = run_injected("engine.assembly:finish", "user", 2, tmp_path)
    assert res.returncode == 2 and seconds < 60
    assert res.stderr.strip().count("\n") == 0 and "injected user error" in res.stderr
    assert "ranking" in res.stderr          # the step that failed is named


@pytest.mark.integration
@pytest.mark.parametrize("command", [["report", "--help"], ["decode", "--help"]])
def test_commands_that_never_communicate_do_not_import_mpi(command):
    code = ("import sys; from difftrace_mpi.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "assert 'mpi4py' not in sys.modules, 'mpi4py imported'\n")
    res = subprocess.run([sys.executable, "-c", code, *command], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr


@pytest.mark.integration
def test_analyze_imports_no_scipy(tmp_path):
    # SciPy's sparse and cluster packages cost ~170 ms of every rank's start-up: the whole
    # analysis, its results file and its text output run on the project's own kernels
    code = ("import sys; from difftrace_mpi.cli import main\n"
            "assert main(sys.argv[1:]) == 0\n"
            "assert not [m for m in sys.modules if m.split('.')[0] == 'scipy'], 'scipy imported'\n")
    res = subprocess.run([sys.executable, "-c", code, "analyze", EXAMPLES / "normal", EXAMPLES / "swapbug",
                          "--out", tmp_path / "r.h5", "--html", tmp_path / "d.html", "--color", "never"],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert "CHANGED BEHAVIOUR" in res.stdout


@pytest.mark.integration
def test_views_import_no_mpi():
    res = subprocess.run([sys.executable, "-X", "importtime", "-c",
                          "import difftrace_mpi.views.report, difftrace_mpi.views.text, difftrace_mpi.store, "
                          "difftrace_mpi.cli"], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert "mpi4py" not in res.stderr


@pytest.mark.integration
def test_serial_choreography_gives_the_mpi_results(tmp_path):
    """The same analysis through the API with SerialComm and through the command."""
    from difftrace_mpi import store
    from difftrace_mpi.engine.choreography import Choreography, SerialComm
    from difftrace_mpi.engine.pipeline import analyze
    from conftest import assert_same_h5
    serial = analyze(EXAMPLES / "normal", EXAMPLES / "dlbug", choreography=Choreography(SerialComm()))
    store.write(serial, tmp_path / "serial.h5")
    res = run_cli("analyze", EXAMPLES / "normal", EXAMPLES / "dlbug", "--out", tmp_path / "mpi.h5")
    assert res.returncode == 0, res.stderr
    assert_same_h5(tmp_path / "serial.h5", tmp_path / "mpi.h5")


@pytest.mark.parametrize("env, alone", [
    ({}, True),
    ({"PMI_SIZE": "1", "PMI_RANK": "0"}, True),                 # mpiexec -n 1 (hydra)
    ({"OMPI_COMM_WORLD_SIZE": "1"}, True),                      # mpirun -n 1 (Open MPI)
    ({"PMI_SIZE": "4", "PMI_RANK": "2"}, False),
    ({"OMPI_COMM_WORLD_SIZE": "2"}, False),
    ({"PMIX_RANK": "0"}, False),                                # a PMIx launcher that tells no size
    ({"SLURM_PROCID": "0"}, False),                             # srun, or a batch script: in doubt
    ({"OMPI_MCA_btl": "self"}, False),                          # an MPI's settings: in doubt
    ({"HOME": "/root", "PATH": "/usr/bin"}, True),
])
def test_mpi_starts_unless_certainly_alone(monkeypatch, env, alone):
    """MPI is not started where the process certainly runs alone (~0.1 s of every run);
    wherever a launcher or an MPI job may be around, it is, and COMM_WORLD tells."""
    from difftrace_mpi.engine import choreography
    for name in list(os.environ):
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert choreography.certainly_alone() is alone


@pytest.mark.integration
def test_analyze_alone_starts_no_mpi(tmp_path):
    """A one-process analyze (no launcher) gives its results without importing mpi4py."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_", "HYDRA_", "SLURM_"))}
    code = ("import sys; from difftrace_mpi.cli import main\n"
            "code = main(sys.argv[1:])\n"
            "assert 'mpi4py.MPI' not in sys.modules, 'mpi4py.MPI imported'\n"
            "sys.exit(code)\n")
    res = subprocess.run([sys.executable, "-c", code, "analyze", str(EXAMPLES / "normal"), str(EXAMPLES / "dlbug"),
                          "--out", str(tmp_path / "r.h5")], capture_output=True, text=True, cwd=ROOT, env=env)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "r.h5").exists()


@pytest.mark.integration
def test_the_command_ends_without_teardown_but_a_profiler_gets_its_report(tmp_path):
    """A one-process command leaves the process once its output is flushed (freeing a
    real run's arrays one by one at exit costs time for nothing): exit handlers do not
    run, the results and the exit status are there; under MPI and under a profiler it
    exits as usual, so MPI finalizes in step and the profiler writes its report; there the
    collector is frozen first, so the teardown does not walk the rank's whole heap."""
    code = ("import atexit, gc, sys\n"
            "atexit.register(lambda: print('teardown ran', 'collector', 'on' if gc.isenabled() else 'off',\n"
            "                              gc.get_freeze_count() > 0 and 'frozen', flush=True))\n"
            "from difftrace_mpi.__main__ import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    args = ["analyze", str(EXAMPLES / "normal"), str(EXAMPLES / "dlbug"), "--out", str(tmp_path / "r.h5")]
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert "teardown ran" not in res.stdout and "Verdict" in res.stdout and (tmp_path / "r.h5").exists()
    res = subprocess.run([sys.executable, "-c", code, "analyze", str(tmp_path / "missing"), str(EXAMPLES / "dlbug")],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 2 and "teardown ran" not in res.stdout
    # where MPI started, the process ends as usual (a rank leaving right after MPI_Finalize
    # was seen to get its still-finalizing peers killed: exit code 9 on 4 ranks)
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    res = subprocess.run([mpiexec, "-n", "2", sys.executable, "-c", code, *args, "--force"],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr
    assert res.stdout.count("teardown ran collector off frozen") == 2, res.stdout[-2000:]
    prof = tmp_path / "p.prof"
    res = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "difftrace_mpi", *args, "--force"],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert prof.stat().st_size > 0


GATHER = """
import json, sys
import numpy as np
from difftrace_mpi.engine.choreography import Choreography
ch = Choreography()
mine = np.arange(5) * (ch.rank + 1)
parts = ch.gather(mine)
owner = ch.size - 1
blocked = ch.row_blocked("rows", 7, lambda lo, hi: np.arange(lo * 3, hi * 3, dtype=float).reshape(-1, 3), owner)
if ch.is_root:
    print(json.dumps({"own": parts[0] is mine, "parts": [p.tolist() for p in parts]}))
if ch.rank == owner:
    print(json.dumps({"blocked": blocked.tolist()}), file=sys.stderr)
"""


@pytest.mark.integration
@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_a_gather_hands_the_root_its_own_value_in_place(ranks):
    """The root's entry of a gather is the object it gave, as with one rank, not a copy
    sent to itself through MPI (25 MB of kept NLRs on real LULESH 216 x 1, copied while
    the other ranks waited); every other entry arrives in rank order, and a row-blocked
    matrix is assembled whole on a root other than rank 0."""
    import json
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    res = subprocess.run([mpiexec, "-n", str(ranks), sys.executable, "-c", GATHER],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["own"] is True
    assert out["parts"] == [[i * (r + 1) for i in range(5)] for r in range(ranks)]
    assert json.loads(res.stderr.strip().splitlines()[-1])["blocked"] == [[3.0 * r + c for c in range(3)] for r in range(7)]

AGREEMENT = """
import json
from mpi4py import MPI
from difftrace_mpi.engine.choreography import Choreography, StepFailed
ch = Choreography()
calls = []
class Counting:
    def __init__(self, comm):
        self.comm = comm
    def allgather(self, value):
        calls.append(type(self.comm).__module__ + "." + type(self.comm).__name__)
        return self.comm.allgather(value)
ch.control = Counting(ch.control)
for i in range(4):
    ch.step(f"step {i}", lambda: i)
try:
    ch.step("failing", lambda: 1 / (ch.rank - 2))
except StepFailed as exc:
    failed = str(exc)
every = MPI.COMM_WORLD.gather({"rank": ch.rank, "calls": calls, "failed": failed}, root=0)
if ch.is_root:
    print(json.dumps(every))
"""


@pytest.mark.integration
def test_each_step_agrees_through_one_mpi_collective():
    """A step's agreement is one allgather on MPI's own communicator (a tree of log P
    rounds), not on the pickle-5 wrapper the data travels through, whose allgather sends
    from every rank to every rank (P^2 messages: 4 ms a step on 3 ranks of this 2-core
    machine, 0.02 ms through MPI); a failure on one rank still reaches every rank."""
    import json
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    res = subprocess.run([mpiexec, "-n", "3", sys.executable, "-c", AGREEMENT],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    ranks = json.loads(res.stdout)
    assert [r["rank"] for r in ranks] == [0, 1, 2]
    for r in ranks:
        assert r["calls"] == ["mpi4py.MPI.Intracomm"] * 5, r
        assert "MPI rank 2, failing" in r["failed"] and "ZeroDivisionError" in r["failed"], r

TREE_REDUCE = """
import json
from difftrace_mpi.engine.choreography import Choreography
from difftrace_mpi.errors import DiffTraceError
from difftrace_mpi.stages.classify.records import Skipped
ch = Choreography()
merges = []
def combine(a, b):
    merges.append(ch.rank)
    if -1 in (a, b):
        raise DiffTraceError("minus one")
    return a + b
items = [(i + 1) * 10 ** ch.rank for i in range(7)]      # item i sums to (i + 1) * 11...1
if ch.size > 1:
    items[4] = Skipped("no lattice here") if ch.rank == 1 else items[4]
    items[2] = -1 if ch.rank == ch.size - 1 else items[2]
finished = []
def finish(total):
    finished.append((ch.rank, total))
    if total % 7 == 0:                  # item 6: (6 + 1) * 11...1
        raise DiffTraceError("unfinished")
    return -total
out = ch.tree_reduce("sum", items, combine, lambda x: ("packed", x), lambda p: p[1], finish)
counts = ch.comm.gather(len(merges), root=0)
finishes = ch.comm.gather(finished, root=0)
if ch.is_root:
    print(json.dumps({"values": [x.reason if isinstance(x, Skipped) else x for x in out], "merges": counts,
                      "finished": sorted(f for part in finishes for f in part)}))
"""


@pytest.mark.integration
@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_tree_reduce_spreads_the_merges_and_keeps_each_items_failure(ranks):
    import json
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    res = subprocess.run([mpiexec, "-n", str(ranks), sys.executable, "-c", TREE_REDUCE],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    total = sum(10 ** r for r in range(ranks))
    sums = [(i + 1) * total for i in range(7)]
    expected = [-x for x in sums]
    expected[6] = "unfinished"
    if ranks > 1:
        expected[4], expected[2] = "no lattice here", "minus one"
    assert out["values"] == expected
    # each item that reached its tree's root whole is finished once, there (rank i mod P)
    whole = [i for i in range(7) if ranks == 1 or i not in (2, 4)]
    assert [tuple(f) for f in out["finished"]] == sorted((i % ranks, sums[i]) for i in whole)
    # item i's tree is rooted at rank i mod P: every rank merges, none more than its share
    assert len(out["merges"]) == ranks and sum(out["merges"]) <= 7 * (ranks - 1)
    assert ranks == 1 or min(out["merges"]) >= 1
    assert max(out["merges"]) <= -(-7 * (ranks - 1) // ranks) + 1


def sharded(sizes, ranks):
    from difftrace_mpi.engine.choreography import Choreography, SerialComm
    ch = Choreography(comm=SerialComm())
    ch.size = ranks
    return ch.shard(sizes)


def test_shard_balances_what_the_greedy_pass_leaves():
    # largest first: 3, 3 | 2 -> 5, 2 -> 5 | 2 -> 7 against 5; a swap of a 3 and a 2 makes 6 and 6
    owned = sharded([3, 3, 2, 2, 2], 2)
    assert sorted(sum([3, 3, 2, 2, 2][i] for i in items) for items in owned) == [6, 6]
    assert owned == sharded([3, 3, 2, 2, 2], 2)             # the same on every rank


@pytest.mark.parametrize("ranks", [1, 2, 3, 5])
def test_shard_is_a_partition_no_exchange_improves(ranks):
    import random
    rng = random.Random(ranks)
    for _ in range(200):
        sizes = [rng.choice([0, 1, rng.randint(1, 50), rng.randint(100, 120)]) for _ in range(rng.randint(0, 30))]
        owned = sharded(sizes, ranks)
        assert len(owned) == ranks and sorted(i for items in owned for i in items) == list(range(len(sizes)))
        assert all(items == sorted(items) for items in owned)
        weight = [max(s, 1) for s in sizes]
        loads = [sum(weight[i] for i in items) for items in owned]
        heavy, light = owned[loads.index(max(loads))], owned[loads.index(min(loads))]
        gap = max(loads) - min(loads)
        # no single move or swap between the heaviest and the lightest rank narrows their gap
        for a in heavy:
            assert not 0 < weight[a] < gap
            assert not any(0 < weight[a] - weight[b] < gap for b in light)



def _task(classes, over=None):
    """A JSM task as ``attribute_steps`` leaves it: per rank's piece, per level, the
    distinct rows (only their count matters here)."""
    import numpy as np
    pieces = [tuple((np.zeros(n + 1, dtype=np.int64),) for n in per_level) for per_level in classes]
    return ("combo", "spec", 10, "attrs", pieces, over)


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_jsm_tasks_go_to_owners_by_their_estimated_cost(ranks):
    """Real LULESH 216 x 1's settings (classes per level on one rank): round-robin gave
    one of 2 ranks both of the biggest three that fall on odd indices; by estimated cost
    the heaviest rank carries at most the lightest's plus one task, and every rank
    decides the same."""
    from difftrace_mpi.engine.choreography import Choreography, SerialComm
    from difftrace_mpi.engine.jsm_step import JSM_TASK_FIXED, task_owners
    ch = Choreography(comm=SerialComm())
    ch.size = ranks
    tasks = [_task([(n, n)]) for n in (55, 74, 55, 55, 277, 432, 426, 431)] + [_task([(5000, 5000)], over="cap")]
    owners = task_owners(ch, tasks)
    assert owners == task_owners(ch, tasks) and set(owners) <= set(range(ranks))
    cost = [JSM_TASK_FIXED + (0 if t[5] else 2 * (len(t[4][0][0][0])) ** 2) for t in tasks]
    loads = [sum(c for c, o in zip(cost, owners) if o == r) for r in range(ranks)]
    assert max(loads) - min(loads) <= max(cost)
    round_robin = [sum(c for t, c in enumerate(cost) if t % ranks == r) for r in range(ranks)]
    assert max(loads) <= max(round_robin)
    if ranks == 2:
        assert max(loads) < max(round_robin)
        assert owners[5] != owners[7]           # the two biggest settings on different ranks


BLAS_PROBE = """
import json, os, sys
import numpy                      # loaded first, as a program using the API would
if sys.argv[1] == "unset":        # OpenBLAS started with the variable's 2 threads; now nothing says
    del os.environ["OPENBLAS_NUM_THREADS"]
from difftrace_mpi.engine import tuning as ch
controls = ch._openblas_thread_controls()
if not controls:
    print(json.dumps(None))
    sys.exit(0)
get = controls[0][0]
seen = {"before": get()}
with ch.blas_threads(1):
    seen["inside"] = get()
seen["after"] = get()
print(json.dumps(seen))
"""


@pytest.mark.integration
@pytest.mark.parametrize("case", ["unset", "chosen"])
def test_blas_threads_limits_and_restores_unless_the_environment_chose(case):
    import json
    from difftrace_mpi.config import BLAS_THREAD_VARS
    env = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARS}
    env["OPENBLAS_NUM_THREADS"] = "2"
    res = subprocess.run([sys.executable, "-c", BLAS_PROBE, case], capture_output=True, text=True, cwd=ROOT,
                         env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    seen = json.loads(res.stdout)
    if seen is None:
        pytest.skip("numpy here has no OpenBLAS of its own")
    if case == "unset":         # nothing chosen: one thread inside, as before afterwards
        assert seen == {"before": 2, "inside": 1, "after": 2}
    else:                       # the user's choice stands
        assert seen == {"before": 2, "inside": 2, "after": 2}


API_UNDER_MPI = """
import json, os, sys
import numpy                      # loaded first: OpenBLAS started with the variable's 2 threads
del os.environ["OPENBLAS_NUM_THREADS"]
from difftrace_mpi import api
from difftrace_mpi.engine import tuning, pipeline
controls = tuning._openblas_thread_controls()
seen = []
original = pipeline.jsm_tasks
def recording(*args, **kwargs):
    seen.append(controls[0][0]() if controls else None)
    return original(*args, **kwargs)
pipeline.jsm_tasks = recording
results = api.analyze(sys.argv[1], sys.argv[2])
after = controls[0][0]() if controls else None
if results is not None:
    print(json.dumps({"during": seen, "after": after, "kind": results.verdict["kind"]}))
"""


@pytest.mark.integration
def test_the_api_under_mpi_runs_blas_on_one_thread_per_rank():
    import json
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    from difftrace_mpi.config import BLAS_THREAD_VARS
    env = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARS}
    env["OPENBLAS_NUM_THREADS"] = "2"
    res = subprocess.run([mpiexec, "-n", "2", sys.executable, "-c", API_UNDER_MPI, EXAMPLES / "normal",
                          EXAMPLES / "swapbug"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    seen = json.loads(res.stdout.strip().splitlines()[-1])
    if seen["after"] is None:
        pytest.skip("numpy here has no OpenBLAS of its own")
    assert seen["during"] == [1] and seen["after"] == 2 and seen["kind"] != "none", seen


MPI_ENV_PROBE = """
import os, sys
from difftrace_mpi.engine.choreography import world_comm
comm = world_comm()
# one write per rank (a pipe write this short is atomic): print's pieces interleave
os.write(1, f"{comm.Get_rank()}={os.environ.get('UCX_MEM_EVENTS')}\\n".encode())
"""


@pytest.mark.integration
@pytest.mark.parametrize("chosen", [None, "yes"])
def test_mpi_starts_with_the_tools_defaults_unless_the_environment_chose(chosen):
    """config.MPI_ENV_DEFAULTS (UCX's malloc hooks off: 45 ms of every rank's start) is
    in every rank's environment as MPI loads, unless the user set the variable."""
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    env = {k: v for k, v in os.environ.items() if k != "UCX_MEM_EVENTS"}
    if chosen is not None:
        env["UCX_MEM_EVENTS"] = chosen
    res = subprocess.run([mpiexec, "-n", "2", sys.executable, "-c", MPI_ENV_PROBE], capture_output=True, text=True,
                         cwd=ROOT, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.split()) == [f"{rank}={chosen or 'no'}" for rank in (0, 1)], res.stdout
