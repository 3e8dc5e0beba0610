"""The class cap (--max-classes): a setting with more classes of distinct traces than the
cap is not clustered, the skip is stated, and everything else is what it was."""
import numpy as np
import pytest

import difftrace_mpi
from difftrace_mpi import cli, config
from difftrace_mpi.errors import DiffTraceError
from difftrace_mpi.stages.classify.classes import class_cap_note, dedupe, over_class_cap

from conftest import EXAMPLES, assert_same_h5, run_cli

FAULTY = EXAMPLES / "swapbug"


def class_counts(results):
    """Per setting (combo, attribute mode): the largest class count of any run and level."""
    return {(cname, aname): max(setting.level(level).jsm_classes[run].shape[0]
                                for level in ("thread", "process") for run in (0, 1))
            for cname, combo in results.combos.items() for aname, setting in combo.attrs.items()}


@pytest.fixture(scope="module")
def uncapped():
    return difftrace_mpi.analyze(EXAMPLES / "normal", FAULTY)


def test_a_cap_between_the_settings_keeps_those_within_it_unchanged(uncapped):
    counts = class_counts(uncapped)
    assert len(set(counts.values())) > 1, "the example must have settings of different class counts"
    cap = sorted(set(counts.values()))[0]           # the smallest count: those settings stay
    kept = {key for key, c in counts.items() if c <= cap}
    dropped = set(counts) - kept
    assert kept and dropped
    capped = difftrace_mpi.analyze(EXAMPLES / "normal", FAULTY, max_classes=cap)
    assert set(class_counts(capped)) == kept
    # the kept settings' rows are the uncapped rows of those settings, in the same order
    def rows(res, keys):
        return [r.as_dict() for r in res.rows if (r.combo, r.attributes) in keys]
    assert rows(capped, kept) == rows(uncapped, kept) and rows(capped, dropped) == []
    for key in kept:
        for level in ("thread", "process"):
            a, b = (res.combos[key[0]].attrs[key[1]].level(level) for res in (uncapped, capped))
            assert np.array_equal(a.scores, b.scores) and np.array_equal(a.jsm_classes[1], b.jsm_classes[1])
    assert capped.verdict == uncapped.verdict
    # a setting over the cap is not given a lattice either: its step never ran
    assert {key for key in counts if f"lattice {key[0]} {key[1]}" in capped.timings} == kept
    note = [n for n in capped.notes if "class cap" in n]
    assert len(note) == 1 and f"{len(dropped)} setting(s) not clustered" in note[0]
    assert f"class cap of {cap:,}" in note[0]
    for cname, aname in dropped:
        count = counts[(cname, aname)]
        assert f"{cname} {aname}: {count:,} classes" in note[0]
    for cname, aname in kept:
        assert f"{cname} {aname}:" not in note[0]


def test_a_cap_at_the_largest_count_changes_nothing(uncapped, tmp_path):
    cap = max(class_counts(uncapped).values())
    a, b = tmp_path / "default.h5", tmp_path / "at_cap.h5"
    difftrace_mpi.analyze(EXAMPLES / "normal", FAULTY, out=a)
    difftrace_mpi.analyze(EXAMPLES / "normal", FAULTY, out=b, max_classes=cap)
    assert_same_h5(a, b)
    assert not any("class cap" in n for n in difftrace_mpi.load(b).notes)


@pytest.mark.integration
def test_every_setting_over_the_cap_still_gives_the_verdict_and_the_diffnlr(uncapped, tmp_path):
    out = tmp_path / "r.h5"
    res = run_cli("analyze", EXAMPLES / "normal", FAULTY, "--out", out, "--max-classes", 1)
    assert res.returncode == 0, res.stderr
    assert "Ranking table: none (every setting has more classes than the class cap: see the notes)" in res.stdout
    culprit = uncapped.verdict["culprits"][0]
    assert f"diffNLR: rank {culprit['rank']} thread {culprit['thread']}" in res.stdout
    loaded = difftrace_mpi.load(out)
    assert loaded.rows == [] and loaded.verdict == uncapped.verdict
    assert all(not combo.attrs for combo in loaded.combos.values())
    lattice = run_cli("lattice", out)
    assert lattice.returncode == 2 and "none was clustered" in lattice.stderr and "Traceback" not in lattice.stderr
    report = run_cli("report", out, "-o", tmp_path / "r.html")
    assert report.returncode == 0, report.stderr


def test_over_class_cap_counts_the_classes_of_every_rank_together():
    """Rows split over two ranks, one row shared: the exact count, not a rank's or the sum."""
    def block(rows, runs, objs):
        csr = (np.array([0] + list(np.cumsum([len(r) for r in rows])), dtype=np.int64),
               np.array([i for r in rows for i in r], dtype=np.int64), np.ones(sum(map(len, rows)), np.int64))
        return dedupe(csr, np.array(runs), np.array(objs))
    one_process = block([[0]], [0], [0])        # the process level: one class, never over
    rank_a = block([[1], [2], [1, 2]], [1, 1, 1], [0, 1, 2])
    rank_b = block([[1, 2], [3]], [1, 1], [3, 4])       # [1, 2] also on rank_a: 4 classes in all
    pieces = [(rank_a, one_process), (rank_b, one_process)]
    levels = {"thread": 5, "process": 1}
    assert over_class_cap(pieces, levels, 4) is None
    assert over_class_cap(pieces, levels, 3) == (4, "thread", "faulty")
    # alone, rank_a's three rows leave objects 3 and 4 absent: the empty row is a class too
    assert over_class_cap([(rank_a, one_process)], levels, 3) == (4, "thread", "faulty")
    assert over_class_cap([(rank_a, one_process)], levels, 4) is None
    assert class_cap_note([], 4) is None
    note = class_cap_note([("11.mpi.K10 sing.actual", (4097, "process", "normal"))], 4096)
    assert note.startswith("1 setting(s) not clustered, more classes than the class cap of 4,096")
    assert "4,097 classes of process traces in the normal run" in note and "128.1 MiB" in note


def test_the_cap_must_be_positive():
    with pytest.raises(DiffTraceError, match="class cap"):
        difftrace_mpi.analyze(EXAMPLES / "normal", FAULTY, max_classes=0)
    parse = cli.build_parser().parse_args
    assert parse(["analyze", "n", "f"]).max_classes == config.MAX_CLASSES
    with pytest.raises(SystemExit):
        parse(["analyze", "n", "f", "--max-classes", "0"])


@pytest.mark.integration
@pytest.mark.parametrize("ranks", [2, 3])
def test_the_cap_is_rank_count_invariant_on_the_row_blocked_path(uncapped, tmp_path, ranks):
    """Every rank that unifies a task decides its skip alike: with every JSM on the
    collective row-blocked path, 2 and 3 ranks give 1 rank's file (a rank deciding
    otherwise would leave the others waiting in the row blocks)."""
    cap = sorted(set(class_counts(uncapped).values()))[0]
    outs = {}
    for n in (1, ranks):
        outs[n] = tmp_path / f"r{n}.h5"
        res = run_cli("analyze", EXAMPLES / "normal", FAULTY, "--out", outs[n], "--max-classes", cap,
                      "--row-block-min", 2, mpi=n, timeout=120)
        assert res.returncode == 0, res.stderr
    assert_same_h5(outs[1], outs[ranks])
    assert any("class cap" in n for n in difftrace_mpi.load(outs[ranks]).notes)
