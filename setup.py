"""Build script: the Cython kernels under difftrace_mpi/kernels/ become extension modules.

``pip install .`` installs the package and the ``difftrace-mpi`` command with the kernels
built; ``pip install -e .`` (what ``setup.sh`` runs) builds them next to their sources, as
``python setup.py build_ext --inplace`` does."""
import glob
import os
import shutil

import numpy
from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

kernels = [
    Extension(
        "difftrace_mpi.kernels." + os.path.splitext(os.path.basename(pyx))[0],
        [pyx],
        include_dirs=[numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O3"],
    )
    for pyx in sorted(glob.glob("difftrace_mpi/kernels/*.pyx"))
]


class BuildKernels(build_ext):
    """Builds the kernels and also leaves a copy next to their sources (what --inplace
    does), so that the checkout itself runs after ``pip install .``: inside it,
    ``python -m difftrace_mpi`` imports the checkout's package, not the installed one."""

    def run(self):
        super().run()
        if not self.inplace:            # inplace (and editable) builds copied them already
            self.copy_extensions_to_source()

    def build_extension(self, ext):
        # an editable install (setup.sh) compiles in a new temporary directory every time: a
        # kernel already next to its sources and newer than them is taken as it is
        beside_sources = self.get_ext_filename(ext.name)
        if getattr(self, "editable_mode", False) and not self.force and os.path.exists(beside_sources) and \
                os.path.getmtime(beside_sources) > max(os.path.getmtime(s) for s in ext.sources + ext.depends):
            target = self.get_ext_fullpath(ext.name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(beside_sources, target)
            return
        super().build_extension(ext)


PANDAS = ["pandas>=1.5"]

setup(
    name="difftrace_mpi",
    version="0.1.0",
    description="DiffTrace: whole-program trace diffing for MPI+OpenMP programs, as a scalable MPI analyzer",
    packages=find_packages(include=["difftrace_mpi", "difftrace_mpi.*"]),
    package_data={"difftrace_mpi.views": ["assets/*"]},     # the report's CSS and script, inlined into pages
    ext_modules=cythonize(kernels, language_level=3,
                          compiler_directives={"boundscheck": False, "wraparound": False,
                                               "cdivision": True, "initializedcheck": False}),
    cmdclass={"build_ext": BuildKernels},
    python_requires=">=3.9",
    install_requires=["mpich", "mpi4py>=4", "numpy>=1.24", "scipy>=1.10", "h5py>=3.8"],
    extras_require={
        "test": ["pytest", "hypothesis"],
        "pandas": PANDAS,                       # the results' tables as DataFrames (difftrace_mpi.api)
        "png": ["matplotlib"],                  # report --png
        "notebook": PANDAS + ["matplotlib", "nbclient", "nbformat", "ipykernel"],
    },
    entry_points={"console_scripts": ["difftrace-mpi=difftrace_mpi.__main__:main"]},
)
