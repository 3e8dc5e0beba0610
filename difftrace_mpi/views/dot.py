"""Graphviz DOT export of a concept lattice (``python -m difftrace_mpi lattice --dot``)."""
from .escape import dot_label, dot_string
from .hasse import children_lists, introduced_attributes, parents_lists, weighted_label


def to_dot(lattice, attr_label=str, obj_label=str, name="lattice"):
    """Graphviz DOT of the Hasse diagram with reduced labelling: a concept shows only the
    attributes it introduces (in its intent with a weight that none of its parents
    reaches; shown as ``label`` when the weight is 1 and ``label:weight`` otherwise) and the
    objects it introduces (its class).  Edges go parent -> child, so the top is drawn at
    the top.  Nodes are ``c<index>`` in canonical order."""
    arrs = lattice.to_arrays()
    oip, oob = arrs["own_indptr"], arrs["own_objects"]
    children = children_lists(arrs)
    parents = parents_lists(children)
    lines = [f"digraph {dot_string(name)} {{",
             "  node [shape=box, style=rounded, fontsize=10];"]
    for i in range(len(children)):
        attrs = [weighted_label(attr_label, a, w) for a, w in introduced_attributes(arrs, parents, i)]
        objs = [obj_label(int(o)) for o in oob[oip[i]:oip[i + 1]]]
        lines.append(f"  c{i} [label={dot_label(filter(None, [', '.join(attrs), ', '.join(objs)]))}];")
    for p, kids in enumerate(children):
        lines.extend(f"  c{p} -> c{c};" for c in kids)
    lines.append("}")
    return "\n".join(lines) + "\n"
