"""Both NLR passes over a real run, three ways: the filtered copy of every trace without
the kernel's chunk memo, the filtered copy with it, and the trace itself with the
filter's flags (``filters.nlr_input``: the kernel filters a chunk at a time, and not at
all where a chunk repeats).  Prints CPU seconds of this thread per pass (median of
``--repeat``), events (the traces' own, returns included) per CPU second, and checks
that the three give the same NLRs and loop bodies.

    .venv/bin/python bench/bench_nlr.py RUN_DIR [RUN_DIR ...] [--filters 11.every 11.mpi] [--k 10]

Function ids are numbered over every run given (as the pipeline's global ids), so chunks
repeat across traces and runs as they do in an analysis.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from difftrace_mpi.kernels import nlr as kernel  # noqa: E402
from difftrace_mpi.readers import discover_run, load_trace  # noqa: E402
from difftrace_mpi.stages.model import filters  # noqa: E402
from difftrace_mpi.stages.model import nlr as stage  # noqa: E402


def global_traces(run_dirs):
    """(uint16 or int32 event arrays in global ids, global names) of every trace of the runs."""
    ids, traces, cache = {}, [], {}
    for run_dir in run_dirs:
        for ref in discover_run(run_dir).refs:
            trace = load_trace(ref, cache)
            mapping = np.array([ids.setdefault(str(n), len(ids)) for n in trace.names], dtype=np.int32)
            traces.append(mapping[np.asarray(trace.events)])
    names = sorted(ids, key=ids.get)
    dtype = np.uint16 if len(names) <= 65536 else np.int32
    return [t.astype(dtype) for t in traces], names


def passes(traces, names, spec, K, way):
    """Both passes as nlr_step runs them on one rank; returns (t1, t2, result)."""
    mask = filters.keep_mask(names, spec)
    buffer, scratch = filters.FilterBuffer(), kernel.Scratch()
    kernel.memo_settings(enabled=way != "filtered, no memo")

    def seq(i):
        if way == "kept events":
            return filters.nlr_input(traces[i], names, spec, mask, buffer)
        return filters.apply_filter(traces[i], names, spec, mask, buffer)
    try:
        t0 = time.thread_time()
        discovery = stage.discover((seq(i) for i in range(len(traces))), K, None, scratch)
        t1 = time.thread_time()
        known = discovery.found_keys()
        t2 = time.thread_time()
        nlrs, table = stage.reduce_with_known(discovery, seq, K, known, scratch)
        t3 = time.thread_time()
    finally:
        kernel.memo_settings(enabled=True)
    result = ([(n.ids.tolist(), n.counts.tolist()) for n in nlrs], stage.canonical_keys(table))
    return t1 - t0, t3 - t2, result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR")
    ap.add_argument("--filters", nargs="+", default=["11.every", "11.mpi"])
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    traces, names = global_traces(args.runs)
    n = sum(len(t) for t in traces)
    print(f"{len(traces)} traces, {n:,} events; K={args.k}; CPU s of this thread, median of {args.repeat}")
    for text in args.filters:
        spec = filters.parse_filter(text)
        first = None
        for way in ("filtered, no memo", "filtered", "kept events"):
            times = []
            for _ in range(args.repeat):
                t1, t2, result = passes(traces, names, spec, args.k, way)
                times.append((t1, t2))
            t1 = statistics.median(t for t, _ in times)
            t2 = statistics.median(t for _, t in times)
            same = "" if first is None else ("  same" if result == first else "  DIFFERS")
            first = result if first is None else first
            print(f"{text:<10} {way:<18} pass 1 {t1:6.3f} s  pass 2 {t2:6.3f} s  "
                  f"{n / max(t1 + t2, 1e-9) / 1e6:7.1f} M events/CPU s (both){same}")
            if same == "  DIFFERS":
                raise SystemExit(1)


if __name__ == "__main__":
    main()
