"""Issue 36, item 6 (single-run cost): the failed run alone's time-step rows are made for
all steps at once (``alone.step_rows``, a ``StepRows``) and only the steps that can hold a
finding are read (``alone._Norms``); world collectives are compared by whole sequences
(``collectives._turns``).  Each is held here to a plain per-step (per-index) reference,
written in this file, on random and hand-made inputs: same answers, same order."""
import numpy as np
import pytest

from difftrace_mpi import config
from difftrace_mpi.stages.diagnose import failed_run as alone, collectives
from difftrace_mpi.stages.model import calltree

MANY, MIN_PEERS, FEW = alone.MANY, collectives.MIN_PEERS, collectives.FEW_DEVIANTS


# -- references ------------------------------------------------------------------------------

def ref_row(ev, plain, a, b, leave_out=(), chunk=alone.CHUNK):
    """Step [a, b)'s {id: (count capped at MANY, first offset, depth after that call,
    relative to a)}, one event at a time; ordered by (first offset // chunk, id)."""
    count, first, depth, at = {}, {}, 0, {}
    for p in range(a, b):
        e = int(ev[p])
        depth += 1 if e else -1
        if not e:
            continue
        f = int(plain[e])
        count[f] = count.get(f, 0) + 1
        if f not in first:
            first[f], at[f] = p - a, depth
    keep = sorted((f for f in first if f not in set(leave_out)), key=lambda f: (first[f] // chunk, f))
    return {f: (min(count[f], MANY), first[f], at[f]) for f in keep}


def ref_usual(rows):
    out = {}
    for f in sorted(set().union(*rows)):       # by id
        counts = [row.get(f, (0,))[0] for row in rows]
        common = max(set(counts), key=counts.count)
        out[f] = common if len(counts) - counts.count(common) <= alone.OFF_STEPS else None
    return out


def ref_follows(rows, o, f, k):
    agreed = 0
    for j in range(len(rows[o])):
        if j == k:
            continue
        others = {r[j].get(f, (0,))[0] for p, r in rows.items() if p != o and len(r) > j}
        if sum(1 for p, r in rows.items() if p != o and len(r) > j) < MIN_PEERS - 1:
            continue
        if len(others) != 1 or rows[o][j].get(f, (0,))[0] not in others:
            return False
        agreed += 1
    return agreed >= 2


def ref_off_the_peers(rows, k, functions):
    found, there = {}, {o: r[k] for o, r in rows.items() if len(r) > k}
    if len(there) < MIN_PEERS:
        return found
    for f in functions:
        counts = {o: row.get(f, (0,))[0] for o, row in there.items()}
        if len(set(counts.values())) != 2:
            continue
        for o, own in counts.items():
            others = {c for p, c in counts.items() if p != o}
            if len(others) != 1 or own in others or MANY in (own, *others):
                continue
            if ref_follows(rows, o, f, k):
                entry = there[o].get(f) or next((r[k][f] for r in rows.values() if len(r) > k and f in r[k]),
                                                (0, 0, 0))
                found.setdefault(o, []).append((f, own, next(iter(others)), entry[2], entry[1]))
    return found


def ref_step_deviants(objects, summaries):
    """Every step of every group, one after another, on lists of row dicts."""
    shape = alone.usual_shape(objects, summaries)
    groups = {}
    for o, s in summaries.items():
        if s["steps"] is not None and s["steps"]["shape"] == shape.get(objects[o][1]) and len(s["steps"]["rows"]) >= 3:
            groups.setdefault(objects[o][1], {})[o] = s["steps"]["rows"]
    for _, rows in sorted(groups.items()):
        if len(rows) < 2:
            continue
        usual = {o: ref_usual(r) for o, r in rows.items()}
        for k in range(max(len(r) for r in rows.values())):
            there = {o: r[k] for o, r in rows.items() if len(r) > k}
            if len(there) < 2:
                break
            off, varies = {}, set()
            for o, row in there.items():
                for f in set(row) | set(usual[o]):
                    own, norm = row.get(f, (0,))[0], usual[o].get(f, 0)
                    if norm is None:
                        varies.add(f)
                    elif own != norm and MANY not in (own, norm):
                        off.setdefault(f, []).append(o)
            for f in varies:
                off.pop(f, None)
            for f in [f for f, odd in off.items() if alone._handed_on(there, usual, odd, f)]:
                off.pop(f, None)
            found = ref_off_the_peers(rows, k, varies)
            for f, odd in off.items():
                if 2 * (len(odd) - 1) >= len(there) - 1:
                    continue
                for o in odd:
                    entry = there[o].get(f) or next((r[k][f] for r in rows.values() if len(r) > k and f in r[k]),
                                                    (0, 0, 0))
                    found.setdefault(o, []).append((f, there[o].get(f, (0,))[0], usual[o].get(f, 0), entry[2],
                                                    entry[1]))
            if found:
                return k, found
    return None


def ref_unseen_calls(objects, summaries, stopped):
    shape = alone.usual_shape(objects, summaries)
    mains = {o: s["steps"]["rows"] + [s["after"]] for o, s in summaries.items()
             if objects[o][1] == 0 and s["steps"] and s["steps"]["shape"] == shape.get(0)}
    if len(mains) < 2:
        return {}
    seen = {}
    for o, rows in mains.items():
        for row in rows:
            for f in row:
                seen.setdefault(f, set()).add(o)
    out = {}
    for o, rows in mains.items():
        new = [(f, depth, offset, len(rows) - 1) for f, (_, offset, depth) in rows[-1].items()
               if seen[f] == {o} and all(f not in row for row in rows[:-1])]
        if stopped[o] and new:
            out[o] = new
    return out


def ref_collective_deviants(objects, summaries, stopped=None):
    """The loop over every collective index."""
    seqs = {o: s["collectives"] for o, s in summaries.items() if objects[o][1] == 0}
    for k in range(max((len(s) for s in seqs.values()), default=0)):
        there = {o: int(s[k]) for o, s in seqs.items() if len(s) > k}
        skipped = [o for o in seqs if len(seqs[o]) <= k and not (stopped is not None and stopped[o])]
        if skipped and len(set(there.values())) == 1 and len(seqs) >= MIN_PEERS and len(skipped) <= FEW * len(seqs):
            return k, {o: (None, next(iter(there.values()))) for o in skipped}
        if len(there) < 2:
            return None
        values, counts = np.unique(list(there.values()), return_counts=True)
        if len(values) == 1:
            continue
        norm = int(values[np.argmax(counts)])
        odd = {o: (v, norm) for o, v in there.items() if v != norm}
        if len(there) >= MIN_PEERS and len(odd) <= FEW * len(there):
            ref = seqs[next(o for o, v in there.items() if v == norm)]
            return k, {o: (None if collectives._goes_on(seqs[o], ref, k) else v, n) for o, (v, n) in odd.items()}
        new = {o for o, v in there.items() if v not in seqs[o][:k].tolist()}
        if new and len(new) < len(there):
            usual = [v for o, v in there.items() if o not in new]
            return k, {o: (there[o], max(set(usual), key=usual.count)) for o in new}
        return None
    return None


# -- the step rows -----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_step_rows_are_the_per_step_rows(seed, monkeypatch):
    """Random traces, steps (contiguous, with gaps, empty, out of order), ids left out, and
    chunks from a few events (a step spans many) to the module's."""
    rng = np.random.default_rng(seed)
    for _ in range(60):
        chunk = int(rng.choice([8, 16, 64, 1 << 23]))
        monkeypatch.setattr(alone, "CHUNK", chunk)
        n = int(rng.integers(1, 300))
        ev = np.where(rng.random(n) < 0.5, 0, rng.integers(1, 12, n)).astype(np.int32)
        plain = rng.integers(0, 8, 12)
        plain[0] = 0
        cuts = np.sort(rng.integers(0, n + 1, int(rng.integers(1, 14))))
        shape = rng.random()
        if shape < 0.5:
            starts, ends = cuts[:-1], cuts[1:]
        elif shape < 0.85:
            starts, ends = cuts[:-1], np.minimum(cuts[:-1] + rng.integers(0, 30, len(cuts) - 1), cuts[1:])
        else:
            starts, ends = rng.integers(0, n, 4), rng.integers(0, n, 4)
        leave = rng.integers(0, 9, int(rng.integers(0, 3))).tolist()
        rows = alone.step_rows(ev, plain, starts, ends, leave or None)
        assert len(rows) == len(starts)
        for k, (a, b) in enumerate(zip(starts.tolist(), ends.tolist())):
            want = ref_row(ev, plain, a, b, leave, chunk)
            assert list(rows.row(k).items()) == list(want.items())


def test_summary_rows_of_a_time_step_loop():
    """``summary`` of a trace main > (step > MPI_Allreduce, compute x k)^n, cut short in its
    last step: its rows and the unfinished step's row are the per-step ones."""
    names = ["<return>", "main", "step", "MPI_Allreduce[count=1,type=MPI_DOUBLE,op=MPI_SUM]", "compute", "output"]
    rng = np.random.default_rng(1)
    ev = [1]
    for i in range(40):
        ev += [2, 3, 0] + [4, 0] * int(rng.integers(1, 4)) + ([5, 0] if i % 7 == 3 else []) + [0]
    ev += [2, 3, 0, 4]                  # stopped inside compute
    ev = np.array(ev, dtype=np.int32)
    maps, rows_by = calltree.id_maps(names), alone.row_keys(names)
    s = alone.summary(ev, maps, collectives.collective_keys(names)[0], config.CALLTREE_K, rows_by)
    steps = s["steps"]
    assert isinstance(steps["rows"], alone.StepRows) and len(steps["rows"]) >= 30
    for k, (a, b) in enumerate(zip(steps["starts"].tolist(), steps["ends"].tolist())):
        assert list(steps["rows"].row(k).items()) == list(ref_row(ev, rows_by, a, b).items())
    assert s["after"] == ref_row(ev, rows_by, int(steps["ends"][-1]), len(ev))


# -- the evidence that reads them --------------------------------------------------------------

def step_rows_of(rows, rng=None):
    """A StepRows holding ``rows`` ({id: (count, first, depth)}, or {id: count} with
    ``rng`` drawing distinct offsets and depths), in their order."""
    ptr, cols = [0], [[], [], [], []]
    for row in rows:
        if rng is not None:
            offsets = rng.choice(200, len(row), replace=False).tolist()
            row = {f: (min(c, MANY), offsets[i], int(rng.integers(0, 4)))
                   for i, (f, c) in enumerate(sorted(row.items()))}
        for f, (c, first, depth) in sorted(row.items()):
            for col, v in zip(cols, (f, c, first, depth)):
                col.append(v)
        ptr.append(len(cols[0]))
    return alone.StepRows(np.array(ptr, dtype=np.int64), np.array(cols[0], dtype=np.int32),
                          np.array(cols[1], dtype=np.int8), np.array(cols[2], dtype=np.int32),
                          np.array(cols[3], dtype=np.int32))


def both(rng, objects, per_trace, shapes=None):
    """(new summaries on StepRows, the same on lists of dicts) of {obj: [{id: count}]}."""
    new, old = {}, {}
    for o, counts in per_trace.items():
        r = step_rows_of(counts, rng)
        after = step_rows_of([{int(f): 1 for f in rng.choice(45, int(rng.integers(0, 4)), replace=False)}], rng).row(0)
        steps = {"shape": (shapes or {}).get(o, "s"), "starts": np.arange(len(counts)),
                 "ends": np.arange(len(counts)) + 1}
        new[o] = {"steps": dict(steps, rows=r), "after": after}
        old[o] = {"steps": dict(steps, rows=[r.row(k) for k in range(len(r))]), "after": after}
    return new, old


def random_steps(rng):
    """Traces of one steady step with a call skipped, added or counted otherwise now and
    then, some functions whose counts vary, a few worker threads and other loops."""
    base = {int(f): int(rng.choice([1, 1, 2, 3, MANY]))
            for f in rng.choice(40, int(rng.integers(1, 10)), replace=False)}
    varying = rng.choice(40, int(rng.integers(0, 3)), replace=False).tolist()
    objects, per_trace, shapes = [], {}, {}
    for o in range(int(rng.integers(1, 7))):
        objects.append((o, 0 if rng.random() < 0.85 else 1))
        own = dict(base)
        if rng.random() < 0.2:
            own[int(rng.integers(0, 40))] = int(rng.integers(1, 4))
        rows = []
        for _ in range(int(rng.integers(2, 12))):
            row = dict(own)
            if rng.random() < 0.15:
                f, r = int(rng.choice(list(row))), rng.random()
                if r < 0.4:
                    row.pop(f)
                elif r < 0.8:
                    row[f] += 1
                else:
                    row[int(rng.integers(0, 40))] = 1
            row.update({f: int(rng.integers(1, 4)) for f in varying if rng.random() < 0.5})
            rows.append(row)
        per_trace[o], shapes[o] = rows, "s" if rng.random() < 0.9 else "t"
    return objects, per_trace, shapes


def checked_steps(rng):
    """Three to seven traces whose one function varies over the steps, all alike, and one
    trace now and then off it (the peers' norm, ``_off_the_peers``)."""
    n = int(rng.integers(3, 10))
    pattern = rng.integers(1, 3, n).tolist()
    per_trace = {}
    for o in range(int(rng.integers(3, 8))):
        rows = []
        for k in range(n):
            row = {3: 1, 11: 2, 19: pattern[k] + (rng.random() < 0.08)}
            row.update({27: 1} if rng.random() < 0.05 else {})
            if rng.random() < 0.05:
                row.pop(3)
            rows.append(row)
        per_trace[o] = rows
    return [(o, 0) for o in per_trace], per_trace, None


@pytest.mark.parametrize("make", [random_steps, checked_steps])
def test_step_deviants_and_unseen_calls_are_the_per_step_ones(make):
    rng = np.random.default_rng(7)
    found = 0
    for _ in range(600):
        objects, per_trace, shapes = make(rng)
        new, old = both(rng, objects, per_trace, shapes)
        stopped = rng.random(len(objects)) < 0.5
        want = ref_step_deviants(objects, old)
        assert repr(alone.step_deviants(objects, new, stopped)) == repr(want)       # order too
        assert repr(alone.unseen_calls(objects, new, stopped)) == repr(ref_unseen_calls(objects, old, stopped))
        found += want is not None
    assert found > 100


def test_a_step_every_other_trace_makes_alike_is_read_past_steps_that_hold_nothing():
    """A long steady run: only the step a trace skipped a call in is looked at, and found."""
    rng = np.random.default_rng(0)
    per_trace = {o: [{1: 1, 2: 3, 5: 1} for _ in range(2000)] for o in range(4)}
    per_trace[2][1321] = {1: 1, 2: 2, 5: 1}
    new, old = both(rng, [(o, 0) for o in range(4)], per_trace)
    norms = alone._Norms({o: s["steps"]["rows"] for o, s in new.items()})
    assert norms.steps() == [1321]
    got = alone.step_deviants([(o, 0) for o in range(4)], new, np.zeros(4, dtype=bool))
    assert got[0] == 1321 and list(got[1]) == [2] and got[1][2][0][:3] == (2, 2, 3)
    assert repr(got) == repr(ref_step_deviants([(o, 0) for o in range(4)], old))


# -- world collectives ---------------------------------------------------------------------------

def deviants(seqs, stopped=None, threads=None):
    objects = [(o, (threads or {}).get(o, 0)) for o in range(len(seqs))]
    summaries = {o: {"collectives": np.array(s, dtype=np.int32)} for o, s in enumerate(seqs)}
    stopped = None if stopped is None else np.array(stopped, dtype=bool)
    got = collectives.collective_deviants(objects, summaries, stopped)
    assert repr(got) == repr(ref_collective_deviants(objects, summaries, stopped))
    return got


def test_collective_deviants_by_hand():
    a = [0, 1, 0, 1, 0, 1]
    assert deviants([a, a, a, a]) is None
    assert deviants([a, a, a, a[:2] + [2] + a[3:]]) == (2, {3: (2, 0)})                 # another collective
    assert deviants([a, a, a, a[:2] + a[3:]]) == (2, {3: (None, 0)})                     # skipped, goes on
    assert deviants([a, a, a, a[:4]]) == (4, {3: (None, 0)})                             # finished, never entered
    assert deviants([a, a, a, a[:4]], stopped=[0, 0, 0, 1]) is None                      # stopped there: no skip
    assert deviants([a, a, a[:4], a[:4]], stopped=[0, 0, 0, 0]) is None                  # half of them: no norm
    assert deviants([a, a + [3]]) is None                                                # only one has a 7th
    assert deviants([[0, 0, 0, 1], [0, 0, 0, 0]]) == (3, {0: (1, 0)})                    # two ranks: the new one
    assert deviants([[0, 1, 1], [0, 1, 0]]) is None                                      # two ranks, both seen before
    assert deviants([[0, 1, 2], [0, 2, 1], [0, 3, 1]]) is None                           # all disagree
    assert deviants([a, a, a, [5] + a[1:]], threads={3: 1}) is None                      # a worker thread: not held
    assert deviants([]) is None and deviants([a]) is None


@pytest.mark.parametrize("seed", range(4))
def test_collective_deviants_are_the_per_index_ones(seed):
    rng = np.random.default_rng(seed)
    kinds = set()
    for _ in range(1500):
        length = int(rng.integers(0, 30))
        base = rng.integers(0, 3, length)
        seqs = []
        for _ in range(int(rng.integers(1, 9))):
            s, r = base.copy(), rng.random()
            if r < 0.2 and length:
                s[rng.integers(0, length)] = rng.integers(0, 4)
            elif r < 0.35 and length:
                s = np.delete(s, rng.integers(0, length))
            elif r < 0.5:
                s = s[:rng.integers(0, length + 1)]
            elif r < 0.55:
                s = np.insert(s, rng.integers(0, length + 1), 5)
            seqs.append(s.tolist())
        stopped = None if rng.random() < 0.3 else (rng.random(len(seqs)) < 0.3).tolist()
        got = deviants(seqs, stopped, {o: 1 for o in range(len(seqs)) if rng.random() < 0.1})
        kinds.add("none" if got is None else "skip" if any(v[0] is None for v in got[1].values()) else "odd")
    assert kinds == {"none", "skip", "odd"}
