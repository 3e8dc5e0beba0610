"""NLR kernel and global loop ids."""
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import ROOT
from difftrace_mpi.stages.model import nlr
from difftrace_mpi.kernels.nlr import LoopTable, expand, match_returns
from difftrace_mpi.kernels.nlr import nlr as nlr_kernel

sys.path.insert(0, str(ROOT / "bench"))
from bench_kernels import py_nlr as reference_nlr  # noqa: E402  (Procedure 1 as written)

INIT, RANK, SIZE, SEND, RECV, FIN = 1, 2, 3, 4, 5, 6
NAMES = ["<return>", "MPI_Init", "MPI_Comm_rank", "MPI_Comm_size", "MPI_Send", "MPI_Recv", "MPI_Finalize"]


def oddeven_traces(n):
    """MPI-only odd/even sort traces of n processes (paper Table II)."""
    out = []
    for rank in range(n):
        exchanges = n // 2 if rank in (0, n - 1) else n
        body = [SEND, RECV] if rank % 2 == 0 else [RECV, SEND]
        out.append([INIT, RANK, SIZE] + body * exchanges + [FIN])
    return out


def labels(traces, k=10, order=None):
    nlrs, table = nlr.reduce_all([np.array(t) for t in traces], k, order)
    return [nlr.token_labels(x, NAMES) for x in nlrs], nlr.loop_bodies(table, NAMES)


def test_paper_table_iii():
    # Table III has L0^2, L1^4, L0^4, L1^2 for 4 processes (traces of 4 and 2 exchanges)
    traces = [[INIT, RANK, SIZE] + ([SEND, RECV] if r % 2 == 0 else [RECV, SEND]) * (2 if r in (0, 3) else 4) + [FIN]
              for r in range(4)]
    got, bodies = labels(traces)
    head = ["MPI_Init", "MPI_Comm_rank", "MPI_Comm_size"]
    assert got == [head + ["L0^2", "MPI_Finalize"], head + ["L1^4", "MPI_Finalize"],
                   head + ["L0^4", "MPI_Finalize"], head + ["L1^2", "MPI_Finalize"]]
    assert bodies == {"L0": ["MPI_Send", "MPI_Recv"], "L1": ["MPI_Recv", "MPI_Send"]}


def test_two_repetitions_alone_are_not_a_loop():
    got, bodies = labels([[INIT, SEND, RECV, SEND, RECV, FIN]])
    assert got == [["MPI_Init", "MPI_Send", "MPI_Recv", "MPI_Send", "MPI_Recv", "MPI_Finalize"]]
    assert bodies == {}


def test_swapbug_rank5_shape():
    trace = [INIT, RANK, SIZE] + [RECV, SEND] * 7 + [SEND, RECV] * 9 + [FIN]
    got, bodies = labels(oddeven_traces(16) + [trace])
    assert got[-1] == ["MPI_Init", "MPI_Comm_rank", "MPI_Comm_size", "L1^7", "L0^9", "MPI_Finalize"]
    assert got[5] == ["MPI_Init", "MPI_Comm_rank", "MPI_Comm_size", "L1^16", "MPI_Finalize"]


def test_nested_loops_and_equal_counts_rule():
    # (a b^3 c)^4 : inner loop b^3, outer loop over [a, L^3, c]
    inner = [1, 2, 2, 2, 3]
    got, bodies = labels([inner * 4])
    assert got == [["L1^4"]]
    assert bodies == {"L0": ["MPI_Comm_rank"], "L1": ["MPI_Init", "L0^3", "MPI_Comm_size"]}
    # inner counts differ between iterations: no outer loop over unequal elements
    got, _ = labels([[1, 2, 2, 2, 3, 1, 2, 2, 2, 2, 3, 1, 2, 2, 2, 3]])
    assert got == [["MPI_Init", "L0^3", "MPI_Comm_size", "MPI_Init", "L0^4", "MPI_Comm_size",
                    "MPI_Init", "L0^3", "MPI_Comm_size"]]


def test_k_bounds_body_length():
    body = list(range(1, 7))           # 6 distinct functions
    names = ["<return>"] + [f"f{i}" for i in range(1, 7)]
    nlrs, table = nlr.reduce_all([np.array(body * 5)], 10)
    assert nlr.token_labels(nlrs[0], names) == ["L0^5"]
    nlrs, table = nlr.reduce_all([np.array(body * 5)], 6)    # new loops have bodies <= K-1
    assert len(table) == 0 and len(nlrs[0]) == 30


def test_loop_ids_do_not_depend_on_sharding():
    traces = oddeven_traces(8) + [[INIT] + [7, 8, 9] * 5 + [RECV, SEND] * 3 + [FIN]]
    seqs = [np.array(t) for t in traces]
    whole, table = nlr.reduce_all(seqs, 10)
    # simulate two ranks: each discovers its half, unions keys, reduces its half
    halves = [[0, 2, 4, 6, 8], [1, 3, 5, 7]]
    found = [nlr.discover([seqs[i] for i in h], 10) for h in halves]
    known = set().union(*(d.found_keys() for d in found))
    first, parts = {}, []
    for h, d in zip(halves, found):
        nl, tab = nlr.reduce_with_known(d, lambda i: seqs[h[i]], 10, known)
        parts.append((h, nl, tab))
        for key, where in nlr.first_appearances(nl, h, tab).items():
            first[key] = min(first.get(key, where), where)
    ids = nlr.assign_loop_ids(first)
    for h, nl, tab in parts:
        for i, x in zip(h, nlr.relabel(nl, tab, ids)):
            assert np.array_equal(x.ids, whole[i].ids) and np.array_equal(x.counts, whole[i].counts)
    assert [table.body(i)[0].tolist() for i in range(len(table))] == \
           [nlr.global_table(ids).body(i)[0].tolist() for i in range(len(table))]


def canonical_tokens(nl, table):
    keys = nlr.canonical_keys(table)
    return [str(i) if i >= 0 else f"({keys[-i - 1]})^{c}" for i, c in zip(nl.ids.tolist(), nl.counts.tolist())]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=1, max_size=4), min_size=1, max_size=12),
                min_size=1, max_size=4),
       st.lists(st.integers(1, 5), min_size=1, max_size=12), st.integers(2, 8))
def test_second_pass_only_where_a_known_pair_is_met(traces, reps, k):
    """Keeping the pass-1 NLR of traces whose recorded pair bodies are all unknown gives
    exactly what reducing every trace again with the known bodies gives."""
    seqs = [np.array([x for b, r in zip(blocks, reps) for _ in range(r) for x in b], dtype=np.int64)
            for blocks in traces]
    discovery = nlr.discover(seqs, k)
    known = discovery.found_keys()
    fast, fast_table = nlr.reduce_with_known(discovery, seqs.__getitem__, k, known)
    full_table, _ = nlr.table_from_keys(sorted(known), known=True)
    full = [nlr.NLR(*nlr_kernel(seq, k, full_table, True)) for seq in seqs]
    assert [canonical_tokens(x, fast_table) for x in fast] == [canonical_tokens(x, full_table) for x in full]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=1, max_size=4), min_size=1, max_size=12),
       st.lists(st.integers(1, 5), min_size=1, max_size=12), st.lists(st.integers(1, 4), max_size=30),
       st.integers(0, 60), st.integers(0, 60), st.integers(2, 8), st.booleans())
def test_resuming_from_a_twins_prefix_changes_nothing(blocks, reps, tail, cut, cut2, k, third):
    """Sequences that start from an earlier one's state after their common prefix (faulty
    traces after their first difference; two of them from one normal trace) get the NLRs
    they get from the beginning, in both passes, whichever of them needs a second pass."""
    normal = np.array([x for b, r in zip(blocks, reps) for _ in range(r) for x in b], dtype=np.int64)
    cut, cut2 = min(cut, len(normal)), min(cut2, len(normal))
    faulty = np.concatenate([normal[:cut], np.array(tail, dtype=np.int64)])
    other = np.concatenate([normal[:cut2], np.array(tail[::-1], dtype=np.int64)])
    seqs = [normal, faulty] + ([np.array([2, 3] * 3 + [4, 1] * 3, dtype=np.int64)] if third else []) + [other]
    assert_passes_as_from_the_start(seqs, k, {1: (0, cut), len(seqs) - 1: (0, cut2)})


def assert_passes_as_from_the_start(seqs, k, resume):
    """Both passes with ``resume`` find the bodies and give the NLRs of a run without any
    resuming: each sequence's second pass, from its start, over the same known bodies."""
    discovery = nlr.discover(seqs, k, resume=resume)
    known = discovery.found_keys()
    fast, fast_table = nlr.reduce_with_known(discovery, seqs.__getitem__, k, known)
    full_table, _ = nlr.table_from_keys(sorted(known), known=True)
    full = [nlr.NLR(*nlr_kernel(seq, k, full_table, True)) for seq in seqs]
    assert known == nlr.discover(seqs, k).found_keys()
    assert [canonical_tokens(x, fast_table) for x in fast] == [canonical_tokens(x, full_table) for x in full]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=1, max_size=4), min_size=1, max_size=12),
       st.lists(st.integers(1, 5), min_size=1, max_size=12), st.lists(st.integers(1, 4), max_size=20),
       st.integers(0, 60), st.integers(0, 60), st.integers(2, 8))
def test_resuming_through_a_chain_of_prefixes_changes_nothing(blocks, reps, tail, cut, at, k):
    """A normal trace cut short (a prefix), the faulty trace of its object whole (resuming
    from it), and another faulty trace sharing an earlier prefix with that one: the state
    it needs lies before where its source resumed, so it resumes from the source's source
    (``resolved``).  Every NLR is the one reduced from the beginning, in both passes."""
    whole = np.array([x for b, r in zip(blocks, reps) for _ in range(r) for x in b], dtype=np.int64)
    cut, at = min(cut, len(whole)), min(at, len(whole))
    seqs = [whole[:cut], whole, np.concatenate([whole[:at], np.array(tail, dtype=np.int64)])]
    resume = {1: (0, cut), 2: (1, at)}
    assert nlr.resolved(resume)[2] == ((0, at) if at < cut else (1, at))
    assert_passes_as_from_the_start(seqs, k, resume)


def test_recorded_pair_forces_the_second_pass():
    # trace 0 makes [4 5] a loop; trace 1 holds [4 5] twice only: pass 1 leaves it flat,
    # the known body must turn it into L^2
    seqs = [np.array([4, 5] * 3, dtype=np.int64), np.array([1, 4, 5, 4, 5, 6], dtype=np.int64)]
    discovery = nlr.discover(seqs, 10)
    assert [len(x) for x in discovery.nlrs] == [1, 6] and discovery.pairs[1]
    nlrs, table = nlr.reduce_with_known(discovery, seqs.__getitem__, 10, discovery.found_keys())
    assert canonical_tokens(nlrs[1], table) == ["1", "(4,5)^2", "6"]


def test_pass_one_stops_recording_and_the_nlrs_do_not_change(monkeypatch):
    """Once most recorded sequences of a shard hold a pair whose body the shard found, pass
    1 records no more pairs and pass 2 reduces the rest again: the same NLRs as when every
    sequence is recorded, and as the second pass of each sequence alone."""
    # each: L(4,5)^3, then [4 5] twice (a pair of a body already found), then its own tail
    seqs = [np.array([4, 5] * 3 + [9] + [4, 5] * 2 + [9] + [7 + i % 3] * i, dtype=np.int64) for i in range(5)]
    discovery = nlr.discover(seqs, 10)
    assert all(p is not None and p for p in discovery.pairs[:2]) and all(p is None for p in discovery.pairs[2:])
    known = discovery.found_keys()
    stopped, table = nlr.reduce_with_known(discovery, seqs.__getitem__, 10, known)
    # a sequence resuming from one left unrecorded: no prefix state is kept for it (its
    # source is reduced again in pass 2 and gives the state again); the NLRs stay
    twin = np.concatenate([seqs[3][:13], np.array([4, 5, 4, 5, 1], dtype=np.int64)])
    chained = seqs + [twin]
    discovery = nlr.discover(chained, 10, resume={5: (3, 13)})
    assert discovery.pairs[3] is None and 5 not in discovery.prefix_states
    chained_known = discovery.found_keys()
    got, chained_table = nlr.reduce_with_known(discovery, chained.__getitem__, 10, chained_known)
    chained_full, _ = nlr.table_from_keys(sorted(chained_known), known=True)
    assert [canonical_tokens(x, chained_table) for x in got] == \
        [canonical_tokens(nlr.NLR(*nlr_kernel(seq, 10, chained_full, True)), chained_full) for seq in chained]
    monkeypatch.setattr(nlr._Recording, "saw", lambda self, pairs, table: None)     # records every one
    everywhere = nlr.discover(seqs, 10)
    assert all(p is not None for p in everywhere.pairs) and everywhere.found_keys() == known
    recorded, table2 = nlr.reduce_with_known(everywhere, seqs.__getitem__, 10, known)
    full_table, _ = nlr.table_from_keys(sorted(known), known=True)
    alone = [nlr.NLR(*nlr_kernel(seq, 10, full_table, True)) for seq in seqs]
    assert [canonical_tokens(x, table) for x in stopped] == [canonical_tokens(x, table2) for x in recorded] \
        == [canonical_tokens(x, full_table) for x in alone]
    assert canonical_tokens(stopped[3], table)[:4] == ["(4,5)^3", "9", "(4,5)^2", "9"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 4), max_size=200), st.integers(2, 12))
def test_expand_inverts_nlr(seq, k):
    table = LoopTable()
    arr = np.array(seq, dtype=np.int64)
    ids, counts = nlr_kernel(arr, k, table)
    assert np.array_equal(expand(ids, counts, table), arr)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=4), min_size=1, max_size=30),
       st.lists(st.integers(1, 6), min_size=1, max_size=30))
def test_expand_inverts_global_two_pass(blocks, reps):
    seq = np.array([x for b, r in zip(blocks, reps) for _ in range(r) for x in b], dtype=np.int64)
    nlrs, table = nlr.reduce_all([seq, seq[::-1].copy()], 5)
    assert np.array_equal(expand(nlrs[0].ids, nlrs[0].counts, table), seq)
    assert np.array_equal(expand(nlrs[1].ids, nlrs[1].counts, table), seq[::-1])


def test_canonical_keys_round_trip():
    table = LoopTable()
    nlr_kernel(np.array([1, 2, 2, 2, 3] * 4, dtype=np.int64), 10, table)
    keys = nlr.canonical_keys(table)
    rebuilt, number = nlr.table_from_keys(keys)
    assert nlr.canonical_keys(rebuilt) == keys
    assert keys == ["2", "1,(2)^3,3"]


def test_match_returns():
    ev = np.array([1, 2, 0, 3, 0, 0, 0, 4], dtype=np.int32)
    assert match_returns(ev).tolist() == [1, 2, 2, 3, 3, 1, -1, 4]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=5), min_size=1, max_size=25),
       st.lists(st.integers(1, 7), min_size=1, max_size=25), st.integers(2, 9),
       st.sampled_from([np.int32, np.int64]))
def test_kernel_equals_reference_procedure(blocks, reps, k, dtype):
    """Also for int32 input, which the kernel reads without an int64 copy."""
    seq = [x for b, r in zip(blocks, reps) for _ in range(r) for x in b]
    table = LoopTable()
    ids, counts = nlr_kernel(np.array(seq, dtype=dtype), k, table)
    stack, bodies = reference_nlr(seq, k)
    assert list(zip(ids.tolist(), counts.tolist())) == stack
    assert [tuple(zip(*table.body(i))) for i in range(len(table))] == \
           [tuple((int(a), int(c)) for a, c in body) for body in bodies]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=4), min_size=1, max_size=25),
       st.lists(st.integers(1, 5), min_size=1, max_size=25), st.integers(2, 8),
       st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=3), max_size=4))
def test_kernel_with_known_bodies_equals_reference(blocks, reps, k, known_lists):
    seq = [x for b, r in zip(blocks, reps) for _ in range(r) for x in b]
    known = []
    for body in known_lists:
        entry = tuple((x, 1) for x in body)
        if entry not in known and len(entry) <= k - 1:
            known.append(entry)
    table = LoopTable()
    for body in known:
        table.add_body([x for x, _ in body], [c for _, c in body], known=True)
    ids, counts = nlr_kernel(np.array(seq, dtype=np.int64), k, table, True)
    stack, bodies = reference_nlr(seq, k, known)
    assert list(zip(ids.tolist(), counts.tolist())) == stack
    assert len(table) == len(bodies)


def test_relabel_loops_matches_numpy_and_checks_the_mapping():
    """The C relabelling equals the numpy form on int64 NLRs, falls back to numpy for
    other arrays, and refuses a loop id beyond the mapping."""
    from difftrace_mpi.kernels.nlr import relabel_loops
    from difftrace_mpi.stages.model.nlr import NLR
    rng = np.random.default_rng(5)
    mapping = rng.permutation(7).astype(np.int64)
    nlrs = [NLR(rng.integers(-7, 9, int(rng.integers(0, 30))).astype(np.int64), np.ones(0)) for _ in range(40)]
    nlrs.append(NLR(np.array([-1, 3, -7], dtype=np.int32), np.ones(3)))         # not int64: numpy path
    expected = [np.where(nl.ids < 0, -mapping[np.maximum(-nl.ids - 1, 0)] - 1, nl.ids) for nl in nlrs]
    relabel_loops(nlrs, mapping)
    assert all(np.array_equal(nl.ids, e) for nl, e in zip(nlrs, expected))
    with pytest.raises(IndexError):
        relabel_loops([NLR(np.array([2, -8], dtype=np.int64), np.ones(2))], mapping)
    with pytest.raises(IndexError):
        relabel_loops([NLR(np.array([2, -8], dtype=np.int32), np.ones(2))], mapping)


# ---- the fast kernel against the first one (nlr_reference) -------------------------------
# nlr runs a packed stack with period runs (K <= 17) or a tag scan (K <= 22), a loop fast
# path that folds whole copies of a loop's body into its count, and C-side pair and body
# sets; nlr_reference is the kernel as first written.  Everything either returns must agree:
# the NLR, the table, the recorded pairs, the snapshots, and runs resumed from them.

from difftrace_mpi.kernels.nlr import nlr_reference  # noqa: E402


def _both_kernels(seq, k, mode, known=(), snapshots=None):
    """(fast, reference) results of one run: mode "plain", "pairs" (pass 1: record pairs,
    take snapshots, then resume from each) or "known" (pass 2 over a table of known bodies)."""
    results = []
    for kernel in (nlr_kernel, nlr_reference):
        table = LoopTable()
        for ids, counts in known:
            table.add_body(ids, counts, known=True)
        got = {}
        if mode == "plain":
            got["out"] = kernel(seq, k, table)
        elif mode == "known":
            got["out"] = kernel(seq, k, table, True)
        else:
            seen = set()
            out = kernel(seq, k, table, False, seen, 0, None, snapshots or [])
            got["out"], got["seen"] = out[:2], seen
            got["states"] = {p: (s[0].tolist(), s[1].tolist(), s[2], s[3]) for p, s in out[2].items()}
            resumed = {}
            for p, state in out[2].items():
                again = LoopTable()
                for i in range(len(table)):
                    again.add_body(*table.body(i))
                seen2 = set(state[2])
                ids, counts = kernel(seq, k, again, False, seen2, p, state)
                resumed[p] = (ids.tolist(), counts.tolist(), seen2)
            got["resumed"] = resumed
        got["out"] = (got["out"][0].tolist(), got["out"][1].tolist())
        got["table"] = [tuple(x.tolist() for x in table.body(i)) for i in range(len(table))]
        results.append(got)
    return results


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=6), min_size=1, max_size=20),
       st.lists(st.integers(1, 12), min_size=1, max_size=20), st.integers(2, 24),
       st.sampled_from(["plain", "pairs", "known"]), st.lists(st.integers(0, 400), max_size=3),
       st.sampled_from([np.int32, np.int64]))
def test_fast_kernel_equals_first_kernel(blocks, reps, k, mode, snaps, dtype):
    """K up to 24 covers the period runs (K <= 17), the tag scan (18..22) and the
    fallback (23, 24); repeated blocks in shifting contexts exercise the loop fast path
    (loops below the top with the same body, bodies with squares or cubes)."""
    seq = np.array([x for b, r in zip(blocks, reps) for _ in range(r) for x in b], dtype=dtype)
    snaps = sorted({min(s, len(seq)) for s in snaps})
    known = []
    if mode == "known":     # the bodies a pass 1 over the sequence finds, known
        table = LoopTable()
        nlr_kernel(seq, k, table)
        known = [table.body(i) for i in range(len(table))]
    fast, ref = _both_kernels(seq, k, mode, known, snaps)
    assert fast == ref


@pytest.mark.parametrize("k", [3, 10, 20])
def test_loop_fast_path_edges(k):
    """Directed cases for the fold of whole copies: a loop whose body holds a square
    (recorded as a pair on each fold in pass 1), one with the same loop below it (no
    fold), one whose body is a known square in pass 2, copies cut short at the end, and
    a loop inside another's body."""
    cases = [
        [5, 1, 1, 2] * 6 + [1, 1] + [3] + [1, 1, 2] * 5,
        [1, 2] * 4 + [3] + [1, 2] * 4 + [3] + [1, 2] * 7 + [1],
        [7] + [4, 4, 6] * 9 + [4],
        [1, 2, 3] * 3 + [9] + [1, 2, 3] * 5 + [1, 2],
        ([8] + [1, 2] * 5) * 4 + [8],
        [2, 2, 2, 3, 2, 2, 2, 3, 2, 2, 2, 3] * 3,
    ]
    for case in cases:
        seq = np.array(case, dtype=np.int32)
        for mode in ("plain", "pairs"):
            fast, ref = _both_kernels(seq, k, mode, snapshots=[0, len(seq) // 2, len(seq)])
            assert fast == ref, (case, mode)
        table = LoopTable()
        nlr_kernel(seq, k, table)
        known = [table.body(i) for i in range(len(table))] + [(np.array([1, 1]), np.array([1, 1]))]
        fast, ref = _both_kernels(seq, k, "known", known)
        assert fast == ref, (case, "known")
        stack, _ = reference_nlr(case, k)
        assert list(zip(*fast["out"])) == stack


def test_tag_collisions_are_confirmed_on_the_elements():
    """The scan compares 32-bit tags; a function whose tag equals a loop element's (here
    L0^4 and L0^2) must still not count as equal to it."""
    mult = 0x9E3779B1
    for count in (2, 4):
        fid = (0xFFFFFFFF ^ ((count * mult) & 0xFFFFFFFF)) ^ mult     # tag(L0^count) == tag(fid)
        assert fid < 2 ** 31
        seq = np.array(([1] * count + [fid]) * 4 + [1] * count, dtype=np.int64)
        for k in (4, 10, 20):
            for mode in ("plain", "pairs"):
                fast, ref = _both_kernels(seq, k, mode)
                assert fast == ref
            fast, ref = _both_kernels(seq, k, "known", [(np.array([1]), np.array([1]))])
            assert fast == ref


def test_fallbacks_give_the_same_results():
    """Ids beyond int32 (int64 input) and K beyond the fast kernel's reach go to
    nlr_reference; a negative id is refused either way."""
    seq = np.array([2 ** 40, 3] * 5 + [1], dtype=np.int64)
    t1, t2 = LoopTable(), LoopTable()
    a, b = nlr_kernel(seq, 5, t1), nlr_reference(seq, 5, t2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b)) and len(t1) == len(t2) == 1
    seq = np.array([1, 2, 3] * 40, dtype=np.int32)
    a, b = nlr_kernel(seq, 50, LoopTable()), nlr_reference(seq, 50, LoopTable())
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    for dtype in (np.int32, np.int64):
        with pytest.raises(ValueError):
            nlr_kernel(np.array([1, 2, -3], dtype=dtype), 10, LoopTable())
