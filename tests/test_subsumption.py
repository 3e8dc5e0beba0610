"""The asymmetric subsumption matrix S[i, j] = |A_i meet A_j| / |A_i| (Brendel 2013, 3.5):
hand-made traces with known answers, equality with a brute force over plain dicts, the
class-level and row-block paths, the stored matrices of an end-to-end analysis, and the
same HDF5 datasets on 1, 2 and 3 MPI ranks."""
import h5py
import numpy as np
import pytest

from difftrace_mpi.stages.classify.classes import compare_runs
from difftrace_mpi.stages.classify.lattice import Lattice
from difftrace_mpi.stages.classify.jsm import cross_subsumption, jaccard_direct, jaccard_subsumption_direct, jaccard_subsumption_rows, subsumption_direct

from conftest import EXAMPLES, h5_contents, run_cli, starts_processes


# --------------------------------------------------------------------------- brute force

def share(a, b):
    """Share of dict a's weight that dict b also has (sum of minima / total of a); 1 if a is empty."""
    total = sum(a.values())
    if total == 0:
        return 1.0
    return sum(min(w, b.get(k, 0)) for k, w in a.items()) / total


def brute(rows):
    return np.array([[share(a, b) for b in rows] for a in rows], dtype=np.float64)


def to_csr(rows):
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=indptr[1:])
    indices = np.array([k for r in rows for k in sorted(r)], dtype=np.int64)
    weights = np.array([r[k] for r in rows for k in sorted(r)], dtype=np.int64)
    return indptr, indices, weights


def as_pair(row):
    keys = sorted(row)
    return np.array(keys, dtype=np.int64), np.array([row[k] for k in keys], dtype=np.int64)


def as_dict(pair):
    codes, weights = pair
    return dict(zip(np.asarray(codes).tolist(), np.asarray(weights).tolist()))


OPEN, READ, CLOSE, WRITE, MMAP, COMPUTE = range(6)
WORKER = {OPEN: 1, READ: 3, CLOSE: 1, COMPUTE: 4}
LOGGER = {**WORKER, WRITE: 2}                          # the same work plus extra I/O
MAPPER = {OPEN: 1, MMAP: 2, CLOSE: 1, COMPUTE: 4}      # reads through mmap instead: different work
LONGER = {**WORKER, READ: 7}                           # more of the same (weights)
IDLE = {}                                               # an empty trace (missing, or all filtered)


# --------------------------------------------------------------------------- core

def test_more_work_versus_different_work():
    rows = [WORKER, LOGGER, MAPPER, LONGER, IDLE]
    w, lg, mp, ln, idle = range(5)
    S = subsumption_direct(*to_csr(rows))
    assert np.array_equal(S, brute(rows))
    assert (np.diag(S) == 1.0).all()
    # the logger does everything the worker does, and more: S[worker, logger] = 1 > S[logger, worker]
    assert S[w, lg] == 1.0 and S[lg, w] == 9 / 11
    # reading via mmap instead of read: different work, neither subsumes the other
    assert S[w, mp] == 6 / 9 and S[mp, w] == 6 / 8
    assert S[w, mp] < 1 and S[mp, w] < 1
    # more of the same under weights: the longer trace subsumes the worker, not the reverse
    assert S[w, ln] == 1.0 and S[ln, w] == 9 / 13
    # an empty trace is subsumed by anything; it subsumes only empty traces
    assert (S[idle] == 1.0).all() and (S[[w, lg, mp, ln], idle] == 0.0).all()
    # binary context (presence): the mmap reader still differs, the longer trace becomes equal
    Sb = subsumption_direct(*to_csr(rows)[:2])
    assert Sb[w, ln] == Sb[ln, w] == 1.0 and Sb[w, lg] == 1.0 and Sb[lg, w] == 4 / 5


@pytest.mark.parametrize("max_weight", [1, 5, 64, 65, 10**6])
def test_class_level_expanded_and_row_blocks_equal_brute_force(max_weight):
    rng = np.random.default_rng(max_weight)
    distinct = [{int(k): int(rng.integers(1, max_weight + 1)) for k in rng.choice(30, rng.integers(0, 9),
                                                                                   replace=False)}
                for _ in range(20)] + [{}]
    rows = [distinct[i] for i in rng.integers(0, len(distinct), 60)]      # with repeats: classes
    csr = to_csr(rows)
    expected = brute(rows)
    J, S = jaccard_subsumption_direct(*csr)
    assert np.array_equal(S, expected)
    assert np.array_equal(J, jaccard_direct(*csr))                        # the JSM is unchanged, bit for bit
    assert np.array_equal(subsumption_direct(*csr), expected)
    Jc, Sc, inverse = jaccard_subsumption_direct(*csr, expand=False)
    assert np.array_equal(Sc[np.ix_(inverse, inverse)], expected)
    jc_ref, inv_ref = jaccard_direct(*csr, expand=False)
    assert np.array_equal(Jc, jc_ref) and np.array_equal(inverse, inv_ref)
    # row blocks of the distinct rows (the MPI row-blocked path) equal the rows of the whole
    firsts = [int(np.flatnonzero(inverse == c)[0]) for c in range(Sc.shape[0])]
    ccsr = to_csr([rows[i] for i in firsts])
    n = Sc.shape[0]
    for lo, hi in ((0, n), (0, 3), (3, n - 1), (n - 1, n), (2, 2)):
        jr, sr = jaccard_subsumption_rows(*ccsr, lo, hi)
        assert np.array_equal(jr, Jc[lo:hi]) and np.array_equal(sr, Sc[lo:hi])


def test_cross_subsumption_against_brute_force():
    a = [LOGGER, MAPPER, IDLE, WORKER]
    b = [WORKER, LONGER, MAPPER, IDLE]
    a_in_b, b_in_a = cross_subsumption([as_pair(r) for r in a], [as_pair(r) for r in b])
    assert np.array_equal(a_in_b, np.array([[share(x, y) for y in b] for x in a]))
    assert np.array_equal(b_in_a, np.array([[share(y, x) for y in b] for x in a]))
    assert b_in_a[0, 0] == 1.0 and a_in_b[0, 0] < 1.0         # the logger holds all of the worker
    empty = cross_subsumption([], [as_pair(WORKER)])
    assert empty[0].shape == empty[1].shape == (0, 1)


def test_compare_runs_keeps_matrices_and_the_suspects_cross_view():
    """Normal: 4 workers and one mapper; faulty: trace 1 logs (more work), trace 3 maps
    (different work).  The block holds the class matrices, the N x N ones and, for the
    suspects, which normal classes their faulty rows subsume / are subsumed by."""
    normal = [WORKER, WORKER, WORKER, WORKER, MAPPER]
    faulty = [WORKER, LOGGER, WORKER, MAPPER, MAPPER]

    def classes(rows):
        distinct, class_of = [], []
        for r in rows:
            if r not in distinct:
                distinct.append(r)
            class_of.append(distinct.index(r))
        return [as_pair(r) for r in distinct], np.array(class_of, dtype=np.int64)
    unified = {"thread": [classes(normal), classes(faulty)]}
    (rows_n, class_n), (rows_f, class_f) = unified["thread"]
    jsms = {"thread": tuple(jaccard_direct(*to_csr([as_dict(r) for r in rs]), expand=False)[0]
                            for rs in (rows_n, rows_f))}
    # the matrices as _class_jsm makes them (with the JSMs), and from the S-only entry point
    given = {"thread": tuple(jaccard_subsumption_direct(*to_csr([as_dict(r) for r in rs]), expand=False)[1]
                             for rs in (rows_n, rows_f))}
    s_only = {"thread": tuple(subsumption_direct(*to_csr([as_dict(r) for r in rs]), expand=False)[0]
                              for rs in (rows_n, rows_f))}
    block = compare_runs(unified, jsms, 100, s_only)["thread"]
    block2 = compare_runs(unified, jsms, 100, given)["thread"]
    for run, rows, cls in ((0, normal, class_n), (1, faulty, class_f)):
        sc = block.subsumption_classes[run]
        assert np.array_equal(sc, block2.subsumption_classes[run])
        assert np.array_equal(sc[np.ix_(cls, cls)], brute(rows))
        assert np.array_equal((block.subsumption_normal, block.subsumption_faulty)[run], brute(rows))
    cross = block.subsumption_cross
    suspects = np.flatnonzero(block.suspect)
    assert 1 in suspects                                            # the logger is named
    assert cross["faulty_classes"].tolist() == sorted(set(class_f[suspects].tolist()))
    for k, c in enumerate(cross["faulty_classes"].tolist()):
        f = as_dict(rows_f[c])
        for name, test in (("subsumes", lambda n: share(n, f) == 1.0), ("subsumed_by", lambda n: share(f, n) == 1.0)):
            offsets, ids = cross[name]
            want = [j for j, r in enumerate(rows_n) if test(as_dict(r))]
            assert ids[offsets[k]:offsets[k + 1]].tolist() == want, (name, c)
        assert np.array_equal(cross["normal_in_faulty"][k], [share(as_dict(r), f) for r in rows_n])
        assert np.array_equal(cross["faulty_in_normal"][k], [share(f, as_dict(r)) for r in rows_n])
    logger = cross["faulty_classes"].tolist().index(class_f[1])
    offsets, ids = cross["subsumes"]
    assert ids[offsets[logger]:offsets[logger + 1]].tolist() == [class_n[0]]     # holds all of the workers
    offsets, ids = cross["subsumed_by"]
    assert offsets[logger + 1] == offsets[logger]                                # but no normal class holds it
    # above full_limit: class matrices and the lists, no N x N matrices or share rows
    small = compare_runs(unified, jsms, 2, given)["thread"]
    assert small.subsumption_normal is None and small.subsumption_classes is not None
    assert "normal_in_faulty" not in small.subsumption_cross and "subsumes" in small.subsumption_cross


# --------------------------------------------------------------------------- end to end


def stored_rows(group, n):
    """Each object's attribute row (as a dict), from the object concepts of a stored lattice."""
    from difftrace_mpi.h5tables import intents_whole
    lattice = Lattice.from_arrays(intents_whole({key: group[key][()] for key in group}))
    return [as_dict(lattice.intent(lattice.object_concept(o))) for o in range(n)]


def test_stored_matrices_equal_brute_force_over_the_stored_rows(swap_h5):
    with h5py.File(swap_h5, "r") as f:
        objects = list(zip(f["objects/rank"][()].tolist(), f["objects/thread"][()].tolist()))
        assert all(t == 0 for _, t in objects)        # one thread per process: process rows = thread rows
        n = len(objects)
        checked = 0
        for combo in f["combos"]:
            for aname, a in f[f"combos/{combo}/attributes"].items():
                rows = [stored_rows(a[f"lattice/{run}"], n) for run in ("normal", "faulty")]
                for level in ("thread", "process"):
                    g = a[level]
                    for run, label in enumerate(("normal", "faulty")):
                        expected = brute(rows[run])
                        assert np.array_equal(g[f"subsumption_{label}"][()], expected), (combo, aname, level)
                        cls = g[f"classes_{label}"][()]
                        sc = g[f"subsumption_classes_{label}"][()]
                        assert np.array_equal(sc[np.ix_(cls, cls)], expected)
                        assert (np.diag(sc) == 1.0).all()
                    # the suspects' cross view, from the stored rows
                    cross = g["subsumption_cross"]
                    cls_n, cls_f = g["classes_normal"][()], g["classes_faulty"][()]
                    first_n = [int(np.flatnonzero(cls_n == c)[0]) for c in range(cls_n.max() + 1)]
                    for k, c in enumerate(cross["faulty_classes"][()].tolist()):
                        frow = rows[1][int(np.flatnonzero(cls_f == c)[0])]
                        for name, test in (("subsumes", lambda r: share(r, frow) == 1.0),
                                           ("subsumed_by", lambda r: share(frow, r) == 1.0)):
                            off, ids = cross[f"{name}_offsets"][()], cross[name][()]
                            assert ids[off[k]:off[k + 1]].tolist() == [c2 for c2, o in enumerate(first_n)
                                                                       if test(rows[0][o])]
                    checked += 1
        assert checked == 16
        # rank 5 under 11.mpi sing.noFreq runs the normal loop and a new one: more work than every normal class
        g = f["combos/11.mpi.K10/attributes/sing.noFreq/thread"]
        s5 = g["subsumption_faulty"][()][5]
        sn = g["subsumption_normal"][()]
        assert (g["subsumption_faulty"][()][:, 5] == 1.0).all()   # everyone's faulty row is within rank 5's
        assert (s5[np.arange(16) != 5] < 1.0).all()              # rank 5 does more than any other
        assert (sn[:, 5] < 1.0).any()                             # in the normal run it did not
        cross = g["subsumption_cross"]
        assert cross["faulty_classes"][()].tolist() == [g["classes_faulty"][()][5]]
        assert cross["subsumes"][()].tolist() == [0, 1] and len(cross["subsumed_by"][()]) == 0


@pytest.fixture(scope="module")
@starts_processes
def one_rank_whole(tmp_path_factory):
    out = tmp_path_factory.mktemp("subrank") / "whole.h5"
    res = run_cli("analyze", EXAMPLES / "normal", EXAMPLES / "swapbug", "--out", out)
    assert res.returncode == 0, res.stderr
    return out


def subsumption_datasets(path):
    return {k: v for k, v in h5_contents(path).items() if "subsumption" in k}


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_rank_count_invariance_of_the_subsumption_datasets(one_rank_whole, tmp_path, ranks):
    """The row-blocked path (forced with --row-block-min 2; every rank computes JSM and
    subsumption rows) gives the same datasets as the whole matrices on one rank."""
    out = tmp_path / f"r{ranks}.h5"
    res = run_cli("analyze", EXAMPLES / "normal", EXAMPLES / "swapbug", "--out", out, "--row-block-min", "2",
                  mpi=ranks)
    assert res.returncode == 0, res.stderr
    assert f"MPI ranks used: {ranks}" in res.stdout
    want, got = subsumption_datasets(one_rank_whole), subsumption_datasets(out)
    assert want.keys() == got.keys() and len(want) == 8 * 2 * (4 + 7)   # settings x levels x datasets
    assert not [k for k in want if not np.array_equal(want[k], got[k])]
    with h5py.File(out, "r") as f:
        blocked = [k for k in f["timing"].attrs if k.startswith("JSM rows")]
    assert bool(blocked) == (ranks > 1)
