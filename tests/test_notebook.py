"""The example notebook (examples/notebook/explore_results.ipynb) runs from a results file
written by ``analyze --out`` and shows the verdict, tables, figures and the events of a run."""
import os

import pytest

from conftest import EXAMPLES, ROOT

NOTEBOOK = ROOT / "examples" / "notebook" / "explore_results.ipynb"


def _outputs(nb):
    return [out for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])]


@pytest.mark.integration
def test_example_notebook_shows_a_table_and_a_figure(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("pandas")
    pytest.importorskip("matplotlib")
    import difftrace_mpi

    results = tmp_path / "swapbug.h5"
    difftrace_mpi.analyze(EXAMPLES / "normal", EXAMPLES / "swapbug", out=results,
                          filters=["11.mpi"], attributes=["sing.noFreq", "sing.actual"])
    monkeypatch.setenv("DIFFTRACE_RESULTS", str(results))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()

    outputs = _outputs(nb)
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    with difftrace_mpi.load(results) as r:
        assert r.verdict["summary"] in text           # it read the file it was given
        culprit = r.verdict["culprits"][0]
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("<table" in h and "bscore" in h for h in html), "no ranking table in the notebook's output"
    assert any("dnlr" in h and f"rank {culprit['rank']} thread {culprit['thread']}" in h for h in html)
    assert any(h.lstrip().startswith('<div class="difftrace-results"><p><b>Verdict: ') for h in html), \
        "the Results do not show verdict first"
    assert any("<table" in h and "depth" in h and "function" in h and "MPI_Init" in h for h in html), \
        "no events table in the notebook's output"
    pictures = [o["data"]["image/png"] for o in outputs if "image/png" in o.get("data", {})]
    assert len(pictures) >= 2, "the notebook's two figures are missing"
