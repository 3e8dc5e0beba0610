"""diffNLR: the diff of two NLR token sequences (DiffTrace, Taheri et al. 2019, II.G).

An NLR token is a tuple ``(label, count)``: ``count == 0`` is a plain function call
(``("MPI_Send", 0)``, shown ``MPI_Send``), ``count >= 1`` is a loop (``("L1", 7)``,
shown ``L1^7``).  Two tokens are equal iff label and count are equal, so ``L1^7`` and
``L1^16`` differ, as in DiffTrace.  Loop bodies, for listing, come as a dict
``{"L1": [("MPI_Recv", 0), ("MPI_Send", 0)], ...}``; bodies may contain loops.

The diff is Myers' O((N+M)D) algorithm ("An O(ND) difference algorithm and its
variations", Algorithmica 1986) with the linear-space middle-snake refinement, run on
integer ids with an explicit work stack (no recursion).  Before the search, and again in
every sub-problem, the common prefix and suffix are stripped, and tokens that occur in
only one of the two sequences are set aside (they can never be matched, so removing them
leaves the longest common subsequence unchanged).  The result is a minimal edit script:
the number of tokens only in ``normal`` plus the number only in ``faulty`` is
``len(normal) + len(faulty) - 2 * LCS``.  Snakes (runs of equal tokens) are followed by
comparing list slices with galloping, so long common runs cost C-speed comparisons; the
per-diagonal work is Python, O(D^2) in total, so very different traces are slow — pass
``max_cost`` to bound it (the script is then still a correct diff, no longer
guaranteed minimal).

Blocks: ``common`` (in both), ``normal`` (only in the normal trace: deleted), ``faulty``
(only in the faulty trace: inserted).  Within a change region the ``normal`` block comes
before the ``faulty`` block.  Renderers: :func:`summarize` (one or two sentences),
:func:`render_text` (unified, line per token, ANSI colours optional),
:func:`render_html` / :func:`render_html_page` (two columns, green / blue / red, like the
paper's figures) and :func:`render_svg`.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

__all__ = [
    "Block", "diff_tokens", "edit_count", "format_token", "summarize",
    "render_text", "render_html", "render_html_page", "render_svg", "HTML_CSS",
]

Token = tuple  # (label: str, count: int)

NAME_LIMIT = 200          # names longer than this are cut (with an ellipsis) when shown
ELLIPSIS = "\u2026"


# --------------------------------------------------------------------------- model

@dataclass
class Block:
    """One block of a diff.

    ``kind`` is ``"common"``, ``"normal"`` (only in normal) or ``"faulty"`` (only in
    faulty).  ``normal_start``/``faulty_start`` are the positions in the two sequences
    where the block starts (for a one-sided block, the start on the other side is where
    the block would be inserted).  A common block holds its tokens on both sides.
    """
    kind: str
    normal_start: int
    normal_tokens: list = field(default_factory=list)
    faulty_start: int = 0
    faulty_tokens: list = field(default_factory=list)

    @property
    def tokens(self):
        """The block's tokens (the side it belongs to)."""
        return self.faulty_tokens if self.kind == "faulty" else self.normal_tokens

    def __len__(self):
        return len(self.tokens)


def _norm_token(t):
    if isinstance(t, str):
        return (t, 0)
    label, count = t
    count = int(count)
    if count < 0:
        raise ValueError(f"token {t!r}: negative count")
    return (str(label), count)


def _norm_tokens(seq):
    return [_norm_token(t) for t in seq]


def format_token(tok) -> str:
    """``("MPI_Send", 0)`` -> ``MPI_Send``; ``("L1", 7)`` -> ``L1^7`` (no cutting)."""
    label, count = _norm_token(tok)
    return label if count == 0 else f"{label}^{count}"


# --------------------------------------------------------------------------- Myers

_LINEAR = 16


def _fwd(a, b, x, y, xe, ye):
    """Length of the run a[x+t] == b[y+t] for t = 0.., stopping at xe / ye."""
    n = min(xe - x, ye - y)
    if n <= 0 or a[x] != b[y]:
        return 0
    t = 1
    while t < n and t < _LINEAR:
        if a[x + t] != b[y + t]:
            return t
        t += 1
    if t == n:
        return n
    step = _LINEAR
    while True:
        e = min(t + step, n)
        if a[x + t:x + e] == b[y + t:y + e]:
            t = e
            if t == n:
                return n
            step <<= 1
        else:                      # a mismatch lies in [t, e)
            lo, hi = t, e
            while hi - lo > _LINEAR:
                mid = (lo + hi) >> 1
                if a[x + lo:x + mid] == b[y + lo:y + mid]:
                    lo = mid
                else:
                    hi = mid
            while a[x + lo] == b[y + lo]:
                lo += 1
            return lo


def _bwd(a, b, x, y, xs, ys):
    """Length of the run a[x-1-t] == b[y-1-t] for t = 0.., stopping at xs / ys."""
    n = min(x - xs, y - ys)
    if n <= 0 or a[x - 1] != b[y - 1]:
        return 0
    t = 1
    while t < n and t < _LINEAR:
        if a[x - 1 - t] != b[y - 1 - t]:
            return t
        t += 1
    if t == n:
        return n
    step = _LINEAR
    while True:
        e = min(t + step, n)
        if a[x - e:x - t] == b[y - e:y - t]:
            t = e
            if t == n:
                return n
            step <<= 1
        else:
            lo, hi = t, e
            while hi - lo > _LINEAR:
                mid = (lo + hi) >> 1
                if a[x - mid:x - lo] == b[y - mid:y - lo]:
                    lo = mid
                else:
                    hi = mid
            while a[x - 1 - lo] == b[y - 1 - lo]:
                lo += 1
            return lo


def _middle_snake(a, b, a0, a1, b0, b1, max_cost):
    """Myers' middle snake of a[a0:a1] vs b[b0:b1] (both non-empty, D >= 2 expected).

    Returns absolute (xs, ys, xe, ye): a snake (possibly empty) on an optimal path,
    with the forward part ending at (xs, ys) and the reverse part starting at (xe, ye).
    With ``max_cost`` and a search that passes it, returns a split point on a cheap
    (not necessarily optimal) path instead; None when no useful split exists.

    Forward: vf[k] = furthest x on diagonal k = x - y reached with d edits from (0, 0).
    Reverse: the same search on the reversed sequences, vb[k'] with k' = x' - y',
    x' = N - x, y' = M - y, so forward diagonal k is reverse diagonal delta - k and the
    two paths overlap when vf[k] + vb[delta - k] >= N.
    """
    N = a1 - a0
    M = b1 - b0
    delta = N - M
    odd = delta & 1
    dmax = (N + M + 1) // 2
    off = dmax + 1
    vf = [0] * (2 * dmax + 3)
    vb = [0] * (2 * dmax + 3)
    fwd = _fwd
    bwd = _bwd
    for d in range(dmax + 1):
        if max_cost is not None and d > max_cost:
            return _cheap_split(vf, off, d - 1, N, M, a0, b0)
        # forward step
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and vf[off + k - 1] < vf[off + k + 1]):
                x = vf[off + k + 1]
            else:
                x = vf[off + k - 1] + 1
            xs = x
            x += fwd(a, b, a0 + x, b0 + x - k, a1, b1)
            vf[off + k] = x
            if odd:
                kb = delta - k
                if -d < kb < d and x + vb[off + kb] >= N:
                    return (a0 + xs, b0 + xs - k, a0 + x, b0 + x - k)
        # reverse step
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and vb[off + k - 1] < vb[off + k + 1]):
                x = vb[off + k + 1]
            else:
                x = vb[off + k - 1] + 1
            xs = x
            x += bwd(a, b, a1 - x, b1 - (x - k), a0, b0)
            vb[off + k] = x
            if not odd:
                kf = delta - k
                if -d <= kf <= d and vf[off + kf] + x >= N:
                    # reverse snake (xs..x on k') is forward (N-x .. N-xs) on kf
                    return (a1 - x, b1 - (x - k), a1 - xs, b1 - (xs - k))
    raise AssertionError("middle snake not found")   # unreachable


def _cheap_split(vf, off, d, N, M, a0, b0):
    """The in-grid forward point of step d that got furthest (max x + y)."""
    best = None
    best_score = -1
    for k in range(-d, d + 1, 2):
        x = vf[off + k]
        y = x - k
        if 0 <= x <= N and 0 <= y <= M and x + y > best_score:
            best, best_score = (x, y), x + y
    if best is None or best == (0, 0) or best == (N, M):
        return None
    x, y = best
    return (a0 + x, b0 + y, a0 + x, b0 + y)


def _lcs_runs(a, b, max_cost=None):
    """Matched runs (i, j, length), in order, of a minimal edit script of a vs b."""
    runs = []
    stack = [(0, len(a), 0, len(b))]
    while stack:
        item = stack.pop()
        if len(item) == 3:
            runs.append(item)
            continue
        a0, a1, b0, b1 = item
        p = _fwd(a, b, a0, b0, a1, b1)
        if p:
            runs.append((a0, b0, p))
            a0 += p
            b0 += p
        s = _bwd(a, b, a1, b1, a0, b0)
        if s:
            a1 -= s
            b1 -= s
            stack.append((a1, b1, s))
        if a0 == a1 or b0 == b1:
            continue
        ms = _middle_snake(a, b, a0, a1, b0, b1, max_cost)
        if ms is None:
            continue                       # (only with max_cost) replace it all
        xs, ys, xe, ye = ms
        stack.append((xe, a1, ye, b1))
        if xe > xs:
            stack.append((xs, ys, xe - xs))
        stack.append((a0, xs, b0, ys))
    return runs


def _matches(a, b, max_cost=None):
    """Matched runs of int lists a, b in original coordinates, merged and sorted."""
    n, m = len(a), len(b)
    p = _fwd(a, b, 0, 0, n, m)
    s = _bwd(a, b, n, m, p, p)
    runs = [(0, 0, p)] if p else []
    am = a[p:n - s]
    bm = b[p:m - s]
    if am and bm:
        # tokens present on one side only can never match: set them aside
        in_b = set(bm)
        in_a = set(am)
        ia = [i for i, v in enumerate(am) if v in in_b]
        jb = [j for j, v in enumerate(bm) if v in in_a]
        if len(ia) == len(am) and len(jb) == len(bm):
            runs.extend((i + p, j + p, L) for i, j, L in _lcs_runs(am, bm, max_cost))
        elif ia and jb:
            af = [am[i] for i in ia]
            bf = [bm[j] for j in jb]
            for i, j, L in _lcs_runs(af, bf, max_cost):
                for t in range(L):
                    runs.append((ia[i + t] + p, jb[j + t] + p, 1))
    if s:
        runs.append((n - s, m - s, s))
    merged = []
    for i, j, L in runs:
        if merged:
            pi, pj, pL = merged[-1]
            if pi + pL == i and pj + pL == j:
                merged[-1] = (pi, pj, pL + L)
                continue
        merged.append((i, j, L))
    return merged


def diff_tokens(normal, faulty, max_cost=None) -> list:
    """Diff two NLR token sequences; returns a list of :class:`Block`.

    ``normal``/``faulty``: sequences of ``(label, count)`` tokens (a bare ``str`` is
    taken as ``(str, 0)``).  Consecutive blocks of one kind are merged; in a change
    region the ``normal`` block precedes the ``faulty`` block.  The edit script is
    minimal unless ``max_cost`` (a bound on the half edit distance searched per
    sub-problem, >= 1) is given and exceeded.
    """
    if max_cost is not None and int(max_cost) < 1:
        raise ValueError("max_cost must be >= 1 or None")
    normal = _norm_tokens(normal)
    faulty = _norm_tokens(faulty)
    ids = {}
    a = [ids.setdefault(t, len(ids)) for t in normal]
    b = [ids.setdefault(t, len(ids)) for t in faulty]
    blocks = []
    i = j = 0
    for ri, rj, L in _matches(a, b, max_cost):
        if ri > i:
            blocks.append(Block("normal", i, normal[i:ri], j, []))
        if rj > j:
            blocks.append(Block("faulty", ri, [], j, faulty[j:rj]))
        blocks.append(Block("common", ri, normal[ri:ri + L], rj, faulty[rj:rj + L]))
        i, j = ri + L, rj + L
    if i < len(normal):
        blocks.append(Block("normal", i, normal[i:], j, []))
    if j < len(faulty):
        blocks.append(Block("faulty", len(normal), [], j, faulty[j:]))
    return blocks


def edit_count(blocks) -> int:
    """Number of tokens only in normal plus only in faulty."""
    return sum(len(b.tokens) for b in blocks if b.kind != "common")


# --------------------------------------------------------------------------- helpers

_BAD_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def _escape_char(m):
    c = m.group(0)
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def _clean(s: str) -> str:
    """Make a name safe to show: control characters, lone surrogates and XML-invalid
    code points become visible backslash escapes (one line, valid XML, valid UTF-8)."""
    return _BAD_CHARS.sub(_escape_char, s)


def _cut(s: str, limit: int = NAME_LIMIT) -> str:
    return s if len(s) <= limit else s[:limit] + ELLIPSIS


def _show(tok, limit: int = NAME_LIMIT) -> str:
    """Display form of a token: cleaned, label cut to ``limit`` characters."""
    label, count = tok
    label = _cut(_clean(label), limit)
    return label if count == 0 else f"{label}^{count}"


def _full(tok) -> str:
    label, count = tok
    label = _clean(label)
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
                t = _norm_token(t)
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


def _regions(blocks):
    """Group blocks: ("common", tokens) or ("change", normal_tokens, faulty_tokens)."""
    out = []
    for b in blocks:
        if b.kind == "common":
            out.append(("common", b.normal_tokens))
        else:
            if not out or out[-1][0] != "change":
                out.append(("change", [], []))
            if b.kind == "normal":
                out[-1][1].extend(b.normal_tokens)
            else:
                out[-1][2].extend(b.faulty_tokens)
    return out


def _view(blocks, context):
    """Items to show: ("common", tokens) / ("gap", n) / ("change", ntoks, ftoks).

    With ``context`` (int >= 0), long common runs keep ``context`` tokens next to each
    change and the rest become a gap (only when at least 2 tokens would be hidden).
    """
    regions = _regions(blocks)
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


# --------------------------------------------------------------------------- summary

_SUMMARY_NAME = 60


def _seq(tokens, limit=6):
    shown = [_show(t, _SUMMARY_NAME) for t in tokens]
    if len(shown) <= limit:
        return " ".join(shown)
    return f"{' '.join(shown[:3])} {ELLIPSIS} {' '.join(shown[-2:])} ({len(shown)} tokens)"


def _n(k, word="token"):
    return f"{k} {word}{'' if k == 1 else 's'}"


def summarize(blocks, normal_label="normal", faulty_label="faulty") -> str:
    """One or two plain sentences describing the diff, e.g. "The traces agree for 3
    tokens, up to MPI_Comm_size, then normal has L1^16 where faulty has L1^7 L0^9; both
    end with MPI_Finalize."."""
    N, F = normal_label, faulty_label
    regions = _regions(blocks)
    normal = [t for b in blocks if b.kind != "faulty" for t in b.normal_tokens]
    faulty = [t for b in blocks if b.kind != "normal" for t in b.faulty_tokens]
    if not regions:
        return "No difference: both traces are empty."
    changes = [r for r in regions if r[0] == "change"]
    if not changes:
        return f"No difference: the traces are identical ({_n(len(normal))})."
    if not normal:
        return f"The {N} trace is empty; {F} has {_seq(faulty)}."
    if not faulty:
        return f"The {F} trace is empty; {N} has {_seq(normal)}."

    def stop_clause(nt, ft):
        """End of the traces after a final change region (nt / ft: its two sides)."""
        if not ft:
            last = normal[-1]
            never = last not in faulty
            s = f"{F} stops after {_show(faulty[-1], _SUMMARY_NAME)}"
            if never:
                s += f" and never reaches {_show(last, _SUMMARY_NAME)}"
            return s + f", while {N} continues with {_seq(nt)}"
        if not nt:
            last = faulty[-1]
            s = f"{N} stops after {_show(normal[-1], _SUMMARY_NAME)}"
            if last not in normal:
                s += f" and never reaches {_show(last, _SUMMARY_NAME)}"
            return s + f", while {F} continues with {_seq(ft)}"
        ln, lf = normal[-1], faulty[-1]
        if ln not in faulty:
            return (f"{F} stops after {_show(lf, _SUMMARY_NAME)} and never reaches "
                    f"{_show(ln, _SUMMARY_NAME)}, where {N} ends")
        if lf not in normal:
            return (f"{N} stops after {_show(ln, _SUMMARY_NAME)} and never reaches "
                    f"{_show(lf, _SUMMARY_NAME)}, where {F} ends")
        return (f"the traces end differently: {N} ends with {_show(ln, _SUMMARY_NAME)}, "
                f"{F} with {_show(lf, _SUMMARY_NAME)}")

    def change_clause(nt, ft):
        if nt and ft:
            return f"{N} has {_seq(nt)} where {F} has {_seq(ft)}"
        if nt:
            return f"{N} has {_seq(nt)} that {F} lacks"
        return f"{F} has {_seq(ft)} that {N} lacks"

    first_change = 0 if regions[0][0] == "change" else 1
    _, nt, ft = regions[first_change]
    at_end = first_change == len(regions) - 1
    if first_change == 0:
        lead = "The traces differ from the first token: "
        if at_end:
            return (lead + f"{N} is {_seq(nt)}, {F} is {_seq(ft)}; they have nothing "
                    "in common.")
        lead += change_clause(nt, ft)
    else:
        common = regions[0][1]
        lead = (f"The traces agree for {_n(len(common))}, up to "
                f"{_show(common[-1], _SUMMARY_NAME)}, then ")
        if at_end and (not nt or not ft):
            return lead + stop_clause(nt, ft) + "."
        lead += change_clause(nt, ft)

    last = regions[-1]
    if last[0] == "common":
        ct = last[1]
        if len(ct) <= 3:
            end = f"both end with {_seq(ct)}"
        else:
            end = f"both end with the same {_n(len(ct))}, the last being " \
                  f"{_show(ct[-1], _SUMMARY_NAME)}"
    else:
        end = stop_clause(last[1], last[2])
    if len(changes) == 1:
        return f"{lead}; {end}."
    only_n = sum(len(r[1]) for r in changes)
    only_f = sum(len(r[2]) for r in changes)
    return (f"{lead}. In all they differ in {len(changes)} places "
            f"({_n(only_n)} only in {N}, {_n(only_f)} only in {F}); {end}.")


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
        return f"{_cut(_clean(label))} = [?]"
    return f"{_cut(_clean(label))} = [{' '.join(_show(_norm_token(t)) for t in body)}]"


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
        lines.append(paint(_BOLD, f"diffNLR: {_cut(_clean(title), 1000)}"))
    lines.append(paint(_BLUE, f"--- {_cut(_clean(normal_label))}"))
    lines.append(paint(_RED, f"+++ {_cut(_clean(faulty_label))}"))
    view = _view(blocks, context)
    for item in view:
        if item[0] == "common":
            lines.extend(paint(_GREEN, "  " + _show(t)) for t in item[1])
        elif item[0] == "gap":
            lines.append(paint(_DIM, f"  {ELLIPSIS} {_n(item[1], 'common token')} "
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
    lines.append(paint(_DIM, summarize(blocks, _cut(_clean(normal_label), 60),
                                       _cut(_clean(faulty_label), 60))))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- HTML

HTML_CSS = """\
.dnlr{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:13px;color:#222}
.dnlr h3{font-family:sans-serif;margin:.3em 0}
.dnlr-summary{font-family:sans-serif;max-width:60em}
.dnlr-grid{border-collapse:separate;border-spacing:6px 2px}
.dnlr-grid th{font-family:sans-serif;text-align:center;padding:2px 8px}
.dnlr-grid td{vertical-align:top;text-align:center;padding:0}
.dnlr-tok{display:inline-block;min-width:8em;max-width:40em;margin:1px 0;padding:2px 8px;
 border:1px solid #555;border-radius:3px;overflow-wrap:anywhere}
.dnlr-common{background:#b7e4b7}
.dnlr-normal{background:#b8cff5}
.dnlr-faulty{background:#f5b8b8}
.dnlr-gap{color:#666;font-style:italic;font-family:sans-serif}
.dnlr-stack{display:flex;flex-direction:column;align-items:center}
.dnlr-loops details{margin:2px 0}
.dnlr-loops summary{cursor:pointer}
.dnlr-body{margin:2px 0 4px 1.5em;padding:0}
.dnlr-body li{list-style:none}
.dnlr-body-tok{display:inline-block;padding:0 6px;margin:1px;border:1px solid #aaa;
 border-radius:3px;background:#f4f4f4}
"""


def _esc(s):
    return html.escape(s, quote=True)


def _html_tok(tok, kind):
    tok = _norm_token(tok)
    label, count = tok
    clean = _clean(label)
    shown = _cut(clean)
    title = f' title="{_esc(_full(tok))}"' if shown != clean else ""
    text = _esc(shown) + (f"<sup>{count}</sup>" if count else "")
    return f'<div class="dnlr-tok dnlr-{kind}"{title}>{text}</div>'


def _html_body_tok(tok):
    tok = _norm_token(tok)
    label, count = tok
    clean = _clean(label)
    shown = _cut(clean)
    title = f' title="{_esc(_full(tok))}"' if shown != clean else ""
    text = _esc(shown) + (f"<sup>{count}</sup>" if count else "")
    return f'<span class="dnlr-body-tok"{title}>{text}</span>'


def render_html(blocks, loop_bodies=None, title: str = "", normal_label="normal",
                faulty_label="faulty", context=None, include_css: bool = True) -> str:
    """A self-contained HTML fragment (one ``<div class="dnlr">``, with a ``<style>``
    unless ``include_css`` is false): common tokens as green boxes spanning both
    columns, normal-only (blue) on the left and faulty-only (red) on the right, then the
    loop bodies as ``<details>``.  Token boxes carry class ``dnlr-tok dnlr-<kind>``."""
    nl = _esc(_cut(_clean(normal_label)))
    fl = _esc(_cut(_clean(faulty_label)))
    out = ['<div class="dnlr">']
    if include_css:
        out.append(f"<style>{HTML_CSS}</style>")
    if title:
        out.append(f"<h3>diffNLR: {_esc(_cut(_clean(title), 1000))}</h3>")
    out.append(f'<p class="dnlr-summary">{_esc(summarize(blocks, _cut(_clean(normal_label), 60), _cut(_clean(faulty_label), 60)))}</p>')
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
                       f'{_n(item[1], "common token")} {ELLIPSIS}</td></tr>')
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
            shown_lab = _esc(_cut(_clean(lab)))
            if body is None:
                out.append(f"<details><summary>{shown_lab} (body unknown)</summary></details>")
                continue
            items = "".join(f"<li>{_html_body_tok(t)}</li>" for t in body)
            out.append(f"<details><summary>{shown_lab} = "
                       f"[{_esc(' '.join(_show(_norm_token(t), 40) for t in body[:8]))}"
                       f"{' ' + ELLIPSIS if len(body) > 8 else ''}]</summary>"
                       f'<ul class="dnlr-body">{items}</ul></details>')
        out.append("</div>")
    out.append("</div>")
    return "\n".join(out) + "\n"


def render_html_page(blocks, loop_bodies=None, title: str = "", normal_label="normal",
                     faulty_label="faulty", context=None) -> str:
    """A complete HTML page (inline CSS, no scripts, no network) around
    :func:`render_html`."""
    t = _esc(_cut(_clean(title or "diffNLR"), 1000))
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
                f'text-anchor="{anchor}" font-weight="{weight}"{st}>{_esc(s)}</text>')

    def box(cx, yy, tok, kind):
        tok = _norm_token(tok)
        shown = _show(tok, _SVG_BOX_CHARS)
        if len(shown) > _SVG_BOX_CHARS + 8:
            shown = shown[:_SVG_BOX_CHARS] + ELLIPSIS
        return (f'<g><title>{_esc(_full(tok))}</title>'
                f'<rect class="dnlr-{kind}" x="{cx - box_w / 2:.1f}" y="{yy:.1f}" '
                f'width="{box_w}" height="{box_h}" rx="3" fill="{_SVG_FILL[kind]}" '
                f'stroke="#555"/>' + text(cx, yy + box_h * 0.7, shown) + "</g>")

    if title:
        parts.append(text(width / 2, y + 14, f"diffNLR: {_cut(_clean(title), int(width / 9.5) - 9)}",
                          size=15, weight="bold"))
        y += 24
    lx = pad + col_w / 2
    rx = 2 * pad + col_w + col_w / 2
    mx = width / 2
    parts.append(text(lx, y + 14, _cut(_clean(normal_label), 30), weight="bold"))
    parts.append(text(rx, y + 14, _cut(_clean(faulty_label), 30), weight="bold"))
    y += 24
    view = _view(blocks, context)
    for item in view:
        if item[0] == "common":
            for t in item[1]:
                parts.append(box(mx, y, t, "common"))
                y += box_h + gap
        elif item[0] == "gap":
            parts.append(text(mx, y + box_h * 0.7,
                              f"{ELLIPSIS} {_n(item[1], 'common token')} {ELLIPSIS}",
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
