"""The one-pass event scans of the divergence context against numpy/Python references."""
import numpy as np
import pytest

from difftrace_mpi.kernels.nlr import child_calls, count_flagged, open_frames, position_scan
from difftrace_mpi.stages.model import calltree


def _traces(seed=3, count=200):
    rng = np.random.default_rng(seed)
    for t in range(count):
        n = int(rng.integers(0, 200))
        dtype = (np.uint16, np.int32)[t % 2]
        zeros = 1.0 if t % 7 == 0 else rng.random()         # every 7th: entry-only
        ev = np.where(rng.random(n) < zeros * 0.6, 0, rng.integers(1, 9, n)).astype(dtype)
        yield ev, (rng.random(9) < 0.4).astype(np.uint8), rng


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_position_scan_edges(dtype):
    flags = np.array([0, 1, 0, 1], np.uint8)
    assert position_scan(np.empty(0, dtype), flags, 0) == (0, 0, 0, 0)
    ev = np.array([1, 3, 0, 2, 0, 0, 3], dtype)
    assert position_scan(ev, flags, 0) == (0, 4, 0, 3)
    assert position_scan(ev, flags, 7) == (4, 4, 3, 3)
    assert position_scan(ev, flags, 99) == (4, 4, 3, 3)
    assert position_scan(ev, flags, 3) == (2, 4, 2, 3)
    with pytest.raises(IndexError):
        position_scan(np.array([1, 5], dtype), flags, 1)


def test_position_scan_random():
    for ev, flags, rng in _traces():
        n = len(ev)
        for pos in {0, n, int(rng.integers(0, n + 1)), n + 3}:
            p = min(pos, n)
            assert position_scan(ev, flags, pos) == (int(np.count_nonzero(ev[:p])), int(np.count_nonzero(ev)),
                                                    int(flags[ev[:p]].astype(bool).sum()),
                                                    int(flags[ev].astype(bool).sum()))
            assert position_scan(ev, flags, pos)[2] == count_flagged(ev, flags, p)


def test_position_scan_levels_random():
    for ev, flags, rng in _traces(5, 400):
        n = len(ev)
        for pos in {0, 1, n, n + 2, int(rng.integers(0, n + 1))}:
            found = position_scan(ev, flags, pos, True)
            assert found[:4] == position_scan(ev, flags, pos)
            assert position_scan(ev, None, pos, True)[:4] == found[:2] + (0, 0)
            (fi, fp), (ti, tp), outer = found[4:]
            oi, op = open_frames(ev, pos)
            assert np.array_equal(fi, oi) and np.array_equal(fp, op) and fi.dtype == np.int32 and fp.dtype == np.int64
            ci, cp = child_calls(ev, 0, True)
            assert np.array_equal(ti, ci) and np.array_equal(tp, cp) and ti.dtype == np.int32 and tp.dtype == np.int64
            if not len(oi):
                assert outer is None
            else:
                ci, cp = child_calls(ev, int(op[0]) + 1, False)
                assert np.array_equal(outer[0], ci) and np.array_equal(outer[1], cp)


def test_position_scan_levels_edges():
    for dtype in (np.uint16, np.int32):
        empty = position_scan(np.empty(0, dtype), None, 0, True)
        assert empty[:4] == (0, 0, 0, 0) and empty[6] is None and not len(empty[4][0]) and not len(empty[5][0])
        ev = np.array([7, 1, 2, 0, 0, 3, 0, 0, 0, 4, 5], dtype)  # main { a { x } b } <return> c { d
        found = position_scan(ev, None, 6, True)                # inside b
        assert found[4][0].tolist() == [7, 3] and found[4][1].tolist() == [0, 5]
        assert found[5][0].tolist() == [7, 4] and found[5][1].tolist() == [0, 9]
        assert found[6][0].tolist() == [1, 3] and found[6][1].tolist() == [1, 5]
        assert position_scan(ev, None, 8, True)[6] is None      # between the top-level calls
        found = position_scan(ev, None, len(ev), True)          # the end: c and d open
        assert found[4][0].tolist() == [4, 5] and found[6][0].tolist() == [5] and found[6][1].tolist() == [10]
        flat = np.array([3, 1, 2], dtype)                       # entry-only
        assert position_scan(flat, None, 2, True)[4][0].tolist() == [3, 1]
    with pytest.raises(IndexError):
        position_scan(np.array([1, 0, -2], np.int32), np.ones(3, np.uint8), 0, True)
    # an id beyond the flags deep inside calls (the scan's own loop for depth > 1), before
    # the position and after it
    for dtype in (np.uint16, np.int32):
        for pos in (1, 6):
            with pytest.raises(IndexError):
                position_scan(np.array([1, 2, 3, 9, 0, 0, 0], dtype), np.ones(4, np.uint8), pos, True)
    with pytest.raises(IndexError):
        position_scan(np.array([1, 0, 2], np.int32), np.empty(0, np.uint8), 0)


def test_locate_same_with_and_without_memo_and_returns():
    plain = np.arange(9, dtype=np.int32)
    for ev, _, rng in _traces(7, 120):
        n = len(ev)
        returns = bool(np.count_nonzero(ev) < n)
        for pos in {0, n, int(rng.integers(0, n + 1))}:
            expect = calltree.locate(ev, pos, plain)
            assert calltree.locate(ev, pos, plain, memo={}, returns=returns) == expect
            assert calltree.locate(ev, pos, plain, memo={}) == expect


def test_position_scan_outer_span():
    """The outermost open call's children are left out (None) when some come ``span`` or
    more events after the position; the rest is as without a span."""
    for dtype in (np.uint16, np.int32):
        ev = np.array([7, 1, 0, 2, 0, 3, 0, 3, 0, 3, 0], dtype)     # main { a b c c c  (spinning)
        for pos, span, listed in [(3, 6, False), (3, 7, True), (3, 100, True), (3, 0, False), (11, 0, True)]:
            found, whole = position_scan(ev, None, pos, True, span), position_scan(ev, None, pos, True)
            assert found[:4] == whole[:4]
            assert all(np.array_equal(x, y) for a, b in zip(found[4:6], whole[4:6]) for x, y in zip(a, b))
            assert (found[6] is not None) == listed, (pos, span)
            if listed:
                assert found[6][0].tolist() == child_calls(ev, 1, False)[0].tolist() == [1, 2, 3, 3, 3]
                assert found[6][1].tolist() == [1, 3, 5, 7, 9]


def test_count_before_from_listed_positions():
    """With a memo, ``count_before`` counts from the flagged positions listed once per
    trace and mask (``flagged_at``): the same counts as the scan, at every position."""
    memo = {}
    for ev, flags, rng in _traces(seed=5, count=60):
        n = len(ev)
        for pos in {0, n, int(rng.integers(0, n + 1)), n + 3, -2}:
            assert calltree.count_before(ev, flags, pos, memo) == calltree.count_before(ev, flags, pos) \
                == count_flagged(ev, flags, min(max(pos, 0), n))
        assert np.array_equal(calltree.flagged_at(ev, flags, memo),
                              np.flatnonzero(flags[ev]))
