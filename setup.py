"""Build script: the seven Cython kernels under difftrace_mpi/kernels/ become extension modules.

``pip install .`` builds a wheel and installs it: the kernels are cythonized and compiled in
a temporary directory outside the source tree (nothing is written into the checkout: no
generated .c/.cpp, no .so, no build/ or egg-info), several at a time (one per CPU).
``pip install -e .`` and ``python setup.py build_ext --inplace`` (what ``setup.sh`` runs)
leave the compiled kernels next to their sources; a kernel there newer than its .pyx is
taken as it is, so a rerun compiles only what changed.

``DIFFTRACE_MPI_BUILD_DIR`` names a build directory to use (and keep) instead of a
temporary one; ``DIFFTRACE_MPI_BUILD_JOBS`` (or ``build_ext -j N``) the number of kernels
compiled at once.
"""
import atexit
import glob
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
KERNEL_DIR = os.path.join("difftrace_mpi", "kernels")
CYTHON_DIRECTIVES = {"language_level": 3, "boundscheck": False, "wraparound": False, "cdivision": True,
                     "initializedcheck": False}

# Every build product goes here, outside the checkout: build_ext's objects and Cython's
# generated C, the wheel's staging, egg-info
BUILD_DIR = os.environ.get("DIFFTRACE_MPI_BUILD_DIR")
if not BUILD_DIR:
    BUILD_DIR = tempfile.mkdtemp(prefix="difftrace_mpi-build-")
    atexit.register(shutil.rmtree, BUILD_DIR, ignore_errors=True)


def _say(message):
    print(f"difftrace_mpi: {message}", file=sys.stderr, flush=True)


def _jobs(requested):
    if requested and requested is not True:
        return max(1, int(requested))
    if os.environ.get("DIFFTRACE_MPI_BUILD_JOBS"):
        return max(1, int(os.environ["DIFFTRACE_MPI_BUILD_JOBS"]))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:                       # not Linux
        return max(1, os.cpu_count() or 1)


class BuildKernels(build_ext):
    """Cythonizes (into the build directory) and compiles the kernels concurrently: Cython
    in a process pool, the C/C++ compilers in a thread pool (each compiler is a process of
    its own), the two C++ kernels first as they take longest.  A kernel whose compiled
    module is newer than its sources is not rebuilt."""

    def finalize_options(self):
        super().finalize_options()
        self.parallel = _jobs(self.parallel)

    def run(self):
        # setuptools' run() builds with inplace off, then copies the modules next to their sources
        self._in_place = bool(self.inplace) or getattr(self, "editable_mode", False)
        super().run()

    def _target(self, ext):
        return self.get_ext_fullpath(ext.name)

    def _beside_sources(self, ext):
        return os.path.join(HERE, self.get_ext_filename(ext.name))

    def _up_to_date(self, ext):
        """True when the compiled kernel (in the build directory, or next to its sources for
        an in-place or editable build) is newer than its sources; that copy is then put
        where this build expects it."""
        if self.force:
            return False
        newest_source = max(os.path.getmtime(s) for s in ext.sources + ext.depends)
        candidates = [self._target(ext)]
        if getattr(self, "_in_place", False):
            candidates.append(self._beside_sources(ext))
        for built in candidates:
            if os.path.exists(built) and os.path.getmtime(built) > newest_source:
                target = self._target(ext)
                if os.path.abspath(built) != os.path.abspath(target):
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    shutil.copy2(built, target)
                return True
        return False

    def build_extensions(self):
        self.check_extensions_list(self.extensions)
        todo = [e for e in self.extensions if not self._up_to_date(e)]
        fresh = len(self.extensions) - len(todo)
        if not todo:
            _say(f"the {fresh} kernels are up to date")
            return
        import numpy
        from Cython.Build import cythonize

        jobs = min(self.parallel, len(todo))
        _say(f"compiling {len(todo)} Cython kernel(s) ({', '.join(e.name.rsplit('.', 1)[1] for e in todo)}), "
             f"{jobs} at a time" + (f"; {fresh} up to date" if fresh else ""))
        start = time.perf_counter()
        for ext in todo:
            ext.include_dirs.append(numpy.get_include())
        cython_dir = os.path.join(self.build_temp, "cython")
        # cythonize writes the generated C/C++ into cython_dir (not next to the .pyx) and
        # returns the extensions with those as sources; force: the build directory may hold
        # C generated from older sources with newer timestamps (a seeded or reused one)
        generated = cythonize(todo, build_dir=cython_dir, nthreads=jobs if jobs > 1 else 0, quiet=True,
                              compiler_directives=CYTHON_DIRECTIVES, force=True)
        for ext, gen in zip(todo, generated):      # setuptools keeps its own state on its Extension objects
            assert ext.name == gen.name, (ext.name, gen.name)
            ext.sources, ext.language = gen.sources, gen.language
        _say(f"  cythonized in {time.perf_counter() - start:.0f} s")
        todo.sort(key=lambda e: (e.language != "c++", e.name))      # the long C++ compiles first

        def compile_one(ext):
            t = time.perf_counter()
            super(BuildKernels, self).build_extension(ext)
            _say(f"  {ext.name.rsplit('.', 1)[1]:<9} ({'C++' if ext.language == 'c++' else 'C'}) "
                 f"compiled in {time.perf_counter() - t:.0f} s")

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for future in [pool.submit(compile_one, ext) for ext in todo]:
                future.result()
        _say(f"kernels built in {time.perf_counter() - start:.0f} s")


kernels = [
    Extension(
        f"difftrace_mpi.kernels.{os.path.splitext(os.path.basename(pyx))[0]}",
        [pyx],
        depends=sorted(glob.glob(os.path.join(KERNEL_DIR, "*.pxd")) + glob.glob(os.path.join(KERNEL_DIR, "*.pxi"))),
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        # -g0: no debug information (Python's flags add -g), a third less compile time
        extra_compile_args=["-O3", "-g0"],
    )
    for pyx in sorted(glob.glob(os.path.join(KERNEL_DIR, "*.pyx")))
]

# What a user of the analyzer needs (pandas: the Python API's tables are DataFrames).  The
# MPI itself is not here: mpi4py is built against (or loads) the machine's MPI; on a laptop
# or in CI the `mpich` extra brings pip's MPICH, on a cluster mpi4py is built against the
# site's MPI (docs/install.md).
INSTALL_REQUIRES = ["mpi4py>=4", "numpy>=1.24", "scipy>=1.10", "h5py>=3.8", "pandas>=1.5"]
EXTRAS = {
    "mpich": ["mpich"],                         # pip's MPICH (laptops, CI): not on a cluster
    # pandas is a dependency now; the extra stays, empty, so that `pip install '.[pandas]'`
    # of older instructions still works
    "pandas": [],
    "png": ["matplotlib"],                      # report --png
    "otf2": ['otf2; python_version < "3.12"'],  # reading OTF2 archives (Score-P)
    "notebook": ["matplotlib", "nbclient", "nbformat", "ipykernel"],
    "test": ["pytest", "hypothesis"],
    "docs": ["mkdocs>=1.6"],                    # the documentation site from docs/ (mkdocs.yml)
}
# everything the test suite uses (what setup.sh installs, with mpich and the build tools)
EXTRAS["dev"] = sorted({r for name in ("test", "png", "otf2", "notebook", "docs") for r in EXTRAS[name]})

setup(
    name="difftrace_mpi",
    version="0.1.0",
    description="DiffTrace: whole-program trace diffing for MPI+OpenMP programs, as a scalable MPI analyzer",
    packages=find_packages(include=["difftrace_mpi", "difftrace_mpi.*"]),
    package_data={"difftrace_mpi.views": ["assets/*"]},     # the report's CSS and script, inlined into pages
    ext_modules=kernels,
    cmdclass={"build_ext": BuildKernels},
    options={"build": {"build_base": BUILD_DIR}, "egg_info": {"egg_base": BUILD_DIR}},
    python_requires=">=3.9",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["difftrace-mpi=difftrace_mpi.__main__:main"]},
)
