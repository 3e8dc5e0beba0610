"""Issue 13, docs/guarantees.md: outputs never overwrite a file without --force and
never name an input, publishing is atomic and no-clobber (two writers of one file: one wins,
the other says so), files get the umask's mode, a full disk is one message (exit 2, the old
file kept, no temp file), and SIGINT/SIGTERM end every rank promptly without a temp file.

The in-process tests are the fast layer; the chaos tests (concurrent writers, signals at
seeded random points of 1- and 2-rank runs, a full tmpfs) start processes and are marked
integration.  DIFFTRACE_CHAOS_TRIALS sets how many random points each chaos test tries."""
import errno
import glob
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from difftrace_mpi import cli, fsutil, store
from difftrace_mpi.errors import DiffTraceError

from conftest import EXAMPLES, ROOT

NORMAL, FAULTY = EXAMPLES / "normal", EXAMPLES / "swapbug"
CHAOS_TRIALS = int(os.environ.get("DIFFTRACE_CHAOS_TRIALS", "3"))


def _umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _temp_files(directory):
    """What a writer may leave behind: its hidden temporary files."""
    return glob.glob(os.path.join(str(directory), ".*.tmp"))


def _run_cli(capsys, *argv):
    capsys.readouterr()
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def results_h5(tmp_path_factory):
    path = tmp_path_factory.mktemp("guarantees") / "r.h5"
    assert cli.main(["analyze", str(NORMAL), str(FAULTY), "--out", str(path), "--json"]) == 0
    return path


# --------------------------------------------------------------------------- 1. no-clobber publish

def test_publish_never_replaces_a_file_that_appeared_meanwhile(tmp_path):
    """Two writers of one path: the second to finish says the file exists; the first's
    file is kept whole (the existence check and the publish are one step)."""
    target = tmp_path / "out.txt"
    with pytest.raises(DiffTraceError, match="exists; not overwritten without --force"):
        with fsutil.atomic_path(target) as tmp:
            with open(tmp, "w") as fh:
                fh.write("second writer")
            target.write_text("first writer")          # the other writer published meanwhile
    assert target.read_text() == "first writer"
    assert not _temp_files(tmp_path)


def test_store_write_never_replaces_a_concurrent_writers_file(results_h5, tmp_path, monkeypatch):
    target = tmp_path / "r.h5"
    real = store._write

    def slow_write(f, res):
        shutil.copyfile(results_h5, target)        # the other writer finishes first
        real(f, res)
    monkeypatch.setattr(store, "_write", slow_write)
    with store.read(results_h5) as res, pytest.raises(DiffTraceError, match="exists; not overwritten without --force"):
        store.write(res, target)
    assert target.read_bytes() == results_h5.read_bytes()
    assert not _temp_files(tmp_path)


def test_force_replaces(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    fsutil.write_text_atomic(target, "new", force=True)
    assert target.read_text() == "new"
    with pytest.raises(DiffTraceError, match="exists"):
        fsutil.write_text_atomic(target, "newer")
    assert target.read_text() == "new"


# --------------------------------------------------------------------------- 2. every output flag

def test_analyze_html_never_replaces_an_input_trace(tmp_path, capsys, no_analysis):
    faulty = tmp_path / "faulty"
    shutil.copytree(FAULTY, faulty)
    trace = faulty / "r5.t0.txt"
    before = trace.read_bytes()
    for force in ([], ["--force"]):
        code, out, err = _run_cli(capsys, "analyze", NORMAL, faulty, "--html", trace, *force)
        assert code == 2 and out == "", err
        assert "--html" in err and "input" in err and err.count("\n") == 1, err
    assert trace.read_bytes() == before


@pytest.mark.parametrize("flag", ["--out", "--html"])
def test_analyze_outputs_refuse_an_existing_file_before_the_analysis(tmp_path, capsys, no_analysis, flag):
    existing = tmp_path / "x"
    existing.write_text("keep me")
    code, out, err = _run_cli(capsys, "analyze", NORMAL, FAULTY, flag, existing)
    assert code == 2 and out == "" and "exists; use --force" in err, err
    assert existing.read_text() == "keep me"


def test_analyze_output_may_not_be_an_input_directory(tmp_path, capsys, no_analysis):
    faulty = tmp_path / "faulty"
    shutil.copytree(FAULTY, faulty)
    code, out, err = _run_cli(capsys, "analyze", NORMAL, faulty, "--out", faulty, "--force")
    assert code == 2 and "input" in err, err


def test_two_outputs_may_not_name_one_file(tmp_path, capsys, no_analysis):
    code, out, err = _run_cli(capsys, "analyze", NORMAL, FAULTY, "--out", tmp_path / "a", "--html",
                              tmp_path / "a")
    assert code == 2 and "same file" in err, err


def test_out_into_a_missing_directory_is_refused_before_the_analysis(tmp_path, capsys, no_analysis):
    """Issue 13, item 26: the text output is not lost to a late failure."""
    code, out, err = _run_cli(capsys, "analyze", NORMAL, FAULTY, "--out", tmp_path / "missing" / "r.h5")
    assert code == 2 and out == "" and "does not exist" in err, err


def test_output_into_a_read_only_directory_is_refused_first(tmp_path, capsys, no_analysis):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only directories")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        code, out, err = _run_cli(capsys, "analyze", NORMAL, FAULTY, "--html", ro / "d.html")
    finally:
        ro.chmod(0o755)
    assert code == 2 and "not writable" in err, err


def test_diffnlr_outputs(tmp_path, capsys):
    a, b = NORMAL / "r5.t0.txt", FAULTY / "r5.t0.txt"
    for flag in ("--html", "--svg"):
        existing = tmp_path / f"x{flag}"
        existing.write_text("keep me")
        code, out, err = _run_cli(capsys, "diffnlr", a, b, flag, existing)
        assert code == 2 and "exists; use --force" in err, err
        assert existing.read_text() == "keep me"
        code, out, err = _run_cli(capsys, "diffnlr", a, b, flag, existing, "--force")
        assert code == 0 and existing.read_text() != "keep me", err
        copy = tmp_path / "r5.t0.txt"
        shutil.copyfile(b, copy)
        code, out, err = _run_cli(capsys, "diffnlr", a, copy, flag, copy, "--force")
        assert code == 2 and "input" in err, err
        assert copy.read_bytes() == b.read_bytes()


def test_lattice_dot(results_h5, tmp_path, capsys):
    results = tmp_path / "r.h5"
    shutil.copyfile(results_h5, results)
    dot = tmp_path / "l.dot"
    dot.write_text("keep me")
    code, out, err = _run_cli(capsys, "lattice", results, "--dot", dot)
    assert code == 2 and "exists; use --force" in err and dot.read_text() == "keep me", err
    assert _run_cli(capsys, "lattice", results, "--dot", dot, "--force")[0] == 0
    assert dot.read_text().startswith("digraph")
    code, out, err = _run_cli(capsys, "lattice", results, "--dot", results, "--force")
    assert code == 2 and "input" in err, err
    assert results.read_bytes() == results_h5.read_bytes()


def test_report_outputs(results_h5, tmp_path, capsys):
    results = tmp_path / "r.h5"
    shutil.copyfile(results_h5, results)
    html = tmp_path / "r.html"
    html.write_text("keep me")
    for argv in ([results], [results, "-o", html]):           # the default output is r.html too
        code, out, err = _run_cli(capsys, "report", *argv)
        assert code == 2 and "exists; use --force" in err and html.read_text() == "keep me", err
    code, out, err = _run_cli(capsys, "report", results, "-o", results, "--force")
    assert code == 2 and "input" in err, err
    assert results.read_bytes() == results_h5.read_bytes()
    pngs = tmp_path / "pngs"
    pngs.mkdir()
    (pngs / "dendrograms.png").write_text("keep me")
    code, out, err = _run_cli(capsys, "report", results, "-o", tmp_path / "new.html", "--png", pngs)
    assert code == 2 and "exists; use --force" in err, err
    assert (pngs / "dendrograms.png").read_text() == "keep me"
    assert not (tmp_path / "new.html").exists()


# --------------------------------------------------------------------------- 3. file modes

def test_outputs_get_the_umask_mode(results_h5, tmp_path, capsys):
    wanted = 0o666 & ~_umask()
    text = tmp_path / "t.txt"
    fsutil.write_text_atomic(text, "x")
    assert os.stat(text).st_mode & 0o777 == wanted
    assert os.stat(results_h5).st_mode & 0o777 == wanted
    code, out, err = _run_cli(capsys, "diffnlr", NORMAL / "r5.t0.txt", FAULTY / "r5.t0.txt",
                              "--html", tmp_path / "d.html", "--svg", tmp_path / "d.svg")
    assert code == 0, err
    for name in ("d.html", "d.svg"):
        assert os.stat(tmp_path / name).st_mode & 0o777 == wanted


# --------------------------------------------------------------------------- 4. a full disk

def _no_space_for_files(monkeypatch):
    """os.write fails with ENOSPC for every file but the standard streams."""
    real = os.write

    def write(fd, data):
        if fd > 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)
    monkeypatch.setattr(os, "write", write)


class _FillsUp:
    """A file that takes ``room`` bytes, then fails with ENOSPC."""

    def __init__(self, fh, room):
        self.fh, self.room = fh, room

    def write(self, data):
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.fh.write(data)

    def __getattr__(self, name):
        return getattr(self.fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.fh.close()


def test_disk_full_is_one_message_and_keeps_the_old_file(results_h5, tmp_path, monkeypatch):
    """Issue 13, item 4 (injected ENOSPC; test_full_tmpfs_* fills a real file system)."""
    target = tmp_path / "r.h5"
    target.write_bytes(b"the old results")
    monkeypatch.setattr(store, "open", lambda *a, **k: _FillsUp(open(*a, **k), 20000), raising=False)
    with store.read(results_h5) as res:
        _no_space_for_files(monkeypatch)
        with pytest.raises(DiffTraceError, match=f"^disk full writing {target}$"):
            store.write(res, target, force=True)
        with pytest.raises(DiffTraceError, match="^disk full writing"):
            fsutil.write_text_atomic(tmp_path / "t.txt", "x" * 100000)
    assert target.read_bytes() == b"the old results"
    assert not _temp_files(tmp_path) and not (tmp_path / "t.txt").exists()


# --------------------------------------------------------------------------- chaos (processes)

def _env():
    return dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1")


def _mpiexec():
    return shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")


def _session_left(pid):
    """Processes still in the session a test started (its own new session)."""
    res = subprocess.run(["ps", "-e", "-o", "pid=,sid=,stat="], capture_output=True, text=True)
    return [line for line in res.stdout.splitlines()
            if line.split()[1] == str(pid) and not line.split()[2].startswith("Z")]


def _rank_pids(session):
    """The Python processes (the ranks) of a job started in its own session."""
    res = subprocess.run(["ps", "-e", "-o", "pid=,sid=,args="], capture_output=True, text=True)
    return [int(line.split()[0]) for line in res.stdout.splitlines()
            if line.split()[1] == str(session) and "-m difftrace_mpi" in line and "mpiexec" not in line
            and "hydra" not in line]


def _finish(proc, timeout):
    """(exit status or 'hang', stdout, stderr); a hung job is killed."""
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return "hang", out, err


def _analyze_cmd(out, ranks):
    cmd = [sys.executable, "-m", "difftrace_mpi", "analyze", str(NORMAL), str(FAULTY), "--out", str(out),
           "--force"]
    return [_mpiexec(), "-n", str(ranks), *cmd] if ranks > 1 else cmd


@pytest.mark.integration
def test_concurrent_writers_one_wins_the_other_says_so(tmp_path):
    """Issue 13, item 1: several `analyze --out SAME` at once: exactly one succeeds, every
    other one reports that the file exists, and the file is one complete result."""
    for trial in range(CHAOS_TRIALS):
        out = tmp_path / f"t{trial}" / "r.h5"
        out.parent.mkdir()
        cmd = [sys.executable, "-m", "difftrace_mpi", "analyze", str(NORMAL), str(FAULTY), "--out", str(out),
               "--json"]
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
                 for _ in range(3)]
        results = [_finish(p, 120) for p in procs]
        codes = sorted(r[0] for r in results)
        assert codes == [0, 2, 2], [r[2] for r in results]
        for code, _, err in results:
            # refused when its outputs were checked, or when it published after the winner
            assert code == 0 or any(said in err for said in ("exists; use --force to overwrite it",
                                                             "exists; not overwritten without --force")), err
        with store.read(out) as res:
            assert res.rows
        assert not _temp_files(out.parent)


@pytest.mark.integration
def test_umask_is_respected_in_a_new_process(tmp_path):
    script = ("import os, sys; os.umask(0o027); sys.argv[1:1] = ['analyze']; "
              "from difftrace_mpi.__main__ import main; sys.exit(main())")
    res = subprocess.run([sys.executable, "-c", script, str(NORMAL), str(FAULTY), "--out", str(tmp_path / "r.h5"),
                          "--html", str(tmp_path / "r.html"), "--json"],
                         capture_output=True, text=True, env=_env(), timeout=120)
    assert res.returncode == 0, res.stderr
    for name in ("r.h5", "r.html"):
        assert os.stat(tmp_path / name).st_mode & 0o777 == 0o640


def _can_mount_tmpfs():
    if not shutil.which("unshare"):
        return False
    res = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                          "mount -t tmpfs -o size=64k tmpfs /mnt"], capture_output=True)
    return res.returncode == 0


@pytest.mark.integration
def test_full_tmpfs_is_one_message_and_keeps_the_old_file(tmp_path):
    """Issue 13, item 4, on a real full file system (a small tmpfs in a user namespace):
    one line, exit 2, the old file kept, no temp file; never a crash or HDF5 tracebacks."""
    if not _can_mount_tmpfs():
        pytest.skip("cannot mount a tmpfs here (unshare); test_disk_full_* injects ENOSPC instead")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = textwrap.dedent(f"""
        set -e
        mount -t tmpfs -o size=256k tmpfs {mnt}
        printf 'the old results' > {mnt}/r.h5
        set +e
        {sys.executable} -m difftrace_mpi analyze {NORMAL} {FAULTY} --out {mnt}/r.h5 --force --json > /dev/null
        echo "rc=$?"
        echo "old=$(cat {mnt}/r.h5)"
        echo "files=$(ls -A {mnt} | tr '\\n' ' ')"
        """)
    res = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
                         capture_output=True, text=True, env=_env(), timeout=120)
    assert "rc=2" in res.stdout, (res.stdout, res.stderr)
    assert "old=the old results" in res.stdout and "files=r.h5 \n" in res.stdout + "\n", res.stdout
    assert res.stderr == f"difftrace_mpi: error: disk full writing {mnt}/r.h5\n", res.stderr


SIGNAL_IN_WRITE = """
import os, signal, sys, time
from difftrace_mpi import store
real = store._write
def write(f, res):
    real(f, res)
    os.kill(os.getpid(), signal.{sig})
    deadline = time.time() + 20         # Python code inside the write, where the handler runs
    while time.time() < deadline:
        pass
store._write = write
from difftrace_mpi.__main__ import main
sys.argv[1:1] = ["analyze"]
sys.exit(main())
"""


@pytest.mark.integration
@pytest.mark.parametrize("sig, code", [("SIGTERM", 143), ("SIGINT", 130)])
def test_signal_while_writing_results_leaves_no_temp_file(tmp_path, sig, code):
    """Issue 13, item 5: a signal in the middle of the HDF5 write ends the run at once with
    128 + the signal's number, removes the temp file and keeps the old results file."""
    out = tmp_path / "r.h5"
    out.write_bytes(b"the old results")
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-c", SIGNAL_IN_WRITE.format(sig=sig), str(NORMAL), str(FAULTY),
                          "--out", str(out), "--force", "--json"],
                         capture_output=True, text=True, env=_env(), timeout=60)
    assert res.returncode == code, res.stderr
    assert time.monotonic() - start < 15, "the signal waited for the write"
    assert "Exception ignored" not in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert out.read_bytes() == b"the old results"
    assert not _temp_files(tmp_path)


def interrupt_in_step(rank, sig, wait):
    """A script: ``analyze`` under MPI where rank ``rank`` sends itself ``sig`` as it enters
    its first step, then ``wait``s (a line of Python) while the other rank waits in the
    step's collective."""
    return f"""
import os, signal, sys, time
from difftrace_mpi.engine import choreography
real = choreography.Choreography.step
def step(self, name, fn, *args, **kwargs):
    if self.rank == {rank}:
        os.kill(os.getpid(), signal.{sig})
        {wait}
    return real(self, name, fn, *args, **kwargs)
choreography.Choreography.step = step
from difftrace_mpi.__main__ import main
sys.argv[1:1] = ["analyze"]
sys.exit(main())
"""


# rank 0 is interrupted and keeps busy (no sleep to cut short) while rank 1 waits
ROOT_SPINS = "deadline = time.time() + 30\n        while time.time() < deadline:\n            pass"


@pytest.mark.integration
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_interrupt_of_one_rank_ends_the_whole_job(tmp_path, sig):
    """Issue 13, item 6: under MPI an interrupt on one rank while another waits in a
    collective ends every rank (MPI Abort) instead of leaving that one spinning."""
    cmd = [_mpiexec(), "-n", "2", sys.executable, "-c", interrupt_in_step(0, sig, ROOT_SPINS), str(NORMAL), str(FAULTY),
           "--out", str(tmp_path / "r.h5")]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                            start_new_session=True)
    code, out, err = _finish(proc, 25)
    assert code not in ("hang", 0), (code, err)
    assert time.monotonic() - start < 20
    time.sleep(0.5)
    assert not _session_left(proc.pid)
    assert not _temp_files(tmp_path) and not (tmp_path / "r.h5").exists()


def _mpi_shared_memory():
    """The MPI libraries' shared-memory files in /dev/shm now (config.MPI_SHARED_MEMORY)."""
    from difftrace_mpi.config import MPI_SHARED_MEMORY
    return {p for p in glob.glob("/dev/shm/*") if p.startswith(MPI_SHARED_MEMORY)}


# rank 1 says how many MPI shared-memory files it maps, then fails outside any step: the
# other rank waits in a collective, and rank 1 ends the job (MPI Abort)
FAILS_OUTSIDE_A_STEP = """
import sys
from difftrace_mpi.cli import analyze
from difftrace_mpi.config import MPI_SHARED_MEMORY
def run_analysis(*args, **kwargs):
    from mpi4py import MPI
    if MPI.COMM_WORLD.Get_rank() == 1:
        with open("/proc/self/maps") as maps:
            print("maps", sum(1 for line in maps if line.split()[-1].startswith(MPI_SHARED_MEMORY)), flush=True)
        raise RuntimeError("a bug outside the steps")
    MPI.COMM_WORLD.Barrier()
analyze.run_analysis = run_analysis
from difftrace_mpi.__main__ import main
sys.argv[1:1] = ["analyze"]
sys.exit(main())
"""


@pytest.mark.integration
@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
@pytest.mark.parametrize("how", ["interrupt", "error outside a step"])
def test_a_job_ended_by_mpi_abort_leaves_no_shared_memory(tmp_path, how):
    """MPI unlinks its shared-memory file (/dev/shm, 2 MB with MPICH) in MPI_Finalize,
    which a job ended by MPI Abort never reaches: each such run left one behind, in RAM,
    until the ranks ending the job unlinked it first (every rank had mapped it)."""
    before = _mpi_shared_memory()
    script = interrupt_in_step(0, "SIGINT", ROOT_SPINS) if how == "interrupt" else FAILS_OUTSIDE_A_STEP
    proc = subprocess.Popen([_mpiexec(), "-n", "2", sys.executable, "-c", script, str(NORMAL), str(FAULTY),
                             "--out", str(tmp_path / "r.h5")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(), start_new_session=True)
    code, out, err = _finish(proc, 25)
    assert code not in ("hang", 0), (code, err)
    if how != "interrupt":
        assert "maps 1" in out, out + err          # the job had one to leave behind
        assert "a bug outside the steps" in err
    time.sleep(0.5)
    assert not _session_left(proc.pid)
    assert not _mpi_shared_memory() - before


def _uninterrupted_seconds(ranks, tmp_path):
    out = tmp_path / f"clean{ranks}.h5"
    start = time.monotonic()
    res = subprocess.run(_analyze_cmd(out, ranks), capture_output=True, text=True, env=_env(), timeout=120)
    assert res.returncode == 0, res.stderr
    return time.monotonic() - start


LATE_SIGNAL = """
import os, signal, sys
import difftrace_mpi.__main__ as m
leave = m._exit_now
def late(code):                 # the work is done; the signal comes as the command leaves
    os.kill(os.getpid(), signal.SIGTERM)
    return leave(code)
m._exit_now = late
sys.exit(m.main(sys.argv[1:]))
"""


@pytest.mark.integration
def test_a_signal_as_the_command_leaves_ends_it_with_one_line(tmp_path):
    """SIGTERM after the analysis, while the command flushes its output and leaves (the
    chaos test below hit it once): 128 + the signal and one line, never a traceback; the
    results written stay whole."""
    out = tmp_path / "r.h5"
    res = subprocess.run([sys.executable, "-c", LATE_SIGNAL, "analyze", str(NORMAL), str(FAULTY), "--out", str(out)],
                         capture_output=True, text=True, env=_env(), timeout=120)
    assert res.returncode == 128 + signal.SIGTERM, res.stderr
    assert "Traceback" not in res.stderr and res.stderr.strip().splitlines()[-1] == "difftrace_mpi: interrupted"
    with store.read(out) as res:
        assert res.verdict["kind"] != "none"


@pytest.mark.integration
@pytest.mark.parametrize("ranks", [1, 2])
def test_signals_at_random_points(tmp_path, ranks):
    """Issue 13, items 5 and 6, chaos: SIGINT or SIGTERM to the whole job (as Ctrl-C or a
    batch system sends it) at seeded random points of a run: the job ends promptly with
    128 + the signal (or 0 when it had finished, or 2 with a one-line message), no process
    is left, and no temp file remains."""
    rng = random.Random(1300 + ranks)
    span = _uninterrupted_seconds(ranks, tmp_path)
    for trial in range(2 * CHAOS_TRIALS):
        sig = (signal.SIGINT, signal.SIGTERM)[trial % 2]
        workdir = tmp_path / f"t{trial}"
        workdir.mkdir()
        out = workdir / "r.h5"
        out.write_bytes(b"the old results")
        delay = rng.uniform(0.2, span)
        proc = subprocess.Popen(_analyze_cmd(out, ranks), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=_env(), start_new_session=True)
        time.sleep(delay)
        try:
            if ranks == 1:
                os.killpg(proc.pid, sig)
            else:       # the ranks, as a batch system does: hydra's mpiexec can itself hang when
                for pid in _rank_pids(proc.pid):     # signalled as its processes end
                    os.kill(pid, sig)
        except ProcessLookupError:
            pass
        code, _, err = _finish(proc, 30)
        what = f"trial {trial}: {sig.name} after {delay:.2f} s of {span:.2f}: exit {code}\n{err}"
        assert code != "hang", what
        # 1 rank: its own status; under mpiexec the launcher's, which reports the signal its
        # processes ended with or MPI_Abort's code in its own way: any end but success-or-hang
        if ranks == 1:       # -sig: it came as Python shut down, its handlers already reset
            assert code in (0, 128 + sig, -sig), what
            assert "Traceback" not in err and "Exception ignored" not in err, what
        time.sleep(0.3)
        assert not _session_left(proc.pid), what
        assert not _temp_files(workdir), what
        data = out.read_bytes()
        assert data == b"the old results" or data.startswith(b"\x89HDF"), what


@pytest.mark.integration
def test_output_check_under_mpi_is_one_message_and_no_hang(tmp_path):
    """The root checks the outputs and every rank agrees: a refused output ends a 2-rank
    job at once with one line, not one rank waiting for the other."""
    existing = tmp_path / "d.html"
    existing.write_text("keep me")
    cmd = [_mpiexec(), "-n", "2", sys.executable, "-m", "difftrace_mpi", "analyze", str(NORMAL), str(FAULTY),
           "--html", str(existing)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=60)
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("exists; use --force") == 1 and res.stdout == "", res.stderr
    assert existing.read_text() == "keep me"


INTERRUPT_IN_IMPORTS = """
import builtins, os, signal, sys, time
if os.environ.get("PMI_RANK", "0") == "0":      # rank 0 is interrupted while it imports (no MPI yet)
    real = builtins.__import__
    def imp(name, *args, **kwargs):
        if name == "numpy":
            builtins.__import__ = real
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)
        return real(name, *args, **kwargs)
    builtins.__import__ = imp
from difftrace_mpi.__main__ import main
sys.argv[1:1] = ["analyze"]
sys.exit(main())
"""


@pytest.mark.integration
def test_interrupt_before_mpi_starts_ends_the_whole_job(tmp_path):
    """Issue 13, item 6: a rank interrupted before it started MPI must not just exit: the
    others wait for it in MPI_Init, and the launcher does not end them.  It starts MPI
    to abort the job."""
    cmd = [_mpiexec(), "-n", "2", sys.executable, "-c", INTERRUPT_IN_IMPORTS, str(NORMAL), str(FAULTY)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                            start_new_session=True)
    code, out, err = _finish(proc, 25)
    assert code not in ("hang", 0), (code, err)
    time.sleep(0.5)
    assert not _session_left(proc.pid)
