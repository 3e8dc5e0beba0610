"""The memory budget of an analysis: every reader asks here before it allocates.

The budget bounds the resident memory (RSS) of the process: by default its RSS when the
budget is first asked for plus ``config.MEMORY_BUDGET_SHARE`` of the memory available to
it, shared among the processes the MPI launcher started on this node.  The memory
available is the least of what the kernel says the machine has (``MemAvailable`` of
/proc/meminfo) and what every memory cgroup the process is in still allows (cgroup v2
``memory.max``, v1 ``memory.limit_in_bytes``, less what the cgroup uses beyond its
reclaimable file cache): under Slurm ``--mem`` or in a container that is the job's
memory, not the node's.  ``DIFFTRACE_MEMORY_BUDGET`` (bytes, or ``512M``, ``8G`` ...),
``--memory-budget`` or :func:`set_memory_budget` set it.  Because it is the process's RSS
that is compared, the budget covers every trace read so far and everything the analysis
holds, not one file at a time.

A process limit (``ulimit -v``, the address space; ``ulimit -d``, the data segment) is
checked too, against the process's mapped size: what is left under it may be less than
the budget, and an error then names the limit, not the budget.

A reader estimates what decoding a file will hold (from its size, its record count or, for
ParLOT, a bound given to the codec) and calls :func:`check` before allocating; over the
budget it is a DiffTraceError naming the file and the budget, never a MemoryError.
Without /proc (not Linux) and without a budget set, nothing is bounded.
"""
import contextlib
import os
import re
import resource
from decimal import Decimal, InvalidOperation

from .. import config
from ..errors import DiffTraceError

__all__ = ["parse_size", "set_memory_budget", "memory_budget", "budget_source", "process_rss", "remaining",
           "check", "value_limit", "format_size", "over_budget", "available_memory", "cgroup_available"]

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
_UNSET = object()
_budget = _UNSET          # bytes (int), None (unbounded) or _UNSET (not computed yet)
_source = None            # where the budget came from, in words
MAX_SIZE = 2 ** 63 - 1    # the largest size taken (8 EiB): more is no budget, it is a mistake

# Where /proc and /sys are read: tests point it at a directory that stands in for a machine.
SYSTEM_ROOT = "/"


def parse_size(text, what="memory budget"):
    """Bytes of ``"123"``, ``"512M"``, ``"1.5G"``, ``"8GiB"`` (units of 1024); DiffTraceError
    for anything else, for 0 and for more than 2^63 - 1 bytes."""
    shown = str(text) if len(str(text)) <= 40 else str(text)[:37] + "..."
    m = _SIZE_RE.match(str(text))
    if not m:
        raise DiffTraceError(f"{what} {shown!r} is not a size (bytes, or a number with K, M, G or T)")
    try:
        value = int(Decimal(m[1]) * _UNITS[m[2].upper()])      # exact: no float overflow, no rounding
    except (InvalidOperation, OverflowError):
        value = MAX_SIZE + 1
    if value <= 0:
        raise DiffTraceError(f"{what} must be more than 0 bytes (got {shown!r})")
    if value > MAX_SIZE:
        raise DiffTraceError(f"{what} {shown!r} is too large (at most 2^63 - 1 bytes, 8 EiB)")
    return value


def format_size(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def _read_small(root, relative):
    """The text of a small kernel file under ``root``, or None."""
    try:
        with open(os.path.join(root, relative), "rb") as fh:
            return fh.read(1 << 16).decode("ascii", "replace")
    except (OSError, ValueError):
        return None


def _meminfo_available(root=None):
    text = _read_small(SYSTEM_ROOT if root is None else root, "proc/meminfo")
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "MemAvailable:" and fields[1].isascii() and fields[1].isdigit():
            return int(fields[1]) * 1024
    return None


_NO_LIMIT = 1 << 62        # cgroup v1 writes "no limit" as the largest page count (9223372036854771712)


def _number(text):
    """A cgroup file's non-negative integer, or None ("max", empty, garbage, missing)."""
    text = (text or "").strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 20 else None


def _stat_value(text, key):
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return _number(value) or 0
    return 0


# (version, mount point under /sys/fs/cgroup, limit file, usage file, reclaimable cache in memory.stat)
_CGROUP_FILES = {"v2": ("memory.max", "memory.current", "inactive_file"),
                 "v1": ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")}


def _cgroup_dirs(root):
    """[(version, directory)] of every memory cgroup level this process is in, its own
    first and the hierarchy's root last (from /proc/self/cgroup; only the roots when that
    file is missing, as in a cgroup namespace the process's path is "/" anyway)."""
    own = {"v2": "/", "v1": "/"}
    v1_mounts = ["sys/fs/cgroup/memory"]
    for line in (_read_small(root, "proc/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        number, controllers, path = parts
        if number == "0" and controllers == "":
            own["v2"] = path
        elif "memory" in controllers.split(","):
            own["v1"] = path
            if controllers != "memory":           # mounted with other controllers: cpu,memory
                v1_mounts.append("sys/fs/cgroup/" + controllers)
    out = []
    for version, mounts in (("v2", ["sys/fs/cgroup"]), ("v1", v1_mounts)):
        for mount in mounts:
            parts = [p for p in own[version].split("/") if p and p not in (".", "..")]
            for depth in range(len(parts), -1, -1):
                out.append((version, os.path.join(root, mount, *parts[:depth])))
    return out


def cgroup_available(root=None):
    """Bytes the memory cgroups of this process still allow it (cgroup v1 and v2): at every
    level from its own cgroup up to the root that sets a limit, the limit less what the
    cgroup uses beyond its inactive file cache (which the kernel reclaims first); the least
    of those, or None when no level sets a limit.  ``root``: where /proc and /sys are
    (default :data:`SYSTEM_ROOT`)."""
    root = SYSTEM_ROOT if root is None else root
    best = None
    for version, directory in _cgroup_dirs(root):
        limit_file, usage_file, cache_key = _CGROUP_FILES[version]
        limit = _number(_read_small(directory, limit_file))
        if limit is None or limit >= _NO_LIMIT:
            continue
        usage = _number(_read_small(directory, usage_file))
        if usage is not None:
            usage = max(usage - _stat_value(_read_small(directory, "memory.stat"), cache_key), 0)
        left = max(limit - (usage or 0), 0)
        best = left if best is None else min(best, left)
    return best


def available_memory(root=None):
    """Bytes of memory available to this process: the least of the machine's
    (MemAvailable) and its cgroups' (:func:`cgroup_available`); None when neither is known."""
    known = [v for v in (_meminfo_available(root), cgroup_available(root)) if v is not None]
    return min(known) if known else None


def _statm():
    """(mapped size, resident, data + stack) of this process in bytes; zeros without /proc."""
    try:
        fd = os.open("/proc/self/statm", os.O_RDONLY)
        try:
            fields = os.read(fd, 256).split()
        finally:
            os.close(fd)
        page = os.sysconf("SC_PAGE_SIZE")
        return int(fields[0]) * page, int(fields[1]) * page, int(fields[5]) * page
    except (OSError, ValueError, IndexError):
        return 0, 0, 0


def process_rss():
    """Resident bytes of this process (0 where /proc is missing)."""
    return _statm()[1]


# The process limits a decoder meets before the budget: (resource, statm field, words).
_PROCESS_LIMITS = ((getattr(resource, "RLIMIT_AS", None), 0, ("address-space limit", "ulimit -v")),
                   (getattr(resource, "RLIMIT_DATA", None), 2, ("data-segment limit", "ulimit -d")))


def _process_limit_left(statm=None):
    """(bytes left, the limit, (its name, its ulimit option)) under the tightest process
    limit, or None."""
    best = None
    for res, field, words in _PROCESS_LIMITS:
        if res is None:
            continue
        try:
            soft = resource.getrlimit(res)[0]
        except (OSError, ValueError):
            continue
        if soft == resource.RLIM_INFINITY or soft < 0:
            continue
        statm = statm or _statm()
        if not statm[0]:
            continue
        left = max(soft - statm[field], 0)
        if best is None or left < best[0]:
            best = (left, soft, words)
    return best


# Processes of one job on this node, as the launchers say (Open MPI, MPICH/Hydra, Slurm):
# they share the node's available memory.
_LOCAL_SIZE_VARS = ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE")
_COUNT_RE = re.compile(r"[0-9]{1,7}")       # ASCII digits only: int() also takes "²" and "٣"


def _processes_on_this_node():
    for var in _LOCAL_SIZE_VARS:
        value = os.environ.get(var, "").split("(")[0].strip()     # Slurm may write "4(x2)"
        if _COUNT_RE.fullmatch(value) and int(value) > 0:
            return int(value)
    return 1


def _default_budget():
    """(budget or None, where it came from)."""
    env = os.environ.get(config.MEMORY_BUDGET_ENV, "").strip()
    if env:
        return parse_size(env, f"{config.MEMORY_BUDGET_ENV}="), config.MEMORY_BUDGET_ENV
    machine, cgroup = _meminfo_available(), cgroup_available()
    known = [v for v in (machine, cgroup) if v is not None]
    if not known:
        return None, None
    available = min(known)
    processes = _processes_on_this_node()
    source = (f"{config.MEMORY_BUDGET_SHARE:.0%} of the memory available to "
              + ("this process's cgroup (a job or container limit)" if cgroup == available else "this machine")
              + (f", shared by {processes} processes on this node" if processes > 1 else ""))
    return process_rss() + int(available * config.MEMORY_BUDGET_SHARE) // processes, source


def budget_bytes(size):
    """A budget in bytes from bytes (int) or a size string (``"8G"``); None stays None.
    Raises DiffTraceError for a size that is no budget (check it before any work)."""
    if size is None:
        return None
    value = parse_size(size) if isinstance(size, str) else int(size)
    if value <= 0:
        raise DiffTraceError(f"memory budget must be more than 0 bytes (got {size})")
    return value


def set_memory_budget(size, source=None):
    """Set the budget: bytes (int), a size string (``"8G"``) or None for the default (from
    DIFFTRACE_MEMORY_BUDGET, else available memory, computed again at the next use).
    ``source``: where it came from, for messages (``"--memory-budget"``)."""
    global _budget, _source
    if size is None:
        _budget, _source = _UNSET, None
        return
    _budget, _source = budget_bytes(size), source or "set by the caller"


@contextlib.contextmanager
def budget_for_call(size, source=None):
    """The budget ``size`` (None: as it is) for the work inside, then the one before, so
    that one call's budget, or the default it computed, is not left to the next."""
    global _budget, _source
    saved = (_budget, _source)
    if size is not None:
        set_memory_budget(size, source)
    try:
        yield
    finally:
        _budget, _source = saved


def memory_budget():
    """The budget in bytes (the most RSS the process may reach), or None: unbounded."""
    global _budget, _source
    if _budget is _UNSET:
        _budget, _source = _default_budget()
    return _budget


def budget_source():
    """Where the budget came from, in words (None: no budget)."""
    memory_budget()
    return _source


def remaining():
    """Bytes the process may still grow by (under the budget and under its own process
    limits), or None (unbounded)."""
    budget = memory_budget()
    statm = _statm()
    left = None if budget is None else max(budget - statm[1], 0)
    limit = _process_limit_left(statm)
    if limit is not None and (left is None or limit[0] < left):
        left = limit[0]
    return left


def over_budget(path, need, what="reading it"):
    """The error for a file whose reading would pass the budget, or the process's own
    limit when that is the one left with less."""
    budget = memory_budget()
    statm = _statm()
    left = None if budget is None else max(budget - statm[1], 0)
    limit = _process_limit_left(statm)
    need_text = f"at least {format_size(need)}" if need else "more memory"
    if limit is not None and (left is None or limit[0] < left):
        name, option = limit[2]
        return DiffTraceError(f"{path}: {what} needs {need_text}, more than the {format_size(limit[0])} left "
                              f"under this process's {name} of {format_size(limit[1])} ({option}; corrupt, a "
                              f"decompression bomb, or too big for this limit?); raise the limit, or set a memory "
                              f"budget below it to stop earlier (--memory-budget or {config.MEMORY_BUDGET_ENV})")
    where = f" ({_source})" if _source else ""
    return DiffTraceError(f"{path}: {what} needs {need_text}, more than the {format_size(left or 0)} left of "
                          f"the memory budget of {format_size(budget or 0)}{where} (corrupt, a decompression "
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
