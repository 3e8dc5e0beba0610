"""``lattice RESULTS.h5``: a stored concept lattice's classes, and its Hasse diagram as DOT."""
from .. import config
from ..errors import DiffTraceError
from ..fsutil import write_text_atomic
from .options import OUTPUT_FILE, check_outputs


def add_parser(sub):
    """The lattice command's options."""
    p = sub.add_parser("lattice", help="show or export a concept lattice stored by 'analyze --out'",
                        description="Equivalence classes and concepts of one stored lattice; --dot writes "
                                    "Graphviz DOT, which Graphviz (not a dependency; e.g. apt-get install "
                                    "graphviz) renders: dot -Tsvg lattice.dot -o lattice.svg.")
    p.add_argument("results", help="RESULTS.h5 written by analyze --out")
    p.add_argument("--combo", help="filter and K, e.g. 11.mpi.K10 (default: the best row's)")
    p.add_argument("--attributes", help="attribute mode, e.g. sing.noFreq (default: the best row's)")
    p.add_argument("--run", choices=("normal", "faulty"), default="faulty")
    p.add_argument("--dot", type=OUTPUT_FILE, metavar="FILE.dot", help="write the Hasse diagram as DOT")
    p.add_argument("--force", action="store_true", help="overwrite --dot if it exists")


def run(args):
    from .. import store
    from ..naming import describe_keys
    from ..stages.classify.attributes import attribute_labeller
    from ..views.dot import find_graphviz, to_dot
    from ..escape import visible
    check_outputs([("--dot", args.dot)], [args.results], args.force)
    with store.read(args.results) as results:
        combo = results.combo(args.combo)
        aname = args.attributes or (results.rows[0].attributes if results.rows else config.DEFAULT_ATTRIBUTES[0])
        if aname not in combo.attrs:
            has = (f"it has {', '.join(combo.attrs)}" if combo.attrs else
                   "none was clustered: see the notes of 'analyze', e.g. the class cap")
            raise DiffTraceError(f"{args.results} has no attribute setting {aname!r} in {combo.name} ({has})")
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
            write_text_atomic(args.dot, to_dot(lattice, attr_label=label,
                                                obj_label=lambda o: "{}.{}".format(*objects[o])),
                               force=args.force)
            print(f"wrote {args.dot}")
            if find_graphviz() is None:
                print("note: Graphviz is not installed (no 'dot' program found); install it to render the DOT file")
    return 0
