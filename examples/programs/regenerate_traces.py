#!/usr/bin/env python3
"""Regenerate the real-run ParLOT traces under examples/traces/ from the programs here.

    .venv/bin/python examples/programs/regenerate_traces.py [GROUP | GROUP/NAME ...]

GROUP is one of oddeven-real, ilcs, halo (default: all); GROUP/NAME one scenario of it (e.g.
ilcs/wrongop_annotated).  Builds pin/libparlot.so and the programs, runs those scenarios of
scenarios.py under mpiexec with pin/parlot-run (with -a for the annotated ones), and
replaces examples/traces/GROUP/NAME.  Hanging runs are ended with SIGTERM once their files
stop changing.  The simulator's examples/traces/oddeven/ is not touched.
"""
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scenarios  # noqa: E402

TRACES = scenarios.ROOT / "examples" / "traces"


def main(argv):
    known = {s.group for s in scenarios.SCENARIOS} | {f"{s.group}/{s.name}" for s in scenarios.SCENARIOS}
    wanted = set(argv or {s.group for s in scenarios.SCENARIOS})
    unknown = wanted - known
    if unknown:
        print(f"unknown group(s) or scenario(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="parlot-runs-") as tmp:
        build = scenarios.build()             # examples/programs/build (named in the .info files)
        for sc in scenarios.SCENARIOS:
            if sc.group not in wanted and f"{sc.group}/{sc.name}" not in wanted:
                continue
            dest = TRACES / sc.group / sc.name
            staging = Path(tmp) / sc.group / sc.name
            res = scenarios.run_scenario(sc, staging, build)
            ok = res.terminated if sc.hangs else res.returncode == 0
            print(f"{sc.group}/{sc.name}: {sc.ranks} ranks x {sc.threads} threads, "
                  f"{res.seconds:.1f} s, {'ended by SIGTERM' if res.terminated else f'exit {res.returncode}'}"
                  f"{'' if ok else '  <-- unexpected'}")
            if not ok:
                sys.stderr.write(res.stderr[-2000:])
                return 1
            for junk in staging.glob(".*"):   # temporary .info files of killed ranks
                junk.unlink()
            if dest.exists():
                shutil.rmtree(dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(staging, dest)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
