"""Tests of diffNLR: the Myers diff of NLR token sequences and its renderings."""
import random
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest
from hypothesis import given, settings, strategies as st

from difftrace_mpi.stages.compare import diff
from difftrace_mpi.stages.compare.diff import diff_tokens, edit_count, format_token
from difftrace_mpi.views.diffprose import summarize
from difftrace_mpi.views.diffnlr import render_html, render_html_page, render_svg, render_text

INIT = [("MPI_Init", 0), ("MPI_Comm_rank", 0), ("MPI_Comm_size", 0)]
FIN = ("MPI_Finalize", 0)
BODIES = {"L1": [("MPI_Recv", 0), ("MPI_Send", 0)],
          "L0": [("MPI_Send", 0), ("MPI_Recv", 0)]}
NORMAL = INIT + [("L1", 16), FIN]
SWAP = INIT + [("L1", 7), ("L0", 9), FIN]
DL = INIT + [("L1", 7), ("MPI_Recv", 0)]

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def kinds(blocks):
    return [(b.kind, b.tokens) for b in blocks]


def rebuild(blocks):
    n = [t for b in blocks if b.kind in ("common", "normal") for t in b.normal_tokens]
    f = [t for b in blocks if b.kind in ("common", "faulty") for t in b.faulty_tokens]
    return n, f


def lcs_len(a, b):
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def check_structure(blocks, normal, faulty):
    """Blocks rebuild both inputs, starts are consistent, kinds merged and ordered."""
    assert rebuild(blocks) == (list(normal), list(faulty))
    i = j = 0
    prev = None
    for b in blocks:
        assert b.kind in ("common", "normal", "faulty")
        assert len(b.tokens) > 0
        assert b.normal_start == i and b.faulty_start == j
        if b.kind == "common":
            assert b.normal_tokens == b.faulty_tokens
            i += len(b.normal_tokens)
            j += len(b.faulty_tokens)
        elif b.kind == "normal":
            assert b.faulty_tokens == []
            i += len(b.normal_tokens)
        else:
            assert b.normal_tokens == []
            j += len(b.faulty_tokens)
        assert b.kind != prev, "consecutive blocks of one kind must be merged"
        assert not (prev == "faulty" and b.kind == "normal"), "normal before faulty"
        prev = b.kind
    assert (i, j) == (len(normal), len(faulty))


# ----------------------------------------------------------------------- paper cases

def test_swapbug_blocks():
    blocks = diff_tokens(NORMAL, SWAP)
    assert kinds(blocks) == [
        ("common", INIT),
        ("normal", [("L1", 16)]),
        ("faulty", [("L1", 7), ("L0", 9)]),
        ("common", [FIN]),
    ]
    assert blocks[1].normal_start == 3 and blocks[2].faulty_start == 3
    assert blocks[3].normal_start == 4 and blocks[3].faulty_start == 5
    s = summarize(blocks)
    assert "agree for 3 tokens" in s
    assert "normal has L1^16 where faulty has L1^7 L0^9" in s
    assert "both end with MPI_Finalize" in s


def test_dlbug_summary_says_faulty_stops():
    blocks = diff_tokens(NORMAL, DL)
    assert kinds(blocks) == [
        ("common", INIT),
        ("normal", [("L1", 16), FIN]),
        ("faulty", [("L1", 7), ("MPI_Recv", 0)]),
    ]
    s = summarize(blocks)
    assert "faulty stops after MPI_Recv" in s
    assert "never reaches MPI_Finalize" in s


def test_faulty_truncated_summary():
    faulty = INIT + [("MPI_Allreduce", 0)]
    normal = faulty + [("L1", 3), ("MPI_Barrier", 0), FIN]
    s = summarize(diff_tokens(normal, faulty))
    assert "agree for 4 tokens, up to MPI_Allreduce" in s
    assert "faulty stops after MPI_Allreduce and never reaches MPI_Finalize" in s
    assert "normal continues with L1^3 MPI_Barrier MPI_Finalize" in s


def test_no_difference_and_empty():
    blocks = diff_tokens(NORMAL, list(NORMAL))
    assert kinds(blocks) == [("common", NORMAL)]
    assert "no difference" in summarize(blocks).lower()
    assert diff_tokens([], []) == []
    assert "no difference" in summarize([]).lower()
    b = diff_tokens([], SWAP)
    assert kinds(b) == [("faulty", SWAP)]
    assert "normal trace is empty" in summarize(b)


def test_loop_counts_matter_and_plain_strings_accepted():
    assert edit_count(diff_tokens([("L1", 7)], [("L1", 16)])) == 2
    assert edit_count(diff_tokens([("L1", 7)], [("L1", 7)])) == 0
    # a loop token and a function token with the same label differ
    assert edit_count(diff_tokens([("L1", 0)], [("L1", 1)])) == 2
    b = diff_tokens(["MPI_Init", ("L1", 2)], [("MPI_Init", 0), ["L1", 2]])
    assert kinds(b) == [("common", [("MPI_Init", 0), ("L1", 2)])]
    assert format_token(("L3", 16)) == "L3^16" and format_token(("f", 0)) == "f"
    with pytest.raises(ValueError):
        diff_tokens([("L1", -1)], [])


def test_multiple_regions_summary():
    n = [("a", 0), ("b", 0), ("c", 0), ("d", 0), ("e", 0), ("f", 0)]
    f = [("a", 0), ("x", 0), ("c", 0), ("d", 0), ("f", 0), ("g", 0)]
    blocks = diff_tokens(n, f)
    check_structure(blocks, n, f)
    s = summarize(blocks)
    assert "differ in 3 places" in s
    assert "normal has b where faulty has x" in s


# ----------------------------------------------------------------------- algorithm

TOKENS = st.sampled_from([("a", 0), ("b", 0), ("c", 0), ("L1", 2), ("L1", 3)])
SMALL = st.lists(TOKENS, max_size=30)
BINARY = st.lists(st.sampled_from([("x", 0), ("y", 0)]), max_size=60)


@settings(max_examples=400, deadline=None)
@given(SMALL, SMALL)
def test_reconstruction_and_minimality(a, b):
    blocks = diff_tokens(a, b)
    check_structure(blocks, a, b)
    assert edit_count(blocks) == len(a) + len(b) - 2 * lcs_len(a, b)


@settings(max_examples=300, deadline=None)
@given(BINARY, BINARY)
def test_minimality_binary_alphabet(a, b):
    blocks = diff_tokens(a, b)
    check_structure(blocks, a, b)
    assert edit_count(blocks) == len(a) + len(b) - 2 * lcs_len(a, b)


@settings(max_examples=200, deadline=None)
@given(SMALL, SMALL, st.lists(st.sampled_from([("u", 0), ("v", 0)]), max_size=8),
       st.randoms(use_true_random=False))
def test_one_sided_tokens_are_set_aside_minimally(a, b, uniq, rnd):
    """Tokens present on one side only (u/v in a only) must not break minimality."""
    a = list(a)
    for t in uniq:
        a.insert(rnd.randrange(len(a) + 1), t)
    blocks = diff_tokens(a, b)
    check_structure(blocks, a, b)
    assert edit_count(blocks) == len(a) + len(b) - 2 * lcs_len(a, b)


@settings(max_examples=200, deadline=None)
@given(SMALL, SMALL, st.integers(1, 3))
def test_max_cost_still_a_correct_diff(a, b, cap):
    blocks = diff_tokens(a, b, max_cost=cap)
    check_structure(blocks, a, b)
    assert edit_count(blocks) >= len(a) + len(b) - 2 * lcs_len(a, b)


def test_max_cost_validation():
    with pytest.raises(ValueError):
        diff_tokens(["a"], ["b"], max_cost=0)


def test_snake_helpers_long_runs():
    """The galloping run finders agree with a plain scan, whatever the mismatch spot."""
    rnd = random.Random(7)
    for _ in range(200):
        n = rnd.randrange(0, 3000)
        a = [rnd.randrange(3) for _ in range(n)]
        b = list(a)
        if n and rnd.random() < 0.8:
            b[rnd.randrange(n)] = 9
        x = rnd.randrange(n + 1)
        expect = 0
        while x + expect < n and a[x + expect] == b[x + expect]:
            expect += 1
        assert diff.common_run(a, b, x, x, n, n) == expect
        expect = 0
        while x - 1 - expect >= 0 and a[x - 1 - expect] == b[x - 1 - expect]:
            expect += 1
        assert diff._bwd(a, b, x, x, 0, 0) == expect


def test_long_inputs_few_edits():
    rnd = random.Random(3)
    alpha = [(f"MPI_F{i}", 0) for i in range(12)] + [(f"L{i}", c) for i in range(4)
                                                      for c in (1, 2, 3)]
    normal = [rnd.choice(alpha) for _ in range(100_000)]
    faulty = list(normal)
    faulty[70_000:70_003] = [("MPI_Abort", 0)]          # 3 replaced by 1 unseen token
    faulty.insert(50_000, ("L9", 5))                     # unseen loop inserted
    del faulty[20_000]                                   # one deletion
    blocks = diff_tokens(normal, faulty)
    check_structure(blocks, normal, faulty)
    assert edit_count(blocks) <= 6                       # at most the edits made
    assert ("faulty", [("L9", 5)]) in kinds(blocks)
    assert ("faulty", [("MPI_Abort", 0)]) in kinds(blocks)

    # a few edits among tokens that do occur on both sides (no setting aside)
    faulty2 = list(normal)
    for pos in (10, 33_333, 66_666, 99_990):
        faulty2[pos] = normal[pos + 1] if normal[pos + 1] != normal[pos] else normal[pos - 1]
    blocks = diff_tokens(normal, faulty2)
    check_structure(blocks, normal, faulty2)
    assert edit_count(blocks) <= 8


def test_long_truncated_faulty():
    normal = [("MPI_Init", 0)] + [("L1", 16), ("MPI_Barrier", 0)] * 50_000 + [FIN]
    faulty = normal[:60_001] + [("L1", 7)]
    blocks = diff_tokens(normal, faulty)
    check_structure(blocks, normal, faulty)
    assert blocks[0].kind == "common" and len(blocks[0].tokens) == 60_001
    assert "never reaches MPI_Finalize" in summarize(blocks)


# ----------------------------------------------------------------------- text

NESTED_BODIES = {
    "L2": [("MPI_Barrier", 0), ("L1", 3)],
    "L1": [("MPI_Recv", 0), ("L0", 2)],
    "L0": [("MPI_Send", 0)],
    "L7": [("never_shown", 0)],
}


def test_text_color_switch():
    blocks = diff_tokens(NORMAL, SWAP)
    plain = render_text(blocks, BODIES, color=False, title="swapBug")
    assert not ANSI.search(plain) and "\x1b" not in plain
    lines = plain.splitlines()
    assert "- L1^16" in lines and "+ L1^7" in lines and "+ L0^9" in lines
    assert "  MPI_Init" in lines and "  MPI_Finalize" in lines
    assert lines.index("- L1^16") < lines.index("+ L1^7") < lines.index("  MPI_Finalize")
    colored = render_text(blocks, BODIES, color=True, title="swapBug")
    assert "\x1b[34m- L1^16" in colored        # normal-only blue
    assert "\x1b[31m+ L1^7" in colored         # faulty-only red
    assert "\x1b[32m  MPI_Init" in colored     # common green
    assert ANSI.sub("", colored) == plain


def test_text_lists_nested_bodies_once_in_order():
    n = [("MPI_Init", 0), ("L2", 4), ("L1", 3), FIN]
    f = [("MPI_Init", 0), ("L2", 5), ("L0", 2), FIN]
    out = render_text(diff_tokens(n, f), NESTED_BODIES, color=False)
    body_lines = [ln for ln in out.splitlines() if re.match(r"^L\d+ = ", ln)]
    assert body_lines == [
        "L2 = [MPI_Barrier L1^3]",
        "L1 = [MPI_Recv L0^2]",
        "L0 = [MPI_Send]",
    ]
    # unknown body and cyclic tables do not crash
    out = render_text(diff_tokens([("L5", 2)], [("L6", 1)]),
                      {"L5": [("L6", 2)], "L6": [("L5", 1)]}, color=False)
    assert "L5 = [L6^2]" in out and "L6 = [L5^1]" in out
    out = render_text(diff_tokens([("L8", 2)], []), {}, color=False)
    assert "L8 = [?]" in out


def test_text_context_collapsing():
    common_a = [(f"f{i}", 0) for i in range(100)]
    common_b = [(f"g{i}", 0) for i in range(126)]
    n = common_a + [("L1", 16)] + common_b
    f = common_a + [("L1", 7)] + common_b
    blocks = diff_tokens(n, f)
    full = render_text(blocks, BODIES, color=False, max_lines=None)      # everything, as before bounds
    assert "common tokens" not in full and "  f0" in full.splitlines()
    out = render_text(blocks, BODIES, color=False, context=3).splitlines()
    assert "  \u2026 97 common tokens \u2026" in out          # leading block: tail only
    assert "  \u2026 123 common tokens \u2026" in out         # trailing block: head only
    shown = [ln[2:] for ln in out if ln.startswith("  f") or ln.startswith("  g")]
    assert shown == ["f97", "f98", "f99", "g0", "g1", "g2"]
    # a middle common run keeps context on both sides
    m = [("a", 0)] + [(f"m{i}", 0) for i in range(126)] + [("b", 0)]
    fm = [("x", 0)] + [(f"m{i}", 0) for i in range(126)] + [("y", 0)]
    out = render_text(diff_tokens(m, fm), {}, color=False, context=3).splitlines()
    assert "  \u2026 120 common tokens \u2026" in out
    assert "  m0" in out and "  m2" in out and "  m3" not in out and "  m125" in out
    # identical traces collapse too, keeping both ends
    out = render_text(diff_tokens(m, m), {}, color=False, context=2).splitlines()
    assert "  \u2026 124 common tokens \u2026" in out and "  a" in out and "  b" in out


def test_text_hides_loops_of_collapsed_tokens():
    n = [("L7", 2)] + [(f"f{i}", 0) for i in range(10)] + [("a", 0)]
    f = [("L7", 2)] + [(f"f{i}", 0) for i in range(10)] + [("b", 0)]
    out = render_text(diff_tokens(n, f), NESTED_BODIES, color=False, context=1)
    assert "L7 = " not in out
    out = render_text(diff_tokens(n, f), NESTED_BODIES, color=False, max_lines=None)
    assert "L7 = [never_shown]" in out


def test_text_neutralises_control_characters():
    evil = "evil\x1b[31m\nname\x00"
    out = render_text(diff_tokens([(evil, 0)], []), {}, color=False)
    assert "\x1b" not in out and "\x00" not in out
    assert "- evil\\x1b[31m\\nname\\x00" in out.splitlines()


# ----------------------------------------------------------------------- HTML / SVG

HOSTILE = [
    '<script>alert("x")</script>',
    "a&b &amp; 'q' \"dq\"",
    "]]><!-- -->",
    "名前 with spaces \u00e9\U0001F600",
    "ctrl\x01\x0b\x7fchar\ud800",
    "N" * 10_000,
]


class BoxCounter(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.boxes = {"common": 0, "normal": 0, "faulty": 0}
        self.tags = []
        self.titles = []
        self.text = []
        self.stack = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        if "dnlr-tok" in cls:
            for k in self.boxes:
                if f"dnlr-{k}" in cls:
                    self.boxes[k] += 1
        if "title" in a:
            self.titles.append(a["title"])

    def handle_data(self, data):
        self.text.append(data)


def parse_html(s):
    p = BoxCounter()
    p.feed(s)
    p.close()
    return p


def test_html_box_counts_and_layout():
    blocks = diff_tokens(NORMAL, SWAP)
    frag = render_html(blocks, BODIES, "swapBug")
    p = parse_html(frag)
    assert p.boxes == {"common": 4, "normal": 1, "faulty": 2}
    assert "script" not in p.tags
    assert p.tags.count("details") == 2            # L1 and L0 bodies
    text = "".join(p.text)
    assert "MPI_Recv" in text and "swapBug" in text
    assert "://" not in frag
    page = render_html_page(blocks, BODIES, "swapBug", "good run", "bad run")
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page and "://" not in page
    pp = parse_html(page)
    assert pp.boxes == {"common": 4, "normal": 1, "faulty": 2}
    assert "good run" in "".join(pp.text) and "bad run" in "".join(pp.text)


def test_html_context_counts():
    n = [(f"f{i}", 0) for i in range(50)] + [("a", 0)]
    f = [(f"f{i}", 0) for i in range(50)] + [("b", 0), ("c", 0)]
    p = parse_html(render_html(diff_tokens(n, f), {}, "t", context=2))
    # the 48 collapsed tokens are kept, inside one <details> (the 2 of context stay open)
    assert p.boxes == {"common": 50, "normal": 1, "faulty": 2}
    assert p.tags.count("details") == 1
    assert "48 common tokens" in "".join(p.text)


def test_html_escapes_hostile_names():
    n = [(h, 0) for h in HOSTILE] + [(HOSTILE[0], 3)]
    f = [(HOSTILE[1], 0), ("plain", 0)]
    bodies = {HOSTILE[0]: [(HOSTILE[2], 0), (HOSTILE[5], 0)]}
    frag = render_html(diff_tokens(n, f), bodies, title=HOSTILE[0],
                       normal_label=HOSTILE[2], faulty_label=HOSTILE[1])
    assert "<script>" not in frag and "<!-- -->" not in frag
    p = parse_html(frag)
    assert "script" not in p.tags
    assert p.boxes == {"common": 1, "normal": 6, "faulty": 1}
    assert HOSTILE[1] in "".join(p.text)            # shown verbatim after unescaping
    assert "N" * 10_000 in p.titles                  # full long name in a title
    assert "N" * 201 not in "".join(p.text)          # ... but cut in the box text
    assert "N" * 200 + "\u2026" in "".join(p.text)
    frag.encode("utf-8")                             # lone surrogate neutralised
    assert "\x01" not in frag and "ctrl\\x01\\x0b\\x7fchar\\ud800" in "".join(p.text)


def test_svg_well_formed_and_counts():
    blocks = diff_tokens(NORMAL, SWAP)
    svg = render_svg(blocks, BODIES, "swapBug")
    root = ET.fromstring(svg.encode("utf-8"))
    ns = "{http://www.w3.org/2000/svg}"
    assert root.tag == ns + "svg"
    rects = [r.get("class") for r in root.iter(ns + "rect") if r.get("class")]
    assert rects.count("dnlr-common") == 4
    assert rects.count("dnlr-normal") == 1
    assert rects.count("dnlr-faulty") == 2
    texts = " ".join(t.text or "" for t in root.iter(ns + "text"))
    assert "L1^16" in texts and "L1 = [MPI_Recv MPI_Send]" in texts
    # normal-only boxes on the left, faulty-only on the right
    xs = {r.get("class"): float(r.get("x")) for r in root.iter(ns + "rect")
          if r.get("class")}
    assert xs["dnlr-normal"] < xs["dnlr-common"] < xs["dnlr-faulty"]


def test_svg_escapes_hostile_names():
    n = [(h, 0) for h in HOSTILE] + [(HOSTILE[0], 3)]
    f = [(HOSTILE[3], 0)]
    bodies = {HOSTILE[0]: [(HOSTILE[4], 0), (HOSTILE[5], 2)]}
    svg = render_svg(diff_tokens(n, f), bodies, title=HOSTILE[2],
                     normal_label=HOSTILE[0], faulty_label=HOSTILE[4])
    root = ET.fromstring(svg.encode("utf-8"))        # raises if ill-formed
    ns = "{http://www.w3.org/2000/svg}"
    assert not list(root.iter("script")) and not list(root.iter(ns + "script"))
    titles = [t.text for t in root.iter(ns + "title")]
    assert "N" * 10_000 in titles
    assert HOSTILE[0] in titles
    rects = [r.get("class") for r in root.iter(ns + "rect") if r.get("class")]
    assert rects.count("dnlr-normal") == 6 and rects.count("dnlr-common") == 1


def _text_run(path, compute_calls):
    """A two-rank text run: every rank sends, receives and calls ``compute_calls``."""
    path.mkdir()
    for rank in (0, 1):
        calls = ["main", "MPI_Init"] + (["MPI_Send", "MPI_Recv"] + compute_calls[rank]) * 4 + ["MPI_Finalize"]
        (path / f"r{rank}.t0.txt").write_text("\n".join(calls) + "\n")
    return path


def test_diffnlr_default_setting_is_the_first_where_the_trace_differs(tmp_path, capsys):
    """Like analyze's shown diffNLR: an MPI-only filter when the MPI calls differ, else the
    next default filter (11.every) where the trace's calls differ."""
    from difftrace_mpi.cli import main
    normal = _text_run(tmp_path / "n", {0: ["compute"], 1: ["compute"]})
    faulty = _text_run(tmp_path / "f", {0: ["compute", "extra"], 1: ["compute"]})
    assert main(["diffnlr", str(normal), str(faulty), "--rank", "0", "--color", "never"]) == 0
    out = capsys.readouterr().out
    assert "filter 11.every" in out.splitlines()[0] and "extra" in out
    assert main(["diffnlr", str(normal), str(faulty), "--rank", "1", "--color", "never"]) == 0
    assert "filter 11.mpi" in capsys.readouterr().out.splitlines()[0]      # no difference: the first filter
    assert main(["diffnlr", str(normal), str(faulty), "--rank", "0", "--filter", "11.mpi", "--color", "never"]) == 0
    assert "filter 11.mpi" in capsys.readouterr().out.splitlines()[0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 5), st.integers(1, 3)), max_size=40),
       st.lists(st.tuples(st.integers(-3, 5), st.integers(1, 3)), max_size=40))
def test_token_keys_give_the_diff_of_the_tokens(normal, faulty):
    """diff_tokens with the numpy token keys (how the views diff real NLRs) gives exactly
    the blocks of the Python comparison of the tokens themselves."""
    import numpy as np
    from difftrace_mpi.stages.model import nlr
    from difftrace_mpi.stages.compare.diff import diff_tokens
    names = [f"f{i}" for i in range(6)]
    nlrs = [nlr.NLR(np.array([i for i, _ in side], dtype=np.int64),
                    np.array([1 if i >= 0 else c for i, c in side], dtype=np.int64)) for side in (normal, faulty)]
    seqs = [nlr.tokens(nl, names) for nl in nlrs]
    keys = [k.tolist() for k in nlr.token_keys(*nlrs)]
    assert list(diff_tokens(*seqs, keys=keys)) == list(diff_tokens(*seqs))
    # the tokens made once per key (what the views do) are the tokens made one by one
    for nl, k in zip(nlrs, nlr.token_keys(*nlrs)):
        assert nlr.tokens(nl, names, k) == nlr.tokens(nl, names)
