"""``diffnlr NORMAL FAULTY --rank R`` (two runs or two trace files) or ``diffnlr RESULTS.h5
--rank R``: one trace's diffNLR, printed, and as HTML or SVG."""
import argparse
import os
import sys

from .. import config
from ..config import DIFF_MAX_COST
from ..errors import DiffTraceError
from ..fsutil import write_text_atomic
from ..jobs import run_traces, trace_nlr
from .options import (NON_NEGATIVE, OUTPUT_FILE, TRACE_ID, add_filter_args, check_outputs, color_wanted,
                      k_bound)


def add_parser(sub):
    """The diffnlr command's options."""
    p = sub.add_parser("diffnlr", help="diff the NLRs of one process/thread between two runs",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Myers diff of the NLR of one trace in the normal and the faulty run: "
                                   "common blocks, normal-only blocks, faulty-only blocks.",
                       epilog="forms:\n"
                              f"  diffnlr NORMAL_DIR FAULTY_DIR --rank 5 [--thread 0] [--filter SPEC] [--k {config.NLR_K}]\n"
                              "  diffnlr NORMAL_TRACE FAULTY_TRACE          (two trace files)\n"
                              f"  diffnlr RESULTS.h5 --rank 5 [--combo {config.combo_name(config.SINGLE_FILTER, config.NLR_K)}]"
                              "   (from 'analyze --out')\n"
                              "Loop ids are those of the whole two runs, as in 'analyze'.  Without --filter, two "
                              f"runs are compared under the first of analyze's default filters ({', '.join(config.DEFAULT_FILTERS)}) "
                              "where the trace's NLRs differ (there is no ranking to follow); without --combo, a "
                              "results file gives the setting analyze showed: the best row's, unless the trace's "
                              "NLRs differ only in another.")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="NORMAL FAULTY (directories or files), or RESULTS.h5")
    p.add_argument("--rank", type=TRACE_ID, help="MPI rank of the trace (required with directories and results)")
    p.add_argument("--thread", type=TRACE_ID, default=0, help="thread (default 0)")
    p.add_argument("--combo", help="with RESULTS.h5: which filter/K (default: as analyze shows it, the best "
                                   "row's, or the first setting where this trace's NLRs differ)")
    add_filter_args(p, multiple=False)
    p.set_defaults(filter=None)      # as analyze: the first default filter where the NLRs differ
    p.add_argument("--k", type=k_bound(), default=config.NLR_K, help=f"NLR bound K (default {config.NLR_K})")
    p.add_argument("--context", type=NON_NEGATIVE, default=None, help="collapse common runs to N tokens of context")
    p.add_argument("--exact", action="store_true",
                   help=f"always a minimal diff (default: past {DIFF_MAX_COST} differences a cheaper, "
                        "possibly longer one)")
    p.add_argument("--html", type=OUTPUT_FILE, metavar="FILE.html", help="write an HTML rendering")
    p.add_argument("--all", action="store_true", dest="show_all",
                   help=f"every token (default: at most {config.DIFF_MAX_LINES} lines; common runs collapsed)")
    p.add_argument("--svg", type=OUTPUT_FILE, metavar="FILE.svg", help="write an SVG rendering")
    p.add_argument("--force", action="store_true", help="overwrite --html and --svg if they exist")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour the text: auto (on a terminal, unless NO_COLOR is set), always or never")


def _diff_inputs(args):
    """(names, normal NLR tokens, faulty tokens, loop bodies, description) for diffnlr."""
    from ..stages.model import filters, nlr
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
    runs = [run_traces(normal), run_traces(faulty)]
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
        names, nlrs, table = trace_nlr(traces, spec, k)
        picked = [nlr.tokens(nlrs[f[0]], names) if f else [] for f in found]
        first = first or (spec, k, names, table, picked)
        if picked[0] != picked[1]:
            break
    else:
        spec, k, names, table, picked = first
    where = f"rank {args.rank} thread {args.thread}" if args.rank is not None else "trace"
    return picked[0], picked[1], nlr.loop_body_tokens(table, names), f"{where} (filter {spec.label}, K={k})"


def _diff_from_results(args):
    from .. import store
    from ..stages.model import nlr
    if args.rank is None:
        raise DiffTraceError("--rank is required with a results file")
    with store.read(args.inputs[0]) as results:
        obj = results.object_index((args.rank, args.thread))
        combo = results.combo(args.combo or results.differing_combo(obj))
        seqs = [nlr.tokens(nlr.NLR(*results.nlr_of(combo.name, run, obj)), results.names) for run in (0, 1)]
        bodies = {f"L{i}": nlr.tokens(nlr.NLR(ids, counts), results.names) for i, (ids, counts) in enumerate(combo.loops)}
    return seqs[0], seqs[1], bodies, f"rank {args.rank} thread {args.thread} ({combo.name})"


def run(args):
    from ..stages.compare.diff import diff_tokens
    from ..views import diffnlr
    check_outputs([("--html", args.html), ("--svg", args.svg)], args.inputs, args.force)
    normal, faulty, bodies, what = _diff_inputs(args)
    blocks = diff_tokens(normal, faulty, max_cost=None if args.exact else DIFF_MAX_COST)
    title = what
    print(diffnlr.render_text(blocks, bodies, color=color_wanted(args.color), title=title, context=args.context,
                              max_lines=None if args.show_all else config.DIFF_MAX_LINES))
    for path, render in ((args.html, diffnlr.render_html_page), (args.svg, diffnlr.render_svg)):
        if path:
            write_text_atomic(path, render(blocks, bodies, title=title), force=args.force)
            print(f"wrote {path}")
    return 0
