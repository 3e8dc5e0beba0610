"""Traces grouped into classes of identical attribute rows, and the two runs compared
class by class.

Every rank deduplicates its own rows (``dedupe``) so that class rows travel, not trace
rows; ``unify`` numbers the classes of all ranks the same way whatever the sharding;
``compare_runs`` turns both runs' class JSMs into change scores, suspects and (small N)
the full matrices of one ``records.Level`` per level.
"""
import numpy as np

from .records import Level
from . import cluster
from .jsm import cross_subsumption
from .rows import LONG_ROWS, bytes_labels, int64_array, pairs_csr, row_labels, take_rows


class ClassRows(list):
    """Distinct rows as a list of (indices, data) pairs: views of rows ``rows`` (default:
    all) of one CSR block (indptr, indices, data), all int64, shared with whoever else
    selects from it (the classes of both runs are mostly the same rows), or given as pairs
    (``of_pairs``).  ``csr`` is the block of exactly these rows, assembled when first
    asked for."""

    def __init__(self, indptr, indices, data, rows=None):
        starts, ends = (indptr[:-1], indptr[1:]) if rows is None else (indptr[rows], indptr[np.asarray(rows) + 1])
        super().__init__((indices[a:b], data[a:b]) for a, b in zip(starts.tolist(), ends.tolist()))
        self._block = (indptr, indices, data, rows)
        self._csr = (indptr, indices, data) if rows is None else None

    @classmethod
    def of_pairs(cls, pairs):
        rows = cls.__new__(cls)
        list.__init__(rows, pairs)
        rows._block, rows._csr = None, None
        return rows

    @property
    def csr(self):
        if self._csr is None:
            self._csr = take_rows(*self._block) if self._block is not None else pairs_csr(self)
        return self._csr


def csr_arrays(matrix):
    """(indptr, indices, data) of a CSR matrix (``rows.SparseRows``) as int64 arrays, its
    rows as stored."""
    return tuple(int64_array(a) for a in (matrix.indptr, matrix.indices, matrix.data))


def rows_csr(rows):
    """(indptr, indices, data) of distinct rows: a ClassRows' own block, else assembled."""
    csr = getattr(rows, "csr", None)
    return csr if csr is not None else pairs_csr(rows)


def dedupe(rows, runs, objs):
    """Merge identical rows of local objects.  ``rows``: a row per object, as a CSR
    block (indptr, indices, data), int64, or a list of (indices, data) pairs.  Returns
    (indptr, indices, data, members): the distinct rows in order of first appearance, and
    members (k x 3 int64: run, object, distinct row), so that a shard ships four arrays.
    Long rows given as pairs (the NLRs of real traces: millions of tokens) stay as they
    are, ``indices`` and ``data`` then lists of the distinct rows' arrays (``ragged``):
    they are never copied into one block."""
    if isinstance(rows, list) and sum(len(a) for a, _ in rows) > LONG_ROWS * len(rows):
        labels = bytes_labels(rows)
        firsts = np.flatnonzero(labels == np.arange(len(labels)))
        distinct = [rows[i] for i in firsts.tolist()]
        indptr = np.zeros(len(distinct) + 1, dtype=np.int64)
        np.cumsum([len(a) for a, _ in distinct], out=indptr[1:])
        block = (indptr, [a for a, _ in distinct], [b for _, b in distinct])
    else:
        csr = pairs_csr(rows) if isinstance(rows, list) else rows
        labels = row_labels(*csr)
        firsts = np.flatnonzero(labels == np.arange(len(labels)))
        block = take_rows(*csr, firsts)
    number = np.zeros(len(labels), dtype=np.int64)
    number[firsts] = np.arange(len(firsts))
    members = np.empty((len(labels), 3), dtype=np.int64)
    members[:, 0], members[:, 1], members[:, 2] = runs, objs, number[labels]
    return (*block, members)


def ragged(block):
    """Whether a ``dedupe`` block holds its rows as lists of arrays (long rows)."""
    return isinstance(block[1], list)


def block_rows(block):
    """The rows of a ``dedupe`` block as (indices, data) pairs (views, no copy)."""
    return list(zip(block[1], block[2])) if ragged(block) else ClassRows(*block[:3])


def unify(parts, n_objects):
    """Global classes from every rank's deduplicated rows (``dedupe`` blocks): per run
    (class rows as ClassRows, class_of).

    Classes are numbered by the first object (in object order) that has them, normal run
    first, so numbering never depends on the sharding; an object absent from a run has
    the empty row there."""
    parts = list(parts)
    n_rows = np.cumsum([0] + [len(p[0]) - 1 for p in parts])
    row_of = np.full((2, n_objects), n_rows[-1], dtype=np.int64)
    for p, base in zip(parts, n_rows.tolist()):
        row_of[p[3][:, 0], p[3][:, 1]] = p[3][:, 2] + base
    if any(ragged(p) for p in parts):       # long rows: compared and kept as they are
        pairs = [pair for p in parts for pair in block_rows(p)] + [(np.empty(0, np.int64), np.empty(0, np.int64))]
        return [(ClassRows.of_pairs([pairs[r] for r in rows]), class_of)
                for rows, class_of in _classes(bytes_labels(pairs), row_of)]
    n_nnz = np.cumsum([0] + [int(p[0][-1]) for p in parts])
    # every part's rows, then one empty row (index n_rows[-1]) for the absent objects
    indptr = np.concatenate([np.zeros(1, np.int64)] + [p[0][1:] + n_nnz[i] for i, p in enumerate(parts)]
                            + [n_nnz[-1:]]).astype(np.int64)
    if len(parts) == 1:     # one rank's block as it is: no copy of (possibly long) rows
        indices, data = (np.asarray(a, dtype=np.int64) for a in parts[0][1:3])
    else:
        indices = np.concatenate([p[1] for p in parts] + [np.empty(0, np.int64)]).astype(np.int64)
        data = np.concatenate([p[2] for p in parts] + [np.empty(0, np.int64)]).astype(np.int64)
    labels = row_labels(indptr, indices, data)    # equal rows of different ranks meet here
    return [(ClassRows(indptr, indices, data, rows), class_of) for rows, class_of in _classes(labels, row_of)]


def _classes(labels, row_of):
    """Per run: (the rows of its classes, numbered by their first object; each object's
    class), from the label of every row (equal rows share one) and each object's row."""
    out = []
    for run in (0, 1):
        label = labels[row_of[run]]
        distinct, first, inverse = np.unique(label, return_index=True, return_inverse=True)
        by_first = np.argsort(first)
        number = np.empty(len(distinct), dtype=np.int64)
        number[by_first] = np.arange(len(distinct))
        out.append((distinct[by_first], number[inverse.reshape(-1)]))
    return out


def cross_view(rows_n, rows_f, class_f, flagged, keep_shares):
    """Cross-run subsumption of the suspects: for every faulty-run class that holds a
    suspect (``faulty_classes``, ascending), the normal-run classes whose whole weighted
    row its faulty row holds (``subsumes``: it does at least everything they did) and
    those that hold its whole faulty row (``subsumed_by``: they did everything it does),
    each as CSR (offsets, normal class ids).  With ``keep_shares`` also the shares behind
    them, (M, C_normal) float64: ``normal_in_faulty`` (share of normal class c found in the
    faulty row; 1 = subsumes) and ``faulty_in_normal`` (share of the faulty row found in
    normal class c; 1 = subsumed by)."""
    sus = np.unique(np.asarray(class_f)[np.asarray(flagged, dtype=bool)]).astype(np.int64)
    f_in_n, n_in_f = cross_subsumption([rows_f[c] for c in sus], rows_n)

    def csr(mask):
        offsets = np.zeros(len(mask) + 1, dtype=np.int64)
        np.cumsum(mask.sum(axis=1), out=offsets[1:])
        return offsets, np.nonzero(mask)[1].astype(np.int64)
    out = {"faulty_classes": sus, "subsumes": csr(n_in_f == 1.0), "subsumed_by": csr(f_in_n == 1.0)}
    if keep_shares:
        out["normal_in_faulty"], out["faulty_in_normal"] = n_in_f, f_in_n
    return out


def over_class_cap(pieces, n_objects, max_classes):
    """The classes behind a setting's skip, or None.  Class JSMs and linkages grow with the
    square of the classes (C x C float64 per run and matrix, an O(C^2) linkage per
    ranking row), so a setting with more than ``max_classes`` classes in a run, at either
    level, is neither clustered nor given a lattice, and the skip is stated
    (``class_cap_note``), as a lattice past its cap is.

    ``pieces``: every rank's (thread block, process block) of ``dedupe`` rows;
    ``n_objects``: {level: objects}.  A run has at most as many classes as the ranks'
    distinct rows together, plus the empty row of absent objects: only a level whose sum
    passes the cap is unified for its exact count (the same on any number of ranks).
    Every rank decides alike from the same pieces.  Returns (classes, level, run) of the
    largest count over the cap."""
    worst = None
    for which, level in enumerate(("thread", "process")):
        at_most = sum(len(p[which][0]) - 1 for p in pieces) + 1
        if at_most <= int(max_classes):
            continue
        for (rows, _), run in zip(unify([p[which] for p in pieces], n_objects[level]), ("normal", "faulty")):
            if len(rows) > int(max_classes) and (worst is None or len(rows) > worst[0]):
                worst = (len(rows), level, run)
    return worst


def class_cap_note(skips, max_classes):
    """One note for the settings over the class cap: ``skips`` [(setting name, (classes,
    level, run))] in grid order."""
    if not skips:
        return None
    largest = max(classes for _, (classes, _, _) in skips)
    each = "; ".join(f"{name}: {classes:,} classes of {level} traces in the {run} run"
                     for name, (classes, level, run) in skips)
    return (f"{len(skips)} setting(s) not clustered, more classes than the class cap of {int(max_classes):,} "
            f"(--max-classes): {each}. They have no ranking rows; the verdict and the other settings stand (a "
            f"class JSM of {largest:,} classes would hold {largest * largest * 8 / 2 ** 20:,.1f} MiB)")


def compare_runs(unified, jsms, full_limit, subsumption):
    """Change scores, suspects and (small N) the full matrices from the class JSMs of
    both runs, for thread and process level.

    Subsumption: ``subsumption`` gives per level the class x class subsumption matrices
    (normal, faulty) that ``class_jsm`` made with the JSMs.
    Each level keeps them as ``subsumption_classes``, expanded to N x N as
    ``subsumption_normal`` / ``subsumption_faulty`` when N <= full_limit, and the
    cross-run view of the suspects as ``subsumption_cross`` (see ``cross_view``)."""
    block = {}
    for level, ((rows_n, class_n), (rows_f, class_f)) in unified.items():
        jn, jf = jsms[level]
        sn, sf = subsumption[level]
        # how each trace changed (more / less / different work), once per (normal, faulty) class pair
        kinds = {pair: cluster.change_kind(rows_n[pair[0]], rows_f[pair[1]])
                 for pair in set(zip(class_n.tolist(), class_f.tolist()))}
        change = np.array([kinds[pair] for pair in zip(class_n.tolist(), class_f.tolist())],
                          dtype=np.float64).reshape(-1, 3)
        scores, flagged = cluster.class_change_scores(jn, class_n, jf, class_f, unchanged=change[:, 0] == 0)
        entry = {"classes": (class_n, class_f), "jsm_classes": (jn, jf), "scores": scores, "suspect": flagged,
                 "change": change}
        if len(class_n) <= full_limit:
            entry["normal"] = jn[np.ix_(class_n, class_n)]
            entry["faulty"] = jf[np.ix_(class_f, class_f)]
            entry["diff"] = cluster.jsm_diff(entry["normal"], entry["faulty"])
            entry["subsumption_normal"] = sn[np.ix_(class_n, class_n)]
            entry["subsumption_faulty"] = sf[np.ix_(class_f, class_f)]
        entry["subsumption_classes"] = (sn, sf)
        entry["subsumption_cross"] = cross_view(rows_n, rows_f, class_f, flagged, len(class_n) <= full_limit)
        block[level] = Level(**entry)
    return block
