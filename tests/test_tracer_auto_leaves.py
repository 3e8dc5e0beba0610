"""Automatic leaves: the tracer's default (issue 38, item 5).

- a function some thread called more than N times in a row without a recorded callee
  (PARLOT_AUTO_LEAVES=N, parlot-run -c N; default 10000) is counted, not recorded, from then
  on in every thread; <prefix>.<pid>.counted names it with its calls, the .end record says
  how many functions and calls;
- its first calls are in the trace: recorded + counted = every call, exactly;
- a function whose callees all became leaves follows (pair, calling get only);
- a leaf that later calls something (late, calling tick once) stays a leaf: the callee is
  recorded under the leaf's caller, the stream stays well nested;
- the reader leaves out the calls of every function a compared run counted, in both runs:
  runs promoting at other moments (another threshold) or not at all (parlot-run -e) compare
  as "no difference"; a changed call count of a leaf shows in the count notes;
- parlot-run -e records every call, as before.
"""
import os
import subprocess

import numpy as np
import pytest

from conftest import starts_processes
from difftrace_mpi.model import RETURN_NAME
from difftrace_mpi.readers import discover_run, load_run
from difftrace_mpi.readers import parlot_counted as pc
from difftrace_mpi.readers.parlot import parse_end, read_parlot_thread
from test_tracer import PIN, ROOT, cc, check_run, mpicc, run_traced
from test_tracer_leaves import BUSY_THREADS      # four threads calling mid -> leaf

PROG = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
/* get: a hot leaf; pair: calls get only (a leaf once get is one); late: a leaf for three
 * steps, then calls tick once; step: calls MPI (never a leaf); extra: rank 1 calls get
 * `extra` more times in step 2 (a fault only the counts show) */
static volatile int ticks;
__attribute__((noinline)) static double get(const double *a, int i) { return a[i]; }
__attribute__((noinline)) static double pair(const double *a, int i) { return get(a, i) * get(a, i); }
__attribute__((noinline)) static void tick(void) { ticks++; }
__attribute__((noinline)) static double late(const double *a, int i, int k, int n)
{
    if (k == 3 && i == n / 2)
        tick();
    return a[i];
}
__attribute__((noinline)) static double step(const double *a, int n, int k, int extra, int rank)
{
    double s = 0, r;
    for (int i = 0; i < n; i++)
        s += pair(a, i) + late(a, i, k, n);
    if (k == 2 && rank == 1)
        for (int i = 0; i < extra; i++)
            s += get(a, i);
    MPI_Allreduce(&s, &r, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return r;
}
int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int n = argc > 1 ? atoi(argv[1]) : 20000, extra = argc > 2 ? atoi(argv[2]) : 0;
    double *a = malloc(sizeof(double) * n);
    for (int i = 0; i < n; i++)
        a[i] = i;
    double s = 0;
    for (int k = 0; k < 4; k++)
        s += step(a, n, k, extra, rank);
    printf("%g\n", s);
    MPI_Finalize();
    return 0;
}
"""

N = 20000
LEAVES = {"get", "pair", "late"}
CALLS = {"get": 4 * 2 * N, "pair": 4 * N, "late": 4 * N}


def analyze(a, b):
    r = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "difftrace_mpi", "analyze", str(a), str(b)],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def counted_files(d):
    return {p.name: pc.read_counted(p) for p in sorted(d.glob("*" + pc.SUFFIX))}


def innermost_at(names, target):
    """The name of the innermost open call at each entry of ``target``."""
    stack, out = [], []
    for nm in names:
        if nm == RETURN_NAME:
            stack.pop()
            continue
        if nm == target:
            out.append(stack[-1] if stack else None)
        stack.append(nm)
    return out


# --------------------------------------------------------------------------- the reader alone

def test_drop_calls_leaves_nested_and_trailing():
    mask = np.array([False, False, True, False])          # id 2 is a leaf
    ev = np.array([1, 2, 0, 3, 2, 0, 0, 2, 3, 0, 0, 0], dtype=np.int32)   # 2 at the end has a callee 3
    out, _, dropped = pc.drop_calls(ev, mask)
    assert out.tolist() == [1, 3, 0, 3, 0, 0] and dropped == 6
    assert pc.drop_calls(ev, None)[0] is ev
    # a thread that ends calling the leaf in a loop (killed): its last calls stay
    tail = np.array([1, 3, 0] + [2, 0] * 5, dtype=np.int32)
    assert pc.drop_calls(tail, mask, keep_tail=5)[0].tolist() == tail.tolist()
    assert pc.drop_calls(tail, mask, keep_tail=6)[0].tolist() == [1, 3, 0]
    # ... but not a return of a call opened before the tail
    cut = np.array([1, 2, 3, 0] + [2, 0] * 5 + [0], dtype=np.int32)
    assert pc.drop_calls(cut, mask, keep_tail=5)[0].tolist() == [1, 3, 0] + [2, 0] * 5
    # a thread that died inside a leaf: its last entry stays
    died = np.array([1, 2, 0, 3, 0, 2], dtype=np.int32)
    assert pc.drop_calls(died, mask)[0].tolist() == [1, 3, 0, 2]
    # fold positions move with the events
    folds = np.array([[7, 2, 10, 0]], dtype=np.int64)
    assert pc.drop_calls(ev, mask, folds)[1].tolist() == [[3, 2, 10, 0]]


def test_parse_counted_skips_what_does_not_parse():
    text = "# head\n5\t3\tDomain::x(int)\nbad line\n7\tx\ty\n9\t1\tstd::vector<double>::operator[](unsigned long)\n12\t"
    assert pc.parse_counted(text) == {"Domain::x(int)": (5, 3),
                                      "std::vector<double>::operator[](unsigned long)": (9, 1)}


# --------------------------------------------------------------------------- real runs

@pytest.fixture(scope="module")
@starts_processes
def runs(build_dir, tmp_path_factory):
    """2 ranks each: two default runs, one promoting earlier (-c 100), one recording every
    call (-e), one whose rank 1 calls get 5 times more (default)."""
    d = tmp_path_factory.mktemp("auto")
    exe = mpicc(PROG, d / "autoprog", ("-finstrument-functions",))
    out = {}
    for name, args, opts in (("a", [N], ()), ("b", [N], ()), ("early", [N], ("-c", "100")),
                             ("every", [N], ("-e",)), ("extra", [N, 5], ())):
        r = run_traced(exe, args, d / name, mpi=2, opts=opts)
        assert r.returncode == 0, r.stderr[-2000:]
        out[name] = d / name
    return out


@pytest.mark.integration
def test_hot_leaves_are_counted_and_named(runs):
    d = runs["a"]
    counted = counted_files(d)
    assert len(counted) == 2                          # one per process
    for leaves in counted.values():
        assert set(leaves) == LEAVES, leaves          # not step, main, tick, MPI
        for name, (calls, n) in leaves.items():
            assert calls == CALLS[name] and 0 < n < calls, (name, calls, n)
    ends = [parse_end(p.read_text()) for p in d.glob("*.end")]
    for e in ends:
        assert e["how"] == "finalized" and e["auto_leaves"] == 10000 and e["auto_leaf_functions"] == 3, e
    assert sorted(e["auto_leaf_calls"] for e in ends) == sorted(sum(n for _, n in leaves.values())
                                                               for leaves in counted.values())
    header = next(d.glob("*.counted")).read_text().splitlines()[0]
    assert header.startswith("# parlot automatic leaves") and "10000 times in a row" in header


@pytest.mark.integration
def test_recorded_plus_counted_is_every_call(runs):
    traces = check_run(runs["a"])                     # complete, well nested
    by_rank = {}
    for p in runs["a"].glob("*.counted"):
        rank = int(p.with_suffix(".rank").read_text())
        by_rank[rank] = pc.read_counted(p)
    for (rank, _), (names, depth) in traces.items():
        assert depth == 0
        for leaf, (calls, n) in by_rank[rank].items():
            assert names.count(leaf) == calls - n, (rank, leaf)
            assert names.count(leaf) <= 10001 + 2 * 10001, (rank, leaf)    # the first calls only
        assert names.count("step") == 4 and names.count("main") == 1
        # late became a leaf before it called tick: tick is recorded under late's caller
        assert innermost_at(names, "tick") == ["step"], rank


@pytest.mark.integration
def test_every_call_with_e(runs):
    assert not list(runs["every"].glob("*.counted"))
    for p in runs["every"].glob("*.end"):
        assert "auto_leaves" not in p.read_text()
    for (rank, _), (names, _) in check_run(runs["every"]).items():
        for leaf, calls in CALLS.items():
            assert names.count(leaf) == calls, (rank, leaf)
        assert innermost_at(names, "tick") == ["late"]


@pytest.mark.integration
def test_earlier_threshold_promotes_earlier(runs):
    a = {k: v[0] for k, v in check_run(runs["a"]).items()}
    early = {k: v[0] for k, v in check_run(runs["early"]).items()}
    for key in a:
        assert early[key].count("get") < a[key].count("get")
        assert early[key].count("get") <= 2 * 101 + 1


@pytest.mark.integration
def test_reader_leaves_the_counted_calls_out(runs):
    assert not [n for n in discover_run(runs["a"]).notes if "ignored" in n]
    traces = load_run(runs["a"]).traces
    assert traces
    for t in traces:
        names = [str(t.names[i]) for i in t.events]
        assert not LEAVES & set(names) and "tick" in names and "step" in names
        assert pc.AUTO_NOTE in t.notes
    # the same events as the run that recorded every call, once the same calls are left out
    drop = pc.counted_leaves([runs["a"]]).names
    assert drop == LEAVES
    assert pc.shared_cache([runs["a"], runs["every"]]) == {pc.CACHE_KEY: LEAVES}
    every = discover_run(runs["every"])
    for ref, t in zip(discover_run(runs["a"]).refs, traces):
        other = next(r for r in every.refs if (r.rank, r.thread) == (ref.rank, ref.thread))
        e = read_parlot_thread(other.path, other.info, other.rank, other.thread, drop=drop)
        assert [str(e.names[i]) for i in e.events] == [str(t.names[i]) for i in t.events]


@pytest.mark.integration
def test_runs_compare_as_no_difference(runs):
    for other in ("b", "early", "every"):
        out = analyze(runs["a"], runs[other])
        assert "Verdict: NO DIFFERENCE" in out, (other, out[-3000:])
    assert "automatic leaves" in analyze(runs["early"], runs["a"])


@pytest.mark.integration
def test_changed_leaf_count_shows_in_the_counts(runs):
    out = analyze(runs["a"], runs["extra"])
    assert "Verdict: NO DIFFERENCE" in out                  # the traces cannot show it ...
    assert "note: rank 1: the automatic leaf get was called 160,000 times" in out    # the analysis says it
    notes = pc.counted_leaves([runs["a"], runs["extra"]]).notes
    assert len(notes) == 1 and notes[0].startswith("rank 1: the automatic leaf get was called 160,000 times") \
        and "160,005 times" in notes[0], notes                # ... the counts do
    assert not pc.counted_leaves([runs["a"], runs["b"]]).notes


@pytest.mark.integration
def test_events_read_again_as_the_analysis_read_them(runs):
    """``Results.events`` leaves out the calls the analysis left out: those of the leaves
    the other run counted (here ``every`` recorded every call and counted none), so its
    call count matches the analysed trace's, and no counted function shows."""
    import difftrace_mpi
    res = difftrace_mpi.analyze(runs["a"], runs["every"])
    assert res.no_difference
    for run in ("normal", "faulty"):
        frame = res.events(0, 0, run=run)
        assert not set(frame["function"].astype(str)) & LEAVES, run
        assert int((frame["event"] == "call").sum()) == int(res.entries[("normal", "faulty").index(run), 0])


@pytest.mark.integration
def test_threads_count_exactly(build_dir, tmp_path):
    """Four threads: a leaf becomes one process-wide; every thread's recorded calls plus the
    process's counted calls are every call, while the flusher completes files every ms."""
    exe = cc(BUSY_THREADS, tmp_path / "busy", "-pthread")
    out = tmp_path / "run"
    r = run_traced(exe, [], out, env={"PARLOT_FLUSH_MS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    runs = check_run(out)
    (counted,) = counted_files(out).values()
    assert set(counted) == {"leaf", "mid"} and counted["leaf"][0] == 800000 and counted["mid"][0] == 400000
    workers = {k: v for k, v in runs.items() if k[1] > 0}
    assert len(workers) == 4 and all(depth == 0 for _, depth in workers.values())
    for leaf, (calls, n) in counted.items():
        assert sum(names.count(leaf) for names, _ in workers.values()) == calls - n


@pytest.mark.integration
def test_bad_threshold(build_dir, tmp_path):
    exe = cc("int main(void) { return 0; }\n", tmp_path / "nop")
    r = subprocess.run([str(PIN / "parlot-run"), "-c", "x", "-d", str(tmp_path / "t"), str(exe)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "-c needs a positive number" in r.stderr
    r = run_traced(exe, [], tmp_path / "t2", env={"PARLOT_AUTO_LEAVES": "12x"})
    assert r.returncode == 2 and "PARLOT_AUTO_LEAVES must be a number" in r.stderr
    # the library preloaded by hand says so once and runs untraced
    e = dict(os.environ, LD_PRELOAD=str(PIN / "libparlot.so"), PARLOT_DIR=str(tmp_path / "t3"),
             PARLOT_AUTO_LEAVES="-1")
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, env=e)
    assert r.returncode == 0 and "PARLOT_AUTO_LEAVES='-1' is not a number" in r.stderr
    assert not list((tmp_path / "t3").glob("*.0"))


LIVELOCK = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
static volatile int ready;
__attribute__((noinline)) static int flag(void) { return ready; }
__attribute__((noinline)) static double step(int k, int bug, int rank)
{
    double s = k, r;
    if (bug && rank == 1 && k == 2)
        while (!flag())
            ;
    else
        (void)flag();
    MPI_Allreduce(&s, &r, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return r;
}
int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, bug = argc > 1 ? atoi(argv[1]) : 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    double s = 0;
    for (int k = 0; k < 4; k++)
        s += step(k, bug, rank);
    printf("%g\n", s);
    MPI_Finalize();
    return 0;
}
"""


@pytest.mark.integration
@starts_processes
def test_livelock_on_a_leaf_stays_visible(build_dir, tmp_path):
    """Rank 1 calls flag() in a loop until killed: flag becomes a leaf in the middle of the
    loop, and the reader keeps the calls the trace ends with, so the verdict is the livelock."""
    from test_tracer import scenarios
    exe = mpicc(LIVELOCK, tmp_path / "livelock", ("-finstrument-functions",))
    r = run_traced(exe, [0], tmp_path / "normal", mpi=2)
    assert r.returncode == 0, r.stderr[-2000:]
    cmd = ["timeout", "-s", "TERM", "3", scenarios.venv_mpiexec(), "-n", "2", str(PIN / "parlot-run"), "-q",
           "-d", str(tmp_path / "faulty"), str(exe), "1"]
    subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=dict(os.environ, OMP_WAIT_POLICY="passive"))
    (counted,) = [c for c in counted_files(tmp_path / "faulty").values() if c]
    assert set(counted) == {"flag"} and counted["flag"][1] > 0
    out = analyze(tmp_path / "normal", tmp_path / "faulty")
    assert "Verdict: HANG" in out and "rank 1 thread 0 kept repeating flag" in out, out[-3000:]


SEGV = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) static double get(const double *a, int i) { return a[i]; }
__attribute__((noinline)) static double step(const double *a, int n, int k, int bug, int rank)
{
    double s = 0, r;
    for (int i = 0; i < n; i++)
        s += get((bug && rank == 1 && k == 2 && i == n / 2) ? (const double *)0 : a, i);
    MPI_Allreduce(&s, &r, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return r;
}
int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, bug = argc > 1 ? atoi(argv[1]) : 0, n = 20000;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    double *a = malloc(sizeof(double) * n), s = 0;
    for (int i = 0; i < n; i++)
        a[i] = i;
    for (int k = 0; k < 4; k++)
        s += step(a, n, k, bug, rank);
    printf("%g\n", s);
    MPI_Finalize();
    return 0;
}
"""


@pytest.mark.integration
@starts_processes
def test_fault_inside_a_leaf_ends_the_trace_in_it(build_dir, tmp_path):
    """Rank 1 dies of SIGSEGV inside get, long an automatic leaf: the tracer records get's
    entry, so its trace ends inside get, as the trace recording every call (-e) does."""
    exe = mpicc(SEGV, tmp_path / "segv", ("-finstrument-functions",))
    for name, opts, args in (("normal", (), [0]), ("auto", (), [1]), ("every", ("-e",), [1])):
        run_traced(exe, args, tmp_path / name, mpi=2, opts=opts)
    end = next(p for p in (tmp_path / "auto").glob("*.end") if "SIGSEGV" in p.read_text())
    assert "how=signal" in end.read_text()
    cache = pc.shared_cache([tmp_path / n for n in ("normal", "auto", "every")])
    assert cache[pc.CACHE_KEY] == {"get"}

    def events(run):
        from difftrace_mpi.readers import load_trace
        return {(r.rank, r.thread): [str(t.names[i]) for i in t.events]
                for r in discover_run(tmp_path / run).refs for t in [load_trace(r, dict(cache))]}
    auto, every = events("auto"), events("every")
    assert auto == every
    assert auto[(1, 0)][-2:] == ["step", "get"]
    out = analyze(tmp_path / "normal", tmp_path / "auto")
    assert "Verdict: CRASH" in out and "rank 1 thread 0 called get" in out, out[-3000:]
