"""The parts every diffNLR view shares: which traces' diffs are shown and their diffs
computed from a Results (:func:`trace_diff`), the visible window of a diff with its
context, and the one-line descriptions of long common runs."""
from __future__ import annotations

import numpy as np

from ..escape import visible
from ..config import DIFF_MAX_COST
from ..naming import ELLIPSIS, describe_keys, plural, shorten, token_label
from ..stages.model import nlr
from ..stages.compare.diff import change_regions, common_run, diff_tokens, norm_token
from .diffprose import summarize

NAME_LIMIT = 200          # names longer than this are cut (with an ellipsis) when shown


# --------------------------------------------------------------------------- helpers

def shown_name(s: str, limit: int = NAME_LIMIT) -> str:
    """``s`` with at most ``limit`` characters kept, an ellipsis after them when cut."""
    return shorten(s, limit + 1)


def shown_label(tok, limit: int = NAME_LIMIT) -> str:
    """Display form of a token: escaped, label cut to ``limit`` characters."""
    label, count = tok
    return token_label(shown_name(visible(label), limit), count)


def full_label(tok) -> str:
    label, count = tok
    return token_label(visible(label), count)


def is_loop(tok) -> bool:
    return tok[1] >= 1


def loops_in_order(token_lists, loop_bodies):
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
                if is_loop(t) and t[0] not in seen:
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




def diff_window(blocks, context):
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


def shown_token_lists(view):
    for item in view:
        if item[0] == "common":
            yield item[1]
        elif item[0] == "change":
            yield item[1]
            yield item[2]


def summary_line(blocks, normal_label, faulty_label):
    """The diff in words, escaped, with the two runs' labels cut to 60 characters."""
    return visible(summarize(blocks, shown_name(normal_label, 60), shown_name(faulty_label, 60)))


# --------------------------------------------------------------------------- common runs

_PERIOD_MAX = 256         # longest repeated pattern a collapsed common run is described by
_PERIOD_SKIP = 8          # ... after at most this many other tokens
DESC_NAME = 40           # characters of a name in a one-line description
_DESC_TOKENS = 6          # tokens of a pattern shown in a one-line description


def count_words(n, word):
    """``1 token``, ``1,234 tokens``."""
    return plural(n, word, grouped=True)


def seq_text(tokens, limit=_DESC_TOKENS, name=DESC_NAME):
    """Tokens on one line: the first ``limit``, then the count of the rest."""
    shown = " ".join(shown_label(norm_token(t), name) for t in tokens[:limit])
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
    plain = count_words(n, "common token")
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
        what = f"iterations of {shown_label((label, 0))} (in {count_words(reps, 'token')})"
        if not lead and not left:
            return f"{iters:,} common {what}", body
        what = f"{iters:,} {what}"
    elif p == 1:
        what = f"{reps:,} \u00d7 {shown_label(body[0])}"
        if not lead and not left:
            return f"{reps:,} common {shown_label(body[0])}", body
    else:
        what = f"{reps:,} iterations of [{seq_text(body)}]"
    head = f"{seq_text(lead)}, then " if lead else ""
    tail = f" and {left} more" if left else ""
    return f"{plain}: {head}{what}{tail}", lead[:_DESC_TOKENS] + list(body[:_DESC_TOKENS])


def tail_text(tokens):
    """What a side did in a long stretch, on one line: its first tokens ... its last."""
    if len(tokens) <= _DESC_TOKENS:
        return " ".join(shown_label(t, DESC_NAME) for t in tokens), list(tokens)
    head = tokens[:_DESC_TOKENS - 2]
    return (" ".join(shown_label(t, DESC_NAME) for t in head) + f" {ELLIPSIS} " + shown_label(tokens[-1], DESC_NAME),
            list(head) + [tokens[-1]])



def trace_diff(results, key, combo=None):
    """(combo name, blocks, loop bodies) of the diffNLR of trace ``key`` = (rank, thread)
    under setting ``combo`` (default: ``Results.differing_combo``, the best row's setting
    unless the trace's NLRs differ only in another)."""
    obj = results.object_index(key)
    cname = results.combo(combo).name if combo else results.differing_combo(obj)
    nlrs = [nlr.NLR(*results.nlr_of(cname, ri, obj)) for ri in (0, 1)]
    keys = nlr.token_keys(*nlrs)
    seqs = [nlr.tokens(nl, results.names, k) for nl, k in zip(nlrs, keys)]
    keys = [k.tolist() for k in keys]
    used = np.unique(np.concatenate([-nl.ids[nl.ids < 0] - 1 for nl in nlrs])).tolist()
    bodies = bodies_with_nested(results.combos[cname].loops, results.names, used)
    return cname, diff_tokens(seqs[0], seqs[1], max_cost=DIFF_MAX_COST, keys=keys), bodies


def bodies_with_nested(loops, names, used):
    """{"L3": tokens} of the loops ``used`` and of every loop nested in them."""
    bodies, todo = {}, list(used)
    while todo:
        loop = todo.pop()
        if f"L{loop}" in bodies or loop >= len(loops):
            continue
        ids, counts = loops[loop]
        bodies[f"L{loop}"] = nlr.tokens(nlr.NLR(ids, counts), names)
        todo.extend(int(-i - 1) for i in ids if i < 0)
    return bodies


def hang_cause(hang):
    """The least progressed stopped trace that left the normal path first, from a hang
    view, or None (also when most stopped traces left it: then it singles out nothing)."""
    return hang["left_normal_path"][0][0] if hang and hang["left_singles_out"] else None


def diffnlr_keys(top_keys, hang, culprits=None):
    """The traces whose diffNLRs are shown: the verdict's culprits when there is a verdict,
    else the best row's top suspects then the hang's likely cause (``hang_cause``) when
    it is not one of them."""
    if culprits:
        return list(culprits)
    cause = hang_cause(hang)
    return list(top_keys) + ([cause] if cause is not None and cause not in top_keys else [])


def diff_title(key, cname, top_keys, culprits=()):
    """A diffNLR's heading: the trace, the setting, and why it is shown when it is not one
    of the best row's top suspects (``top_keys``)."""
    why = ("; a culprit of the verdict" if key in culprits else
           "" if key in top_keys else "; the hang's likely cause: it left the normal path first")
    return f"rank {key[0]} thread {key[1]} ({cname}{why})"


def full_diff_command(key, cname):
    """The command that shows every token of a trace's diffNLR a page draws in part."""
    return f"difftrace-mpi diffnlr RESULTS.h5 --rank {key[0]} --thread {key[1]} --combo {cname} --all"


def shown_diff_keys(results, count):
    """The traces whose diffNLRs ``analyze`` shows (``diffnlr_keys``), and those of them whose
    NLRs the results did not keep (``Results.nlrs_kept``): (shown, not kept)."""
    if not results.rows and not results.combos:      # identical runs, or the faulty run alone
        return [], []
    keys = diffnlr_keys(results.top_keys(count), results.hang_view(limit=1) if count > 0 else None,
                        results.culprit_keys(count))
    return [k for k in keys if results.nlrs_kept(k)], [k for k in keys if not results.nlrs_kept(k)]


def not_kept_line(keys):
    """One line for diffNLRs left out because the results did not keep their NLRs."""
    rank, thread = keys[0]
    return (f"diffNLR of {describe_keys(keys)} not shown: the results keep whole NLRs only up to --keep-nlrs "
            f"tokens; 'diffnlr NORMAL FAULTY --rank {rank} --thread {thread}' diffs one from the traces")


def suspect_diffs(results, count):
    """[(key, combo name, blocks, loop bodies)] for the ``count`` top thread suspects of the
    best row, then (count >= 1) the hang's likely cause when it is not among them: the
    least progressed trace that left the normal path before stopping (``hang_cause``);
    those whose NLRs the results keep (``shown_diff_keys``)."""
    return [(key, *trace_diff(results, key)) for key in shown_diff_keys(results, count)[0]]
