"""Loop timing (timing.py): per-loop iteration times from NLRs and timestamps, and the
flags for loops whose time changed while their structure did not (AutomaDeD's timing
faults).  Unit tests on hand-made arrays, a pure-Python oracle, and end to end on OTF2
archives written with the otf2 package (one rank 5x slower, same structure)."""
import json

import h5py
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import EXAMPLES, assert_same_h5, needs_otf2, run_cli
from difftrace_mpi.stages.model import filters, nlr
from difftrace_mpi.stages.diagnose import timing as T
from difftrace_mpi.stages.classify.grid import Grid
from difftrace_mpi.engine.pipeline import analyze
from difftrace_mpi.errors import DiffTraceError
from difftrace_mpi.kernels.nlr import LoopTable
from difftrace_mpi.views.text import print_analysis
from difftrace_mpi import store
from difftrace_mpi.store import write as write_results


# --------------------------------------------------------------------------- oracle

def oracle_instances(ids, counts, table, times):
    """Every loop instance by walking the NLR recursively, iteration by iteration:
    sorted [(loop, count, start, span)] (the definition, in the slowest possible way)."""
    out = []

    def walk(b_ids, b_counts, pos):
        for i, c in zip(b_ids.tolist(), b_counts.tolist()):
            if i >= 0:
                pos += 1
                continue
            body = table.body(-i - 1)
            starts = []
            for _ in range(c):
                starts.append(pos)
                pos = walk(*body, pos)
            out.append((-i - 1, c, starts[0], int(times[starts[-1]]) - int(times[starts[0]])))
        return pos

    assert walk(np.asarray(ids), np.asarray(counts), 0) == len(times)
    return sorted(out, key=lambda x: (x[2], x[0]))


def as_rows(instances):
    return sorted(zip(*(a.tolist() for a in instances)), key=lambda x: (x[2], x[0]))


# --------------------------------------------------------------------------- filters

@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=0, max_size=80), st.sampled_from(["11.every", "01.every", "11.mpi",
                                                                                "01.mpi", "10.mpi.mem"]))
def test_kept_positions_pick_the_filtered_events(values, spec_text):
    names = np.array(["<return>", "main", "MPI_Send", "MPI_Recv", "malloc", "compute", "foo@plt"], dtype=object)
    events = np.array(values, dtype=np.int32)
    spec = filters.parse_filter(spec_text)
    pos = filters.kept_positions(events, names, spec)
    assert pos.dtype == np.int64 and np.all(np.diff(pos) > 0)
    assert np.array_equal(events[pos], filters.apply_filter(events, names, spec))


# --------------------------------------------------------------------------- instances

def table_of(*bodies):
    t = LoopTable()
    for ids, counts in bodies:
        t.add_body(ids, counts)
    return t


def test_one_loop_spans_start_to_start():
    # a L0^3 b with L0 = [x y]: iterations start at filtered positions 1, 3, 5
    table = table_of(([7, 8], [1, 1]))
    ids, counts = np.array([5, -1, 6]), np.array([1, 3, 1])
    times = np.array([0, 10, 12, 30, 31, 70, 71, 500])
    loop, count, start, span = T.loop_instances(ids, counts, table, times)
    assert loop.tolist() == [0] and count.tolist() == [3] and start.tolist() == [1]
    assert span.tolist() == [70 - 10]                      # 2 whole iterations; the last one's end unused
    assert T.instance_means(count, span).tolist() == [30.0]


def test_nested_loops():
    # a (b L0^3 d)^2 e, L0 = [c]: L1 = [b L0^3 d] spans 5 events per iteration
    table = table_of(([3], [1]), ([2, -1, 4], [1, 3, 1]))
    ids, counts = np.array([1, -2, 5]), np.array([1, 2, 1])
    #         a  b   c   c   c   d   b    c    c    c    d    e
    times = [0, 10, 11, 13, 16, 20, 100, 120, 150, 190, 195, 900]
    assert T.iteration_lengths(table).tolist() == [1, 5]
    got = as_rows(T.loop_instances(ids, counts, table, np.array(times)))
    assert got == [(1, 2, 1, 90), (0, 3, 2, 5), (0, 3, 7, 70)]
    assert got == oracle_instances(ids, counts, table, times)
    rows = T.trace_loops(0, 4, ids, counts, table, np.array(times))
    assert rows["loop"].tolist() == [0, 1] and rows["object"].tolist() == [4, 4]
    assert rows["instances"].tolist() == [2, 1] and rows["iterations"].tolist() == [6, 2]
    assert rows["periods"].tolist() == [4, 1] and rows["span_ns"].tolist() == [75, 90]
    assert T.mean_ns(rows).tolist() == [75 / 4, 90.0]


def test_timestamps_must_match_the_expansion():
    table = table_of(([7], [1]))
    with pytest.raises(ValueError, match="expands to 3 events but 4"):
        T.loop_instances(np.array([-1]), np.array([3]), table, np.arange(4))


def test_no_loops():
    rows = T.trace_loops(1, 0, np.array([1, 2]), np.array([1, 1]), LoopTable(), np.array([5, 6]))
    assert all(rows[c].size == 0 for c in T.COLUMNS)


def _random_trace(rng):
    """A sequence with nested repetitions, so NLR finds loops inside loops."""
    out = []
    for _ in range(rng.integers(1, 5)):
        inner = list(rng.integers(1, 6, size=rng.integers(1, 3)))
        body = list(rng.integers(1, 6, size=rng.integers(0, 3))) + inner * int(rng.integers(1, 5))
        out += body * int(rng.integers(1, 6)) + list(rng.integers(1, 6, size=rng.integers(0, 3)))
    return np.array(out, dtype=np.int64)


@pytest.mark.parametrize("seed", range(8))
def test_instances_equal_the_oracle(seed):
    rng = np.random.default_rng(seed)
    seqs = [_random_trace(rng) for _ in range(6)]
    nlrs, table = nlr.reduce_all(seqs, 10)
    assert any((n.ids < 0).any() for n in nlrs)
    nested = 0
    for seq, nl in zip(seqs, nlrs):
        times = np.cumsum(rng.integers(1, 1000, size=seq.size))
        got = as_rows(T.loop_instances(nl.ids, nl.counts, table, times))
        assert got == oracle_instances(nl.ids, nl.counts, table, times)
        nested += len(got) - int((nl.ids < 0).sum())
    assert nested > 0                                       # inner instances were checked too


# --------------------------------------------------------------------------- the rule

def table_from(rows):
    """A timing table from [(run, object, loop, instances, iterations, mean ns[, mean ns
    outside MPI])] (no MPI calls: the same mean on both clocks)."""
    cols = {c: [] for c in T.COLUMNS}
    for run, obj, loop, inst, iters, mean, *own in rows:
        periods = iters - inst
        own = own[0] if own else mean
        for c, v in zip(T.COLUMNS, (run, obj, loop, inst, iters, periods, int(round(mean * periods)),
                                    int(round(own * periods)))):
            cols[c].append(v)
    return T.merge_tables([{c: np.array(v, dtype=np.int64) for c, v in cols.items()}])


KEYS = [(r, 0) for r in range(6)]


def test_slow_rank_with_the_same_structure_is_flagged():
    normal = [(0, o, 0, 1, 11, 100 + 2 * o) for o in range(6)]
    faulty = [(1, o, 0, 1, 11, 100 + 2 * o) for o in range(6) if o != 2] + [(1, 2, 0, 1, 11, 520)]
    flags = T.compare_runs(table_from(normal + faulty), KEYS)
    assert [(f.rank, f.thread, f.loop) for f in flags] == [(2, 0, 0)]
    f = flags[0]
    assert (f.normal_ns, f.faulty_ns, f.iterations) == (104.0, 520.0, 11) and f.ratio == pytest.approx(5.0)


def test_changed_structure_is_not_a_timing_fault():
    normal = [(0, o, 0, 1, 11, 100) for o in range(6)] + [(0, 4, 1, 2, 8, 50)]
    faulty = ([(1, o, 0, 1, 11, 100) for o in range(6) if o not in (2, 3)]
              + [(1, 2, 0, 1, 12, 500),          # one more iteration, and slower
                 (1, 3, 0, 2, 11, 500)]          # same iterations, split in two instances
              + [(1, 4, 1, 2, 8, 50), (1, 5, 1, 2, 8, 500)])     # loop 1 new in object 5
    assert T.compare_runs(table_from(normal + faulty), KEYS) == []
    # the same slowdowns with the structure kept are flagged: the rule saw them
    same = [(1, o, 0, 1, 11, 500 if o in (2, 3) else 100) for o in range(6)]
    assert [f.rank for f in T.compare_runs(table_from(normal + same), KEYS)] == [2, 3]


def test_thresholds_ratio_and_spread():
    spread = [100, 1000, 2000, 3000, 4000, 5000]            # the normal run's traces differ a lot
    normal = [(0, o, 0, 1, 5, m) for o, m in enumerate(spread)]
    faulty = [(1, 0, 0, 1, 5, 250),        # 2.5x, but a change far inside the normal spread
              (1, 1, 0, 1, 5, 1900),       # 1.9x: below the ratio
              (1, 2, 0, 1, 5, 2000), (1, 3, 0, 1, 5, 3000),
              (1, 4, 0, 1, 5, 40000),      # 10x and far beyond the spread (3 x 1.4826 x 1500)
              (1, 5, 0, 1, 5, 500)]        # 10x faster, but a change of 4500: inside it
    flags = T.compare_runs(table_from(normal + faulty), KEYS)
    assert [(f.rank, round(f.ratio, 3)) for f in flags] == [(4, 10.0)]
    # with a looser rule, the others pass too (the thresholds decide, not the data)
    loose = T.compare_runs(table_from(normal + faulty), KEYS, min_ratio=1.5, k=0.0)
    assert [f.rank for f in loose] == [4, 5, 0, 1]
    assert [f.rank for f in T.compare_runs(table_from(normal + faulty), KEYS, k=2.0)] == [4, 5]


def test_faster_is_flagged_too():
    normal = [(0, o, 0, 1, 5, 1000 + o) for o in range(6)]
    faulty = [(1, o, 0, 1, 5, 1000 + o) for o in range(5)] + [(1, 5, 0, 1, 5, 250)]
    flags = T.compare_runs(table_from(normal + faulty), KEYS)
    assert [(f.rank, round(f.ratio, 3)) for f in flags] == [(5, 0.249)]


def test_ranking_and_same_nlr():
    normal = [(0, o, 0, 1, 4, 100) for o in range(6)]
    faulty = [(1, 0, 0, 1, 4, 300), (1, 1, 0, 1, 4, 900), (1, 2, 0, 1, 4, 100), (1, 3, 0, 1, 4, 900),
              (1, 4, 0, 1, 4, 100), (1, 5, 0, 1, 4, 100)]
    same = np.array([True, False, True, True, True, True])
    flags = T.compare_runs(table_from(normal + faulty), KEYS, same)
    assert [(f.rank, f.same_nlr) for f in flags] == [(1, False), (3, True), (0, True)]


def test_own_clock_leaves_out_time_inside_mpi_calls():
    names = ["<return>", "main", "MPI_Send", "compute", "MPI_Recv", "PMPI_Recv", "MPI_helper_internal"]
    waiting = T.waiting_mask(names)
    assert waiting.tolist() == [False, False, True, False, True, True, True]
    #          main Send  <  compute  <  Recv PMPI  <   <   helper <  <(main)
    events = [1, 2, 0, 3, 0, 4, 5, 0, 0, 6, 0, 0]
    times = [0, 10, 30, 35, 60, 70, 71, 171, 172, 180, 190, 200]
    own = T.own_clock(np.array(events, dtype=np.int32), np.array(times), waiting)
    # inside MPI: 10-30 (Send), 70-172 (Recv with PMPI_Recv nested), 180-190 (an MPI_ name)
    outside = [0, 10, 10, 15, 40, 50, 50, 50, 50, 58, 58, 68]
    assert own.tolist() == outside
    assert T.own_clock(np.array(events, dtype=np.int32), np.array(times),
                       np.zeros(len(names), bool)).tolist() == times
    # a trace killed inside a call: the open call's time stays inside
    assert T.own_clock(np.array([1, 2, 3], np.int32), np.array([0, 5, 9]), waiting).tolist() == [0, 5, 5]


def test_trace_timing_from_raw_events():
    names = ["<return>", "main", "MPI_Send", "compute"]
    # main (compute < MPI_Send <) x 3 <: under 11.mpi the NLR is L0^3 with L0 = [MPI_Send]
    events = np.array([1] + [3, 0, 2, 0] * 3 + [0], dtype=np.int32)
    times = np.array([0] + [t for i in range(3) for t in (100 * i + 1, 100 * i + 61, 100 * i + 70,
                                                           100 * i + 90)] + [400])
    spec = filters.parse_filter("11.mpi")
    kept = filters.kept_positions(events, names, spec)
    nlrs, table = nlr.reduce_all([events[kept]], 10)
    rows = T.trace_timing(0, 0, nlrs[0].ids, nlrs[0].counts, table, events, times, kept, T.waiting_mask(names))
    assert rows["loop"].tolist() == [0] and rows["iterations"].tolist() == [3]
    assert rows["span_ns"].tolist() == [200]                 # MPI_Send at 70, 170, 270
    assert rows["own_ns"].tolist() == [200 - 2 * 20]         # minus two sends of 20 ns


def test_either_clock_can_flag():
    # normal: 1000 ns per iteration, 200 of them outside MPI
    normal = [(0, o, 0, 1, 9, 1000 + o, 200 + o) for o in range(6)]
    faulty = [(1, 0, 0, 1, 9, 1000, 200),
              (1, 1, 0, 1, 9, 1800, 1000),      # own work 5x, wall only 1.8x: the culprit
              (1, 2, 0, 1, 9, 2800, 202),       # waits 2.8x longer inside MPI: held up by it
              (1, 3, 0, 1, 9, 1300, 303),       # 1.3x and 1.5x: neither clock passes
              (1, 4, 0, 1, 9, 1004, 204), (1, 5, 0, 1, 9, 1005, 205)]
    flags = T.compare_runs(table_from(normal + faulty), KEYS)
    assert [f.rank for f in flags] == [1, 2]                # ranked by the largest factor that passed
    assert flags[0].own_ratio == pytest.approx(1000 / 201) and flags[0].ratio == pytest.approx(1800 / 1001)
    assert flags[1].own_ratio == pytest.approx(1.0) and flags[1].ratio == pytest.approx(2800 / 1002)
    assert set(flags[0].as_dict()) == set(T.TimingFlag._fields)


def test_the_clock_choice_decides_which_clock_may_flag():
    # the case of test_either_clock_can_flag: rank 1 passes on its own work only, rank 2 on wall time only
    normal = [(0, o, 0, 1, 9, 1000 + o, 200 + o) for o in range(6)]
    faulty = [(1, 0, 0, 1, 9, 1000, 200), (1, 1, 0, 1, 9, 1800, 1000), (1, 2, 0, 1, 9, 2800, 202),
              (1, 3, 0, 1, 9, 1300, 303), (1, 4, 0, 1, 9, 1004, 204), (1, 5, 0, 1, 9, 1005, 205)]
    table = table_from(normal + faulty)
    assert [f.rank for f in T.compare_runs(table, KEYS)] == [1, 2]
    assert [f.rank for f in T.compare_runs(table, KEYS, clock="both")] == [1, 2]
    own = T.compare_runs(table, KEYS, clock="own")
    wall = T.compare_runs(table, KEYS, clock="wall")
    assert [f.rank for f in own] == [1] and [f.rank for f in wall] == [2]
    # both clocks are still reported, whichever one flagged
    assert own[0].ratio == pytest.approx(1800 / 1001) and wall[0].own_ratio == pytest.approx(1.0)
    # the ratio: 2.8x passes 2.5, not 3
    assert [f.rank for f in T.compare_runs(table, KEYS, min_ratio=2.5, clock="wall")] == [2]
    assert T.compare_runs(table, KEYS, min_ratio=3.0, clock="wall") == []
    view = T.timing_view([[table]], KEYS, min_ratio=2.5, clock="own")
    assert view["rule"] == {"min_ratio": 2.5, "k": T.MAD_K, "clock": "own"}
    assert [f.rank for f in view["flags"]] == [1]
    for bad in ({"clock": "cpu"}, {"min_ratio": 0.5}, {"min_ratio": float("nan")}, {"min_ratio": float("inf")}):
        with pytest.raises(DiffTraceError):
            T.compare_runs(table, KEYS, **bad)


def test_merge_does_not_depend_on_the_order_of_parts():
    rng = np.random.default_rng(3)
    parts = [{c: rng.integers(0, 50, size=4) for c in T.COLUMNS} for _ in range(5)]
    for p, run_obj in zip(parts, [(0, 1), (1, 1), (0, 0), (1, 0), (0, 2)]):
        p["run"][:], p["object"][:] = run_obj
        p["loop"] = np.arange(4)
    a = T.merge_tables(parts)
    b = T.merge_tables(parts[::-1])
    assert all(np.array_equal(a[c], b[c]) for c in T.COLUMNS)
    assert list(zip(a["run"].tolist(), a["object"].tolist()))[::4] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]


def test_format_ns():
    assert [T.format_ns(x) for x in (850, 1440, 35_000, 123_456, 1_250_000, 2e9)] == \
        ["850 ns", "1.44 us", "35.0 us", "123 us", "1.25 ms", "2.00 s"]


# --------------------------------------------------------------------------- end to end (OTF2)
# the archives (conftest.write_run) and the otf2_runs fixture are shared with test_report

GRID = Grid(filters=("11.mpi", "01.every"), attributes=("sing.actual",), linkages=("ward",))


@needs_otf2
def test_slow_rank_is_flagged_end_to_end(otf2_runs, tmp_path):
    normal, faulty, _ = otf2_runs
    res = analyze(normal, faulty, GRID)
    flags = res.timing_flags()
    assert set(flags) == {"11.mpi.K10", "01.every.K10"}
    for cname, fl in flags.items():
        assert {(f.rank, f.thread) for f in fl} == {(2, 0), (3, 0)}, cname
        assert fl[0].rank == 2                              # the culprit first: its own work grew 5x
        for f in fl:
            assert f.same_nlr
            if f.rank == 2:
                assert f.own_ratio == pytest.approx(5.0)
            else:                                           # the partner only waited longer
                assert f.own_ratio == pytest.approx(1.0) and f.ratio == pytest.approx(6220 / 1420)
    culprit = flags["11.mpi.K10"][0]
    assert res.loop_labels("11.mpi.K10", culprit.loop) == ["MPI_Send", "MPI_Recv"]
    # per iteration: 10 intervals of 120 ns outside MPI (600 in the faulty run), 2 of 60 inside
    assert (culprit.iterations, culprit.normal_ns, culprit.faulty_ns, culprit.own_normal_ns,
            culprit.own_faulty_ns) == (8, 1320, 6120, 1200, 6000)
    # keeping returns: the outer loop and the nested kernel loop of rank 2, both 5x
    bodies = sorted(len(res.loop_labels("01.every.K10", f.loop)) for f in flags["01.every.K10"] if f.rank == 2)
    assert len(bodies) == 2 and bodies[0] < bodies[1]
    # rank 1 is slower too, but its loop ran twice more: a structural suspect, not a timing one
    table = res.combos["11.mpi.K10"].loop_timing["table"]
    o1 = res.objects.index((1, 0))
    iters = {run: table["iterations"][(table["object"] == o1) & (table["run"] == run)].tolist() for run in (0, 1)}
    assert iters == {0: [8], 1: [10]}
    assert res.rows[0].top_threads[0][0] == (1, 0)

    data = res.as_dict()
    assert [(f["rank"], f["thread"], f["body"]) for f in data["timing"]["11.mpi.K10"]["flags"]] == \
        [(2, 0, ["MPI_Send", "MPI_Recv"]), (3, 0, ["MPI_Send", "MPI_Recv"])]
    assert data["timing"]["11.mpi.K10"]["rule"] == {"min_ratio": T.MIN_RATIO, "k": T.MAD_K, "clock": "both"}

    out = tmp_path / "r.h5"
    write_results(res, out)
    with store.read(out) as stored:
        for cname, fl in flags.items():
            back = stored.combos[cname].loop_timing
            assert [f.as_dict() for f in back["flags"]] == [f.as_dict() for f in fl]
            assert all(np.array_equal(back["table"][c], res.combos[cname].loop_timing["table"][c])
                       for c in T.COLUMNS)


@needs_otf2
def test_timing_only_fault_is_reported_in_the_text(otf2_runs):
    import io
    normal, _, only = otf2_runs
    res = analyze(normal, only, GRID)
    assert res.no_difference                                # the structure is identical everywhere...
    text = io.StringIO()
    print_analysis(res, stream=text)
    out = text.getvalue()
    assert "Timing (loops whose iteration time changed while structure did not)" in out
    lines = [line for line in out.splitlines() if " per iteration " in line]
    assert lines and all("rank 2 thread 0" in line and "5.00x slower" in line for line in lines)
    assert "Only the loop timing above changed." in out
    # the ticket summary says it too, naming the largest change
    from difftrace_mpi.views.text import ticket_summary
    ticket = ticket_summary(res, [])
    biggest = max((f for fl in res.timing_flags().values() for f in fl), key=lambda f: max(f.ratio, 1 / f.ratio))
    assert ticket.startswith("No difference") and (biggest.rank, biggest.thread) == (2, 0)
    assert f"Timing: rank 2 thread 0, loop L{biggest.loop} (" in ticket and f"{biggest.ratio:.2f}x slower" in ticket
    # ...and the same run against itself shows no timing section
    text = io.StringIO()
    same = analyze(normal, normal, GRID)
    print_analysis(same, stream=text)
    assert "Timing (" not in text.getvalue() and "Timing:" not in ticket_summary(same, [])


@needs_otf2
@pytest.mark.integration
def test_same_result_on_1_and_2_mpi_ranks(otf2_runs, tmp_path):
    normal, faulty, _ = otf2_runs
    outs = []
    for ranks in (1, 2):
        out = tmp_path / f"r{ranks}.h5"
        res = run_cli("analyze", normal, faulty, "--out", out, "--json", mpi=ranks)
        assert res.returncode == 0, res.stderr
        flags = json.loads(res.stdout)["timing"]
        assert {(f["rank"], f["thread"]) for fl in flags.values() for f in fl["flags"]} == {(2, 0), (3, 0)}
        outs.append((out, res.stdout))
        with h5py.File(out, "r") as f:
            assert f["timing"].attrs["mpi_ranks"] == ranks          # really ran on that many ranks
            assert "combos/11.mpi.K10/loop_timing/flags/ratio" in f
    assert_same_h5(outs[0][0], outs[1][0])
    assert outs[0][1] == outs[1][1]


@needs_otf2
@pytest.mark.integration
def test_timing_clock_and_ratio_options(otf2_runs, tmp_path):
    """analyze --timing-clock / --timing-ratio: rank 3 only waited longer inside MPI calls
    (flagged on wall time alone), so --timing-clock own drops it; under --timing-ratio
    4.8, rank 2 passes on its own work alone (5x; wall 4.64x), so --timing-clock wall
    drops it.  The rule is stored with the flags."""
    normal, faulty, _ = otf2_runs
    quick = ("--filters", "11.mpi", "--attributes", "sing.actual", "--linkage", "ward")

    def flagged(*options, out=None):
        res = run_cli("analyze", normal, faulty, *quick, "--json", *options, *(("--out", out) if out else ()))
        assert res.returncode == 0, res.stderr
        view = json.loads(res.stdout)["timing"]["11.mpi.K10"]
        return {(f["rank"], f["thread"]) for f in view["flags"]}, view["rule"]

    out = tmp_path / "own.h5"
    got, rule = flagged("--timing-clock", "own", out=out)
    assert got == {(2, 0)} and rule == {"min_ratio": 2.0, "k": T.MAD_K, "clock": "own"}
    with store.read(out) as stored:
        assert stored.combos["11.mpi.K10"].loop_timing["rule"] == rule
    with h5py.File(out, "r") as f:
        assert f["combos/11.mpi.K10/loop_timing"].attrs["clock"] == "own"
    got, rule = flagged("--timing-clock", "wall", "--timing-ratio", "4.8")
    assert got == set() and rule == {"min_ratio": 4.8, "k": T.MAD_K, "clock": "wall"}
    # the same rules in process: the defaults and the other halves of each case
    grid = Grid(filters=("11.mpi",), attributes=("sing.actual",), linkages=("ward",))

    def flags(**rule):
        return {(f.rank, f.thread) for f in analyze(normal, faulty, grid, **rule).timing_flags()["11.mpi.K10"]}
    assert flags() == flags(timing_clock="both") == flags(timing_clock="wall") == {(2, 0), (3, 0)}
    assert flags(timing_ratio=4.8) == flags(timing_ratio=4.8, timing_clock="own") == {(2, 0)}
    # a bad rule: one line, exit code 2, before any trace is read
    res = run_cli("analyze", normal, faulty, *quick, "--timing-ratio", "0.5")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "timing ratio" in res.stderr
    res = run_cli("analyze", normal, faulty, "--timing-clock", "cpu")
    assert res.returncode == 2 and "--timing-clock" in res.stderr


def test_traces_without_timestamps_get_no_timing():
    res = analyze(EXAMPLES / "normal", EXAMPLES / "swapbug",
                  Grid(filters=("11.mpi",), attributes=("sing.noFreq",), linkages=("ward",)))
    assert res.timing_flags() is None
    assert all(c.loop_timing is None for c in res.combos.values())
    assert "timing" not in res.as_dict()
