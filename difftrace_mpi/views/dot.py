"""Graphviz DOT export of a concept lattice (``python -m difftrace_mpi lattice --dot``), and
its layout by Graphviz's ``dot`` for the report, where Graphviz is installed."""
import re
import shutil
import subprocess

from ..escape import dot_label, dot_string
from .hasse import children_lists, introduced_attributes, parents_lists, weighted_label
from ..errors import DiffTraceError
from ..naming import shorten

DOT_TIMEOUT = 60        # seconds for one lattice's layout
LABEL_CHARS = 40        # characters of an attribute in a drawn node (``to_dot(shown=...)``)


def to_dot(lattice, attr_label=str, obj_label=str, name="lattice", members_label=None, shown=None):
    """Graphviz DOT of the Hasse diagram with reduced labelling: a concept shows only the
    attributes it introduces (in its intent with a weight that none of its parents
    reaches; shown as ``label`` when the weight is 1 and ``label:weight`` otherwise) and the
    objects it introduces (its class: ``obj_label`` of each, comma-separated, or
    ``members_label`` of the list of them, e.g. rank ranges).  ``shown``: at most that many
    attributes per concept, two a line, each cut to ``LABEL_CHARS`` (a drawing), instead of
    all on one line (the export).  Edges go parent -> child, so the top is drawn at the top.
    Nodes are ``c<index>`` in canonical order."""
    arrs = lattice.to_arrays()
    oip, oob = arrs["own_indptr"], arrs["own_objects"]
    children = children_lists(arrs)
    parents = parents_lists(children)
    lines = [f"digraph {dot_string(name)} {{",
             "  node [shape=box, style=rounded, fontsize=10];"]
    for i in range(len(children)):
        attrs = [weighted_label(attr_label, a, w) for a, w in introduced_attributes(arrs, parents, i)]
        own = [int(o) for o in oob[oip[i]:oip[i + 1]]]
        objs = (members_label(own) if own else "") if members_label else ", ".join(obj_label(o) for o in own)
        if shown is None:
            text = [", ".join(attrs)]
        else:
            cut = [shorten(a, LABEL_CHARS) for a in attrs[:shown]]
            text = [", ".join(cut[j:j + 2]) for j in range(0, len(cut), 2)]
            if len(attrs) > shown:
                text.append(f"\u2026 {len(attrs) - shown} more")
            objs = shorten(objs, 2 * LABEL_CHARS)
        lines.append(f"  c{i} [label={dot_label(filter(None, text + [objs]))}];")
    for p, kids in enumerate(children):
        lines.extend(f"  c{p} -> c{c};" for c in kids)
    lines.append("}")
    return "\n".join(lines) + "\n"


def find_graphviz():
    """The path of Graphviz's ``dot`` program, or None when it is not installed."""
    return shutil.which("dot")


def render_svg(dot_text, dot_program, timeout=DOT_TIMEOUT):
    """The SVG that ``dot -Tsvg`` draws of ``dot_text``, as an element to inline in HTML
    (its XML prologue, doctype, comments and namespace declarations dropped).  Graphviz escapes the labels for
    XML itself.  A failure is a DiffTraceError."""
    try:
        res = subprocess.run([dot_program, "-Tsvg"], input=dot_text, capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        raise DiffTraceError(f"Graphviz's dot took more than {timeout} s")
    except OSError as exc:
        raise DiffTraceError(f"cannot run Graphviz's dot ({dot_program}): {exc.strerror or exc}")
    start = res.stdout.find("<svg")
    if res.returncode != 0 or start < 0:
        why = (res.stderr.strip().splitlines() or [f"exit status {res.returncode}"])[-1]
        raise DiffTraceError(f"Graphviz's dot failed: {why}")
    svg = re.sub(r"<!--.*?-->", "", res.stdout[start:], flags=re.S).strip()
    # inline SVG needs no namespace declarations (and the page names no URL at all)
    return re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", svg, count=2)
