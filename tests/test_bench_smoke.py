"""The benchmarks run, at tiny sizes, and their built-in checks pass (so they cannot rot).

The lattice benchmark is run once as it is (with the ``concepts`` baseline if that
bench-only package is installed) and once with ``concepts`` made unimportable, which must
skip the baseline with a message."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
sys.path.insert(0, BENCH)          # the bench modules, for the tests that call them directly

pytestmark = pytest.mark.integration     # every test here starts processes


def run_bench(script, *args, env=None):
    proc = subprocess.run([sys.executable, os.path.join(BENCH, script), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.startswith("machine: "), proc.stdout
    return proc.stdout


def table_rows(out, n):
    return [line for line in out.splitlines() if line.split()[:1] == [str(n)]]


def checked(row):
    """The JSM row's check passed: values equal to pdist's, and the dendrogram heights
    equal to SciPy's (or differing only after tied distances, see bench_jsm.py)."""
    return "| values equal, heights " in row and row.endswith(": OK")


def test_bench_lattice_smoke():
    out = run_bench("bench_lattice.py", "--sizes", "200", "--repeat", "1", "--baseline-timeout", "60")
    rows = table_rows(out, 200)
    assert len(rows) == 1, out
    assert rows[0].endswith(": OK") and "merge == build" in rows[0], out
    if "SKIPPED" not in out:
        assert "same count, same concepts" in rows[0], out


def test_bench_lattice_without_concepts(tmp_path):
    fake = tmp_path / "concepts"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('hidden for the test')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    out = run_bench("bench_lattice.py", "--sizes", "200", "--repeat", "1", env=env)
    assert "baseline: SKIPPED: the 'concepts' package is not installed" in out, out
    rows = table_rows(out, 200)
    assert len(rows) == 1 and rows[0].endswith("merge == build: OK"), out


def test_bench_jsm_smoke():
    out = run_bench("bench_jsm.py", "--sizes", "200", "250", "--repeat", "1", "--classes", "16",
                    "--baseline-max", "220")
    rows = table_rows(out, 200)
    assert len(rows) == 2, out                      # table 1 (distinct) and table 2 (classes)
    assert " direct " in rows[0] and checked(rows[0]), out
    assert " 16 " in rows[1] and checked(rows[1]), out
    rows = table_rows(out, 250)
    assert len(rows) == 2 and all("baseline skipped" in r for r in rows), out


def test_bench_jsm_row_blocks_smoke():
    out = run_bench("bench_jsm.py", "--sizes", "200", "--repeat", "1", "--classes", "16",
                    "--direct-max", "100", "--block", "64")
    rows = table_rows(out, 200)
    assert len(rows) == 2, out
    assert " rows/64 " in rows[0] and checked(rows[0]), out
    assert " 16 " in rows[1] and " rows/64 " in rows[1] and checked(rows[1]), out


def test_bench_real_quick(tmp_path):
    """The real-scale benchmark unpacks the real LULESH 8 x 2 runs and the livelock pair,
    analyses both pairs on 1 and 2 MPI ranks with the expected verdicts, and writes a small
    synthetic cube of real shape; its figures add up."""
    out = run_bench("bench_real.py", "--quick", "--cache", str(tmp_path), "--json")
    report = json.loads(out[out.index("\n{") + 1:])
    runs = report["runs"]
    assert runs["l8x2_normal"]["events"] == runs["l8x2_normal2"]["events"] == 111_838_416, runs
    assert runs["l8x2_normal"]["traces"] == runs["l8x2_normal"]["distinct"] == 16, runs
    rows = {(r["pair"], r["mpi_ranks"]): r for r in report["analyze"]}
    assert sorted(rows) == [("8x2-identical", 1), ("8x2-identical", 2), ("livelock", 1), ("livelock", 2)], rows
    for (pair, ranks), row in rows.items():
        normal, faulty = (("l8x2_normal", "l8x2_normal2") if pair == "8x2-identical"
                          else ("zoo:minilulesh-8/normal", "zoo:minilulesh-8/livelock"))
        assert row["events"] == runs[normal]["events"] + runs[faulty]["events"], row
        assert len(row["peak_rss_mib_per_rank"]) == ranks and min(row["peak_rss_mib_per_rank"]) > 0, row
        assert row["cpu_s"] > 0 and row["events_per_cpu_s"] > 0, row
        assert "reading traces" in row["stages"], row
        assert row["as_expected"], row          # none for the identical runs; hang, rank 5 thread 0 for the livelock
    assert rows[("livelock", 1)]["verdict"] == "hang" and rows[("livelock", 1)]["culprit"] == "rank 5 thread 0"
    (synth,) = report["synthetic"]              # a 5^3 cube from the 64-rank run: 64 + 1 distinct traces
    assert synth["side"] == 5 and synth["traces"] == 2 * 125 and synth["distinct"] == 65, synth
    assert "| 8x2-identical | 2 |" in out and "| outside the steps" in out, out



def test_bench_real_takes_the_rank_counts_in_turn(tmp_path, monkeypatch):
    """A pair's 1- and 2-rank runs alternate (1, 2, 1, 2, ...), so a drift of the machine's
    speed during the measurement hits both alike; each rank count gets its own row of
    medians."""
    import bench_real
    order = []

    def fake_run(normal, faulty, ranks, out_h5, limit_s):
        order.append(ranks)
        wall = {1: [5.0, 9.0, 5.2], 2: [3.0, 2.8, 7.0]}[ranks][order.count(ranks) - 1]
        timings = {f"{bench_real.RSS_KEY}{r}": 100.0 * (r + 1) for r in range(ranks)} | {"reading traces": wall / 2}
        return wall, wall, timings, None, {"kind": "crash", "culprits": [{"rank": 3, "thread": 0}]}
    monkeypatch.setattr(bench_real, "run_analyze", fake_run)
    monkeypatch.setattr(bench_real, "group_steps", lambda busy, add: {})
    rows = bench_real.bench_pair("p", "n", "f", {"events": 1000}, [1, 2], 3, tmp_path, 60, ("crash", "rank 3 thread 0"))
    assert order == [1, 2, 1, 2, 1, 2]
    assert [(r["mpi_ranks"], r["wall_s"], r["peak_rss_mib_per_rank"]) for r in rows] == [(1, 5.2, [100.0]),
                                                                                       (2, 3.0, [100.0, 200.0])]
    assert all(r["as_expected"] for r in rows)

def test_synthetic_cube_with_every_trace_distinct(tmp_path):
    """synth_real.py --distinct: every rank's trace differs from every other (by name hashes,
    as bench_real counts them), the MPI calls are untouched, and the swapped rank of the
    faulty run is renamed like its place, so the twins stay equal."""
    import bench_real
    import synth_real
    src = bench_real.unpack(tmp_path, "l64x1_normal")
    segv = bench_real.unpack(tmp_path, "l64x1_segv")
    # a side-5 cube copies the 64 ranks' traces (all distinct) onto 125 ranks
    synth_real.make_cube(src, tmp_path / "plain", 5)
    plain = bench_real.count_run(tmp_path, tmp_path / "plain")
    m = synth_real.make_cube(src, tmp_path / "normal", 5, distinct=True)
    normal = bench_real.count_run(tmp_path, tmp_path / "normal")
    assert len(plain["traces"]) == len(normal["traces"]) == 125
    assert plain["distinct"] <= 64 and normal["distinct"] == 125, (plain["distinct"], normal["distinct"])
    assert len(m["variants"]) == 7 and not any(n.startswith("MPI_") for n in m["variants"])   # ranks 0-124: 7 bits
    f = synth_real.make_cube(src, tmp_path / "faulty", 5, swap=(segv, 37), distinct=True)
    assert f["variants"] == m["variants"]
    faulty = bench_real.count_run(tmp_path, tmp_path / "faulty")
    centre = f["swap"][2]
    same = [key for key, (_, digest) in normal["traces"].items() if faulty["traces"][key][1] == digest]
    assert sorted(same) == sorted(k for k in normal["traces"] if k != f"{centre}.0")
    info = (tmp_path / "faulty" / f"parlot.vm.{100000 + centre}.info").read_text(errors="surrogateescape")
    renamed = {n for n in m["variants"] if f"{n}{synth_real.VARIANT}" in info.split("\n")}
    assert renamed == {n for b, n in enumerate(m["variants"]) if centre >> b & 1}



def test_bench_lattice_tree_smoke(tmp_path):
    """The lattice tree replayed on 1 to 8 simulated ranks over the real LULESH 8 x 2 hang
    pair gives the one-rank lattices every time, and its schedule adds up: the critical
    path is at least the slowest rank's own work and at most all ranks' work."""
    out = run_bench("bench_lattice_tree.py", "--cache", str(tmp_path), "--pairs", "8x2-hang",
                    "--ranks", "1", "2", "3", "8", "--measure", "--json")
    report = json.loads(out[out.index("\n{") + 1:])["8x2-hang"]
    assert sorted(report, key=int) == ["1", "2", "3", "8"], report
    for ranks, row in report.items():
        assert row["same"], (ranks, row)
        assert max(row["local"], row["tree"]) <= row["critical"] + 1e-9 and row["critical"] <= row["work"] + 1e-9, row
