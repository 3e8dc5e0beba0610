"""The analyzer on the site's MPI, as docs/install.md tells a cluster user to install it:
mpi4py built from source with that MPI's compiler wrapper, then the analyzer launched by that
MPI's own mpiexec.  Here the "site's MPI" is Debian's Open MPI (.ci/run installs
libopenmpi-dev and openmpi-bin); the test skips, saying so, where it is not installed.

    MPICC=/usr/bin/mpicc.openmpi pip install --no-binary mpi4py --no-cache-dir --target DIR mpi4py
    PYTHONPATH=DIR mpiexec.openmpi -n 2 python -m difftrace_mpi analyze NORMAL FAULTY

Checked: every rank's mpi4py is the one built (not .venv's, which loads pip's MPICH) and
reports Open MPI, the job has 2 ranks, and the results file equals the one the analyzer
writes on 1 rank with .venv's MPICH.

To stay quick (about 20 s) only mpi4py is built, unoptimized (CFLAGS=-O0), with pip's
--target, and the Python running it is a fresh venv that reads this venv's numpy, SciPy,
h5py and build tools through a .pth file.  A fresh venv, not .venv's interpreter:
pip's MPICH puts its own mpi.h in .venv/include, which the build would take before Open
MPI's (mpi4py then compiles against MPICH's header, links Open MPI's libmpi and fails to
import: "undefined symbol: MPI_UNWEIGHTED").  The build downloads mpi4py's source (the
version .venv has) from the package index: no cache, so that a wheel built earlier against
another MPI is never reused.
"""
import importlib.metadata
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import EXAMPLES, ROOT, assert_same_h5, run_cli

pytestmark = pytest.mark.integration

MPICC = "/usr/bin/mpicc.openmpi"
MPIEXEC = "/usr/bin/mpiexec.openmpi"


def _launcher(n):
    cmd = [MPIEXEC, "-n", str(n), "--oversubscribe"]         # more ranks than cores
    if os.geteuid() == 0:                                    # CI runs as root
        cmd.append("--allow-run-as-root")
    return cmd


def _env(target):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "MPICC")}
    env.update(PYTHONPATH=os.pathsep.join([str(target), str(ROOT)]), NO_COLOR="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def _run(cmd, env, cwd, timeout):
    proc = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def openmpi_mpi4py(tmp_path_factory):
    """(python, target): a fresh venv's python and the directory holding mpi4py built
    against Open MPI."""
    if not (os.access(MPICC, os.X_OK) and os.access(MPIEXEC, os.X_OK)):
        pytest.skip(f"Debian's Open MPI is not installed ({MPICC}, {MPIEXEC}; "
                    "apt-get install libopenmpi-dev openmpi-bin, as .ci/run does)")
    d = tmp_path_factory.mktemp("site-mpi")
    venv, target = d / "venv", d / "mpi4py-openmpi"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    new_site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(new_site, "dependencies.pth").write_text("".join(p + "\n" for p in sorted(ours)))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_NO_INDEX")}
    # CFLAGS: without optimization or debug information, mpi4py's 280,000 lines of generated C
    # compile in about 15 s instead of 2-3 min (-O3 -g); which MPI it is built against and
    # links does not depend on them
    env.update(MPICC=MPICC, CFLAGS="-O0 -g0", PIP_DISABLE_PIP_VERSION_CHECK="1")
    version = importlib.metadata.version("mpi4py")
    _run([python, "-m", "pip", "install", "--quiet", "--no-binary", "mpi4py", "--no-cache-dir", "--no-deps",
          "--no-build-isolation", "--target", target, f"mpi4py=={version}"], env, d, timeout=900)
    return python, target


def test_mpi4py_built_against_open_mpi_runs_under_its_mpiexec(openmpi_mpi4py, tmp_path):
    python, target = openmpi_mpi4py
    # each rank's line in one write(2): Open MPI forwards the ranks' output in the chunks
    # they write, and a print() in pieces was seen cut by the other rank's line
    script = ("import os, mpi4py\nfrom mpi4py import MPI\n"
              "line = '|'.join(map(str, (MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size(), mpi4py.__file__,"
              " MPI.Get_library_version().splitlines()[0])))\n"
              "os.write(1, (line + '\\n').encode())\n")
    out = _run([*_launcher(2), python, "-c", script], _env(target), tmp_path, timeout=120).stdout
    lines = sorted(line.split("|") for line in out.splitlines() if line.count("|") == 3)
    assert [rank for rank, *_ in lines] == ["0", "1"], out
    for rank, size, module, library in lines:
        assert size == "2", out                      # one job of 2 ranks, not 2 singletons
        assert Path(module).is_relative_to(target), f"rank {rank} imported {module}, not the Open MPI build"
        assert library.startswith("Open MPI"), f"rank {rank}: {library}"
    # the module links Open MPI's libmpi, not pip's MPICH
    built = next(target.glob("mpi4py/MPI*.so"))
    ldd = subprocess.run(["ldd", str(built)], capture_output=True, text=True).stdout
    libmpi = [line for line in ldd.splitlines() if "libmpi" in line]
    assert libmpi and all(".venv" not in line for line in libmpi), ldd
    assert any("libmpi.so.40" in line for line in libmpi), ldd           # Open MPI's soname


def test_analyzer_on_open_mpi_two_ranks_equals_one_rank(openmpi_mpi4py, tmp_path):
    python, target = openmpi_mpi4py
    one, two = tmp_path / "one.h5", tmp_path / "two.h5"
    res = run_cli("analyze", EXAMPLES / "normal", EXAMPLES / "swapbug", "--out", one, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    proc = _run([*_launcher(2), python, "-m", "difftrace_mpi", "analyze", EXAMPLES / "normal",
                 EXAMPLES / "swapbug", "--out", two], _env(target), tmp_path, timeout=300)
    assert "MPI ranks used: 2" in proc.stdout, proc.stdout          # really ran on 2 ranks
    assert "rank 5" in proc.stdout.lower(), proc.stdout              # the verdict names the culprit
    assert_same_h5(one, two)
