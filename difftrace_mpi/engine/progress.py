"""Progress lines on the root's stderr, through the whole run.

Two modes.  ``LINES`` (a terminal, or ``--progress``): every milestone as it comes, the end
of every step that took a second or more, and a line naming the step under way when
nothing was printed for ``config.PROGRESS_QUIET_S`` (one long step is not silence).
``BATCH`` (stderr is a file: a Slurm log): one line every ``config.PROGRESS_BATCH_S``
with the step under way and the latest milestone, and none for a run shorter than that;
a log then shows a long analysis alive without filling up, and how it ended.  Each line starts with the
elapsed time and the peak RSS.  A daemon thread writes the timed lines; it only reads
what the analysis sets (the step stack, the latest milestone)."""
import os
import resource
import sys
import threading
import time

from .. import config

OFF, LINES, BATCH = None, "lines", "batch"
STEP_WORTH_A_LINE_S = 1.0       # LINES: a step that took this long says when it ended


def peak_rss_mb():
    """Peak resident set size of this process, MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def process_age():
    """Seconds since this process started (Linux: /proc), or 0.0 where unknown."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as up:
            started = int(stat.read().rsplit(")", 1)[1].split()[19])      # field 22: start time, ticks
            return max(0.0, float(up.read().split()[0]) - started / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def mode_for(progress):
    """The mode of a ``progress`` value: True or "lines", "batch", False or None (off)."""
    if progress is True or progress == LINES:
        return LINES
    if progress == BATCH:
        return BATCH
    if progress in (False, None):
        return OFF
    raise ValueError(f"progress must be True, False, {LINES!r} or {BATCH!r}, not {progress!r}")


class Progress:
    def __init__(self, mode, stream=None):
        self.mode = mode
        self.stream = stream
        self._t0 = self._last_line = time.perf_counter()
        self._steps = []            # (name, start) of the steps under way, innermost last
        self._latest = None         # BATCH: the latest milestone, shown with the next line
        self._stop = threading.Event()
        self._thread = None
        if mode is not OFF:
            self._thread = threading.Thread(target=self._beat, name="difftrace-progress", daemon=True)
            self._thread.start()

    @property
    def on(self):
        return self.mode is not OFF

    def say(self, message):
        if self.mode is LINES:
            self._print(message)
        elif self.mode is BATCH:
            self._latest = message

    def each_interval(self):
        """Seconds between the lines of a loop over items (``Choreography.each``)."""
        return 2.0 if self.mode is LINES else config.PROGRESS_BATCH_S

    def begin(self, name):
        if self.on:
            self._steps.append((name, time.perf_counter()))

    def end(self, name, seconds):
        if not self.on:
            return
        if self._steps and self._steps[-1][0] == name:
            self._steps.pop()
        if self.mode is LINES and seconds >= STEP_WORTH_A_LINE_S:
            self._print(f"{name}: {seconds:.1f} s")

    def close(self, finished=False):
        """Stop the timed lines; a batch log that had any is told when the analysis
        ``finished`` (a failure says so itself)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)
            self._thread = None
            if finished and self.mode is BATCH and self._last_line > self._t0:
                self._print("analysis finished")

    def _print(self, message):
        now = time.perf_counter()
        self._last_line = now
        print(f"[{now - self._t0:7.1f}s {peak_rss_mb():6.0f} MB] {message}", file=self.stream or sys.stderr,
              flush=True)

    def _beat(self):
        quiet = config.PROGRESS_QUIET_S if self.mode is LINES else config.PROGRESS_BATCH_S
        while not self._stop.wait(min(0.25, quiet / 4)):
            now = time.perf_counter()
            steps = list(self._steps)
            if now - self._last_line < quiet or not steps:
                continue
            name, start = steps[-1]
            line = f"{name} ({now - start:.0f} s in this step)"
            latest, self._latest = self._latest, None
            self._print(line if latest is None else f"{line}; {latest}")
