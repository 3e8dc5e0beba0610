"""The diff of two NLR token sequences, the diffNLR of DiffTrace (Taheri et al. 2019, II.G).

An NLR token is a tuple ``(label, count)``: ``count == 0`` is a plain function call
(``("MPI_Send", 0)``, shown ``MPI_Send``), ``count >= 1`` is a loop (``("L1", 7)``,
shown ``L1^7``).  Two tokens are equal iff label and count are equal, so ``L1^7`` and
``L1^16`` differ, as in DiffTrace.

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
before the ``faulty`` block.  The words about a diff (``views.diffprose``) and its
renderings (text, HTML, SVG: ``views.diffnlr``) are views of these blocks.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...config import DIFF_MAX_WORK
from ...naming import token_label

__all__ = [
    "Block", "Diff", "Token", "diff_tokens", "approximate_note", "edit_count", "format_token", "norm_token", "change_regions",
    "common_run",
]

Token = tuple  # (label: str, count: int)


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


def norm_token(t):
    """A token as ``(str label, int count >= 0)``; a bare ``str`` is ``(str, 0)``."""
    if isinstance(t, str):
        return (t, 0)
    label, count = t
    count = int(count)
    if count < 0:
        raise ValueError(f"token {t!r}: negative count")
    return (str(label), count)


def _norm_tokens(seq):
    return [norm_token(t) for t in seq]


def format_token(tok) -> str:
    """``("MPI_Send", 0)`` -> ``MPI_Send``; ``("L1", 7)`` -> ``L1^7`` (no cutting)."""
    return token_label(*norm_token(tok))


# --------------------------------------------------------------------------- Myers

_LINEAR = 16


def common_run(a, b, x, y, xe, ye):
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


def _middle_snake(a, b, a0, a1, b0, b1, max_cost, budget=None):
    """Myers' middle snake of a[a0:a1] vs b[b0:b1] (both non-empty, D >= 2 expected).

    Returns absolute (xs, ys, xe, ye): a snake (possibly empty) on an optimal path,
    with the forward part ending at (xs, ys) and the reverse part starting at (xe, ye).
    With ``max_cost`` and a search that passes it, returns a split point on a cheap
    (not necessarily optimal) path instead; None when no useful split exists.  Each step
    d costs 2d + 2 diagonal moves, charged to ``budget`` (a :class:`_Budget` shared by the
    whole diff); when the budget cannot pay for the next step, returns ``_OUT``.

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
    fwd = common_run
    bwd = _bwd
    for d in range(dmax + 1):
        if max_cost is not None and d > max_cost:
            if budget is not None:
                budget.capped = True
            return _cheap_split(vf, off, d - 1, N, M, a0, b0)
        if budget is not None:
            cost = 2 * d + 2
            left = budget.left
            if left is not None:
                if left < cost:
                    return _OUT
                budget.left = left - cost
            budget.work += cost
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


class _Budget:
    """The work of one diff, shared by all its sub-problems.

    ``left``: diagonal moves the exact search may still make (None: no bound); ``work``:
    every unit of work done (diagonal moves, look-ups of the greedy fallback); ``out``:
    the bound was reached and the rest is aligned greedily; ``cut_at``: the (a, b)
    position of the first sub-problem left to the fallback; ``capped``: a sub-problem
    passed ``max_cost`` and was split heuristically."""
    __slots__ = ("left", "work", "out", "cut_at", "capped")

    def __init__(self, max_work=None):
        self.left = max_work
        self.work = 0
        self.out = False
        self.cut_at = None
        self.capped = False


_OUT = object()          # _middle_snake: the budget cannot pay for the next step

_RESYNC = 4              # greedy fallback: equal tokens in a row that mark a re-alignment
_WINDOW = 256            # ... how far ahead (on either side) a mismatch looks for them
_SMALL = 64              # ... the window (tokens on each side) diffed exactly at a mismatch


def _greedy_runs(a, b, a0, a1, b0, b1, budget):
    """Matched runs of a[a0:a1] vs b[b0:b1] in one left-to-right pass, O(N + M) work for
    a bounded alphabet (index look-ups are O(log)).

    Follow the equal run.  At a mismatch (i, j), find the nearest point (least di + dj,
    di or dj at most ``_WINDOW``) where ``_RESYNC`` tokens in a row are equal (an index of
    each side's token runs finds the first occurrence at or after j, however far).  When
    it is further than ``_SMALL`` the stretch in between is a long insertion or deletion:
    jump there.  Otherwise diff the next ``_SMALL`` tokens of both sides exactly (Myers)
    and keep the matches in the first half of that window.  When nothing matches, skip to
    the far re-alignment, or by the window on both sides.  A correct diff, not always
    minimal (on the inputs of ``tests/test_diff_bounds.py`` within 2-15% of minimal)."""
    from bisect import bisect_left
    R = _RESYNC
    W = _WINDOW
    S = _SMALL
    runs = []

    def grams(s, lo, hi):
        idx = {}
        for p in range(lo, hi - R + 1):
            idx.setdefault(tuple(s[p:p + R]), []).append(p)
        return idx

    idx_a = grams(a, a0, a1)
    idx_b = grams(b, b0, b1)
    work = (a1 - a0) + (b1 - b0)

    def nearest(i, j):
        """(cost, (x, y) or None, look-ups): the nearest run of R equal tokens."""
        best = None
        best_cost = float("inf")
        d = 0
        while d < best_cost and d <= W:
            x = i + d
            if x + R <= a1:
                ps = idx_b.get(tuple(a[x:x + R]))
                if ps:
                    k = bisect_left(ps, j)
                    if k < len(ps) and d + ps[k] - j < best_cost:
                        best, best_cost = (x, ps[k]), d + ps[k] - j
            y = j + d
            if y + R <= b1:
                ps = idx_a.get(tuple(b[y:y + R]))
                if ps:
                    k = bisect_left(ps, i)
                    if k < len(ps) and d + ps[k] - i < best_cost:
                        best, best_cost = (ps[k], y), d + ps[k] - i
            d += 1
        return best_cost, best, 2 * d

    i, j = a0, b0
    while i < a1 and j < b1:
        L = common_run(a, b, i, j, a1, b1)
        work += 1
        if L:
            runs.append((i, j, L))
            i += L
            j += L
            continue
        cost, best, looked = nearest(i, j)
        work += looked
        if best is not None and cost > S:      # a long insertion or deletion: jump over it
            i, j = best
            continue
        # an exact diff of the next window; keep what it matched in the window's first half
        x1, y1 = min(i + S, a1), min(j + S, b1)
        small = _Budget(None)
        window = _lcs_runs(a, b, None, small, i, x1, j, y1)
        work += small.work
        if x1 == a1 and y1 == b1:              # the window reaches both ends: keep it all
            runs.extend(window)
            break
        hx, hy = i + S // 2, j + S // 2
        kept = [r for r in window if r[0] < hx and r[1] < hy]
        if kept:
            runs.extend(kept)
            ki, kj, kl = kept[-1]
            i, j = ki + kl, kj + kl
        elif best is not None:
            i, j = best
        else:                                  # nothing re-aligns: skip the window
            i, j = x1, y1
    budget.work += work
    return runs


def _lcs_runs(a, b, max_cost=None, budget=None, a0=0, a1=None, b0=0, b1=None):
    """Matched runs (i, j, length), in order, of a minimal edit script of a[a0:a1] vs
    b[b0:b1] (the whole lists by default); past ``budget`` (a :class:`_Budget`), the
    sub-problems left are aligned by :func:`_greedy_runs`."""
    runs = []
    stack = [(a0, len(a) if a1 is None else a1, b0, len(b) if b1 is None else b1)]
    while stack:
        item = stack.pop()
        if len(item) == 3:
            runs.append(item)
            continue
        a0, a1, b0, b1 = item
        p = common_run(a, b, a0, b0, a1, b1)
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
        if budget is not None and budget.out:
            runs.extend(_greedy_runs(a, b, a0, a1, b0, b1, budget))
            continue
        ms = _middle_snake(a, b, a0, a1, b0, b1, max_cost, budget)
        if ms is _OUT:                     # the whole diff's bound: greedy from here on
            budget.out = True
            budget.cut_at = (a0, b0)
            runs.extend(_greedy_runs(a, b, a0, a1, b0, b1, budget))
            continue
        if ms is None:
            continue                       # (only with max_cost) replace it all
        xs, ys, xe, ye = ms
        stack.append((xe, a1, ye, b1))
        if xe > xs:
            stack.append((xs, ys, xe - xs))
        stack.append((a0, xs, b0, ys))
    return runs


def _matches(a, b, max_cost=None, budget=None):
    """Matched runs of int lists a, b in original coordinates, merged and sorted.  When
    ``budget`` ran out, its ``cut_at`` is mapped back to original coordinates."""
    n, m = len(a), len(b)
    p = common_run(a, b, 0, 0, n, m)
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
            runs.extend((i + p, j + p, L) for i, j, L in _lcs_runs(am, bm, max_cost, budget))
            if budget is not None and budget.cut_at:
                budget.cut_at = (budget.cut_at[0] + p, budget.cut_at[1] + p)
        elif ia and jb:
            af = [am[i] for i in ia]
            bf = [bm[j] for j in jb]
            for i, j, L in _lcs_runs(af, bf, max_cost, budget):
                for t in range(L):
                    runs.append((ia[i + t] + p, jb[j + t] + p, 1))
            if budget is not None and budget.cut_at:
                ci, cj = budget.cut_at
                budget.cut_at = (ia[ci] + p if ci < len(ia) else n - s,
                                 jb[cj] + p if cj < len(jb) else m - s)
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


class Diff(list):
    """The result of :func:`diff_tokens`: a list of :class:`Block` (it compares equal to
    a plain list of the same blocks), plus how it was found.

    ``approximate`` is true when a bound cut the exact search short (the blocks are still
    a correct diff of the two sequences, only perhaps not the shortest); ``note`` then says
    which bound, in one line starting "approximate diff:"; ``work`` counts the units of
    work spent (diagonal moves of the exact search, look-ups of the greedy fallback)."""
    approximate = False
    note = ""
    work = 0


def approximate_note(blocks) -> str:
    """The one-line "approximate diff: ..." note of a diff, or "" when it is exact (also
    for a plain list of blocks)."""
    return getattr(blocks, "note", "") if getattr(blocks, "approximate", False) else ""


_AUTO = object()


def diff_tokens(normal, faulty, max_cost=None, max_work=_AUTO, keys=None) -> list:
    """Diff two NLR token sequences; returns a :class:`Diff` (a list of :class:`Block`).

    ``normal``/``faulty``: sequences of ``(label, count)`` tokens (a bare ``str`` is
    taken as ``(str, 0)``).  ``keys``: optionally, one int per token of each side, equal
    exactly where the tokens are (``stages.model.nlr.token_keys``): then the tokens are taken as
    given, already ``(str, int)``, and never compared in Python (a real NLR has 10^5-10^6).  Consecutive blocks of one kind are merged; in a change
    region the ``normal`` block precedes the ``faulty`` block.

    Two bounds, each making the result a correct but perhaps not minimal diff (flagged
    by ``Diff.approximate`` and ``Diff.note``): ``max_cost`` (>= 1) bounds the half edit
    distance searched in each sub-problem (past it, a heuristic split); ``max_work``
    (>= 1) bounds the diagonal moves of the whole exact search, over all sub-problems
    (past it, the rest is aligned greedily in O((N + M) log) time, see
    :func:`_greedy_runs`).  By default ``max_work`` is ``config.DIFF_MAX_WORK`` when
    ``max_cost`` is given and None (no bound: the minimal diff, however long it takes)
    when it is not.
    """
    if max_cost is not None and int(max_cost) < 1:
        raise ValueError("max_cost must be >= 1 or None")
    if max_work is _AUTO:
        max_work = None if max_cost is None else DIFF_MAX_WORK
    if max_work is not None:
        max_work = int(max_work)
        if max_work < 1:
            raise ValueError("max_work must be >= 1 or None")
    if keys is None:
        normal = _norm_tokens(normal)
        faulty = _norm_tokens(faulty)
        ids = {}
        a = [ids.setdefault(t, len(ids)) for t in normal]
        b = [ids.setdefault(t, len(ids)) for t in faulty]
    else:
        normal, faulty = list(normal), list(faulty)
        a, b = (list(k) for k in keys)
        if len(a) != len(normal) or len(b) != len(faulty):
            raise ValueError("keys: one per token of each side")
    budget = _Budget(max_work)
    blocks = Diff()
    i = j = 0
    for ri, rj, L in _matches(a, b, max_cost, budget):
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
    blocks.work = budget.work + len(a) + len(b)
    if budget.out:
        ci, cj = budget.cut_at
        blocks.approximate = True
        blocks.note = (f"approximate diff: the exact search reached its bound ({max_work:,} steps) at "
                       f"token {ci + 1:,} of normal and {cj + 1:,} of faulty; from there the traces "
                       "were aligned greedily (a correct diff, perhaps not the shortest)")
    elif budget.capped:
        blocks.approximate = True
        blocks.note = (f"approximate diff: a stretch with more than {int(max_cost):,} differences was "
                       "split heuristically (a correct diff, perhaps not the shortest)")
    return blocks


def edit_count(blocks) -> int:
    """Number of tokens only in normal plus only in faulty."""
    return sum(len(b.tokens) for b in blocks if b.kind != "common")


def change_regions(blocks):
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
