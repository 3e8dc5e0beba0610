"""The one escaping rule for everything difftrace_mpi writes: terminal text, HTML and SVG,
Graphviz DOT.

Names come from trace files and directory listings, so they may hold anything.  A character
that is not printable (``str.isprintable`` is false: control characters such as newline and
ESC, format characters such as the bidi overrides, lone surrogates, private-use and
unassigned code points, separators other than the space) is written as the visible
backslash escape Python uses (``\\n``, ``\\x1b``, ``\\u202e``, ``\\ud800``, ``\\U000e0001``).
A name then stays on one line, cannot drive a terminal, shows what it holds and is valid
UTF-8 and XML.  Each output format adds its own syntax escaping on top of that.
"""
import html as _html

__all__ = ["visible", "visible_lines", "html_text", "html_lines", "dot_string", "dot_label"]


def _visible_char(c):
    return c if c.isprintable() else c.encode("unicode_escape").decode("ascii")


def visible(s):
    """``s`` (any value, as ``str``) with every non-printable character as a visible escape."""
    s = str(s)
    if s.isprintable():            # the usual case, at C speed
        return s
    return "".join(map(_visible_char, s))


def visible_lines(s):
    """As :func:`visible`, but the line breaks of text we composed ourselves stay line breaks."""
    return "\n".join(visible(line) for line in str(s).split("\n"))


def html_text(s):
    """Any value as HTML (or SVG/XML) text: :func:`visible`, then ``& < > " '`` escaped, so it
    is safe in element text and in quoted attributes."""
    return _html.escape(visible(s), quote=True)


def html_lines(s):
    """Multi-line text we composed (for a ``<pre>``): as :func:`html_text`, keeping line breaks."""
    return _html.escape(visible_lines(s), quote=True)


def dot_string(s):
    """A Graphviz DOT quoted string of a name: :func:`visible`, then backslash and double quote
    escaped."""
    return dot_label([s])


def dot_label(lines):
    """A Graphviz DOT quoted label of several lines (each made :func:`visible`), joined with
    DOT's ``\\n`` line break."""
    return '"' + "\\n".join(visible(line).replace("\\", "\\\\").replace('"', '\\"') for line in lines) + '"'
