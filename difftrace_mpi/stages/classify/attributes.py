"""Attributes of traces (paper Table V) as sparse integer-weighted rows.

``sing``: every NLR token is an attribute (a function, or a loop ``L<id>`` whose frequency
grows by its iteration count).  ``doub``: every pair of consecutive tokens (overlapping).
Frequency modes turn a count c >= 1 into an integer weight:

    noFreq  1                      (presence)
    log10   1 + floor(log10 c)     (number of decimal digits)
    log2    1 + floor(log2 c)      (bit length)
    actual  c

``call``: every caller -> callee pair of kept functions, from the event stream with its
returns (not from the NLR), with a virtual root (code 0) as the caller of top-level calls
and of calls whose callers were filtered out (the structural attributes of Brendel's
thesis: they tell "calls the same things from the same places" apart from "calls the same
things").  A pair's code is ``caller * n_names + callee``.  Traces without returns
(entry-only text traces) have no call structure: all their calls hang from the root.

Weights are integers so that every Jaccard number (sum of mins over sum of maxes) is one
exact integer division, identical on every path and every rank count.

Attribute codes are global without any gathering: a token's code is its function id, or
``n_functions + loop id``; a pair's code is ``first * n_codes + second``.

The matrices are ``rows.SparseRows`` (CSR, int64, each row's codes ascending).
"""
import numpy as np

from .rows import SparseRows
from ...errors import DiffTraceError
from ...kernels.nlr import call_pairs, count_token_attributes_of
from ...kernels.sparse import sum_rows_by_group

KINDS = ("sing", "doub", "call")
FREQS = ("noFreq", "log10", "log2", "actual")


def parse_attribute(spec):
    """'sing.noFreq' -> ('sing', 'noFreq'); case-insensitive on the frequency part."""
    kind, _, freq = str(spec).partition(".")
    freq = freq or "noFreq"
    by_lower = {f.lower(): f for f in FREQS}
    if kind not in KINDS or freq.lower() not in by_lower:
        raise DiffTraceError(
            f"attribute spec {spec!r}: expected <kind>.<freq> with kind in {', '.join(KINDS)} "
            f"and freq in {', '.join(FREQS)}, e.g. sing.noFreq or doub.log10")
    return kind, by_lower[freq.lower()]


def token_codes(nl, n_functions):
    """Token codes of one NLR: function id, or n_functions + loop id."""
    return np.where(nl.ids >= 0, nl.ids, n_functions + (-nl.ids - 1)).astype(np.int64)


def attribute_counts(nl, kind, n_functions, n_codes):
    """(sorted attribute codes, counts) of one NLR."""
    codes = token_codes(nl, n_functions)
    if kind == "sing":
        occurrences = nl.counts.astype(np.int64)
    else:
        codes = codes[:-1] * np.int64(n_codes) + codes[1:]
        occurrences = np.ones(len(codes), dtype=np.int64)
    if len(codes) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    uniq, inverse = np.unique(codes, return_inverse=True)
    return uniq, np.bincount(inverse, weights=occurrences, minlength=len(uniq)).astype(np.int64)


def freq_weights(counts, freq):
    """Integer weights of positive counts under a frequency mode."""
    counts = np.asarray(counts, dtype=np.int64)
    if freq == "noFreq":
        return np.ones_like(counts)
    if freq == "actual":
        return counts.copy()
    if freq == "log10":
        # digits of c, computed exactly on integers (float log10 misrounds near powers of 10)
        out = np.ones_like(counts)
        power = np.int64(10)
        while (counts >= power).any():
            out += counts >= power
            if power > np.iinfo(np.int64).max // 10:
                break
            power *= 10
        return out
    if freq == "log2":
        out = np.zeros_like(counts)
        c = counts.copy()
        while (c > 0).any():
            out += c > 0
            c >>= 1
        return out
    raise DiffTraceError(f"unknown frequency mode {freq!r}")


def count_matrix(nlrs, kind, n_functions, n_codes):
    """CSR matrix (rows = traces) of attribute counts; columns are global attribute codes.
    One kernel pass per NLR, counting in an array of the columns where they are few and
    in a small hash table per row otherwise (``kernels.nlr.count_token_attributes_of``;
    the per-trace form is ``attribute_counts``): no temporaries the size of the shard's
    tokens and no sort of them, which a shard of long traces (~50k NLR tokens each) spent
    seconds on."""
    return count_matrices(nlrs, (kind,), n_functions, n_codes)[kind]


TOKEN_KINDS = ("sing", "doub")      # the kinds counted from NLR tokens (``call`` from the events)


def count_matrices(nlrs, kinds, n_functions, n_codes):
    """{kind: ``count_matrix``} of the token kinds in ``kinds``, counted in one pass over
    the tokens where they can be (``kernels.nlr.count_token_attributes_of``)."""
    kinds = tuple(dict.fromkeys(kinds))
    found = count_token_attributes_of(tuple(kind == "doub" for kind in kinds), list(nlrs), n_functions, n_codes)
    # the kernel writes each row's codes in order, once each, as SparseRows holds them
    return {kind: SparseRows(*arrays, max(n_codes * n_codes if kind == "doub" else n_codes, 1))
            for kind, arrays in zip(kinds, found)}


def call_count_matrix(event_streams, keep, n_names):
    """CSR matrix (rows = traces) of caller -> callee pair counts (kind ``call``)."""
    keep = np.ascontiguousarray(keep, dtype=np.uint8)
    codes = []
    for events in event_streams:
        events = np.ascontiguousarray(events, dtype=np.int32)
        if (events == 0).any():
            parents, children = call_pairs(events, keep)
        else:
            children = events[keep[events].astype(bool)]
            parents = np.zeros_like(children)
        codes.append(parents.astype(np.int64) * n_names + children)
    indptr = np.zeros(len(codes) + 1, dtype=np.int64)
    np.cumsum([len(c) for c in codes], out=indptr[1:])
    codes = np.concatenate(codes) if codes else np.empty(0, np.int64)
    return SparseRows.summed(indptr, codes, np.ones(len(codes), dtype=np.int64), max(n_names * n_names, 1))


def group_rows(counts, groups, n_groups):
    """Sum count rows by group (threads -> their process): row g = sum of rows with groups == g."""
    groups = np.asarray(groups, dtype=np.int64).reshape(-1)
    if len(groups) != counts.shape[0] or (len(groups) and not 0 <= groups.min() <= groups.max() < n_groups):
        raise ValueError(f"group_rows: {len(groups)} groups in 0..{n_groups - 1} expected for "
                         f"{counts.shape[0]} rows")
    member_ptr = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(np.bincount(groups, minlength=n_groups), out=member_ptr[1:])
    return SparseRows(*sum_rows_by_group(counts.indptr, counts.indices, counts.data,
                                         np.argsort(groups, kind="stable"), member_ptr), counts.shape[1])


def weight_matrix(counts, freq):
    """Apply a frequency mode to a count matrix (``SparseRows``); zero counts are dropped."""
    indptr, indices, data = counts.indptr, counts.indices, counts.data
    kept = data != 0
    if not kept.all():
        before = np.zeros(len(data) + 1, dtype=np.int64)    # kept entries before each position
        np.cumsum(kept, out=before[1:])
        indptr, indices, data = before[indptr], indices[kept], data[kept]
    return SparseRows(indptr, indices, freq_weights(data, freq), counts.shape[1])


def attribute_labeller(names, n_loops, kind):
    """Attribute code -> readable label: a function name or L<id> (sing), 'a -> b' for
    consecutive tokens (doub) or caller -> callee ('<root>' for the virtual root; call)."""
    n_codes = len(names) + n_loops

    def token(code):
        return names[code] if code < len(names) else f"L{code - len(names)}"
    if kind == "doub":
        return lambda code: f"{token(code // n_codes)} -> {token(code % n_codes)}"
    if kind == "call":
        return lambda code: f"{names[code // len(names)] if code // len(names) else '<root>'} -> " \
                            f"{names[code % len(names)]}"
    return token
