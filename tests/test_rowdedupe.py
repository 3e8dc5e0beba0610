"""Exact dedupe of CSR rows and the global class numbering (csr_rows.row_labels,
_dedupe, _unify) against the plain dict-of-bytes procedure, with hash collisions forced."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from difftrace_mpi.stages import classes as A
from difftrace_mpi.stages import rows as R

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
            indptr, indices, values, members = part
            assert len(indptr) - 1 == len(set(tuple(r) for r in local))      # merged on the rank
            for (run, obj, u) in members.tolist():
                got = list(zip(indices[indptr[u]:indptr[u + 1]].tolist(), values[indptr[u]:indptr[u + 1]].tolist()))
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
