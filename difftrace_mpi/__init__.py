"""difftrace_mpi: DiffTrace (Taheri et al., IEEE Cluster 2019) as a scalable MPI analyzer.

For scripts and notebooks (docs/api.md)::

    import difftrace_mpi
    r = difftrace_mpi.analyze("runs/good", "runs/bad")      # or difftrace_mpi.load("diff.h5")
    r.verdict["summary"], r.ranking_table(), r.hang_table(), difftrace_mpi.diffnlr(r, 5)

The command line is ``difftrace-mpi`` (``python -m difftrace_mpi``).
"""
__version__ = "0.1.0"

# loaded on first use: ``python -m difftrace_mpi`` imports this package before it can
# install its interrupt handlers, so it must stay light (numpy, SciPy, h5py come later)
_API = {"analyze": "api", "load": "api", "diffnlr": "api", "load_run": "api", "DiffNLR": "api", "Results": "results", "DiffTraceError": "errors"}
__all__ = ["__version__", *_API]


def __getattr__(name):
    if name not in _API:
        raise AttributeError(f"module 'difftrace_mpi' has no attribute {name!r}")
    from importlib import import_module
    value = getattr(import_module(f"{__name__}.{_API[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_API))
