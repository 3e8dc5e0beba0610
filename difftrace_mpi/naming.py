"""Traces and ranks in words: ``ranks 0-14 thread 0``, ``1-4, 6, 9-10``."""


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
