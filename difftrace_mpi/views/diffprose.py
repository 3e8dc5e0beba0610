"""A diff of two NLR token sequences in words: :func:`summarize` says in one or two plain
sentences where the faulty trace leaves the normal one (names as they are: the views
escape what they write); :func:`brief` gives the same as data for the verdict's JSON."""
from ..naming import ELLIPSIS, plural, shorten, token_label
from ..stages.compare.diff import approximate_note, change_regions, format_token


def n_tokens(k):
    """``1 token``, ``1,234 tokens``."""
    return plural(k, "token", grouped=True)


# --------------------------------------------------------------------------- summary

_SUMMARY_NAME = 61      # characters of a name in a summary, its ellipsis included


def _short(tok):
    label, count = tok
    return token_label(shorten(label, _SUMMARY_NAME), count)


def _seq(tokens, limit=6):
    if len(tokens) <= limit:
        return " ".join(_short(t) for t in tokens)
    # only the tokens shown are spelled out: a side of a real diff has 10^5 tokens and more
    return (f"{' '.join(_short(t) for t in tokens[:3])} {ELLIPSIS} {' '.join(_short(t) for t in tokens[-2:])} "
            f"({len(tokens):,} tokens)")


def summarize(blocks, normal_label="normal", faulty_label="faulty") -> str:
    """One or two plain sentences describing the diff, e.g. "The traces agree for 3
    tokens, up to MPI_Comm_size, then normal has L1^16 where faulty has L1^7 L0^9; both
    end with MPI_Finalize.".  Names are as they are, cut to 60 characters: whoever writes
    the sentence escapes it (``escape``)."""
    N, F = normal_label, faulty_label
    regions = change_regions(blocks)
    normal = [t for b in blocks if b.kind != "faulty" for t in b.normal_tokens]
    faulty = [t for b in blocks if b.kind != "normal" for t in b.faulty_tokens]
    if not regions:
        return "No difference: both traces are empty."
    changes = [r for r in regions if r[0] == "change"]
    if not changes:
        return f"No difference: the traces are identical ({n_tokens(len(normal))})."
    if not normal:
        return f"The {N} trace is empty; {F} has {_seq(faulty)}."
    if not faulty:
        return f"The {F} trace is empty; {N} has {_seq(normal)}."

    def stop_clause(nt, ft):
        """End of the traces after a final change region (nt / ft: its two sides)."""
        if not ft:
            last = normal[-1]
            never = last not in faulty
            s = f"{F} stops after {_short(faulty[-1])}"
            if never:
                s += f" and never reaches {_short(last)}"
            return s + f", while {N} continues with {_seq(nt)}"
        if not nt:
            last = faulty[-1]
            s = f"{N} stops after {_short(normal[-1])}"
            if last not in normal:
                s += f" and never reaches {_short(last)}"
            return s + f", while {F} continues with {_seq(ft)}"
        ln, lf = normal[-1], faulty[-1]
        if ln not in faulty:
            return (f"{F} stops after {_short(lf)} and never reaches "
                    f"{_short(ln)}, where {N} ends")
        if lf not in normal:
            return (f"{N} stops after {_short(ln)} and never reaches "
                    f"{_short(lf)}, where {F} ends")
        return (f"the traces end differently: {N} ends with {_short(ln)}, "
                f"{F} with {_short(lf)}")

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
        lead = (f"The traces agree for {n_tokens(len(common))}, up to "
                f"{_short(common[-1])}, then ")
        if at_end and (not nt or not ft):
            return lead + stop_clause(nt, ft) + "."
        lead += change_clause(nt, ft)

    last = regions[-1]
    if last[0] == "common":
        ct = last[1]
        if len(ct) <= 3:
            end = f"both end with {_seq(ct)}"
        else:
            end = f"both end with the same {n_tokens(len(ct))}, the last being " \
                  f"{_short(ct[-1])}"
    else:
        end = stop_clause(last[1], last[2])
    if len(changes) == 1:
        return f"{lead}; {end}."
    only_n = sum(len(r[1]) for r in changes)
    only_f = sum(len(r[2]) for r in changes)
    return (f"{lead}. In all they differ in {len(changes):,} places "
            f"({n_tokens(only_n)} only in {N}, {n_tokens(only_f)} only in {F}); {end}.")



# --------------------------------------------------------------------------- structured

_BRIEF_TOKENS = 6       # tokens of each side a brief lists
_BRIEF_STOP = 8         # a final change whose one side is longer than this and twice the other: stopped


def brief(blocks, normal_label="normal", faulty_label="faulty") -> dict:
    """A short structured account of a diff, for the verdict and the JSON (plain values
    only, names as they are: whoever writes them escapes them).

    ``identical``; ``approximate`` (and ``note``); ``normal_tokens`` / ``faulty_tokens``
    (lengths); ``common_tokens``; ``changes`` (change regions); ``only_normal`` /
    ``only_faulty`` (tokens); ``first_change``: None, or ``normal_index`` /
    ``faulty_index`` (0-based positions where the traces first differ), ``after`` (the
    last common token before it, or None), ``normal`` / ``faulty`` (up to 6 tokens of
    each side, formatted ``L1^7``) and ``normal_count`` / ``faulty_count``; ``end``:
    ``"same"`` (they end alike), ``"faulty_stopped"`` (faulty ends while normal goes
    on: the last change is normal-only, or normal's side of it is longer than 8 tokens
    and twice faulty's), the mirror ``"normal_stopped"``, or ``"different"``; ``continued``: how many tokens the
    other run went on with after the stopped one ended (0 otherwise); ``summary``: the
    one line of :func:`summarize`."""
    regions = change_regions(blocks)
    changes = [r for r in regions if r[0] == "change"]
    n_normal = sum(len(b.normal_tokens) for b in blocks if b.kind != "faulty")
    n_faulty = sum(len(b.faulty_tokens) for b in blocks if b.kind != "normal")
    common = sum(len(b.normal_tokens) for b in blocks if b.kind == "common")
    out = {
        "identical": not changes,
        "approximate": bool(getattr(blocks, "approximate", False)),
        "note": approximate_note(blocks),
        "normal_tokens": n_normal,
        "faulty_tokens": n_faulty,
        "common_tokens": common,
        "changes": len(changes),
        "only_normal": sum(len(r[1]) for r in changes),
        "only_faulty": sum(len(r[2]) for r in changes),
        "first_change": None,
        "end": "same",
        "continued": 0,
        "summary": summarize(blocks, normal_label, faulty_label),
    }
    if not changes:
        return out
    k = next(i for i, r in enumerate(regions) if r[0] == "change")
    _, nt, ft = regions[k]
    before = regions[k - 1][1] if k else []
    start = blocks[0] if blocks[0].kind == "common" else None
    skip = len(start.normal_tokens) if start is not None else 0
    out["first_change"] = {
        "normal_index": skip, "faulty_index": skip,
        "after": format_token(before[-1]) if before else None,
        "normal": [format_token(t) for t in nt[:_BRIEF_TOKENS]], "normal_count": len(nt),
        "faulty": [format_token(t) for t in ft[:_BRIEF_TOKENS]], "faulty_count": len(ft),
    }
    last = regions[-1]
    if last[0] == "change":
        _, lnt, lft = last
        if not lft or len(lnt) > max(_BRIEF_STOP, 2 * len(lft)):
            out["end"], out["continued"] = "faulty_stopped", len(lnt)
        elif not lnt or len(lft) > max(_BRIEF_STOP, 2 * len(lnt)):
            out["end"], out["continued"] = "normal_stopped", len(lft)
        else:
            out["end"] = "different"
    return out
