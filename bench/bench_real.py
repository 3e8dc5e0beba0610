"""Real-scale benchmark: real LULESH 2.0 traces analysed end to end, and a projection to 4,096 x 8.

    .venv/bin/python bench/bench_real.py [--cache DIR] [--pairs NAME ...] [--ranks 1 2] [--repeat 3]
        [--project 8 [16]] [--project-ranks 1] [--fit JSON] [--json] [--quick]

The traces (``bench/data/lulesh-real/``, its README says how they were made): LULESH 2.0
(LLNL) traced by ``pin/parlot-run``, 8 x 2, 27 x 1, 64 x 1, 125 x 1 and 216 x 1 ranks x
threads, fault-free runs and runs with a changed operation, an extra barrier (hang), a
null-pointer write and a rank killed by SIGSEGV (crash); and two good runs of miniGhost 4 x
2 (``bench/data/minighost-order/``), whose call order differs from run to run.  They are
unpacked (``tarfile``) into ``--cache DIR``/runs and reused there.  One more pair comes from the bug zoo:
minilulesh (the project's small LULESH-like program, 8 x 2, a few thousand events) normal
vs livelock (``bench/zoo/traces``), the only livelock the project has traces of.

For each pair (``PAIRS``), ``python -m difftrace_mpi analyze`` runs end to end under
``mpiexec -n R`` for R in --ranks, --repeat times, the rank counts in turn.  Reported,
medians over the repeats:
wall and CPU time of the whole job (CPU: user + system of mpiexec and everything under
it, from wait4), the per-step times (``Results.timings``), the events of both runs
(decoded: entries + returns), the distinct traces (each thread's events hashed as function
names, so per-process id tables do not matter), events per CPU second, the peak RSS of each
MPI rank (``peak_rss_mb_rank*``, the largest over the repeats), the 1 -> R speed-up of the
wall time, and the verdict's kind and first culprit against the expected ones.

--project SIDE ...: the projection to a 4,096 x 8 post-mortem.  A cost model is fitted to
the 1-rank figures of the real faulty pairs (measured in this invocation, or read from the
``--json`` output of an earlier one with --fit):

    CPU s = c0 + a x events + b x events of distinct traces + (l + j + d) x distinct traces
            + t x traces

``a``: the per-event steps (reading, global ids, hashes: every event of both runs); ``b``:
the NLR steps and the divergence context (linear in the events of the distinct traces);
``l``, ``j``, ``d``: the lattices, the JSMs and clustering, the other steps (per distinct
trace); ``c0``: outside the steps (start-up, imports, MPI start, the gathers, HDF5 output).
Each coefficient is the median over the pairs of its steps' seconds over its quantity; the
pairs (FIT_PAIRS) are those of the target's kind: the -s 4 -i 10 crashes, 64 to 216 ranks
(every event decoded, every trace distinct).  ``t`` (per trace, distinct or not) is fitted
on the synthetic runs' residuals.  The same model fitted on all six real faulty pairs and on
the four of the earlier fits (8 to 64 ranks; FITS) is shown beside it, with each 1-rank
row's residual against each fit.  Then a synthetic run of real
shape (``bench/synth_real.py``: a side-SIDE cube of ranks, each with the files of the
64-rank run's rank at the same boundary position; faulty: the centre rank gets
l64x1_segv rank 37's files) is analysed once per --project-ranks, as a check of the model
at 8x (side 8) or 64x (side 16) the ranks, and the model is extrapolated to 4,096 x 8
ranks x threads with LULESH -s 4 -i 10 traces (1.14 M events per trace), in two shapes:
the classes of the synthetic run (64 distinct traces) and a real run (every trace
distinct, as in all the real runs: LULESH seeds its regions with the rank).
``--project-distinct SIDE`` analyses a cube whose every trace is distinct
(``synth_real.py --distinct``), a check of that second shape (not fitted).

--quick: the identical 8 x 2 pair and the livelock pair, 1 and 2 ranks, one repeat, and a
side-5 synthetic cube written but not analysed (the smoke test).
"""
import argparse
import compileall
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchutil import machine_line  # noqa: E402
from difftrace_mpi.readers.parlot import decode_file  # noqa: E402
import synth_real  # noqa: E402
from real_model import (OUTSIDE, RSS_KEY, TARGET_RANKS, TARGET_THREADS, count, fit, full_model,  # noqa: E402
                        group_steps, markdown_fits, markdown_projection, step_groups, terms)

DATA = ROOT / "bench" / "data" / "lulesh-real"
ZOO = ROOT / "bench" / "zoo" / "traces"
VENV_BIN = ROOT / ".venv" / "bin"
TRACE_FILE = re.compile(r"^(.+)\.(\d+)\.(\d+)$")       # <prefix>.<pid>.<tid>: one thread's events
COUNTS_VERSION = 1


@dataclass(frozen=True)
class Pair:
    name: str
    normal: str             # a run of bench/data/lulesh-real, or zoo:<group>/<case>
    faulty: str
    kind: str               # expected verdict: changed, hang, crash, none
    culprit: str            # expected first culprit ("rank 2 thread 0"), or "-"
    what: str


PAIRS = {p.name: p for p in (
    Pair("8x2-wrongop", "l8x2_normal", "l8x2_wrongop", "changed", "rank 2 thread 0",
         "MPI_MAX for MPI_MIN in one MPI_Allreduce (rank 2, step 9)"),
    Pair("8x2-hang", "l8x2_normal", "l8x2_barrier", "hang", "rank 3 thread 0",
         "one extra MPI_Barrier (rank 3, step 11)"),
    Pair("8x2-identical", "l8x2_normal", "l8x2_normal2", "none", "-", "two fault-free runs"),
    Pair("27x1-wrongop", "l27x1_normal", "l27x1_wrongop", "changed", "rank 13 thread 0",
         "MPI_MAX for MPI_MIN (rank 13, step 9)"),
    Pair("64x1-crash", "l64x1_normal", "l64x1_segv", "crash", "rank 37 thread 0",
         "SIGSEGV in LagrangeElements (rank 37, step 5)"),
    Pair("125x1-crash", "l125x1_normal", "l125x1_segv", "crash", "rank 62 thread 0",
         "rank 62 killed by SIGSEGV from outside (step 5)"),
    Pair("216x1-crash", "l216x1_normal", "l216x1_segv", "crash", "rank 129 thread 0",
         "rank 129 killed by SIGSEGV from outside (step 6)"),
    Pair("livelock", "zoo:minilulesh-8/normal", "zoo:minilulesh-8/livelock", "hang", "rank 5 thread 0",
         "minilulesh 8 x 2: rank 5 polls MPI_Iprobe forever (step 4)"),
    Pair("mg4x2-order", "minighost-order/mg4x2_normal", "minighost-order/mg4x2_normal2", "none", "-",
         "miniGhost 4 x 2, two good runs whose call order differs (MPI_Waitany), 100,000 steps"),
)}
DEFAULT_PAIRS = list(PAIRS)
QUICK_PAIRS = ["8x2-identical", "livelock"]


def mpiexec():
    p = VENV_BIN / "mpiexec"
    return str(p) if p.exists() else (shutil.which("mpiexec") or "mpiexec")


# ---- the runs: unpacked, counted -----------------------------------------------------------------

def unpack(cache, name):
    """The directory of run ``name`` (bench/data/lulesh-real/<name>.tar.xz, or
    bench/data/<name>.tar.xz for a name with a folder, unpacked into cache/runs, reused
    while the archive is the same) or of a zoo run."""
    if name.startswith("zoo:"):
        return ZOO / name[4:]
    # a name with a folder is an archive elsewhere under bench/data (minighost-order/...)
    archive = (DATA.parent / f"{name}.tar.xz") if "/" in name else DATA / f"{name}.tar.xz"
    name = Path(name).name
    stamp = f"{archive.stat().st_size} {archive.stat().st_mtime_ns}"
    where = cache / "runs"
    mark = where / f"{name}.unpacked"
    if not (mark.exists() and mark.read_text() == stamp and (where / name).is_dir()):
        shutil.rmtree(where / name, ignore_errors=True)
        where.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            if any(m.name.split("/")[0] != name for m in tar.getmembers()):
                raise RuntimeError(f"{archive} holds files outside {name}/")
            tar.extractall(where, filter="data")
        mark.write_text(stamp)
    return where / name


def _name_keys(info_path):
    """Per function id of one .info (0 = return): a 64-bit hash of the name."""
    lines = [line.rstrip("\r") for line in info_path.read_text(errors="surrogateescape").split("\n")]
    names, block = ["<return>"], False
    for line in lines:
        if line == "+":
            block = True                # the next line is the image path: no id
        elif block:
            block = False
        elif line:
            names.append(line)
    return np.array([int.from_bytes(hashlib.blake2b(n.encode(errors="surrogateescape"), digest_size=8).digest(),
                                    "little") for n in names], dtype=np.uint64)


def count_run(cache, run_dir):
    """{"traces": {"rank.tid": [events, digest of its events as names]}, "events", "bytes"},
    cached in cache/runs/<name>.counts.json."""
    run_dir = Path(run_dir)
    stamp = sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(run_dir))
    key = hashlib.sha1(json.dumps([COUNTS_VERSION, stamp]).encode()).hexdigest()
    cached = cache / "runs" / f"{run_dir.parent.name}_{run_dir.name}.counts.json"
    if cached.exists():
        found = json.loads(cached.read_text())
        if found.get("key") == key:
            return found
    ranks = {p.name[:-len(".rank")]: int(p.read_text().strip()) for p in run_dir.glob("*.rank")}
    traces, nbytes, keys = {}, 0, {}
    for p in sorted(run_dir.iterdir()):
        m = TRACE_FILE.match(p.name)
        if not m:
            continue
        prefix = f"{m.group(1)}.{m.group(2)}"
        if prefix not in keys:
            keys[prefix] = _name_keys(run_dir / f"{prefix}.info")
        values = decode_file(p)[0]
        digest = hashlib.sha1(keys[prefix][values].tobytes()).hexdigest()[:20]
        rank = ranks.get(prefix, int(m.group(2)))
        traces[f"{rank}.{m.group(3)}"] = [int(values.size), digest]
        nbytes += p.stat().st_size
    found = {"key": key, "run": run_dir.name, "traces": traces, "bytes": nbytes,
             "events": sum(e for e, _ in traces.values()),
             "distinct": len({d for _, d in traces.values()})}
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(found))
    return found


def pair_counts(a, b):
    """Events of both runs; distinct traces over both runs and their events."""
    distinct = {}
    for c in (a, b):
        for events, digest in c["traces"].values():
            distinct[digest] = events
    return dict(events=a["events"] + b["events"], traces=len(a["traces"]) + len(b["traces"]),
                distinct=len(distinct), distinct_events=sum(distinct.values()))


# ---- analyze, measured ---------------------------------------------------------------------------

TREE = ROOT                 # the project tree whose difftrace_mpi is measured (--tree)


def run_analyze(normal, faulty, ranks, out_h5, limit_s):
    """One end-to-end analyze under mpiexec -n ranks: (wall s, CPU s, timings, busy, verdict).
    CPU: user + system time of mpiexec and everything under it (wait4's resource usage)."""
    cmd = [mpiexec(), "-n", str(ranks), sys.executable, "-m", "difftrace_mpi", "analyze", str(normal), str(faulty),
           "--out", str(out_h5), "--force", "--diffnlr", "0", "--color", "never"]
    with tempfile.TemporaryFile() as log:
        t0 = time.perf_counter()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(TREE), os.environ.get("PYTHONPATH")])))
        p = subprocess.Popen(cmd, cwd=TREE, stdout=log, stderr=subprocess.STDOUT, env=env)
        pid = 0
        while not pid:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if not pid and time.perf_counter() - t0 > limit_s:
                p.terminate()                   # mpiexec passes it on to the ranks
                p.wait()
                raise RuntimeError(f"{' '.join(cmd)} did not end within {limit_s:g} s (a hang?)")
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            log.seek(0)
            out = log.read().decode(errors="replace")
            raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{out[-3000:]}")
    timings, busy, verdict = read_results(out_h5)
    return wall, usage.ru_utime + usage.ru_stime, timings, busy, verdict


# the measured tree's own store reads its results file (another commit may write another layout)
READ_RESULTS = """
import json, sys
from difftrace_mpi import store
with store.read(sys.argv[1]) as res:
    busy = {}
    if res.busy_by_rank is not None:
        steps, seconds = res.busy_by_rank
        busy = {step: [float(x) for x in seconds[:, i]] for i, step in enumerate(steps)}
    print(json.dumps([dict(res.timings), busy, res.verdict], default=str))
"""


def read_results(out_h5):
    """(timings, busy per step and rank, verdict) of a results file, read by the measured
    tree's own ``store`` (in a process of its own, outside the measured time)."""
    env = dict(os.environ, PYTHONPATH=str(TREE))
    out = subprocess.run([sys.executable, "-c", READ_RESULTS, str(out_h5)], cwd=TREE, env=env, capture_output=True,
                         text=True, check=True).stdout
    return tuple(json.loads(out))


def first_culprit(verdict):
    culprits = (verdict or {}).get("culprits") or []
    return f"rank {culprits[0]['rank']} thread {culprits[0]['thread']}" if culprits else "-"


def bench_pair(name, normal, faulty, counts, ranks, repeat, tmp, limit_s, expected=None, log=None):
    """One pair's medians over ``repeat`` runs as a row per rank count of ``ranks`` (a
    list).  The rank counts take turns within each repeat (1, 2, 1, 2, ...), so a drift of
    the machine's speed during the measurement hits each alike instead of biasing the
    speed-up.  ``log`` gets each row at once too, so a benchmark stopped by a time limit
    still leaves what it measured."""
    runs = {r: [] for r in ranks}
    for _ in range(repeat):
        for r in ranks:
            runs[r].append(run_analyze(normal, faulty, r, Path(tmp) / f"r{r}.h5", limit_s))
    rows = [pair_row(name, counts, r, runs[r], expected) for r in ranks]
    if log:
        for row in rows:
            log(f"  {name} on {row['mpi_ranks']} rank(s): wall {row['wall_s']:.2f} s, CPU {row['cpu_s']:.2f} s, "
                f"peak RSS per rank {max(row['peak_rss_mib_per_rank'], default=0):.0f} MiB at most, "
                f"{row['verdict']}, {row['culprit']}")
    return rows


def pair_row(name, counts, ranks, measured, expected=None):
    """The row of one pair on ``ranks`` ranks from its runs' (wall, CPU, timings, busy,
    verdict): medians, the largest peak RSS per rank, the verdict of the last run."""
    walls, cpus, stages, rss, imbalance = [], [], {}, {}, {}
    verdict = None
    for wall, cpu, timings, busy, verdict in measured:
        walls.append(wall)
        cpus.append(cpu)
        for key, value in timings.items():
            if key.startswith(RSS_KEY):
                rss[int(key[len(RSS_KEY):])] = max(rss.get(int(key[len(RSS_KEY):]), 0.0), value)
            else:
                stages.setdefault(key, []).append(value)
        for step, per_rank in group_steps(busy, lambda a, b: [x + y for x, y in zip(a, b)]).items():
            if ranks > 1 and sum(per_rank) > 0:
                imbalance.setdefault(step, []).append(max(per_rank) / (sum(per_rank) / len(per_rank)))
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    row = dict(pair=name, mpi_ranks=ranks, **counts, wall_s=round(wall, 3), cpu_s=round(cpu, 3),
               walls=[round(w, 3) for w in walls], cpus=[round(c, 3) for c in cpus],
               events_per_cpu_s=round(counts["events"] / cpu),
               peak_rss_mib_per_rank=[round(rss[r], 1) for r in sorted(rss)],
               stages={k: round(statistics.median(v), 4) for k, v in stages.items()},
               busy_max_over_mean={k: round(statistics.median(v), 2) for k, v in imbalance.items()},
               verdict=(verdict or {}).get("kind") or "none", culprit=first_culprit(verdict))
    if expected:
        row["expected"] = expected
        row["as_expected"] = (row["verdict"], row["culprit"]) == expected
    return row


def synth_pair(cache, side, log, distinct=False):
    """Normal and faulty runs of a side^3 cube (bench/synth_real.py; ``distinct``: every
    trace distinct) and their counts."""
    src, segv = unpack(cache, "l64x1_normal"), unpack(cache, "l64x1_segv")
    src_counts, segv_counts = count_run(cache, src), count_run(cache, segv)
    where = cache / "synth"
    name = f"cube{side}" + ("d" if distinct else "")
    runs, counts = {}, {}
    for kind, swap in (("normal", None), ("faulty", (segv, 37))):
        out = where / f"{name}_{kind}"
        manifest_path = where / f"{out.name}.synth.json"
        if not (manifest_path.exists() and out.is_dir()
                and len(list(out.glob("*.rank"))) == side ** 3):
            log(f"writing the synthetic run {out} ({side ** 3} ranks)")
            synth_real.make_cube(src, out, side, swap, distinct=distinct)
        manifest = json.loads(manifest_path.read_text())
        traces = {}
        for rank, (run, src_rank, tids) in enumerate(manifest["sources"]):
            c = segv_counts if run == segv.name else src_counts
            for tid in tids:
                events, digest = c["traces"][f"{src_rank}.{tid}"]
                # the renamed functions make the rank's own variant of its source's trace
                traces[f"{rank}.{tid}"] = [events, f"{digest}:{rank}" if manifest.get("variants") else digest]
        counts[kind] = {"traces": traces, "events": sum(e for e, _ in traces.values())}
        runs[kind] = out
    swap_to = json.loads((where / f"{name}_faulty.synth.json").read_text())["swap"][2]
    return runs, pair_counts(counts["normal"], counts["faulty"]), f"rank {swap_to} thread 0"


def target_quantities(cache, shape, synth):
    """Quantities of a 4,096 x 8 LULESH normal vs crash pair at the 64 x 1 set's size per rank
    (-s 4 -i 10): the real 64 x 1 pair's events per rank, times 4,096 ranks.  OpenMP splits a
    rank's element loops among its threads, so its events stay about the same with 8 threads
    (the 8 x 2 set's two threads have 7.5 M and 6.9 M events each).  shape "classes": the
    distinct traces of the synthetic run; "real": every trace distinct (as in every real run:
    LULESH seeds its regions with the rank): the 11.every settings then have 32,768 classes
    per run, over the class cap (--max-classes), and get neither lattices nor JSMs."""
    pair = pair_counts(count_run(cache, unpack(cache, "l64x1_normal")), count_run(cache, unpack(cache, "l64x1_segv")))
    events = pair["events"] / 64 * TARGET_RANKS
    traces = 2 * TARGET_RANKS * TARGET_THREADS
    if shape == "classes":
        return dict(events=events, traces=traces, distinct=synth["distinct"], distinct_events=synth["distinct_events"])
    return dict(events=events, traces=traces, distinct=traces, distinct_events=events, over_class_cap=True)


# ---- output --------------------------------------------------------------------------------------


def markdown_runs(runs):
    out = ["| run | traces | distinct traces | events | trace bytes |", "|---|---|---|---|---|"]
    for name, c in runs.items():
        traces = c["traces"] if isinstance(c["traces"], int) else len(c["traces"])
        out.append(f"| {name} | {traces} | {c['distinct']} | {count(c['events'])} | {c['bytes']:,} |")
    return out


def markdown_rows(rows):
    out = ["| pair | MPI ranks | events (both runs) | distinct traces | wall s | CPU s | events per CPU s "
           "| peak RSS per rank MiB | speed-up 1 -> R | verdict, first culprit | expected? |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    walls = {(r["pair"], r["mpi_ranks"]): r["wall_s"] for r in rows}
    for r in rows:
        one = walls.get((r["pair"], 1))
        speedup = f"{one / r['wall_s']:.2f}x" if one and r["mpi_ranks"] != 1 else "-"
        ok = "yes" if r.get("as_expected") else f"no: {r['expected'][0]}, {r['expected'][1]}" if "expected" in r else ""
        out.append(f"| {r['pair']} | {r['mpi_ranks']} | {count(r['events'])} | {r['distinct']} of {r['traces']} "
                   f"| {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {count(r['events_per_cpu_s'])} "
                   f"| {', '.join(f'{x:,.0f}' for x in r['peak_rss_mib_per_rank'])} | {speedup} "
                   f"| {r['verdict']}, {r['culprit']} | {ok} |")
    return out


def markdown_steps(rows):
    grouped = [step_groups(r["stages"], r["wall_s"]) for r in rows]
    totals = {}
    for g in grouped:
        for k, v in g.items():
            totals[k] = max(totals.get(k, 0.0), v)
    steps = [k for k in sorted(totals, key=totals.get, reverse=True) if k != OUTSIDE and totals[k] >= 0.05]
    out = ["Steps, seconds on the root (medians, summed over the grid's settings; in brackets on more than one "
           "rank: the busiest rank's own work over the mean rank's, 1.00 = balanced; steps under 0.05 s "
           "everywhere are left out):", "",
           "| step | " + " | ".join(f"{r['pair']}, {r['mpi_ranks']}" for r in rows) + " |",
           "|---|" + "---|" * len(rows)]
    for step in steps + [OUTSIDE]:
        cells = []
        for r, g in zip(rows, grouped):
            spread = r["busy_max_over_mean"].get(step)
            cells.append(f"{g.get(step, 0.0):.2f}" + (f" ({spread:.2f})" if spread is not None else ""))
        out.append(f"| {step} | " + " | ".join(cells) + " |")
    return out


def render(report):
    """The tables of an earlier run's JSON report, the model refitted by this version."""
    rows, synth = report["analyze"], report.get("synthetic", [])
    out = markdown_runs(report["runs"]) + [""] + markdown_rows(rows) + [""] + (markdown_steps(rows) if rows else [])
    if report.get("projection"):
        keys = ("events", "traces", "distinct", "distinct_events", "capped_lattices", "over_class_cap")
        targets = [(p["name"], {k: p[k] for k in keys if k in p}) for p in report["projection"]]
        checks = synth + report.get("synthetic_distinct", [])
        out += ["", *markdown_projection(full_model(rows, synth), checks, targets),
                "", *markdown_fits(rows, synth, checks, targets)]
    print("\n".join(out))


def load_report(path):
    """The JSON report of an earlier run: a file of it, or that run's whole output (tables first)."""
    text = Path(path).read_text()
    return json.loads(text if text.lstrip().startswith("{") else text[text.index("\n{") + 1:])


# ---- main ----------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, help="where the runs are unpacked and counted, and the synthetic "
                                               "runs written; reused (default: a temporary directory)")
    ap.add_argument("--pairs", nargs="*", choices=sorted(PAIRS), help=f"pairs (default: all: {' '.join(PAIRS)})")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2], help="MPI ranks of analyze (default: 1 2)")
    ap.add_argument("--repeat", type=int, default=3, help="analyze runs per measurement; medians (default 3)")
    ap.add_argument("--project", type=int, nargs="*", default=[], metavar="SIDE",
                    help="synthetic cubes to analyse for the projection (8: 512 ranks; 16: 4,096)")
    ap.add_argument("--project-distinct", type=int, nargs="*", default=[], metavar="SIDE",
                    help="synthetic cubes with every trace distinct (synth_real.py --distinct), analysed as a "
                         "check of the every-trace-distinct projection (not fitted)")
    ap.add_argument("--project-ranks", type=int, nargs="+", default=[1],
                    help="MPI ranks of analyze on the synthetic runs, one run each (default: 1)")
    ap.add_argument("--fit", type=Path, help="the --json output of an earlier run (the whole output or its JSON): "
                                             "its 1-rank rows fit the model "
                                             "(instead of the pairs measured now)")
    ap.add_argument("--analyze-limit", type=float, default=3600,
                    help="seconds one analyze may take before it is ended as hung (default 3600; --quick: 60)")
    ap.add_argument("--tree", type=Path, default=ROOT,
                    help="the project tree whose analyzer runs (its kernels built in place), e.g. a `git archive` "
                         "of a commit, for figures of that commit while the working tree changes (default: this one)")
    ap.add_argument("--render", type=Path, metavar="OUTPUT",
                    help="print the tables of an earlier run's output (with --json) again, measuring nothing")
    ap.add_argument("--json", action="store_true", help="print the results as JSON after the tables")
    ap.add_argument("--quick", action="store_true", help="two small pairs, one repeat: the smoke test")
    a = ap.parse_args(argv)
    if a.repeat < 1 or min(a.ranks) < 1 or min(a.project_ranks) < 1 or any(s < 3 for s in a.project +
                                                                             a.project_distinct):
        ap.error("--repeat and --ranks must be at least 1, --project sides at least 3")
    names = a.pairs if a.pairs is not None else (QUICK_PAIRS if a.quick else DEFAULT_PAIRS)
    repeat = 1 if a.quick else a.repeat
    limit_s = min(a.analyze_limit, 60) if a.quick else a.analyze_limit
    global TREE
    TREE = a.tree.resolve()
    start = time.monotonic()
    log = lambda message: print(f"[{time.monotonic() - start:7.1f} s] {message}", file=sys.stderr, flush=True)  # noqa: E731
    if a.render:
        render(load_report(a.render))
        return
    print(machine_line())
    print(f"analyzer: {TREE}")
    # the analyzer's bytecode compiled before any run is timed, as an installed tool has it:
    # where the environment says PYTHONDONTWRITEBYTECODE every run would compile its
    # changed modules again (0.05 CPU s of a 2 s run, seen in a profile)
    compileall.compile_dir(str(TREE / "difftrace_mpi"), quiet=1)
    with tempfile.TemporaryDirectory(prefix="bench-real-") as tmp:
        cache = (a.cache or Path(tmp) / "cache").resolve()
        cache.mkdir(parents=True, exist_ok=True)
        runs, rows = {}, []
        for name in names:
            p = PAIRS[name]
            dirs = [unpack(cache, r) for r in (p.normal, p.faulty)]
            counts = []
            for run, d in zip((p.normal, p.faulty), dirs):
                if run not in runs:
                    log(f"counting {run}")
                    runs[run] = count_run(cache, d)
                counts.append(runs[run])
            q = pair_counts(*counts)
            log(f"analyze {name} ({p.normal} vs {p.faulty}) on {' and '.join(map(str, a.ranks))} rank(s) in turn, "
                f"{repeat} time(s)")
            rows.extend(bench_pair(name, *dirs, q, a.ranks, repeat, tmp, limit_s, (p.kind, p.culprit), log))
        report = {"runs": {k: {x: v[x] for x in ("run", "events", "bytes", "distinct")} | {"traces": len(v["traces"])}
                           for k, v in runs.items()}, "analyze": rows}
        out = markdown_runs(runs) + [""] + markdown_rows(rows) + [""] + (markdown_steps(rows) if rows else [])
        sides = a.project + ([5] if a.quick else [])
        if sides or a.project_distinct:
            fit_rows = load_report(a.fit)["analyze"] if a.fit else rows
            if not a.quick:
                fit(fit_rows)                   # no real faulty pair to fit on: say so before the cubes
            synth_rows, targets = [], []
            for side in sides:
                dirs, q, culprit = synth_pair(cache, side, log)
                if a.quick:                     # written and counted, not analysed
                    report.setdefault("synthetic", []).append(dict(side=side, **q))
                    continue
                for ranks in a.project_ranks:
                    log(f"analyze the synthetic cube{side} normal vs faulty on {ranks} rank(s), once")
                    synth_rows.extend(bench_pair(f"synthetic {side}^3 x 1 normal vs crash", dirs["normal"],
                                                 dirs["faulty"], q, [ranks], 1, tmp, a.analyze_limit,
                                                 ("crash", culprit), log))
                shape = f"{TARGET_RANKS:,} x {TARGET_THREADS}"
                if not targets:
                    targets = [(f"projection {shape}, the synthetic run's {q['distinct']} distinct traces",
                                target_quantities(cache, "classes", q)),
                               (f"projection {shape}, every trace distinct (real LULESH), 11.every over the class cap",
                                target_quantities(cache, "real", q))]
            distinct_rows = []
            for side in a.project_distinct:
                dirs, q, culprit = synth_pair(cache, side, log, distinct=True)
                for ranks in a.project_ranks:
                    log(f"analyze the synthetic cube{side}d (every trace distinct) on {ranks} rank(s), once")
                    distinct_rows.extend(bench_pair(f"synthetic {side}^3 x 1, every trace distinct, normal vs crash",
                                                    dirs["normal"], dirs["faulty"], q, [ranks], 1, tmp,
                                                    a.analyze_limit, ("crash", culprit), log))
            synth = (load_report(a.fit).get("synthetic", []) if a.fit else []) + synth_rows
            model = None if a.quick else full_model(fit_rows, synth)
            if model:
                out += ["", *markdown_projection(model, synth_rows + distinct_rows, targets),
                        "", *markdown_fits(fit_rows, synth, synth_rows + distinct_rows, targets)]
                report.update(model=model, synthetic=synth_rows, synthetic_distinct=distinct_rows,
                              projection=[dict(name=n, **q, terms=terms(model, q), low=terms(model, q, "lo")["total"],
                                               high=terms(model, q, "hi")["total"]) for n, q in targets])
    print("\n".join(out))
    if a.json:
        print(json.dumps(report, indent=1))


if __name__ == "__main__":
    try:
        main()
    except (RuntimeError, subprocess.CalledProcessError) as exc:     # a run failed or hung: say which, no traceback
        sys.exit(f"bench_real: error: {exc}")
