"""The uftrace reader, on real recordings made here with Debian's uftrace.

Each test compiles a tiny C program (``gcc -pg`` and ``-finstrument-functions``), records
it with ``uftrace record --no-sched`` and reads the data directory with our reader (no
uftrace at read time).  The decoded call sequences are checked against what the program
does and against ``uftrace replay``'s own output.  An MPI program recorded per rank under
mpiexec goes through ``analyze`` end to end.  Corrupt, truncated and fuzzed data must give
a TraceFormatError naming the file (and the byte, for record data) or a result.
"""
import os
import random
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import call, labels, run_cli, starts_processes
from difftrace_mpi import readers
from difftrace_mpi.readers import uftrace as U, uftrace_meta
from difftrace_mpi.errors import DiffTraceError, TraceFormatError

UFTRACE = shutil.which("uftrace")
CC = shutil.which("gcc") or shutil.which("cc")
BIN = Path(sys.executable).parent
MPICC = shutil.which("mpicc", path=str(BIN))
MPIEXEC = shutil.which("mpiexec", path=str(BIN))

NO_UFTRACE = "uftrace not installed (apt-get install uftrace): no real recordings to read"
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler")

THREADS_C = r"""
#include <pthread.h>
static volatile int sink;
__attribute__((noinline)) void leaf(int i) { sink += i; }
__attribute__((noinline)) void inner(int n) { for (int i = 0; i < n; i++) leaf(i); }
__attribute__((noinline)) void outer(int n) { for (int i = 0; i < n; i++) { inner(2); leaf(-1); } }
__attribute__((noinline)) void *worker(void *arg) { outer((int)(long)arg); return 0; }
int main(void) {
    pthread_t t;
    inner(3);
    for (long k = 2; k <= 3; k++) { pthread_create(&t, 0, worker, (void *)k); pthread_join(t, 0); }
    leaf(7);
    return 0;
}
"""

FORK_C = r"""
#include <unistd.h>
#include <sys/wait.h>
__attribute__((noinline)) void child_work(int n) { for (volatile int i = 0; i < n; i++); }
__attribute__((noinline)) void parent_work(void) { }
int main(void) {
    pid_t p = fork();
    if (p == 0) { child_work(3); child_work(4); return 0; }
    parent_work();
    waitpid(p, 0, 0);
    return 0;
}
"""

MPI_C = r"""
#include <mpi.h>
#include <stdlib.h>
static int bug = 0;
__attribute__((noinline)) void exchange(int rank, int size, int it) {
    int peer = rank ^ 1, x = it, y;
    if (peer >= size) return;
    if (rank % 2 == 0 || (bug && it >= 2)) {
        MPI_Send(&x, 1, MPI_INT, peer, 0, MPI_COMM_WORLD);
        MPI_Recv(&y, 1, MPI_INT, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(&y, 1, MPI_INT, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(&x, 1, MPI_INT, peer, 0, MPI_COMM_WORLD);
    }
}
int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    bug = argc > 1 && rank == atoi(argv[1]);
    for (int i = 0; i < 6; i++) exchange(rank, size, i);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
"""


# --------------------------------------------------------------------------- helpers

def _run(cmd, cwd, timeout=120):
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{cmd} failed:\n{res.stdout}\n{res.stderr}"
    return res


def _compile(src, out, flags, cc=None):
    c = out.with_suffix(".c")
    c.write_text(src)
    _run([cc or CC, *flags, "-O0", "-o", str(out), str(c)], out.parent)
    return out


def _record(prog, data_dir, *args, opts=()):
    _run([UFTRACE, "record", "--no-sched", *opts, "-d", str(data_dir), str(prog), *args], data_dir.parent)
    return data_dir


def replay_events(data_dir):
    """Per-tid event lists from ``uftrace replay`` (the independent reference)."""
    res = _run([UFTRACE, "replay", "--no-pager", "-d", str(data_dir)], data_dir.parent)
    per_tid = {}
    line_re = re.compile(r"\[\s*(\d+)\]\s*\|\s?(.*)$")
    for line in res.stdout.splitlines():
        m = line_re.search(line)
        if not m:
            continue
        tid, body = int(m[1]), m[2].strip()
        ev = per_tid.setdefault(tid, [])
        if body.startswith("}"):
            ev.append("<")
        elif body.endswith("() {"):
            ev.append(body[:-4])
        elif body.endswith("();"):
            ev.extend([body[:-3], "<"])
        # other lines (events, lost markers) are not calls
    return per_tid


def dat_files(data_dir):
    return sorted(Path(data_dir).glob("[0-9]*.dat"), key=lambda p: int(p.stem))


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """Where recordings are made; every test that needs uftrace depends on it."""
    if UFTRACE is None:
        pytest.skip(NO_UFTRACE)
    return tmp_path_factory.mktemp("uftrace")


@pytest.fixture(scope="module", params=["-pg", "-finstrument-functions"])
@starts_processes
def threads_rec(request, work):
    if CC is None:
        pytest.skip("no C compiler")
    flag = request.param
    tag = "pg" if flag == "-pg" else "fi"
    prog = _compile(THREADS_C, work / f"threads_{tag}", [flag, "-pthread"])
    return flag, _record(prog, work / f"threads_{tag}.data")


@pytest.fixture(scope="module")
@starts_processes
def both_rec(work):
    """A program built with -pg and -finstrument-functions (issue 15): both hooks record
    every function, so uftrace shows each call twice; kept pristine (tests copy it)."""
    if CC is None:
        pytest.skip("no C compiler")
    prog = _compile(THREADS_C, work / "threads_both", ["-pg", "-finstrument-functions", "-pthread"])
    return _record(prog, work / "threads_both.data")


@pytest.fixture(scope="module")
@starts_processes
def pg_rec(work):
    """A -pg recording kept pristine (tests copy it before changing anything)."""
    if CC is None:
        pytest.skip("no C compiler")
    prog = _compile(THREADS_C, work / "threads_ref", ["-pg", "-pthread"])
    return _record(prog, work / "threads_ref.data")


@pytest.fixture
def pg_copy(pg_rec, tmp_path):
    dst = tmp_path / "copy.data"
    shutil.copytree(pg_rec, dst)
    uftrace_meta._cached_dir.cache_clear()
    yield dst
    uftrace_meta._cached_dir.cache_clear()


# --------------------------------------------------------------------------- real recordings

WORKER = {k: call("worker", call("outer", *[call("inner", call("leaf"), call("leaf")) + call("leaf")
                                             for _ in range(k)]))
          for k in (2, 3)}
MAIN = call("main", call("inner", call("leaf"), call("leaf"), call("leaf")),
            call("pthread_create"), call("pthread_join"), call("pthread_create"), call("pthread_join"),
            call("leaf"))


def test_threads_decode_as_the_program_runs(threads_rec):
    flag, data = threads_rec
    run = readers.load_run(data)
    assert run.rank_source == "pid-order" and run.notes == []
    assert [(t.rank, t.thread) for t in run.traces] == [(0, 0), (0, 1), (0, 2)]
    main, w2, w3 = run.traces
    ev = labels(main)
    start = ev.index("main")
    assert ev[start:] == MAIN
    if flag == "-pg":                       # the gmon start-up calls run before main
        assert ev[:start] == call("__monstartup") + call("__cxa_atexit")
    else:
        assert start == 0
    assert labels(w2) == WORKER[2] and labels(w3) == WORKER[3]     # created in that order
    for t in run.traces:
        assert t.complete and not t.notes
        assert t.timestamps.dtype == np.uint64 and t.timestamps.size == t.events.size
        assert np.all(np.diff(t.timestamps.astype(np.int64)) >= 0)
        assert t.names[0] == "<return>"


def test_threads_match_uftrace_replay(threads_rec):
    _, data = threads_rec
    ref = replay_events(data)
    files = dat_files(data)
    pid = int(files[0].stem)                 # the main thread has the lowest tid here
    order = sorted((int(f.stem) for f in files), key=lambda t: (t != pid, t))
    run = readers.load_run(data)
    assert sorted(ref) == sorted(order)
    for tid, t in zip(order, run.traces):
        assert t.source.endswith(f"{tid}.dat")
        assert labels(t) == ref[tid], tid


def test_timestamps_are_the_record_times(pg_rec):
    main = dat_files(pg_rec)[0]
    raw = np.frombuffer(main.read_bytes(), dtype="<u8").reshape(-1, 2)
    assert readers.file_format(main) is U.FORMAT
    t = readers.load_file(main)
    assert np.array_equal(t.timestamps, raw[:, 0])


def test_readers_dispatch_single_and_per_rank_layouts(pg_rec, tmp_path):
    idx = readers.discover_run(pg_rec)                      # a data directory = one process
    assert idx.fmt == "uftrace" and idx.rank_source == "pid-order"
    assert [(r.rank, r.thread) for r in idx.refs] == [(0, 0), (0, 1), (0, 2)]
    assert sorted(r.path for r in idx.refs) == sorted(map(str, dat_files(pg_rec)))
    for ref in idx.refs:
        got = readers.load_trace(ref)
        assert (got.rank, got.thread) == (ref.rank, ref.thread)
        assert labels(got) == labels(U.read_uftrace_thread(ref.path))      # the file read on its own
    run = tmp_path / "run"                                  # a directory of <name>.<rank> dirs
    run.mkdir()
    for r in (0, 1, 10):
        shutil.copytree(pg_rec, run / f"uftrace.data.{r}")
    (run / "notes").mkdir()
    idx = readers.discover_run(run)
    assert idx.rank_source == "dirname"
    assert sorted({r.rank for r in idx.refs}) == [0, 1, 10]
    assert any("ignored 1 subdirectory" in n and "notes" in n for n in idx.notes)


def test_rank_by_pid_order_when_names_lack_numbers(pg_rec, tmp_path, work):
    prog = _compile(THREADS_C, work / "threads_pidorder", ["-pg", "-pthread"])
    run = tmp_path / "run"
    run.mkdir()
    shutil.copytree(pg_rec, run / "first")
    _record(prog, run / "second")                             # recorded later: higher pid
    idx = readers.discover_run(run)
    assert idx.rank_source == "pid-order"
    assert any("ranks assigned by ascending pid" in n for n in idx.notes)
    by_rank = {r.rank: r.info for r in idx.refs}
    first_pid = int(dat_files(run / "first")[0].stem)
    second_pid = int(dat_files(run / "second")[0].stem)
    expect = ["first", "second"] if first_pid < second_pid else ["second", "first"]
    assert [Path(by_rank[0]).name, Path(by_rank[1]).name] == expect


@needs_cc
@pytest.mark.integration
def test_forked_process(work, tmp_path):
    prog = _compile(FORK_C, work / "fork", ["-pg"])
    data = _record(prog, work / "fork.data")
    run = readers.load_run(data)                            # one data dir, two processes
    assert [(t.rank, t.thread) for t in run.traces] == [(0, 0), (1, 0)]
    assert any("2 processes" in n for n in run.notes)
    parent, child = run.traces
    assert labels(parent)[labels(parent).index("main"):] == call(
        "main", call("fork"), call("parent_work"), call("waitpid"))
    # the child starts inside fork() and main(): those exits have no recorded entry
    assert labels(child) == call("child_work") + call("child_work")
    assert any("2 exit(s) without a recorded entry" in n for n in child.notes)
    nested = tmp_path / "run"
    nested.mkdir()
    shutil.copytree(data, nested / "ut.0")
    idx = readers.discover_run(nested)                         # per-rank layout: one rank
    assert [(r.rank, r.thread) for r in idx.refs] == [(0, 0), (0, 1)]
    assert any("several processes" in n for n in idx.notes)


@needs_cc
@pytest.mark.integration
def test_arguments_recorded_are_refused_clearly(work):
    prog = _compile(THREADS_C, work / "threads_args", ["-pg", "-pthread"])
    data = _record(prog, work / "threads_args.data", opts=("-A", "inner@arg1", "-R", "inner@retval"))
    with pytest.raises(TraceFormatError) as e:
        readers.load_run(data)
    msg = str(e.value)
    assert ".dat (byte " in msg and "-A/-R" in msg


# --------------------------------------------------------------------------- MPI end to end

@pytest.fixture(scope="module")
@starts_processes
def mpi_runs(work):
    if MPICC is None or MPIEXEC is None:
        pytest.skip("mpicc/mpiexec not found beside the Python interpreter (pip mpich)")
    prog = _compile(MPI_C, work / "mpiprog", ["-pg"], cc=MPICC)
    runs = {}
    for name, args in (("normal", ""), ("faulty", " 3")):
        d = work / f"mpi_{name}"
        d.mkdir()
        cmd = f'exec "{UFTRACE}" record --no-sched -d "{d}/ut.$PMI_RANK" "{prog}"{args}'
        _run([MPIEXEC, "-n", "4", "sh", "-c", cmd], work, timeout=180)
        runs[name] = d
    return runs


def test_mpi_ranks_from_directory_names(mpi_runs):
    idx = readers.discover_run(mpi_runs["normal"])
    assert idx.fmt == "uftrace" and idx.rank_source == "dirname"
    assert [(r.rank, r.thread) for r in idx.refs] == [(r, 0) for r in range(4)]
    for ref in idx.refs:
        ev = labels(readers.load_trace(ref))
        mpi = [e for e in ev if e.startswith("MPI_")]
        first = ["MPI_Send", "MPI_Recv"] if ref.rank % 2 == 0 else ["MPI_Recv", "MPI_Send"]
        assert mpi == ["MPI_Init", "MPI_Comm_rank", "MPI_Comm_size"] + first * 6 + ["MPI_Barrier", "MPI_Finalize"]
        assert ev[ev.index("main"):][-1] == "<"


def test_mpi_analyze_names_the_changed_rank(mpi_runs, tmp_path):
    res = run_cli("analyze", mpi_runs["normal"], mpi_runs["faulty"], "--out", tmp_path / "r.h5")
    assert res.returncode == 0, res.stderr
    assert "(uftrace, 4 traces)" in res.stdout and "ranks from: dirname" in res.stdout
    assert "Top suspect processes: 3;" in res.stdout
    assert "- L" in res.stdout and "+ L" in res.stdout          # the diffNLR shows the loop change
    res = run_cli("diffnlr", mpi_runs["normal"], mpi_runs["faulty"], "--rank", "3")
    assert res.returncode == 0, res.stderr
    assert "MPI_Send MPI_Recv" in res.stdout and "MPI_Recv MPI_Send" in res.stdout


# --------------------------------------------------------------------------- damaged data

def _rec(time, rtype, depth=0, addr=0, more=0, magic=5):
    return struct.pack("<QQ", time, rtype | more << 2 | magic << 3 | depth << 6 | addr << 16)


def test_truncated_file_keeps_complete_records(pg_copy):
    main = dat_files(pg_copy)[0]
    full = main.read_bytes()
    whole = labels(U.read_uftrace_thread(main))
    for cut in range(0, len(full)):
        main.write_bytes(full[:cut])
        t = U.read_uftrace_thread(main)
        if cut % 16 == 0:
            assert t.complete and not any("ends inside" in n for n in t.notes)
            continue
        assert not t.complete
        assert any(f"{main.name}: file ends inside a record at byte {cut // 16 * 16} of {cut}" in n
                   for n in t.notes)
        assert labels(t) == whole[:len(labels(t))]            # a prefix of the whole trace
        assert t.events.size == (cut // 16)                   # well nested here: one event per record


def test_truncated_run_through_readers(pg_copy):
    main = dat_files(pg_copy)[0]
    main.write_bytes(main.read_bytes()[:100])
    ref = readers.discover_run(pg_copy).refs[0]
    t = readers.load_trace(ref)
    assert not t.complete and "byte 96 of 100" in t.notes[0]


def test_garbage_record_names_file_and_offset(pg_copy):
    main = dat_files(pg_copy)[0]
    data = bytearray(main.read_bytes())
    data[5 * 16 + 8] = 0xFF                                  # record 5: magic 7
    main.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError) as e:
        U.read_uftrace_thread(main)
    assert str(e.value).startswith(f"{main} (byte 80): not a uftrace record")
    main.write_bytes(b"\xff" * 40)
    with pytest.raises(TraceFormatError, match=r"\(byte 0\)"):
        U.read_uftrace_thread(main)


def test_bad_info_file(pg_copy):
    info = pg_copy / "info"
    info.write_bytes(b"Ftrace!\x00" + b"\x04\x00")             # header cut short
    with pytest.raises(TraceFormatError, match="info.*not a uftrace info file"):
        U.read_uftrace_thread(dat_files(pg_copy)[0])
    info.write_bytes(b"not uftrace at all")
    assert not U.is_uftrace_dir(pg_copy)                      # then it is not uftrace data at all
    with pytest.raises(DiffTraceError, match="no traces found"):
        readers.discover_run(pg_copy)


def test_lost_and_event_records(pg_copy):
    main = dat_files(pg_copy)[0]
    raw = main.read_bytes()
    recs = [raw[i:i + 16] for i in range(0, len(raw), 16)]
    whole = labels(U.read_uftrace_thread(main))
    # an EVENT with a 5-byte payload (2 + 5 bytes, padded to 8) and one without: skipped
    ev = _rec(1, U.EVENT, addr=100_000, more=1) + struct.pack("<H", 5) + b"abcde" + b"\x00"
    main.write_bytes(b"".join(recs[:3]) + ev + _rec(2, U.EVENT, addr=7) + b"".join(recs[3:]))
    assert labels(U.read_uftrace_thread(main)) == whole
    # an EVENT whose payload runs past the end: a truncated file
    main.write_bytes(b"".join(recs[:3]) + _rec(1, U.EVENT, addr=9, more=1) + struct.pack("<H", 200))
    t = U.read_uftrace_thread(main)
    assert not t.complete and any("byte 48" in n for n in t.notes)
    # LOST: records 6..9 (inside main) were lost; the depths resynchronise the nesting
    main.write_bytes(b"".join(recs[:6]) + _rec(0, U.LOST, addr=4) + b"".join(recs[10:]))
    t = U.read_uftrace_thread(main)
    assert any("lost 4 records" in n for n in t.notes)
    depth = np.cumsum(np.where(t.events > 0, 1, -1))
    assert depth.min() >= 0 and depth[-1] == 0
    # ENTRY with a payload: arguments, refused
    main.write_bytes(b"".join(recs[:2]) + _rec(5, U.ENTRY, addr=1, more=1) + b"\x00" * 8)
    with pytest.raises(TraceFormatError, match=r"\(byte 32\).*arguments"):
        U.read_uftrace_thread(main)


def _hide(path):
    """Move a file away for the duration of a test (the recorded binary: tests share it)."""
    away = path.with_name(path.name + ".away")
    path.rename(away)
    return away


def test_missing_symbols_and_binary_give_module_offsets(pg_copy, work):
    exe_sym = next(p for p in pg_copy.glob("threads_ref*.sym"))
    exe_sym.unlink()
    away = _hide(work / "threads_ref")
    try:
        t = U.read_uftrace_thread(dat_files(pg_copy)[0])
    finally:
        away.rename(work / "threads_ref")
    assert all(n == "<return>" or n.startswith("threads_ref+0x") for n in t.names)
    assert len(set(t.names)) == len(t.names)
    assert t.notes == [f"no threads_ref.sym in the data directory, and {work / 'threads_ref'} cannot be read "
                       f"(No such file or directory): its functions are named threads_ref+0x<offset>"]


def test_missing_symbol_files_are_read_from_the_binaries(pg_copy):
    """uftrace writes the .sym files when the recording ends (a crash leaves none): then
    it reads the recorded binaries themselves, and so do we: the names stay uftrace's."""
    whole = [labels(t) for t in readers.load_run(pg_copy).traces]
    for sym in pg_copy.glob("*.sym"):
        sym.unlink()
    uftrace_meta._cached_dir.cache_clear()
    run = readers.load_run(pg_copy)
    assert [labels(t) for t in run.traces] == whole
    main = run.traces[0]
    assert "MPI" not in " ".join(main.names) and {"main", "inner", "leaf", "pthread_create"} <= set(main.names)
    assert any(n.startswith("no threads_ref.sym in the data directory") and "read from that file" in n
               for n in main.notes)


def test_a_rebuilt_binary_is_not_used_for_names(pg_copy, work, tmp_path):
    """Another build of the program at the recorded path (its build-id differs) would give
    wrong names: module offsets instead, and a note that says why."""
    next(p for p in pg_copy.glob("threads_ref*.sym")).unlink()
    away = _hide(work / "threads_ref")
    try:
        _compile(THREADS_C.replace("sink += i", "sink -= 2 * i"), work / "threads_ref", ["-pg", "-pthread"])
        t = U.read_uftrace_thread(dat_files(pg_copy)[0])
    finally:
        (work / "threads_ref").unlink()
        away.rename(work / "threads_ref")
    assert all(n == "<return>" or n.startswith("threads_ref+0x") for n in t.names)
    assert any("is another build than the one recorded (its build-id differs)" in n for n in t.notes)


# --------------------------------------------------------------------------- -pg and -finstrument-functions

def test_both_instrumentations_name_functions_as_replay(both_rec, tmp_path):
    """Issue 15: a binary built with -pg and -finstrument-functions; names as `uftrace
    replay` shows them, with the .sym files and without them (read from the binary: the
    names were printed as threads_both+0x... before)."""
    ref = replay_events(both_rec)
    files = dat_files(both_rec)
    pid = int(files[0].stem)
    order = sorted((int(f.stem) for f in files), key=lambda t: (t != pid, t))
    for strip in (False, True):
        data = tmp_path / f"copy{int(strip)}"
        shutil.copytree(both_rec, data)
        if strip:
            for sym in data.glob("*.sym"):
                sym.unlink()
        uftrace_meta._cached_dir.cache_clear()
        run = readers.load_run(data)
        assert [labels(t) for t in run.traces] == [ref[tid] for tid in order]
        main = labels(run.traces[0])
        assert main[main.index("main"):][:4] == ["main", "main", "inner", "inner"]    # each hook's entry
        assert not any("+0x" in n for t in run.traces for n in t.names)


def test_exit_status_gives_the_ending(both_rec, pg_rec):
    for data in (both_rec, pg_rec):
        uftrace_meta._cached_dir.cache_clear()
        assert [t.ending for t in readers.load_run(data).traces] == [{"how": "exit", "code": 0}] * 3


@pytest.mark.parametrize("status, ending", [
    ("0", {"how": "exit", "code": 0}), ("768", {"how": "exit", "code": 3}),
    ("11", {"how": "signal", "signal": "SIGSEGV"}), ("134", {"how": "signal", "signal": "SIGABRT"}),
    ("65536", None), ("", None), ("x", None), ("-1", None), ("4991", None)])
def test_exit_status_values(status, ending):
    assert uftrace_meta._ending(status) == ending


EXIT_C = r"""
#include <signal.h>
#include <stdlib.h>
__attribute__((noinline)) void leaf(void) { }
__attribute__((noinline)) void finish(int how) {
    leaf();
    if (how == 1) exit(0);              /* ends inside main > finish > exit: a finished run */
    if (how == 2) exit(3);
    if (how == 3) raise(SIGABRT);
}
int main(int argc, char **argv) { finish(argc > 1 ? atoi(argv[1]) : 0); leaf(); return 0; }
"""


@needs_cc
@pytest.mark.integration
@pytest.mark.parametrize("flags", [["-pg"], ["-pg", "-finstrument-functions"]], ids=["pg", "pg+fi"])
def test_a_run_that_exits_inside_calls_has_not_stopped_early(work, tmp_path, flags):
    """Issue 15: uftrace says how the process ended (its info file's exit status): a run
    that called exit(0) inside a call ended normally, and is not reported as stopped early
    (it was, with a HANG verdict, when its ending was unknown)."""
    prog = _compile(EXIT_C, work / f"exits{len(flags)}", flags)
    runs = {}
    for how in ("0", "1", "2", "3"):
        d = tmp_path / f"run{how}"
        d.mkdir()
        subprocess.run([UFTRACE, "record", "--no-sched", "-d", str(d / "ut.0"), str(prog), how],
                       cwd=tmp_path, capture_output=True, timeout=120)
        runs[how] = d
    endings = {how: readers.load_run(d).traces[0].ending for how, d in runs.items()}
    assert endings == {"0": {"how": "exit", "code": 0}, "1": {"how": "exit", "code": 0},
                       "2": {"how": "exit", "code": 3}, "3": {"how": "signal", "signal": "SIGABRT"}}
    ended_in = labels(readers.load_run(runs["1"]).traces[0])
    assert ended_in[-1] == "exit" and ended_in.count("<") < len(ended_in) / 2      # calls still open
    res = run_cli("analyze", runs["0"], runs["1"])
    assert res.returncode == 0, res.stderr
    assert "stopped early" not in res.stdout and "Verdict: HANG" not in res.stdout
    assert "Verdict: CHANGED BEHAVIOUR" in res.stdout
    res = run_cli("analyze", runs["0"], runs["3"])
    assert res.returncode == 0, res.stderr
    assert "Verdict: CRASH" in res.stdout and "SIGABRT" in res.stdout


# --------------------------------------------------------------------------- fuzzing

def _check_parse(data):
    try:
        s = U.parse_records(data, "fuzz.dat")
    except TraceFormatError as e:
        assert "fuzz.dat (byte " in str(e)
        return
    assert s.offset <= len(data)
    idx, ret, times, _ = U.nest(s)
    assert idx.size == ret.size == times.size


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_fuzz_parse_arbitrary_bytes(data):
    _check_parse(data)


_records = st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 3), st.integers(0, 1),
                              st.sampled_from([5, 5, 5, 5, 2]), st.integers(0, 1023),
                              st.integers(0, 2**48 - 1), st.binary(max_size=24)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(_records, st.integers(0, 15))
def test_fuzz_parse_structured_records(recs, tail):
    out = b""
    for time, rtype, more, magic, depth, addr, payload in recs:
        out += _rec(time, rtype, depth, addr, more, magic)
        if more:
            out += struct.pack("<H", len(payload)) + payload
            out += b"\x00" * ((-(len(payload) + 2)) % 8)
    _check_parse(out + b"\x01" * tail)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 40), st.integers(0, 30)), max_size=60))
def test_fuzz_real_addresses_and_depths(pg_copy, spec):
    """Records with real addresses from the recording, random kinds and depths."""
    main = dat_files(pg_copy)[0]
    raw = np.frombuffer(main.read_bytes(), dtype="<u8").reshape(-1, 2)
    addrs = sorted({int(w) >> 16 for w in raw[:, 1]})
    data = b"".join(_rec(1000 + i, kind, depth % 8, addrs[a % len(addrs)])
                    for i, (kind, a, depth) in enumerate(spec))
    fz = pg_copy / "424242.dat"
    fz.write_bytes(data)
    t = U.read_uftrace_thread(fz, pg_copy)
    depth = np.cumsum(np.where(t.events > 0, 1, -1)) if t.events.size else np.zeros(1)
    assert depth.min() >= 0                                   # always well nested
    assert t.timestamps.size == t.events.size


def test_byte_flips_of_real_recordings(pg_copy):
    rng = random.Random(1234)
    files = [p for p in pg_copy.iterdir() if p.is_file() and (
        p.suffix in (".dat", ".map") or p.name in ("info", "task.txt") or p.name.startswith("threads_ref"))]
    files = [p for p in files if not p.name.startswith("perf-")]
    originals = {p: p.read_bytes() for p in files}
    outcomes = {"ok": 0, "error": 0}
    for _ in range(400):
        p = rng.choice(files)
        data = bytearray(originals[p])
        if not data:
            continue
        for _ in range(rng.choice([1, 1, 2, 8])):
            data[rng.randrange(len(data))] = rng.randrange(256)
        p.write_bytes(bytes(data))
        uftrace_meta._cached_dir.cache_clear()
        try:
            run = readers.load_run(pg_copy)
            for t in run.traces:
                assert t.events.dtype == np.int32 and t.timestamps.size == t.events.size
                assert t.events.size == 0 or int(t.events.max()) < len(t.names)
            outcomes["ok"] += 1
        except DiffTraceError as e:
            assert str(pg_copy) in str(e)
            outcomes["error"] += 1
        p.write_bytes(originals[p])
    assert outcomes["ok"] and outcomes["error"]


def _point_map_at(data_dir, module_name, target):
    """Make the map of a data directory name ``target`` where it named the module."""
    for m in data_dir.glob("sid-*.map"):
        lines = [line if not line.rstrip().split(" build-id:")[0].endswith("/" + module_name) else
                 line.split("/")[0] + str(target) + "\n" for line in m.read_text().splitlines(keepends=True)]
        m.write_text("".join(lines))


def test_hostile_module_files_give_offsets_and_a_note(pg_copy, work, tmp_path):
    """The ELF file a map names may be a FIFO, not ELF, cut short or damaged: never a hang
    or a traceback; its functions are named by offset (or, damaged, as far as it reads)."""
    next(p for p in pg_copy.glob("threads_ref*.sym")).unlink()
    binary = (work / "threads_ref").read_bytes()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cases = {"fifo": fifo, "text": tmp_path / "text", "cut": tmp_path / "cut"}
    cases["text"].write_text("not an ELF file\n")
    cases["cut"].write_bytes(binary[:200])
    for what, target in cases.items():
        data = tmp_path / f"{what}.data"
        shutil.copytree(pg_copy, data)
        _point_map_at(data, "threads_ref", target)
        uftrace_meta._cached_dir.cache_clear()
        t = U.read_uftrace_thread(dat_files(data)[0])
        assert all(n == "<return>" or n.startswith(f"{target.name}+0x") for n in t.names), what
        assert len(t.notes) == 1 and f"no {target.name}.sym in the data directory, and {target}" in t.notes[0]
    rng = random.Random(1505)
    damaged = tmp_path / "damaged"
    named = 0
    for k in range(150):
        data = bytearray(binary)
        for _ in range(rng.choice((1, 8, 64))):
            data[rng.randrange(64 if k % 3 == 0 else len(data))] = rng.randrange(256)
        damaged.write_bytes(bytes(data))
        d = tmp_path / f"d{k % 2}"
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(pg_copy, d)
        _point_map_at(d, "threads_ref", damaged)
        uftrace_meta._cached_dir.cache_clear()
        t = U.read_uftrace_thread(dat_files(d)[0])
        named += "main" in t.names
        assert t.events.size and t.names[0] == "<return>"
    assert named                                   # most flips leave the symbols readable
