"""The Slurm scripts with difftrace_mpi installed by pip (issue 39 item 1), under a real Slurm.

``slurm/analyze.sbatch`` and ``slurm/trace-and-analyze.sbatch`` run the checkout's package
when ./setup.sh built its kernels in place (tests/test_slurm.py, test_slurm_timelimit.py),
and otherwise the package a user installed with pip into an environment of their own. Here
that environment is a venv in a temporary directory with difftrace_mpi pip-installed from a
copy of the checkout (``test_install._venv_reading_ours``: it reads this venv's dependencies,
pip's MPICH included; every kernel seeded in pip's build directory, so nothing compiles),
and each job is submitted from that copy, whose kernels are NOT built: a job that imported
the copy's package (``python -m`` puts the working directory first on sys.path;
``PYTHONPATH=$PROJECT`` did too) would fail with the kernels missing. No PYTHONPATH, no
``PROJECT``, and ``PATH`` holds the system's directories, not this venv's. Every job's
results must equal those of the checkout's own one-rank analysis, and the copy's package
must never have been imported (no ``__pycache__`` appears in it).

The installed package is found four ways: the venv activated in the submitting shell (its
``bin`` on PATH), ``VENV``, ``DIFFTRACE`` (its command), and a ``python`` on PATH alone (no
``difftrace-mpi`` command); with none of them the job ends at once with one line, exit 2.
trace-and-analyze.sbatch (a stand-in tracer that writes the bundled dlbug traces) checks the
installed analyzer before tracing, and gives its two sruns their own ``--mpi``:
``MPI_PLUGIN`` the traced step's, ``ANALYZE_MPI_PLUGIN`` (default pmi2) the analysis'.

Cost: about 30 s (the pip install, 3 s; eight jobs of 1-4 s each).
"""
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time

import numpy as np
import pytest

from conftest import EXAMPLES, ROOT, h5_contents, run_cli
from test_install import _built_kernels, _copy_checkout, _env, _run, _venv_reading_ours
from test_slurm import SBIN_PATH, WHY_NOT, LocalSlurm
from test_slurm_timelimit import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")]

ANALYZE = ROOT / "slurm" / "analyze.sbatch"
TRACE_AND_ANALYZE = ROOT / "slurm" / "trace-and-analyze.sbatch"
NORMAL, FAULTY = "examples/traces/oddeven/normal", "examples/traces/oddeven/dlbug"   # relative to the copy
RANKS = 2
# the system's directories only: Slurm's commands, sh, cp; not this checkout's venv
SYSTEM_PATH = os.pathsep.join(dict.fromkeys(
    [os.path.dirname(shutil.which(b, path=SBIN_PATH) or "/usr/bin/sbatch") for b in ("srun", "sbatch")]
    + ["/usr/local/bin", "/usr/bin", "/bin"]))


@pytest.fixture(scope="module")
def cluster():
    c = LocalSlurm()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """{venv, site, clone}: difftrace_mpi pip-installed into a venv from ``clone``, a copy of
    the checkout without built kernels (left so: pip builds outside the tree)."""
    tmp = tmp_path_factory.mktemp("installed")
    clone, venv, build = tmp / "clone", tmp / "venv", tmp / "build"
    _copy_checkout(clone)
    python, site = _venv_reading_ours(venv)
    kernels = build / f"lib.{sysconfig.get_platform()}-{sys.implementation.cache_tag}" / "difftrace_mpi" / "kernels"
    kernels.mkdir(parents=True)
    later = time.time() + 5                 # newer than their sources: build_ext takes them as built
    for so in _built_kernels().values():
        shutil.copyfile(so, kernels / so.name)
        os.utime(kernels / so.name, (later, later))
    _run([python, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps", clone], tmp,
         dict(_env(), DIFFTRACE_MPI_BUILD_DIR=str(build)))
    assert (venv / "bin" / "difftrace-mpi").exists()
    assert not list((clone / "difftrace_mpi" / "kernels").glob("*.so"))
    # nothing on the system's PATH finds difftrace_mpi by itself (else the cases below prove nothing)
    assert shutil.which("difftrace-mpi", path=SYSTEM_PATH) is None
    for py in ("python", "python3"):
        found = shutil.which(py, path=SYSTEM_PATH)
        if found:
            probe = subprocess.run([found, "-c", "import difftrace_mpi"], cwd=tmp, capture_output=True,
                                   env=dict(_env(), PATH=SYSTEM_PATH))
            assert probe.returncode != 0, f"{found} imports difftrace_mpi without the installed venv"
    return {"venv": venv, "site": site, "clone": clone}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The checkout's own analysis of the same runs, on one rank."""
    out = tmp_path_factory.mktemp("reference") / "ref.h5"
    res = run_cli("analyze", EXAMPLES / "normal", EXAMPLES / "dlbug", "--out", out)
    assert res.returncode == 0, res.stderr
    return out


def assert_same_results(a, b):
    """The same results file but for the runs' paths (``@normal``, ``@faulty``) and /timing."""
    ca, cb = ({k: v for k, v in h5_contents(p).items() if k not in ("@normal", "@faulty")} for p in (a, b))
    assert ca.keys() == cb.keys(), sorted(set(ca) ^ set(cb))[:20]
    differ = [k for k in ca if not np.array_equal(np.asarray(ca[k]), np.asarray(cb[k]))]
    assert not differ, differ[:20]


def job_env(cluster, path=(), **variables):
    """The submitting shell's environment: the cluster's, without PYTHONPATH or this venv on
    PATH, with ``path`` before the system's directories."""
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "PROJECT", "VENV", "DIFFTRACE", "MPI_PLUGIN", "ANALYZE_MPI_PLUGIN")
    env = {k: v for k, v in cluster.env.items() if k not in drop}
    env["PATH"] = os.pathsep.join([*map(str, path), SYSTEM_PATH])
    env.update({k: str(v) for k, v in variables.items()})
    return env


def submit(cluster, clone, script, log, env, *sbatch_args):
    """sbatch from the copy (its submit directory and working directory); waits for the job
    to end (polled: sbatch --wait would add up to 10 s to each) and returns {state, exit
    (Slurm's ExitCode, "0:0"), text (the log)}."""
    res = cluster.run("sbatch", "--parsable", "--time=10", f"--output={log}", f"--chdir={clone}", *sbatch_args,
                      script, env=env, cwd=clone)
    assert res.returncode == 0, f"{res.stdout}{res.stderr}"
    job = {"id": res.stdout.strip().split(";")[0], "log": log}
    wait_for(cluster, [job], 240)
    return job


def assert_clone_never_imported(clone):
    cached = sorted(str(p.relative_to(clone)) for p in (clone / "difftrace_mpi").rglob("__pycache__"))
    assert not cached, f"the copy's unbuilt package was imported: {cached}"


def stand_in_tracer(tmp_path, *lines):
    """An executable called as trace-and-analyze calls the tracer, ``TRACER -d DIR APP ARGS``:
    runs ``lines`` (with $dir), then the program."""
    tracer = tmp_path / "parlot-run"
    tracer.write_text("#!/bin/sh\ndir=$2; shift 2\n" + "".join(line + "\n" for line in lines) + 'exec "$@"\n')
    tracer.chmod(0o755)
    return tracer


def python_only(tmp_path, venv):
    """A directory with a ``python`` that is the venv's, and no difftrace-mpi command."""
    d = tmp_path / "python-only"
    d.mkdir()
    (d / "python").write_text(f'#!/bin/sh\nexec "{venv}/bin/python" "$@"\n')
    (d / "python").chmod(0o755)
    return d


@pytest.mark.parametrize("how", ["activated", "VENV", "DIFFTRACE", "python"])
def test_analyze_sbatch_runs_the_installed_package(cluster, installed, reference, tmp_path, how):
    venv, clone = installed["venv"], installed["clone"]
    out, log = tmp_path / "results.h5", tmp_path / "analyze.log"
    common = dict(NORMAL=NORMAL, FAULTY=FAULTY, OUT=out, NTASKS=RANKS)
    if how == "activated":            # source venv/bin/activate; sbatch ...
        env, using = job_env(cluster, [venv / "bin"], VIRTUAL_ENV=venv, **common), f"installed, {venv}/bin/difftrace-mpi"
    elif how == "VENV":
        env, using = job_env(cluster, VENV=venv, **common), f"installed, {venv}/bin/difftrace-mpi"
    elif how == "DIFFTRACE":
        env, using = job_env(cluster, DIFFTRACE=venv / "bin" / "difftrace-mpi", **common), "DIFFTRACE="
    else:
        d = python_only(tmp_path, venv)
        env, using = job_env(cluster, [d], **common), f"installed, python {d}/python (no difftrace-mpi on PATH)"
    job = submit(cluster, clone, ANALYZE, log, env, f"--ntasks={RANKS}")
    text = job["text"]
    assert (job["state"], job["exit"]) == ("COMPLETED", "0:0"), text
    assert f"difftrace_mpi: {using}" in text, text
    assert "srun exit status: 0" in text and "report exit status: 0" in text, text
    assert f"MPI ranks used: {RANKS}" in text and "Verdict: HANG" in text, text
    assert out.exists() and out.with_suffix(".html").exists(), text
    assert_same_results(reference, out)
    assert_clone_never_imported(clone)


def test_analyze_sbatch_without_any_difftrace_says_the_two_ways_out(cluster, installed, tmp_path):
    clone, log = installed["clone"], tmp_path / "none.log"
    env = job_env(cluster, NORMAL=NORMAL, FAULTY=FAULTY, OUT=tmp_path / "never.h5")
    job = submit(cluster, clone, ANALYZE, log, env, "--ntasks=1")
    text = job["text"]
    assert (job["state"], job["exit"]) == ("FAILED", "2:0"), text
    lines = text.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("analyze.sbatch: no difftrace_mpi found"), text
    assert "./setup.sh" in lines[0] and "pip install" in lines[0], text
    assert not (tmp_path / "never.h5").exists()


@pytest.mark.parametrize("plugins", [("none", None), ("pmi2", "none")], ids=["analyze-default", "analyze-none"])
def test_trace_and_analyze_with_the_installed_package(cluster, installed, reference, tmp_path, plugins):
    """The traced step runs with MPI_PLUGIN, the analysis with ANALYZE_MPI_PLUGIN (default
    pmi2, whatever MPI_PLUGIN is). A stand-in tracer: rank 0 writes the dlbug traces, every
    rank records the --mpi its step got (srun's SLURM_MPI_TYPE, unset for none), then runs the
    program."""
    venv, clone = installed["venv"], installed["clone"]
    traced, analysis = plugins
    tracer = stand_in_tracer(tmp_path, f'echo "${{SLURM_MPI_TYPE:-none}}" > "{tmp_path}/mpi.$SLURM_PROCID"',
                             f'[ "$SLURM_PROCID" = 0 ] && cp "{clone / FAULTY}"/* "$dir"/')
    traces, log = tmp_path / "traces", tmp_path / "job.log"
    ranks = RANKS if analysis is None else 1          # --mpi=none: every task would be an MPI job of its own
    variables = dict(APP="true", TRACER=tracer, TRACE_DIR=traces, NORMAL=NORMAL, MPI_PLUGIN=traced,
                     ANALYZE_TASKS=ranks, VENV=venv)
    if analysis:
        variables["ANALYZE_MPI_PLUGIN"] = analysis
    job = submit(cluster, clone, TRACE_AND_ANALYZE, log, job_env(cluster, **variables), f"--ntasks={RANKS}")
    text = job["text"]
    assert (job["state"], job["exit"]) == ("COMPLETED", "0:0"), text
    assert sorted(p.read_text().strip() for p in tmp_path.glob("mpi.*")) == [traced] * RANKS, text
    assert f"(difftrace_mpi: installed, {venv}/bin/difftrace-mpi, srun --mpi={analysis or 'pmi2'})" in text, text
    assert f"  srun --mpi={analysis or 'pmi2'}\n" in text, text
    assert f"MPI ranks used: {ranks}" in text and "Verdict: HANG" in text, text
    assert "analysis exit status: 0" in text, text
    assert traces.with_suffix(".html").exists(), text
    assert_same_results(reference, traces.with_suffix(".h5"))
    assert_clone_never_imported(clone)


def test_trace_and_analyze_checks_the_analyzer_before_tracing(cluster, installed, tmp_path):
    """No difftrace_mpi to analyse with: the job ends before the program runs, exit 2."""
    clone, log, ran = installed["clone"], tmp_path / "job.log", tmp_path / "ran"
    env = job_env(cluster, APP="touch", APP_ARGS=ran, TRACER=stand_in_tracer(tmp_path), TRACE_DIR=tmp_path / "traces")
    job = submit(cluster, clone, TRACE_AND_ANALYZE, log, env, "--ntasks=1")
    text = job["text"]
    assert (job["state"], job["exit"]) == ("FAILED", "2:0"), text
    assert re.search(r"^analyze\.sbatch: no difftrace_mpi found: .*\./setup\.sh.*pip install", text, re.M), text
    assert not ran.exists(), text
