"""Small helpers shared by the benchmarks: machine description, median timing, and a
wall-clock limit for baselines that run in this process."""
import contextlib
import os
import platform
import signal
import statistics
import time

import numpy as np


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def mem_gib():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return float("nan")


def machine_line():
    """One line naming the machine the figures come from."""
    import scipy
    return (f"machine: {platform.node() or '?'}: {cpu_model()}, {os.cpu_count()} cores, "
            f"{mem_gib():.0f} GiB, {platform.system()} {platform.release()} {platform.machine()}; "
            f"python {platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__}")


def timed(fn, repeat):
    """(median seconds over ``repeat`` calls, last result)."""
    times, out = [], None
    for _ in range(max(1, repeat)):
        out = None          # the previous result is freed first: one call's memory at a time
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


class BaselineTimeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds):
    """Raise BaselineTimeout in this (main) thread after ``seconds`` of wall time.  Works
    for pure-Python baselines, which check for signals between bytecodes."""
    if not seconds or seconds <= 0 or not hasattr(signal, "setitimer"):
        yield
        return

    def _alarm(signum, frame):
        raise BaselineTimeout()

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
