"""PNG pictures of a results file's best row (``python -m difftrace_mpi report --png``), drawn
with matplotlib's Agg backend in the report's colours."""
import os

import numpy as np

from .report_data import ReportData
from .svg import (CLUSTER_COLOURS, DEFAULT_MAX_CELLS, DENDRO_LEAVES, DIFF_SCALE, block_mean, dendrogram_layout,
                  height_label, palette, quantize)
from ..errors import DiffTraceError
from ..fsutil import atomic_path
from ..naming import describe_members, plural, shorten
from ..stages.classify.cluster import class_dendrogram, flat_cut


def require_matplotlib():
    """Fail with one clear line when matplotlib (needed for --png only) is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise DiffTraceError("the PNG pictures need matplotlib, which is not installed "
                             "(install it into the Python that runs difftrace_mpi: python -m pip install matplotlib)")


def write_pngs(results, directory, max_cells=DEFAULT_MAX_CELLS, force=False):
    """PNG pictures of the best row for papers and tickets, with matplotlib's Agg backend:
    ``heatmaps_<level>.png`` (JSMs and their diff), ``subsumption_<level>.png`` (both runs'
    subsumption matrices, when the file holds the full matrices) and ``dendrograms.png``.
    Each appears complete or not at all (``fsutil.atomic_path``; ``force`` replaces one
    that exists).  Returns the paths written."""
    require_matplotlib()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise DiffTraceError(f"cannot create {directory}: {exc.strerror or exc}")
    written = []

    def save(fig, path):
        """``fig`` as ``path``, written under a temporary name first: a full disk leaves no
        truncated picture that a rerun would then refuse to replace."""
        try:
            with atomic_path(path, force) as tmp:
                fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
        finally:
            plt.close(fig)
        written.append(path)

    try:
        rep = ReportData(results, max_cells)
        if not rep.rows:
            raise DiffTraceError(f"{rep.path}: no ranking rows to draw")
        best = rep.rows[0]
        combo, aname = rep.combo_of(best), best["attributes"]
        levels = ("thread", "process") if rep.has_process_level else ("thread",)

        def heatmaps_png(panels, layout, title, path):
            """One row of heatmaps: ``panels`` = [(grid, kind, name)] on ``layout``'s cells
            (thread indices grouped, integer rank ticks); JSM_D on the fixed scale."""
            fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 5.2))
            for ax, (grid, kind, name) in zip(axes, panels):
                vmax = DIFF_SCALE if kind == "diff" else 1.0
                q = quantize(grid, kind, vmax)
                cmap = ListedColormap(np.array(palette(kind)) / 255.0)
                im = ax.imshow(q, cmap=cmap, vmin=0, vmax=255, interpolation="nearest")
                cp = 300 / max(1, grid.shape[0])            # about 300 points a side
                ticks = layout.ticks(cp)
                ax.set_xticks([x / cp - 0.5 for x, _ in ticks])
                ax.set_yticks([x / cp - 0.5 for x, _ in ticks])
                ax.set_xticklabels([lab for _, lab in ticks], rotation=90, fontsize=7)
                ax.set_yticklabels([lab for _, lab in ticks], fontsize=7)
                for i, (c0, cells, label) in enumerate(layout.bands()):      # thread indices
                    if i:
                        ax.axhline(c0 - 0.5, color="#888", lw=0.6)
                        ax.axvline(c0 - 0.5, color="#888", lw=0.6)
                    ax.text(c0 + cells / 2 - 0.5, -0.5, label.replace("thread ", "t"), ha="center", va="bottom",
                            fontsize=7, clip_on=False)
                block = layout.block
                ax.set_title(name + (f" ({block}x{block} blocks)" if block > 1 else ""), fontsize=10,
                             pad=14 if layout.bands() else 6)
                cb = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, ticks=[0, 255])
                cb.ax.set_yticklabels(["0", f"{DIFF_SCALE:g} (fixed)" if kind == "diff" else "1"])
                if kind == "sub":
                    ax.set_xlabel("column j", fontsize=8)
                    ax.set_ylabel("row i: share of i found in j", fontsize=8)
                elif layout.bands():
                    ax.set_xlabel("rank, grouped by thread index", fontsize=8)
            fig.suptitle(title)
            fig.tight_layout()
            save(fig, path)

        for level in levels:
            lv = rep.level(combo, aname, level)
            layout = rep.layout(level)
            grids = lv.grids(layout)
            what = plural(lv.n, "trace" if level == "thread" else "process")
            heatmaps_png(list(zip(grids, ("sim", "sim", "diff"), ("normal run JSM", "faulty run JSM", "diff JSM_D"))),
                         layout, f"{combo} {aname}, {level} level ({what})",
                         os.path.join(directory, f"heatmaps_{level}.png"))
            if lv.sub is not None:          # only where the file holds the full matrices (small N)
                (cn, cf), (sn, sf) = lv.classes, lv.sub
                cells = layout.object_cells()
                heatmaps_png([(block_mean(sn, cn, cells), "sub", "normal run subsumption S"),
                              (block_mean(sf, cf, cells), "sub", "faulty run subsumption S")],
                             layout, f"{combo} {aname}, {level} level ({what}): subsumption, "
                                     f"row i, column j = share of i's attributes found in j",
                             os.path.join(directory, f"subsumption_{level}.png"))
        lv = rep.level(combo, aname, "thread")
        k = int(best["clusters"])
        fig, axes = plt.subplots(1, 2, figsize=(15, 0.5 + 0.28 * min(DENDRO_LEAVES, max(m.shape[0] for m in lv.jsm))
                                                + 1.2))
        for run, ax in enumerate(axes):
            jc, cls = lv.jsm[run], lv.classes[run]
            c = jc.shape[0]
            ax.set_title(f"{('normal', 'faulty')[run]} run, {best['linkage']} linkage ({c} classes)", fontsize=10)
            if c < 2:
                ax.text(0.5, 0.5, "one equivalence class", ha="center", transform=ax.transAxes)
                ax.axis("off")
                continue
            Z = class_dendrogram(jc, np.bincount(cls, minlength=c), best["linkage"])
            flat = flat_cut(Z, k)
            icoord, dcoord, leaves = dendrogram_layout(Z, c)
            members = lv.members(run)
            for xs, hs in zip(icoord, dcoord):
                ax.plot(hs, xs, color="#333", lw=1)
            labels = []
            for cl in leaves:
                keys = [rep.objects[int(o)] for o in sorted(np.concatenate([members[x] for x in cl]).tolist())]
                labels.append(shorten(describe_members(keys, rep.multi_thread), 40) + (f" (x{len(keys)})"
                                                                                   if len(keys) > 1 else ""))
            ys = [10 * i + 5 for i in range(len(leaves))]
            ax.set_yticks(ys)
            ax.set_yticklabels(labels, fontsize=7)
            for tick, cl in zip(ax.get_yticklabels(), leaves):
                tick.set_color(CLUSTER_COLOURS[(int(flat[cl[0]]) - 1) % len(CLUSTER_COLOURS)])
            ax.set_ylim(0, 10 * len(leaves))
            ax.invert_yaxis()
            ax.set_xlabel(height_label(best["linkage"]))
        fig.tight_layout()
        save(fig, os.path.join(directory, "dendrograms.png"))
    except OSError as exc:
        raise DiffTraceError(f"cannot write the PNG pictures into {directory}: {exc.strerror or exc}")
    return written
