"""The HTML report (``python -m difftrace_mpi report``): contents, escaping, large-N
aggregation, and a real headless Chromium that loads the page and takes a screenshot."""
import base64
import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser

import h5py
import numpy as np
import pytest

from difftrace_mpi import store
from difftrace_mpi.views import png as png_view, report, report_verdict, svg
from difftrace_mpi.stages.classify.grid import Grid
from difftrace_mpi.engine.pipeline import analyze
from difftrace_mpi.errors import DiffTraceError
from difftrace_mpi.store import write as write_results


from conftest import EXAMPLES, ROOT, needs_otf2, report_of, run_cli, starts_processes


class RawFile:
    """A results file read as its documented layout says (the page is checked against it)."""

    def __init__(self, path):
        self.file = h5py.File(path, "r")

    def ranking(self):
        table = self.file["ranking"][()]          # a compound table: one record per ranking row
        return {"rows": [{c: v.decode() if isinstance(v, bytes) else v.item() for c, v in zip(table.dtype.names, rec)}
                         for rec in table]}

    def close(self):
        self.file.close()

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Page(HTMLParser):
    """Every element with its attributes and its ancestors; text per element (a ``<sup>``
    is written ``^``, so a diffNLR box ``L1<sup>7</sup>`` reads ``L1^7``)."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.elements = []        # dicts: tag, attrs, parents (list of element indices), text
        self.stack = []
        self.feed(text)
        self.close()

    def _open(self, tag, attrs):
        el = {"i": len(self.elements), "tag": tag, "attrs": dict(attrs), "parents": set(self.stack), "text": []}
        self.elements.append(el)
        return len(self.elements) - 1

    def handle_starttag(self, tag, attrs):
        i = self._open(tag, attrs)
        if tag == "sup":
            for j in self.stack:
                self.elements[j]["text"].append("^")
        if tag not in VOID:
            self.stack.append(i)

    def handle_startendtag(self, tag, attrs):
        self._open(tag, attrs)

    def handle_endtag(self, tag):
        for pos in range(len(self.stack) - 1, -1, -1):
            if self.elements[self.stack[pos]]["tag"] == tag:
                del self.stack[pos:]
                return

    def handle_data(self, data):
        for j in self.stack:
            self.elements[j]["text"].append(data)

    # queries
    def text(self, el):
        return "".join(el["text"])

    def find(self, tag=None, cls=None, inside=None, **attrs):
        out = []
        for el in self.elements:
            if tag and el["tag"] != tag:
                continue
            if cls and cls not in el["attrs"].get("class", "").split():
                continue
            if any(el["attrs"].get(k.replace("_", "-")) != v for k, v in attrs.items()):
                continue
            if inside is not None and inside["i"] not in el["parents"]:
                continue
            out.append(el)
        return out


@pytest.fixture(scope="module")
@starts_processes
def swap_html(swap_h5):
    out = swap_h5.with_suffix(".html")
    res = run_cli("report", swap_h5, "-o", out)
    assert res.returncode == 0, res.stderr
    assert f"wrote {out}" in res.stdout
    return out


@pytest.fixture(scope="module")
def swap_page(swap_html):
    return Page(swap_html.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
@starts_processes
def big_h5(tmp_path_factory):
    """A synthetic LULESH-like pair of runs: 64 ranks x 8 threads = 512 traces, stored
    without the full N x N matrices (class-level only)."""
    tmp = tmp_path_factory.mktemp("big")
    for name, extra in (("normal", []), ("faulty", ["--faulty"])):
        subprocess.run([sys.executable, str(ROOT / "bench" / "synth_lulesh.py"), str(tmp / name), "--ranks", "64",
                        "--threads", "8", "--steps", "6", *extra], check=True, capture_output=True)
    res = analyze(tmp / "normal", tmp / "faulty", Grid(filters=("11.mpi",), attributes=("sing.noFreq",),
                                                       linkages=("single",)), full_limit=100)
    write_results(res, tmp / "big.h5")
    return tmp / "big.h5"


def best_set(page, comp):
    box = page.find("div", id=comp)[0]
    sets = [s for s in page.find("div", cls="set", inside=box) if "hidden" not in s["attrs"]]
    assert len(sets) == 1
    return sets[0]


def heatmaps(page, inside):
    """The trace heatmaps shown first in ``inside``: every thread index (not one alone, not
    the per-class blocks)."""
    hidden = [v["i"] for v in page.find("div", cls="hm-view", inside=inside) if "hidden" in v["attrs"]]
    blocks = [b["i"] for b in page.find("div", cls="class-blocks", inside=inside)]
    return [f for f in page.find("figure", cls="hm", inside=inside) if not f["parents"].intersection(hidden + blocks)]


# --------------------------------------------------------------------------- contents

def test_ranking_table_has_every_row_and_the_best_highlighted(swap_h5, swap_page):
    stored = RawFile(swap_h5)
    rows = stored.ranking()["rows"]
    stored.close()
    table = swap_page.find("table", id="ranking")[0]
    trs = swap_page.find("tr", inside=table)
    body = [tr for tr in trs if tr["attrs"].get("data-row")]
    assert len(body) == len(rows) == 32
    assert body[0]["attrs"]["class"] == "best"
    assert sum("best" in tr["attrs"].get("class", "") for tr in body) == 1
    first = [swap_page.text(td) for td in swap_page.find("td", inside=body[0])]
    assert first[1:6] == [rows[0]["filter"], str(rows[0]["k"]), rows[0]["attributes"], rows[0]["linkage"],
                          f"{rows[0]['bscore']:.4f}"]
    headers = swap_page.find("th", inside=table)
    assert [h["attrs"]["data-col"] for h in headers][:6] == ["row", "filter", "k", "attributes", "linkage", "bscore"]
    consensus = swap_page.text(swap_page.find("p", cls="consensus")[0])
    assert "processes: 5 (32)" in consensus and "5.0 (32)" in consensus
    ticket = swap_page.text(swap_page.find("pre", cls="ticket")[0])
    assert "Top suspect processes: 5" in ticket
    assert "Rank 5 thread 0: The traces agree for 7 tokens" in ticket


def test_heatmaps_are_16_by_16_and_match_the_stored_matrices(swap_h5, swap_page):
    best = best_set(swap_page, "heatmaps")
    figs = heatmaps(swap_page, best)
    assert [f["attrs"]["data-kind"] for f in figs] == ["sim", "sim", "diff", "sub", "sub"]
    stored = RawFile(swap_h5)
    row = stored.ranking()["rows"][0]
    g = stored.file[f"combos/{row['filter']}.K{row['k']}/attributes/{row['attributes']}/thread"]
    full = [g["jsm_normal"][()], g["jsm_faulty"][()], g["jsm_diff"][()],
            g["subsumption_normal"][()], g["subsumption_faulty"][()]]
    stored.close()
    assert best["attrs"]["data-key"] == f"{row['filter']}.K{row['k']}|{row['attributes']}|thread"
    for fig, matrix in zip(figs, full):
        a = fig["attrs"]
        assert (a["data-rows"], a["data-cols"], a["data-block"], a["data-n"]) == ("16", "16", "1", "16")
        cells = swap_page.find("rect", cls="hm-cell", inside=fig)
        assert len(cells) == 256
        q = np.frombuffer(base64.b64decode(a["data-values"]), dtype=np.uint8).reshape(16, 16)
        kind = a["data-kind"]
        assert np.array_equal(q, svg.quantize(matrix, kind, 1.0))      # JSM_D too: the fixed scale 0 .. 1
        pal = svg.palette(kind)
        assert [c["attrs"]["fill"] for c in cells] == ["#%02x%02x%02x" % pal[v] for v in q.reshape(-1)]
        assert json.loads(a["data-labels"]) == [str(r) for r in range(16)]
    diff = np.frombuffer(base64.b64decode(figs[2]["attrs"]["data-values"]), dtype=np.uint8).reshape(16, 16)
    assert diff[5].max() == diff.max() > 0 and diff[5, 5] == 0           # rank 5's row changed most
    # the fixed scale: the largest change (about 0.1) is a light red, not the darkest
    assert diff.max() == round(full[2].max() * 255) < 128 and float(figs[2]["attrs"]["data-vmax"]) == 1.0
    assert not diff[np.ix_([0, 1, 2, 3], [6, 7, 8])].any()      # bystanders' pairs unchanged
    # one trio per (filter, K, attributes) of the grid: single-threaded, so no process level
    assert len(swap_page.find("div", cls="set", inside=swap_page.find("div", id="heatmaps")[0])) == 8
    assert len(swap_page.find("rect", cls="hm-cell")) == 8 * 5 * 256     # 3 JSM + 2 subsumption heatmaps
    # the cross-run view: rank 5's faulty trace holds everything of some normal class
    cross = swap_page.find("table", cls="cross-sub", inside=best)
    assert len(cross) == 1 and swap_page.text(swap_page.find("td", inside=cross[0])[0]) == "rank 5"


def write_text_runs(root, runs):
    """Text-format run directories ``root/<name>/r<rank>.t0.txt`` from {name: [events per rank]}."""
    for name, traces in runs.items():
        (root / name).mkdir()
        for rank, events in enumerate(traces):
            (root / name / f"r{rank}.t0.txt").write_text("\n".join(events) + "\n")
    return [root / name for name in runs]


def test_cross_table_names_only_the_suspects(tmp_path):
    """A faulty class can hold a suspect and a bystander: rank 3 switched from read to mmap,
    which rank 4 always used, so the faulty mmap class is ranks 3-4, and only rank 3 is a
    suspect.  The stored suspect flags let the cross-run table name rank 3 alone."""
    worker = ["main", "open", "read", "close", "compute"]
    logger = worker + ["write"]
    mapper = ["main", "open", "mmap", "close", "compute"]
    runs = write_text_runs(tmp_path, {"normal": [worker, worker, worker, worker, mapper],
                                      "faulty": [worker, logger, worker, mapper, mapper]})
    res = analyze(*runs, Grid(filters=("11.every",), attributes=("sing.noFreq",), linkages=("ward",)))
    h5 = tmp_path / "r.h5"
    write_results(res, h5)
    with h5py.File(h5, "r") as f:
        for level in ("thread", "process"):
            flags = f[f"combos/11.every.K10/attributes/sing.noFreq/{level}/suspect"]
            assert flags.dtype == bool and flags[()].tolist() == [False, True, False, True, False]
            assert flags[()].tolist() == res.combos["11.every.K10"].attrs["sing.noFreq"].level(level).suspect.tolist()
        assert f["combos/11.every.K10/attributes/sing.noFreq/thread/classes_faulty"][()].tolist() == [0, 1, 0, 2, 2]

    def cross_rows(path):
        page = Page(report_of(path))
        table = page.find("table", cls="cross-sub", inside=best_set(page, "heatmaps"))[0]
        return [page.text(page.find("td", inside=tr)[0]) for tr in page.find("tr", inside=table)[1:]]
    assert cross_rows(h5) == ["rank 1", "rank 3"]


TIMING_GRID = Grid(filters=("11.mpi", "01.every"), attributes=("sing.actual",), linkages=("ward",))


def timing_rows(page):
    """The timing table's rows as {combo: [(rank, thread, loop, [cell texts])]}, or None."""
    tables = page.find("table", id="timing")
    if not tables:
        return None
    out = {}
    for tr in page.find("tr", inside=tables[0]):
        a = tr["attrs"]
        if "data-combo" in a:
            out.setdefault(a["data-combo"], []).append(
                (int(a["data-rank"]), int(a["data-thread"]), int(a["data-loop"]),
                 [page.text(td) for td in page.find("td", inside=tr)]))
    return out


@needs_otf2
def test_timing_section_lists_the_flagged_loops(otf2_runs, swap_page, tmp_path):
    """OTF2 runs of test_timing: rank 2 computes 5x slower, rank 3 waits for it."""
    normal, faulty, only = otf2_runs
    res = analyze(normal, faulty, TIMING_GRID)
    h5 = tmp_path / "t.h5"
    write_results(res, h5)
    text = report_of(h5)
    page = Page(text)
    assert text.index('id="timing-h"') < text.index('id="heatmaps-h"')    # right below the summary
    got = timing_rows(page)
    flags = res.timing_flags()
    assert {c: [r[:3] for r in rows] for c, rows in got.items()} == \
        {c: [(f.rank, f.thread, f.loop) for f in fl] for c, fl in flags.items()}
    (culprit, partner) = got["11.mpi.K10"]
    assert culprit[:2] == (2, 0) and partner[:2] == (3, 0)
    assert culprit[3] == ["11.mpi.K10", "2", "0", f"L{culprit[2]}", "MPI_Send MPI_Recv", "1.32 us \u2192 6.12 us",
                          "4.64x slower", "1.20 us \u2192 6.00 us", "5.00x slower", "8"]
    assert partner[3][5:9] == ["1.42 us \u2192 6.22 us", "4.38x slower", "1.30 us \u2192 1.30 us", "about the same"]
    section = page.text(page.find("div", id="dt-report")[0])
    assert "wall time or time outside MPI calls changed by 2x or more" in section
    # the rule is the stored one: outside MPI calls only drops the partner, which only waited
    write_results(analyze(normal, faulty, TIMING_GRID, timing_clock="own"), tmp_path / "own.h5")
    page = Page(report_of(tmp_path / "own.h5"))
    own = timing_rows(page)
    assert [r[:2] for r in own["11.mpi.K10"]] == [(2, 0)]
    assert [r[:3] for r in own["01.every.K10"]] == [r[:3] for r in got["01.every.K10"] if r[0] == 2]
    assert "; time outside MPI calls changed by 2x" in page.text(page.find("div", id="dt-report")[0])
    # a timing-only fault (no structural difference anywhere) still gets its section
    write_results(analyze(normal, only, TIMING_GRID), tmp_path / "only.h5")
    page = Page(report_of(tmp_path / "only.h5"))
    ticket = page.text(page.find("pre", cls="ticket")[0])
    assert ticket.startswith("No difference") and "Timing: rank 2 thread 0, loop L" in ticket
    assert "Timing: rank 2 thread 0, loop L" in Page(text).text(Page(text).find("pre", cls="ticket")[0])
    assert {r[:2] for rows in timing_rows(page).values() for r in rows} == {(2, 0)}
    # no flags, no section: a run against itself (timestamps, nothing changed), and text traces
    write_results(analyze(normal, normal, TIMING_GRID), tmp_path / "same.h5")
    assert 'id="timing' not in report_of(tmp_path / "same.h5")
    assert timing_rows(swap_page) is None and not swap_page.find("h2", id="timing-h")


def test_diffnlr_sections_show_the_swap(swap_page):
    primary = swap_page.find("section", cls="diff")
    assert [s["attrs"]["data-key"] for s in primary] == ["5.0"]

    def tokens(section, kind):
        return [swap_page.text(t) for t in swap_page.find("div", cls=f"dnlr-{kind}", inside=section)]

    every = primary[0]
    assert every["attrs"]["data-combo"] == "11.every.K10"
    assert tokens(every, "normal") == ["L1^16"] and tokens(every, "faulty") == ["L1^7", "L2^9"]
    mpi = swap_page.find("details", cls="diff", data_combo="11.mpi.K10")
    assert len(mpi) == 1 and mpi[0]["attrs"]["data-key"] == "5.0"
    assert tokens(mpi[0], "normal") == ["L1^16"]
    assert tokens(mpi[0], "faulty") == ["L1^7", "L0^9"]
    bodies = swap_page.find("details", inside=swap_page.find("div", cls="dnlr-loops", inside=mpi[0])[0])
    assert any("MPI_Recv" in swap_page.text(b) for b in bodies)          # expandable loop bodies


def test_dendrograms_and_lattices_of_the_best_row(swap_h5, swap_page):
    stored = RawFile(swap_h5)
    row = stored.ranking()["rows"][0]
    base = f"combos/{row['filter']}.K{row['k']}/attributes/{row['attributes']}"
    n_classes = [stored.file[f"{base}/thread/jsm_classes_{r}"].shape[0] for r in ("normal", "faulty")]
    n_concepts = [len(stored.file[f"{base}/lattice/{r}/intent_parent"]) for r in ("normal", "faulty")]
    stored.close()
    dn = best_set(swap_page, "dendrograms")
    assert dn["attrs"]["data-key"] == f"{row['filter']}.K{row['k']}|{row['attributes']}|{row['linkage']}"
    svgs = swap_page.find("svg", cls="dendro-svg", inside=dn)
    assert len(svgs) == 2
    for svg, c in zip(svgs, n_classes):
        leaves = swap_page.find("g", cls="leaf", inside=svg)
        assert len(leaves) == c
        assert any(swap_page.text(leaf).startswith("rank 5") or ", 5," in swap_page.text(leaf)
                   for leaf in leaves if "suspect" in leaf["attrs"]["class"])
    faulty_labels = [swap_page.text(t) for t in swap_page.find("text", inside=svgs[1])]
    assert "rank 5" in faulty_labels                      # its own class in the faulty run
    assert any(t.startswith("ranks 1, 3, 7, 9, 11, 13") for t in faulty_labels)
    lt = best_set(swap_page, "lattices")
    drawings = swap_page.find("svg", cls="lat-svg", inside=lt)
    assert [len(swap_page.find("g", cls="lat-node", inside=d)) for d in drawings] == n_concepts


def test_no_external_urls_and_self_contained(swap_html, swap_page):
    text = swap_html.read_text(encoding="utf-8")
    for el in swap_page.elements:
        for key in ("src", "href", "xlink:href", "action", "data"):
            value = el["attrs"].get(key) or ""
            assert not value.lower().startswith(("http:", "https:", "//")), (el["tag"], key, value)
    assert "http://" not in text and "https://" not in text
    assert not swap_page.find("link") and not swap_page.find("img") and not swap_page.find("iframe")
    assert all("src" not in s["attrs"] for s in swap_page.find("script"))
    assert len(swap_page.find("script")) == 1 and swap_page.find("style")


def test_inputs_notes_and_settings(tmp_path):
    h5 = tmp_path / "dl.h5"
    write_results(analyze(EXAMPLES / "normal", EXAMPLES / "dlbug"), h5)
    page = Page(report_of(h5))
    section = page.text(page.find("div", id="dt-report")[0])
    assert "faulty run, cut short (killed, hung or truncated): ranks 0-14" in section
    notes = [page.text(li) for li in page.find("li", inside=page.find("ul", cls="notes")[0])]
    assert any("# incomplete" in n for n in notes)
    assert "ward average complete single" in section and "sing.noFreq sing.actual doub.noFreq doub.log10" in section
    ticket = page.text(page.find("pre", cls="ticket")[0])
    assert "15 faulty traces were cut short" in ticket


def test_no_difference_and_no_lattices(tmp_path):
    """Identical runs: the grid is skipped, so no ranking, heatmaps or suspects; a run
    analysed with --no-lattice: the lattices section says so."""
    h5 = tmp_path / "same.h5"
    write_results(analyze(EXAMPLES / "normal", EXAMPLES / "normal", Grid(filters=("11.mpi",), attributes=(
        "sing.noFreq",), linkages=("single", "ward")), lattices=False), h5)
    page = Page(report_of(h5))
    assert page.text(page.find("pre", cls="ticket")[0]).startswith("No difference")
    assert not page.find("table", id="ranking") and not page.find("figure", cls="hm")
    text = page.text(page.find("div", id="dt-report")[0])
    assert "No suspects." in text and "The results file has no ranking rows." in text
    assert "nothing to rank" in text
    h5 = tmp_path / "nolat.h5"
    write_results(analyze(EXAMPLES / "normal", EXAMPLES / "swapbug", Grid(filters=("11.mpi",), attributes=(
        "sing.noFreq",), linkages=("single",)), lattices=False), h5)
    page = Page(report_of(h5))
    assert len(page.find("tr", cls="best")) == 1
    assert "analyze ran with --no-lattice" in page.text(best_set(page, "lattices"))


def test_names_and_paths_are_escaped(tmp_path):
    weird = "find<Ptr>&\"q'\u00e9\u2713"           # inside the loop bodies
    top_level = "init<Data> & \u00fc\"</script>"     # a token of every trace: an attribute
    runs = []
    for name in ("normal", "swapbug"):
        dst = tmp_path / f"run <{name}> & 'x'"
        dst.mkdir()
        for f in (EXAMPLES / name).iterdir():
            text = f.read_text(encoding="utf-8").replace("findPtr", weird).replace("initData", top_level)
            (dst / f.name).write_text(text, encoding="utf-8")
        runs.append(dst)
    h5 = tmp_path / "w.h5"
    write_results(analyze(*runs, Grid(filters=("11.every",), attributes=("sing.noFreq",), linkages=("single",))), h5)
    text = report_of(h5)
    assert "<Ptr>" not in text and "<normal>" not in text
    page = Page(text)
    assert not page.find("ptr") and not page.find("normal") and not page.find("swapbug")
    bodies = [page.text(t) for t in page.find("span", cls="dnlr-body-tok")]
    assert weird in bodies
    assert "run <swapbug> & 'x'" in page.text(page.find("h1")[0])
    lattice_tips = [page.text(t) for t in page.find("title") if "introduces" in page.text(t)]
    assert any(top_level in t for t in lattice_tips)
    assert top_level in [page.text(t) for t in page.find("div", cls="dnlr-common")]


# --------------------------------------------------------------------------- verdict and hang

TRACES = EXAMPLES.parent


@pytest.fixture(scope="module")
def verdict_h5(tmp_path_factory):
    """Results files of the committed example runs, analyzed in-process: {name: (path, results)}."""
    tmp = tmp_path_factory.mktemp("verdict")
    out = {}
    for name, normal, faulty in (("lost", "halo/normal", "halo/lost"), ("extra", "halo/normal", "halo/extra"),
                                 ("wrongop", "ilcs/normal_annotated", "ilcs/wrongop_annotated")):
        res = analyze(TRACES / normal, TRACES / faulty)
        write_results(res, tmp / f"{name}.h5")
        out[name] = (tmp / f"{name}.h5", res)
    return out


def section_text(page, section_id):
    return page.text(page.find("section", id=section_id)[0])


def table_rows(page, table):
    """The body rows of a table: [(attrs, [cell texts])]."""
    return [(tr["attrs"], [page.text(td) for td in page.find("td", inside=tr)])
            for tr in page.find("tr", inside=table) if page.find("td", inside=tr)]


@pytest.mark.parametrize("name,rank,thread,loop,normal,faulty", [
    ("lost", 2, 0, "iteration 7 of 20 of [swapFields exchangeHalo relax] in main", "MPI_Isend", "(nothing here)"),
    ("wrongop", 0, 0, "iteration 1 of 8 of [GOMP_barrier masterRound GOMP_barrier] in main._omp_fn.0",
     "MPI_Allreduce[count=1,type=MPI_INT,op=MPI_MIN]", "MPI_Allreduce[count=1,type=MPI_INT,op=MPI_MAX]")])
def test_verdict_section_leads_and_names_the_culprit(verdict_h5, name, rank, thread, loop, normal, faulty):
    path, res = verdict_h5[name]
    v = res.verdict
    text = report_of(path)
    page = Page(text)
    # first: the first heading and section of the page, before the ticket and every other section
    assert [h["attrs"].get("id") for h in page.find("h2")][0] == "verdict-h"
    assert text.index('<section id="verdict"') < min(text.index(f'id="{i}"') for i in ("summary", "heatmaps-h",
                                                                                       "ranking-h", "diffnlr-h"))
    box = page.find("section", id="verdict")[0]
    assert box["attrs"]["data-kind"] == v["kind"]
    assert page.text(page.find("h2", inside=box)[0]) == \
        f"Verdict: {'HANG' if v['kind'] == 'hang' else 'CHANGED BEHAVIOUR'}"
    assert page.text(page.find("p", cls="verdict-summary")[0]) == v["summary"]
    first = page.find("table", cls="verdict-first", inside=box)[0]
    assert (first["attrs"]["data-rank"], first["attrs"]["data-thread"]) == (str(rank), str(thread))
    cells = {page.text(tr["children"][0]): page.text(tr["children"][1]) for tr in
             [dict(tr, children=page.find("th", inside=tr) + page.find("td", inside=tr))
              for tr in page.find("tr", inside=first)]}
    assert cells["culprit"] == f"rank {rank} thread {thread}"
    assert cells["why"] == v["culprits"][0]["why"]
    assert cells["loop"] == loop
    assert cells["call path"] == v["where"]["call_path"]
    assert (cells["normal run called"], cells["faulty run called"]) == (normal, faulty)
    # the next culprits, in the verdict's order
    nxt = page.find("table", cls="culprits", inside=box)
    assert [(int(a["data-rank"]), int(a["data-thread"]), c[5]) for a, c in table_rows(page, nxt[0])] == \
        [(c["rank"], c["thread"], c["why"]) for c in v["culprits"][1:]] if len(v["culprits"]) > 1 else not nxt
    # the victims, grouped by where they stopped
    victims = page.find("table", cls="victims", inside=box)
    assert [c[:3] for _, c in table_rows(page, victims[0])] == \
        [[g["stack"], str(g["count"]), g["members"]] for g in v["victims"][:4]] if v["victims"] else not victims
    # the ticket leads with the verdict, and the diffNLRs are the culprits'
    ticket = page.text(page.find("pre", cls="ticket")[0]).splitlines()
    assert f"Verdict: {v['summary']}." in ticket[:2]
    assert page.find("section", cls="diff")[0]["attrs"]["data-key"] == f"{rank}.{thread}"
    assert page.text(page.find("h2", id="diffnlr-h")[0]) == "diffNLR of the verdict's culprits"


def test_each_diffnlr_of_the_report_draws_a_bounded_number_of_boxes(swap_h5, monkeypatch):
    """The report draws at most PAGE_DIFF_BOXES token boxes of each diffNLR (a real LULESH
    culprit's NLR, about a million tokens, made a 116 MB page), says how many it left out
    and names the command that lists them; the rest of the report is unchanged."""
    whole = report_of(swap_h5)
    monkeypatch.setattr(report, "PAGE_DIFF_BOXES", 3)
    text = report_of(swap_h5)
    page = Page(text)
    sections = page.find("section", cls="diff") + page.find("details", cls="diff")
    assert sections
    for sec in sections:
        assert len(page.find("div", cls="dnlr-tok", inside=sec)) <= 3
    key = page.find("section", cls="diff")[0]["attrs"]["data-key"].split(".")
    combo = page.find("section", cls="diff")[0]["attrs"]["data-combo"]
    assert (f"tokens are not drawn; difftrace-mpi diffnlr RESULTS.h5 --rank {key[0]} --thread {key[1]} "
            f"--combo {combo} --all lists every one.") in text
    assert "not drawn" not in whole
    before, after = whole.split('id="diffnlr-h"')[0], text.split('id="diffnlr-h"')[0]
    assert before == after

def test_hang_section_for_the_hang_only(verdict_h5):
    path, res = verdict_h5["lost"]
    page = Page(report_of(path))
    hang = page.find("section", id="hang")
    assert len(hang) == 1 and page.find("h2", id="hang-h")
    assert "18 traces of 18 stopped before their normal twins did" in page.text(hang[0])
    victims = page.find("table", cls="victims", inside=hang[0])[0]
    assert [c[:3] for _, c in table_rows(page, victims)] == \
        [[g["stack"], str(g["count"]), g["members"]] for g in res.verdict["victims"]]
    assert "The culprits stopped in: rank 2 thread 0: main > MPI_Allreduce." in page.text(hang[0])
    assert "Least progressed" in page.text(page.find("pre", cls="hang-progress", inside=hang[0])[0])
    assert "open" not in page.find("details", cls="hang-view", inside=hang[0])[0]["attrs"]   # the verdict leads
    rows = table_rows(page, page.find("table", id="divergences", inside=hang[0])[0])
    assert len(rows) == len(res.divergences) == 18
    attrs, cells = rows[0]              # the trace that left the normal path first leads
    assert (attrs["data-rank"], attrs["data-thread"], attrs["class"]) == ("2", "0", "culprit")
    assert cells[2:10] == ["missing", "174", "1", "MPI_Isend", "", "main > exchangeHalo",
                           "iteration 7 of 20 of [swapFields exchangeHalo relax] in main", "main > MPI_Allreduce"]
    assert {a["data-status"] for a, _ in rows[1:]} == {"stopped"}
    assert sum("culprit" in a["class"] for a, _ in rows) == 1
    assert not page.find("section", id="changes")
    # 'extra' changed behaviour without stopping: no hang section, the divergences alone
    path, res = verdict_h5["extra"]
    page = Page(report_of(path))
    assert not page.find("section", id="hang") and not page.find("h2", id="hang-h")
    assert page.find("section", id="verdict")[0]["attrs"]["data-kind"] == "changed"
    assert not page.find("table", cls="victims")
    changes = page.find("section", id="changes")[0]
    rows = table_rows(page, page.find("table", id="divergences", inside=changes)[0])
    assert [(a["data-rank"], a["data-thread"], a["data-status"]) for a, _ in rows] == \
        [("2", "0", "extra"), ("2", "1", "extra"), ("2", "2", "extra")]
    assert rows[0][1][6] == "residual"      # the extra call itself, not its callees (issue 21)


def test_divergence_table_is_bounded():
    from types import SimpleNamespace
    from difftrace_mpi.stages.diagnose.verdict import Divergence
    ds = [Divergence((r, 0), "stopped", 10, r % 7, ["MPI_Recv"], [], ["main", "MPI_Recv"], [], True, 3,
                     "main > MPI_Recv") for r in range(120)]
    ds[90] = Divergence((90, 0), "different", 5, 0, ["MPI_Send"], ["MPI_Recv"], ["main"],
                        [("main", ["a", "b", "c", "d"], 2, 9), ("b", ["x"], 1, 3)], False, 4, "")
    rep = SimpleNamespace(divergences=ds, culprit_keys=[(90, 0)])
    page = Page(report_verdict.divergences_html(rep))
    shown = table_rows(page, page.find("table", id="divergences")[0])
    assert len(shown) == report_verdict.DIVERGENCE_ROWS == 50
    assert shown[0][0]["data-rank"] == "90" and shown[0][0]["class"] == "culprit"
    assert shown[0][1][8] == "iteration 2 of 9 of [a b c \u2026] in main; iteration 1 of 3 of [x] in b"
    loops = page.find("td", inside=page.find("tr", data_rank="90")[0])[8]
    assert loops["attrs"]["title"] == "iteration 2 of 9 of [a b c d] in main; iteration 1 of 3 of [x] in b"
    clocks = [int(c[4]) for _, c in shown[1:]]
    assert clocks == sorted(clocks)                          # then by logical clock
    more = page.find("details", cls="more-divergences")[0]
    assert page.text(page.find("summary", inside=more)[0]) == "70 more traces"
    assert len(table_rows(page, page.find("table", inside=more)[0])) == 70
    page = Page(report_verdict.divergences_html(rep, shown=5, more=10))
    assert len(table_rows(page, page.find("table", id="divergences")[0])) == 5
    assert "105 more traces not shown (see /divergence in the results file)" in page.text(page.find("p")[-1])
    assert report_verdict.divergences_html(SimpleNamespace(divergences=[], culprit_keys=[])) == ""


HOSTILE = "evil<script>alert(1)</script>\x1b[31m\"&'\u202e"


def test_hostile_names_in_the_verdict_are_escaped(tmp_path):
    """Rank 1 calls a hostile name where the others call MPI_Wait and dies of an MPI error
    (the tracer's end record, with hostile error text); ranks 0 and 2 hang in MPI_Allreduce."""
    from difftrace_mpi.readers import parlot
    from difftrace_mpi.escape import visible
    names = ["<return>", "main", "MPI_Irecv", "MPI_Wait", "MPI_Allreduce", HOSTILE]
    error = "<b>boom</b>\x1b[2J"
    for label in ("normal", "faulty"):
        run = tmp_path / label
        run.mkdir()
        for rank in range(3):
            events = [1]
            for step in range(6):
                if label == "faulty" and step == 2:
                    events += [2, 0, 5] if rank == 1 else [2, 0, 3, 0, 4]     # cut inside the call
                    break
                events += [2, 0, 3, 0, 4, 0]
            else:
                events.append(0)
            parlot.write_info(run / f"parlot.h.{100 + rank}.info", names[1:])
            (run / f"parlot.h.{100 + rank}.rank").write_text(f"{rank}\n")
            parlot.write_trace(run / f"parlot.h.{100 + rank}.0", events)
        if label == "faulty":
            parlot.write_end(run / "parlot.h.101.end", {"how": "mpi_error", "call": HOSTILE, "error": error,
                                                         "thread": 0})
    res = analyze(tmp_path / "normal", tmp_path / "faulty")
    v = res.verdict
    assert v["kind"] == "crash" and HOSTILE in v["where"]["faulty"] and HOSTILE in v["died"][0]["how"]
    write_results(res, tmp_path / "r.h5")
    text = report_of(tmp_path / "r.h5")
    for raw in ("<script>alert", "<b>boom", "\x1b", "\u202e"):
        assert raw not in text
    page = Page(text)
    box = page.find("section", id="verdict")[0]
    assert len(page.find("script")) == 1 and not page.find("b", inside=box)
    assert page.text(page.find("p", cls="verdict-summary")[0]) == visible(v["summary"])
    assert page.text(page.find("td", cls="faulty", inside=box)[0]) == visible(HOSTILE)
    died = table_rows(page, page.find("table", cls="died", inside=box)[0])
    assert died == [({"data-rank": "1", "data-thread": "0"}, ["1", "0", visible(v["died"][0]["how"])])]
    rows = table_rows(page, page.find("table", id="divergences")[0])
    assert rows[0][1][:3] == ["1", "0", "different"] and rows[0][1][6] == visible(HOSTILE)


def test_old_results_file_without_a_verdict_still_renders(verdict_h5, tmp_path):
    """A file without a verdict (the layout has /verdict, /divergence and /endings only
    with one): no verdict section, the ranking's suspects' diffNLRs, and the hang section
    from the hang view the file holds."""
    path, res = verdict_h5["lost"]
    old = tmp_path / "old.h5"
    shutil.copy(path, old)
    with h5py.File(old, "a") as f:
        for key in ("verdict", "divergence", "divergence_calls", "divergence_loops", "endings"):
            del f[key]
    text = report_of(old)
    page = Page(text)
    assert not page.find("section", id="verdict") and 'id="verdict' not in text
    assert [h["attrs"].get("id") for h in page.find("h2")][0] == "summary"
    ticket = page.text(page.find("pre", cls="ticket")[0])
    assert "Verdict:" not in ticket and ticket.startswith("DiffTrace: ")
    hang = page.find("section", id="hang")[0]
    assert "open" in page.find("details", cls="hang-view", inside=hang)[0]["attrs"]
    assert "Left the normal path before stopping (likely causes): rank 2 thread 0" in page.text(hang)
    assert not page.find("table", id="divergences")
    assert page.text(page.find("h2", id="diffnlr-h")[0]) == "diffNLR of the top suspects"
    assert page.find("table", id="ranking") and page.find("section", cls="diff")


# --------------------------------------------------------------------------- large N

def test_block_aggregation_equals_brute_force():
    rng = np.random.default_rng(7)
    for n, c_n, c_f, block in ((37, 5, 6, 4), (64, 3, 9, 8), (50, 50, 50, 7), (10, 1, 2, 3), (16, 4, 5, 1)):
        cn, cf = rng.integers(0, c_n, n), rng.integers(0, c_f, n)
        jn, jf = rng.random((c_n, c_n)), rng.random((c_f, c_f))
        jn, jf = (jn + jn.T) / 2, (jf + jf.T) / 2
        fn, ff = jn[np.ix_(cn, cn)], jf[np.ix_(cf, cf)]
        nb = -(-n // block)
        want_mean = np.array([[fn[i * block:(i + 1) * block, j * block:(j + 1) * block].mean() for j in range(nb)]
                              for i in range(nb)])
        d = np.abs(ff - fn)
        want_max = np.array([[d[i * block:(i + 1) * block, j * block:(j + 1) * block].max() for j in range(nb)]
                             for i in range(nb)])
        assert np.allclose(svg.block_mean(jn, cn, block), want_mean, rtol=0, atol=1e-12)
        assert np.array_equal(svg.block_max_diff(jn, cn, jf, cf, block, chunk_elems=50), want_max)
    assert svg.grid_shape(4096) == (16, 256) and svg.grid_shape(16) == (1, 16)
    assert svg.grid_shape(257) == (2, 129) and svg.grid_shape(1000, 100) == (10, 100)


def report_keys(path):
    """The (rank, thread) keys of a results file, in its order."""
    from difftrace_mpi.store import read
    with read(path) as results:
        return list(results.objects)


def test_large_run_is_downsampled(big_h5, tmp_path):
    stored = RawFile(big_h5)
    g = stored.file["combos/11.mpi.K10/attributes/sing.noFreq/thread"]
    assert "jsm_normal" not in g                       # class-level data only
    scores = g["change_score"][()]
    stored.close()
    for cap, rows in ((256, 256), (100, 88)):        # 8 thread indices x ceil(64 / 6) cells at cap 100
        text = report_of(big_h5, max_cells=cap)
        page = Page(text)
        best = best_set(page, "heatmaps")
        figs = heatmaps(page, best)
        assert len(figs) == 3
        for fig in figs:
            a = fig["attrs"]
            assert int(a["data-rows"]) == int(a["data-cols"]) == rows <= cap
            assert a["data-n"] == "512" and int(a["data-block"]) == svg.Layout(report_keys(big_h5), cap).block
            assert len(base64.b64decode(a["data-values"])) == rows * rows
            assert len(page.find("canvas", cls="hm-canvas", inside=fig)) == 1
            assert not page.find("rect", cls="hm-cell", inside=fig)
        for fig in page.find("figure", cls="hm"):    # every setting: never an element per trace pair
            g = int(fig["attrs"]["data-rows"])
            assert g <= cap and len(page.find("rect", cls="hm-cell", inside=fig)) in (0, g * g)
            assert fig["attrs"]["data-n"] in ("512", "64")  # threads, or processes (64 rects a side)
        assert len(text) < 3_000_000
        # the diff keeps the changed traces visible: max over cells, so their cell rows are nonzero
        q = np.frombuffer(base64.b64decode(figs[2]["attrs"]["data-values"]), dtype=np.uint8).reshape(rows, rows)
        top = int(np.argmax(scores))
        assert q[svg.Layout(report_keys(big_h5), cap).object_cells()[top]].max() == q.max() > 0
    # process level (64 processes, 8 threads each) is offered too
    assert best_set(page, "heatmaps")["attrs"]["data-key"].endswith("|thread")
    assert page.find("div", cls="set", data_key="11.mpi.K10|sing.noFreq|process")


@pytest.mark.integration
def test_pngs_and_cli_errors(swap_h5, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread
    out = tmp_path / "figs"
    res = run_cli("report", swap_h5, "-o", tmp_path / "r.html", "--png", out)
    assert res.returncode == 0, res.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == ["dendrograms.png", "heatmaps_thread.png", "subsumption_thread.png"]
    for name in names:
        img = imread(out / name)
        assert img.shape[0] > 200 and img.shape[1] > 400 and img[..., :3].std() > 0.05
    # the subsumption pair shows the two runs' (different) matrices in the green ramp
    img = np.rint(imread(out / "subsumption_thread.png")[..., :3] * 255).astype(np.int64)
    assert pixels(img, svg.palette("sub")[255]) > 1000          # S = 1: the diagonals and more
    # without the full matrices (N above --full-jsm-limit) there is no subsumption picture
    small = tmp_path / "small.h5"
    write_results(analyze(EXAMPLES / "normal", EXAMPLES / "swapbug", Grid(filters=("11.mpi",), attributes=(
        "sing.noFreq",), linkages=("ward",)), full_limit=8), small)
    with store.read(small) as stored:
        written = png_view.write_pngs(stored, tmp_path / "figs2")
    assert sorted(os.path.basename(p) for p in written) == ["dendrograms.png", "heatmaps_thread.png"]
    # without matplotlib: one clear line, before anything is written
    from difftrace_mpi import cli
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(DiffTraceError, match="PNG pictures need matplotlib"):
        cli.report.run(cli.build_parser().parse_args(["report", str(swap_h5), "-o", str(tmp_path / "x.html"),
                                                      "--png", str(tmp_path / "p")]))
    assert not (tmp_path / "x.html").exists()
    bad = tmp_path / "not.h5"
    bad.write_text("hello")
    res = run_cli("report", bad)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "not.h5" in res.stderr


# --------------------------------------------------------------------------- browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(tmp_path, url, *extra):
    """Run headless Chromium on ``url``; (stdout, console lines of stderr)."""
    profile = tmp_path / f"profile{len(list(tmp_path.glob('profile*')))}"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--hide-scrollbars",
           "--force-device-scale-factor=1", *extra, url]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    console = [line for line in res.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    return res, console


def screenshot(tmp_path, html_path, name, height=1800):
    from matplotlib.image import imread
    png = tmp_path / name
    res, console = chromium(tmp_path, html_path.as_uri(), f"--screenshot={png}", f"--window-size=1400,{height}")
    assert png.exists(), res.stderr[-2000:]
    img = np.rint(imread(png)[..., :3] * 255).astype(np.int64)
    return img, console


def pixels(img, rgb):
    return int(np.all(img == np.array(rgb), axis=-1).sum())


def check_heatmap_pixels(img, page):
    """Each colour of the best setting's visible heatmaps (and per-class blocks) covers about
    as many screenshot pixels as their cells of that colour do: the cells (SVG rects or a
    script-filled canvas) were painted."""
    best = best_set(page, "heatmaps")
    figs = heatmaps(page, best) + [f for b in page.find("div", cls="class-blocks", inside=best)
                                   for f in page.find("figure", cls="hm", inside=b)]
    want = {}
    for fig in figs:
        a = fig["attrs"]
        g, kind = int(a["data-rows"]), a["data-kind"]
        rects = page.find("rect", cls="hm-cell", inside=fig)
        if rects:
            side = int(rects[0]["attrs"]["width"])
        else:
            style = page.find("canvas", inside=fig)[0]["attrs"]["style"]
            side = int(style.split("width:")[1].split("px")[0]) // g
        q = np.frombuffer(base64.b64decode(a["data-values"]), dtype=np.uint8)
        values, counts = np.unique(q, return_counts=True)
        for v, c in zip(values, counts):
            rgb = tuple(svg.palette(kind)[v])
            want[rgb] = want.get(rgb, 0) + int(c) * side * side
    checked = 0
    for rgb, w in want.items():
        if w < 16:
            continue
        got = pixels(img, rgb)
        # the colour bars, histogram bars and tick marks add a few pixels
        assert 0.9 * w <= got <= 1.5 * w + 2000, (rgb, got, w)
        checked += 1
    assert checked >= 3


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (CI installs Debian's chromium)")
def test_headless_chromium_renders_the_report(swap_html, swap_page, big_h5, tmp_path):
    pytest.importorskip("matplotlib")
    # the console check can fail: a page with a script error is caught
    broken = tmp_path / "broken.html"
    broken.write_text("<!DOCTYPE html><html><body><script>undefinedFunction();</script></body></html>")
    _, console = chromium(tmp_path, broken.as_uri(), "--dump-dom")
    assert any("Uncaught" in line for line in console)

    # the swapbug report: no console messages; the pixels of the heatmaps are there
    img, console = screenshot(tmp_path, swap_html, "swap.png", 2600)     # down to the subsumption heatmaps
    assert not console, console
    white = np.all(img == 255, axis=-1).mean()
    assert white < 0.9 and len(np.unique(img.reshape(-1, 3), axis=0)) > 30      # not blank
    check_heatmap_pixels(img, swap_page)
    side = int(swap_page.find("rect", cls="hm-cell")[0]["attrs"]["width"])
    diff_fig = heatmaps(swap_page, best_set(swap_page, "heatmaps"))[2]
    most = np.frombuffer(base64.b64decode(diff_fig["attrs"]["data-values"]), dtype=np.uint8).max()
    sim_top, diff_top = svg.palette("sim")[255], svg.palette("diff")[most]     # JSM_D: a fixed scale
    assert pixels(img, sim_top) >= 2 * 16 * side * side          # J = 1 diagonals, two heatmaps
    assert pixels(img, diff_top) >= 4 * side * side              # rank 5's most changed pairs

    # the script ran: a row chosen by the URL, the table sorted by the URL
    res, console = chromium(tmp_path, swap_html.as_uri() + "#row=4&sort=bscore:desc", "--dump-dom")
    assert not console, console
    dom = Page(res.stdout)
    root = dom.find("div", id="dt-report")[0]
    assert root["attrs"]["data-js"] == "ready" and root["attrs"]["data-selected"] == "4"
    table = dom.find("table", id="ranking")[0]
    assert table["attrs"]["data-sorted"] == "bscore:desc"
    order = [float(td["attrs"]["data-sort"]) for td in dom.find("td", inside=table) if "data-sort" in td["attrs"]]
    assert order == sorted(order, reverse=True) and len(order) == 32
    shown = [s["attrs"]["data-key"] for s in dom.find("div", cls="set") if "hidden" not in s["attrs"]]
    row4 = [tr for tr in dom.find("tr") if tr["attrs"].get("data-row") == "4"][0]
    assert row4["attrs"]["data-hm-key"] + "|thread" in shown and row4["attrs"]["data-dn-key"] in shown
    assert len(shown) == 3

    # the large report: canvases filled by the script
    big_html = tmp_path / "big.html"
    big_html.write_text(report_of(big_h5), encoding="utf-8")
    img, console = screenshot(tmp_path, big_html, "big.png", 5000)     # past the verdict, to the class blocks
    assert not console, console
    big_page = Page(big_html.read_text(encoding="utf-8"))
    assert heatmaps(big_page, best_set(big_page, "heatmaps"))[0]["attrs"]["data-rows"] == "256"
    check_heatmap_pixels(img, big_page)
