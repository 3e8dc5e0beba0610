"""Concept lattice: paper example, brute-force reference, merge, serialization, Jaccard,
cap, DOT."""
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

from difftrace_mpi.errors import DiffTraceError, LatticeTooLarge
from difftrace_mpi.stages.classify.lattice import Lattice, merge, merge_all
from difftrace_mpi.stages.classify.jsm import jaccard_direct, jaccard_from_lattice
from difftrace_mpi.views.dot import to_dot

# ----------------------------------------------------------------------------------------
# helpers

INIT, SIZE, RANK, L0, L1, FIN = range(6)
NAMES = ["MPI_Init", "MPI_Comm_Size", "MPI_Comm_Rank", "L0", "L1", "MPI_Finalize"]


def table_iv():
    """Paper Table IV: traces 0 and 2 have L0, 1 and 3 have L1, all four MPI functions."""
    return {g: {INIT: 1, SIZE: 1, RANK: 1, FIN: 1, (L0 if g % 2 == 0 else L1): 1}
            for g in range(4)}


def key(d):
    return tuple(sorted(d.items()))


def meet(x, y):
    return {a: min(w, y[a]) for a, w in x.items() if a in y}


def dominates(big, small):
    return all(a in big and big[a] >= w for a, w in small.items())


def reference(context):
    """Naive lattice of a context {obj: {attr: weight}}: all meets of non-empty subsets of
    object intents (closed pairwise until nothing new), plus the join of all; extents by
    dominance; covers by brute force.  Returns (set of (intent, extent), set of edges)."""
    if not context:
        return set(), set()
    intents = {key(d) for d in context.values()}
    while True:
        new = {key(meet(dict(x), dict(y))) for x in intents for y in intents} - intents
        if not new:
            break
        intents |= new
    join = {}
    for d in context.values():
        for a, w in d.items():
            join[a] = max(join.get(a, 0), w)
    intents.add(key(join))
    intents = sorted(intents)
    extent = {i: tuple(sorted(g for g, d in context.items() if dominates(d, dict(i))))
              for i in intents}
    below = {(p, c) for p in intents for c in intents
             if p != c and dominates(dict(c), dict(p))}
    edges = {(p, c) for (p, c) in below
             if not any((p, m) in below and (m, c) in below for m in intents)}
    return {(i, extent[i]) for i in intents}, edges


def as_sets(L):
    concepts, intents = set(), []
    for a, w, ext in L.concepts():
        i = tuple(zip(a.tolist(), w.tolist()))
        intents.append(i)
        concepts.add((i, tuple(ext.tolist())))
    edges = {(intents[p], intents[c]) for p, c in L.cover_edges().tolist()}
    return concepts, edges


def build(context, order=None, max_concepts=200_000):
    L = Lattice(max_concepts=max_concepts)
    for g in (sorted(context) if order is None else order):
        d = context[g]
        attrs = sorted(d)
        L.add_object(g, np.array(attrs, dtype=np.int64),
                     np.array([d[a] for a in attrs], dtype=np.int64))
    return L


def to_csr(context, objs):
    indptr, ind, wt = [0], [], []
    for g in objs:
        for a in sorted(context[g]):
            ind.append(a)
            wt.append(context[g][a])
        indptr.append(len(ind))
    return (np.array(indptr, dtype=np.int64), np.array(ind, dtype=np.int64),
            np.array(wt, dtype=np.int64))


def naive_jaccard(context, objs):
    n = len(objs)
    out = np.empty((n, n))
    for i, gi in enumerate(objs):
        for j, gj in enumerate(objs):
            x, y = context[gi], context[gj]
            inter = sum(min(w, y[a]) for a, w in x.items() if a in y)
            union = sum(max(x.get(a, 0), y.get(a, 0)) for a in set(x) | set(y))
            out[i, j] = 1.0 if union == 0 else inter / union
    return out


@st.composite
def contexts(draw, max_objects=8, max_attrs=6, max_weight=1):
    """Random weighted contexts with duplicated rows and empty rows likely."""
    n = draw(st.integers(1, max_objects))
    n_attrs = draw(st.integers(1, max_attrs))
    base = draw(st.lists(st.dictionaries(st.integers(0, n_attrs - 1),
                                         st.integers(1, max_weight), max_size=n_attrs),
                         min_size=1, max_size=n))
    rows = [base[draw(st.integers(0, len(base) - 1))] for _ in range(n)]
    ids = draw(st.lists(st.integers(0, 10_000), min_size=n, max_size=n, unique=True))
    return dict(zip(ids, rows))


any_context = st.one_of(contexts(), contexts(max_weight=4), contexts(max_objects=10,
                                                                      max_attrs=4,
                                                                      max_weight=3))
SETTINGS = dict(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------------------------------
# the paper's example (Table IV, Figure 3, Figure 4)

def test_table_iv_lattice():
    L = build(table_iv())
    assert L.n_concepts == 4 and L.n_objects == 4
    core = [INIT, SIZE, RANK, FIN]
    expected = [(sorted(core), [0, 1, 2, 3]), (sorted(core + [L0]), [0, 2]),
                (sorted(core + [L1]), [1, 3]), (list(range(6)), [])]
    got = [(a.tolist(), e.tolist()) for a, w, e in L.concepts()]
    assert got == expected
    assert all((w == 1).all() for _, w, _ in L.concepts())
    assert L.top == 0 and L.bottom == 3
    assert L.cover_edges().tolist() == [[0, 1], [0, 2], [1, 3], [2, 3]]
    assert L.parents(0).tolist() == [] and L.children(0).tolist() == [1, 2]
    assert L.parents(3).tolist() == [1, 2] and L.children(3).tolist() == []
    assert [L.object_concept(g) for g in range(4)] == [1, 2, 1, 2]
    assert [c.tolist() for c in L.classes()] == [[0, 2], [1, 3]]
    assert L.extent(3).tolist() == [] and L.own_objects(1).tolist() == [0, 2]
    assert L.intent_weight(0) == 4 and L.intent_weight(3) == 6


def test_table_iv_jsm():
    L = build(table_iv())
    J = jaccard_from_lattice(L, [0, 1, 2, 3])
    same = np.array([[g % 2 == h % 2 for h in range(4)] for g in range(4)])
    assert (J[same] == 1.0).all()
    assert (J[~same] == 4 / 6).all()
    indptr, ind, wt = to_csr(table_iv(), range(4))
    assert np.array_equal(J, jaccard_direct(indptr, ind, wt))
    # a different object order permutes rows and columns
    order = [3, 0, 2, 1]
    assert np.array_equal(jaccard_from_lattice(L, order), J[np.ix_(order, order)])


def test_table_iv_dot():
    L = build(table_iv())
    dot = to_dot(L, attr_label=lambda a: NAMES[a], obj_label=lambda g: f"Trace {g}")
    nodes = dict(re.findall(r'^\s*(c\d+) \[label="(.*)"\];$', dot, re.M))
    edges = re.findall(r"^\s*(c\d+) -> (c\d+);$", dot, re.M)
    assert len(nodes) == 4 and len(edges) == 4
    assert dot.startswith("digraph") and dot.rstrip().endswith("}")
    assert nodes["c0"] == "MPI_Init, MPI_Comm_Size, MPI_Comm_Rank, MPI_Finalize"
    assert nodes["c1"] == r"L0\nTrace 0, Trace 2"
    assert nodes["c2"] == r"L1\nTrace 1, Trace 3"
    assert nodes["c3"] == ""
    assert sorted(edges) == [("c0", "c1"), ("c0", "c2"), ("c1", "c3"), ("c2", "c3")]


@given(any_context)
@settings(**SETTINGS)
def test_dot_counts(context):
    L = build(context)
    dot = to_dot(L)
    assert len(re.findall(r"^\s*c\d+ \[label=", dot, re.M)) == L.n_concepts
    assert len(re.findall(r"^\s*c\d+ -> c\d+;$", dot, re.M)) == len(L.cover_edges())
    # reduced labelling: every object is shown exactly once
    shown = re.findall(r'label="(?:[^"\\]|\\.)*"', dot)
    assert sum(len(L.own_objects(i)) for i in range(L.n_concepts)) == len(context)
    assert len(shown) == L.n_concepts


def test_weighted_dot_labels():
    L = Lattice()
    L.add_object(0, [1, 2], [3, 1])
    L.add_object(1, [1], [5])
    dot = to_dot(L, attr_label=lambda a: f"a{a}")
    nodes = dict(re.findall(r'^\s*(c\d+) \[label="(.*)"\];$', dot, re.M))
    # top {a1:3}; object 0 {a1:3, a2}; object 1 {a1:5}; bottom {a1:5, a2}
    assert nodes == {"c0": "a1:3", "c1": r"a2\n0", "c2": r"a1:5\n1", "c3": ""}


# ----------------------------------------------------------------------------------------
# incremental construction against the brute-force reference

@given(any_context, st.randoms(use_true_random=False))
@settings(**SETTINGS)
def test_incremental_equals_reference(context, rnd):
    order = sorted(context)
    rnd.shuffle(order)
    L = Lattice()
    done = {}
    for g in order:                       # the Hasse diagram is right after every insert
        d = context[g]
        attrs = sorted(d)
        L.add_object(g, attrs, [d[a] for a in attrs])
        done[g] = d
        assert as_sets(L) == reference(done)
    for g, d in context.items():
        a, w = L.intent(L.object_concept(g))
        assert dict(zip(a.tolist(), w.tolist())) == d
    classes = {}
    for g, d in context.items():
        classes.setdefault(key(d), []).append(g)
    assert [c.tolist() for c in L.classes()] == sorted(sorted(c) for c in classes.values())
    top = None
    for d in context.values():
        top = dict(d) if top is None else meet(top, d)
    a, w = L.intent(L.top)
    assert dict(zip(a.tolist(), w.tolist())) == top and len(L.parents(L.top)) == 0
    assert L.extent(L.top).tolist() == sorted(context)
    assert len(L.children(L.bottom)) == 0


@given(any_context, st.randoms(use_true_random=False))
@settings(**SETTINGS)
def test_insertion_order_irrelevant(context, rnd):
    order = sorted(context)
    rnd.shuffle(order)
    A, B = build(context), build(context, order)
    assert A == B
    a, b = A.to_arrays(), B.to_arrays()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    indptr, ind, wt = to_csr(context, order)
    C = Lattice()
    C.add_objects(order, indptr, ind, wt)
    assert C == A


def test_bulk_and_class_insertion():
    ctx = table_iv()
    L = Lattice()
    L.add_class([2, 0], [INIT, SIZE, RANK, L0, FIN])
    L.add_class([1], [INIT, SIZE, RANK, L1, FIN])
    L.add_object(3, [INIT, SIZE, RANK, L1, FIN])
    assert L == build(ctx)


def test_concept_order_is_canonical():
    L = build({0: {1: 2, 2: 1}, 1: {1: 1, 3: 1}, 2: {2: 1, 3: 1}})
    totals = [int(w.sum()) for _, w, _ in L.concepts()]
    assert totals == sorted(totals)
    keys = [(int(w.sum()), list(zip(a.tolist(), w.tolist()))) for a, w, _ in L.concepts()]
    assert keys == sorted(keys)
    for p, c in L.cover_edges().tolist():
        assert p < c


def test_bottom_growth_and_empty_intents():
    L = Lattice()
    L.add_object(0, [])                     # empty intent: the top
    L.add_object(1, [1], [2])
    L.add_object(2, [1], [2])               # same class
    L.add_object(3, [1, 2], [1, 4])
    assert as_sets(L) == reference({0: {}, 1: {1: 2}, 2: {1: 2}, 3: {1: 1, 2: 4}})
    J = jaccard_from_lattice(L, [0, 1, 2, 3])
    assert J[0, 0] == 1.0 and J[0, 1] == 0.0 and J[1, 2] == 1.0
    assert J[1, 3] == 1 / 6
    E = Lattice()
    E.add_class([5, 6], [])
    assert jaccard_from_lattice(E).tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert E.n_concepts == 1 and E.top == E.bottom == 0


def test_empty_lattice():
    L = Lattice()
    assert L.n_concepts == 0 and L.top is None and L.bottom is None
    assert list(L.concepts()) == [] and L.classes() == []
    assert Lattice.from_arrays(L.to_arrays()) == L
    assert jaccard_from_lattice(L).shape == (0, 0)
    M = build(table_iv())
    assert merge(L, M) == M and merge(M, L) == M


def test_input_errors():
    L = build(table_iv())
    with pytest.raises(ValueError, match="already"):
        L.add_object(2, [INIT])
    with pytest.raises(ValueError, match="sorted"):
        L.add_object(9, [3, 1])
    with pytest.raises(ValueError, match="sorted"):
        L.add_object(9, [1, 1])
    with pytest.raises(ValueError, match="positive"):
        L.add_object(9, [1, 2], [1, 0])
    with pytest.raises(ValueError, match="weights"):
        L.add_object(9, [1, 2], [1])
    with pytest.raises(KeyError):
        L.object_concept(99)
    with pytest.raises(ValueError, match="already"):
        merge(L, build(table_iv()))
    assert L == build(table_iv())           # refused insertions changed nothing


# ----------------------------------------------------------------------------------------
# merge and serialization

@given(any_context, st.randoms(use_true_random=False))
@settings(**SETTINGS)
def test_merge_equals_build(context, rnd):
    ids = sorted(context)
    rnd.shuffle(ids)
    cut = rnd.randint(0, len(ids))
    a = build({g: context[g] for g in ids[:cut]})
    b = build({g: context[g] for g in ids[cut:]})
    whole = build(context)
    a_before = a.to_arrays()
    m = merge(a, b)
    assert m == whole and merge(b, a) == whole
    assert as_sets(m) == reference(context)
    assert all(np.array_equal(a_before[k], a.to_arrays()[k]) for k in a_before)
    # consuming merge (the MPI tree's partials): the same lattice, built in one of the inputs
    a2, b2 = (Lattice.from_arrays(x.to_arrays()) for x in (a, b))
    consumed = merge(a2, b2, consume=True)
    assert consumed == whole and (consumed is a2 or consumed is b2)
    # the MPI tree's path: trusted loads and a disjoint merge leave the object map stale;
    # every object query rebuilds it, and a repeated object is still refused afterwards
    a3, b3 = (Lattice.from_arrays(x.to_arrays(), trusted=True) for x in (a, b))
    tree = merge(a3, b3, consume=True, disjoint=True)
    assert tree == whole and tree.n_objects == whole.n_objects == len(context)
    objs = np.array(ids, dtype=np.int64)
    assert np.array_equal(tree.object_concepts(objs), whole.object_concepts(objs))
    if ids:
        assert tree.object_concept(ids[0]) == whole.object_concept(ids[0])
        with pytest.raises(ValueError, match="already"):
            tree.add_object(ids[0], [1])


@given(any_context, st.randoms(use_true_random=False))
@settings(**SETTINGS)
def test_tree_merge_of_four(context, rnd):
    ids = sorted(context)
    rnd.shuffle(ids)
    parts_ids = [ids[i::4] for i in range(4)]
    p = [build({g: context[g] for g in part}) for part in parts_ids]
    whole = build(context)
    assert merge(merge(p[0], p[1]), merge(p[2], p[3])) == whole
    assert merge(merge(p[3], p[1]), merge(p[0], p[2])) == whole
    assert merge(merge(merge(p[2], p[0]), p[3]), p[1]) == whole
    assert merge_all(p) == whole
    # through serialization at every hop, as between MPI ranks
    q = [Lattice.from_arrays(x.to_arrays()) for x in p]
    r = merge(Lattice.from_arrays(merge(q[0], q[1]).to_arrays()),
              Lattice.from_arrays(merge(q[2], q[3]).to_arrays()))
    assert r == whole
    assert as_sets(r) == reference(context)


@given(any_context)
@settings(**SETTINGS)
def test_serialization_round_trip(context):
    L = build(context)
    arrs = L.to_arrays()
    assert all(isinstance(v, np.ndarray) and v.dtype == np.int64 for v in arrs.values())
    M = Lattice.from_arrays({k: v.copy() for k, v in arrs.items()})
    assert M == L and as_sets(M) == as_sets(L)
    assert M.max_concepts == L.max_concepts
    assert np.array_equal(jaccard_from_lattice(M), jaccard_from_lattice(L))
    # a loaded lattice keeps growing correctly
    extra = max(context) + 1
    M.add_object(extra, [0, 99], [1, 2])
    bigger = dict(context)
    bigger[extra] = {0: 1, 99: 2}
    assert M == build(bigger)


def test_serialization_through_hdf5_and_mpi_buffers():
    h5py = pytest.importorskip("h5py")
    L = build(table_iv())
    with h5py.File("mem.h5", "w", driver="core", backing_store=False) as f:
        g = f.create_group("lattice")
        for k, v in L.to_arrays().items():
            g.create_dataset(k, data=v)
        assert Lattice.from_arrays(g) == L
        readonly = {k: g[k][()] for k in g}
    for v in readonly.values():
        v.setflags(write=False)
    assert Lattice.from_arrays(readonly) == L


def test_from_arrays_rejects_corrupt_input():
    arrs = build(table_iv()).to_arrays()
    bad = dict(arrs, meta=np.array([99, 10], dtype=np.int64))
    with pytest.raises(ValueError, match="format"):
        Lattice.from_arrays(bad)
    with pytest.raises(ValueError, match="missing"):
        Lattice.from_arrays({k: v for k, v in arrs.items() if k != "children"})
    ch = arrs["children"].copy()
    ch[0] = 7
    with pytest.raises(ValueError, match="cover"):
        Lattice.from_arrays(dict(arrs, children=ch))
    ch = arrs["children"][::-1].copy()          # edges pointing upward
    with pytest.raises(ValueError):
        Lattice.from_arrays(dict(arrs, child_indptr=np.array([0, 0, 1, 2, 4]), children=ch))
    with pytest.raises(LatticeTooLarge):
        Lattice.from_arrays(arrs, max_concepts=3)


# ----------------------------------------------------------------------------------------
# Jaccard similarity: lattice path == direct path, bit for bit

@given(any_context, st.randoms(use_true_random=False))
@settings(**SETTINGS)
def test_jaccard_paths_identical(context, rnd):
    objs = sorted(context)
    rnd.shuffle(objs)
    L = build(context)
    J = jaccard_from_lattice(L, objs)
    D = jaccard_direct(*to_csr(context, objs))
    assert J.dtype == D.dtype == np.float64
    assert np.array_equal(J, D)                          # ==, not allclose
    assert np.array_equal(J, naive_jaccard(context, objs))
    for method in ("climb", "sweep"):
        assert np.array_equal(jaccard_from_lattice(L, objs, method=method), J)
    assert np.array_equal(J, J.T) and (np.diagonal(J) == 1.0).all()
    Jc, inv = jaccard_from_lattice(L, objs, expand=False)
    assert np.array_equal(Jc[np.ix_(inv, inv)], J)
    assert len(Jc) == len({key(d) for d in context.values()})
    Dc, dinv = jaccard_direct(*to_csr(context, objs), expand=False)
    assert len(Dc) == len(Jc) and np.array_equal(Dc[np.ix_(dinv, dinv)], J)


def test_jaccard_large_weights_bit_identical():
    rng = np.random.default_rng(7)
    ctx = {}
    for g in range(40):
        attrs = rng.choice(30, size=rng.integers(0, 12), replace=False)
        ctx[g] = {int(a): int(rng.integers(1, 10**6)) for a in attrs}
    for g in range(40, 50):
        ctx[g] = dict(ctx[g - 40])
    objs = list(range(50))
    L = build(ctx)
    J = jaccard_from_lattice(L, objs)
    assert np.array_equal(J, jaccard_direct(*to_csr(ctx, objs)))
    for method in ("climb", "sweep"):
        assert np.array_equal(jaccard_from_lattice(L, objs, method=method), J)
    for i in range(50):
        for j in range(50):
            x, y = ctx[i], ctx[j]
            inter = sum(min(w, y[a]) for a, w in x.items() if a in y)
            union = sum(x.values()) + sum(y.values()) - inter
            exact = Fraction(inter, union) if union else Fraction(1)
            assert J[i, j] == float(exact)


def test_jaccard_direct_inputs():
    sp = pytest.importorskip("scipy.sparse")
    dense = np.array([[1, 0, 2], [0, 3, 0], [1, 0, 2], [0, 0, 0]])
    m = sp.csr_matrix(dense)
    J = jaccard_direct(m)
    assert J[0, 2] == 1.0 and J[0, 1] == 0.0 and J[3, 3] == 1.0 and J[0, 3] == 0.0
    # unsorted rows are sorted; repeated attributes in a row are refused
    assert np.array_equal(jaccard_direct([0, 2, 3], [2, 0, 1], [2, 1, 3]),
                          jaccard_direct([0, 2, 3], [0, 2, 1], [1, 2, 3]))
    with pytest.raises(ValueError, match="twice"):
        jaccard_direct([0, 2], [1, 1], [1, 1])
    with pytest.raises(ValueError, match="positive"):
        jaccard_direct([0, 1], [1], [0])
    assert jaccard_direct([0, 2, 3], [0, 1, 1])[0, 1] == 0.5     # binary default


# ----------------------------------------------------------------------------------------
# the concept cap

def test_cap_raises():
    attrs = np.arange(12)
    L = Lattice(max_concepts=1000)
    with pytest.raises(LatticeTooLarge) as info:
        for g in range(12):
            L.add_object(g, np.delete(attrs, g))
    assert isinstance(info.value, DiffTraceError)
    msg = str(info.value)
    assert "1000" in msg and "--max-concepts" in msg and "coarser" in msg
    # the insertion is undone: the lattice is that of the objects before it, still usable
    done = L.n_objects
    assert 0 < done < 12 and L == build({g: dict.fromkeys(np.delete(attrs, g).tolist(), 1) for g in range(done)})
    L.add_object(100, [1])
    assert L.n_objects == done + 1
    # exactly enough room: 2^12 - 1 meets plus the empty-extent bottom
    ok = Lattice(max_concepts=4096)
    for g in range(12):
        ok.add_object(g, np.delete(attrs, g))
    assert ok.n_concepts == 4096
    assert ok.intent(ok.top)[0].tolist() == [] and ok.extent(ok.bottom).tolist() == []
    with pytest.raises(LatticeTooLarge):
        small = Lattice(max_concepts=4095)
        for g in range(12):
            small.add_object(g, np.delete(attrs, g))


def test_cap_checked_during_merge():
    attrs = np.arange(10)
    a, b = Lattice(max_concepts=600), Lattice(max_concepts=600)
    for g in range(10):
        (a if g < 5 else b).add_object(g, np.delete(attrs, g))
    with pytest.raises(LatticeTooLarge):
        merge(a, b)
    assert merge(a, b, max_concepts=1024).n_concepts == 1024
    assert a.n_objects == 5                        # inputs untouched


def test_deep_lattice_does_not_overflow_the_stack():
    """One insertion that creates a 100k-long chain of new meets (AddIntent recursing
    100k deep) must work: the kernel keeps its own stack."""
    h = 100_000
    L = Lattice(max_concepts=10**6)
    k = np.arange(1, h + 1, dtype=np.int64)
    L.add_objects(k, np.arange(0, 2 * h + 1, 2), np.tile([0, 1], h), np.repeat(k, 2))
    L.add_object(0, [0, 2], [h, 1])
    assert L.n_concepts == 2 * h + 2          # {a:k, b:k}, {a:k}, the object 0, bottom
    assert L.intent(L.top)[1].tolist() == [1] and L.extent(L.top).size == h + 1
    objs = np.array([0, 1, 2, h // 2, h], dtype=np.int64)
    J = jaccard_from_lattice(L, objs)
    assert J[0, 4] == h / (h + 1 + 2 * h - h) and J[0, 1] == 1 / (h + 1 + 2 - 1)
    rows = {0: {0: h, 2: 1}}
    rows.update({int(g): {0: int(g), 1: int(g)} for g in objs[1:]})
    assert np.array_equal(J, jaccard_direct(*to_csr(rows, objs.tolist())))


@pytest.mark.parametrize("density", [0.0, 2.0])      # every layer dense (BLAS) / every layer sparse
@pytest.mark.parametrize("max_weight", [1, 5, 64, 65, 10**6])
def test_min_sums_layered_and_merge_paths_agree(max_weight, density, monkeypatch):
    """Every way of summing minima (dense or sparse products over weight layers, pairwise
    merge) gives the same integers, and row blocks equal the rows of the whole; empty rows too."""
    from difftrace_mpi.stages.classify import jsm
    from difftrace_mpi.kernels import lattice as k
    from difftrace_mpi.stages.classify.jsm import jaccard_direct, jaccard_rows, min_sums
    monkeypatch.setattr(jsm, "DENSE_MIN_DENSITY", density)
    rng = np.random.default_rng(max_weight)
    rows = [np.unique(rng.integers(0, 40, rng.integers(0, 15))) for _ in range(30)] + [np.empty(0, np.int64)]
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    indices = np.concatenate(rows).astype(np.int64)
    weights = rng.integers(1, max_weight + 1, len(indices)).astype(np.int64)
    merged = k.csr_min_sums(indptr, indices, weights)
    assert np.array_equal(min_sums(indptr, indices, weights), merged)
    assert np.array_equal(min_sums(indptr, indices, weights, 7, 31), merged[7:31])
    full, _ = jaccard_direct(indptr, indices, weights, expand=False)
    distinct = len(np.unique([r.tobytes() + w.tobytes() for r, w in
                              zip(np.split(indices, indptr[1:-1]), np.split(weights, indptr[1:-1]))]))
    if distinct == len(rows):
        assert np.array_equal(jaccard_rows(indptr, indices, weights, 3, 31), full[3:31])


@pytest.mark.parametrize("max_weight", [1, 5, 10**6])
def test_row_blocked_class_matrices_equal_one_block(max_weight, monkeypatch):
    """The class J and S come from row blocks of the intersection sums (bounded memory);
    one row per block, a few rows, or one block give the same bits, and J equals the
    lattice path's."""
    from difftrace_mpi.stages.classify import jsm
    rng = np.random.default_rng(7 + max_weight)
    rows = {i: {int(a): int(rng.integers(1, max_weight + 1)) for a in rng.integers(0, 25, rng.integers(0, 9))}
            for i in range(40)}
    rows.update({40 + i: dict(rows[i]) for i in range(5)})                 # some duplicate rows
    csr = to_csr(rows, sorted(rows))
    results = []
    for block_bytes in (1, 8 * 45 * 3, 1 << 30):
        monkeypatch.setattr(jsm, "INTER_BLOCK_BYTES", block_bytes)
        results.append(jsm.jaccard_subsumption_direct(*csr, expand=False))
    for jc, sc, inv in results[1:]:
        assert np.array_equal(jc, results[0][0]) and np.array_equal(sc, results[0][1])
        assert np.array_equal(inv, results[0][2])
    # the row ranges the MPI ranks compute, in blocks of one and of three rows
    uptr, uind, uwt, _, _ = jsm._class_rows(*csr)
    for block_bytes in (1, 8 * 45 * 3):
        monkeypatch.setattr(jsm, "INTER_BLOCK_BYTES", block_bytes)
        jr, sr = jsm.jaccard_subsumption_rows(uptr, uind, uwt, 5, 29)
        assert np.array_equal(jr, results[0][0][5:29]) and np.array_equal(sr, results[0][1][5:29])
        assert np.array_equal(jsm.jaccard_rows(uptr, uind, uwt, 0, 3), results[0][0][:3])
    L = Lattice()
    L.add_objects(np.array(sorted(rows), dtype=np.int64), *csr)
    assert np.array_equal(jaccard_from_lattice(L, np.array(sorted(rows), dtype=np.int64)),
                          jsm.jaccard_direct(*csr))


@pytest.mark.parametrize("n", [0, 1, 63, 64, 130])
def test_mirror_upper_fills_the_lower_triangle_across_tiles(n):
    """The triangle path mirrors in 64 x 64 tiles: sizes below, at and across a tile
    edge give the symmetric matrix of the upper triangle, the upper one untouched."""
    from difftrace_mpi.kernels import lattice as k
    rng = np.random.default_rng(n)
    a = rng.random((n, n))
    upper = np.triu(a)
    k.mirror_upper(a)
    assert np.array_equal(a, upper + np.triu(upper, 1).T)
    with pytest.raises(ValueError):
        k.mirror_upper(np.zeros((3, 4)))


def test_jaccard_from_inter_column_offset():
    """Columns col_lo.. of a row block divide like the same cells of the whole; the
    shapes that do not fit are refused."""
    from difftrace_mpi.kernels import lattice as k
    inter = np.array([[3, 1, 0], [1, 2, 0], [0, 0, 0]], dtype=np.int64)
    w = np.array([3, 2, 0], dtype=np.int64)
    whole = k.jaccard_from_inter(inter, w)
    assert whole[0, 1] == 1 / 4 and whole[2, 2] == 1.0
    out = np.full((2, 3), -1.0)
    k.jaccard_from_inter(np.ascontiguousarray(inter[1:, 1:]), w, 1, out, 1)
    assert np.array_equal(out[:, 1:], whole[1:, 1:]) and (out[:, 0] == -1.0).all()
    with pytest.raises(ValueError):
        k.jaccard_from_inter(np.ascontiguousarray(inter[:, 1:]), w)      # col_lo 0 needs all columns
    with pytest.raises(ValueError):
        k.jaccard_from_inter(np.ascontiguousarray(inter[1:, 1:]), w, 1, np.empty((2, 2)), 1)
