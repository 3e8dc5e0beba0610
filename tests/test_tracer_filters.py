"""Trace-time filters of libparlot.so (parlot-run -N / -F / -D, PARLOT_EXCLUDE / PARLOT_INCLUDE /
PARLOT_DEPTH): what they drop and that what they keep is the unfiltered trace, call for call.

One small MPI program with a known call tree is traced unfiltered and with each filter; the
filtered trace must be the unfiltered one with exactly the dropped calls (entry and return)
taken out, complete and well nested, and readable by the analyzer's reader.
"""
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import starts_processes
from difftrace_mpi.model import RETURN_NAME
from difftrace_mpi.readers import load_run
from test_tracer import PIN, check_run, mpicc, plain_name, run_traced

pytestmark = pytest.mark.integration

# main -> outer -> middle (x4) -> inner -> leaf (x3); middle -> MPI_Barrier, leaf; outer -> leaf;
# main -> inner -> leaf (x3) as well, so inner is both under middle and at depth 2
SRC = r"""
#include <mpi.h>
#include <stdio.h>
volatile int sink;
__attribute__((noinline)) int leaf(int x) { sink = x; return x + 1; }
__attribute__((noinline)) int inner(int x) { int s = 0; for (int i = 0; i < 3; i++) s += leaf(x + i); return s; }
__attribute__((noinline)) int middle(int x) { int v = inner(x); MPI_Barrier(MPI_COMM_WORLD); return v + leaf(v); }
__attribute__((noinline)) int outer(int x) { int s = 0; for (int i = 0; i < 4; i++) s += middle(x + i); return s + leaf(s); }
int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int v = outer(rank);
    int w = inner(v);
    printf("result %d\n", v + w);
    MPI_Finalize();
    return 0;
}
"""


@pytest.fixture(scope="module")
@starts_processes
def prog(tmp_path_factory):
    subprocess.run(["make", "-s", "-C", str(PIN)], check=True)
    d = tmp_path_factory.mktemp("filters")
    return mpicc(SRC, d / "calltree", ["-finstrument-functions"])


def trace(prog, out, opts=(), env=None):
    """Run on 2 ranks; rank 0's main-thread names ('' = a return), checked complete and well nested."""
    r = run_traced(prog, [], out, mpi=2, opts=opts, env=env)
    assert r.returncode == 0, r.stderr
    runs = check_run(out)
    assert sorted(runs) == [(0, 0), (1, 0)]
    names, open_calls = runs[(0, 0)]
    assert open_calls == 0
    return ["" if n == RETURN_NAME else plain_name(n) for n in names]


def calls(events):
    return [n for n in events if n]


def keep(events, exclude=None, include=None, depth=None):
    """The unfiltered events with the filters' rules applied (the specification, README.md
    "Trace-time filters"): an excluded function and everything under it go; with an include
    expression only the included functions and what is under them stay; a depth limit counts
    the kept calls that are open, itself included."""
    out, stack = [], []           # stack: (kept, excluded, included, kept depth)
    for n in events:
        if not n:
            kept = stack.pop()[0]
            if kept:
                out.append("")
            continue
        up = stack[-1] if stack else (False, False, False, 0)
        excluded = up[1] or bool(exclude and re.search(exclude, n))
        included = up[2] or bool(include and re.search(include, n))
        kept = not excluded and (include is None or included) and (depth is None or up[3] < depth)
        stack.append((kept, excluded, included, up[3] + kept))
        if kept:
            out.append(n)
    return out


@pytest.fixture(scope="module")
def unfiltered(prog, tmp_path_factory):
    return trace(prog, tmp_path_factory.mktemp("unfiltered") / "run")


def test_unfiltered_call_tree(unfiltered):
    c = calls(unfiltered)
    assert c.count("middle") == 4 and c.count("inner") == 5 and c.count("leaf") == 20
    assert c.count("MPI_Barrier") == 4 and c[:2] == ["main", "MPI_Init"]


def test_exclude_drops_the_function_and_its_calls_only(prog, unfiltered, tmp_path):
    got = trace(prog, tmp_path / "run", opts=("-N", "^middle$"))
    c = calls(got)
    assert "middle" not in c and "MPI_Barrier" not in c
    assert c.count("inner") == 1 and c.count("leaf") == 4     # main's inner and outer's leaf stay
    assert got == keep(unfiltered, exclude="^middle$")


def test_exclude_repeated_and_by_variable(prog, unfiltered, tmp_path):
    """-N twice is either expression; PARLOT_EXCLUDE is the same as -N."""
    got = trace(prog, tmp_path / "opt", opts=("-N", "^leaf$", "-N", "^MPI_Barrier"))
    assert got == keep(unfiltered, exclude="^leaf$|^MPI_Barrier")
    assert "leaf" not in got and "MPI_Barrier" not in got and calls(got).count("middle") == 4
    assert trace(prog, tmp_path / "env", env={"PARLOT_EXCLUDE": "^leaf$|^MPI_Barrier"}) == got


def test_include_keeps_only_the_subtrees(prog, unfiltered, tmp_path):
    got = trace(prog, tmp_path / "run", opts=("-F", "^inner$"))
    assert set(calls(got)) == {"inner", "leaf"} and calls(got).count("inner") == 5
    assert got == keep(unfiltered, include="^inner$")


def test_depth_limit(prog, unfiltered, tmp_path):
    got = trace(prog, tmp_path / "run", opts=("-D", "2"))
    depth = deepest = 0
    for n in got:
        depth += 1 if n else -1
        deepest = max(deepest, depth)
    assert deepest == 2
    assert set(calls(got)) == {"main", "MPI_Init", "MPI_Comm_rank", "outer", "inner", "MPI_Finalize"}
    assert got == keep(unfiltered, depth=2)


def test_include_with_depth_counts_from_the_included_function(prog, unfiltered, tmp_path):
    got = trace(prog, tmp_path / "run", opts=("-F", "^outer$", "-D", "2"))
    assert set(calls(got)) == {"outer", "middle", "leaf"}
    assert got == keep(unfiltered, include="^outer$", depth=2)


def test_filtered_run_reads_in_the_analyzer(prog, tmp_path):
    out = tmp_path / "run"
    trace(prog, out, opts=("-N", "^middle$", "-D", "3"))
    run = load_run(out)
    assert sorted(x.rank for x in run.traces) == [0, 1] and not run.notes
    t = run.traces[0]
    names = {t.names[v] for v in t.events if v}
    assert "middle" not in names and "outer" in names


def test_bad_filters_are_refused(prog, tmp_path):
    """parlot-run checks its options; by hand, the library says so once and runs untraced."""
    for opts, msg in ((("-N", "(unclosed"), "not a valid extended regular expression"),
                      (("-F", "[z-a]"), "not a valid extended regular expression"),
                      (("-D", "0"), "-D needs a positive number"),
                      (("-D", "two"), "-D needs a positive number")):
        r = subprocess.run([str(PIN / "parlot-run"), "-q", *opts, "-d", str(tmp_path / "x"), "true"],
                           capture_output=True, text=True)
        assert r.returncode == 2 and msg in r.stderr, (opts, r.stderr)
    out = tmp_path / "byhand"
    env = dict(os.environ, LD_PRELOAD=str(PIN / "libparlot.so"), PARLOT_DIR=str(out), PARLOT_EXCLUDE="(")
    r = subprocess.run([str(prog)], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "result" in r.stdout
    lines = [x for x in r.stderr.splitlines() if x.startswith("parlot:")]
    assert len(lines) == 1 and "PARLOT_EXCLUDE" in lines[0] and "running untraced" in lines[0], r.stderr
    assert not any(Path(out).glob("*.0"))
