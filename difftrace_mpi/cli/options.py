"""What every command shares: option types checked when parsed (one clear usage line,
exit 2), the parser whose usage errors one rank prints, the filter options, colour,
the command line's wording of the output checks."""
import argparse
import os
import sys

from .. import config
from ..jobs import Wording
from ..launch import launcher_rank
from ..jobs import check_outputs as jobs_check_outputs


# Option values are checked when parsed: a bad one is argparse's one-line usage error (exit 2),
# never a silent default, an empty result or an OverflowError deep inside.
ID_LIMIT = 2 ** 63              # rank and thread ids are stored as int64
COUNT_LIMIT = 2 ** 31 - 1       # counts and caps: beyond any real run, and within every kernel's int


def int_in(low, high, meaning):
    """An argparse type: an integer in low..high, else one clear line saying what is allowed."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid value {text!r}: {meaning}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"invalid value {text!r}: {meaning}")
        return value
    parse.__name__ = meaning        # argparse names the type in some of its messages
    return parse


def k_bound():
    from ..stages.model.filters import K_MAX
    return int_in(2, K_MAX, f"K must be between 2 and {K_MAX}")


POSITIVE = int_in(1, COUNT_LIMIT, f"must be a whole number from 1 to {COUNT_LIMIT}")
NON_NEGATIVE = int_in(0, COUNT_LIMIT, f"must be a whole number from 0 to {COUNT_LIMIT}")
TRACE_ID = int_in(0, ID_LIMIT - 1, "ids are whole numbers from 0 to 2^63 - 1")
_TOKENS = int_in(0, ID_LIMIT - 1, "give a whole number of tokens, or 'all'")


def TOKEN_BUDGET(text):      # noqa: N802 (an argparse type, named like the others)
    """A token budget: a whole number, or 'all' (None: no bound)."""
    return None if text.strip().lower() == "all" else _TOKENS(text)


TOKEN_BUDGET.__name__ = "token budget"


def path_named(what):
    """An argparse type: a path that is not empty (an empty one would write nothing and exit 0)."""
    def parse(text):
        if not text:
            raise argparse.ArgumentTypeError(f"an empty {what} name: give a path")
        return text
    parse.__name__ = what
    return parse


OUTPUT_FILE = path_named("file")
OUTPUT_DIR = path_named("directory")


def speaks():
    """Whether this process says an error every rank met alike: rank 0 of MPI, or, before
    MPI starts (a mistake every rank finds the same way, such as a bad option value), the
    launcher's rank 0."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        return mpi.COMM_WORLD.Get_rank() == 0
    return launcher_rank() == 0


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors every rank of a launched job finds alike (they
    parse the same command line, before MPI starts): only the first rank prints it."""

    def error(self, message):
        if launcher_rank() == 0:
            self.print_usage(sys.stderr)
            sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def add_filter_args(p, multiple):
    if multiple:
        p.add_argument("--filters", nargs="+", metavar="SPEC", default=None,
                       help=f"filter specs for the grid (default: {' '.join(config.DEFAULT_FILTERS)})")
    else:
        p.add_argument("--filter", default=config.SINGLE_FILTER, metavar="SPEC",
                       help=f"filter spec (default {config.SINGLE_FILTER}: MPI calls, returns and PLT stubs dropped)")
    p.add_argument("--custom", metavar="REGEX", help="regular expression for the 'cust' filter class")


def color_wanted(choice):
    return choice == "always" or (choice == "auto" and sys.stdout.isatty() and not os.environ.get("NO_COLOR"))


def one_line(message):
    """A user error stays one line even when a file name in it holds a newline or another
    control character: those are written as escapes (\\n, \\x1b, ...)."""
    from ..escape import visible
    return visible(message)


# Every output flag goes through jobs.check_outputs before any work starts, in this
# command line's words (--force, --memory-budget, --also-normal, --out).

CLI_WORDING = Wording(overwrite="use --force to overwrite it", memory_budget="--memory-budget",
                      also_normal="--also-normal", out="--out")

PNG_NAMES = ("heatmaps_thread.png", "heatmaps_process.png", "subsumption_thread.png",
             "subsumption_process.png", "dendrograms.png")      # what report --png may write


def check_outputs(outputs, inputs, force, created_dirs=()):
    """``jobs.check_outputs`` with the command line's wording."""
    jobs_check_outputs(outputs, inputs, force, created_dirs, wording=CLI_WORDING)
