"""``pip install`` of a copy of the checkout gives a working ``difftrace-mpi`` command and
``import difftrace_mpi`` (its Python API) in another directory, without the source tree
on sys.path; and ``python -m difftrace_mpi`` inside the copy works too (the kernels are
left next to their sources).

To stay quick the test does not download or compile: the new venv reads the dependencies
from this venv's site-packages (a path in a .pth file: the .pth files there, such as an
editable install's finder, are not processed), pip builds without build isolation, and
the copy's build directory is seeded with this checkout's compiled kernels, so
``build_ext`` finds them up to date.  setup.sh compiles them from scratch (CI runs it
on a fresh machine).
"""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from conftest import EXAMPLES, ROOT

KERNELS = ROOT / "difftrace_mpi" / "kernels"
BUILD_PRODUCTS = (".git", ".venv", "build", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis", "out",
                  "*.so", "*.o", "*.h5")


def _copy_checkout(dest):
    """The checkout without build products, as a fresh clone has it (plus uncommitted edits)."""
    def ignore(directory, names):
        ignored = shutil.ignore_patterns(*BUILD_PRODUCTS)(directory, names)
        if os.path.samefile(directory, KERNELS):          # Cython's generated C and C++
            ignored |= {n for n in names if n.endswith((".c", ".cpp"))}
        return ignored
    shutil.copytree(ROOT, dest, ignore=ignore, symlinks=True)


def _seed_kernels(copy):
    """This checkout's compiled kernels into the copy's build directory, newer than their
    generated sources, which are newer than the .pyx: build_ext then skips them.  False
    when a kernel is not built here (the test then compiles: minutes)."""
    suffix = EXTENSION_SUFFIXES[0]
    names = [pyx.stem for pyx in sorted(KERNELS.glob("*.pyx"))]
    built = {n: KERNELS / (n + suffix) for n in names}
    generated = {n: next((KERNELS / (n + ext) for ext in (".cpp", ".c") if (KERNELS / (n + ext)).exists()), None)
                 for n in names}
    if not all(p.exists() for p in built.values()) or None in generated.values():
        return False
    build_lib = copy / "build" / f"lib.{sysconfig.get_platform()}-{sys.implementation.cache_tag}"
    lib = build_lib / "difftrace_mpi" / "kernels"
    lib.mkdir(parents=True)
    now = time.time()
    for n in names:
        c_file = copy / "difftrace_mpi" / "kernels" / generated[n].name
        shutil.copyfile(generated[n], c_file)
        os.utime(c_file, (now - 60, now - 60))
        shutil.copyfile(built[n], lib / built[n].name)
        os.utime(lib / built[n].name, (now, now))
    return True


def _run(cmd, cwd, env, timeout=300):
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.integration
def test_pip_install_gives_the_command_and_the_api_anywhere(tmp_path):
    copy, venv, elsewhere = tmp_path / "clone", tmp_path / "venv", tmp_path / "elsewhere"
    _copy_checkout(copy)
    _seed_kernels(copy)
    elsewhere.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    new_site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    with open(os.path.join(new_site, "dependencies.pth"), "w") as f:
        f.write("".join(p + "\n" for p in sorted(ours)))
    # pip's mpich puts libmpi and what it loads beside site-packages (<prefix>/lib), and
    # mpi4py looks for it under the running interpreter's prefix: what installing mpich
    # into the venv gives
    for entry in (Path(sys.prefix) / "lib").iterdir():
        if not entry.name.startswith("python") and not (venv / "lib" / entry.name).exists():
            (venv / "lib" / entry.name).symlink_to(entry)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(NO_COLOR="1", PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")

    # the MPI the new venv's mpi4py loads is pip's MPICH, as it would be installed there, not
    # a system MPI found on the loader's path: on a machine without one (a fresh Debian after
    # ./setup.sh alone) nothing else is there (issue 22: "cannot load MPI library")
    which = _run([python, "-c", "from mpi4py import MPI\n"
                  "print(MPI.Get_library_version().splitlines()[0])\n"
                  "print(next(l.split()[-1] for l in open('/proc/self/maps') if '/libmpi' in l))"], elsewhere, env)
    version, library = which.splitlines()[:2]
    assert "MPICH" in version, which
    assert os.path.realpath(library).startswith(os.path.join(os.path.realpath(sys.prefix), "")), \
        f"mpi4py in the new venv loaded {library}, not pip's MPICH under {sys.prefix}"

    _run([python, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps", copy], elsewhere, env)

    # the command, in another directory
    command = venv / "bin" / "difftrace-mpi"
    assert command.exists()
    out = _run([command, "analyze", EXAMPLES / "normal", EXAMPLES / "swapbug", "--filters", "11.mpi",
                "--attributes", "sing.noFreq", "--linkage", "ward", "--out", "diff.h5", "--json"], elsewhere, env)
    verdict = json.loads(out)["verdict"]
    assert verdict["kind"] == "changed" and verdict["culprits"][0]["rank"] == 5

    # the module and its API, there too, from the installed copy alone
    script = ("import sys, difftrace_mpi as d\n"
              f"assert not {{{str(ROOT)!r}, {str(copy)!r}}} & set(sys.path), sys.path\n"
              "r = d.analyze(sys.argv[1], sys.argv[2], filters=['11.mpi'], attributes=['sing.noFreq'],"
              " linkage=['ward'])\n"
              "with d.load('diff.h5') as stored:\n"
              "    assert stored.verdict == r.verdict\n"
              "print(d.__file__)\n"
              "print(r.verdict['kind'], r.verdict['culprits'][0]['rank'])\n")
    out = _run([python, "-c", script, EXAMPLES / "normal", EXAMPLES / "swapbug"], elsewhere, env).split("\n")
    assert out[0].startswith(new_site), f"imported {out[0]}, not the installed copy under {new_site}"
    assert out[1] == "changed 5"
    assert "difftrace_mpi" in _run([python, "-m", "difftrace_mpi", "--version"], elsewhere, env)

    # python -m difftrace_mpi inside the copy imports the copy's package: its kernels are there
    out = _run([python, "-m", "difftrace_mpi", "analyze", "examples/traces/oddeven/normal",
                "examples/traces/oddeven/swapbug", "--filters", "11.mpi", "--attributes", "sing.noFreq",
                "--linkage", "ward", "--json"], copy, env)
    assert json.loads(out)["verdict"]["kind"] == "changed"
