"""The NLR kernel's chunk memo (a repeated stretch of input over the same stack top is
replayed, not reduced again) and its unfiltered input (``KeptEvents``: the kernel filters
a chunk at a time): both must give exactly what the kernel gives without them, and what
the first kernel (``nlr_reference``) gives.  The memo's parameters are set small here so
that nearly every chunk is a replay, a chained replay, or a window too shallow to store."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from difftrace_mpi.kernels import nlr as kernel
from difftrace_mpi.kernels.nlr import KeptEvents, LoopTable, nlr, nlr_reference
from difftrace_mpi.stages.model import filters
from difftrace_mpi.stages.model import nlr as stage


@pytest.fixture
def memo_params():
    """Restore the memo's settings after a test that changes them."""
    before = kernel.memo_settings()
    yield kernel.memo_settings
    kernel.memo_settings(**before)


def _motif_sequences(seed, n_seqs=4, length=600, alphabet=6, max_body=12):
    """Sequences built from a few shared motifs (nested repetitions, bodies around K,
    long runs), each interrupted now and then: repeated stretches across and within the
    sequences, in shifting contexts."""
    rng = np.random.default_rng(seed)

    def motif(depth):
        out = []
        for _ in range(int(rng.integers(1, 4))):
            if depth < 2 and rng.random() < 0.4:
                out += motif(depth + 1) * int(rng.integers(2, 7))
            else:
                out += rng.integers(1, alphabet, int(rng.integers(1, max_body))).tolist()
        return out
    motifs = [motif(0) for _ in range(5)] + [[1] * 70, [2, 3] * 40, list(range(1, 10)) * 4]
    seqs = []
    for _ in range(n_seqs):
        s = []
        while len(s) < length:
            m = motifs[int(rng.integers(len(motifs)))]
            s += m * int(rng.integers(1, 5))
            if rng.random() < 0.3:
                s.append(int(rng.integers(1, alphabet + 3)))
        seqs.append(np.array(s, dtype=np.int32))
    return seqs


def _run(seqs, k, known=(), on=True):
    """NLRs of ``seqs`` sharing one table (as a pass does), memo on or off; with ``known``
    bodies, the pass-2 form.  Returns (NLRs as lists, bodies of the table)."""
    kernel.memo_settings(enabled=on)
    try:
        table = LoopTable()
        for ids, counts in known:
            table.add_body(ids, counts, known=True)
        out = [nlr(s, k, table, bool(known)) for s in seqs]
    finally:
        kernel.memo_settings(enabled=True)
    return ([(a.tolist(), b.tolist()) for a, b in out],
            [tuple(x.tolist() for x in table.body(i)) for i in range(len(table))]), table


def _known_bodies(seqs, k):
    table = LoopTable()
    for s in seqs:
        nlr_reference(s, k, table)
    return [table.body(i) for i in range(len(table))]


@pytest.mark.parametrize("k", [2, 3, 5, 10, 17, 18, 22])
@pytest.mark.parametrize("params", [dict(min_chunk=1, cut_bits=1, margin=1), dict(min_chunk=3, cut_bits=2, margin=4),
                                    dict(min_chunk=16, cut_bits=3, margin=34), dict(min_chunk=5, max_chunk=7),
                                    dict(min_chunk=1, cut_bits=1)])
def test_memo_equals_no_memo_and_reference(memo_params, k, params):
    """Plain and known-body passes over shared motifs: memo on = memo off = reference,
    and the memo was used (replays and chained replays both happen)."""
    memo_params(**params)
    for seed in range(3):
        seqs = _motif_sequences(seed + 10 * k)
        with_memo, table = _run(seqs, k)
        assert with_memo == _run(seqs, k, on=False)[0]
        ref_table = LoopTable()
        assert with_memo[0] == [tuple(x.tolist() for x in nlr_reference(s, k, ref_table)) for s in seqs]
        stats = table.memo_stats()
        if params.get("margin", 16) >= 16 and k <= 10:
            assert stats["hits"] + stats["chained"] > 0
        known = _known_bodies(seqs, k)
        got, table2 = _run(seqs, k, known)
        assert got == _run(seqs, k, known, on=False)[0]
        ref_table = LoopTable()
        for ids, counts in known:
            ref_table.add_body(ids, counts, known=True)
        assert got[0] == [tuple(x.tolist() for x in nlr_reference(s, k, ref_table, True)) for s in seqs]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=11), min_size=1, max_size=12),
       st.lists(st.integers(1, 40), min_size=1, max_size=12), st.integers(2, 22), st.booleans(),
       st.integers(1, 6), st.integers(0, 3), st.integers(1, 12))
def test_memo_random_blocks(blocks, reps, k, known_mode, min_chunk, cut_bits, margin):
    """Repeated random blocks (long runs past the run rows' cap of 32, bodies at K-1 and
    K), each sequence twice in a row and once shifted, over one table."""
    before = kernel.memo_settings(min_chunk=min_chunk, cut_bits=cut_bits, margin=margin)
    try:
        _random_blocks(blocks, reps, k, known_mode)
    finally:
        kernel.memo_settings(**before)


def _random_blocks(blocks, reps, k, known_mode):
    seq = [x for b, r in zip(blocks, reps) for _ in range(r) for x in b]
    seqs = [np.array(s, dtype=np.int32) for s in (seq, seq, [9] + seq, seq[: len(seq) // 2])]
    known = _known_bodies(seqs, k) if known_mode else ()
    got = _run(seqs, k, known)[0]
    assert got == _run(seqs, k, known, on=False)[0]
    ref_table = LoopTable()
    for ids, counts in known:
        ref_table.add_body(ids, counts, known=True)
    assert got[0] == [tuple(x.tolist() for x in nlr_reference(s, k, ref_table, bool(known))) for s in seqs]


def test_memo_replays_across_snapshots_and_resumes(memo_params):
    """Snapshots cut chunks; a run resumed from a snapshot (memo warm) equals one from the
    start; a known flag set after the memo was filled drops the memo."""
    memo_params(min_chunk=2, cut_bits=1, margin=2)
    seqs = _motif_sequences(7, n_seqs=3, length=2000)
    for k in (4, 10):
        table = LoopTable()
        cold = [nlr(s, k, table) for s in seqs]
        ids, counts, states = nlr(seqs[0], k, table, False, None, 0, None, [0, 333, 1000, len(seqs[0])])
        assert ids.tolist() == cold[0][0].tolist() and counts.tolist() == cold[0][1].tolist()
        for at, state in states.items():
            again = nlr(seqs[0], k, table, False, None, at, state[:2])
            assert again[0].tolist() == cold[0][0].tolist() and again[1].tolist() == cold[0][1].tolist()
        table.add_body(*table.body(0), known=True)         # pass-2 behaviour from here on
        assert table.memo_stats() is None
        ref = LoopTable()
        for i in range(len(table)):
            ref.add_body(*table.body(i), known=table.is_known(i))
        for s in seqs:
            a, b = nlr(s, k, table, True), nlr_reference(s, k, ref, True)
            assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()


def test_memo_full_stores_nothing_more(memo_params):
    memo_params(min_chunk=2, cut_bits=1, cap_bytes=2000)
    seqs = _motif_sequences(3)
    got, table = _run(seqs, 10)
    assert table.memo_stats()["bytes"] <= 2000
    assert got == _run(seqs, 10, on=False)[0]


# ---- KeptEvents: a trace and its filter's flags, filtered by the kernel ------------------

def _trace(seed, n_names=12, length=3000):
    """An entry/return stream of repeated call patterns (ids 1.., 0 = return)."""
    rng = np.random.default_rng(seed)
    patterns = [rng.integers(1, n_names, int(rng.integers(1, 8))).tolist() for _ in range(5)]
    out = []
    while len(out) < length:
        p = patterns[int(rng.integers(len(patterns)))]
        for _ in range(int(rng.integers(1, 9))):
            for f in p:
                out += [f, 0] if rng.random() < 0.8 else [f]
        if rng.random() < 0.2:
            out.append(0)
    return np.array(out, dtype=np.int32)


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
@pytest.mark.parametrize("params", [dict(), dict(min_chunk=1, cut_bits=1, margin=1), dict(min_chunk=7, cut_bits=2)])
def test_kept_events_equal_the_filtered_sequence(memo_params, dtype, params):
    """Every mode (plain, known bodies, recording pairs with snapshots, resuming from
    them) gives on a KeptEvents what it gives on its filtered events, positions counted
    in the trace's events; a few flags off (a filter that keeps some functions only)."""
    memo_params(**params)
    traces = [_trace(s).astype(dtype) for s in range(4)]
    for flags in (np.ones(12, np.uint8), np.array([0, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 1], np.uint8)):
        kept = [KeptEvents(t, flags) for t in traces]
        arrays = [k.filtered() for k in kept]
        assert all(np.array_equal(a, t[(t != 0) & flags[t].astype(bool)]) for a, t in zip(arrays, traces))
        for k in (3, 10, 20, 30):
            known = _known_bodies(arrays, k)
            for mode in ("plain", "known"):
                tables = (LoopTable(), LoopTable())
                for tab in tables:
                    for ids, counts in (known if mode == "known" else ()):
                        tab.add_body(ids, counts, known=True)
                for ke, arr in zip(kept, arrays):
                    a = nlr(ke, k, tables[0], mode == "known")
                    b = nlr(arr, k, tables[1], mode == "known")
                    assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()
                assert [tables[0].body(i)[0].tolist() for i in range(len(tables[0]))] == \
                    [tables[1].body(i)[0].tolist() for i in range(len(tables[1]))]
            # pass 1 recording pairs, snapshots at trace positions, resumed from each
            ke, arr = kept[0], arrays[0]
            snaps = [0, 1, 17, len(ke) // 3, len(ke) - 1, len(ke)]
            seen_a, seen_b = set(), set()
            ta, tb = LoopTable(), LoopTable()
            a = nlr(ke, k, ta, False, seen_a, 0, None, snaps)
            b = nlr(arr, k, tb, False, seen_b, 0, None, sorted({ke.kept_before(s) for s in snaps}))
            assert a[0].tolist() == b[0].tolist() and seen_a == seen_b
            for s in snaps:
                sa, sb = a[2][s], b[2][ke.kept_before(s)]
                assert sa[0].tolist() == sb[0].tolist() and sa[2] == sb[2] and sa[3] == sb[3]
                for state_pairs in (None, set(sa[2])):
                    ra = nlr(ke, k, ta, False, state_pairs, s, sa)
                    rb = nlr(arr, k, tb, False, None if state_pairs is None else set(sb[2]), ke.kept_before(s), sb)
                    assert ra[0].tolist() == rb[0].tolist() and ra[1].tolist() == rb[1].tolist()


def test_kept_events_errors_and_edges():
    flags = np.ones(4, np.uint8)
    with pytest.raises(IndexError):
        nlr(KeptEvents(np.array([1, 0, 2, 0, 9, 0] * 30, np.int32), flags), 10, LoopTable())
    with pytest.raises(IndexError):
        nlr(KeptEvents(np.array([1, 0, -2, 0] * 30, np.int32), flags), 10, LoopTable())
    with pytest.raises(IndexError):
        nlr(KeptEvents(np.array([1, 0], np.uint16), np.zeros(0, np.uint8)), 10, LoopTable())
    empty = nlr(KeptEvents(np.zeros(0, np.uint16), flags), 10, LoopTable())
    assert len(empty[0]) == 0
    only_returns = nlr(KeptEvents(np.zeros(50, np.uint16), flags), 10, LoopTable())
    assert len(only_returns[0]) == 0
    with pytest.raises(ValueError):
        nlr(KeptEvents(np.array([1, 0] * 5, np.uint16), flags), 10, LoopTable(), False, None, 3, None)


def test_stage_passes_on_kept_events_equal_filtered():
    """discover and reduce_with_known (with a resumed twin) give the same NLRs and loop
    keys on KeptEvents (resume positions in trace events, as filters.nlr_position gives
    them) as on the filtered sequences (kept positions)."""
    names = ["<return>"] + [f"f{i}" for i in range(1, 12)] + ["MPI_Send", "g@plt"]
    traces = [_trace(s, n_names=14) for s in range(3)]
    traces.append(traces[0][: len(traces[0]) // 2].copy())         # a faulty twin of trace 0, cut short
    traces[3] = np.concatenate([traces[3], np.array([5, 0, 5, 0, 6], np.int32)])
    shared = len(traces[0]) // 2
    for spec_text in ("11.every", "11.mpi", "01.every"):
        spec = filters.parse_filter(spec_text)
        mask = filters.keep_mask(names, spec)
        results = []
        for lazy in (True, False):
            def seq(i):
                if lazy:
                    return filters.nlr_input(traces[i], names, spec, mask)
                return filters.apply_filter(traces[i], names, spec, mask)
            at = (filters.nlr_position(traces[3], shared, names, spec, mask) if lazy
                  else filters.kept_count(traces[3][:shared], names, spec, mask))
            discovery = stage.discover((seq(i) for i in range(4)), 10, {3: (0, at)})
            known = discovery.found_keys()
            nlrs, table = stage.reduce_with_known(discovery, seq, 10, known)
            keys = stage.canonical_keys(table)
            results.append(([(n.ids.tolist(), n.counts.tolist()) for n in nlrs], keys, known))
        assert results[0] == results[1], spec_text


def test_first_loops_equals_the_sorting_form():
    rng = np.random.default_rng(4)
    for dtype in (np.int32, np.int64):
        for n in (0, 1, 50, 5000):
            ids = rng.integers(-30, 20, n).astype(dtype)
            loops, at = np.unique(-ids[ids < 0] - 1, return_index=True)
            assert kernel.first_loops(ids, 30).tolist() == loops[np.argsort(at)].tolist()
    with pytest.raises(IndexError):
        kernel.first_loops(np.array([3, -5], dtype=np.int32), 4)
