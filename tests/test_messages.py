"""Issue 13, messages and small hostile inputs: two-trace runs, option values, damaged results
files, MemoryError, terminal escape sequences in names, the same directory twice.

Everything here runs in process (``cli.main``), so it stays in the fast layer."""
import json
import os

import h5py
import numpy as np
import pytest
from numpy.lib.recfunctions import drop_fields

from difftrace_mpi import cli, store
from difftrace_mpi.errors import DiffTraceError
from difftrace_mpi.stages.classify import cluster
from difftrace_mpi.stages.model import filters

ESC = "\x1b"
# an OSC title change and a screen clear: what a hostile function name would send a terminal
HOSTILE = "\x1b]0;PWNED\x07\x1b[2J"


def _calls(names):
    out = []
    for n in names:
        out += ["> " + n, "< " + n]
    return out


def _write(directory, rank, lines, incomplete=False):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"r{rank}.t0.txt"), "w") as f:
        f.write(("# incomplete\n" if incomplete else "") + "\n".join(lines) + "\n")


def _run_cli(capsys, *argv):
    """(exit status, stdout, stderr) of ``python -m difftrace_mpi ARGV``, in process."""
    capsys.readouterr()
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def two_traces(tmp_path):
    """Two ranks; rank 1 makes one MPI_Send more in the faulty run, rank 0 is unchanged."""
    base = ["main", "MPI_Init", "MPI_Send", "MPI_Recv", "MPI_Finalize"]
    for rank in (0, 1):
        _write(tmp_path / "normal", rank, _calls(base))
    _write(tmp_path / "faulty", 0, _calls(base))
    _write(tmp_path / "faulty", 1, _calls(["main", "MPI_Init", "MPI_Send", "MPI_Send", "MPI_Recv",
                                            "MPI_Finalize"]))
    return tmp_path


@pytest.fixture
def hostile(tmp_path):
    """Four ranks whose function names hold terminal escape sequences: the faulty run hangs
    (rank 1 in MPI_Recv, the others in the barrier); a second normal run differs by a
    noise call (so a note names it)."""
    def body(extra=()):
        return (["> main" + HOSTILE] + _calls(["MPI_Init"]) + _calls(["work" + HOSTILE, "MPI_Send", "MPI_Recv"] * 3)
                + list(extra))
    end = _calls(["MPI_Barrier" + HOSTILE, "MPI_Finalize"]) + ["< main" + HOSTILE]
    for rank in range(4):
        _write(tmp_path / "normal", rank, body(end))
        _write(tmp_path / "normal2", rank, body((_calls(["noise" + HOSTILE]) if rank == 3 else []) + end))
        stuck = "> MPI_Recv" if rank == 1 else "> MPI_Barrier"
        _write(tmp_path / "faulty", rank, body([stuck + HOSTILE]), incomplete=True)
    # a lone trace that aborted: no return at all after MPI_Abort
    _write(tmp_path / "single_normal", 0, body(end))
    _write(tmp_path / "single_faulty", 0, body(["> MPI_Abort" + HOSTILE]), incomplete=True)
    return tmp_path


# --- item 13: two-trace runs name the changed trace ------------------------------------------

def test_cover_prefers_the_changed_trace_of_a_tied_pair():
    diff = np.array([[0.0, 0.5], [0.5, 0.0]])
    mult = np.ones(2)
    assert cluster.cover_suspects(diff, mult).tolist() == [True, False]      # no kinds: first of the tie
    assert cluster.cover_suspects(diff, mult, unchanged=np.array([True, False])).tolist() == [False, True]


def test_two_trace_run_names_the_changed_rank(two_traces, capsys):
    code, out, err = _run_cli(capsys, "analyze", two_traces / "normal", two_traces / "faulty", "--json")
    assert code == 0, err
    rows = [row for row in json.loads(out)["rows"] if row["top_processes"]]   # sing.noFreq sees no change
    assert rows
    for row in rows:
        assert [(p["rank"], p["change"]) for p in row["top_processes"]] == [(1, "more")], row
        assert [(t["rank"], t["thread"], t["change"]) for t in row["top_threads"]] == [(1, 0, "more")], row
    code, out, err = _run_cli(capsys, "analyze", two_traces / "normal", two_traces / "faulty")
    assert "has the same attributes" not in out


# --- item 22: report on two-trace results ----------------------------------------------------

def test_report_of_a_two_trace_run(two_traces, capsys):
    h5 = two_traces / "r.h5"
    assert _run_cli(capsys, "analyze", two_traces / "normal", two_traces / "faulty", "--out", h5)[0] == 0
    code, out, err = _run_cli(capsys, "report", h5, "-o", two_traces / "r.html")
    assert code == 0, err
    assert "<svg" in (two_traces / "r.html").read_text()


# --- item 18 and 20: option values ------------------------------------------------------------

BAD_OPTIONS = [
    ["analyze", "n", "f", "--top", "0"],
    ["analyze", "n", "f", "--top", "-1"],
    ["analyze", "n", "f", "--rows", "-1"],
    ["analyze", "n", "f", "--rows", "0"],
    ["analyze", "n", "f", "--max-concepts", "0"],
    ["analyze", "n", "f", "--max-concepts", "-1"],
    ["analyze", "n", "f", "--max-concepts", "99999999999999999999"],
    ["analyze", "n", "f", "--k", "1"],
    ["analyze", "n", "f", "--k", "10", "99999999999999999999"],
    ["analyze", "n", "f", "--diffnlr", "-1"],
    ["analyze", "n", "f", "--full-jsm-limit", "-3"],
    ["analyze", "n", "f", "--row-block-min", "0"],
    ["analyze", "n", "f", "--top", "x"],
    ["nlr", "t", "--k", "1"],
    ["nlr", "t", "--k", "0"],
    ["diffnlr", "a", "b", "--k", "1"],
    ["diffnlr", "a", "b", "--rank", str(2 ** 63)],
    ["diffnlr", "a", "b", "--rank", "-1"],
    ["diffnlr", "a", "b", "--rank", "1", "--thread", str(2 ** 64)],
    ["diffnlr", "a", "b", "--context", "-1"],
    ["report", "r.h5", "--suspects", "-5"],
    ["report", "r.h5", "--max-cells", "1"],
]


@pytest.mark.parametrize("argv", BAD_OPTIONS, ids=[" ".join(a[:1] + a[3:]) for a in BAD_OPTIONS])
def test_invalid_option_values_are_one_line_errors(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.build_parser().parse_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "invalid" in err


def test_option_defaults_and_their_help_come_from_config(monkeypatch):
    """config.py is the one source of defaults: argparse's defaults and the numbers in the
    help texts follow it (a changed default changes both)."""
    from difftrace_mpi import config
    parse = lambda argv: cli.build_parser().parse_args(argv)  # noqa: E731
    a = parse(["analyze", "n", "f"])
    assert (a.top, a.rows, a.diffnlr, a.max_concepts, a.full_jsm_limit, a.row_block_min, a.timing_ratio,
            a.timing_clock) == (config.TOP, config.ROWS_SHOWN, config.DIFFNLRS_SHOWN, config.MAX_CONCEPTS,
                                config.FULL_LIMIT, config.ROW_BLOCK_MIN, config.TIMING_MIN_RATIO, config.TIMING_CLOCK)
    assert parse(["nlr", "t"]).k == config.NLR_K and parse(["nlr", "t"]).filter == config.SINGLE_FILTER
    r = parse(["report", "r.h5"])
    assert (r.suspects, r.max_cells) == (config.REPORT_SUSPECTS, config.REPORT_MAX_CELLS)
    for name, value in (("FULL_LIMIT", 777), ("ROW_BLOCK_MIN", 4242), ("TIMING_MIN_RATIO", 3.5), ("TOP", 9),
                        ("MAX_CONCEPTS", 12345), ("MAX_CLASSES", 54321), ("REPORT_MAX_CELLS", 333)):
        monkeypatch.setattr(config, name, value)
    analyze_help = cli.build_parser()._subparsers._group_actions[0].choices["analyze"].format_help()
    report_help = cli.build_parser()._subparsers._group_actions[0].choices["report"].format_help()
    for text in ("777", "4242", "3.5", "default 9", "12345", "default 54321"):
        assert text in analyze_help, text
    assert "333" in report_help


def test_valid_option_values_still_parse():
    args = cli.build_parser().parse_args(["analyze", "n", "f", "--top", "1", "--rows", "1", "--max-concepts", "1",
                                          "--k", "2", "10", "--diffnlr", "0"])
    assert (args.top, args.rows, args.max_concepts, args.k, args.diffnlr) == (1, 1, 1, [2, 10], 0)
    args = cli.build_parser().parse_args(["diffnlr", "a", "b", "--rank", str(2 ** 63 - 1), "--thread", "0"])
    assert args.rank == 2 ** 63 - 1
    assert cli.build_parser().parse_args(["report", "r.h5", "--suspects", "0"]).suspects == 0


@pytest.mark.parametrize("spec", ["11.mpi.K99999999999999999999", "11.mpi.K1", "11.mpi.K0"])
def test_filter_k_out_of_range_is_a_user_error(spec):
    with pytest.raises(DiffTraceError, match="K must be"):
        filters.parse_filter(spec)


def test_filter_k_in_range_parses():
    assert filters.parse_filter("11.mpi.K2").k == 2


# --- item 21: damaged results files ----------------------------------------------------------

def _damage_ranking(f):            # the ranking table without its bscore column
    table = f["ranking"][()]
    del f["ranking"]
    f["ranking"] = drop_fields(table, "bscore", usemask=False)


def _damage_rows(f):                # suspects of ranking rows that are not there
    table = f["ranking_suspects"][()]
    assert len(table)
    table["row"] = len(f["ranking"]) + 1
    f["ranking_suspects"][...] = table


def _damage_objects(f):
    del f["objects/rank"]


def _damage_lattice(f):
    def visit(name, obj):
        if isinstance(obj, h5py.Group) and name.endswith("lattice/faulty") and not hits:
            hits.append(name)
    hits = []
    f.visititems(visit)
    group = f[hits[0]]
    for key in list(group):
        del group[key]


def _damage_nlr(f):
    for cname in f["combos"]:
        del f[f"combos/{cname}/nlr/faulty/index"]


def _damage_nlr_index(f):           # read fine, fails when used: an IndexError inside the with block
    for cname in f["combos"]:
        index = f[f"combos/{cname}/nlr/faulty/index"]
        index[...] = 10 ** 6


def _damage_jsm(f):
    for cname in f["combos"]:
        for aname in f[f"combos/{cname}/attributes"]:
            level = f[f"combos/{cname}/attributes/{aname}/thread"]
            for key in list(level):
                if key.startswith("jsm_") and key not in ("jsm_classes_normal", "jsm_classes_faulty"):
                    data = level[key][()]
                    del level[key]
                    level[key] = data[:1]


DAMAGES = [_damage_ranking, _damage_rows, _damage_objects, _damage_lattice, _damage_nlr, _damage_nlr_index,
           _damage_jsm]


@pytest.fixture(scope="module")
def results_file(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    for run, extra in (("normal", []), ("faulty", ["MPI_Send"])):
        for rank in range(3):
            _write(root / run, rank, _calls(["main", "MPI_Init", "MPI_Send", "MPI_Recv"]
                                            + (extra if rank == 2 else []) + ["MPI_Finalize"]))
    assert cli.main(["analyze", str(root / "normal"), str(root / "faulty"), "--out", str(root / "r.h5"),
                     "--json"]) == 0
    return root / "r.h5"


@pytest.mark.parametrize("damage", DAMAGES, ids=[d.__name__ for d in DAMAGES])
@pytest.mark.parametrize("command", [["lattice", "{}"], ["diffnlr", "{}", "--rank", "2"],
                                     ["report", "{}", "-o", "{}.html"]], ids=lambda c: c[0])
def test_damaged_results_file_is_one_error(results_file, tmp_path, damage, command, capsys):
    path = tmp_path / "damaged.h5"
    path.write_bytes(results_file.read_bytes())
    with h5py.File(path, "a") as f:
        damage(f)
    code, out, err = _run_cli(capsys, *[a.format(path) for a in command])
    if code == 0:           # this command does not read what was damaged
        assert (damage, command[0]) not in {(_damage_nlr_index, "diffnlr"), (_damage_ranking, "lattice")}
        return
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"damaged results file {path}" in err, err


def test_store_read_names_the_damage(results_file, tmp_path):
    path = tmp_path / "damaged.h5"
    path.write_bytes(results_file.read_bytes())
    with h5py.File(path, "a") as f:
        _damage_ranking(f)
    with pytest.raises(DiffTraceError, match=f"^damaged results file {path}: "):
        store.read(path)


# --- item 23: MemoryError ----------------------------------------------------------------------

def test_memory_error_is_a_resource_error(monkeypatch, two_traces, capsys):
    def exhausted(args):
        raise MemoryError()
    monkeypatch.setattr(cli.nlr, "run", exhausted)
    code, out, err = _run_cli(capsys, "nlr", two_traces / "normal" / "r0.t0.txt")
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err and "memory" in err, err


# --- item 25: escape sequences in names --------------------------------------------------------

def _text_commands(root):
    h5 = root / "r.h5"
    n, f, t = root / "normal", root / "faulty", root / "faulty" / "r1.t0.txt"
    return [
        ["analyze", n, f, "--also-normal", root / "normal2", "--out", h5, "--diffnlr", "4", "--all"],
        ["analyze", n, f, "--json"],
        ["analyze", root / "single_normal", root / "single_faulty"],
        ["analyze", n, f, "--filters", "11.every", "--rows", "40"],
        ["lattice", h5],
        ["lattice", h5, "--run", "normal"],
        ["diffnlr", h5, "--rank", "1"],
        ["diffnlr", n, f, "--rank", "1", "--filter", "11.every"],
        ["diffnlr", n / "r1.t0.txt", t, "--filter", "10.every", "--all"],
        ["nlr", t, "--filter", "11.every"],
        ["nlr", t, "--filter", "10.every"],
        ["decode", t],
        ["decode", t, "--format", "names"],
        ["report", h5, "-o", root / "r.html"],
    ]


def test_no_raw_escape_reaches_the_terminal(hostile, capsys):
    for argv in _text_commands(hostile):
        code, out, err = _run_cli(capsys, *argv)
        assert code == 0, (argv, err)
        assert ESC not in out and ESC not in err, (argv, out + err)
    code, out, err = _run_cli(capsys, "analyze", hostile / "normal", hostile / "faulty")
    assert "Stuck in" in out or "stopped:" in out
    assert "\\x1b]0;PWNED\\x07\\x1b[2J" in out


def test_lattice_escapes_names_read_from_the_file(results_file, tmp_path, capsys):
    path = tmp_path / "hostile.h5"
    path.write_bytes(results_file.read_bytes())
    with h5py.File(path, "a") as f:        # a results file from someone else may hold anything
        for cname in f["combos"]:
            f[f"combos/{cname}"].attrs["filter"] = "11.mpi" + HOSTILE
    code, out, err = _run_cli(capsys, "lattice", path)
    assert code == 0, err
    assert ESC not in out + err and "11.mpi\\x1b]0;PWNED" in out


def test_decode_names_are_escaped(hostile, capsys):
    code, out, err = _run_cli(capsys, "decode", hostile / "faulty" / "r1.t0.txt", "--format", "names")
    assert code == 0, err
    assert ESC not in out + err and "MPI_Recv\\x1b]0;PWNED" in out


def test_colours_do_not_unescape_names(hostile, capsys):
    for argv in (["analyze", hostile / "normal", hostile / "faulty", "--color", "always"],
                 ["diffnlr", hostile / "normal", hostile / "faulty", "--rank", "1", "--color", "always"]):
        code, out, err = _run_cli(capsys, *argv)
        assert code == 0, err
        assert ESC + "]" not in out + err and ESC + "[2J" not in out + err and "\x07" not in out + err
        assert "\\x1b]0;PWNED" in out


# --- item 12 (check): a single trace that aborted is not "no difference" -------------------------

def test_single_trace_abort_is_not_no_difference(hostile, capsys):
    code, out, err = _run_cli(capsys, "analyze", hostile / "single_normal", hostile / "single_faulty")
    assert code == 0, err
    assert "No difference" not in out
    code, out, err = _run_cli(capsys, "analyze", hostile / "single_normal", hostile / "single_faulty", "--json")
    answer = json.loads(out)
    assert answer["verdict"]["kind"] != "none" and answer["no_difference"] is False, answer["verdict"]


# --- item 26: the same directory twice ----------------------------------------------------------

def test_same_directory_as_normal_and_faulty_gets_a_note(two_traces, capsys):
    normal = two_traces / "normal"
    code, out, err = _run_cli(capsys, "analyze", normal, normal)
    assert code == 0, err
    assert "same directory" in out + err
    code, out, err = _run_cli(capsys, "analyze", normal, str(normal) + "/./")
    assert "same directory" in out + err


def test_rank_of_2_to_the_63_in_a_file_name_is_a_user_error(tmp_path):
    """Item 20: a trace file whose name holds a rank of 2^63 or more is refused when the
    run is discovered, not an OverflowError when the results are written."""
    from difftrace_mpi.errors import DiffTraceError
    from difftrace_mpi.readers import discover_run
    run = tmp_path / "run"
    run.mkdir()
    (run / f"r{2 ** 63}.t0.txt").write_text("main\n")
    with pytest.raises(DiffTraceError, match="out of range"):
        discover_run(run)
    (run / f"r{2 ** 63}.t0.txt").unlink()
    (run / f"r{2 ** 63 - 1}.t0.txt").write_text("main\n")
    assert discover_run(run).refs[0].rank == 2 ** 63 - 1


def test_memory_budget_option(capsys):
    """analyze --memory-budget: a budget too small for the traces is one error naming a
    file and exit 2; 0 is refused; a sane one analyses as usual."""
    from pathlib import Path
    from difftrace_mpi.readers import set_memory_budget
    halo = Path(__file__).resolve().parents[1] / "examples" / "traces" / "halo"
    try:
        code, _, err = _run_cli(capsys, "analyze", str(halo / "normal"), str(halo / "lost"), "--memory-budget", "1K")
        assert code == 2 and "memory budget" in err and "Traceback" not in err and err.count("\n") == 1
        code, _, err = _run_cli(capsys, "analyze", str(halo / "normal"), str(halo / "lost"), "--memory-budget", "0")
        assert code == 2 and "more than 0 bytes" in err
        code, out, _ = _run_cli(capsys, "analyze", str(halo / "normal"), str(halo / "lost"), "--memory-budget", "4G")
        assert code == 0 and "Verdict: HANG" in out
    finally:
        set_memory_budget(None)


# --- results of the failed run alone hold no settings ---------------------------------------

def test_commands_on_results_of_the_run_alone_say_what_is_missing(tmp_path, capsys):
    """``diffnlr`` and ``lattice`` need a (filter, K) setting, which the run alone does not
    analyse: one line, exit 2 (it was a StopIteration traceback)."""
    from conftest import EXAMPLES
    out = tmp_path / "alone.h5"
    code, _, err = _run_cli(capsys, "analyze", EXAMPLES / "dlbug", "--out", out, "--json")
    assert code == 0, err
    for command in (["diffnlr", out, "--rank", "5"], ["lattice", out]):
        code, _, err = _run_cli(capsys, *command)
        assert code == 2 and err.count("\n") == 1, err
        assert "no (filter, K) setting was analysed (the failed run was analysed alone)" in err


def test_grid_options_with_the_run_alone_are_refused(capsys):
    """The grid compares two runs: given with one directory it would be silently ignored."""
    from conftest import EXAMPLES
    code, out, err = _run_cli(capsys, "analyze", EXAMPLES / "dlbug", "--filters", "11.mpi", "--k", "5")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "--filters, --k: the grid settings compare two runs" in err


def test_usage_names_the_command_the_user_typed(monkeypatch):
    import sys
    from difftrace_mpi import cli
    monkeypatch.setattr(sys, "argv", ["/opt/venv/bin/difftrace-mpi", "analyze"])
    assert cli.build_parser().prog == "difftrace-mpi"
    monkeypatch.setattr(sys, "argv", ["/x/difftrace_mpi/__main__.py", "analyze"])
    assert cli.build_parser().prog == "python -m difftrace_mpi"


def test_kernels_are_all_found_and_their_absence_is_one_line(monkeypatch, capsys):
    """A checkout without its compiled kernels (or one shadowing the installed package) says
    so and how to fix it, before any work; it was a ModuleNotFoundError traceback."""
    import glob
    from difftrace_mpi import kernels
    pyx = sorted(os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(os.path.dirname(kernels.__file__), "*.pyx")))
    assert list(kernels.NAMES) == pyx and kernels.missing() == []
    monkeypatch.setattr(kernels, "missing", lambda: ["linkage", "nlr"])
    code, out, err = _run_cli(capsys, "nlr", "whatever.txt")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "compiled kernels (linkage, nlr) are missing" in err and "./setup.sh" in err
