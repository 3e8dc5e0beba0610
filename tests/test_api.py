"""The Python API (difftrace_mpi.analyze, load, Results' tables and diffNLRs; docs/api.md):
the same answers as the engine and the command line's views, from an analysis or from
its results file, with pandas or without."""
import re
import sys

import pytest

import difftrace_mpi
from conftest import EXAMPLES, ROOT
from difftrace_mpi import results as results_module
from difftrace_mpi.results import tables as results_tables
from difftrace_mpi.stages.classify.grid import Grid
from difftrace_mpi.engine.pipeline import analyze as engine_analyze
from difftrace_mpi.errors import DiffTraceError
from difftrace_mpi.views.diffview import suspect_diffs

SMALL = dict(filters=["11.mpi", "11.every"], attributes=["sing.noFreq", "sing.actual"], linkage=["ward", "single"])
COLUMNS = {"ranking_table": results_tables.RANKING_COLUMNS, "suspects_table": results_tables.SUSPECT_COLUMNS,
           "culprits_table": results_tables.CULPRIT_COLUMNS, "divergence_table": results_tables.DIVERGENCE_COLUMNS,
           "hang_table": results_tables.HANG_COLUMNS}
TABLES = tuple(COLUMNS)


@pytest.fixture(scope="module")
def swap(tmp_path_factory):
    out = tmp_path_factory.mktemp("api") / "swap.h5"
    return difftrace_mpi.analyze(EXAMPLES / "normal", EXAMPLES / "swapbug", out=out, **SMALL), out


@pytest.fixture(scope="module")
def hang(tmp_path_factory):
    out = tmp_path_factory.mktemp("api") / "hang.h5"
    return difftrace_mpi.analyze(EXAMPLES / "normal", EXAMPLES / "dlbug", out=out, **SMALL), out


def test_package_names_the_api():
    names = dir(difftrace_mpi)
    for name in ("analyze", "load", "DiffNLR", "Results", "DiffTraceError", "__version__"):
        assert name in names
    assert difftrace_mpi.Results is results_module.Results
    with pytest.raises(AttributeError):
        difftrace_mpi.no_such_name


def test_analyze_is_the_engines_analysis(swap):
    r, _ = swap
    grid = Grid(filters=tuple(SMALL["filters"]), attributes=tuple(SMALL["attributes"]),
                linkages=tuple(SMALL["linkage"]))
    engine = engine_analyze(EXAMPLES / "normal", EXAMPLES / "swapbug", grid)
    assert r.verdict == engine.verdict
    assert [row.as_dict() for row in r.rows] == [row.as_dict() for row in engine.rows]
    assert r.verdict["kind"] == "changed" and r.verdict["culprits"][0]["rank"] == 5


def test_ranking_and_suspect_tables_hold_the_rows(swap):
    r, _ = swap
    table = r.ranking_table(as_frame=False)
    assert [t["row"] for t in table] == list(range(1, len(r.rows) + 1))
    assert len(table) == len(SMALL["filters"]) * len(SMALL["attributes"]) * len(SMALL["linkage"])
    for t, row in zip(table, r.rows):
        assert (t["combo"], t["attributes"], t["linkage"], t["bscore"]) == (row.combo, row.attributes, row.linkage,
                                                                            row.bscore)
        assert t["top_threads"] == [key for key, _ in row.top_threads]
    suspects = r.suspects_table(as_frame=False)
    first = [s for s in suspects if s["row"] == 1 and s["level"] == "thread"]
    assert [(s["rank"], s["thread"]) for s in first] == [key for key, _ in r.rows[0].top_threads]
    assert [s["place"] for s in first] == list(range(1, len(first) + 1))
    assert all(s["thread"] is None for s in suspects if s["level"] == "process")
    assert {s["change"] for s in suspects} <= {"same", "more", "less", "different"}


def test_culprits_and_divergences(swap):
    r, _ = swap
    culprits = r.culprits_table(as_frame=False)
    assert [(c["rank"], c["thread"], c["why"]) for c in culprits] == \
        [(c["rank"], c["thread"], c["why"]) for c in r.verdict["culprits"]]
    divergences = r.divergence_table(as_frame=False)
    assert [(d["rank"], d["thread"]) for d in divergences] == sorted(d.key for d in r.divergences.values())
    five = next(d for d in divergences if d["rank"] == 5)
    assert five["status"] == "different" and five["normal"] == "MPI_Recv" and five["faulty"] == "MPI_Send"
    assert five["iteration"] == r.verdict["where"]["iteration"] and five["loop"] == r.verdict["where"]["loop"]


def test_hang_table_is_the_hang_view(hang, swap):
    r, _ = hang
    view = r.hang_view(limit=len(r.objects))
    table = r.hang_table(as_frame=False)
    assert len(table) == view["stopped"] > 0
    progress = [t["progress"] for t in table]
    assert progress == sorted(progress)
    assert (table[0]["rank"], table[0]["thread"]) == view["least"][0][0]
    left = {key for key, _, _ in view["left_normal_path"]}
    assert {(t["rank"], t["thread"]) for t in table if t["left_normal_path"]} == left
    assert all((t["calls_from"] is None) == (not t["left_normal_path"]) for t in table)
    assert swap[0].hang_table(as_frame=False) == []          # the swap bug does not hang


def test_diffnlr_of_any_trace_is_the_cli_view(swap):
    r, _ = swap
    (key, cname, blocks, bodies), = suspect_diffs(r, 1)
    d = difftrace_mpi.diffnlr(r, *key)
    assert (d.key, d.combo, list(d.blocks), d.loop_bodies) == (key, cname, list(blocks), bodies)
    assert d.text().startswith(f"diffNLR: rank {key[0]} thread {key[1]} ({cname})")
    assert str(d) == d.text()
    assert d.summary.startswith("The traces agree for") and "L1^7" in d.summary
    assert 'class="dnlr"' in d._repr_html_() and d.html(page=True).startswith("<!DOCTYPE html>")
    assert d.svg().lstrip().startswith(("<svg", "<?xml"))
    kinds = [b["kind"] for b in d.table(as_frame=False)]
    assert kinds[0] == "common" and {"normal", "faulty"} <= set(kinds)
    unchanged = next(r.objects[i] for i in range(len(r.objects)) if i not in r.divergences)
    other = difftrace_mpi.diffnlr(r, *unchanged, combo="11.every.K10")          # any trace, any setting
    assert other.combo == "11.every.K10" and [b.kind for b in other.blocks] == ["common"]
    with pytest.raises(DiffTraceError, match="no trace rank 99"):
        difftrace_mpi.diffnlr(r, 99)
    with pytest.raises(DiffTraceError, match="no setting"):
        difftrace_mpi.diffnlr(r, 5, combo="11.nothing.K3")


@pytest.mark.parametrize("fixture", ["swap", "hang"])
def test_a_loaded_results_file_gives_the_same_tables(fixture, request):
    r, path = request.getfixturevalue(fixture)
    with difftrace_mpi.load(path) as stored:
        assert stored.verdict == r.verdict
        for table in TABLES:
            assert getattr(stored, table)(as_frame=False) == getattr(r, table)(as_frame=False), table
        key = tuple(r.verdict["culprits"][0][c] for c in ("rank", "thread"))
        assert difftrace_mpi.diffnlr(stored, *key).text() == difftrace_mpi.diffnlr(r, *key).text()


def test_tables_are_dataframes_with_pandas(swap):
    pd = pytest.importorskip("pandas")
    r, _ = swap
    for table in TABLES:
        frame = getattr(r, table)()
        assert isinstance(frame, pd.DataFrame)
        assert list(frame.columns) == list(COLUMNS[table])
        assert len(frame) == len(getattr(r, table)(as_frame=False))
    assert r.hang_table().empty and list(r.hang_table().columns)[:2] == ["rank", "thread"]


def test_tables_without_pandas(swap, monkeypatch):
    r, _ = swap
    monkeypatch.setitem(sys.modules, "pandas", None)        # import pandas raises ImportError
    with pytest.raises(DiffTraceError, match="pandas is not installed"):
        r.ranking_table()               # tables are DataFrames: pandas is a dependency, no silent lists
    table = r.ranking_table(as_frame=False)
    assert isinstance(table, list) and set(table[0]) == set(results_tables.RANKING_COLUMNS)
    with pytest.raises(DiffTraceError, match="pandas"):
        r.ranking_table(as_frame=True)


def test_user_errors_are_one_line_errors(tmp_path, swap):
    with pytest.raises(DiffTraceError):
        difftrace_mpi.analyze(tmp_path / "missing", EXAMPLES / "swapbug", **SMALL)
    with pytest.raises(DiffTraceError, match="unknown linkage"):
        difftrace_mpi.analyze(EXAMPLES / "normal", EXAMPLES / "swapbug", linkage=["nearest"])
    _, out = swap
    with pytest.raises(DiffTraceError, match="exists"):
        difftrace_mpi.analyze(EXAMPLES / "normal", EXAMPLES / "swapbug", out=out, **SMALL)
    with pytest.raises(DiffTraceError):
        difftrace_mpi.load(tmp_path / "missing.h5")


def test_same_run_note_as_the_command_line():
    r = difftrace_mpi.analyze(EXAMPLES / "normal", EXAMPLES / "normal", filters=["11.mpi"],
                              attributes=["sing.noFreq"], linkage=["ward"])
    assert r.no_difference and any("same directory" in note for note in r.notes)
    assert r.culprits_table(as_frame=False) == [] and r.hang_table(as_frame=False) == []
    if not r.combos:            # identical runs: the grid was skipped
        with pytest.raises(DiffTraceError, match="no NLRs"):
            difftrace_mpi.diffnlr(r, 0)
    else:
        assert [b.kind for b in difftrace_mpi.diffnlr(r, 0).blocks] == ["common"]


def test_docs_describe_every_entry_point():
    page = (ROOT / "docs" / "api.md").read_text()
    for name in ("difftrace_mpi.analyze", "difftrace_mpi.load", "DiffNLR", "verdict", *TABLES, "diffnlr(",
                 "pip install"):
        assert name in page, name
    assert re.search(r"pip install '\.\[[^\]]*\bpandas\b[^\]]*\]'", page), "the pandas extra is not shown"
    for fn in (difftrace_mpi.analyze, difftrace_mpi.load, difftrace_mpi.DiffNLR):
        doc = fn.__doc__
        assert all(re.search(rf"^\s*{section}\n\s*-+$", doc, re.M) for section in ("Examples",)), fn
    for fn in (difftrace_mpi.analyze, difftrace_mpi.load):
        assert all(re.search(rf"^\s*{s}\n\s*-+$", fn.__doc__, re.M) for s in ("Parameters", "Returns")), fn


@pytest.mark.integration
def test_analyze_under_mpiexec_gives_results_on_rank_0(tmp_path):
    """analyze is collective: every rank calls it, rank 0 gets the results, the others None."""
    import json
    import os
    import shutil
    import subprocess
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("no mpiexec")
    script = ("import json, sys, difftrace_mpi as d\n"
              "from mpi4py import MPI\n"
              "r = d.analyze(sys.argv[1], sys.argv[2], filters=['11.mpi'], attributes=['sing.noFreq'],"
              " linkage=['ward'], out=sys.argv[3])\n"
              "sys.stdout.write(json.dumps([MPI.COMM_WORLD.Get_rank(), None if r is None else"
              " r.verdict['culprits'][0]['rank'], None if r is None else r.mpi_ranks]) + '\\n')\n")
    out = tmp_path / "mpi.h5"
    proc = subprocess.run([mpiexec, "-n", "2", sys.executable, "-c", script, str(EXAMPLES / "normal"),
                           str(EXAMPLES / "swapbug"), str(out)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the ranks' lines reach mpiexec's stdout in any order, even run together
    answers = sorted(json.loads(answer) for answer in re.findall(r"\[[^\]]*\]", proc.stdout))
    assert answers == [[0, 5, 2], [1, None, None]]
    with difftrace_mpi.load(out) as stored:
        assert stored.verdict["culprits"][0]["rank"] == 5


def test_the_faulty_run_alone_as_the_command_line(tmp_path, capsys):
    """analyze(None, faulty) is 'analyze FAULTY_DIR': the failed run alone, the same results
    (and results file) as the command line's."""
    import json
    from difftrace_mpi.cli import main
    out = tmp_path / "alone.h5"
    r = difftrace_mpi.analyze(None, EXAMPLES / "dlbug", out=out)
    assert r.verdict["alone"] and not r.rows
    with difftrace_mpi.load(out) as back:
        assert back.verdict["alone"] and back.verdict["kind"] == r.verdict["kind"]
    capsys.readouterr()
    assert main(["analyze", str(EXAMPLES / "dlbug"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(r.as_dict()))
    with pytest.raises(DiffTraceError, match="also_normal needs a normal run"):
        difftrace_mpi.analyze(None, EXAMPLES / "dlbug", also_normal=[EXAMPLES / "normal"])


def test_library_errors_do_not_name_command_line_flags(swap):
    _, out = swap
    with pytest.raises(DiffTraceError, match="exists; pass force=True") as err:
        difftrace_mpi.analyze(EXAMPLES / "normal", EXAMPLES / "swapbug", out=out, **SMALL)
    assert "--" not in str(err.value)


def test_every_public_member_of_results_is_documented():
    """docs/api.md names every public field, method and property of Results (issue 25)."""
    import dataclasses
    page = (ROOT / "docs" / "api.md").read_text()
    public = {f.name for f in dataclasses.fields(results_module.Results)} | set(dir(results_module.Results))
    public = sorted(n for n in public if not n.startswith("_"))
    assert len(public) > 40
    missing = [n for n in public if f"`{n}`" not in page and f"`{n}(" not in page]
    assert not missing, f"undocumented Results members: {missing}"
