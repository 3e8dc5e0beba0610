"""A synthetic run of real shape: a larger LULESH cube made from the real 64-rank run's files.

    .venv/bin/python bench/synth_real.py SRC_RUN OUT --side 8 [--swap RUN:RANK] [--swap-to RANK]

LULESH's ranks form a cube (side n, rank = z n^2 + y n + x).  What a rank calls depends on
its position on each axis (first, interior, last: which faces have neighbours, which are
symmetry planes or free surfaces) and on its region sizes (``srand(myRank)``: every rank
differs a little).  Each rank of the side-``--side`` cube gets the files of a rank of the
source run (a 4 x 4 x 4 run: ``l64x1_normal``) with the same position on every axis;
among the source ranks of that position (1 corner, 2 per edge, 4 per face, 8 interior)
they are taken in turn, so the synthetic run has as many distinct traces as the source
(64), in the classes a real run has.  A real run of that size would have one distinct
trace per rank (see ``bench/data/lulesh-real/README.md``): the benchmark's projection
accounts for that separately.

Per rank: the thread files are hard links to the source's (copies where links fail), the
``.info`` is the source's with the relative MPI peers rewritten for the larger cube
(``dest=+16`` = +z in a side-4 cube becomes ``dest=+64`` in a side-8 cube), ``.rank``
holds the new rank and ``.end`` is the source's.  Process ids are 100000 + rank.

``--distinct`` makes every trace distinct, as in a real run of that size: the ranks' .info
files rename a few functions that every rank calls once its setup is done (B of them, B
the bits of the largest rank; bit b of the rank set: the b-th is called ``NAME #v``), so
rank r's trace calls its own subset of B renamed functions.  The vocabulary grows by B
names only, as in a real run where the ranks differ in how often they call, not in what.
The ``11.mpi`` filter does not see the renamed functions: its classes stay those of the
source.  The faulty run renames the same way per rank, so each trace equals its twin
except the swapped rank's.

``--swap RUN:RANK`` puts the files of RANK of RUN (e.g. ``l64x1_segv:37``, the rank that
crashed) on one interior rank (``--swap-to``; default the centre, (n/2, n/2, n/2)).
"""
import argparse
import json
import os
import re
import shutil
import sys
from pathlib import Path

TRACE_FILE = re.compile(r"^(.+)\.(\d+)\.(\d+)$")
PEER = re.compile(r"\b(src|dest)=([+-]\d+)")


def cube_side(ranks):
    side = round(ranks ** (1 / 3))
    if side ** 3 != ranks:
        raise ValueError(f"{ranks} ranks do not form a cube")
    return side


def position(c, side):
    """0: first on the axis, 1: interior, 2: last."""
    return 0 if c == 0 else 2 if c == side - 1 else 1


def coords(rank, side):
    return rank % side, rank // side % side, rank // (side * side)


def run_ranks(run):
    """{rank: (prefix.pid, [thread ids])} of one run directory (ranks from the .rank sidecars)."""
    run = Path(run)
    out = {}
    for p in run.glob("*.rank"):
        out[int(p.read_text().strip())] = (p.name[:-len(".rank")], [])
    by_prefix = {prefix: rank for rank, (prefix, _) in out.items()}
    for p in run.iterdir():
        m = TRACE_FILE.match(p.name)
        if m and m.group(3).isdigit() and f"{m.group(1)}.{m.group(2)}" in by_prefix:
            out[by_prefix[f"{m.group(1)}.{m.group(2)}"]][1].append(int(m.group(3)))
    for _, tids in out.values():
        tids.sort()
    return out


def offset_digits(offset, side):
    """(dx, dy, dz) in {-1, 0, 1} with dz side^2 + dy side + dx == offset (unique for side >= 3)."""
    for dz in (-1, 0, 1):
        for dy in (-1, 0, 1):
            dx = offset - dz * side * side - dy * side
            if dx in (-1, 0, 1):
                return dx, dy, dz
    raise ValueError(f"peer offset {offset:+d} is not a neighbour in a cube of side {side}")


def rewrite_info(text, src_side, side):
    """The .info text with relative peers moved from a side-src_side cube to a side-side cube."""
    if src_side == side:
        return text

    def peer(m):
        dx, dy, dz = offset_digits(int(m.group(2)), src_side)
        return f"{m.group(1)}={dz * side * side + dy * side + dx:+d}"
    return PEER.sub(peer, text)


VARIANT = " #v"


def info_names(text):
    """The function names of a .info text in id order (the image lines after ``+`` skipped)."""
    names, block = [], False
    for line in text.split("\n"):
        line = line.rstrip("\r")
        if line == "+":
            block = True
        elif block:
            block = False
        elif line:
            names.append(line)
    return names


def variant_names(infos, count):
    """``count`` names that every .info text of ``infos`` lists, in the first one's order,
    after ``main``, no MPI call: the functions ``--distinct`` renames."""
    first = info_names(infos[0])
    common = set(first).intersection(*(set(info_names(t)) for t in infos[1:]))
    after_main = first[first.index("main") + 1:] if "main" in first else first
    chosen = [n for n in after_main if n in common and not n.startswith(("MPI_", "PMPI_")) and
              first.count(n) == 1]
    if len(chosen) < count:
        raise ValueError(f"--distinct needs {count} functions every rank calls, found {len(chosen)}")
    return chosen[:count]


def rename_variant(text, names, rank):
    """The .info text with ``names[b]`` renamed where bit b of ``rank`` is set."""
    renamed = {n for b, n in enumerate(names) if rank >> b & 1}
    return "\n".join(line + VARIANT if line.rstrip("\r") in renamed else line for line in text.split("\n"))


def _link(src, dst):
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def make_cube(src_run, out, side, swap=None, swap_to=None, pid_base=100000, distinct=False):
    """Write the side^3-rank run into ``out`` (emptied first).  ``swap``: (run dir, rank) whose
    files replace rank ``swap_to``'s; ``distinct``: every trace made distinct (see above).  Returns the manifest: for each new rank, the source
    run and rank it copies (also written to ``out/../<out name>.synth.json``)."""
    src_run, out = Path(src_run), Path(out)
    src = run_ranks(src_run)
    src_side = cube_side(len(src))
    if src_side < 3:
        raise ValueError("the source cube needs interior ranks (side >= 3)")
    by_class = {}
    for r in sorted(src):
        by_class.setdefault(tuple(position(c, src_side) for c in coords(r, src_side)), []).append(r)
    if swap is not None and swap_to is None:
        swap_to = (side // 2) * (side * side + side + 1)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    seen, sources = {}, []
    swap_ranks = run_ranks(swap[0]) if swap else None
    variants = None
    if distinct:
        infos = [(src_run / f"{prefix}.info").read_text(errors="surrogateescape") for prefix, _ in src.values()]
        if swap:
            infos.append((Path(swap[0]) / f"{swap_ranks[swap[1]][0]}.info").read_text(errors="surrogateescape"))
        variants = variant_names(infos, max(1, (side ** 3 - 1).bit_length()))
    for rank in range(side ** 3):
        cls = tuple(position(c, side) for c in coords(rank, side))
        candidates = by_class[cls]
        # the swapped rank takes its place's turn too: every other rank keeps the source it has
        # in the normal cube, so it equals its twin
        n = seen[cls] = seen.get(cls, -1) + 1
        if swap and rank == swap_to:
            run_dir, runs, src_rank = Path(swap[0]), swap_ranks, swap[1]
        else:
            run_dir, runs, src_rank = src_run, src, candidates[n % len(candidates)]
        prefix, tids = runs[src_rank]
        new = f"parlot.vm.{pid_base + rank}"
        for tid in tids:
            _link(run_dir / f"{prefix}.{tid}", out / f"{new}.{tid}")
        info = (run_dir / f"{prefix}.info").read_text(errors="surrogateescape")
        info = rewrite_info(info, src_side, side)
        if variants:
            info = rename_variant(info, variants, rank)
        (out / f"{new}.info").write_text(info, errors="surrogateescape")
        (out / f"{new}.rank").write_text(f"{rank}\n")
        if (run_dir / f"{prefix}.end").exists():
            shutil.copyfile(run_dir / f"{prefix}.end", out / f"{new}.end")
        sources.append([run_dir.name, src_rank, tids])
    manifest = {"side": side, "ranks": side ** 3, "source": src_run.name, "source_side": src_side,
                "swap": [Path(swap[0]).name, swap[1], swap_to] if swap else None, "sources": sources,
                "variants": variants}
    (out.parent / f"{out.name}.synth.json").write_text(json.dumps(manifest))
    return manifest


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path, help="the source run (a cube of side >= 3, e.g. l64x1_normal unpacked)")
    ap.add_argument("out", type=Path, help="the new run's directory (emptied first)")
    ap.add_argument("--side", type=int, default=8, help="side of the new cube (default 8: 512 ranks)")
    ap.add_argument("--swap", help="RUN_DIR:RANK whose files replace one interior rank's (e.g. .../l64x1_segv:37)")
    ap.add_argument("--swap-to", type=int, help="the rank that gets them (default: the centre)")
    ap.add_argument("--distinct", action="store_true", help="make every trace distinct, as in a real run")
    a = ap.parse_args(argv)
    swap = None
    if a.swap:
        run, _, rank = a.swap.rpartition(":")
        swap = (Path(run), int(rank))
    m = make_cube(a.src, a.out, a.side, swap, a.swap_to, distinct=a.distinct)
    print(f"{a.out}: {m['ranks']} ranks from {m['source']}"
          + (f"; rank {m['swap'][2]} has {m['swap'][0]} rank {m['swap'][1]}'s files" if m["swap"] else ""))


if __name__ == "__main__":
    try:
        main()
    except (ValueError, OSError) as exc:
        sys.exit(f"synth_real: error: {exc}")
