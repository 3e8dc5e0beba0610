"""Bounded concept lattices (stages.classify.lattice.bounded / merge_bounded, engine.lattices):
built on class representatives within the concept cap and a work budget, a stated
partial lattice beyond them, and the same lattice on any sharding and merge tree."""

import itertools

import numpy as np
import pytest

from difftrace_mpi.engine import lattices as tree
from difftrace_mpi.kernels import lattice as kernel
from difftrace_mpi.stages.classify import lattice as lat
from difftrace_mpi.stages.classify.classrows import ClassRows
from difftrace_mpi.stages.classify.lattice import Lattice, bounded, merge_bounded
from difftrace_mpi.stages.classify.rows import SparseRows


@pytest.fixture(autouse=True)
def no_floor(monkeypatch):
    monkeypatch.setattr(lat, "WORK_FLOOR", 0)     # small budgets, so that small contexts get cut


def rows_csr(rows, n_attrs):
    """A CSR matrix (SparseRows, what the pipeline's attribute steps make) of {attr: weight} dicts."""
    indptr, ind, wt = [0], [], []
    for r in rows:
        for a in sorted(r):
            ind.append(a)
            wt.append(r[a])
        indptr.append(len(ind))
    return SparseRows(np.array(indptr, dtype=np.int64), np.array(ind, dtype=np.int64),
                      np.array(wt, dtype=np.int64), n_attrs)


def exponential_rows(n, rng, repeats=2):
    """n objects with (about) 2^n concepts: each lacks one attribute; some intents repeat
    (classes of several objects) and weights vary."""
    rows = []
    for g in range(n):
        base = {a: 1 + (a * g) % 3 for a in range(n) if a != g}
        for _ in range(1 + int(rng.integers(0, repeats))):
            rows.append(dict(base))
    order = rng.permutation(len(rows))
    return [rows[i] for i in order]


def strict(rows, objs):
    """The complete lattice, object by object (no bound)."""
    L = Lattice(max_concepts=10**6)
    for g, r in zip(objs, rows):
        a = sorted(r)
        L.add_object(g, a, [r[x] for x in a])
    return L


def canonical_classes(rows, objs):
    """Classes (intent tuple, sorted objects) in canonical order: total weight, then the
    (attribute, weight) sequence."""
    groups = {}
    for g, r in zip(objs, rows):
        groups.setdefault(tuple(sorted(r.items())), []).append(g)
    key = lambda it: (sum(w for _, w in it), [x for pair in it for x in pair])
    return [(it, sorted(groups[it])) for it in sorted(groups, key=key)]


def same(a, b):
    x, y = a.to_arrays(), b.to_arrays()
    assert x.keys() == y.keys()
    for k in x:
        assert np.array_equal(x[k], y[k]), k
    assert a.coverage == b.coverage


def test_complete_when_small():
    rng = np.random.default_rng(1)
    rows = exponential_rows(5, rng)
    objs = np.arange(len(rows))
    L = bounded(rows_csr(rows, 5), obj_ids=objs, work_factor=10**6)
    assert L.coverage is None and not L.partial
    assert L == strict(rows, objs)
    assert "coverage" not in L.to_arrays() and L.to_arrays()["meta"][0] == 1


@pytest.mark.parametrize("factor,cap", [(2, 10**6), (4, 10**6), (8, 10**6), (10**6, 40), (10**6, 1), (3, 60)])
def test_partial_is_the_lattice_of_a_canonical_prefix(factor, cap):
    rng = np.random.default_rng(factor + cap)
    rows = exponential_rows(9, rng)
    objs = np.arange(100, 100 + len(rows))
    L = bounded(rows_csr(rows, 9), obj_ids=objs, max_concepts=cap, work_factor=factor)
    cov = L.coverage
    assert cov is not None
    classes = canonical_classes(rows, objs)
    budget = lat.work_budget(sum(1 + len(it) for it, _ in classes), factor)
    assert cov.classes_total == len(classes) and cov.objects_total == len(rows)
    assert cov.work_budget == budget and cov.work_factor == factor and cov.max_concepts == cap
    kept = classes[:cov.classes]
    pre_rows = [dict(it) for it, members in kept for _ in members]
    pre_objs = [g for _, members in kept for g in members]
    assert cov.objects == len(pre_objs)
    ref = strict(pre_rows, pre_objs)
    assert np.array_equal(L.object_ids(), ref.object_ids())
    for k, v in ref.to_arrays().items():
        if k != "meta":
            assert np.array_equal(L.to_arrays()[k], v), k
    assert L.work <= budget and L.n_concepts <= cap
    # the next class would exceed the limit the coverage names (and only the work
    # budget if that one is exceeded)
    it, members = classes[cov.classes]
    nxt = strict(pre_rows + [dict(it)] * len(members), pre_objs + members)
    assert (nxt.work > budget) == (cov.limit == "work")
    if cov.limit == "concepts":
        assert nxt.n_concepts > cap
    assert f"partial: {cov.classes} of {cov.classes_total} classes" in cov.describe()
    assert repr(L).endswith(f"partial: {cov.classes} of {cov.classes_total} classes>")


def binomial(parts, combine):
    step = 1
    while step < len(parts):
        for i in range(0, len(parts) - step, 2 * step):
            parts[i] = combine(parts[i], parts[i + step])
        step *= 2
    return parts[0]


@pytest.mark.parametrize("ranks", [2, 3, 4, 5])
@pytest.mark.parametrize("factor,cap", [(3, 10**6), (6, 10**6), (10**6, 10**6), (10**6, 50), (4, 90)])
def test_any_sharding_gives_the_one_rank_lattice(ranks, factor, cap, monkeypatch):
    """Random shards, each shard's part as the pipeline makes it (``local_lattice``: a
    complete lattice where the trial affords it, else its classes) and as a bounded
    lattice, complete or partial; binomial tree through pack/unpack (as between MPI ranks)
    and the tree root's ``finish``: the root's lattice and coverage equal the one-rank
    build."""
    from difftrace_mpi import config
    monkeypatch.setattr(config, "LATTICE_WORK_FACTOR", factor)
    rng = np.random.default_rng(ranks * 1000 + factor % 97 + cap % 89)
    kinds = set()
    for trial in range(3):
        rows = exponential_rows(8, rng, repeats=3)
        m = rows_csr(rows, 8)
        objs = np.arange(len(rows), dtype=np.int64) * 3 + 7
        whole = bounded(m, obj_ids=objs, max_concepts=cap, work_factor=factor)
        shard = rng.integers(0, ranks, len(rows))
        shard[:ranks] = np.arange(ranks)           # no rank without traces ...
        if trial == 2:
            shard[shard == ranks - 1] = 0          # ... except in one trial
        parts, local = [], []
        for r in range(ranks):
            sel = shard == r
            parts.append(bounded(*tree.selected_rows(m, sel), objs[sel], max_concepts=cap, work_factor=factor))
            local.append(tree.local_lattice(m, sel, objs, cap, shards=ranks))
            kinds.add(type(local[-1]).__name__)
        for shards in (parts, local):
            root = binomial([tree.unpack(tree.pack(p)) for p in shards],
                            lambda a, b: tree.merge(a, tree.unpack(tree.pack(b))))
            same(Lattice.from_arrays(tree.finish(root).load()), whole)     # the stored form, rebuilt
        # and merged without the MPI packing, in another tree
        alt = parts[::-1]
        for p in alt[1:]:
            alt[0] = merge_bounded(alt[0], p)
        same(alt[0], whole)
    if factor >= 10**6 and cap >= 10**6:
        assert kinds == {"Lattice"}         # a trial that affords every lattice keeps it
    if factor <= 6:
        assert "Classes" in kinds           # a tight budget: some shard's classes travel


def test_local_lattice_uses_the_config_factor(monkeypatch):
    from difftrace_mpi import config
    rng = np.random.default_rng(5)
    rows = exponential_rows(8, rng)
    m = rows_csr(rows, 8)
    objs = np.arange(len(rows), dtype=np.int64)
    sel = np.ones(len(rows), dtype=bool)
    monkeypatch.setattr(config, "LATTICE_WORK_FACTOR", 3)
    L = tree.local_lattice(m, sel, objs, 10**6)
    assert L.coverage is not None and L.coverage.work_factor == 3
    same(L, bounded(m, obj_ids=objs, max_concepts=10**6, work_factor=3))


def test_partial_round_trip_and_formats(tmp_path):
    import h5py
    rng = np.random.default_rng(3)
    rows = exponential_rows(8, rng)
    L = bounded(rows_csr(rows, 8), work_factor=3)
    arrs = L.to_arrays()
    assert arrs["meta"].tolist() == [lat.PARTIAL_FORMAT, L.max_concepts]
    assert arrs["coverage"].tolist()[:4] == [L.coverage.classes, L.coverage.classes_total,
                                             L.coverage.objects, L.coverage.objects_total]
    with h5py.File(tmp_path / "l.h5", "w") as f:
        g = f.create_group("lattice")
        for k, v in arrs.items():
            g[k] = v
    with h5py.File(tmp_path / "l.h5", "r") as f:
        back = Lattice.from_arrays(f["lattice"])
    same(back, L)
    assert back.partial and back.coverage.describe() == L.coverage.describe()
    bad = dict(arrs)
    del bad["coverage"]
    with pytest.raises(ValueError, match="coverage"):
        Lattice.from_arrays(bad)
    with pytest.raises(ValueError, match="no more objects"):
        back.add_object(10**6, [1])
    with pytest.raises(ValueError, match="merge_bounded"):
        lat.merge(back, Lattice())


def test_a_stopped_insertion_is_undone():
    """The kernel undoes an insertion a limit stops: the lattice is bit for bit the one
    before, and the status code says which limit (no exception, no user wording)."""
    attrs = np.arange(10)
    core = kernel.LatticeCore(10**6)
    for g in range(6):
        a = np.delete(attrs, g).astype(np.int64)
        assert core.add_class(a, np.ones(len(a), dtype=np.int64), np.array([g], dtype=np.int64)) >= 0
    before = core.export(core.canonical_order())
    work, n = core.work, core.n_concepts
    for cap, budget, code in [(n + 3, kernel.NO_LIMIT, kernel.TRIP_CONCEPTS), (10**6, work + 20, kernel.TRIP_WORK)]:
        core.set_max_concepts(cap)
        core.set_max_work(budget)
        a = np.delete(attrs, 7).astype(np.int64)
        assert core.add_class(a, np.ones(len(a), dtype=np.int64), np.array([7], dtype=np.int64)) == -1
        assert core.trip == code
        after = core.export(core.canonical_order())
        assert all(np.array_equal(before[k], after[k]) for k in before)
        assert core.work == work and core.n_concepts == n and core.object_concept(7) == -1
    core.set_max_concepts(10**6)
    core.set_max_work(kernel.NO_LIMIT)
    a = np.delete(attrs, 7).astype(np.int64)
    assert core.add_class(a, np.ones(len(a), dtype=np.int64), np.array([7], dtype=np.int64)) >= 0
    assert core.trip == kernel.TRIP_NONE and core.n_concepts == 2 ** 7


def test_kernel_has_no_user_wording():
    from pathlib import Path
    src = Path(kernel.__file__).with_name("lattice.pyx").read_text()
    assert "--max-concepts" not in src and "LatticeTooLarge" not in src


def test_work_is_monotone_in_the_classes():
    """The property the tree merge rests on: adding a class never lowers the work or the
    concept count of the lattice (checked on every prefix of random contexts)."""
    rng = np.random.default_rng(11)
    for _ in range(20):
        n = int(rng.integers(3, 9))
        rows = [{int(a): int(rng.integers(1, 4)) for a in rng.choice(8, int(rng.integers(0, 8)), replace=False)}
                for _ in range(n)]
        for perm in itertools.islice(itertools.permutations(range(n)), 5):
            L, last = Lattice(), (0, 0)
            for g in perm:
                a = sorted(rows[g])
                L.add_object(g, a, [rows[g][x] for x in a])
                assert (L.work, L.n_concepts) >= last and L.work >= last[0] and L.n_concepts >= last[1]
                last = (L.work, L.n_concepts)


@pytest.mark.integration
def test_bench_bounded_section_smoke():
    import os
    import subprocess
    import sys
    from pathlib import Path
    bench = Path(__file__).resolve().parents[1] / "bench" / "bench_lattice.py"
    out = subprocess.run([sys.executable, str(bench), "--sizes", "100", "--repeat", "1", "--no-baseline",
                          "--bounded", "20", "--bounded-cap", "3000"], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    assert "bounded build:" in out.stdout and "partial:" in out.stdout, out.stdout
    assert out.stdout.count("equal to the one-shard build: OK") == 3, out.stdout


@pytest.mark.integration
@pytest.mark.parametrize("flags", [["--max-concepts", "6"], []])
def test_partial_lattices_alike_on_1_2_and_3_ranks(tmp_path, flags):
    """analyze under mpiexec -n 1, 2, 3: the same lattices (complete or partial, with the
    same coverage) in the results file; with a cap some lattices exceed, they are partial
    (stated, never skipped) and the report says so."""
    import h5py
    from conftest import EXAMPLES, assert_same_h5, run_cli
    outs = []
    for ranks in (1, 2, 3):
        out = tmp_path / f"r{ranks}.h5"
        res = run_cli("analyze", EXAMPLES / "normal", EXAMPLES / "dlbug", *flags, "--out", out, mpi=ranks)
        assert res.returncode == 0, res.stderr
        outs.append(out)
    assert_same_h5(outs[0], outs[1])
    assert_same_h5(outs[0], outs[2])
    with h5py.File(outs[2], "r") as f:
        groups = []
        f.visititems(lambda name, obj: groups.append(obj) if name.endswith(("lattice/normal", "lattice/faulty"))
                     else None)
        assert groups and not any("skipped" in g.attrs for g in groups)
        partial = [g for g in groups if "coverage" in g]
        assert bool(partial) == bool(flags)
        for g in partial:
            cov = g["coverage"][()]
            assert g["meta"][0] == 2 and 0 < cov[0] < cov[1] and cov[4] == 1   # the cap stopped it
            assert np.diff(g["intent_added_indptr"][()]).size <= 6
    if flags:
        page = tmp_path / "r.html"
        res = run_cli("report", outs[0], "-o", page)
        assert res.returncode == 0, res.stderr
        assert "partial: " in page.read_text() and "--max-concepts" in page.read_text()


def test_first_equal_rows_and_class_representatives():
    rng = np.random.default_rng(8)
    protos = [{int(a): int(rng.integers(1, 4)) for a in rng.choice(30, int(rng.integers(0, 12)), replace=False)}
              for _ in range(7)]
    rows = [dict(protos[int(i)]) for i in rng.integers(0, 7, 300)]
    m = rows_csr(rows, 30)
    first = kernel.csr_first_equal(m.indptr.astype(np.int64), m.indices.astype(np.int64), m.data.astype(np.int64))
    seen = {}
    expect = [seen.setdefault(tuple(sorted(r.items())), i) for i, r in enumerate(rows)]
    assert first.tolist() == expect
    objs = rng.permutation(1000)[:300].astype(np.int64)
    cl = ClassRows.from_rows(m.indptr.astype(np.int64), m.indices.astype(np.int64), m.data.astype(np.int64), objs)
    want = canonical_classes(rows, objs.tolist())
    assert len(cl) == len(want)
    for r, (it, members) in enumerate(want):
        a, w = cl.row(r)
        assert tuple(zip(a.tolist(), w.tolist())) == it
        assert cl.objs[cl.optr[r]:cl.optr[r + 1]].tolist() == members


def _classes(rows, n_attrs):
    m = rows_csr(rows, n_attrs)
    return ClassRows.from_rows(m.indptr, m.indices, m.data, np.arange(len(rows)))


def test_a_trial_stops_early_where_its_pace_passes_the_budget_and_only_there():
    """``_grown``'s checks (what ``complete_within``'s trials use): classes that each cost
    about as much as the last stop long before the budget would stop them; a build that
    fits its budget never stops early, not even after an expensive head (a powerset-like
    family of light intents) followed by a cheap chain, which the pace of the whole way
    alone would stop."""
    rng = np.random.default_rng(5)
    steady = _classes([{int(a): 1 for a in rng.choice(40, 6, replace=False)} for _ in range(300)], 40)
    full = lat._grown(steady, 10**6, 10**12)[0].work
    plain = lat._grown(steady, 10**6, full // 4)[1]
    paced = lat._grown(steady, 10**6, full // 4, lat.TRIAL_CHECKS)[1]
    assert 0 < paced < plain // 2 and plain < len(steady)
    assert lat._grown(steady, 10**6, full, lat.TRIAL_CHECKS)[1] == len(steady)

    head = [{a: 1 for a in range(10) if a != g} for g in range(10)]
    chain = [{a: 1 for a in range(10 + j)} for j in range(1, 201)]
    uneven = _classes(head + chain, 210)
    lattice, taken = lat._grown(uneven, 10**6, 2 * uneven.size(), lat.TRIAL_CHECKS)
    assert taken == len(uneven) and lattice.work <= 2 * uneven.size()
    trial = lat.complete_within(uneven, 10**6, 2, 1)
    assert trial is not None and trial == lat.build(uneven, 10**6, 2) and not trial.partial
