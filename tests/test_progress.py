"""Progress lines through the whole run (issue 38 item 4, issue 39 item 4): a batch log
(stderr not a terminal, as in a Slurm job) shows a line every few seconds without being
asked, naming the step under way; a terminal gets every milestone and the end of every
step that took a second or more; ``--quiet`` silences both."""
import argparse
import io
import time

import pytest

from difftrace_mpi import api, config
from difftrace_mpi.cli import analyze as cli_analyze
from difftrace_mpi.engine import progress as P


def lines_of(stream):
    return [line for line in stream.getvalue().splitlines() if line]


def test_a_batch_log_names_the_step_under_way(monkeypatch):
    monkeypatch.setattr(config, "PROGRESS_BATCH_S", 0.05)
    out = io.StringIO()
    shown = P.Progress(P.BATCH, stream=out)
    shown.say("read 12 traces")                  # a milestone waits for the next timed line
    assert lines_of(out) == []
    shown.begin("NLR discovery")
    time.sleep(0.6)
    shown.end("NLR discovery", 0.6)
    shown.close(finished=True)
    lines = lines_of(out)
    assert len(lines) >= 2 and all(line.startswith("[") and " MB] " in line for line in lines)
    assert "NLR discovery (" in lines[0] and "read 12 traces" in lines[0]
    assert "read 12 traces" not in " ".join(lines[1:])      # shown once
    assert lines[-1].endswith("analysis finished")


def test_a_short_batch_run_prints_nothing(monkeypatch):
    monkeypatch.setattr(config, "PROGRESS_BATCH_S", 5.0)
    out = io.StringIO()
    shown = P.Progress(P.BATCH, stream=out)
    shown.begin("reading traces")
    shown.say("read 3 traces")
    shown.end("reading traces", 0.01)
    shown.close()
    assert lines_of(out) == []


def test_lines_mode_says_milestones_and_long_steps():
    out = io.StringIO()
    shown = P.Progress(P.LINES, stream=out)
    shown.say("read 12 traces")
    for name, seconds in (("lattice merge", 0.2), ("JSMs", 3.25)):
        shown.begin(name)
        shown.end(name, seconds)
    shown.close()
    text = out.getvalue()
    assert "read 12 traces" in text and "JSMs: 3.2 s" in text and "lattice merge" not in text


def test_off_starts_no_thread_and_prints_nothing():
    out = io.StringIO()
    shown = P.Progress(P.OFF, stream=out)
    shown.begin("x")
    shown.say("y")
    shown.end("x", 9.0)
    shown.close()
    assert out.getvalue() == "" and shown._thread is None


@pytest.mark.parametrize("quiet, asked, tty, mode", [
    (False, False, False, "batch"), (False, False, True, True), (False, True, False, True),
    (True, False, False, False), (True, False, True, False)])
def test_the_cli_picks_the_mode(monkeypatch, quiet, asked, tty, mode):
    monkeypatch.setattr(cli_analyze.sys.stderr, "isatty", lambda: tty, raising=False)
    assert cli_analyze._progress_mode(argparse.Namespace(quiet=quiet, progress=asked)) == mode


def test_quiet_and_progress_exclude_each_other(capsys):
    parser = argparse.ArgumentParser()
    cli_analyze.add_parser(parser.add_subparsers())
    assert parser.parse_args(["analyze", "N", "F", "--quiet"]).quiet
    with pytest.raises(SystemExit):
        parser.parse_args(["analyze", "N", "F", "--quiet", "--progress"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_an_analysis_in_batch_mode_logs_its_steps(examples, monkeypatch, capsys):
    monkeypatch.setattr(config, "PROGRESS_BATCH_S", 0.002)        # a line every few ms
    monkeypatch.setattr(P, "STEP_WORTH_A_LINE_S", 0.0)
    api.analyze(examples / "normal", examples / "dlbug", progress="batch")
    err = capsys.readouterr().err
    assert " in this step)" in err and err.rstrip().endswith("analysis finished"), err[-2000:]


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="progress must be"):
        P.mode_for("sometimes")


def test_every_second_of_a_run_is_accounted_for(examples):
    """The results' timings hold the time before the analysis (imports, MPI start) and
    between its outermost steps, so that they sum to the run (issue 38 item 1)."""
    start = time.perf_counter()
    results = api.analyze(examples / "normal", examples / "dlbug")
    wall = time.perf_counter() - start
    t = results.timings
    before, between = t["before the analysis (imports, MPI start)"], t["between the steps (gathers, broadcasts, bookkeeping)"]
    assert before > 0 and 0 <= between < wall
    outermost = sum(v for k, v in t.items() if not k.startswith("peak_rss") and k not in (
        "before the analysis (imports, MPI start)",))
    assert outermost <= wall + 0.05             # nothing counted twice
    assert outermost >= 0.5 * wall              # most of the run is in the steps and between them


def test_a_tree_reduction_counts_as_a_step_not_as_time_between_steps():
    """The lattice merge (``tree_reduce``) is timed as a step of its own; before, its time
    was also counted as between the steps: the 216 x 1 LULESH run on 2 ranks said 0.64 s
    between the steps, 0.54 of them the merge."""
    from difftrace_mpi.engine.choreography import Choreography
    ch = Choreography()
    slowly = lambda value: (time.sleep(0.3), value)[1]      # noqa: E731
    assert ch.tree_reduce("merging", [1, 2], None, None, None, finish=slowly) == [1, 2]
    t = ch.accounted()
    assert t["merging"] >= 0.6
    assert t["between the steps (gathers, broadcasts, bookkeeping)"] < 0.3


def test_milestones_go_on_after_the_attributes(examples, tmp_path, capsys):
    """A terminal sees the lattices, the JSMs and the results file go by, not only the
    steps up to the attributes (issue 38 item 4)."""
    out = tmp_path / "r.h5"
    api.analyze(examples / "normal", examples / "dlbug", progress=True, out=out)
    err = capsys.readouterr().err
    order = [err.find(text) for text in ("attributes gathered", "concept lattices: ", "JSMs and clustering: ",
                                         "results file written: ")]
    assert -1 not in order and order == sorted(order), err[-2000:]
    assert f"results file written: {out.stat().st_size / 1e6:,.1f} MB" in err
