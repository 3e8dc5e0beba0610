"""The analyzer under a real Slurm: srun and sbatch on a private single-node cluster.

The module fixture starts one with ``slurm/local-slurm.sh start`` (its own munged,
slurmctld and slurmd, config and state in a temporary directory, free ports) and stops it
at the end, checking that every daemon is gone. It needs root and Debian's packages
``slurmctld slurmd slurm-client munge``; without them the module is skipped (with a
warning in the summary).

A missing or wrong PMI does not make srun fail: every task becomes a 1-rank MPI job. So
every test here asserts the MPI world size the tasks saw, not just an exit status.
"""
import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from conftest import EXAMPLES, ROOT, assert_same_h5, run_cli

LOCAL_SLURM = ROOT / "slurm" / "local-slurm.sh"
SBIN_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"])
INSTALL_HINT = "apt-get install -y slurmctld slurmd slurm-client munge"
RANKS = 4


def _why_not():
    missing = [b for b in ("slurmctld", "slurmd", "munged", "srun", "sbatch")
               if shutil.which(b, path=SBIN_PATH) is None]
    if missing:
        return f"Slurm not installed (no {', '.join(missing)}): {INSTALL_HINT}"
    if os.geteuid() != 0:
        return "the local Slurm cluster needs root (slurmd starts jobs as their users)"
    return None


WHY_NOT = _why_not()
if WHY_NOT:
    warnings.warn(f"tests/test_slurm.py skipped: {WHY_NOT}", stacklevel=1)
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")]


def alive(pid):
    """True while the process exists and has not exited (a zombie has exited: this
    machine's init may never reap the daemons' exit status)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def clean_env(extra=None):
    """The environment for Slurm commands: nothing from an enclosing Slurm job or MPI
    launcher (srun would try to use that allocation / PMI), the venv's python first."""
    drop = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "PMI_", "PMIX_", "HYDRA_", "MPIR_", "OMPI_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), SBIN_PATH])
    env["PYTHONPATH"] = str(ROOT)
    env["NO_COLOR"] = "1"
    env.update(extra or {})
    return env


class LocalSlurm:
    def __init__(self, cpus=None):
        """``cpus``: the node's CPU count (LOCAL_SLURM_CPUS; default 8)."""
        start = time.perf_counter()
        res = subprocess.run(["bash", str(LOCAL_SLURM), "start"], capture_output=True, text=True,
                             timeout=120, env=clean_env({"LOCAL_SLURM_CPUS": str(cpus)} if cpus else None))
        self.start_seconds = time.perf_counter() - start
        assert res.returncode == 0, f"local-slurm.sh start failed:\n{res.stdout}\n{res.stderr}"
        exports = dict(re.findall(r"^export (\w+)=(.*)$", res.stdout, re.M))
        self.dir = Path(exports["LOCAL_SLURM_DIR"])
        self.env = clean_env({"SLURM_CONF": exports["SLURM_CONF"]})
        pids = subprocess.run(["bash", str(LOCAL_SLURM), "pids", str(self.dir)], capture_output=True,
                              text=True, timeout=30, env=self.env)
        self.pids = [int(p) for p in pids.stdout.split()]
        assert len(self.pids) == 3 and all(map(alive, self.pids)), (pids.stdout, pids.stderr)
        self.stopped = False

    def run(self, *cmd, timeout=120, env=None, cwd=ROOT):
        return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                              cwd=cwd, env=env or self.env)

    def stop(self):
        """Stop the daemons; assert that none survives and the directory is gone."""
        if self.stopped:
            return
        self.stopped = True
        res = self.run("bash", LOCAL_SLURM, "stop", self.dir, timeout=120)
        assert res.returncode == 0, res.stderr
        deadline = time.time() + 10
        while any(map(alive, self.pids)) and time.time() < deadline:
            time.sleep(0.1)
        assert not [p for p in self.pids if alive(p)], "daemons still running after stop"
        assert not self.dir.exists()
        assert not stepds_of(self.dir), "slurmstepd of this cluster still running after stop"


def stepds_of(directory):
    """Live slurmstepd processes started by the cluster in ``directory``."""
    marker = f"SLURM_CONF={directory}/slurm.conf".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "comm").read_text().strip() != "slurmstepd":
                continue
            if marker in (proc / "environ").read_bytes().split(b"\0") and alive(int(proc.name)):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.fixture(scope="module")
def slurm():
    cluster = LocalSlurm()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    out = tmp_path_factory.mktemp("slurm1") / "r1.h5"
    res = run_cli("analyze", EXAMPLES / "normal", EXAMPLES / "swapbug", "--out", out)
    assert res.returncode == 0, res.stderr
    assert "MPI ranks used: 1" in res.stdout
    return out


def test_srun_gives_one_mpi_world(slurm):
    # one write(2) per rank: a line written in pieces can be cut by another rank's
    code = "import os; from mpi4py import MPI; c = MPI.COMM_WORLD; os.write(1, f'size {c.size} rank {c.rank}\\n'.encode())"
    res = slurm.run("srun", "--mpi=pmi2", "-t", 2, "-n", RANKS, sys.executable, "-c", code)
    assert res.returncode == 0, res.stderr
    seen = sorted(tuple(map(int, m)) for m in re.findall(r"^size (\d+) rank (\d+)$", res.stdout, re.M))
    assert seen == [(RANKS, r) for r in range(RANKS)], res.stdout      # size 1 x 4 = no PMI


def test_srun_analyze_matches_one_rank(slurm, one_rank, tmp_path):
    out = tmp_path / "r4.h5"
    res = slurm.run("srun", "--mpi=pmi2", "-t", 3, "-n", RANKS, sys.executable, "-m", "difftrace_mpi", "analyze",
                    EXAMPLES / "normal", EXAMPLES / "swapbug", "--out", out)
    assert res.returncode == 0, res.stderr
    assert f"MPI ranks used: {RANKS}" in res.stdout
    assert res.stdout.count("Ranking table") == 1            # printed by the root only
    assert_same_h5(one_rank, out)


def test_sbatch_analyze_script(slurm, one_rank, tmp_path):
    out, log = tmp_path / "batch.h5", tmp_path / "analyze.log"
    env = dict(slurm.env, NORMAL=str(EXAMPLES / "normal"), FAULTY=str(EXAMPLES / "swapbug"), OUT=str(out),
               NTASKS=str(RANKS), PROJECT=str(ROOT), VENV=sys.prefix)
    res = slurm.run("sbatch", "--wait", "--time=3", f"--ntasks={RANKS}", f"--output={log}", f"--chdir={tmp_path}",
                    ROOT / "slurm" / "analyze.sbatch", env=env)
    text = log.read_text() if log.exists() else "(no log)"
    assert res.returncode == 0, f"{res.stdout}{res.stderr}\n--- job log:\n{text}"
    assert f"MPI ranks used: {RANKS}" in text, text
    assert "srun exit status: 0" in text, text
    assert_same_h5(one_rank, out)


def test_sbatch_analyze_reports_failure(slurm, tmp_path):
    """A failing analysis fails the job, and the log says srun's exit status."""
    log = tmp_path / "fail.log"
    env = dict(slurm.env, NORMAL=str(tmp_path / "nope"), FAULTY=str(EXAMPLES / "swapbug"),
               OUT=str(tmp_path / "never.h5"), PROJECT=str(ROOT), VENV=sys.prefix)
    res = slurm.run("sbatch", "--wait", "--time=3", "--ntasks=2", f"--output={log}", f"--chdir={tmp_path}",
                    ROOT / "slurm" / "analyze.sbatch", env=env)
    text = log.read_text()
    assert res.returncode != 0, text
    assert re.search(r"^srun exit status: [1-9]", text, re.M), text
    assert "nope" in text and not (tmp_path / "never.h5").exists()


def test_sbatch_trace_script_plumbing(slurm, tmp_path):
    """trace-lulesh.sbatch with a stand-in tracer: every rank runs `TRACER -o DIR APP ARGS`
    with PARLOT_OUT and OMP_NUM_THREADS set, in one MPI world of NODES x RANKS_PER_NODE."""
    tracer = tmp_path / "parlot-run"
    tracer.write_text('#!/bin/sh\n'
                      'if [ "$1" = -o ]; then out=$2; shift 2; else out=$PARLOT_OUT; fi\n'
                      'echo "$PARLOT_OUT|$out|$OMP_NUM_THREADS|$*" > "$out/stub.$SLURM_PROCID"\n'
                      'exec "$@"\n')
    tracer.chmod(0o755)
    app = tmp_path / "app.py"
    app.write_text("import sys\nfrom mpi4py import MPI\nc = MPI.COMM_WORLD\n"
                   "open(f'{sys.argv[2]}/app.{c.rank}', 'w').write(f'{c.size} {sys.argv[1]}')\n")
    traces, log = tmp_path / "traces", tmp_path / "trace.log"
    env = dict(slurm.env, TRACER=str(tracer), APP=sys.executable, APP_ARGS=f"{app} -s3 {traces}",
               TRACE_DIR=str(traces), PROJECT=str(ROOT))
    res = slurm.run("sbatch", "--wait", "--time=3", "--nodes=1", "--ntasks-per-node=8", "--cpus-per-task=1",
                    f"--output={log}", f"--chdir={tmp_path}", ROOT / "slurm" / "trace-lulesh.sbatch", env=env)
    text = log.read_text() if log.exists() else "(no log)"
    assert res.returncode == 0, f"{res.stdout}{res.stderr}\n--- job log:\n{text}"
    assert "srun exit status: 0" in text and "8 ranks (1 nodes x 8) x 1 OpenMP threads" in text, text
    stubs = sorted(traces.glob("stub.*"))
    assert len(stubs) == 8, text
    for stub in stubs:
        assert stub.read_text().strip() == f"{traces}|{traces}|1|{sys.executable} {app} -s3 {traces}"
    assert sorted(p.read_text() for p in traces.glob("app.*")) == ["8 -s3"] * 8


def test_second_cluster_alongside(slurm):
    """A second start works while the first runs (own ports, own munge), and stops cleanly."""
    other = LocalSlurm()
    try:
        assert other.dir != slurm.dir
        res = other.run("srun", "-n", 1, "hostname")
        assert res.returncode == 0, res.stderr
    finally:
        other.stop()
    res = slurm.run("srun", "-n", 1, "true")          # the first one is untouched
    assert res.returncode == 0, res.stderr


def test_stop_leaves_nothing_running(slurm):
    pids, directory = list(slurm.pids), slurm.dir
    slurm.stop()
    assert not [p for p in pids if alive(p)]
    assert not directory.exists()
