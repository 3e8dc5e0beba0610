"""The report's drawings, as SVG, from arrays already read: colour ramps, heatmaps (grids
aggregated to a bounded size; large ones as a canvas the page's script fills), the
aggregate views of large runs (class x class blocks, a histogram of the changes), class
dendrograms and concept-lattice Hasse diagrams.  Every name is escaped (``escape``).

Heatmap axes are laid out by ``Layout``: traces ordered by thread index, then rank (all
main threads, then all threads 1, ...), so the rows of one thread index sit together
instead of alternating with the others' (which drew a checkerboard); tick labels are
integer ranks at round numbers, a band names each thread index."""
import base64
import json
import math

import numpy as np

from ..escape import html_text as esc
from .hasse import children_lists, introduced_attributes, layers, parents_lists, weighted_label
from ..config import REPORT_MAX_CELLS
from ..naming import describe_members, shorten
from ..stages.classify.cluster import class_dendrogram, flat_cut

DEFAULT_MAX_CELLS = REPORT_MAX_CELLS   # heatmap side cap (cells; config); larger N is aggregated in blocks
RECT_LIMIT = 64               # up to this many cells a side: SVG rects; above: canvas
DIFF_SCALE = 1.0              # JSM_D colour scale: fixed 0 .. 1 (JSM_D = |J faulty - J normal| <= 1)
CANVAS_PX = 512               # canvas heatmap plot side in CSS pixels (about)
TICK_PX = 14                  # least distance between two tick labels
BAND_PX = 12                  # the thread-index band along each axis
HIST_BINS = 20                # histogram of the changes: bins of 0.05 over (0, 1]
DENDRO_LEAVES = 60            # dendrograms with more classes show the last merges only
LABEL_CHARS = 56              # visible characters of a dendrogram leaf label
PLOT_PX = 320                 # heatmap plot side in CSS pixels (about)

# colour ramps (exact RGB; the browser test looks for them in a screenshot)
SIM_STOPS = ((0.0, (247, 251, 255)), (0.5, (107, 174, 214)), (1.0, (8, 48, 107)))
DIFF_ZERO = (236, 236, 236)
DIFF_STOPS = ((0.0, (254, 224, 210)), (0.5, (239, 59, 44)), (1.0, (103, 0, 13)))
SUB_STOPS = ((0.0, (247, 252, 245)), (0.5, (116, 196, 118)), (1.0, (0, 68, 27)))     # subsumption S
CLUSTER_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2",
                   "#7f7f7f", "#bcbd22", "#17becf", "#d62728")


# --------------------------------------------------------------------------- colours

def _ramp(stops, n):
    out = []
    for i in range(n):
        x = i / (n - 1) if n > 1 else 0.0
        for (p0, c0), (p1, c1) in zip(stops, stops[1:]):
            if x <= p1 or p1 == stops[-1][0]:
                f = 0.0 if p1 == p0 else (x - p0) / (p1 - p0)
                out.append(tuple(int(round(a + (b - a) * f)) for a, b in zip(c0, c1)))
                break
    return out


def palette(kind):
    """256 RGB triples: ``sim`` (J = 0 .. 1, light to dark blue) or ``diff`` (index 0 =
    no change, grey; 1..255 = JSM_D from just above 0 to 1, light to dark red)."""
    if kind == "sim":
        return _ramp(SIM_STOPS, 256)
    if kind == "sub":
        return _ramp(SUB_STOPS, 256)
    return [DIFF_ZERO] + _ramp(DIFF_STOPS, 255)


def quantize(values, kind, vmax=DIFF_SCALE):
    """Palette indices (uint8) of ``values``: J * 255 for similarities; for the diff 0
    only where JSM_D = 0, else 1..255 proportional to ``vmax`` (the report's fixed
    ``DIFF_SCALE``, so a small change stays light whatever the largest one)."""
    v = np.asarray(values, dtype=np.float64)
    if kind in ("sim", "sub"):
        return np.rint(np.clip(v, 0.0, 1.0) * 255).astype(np.uint8)
    if vmax <= 0:
        return np.zeros(v.shape, dtype=np.uint8)
    q = np.clip(np.rint(v / vmax * 255), 1, 255)
    return np.where(v > 0, q, 0).astype(np.uint8)


def hex_colour(rgb):
    return "#%02x%02x%02x" % rgb


# --------------------------------------------------------------------------- aggregation

def grid_shape(n, max_cells=DEFAULT_MAX_CELLS):
    """(block, cells): traces per block side and cells per side for ``n`` traces in one group."""
    if n <= 0:
        return 1, 0
    block = max(1, math.ceil(n / max(1, int(max_cells))))
    return block, math.ceil(n / block)


def nice_step(least):
    """The smallest of 1, 2, 5, 10, 20, 50, ... that is at least ``least``."""
    step = 1
    while True:
        for m in (1, 2, 5):
            if step * m >= least:
                return step * m
        step *= 10


class Layout:
    """How the traces (or processes) of a heatmap axis become cells.

    ``keys``: the level's keys in the results' order ((rank, thread) tuples, or ranks at
    the process level); ``thread``: only that thread index (None: all).  Traces are ordered
    by thread index, then rank: each thread index is a group of consecutive cells of
    ``block`` traces (a cell never mixes two thread indices), with the smallest block that
    keeps the grid within ``max_cells`` a side (or one cell per group, if more groups)."""

    def __init__(self, keys, max_cells=DEFAULT_MAX_CELLS, thread=None, multi_thread=True):
        threaded = len(keys) > 0 and isinstance(keys[0], (tuple, list))
        items = sorted((int(k[1]), int(k[0]), i) if threaded else (0, int(k), i) for i, k in enumerate(keys))
        if thread is not None:
            items = [it for it in items if it[0] == thread]
        self.threaded = threaded and multi_thread
        self.n_keys, self.n = len(keys), len(items)
        self.order = np.array([i for _, _, i in items], dtype=np.int64)     # position -> key index
        self.ranks = [r for _, r, _ in items]
        sizes = {}
        for t, _, _ in items:
            sizes[t] = sizes.get(t, 0) + 1
        cap = max(int(max_cells), len(sizes), 1)
        block = max(1, math.ceil(self.n / cap))
        while sum(math.ceil(c / block) for c in sizes.values()) > cap:
            block += 1
        self.block = block
        self.groups = []                # (thread, first position, traces, first cell, cells)
        pos = cell = 0
        for t in sorted(sizes):
            cells = math.ceil(sizes[t] / block)
            self.groups.append((t, pos, sizes[t], cell, cells))
            pos, cell = pos + sizes[t], cell + cells
        self.cells = cell
        self.cell_of = np.empty(self.n, dtype=np.int64)         # by position
        for _, p0, count, c0, _ in self.groups:
            self.cell_of[p0:p0 + count] = c0 + np.arange(count) // block

    def object_cells(self):
        """Each key's cell, -1 where not shown (what ``block_mean`` takes)."""
        out = np.full(self.n_keys, -1, dtype=np.int64)
        out[self.order] = self.cell_of
        return out

    def cell_labels(self):
        """A label per cell for the tooltips: ``5.3`` (``5`` single-threaded) or
        ``ranks 64-127 thread 3``."""
        out = []
        for t, p0, count, _, cells in self.groups:
            for c in range(cells):
                a, b = p0 + c * self.block, min(p0 + count, p0 + (c + 1) * self.block) - 1
                if a == b:
                    out.append(f"{self.ranks[a]}.{t}" if self.threaded else f"{self.ranks[a]}")
                else:
                    thread = f" thread {t}" if self.threaded else ""
                    out.append(f"ranks {self.ranks[a]}\u2013{self.ranks[b]}{thread}")
        return out

    def ticks(self, cp):
        """[(offset in pixels, label)]: integer ranks at round numbers, at least ``TICK_PX``
        apart, the first rank of each thread index always a candidate (``cp``: pixels per
        cell)."""
        step = nice_step(TICK_PX * self.block / cp)
        starts = [(c0 + 0.5 / self.block) * cp for _, _, _, c0, _ in self.groups] + [math.inf]
        out, last = [], -math.inf
        for g, (_, p0, count, c0, _) in enumerate(self.groups):
            for i in range(count):
                r = self.ranks[p0 + i]
                if i and r % step:
                    continue
                x = (c0 + (i + 0.5) / self.block) * cp
                # the next thread index's first rank keeps its place: it says where a group starts
                if x - last >= TICK_PX and (i == 0 or starts[g + 1] - x >= TICK_PX):
                    out.append((x, str(r)))
                    last = x
        return out

    def bands(self):
        """[(first cell, cells, label)]: one per thread index, or none (single-threaded)."""
        if not self.threaded:
            return []
        return [(c0, cells, f"thread {t}") for t, _, _, c0, cells in self.groups]


class ClassAxis:
    """The axis of a class x class heatmap: one cell per class, named ``G1``, ``G2``, ...;
    ``labels``: each class's members in words (for the tooltips)."""

    def __init__(self, labels, n):
        self.labels, self.n, self.block, self.cells = list(labels), n, 1, len(labels)

    def cell_labels(self):
        return [f"G{i + 1}: {lab}" for i, lab in enumerate(self.labels)]

    def ticks(self, cp):
        step = max(1, math.ceil(TICK_PX / cp))
        return [((i + 0.5) * cp, f"G{i + 1}") for i in range(0, self.cells, step)]

    def bands(self):
        return []


def _cells_of(cells, n):
    """Each object's cell: ``cells`` itself, or consecutive blocks when it is a block size."""
    if np.ndim(cells) == 0:
        return np.arange(n, dtype=np.int64) // int(cells)
    return np.asarray(cells, dtype=np.int64)


def block_mean(jsm_classes, classes, cells):
    """Mean J over each pair of cells, from the class JSM and each object's class (no N x N
    matrix: sums = A^T J A with A the class x cell counts).  ``cells``: each object's cell,
    -1 for objects not shown (``Layout.object_cells``), or a block size (consecutive
    objects)."""
    classes = np.asarray(classes, dtype=np.int64)
    cells = _cells_of(cells, len(classes))
    shown = cells >= 0
    classes, cells = classes[shown], cells[shown]
    jc = np.asarray(jsm_classes, dtype=np.float64)
    counts = np.zeros((jc.shape[0], int(cells.max()) + 1 if len(cells) else 0), dtype=np.float64)
    np.add.at(counts, (classes, cells), 1.0)
    sums = counts.T @ (jc @ counts)
    sizes = counts.sum(axis=0)
    return sums / np.outer(sizes, sizes)


def joint_classes(classes_n, classes_f):
    """(joint, joint_of, sizes): the distinct (normal class, faulty class) pairs, each
    object's pair and the pairs' sizes.  Objects of one pair have identical JSM_D rows."""
    pairs = np.stack([np.asarray(classes_n, dtype=np.int64), np.asarray(classes_f, dtype=np.int64)], axis=1)
    joint, joint_of = np.unique(pairs.reshape(-1, 2), axis=0, return_inverse=True)
    joint_of = joint_of.reshape(-1)
    return joint, joint_of, np.bincount(joint_of, minlength=len(joint))


def block_max_diff(jsm_n, classes_n, jsm_f, classes_f, cells, chunk_elems=1 << 22):
    """Max JSM_D = |J_faulty - J_normal| over each pair of cells (``cells`` as for
    ``block_mean``).

    Objects with the same (normal class, faulty class) pair have identical JSM_D rows, so
    the work is over those joint classes present in each cell, in bounded chunks."""
    cn = np.asarray(classes_n, dtype=np.int64)
    cells = _cells_of(cells, len(cn))
    shown = cells >= 0
    jn = np.asarray(jsm_n, dtype=np.float64)
    jf = np.asarray(jsm_f, dtype=np.float64)
    joint, joint_of, _ = joint_classes(cn[shown], np.asarray(classes_f, dtype=np.int64)[shown])
    cells = cells[shown]
    nb = int(cells.max()) + 1 if len(cells) else 0
    nj = len(joint)
    members = np.unique(cells * nj + joint_of)       # (cell, joint) present, by cell
    m_block, m_joint = members // nj, members % nj
    starts = np.flatnonzero(np.r_[True, m_block[1:] != m_block[:-1]])
    jn_m, jf_m = joint[m_joint, 0], joint[m_joint, 1]
    per_col = np.empty((nj, nb), dtype=np.float64)       # max over each column cell
    step = max(1, chunk_elems // max(1, len(members)))
    for a0 in range(0, nj, step):
        rows = joint[a0:a0 + step]
        d = np.abs(jf[np.ix_(rows[:, 1], jf_m)] - jn[np.ix_(rows[:, 0], jn_m)])
        per_col[a0:a0 + step] = np.maximum.reduceat(d, starts, axis=1)
    return np.maximum.reduceat(per_col[m_joint], starts, axis=0)


def change_histogram(jsm_n, classes_n, jsm_f, classes_f, bins=HIST_BINS, chunk_elems=1 << 22):
    """(unchanged, counts): how many trace pairs i < j have JSM_D = 0, and how many fall in
    each of ``bins`` equal bins of (0, 1] (the first is (0, 1/bins]); exact, from the joint
    classes (every pair of two joint classes has one JSM_D)."""
    joint, _, sizes = joint_classes(classes_n, classes_f)
    jn = np.asarray(jsm_n, dtype=np.float64)
    jf = np.asarray(jsm_f, dtype=np.float64)
    nj = len(joint)
    unchanged, counts = 0, np.zeros(bins, dtype=np.int64)
    step = max(1, chunk_elems // max(1, nj))
    for a0 in range(0, nj, step):
        rows = joint[a0:a0 + step]
        d = np.abs(jf[np.ix_(rows[:, 1], joint[:, 1])] - jn[np.ix_(rows[:, 0], joint[:, 0])])
        own = sizes[a0:a0 + step]
        pairs = np.outer(own, sizes)                     # ordered pairs; each unordered pair twice
        pairs[np.arange(len(rows)), a0 + np.arange(len(rows))] = own * (own - 1)
        changed = d > 0
        unchanged += int(pairs[~changed].sum())
        where = np.minimum(np.ceil(d[changed] * bins).astype(np.int64) - 1, bins - 1)
        counts += np.bincount(where, weights=pairs[changed], minlength=bins).astype(np.int64)
    return unchanged // 2, counts // 2


# --------------------------------------------------------------------------- heatmaps

def _heatmap_svg_frame(g, cp, axis, axis_title, kind, canvas, row_title=None):
    """Outer SVG: tick labels (``axis.ticks``: integer ranks), the thread-index bands,
    axis titles (``row_title`` on the left when given, else ``axis_title`` on both), frame
    and colour bar around the plot area.  Returns (svg, left, top)."""
    ticks = axis.ticks(cp)
    bands = axis.bands()
    band = BAND_PX if bands else 0
    left = top = 24 + 6 * max((len(t) for _, t in ticks), default=1) + band
    side = g * cp
    width, height = left + side + 12, top + side + 46
    out = [f'<svg class="hm-svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'font-family="sans-serif" font-size="10">']
    for x, lab in ticks:
        lab = esc(lab)
        out.append(f'<text class="hm-tick" x="{left - band - 4}" y="{top + x + 3.5:.1f}" text-anchor="end">'
                   f'{lab}</text>')
        out.append(f'<text class="hm-tick" transform="translate({left + x + 3.5:.1f},{top - band - 4}) rotate(-90)">'
                   f'{lab}</text>')
    for i, (c0, cells, lab) in enumerate(bands):
        fill = ("#d0d0d0", "#ececec")[i % 2]
        x0, w = left + c0 * cp, cells * cp
        out.append(f'<g class="hm-band"><title>{esc(lab)}</title>'
                   f'<rect x="{x0}" y="{top - band}" width="{w}" height="{band - 1}" fill="{fill}"/>'
                   f'<rect x="{left - band}" y="{top + c0 * cp}" width="{band - 1}" height="{w}" fill="{fill}"/>')
        short = lab.replace("thread ", "t" if w < 6 * len(lab) else "thread ")
        if w >= 6 * len(short):
            out.append(f'<text x="{x0 + w / 2:.1f}" y="{top - 3}" font-size="9" text-anchor="middle">{esc(short)}'
                       f'</text>')
        out.append("</g>")
    out.append(f'<text x="{left + side / 2:.1f}" y="10" text-anchor="middle" fill="#444">{esc(axis_title)}</text>')
    out.append(f'<text transform="translate(10,{top + side / 2:.1f}) rotate(-90)" text-anchor="middle" '
               f'fill="#444">{esc(row_title or axis_title)}</text>')
    if not canvas:
        out.append("%RECTS%")
    out.append(f'<rect x="{left - .5}" y="{top - .5}" width="{side + 1}" height="{side + 1}" fill="none" '
               f'stroke="#888" stroke-width="1"/>')
    # colour bar
    gid = f"dt-grad-{kind}"          # defined once per page (see gradients_svg)
    bar_y = top + side + 14
    out.append(f'<rect x="{left}" y="{bar_y}" width="{side}" height="8" fill="url(#{gid})" stroke="#aaa" '
               f'stroke-width=".5"/>')
    lo, hi = ("0", "1") if kind in ("sim", "sub") else ("0 (grey: none)", f"{DIFF_SCALE:g} (fixed scale)")
    out.append(f'<text x="{left}" y="{bar_y + 20}">{esc(lo)}</text>')
    out.append(f'<text x="{left + side}" y="{bar_y + 20}" text-anchor="end">{esc(hi)}</text>')
    out.append("</svg>")
    return "".join(out), left, top


def gradients_svg():
    """The colour-bar gradients, once per page in an always-rendered zero-size SVG (a
    gradient inside a hidden set would not paint for the others)."""
    grads = []
    for kind in ("sim", "diff", "sub"):
        pal = palette(kind)
        stops = "".join(f'<stop offset="{(i - (kind == "diff")) / (255 - (kind == "diff")):.3f}" '
                        f'stop-color="{hex_colour(pal[i])}"/>' for i in list(range(int(kind == "diff"), 256, 17)) + [255])
        grads.append(f'<linearGradient id="dt-grad-{kind}">{stops}</linearGradient>')
    return ('<svg width="0" height="0" style="position:absolute" aria-hidden="true"><defs>'
            + "".join(grads) + "</defs></svg>")


def heatmap_html(matrix, kind, axis, title, axis_title, row_title=None, canvas=None):
    """One heatmap: ``<figure class="hm" data-rows data-cols data-block data-n data-kind
    data-values>`` holding an SVG frame and either ``<rect class="hm-cell">`` cells or a
    canvas that the inline script fills.  ``kind``: sim (J), diff (JSM_D, on the fixed
    scale 0 .. ``DIFF_SCALE``) or sub (the asymmetric subsumption S, read row -> column);
    ``axis``: a ``Layout`` or ``ClassAxis``; ``canvas``: None = by size."""
    matrix = np.asarray(matrix, dtype=np.float64)
    g = matrix.shape[0]
    vmax = float(matrix.max()) if matrix.size else 0.0
    q = quantize(matrix, kind, DIFF_SCALE if kind == "diff" else 1.0)
    cp = max(1, CANVAS_PX // g) if g > RECT_LIMIT else max(4, PLOT_PX // max(g, 1))
    canvas = g > RECT_LIMIT if canvas is None else canvas
    frame, left, top = _heatmap_svg_frame(g, cp, axis, axis_title, kind, canvas, row_title)
    if canvas:
        plot = (f'<canvas class="hm-plot hm-canvas" width="{g}" height="{g}" '
                f'style="left:{left}px;top:{top}px;width:{g * cp}px;height:{g * cp}px"></canvas>')
    else:
        pal = palette(kind)
        cells = [f'<rect class="hm-cell" x="{j * cp}" y="{i * cp}" width="{cp}" height="{cp}" '
                 f'fill="{hex_colour(pal[q[i, j]])}"/>' for i in range(g) for j in range(g)]
        plot = ""
        frame = frame.replace("%RECTS%", f'<svg class="hm-plot" x="{left}" y="{top}" width="{g * cp}" '
                                         f'height="{g * cp}" shape-rendering="crispEdges">' + "".join(cells)
                              + "</svg>")
    block = axis.block
    over = f" over cells of {block} x {block} traces" if block > 1 else ""
    what = {"sim": f"mean J{over}" if block > 1 else "J per pair",
            "diff": (f"max JSM_D{over}" if block > 1 else "JSM_D = |J faulty - J normal| per pair")
            + f"; fixed scale 0-{DIFF_SCALE:g}, largest here {vmax:.3g}",
            "sub": "row i, column j: share of i's attributes found in j (1 = j does all i does)"
            + (f", mean{over}" if block > 1 else "")}[kind]
    values = base64.b64encode(q.tobytes()).decode("ascii")
    return (f'<figure class="hm" data-kind="{kind}" data-rows="{g}" data-cols="{g}" data-block="{block}" '
            f'data-n="{axis.n}" data-vmax="{DIFF_SCALE if kind == "diff" else 1.0:g}" data-max="{vmax:.6g}" '
            f'data-labels="{esc(json.dumps(axis.cell_labels()))}" data-values="{values}">'
            f'<figcaption style="margin-left:{left}px"><b>{esc(title)}</b><br>'
            f'<span class="small">{esc(what)}</span></figcaption>'
            f'<div class="hm-fig">{frame}{plot}</div></figure>')


def histogram_svg(unchanged, counts, title):
    """Bars of the change histogram (``change_histogram``): the unchanged pairs in grey,
    then one bar per JSM_D bin in the diff colours; heights on a log scale."""
    bins = len(counts)
    pal = palette("diff")
    bar_w, plot_h, left, top = 22, 160, 58, 30
    values = [int(unchanged)] + [int(c) for c in counts]
    top_log = math.log10(max(values) + 1) or 1.0
    width, height = left + (bins + 1) * bar_w + 30, top + plot_h + 52
    out = [f'<svg class="hist-svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'font-family="sans-serif" font-size="10">',
           f'<text x="{left}" y="14" font-weight="bold">{esc(title)}</text>']
    for i, v in enumerate(values):
        h = plot_h * math.log10(v + 1) / top_log
        x = left + i * bar_w + (6 if i else 0)
        if i == 0:
            colour, lo, hi, what = hex_colour(DIFF_ZERO), 0.0, 0.0, "JSM_D = 0 (unchanged)"
        else:
            lo, hi = (i - 1) / bins, i / bins
            colour = hex_colour(pal[max(1, int(round(hi * 255)))])
            what = f"JSM_D in ({lo:.2f}, {hi:.2f}]"
        out.append(f'<rect class="hist-bar" data-count="{v}" data-lo="{lo:g}" data-hi="{hi:g}" x="{x}" '
                   f'y="{top + plot_h - h:.1f}" width="{bar_w - 3}" height="{h:.1f}" fill="{colour}" '
                   f'stroke="#999" stroke-width=".5"><title>{esc(what)}: {v} pairs</title></rect>')
        if v:
            out.append(f'<text x="{x + (bar_w - 3) / 2:.1f}" y="{top + plot_h - h - 3:.1f}" font-size="8" '
                       f'text-anchor="middle">{v if v < 10_000 else f"{v:.0e}"}</text>')
    base = top + plot_h
    out.append(f'<line x1="{left - 2}" y1="{base}" x2="{width - 20}" y2="{base}" stroke="#666"/>')
    out.append(f'<text x="{left + (bar_w - 3) / 2:.1f}" y="{base + 13}" text-anchor="middle">0</text>')
    for f in (0.25, 0.5, 0.75, 1.0):
        x = left + 6 + f * bins * bar_w
        out.append(f'<line x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 4}" stroke="#666"/>'
                   f'<text x="{x:.1f}" y="{base + 14}" text-anchor="middle">{f:g}</text>')
    out.append(f'<text x="{left + 6 + bins * bar_w / 2:.1f}" y="{base + 30}" text-anchor="middle" fill="#444">'
               f'JSM_D = |J faulty - J normal| of a pair of traces</text>')
    out.append(f'<text transform="translate(14,{top + plot_h / 2:.1f}) rotate(-90)" text-anchor="middle" '
               f'fill="#444">trace pairs (log scale)</text>')
    out.append("</svg>")
    return "".join(out)


# --------------------------------------------------------------------------- dendrograms

def _subtree_members(Z, c, node, cache):
    if node < c:
        return [node]
    if node not in cache:
        stack, out = [node], []
        while stack:
            x = stack.pop()
            if x < c:
                out.append(x)
            else:
                stack.extend((int(Z[x - c, 0]), int(Z[x - c, 1])))
        cache[node] = sorted(out)
    return cache[node]


def dendrogram_layout(Z, c, max_leaves=DENDRO_LEAVES):
    """SciPy's dendrogram coordinates (no plot) and, per shown leaf, its classes."""
    from scipy.cluster.hierarchy import dendrogram
    kw = dict(truncate_mode="lastp", p=max_leaves) if c > max_leaves else {}
    d = dendrogram(Z, no_plot=True, **kw)
    cache = {}
    leaves = [_subtree_members(Z, c, int(x), cache) for x in d["leaves"]]
    return d["icoord"], d["dcoord"], leaves


def height_label(linkage):
    """The dendrogram's height axis in words."""
    if linkage == "ward":
        return "Ward merge height (from distances 1 - J)"
    return f"{linkage} linkage distance (1 - J)"


def dendrogram_svg(jsm_classes, classes, members, objects, multi_thread, linkage, k, suspects, run_name):
    """SVG of one run's class dendrogram (leaves: classes with member ranges, coloured by
    their flat cluster of the cut into k; suspects' leaves marked).  ``jsm_classes``: the
    class x class JSM; ``classes``: each object's class; ``members``: each class's object
    indices; ``objects``: the trace keys; ``suspects``: trace keys."""
    jc, cls = jsm_classes, classes
    c = jc.shape[0]
    n = len(cls)
    if c < 2:
        return (f'<div class="dendro"><b>{run_name} run</b><p>One equivalence class: all {n} traces have '
                f'identical attributes; no tree to draw.</p></div>')
    sizes = np.bincount(cls, minlength=c)
    Z = class_dendrogram(jc, sizes, linkage)
    flat = flat_cut(Z, k)          # the analysis's own cut: the colours are its flat clusters
    icoord, dcoord, leaves = dendrogram_layout(Z, c)
    suspect_objs = {objects.index(s) for s in suspects if s in objects}
    hmax = max((max(d) for d in dcoord), default=0.0) or 1.0
    row_h, label_w, tree_w, top = 16, 330, 300, 28
    nl = len(leaves)
    height = top + nl * row_h + 40
    width = label_w + tree_w + 20
    x_of = lambda h: label_w + 8 + h / hmax * tree_w  # noqa: E731
    y_of = lambda i: top + i / 10.0 * row_h  # noqa: E731   (scipy leaves at 5, 15, 25 ...)
    out = [f'<svg class="dendro-svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<text x="4" y="14" font-weight="bold">{esc(run_name)} run: {c} classes, {n} traces</text>']
    for li, cl in enumerate(leaves):
        objs = np.concatenate([members[x] for x in cl])
        keys = [objects[int(o)] for o in sorted(objs.tolist())]
        text = describe_members(keys, multi_thread)
        count = f" (\u00d7{len(keys)})" if len(keys) > 1 else ""
        colour = CLUSTER_COLOURS[(int(flat[cl[0]]) - 1) % len(CLUSTER_COLOURS)]
        flagged = bool(suspect_objs.intersection(objs.tolist()))
        y = y_of(10 * li + 5)
        title = esc(shorten(f"{text}{count}" + (f" [{len(cl)} classes]" if len(cl) > 1 else ""), 4000))
        emph = ' fill="#c00" font-weight="bold"' if flagged else ""
        out.append(f'<g class="leaf{" suspect" if flagged else ""}"><title>{title}</title>'
                   f'<rect x="{label_w - 2}" y="{y - 5:.1f}" width="9" height="9" fill="{colour}"/>'
                   f'<text x="{label_w - 6}" y="{y + 4:.1f}" text-anchor="end"{emph}>'
                   f'{esc(shorten(text, LABEL_CHARS - len(count)) + count)}</text></g>')
    for xs, hs in zip(icoord, dcoord):
        pts = " ".join(f"{x_of(h):.1f},{y_of(x):.1f}" for x, h in zip(xs, hs))
        out.append(f'<polyline points="{pts}" fill="none" stroke="#333" stroke-width="1.2"/>')
    heights = np.sort(Z[:, 2])
    if 2 <= k <= c:       # k = 1 (two traces: k is clipped to N - 1) cuts nothing, no line
        lo = heights[c - k - 1] if c - k - 1 >= 0 else 0.0
        cut = (lo + heights[c - k]) / 2
        xc = x_of(cut)
        out.append(f'<line x1="{xc:.1f}" y1="{top - 6}" x2="{xc:.1f}" y2="{top + nl * row_h}" stroke="#d62728" '
                   f'stroke-dasharray="4 3"/><text x="{xc + 3:.1f}" y="{top - 8}" fill="#d62728">cut: '
                   f'k = {k}</text>')
    ya = top + nl * row_h + 8
    out.append(f'<line x1="{x_of(0):.1f}" y1="{ya}" x2="{x_of(hmax):.1f}" y2="{ya}" stroke="#666"/>')
    for t in (0.0, hmax / 2, hmax):
        out.append(f'<line x1="{x_of(t):.1f}" y1="{ya}" x2="{x_of(t):.1f}" y2="{ya + 4}" stroke="#666"/>'
                   f'<text x="{x_of(t):.1f}" y="{ya + 15}" text-anchor="middle">{t:.3g}</text>')
    out.append(f'<text x="{x_of(hmax / 2):.1f}" y="{ya + 28}" text-anchor="middle" fill="#444">'
               f'{esc(height_label(linkage))}</text>')
    out.append("</svg>")
    note = (f'<p class="small">Showing the last {DENDRO_LEAVES} merges; each leaf is a subtree.</p>'
            if c > DENDRO_LEAVES else "")
    return f'<div class="dendro">{"".join(out)}{note}</div>'



# --------------------------------------------------------------------------- lattices

def lattice_svg(lattice, attr_label, objects, multi_thread):
    """Layered SVG of a lattice's Hasse diagram: object concepts (equivalence classes) as
    coloured nodes labelled with their members; every node's tooltip lists the attributes
    it introduces.  ``attr_label``: attribute id -> name; ``objects``: the trace keys."""
    arrs = lattice.to_arrays()
    oip, oob = arrs["own_indptr"], arrs["own_objects"]
    children = children_lists(arrs)
    parents = parents_lists(children)
    n = len(children)
    class_of_concept = {int(lattice.object_concept(int(objs[0]))): ci for ci, objs in enumerate(lattice.classes())}
    rows = layers(n, parents, children)
    slot, layer_h, pad = 118, 74, 20
    width = max(len(layer) for layer in rows) * slot + 2 * pad
    height = len(rows) * layer_h + 2 * pad
    xy = {}
    for d, layer in enumerate(rows):
        off = (width - len(layer) * slot) / 2
        for j, v in enumerate(layer):
            xy[v] = (off + (j + 0.5) * slot, pad + 10 + d * layer_h)
    out = [f'<svg class="lat-svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'font-family="sans-serif" font-size="10">']
    for p in range(n):
        for c in children[p]:
            (x1, y1), (x2, y2) = xy[p], xy[c]
            out.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#999"/>')
    for v in range(n):
        x, y = xy[v]
        intro = introduced_attributes(arrs, parents, v)
        attrs = ", ".join(weighted_label(attr_label, a, w) for a, w in intro[:40])
        if len(intro) > 40:
            attrs += f", \u2026 {len(intro) - 40} more"
        own = oob[oip[v]:oip[v + 1]]
        tip = f"concept c{v}" + (f"; introduces: {attrs}" if attrs else "")
        if v in class_of_concept:
            ci = class_of_concept[v]
            members = describe_members([objects[int(o)] for o in own], multi_thread)
            tip += f"; class C{ci}: {len(own)} trace(s), {members}"
            colour = CLUSTER_COLOURS[ci % len(CLUSTER_COLOURS)]
            out.append(f'<g class="lat-node lat-class"><title>{esc(shorten(tip, 4000))}</title>'
                       f'<circle cx="{x:.1f}" cy="{y:.1f}" r="7" fill="{colour}" stroke="#333"/>'
                       f'<text x="{x:.1f}" y="{y + 19:.1f}" text-anchor="middle">C{ci} ({len(own)})</text>'
                       f'<text x="{x:.1f}" y="{y + 30:.1f}" text-anchor="middle" fill="#555">'
                       f'{esc(shorten(members, 22))}</text></g>')
        else:
            out.append(f'<g class="lat-node"><title>{esc(shorten(tip, 4000))}</title>'
                       f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="#fff" stroke="#333"/></g>')
    out.append("</svg>")
    return "".join(out)
