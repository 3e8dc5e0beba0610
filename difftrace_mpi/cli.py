"""The one command line: ``python -m difftrace_mpi {analyze,decode,nlr,diffnlr}``.

Runs alone (a 1-rank MPI job) or under ``mpiexec``/``srun``; only ``analyze`` uses the
other ranks, the other subcommands run on rank 0.  User mistakes print one clear line and
exit 2; a failure inside an MPI step exits 1 after every rank has learnt of it.
"""
import argparse
import json
import os
import sys

import numpy as np

from . import __version__, config
from .config import DIFF_MAX_COST
from .errors import DiffTraceError
from .fsutil import write_text_atomic as _atomic_write_text
from .jobs import Wording, make_grid, run_analysis
from .jobs import check_outputs as _check_outputs

EPILOG_ANALYZE = """\
examples:
  python -m difftrace_mpi analyze examples/traces/oddeven/normal examples/traces/oddeven/swapbug
  python -m difftrace_mpi analyze runs/good runs/bad --filters 11.mpi 11.mpicol.K20 --attributes sing.actual \\
         --linkage ward --out diff.h5 --json
  srun -n 64 python -m difftrace_mpi analyze runs/good runs/bad --out diff.h5

what it does: decode every trace of both runs, keep the functions a filter selects, summarise loops
(NLR, bound K), turn each trace into attributes, compare all traces pairwise (Jaccard similarity
matrices, JSM), diff the two runs' JSMs and cluster them.  Each (filter, attributes, K, linkage)
setting is one row of the ranking table, sorted by B-score (low = the fault changed the clustering
most), settings that single out fewer than half of the ranks first (others are marked ~); each row
names the processes/threads whose similarity to the others changed most.  The
diffNLR of the top suspect shows where its faulty trace leaves the normal one.

filters (grammar: [BITS.]CLASS[.CLASS...][.K<n>]; BITS = drop-returns drop-plt, default 11):
  mpi mpicol mpisr mpiall ompall ompcrit ompmutex mem net poll str cust every
  e.g. 11.mpi (MPI calls only), 11.mpi.ompcrit, 10.every (keep returns), 11.cust.K20 with --custom REGEX
attributes: sing|doub|call . noFreq|log10|log2|actual   (sing = each NLR token, doub = consecutive
  token pairs, call = caller -> callee pairs with a virtual root; call is not in the default grid)
linkages: single complete average weighted ward
"""


# Option values are checked when parsed: a bad one is argparse's one-line usage error (exit 2),
# never a silent default, an empty result or an OverflowError deep inside.
ID_LIMIT = 2 ** 63              # rank and thread ids are stored as int64
COUNT_LIMIT = 2 ** 31 - 1       # counts and caps: beyond any real run, and within every kernel's int


def _int_in(low, high, meaning):
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


def _k_bound():
    from .stages.filters import K_MAX
    return _int_in(2, K_MAX, f"K must be between 2 and {K_MAX}")


POSITIVE = _int_in(1, COUNT_LIMIT, f"must be a whole number from 1 to {COUNT_LIMIT}")
NON_NEGATIVE = _int_in(0, COUNT_LIMIT, f"must be a whole number from 0 to {COUNT_LIMIT}")
TRACE_ID = _int_in(0, ID_LIMIT - 1, "ids are whole numbers from 0 to 2^63 - 1")


def _path_named(what):
    """An argparse type: a path that is not empty (an empty one would write nothing and exit 0)."""
    def parse(text):
        if not text:
            raise argparse.ArgumentTypeError(f"an empty {what} name: give a path")
        return text
    parse.__name__ = what
    return parse


OUTPUT_FILE = _path_named("file")
OUTPUT_DIR = _path_named("directory")


def _launcher_rank():
    """This process's rank as the launcher (mpiexec, srun) says, before MPI starts; 0 alone."""
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        value = os.environ.get(var, "")
        if value.isascii() and value.isdigit():
            return int(value)
    return 0


def _speaks():
    """Whether this process says an error every rank met alike: rank 0 of MPI, or, before
    MPI starts (a mistake every rank finds the same way, such as a bad option value), the
    launcher's rank 0."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        return mpi.COMM_WORLD.Get_rank() == 0
    return _launcher_rank() == 0


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors every rank of a launched job finds alike (they
    parse the same command line, before MPI starts): only the first rank prints it."""

    def error(self, message):
        if _launcher_rank() == 0:
            self.print_usage(sys.stderr)
            sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def _add_filter_args(p, multiple):
    if multiple:
        p.add_argument("--filters", nargs="+", metavar="SPEC", default=None,
                       help=f"filter specs for the grid (default: {' '.join(config.DEFAULT_FILTERS)})")
    else:
        p.add_argument("--filter", default=config.SINGLE_FILTER, metavar="SPEC",
                       help=f"filter spec (default {config.SINGLE_FILTER}: MPI calls, returns and PLT stubs dropped)")
    p.add_argument("--custom", metavar="REGEX", help="regular expression for the 'cust' filter class")


def build_parser():
    parser = _Parser(
        prog="python -m difftrace_mpi",
        description="DiffTrace: find what changed between a good run and a bad run of a parallel program "
                    "from per-thread call traces (ParLOT, uftrace, OTF2 or text format).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Start with 'analyze'; 'python -m difftrace_mpi analyze --help' explains the settings.")
    parser.add_argument("--version", action="version", version=f"difftrace_mpi {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    a = sub.add_parser("analyze", help="rank suspicious processes/threads between a normal and a faulty run",
                       description="Compare a normal run with a faulty run and rank suspicious traces.",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG_ANALYZE)
    a.add_argument("normal", metavar="NORMAL_DIR",
                   help="directory of the normal (good) run's traces; left out (one directory given): the "
                        "faulty run is analysed alone, its own ranks and time steps as the norm")
    a.add_argument("faulty", nargs="?", metavar="FAULTY_DIR", help="directory of the faulty (bad) run's traces")
    a.add_argument("--also-normal", action="append", default=[], metavar="DIR",
                   help="another normal run of the same program (repeatable): where the normal runs differ "
                        "from each other (OpenMP scheduling, say), the verdict counts a faulty trace that "
                        "differs the same way as noise")
    a.add_argument("--memory-budget", metavar="SIZE",
                   help="most memory each process may use to read traces, e.g. 8G or 500M (default: "
                        f"{config.MEMORY_BUDGET_SHARE * 100:.0f}%% of the memory available at start, shared by the ranks on "
                        f"a node; also {config.MEMORY_BUDGET_ENV}); a run over it ends with one error naming the file")
    a.add_argument("--no-arguments", action="store_true",
                   help="compare plain call names: the MPI arguments the tracer records in event names "
                        "(MPI_Send[count=4,...]) are stripped first")
    _add_filter_args(a, multiple=True)
    a.add_argument("--attributes", nargs="+", metavar="ATTR", default=None,
                   help=f"attribute modes (default: {' '.join(config.DEFAULT_ATTRIBUTES)})")
    a.add_argument("--k", nargs="+", type=_k_bound(), metavar="K", default=None,
                   help=f"NLR bounds: longest loop body recognised (default: {' '.join(map(str, config.DEFAULT_KS))})")
    a.add_argument("--linkage", nargs="+", metavar="METHOD", default=None,
                   help=f"SciPy linkage methods (default: {' '.join(config.DEFAULT_LINKAGES)})")
    a.add_argument("--top", type=POSITIVE, default=config.TOP, help=f"suspects listed per row (default {config.TOP})")
    a.add_argument("--rows", type=POSITIVE, default=config.ROWS_SHOWN,
                   help=f"ranking rows printed (default {config.ROWS_SHOWN}; all are saved)")
    a.add_argument("--out", type=OUTPUT_FILE, metavar="FILE.h5", help="write all results to this HDF5 file")
    a.add_argument("--force", action="store_true", help="overwrite --out and --html if they exist")
    a.add_argument("--json", action="store_true", help="print the ranking table as JSON instead of text")
    a.add_argument("--diffnlr", type=NON_NEGATIVE, default=config.DIFFNLRS_SHOWN, metavar="N",
                   help=f"show the diffNLRs of the verdict's first N culprits (default {config.DIFFNLRS_SHOWN}, "
                        "0 = none)")
    a.add_argument("--html", type=OUTPUT_FILE, metavar="FILE.html", help="also write those diffNLRs as an HTML page")
    a.add_argument("--all", action="store_true", dest="show_all",
                   help=f"do not bound the text output (default: at most {config.TEXT_MAX_LINES} lines, "
                        f"{config.DIFF_MAX_LINES} per diffNLR)")
    a.add_argument("--max-concepts", type=POSITIVE, default=config.MAX_CONCEPTS,
                   help=f"cap on concept-lattice size; a bigger lattice is kept partial, its coverage stated "
                        f"(default {config.MAX_CONCEPTS})")
    a.add_argument("--no-lattice", action="store_true", help="skip the concept lattices (JSMs do not need them)")
    a.add_argument("--full-jsm-limit", type=NON_NEGATIVE, default=config.FULL_LIMIT, metavar="N",
                   help=f"store full N x N JSMs up to this many traces/processes (default {config.FULL_LIMIT}); above it "
                        "only the class x class JSMs and each trace's class (equivalent, much smaller)")
    a.add_argument("--row-block-min", type=POSITIVE, default=config.ROW_BLOCK_MIN, metavar="C",
                   help="class x class JSMs with at least C distinct traces are computed in row blocks "
                        f"on all MPI ranks (default {config.ROW_BLOCK_MIN}; smaller ones go whole to one rank each)")
    a.add_argument("--timing-clock", choices=("both", "own", "wall"), default=config.TIMING_CLOCK,
                   help="timing view (uftrace/OTF2 traces): which clock may flag a loop whose iteration time "
                        "changed: both, own (time outside MPI calls only: use it on noisy or "
                        "oversubscribed nodes, where wall time gives false positives) or wall "
                        f"(default {config.TIMING_CLOCK})")
    a.add_argument("--timing-ratio", type=float, default=config.TIMING_MIN_RATIO, metavar="X",
                   help="timing view: flag a loop when its mean iteration time changed by a factor of X or "
                        f"more, slower or faster (default {config.TIMING_MIN_RATIO}; at least 1)")
    a.add_argument("--progress", action="store_true", help="print progress (default: only on a terminal)")
    a.add_argument("--color", choices=("auto", "always", "never"), default="auto")

    d = sub.add_parser("decode", help="print the decoded event stream of one trace file",
                       description="Decode one ParLOT trace file (or text trace) and print its events.")
    d.add_argument("trace", help="a ParLOT per-thread file (<prefix>.<pid>.<tid>), a uftrace <tid>.dat "
                                 "or a text trace r<rank>.t<thread>.txt")
    d.add_argument("--format", choices=("ids", "names"), default="ids",
                   help="ids: whitespace-separated integers (0 = return); names: one name per line, "
                        "returns as '<return>'")
    d.add_argument("--uncompressed", action="store_true", help="the file is ParLOT's uncompressed variant")

    n = sub.add_parser("nlr", help="print the nested loop representation of one trace",
                       description="Filter one trace and print its NLR tokens and loop table.")
    n.add_argument("trace", help="a trace file (ParLOT per-thread file or r<rank>.t<thread>.txt)")
    _add_filter_args(n, multiple=False)
    n.add_argument("--k", type=_k_bound(), default=config.NLR_K, help=f"NLR bound K (default {config.NLR_K})")

    f = sub.add_parser("diffnlr", help="diff the NLRs of one process/thread between two runs",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Myers diff of the NLR of one trace in the normal and the faulty run: "
                                   "common blocks, normal-only blocks, faulty-only blocks.",
                       epilog="forms:\n"
                              f"  diffnlr NORMAL_DIR FAULTY_DIR --rank 5 [--thread 0] [--filter SPEC] [--k {config.NLR_K}]\n"
                              "  diffnlr NORMAL_TRACE FAULTY_TRACE          (two trace files)\n"
                              f"  diffnlr RESULTS.h5 --rank 5 [--combo {config.combo_name(config.SINGLE_FILTER, config.NLR_K)}]"
                              "   (from 'analyze --out')\n"
                              "Loop ids are those of the whole two runs, as in 'analyze'.  Without --filter "
                              "(--combo), the setting is chosen as analyze chooses the one it shows: the first "
                              f"of analyze's default filters ({', '.join(config.DEFAULT_FILTERS)}) where the trace's "
                              "NLRs differ.")
    f.add_argument("inputs", nargs="+", metavar="INPUT", help="NORMAL FAULTY (directories or files), or RESULTS.h5")
    f.add_argument("--rank", type=TRACE_ID, help="MPI rank of the trace (required with directories and results)")
    f.add_argument("--thread", type=TRACE_ID, default=0, help="thread (default 0)")
    f.add_argument("--combo", help="with RESULTS.h5: which filter/K (default: as analyze shows it, the best "
                                   "row's, or the first setting where this trace's NLRs differ)")
    _add_filter_args(f, multiple=False)
    f.set_defaults(filter=None)      # as analyze: the first default filter where the NLRs differ
    f.add_argument("--k", type=_k_bound(), default=config.NLR_K, help=f"NLR bound K (default {config.NLR_K})")
    f.add_argument("--context", type=NON_NEGATIVE, default=None, help="collapse common runs to N tokens of context")
    f.add_argument("--exact", action="store_true",
                   help=f"always a minimal diff (default: past {DIFF_MAX_COST} differences a cheaper, "
                        "possibly longer one)")
    f.add_argument("--html", type=OUTPUT_FILE, metavar="FILE.html", help="write an HTML rendering")
    f.add_argument("--all", action="store_true", dest="show_all",
                   help=f"every token (default: at most {config.DIFF_MAX_LINES} lines; common runs collapsed)")
    f.add_argument("--svg", type=OUTPUT_FILE, metavar="FILE.svg", help="write an SVG rendering")
    f.add_argument("--force", action="store_true", help="overwrite --html and --svg if they exist")
    f.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    lt = sub.add_parser("lattice", help="show or export a concept lattice stored by 'analyze --out'",
                        description="Equivalence classes and concepts of one stored lattice; --dot writes "
                                    "Graphviz DOT, which Graphviz (not a dependency; e.g. apt-get install "
                                    "graphviz) renders: dot -Tsvg lattice.dot -o lattice.svg.")
    lt.add_argument("results", help="RESULTS.h5 written by analyze --out")
    lt.add_argument("--combo", help="filter and K, e.g. 11.mpi.K10 (default: the best row's)")
    lt.add_argument("--attributes", help="attribute mode, e.g. sing.noFreq (default: the best row's)")
    lt.add_argument("--run", choices=("normal", "faulty"), default="faulty")
    lt.add_argument("--dot", type=OUTPUT_FILE, metavar="FILE.dot", help="write the Hasse diagram as DOT")
    lt.add_argument("--force", action="store_true", help="overwrite --dot if it exists")
    rp = sub.add_parser("report", help="write a self-contained HTML report of a results file",
                        formatter_class=argparse.RawDescriptionHelpFormatter,
                        description="One HTML file (no network needed to open it) from 'analyze --out': ticket "
                                    "summary, timing view (uftrace/OTF2 traces), sortable ranking table, JSM "
                                    "heatmaps (normal, faulty, diff), subsumption heatmaps, dendrograms, concept "
                                    "lattices, diffNLRs of the top suspects, input notes and settings.",
                        epilog="examples:\n"
                               "  python -m difftrace_mpi analyze runs/good runs/bad --out diff.h5\n"
                               "  python -m difftrace_mpi report diff.h5 -o report.html\n"
                               "  python -m difftrace_mpi report diff.h5 -o report.html --png figures/\n"
                               "More than --max-cells traces: heatmap cells are blocks of consecutive traces "
                               "(mean J; max JSM_D).")
    rp.add_argument("results", help="RESULTS.h5 written by analyze --out")
    rp.add_argument("-o", "--output", type=OUTPUT_FILE, metavar="FILE.html",
                    help="the HTML file to write (default: RESULTS with .html instead of .h5)")
    rp.add_argument("--png", type=OUTPUT_DIR, metavar="DIR", help="also write PNG pictures (JSM and subsumption heatmaps, "
                                                 "dendrograms) into DIR (needs matplotlib)")
    rp.add_argument("--force", action="store_true", help="overwrite the HTML file and the PNG pictures if they exist")
    rp.add_argument("--suspects", type=NON_NEGATIVE, default=config.REPORT_SUSPECTS, metavar="N",
                    help=f"diffNLRs of the best row's N top suspects (default {config.REPORT_SUSPECTS})")
    rp.add_argument("--max-cells", type=_int_in(2, COUNT_LIMIT, "must be at least 2"), default=config.REPORT_MAX_CELLS,
                    metavar="N", help="heatmap side cap; more traces are aggregated in blocks "
                                      f"(default {config.REPORT_MAX_CELLS})")
    return parser


def _color(choice):
    return choice == "always" or (choice == "auto" and sys.stdout.isatty() and not os.environ.get("NO_COLOR"))


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    from .engine.choreography import StepFailed, world_rank, world_size
    try:
        if args.command == "analyze":
            try:
                return cmd_analyze(args)
            except StepFailed:
                raise
            except Exception as exc:
                if world_size() > 1:        # raised outside an agreed step: the others may be waiting
                    _end_job(exc)
                raise
        if world_rank() != 0:       # started under a launcher: the other commands are one process's work
            return 0
        return {"decode": cmd_decode, "nlr": cmd_nlr, "diffnlr": cmd_diffnlr,
                "lattice": cmd_lattice, "report": cmd_report}[args.command](args)
    except StepFailed as exc:
        if world_rank() == 0:      # a user error in one line; a bug with its traceback
            print(f"difftrace_mpi: error: {_one_line(str(exc)) if exc.user_error else exc}", file=sys.stderr)
        return 2 if exc.user_error else 1
    except DiffTraceError as exc:
        if _speaks():
            print(f"difftrace_mpi: error: {_one_line(str(exc))}", file=sys.stderr)
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
    from .engine.choreography import end_job_if_peers_may_wait, world_rank
    user_error = isinstance(exc, (DiffTraceError, MemoryError))
    if user_error:
        print(f"difftrace_mpi: error: rank {world_rank()}: {_one_line(str(exc) or type(exc).__name__)}",
              file=sys.stderr)
    else:
        import traceback
        print(f"difftrace_mpi: error: rank {world_rank()}: internal error outside an agreed step", file=sys.stderr)
        traceback.print_exc()
    end_job_if_peers_may_wait(2 if user_error else 1)


def _one_line(message):
    """A user error stays one line even when a file name in it holds a newline or another
    control character: those are written as escapes (\\n, \\x1b, ...)."""
    from .escape import visible
    return visible(message)


# --- analyze ------------------------------------------------------------------------------

def cmd_analyze(args):
    from .views.text import print_analysis

    if args.faulty is None:         # one directory: the failed run alone
        args.normal, args.faulty = None, args.normal
        if args.also_normal:
            raise DiffTraceError("--also-normal needs a normal run: analyze NORMAL_DIR FAULTY_DIR --also-normal DIR")
    grid = make_grid(args.filters, args.k, args.attributes, args.linkage, args.custom)
    results = run_analysis(args.normal, args.faulty, grid, also_normal=args.also_normal, top=args.top,
                           arguments=not args.no_arguments, lattices=not args.no_lattice,
                           max_concepts=args.max_concepts, full_limit=args.full_jsm_limit,
                           row_block_min=args.row_block_min, timing_ratio=args.timing_ratio,
                           timing_clock=args.timing_clock, memory_budget=args.memory_budget,
                           out=args.out, outputs=[("--html", args.html)], force=args.force,
                           progress=args.progress or sys.stderr.isatty(), wording=CLI_WORDING)
    if results is None:       # not the root
        return 0
    if args.json:
        print(json.dumps(results.as_dict(), indent=2))
    else:
        print_analysis(results, rows=args.rows, diffnlrs=args.diffnlr, color=_color(args.color),
                       out=args.out, html=args.html, show_all=args.show_all, force=args.force)
    if args.html and args.json:
        from .views.text import write_diffnlr_html
        write_diffnlr_html(results, args.html, args.diffnlr or 1, force=args.force)
    return 0


# --- outputs ------------------------------------------------------------------------------
# Every output flag goes through jobs.check_outputs before any work starts, in this
# command line's words (--force, --memory-budget, --also-normal, --out).

CLI_WORDING = Wording(overwrite="use --force to overwrite it", memory_budget="--memory-budget",
                      also_normal="--also-normal", out="--out")

PNG_NAMES = ("heatmaps_thread.png", "heatmaps_process.png", "subsumption_thread.png",
             "subsumption_process.png", "dendrograms.png")      # what report --png may write


def check_outputs(outputs, inputs, force, created_dirs=()):
    """``jobs.check_outputs`` with the command line's wording."""
    _check_outputs(outputs, inputs, force, created_dirs, wording=CLI_WORDING)


# --- decode / nlr / diffnlr -----------------------------------------------------------------

def _load_single(path):
    """One trace file of any format, as a Trace."""
    from .readers import load_file
    return load_file(path)


_DECODE_CHUNK = 1 << 16        # values formatted and written at a time: the output is streamed


def cmd_decode(args):
    from .readers import file_format, parlot, refuse_non_trace
    from .escape import visible
    out = sys.stdout
    if os.path.isfile(args.trace):
        refuse_non_trace(args.trace)          # an HDF5 or .info file "decodes" to garbage
    if file_format(args.trace) is parlot.FORMAT:
        # judged by its run (its .info, the first values), the uncompressed variant too
        trace = parlot.load_thread_file(args.trace, compressed=not args.uncompressed)
    else:
        trace = _load_single(args.trace)
    values, names, complete = trace.events, trace.names, trace.complete
    if args.format == "names":
        names = [visible(name) for name in names]      # names from a trace never drive the terminal
    for start in range(0, len(values), _DECODE_CHUNK):
        chunk = values[start:start + _DECODE_CHUNK].tolist()
        if args.format == "ids":
            out.write((" " if start else "") + " ".join(map(str, chunk)))
        else:
            out.write("".join(f"{names[v]}\n" for v in chunk))
    if args.format == "ids":
        out.write("\n")
    for note in trace.notes:
        print(f"difftrace_mpi: warning: {_one_line(note)}", file=sys.stderr)
    if not complete and not trace.notes:
        print(f"difftrace_mpi: warning: {args.trace} is incomplete (thread killed?); "
              f"{len(values)} events recovered", file=sys.stderr)
    return 0


def _pair_nlr(traces, spec, k):
    """Filter and NLR a list of traces with shared names and loop ids."""
    from .stages import filters, nlr
    from .model import RETURN_NAME
    names = [RETURN_NAME] + sorted({n for t in traces for n in list(t.names)[1:]} - {RETURN_NAME})
    name_id = {n: i for i, n in enumerate(names)}
    mask = filters.keep_mask(names, spec)
    seqs = [filters.apply_filter(np.asarray([name_id[n] for n in t.names], dtype=np.int32)[t.events],
                                 names, spec, mask) for t in traces]
    nlrs, table = nlr.reduce_all(seqs, k)
    return names, nlrs, table


def cmd_nlr(args):
    from .stages import filters, nlr
    from .escape import visible
    spec = filters.parse_filter(args.filter, args.custom)
    trace = _load_single(args.trace)
    names, (nl,), table = _pair_nlr([trace], spec, spec.k or args.k)
    line = lambda text: print(visible(text))  # noqa: E731   names come from the trace: never raw to a terminal
    line(f"# NLR of {args.trace}, filter {spec}, K={spec.k or args.k}: {len(nl)} tokens")
    for label in nlr.token_labels(nl, names):
        line(label)
    bodies = nlr.loop_bodies(table, names)
    if bodies:
        line("# loops")
        for label, body in bodies.items():
            line(f"{label} = [{' '.join(body)}]")
    return 0


def _run_traces(run):
    """All traces of a run directory, or the one trace of a file, in (rank, thread) order."""
    from .readers import load_run
    if os.path.isfile(run):
        return [_load_single(run)]
    return load_run(run).traces


def _diff_inputs(args):
    """(names, normal NLR tokens, faulty tokens, loop bodies, description) for diffnlr."""
    from .stages import filters, nlr
    if len(args.inputs) == 1:
        return _diff_from_results(args)
    if len(args.inputs) != 2:
        raise DiffTraceError("diffnlr takes NORMAL FAULTY, or one RESULTS.h5")
    normal, faulty = args.inputs
    if os.path.isdir(normal) != os.path.isdir(faulty):
        raise DiffTraceError("diffnlr: give two run directories or two trace files, not one of each")
    if os.path.isdir(normal) and args.rank is None:
        raise DiffTraceError("--rank is required when NORMAL and FAULTY are run directories")
    specs = ([filters.parse_filter(args.filter, args.custom)] if args.filter else
             [filters.parse_filter(f) for f in config.DEFAULT_FILTERS])
    runs = [_run_traces(normal), _run_traces(faulty)]
    traces = runs[0] + runs[1]
    found = []
    for ri, run in enumerate(runs):
        offset = 0 if ri == 0 else len(runs[0])
        found.append([offset + i for i, t in enumerate(run)
                      if len(run) == 1 and args.rank is None or (t.rank, t.thread) == (args.rank, args.thread)])
        if not found[-1]:
            print(f"difftrace_mpi: note: {args.inputs[ri]} has no trace for rank {args.rank} thread "
                  f"{args.thread}; using an empty trace", file=sys.stderr)
    first = None
    for spec in specs:          # the first setting where the two differ, else the first one
        k = spec.k or args.k
        names, nlrs, table = _pair_nlr(traces, spec, k)
        picked = [nlr.tokens(nlrs[f[0]], names) if f else [] for f in found]
        first = first or (spec, k, names, table, picked)
        if picked[0] != picked[1]:
            break
    else:
        spec, k, names, table, picked = first
    where = f"rank {args.rank} thread {args.thread}" if args.rank is not None else "trace"
    return picked[0], picked[1], nlr.loop_body_tokens(table, names), f"{where} (filter {spec.label}, K={k})"


def _diff_from_results(args):
    from . import store
    from .stages import nlr
    if args.rank is None:
        raise DiffTraceError("--rank is required with a results file")
    with store.read(args.inputs[0]) as results:
        obj = results.object_index((args.rank, args.thread))
        combo = results.combo(args.combo or results.differing_combo(obj))
        seqs = [nlr.tokens(nlr.NLR(*results.nlr_of(combo.name, run, obj)), results.names) for run in (0, 1)]
        bodies = {f"L{i}": nlr.tokens(nlr.NLR(ids, counts), results.names) for i, (ids, counts) in enumerate(combo.loops)}
    return seqs[0], seqs[1], bodies, f"rank {args.rank} thread {args.thread} ({combo.name})"


def cmd_diffnlr(args):
    from .stages.diff import diff_tokens
    from .views import diffnlr
    check_outputs([("--html", args.html), ("--svg", args.svg)], args.inputs, args.force)
    normal, faulty, bodies, what = _diff_inputs(args)
    blocks = diff_tokens(normal, faulty, max_cost=None if args.exact else DIFF_MAX_COST)
    title = what
    print(diffnlr.render_text(blocks, bodies, color=_color(args.color), title=title, context=args.context,
                              max_lines=None if args.show_all else config.DIFF_MAX_LINES))
    for path, render in ((args.html, diffnlr.render_html_page), (args.svg, diffnlr.render_svg)):
        if path:
            _atomic_write_text(path, render(blocks, bodies, title=title), force=args.force)
            print(f"wrote {path}")
    return 0


def cmd_lattice(args):
    from . import store
    from .naming import describe_keys
    from .stages.attributes import attribute_labeller
    from .views.dot import find_graphviz, to_dot
    from .escape import visible
    check_outputs([("--dot", args.dot)], [args.results], args.force)
    with store.read(args.results) as results:
        combo = results.combo(args.combo)
        aname = args.attributes or (results.rows[0].attributes if results.rows else config.DEFAULT_ATTRIBUTES[0])
        if aname not in combo.attrs:
            raise DiffTraceError(f"{args.results} has no attribute setting {aname!r} in {combo.name} "
                                 f"(it has {', '.join(combo.attrs)})")
        lattice = combo.attrs[aname].lattice(config.RUN_LABELS.index(args.run))
        label = attribute_labeller(results.names, len(combo.loops), aname.split(".")[0])
        objects = results.objects
        # setting names come from the file: escaped, like every name we print
        print(visible(f"{combo.name} {aname} {args.run}: {lattice.n_concepts} concepts, "
                      f"{len(lattice.classes())} equivalence classes"
                      + (f" ({lattice.coverage.short()})" if lattice.coverage else "")))
        if lattice.coverage:
            print(visible("  " + lattice.coverage.describe()))
        for i, members in enumerate(lattice.classes()):
            print(f"  class {i}: {len(members)} trace(s), {describe_keys([objects[int(m)] for m in members])}")
        if args.dot:
            _atomic_write_text(args.dot, to_dot(lattice, attr_label=label,
                                                obj_label=lambda o: "{}.{}".format(*objects[o])),
                               force=args.force)
            print(f"wrote {args.dot}")
            if find_graphviz() is None:
                print("note: Graphviz is not installed (no 'dot' program found); install it to render the DOT file")
    return 0


def cmd_report(args):
    from .views import report
    if args.max_cells < 2:
        raise DiffTraceError("--max-cells must be at least 2")
    if args.png:
        report.require_matplotlib()
    output = args.output or (os.path.splitext(args.results)[0] + ".html")
    check_outputs([("-o", output)] + [("--png", os.path.join(args.png, name)) for name in PNG_NAMES if args.png],
                  [args.results], args.force, created_dirs=[args.png] if args.png else [])
    from . import store
    with store.read(args.results) as results:        # a damaged file: one error, from Results
        page = report.build_report(results, max_cells=args.max_cells, suspects=max(0, args.suspects),
                                   graphviz=report.find_graphviz())
        _atomic_write_text(output, page, force=args.force)
        print(f"wrote {output}")
        if args.png:
            for path in report.write_pngs(results, args.png, max_cells=args.max_cells):
                print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
