import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "traces" / "oddeven"
SHARED_DATA = ROOT.parent / "shared" / "data" / "parlot-go-sched"


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
    """Every dataset and attribute of an HDF5 file, except the groups in ``skip``."""
    out = {}
    with h5py.File(path, "r") as f:
        for key, value in f.attrs.items():
            out["@" + key] = value

        def visit(name, obj):
            if name.split("/")[0] in skip:
                return
            if isinstance(obj, h5py.Dataset):
                out[name] = obj[()]
            for key, value in obj.attrs.items():
                out[f"{name}@{key}"] = value
        f.visititems(visit)
    return out


def assert_same_h5(a, b):
    ca, cb = h5_contents(a), h5_contents(b)
    assert ca.keys() == cb.keys(), sorted(set(ca) ^ set(cb))[:20]
    differ = [k for k in ca if not np.array_equal(np.asarray(ca[k]), np.asarray(cb[k]))]
    assert not differ, differ[:20]


@pytest.fixture(scope="session")
def examples():
    return EXAMPLES
