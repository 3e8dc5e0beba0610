"""The example runs of the programs in this directory, traced by ``pin/parlot-run``.

One table says, for every run: the program, ranks x threads, the arguments (which bug, in
which rank, thread and iteration), whether the run hangs, and where DiffTrace should find
the bug.  ``regenerate_traces.py`` uses it to write the committed traces under
``examples/traces/``, ``tests/test_tracer.py`` to run and check every bug, and the tables in
``pin/README.md`` describe what each run shows.

:func:`run_scenario` runs one scenario under ``mpiexec``.  A hanging run is ended the way a
user ends one: SIGTERM to ``mpiexec`` (which passes it to the ranks, whose tracers complete
their files) once the trace files have stopped changing, with ``timeout -s TERM`` as the
hard limit.
"""
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PARLOT_RUN = ROOT / "pin" / "parlot-run"


@dataclass(frozen=True)
class Scenario:
    group: str                  # directory under examples/traces/
    name: str                   # run directory (normal, swapbug, ...)
    program: str                # executable in the build directory
    ranks: int
    threads: int
    args: tuple = ()
    hangs: bool = False
    bug_rank: int = None        # where the bug is (None: the normal run)
    bug_thread: int = None      # set when the bug is in one thread
    filters: tuple = ()         # analyze --filters that localize it, when the default grid does
                                # not (see pin/README.md: what the default grid shows instead)
    note: str = ""
    annotate: bool = False      # traced with parlot-run -a (MPI events named with their arguments);
                                # compare only with a normal run traced the same way


SCENARIOS = (
    # the paper's odd/even sort, 16 ranks (section II-G)
    Scenario("oddeven-real", "normal", "oddeven", 16, 1),
    Scenario("oddeven-real", "swapbug", "oddeven", 16, 1, ("--bug", "swap", "--bug-rank", "5", "--bug-iter", "7"),
             bug_rank=5, note="rank 5 swaps Send/Recv after 7 exchanges; the run ends"),
    Scenario("oddeven-real", "dlbug", "oddeven", 16, 1, ("--bug", "dl", "--bug-rank", "5", "--bug-iter", "7"),
             hangs=True, bug_rank=5, note="rank 5 receives with a tag nobody sends after 7 exchanges: deadlock"),
    # ILCS-like hybrid search (section IV), 4 ranks x 4 threads (master + 3 workers)
    Scenario("ilcs", "normal", "ilcs", 4, 4),
    Scenario("ilcs", "nocrit", "ilcs", 4, 4, ("--bug", "nocrit", "--bug-rank", "2", "--bug-thread", "3"),
             bug_rank=2, bug_thread=3, note="worker 3 of rank 2 updates its champion outside omp critical"),
    Scenario("ilcs", "wrongsize", "ilcs", 4, 4, ("--bug", "wrongsize", "--bug-rank", "1", "--bug-round", "1"),
             hangs=True, bug_rank=1, filters=("11.mpi", "11.mpicol"),
             note="rank 1 passes count 0 to MPI_Allreduce in round 1: deadlock"),
    Scenario("ilcs", "wrongop", "ilcs", 4, 4, ("--bug", "wrongop", "--bug-rank", "0", "--bug-round", "0"),
             bug_rank=0, note="rank 0 reduces with MPI_MAX instead of MPI_MIN: a wrong answer, shorter run"),
    # the same runs traced with argument-annotated MPI events (parlot-run -a): the faulty
    # rank's call itself differs (MPI_Allreduce[...,op=MPI_MAX], [count=0,...])
    Scenario("ilcs", "normal_annotated", "ilcs", 4, 4, annotate=True),
    Scenario("ilcs", "wrongsize_annotated", "ilcs", 4, 4, ("--bug", "wrongsize", "--bug-rank", "1", "--bug-round", "1"),
             hangs=True, bug_rank=1, annotate=True,
             note="wrongsize traced with -a: rank 1's MPI_Allreduce[count=0,...] stands out"),
    Scenario("ilcs", "wrongop_annotated", "ilcs", 4, 4, ("--bug", "wrongop", "--bug-rank", "0", "--bug-round", "0"),
             bug_rank=0, annotate=True,
             note="wrongop traced with -a: rank 0's MPI_Allreduce[...,op=MPI_MAX] stands out"),
    # halo exchange (nonblocking point-to-point + OpenMP), 6 ranks x 3 threads
    Scenario("halo", "normal", "halo", 6, 3),
    Scenario("halo", "lost", "halo", 6, 3, ("--bug", "lost", "--bug-rank", "2", "--bug-iter", "6"),
             hangs=True, bug_rank=2, filters=("11.mpisr",),
             note="rank 2 skips its MPI_Isend to rank 3 in iteration 6: hang at the next MPI_Allreduce"),
    Scenario("halo", "extra", "halo", 6, 3, ("--bug", "extra", "--bug-rank", "2", "--bug-iter", "6"),
             bug_rank=2, note="rank 2 computes the residual once more in iteration 6 (no hang)"),
)


def scenario(group, name):
    for s in SCENARIOS:
        if s.group == group and s.name == name:
            return s
    raise KeyError((group, name))


def venv_mpiexec():
    p = ROOT / ".venv" / "bin" / "mpiexec"
    return str(p) if p.exists() else (shutil.which("mpiexec") or "mpiexec")


def build(build_dir=None):
    """make -C pin and the programs (into build_dir, default examples/programs/build)."""
    subprocess.run(["make", "-s", "-C", str(ROOT / "pin")], check=True)
    cmd = ["make", "-s", "-C", str(HERE)]
    if build_dir is not None:
        cmd.append(f"BUILD={build_dir}")
    subprocess.run(cmd, check=True)
    return Path(build_dir) if build_dir is not None else HERE / "build"


def _snapshot(d):
    try:
        return sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(d))
    except FileNotFoundError:
        return None


@dataclass
class RunResult:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    terminated: bool = False    # we sent SIGTERM (a hanging run)
    extra: dict = field(default_factory=dict)


def run_scenario(sc, out_dir, build_dir, quiet_s=3.0, limit_s=60.0, mpiexec=None):
    """Trace one scenario into out_dir (created fresh).  Hanging runs get SIGTERM once their
    files have not changed for quiet_s seconds; every run is killed by timeout after limit_s."""
    out_dir = Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    exe = Path(build_dir) / sc.program
    cmd = ["timeout", "-s", "TERM", str(int(limit_s)), mpiexec or venv_mpiexec(), "-n", str(sc.ranks),
           str(PARLOT_RUN), "-q", ("-a" if sc.annotate else "-A"), "-d", str(out_dir), str(exe), *sc.args]
    env = dict(os.environ, OMP_NUM_THREADS=str(sc.threads), OMP_WAIT_POLICY="passive")
    env.pop("PARLOT_DIR", None)
    env.pop("PARLOT_MPI_ARGS", None)
    t0 = time.monotonic()
    if not sc.hangs:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=limit_s + 30)
        return RunResult(p.returncode, p.stdout, p.stderr, time.monotonic() - t0)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    last, since = None, time.monotonic()
    terminated = False
    while p.poll() is None:
        time.sleep(0.2)
        snap = _snapshot(out_dir)
        now = time.monotonic()
        if snap != last:
            last, since = snap, now
            continue
        ranks_seen = sum(1 for name, _, _ in (snap or ()) if name.endswith(".rank"))
        if ranks_seen >= sc.ranks and now - since >= quiet_s:
            p.send_signal(signal.SIGTERM)      # to timeout, which passes it on to mpiexec
            terminated = True
            break
    try:
        out, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    return RunResult(p.returncode, out, err, time.monotonic() - t0, terminated)
