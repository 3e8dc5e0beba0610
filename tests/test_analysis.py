"""End to end on the bundled odd/even examples (paper section II.G), one rank."""
import json

import h5py
import numpy as np
import pytest

from difftrace_mpi.stages.model import nlr
from difftrace_mpi.stages.classify.grid import Grid
from difftrace_mpi.engine.pipeline import analyze
from difftrace_mpi.errors import DiffTraceError
from difftrace_mpi.stages.classify.lattice import Lattice
from difftrace_mpi.results import LatticeRef
from difftrace_mpi.stages.classify.jsm import jaccard_from_lattice
from difftrace_mpi import store

from conftest import EXAMPLES, SHARED_DATA, assert_same_h5, run_cli


def mpi_tokens(res, run, rank, thread=0):
    ids, counts = res.nlr_of("11.mpi.K10", run, res.objects.index((rank, thread)))
    return nlr.tokens(nlr.NLR(ids, counts), res.names)


def test_swapbug_process_5_first_in_best_row(swap):
    best = swap.rows[0]
    assert best.top_processes[0][0] == 5
    assert best.top_threads[0][0] == (5, 0)
    assert [r.bscore for r in swap.rows] == sorted(r.bscore for r in swap.rows)
    assert best.bscore < 1.0


def test_swapbug_diffnlr_of_5(swap):
    head = [("MPI_Init", 0), ("MPI_Comm_rank", 0), ("MPI_Comm_size", 0)]
    assert mpi_tokens(swap, 0, 5) == head + [("L1", 16), ("MPI_Finalize", 0)]
    assert mpi_tokens(swap, 1, 5) == head + [("L1", 7), ("L0", 9), ("MPI_Finalize", 0)]
    loops = swap.combos["11.mpi.K10"].loops
    body = lambda i: [swap.names[x] for x in loops[i][0]]  # noqa: E731
    assert body(0) == ["MPI_Send", "MPI_Recv"] and body(1) == ["MPI_Recv", "MPI_Send"]


def test_dlbug_process_5_in_top_3(dl):
    assert 5 in [r for r, _ in dl.rows[0].top_processes[:3]]


def test_dlbug_trace_5_stops_after_l1_7(dl):
    faulty = mpi_tokens(dl, 1, 5)
    assert ("MPI_Finalize", 0) not in faulty
    at = faulty.index(("L1", 7))
    assert faulty[at + 1:] in ([], [("MPI_Recv", 0)])     # stuck in the receive it entered
    assert not dl.complete[1, dl.objects.index((5, 0))]
    assert ("MPI_Finalize", 0) in mpi_tokens(dl, 0, 5)


@pytest.mark.integration
def test_run_against_itself_has_no_difference(tmp_path):
    res = analyze(EXAMPLES / "normal", EXAMPLES / "normal")
    assert res.no_difference
    for combo in res.combos.values():
        for setting in combo.attrs.values():
            assert not setting.thread.diff.any() and not setting.process.diff.any()
    out = run_cli("analyze", EXAMPLES / "normal", EXAMPLES / "normal")
    assert out.returncode == 0 and "No difference" in out.stdout


def test_lattice_path_equals_direct_jsm(swap):
    for combo in swap.combos.values():
        for setting in combo.attrs.values():
            for run in (0, 1):
                assert isinstance(setting.lattices[run], LatticeRef)        # kept in the file's form
                lattice = setting.lattice(run)
                assert isinstance(lattice, Lattice)
                objs = np.arange(len(swap.objects))
                via_lattice = jaccard_from_lattice(lattice, objs)
                assert np.array_equal(via_lattice, (setting.thread.normal, setting.thread.faulty)[run])


@pytest.mark.integration
def test_hdf5_and_json_outputs(tmp_path, swap):
    path = tmp_path / "r.h5"
    store.write(swap, path)
    with pytest.raises(DiffTraceError, match="--force"):
        store.write(swap, path)
    with store.read(path) as stored:
        assert stored.rows[0].top_processes[0][0] == 5
        assert [r.as_dict() for r in stored.rows] == [r.as_dict() for r in swap.rows]
        ids, counts = stored.nlr_of("11.mpi.K10", 1, stored.object_index((5, 0)))
        assert nlr.token_labels(nlr.NLR(ids, counts), stored.names)[3:5] == ["L1^7", "L0^9"]
    with h5py.File(path, "r") as f:       # the documented layout: sort tiers as columns
        for col in ("structured", "localised"):
            assert f["ranking"][col].tolist() == [getattr(r, col) for r in swap.rows]
    out = run_cli("analyze", EXAMPLES / "normal", EXAMPLES / "swapbug", "--json", "--filters", "11.mpi",
                  "--attributes", "sing.noFreq", "--linkage", "average")
    assert out.returncode == 0, out.stderr
    table = json.loads(out.stdout)
    assert len(table["rows"]) == 1 and table["rows"][0]["top_processes"][0]["rank"] == 5


@pytest.mark.integration
def test_cli_text_output_and_diffnlr(tmp_path):
    out = run_cli("analyze", EXAMPLES / "normal", EXAMPLES / "swapbug", "--out", tmp_path / "a.h5",
                  "--html", tmp_path / "d.html")
    assert out.returncode == 0, out.stderr
    assert "Ranking table" in out.stdout and "Summary for a ticket" in out.stdout
    assert (tmp_path / "a.h5").exists() and (tmp_path / "d.html").read_text().count("L1") > 0
    out = run_cli("diffnlr", EXAMPLES / "normal", EXAMPLES / "swapbug", "--rank", "5", "--filter", "11.mpi",
                  "--svg", tmp_path / "d.svg")
    assert out.returncode == 0, out.stderr
    assert "- L1^16" in out.stdout and "+ L1^7" in out.stdout and "+ L0^9" in out.stdout
    assert (tmp_path / "d.svg").read_text().startswith("<")


def test_missing_traces_count_as_empty(tmp_path):
    faulty = tmp_path / "faulty"
    faulty.mkdir()
    for f in (EXAMPLES / "swapbug").iterdir():
        if f.name != "r3.t0.txt":
            (faulty / f.name).write_bytes(f.read_bytes())
    res = analyze(EXAMPLES / "normal", faulty)
    assert any("missing from the faulty run" in n and "rank 3 thread 0" in n for n in res.notes)
    i = res.objects.index((3, 0))
    assert res.present[0, i] and not res.present[1, i]
    assert 3 in [r for r, _ in res.rows[0].top_processes[:2]]


def test_text_output_counts_in_singular_and_plural(tmp_path):
    """One trace is "1 trace", not "1 traces" (and one row, one process, one faulty trace cut short)."""
    import io
    from difftrace_mpi.views.text import plural, print_analysis
    normal, faulty = tmp_path / "normal", tmp_path / "faulty"
    normal.mkdir()
    faulty.mkdir()
    for rank in (0, 1):
        (normal / f"r{rank}.t0.txt").write_text("main\nMPI_Init\nMPI_Send\nMPI_Recv\nMPI_Finalize\n")
    (faulty / "r0.t0.txt").write_text("# incomplete\nmain\nMPI_Init\nMPI_Send\n")
    res = analyze(normal, faulty, Grid(filters=("11.mpi",), attributes=("sing.noFreq",), linkages=("ward",)))
    text = io.StringIO()
    print_analysis(res, stream=text)
    out = text.getvalue()
    assert f"normal: {normal} (text, 2 traces)" in out and f"faulty: {faulty} (text, 1 trace)" in out
    assert "2 processes, 2 threads;" in out
    assert "Named in the top 3 of most of the 1 row (rows naming each)" in out
    assert "1 faulty trace was cut short" in out
    assert "1 trace stopped early" in out and "1 traces" not in out     # the verdict's summary
    assert " traces)" not in out.replace("(text, 2 traces)", "")
    assert [plural(n, w) for n, w in ((1, "trace"), (0, "trace"), (1, "process"), (2, "process"),
                                      (3, "more row"))] == ["1 trace", "0 traces", "1 process", "2 processes",
                                                           "3 more rows"]


def test_grid_and_k_in_filter_spec():
    grid = Grid(filters=("11.mpi.K4", "11.every"), ks=(10, 20), attributes=("sing.log2",), linkages=("single",))
    assert [(s.label, k) for s, k in grid.combos()] == [("11.mpi", 4), ("11.every", 10), ("11.every", 20)]
    with pytest.raises(DiffTraceError):
        Grid(linkages=("median-ish",))


@pytest.mark.parametrize("args, message", [
    (("analyze", "/nonexistent/a", "/nonexistent/b"), "no such run directory"),
    (("analyze", "{empty}", "{empty}"), "no traces found"),
    (("analyze", EXAMPLES / "normal", EXAMPLES / "swapbug", "--filters", "11.nope"), "unknown class"),
    (("decode", "/nonexistent/x.1.0"), "x.1.0"),
])
@pytest.mark.integration
def test_user_errors_are_one_line(tmp_path, args, message):
    empty = tmp_path / "empty"
    empty.mkdir()
    args = [str(a).replace("{empty}", str(empty)) for a in args]
    out = run_cli(*args)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr


@pytest.mark.skipif(not SHARED_DATA.exists(), reason="shared ParLOT data not present")
@pytest.mark.integration
def test_real_parlot_runs(tmp_path):
    res = analyze(SHARED_DATA / "run1", SHARED_DATA / "run2", Grid(filters=("11.every",), attributes=("sing.noFreq",),
                                                                  linkages=("average",)))
    assert res.rank_sources == ["pid-order", "pid-order"]
    assert len(res.objects) == 6 and res.present[1].sum() == 5
    assert any("missing from the faulty run" in n for n in res.notes)
    out = run_cli("decode", SHARED_DATA / "run1" / "parlotm.attenborough.16205.1", "--format", "names")
    assert out.returncode == 0 and len(out.stdout.splitlines()) == 2072


@pytest.mark.integration
def test_corrupt_parlot_names_the_file(tmp_path):
    from difftrace_mpi.readers import parlot
    run = tmp_path / "run"
    run.mkdir()
    parlot.write_info(run / "p.100.info", ["<return>", "main", "MPI_Init"])
    parlot.write_trace(run / "p.100.0", np.array([1, 2, 0, 7, 0], dtype=np.uint16))
    out = run_cli("analyze", run, run)      # an unnamed id cuts the trace, with a note (issue 22, item 5)
    assert out.returncode == 0 and "note: normal run, rank 0 thread 0: p.100.0: function id 7" in out.stdout
    (run / "p.100.info").unlink()
    out = run_cli("analyze", run, run)
    assert out.returncode == 2 and "info" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.integration
def test_lattice_command_shows_classes_and_dot(tmp_path):
    out = tmp_path / "r.h5"
    assert run_cli("analyze", EXAMPLES / "normal", EXAMPLES / "swapbug", "--out", out).returncode == 0
    res = run_cli("lattice", out, "--combo", "11.mpi.K10", "--attributes", "sing.noFreq", "--dot", tmp_path / "l.dot")
    assert res.returncode == 0, res.stderr
    assert "3 equivalence classes" in res.stdout and "rank 5 thread 0" in res.stdout
    dot = (tmp_path / "l.dot").read_text()
    # paper Figure 3 plus the swapped rank below both loops: 4 concepts, 4 cover edges
    assert dot.count(" -> ") == 4 and dot.count("[label=") == 4
    assert "MPI_Comm_rank, MPI_Comm_size, MPI_Finalize, MPI_Init" in dot


@pytest.mark.integration
def test_hang_view_names_the_least_progressed_rank(dl, swap, tmp_path):
    hang = dl.hang_view()
    assert hang["stopped"] == 15 and hang["stuck_in"] == [("MPI_Recv", 15)]
    (key, progress, calls, tail), *_ = hang["least"]
    assert key == (5, 0) and calls == "main > oddEvenSort > MPI_Recv" and 0 < progress < 1
    assert tail.endswith("L1^7 MPI_Recv")        # where in the loop nest it stopped
    # progress is calls entered relative to the normal run of the same trace
    i = dl.objects.index((5, 0))
    assert progress == dl.entries[1, i] / dl.entries[0, i]
    assert swap.hang_view() is None
    out = run_cli("analyze", EXAMPLES / "normal", EXAMPLES / "dlbug", "--json", "--out", tmp_path / "d.h5")
    table = json.loads(out.stdout)
    assert table["hang"]["least_progressed"][0]["rank"] == 5
    with h5py.File(tmp_path / "d.h5", "r") as f:
        assert f["objects/open_calls"][1, i].decode() == "main > oddEvenSort > MPI_Recv"
        assert f["objects/open_calls"][0, i].decode() == ""
    with store.read(tmp_path / "d.h5") as stored:
        assert stored.hang_view() == dl.hang_view()


@pytest.mark.integration
def test_runs_from_any_directory(tmp_path):
    """Batch jobs start elsewhere: setup.sh makes the package importable without PYTHONPATH."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run([sys.executable, "-m", "difftrace_mpi", "analyze", str(EXAMPLES / "normal"),
                          str(EXAMPLES / "swapbug"), "--json"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["rows"][0]["top_processes"][0]["rank"] == 5


def test_suspects_carry_the_kind_of_change(swap, dl):
    best = swap.rows[0].as_dict()["top_threads"][0]
    assert (best["rank"], best["change"]) == (5, "more")       # the swap adds loop L0 to rank 5's trace
    row = next(r for r in dl.rows if r.filter == "11.mpi" and r.attributes == "sing.actual")
    kinds = {key: row.change_of(key)["change"] for key, _ in row.top_threads}
    assert kinds[(6, 0)] == "less"          # blocked neighbour: a prefix of its normal run


def test_mixed_format_directory_says_what_it_ignored(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for f in (EXAMPLES / "normal").iterdir():
        (run / f.name).write_bytes(f.read_bytes())
    (run / "parlot.host.123.info").write_text("+\nimage\nmain\n")
    (run / "parlot.host.123.0").write_bytes(b"\x00")
    res = analyze(EXAMPLES / "normal", run)
    assert any("other files ignored: parlot.host.123.0, parlot.host.123.info" in n for n in res.notes)
    assert res.no_difference


def test_call_attributes_find_the_deadlocked_rank():
    res = analyze(EXAMPLES / "normal", EXAMPLES / "dlbug",
                  Grid(filters=("11.mpi",), attributes=("call.actual",), linkages=("average",)))
    assert res.rows[0].attributes == "call.actual"
    assert res.rows[0].top_processes[0][0] == 5


@pytest.mark.integration
def test_hostile_names_and_empty_traces_go_through_everything(tmp_path):
    """10 kB names, spaces, unicode, markup and 0-event traces: analyze, HDF5, diffnlr, report."""
    long_name = "f" * 10_000
    odd = ["main", "do work <now> & \"then\"", "Ωmega λ", long_name, "MPI_Send"]
    runs = {}
    for label, extra in (("normal", []), ("faulty", [long_name])):
        run = tmp_path / label
        run.mkdir()
        (run / "r0.t0.txt").write_text("")                                   # 0 events
        for rank in (1, 2, 3):
            body = odd + (extra if rank == 2 else [])
            (run / f"r{rank}.t0.txt").write_text("\n".join(body) + "\n", encoding="utf-8")
        runs[label] = run
    out = tmp_path / "r.h5"
    res = run_cli("analyze", runs["normal"], runs["faulty"], "--out", out, "--json")
    assert res.returncode == 0, res.stderr
    table = json.loads(res.stdout)
    assert table["rows"][0]["top_threads"][0]["rank"] == 2
    with store.read(out) as stored:
        assert long_name in stored.names and "Ωmega λ" in stored.names
    res = run_cli("diffnlr", out, "--rank", "2")
    assert res.returncode == 0, res.stderr
    res = run_cli("report", out, "-o", tmp_path / "r.html")
    assert res.returncode == 0, res.stderr
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "do work &lt;now&gt; &amp;" in page and "<now>" not in page


def test_rows_that_localise_sort_first():
    """The sort tiers, checked on the real ILCS wrong-size deadlock (plain traces): the
    11.every rows name most ranks (worker-thread scheduling differs between runs), the
    11.mpi rows name rank 1 alone; every row that localises comes before every row that
    does not, whatever their B-scores, and within a tier rows go by B-score.  A row whose
    clustering did not change (B = 1) comes after every row whose clustering changed."""
    ilcs = EXAMPLES.parent / "ilcs"
    res = analyze(ilcs / "normal", ilcs / "wrongsize")
    tiers = [(not r.top_threads and not r.top_processes, r.bscore >= 1.0, not r.structured, not r.localised)
             for r in res.rows]
    assert tiers == sorted(tiers)
    for tier in set(tiers):
        scores = [r.bscore for r, t in zip(res.rows, tiers) if t == tier]
        assert scores == sorted(scores)
    local = [r for r in res.rows if r.localised]
    diffuse = [r for r in res.rows if not r.localised and r.top_processes]
    assert local and diffuse
    assert min(r.bscore for r in diffuse) < min(r.bscore for r in local)   # B alone would put them first
    for r in local:
        named = {rank for rank, _ in r.top_processes} | {rank for (rank, _), _ in r.top_threads}
        assert 2 * len(named) < len(res.processes)
    # the 11.mpi rows name rank 1 alone but their clustering did not change (B = 1): they
    # come after every row whose clustering changed, first among the B = 1 rows
    unchanged = [r for r in res.rows if r.bscore >= 1.0]
    assert unchanged[0].filter == "11.mpi" and [p for p, _ in unchanged[0].top_processes] == [1]
    assert res.rows[0].bscore < 1.0


@pytest.mark.parametrize("named,candidates,expected", [(1, 1, True), (1, 2, True), (2, 2, False), (1, 4, True),
                                                       (2, 4, False), (2, 6, True), (3, 6, False), (7, 16, True),
                                                       (8, 16, False), (0, 16, True)])
def test_localises_means_fewer_than_half(named, candidates, expected):
    from difftrace_mpi.stages.classify.cluster import localises
    assert localises(named, candidates) is expected


def test_sort_tiers_are_stored(tmp_path, swap, dl):
    """swapBug's rows all localise (rank 5), dlBug's none do, so the stored column is
    checked against both values."""
    for name, res, expected in (("swap", swap, True), ("dl", dl, False)):
        assert {r.localised for r in res.rows if r.top_processes} == {expected}
        store.write(res, tmp_path / f"{name}.h5")
        with h5py.File(tmp_path / f"{name}.h5", "r") as f:
            assert f["ranking"]["localised"].tolist() == [r.localised for r in res.rows]
            assert f["ranking"]["structured"].tolist() == [r.structured for r in res.rows]


def test_ticket_says_when_no_setting_localises(swap, dl):
    """dlBug cuts every trace, so every row that names anyone names half of the ranks or
    more; the ticket says so. swapBug's best row names rank 5 alone."""
    from difftrace_mpi.views.text import ticket_summary
    assert all(not r.localised for r in dl.rows if r.top_processes)
    assert "No setting singles out a few ranks" in ticket_summary(dl, [])
    assert swap.rows[0].localised and "No setting singles out" not in ticket_summary(swap, [])


def test_runs_of_different_programs_get_a_note():
    """Odd/even sort against the halo exchange share 5 of 30 function names: the user is
    told; a faulty run of the same program is not."""
    traces = EXAMPLES.parent
    wrong = analyze(traces / "oddeven-real" / "normal", traces / "halo" / "normal",
                    Grid(filters=("11.mpi",), attributes=("sing.noFreq",), linkages=("single",)))
    notes = [n for n in wrong.notes if "function names" in n]
    assert len(notes) == 1 and "only 5 of the 14 function names" in notes[0]
    same = analyze(traces / "oddeven-real" / "normal", traces / "oddeven-real" / "dlbug",
                   Grid(filters=("11.mpi",), attributes=("sing.noFreq",), linkages=("single",)))
    assert not [n for n in same.notes if "function names" in n]


def first_differences(normal_dir, faulty_dir):
    """{(rank, thread): (first differing event of the faulty trace, calls entered before
    it) or None when the faulty trace is the start of the normal one}, by brute force on
    the function names (the oracle for the hang view's block hashes)."""
    from difftrace_mpi.readers import discover_run, load_trace

    def events(run_dir):
        out = {}
        for ref in discover_run(run_dir).refs:
            t = load_trace(ref, {})
            out[(ref.rank, ref.thread)] = [t.names[v] if v else "<" for v in t.events.tolist()]
        return out
    normal, faulty = events(normal_dir), events(faulty_dir)
    out = {}
    for key, f in faulty.items():
        n = normal.get(key, [])
        first = next((i for i, e in enumerate(f) if i >= len(n) or n[i] != e), None)
        out[key] = None if first is None else (first, sum(e != "<" for e in f[:first]))
    return out


def check_normal_path_groups(res, normal_dir, faulty_dir):
    """Every stopped trace is in the group the brute-force comparison says, and the
    first difference lies inside its bracket."""
    hang = res.hang_view(limit=len(res.objects))
    oracle = first_differences(normal_dir, faulty_dir)
    left = {key: where for key, _, where in hang["left_normal_path"]}
    on_path = {key for key, _ in hang["on_normal_path"]}
    assert len(left) + len(on_path) == hang["stopped"] and not set(left) & on_path
    for key in on_path:
        assert oracle[key] is None, key
    for key, (calls_from, calls_to, calls) in left.items():
        assert oracle[key] is not None, key
        calls_before = oracle[key][1]
        assert calls_from <= calls_before <= calls_to, (key, left[key])
        assert calls == res.entries[1, res.objects.index(key)]
    return hang


@pytest.mark.integration
def test_hang_view_tells_who_left_the_normal_path(tmp_path):
    """Halo exchange, rank 2 skips an MPI_Isend in iteration 6 (the culprit): rank 3 waits
    for it in MPI_Waitall (the victim, least progressed), the others in MPI_Allreduce."""
    halo = EXAMPLES.parent / "halo"
    res = analyze(halo / "normal", halo / "lost")
    hang = check_normal_path_groups(res, halo / "normal", halo / "lost")
    assert [key for key, _, _ in hang["left_normal_path"]] == [(2, 0)]
    assert sorted(key for key, _ in hang["on_normal_path"]) == [(0, 0), (1, 0), (3, 0), (4, 0), (5, 0)]
    assert hang["least"][0][0] == (3, 0)              # least progressed: the victim
    # rank 2's 89th call is the MPI_Waitall that replaced the second MPI_Isend of iteration 6
    calls_from, calls_to, calls = hang["left_normal_path"][0][2]
    assert calls_from <= 88 < calls_to and calls == 136
    out = run_cli("analyze", halo / "normal", halo / "lost", "--out", tmp_path / "h.h5", "--diffnlr", "0")
    assert out.returncode == 0, out.stderr
    # the text leads with the verdict, which orders the same evidence: the culprit, then
    # the traces that stopped on the normal path grouped by where they wait
    assert "Verdict: HANG" in out.stdout and "  culprit:   rank 2 thread 0" in out.stdout
    assert "stopped:   4 traces in main > MPI_Allreduce (ranks 0-1, 4-5 thread 0)" in out.stdout
    assert "stopped:   1 trace in main > exchangeHalo > MPI_Waitall (rank 3 thread 0)" in out.stdout
    assert "diffNLR:" not in out.stdout                  # --diffnlr 0: none, not even the culprit's
    # by default the verdict's first culprit's diffNLR
    shown = run_cli("analyze", halo / "normal", halo / "lost").stdout
    titles = [line for line in shown.splitlines() if line.startswith("diffNLR:")]
    assert len(titles) == 1 and titles[0].startswith("diffNLR: rank 2 thread 0 (") and "culprit" in titles[0]
    assert "- MPI_Isend" in shown[shown.index(titles[0]):]     # the send that rank 2 skipped
    table = json.loads(run_cli("analyze", halo / "normal", halo / "lost", "--json").stdout)["hang"]
    assert table["left_normal_path"] == [{"rank": 2, "thread": 0, "calls_from": calls_from, "calls_to": calls_to,
                                          "progress": hang["left_normal_path"][0][1]}]
    assert table["left_normal_path_count"] == 1 and table["on_normal_path_count"] == 5
    assert {(t["rank"], t["thread"]) for t in table["on_normal_path"]} == {(0, 0), (1, 0), (3, 0), (4, 0), (5, 0)}
    i = res.objects.index((2, 0))
    with h5py.File(tmp_path / "h.h5", "r") as f:
        at, to = f["objects/diverged_at"][()], f["objects/diverged_to"][()]
    assert (at[i], to[i]) == (calls_from, calls_to)
    assert np.array_equal(at, res.diverged_at) and np.array_equal(to, res.diverged_to)
    assert (np.delete(at, i) == -1).all() and (np.delete(to, i) == -1).all()
    with store.read(tmp_path / "h.h5") as stored:
        assert stored.hang_view() is not None
    from conftest import report_of      # the HTML report's ticket, from the file
    page = report_of(tmp_path / "h.h5")
    assert "Verdict: hang: rank 2 thread 0 skipped MPI_Isend in iteration 7 of 20" in page
    # the report shows the culprit's diffNLR too, as the text does
    assert "rank 2 thread 0 (11.every.K10; a culprit of the verdict)" in page


def test_dlbug_stopped_traces_are_all_on_the_normal_path(dl):
    """dlBug's rank 5 receives with a tag nobody sends: the calls it makes are the normal
    ones (the traces do not record the tag), so every stopped trace is the start of its
    normal trace and the least progressed (rank 5) is the lead."""
    hang = check_normal_path_groups(dl, EXAMPLES / "normal", EXAMPLES / "dlbug")
    assert hang["left_normal_path_count"] == 0 and hang["on_normal_path_count"] == 15
    assert hang["on_normal_path"][0][0] == (5, 0)
    assert (dl.diverged_at == -1).all()
    from difftrace_mpi.views.diffview import hang_cause, suspect_diffs
    assert hang_cause(dl.hang_view()) is None and len(suspect_diffs(dl, 1)) == 1     # no extra diffNLR


@pytest.mark.parametrize("n_left", [1, 2, 3])
def test_most_stopped_traces_leaving_the_path_single_out_no_cause(n_left):
    """Four traces stopped; when most of them (as many as half or more) left the normal path,
    as OpenMP scheduling can make worker threads do, no likely cause is named."""
    from difftrace_mpi.stages.diagnose.hang import hang_view
    from difftrace_mpi.views.text import hang_cause_sentence, normal_path_lines
    objects = [(r, 0) for r in range(4)]
    hang = hang_view(objects, np.ones((2, 4), dtype=bool), np.ones((2, 4), dtype=bool),
                     np.array([[10] * 4, [5, 6, 7, 8]]), [[""] * 4, ["main > MPI_Recv"] * 4],
                     np.array([2] * n_left + [-1] * (4 - n_left)), np.array([4] * n_left + [-1] * (4 - n_left)))
    assert hang["left_normal_path_count"] == n_left and hang["left_singles_out"] == (n_left == 1)
    lines = normal_path_lines(hang)
    sentence = hang_cause_sentence(hang)
    if n_left == 1:
        assert lines[0].startswith("Left the normal path before stopping (likely causes): rank 0 thread 0")
        assert sentence.startswith("Likely cause of the hang: rank 0 thread 0")
    else:
        assert lines[0].startswith(f"Left the normal path before stopping: {n_left} of the 4 stopped traces")
        assert "singles out no cause" in lines[0] and sentence == ""


def test_the_process_level_is_the_thread_level_computed_once_with_one_thread_a_process(swap, monkeypatch, tmp_path):
    """One thread per process (the oddeven example): every setting's process level is its
    thread level, built, gathered and unified once (``Shard.one_thread_per_process``: the
    thread rows serve both levels); with several threads a process (the ilcs example,
    OpenMP) the levels differ and each is computed."""
    from difftrace_mpi.engine import jsm_step
    assert all(s.process is s.thread for combo in swap.combos.values() for s in combo.attrs.values())
    unified = []
    real_unify = jsm_step.unify
    monkeypatch.setattr(jsm_step, "unify", lambda parts, n: unified.append(n) or real_unify(parts, n))
    again = analyze(EXAMPLES / "normal", EXAMPLES / "swapbug")
    tasks = sum(len(combo.attrs) for combo in again.combos.values())
    assert len(unified) == tasks            # one level per setting, unified once
    from difftrace_mpi import store
    store.write(swap, tmp_path / "a.h5")
    store.write(again, tmp_path / "b.h5")
    assert_same_h5(tmp_path / "a.h5", tmp_path / "b.h5")
    ilcs = EXAMPLES.parent / "ilcs"
    unified.clear()
    threaded = analyze(ilcs / "normal", ilcs / "wrongop")
    assert len(threaded.objects) > len(threaded.processes)
    assert all(s.process is not s.thread for combo in threaded.combos.values() for s in combo.attrs.values())
    assert len(unified) == 2 * sum(len(combo.attrs) for combo in threaded.combos.values())
