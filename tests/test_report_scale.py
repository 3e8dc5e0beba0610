"""Issue 15: report pictures users can read at any scale.  Heatmap axes grouped by thread
index with integer rank ticks (``svg.Layout``), JSM_D on a fixed scale, the per-class
blocks and the histogram of the changes of large runs, member lists as ranges, Graphviz's
layout of the lattices where it is installed (a note where it is not); and screenshots of
the report at 16 and at 4,096 x 8 traces, checked by headless Chromium."""
import base64
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from difftrace_mpi.stages.classify.grid import Grid
from difftrace_mpi.engine.pipeline import analyze
from difftrace_mpi.store import read as read_results, write as write_results
from difftrace_mpi.views import report, svg
from difftrace_mpi.views.dot import find_graphviz

from conftest import EXAMPLES, ROOT, report_of, run_cli, starts_processes
from test_report import CHROMIUM, Page, best_set, check_heatmap_pixels, chromium, heatmaps, pixels, screenshot

sys.path.insert(0, str(ROOT / "bench"))
from synth_lulesh import write_run  # noqa: E402


def brute_cells(values, cells, reduce):
    """``reduce`` of an N x N matrix over each pair of cells, the slow and obvious way."""
    shown = sorted(set(c for c in cells if c >= 0))
    return np.array([[reduce(values[np.ix_([i for i, c in enumerate(cells) if c == a],
                                             [j for j, c in enumerate(cells) if c == b])])
                      for b in shown] for a in shown])


# --------------------------------------------------------------------------- layout

def test_layout_groups_thread_indices_and_ticks_integer_ranks():
    keys = [(r, t) for r in range(4096) for t in range(8)]          # the results' (rank, thread) order
    lay = svg.Layout(keys, 256)
    assert (lay.block, lay.cells) == (128, 256)
    cells = lay.object_cells()
    for c in range(lay.cells):                 # a cell never mixes thread indices (no checkerboard)
        assert len({keys[i][1] for i in np.flatnonzero(cells == c)}) == 1
    assert [keys[i] for i in lay.order[:3]] == [(0, 0), (1, 0), (2, 0)]
    assert keys[lay.order[4096]] == (0, 1)
    assert lay.bands() == [(32 * t, 32, f"thread {t}") for t in range(8)]
    ticks = lay.ticks(2)                       # 2 pixels a cell, as the report draws 256 cells
    labels = [lab for _, lab in ticks]
    assert all(re.fullmatch(r"\d+", lab) for lab in labels)          # integer ranks, never "208.0"
    assert labels.count("0") == 8 and set(labels) == {"0", "1000", "2000", "3000", "4000"}
    xs = [x for x, _ in ticks]
    assert all(b - a >= svg.TICK_PX for a, b in zip(xs, xs[1:]))
    assert lay.cell_labels()[0] == "ranks 0\u2013127 thread 0" and lay.cell_labels()[32] == "ranks 0\u2013127 thread 1"
    # one thread index alone; a single-threaded run: ranks, no bands
    one = svg.Layout(keys, 256, thread=3)
    assert (one.n, one.block, one.cells) == (4096, 16, 256) and one.object_cells()[keys.index((5, 3))] == 0
    assert (one.object_cells() >= 0).sum() == 4096
    small = svg.Layout([(r, 0) for r in range(16)], 256, multi_thread=False)
    assert small.cell_labels() == [str(r) for r in range(16)] and small.bands() == []
    assert [lab for _, lab in small.ticks(20)] == [str(r) for r in range(16)]
    # process level: ranks (ints); a grid cap below the number of thread indices still draws each
    assert svg.Layout(list(range(10)), 4).cells == 4
    assert svg.Layout([(r, t) for r in range(3) for t in range(5)], 2).cells == 5


def test_block_aggregates_on_a_layout_equal_brute_force():
    rng = np.random.default_rng(11)
    keys = [(r, t) for r in range(37) for t in range(3) if (r, t) not in ((4, 2), (20, 1))]   # two missing
    n = len(keys)
    cn, cf = rng.integers(0, 6, n), rng.integers(0, 9, n)
    jn, jf = rng.random((6, 6)), rng.random((9, 9))
    jn, jf = (jn + jn.T) / 2, (jf + jf.T) / 2
    fn, ff = jn[np.ix_(cn, cn)], jf[np.ix_(cf, cf)]
    for lay in (svg.Layout(keys, 20), svg.Layout(keys, 256), svg.Layout(keys, 7, thread=1)):
        cells = lay.object_cells()
        assert np.allclose(svg.block_mean(jn, cn, cells), brute_cells(fn, cells, np.mean), rtol=0, atol=1e-12)
        assert np.array_equal(svg.block_max_diff(jn, cn, jf, cf, cells, chunk_elems=40),
                              brute_cells(np.abs(ff - fn), cells, np.max))


def test_change_histogram_counts_every_pair_exactly():
    rng = np.random.default_rng(5)
    n = 61
    cn, cf = rng.integers(0, 4, n), rng.integers(0, 7, n)
    jn, jf = rng.random((4, 4)), rng.random((7, 7))
    jn, jf = (jn + jn.T) / 2, (jf + jf.T) / 2
    np.fill_diagonal(jn, 1.0)
    np.fill_diagonal(jf, 1.0)
    jf[2, 3] = jf[3, 2] = 0.0                    # a few changes of exactly 1 (the last bin)
    jn[cn[0], cn[1]] = jn[cn[1], cn[0]] = 0.5
    d = np.abs(jf[np.ix_(cf, cf)] - jn[np.ix_(cn, cn)])[np.triu_indices(n, 1)]
    unchanged, counts = svg.change_histogram(jn, cn, jf, cf, chunk_elems=9)
    assert unchanged == int((d == 0).sum()) and unchanged + counts.sum() == n * (n - 1) // 2
    bins = np.ceil(d[d > 0] * svg.HIST_BINS).astype(int) - 1          # bins (a, b]: 0.05 in the first
    assert counts.tolist() == np.bincount(bins, minlength=svg.HIST_BINS).tolist()
    assert counts[-1] >= 1 and counts[9] >= 1                             # JSM_D = 1 and 0.5 were made


def test_diff_colours_are_on_a_fixed_scale():
    """A change of 0.002 is the lightest red, not the darkest: the scale is 0 .. 1 whatever the
    largest change, and the colour bar says so."""
    assert svg.quantize(np.array([0.0, 0.002, 0.5, 1.0]), "diff").tolist() == [0, 1, 128, 255]
    small = np.zeros((4, 4))
    small[1, 2] = small[2, 1] = 0.002
    html = svg.heatmap_html(small, "diff", svg.Layout(list(range(4)), 256), "diff JSM_D", "rank")
    page = Page(html)
    fig = page.find("figure", cls="hm")[0]
    q = np.frombuffer(base64.b64decode(fig["attrs"]["data-values"]), dtype=np.uint8)
    assert q.max() == 1 and float(fig["attrs"]["data-vmax"]) == 1.0 and fig["attrs"]["data-max"] == "0.002"
    fills = {c["attrs"]["fill"] for c in page.find("rect", cls="hm-cell")}
    assert fills == {svg.hex_colour(svg.DIFF_ZERO), svg.hex_colour(svg.palette("diff")[1])}
    assert "1 (fixed scale)" in html and "largest here 0.002" in html
    assert [page.text(t) for t in page.find("text", cls="hm-tick")] == ["0", "0", "1", "1", "2", "2", "3", "3"]


# --------------------------------------------------------------------------- a small multi-threaded run

def text_runs(root, ranks, threads, faulty_key):
    """Text runs of ``ranks`` x ``threads``: main threads call MPI, workers compute; the
    faulty run's ``faulty_key`` trace makes one extra call."""
    for name in ("normal", "faulty"):
        (root / name).mkdir()
        for r in range(ranks):
            for t in range(threads):
                events = ["main", "MPI_Init", "MPI_Send", "MPI_Recv", "MPI_Finalize"] if t == 0 else \
                    ["worker", "compute", "compute", "barrier"]
                if name == "faulty" and (r, t) == faulty_key:
                    events.append("MPI_Abort" if t == 0 else "extra")
                (root / name / f"r{r}.t{t}.txt").write_text("\n".join(events) + "\n")
    return root / "normal", root / "faulty"


@pytest.fixture(scope="module")
def threaded_h5(tmp_path_factory):
    """20 ranks x 4 threads, with a grid cap of 16 cells: aggregated, so the large-run views
    show, in a file small enough for the fast layer."""
    root = tmp_path_factory.mktemp("threaded")
    res = analyze(*text_runs(root, 20, 4, (7, 2)), Grid(filters=("11.every",), attributes=("sing.actual",),
                                                          linkages=("single",)))
    write_results(res, root / "r.h5")
    return root / "r.h5"


def test_threads_grouped_selectable_and_aggregate_views(threaded_h5):
    page = Page(report_of(threaded_h5, max_cells=16))
    best = best_set(page, "heatmaps")
    views = page.find("div", cls="hm-view", inside=best)
    assert [v["attrs"]["data-thread"] for v in views] == ["all", "0", "1", "2", "3"]
    assert ["hidden" in v["attrs"] for v in views] == [False, True, True, True, True]
    options = page.find("option", inside=page.find("select", cls="thread-select", inside=best)[0])
    assert [o["attrs"]["value"] for o in options] == ["all", "0", "1", "2", "3"]
    figs = heatmaps(page, best)
    assert [f["attrs"]["data-kind"] for f in figs] == ["sim", "sim", "diff", "sub", "sub"]
    lay = svg.Layout([(r, t) for r in range(20) for t in range(4)], 16)
    for fig in figs:
        a = fig["attrs"]
        assert (a["data-rows"], a["data-block"], a["data-n"]) == (str(lay.cells), str(lay.block), "80")
        ticks = [page.text(t) for t in page.find("text", cls="hm-tick", inside=fig)]
        assert ticks and all(re.fullmatch(r"\d+", t) for t in ticks) and ticks.count("0") == 2 * 4   # rows, columns
        assert [page.text(page.find("title", inside=g)[0]) for g in page.find("g", cls="hm-band", inside=fig)] == \
            [f"thread {t}" for t in range(4)]
    one = page.find("figure", cls="hm", inside=views[3])            # thread 2 alone: its 20 ranks
    assert len(one) == 3 and all(f["attrs"]["data-n"] == "20" for f in one)
    diff = np.frombuffer(base64.b64decode(one[2]["attrs"]["data-values"]), dtype=np.uint8).reshape(
        int(one[2]["attrs"]["data-rows"]), -1)
    block = int(one[2]["attrs"]["data-block"])
    assert diff[7 // block].max() > 0 and not np.delete(np.delete(diff, 7 // block, 0), 7 // block, 1).any()
    # per-class blocks: main threads, workers, and the changed trace apart; exact values
    with read_results(threaded_h5) as res:
        lv = res.combos["11.every.K10"].attrs["sing.actual"].level("thread")
        cn, cf = (np.asarray(c) for c in lv.classes)
    joint = {(int(a), int(b)) for a, b in zip(cn, cf)}
    blocks = page.find("div", cls="class-blocks", inside=best)[0]
    class_figs = page.find("figure", cls="hm", inside=blocks)
    assert [f["attrs"]["data-rows"] for f in class_figs] == [str(len(joint))] * 3
    groups = [[page.text(td) for td in page.find("td", inside=tr)] for tr in
              page.find("tr", inside=page.find("table", cls="groups", inside=best)[0])[1:]]
    assert len(groups) == len(joint) == 3
    assert [g[1:] for g in groups] == [["20", "ranks 0-19 thread 0"],
                                       ["59", "ranks 0-6, 8-19 threads 1-3; rank 7 threads 1, 3"],
                                       ["1", "rank 7 thread 2"]]
    bars = page.find("rect", cls="hist-bar", inside=best)
    assert len(bars) == svg.HIST_BINS + 1 and sum(int(b["attrs"]["data-count"]) for b in bars) == 80 * 79 // 2
    # the extra call changes rank 7 thread 2's pairs with the 59 other workers (main threads
    # share nothing with workers: J = 0 before and after) and nothing else
    assert int(bars[0]["attrs"]["data-count"]) == 80 * 79 // 2 - 59


def test_no_aggregate_views_when_every_trace_has_a_cell(threaded_h5):
    page = Page(report_of(threaded_h5))
    best = best_set(page, "heatmaps")
    assert not page.find("div", cls="class-blocks") and not page.find("rect", cls="hist-bar")
    assert heatmaps(page, best)[0]["attrs"]["data-block"] == "1"


def test_member_lists_are_ranges_and_small_lattices_drawn_in_place(threaded_h5):
    page = Page(report_of(threaded_h5, graphviz=None))
    assert len(page.find("svg", cls="lat-svg")) == 2 and not page.find("p", cls="graphviz-note")
    members = [page.text(tr) for tr in page.find("tr", inside=page.find("table", cls="lat-classes")[0])]
    assert any("ranks 0-19 thread 0" in m for m in members)


@pytest.fixture(scope="module")
def lattice_h5(tmp_path_factory):
    """64 ranks, each calling the functions of the bits set in its rank: every subset of six
    attributes is an intent, so the lattices have 64 and 65 concepts, beyond the built-in
    drawing (rank 5 makes one extra call in the faulty run)."""
    root = tmp_path_factory.mktemp("lattice")
    for name in ("normal", "faulty"):
        (root / name).mkdir()
        for r in range(64):
            events = ["main"] + [f"f{b}" for b in range(6) if r >> b & 1] + (["g"] if name == "faulty" and r == 5
                                                                            else [])
            (root / name / f"r{r}.t0.txt").write_text("\n".join(events) + "\n")
    write_results(analyze(root / "normal", root / "faulty", Grid(filters=("11.every",), attributes=("sing.noFreq",),
                                                                 linkages=("single",))), root / "r.h5")
    with read_results(root / "r.h5") as results:
        concepts = [results.combos["11.every.K10"].attrs["sing.noFreq"].lattice(run).n_concepts for run in (0, 1)]
    assert min(concepts) > report.LATTICE_DRAW_LIMIT
    return root / "r.h5", concepts


def test_large_lattice_without_graphviz_says_so(lattice_h5):
    page = Page(report_of(lattice_h5[0], graphviz=None))
    notes = [page.text(n) for n in page.find("p", cls="graphviz-note")]
    assert len(notes) == 2 and all("Graphviz is not installed" in n and "apt-get install graphviz" in n
                                   for n in notes)
    assert not page.find("svg", cls="lat-svg") and not page.find("div", cls="lat-dot")


def test_long_member_lists_are_cut_with_the_whole_in_the_title(tmp_path):
    """Every other rank differs: 'ranks 0, 2, 4, ...' cannot be a range; the cell shows the
    start and the title holds the list."""
    for name in ("normal", "faulty"):
        (tmp_path / name).mkdir()
        for r in range(600):
            events = ["main", "MPI_Send" if r % 2 else "MPI_Recv"] + (["x"] if name == "faulty" and r == 3 else [])
            (tmp_path / name / f"r{r}.t0.txt").write_text("\n".join(events) + "\n")
    write_results(analyze(tmp_path / "normal", tmp_path / "faulty", Grid(filters=("11.every",), attributes=(
        "sing.noFreq",), linkages=("single",))), tmp_path / "r.h5")
    page = Page(report_of(tmp_path / "r.h5"))
    cells = [td for td in page.find("td") if page.text(td).startswith(("ranks 0, 2, 4", "ranks 1, 5, 7"))]
    assert cells and all(len(page.text(td)) <= report.MEMBERS_TEXT for td in cells)
    assert any(td["attrs"].get("title", "").count(",") > 200 for td in cells)


# --------------------------------------------------------------------------- Graphviz

@pytest.mark.integration
def test_lattices_drawn_by_graphviz_where_installed(lattice_h5, tmp_path):
    """With Graphviz: its drawing, one node per concept, no note; without: the note.  The
    report command looks for it itself; lattice --dot notes when it is missing."""
    h5, concepts = lattice_h5
    out = tmp_path / "r.html"
    res = run_cli("report", h5, "-o", out)
    assert res.returncode == 0, res.stderr
    page = Page(out.read_text(encoding="utf-8"))
    drawn = page.find("div", cls="lat-dot")
    if find_graphviz():
        assert len(drawn) == 2 and not page.find("p", cls="graphviz-note")
        for box, n in zip(drawn, concepts):
            assert len(page.find("g", cls="node", inside=box)) == n
            assert len(page.find("g", cls="edge", inside=box)) > n
    else:
        assert not drawn and len(page.find("p", cls="graphviz-note")) == 2
    res = run_cli("lattice", h5, "--dot", tmp_path / "l.dot")
    assert res.returncode == 0 and (tmp_path / "l.dot").exists()
    assert ("Graphviz is not installed" in res.stdout) == (find_graphviz() is None)
    assert "not a dependency" in " ".join(run_cli("lattice", "--help").stdout.split())


@pytest.mark.integration
def test_graphviz_failure_is_reported_in_the_page(lattice_h5, tmp_path):
    fake = tmp_path / "dot"
    fake.write_text("#!/bin/sh\necho 'Error: no layout today' >&2\nexit 1\n")
    fake.chmod(0o755)
    page = Page(report_of(lattice_h5[0], graphviz=str(fake)))
    notes = [page.text(n) for n in page.find("p", cls="graphviz-note")]
    assert len(notes) == 2 and all("Graphviz's dot failed: Error: no layout today, so it is not drawn" in n
                                   for n in notes)


# --------------------------------------------------------------------------- screenshots

@pytest.fixture(scope="module")
def lulesh_4096x8(tmp_path_factory):
    """A synthetic LULESH-like pair of runs, 4,096 ranks x 8 threads (32,768 traces a run),
    one time step, analysed in-process under one setting; the traces are removed after."""
    root = tmp_path_factory.mktemp("lulesh")
    # 81,920 small files: in memory (tmpfs) where the machine has one, a disk's metadata is slow
    traces = Path(tempfile.mkdtemp(dir="/dev/shm")) if os.access("/dev/shm", os.W_OK) else root
    started, clock = time.process_time(), time.perf_counter()
    try:
        write_run(traces / "normal", 4096, 8, 1)
        perturb = write_run(traces / "faulty", 4096, 8, 1, faulty=True)
        res = analyze(traces / "normal", traces / "faulty", Grid(filters=("11.every",), attributes=("sing.actual",),
                                                                 linkages=("single",)))
    finally:
        for name in ("normal", "faulty"):
            shutil.rmtree(traces / name, ignore_errors=True)
        if traces != root:
            shutil.rmtree(traces, ignore_errors=True)
    write_results(res, root / "r.h5")
    print(f"4096 x 8 runs written and analysed: {time.process_time() - started:.1f} s of CPU, "
          f"{time.perf_counter() - clock:.1f} s")
    return root / "r.h5", perturb


@pytest.mark.integration
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (CI installs Debian's chromium)")
def test_screenshot_at_4096_by_8_traces(lulesh_4096x8, tmp_path):
    pytest.importorskip("matplotlib")
    h5, perturb = lulesh_4096x8
    html = tmp_path / "big.html"
    html.write_text(report_of(h5), encoding="utf-8")
    page = Page(html.read_text(encoding="utf-8"))
    assert html.stat().st_size < 5_000_000
    best = best_set(page, "heatmaps")
    figs = heatmaps(page, best)
    assert [f["attrs"]["data-kind"] for f in figs] == ["sim", "sim", "diff"]
    for fig in figs:
        a = fig["attrs"]
        assert (a["data-rows"], a["data-cols"], a["data-block"], a["data-n"]) == ("256", "256", "128", "32768")
        assert len(base64.b64decode(a["data-values"])) == 256 * 256
        ticks = [page.text(t) for t in page.find("text", cls="hm-tick", inside=fig)]
        assert set(ticks) == {"0", "1000", "2000", "3000", "4000"} and ticks.count("0") == 2 * 8
        assert len(page.find("g", cls="hm-band", inside=fig)) == 8
    # each thread index alone: 4,096 ranks in 256 cells of 16
    views = page.find("div", cls="hm-view", inside=best)
    assert [v["attrs"]["data-thread"] for v in views] == ["all"] + [str(t) for t in range(8)]
    for view in views[1:]:
        assert [(f["attrs"]["data-n"], f["attrs"]["data-rows"], f["attrs"]["data-block"])
                for f in page.find("figure", cls="hm", inside=view)] == [("4096", "256", "16")] * 3
    # the changed traces stand out in the diff: the hung rank's main thread, on the fixed scale
    q = np.frombuffer(base64.b64decode(figs[2]["attrs"]["data-values"]), dtype=np.uint8).reshape(256, 256)
    with read_results(h5) as res:
        keys = list(res.objects)
        lv = res.combos["11.every.K10"].attrs["sing.actual"].level("thread")
        cn, cf = (np.asarray(c) for c in lv.classes)
    hung = svg.Layout(keys, 256).object_cells()[keys.index((perturb["hang_rank"], 0))]
    assert q[hung].max() == q.max() > 0
    assert q.max() == svg.quantize(np.array([float(figs[2]["attrs"]["data-max"])]), "diff")[0]
    # the aggregate views: one group per joint class, every pair in the histogram
    groups = page.find("tr", inside=page.find("table", cls="groups", inside=best)[0])[1:]
    assert len(groups) == len(set(zip(cn.tolist(), cf.tolist())))
    assert sum(int(page.text(page.find("td", inside=tr)[1])) for tr in groups) == 32768
    bars = page.find("rect", cls="hist-bar", inside=best)
    assert sum(int(b["attrs"]["data-count"]) for b in bars) == 32768 * 32767 // 2
    # member lists as ranges, cut to a readable length
    for table in page.find("table", cls="lat-classes"):
        for tr in page.find("tr", inside=table)[1:]:
            assert len(page.text(page.find("td", inside=tr)[3])) <= report.MEMBERS_TEXT
    assert any(page.text(td) == "ranks 0-4095 threads 1-7" for td in page.find("td"))

    img, console = screenshot(tmp_path, html, "big.png", 4200)
    assert not console, console
    check_heatmap_pixels(img, page)           # every colour's cells painted, 2 x 2 pixels each
    for grey in ("#d0d0d0", "#ececec"):       # the thread-index bands are drawn
        assert pixels(img, tuple(int(grey[i:i + 2], 16) for i in (1, 3, 5))) > 4 * 32 * 2 * 10


@pytest.mark.integration
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (CI installs Debian's chromium)")
def test_screenshot_at_16_traces(tmp_path):
    pytest.importorskip("matplotlib")
    h5 = tmp_path / "swap.h5"
    write_results(analyze(EXAMPLES / "normal", EXAMPLES / "swapbug", Grid(
        filters=("11.mpi",), attributes=("sing.noFreq",), linkages=("ward",))), h5)
    html = tmp_path / "swap.html"
    html.write_text(report_of(h5), encoding="utf-8")
    page = Page(html.read_text(encoding="utf-8"))
    best = best_set(page, "heatmaps")
    figs = heatmaps(page, best)
    for fig in figs:
        assert len(page.find("rect", cls="hm-cell", inside=fig)) == 256
        assert [page.text(t) for t in page.find("text", cls="hm-tick", inside=fig)] == \
            [str(r) for r in range(16) for _ in (0, 1)]               # row and column label of each rank
    assert not page.find("div", cls="class-blocks") and not page.find("select", cls="thread-select")
    img, console = screenshot(tmp_path, html, "swap.png", 2200)
    assert not console, console
    check_heatmap_pixels(img, page)


@pytest.mark.integration
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (CI installs Debian's chromium)")
def test_thread_selector_shows_one_thread_index(threaded_h5, tmp_path):
    """The page's script: choosing a thread index shows its view and hides the others."""
    text = report_of(threaded_h5, max_cells=16)
    choose = ('<script>var s=document.querySelector("select.thread-select");s.value="2";'
              's.dispatchEvent(new Event("change"));</script></body>')
    html = tmp_path / "r.html"
    html.write_text(text.replace("</body>", choose), encoding="utf-8")
    res, console = chromium(tmp_path, html.as_uri(), "--dump-dom")
    assert not console, console
    dom = Page(res.stdout)
    views = dom.find("div", cls="hm-view", inside=best_set(dom, "heatmaps"))
    assert {v["attrs"]["data-thread"]: "hidden" in v["attrs"] for v in views} == {
        "all": True, "0": True, "1": True, "2": False, "3": True}
