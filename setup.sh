#!/usr/bin/env bash
# One-shot set-up for a fresh machine: a virtualenv in .venv with the MPI (pip's MPICH),
# mpi4py, numpy, scipy, h5py and Cython, then the Cython kernels built in place.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -r requirements.txt
.venv/bin/python setup.py --quiet build_ext --inplace
echo "difftrace_mpi is set up: activate with 'source .venv/bin/activate'"
