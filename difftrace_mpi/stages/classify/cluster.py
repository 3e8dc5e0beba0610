"""JSM diff, hierarchical clustering, B-score and the choice of suspects (functional core).

The rules (also in docs/design.md):

* ``JSM_D = |JSM_faulty - JSM_normal|`` over traces matched by (rank, thread); a trace
  missing from one run counts as an empty trace there.
* Each run's JSM is clustered on the distance ``1 - J`` by the project's kernel
  (kernels/linkage.pyx), without loading SciPy: with one trace per class it builds
  SciPy's ``linkage`` tree bit for bit, ties included.  Both dendrograms are cut into the
  same number k of flat clusters (``flat_cut``: SciPy's ``fcluster`` "maxclust" rule,
  labels included): the number of equivalence classes (identical attribute sets) of the
  normal run, clipped to 2 .. N-1.  This asks "does the faulty run still fall into the
  normal run's behaviour classes?".
* B-score (Fowlkes & Mallows 1983): ``B_k = T_k / sqrt(P_k Q_k)`` over the contingency
  table m of the two flat clusterings, ``T_k = sum m_ij^2 - n``, ``P_k = sum m_i.^2 - n``,
  ``Q_k = sum m_.j^2 - n``.  When P_k or Q_k is 0 (a clustering of singletons only), B is
  1 if the two partitions are identical and 0 otherwise.  Low B = the fault changed the
  clustering most; the ranking table is sorted by B ascending, settings whose normal run
  has no class structure (``has_structure``) last.
* Suspects: each trace's *change score* is the sum of its JSM_D row (how much its
  similarity to every other trace changed, the paper's "row 5 changed the most").
  When one trace changes, every other trace's row changes a little too (its similarity
  *to that trace* moved), so the suspects are the smallest set of traces that explains
  every changed pair (greedy vertex cover of the pairs with JSM_D > 0, picking the trace
  that explains most unexplained pairs first), listed by change score, highest first;
  ties by (rank, thread).  Of traces that explain as many pairs, one whose own attributes
  changed goes before one that kept them (kind "same": only its similarity to a changed
  trace moved), so a two-trace run names the trace that changed.
"""
import numpy as np

from ...kernels.linkage import METHODS, OK, linkage_tree, maxclust

LINKAGES = ("single", "complete", "average", "weighted", "ward")


def jsm_diff(jsm_normal, jsm_faulty):
    return np.abs(jsm_faulty - jsm_normal)


def class_dendrogram(jsm, sizes, method):
    """Linkage matrix (SciPy format, leaves = classes) of C equivalence classes with
    multiplicities ``sizes``: the same tree as clustering every trace, where the members
    of a class merge at height 0 first (up to rounding: average and ward heights that are
    equal in real numbers can differ in the last bit over the traces and break a tie).
    None for fewer than 2 classes.  With every size 1 it is SciPy's
    ``linkage(squareform(1 - jsm), method)`` bit for bit; single, complete and weighted
    linkage ignore the sizes (their updates do not use them), average and ward start from
    them."""
    if method not in METHODS:
        raise ValueError(f"unknown linkage {method!r}; choose from {', '.join(LINKAGES)}")
    c = jsm.shape[0]
    if c < 2:
        return None
    dist = np.ascontiguousarray(1.0 - np.asarray(jsm, dtype=np.float64))    # the kernel reads the upper triangle
    np.clip(dist, 0.0, 1.0, out=dist)
    sizes = np.asarray(sizes, dtype=np.float64)
    if method == "ward" and (sizes != 1).any():
        # a class of m identical traces, once merged at height 0, stands at Ward distance
        # d * sqrt(2 m n / (m + n)) from a class of n traces at distance d (the factor is 1
        # for m = n = 1: skipped, its C x C temporaries are large for many distinct traces)
        dist *= np.sqrt(2.0 * np.outer(sizes, sizes) / np.add.outer(sizes, sizes))
    status, Z = linkage_tree(dist, np.ascontiguousarray(sizes), METHODS[method])
    if status != OK:
        raise ValueError("the similarity matrix holds NaN or infinite values: no dendrogram")
    return Z


def flat_cut(Z, k):
    """Flat cluster label (1, 2, ...) of every leaf of linkage matrix ``Z`` cut into at most
    ``k`` clusters: SciPy's ``fcluster(Z, t=k, criterion="maxclust")``, labels included (the
    lowest height whose cut leaves at most k clusters; ties in heights can leave fewer)."""
    if int(k) < 1:
        raise ValueError(f"a cut needs at least 1 cluster (got {k})")
    return maxclust(np.ascontiguousarray(Z, dtype=np.float64), int(k))


def bscore(labels_a, labels_b):
    """Fowlkes-Mallows B of two flat clusterings of the same objects."""
    labels_a = np.asarray(labels_a)
    labels_b = np.asarray(labels_b)
    n = len(labels_a)
    _, a = np.unique(labels_a, return_inverse=True)
    _, b = np.unique(labels_b, return_inverse=True)
    table = np.zeros((a.max(initial=-1) + 1, b.max(initial=-1) + 1), dtype=np.int64)
    np.add.at(table, (a, b), 1)
    t = int((table ** 2).sum()) - n
    p = int((table.sum(axis=1) ** 2).sum()) - n
    q = int((table.sum(axis=0) ** 2).sum()) - n
    if p == 0 or q == 0:
        identical = (table > 0).sum() == table.shape[0] == table.shape[1]
        return 1.0 if identical else 0.0
    return float(t / np.sqrt(float(p) * float(q)))


def class_labels(jsm_classes, sizes, class_of, method, k):
    """Flat cluster label of every object: cut of the class dendrogram into <= k clusters."""
    Z = class_dendrogram(jsm_classes, sizes, method)
    if Z is None:
        return np.ones(len(class_of), dtype=np.int64)
    return flat_cut(Z, k).astype(np.int64)[class_of]


def compare_classes(jsm_n, class_of_n, jsm_f, class_of_f, method):
    """Class-level version of ``compare_clusterings``, exact (see class_dendrogram):
    (B-score, k).  jsm_* are class JSMs, class_of_* map every object to its class."""
    n = len(class_of_n)
    sizes_n = np.bincount(class_of_n, minlength=jsm_n.shape[0])
    sizes_f = np.bincount(class_of_f, minlength=jsm_f.shape[0])
    k = int(min(max(jsm_n.shape[0], 2), max(n - 1, 1)))
    a = class_labels(jsm_n, sizes_n, class_of_n, method, k)
    b = class_labels(jsm_f, sizes_f, class_of_f, method, k)
    return bscore(a, b), k


def cover_suspects(diff, mult, max_picks=64, unchanged=None):
    """Greedy smallest set of (joint) classes that explains every changed similarity.

    ``diff`` is JSM_D between joint classes (objects of one joint class have identical
    rows), ``mult`` their multiplicities.  Every pair of traces whose similarity changed
    (diff > 0) must have at least one suspect among the two; each step picks the class
    that covers the most still-unexplained pairs per trace picked (the sum of the
    multiplicities of its unexplained partners), ties to a class whose attributes changed
    (``unchanged``: boolean mask of the classes whose normal and faulty rows are equal),
    then to the larger row change.  Returns a boolean mask over the classes."""
    changed = diff > 0
    mult = np.asarray(mult, dtype=np.float64)
    picked = np.zeros(len(mult), dtype=bool)
    score = diff @ mult
    same = np.zeros(len(mult), dtype=bool) if unchanged is None else np.asarray(unchanged, dtype=bool)
    for _ in range(max_picks):
        open_pairs = changed[:, ~picked] @ mult[~picked]
        open_pairs[picked] = -1.0
        best = int(np.lexsort((-score, same, -open_pairs))[0])
        if open_pairs[best] <= 0:
            break
        picked[best] = True
    return picked


def class_change_scores(jsm_n, class_of_n, jsm_f, class_of_f, unchanged=None):
    """(change score, suspect flag) of every object without the N x N matrix.

    Change score = row sum of JSM_D; suspects from ``cover_suspects``.  Objects with the
    same (normal class, faulty class) pair have identical JSM_D rows, so both come from
    the small joint-class matrix weighted by multiplicities.  ``unchanged`` (per object,
    optional): whose attributes are the same in both runs; the cover prefers the others."""
    pairs = np.stack([class_of_n, class_of_f], axis=1)
    joint, first, joint_of, mult = np.unique(pairs, axis=0, return_index=True, return_inverse=True,
                                             return_counts=True)
    joint_of = joint_of.reshape(-1)
    jn, jf = joint[:, 0], joint[:, 1]
    diff = np.abs(jsm_f[np.ix_(jf, jf)] - jsm_n[np.ix_(jn, jn)])
    sums = diff @ mult.astype(np.float64)
    # objects of one joint class share their rows, so the first one speaks for all
    same = None if unchanged is None else np.asarray(unchanged, dtype=bool)[first]
    return sums[joint_of], cover_suspects(diff, mult, unchanged=same)[joint_of]


def ranked_suspects(scores, keys, top=None, flagged=None):
    """[(key, score)] of the flagged traces (all with a positive score when ``flagged`` is
    None), highest score first, ties by key."""
    scores = np.asarray(scores, dtype=np.float64)
    picked = scores > 0 if flagged is None else np.asarray(flagged, dtype=bool)
    order = sorted(np.flatnonzero(picked).tolist(), key=lambda i: (-scores[i], keys[i]))
    return [(keys[i], float(scores[i])) for i in (order if top is None else order[:top])]


def has_structure(n_classes_normal, n_objects):
    """Whether a setting's normal run falls into classes at all: at most half as many
    classes as traces.  When nearly every normal trace is a class of its own (counts that
    vary from run to run, e.g. OpenMP scheduling under ``actual``), the cut into k flat
    clusters separates noise and its B-score says nothing about the fault; such rows sort
    after the structured ones."""
    return n_objects < 4 or n_classes_normal <= n_objects // 2


def localises(n_named, n_candidates):
    """Whether a row's suspects localise the fault: they touch fewer than half of the
    candidates (ranks, or threads of a single process; always one of them).  A setting where most ranks
    changed says "everything moved" (run-to-run noise such as OpenMP scheduling in the
    worker threads, or a fault whose effect spread everywhere); such rows sort after the
    ones that single out a few ranks, whatever their B-score."""
    return n_named <= max(1, (n_candidates - 1) // 2)


def consensus(rows, field, depth=3):
    """How many rows of the ranking table name each suspect among their first ``depth``:
    [(key, rows naming it, best position)], most named first."""
    named = {}
    for row in rows:
        for pos, (key, _) in enumerate(getattr(row, field)[:depth]):
            count, best = named.get(key, (0, depth))
            named[key] = (count + 1, min(best, pos))
    return sorted(((k, c, b) for k, (c, b) in named.items()), key=lambda x: (-x[1], x[2], x[0]))


CHANGE_KINDS = ("same", "more", "less", "different")


def change_kind(normal_row, faulty_row):
    """How one trace's attributes changed from the normal to the faulty run, by weighted
    subsumption: "more" when the faulty trace holds all of the normal one and more (extra
    work: extra calls, a spawned thread), "less" when it holds only part of it (stopped
    early, skipped work), "different" otherwise.  Rows are (sorted codes, weights).
    Returns (kind index into CHANGE_KINDS, shared weight / normal weight, shared / faulty)."""
    (an, wn), (af, wf) = normal_row, faulty_row
    _, i_n, i_f = np.intersect1d(an, af, assume_unique=True, return_indices=True)
    shared = int(np.minimum(wn[i_n], wf[i_f]).sum())
    total_n, total_f = int(wn.sum()), int(wf.sum())
    if shared == total_n == total_f:
        kind = 0
    elif shared == total_n:
        kind = 1
    elif shared == total_f:
        kind = 2
    else:
        kind = 3
    return kind, (shared / total_n if total_n else 1.0), (shared / total_f if total_f else 1.0)
