"""diffNLR renderings: the diff of two NLR token sequences (``stages.compare.diff``) as text, HTML and SVG.

:func:`render_text` is unified, a line per token, ANSI colours optional;
:func:`render_html` / :func:`render_html_page` are two columns, green / blue / red, like the
paper's figures; :func:`render_svg` is the same picture standalone.  Loop bodies, for
listing, come as a dict ``{"L1": [("MPI_Recv", 0), ("MPI_Send", 0)], ...}``; bodies may
contain loops.  Every name is escaped on the way out (``escape``).
"""
from __future__ import annotations

import itertools

from . import asset_text
from .diffprose import summarize
from .diffview import (DESC_NAME, count_words, shown_name, describe_common, diff_window, full_label, loops_in_order,
                       shown_label, shown_token_lists, summary_line, tail_text, trace_diff)
from ..escape import html_text, visible
from ..config import DIFF_CONTEXT, DIFF_MAX_LINES
from ..errors import DiffTraceError
from ..naming import ELLIPSIS
from ..stages.compare.diff import approximate_note, change_regions, norm_token

__all__ = ["DiffNLR", "diffnlr_of", "render_text", "render_html", "render_html_page", "render_svg", "HTML_CSS"]



# --------------------------------------------------------------------------- text

_GREEN = "\x1b[32m"
_BLUE = "\x1b[34m"
_RED = "\x1b[31m"
_DIM = "\x1b[2m"
_BOLD = "\x1b[1m"
_RESET = "\x1b[0m"

_SIDES = ((8, 5), (3, 2), (1, 0))   # (full, head): a side of a change region up to ``full`` tokens
# is listed in full, a longer one shows ``head`` then one line for the rest; the later pairs
# only when the first change region would not fit otherwise
_BODY_TOKENS = 12         # tokens of a loop body on its one line (bounded text)
_BODY_CHARS = 160         # ... and its characters
MIN_LINES = 12            # the least ``max_lines`` render_text accepts
#: the one-line key of the text (``render_text(key=True)``)
KEY = ('key: "  " both runs, "- " normal only, "+ " faulty only; L1^7 = loop L1 repeated 7 times in a row '
       '(its body: the line L1 = [...]); other tokens are calls')


def _body_text(label, loop_bodies, limit=None):
    body = (loop_bodies or {}).get(label)
    if body is None:
        return f"{shown_name(visible(label))} = [?]"
    if limit is None:
        return f"{shown_name(visible(label))} = [{' '.join(shown_label(norm_token(t)) for t in body)}]"
    toks = [norm_token(t) for t in body[:_BODY_TOKENS]]
    inner = " ".join(shown_label(t, DESC_NAME) for t in toks)
    if len(body) > _BODY_TOKENS:
        inner += f" {ELLIPSIS} ({len(body):,} tokens)"
    return shown_name(f"{shown_name(visible(label), DESC_NAME)} = [{inner}]", limit)


class _Lines:
    """Lines of a text diffNLR being built: (colour, text) pairs and the tokens they name."""

    def __init__(self):
        self.lines = []
        self.tokens = []

    def add(self, code, text, tokens=()):
        self.lines.append((code, text))
        self.tokens.extend(tokens)

    def common(self, tokens):
        for t in tokens:
            self.add(_GREEN, "  " + shown_label(t), (t,))

    def gap(self, tokens):
        text, named = describe_common(tokens)
        self.add(_DIM, f"  {ELLIPSIS} {text} {ELLIPSIS}", named)

    def __len__(self):
        return len(self.lines)


def _common_part(out, tokens, head, tail):
    """Show ``head`` tokens, a gap line, ``tail`` tokens; all of it when that hides < 2."""
    n = len(tokens)
    if n - head - tail < 2:
        out.common(tokens)
        return
    out.common(tokens[:head])
    out.gap(tokens[head:n - tail])
    out.common(tokens[n - tail:])


def _change_lines(out, nt, ft, at_end, side, normal_label, faulty_label, ends):
    """The lines of one change region, ``side = (full, head)``: a side longer than
    ``full`` tokens shows ``head`` of them and one line for the rest.  At the end of the
    traces, when one side is long and the other short (a trace that stopped, or ended,
    while the other went on), the long side is one line ("normal continued with 4,812
    more tokens: A B ... MPI_Finalize"), the short side is listed, and a line says where
    the short trace ends (``ends``: the two traces' lengths)."""
    full, head = side
    N, F = shown_name(visible(normal_label), 60), shown_name(visible(faulty_label), 60)
    stop = None
    if at_end and len(nt) > full and len(ft) <= full:
        stop = "faulty"
    elif at_end and len(ft) > full and len(nt) <= full:
        stop = "normal"
    for sign, code, toks, who, kind in (("-", _BLUE, nt, N, "normal"), ("+", _RED, ft, F, "faulty")):
        if len(toks) <= full:
            for t in toks:
                out.add(code, f"{sign} " + shown_label(t), (t,))
        elif stop is not None:
            text, named = tail_text(toks)
            out.add(code, f"{sign} {who} continued with {count_words(len(toks), 'more token')}: {text}", named)
        else:
            for t in toks[:head]:
                out.add(code, f"{sign} " + shown_label(t), (t,))
            rest = toks[head:]
            text, named = tail_text(rest)
            out.add(code, f"{sign} {ELLIPSIS} {count_words(len(rest), 'more token')} only in {who}: {text}", named)
    if stop == "faulty":
        out.add(_DIM, f"  ({F} stops here: its trace ends after {count_words(ends[1], 'token')})")
    elif stop == "normal":
        out.add(_DIM, f"  ({N} ends here, after {count_words(ends[0], 'token')})")


def _units(regions, context, side, normal_label, faulty_label, ends):
    """One :class:`_Lines` per change region, in order, made as they are taken: the
    common tokens before it (what the unit before did not show: a gap and ``context``
    tokens), the change, and ``context`` common tokens after it (with the final gap when
    nothing changes later)."""
    c = context
    last = len(regions) - 1
    u = None
    pending = None            # common tokens left for the next unit's lead
    for idx, r in enumerate(regions):
        if r[0] == "common":
            toks = r[1]
            if idx == 0:
                pending = ("lead", toks)
            elif idx == last:
                _common_part(u, toks, c, 0)
            else:
                n = len(toks)
                if n - 2 * c < 2:
                    u.common(toks[:min(c, n)])
                    pending = ("rest", toks[min(c, n):])
                else:
                    u.common(toks[:c])
                    pending = ("lead", toks[c:])
            continue
        if u is not None:
            yield u
        u = _Lines()
        if pending:
            kind, toks = pending
            if kind == "rest":
                u.common(toks)
            else:
                _common_part(u, toks, 0, c)
        pending = None
        _change_lines(u, r[1], r[2], idx == last, side, normal_label, faulty_label, ends)
    if u is not None:
        yield u


def _render_unbounded(blocks, loop_bodies, paint, context, normal_label, faulty_label):
    """The diff lines as before bounds: every token (or gaps of ``context``)."""
    lines = []
    view = diff_window(blocks, context)
    for item in view:
        if item[0] == "common":
            lines.extend(paint(_GREEN, "  " + shown_label(t)) for t in item[1])
        elif item[0] == "gap":
            text, _ = describe_common(item[1])
            lines.append(paint(_DIM, f"  {ELLIPSIS} {text} {ELLIPSIS}"))
        else:
            lines.extend(paint(_BLUE, "- " + shown_label(t)) for t in item[1])
            lines.extend(paint(_RED, "+ " + shown_label(t)) for t in item[2])
    if not view:
        lines.append("  (both traces empty)")
    loops = loops_in_order(shown_token_lists(view), loop_bodies)
    if loops:
        lines.append("")
        lines.extend(_body_text(lab, loop_bodies) for lab in loops)
    return lines


def render_text(blocks, loop_bodies=None, color: bool = False, title: str = "",
                context=None, normal_label="normal", faulty_label="faulty",
                max_lines=DIFF_MAX_LINES, key=False) -> str:
    """Unified, one line per token: "  " common (green), "- " only in normal (blue),
    "+ " only in faulty (red); ANSI colours only when ``color``.

    ``max_lines`` (default ``config.DIFF_MAX_LINES``; at least ``MIN_LINES``) bounds the
    whole text, title and legend included: common runs collapse to one line each ("...
    120 common tokens ...", "... 9 common iterations of L5 ...") keeping ``context``
    tokens (default ``config.DIFF_CONTEXT``) next to each change; a side of a change
    longer than 8 tokens shows 5 and one line for the rest; a faulty trace that stopped
    shows where, and one line for what the normal run did after; the change regions that
    do not fit (the first is always shown) are counted on one line; the bodies of the
    loops shown are listed after, one line each, as many as fit.

    ``max_lines=None`` shows everything: every token, or with ``context=n`` long common
    runs collapsed to n tokens next to each change; then every loop body shown (nested
    ones too, each once, in full).  An approximate diff (``stages.compare.diff.approximate_note``)
    says so on one line under the legend.  ``key``: one more line, after the loop bodies,
    saying what the markers and ``L1^7`` mean (``KEY``; within ``max_lines``)."""
    def paint(code, s):
        return f"{code}{s}{_RESET}" if color and code else s

    lines = []
    if title:
        lines.append(paint(_BOLD, f"diffNLR: {shown_name(visible(title), 1000)}"))
    lines.append(paint(_BLUE, f"--- {shown_name(visible(normal_label))}"))
    lines.append(paint(_RED, f"+++ {shown_name(visible(faulty_label))}"))
    note = approximate_note(blocks)
    if note:
        lines.append(paint(_DIM, visible(note)))
    summary = paint(_DIM, summary_line(blocks, normal_label, faulty_label))
    if max_lines is None:
        lines.extend(_render_unbounded(blocks, loop_bodies, paint, context, normal_label, faulty_label))
        if key:
            lines.append(paint(_DIM, KEY))
        lines.append("")
        lines.append(summary)
        return "\n".join(lines) + "\n"

    max_lines = int(max_lines)
    if max_lines < MIN_LINES:
        raise ValueError(f"max_lines must be at least {MIN_LINES} or None")
    context = DIFF_CONTEXT if context is None else max(0, int(context))
    room = max_lines - len(lines) - 2 - bool(key)     # blank line and summary (and the key) at the end
    regions = change_regions(blocks)
    ends = (sum(len(b.normal_tokens) for b in blocks if b.kind != "faulty"),
            sum(len(b.faulty_tokens) for b in blocks if b.kind != "normal"))
    body = _Lines()
    if not regions:
        body.add("", "  (both traces empty)")
    elif len(regions) == 1 and regions[0][0] == "common":
        c = min(context, max(0, (room - 1) // 2))
        _common_part(body, regions[0][1], c, c)
    else:
        n_units = sum(r[0] == "change" for r in regions)
        for side in _SIDES:                            # the first change region must fit
            for c in range(context, -1, -1):
                units = _units(regions, c, side, normal_label, faulty_label, ends)
                first = next(units)
                if len(first) <= room - (1 if n_units > 1 else 0):
                    break
            else:
                continue
            break
        # reserve a few lines for the loop bodies of what is shown first
        first_loops = loops_in_order([first.tokens], None)
        reserve = 1 + min(4, len(first_loops)) if first_loops else 0
        shown = 0
        for k, u in enumerate(itertools.chain([first], units)):
            more = n_units - k - 1
            need = len(u) + (1 if more else 0)
            if k and len(body) + need > room - reserve:
                break
            body.lines.extend(u.lines)
            body.tokens.extend(u.tokens)
            shown += 1
        if shown < n_units:
            n_more = n_units - shown
            body.add(_DIM, f"  {ELLIPSIS} {count_words(n_more, 'more changed region')} "
                           "(show all with --all)")
    lines.extend(paint(code, text) for code, text in body.lines)
    loops = loops_in_order([body.tokens], loop_bodies)
    free = room - len(body) - 1                        # a blank line before the bodies
    if loops and free >= 1:
        lines.append("")
        if len(loops) > free:
            keep = free - 1
            lines.extend(_body_text(lab, loop_bodies, _BODY_CHARS) for lab in loops[:keep])
            lines.append(paint(_DIM, f"{ELLIPSIS} {len(loops) - keep} more loop bodies (show all with --all)"))
        else:
            lines.extend(_body_text(lab, loop_bodies, _BODY_CHARS) for lab in loops)
    if key:
        lines.append(paint(_DIM, KEY))
    lines.append("")
    lines.append(summary)
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- HTML

HTML_CSS = asset_text("diffnlr.css")


def _html_token(tok, tag, css_class):
    """A token as ``<tag class=...>``: the name cut, the full name in a title when cut."""
    tok = norm_token(tok)
    label, count = tok
    clean = visible(label)
    shown = shown_name(clean)
    title = f' title="{html_text(full_label(tok))}"' if shown != clean else ""
    text = html_text(shown) + (f"<sup>{count}</sup>" if count else "")
    return f'<{tag} class="{css_class}"{title}>{text}</{tag}>'


def _html_tok(tok, kind):
    return _html_token(tok, "div", f"dnlr-tok dnlr-{kind}")


def _html_body_tok(tok):
    return _html_token(tok, "span", "dnlr-body-tok")


_HTML_SIDE_OPEN = 16      # a side of a change up to this many tokens is shown open


class _Boxes:
    """Token boxes drawn while a budget of boxes lasts (None: every one); past it, the
    rest of a list is one line saying how many tokens it leaves out.  A real LULESH
    thread's NLR is about a million tokens: drawn whole, one diffNLR made a 112 MB page."""

    def __init__(self, budget):
        self.left, self.left_out = budget, 0

    def draw(self, tokens, kind):
        shown = tokens if self.left is None else tokens[:max(self.left, 0)]
        html = "".join(_html_tok(t, kind) for t in shown)
        if len(shown) < len(tokens):
            self.left_out += len(tokens) - len(shown)
            html += f'<div class="dnlr-more">{ELLIPSIS} {len(tokens) - len(shown):,} more tokens not drawn</div>'
        if self.left is not None:
            self.left -= len(shown)
        return html


def _html_side(tokens, kind, label, boxes):
    """One side of a change region: its boxes; a long side shows its first few and keeps
    the rest in a ``<details>``."""
    if len(tokens) <= _HTML_SIDE_OPEN:
        return boxes.draw(tokens, kind)
    head, rest = tokens[:_SIDES[0][1]], tokens[_SIDES[0][1]:]
    text, _ = tail_text(rest)
    who = html_text(shown_name(visible(label), 60))
    return (boxes.draw(head, kind)
            + f'<details><summary>{ELLIPSIS} {len(rest):,} more tokens only in {who}: {html_text(text)}</summary>'
            + boxes.draw(rest, kind) + "</details>")


def render_html(blocks, loop_bodies=None, title: str = "", normal_label="normal",
                faulty_label="faulty", context=None, include_css: bool = True, max_boxes=None,
                see_all="") -> str:
    """A self-contained HTML fragment (one ``<div class="dnlr">``, with a ``<style>``
    unless ``include_css`` is false): common tokens as green boxes spanning both
    columns, normal-only (blue) on the left and faulty-only (red) on the right, then the
    loop bodies as ``<details>``.  Token boxes carry class ``dnlr-tok dnlr-<kind>``.
    Every token is in the page: with ``context``, long common runs collapse into a
    ``<details>`` (described as in the text: "9 common iterations of L5"), and a side of
    a change longer than 16 tokens keeps all but its first 5 in one.  Every loop of the
    page's tokens has its body listed.  ``max_boxes``: draw at most this many token boxes
    (a page embedding several diffNLRs, the report); the tokens past it are counted, and a
    note says so and how to see them all (``see_all``, e.g. the command)."""
    nl = html_text(shown_name(visible(normal_label)))
    fl = html_text(shown_name(visible(faulty_label)))
    out = ['<div class="dnlr">']
    if include_css:
        out.append(f"<style>{HTML_CSS}</style>")
    if title:
        out.append(f"<h3>diffNLR: {html_text(shown_name(visible(title), 1000))}</h3>")
    out.append(f'<p class="dnlr-summary">{html_text(summary_line(blocks, normal_label, faulty_label))}</p>')
    note = approximate_note(blocks)
    if note:
        out.append(f'<p class="dnlr-summary dnlr-note">{html_text(note)}</p>')
    out.append('<table class="dnlr-grid">')
    out.append(f'<thead><tr><th class="dnlr-h-normal">{nl}</th>'
               f'<th class="dnlr-h-faulty">{fl}</th></tr></thead><tbody>')
    view = diff_window(blocks, context)
    drawn = _Boxes(max_boxes)
    for item in view:
        if item[0] == "common":
            boxes = drawn.draw(item[1], "common")
            out.append(f'<tr><td colspan="2"><div class="dnlr-stack">{boxes}</div></td></tr>')
        elif item[0] == "gap":           # collapsed, its tokens kept inside
            text, _ = describe_common(item[1])
            boxes = drawn.draw(item[1], "common")
            out.append(f'<tr><td colspan="2" class="dnlr-gap"><details><summary>{ELLIPSIS} '
                       f'{html_text(text)} {ELLIPSIS}</summary>'
                       f'<div class="dnlr-stack" style="font-style:normal">{boxes}</div></details></td></tr>')
        else:
            left = _html_side(item[1], "normal", normal_label, drawn)
            right = _html_side(item[2], "faulty", faulty_label, drawn)
            out.append(f'<tr><td><div class="dnlr-stack">{left}</div></td>'
                       f'<td><div class="dnlr-stack">{right}</div></td></tr>')
    out.append("</tbody></table>")
    if drawn.left_out:
        out.append(f'<p class="dnlr-summary dnlr-note">This page draws at most {max_boxes:,} token boxes of a '
                   f'diffNLR: {drawn.left_out:,} tokens are not drawn'
                   + (f"; {html_text(see_all)} lists every one" if see_all else "") + ".</p>")
    view = [("common", item[1]) if item[0] == "gap" else item for item in view]
    loops = loops_in_order(shown_token_lists(view), loop_bodies)
    if loops:
        out.append('<div class="dnlr-loops"><h4>Loop bodies</h4>')
        for lab in loops:
            body = (loop_bodies or {}).get(lab)
            shown_lab = html_text(shown_name(visible(lab)))
            if body is None:
                out.append(f"<details><summary>{shown_lab} (body unknown)</summary></details>")
                continue
            items = "".join(f"<li>{_html_body_tok(t)}</li>" for t in body)
            out.append(f"<details><summary>{shown_lab} = "
                       f"[{html_text(' '.join(shown_label(norm_token(t), 40) for t in body[:8]))}"
                       f"{' ' + ELLIPSIS if len(body) > 8 else ''}]</summary>"
                       f'<ul class="dnlr-body">{items}</ul></details>')
        out.append("</div>")
    out.append("</div>")
    return "\n".join(out) + "\n"


def render_html_page(blocks, loop_bodies=None, title: str = "", normal_label="normal",
                     faulty_label="faulty", context=None) -> str:
    """A complete HTML page (inline CSS, no scripts, no network) around
    :func:`render_html`."""
    t = html_text(shown_name(visible(title or "diffNLR"), 1000))
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
        shown = shown_label(tok, _SVG_BOX_CHARS)
        if len(shown) > _SVG_BOX_CHARS + 8:
            shown = shown[:_SVG_BOX_CHARS] + ELLIPSIS
        return (f'<g><title>{html_text(full_label(tok))}</title>'
                f'<rect class="dnlr-{kind}" x="{cx - box_w / 2:.1f}" y="{yy:.1f}" '
                f'width="{box_w}" height="{box_h}" rx="3" fill="{_SVG_FILL[kind]}" '
                f'stroke="#555"/>' + text(cx, yy + box_h * 0.7, shown) + "</g>")

    if title:
        parts.append(text(width / 2, y + 14, f"diffNLR: {shown_name(visible(title), int(width / 9.5) - 9)}",
                          size=15, weight="bold"))
        y += 24
    lx = pad + col_w / 2
    rx = 2 * pad + col_w + col_w / 2
    mx = width / 2
    parts.append(text(lx, y + 14, shown_name(visible(normal_label), 30), weight="bold"))
    parts.append(text(rx, y + 14, shown_name(visible(faulty_label), 30), weight="bold"))
    y += 24
    view = diff_window(blocks, context)
    for item in view:
        if item[0] == "common":
            for t in item[1]:
                parts.append(box(mx, y, t, "common"))
                y += box_h + gap
        elif item[0] == "gap":
            parts.append(text(mx, y + box_h * 0.7,
                              f"{ELLIPSIS} {shown_name(describe_common(item[1])[0], 60)} {ELLIPSIS}",
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
    loops = loops_in_order(shown_token_lists(view), loop_bodies)
    if loops:
        y += 10
        parts.append(text(pad, y + 14, "Loop bodies", anchor="start", weight="bold"))
        y += 20
        max_chars = int((width - 2 * pad) / char_w)
        for lab in loops:
            line = shown_name(_body_text(lab, loop_bodies), max_chars)
            parts.append(text(pad, y + 14, line, anchor="start"))
            y += 18
    height = y + pad
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height:.0f}" '
            f'viewBox="0 0 {width} {height:.0f}" font-family="monospace">\n'
            f'<rect x="0" y="0" width="{width}" height="{height:.0f}" fill="white"/>\n'
            + "\n".join(parts) + "\n</svg>\n")


# --------------------------------------------------------------------------- the object

class DiffNLR:
    """The diffNLR of one trace: its NLR in the normal run against the faulty run.

    Made by :func:`diffnlr_of` (``difftrace_mpi.diffnlr(results, rank, thread)``).  In a notebook it shows as HTML; ``str()``
    is the bounded text the command line prints.

    Attributes
    ----------
    key : tuple of int
        (rank, thread) of the trace.
    combo : str
        The (filter, K) setting of the NLRs, e.g. ``"11.mpi.K10"``.
    blocks : list of difftrace_mpi.stages.compare.diff.Block
        The diff: ``common``, ``normal``-only and ``faulty``-only blocks of tokens.
    loop_bodies : dict
        ``{"L3": tokens}`` for every loop the two NLRs use.

    Examples
    --------
    >>> d = difftrace_mpi.diffnlr(r, 5)         # doctest: +SKIP
    >>> d.summary                               # doctest: +SKIP
    'The traces agree for 3 tokens, ...'
    >>> print(d.text(max_lines=None))           # doctest: +SKIP
    >>> open("rank5.svg", "w").write(d.svg())   # doctest: +SKIP
    """

    def __init__(self, key, combo, blocks, loop_bodies):
        self.key, self.combo, self.blocks, self.loop_bodies = tuple(key), combo, blocks, loop_bodies

    @property
    def title(self):
        return f"rank {self.key[0]} thread {self.key[1]} ({self.combo})"

    @property
    def summary(self):
        """One or two sentences on where the faulty trace leaves the normal one."""
        return summarize(self.blocks)

    @property
    def approximate(self):
        """True when a bound cut the exact diff short (still a correct diff)."""
        return bool(getattr(self.blocks, "approximate", False))

    def text(self, color=False, context=DIFF_CONTEXT, max_lines=DIFF_MAX_LINES, key=False):
        """The text the command line prints: ``max_lines`` bounds it (None: every
        token); ``context`` tokens are kept next to each change; ``color`` adds ANSI
        colours; ``key`` adds a line saying what the markers and ``L1^7`` mean."""
        return render_text(self.blocks, self.loop_bodies, color=color, title=self.title, context=context,
                           max_lines=max_lines, key=key)

    def html(self, page=False):
        """An HTML fragment (``page``: a whole page, as ``diffnlr --html`` writes)."""
        return (render_html_page if page else render_html)(self.blocks, self.loop_bodies, title=self.title,
                                                           context=DIFF_CONTEXT)

    def svg(self):
        """A standalone SVG picture, as ``diffnlr --svg`` writes."""
        return render_svg(self.blocks, self.loop_bodies, title=self.title, context=DIFF_CONTEXT)

    def table(self, as_frame=None):
        """The blocks as a table (a DataFrame; ``as_frame=False``: a list of dicts):
        ``kind``, where they start in each NLR (token indices, not event positions),
        their tokens."""
        from ..results import as_table
        from ..stages.compare.diff import format_token
        return as_table([{"kind": b.kind, "normal_start": b.normal_start, "faulty_start": b.faulty_start,
                          "tokens": " ".join(format_token(t) for t in b.tokens), "length": len(b)}
                         for b in self.blocks], ("kind", "normal_start", "faulty_start", "tokens", "length"),
                        as_frame)

    def __str__(self):
        return self.text()

    def __repr__(self):
        return f"<DiffNLR {self.title}: {len(self.blocks)} blocks>"

    def _repr_html_(self):
        return self.html()


def diffnlr_of(results, rank, thread=0, combo=None):
    """The :class:`DiffNLR` of trace (``rank``, ``thread``) of ``results``.  ``combo``: the
    (filter, K) setting, e.g. ``"11.mpi.K10"`` (default: the best row's, unless the trace's
    NLRs differ only in another)."""
    if not results.combos:
        raise DiffTraceError("these results hold no NLRs: no setting was analysed (see the notes)")
    key = (int(rank), int(thread))
    return DiffNLR(key, *trace_diff(results, key, combo))
