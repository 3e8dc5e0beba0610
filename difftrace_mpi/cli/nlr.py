"""``nlr TRACE``: one trace's nested loop representation and loop table."""
from .. import config
from ..jobs import load_single, trace_nlr
from .options import add_filter_args, k_bound


def add_parser(sub):
    """The nlr command's options."""
    p = sub.add_parser("nlr", help="print the nested loop representation of one trace",
                       description="Filter one trace and print its NLR tokens and loop table.")
    p.add_argument("trace", help="a trace file (ParLOT per-thread file or r<rank>.t<thread>.txt)")
    add_filter_args(p, multiple=False)
    p.add_argument("--k", type=k_bound(), default=config.NLR_K, help=f"NLR bound K (default {config.NLR_K})")


def run(args):
    from ..stages.model import filters, nlr
    from ..escape import visible
    spec = filters.parse_filter(args.filter, args.custom)
    trace = load_single(args.trace)
    names, (nl,), table = trace_nlr([trace], spec, spec.k or args.k)
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
