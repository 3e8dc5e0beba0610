"""Build script: the Cython kernels under difftrace_mpi/kernels/ become extension modules."""
import glob
import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup

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

setup(
    name="difftrace_mpi",
    version="0.1.0",
    description="DiffTrace: whole-program trace diffing for MPI+OpenMP programs, as a scalable MPI analyzer",
    packages=find_packages(include=["difftrace_mpi", "difftrace_mpi.*"]),
    package_data={"difftrace_mpi.views": ["assets/*"]},     # the report's CSS and script, inlined into pages
    ext_modules=cythonize(kernels, language_level=3,
                          compiler_directives={"boundscheck": False, "wraparound": False,
                                               "cdivision": True, "initializedcheck": False}),
    python_requires=">=3.9",
    install_requires=["mpich", "mpi4py>=4", "numpy>=1.24", "scipy>=1.10", "h5py>=3.8"],
    extras_require={"test": ["pytest", "hypothesis"]},
    entry_points={"console_scripts": ["difftrace-mpi=difftrace_mpi.__main__:main"]},
)
