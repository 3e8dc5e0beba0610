"""What a notebook user reads: the events table of a run (``load_run``), the call structure
under it (``stages.model.event_window.window``), a Results shown verdict first, typed table columns."""
import numpy as np
import pytest

import difftrace_mpi
from conftest import EXAMPLES
from difftrace_mpi.errors import DiffTraceError
from difftrace_mpi.stages.model.event_window import window

pandas = pytest.importorskip("pandas")


def reference_levels(events):
    """The same with an explicit stack (the definition)."""
    stack, depth, callee = [], [], []
    for e in events:
        if e == 0:
            if stack:
                callee.append(stack.pop())
                depth.append(len(stack))
            else:
                callee.append(0)
                depth.append(None)
        else:
            depth.append(len(stack))
            callee.append(e)
            stack.append(e)
    return depth, callee


@pytest.mark.parametrize("seed", range(30))
def test_call_levels_match_a_stack(seed):
    rng = np.random.default_rng(seed)
    events, open_calls = [], 0
    for _ in range(rng.integers(1, 300)):
        if open_calls and rng.random() < 0.45:
            events.append(0)
            open_calls -= 1
        else:
            events.append(int(rng.integers(1, 6)))
            open_calls += 1
    w = window(np.array(events, dtype=np.int32))
    depth, callee = w["depth"], w["callee"]
    want_depth, want_callee = reference_levels(events)
    assert callee.tolist() == want_callee
    assert depth.tolist() == want_depth


def test_a_return_past_the_start_has_no_callee():
    w = window(np.array([0, 3, 0], dtype=np.int32))
    assert w["callee"].tolist() == [0, 3, 3]


def test_load_run_is_the_trace_event_for_event():
    from difftrace_mpi.readers import load_run as read_run
    run = read_run(EXAMPLES / "swapbug")
    events = difftrace_mpi.load_run(EXAMPLES / "swapbug")
    assert len(events) == sum(len(t.events) for t in run.traces)
    assert events["thread"].dtype == np.int64 and events["rank"].dtype == np.int64
    for t in run.traces:
        mine = events[(events["rank"] == t.rank) & (events["thread"] == t.thread)]
        assert mine["position"].tolist() == list(range(len(t.events)))
        calls = mine["event"] == "call"
        assert mine.loc[calls, "name"].tolist() == [str(t.names[i]) for i in t.events if i != 0]
        assert (mine["event"] == "return").sum() == int((np.asarray(t.events) == 0).sum())
    # a return carries the name and depth of the call it closes
    first = events[(events["rank"] == 5)].reset_index(drop=True)
    init = first.index[(first["function"] == "MPI_Init")].tolist()
    assert first.loc[init, "event"].tolist() == ["call", "return"] and first.loc[init, "depth"].tolist() == [1, 1]


def test_load_run_selects_ranks_and_says_when_none_match():
    events = difftrace_mpi.load_run(EXAMPLES / "swapbug", ranks=[2, 5])
    assert sorted(events["rank"].unique().tolist()) == [2, 5]
    with pytest.raises(DiffTraceError, match="no traces of ranks"):
        difftrace_mpi.load_run(EXAMPLES / "swapbug", ranks=[99])


def test_load_run_without_pandas_says_so(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(DiffTraceError, match="pandas is not installed"):
        difftrace_mpi.load_run(EXAMPLES / "swapbug")


def test_results_show_the_verdict_first(dl):
    page = dl._repr_html_()
    assert page.index("Verdict: hang") < page.index("<table>") < page.index("ranking rows")
    first = dl.verdict["culprits"][0]
    assert f"<td>{first['rank']}</td><td>{first['thread']}</td>" in page
    assert "&gt;" in page and " > " not in page.split("</table>")[0]      # call paths escaped
    assert repr(dl).startswith("<Results hang: ") and len(repr(dl)) < 300


def test_a_trace_key_with_gaps_stays_an_integer(dl):
    table = dl.suspects_table()
    assert str(table["thread"].dtype) == "Int64"
    assert table.loc[table["level"] == "process", "thread"].isna().all()
    assert (table.loc[table["level"] == "thread", "thread"] >= 0).all()
