"""Filters, attributes and clustering stages on their own."""
import numpy as np
import pytest
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform

from difftrace_mpi.stages.classify import attributes as attrs
from difftrace_mpi.stages.classify import cluster
from difftrace_mpi.stages.model import filters
from difftrace_mpi.errors import DiffTraceError
from difftrace_mpi.stages.model.nlr import NLR

# -- reference: clustering every trace with full N x N matrices (what the class-level
# code in cluster.py must equal; it used to live there before everything went class-level)


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


def cut_size(jsm_normal):
    n = jsm_normal.shape[0]
    return int(min(max(n_classes(jsm_normal), 2), max(n - 1, 1)))


def compare_clusterings(jsm_normal, jsm_faulty, method):
    """(B-score, k, normal labels, faulty labels) for one linkage method."""
    n = jsm_normal.shape[0]
    k = cut_size(jsm_normal)
    a = flat_clusters(dendrogram(jsm_normal, method), n, k)
    b = flat_clusters(dendrogram(jsm_faulty, method), n, k)
    return cluster.bscore(a, b), k, a, b


def change_scores(jsm_d):
    return jsm_d.sum(axis=1)


def suspects(jsm_d, keys, top=None):
    """[(key, score)] of the suspects of a full JSM_D (every trace its own class)."""
    flagged = cluster.cover_suspects(jsm_d, np.ones(len(keys)))
    return cluster.ranked_suspects(change_scores(jsm_d), keys, top, flagged)



NAMES = np.array(["<return>", "main", "MPI_Send", "MPI_Allreduce", "memcpy", "puts@plt",
                  "GOMP_critical_start", "omp_set_lock", "strlen", "compute", "MPIDI_progress",
                  "poll", "MPI_Recv"], dtype=object)


def kept(spec, custom=None):
    mask = filters.keep_mask(NAMES, filters.parse_filter(spec, custom))
    return [n for n, m in zip(NAMES[1:], mask[1:]) if m]


def test_filter_classes():
    assert kept("11.mpi") == ["MPI_Send", "MPI_Allreduce", "MPI_Recv"]
    assert kept("11.mpicol") == ["MPI_Allreduce"]
    assert kept("11.mpisr") == ["MPI_Send", "MPI_Recv"]
    assert kept("11.mpiall") == ["MPI_Send", "MPI_Allreduce", "MPIDI_progress", "MPI_Recv"]
    assert kept("11.ompcrit") == ["GOMP_critical_start"]
    assert kept("11.ompmutex") == ["omp_set_lock"]
    assert kept("11.mem") == ["memcpy"]
    assert kept("11.str") == ["strlen"]
    assert kept("11.poll") == ["poll"]
    assert kept("11.cust", "^comp") == ["compute"]
    assert "puts@plt" not in kept("11.every") and "puts@plt" in kept("10.every")
    # union of classes, each name once
    assert kept("11.mpicol.mem") == ["MPI_Allreduce", "memcpy"]


def test_filters_accept_argument_annotated_mpi_names():
    names = np.array(["<return>", "MPI_Allreduce[count=1,type=MPI_DOUBLE,op=MPI_MAX]", "MPI_Send[count=4,dest=+1]",
                      "MPI_Allreducex", "MPI_Sendrecv_replace[count=2]"], dtype=object)
    for spec, want in (("11.mpicol", [1]), ("11.mpisr", [2, 4]), ("11.mpi", [1, 2, 3, 4])):
        mask = filters.keep_mask(names, filters.parse_filter(spec))
        assert np.flatnonzero(mask[1:]).tolist() == [i - 1 for i in want], spec


def test_filter_spec_grammar_round_trip():
    spec = filters.parse_filter("11.mpi.cust.K10", custom="foo")
    assert (spec.drop_returns, spec.drop_plt, spec.classes, spec.k) == (True, True, ("mpi", "cust"), 10)
    assert str(spec) == "11.mpi.cust.K10" and spec.label == "11.mpi.cust"
    assert filters.parse_filter("11.mpi.0K20").k == 20
    assert str(filters.parse_filter("mpi")) == "11.mpi"
    assert str(filters.parse_filter("01")) == "01.every"
    for bad in ("11.bogus", "11.mpi.K1"):
        with pytest.raises(DiffTraceError):
            filters.parse_filter(bad)
    with pytest.raises(DiffTraceError, match="--custom"):
        filters.parse_filter("11.cust")


def test_apply_filter_keeps_matching_returns():
    # main > MPI_Send < ; memcpy < ; < main
    ev = np.array([1, 2, 0, 4, 0, 0], dtype=np.int32)
    assert filters.apply_filter(ev, NAMES, filters.parse_filter("11.mpi")).tolist() == [2]
    assert filters.apply_filter(ev, NAMES, filters.parse_filter("01.mpi")).tolist() == [2, 0]
    assert filters.apply_filter(ev, NAMES, filters.parse_filter("01.every")).tolist() == ev.tolist()


@pytest.mark.parametrize("spec", ["11.mpi", "11.every", "10.mpi", "01.mpi", "01.every", "00.every"])
def test_kept_count_is_the_filtered_length(spec):
    rng = np.random.default_rng(7)
    for _ in range(100):
        ev, depth = [], 0
        for _ in range(int(rng.integers(0, 40))):
            if depth and rng.random() < 0.4:
                ev.append(0)
                depth -= 1
            else:
                ev.append(int(rng.integers(1, len(NAMES))))
                depth += 1
        ev = np.array(ev, dtype=np.int32)
        parsed = filters.parse_filter(spec)
        assert filters.kept_count(ev, NAMES, parsed) == len(filters.apply_filter(ev, NAMES, parsed))


def test_freq_weights_exact():
    c = np.array([1, 9, 10, 99, 100, 999, 1000, 10**15, 2**40])
    assert attrs.freq_weights(c, "log10").tolist() == [len(str(x)) for x in c.tolist()]
    assert attrs.freq_weights(c, "log2").tolist() == [int(x).bit_length() for x in c.tolist()]
    assert attrs.freq_weights(c, "noFreq").tolist() == [1] * len(c)
    assert attrs.freq_weights(c, "actual").tolist() == c.tolist()


def test_attributes_sing_and_doub():
    # tokens: f1, L0^7, f2, L0^3  with 3 functions (codes 0..2), loop 0 -> code 3
    nl = NLR(np.array([1, -1, 2, -1]), np.array([1, 7, 1, 3]))
    codes, counts = attrs.attribute_counts(nl, "sing", 3, 4)
    assert dict(zip(codes.tolist(), counts.tolist())) == {1: 1, 2: 1, 3: 10}
    codes, counts = attrs.attribute_counts(nl, "doub", 3, 4)
    assert dict(zip(codes.tolist(), counts.tolist())) == {1 * 4 + 3: 1, 3 * 4 + 2: 1, 2 * 4 + 3: 1}
    m = attrs.count_matrix([nl, NLR(np.array([1]), np.array([1]))], "sing", 3, 4)
    g = attrs.group_rows(m, [0, 0], 1)
    assert g.toarray().tolist() == [[0, 2, 1, 10]]
    assert attrs.weight_matrix(g, "log10").toarray().tolist() == [[0, 1, 1, 2]]


def test_attribute_spec_errors():
    assert attrs.parse_attribute("doub.LOG10") == ("doub", "log10")
    with pytest.raises(DiffTraceError):
        attrs.parse_attribute("triple.noFreq")


def test_bscore_fowlkes_mallows():
    a = [1, 1, 1, 2, 2, 2]
    assert cluster.bscore(a, a) == 1.0
    assert cluster.bscore(a, [5, 5, 5, 9, 9, 9]) == 1.0        # labels are names only
    # m = [[2,1],[1,2]]: T = 4+1+1+4-6 = 4, P = Q = 9+9-6 = 12 -> 1/3
    assert cluster.bscore(a, [1, 1, 2, 1, 2, 2]) == pytest.approx(1 / 3)
    assert cluster.bscore([1, 2, 3], [1, 2, 3]) == 1.0           # singletons, identical
    assert cluster.bscore([1, 2, 3], [1, 1, 2]) == 0.0


def test_suspects_rule():
    jsm_n = np.ones((4, 4))
    jsm_f = np.ones((4, 4))
    jsm_f[2, :] = jsm_f[:, 2] = 0.5
    jsm_f[2, 2] = 1
    d = cluster.jsm_diff(jsm_n, jsm_f)
    keys = [(0, 0), (1, 0), (2, 0), (3, 0)]
    # the others' rows changed only in column 2: background, not suspects
    assert suspects(d, keys) == [((2, 0), 1.5)]
    assert suspects(np.zeros((4, 4)), keys) == []
    # a flag mask decides who is a suspect, scores the order
    assert [k for k, _ in cluster.ranked_suspects(np.array([0.1, 0.4, 0.3, 0.2]), keys,
                                                  flagged=[False, True, True, False])] == [(1, 0), (2, 0)]


def test_cover_suspects_explains_every_changed_pair():
    # two culprits (0 and 3) among 8; pairs touching them changed, plus pair (0, 3)
    n = 8
    d = np.zeros((n, n))
    for c in (0, 3):
        d[c, :] = d[:, c] = 0.2
        d[c, c] = 0
    flagged = cluster.cover_suspects(d, np.ones(n))
    assert np.flatnonzero(flagged).tolist() == [0, 3]
    # with multiplicities: class 1 holds 50 traces whose similarity to class 0 changed
    d2 = np.array([[0.0, 0.3, 0.0], [0.3, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert cluster.cover_suspects(d2, np.array([1, 50, 10])).tolist() == [True, False, False]
    assert not cluster.cover_suspects(np.zeros((3, 3)), np.ones(3)).any()


def test_consensus_counts_rows():
    from types import SimpleNamespace as Row
    rows = [Row(top_processes=[(5, 1.0), (4, 0.5)]), Row(top_processes=[(4, 1.0), (5, 0.9)]),
            Row(top_processes=[(5, 2.0)])]
    assert cluster.consensus(rows, "top_processes") == [(5, 3, 0), (4, 2, 0)]


def test_compare_clusterings_detects_change():
    jn = np.array([[1, 1, .2, .2], [1, 1, .2, .2], [.2, .2, 1, 1], [.2, .2, 1, 1]])
    b, k, _, _ = compare_clusterings(jn, jn, "average")
    assert (b, k) == (1.0, 2)
    jf = jn.copy()
    jf[1, :] = jf[:, 1] = [.2, 1, 1, 1]
    b2, _, _, _ = compare_clusterings(jn, jf, "average")
    assert b2 < 1.0


@pytest.mark.parametrize("method", ["single", "complete", "average", "weighted", "ward"])
@pytest.mark.parametrize("seed", range(6))
def test_class_dendrogram_equals_clustering_every_trace(method, seed):
    """Clustering C classes with multiplicities == clustering all N traces (SciPy)."""
    rng = np.random.default_rng(seed)
    c = int(rng.integers(2, 12))
    pts = rng.random((c, 3))
    jc = 1.0 - np.sqrt(((pts[:, None] - pts[None]) ** 2).sum(-1)) / 2.0    # no ties, J < 1 off-diagonal
    sizes = rng.integers(1, 5, c)
    members = np.repeat(np.arange(c), sizes)
    full = jc[np.ix_(members, members)]
    Zc = cluster.class_dendrogram(jc, sizes, method)
    Zf = linkage(squareform(np.clip(1.0 - full, 0, 1), checks=False), method=method)
    # the object tree = zero-height merges of duplicates, then the class tree
    assert np.allclose(np.sort(Zf[:, 2])[len(members) - c:], np.sort(Zc[:, 2]))
    for k in range(1, c + 1):
        lc = fcluster(Zc, k, "maxclust")[members]
        lf = fcluster(Zf, k, "maxclust")
        assert cluster.bscore(lc, lf) == 1.0 or len(set(lc)) == len(set(lf)) == 1


@pytest.mark.parametrize("seed", range(5))
def test_class_level_scores_and_bscore_equal_full_matrices(seed):
    rng = np.random.default_rng(seed)
    n = 30
    # objects fall into a few classes per run; class JSMs from random points
    cn, cf = rng.integers(0, 4, n), rng.integers(0, 5, n)
    cn = np.unique(cn, return_inverse=True)[1].reshape(-1)
    cf = np.unique(cf, return_inverse=True)[1].reshape(-1)

    def jsm(c):
        pts = rng.random((c, 2))
        return 1.0 - np.sqrt(((pts[:, None] - pts[None]) ** 2).sum(-1)) / 2
    jn, jf = jsm(cn.max() + 1), jsm(cf.max() + 1)
    full_n, full_f = jn[np.ix_(cn, cn)], jf[np.ix_(cf, cf)]
    d = cluster.jsm_diff(full_n, full_f)
    sums, flagged = cluster.class_change_scores(jn, cn, jf, cf)
    assert np.allclose(sums, change_scores(d))
    # every changed pair of objects has a flagged member
    rows, cols = np.nonzero(d > 0)
    assert (flagged[rows] | flagged[cols]).all()
    for method in cluster.LINKAGES:
        b_class, k_class = cluster.compare_classes(jn, cn, jf, cf, method)
        b_full, k_full, _, _ = compare_clusterings(full_n, full_f, method)
        assert k_class == k_full and b_class == pytest.approx(b_full)


@pytest.mark.parametrize("tokens,distinct", [(12, 5), (400, 300), (3000, 2000)])
@pytest.mark.parametrize("kind", ["sing", "doub"])
def test_count_matrix_matches_per_trace_counts(kind, tokens, distinct):
    """The counting kernel's rows equal the per-trace numpy form, including rows with
    more distinct attributes than its hash table first holds (it grows mid-row), for
    int64 NLRs and the compact int32 ones alike."""
    rng = np.random.default_rng(tokens)
    nlrs = []
    for i in range(20):
        n = int(rng.integers(0, tokens))
        ids = rng.integers(-3, distinct, n)
        counts = np.where(ids < 0, rng.integers(2, 9, n), 1)
        nlrs.append(NLR(ids, counts) if i % 2 else NLR(ids.astype(np.int32), counts.astype(np.int32)))
    m = attrs.count_matrix(nlrs, kind, distinct, distinct + 3)
    for i, nl in enumerate(nlrs):
        codes, counts = attrs.attribute_counts(nl, kind, distinct, distinct + 3)
        row = m.getrow(i)
        assert row.indices.tolist() == codes.tolist() and row.data.tolist() == counts.tolist()



@pytest.mark.parametrize("kinds", [(False,), (True,), (False, True), (True, False)])
def test_count_matrix_is_the_same_in_the_array_and_in_hash_tables(kinds, monkeypatch):
    """Few columns are counted in an array indexed by the code, sing and doub together in
    one pass, many in hash tables (the kernel's ``DENSE_COUNT_COLUMNS``): the same CSR
    arrays either way, in the order asked; and a token whose code is outside the columns
    (a caller's mistake) gives what the hash tables give, not a write outside the array."""
    from difftrace_mpi.kernels import nlr as knlr
    rng = np.random.default_rng(7)
    nlrs = []
    for i in range(30):
        n = int(rng.integers(0, 500))
        ids = rng.integers(-6, 40, n)
        counts = np.where(ids < 0, rng.integers(0, 9, n), 1)       # a loop may count 0 iterations
        nlrs.append(NLR(ids, counts) if i % 2 else NLR(ids.astype(np.int32), counts.astype(np.int32)))

    def both(rows, n_functions, n_codes):
        monkeypatch.setattr(knlr, "DENSE_COUNT_COLUMNS", 1 << 20)
        dense = knlr.count_token_attributes_of(kinds, rows, n_functions, n_codes)
        monkeypatch.setattr(knlr, "DENSE_COUNT_COLUMNS", 0)
        hashed = [knlr.count_token_attributes_of((pairs,), rows, n_functions, n_codes)[0] for pairs in kinds]
        return dense, hashed

    dense, hashed = both(nlrs, 40, 46)
    assert len(dense) == len(kinds)
    for pairs, got, want in zip(kinds, dense, hashed):
        assert len(got[1]) > 200 and got[1].max() >= (46 * 40 if pairs else 40)
        for a, b in zip(got, want):
            assert a.dtype == b.dtype and np.array_equal(a, b)
    # codes beyond n_codes (46 loops' codes where 3 were said): the array is not used
    dense, hashed = both(nlrs, 40, 43)
    for pairs, got, want in zip(kinds, dense, hashed):
        for a, b in zip(got, want):
            assert np.array_equal(a, b)
        assert want[1].max() >= (43 * 43 if pairs else 43)


def test_change_kind_by_subsumption():
    row = lambda *pairs: (np.array([a for a, _ in pairs]), np.array([w for _, w in pairs]))  # noqa: E731
    normal = row((1, 2), (5, 1), (9, 3))
    assert cluster.change_kind(normal, normal) == (0, 1.0, 1.0)
    kind, sn, sf = cluster.change_kind(normal, row((1, 2), (5, 1), (9, 3), (11, 1)))   # extra call
    assert cluster.CHANGE_KINDS[kind] == "more" and sn == 1.0 and sf == 6 / 7
    kind, sn, sf = cluster.change_kind(normal, row((1, 2), (9, 1)))                    # stopped early
    assert cluster.CHANGE_KINDS[kind] == "less" and sn == 3 / 6 and sf == 1.0
    kind, _, _ = cluster.change_kind(normal, row((1, 2), (7, 4)))
    assert cluster.CHANGE_KINDS[kind] == "different"


def test_call_pairs_with_virtual_root_and_transparent_callers():
    from difftrace_mpi.kernels.nlr import call_pairs
    # main(1) > helper(2) > MPI_Send(3) < < ; MPI_Recv(4) < ; < ; then MPI_Send at top level
    ev = np.array([1, 2, 3, 0, 0, 4, 0, 0, 3, 0], dtype=np.int32)
    keep = np.array([0, 1, 0, 1, 1], dtype=np.uint8)          # helper filtered out: transparent
    parents, children = call_pairs(ev, keep)
    assert list(zip(parents.tolist(), children.tolist())) == [(0, 1), (1, 3), (1, 4), (0, 3)]
    m = attrs.call_count_matrix([ev, ev[ev != 0]], keep, 5)
    assert dict(zip(m.getrow(0).indices.tolist(), m.getrow(0).data.tolist())) == \
        {0 * 5 + 1: 1, 1 * 5 + 3: 1, 1 * 5 + 4: 1, 0 * 5 + 3: 1}
    # an entry-only trace has no structure: every kept call hangs from the root
    assert dict(zip(m.getrow(1).indices.tolist(), m.getrow(1).data.tolist())) == {1: 1, 3: 2, 4: 1}
    label = attrs.attribute_labeller(["<return>", "main", "helper", "MPI_Send", "MPI_Recv"], 0, "call")
    assert label(0 * 5 + 1) == "<root> -> main" and label(1 * 5 + 3) == "main -> MPI_Send"


@pytest.mark.parametrize("dtype", [np.int32, np.uint16])
def test_kept_calls_is_the_numpy_filter_and_refuses_unknown_ids(dtype):
    """The drop-returns filter kernel (branch-free: every event stored, the kept ones
    counted) keeps exactly the entries whose flag is set, whatever the stored id width,
    and refuses an id beyond the flags instead of reading past them."""
    from difftrace_mpi.kernels.nlr import kept_calls
    rng = np.random.default_rng(3)
    events = rng.integers(0, 40, 5000).astype(dtype)
    events[rng.random(5000) < 0.4] = 0
    keep = (rng.random(40) < 0.6).astype(np.uint8)
    keep[0] = 1                     # a return is never kept, whatever its flag says
    want = events[(events != 0) & keep[events].astype(bool)].astype(np.int32)
    got = kept_calls(events, keep)
    assert got.dtype == np.int32 and np.array_equal(got, want)
    with pytest.raises(IndexError, match="event id 40 beyond"):
        kept_calls(np.array([1, 0, 40, 2], dtype=dtype), keep)
    # into a reused buffer: a view of it, the same values; a buffer too small is refused
    buffer = np.full(len(events) + 1, -7, dtype=np.int32)
    into = kept_calls(events, keep, buffer)
    assert np.shares_memory(into, buffer) and np.array_equal(into, want)
    with pytest.raises(ValueError, match="at least"):
        kept_calls(events, keep, np.empty(len(events), dtype=np.int32))


@pytest.mark.parametrize("dtype", [np.int32, np.uint16])
def test_flag_kernels_are_the_numpy_forms_and_refuse_unknown_ids(dtype):
    """count_flagged (a clock: flagged calls before a position) and flagged_positions
    (where the parallel regions start) equal their numpy forms at every stop, whatever
    the stored id width, and refuse an id beyond the flags."""
    from difftrace_mpi.kernels.nlr import count_flagged, flagged_positions
    rng = np.random.default_rng(5)
    events = rng.integers(0, 30, 4000).astype(dtype)
    flags = (rng.random(30) < 0.3).astype(np.uint8)
    for stop in (-1, 0, 1, 1777, 3999, 4000, 10 ** 6):
        want = int(flags[events[:None if stop < 0 else stop]].sum())
        assert count_flagged(events, flags, stop) == want, stop
    assert np.array_equal(flagged_positions(events, flags), np.flatnonzero(flags[events]))
    assert len(flagged_positions(events[:0], flags)) == 0
    bad = events.copy()
    bad[2500] = 30
    with pytest.raises(IndexError, match="event id 30 beyond"):
        count_flagged(bad, flags, -1)
    with pytest.raises(IndexError, match="event id 30 beyond"):
        flagged_positions(bad, flags)
