"""Synthetic LULESH-like ParLOT runs for scale tests and benchmarks.

    .venv/bin/python bench/synth_lulesh.py OUTDIR --ranks 4096 --threads 8 --steps 20 [--faulty]

Writes OUTDIR as a ParLOT run: per process ``lulesh.<pid>.info``, ``lulesh.<pid>.rank``
(the MPI rank, as our tracer records it) and one compressed file per thread.

Shape of a rank (P = ranks on a cube of side s, LULESH's domain decomposition):
  thread 0: main > MPI_Init, MPI_Comm_rank, MPI_Comm_size, then per time step
            LagrangeLeapFrog > LagrangeNodal > (CommRecv > MPI_Irecv x n, CommSend >
            MPI_Isend x n, GOMP_parallel x 2, CommSBN > MPI_Waitall), LagrangeElements >
            GOMP_parallel x 3, CalcTimeConstraintsForElems > MPI_Allreduce; MPI_Finalize.
            n = number of face/edge/corner neighbours of the rank in the cube (7 to 26):
            boundary ranks form LULESH's natural equivalence classes.
  threads 1..T-1: per step, the outlined OpenMP regions with their kernel calls.

With --faulty, three traces are perturbed (and reported on stdout):
  * rank ``hang_rank`` thread 0 stops inside MPI_Waitall at step steps//2 (its worker
    threads a step later), as a hung rank traced by our tracer leaves it when the job's
    time limit kills it: complete files that end with calls still open;
  * rank ``extra_rank`` thread ``extra_thread`` calls CalcHourglassControl once more in
    one step (a harmless extra call);
  * rank ``slow_rank`` thread 0 does one extra Allreduce retry in the last step.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from difftrace_mpi.readers import parlot  # noqa: E402

NAMES = ["main", "MPI_Init", "MPI_Comm_rank", "MPI_Comm_size", "LagrangeLeapFrog", "LagrangeNodal",
         "CommRecv", "MPI_Irecv", "CommSend", "MPI_Isend", "GOMP_parallel", "CommSBN", "MPI_Waitall",
         "LagrangeElements", "CalcTimeConstraintsForElems", "MPI_Allreduce", "MPI_Finalize",
         "CalcForceForNodes._omp_fn.0", "CalcAccelerationForNodes._omp_fn.1", "CalcKinematicsForElems._omp_fn.2",
         "CalcQForElems._omp_fn.3", "ApplyMaterialPropertiesForElems._omp_fn.4", "CalcElemVolume",
         "CalcHourglassControl", "CalcMonotonicQGradients", "EvalEOSForElems", "memcpy", "GOMP_barrier"]
ID = {name: i + 1 for i, name in enumerate(NAMES)}
OMP_REGIONS = [("CalcForceForNodes._omp_fn.0", ["CalcElemVolume", "CalcHourglassControl"]),
               ("CalcAccelerationForNodes._omp_fn.1", ["memcpy"]),
               ("CalcKinematicsForElems._omp_fn.2", ["CalcElemVolume"]),
               ("CalcQForElems._omp_fn.3", ["CalcMonotonicQGradients"]),
               ("ApplyMaterialPropertiesForElems._omp_fn.4", ["EvalEOSForElems", "EvalEOSForElems"])]


def call(name, *inner):
    return [ID[name], *[v for part in inner for v in part], 0]


def neighbours(rank, side):
    x, y, z = rank % side, (rank // side) % side, rank // (side * side)
    count = 0
    for dx in (-1, 0, 1):
        for dy in (-1, 0, 1):
            for dz in (-1, 0, 1):
                if (dx, dy, dz) != (0, 0, 0) and 0 <= x + dx < side and 0 <= y + dy < side and 0 <= z + dz < side:
                    count += 1
    return count


def master_step(n_nb, stop_in_waitall=False, retry=False):
    """One time step of thread 0 (a list of events); with stop_in_waitall the step ends
    inside MPI_Waitall with every enclosing call still open."""
    recv = call("CommRecv", *[call("MPI_Irecv")] * n_nb)
    send = call("CommSend", *[call("MPI_Isend")] * n_nb)
    if stop_in_waitall:
        return [ID["LagrangeLeapFrog"], ID["LagrangeNodal"], *recv, *send, *call("GOMP_parallel") * 2,
                ID["CommSBN"], ID["MPI_Waitall"]]
    allreduce = call("MPI_Allreduce") * (2 if retry else 1)
    nodal = call("LagrangeNodal", recv, send, call("GOMP_parallel"), call("GOMP_parallel"),
                 call("CommSBN", call("MPI_Waitall")))
    elements = call("LagrangeElements", *[call("GOMP_parallel")] * 3)
    return call("LagrangeLeapFrog", nodal, elements, call("CalcTimeConstraintsForElems", allreduce))


def worker_step(extra=False):
    out = []
    for region, kernels in OMP_REGIONS:
        inner = [call(k) for k in kernels]
        if extra and region.startswith("CalcForce"):
            inner.append(call("CalcHourglassControl"))
        out += call(region, *inner, call("GOMP_barrier"))
    return out


def rank_traces(rank, threads, steps, side, perturb):
    n_nb = neighbours(rank, side)
    hang = perturb.get("hang_rank") == rank
    master = [ID["main"], *call("MPI_Init"), *call("MPI_Comm_rank"), *call("MPI_Comm_size")]
    for step in range(steps):
        if hang and step == steps // 2:
            master += master_step(n_nb, stop_in_waitall=True)
            break
        master += master_step(n_nb, retry=perturb.get("slow_rank") == rank and step == steps - 1)
    else:
        master += call("MPI_Finalize") + [0]
    out = [np.array(master, dtype=np.uint16)]
    worker_steps = steps // 2 + 1 if hang else steps
    for t in range(1, threads):
        body = []
        for step in range(worker_steps):
            body += worker_step(extra=perturb.get("extra_rank") == rank and perturb.get("extra_thread") == t
                                and step == steps // 3)
        out.append(np.array(body, dtype=np.uint16))
    return out


def write_run(out_dir, ranks, threads, steps, faulty=False, base_pid=20000):
    side = round(ranks ** (1 / 3))
    if side ** 3 != ranks:
        side = int(np.ceil(ranks ** (1 / 3)))
    perturb = {}
    if faulty:
        perturb = {"hang_rank": ranks // 3, "slow_rank": ranks - 2}
        if threads > 1:              # the extra call goes into a worker thread
            perturb.update({"extra_rank": (2 * ranks) // 3, "extra_thread": min(3, threads - 1)})
    os.makedirs(out_dir, exist_ok=True)
    info_text = "+\n/synthetic/lulesh\n" + "".join(name + "\n" for name in NAMES)
    cache = {}
    for rank in range(ranks):
        pid = base_pid + 7 * rank            # pids do not follow ranks' order after a shuffle
        prefix = os.path.join(out_dir, f"lulesh.{pid}")
        with open(prefix + ".info", "w") as fh:
            fh.write(info_text)
        with open(prefix + ".rank", "w") as fh:
            fh.write(f"{rank}\n")
        key = (neighbours(rank, side), rank in perturb.values())
        if key[1] or key not in cache:
            encoded = [parlot.encode_values(values) for values in rank_traces(rank, threads, steps, side, perturb)]
            if not key[1]:
                cache[key] = encoded
        else:
            encoded = cache[key]
        for t, data in enumerate(encoded):
            with open(f"{prefix}.{t}", "wb") as fh:
                fh.write(data)
    return perturb


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--faulty", action="store_true")
    args = ap.parse_args()
    perturb = write_run(args.out, args.ranks, args.threads, args.steps, args.faulty)
    print(perturb if perturb else "no perturbation")


if __name__ == "__main__":
    main()
