"""The normal-path check of the hang view (divergence.py) on hand-built event sequences:
0 is a return, other ids are calls."""
import numpy as np
import pytest

from difftrace_mpi.stages import divergence as dv


def seq(*values):
    return np.array(values, dtype=np.int32)


def calls_loop(n_events, seed=0):
    """A trace of ``n_events`` events: calls of ids 1..9, each followed by its return."""
    rng = np.random.default_rng(seed)
    out = np.zeros(n_events, dtype=np.int32)
    out[0::2] = rng.integers(1, 10, size=len(out[0::2]))
    return out


def where(normal, faulty):
    """The bracket, computed as the two sides would: hashes of the faulty length on each."""
    nh, _ = dv.prefix_blocks(normal, len(faulty))
    fh, calls_before = dv.prefix_blocks(faulty, len(faulty))
    return dv.bracket(nh, fh, calls_before, int(np.count_nonzero(faulty)))


def first_difference(normal, faulty):
    """The first event index where the faulty trace is not the normal one's start (oracle)."""
    for i, v in enumerate(faulty.tolist()):
        if i >= len(normal) or normal[i] != v:
            return i
    return -1


def assert_brackets(normal, faulty):
    at, to = where(normal, faulty)
    first = first_difference(normal, faulty)
    if first < 0:
        assert (at, to) == (-1, -1)
        return
    calls_up_to = int(np.count_nonzero(faulty[:first + 1]))
    # the differing event is in a block starting after call ``at`` and ending by call ``to``
    assert at <= int(np.count_nonzero(faulty[:first])) and calls_up_to <= to
    assert to - at <= dv.block_size(len(faulty))
    return at, to


def test_block_size_bounds_the_hashes_per_trace():
    assert dv.block_size(0) == dv.block_size(100) == dv.MIN_BLOCK
    for length in (1000, 10**6, 10**9):
        assert -(-length // dv.block_size(length)) <= dv.MAX_BLOCKS
    hashes, calls = dv.prefix_blocks(calls_loop(100_000), 100_000)
    assert len(hashes) == len(calls) == dv.MAX_BLOCKS


def test_prefix_is_on_the_normal_path():
    normal = calls_loop(1000)
    for length in (1, 15, 16, 17, 999, 1000):
        assert where(normal, normal[:length].copy()) == (-1, -1)


def test_difference_in_the_first_block():
    normal = calls_loop(200)
    faulty = normal[:150].copy()
    faulty[4] = 42                  # the third call
    at, to = assert_brackets(normal, faulty)
    assert at == 0 and to == dv.MIN_BLOCK // 2


def test_difference_in_a_middle_block():
    normal = calls_loop(20_000, seed=1)
    faulty = normal[:10_000].copy()
    faulty[6_000] = 0               # a call replaced by a return: call 3,000 (0-based) missing
    size = dv.block_size(10_000)
    at, to = assert_brackets(normal, faulty)
    block = 6_000 // size
    assert at == np.count_nonzero(faulty[:block * size])
    assert to == np.count_nonzero(faulty[:(block + 1) * size])


def test_difference_in_the_last_short_block():
    normal = calls_loop(1000, seed=2)
    faulty = normal[:1001 - 11].copy()        # 990 events: the last block is shorter
    faulty[-1] = 77
    at, to = assert_brackets(normal, faulty)
    assert to == np.count_nonzero(faulty)


@pytest.mark.parametrize("normal_length", [0, 10, 16, 40, 64])
def test_normal_shorter_than_faulty(normal_length):
    faulty = calls_loop(100, seed=3)
    normal = faulty[:normal_length].copy()    # the faulty trace goes on where the normal ended
    at, to = assert_brackets(normal, faulty)
    size = dv.block_size(100)
    assert at == np.count_nonzero(faulty[:normal_length // size * size])


def test_empty_faulty_trace_is_on_the_normal_path():
    empty = seq()
    assert dv.prefix_blocks(empty, 0)[0].size == 0
    assert where(calls_loop(50), empty) == (-1, -1)
    assert where(empty, empty) == (-1, -1)


def test_a_block_of_returns_gives_an_empty_bracket():
    normal = seq(*([1] * 16 + [0] * 15), 2, 0, 0)
    faulty = seq(*([1] * 16 + [0] * 16), 3)   # returns where the normal trace made a call
    at, to = where(normal, faulty)
    assert (at, to) == (16, 16)              # in the second block, which enters no call


def test_shards_in_any_split_give_the_same_answer():
    """Normal and faulty traces of one object on different shards, as under MPI."""
    normal = [calls_loop(5000, seed=s) for s in range(4)]
    faulty = [normal[0][:2000].copy(), normal[1][:3000].copy(), normal[2][:100].copy(), normal[3].copy()]
    faulty[1][2345] = 5 if faulty[1][2345] != 5 else 6
    faulty[2][7] = 0 if faulty[2][7] else 9
    probes = np.array([0, 1, 2], dtype=np.int64)           # object 3 did not stop
    lengths = np.array([len(faulty[o]) for o in probes], dtype=np.int64)
    calls = np.array([np.count_nonzero(f) for f in faulty], dtype=np.int64)
    traces = [(0, o, normal[o]) for o in range(4)] + [(1, o, faulty[o]) for o in range(4)]

    def run(shards):
        parts = []
        for shard in shards:
            runs, objs, events = zip(*[traces[i] for i in shard]) if shard else ((), (), [])
            parts.append(dv.shard_blocks(list(events), np.array(runs, np.int64), np.array(objs, np.int64),
                                         probes, lengths))
        return dv.divergences(parts, probes, calls, 4)

    whole = run([list(range(8))])
    assert whole[0][0] == -1 and whole[0][3] == -1
    assert whole[0][1] >= 0 and whole[0][2] >= 0
    for o in (1, 2):
        assert (whole[0][o], whole[1][o]) == where(normal[o], faulty[o])
    for shards in ([[0, 1, 2, 3], [4, 5, 6, 7]], [[0, 5, 2], [4, 1, 7], [6, 3], []]):
        split = run(shards)
        assert np.array_equal(split[0], whole[0]) and np.array_equal(split[1], whole[1])


def test_missing_normal_trace_left_the_normal_path():
    faulty = calls_loop(40)
    parts = [dv.shard_blocks([faulty], np.array([1]), np.array([0]), np.array([0]), np.array([40]))]
    at, to = dv.divergences(parts, np.array([0]), np.array([20]), 1)
    assert (at[0], to[0]) == (0, dv.MIN_BLOCK // 2)
