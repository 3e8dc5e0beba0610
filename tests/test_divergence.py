"""The first-difference search (stages/compare/divergence.py) and the call-tree placement
(stages/model/calltree.py) on hand-built event sequences: 0 is a return, other ids are calls."""
import numpy as np
import pytest

from difftrace_mpi.stages.model import calltree
from difftrace_mpi.stages.compare import divergence as dv


def seq(*values):
    return np.array(values, dtype=np.int32)


def calls_loop(n_events, seed=0):
    """``n_events`` events: calls of ids 1..9, each followed by its return."""
    rng = np.random.default_rng(seed)
    out = np.zeros(n_events, dtype=np.int32)
    out[0::2] = rng.integers(1, 10, size=len(out[0::2]))
    return out


def oracle(normal, faulty):
    """The first index where the two differ, len of the shorter when one starts the other."""
    for i in range(min(len(normal), len(faulty))):
        if normal[i] != faulty[i]:
            return i
    return min(len(normal), len(faulty))


def search(pairs, splits=1):
    """Run the search as the engine does, the traces spread over ``splits`` shards
    (normal twins and faulty ones on different shards when splits > 1).  ``pairs``:
    [(normal or None, faulty or None)] per object.  Returns {obj: position}, rounds."""
    traces = [(ri, obj, ev) for obj, pair in enumerate(pairs) for ri, ev in enumerate(pair) if ev is not None]
    shards = [traces[s::splits] for s in range(splits)]

    def part(shard):
        return [ev for _, _, ev in shard], [r for r, _, _ in shard], [o for _, o, _ in shard]

    s = dv.Search([dv.digests(*part(sh)) for sh in shards], len(pairs))
    probes = s.probes()
    while len(probes[0]):
        probes = s.advance([dv.probe_hashes(*part(sh), probes) for sh in shards])
    objs, points = s.points()
    return dict(zip(objs.tolist(), points.tolist())), s.rounds


@pytest.mark.parametrize("splits", [1, 2, 3])
def test_search_finds_the_exact_first_difference(splits):
    rng = np.random.default_rng(7)
    pairs, expected = [], {}
    for obj, n in enumerate([1, 2, 31, 32, 33, 1000, 5000, 40_000]):
        normal = calls_loop(n + (n % 2), seed=obj)
        faulty = normal.copy()
        at = int(rng.integers(0, len(faulty)))
        faulty[at] = 10 if faulty[at] else 0 if at % 2 else 11
        if faulty[at] == normal[at]:
            faulty[at] = 12
        pairs.append((normal, faulty))
        expected[obj] = oracle(normal, faulty)
    found, rounds = search(pairs, splits)
    assert found == expected
    assert rounds <= 4          # 40,000 events: 32 blocks a round, 4 rounds


def test_known_shared_prefixes_are_the_points_without_rounds():
    """A shard that compared a faulty trace with its twin event by event (``Shard.index``,
    ``stages.compare.twins``) hands the shared prefix in with the digests: those objects
    get the same points as the block search, and need no round of it."""
    from difftrace_mpi.stages.compare import twins
    rng = np.random.default_rng(11)
    base = calls_loop(3000, seed=3)
    faulty = [base.copy(), base[:1234], base[:0], np.concatenate([base, seq(5, 0)])]
    faulty[0][2001] = 7 if faulty[0][2001] != 7 else 8
    pairs = [(base, f) for f in faulty]
    want, rounds = search(pairs)
    assert rounds > 0
    gevents = [ev for pair in pairs for ev in pair]
    runs, objs = [0, 1] * len(pairs), [o for o in range(len(pairs)) for _ in (0, 1)]
    shared = [-1 if r == 0 else twins.shared_prefix(ev, base) for ev, r in zip(gevents, runs)]
    order = rng.permutation(len(gevents)).tolist()       # any order of traces within the shard
    s = dv.Search([dv.digests([gevents[i] for i in order], [runs[i] for i in order], [objs[i] for i in order],
                              None, [shared[i] for i in order])], len(pairs))
    assert len(s.probes()[0]) == 0
    objs_found, points = s.points()
    assert dict(zip(objs_found.tolist(), points.tolist())) == want == {0: 2001, 1: 1234, 2: 0, 3: 3000}


def test_prefixes_equal_traces_and_missing_twins():
    base = calls_loop(200)
    pairs = [(base, base.copy()),          # equal: no entry
             (base, base[:57]),            # faulty stopped on the path
             (base[:80], base),            # faulty went on past the normal end
             (base, seq()),                # empty faulty trace
             (None, base),                 # a thread the normal run did not have
             (base, None)]                 # a thread the faulty run lost
    found, _ = search(pairs, 2)
    assert found == {1: 57, 2: 80, 3: 0, 4: 0, 5: 0}


def context_pair(normal, faulty, names):
    maps = calltree.id_maps(names)
    at = oracle(normal, faulty)
    return (dv.context([normal], 0, maps, at), dv.context([faulty], 0, maps, at), maps)


NAMES = ["<return>", "main", "step", "MPI_Irecv[tag=1]", "MPI_Irecv[tag=2]", "MPI_Wait", "MPI_Allreduce", "calc"]


def lulesh_like(steps, change=None):
    """main > (step > Irecv Wait calc, Allreduce) x steps; ``change(i, events)`` edits step i."""
    out = [1]
    for i in range(steps):
        body = [2, 3, 0, 5, 0, 7, 0, 0, 6, 0]
        if change:
            body = change(i, body)
        out += body
    return seq(*(out + [0]))


@pytest.mark.parametrize("edit,status,normal_call,faulty_call", [
    (lambda i, b: [2, 4, 0] + b[3:] if i == 6 else b, dv.ARGUMENTS, "MPI_Irecv[tag=1]", "MPI_Irecv[tag=2]"),
    (lambda i, b: b[:3] + b[5:] if i == 6 else b, dv.MISSING, "MPI_Wait", None),
    (lambda i, b: b[:3] + [7, 0] + b[3:] if i == 6 else b, dv.EXTRA, None, "calc"),
])
def test_classify_and_place_in_the_time_step(edit, status, normal_call, faulty_call):
    normal, faulty = lulesh_like(10), lulesh_like(10, edit)
    n, f, maps = context_pair(normal, faulty, NAMES)
    got, n_ids, f_ids = dv.classify(n, f, maps[0], stopped=False)
    assert got == status
    assert (NAMES[n_ids[0]] if n_ids else None) == normal_call
    assert (NAMES[f_ids[0]] if f_ids else None) == faulty_call
    assert n["clock"] == 6                               # six Allreduces before step 7
    main_level = n["where"][1]
    body, step, steps = main_level[3]
    assert (step, steps) == (7, 10)
    assert [NAMES[i] for i, _ in body] == ["step", "MPI_Allreduce"]


def test_stopped_trace_is_a_prefix():
    normal = lulesh_like(10)
    faulty = normal[:1 + 10 * 4 + 3]                  # stopped inside step 5, after its Irecv
    n, f, maps = context_pair(normal, faulty, NAMES)
    assert dv.classify(n, f, maps[0], stopped=True)[0] == dv.STOPPED
    assert dv.classify(n, f, maps[0], stopped=False)[0] == dv.ENDED
    assert n["where"][1][3][1:] == (5, 10)            # the normal's view: its loop is complete


def test_split_and_rotated_loops_count_steps_from_the_start():
    """a b c a b c ... with a check every 5: greedy folding rotates and splits the loop;
    the step count still follows the program's iterations."""
    children = []
    for it in range(20):
        children += [1, 2, 3]
        if (it + 1) % 5 == 0:
            children += [4, 5]
    children = np.array([9] + children[1:], dtype=np.int32)      # the first 'a' is special
    ids, counts, table = calltree.fold(children)
    for it in (3, 7, 12, 19):
        j = 1 + 3 * it + 2 * (it // 5)                 # the 'b' of iteration it (0-based)
        assert calltree.step_of(children, ids, counts, table, j)[1:] == (it + 1, 20)


def test_entry_only_traces_fold_the_flat_sequence():
    events = seq(*([1] + [2, 3] * 12))
    where = calltree.locate(events, 1 + 2 * 8, np.arange(4, dtype=np.int32))
    assert len(where) == 1 and where[0][3][1:] == (9, 12)


def test_a_skipped_call_is_not_read_as_the_next_calls_arguments():
    names = ["<return>", "main", "MPI_Isend[dest=+1]", "MPI_Isend[dest=-1]", "MPI_Waitall[count=2]",
             "MPI_Waitall[count=1]"]
    normal = seq(1, 2, 0, 3, 0, 4, 0, 0)
    faulty = seq(1, 3, 0, 4, 0, 0)                  # the Isend to +1 skipped, Waitall unchanged
    n, f, maps = context_pair(normal, faulty, names)
    status, n_ids, _ = dv.classify(n, f, maps[0], stopped=False)
    assert (status, [names[i] for i in n_ids]) == (dv.MISSING, ["MPI_Isend[dest=+1]"])
    faulty = seq(1, 3, 0, 5, 0, 0)                  # ... and the Waitall's count follows
    n, f, maps = context_pair(normal, faulty, names)
    assert dv.classify(n, f, maps[0], stopped=False)[0] == dv.MISSING
    faulty = seq(1, 3, 0, 3, 0, 4, 0, 0)            # a real argument change: +1 became -1
    n, f, maps = context_pair(normal, faulty, names)
    assert dv.classify(n, f, maps[0], stopped=False)[0] == dv.ARGUMENTS


def test_located_through_a_memo_as_without_and_each_level_scanned_once(monkeypatch):
    """A trace's thread and main levels are the same frames for every position looked up in
    it: with a memo each is scanned once (and the levels below the time step only up to
    the span), and every position is placed as without one."""
    step = [2, 3, 0, 0, 4, 0]                       # TimeIncrement { Lagrange } Comm
    events = seq(*([1] + step * 30 + [5, 0, 0]))
    plain = np.arange(6, dtype=np.int32)
    positions = (1, 7, 40, 95, len(events) - 2)
    without = [calltree.locate(events, p, plain) for p in positions]
    scans = []
    real = calltree.child_calls
    monkeypatch.setattr(calltree, "child_calls", lambda view, first, top: scans.append((len(view), first, top))
                        or real(view, first, top))
    real_scan = calltree.position_scan

    def scan(view, flags, position, levels=False, span=-1):     # the thread and main levels in one pass
        found = real_scan(view, flags, position, levels, span)
        scans.extend([(len(view), 0, True)] + ([(len(view), int(found[4][1][0]) + 1, False)] if found[6] is not None
                                               else []))
        return found
    monkeypatch.setattr(calltree, "position_scan", scan)
    memo = {}
    assert [calltree.locate(events, p, plain, memo=memo) for p in positions] == without
    assert len(scans) == len(set(scans)) == len(memo)               # no level scanned twice
    assert scans.count((len(events), 0, True)) == 1 and scans.count((len(events), 1, False)) == 1
    assert all(memo[key][0] is events for key in memo)      # held: its id stays its own
    scans.clear()
    [calltree.locate(events, p, plain) for p in positions]
    assert scans.count((len(events), 0, True)) == len(positions)    # without: once per position
