"""diffNLR renderings: the diff of two NLR token sequences (``stages.diff``) as text, HTML and SVG.

:func:`render_text` is unified, a line per token, ANSI colours optional;
:func:`render_html` / :func:`render_html_page` are two columns, green / blue / red, like the
paper's figures; :func:`render_svg` is the same picture standalone.  Loop bodies, for
listing, come as a dict ``{"L1": [("MPI_Recv", 0), ("MPI_Send", 0)], ...}``; bodies may
contain loops.  Every name is escaped on the way out (``views.escape``).
"""
from __future__ import annotations

from . import asset_text
from .escape import html_text, visible
from ..stages.diff import ELLIPSIS, change_regions, cut_name, n_tokens, norm_token, summarize

__all__ = ["render_text", "render_html", "render_html_page", "render_svg", "HTML_CSS"]

NAME_LIMIT = 200          # names longer than this are cut (with an ellipsis) when shown


# --------------------------------------------------------------------------- helpers

def _cut(s: str, limit: int = NAME_LIMIT) -> str:
    return cut_name(s, limit)


def _show(tok, limit: int = NAME_LIMIT) -> str:
    """Display form of a token: escaped, label cut to ``limit`` characters."""
    label, count = tok
    label = _cut(visible(label), limit)
    return label if count == 0 else f"{label}^{count}"


def _full(tok) -> str:
    label, count = tok
    label = visible(label)
    return label if count == 0 else f"{label}^{count}"


def _is_loop(tok) -> bool:
    return tok[1] >= 1


def _loops_in_order(token_lists, loop_bodies):
    """Loop labels of every loop in the given token lists and (recursively) in their
    bodies, each once, pre-order by first appearance."""
    loop_bodies = loop_bodies or {}
    seen = set()
    order = []

    def visit(tokens):
        # explicit stack of iterators (bodies can nest deeply)
        stack = [iter(tokens)]
        while stack:
            for t in stack[-1]:
                t = norm_token(t)
                if _is_loop(t) and t[0] not in seen:
                    seen.add(t[0])
                    order.append(t[0])
                    body = loop_bodies.get(t[0])
                    if body:
                        stack.append(iter(body))
                        break
            else:
                stack.pop()

    for toks in token_lists:
        visit(toks)
    return order




def _view(blocks, context):
    """Items to show: ("common", tokens) / ("gap", n) / ("change", ntoks, ftoks).

    With ``context`` (int >= 0), long common runs keep ``context`` tokens next to each
    change and the rest become a gap (only when at least 2 tokens would be hidden).
    """
    regions = change_regions(blocks)
    if context is None:
        return regions
    context = max(0, int(context))
    out = []
    last = len(regions) - 1
    for idx, r in enumerate(regions):
        if r[0] != "common":
            out.append(r)
            continue
        toks = r[1]
        n = len(toks)
        head = context if idx > 0 else 0            # after a change
        tail = context if idx < last else 0         # before a change
        if last == 0:                               # identical traces: show both ends
            head = tail = context
        if n - head - tail < 2:
            out.append(r)
            continue
        if head:
            out.append(("common", toks[:head]))
        out.append(("gap", n - head - tail))
        if tail:
            out.append(("common", toks[n - tail:]))
    return out


def _shown_token_lists(view):
    for item in view:
        if item[0] == "common":
            yield item[1]
        elif item[0] == "change":
            yield item[1]
            yield item[2]


def _summary(blocks, normal_label, faulty_label):
    """The diff in words, escaped, with the two runs' labels cut to 60 characters."""
    return visible(summarize(blocks, cut_name(normal_label, 60), cut_name(faulty_label, 60)))


# --------------------------------------------------------------------------- text

_GREEN = "\x1b[32m"
_BLUE = "\x1b[34m"
_RED = "\x1b[31m"
_DIM = "\x1b[2m"
_BOLD = "\x1b[1m"
_RESET = "\x1b[0m"


def _body_text(label, loop_bodies):
    body = (loop_bodies or {}).get(label)
    if body is None:
        return f"{_cut(visible(label))} = [?]"
    return f"{_cut(visible(label))} = [{' '.join(_show(norm_token(t)) for t in body)}]"


def render_text(blocks, loop_bodies=None, color: bool = False, title: str = "",
                context=None, normal_label="normal", faulty_label="faulty") -> str:
    """Unified, one line per token: "  " common (green), "- " only in normal (blue),
    "+ " only in faulty (red); ANSI colours only when ``color``.  ``context=n``
    collapses long common runs to n tokens next to each change.  The bodies of the
    loops shown are listed after the diff (nested ones too, each once)."""
    def paint(code, s):
        return f"{code}{s}{_RESET}" if color else s

    lines = []
    if title:
        lines.append(paint(_BOLD, f"diffNLR: {_cut(visible(title), 1000)}"))
    lines.append(paint(_BLUE, f"--- {_cut(visible(normal_label))}"))
    lines.append(paint(_RED, f"+++ {_cut(visible(faulty_label))}"))
    view = _view(blocks, context)
    for item in view:
        if item[0] == "common":
            lines.extend(paint(_GREEN, "  " + _show(t)) for t in item[1])
        elif item[0] == "gap":
            lines.append(paint(_DIM, f"  {ELLIPSIS} {n_tokens(item[1], 'common token')} "
                                     f"{ELLIPSIS}"))
        else:
            lines.extend(paint(_BLUE, "- " + _show(t)) for t in item[1])
            lines.extend(paint(_RED, "+ " + _show(t)) for t in item[2])
    if not view:
        lines.append("  (both traces empty)")
    loops = _loops_in_order(_shown_token_lists(view), loop_bodies)
    if loops:
        lines.append("")
        lines.extend(_body_text(lab, loop_bodies) for lab in loops)
    lines.append("")
    lines.append(paint(_DIM, _summary(blocks, normal_label, faulty_label)))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- HTML

HTML_CSS = asset_text("diffnlr.css")


def _html_token(tok, tag, css_class):
    """A token as ``<tag class=...>``: the name cut, the full name in a title when cut."""
    tok = norm_token(tok)
    label, count = tok
    clean = visible(label)
    shown = _cut(clean)
    title = f' title="{html_text(_full(tok))}"' if shown != clean else ""
    text = html_text(shown) + (f"<sup>{count}</sup>" if count else "")
    return f'<{tag} class="{css_class}"{title}>{text}</{tag}>'


def _html_tok(tok, kind):
    return _html_token(tok, "div", f"dnlr-tok dnlr-{kind}")


def _html_body_tok(tok):
    return _html_token(tok, "span", "dnlr-body-tok")


def render_html(blocks, loop_bodies=None, title: str = "", normal_label="normal",
                faulty_label="faulty", context=None, include_css: bool = True) -> str:
    """A self-contained HTML fragment (one ``<div class="dnlr">``, with a ``<style>``
    unless ``include_css`` is false): common tokens as green boxes spanning both
    columns, normal-only (blue) on the left and faulty-only (red) on the right, then the
    loop bodies as ``<details>``.  Token boxes carry class ``dnlr-tok dnlr-<kind>``."""
    nl = html_text(_cut(visible(normal_label)))
    fl = html_text(_cut(visible(faulty_label)))
    out = ['<div class="dnlr">']
    if include_css:
        out.append(f"<style>{HTML_CSS}</style>")
    if title:
        out.append(f"<h3>diffNLR: {html_text(_cut(visible(title), 1000))}</h3>")
    out.append(f'<p class="dnlr-summary">{html_text(_summary(blocks, normal_label, faulty_label))}</p>')
    out.append('<table class="dnlr-grid">')
    out.append(f'<thead><tr><th class="dnlr-h-normal">{nl}</th>'
               f'<th class="dnlr-h-faulty">{fl}</th></tr></thead><tbody>')
    view = _view(blocks, context)
    for item in view:
        if item[0] == "common":
            boxes = "".join(_html_tok(t, "common") for t in item[1])
            out.append(f'<tr><td colspan="2"><div class="dnlr-stack">{boxes}</div></td></tr>')
        elif item[0] == "gap":
            out.append(f'<tr><td colspan="2" class="dnlr-gap">{ELLIPSIS} '
                       f'{n_tokens(item[1], "common token")} {ELLIPSIS}</td></tr>')
        else:
            left = "".join(_html_tok(t, "normal") for t in item[1])
            right = "".join(_html_tok(t, "faulty") for t in item[2])
            out.append(f'<tr><td><div class="dnlr-stack">{left}</div></td>'
                       f'<td><div class="dnlr-stack">{right}</div></td></tr>')
    out.append("</tbody></table>")
    loops = _loops_in_order(_shown_token_lists(view), loop_bodies)
    if loops:
        out.append('<div class="dnlr-loops"><h4>Loop bodies</h4>')
        for lab in loops:
            body = (loop_bodies or {}).get(lab)
            shown_lab = html_text(_cut(visible(lab)))
            if body is None:
                out.append(f"<details><summary>{shown_lab} (body unknown)</summary></details>")
                continue
            items = "".join(f"<li>{_html_body_tok(t)}</li>" for t in body)
            out.append(f"<details><summary>{shown_lab} = "
                       f"[{html_text(' '.join(_show(norm_token(t), 40) for t in body[:8]))}"
                       f"{' ' + ELLIPSIS if len(body) > 8 else ''}]</summary>"
                       f'<ul class="dnlr-body">{items}</ul></details>')
        out.append("</div>")
    out.append("</div>")
    return "\n".join(out) + "\n"


def render_html_page(blocks, loop_bodies=None, title: str = "", normal_label="normal",
                     faulty_label="faulty", context=None) -> str:
    """A complete HTML page (inline CSS, no scripts, no network) around
    :func:`render_html`."""
    t = html_text(_cut(visible(title or "diffNLR"), 1000))
    body = render_html(blocks, loop_bodies, title, normal_label, faulty_label,
                       context=context, include_css=False)
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{t}</title>\n<style>\nbody{{margin:1em}}\n{HTML_CSS}</style>\n"
            f"</head>\n<body>\n{body}</body>\n</html>\n")


# --------------------------------------------------------------------------- SVG

_SVG_FILL = {"common": "#b7e4b7", "normal": "#b8cff5", "faulty": "#f5b8b8"}
_SVG_BOX_CHARS = 34


def render_svg(blocks, loop_bodies=None, title: str = "", normal_label="normal",
               faulty_label="faulty", context=None) -> str:
    """A standalone SVG of the two-column diffNLR picture: a stem of green boxes for
    common tokens, blue boxes (only in normal) on the left and red boxes (only in
    faulty) on the right, loop bodies listed below.  Long names are cut; the full
    name is in each box's ``<title>``.  Boxes are ``<rect class="dnlr-<kind>">``."""
    col_w, box_w, box_h, gap, pad = 260, 240, 22, 4, 12
    width = 2 * col_w + 3 * pad
    char_w = 7.2
    parts = []
    y = pad

    def text(x, yy, s, anchor="middle", size=12, weight="normal", style=""):
        st = f' font-style="{style}"' if style else ""
        return (f'<text x="{x:.1f}" y="{yy:.1f}" font-size="{size}" '
                f'text-anchor="{anchor}" font-weight="{weight}"{st}>{html_text(s)}</text>')

    def box(cx, yy, tok, kind):
        tok = norm_token(tok)
        shown = _show(tok, _SVG_BOX_CHARS)
        if len(shown) > _SVG_BOX_CHARS + 8:
            shown = shown[:_SVG_BOX_CHARS] + ELLIPSIS
        return (f'<g><title>{html_text(_full(tok))}</title>'
                f'<rect class="dnlr-{kind}" x="{cx - box_w / 2:.1f}" y="{yy:.1f}" '
                f'width="{box_w}" height="{box_h}" rx="3" fill="{_SVG_FILL[kind]}" '
                f'stroke="#555"/>' + text(cx, yy + box_h * 0.7, shown) + "</g>")

    if title:
        parts.append(text(width / 2, y + 14, f"diffNLR: {_cut(visible(title), int(width / 9.5) - 9)}",
                          size=15, weight="bold"))
        y += 24
    lx = pad + col_w / 2
    rx = 2 * pad + col_w + col_w / 2
    mx = width / 2
    parts.append(text(lx, y + 14, _cut(visible(normal_label), 30), weight="bold"))
    parts.append(text(rx, y + 14, _cut(visible(faulty_label), 30), weight="bold"))
    y += 24
    view = _view(blocks, context)
    for item in view:
        if item[0] == "common":
            for t in item[1]:
                parts.append(box(mx, y, t, "common"))
                y += box_h + gap
        elif item[0] == "gap":
            parts.append(text(mx, y + box_h * 0.7,
                              f"{ELLIPSIS} {n_tokens(item[1], 'common token')} {ELLIPSIS}",
                              style="italic"))
            y += box_h + gap
        else:
            yl = yr = y
            for t in item[1]:
                parts.append(box(lx, yl, t, "normal"))
                yl += box_h + gap
            for t in item[2]:
                parts.append(box(rx, yr, t, "faulty"))
                yr += box_h + gap
            y = max(yl, yr)
    loops = _loops_in_order(_shown_token_lists(view), loop_bodies)
    if loops:
        y += 10
        parts.append(text(pad, y + 14, "Loop bodies", anchor="start", weight="bold"))
        y += 20
        max_chars = int((width - 2 * pad) / char_w)
        for lab in loops:
            line = _cut(_body_text(lab, loop_bodies), max_chars)
            parts.append(text(pad, y + 14, line, anchor="start"))
            y += 18
    height = y + pad
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height:.0f}" '
            f'viewBox="0 0 {width} {height:.0f}" font-family="monospace">\n'
            f'<rect x="0" y="0" width="{width}" height="{height:.0f}" fill="white"/>\n'
            + "\n".join(parts) + "\n</svg>\n")
