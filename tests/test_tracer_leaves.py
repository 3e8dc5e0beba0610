"""The tracer's leaf filter and the core's layout (issue 24, items 2 and 3).

- parlot-run -P N (PARLOT_LEAF_PROBE): each process writes <prefix>.<pid>.leaves, the functions
  some thread called at least N times with no recorded callee;
- parlot-run -l LIST (PARLOT_LEAVES): listed functions are counted, never recorded; the .end
  record says how many calls were left out, and the reader notes it;
- two runs given the same list trace identically (the analysis says "no difference");
- the signal path needs no large stack: a program whose alternate signal stack is 16 KiB
  with a guard page below still ends by its SIGTERM with complete files;
- make -C pin with an MPI compiler wrapper that has no mpi.h fails with one clear message.
"""
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import starts_processes
from difftrace_mpi.model import RETURN_NAME
from difftrace_mpi.readers.parlot import LEAF_NOTE, parse_end, read_end
from difftrace_mpi.readers import discover_run, load_run
from test_tracer import PIN, ROOT, cc, check_run, mpicc, run_traced

pytestmark = pytest.mark.integration

PROG = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
/* get: a leaf, 2n calls per step; pair: calls get only (its subtree is listed: listed);
 * tick: a leaf called n/1000 times per step (too rarely to be listed); rare: calls tick in
 * one call of 1000 (a callee that is not listed: not listed) */
static volatile int ticks;
__attribute__((noinline)) static double get(const double *a, int i) { return a[i]; }
__attribute__((noinline)) static double pair(const double *a, int i) { return get(a, i) * get(a, i); }
__attribute__((noinline)) static void tick(void) { ticks++; }
__attribute__((noinline)) static double rare(const double *a, int i)
{
    if (i % 1000 == 0)
        tick();
    return a[i];
}
__attribute__((noinline)) static double step(const double *a, int n)
{
    double s = 0, r;
    for (int i = 0; i < n; i++)
        s += pair(a, i) + rare(a, i);
    MPI_Allreduce(&s, &r, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return r;
}
int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    double *a = malloc(sizeof(double) * n);
    for (int i = 0; i < n; i++)
        a[i] = i;
    double s = 0;
    for (int k = 0; k < 4; k++)
        s += step(a, n);
    printf("%g\n", s);
    MPI_Finalize();
    return 0;
}
"""

N = 20000          # calls of pair per step; 4 steps; tick: N/1000 calls per step
LISTED = {"get", "pair"}


@pytest.fixture(scope="module")
@starts_processes
def runs(build_dir, tmp_path_factory):
    """A probe run and two runs with its list, 2 ranks each."""
    d = tmp_path_factory.mktemp("leaves")
    exe = mpicc(PROG, d / "leafprog", ("-finstrument-functions",))
    out = {}
    for name, opts in (("probe", ("-P", "1000")), ("a", ("-l", str(d / "probe"))), ("b", ("-l", str(d / "probe")))):
        r = run_traced(exe, [N], d / name, mpi=2, opts=opts)
        assert r.returncode == 0, r.stderr[-2000:]
        out[name] = d / name
    return out


def test_probe_lists_hot_leaves_and_their_listed_callers(runs):
    lists = sorted(runs["probe"].glob("*.leaves"))
    assert len(lists) == 2                           # one per process
    for f in lists:
        lines = f.read_text().splitlines()
        assert lines[0].startswith("# parlot leaf probe: called at least 1000 times")
        # not tick (80 calls per process), not rare (calls tick), not step or main (call MPI,
        # too few calls); MPI events never
        assert sorted(lines[1:]) == sorted(LISTED), lines


def test_listed_leaf_is_counted_not_recorded(runs):
    probe, listed = check_run(runs["probe"]), check_run(runs["a"])
    assert probe.keys() == listed.keys() == {(0, 0), (1, 0)}
    per_process = 4 * (N + 2 * N)                      # pair's and get's calls per process
    for key, (names, depth) in probe.items():
        assert names.count("get") == 4 * 2 * N and names.count("pair") == 4 * N
        assert names.count("tick") == 4 * N // 1000
        # the listed run's stream is the full one without the listed calls: their entries,
        # what they enclose, their returns
        kept, skip = [], 0
        for nm in names:
            if skip:
                skip += -1 if nm == RETURN_NAME else 1
            elif nm in LISTED:
                skip = 1
            else:
                kept.append(nm)
        assert listed[key][0] == kept, key
        assert not LISTED & set(listed[key][0]) and "tick" in listed[key][0]
    for end in runs["a"].glob("*.end"):
        e = parse_end(end.read_text())
        assert e["leaf_functions"] == 2 and e["leaf_calls"] == per_process, e
    for info in runs["a"].glob("*.info"):
        assert not LISTED & set(info.read_text().splitlines())
    for end in runs["probe"].glob("*.end"):               # no list, no leaf keys
        assert "leaf_calls" not in end.read_text()


def test_reader_notes_the_leaf_list(runs):
    # the probe's .leaves files belong to the run: not listed among ignored files
    assert not [n for n in discover_run(runs["probe"]).notes if "ignored" in n]
    traces = load_run(runs["a"]).traces
    assert traces and all(LEAF_NOTE in t.notes for t in traces)
    assert all(LEAF_NOTE not in t.notes for t in load_run(runs["probe"]).traces)
    ending, note = read_end(next(runs["a"].glob("*.end")))
    assert note is None and ending["leaf_calls"] > 0


def test_two_runs_with_the_same_list_show_no_difference(runs):
    r = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "difftrace_mpi", "analyze",
                        str(runs["a"]), str(runs["b"])], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Verdict: NO DIFFERENCE" in r.stdout, r.stdout[-3000:]
    assert "leaf list" in r.stdout


def test_bad_leaf_lists(build_dir, tmp_path):
    exe = cc("int main(void) { return 0; }\n", tmp_path / "nop")
    r = run_traced(exe, [], tmp_path / "x", opts=("-l", str(tmp_path / "missing")))
    assert r.returncode == 2 and "leaf list" in r.stderr and "not found" in r.stderr
    (tmp_path / "empty").mkdir()
    r = run_traced(exe, [], tmp_path / "x", opts=("-l", str(tmp_path / "empty")))
    assert r.returncode == 2 and "without a *.leaves file" in r.stderr
    r = run_traced(exe, [], tmp_path / "x", opts=("-P", "0"))
    assert r.returncode == 2 and "-P needs a positive number" in r.stderr
    # the library itself, preloaded by hand with a list it cannot read: one message, untraced
    env = dict(os.environ, LD_PRELOAD=str(PIN / "libparlot.so"), PARLOT_DIR=str(tmp_path / "y"),
               PARLOT_LEAVES=str(tmp_path / "missing"))
    r = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0
    assert "parlot: cannot read the leaf list PARLOT_LEAVES=" in r.stderr
    assert "No such file or directory; running untraced" in r.stderr
    assert not list((tmp_path / "y").glob("*.info"))


SMALL_ALTSTACK = r"""
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
/* a 16 KiB alternate signal stack with an inaccessible page below it: a handler that puts
 * more than that on the stack faults instead of ending by the program's SIGTERM */
__attribute__((noinline)) int work(int i) { return i * 7 + 1; }
int main(void)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t size = 16 * 1024;
    char *m = mmap(NULL, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m, page, PROT_NONE) != 0)
        return 3;
    stack_t ss;
    memset(&ss, 0, sizeof ss);
    ss.ss_sp = m + page;
    ss.ss_size = size;
    if (sigaltstack(&ss, NULL) != 0)
        return 4;
    int s = 0;
    for (int i = 0; i < 1000; i++)
        s += work(i);
    printf("%d\n", s);
    fflush(stdout);
    raise(SIGTERM);
    return 0;
}
"""


def test_signal_path_fits_a_small_alternate_stack(build_dir, tmp_path):
    """The handler runs on the program's alternate stack (SA_ONSTACK): before the layout
    change parlot_sync_all put 32 KiB there and faulted on this program."""
    exe = cc(SMALL_ALTSTACK, tmp_path / "altstack")
    r = run_traced(exe, [], tmp_path / "run")
    assert r.returncode == -signal.SIGTERM, (r.returncode, r.stderr[-2000:])
    ends = list((tmp_path / "run").glob("*.end"))
    assert len(ends) == 1
    e = parse_end(ends[0].read_text())
    assert e["how"] == "signal" and e["signal"] == "SIGTERM", e
    (names, depth), = check_run(tmp_path / "run").values()
    assert names.count("work") == 1000 and depth == 1          # main still open: it was signalled


SIGNAL_PATH = ("parlot_signals.c", "parlot_util.c")


def test_signal_path_sources_format_by_hand():
    """No printf family, strerror or allocation in the modules the handler runs through, nor
    in the .info/.end writers; the spin lock's pause is not x86-only."""
    banned = re.compile(r"\b(v?s?n?printf|strerror|malloc|calloc|realloc|free|getenv)\s*\(")
    for name in SIGNAL_PATH:
        text = (PIN / name).read_text()
        code = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        hits = [m.group(0) for m in banned.finditer(code)]
        # the flusher thread (not a handler) and getenv-free code only
        assert not hits, f"{name}: {hits}"
    runfiles = re.sub(r"/\*.*?\*/", "", (PIN / "parlot_runfiles.c").read_text(), flags=re.S)
    for fn in ("void write_info_locked(void)", "int end_write(", "void end_withdraw(void)"):
        body = runfiles[runfiles.index(fn):]
        body = body[: body.index("\n}\n")]
        assert not banned.search(body), fn
        assert not re.search(r"char \w+\[(PATH_MAX|\d{4,})", body), f"{fn}: a large stack buffer"
    core = (PIN / "parlot_core.h").read_text()
    assert "__aarch64__" in core and "__builtin_ia32_pause" in core.split("#elif")[0]
    assert "tstate *held[MAX_THREADS]" not in (PIN / "parlot_signals.c").read_text()


def test_make_without_mpi_h_says_so(tmp_path):
    fake = tmp_path / "mpicc"
    fake.write_text("#!/bin/sh\necho gcc -I/nonexistent/include\n")     # a wrapper whose headers are missing
    fake.chmod(0o755)
    r = subprocess.run(["make", "-C", str(PIN), f"MPICC={fake}", f"BUILD={tmp_path / 'lib'}"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "pin: mpi.h not found for MPICC=" + str(fake) in r.stderr, r.stderr
    assert "No such file" not in r.stderr
    assert not (tmp_path / "lib" / "libparlot.so").exists()
    r = subprocess.run(["make", "-C", str(PIN), "MPICC=", f"BUILD={tmp_path / 'lib'}"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "pin: no MPI compiler wrapper" in r.stderr, r.stderr


BUSY_THREADS = r"""
#include <pthread.h>
#include <stdio.h>
__attribute__((noinline)) int leaf(int x) { return x * 3 + 1; }
__attribute__((noinline)) int mid(int x) { return leaf(x) + leaf(x + 1); }
static void *body(void *arg)
{
    long s = 0;
    for (int i = 0; i < 100000; i++)
        s += mid(i);
    return (void *)s;
}
int main(void)
{
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, body, NULL);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    puts("done");
    return 0;
}
"""


def test_events_exact_while_the_flusher_completes_files(build_dir, tmp_path):
    """The owner/syncer exclusion (plain stores and membarrier, or an atomic exchange): four
    threads record 600,000 events each while the flusher completes their files every
    millisecond; every stream decodes complete, well nested, with every call."""
    exe = cc(BUSY_THREADS, tmp_path / "busy", "-pthread")
    for run, membarrier in enumerate(("1", "0", "1")):
        out = tmp_path / f"run{run}"
        # every call recorded (-e): automatic leaves would count leaf and mid after 10000 calls
        r = run_traced(exe, [], out, env={"PARLOT_FLUSH_MS": "1", "PARLOT_MEMBARRIER": membarrier},
                       opts=("-e",))
        assert r.returncode == 0, r.stderr[-2000:]
        runs = check_run(out)
        workers = {k: v for k, v in runs.items() if k[1] > 0}
        assert len(workers) == 4
        for key, (names, depth) in workers.items():
            assert depth == 0, key
            assert names.count("mid") == 100000 and names.count("leaf") == 200000, key


@starts_processes
def test_faults_still_found_with_a_leaf_list(build_dir, tmp_path):
    """minilulesh, 8 ranks, traced with the list of a probe run: two normal runs are equal,
    a wrong MPI_Reduce root and a skipped call are found at their rank and time step."""
    exe = build_dir / "minilulesh"
    args = ["--size", "4", "--iters", "10"]

    def trace(name, *extra, opts=("-l", str(tmp_path / "probe"))):
        r = run_traced(exe, [*args, *extra], tmp_path / name, mpi=8, opts=opts, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]

    trace("probe", opts=("-P", "50"))
    listed = {ln for f in (tmp_path / "probe").glob("*.leaves") for ln in f.read_text().splitlines()[1:]}
    assert listed and not any(n.startswith(("MPI_", "GOMP_")) for n in listed), listed
    trace("normal")
    trace("normal2")
    trace("wrongroot", "--bug", "wrongroot", "--bug-rank", "3", "--bug-iter", "4")
    trace("skipcall", "--bug", "skipcall", "--bug-rank", "5", "--bug-iter", "6")

    def verdict(faulty):
        r = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "difftrace_mpi", "analyze",
                            str(tmp_path / "normal"), str(tmp_path / faulty)],
                           capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout

    assert "Verdict: NO DIFFERENCE" in verdict("normal2")
    out = verdict("wrongroot")
    assert "culprit:   rank 3 thread 0" in out and "root=1] where the normal run called" in out, out[-3000:]
    assert "iteration 5 of 10" in out
    out = verdict("skipcall")
    assert "rank 5 thread 0 skipped CalcQForElems in iteration 7 of 10" in out, out[-3000:]
