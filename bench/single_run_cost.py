"""The failed run alone against two-run mode on one long time-step loop (issue 36, item 6):
CPU time and peak RSS of ``analyze DIR`` (single-run mode: the run's own ranks and time
steps are the norm) and ``analyze DIR DIR`` (two-run mode, the same run as both), on the
same synthetic text run, each in its own process.

    .venv/bin/python bench/single_run_cost.py [--steps 1670000] [--ranks 2] [--repeat 1] [--keep DIR]

The run: RANKS traces ``r<rank>.t0.txt`` in entry/exit text format, each main >
MPI_Init, STEPS x (step > MPI_Allreduce, compute), MPI_Finalize: six lines a step, so the
default is two traces of 10 M lines (1.67 M time steps).  Both modes must find no
difference (checked).  Figures are medians over ``--repeat`` runs of each mode, alternating.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from benchutil import machine_line  # noqa: E402

ALLREDUCE = "MPI_Allreduce[count=1,type=MPI_DOUBLE,op=MPI_SUM]"
STEP = f"> step\n> {ALLREDUCE}\n< {ALLREDUCE}\n> compute\n< compute\n< step\n"


def write_run(out, steps, ranks):
    """The synthetic run (see the module doc) in directory ``out``."""
    os.makedirs(out, exist_ok=True)
    block = STEP * 10000
    for rank in range(ranks):
        with open(os.path.join(out, f"r{rank}.t0.txt"), "w") as fh:
            fh.write("> main\n> MPI_Init\n< MPI_Init\n")
            for _ in range(steps // 10000):
                fh.write(block)
            fh.write(STEP * (steps % 10000))
            fh.write("> MPI_Finalize\n< MPI_Finalize\n< main\n")


def measure(args):
    """(CPU seconds, user + system; peak RSS in MiB; wall seconds; stdout) of one
    ``python -m difftrace_mpi`` process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "difftrace_mpi", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"analyze {' '.join(args)} failed ({proc.returncode}):\n{out[-3000:]}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, wall, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1_670_000, help="time steps per trace")
    ap.add_argument("--ranks", type=int, default=2, help="traces (one per rank)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each mode (medians)")
    ap.add_argument("--keep", help="write the run here and keep it (else a temporary directory)")
    opts = ap.parse_args()
    print(machine_line())
    tmp = None if opts.keep else tempfile.mkdtemp(prefix="single_run_cost_")
    run = opts.keep or os.path.join(tmp, "run")
    try:
        t0 = time.perf_counter()
        write_run(run, opts.steps, opts.ranks)
        lines = 6 * opts.steps + 6
        print(f"run: {opts.ranks} traces x {lines:,} lines ({opts.steps:,} time steps each), "
              f"written in {time.perf_counter() - t0:.1f} s")
        modes = {"alone (analyze DIR)": [run], "two runs (analyze DIR DIR)": [run, run]}
        figures = {mode: [] for mode in modes}
        for _ in range(max(1, opts.repeat)):
            for mode, paths in modes.items():
                cpu, rss, wall, out = measure(["analyze", *paths])
                if "No difference" not in out:
                    raise SystemExit(f"{mode}: expected no difference, got:\n{out[-3000:]}")
                figures[mode].append((cpu, rss, wall))
        print(f"{'mode':30s} {'CPU s':>8s} {'peak RSS MiB':>13s} {'wall s':>8s}")
        for mode, runs in figures.items():
            cpu, rss, wall = (statistics.median(r[i] for r in runs) for i in range(3))
            print(f"{mode:30s} {cpu:8.2f} {rss:13.0f} {wall:8.2f}")
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
