"""The verdict (stages/diagnose/verdict.py) on the committed example runs: kind, culprit, time step
and call; renumbered ranks renumber the answer; normal against normal says no difference;
the default text output stays bounded; any number of MPI ranks gives the same verdict."""
import io
import json
import shutil
import sys

import pytest

from conftest import EXAMPLES, run_cli
from difftrace_mpi.engine.pipeline import analyze
from difftrace_mpi.views.text import print_analysis

sys.path.insert(0, str(EXAMPLES.parents[1] / "programs"))
from scenarios import SCENARIOS  # noqa: E402

TRACES = EXAMPLES.parent
MAX_TEXT_LINES = 200

# (group, faulty run, expected kind, culprit rank, culprit thread, time step or None, call)
# the time step is the program's own loop counter + 1 where the bug fires (scenarios.py)
EXPECTED = [
    ("halo", "lost", "hang", 2, 0, 7, "MPI_Isend"),
    ("halo", "extra", "changed", 2, 0, 7, "residual"),
    ("oddeven-real", "swapbug", "changed", 5, 0, 8, "MPI_Send"),
    ("oddeven-real", "dlbug", "hang", 5, 0, 8, None),         # plain names: the least progressed
    ("ilcs", "nocrit", "changed", 2, 3, None, "GOMP_critical_start"),
    ("ilcs", "wrongsize", "hang", 1, 0, None, None),
    ("ilcs", "wrongsize_annotated", "hang", 1, 0, None, "MPI_Allreduce"),
    ("ilcs", "wrongop_annotated", "changed", 0, 0, None, "MPI_Allreduce"),
]


def normal_of(group, name):
    return TRACES / group / ("normal_annotated" if name.endswith("_annotated") else "normal")


def plain(name):
    return name.split("[", 1)[0] if name else name


def test_expectations_follow_the_scenario_table():
    """The culprits above are where scenarios.py injects the bugs (not tuned here)."""
    table = {(s.group, s.name): s for s in SCENARIOS}
    for group, name, kind, rank, thread, _, _ in EXPECTED:
        s = table[(group, name)]
        assert s.bug_rank == rank and (s.bug_thread or 0) == thread
        assert (kind == "hang") == s.hangs


@pytest.mark.parametrize("group,name,kind,rank,thread,step,call", EXPECTED)
def test_verdict_names_the_culprit(group, name, kind, rank, thread, step, call):
    v = analyze(normal_of(group, name), TRACES / group / name).verdict
    assert v["kind"] == kind
    first = v["culprits"][0]
    assert (first["rank"], first["thread"]) == (rank, thread), v["summary"]
    assert v["tied"] == 1
    if step is not None:
        assert v["where"]["iteration"] == step
    if call is not None:
        assert call in (plain(v["where"]["normal"]), plain(v["where"]["faulty"]))
    assert v["summary"].startswith({"hang": "hang", "changed": "changed", "crash": "crash"}[kind])


def renumbered_copy(src, dst, perm):
    """A copy of a ParLOT run whose processes carry the ranks ``perm[rank]``."""
    shutil.copytree(src, dst)
    for f in dst.glob("*.rank"):
        f.write_text(f"{perm[int(f.read_text())]}\n")
    return dst


@pytest.mark.parametrize("group,name", [("halo", "lost"), ("halo", "extra"), ("ilcs", "wrongop_annotated")])
def test_renumbered_ranks_renumber_the_answer(tmp_path, group, name):
    n_ranks = len(list((TRACES / group / name).glob("*.rank")))
    perm = {r: (r * 5 + 3) % n_ranks for r in range(n_ranks)}       # a permutation for 4 and 6 ranks
    assert sorted(perm.values()) == list(range(n_ranks))
    before = analyze(normal_of(group, name), TRACES / group / name).verdict
    after = analyze(renumbered_copy(normal_of(group, name), tmp_path / "n", perm),
                    renumbered_copy(TRACES / group / name, tmp_path / "f", perm)).verdict
    assert before["tied"] == 1
    assert (perm[before["culprits"][0]["rank"]], before["culprits"][0]["thread"]) == \
        (after["culprits"][0]["rank"], after["culprits"][0]["thread"])
    # ties after the first are listed by rank: compare them as sets, per clock, below the
    # last clock shown (the list is cut there)
    def by_clock(culprits, mapping):
        last = culprits[-1]["clock"]
        return sorted((c["clock"], mapping(c["rank"]), c["thread"], c["why"]) for c in culprits
                      if c["clock"] is not None and last is not None and c["clock"] < last)
    assert by_clock(before["culprits"], perm.get) == by_clock(after["culprits"], int)
    assert before["candidates"] == after["candidates"]
    assert before["where"] == after["where"] and before["kind"] == after["kind"]


@pytest.mark.parametrize("group", ["halo", "ilcs", "oddeven-real"])
def test_normal_against_itself_is_no_difference(group):
    res = analyze(TRACES / group / "normal", TRACES / group / "normal")
    assert res.verdict["kind"] == "none" and res.no_difference and not res.verdict["culprits"]
    out = io.StringIO()
    print_analysis(res, stream=out)
    assert "Verdict: NO DIFFERENCE" in out.getvalue()


def test_a_change_every_trace_shares_is_not_no_difference(tmp_path):
    """Every rank loses the same call: the clustering cannot see it (JSM_D = 0), the
    verdict does, and names the first trace, as a tie."""
    from difftrace_mpi.readers import parlot
    run_n, run_f = tmp_path / "n", tmp_path / "f"
    run_n.mkdir()
    run_f.mkdir()
    names = ["<return>", "main", "MPI_Irecv", "MPI_Wait", "MPI_Allreduce"]
    for rank in range(4):
        for run, drop in ((run_n, False), (run_f, True)):
            events = [1]
            for step in range(6):
                events += [2, 0] + ([] if drop and step == 2 else [3, 0]) + [4, 0]
            events.append(0)
            parlot.write_info(run / f"parlot.h.{100 + rank}.info", names[1:])
            (run / f"parlot.h.{100 + rank}.rank").write_text(f"{rank}\n")
            parlot.write_trace(run / f"parlot.h.{100 + rank}.0", events)
    res = analyze(run_n, run_f)
    v = res.verdict
    assert v["kind"] == "changed" and not res.no_difference
    assert v["tied"] == 4 and v["culprits"][0]["rank"] == 0
    assert v["where"]["normal"] == "MPI_Wait" and v["where"]["iteration"] == 3
    # said once for all: "every trace, ranks 0-3 skipped MPI_Wait in iteration 3 of 6 ..."
    assert v["summary"].startswith("changed behaviour: every trace, ranks 0-3 skipped MPI_Wait in iteration 3")


@pytest.mark.parametrize("group,name", [(g, n) for g, n, *_ in EXPECTED])
def test_default_text_output_is_bounded(group, name):
    out = io.StringIO()
    print_analysis(analyze(normal_of(group, name), TRACES / group / name), stream=out)
    text = out.getvalue()
    assert text.startswith("normal:") and "Verdict:" in text
    assert len(text.splitlines()) <= MAX_TEXT_LINES


ZOO = EXAMPLES.parents[2] / "bench" / "zoo" / "traces"


@pytest.mark.integration
@pytest.mark.parametrize("normal,faulty", [
    (normal_of("halo", "lost"), TRACES / "halo" / "lost"),
    (normal_of("ilcs", "wrongsize_annotated"), TRACES / "ilcs" / "wrongsize_annotated"),
    (ZOO / "minilulesh-27" / "normal", ZOO / "minilulesh-27" / "wrongtag"),
    (ZOO / "minilulesh-8" / "normal", ZOO / "minilulesh-8" / "truncate"),
    # good runs that differ in call order: the order-free blocks are folded per shard, the
    # worker threads from what their main thread taught
    (ZOO / "arrival-4" / "normal", ZOO / "arrival-4" / "threadsegv"),
    (ZOO / "arrival-8" / "normal", ZOO / "arrival-8" / "nosend"),
], ids=["halo-lost", "ilcs-wrongsize", "minilulesh27-wrongtag", "minilulesh8-truncate", "arrival4-threadsegv",
        "arrival8-nosend"])
def test_verdict_is_identical_on_1_2_and_3_mpi_ranks(tmp_path, normal, faulty):
    verdicts = []
    for ranks in (1, 2, 3):
        res = run_cli("analyze", normal, faulty, "--json", mpi=ranks)
        assert res.returncode == 0, res.stderr
        data = json.loads(res.stdout)
        verdicts.append((data["verdict"], data["divergences"]))
    assert verdicts[0] == verdicts[1] == verdicts[2]
    assert verdicts[0][0]["culprits"]


def write_run(run, traces, names):
    """A ParLOT run from {(rank, thread): events} (one process per rank)."""
    from difftrace_mpi.readers import parlot
    run.mkdir()
    for (rank, thread), events in traces.items():
        pid = 100 + rank
        parlot.write_info(run / f"parlot.h.{pid}.info", names[1:])
        (run / f"parlot.h.{pid}.rank").write_text(f"{rank}\n")
        parlot.write_trace(run / f"parlot.h.{pid}.{thread}", events)
    return run


def omp_program(chunks, skip=None):
    """2 ranks x 2 threads: main does 5 steps of (region, Allreduce); in each region the
    worker takes ``chunks[step]`` work items (dynamic scheduling: varies between runs).
    ``skip``: (rank, step) whose main thread skips its Allreduce... never: a real bug."""
    names = ["<return>", "main", "GOMP_parallel", "main._omp_fn.0", "work", "MPI_Allreduce", "GOMP_barrier"]
    traces = {}
    for rank in range(2):
        main, worker = [1], []
        for step in range(5):
            main += [2, 3, 4, 0, 6, 0, 0, 0]
            if skip != (rank, step):
                main += [5, 0]
            worker += [3] + [4, 0] * chunks[rank][step] + [6, 0, 0]
        traces[(rank, 0)] = main + [0]
        traces[(rank, 1)] = worker
    return traces, names


def test_several_normal_runs_discount_scheduling_noise(tmp_path):
    """Two normal runs whose worker threads took different work counts (dynamic
    scheduling); a third run that varies the same way is no difference given both
    normals, a difference given one; a real bug (a skipped Allreduce) is still found."""
    runs = {}
    for label, chunks, skip in (("a", [[2, 3, 2, 3, 2], [3, 2, 3, 2, 3]], None),
                                ("b", [[3, 2, 2, 3, 2], [3, 2, 3, 3, 2]], None),
                                ("c", [[2, 2, 3, 3, 2], [3, 3, 2, 2, 3]], None),
                                ("bug", [[2, 2, 3, 3, 2], [3, 3, 2, 2, 3]], (1, 3))):
        traces, names = omp_program(chunks, skip)
        runs[label] = write_run(tmp_path / label, traces, names)
    alone = analyze(runs["a"], runs["c"]).verdict
    assert alone["kind"] == "changed"                       # one normal run: the workers differ
    both = analyze(runs["a"], runs["c"], also_normal=(runs["b"],))
    assert both.verdict["kind"] == "none", both.verdict["summary"]
    # the calls that vary between the normal runs are named and left out of the comparison
    assert any("left out of the comparison" in n and ": work" in n for n in both.notes), both.notes
    bug = analyze(runs["a"], runs["bug"], also_normal=(runs["b"],)).verdict
    assert bug["kind"] == "changed"
    assert (bug["culprits"][0]["rank"], bug["culprits"][0]["thread"]) == (1, 0)
    assert bug["where"]["normal"] == "MPI_Allreduce" and bug["where"]["iteration"] == 4


def test_entry_only_traces_of_a_hung_run(tmp_path):
    """Entry-only text traces (one name per line): faulty traces that are strict prefixes
    of their normal twins count as stopped; the verdict is a hang and names the rank that
    left the normal path (it skipped a send) before the others stopped."""
    normal, faulty = tmp_path / "n", tmp_path / "f"
    normal.mkdir()
    faulty.mkdir()
    step = ["exchange", "MPI_Send", "MPI_Recv", "compute", "MPI_Allreduce"]
    for rank in range(4):
        body = ["main", "MPI_Init"] + step * 8 + ["MPI_Finalize"]
        (normal / f"r{rank}.t0.txt").write_text("\n".join(body) + "\n")
        cut = ["main", "MPI_Init"] + step * 4 + (["exchange", "MPI_Recv"] if rank == 2 else step[:3])
        (faulty / f"r{rank}.t0.txt").write_text("\n".join(cut) + "\n")
    res = analyze(normal, faulty)
    v = res.verdict
    assert v["kind"] == "hang", v["summary"]
    assert res.stopped.sum() == 3               # ranks 0, 1, 3: prefixes; rank 2 left the path
    assert (v["culprits"][0]["rank"], v["culprits"][0]["status"]) == (2, "missing")
    assert v["where"]["normal"] == "MPI_Send" and v["where"]["iteration"] == 5
    assert sum(g["count"] for g in v["victims"]) == 3


def steps(rank, swap):
    """Six steps of work, a Send/Recv pair (even ranks send first), a barrier; ``swap``:
    the pair's order swapped from step 4 on."""
    body = []
    for step in range(6):
        pair = [3, 0, 4, 0] if rank % 2 == 0 else [4, 0, 3, 0]
        if swap and step >= 3:
            pair = pair[2:] + pair[:2]
        body += [6, 0] + pair + [5, 0]
    return body


def test_a_change_most_traces_share_gives_way_to_the_ranking(tmp_path):
    """The faulty run was started differently: every rank makes one extra call at the
    start (the same change), and rank 2 also swaps two calls later.  The shared change
    singles out nobody; the ranking table's suspect leads, the shared change is said once."""
    names = ["<return>", "main", "parse", "MPI_Send", "MPI_Recv", "MPI_Barrier", "work"]
    normal = {(rank, 0): [1] + steps(rank, swap=False) + [0] for rank in range(6)}
    faulty = {(rank, 0): [1, 2, 0] + steps(rank, swap=rank == 2) + [0] for rank in range(6)}
    res = analyze(write_run(tmp_path / "n", normal, names), write_run(tmp_path / "f", faulty, names))
    v = res.verdict
    assert v["shared_change"]["traces"] == 6 and "extra call to parse" in v["shared_change"]["what"]
    assert (v["culprits"][0]["rank"], v["culprits"][0]["thread"]) == (2, 0)
    assert "singled out by the ranking table" in v["culprits"][0]["why"]
    assert "6 traces share" in v["summary"] and v["where"]["iteration"] is None
