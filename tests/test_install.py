"""Installing: what a user gets from ``pip install .``, what ``./setup.sh`` does, and that the
declared dependencies are the runtime ones (pip's MPICH and the tools of the tests and the
notebook are extras).

- ``pip install`` of a copy of the checkout gives a working ``difftrace-mpi`` command and
  ``import difftrace_mpi`` (its Python API) in another directory, without the source tree on
  sys.path, and writes nothing into the copy (no .so, no generated C, no build/ or egg-info:
  every file of the copy is compared before and after, .gitignore hides nothing here).
- ``./setup.sh`` prints one line per step, recompiles only the kernel whose .pyx changed,
  and a rerun with nothing changed compiles nothing.

To stay quick these do not download: the new venvs read the dependencies from this venv's
site-packages (a path in a .pth file: the .pth files there, such as an editable install's
finder, are not processed), pip builds without build isolation, and five of the six kernels
are seeded (in the build directory for ``pip install .``, next to their sources for
setup.sh) from this checkout's compiled ones.  The smallest, ``linkage``, is compiled for
real, so that cythonizing and compiling run in both.  CI runs ``./setup.sh`` from scratch on
a fresh machine (all six compiled).
"""
import hashlib
import json
import os
import re
import runpy
import shutil
import subprocess
import sys
import sysconfig
import time
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from conftest import EXAMPLES, ROOT

KERNELS = ROOT / "difftrace_mpi" / "kernels"
KERNEL_NAMES = sorted(p.stem for p in KERNELS.glob("*.pyx"))
COMPILED = "linkage"                 # the kernel the install tests compile (the quickest)
BUILD_PRODUCTS = (".git", ".venv", "build", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis", "out",
                  "*.so", "*.o", "*.h5")
# pandas: the Python API's tables are DataFrames, so it comes with the package (issue 39)
RUNTIME = {"mpi4py", "numpy", "scipy", "h5py", "pandas"}


# --------------------------------------------------------------------------- declared dependencies

@pytest.fixture(scope="module")
def setup_kwargs():
    """The arguments setup.py gives setuptools.setup (setup.py run in-process, setup() replaced)."""
    import setuptools
    captured = {}
    saved_setup, saved_env, saved_cwd = setuptools.setup, os.environ.pop("DIFFTRACE_MPI_BUILD_DIR", None), os.getcwd()
    setuptools.setup = lambda **kwargs: captured.update(kwargs)
    os.chdir(ROOT)                                  # where pip runs it
    try:
        runpy.run_path(str(ROOT / "setup.py"), run_name="__main__")
    finally:
        setuptools.setup = saved_setup
        os.chdir(saved_cwd)
        if saved_env is not None:
            os.environ["DIFFTRACE_MPI_BUILD_DIR"] = saved_env
    return captured


def _names(requirements):
    return {Requirement(r).name.lower() for r in requirements}


def _requirements_file(path):
    """The requirements of a requirements file, following -r includes."""
    out = []
    for line in path.read_text().splitlines():
        line = line.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-r "):
            out += _requirements_file(path.parent / line[3:].strip())
        else:
            out.append(line)
    return out


def _normal(requirements):
    return sorted({str(Requirement(r)) for r in requirements})


def test_install_requires_are_the_runtime_dependencies_only(setup_kwargs):
    install = setup_kwargs["install_requires"]
    assert _names(install) == RUNTIME, install
    assert "mpich" not in _names(install)          # the site's MPI, not a second one from pip (docs/install.md)
    assert any(str(Requirement(r).specifier) == ">=4" for r in install if Requirement(r).name == "mpi4py")


def test_extras_declare_pip_mpich_and_the_tools(setup_kwargs):
    extras = {name: _names(reqs) for name, reqs in setup_kwargs["extras_require"].items()}
    assert extras["mpich"] == {"mpich"}
    assert extras["test"] == {"pytest", "hypothesis"}
    # pandas is a runtime dependency now: its extra stays, empty, for older instructions
    assert extras["pandas"] == set() and extras["png"] == {"matplotlib"} and extras["otf2"] == {"otf2"}
    assert {"matplotlib", "nbclient", "nbformat", "ipykernel"} <= extras["notebook"]
    assert extras["docs"] == {"mkdocs"}
    # dev: everything the test suite uses, without the MPI
    assert extras["dev"] == set().union(*(extras[n] for n in ("test", "pandas", "png", "otf2", "notebook", "docs")))
    assert "mpich" not in extras["dev"]
    for name, reqs in extras.items():               # no extra re-declares a runtime dependency
        assert not reqs & RUNTIME, (name, reqs)


def test_requirements_files_agree_with_setup_py_and_pyproject(setup_kwargs):
    """requirements.txt (setup.sh's development environment) = install_requires + the mpich and
    dev extras + requirements-build.txt; requirements-build.txt = pyproject's build requires."""
    tomllib = pytest.importorskip("tomllib", reason="pyproject.toml is read with tomllib (Python 3.11 and later)")
    build = _requirements_file(ROOT / "requirements-build.txt")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert _normal(build) == _normal(pyproject["build-system"]["requires"])
    extras = setup_kwargs["extras_require"]
    expected = setup_kwargs["install_requires"] + extras["mpich"] + extras["dev"] + build
    # numpy is both a build tool and a runtime dependency, with the same bound
    assert _normal(_requirements_file(ROOT / "requirements.txt")) == _normal(expected)
    assert "numpy>=1.24" in _normal(build) and "numpy>=1.24" in _normal(setup_kwargs["install_requires"])


def _build_kernels_command(setup_kwargs, build, jobs):
    """setup.py's build_ext, finalized for a build into ``build`` (not in place)."""
    from setuptools import Distribution, Extension
    exts = [Extension(e.name, list(e.sources), depends=list(e.depends)) for e in setup_kwargs["ext_modules"]]
    dist = Distribution({"name": "difftrace_mpi", "ext_modules": exts,
                         "cmdclass": setup_kwargs["cmdclass"]})
    cmd = dist.get_command_obj("build_ext")
    cmd.build_lib, cmd.build_temp, cmd.parallel = str(build / "lib"), str(build / "temp"), jobs
    cmd.ensure_finalized()
    return cmd


def test_build_ext_compiles_the_kernels_concurrently_cpp_first(setup_kwargs, monkeypatch, tmp_path):
    """With 3 jobs, 3 kernels compile at once, the two C++ ones start first; Cython writes into
    the build directory; a kernel whose module is newer than its .pyx is not rebuilt.  (The
    compiler and Cython are stand-ins recording what they are asked: no process starts.)"""
    import threading
    import Cython.Build
    from setuptools.command.build_ext import build_ext as setuptools_build_ext
    monkeypatch.chdir(ROOT)
    cpp = {"lattice", "nlr"}
    asked = {}

    def cythonize(exts, build_dir=None, nthreads=0, force=False, **kwargs):
        asked.update(build_dir=build_dir, nthreads=nthreads, names=[e.name for e in exts])
        out = []
        for e in exts:
            short = e.name.rsplit(".", 1)[1]
            lang = "c++" if short in cpp else "c"
            g = type(e)(e.name, [os.path.join(build_dir, f"{short}.{'cpp' if lang == 'c++' else 'c'}")], language=lang)
            out.append(g)
        return out

    lock, running, peak, started = threading.Lock(), [0], [0], []

    def compile_one(self, ext):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            started.append(ext.name.rsplit(".", 1)[1])
        time.sleep(0.3)
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"")
        with lock:
            running[0] -= 1

    monkeypatch.setattr(Cython.Build, "cythonize", cythonize)
    monkeypatch.setattr(setuptools_build_ext, "build_extension", compile_one)
    cmd = _build_kernels_command(setup_kwargs, tmp_path, 3)
    assert cmd.parallel == 3
    cmd.build_extensions()
    assert sorted(started) == KERNEL_NAMES
    assert peak[0] == 3, f"at most {peak[0]} kernels compiled at once"
    assert set(started[:2]) == cpp, started
    assert Path(asked["build_dir"]).is_relative_to(tmp_path) and asked["nthreads"] == 3

    # again, with every module but linkage's newer than its .pyx: linkage alone
    started.clear()
    cmd = _build_kernels_command(setup_kwargs, tmp_path, 3)
    future = time.time() + 60
    for name in KERNEL_NAMES:
        so = Path(cmd.get_ext_fullpath(f"difftrace_mpi.kernels.{name}"))
        os.utime(so, (future, future) if name != COMPILED else (0, 0))
    cmd.build_extensions()
    assert started == [COMPILED] and asked["names"] == [f"difftrace_mpi.kernels.{COMPILED}"]


def test_setup_py_builds_outside_the_tree(setup_kwargs):
    """The build and egg-info directories setup.py gives setuptools (by default: a temporary
    directory, removed when setup.py ends) are outside the checkout; the kernels' sources are
    their .pyx (no generated C in the tree)."""
    options = setup_kwargs["options"]
    for where in (options["build"]["build_base"], options["egg_info"]["egg_base"]):
        assert not Path(where).resolve().is_relative_to(ROOT), where
    assert sorted(e.name.rsplit(".", 1)[1] for e in setup_kwargs["ext_modules"]) == KERNEL_NAMES
    assert all(e.sources == [f"difftrace_mpi/kernels/{e.name.rsplit('.', 1)[1]}.pyx"]
               for e in setup_kwargs["ext_modules"])


# --------------------------------------------------------------------------- helpers of the install runs

def _copy_checkout(dest):
    """The checkout without build products, as a fresh clone has it (plus uncommitted edits)."""
    def ignore(directory, names):
        ignored = shutil.ignore_patterns(*BUILD_PRODUCTS)(directory, names)
        if os.path.samefile(directory, KERNELS):          # Cython's C and C++ of older set-ups
            ignored |= {n for n in names if n.endswith((".c", ".cpp"))}
        return ignored
    shutil.copytree(ROOT, dest, ignore=ignore, symlinks=True)


def _snapshot(tree, skip=()):
    """{relative path: (type, size, sha256)} of everything under tree (but the top-level names
    in skip)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(tree):
        rel_dir = Path(dirpath).relative_to(tree)
        if rel_dir == Path("."):
            dirnames[:] = [d for d in dirnames if d not in skip]
            filenames = [f for f in filenames if f not in skip]
        for d in dirnames:
            out[str(rel_dir / d)] = ("dir", 0, "")
        for f in filenames:
            p = Path(dirpath) / f
            if p.is_symlink():
                out[str(rel_dir / f)] = ("link", 0, os.readlink(p))
            else:
                out[str(rel_dir / f)] = ("file", p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def _diff(before, after):
    return {"added": sorted(set(after) - set(before))[:20], "removed": sorted(set(before) - set(after))[:20],
            "changed": sorted(k for k in set(before) & set(after) if before[k] != after[k])[:20]}


def _built_kernels():
    suffix = EXTENSION_SUFFIXES[0]
    built = {n: KERNELS / (n + suffix) for n in KERNEL_NAMES}
    missing = [str(p) for p in built.values() if not p.exists()]
    if missing:
        pytest.fail(f"this checkout's kernels are not built ({missing}): run ./setup.sh first")
    return built


def _venv_reading_ours(venv):
    """A venv without pip whose site-packages reads this venv's (pip, the dependencies, the
    build tools), with pip's MPICH (libmpi, mpicc, mpi.h) where installing mpich would put it."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    new_site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    with open(os.path.join(new_site, "dependencies.pth"), "w") as f:
        f.write("".join(p + "\n" for p in sorted(ours)))
    # pip's mpich puts libmpi and what it loads beside site-packages (<prefix>/lib), mpicc and
    # mpiexec in bin, mpi.h in include; mpi4py looks for libmpi under the interpreter's prefix
    for sub in ("lib", "bin", "include"):
        (venv / sub).mkdir(exist_ok=True)
        source = Path(sys.prefix) / sub
        if not source.is_dir():
            continue
        for entry in source.iterdir():
            if not entry.name.startswith("python") and not (venv / sub / entry.name).exists():
                (venv / sub / entry.name).symlink_to(entry)
    return python, new_site


def _env():
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "DIFFTRACE_MPI_BUILD_DIR", "DIFFTRACE_MPI_BUILD_JOBS")}
    env.update(NO_COLOR="1", PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def _run(cmd, cwd, env, timeout=300):
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


# --------------------------------------------------------------------------- pip install .

@pytest.mark.integration
def test_pip_install_gives_the_command_and_the_api_anywhere_and_leaves_the_tree_alone(tmp_path):
    copy, venv, elsewhere, build = tmp_path / "clone", tmp_path / "venv", tmp_path / "elsewhere", tmp_path / "build"
    _copy_checkout(copy)
    elsewhere.mkdir()
    python, new_site = _venv_reading_ours(venv)
    env = _env()

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

    # the build directory (outside the copy) seeded with five of this checkout's kernels,
    # newer than their sources: build_ext takes them; linkage is cythonized and compiled
    build_lib = build / f"lib.{sysconfig.get_platform()}-{sys.implementation.cache_tag}" / "difftrace_mpi" / "kernels"
    build_lib.mkdir(parents=True)
    now = time.time()
    for name, so in _built_kernels().items():
        if name != COMPILED:
            shutil.copyfile(so, build_lib / so.name)
            os.utime(build_lib / so.name, (now + 5, now + 5))
    before = _snapshot(copy)
    _run([python, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps", copy], elsewhere,
         dict(env, DIFFTRACE_MPI_BUILD_DIR=str(build)))
    assert _snapshot(copy) == before, f"pip install . wrote into the source tree: {_diff(before, _snapshot(copy))}"
    generated = list(build.rglob(f"{COMPILED}.c"))
    assert generated and all(build in g.parents for g in generated), "linkage was not cythonized in the build directory"
    assert not list(copy.rglob("*.egg-info")) and not (copy / "build").exists()

    # the metadata: runtime dependencies; pip's MPICH only with the mpich extra
    dist_info = next(Path(new_site).glob("difftrace_mpi-*.dist-info"))
    requires = [line.split(":", 1)[1].strip() for line in (dist_info / "METADATA").read_text().splitlines()
                if line.startswith("Requires-Dist:")]
    unconditional = {Requirement(r).name.lower() for r in requires if Requirement(r).marker is None}
    assert unconditional == RUNTIME, requires
    assert any(Requirement(r).name == "mpich" and 'extra == "mpich"' in str(Requirement(r).marker) for r in requires)

    # the command, in another directory
    command = venv / "bin" / "difftrace-mpi"
    assert command.exists()
    out = _run([command, "analyze", EXAMPLES / "normal", EXAMPLES / "swapbug", "--filters", "11.mpi",
                "--attributes", "sing.noFreq", "--linkage", "ward", "--out", "diff.h5", "--json"], elsewhere, env)
    verdict = json.loads(out)["verdict"]
    assert verdict["kind"] == "changed" and verdict["culprits"][0]["rank"] == 5

    # the module and its API, there too, from the installed copy alone (its kernels included)
    script = ("import sys, difftrace_mpi as d, difftrace_mpi.kernels.linkage as k\n"
              f"assert not {{{str(ROOT)!r}, {str(copy)!r}}} & set(sys.path), sys.path\n"
              "r = d.analyze(sys.argv[1], sys.argv[2], filters=['11.mpi'], attributes=['sing.noFreq'],"
              " linkage=['ward'])\n"
              "with d.load('diff.h5') as stored:\n"
              "    assert stored.verdict == r.verdict\n"
              "print(d.__file__)\n"
              "print(k.__file__)\n"
              "print(r.verdict['kind'], r.verdict['culprits'][0]['rank'])\n")
    out = _run([python, "-c", script, EXAMPLES / "normal", EXAMPLES / "swapbug"], elsewhere, env).split("\n")
    assert out[0].startswith(new_site), f"imported {out[0]}, not the installed copy under {new_site}"
    assert out[1].startswith(new_site), f"the kernel {out[1]} is not the installed one"
    assert out[2] == "changed 5"
    assert "difftrace_mpi" in _run([python, "-m", "difftrace_mpi", "--version"], elsewhere, env)
    # the README's API example, as a reader runs it after this install (its example paths
    # copied beside it: the checkout must not be importable from there)
    readme = (ROOT / "README.md").read_text()
    example = re.search(r"```python\n(import difftrace_mpi\n.*?)```", readme, re.S).group(1)
    shutil.copytree(EXAMPLES, elsewhere / "examples" / "traces" / "oddeven")
    out = _run([python, "-c", example], elsewhere, env)
    assert "rank 5" in out and "depth" in out, out[-2000:]
    assert _snapshot(copy) == before


# --------------------------------------------------------------------------- ./setup.sh

STEP = re.compile(r"^setup\.sh \[(\d+)/(\d+)\] +(\d+)s  (\w[\w ]*): ", re.M)
STEPS = ["virtualenv", "build tools", "kernels", "dependencies", "package", "bytecode", "check", "tracer"]


def _steps(output):
    found = STEP.findall(output)
    assert [int(i) for i, *_ in found] == list(range(1, len(STEPS) + 1)), output
    assert {int(n) for _, n, *_ in found} == {len(STEPS)}, output
    seconds = [int(s) for _, _, s, _ in found]
    assert seconds == sorted(seconds), output
    assert [name for *_, name in found] == STEPS, output
    assert re.search(r"^setup\.sh: done in \d+ s", output, re.M), output


@pytest.mark.integration
def test_setup_sh_prints_each_step_and_recompiles_only_what_changed(tmp_path):
    """setup.sh in a copy whose .venv reads this one's packages (pip finds every requirement
    installed: no download), with the kernels next to their sources but linkage's .pyx newer
    than its module: one line per step, linkage alone recompiled, the editable install
    importable from elsewhere; a rerun compiles nothing and changes nothing."""
    copy = tmp_path / "clone"
    _copy_checkout(copy)
    _venv_reading_ours(copy / ".venv")
    now = time.time()
    for name, so in _built_kernels().items():
        target = copy / "difftrace_mpi" / "kernels" / so.name
        shutil.copyfile(so, target)
        os.utime(target, (now - 60, now - 60))
        os.utime(copy / "difftrace_mpi" / "kernels" / f"{name}.pyx",
                 (now, now) if name == COMPILED else (now - 120, now - 120))
    env = _env()

    proc = subprocess.run(["./setup.sh", "-j", "2"], cwd=copy, env=env, capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    _steps(proc.stdout)
    assert f"compiling 1 Cython kernel(s) ({COMPILED}), 1 at a time; {len(KERNEL_NAMES) - 1} up to date" in output
    assert re.search(rf"^difftrace_mpi:\s+{COMPILED}\s+\(C\) compiled in \d+ s$", output, re.M), output
    for name in KERNEL_NAMES:       # no generated C next to the sources, a module for each
        assert not (copy / "difftrace_mpi" / "kernels" / f"{name}.c").exists()
        assert not (copy / "difftrace_mpi" / "kernels" / f"{name}.cpp").exists()
        assert (copy / "difftrace_mpi" / "kernels" / f"{name}{EXTENSION_SUFFIXES[0]}").exists()
    assert not (copy / "build").exists() and not list(copy.glob("*.egg-info"))
    # the editable install: the copy's package from another directory
    where = _run([copy / ".venv" / "bin" / "python", "-c", "import difftrace_mpi; print(difftrace_mpi.__file__)"],
                 tmp_path, env)
    assert where.strip() == str(copy / "difftrace_mpi" / "__init__.py")
    # compiled once for every process of every run, whether or not bytecode may be written then
    for module in ("difftrace_mpi/engine/pipeline", "difftrace_mpi/stages/model/nlr", "difftrace_mpi/cli/__init__"):
        folder, name = (copy / module).parent, (copy / module).name
        assert list((folder / "__pycache__").glob(f"{name}.*.pyc")), f"no bytecode of {module}"

    before = _snapshot(copy, skip=(".venv",))
    again = subprocess.run(["./setup.sh"], cwd=copy, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    _steps(again.stdout)
    assert f"the {len(KERNEL_NAMES)} kernels are up to date" in again.stderr
    assert not re.search(r"compiling \d+ Cython kernel|compiled in", again.stdout + again.stderr)
    assert _snapshot(copy, skip=(".venv",)) == before, _diff(before, _snapshot(copy, skip=(".venv",)))
