"""The memory budget of an analysis: every reader asks here before it allocates.

The budget bounds the resident memory (RSS) of the process: by default its RSS when the
budget is first asked for plus ``config.MEMORY_BUDGET_SHARE`` of the memory the kernel
says is available (``MemAvailable`` of /proc/meminfo), shared among the processes the MPI
launcher started on this node; ``DIFFTRACE_MEMORY_BUDGET`` (bytes,
or ``512M``, ``8G`` ...) or :func:`set_memory_budget` set it.  Because it is the process's
RSS that is compared, the budget covers every trace read so far and everything the
analysis holds, not one file at a time.

A reader estimates what decoding a file will hold (from its size, its record count or, for
ParLOT, a bound given to the codec) and calls :func:`check` before allocating; over the
budget it is a DiffTraceError naming the file and the budget, never a MemoryError.
Without /proc (not Linux) and without a budget set, nothing is bounded.
"""
import os
import re

from .. import config
from ..errors import DiffTraceError

__all__ = ["parse_size", "set_memory_budget", "memory_budget", "process_rss", "remaining", "check",
           "value_limit", "format_size", "over_budget"]

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
_UNSET = object()
_budget = _UNSET          # bytes (int), None (unbounded) or _UNSET (not computed yet)


def parse_size(text, what="memory budget"):
    """Bytes of ``"123"``, ``"512M"``, ``"1.5G"``, ``"8GiB"`` (units of 1024); DiffTraceError
    for anything else or for 0."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise DiffTraceError(f"{what} {str(text)[:40]!r} is not a size (bytes, or a number with K, M, G or T)")
    value = int(float(m[1]) * _UNITS[m[2].upper()])
    if value <= 0:
        raise DiffTraceError(f"{what} must be more than 0 bytes (got {str(text)[:40]!r})")
    return value


def format_size(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def _meminfo_available():
    try:
        with open("/proc/meminfo", "rb") as fh:
            for line in fh:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def process_rss():
    """Resident bytes of this process (0 where /proc is missing)."""
    try:
        fd = os.open("/proc/self/statm", os.O_RDONLY)
        try:
            fields = os.read(fd, 256).split()
        finally:
            os.close(fd)
        return int(fields[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


# Processes of one job on this node, as the launchers say (Open MPI, MPICH/Hydra, Slurm):
# they share the node's available memory.
_LOCAL_SIZE_VARS = ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE")


def _processes_on_this_node():
    for var in _LOCAL_SIZE_VARS:
        value = os.environ.get(var, "").split("(")[0].strip()     # Slurm may write "4(x2)"
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def _default_budget():
    env = os.environ.get(config.MEMORY_BUDGET_ENV, "").strip()
    if env:
        return parse_size(env, f"{config.MEMORY_BUDGET_ENV}=")
    available = _meminfo_available()
    if available is None:
        return None
    return process_rss() + int(available * config.MEMORY_BUDGET_SHARE) // _processes_on_this_node()


def set_memory_budget(size):
    """Set the budget: bytes (int), a size string (``"8G"``) or None for the default (from
    DIFFTRACE_MEMORY_BUDGET, else available memory, computed again at the next use)."""
    global _budget
    _budget = _UNSET if size is None else (parse_size(size) if isinstance(size, str) else int(size))
    if _budget is not _UNSET and _budget <= 0:
        _budget = _UNSET
        raise DiffTraceError(f"memory budget must be more than 0 bytes (got {size})")


def memory_budget():
    """The budget in bytes (the most RSS the process may reach), or None: unbounded."""
    global _budget
    if _budget is _UNSET:
        _budget = _default_budget()
    return _budget


def remaining():
    """Bytes the process may still grow by, or None (unbounded)."""
    budget = memory_budget()
    if budget is None:
        return None
    return max(budget - process_rss(), 0)


def over_budget(path, need, what="reading it"):
    """The error for a file whose reading would pass the budget."""
    budget = memory_budget()
    left = remaining() or 0
    need_text = f"at least {format_size(need)}" if need else "more memory"
    return DiffTraceError(f"{path}: {what} needs {need_text}, more than the {format_size(left)} left of "
                          f"the memory budget of {format_size(budget or 0)} (corrupt, a decompression "
                          f"bomb, or too big for this machine?); set the budget with --memory-budget or "
                          f"{config.MEMORY_BUDGET_ENV}")


def check(path, need, what="reading it"):
    """Raise DiffTraceError when holding ``need`` more bytes would pass the budget."""
    left = remaining()
    if left is not None and need > left:
        raise over_budget(path, need, what)


def value_limit(bytes_per_value, cap):
    """How many values a decoder may produce: ``cap``, or fewer when the budget left holds
    fewer at ``bytes_per_value`` each."""
    left = remaining()
    if left is None:
        return cap
    return min(cap, left // max(int(bytes_per_value), 1))
