"""Concept lattice construction and merge, against the ``concepts`` package (PyPI, pure
Python, Lindig's algorithm), both measured in this process on the same binary contexts;
the two lattices are checked equal (same number of concepts, and the same set of
(intent, extent) pairs).  With --bounded N (off by default: its unbounded build alone
runs into the concept cap, ~8 s at N=64 on 2 cores) the bounded lattice
``analyze`` builds, on a context whose full lattice explodes (N distinct weighted rows,
like LULESH's "every" filter): the unbounded build up to the concept cap against the
bounded one (time, concepts, coverage), and the tree merge of P shards (checked equal to
the one-shard build).

    .venv/bin/python -m pip install -r bench/requirements.txt     # the baseline, bench only
    .venv/bin/python bench/bench_lattice.py [--sizes 1000 10000 100000] [--repeat 5]
        [--baseline-timeout 1200] [--baseline-max 10000] [--perturbed 0.005]
        [--bounded 64 [--bounded-cap 100000]]

Contexts are SPMD-like: N processes on a cube decomposition share a core of 50 attributes
(function names) and have 2 attributes per neighbour direction present (Isend/Irecv to
it), so the objects fall into at most 27 classes (corner, edge, face, interior ranks); a
fraction of them (--perturbed) is perturbed: half gain one extra attribute (from a pool of
20), half are "hung": they lack every attribute after one of 4 hang points in program
order (set-up, halo exchange, reductions).  Attributes are binary (noFreq-like), since ``concepts`` builds
the lattice of a binary context.

For each N: our build (Lattice.add_objects over a CSR), the merge of the lattices of the
two halves of the objects (as two MPI ranks would, checked equal to the full build), and
``concepts.Context(...).lattice``.  The baseline's context is made outside its timer (its
lattice computation alone is timed); it runs under a wall-clock limit, and after a size
it did not finish the larger sizes are not tried.  Without ``concepts`` installed the
baseline is skipped, with a message.  Figures are medians of --repeat runs (the baseline
is repeated only while one run takes under 5 s).
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchutil import BaselineTimeout, machine_line, time_limit, timed  # noqa: E402
from difftrace_mpi.errors import LatticeTooLarge  # noqa: E402
from difftrace_mpi.stages.classify.lattice import Lattice, bounded, merge, merge_bounded  # noqa: E402

CORE = 50                        # attributes every process has
DIRS = [(dx, dy, dz) for dx in (-1, 0, 1) for dy in (-1, 0, 1) for dz in (-1, 0, 1)
        if (dx, dy, dz) != (0, 0, 0)]
DIR_BASE = CORE                  # 2 attributes per neighbour direction
EXTRA_BASE = CORE + 2 * len(DIRS)
EXTRA = 20                       # pool of attributes a perturbed process may gain
# program order: the first half of the core (set-up, compute), the halo exchange, then the
# rest of the core (reductions, output); a hung process has only the attributes before
# one of a few hang points in this order
PROGRAM_POS = np.concatenate([np.arange(CORE // 2), CORE // 2 + 2 * len(DIRS) + np.arange(CORE - CORE // 2),
                              CORE // 2 + np.arange(2 * len(DIRS)), np.full(EXTRA, 10**9)])
HANG_POINTS = (10, CORE // 2 + 20, CORE // 2 + 2 * len(DIRS), CORE + 2 * len(DIRS) - 5)


def spmd_context(n, perturbed, seed=0):
    """(indptr, indices, n_classes, n_perturbed): binary CSR of n SPMD-like objects."""
    rng = np.random.default_rng(seed)
    a = max(2, int(np.ceil(n ** (1.0 / 3.0))))
    idx = np.arange(n)
    coords = np.stack([idx % a, (idx // a) % a, idx // (a * a)], axis=1)
    # position class per axis: 0 = low face, 1 = middle, 2 = high face
    side = np.where(coords == 0, 0, np.where(coords == a - 1, 2, 1))
    templates = {}
    rows = []
    for i in range(n):
        key = tuple(side[i])
        t = templates.get(key)
        if t is None:
            attrs = list(range(CORE))
            for d, (dx, dy, dz) in enumerate(DIRS):
                ok = all(not (s == 0 and v == -1) and not (s == 2 and v == 1)
                         for s, v in zip(key, (dx, dy, dz)))
                if ok:
                    attrs += [DIR_BASE + 2 * d, DIR_BASE + 2 * d + 1]
            t = templates[key] = np.array(sorted(attrs), dtype=np.int64)
        rows.append(t)
    k = int(round(n * perturbed))
    for i in rng.choice(n, size=k, replace=False):
        if rng.random() < 0.5:      # an extra call
            rows[i] = np.union1d(rows[i], [EXTRA_BASE + int(rng.integers(EXTRA))])
        else:                       # hung: the calls after a hang point are missing
            cut = HANG_POINTS[int(rng.integers(len(HANG_POINTS)))]
            rows[i] = rows[i][PROGRAM_POS[rows[i]] < cut]
    indptr = np.zeros(n + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(r) for r in rows])
    return indptr, np.concatenate(rows).astype(np.int64), len(templates), k


def build(n, indptr, indices, lo=0, hi=None):
    hi = n if hi is None else hi
    lat = Lattice(max_concepts=10**7)
    ip = indptr[lo:hi + 1] - indptr[lo]
    lat.add_objects(np.arange(lo, hi, dtype=np.int64), ip, indices[indptr[lo]:indptr[hi]])
    return lat


def ours_concepts(lat):
    return {(frozenset(a.tolist()), frozenset(e.tolist())) for a, _, e in lat.concepts()}


def concepts_context(n, indptr, indices):
    import concepts
    props = np.unique(indices)
    col = np.searchsorted(props, indices)
    dense = np.zeros((n, len(props)), dtype=bool)
    dense[np.repeat(np.arange(n), np.diff(indptr)), col] = True
    return concepts.Context([f"o{i}" for i in range(n)], [f"a{p}" for p in props.tolist()],
                            [tuple(r) for r in dense.tolist()])


def baseline_concepts(lattice):
    return {(frozenset(int(p[1:]) for p in c.intent), frozenset(int(o[1:]) for o in c.extent))
            for c in lattice}


def run_baseline(n, indptr, indices, repeat, timeout):
    """(median seconds, concepts.Lattice) or (None, reason)."""
    times, lat = [], None
    deadline = time.perf_counter() + timeout if timeout else None
    for r in range(max(1, repeat)):
        ctx = concepts_context(n, indptr, indices)
        left = None if deadline is None else deadline - time.perf_counter()
        if left is not None and left <= 0:
            if times:
                break
            return None, f"did not finish in {timeout:g} s"
        try:
            with time_limit(left):
                t0 = time.perf_counter()
                lat = ctx.lattice
                times.append(time.perf_counter() - t0)
        except BaselineTimeout:
            if times:
                break
            return None, f"did not finish in {timeout:g} s"
        if times[-1] >= 5.0:
            break
    return statistics.median(times), lat


def exploding_rows(n, attrs=1200, seed=0):
    """n distinct weighted rows: a shared half of the attributes, and each row a random
    half of the rest, weights 1..5 (like doub.log10 rows of LULESH's every filter)."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        own = np.flatnonzero(rng.random(attrs - attrs // 2) < 0.5) + attrs // 2
        a = np.concatenate([np.arange(attrs // 2), own]).astype(np.int64)
        rows.append((a, rng.integers(1, 6, len(a)).astype(np.int64)))
    indptr = np.zeros(n + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(a) for a, _ in rows])
    return indptr, np.concatenate([a for a, _ in rows]), np.concatenate([w for _, w in rows])


def bounded_section(n, repeat, cap=100_000):
    indptr, indices, weights = exploding_rows(n)
    objs = np.arange(n, dtype=np.int64)

    def unbounded():
        lat = Lattice(max_concepts=cap)
        try:
            lat.add_objects(objs, indptr, indices, weights)
            return f"{lat.n_concepts} concepts"
        except LatticeTooLarge:
            return f"over the cap ({cap:,}) after {lat.n_objects} of {n} rows"
    t_full, what = timed(unbounded, 1)
    t_b, lat = timed(lambda: bounded(indptr, indices, weights, objs, cap), repeat)
    cov = lat.coverage.short() if lat.coverage else "complete"
    print(f"\nbounded lattice, {n} distinct weighted rows of ~{len(indices) // n} attributes:")
    print(f"  unbounded build: {t_full:.3f} s, {what}")
    print(f"  bounded build:   {t_b:.3f} s, {lat.n_concepts} concepts, work {lat.work:,}, {cov}")
    for p in (2, 3, 4):
        cut = np.arange(p + 1) * n // p
        parts = [bounded(indptr[cut[i]:cut[i + 1] + 1] - indptr[cut[i]],
                         indices[indptr[cut[i]]:indptr[cut[i + 1]]], weights[indptr[cut[i]]:indptr[cut[i + 1]]],
                         objs[cut[i]:cut[i + 1]], cap) for i in range(p)]

        def tree(parts=parts):
            parts = [x.copy() for x in parts]
            step = 1
            while step < len(parts):
                for i in range(0, len(parts) - step, 2 * step):
                    parts[i] = merge_bounded(parts[i], parts[i + step], consume=True)
                step *= 2
            return parts[0]
        t_m, root = timed(tree, repeat)
        if root != lat:
            raise SystemExit(f"{p} shards: the merged bounded lattice differs from the one-shard build")
        print(f"  {p} shards: merges {t_m:.3f} s in all; equal to the one-shard build: OK")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--perturbed", type=float, default=0.005,
                    help="fraction of objects perturbed (an extra attribute, or hung)")
    ap.add_argument("--baseline-timeout", type=float, default=1200.0,
                    help="wall-clock limit (s) for one size of the concepts baseline")
    ap.add_argument("--baseline-max", type=int, default=10_000,
                    help="do not run the baseline above this N (its cost grows as N^2: about "
                         "16 min at 10k on a 2-core machine, so a day at 100k)")
    ap.add_argument("--no-baseline", action="store_true", help="skip the concepts baseline")
    ap.add_argument("--check-max", type=int, default=100_000,
                    help="compare every (intent, extent) pair with the baseline up to this N")
    ap.add_argument("--bounded", type=int, default=0,
                    help="rows of the bounded-lattice section (e.g. 64; 0: skip it)")
    ap.add_argument("--bounded-cap", type=int, default=100_000,
                    help="the concept cap of the bounded-lattice section (analyze's default)")
    args = ap.parse_args()

    print(machine_line())
    have_concepts = False
    if not args.no_baseline:
        try:
            import concepts
            have_concepts = True
            print(f"baseline: concepts {concepts.__version__} (pure Python, Lindig's algorithm)")
        except ImportError:
            print("baseline: SKIPPED: the 'concepts' package is not installed "
                  "(.venv/bin/python -m pip install -r bench/requirements.txt)")
    else:
        print("baseline: SKIPPED (--no-baseline)")
    print(f"contexts: SPMD-like, binary, {args.perturbed:.2%} of the objects perturbed; "
          f"medians of {args.repeat}")
    print(f"{'N':>7} {'classes':>7} {'distinct':>8} {'concepts':>8} | {'ours build':>10} "
          f"{'concepts pkg':>12} {'ratio':>8} | {'merge 2 halves':>14} {'halves build':>12} | check")
    baseline_gave_up = None
    for n in args.sizes:
        indptr, indices, n_cls, n_pert = spmd_context(n, args.perturbed)
        distinct = len({indices[indptr[i]:indptr[i + 1]].tobytes() for i in range(n)})
        t_ours, lat = timed(lambda: build(n, indptr, indices), args.repeat)
        half = n // 2
        a = build(n, indptr, indices, 0, half)
        b = build(n, indptr, indices, half, n)
        t_halves = statistics.median([timed(lambda: build(n, indptr, indices, 0, half), 1)[0]
                                      + timed(lambda: build(n, indptr, indices, half, n), 1)[0]
                                      for _ in range(max(1, args.repeat))])
        t_merge, merged = timed(lambda: merge(a, b), args.repeat)
        checks = []
        if merged != lat:
            raise SystemExit(f"N={n}: the merged lattice differs from the full build")
        checks.append("merge == build")
        base, ratio = "-", "-"
        if have_concepts and n > args.baseline_max:
            base = "not run"
        elif have_concepts and baseline_gave_up is not None:
            base = f"(> {baseline_gave_up:g} s)"
        elif have_concepts:
            t_base, res = run_baseline(n, indptr, indices, args.repeat, args.baseline_timeout)
            if t_base is None:
                base = f"> {args.baseline_timeout:g} s"
                baseline_gave_up = args.baseline_timeout
                ratio = f"> {args.baseline_timeout / t_ours:.0f}x"
            else:
                base = f"{t_base:.3f}"
                ratio = f"{t_base / t_ours:.0f}x"
                if len(res) != lat.n_concepts:
                    raise SystemExit(f"N={n}: concepts has {len(res)} concepts, ours {lat.n_concepts}")
                checks.append("same count")
                if n <= args.check_max:
                    if baseline_concepts(res) != ours_concepts(lat):
                        raise SystemExit(f"N={n}: the (intent, extent) pairs differ from concepts'")
                    checks.append("same concepts")
        print(f"{n:>7} {n_cls:>7} {distinct:>8} {lat.n_concepts:>8} | {t_ours:>10.4f} {base:>12} "
              f"{ratio:>8} | {t_merge:>14.4f} {t_halves:>12.4f} | {', '.join(checks)}: OK")
    print("(seconds; ratio = concepts pkg / ours build; merge = merge(lattice of the first half, "
          "lattice of the second half); halves build = building those two)")
    if args.bounded:
        bounded_section(args.bounded, args.repeat, args.bounded_cap)


if __name__ == "__main__":
    main()
