"""Fortran MPI programs under the tracer (issue 24, item 4).

Open MPI's Fortran bindings (mpif.h, use mpi, use mpi_f08) call PMPI_* directly, so the C
wrappers never see a Fortran program's MPI calls: the tracer built for Open MPI also wraps
the Fortran entry points (parlot_fortran.c; mpi_send_, mpi_send_f08_, written from mpi.h).
MPICH's mpif.h/use mpi bindings, and its use mpi_f08 entry points with a choice buffer, reach
the C wrappers; its other mpi_f08 entry points (mpi_barrier_f08_, mpi_init_f08_, ...) do
not and are wrapped.  Here: a gfortran -finstrument-functions program, with `use mpi` and
with `use mpi_f08`, traced with a tracer built for Debian's Open MPI (.ci/run installs it)
and, where installed, Debian's MPICH, shows every MPI call in order, once each, with its
rank and end record.  pip's MPICH has no Fortran bindings.
"""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import starts_processes
from difftrace_mpi.model import RETURN_NAME
from difftrace_mpi.readers.parlot import parse_end
from test_tracer import PIN, check_run, plain_name
from test_tracer_site_mpi import launcher

pytestmark = pytest.mark.integration

# (mpif90, mpiexec, mpicc) of Debian's two MPIs
MPIS = {"openmpi": ("/usr/bin/mpif90.openmpi", "/usr/bin/mpiexec.openmpi", "/usr/bin/mpicc.openmpi"),
        "mpich": ("/usr/bin/mpif90.mpich", "/usr/bin/mpiexec.mpich", "/usr/bin/mpicc.mpich")}

RING = """program ring
  use {module}
  implicit none
  integer :: ierr, rank, nprocs, token, i
  {status}
  double precision :: s, r
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  s = 0
  do i = 1, 3
    s = s + work(i)
    if (rank == 0) then
      token = i
      call MPI_Send(token, 1, MPI_INTEGER, 1, 7, MPI_COMM_WORLD, ierr)
    else if (rank == 1) then
      call MPI_Recv(token, 1, MPI_INTEGER, 0, 7, MPI_COMM_WORLD, status, ierr)
    end if
    call MPI_Allreduce(s, r, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  end do
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  call MPI_Finalize(ierr)
contains
  double precision function work(k)
    integer, intent(in) :: k
    work = k * 2.0d0
  end function work
end program ring
"""
STATUS = {"mpi": "integer :: status(MPI_STATUS_SIZE)", "mpi_f08": "type(MPI_Status) :: status"}


_LIBS = {}


def mpi_lib(family, tmp_path_factory):
    """The tracer built for that MPI (once per session), or a skip."""
    mpif90, mpiexec, mpicc = MPIS[family]
    if not all(os.access(p, os.X_OK) for p in MPIS[family]) or not shutil.which("gfortran"):
        pytest.skip(f"no {family} with Fortran (apt-get install gfortran and libopenmpi-dev openmpi-bin, "
                    f"or libmpich-dev mpich)")
    if family not in _LIBS:
        d = tmp_path_factory.mktemp(f"fortran-lib-{family}")
        subprocess.run(["make", "-s", "-C", str(PIN), f"MPICC={mpicc}", f"BUILD={d}"], check=True)
        _LIBS[family] = d / "libparlot.so"
    return _LIBS[family]


@pytest.mark.parametrize("family", ["openmpi", "mpich"])
@pytest.mark.parametrize("module", ["mpi", "mpi_f08"])
@starts_processes
def test_fortran_mpi_calls_are_traced(tmp_path_factory, tmp_path, family, module):
    lib = mpi_lib(family, tmp_path_factory)
    MPIF90, MPIEXEC, _ = MPIS[family]
    src = tmp_path / "ring.f90"
    src.write_text(RING.format(module=module, status=STATUS[module]))
    exe = tmp_path / "ring"
    r = subprocess.run([MPIF90, "-O1", "-g", "-finstrument-functions", "-o", str(exe), str(src)],
                       capture_output=True, text=True)
    if r.returncode != 0 and module == "mpi_f08" and "mpi_f08" in r.stderr:
        pytest.skip(f"this Open MPI has no mpi_f08 module: {r.stderr[-300:]}")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "run"
    cmd = launcher(MPIEXEC, 2) + [str(PIN / "parlot-run"), "-q", "-L", str(lib), "-d", str(out), str(exe)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    runs = check_run(out)
    assert set(runs) == {(0, 0), (1, 0)}
    for rank, peer_call in ((0, "MPI_Send"), (1, "MPI_Recv")):
        names, depth = runs[(rank, 0)]
        # plain names: MPICH's C wrappers name the calls that reach them with their arguments
        calls = [plain_name(n) for n in names if n != RETURN_NAME]
        assert depth == 0
        step = ["work.0", peer_call, "MPI_Allreduce"]
        assert calls == ["main", "MAIN__", "MPI_Init", "MPI_Comm_rank", "MPI_Comm_size", *step * 3,
                         "MPI_Barrier", "MPI_Finalize"], (rank, calls)
    for end in out.glob("*.end"):
        e = parse_end(end.read_text())
        # 3 steps x 2 calls + Init, Comm_rank, Comm_size, Barrier, Finalize; ended after Finalize
        assert e["how"] == "finalized" and e["code"] == 0 and e["mpi_calls"] == 11, e
    assert sorted(int(f.read_text()) for f in out.glob("*.rank")) == [0, 1]
