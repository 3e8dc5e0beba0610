"""Bounds of the diffNLR: the total work of the diff (issue 13 item 10) and the length of
its text rendering (issue 12 item 5).  Work is counted by the diff itself (``Diff.work``),
time only relative to a linear pass in the same process."""
import random
import re
import time
from html.parser import HTMLParser

import pytest
from hypothesis import given, settings, strategies as st

from difftrace_mpi import config
from difftrace_mpi.stages.compare.diff import Diff, approximate_note, diff_tokens, edit_count, format_token
from difftrace_mpi.views.diffprose import brief, summarize
from difftrace_mpi.views.diffnlr import MIN_LINES, render_html, render_text
from difftrace_mpi.views.diffview import describe_common
from test_diffnlr import lcs_len

N = 40_000
FIN = ("MPI_Finalize", 0)
ALPHA = [(f"MPI_F{i}", 0) for i in range(12)] + [(f"L{i}", c) for i in range(6) for c in (1, 2, 3)]
BODIES = {"L3": [("MPI_Test", 0)], "L4": [("compute", 0), ("L9", 2)], "L9": [("x", 0)],
          "L5": [("a", 0)], "L6": [("b", 0)]}


def rebuild(blocks):
    n = [t for b in blocks if b.kind in ("common", "normal") for t in b.normal_tokens]
    f = [t for b in blocks if b.kind in ("common", "faulty") for t in b.faulty_tokens]
    return n, f


def check_structure(blocks, normal, faulty):
    """The blocks rebuild both inputs, with consistent starts, merged and ordered kinds."""
    assert rebuild(blocks) == (list(normal), list(faulty))
    i = j = 0
    prev = None
    for b in blocks:
        assert len(b.tokens) > 0 and b.kind != prev
        assert b.normal_start == i and b.faulty_start == j
        assert not (prev == "faulty" and b.kind == "normal")
        if b.kind != "faulty":
            i += len(b.normal_tokens)
        if b.kind != "normal":
            j += len(b.faulty_tokens)
        prev = b.kind
    assert (i, j) == (len(normal), len(faulty))




# ----------------------------------------------------------------------- inputs

def scattered(n, edits, seed=1):
    """Random tokens, ``edits`` random substitutions / insertions / deletions."""
    rnd = random.Random(seed)
    normal = [rnd.choice(ALPHA) for _ in range(n)]
    faulty = list(normal)
    for _ in range(edits):
        p = rnd.randrange(len(faulty))
        op = rnd.randrange(3)
        if op == 0:
            faulty[p] = rnd.choice(ALPHA)
        elif op == 1:
            faulty.insert(p, rnd.choice(ALPHA))
        else:
            del faulty[p]
    return normal, faulty


BODY = ([("MPI_Irecv", 0), ("MPI_Isend", 0), ("L3", 6), ("MPI_Waitall", 0), ("L4", 26),
         ("MPI_Allreduce", 0)] * 6 + [("L5", 3), ("TimeIncrement", 0), ("L6", 2), ("Lagrange", 0)])


def unfolded_loop(n, seed, vary=0.3):
    """A time-step loop that did not fold (the LULESH case): a 40-token body repeated,
    its inner loops' counts varying per iteration with probability ``vary``."""
    rnd = random.Random(seed)
    out = [("MPI_Init", 0)]
    while len(out) < n:
        for t in BODY:
            if t[1] and rnd.random() < vary:
                t = (t[0], t[1] + rnd.randrange(1, 3))
            out.append(t)
    return out[:n] + [FIN]


def worst(n, seed=4):
    """Two unrelated sequences over 4 names: about n / 2 differences."""
    rnd = random.Random(seed)
    return ([(f"f{rnd.randrange(4)}", 0) for _ in range(n)],
            [(f"f{rnd.randrange(4)}", 0) for _ in range(n)])


def linear_pass_time(a):
    """CPU time of a linear pass over ``a`` (the diff of identical sequences), best of 3."""
    best = float("inf")
    for _ in range(3):
        t = time.process_time()
        diff_tokens(a, a, max_cost=config.DIFF_MAX_COST)
        best = min(best, time.process_time() - t)
    return max(best, 1e-3)


def work_bound(a, b):
    """The exact search's bound plus a generous linear allowance for the rest."""
    return config.DIFF_MAX_WORK + 64 * (len(a) + len(b))


# ----------------------------------------------------------------------- total work

def test_scattered_changes_40k_exact_within_bound():
    normal, faulty = scattered(N, 400)
    blocks = diff_tokens(normal, faulty, max_cost=config.DIFF_MAX_COST)
    assert isinstance(blocks, Diff) and isinstance(blocks, list)
    check_structure(blocks, normal, faulty)
    assert not blocks.approximate and approximate_note(blocks) == ""
    assert edit_count(blocks) <= 2 * 400             # at most the edits made
    assert blocks.work <= work_bound(normal, faulty)


def test_unfolded_loop_40k_total_work_bounded():
    """The LULESH case: thousands of loop-count differences.  The old per-sub-problem bound
    took about 1,350 linear passes here (50 s); the total bound about 60."""
    normal, faulty = unfolded_loop(N, 2), unfolded_loop(N, 102)
    lin = linear_pass_time(normal)
    t = time.process_time()
    blocks = diff_tokens(normal, faulty, max_cost=config.DIFF_MAX_COST)
    took = time.process_time() - t
    check_structure(blocks, normal, faulty)
    assert blocks.approximate
    assert blocks.note.startswith("approximate diff: ") and "\n" not in blocks.note
    assert approximate_note(blocks) == blocks.note
    assert blocks.work <= work_bound(normal, faulty)
    assert took <= 400 * lin, (took, lin)
    # the approximate diff is close to minimal: about 2 differences per varied loop count
    varied = sum(x != y for x, y in zip(normal, faulty))
    assert edit_count(blocks) <= 2.3 * varied


def test_crafted_worst_case_total_work_bounded():
    """Unrelated sequences over 4 names (at 40,000 tokens D is about 28,000: 113 s before,
    about 3,000 linear passes; 10,000 here) and a periodic pair whose runs of 4 never
    re-align."""
    a, b = worst(N // 4)
    lin = linear_pass_time(a)
    t = time.process_time()
    blocks = diff_tokens(a, b, max_cost=config.DIFF_MAX_COST)
    took = time.process_time() - t
    check_structure(blocks, a, b)
    assert blocks.approximate and blocks.work <= work_bound(a, b)
    assert took <= 400 * lin, (took, lin)
    x, y, z = ("x", 0), ("y", 0), ("z", 0)
    a, b = [x, y, z] * (N // 12), [x, z, y] * (N // 12)
    blocks = diff_tokens(a, b, max_cost=config.DIFF_MAX_COST)
    check_structure(blocks, a, b)
    assert blocks.work <= work_bound(a, b)


def test_default_bounds_follow_max_cost():
    """max_work defaults to config.DIFF_MAX_WORK with max_cost, to no bound without (the
    exact diff, as --exact asks); either can be given."""
    a, b = worst(600, seed=9)
    exact = diff_tokens(a, b)
    assert not exact.approximate and exact.work > 1000
    assert edit_count(exact) == len(a) + len(b) - 2 * lcs_len(a, b)
    cut = diff_tokens(a, b, max_work=1000)
    check_structure(cut, a, b)
    assert cut.approximate and "1,000 steps" in cut.note
    assert edit_count(cut) >= edit_count(exact)
    assert not diff_tokens(a, b, max_cost=10_000, max_work=None).approximate
    for bad in (0, -5):
        with pytest.raises(ValueError):
            diff_tokens(a, b, max_work=bad)


TOKENS = st.sampled_from([("a", 0), ("b", 0), ("c", 0), ("L1", 2), ("L1", 3)])


@settings(max_examples=300, deadline=None)
@given(st.lists(TOKENS, max_size=40), st.lists(TOKENS, max_size=40))
def test_small_diffs_unchanged_by_the_bounds(a, b):
    """Small diffs stay exact (minimal, not flagged) under the default bounds."""
    blocks = diff_tokens(a, b, max_cost=config.DIFF_MAX_COST)
    check_structure(blocks, a, b)
    assert not blocks.approximate
    assert edit_count(blocks) == len(a) + len(b) - 2 * lcs_len(a, b)


@settings(max_examples=300, deadline=None)
@given(st.lists(TOKENS, max_size=300), st.lists(TOKENS, max_size=300), st.integers(1, 50))
def test_greedy_fallback_is_a_correct_diff(a, b, max_work):
    blocks = diff_tokens(a, b, max_work=max_work)
    check_structure(blocks, a, b)


def test_greedy_fallback_edits_and_long_insertions():
    """The fallback alone (max_work=1) stays near minimal, also across a long insertion
    and a long deletion (which it jumps over)."""
    rnd = random.Random(5)
    normal, faulty = scattered(3000, 15, seed=5)
    faulty[1000:1000] = [rnd.choice(ALPHA) for _ in range(150)]
    del faulty[2000:2075]
    exact = edit_count(diff_tokens(normal, faulty))
    greedy = diff_tokens(normal, faulty, max_work=1)
    check_structure(greedy, normal, faulty)
    assert greedy.approximate and edit_count(greedy) <= 1.1 * exact
    a, b = unfolded_loop(3000, 2), unfolded_loop(3000, 102)
    greedy = diff_tokens(a, b, max_work=1)
    assert edit_count(greedy) <= 1.1 * edit_count(diff_tokens(a, b))


# ----------------------------------------------------------------------- bounded text

def stopped_pair(n=N, tail=()):
    """A normal run of n tokens and a faulty one that stopped half way (then ``tail``)."""
    normal = unfolded_loop(n, 3, vary=0.0)
    return normal, normal[:n // 2 + 7] + list(tail)


def lines_of(text):
    return text.splitlines()


def test_stopped_trace_40k_renders_within_40_lines():
    normal, faulty = stopped_pair()
    blocks = diff_tokens(normal, faulty, max_cost=config.DIFF_MAX_COST)
    out = lines_of(render_text(blocks, BODIES, title="rank 3 thread 0 (11.mpi.K10)", context=8))
    assert len(out) <= 40
    stop = [ln for ln in out if "faulty stops here" in ln]
    assert stop == ["  (faulty stops here: its trace ends after 20,007 tokens)"]
    after = [ln for ln in out if ln.startswith("- ")]
    assert len(after) == 1                                      # one line, not 19,994
    assert after[0].startswith("- normal continued with 19,994 more tokens: MPI_Irecv MPI_Isend")
    assert after[0].endswith(f"\u2026 {format_token(FIN)}")
    assert out.index(after[0]) < out.index(stop[0])
    # where it stopped: the last common tokens just before
    i = out.index(after[0])
    assert out[i - 1] == "  " + format_token(faulty[-1])
    # the common start is one line, in iterations of the unfolded loop
    assert any(re.match(r"  \u2026 19,999 common tokens: MPI_Init, then 499 iterations of \[MPI_Irecv", ln)
               for ln in out)
    # a trace that left the path before stopping: its own last calls are listed
    normal, faulty = stopped_pair(tail=[("MPI_Wait", 0)])
    out = lines_of(render_text(diff_tokens(normal, faulty, max_cost=config.DIFF_MAX_COST), BODIES, context=8))
    assert len(out) <= 40
    assert "+ MPI_Wait" in out and "  (faulty stops here: its trace ends after 20,008 tokens)" in out
    assert sum(ln.startswith("- ") for ln in out) == 1


def test_common_loop_iterations_collapse_with_their_count():
    init = [("MPI_Init", 0), ("MPI_Comm_rank", 0)]
    n = init + [("L5", 3)] * 3 + [("a", 0)] + [("L5", 4)] * 2 + [FIN]
    f = init + [("L5", 3)] * 3 + [("b", 0)] + [("L5", 4)] * 2 + [FIN]
    out = lines_of(render_text(diff_tokens(n, f), BODIES, context=0))
    assert "  \u2026 5 common tokens: MPI_Init MPI_Comm_rank, then 9 iterations of L5 (in 3 tokens) \u2026" in out
    assert "  \u2026 3 common tokens: 8 iterations of L5 (in 2 tokens) and 1 more \u2026" in out
    assert "L5 = [a]" in out                                     # named, so its body is listed
    assert describe_common([("L5", 3), ("L5", 4), ("L5", 2)])[0] == "9 common iterations of L5 (in 3 tokens)"
    assert describe_common([("MPI_Barrier", 0)] * 12)[0] == "12 common MPI_Barrier"
    assert describe_common([("x", 0)] + [("MPI_Barrier", 0)] * 12)[0] == "13 common tokens: x, then 12 \u00d7 MPI_Barrier"
    text, named = describe_common([("x", 0)] + [("A", 0), ("L3", 6), ("B", 0)] * 9 + [("y", 0)])
    assert text == "29 common tokens: x, then 9 iterations of [A L3^6 B] and 1 more"
    assert ("L3", 6) in named
    assert describe_common([(f"f{i}", 0) for i in range(40)])[0] == "40 common tokens"
    # a long start before the repeats (a run's set-up before its time-step loop)
    setup = [(f"init{i}", 0) for i in range(30)]
    text, named = describe_common(setup + [("A", 0), ("L3", 6), ("B", 0)] * 20 + [("A", 0), ("x", 0)])
    assert text == ("92 common tokens: init0 init1 init2 init3 init4 init5 \u2026 (30 tokens), then 20 iterations "
                    "of [A L3^6 B] and 2 more")
    assert describe_common(setup + [("A", 0), ("B", 0)] * 10)[0] == "50 common tokens"   # repeats < half


def test_max_lines_none_shows_everything_as_before():
    normal, faulty = scattered(2000, 30, seed=11)
    blocks = diff_tokens(normal, faulty)
    b = brief(blocks)
    full = lines_of(render_text(blocks, BODIES, max_lines=None))
    assert sum(ln.startswith("  ") for ln in full) == b["common_tokens"]
    assert sum(ln.startswith("- ") for ln in full) == b["only_normal"]
    assert sum(ln.startswith("+ ") for ln in full) == b["only_faulty"]
    assert not any("\u2026" in ln for ln in full[:-1])          # nothing collapsed
    bounded = lines_of(render_text(blocks, BODIES))
    assert len(bounded) <= config.DIFF_MAX_LINES < len(full)
    m = [re.match(r"  \u2026 (\d+) more changed regions \(show all with --all\)$", ln) for ln in bounded]
    m = [x for x in m if x]
    assert len(m) == 1
    # the regions shown plus the ones counted are all of them
    shown, prev = 0, False
    for ln in bounded:
        cur = ln.startswith(("- ", "+ "))
        shown += cur and not prev
        prev = cur
    assert shown + int(m[0].group(1)) == b["changes"]


def test_long_change_sides_are_cut_to_one_line():
    common = [(f"c{i}", 0) for i in range(20)]
    n = common + [(f"n{i}", 0) for i in range(500)] + common
    f = common + [(f"f{i}", 0) for i in range(300)] + common
    out = lines_of(render_text(diff_tokens(n, f), {}, context=2))
    assert len(out) <= 40
    assert [ln for ln in out if ln.startswith("- ")] == [f"- n{i}" for i in range(5)] + [
        "- \u2026 495 more tokens only in normal: n5 n6 n7 n8 \u2026 n499"]
    assert "+ \u2026 295 more tokens only in faulty: f5 f6 f7 f8 \u2026 f299" in out


def test_approximate_note_is_one_line_under_the_legend():
    a, b = worst(3000, seed=2)
    blocks = diff_tokens(a, b, max_work=5000)
    out = lines_of(render_text(blocks, {}, title="t"))
    assert out[3] == blocks.note and len(out) <= 40
    assert blocks.note in render_html(blocks, {}, "t")
    assert approximate_note([]) == "" and approximate_note(diff_tokens(a, a)) == ""


def test_max_lines_validation_and_small_caps():
    n, f = stopped_pair(2000)
    blocks = diff_tokens(n, f)
    with pytest.raises(ValueError):
        render_text(blocks, BODIES, max_lines=MIN_LINES - 1)
    for cap in (MIN_LINES, 15, 25):
        out = lines_of(render_text(blocks, BODIES, title="x" * 50, max_lines=cap, context=30))
        assert len(out) <= cap and any("faulty stops here" in ln for ln in out)


NAMES = st.sampled_from([("a", 0), ("b", 0), ("c", 0), ("L1", 2), ("L1", 3), ("L2", 1)])


@settings(max_examples=300, deadline=None)
@given(st.lists(NAMES, max_size=300), st.lists(NAMES, max_size=300), st.integers(MIN_LINES, 50),
       st.integers(0, 12), st.booleans(), st.booleans())
def test_text_never_passes_max_lines_and_shows_the_first_change(a, b, cap, context, title, color):
    blocks = diff_tokens(a, b)
    text = render_text(blocks, {"L1": [("a", 0)], "L2": [("L1", 2)]}, color=color, context=context,
                       title="t" if title else "", max_lines=cap)
    out = lines_of(re.sub(r"\x1b\[[0-9;]*m", "", text))
    assert len(out) <= cap
    first = next((blk for blk in blocks if blk.kind != "common"), None)
    changed = [ln for ln in out if ln.startswith(("- ", "+ "))]
    if first is None:
        assert not changed
    else:
        assert format_token(first.tokens[0]) in changed[0]


class Boxes(HTMLParser):
    """Counts the token boxes of each kind."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.boxes = {"common": 0, "normal": 0, "faulty": 0}

    def handle_starttag(self, tag, attrs):
        cls = (dict(attrs).get("class") or "").split()
        for k in self.boxes:
            if "dnlr-tok" in cls and f"dnlr-{k}" in cls:
                self.boxes[k] += 1


def test_html_keeps_every_token():
    normal, faulty = stopped_pair(tail=[("MPI_Wait", 0)])
    blocks = diff_tokens(normal, faulty, max_cost=config.DIFF_MAX_COST)
    frag = render_html(blocks, BODIES, "stopped", context=config.DIFF_CONTEXT)
    p = Boxes()
    p.feed(frag)
    p.close()
    b = brief(blocks)
    assert p.boxes == {"common": b["common_tokens"], "normal": b["only_normal"], "faulty": b["only_faulty"]}
    assert p.boxes == {"common": 20_007, "normal": 19_994, "faulty": 1}
    assert frag.count("<details>") >= 2                          # the common run, the long side
    assert "19,989 more tokens only in normal" in frag


def test_html_in_a_page_of_several_draws_a_bounded_number_of_boxes():
    """A page embedding several diffNLRs (the report, analyze --html) draws at most
    ``max_boxes`` token boxes of each: a real LULESH thread's NLR is about a million tokens,
    and drawing every one made a 27-rank report 116 MB.  The tokens past the budget are
    counted where they are left out, and a note gives their number and the command that
    lists every one; every other part of the diff (its rows, the change, the loop bodies)
    is there as without a budget."""
    normal, faulty = stopped_pair(tail=[("MPI_Wait", 0)])
    blocks = diff_tokens(normal, faulty, max_cost=config.DIFF_MAX_COST)
    whole = render_html(blocks, BODIES, "stopped", context=config.DIFF_CONTEXT)
    frag = render_html(blocks, BODIES, "stopped", context=config.DIFF_CONTEXT, max_boxes=1000,
                       see_all="difftrace-mpi diffnlr RESULTS.h5 --rank 3 --all")
    p = Boxes()
    p.feed(frag)
    p.close()
    assert sum(p.boxes.values()) == 1000
    left_out = 20_007 + 19_994 + 1 - 1000
    assert re.findall(r"([\d,]+) more tokens not drawn", frag)
    assert sum(int(n.replace(",", "")) for n in re.findall(r"([\d,]+) more tokens not drawn", frag)) == left_out
    assert (f"This page draws at most 1,000 token boxes of a diffNLR: {left_out:,} tokens are not drawn; "
            "difftrace-mpi diffnlr RESULTS.h5 --rank 3 --all lists every one.") in frag
    assert len(frag) < len(whole) / 20
    # the structure is the same: the change, the collapsed runs' descriptions, the loop bodies
    for piece in ("19,989 more tokens only in normal", "Loop bodies", "dnlr-summary"):
        assert piece in frag and piece in whole
    assert "not drawn" not in whole and "not drawn" not in render_html(blocks, BODIES, "stopped", max_boxes=10 ** 6)

def test_brief_and_one_line_summary():
    normal, faulty = stopped_pair()
    blocks = diff_tokens(normal, faulty)
    b = brief(blocks)
    assert b["end"] == "faulty_stopped" and b["continued"] == 19_994
    assert b["first_change"]["normal_index"] == 20_007 and b["first_change"]["faulty"] == []
    assert b["first_change"]["normal"][:2] == ["MPI_Irecv", "MPI_Isend"]
    assert b["first_change"]["after"] == format_token(faulty[-1])
    assert b["summary"] == summarize(blocks) and "\n" not in b["summary"]
    assert brief(diff_tokens(normal, normal))["identical"]
    swap = brief(diff_tokens([("a", 0), ("L1", 16), FIN], [("a", 0), ("L1", 7), ("L0", 9), FIN]))
    assert swap["end"] == "same" and swap["changes"] == 1
    assert swap["first_change"] == {"normal_index": 1, "faulty_index": 1, "after": "a", "normal": ["L1^16"],
                                    "normal_count": 1, "faulty": ["L1^7", "L0^9"], "faulty_count": 2}
    for a, f in (unfolded_loop(5000, 2), unfolded_loop(5000, 102)), worst(2000):
        assert "\n" not in summarize(diff_tokens(a, f, max_cost=config.DIFF_MAX_COST, max_work=20_000))
