"""Issue 4 acceptance: a synthetic LULESH-like run of 4,096 ranks x 8 threads (32,768
traces per run) analyses on 2 MPI ranks within this machine and names the perturbed traces."""
import json
import os
import sys

import h5py
import pytest

from conftest import ROOT, run_cli

sys.path.insert(0, str(ROOT / "bench"))
from synth_lulesh import write_run  # noqa: E402

pytestmark = pytest.mark.integration     # every test here starts processes


@pytest.mark.skipif(os.environ.get("DIFFTRACE_SKIP_SCALE") == "1", reason="DIFFTRACE_SKIP_SCALE=1")
def test_4096_ranks_by_8_threads_on_2_ranks(tmp_path):
    write_run(tmp_path / "normal", 4096, 8, 10)
    perturb = write_run(tmp_path / "faulty", 4096, 8, 10, faulty=True)
    out = tmp_path / "r.h5"
    res = run_cli("analyze", tmp_path / "normal", tmp_path / "faulty", "--out", out, "--json", mpi=2, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    table = json.loads(res.stdout)
    named_procs = {p["rank"] for p in table["consensus"]["processes"]}
    named_threads = {(t["rank"], t["thread"]) for t in table["consensus"]["threads"]}
    assert {perturb["hang_rank"], perturb["slow_rank"], perturb["extra_rank"]} <= named_procs
    assert (perturb["extra_rank"], perturb["extra_thread"]) in named_threads
    assert table["rows"][0]["top_processes"][0]["rank"] in (perturb["hang_rank"], perturb["slow_rank"])
    # the hang view puts the hung rank's main thread first, stuck in MPI_Waitall
    least = table["hang"]["least_progressed"][0]
    assert (least["rank"], least["thread"]) == (perturb["hang_rank"], 0)
    assert table["hang"]["stuck_in"][0]["call"] == "MPI_Waitall"
    with h5py.File(out, "r") as f:
        timing = dict(f["timing"].attrs)
        assert timing["mpi_ranks"] == 2
        assert f["objects/rank"].shape == (32768,)
        hung = list(zip(f["objects/rank"][()], f["objects/thread"][()])).index((perturb["hang_rank"], 0))
        assert f["objects/open_calls"][1, hung].decode().endswith("LagrangeNodal > CommSBN > MPI_Waitall")
    # two ranks, each well inside half of a 24 GiB machine
    assert max(timing["peak_rss_mb_rank0"], timing["peak_rss_mb_rank1"]) < 10 * 1024
