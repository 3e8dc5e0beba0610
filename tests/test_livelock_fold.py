"""A livelock summarised while it is read (issue 36, item 7).

A livelocked thread's ParLOT file (an endless loop of one short unit, killed from outside)
decodes to billions of values from a few kilobytes.  The decoder keeps the first
repetitions of such a unit and counts the rest (``kernels.parlot.decode(fold_after=...)``),
so that the trace that matters most is read in bounded memory, with no cap on its length,
and the verdict still counts every repetition."""
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np

import pytest

from difftrace_mpi import config
from difftrace_mpi.engine.pipeline import analyze
from difftrace_mpi.kernels import parlot as K
from difftrace_mpi.readers import load_trace, discover_run
from difftrace_mpi.readers import parlot as P
from difftrace_mpi.stages.classify.grid import Grid

GRID = Grid(filters=("11.mpi",), attributes=("sing.noFreq",), linkages=("ward",))


def rebuilt(values, folds):
    """The stream the folds stand for: each fold's units put back before its position."""
    out, at = [], 0
    for position, period, units, _ in folds.tolist():
        out += [values[at:position], np.tile(values[position - period:position], units)]
        at = position
    return np.concatenate(out + [values[at:]])


def stream(rng, unit, reps, tail):
    head = rng.integers(0, 9, int(rng.integers(0, 20_000))).astype(np.uint16)
    return np.concatenate([head, np.tile(np.asarray(unit, np.uint16), reps), np.asarray(tail, np.uint16)])


@pytest.mark.parametrize("seed", range(12))
def test_folded_values_are_the_stream_with_fewer_repetitions(seed):
    rng = np.random.default_rng(seed)
    period = int(rng.integers(1, 33))
    unit = rng.integers(1, 6, period).astype(np.uint16)
    unit[rng.permutation(period)[:period // 2]] = 0             # as many returns as calls
    if period % 2:
        unit = np.concatenate([unit, [0]]) if np.count_nonzero(unit == 0) < (period + 1) // 2 else \
            np.concatenate([unit, [3]])
    reps = int(rng.integers(40_000, 120_000))
    tail = [] if seed % 3 == 0 else rng.integers(0, 9, int(rng.integers(1, 50))).tolist()
    values = stream(rng, unit, reps, tail)
    data = P.encode_values(values)
    plain, status, offset, none = K.decode(data)
    assert status == K.OK and np.array_equal(plain, values) and none.shape == (0, 4)
    kept, status2, offset2, folds = K.decode(data, 1 << 30, 1 << 16, 1 << 12)
    assert (status2, offset2) == (status, offset)
    assert len(folds) >= 1 and len(kept) < len(values) // 2
    assert np.array_equal(rebuilt(kept, folds), values)
    assert bool(folds[-1, 3]) == (not tail or len(kept) - folds[-1, 0] < folds[-1, 1])
    # a cut stream (a killed thread) is folded the same way up to its cut
    cut, status3, _, cut_folds = K.decode(data[:-1], 1 << 30, 1 << 16, 1 << 12)
    assert status3 == K.TRUNCATED
    assert np.array_equal(rebuilt(cut, cut_folds), K.decode(data[:-1])[0])


def test_short_repetitions_and_unbalanced_units_are_kept_whole():
    rng = np.random.default_rng(7)
    for values in (stream(rng, [5, 0], 20_000, [1, 0]),                  # below the threshold
                   stream(rng, [5, 6, 0], 200_000, []),                 # calls more than it returns
                   rng.integers(0, 60, 400_000).astype(np.uint16)):     # no repetition
        kept, status, _, folds = K.decode(P.encode_values(values), 1 << 30, 1 << 16, 1 << 12)
        assert status == K.OK and len(folds) == 0 and np.array_equal(kept, values)


def test_the_limit_counts_kept_values_only():
    values = np.concatenate([np.tile(np.array([4, 0], np.uint16), 5_000_000), np.arange(1, 3000, dtype=np.uint16)])
    data = P.encode_values(values)
    kept, status, _, folds = K.decode(data, 300_000, 1 << 16, 1 << 12)
    assert status == K.OK and len(kept) < 300_000 and np.array_equal(rebuilt(kept, folds), values)
    part, status, offset, _ = K.decode(data, 5_000, 1 << 16, 1 << 12)
    assert status == K.LIMIT and len(part) <= 5_000 and np.array_equal(part, kept[:len(part)])
    assert 0 <= offset < len(data)


def killed(data):
    """The bytes of a thread file cut where a killed tracer stops: after its last whole
    ZE group, without the partial group and trailer that end a finished file."""
    starts, pos = [], 0
    while pos < len(data) - 1:
        starts.append(pos)
        pos += 1 + bin(data[pos]).count("1")
    return data[:starts[-1]]


NAMES = ["main", "MPI_Init", "compute", "MPI_Allreduce[count=1,op=MPI_SUM]", "poll", "MPI_Iprobe", "MPI_Finalize"]
STEP = [3, 0, 4, 0]


def write_livelock_pair(d, spins, ranks=4, culprit=2, steps=50):
    """A normal run and a run where ``culprit`` spins ``spins`` times in poll + MPI_Iprobe
    after ``steps`` time steps while the others wait in the next MPI_Allreduce (killed)."""
    for name, stop in (("normal", False), ("livelock", True)):
        run = d / name
        run.mkdir(parents=True)
        for r in range(ranks):
            pid = 100 + r
            P.write_info(run / f"p.{pid}.info", NAMES)
            (run / f"p.{pid}.rank").write_text(f"{r}\n")
            if not stop:
                values = np.array([1, 2, 0] + STEP * (2 * steps) + [7, 0, 0], np.uint16)
                P.write_trace(run / f"p.{pid}.0", values)
                (run / f"p.{pid}.end").write_text("how=finalized\nthread=0\n")
                continue
            head = np.array([1, 2, 0] + STEP * steps + [3, 0], np.uint16)
            spin = np.tile(np.array([5, 6, 0, 0], np.uint16), spins) if r == culprit else np.array([4], np.uint16)
            (run / f"p.{pid}.0").write_bytes(killed(P.encode_values(np.concatenate([head, spin]))))
            (run / f"p.{pid}.end").write_text("how=signal\nsignal=SIGTERM\nthread=0\n")
    return d / "normal", d / "livelock"


SPINS = (config.LIVELOCK_FOLD_AFTER // 4) * 2 + 3   # twice the repetition the reader keeps whole


def spins_in(path):
    """The poll calls a thread file holds (decoded whole, nothing summarised)."""
    return int(np.count_nonzero(K.decode(path.read_bytes())[0] == 5))


def test_a_livelocked_thread_is_read_summarised(tmp_path):
    _, faulty = write_livelock_pair(tmp_path, SPINS)
    ref = next(r for r in discover_run(faulty).refs if r.rank == 2)
    trace = load_trace(ref)
    assert len(trace.events) < config.LIVELOCK_FOLD_KEEP + 1000
    kept_spins = int(np.count_nonzero(trace.events == 5))
    assert kept_spins + trace.repeated_at_end // 4 == spins_in(faulty / "p.102.0")
    assert any("summarised while read" in n and f"{trace.repeated_at_end // 4:,} times" in n for n in trace.notes)
    others = [load_trace(r) for r in discover_run(faulty).refs if r.rank != 2]
    assert all(t.repeated_at_end == 0 and "summarised" not in " ".join(t.notes) for t in others)


def test_the_verdict_counts_every_repetition(tmp_path):
    normal, faulty = write_livelock_pair(tmp_path, SPINS)
    v = analyze(normal, faulty, GRID, lattices=False).verdict
    first = v["culprits"][0]
    assert v["kind"] == "hang" and (first["rank"], first["status"]) == (2, "livelock"), v["summary"]
    counted = int(first["why"].split(" times")[0].rsplit("(", 1)[1].replace(",", ""))
    assert counted in (spins_in(faulty / "p.102.0") - 1, spins_in(faulty / "p.102.0")), first["why"]  # whole units
    assert v["where"]["iteration"] == 51


def test_the_failed_run_alone_counts_every_repetition(tmp_path):
    from difftrace_mpi.engine.alone import analyze_alone
    _, faulty = write_livelock_pair(tmp_path, SPINS)
    first = analyze_alone(faulty).verdict["culprits"][0]
    assert (first["rank"], first["status"]) == (2, "livelock"), first
    counted = int(first["why"].split(" times")[0].rsplit("(", 1)[1].replace(",", ""))
    assert counted in (spins_in(faulty / "p.102.0") - 1, spins_in(faulty / "p.102.0")), first["why"]


def test_renumbered_ranks_renumber_the_livelock(tmp_path):
    normal, faulty = write_livelock_pair(tmp_path, SPINS, culprit=0)
    first = analyze(normal, faulty, GRID, lattices=False).verdict["culprits"][0]
    assert (first["rank"], first["status"]) == (0, "livelock")


@pytest.mark.integration
@pytest.mark.parametrize("alone", [False, True])
def test_a_livelock_of_a_billion_events_stays_small(tmp_path, alone):
    """The issue's case: a thread file of a few kilobytes that decodes to 2^30 values and
    more (the reader refused it before, or grew past every budget): analysed in a child
    process, alone and paired, in well under 2 GiB."""
    # written by another process: a child's peak RSS counts its parent's at the fork
    subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
                    f"import pathlib, test_livelock_fold as t; t.write_livelock_pair(pathlib.Path({str(tmp_path)!r}), "
                    f"1 << 28)"], check=True, timeout=600)
    normal, faulty = tmp_path / "normal", tmp_path / "livelock"
    assert (faulty / "p.102.0").stat().st_size < 100_000
    args = [str(faulty)] if alone else [str(normal), str(faulty)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    done = subprocess.run([sys.executable, "-m", "difftrace_mpi", "analyze", *args],
                          capture_output=True, text=True, timeout=600)
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert done.returncode == 0, done.stderr[-2000:]
    counted = int(done.stdout.split("kept repeating poll and MPI_Iprobe (")[1].split(" times")[0].replace(",", ""))
    # the killed file lacks its last group: 4 words, each at most 65535 values
    assert (1 << 28) - 65536 <= counted <= 1 << 28, done.stdout[:3000]
    assert max(peak_kib, before) < 2 * 1024 * 1024 or peak_kib <= before, peak_kib
