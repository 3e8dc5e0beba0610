"""``analyze NORMAL_DIR FAULTY_DIR`` (or ``analyze FAULTY_DIR`` alone): the analysis, printed."""
import argparse
import json
import sys

from .. import config
from ..errors import DiffTraceError
from ..jobs import make_grid, run_analysis
from .options import (CLI_WORDING, NON_NEGATIVE, OUTPUT_FILE, POSITIVE, TOKEN_BUDGET, add_filter_args,
                      color_wanted, k_bound)


EPILOG_ANALYZE = """\
examples:
  python -m difftrace_mpi analyze examples/traces/oddeven/normal examples/traces/oddeven/swapbug
  python -m difftrace_mpi analyze runs/bad          (no good run: its own ranks and time steps are the norm)
  python -m difftrace_mpi analyze runs/good runs/bad --filters 11.mpi 11.mpicol.K20 --attributes sing.actual \\
         --linkage ward --json > settings.json
  srun -n 64 python -m difftrace_mpi analyze runs/good runs/bad --out runs/bad.h5

what it says first: the verdict, what went wrong and where: its kind (hang, crash, changed
behaviour, timing only, or no difference), the culprit rank and thread, the time-step iteration
and the call where the faulty trace first leaves the normal one, with the confidence and what
would raise it (docs/verdict.md).  The evidence follows.

how it works: decode every trace of both runs, keep the functions a filter selects, summarise loops
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


def add_parser(sub):
    """The analyze command's options."""
    p = sub.add_parser("analyze", help="rank suspicious processes/threads between a normal and a faulty run",
                       description="Compare a normal run with a faulty run and rank suspicious traces.",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG_ANALYZE)
    p.add_argument("normal", metavar="NORMAL_DIR",
                   help="directory of the normal (good) run's traces; left out (one directory given): the "
                        "faulty run is analysed alone, its own ranks and time steps as the norm")
    p.add_argument("faulty", nargs="?", metavar="FAULTY_DIR", help="directory of the faulty (bad) run's traces")
    p.add_argument("--also-normal", action="append", default=[], metavar="DIR",
                   help="another normal run of the same program (repeatable): where the normal runs differ "
                        "from each other (OpenMP scheduling, say), the verdict counts a faulty trace that "
                        "differs the same way as noise")
    p.add_argument("--memory-budget", metavar="SIZE",
                   help="most memory each process may use to read traces, e.g. 8G or 500M (default: "
                        f"{config.MEMORY_BUDGET_SHARE * 100:.0f}%% of the memory available at start, shared by the ranks on "
                        f"a node; also {config.MEMORY_BUDGET_ENV}); a run over it ends with one error naming the file")
    p.add_argument("--no-arguments", action="store_true",
                   help="compare plain call names: the MPI arguments the tracer records in event names "
                        "(MPI_Send[count=4,...]) are stripped first")
    add_filter_args(p, multiple=True)
    p.add_argument("--attributes", nargs="+", metavar="ATTR", default=None,
                   help=f"attribute modes (default: {' '.join(config.DEFAULT_ATTRIBUTES)})")
    p.add_argument("--k", nargs="+", type=k_bound(), metavar="K", default=None,
                   help=f"NLR bounds: longest loop body recognised (default: {' '.join(map(str, config.DEFAULT_KS))})")
    p.add_argument("--linkage", nargs="+", metavar="METHOD", default=None,
                   help=f"linkage methods, as SciPy defines them (default: {' '.join(config.DEFAULT_LINKAGES)})")
    p.add_argument("--top", type=POSITIVE, default=config.TOP, help=f"suspects listed per row (default {config.TOP})")
    p.add_argument("--rows", type=POSITIVE, default=config.ROWS_SHOWN,
                   help=f"ranking rows printed (default {config.ROWS_SHOWN}; all are saved)")
    p.add_argument("--out", type=OUTPUT_FILE, metavar="FILE.h5", help="write all results to this HDF5 file")
    p.add_argument("--force", action="store_true", help="overwrite --out and --html if they exist")
    p.add_argument("--json", action="store_true",
                   help="print the results as JSON instead of text: the verdict, the runs, divergences, the "
                        "consensus, the hang view and every ranking row (not the notes; --out keeps everything)")
    p.add_argument("--diffnlr", type=NON_NEGATIVE, default=config.DIFFNLRS_SHOWN, metavar="N",
                   help=f"show the diffNLRs of the verdict's first N culprits (default {config.DIFFNLRS_SHOWN}, "
                        "0 = none)")
    p.add_argument("--html", type=OUTPUT_FILE, metavar="FILE.html",
                   help=f"also write those diffNLRs as an HTML page (at most {config.PAGE_DIFF_BOXES:,} token "
                        "boxes of each; diffnlr --html draws every one)")
    p.add_argument("--all", action="store_true", dest="show_all",
                   help=f"lift the text's line caps ({config.TEXT_MAX_LINES} lines, {config.DIFF_MAX_LINES} per "
                        "diffNLR); the verdict's lines, notes and candidate lists stay short (--json and --out "
                        "hold them whole)")
    p.add_argument("--max-concepts", type=POSITIVE, default=config.MAX_CONCEPTS, metavar="N",
                   help=f"cap on concept-lattice size; a bigger lattice is kept partial, its coverage stated "
                        f"(default {config.MAX_CONCEPTS})")
    p.add_argument("--max-classes", type=POSITIVE, default=config.MAX_CLASSES, metavar="N",
                   help=f"cap on the classes of distinct traces a setting may cluster, per run and level "
                        f"(default {config.MAX_CLASSES}): a setting with more is not clustered, has no ranking "
                        "rows and is named in a note (the verdict stands: it comes from the traces' first "
                        f"differences). Its class JSMs grow as N^2: {config.MAX_CLASSES:,} classes are "
                        f"{config.MAX_CLASSES ** 2 * 8 / 2 ** 20:,.0f} MiB a matrix, four per level, in memory "
                        "and in --out")
    p.add_argument("--keep-nlrs", type=TOKEN_BUDGET, default=config.NLR_KEEP_TOKENS, metavar="TOKENS",
                   help="whole NLRs the results keep, for diffnlr and the report: those of the traces the verdict "
                        "and the ranking name first, up to TOKENS tokens in all (default "
                        f"{config.NLR_KEEP_TOKENS:,}, about 16 MB; 'all': every trace's, which grows with the "
                        "events of the whole job); every trace's NLR length and last tokens are always kept")
    p.add_argument("--no-lattice", action="store_true", help="skip the concept lattices (JSMs do not need them)")
    p.add_argument("--full-jsm-limit", type=NON_NEGATIVE, default=config.FULL_LIMIT, metavar="N",
                   help=f"store full N x N JSMs up to this many traces/processes (default {config.FULL_LIMIT}); above it "
                        "only the class x class JSMs and each trace's class (equivalent, much smaller)")
    p.add_argument("--row-block-min", type=POSITIVE, default=config.ROW_BLOCK_MIN, metavar="C",
                   help="class x class JSMs with at least C distinct traces are computed in row blocks "
                        f"on all MPI ranks (default {config.ROW_BLOCK_MIN}; smaller ones go whole to one rank each)")
    p.add_argument("--timing-clock", choices=("both", "own", "wall"), default=config.TIMING_CLOCK,
                   help="timing view (uftrace/OTF2 traces): which clock may flag a loop whose iteration time "
                        "changed: both, own (time outside MPI calls only: use it on noisy or "
                        "oversubscribed nodes, where wall time gives false positives) or wall "
                        f"(default {config.TIMING_CLOCK})")
    p.add_argument("--timing-ratio", type=float, default=config.TIMING_MIN_RATIO, metavar="X",
                   help="timing view: flag a loop when its mean iteration time changed by a factor of X or "
                        f"more, slower or faster (default {config.TIMING_MIN_RATIO}; at least 1)")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--progress", action="store_true",
                       help="a progress line per milestone and per step of a second or more, on stderr (the "
                            "default on a terminal; in a batch log, such as a Slurm job's, the default is one "
                            f"line every {config.PROGRESS_BATCH_S:g} s once a run takes that long)")
    shown.add_argument("--quiet", action="store_true", help="no progress lines (errors and notes still show)")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour the text: auto (on a terminal, unless NO_COLOR is set), always or never")


def _progress_mode(args):
    """--quiet: none; --progress or a terminal: a line per milestone; else (a batch log):
    a line every few seconds."""
    if args.quiet:
        return False
    return True if args.progress or sys.stderr.isatty() else "batch"


def run(args):
    from ..views.text import print_analysis

    if args.faulty is None:         # one directory: the failed run alone
        args.normal, args.faulty = None, args.normal
        if args.also_normal:
            raise DiffTraceError("--also-normal needs a normal run: analyze NORMAL_DIR FAULTY_DIR --also-normal DIR")
        grid_options = [flag for flag, value in (("--filters", args.filters), ("--custom", args.custom),
                                                 ("--attributes", args.attributes), ("--k", args.k),
                                                 ("--linkage", args.linkage)) if value is not None]
        if grid_options:
            raise DiffTraceError(f"{', '.join(grid_options)}: the grid settings compare two runs; the failed run "
                                 "alone is judged against its own ranks and time steps (leave them out, or give "
                                 "NORMAL_DIR FAULTY_DIR)")
    grid = make_grid(args.filters, args.k, args.attributes, args.linkage, args.custom)
    results = run_analysis(args.normal, args.faulty, grid, also_normal=args.also_normal, top=args.top,
                           arguments=not args.no_arguments, lattices=not args.no_lattice,
                           max_concepts=args.max_concepts, max_classes=args.max_classes,
                           keep_nlrs=args.keep_nlrs, full_limit=args.full_jsm_limit,
                           row_block_min=args.row_block_min, timing_ratio=args.timing_ratio,
                           timing_clock=args.timing_clock, memory_budget=args.memory_budget,
                           out=args.out, outputs=[("--html", args.html)], force=args.force,
                           progress=_progress_mode(args), wording=CLI_WORDING)
    if results is None:       # not the root
        return 0
    if args.json:
        print(json.dumps(results.as_dict(), indent=2))
    else:
        print_analysis(results, rows=args.rows, diffnlrs=args.diffnlr, color=color_wanted(args.color),
                       out=args.out, html=args.html, show_all=args.show_all, force=args.force)
    if args.html and args.json:
        from ..views.text import write_diffnlr_html
        write_diffnlr_html(results, args.html, args.diffnlr or 1, force=args.force)
    return 0
