"""Tests of the odd/even sort simulator that generates examples/traces/oddeven/."""
import filecmp
import importlib.util
import os
import subprocess
import sys

import pytest

from difftrace_mpi.readers import load_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "generate_oddeven.py")


def _load():
    spec = importlib.util.spec_from_file_location("generate_oddeven", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gen = _load()
N = 16
MPI_HEAD = ["MPI_Init", "MPI_Comm_rank", "MPI_Comm_size"]


@pytest.fixture(scope="module")
def normal():
    return gen.simulate(N, "none")


@pytest.fixture(scope="module")
def swap():
    return gen.simulate(N, "swap", bug_rank=5, bug_iter=7)


@pytest.fixture(scope="module")
def dl():
    return gen.simulate(N, "dl", bug_rank=5, bug_iter=7)


def entries(st):
    return [name for kind, name in st.calls if kind == ">"]


def mpi_seq(st):
    return [n for n in entries(st) if n.startswith("MPI_")]


def check_nesting(st):
    """Every '<' closes the innermost open call; returns the calls left open."""
    stack = []
    for kind, name in st.calls:
        if kind == ">":
            stack.append(name)
        else:
            assert stack and stack[-1] == name
            stack.pop()
    return stack


def check_message_consistency(result):
    sent = {m.seq: m for m in result.messages}
    received = []
    for st in result.ranks:
        for m in st.received:
            assert m.seq in sent and sent[m.seq] is m      # every message received was sent
            assert m.dst == st.rank
            received.append(m.seq)
        for m in st.sent:
            assert m.src == st.rank
        assert len(st.sent) == entries(st).count("MPI_Send")
        recv_calls = entries(st).count("MPI_Recv")
        assert len(st.received) == recv_calls - (0 if st.finished else 1)
    assert len(received) == len(set(received))               # none received twice
    undelivered = {m.seq for m in result.undelivered}
    assert undelivered.isdisjoint(received)
    assert undelivered | set(received) == set(sent)


def check_blocked_for_real(result):
    """A rank left blocked waits on a receive nothing queued can match."""
    queued = {(m.src, m.dst, m.tag) for m in result.undelivered}
    for st in result.ranks:
        if st.finished:
            assert st.blocked_on is None
            continue
        op = st.blocked_on
        assert isinstance(op, gen.Recv)
        assert (op.src, st.rank, op.tag) not in queued
        assert st.stack == ["main", "oddEvenSort", "MPI_Recv"]


def exchanges(seq):
    """MPI sequence between Comm_size and Finalize, as pairs."""
    body = seq[3:-1] if seq[-1:] == ["MPI_Finalize"] else seq[3:]
    return [tuple(body[i:i + 2]) for i in range(0, len(body), 2)]


# ----------------------------------------------------------------------------- normal

def test_find_ptr_partners():
    assert [gen.find_ptr(0, r, 4) for r in range(4)] == [1, 0, 3, 2]
    assert [gen.find_ptr(1, r, 4) for r in range(4)] == [-1, 2, 1, -1]
    for phase in range(N):
        for r in range(N):
            p = gen.find_ptr(phase, r, N)
            if p >= 0:
                assert gen.find_ptr(phase, p, N) == r and abs(p - r) == 1


def test_normal_all_complete_and_well_nested(normal):
    assert not normal.deadlock and normal.blocked == []
    assert normal.undelivered == []
    for st in normal.ranks:
        assert st.finished
        assert check_nesting(st) == []
        assert entries(st)[0] == "main" and st.calls[-1] == ("<", "main")
        assert entries(st).count("findPtr") == N          # every phase, partner or not
    check_message_consistency(normal)


def test_normal_exchange_counts_and_orders(normal):
    for st in normal.ranks:
        seq = mpi_seq(st)
        assert seq[:3] == MPI_HEAD and seq[-1] == "MPI_Finalize"
        pairs = exchanges(seq)
        expected_n = 8 if st.rank in (0, N - 1) else 16
        assert st.exchanges == expected_n
        assert len(pairs) == expected_n
        expected_pair = ("MPI_Send", "MPI_Recv") if st.rank % 2 == 0 else ("MPI_Recv", "MPI_Send")
        assert set(pairs) == {expected_pair}
        assert entries(st).count("mergeSplit") == expected_n


def test_normal_really_sorts(normal):
    before = [x for st in normal.ranks for x in st.data_in]
    after = [x for st in normal.ranks for x in st.data_out]
    assert after == sorted(before)


def test_four_ranks_match_table_iii():
    res = gen.simulate(4, "none")
    counts = [len(exchanges(mpi_seq(st))) for st in res.ranks]
    assert counts == [2, 4, 4, 2]


def test_odd_number_of_ranks_terminates():
    res = gen.simulate(5, "none")
    assert not res.deadlock
    after = [x for st in res.ranks for x in st.data_out]
    assert after == sorted(x for st in res.ranks for x in st.data_in)


# ----------------------------------------------------------------------------- swapBug

def test_swapbug_rank5_sequence(swap):
    seq = mpi_seq(swap.ranks[5])
    assert seq == (MPI_HEAD + ["MPI_Recv", "MPI_Send"] * 7 + ["MPI_Send", "MPI_Recv"] * 9
                   + ["MPI_Finalize"])


def test_swapbug_all_finish(swap, normal):
    assert not swap.deadlock
    for st in swap.ranks:
        assert st.finished and check_nesting(st) == []
        if st.rank != 5:
            assert st.calls == normal.ranks[st.rank].calls      # only rank 5 changed
    check_message_consistency(swap)


def test_swap_on_even_rank_deadlocks_by_itself():
    # An even rank that receives first meets its (odd) partner that also receives first.
    res = gen.simulate(N, "swap", bug_rank=4, bug_iter=3)
    assert res.deadlock and 4 in res.blocked
    check_blocked_for_real(res)
    check_message_consistency(res)


# ----------------------------------------------------------------------------- dlBug

def test_dlbug_rank5(dl):
    st = dl.ranks[5]
    assert not st.finished
    seq = mpi_seq(st)
    assert seq == MPI_HEAD + ["MPI_Recv", "MPI_Send"] * 7 + ["MPI_Recv"]
    assert "MPI_Finalize" not in seq
    assert st.exchanges == 7
    assert check_nesting(st) == ["main", "oddEvenSort", "MPI_Recv"]
    assert st.blocked_on.tag == gen.WRONG_TAG


def test_dlbug_neighbours_blocked_and_consistent(dl):
    assert dl.deadlock
    assert {4, 5, 6} <= set(dl.blocked)
    check_blocked_for_real(dl)
    check_message_consistency(dl)
    for st in dl.ranks:
        open_calls = check_nesting(st)
        if st.finished:
            assert open_calls == [] and mpi_seq(st)[-1] == "MPI_Finalize"
        else:
            assert "MPI_Finalize" not in mpi_seq(st)
            assert open_calls == ["main", "oddEvenSort", "MPI_Recv"]


def test_dlbug_no_rank_finishes_that_could_not(dl, normal):
    # A finished rank did exactly what it does in the normal run (same calls), and
    # every rank got as far as its messages allowed: the prefix matches the normal run.
    for st in dl.ranks:
        ref = normal.ranks[st.rank].calls
        if st.finished:
            assert st.calls == ref
        elif st.rank != 5:
            assert st.calls == ref[:len(st.calls)]


def test_dlbug_rank5_is_the_source(dl):
    # Every blocked rank other than 5 waits on a rank that is itself blocked.
    for st in dl.ranks:
        if not st.finished and st.rank != 5:
            assert not dl.ranks[st.blocked_on.src].finished


# ----------------------------------------------------------------------------- files

@pytest.mark.parametrize("sub,bug", gen.BUNDLED)
def test_bundled_examples_match_generator(tmp_path, sub, bug):
    bundled = os.path.join(gen.BUNDLED_DIR, sub)
    gen.write_run(gen.simulate(N, bug, 5, 7, gen.DEFAULT_SEED), str(tmp_path))
    ours, theirs = sorted(os.listdir(tmp_path)), sorted(os.listdir(bundled))
    assert ours == theirs
    match, mismatch, errors = filecmp.cmpfiles(bundled, str(tmp_path), ours, shallow=False)
    assert mismatch == [] and errors == []


def test_bundled_runs_read_back(dl):
    run = load_run(os.path.join(gen.BUNDLED_DIR, "dlbug"))
    assert [t.key for t in run.traces] == [(r, 0) for r in range(N)]
    for t in run.traces:
        st = dl.ranks[t.rank]
        assert t.complete == st.finished
        calls = [(">", t.names[v]) if v else ("<", None) for v in t.events.tolist()]
        assert [(k, n if k == ">" else None) for k, n in st.calls] == calls
        if not st.finished:
            assert "3 calls still open at the end: main > oddEvenSort > MPI_Recv" in t.notes
    with open(os.path.join(gen.BUNDLED_DIR, "dlbug", "r5.t0.txt"), encoding="utf-8") as fh:
        assert fh.readline() == "# incomplete\n"


@pytest.mark.integration
def test_command_line(tmp_path):
    out = tmp_path / "dl"
    (tmp_path / "dl").mkdir()
    (out / "r99.t0.txt").write_text("stale\n")
    proc = subprocess.run([sys.executable, SCRIPT, str(out), "--ranks", "8", "--bug", "dl",
                           "--bug-rank", "2", "--bug-iter", "3", "-q"],
                          capture_output=True, text=True, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    run = load_run(out)
    assert [t.key for t in run.traces] == [(r, 0) for r in range(8)]
    assert not run.traces[2].complete
    bad = subprocess.run([sys.executable, SCRIPT, str(out), "--bug-rank", "20", "--bug", "dl"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "bug rank" in bad.stderr
