"""ParLOT traces read narrow (issue 38): the engine's reads keep the decoded uint16 values
(``readers.NARROW_EVENTS``), checked by ``kernels.parlot.check_ids``, mapped to global
ids in place and summarised in the same pass by ``kernels.nlr.map_ids_summarised``;
everything else gets int32 ids as before, and the results are the same either way."""
import numpy as np
import pytest

import difftrace_mpi
from conftest import assert_same_h5
from difftrace_mpi import readers
from difftrace_mpi.engine import reading as R
from difftrace_mpi.kernels import nlr
from difftrace_mpi.kernels import parlot as K
from difftrace_mpi.readers import parlot as P
from difftrace_mpi.readers import parlot_counted as pc

NAMES = ["main", "compute", "MPI_Send", "MPI_Recv", "MPI_Barrier", "leaf"]      # ids 1.. (0: the return)


def ref_check(values, n_names):
    """(first value >= n_names or -1, first return with no call open before it or -1)."""
    depth, unmatched = 0, -1
    for j, v in enumerate(values.tolist()):
        if v >= n_names:
            return j, unmatched
        if v:
            depth += 1
        elif depth:
            depth -= 1
        elif unmatched < 0:
            unmatched = j
    return -1, unmatched


def random_values(rng, n, top):
    return rng.choice([0, 0, *range(1, top)], size=n).astype(np.uint16)


@pytest.mark.parametrize("seed", range(30))
def test_check_ids_is_the_reference_and_the_decoder_checks_alike(seed):
    """``check_ids`` as the reference reads; ``decode_checked`` gives the same on the
    decoded values, whether it looked again or knew from the decoding (well formed
    streams, ones with values beyond the names, with unmatched returns, long repeats that
    are copied, and repetitions folded while decoded)."""
    rng = np.random.default_rng(seed)
    n_names = int(rng.integers(2, 12))
    values = random_values(rng, int(rng.integers(0, 300)), n_names + (seed % 3))     # some out of range
    got = K.check_ids(values, n_names)
    assert got == ref_check(values, n_names)
    well_formed = np.array(trace_values(rng, int(rng.integers(0, 3000)), n_names), dtype=np.uint16)
    unit = np.array(trace_values(rng, 5, n_names), dtype=np.uint16)
    looped = np.concatenate([well_formed[:40], np.tile(unit, 40_000 // len(unit) + 1), [0, 0] if seed % 2 else []])
    for stream in (values, well_formed, looped, np.concatenate([well_formed, values])):
        stream = np.asarray(stream, dtype=np.uint16)
        data = K.encode(stream)
        for fold in ((0, 0), (1 << 14, 1 << 12)):
            plain = K.decode(data, 1 << 30, *fold)
            checked = K.decode_checked(data, n_names, 1 << 30, *fold)
            assert np.array_equal(plain[0], checked[0]) and plain[1:3] == checked[1:3]
            assert checked[4:] == ref_check(plain[0], n_names)


@pytest.mark.parametrize("values, n_names, want", [
    ([], 5, (-1, -1)),
    ([0], 5, (-1, 0)),                          # a return first: unmatched
    ([1, 0, 0, 2], 5, (-1, 2)),
    ([1, 7, 0], 5, (1, -1)),                    # out of range
    ([1, 0, 9, 0], 5, (2, -1)),                 # an unmatched return after the cut is not looked at
    ([65535], 65535, (0, -1)),
    ([65535, 0], 65536, (-1, -1)),
    ([3, 3, 0, 0, 0], 4, (-1, 4)),
])
def test_check_ids_edges(values, n_names, want):
    assert K.check_ids(np.array(values, dtype=np.uint16), n_names) == want


@pytest.mark.parametrize("seed", range(20))
def test_map_in_place_is_a_table_lookup_and_summarised(seed):
    """Mapped as ``ids[values]``; hash and calls entered as the separate passes give them
    (``hash_events``, ``count_nonzero``), odd and even lengths; "nothing open at the end"
    only where ``open_calls`` finds nothing, and said of every well formed stream that
    closes all its calls."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 200))
    ids = rng.integers(1, 65536, size=n).astype(np.int32)
    ids[0] = 0      # the return stays a return
    streams = [rng.choice([0, 0, *range(n)], size=int(rng.integers(0, 500))),      # unmatched returns too
               np.array(trace_values(rng, int(rng.integers(0, 300)), n))]       # every call returns
    for local in streams:
        values = local.astype(np.uint16)
        want = ids[values].astype(np.uint16)
        h, entries, closed = nlr.map_ids_summarised(values, ids)
        assert values.dtype == np.uint16 and np.array_equal(values, want)
        assert h == nlr.hash_events(want) == nlr.hash_events(want.astype(np.int32))
        assert entries == np.count_nonzero(want)
        if closed:
            assert len(nlr.open_calls(want)) == 0
    assert closed       # the well formed stream
    assert not nlr.map_ids_summarised(np.array([1, 0, 0, 1], dtype=np.uint16), ids)[2]   # open at the end
    assert not nlr.map_ids_summarised(np.array([1, 1, 0], dtype=np.uint16), ids)[2]


def test_map_in_place_refuses_what_does_not_fit():
    assert nlr.map_ids_summarised(np.zeros(0, dtype=np.uint16), np.zeros(0, dtype=np.int32))[1:] == (0, True)
    with pytest.raises(IndexError, match="event id 3 beyond the 3 names"):
        nlr.map_ids_summarised(np.array([0, 1, 3], dtype=np.uint16), np.array([5, 6, 7], dtype=np.int32))
    with pytest.raises(OverflowError, match="maps to 65536"):
        nlr.map_ids_summarised(np.array([1, 0], dtype=np.uint16), np.array([0, 65536], dtype=np.int32))
    with pytest.raises(OverflowError, match="maps to -1"):
        nlr.map_ids_summarised(np.array([1], dtype=np.uint16), np.array([0, -1], dtype=np.int32))
    values = np.array([65535, 0], dtype=np.uint16)
    ids = np.zeros(65536, dtype=np.int32)
    ids[65535] = 65535
    _, entries, closed = nlr.map_ids_summarised(values, ids)
    assert values.tolist() == [65535, 0] and entries == 1 and closed
    # an error inside a block of eight (the kernel tests eight at a time): the value named
    # is the one given, the values before it mapped
    for at in (0, 5, 8, 21, 38):
        values = np.ones(40, dtype=np.uint16)
        values[at] = 9
        with pytest.raises(IndexError, match="event id 9 beyond the 3 names"):
            nlr.map_ids_summarised(values, np.array([0, 7, 8], dtype=np.int32))
        assert values[:at].tolist() == [7] * at and values[at] == 9


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 16, 17, 33, 1000])
def test_an_event_hash_of_a_range_is_that_of_the_range_alone(n):
    """hash_events over [lo, hi) equals the hash of those events as an array of their own,
    whatever lane their first pair falls in, in int32 and uint16 alike; and it tells
    apart ranges that differ in one event or in length."""
    rng = np.random.default_rng(n)
    events = rng.integers(0, 60000, n + 11).astype(np.int32)
    seen = set()
    for lo in (0, 1, 3, 5):
        part = events[lo:lo + n]
        h = nlr.hash_events(events, lo, lo + n)
        assert h == nlr.hash_events(part.copy()) == nlr.hash_events(part.astype(np.uint16))
        seen.add(h)
        if n:
            changed = part.copy()
            changed[n // 2] += 1
            assert nlr.hash_events(changed) != h
        assert nlr.hash_events(events, lo, lo + n + 1) != h
    assert len(seen) == (4 if n else 1)


def trace_values(rng, n, n_names):
    """A well formed call stream over ids 1..n_names-1."""
    out, depth = [], 0
    for _ in range(n):
        if depth and rng.random() < 0.5:
            out.append(0)
            depth -= 1
        else:
            out.append(int(rng.integers(1, n_names)))
            depth += 1
    return out + [0] * depth


@pytest.mark.parametrize("compressed", [True, False])
@pytest.mark.parametrize("damage", ["none", "unnamed", "unmatched", "both"])
def test_narrow_decodes_as_wide(compressed, damage):
    rng = np.random.default_rng(len(damage) + compressed)
    values = trace_values(rng, 3000, len(NAMES))
    if damage in ("unmatched", "both"):
        values[1500:1500] = [0] * (values[:1500].count(0) * 0 + 400)     # more returns than calls open
    if damage in ("unnamed", "both"):
        values[2500] = 40
    data = P.encode_values(np.array(values, dtype=np.uint16), compressed)
    names = np.array(NAMES, dtype=object)
    wide, dw = P._decode_thread(data, names, compressed, "t")
    narrow, dn = P._decode_thread(data, names, compressed, "t", narrow=True)
    assert wide.dtype == np.int32 and narrow.dtype == np.uint16
    assert np.array_equal(wide, narrow)
    assert (dw.complete, dw.values, dw.offset, dw.unnamed, dw.unmatched) == \
           (dn.complete, dn.values, dn.offset, dn.unnamed, dn.unmatched)
    assert np.array_equal(dw.folds, dn.folds)
    assert (dn.unnamed is not None) == (damage in ("unnamed", "both"))
    assert (dn.unmatched is not None) == (damage in ("unmatched", "both"))
    narrow[:] = 1        # its own array, writeable
    assert len(P._decode_thread(data, names, compressed, "t", narrow=True)[0]) == len(wide)


def test_narrow_empty_file():
    names = np.array(NAMES, dtype=object)
    for compressed in (True, False):
        data = P.encode_values(np.zeros(0, dtype=np.uint16), compressed)
        ev, d = P._decode_thread(data, names, compressed, "t", narrow=True)
        assert ev.dtype == np.uint16 and len(ev) == 0 and d.unnamed is None and d.unmatched is None


def write_run(d, values):
    d.mkdir()
    P.write_info(d / "p.100.info", NAMES)
    (d / "p.100.rank").write_text("0")
    P.write_trace(d / "p.100.0", values)
    return readers.discover_run(d)


def test_automatic_leaves_are_dropped_alike(tmp_path):
    """``parlot_counted.drop_calls`` on the narrow values: the int32 read's events."""
    rng = np.random.default_rng(7)
    values = trace_values(rng, 5000, len(NAMES) + 1) + [1, 6, 0] * 50 + [1, 6]      # ends inside the leaf (id 6)
    run = write_run(tmp_path / "r", values)
    ref = run.refs[0]
    for drop in (frozenset(["leaf"]), frozenset(["leaf", "compute"]), frozenset()):
        wide = readers.load_trace(ref, {pc.CACHE_KEY: drop})
        narrow = readers.load_trace(ref, {pc.CACHE_KEY: drop, P.NARROW_EVENTS: True})
        assert wide.events.dtype == np.int32 and narrow.events.dtype == np.uint16
        assert np.array_equal(wide.events, narrow.events) and wide.notes == narrow.notes
        assert np.array_equal(wide.folds, narrow.folds)
        if drop:
            assert len(wide.events) < len(values)
    ev = np.array(values, dtype=np.uint16)
    mask = pc.drop_mask(np.array(["<return>", *NAMES], dtype=object), {"leaf"})
    a, _, da = pc.drop_calls(ev, mask)
    b, _, db = pc.drop_calls(ev.astype(np.int32), mask)
    assert a.dtype == np.uint16 and da == db > 0 and np.array_equal(a, b)


def test_other_reads_stay_int32(tmp_path):
    run = write_run(tmp_path / "r", [1, 2, 0, 0])
    assert readers.load_trace(run.refs[0], {}).events.dtype == np.int32
    assert readers.load_trace(run.refs[0]).events.dtype == np.int32
    assert readers.load_run(tmp_path / "r").traces[0].events.dtype == np.int32


def analyze(normal, faulty, out):
    return difftrace_mpi.analyze(normal, faulty, filters=["11.every", "11.mpi"], attributes=["sing.noFreq"],
                                 linkage=["ward"], out=out)


def test_the_engine_reads_narrow_with_the_same_results(tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    base = trace_values(rng, 4000, len(NAMES))
    normal = write_run(tmp_path / "normal", base).path
    faulty = write_run(tmp_path / "faulty", base[:2000] + [40] + base[2000:]).path      # cut at an unnamed id
    seen = []
    decode = P._decode_thread

    def spying(data, names, compressed, path, narrow=False):
        seen.append(narrow)
        return decode(data, names, compressed, path, narrow)

    monkeypatch.setattr(P, "_decode_thread", spying)
    analyze(normal, faulty, tmp_path / "narrow.h5")
    assert seen and all(seen)
    seen.clear()
    monkeypatch.setattr(R, "NARROW_EVENTS", ("not", "the reader's key"))
    analyze(normal, faulty, tmp_path / "wide.h5")
    assert seen and not any(seen)
    assert_same_h5(tmp_path / "narrow.h5", tmp_path / "wide.h5")


def test_finish_takes_the_flag_back():
    cache = {}
    reading = R.Reading(["<return>", "main"], [], cache)
    assert reading.compact
    reading.read(type("Ch", (), {"each": staticmethod(lambda items, what: items)})(), [])
    assert cache.get(P.NARROW_EVENTS) is True
    reading.finish()
    assert P.NARROW_EVENTS not in cache
