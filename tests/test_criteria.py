"""The verdict's order of candidates as named criteria (issue 37 item 2): each criterion
decides alone when every criterion before it is equal, the list in docs/verdict.md is the
list in the code, and ties are what only the last criterion separates."""
import re
from dataclasses import replace
from pathlib import Path

import pytest

from difftrace_mpi.stages.diagnose import criteria as C
from difftrace_mpi.stages.compare import divergence as dv
from difftrace_mpi.stages.diagnose.verdict import Divergence, build

ROOT = Path(__file__).resolve().parents[1]


def divergence(key, iteration=2, order=(1, 0), status=dv.DIFFERENT):
    loops = [("main", ["step"], iteration, 10)] if iteration is not None else []
    return Divergence(key, status, 5, 7, ["MPI_Send"], ["MPI_Recv"], ["main", "step"], loops, order=order)


def candidate(key=(1, 0), clock=3.0, group=C.LEFT_PATH_MAIN, **kw):
    return C.Candidate(clock, group, key, divergence(key, **kw), "why")


NO_EVIDENCE = C.Evidence({}, {})

# per criterion: (the candidate that must come first, the one after), equal on every criterion before
PAIRS = {
    "earliest clock": (candidate(clock=2.0, iteration=9), candidate(clock=3.0, iteration=1)),
    "earliest time step": (candidate(iteration=1, order=(9,)), candidate(iteration=2, order=(0,))),
    "main thread, then death, then worker": (candidate((5, 0), group=C.DIED, order=(9,)),
                                             candidate((1, 1), group=C.LEFT_PATH_WORKER, order=(0,))),
    "program order": (candidate((7, 0), order=(0, 5)), candidate((1, 0), order=(1, 0))),
    "most waited on": (candidate((7, 0)), candidate((1, 0))),
    "died": (candidate((6, 0)), candidate((2, 0))),
    "rank and thread": (candidate((1, 0)), candidate((1, 1))),
}
EVIDENCE = {"most waited on": C.Evidence({7: 3, 1: 1}, {1: {"how": "signal"}}),
            "died": C.Evidence({}, {6: {"how": "signal"}})}


def test_every_criterion_has_a_case():
    assert [c.name for c in C.CRITERIA] == list(PAIRS)


@pytest.mark.parametrize("name", list(PAIRS))
def test_each_criterion_decides_alone(name):
    first, second = PAIRS[name]
    evidence = EVIDENCE.get(name, NO_EVIDENCE)
    at = [c.name for c in C.CRITERIA].index(name)
    a, b = C.order_key(first, evidence), C.order_key(second, evidence)
    assert a[:at] == b[:at], "the pair must be equal on every criterion before"
    assert a[at] < b[at]
    assert C.ordered([second, first], evidence) == [first, second]


def test_the_docs_list_the_criteria_in_order():
    text = (ROOT / "docs" / "verdict.md").read_text()
    rows = re.findall(r"^\| (\d) \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$", text, re.M)
    assert [(int(n), name.strip(), compares.strip(), why.strip()) for n, name, compares, why in rows] == \
        [(i, c.name, c.compares, c.why) for i, c in enumerate(C.CRITERIA, 1)]


def test_ties_are_what_only_the_last_criterion_separates():
    a, b, c = candidate((1, 0)), candidate((2, 0)), candidate((3, 0), order=(2,))
    ordered = C.ordered([c, b, a], NO_EVIDENCE)
    assert ordered == [a, b, c] and C.tied_with_first(ordered, NO_EVIDENCE) == [a, b]
    waited = C.Evidence({2: 1}, {})
    assert C.tied_with_first(C.ordered([a, b], waited), waited) == [b]


def test_the_verdict_names_the_first_candidate_and_counts_ties():
    """build() orders its candidates by the criteria: two main threads that left the path
    at the same point, a third a step earlier on a later clock's worker."""
    objects = [(0, 0), (1, 0), (2, 0), (2, 1)]
    divs = {0: replace(divergence((0, 0), iteration=4), clock=5),
            1: replace(divergence((1, 0), iteration=4), clock=5),
            3: replace(divergence((2, 1), iteration=1), clock=6)}
    v = build(objects, divs, [False] * 4, {}, [[""] * 4, [""] * 4], False)
    assert [(c["rank"], c["thread"]) for c in v["culprits"]] == [(0, 0), (1, 0), (2, 1)]
    assert (v["tied"], v["same_point"], v["candidates"]) == (2, 2, 3)


# -- the ranking table's row order ----------------------------------------------------------
def test_the_docs_list_the_row_order():
    from difftrace_mpi.stages.classify.ranking import ROW_ORDER
    text = (ROOT / "docs" / "verdict.md").read_text()
    rows = re.findall(r"^\| (\d) \| ([^|]+) \| ([^|]+) \|$", text, re.M)
    assert [(int(n), name.strip(), why.strip()) for n, name, why in rows] == \
        [(i, c.name, c.why) for i, c in enumerate(ROW_ORDER, 1)]


def test_each_row_criterion_decides_alone():
    from types import SimpleNamespace
    from difftrace_mpi.stages.classify.ranking import ROW_ORDER, ordered
    base = dict(top_threads=[((1, 0), 1.0)], top_processes=[], changed_clustering=True, structured=True,
                localised=True, bscore=0.5, grid_index=3)
    worse = {"names a suspect": dict(top_threads=[]), "clustering changed": dict(changed_clustering=False),
             "normal run structured": dict(structured=False), "suspects localise": dict(localised=False),
             "lowest B-score": dict(bscore=0.6), "grid order": dict(grid_index=4)}
    assert list(worse) == [c.name for c in ROW_ORDER]
    for i, criterion in enumerate(ROW_ORDER):
        good, bad = SimpleNamespace(**base), SimpleNamespace(**{**base, **worse[criterion.name]})
        # everything a later criterion looks at favours the bad row: only this one decides
        for later in ROW_ORDER[i + 1:]:
            setattr(good, *next(iter(worse[later.name].items())))
        assert ordered([bad, good]) == [good, bad], criterion.name
