"""JSM diff, hierarchical clustering, B-score and the choice of suspects (functional core).

The rules (also in the README):

* ``JSM_D = |JSM_faulty - JSM_normal|`` over traces matched by (rank, thread); a trace
  missing from one run counts as an empty trace there.
* Each run's JSM is clustered with SciPy ``linkage`` on the distance ``1 - J``.  Both
  dendrograms are cut into the same number k of flat clusters: the number of equivalence
  classes (identical attribute sets) of the normal run, clipped to 2 .. N-1.  This asks
  "does the faulty run still fall into the normal run's behaviour classes?".
* B-score (Fowlkes & Mallows 1983): ``B_k = T_k / sqrt(P_k Q_k)`` over the contingency
  table m of the two flat clusterings, ``T_k = sum m_ij^2 - n``, ``P_k = sum m_i.^2 - n``,
  ``Q_k = sum m_.j^2 - n``.  When P_k or Q_k is 0 (a clustering of singletons only), B is
  1 if the two partitions are identical and 0 otherwise.  Low B = the fault changed the
  clustering most; the ranking table is sorted by B ascending.
* Suspects: each trace's *change score* is the sum of its JSM_D row (how much its
  similarity to every other trace changed, the paper's "row 5 changed the most").
  Suspects are the traces with a positive score, highest first; ties by (rank, thread).
"""
import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform

LINKAGES = ("single", "complete", "average", "weighted", "ward")


def jsm_diff(jsm_normal, jsm_faulty):
    return np.abs(jsm_faulty - jsm_normal)


def n_classes(jsm):
    """Number of equivalence classes: traces with similarity exactly 1 are one class."""
    n = jsm.shape[0]
    seen = np.zeros(n, dtype=bool)
    classes = 0
    for i in range(n):
        if not seen[i]:
            seen |= jsm[i] == 1.0
            seen[i] = True
            classes += 1
    return classes


def dendrogram(jsm, method):
    """SciPy linkage matrix of a JSM (distance 1 - J); None for fewer than 2 traces."""
    if jsm.shape[0] < 2:
        return None
    dist = 1.0 - jsm
    np.fill_diagonal(dist, 0.0)
    dist = np.clip((dist + dist.T) / 2.0, 0.0, 1.0)
    return linkage(squareform(dist, checks=False), method=method)


def flat_clusters(Z, n, k):
    """Labels of a cut into at most k clusters (all in one cluster for n < 2)."""
    if Z is None:
        return np.ones(n, dtype=np.int64)
    return fcluster(Z, t=k, criterion="maxclust").astype(np.int64)


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


def cut_size(jsm_normal):
    n = jsm_normal.shape[0]
    return int(min(max(n_classes(jsm_normal), 2), max(n - 1, 1)))


def compare_clusterings(jsm_normal, jsm_faulty, method):
    """(B-score, k, normal labels, faulty labels) for one linkage method."""
    n = jsm_normal.shape[0]
    k = cut_size(jsm_normal)
    a = flat_clusters(dendrogram(jsm_normal, method), n, k)
    b = flat_clusters(dendrogram(jsm_faulty, method), n, k)
    return bscore(a, b), k, a, b


def change_scores(jsm_d):
    return jsm_d.sum(axis=1)


def suspects(jsm_d, keys, top=None):
    """[(key, score)] of traces whose JSM row changed, most changed first."""
    scores = change_scores(jsm_d)
    order = sorted((i for i in range(len(keys)) if scores[i] > 0),
                   key=lambda i: (-scores[i], keys[i]))
    if top is not None:
        order = order[:top]
    return [(keys[i], float(scores[i])) for i in order]
