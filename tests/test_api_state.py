"""No process-global state left behind by an API call (issue 37 item 4): a memory budget
given to one call, or the default one computed during it, is not the next call's."""
from difftrace_mpi import api
from difftrace_mpi.readers import budget


def test_a_calls_memory_budget_is_not_left_to_the_next(examples):
    budget.set_memory_budget(None)                  # the default, computed at the next use
    api.analyze(examples / "normal", examples / "dlbug", memory_budget="64G")
    assert budget._budget is budget._UNSET and budget._source is None
    budget.set_memory_budget("32G", source="the caller's own")
    api.analyze(examples / "normal", examples / "dlbug", memory_budget="64G")
    assert budget.memory_budget() == 32 << 30 and budget.budget_source() == "the caller's own"
    budget.set_memory_budget(None)


def test_the_budget_binds_inside_the_call(examples):
    seen = []
    real = budget.memory_budget

    def spy():
        seen.append(real())
        return seen[-1]
    budget.memory_budget = spy
    try:
        api.analyze(examples / "normal", examples / "dlbug", memory_budget="48G")
    finally:
        budget.memory_budget = real
    assert seen and set(seen) == {48 << 30}


def test_results_are_made_once(examples, tmp_path):
    """No field of a Results, nor of its settings, is set after the analysis or store.read
    made it (issue 37: frozen dataclasses, made once)."""
    import dataclasses
    import pytest
    from difftrace_mpi import load
    fresh = api.analyze(examples / "normal", examples / "dlbug", out=tmp_path / "r.h5")
    with load(tmp_path / "r.h5") as back:
        for results in (fresh, back):
            for name in ("verdict", "notes", "rows", "combos", "stopped"):
                with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign"):
                    setattr(results, name, None)
            combo = next(iter(results.combos.values()))
            for part, name in ((combo, "nlr"), (combo, "attrs"), (next(iter(combo.attrs.values())), "lattices")):
                with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign"):
                    setattr(part, name, None)
        assert back.source == str(tmp_path / "r.h5") and fresh.source is None
