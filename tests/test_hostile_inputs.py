"""Hostile inputs (issue 13): files that are not traces, compression bombs under a memory
budget, FIFOs and broken links in every format, crafted quadratic inputs, damaged ParLOT
streams, and a seeded fuzz of every reader's real files.

Everything here is seeded and reproducible, and bounded by its work (case counts, sizes),
not by the time a machine takes: CPU seconds where a test bounds a cost, and child
processes' timeouts only as a guard against a hang.  Tests
that could hang on a FIFO run the reader in a thread and, if it is still blocked after a
few seconds, unblock it (open and close the FIFO's other end) and fail.
"""
import io
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import HAVE_OTF2, ROOT, SHARED_DATA, emit_events, labels, needs_otf2, otf2
from difftrace_mpi import cli, h5tables, readers
from difftrace_mpi.errors import DiffTraceError, TraceFormatError
from difftrace_mpi.readers import budget, otf2 as O, parlot as P, text as T, uftrace as U, uftrace_meta
from difftrace_mpi.kernels import parlot as K

EXAMPLES = ROOT / "examples" / "traces"
# Tests bound their work (seeded case counts, sizes); a child process's timeout only
# catches a hang, so it is far above what a loaded machine takes.
HANG_GUARD_S = 1200


# ----------------------------------------------------------------------------- helpers

@pytest.fixture(autouse=True)
def _fresh_caches():
    uftrace_meta._cached_dir.cache_clear()
    O._cached_defs.cache_clear()
    budget.set_memory_budget(None)
    yield
    budget.set_memory_budget(None)
    uftrace_meta._cached_dir.cache_clear()
    O._cached_defs.cache_clear()


def no_hang(fn, fifos=(), seconds=5):
    """fn() run in a thread; fails (after unblocking it) when it is still running after
    ``seconds`` -- a reader blocked opening or reading a FIFO.  Returns fn's result, or
    the exception it raised."""
    box = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as e:          # noqa: BLE001 - handed to the test
            box["error"] = e
    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(seconds)
    if th.is_alive():
        for f in fifos:                     # give the blocked reader a writer, then EOF
            for _ in range(3):
                try:
                    fd = os.open(f, os.O_WRONLY | os.O_NONBLOCK)
                    os.close(fd)
                except OSError:
                    pass
                time.sleep(0.05)
        th.join(5)
        pytest.fail(f"reading blocked for more than {seconds} s (on a FIFO?)")
    return box.get("error", box.get("result"))


def parlot_run(d, traces, pid=1000, names=("main", "MPI_Init", "MPI_Send", "MPI_Finalize"), rank=None):
    """A one-process ParLOT run: {tid: values}; returns the info path."""
    d.mkdir(parents=True, exist_ok=True)
    info = d / f"p.{pid}.info"
    P.write_info(info, list(names))
    for tid, values in traces.items():
        P.write_trace(d / f"p.{pid}.{tid}", values)
    if rank is not None:
        (d / f"p.{pid}.rank").write_text(rank)
    return info


# uftrace data directories, made here byte by byte (no uftrace needed): one process
# (pid 100), one module /bin/prog mapped at 0x400000 whose symbols are f0, f1, ...
UF_BASE = 0x400000


def uf_word(kind, depth, addr, more=0):
    return kind | (more << 2) | (U.RECORD_MAGIC << 3) | (depth << 6) | (addr << 16)


def uf_records(seq):
    """[(kind, depth, function number)] -> bytes of a <tid>.dat."""
    kind, depth, fn = (np.asarray(c, dtype=np.uint64) for c in zip(*seq)) if seq else [np.zeros(0, np.uint64)] * 3
    rec = np.empty((kind.size, 2), dtype="<u8")
    rec[:, 0] = 1000 + 10 * np.arange(kind.size, dtype=np.uint64)
    rec[:, 1] = kind | np.uint64(U.RECORD_MAGIC << 3) | (depth << np.uint64(6)) | \
        ((UF_BASE + 0x100 + 0x10 * fn) << np.uint64(16))
    return rec.tobytes()


def uf_calls(depths_of_calls):
    """Well-nested records: ((function number, [children]) ...) at depth 0."""
    seq = []

    def walk(node, depth):
        fn, kids = node
        seq.append((U.ENTRY, depth, fn))
        for k in kids:
            walk(k, depth + 1)
        seq.append((U.EXIT, depth, fn))
    for n in depths_of_calls:
        walk(n, 0)
    return seq


def uftrace_dir(d, dats, nfuncs=8):
    """A uftrace data directory: info, task.txt, sid map, prog.sym and {tid: bytes} .dat."""
    d.mkdir(parents=True, exist_ok=True)
    header = uftrace_meta.MAGIC + struct.pack("<IHBBQ", 4, 40, 1, 2, 1 << 5) + b"\0" * 16
    (d / "info").write_bytes(header + b"exename:/bin/prog\ncmdline:prog\n")
    tasks = ['SESS timestamp=0.0 pid=100 sid=0123abcd exename="/bin/prog"']
    tasks += [f"TASK timestamp=0.0 tid={tid} pid=100" for tid in dats]
    (d / "task.txt").write_text("\n".join(tasks) + "\n")
    (d / "sid-0123abcd.map").write_text(f"{UF_BASE:x}-{UF_BASE + 0x1000:x} r-xp 00000000 08:01 1 /bin/prog\n")
    (d / "prog.sym").write_text("".join(f"{0x100 + 0x10 * i:016x} T f{i}\n" for i in range(nfuncs)))
    for tid, data in dats.items():
        (d / f"{tid}.dat").write_bytes(data)
    return d


UF_SEQ = uf_calls([(0, [(1, [(2, [])]), (1, [(2, []), (3, [])])]), (4, [(5, [])])])


def otf2_archive(path, per_location, resolution=1_000_000):
    """An OTF2 archive, one rank per entry of ``per_location`` ([labels], "<" leaves)."""
    with otf2.writer.open(str(path), timer_resolution=resolution) as tr:
        node = tr.definitions.system_tree_node("node")
        regions = {}
        t = 1000
        for r, events in enumerate(per_location):
            group = tr.definitions.location_group(f"MPI Rank {r}", system_tree_parent=node)
            loc = tr.definitions.location("Master thread", group=group)
            emit_events(tr, tr.event_writer_from_location(loc), regions,
                        [(e, t + 5 * i) for i, e in enumerate(events)])
            t += 5 * len(events)
    return Path(path) / "traces.otf2"


OTF2_EVENTS = ["main", "MPI_Init", "<", "MPI_Send", "<", "MPI_Finalize", "<", "<"]


@pytest.fixture
def archive(tmp_path):
    if not HAVE_OTF2:
        pytest.skip("otf2 package not installed (pip install otf2)")
    return otf2_archive(tmp_path / "otf", [OTF2_EVENTS, OTF2_EVENTS])


# ----------------------------------------------------------------------------- item 17, 26: .rank and .info

@pytest.mark.parametrize("text", ["1_0", "\u0661", "+1", "1 0", "0x1", ""])
def test_rank_sidecar_holds_ascii_digits_only(tmp_path, text):
    parlot_run(tmp_path, {0: [1, 0]}, rank=text)
    with pytest.raises(TraceFormatError, match=r"p\.1000\.rank: rank file does not hold"):
        readers.discover_run(tmp_path)


def test_rank_sidecar_with_spaces_around_is_read(tmp_path):
    parlot_run(tmp_path, {0: [1, 0]}, rank=" 7\n")
    assert readers.discover_run(tmp_path).refs[0].rank == 7


def test_fifo_rank_sidecar_is_named_a_fifo(tmp_path):
    parlot_run(tmp_path, {0: [1, 0]}, pid=1000, rank="0")
    parlot_run(tmp_path, {0: [1, 0]}, pid=1001)
    os.mkfifo(tmp_path / "p.1001.rank")
    err = no_hang(lambda: readers.discover_run(tmp_path), [tmp_path / "p.1001.rank"])
    assert isinstance(err, TraceFormatError), err
    assert "FIFO" in str(err) and "missing" not in str(err)


def test_info_starting_with_a_bom_is_read(tmp_path):
    info = parlot_run(tmp_path, {0: [1, 2, 0, 0]})
    info.write_bytes(b"\xef\xbb\xbf" + info.read_bytes())
    t = readers.load_run(tmp_path).traces[0]
    assert labels(t) == ["main", "MPI_Init", "<", "<"]


def test_unknown_function_id_is_reported_by_byte_offset(tmp_path):
    """An id the .info does not name cuts the trace there (issue 22, item 5: a killed tracer
    can leave one), with a note naming the id, the value and the byte."""
    parlot_run(tmp_path, {0: [1, 2, 0] * 50 + [1, 77, 0, 0]})
    t = readers.load_run(tmp_path).traces[0]
    assert len(t.events) == 151 and not t.complete
    note = next(n for n in t.notes if "function id 77" in n)
    assert note.startswith("p.1000.0: function id 77 (value 151, byte ")
    offset = int(note.split("byte ")[1].split(")")[0])
    data = (tmp_path / "p.1000.0").read_bytes()
    assert 0 < offset < len(data)
    # the byte named is where the group holding the bad value starts: cutting the file
    # there loses that value, keeping the byte does not help decode past it
    values, _, _, _ = K.decode(data[:offset] + b"\x00", 1 << 20)
    assert 77 not in values.tolist()


# ----------------------------------------------------------------------------- item 16: a routine named <return>

def test_routine_named_return_in_info_is_refused(tmp_path):
    info = parlot_run(tmp_path, {0: [1, 2, 0, 0]})
    info.write_text("+\nmain\nmain\n<return>\n")
    with pytest.raises(TraceFormatError, match=r"line 4: .*'<return>' is reserved"):
        readers.load_run(tmp_path)


@needs_otf2
def test_region_named_return_in_otf2_is_refused(tmp_path):
    anchor = otf2_archive(tmp_path / "otf", [["main", "<return>", "<", "<"]])
    err = no_hang(lambda: readers.load_run(anchor.parent))
    assert isinstance(err, TraceFormatError) and "'<return>' is reserved" in str(err), err


def test_symbol_named_return_in_uftrace_is_refused(tmp_path):
    d = uftrace_dir(tmp_path / "ut.0", {100: uf_records(UF_SEQ)})
    (d / "prog.sym").write_text("".join(f"{0x100 + 0x10 * i:016x} T {'<return>' if i == 2 else f'f{i}'}\n"
                                        for i in range(8)))
    with pytest.raises(TraceFormatError, match=r"'<return>' is reserved"):
        readers.load_run(tmp_path)


# ----------------------------------------------------------------------------- items 9, 15: FIFOs and broken links

def test_uftrace_synthetic_dir_reads(tmp_path):
    uftrace_dir(tmp_path / "ut.0", {100: uf_records(UF_SEQ)})
    t = readers.load_run(tmp_path).traces[0]
    assert labels(t) == ["f0", "f1", "f2", "<", "<", "f1", "f2", "<", "f3", "<", "<", "<", "f4", "f5", "<", "<"]


@pytest.mark.parametrize("entry", ["sid-0123abcd.map", "task.txt", "prog.sym", "100.dat", "101.dat"])
@pytest.mark.parametrize("kind", ["fifo", "broken link"])
def test_uftrace_entries_that_are_not_files(tmp_path, entry, kind):
    d = uftrace_dir(tmp_path / "ut.0", {100: uf_records(UF_SEQ), 101: uf_records(UF_SEQ)})
    (d / entry).unlink()
    if kind == "fifo":
        os.mkfifo(d / entry)
    else:
        os.symlink(tmp_path / "nowhere", d / entry)
    err = no_hang(lambda: readers.load_run(tmp_path), [d / entry])
    assert isinstance(err, TraceFormatError), err
    assert entry in str(err) and ("FIFO" in str(err) if kind == "fifo" else "broken symbolic link" in str(err))


@needs_otf2
@pytest.mark.parametrize("entry", ["traces.def", "traces/0.evt", "traces/0.def"])
@pytest.mark.parametrize("kind", ["fifo", "broken link"])
def test_otf2_entries_that_are_not_files(archive, entry, kind):
    target = archive.parent / entry
    if not target.exists() and entry.endswith(".def"):
        pytest.skip(f"the writer made no {entry}")
    target.unlink()
    if kind == "fifo":
        os.mkfifo(target)
    else:
        os.symlink(archive.parent / "nowhere", target)
    err = no_hang(lambda: readers.load_run(archive.parent), [target])
    assert isinstance(err, TraceFormatError), err
    assert Path(entry).name in str(err) and ("FIFO" in str(err) if kind == "fifo"
                                             else "broken symbolic link" in str(err))


# ----------------------------------------------------------------------------- item 7: decode of non-traces

def _decode(capsys, *args):
    code = cli.main(["decode", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_decode_refuses_an_hdf5_file(tmp_path, capsys):
    h5 = tmp_path / "results.h5"
    h5.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(range(256)) * 2000)
    code, out, err = _decode(capsys, h5)
    assert code == 2 and out == ""
    assert "HDF5" in err and "not a trace" in err


def test_decode_refuses_info_and_sidecar_files(tmp_path, capsys):
    info = parlot_run(tmp_path, {0: [1, 0]}, rank="0")
    for path in (info, tmp_path / "p.1000.rank"):
        code, out, err = _decode(capsys, path)
        assert code == 2 and out == "" and "not a trace" in err, (path, err)


def test_decode_streams_its_output(tmp_path, capsys, monkeypatch):
    values = [1, 2, 0, 3, 0, 0] * 40_000
    parlot_run(tmp_path, {0: values})
    writes = []

    class Out(io.StringIO):
        def write(self, s):
            writes.append(len(s))
            return super().write(s)
    out = Out()
    monkeypatch.setattr(sys, "stdout", out)
    assert cli.main(["decode", str(tmp_path / "p.1000.0")]) == 0
    assert out.getvalue().split() == list(map(str, values))
    assert max(writes) < 1 << 20 and len(writes) > 1
    out.truncate(0), out.seek(0), writes.clear()
    assert cli.main(["decode", "--format", "names", str(tmp_path / "p.1000.0")]) == 0
    assert out.getvalue().splitlines()[:4] == ["main", "MPI_Init", "<return>", "MPI_Send"]
    assert max(writes) < 1 << 20


# ----------------------------------------------------------------------------- item 8: memory budget

def _bomb_bytes(groups):
    """A ParLOT stream of value 1 repeated, as ParLOT's encoder writes it: after a short
    start every pair of words is a count of 65535 copies and one more 1, so each ZE group
    of four words (7 bytes) decodes to 131,072 values (~37,000x)."""
    words = [0, 1, 1, 1, 1] + [0xFFFF, 1] * (2 * groups)
    out = bytearray()
    for g in range(0, len(words), 4):
        chunk = words[g:g + 4]
        bm, body = 0, bytearray()
        for k, w in enumerate(chunk):
            for b, byte in enumerate((w & 0xFF, w >> 8)):
                if byte:
                    bm |= 1 << (2 * k + b)
                    body.append(byte)
        out.append(bm)
        out += body
    out.append(len(words) - 4 * ((len(words) - 1) // 4))
    return bytes(out)


def test_bomb_helper_decodes_as_designed():
    values, status, _, _ = K.decode(_bomb_bytes(4), 1 << 24)
    assert status == K.OK and values.size == 4 + 4 * 2 * 65536 and set(values.tolist()) == {1}


def test_parlot_bomb_is_refused_by_the_budget_before_allocating(tmp_path):
    parlot_run(tmp_path, {0: [1, 0]})
    (tmp_path / "p.1000.0").write_bytes(_bomb_bytes(16000))       # 112 KB -> 2.1e9 values (4 GB, 17 GB as events)
    budget.set_memory_budget(budget.process_rss() + (64 << 20))
    before = budget.process_rss()
    t0 = time.process_time()          # CPU seconds, the work done: a loaded machine is only slower
    with pytest.raises(DiffTraceError, match=r"p\.1000\.0.*memory budget of") as e:
        readers.load_run(tmp_path)
    assert "DIFFTRACE_MEMORY_BUDGET" in str(e.value)
    assert time.process_time() - t0 < 5
    assert budget.process_rss() - before < 256 << 20


BUDGET_ACROSS_FILES = """
import sys
sys.path.insert(0, sys.argv[1])
from difftrace_mpi import readers
from difftrace_mpi.errors import DiffTraceError
from difftrace_mpi.readers import budget
budget.set_memory_budget(budget.process_rss() + (150 << 20))
try:
    readers.load_run(sys.argv[2])
except DiffTraceError as exc:
    print(exc)
"""


@pytest.mark.integration
def test_budget_counts_across_files(tmp_path):
    """Each file fits in the budget, not all of them together: the budget is the process's.
    In a fresh process: a long-lived one may hold freed memory that reading reuses without
    its RSS growing (then it rightly stays within the budget)."""
    parlot_run(tmp_path, {tid: [] for tid in range(6)})
    for tid in range(6):
        (tmp_path / f"p.1000.{tid}").write_bytes(_bomb_bytes(80))      # ~10.5M values, 42 MB as int32
    res = subprocess.run([sys.executable, "-c", BUDGET_ACROSS_FILES, str(ROOT), str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert re.search(r"p\.1000\.[2-5].*memory budget", res.stdout), res.stdout


def test_text_trace_over_the_budget(tmp_path):
    (tmp_path / "r0.t0.txt").write_bytes(b"a\n" * 2_000_000)
    budget.set_memory_budget(budget.process_rss() + (32 << 20))
    with pytest.raises(DiffTraceError, match=r"r0\.t0\.txt.*memory budget"):
        readers.load_run(tmp_path)


def test_uftrace_trace_over_the_budget(tmp_path):
    uftrace_dir(tmp_path / "ut.0", {100: uf_records(UF_SEQ) * 20_000})      # 320k records, 5 MB
    budget.set_memory_budget(budget.process_rss() + (8 << 20))
    with pytest.raises(DiffTraceError, match=r"100\.dat.*memory budget"):
        readers.load_run(tmp_path)


@needs_otf2
def test_otf2_location_over_the_budget(tmp_path):
    anchor = otf2_archive(tmp_path / "otf", [["main"] + ["MPI_Send", "<"] * 100_000 + ["<"]])
    budget.set_memory_budget(budget.process_rss() + (4 << 20))
    err = no_hang(lambda: readers.load_run(anchor.parent), seconds=30)
    assert isinstance(err, DiffTraceError) and "memory budget" in str(err), err


def test_budget_from_the_environment_and_sizes(monkeypatch):
    monkeypatch.setenv("DIFFTRACE_MEMORY_BUDGET", "1.5G")
    budget.set_memory_budget(None)
    assert budget.memory_budget() == 3 << 29
    assert budget.parse_size("512M") == 512 << 20 and budget.parse_size("100") == 100
    assert budget.parse_size("2GiB") == 2 << 30
    for bad in ("-1", "0", "lots", "1.5X"):
        with pytest.raises(DiffTraceError):
            budget.parse_size(bad)
    monkeypatch.delenv("DIFFTRACE_MEMORY_BUDGET")
    budget.set_memory_budget(None)
    if os.path.exists("/proc/meminfo"):
        assert budget.memory_budget() > budget.process_rss()


BOMB_UNDER_RLIMIT = r"""
import resource, sys
sys.path.insert(0, sys.argv[1])
limit = int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from difftrace_mpi import cli
sys.exit(cli.main(["decode", sys.argv[2]]))
"""


@pytest.mark.integration
def test_bomb_under_a_memory_limit_gives_one_clear_error(tmp_path):
    """A 112 KB file decoding to 2.1e9 values, under a 1.5 GiB address-space limit and the default
    budget: one error line naming the file, exit 2, no MemoryError, no traceback."""
    parlot_run(tmp_path, {0: [1, 0]})
    bomb = tmp_path / "p.1000.0"
    bomb.write_bytes(_bomb_bytes(16000))
    for budget_set in ("400M", None):           # None: the default budget, above the limit
        env = {k: v for k, v in os.environ.items() if k != "DIFFTRACE_MEMORY_BUDGET"}
        if budget_set:
            env["DIFFTRACE_MEMORY_BUDGET"] = budget_set
        res = subprocess.run([sys.executable, "-c", BOMB_UNDER_RLIMIT, str(ROOT), str(bomb), str(3 << 29)],
                             capture_output=True, text=True, timeout=HANG_GUARD_S, env=env)
        assert res.returncode == 2, res.stderr[-2000:]
        assert "Traceback" not in res.stderr and "MemoryError" not in res.stderr
        assert "p.1000.0" in res.stderr and "memory budget" in res.stderr
        assert res.stdout == "" and len(res.stderr.splitlines()) == 1


# ----------------------------------------------------------------------------- item 19: damaged ParLOT streams

def test_return_with_no_call_open_is_flagged_as_damage_with_its_byte(tmp_path):
    parlot_run(tmp_path, {0: [1, 2, 0, 0] * 40 + [0] + [1, 0]})
    t = readers.load_run(tmp_path).traces[0]
    assert t.complete and len(t.events) == 163                  # kept, not rejected
    note = next(n for n in t.notes if "damaged" in n)
    assert "p.1000.0" in note and "value 160" in note
    byte = int(note.split("at byte ")[1].split()[0])
    assert 0 < byte < (tmp_path / "p.1000.0").stat().st_size


def test_real_parlot_files_have_no_damage_note():
    for run in ("run1", "run2"):
        for t in readers.load_run(SHARED_DATA / run).traces:
            assert not any("damaged" in n for n in t.notes), t.notes


# ----------------------------------------------------------------------------- item 11: crafted quadratic inputs

def test_uftrace_crafted_depths_are_linear(tmp_path):
    """512 calls open at even depths, then 400k exits at an odd depth none of them has:
    each was checked against the whole stack (44 s for 16 MB); now O(1) each."""
    seq = [(U.ENTRY, 2 * k, k % 8) for k in range(512)] + [(U.EXIT, 1, 0)] * 400_000
    uftrace_dir(tmp_path / "ut.0", {100: uf_records(seq)})
    t0 = time.process_time()          # CPU seconds (the old code took 44 s for this)
    t = readers.load_run(tmp_path).traces[0]
    assert time.process_time() - t0 < 4
    assert np.count_nonzero(t.events) == 512
    assert any("400000 exit(s) without a recorded entry dropped" in n for n in t.notes)


@needs_otf2
def test_otf2_unmatched_leaves_are_linear(tmp_path):
    """30k regions open, then 30k Leaves of a region that is not: each searched the stack."""
    with otf2.writer.open(str(tmp_path / "otf"), timer_resolution=1_000_000) as tr:
        group = tr.definitions.location_group("MPI Rank 0", system_tree_parent=tr.definitions.system_tree_node("n"))
        w = tr.event_writer_from_location(tr.definitions.location("Master thread", group=group))
        a, b = tr.definitions.region("a"), tr.definitions.region("b")
        for i in range(30_000):
            w.enter(1000 + i, a)
        for i in range(30_000):
            w.leave(100_000 + i, b)
    t0 = time.process_time()          # CPU seconds, the work done
    t = readers.load_run(tmp_path / "otf").traces[0]
    assert time.process_time() - t0 < 4
    assert len(t.events) == 30_000
    assert any("30000 Leave(s) of regions not open dropped" in n for n in t.notes)


# ----------------------------------------------------------------------------- item 24: OTF2 errors

@needs_otf2
def test_otf2_errors_are_one_line_with_the_library_cause(archive, capfd):
    """The OTF2 library prints 6-9 '[OTF2] src/...' lines on file descriptor 2 for one error,
    and the binding says 'Unknown error code': one line of ours, with the library's cause."""
    data = archive.read_bytes()
    archive.write_bytes(b"garbage" * 10)
    with pytest.raises(TraceFormatError) as e:
        readers.discover_run(archive.parent)
    out, err = capfd.readouterr()
    assert "[OTF2]" not in err and "[OTF2]" not in out
    assert "Unknown error code" not in str(e.value) and "chunk header" in str(e.value)
    archive.write_bytes(data)
    O._cached_defs.cache_clear()
    (archive.parent / "traces" / "0.evt").write_bytes(b"\xff" * 64)
    with pytest.raises(TraceFormatError, match=r"0\.evt: cannot read") as e:
        readers.load_run(archive.parent)
    out, err = capfd.readouterr()
    assert "[OTF2]" not in err and "Unknown error code" not in str(e.value)


# ----------------------------------------------------------------------------- fuzz: seeded byte mutations

def mutate(rng, data):
    """One seeded mutation: a bit flip, a byte set, a cut, a duplicated or deleted span."""
    data = bytearray(data)
    how = rng.randrange(5)
    if not data or how == 2:
        return bytes(data[:rng.randrange(len(data) + 1)])
    i = rng.randrange(len(data))
    if how == 0:
        data[i] ^= 1 << rng.randrange(8)
    elif how == 1:
        data[i] = rng.choice((0, 0xFF, rng.randrange(256)))
    elif how == 3:
        j = min(len(data), i + rng.randrange(1, 64))
        data[i:i] = data[i:j]
    else:
        del data[i:i + rng.randrange(1, 16)]
    return bytes(data)


def expect_result_or_clear_error(read):
    """A Trace/Run, or a DiffTraceError of one line: never another exception."""
    try:
        return read()
    except DiffTraceError as e:
        assert "\n" not in str(e) and str(e), repr(e)
        return None


PARLOT_FILES = sorted(p for p in list(SHARED_DATA.glob("run*/*")) + list(EXAMPLES.glob("*/*/*"))
                      if P.info_name_of(p.name) and (p.parent / P.info_name_of(p.name)).exists())


def test_fuzz_parlot_thread_and_info_files(tmp_path):
    rng = random.Random(1301)
    assert len(PARLOT_FILES) > 20
    budget.set_memory_budget(budget.process_rss() + (256 << 20))     # a bomb ends clearly, and soon
    ok = err = cut = 0
    for k in range(400):
        src = rng.choice(PARLOT_FILES)
        d = tmp_path / f"m{k % 4}"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
        info = src.parent / P.info_name_of(src.name)
        data, names = src.read_bytes(), info.read_bytes()
        if k % 20 == 19:            # the image line every .info starts with
            names = bytes([rng.randrange(256)]) + names[1:]
        elif k % 5 == 4:
            names = mutate(rng, names)
        else:
            for _ in range(rng.choice((1, 1, 2, 8))):
                data = mutate(rng, data)
        (d / src.name).write_bytes(data)
        (d / info.name).write_bytes(names)
        t = expect_result_or_clear_error(lambda: P.read_parlot_thread(d / src.name, d / info.name, 0, 0))
        ok, err = ok + (t is not None), err + (t is None)
        if t is not None:
            assert t.events.dtype == np.int32 and (t.events < len(t.names)).all()
            cut += any("is not named in" in n for n in t.notes)     # read as cut there (issue 22, item 5)
    assert ok and err and cut


TEXT_FILES = sorted(EXAMPLES.glob("oddeven/*/r*.t*.txt"))


def test_fuzz_text_traces(tmp_path):
    rng = random.Random(1302)
    ok = err = 0
    for k in range(300):
        data = rng.choice(TEXT_FILES).read_bytes()
        for _ in range(rng.choice((1, 2, 8))):
            data = mutate(rng, data)
        path = tmp_path / f"r{k}.t0.txt"
        path.write_bytes(data)
        t = expect_result_or_clear_error(lambda: T.read_text_trace(path))
        ok, err = ok + (t is not None), err + (t is None)
        path.unlink()
    assert ok and err


def test_fuzz_uftrace_data_directories(tmp_path):
    rng = random.Random(1303)
    seq = uf_calls([(0, [(1, [(2, [])]), (1, [(2, []), (3, [])])]), (4, [(5, [])])] * 6)
    pristine = uftrace_dir(tmp_path / "pristine" / "ut.0", {100: uf_records(seq), 101: uf_records(seq[:30])})
    files = ["100.dat"] * 6 + ["101.dat", "info", "task.txt", "sid-0123abcd.map", "prog.sym"]
    ok = err = 0
    for k in range(150):
        run = tmp_path / f"m{k % 3}"
        shutil.rmtree(run, ignore_errors=True)
        shutil.copytree(pristine.parent, run)
        name = rng.choice(files)
        target = run / "ut.0" / name
        data = target.read_bytes()
        for _ in range(rng.choice((1, 2, 8))):
            data = mutate(rng, data)
        target.write_bytes(data)
        os.utime(target, ns=(k, k))             # the metadata cache keys on mtime and size
        uftrace_meta._cached_dir.cache_clear()
        r = expect_result_or_clear_error(lambda: readers.load_run(run))
        ok, err = ok + (r is not None), err + (r is None)
    assert ok and err


OTF2_FUZZ = r"""
import random, shutil, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from difftrace_mpi import readers
from difftrace_mpi.errors import DiffTraceError
from difftrace_mpi.readers import otf2 as O
sys.path.insert(0, sys.argv[1] + "/tests")
from test_hostile_inputs import mutate
src, work, seed, count = Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rng = random.Random(seed)
files = sorted(p.relative_to(src) for p in src.rglob("*") if p.is_file())
ok = err = 0
for k in range(count):
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(src, work)
    target = work / rng.choice(files)
    data = target.read_bytes()
    for _ in range(rng.choice((1, 2, 8))):
        data = mutate(rng, data)
    target.write_bytes(data)
    O._cached_defs.cache_clear()
    try:
        readers.load_run(work)
        ok += 1
    except DiffTraceError as e:
        assert "\n" not in str(e), repr(e)
        err += 1
print("done", ok, err)
"""


@needs_otf2
@pytest.mark.integration
def test_fuzz_otf2_archives(archive, tmp_path):
    """In a child process, so that a crash of the C library fails this test only; nothing
    from the library reaches stderr.  The work is bounded (150 seeded cases, about 15 s
    alone); the timeout only catches a hang, it is no speed limit (a loaded 2-core
    machine took over 120 s)."""
    res = subprocess.run([sys.executable, "-c", OTF2_FUZZ, str(ROOT), str(archive.parent),
                          str(tmp_path / "work"), "1304", "150"], capture_output=True, text=True,
                         timeout=HANG_GUARD_S)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "[OTF2]" not in res.stderr and "Traceback" not in res.stderr, res.stderr[-3000:]
    ok, err = map(int, res.stdout.split()[1:3])
    assert ok and err


END_RECORD = (b"how=mpi_error\ncode=1\nsignal=SIGSEGV\nthread=0\ncall=MPI_Send\n"
              b"error=MPI_ERR_TRUNCATE: message truncated\ntime_ns=1712345678901234567\nmpi_calls=42\n")


def test_fuzz_end_records_and_rank_sidecars(tmp_path):
    """Issue 22: the seeded fuzz also mutates .end records and .rank sidecars.  A run reads
    or is one clear error; an end record reads as a dict the results file can store (every
    integer an int64: a crash of the store was item 6) or as None with a note."""
    import h5py
    from difftrace_mpi import store
    rng = random.Random(1305)
    ok = err = noted = 0
    for k in range(300):
        d = tmp_path / f"m{k % 3}"
        shutil.rmtree(d, ignore_errors=True)
        for pid, rank in ((1000, "0\n"), (1001, "1\n")):
            info = parlot_run(d, {0: [1, 2, 0, 3, 0, 0]}, pid=pid, rank=rank)
            Path(P.end_path_for(info)).write_bytes(END_RECORD)
        target = d / rng.choice(("p.1000.end", "p.1001.end", "p.1000.end", "p.1000.rank", "p.1001.rank"))
        data = target.read_bytes()
        for _ in range(rng.choice((1, 1, 2, 8))):
            data = mutate(rng, data)
        target.write_bytes(data)
        run = expect_result_or_clear_error(lambda: readers.load_run(d))
        ok, err = ok + (run is not None), err + (run is None)
        if run is None:
            continue
        rows = []
        for t in run.traces:
            noted += any(".end" in n for n in t.notes)
            if t.ending is not None:
                assert t.ending["how"] in P.END_HOWS
                assert all(-2 ** 63 <= t.ending[key] < 2 ** 63 for key in P.END_INT_KEYS if key in t.ending)
                rows.append(dict(t.ending, run=0, rank=t.rank))
        with h5py.File(io.BytesIO(), "w") as f:           # what the store does with them
            h5tables.write_table(f, "endings", store._ENDING_COLUMNS, rows)
    assert ok and err and noted


RESULTS_FUZZ = r"""
import random, shutil, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[1] + "/tests")
from difftrace_mpi import store
from difftrace_mpi.errors import DiffTraceError
from test_hostile_inputs import mutate
src, work, seed, count = Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rng = random.Random(seed)
pristine = src.read_bytes()
ok = err = 0
for k in range(count):
    data = pristine
    for _ in range(rng.choice((1, 2, 8, 32))):
        data = mutate(rng, data)
    work.write_bytes(data)
    try:
        with store.read(work) as r:          # and every lazy part of it
            r.verdict, r.rows, r.notes, r.endings
            for combo in r.combos.values():
                for setting in combo.attrs.values():
                    for level in ("thread", "process"):
                        lv = setting.level(level)
                        for field in lv.FIELDS:
                            getattr(lv, field, None)
                    for run in (0, 1):
                        lattice = setting.lattice(run)
                        if lattice is not None:
                            lattice.classes()
        ok += 1
    except DiffTraceError as e:
        assert "\n" not in str(e), repr(e)
        err += 1
print("done", ok, err)
"""


@pytest.mark.integration
def test_fuzz_results_files(tmp_path):
    """Issue 22: the seeded fuzz also mutates results files (bit flips, bytes set, cuts,
    duplicated and deleted spans), read back with every lazy part loaded: a results file or
    one clear error, never a traceback, a hang or a crash.  In a child process: the HDF5
    library is C.  Bounded by its case count; the timeout only catches a hang."""
    from difftrace_mpi import api
    results = tmp_path / "r.h5"
    api.analyze(EXAMPLES / "oddeven" / "normal", EXAMPLES / "oddeven" / "swapbug", filters=["11.mpi"],
                attributes=["sing.noFreq"], linkage=["ward"], out=results)
    res = subprocess.run([sys.executable, "-c", RESULTS_FUZZ, str(ROOT), str(results), str(tmp_path / "m.h5"),
                          "1306", "200"], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    ok, err = map(int, res.stdout.split()[1:3])
    assert ok and err


# ----------------------------------------------------------------------------- item 14: cut before the first return

def test_trace_cut_before_its_first_return_keeps_its_open_calls(tmp_path):
    """A ParLOT thread killed inside MPI_Init has entries only: it is not an entry-only
    trace (ParLOT records returns), so its open calls are those entries."""
    from difftrace_mpi.engine.pipeline import analyze
    full = [1, 2, 0, 3, 0, 3, 0, 4, 0, 0]
    for rank in (0, 1):
        parlot_run(tmp_path / "normal", {0: full}, pid=1000 + rank, rank=str(rank))
        parlot_run(tmp_path / "faulty", {0: full}, pid=1000 + rank, rank=str(rank))
    # one whole ZE group (words: count 0, then main, MPI_Init, MPI_Send) and no trailer:
    # what the tracer leaves when the thread is killed in MPI_Send
    (tmp_path / "faulty" / "p.1001.0").write_bytes(b"\x54\x01\x02\x03")
    cut = readers.load_run(tmp_path / "faulty").traces[1]
    assert not cut.complete and labels(cut) == ["main", "MPI_Init", "MPI_Send"]
    res = analyze(tmp_path / "normal", tmp_path / "faulty", lattices=False)
    i = res.objects.index((1, 0)) if isinstance(res.objects, list) else [tuple(o) for o in res.objects].index((1, 0))
    assert res.open_calls[1][i] == "main > MPI_Init > MPI_Send"


def test_text_traces_say_whether_they_record_returns(tmp_path):
    (tmp_path / "r0.t0.txt").write_text("main\nMPI_Init\n")
    (tmp_path / "r1.t0.txt").write_text("> main\n> MPI_Init\n")
    a, b = readers.load_run(tmp_path).traces
    assert not a.returns and b.returns
    parlot_run(tmp_path / "p", {0: [1, 2]})
    assert readers.load_run(tmp_path / "p").traces[0].returns      # every other format records them


@pytest.mark.parametrize("fmt", ["text", "parlot", "uftrace"])
def test_trace_file_replaced_by_a_fifo_after_discovery(tmp_path, fmt):
    """Between discovery and reading (another process at work): an error, not a hang."""
    if fmt == "text":
        (tmp_path / "r0.t0.txt").write_text("main\n")
        victim = tmp_path / "r0.t0.txt"
    elif fmt == "parlot":
        parlot_run(tmp_path, {0: [1, 0]})
        victim = tmp_path / "p.1000.0"
    else:
        uftrace_dir(tmp_path / "ut.0", {100: uf_records(UF_SEQ)})
        victim = tmp_path / "ut.0" / "100.dat"
    ref = readers.discover_run(tmp_path).refs[0]
    victim.unlink()
    os.mkfifo(victim)
    err = no_hang(lambda: readers.load_trace(ref), [victim])
    assert isinstance(err, TraceFormatError) and "FIFO" in str(err), err


def test_memory_error_while_reading_is_one_clear_line(tmp_path, monkeypatch):
    parlot_run(tmp_path, {0: [1, 0]})
    (tmp_path / "r0.t0.txt").write_text("main\n")

    def no_memory(*args, **kwargs):
        raise MemoryError()
    monkeypatch.setattr(K, "decode", no_memory)
    monkeypatch.setattr(K, "decode_checked", no_memory)     # (what the reader of a thread calls)
    with pytest.raises(DiffTraceError, match=r"p\.1000\.0: decoding it needs more memory"):
        P.read_parlot_thread(tmp_path / "p.1000.0", tmp_path / "p.1000.info", 0, 0)
    with pytest.raises(DiffTraceError, match=r"p\.1000\.0: decoding it needs more memory"):
        P.decode_file(tmp_path / "p.1000.0")
    monkeypatch.setattr(T._kernel, "tokenize", no_memory)
    with pytest.raises(DiffTraceError, match=r"r0\.t0\.txt: out of memory reading it"):
        readers.load_file(tmp_path / "r0.t0.txt")


def test_processes_on_one_node_share_the_default_budget(monkeypatch):
    monkeypatch.delenv("DIFFTRACE_MEMORY_BUDGET", raising=False)
    if not os.path.exists("/proc/meminfo"):
        pytest.skip("no /proc/meminfo")
    alone = budget.memory_budget() - budget.process_rss()
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "8")
    budget.set_memory_budget(None)
    shared = budget.memory_budget() - budget.process_rss()
    assert shared < alone / 4


def test_metadata_files_over_the_budget(tmp_path):
    info = parlot_run(tmp_path / "p", {0: [1, 0]})
    info.write_text("+\nmain\n" + "f\n" * 1_000_000)
    d = uftrace_dir(tmp_path / "u" / "ut.0", {100: uf_records(UF_SEQ)})
    (d / "prog.sym").write_text("".join(f"{0x100 + 0x10 * i:016x} T f{i}\n" for i in range(200_000)))
    budget.set_memory_budget(budget.process_rss() + (16 << 20))
    with pytest.raises(DiffTraceError, match=r"p\.1000\.info: reading its names needs .*memory budget"):
        readers.load_run(tmp_path / "p")
    with pytest.raises(DiffTraceError, match=r"prog\.sym: reading its symbol file needs .*memory budget"):
        readers.load_run(tmp_path / "u")
