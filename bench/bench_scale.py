"""Scaling of the whole analysis with traces and with MPI ranks, on synthetic LULESH-like
runs (bench/synth_lulesh.py: P ranks x 8 threads, a few perturbed traces).

    .venv/bin/python bench/bench_scale.py [--sizes 64 512 4096] [--ranks 1 2] [--check 4 8]

For each size (MPI processes of the traced run; traces = 8 x that per run) and each rank
count: wall time of `mpiexec -n R python -m difftrace_mpi analyze`, peak RSS per rank,
and the time of the main stages (from the /timing group of the results file).  The
speed-up column is the ratio to the 1-rank run of the same size, measured in this run.
``--check`` rank counts (oversubscribed on small machines) are run on the smallest size
for correctness only: their results must equal the 1-rank file.

``--repeat N`` runs the rank counts N times, alternating (1, 2, 1, 2, ...), and reports
the median wall time, memory and stage times per rank count: on a shared machine single
runs of the same analysis differ by up to 40% per stage.
"""
import statistics
import argparse
import os
import subprocess
import sys
import tempfile
import time

import h5py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from difftrace_mpi import store  # noqa: E402  (the checkout, put on sys.path above)


def run_analysis(normal, faulty, out, ranks):
    # $MPIEXEC where the MPI launcher does not sit beside the interpreter (a --target install)
    mpiexec = os.environ.get("MPIEXEC") or os.path.join(os.path.dirname(sys.executable), "mpiexec")
    cmd = [mpiexec, "-n", str(ranks), sys.executable, "-m", "difftrace_mpi", "analyze", normal, faulty,
           "--out", out, "--force", "--diffnlr", "0", "--rows", "1", "--top", "10"]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"analysis failed ({ranks} ranks):\n{res.stderr}")
    with h5py.File(out, "r") as f:
        timing = dict(f["timing"].attrs)
    with store.read(out) as results:         # the consensus, as `analyze --json` prints it
        rows, busy = results.as_dict(), results.busy_by_rank
    return wall, timing, rows, busy


def imbalance(busy):
    """Per stage, the slowest rank's own work over the mean rank's (1.00 = balanced)."""
    steps, seconds = busy
    out = {}
    for name, prefix in STAGES:
        per_rank = seconds[:, [i for i, s in enumerate(steps) if s.startswith(prefix)]].sum(axis=1)
        out[name] = per_rank.max() / per_rank.mean() if per_rank.mean() > 0 else 1.0
    return out


STAGES = (("discover", "finding"), ("read", "reading"), ("filter", "filter"), ("NLR", "NLR"), ("attrs", "attributes"), ("lattice", "lattice"), ("JSM+clust", "JSMs"))


def stage(timing, prefix):
    return sum(v for k, v in timing.items() if k.startswith(prefix))


def stage_times(timing):
    return {name: stage(timing, prefix) for name, prefix in STAGES}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 512, 4096], help="MPI processes of the traced run")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--check", type=int, nargs="*", default=[4, 8])
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--repeat", type=int, default=1, help="runs per rank count, alternating; medians reported")
    args = ap.parse_args()
    from synth_lulesh import write_run  # noqa: E402  (bench/ is on sys.path as the script dir)
    from conftest import assert_same_h5  # noqa: E402

    work = args.workdir or tempfile.mkdtemp(prefix="difftrace-scale-")
    print(f"machine: {os.cpu_count()} cores; work dir {work}")
    print(f"{'traces/run':>10} {'ranks':>5} {'wall s':>8} {'speed-up':>8} {'peak MB/rank':>14} "
          + " ".join(f"{name:>9}" for name, _ in STAGES) + f" {'other':>9}  perturbed traces named")
    for size in args.sizes:
        normal, faulty = os.path.join(work, f"n{size}"), os.path.join(work, f"f{size}")
        write_run(normal, size, args.threads, args.steps)
        perturb = write_run(faulty, size, args.threads, args.steps, faulty=True)
        base = base_stages = None
        runs = {ranks: [] for ranks in args.ranks}
        for _ in range(max(1, args.repeat)):
            for ranks in args.ranks:
                out = os.path.join(work, f"r{size}_{ranks}.h5")
                wall, timing, rows, busy = run_analysis(normal, faulty, out, ranks)
                rss = max(timing[f"peak_rss_mb_rank{r}"] for r in range(ranks))
                runs[ranks].append((wall, rss, stage_times(timing), rows, imbalance(busy)))
        for ranks in args.ranks:
            wall = statistics.median(r[0] for r in runs[ranks])
            rss = statistics.median(r[1] for r in runs[ranks])
            stages = {name: statistics.median(r[2][name] for r in runs[ranks]) for name, _ in STAGES}
            spread = {name: statistics.median(r[4][name] for r in runs[ranks]) for name, _ in STAGES}
            rows = runs[ranks][-1][3]
            base, base_stages = base or wall, base_stages or stages
            named = sorted({p["rank"] for p in rows["consensus"]["processes"]})
            wanted = sorted({v for k, v in perturb.items() if k.endswith("_rank")})
            print(f"{size * args.threads:>10} {ranks:>5} {wall:>8.1f} {base / wall:>8.2f} {rss:>14.0f} "
                  + " ".join(f"{stages[name]:>9.2f}" for name, _ in STAGES)
                  + f" {wall - sum(stages.values()):>9.2f}  "    # start-up, name union, NLR gathers, HDF5
                  + ('all' if set(wanted) <= set(named) else 'missing ' + str(sorted(set(wanted) - set(named)))))
            if stages is not base_stages:    # each stage against the same stage on the first rank count
                print(f"{'':>10} {'':>5} {'':>8} {'':>8} {'stage speed-up':>14} "
                      + " ".join(f"{base_stages[n] / stages[n]:>8.2f}x" if stages[n] > 0 else f"{'-':>9}"
                                 for n, _ in STAGES))
                print(f"{'':>10} {'':>5} {'':>8} {'':>8} {'busy max/mean':>14} "    # own work, slowest rank
                      + " ".join(f"{spread[n]:>8.2f} " for n, _ in STAGES))
        for ranks in args.check if size == args.sizes[0] else []:
            out = os.path.join(work, f"r{size}_{ranks}.h5")
            run_analysis(normal, faulty, out, ranks)
            assert_same_h5(os.path.join(work, f"r{size}_{args.ranks[0]}.h5"), out)
            print(f"{size * args.threads:>10} {ranks:>5}  (oversubscribed) results identical to {args.ranks[0]} rank(s)")


if __name__ == "__main__":
    main()
