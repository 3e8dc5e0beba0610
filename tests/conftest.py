import functools
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

try:
    import otf2
    HAVE_OTF2 = True
except ImportError:        # pragma: no cover - depends on the environment
    otf2 = None
    HAVE_OTF2 = False

needs_otf2 = pytest.mark.skipif(not HAVE_OTF2, reason="otf2 package not installed (pip install otf2)")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "traces" / "oddeven"
SHARED_DATA = ROOT / "tests" / "data" / "parlot-go-sched"   # copied in: the real ParLOT files


def run_cli(*args, mpi=None, timeout=300, cwd=None):
    """Run ``python -m difftrace_mpi ARGS`` (under ``mpiexec -n mpi`` when given)."""
    cmd = [sys.executable, "-m", "difftrace_mpi", *map(str, args)]
    if mpi:
        mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
        cmd = [mpiexec, "-n", str(mpi), *cmd]
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd or ROOT, env=env)


def call(name, *body):
    """Expected events of one call, as labels: its name, the body's events, then "<"."""
    out = [name]
    for b in body:
        out.extend(b)
    out.append("<")
    return out


def labels(trace):
    """A trace's events as labels: function names, "<" for returns."""
    return [trace.names[v] if v else "<" for v in trace.events.tolist()]


def h5_contents(path, skip=("timing",)):
    """Every dataset and attribute of an HDF5 file by every name it has (an object under
    two names, a hard link, is listed under both), except the groups in ``skip``."""
    out = {}
    with h5py.File(path, "r") as f:
        for key, value in f.attrs.items():
            out["@" + key] = value

        def visit(group, prefix):
            for name, obj in group.items():
                path = prefix + name
                if path.split("/")[0] in skip:
                    continue
                if isinstance(obj, h5py.Dataset):
                    out[path] = obj[()]
                for key, value in obj.attrs.items():
                    out[f"{path}@{key}"] = value
                if isinstance(obj, h5py.Group):
                    visit(obj, path + "/")
        visit(f, "")
    return out


def assert_same_h5(a, b):
    ca, cb = h5_contents(a), h5_contents(b)
    assert ca.keys() == cb.keys(), sorted(set(ca) ^ set(cb))[:20]
    differ = [k for k in ca if not np.array_equal(np.asarray(ca[k]), np.asarray(cb[k]))]
    assert not differ, differ[:20]


@pytest.fixture(scope="session")
def examples():
    return EXAMPLES


# --------------------------------------------------------------------------- the two test layers
# `pytest -m "not integration"` is the fast layer: in-process only.  A test that starts a
# process (itself or through a fixture, whatever its scope) must be marked `integration`.
# That is checked, not trusted: an unmarked test that starts one fails.

_running_item = None        # the test whose setup, call or teardown is running


def starts_processes(fixture_function):
    """Declares a fixture that starts processes (put it under ``@pytest.fixture``): every
    test using it, directly or through other fixtures, is marked integration."""
    fixture_function.starts_processes = True
    return fixture_function


@pytest.fixture(scope="session")
@starts_processes
def build_dir(tmp_path_factory):
    """The tracer (pin/) and examples/programs built once for the session (scenarios.build)."""
    if not shutil.which("make") or not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("the tracer and programs cannot be built here: make or a C compiler is missing")
    sys.path.insert(0, str(ROOT / "examples" / "programs"))
    import scenarios
    d = tmp_path_factory.mktemp("programs")
    try:
        scenarios.build(d)
    except subprocess.CalledProcessError as e:
        pytest.fail(f"building pin/ or examples/programs failed: {e}")
    assert (d / "minilulesh").exists()
    return d


@pytest.hookimpl(tryfirst=True)         # before -m deselects by marker
def pytest_collection_modifyitems(items):
    for item in items:
        if item.get_closest_marker("slow") is not None:     # slow in process: left out of the fast layer too
            item.add_marker(pytest.mark.integration)
        # _fixtureinfo: pytest's record of every fixture the test uses, transitively
        used = getattr(item, "_fixtureinfo", None)
        defs = [d for ds in used.name2fixturedefs.values() for d in ds] if used else []
        if any(getattr(d.func, "starts_processes", False) for d in defs):
            item.add_marker(pytest.mark.integration)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _running_item
    _running_item = item
    try:
        return (yield)
    finally:
        _running_item = None


def _refuse_in_fast_layer(what):
    item = _running_item
    if item is not None and item.get_closest_marker("integration") is None:
        pytest.fail(f"{item.nodeid} starts a process ({what}) but is not marked integration: "
                    "add @pytest.mark.integration (pytestmark in its module, or @starts_processes "
                    "on the fixture that starts it), "
                    "so that -m \"not integration\" stays the fast, in-process layer")


def _guarded(name, start):
    @functools.wraps(start)
    def guarded(*args, **kwargs):
        _refuse_in_fast_layer(name)
        return start(*args, **kwargs)
    return guarded


# every way the tests or the code under test could start a process (subprocess.run,
# check_output and friends all construct a Popen)
_PROCESS_STARTERS = [(subprocess.Popen, "__init__"), (os, "system"), (os, "posix_spawn"), (os, "posix_spawnp")]


def _mpi_shared_memory():
    """MPI's shared-memory files in /dev/shm (MPICH's temporaries too)."""
    from difftrace_mpi.config import MPI_SHARED_MEMORY
    return {p for p in glob.glob("/dev/shm/*") if p.startswith(MPI_SHARED_MEMORY + ("/dev/shm/mpich_shar_tmp",))}


def _remove_left_shared_memory(before):
    """The MPI shared-memory files that appeared during the session and no process maps:
    left by jobs that crashed or were killed (the zoo's C bug programs, hung jobs the tests
    kill), which MPI_Finalize never reached; 2-8 MB of RAM each, piling up run after run."""
    new = _mpi_shared_memory() - before
    for maps in glob.glob("/proc/[0-9]*/maps") if new else ():
        try:
            with open(maps) as f:
                text = f.read()
        except OSError:
            continue
        new = {p for p in new if p not in text}
    for path in new:
        try:
            os.unlink(path)
        except OSError:
            pass


def pytest_configure(config):
    config._mpi_shared_memory_before = _mpi_shared_memory()
    config.addinivalue_line("markers", "slow: in process but long (tens of seconds on a loaded 2-core machine); "
                                       "counted in the integration layer, so -m \"not integration\" leaves it out too")
    # matplotlib lists the system's fonts once (fc-list, a process) the first time it
    # loads its font manager, then reads its cache: done here, before any test, so that the
    # first in-process PNG test on a fresh machine does not start that process
    try:
        import matplotlib.font_manager  # noqa: F401
    except Exception:  # noqa: BLE001  absent or broken: the PNG tests skip or say so
        pass
    for owner, name in _PROCESS_STARTERS:
        if hasattr(owner, name):
            setattr(owner, name, _guarded(f"{getattr(owner, '__name__', owner)}.{name}", getattr(owner, name)))


def pytest_unconfigure(config):
    _remove_left_shared_memory(getattr(config, "_mpi_shared_memory_before", set()))
    for owner, name in _PROCESS_STARTERS:
        wrapped = getattr(getattr(owner, name, None), "__wrapped__", None)
        if wrapped is not None:
            setattr(owner, name, wrapped)


# --------------------------------------------------------------------------- OTF2 runs with timestamps

def location_events(rank, thread, iterations, slow, wait):
    """[(event, ns before it)] of one location: an MPI loop with a nested compute loop on
    thread 0, an OpenMP loop on thread 1.  Outside MPI calls, rank r spends (100 + 10 r)
    ns before each event, times ``slow`` (the ranks differ, as real ones do); each MPI
    call of the loop lasts 60 ns plus ``wait``."""
    out, stack = [], []
    compute = int((100 + 10 * rank) * slow)
    if thread == 0:
        out += [(e, 50) for e in ["main"] + call("MPI_Init") + ["solve"]]
        for _ in range(iterations):
            for e in call("compute", *[call("kernel")] * 3) + call("MPI_Send") + call("MPI_Recv"):
                closes_mpi = e == "<" and stack[-1].startswith("MPI_")
                stack.pop() if e == "<" else stack.append(e)
                out.append((e, 60 + wait if closes_mpi else compute))
        out += [(e, 50) for e in ["<"] + call("MPI_Finalize") + ["<"]]
    else:
        out += [(e, compute) for e in call("!$omp parallel", *[call("work")] * 6)]
    return out


def write_run(path, ranks=4, threads=2, iterations=None, slow=None, wait=None):
    iterations, slow, wait = iterations or {}, slow or {}, wait or {}
    with otf2.writer.open(str(path), timer_resolution=10**9) as tr:
        node = tr.definitions.system_tree_node("node 0")
        regions = {}
        for r in range(ranks):
            group = tr.definitions.location_group(f"MPI Rank {r}", system_tree_parent=node)
            for th in range(threads):
                loc = tr.definitions.location("Master thread" if th == 0 else f"OMP thread {th}", group=group)
                t, timed = 1000, []
                for e, dt in location_events(r, th, iterations.get(r, 8), slow.get((r, th), 1.0),
                                             wait.get((r, th), 0)):
                    t += dt
                    timed.append((e, t))
                emit_events(tr, tr.event_writer_from_location(loc), regions, timed)
    return path


def emit_events(tr, writer, regions, timed):
    """Write [(label, timestamp)] to one OTF2 location: a name enters that region (defined
    on first use in ``regions``), "<" leaves the innermost open one."""
    stack = []
    for e, t in timed:
        if e == "<":
            writer.leave(t, regions[stack.pop()])
        else:
            if e not in regions:
                regions[e] = tr.definitions.region(e)
            stack.append(e)
            writer.enter(t, regions[e])


@pytest.fixture(scope="session")
def otf2_runs(tmp_path_factory):
    """(normal, faulty, timing_only) OTF2 archives of 4 ranks x 2 threads (test_timing,
    test_report)."""
    if not HAVE_OTF2:
        pytest.skip("otf2 package not installed (pip install otf2)")
    d = tmp_path_factory.mktemp("timing")
    normal = write_run(d / "normal")
    # rank 2: computes 5x slower, same structure (the timing fault); rank 3, its partner,
    # waits for it inside its MPI calls (as much longer as rank 2 computes); rank 1: 5x
    # slower but two more iterations (a structural change, not a timing fault); rank 0 and
    # thread 1.1: a little slower (noise)
    extra = 10 * 4 * 120 // 2             # rank 2's extra compute per iteration, over 2 MPI calls
    faulty = write_run(d / "faulty", iterations={1: 10}, wait={(3, 0): extra},
                       slow={(2, 0): 5.0, (1, 0): 5.0, (0, 0): 1.1, (1, 1): 1.3})
    only = write_run(d / "timing_only", slow={(2, 0): 5.0})
    return normal, faulty, only


@pytest.fixture
def no_analysis(monkeypatch):
    """Fails the test if the analysis starts: refusals and output checks come first (a late
    failure would lose the work)."""
    from difftrace_mpi.engine import pipeline

    def analyze(*args, **kwargs):
        raise AssertionError("the analysis started before the inputs and outputs were checked")
    monkeypatch.setattr(pipeline, "analyze", analyze)


def report_of(path, **options):
    """The HTML report of the results file ``path`` (the views take Results: the file is
    read as the report command reads it)."""
    from difftrace_mpi import store
    from difftrace_mpi.views import report
    with store.read(path) as results:
        return report.build_report(results, **options)


# -- the bundled odd/even analyses, computed once per test session (read-only: a test that
# changes a Results makes its own) ---------------------------------------------------------

@pytest.fixture(scope="session")
def swap():
    """The odd/even example, normal against swapBug, with the default grid (in-process)."""
    from difftrace_mpi.engine.pipeline import analyze
    return analyze(EXAMPLES / "normal", EXAMPLES / "swapbug")


@pytest.fixture(scope="session")
def dl():
    """normal against dlBug: ranking rows with suspects and traces that stop (a hang)."""
    from difftrace_mpi.engine.pipeline import analyze
    return analyze(EXAMPLES / "normal", EXAMPLES / "dlbug")


@pytest.fixture(scope="session")
def swap_h5(swap, tmp_path_factory):
    """``swap`` in a results file."""
    from difftrace_mpi import store
    path = tmp_path_factory.mktemp("swap") / "swap.h5"
    store.write(swap, path)
    return path


@pytest.fixture(scope="session")
def dl_h5(dl, tmp_path_factory):
    """``dl`` in a results file."""
    from difftrace_mpi import store
    path = tmp_path_factory.mktemp("dl") / "dl.h5"
    store.write(dl, path)
    return path
