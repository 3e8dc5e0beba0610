"""``python -m difftrace_mpi`` and the ``difftrace-mpi`` command: see difftrace_mpi.cli.

Installs the interrupt handlers first (engine.choreography): Ctrl-C and SIGTERM end every
rank with 128 + the signal's number, leave no temp file, and print one line, never a
traceback, even during the imports.  BLAS runs on one thread per process unless the
environment says otherwise."""
import gc
import os
import signal
import sys

from .config import BLAS_THREAD_VARS

# one analysis process per core (MPI ranks): BLAS threads of its own would only contend
# for the cores, and idle ones spin.  Before numpy loads; a value already set is kept.
for _var in BLAS_THREAD_VARS:
    os.environ.setdefault(_var, "1")


class _Terminated(KeyboardInterrupt):
    exit_code = 128 + signal.SIGTERM


def _terminated(signum, frame):
    raise _Terminated()


def _exit_now(code):
    """End a one-process command without tearing its heap down object by object: a real
    run holds hundreds of MB to GBs of arrays, and freeing them at exit is a tenth of a
    second or more of every run for nothing.  Output is flushed first.  Where MPI started
    it returns, the collector frozen, and the process ends as usual (mpi4py finalizes MPI
    at exit: a rank that left right after MPI_Finalize was seen to get its peers, still
    finalizing, killed); so it does under a profiler or a tracer (sys.getprofile,
    sys.gettrace), which write their reports at exit."""
    mpi = sys.modules.get("mpi4py.MPI")
    started = mpi is not None and hasattr(mpi, "Is_initialized") and mpi.Is_initialized()
    if started:
        # the teardown's collection passes walk every object still alive (a rank's
        # shard, its tables): 0.025 s of a 2.9 s 2-rank run of real LULESH 216 x 1.  At
        # exit nothing is left for the collector to free that the process's end does not.
        gc.freeze()
        gc.disable()
    if started or sys.getprofile() is not None or sys.gettrace() is not None:
        return code
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):       # a closed pipe: nothing more can be said
            pass
    os._exit(0 if code is None else code if isinstance(code, int) else 1)       # as sys.exit reads it


def main(argv=None):
    """The command (``difftrace-mpi``, ``python -m difftrace_mpi``): its exit status.  A
    one-process command that ran to its end leaves the process at once (``_exit_now``);
    in-process callers use ``difftrace_mpi.cli.main``."""
    try:
        signal.signal(signal.SIGTERM, _terminated)      # until the real handlers are in place
        from . import kernels
        if not kernels.missing():       # the handlers' modules import them; without them cli_main says so, in one line
            from .engine.choreography import install_interrupt_handlers
            install_interrupt_handlers()
        from .cli import main as cli_main
        # a signal may still come while the command flushes its output and leaves
        return _exit_now(cli_main(argv))
    except KeyboardInterrupt as exc:
        code = getattr(exc, "exit_code", 128 + signal.SIGINT)
        from .engine.choreography import end_now, launched_ranks
        if launched_ranks() > 1:        # the other ranks may wait in MPI_Init for this one
            end_now(code)
        print("difftrace_mpi: interrupted", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
