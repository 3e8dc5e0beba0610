"""The Cython kernels (``*.pyx``): compiled by ``./setup.sh`` or ``pip install``; they
compute and return status codes, their Python faces in ``stages`` and ``readers`` raise."""
import importlib.util
import os

NAMES = ("lattice", "linkage", "nlr", "order", "otf2read", "parlot", "sparse", "textread")


def missing():
    """The kernels that are not built next to this package (without importing any)."""
    return [name for name in NAMES if importlib.util.find_spec(f"{__name__}.{name}") is None]


def not_built_message(names):
    """One line for a package whose kernels are not compiled: usually a source checkout
    run without ./setup.sh, or a checkout shadowing the installed package."""
    where = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return (f"the compiled kernels ({', '.join(names)}) are missing from {where}: in a source checkout run "
            "./setup.sh; after pip install, run difftrace-mpi from outside the checkout")
