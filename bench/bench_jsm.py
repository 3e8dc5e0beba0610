"""JSM + clustering of N traces, against scipy pdist(metric='jaccard') + linkage, both
measured in this process on the same inputs (binary attributes, so both compute the same
Jaccard index; the values are checked equal wherever the baseline runs).

    .venv/bin/python bench/bench_jsm.py [--sizes 5000 10000 20000 32000] [--baseline-max 20000]
        [--repeat 3] [--classes 64] [--vocab 128] [--core 48] [--extra 16] [--unique 0]

Table 1, N distinct traces: every trace shares a core of attributes and adds a few of its
own (neighbour ids, rank-dependent extras), so all N rows are distinct, the worst case
for the class-level analysis.  Ours is ``jaccard_direct`` (sums of minima through sparse
products) and ``cluster.class_dendrogram`` with multiplicities 1 (the project's linkage kernel, which
builds SciPy's tree bit for bit); this is what the analyzer runs for the thread
level (``analysis._class_jsm``, ``cluster.compare_classes``).  Above --direct-max the JSM
is computed in row blocks with ``jaccard_rows`` (the analyzer's row-blocked path, bit
identical), because jaccard_direct's dense int64 temporaries are several N^2 arrays.

Table 2 (--classes C > 0): N traces that fall into C classes (SPMD-like), the case the
analyzer is built for: it merges identical traces first, computes the C x C JSM and
clusters the classes with their multiplicities (NN-chain kernel), the same tree as
clustering all N traces.  The baseline clusters all N traces.  Checked: the JSM values
per trace pair, and the merge heights of the two dendrograms (the N - C merges of
identical traces at height 0, then the same heights).

About the heights: binary Jaccard values are ratios of small integers, so many pairs are
at exactly the same distance, and the merge order among tied pairs (so the later
heights) depends on tie-breaking, which the last bit of the distances decides (ours are
1 - J, pdist's its own quotient; equal to 1e-12).  Where the heights differ, the check
passes only if there are tied distances, and says so.

Defaults: 48 shared + 16 of 80 other attributes per trace (128 columns), sized like the
peer survey's inputs (its pdist took 104 s at N = 20k on 2 cores).  The cost of our JSM
is the sum over attributes of (traces having it)^2, N^2 per shared attribute, while
pdist's is N^2/2 per column: many rare attributes (``--vocab 3000 --core 100 --extra 100
--unique 1``) favour ours, many shared ones favour pdist.

The baseline is skipped above --baseline-max (pdist's condensed matrix alone is
N^2/2 * 8 bytes: 1.6 GB at 20k, 4.1 GB at 32k, and linkage copies it); the table then
shows our times alone.  Times are medians of --repeat runs (the baseline is run once
above N = 2000).
"""
import argparse
import gc
import os
import sys

import numpy as np
import scipy.sparse as sp
from scipy.cluster.hierarchy import linkage
from scipy.spatial.distance import pdist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchutil import machine_line, timed  # noqa: E402
from difftrace_mpi.stages.classify import cluster  # noqa: E402
from difftrace_mpi.stages.classify.jsm import jaccard_direct, jaccard_rows  # noqa: E402


def spmd_rows(n, vocab, core, extra, unique, seed=0):
    """n distinct binary rows: a shared core of ``core`` attributes, ``extra`` more drawn
    from the rest of the vocabulary, and ``unique`` attributes of its own (0 or 1; an own
    attribute adds a column per trace to the dense matrix pdist needs)."""
    rng = np.random.default_rng(seed)
    if core + extra > vocab:
        raise SystemExit("--core + --extra must not exceed --vocab")
    core_ids = rng.choice(vocab, size=core, replace=False)
    rest = np.setdiff1d(np.arange(vocab), core_ids)
    rows, seen = [], set()
    while len(rows) < n:
        i = len(rows)
        own = [vocab + i] if unique else []
        r = np.unique(np.concatenate([core_ids, rng.choice(rest, size=extra, replace=False), own]))
        key = r.tobytes()
        if key in seen:
            continue
        seen.add(key)
        rows.append(r.astype(np.int64))
    indptr = np.zeros(n + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(r) for r in rows])
    indices = np.concatenate(rows)
    cols = vocab + (n if unique else 0)
    return sp.csr_matrix((np.ones(len(indices), dtype=np.int64), indices, indptr), shape=(n, cols))


def class_rows(n, n_classes, args, seed=1):
    """n traces drawn from n_classes distinct SPMD-like rows (every class used)."""
    templates = spmd_rows(n_classes, args.vocab, args.core, args.extra, args.unique, seed)
    rng = np.random.default_rng(seed)
    cls = np.concatenate([np.arange(n_classes), rng.integers(0, n_classes, size=n - n_classes)])
    rng.shuffle(cls)
    return templates[cls]


def our_jsm(m, direct_max, block):
    """(class JSM, class index of each row, path name)."""
    n = m.shape[0]
    if n <= direct_max or direct_max < 0:
        jc, inv = jaccard_direct(m, expand=False)
        return jc, inv, "direct"
    # identical rows first (as the analyzer's _dedupe/_unify do), then row blocks
    index, inv, firsts = {}, np.empty(n, dtype=np.int64), []
    for r in range(n):
        s, e = m.indptr[r], m.indptr[r + 1]
        key = m.indices[s:e].tobytes() + m.data[s:e].tobytes()
        c = index.get(key)
        if c is None:
            c = index[key] = len(firsts)
            firsts.append(r)
        inv[r] = c
    u = m[np.asarray(firsts)]
    c = u.shape[0]
    indptr, indices, weights = (np.asarray(x, dtype=np.int64) for x in (u.indptr, u.indices, u.data))
    out = np.empty((c, c), dtype=np.float64)
    for lo in range(0, c, block):
        hi = min(c, lo + block)
        out[lo:hi] = jaccard_rows(indptr, indices, weights, lo, hi)
    return out, inv, f"rows/{block}"


def values_equal(d, jc, inv):
    """pdist's condensed distances d equal 1 - J for every pair (row by row, so no N^2
    index arrays are needed)."""
    n = len(inv)
    off = 0
    for i in range(n - 1):
        k = n - 1 - i
        if not np.allclose(1.0 - d[off:off + k], jc[inv[i], inv[i + 1:]], rtol=0, atol=1e-12):
            return False
        off += k
    return True


def has_ties(jc, max_weight):
    """Two class pairs at exactly the same distance.  Then the merge order among them,
    and so the later heights, depend on tie-breaking, which is sensitive to the last bit
    of the distances (ours are 1 - J, pdist's are its own quotient).  Binary Jaccard
    values are ratios a/b with b <= 2 * max_weight, so ties are certain beyond that many
    pairs (pigeonhole) and common well before."""
    c = jc.shape[0]
    pairs = c * (c - 1) // 2
    if pairs > (max_weight + 1) * (2 * max_weight + 1):
        return True
    v = np.concatenate([jc[i, i + 1:] for i in range(c - 1)]) if c > 1 else np.empty(0)
    return len(np.unique(v)) < len(v)


def heights_equal(z_ours, z_scipy, n):
    ours = np.sort(np.concatenate([np.zeros(n - 1 - len(z_ours)), z_ours[:, 2]]))
    return np.allclose(ours, np.sort(z_scipy[:, 2]), rtol=0, atol=1e-9)


def fmt(x, width, digits=3):
    return f"{'-':>{width}}" if x is None else f"{x:>{width}.{digits}f}"


def ratio(a, b, width=7):
    return f"{'-':>{width}}" if a is None or b is None else f"{a / b:>{width - 1}.1f}x"


def run_table(title, sizes, make, args, method):
    print(title)
    print(f"{'N':>6} {'classes':>7} {'JSM path':>9} {'ours JSM':>9} {'pdist':>9} {'ratio':>7} | "
          f"{'ours linkage':>12} {'scipy linkage':>13} {'ratio':>7} | {'ours total':>10} {'scipy total':>11} "
          f"{'ratio':>7} | check")
    for n in sizes:
        m = make(n)
        gc.collect()
        t_jsm, (jc, inv, path) = timed(lambda m=m: our_jsm(m, args.direct_max, args.block), args.repeat)
        n_cls = jc.shape[0]
        mult = np.bincount(inv, minlength=n_cls).astype(np.float64)
        t_link, z_ours = timed(lambda jc=jc: cluster.class_dendrogram(jc, mult, method), args.repeat)
        t_pdist = t_scipy = None
        check = "baseline skipped (N > --baseline-max)"
        if n <= args.baseline_max:
            dense = m.toarray().astype(bool)
            rep = 1 if n > 2000 else args.repeat
            t_pdist, d = timed(lambda dense=dense: pdist(dense, metric="jaccard"), rep)
            del dense
            if not values_equal(d, jc, inv):
                raise SystemExit(f"N={n}: the JSM values differ from pdist's")
            tied = has_ties(jc, int(np.diff(m.indptr).max()))
            del jc
            gc.collect()
            t_scipy, z_scipy = timed(lambda d=d: linkage(d, method=method), rep)
            del d
            if heights_equal(z_ours, z_scipy, n):
                check = "values equal, heights equal: OK"
            elif tied:
                check = "values equal, heights differ after tied distances (tie-breaking): OK"
            else:
                raise SystemExit(f"N={n}: the dendrogram heights differ from SciPy's (no ties)")
        else:
            del jc
        tot_ours = t_jsm + t_link
        tot_base = None if t_pdist is None else t_pdist + t_scipy
        print(f"{n:>6} {n_cls:>7} {path:>9} {t_jsm:>9.3f} {fmt(t_pdist, 9)} {ratio(t_pdist, t_jsm)} | "
              f"{t_link:>12.3f} {fmt(t_scipy, 13)} {ratio(t_scipy, t_link)} | {tot_ours:>10.3f} "
              f"{fmt(tot_base, 11)} {ratio(tot_base, tot_ours)} | {check}", flush=True)
        del m, inv, z_ours
        gc.collect()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[5000, 10000, 20000, 32000])
    ap.add_argument("--vocab", type=int, default=128, help="attribute vocabulary")
    ap.add_argument("--core", type=int, default=48, help="attributes every trace has")
    ap.add_argument("--extra", type=int, default=16, help="attributes per trace drawn from the rest")
    ap.add_argument("--unique", type=int, default=0, choices=(0, 1),
                    help="1: each trace also has an attribute of its own")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline-max", type=int, default=20000,
                    help="run pdist + linkage only up to this N")
    ap.add_argument("--direct-max", type=int, default=20000,
                    help="above this N, compute our JSM in row blocks (jaccard_rows)")
    ap.add_argument("--block", type=int, default=2048, help="rows per block above --direct-max")
    ap.add_argument("--classes", type=int, default=0,
                    help="also run table 2: N traces in this many classes (0: skip)")
    ap.add_argument("--only-classes", action="store_true", help="run table 2 only")
    ap.add_argument("--method", default="average", help="linkage method (default average)")
    args = ap.parse_args()
    print(machine_line())
    print(f"inputs: binary, {args.core} shared + {args.extra} of {args.vocab - args.core} other attributes"
          f"{' + 1 own' if args.unique else ''} per trace, {args.vocab}{' + N' if args.unique else ''} "
          f"columns for pdist; {args.method} linkage; seconds, medians of {args.repeat} (baseline: 1 run above N = 2000)")
    if not args.only_classes:
        run_table("table 1: N distinct traces", args.sizes,
                  lambda n: spmd_rows(n, args.vocab, args.core, args.extra, args.unique), args, args.method)
    if args.classes > 0:
        run_table(f"table 2: N traces in {args.classes} classes (the analyzer's class-level path)",
                  [n for n in args.sizes if n > args.classes],
                  lambda n: class_rows(n, args.classes, args), args, args.method)


if __name__ == "__main__":
    main()
