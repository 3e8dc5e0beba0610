"""A ParLOT thread file holding the same bytes as the same thread's file in an earlier run,
under the same names, is not decoded again: its events are the earlier trace's
(``readers.parlot.Decoded``, ``engine.reading.Reading``).  The results are those of
decoding every file; only the work differs."""
import dataclasses

import difftrace_mpi
import numpy as np
import pytest

from conftest import assert_same_h5
from difftrace_mpi import readers
from difftrace_mpi.readers import parlot as P

NAMES = ["main", "compute", "MPI_Send", "MPI_Recv", "MPI_Barrier"]
STEP = [2, 0, 3, 0, 4, 0]                               # compute, MPI_Send, MPI_Recv


def stream(steps, extra=()):
    """main { STEP x steps, then ``extra`` }, closed."""
    return [1] + STEP * steps + list(extra) + [0]


def write_run(d, pid0, streams, names=NAMES):
    """A run of ranks x threads: ``streams`` {(rank, thread): values}; one .info per rank."""
    d.mkdir(parents=True)
    for rank in sorted({r for r, _ in streams}):
        P.write_info(d / f"p.{pid0 + rank}.info", list(names(rank) if callable(names) else names))
        (d / f"p.{pid0 + rank}.rank").write_text(str(rank))
    for (rank, tid), values in streams.items():
        P.write_trace(d / f"p.{pid0 + rank}.{tid}", values)
    return d


def job(changed=None):
    """4 ranks x 2 threads; ``changed``: the (rank, thread) that calls MPI_Barrier once more."""
    return {(r, t): stream(6 + r + 3 * t, [5, 0] if (r, t) == changed else []) for r in range(4) for t in range(2)}


@pytest.fixture
def decodes(monkeypatch):
    """Counts the thread files decoded."""
    seen = []
    decode = P._decode_thread

    def counting(data, names, compressed, path, *narrow):
        seen.append(str(path))
        return decode(data, names, compressed, path, *narrow)

    monkeypatch.setattr(P, "_decode_thread", counting)
    return seen


def no_reuse(monkeypatch):
    monkeypatch.setitem(readers._BY_NAME, "parlot", dataclasses.replace(P.FORMAT, loads_after=False))


def analyze(normal, faulty, out, **kw):
    return difftrace_mpi.analyze(normal, faulty, filters=["11.every", "11.mpi"], attributes=["sing.noFreq"],
                                 linkage=["ward"], out=out, **kw)


def test_equal_thread_files_are_decoded_once_and_analysed_alike(tmp_path, decodes, monkeypatch):
    normal = write_run(tmp_path / "normal", 1000, job())
    faulty = write_run(tmp_path / "faulty", 2000, job(changed=(2, 1)))
    res = analyze(normal, faulty, tmp_path / "reused.h5")
    assert len(decodes) == 8 + 1                       # the normal run, and the one changed file
    assert any(p.endswith("p.2002.1") for p in decodes)
    assert res.verdict["culprits"][0]["rank"] == 2 and res.verdict["culprits"][0]["thread"] == 1

    decodes.clear()
    no_reuse(monkeypatch)
    analyze(normal, faulty, tmp_path / "decoded.h5")
    assert len(decodes) == 16
    assert_same_h5(tmp_path / "reused.h5", tmp_path / "decoded.h5")


def test_a_further_normal_run_reuses_the_faulty_runs_threads(tmp_path, decodes, monkeypatch):
    """More normal runs are read after the faulty one: each thread is compared with the
    faulty run's, so only the thread the fault changed is decoded again."""
    normal = write_run(tmp_path / "normal", 1000, job())
    faulty = write_run(tmp_path / "faulty", 2000, job(changed=(1, 0)))
    again = write_run(tmp_path / "again", 3000, job())
    analyze(normal, faulty, tmp_path / "reused.h5", also_normal=[again])
    assert sorted(p.rsplit("/", 1)[1] for p in decodes if "/again/" in p) == ["p.3001.0"]
    no_reuse(monkeypatch)
    analyze(normal, faulty, tmp_path / "decoded.h5", also_normal=[again])
    assert_same_h5(tmp_path / "reused.h5", tmp_path / "decoded.h5")


def test_the_same_bytes_under_other_names_are_decoded(tmp_path, decodes, monkeypatch):
    """Ids mean what the process's .info names: rank 3's faulty .info swaps two names, so
    its unchanged bytes are other calls, found as the difference."""
    swapped = NAMES[:2] + [NAMES[3], NAMES[2]] + NAMES[4:]
    normal = write_run(tmp_path / "normal", 1000, job())
    faulty = write_run(tmp_path / "faulty", 2000, job(), names=lambda rank: swapped if rank == 3 else NAMES)
    res = analyze(normal, faulty, tmp_path / "reused.h5")
    assert sorted(p.rsplit("/", 1)[1] for p in decodes if "/faulty/" in p) == ["p.2003.0", "p.2003.1"]
    assert res.verdict["culprits"][0]["rank"] == 3
    no_reuse(monkeypatch)
    analyze(normal, faulty, tmp_path / "decoded.h5")
    assert_same_h5(tmp_path / "reused.h5", tmp_path / "decoded.h5")


@pytest.mark.parametrize("damage", ["cut", "unnamed id", "unmatched return"])
def test_a_damaged_file_in_both_runs_gets_its_own_notes(tmp_path, damage):
    """A trace known from its twin's bytes has the twin's completeness and the notes its own
    file would give, naming its own files."""
    values = stream(40)
    if damage == "unnamed id":
        values = values[:7] + [9, 0] + values[7:]
    elif damage == "unmatched return":
        values = values[:7] + [0] + values[7:]
    data = P.encode_values(values)
    if damage == "cut":
        data = data[:-3]
    for d, pid in (("normal", 1000), ("faulty", 2000)):
        (tmp_path / d).mkdir()
        P.write_info(tmp_path / d / f"p.{pid}.info", NAMES)
        (tmp_path / d / f"p.{pid}.0").write_bytes(data)
    normal = P.read_parlot_thread(tmp_path / "normal" / "p.1000.0", tmp_path / "normal" / "p.1000.info", 0, 0)
    known = P.read_parlot_thread(tmp_path / "faulty" / "p.2000.0", tmp_path / "faulty" / "p.2000.info", 0, 0,
                                 earlier=normal)
    decoded = P.read_parlot_thread(tmp_path / "faulty" / "p.2000.0", tmp_path / "faulty" / "p.2000.info", 0, 0)
    assert known.events is None and decoded.events is not None and normal.events is not None
    assert np.array_equal(decoded.events, normal.events)
    assert known.complete == decoded.complete == normal.complete
    assert known.notes == decoded.notes and known.notes        # each damage gives a note
    assert all("p.2000" in n and "p.1000" not in n for n in known.notes)


def test_a_process_pair_names_are_compared_once(tmp_path, monkeypatch):
    """Threads of a process share its names: one comparison per pair of processes, not per
    thread (a large program's .info has thousands of names)."""
    threads = {(0, t): stream(5 + t) for t in range(4)}
    normal = readers.discover_run(write_run(tmp_path / "normal", 1000, threads)).refs
    faulty = readers.discover_run(write_run(tmp_path / "faulty", 2000, threads)).refs
    compared = []
    equal = np.array_equal
    monkeypatch.setattr(np, "array_equal", lambda a, b, **kw: compared.append(1) or equal(a, b, **kw))
    cache = {}
    earlier = [readers.load_trace(ref, cache) for ref in normal]
    again = [readers.load_trace(ref, cache, e) for ref, e in zip(faulty, earlier)]
    assert all(t.events is None for t in again) and len(compared) == 1


def test_other_bytes_are_decoded_whatever_came_before(tmp_path):
    a = write_run(tmp_path / "a", 1000, {(0, 0): stream(5)})
    b = write_run(tmp_path / "b", 2000, {(0, 0): stream(6)})
    first = P.read_parlot_thread(a / "p.1000.0", a / "p.1000.info", 0, 0)
    second = P.read_parlot_thread(b / "p.2000.0", b / "p.2000.info", 0, 0, earlier=first)
    assert second.events is not None and len(second.events) == len(first.events) + len(STEP)


@pytest.mark.integration
@pytest.mark.parametrize("ranks", [2, 3])
def test_reuse_across_mpi_ranks_gives_the_one_rank_file(tmp_path, ranks):
    """Under MPI a more normal run is sharded on its own, so a thread's faulty trace may sit
    on another rank than its third-run twin: decoded there, with the same results."""
    from conftest import run_cli
    normal = write_run(tmp_path / "normal", 1000, job())
    faulty = write_run(tmp_path / "faulty", 2000, job(changed=(3, 0)))
    # the third run's sizes differ (one rank's threads much longer), so its shards do too
    again = write_run(tmp_path / "again", 3000, {**job(), (0, 0): stream(400), (0, 1): stream(400)})
    outs = []
    for n in (1, ranks):
        out = tmp_path / f"r{n}.h5"
        res = run_cli("analyze", normal, faulty, "--also-normal", again, "--out", out, mpi=n)
        assert res.returncode == 0, res.stderr
        outs.append(out)
    assert_same_h5(*outs)
