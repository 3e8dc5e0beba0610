"""The concept lattices' tree across MPI ranks, on real LULESH: what each rank does, and the
time until the root holds every lattice, against the rank count (issue 38 item 2).

    .venv/bin/python bench/bench_lattice_tree.py [--cache DIR] [--pairs 64x1-crash 216x1-crash]
        [--ranks 1 2 3 4 8 16 64] [--measure 1 2] [--repeat 3] [--json]

The pair is analysed once on one rank (in this process) and the rows every lattice is built
from are kept (the rows ``engine.pipeline.local_lattices`` receives).  Then, for each rank
count P, the engine's lattice functions (``engine.lattices``: local part, merge, pack,
unpack, finish) run in this process in the order ``Choreography.tree_reduce`` runs
them on P ranks: the processes are shared out as ``Choreography.shard`` does (by trace
bytes, both runs of a process on one rank), each rank builds its part of every lattice,
item i's binomial tree is rooted on rank i mod P, and the owners' lattices go to rank 0.
Each call is timed (CPU time of this process), and a schedule of P ranks is replayed from
those times: a rank receives a round's message when its sender has finished the rounds
before (messages cost nothing: on one node they are copies of the arrays packed, which
are timed).  Reported per P:

- ``local``: the slowest rank's local parts (a complete lattice of its own classes within
  1/``LOCAL_TRIAL_SHARE`` of their work budget, else its class rows);
- ``tree``: the slowest rank's merges and finishing builds (the bounded build of the
  classes at a tree's root);
- ``critical``: when rank 0 holds every lattice (the replayed schedule), which is what the
  wall time of the lattice steps is on P real cores;
- ``work``: every rank's lattice work summed (CPU s);
- ``same``: whether every lattice equals the one-rank lattice (arrays equal).

The model these figures check (``docs/design.md``, "The lattices across ranks"): every
lattice is built once, at its tree's root, within its work budget (16 x its class rows'
size, at most ``WORK_CEILING``), so past P = 2 x settings (one tree root per lattice) the
critical path is the costliest single lattice plus the local parts (which shrink as 1/P)
and the class rows' travel up log2 P levels; it does not grow with P.

``--measure``: the same pair analysed end to end under ``mpiexec -n P`` for these P,
``--repeat`` times; reported: the root's lattice steps (``lattice ...`` summed plus
``lattice merge``, wall, medians) beside the replayed critical path (above 2 ranks this
machine's 2 cores are oversubscribed and the measured times say little).
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchutil import machine_line  # noqa: E402
import bench_real  # noqa: E402
from difftrace_mpi import api  # noqa: E402
from difftrace_mpi.engine import lattices as tree  # noqa: E402
from difftrace_mpi.engine import pipeline  # noqa: E402
from difftrace_mpi.engine.choreography import Choreography  # noqa: E402
from difftrace_mpi.stages.classify.records import Skipped  # noqa: E402

DEFAULT_PAIRS = ["64x1-crash", "216x1-crash"]


def captured_rows(normal, faulty):
    """(the rows of every lattice as ``local_lattices`` gets them, the shard, the cap), from
    one analysis on one rank."""
    seen = {}
    original = pipeline.local_lattices

    def keep(ch, shard, lattice_rows, max_concepts):
        seen.update(rows=list(lattice_rows), shard=shard, cap=max_concepts)
        return original(ch, shard, lattice_rows, max_concepts)
    pipeline.local_lattices = keep
    try:
        api.analyze(normal, faulty)
    finally:
        pipeline.local_lattices = original
    return seen["rows"], seen["shard"], seen["cap"]


def shards_of(shard, ranks):
    """Per rank, the mask of the traces it holds on ``ranks`` ranks (``Choreography.shard``
    over the processes' trace bytes, as ``pipeline.Shard`` does)."""
    procs = np.array([shard.objects[o][0] for o in shard.objs])
    order = sorted(set(procs.tolist()))
    sizes = {p: 0 for p in order}
    for (_, ref) in shard.refs:
        sizes[ref.rank] += ref.size
    owned = Choreography.shard(types.SimpleNamespace(size=ranks), [sizes[p] for p in order])
    return [np.isin(procs, [order[u] for u in units]) for units in owned]


def timed(fn, *args):
    start = time.process_time()
    out = fn(*args)
    return out, time.process_time() - start


def replay(lattice_rows, shard, cap, ranks):
    """The lattices on ``ranks`` simulated ranks: (figures, the root's lattices)."""
    masks = shards_of(shard, ranks)
    items, clock, work = [], [0.0] * ranks, [0.0] * ranks     # clock: each rank's schedule
    local = [0.0] * ranks
    for r in range(ranks):
        parts = []
        for _, rows in lattice_rows:
            for ri in (0, 1):
                if rows is None:
                    parts.append(Skipped("over the class cap"))
                    continue
                part, seconds = timed(tree.local_lattice, rows, masks[r] & (shard.runs == ri), shard.objs, cap, ranks)
                parts.append(part)
                local[r] += seconds
        items.append(parts)
        clock[r] += local[r]
        work[r] += local[r]
    n = len(items[0])
    states = [list(parts) for parts in items]
    distance = 1
    while distance < ranks:
        packed = [{} for _ in range(ranks)]
        for r in range(ranks):
            for i in range(n):
                if (r - i) % ranks % (2 * distance) == distance:
                    state = states[r][i]
                    packed[r][i], seconds = (state, 0.0) if isinstance(state, Skipped) else timed(tree.pack, state)
                    clock[r] += seconds
                    work[r] += seconds
                    states[r][i] = None
        sent = list(clock)      # a rank sends this round's items when its rounds before are done
        for r in range(ranks):
            source = (r + distance) % ranks
            receiving = [i for i in range(n) if (r - i) % ranks % (2 * distance) == 0
                         and (r - i) % ranks + distance < ranks]
            if not receiving:
                continue
            clock[r] = max(clock[r], sent[source])
            for i in receiving:
                merged, seconds = timed(Choreography._merged, states[r][i], packed[source][i], tree.merge, tree.unpack)
                states[r][i] = merged
                clock[r] += seconds
                work[r] += seconds
        distance *= 2
    final, keeping = [None] * n, 0.0
    for r in range(ranks):
        for i in range(r, n, ranks):
            done, seconds = timed(Choreography._finished, states[r][i], tree.finish)
            clock[r] += seconds
            work[r] += seconds
            if r and not isinstance(done, Skipped):
                packed_item, pack_s = timed(tree.pack, done)
                done, keep_s = timed(tree.unpack, packed_item)
                clock[r] += pack_s
                work[r] += pack_s
                work[0] += keep_s
                keeping += keep_s
            final[i] = done
    # the root keeps the owners' lattices once it has them all (the gather)
    critical = max(clock) + keeping
    figures = {"local": max(local), "tree": max(w - l for w, l in zip(work, local)), "critical": critical,
               "work": sum(work)}
    return figures, final


def arrays_of(lattice):
    if isinstance(lattice, Skipped) or lattice is None:
        return None
    arrays = lattice.load() if hasattr(lattice, "load") else lattice.to_arrays()
    return {k: np.asarray(v) for k, v in arrays.items()}


def same_lattices(a, b):
    for x, y in zip(a, b):
        ax, ay = arrays_of(x), arrays_of(y)
        if (ax is None) != (ay is None):
            return False
        if ax is not None and (ax.keys() != ay.keys() or not all(np.array_equal(ax[k], ay[k]) for k in ax)):
            return False
    return True


def measured(normal, faulty, ranks, repeat):
    """The root's lattice steps (s, wall) under mpiexec -n ranks, median of ``repeat``."""
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.h5"
        for _ in range(repeat):
            cmd = [bench_real.mpiexec(), "-n", str(ranks), sys.executable, "-m", "difftrace_mpi", "analyze",
                   str(normal), str(faulty), "--out", str(out), "--force", "--quiet"]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=tmp)
            with h5py.File(out, "r") as f:
                t = f["timing"].attrs
                runs.append(sum(float(v) for k, v in t.items() if k.startswith("lattice")))
    return statistics.median(runs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "difftrace-bench-real")
    ap.add_argument("--pairs", nargs="*", default=DEFAULT_PAIRS, choices=sorted(bench_real.PAIRS))
    ap.add_argument("--dirs", nargs=2, metavar=("NORMAL", "FAULTY"), type=Path,
                    help="another pair of run directories (a synthetic cube of bench/synth_real.py)")
    ap.add_argument("--ranks", nargs="*", type=int, default=[1, 2, 3, 4, 8, 16, 64])
    ap.add_argument("--measure", nargs="*", type=int, default=[1, 2], help="ranks to run under mpiexec too")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    print(machine_line())
    report = {}
    print("| pair | simulated ranks | local s | tree s | critical path s | work s (all ranks) | "
          "same lattices | measured root lattice steps s |")
    print("|---|---|---|---|---|---|---|---|")
    pairs = [(name, bench_real.unpack(a.cache, bench_real.PAIRS[name].normal),
              bench_real.unpack(a.cache, bench_real.PAIRS[name].faulty)) for name in a.pairs]
    if a.dirs:
        pairs.append((f"{a.dirs[0].name} vs {a.dirs[1].name}", *a.dirs))
    for name, normal, faulty in pairs:
        lattice_rows, shard, cap = captured_rows(normal, faulty)
        one = None
        for ranks in sorted(set(a.ranks) | {1}):
            if ranks > len(shard.processes):
                continue
            figures, final = replay(lattice_rows, shard, cap, ranks)
            one = final if ranks == 1 else one
            figures["same"] = same_lattices(one, final)
            if ranks in a.measure:
                figures["measured"] = measured(normal, faulty, ranks, a.repeat)
            report.setdefault(name, {})[ranks] = figures
            if ranks in a.ranks:
                m = figures.get("measured")
                print(f"| {name} | {ranks} | {figures['local']:.3f} | {figures['tree']:.3f} | "
                      f"{figures['critical']:.3f} | {figures['work']:.3f} | {'yes' if figures['same'] else 'NO'} | "
                      f"{'-' if m is None else f'{m:.3f}'} |", flush=True)
    if a.json:
        print(json.dumps(report, indent=1))
    return 0 if all(f["same"] for p in report.values() for f in p.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
