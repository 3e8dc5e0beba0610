"""The one escaping rule (escape) and its use by every writer: terminal, HTML, DOT."""
import re

from difftrace_mpi.stages.classify.lattice import Lattice
from difftrace_mpi.views.dot import to_dot
from difftrace_mpi.escape import dot_label, dot_string, html_lines, html_text, visible, visible_lines

ORDINARY = ["MPI_Send", "do work <now> & \"then\"", "\u03a9mega \u03bb", "\u540d\u524d \U0001F600", "a\\b", "x" * 5000]


def test_ordinary_names_are_unchanged():
    for name in ORDINARY:
        assert visible(name) == name
        assert visible_lines(name) == name


def test_non_printable_characters_become_python_escapes():
    assert visible("bad\nname\x1b[31m\t\r\x00\x7f\x9f") == "bad\\nname\\x1b[31m\\t\\r\\x00\\x7f\\x9f"
    assert visible("rtl\u202eevil\u2028sep\u00a0") == "rtl\\u202eevil\\u2028sep\\xa0"   # bidi, line separator, NBSP
    assert visible("lone\ud800 nonchar\uffff private\U000f0000") == "lone\\ud800 nonchar\\uffff private\\U000f0000"
    assert visible(7) == "7"


def test_escaping_is_idempotent_and_one_line():
    hostile = "a\nb\x1b\ud800\u202e\\x1b"
    once = visible(hostile)
    assert visible(once) == once and once.isprintable() and "\n" not in once
    once.encode("utf-8")                                   # no lone surrogate left


def test_visible_lines_keeps_our_line_breaks_only():
    assert visible_lines("line one\nname\x1b[2J\tend\n") == "line one\nname\\x1b[2J\\tend\n"


def test_html_escapes_markup_after_the_rule():
    assert html_text("<script>alert('x') & \"y\"</script>") == \
        "&lt;script&gt;alert(&#x27;x&#x27;) &amp; &quot;y&quot;&lt;/script&gt;"
    assert html_text("f\x1b<b>") == "f\\x1b&lt;b&gt;"
    assert html_lines("a <b>\nc\x00") == "a &lt;b&gt;\nc\\x00"


def test_dot_strings():
    assert dot_string('say "hi"') == '"say \\"hi\\""'
    assert dot_string("a\\b") == '"a\\\\b"'
    assert dot_string("two\nlines") == '"two\\\\nlines"'          # the name's newline is shown, not a break
    assert dot_label(["L0", "Trace 0, Trace 2"]) == '"L0\\nTrace 0, Trace 2"'
    assert dot_label([]) == '""'


def test_dot_export_of_hostile_names_stays_one_node_per_line():
    L = Lattice()
    L.add_object(0, [1, 2], [1, 1])
    L.add_object(1, [1], [1])
    names = {1: 'evil"\n} digraph x {', 2: "esc\x1b[31m"}
    dot = to_dot(L, attr_label=names.__getitem__, obj_label=lambda o: f"t\n{o}", name='n"\n')
    assert "\x1b" not in dot and dot.startswith('digraph "n\\"\\\\n" {\n')
    nodes = re.findall(r'^  (c\d+) \[label="((?:[^"\\]|\\.)*)"\];$', dot, re.M)
    assert len(nodes) == L.n_concepts == len(re.findall(r"\[label=", dot))
    labels = dict(nodes)
    assert labels["c0"] == 'evil\\"\\\\n} digraph x {\\nt\\\\n1'     # object 1 is in the top concept
    assert "esc\\\\x1b[31m\\nt\\\\n0" in labels.values()
    assert dot.count("{") == 2 and dot.rstrip().endswith("}")          # the name's brace is inside a label
