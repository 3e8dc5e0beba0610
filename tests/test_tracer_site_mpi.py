"""The tracer built against a second MPI (the "site's MPI"), not pip's MPICH of .venv.

libparlot.so's MPI wrappers are compiled against one mpi.h, so a program built with another
MPI needs a tracer library built with that MPI's compiler wrapper:

    make -C pin MPICC=/usr/bin/mpicc.openmpi BUILD=build/openmpi     # -> pin/build/openmpi/libparlot.so
    mpiexec.openmpi -n 4 pin/parlot-run -L pin/build/openmpi/libparlot.so -d runs/good ./app

This test does that with Debian's Open MPI (or MPICH) where it is installed (.ci/run installs
it), traces examples/programs/halo built with that MPI and launched by its own mpiexec, and
analyzes the traces with the project's analyzer (which keeps using pip's MPICH and mpi4py).
It skips only when no second MPI is installed.  DIFFTRACE_SITE_MPICC (and
DIFFTRACE_SITE_MPIEXEC) choose another one.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_tracer import PIN, ROOT, check_run, plain_name

pytestmark = pytest.mark.integration

# (mpicc, mpiexec) of the MPIs Debian installs beside each other, in order of preference
CANDIDATES = (("/usr/bin/mpicc.openmpi", "/usr/bin/mpiexec.openmpi"),
              ("/usr/bin/mpicc.mpich", "/usr/bin/mpiexec.mpich"))


def site_mpi():
    """(mpicc, mpiexec) of the second MPI, or None."""
    cc = os.environ.get("DIFFTRACE_SITE_MPICC")
    if cc:
        run = os.environ.get("DIFFTRACE_SITE_MPIEXEC") or str(Path(cc).with_name("mpiexec"))
        return cc, run
    for cc, run in CANDIDATES:
        if os.access(cc, os.X_OK) and os.access(run, os.X_OK):
            return cc, run
    return None


def launcher(mpiexec, n):
    """The mpiexec command line for n ranks on this (small, maybe root-run) machine."""
    version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True).stdout
    cmd = [mpiexec, "-n", str(n)]
    if "Open MPI" in version or "OpenRTE" in version:
        cmd.append("--oversubscribe")         # more ranks than cores
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
    return cmd


def digest(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest() if Path(path).exists() else None


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    mpi = site_mpi()
    if mpi is None:
        pytest.skip("no second MPI installed (apt-get install libopenmpi-dev openmpi-bin, or libmpich-dev "
                    "mpich; or set DIFFTRACE_SITE_MPICC): the site-MPI build of the tracer is not tested")
    mpicc, mpiexec = mpi
    subprocess.run(["make", "-s", "-C", str(PIN)], check=True)      # the default, pip's MPICH
    default_lib = digest(PIN / "libparlot.so")
    d = tmp_path_factory.mktemp("site-mpi")
    build = d / "lib"
    subprocess.run(["make", "-s", "-C", str(PIN), f"MPICC={mpicc}", f"BUILD={build}"], check=True)
    assert (build / "libparlot.so").is_file()
    assert digest(PIN / "libparlot.so") == default_lib, "the site-MPI build overwrote pin/libparlot.so"
    progs = d / "progs"
    subprocess.run(["make", "-s", "-C", str(ROOT / "examples" / "programs"), f"MPICC={mpicc}",
                    f"BUILD={progs}", str(progs / "halo")], check=True)
    return dict(mpicc=mpicc, mpiexec=mpiexec, lib=build / "libparlot.so", halo=progs / "halo", dir=d)


def trace_halo(site, out, *args, lib_opt=None):
    lib_opt = lib_opt or ("-L", str(site["lib"]))
    cmd = [*launcher(site["mpiexec"], 4), str(PIN / "parlot-run"), "-q", *lib_opt, "-d", str(out),
           str(site["halo"]), *args]
    env = dict(os.environ, OMP_NUM_THREADS="2", OMP_WAIT_POLICY="passive")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stdout}\n{r.stderr}"
    assert "halo: 4 ranks x 2 threads" in r.stdout
    return r


def test_site_mpi_traces_and_analyzes(site):
    normal, faulty = site["dir"] / "normal", site["dir"] / "extra"
    trace_halo(site, normal)
    trace_halo(site, faulty, "--bug", "extra", "--bug-rank", "2", "--bug-iter", "6")
    runs = check_run(normal)
    # ranks come from this MPI's MPI_Init (the .rank sidecars), events from its wrappers
    assert sorted(runs) == [(r, t) for r in range(4) for t in range(2)]
    names = [plain_name(n) for n in runs[(1, 0)][0] if n]
    for n in ("main", "MPI_Init_thread", "MPI_Irecv", "MPI_Isend", "MPI_Waitall", "MPI_Allreduce",
              "GOMP_parallel", "relax._omp_fn.0", "MPI_Finalize"):
        assert n in names, n
    assert any(n.startswith("MPI_Irecv[count=") and "type=MPI_DOUBLE" in n for n in runs[(1, 0)][0]), \
        "argument annotation under this MPI's handles"
    assert all(open_calls == 0 for _, open_calls in runs.values())
    for end in normal.glob("*.end"):
        assert "how=finalized" in end.read_text()
    # the analyzer (pip's MPICH, mpi4py) finds the extra call on rank 2
    r = subprocess.run([sys.executable, "-m", "difftrace_mpi", "analyze", str(normal), str(faulty), "--json"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    verdict = json.loads(r.stdout)["verdict"]
    assert verdict["culprits"][0]["rank"] == 2 and verdict["culprits"][0]["call"] == "residual", verdict


def test_library_chosen_by_directory_or_variable(site):
    """-L takes the library or its directory; PARLOT_LIB is the same; a missing one is an error."""
    out = site["dir"] / "bydir"
    trace_halo(site, out, lib_opt=("-L", str(site["lib"].parent)))
    assert len(check_run(out)) == 8
    r = subprocess.run([str(PIN / "parlot-run"), "-q", "-d", str(site["dir"] / "x"), "true"],
                       capture_output=True, text=True, env=dict(os.environ, PARLOT_LIB=str(site["dir"] / "none.so")))
    assert r.returncode == 2 and "not found" in r.stderr and "BUILD=" in r.stderr, r.stderr


def test_library_of_the_other_mpi_family_is_refused(site):
    """pip's MPICH library preloaded into an Open MPI program: a message that says how to build
    the right one, and the program ends (instead of crashing in its first MPI call)."""
    cmd = launcher(site["mpiexec"], 2)
    if "--oversubscribe" not in cmd:
        pytest.skip("the second MPI is of MPICH's ABI family: pin/libparlot.so fits it")
    out = site["dir"] / "mismatch"
    r = subprocess.run([*cmd, str(PIN / "parlot-run"), "-q", "-d", str(out), str(site["halo"])],
                       capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=120)
    assert r.returncode != 0
    assert "built for an MPICH-family MPI but the program runs Open MPI" in r.stderr, r.stderr
    assert "make -C pin MPICC=" in r.stderr and "Segmentation" not in r.stderr + r.stdout


def test_site_mpi_library_is_not_pip_mpich():
    """Guard against testing the same MPI twice: the second MPI's mpi.h is another one."""
    mpi = site_mpi()
    if mpi is None:
        pytest.skip("no second MPI installed")
    flags = subprocess.run([mpi[0], "-show"], capture_output=True, text=True).stdout or \
        subprocess.run([mpi[0], "--showme:compile"], capture_output=True, text=True).stdout
    venv_mpicc = ROOT / ".venv" / "bin" / "mpicc"
    if venv_mpicc.exists():
        ours = subprocess.run([str(venv_mpicc), "-show"], capture_output=True, text=True).stdout
        inc = [w for w in flags.split() if w.startswith("-I")]
        assert inc and not set(inc) & set(w for w in ours.split() if w.startswith("-I")), (flags, ours)
    assert shutil.which(mpi[1]) or os.access(mpi[1], os.X_OK)
