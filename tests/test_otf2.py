"""The OTF2 reader, on archives written here with the otf2 package's writer.

Score-P is not available here, so the archives are made the way Score-P lays them out:
location groups "MPI Rank <r>" (processes) holding CPU-thread locations, regions named by
strings, Enter/Leave events per location.  Without the otf2 package, reading an archive
must say to install it.
"""
import builtins
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import HAVE_OTF2, ROOT, call, emit_events, labels, needs_otf2, otf2, run_cli
from difftrace_mpi.readers import otf2 as O
from difftrace_mpi import readers
from difftrace_mpi.errors import DiffTraceError, TraceFormatError


def seq_for(rank, thread, faulty=None):
    """A known per-location sequence: nested calls and a loop whose shape depends on where."""
    if thread == 0:
        it = 4 + rank
        body = [call("MPI_Send") + call("MPI_Recv") for _ in range(it)]
        if faulty == (rank, thread):
            body = body[:2] + [call("MPI_Recv") + call("MPI_Send") for _ in range(it - 2)]
        return call("main", call("MPI_Init"), call("solve", *body), call("MPI_Finalize"))
    inner = [call("compute", call("kernel")) for _ in range(thread + 1)]
    if faulty == (rank, thread):
        inner = inner + [call("omp_set_lock")]
    return call("!$omp parallel", *inner)


def write_archive(path, ranks=2, threads=2, faulty=None, resolution=1_000_000, group_name="MPI Rank {}",
                  extra=None):
    """Write an archive; ``extra(trace, regions, node)`` may add more definitions/events."""
    layout = {}
    with otf2.writer.open(str(path), timer_resolution=resolution) as tr:
        root = tr.definitions.system_tree_node("machine")
        node = tr.definitions.system_tree_node("node 0", parent=root)
        regions = {}
        t = 10_000
        for r in range(ranks):
            group = tr.definitions.location_group(group_name.format(r), system_tree_parent=node)
            for th in range(threads):
                name = "Master thread" if th == 0 else f"OMP thread {th}"
                loc = tr.definitions.location(name, group=group)
                events = seq_for(r, th, faulty)
                emit_events(tr, tr.event_writer_from_location(loc), regions,
                            [(e, t + 7 * (i + 1)) for i, e in enumerate(events)])
                t += 7 * len(events)
                layout[(r, th)] = events
        if extra is not None:
            extra(tr, regions, node)
    return path / "traces.otf2", layout


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    if not HAVE_OTF2:
        pytest.skip("otf2 package not installed (pip install otf2)")
    d = tmp_path_factory.mktemp("otf2") / "run"
    return write_archive(d)


# --------------------------------------------------------------------------- reading

@needs_otf2
def test_two_ranks_two_threads_read_back_exactly(archive):
    anchor, layout = archive
    run = readers.load_run(anchor.parent)
    assert run.rank_source == "location-group-name" and run.notes == []
    assert [(t.rank, t.thread) for t in run.traces] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for t in run.traces:
        assert labels(t) == layout[(t.rank, t.thread)]
        assert t.complete and not t.notes and t.names[0] == "<return>"
        assert t.timestamps.dtype == np.uint64 and t.timestamps.size == t.events.size
        # ticks of 1 us (resolution 1e6 per second) -> ns
        assert np.all(t.timestamps % 7000 == (10_000 * 1000) % 7000)
        assert np.all(np.diff(t.timestamps.astype(np.int64)) == 7000)


@needs_otf2
def test_readers_dispatch(archive):
    anchor, layout = archive
    for where in (anchor.parent, anchor.parent.parent):        # archive dir, or the dir holding it
        idx = readers.discover_run(where)
        assert idx.fmt == "otf2" and idx.rank_source == "location-group-name"
        assert [(r.rank, r.thread) for r in idx.refs] == sorted(layout)
        assert all(r.size > 0 for r in idx.refs)
        for ref in idx.refs:
            t = readers.load_trace(ref)
            assert (t.rank, t.thread) == (ref.rank, ref.thread)
            assert labels(t) == layout[(ref.rank, ref.thread)]


@needs_otf2
def test_ranks_by_group_order_and_skipped_locations(tmp_path):
    def gpu(tr, regions, node):
        g = tr.definitions.location_group("accelerator", system_tree_parent=node,
                                          location_group_type=otf2.LocationGroupType.ACCELERATOR)
        loc = tr.definitions.location("CUDA stream", group=g, type=otf2.LocationType.GPU)
        w = tr.event_writer_from_location(loc)
        w.enter(1, regions["main"])
        w.leave(2, regions["main"])
    anchor, layout = write_archive(tmp_path / "a", ranks=3, threads=1, group_name="process {}x", extra=gpu)
    idx = readers.discover_run(anchor.parent)
    assert idx.rank_source == "location-group-order"
    assert any("location-group order" in n for n in idx.notes)
    assert any("skipped 1 location" in n and "CUDA stream" in n for n in idx.notes)
    assert [(r.rank, r.thread) for r in idx.refs] == [(0, 0), (1, 0), (2, 0)]


@needs_otf2
def test_leave_out_of_nesting_is_repaired(tmp_path):
    with otf2.writer.open(str(tmp_path / "a"), timer_resolution=10**9) as tr:
        node = tr.definitions.system_tree_node("n")
        g = tr.definitions.location_group("MPI Rank 0", system_tree_parent=node)
        w = tr.event_writer_from_location(tr.definitions.location("Master thread", group=g))
        a, b, c = (tr.definitions.region(n) for n in "abc")
        for i, (ev, reg) in enumerate([("e", a), ("e", b), ("l", a), ("l", c), ("e", c)]):
            (w.enter if ev == "e" else w.leave)(100 + i, reg)
    t = readers.load_run(tmp_path / "a").traces[0]
    assert labels(t) == ["a", "b", "<", "<", "c"]                 # b closed by a's Leave; c's dropped
    assert any("1 region(s) closed implicitly, 1 Leave(s)" in n for n in t.notes)
    assert t.timestamps.tolist() == [100, 101, 102, 102, 104]


# --------------------------------------------------------------------------- damage

@needs_otf2
def test_truncated_and_corrupt_event_files(archive, tmp_path):
    anchor, layout = archive
    d = tmp_path / "run"
    shutil.copytree(anchor.parent, d)
    evt = d / "traces" / "1.evt"                                  # rank 0 thread 1
    data = evt.read_bytes()
    evt.write_bytes(data[: len(data) * 2 // 3])
    t = readers.load_trace(readers.discover_run(d).refs[1])
    assert not t.complete and 0 < t.events.size < len(layout[(0, 1)])
    assert labels(t) == layout[(0, 1)][: t.events.size]
    assert any("traces/1.evt" in n and "truncated or corrupt" in n for n in t.notes)
    evt.write_bytes(b"")
    with pytest.raises(TraceFormatError, match=r"traces/1\.evt: cannot read"):
        O.read_otf2_location(d / "traces.otf2", 1)
    evt.write_bytes(b"\xff" * 64)
    with pytest.raises(TraceFormatError, match=r"traces/1\.evt: cannot read"):
        O.read_otf2_location(d / "traces.otf2", 1)


@needs_otf2
def test_corrupt_anchor_and_definitions(archive, tmp_path):
    anchor, _ = archive
    d = tmp_path / "run"
    shutil.copytree(anchor.parent, d)
    O._cached_defs.cache_clear()
    (d / "traces.otf2").write_bytes(b"garbage" * 10)
    with pytest.raises(TraceFormatError, match=r"traces\.otf2: cannot read OTF2 archive"):
        readers.discover_run(d)
    shutil.copy(anchor, d / "traces.otf2")
    (d / "traces.def").write_bytes((d / "traces.def").read_bytes()[:20])
    O._cached_defs.cache_clear()
    with pytest.raises(TraceFormatError, match=r"traces\.otf2: cannot read OTF2 archive"):
        readers.discover_run(d)


@needs_otf2
def test_several_archives_are_ambiguous(archive, tmp_path):
    anchor, _ = archive
    for name in ("scorep-a", "scorep-b"):
        shutil.copytree(anchor.parent, tmp_path / name)
    with pytest.raises(DiffTraceError, match="several OTF2 archives"):
        readers.discover_run(tmp_path)


# --------------------------------------------------------------------------- without the package

def test_missing_package_says_to_install_it(tmp_path, monkeypatch):
    d = tmp_path / "scorep-run"
    d.mkdir()
    (d / "traces.otf2").write_bytes(b"\x00" * 16)               # recognised without the package
    (d / "traces.def").write_bytes(b"")
    real_import = builtins.__import__

    def no_otf2(name, *args, **kwargs):
        if name in ("otf2", "_otf2") or name.startswith(("otf2.", "_otf2.")):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_otf2)
    for mod in [m for m in sys.modules if m in ("otf2", "_otf2") or m.startswith(("otf2.", "_otf2."))]:
        monkeypatch.delitem(sys.modules, mod)
    O._cached_defs.cache_clear()
    assert not O.otf2_available()
    for call_ in (lambda: readers.discover_run(tmp_path),
                  lambda: readers.load_trace(readers.TraceRef(0, 0, str(d / "traces.otf2"), "0", 0, "otf2"))):
        with pytest.raises(DiffTraceError) as e:
            call_()
        assert "install the otf2 package to read OTF2 archives" in str(e.value)
        assert str(d / "traces.otf2") in str(e.value)


@pytest.mark.integration
def test_missing_package_message_from_the_cli(tmp_path):
    """The same message, one line on stderr and exit code 2, in a process without otf2."""
    d = tmp_path / "run"
    d.mkdir()
    (d / "traces.otf2").write_bytes(b"\x00" * 16)
    block = tmp_path / "block"                                # shadows the real package
    block.mkdir()
    for mod in ("otf2", "_otf2"):
        (block / f"{mod}.py").write_text("raise ImportError('otf2 blocked for this test')\n")
    code = ("import sys; sys.path[:0] = sys.argv[1:3]; from difftrace_mpi.cli import main; "
            "sys.exit(main(sys.argv[3:]))")
    res = subprocess.run([sys.executable, "-c", code, str(block), str(ROOT), "analyze", str(d), str(d)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "install the otf2 package to read OTF2 archives" in res.stderr
    assert "Traceback" not in res.stderr


# --------------------------------------------------------------------------- end to end

@needs_otf2
@pytest.mark.integration
def test_analyze_names_the_changed_rank(tmp_path):
    normal, _ = write_archive(tmp_path / "normal", ranks=4, threads=2)
    faulty, _ = write_archive(tmp_path / "faulty", ranks=4, threads=2, faulty=(2, 0))
    res = run_cli("analyze", normal.parent, faulty.parent)
    assert res.returncode == 0, res.stderr
    assert "(otf2, 8 traces)" in res.stdout and "location-group-name" in res.stdout
    assert "Top suspect processes: 2" in res.stdout
    res = run_cli("diffnlr", normal.parent, faulty.parent, "--rank", "2")
    assert res.returncode == 0, res.stderr
    assert "+ " in res.stdout and "- " in res.stdout


FLIP_SCRIPT = r"""
import random, shutil, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from difftrace_mpi.readers import otf2
from difftrace_mpi import readers
from difftrace_mpi.errors import DiffTraceError
src, work = Path(sys.argv[2]), Path(sys.argv[3])
rng = random.Random(int(sys.argv[4]))
# the anchor file is left alone: some flips there make the OTF2 library itself spin for
# seconds before it fails (its own parsing, nothing this reader can bound)
files = sorted(p.relative_to(src) for p in src.rglob("*") if p.is_file() and p.suffix != ".otf2")
ok = err = 0
shutil.copytree(src, work)
originals = {f: (work / f).read_bytes() for f in files}
for _ in range(int(sys.argv[5])):
    name = rng.choice(files)
    f = work / name
    data = bytearray(originals[name])
    for _ in range(rng.choice([1, 2, 5])):
        data[rng.randrange(len(data))] = rng.randrange(256)
    f.write_bytes(bytes(data))
    otf2._cached_defs.cache_clear()
    try:
        for ref in readers.discover_run(work).refs:
            t = readers.load_trace(ref)
            assert t.events.size == t.timestamps.size
            assert t.events.size == 0 or int(t.events.max()) < len(t.names)
        ok += 1
    except DiffTraceError as e:
        assert str(work) in str(e), e
        err += 1
    f.write_bytes(originals[name])
print("flips", ok, err)
"""


@needs_otf2
@pytest.mark.integration
def test_byte_flips_never_crash(archive, tmp_path):
    """Damaged definition and event files give a result or a DiffTraceError: no crash, no
    traceback on stderr.  (Run in a child process, so that a crash in the C library fails
    this test only.  Registering one Python function for several callbacks crashed here.)"""
    anchor, _ = archive
    res = subprocess.run([sys.executable, "-c", FLIP_SCRIPT, str(ROOT), str(anchor.parent),
                          str(tmp_path / "work"), "7", "200"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    ok, err = map(int, res.stdout.split()[1:3])
    assert ok and err


@needs_otf2
@pytest.mark.integration
def test_calling_context_events_are_counted_not_read(tmp_path):
    """Score-P's unwinding mode writes CallingContext* events: counted in a note, not read
    as calls.  (In a child process: these callbacks once crashed the C library.)"""
    with otf2.writer.open(str(tmp_path / "a"), timer_resolution=10**9) as tr:
        node = tr.definitions.system_tree_node("n")
        g = tr.definitions.location_group("MPI Rank 0", system_tree_parent=node)
        w = tr.event_writer_from_location(tr.definitions.location("Master thread", group=g))
        main, work = tr.definitions.region("main"), tr.definitions.region("work")
        cc = tr.definitions.calling_context(work, parent=None)
        ig = tr.definitions.interrupt_generator("timer", period=1000)
        w.enter(1, main)
        for i in range(3):
            w.calling_context_enter(10 + 4 * i, cc, 1)
            w.calling_context_sample(11 + 4 * i, cc, 1, ig)
            w.calling_context_leave(12 + 4 * i, cc)
        w.leave(30, main)
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from difftrace_mpi import readers; "
            "t = readers.load_run(sys.argv[2]).traces[0]; "
            "print(json.dumps([t.events.tolist(), list(t.names), t.notes]))")
    res = subprocess.run([sys.executable, "-c", code, str(ROOT), str(tmp_path / "a")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    events, names, notes = json.loads(res.stdout)
    assert [names[v] if v else "<" for v in events] == ["main", "<"]
    assert any("9 calling-context events" in n for n in notes)


# --------------------------------------------------------------------------- the fast path

from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3)), max_size=40))
def test_nesting_fast_path_agrees_with_the_repair(events):
    """The vectorised check says "well nested" exactly when the repair changes nothing."""
    enter = np.array([e for e, _ in events], dtype=bool)
    region = np.array([r for _, r in events], dtype=np.uint32)
    time = np.arange(len(events), dtype=np.uint64)
    entered, times, closed, dropped = O._nest_repair(region, time, enter)
    unchanged = (closed == dropped == 0 and entered.tolist() == np.where(enter, region.astype(np.int64), -1).tolist())
    assert O._nest_fast(region, enter) == unchanged


@needs_otf2
def test_events_equal_the_otf2_package_reader(tmp_path):
    """Our reader (C callbacks) against the package's own Python reader, event by event."""
    anchor, _ = write_archive(tmp_path / "a", ranks=2, threads=2, faulty=(1, 1))
    expected = {}
    with otf2.reader.open(str(anchor)) as tr:
        for loc, event in tr.events:
            if isinstance(event, (otf2.events.Enter, otf2.events.Leave)):
                expected.setdefault(loc._ref, []).append(
                    (event.region.name if isinstance(event, otf2.events.Enter) else "<", event.time))
    idx = readers.discover_run(tmp_path / "a")
    assert len(idx.refs) == 4
    for ref in idx.refs:
        t = readers.load_trace(ref)
        got = [(t.names[v] if v else "<", int(ts) // 1000) for v, ts in zip(t.events.tolist(), t.timestamps)]
        assert got == expected[int(ref.info)]              # the archive's clock: 1 MHz, times in ns
