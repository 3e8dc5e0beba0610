"""The one command line: ``python -m difftrace_mpi {analyze,decode,nlr,diffnlr,lattice,report}``.

Runs alone (a 1-rank MPI job) or under ``mpiexec``/``srun``; only ``analyze`` uses the
other ranks, the other subcommands run on rank 0.  User mistakes print one clear line and
exit 2; a failure inside an MPI step exits 1 after every rank has learnt of it.
"""
import argparse
import os
import sys

from .. import __version__
from ..errors import DiffTraceError
from . import analyze, decode, diffnlr, lattice, nlr, report
from .options import Parser, one_line, speaks

__all__ = ["main", "build_parser"]

COMMANDS = {"analyze": analyze, "decode": decode, "nlr": nlr, "diffnlr": diffnlr, "lattice": lattice, "report": report}


def program_name():
    """How the user started us, for usage lines: the ``difftrace-mpi`` command, else the module."""
    return "difftrace-mpi" if os.path.basename(sys.argv[0] or "") == "difftrace-mpi" else "python -m difftrace_mpi"


def build_parser():
    parser = Parser(
        prog=program_name(),
        description="DiffTrace: find what changed between a good run and a bad run of a parallel program "
                    "from per-thread call traces (ParLOT, uftrace, OTF2 or text format).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Start with 'analyze'; 'python -m difftrace_mpi analyze --help' explains the settings.")
    parser.add_argument("--version", action="version", version=f"difftrace_mpi {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS.values():
        command.add_parser(sub)
    return parser


def main(argv=None):
    from .. import kernels
    unbuilt = kernels.missing()
    if unbuilt:         # first: no command, not even --help, is of use without them
        print(f"difftrace_mpi: error: {kernels.not_built_message(unbuilt)}", file=sys.stderr)
        return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    from ..engine.choreography import StepFailed, world_rank, world_size
    try:
        if args.command == "analyze":
            try:
                return analyze.run(args)
            except StepFailed:
                raise
            except Exception as exc:
                if world_size() > 1:        # raised outside an agreed step: the others may be waiting
                    _end_job(exc)
                raise
        if world_rank() != 0:       # started under a launcher: the other commands are one process's work
            return 0
        return COMMANDS[args.command].run(args)
    except StepFailed as exc:
        if world_rank() == 0:      # a user error in one line; a bug with its traceback
            print(f"difftrace_mpi: error: {one_line(str(exc)) if exc.user_error else exc}", file=sys.stderr)
        return 2 if exc.user_error else 1
    except DiffTraceError as exc:
        if speaks():
            print(f"difftrace_mpi: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except MemoryError:      # a resource limit, not a bug: one line, no traceback
        print("difftrace_mpi: error: out of memory: the input needs more memory than this process may use",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:       # SIGINT or SIGTERM (engine.choreography.Interrupted)
        print("difftrace_mpi: interrupted", file=sys.stderr)
        return getattr(exc, "exit_code", 130)
    except BrokenPipeError:
        return 0


def _end_job(exc):
    """One rank failed outside an agreed step: say so (a user error in one line, a bug with
    its traceback) and end every rank, which would otherwise wait for it forever."""
    from ..engine.choreography import end_job_if_peers_may_wait, world_rank
    user_error = isinstance(exc, (DiffTraceError, MemoryError))
    if user_error:
        print(f"difftrace_mpi: error: rank {world_rank()}: {one_line(str(exc) or type(exc).__name__)}",
              file=sys.stderr)
    else:
        import traceback
        print(f"difftrace_mpi: error: rank {world_rank()}: internal error outside an agreed step", file=sys.stderr)
        traceback.print_exc()
    end_job_if_peers_may_wait(2 if user_error else 1)
