"""One self-contained HTML report of a results file (``python -m difftrace_mpi report``).

Everything is read from the HDF5 file written by ``analyze --out`` (layout in ``store``);
nothing is recomputed from the traces.  The page needs no network: CSS, a small script,
SVG drawings and the heatmap data are all inline.  It holds:

* the verdict first (``stages.diagnose.verdict``, when the file holds one: files written before it
  have none): the kind of failure, its one-line summary, the first culprit with why and
  where (call path, loop iteration, normal against faulty call), the next culprits, the
  processes that died and the stopped traces grouped by the calls they stopped in;
* the hang section when the faulty run stopped early: the stopped traces by the calls
  they stopped in, the hang view's progress and the per-trace divergences (the first
  ``DIVERGENCE_ROWS`` shown, more behind a ``<details>``); without a stop, the
  divergences alone ("Where each trace differs");
* the ticket summary, the ranking table (sortable by clicking a column header; the best
  row highlighted; clicking a row shows that row's setting below) and the consensus;
* the timing view, when the traces carried timestamps (uftrace, OTF2) and some loop's
  mean iteration time changed while its structure did not: per setting, the flagged
  loops with their bodies, both clocks (wall, outside MPI calls) and the rule;
* JSM heatmaps of the normal run, the faulty run and ``JSM_D`` side by side, rows and
  columns ordered by thread index, then rank (``svg.Layout``: all main threads, then all
  threads 1, ...; integer rank ticks, a band per thread index), with a selector for one
  thread index alone, for the best row's setting and, within a size budget, for the other
  settings (a selector); ``JSM_D`` on a fixed, stated scale 0 .. 1; below them, when the
  file holds the full N x N matrices, the asymmetric subsumption heatmaps of both runs
  (row i, column j: share of i's attributes found in j) and which normal classes each
  suspect's faulty row subsumes; for a run too large for a cell per trace, the per-class
  blocks (exact values between groups of traces in the same classes in both runs) and
  the histogram of the changes over every pair;
* the dendrograms of both runs for the best row (class-level clustering from
  ``cluster.class_dendrogram``; leaves are equivalence classes labelled with their member
  ranges), the flat cut into k clusters dashed;
* the concept lattices: a built-in layered drawing up to ``LATTICE_DRAW_LIMIT`` concepts;
  larger ones laid out by Graphviz's ``dot`` when the caller found it (up to
  ``GRAPHVIZ_LIMIT`` concepts), else a note that Graphviz is missing; a table of
  equivalence classes always (members as rank ranges, at most ``CLASS_ROWS`` rows);
* the diffNLR of the best row's top suspects (common runs collapsed, loop bodies
  expandable), and of the top suspect under every other filter;
* the input notes, the missing and truncated traces and the settings.

Large N: the N x N pictures are built from the class-level data (each object's class and
the class x class JSM), never as an N x N matrix.  When N exceeds ``max_cells`` (256),
consecutive traces of one thread index (in rank order) are grouped into blocks of ``b``
(the least that keeps the grid within ``max_cells``); a similarity cell is the *mean* J
over its b x b pairs and a diff cell the *maximum* JSM_D over them (a single changed
pair stays visible).  Grids
up to ``RECT_LIMIT`` cells a side are SVG ``<rect class="hm-cell">`` elements; larger ones
are a ``<canvas>`` filled by the inline script from one byte per cell (base64 in
``data-values``).  Every heatmap carries ``data-rows``, ``data-cols``, ``data-block`` and
``data-n``.

The page is assembled here; the drawings are ``svg`` (and ``png`` for ``--png``), what is
read from the file is ``report_data``, the CSS and script are ``assets/report.css`` and
``assets/report.js``, inlined.
"""
import json

import numpy as np

from .. import __version__
from . import asset_text, diffnlr
from ..escape import html_lines, html_text as esc
from .report_data import ReportData
from .report_verdict import (cell_html, changes_html, hang_html, ticket_text, timing_html,
                             verdict_html)
from .svg import (DEFAULT_MAX_CELLS, ClassAxis, block_mean, dendrogram_svg, gradients_svg, heatmap_html,
                  hex_colour, histogram_svg, lattice_svg, palette)
from .diffprose import summarize
from .diffview import diff_title, full_diff_command, not_kept_line, shown_diff_keys, trace_diff
from .text import key_label
from ..errors import DiffTraceError
from ..config import DIFF_CONTEXT, PAGE_DIFF_BOXES, REPORT_SUSPECTS
from ..naming import describe_members, plural, shorten, shorten_left

LATTICE_DRAW_LIMIT = 60       # lattices up to this many concepts are drawn
GRAPHVIZ_LIMIT = 400         # lattices up to this many concepts are laid out by Graphviz, when found
CLASS_ROWS = 200              # equivalence classes listed per lattice (all: the lattice command)
MEMBERS_TEXT = 200            # characters of a member list in a cell (the whole in its title)
CLASS_BLOCKS = 48             # groups (joint classes) drawn in a large run's per-class blocks
HEATMAP_BUDGET = 2_000_000    # bytes of heatmaps for the settings other than the best row's
SET_BUDGET = 1_500_000        # bytes of dendrograms / lattices for the other settings
CSS = asset_text("report.css")
JS = asset_text("report.js")


# --------------------------------------------------------------------------- heatmaps

def heatmap_set(rep, combo, aname, level):
    """The heatmaps of one setting and level: the three JSM pictures of every trace
    (grouped by thread index), and of each thread index alone (a selector) when the run
    is multi-threaded; below them the subsumption heatmaps, and for a run too large for a
    cell per trace the per-class blocks and the histogram of the changes."""
    lv = rep.level(combo, aname, level)
    layout = rep.layout(level)
    what = "traces" if level == "thread" else "processes"
    grouped = layout.threaded and len(layout.groups) > 1
    axis = ("rank, grouped by thread index" if grouped else "rank") if level == "thread" else "rank (process level)"
    note = f"{lv.n} {what}"
    if grouped:
        note += (" ordered by thread index, then rank (thread 0 of every rank, then thread 1, ...; the grey "
                 "bands mark the thread indices)")
    if layout.block > 1:
        note += f", shown as {layout.cells} x {layout.cells} cells of up to {layout.block} x {layout.block} {what}"
    if not lv.full:
        note += "; built from the class-level JSMs"
    views = [("all", layout, "every thread index")]
    if grouped:
        views += [(str(t), rep.layout(level, t), f"thread {t} only") for t in rep.thread_ids]
    out = [f'<p class="small">{esc(combo)} {esc(aname)}, {esc(level)} level: {esc(note)}.</p>']
    if len(views) > 1:
        options = "".join(f'<option value="{key}">{esc(words)}</option>' for key, _, words in views)
        out.append(f'<div class="controls"><label>Threads: <select class="thread-select">{options}</select></label>'
                   f' <span class="small">(one thread index: its ranks against each other)</span></div>')
    for i, (key, lay, words) in enumerate(views):
        grids = lv.grids(lay)
        ax = axis if key == "all" else f"rank (thread {key})"
        figs = [heatmap_html(grids[0], "sim", lay, "normal run JSM", ax, canvas=key != "all" or None),
                heatmap_html(grids[1], "sim", lay, "faulty run JSM", ax, canvas=key != "all" or None),
                heatmap_html(grids[2], "diff", lay, "diff JSM_D", ax, canvas=key != "all" or None)]
        out.append(f'<div class="hm-view" data-thread="{key}"{"" if i == 0 else " hidden"}>'
                   f'<div class="hm-row">{"".join(figs)}</div></div>')
    out.append(_subsumption_html(rep, lv, level, layout, axis))
    if layout.block > 1:
        out.append(_aggregate_html(rep, lv, level, layout))
    return "".join(out)


def _aggregate_html(rep, lv, level, layout):
    """What a run too large for a cell per trace shows beside its block heatmaps: the
    per-class blocks (exact values between groups of traces with the same classes in both
    runs) and the histogram of the changes over every pair."""
    keys = rep.objects if level == "thread" else rep.processes
    groups, (jn, jf, jd), left_out = lv.joint_view(layout, CLASS_BLOCKS)
    members = [describe_members([keys[int(o)] for o in g], rep.multi_thread) for g in groups]
    axis = ClassAxis([shorten(m, 200) for m in members], lv.n)
    figs = [heatmap_html(jn, "sim", axis, "normal run JSM, per group", "group"),
            heatmap_html(jf, "sim", axis, "faulty run JSM, per group", "group"),
            heatmap_html(jd, "diff", axis, "diff JSM_D, per group", "group")]
    rows = "".join(f"<tr><td>G{i}</td><td class=\"num\">{len(g)}</td>{cell_html(m, 200)}</tr>"
                   for i, (g, m) in enumerate(zip(groups, members), 1))
    more = (f'<p class="small">{esc(plural(left_out, "more group"))} not drawn (the {len(groups)} with the '
            f'largest changes are).</p>' if left_out else "")
    unchanged, counts = lv.change_histogram()
    pairs = unchanged + int(counts.sum())
    who = plural(lv.n, "trace" if level == "thread" else "process")
    return (f'<h3 class="aggregate-h">Per-class blocks</h3><p class="small">The {esc(who)} fall '
            f'into {esc(plural(len(groups) + left_out, "group"))} with the same equivalence class in both runs '
            f'(identical attributes); every value between two groups is exact, none is averaged.</p>'
            f'<div class="hm-row class-blocks">{"".join(figs)}</div>{more}'
            f'<table class="plain groups"><thead><tr><th>group</th><th>traces</th><th>members</th></tr></thead>'
            f'<tbody>{rows}</tbody></table>'
            f'<h3 class="aggregate-h">Histogram of the changes</h3><p class="small">Every pair of '
            f'{"traces" if level == "thread" else "processes"}: {pairs} pairs, {int(counts.sum())} changed '
            f'(JSM_D &gt; 0), '
            f'{int(counts[1:].sum()) if len(counts) > 1 else 0} by more than {1 / len(counts):g}.</p>'
            f'<div class="histogram">{histogram_svg(unchanged, counts, "pairs by JSM_D")}</div>')


def _subsumption_html(rep, lv, level, layout, axis):
    """The subsumption heatmaps of both runs (asymmetric: read row -> column) and the
    suspects' cross-run subsumption, when the file holds the full matrices."""
    if lv.sub is None:
        return ""
    (cn, cf), (sn, sf) = lv.classes, lv.sub
    row_title, col_title = f"row i ({axis}): share of i found in column j", f"column j ({axis})"
    cells = layout.object_cells()
    figs = [heatmap_html(block_mean(sn, cn, cells), "sub", layout, "normal run subsumption S", col_title, row_title),
            heatmap_html(block_mean(sf, cf, cells), "sub", layout, "faulty run subsumption S", col_title, row_title)]
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
            rows.append(f"<tr><td>{esc(shorten(who, 80))}</td>"
                        f"<td>{esc(shorten(classes_text(cross['subsumes_offsets'], cross['subsumes'], k), 300))}</td>"
                        f"<td>{esc(shorten(classes_text(cross['subsumed_by_offsets'], cross['subsumed_by'], k), 300))}"
                        f"</td></tr>")
        out.append('<table class="plain cross-sub"><thead><tr><th>suspect faulty traces (one class)</th>'
                   '<th>does all that these normal traces did</th><th>does nothing beyond these normal traces</th>'
                   f'</tr></thead><tbody>{"".join(rows)}</tbody></table>')
    return "".join(out)



# --------------------------------------------------------------------------- dendrograms

def dendrogram_set(rep, row):
    combo = rep.combo_of(row)
    suspects = [(t["rank"], t["thread"]) for t in row["top_threads"]]
    lv = rep.level(combo, row["attributes"], "thread")
    svgs = [dendrogram_svg(lv.jsm[run], lv.classes[run], lv.members(run), rep.objects, rep.multi_thread,
                           row["linkage"], int(row["clusters"]), suspects, ("normal", "faulty")[run])
            for run in (0, 1)]
    return (f'<p class="small">{esc(combo)} {esc(row["attributes"])}, {esc(row["linkage"])} linkage, thread level; '
            f'leaves are equivalence classes (traces with identical attributes), coloured by their cluster in the '
            f'cut into k = {int(row["clusters"])}; top suspects in red.</p>'
            f'<div class="dendro-row">{"".join(svgs)}</div>')


# --------------------------------------------------------------------------- lattices

def lattice_html(rep, combo, aname, run):
    """A lattice: its drawing (the built-in layered one up to ``LATTICE_DRAW_LIMIT``
    concepts; beyond, Graphviz's layout when ``rep.graphviz`` is set, up to
    ``GRAPHVIZ_LIMIT``, else a note saying why it is not drawn) and the table of its
    equivalence classes."""
    from ..stages.classify.attributes import attribute_labeller
    from .dot import render_svg, to_dot
    runname = ("normal", "faulty")[run]
    head = f"<h4>{esc(runname)} run</h4>"
    lattice, skipped = rep.lattice(combo, aname, runname)
    if skipped is not None:
        return f'<div class="lat">{head}<p>Lattice not built: {esc(skipped)}</p></div>'
    if lattice is None:
        return f'<div class="lat">{head}<p>No lattice stored (analyze ran with --no-lattice).</p></div>'
    n = lattice.n_concepts
    classes = lattice.classes()
    rows = []
    for ci, objs in enumerate(classes[:CLASS_ROWS]):
        keys = [rep.objects[int(o)] for o in objs]
        rows.append(f"<tr><td>C{ci}</td><td>c{int(lattice.object_concept(int(objs[0])))}</td><td>{len(objs)}</td>"
                    f"{cell_html(describe_members(keys, rep.multi_thread), MEMBERS_TEXT)}</tr>")
    more = (f'<p class="small">{esc(plural(len(classes) - CLASS_ROWS, "more class", "more classes"))} not '
            f'listed (<code>python -m difftrace_mpi lattice</code> lists them all).</p>'
            if len(classes) > CLASS_ROWS else "")
    table = (f'<table class="plain lat-classes"><thead><tr><th>class</th><th>concept</th><th>traces</th>'
             f'<th>members</th></tr></thead><tbody>{"".join(rows)}</tbody></table>{more}')
    summary = (f"<p>{n} concepts, {len(classes)} equivalence classes, "
               f"{int(np.diff(lattice.to_arrays()['child_indptr']).sum())} cover edges.</p>")
    if lattice.coverage is not None:    # a bounded lattice cut short: say what it covers
        summary += (f'<p class="lat-partial">{esc(lattice.coverage.describe())}. The JSMs and the ranking '
                    f'use every trace; only this lattice is partial.</p>')
    export = (f'<code>python -m difftrace_mpi lattice {esc(rep.results.source or "RESULTS.h5")} --combo {esc(combo)} --attributes '
              f'{esc(aname)} --run {runname} --dot f.dot</code>')
    label = attribute_labeller(rep.results.names, len(rep.results.combos[combo].loops), aname.split(".")[0])
    if n > LATTICE_DRAW_LIMIT:          # beyond the built-in drawing: Graphviz's layout, where installed
        if rep.graphviz and n <= GRAPHVIZ_LIMIT:
            members = lambda objs: describe_members([rep.objects[o] for o in objs], rep.multi_thread)  # noqa: E731
            try:
                drawing = render_svg(to_dot(lattice, attr_label=label, members_label=members, shown=6),
                                     rep.graphviz)
                return (f'<div class="lat">{head}{summary}<div class="scroll lat-dot">{drawing}</div>'
                        f'<p class="small">Laid out by Graphviz (dot): each box shows the attributes its concept '
                        f'introduces (the first 6) and its equivalence class; top = concept of all traces.</p>'
                        f'{table}</div>')
            except DiffTraceError as exc:
                why = f"{esc(exc)}, so it is not drawn"
        elif rep.graphviz:
            why = f"more than {GRAPHVIZ_LIMIT} concepts, too many to draw"
        else:
            why = ("Graphviz is not installed (no <code>dot</code> program found), so it is not drawn: install "
                   "Graphviz (e.g. <code>apt-get install graphviz</code>) to have it laid out here")
        return (f'<div class="lat">{head}{summary}<p class="small graphviz-note">More than {LATTICE_DRAW_LIMIT} '
                f'concepts, beyond the built-in drawing; {why}. {export} exports it.</p>{table}</div>')
    return (f'<div class="lat">{head}{summary}<div class="scroll">'
            f'{lattice_svg(lattice, label, rep.objects, rep.multi_thread)}</div>'
            f'<p class="small">Top = concept of all traces; coloured nodes are object concepts (their '
            f'equivalence class); hover a node for the attributes it introduces.</p>{table}</div>')


def lattice_set(rep, combo, aname):
    return (f'<p class="small">{esc(combo)} {esc(aname)}, thread level.</p><div class="lat-row">'
            + lattice_html(rep, combo, aname, 0) + lattice_html(rep, combo, aname, 1) + "</div>")


# --------------------------------------------------------------------------- diffNLR

def suspect_diff(rep, combo, key):
    """(blocks, loop bodies) of trace ``key`` under ``combo``."""
    _, blocks, bodies = trace_diff(rep.results, key, combo)
    return blocks, bodies


def _diff_sections(rep, n_suspects):
    """[(key, combo, blocks, bodies, primary)]: the verdict's first culprits, or (a file
    without a verdict) the best row's top suspects and the hang's likely cause when it is
    not one of them (as ``analyze`` prints them); then the top suspect of the first row of
    every other (filter, K); those whose NLRs the results keep."""
    out = []
    if not rep.rows:
        return out
    best = rep.rows[0]
    combo = rep.combo_of(best)
    for key in shown_diff_keys(rep.results, n_suspects)[0]:
        out.append((key, combo, *suspect_diff(rep, combo, key), True))
    seen = {combo}
    for row in rep.rows[1:]:
        c = rep.combo_of(row)
        if c in seen or not row["top_threads"]:
            continue
        seen.add(c)
        t = row["top_threads"][0]
        key = (t["rank"], t["thread"])
        if rep.results.nlrs_kept(key):
            out.append((key, c, *suspect_diff(rep, c, key), False))
    return out


# --------------------------------------------------------------------------- page


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


def build_report(results, max_cells=DEFAULT_MAX_CELLS, suspects=REPORT_SUSPECTS, graphviz=None):
    """The report of ``results`` (a ``Results``: ``store.read`` of a results file, or fresh
    from an analysis), as one HTML string.  ``graphviz``: the path of
    Graphviz's ``dot`` program to lay out the lattices with (``dot.find_graphviz()``), or
    None: the built-in drawing, with a note that Graphviz is missing."""
    return _page(ReportData(results, max_cells, graphviz), suspects)


def _page(rep, n_suspects):
    rows = rep.rows
    diffs = _diff_sections(rep, n_suspects)
    ticket = ticket_text(rep, diffs)
    pal = json.dumps({k: [hex_colour(c)[1:] for c in palette(k)] for k in ("sim", "diff", "sub")})
    title = f"DiffTrace report: {shorten_left(rep.faulty, 70)} vs {shorten_left(rep.normal, 70)}"
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{esc(title)}</title>", f"<style>{CSS}{diffnlr.HTML_CSS}</style></head>",
           f'<body><div id="dt-report" data-palettes="{esc(pal)}" data-selected="1">', gradients_svg(),
           f"<h1>{esc(title)}</h1>",
           f'<p class="small">difftrace_mpi {esc(__version__)} report of {esc(rep.path)}. Normal run: '
           f'{esc(rep.normal)}; faulty run: {esc(rep.faulty)}.</p>', verdict_html(rep),
           '<h2 id="summary">Summary for a ticket</h2>', f'<pre class="ticket">{html_lines(ticket)}</pre>',
           hang_html(rep), changes_html(rep), timing_html(rep)]
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
                f'{esc(best["linkage"])}</span>. Rows and columns are traces ordered by thread index, then rank; '
                f'darker blue = more similar; red = similarity changed, on a fixed scale (JSM_D from 0, grey, to '
                f'1, dark red: a small change stays light); green (below, when the file holds full matrices) = '
                f'subsumption, read from row to column.</p>', left_note,
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
    culprits = rep.results.culprit_keys(n_suspects)
    out.append('<h2 id="diffnlr-h">diffNLR of the verdict\'s culprits</h2>' if culprits else
               '<h2 id="diffnlr-h">diffNLR of the top suspects</h2>')
    not_kept = shown_diff_keys(rep.results, n_suspects)[1]
    if not_kept:
        out.append(f'<p class="small">{esc(not_kept_line(not_kept))}</p>')
    if not diffs and not not_kept:
        out.append("<p>No suspects.</p>")
    others = [d for d in diffs if not d[4]]
    for key, combo, blocks, bodies, primary in diffs:
        if primary:
            out.append(f'<section class="diff" data-combo="{esc(combo)}" data-key="{key[0]}.{key[1]}">'
                       + diffnlr.render_html(blocks, bodies,
                                             title=diff_title(key, combo, rep.results.top_keys(n_suspects), culprits),
                                             context=DIFF_CONTEXT, include_css=False, max_boxes=PAGE_DIFF_BOXES,
                                             see_all=full_diff_command(key, combo)) + "</section>")
    if others:
        out.append("<h3>Top suspect under the other filters</h3>")
        for key, combo, blocks, bodies, primary in others:
            out.append(f'<details class="diff" data-combo="{esc(combo)}" data-key="{key[0]}.{key[1]}"><summary>'
                       f'rank {key[0]} thread {key[1]} ({esc(combo)}): {esc(summarize(blocks))}</summary>'
                       + diffnlr.render_html(blocks, bodies, title=f"rank {key[0]} thread {key[1]} ({combo})",
                                             context=DIFF_CONTEXT, include_css=False, max_boxes=PAGE_DIFF_BOXES,
                                             see_all=full_diff_command(key, combo)) + "</details>")
    out += ['<h2 id="inputs-h">Inputs and settings</h2>', _inputs_html(rep),
            '<div id="dt-tip"></div></div>', f"<script>{JS}</script>", "</body></html>"]
    return "\n".join(out) + "\n"


