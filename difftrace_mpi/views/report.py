"""One self-contained HTML report of a results file (``python -m difftrace_mpi report``).

Everything is read from the HDF5 file written by ``analyze --out`` (layout in ``store``);
nothing is recomputed from the traces.  The page needs no network: CSS, a small script,
SVG drawings and the heatmap data are all inline.  It holds:

* the ticket summary, the ranking table (sortable by clicking a column header; the best
  row highlighted; clicking a row shows that row's setting below) and the consensus;
* the timing view, when the traces carried timestamps (uftrace, OTF2) and some loop's
  mean iteration time changed while its structure did not: per setting, the flagged
  loops with their bodies, both clocks (wall, outside MPI calls) and the rule;
* JSM heatmaps of the normal run, the faulty run and ``JSM_D`` side by side, rows and
  columns in (rank, thread) order, for the best row's setting and, within a size budget,
  for the other settings (a selector); below them, when the file holds the full N x N
  matrices, the asymmetric subsumption heatmaps of both runs (row i, column j: share of
  i's attributes found in j) and which normal classes each suspect's faulty row subsumes;
* the dendrograms of both runs for the best row (class-level clustering from
  ``cluster.class_dendrogram``; leaves are equivalence classes labelled with their member
  ranges), the flat cut into k clusters dashed;
* the concept lattices (layered SVG drawing up to ``LATTICE_DRAW_LIMIT`` concepts, a
  table of equivalence classes always);
* the diffNLR of the best row's top suspects (common runs collapsed, loop bodies
  expandable), and of the top suspect under every other filter;
* the input notes, the missing and truncated traces and the settings.

Large N: the N x N pictures are built from the class-level data (each object's class and
the class x class JSM), never as an N x N matrix.  When N exceeds ``max_cells`` (256),
consecutive traces in (rank, thread) order are grouped into blocks of
``b = ceil(N / max_cells)``; a similarity cell is the *mean* J over its b x b pairs and
a diff cell the *maximum* JSM_D over them (a single changed pair stays visible).  Grids
up to ``RECT_LIMIT`` cells a side are SVG ``<rect class="hm-cell">`` elements; larger ones
are a ``<canvas>`` filled by the inline script from one byte per cell (base64 in
``data-values``).  Every heatmap carries ``data-rows``, ``data-cols``, ``data-block`` and
``data-n``.
"""
import base64
import html
import json
import math
import os
import re
from types import SimpleNamespace

import numpy as np

from .. import __version__
from . import diffnlr
from ..stages import nlr
from ..engine.pipeline import compact_ranges, hang_view
from ..stages.cluster import class_dendrogram
from ..errors import DiffTraceError
from .text import diff_title, diffnlr_keys, plural
from ..store import StoredResults

DEFAULT_MAX_CELLS = 256       # heatmap side cap (cells); larger N is aggregated in blocks
RECT_LIMIT = 64               # up to this many cells a side: SVG rects; above: canvas
LATTICE_DRAW_LIMIT = 60       # lattices up to this many concepts are drawn
DENDRO_LEAVES = 60            # dendrograms with more classes show the last merges only
HEATMAP_BUDGET = 2_000_000    # bytes of heatmaps for the settings other than the best row's
SET_BUDGET = 1_500_000        # bytes of dendrograms / lattices for the other settings
TIMING_ROWS = 50              # timing flags shown per setting (all are in the results file)
DIFF_MAX_COST = 4000          # as the CLI: bounded Myers search for the diffNLRs
DIFF_CONTEXT = 8              # common tokens kept around each change in the diffNLRs
LABEL_CHARS = 56              # visible characters of a dendrogram leaf label
PLOT_PX = 320                 # heatmap plot side in CSS pixels (about)

# colour ramps (exact RGB; the browser test looks for them in a screenshot)
SIM_STOPS = ((0.0, (247, 251, 255)), (0.5, (107, 174, 214)), (1.0, (8, 48, 107)))
DIFF_ZERO = (236, 236, 236)
DIFF_STOPS = ((0.0, (254, 224, 210)), (0.5, (239, 59, 44)), (1.0, (103, 0, 13)))
SUB_STOPS = ((0.0, (247, 252, 245)), (0.5, (116, 196, 118)), (1.0, (0, 68, 27)))     # subsumption S
CLUSTER_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2",
                   "#7f7f7f", "#bcbd22", "#17becf", "#d62728")


# --------------------------------------------------------------------------- text

_BAD_CHARS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def _clean(s):
    """Control characters (but newline and tab), lone surrogates and non-characters as
    visible backslash escapes: the page stays valid UTF-8 and shows what the name holds."""
    return _BAD_CHARS.sub(lambda m: "\\x%02x" % ord(m.group(0)) if ord(m.group(0)) < 0x100
                          else "\\u%04x" % ord(m.group(0)), str(s))


def esc(s):
    """Any value as HTML text: control characters and lone surrogates made visible, then
    ``& < > " '`` escaped (safe in element text and in quoted attributes)."""
    return html.escape(_clean(s), quote=True)


def _cut(s, limit):
    s = str(s)
    return s if len(s) <= limit else s[:limit - 1] + "\u2026"


def _cut_left(s, limit):
    """Paths: keep the end, the informative part."""
    s = str(s)
    return s if len(s) <= limit else "\u2026" + s[-(limit - 1):]


def key_label(key, multi_thread):
    """``(5, 0)`` -> ``5.0`` (``5`` when every rank has one thread 0); an int -> itself."""
    if isinstance(key, (tuple, list)):
        return f"{key[0]}.{key[1]}" if multi_thread else f"{key[0]}"
    return f"{key}"


def describe_members(keys, multi_thread=True):
    """Trace keys in words: ``ranks 1-6, 9`` (single-threaded runs), ``ranks 0-511
    threads 1-7``, ``rank 3 threads 0-7; ranks 4-5 thread 0``; process keys (ints):
    ``ranks 1-6, 9``."""
    if not keys:
        return "no traces"
    if not isinstance(keys[0], (tuple, list)):
        ranks = sorted(set(int(k) for k in keys))
        return f"rank{'s' if len(ranks) > 1 else ''} {compact_ranges(ranks)}"
    by_rank = {}
    for r, t in keys:
        by_rank.setdefault(int(r), set()).add(int(t))
    groups = {}
    for r, ts in by_rank.items():
        groups.setdefault(tuple(sorted(ts)), []).append(r)
    parts = []
    for threads, ranks in sorted(groups.items(), key=lambda kv: min(kv[1])):
        part = f"rank{'s' if len(ranks) > 1 else ''} {compact_ranges(ranks)}"
        if multi_thread or threads != (0,):
            part += f" thread{'s' if len(threads) > 1 else ''} {compact_ranges(threads)}"
        parts.append(part)
    return "; ".join(parts)


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
    no change, grey; 1..255 = small to largest change, light to dark red)."""
    if kind == "sim":
        return _ramp(SIM_STOPS, 256)
    if kind == "sub":
        return _ramp(SUB_STOPS, 256)
    return [DIFF_ZERO] + _ramp(DIFF_STOPS, 255)


def quantize(values, kind, vmax=1.0):
    """Palette indices (uint8) of ``values``: J * 255 for similarities; for the diff 0
    only where JSM_D = 0, else 1..255 proportional to ``vmax`` (the largest change)."""
    v = np.asarray(values, dtype=np.float64)
    if kind in ("sim", "sub"):
        return np.rint(np.clip(v, 0.0, 1.0) * 255).astype(np.uint8)
    if vmax <= 0:
        return np.zeros(v.shape, dtype=np.uint8)
    q = np.clip(np.rint(v / vmax * 255), 1, 255)
    return np.where(v > 0, q, 0).astype(np.uint8)


def _hex(rgb):
    return "#%02x%02x%02x" % rgb


# --------------------------------------------------------------------------- aggregation

def grid_shape(n, max_cells=DEFAULT_MAX_CELLS):
    """(block, cells): traces per block side and cells per side for ``n`` traces."""
    if n <= 0:
        return 1, 0
    block = max(1, math.ceil(n / max(1, int(max_cells))))
    return block, math.ceil(n / block)


def block_mean(jsm_classes, classes, block):
    """Mean J over b x b blocks of consecutive objects, from the class JSM and each
    object's class (no N x N matrix: sums = A^T J A with A the class x block counts)."""
    classes = np.asarray(classes, dtype=np.int64)
    jc = np.asarray(jsm_classes, dtype=np.float64)
    n = len(classes)
    nb = math.ceil(n / block)
    blk = np.arange(n) // block
    counts = np.zeros((jc.shape[0], nb), dtype=np.float64)
    np.add.at(counts, (classes, blk), 1.0)
    sums = counts.T @ (jc @ counts)
    sizes = counts.sum(axis=0)
    return sums / np.outer(sizes, sizes)


def block_max_diff(jsm_n, classes_n, jsm_f, classes_f, block, chunk_elems=1 << 22):
    """Max JSM_D = |J_faulty - J_normal| over b x b blocks of consecutive objects.

    Objects with the same (normal class, faulty class) pair have identical JSM_D rows, so
    the work is over those joint classes present in each block, in bounded chunks."""
    cn = np.asarray(classes_n, dtype=np.int64)
    cf = np.asarray(classes_f, dtype=np.int64)
    jn = np.asarray(jsm_n, dtype=np.float64)
    jf = np.asarray(jsm_f, dtype=np.float64)
    n = len(cn)
    nb = math.ceil(n / block)
    joint, joint_of = np.unique(np.stack([cn, cf], axis=1), axis=0, return_inverse=True)
    joint_of = joint_of.reshape(-1)
    nj = len(joint)
    members = np.unique((np.arange(n) // block) * nj + joint_of)     # (block, joint) present
    m_block, m_joint = members // nj, members % nj
    starts = np.flatnonzero(np.r_[True, m_block[1:] != m_block[:-1]])
    jn_m, jf_m = joint[m_joint, 0], joint[m_joint, 1]
    per_col = np.empty((nj, nb), dtype=np.float64)       # max over each column block
    step = max(1, chunk_elems // max(1, len(members)))
    for a0 in range(0, nj, step):
        rows = joint[a0:a0 + step]
        d = np.abs(jf[np.ix_(rows[:, 1], jf_m)] - jn[np.ix_(rows[:, 0], jn_m)])
        per_col[a0:a0 + step] = np.maximum.reduceat(d, starts, axis=1)
    return np.maximum.reduceat(per_col[m_joint], starts, axis=0)


# --------------------------------------------------------------------------- reading

class _Level:
    """One (combo, attributes, level) block of a results file."""

    def __init__(self, group, keys):
        self.keys = keys
        self.classes = (group["classes_normal"][()].astype(np.int64), group["classes_faulty"][()].astype(np.int64))
        self.jsm = (group["jsm_classes_normal"][()], group["jsm_classes_faulty"][()])
        self.scores = group["change_score"][()]
        # the suspects (bool per object); files written before it was stored lack it
        self.suspect = group["suspect"][()].astype(bool) if "suspect" in group else None
        self.full = all(f"jsm_{w}" in group for w in ("normal", "faulty", "diff"))
        # subsumption heatmaps only where the full matrices are kept (small N)
        self.sub = None
        if all(f"subsumption_{w}" in group for w in ("normal", "faulty", "classes_normal", "classes_faulty")):
            self.sub = (group["subsumption_classes_normal"][()], group["subsumption_classes_faulty"][()])
        self.cross = None
        if "subsumption_cross" in group:
            cg = group["subsumption_cross"]
            self.cross = {k: cg[k][()] for k in cg}

    @property
    def n(self):
        return len(self.keys)

    def members(self, run):
        """Object indices of every class of ``run`` (0 normal, 1 faulty)."""
        cls = self.classes[run]
        order = np.argsort(cls, kind="stable")
        bounds = np.searchsorted(cls[order], np.arange(self.jsm[run].shape[0] + 1))
        return [order[bounds[c]:bounds[c + 1]] for c in range(self.jsm[run].shape[0])]

    def grids(self, max_cells):
        block, _ = grid_shape(self.n, max_cells)
        (cn, cf), (jn, jf) = self.classes, self.jsm
        return block, (block_mean(jn, cn, block), block_mean(jf, cf, block),
                       block_max_diff(jn, cn, jf, cf, block))


class _Report:
    """What the page needs from a results file, read once."""

    def __init__(self, stored, max_cells):
        f = stored.file
        self.stored = stored
        self.path = stored.path
        self.max_cells = max_cells
        ranking = stored.ranking()
        self.rows = ranking.get("rows", [])
        self.consensus = ranking.get("consensus", {"processes": [], "threads": []})
        self.normal = str(f.attrs.get("normal", ranking.get("normal", "")))
        self.faulty = str(f.attrs.get("faulty", ranking.get("faulty", "")))
        self.no_difference = bool(f.attrs.get("no_difference", ranking.get("no_difference", False)))
        self.formats = [str(f.attrs.get(f"{r}_format", "")) for r in ("normal", "faulty")]
        self.rank_sources = [str(f.attrs.get(f"{r}_rank_source", "")) for r in ("normal", "faulty")]
        self.objects = stored.objects
        self.processes = f["processes"][()].tolist()
        self.present = f["objects/present"][()].astype(bool)
        self.complete = f["objects/complete"][()].astype(bool)
        self.notes = [n.decode("utf-8", "replace") if isinstance(n, bytes) else str(n) for n in f["notes"][()]]
        self.grid = {k: json.loads(v) for k, v in f["grid"].attrs.items()}
        self.mpi_ranks = int(f["timing"].attrs.get("mpi_ranks", 1)) if "timing" in f else 1
        self.multi_thread = any(t != 0 for _, t in self.objects)
        self.has_process_level = len(self.processes) != len(self.objects)
        self._levels = {}

    @staticmethod
    def combo_of(row):
        return f"{row['filter']}.K{row['k']}"

    def level(self, combo, aname, level):
        key = (combo, aname, level)
        if key not in self._levels:
            path = f"combos/{combo}/attributes/{aname}/{level}"
            if path not in self.stored.file:
                raise DiffTraceError(f"{self.path}: no {path}")
            keys = self.objects if level == "thread" else self.processes
            self._levels[key] = _Level(self.stored.file[path], keys)
        return self._levels[key]

    def labels(self, level):
        keys = self.objects if level == "thread" else self.processes
        return [key_label(k, self.multi_thread) for k in keys]


# --------------------------------------------------------------------------- heatmaps

def _heatmap_svg_frame(g, cp, ticks, axis_title, kind, vmax, canvas, row_title=None):
    """Outer SVG: tick labels (``ticks``: one per cell, the first trace of its block),
    axis titles (``row_title`` on the left when given, else ``axis_title`` on both), frame
    and colour bar around the plot area.  Returns (svg, left, top)."""
    tick_step = max(1, math.ceil(13 / cp))
    shown = [_cut(ticks[i], 9) for i in range(0, g, tick_step)]
    left = top = 24 + 6 * max((len(t) for t in shown), default=1)
    side = g * cp
    width, height = left + side + 12, top + side + 46
    out = [f'<svg class="hm-svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'font-family="sans-serif" font-size="10">']
    for i, lab in zip(range(0, g, tick_step), shown):
        lab = esc(lab)
        c = i * cp + cp / 2
        out.append(f'<text x="{left - 4}" y="{top + c + 3.5:.1f}" text-anchor="end">{lab}</text>')
        out.append(f'<text transform="translate({left + c + 3.5:.1f},{top - 4}) rotate(-90)">{lab}</text>')
    out.append(f'<text x="{left + side / 2:.1f}" y="10" text-anchor="middle" fill="#444">{esc(axis_title)}</text>')
    out.append(f'<text transform="translate(10,{top + side / 2:.1f}) rotate(-90)" text-anchor="middle" '
               f'fill="#444">{esc(row_title or axis_title)}</text>')
    if not canvas:
        out.append("%RECTS%")
    out.append(f'<rect x="{left - .5}" y="{top - .5}" width="{side + 1}" height="{side + 1}" fill="none" '
               f'stroke="#888" stroke-width="1"/>')
    # colour bar
    gid = f"dt-grad-{kind}"          # defined once per page (see _gradients)
    bar_y = top + side + 14
    out.append(f'<rect x="{left}" y="{bar_y}" width="{side}" height="8" fill="url(#{gid})" stroke="#aaa" '
               f'stroke-width=".5"/>')
    lo, hi = ("0", "1") if kind in ("sim", "sub") else ("0 (grey: none)", f"{vmax:.4g}" if vmax > 0 else "no change")
    out.append(f'<text x="{left}" y="{bar_y + 20}">{esc(lo)}</text>')
    out.append(f'<text x="{left + side}" y="{bar_y + 20}" text-anchor="end">{esc(hi)}</text>')
    out.append("</svg>")
    return "".join(out), left, top


def _gradients():
    """The colour-bar gradients, once per page in an always-rendered zero-size SVG (a
    gradient inside a hidden set would not paint for the others)."""
    grads = []
    for kind in ("sim", "diff", "sub"):
        pal = palette(kind)
        stops = "".join(f'<stop offset="{(i - (kind == "diff")) / (255 - (kind == "diff")):.3f}" '
                        f'stop-color="{_hex(pal[i])}"/>' for i in list(range(int(kind == "diff"), 256, 17)) + [255])
        grads.append(f'<linearGradient id="dt-grad-{kind}">{stops}</linearGradient>')
    return ('<svg width="0" height="0" style="position:absolute" aria-hidden="true"><defs>'
            + "".join(grads) + "</defs></svg>")


def heatmap_html(matrix, kind, labels, title, block, n, axis_title, row_title=None):
    """One heatmap: ``<div class="hm" data-rows data-cols data-block data-n data-kind
    data-values>`` holding an SVG frame and either ``<rect class="hm-cell">`` cells or a
    canvas that the inline script fills.  ``kind``: sim (J), diff (JSM_D) or sub (the
    asymmetric subsumption S, read row -> column)."""
    matrix = np.asarray(matrix, dtype=np.float64)
    g = matrix.shape[0]
    vmax = float(matrix.max()) if matrix.size else 0.0
    q = quantize(matrix, kind, vmax if kind == "diff" else 1.0)
    canvas = g > RECT_LIMIT
    cp = max(1, PLOT_PX // g) if canvas else max(4, PLOT_PX // max(g, 1))
    block_labels = [labels[i * block] if block == 1 else
                    f"{labels[i * block]}\u2013{labels[min(n, (i + 1) * block) - 1]}" for i in range(g)]
    ticks = [labels[i * block] for i in range(g)]
    frame, left, top = _heatmap_svg_frame(g, cp, ticks, axis_title, kind, vmax, canvas, row_title)
    if canvas:
        plot = (f'<canvas class="hm-plot hm-canvas" width="{g}" height="{g}" '
                f'style="left:{left}px;top:{top}px;width:{g * cp}px;height:{g * cp}px"></canvas>')
    else:
        pal = palette(kind)
        cells = [f'<rect class="hm-cell" x="{j * cp}" y="{i * cp}" width="{cp}" height="{cp}" '
                 f'fill="{_hex(pal[q[i, j]])}"/>' for i in range(g) for j in range(g)]
        plot = ""
        frame = frame.replace("%RECTS%", f'<svg class="hm-plot" x="{left}" y="{top}" width="{g * cp}" '
                                         f'height="{g * cp}" shape-rendering="crispEdges">' + "".join(cells)
                              + "</svg>")
    what = ("mean J over blocks of %d x %d traces" % (block, block) if block > 1 else "J per pair") \
        if kind == "sim" else ("max JSM_D over blocks of %d x %d traces" % (block, block) if block > 1
                               else "JSM_D = |J faulty - J normal| per pair")
    if kind == "sub":
        what = ("row i, column j: share of i's attributes found in j (1 = j does all i does)"
                + (", mean over blocks of %d x %d traces" % (block, block) if block > 1 else ""))
    values = base64.b64encode(q.tobytes()).decode("ascii")
    return (f'<figure class="hm" data-kind="{kind}" data-rows="{g}" data-cols="{g}" data-block="{block}" '
            f'data-n="{n}" data-vmax="{vmax:.6g}" data-labels="{esc(json.dumps(block_labels))}" '
            f'data-values="{values}">'
            f'<figcaption style="margin-left:{left}px"><b>{esc(title)}</b><br>'
            f'<span class="small">{esc(what)}</span></figcaption>'
            f'<div class="hm-fig">{frame}{plot}</div></figure>')


def heatmap_set(rep, combo, aname, level):
    lv = rep.level(combo, aname, level)
    block, (gn, gf, gd) = lv.grids(rep.max_cells)
    labels = rep.labels(level)
    axis = ("rank.thread" if rep.multi_thread else "rank") if level == "thread" else "rank (process level)"
    what = "traces" if level == "thread" else "processes"
    figs = [heatmap_html(gn, "sim", labels, "normal run JSM", block, lv.n, axis),
            heatmap_html(gf, "sim", labels, "faulty run JSM", block, lv.n, axis),
            heatmap_html(gd, "diff", labels, "diff JSM_D", block, lv.n, axis)]
    note = (f"{lv.n} {what}" + (f", shown as {gn.shape[0]} x {gn.shape[0]} cells of {block} x {block} {what} "
                                f"(in (rank, thread) order)" if block > 1 else ""))
    if not lv.full:
        note += "; built from the class-level JSMs"
    return (f'<p class="small">{esc(combo)} {esc(aname)}, {esc(level)} level: {esc(note)}.</p>'
            f'<div class="hm-row">{"".join(figs)}</div>' + _subsumption_html(rep, lv, level, block, labels, axis))


def _subsumption_html(rep, lv, level, block, labels, axis):
    """The subsumption heatmaps of both runs (asymmetric: read row -> column) and the
    suspects' cross-run subsumption, when the file holds the full matrices."""
    if lv.sub is None:
        return ""
    (cn, cf), (sn, sf) = lv.classes, lv.sub
    row_title, col_title = f"row i ({axis}): share of i found in column j", f"column j ({axis})"
    figs = [heatmap_html(block_mean(sn, cn, block), "sub", labels, "normal run subsumption S", block, lv.n,
                         col_title, row_title),
            heatmap_html(block_mean(sf, cf, block), "sub", labels, "faulty run subsumption S", block, lv.n,
                         col_title, row_title)]
    out = ['<p class="small">Subsumption S[i, j] = share of trace i\'s weighted attributes that trace j also has. '
           'S[i, j] = 1 and S[j, i] &lt; 1: j does everything i does and more (extra calls, I/O, a spawned '
           'thread); both below 1: they do different work.</p>', f'<div class="hm-row sub-row">{"".join(figs)}</div>']
    cross = lv.cross
    if cross is not None and len(cross["faulty_classes"]):
        keys = rep.objects if level == "thread" else rep.processes
        normal_members = lv.members(0)
        faulty_members = lv.members(1)

        def classes_text(offsets, ids, k):
            chosen = ids[offsets[k]:offsets[k + 1]]
            if not len(chosen):
                return "none"
            return " | ".join(describe_members([keys[int(o)] for o in normal_members[int(c)]], rep.multi_thread)
                             for c in chosen)
        rows = []
        for k, c in enumerate(cross["faulty_classes"].tolist()):
            members = faulty_members[c]
            if lv.suspect is not None:          # the class's suspects only, not its bystanders
                members = members[lv.suspect[members]] if lv.suspect[members].any() else members
            who = describe_members([keys[int(o)] for o in members], rep.multi_thread)
            rows.append(f"<tr><td>{esc(_cut(who, 80))}</td>"
                        f"<td>{esc(_cut(classes_text(cross['subsumes_offsets'], cross['subsumes'], k), 300))}</td>"
                        f"<td>{esc(_cut(classes_text(cross['subsumed_by_offsets'], cross['subsumed_by'], k), 300))}"
                        f"</td></tr>")
        out.append('<table class="plain cross-sub"><thead><tr><th>suspect faulty traces (one class)</th>'
                   '<th>does all that these normal traces did</th><th>does nothing beyond these normal traces</th>'
                   f'</tr></thead><tbody>{"".join(rows)}</tbody></table>')
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


def _height_label(linkage):
    if linkage == "ward":
        return "Ward merge height (from distances 1 - J)"
    return f"{linkage} linkage distance (1 - J)"


def dendrogram_svg(rep, combo, aname, linkage, run, k, suspects):
    """SVG of one run's class dendrogram (leaves: classes with member ranges, coloured by
    their flat cluster of the cut into k; suspects' leaves marked)."""
    from scipy.cluster.hierarchy import fcluster
    lv = rep.level(combo, aname, "thread")
    jc, cls = lv.jsm[run], lv.classes[run]
    c = jc.shape[0]
    runname = ("normal", "faulty")[run]
    members = lv.members(run)
    if c < 2:
        return (f'<div class="dendro"><b>{runname} run</b><p>One equivalence class: all {lv.n} traces have '
                f'identical attributes; no tree to draw.</p></div>')
    sizes = np.bincount(cls, minlength=c)
    Z = class_dendrogram(jc, sizes, linkage)
    flat = fcluster(Z, t=k, criterion="maxclust")
    icoord, dcoord, leaves = dendrogram_layout(Z, c)
    suspect_objs = {rep.objects.index(s) for s in suspects if s in rep.objects}
    hmax = max((max(d) for d in dcoord), default=0.0) or 1.0
    row_h, label_w, tree_w, top = 16, 330, 300, 28
    nl = len(leaves)
    height = top + nl * row_h + 40
    width = label_w + tree_w + 20
    x_of = lambda h: label_w + 8 + h / hmax * tree_w  # noqa: E731
    y_of = lambda i: top + i / 10.0 * row_h  # noqa: E731   (scipy leaves at 5, 15, 25 ...)
    out = [f'<svg class="dendro-svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<text x="4" y="14" font-weight="bold">{esc(runname)} run: {c} classes, {lv.n} traces</text>']
    for li, cl in enumerate(leaves):
        objs = np.concatenate([members[x] for x in cl])
        keys = [rep.objects[int(o)] for o in sorted(objs.tolist())]
        text = describe_members(keys, rep.multi_thread)
        count = f" (\u00d7{len(keys)})" if len(keys) > 1 else ""
        colour = CLUSTER_COLOURS[(int(flat[cl[0]]) - 1) % len(CLUSTER_COLOURS)]
        flagged = bool(suspect_objs.intersection(objs.tolist()))
        y = y_of(10 * li + 5)
        title = esc(_cut(f"{text}{count}" + (f" [{len(cl)} classes]" if len(cl) > 1 else ""), 4000))
        emph = ' fill="#c00" font-weight="bold"' if flagged else ""
        out.append(f'<g class="leaf{" suspect" if flagged else ""}"><title>{title}</title>'
                   f'<rect x="{label_w - 2}" y="{y - 5:.1f}" width="9" height="9" fill="{colour}"/>'
                   f'<text x="{label_w - 6}" y="{y + 4:.1f}" text-anchor="end"{emph}>'
                   f'{esc(_cut(text, LABEL_CHARS - len(count)) + count)}</text></g>')
    for xs, hs in zip(icoord, dcoord):
        pts = " ".join(f"{x_of(h):.1f},{y_of(x):.1f}" for x, h in zip(xs, hs))
        out.append(f'<polyline points="{pts}" fill="none" stroke="#333" stroke-width="1.2"/>')
    heights = np.sort(Z[:, 2])
    if k <= c:
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
               f'{esc(_height_label(linkage))}</text>')
    out.append("</svg>")
    note = (f'<p class="small">Showing the last {DENDRO_LEAVES} merges; each leaf is a subtree.</p>'
            if c > DENDRO_LEAVES else "")
    return f'<div class="dendro">{"".join(out)}{note}</div>'


def dendrogram_set(rep, row):
    combo = rep.combo_of(row)
    suspects = [(t["rank"], t["thread"]) for t in row["top_threads"]]
    svgs = [dendrogram_svg(rep, combo, row["attributes"], row["linkage"], run, int(row["clusters"]), suspects)
            for run in (0, 1)]
    return (f'<p class="small">{esc(combo)} {esc(row["attributes"])}, {esc(row["linkage"])} linkage, thread level; '
            f'leaves are equivalence classes (traces with identical attributes), coloured by their cluster in the '
            f'cut into k = {int(row["clusters"])}; top suspects in red.</p>'
            f'<div class="dendro-row">{"".join(svgs)}</div>')


# --------------------------------------------------------------------------- lattices

def _introduced(arrs, parents, i):
    ip, at, wt = arrs["intent_indptr"], arrs["intent_attrs"], arrs["intent_weights"]
    a, w = at[ip[i]:ip[i + 1]], wt[ip[i]:ip[i + 1]]
    best = np.zeros(len(a), dtype=np.int64)
    for p in parents[i]:
        pa, pw = at[ip[p]:ip[p + 1]], wt[ip[p]:ip[p + 1]]
        _, ia, ib = np.intersect1d(a, pa, assume_unique=True, return_indices=True)
        np.maximum.at(best, ia, pw[ib])
    new = w > best
    return list(zip(a[new].tolist(), w[new].tolist()))


def _layers(n, parents, children):
    depth = [0] * n
    for i in range(n):                      # canonical order is a linear extension
        for p in parents[i]:
            depth[i] = max(depth[i], depth[p] + 1)
    layers = [[] for _ in range(max(depth) + 1)] if n else []
    for i in range(n):
        layers[depth[i]].append(i)
    pos = {}
    for layer in layers:
        for j, v in enumerate(layer):
            pos[v] = j
    for sweep in range(4):                  # barycentre ordering, down then up
        seq = layers[1:] if sweep % 2 == 0 else layers[-2::-1]
        for layer in seq:
            nb = parents if sweep % 2 == 0 else children
            layer.sort(key=lambda v: (sum(pos[u] for u in nb[v]) / len(nb[v]) if nb[v] else pos[v], v))
            for j, v in enumerate(layer):
                pos[v] = j
    return layers


def lattice_html(rep, combo, aname, run):
    """A lattice: layered SVG (when small) and the table of its equivalence classes."""
    from ..stages.attributes import attribute_labeller
    from ..stages.lattice import Lattice
    runname = ("normal", "faulty")[run]
    path = f"combos/{combo}/attributes/{aname}/lattice/{runname}"
    head = f"<h4>{esc(runname)} run</h4>"
    if path not in rep.stored.file:
        return f'<div class="lat">{head}<p>No lattice stored (analyze ran with --no-lattice).</p></div>'
    group = rep.stored.file[path]
    if "skipped" in group.attrs:
        return f'<div class="lat">{head}<p>Lattice not built: {esc(group.attrs["skipped"])}</p></div>'
    lattice = Lattice.from_arrays({key: group[key][()] for key in group})
    arrs = lattice.to_arrays()
    n = lattice.n_concepts
    cip, ch = arrs["child_indptr"], arrs["children"]
    oip, oob = arrs["own_indptr"], arrs["own_objects"]
    children = [ch[cip[i]:cip[i + 1]].tolist() for i in range(n)]
    parents = [[] for _ in range(n)]
    for p in range(n):
        for c in children[p]:
            parents[c].append(p)
    label = attribute_labeller(rep.stored.names, len(rep.stored.loops(combo)), aname.split(".")[0])
    classes = lattice.classes()
    class_of_concept = {}
    for ci, objs in enumerate(classes):
        class_of_concept[int(lattice.object_concept(int(objs[0])))] = ci
    rows = []
    for ci, objs in enumerate(classes):
        keys = [rep.objects[int(o)] for o in objs]
        rows.append(f"<tr><td>C{ci}</td><td>c{int(lattice.object_concept(int(objs[0])))}</td><td>{len(objs)}</td>"
                    f"<td>{esc(describe_members(keys, rep.multi_thread))}</td></tr>")
    table = (f'<table class="plain"><thead><tr><th>class</th><th>concept</th><th>traces</th><th>members</th></tr>'
             f'</thead><tbody>{"".join(rows)}</tbody></table>')
    summary = (f"<p>{n} concepts, {len(classes)} equivalence classes, "
               f"{int(sum(len(c) for c in children))} cover edges.</p>")
    if n > LATTICE_DRAW_LIMIT:
        return (f'<div class="lat">{head}{summary}<p class="small">Too many concepts to draw '
                f'(more than {LATTICE_DRAW_LIMIT}); <code>python -m difftrace_mpi lattice {esc(rep.path)} --combo '
                f'{esc(combo)} --attributes {esc(aname)} --run {runname} --dot f.dot</code> exports it.</p>'
                f'{table}</div>')
    layers = _layers(n, parents, children)
    slot, layer_h, pad = 118, 74, 20
    width = max(len(layer) for layer in layers) * slot + 2 * pad
    height = len(layers) * layer_h + 2 * pad
    xy = {}
    for d, layer in enumerate(layers):
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
        intro = _introduced(arrs, parents, v)
        attrs = ", ".join(label(a) if w == 1 else f"{label(a)}:{w}" for a, w in intro[:40])
        if len(intro) > 40:
            attrs += f", \u2026 {len(intro) - 40} more"
        own = oob[oip[v]:oip[v + 1]]
        tip = f"concept c{v}" + (f"; introduces: {attrs}" if attrs else "")
        if v in class_of_concept:
            ci = class_of_concept[v]
            members = describe_members([rep.objects[int(o)] for o in own], rep.multi_thread)
            tip += f"; class C{ci}: {len(own)} trace(s), {members}"
            colour = CLUSTER_COLOURS[ci % len(CLUSTER_COLOURS)]
            out.append(f'<g class="lat-node lat-class"><title>{esc(_cut(tip, 4000))}</title>'
                       f'<circle cx="{x:.1f}" cy="{y:.1f}" r="7" fill="{colour}" stroke="#333"/>'
                       f'<text x="{x:.1f}" y="{y + 19:.1f}" text-anchor="middle">C{ci} ({len(own)})</text>'
                       f'<text x="{x:.1f}" y="{y + 30:.1f}" text-anchor="middle" fill="#555">'
                       f'{esc(_cut(members, 22))}</text></g>')
        else:
            out.append(f'<g class="lat-node"><title>{esc(_cut(tip, 4000))}</title>'
                       f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="#fff" stroke="#333"/></g>')
    out.append("</svg>")
    return (f'<div class="lat">{head}{summary}<div class="scroll">{"".join(out)}</div>'
            f'<p class="small">Top = concept of all traces; coloured nodes are object concepts (their '
            f'equivalence class); hover a node for the attributes it introduces.</p>{table}</div>')


def lattice_set(rep, combo, aname):
    return (f'<p class="small">{esc(combo)} {esc(aname)}, thread level.</p><div class="lat-row">'
            + lattice_html(rep, combo, aname, 0) + lattice_html(rep, combo, aname, 1) + "</div>")


# --------------------------------------------------------------------------- diffNLR

def _bodies(loops, names, used):
    bodies, todo = {}, list(used)
    while todo:
        loop = todo.pop()
        if f"L{loop}" in bodies or loop >= len(loops):
            continue
        ids, counts = loops[loop]
        bodies[f"L{loop}"] = nlr.tokens(nlr.NLR(ids, counts), names)
        todo.extend(int(-i - 1) for i in ids if i < 0)
    return bodies


def suspect_diff(rep, combo, key):
    """(blocks, loop bodies) of trace ``key`` under ``combo``."""
    entries = [rep.stored.nlr(combo, run, key) for run in ("normal", "faulty")]
    seqs = [nlr.tokens(nlr.NLR(*e), rep.stored.names) for e in entries]
    used = sorted({int(-i - 1) for ids, _ in entries for i in ids if i < 0})
    bodies = _bodies(rep.stored.loops(combo), rep.stored.names, used)
    return diffnlr.diff_tokens(seqs[0], seqs[1], max_cost=DIFF_MAX_COST), bodies


def _diff_sections(rep, n_suspects):
    """[(key, combo, blocks, bodies, primary)]: the best row's top suspects and the hang's
    likely cause when it is not one of them (as ``analyze`` prints them), then the top
    suspect of the first row of every other (filter, K)."""
    out = []
    if not rep.rows:
        return out
    best = rep.rows[0]
    combo = rep.combo_of(best)
    state = rep.stored.hang_state() if n_suspects > 0 else None
    for key in diffnlr_keys(_top_keys(rep, n_suspects), hang_view(state, limit=1) if state is not None else None):
        out.append((key, combo, *suspect_diff(rep, combo, key), True))
    seen = {combo}
    for row in rep.rows[1:]:
        c = rep.combo_of(row)
        if c in seen or not row["top_threads"]:
            continue
        seen.add(c)
        t = row["top_threads"][0]
        key = (t["rank"], t["thread"])
        out.append((key, c, *suspect_diff(rep, c, key), False))
    return out


def _top_keys(rep, n_suspects):
    return [(t["rank"], t["thread"]) for t in rep.rows[0]["top_threads"][:n_suspects]] if rep.rows else []


# --------------------------------------------------------------------------- timing

def timing_flags(rep):
    """[(combo, flags, rule)] for every setting with timing flags (traces with timestamps:
    uftrace, OTF2), the ranking's order of settings first; flags are dicts as
    ``StoredResults.loop_timing`` gives them, largest change first."""
    stored = rep.stored.combos()
    order = list(dict.fromkeys([rep.combo_of(r) for r in rep.rows if rep.combo_of(r) in stored] + stored))
    out = []
    for combo in order:
        view = rep.stored.loop_timing(combo, table=False)
        if view and view["flags"]:
            out.append((combo, view["flags"], view["rule"]))
    return out


def timing_html(rep, per_setting=TIMING_ROWS):
    """The timing view: loops whose mean iteration time changed while their structure did
    not, per setting, on both clocks; "" when no setting has a flag."""
    from .text import timing_factor, timing_rule_text
    from ..stages.timing import format_ns
    found = timing_flags(rep)
    if not found:
        return ""
    head = ("<tr><th>setting</th><th>rank</th><th>thread</th><th>loop</th><th>body</th>"
            "<th>wall time per iteration<br>normal &rarr; faulty</th><th>wall ratio</th>"
            "<th>outside MPI calls per iteration<br>normal &rarr; faulty</th><th>outside MPI ratio</th>"
            "<th>iterations</th></tr>")
    rows, more, rules = [], [], []
    for combo, flags, rule in found:
        if timing_rule_text(rule) not in rules:
            rules.append(timing_rule_text(rule))
        labels = {}
        for f in flags[:per_setting]:
            loop = int(f["loop"])
            if loop not in labels:
                labels[loop] = " ".join(nlr.token_labels(nlr.NLR(*rep.stored.loops(combo)[loop]), rep.stored.names))
            body = labels[loop]
            ratio, own_ratio = float(f["ratio"]), float(f["own_ratio"])
            other = "" if f["same_nlr"] else " (other loops of this trace changed)"
            rows.append(
                f'<tr data-combo="{esc(combo)}" data-rank="{int(f["rank"])}" data-thread="{int(f["thread"])}" '
                f'data-loop="{loop}"><td>{esc(combo)}</td><td class="num">{int(f["rank"])}</td>'
                f'<td class="num">{int(f["thread"])}</td><td>L{loop}</td>'
                f'<td class="body" title="{esc(_cut(body, 4000))}">{esc(_cut(body, 120))}</td>'
                f'<td>{esc(format_ns(f["normal_ns"]))} &rarr; {esc(format_ns(f["faulty_ns"]))}</td>'
                f'<td class="num" data-sort="{ratio!r}">{esc(timing_factor(ratio))}</td>'
                f'<td>{esc(format_ns(f["own_normal_ns"]))} &rarr; {esc(format_ns(f["own_faulty_ns"]))}</td>'
                f'<td class="num" data-sort="{own_ratio!r}">{esc(timing_factor(own_ratio))}</td>'
                f'<td class="num">{int(f["iterations"])}{esc(other)}</td></tr>')
        if len(flags) > per_setting:
            more.append(f"{esc(combo)}: {esc(plural(len(flags) - per_setting, 'more flag'))}")
    note = (f'<p class="small">{esc(plural(len(found), "setting"))} with loops whose mean '
            f'iteration time changed while their structure did not (a timing fault leaves the JSMs '
            f'unchanged). Rule: {esc("; ".join(rules))}. Largest change first within each setting.</p>')
    tail = (f'<p class="small">Not shown (see /combos/&lt;setting&gt;/loop_timing/flags in the results file): '
            f'{"; ".join(more)}.</p>' if more else "")
    return (f'<h2 id="timing-h">Timing</h2>{note}<table id="timing" class="plain timing"><thead>{head}</thead>'
            f'<tbody>{"".join(rows)}</tbody></table>{tail}')


# --------------------------------------------------------------------------- summary

def ticket_text(rep, diffs):
    """The same ticket summary as ``analyze`` prints, from the stored results."""
    from .text import ticket_summary
    rows = [SimpleNamespace(filter=r["filter"], k=r["k"], attributes=r["attributes"], linkage=r["linkage"],
                            bscore=r["bscore"], clusters=r["clusters"],
                            top_processes=[(p["rank"], p["score"]) for p in r["top_processes"]],
                            top_threads=[((t["rank"], t["thread"]), t["score"]) for t in r["top_threads"]])
            for r in rep.rows]
    if not rows and not rep.no_difference:
        return "The results file has no ranking rows."
    hang_state = rep.stored.hang_state()
    view = SimpleNamespace(no_difference=rep.no_difference, rows=rows, normal_path=rep.normal,
                           faulty_path=rep.faulty, objects=rep.objects, complete=rep.complete,
                           hang_view=lambda: hang_view(hang_state) if hang_state else None)
    return ticket_summary(view, [(key, combo, blocks, bodies) for key, combo, blocks, bodies, primary in diffs
                                 if primary], {combo: flags for combo, flags, _ in timing_flags(rep)})


# --------------------------------------------------------------------------- page

CSS = """\
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1em 1.5em;color:#222;background:#fff}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;margin:1.4em 0 .4em;border-bottom:1px solid #ccc}
.small{font-size:.85em;color:#555}code,pre{font-family:ui-monospace,Menlo,Consolas,monospace}
pre.ticket{background:#f6f6f6;border:1px solid #ddd;padding:.6em;white-space:pre-wrap;max-width:110em}
table.plain,table.ranking{border-collapse:collapse;font-size:13px}
table.plain td,table.plain th,table.ranking td,table.ranking th{border:1px solid #ddd;padding:2px 6px;text-align:left}
table.ranking th{background:#eee;cursor:pointer;user-select:none;white-space:nowrap}
table.ranking th[aria-sort=ascending]::after{content:" \\25B2"}
table.ranking th[aria-sort=descending]::after{content:" \\25BC"}
table.ranking tbody tr{cursor:pointer}table.ranking tbody tr:hover{background:#f3f7ff}
table.ranking tr.best{background:#fff3c4;font-weight:bold}table.ranking tr.selected td{outline:2px solid #4a7bd0}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.hm-row,.dendro-row,.lat-row{display:flex;flex-wrap:wrap;gap:14px;align-items:flex-start}
figure.hm{margin:0}figure.hm figcaption{font-size:12px}
.hm-fig{position:relative}.hm-canvas{position:absolute;image-rendering:pixelated;image-rendering:crisp-edges}
.scroll{overflow:auto;max-width:100%;border:1px solid #eee}
.lat{max-width:100%}.controls{margin:.4em 0}.controls label{margin-right:1em}
#dt-tip{position:fixed;display:none;pointer-events:none;background:#222;color:#fff;font-size:12px;padding:3px 6px;
border-radius:3px;z-index:10;white-space:nowrap}
.missing{color:#777;font-style:italic}
"""

JS = r"""
(function(){
"use strict";
var root=document.getElementById("dt-report");
var PAL=JSON.parse(root.getAttribute("data-palettes"));
function rgb(h){return [parseInt(h.substr(0,2),16),parseInt(h.substr(2,2),16),parseInt(h.substr(4,2),16)];}
var P={sim:PAL.sim.map(rgb),diff:PAL.diff.map(rgb),sub:PAL.sub.map(rgb)};
function bytes(s){var b=atob(s),a=new Uint8Array(b.length);for(var i=0;i<b.length;i++)a[i]=b.charCodeAt(i);return a;}
function draw(cv){
  if(cv.getAttribute("data-drawn"))return;
  var hm=cv.closest(".hm"),g=+hm.getAttribute("data-rows"),h=+hm.getAttribute("data-cols");
  var v=bytes(hm.getAttribute("data-values")),p=P[hm.getAttribute("data-kind")];
  var ctx=cv.getContext("2d"),img=ctx.createImageData(h,g),d=img.data;
  for(var i=0;i<g*h;i++){var c=p[v[i]];d[4*i]=c[0];d[4*i+1]=c[1];d[4*i+2]=c[2];d[4*i+3]=255;}
  ctx.putImageData(img,0,0);cv.setAttribute("data-drawn","1");
}
Array.prototype.forEach.call(document.querySelectorAll("canvas.hm-canvas"),draw);
var tip=document.getElementById("dt-tip");
Array.prototype.forEach.call(document.querySelectorAll(".hm-plot"),function(el){
  var hm=el.closest(".hm"),vals=null,labels=null;
  el.addEventListener("mousemove",function(e){
    if(!vals){vals=bytes(hm.getAttribute("data-values"));labels=JSON.parse(hm.getAttribute("data-labels"));}
    var r=el.getBoundingClientRect(),g=+hm.getAttribute("data-rows");
    var i=Math.floor((e.clientY-r.top)/r.height*g),j=Math.floor((e.clientX-r.left)/r.width*g);
    if(i<0||j<0||i>=g||j>=g){tip.style.display="none";return;}
    var q=vals[i*g+j],kind=hm.getAttribute("data-kind"),vmax=+hm.getAttribute("data-vmax");
    var frac=kind==="sim"||kind==="sub",val=frac?q/255:(q===0?0:q/255*vmax);
    var exact=q===0||(q===255&&frac);
    var sym=kind==="sim"?"J":kind==="sub"?"S":"JSM_D";
    tip.textContent=labels[i]+" \u00d7 "+labels[j]+": "+sym+(exact?" = ":" \u2248 ")+val.toFixed(3);
    tip.style.left=(e.clientX+12)+"px";tip.style.top=(e.clientY+12)+"px";tip.style.display="block";
  });
  el.addEventListener("mouseleave",function(){tip.style.display="none";});
});
var table=document.getElementById("ranking"),tbody=table.tBodies[0],sel=document.getElementById("row-select");
var level="thread";
function show(comp,key){
  var box=document.getElementById(comp);if(!box)return;var found=false;
  Array.prototype.forEach.call(box.children,function(c){
    if(!c.hasAttribute("data-key"))return;
    var on=c.getAttribute("data-key")===key;c.hidden=!on;if(on)found=true;});
  var m=box.querySelector(".missing");if(m)m.hidden=found;
}
function select(n){
  var tr=tbody.querySelector('tr[data-row="'+n+'"]');if(!tr)return;
  Array.prototype.forEach.call(tbody.rows,function(r){r.classList.toggle("selected",r===tr);});
  if(sel)sel.value=String(n);
  var hk=tr.getAttribute("data-hm-key");
  show("heatmaps",hk+"|"+level);show("dendrograms",tr.getAttribute("data-dn-key"));show("lattices",hk);
  var cur=document.getElementById("current");if(cur)cur.textContent="row "+n+": "+tr.getAttribute("data-title");
  root.setAttribute("data-selected",String(n));
}
function sortBy(col,dir){
  var th=table.tHead.rows[0].cells[col],num=th.getAttribute("data-type")==="num";
  var rows=Array.prototype.slice.call(tbody.rows);
  rows.sort(function(a,b){
    var x=a.cells[col].getAttribute("data-sort")||a.cells[col].textContent;
    var y=b.cells[col].getAttribute("data-sort")||b.cells[col].textContent;
    var c=num?(parseFloat(x)-parseFloat(y)):x.localeCompare(y);
    return dir*c||(+a.getAttribute("data-row"))-(+b.getAttribute("data-row"));});
  rows.forEach(function(r){tbody.appendChild(r);});
  Array.prototype.forEach.call(table.tHead.rows[0].cells,function(h,k){
    if(k===col)h.setAttribute("aria-sort",dir>0?"ascending":"descending");else h.removeAttribute("aria-sort");});
  table.setAttribute("data-sorted",th.getAttribute("data-col")+":"+(dir>0?"asc":"desc"));
}
Array.prototype.forEach.call(table.tHead.rows[0].cells,function(th,col){
  th.addEventListener("click",function(){sortBy(col,th.getAttribute("aria-sort")==="ascending"?-1:1);});});
tbody.addEventListener("click",function(e){var tr=e.target.closest("tr");if(tr)select(+tr.getAttribute("data-row"));});
if(sel)sel.addEventListener("change",function(){select(+sel.value);});
Array.prototype.forEach.call(document.querySelectorAll('input[name="level"]'),function(r){
  r.addEventListener("change",function(){level=r.value;select(+root.getAttribute("data-selected"));});});
var h=location.hash.replace(/^#/,"").split("&"),start=1;
h.forEach(function(p){var kv=p.split("=");
  if(kv[0]==="row"&&+kv[1]>0)start=+kv[1];
  if(kv[0]==="sort"){var s=(kv[1]||"").split(":");
    Array.prototype.forEach.call(table.tHead.rows[0].cells,function(th,col){
      if(th.getAttribute("data-col")===s[0])sortBy(col,s[1]==="desc"?-1:1);});}
});
if(tbody.rows.length)select(start);
root.setAttribute("data-js","ready");
})();
"""


def _fmt_threads(items, multi):
    return " ".join(key_label((t["rank"], t["thread"]), multi) for t in items) or "-"


def _ranking_table(rep):
    cols = [("row", "#", "num"), ("filter", "filter", "text"), ("k", "K", "num"), ("attributes", "attributes", "text"),
            ("linkage", "linkage", "text"), ("bscore", "B-score", "num"), ("clusters", "k", "num"),
            ("top_processes", "top processes", "text"), ("top_threads", "top threads", "text")]
    head = "".join(f'<th data-col="{c}" data-type="{t}" title="sort by {esc(lab)}">{esc(lab)}</th>'
                   for c, lab, t in cols)
    body = []
    for i, r in enumerate(rep.rows, 1):
        combo = rep.combo_of(r)
        procs = " ".join(str(p["rank"]) for p in r["top_processes"]) or "-"
        ptip = "; ".join(f"{p['rank']}: {p['score']:.4f}" for p in r["top_processes"])
        ttip = "; ".join(f"{key_label((t['rank'], t['thread']), True)}: {t['score']:.4f}" for t in r["top_threads"])
        title = f"{combo} {r['attributes']} {r['linkage']}"
        body.append(
            f'<tr data-row="{i}" class="{"best" if i == 1 else ""}" data-hm-key="{esc(combo)}|{esc(r["attributes"])}" '
            f'data-dn-key="{esc(combo)}|{esc(r["attributes"])}|{esc(r["linkage"])}" data-title="{esc(title)}">'
            f'<td class="num">{i}</td><td>{esc(r["filter"])}</td><td class="num">{int(r["k"])}</td>'
            f'<td>{esc(r["attributes"])}</td><td>{esc(r["linkage"])}</td>'
            f'<td class="num" data-sort="{r["bscore"]!r}">{r["bscore"]:.4f}</td>'
            f'<td class="num">{int(r["clusters"])}</td>'
            f'<td title="{esc(ptip)}">{esc(procs)}</td>'
            f'<td title="{esc(ttip)}">{esc(_fmt_threads(r["top_threads"], rep.multi_thread))}</td></tr>')
    return (f'<table id="ranking" class="ranking"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>')


def _consensus_html(rep):
    c = rep.consensus
    procs = ", ".join(f"{p['rank']} ({p['rows']})" for p in c.get("processes", [])[:8]) or "-"
    threads = ", ".join(f"{key_label((t['rank'], t['thread']), True)} ({t['rows']})"
                        for t in c.get("threads", [])[:8]) or "-"
    return (f'<p class="consensus">Named in the top 3 of most of the {esc(plural(len(rep.rows), "row"))} '
            f'(rows naming each):<br>'
            f'processes: <b>{esc(procs)}</b><br>threads (rank.thread): <b>{esc(threads)}</b></p>')


def _inputs_html(rep):
    out = ["<table class='plain'><tbody>"]
    for ri, label in enumerate(("normal", "faulty")):
        path = rep.normal if ri == 0 else rep.faulty
        out.append(f"<tr><th>{label}</th><td>{esc(path)}</td><td>{esc(rep.formats[ri])}</td>"
                   f"<td>{esc(plural(int(rep.present[ri].sum()), 'trace'))}</td>"
                   f"<td>ranks from {esc(rep.rank_sources[ri])}</td></tr>")
    out.append("</tbody></table>")
    out.append(f"<p>{esc(plural(len(rep.processes), 'process'))}, {esc(plural(len(rep.objects), 'trace'))} "
               f"(threads); analysis ran on {esc(plural(rep.mpi_ranks, 'MPI rank'))}.</p>")
    lists = []
    for ri, label in enumerate(("normal", "faulty")):
        missing = [rep.objects[i] for i in np.flatnonzero(~rep.present[ri])]
        if missing:
            lists.append(f"<li>missing from the {label} run (counted as empty traces): "
                         f"{esc(describe_members(missing, rep.multi_thread))}</li>")
        cut = [rep.objects[i] for i in np.flatnonzero(rep.present[ri] & ~rep.complete[ri])]
        if cut:
            lists.append(f"<li>{label} run, cut short (killed, hung or truncated): "
                         f"{esc(describe_members(cut, rep.multi_thread))}</li>")
    if lists:
        out.append("<ul>" + "".join(lists) + "</ul>")
    if rep.notes:
        shown = rep.notes[:300]
        more = f"<li>\u2026 {len(rep.notes) - 300} more notes (see /notes in the results file)</li>" \
            if len(rep.notes) > 300 else ""
        out.append(f'<h3>Notes ({len(rep.notes)})</h3><ul class="notes">'
                   + "".join(f"<li>{esc(n)}</li>" for n in shown) + more + "</ul>")
    else:
        out.append("<p>No notes: every trace was found in both runs and read completely.</p>")
    grid = rep.grid
    gl = [("filters", grid.get("filters")), ("K", grid.get("ks")), ("attributes", grid.get("attributes")),
          ("linkages", grid.get("linkages")), ("custom regex", grid.get("custom") or "-"),
          ("suspects per row", grid.get("top"))]
    out.append("<h3>Settings (grid)</h3><table class='plain'><tbody>" + "".join(
        f"<tr><th>{esc(k)}</th><td>{esc(' '.join(map(str, v)) if isinstance(v, list) else v)}</td></tr>"
        for k, v in gl) + "</tbody></table>")
    return "".join(out)


def _component(comp_id, sets, missing_text):
    parts = [f'<div id="{comp_id}" class="comp">']
    for i, (key, content) in enumerate(sets):
        parts.append(f'<div class="set" data-key="{esc(key)}"{"" if i == 0 else " hidden"}>{content}</div>')
    parts.append(f'<p class="missing" hidden>{esc(missing_text)}</p></div>')
    return "".join(parts)


def _budgeted(candidates, render, budget):
    """[(key, html)] for the first candidate always, the others while the budget lasts;
    and the number left out."""
    out, used, left_out = [], 0, 0
    for i, key in enumerate(candidates):
        if i and used > budget:
            left_out += 1
            continue
        content = render(key)
        if i:
            used += len(content)
            if used > budget:
                left_out += 1
                continue
        out.append((key, content))
    return out, left_out


def build_report(results_path, max_cells=DEFAULT_MAX_CELLS, suspects=3):
    """The report of a results file, as one HTML string."""
    stored = StoredResults(results_path)
    try:
        rep = _Report(stored, max_cells)
        return _page(rep, suspects)
    except (KeyError, ValueError) as exc:
        raise DiffTraceError(f"{results_path}: incomplete or unreadable results ({exc})")
    finally:
        stored.close()


def _page(rep, n_suspects):
    rows = rep.rows
    diffs = _diff_sections(rep, n_suspects)
    ticket = ticket_text(rep, diffs)
    pal = json.dumps({k: [_hex(c)[1:] for c in palette(k)] for k in ("sim", "diff", "sub")})
    title = f"DiffTrace report: {_cut_left(rep.faulty, 70)} vs {_cut_left(rep.normal, 70)}"
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{esc(title)}</title>", f"<style>{CSS}{diffnlr.HTML_CSS}</style></head>",
           f'<body><div id="dt-report" data-palettes="{esc(pal)}" data-selected="1">', _gradients(),
           f"<h1>{esc(title)}</h1>",
           f'<p class="small">difftrace_mpi {esc(__version__)} report of {esc(rep.path)}. Normal run: '
           f'{esc(rep.normal)}; faulty run: {esc(rep.faulty)}.</p>',
           '<h2 id="summary">Summary for a ticket</h2>', f'<pre class="ticket">{esc(ticket)}</pre>',
           timing_html(rep)]
    if not rows:
        out.append("<p>The results file has no ranking rows.</p>")
    else:
        best = rows[0]
        best_combo = rep.combo_of(best)
        hm_keys, dn_keys = [], []
        for r in rows:
            k = f"{rep.combo_of(r)}|{r['attributes']}"
            if k not in hm_keys:
                hm_keys.append(k)
            dk = f"{k}|{r['linkage']}"
            if dk not in dn_keys:
                dn_keys.append(dk)
        levels = ("thread", "process") if rep.has_process_level else ("thread",)
        hm_sets, hm_left = _budgeted([f"{k}|{lv}" for k in hm_keys for lv in levels],
                                     lambda key: heatmap_set(rep, *key.split("|")), HEATMAP_BUDGET)
        dn_sets, dn_left = _budgeted(
            dn_keys, lambda key: dendrogram_set(rep, next(r for r in rows if f"{rep.combo_of(r)}|{r['attributes']}|"
                                                         f"{r['linkage']}" == key)), SET_BUDGET)
        lt_sets, lt_left = _budgeted(hm_keys, lambda key: lattice_set(rep, *key.split("|")), SET_BUDGET)
        options = "".join(
            f'<option value="{i}">#{i} {esc(rep.combo_of(r))} {esc(r["attributes"])} {esc(r["linkage"])} '
            f'(B = {r["bscore"]:.4f})</option>' for i, r in enumerate(rows, 1))
        level_radio = "".join(f'<label><input type="radio" name="level" value="{lv}"'
                              f'{" checked" if lv == "thread" else ""}>{lv} level</label>'
                              for lv in levels) if len(levels) > 1 else ""
        left_note = ""
        if hm_left or dn_left or lt_left:
            left_note = (f'<p class="small">To keep the file small, {hm_left} heatmap, {dn_left} dendrogram and '
                         f'{lt_left} lattice view(s) of lower rows are not embedded.</p>')
        out += ['<h2 id="heatmaps-h">Similarity matrices (JSM) and their difference</h2>',
                f'<div class="controls"><label>Setting: <select id="row-select">{options}</select></label>'
                f'{level_radio} <span class="small">(or click a row of the ranking table)</span></div>',
                f'<p class="small">Shown: <span id="current">row 1: {esc(best_combo)} {esc(best["attributes"])} '
                f'{esc(best["linkage"])}</span>. Rows and columns are traces in (rank, thread) order; darker blue = '
                f'more similar, red = similarity changed (scaled to the largest change); green (below, when '
                f'the file holds full matrices) = subsumption, read from row to column.</p>', left_note,
                _component("heatmaps", hm_sets, "This setting's heatmaps are not embedded (size budget)."),
                '<h2 id="ranking-h">Ranking table</h2>',
                '<p class="small">One row per setting, lowest B-score first (the settings where the fault changed '
                'the clustering most), after the settings whose suspects single out fewer than half of the '
                'ranks; the best row is highlighted. Click a header to sort, a row to show its '
                'setting.</p>', _ranking_table(rep), _consensus_html(rep),
                '<h2 id="dendrograms-h">Dendrograms</h2>',
                _component("dendrograms", dn_sets, "This row's dendrograms are not embedded (size budget)."),
                '<h2 id="lattices-h">Concept lattices</h2>',
                _component("lattices", lt_sets, "This setting's lattices are not embedded (size budget).")]
    out.append('<h2 id="diffnlr-h">diffNLR of the top suspects</h2>')
    if not diffs:
        out.append("<p>No suspects.</p>")
    others = [d for d in diffs if not d[4]]
    for key, combo, blocks, bodies, primary in diffs:
        if primary:
            out.append(f'<section class="diff" data-combo="{esc(combo)}" data-key="{key[0]}.{key[1]}">'
                       + diffnlr.render_html(blocks, bodies, title=diff_title(key, combo, _top_keys(rep, n_suspects)),
                                             context=DIFF_CONTEXT, include_css=False) + "</section>")
    if others:
        out.append("<h3>Top suspect under the other filters</h3>")
        for key, combo, blocks, bodies, primary in others:
            out.append(f'<details class="diff" data-combo="{esc(combo)}" data-key="{key[0]}.{key[1]}"><summary>'
                       f'rank {key[0]} thread {key[1]} ({esc(combo)}): {esc(diffnlr.summarize(blocks))}</summary>'
                       + diffnlr.render_html(blocks, bodies, title=f"rank {key[0]} thread {key[1]} ({combo})",
                                             context=DIFF_CONTEXT, include_css=False) + "</details>")
    out += ['<h2 id="inputs-h">Inputs and settings</h2>', _inputs_html(rep),
            '<div id="dt-tip"></div></div>', f"<script>{JS}</script>", "</body></html>"]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- PNG

def require_matplotlib():
    """Fail with one clear line when matplotlib (needed for --png only) is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise DiffTraceError("--png needs matplotlib, which is not installed "
                             "(install it with: .venv/bin/python -m pip install matplotlib)")


def write_pngs(results_path, directory, max_cells=DEFAULT_MAX_CELLS):
    """PNG pictures of the best row for papers and tickets, with matplotlib's Agg backend:
    ``heatmaps_<level>.png`` (JSMs and their diff), ``subsumption_<level>.png`` (both runs'
    subsumption matrices, when the file holds the full matrices) and ``dendrograms.png``.
    Returns the paths written."""
    require_matplotlib()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from scipy.cluster.hierarchy import fcluster
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise DiffTraceError(f"cannot create {directory}: {exc.strerror or exc}")
    stored = StoredResults(results_path)
    written = []
    try:
        rep = _Report(stored, max_cells)
        if not rep.rows:
            raise DiffTraceError(f"{results_path}: no ranking rows to draw")
        best = rep.rows[0]
        combo, aname = rep.combo_of(best), best["attributes"]
        levels = ("thread", "process") if rep.has_process_level else ("thread",)

        def heatmaps_png(panels, block, labels, title, path):
            """One row of heatmaps: ``panels`` = [(grid, kind, name)]."""
            fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 5.2))
            for ax, (grid, kind, name) in zip(axes, panels):
                vmax = float(grid.max()) if kind == "diff" else 1.0
                q = quantize(grid, kind, vmax)
                cmap = ListedColormap(np.array(palette(kind)) / 255.0)
                im = ax.imshow(q, cmap=cmap, vmin=0, vmax=255, interpolation="nearest")
                g = grid.shape[0]
                step = max(1, math.ceil(g / 16))
                ticks = list(range(0, g, step))
                ax.set_xticks(ticks)
                ax.set_yticks(ticks)
                ax.set_xticklabels([labels[i * block] for i in ticks], rotation=90, fontsize=7)
                ax.set_yticklabels([labels[i * block] for i in ticks], fontsize=7)
                ax.set_title(name + (f" ({block}x{block} blocks)" if block > 1 else ""), fontsize=10)
                cb = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, ticks=[0, 255])
                cb.ax.set_yticklabels(["0", f"{vmax:.3g}" if kind == "diff" else "1"])
                if kind == "sub":
                    ax.set_xlabel("column j", fontsize=8)
                    ax.set_ylabel("row i: share of i found in j", fontsize=8)
            fig.suptitle(title)
            fig.tight_layout()
            fig.savefig(path, dpi=120, bbox_inches="tight")
            plt.close(fig)
            written.append(path)

        for level in levels:
            lv = rep.level(combo, aname, level)
            block, grids = lv.grids(max_cells)
            labels = rep.labels(level)
            what = plural(lv.n, "trace" if level == "thread" else "process")
            heatmaps_png(list(zip(grids, ("sim", "sim", "diff"), ("normal run JSM", "faulty run JSM", "diff JSM_D"))),
                         block, labels, f"{combo} {aname}, {level} level ({what})",
                         os.path.join(directory, f"heatmaps_{level}.png"))
            if lv.sub is not None:          # only where the file holds the full matrices (small N)
                (cn, cf), (sn, sf) = lv.classes, lv.sub
                heatmaps_png([(block_mean(sn, cn, block), "sub", "normal run subsumption S"),
                              (block_mean(sf, cf, block), "sub", "faulty run subsumption S")],
                             block, labels, f"{combo} {aname}, {level} level ({what}): subsumption, "
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
            flat = fcluster(Z, t=k, criterion="maxclust")
            icoord, dcoord, leaves = dendrogram_layout(Z, c)
            members = lv.members(run)
            for xs, hs in zip(icoord, dcoord):
                ax.plot(hs, xs, color="#333", lw=1)
            labels = []
            for cl in leaves:
                keys = [rep.objects[int(o)] for o in sorted(np.concatenate([members[x] for x in cl]).tolist())]
                labels.append(_cut(describe_members(keys, rep.multi_thread), 40) + (f" (x{len(keys)})"
                                                                                   if len(keys) > 1 else ""))
            ys = [10 * i + 5 for i in range(len(leaves))]
            ax.set_yticks(ys)
            ax.set_yticklabels(labels, fontsize=7)
            for tick, cl in zip(ax.get_yticklabels(), leaves):
                tick.set_color(CLUSTER_COLOURS[(int(flat[cl[0]]) - 1) % len(CLUSTER_COLOURS)])
            ax.set_ylim(0, 10 * len(leaves))
            ax.invert_yaxis()
            ax.set_xlabel(_height_label(best["linkage"]))
        fig.tight_layout()
        path = os.path.join(directory, "dendrograms.png")
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        written.append(path)
    except OSError as exc:
        raise DiffTraceError(f"cannot write the PNG pictures into {directory}: {exc.strerror or exc}")
    finally:
        stored.close()
    return written
