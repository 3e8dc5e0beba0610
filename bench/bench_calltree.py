#!/usr/bin/env python3
"""Call-tree loop folding against the flat NLR, on the same traces in one process
(issue 12, item 4): time and output size.

    .venv/bin/python bench/bench_calltree.py [RUN_DIR ...] [--repeat N] [--steps N]

* **flat**: the paper's NLR of each trace's call sequence (returns dropped, as the
  ``11.every`` filter does), bound K = 10, with a fresh loop table per trace;
* **tree**: the children of every call (``kernels.nlr.call_tree``), each distinct list of
  children folded once (lists compared by content: a function called a thousand times
  with the same callees is folded once), bound K = ``config.CALLTREE_K``, no bound below.

Size: tokens of the folded sequences plus the loop bodies; for the tree, of the distinct
child lists only (the tree is shared where subtrees repeat).  Inputs: ParLOT runs (every
trace), default the zoo's minilulesh-8 normal run, plus a synthetic LULESH-like run of
``--steps`` time steps (bench/synth_lulesh.py).  Medians of ``--repeat`` runs.
"""
import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchutil import machine_line, timed                       # noqa: E402
from difftrace_mpi import config                                # noqa: E402
from difftrace_mpi.kernels.nlr import LoopTable, call_tree, nlr  # noqa: E402
from difftrace_mpi.readers import load_run                      # noqa: E402


def flat(traces, K=config.NLR_K):
    size = 0
    for ev in traces:
        table = LoopTable()
        ids, _ = nlr(np.ascontiguousarray(ev[ev != 0], dtype=np.int32), K, table, False)
        size += len(ids) + sum(len(table.body(i)[0]) for i in range(len(table)))
    return size


def tree(traces, K=config.CALLTREE_K):
    size = 0
    for ev in traces:
        _, offsets, children = call_tree(np.ascontiguousarray(ev, dtype=np.int32))
        seen = {}
        raw = children.tobytes()
        for f in range(len(offsets) - 1):
            a, b = int(offsets[f]), int(offsets[f + 1])
            if b - a < 2:
                size += b - a
                continue
            key = raw[4 * a:4 * b]
            if key in seen:
                continue
            table = LoopTable()
            ids, _ = nlr(children[a:b], K, table, False)
            seen[key] = len(ids) + sum(len(table.body(i)[0]) for i in range(len(table)))
            size += seen[key]
    return size


def traces_of(run_dir):
    run = load_run(run_dir)
    out = []
    for t in run.traces:
        out.append(np.asarray(t.events, dtype=np.int32))
    return out


def synthetic(steps):
    import synth_lulesh
    out = []
    for rank in range(2):
        for events in synth_lulesh.rank_traces(rank, 2, steps, 2, perturb={}):
            out.append(np.asarray(events, dtype=np.int32))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", type=Path,
                    default=[ROOT / "bench" / "zoo" / "traces" / "minilulesh-8" / "normal"])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--steps", type=int, default=2000, help="time steps of the synthetic run (0: none)")
    args = ap.parse_args(argv)
    print(machine_line())
    inputs = [(str(r.relative_to(ROOT) if r.is_absolute() and ROOT in r.parents else r), traces_of(r))
              for r in args.runs]
    if args.steps:
        try:
            inputs.append((f"synthetic LULESH-like, {args.steps} steps", synthetic(args.steps)))
        except (AttributeError, TypeError, ValueError) as exc:      # its generator's interface
            print(f"(synthetic input skipped: {exc})")
    print(f"{'input':<46} {'events':>11} {'flat s':>8} {'tree s':>8} {'tree/flat':>9} "
          f"{'flat size':>10} {'tree size':>10} {'size ratio':>10}")
    for label, traces in inputs:
        events = sum(len(t) for t in traces)
        t_flat, s_flat = timed(lambda: flat(traces), args.repeat)
        t_tree, s_tree = timed(lambda: tree(traces), args.repeat)
        print(f"{label[:46]:<46} {events:>11,} {t_flat:>8.3f} {t_tree:>8.3f} {t_tree / t_flat:>9.2f} "
              f"{s_flat:>10,} {s_tree:>10,} {s_tree / max(s_flat, 1):>10.3f}")


if __name__ == "__main__":
    main()
