#!/usr/bin/env bash
# One-shot set-up for a fresh machine: a virtualenv in .venv with the MPI (pip's MPICH),
# mpi4py, numpy, scipy, h5py, Cython and the rest of requirements.txt, difftrace_mpi
# installed into it in editable mode (the `difftrace-mpi` command, `python -m difftrace_mpi`
# from any directory, the Cython kernels built in place), and the tracer library in pin/
# (needs make and gcc).  Running it again updates what changed.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -r requirements.txt
# the build requirements (setuptools, Cython, numpy) are requirements.txt's: no isolated
# build environment, so the kernels are compiled against the numpy they run with
.venv/bin/python -m pip install --quiet --no-build-isolation -e .
# earlier versions of this script made the package importable through a .pth file
rm -f "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/difftrace_mpi.pth"
if command -v make >/dev/null 2>&1; then
    make -s -C pin && echo "tracer built: pin/parlot-run (see pin/README.md)"
else
    echo "make not found: the tracer in pin/ was not built (see pin/README.md)" >&2
fi
echo "difftrace_mpi is set up: run .venv/bin/difftrace-mpi (or activate with 'source .venv/bin/activate')"
