"""What the root keeps of the NLRs (stages.classify.nlr_keep): every trace's length, sameness and
last tokens from summaries; whole NLRs of the traces the verdict names first, up to a
token budget; the same on 1 and 2 MPI ranks."""
import numpy as np
import pytest

import difftrace_mpi
from difftrace_mpi import store
from difftrace_mpi.errors import DiffTraceError
from difftrace_mpi.stages.classify import nlr_keep
from difftrace_mpi.stages.classify.classes import dedupe

from conftest import EXAMPLES, assert_same_h5, run_cli


def _pair(values):
    ids = np.asarray(values, dtype=np.int64)
    return ids, np.arange(len(ids), dtype=np.int64)


def test_combine_lengths_sameness_and_tails_across_ranks():
    # rank A: object 0 equal in both runs, object 1 changed; rank B: object 2 only in the
    # faulty run (empty normal), object 3 empty in the faulty run and absent from the normal
    a = dedupe([_pair([1, 2, 3, 4]), _pair([1, 2, 3, 4]), _pair([5]), _pair([5, 6])], [0, 1, 0, 1], [0, 0, 1, 1])
    b = dedupe([_pair([7, 8]), _pair([])], [1, 1], [2, 3])
    lengths, same, tails = nlr_keep.combine([nlr_keep.summary(a), nlr_keep.summary(b)], 4)
    assert lengths.tolist() == [[4, 1, 0, 0], [4, 2, 2, 0]]
    assert same.tolist() == [True, False, False, True]
    assert [t[0].tolist() for t in tails[1]] == [[2, 3, 4], [5, 6], [7, 8], []]
    assert [t[1].tolist() for t in tails[1]] == [[1, 2, 3], [0, 1], [0, 1], []]
    assert tails[0][2][0].tolist() == [] and tails[0][0][0].tolist() == [2, 3, 4]


def test_keep_set_takes_the_priority_order_within_the_budget():
    lengths = [np.array([[10, 10, 10, 10], [10, 30, 10, 10]])]
    same = [np.array([True, False, True, True])]
    # costs: 10, 40, 10, 10 (an NLR equal in both runs counted once)
    assert nlr_keep.keep_set([1, 0, 2, 3], lengths, same, 50, 4).tolist() == [0, 1]
    assert nlr_keep.keep_set([1, 0, 2, 3], lengths, same, 70, 4).tolist() == [0, 1, 2, 3]
    assert nlr_keep.keep_set([2, 1, 0, 3], lengths, same, 45, 4).tolist() == [2]       # a prefix: 1 does not fit
    assert nlr_keep.keep_set([2, 1, 0, 3], lengths, same, 50, 4).tolist() == [1, 2]
    # the first wanted is kept whatever it costs; None keeps everything
    assert nlr_keep.keep_set([1, 0, 2, 3], lengths, same, 0, 4).tolist() == [1]
    assert nlr_keep.keep_set([3, 2, 1, 0], lengths, same, None, 4).tolist() == [0, 1, 2, 3]
    # a second setting adds its tokens to every object's cost
    assert nlr_keep.keep_set([0, 2, 3, 1], lengths * 2, same * 2, 40, 4).tolist() == [0, 2]


def test_kept_nlrs_hold_exactly_the_wanted_objects():
    a = dedupe([_pair([1, 2, 3]), _pair([1, 2, 3]), _pair([4]), _pair([4, 4])], [0, 1, 0, 1], [0, 0, 1, 1])
    b = dedupe([_pair([9]), _pair([9, 9])], [0, 1], [2, 2])
    wanted = np.array([1, 2])
    per_run = nlr_keep.kept_nlrs([nlr_keep.kept_part(a, wanted), nlr_keep.kept_part(b, wanted)], 3, wanted)
    for run, expected in ((0, {1: [4], 2: [9]}), (1, {1: [4, 4], 2: [9, 9]})):
        rows, index = per_run[run]
        assert index[0] == -1
        assert {obj: rows[index[obj]][0].tolist() for obj in (1, 2)} == expected


def _every_nlr(results):
    return {(c, run, obj): tuple(a.tolist() for a in results.nlr_of(c, run, obj))
            for c in results.combos for run in (0, 1) for obj in range(len(results.objects))}


@pytest.fixture(scope="module")
def all_kept():
    return difftrace_mpi.analyze(EXAMPLES / "normal", EXAMPLES / "swapbug", keep_nlrs=None)


def test_summaries_agree_with_the_whole_nlrs(all_kept):
    for name, combo in all_kept.combos.items():
        for obj in range(len(all_kept.objects)):
            (n_ids, n_counts), (f_ids, f_counts) = (all_kept.nlr_of(name, run, obj) for run in (0, 1))
            assert combo.lengths[:, obj].tolist() == [len(n_ids), len(f_ids)]
            assert combo.same[obj] == (np.array_equal(n_ids, f_ids) and np.array_equal(n_counts, f_counts))
            assert combo.tails[1][obj][0].tolist() == f_ids[-3:].tolist()
            assert combo.tails[1][obj][1].tolist() == f_counts[-3:].tolist()
    assert not all_kept.combos[all_kept.best_combo()].same.all()


def test_a_small_budget_keeps_the_culprit_first_and_says_what_is_missing(all_kept, tmp_path):
    everything = _every_nlr(all_kept)
    culprit = all_kept.culprit_keys(1)[0]
    one_trace = sum(int(c.lengths[:, all_kept.object_index(culprit)].sum()) for c in all_kept.combos.values())
    out = tmp_path / "small.h5"
    small = difftrace_mpi.analyze(EXAMPLES / "normal", EXAMPLES / "swapbug", keep_nlrs=one_trace, out=out)
    with store.read(out) as back:
        for res in (small, back):
            assert res.nlrs_kept(culprit)
            kept = [key for key in res.objects if res.nlrs_kept(key)]
            assert kept == [culprit]
            obj = res.object_index(culprit)
            for c in res.combos:
                for run in (0, 1):
                    assert tuple(a.tolist() for a in res.nlr_of(c, run, obj)) == everything[(c, run, obj)]
            other = next(i for i, key in enumerate(res.objects) if key != culprit)
            with pytest.raises(DiffTraceError, match="--keep-nlrs"):
                res.nlr_of(res.best_combo(), 1, other)
            # what does not need whole NLRs still works for every trace
            assert res.differing_combo(other) == all_kept.differing_combo(other)
            assert res.nlr_tail(other) == all_kept.nlr_tail(other)
            assert res.verdict == all_kept.verdict


def test_the_default_budget_keeps_a_small_run_whole(all_kept):
    default = difftrace_mpi.analyze(EXAMPLES / "normal", EXAMPLES / "swapbug")
    assert _every_nlr(default) == _every_nlr(all_kept)


def test_a_negative_budget_is_refused():
    with pytest.raises(DiffTraceError, match="NLR token budget"):
        difftrace_mpi.analyze(EXAMPLES / "normal", EXAMPLES / "swapbug", keep_nlrs=-1)


@pytest.mark.integration
def test_the_kept_nlrs_do_not_depend_on_the_rank_count(tmp_path):
    outs = []
    for ranks in (1, 2):
        outs.append(tmp_path / f"r{ranks}.h5")
        res = run_cli("analyze", EXAMPLES / "normal", EXAMPLES / "dlbug", "--keep-nlrs", "60", "--out", outs[-1],
                      mpi=ranks)
        assert res.returncode == 0, res.stderr
    assert_same_h5(*outs)
    with store.read(outs[0]) as res:
        kept = [key for key in res.objects if res.nlrs_kept(key)]
        assert 1 <= len(kept) < len(res.objects)
        assert res.culprit_keys(1)[0] in kept


def test_the_option_takes_a_number_or_all(tmp_path):
    from difftrace_mpi.cli.options import TOKEN_BUDGET
    assert TOKEN_BUDGET("all") is None and TOKEN_BUDGET("ALL") is None
    assert TOKEN_BUDGET("1000") == 1000
    with pytest.raises(Exception, match="tokens"):
        TOKEN_BUDGET("-5")


def test_views_say_which_diffnlrs_the_results_did_not_keep(all_kept, tmp_path):
    import dataclasses
    import io
    from difftrace_mpi.views.report import build_report
    from difftrace_mpi.views.text import print_analysis
    out = tmp_path / "r.h5"
    store.write(all_kept, out)
    with store.read(out) as res:
        culprit = res.culprit_keys(1)[0]
        obj = res.object_index(culprit)
        # as if the budget had left the culprit out (Results are frozen: a copy with those NLRs)
        res = dataclasses.replace(res, combos={
            name: dataclasses.replace(combo, nlr=tuple((rows, np.where(np.arange(len(index)) == obj, -1, index))
                                                       for rows, index in combo.nlr))
            for name, combo in res.combos.items()})
        text = io.StringIO()
        print_analysis(res, diffnlrs=1, stream=text)
        page = build_report(res)
    line = f"diffNLR of rank {culprit[0]} thread {culprit[1]} not shown"
    assert line in text.getvalue() and "--keep-nlrs" in text.getvalue()
    assert "diffNLR: rank" not in text.getvalue() and f"rank {culprit[0]} thread {culprit[1]} (" not in text.getvalue()
    assert line in page
