"""What a shard holds of its traces (issue 20, memory that grows with summaries): one array
per distinct content, a faulty trace that is a prefix of its twin as a view of it, events as
uint16 ids where the names fit, and results that do not depend on any of this."""
import numpy as np
import pytest

from conftest import ROOT, assert_same_h5
from difftrace_mpi import store
from difftrace_mpi.engine import pipeline, reading as reading_module
from difftrace_mpi.engine.choreography import Choreography, SerialComm
from difftrace_mpi.readers import discover_run
from difftrace_mpi.stages.compare import twins
from difftrace_mpi.stages.model.numbering import global_names, local_names

ZOO = ROOT / "bench" / "zoo" / "traces"
EXAMPLES = ROOT / "examples" / "traces"


def read_pair(normal, faulty):
    ch = Choreography(SerialComm())
    shard = pipeline.Shard([discover_run(normal), discover_run(faulty)], ch)
    cache = {}
    listed = shard.names([], True, cache)
    names = global_names([local_names(listed)])[0] if listed is not None else None
    reading = reading_module.Reading(names, True, cache)
    traces = reading.read(ch, shard.refs)
    if names is None:
        reading.number(traces, [], global_names([local_names(traces)])[0])
    return traces, reading.events


def test_contents_share_equal_traces_and_prefixes():
    contents = twins.Contents()
    a = np.array([1, 2, 0, 3, 0, 0], dtype=np.int32)
    kept_a, h_a = contents.add(a)
    kept_b, h_b = contents.add(a.copy())            # equal content: the first array itself
    assert kept_b is kept_a and h_b == h_a
    prefix, _ = contents.add(a[:4].copy(), twin=kept_a)
    assert np.shares_memory(prefix, kept_a) and prefix.tolist() == [1, 2, 0, 3]
    other, _ = contents.add(np.array([1, 2, 9], dtype=np.int32), twin=kept_a)   # not a prefix: its own
    assert not np.shares_memory(other, kept_a) and other.tolist() == [1, 2, 9]
    longer, _ = contents.add(np.array([1, 2, 0, 3, 0, 0, 4], dtype=np.int32), twin=kept_a)
    assert not np.shares_memory(longer, kept_a)


def test_shared_prefix_finds_the_first_difference_past_a_chunk(monkeypatch):
    monkeypatch.setattr(twins, "CHUNK", 4)
    a = np.arange(1, 20, dtype=np.int32)
    b = a.copy()
    b[9] = 99
    assert twins.shared_prefix(a, b) == 9
    assert twins.shared_prefix(a, a[:7]) == 7 and twins.shared_prefix(a, a.copy()) == len(a)
    assert twins.shared_prefix(a, np.array([5], dtype=np.int32)) == 0


def test_a_hung_runs_traces_are_held_as_views_of_their_twins():
    """A hang stops most ranks on the normal path: their faulty traces (prefixes of the
    normal ones) take no memory of their own."""
    run = ZOO / "halo-4"
    traces, events = read_pair(run / "normal", run / "nowait")
    normal = {t.key: ev for (ri, t), ev in zip(traces, events) if ri == 0}
    views = [t.key for (ri, t), ev in zip(traces, events)
             if ri == 1 and len(ev) and np.shares_memory(ev, normal[t.key])]
    assert views, "no faulty trace was held as a view of its twin"
    assert all(ev.dtype == np.uint16 for ev in events)


@pytest.mark.parametrize("pair", [("oddeven-real", "swapbug"), ("oddeven", "dlbug")])
def test_results_do_not_depend_on_how_events_are_held(tmp_path, monkeypatch, pair):
    """uint16 or int32 events (ParLOT, names read first; text, names after the events):
    the same results file."""
    normal, faulty = EXAMPLES / pair[0] / "normal", EXAMPLES / pair[0] / pair[1]
    outs = []
    for compact in (True, False):
        monkeypatch.setattr(reading_module, "COMPACT_IDS", reading_module.COMPACT_IDS if compact else 0)
        results = pipeline.analyze(normal, faulty, choreography=Choreography(SerialComm()))
        outs.append(tmp_path / f"{compact}.h5")
        store.write(results, outs[-1])
    assert_same_h5(*outs)


def test_nlrs_are_held_as_int32_where_they_fit():
    from difftrace_mpi.stages.model import nlr
    small = nlr.compact(np.array([3, -1, 4], dtype=np.int64), np.array([1, 7, 1], dtype=np.int64))
    assert small.ids.dtype == small.counts.dtype == np.int32
    assert small.ids.tolist() == [3, -1, 4] and small.counts.tolist() == [1, 7, 1]
    huge = nlr.compact(np.array([3, -1], dtype=np.int64), np.array([1, 2 ** 31], dtype=np.int64))
    assert huge.counts.dtype == np.int64 and huge.counts.tolist() == [1, 2 ** 31]
    reduced, _ = nlr.reduce_all([np.array([1, 2, 1, 2, 1, 2, 3], dtype=np.int32)], 10)
    assert reduced[0].ids.dtype == np.int32 and nlr.tokens(reduced[0], ["r", "a", "b", "c"]) == [("L0", 3), ("c", 0)]
