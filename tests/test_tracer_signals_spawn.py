"""The tracer against hostile inputs (issue 36, items 5 and 10), on real programs under
pin/parlot-run (pin/README.md).

Item 5: a signal sent from outside (kill) while the thread it lands in is inside tracer work
is delivered when that work ends: the process dies of it and its .end record says so, as
when it lands outside tracer work -- SIGSEGV, SIGBUS, SIGFPE and SIGILL included, which
the tracer used to take for a fault of its own and drop.

Item 10: MPI_Comm_spawn.  The spawned processes are not traced (under parlot-run they are
not preloaded; preloaded by hand, they stop tracing and remove their files at MPI_Init, as
their ranks repeat their parents'); the parents' .end records say spawned=N and the
analysis notes that the spawned processes were not traced, instead of refusing the run.
"""
import os
import resource
import signal
import subprocess
import time

import pytest

from difftrace_mpi.engine.pipeline import analyze
from difftrace_mpi.readers import load_run
from difftrace_mpi.readers.parlot_end import SPAWN_NOTE, read_end
from test_tracer import PIN, cc, check_run, run_traced
from test_tracer_end import ends, lib, mpicc  # noqa: F401  (lib: the module's build fixture)
import scenarios

pytestmark = pytest.mark.integration


# --------------------------------------------------------------------------- item 5

# Most of its time inside the tracer: a loop of a tiny instrumented function, in the main
# thread and, with argument 2, in a second thread too (running before "ready": a signal
# that lands in a thread not yet started has no thread index); it ends by itself after 6 s,
# so a signal that was lost shows as a normal end.
PROGRAM_SPIN = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static volatile long sink;
static volatile int started;
static void leaf(long i) { sink += i; }
static void *worker(void *arg) { (void)arg; leaf(0); started = 1; for (;;) leaf(1); return NULL; }
int main(int argc, char **argv)
{
    pthread_t th;
    int threads = atoi(argv[1]);
    if (threads > 1)
        pthread_create(&th, NULL, worker, NULL);
    for (long i = 0; i < 1000 || (threads > 1 && !started); i++)
        leaf(i);
    printf("ready\n");
    fflush(stdout);
    time_t end = time(NULL) + 6;
    while (time(NULL) < end)
        for (int k = 0; k < 1000; k++)
            leaf(k);
    printf("finished\n");
    return 0;
}
"""


@pytest.fixture(scope="module")
def spin(lib, tmp_path_factory):
    return cc(PROGRAM_SPIN, tmp_path_factory.mktemp("spin") / "spin", "-pthread")


def no_core():
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def kill_while_tracing(exe, out, sig, threads, delay):
    """Start ``exe threads`` traced, send ``sig`` to it ``delay`` s after it is ready;
    (returncode, stdout)."""
    cmd = [str(PIN / "parlot-run"), "-q", "-d", str(out), str(exe), str(threads)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=no_core)
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(delay)
        p.send_signal(sig)                 # parlot-run execs the program: p.pid is its pid
        stdout, _ = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    return p.returncode, stdout


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGTERM],
                         ids=lambda s: s.name)
def test_signal_sent_inside_tracer_work_is_delivered(spin, tmp_path, sig):
    """kill -SIG of a process that spends most of its time inside tracer events: it dies of
    SIG (not a normal end after 6 s), its .end record says so and every file is complete.
    Several tries, one and two threads: where the signal lands is chance."""
    for attempt in range(6):
        out = tmp_path / f"run{attempt}"
        threads = 1 + attempt % 2
        rc, stdout = kill_while_tracing(spin, out, sig, threads, delay=0.01 * attempt)
        assert rc == -sig, f"try {attempt} ({threads} threads): exit {rc}, {stdout!r}: the signal was lost"
        e = ends(out)[0]
        assert e["how"] == "signal" and e["signal"] == sig.name, e
        assert e["thread"] in range(threads), e
        runs = check_run(out)
        assert sorted(t for _, t in runs) == list(range(threads))


def test_sigusr1_sent_inside_tracer_work_ends_the_process(spin, tmp_path):
    """A signal the tracer does not catch (SIGUSR1, default action: end the process) is
    the kernel's alone: it ends the process wherever it lands."""
    for attempt in range(2):
        rc, stdout = kill_while_tracing(spin, tmp_path / f"run{attempt}", signal.SIGUSR1, 1 + attempt, 0.01)
        assert rc == -signal.SIGUSR1, (rc, stdout)


# --------------------------------------------------------------------------- item 10

# Two parents spawn two children of the same program; one message goes to them and back.
PROGRAM_SPAWN = r"""
#include <mpi.h>
#include <stdio.h>
static int work(int x) { return x + 1; }
int main(int argc, char **argv)
{
    MPI_Comm parent, inter;
    int rank, v = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (parent == MPI_COMM_NULL) {
        MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, 2, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter,
                       MPI_ERRCODES_IGNORE);
        MPI_Bcast(&v, 1, MPI_INT, rank == 0 ? MPI_ROOT : MPI_PROC_NULL, inter);
        MPI_Reduce(NULL, &v, 1, MPI_INT, MPI_SUM, rank == 0 ? MPI_ROOT : MPI_PROC_NULL, inter);
        MPI_Comm_disconnect(&inter);
        if (rank == 0)
            printf("parents got %d\n", v);
    } else {
        MPI_Bcast(&v, 1, MPI_INT, 0, parent);
        v = work(v);
        MPI_Reduce(&v, NULL, 1, MPI_INT, MPI_SUM, 0, parent);
        MPI_Comm_disconnect(&parent);
    }
    MPI_Finalize();
    return 0;
}
"""


@pytest.fixture(scope="module")
def spawner(lib, tmp_path_factory):
    return mpicc(PROGRAM_SPAWN, tmp_path_factory.mktemp("spawn") / "spawner")


def check_parents_only(out):
    """The run holds the two parents (ranks 0, 1; each .end says spawned=2) and nothing of
    the children; the analysis reads it and notes that the children were not traced."""
    e = {}
    for rank_file in out.glob("*.rank"):        # (preloaded by hand, mpiexec has files too)
        ending, note = read_end(rank_file.with_suffix(".end"))
        assert note is None, note
        e[int(rank_file.read_text())] = ending
    assert sorted(e) == [0, 1], e
    for rank in (0, 1):
        assert e[rank]["how"] == "finalized" and e[rank]["code"] == 0 and e[rank]["spawned"] == 2, e
    run = load_run(out)
    assert sorted({t.rank for t in run.traces}) == [0, 1]
    assert all(SPAWN_NOTE in t.notes for t in run.traces), [t.notes for t in run.traces]
    notes = analyze(out, out, lattices=False).notes
    assert any("spawn" in n and "not traced" in n for n in notes), notes


def test_spawned_processes_under_parlot_run(spawner, tmp_path):
    """Under parlot-run the spawned processes are not preloaded: the parents say so."""
    out = tmp_path / "run"
    r = run_traced(spawner, [], out, mpi=2)
    assert r.returncode == 0 and "parents got 2" in r.stdout, (r.returncode, r.stdout, r.stderr)
    check_parents_only(out)


def test_spawned_processes_preloaded_by_hand(spawner, lib, tmp_path):
    """LD_PRELOAD by hand reaches the spawned processes (mpiexec's environment): they stop
    tracing at MPI_Init and leave no files, so the run is not refused for ranks 0 and 1
    twice."""
    out = tmp_path / "run"
    env = dict(os.environ, LD_PRELOAD=str(lib), PARLOT_DIR=str(out), PARLOT_QUIET="1")
    env.pop("PARLOT_PID", None)
    r = subprocess.run([scenarios.venv_mpiexec(), "-n", "2", str(spawner)], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 0 and "parents got 2" in r.stdout, (r.returncode, r.stdout, r.stderr)
    assert len(list(out.glob("*.rank"))) == 2, sorted(p.name for p in out.iterdir())
    check_parents_only(out)
