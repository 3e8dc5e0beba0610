"""The tracer wraps every MPI function of the installed mpi.h (issue 24, item 1).

pin/gen_mpi_wrappers.py reads the MPI library's own mpi.h at build time and writes the PMPI
wrappers of every function parlot_mpi.c does not wrap by hand.  Here:

- the dynamic symbols of libparlot.so (nm -D) against the functions mpi.h declares with a
  PMPI_ entry point, found independently of the generator (the preprocessed header searched
  for "PMPI_name(") - for pip's MPICH and, where it is installed, Open MPI;
- the generator alone on declarations it must survive (attributes, function pointers, 2-D
  arrays, variadic and unnamed parameters, an unknown function of a newer MPI);
- tests/data/mpi_all/families.c traced at 4 ranks: the arguments of each call family in its
  event names, the large-count variants named like the calls they mirror, MPI_Start(all)
  with their *_init's peer and tag, RMA targets relative in the window's group, objects left
  open in MPI_Finalize's name;
- tests/data/mpi_all/bugs.c: a wrong root in MPI_Igather, a wrong source in MPI_Recv_init, a
  wrong target rank in MPI_Put, a leaked request - the normal and the faulty traces differ at
  the faulty rank, and only there (other ranks at most stop earlier, in a hang);
- generated calls that wait are on disk before they block (SIGKILL with the flusher off).
"""
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import starts_processes
from difftrace_mpi.model import RETURN_NAME
from test_tracer import PIN, ROOT, check_run, kill_rank_in_call, plain_name

sys.path.insert(0, str(ROOT / "examples" / "programs"))
import scenarios  # noqa: E402

sys.path.insert(0, str(PIN))
import gen_mpi_wrappers as gen  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "mpi_all"
VENV_MPICC = ROOT / ".venv" / "bin" / "mpicc"
OMPI = ("/usr/bin/mpicc.openmpi", "/usr/bin/mpiexec.openmpi")
RANKS = 4


def mpi_include_flags(mpicc):
    out = subprocess.run([mpicc, "-show"], capture_output=True, text=True).stdout
    flags = [w for w in out.split() if w.startswith("-I")]
    if not flags:
        out = subprocess.run([mpicc, "--showme:compile"], capture_output=True, text=True).stdout
        flags = out.split()
    return flags


def mpi_h_profiled(mpicc):
    """MPI_X / MPIX_X for which the installed mpi.h declares PMPI_X / PMPIX_X, read without the
    generator: the preprocessed header (conditionals and macros applied, as a program sees it)
    searched for a name followed by '('."""
    r = subprocess.run(["cc", "-E", *mpi_include_flags(mpicc), "-"], input="#include <mpi.h>\n",
                       capture_output=True, text=True, check=True)
    text = "\n".join(line for line in r.stdout.splitlines() if not line.startswith("#"))
    return {m[1:] for m in re.findall(r"\b(PMPIX?_\w+)\s*\(", text)}


def exported_mpi(lib):
    r = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True)
    return {parts[2] for parts in (line.split() for line in r.stdout.splitlines())
            if len(parts) == 3 and parts[1] == "T" and re.match(r"^MPIX?_", parts[2])}


def events(run_dir):
    """{rank: [names of the main thread's calls]} of a run (returns left out)."""
    return {rank: [n for n in names if n != RETURN_NAME]
            for (rank, tid), (names, _) in check_run(run_dir).items() if tid == 0}


def annotation(name):
    """'MPI_Send[count=4,...]' -> 'count=4,...' ('' for a plain name)."""
    m = re.match(r"^MPIX?_\w+\[(.*)\]$", name)
    return m[1] if m else ""


def trace(exe, out, *args, env=None, mpiexec=None, lib=None, hangs=False, n=RANKS):
    """Trace exe at n ranks with annotations (relative peers unless env says otherwise).
    A run that may hang is run by scenarios.run_scenario, which ends it once its files stop
    changing (and traces with relative peers: it takes PARLOT_MPI_ARGS out of the environment)."""
    if hangs:
        assert not env and mpiexec is None
        sc = scenarios.Scenario("mpi_all", Path(out).name, Path(exe).name, n, 1, tuple(map(str, args)),
                                hangs=True, annotate=True)
        res = scenarios.run_scenario(sc, out, Path(exe).parent, quiet_s=1.5, limit_s=60)
        return res.returncode, res.stdout, res.stderr
    cmd = [mpiexec or scenarios.venv_mpiexec(), "-n", str(n)]
    if mpiexec:                                   # Open MPI's
        cmd.insert(1, "--oversubscribe")
        if os.geteuid() == 0:
            cmd.insert(1, "--allow-run-as-root")
    cmd += [str(PIN / "parlot-run"), "-q", "-a", *(("-L", str(lib)) if lib else ()), "-d", str(out),
            str(exe), *map(str, args)]
    e = {k: v for k, v in os.environ.items() if k != "PARLOT_MPI_ARGS"}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=dict(e, **(env or {})))
    return r.returncode, r.stdout, r.stderr


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
@starts_processes
def mpich(tmp_path_factory):
    """pin/libparlot.so (pip's MPICH) and the two programs built with .venv/bin/mpicc."""
    if not shutil.which("make") or not shutil.which("cc") or not VENV_MPICC.exists():
        pytest.skip("make, cc or .venv/bin/mpicc missing")
    subprocess.run(["make", "-s", "-C", str(PIN)], check=True)
    d = tmp_path_factory.mktemp("mpich")
    for prog in ("families", "bugs"):
        subprocess.run([str(VENV_MPICC), "-O1", "-g", "-o", str(d / prog), str(DATA / f"{prog}.c")], check=True)
    return dict(dir=d, lib=PIN / "libparlot.so", mpicc=str(VENV_MPICC))


@pytest.fixture(scope="module")
@starts_processes
def ompi(tmp_path_factory):
    """libparlot.so built against Debian's Open MPI (where installed) and families.c with it."""
    if not all(os.access(p, os.X_OK) for p in OMPI):
        pytest.skip("Open MPI (libopenmpi-dev openmpi-bin) is not installed: its mpi.h is not tested")
    d = tmp_path_factory.mktemp("ompi")
    subprocess.run(["make", "-s", "-C", str(PIN), f"MPICC={OMPI[0]}", f"BUILD={d / 'lib'}"], check=True)
    subprocess.run([OMPI[0], "-O1", "-g", "-o", str(d / "families"), str(DATA / "families.c")], check=True)
    return dict(dir=d, lib=d / "lib" / "libparlot.so", mpicc=OMPI[0])


@pytest.fixture(scope="module")
def families(mpich):
    """families.c at 4 ranks: relative peers, everything freed / absolute peers, leaks."""
    rel, leak = mpich["dir"] / "families-rel", mpich["dir"] / "families-leak"
    rc, out, err = trace(mpich["dir"] / "families", rel, "io", mpich["dir"])
    assert rc == 0 and "families ok" in out, err[-2000:]
    rc, out, err = trace(mpich["dir"] / "families", leak, "leak", env={"PARLOT_MPI_ARGS": "abs"})
    assert rc == 0 and "families ok" in out, err[-2000:]
    return events(rel), events(leak)


# --------------------------------------------------------------------------- every function

def test_nm_shows_a_wrapper_for_every_function_of_mpi_h(mpich):
    declared = mpi_h_profiled(mpich["mpicc"])
    exported = exported_mpi(mpich["lib"])
    assert len(declared) > 400, sorted(declared)[:20]          # MPICH 5: 758
    assert declared - exported == set(), f"mpi.h functions without a wrapper: {sorted(declared - exported)}"
    assert exported - declared == set(), f"wrappers of functions mpi.h does not declare: {sorted(exported - declared)}"
    # the hand-written ones are not generated a second time (the build would fail), the rest is
    generated = (PIN / "build" / "gen" / "parlot_mpi_gen.c").read_text()
    gen_names = set(re.findall(r"^(?:GWRAP\(\w+, |PASS\([^,]+, |PASSV\()(MPIX?_\w+),", generated, re.M))
    by_hand = gen.handwritten(PIN / "parlot_mpi.c")
    assert {"MPI_Init", "MPI_Finalize", "MPI_Abort", "MPI_Wait", "MPI_Recv", "MPI_Start"} <= by_hand
    assert not gen_names & by_hand
    assert gen_names | by_hand == declared


def test_nm_open_mpi(ompi):
    declared = mpi_h_profiled(ompi["mpicc"])
    assert len(declared) > 300
    assert exported_mpi(ompi["lib"]) == declared


@pytest.mark.integration
def test_library_without_python_keeps_the_hand_written_wrappers(tmp_path):
    """make PYTHON= builds without the generator: the hand-written wrappers only."""
    if not shutil.which("make") or not VENV_MPICC.exists():
        pytest.skip("make or .venv/bin/mpicc missing")
    r = subprocess.run(["make", "-s", "-C", str(PIN), "PYTHON=", f"BUILD={tmp_path}"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "no python3" in r.stdout + r.stderr
    assert exported_mpi(tmp_path / "libparlot.so") == gen.handwritten(PIN / "parlot_mpi.c")


# --------------------------------------------------------------------------- the generator alone

SYNTHETIC = """
# 1 "/opt/mpi/include/mpi.h"
typedef int MPI_Comm; typedef int MPI_Datatype; typedef int MPI_Request; typedef int MPI_Win;
typedef long MPI_Aint; typedef int MPI_Group; typedef int MPI_Fint;
typedef void (MPI_User_cb)(void *, int);
struct s { int MPI_Fake(int x); };
static inline int MPI_Inline_helper(int x) { return x; }
__attribute__((visibility("default"))) int MPI_Frobnicate(const void *buf, int count, MPI_Datatype datatype,
    int dest, int widget, MPI_Comm comm, MPI_Request *request) __attribute__((nonnull(1)));
int PMPI_Frobnicate(const void *buf, int count, MPI_Datatype datatype, int dest, int widget, MPI_Comm comm,
    MPI_Request *request);
int MPI_Group_range_incl(MPI_Group group, int n, int ranges[][3], MPI_Group *newgroup);
int PMPI_Group_range_incl(MPI_Group group, int n, int ranges[][3], MPI_Group *newgroup);
int MPI_Register_cb(MPI_User_cb *fn, void (*raw)(int, double), int *, void *site);
int PMPI_Register_cb(MPI_User_cb *fn, void (*raw)(int, double), int *, void *site);
int MPI_Pcontrol(const int level, ...);
int PMPI_Pcontrol(const int level, ...);
MPI_Fint MPI_Comm_c2f(MPI_Comm comm);
MPI_Fint PMPI_Comm_c2f(MPI_Comm comm);
double MPI_Wtime(void);
double PMPI_Wtime(void);
int MPI_Put(const void *origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
            MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win);
int PMPI_Put(const void *origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
             MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win);
int MPI_No_profiling_entry(int x);
int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm);
int PMPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm);
"""


def test_generator_on_awkward_declarations(tmp_path):
    pre = tmp_path / "mpi.i"
    pre.write_text(SYNTHETIC)
    hand = tmp_path / "hand.c"
    hand.write_text("WA(MPI_Send, CK, (int x), (x), (void)0)\n")
    out = tmp_path / "gen.c"
    assert gen.main(["--preprocessed", str(pre), "--handwritten", str(hand), "-o", str(out)]) == 0
    text = out.read_text()
    names = re.findall(r"^(?:GWRAP\(\w+, |PASS\([^,]+, )(MPIX?_\w+),", text, re.M)
    # profiled functions only (no PMPI twin: none; struct members and inline bodies: none);
    # the hand-written MPI_Send is left out
    assert sorted(names) == ["MPI_Comm_c2f", "MPI_Frobnicate", "MPI_Group_range_incl", "MPI_Pcontrol",
                             "MPI_Put", "MPI_Register_cb", "MPI_Wtime"]
    frob = text[text.index("GWRAP(int, MPI_Frobnicate"):].split("\nGWRAP")[0]
    # an unknown function: its event, and what the generic rules know of its arguments
    assert '(const void *buf, int count, MPI_Datatype datatype, int dest, int widget, MPI_Comm comm, ' \
           'MPI_Request *request)' in frob
    assert 'ab_int(&A, "count", (long)count); a_type(&A, "type", datatype); a_peer(&A, "dest", dest, comm); ' \
           'ab_int(&A, "widget", (long)widget); a_comm(&A, comm);' in frob
    assert "open_add(PARLOT_OPEN_REQUEST)" in frob
    assert "int ranges[][3]" in text and "open_add(PARLOT_OPEN_GROUP)" in text
    # function pointers kept, an unnamed parameter named, a parameter named like a local renamed
    assert "(MPI_User_cb *fn, void (*raw)(int, double), int * p2_, void *site_p)" in text
    assert "(fn, raw, p2_, site_p)" in text
    assert "GWRAP(int, MPI_Pcontrol, NOCK, (const int level, ...),\n      (level)," in text
    assert "PASS(MPI_Fint, MPI_Comm_c2f, (MPI_Comm comm), (comm))" in text
    assert "PASS(double, MPI_Wtime, (void), ())" in text
    assert 'a_target(&A, "target", target_rank, win); ab_int(&A, "tdisp", (long)target_disp);' in text
    # unchanged input: the file is not written again (make does not rebuild the library)
    before = out.stat().st_mtime_ns
    time.sleep(0.01)
    gen.main(["--preprocessed", str(pre), "--handwritten", str(hand), "-o", str(out)])
    assert out.stat().st_mtime_ns == before


def test_handwritten_list_is_read_from_parlot_mpi_c():
    by_hand = gen.handwritten(PIN / "parlot_mpi.c")
    src = (PIN / "parlot_mpi.c").read_text()
    defined = set(re.findall(r"^(?:W|WA|WT|WAX|WTR|WTEST|WAREQ)\((MPI_\w+),", src, re.M)) | \
        set(re.findall(r"^PARLOT_API int (MPI_\w+)\(", src, re.M))
    assert by_hand == defined and len(by_hand) >= 49


# --------------------------------------------------------------------------- families

def test_point_to_point_persistent_and_large_count(families):
    rel, _ = families
    for rank in range(RANKS):
        ev = rel[rank]
        recv_init = "MPI_Recv_init[count=2,type=MPI_INT,src=-1,tag=5]"
        send_init = "MPI_Send_init[count=2,type=MPI_INT,dest=+1,tag=5]"
        assert recv_init in ev and send_init in ev
        started = f"Recv_init({annotation(recv_init)}),Send_init({annotation(send_init)})"
        assert ev.count(f"MPI_Startall[count=2,{started}]") == 2, [n for n in ev if "Start" in n]
        assert f"MPI_Start[Recv_init({annotation(recv_init)})]" in ev
        assert f"MPI_Start[Send_init({annotation(send_init)})]" in ev
        assert f"MPI_Request_free[Send_init({annotation(send_init)})]" in ev
        # the large-count variants are named like the calls they mirror
        for c, plain in (("MPI_Isend_c", "MPI_Isend"), ("MPI_Recv_c", "MPI_Recv"), ("MPI_Gather_c", "MPI_Gather"),
                         ("MPI_Allreduce_c", "MPI_Allreduce")):
            a = [annotation(n) for n in ev if plain_name(n) == c]
            b = [annotation(n) for n in ev if plain_name(n) == plain]
            assert a and a[0] in b, (c, a, b)
        assert "MPI_Recv_c[count=3,type=MPI_INT,src=-1,tag=9]" in ev
        assert "MPI_Mprobe[src=-1,tag=11]" in ev and "MPI_Mrecv[count=1,type=MPI_INT]" in ev
        assert "MPI_Bcast_init[count=4,type=MPI_INT,root=3]" in ev
        assert "MPI_Start[Bcast_init(count=4,type=MPI_INT,root=3)]" in ev


def test_nonblocking_collectives_named_like_blocking_ones(families):
    rel, _ = families
    for rank in range(RANKS):
        ev = rel[rank]
        for nb, blocking in (("MPI_Igather", "MPI_Gather"), ("MPI_Iscatter", "MPI_Scatter"),
                             ("MPI_Iallgather", "MPI_Allgather"), ("MPI_Ialltoall", "MPI_Alltoall"),
                             ("MPI_Iscan", "MPI_Scan")):
            a = [annotation(n) for n in ev if plain_name(n) == nb]
            b = [annotation(n) for n in ev if plain_name(n) == blocking]
            assert len(a) == 1 and a[0] and a[0] in b, (rank, nb, a, b)
        # the receive side of a gather only at its root (1), the send side of a scatter at its (3)
        gather = [n for n in ev if plain_name(n) == "MPI_Igather"][0]
        assert gather == ("MPI_Igather[scount=1,stype=MPI_INT,rcount=1,rtype=MPI_INT,root=1]" if rank == 1
                          else "MPI_Igather[scount=1,stype=MPI_INT,root=1]")
        scatter = [n for n in ev if plain_name(n) == "MPI_Iscatter"][0]
        assert scatter == ("MPI_Iscatter[scount=2,stype=MPI_INT,rcount=2,rtype=MPI_INT,root=3]" if rank == 3
                           else "MPI_Iscatter[rcount=2,rtype=MPI_INT,root=3]")


def test_one_sided_targets_relative_and_absolute(families):
    rel, absolute = families
    for rank in range(RANKS):
        ev = rel[rank]
        assert "MPI_Win_create[size=1024,disp_unit=4]" in ev
        assert ev.count("MPI_Win_fence[assert=0]") == 3
        assert "MPI_Put[ocount=2,otype=MPI_INT,target=+1,tdisp=4,tcount=2,ttype=MPI_INT]" in ev
        assert "MPI_Get[ocount=1,otype=MPI_INT,target=-1,tdisp=0,tcount=1,ttype=MPI_INT]" in ev
        assert "MPI_Accumulate[ocount=1,otype=MPI_INT,target=-1,tdisp=10,tcount=1,ttype=MPI_INT,op=MPI_SUM]" in ev
        assert any(n.startswith("MPI_Win_lock[lock_type=") and n.endswith(",target=-1,assert=0]") for n in ev)
        assert "MPI_Win_unlock[target=-1]" in ev and "MPI_Win_free" in ev
        right, left = (rank + 1) % RANKS, (rank - 1) % RANKS
        ev = absolute[rank]
        assert f"MPI_Put[ocount=2,otype=MPI_INT,target={right},tdisp=4,tcount=2,ttype=MPI_INT]" in ev
        assert f"MPI_Get[ocount=1,otype=MPI_INT,target={left},tdisp=0,tcount=1,ttype=MPI_INT]" in ev
        assert f"MPI_Start[Recv_init(count=2,type=MPI_INT,src={left},tag=5)]" in ev


def test_communicators_types_and_io(families):
    rel, _ = families
    for rank in range(RANKS):
        ev = rel[rank]
        i = ev.index("MPI_Comm_group")
        assert ev[i:i + 3] == ["MPI_Comm_group", "MPI_Group_incl[n=2]", "MPI_Comm_create"], ev[i:i + 3]
        assert ("MPI_Allreduce[count=1,type=MPI_INT,op=MPI_SUM,comm=size2]" in ev) == (rank in (0, 2))
        assert ev.count("MPI_Group_free") == 2
        assert "MPI_Cart_create[ndims=1,reorder=0]" in ev
        assert "MPI_Cart_shift[direction=0,disp=1,comm=size4]" in ev
        assert "MPI_Neighbor_allgather[scount=1,stype=MPI_INT,rcount=1,rtype=MPI_INT,comm=size4]" in ev
        assert "MPI_Type_vector[count=3,blocklength=2,stride=4,oldtype=MPI_DOUBLE]" in ev
        assert ev[ev.index("MPI_Type_vector[count=3,blocklength=2,stride=4,oldtype=MPI_DOUBLE]") + 1] == "MPI_Type_commit"
        assert "MPI_Bcast[count=1,type=derived,root=0]" in ev and "MPI_Type_free" in ev
        # MPI-IO: the calls, and nothing the library calls inside them
        i = [plain_name(n) for n in ev].index("MPI_File_open")
        assert [plain_name(n) for n in ev[i:i + 3]] == ["MPI_File_open", "MPI_File_write_at", "MPI_File_close"]
        assert ev[i + 1] == f"MPI_File_write_at[offset={4 * rank},count=1,type=MPI_INT]"
        # nothing left open; pass-through functions make no events
        assert ev[-1] == "MPI_Finalize"
        assert not any(plain_name(n) in ("MPI_Wtime", "MPI_Comm_c2f", "MPI_Type_f2c") for n in ev)
        for n in ev:
            assert re.match(r"^MPIX?_\w+(\[[^ ]*\])?$", n) and "0x" not in n, n


def test_objects_left_open_name_finalize(families):
    _, leak = families
    for rank in range(RANKS):
        ev = leak[rank]
        assert ev[-1] == "MPI_Finalize[requests=1,groups=1,types=1]", ev[-3:]
        assert "MPI_Type_free" not in ev


def test_open_mpi_families(ompi):
    out = ompi["dir"] / "families-run"
    rc, stdout, err = trace(ompi["dir"] / "families", out, "leak", mpiexec=OMPI[1], lib=ompi["lib"])
    assert rc == 0 and "families ok" in stdout, err[-2000:]
    ev = events(out)
    for rank in range(RANKS):
        e = ev[rank]
        assert "MPI_Startall[count=2,Recv_init(count=2,type=MPI_INT,src=-1,tag=5)," \
               "Send_init(count=2,type=MPI_INT,dest=+1,tag=5)]" in e
        assert "MPI_Put[ocount=2,otype=MPI_INT,target=+1,tdisp=4,tcount=2,ttype=MPI_INT]" in e
        assert [n for n in e if plain_name(n) == "MPI_Iscatter"][0] == (
            "MPI_Iscatter[scount=2,stype=MPI_INT,rcount=2,rtype=MPI_INT,root=3]" if rank == 3
            else "MPI_Iscatter[rcount=2,rtype=MPI_INT,root=3]")
        assert "MPI_Type_vector[count=3,blocklength=2,stride=4,oldtype=MPI_DOUBLE]" in e
        assert e[-1] == "MPI_Finalize[requests=1,groups=1,types=1]", e[-3:]


# --------------------------------------------------------------------------- bugs

@pytest.fixture(scope="module")
def bugs_normal(mpich):
    out = mpich["dir"] / "bugs-normal"
    rc, stdout, err = trace(mpich["dir"] / "bugs", out)
    assert rc == 0 and "bugs done" in stdout, err[-2000:]
    return events(out)


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


# bug, faulty rank, whether it may hang, (the faulty rank's first differing call: normal, faulty)
BUGS = [
    ("igather-root", 3, True, ("MPI_Igather[scount=1,stype=MPI_INT,root=0]", "MPI_Igather[scount=1,stype=MPI_INT,root=1]")),
    ("recv-init-source", 1, True, ("MPI_Recv_init[count=1,type=MPI_INT,src=-1,tag=3]",
                                   "MPI_Recv_init[count=1,type=MPI_INT,src=+2,tag=3]")),
    ("put-target", 2, False, ("MPI_Put[ocount=1,otype=MPI_INT,target=+1,tdisp=0,tcount=1,ttype=MPI_INT]",
                              "MPI_Put[ocount=1,otype=MPI_INT,target=+2,tdisp=0,tcount=1,ttype=MPI_INT]")),
    ("leak-request", 0, False, ("MPI_Request_free[Send_init(count=1,type=MPI_INT,dest=+1,tag=3)]",
                                "MPI_Win_create[size=8,disp_unit=4]")),
]


@pytest.mark.parametrize("bug,bug_rank,hangs,first", BUGS, ids=[b[0] for b in BUGS])
def test_bug_traces_differ_at_the_faulty_rank(mpich, bugs_normal, bug, bug_rank, hangs, first):
    out = mpich["dir"] / f"bugs-{bug}"
    rc, stdout, err = trace(mpich["dir"] / "bugs", out, bug, bug_rank, hangs=True)
    if not hangs:
        assert rc == 0 and "bugs done" in stdout, err[-2000:]
    faulty = events(out)
    assert sorted(faulty) == sorted(bugs_normal) == list(range(RANKS))
    for rank in range(RANKS):
        a, b = bugs_normal[rank], faulty[rank]
        i = first_difference(a, b)
        if rank == bug_rank:
            assert i is not None and (a[i], b[i]) == first, (rank, a[i - 2:i + 2], b[i - 2:i + 2])
            continue
        # the other ranks made the same calls with the same arguments, as far as both runs got
        n = min(len(a), len(b))
        assert a[:n] == b[:n], (rank, i, a[i:i + 2], b[i:i + 2])
        if not hangs:
            assert a == b, rank
    if bug == "recv-init-source":   # MPI_Startall says which receive it starts
        assert any(n.startswith("MPI_Startall[count=2,Recv_init(count=1,type=MPI_INT,src=+2,tag=3)")
                   for n in faulty[bug_rank])
    if bug == "leak-request":
        assert bugs_normal[bug_rank][-1] == "MPI_Finalize"
        assert faulty[bug_rank][-1] == "MPI_Finalize[requests=1]"


# --------------------------------------------------------------------------- generated calls that wait

PROGRAM_BLOCKED = r"""
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
/* rank 1 blocks for good in a generated call (argv[1]: recv_c, mprobe, fence) after writing its
 * pid to argv[2]; rank 0 waits for a message nobody sends. */
int main(int argc, char **argv)
{
    int rank, never = 0, buf[4];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Win win;
    MPI_Win_create(buf, sizeof buf, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    if (rank == 1) {
        MPI_Message m;
        FILE *f = fopen(argv[2], "w");
        fprintf(f, "%d\n", (int)getpid());
        fclose(f);
        if (!strcmp(argv[1], "mprobe"))
            MPI_Mprobe(0, 5, MPI_COMM_WORLD, &m, MPI_STATUS_IGNORE);
        else if (!strcmp(argv[1], "fence"))
            MPI_Win_fence(0, win);
#if MPI_VERSION >= 4
        else
            MPI_Recv_c(&never, 1, MPI_INT, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
#endif
    } else {
        MPI_Recv(&never, 1, MPI_INT, 1, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Finalize();
    return 0;
}
"""


@pytest.mark.parametrize("mode,call", [("recv_c", "MPI_Recv_c"), ("mprobe", "MPI_Mprobe"), ("fence", "MPI_Win_fence")])
def test_generated_call_that_waits_is_on_disk_before_sigkill(mpich, mode, call):
    """As the hand-written MPI_Recv/MPI_Wait/MPI_Barrier (test_tracer.py): with the background
    flusher off, a rank killed by SIGKILL while blocked in a generated call still shows it, open."""
    d = mpich["dir"]
    exe = d / "blocked"
    if not exe.exists():
        (d / "blocked.c").write_text(PROGRAM_BLOCKED)
        subprocess.run([str(VENV_MPICC), "-O1", "-g", "-o", str(exe), str(d / "blocked.c")], check=True)
    if call not in exported_mpi(mpich["lib"]):
        pytest.skip(f"{call} is not in this mpi.h")
    out = d / f"blocked-{mode}"
    kill_rank_in_call(exe, mode, out, d / f"pid-{mode}")
    names, open_calls = check_run(out)[(1, 0)]
    names = [plain_name(n) for n in names if n != RETURN_NAME]
    assert "MPI_Win_create" in names and names[-1] == call and open_calls == 1, (names[-4:], open_calls)
