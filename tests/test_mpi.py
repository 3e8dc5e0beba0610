"""The same analysis under mpiexec -n 1..4: identical results files; failures never hang."""

import h5py
import numpy as np
import pytest

from conftest import EXAMPLES, ROOT, assert_same_h5, run_cli

pytestmark = pytest.mark.integration     # every test here starts processes


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    out = tmp_path_factory.mktemp("mpi") / "r1.h5"
    res = run_cli("analyze", EXAMPLES / "normal", EXAMPLES / "dlbug", "--out", out, mpi=1)
    assert res.returncode == 0, res.stderr
    return out


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_rank_count_invariance(one_rank, tmp_path, ranks):
    out = tmp_path / f"r{ranks}.h5"
    res = run_cli("analyze", EXAMPLES / "normal", EXAMPLES / "dlbug", "--out", out, mpi=ranks)
    assert res.returncode == 0, res.stderr
    assert f"MPI ranks used: {ranks}" in res.stdout      # really ran on `ranks` ranks
    assert_same_h5(one_rank, out)
    with h5py.File(out, "r") as f:                       # every rank's own time per step
        busy = f["timing/busy_by_rank"][()]
        steps = list(f["timing/busy_by_rank"].attrs["steps"])
        total = {k: f["timing"].attrs[k] for k in steps}
    assert busy.shape == (ranks, len(steps)) and "reading traces" in steps
    assert (busy >= 0).all() and busy[:, steps.index("reading traces")].min() > 0
    # the root's step time also waits for the slowest rank: never below its own work
    assert all(total[k] >= busy[0, i] for i, k in enumerate(steps))


def test_failure_on_one_rank_reaches_every_rank(tmp_path):
    from difftrace_mpi.readers import parlot
    run = tmp_path / "run"
    run.mkdir()
    names = ["<return>", "main", "MPI_Init"]
    for pid in range(100, 104):
        parlot.write_info(run / f"p.{pid}.info", names)
        parlot.write_trace(run / f"p.{pid}.0", np.array([1, 2, 0, 0], dtype=np.uint16))
    (run / "p.102.info").write_text("+\nimg\nmain\n<return>\n")       # pid 102: a reserved name
    out = tmp_path / "never.h5"
    res = run_cli("analyze", run, run, "--out", out, mpi=4, timeout=120)
    assert res.returncode == 2
    assert "p.102.info" in res.stderr and "'<return>' is reserved" in res.stderr
    assert res.stderr.count("error:") == 1                 # one message, from the root
    assert not out.exists() and not list(tmp_path.glob(".never.h5*"))


@pytest.mark.parametrize("error", ["RuntimeError('boom')", "DiffTraceError('bad input')"])
def test_failure_outside_a_step_on_one_rank_ends_the_job(tmp_path, error):
    """A rank that fails between agreed steps (a bug the steps do not catch) must not leave
    the others waiting in their next collective: the whole job ends, saying which rank."""
    import os
    import subprocess
    import sys
    script = tmp_path / "fail_on_rank1.py"
    script.write_text(
        "import sys\n"
        "from difftrace_mpi import cli\n"
        "from difftrace_mpi.engine import pipeline\n"
        "from difftrace_mpi.engine.choreography import world_rank\n"
        "from difftrace_mpi.errors import DiffTraceError\n"
        "real = pipeline.local_names\n"
        "def local_names(traces):\n"
        f"    if world_rank() == 1:\n        raise {error}\n"
        "    return real(traces)\n"
        "pipeline.local_names = local_names   # runs outside any step\n"
        "sys.exit(cli.main(sys.argv[1:]))\n")
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    res = subprocess.run([mpiexec, "-n", "2", sys.executable, str(script), "analyze", str(EXAMPLES / "normal"),
                          str(EXAMPLES / "dlbug")], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert res.returncode != 0
    assert "rank 1" in res.stderr and ("bad input" in res.stderr or "boom" in res.stderr), res.stderr


@pytest.mark.parametrize("ranks", [1, 3])
def test_row_blocked_jsms_equal_whole_ones(one_rank, tmp_path, ranks):
    """Forcing every class JSM through the row-block path (all ranks compute rows) gives
    the same file as computing each JSM whole."""
    out = tmp_path / f"blocked{ranks}.h5"
    res = run_cli("analyze", EXAMPLES / "normal", EXAMPLES / "dlbug", "--out", out, "--row-block-min", "2",
                  mpi=ranks)
    assert res.returncode == 0, res.stderr
    assert_same_h5(one_rank, out)
    with h5py.File(out, "r") as f:
        blocked = [k for k in f["timing"].attrs if k.startswith("JSM rows")]
    assert bool(blocked) == (ranks > 1)        # the collective path really ran with 3 ranks


def test_normal_path_check_is_rank_count_invariant(tmp_path):
    """The halo lost message: rank 2's normal and faulty traces sit on different MPI ranks
    under 3 ranks; the hang view's normal-path check (/objects/diverged_at, diverged_to)
    finds the same first difference."""
    halo = EXAMPLES.parent / "halo"
    outs = []
    for ranks in (1, 3):
        out = tmp_path / f"halo{ranks}.h5"
        res = run_cli("analyze", halo / "normal", halo / "lost", "--out", out, mpi=ranks)
        assert res.returncode == 0, res.stderr
        assert "  culprit:   rank 2 thread 0" in res.stdout      # the verdict, from the same check
        outs.append(out)
    assert_same_h5(*outs)
    with h5py.File(outs[1], "r") as f:
        assert (f["objects/diverged_at"][()] >= 0).sum() == 1



def test_lattices_are_kept_in_their_stored_form_and_rebuild_equal(tmp_path):
    """On 1 and 2 ranks every lattice is kept in the results file's form (a LatticeRef,
    encoded where its tree's root built it, rebuilt on use); every lattice the 2-rank
    analysis gives equals the 1-rank analysis's, stored form and rebuilt arrays alike."""
    import os
    import subprocess
    import sys
    import difftrace_mpi
    from difftrace_mpi.results import LatticeRef
    script = tmp_path / "lattices.py"
    script.write_text(
        "import pickle, sys\n"
        "import difftrace_mpi\n"
        "from difftrace_mpi.results import LatticeRef\n"
        "r = difftrace_mpi.analyze(sys.argv[1], sys.argv[2])\n"
        "if r is not None:\n"
        "    out = {(c, a, run): (isinstance(s.lattices[run], LatticeRef) and s.lattices[run].stored(),\n"
        "                         s.lattice(run).to_arrays())\n"
        "           for c, combo in r.combos.items() for a, s in combo.attrs.items() for run in (0, 1)}\n"
        "    pickle.dump(out, open(sys.argv[3], 'wb'))\n")
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    got = tmp_path / "two.pickle"
    res = subprocess.run([mpiexec, "-n", "2", sys.executable, str(script), str(EXAMPLES / "normal"),
                          str(EXAMPLES / "dlbug"), str(got)], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert res.returncode == 0, res.stderr
    import pickle
    two = pickle.loads(got.read_bytes())
    one = difftrace_mpi.analyze(EXAMPLES / "normal", EXAMPLES / "dlbug")
    expected = {(c, a, run): (s.lattices[run].stored(), s.lattice(run).to_arrays())
                for c, combo in one.combos.items() for a, s in combo.attrs.items() for run in (0, 1)}
    assert set(two) == set(expected) and len(expected) == 16
    assert all(stored for stored, _ in two.values())
    for key, got in two.items():
        for arrays, want in zip(got, expected[key]):
            assert arrays.keys() == want.keys(), key
            assert all(np.array_equal(arrays[k], want[k]) and arrays[k].dtype == want[k].dtype for k in arrays), key
