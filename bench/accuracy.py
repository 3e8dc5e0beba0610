#!/usr/bin/env python3
"""Accuracy of the verdict on the bug zoo (bench/zoo.py) and on the outside zoo
(bench/zoo/ext/): per bug class, how often the verdict's kind is right, its first culprit
is the injected bug's rank (and thread, where the bug is in one thread), the bug is among
the first three culprits, and the time step and the call are right; and whether each
group's second normal run gives "no difference".  The two zoos are reported separately.

    .venv/bin/python bench/accuracy.py [--own | --ext | --both] [--traces DIR] [--json FILE] [--cases]

The traces are those of ``bench/zoo.py trace`` (default bench/zoo/traces/).  Each case is
analysed in this process (one rank, one grid setting without lattices: the verdict does
not use them) against its group's ``normal`` run, and, where the group has one, with its
``normal2`` run as a second normal run (``analyze --also-normal``: the noise of OpenMP
scheduling is discounted).  Each further normal run (``normal3``...) is analysed against
``normal`` given ``normal2`` and should say "none"; ``normal2`` against ``normal`` alone
shows whether the group is noisy at all.

The targets (issue 12) apply where the culprit's own trace differs from its normal twin
(a crash on the normal path, say, leaves nothing in the culprit's calls to find): top-1 >=
90 %, top-3 100 %, iteration right >= 90 %.  Both that subset and all cases are reported.

**The outside zoo** (issue 21): traces of programs this project did not write, with
injected faults, one directory per program under bench/zoo/ext/ (CoMD so far).  Each holds
one ``RUN.tar.xz`` per run (unpacking to ``RUN/``), ``ground-truth.tsv`` (run, normal,
kind, rank, thread, iteration, call as prose, outcome; kind "none" for a second normal
run) and ``calls.tsv`` (run, call, class: the plain name a verdict must name and the zoo
class of the fault, read off the prose by hand).  The archives are unpacked once into a
cache directory (default bench/zoo/ext/.cache/, git-ignored; again when an archive
changes).  Every faulty run is analysed and scored exactly as an own-zoo case (the same
``score``: its truth thread is always set, 0 the main thread, so top-1 needs rank and
thread equal), with its group's second normal run as a second normal run; each second
normal run against its normal must say "none".  Targets (issue 21), on each zoo: top-1
>= 95 %, iteration >= 95 %, call >= 90 %, every second normal run "none".
"""
import argparse
import csv
import hashlib
import json
import re
import shutil
import sys
import tarfile
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from difftrace_mpi.stages.classify.grid import Grid                             # noqa: E402
from difftrace_mpi.engine.choreography import Choreography, SerialComm   # noqa: E402
from difftrace_mpi.engine.alone import analyze_alone                   # noqa: E402
from difftrace_mpi.engine.pipeline import analyze                      # noqa: E402
from difftrace_mpi.stages.model.calltree import plain_name                   # noqa: E402
from difftrace_mpi.stages.compare.divergence import LEFT_PATH                  # noqa: E402
import zoo                                                             # noqa: E402

GRID = Grid(filters=("11.mpi",), attributes=("sing.noFreq",), linkages=("ward",))
MEASURES = ("kind", "top1", "top3", "iteration", "call")
EXT = ROOT / "bench" / "zoo" / "ext"
EXT_CACHE = EXT / ".cache"


def _function(name):
    """A call's plain name; an OpenMP outlined body as its function (``f._omp_fn.3`` -> ``f``)."""
    return re.sub(r"\._omp_fn\.\d+$", "", plain_name(name))


def matches(culprit, case):
    """Whether a verdict culprit is the case's injected bug: its rank, and its thread when
    the bug is in one thread.  ``case``: a zoo.Case or an ExtCase (the same fields)."""
    return culprit["rank"] == case.bug_rank and (case.bug_thread is None or culprit["thread"] == case.bug_thread)


def score(case, results):
    """One case's marks: {measure: bool, ...} plus what the verdict said.  ``case`` is the
    truth: a zoo.Case or an ExtCase (expected, bug_rank, bug_thread, iteration, call)."""
    v = results.verdict
    culprits = v["culprits"]
    where = v["where"]
    innermost = where["call_path"].rsplit(" > ", 1)[-1] if where["call_path"] else None
    calls = {_function(x) for x in (where["normal"], where["faulty"], innermost) if x}
    own = [d for d in results.divergences.values()
           if d.key[0] == case.bug_rank and (case.bug_thread is None or d.key[1] == case.bug_thread)]
    return {"kind": v["kind"] == case.expected,
            "top1": bool(culprits) and matches(culprits[0], case),
            "top3": any(matches(c, case) for c in culprits[:3]),
            "iteration": case.iteration is not None and where["iteration"] == case.iteration,
            "call": case.call in calls,
            "culprit_differs": any(d.status in LEFT_PATH for d in own),
            "said": v["summary"], "verdict_kind": v["kind"], "tied": v["tied"]}


def judge(normal, here, second=None, *, arguments=True, choreography=None, alone=False):
    """The verdict's Results on one pair, as every case is analysed: in process, without
    lattices, ``second`` (a second normal run's directory, or None) given as also-normal;
    ``alone``: the faulty run alone (``--single-run``: no normal run at all)."""
    ch = choreography or Choreography(SerialComm())
    if alone:
        return analyze_alone(here, choreography=ch, arguments=arguments)
    also = (second,) if second is not None else ()
    return analyze(normal, here, GRID, lattices=False, choreography=ch, also_normal=also, arguments=arguments)


def run(traces, only=None, arguments=True, alone=False, one_normal=False):
    """Marks of every bug case whose traces exist, and the normal2-vs-normal checks;
    ``arguments`` False: the MPI arguments in event names stripped first; ``alone``: each
    run analysed alone, every normal run too (each should say "none"); ``one_normal``: no
    second normal run given (as a user with one good run has)."""
    ch = Choreography(SerialComm())
    marks, noise = [], []
    for case in zoo.CASES:
        if only and case.group not in only:
            continue
        normal = traces / case.group / "normal"
        here = traces / case.group / case.name
        if not here.is_dir() or not normal.is_dir():
            continue
        if case.name == "normal" and not alone:
            continue
        # a group with a second normal run: given both, the verdict discounts their noise
        second = traces / case.group / "normal2"
        use_second = second.is_dir() and case.name != "normal2" and not (one_normal and case.bug_class)
        results = judge(normal, here, second if use_second else None,
                        arguments=arguments, choreography=ch, alone=alone)
        if case.name.startswith("normal"):
            noise.append({"case": case.key, "kind": results.verdict["kind"], "said": results.verdict["summary"]})
            continue
        marks.append({"case": case.key, "class": case.bug_class, "ranks": case.ranks, **score(case, results)})
    return marks, noise


# --------------------------------------------------------------------------- the outside zoo

@dataclass(frozen=True)
class ExtCase:
    """One run of the outside zoo and its truth, with the fields ``score`` reads."""
    program: str                # the directory under bench/zoo/ext/, e.g. "CoMD"
    name: str                   # the run, e.g. "np8-segv" (its archive: name.tar.xz)
    normal: str                 # its normal run, e.g. "np8-normal"
    expected: str               # crash, hang, changed; "none" for a second normal run
    bug_rank: int = None
    bug_thread: int = None      # 0 the main thread, 1 the first worker
    iteration: int = None       # 1-based
    call: str = None            # plain name a verdict must name (calls.tsv)
    bug_class: str = None       # one of zoo.CLASSES (calls.tsv)

    @property
    def key(self):
        return f"{self.program}/{self.name}"

    @property
    def group(self):
        return f"{self.program}/{self.normal}"


def _tsv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def ext_cases(root=EXT):
    """Every run of the outside zoo under ``root`` (one directory per program), from its
    ground-truth.tsv and calls.tsv; a faulty run without a calls.tsv row is an error."""
    cases = []
    for prog in sorted(p for p in Path(root).iterdir() if (p / "ground-truth.tsv").is_file()):
        calls = {r["run"]: r for r in _tsv(prog / "calls.tsv")}
        for r in _tsv(prog / "ground-truth.tsv"):
            if r["kind"] == "none":
                cases.append(ExtCase(prog.name, r["run"], r["normal"], "none"))
                continue
            if r["run"] not in calls:
                raise ValueError(f"{prog / 'calls.tsv'}: no row for {r['run']}")
            c = calls[r["run"]]
            if c["class"] not in zoo.CLASSES:
                raise ValueError(f"{prog / 'calls.tsv'}: {r['run']}: class {c['class']!r} is not one of "
                                 f"{', '.join(zoo.CLASSES)}")
            cases.append(ExtCase(prog.name, r["run"], r["normal"], r["kind"], int(r["rank"]), int(r["thread"]),
                                 int(r["iteration"]), c["call"], c["class"]))
    return cases


def unpack(archive, cache):
    """The run directory of ``archive`` (NAME.tar.xz, every member under NAME/), unpacked
    into ``cache`` once: again only when the archive's content changed."""
    archive = Path(archive)
    name = archive.name[:-len(".tar.xz")]
    cache = Path(cache)
    dest, stamp = cache / name, cache / f"{name}.sha256"
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if dest.is_dir() and stamp.is_file() and stamp.read_text().strip() == digest:
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=f".{name}-") as tmp:
        with tarfile.open(archive) as tar:
            strays = [m.name for m in tar.getmembers() if m.name != name and not m.name.startswith(name + "/")]
            if strays:
                raise ValueError(f"{archive}: members outside {name}/: {strays[:3]}")
            tar.extractall(tmp, filter="data")
        if dest.exists():
            shutil.rmtree(dest)
        (Path(tmp) / name).rename(dest)
    stamp.write_text(digest + "\n")
    return dest


def run_ext(root=EXT, cache=EXT_CACHE, only=None, arguments=True, alone=False, one_normal=False):
    """Marks of every faulty run of the outside zoo and the second-normal-run checks, as
    ``run`` gives them for the own zoo.  ``only``: programs, groups (PROGRAM/NORMAL) or
    cases (PROGRAM/RUN)."""
    ch = Choreography(SerialComm())
    marks, noise = [], []
    cases = ext_cases(root)
    for case in cases:
        if only and not {case.program, case.group, case.key} & set(only):
            continue
        prog = Path(root) / case.program
        normal = unpack(prog / f"{case.normal}.tar.xz", Path(cache) / case.program)
        here = unpack(prog / f"{case.name}.tar.xz", Path(cache) / case.program)
        if case.expected == "none":
            for run_dir, key in ((here, case.key), (normal, f"{case.program}/{case.normal}"))[:2 if alone else 1]:
                results = judge(normal, run_dir, arguments=arguments, choreography=ch, alone=alone)
                noise.append({"case": key, "kind": results.verdict["kind"], "said": results.verdict["summary"]})
            continue
        # the group's second normal run, as for the own zoo
        second = next((c for c in cases if c.expected == "none" and c.program == case.program
                       and c.normal == case.normal), None) if not one_normal else None
        also = unpack(prog / f"{second.name}.tar.xz", Path(cache) / case.program) if second else None
        results = judge(normal, here, also, arguments=arguments, choreography=ch, alone=alone)
        ranks = len(list(normal.glob("*.rank")))
        marks.append({"case": case.key, "class": case.bug_class, "ranks": ranks, **score(case, results)})
    return marks, noise


def percent(part, whole):
    return f"{100.0 * part / whole:5.1f}%" if whole else "    -"


def table(marks, title):
    """Per class and overall: cases, then each measure as a share."""
    by_class = defaultdict(list)
    for m in marks:
        by_class[m["class"]].append(m)
    lines = [title, f"  {'class':<11} {'cases':>5}  " + "  ".join(f"{m:>9}" for m in MEASURES)]
    for cls in [c for c in zoo.CLASSES if c in by_class] + ["all"]:
        rows = marks if cls == "all" else by_class[cls]
        lines.append(f"  {cls:<11} {len(rows):>5}  " +
                     "  ".join(f"{percent(sum(r[m] for r in rows), len(rows)):>9}" for m in MEASURES))
    return "\n".join(lines)


def report(marks, noise, title, cases=False, alone=False):
    """The printed report of one zoo: every case (``cases``), the two tables and the second
    normal runs."""
    out = [title, "=" * len(title)]
    if cases:
        for m in marks:
            flags = " ".join(f"{k}={'Y' if m[k] else 'n'}" for k in MEASURES + ("culprit_differs",))
            out.append(f"{m['case']:<28} {flags}\n    {m['said']}")
        out.append("")
    out.append(table([m for m in marks if m["culprit_differs"]], "Where the culprit's own trace differs:"))
    out.append("")
    out.append(table(marks, "All cases:"))
    out.append("")
    out.append("Normal runs alone (should be 'none'):" if alone else
               "Second normal runs against the first (should be 'none'):")
    out.extend(f"  {n['case']:<28} {n['kind']}" for n in noise)
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--own", dest="zoos", action="store_const", const=("own",),
                       help="only the own zoo (bench/zoo.py's traces)")
    which.add_argument("--ext", dest="zoos", action="store_const", const=("ext",),
                       help="only the outside zoo (bench/zoo/ext/)")
    which.add_argument("--both", dest="zoos", action="store_const", const=("own", "ext"),
                       help="both, reported separately (the default)")
    ap.set_defaults(zoos=("own", "ext"))
    ap.add_argument("--traces", type=Path, default=zoo.DEFAULT_OUT, help="the zoo's traces (bench/zoo.py trace)")
    ap.add_argument("--ext-dir", type=Path, default=EXT, help="the outside zoo (one directory per program)")
    ap.add_argument("--cache", type=Path, default=EXT_CACHE, help="where the outside zoo's archives are unpacked")
    ap.add_argument("--only", nargs="+", metavar="GROUP",
                    help="only these groups (own: e.g. minilulesh-8; outside: a program, PROGRAM/NORMAL "
                         "or PROGRAM/RUN, e.g. CoMD/np8-normal)")
    ap.add_argument("--json", type=Path, metavar="FILE",
                    help="also write every case's marks as JSON ({cases, normal2} of the own zoo; "
                         "ext: {cases, normal2} of the outside zoo)")
    ap.add_argument("--cases", action="store_true", help="print every case's marks and verdict summary")
    ap.add_argument("--single-run", action="store_true",
                    help="analyse each faulty run alone, without its normal run (issue 26); every normal run "
                         "alone should say 'none'")
    ap.add_argument("--one-normal", action="store_true",
                    help="give no faulty run its group's second normal run (no --also-normal): what a "
                         "user with one good run gets")
    ap.add_argument("--no-arguments", action="store_true",
                    help="strip the MPI arguments from the event names first (as traces without them)")
    args = ap.parse_args(argv)
    arguments = not args.no_arguments
    found, out = False, {}
    if "own" in args.zoos:
        marks, noise = run(args.traces, args.only, arguments=arguments, alone=args.single_run,
                           one_normal=args.one_normal)
        if not marks:
            print(f"no zoo traces under {args.traces}" + (" match --only" if args.only
                                                           else ": run bench/zoo.py trace first"), file=sys.stderr)
        else:
            found = True
            out.update(cases=marks, normal2=noise)
            print(report(marks, noise, f"Own zoo ({len(marks)} cases)" + (", each run alone" if args.single_run
                                                                          else ""), args.cases, args.single_run))
            print()
    if "ext" in args.zoos:
        marks, noise = run_ext(args.ext_dir, args.cache, args.only, arguments=arguments,
                               alone=args.single_run, one_normal=args.one_normal)
        if not marks:
            print(f"no outside-zoo runs under {args.ext_dir}" + (" match --only" if args.only else ""),
                  file=sys.stderr)
        else:
            found = True
            out["ext"] = {"cases": marks, "normal2": noise}
            programs = sorted({m["case"].split("/")[0] for m in marks})
            print(report(marks, noise, f"Outside zoo ({len(marks)} cases: {', '.join(programs)})"
                         + (", each run alone" if args.single_run else ""), args.cases, args.single_run))
    if not found:
        return 2
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
