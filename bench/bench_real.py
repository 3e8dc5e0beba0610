"""Real-scale benchmark: the LULESH-like mini-app traced by pin/ and analysed end to end (issue 14).

    .venv/bin/python bench/bench_real.py [--cache DIR] [--sets lulesh-8x2 lulesh-27x1]
        [--ranks 1 2] [--repeat 3] [--overhead-repeat 3] [--tracer DIR] [--json] [--quick]

For each trace set (``SETS``: examples/programs/minilulesh.c built at -O1 -g with
-finstrument-functions, traced by ``parlot-run``): a normal run, a second normal run
(``normal2``) and a faulty run (one rank skips one force-exchange MPI_Isend late in the run:
its neighbour hangs in MPI_Wait; the hung job gets SIGTERM once its trace files have stopped
changing).  The sets are written under ``--cache DIR`` with a ``set.json`` manifest
(arguments, commands, events and bytes per run) and reused when the manifest matches.

Then ``python -m difftrace_mpi analyze`` runs end to end under ``mpiexec -n R`` for R in
--ranks, on normal vs faulty and normal vs normal2, --repeat times each.  Reported, medians
over the repeats: wall and CPU time of the whole job (CPU: user + system of mpiexec and all
its descendants, from wait4), the per-step times the analysis records (``Results.timings``),
the events of both runs (decoded from the trace files: calls and returns), events/s per core
(events / wall / R), the peak RSS of each MPI rank (``peak_rss_mb_rank*``, the largest over
the repeats), the 1 -> 2 rank speed-up of the wall time, and the verdict's kind and first
culprit (a sanity check: the faulty rank's neighbour or the rank itself, hang).  Last, the
tracer's overhead: the same binary run untraced and traced, alternating, the medians of
--overhead-repeat wall times of mpiexec (start-up included).

--quick: a 2-rank x 2-thread set of a few thousand events, one repeat (the smoke test).
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchutil import machine_line  # noqa: E402
from difftrace_mpi import store  # noqa: E402
from difftrace_mpi.readers.parlot import decode_file  # noqa: E402

MINILULESH = ROOT / "examples" / "programs" / "minilulesh.c"
VENV_BIN = ROOT / ".venv" / "bin"
TRACE_FILE = re.compile(r"^.+\.\d+\.\d+$")       # <prefix>.<pid>.<tid>: one thread's events
RUNS = ("normal", "normal2", "faulty")
PAIRS = (("normal", "faulty"), ("normal", "normal2"))
RSS_KEY = "peak_rss_mb_rank"
OUTSIDE = "outside the steps (start-up, imports, output)"
SETTING_WORD = re.compile(r"^(\d+\.\w+\.K\d+|sing\.\w+|doub\.\w+)$")     # 11.mpi.K10, doub.log10


@dataclass(frozen=True)
class TraceSet:
    """One configuration of the mini-app and its injected bug (minilulesh's options)."""
    name: str
    ranks: int
    threads: int
    size: int               # elements per edge of each rank's block
    iters: int              # time steps
    bug: str                # a hang: the job is ended once its traces stop changing
    bug_rank: int
    bug_iter: int           # 0-based time step
    quiet_s: float          # trace files unchanged this long (all ranks started): hung

    def args(self):
        return ("--size", str(self.size), "--iters", str(self.iters))

    def bug_args(self):
        return ("--bug", self.bug, "--bug-rank", str(self.bug_rank), "--bug-iter", str(self.bug_iter))


# nosend: the bug rank's first neighbour (-x +x -y +y -z +z order) waits forever for a force
# message; sizes chosen for >= 100 M events per run (8 x 2 threads: 32^3 elements per rank
# give about 0.53 M events per time step; 27 x 1: about 1.8 M)
SETS = {s.name: s for s in (
    TraceSet("lulesh-8x2", 8, 2, 32, 220, "nosend", 5, 200, 15.0),
    TraceSet("lulesh-27x1", 27, 1, 32, 64, "nosend", 13, 58, 15.0),
    TraceSet("quick-2x2", 2, 2, 4, 8, "nosend", 1, 6, 2.0),
)}
QUICK_SET = "quick-2x2"


def run_env(threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="passive")
    for key in ("PARLOT_DIR", "PARLOT_MPI_ARGS", "PARLOT_DISABLE", "PARLOT_OUT", "PARLOT_RUN"):
        env.pop(key, None)
    return env


def mpiexec():
    p = VENV_BIN / "mpiexec"
    return str(p) if p.exists() else (shutil.which("mpiexec") or "mpiexec")


def build(cache, tracer):
    """The tracer (make -C tracer) and minilulesh at -O1 -g into cache/build; the binary."""
    subprocess.run(["make", "-s", "-C", str(tracer)], check=True)
    exe = cache / "build" / "minilulesh"
    subprocess.run(["make", "-s", "-C", str(MINILULESH.parent), f"BUILD={cache / 'build'}", "CFLAGS=-O1 -g",
                    str(exe)], check=True)
    return exe


def _snapshot(d):
    try:
        return sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(d))
    except FileNotFoundError:
        return None


def descendants(pid):
    """Process ids under ``pid`` (from /proc)."""
    children = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            out.append(child)
            todo.append(child)
    return out


def _state(pid):
    """The process's state letter (Z: exited, not yet reaped), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def end_ranks(p, exe):
    """End a hung job the way a user's SIGTERM would, without losing end records: the
    launcher's processes are stopped while every rank gets SIGTERM and its tracer records
    the signal and completes its files, then continued.  (A SIGTERM to mpiexec alone lets
    hydra SIGKILL the ranks still busy with theirs once the first one has died: 16 of 27
    .end files were lost that way on the loaded 2-core VM.)"""
    ranks, launcher = [], []
    for pid in descendants(p.pid):
        try:
            (ranks if os.readlink(f"/proc/{pid}/exe") == str(exe) else launcher).append(pid)
        except OSError:
            pass                                # already gone
    for pid in [p.pid, *launcher]:
        _signal(pid, signal.SIGSTOP)
    try:
        for pid in ranks:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and any(_state(pid) not in (None, "Z") for pid in ranks):
            time.sleep(0.2)
    finally:
        for pid in [p.pid, *launcher]:
            _signal(pid, signal.SIGCONT)
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)           # mpiexec passes it on to what is left


def _signal(pid, signum):
    try:
        os.kill(pid, signum)
    except OSError:
        pass                                    # already gone


def trace_run(exe, tracer, ts, out_dir, bug):
    """Trace one run of the mini-app into out_dir (fresh).  A run with the bug must hang: it
    gets SIGTERM once every rank has started and its trace files have not changed for
    ts.quiet_s seconds (``end_ranks``).  Returns (wall seconds, command, stdout)."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    cmd = [mpiexec(), "-n", str(ts.ranks), str(tracer / "parlot-run"), "-q", "-d", str(out_dir), str(exe),
           *ts.args(), *(ts.bug_args() if bug else ())]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=run_env(ts.threads))
    if bug:
        last, since = None, time.monotonic()
        while p.poll() is None:
            time.sleep(0.5)
            snap, now = _snapshot(out_dir), time.monotonic()
            if snap != last:
                last, since = snap, now
            elif sum(1 for name, _, _ in snap or () if name.endswith(".rank")) >= ts.ranks and now - since >= ts.quiet_s:
                end_ranks(p, exe)
                break
    out, err = p.communicate()
    seconds = time.monotonic() - t0
    if bug and p.returncode == 0:
        raise RuntimeError(f"the faulty run completed instead of hanging: {' '.join(cmd)}\n{out}")
    if not bug and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{err[-2000:]}")
    return seconds, cmd, "\n".join(line for line in out.splitlines() if line.startswith("minilulesh:"))


def count_run(d):
    """(events, bytes, thread trace files) of one run directory."""
    events = nbytes = files = 0
    for p in sorted(Path(d).iterdir()):
        if TRACE_FILE.match(p.name):
            nbytes += p.stat().st_size
            events += int(decode_file(p)[0].size)
            files += 1
    return events, nbytes, files


def trace_set(cache, ts, tracer, log):
    """The set's manifest, tracing it into cache/<name> unless a matching one is there."""
    where = cache / ts.name
    manifest = where / "set.json"
    if manifest.exists():
        found = json.loads(manifest.read_text())
        if found.get("set") == asdict(ts) and all((where / r).is_dir() for r in RUNS):
            log(f"reusing {where}")
            return found
        log(f"{manifest} is for other arguments: tracing again")
    exe = build(cache, tracer)
    where.mkdir(parents=True, exist_ok=True)
    runs = {}
    for run in RUNS:
        log(f"tracing {ts.name}/{run} ({ts.ranks} ranks x {ts.threads} threads)")
        seconds, cmd, out = trace_run(exe, tracer, ts, where / run, run == "faulty")
        events, nbytes, files = count_run(where / run)
        runs[run] = dict(dir=str(where / run), events=events, bytes=nbytes, files=files, seconds=round(seconds, 2),
                         command=f"OMP_NUM_THREADS={ts.threads} " + " ".join(cmd), output=out)
    if runs["normal"]["output"] != runs["normal2"]["output"]:
        raise RuntimeError(f"the two normal runs printed different results: {runs['normal']['output']!r} "
                           f"and {runs['normal2']['output']!r}")
    found = {"set": asdict(ts), "tracer": str(tracer), "binary": str(exe), "runs": runs}
    tmp = manifest.with_suffix(".tmp")
    tmp.write_text(json.dumps(found, indent=1))
    os.replace(tmp, manifest)
    return found


def run_analyze(normal, faulty, ranks, out_h5, limit_s):
    """One end-to-end analyze under mpiexec -n ranks: (wall s, CPU s, timings, busy, verdict).
    CPU: user + system time of mpiexec and everything under it (wait4's resource usage)."""
    cmd = [mpiexec(), "-n", str(ranks), sys.executable, "-m", "difftrace_mpi", "analyze", str(normal), str(faulty),
           "--out", str(out_h5), "--force", "--diffnlr", "0", "--color", "never"]
    with tempfile.TemporaryFile() as log:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
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
    with store.read(str(out_h5)) as res:
        busy = {}
        if res.busy_by_rank is not None:
            steps, seconds = res.busy_by_rank
            busy = {step: [float(x) for x in seconds[:, i]] for i, step in enumerate(steps)}
        return wall, usage.ru_utime + usage.ru_stime, dict(res.timings), busy, res.verdict


def first_culprit(verdict):
    culprits = (verdict or {}).get("culprits") or []
    return f"rank {culprits[0]['rank']} thread {culprits[0]['thread']}" if culprits else "-"


def bench_pair(manifest, pair, ranks, repeat, tmp, limit_s):
    runs = manifest["runs"]
    walls, cpus, stages, rss, imbalance = [], [], {}, {}, {}
    verdict = None
    for i in range(repeat):
        wall, cpu, timings, busy, verdict = run_analyze(runs[pair[0]]["dir"], runs[pair[1]]["dir"], ranks,
                                                        Path(tmp) / f"r{ranks}.h5", limit_s)
        walls.append(wall)
        cpus.append(cpu)
        for key, value in timings.items():
            if key.startswith(RSS_KEY):
                rss[int(key[len(RSS_KEY):])] = max(rss.get(int(key[len(RSS_KEY):]), 0.0), value)
            else:
                stages.setdefault(key, []).append(value)
        for name, per_rank in group_steps(busy, lambda a, b: [x + y for x, y in zip(a, b)]).items():
            if ranks > 1 and sum(per_rank) > 0:
                imbalance.setdefault(name, []).append(max(per_rank) / (sum(per_rank) / len(per_rank)))
    events = runs[pair[0]]["events"] + runs[pair[1]]["events"]
    wall = statistics.median(walls)
    return dict(set=manifest["set"]["name"], pair=f"{pair[0]} vs {pair[1]}", mpi_ranks=ranks, events=events,
                wall_s=round(wall, 3), cpu_s=round(statistics.median(cpus), 3), walls=[round(w, 3) for w in walls],
                events_per_s_per_core=round(events / wall / ranks),
                events_per_cpu_s=round(events / statistics.median(cpus)),
                peak_rss_mib_per_rank=[round(rss[r], 1) for r in sorted(rss)],
                stages={k: round(statistics.median(v), 3) for k, v in stages.items()},
                busy_max_over_mean={k: round(statistics.median(v), 2) for k, v in imbalance.items()},
                verdict=(verdict or {}).get("kind"), culprit=first_culprit(verdict))


def overhead(manifest, tracer, repeat, tmp):
    """Median wall seconds of mpiexec untraced and traced (same binary, alternating)."""
    ts = manifest["set"]
    plain, traced = [], []
    for i in range(repeat):
        for dest, prefix in ((plain, []), (traced, [str(tracer / "parlot-run"), "-q", "-d", str(Path(tmp) / "ovh")])):
            cmd = [mpiexec(), "-n", str(ts["ranks"]), *prefix, manifest["binary"],
                   "--size", str(ts["size"]), "--iters", str(ts["iters"])]
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, env=run_env(ts["threads"]))
            dest.append(time.perf_counter() - t0)
            shutil.rmtree(Path(tmp) / "ovh", ignore_errors=True)
    p, t = statistics.median(plain), statistics.median(traced)
    events = manifest["runs"]["normal"]["events"]
    return dict(set=ts["name"], untraced_s=round(p, 3), traced_s=round(t, 3), ratio=round(t / p, 2),
                ns_per_event=round((t - p) / events * 1e9, 1), repeat=repeat)


def group_steps(values, add):
    """Per-step values combined over the grid's settings: "NLR 11.mpi.K10" and
    "NLR 11.every.K10" are "NLR"."""
    groups = {}
    for key, value in values.items():
        name = " ".join(w for w in key.split() if not SETTING_WORD.match(w))
        groups[name] = add(groups[name], value) if name in groups else value
    return groups


def step_groups(stages, wall):
    """Step seconds summed over the grid's settings, and what the job spent outside the
    steps (start-up, imports, output)."""
    groups = group_steps(stages, lambda a, b: a + b)
    groups[OUTSIDE] = max(0.0, wall - sum(stages.values()))
    return groups


def count(n):
    """12,345 or 116.35 M."""
    return f"{n / 1e6:.2f} M" if n >= 1e6 else f"{n:,.0f}"


def markdown(sets, rows, overheads):
    out = ["| set | ranks x threads | size, steps | run | events | trace bytes | traced in s |",
           "|---|---|---|---|---|---|---|"]
    for m in sets:
        ts = m["set"]
        for run in RUNS:
            r = m["runs"][run]
            bug = f" ({ts['bug']} on rank {ts['bug_rank']}, step {ts['bug_iter']})" if run == "faulty" else ""
            out.append(f"| {ts['name']} | {ts['ranks']} x {ts['threads']} | {ts['size']}^3, {ts['iters']} | {run}{bug} "
                       f"| {count(r['events'])} | {r['bytes']:,} | {r['seconds']:.1f} |")
    out += ["", "| set | pair | MPI ranks | events (both runs) | wall s | CPU s | events/s per core "
                "| events per CPU s | peak RSS per rank MiB | speed-up 1 -> R | verdict |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    walls = {(r["set"], r["pair"], r["mpi_ranks"]): r["wall_s"] for r in rows}
    for r in rows:
        one = walls.get((r["set"], r["pair"], 1))
        speedup = f"{one / r['wall_s']:.2f}x" if one and r["mpi_ranks"] != 1 else "-"
        out.append(f"| {r['set']} | {r['pair']} | {r['mpi_ranks']} | {count(r['events'])} | {r['wall_s']:.2f} "
                   f"| {r['cpu_s']:.2f} | {count(r['events_per_s_per_core'])} | {count(r['events_per_cpu_s'])} "
                   f"| {', '.join(f'{x:.0f}' for x in r['peak_rss_mib_per_rank'])} | {speedup} "
                   f"| {r['verdict']}, {r['culprit']} |")
    for name in dict.fromkeys(r["set"] for r in rows):
        mine = [r for r in rows if r["set"] == name]
        grouped = [step_groups(r["stages"], r["wall_s"]) for r in mine]
        steps = [k for k in dict.fromkeys(k for g in grouped for k in g) if k != OUTSIDE] + [OUTSIDE]
        out += ["", f"Steps of {name}, seconds (medians; each step's time on the root, waits included; "
                    "summed over the grid's settings; in brackets on more than one rank: the busiest rank's "
                    "own work in the step over the mean rank's, 1.00 = balanced):", "",
                "| step | " + " | ".join(f"{r['pair']}, {r['mpi_ranks']} rank(s)" for r in mine) + " |",
                "|---|" + "---|" * len(mine)]
        for step in steps:
            cells = []
            for r, g in zip(mine, grouped):
                spread = r["busy_max_over_mean"].get(step)
                cells.append(f"{g.get(step, 0.0):.2f}" + (f" ({spread:.2f})" if spread is not None else ""))
            out.append(f"| {step} | " + " | ".join(cells) + " |")
    if overheads:
        out += ["", "| set | untraced s | traced s | overhead | ns per event |", "|---|---|---|---|---|"]
        for o in overheads:
            out.append(f"| {o['set']} | {o['untraced_s']:.2f} | {o['traced_s']:.2f} | {o['ratio']:.2f}x "
                       f"| {o['ns_per_event']:.0f} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, help="directory of the trace sets: reused when their set.json matches "
                                               "(default: a temporary directory, removed at the end)")
    ap.add_argument("--sets", nargs="+", choices=sorted(SETS), help="trace sets (default: lulesh-8x2 lulesh-27x1)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2], help="MPI ranks of analyze (default: 1 2)")
    ap.add_argument("--repeat", type=int, default=3, help="analyze runs per measurement; medians (default 3)")
    ap.add_argument("--overhead-repeat", type=int, default=3,
                    help="untraced and traced runs of the mini-app for the tracer's overhead (0: skip; default 3)")
    ap.add_argument("--tracer", type=Path, default=ROOT / "pin",
                    help="directory with parlot-run and libparlot.so (default: pin/)")
    ap.add_argument("--analyze-limit", type=float, default=1800,
                    help="seconds one analyze may take before it is ended as hung (default 1800; --quick: 60)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON after the table")
    ap.add_argument("--quick", action="store_true", help="a tiny set, one repeat: the smoke test")
    a = ap.parse_args(argv)
    if a.repeat < 1 or a.overhead_repeat < 0 or min(a.ranks) < 1:
        ap.error("--repeat and --ranks must be at least 1, --overhead-repeat at least 0")
    names = a.sets or ([QUICK_SET] if a.quick else ["lulesh-8x2", "lulesh-27x1"])
    repeat, overhead_repeat = (1, min(a.overhead_repeat, 1)) if a.quick else (a.repeat, a.overhead_repeat)
    limit_s = min(a.analyze_limit, 60) if a.quick else a.analyze_limit
    tracer = a.tracer.resolve()
    start = time.monotonic()
    log = lambda message: print(f"[{time.monotonic() - start:7.1f} s] {message}", file=sys.stderr, flush=True)  # noqa: E731
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="bench-real-") as tmp:
        cache = (a.cache or Path(tmp) / "sets").resolve()
        cache.mkdir(parents=True, exist_ok=True)
        sets = [trace_set(cache, SETS[name], tracer, log) for name in names]
        rows, overheads = [], []
        for m in sets:
            for pair in PAIRS:
                for ranks in a.ranks:
                    log(f"analyze {m['set']['name']} {pair[0]} vs {pair[1]} on {ranks} rank(s), {repeat} time(s)")
                    rows.append(bench_pair(m, pair, ranks, repeat, tmp, limit_s))
            if overhead_repeat:
                log(f"tracer overhead on {m['set']['name']}, {overhead_repeat} time(s)")
                overheads.append(overhead(m, tracer, overhead_repeat, tmp))
    print(markdown(sets, rows, overheads))
    if a.json:
        print(json.dumps({"sets": sets, "analyze": rows, "overhead": overheads}, indent=1))


if __name__ == "__main__":
    try:
        main()
    except (RuntimeError, subprocess.CalledProcessError) as exc:     # a run failed or hung: say which, no traceback
        sys.exit(f"bench_real: error: {exc}")
