"""Process tuning for the analysis: glibc's allocator keeps freed memory, numpy's arrays on
small pages, BLAS on one thread per rank.  Measured on real traces (each function says
where); every setting is left as the user chose it where the environment says so."""
import contextlib
import ctypes
import os

from .. import config


def keep_freed_memory():
    """Ask glibc's allocator to reuse freed memory instead of returning it to the system
    after every large array: a real run allocates and frees trace-sized arrays (tens of
    MB) hundreds of times, and each fresh mapping costs page faults (on 8 x 2 LULESH, 2.8
    of 8.2 CPU seconds were system time; 1.2 with this).  Arrays over 32 MiB are mapped
    as before.  Elsewhere (musl, macOS) nothing changes."""
    try:
        libc = ctypes.CDLL(None)
        m_trim_threshold, m_mmap_threshold = -1, -3
        libc.mallopt(m_mmap_threshold, 32 << 20)
        libc.mallopt(m_trim_threshold, 1 << 30)
    except (OSError, AttributeError):
        pass
    small_pages_for_arrays()


def release_freed_memory():
    """Give the memory freed so far back to the system (glibc's ``malloc_trim``), once, where
    the process has just dropped most of what it held: ``keep_freed_memory`` keeps freed
    memory for reuse, so without this the trace events a rank drops after the grid (half
    of its memory on real LULESH) would still count in its resident size while the
    lattices, JSMs and outputs allocate theirs.  Elsewhere (musl, macOS) nothing happens."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def small_pages_for_arrays():
    """Stop numpy asking the kernel for transparent huge pages (madvise) on its arrays of
    4 MiB and more, unless the user chose with NUMPY_MADVISE_HUGEPAGE.  Where the kernel
    grants them only on request (THP "madvise", as on Debian), each first touch zeroes a
    whole 2 MiB page: on 8 x 2 LULESH system time went from 0.50-0.72 to 0.33-0.36 s
    of ~3.3 CPU seconds without them, user time unchanged, and the run-to-run spread of
    the NLR steps with it."""
    if "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        return
    try:
        from numpy._core import multiarray
    except ImportError:         # numpy 1.x
        from numpy.core import multiarray
    setter = getattr(multiarray, "_set_madvise_hugepage", None)
    if setter is not None:
        setter(False)


def _openblas_thread_controls():
    """(get, set) thread-count functions of every OpenBLAS loaded in this process (numpy's
    bundled one names them scipy_openblas_..._64_), found in /proc/self/maps."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "openblas" in line.lower() and "/" in line})
    except OSError:
        return []
    controls = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix in ("", "scipy_"):
            for suffix in ("", "64_"):
                get, put = (f"{prefix}openblas_{verb}_num_threads{suffix}" for verb in ("get", "set"))
                if hasattr(lib, get) and hasattr(lib, put):
                    controls.append((getattr(lib, get), getattr(lib, put)))
    return controls


@contextlib.contextmanager
def blas_threads(n):
    """BLAS on at most ``n`` threads inside, as before afterwards; nothing where the
    environment chose a thread count.  A program that loaded numpy before it calls the
    analysis (the API under mpiexec) has OpenBLAS start a thread per core in every rank:
    with 2 ranks on 2 cores, the JSM products took 0.29 s instead of 0.04 s."""
    controls = [] if any(var in os.environ for var in config.BLAS_THREAD_VARS) else _openblas_thread_controls()
    before = [get() for get, _ in controls]
    for _, put in controls:
        put(n)
    try:
        yield
    finally:
        for (_, put), count in zip(controls, before):
            put(count)
