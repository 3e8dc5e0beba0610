"""JSM + clustering of N distinct traces, against scipy pdist(metric='jaccard') + linkage,
both measured in this run on the same inputs (binary attributes, so both compute the same
Jaccard index; the values are checked equal).

    .venv/bin/python bench/bench_jsm.py [--sizes 1000 2000 5000] [--attrs 200] [--vocab 3000]

Inputs are SPMD-like: every trace shares a core of attributes and adds a few of its own
(neighbour ids, rank-dependent extras), so all N rows are distinct.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np
import scipy.sparse as sp
from scipy.cluster.hierarchy import linkage
from scipy.spatial.distance import pdist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from difftrace_mpi import cluster  # noqa: E402
from difftrace_mpi.lattice import jaccard_direct  # noqa: E402


def spmd_rows(n, attrs, vocab, seed=0):
    rng = np.random.default_rng(seed)
    core = rng.choice(vocab, size=attrs // 2, replace=False)
    rows = []
    for i in range(n):
        extra = rng.choice(vocab, size=attrs // 2, replace=False)
        rows.append(np.unique(np.concatenate([core, extra, [vocab + i]])))
    indptr = np.zeros(n + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(r) for r in rows])
    indices = np.concatenate(rows).astype(np.int64)
    return sp.csr_matrix((np.ones(len(indices), dtype=np.int64), indices, indptr), shape=(n, vocab + n))


def timed(fn, repeat):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 5000])
    ap.add_argument("--attrs", type=int, default=200)
    ap.add_argument("--vocab", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"{'N':>6} {'ours JSM':>9} {'pdist':>9} {'ratio':>7} | {'ours linkage':>12} {'scipy linkage':>13} "
          f"{'ratio':>7}   (seconds, medians of {args.repeat})")
    for n in args.sizes:
        m = spmd_rows(n, args.attrs, args.vocab)
        t_ours, (jc, inv) = timed(lambda: jaccard_direct(m, expand=False), args.repeat)
        assert len(set(inv.tolist())) == n
        dense = m.toarray().astype(bool)
        t_pdist, d = timed(lambda: pdist(dense, metric="jaccard"), 1 if n > 2000 else args.repeat)
        jv = jc[np.triu_indices(n, 1)]
        assert np.allclose(1.0 - d, jv, rtol=0, atol=1e-12)
        sizes = np.ones(n)
        t_link, _ = timed(lambda: cluster.class_dendrogram(jc, sizes, "average"), 1)
        t_scipy, _ = timed(lambda: linkage(d, method="average"), 1)
        print(f"{n:>6} {t_ours:>9.3f} {t_pdist:>9.3f} {t_pdist / t_ours:>6.1f}x | {t_link:>12.3f} "
              f"{t_scipy:>13.3f} {t_scipy / t_link:>6.2f}x")


if __name__ == "__main__":
    main()
