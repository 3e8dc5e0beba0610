"""Hostile and broken run directories (issue 6): 100k entries, unreadable entries, mixed
formats.  Names with spaces/unicode, 10 kB names and 0-event traces are covered in
test_analysis.py (test_hostile_names_and_empty_traces_go_through_everything)."""
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from difftrace_mpi.readers import parlot as P
from difftrace_mpi.errors import DiffTraceError, TraceFormatError
from difftrace_mpi.readers import discover_run, load_trace

from conftest import EXAMPLES, ROOT, run_cli, starts_processes


# ----------------------------------------------------------------------------- helpers

@pytest.fixture
def big_dir(tmp_path):
    """A factory of empty directories for 100k-entry runs: on tmpfs (/dev/shm) where there is
    room, as creating 100k files on a disk can take tens of seconds; removed afterwards."""
    made = []
    base = "/dev/shm"
    try:
        st = os.statvfs(base)
        use_shm = os.access(base, os.W_OK) and st.f_favail > 500_000 and st.f_bavail * st.f_frsize > 1 << 28
    except OSError:
        use_shm = False

    def make(name):
        d = tempfile.mkdtemp(prefix=f"difftrace-{name}-", dir=base) if use_shm else str(tmp_path / name)
        os.makedirs(d, exist_ok=True)
        made.append(d)
        return d
    yield make
    for d in made:
        shutil.rmtree(d, ignore_errors=True)


def touch(path, data=b""):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if data:
            os.write(fd, data)
    finally:
        os.close(fd)


def make_text_run(d, ranks, threads):
    for r in range(ranks):
        for t in range(threads):
            touch(os.path.join(d, f"r{r}.t{t}.txt"))


def make_parlot_run(d, procs, threads, first_pid=1000):
    """procs x (info + rank sidecar + threads thread files); thread files are empty (discovery
    does not read them)."""
    info = b"+\nimage\nmain\nMPI_Send\n"
    for i in range(procs):
        pid = first_pid + i
        touch(os.path.join(d, f"run.host.{pid}.info"), info)
        touch(os.path.join(d, f"run.host.{pid}.rank"), b"%d\n" % i)
        for t in range(threads):
            touch(os.path.join(d, f"run.host.{pid}.{t}"))


def best_time(fn, repeats):
    """(fastest of ``repeats`` calls in seconds, the last call's result)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def one_error_line(res, *needles):
    """The CLI failed as a user error: exit 2, one line on stderr holding every needle."""
    assert res.returncode == 2, (res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr and lines[0].startswith("difftrace_mpi: error:")
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


SMALL_GRID = ("--filters", "11.mpi", "--k", "10", "--attributes", "sing.noFreq", "--linkage", "single")


# ----------------------------------------------------------------------------- 100k entries

def discovery_times(small, big):
    """Best discovery times of a small and a large run directory (the small one timed
    before and after the large one: the load on a shared machine varies)."""
    t_small, _ = best_time(lambda: discover_run(small), 3)
    t_big, idx = best_time(lambda: discover_run(big), 2)
    return min(t_small, best_time(lambda: discover_run(small), 2)[0]), t_big, idx


def test_discovery_of_100k_text_traces_is_linear(big_dir):
    small, big = big_dir("text10k"), big_dir("text100k")
    make_text_run(small, 2_500, 4)
    make_text_run(big, 25_000, 4)
    t_small, t_big, idx = discovery_times(small, big)
    assert idx.fmt == "text" and len(idx.refs) == 100_000 and not idx.notes
    assert (idx.refs[0].rank, idx.refs[0].thread) == (0, 0)
    assert (idx.refs[-1].rank, idx.refs[-1].thread) == (24_999, 3)
    print(f"text discovery: 10k entries {t_small:.3f} s, 100k entries {t_big:.3f} s, "
          f"ratio {t_big / t_small:.1f}")
    # linear gives ~10x (11-21x measured: caches, and a loaded machine); quadratic ~100x
    assert t_big < 40 * t_small + 0.5, (t_small, t_big)


def test_discovery_of_a_4096x8_parlot_job_is_linear(big_dir):
    """4096 processes x (info + rank + 8 threads) = 40,960 files, against 410 processes."""
    small, big = big_dir("parlot4k"), big_dir("parlot41k")
    make_parlot_run(small, 410, 8)
    make_parlot_run(big, 4096, 8)
    t_small, t_big, idx = discovery_times(small, big)
    assert idx.fmt == "parlot" and idx.rank_source == "sidecar" and not idx.notes
    assert len(idx.refs) == 4096 * 8
    assert (idx.refs[-1].rank, idx.refs[-1].thread) == (4095, 7)
    print(f"ParLOT discovery: 4,100 entries {t_small:.3f} s, 40,960 entries {t_big:.3f} s, "
          f"ratio {t_big / t_small:.1f}")
    assert t_big < 40 * t_small + 0.5, (t_small, t_big)


def test_100k_unrelated_files_beside_a_few_traces_give_one_short_note(big_dir):
    d = big_dir("junk")
    for i in range(100_000):
        touch(os.path.join(d, f"output-{i:06d}.dat"))
    touch(os.path.join(d, "a file with a very long name " + "x" * 200))
    for r in range(2):
        touch(os.path.join(d, f"r{r}.t0.txt"), b"main\nMPI_Send\n")
    idx = discover_run(d)
    assert idx.fmt == "text" and [(r.rank, r.thread) for r in idx.refs] == [(0, 0), (1, 0)]
    assert len(idx.notes) == 1
    note = idx.notes[0]
    assert "\n" not in note and len(note) < len(d) + 300, note
    assert "other files ignored" in note and "a file with a very long name xxx" in note
    assert "and 99996 more" in note
    assert "x" * 50 not in note                                   # long names are cut
    for r in range(2):
        os.unlink(os.path.join(d, f"r{r}.t0.txt"))
    P.write_info(os.path.join(d, "run.host.7.info"), ["main", "MPI_Send"])
    P.write_trace(os.path.join(d, "run.host.7.0"), [1, 2, 0, 0])
    idx = discover_run(d)
    assert idx.fmt == "parlot" and [(r.rank, r.thread) for r in idx.refs] == [(0, 0)]
    assert len(idx.notes) == 1 and "\n" not in idx.notes[0] and len(idx.notes[0]) < len(d) + 300
    assert "read as a ParLOT run; other files ignored" in idx.notes[0]
    assert "and 99996 more" in idx.notes[0]
    trace = load_trace(idx.refs[0])
    assert [trace.names[v] for v in trace.events.tolist() if v] == ["main", "MPI_Send"]


@pytest.mark.integration
def test_analyze_with_thousands_of_junk_files_notes_them_in_one_line(tmp_path):
    runs = {}
    for name in ("normal", "swapbug"):
        d = tmp_path / name
        shutil.copytree(EXAMPLES / name, d)
        for i in range(2_000):
            touch(str(d / f"core.{i}"))
        touch(str(d / "bad\nname\udcff.log"))                   # a newline and a non-UTF-8 byte
        runs[name] = d
    res = run_cli("analyze", runs["normal"], runs["swapbug"], *SMALL_GRID)
    assert res.returncode == 0, res.stderr[-3000:]
    notes = [line for line in res.stdout.splitlines() if line.startswith("note:")]
    ignored = [n for n in notes if "other files ignored" in n]
    assert len(ignored) == 2, notes
    for n in ignored:
        assert "and 1996 more" in n and "bad\\nname\\udcff.log" in n and len(n) < 400, n
    assert "\nbad" not in res.stdout
    assert "1  11.mpi" in res.stdout and "5.0" in res.stdout     # the swap is still found


# ----------------------------------------------------------------------------- not readable

@pytest.mark.parametrize("kind", ["fifo", "dangling symlink", "directory"])
@pytest.mark.parametrize("fmt", ["text", "parlot"])
@pytest.mark.integration
def test_entries_named_like_traces_that_are_not_files(tmp_path, fmt, kind):
    """A FIFO would block a read forever and a skipped entry would count as an empty trace:
    either is one error line naming the entry and what it is."""
    run = tmp_path / "run"
    run.mkdir()
    if fmt == "text":
        touch(str(run / "r0.t0.txt"), b"main\n")
        bad = run / "r1.t0.txt"
    else:
        P.write_info(run / "p.5.info", ["main"])
        P.write_trace(run / "p.5.0", [1, 0])
        bad = run / "p.5.1"
    what = {"fifo": "a FIFO", "dangling symlink": "a broken symbolic link (to ", "directory": "a directory"}[kind]
    if kind == "fifo":
        os.mkfifo(bad)
    elif kind == "dangling symlink":
        os.symlink(tmp_path / "gone", bad)
    else:
        bad.mkdir()
    with pytest.raises(TraceFormatError) as ei:
        discover_run(run)
    assert str(bad) in str(ei.value) and what in str(ei.value)
    if (fmt, kind) == ("text", "fifo"):                        # the CLI does not hang on it
        res = run_cli("analyze", run, run, *SMALL_GRID, timeout=120)
        one_error_line(res, str(bad), what)


def test_parlot_info_that_is_not_a_file(tmp_path):
    P.write_trace(tmp_path / "p.5.0", [1, 0])
    os.mkfifo(tmp_path / "p.5.info")
    with pytest.raises(TraceFormatError, match=r"p\.5\.info: ParLOT \.info file is a FIFO"):
        discover_run(tmp_path)


def test_files_that_vanish_between_discovery_and_reading(tmp_path):
    text = tmp_path / "text"
    text.mkdir()
    touch(str(text / "r0.t0.txt"), b"main\n")
    ref = discover_run(text).refs[0]
    os.unlink(text / "r0.t0.txt")
    with pytest.raises(TraceFormatError, match=r"r0\.t0\.txt: cannot read trace file: No such file"):
        load_trace(ref)
    par = tmp_path / "parlot"
    par.mkdir()
    P.write_info(par / "p.5.info", ["main"])
    P.write_trace(par / "p.5.0", [1, 0])
    P.write_trace(par / "p.5.1", [1, 0])
    refs = discover_run(par).refs
    os.unlink(par / "p.5.1")
    with pytest.raises(TraceFormatError, match=r"p\.5\.1: ParLOT trace file not found"):
        load_trace(refs[1])
    os.unlink(par / "p.5.info")
    with pytest.raises(TraceFormatError, match=r"p\.5\.info: ParLOT \.info file not found"):
        load_trace(refs[0])


def test_missing_run_directory_broken_link_and_fifo(tmp_path):
    with pytest.raises(DiffTraceError, match="nope: no such run directory$"):
        discover_run(tmp_path / "nope")
    os.symlink(tmp_path / "elsewhere", tmp_path / "link")
    with pytest.raises(DiffTraceError, match="link: no such run directory; it is a broken symbolic link "
                                             "(.*elsewhere: No such file or directory)"):
        discover_run(tmp_path / "link")
    os.symlink("loop", tmp_path / "loop")
    with pytest.raises(DiffTraceError, match="loop: no such run directory; .*symbolic link"):
        discover_run(tmp_path / "loop")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(DiffTraceError, match="fifo: not a directory"):
        discover_run(tmp_path / "fifo")


@pytest.mark.integration
def test_error_naming_a_file_with_a_newline_stays_one_line(tmp_path):
    """A run directory whose trace file name holds a newline and an escape character: the
    error names it on one line, the characters written as escapes."""
    from conftest import run_cli
    run = tmp_path / "run"
    run.mkdir()
    (run / "p.1.0").write_bytes(b"")            # a thread file without its .info
    odd = tmp_path / "bad\nname\x1b[31m"
    os.rename(run, odd)
    res = run_cli("analyze", odd, odd)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("difftrace_mpi: error: "), res.stderr
    assert "bad\\nname\\x1b[31m" in lines[0] and ".info file p.1.info is missing" in lines[0]


_NO_DAC = ["--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search"]


@pytest.fixture
@starts_processes
def run_unprivileged(tmp_path):
    """run_cli, in a process that file permissions apply to.  Root ignores them, so under
    root the CLI runs under ``setpriv`` without the capabilities that bypass them; skipped
    where that is not possible."""
    prefix = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root (chmod 000 does not stop root) and setpriv is missing")
        probe = tmp_path / "probe"
        probe.write_text("x")
        probe.chmod(0)
        try:
            r = subprocess.run([setpriv, *_NO_DAC, sys.executable, "-c", f"open({str(probe)!r}).read()"],
                               capture_output=True, text=True, timeout=60)
        finally:
            probe.unlink()
        if "PermissionError" not in r.stderr:
            pytest.skip(f"running as root and setpriv cannot drop CAP_DAC_OVERRIDE here: {r.stderr[-200:]}")
        prefix = [setpriv, *_NO_DAC]

    def run(*args, module=("-m", "difftrace_mpi")):
        cmd = [*prefix, sys.executable, *module, *map(str, args)]
        env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1")
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    return run


_READ_ALL = """
import sys
from difftrace_mpi.errors import DiffTraceError
from difftrace_mpi.readers import discover_run, load_trace
try:
    for ref in discover_run(sys.argv[1]).refs:
        load_trace(ref)
    print("read")
except DiffTraceError as exc:
    print(exc)
"""


def test_unreadable_files_and_run_directory(tmp_path, run_unprivileged):
    """chmod 000 on a text trace and on a run directory: one error line naming it, exit 2
    from the CLI; on a ParLOT .info and thread file: the reader's error names the file."""
    text = tmp_path / "text"
    shutil.copytree(EXAMPLES / "normal", text)
    par = tmp_path / "parlot"
    par.mkdir()
    for pid in (5, 6):
        P.write_info(par / f"p.{pid}.info", ["main", "MPI_Send"])
        P.write_trace(par / f"p.{pid}.0", [1, 2, 0, 0])
    cases = [(text, text / "r3.t0.txt", "cannot read trace file: Permission denied"),
             (text, text, "cannot list directory (Permission denied)"),
             (par, par / "p.6.info", "cannot read ParLOT .info file: Permission denied"),
             (par, par / "p.5.0", "cannot read ParLOT trace file: Permission denied")]
    for run, target, message in cases:
        mode = target.stat().st_mode
        target.chmod(0)
        try:
            if run is text:
                res = run_unprivileged("analyze", run, EXAMPLES / "normal", *SMALL_GRID)
                one_error_line(res, f"{target}{'' if target.is_dir() else ':'}", message)
            else:
                res = run_unprivileged(run, module=("-c", _READ_ALL))
                assert res.returncode == 0 and res.stdout.strip() == f"{target}: {message}", res
        finally:
            target.chmod(mode)
    res = run_unprivileged(par, module=("-c", _READ_ALL))
    assert res.stdout.strip() == "read", res         # the same directory, readable again


# ----------------------------------------------------------------------------- mixed formats

@pytest.mark.integration
def test_mixed_formats_are_named_and_text_wins(tmp_path):
    def mixed(d, tag):
        d.mkdir()
        for r in range(2):
            touch(str(d / f"r{r}.t0.txt"), f"main\nMPI_Send\n{tag}\n".encode())
        P.write_info(d / "p.5.info", ["main"])
        P.write_trace(d / "p.5.0", [1, 0])
        (d / "ut.0").mkdir()
        (d / "ut.0" / "info").write_bytes(b"Ftrace!\x00" + bytes(8))   # a uftrace data dir (magic)
        (d / "scorep-x").mkdir()
        touch(str(d / "scorep-x" / "traces.otf2"))
        return d
    a, b = mixed(tmp_path / "a", "x"), mixed(tmp_path / "b", "y")
    idx = discover_run(a)
    assert idx.fmt == "text" and [(r.rank, r.thread) for r in idx.refs] == [(0, 0), (1, 0)]
    several = [n for n in idx.notes if "several trace formats" in n]
    assert len(several) == 1
    for words in ("text: 2 r<rank>.t<thread>.txt files", "uftrace: 1 data directory", "OTF2: an archive",
                  "ParLOT: 1 thread file", "read as text only", "move them to a directory of their own"):
        assert words in several[0], (words, several[0])
    res = run_cli("analyze", a, b, *SMALL_GRID)
    assert res.returncode == 0, res.stderr[-3000:]
    assert sum("several trace formats" in line for line in res.stdout.splitlines()) == 2
    assert "(text, 2 traces)" in res.stdout
    # without the text traces, uftrace/OTF2 gone too, the same directory is a ParLOT run
    for r in range(2):
        os.unlink(a / f"r{r}.t0.txt")
    shutil.rmtree(a / "ut.0")
    shutil.rmtree(a / "scorep-x")
    idx = discover_run(a)
    assert idx.fmt == "parlot" and not idx.notes


def test_parlot_and_a_uftrace_directory(tmp_path):
    """No text traces: uftrace comes before ParLOT, and the note says the ParLOT files were
    ignored; a broken uftrace directory is then the error."""
    P.write_info(tmp_path / "p.5.info", ["main"])
    P.write_trace(tmp_path / "p.5.0", [1, 0])
    (tmp_path / "ut.0").mkdir()
    (tmp_path / "ut.0" / "info").write_bytes(b"Ftrace!\x00" + bytes(8))
    with pytest.raises(TraceFormatError, match="no <tid>.dat files"):
        discover_run(tmp_path)
    (tmp_path / "ut.0" / "info").write_bytes(b"not uftrace")
    idx = discover_run(tmp_path)
    assert idx.fmt == "parlot" and len(idx.notes) == 1 and "other files ignored: ut.0" in idx.notes[0]
