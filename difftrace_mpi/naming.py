"""Traces, ranks and tokens in words: ``ranks 0-14 thread 0``, ``1-4, 6, 9-10``, ``3 traces``, ``L1^7``."""


def compact_ranges(values):
    """[1, 2, 3, 4, 6, 9, 10] -> '1-4, 6, 9-10'."""
    values = sorted(set(values))
    parts, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            parts.append(f"{start}" if start == v else f"{start}-{v}")
            start = None
    return ", ".join(parts)


def describe_keys(keys):
    """(rank, thread) keys in words: 'ranks 0-14 thread 0' or 'rank 3 threads 0-7' or a list."""
    threads = sorted({t for _, t in keys})
    ranks = sorted({r for r, _ in keys})
    if len(threads) == 1:
        return f"rank{'s' if len(ranks) > 1 else ''} {compact_ranges(ranks)} thread {threads[0]}"
    if len(ranks) == 1:
        return f"rank {ranks[0]} threads {compact_ranges(threads)}"
    shown = ", ".join(f"{r}.{t}" for r, t in keys[:12])
    return f"traces (rank.thread) {shown}" + (f" and {len(keys) - 12} more" if len(keys) > 12 else "")


def describe_members(keys, multi_thread=True):
    """Trace keys in words: ``ranks 1-6, 9`` (single-threaded runs), ``ranks 0-511
    threads 1-7``, ``rank 3 threads 0-7; ranks 4-5 thread 0``; process keys (ints):
    ``ranks 1-6, 9``."""
    if not keys:
        return "no traces"
    if not isinstance(keys[0], (tuple, list)):
        ranks = sorted(set(int(k) for k in keys))
        return f"rank{'s' if len(ranks) > 1 else ''} {compact_ranges(ranks)}"
    by_rank = {}
    for r, t in keys:
        by_rank.setdefault(int(r), set()).add(int(t))
    groups = {}
    for r, ts in by_rank.items():
        groups.setdefault(tuple(sorted(ts)), []).append(r)
    parts = []
    for threads, ranks in sorted(groups.items(), key=lambda kv: min(kv[1])):
        part = f"rank{'s' if len(ranks) > 1 else ''} {compact_ranges(ranks)}"
        if multi_thread or threads != (0,):
            part += f" thread{'s' if len(threads) > 1 else ''} {compact_ranges(threads)}"
        parts.append(part)
    return "; ".join(parts)


# -- small words: the one copy of each (views and stages import them from here) ------

ELLIPSIS = "\u2026"


def plural(n, word, many=None, grouped=False):
    """``1 trace``, ``2 traces``, ``1 process``, ``3 processes`` (``many``: an irregular
    plural; ``grouped``: thousands separated, ``1,234 tokens``)."""
    count = f"{n:,}" if grouped else f"{n}"
    if n == 1:
        return f"{count} {word}"
    return f"{count} {many or (word + 'es' if word.endswith(('s', 'sh', 'ch', 'x')) else word + 's')}"


def shorten(s, limit):
    """``s`` in at most ``limit`` characters, an ellipsis ending a cut."""
    s = str(s)
    return s if len(s) <= limit else s[:limit - 1] + ELLIPSIS


def shorten_left(s, limit):
    """Paths: at most ``limit`` characters, keeping the end, the informative part."""
    s = str(s)
    return s if len(s) <= limit else ELLIPSIS + s[-(limit - 1):]


def token_label(label, count):
    """An NLR token in words: a function's name (``count`` 0), a loop with its iteration
    count (``L1^7``)."""
    return label if count == 0 else f"{label}^{count}"
