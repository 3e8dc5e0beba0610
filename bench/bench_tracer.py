"""Tracer overhead: the example programs run untraced and traced by pin/parlot-run.

    .venv/bin/python bench/bench_tracer.py [--repeat 5] [--json] [--only minilulesh ...]

For each program (sized to run about a second on two cores, and to use at most as many
ranks x threads as there are cores): the median and the minimum, over --repeat alternating
runs, of the program's own run time (rank 0's MPI_Wtime from after MPI_Init to the end of the
work; so mpiexec's start-up is not counted), untraced and traced; their ratio (ParLOT's
"tracing overhead"; on a shared machine the ratio of the minima is the steadier figure); the
bytes of trace written per second and per core (ParLOT's "tracing bandwidth"); the events
recorded per second; and the compression ratio (2 bytes per event / bytes written).  A last
single-thread microbenchmark (10^7 calls of a two-level call chain, traced with -e: every call
recorded) gives the cost of one event.  "Traced" is the tracer's default (automatic leaves:
functions called more than 10000 times in a row without a callee are counted, not recorded).

minilulesh (the LULESH-like mini-app, -O1, traced by default) prints no run time of its own:
it is timed from outside, as the wall time of the whole mpiexec command, and its start-up
(mpiexec, MPI_Init, mesh set-up) is taken out by also timing a one-step run the same way, so
the figure is the time-step loop's: T(N steps) - T(1 step), median of --repeat alternating
runs.  The CPU time of the processes (user + system, the same difference) is reported beside
it: on a shared machine it varies less than the wall time, as long as the ranks do not wait
for each other (one rank).  The minilulesh_excl and minilulesh_depth rows trace the same run
with a filter (parlot-run -N / -D), to show what a filter saves.

ParLOT (Pin, main image, NPB class C) reports about 1.9x-2.7x overhead and 56 kB/s per core.

--lulesh EXE measures a real LULESH 2.0 binary instead (built by you with -finstrument-functions;
pin/README.md says how): the same binary run alternately untraced, traced (default options),
traced with the leaf list (parlot-run -l, the list made once by a -P probe run before the
measured runs), traced recording every call (parlot-run -e: no automatic leaves, the tracer
before issue 38) and, with --compare-lib, traced by another libparlot.so; medians of --repeat
runs of LULESH's own "Elapsed time" (its time-step loop), of the CPU time (user + system) and
of the wall time of the whole launch.  "traced" is the default: automatic leaves.
"""
import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples" / "programs"))

import scenarios  # noqa: E402
from difftrace_mpi.readers.parlot import decode_file  # noqa: E402

# name, program, ranks, threads, arguments, what it shows[, parlot-run options]
CONFIGS = (
    ("oddeven", "oddeven", 2, 1, ("--block", "60000"),
     "the paper's odd/even sort, large blocks: few calls, long loops"),
    ("halo", "halo", 2, 1, ("--cells", "100000", "--iters", "3000", "--check-every", "10"),
     "stencil with nonblocking halo exchange and Allreduce: MPI-bound; plain names (parlot-run -A)", ("-A",)),
    ("halo_args", "halo", 2, 1, ("--cells", "100000", "--iters", "3000", "--check-every", "10"),
     "the same with MPI events named with their arguments (the default since the verdict)", ()),
    ("ilcs", "ilcs", 1, 2, ("--cities", "64", "--seeds", "300", "--rounds", "40", "--patience", "1000"),
     "ILCS-like search, 2-opt step inlined: moderate call rate"),
    ("ilcs_calls", "ilcs_calls", 1, 2, ("--cities", "64", "--seeds", "300", "--rounds", "40", "--patience", "1000"),
     "the same with the 2-opt gain as a function: a call every few ns (worst case)"),
    ("minilulesh", "minilulesh", 2, 1, ("--size", "4", "--iters", "10000"),
     "LULESH-like mini-app, 4^3 elements per rank (LULESH's small-block regime: per step a face "
     "exchange, an Allreduce and about 160 events in some 25 us), all events"),
    ("minilulesh_s8", "minilulesh", 2, 1, ("--size", "8", "--iters", "2000"),
     "the same with 8^3 elements per rank (more compute per message), all events"),
    ("minilulesh_1rank", "minilulesh", 1, 1, ("--size", "4", "--iters", "10000"),
     "one rank (no neighbour to wait for: the steadiest figure on a shared machine)"),
    ("minilulesh_excl", "minilulesh", 2, 1, ("--size", "4", "--iters", "10000"),
     "as minilulesh, the hottest function left out (CalcElemVolume: 40% of the events)",
     ("-N", "^CalcElemVolume$")),
    ("minilulesh_depth", "minilulesh", 2, 1, ("--size", "4", "--iters", "10000"),
     "as minilulesh, calls down to nesting depth 4 only", ("-D", "4")),
)

# programs timed from outside (they print no run time): the option that sets their number of
# steps, set to 1 for the start-up run whose time is subtracted
STEPS_ARG = {"minilulesh": "--iters"}

TIME_RE = re.compile(r" in ([0-9.]+) s$", re.M)

MICRO = r"""
#include <stdio.h>
#include <time.h>
__attribute__((noinline)) static int leaf(int x) { return x * 3 + 1; }
__attribute__((noinline)) static int mid(int x) { return leaf(x) + leaf(x + 1); }
int main(void) {
    struct timespec a, b;
    long s = 0, n = 5000000;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) s += mid((int)i);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double t = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
    printf("%ld calls in %.6f s\n", 3 * n + (s == 42), t);
    return 0;
}
"""


def micro(tmp, repeat):
    """ns per event of the tracer: min over runs of (traced - untraced) / events."""
    src = Path(tmp) / "micro.c"
    src.write_text(MICRO)
    exe = Path(tmp) / "micro"
    subprocess.run(["gcc", "-O1", "-finstrument-functions", "-o", str(exe), str(src)], check=True)
    plain, traced = [], []
    for i in range(repeat):
        for dest, cmd in ((plain, [str(exe)]),
                          # -e: every call recorded (the cost of an event, not of a counted leaf)
                          (traced, [str(ROOT / "pin" / "parlot-run"), "-q", "-e", "-d", str(Path(tmp) / "micro.d"),
                                    str(exe)])):
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            calls, secs = re.match(r"(\d+) calls in ([0-9.]+) s", out).groups()
            dest.append(float(secs) / int(calls))
    return (min(traced) - min(plain)) / 2 * 1e9, min(plain) * 1e9


def one_step(prog, args):
    """args with a single step (the start-up run of a program timed from outside)."""
    out = list(args)
    out[out.index(STEPS_ARG[prog]) + 1] = "1"
    return tuple(out)


def launch(build, prog, ranks, threads, args, trace_dir=None, opts=()):
    """Run once: (stdout, wall seconds of the whole command, CPU seconds of its processes)."""
    cmd = [scenarios.venv_mpiexec(), "-n", str(ranks)]
    if trace_dir is not None:
        cmd += [str(ROOT / "pin" / "parlot-run"), "-q", *opts, "-d", str(trace_dir)]
    cmd += [str(build / prog), *args]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="passive")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return p.stdout, wall, cpu


def run(build, prog, ranks, threads, args, trace_dir=None, opts=()):
    """(run time, CPU time or None): the program's own time when it prints one, else the wall
    (and CPU) time of the launch minus that of a one-step launch (start-up taken out)."""
    out, wall, cpu = launch(build, prog, ranks, threads, args, trace_dir, opts)
    if prog not in STEPS_ARG:
        m = TIME_RE.search(out)
        if not m:
            raise RuntimeError(f"no run time in the output of {prog}: {out!r}")
        return float(m.group(1)), None
    start_dir = None if trace_dir is None else Path(str(trace_dir) + ".start")
    _, wall1, cpu1 = launch(build, prog, ranks, threads, one_step(prog, args), start_dir, opts)
    if start_dir is not None:
        shutil.rmtree(start_dir)
    return wall - wall1, cpu - cpu1


def trace_stats(d):
    nbytes = nevents = 0
    for p in Path(d).iterdir():
        if re.match(r"^.+\.\d+\.\d+$", p.name):
            nbytes += p.stat().st_size
            nevents += decode_file(p)[0].size
    return nbytes, nevents


LULESH_TIME_RE = re.compile(r"^Elapsed time\s*=\s*([0-9.]+)", re.M)


def lulesh_launch(exe, ranks, threads, args, trace_dir=None, opts=()):
    """One LULESH run: (its own Elapsed time, CPU seconds user + system of the launch, wall
    seconds of the launch)."""
    cmd = [scenarios.venv_mpiexec(), "-n", str(ranks)]
    if trace_dir is not None:
        cmd += [str(ROOT / "pin" / "parlot-run"), "-q", *opts, "-d", str(trace_dir)]
    cmd += [str(exe), *args]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="passive")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    m = LULESH_TIME_RE.search(p.stdout)
    if not m:
        raise RuntimeError(f"no 'Elapsed time' in LULESH's output: {p.stdout[-500:]!r}")
    return float(m.group(1)), (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def lulesh_bench(a):
    """The --lulesh table: untraced, traced (automatic leaves), traced -e (every call),
    traced -l (leaf list), [--compare-lib]."""
    exe = Path(a.lulesh).resolve()
    args = a.lulesh_args.split()
    rows = {}
    with tempfile.TemporaryDirectory(prefix="bench-lulesh-") as tmp:
        probe = Path(tmp) / "probe"
        lulesh_launch(exe, a.ranks, a.threads, args, probe, ("-P", str(a.leaf_probe)))
        leaves = sorted({ln for f in probe.glob("*.leaves") for ln in f.read_text().splitlines()
                         if ln and not ln.startswith("#")})
        modes = [("untraced", None), ("traced (automatic leaves)", ()), ("traced -e (every call)", ("-e",))]
        if a.compare_lib:
            modes.append(("traced, " + a.compare_lib, ("-L", a.compare_lib)))
        modes.append((f"traced -l (leaf list: {len(leaves)} functions)", ("-l", str(probe))))
        for i in range(a.repeat):
            for name, opts in modes:
                d = None if opts is None else Path(tmp) / f"run{i}"
                t, c, w = lulesh_launch(exe, a.ranks, a.threads, args, d, opts or ())
                rows.setdefault(name, ([], [], []))
                rows[name][0].append(t)
                rows[name][1].append(c)
                rows[name][2].append(w)
                if d is not None:
                    if i == a.repeat - 1:
                        rows[name] += (trace_stats(d),)
                    shutil.rmtree(d)
    base_t, base_c, base_w = (statistics.median(x) for x in rows["untraced"][:3])
    out = dict(machine=platform.machine(), cores=os.cpu_count(), load=os.getloadavg(), repeat=a.repeat,
               ranks=a.ranks, threads=a.threads, args=a.lulesh_args, leaves=leaves, rows=[])
    for name, (ts, cs, ws, *stats) in rows.items():
        t, c, w = statistics.median(ts), statistics.median(cs), statistics.median(ws)
        out["rows"].append(dict(mode=name, elapsed_s=round(t, 3), cpu_s=round(c, 3), wall_s=round(w, 3),
                                overhead=round(t / base_t, 3), overhead_cpu=round(c / base_c, 3),
                                overhead_wall=round(w / base_w, 3), events=stats[0][1] if stats else 0,
                                bytes=stats[0][0] if stats else 0, elapsed_all=ts, cpu_all=[round(x, 3) for x in cs],
                                wall_all=[round(x, 3) for x in ws]))
    if a.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"# LULESH {a.lulesh_args}, {a.ranks} x {a.threads}, median of {a.repeat} alternating runs, "
          f"{out['cores']} cores, load {out['load'][0]:.2f} at the end")
    print("| mode | LULESH elapsed | overhead | CPU user+sys | overhead (CPU) | wall | overhead (wall) | events "
          "| trace bytes |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in out["rows"]:
        print(f"| {r['mode']} | {r['elapsed_s']:.3f} s | {r['overhead']:.2f}x | {r['cpu_s']:.3f} s "
              f"| {r['overhead_cpu']:.2f}x | {r['wall_s']:.3f} s | {r['overhead_wall']:.2f}x | {r['events']:,} "
              f"| {r['bytes']:,} |")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--only", nargs="*", help="run only these configurations")
    ap.add_argument("--compare-lib", metavar="LIB",
                    help="also trace every run with this libparlot.so (parlot-run -L), in the same alternation: "
                         "e.g. the previous version's, for a before/after on the same machine load")
    ap.add_argument("--lulesh", metavar="EXE", help="measure this LULESH 2.0 binary instead (see above)")
    ap.add_argument("--lulesh-args", default="-s 15 -i 40", help="LULESH's arguments (default: %(default)s)")
    ap.add_argument("--ranks", type=int, default=1, help="--lulesh: MPI ranks (LULESH wants a cube: 1, 8, 27)")
    ap.add_argument("--threads", type=int, default=1, help="--lulesh: OpenMP threads per rank")
    ap.add_argument("--leaf-probe", type=int, default=10000,
                    help="--lulesh: the probe's threshold (parlot-run -P N) for the leaf list")
    a = ap.parse_args(argv)
    if a.lulesh:
        return lulesh_bench(a)
    cores = os.cpu_count() or 1
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-tracer-") as tmp:
        build = scenarios.build(Path(tmp) / "build")
        for name, prog, ranks, threads, args, what, *opts in CONFIGS:
            opts = opts[0] if opts else ()
            if a.only and name not in a.only:
                continue
            used = min(ranks * threads, cores)
            plain, traced, cpu_plain, cpu_traced, sizes = [], [], [], [], None
            other, cpu_other = [], []
            for i in range(a.repeat):
                t, c = run(build, prog, ranks, threads, args)
                plain.append(t)
                cpu_plain.append(c)
                if a.compare_lib:
                    d = Path(tmp) / f"{name}.{i}.other"
                    t, c = run(build, prog, ranks, threads, args, d, ("-L", a.compare_lib, *opts))
                    other.append(t)
                    cpu_other.append(c)
                    shutil.rmtree(d)
                d = Path(tmp) / f"{name}.{i}"
                t, c = run(build, prog, ranks, threads, args, d, opts)
                traced.append(t)
                cpu_traced.append(c)
                if i == a.repeat - 1:
                    sizes = trace_stats(d)
                shutil.rmtree(d)
            t0, t1 = statistics.median(plain), statistics.median(traced)
            m0, m1 = min(plain), min(traced)
            nbytes, nevents = sizes
            cpu = {}
            if cpu_plain[0] is not None:
                c0, c1 = statistics.median(cpu_plain), statistics.median(cpu_traced)
                cpu = dict(untraced_cpu_s=round(c0, 4), traced_cpu_s=round(c1, 4), overhead_cpu=round(c1 / c0, 3))
                if other:
                    c2 = statistics.median(cpu_other)
                    cpu.update(compare_cpu_s=round(c2, 4), overhead_cpu_compare=round(c2 / c0, 3))
            if other:
                t2 = statistics.median(other)
                cpu.update(compare_lib=a.compare_lib, compare_s=round(t2, 4), overhead_compare=round(t2 / t0, 3))
            results.append(dict(
                name=name, what=what, ranks=ranks, threads=threads, cores_used=used, options=" ".join(opts),
                timed="by the program" if prog not in STEPS_ARG else "launch minus a 1-step launch",
                untraced_s=round(t0, 4), traced_s=round(t1, 4), overhead=round(t1 / t0, 3),
                untraced_min_s=round(m0, 4), traced_min_s=round(m1, 4), overhead_min=round(m1 / m0, 3),
                **cpu,
                bytes=nbytes, events=nevents,
                kB_per_s_per_core=round(nbytes / t1 / used / 1000, 2),
                events_per_s=round(nevents / t1),
                compression=round(2 * nevents / max(nbytes, 1), 1),
            ))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)   # progress: each row when measured
        ns_event, ns_call = micro(tmp, a.repeat)
    if a.json:
        print(json.dumps(dict(machine=platform.machine(), cores=cores, repeat=a.repeat, results=results,
                              ns_per_event=round(ns_event, 2), ns_per_untraced_call=round(ns_call, 2)), indent=1))
        return 0
    print(f"# tracer overhead, median of {a.repeat} runs, {cores} cores ({platform.machine()})")
    print("| program | ranks x threads | untraced (median / min) | traced (median / min) | overhead (median / min) "
          "| trace | kB/s per core | events/s | compression |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['name']} | {r['ranks']} x {r['threads']} | {r['untraced_s']:.3f} / {r['untraced_min_s']:.3f} s "
              f"| {r['traced_s']:.3f} / {r['traced_min_s']:.3f} s | {r['overhead']:.2f}x / {r['overhead_min']:.2f}x "
              f"| {r['bytes'] / 1e3:.1f} kB | {r['kB_per_s_per_core']:.1f} | {r['events_per_s'] / 1e6:.2f} M "
              f"| {r['compression']:.0f}x |")
    for r in results:
        print(f"- {r['name']}: {r['what']}" + (f" (parlot-run {r['options']})" if r["options"] else ""))
        if "overhead_compare" in r:
            print(f"  with {r['compare_lib']}: {r['compare_s']:.3f} s, {r['overhead_compare']:.2f}x"
                  + (f" (CPU time {r['overhead_cpu_compare']:.2f}x)" if "overhead_cpu_compare" in r else ""))
        if "overhead_cpu" in r:
            print(f"  timed from outside (launch minus a 1-step launch); CPU time (user + system) "
                  f"{r['untraced_cpu_s']:.3f} s untraced, {r['traced_cpu_s']:.3f} s traced: {r['overhead_cpu']:.2f}x")
    print(f"- one event costs {ns_event:.1f} ns (microbenchmark; an untraced call costs {ns_call:.1f} ns there)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
