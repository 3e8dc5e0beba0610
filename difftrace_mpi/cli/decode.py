"""``decode TRACE``: one trace file's events, streamed (ids or names)."""
import os
import sys

from ..jobs import load_single
from .options import one_line


def add_parser(sub):
    """The decode command's options."""
    p = sub.add_parser("decode", help="print the decoded event stream of one trace file",
                       description="Decode one ParLOT trace file (or text trace) and print its events.")
    p.add_argument("trace", help="a ParLOT per-thread file (<prefix>.<pid>.<tid>), a uftrace <tid>.dat "
                                 "or a text trace r<rank>.t<thread>.txt")
    p.add_argument("--format", choices=("ids", "names"), default="ids",
                   help="ids: whitespace-separated integers (0 = return); names: one name per line, "
                        "returns as '<return>'")
    p.add_argument("--uncompressed", action="store_true", help="the file is ParLOT's uncompressed variant")


_DECODE_CHUNK = 1 << 16        # values formatted and written at a time: the output is streamed


def run(args):
    from ..readers import file_format, parlot, refuse_non_trace
    from ..escape import visible
    out = sys.stdout
    if os.path.isfile(args.trace):
        refuse_non_trace(args.trace)          # an HDF5 or .info file "decodes" to garbage
    if file_format(args.trace) is parlot.FORMAT:
        # judged by its run (its .info, the first values), the uncompressed variant too
        trace = parlot.load_thread_file(args.trace, compressed=not args.uncompressed)
    else:
        trace = load_single(args.trace)
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
        print(f"difftrace_mpi: warning: {one_line(note)}", file=sys.stderr)
    if not complete and not trace.notes:
        print(f"difftrace_mpi: warning: {args.trace} is incomplete (thread killed?); "
              f"{len(values)} events recovered", file=sys.stderr)
    return 0
