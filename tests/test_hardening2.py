"""Issue 22, hardening, second round: hostile inputs, killed tracers, a test command that
passes on a fresh machine.  One section per item of the issue, each test written to fail on
the code before the fix where the failure can be reproduced.

In-process tests are the fast layer; those that start processes (mpiexec, the tracer, a
child under a memory limit) are marked integration.  Work is bounded by counts (files,
cases, values), never by how long the machine takes: a loaded 2-core machine is slow, not
wrong.
"""
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import EXAMPLES, ROOT, labels
from difftrace_mpi import cli, fsutil, readers, store
from difftrace_mpi.errors import DiffTraceError, TraceFormatError
from difftrace_mpi.readers import budget, parlot as P
from test_hostile_inputs import _bomb_bytes, parlot_run

NORMAL, FAULTY = EXAMPLES / "normal", EXAMPLES / "swapbug"
SMALL_GRID = ["--filters", "11.mpi", "--attributes", "sing.noFreq", "--linkage", "ward"]


@pytest.fixture(autouse=True)
def _default_budget():
    budget.set_memory_budget(None)
    yield
    budget.set_memory_budget(None)


@pytest.fixture(scope="module")
def results_h5(tmp_path_factory):
    """A results file of the odd/even example (one setting: quick)."""
    import difftrace_mpi
    path = tmp_path_factory.mktemp("hardening2") / "r.h5"
    difftrace_mpi.analyze(NORMAL, FAULTY, filters=["11.mpi"], attributes=["sing.noFreq"], linkage=["ward"],
                          out=path)
    return path


def run(capsys, *argv):
    """cli.main in this process: (exit status, stdout, stderr); argparse's exit counts."""
    capsys.readouterr()
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err):
    """The error lines of stderr (argparse adds its usage lines before its one error line)."""
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ----------------------------------------------------------------------------- 1. --force replaces regular files only

def test_force_never_replaces_a_fifo_with_report(results_h5, tmp_path, capsys):
    fifo = tmp_path / "page.html"
    os.mkfifo(fifo)
    code, out, err = run(capsys, "report", results_h5, "-o", fifo, "--force")
    assert code == 2, (out, err)
    assert "FIFO" in one_line_error(err) and "regular files only" in err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("flag", ["--out", "--html"])
def test_force_never_replaces_a_fifo_with_analyze(tmp_path, capsys, no_analysis, flag):
    fifo = tmp_path / "x"
    os.mkfifo(fifo)
    code, out, err = run(capsys, "analyze", NORMAL, FAULTY, flag, fifo, "--force")
    assert code == 2 and "FIFO" in one_line_error(err)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_atomic_writes_with_force_refuse_special_files(tmp_path):
    """The last line of defence (a FIFO made between the check of the outputs and the
    write): publishing never replaces one, even with force."""
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    with pytest.raises(DiffTraceError, match="FIFO.*regular files only"):
        fsutil.write_text_atomic(fifo, "x", force=True)
    with pytest.raises(DiffTraceError, match="FIFO"):
        fsutil.write_text_atomic(fifo, "x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    regular = tmp_path / "r"
    regular.write_text("old")
    fsutil.write_text_atomic(regular, "new", force=True)          # a regular file: replaced
    assert regular.read_text() == "new"


def test_force_never_replaces_a_device_node(results_h5, tmp_path, capsys):
    """As root, `-o /dev/full --force` once replaced the device node; a node made here
    stands in for it (the real one is not put at risk)."""
    node = tmp_path / "full"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make a device node here ({exc.strerror}); the FIFO tests cover the rule")
    code, out, err = run(capsys, "report", results_h5, "-o", node, "--force")
    assert code == 2 and "character device" in one_line_error(err)
    assert stat.S_ISCHR(os.lstat(node).st_mode)


def test_force_never_replaces_a_directory_or_a_link(results_h5, tmp_path, capsys):
    target = tmp_path / "real.html"
    target.write_text("keep")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    code, out, err = run(capsys, "report", results_h5, "-o", link, "--force")
    assert code == 2 and "symbolic link" in one_line_error(err)
    assert link.is_symlink() and target.read_text() == "keep"


# ----------------------------------------------------------------------------- 2. a FIFO given as the results file

# h5py opens a file in C holding the GIL: a FIFO blocks the whole process, so these run in a
# child with a timeout (a thread could not unblock it)

FIFO_LOAD = r"""
import sys
sys.path.insert(0, sys.argv[1])
import difftrace_mpi
try:
    difftrace_mpi.load(sys.argv[2])
except difftrace_mpi.DiffTraceError as exc:
    print(exc)
"""


def _unblock(fifo):
    for _ in range(3):                     # a writer, then EOF: the blocked open returns
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
        time.sleep(0.05)


def _child(cmd, fifo, timeout=60):
    try:
        return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1"))
    except subprocess.TimeoutExpired:
        _unblock(fifo)
        pytest.fail(f"blocked for {timeout} s on the FIFO")


@pytest.mark.integration
@pytest.mark.parametrize("command", [["report"], ["lattice"], ["diffnlr", "--rank", "5"]])
def test_fifo_results_file_is_refused_without_blocking(tmp_path, command):
    fifo = tmp_path / "ff.h5"
    os.mkfifo(fifo)
    res = _child([sys.executable, "-m", "difftrace_mpi", command[0], fifo, *command[1:]], fifo)
    assert res.returncode == 2 and "FIFO" in one_line_error(res.stderr) and str(fifo) in res.stderr


@pytest.mark.integration
def test_load_of_a_fifo_is_one_error(tmp_path):
    fifo = tmp_path / "ff.h5"
    os.mkfifo(fifo)
    res = _child([sys.executable, "-c", FIFO_LOAD, ROOT, fifo], fifo)
    assert res.returncode == 0 and "FIFO" in res.stdout and res.stderr == "", res.stderr[-2000:]


# ----------------------------------------------------------------------------- 3. empty output paths

@pytest.mark.parametrize("argv", [
    ["analyze", NORMAL, FAULTY, "--out", ""],
    ["analyze", NORMAL, FAULTY, "--html", ""],
    ["diffnlr", NORMAL, FAULTY, "--rank", "5", "--html", ""],
    ["diffnlr", NORMAL, FAULTY, "--rank", "5", "--svg", ""],
    ["lattice", "{h5}", "--dot", ""],
    ["report", "{h5}", "-o", ""],
    ["report", "{h5}", "--png", ""],
], ids=["out", "html", "diffnlr-html", "diffnlr-svg", "dot", "report-o", "png"])
def test_empty_output_paths_are_refused(results_h5, tmp_path, capsys, no_analysis, argv):
    before = sorted(os.listdir(results_h5.parent))
    argv = [str(results_h5) if a == "{h5}" else a for a in argv]
    code, out, err = run(capsys, *argv)
    assert code == 2, (out, err)
    assert "empty" in one_line_error(err)
    assert sorted(os.listdir(results_h5.parent)) == before


# ----------------------------------------------------------------------------- 4. decode refuses what is not a trace

@pytest.mark.parametrize("source", ["binary", "readme"])
def test_decode_refuses_files_that_are_not_traces(tmp_path, capsys, source):
    path = tmp_path / ("ls" if source == "binary" else "README.md")
    shutil.copyfile(os.path.realpath(sys.executable) if source == "binary" else ROOT / "README.md", path)
    start = time.process_time()
    code, out, err = run(capsys, "decode", path)
    assert code == 2 and out == "", err[-500:]
    assert "not a trace" in one_line_error(err)
    assert time.process_time() - start < 5           # CPU seconds: refused before any real decoding


def test_decode_refuses_a_thread_file_of_another_run(tmp_path, capsys):
    """Named like a thread file, beside an .info, but its ids are not that run's: refused
    at the first values, not decoded and printed."""
    parlot_run(tmp_path, {0: [1, 2, 0, 0]})
    (tmp_path / "p.1000.1").write_bytes((ROOT / "README.md").read_bytes())
    code, out, err = run(capsys, "decode", tmp_path / "p.1000.1")
    assert code == 2 and out == ""
    line = one_line_error(err)
    assert "p.1000.1" in line and "p.1000.info" in line and "not a trace" in line


def test_decode_needs_the_info_of_its_run(tmp_path, capsys):
    P.write_trace(tmp_path / "p.1000.0", [1, 0])
    code, out, err = run(capsys, "decode", tmp_path / "p.1000.0")
    assert code == 2 and out == "" and "p.1000.info" in one_line_error(err)


def test_decode_of_a_damaged_trace_prints_its_good_part(tmp_path, capsys):
    """Unknown ids after a good start: the good part, and the note the analyzer gives."""
    good = [1, 2, 0, 3, 0] * 20
    parlot_run(tmp_path, {0: good + [9, 0, 0]})
    code, out, err = run(capsys, "decode", tmp_path / "p.1000.0")
    assert code == 0, err
    assert out.split() == list(map(str, good))
    assert "function id 9" in err and "cut" in err


# ----------------------------------------------------------------------------- 5. unnamed ids: cut, with a note

def test_thread_with_unnamed_ids_is_read_as_cut_at_the_last_good_event(tmp_path):
    full = [1, 2, 0, 3, 0, 3, 0, 4, 0, 0]
    for rank in (0, 1):
        parlot_run(tmp_path / "normal", {0: full}, pid=1000 + rank, rank=str(rank))
        parlot_run(tmp_path / "faulty", {0: full}, pid=1000 + rank, rank=str(rank))
    # rank 1's process was killed after writing its data and before naming id 6 in its .info
    P.write_trace(tmp_path / "faulty" / "p.1001.0", full[:5] + [6, 0, 0])
    t = readers.load_run(tmp_path / "faulty").traces[1]
    assert labels(t) == ["main", "MPI_Init", "<", "MPI_Send", "<"] and not t.complete
    note = next(n for n in t.notes if "function id 6" in n)
    assert "p.1001.0" in note and "p.1001.info" in note and "cut" in note and "byte" in note
    import difftrace_mpi
    res = difftrace_mpi.analyze(tmp_path / "normal", tmp_path / "faulty", filters=["11.every"],
                                attributes=["sing.noFreq"], linkage=["ward"])
    assert any("function id 6" in n for n in res.notes)
    assert res.verdict["culprits"] and res.verdict["culprits"][0]["rank"] == 1


def test_unnamed_id_first_gives_an_empty_cut_trace(tmp_path):
    parlot_run(tmp_path, {0: [7, 0]})
    t = readers.load_run(tmp_path).traces[0]
    assert len(t.events) == 0 and not t.complete and any("function id 7" in n for n in t.notes)


SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* rename() that kills the process (SIGKILL, as mpiexec ends the other ranks) just before
   the .info naming SHIM_KILL_MARKER is published: whatever the tracer wrote before it is
   what a killed job leaves. */
int rename(const char *from, const char *to)
{
    static int (*real)(const char *, const char *);
    if (!real)
        real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    const char *marker = getenv("SHIM_KILL_MARKER");
    size_t n = strlen(to);
    if (marker && n > 5 && strcmp(to + n - 5, ".info") == 0) {
        static char buf[1 << 16];
        int fd = open(from, O_RDONLY);
        if (fd >= 0) {
            ssize_t k = read(fd, buf, sizeof buf - 1);
            close(fd);
            if (k > 0) {
                buf[k] = 0;
                if (strstr(buf, marker))
                    raise(SIGKILL);
            }
        }
    }
    return real(from, to);
}
"""

LATE_NAMES = r"""
#include <stdio.h>
__attribute__((noinline)) void early_function(void) { puts("early"); }
__attribute__((noinline)) void late_marker_function(void) { puts("late"); }
int main(void) { early_function(); late_marker_function(); return 0; }
"""


@pytest.mark.integration
def test_tracer_names_ids_before_the_data_that_uses_them(tmp_path):
    """parlot_sync_all (at exit, on a fatal signal, at MPI_Abort) wrote the thread data
    before the .info naming its new ids: a process killed in between left a thread file
    with ids its .info does not name.  Killed at that point, the files now agree."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    if not compiler or not shutil.which("make"):
        pytest.skip("no C compiler or make: the tracer cannot be built here")
    subprocess.run(["make", "-s", "-C", str(ROOT / "pin")], check=True, capture_output=True)
    shim, prog = tmp_path / "killrename.so", tmp_path / "late"
    (tmp_path / "shim.c").write_text(SHIM)
    (tmp_path / "late.c").write_text(LATE_NAMES)
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", shim, tmp_path / "shim.c", "-ldl"], check=True)
    subprocess.run([compiler, "-O1", "-g", "-finstrument-functions", "-o", prog, tmp_path / "late.c"], check=True)
    out = tmp_path / "run"
    env = dict(os.environ, LD_PRELOAD=str(shim), SHIM_KILL_MARKER="late_marker_function",
               PARLOT_FLUSH_MS="0")           # no background flusher: the exit's sync writes both
    res = subprocess.run([ROOT / "pin" / "parlot-run", "-q", "-d", out, prog], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == -signal.SIGKILL, (res.returncode, res.stderr[-2000:])
    infos = list(out.glob("*.info"))
    assert len(infos) == 1
    names = P.read_info(infos[0])
    assert "late_marker_function" not in list(names)       # killed before it was named
    for thread in out.glob(infos[0].name[: -len("info")] + "[0-9]*"):
        values, _ = P.decode_file(thread)
        assert values.size == 0 or int(values.max()) < len(names), \
            f"{thread.name} uses id {int(values.max())}; {infos[0].name} names 0..{len(names) - 1}"


# ----------------------------------------------------------------------------- 6. .end integers beyond int64

@pytest.mark.parametrize("line", ["code=" + "9" * 30, "time_ns=-" + "9" * 30, "mpi_calls=9223372036854775808",
                                  "thread=-9223372036854775809"])
def test_end_integers_beyond_int64_are_a_note(line):
    with pytest.raises(ValueError, match="out of range"):
        P.parse_end(f"how=exit\n{line}\n")
    assert P.parse_end("how=exit\ncode=-9223372036854775808\ntime_ns=9223372036854775807\n") == \
        {"how": "exit", "code": -2 ** 63, "time_ns": 2 ** 63 - 1}


def test_end_record_beyond_int64_is_stored(tmp_path):
    import difftrace_mpi
    for rank in (0, 1):
        for run_dir in ("normal", "faulty"):
            info = parlot_run(tmp_path / run_dir, {0: [1, 2, 0, 3, 0, 4, 0, 0]}, pid=1000 + rank, rank=str(rank))
            P.write_end(P.end_path_for(info), {"how": "finalized", "code": 0})
    Path(P.end_path_for(tmp_path / "faulty" / "p.1001.info")).write_text("how=exit\ncode=" + "9" * 30 + "\n")
    out = tmp_path / "r.h5"
    res = difftrace_mpi.analyze(tmp_path / "normal", tmp_path / "faulty", out=out, lattices=False)
    assert any("p.1001.end" in n and "out of range" in n for n in res.notes), res.notes
    with difftrace_mpi.load(out) as back:
        assert back.verdict == res.verdict


# ----------------------------------------------------------------------------- 7. a memory budget of 400 digits

def test_parse_size_of_a_huge_number_is_one_error():
    for text in ("9" * 400, "9" * 400 + "G", "9" * 30 + ".5T", "16E"):
        with pytest.raises(DiffTraceError, match="memory budget"):
            budget.parse_size(text)
    assert budget.parse_size("1.5G") == 3 << 29 and budget.parse_size(str(2 ** 62)) == 2 ** 62


def test_memory_budget_option_of_400_digits(capsys, no_analysis):
    code, out, err = run(capsys, "analyze", NORMAL, FAULTY, "--memory-budget", "9" * 400)
    assert code == 2 and "memory budget" in one_line_error(err)


def test_memory_budget_variable_of_400_digits(capsys, monkeypatch):
    monkeypatch.setenv("DIFFTRACE_MEMORY_BUDGET", "9" * 400)
    code, out, err = run(capsys, "analyze", NORMAL, FAULTY, *SMALL_GRID)
    assert code == 2 and "DIFFTRACE_MEMORY_BUDGET" in one_line_error(err)


@pytest.mark.integration
@pytest.mark.parametrize("how", ["option", "variable"])
def test_memory_budget_of_400_digits_under_mpiexec(how):
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1")
    cmd = [mpiexec, "-n", "2", sys.executable, "-m", "difftrace_mpi", "analyze", str(NORMAL), str(FAULTY)]
    if how == "option":
        cmd += ["--memory-budget", "9" * 400]
    else:
        env["DIFFTRACE_MEMORY_BUDGET"] = "9" * 400
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr[-2000:]
    assert len([line for line in res.stderr.splitlines() if "error:" in line]) == 1, res.stderr[-2000:]


# ----------------------------------------------------------------------------- 8. SLURM_NTASKS_PER_NODE=²

@pytest.mark.parametrize("value", ["\u00b2", "\u0663", "4(x2)", "0", "", "99999999999999999999999"])
def test_launcher_process_counts_that_are_not_ascii_numbers(monkeypatch, value):
    for var in budget._LOCAL_SIZE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("DIFFTRACE_MEMORY_BUDGET", raising=False)
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", value)
    expected = 4 if value == "4(x2)" else 1
    assert budget._processes_on_this_node() == expected
    budget.set_memory_budget(None)
    budget.memory_budget()               # no ValueError


# ----------------------------------------------------------------------------- 9. a results file that is a link loop

@pytest.mark.parametrize("command", [["report"], ["lattice"], ["diffnlr", "--rank", "5"]])
def test_results_file_in_a_link_loop(tmp_path, capsys, command):
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    a.symlink_to(b)
    b.symlink_to(a)
    code, out, err = run(capsys, command[0], a, *command[1:])
    assert code == 2 and "symbolic link" in one_line_error(err) and "a.h5" in err


def test_load_of_a_link_loop_is_one_error(tmp_path):
    import difftrace_mpi
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(DiffTraceError, match="symbolic link"):
        difftrace_mpi.load(a)


# ----------------------------------------------------------------------------- 10. huge dataset shapes

def _with_huge(results_h5, tmp_path, dataset, dtype):
    path = tmp_path / "huge.h5"
    shutil.copyfile(results_h5, path)
    with h5py.File(path, "a") as f:
        del f[dataset]
        f.create_dataset(dataset, shape=(2 ** 40,), dtype=dtype)      # declared, never written: no bytes
    assert path.stat().st_size < 10 * results_h5.stat().st_size
    return path


@pytest.mark.parametrize("dataset, dtype", [("objects/rank", np.int64), ("names", h5py.string_dtype("utf-8"))])
def test_load_of_huge_declared_shapes_is_a_diff_trace_error(results_h5, tmp_path, dataset, dtype):
    import difftrace_mpi
    path = _with_huge(results_h5, tmp_path, dataset, dtype)
    with pytest.raises(DiffTraceError, match=dataset.split("/")[-1]):
        difftrace_mpi.load(path)


def test_lazy_field_of_a_huge_declared_shape_is_a_diff_trace_error(results_h5, tmp_path):
    import difftrace_mpi
    with h5py.File(results_h5, "r") as f:
        lazy = [name for name in _datasets(f) if name.endswith("thread/jsm_normal")][0]
    path = _with_huge(results_h5, tmp_path, lazy, np.float64)
    combo, aname = lazy.split("/")[1], lazy.split("/")[3]
    try:
        r = difftrace_mpi.load(path)
    except DiffTraceError as exc:          # refused at once: as good
        assert "jsm_normal" in str(exc)
        return
    with r, pytest.raises(DiffTraceError, match="jsm_normal"):
        r.combos[combo].attrs[aname].level("thread").normal


def _datasets(f, prefix=""):
    """Every dataset's every name (visititems gives a hard-linked one under one name only)."""
    out = []
    for name, obj in f.items():
        if isinstance(obj, h5py.Dataset):
            out.append(prefix + name)
        else:
            out += _datasets(obj, prefix + name + "/")
    return out


# ----------------------------------------------------------------------------- 11. the layout version as text

def test_layout_version_stored_as_text(results_h5, tmp_path):
    path = tmp_path / "v.h5"
    shutil.copyfile(results_h5, path)
    with h5py.File(path, "a") as f:
        f.attrs["format_version"] = str(store.FORMAT_VERSION)
    with pytest.raises(DiffTraceError) as e:
        store.read(path)
    message = str(e.value)
    assert f"layout {store.FORMAT_VERSION}; this version reads layout {store.FORMAT_VERSION}" not in message
    assert repr(str(store.FORMAT_VERSION)) in message and "v.h5" in message


# ----------------------------------------------------------------------------- 12. bombs under a process limit; big ranks

BOMB_UNDER_3G = r"""
import resource, sys, time
sys.path.insert(0, sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
from difftrace_mpi import cli
code = cli.main(["decode", sys.argv[2]])
sys.stderr.write("cpu %.2f\n" % time.process_time())
sys.exit(code)
"""


@pytest.mark.integration
def test_bomb_over_the_cap_under_a_process_limit_names_the_limit(tmp_path):
    """2.1e9 values (over the 2^30 cap) under `ulimit -v 3G` and the default budget (half
    of the machine's available memory, over the limit): the message names the process's
    limit, and the decoder stops at what the limit holds instead of decoding 2^30 values."""
    parlot_run(tmp_path, {0: [1, 0]})
    bomb = tmp_path / "p.1000.0"
    bomb.write_bytes(_bomb_bytes(16000))
    env = {k: v for k, v in os.environ.items() if k != "DIFFTRACE_MEMORY_BUDGET"}
    res = subprocess.run([sys.executable, "-c", BOMB_UNDER_3G, str(ROOT), str(bomb)], capture_output=True, text=True,
                         timeout=600, env=env)
    lines = res.stderr.splitlines()
    assert res.returncode == 2 and len(lines) == 2, res.stderr[-2000:]
    message = lines[0]
    assert "p.1000.0" in message and "address-space limit" in message and "3.0 GiB" in message, message
    assert "memory budget" in message                   # how to stop earlier
    cpu = float(lines[1].split()[1])
    assert cpu < 20, f"{cpu} CPU seconds"              # (the old code decoded 2^30 values first)


def test_bomb_over_the_cap_names_the_cap(tmp_path):
    data = _bomb_bytes(40)          # 5.2 M values
    budget.set_memory_budget(1 << 40)
    with pytest.raises(TraceFormatError, match=r"more than 1048576 values \(the most a thread file may hold"):
        P.decode_bytes(data, max_values=1 << 20, path="b.0")


def test_rank_sidecar_up_to_2_63_minus_1(tmp_path):
    parlot_run(tmp_path / "a", {0: [1, 0]}, rank=str(2 ** 63 - 1))
    assert readers.discover_run(tmp_path / "a").refs[0].rank == 2 ** 63 - 1
    for too_big in (str(2 ** 63), "9" * 25):
        parlot_run(tmp_path / too_big, {0: [1, 0]}, rank=too_big)
        with pytest.raises(TraceFormatError, match=r"rank .* out of range \(ranks are below 2\^63\)"):
            readers.discover_run(tmp_path / too_big)


# ----------------------------------------------------------------------------- 13. the interrupted line when a non-root rank goes first



@pytest.mark.integration
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_interrupt_of_a_non_root_rank_says_interrupted_once(tmp_path, sig):
    from test_guarantees import _finish, _mpiexec, _session_left, interrupt_in_step
    # a non-root rank is interrupted; the root waits in the step's collective
    cmd = [_mpiexec(), "-n", "2", sys.executable, "-c", interrupt_in_step(1, sig, "time.sleep(60)"), str(NORMAL),
           str(FAULTY), "--out", str(tmp_path / "r.h5")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1"), start_new_session=True)
    code, out, err = _finish(proc, 120)
    assert code not in ("hang", 0), (code, err)
    assert err.count("difftrace_mpi: interrupted") == 1, err
    assert "Traceback" not in err
    time.sleep(0.5)
    assert not _session_left(proc.pid)



@pytest.mark.parametrize("kind", ["pipe", "socket"])
def test_a_rank_ending_the_job_first_waits_until_its_launcher_has_read_its_line(kind):
    """MPI Abort makes the launcher tear the job down; a line still unread in the rank's
    stderr then is lost (the test above once saw stderr empty).  ``wait_read`` returns
    once the other end has taken every byte, and not before."""
    import socket
    import threading
    from difftrace_mpi.engine.choreography import wait_read
    if kind == "pipe":
        read_end, write_end = os.pipe()
        ends, take = (read_end, write_end), (lambda: os.read(read_end, 100))
    else:
        a, b = socket.socketpair()
        read_end, write_end = a.fileno(), b.fileno()
        ends, take = (a, b), (lambda: a.recv(100))
    try:
        line = b"difftrace_mpi: interrupted\n"
        os.write(write_end, line)
        assert not wait_read(write_end, limit_s=0.05)      # nobody has read it yet
        got = []
        reader = threading.Timer(0.3, lambda: got.append(take()))
        start = time.monotonic()
        reader.start()
        assert wait_read(write_end, limit_s=10)
        waited = time.monotonic() - start
        reader.join()
        assert got == [line] and waited >= 0.25
    finally:
        for end in ends:
            end.close() if hasattr(end, "close") else os.close(end)


def test_a_rank_writing_to_a_file_does_not_wait(tmp_path):
    from difftrace_mpi.engine.choreography import wait_read
    with open(tmp_path / "err", "wb") as f:
        f.write(b"difftrace_mpi: interrupted\n")
        f.flush()
        f.seek(0)           # bytes "left" past the position must not count as unread
        start = time.monotonic()
        assert wait_read(f.fileno(), limit_s=5)
        assert time.monotonic() - start < 1

# ----------------------------------------------------------------------------- 14. --no-arguments and cut annotations

def test_plain_name_strips_cut_annotations():
    from difftrace_mpi.model import plain_name
    assert plain_name("MPI_Recv[count=3,type=MPI_INT,src=+1,tag=") == "MPI_Recv"
    assert plain_name("MPI_Recv[count=3,type=MPI_INT,src=+1,tag=7]") == "MPI_Recv"
    assert plain_name("PMPI_Send[") == "PMPI_Send"
    assert plain_name("MPI_Send") == "MPI_Send"
    # only the tracer's annotations: other names keep their brackets
    assert plain_name("operator[](unsigned long)") == "operator[](unsigned long)"
    assert plain_name("std::array<int, 3>::operator[]") == "std::array<int, 3>::operator[]"
    assert plain_name("foo[bar]") == "foo[bar]"


def test_no_arguments_leaves_no_cut_annotation(tmp_path, capsys):
    for run_dir, tag in (("normal", "7]"), ("faulty", "")):
        d = tmp_path / run_dir
        d.mkdir()
        for rank in (0, 1):
            recv = "MPI_Recv[count=3,type=MPI_INT,src=+1," + ("tag=" + tag if rank == 1 else "tag=7]")
            (d / f"r{rank}.t0.txt").write_text("\n".join(["main", "MPI_Init", recv, "MPI_Finalize"]) + "\n")
    code, out, err = run(capsys, "analyze", tmp_path / "normal", tmp_path / "faulty", "--no-arguments", "--json",
                         *SMALL_GRID)
    assert code == 0, err
    assert "MPI_Recv[" not in out


# ----------------------------------------------------------------------------- 15. cgroup memory limits

def _fake_root(tmp_path, files):
    root = tmp_path / "root"
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


MEMINFO = "MemTotal:       16000000 kB\nMemFree:  1000 kB\nMemAvailable:    8000000 kB\n"     # 8,192,000,000 bytes


def test_cgroup_v2_limit_of_the_process_path(tmp_path):
    root = _fake_root(tmp_path, {
        "proc/meminfo": MEMINFO,
        "proc/self/cgroup": "0::/slurm/uid_0/job_7/step_0\n",
        "sys/fs/cgroup/memory.max": "max\n",
        "sys/fs/cgroup/slurm/uid_0/job_7/memory.max": str(2 << 30) + "\n",
        "sys/fs/cgroup/slurm/uid_0/job_7/memory.current": str(600 << 20) + "\n",
        "sys/fs/cgroup/slurm/uid_0/job_7/memory.stat": f"anon 1\ninactive_file {100 << 20}\n",
        "sys/fs/cgroup/slurm/uid_0/job_7/step_0/memory.max": "max\n",
        "sys/fs/cgroup/slurm/uid_0/job_7/step_0/memory.current": str(300 << 20) + "\n",
    })
    limit = budget.cgroup_available(root)
    assert limit == (2 << 30) - (600 << 20) + (100 << 20)       # the tightest level: the job's
    assert budget.available_memory(root) == limit
    # the tighter of the two: the machine's available memory when it is less
    root2 = _fake_root(tmp_path / "b", {"proc/meminfo": "MemAvailable: 1000 kB\n", "proc/self/cgroup": "0::/\n",
                                        "sys/fs/cgroup/memory.max": str(2 << 30) + "\n"})
    assert budget.available_memory(root2) == 1000 * 1024


def test_cgroup_v2_in_a_namespace_reads_the_root_files(tmp_path):
    root = _fake_root(tmp_path, {"proc/meminfo": MEMINFO, "proc/self/cgroup": "0::/\n",
                                 "sys/fs/cgroup/memory.max": str(1 << 30) + "\n",
                                 "sys/fs/cgroup/memory.current": str(1 << 28) + "\n"})
    assert budget.available_memory(root) == (1 << 30) - (1 << 28)


def test_cgroup_v1_limit(tmp_path):
    root = _fake_root(tmp_path, {
        "proc/meminfo": MEMINFO,
        "proc/self/cgroup": "12:pids:/x\n5:memory:/slurm/uid_0/job_9\n1:name=systemd:/y\n",
        "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",     # v1's "unlimited"
        "sys/fs/cgroup/memory/slurm/uid_0/job_9/memory.limit_in_bytes": str(3 << 30) + "\n",
        "sys/fs/cgroup/memory/slurm/uid_0/job_9/memory.usage_in_bytes": str(1 << 30) + "\n",
        "sys/fs/cgroup/memory/slurm/uid_0/job_9/memory.stat": f"cache 5\ntotal_inactive_file {1 << 29}\n",
    })
    assert budget.cgroup_available(root) == (3 << 30) - (1 << 30) + (1 << 29)


def test_cgroup_v1_root_file_without_a_process_path(tmp_path):
    root = _fake_root(tmp_path, {"proc/meminfo": MEMINFO,
                                 "sys/fs/cgroup/memory/memory.limit_in_bytes": str(1 << 30) + "\n"})
    assert budget.cgroup_available(root) == 1 << 30


def test_no_cgroup_limit_is_the_machines_memory(tmp_path):
    for files in ({"proc/meminfo": MEMINFO},
                  {"proc/meminfo": MEMINFO, "proc/self/cgroup": "0::/a\n", "sys/fs/cgroup/memory.max": "max\n",
                   "sys/fs/cgroup/a/memory.max": "max\n"},
                  {"proc/meminfo": MEMINFO, "proc/self/cgroup": "0::/a\n", "sys/fs/cgroup/a/memory.max": "garbage\n"}):
        root = _fake_root(tmp_path / str(len(files)), files)
        assert budget.cgroup_available(root) is None
        assert budget.available_memory(root) == 8_000_000 * 1024


def test_default_budget_uses_the_cgroup_limit(tmp_path, monkeypatch):
    root = _fake_root(tmp_path, {"proc/meminfo": MEMINFO, "proc/self/cgroup": "0::/\n",
                                 "sys/fs/cgroup/memory.max": str(1 << 30) + "\n"})
    monkeypatch.delenv("DIFFTRACE_MEMORY_BUDGET", raising=False)
    for var in budget._LOCAL_SIZE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(budget, "SYSTEM_ROOT", str(root))
    budget.set_memory_budget(None)
    assert budget.memory_budget() - budget.process_rss() <= (1 << 29) + (1 << 20)
    assert "cgroup" in budget.budget_source()


# ----------------------------------------------------------------------------- 16. the README's test command on a fresh machine

def test_skip_reasons_are_shown_by_the_readme_command(pytestconfig):
    """`pytest tests -q` (the README's command) lists every skipped test with its reason."""
    assert "s" in pytestconfig.option.reportchars or "a" in pytestconfig.option.reportchars \
        or "A" in pytestconfig.option.reportchars
