"""The examples in the public API's docstrings run, on the bundled examples, and say what
the code does (numpydoc ``Examples`` sections; docs/api.md points at them)."""
import doctest

import pytest

from conftest import ROOT
from difftrace_mpi import api


@pytest.mark.parametrize("name", ["analyze", "load", "diffnlr", "load_run"])
def test_api_examples_run(name, monkeypatch):
    monkeypatch.chdir(ROOT)                 # the examples name the bundled runs relative to the top folder
    finder = doctest.DocTestFinder()
    tests = [t for t in finder.find(getattr(api, name), name, globs={}) if t.examples]
    assert tests, f"api.{name} has no example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0 and result.attempted >= 3, result
