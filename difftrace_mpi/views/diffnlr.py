"""diffNLR renderings: the diff of two NLR token sequences (``stages.diff``) as text, HTML and SVG.

:func:`render_text` is unified, a line per token, ANSI colours optional;
:func:`render_html` / :func:`render_html_page` are two columns, green / blue / red, like the
paper's figures; :func:`render_svg` is the same picture standalone.  Loop bodies, for
listing, come as a dict ``{"L1": [("MPI_Recv", 0), ("MPI_Send", 0)], ...}``; bodies may
contain loops.  Every name is escaped on the way out (``views.escape``).
"""
from __future__ import annotations

import itertools

from . import asset_text
from .escape import html_text, visible
from ..config import DIFF_CONTEXT, DIFF_MAX_LINES
from ..naming import ELLIPSIS, plural, shorten, token_label
from ..stages.diff import approximate_note, change_regions, common_run, norm_token, summarize

__all__ = ["DiffNLR", "render_text", "render_html", "render_html_page", "render_svg", "describe_common", "HTML_CSS"]

NAME_LIMIT = 200          # names longer than this are cut (with an ellipsis) when shown


# --------------------------------------------------------------------------- helpers

def _cut(s: str, limit: int = NAME_LIMIT) -> str:
    """``s`` with at most ``limit`` characters kept, an ellipsis after them when cut."""
    return shorten(s, limit + 1)


def _show(tok, limit: int = NAME_LIMIT) -> str:
    """Display form of a token: escaped, label cut to ``limit`` characters."""
    label, count = tok
    return token_label(_cut(visible(label), limit), count)


def _full(tok) -> str:
    label, count = tok
    return token_label(visible(label), count)


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
    """Items to show: ("common", tokens) / ("gap", hidden tokens) / ("change", ntoks, ftoks).

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
        out.append(("gap", toks[head:n - tail]))
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
    return visible(summarize(blocks, _cut(normal_label, 60), _cut(faulty_label, 60)))


# --------------------------------------------------------------------------- common runs

_PERIOD_MAX = 256         # longest repeated pattern a collapsed common run is described by
_PERIOD_SKIP = 8          # ... after at most this many other tokens
_DESC_NAME = 40           # characters of a name in a one-line description
_DESC_TOKENS = 6          # tokens of a pattern shown in a one-line description


def _count(n, word):
    """``1 token``, ``1,234 tokens``."""
    return plural(n, word, grouped=True)


def _seq_text(tokens, limit=_DESC_TOKENS, name=_DESC_NAME):
    """Tokens on one line: the first ``limit``, then the count of the rest."""
    shown = " ".join(_show(norm_token(t), name) for t in tokens[:limit])
    if len(tokens) > limit:
        shown += f" {ELLIPSIS} ({len(tokens):,} tokens)"
    return shown


def _period(tokens, need):
    """``(p, e)``: the shortest repeated pattern of ``tokens``, p tokens long, repeated
    from the start through ``tokens[:e]``, with e >= 2p and e >= ``need``; None when there
    is none (patterns up to ``_PERIOD_MAX`` tokens; after 8 that repeat for a while, then
    break off too early, the search gives up)."""
    n = len(tokens)
    first = tokens[0]
    tries = 8
    for p in range(1, min(_PERIOD_MAX, n // 2) + 1):
        if tokens[p] != first:
            continue
        e = p + common_run(tokens, tokens, p, 0, n, n)
        if e >= 2 * p and e >= need:
            return p, e
        if e >= 3 * p + 16:
            tries -= 1
            if not tries:
                break
    return None


def _repeats(tokens):
    """``(start, p, reps, left)``: ``tokens[start:start + reps * p]`` is a pattern of p
    tokens repeated ``reps`` >= 2 times, ``left`` tokens follow it; or None.  Tried: up to
    ``_PERIOD_SKIP`` other tokens first and any after; then (the start of a run, before a
    time-step loop, is often longer) up to ``_PERIOD_SKIP`` after and any before, when the
    repeats cover half the run."""
    n = len(tokens)
    for skip in range(min(_PERIOD_SKIP, n - 2) + 1):
        rest = tokens[skip:]
        label = rest[0][0]
        if rest[0][1] >= 1 and all(t[0] == label and t[1] >= 1 for t in rest):
            return skip, 1, len(rest), 0
        found = _period(rest, len(rest) - _PERIOD_SKIP)
        if found:
            p, e = found
            return skip, p, e // p, len(rest) - e // p * p
    back = tokens[::-1]
    for skip in range(min(_PERIOD_SKIP, n - 2) + 1):
        found = _period(back[skip:], (n + 1) // 2)
        if found:
            p, e = found                   # the repeats as early as they go
            return n - skip - e, p, e // p, skip + e % p
    return None


def describe_common(tokens):
    """``(text, tokens named)``: a collapsed common run in words.  Tokens of one loop are
    its iterations ("9 common iterations of L5 (in 3 tokens)"), one call repeated is its
    count ("12 common MPI_Barrier"), a repeated pattern (a loop that did not fold) is its
    repetitions ("450 common tokens: 9 iterations of [A B L3^6 ...]"), with what comes
    before ("..., MPI_Init, then 9 iterations of ...") and the count of what comes after
    ("... and 2 more"); see :func:`_repeats`.  Else only the count ("120 common
    tokens")."""
    n = len(tokens)
    plain = _count(n, "common token")
    found = _repeats(tokens) if n >= 2 else None
    if found is None:
        return plain, []
    start, p, reps, left = found
    lead = list(tokens[:start])
    body = tokens[start:start + p]
    label = body[0][0]
    if p == 1 and body[0][1] >= 1:
        run = tokens[start:start + reps]
        iters = sum(t[1] for t in run)
        what = f"iterations of {_show((label, 0))} (in {_count(reps, 'token')})"
        if not lead and not left:
            return f"{iters:,} common {what}", body
        what = f"{iters:,} {what}"
    elif p == 1:
        what = f"{reps:,} \u00d7 {_show(body[0])}"
        if not lead and not left:
            return f"{reps:,} common {_show(body[0])}", body
    else:
        what = f"{reps:,} iterations of [{_seq_text(body)}]"
    head = f"{_seq_text(lead)}, then " if lead else ""
    tail = f" and {left} more" if left else ""
    return f"{plain}: {head}{what}{tail}", lead[:_DESC_TOKENS] + list(body[:_DESC_TOKENS])


def _tail_text(tokens):
    """What a side did in a long stretch, on one line: its first tokens ... its last."""
    if len(tokens) <= _DESC_TOKENS:
        return " ".join(_show(t, _DESC_NAME) for t in tokens), list(tokens)
    head = tokens[:_DESC_TOKENS - 2]
    return (" ".join(_show(t, _DESC_NAME) for t in head) + f" {ELLIPSIS} " + _show(tokens[-1], _DESC_NAME),
            list(head) + [tokens[-1]])


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


def _body_text(label, loop_bodies, limit=None):
    body = (loop_bodies or {}).get(label)
    if body is None:
        return f"{_cut(visible(label))} = [?]"
    if limit is None:
        return f"{_cut(visible(label))} = [{' '.join(_show(norm_token(t)) for t in body)}]"
    toks = [norm_token(t) for t in body[:_BODY_TOKENS]]
    inner = " ".join(_show(t, _DESC_NAME) for t in toks)
    if len(body) > _BODY_TOKENS:
        inner += f" {ELLIPSIS} ({len(body):,} tokens)"
    return _cut(f"{_cut(visible(label), _DESC_NAME)} = [{inner}]", limit)


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
            self.add(_GREEN, "  " + _show(t), (t,))

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
    N, F = _cut(visible(normal_label), 60), _cut(visible(faulty_label), 60)
    stop = None
    if at_end and len(nt) > full and len(ft) <= full:
        stop = "faulty"
    elif at_end and len(ft) > full and len(nt) <= full:
        stop = "normal"
    for sign, code, toks, who, kind in (("-", _BLUE, nt, N, "normal"), ("+", _RED, ft, F, "faulty")):
        if len(toks) <= full:
            for t in toks:
                out.add(code, f"{sign} " + _show(t), (t,))
        elif stop is not None:
            text, named = _tail_text(toks)
            out.add(code, f"{sign} {who} continued with {_count(len(toks), 'more token')}: {text}", named)
        else:
            for t in toks[:head]:
                out.add(code, f"{sign} " + _show(t), (t,))
            rest = toks[head:]
            text, named = _tail_text(rest)
            out.add(code, f"{sign} {ELLIPSIS} {_count(len(rest), 'more token')} only in {who}: {text}", named)
    if stop == "faulty":
        out.add(_DIM, f"  ({F} stops here: its trace ends after {_count(ends[1], 'token')})")
    elif stop == "normal":
        out.add(_DIM, f"  ({N} ends here, after {_count(ends[0], 'token')})")


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
    view = _view(blocks, context)
    for item in view:
        if item[0] == "common":
            lines.extend(paint(_GREEN, "  " + _show(t)) for t in item[1])
        elif item[0] == "gap":
            text, _ = describe_common(item[1])
            lines.append(paint(_DIM, f"  {ELLIPSIS} {text} {ELLIPSIS}"))
        else:
            lines.extend(paint(_BLUE, "- " + _show(t)) for t in item[1])
            lines.extend(paint(_RED, "+ " + _show(t)) for t in item[2])
    if not view:
        lines.append("  (both traces empty)")
    loops = _loops_in_order(_shown_token_lists(view), loop_bodies)
    if loops:
        lines.append("")
        lines.extend(_body_text(lab, loop_bodies) for lab in loops)
    return lines


def render_text(blocks, loop_bodies=None, color: bool = False, title: str = "",
                context=None, normal_label="normal", faulty_label="faulty",
                max_lines=DIFF_MAX_LINES) -> str:
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
    ones too, each once, in full).  An approximate diff (``stages.diff.approximate_note``)
    says so on one line under the legend."""
    def paint(code, s):
        return f"{code}{s}{_RESET}" if color and code else s

    lines = []
    if title:
        lines.append(paint(_BOLD, f"diffNLR: {_cut(visible(title), 1000)}"))
    lines.append(paint(_BLUE, f"--- {_cut(visible(normal_label))}"))
    lines.append(paint(_RED, f"+++ {_cut(visible(faulty_label))}"))
    note = approximate_note(blocks)
    if note:
        lines.append(paint(_DIM, visible(note)))
    summary = paint(_DIM, _summary(blocks, normal_label, faulty_label))
    if max_lines is None:
        lines.extend(_render_unbounded(blocks, loop_bodies, paint, context, normal_label, faulty_label))
        lines.append("")
        lines.append(summary)
        return "\n".join(lines) + "\n"

    max_lines = int(max_lines)
    if max_lines < MIN_LINES:
        raise ValueError(f"max_lines must be at least {MIN_LINES} or None")
    context = DIFF_CONTEXT if context is None else max(0, int(context))
    room = max_lines - len(lines) - 2                 # blank line and summary at the end
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
        first_loops = _loops_in_order([first.tokens], None)
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
            body.add(_DIM, f"  {ELLIPSIS} {_count(n_more, 'more changed region')} "
                           "(show all with --all)")
    lines.extend(paint(code, text) for code, text in body.lines)
    loops = _loops_in_order([body.tokens], loop_bodies)
    free = room - len(body) - 1                        # a blank line before the bodies
    if loops and free >= 1:
        lines.append("")
        if len(loops) > free:
            keep = free - 1
            lines.extend(_body_text(lab, loop_bodies, _BODY_CHARS) for lab in loops[:keep])
            lines.append(paint(_DIM, f"{ELLIPSIS} {len(loops) - keep} more loop bodies (show all with --all)"))
        else:
            lines.extend(_body_text(lab, loop_bodies, _BODY_CHARS) for lab in loops)
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
    shown = _cut(clean)
    title = f' title="{html_text(_full(tok))}"' if shown != clean else ""
    text = html_text(shown) + (f"<sup>{count}</sup>" if count else "")
    return f'<{tag} class="{css_class}"{title}>{text}</{tag}>'


def _html_tok(tok, kind):
    return _html_token(tok, "div", f"dnlr-tok dnlr-{kind}")


def _html_body_tok(tok):
    return _html_token(tok, "span", "dnlr-body-tok")


_HTML_SIDE_OPEN = 16      # a side of a change up to this many tokens is shown open


def _html_side(tokens, kind, label):
    """One side of a change region: its boxes; a long side shows its first few and keeps
    the rest in a ``<details>``."""
    if len(tokens) <= _HTML_SIDE_OPEN:
        return "".join(_html_tok(t, kind) for t in tokens)
    head, rest = tokens[:_SIDES[0][1]], tokens[_SIDES[0][1]:]
    text, _ = _tail_text(rest)
    who = html_text(_cut(visible(label), 60))
    return ("".join(_html_tok(t, kind) for t in head)
            + f'<details><summary>{ELLIPSIS} {len(rest):,} more tokens only in {who}: {html_text(text)}</summary>'
            + "".join(_html_tok(t, kind) for t in rest) + "</details>")


def render_html(blocks, loop_bodies=None, title: str = "", normal_label="normal",
                faulty_label="faulty", context=None, include_css: bool = True) -> str:
    """A self-contained HTML fragment (one ``<div class="dnlr">``, with a ``<style>``
    unless ``include_css`` is false): common tokens as green boxes spanning both
    columns, normal-only (blue) on the left and faulty-only (red) on the right, then the
    loop bodies as ``<details>``.  Token boxes carry class ``dnlr-tok dnlr-<kind>``.
    Every token is in the page: with ``context``, long common runs collapse into a
    ``<details>`` (described as in the text: "9 common iterations of L5"), and a side of
    a change longer than 16 tokens keeps all but its first 5 in one.  Every loop of the
    page's tokens has its body listed."""
    nl = html_text(_cut(visible(normal_label)))
    fl = html_text(_cut(visible(faulty_label)))
    out = ['<div class="dnlr">']
    if include_css:
        out.append(f"<style>{HTML_CSS}</style>")
    if title:
        out.append(f"<h3>diffNLR: {html_text(_cut(visible(title), 1000))}</h3>")
    out.append(f'<p class="dnlr-summary">{html_text(_summary(blocks, normal_label, faulty_label))}</p>')
    note = approximate_note(blocks)
    if note:
        out.append(f'<p class="dnlr-summary dnlr-note">{html_text(note)}</p>')
    out.append('<table class="dnlr-grid">')
    out.append(f'<thead><tr><th class="dnlr-h-normal">{nl}</th>'
               f'<th class="dnlr-h-faulty">{fl}</th></tr></thead><tbody>')
    view = _view(blocks, context)
    for item in view:
        if item[0] == "common":
            boxes = "".join(_html_tok(t, "common") for t in item[1])
            out.append(f'<tr><td colspan="2"><div class="dnlr-stack">{boxes}</div></td></tr>')
        elif item[0] == "gap":           # collapsed, every token kept inside
            text, _ = describe_common(item[1])
            boxes = "".join(_html_tok(t, "common") for t in item[1])
            out.append(f'<tr><td colspan="2" class="dnlr-gap"><details><summary>{ELLIPSIS} '
                       f'{html_text(text)} {ELLIPSIS}</summary>'
                       f'<div class="dnlr-stack" style="font-style:normal">{boxes}</div></details></td></tr>')
        else:
            left = _html_side(item[1], "normal", normal_label)
            right = _html_side(item[2], "faulty", faulty_label)
            out.append(f'<tr><td><div class="dnlr-stack">{left}</div></td>'
                       f'<td><div class="dnlr-stack">{right}</div></td></tr>')
    out.append("</tbody></table>")
    view = [("common", item[1]) if item[0] == "gap" else item for item in view]
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
                              f"{ELLIPSIS} {_cut(describe_common(item[1])[0], 60)} {ELLIPSIS}",
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


# --------------------------------------------------------------------------- the object

class DiffNLR:
    """The diffNLR of one trace: its NLR in the normal run against the faulty run.

    Made by ``Results.diffnlr(rank, thread)``.  In a notebook it shows as HTML; ``str()``
    is the bounded text the command line prints.

    Attributes
    ----------
    key : tuple of int
        (rank, thread) of the trace.
    combo : str
        The (filter, K) setting of the NLRs, e.g. ``"11.mpi.K10"``.
    blocks : list of difftrace_mpi.stages.diff.Block
        The diff: ``common``, ``normal``-only and ``faulty``-only blocks of tokens.
    loop_bodies : dict
        ``{"L3": tokens}`` for every loop the two NLRs use.

    Examples
    --------
    >>> d = r.diffnlr(5)                        # doctest: +SKIP
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

    def text(self, color=False, context=DIFF_CONTEXT, max_lines=DIFF_MAX_LINES):
        """The text the command line prints: ``max_lines`` bounds it (None: every
        token); ``context`` tokens are kept next to each change; ``color`` adds ANSI
        colours."""
        return render_text(self.blocks, self.loop_bodies, color=color, title=self.title, context=context,
                           max_lines=max_lines)

    def html(self, page=False):
        """An HTML fragment (``page``: a whole page, as ``diffnlr --html`` writes)."""
        return (render_html_page if page else render_html)(self.blocks, self.loop_bodies, title=self.title,
                                                           context=DIFF_CONTEXT)

    def svg(self):
        """A standalone SVG picture, as ``diffnlr --svg`` writes."""
        return render_svg(self.blocks, self.loop_bodies, title=self.title, context=DIFF_CONTEXT)

    def table(self, as_frame=None):
        """The blocks as a table: ``kind``, where they start in each NLR, their tokens."""
        from ..results import as_table
        from ..stages.diff import format_token
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
