"""The notebook API a Pipit/Hatchet user expects (issue 39, items 5 and 7): every table of a
Results is a DataFrame; ``Results.events`` gives one trace's events with call/return pairs,
depths and parents (also in a window of a long trace); ``position`` means one thing in every
table, so a divergence row points at the event where its trace first differs; a results
file whose runs moved says so once; the per-trace arrays have names; the text output keys
its jargon in one line each."""
import io
import shutil
import sys

import numpy as np
import pytest

import difftrace_mpi
from difftrace_mpi import readers, results as results_module
from difftrace_mpi.results import tables as results_tables
from difftrace_mpi.errors import DiffTraceError
from difftrace_mpi.model import plain_name
from difftrace_mpi.stages.model import event_window
from difftrace_mpi.views import diffnlr as diffnlr_view, text as text_view

pd = pytest.importorskip("pandas")

SMALL = dict(filters=["11.mpi", "11.every"], attributes=["sing.noFreq"], linkage=["ward", "single"])
TABLES = {"ranking_table": results_tables.RANKING_COLUMNS, "suspects_table": results_tables.SUSPECT_COLUMNS,
          "culprits_table": results_tables.CULPRIT_COLUMNS, "divergence_table": results_tables.DIVERGENCE_COLUMNS,
          "hang_table": results_tables.HANG_COLUMNS, "traces_table": results_tables.TRACE_COLUMNS}


@pytest.fixture(scope="module")
def swap(examples):
    return difftrace_mpi.analyze(examples / "normal", examples / "swapbug", **SMALL)


@pytest.fixture(scope="module")
def hang(examples):
    return difftrace_mpi.analyze(examples / "normal", examples / "dlbug", **SMALL)


def reference(events):
    """Each event's depth, partner, parent and call number with an explicit stack (the
    definition; a return with nothing open closes nothing)."""
    stack, out, calls = [], [], 0
    for i, e in enumerate(events):
        if e:
            out.append({"depth": len(stack), "callee": e, "matching": -1,
                        "parent": stack[-1][0] if stack else -1, "call": calls})
            stack.append((i, e, calls))
            calls += 1
        elif stack:
            j, f, k = stack.pop()
            out[j]["matching"] = i
            out.append({"depth": len(stack), "callee": f, "matching": j,
                        "parent": stack[-1][0] if stack else -1, "call": k})
        else:
            out.append({"depth": 0, "callee": 0, "matching": -1, "parent": -1, "call": -1})
    return out


def as_ints(column):
    """An Int64 column as ints, -1 where missing."""
    return column.fillna(-1).astype("int64").tolist()


# --------------------------------------------------------------------------- tables

def test_every_table_is_a_dataframe_with_its_columns(swap, hang):
    for r in (swap, hang):
        for name, columns in TABLES.items():
            frame = getattr(r, name)()
            assert isinstance(frame, pd.DataFrame), name
            assert list(frame.columns) == list(columns), name
            records = getattr(r, name)(as_frame=False)          # the explicit way to plain rows
            assert isinstance(records, list) and len(records) == len(frame), name
    assert len(hang.hang_table()) > 0 and hang.hang_table().shape[1] == len(results_tables.HANG_COLUMNS)
    assert isinstance(difftrace_mpi.diffnlr(swap, 5).table(), pd.DataFrame)


def test_without_pandas_a_table_is_an_error_not_a_list(swap, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)            # import pandas raises ImportError
    for name in TABLES:
        with pytest.raises(DiffTraceError, match="pandas is not installed"):
            getattr(swap, name)()
    with pytest.raises(DiffTraceError, match="pandas is not installed"):
        swap.events(5)
    assert swap.ranking_table(as_frame=False)[0]["row"] == 1     # asked for plain rows: no pandas needed


def test_position_means_an_event_index_only(swap):
    assert "position" not in swap.ranking_table().columns and "position" not in swap.suspects_table().columns
    assert swap.ranking_table()["row"].tolist() == list(range(1, len(swap.rows) + 1))
    assert set(swap.suspects_table()["row"]) <= set(swap.ranking_table()["row"])
    tables = [getattr(swap, name)() for name in TABLES] + [swap.events(5)]
    assert [list(t.columns).count("position") for t in tables] == [0, 0, 0, 1, 0, 0, 1]


def test_traces_table_names_the_per_trace_arrays(hang):
    t = hang.traces_table()
    assert list(zip(t["rank"], t["thread"])) == hang.objects
    for label, run in (("normal", 0), ("faulty", 1)):
        assert t[f"present_{label}"].tolist() == hang.present[run].tolist()
        assert t[f"complete_{label}"].tolist() == hang.complete[run].tolist()
        assert t[f"calls_{label}"].tolist() == hang.entries[run].tolist()
        assert t[f"open_calls_{label}"].tolist() == list(hang.open_calls[run])
        assert t[f"nlr_tokens_{label}"].tolist() == hang.combo().lengths[run].tolist()
    assert t["stopped"].tolist() == hang.stopped.tolist() and t["stopped"].any()
    assert as_ints(t["calls_from"]) == hang.diverged_at.tolist()
    assert t["nlr_same"].tolist() == hang.combo().same.tolist()
    other = hang.traces_table(combo="11.every.K10")
    assert other["nlr_tokens_normal"].tolist() == hang.combo("11.every.K10").lengths[0].tolist()


# --------------------------------------------------------------------------- events

def test_call_structure_matches_a_stack_in_any_window(monkeypatch):
    """Random streams with returns past the start and calls open at the end, every window,
    the forward scan in tiny chunks: the same as the stack."""
    monkeypatch.setattr(event_window, "SCAN_CHUNK", 3)
    rng = np.random.default_rng(39)
    for _ in range(150):
        n = int(rng.integers(0, 120))
        events = np.where(rng.random(n) < rng.random() * 0.9, 0, rng.integers(1, 6, n)).astype(np.int32)
        want = reference(events.tolist())
        for _ in range(4):
            start = int(rng.integers(0, n + 1))
            stop = int(rng.integers(start, n + 1))
            got = event_window.window(events, start, stop)
            assert got["position"].tolist() == list(range(start, stop))
            for column in ("depth", "callee", "matching", "parent", "call"):
                assert got[column].tolist() == [w[column] for w in want[start:stop]], (column, events, start, stop)


def test_events_are_the_trace_with_depths_of_a_stack(swap, examples):
    trace = readers.load_trace(next(ref for ref in readers.discover_run(examples / "swapbug").refs
                                    if (ref.rank, ref.thread) == (5, 0)))
    events = swap.events(5)
    want = reference(trace.events.tolist())
    assert events["position"].tolist() == list(range(len(trace.events))) == events.index.tolist()
    assert events["event"].tolist() == ["return" if e == 0 else "call" for e in trace.events.tolist()]
    assert events["depth"].tolist() == [w["depth"] for w in want]
    assert events["name"].astype(str).tolist() == [str(trace.names[w["callee"]]) for w in want]
    assert as_ints(events["parent"]) == [w["parent"] for w in want]
    assert as_ints(events["call"]) == [w["call"] for w in want]
    assert events["depth"].max() == 2 and (events["depth"] == 0).sum() == 2         # main and its return
    # one meaning across the API: load_run numbers the same events the same way
    whole = difftrace_mpi.load_run(examples / "swapbug", ranks=[5]).drop(columns="timestamp")
    assert whole.equals(events.drop(columns="timestamp").reset_index(drop=True))


def test_events_pair_every_call_with_its_return(swap):
    for rank, thread in swap.objects:
        events = swap.events(rank, thread)
        calls, returns = events[events["event"] == "call"], events[events["event"] == "return"]
        assert len(calls) == len(returns) == swap.entries[1, swap.object_index((rank, thread))]
        partner = events.loc[calls["matching"].to_numpy()]
        assert (partner["event"] == "return").all()
        assert (partner["matching"].to_numpy() == calls["position"].to_numpy()).all()
        assert (partner["position"].to_numpy() > calls["position"].to_numpy()).all()
        assert (partner["name"].to_numpy() == calls["name"].to_numpy()).all()
        assert (partner["depth"].to_numpy() == calls["depth"].to_numpy()).all()
        assert (as_ints(partner["parent"]) == as_ints(calls["parent"]))


def test_calls_open_at_the_end_of_a_hung_trace_have_no_return(hang):
    table = hang.hang_table()
    assert len(table)
    for row in table.itertuples():
        events = hang.events(row.rank, row.thread)
        still_open = events[(events["event"] == "call") & events["matching"].isna()]
        assert " > ".join(still_open["function"].astype(str)) == row.open_calls


def test_a_window_is_the_slice_of_the_whole(swap):
    whole = swap.events(5)
    for start, stop in ((0, 10), (11, 12), (70, 72), (100, 144), (143, None), (-5, None), (50, 40)):
        part = swap.events(5, start=start, stop=stop)
        assert part.equals(whole.iloc[slice(start, stop)]), (start, stop)
    with pytest.raises(DiffTraceError, match="max_events"):
        swap.events(5, max_events=10)
    assert len(swap.events(5, start=10, stop=20, max_events=10)) == 10


def test_positions_join_the_divergence_table(swap, hang):
    """A divergence row's position is the first event where its trace differs from its
    twin: the events before it are equal, and the first call from there on is the one the
    row names for each run."""
    checked = 0
    for r in (swap, hang):
        for row in r.divergence_table().itertuples():
            faulty, normal = r.events(row.rank, row.thread), r.events(row.rank, row.thread, run="normal")
            p = row.position
            same = ["event", "name", "depth"]          # (each trace has categories of its own names)
            assert faulty[same].iloc[:p].astype(str).values.tolist() == normal[same].iloc[:p].astype(str).values.tolist()
            if p < len(faulty) and p < len(normal):
                assert (faulty.loc[p, "name"], faulty.loc[p, "event"]) != (normal.loc[p, "name"], normal.loc[p, "event"])
            for events, named in ((faulty, row.faulty), (normal, row.normal)):
                if named:
                    after = events.loc[p:]
                    first = after[after["event"] == "call"].iloc[0]
                    assert plain_name(str(first["function"])) == plain_name(named.split()[0]), (row, first)
                    checked += 1
    assert checked >= 16
    five = swap.divergence_table().set_index("rank").loc[5]
    assert swap.events(5).loc[five["position"], "function"] == "MPI_Send" == five["faulty"]
    assert swap.events(5, run="normal").loc[five["position"], "function"] == "MPI_Recv" == five["normal"]


def test_call_numbers_count_the_calls_entered(hang):
    """Call numbers (the hang table's calls_from, Results.diverged_at) are events()' ``call``
    column: 0, 1, ... over the calls the analysis counted."""
    t = hang.traces_table()
    for row in t[t["stopped"]].head(3).itertuples():
        events = hang.events(row.rank, row.thread)
        calls = events[events["event"] == "call"]
        assert calls["call"].tolist() == list(range(row.calls_faulty))


def test_a_moved_run_gives_one_clear_error(examples, tmp_path):
    normal, faulty = tmp_path / "normal", tmp_path / "swapbug"
    shutil.copytree(examples / "normal", normal)
    shutil.copytree(examples / "swapbug", faulty)
    out = tmp_path / "swap.h5"
    fresh = difftrace_mpi.analyze(normal, faulty, out=out, **SMALL)
    assert fresh.events(5).loc[70, "function"] == "MPI_Send"
    faulty.rename(tmp_path / "moved")
    for r in (fresh, difftrace_mpi.load(out)):
        with pytest.raises(DiffTraceError) as err:
            r.events(5)
        message = str(err.value)
        assert "\n" not in message and str(faulty) in message and "moved" in message and "path=" in message
        assert r.events(5, run="normal").loc[70, "function"] == "MPI_Recv"       # the other run is still there
        moved = r.events(5, path=tmp_path / "moved")
        assert moved.loc[70, "function"] == "MPI_Send"
        r.close()
    # a run changed since: a trace gone, a trace with other calls
    (tmp_path / "moved" / "r5.t0.txt").unlink()
    with pytest.raises(DiffTraceError, match="not there any more"):
        fresh.events(5, path=tmp_path / "moved")
    with open(normal / "r5.t0.txt", "a") as fh:
        fh.write("> MPI_Barrier\n< MPI_Barrier\n")
    with pytest.raises(DiffTraceError, match="changed since the analysis"):
        fresh.events(5, run="normal")
    with pytest.raises(DiffTraceError, match="'normal' or 'faulty'"):
        fresh.events(5, run="good")


# --------------------------------------------------------------------------- the keys of the text output

def test_the_text_output_keys_the_ranking_and_the_diffnlr(swap):
    out = io.StringIO()
    text_view.print_analysis(swap, stream=out)
    lines = out.getvalue().splitlines()
    ranking = lines.index(text_view.RANKING_KEY)
    assert lines[ranking - 1].lstrip().startswith(("...", "~", "*", str(min(len(swap.rows), 10))))
    for word in ("11.mpi", "K =", "sing/doub", "noFreq", "B-score", "k ="):
        assert word in text_view.RANKING_KEY
    assert lines.count(diffnlr_view.KEY) == 1                     # under the first diffNLR only
    key = lines.index(diffnlr_view.KEY)
    assert lines[key - 1].startswith("L") and " = [" in lines[key - 1]   # after the loop bodies
    assert "L1^7" in diffnlr_view.KEY and '"- "' in diffnlr_view.KEY and '"+ "' in diffnlr_view.KEY


def test_the_diffnlr_key_stays_within_the_bound(swap):
    d = difftrace_mpi.diffnlr(swap, 5)
    assert diffnlr_view.KEY not in d.text() and diffnlr_view.KEY in d.text(key=True)
    assert diffnlr_view.KEY in d.text(key=True, max_lines=None)
    for cap in (diffnlr_view.MIN_LINES, 15, 40):
        shown = d.text(key=True, max_lines=cap).splitlines()
        assert len(shown) <= cap and diffnlr_view.KEY in shown
        assert shown[-1] == d.text(max_lines=cap).splitlines()[-1]          # the summary still ends it
