#!/usr/bin/env bash
# One-shot set-up for a fresh machine: a virtualenv in .venv with the MPI (pip's MPICH),
# mpi4py, numpy, scipy, h5py and Cython, the Cython kernels built in place, and the
# tracer library in pin/ (needs make and gcc).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -r requirements.txt
.venv/bin/python setup.py --quiet build_ext --inplace
# make the package importable from any directory (batch jobs run elsewhere): a .pth entry
.venv/bin/python -c 'import os, sysconfig; open(os.path.join(sysconfig.get_paths()["purelib"], "difftrace_mpi.pth"), "w").write(os.getcwd() + "\n")'
if command -v make >/dev/null 2>&1; then
    make -s -C pin && echo "tracer built: pin/parlot-run (see pin/README.md)"
else
    echo "make not found: the tracer in pin/ was not built (see pin/README.md)" >&2
fi
echo "difftrace_mpi is set up: activate with 'source .venv/bin/activate'"
