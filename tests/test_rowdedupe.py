"""Exact dedupe of CSR rows and the global class numbering (csr_rows.row_labels,
_dedupe, _unify) against the plain dict-of-bytes procedure, with hash collisions forced."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from difftrace_mpi.stages.classify import classes as A
from difftrace_mpi.stages.classify import rows as R

SETTINGS = dict(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# a few base rows, so that duplicates are common; permutations and swapped arrays too
value = st.integers(-3, 5)
base_row = st.lists(st.tuples(value, value), max_size=6)
rows_strategy = st.lists(base_row, min_size=1, max_size=5).flatmap(
    lambda bases: st.lists(st.sampled_from(bases + [list(reversed(b)) for b in bases]
                                           + [[(d, i) for i, d in b] for b in bases]), max_size=40))


def to_pairs(rows):
    return [(np.array([i for i, _ in r], dtype=np.int64), np.array([d for _, d in r], dtype=np.int64))
            for r in rows]


def to_csr(rows):
    return R.pairs_csr(to_pairs(rows))


def reference_labels(rows):
    first = {}
    return [first.setdefault(tuple(r), k) for k, r in enumerate(rows)]


def reference_unify(row_of, n_objects):
    """The per-object dict procedure: classes by first object, per run; absent = empty."""
    out = []
    for run in (0, 1):
        index, rows, class_of = {}, [], []
        for obj in range(n_objects):
            key = tuple(row_of.get((run, obj), []))
            if key not in index:
                index[key] = len(rows)
                rows.append(list(key))
            class_of.append(index[key])
        out.append((rows, class_of))
    return out


HASHES = {
    "real": None,
    "constant": lambda indptr, indices, data: np.zeros(len(indptr) - 1, dtype=np.uint64),
    "length parity": lambda indptr, indices, data: (np.diff(indptr) % 2).astype(np.uint64),
    "first index": lambda indptr, indices, data: np.array(
        [indices[a] if b > a else 7 for a, b in zip(indptr[:-1], indptr[1:])], dtype=np.int64).view(np.uint64),
}


@pytest.mark.parametrize("hash_name", sorted(HASHES))
@pytest.mark.parametrize("long_rows", [R.LONG_ROWS, 0])
@settings(**SETTINGS)
@given(rows=rows_strategy)
def test_row_labels_are_exact(rows, hash_name, long_rows):
    with pytest.MonkeyPatch.context() as mp:
        if HASHES[hash_name] is not None:
            mp.setattr(R, "row_hash", HASHES[hash_name])
        labels = R.row_labels(*to_csr(rows), long_rows=long_rows)
    assert labels.tolist() == reference_labels(rows)


def test_row_hash_sees_order_and_position():
    rows = [[(1, 2), (3, 4)], [(3, 4), (1, 2)], [(1, 4), (3, 2)], [(2, 1), (4, 3)], [], [(1, 2)], [(1, 2), (3, 4)]]
    h = R.row_hash(*to_csr(rows))
    assert len(set(h[:6].tolist())) == 6 and h[0] == h[6]
    assert R.row_labels(*to_csr(rows)).tolist() == [0, 1, 2, 3, 4, 5, 0]


@pytest.mark.parametrize("hash_name", ["real", "constant", "length parity"])
@settings(**SETTINGS)
@given(data=st.data())
def test_dedupe_and_unify_match_the_dict_procedure_under_any_sharding(data, hash_name):
    rows = data.draw(rows_strategy)
    n_objects = data.draw(st.integers(1, 12))
    # each (run, object) gets a row or is absent; traces then go to random ranks
    keys = [(run, obj) for run in (0, 1) for obj in range(n_objects)]
    present = data.draw(st.lists(st.booleans(), min_size=len(keys), max_size=len(keys)))
    row_of = {key: data.draw(st.sampled_from(rows)) if rows else [] for key, p in zip(keys, present) if p}
    n_ranks = data.draw(st.integers(1, 4))
    owner = {key: data.draw(st.integers(0, n_ranks - 1)) for key in row_of}
    as_list = data.draw(st.booleans())
    with pytest.MonkeyPatch.context() as mp:
        if HASHES[hash_name] is not None:
            mp.setattr(R, "row_hash", HASHES[hash_name])
        if data.draw(st.booleans()):
            mp.setattr(A, "LONG_ROWS", 0)           # the bytes path of _dedupe
        parts = []
        for rank in range(n_ranks):
            mine = [key for key in row_of if owner[key] == rank]
            data.draw(st.randoms()).shuffle(mine)
            local = [row_of[key] for key in mine]
            runs = np.array([r for r, _ in mine], dtype=np.int64)
            objs = np.array([o for _, o in mine], dtype=np.int64)
            part = A.dedupe(to_pairs(local) if as_list else to_csr(local), runs, objs)
            indptr, members = part[0], part[3]
            assert len(indptr) - 1 == len(set(tuple(r) for r in local))      # merged on the rank
            distinct = A.block_rows(part)       # a CSR block, or long rows kept as they are
            assert np.array_equal(np.diff(indptr), [len(a) for a, _ in distinct])
            for (run, obj, u) in members.tolist():
                got = list(zip(distinct[u][0].tolist(), distinct[u][1].tolist()))
                assert got == [tuple(x) for x in row_of[(run, obj)]]
            parts.append(part)
        unified = A.unify(parts, n_objects)
    for (rows_got, class_got), (rows_want, class_want) in zip(unified, reference_unify(row_of, n_objects)):
        assert class_got.dtype == np.int64 and class_got.tolist() == class_want
        assert [list(zip(a.tolist(), b.tolist())) for a, b in rows_got] == [[tuple(x) for x in r] for r in rows_want]
        indptr, indices, values = rows_got.csr                       # the block behind the rows
        assert [list(zip(indices[p:q].tolist(), values[p:q].tolist()))
                for p, q in zip(indptr[:-1], indptr[1:])] == [[tuple(x) for x in r] for r in rows_want]


def test_take_rows_and_empty_inputs():
    indptr, indices, data = to_csr([[(1, 1)], [], [(2, 2), (3, 3)]])
    out = R.take_rows(indptr, indices, data, [2, 1, 2, 0])
    assert out[0].tolist() == [0, 2, 2, 4, 5] and out[1].tolist() == [2, 3, 2, 3, 1]
    assert R.row_labels(np.zeros(1, np.int64), np.empty(0, np.int64), np.empty(0, np.int64)).tolist() == []
    empty = A.dedupe(to_csr([]), np.empty(0, np.int64), np.empty(0, np.int64))
    (rows_n, class_n), (rows_f, class_f) = A.unify([empty, empty], 2)
    assert class_n.tolist() == class_f.tolist() == [0, 0] and [len(a) for a, _ in rows_n] == [0]


def test_long_rows_stay_as_they_are_and_unify_alike_on_any_sharding():
    """Rows longer than LONG_ROWS entries on average (real NLRs) are deduplicated without
    being copied into one block: the distinct rows are the callers' own arrays, and the
    classes are the same whether the rows meet on one rank or come from three."""
    rng = np.random.default_rng(7)
    base = [(rng.integers(0, 50, 300).astype(np.int64), np.ones(300, np.int64)) for _ in range(4)]
    rows = [base[i % 4] for i in range(10)]          # objects 0..4 in each run, four distinct rows
    runs = np.array([0] * 5 + [1] * 5, dtype=np.int64)
    objs = np.array(list(range(5)) * 2, dtype=np.int64)
    whole = A.dedupe(list(rows), runs, objs)
    assert A.ragged(whole) and len(whole[0]) - 1 == 4
    assert all(got[0] is want[0] and got[1] is want[1] for got, want in zip(A.block_rows(whole), base))
    split = [A.dedupe(rows[a:b], runs[a:b], objs[a:b]) for a, b in ((0, 3), (3, 7), (7, 10))]
    for (rows_1, class_1), (rows_3, class_3) in zip(A.unify([whole], 5), A.unify(split, 5)):
        assert class_1.tolist() == class_3.tolist()
        assert [(a.tolist(), b.tolist()) for a, b in rows_1] == [(a.tolist(), b.tolist()) for a, b in rows_3]
        assert np.array_equal(rows_1.csr[1], np.concatenate([a for a, _ in rows_1]))


def test_bytes_labels_same_arrays_at_once_equal_bytes_confirmed(monkeypatch):
    from difftrace_mpi.stages.classify import rows as rows_module
    a = (np.array([1, 2, 3], dtype=np.int32), np.array([0, 4, 0], dtype=np.int32))
    a_copy = (a[0].copy(), a[1].copy())
    b = (np.array([1, 2, 4], dtype=np.int32), np.array([0, 4, 0], dtype=np.int32))
    short = (a[0][:2], a[1][:2])
    hashed = []
    real = rows_module._digest
    monkeypatch.setattr(rows_module, "_digest", lambda x: hashed.append(len(x)) or real(x))
    labels = rows_module.bytes_labels([a, b, a, a_copy, short, b, a])
    assert labels.tolist() == [0, 1, 0, 0, 4, 1, 0]
    # a, b and a_copy: each row given again is not hashed, nor is short, the only row of its length
    assert sorted(hashed) == [3] * 6
