"""Kernel benchmarks: ParLOT decode and NLR, each as a ratio against a baseline run in the
same process (pure-Python implementations of the same procedures, written here).

    .venv/bin/python bench/bench_kernels.py [--events 1000000] [--repeat 5]
    .venv/bin/python bench/bench_kernels.py --real RUN_DIR [--filters 11.every 11.mpi] [--k 10]

Prints medians; figures are per core (the kernels are single-threaded).

``--real RUN_DIR``: the NLR passes on the streams of a real run directory (any format the
readers know), as the pipeline runs them (``nlr.discover``, then ``nlr.reduce_with_known``
with the run's own bodies known): events per second of CPU time (this thread's) per pass,
median of ``--repeat`` runs, for each filter; both passes' outputs (NLRs, loop bodies,
recorded pairs) are checked equal to those of ``nlr_reference``, the first form of the
kernel (``--no-check`` skips that slow run).
"""
import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from difftrace_mpi.kernels import parlot as parlot_kernel  # noqa: E402
from difftrace_mpi.kernels.nlr import LoopTable, nlr  # noqa: E402


def lulesh_like_trace(n_events, seed=0):
    """Entry/return stream shaped like one LULESH rank: a time-step loop of nested kernel
    loops, halo exchanges with 26 neighbours (Irecv/Isend/Waitall) and an Allreduce, with
    a little irregularity (occasional extra calls)."""
    rng = np.random.default_rng(seed)
    out = []

    def call(fid, inner=()):
        out.append(fid)
        out.extend(inner)
        out.append(0)

    step = 0
    while len(out) < n_events:
        step += 1
        body = []
        for kernel in range(10, 18):                  # element kernels, each a short inner loop
            for _ in range(4):
                body += [kernel, 30 + kernel % 3, 0, 0]
        halo = []
        for nb in range(26):
            halo += [40, 0] if nb % 2 else [41, 0]
        halo += [42, 0]
        out.extend([5] + body + halo + [43, 0, 0])     # LagrangeLeapFrog(...) + MPI_Allreduce
        if rng.random() < 0.05:
            call(50 + int(rng.integers(0, 5)))
    return np.array(out[:n_events], dtype=np.uint16)


# ---- pure-Python baselines (same procedures, no numpy in the loop) -----------------------

def py_decode(data):
    """ParLOT two-layer decode, pure Python (docs/parlot-format.md)."""
    n = len(data)
    words, pos = [], 0
    last = data[-1]
    body_end = n - 1
    while pos < body_end:
        bitmap = data[pos]
        pos += 1
        remaining = body_end - pos
        group = []
        nbytes = 8
        # last partial group: its size is 2 * trailer
        if sum(1 for b in range(8) if bitmap >> b & 1) >= remaining and remaining <= 8:
            nbytes = 2 * last
        for b in range(nbytes):
            if bitmap >> b & 1:
                group.append(data[pos])
                pos += 1
            else:
                group.append(0)
        for w in range(0, nbytes, 2):
            words.append(group[w] | group[w + 1] << 8)
    hbuf = [0] * 4096
    pbuf = [0] * 65536
    ppos = 0
    h = 0
    out = []

    def push(v):
        nonlocal ppos, h
        hbuf[h] = ppos
        h = ((h << 4) ^ v) % 4096
        pbuf[ppos] = v
        ppos = (ppos + 1) & 0xFFFF
        out.append(v)

    i = 0
    while i < len(words):
        lpos = hbuf[h]
        if all(pbuf[(lpos - k) & 0xFFFF] == pbuf[(ppos - k) & 0xFFFF] for k in (1, 2, 3)):
            cnt = words[i]
            i += 1
            for _ in range(cnt):
                push(pbuf[lpos])
                lpos = (lpos + 1) & 0xFFFF
        if i < len(words):
            push(words[i])
            i += 1
    return out


def py_nlr(seq, K, known=()):
    """DiffTrace Procedure 1 as written, pure Python lists (the speed baseline here and the
    oracle tests/test_nlr.py checks the kernel against); bodies in
    ``known`` (tuples of (id, count)) are preloaded and form loops from two repetitions."""
    bodies = [tuple(b) for b in known]
    index = {b: i for i, b in enumerate(bodies)}
    stack = []
    for v in seq:
        stack.append((v, 1))
        changed = True
        while changed:
            changed = False
            n = len(stack)
            for i in range(2, 3 * K):
                if i > n:
                    break
                if i % 3 == 0:
                    b = i // 3
                    if stack[n - b:] == stack[n - 2 * b:n - b] == stack[n - 3 * b:n - 2 * b]:
                        body = tuple(stack[n - b:])
                        if body not in index:
                            index[body] = len(bodies)
                            bodies.append(body)
                        del stack[n - 3 * b:]
                        stack.append((-index[body] - 1, 3))
                        changed = True
                        break
                if known and i % 2 == 0 and i // 2 <= K - 1:
                    b = i // 2
                    body = tuple(stack[n - b:])
                    if body == tuple(stack[n - 2 * b:n - b]) and index.get(body, len(known)) < len(known):
                        del stack[n - 2 * b:]
                        stack.append((-index[body] - 1, 2))
                        changed = True
                        break
                if i <= K + 1:
                    e, c = stack[n - i]
                    if e < 0 and bodies[-e - 1] == tuple(stack[n - i + 1:]):
                        del stack[n - i + 1:]
                        stack[-1] = (e, c + 1)
                        changed = True
                        break
    return stack, bodies



def median_time(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def real_streams(run_dir, specs):
    """{filter spec: [int32 stream of every trace]} of a run directory, as the pipeline
    filters them (local function ids; the kernel only compares them)."""
    from difftrace_mpi.readers import discover_run, load_trace
    from difftrace_mpi.stages.model import filters
    run = discover_run(run_dir)
    out = {spec: [] for spec in specs}
    cache = {}
    for ref in run.refs:
        trace = load_trace(ref, cache)
        names = list(trace.names)
        for spec in specs:
            out[spec].append(filters.apply_filter(trace.events, names, filters.parse_filter(spec)))
    return out


def nlr_passes(seqs, K, kernel=None):
    """Both passes over ``seqs`` as the pipeline's nlr_step runs them on one rank, timed
    apart (CPU seconds of this thread).  ``kernel``: the kernel function the stage calls
    (default: as imported).  Returns (t_pass1, t_pass2, comparable result)."""
    from difftrace_mpi.stages.model import nlr as stage
    saved = stage.nlr
    if kernel is not None:
        stage.nlr = kernel
    try:
        t0 = time.thread_time()
        discovery = stage.discover(iter(seqs), K)
        t1 = time.thread_time()
        keys1 = stage.canonical_keys(discovery.table)
        pass1 = ([(x.ids.copy(), x.counts.copy()) for x in discovery.nlrs], keys1,
                 [sorted(stage._pair_key(p, keys1) for p in pairs) for pairs in discovery.pairs])
        known = discovery.found_keys()
        t2 = time.thread_time()
        nlrs, table = stage.reduce_with_known(discovery, seqs.__getitem__, K, known)
        t3 = time.thread_time()
    finally:
        stage.nlr = saved
    return t1 - t0, t3 - t2, (pass1, ([(x.ids, x.counts) for x in nlrs], stage.canonical_keys(table)))


def same_result(a, b):
    """Pass 1 equal as the kernel numbers it; pass 2 equal up to the numbering of the
    loops it made that were not known (its table is numbered by first creation)."""
    (n1a, k1a, pa), (n2a, k2a) = a
    (n1b, k1b, pb), (n2b, k2b) = b

    def arrays_equal(x, y):
        return len(x) == len(y) and all(np.array_equal(u[0], v[0]) and np.array_equal(u[1], v[1])
                                        for u, v in zip(x, y))
    if not (k1a == k1b and pa == pb and arrays_equal(n1a, n1b)):
        return False
    if k2a == k2b:
        return arrays_equal(n2a, n2b)
    mapping = {i: k2b.index(key) for i, key in enumerate(k2a) if key in k2b}
    if len(mapping) != len(k2a):
        return False
    remap = np.array([mapping[i] for i in range(len(k2a))] or [0], dtype=np.int64)
    return arrays_equal([(np.where(i < 0, -remap[np.maximum(-i - 1, 0)] - 1, i), c) for i, c in n2a], n2b)


def bench_real(run_dir, specs, K, repeat, check):
    from difftrace_mpi.kernels.nlr import nlr_reference
    streams = real_streams(run_dir, specs)
    print(f"run: {run_dir}, {len(next(iter(streams.values())))} traces, K={K}; CPU seconds of this thread, "
          f"median of {repeat}")
    print(f"{'filter':<12} {'events':>12} {'pass 1 (discover)':>26} {'pass 2 (known bodies)':>26}  check")
    for spec, seqs in streams.items():
        n = sum(len(s) for s in seqs)
        times, first = [], None
        for _ in range(repeat):         # only the first result is kept (for the check)
            t_1, t_2, result = nlr_passes(seqs, K)
            times.append((t_1, t_2))
            first = result if first is None else first
            del result
        t1 = statistics.median(t for t, _ in times)
        t2 = statistics.median(t for _, t in times)
        verdict = "not checked"
        if check:
            ref = nlr_passes(seqs, K, nlr_reference)
            verdict = "equal to nlr_reference" if same_result(first, ref[2]) else "DIFFERS from nlr_reference"
            verdict += f" (which takes {ref[0]:.2f} s + {ref[1]:.2f} s)"
        rate = lambda t: f"{n / t / 1e6:8.1f} M/s ({t:.3f} s)" if t > 0 else "-"
        print(f"{spec:<12} {n:>12,} {rate(t1):>26} {rate(t2):>26}  {verdict}")
        if check and verdict.startswith("DIFFERS"):
            raise SystemExit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--baseline-events", type=int, default=50_000,
                    help="prefix length given to the slow pure-Python baselines")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--real", metavar="RUN_DIR", help="time the NLR passes on this run's streams instead")
    ap.add_argument("--filters", nargs="+", default=["11.every", "11.mpi"], help="with --real (default: %(default)s)")
    ap.add_argument("--k", type=int, default=10, help="with --real: NLR bound (default 10)")
    ap.add_argument("--no-check", action="store_true", help="with --real: skip the nlr_reference run")
    args = ap.parse_args()
    if args.real:
        bench_real(args.real, args.filters, args.k, args.repeat, not args.no_check)
        return

    values = lulesh_like_trace(args.events)
    data = np.frombuffer(parlot_kernel.encode(values), dtype=np.uint8)
    small = values[:args.baseline_events]
    small_data = np.frombuffer(parlot_kernel.encode(small), dtype=np.uint8)
    decoded, status, _, _ = parlot_kernel.decode(data)
    assert status == 0 and np.array_equal(decoded, values)
    assert py_decode(small_data.tolist()) == small.tolist()
    raw = values.tobytes()

    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, "
          f"python {platform.python_version()}, numpy {np.__version__}")
    print(f"trace: {len(values):,} values (LULESH-like), ParLOT-compressed to {len(data):,} bytes "
          f"({len(values) * 2 / len(data):.0f}x)")
    rows = []

    t_kernel = median_time(lambda: parlot_kernel.decode(data), args.repeat)
    t_py = median_time(lambda: py_decode(small_data.tolist()), max(1, args.repeat // 2))
    t_raw = median_time(lambda: np.frombuffer(raw, dtype=np.uint16).copy(), args.repeat)
    k_rate, py_rate, raw_rate = len(values) / t_kernel, len(small) / t_py, len(values) / t_raw
    rows.append(("decode (Cython)", k_rate, f"{k_rate / py_rate:,.0f}x pure Python ({py_rate / 1e6:.2f} M/s); "
                                            f"{k_rate / raw_rate:.2f}x raw uint16 read ({raw_rate / 1e6:.0f} M/s)"))

    entries = values[values != 0].astype(np.int64)
    for K in (10, 50):
        t_kernel = median_time(lambda: nlr(entries, K, LoopTable()), args.repeat)
        small_entries = entries[:args.baseline_events].tolist()
        t_py = median_time(lambda: py_nlr(small_entries, K), 1)
        k_rate, py_rate = len(entries) / t_kernel, len(small_entries) / t_py
        ids, counts = nlr(entries[:args.baseline_events].copy(), K, LoopTable())
        assert list(zip(ids.tolist(), counts.tolist())) == py_nlr(small_entries, K)[0]
        rows.append((f"NLR K={K} (Cython)", k_rate, f"{k_rate / py_rate:,.0f}x pure Python ({py_rate / 1e6:.3f} M/s)"))

    print(f"\n{'kernel':<20} {'rate (median)':>18}  ratio against baseline (same run)")
    for name, rate, ratio in rows:
        print(f"{name:<20} {rate / 1e6:>12.1f} M/s  {ratio}")


if __name__ == "__main__":
    main()
