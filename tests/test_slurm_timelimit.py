"""The Slurm recipe (slurm/trace-and-analyze.sbatch, slurm/README.md) under a real Slurm:
a traced MPI job that hangs runs into its time limit, and its traces come out complete
(every process's ``.end`` record, every thread file whole, as the analyzer reads them) with
a verdict naming the rank that caused the hang.

Two jobs run side by side on one private single-node cluster (``slurm/local-slurm.sh``, as
in test_slurm.py), both hanging deterministically a few iterations in:

* **warned**: ``--time=1 --signal=TERM@10``: Slurm sends SIGTERM to the traced step before
  the limit (20-50 s after the start: its timer runs every 30 s), the tracer completes the
  traces, and the same job analyses them and writes the report. halo.c, 4 ranks x 2
  OpenMP threads; rank 1 skips a send in iteration 2 (``--bug lost``), the run hangs at
  the next residual check.
* **killed**: ``--time=1`` with no warning: the job is killed at its limit (SIGTERM to
  every step and the batch shell, SIGKILL after KillWait); ``ANALYZE=after`` has put the
  analysis in a dependent job (afterany), which runs once the job is gone. cgsolve.c, 4
  ranks; rank 1 skips its halo exchange in iteration 3.

Cost: about 1.5 min (the killed job's minute, Slurm's up to 30 s of timer lag, KillWait).
"""
import re
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from test_slurm import WHY_NOT, LocalSlurm

pytestmark = [pytest.mark.integration, pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")]

SCRIPT = ROOT / "slurm" / "trace-and-analyze.sbatch"
PROGRAMS = ROOT / "examples" / "programs"
MPICC = ROOT / ".venv" / "bin" / "mpicc"

# (program, ranks, threads, arguments): each hangs; rank 1 is the culprit
WARNED = ("halo", 4, 2, "--cells 64 --iters 20 --bug lost --bug-rank 1 --bug-iter 2")
KILLED = ("cgsolve", 4, 1, "--bug skipexchange --bug-rank 1 --bug-iter 3")
CULPRIT = 1


@pytest.fixture(scope="module")
def cluster():
    # 4 x 2 CPUs for the warned job, 4 for the killed one: both run at once
    c = LocalSlurm(cpus=12)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    """The two programs, built with the virtualenv's MPICH and the tracer's flags
    (examples/programs/Makefile); the tracer as ./setup.sh built it (made here if missing)."""
    if not (ROOT / "pin" / "libparlot.so").exists():
        subprocess.run(["make", "-s", "-C", str(ROOT / "pin")], check=True, timeout=600)
    d = tmp_path_factory.mktemp("progs")
    mpicc = MPICC if MPICC.exists() else "mpicc"
    for name in (WARNED[0], KILLED[0]):
        subprocess.run([str(mpicc), "-O1", "-g", "-fopenmp", "-finstrument-functions", "-Wall", "-o",
                        str(d / name), str(PROGRAMS / f"{name}.c"), "-lm"], check=True, timeout=300)
    return d


def _submit(cluster, tmp, name, program, ranks, threads, args, sbatch_args, **env):
    traces = tmp / name / "traces"
    traces.parent.mkdir()
    log = tmp / name / "job.out"
    env = dict(cluster.env, APP=str(program), APP_ARGS=args, TRACE_DIR=str(traces), PROJECT=str(ROOT),
               VENV=sys.prefix, **env)
    res = cluster.run("sbatch", "--parsable", "--time=1", f"--ntasks={ranks}", f"--cpus-per-task={threads}",
                      f"--output={log}", f"--chdir={tmp / name}", *sbatch_args, SCRIPT, env=env)
    assert res.returncode == 0, res.stderr
    return {"id": res.stdout.strip().split(";")[0], "traces": traces, "log": log, "dir": tmp / name}


def job_state(cluster, job_id):
    """{JobState, ExitCode, RunTime, ...} of a job slurmctld still knows (MinJobAge=60)."""
    res = cluster.run("scontrol", "-o", "show", "job", job_id)
    assert res.returncode == 0, res.stderr
    return dict(re.findall(r"(\w+)=(\S*)", res.stdout))


# the states of a job that has ended (slurmctld passes through others on the way:
# COMPLETING, and SIGNALING while a --signal warning is still being delivered, ...)
ENDED = ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE")


def wait_for(cluster, jobs, limit):
    """Wait until every job has ended (polled: sbatch --wait polls at up to 30 s intervals);
    record its final state and how long after ``start`` it ended."""
    deadline = time.time() + limit
    while True:
        for job in jobs:
            if "state" not in job:
                st = job_state(cluster, job["id"])
                if st["JobState"] in ENDED:
                    job["state"], job["exit"], job["ended"] = st["JobState"], st["ExitCode"], time.time()
        if all("state" in job for job in jobs) or time.time() > deadline:
            break
        time.sleep(0.5)
    for job in jobs:
        job["text"] = job["log"].read_text() if job["log"].exists() else "(no job log)"
        assert "state" in job, f"job {job['id']} still not ended after {limit} s\n{job['text']}"


@pytest.fixture(scope="module")
def jobs(cluster, programs, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("timelimit")
    start = time.time()
    warned = _submit(cluster, tmp, "warned", programs / WARNED[0], *WARNED[1:], ["--signal=TERM@10"],
                     ANALYZE="here", ANALYZE_TASKS="1")
    # TERM@0: no warning (the script's own #SBATCH --signal=TERM@180 is overridden)
    killed = _submit(cluster, tmp, "killed", programs / KILLED[0], *KILLED[1:], ["--signal=TERM@0"],
                     ANALYZE="after", ANALYZE_SBATCH_ARGS="--time=3 --ntasks=1")
    wait_for(cluster, [warned, killed], 200)
    # the killed job's analysis: a dependent job, started once the killed job has ended
    m = re.search(r"^trace-and-analyze: analysis: job (\d+)", killed["text"], re.M)
    assert m, killed["text"]
    analysis = {"id": m.group(1), "log": killed["dir"] / f"traces.analyze-{m.group(1)}.out"}
    wait_for(cluster, [analysis], 150)
    killed["analysis"] = analysis
    print(f"\nwarned job {warned['state']} after {warned['ended'] - start:.0f} s; killed job {killed['state']} "
          f"after {killed['ended'] - start:.0f} s, its analysis {analysis['state']} after "
          f"{analysis['ended'] - start:.0f} s")
    return {"warned": warned, "killed": killed}


def assert_complete(traces, ranks, threads, log):
    """Every rank's every thread read back whole, each process ended by SIGTERM (its .end)."""
    from difftrace_mpi.readers import load_run
    run = load_run(traces)
    got = sorted((t.rank, t.thread) for t in run.traces)
    assert got == [(r, th) for r in range(ranks) for th in range(threads)], (got, log)
    for t in run.traces:
        where = f"rank {t.rank} thread {t.thread}"
        assert t.complete and not t.notes, (where, t.notes, log)
        assert t.ending is not None, f"{where}: no .end record\n{log}"
        assert (t.ending.get("how"), t.ending.get("signal")) == ("signal", "SIGTERM"), (where, t.ending, log)
    infos = sorted(traces.glob("*.info"))
    assert len(infos) == ranks and all(i.with_suffix(".end").is_file() for i in infos), log


def assert_hang_by(results, report, log):
    from difftrace_mpi.api import load
    assert results.is_file(), log
    with load(results) as r:
        v = r.verdict
    assert v["kind"] == "hang" and v["alone"], (v["summary"], log)
    assert v["culprits"][0]["rank"] == CULPRIT, (v["summary"], log)
    page = report.read_text()
    assert f"rank {CULPRIT} thread 0" in page and "hang" in page, log


def test_warned_job_completes_traces_and_analyses_them_itself(jobs):
    job = jobs["warned"]
    text = job["text"]
    assert (job["state"], job["exit"]) == ("COMPLETED", "0:0"), (job["state"], job["exit"], text)
    # the step was ended by the warning, well before the limit; the batch shell went on
    assert "DUE TO TIME LIMIT" not in text, text
    m = re.search(r"^trace-and-analyze: traced step exit status: 143 .*, after (\d+) s$", text, re.M)
    assert m and int(m.group(1)) < 60, text
    _, ranks, threads, _ = WARNED
    assert f"traces: {ranks} processes, {ranks} with an .end record: signal SIGTERM x{ranks}" in text, text
    assert_complete(job["traces"], ranks, threads, text)
    assert "analysing" in text and "Verdict: HANG" in text and "analysis exit status: 0" in text, text
    assert_hang_by(job["dir"] / "traces.h5", job["dir"] / "traces.html", text)


def test_job_killed_at_its_limit_leaves_complete_traces_and_a_waiting_analysis(jobs):
    job = jobs["killed"]
    text = job["text"]
    # killed at its limit, not before
    assert job["state"] == "TIMEOUT" and "DUE TO TIME LIMIT" in text, (job["state"], text)
    _, ranks, threads, _ = KILLED
    assert_complete(job["traces"], ranks, threads, text)
    analysis = job["analysis"]
    dep = analysis["text"]
    assert (analysis["state"], analysis["exit"]) == ("COMPLETED", "0:0"), (analysis["state"], dep)
    assert "Verdict: HANG" in dep and "srun exit status: 0" in dep and "report exit status: 0" in dep, dep
    assert_hang_by(job["dir"] / "traces.h5", job["dir"] / "traces.html", dep)
