#!/usr/bin/env python3
"""Accuracy of the verdict on the bug zoo (bench/zoo.py): per bug class, how often the
verdict's kind is right, its first culprit is the injected bug's rank (and thread, where
the bug is in one thread), the bug is among the first three culprits, and the time step
and the call are right; and whether each group's second normal run gives "no difference".

    .venv/bin/python bench/accuracy.py [--traces DIR] [--json FILE] [--cases]

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
"""
import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from difftrace_mpi.config import Grid                                  # noqa: E402
from difftrace_mpi.engine.choreography import Choreography, SerialComm   # noqa: E402
from difftrace_mpi.engine.pipeline import analyze                      # noqa: E402
from difftrace_mpi.stages.calltree import plain_name                   # noqa: E402
from difftrace_mpi.stages.divergence import LEFT_PATH                  # noqa: E402
import zoo                                                             # noqa: E402

GRID = Grid(filters=("11.mpi",), attributes=("sing.noFreq",), linkages=("ward",))
MEASURES = ("kind", "top1", "top3", "iteration", "call")


def _function(name):
    """A call's plain name; an OpenMP outlined body as its function (``f._omp_fn.3`` -> ``f``)."""
    return re.sub(r"\._omp_fn\.\d+$", "", plain_name(name))


def matches(culprit, case):
    """Whether a verdict culprit is the case's injected bug: its rank, and its thread when
    the bug is in one thread."""
    return culprit["rank"] == case.bug_rank and (case.bug_thread is None or culprit["thread"] == case.bug_thread)


def score(case, results):
    """One case's marks: {measure: bool, ...} plus what the verdict said."""
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


def run(traces, only=None, arguments=True):
    """Marks of every bug case whose traces exist, and the normal2-vs-normal checks;
    ``arguments`` False: the MPI arguments in event names stripped first."""
    ch = Choreography(SerialComm())
    marks, noise = [], []
    for case in zoo.CASES:
        if only and case.group not in only:
            continue
        normal = traces / case.group / "normal"
        here = traces / case.group / case.name
        if not here.is_dir() or not normal.is_dir():
            continue
        if case.name == "normal":
            continue
        # a group with a second normal run: given both, the verdict discounts their noise
        second = traces / case.group / "normal2"
        also = (second,) if second.is_dir() and case.name != "normal2" else ()
        results = analyze(normal, here, GRID, lattices=False, choreography=ch, also_normal=also,
                          arguments=arguments)
        if case.name.startswith("normal"):
            noise.append({"case": case.key, "kind": results.verdict["kind"], "said": results.verdict["summary"]})
            continue
        marks.append({"case": case.key, "class": case.bug_class, "ranks": case.ranks, **score(case, results)})
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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=Path, default=zoo.DEFAULT_OUT, help="the zoo's traces (bench/zoo.py trace)")
    ap.add_argument("--only", nargs="+", metavar="GROUP", help="only these groups (e.g. minilulesh-8)")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write every case's marks as JSON")
    ap.add_argument("--cases", action="store_true", help="print every case's marks and verdict summary")
    ap.add_argument("--no-arguments", action="store_true",
                    help="strip the MPI arguments from the event names first (as traces without them)")
    args = ap.parse_args(argv)
    marks, noise = run(args.traces, args.only, arguments=not args.no_arguments)
    if not marks:
        print(f"no zoo traces under {args.traces}: run bench/zoo.py trace first", file=sys.stderr)
        return 2
    if args.cases:
        for m in marks:
            flags = " ".join(f"{k}={'Y' if m[k] else 'n'}" for k in MEASURES + ("culprit_differs",))
            print(f"{m['case']:<28} {flags}\n    {m['said']}")
        print()
    print(table([m for m in marks if m["culprit_differs"]], "Where the culprit's own trace differs:"))
    print()
    print(table(marks, "All cases:"))
    print()
    print("Second normal runs against the first (should be 'none'):")
    for n in noise:
        print(f"  {n['case']:<28} {n['kind']}")
    if args.json:
        args.json.write_text(json.dumps({"cases": marks, "normal2": noise}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
