"""``report RESULTS.h5``: the self-contained HTML report (and PNG pictures)."""
import argparse
import os

from .. import config
from ..errors import DiffTraceError
from ..fsutil import write_text_atomic
from .options import COUNT_LIMIT, NON_NEGATIVE, OUTPUT_DIR, OUTPUT_FILE, PNG_NAMES, check_outputs, int_in


def add_parser(sub):
    """The report command's options."""
    p = sub.add_parser("report", help="write a self-contained HTML report of a results file",
                        formatter_class=argparse.RawDescriptionHelpFormatter,
                        description="One HTML file (no network needed to open it) from 'analyze --out': ticket "
                                    "summary, timing view (uftrace/OTF2 traces), sortable ranking table, JSM "
                                    "heatmaps (normal, faulty, diff), subsumption heatmaps, dendrograms, concept "
                                    "lattices, diffNLRs of the top suspects, input notes and settings.",
                        epilog="examples:\n"
                               "  python -m difftrace_mpi analyze runs/good runs/bad --out diff.h5\n"
                               "  python -m difftrace_mpi report diff.h5 -o report.html\n"
                               "  python -m difftrace_mpi report diff.h5 -o report.html --force --png figures/\n"
                               "More than --max-cells traces: heatmap cells are blocks of consecutive traces "
                               "(mean J; max JSM_D).")
    p.add_argument("results", help="RESULTS.h5 written by analyze --out")
    p.add_argument("-o", "--output", type=OUTPUT_FILE, metavar="FILE.html",
                    help="the HTML file to write (default: RESULTS with .html instead of .h5)")
    p.add_argument("--png", type=OUTPUT_DIR, metavar="DIR", help="also write PNG pictures (JSM and subsumption heatmaps, "
                                                 "dendrograms) into DIR (needs matplotlib)")
    p.add_argument("--force", action="store_true", help="overwrite the HTML file and the PNG pictures if they exist")
    p.add_argument("--suspects", type=NON_NEGATIVE, default=config.REPORT_SUSPECTS, metavar="N",
                    help=f"diffNLRs of the best row's N top suspects (default {config.REPORT_SUSPECTS})")
    p.add_argument("--max-cells", type=int_in(2, COUNT_LIMIT, "must be at least 2"), default=config.REPORT_MAX_CELLS,
                    metavar="N", help="heatmap side cap; more traces are aggregated in blocks "
                                      f"(default {config.REPORT_MAX_CELLS})")


def run(args):
    from ..views import png, report
    from ..views.dot import find_graphviz
    if args.max_cells < 2:
        raise DiffTraceError("--max-cells must be at least 2")
    if args.png:
        png.require_matplotlib()
    output = args.output or (os.path.splitext(args.results)[0] + ".html")
    check_outputs([("-o", output)] + [("--png", os.path.join(args.png, name)) for name in PNG_NAMES if args.png],
                  [args.results], args.force, created_dirs=[args.png] if args.png else [])
    from .. import store
    with store.read(args.results) as results:        # a damaged file: one error, from Results
        page = report.build_report(results, max_cells=args.max_cells, suspects=max(0, args.suspects),
                                   graphviz=find_graphviz())
        write_text_atomic(output, page, force=args.force)
        print(f"wrote {output}")
        if args.png:
            for path in png.write_pngs(results, args.png, max_cells=args.max_cells, force=args.force):
                print(f"wrote {path}")
    return 0
