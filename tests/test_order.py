"""Order-free blocks (stages/compare/order.py, kernels/order.pyx): calls after arrival-order
completions, polling and dynamic schedules are compared as the set of call paths they
hold, so two good runs that differ only in message order are equal, while a call or an
argument no good run makes there stays a difference."""
import json
import random

import numpy as np
import pytest

from difftrace_mpi.model import Trace
from difftrace_mpi.readers.text import write_text_run
from difftrace_mpi.stages.compare import order

from conftest import run_cli

NAMES = ["<return>", "main", "MPI_Waitany[count=2]", "unpack", "MPI_Allreduce[count=1,type=MPI_DOUBLE,op=MPI_SUM]",
         "compute", "poll", "MPI_Iprobe[src=ANY,tag=1]", "MPI_Waitall[count=2]", "face_x", "face_y",
         "MPI_Isend[count=4,type=MPI_INT,dest=+1,tag=7]", "MPI_Isend[count=4,type=MPI_INT,dest=+1,tag=8]",
         "GOMP_parallel_loop_dynamic", "body._omp_fn.0", "cell", "MPI_Recv[count=1,type=MPI_INT,src=ANY,tag=3]",
         "face._omp_fn.1", "face._omp_fn.2", "stencil._omp_fn.3", "MPI_Isend[count=4,type=MPI_INT,dest=+1,tag=9]"]
FLAGS = order.name_flags(NAMES)


def ev(*ids):
    return np.array(ids, dtype=np.uint16)


def unpack(face):
    return (3, face, 0, 0)


def waitany_block(faces):
    out = []
    for f in faces:
        out += [2, 0, *unpack(f)]
    return out


def test_flags_from_names():
    assert FLAGS[2] == order.FREE and FLAGS[7] == order.FREE and FLAGS[16] == order.FREE
    assert FLAGS[4] == order.SYNC and FLAGS[8] == order.SYNC
    assert FLAGS[13] == order.DYNAMIC
    assert not FLAGS[[0, 1, 3, 5, 6, 9, 10, 11, 14, 15]].any()
    plain = order.name_flags(["<return>", "MPI_Recv[count=1,type=MPI_INT,src=-1,tag=3]", "MPI_Recv"])
    assert not plain[1:].any()              # a receive from a named peer and tag is deterministic


def test_arrival_order_folds_equal():
    a = ev(1, 5, 0, *waitany_block([9, 10]), 8, 0, 4, 0, 0)
    b = ev(1, 5, 0, *waitany_block([10, 9]), 8, 0, 4, 0, 0)
    fa, how = order.fold(a, FLAGS)
    fb, _ = order.fold(b, FLAGS)
    assert not np.array_equal(a, b) and np.array_equal(fa, fb)
    assert how.blocks == 1 and how.dropped == 0
    # the deterministic calls before and after the block keep their place
    assert fa[:3].tolist() == [1, 5, 0] and fa[-5:].tolist() == [8, 0, 4, 0, 0]


def test_polling_count_folds_equal():
    poll = [6, 7, 0, 0]
    a = ev(1, 5, 0, *poll, *poll, *poll, 4, 0, 0)
    b = ev(1, 5, 0, *poll, 4, 0, 0)
    assert np.array_equal(order.fold(a, FLAGS)[0], order.fold(b, FLAGS)[0])


@pytest.mark.parametrize("faulty", [
    [2, 0, *unpack(9), 2, 0, 3, 0],                       # an unpack that skipped its face
    [2, 0, *unpack(9), 2, 0, *unpack(10), 12, 0],          # a message with another tag inside the block
    [2, 0, *unpack(9), 2, 0, *unpack(9)],                 # the same face twice, the other never
])
def test_what_a_block_holds_still_counts(faulty):
    normal = ev(1, *waitany_block([9, 10]), 8, 0, 0)
    changed = ev(1, *faulty, 8, 0, 0)
    assert not np.array_equal(order.fold(normal, FLAGS)[0], order.fold(changed, FLAGS)[0])


def test_repetition_inside_a_block_is_not_counted():
    """The documented price: inside a free block, how often a path occurs is not compared."""
    twice = ev(1, 2, 0, *unpack(9), 2, 0, *unpack(9), 8, 0, 0)
    once = ev(1, 2, 0, *unpack(9), 8, 0, 0)
    assert np.array_equal(order.fold(twice, FLAGS)[0], order.fold(once, FLAGS)[0])


def test_a_trace_stopped_inside_a_block_stops_where_the_block_began():
    normal, _ = order.fold(ev(1, 5, 0, *waitany_block([9, 10]), 8, 0, 4, 0, 0), FLAGS)
    stopped, how = order.fold(ev(1, 5, 0, 2, 0, *unpack(10), 2), FLAGS)       # waits in the 2nd Waitany
    assert stopped.tolist() == [1, 5, 0] and normal[:3].tolist() == stopped.tolist()
    assert how.dropped == 7 and how.blocks == 0      # Waitany, unpack(face_y), Waitany


def test_a_synchronisation_entered_ends_the_block():
    """A victim that waits in the collective after a block stays on the normal path."""
    normal, _ = order.fold(ev(1, *waitany_block([9, 10]), 4, 0, 0), FLAGS)
    waiting, how = order.fold(ev(1, *waitany_block([10, 9]), 4), FLAGS)
    assert how.dropped == 0 and np.array_equal(waiting, normal[:len(waiting)])


def test_a_block_closed_by_a_call_that_entered_a_sync():
    """A block whose closing call is still open (hung inside it, below a synchronisation)
    is folded, not dropped: the fault before it stays visible."""
    normal, _ = order.fold(ev(1, 6, 7, 0, 0, 4, 0, 5, 8, 0, 0, 0), FLAGS)
    skipped, how = order.fold(ev(1, 6, 7, 0, 0, 5, 8), FLAGS)        # no Allreduce; hangs in compute > Waitall
    assert how.dropped == 0
    assert not np.array_equal(skipped, normal[:len(skipped)])


def test_a_worker_runs_region_bodies_in_the_order_its_main_thread_met_arrivals():
    """The main thread unpacks faces in arrival order, each with an OpenMP region; its
    worker runs the same bodies in that order.  Learnt from the main thread (the bodies
    it ran inside a free block), a run of them in the worker is a block: equal in any
    order, while a body outside the run (the stencil) ends it and keeps its place."""
    main = ev(1, 2, 0, 3, 13, 17, 0, 0, 0, 2, 0, 3, 13, 18, 0, 0, 0, 4, 0, 0)
    inside = np.zeros(len(NAMES), dtype=np.uint8)
    order.fold(main, FLAGS, inside)
    bodies = order.region_bodies(NAMES)
    assert bodies.tolist() == [14, 17, 18, 19]
    flags = order.with_runs(FLAGS, bodies, inside)
    assert flags[17] & order.RUN and flags[18] & order.RUN and not flags[19] & order.RUN
    a = ev(17, 0, 18, 0, 19, 15, 0, 0, 17, 0, 18, 0)
    b = ev(18, 0, 17, 0, 19, 15, 0, 0, 18, 0, 17, 0)
    fa, fb = order.fold(a, flags)[0], order.fold(b, flags)[0]
    assert np.array_equal(fa, fb) and not np.array_equal(order.fold(a, FLAGS)[0], order.fold(b, FLAGS)[0])
    assert fa.tolist().count(19) == 1 and fa.tolist().index(19) == 4     # the stencil between the runs
    skipped = ev(17, 0, 18, 0, 17, 0, 18, 0)                               # no stencil: not equal
    assert not np.array_equal(order.fold(skipped, flags)[0], fa)


def test_an_unfinished_block_keeps_the_calls_no_good_run_made():
    """A hung trace's unfinished block is cut (what it did there depends on arrival) but a
    call its normal twin never made (a send with a wrong tag before the wait) is kept."""
    normal = ev(1, 6, 7, 0, 11, 0, 7, 0, 0, 4, 0, 0)
    opened = np.zeros(len(NAMES), dtype=np.uint8)
    order.fold(normal, FLAGS, opened=opened)
    _, seen = order.learn_varying(normal, FLAGS)
    assert seen.tolist() == [int(i in (1, 6, 7, 11, 4)) for i in range(len(NAMES))]     # the calls it makes
    hung_same = ev(1, 6, 7, 0, 11, 0, 7)
    hung_tag = ev(1, 6, 7, 0, 20, 0, 7)
    same, how = order.fold(hung_same, FLAGS, opened=opened, learnt=True, seen=seen)
    assert how.dropped and same.tolist() == [1]
    kept, how = order.fold(hung_tag, FLAGS, opened=opened, learnt=True, seen=seen)
    assert how.dropped and 20 in kept.tolist() and 11 not in kept.tolist()


def test_a_livelock_in_a_block_is_kept():
    spin = [7, 0] * 1500
    folded, how = order.fold(ev(1, 5, 0, 6, *spin), FLAGS)
    assert how.dropped == 0 and len(folded) > 3000


def test_dynamic_region_bodies():
    main = ev(1, 13, 14, 15, 0, 15, 0, 15, 0, 0, 0, 0)
    flags = order.learn_bodies(main, FLAGS)
    assert flags[14] & order.SHARE and not FLAGS[14] & order.SHARE
    worker_a, worker_b, idle = ev(14, 15, 0, 15, 0, 15, 0, 0), ev(14, 15, 0, 0), ev(14, 0)  # shares differ
    assert order.fold(worker_a, flags)[0].tolist() == order.fold(worker_b, flags)[0].tolist() == \
        order.fold(idle, flags)[0].tolist() == [14, 0]       # a share, even none, is not compared
    assert not np.array_equal(order.fold(worker_a, FLAGS)[0], order.fold(worker_b, FLAGS)[0])
    assert np.array_equal(order.fold(main, FLAGS)[0], order.fold(ev(1, 13, 14, 15, 0, 0, 0, 0), FLAGS)[0])


def test_calls_whose_numbers_vary_are_learnt_from_the_normal_trace():
    """A worker that takes as many tasks as the master hands it: each call of ``unpack``
    (here the worker loop) makes the same children in other numbers; a function whose
    calls hold a synchronisation never is."""
    task = [16, 0, 5, 0, 11, 0]                 # receive, compute, send
    normal = ev(1, 3, *task, 0, 3, *task, *task, *task, 0, 4, 0, 3, *task, *task, 0, 0)
    learnt, _ = order.learn_varying(normal, FLAGS)
    assert learnt.tolist() == [3]
    other = ev(1, 3, *task, *task, 0, 3, *task, 0, 4, 0, 3, *task, *task, *task, 0, 0)
    flags = order.with_bodies(FLAGS, learnt)
    assert np.array_equal(order.fold(normal, flags)[0], order.fold(other, flags)[0])
    wrong = ev(1, 3, *task, *task, 0, 3, 16, 0, 5, 0, 12, 0, 0, 4, 0, 3, *task, 0, 0)    # another tag
    assert not np.array_equal(order.fold(normal, flags)[0], order.fold(wrong, flags)[0])
    synced = ev(1, 3, 5, 0, 4, 0, 0, 3, 5, 0, 5, 0, 4, 0, 0, 0)
    assert order.learn_varying(synced, FLAGS)[0].tolist() == []
    steady = ev(1, 3, *task, 0, 3, *task, 0, 0)
    assert order.learn_varying(steady, FLAGS)[0].tolist() == []


def test_the_end_of_a_dynamic_loop_drops_the_share_before_it():
    """GCC calls GOMP_loop_end(_nowait) only after a loop it did not schedule statically:
    the calls since the last synchronisation were this thread's share, any, even none."""
    names = ["<return>", "body._omp_fn.1", "cell", "GOMP_loop_end_nowait", "GOMP_barrier", "after"]
    flags = order.name_flags(names)
    assert flags[3] == order.SHARE_END and flags[4] == order.SYNC
    busy = ev(1, 2, 0, 2, 0, 2, 0, 3, 0, 5, 0, 0)
    idle = ev(1, 3, 0, 5, 0, 0)
    assert order.fold(busy, flags)[0].tolist() == order.fold(idle, flags)[0].tolist() == [1, 3, 0, 5, 0, 0]
    before_barrier = ev(1, 5, 0, 4, 0, 2, 0, 3, 0, 0)      # a call before the last barrier stays
    assert order.fold(before_barrier, flags)[0].tolist() == [1, 5, 0, 4, 0, 3, 0, 0]


def test_deterministic_traces_are_untouched():
    a = ev(1, 5, 0, 8, 0, 4, 0, 0)
    folded, how = order.fold(a, FLAGS)
    assert folded is a and not how
    entry_only = ev(1, 2, 3, 9, 2, 3, 10)         # no returns: no call structure to bound a block
    assert order.fold(entry_only, FLAGS)[0] is entry_only


def test_bad_id_raises():
    with pytest.raises(Exception, match="outside its name table"):
        order.fold(ev(1, 2, 0, 99, 0), FLAGS)


# ---------------------------------------------------------------- end to end (text runs)
RANKS, STEPS = 4, 6


def _run(directory, seed, bug=None):
    """A halo exchange completed with MPI_Waitany in a random order per run, then a
    master-worker phase on rank 0 (MPI_ANY_SOURCE), then an Allreduce.  ``bug``: (rank,
    step, kind)."""
    rng = random.Random(seed)
    names = ["<return>", "main", "exchange", "MPI_Irecv[count=8,type=MPI_DOUBLE,src=-1,tag=1]",
             "MPI_Irecv[count=8,type=MPI_DOUBLE,src=+1,tag=1]", "MPI_Isend[count=8,type=MPI_DOUBLE,dest=-1,tag=1]",
             "MPI_Isend[count=8,type=MPI_DOUBLE,dest=+1,tag=1]", "MPI_Waitany[count=2]", "unpack_left",
             "unpack_right", "MPI_Waitall[count=2]", "compute",
             "MPI_Allreduce[count=1,type=MPI_DOUBLE,op=MPI_SUM]", "MPI_Allreduce[count=1,type=MPI_DOUBLE,op=MPI_MAX]",
             "MPI_Recv[count=1,type=MPI_INT,src=ANY,tag=5]", "MPI_Send[count=1,type=MPI_INT,dest=+1,tag=6]",
             "MPI_Send[count=1,type=MPI_INT,dest=+2,tag=6]", "MPI_Send[count=1,type=MPI_INT,dest=+3,tag=6]"]
    traces = []
    for rank in range(RANKS):
        e = [1]
        for step in range(1, STEPS + 1):
            e += [2, 3, 0, 4, 0, 5, 0, 6, 0]
            for face in rng.sample([8, 9], 2):
                e += [7, 0, face, 0]
            e += [10, 0, 0, 11, 0]
            if rank == 0:               # tasks answered in arrival order
                workers = rng.sample([15, 16, 17], 3) * rng.randint(1, 2)
                if bug == (rank, step, "noanswer"):
                    workers = [w for w in workers if w != 16]
                for worker in workers:
                    e += [14, 0, worker, 0]
            op = 13 if bug == (rank, step, "wrongop") else 12
            e += [op, 0]
        e += [0]
        traces.append(Trace(rank, 0, names, np.array(e, dtype=np.int32)))
    write_text_run(directory, traces)
    return directory


def _verdict(*runs):
    out = run_cli("analyze", *runs, "--json", "--no-lattice")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["verdict"]


@pytest.mark.integration
def test_two_good_runs_that_differ_in_order_give_no_difference(tmp_path):
    a, b = _run(tmp_path / "a", 1), _run(tmp_path / "b", 2)
    assert (a / "r0.t0.txt").read_text() != (b / "r0.t0.txt").read_text()
    v = _verdict(a, b)
    assert v["kind"] == "none", v["summary"]
    assert v["order_free"]["traces"] == 2 * RANKS and v["order_free"]["blocks"] > 0


@pytest.mark.integration
@pytest.mark.parametrize("rank,step", [(2, 4), (0, 3)])
def test_a_wrong_op_after_reordered_blocks_is_found(tmp_path, rank, step):
    v = _verdict(_run(tmp_path / "n", 1), _run(tmp_path / "f", 7, bug=(rank, step, "wrongop")))
    assert v["kind"] == "changed"
    culprit = v["culprits"][0]
    assert (culprit["rank"], culprit["thread"]) == (rank, 0)
    assert v["where"]["iteration"] == step
    assert "op=MPI_MAX" in v["where"]["faulty"]
    assert v["confidence"]["level"] == "high"        # a collective: no arrival order there


@pytest.mark.integration
def test_a_difference_inside_a_free_block_is_not_high_confidence(tmp_path):
    """Rank 0 never answers one worker in step 4: found, in the right step, but the answer
    lies among calls whose order and number depend on arrival, so not "high"."""
    v = _verdict(_run(tmp_path / "n", 1), _run(tmp_path / "f", 5, bug=(0, 4, "noanswer")))
    culprit = v["culprits"][0]
    assert (culprit["rank"], v["where"]["iteration"]) == (0, 4), v["summary"]
    assert v["confidence"]["level"] == "medium" and "arrival" in v["confidence"]["why"]


# ---------------------------------------------------------------- a death inside a free block
def _waitany_run(d, seed, death=None, ranks=4, steps=6):
    """Each step: two receives completed by MPI_Waitany, each unpacked by its own function
    in arrival order, then an MPI_Allreduce.  ``death``: (rank, step): that rank dies of
    SIGSEGV inside the step's first unpack (its frames stay open)."""
    from test_verdict_precision import calls, write_run
    rng = random.Random(seed)
    traces, endings = {}, {}
    for r in range(ranks):
        body, dead = [], False
        for s in range(1, steps + 1):
            faces = rng.sample(["unpack_west", "unpack_east"], 2)
            if death == (r, s):
                first = ("MPI_Waitany[count=2]", [])
                traces[(r, 0)] = calls(("main", ["MPI_Init", *body, ("exchange", [
                    "MPI_Irecv[src=-1,tag=1]", "MPI_Irecv[src=+1,tag=1]", first[0],
                    (faces[0], ["copy"], "open")], "open")], "open"))
                endings[r] = {"how": "signal", "signal": "SIGSEGV", "thread": 0}
                dead = True
                break
            inner = []
            for f in faces:
                inner += ["MPI_Waitany[count=2]", (f, ["copy"])]
            body += [("exchange", ["MPI_Irecv[src=-1,tag=1]", "MPI_Irecv[src=+1,tag=1]", *inner]),
                     "MPI_Allreduce[count=1,type=MPI_DOUBLE,op=MPI_SUM]"]
        if not dead:
            traces[(r, 0)] = calls(("main", ["MPI_Init", *body, "MPI_Finalize"]))
    return write_run(d, traces, endings)


@pytest.mark.parametrize("rank,step", [(1, 3), (3, 5)])
def test_a_death_inside_a_free_block_names_the_function_it_died_in(tmp_path, rank, step):
    """The block a dead trace had not finished is left out of the comparison, yet where
    it died is the calls it had open: the verdict's call path ends in the unpack."""
    from difftrace_mpi.engine.pipeline import analyze
    from test_verdict_precision import GRID
    normal = _waitany_run(tmp_path / "n", 1)
    faulty = _waitany_run(tmp_path / "f", 2, death=(rank, step))
    v = analyze(normal, faulty, GRID, lattices=False).verdict
    assert v["kind"] == "crash" and (v["culprits"][0]["rank"], v["culprits"][0]["thread"]) == (rank, 0)
    assert v["where"]["iteration"] == step
    path = v["where"]["call_path"].split(" > ")
    assert path[:2] == ["main", "exchange"] and path[2] in ("unpack_west", "unpack_east"), path


def test_a_block_holds_each_call_once_around_a_nested_free_body():
    """A call met in a block, then in a free body nested in it (a block of its own), then
    in the outer block again is one leaf of the outer set: the kernel's shortcut for a call
    its block took in last must search again once another block took it meanwhile."""
    flags = order.with_bodies(FLAGS, np.array([3], dtype=np.int32))      # unpack: a free body
    around = ev(1, 2, 0, 9, 0, 3, 9, 0, 0, 9, 0, 8, 0, 0)
    folded, how = order.fold(around, flags)
    assert folded.tolist() == [1, 2, 3, 0, 9, 0, 0, 8, 0, 0] and how.blocks == 2
    assert np.array_equal(folded, order.fold(ev(1, 2, 0, 3, 9, 0, 0, 8, 0, 0), flags)[0])
