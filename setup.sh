#!/usr/bin/env bash
# One-shot set-up of a development checkout: a virtualenv in .venv with everything the
# analyzer, the tests and the example notebook need (requirements.txt: pip's MPICH,
# mpi4py, numpy, SciPy, h5py, Cython, pytest, hypothesis, pandas, matplotlib, the notebook
# tools), the seven Cython kernels compiled next to their sources (several at a time, while
# pip installs the dependencies), difftrace_mpi installed into .venv in editable mode (the
# `difftrace-mpi` command, `python -m difftrace_mpi` from any directory), and the tracer
# library in pin/ (needs make and gcc).  One line per step; running it again updates what
# changed (a kernel is recompiled only when its .pyx is newer than its compiled module).
#
# A user who only runs the analyzer does not need this: `pip install '.[mpich]'` on a
# laptop, or mpi4py built against the site's MPI then `pip install .` on a cluster
# (docs/install.md).
#
#   ./setup.sh [-v|--verbose] [-j N|--jobs N]
#     -v   show pip's and the compilers' output
#     -j   kernels compiled at once (default: the CPUs this process may use)
#   PYTHON=python3.12 ./setup.sh    makes .venv with that interpreter
set -euo pipefail
cd "$(dirname "$0")"

PY=${PYTHON:-python3}
VERBOSE=0
JOBS=
while [ $# -gt 0 ]; do
    case "$1" in
        -v|--verbose) VERBOSE=1 ;;
        -j|--jobs) JOBS=${2:?"-j needs a number"}; shift ;;
        -j[0-9]*) JOBS=${1#-j} ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "setup.sh: unknown option $1 (see ./setup.sh --help)" >&2; exit 2 ;;
    esac
    shift
done
[ -n "$JOBS" ] || JOBS=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
if [ "$VERBOSE" = 1 ]; then QUIET=(); SETUP_QUIET=(); else QUIET=(--quiet); SETUP_QUIET=(-q); fi

START=$SECONDS
STEPS=8
STEP=0
step() {        # one line per step, with the seconds since the start
    STEP=$((STEP + 1))
    printf 'setup.sh [%d/%d] %3ds  %s\n' "$STEP" "$STEPS" "$((SECONDS - START))" "$*"
}
trap 'echo "setup.sh: step $STEP of $STEPS failed (rerun with -v for the details)" >&2' ERR

if [ ! -x .venv/bin/python ]; then
    step "virtualenv: creating .venv with $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
    "$PY" -m venv .venv
    # a pip older than 23 (Debian 11's) lacks what the editable install needs
    if ! .venv/bin/python -c 'import sys, pip; sys.exit(int(pip.__version__.split(".")[0]) < 23)'; then
        .venv/bin/python -m pip install "${QUIET[@]}" --upgrade pip
    fi
else
    step "virtualenv: .venv exists ($(.venv/bin/python -c 'import sys; print("Python", sys.version.split()[0])'))"
fi

step "build tools: pip install -r requirements-build.txt (setuptools, Cython, numpy)"
.venv/bin/python -m pip install "${QUIET[@]}" -r requirements-build.txt
numpy_version() { .venv/bin/python -c 'import numpy; print(numpy.__version__)'; }
BUILT_WITH=$(numpy_version)

# the kernels compile (several at a time, against the numpy they will run with: no build
# isolation) while pip installs the rest; each kernel prints a line when it is done
step "kernels: compiling the Cython kernels that changed, $JOBS at a time, in the background (setup.py build_ext --inplace)"
.venv/bin/python setup.py "${SETUP_QUIET[@]}" build_ext --inplace --parallel "$JOBS" &
KERNELS=$!
trap 'kill $KERNELS 2>/dev/null || true' EXIT

step "dependencies: pip install -r requirements.txt (pip's MPICH, mpi4py, SciPy, h5py, test, notebook and docs tools)"
.venv/bin/python -m pip install "${QUIET[@]}" -r requirements.txt
if ! wait "$KERNELS"; then
    echo "setup.sh: compiling the kernels failed (rerun with -v for the compilers' output)" >&2
    exit 1
fi
trap - EXIT
if [ "$(numpy_version)" != "$BUILT_WITH" ]; then      # a dependency moved numpy: compile again
    echo "setup.sh: numpy changed from $BUILT_WITH to $(numpy_version) during the install: recompiling the kernels"
    .venv/bin/python setup.py "${SETUP_QUIET[@]}" build_ext --inplace --force --parallel "$JOBS"
fi

step "package: pip install -e . (difftrace_mpi in editable mode, the difftrace-mpi command)"
PYTHONWARNINGS="ignore:Editable installation" \
    .venv/bin/python -m pip install "${QUIET[@]}" --no-build-isolation --no-deps -e .
# earlier versions of this script made the package importable through a .pth file
rm -f "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/difftrace_mpi.pth"

step "bytecode: python -m compileall difftrace_mpi (as pip does for an installed package)"
# every process of a run imports ~60 of its modules: without .pyc files (PYTHONDONTWRITEBYTECODE
# set, or a checkout the user cannot write) each one compiles them again, 0.1 s of every rank
.venv/bin/python -m compileall -q difftrace_mpi

step "check: import difftrace_mpi and its kernels from another directory"
# from another directory: the editable install, not the current directory, finds the package
(cd / && "$OLDPWD/.venv/bin/python" -c 'import importlib, pathlib, difftrace_mpi.cli
kernels = pathlib.Path(difftrace_mpi.__file__).parent / "kernels"
for pyx in sorted(kernels.glob("*.pyx")):
    importlib.import_module("difftrace_mpi.kernels." + pyx.stem)')

if command -v make >/dev/null 2>&1; then
    step "tracer: make -C pin (pin/parlot-run, pin/libparlot.so, see pin/README.md)"
    make -s -C pin
else
    step "tracer: make not found, pin/ not built (see pin/README.md)"
fi
echo "setup.sh: done in $((SECONDS - START)) s: run .venv/bin/difftrace-mpi (or activate with 'source .venv/bin/activate')"
