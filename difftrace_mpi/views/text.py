"""Plain-text output of an analysis: inputs, ranking table, diffNLRs, a ticket summary."""
import sys

from . import diffnlr
from .diffprose import summarize
from .diffview import diff_title, full_diff_command, not_kept_line, shown_diff_keys, suspect_diffs
from ..escape import visible_lines
from ..config import DIFF_CONTEXT, DIFF_MAX_LINES, DIFFNLRS_SHOWN, PAGE_DIFF_BOXES, ROWS_SHOWN, TEXT_MAX_LINES
from ..fsutil import write_text_atomic
from ..naming import plural, shorten, shorten_left

RULE = "-" * 100
NOTES_SHOWN = 10
#: the one-line key under the ranking table (docs/design.md has the whole story)
RANKING_KEY = ("     key: 11.mpi = MPI calls only, 11.every = all calls; K = longest loop body; sing/doub = NLR "
               "tokens/pairs, noFreq/actual/log10 = presence/count/log count; B-score: 1 = same clusters as normal, "
               "lower = more changed; k = clusters")


def key_label(key, multi_thread):
    """``(5, 0)`` -> ``5.0`` (``5`` when every rank has one thread 0); an int -> itself."""
    if isinstance(key, (tuple, list)):
        return f"{key[0]}.{key[1]}" if multi_thread else f"{key[0]}"
    return f"{key}"


#: the timing rule's clocks in words (``timing.CLOCKS``)
CLOCK_WORDS = {"both": "wall time or time outside MPI calls", "wall": "wall time",
               "own": "time outside MPI calls"}


def timing_change(normal, faulty, ratio):
    """``1.32 us -> 6.12 us (4.64x slower)``: a mean iteration time before and after."""
    from ..stages.diagnose.timing import format_ns
    return f"{format_ns(normal)} -> {format_ns(faulty)} ({timing_factor(ratio)})"


def timing_factor(ratio):
    """``4.64x slower``, ``4.00x faster`` or ``about the same`` for a faulty / normal ratio."""
    from ..stages.diagnose.timing import change_factor
    factor = change_factor(ratio)
    return "about the same" if factor < 1.005 else f"{factor:.2f}x {'slower' if ratio >= 1 else 'faster'}"


def timing_rule_text(rule):
    """The timing rule in words, from a stored or computed ``rule`` dict."""
    return (f"same iteration counts in both runs; {CLOCK_WORDS.get(str(rule.get('clock', 'both')), 'either clock')} "
            f"changed by {float(rule['min_ratio']):g}x or more, and by more than {float(rule['k']):g} robust "
            f"deviations of the loop's times across the normal run's traces")


def _fmt_procs(items):
    return " ".join(str(r) for r, _ in items) or "-"


def _fmt_threads(items):
    return " ".join(f"{r}.{t}" for (r, t), _ in items) or "-"


def ranking_table(rows, limit=None):
    """The ranking table as aligned text (lowest B-score first)."""
    shown = rows if limit is None else rows[:limit]
    lines = [f"{'#':>3}  {'filter':<14} {'K':>3}  {'attributes':<12} {'linkage':<9} {'B-score':>8} {'k':>3}  "
             f"{'top processes':<22} top threads (rank.thread)"]
    for i, r in enumerate(shown, 1):
        mark = "*" if not r.structured else "~" if not r.localised else " "
        lines.append(f"{i:>3}  {r.filter:<14} {r.k:>3}  {r.attributes:<12} {r.linkage:<9} {r.bscore:>7.4f}{mark} "
                     f"{r.clusters:>3}  {_fmt_procs(r.top_processes):<22} {_fmt_threads(r.top_threads)}")
    if limit is not None and len(rows) > limit:
        lines.append(f"     ... {plural(len(rows) - limit, 'more row')} (--rows N, --json or --out FILE.h5 for all)")
    if any(r.structured and not r.localised for r in shown):
        lines.append("     ~ the suspects of this setting touch half of the ranks or more: it does not localise "
                     "the fault, so it sorts after the settings that do")
    if any(not r.structured for r in shown):
        lines.append("     * the normal run has no class structure in this setting (nearly every trace is a class "
                     "of its own): its B-score says little, so it sorts last")
    lines.append(RANKING_KEY)
    return "\n".join(lines)


def hang_text(results):
    """Where a hung or killed faulty run stopped: least progressed traces and their calls."""
    hang = results.hang_view()
    if not hang:
        return ""
    stuck = ", ".join(f"{call} ({n})" for call, n in hang["stuck_in"][:5])
    lines = [f"The faulty run stopped early: {plural(hang['stopped'], 'trace')} of {int(results.present[1].sum())} "
             f"ended inside a call the normal run had left. Stuck in: {stuck}.",
             *normal_path_lines(hang),
             "Least progressed (calls entered, as a share of the normal run's):"]
    for (rank, thread), progress, calls, tail in hang["least"]:
        lines.append(f"  rank {rank} thread {thread}: {100 * progress:5.1f}%  in {calls or '(no open call)'}"
                     + (f"; NLR ends: ... {tail}" if tail else ""))
    return "\n".join(lines)


def verdict_text(results, culprits=3):
    """The verdict block that leads the output: kind, the first culprit and why, where,
    the next candidates, who died, and the victims by the calls they stopped in."""
    v = results.verdict
    if not v:
        return ""
    kind = {"crash": "CRASH", "hang": "HANG", "changed": "CHANGED BEHAVIOUR", "timing": "TIMING ONLY",
            "none": "NO DIFFERENCE"}[v["kind"]]
    lines = [f"Verdict: {kind}", f"  {v['summary']}"]
    where = v["where"]
    if v["culprits"]:
        c = v["culprits"][0]
        lines.append(f"  culprit:   rank {c['rank']} thread {c['thread']}"
                     + (f" (tied with {v['tied'] - 1} more at the same point)" if v["tied"] > 1 else ""))
        if where["call_path"]:
            lines.append(f"  call path: {shorten_left(where['call_path'], 110)}")
        if where["iteration"] is not None:
            lines.append(f"  iteration: {where['iteration']} of {where['iterations']} of {shorten(where['loop'], 90)}")
            if len(where.get("loops") or ()) > 1:
                lines.append("  loop nest: " + shorten(" > ".join(
                    f"{loop['pass']} of {loop['of']} of [{' '.join(loop['body'])}]" for loop in where["loops"]), 150))
        if where["normal"] or where["faulty"]:
            lines.append(f"  {'others:' if v.get('alone') else 'normal:'}    "
                         f"{shorten(where['normal'] or '(nothing here)', 110)}")
            lines.append(f"  faulty:    {shorten(where['faulty'] or '(nothing here)', 110)}")
    confidence = v.get("confidence")
    if confidence and v["kind"] != "none":
        lines.append(f"  confidence: {confidence['level']}: {shorten(confidence['why'], 100)}")
        if confidence["raise"]:
            lines.append(f"  to raise it: {shorten(confidence['raise'], 110)}")
    for d in v["died"][:3]:
        lines.append(f"  died:      rank {d['rank']} thread {d['thread']}: {shorten(d['how'], 100)}")
    if len(v["died"]) > 3:
        lines.append(f"  died:      ... and {len(v['died']) - 3} more processes")
    more = v["culprits"][1:culprits]
    if more:
        lines.append("  next candidates (logical clock: MPI collectives entered before):")
        for c in more:
            clock = "?" if c["clock"] is None else c["clock"]
            lines.append(f"    rank {c['rank']} thread {c['thread']} at clock {clock}: {shorten(c['why'], 100)}")
    if v["candidates"] > culprits:
        lines.append(f"    ... {plural(v['candidates'] - culprits, 'more candidate')} (--json lists them)")
    for g in v["victims"][:4]:
        lines.append(f"  stopped:   {plural(g['count'], 'trace')} in {shorten_left(g['stack'], 60)} "
                     f"({shorten(g['members'], 50)})")
    if len(v["victims"]) > 4:
        lines.append(f"  stopped:   ... {plural(len(v['victims']) - 4, 'more group')}")
    return "\n".join(lines)


def first_difference_words(calls_from, calls_to, calls):
    """``first difference within calls 83-89 of 136`` from a 0-based bracket [from, to)."""
    if calls_to > calls_from + 1:
        where = f"within calls {calls_from + 1:,}-{calls_to:,}"
    elif calls_to == calls_from + 1:
        where = f"at call {calls_to:,}"
    else:                   # the block held returns only
        where = f"right after call {calls_from:,}" if calls_from else "before the first call"
    return f"first difference {where} of {calls:,}"


def normal_path_lines(hang):
    """The stopped traces in two groups: those that left the normal path before stopping
    (likely causes), then those that stopped on it (waiting for others)."""
    from ..naming import describe_keys
    left, n_left = hang["left_normal_path"], hang["left_normal_path_count"]
    on_path, n_on = sorted(key for key, _ in hang["on_normal_path"]), hang["on_normal_path_count"]
    left_words = "; ".join(f"rank {r} thread {t} ({first_difference_words(*where)})" for (r, t), _, where in left)
    if n_left > len(left):
        left_words += f"; and {n_left - len(left):,} more"
    on_words = describe_keys(on_path) if n_on == len(on_path) else \
        f"{plural(n_on, 'trace')} (the {len(on_path)} least progressed: {describe_keys(on_path)})"
    if left and not hang["left_singles_out"]:
        n_stopped = n_left + n_on
        head = (f"Left the normal path before stopping: {n_left:,} of the {n_stopped:,} stopped traces, most "
                f"of them, so this singles out no cause (run-to-run variation such as OpenMP scheduling also "
                f"changes traces; the least progressed may be the better lead): ")
    else:
        head = "Left the normal path before stopping (likely causes): "
    return [head + (left_words or "none: every stopped trace is the start of its normal trace, so the least "
                                  "progressed are the best lead"),
            "Stopped on the normal path (waiting for others): " + (on_words if n_on else "none")]


def timing_text(results, shown=5):
    """Loops whose mean iteration time changed while their structure did not (traces with
    timestamps only; see ``timing``), per setting, largest change first; "" when none."""
    flags = {c: fl for c, fl in (results.timing_flags() or {}).items() if fl}
    if not flags:
        return ""
    rule = next(iter(results.combos[c].loop_timing["rule"] for c in flags))
    lines = ["Timing (loops whose iteration time changed while structure did not):"]
    width = max(len(c) for c in flags)
    change = timing_change

    for cname, fl in flags.items():
        for f in fl[:shown]:
            body = " ".join(results.loop_labels(cname, f.loop))
            own = ((f.own_normal_ns, f.own_faulty_ns) != (f.normal_ns, f.faulty_ns))   # MPI calls in it
            lines.append(f"  {cname:<{width}}  rank {f.rank} thread {f.thread}: L{f.loop} [{body}] per iteration "
                         f"{change(f.normal_ns, f.faulty_ns, f.ratio)}"
                         + (f", outside MPI calls {change(f.own_normal_ns, f.own_faulty_ns, f.own_ratio)}" if own
                            else "")
                         + f"; {plural(f.iterations, 'iteration')}{'' if f.same_nlr else '; other loops changed'}")
        if len(fl) > shown:
            lines.append(f"  {cname:<{width}}  ... {len(fl) - shown} more (--json or --out FILE.h5 for all)")
    lines.append(f"  ({timing_rule_text(rule)})")
    return "\n".join(lines)


CHANGE_WORDS = {
    "more": "keeps all of its normal behaviour and adds new behaviour (extra calls, loops or threads)",
    "less": "shows only part of its normal behaviour (stopped early or skipped work)",
    "different": "replaced part of its normal behaviour with other behaviour",
    "same": "has the same attributes (only its similarity to others changed)",
}


def change_text(row, shown=5):
    """What kind of change each top thread of a row underwent (subsumption of its normal
    and faulty attributes in that row's setting)."""
    lines = [f"How the best row's suspects changed ({row.filter}, {row.attributes}):"]
    for (rank, thread), _ in row.top_threads[:shown]:
        c = row.change_of((rank, thread))
        lines.append(f"  rank {rank} thread {thread}: {CHANGE_WORDS[c['change']]}; shares "
                     f"{100 * c['shared_of_normal']:.0f}% of its normal attributes")
    return "\n".join(lines) if len(lines) > 1 else ""


def consensus_text(rows, shown=8):
    """Which suspects most rows agree on (each row's first 3)."""
    from ..stages.classify.cluster import consensus
    procs = consensus(rows, "top_processes")
    threads = consensus(rows, "top_threads")
    fmt = lambda items, label: ", ".join(f"{label(k)} ({n})" for k, n, _ in items[:shown]) or "-"  # noqa: E731
    return (f"Named in the top 3 of most of the {plural(len(rows), 'row')} (rows naming each):\n"
            f"  processes: {fmt(procs, str)}\n"
            f"  threads:   {fmt(threads, lambda k: f'{k[0]}.{k[1]}')}")


def timing_sentence(flags_by_combo):
    """One sentence on the largest timing flag ({combo: [TimingFlag]}), "" when there is none."""
    flags = [(c, f.as_dict()) for c, fl in (flags_by_combo or {}).items() for f in fl]
    if not flags:
        return ""
    from ..stages.diagnose.timing import change_factor
    combo, f = max(flags, key=lambda cf: change_factor(float(cf[1]["ratio"])))
    return (f"Timing: rank {int(f['rank'])} thread {int(f['thread'])}, loop L{int(f['loop'])} ({combo}), "
            f"{timing_factor(float(f['ratio']))} per iteration (wall time) with the same iteration count "
            f"({plural(len(flags), 'flagged loop')} in all).")


def hang_cause_sentence(hang):
    """One sentence naming the stopped traces that left the normal path (the likely cause
    of a hang), "" when there is no hang, none did, or most did (no single cause)."""
    if not hang or not hang["left_singles_out"]:
        return ""
    from ..naming import describe_keys
    left, n_left = hang["left_normal_path"], hang["left_normal_path_count"]
    if n_left == 1:
        (rank, thread), _, where = left[0]
        who = f"rank {rank} thread {thread} left the normal path before stopping ({first_difference_words(*where)})"
    else:
        who = (f"{plural(n_left, 'trace')} left the normal path before stopping: "
               f"{describe_keys(sorted(key for key, _, _ in left))}" + (" and more" if n_left > len(left) else ""))
    n_on = hang["on_normal_path_count"]
    others = f"; the {plural(n_on, 'other stopped trace')} stopped on the normal path" if n_on else ""
    return f"Likely cause of the hang: {who}{others}."


def ticket_summary(results, diffs):
    """A few plain sentences a user can paste into a ticket."""
    timing = timing_sentence(results.timing_flags())
    if results.verdict and results.no_difference:
        return (f"No difference: {results.verdict['summary'].split(': ', 1)[-1]} ({results.faulty_path} vs "
                f"{results.normal_path})." + (f"\n{timing}" if timing else ""))
    if results.no_difference:
        return ("No difference: in every setting the faulty run's traces are as similar to each other as the "
                "normal run's (JSM_D = 0 everywhere)." + (f"\n{timing}" if timing else ""))
    lines = [f"DiffTrace: {results.faulty_path} vs {results.normal_path}." if results.normal_path else
             f"DiffTrace: {results.faulty_path}, alone (no normal run)."]
    if results.verdict:
        lines.append(f"Verdict: {results.verdict['summary']}.")
        confidence = results.verdict.get("confidence")
        if confidence:
            lines.append(f"Confidence: {confidence['level']} ({confidence['why']})"
                         + (f"; to raise it: {confidence['raise']}." if confidence["raise"] else "."))
    best = results.rows[0] if results.rows else None
    if best is None:
        lines.append(f"No ranking table: {results.why_no_ranking()}." if results.normal_path else
                     "Made from the faulty run alone (no normal run): its ranks and time steps were the norm.")
        return "\n".join(lines + ([timing] if timing else []))
    lines += [f"{'Most changed setting' if best.changed_clustering else 'Best setting (its clustering did not change)'}"
              f": filter {best.filter}, K={best.k}, {best.attributes}, {best.linkage} linkage "
             f"(B-score {best.bscore:.3f}).",
              f"Top suspect processes: {_fmt_procs(best.top_processes)}; threads: {_fmt_threads(best.top_threads)}."]
    culprits = (results.verdict or {}).get("culprits") or []
    if culprits and best.top_threads and tuple(best.top_threads[0][0]) != (culprits[0]["rank"], culprits[0]["thread"]):
        lines.append(f"(The ranking names rank {best.top_threads[0][0][0]} thread {best.top_threads[0][0][1]} first: it "
                     f"measures how much each trace's calls changed in all, the verdict where the change began.)")
    cause = "" if results.verdict else hang_cause_sentence(results.hang_view())
    if cause:
        lines.append(cause)
    if not getattr(best, "localised", True):
        lines.append("No setting singles out a few ranks: in every one the suspects touch half of the ranks or "
                     "more (a hang that cut every trace, or a change every rank shared).")
    for (rank, thread), _, blocks, _ in diffs[:1]:
        said = summarize(blocks)
        if not said.startswith("No difference"):     # its calls differ only outside this setting's filter
            lines.append(f"Rank {rank} thread {thread}: " + said)
    incomplete = [results.objects[i] for i in range(len(results.objects)) if not results.complete[1, i]]
    if incomplete:
        lines.append(f"{plural(len(incomplete), 'faulty trace')} {'was' if len(incomplete) == 1 else 'were'} "
                     f"cut short (killed or hung run).")
    if timing:
        lines.append(timing)
    return "\n".join(lines)


class BoundedStream:
    """A text stream that passes at most ``limit`` lines on, then one line saying how many
    it held back (``limit`` None: everything)."""

    def __init__(self, stream, limit):
        self.stream, self.limit, self.lines, self.held = stream, limit, 0, 0

    def write(self, text):
        if self.limit is None:
            return self.stream.write(text)
        for line in text.splitlines(keepends=True):
            if self.lines < self.limit:
                self.stream.write(line)
                self.lines += line.endswith("\n")
            else:
                self.held += 1
        return len(text)

    def flush(self):
        self.stream.flush()

    def close_note(self):
        if self.held:
            self.stream.write(f"... {self.held:,} more lines held back (--all shows everything; --json and "
                              f"--out keep all results)\n")


def print_analysis(results, rows=ROWS_SHOWN, diffnlrs=DIFFNLRS_SHOWN, color=False, out=None, html=None, stream=None,
                   show_all=False, force=False):
    """The text output: the verdict first, then the evidence; at most TEXT_MAX_LINES lines
    (and DIFF_MAX_LINES per diffNLR) unless ``show_all``.  ``html``: also write the
    diffNLRs shown as an HTML page there (``force``: replacing a file)."""
    bounded = BoundedStream(stream or sys.stdout, None if show_all else TEXT_MAX_LINES - 1)
    try:
        _print_analysis(results, rows, diffnlrs, color, out, html, bounded, show_all, force)
    finally:
        bounded.close_note()


def _no_difference_line(results):
    """What a run without differences says, by what was compared."""
    if not results.verdict:         # a file written before the verdict
        return ("No difference: JSM_D = 0 in every setting; the faulty run's traces relate to each other exactly as "
                "the normal run's do.")
    if not results.normal_path:
        return "No difference found in the faulty run alone."
    cut = results.verdict.get("cut_traces", 0)
    if cut:
        return f"No difference where the traces can be compared ({cut} normal trace(s) cut short: see the notes)."
    return "No difference: every faulty trace equals its normal twin."


def _print_analysis(results, rows, diffnlrs, color, out, html, stream, show_all, force):
    # names (paths, notes, calls, loop bodies) may hold control characters: escaped here; the
    # diffNLRs escape their own names and may carry colour codes, so they are printed as they are
    p = lambda s="": print(visible_lines(s), file=stream)  # noqa: E731
    n_threads = len(results.objects)
    if results.normal_path:
        p(f"normal: {results.normal_path} ({results.formats[0]}, {plural(int(results.present[0].sum()), 'trace')})")
    else:
        p("normal: none (the faulty run alone: its own ranks and time steps are the norm)")
    p(f"faulty: {results.faulty_path} ({results.formats[1]}, {plural(int(results.present[1].sum()), 'trace')})")
    p(f"{plural(len(results.processes), 'process')}, {plural(n_threads, 'thread')}; ranks from: "
      f"{', '.join(sorted(set(r for r in results.rank_sources if r)))}; MPI ranks used: {results.mpi_ranks}")
    for note in results.notes[:NOTES_SHOWN]:
        p(f"note: {shorten(note, 300)}")
    if len(results.notes) > NOTES_SHOWN:
        p(f"note: ... {plural(len(results.notes) - NOTES_SHOWN, 'more note')} (see /notes in the HDF5 output)")
    p()
    verdict = verdict_text(results)
    if verdict:
        p(verdict)
        p()
    timing = timing_text(results)      # timing faults leave the structure, and so the JSMs, unchanged
    if timing:
        p(timing)
        p()
    if results.no_difference:
        p(_no_difference_line(results))
        if timing:
            p("Only the loop timing above changed.")
        if out:
            p(f"results written to {out}")
        return
    hang = "" if results.verdict else hang_text(results)      # the verdict says it, ordered
    if hang:
        p(hang)
        p()
    if results.rows:
        p("Ranking table (lowest B-score first = setting where the fault changed the clustering most):")
        p(ranking_table(results.rows, rows))
        p()
        p(consensus_text(results.rows))
    else:
        p(f"Ranking table: none ({results.why_no_ranking()})")
    changes = change_text(results.rows[0]) if results.rows else ""
    if changes:
        p()
        p(changes)
    diffs = suspect_diffs(results, diffnlrs)
    not_kept = shown_diff_keys(results, diffnlrs)[1]
    if not_kept:
        p()
        p(not_kept_line(not_kept))
    for i, (key, cname, blocks, bodies) in enumerate(diffs):
        p()
        print(diffnlr.render_text(blocks, bodies, color=color, context=DIFF_CONTEXT,
                                  max_lines=None if show_all else DIFF_MAX_LINES,
                                  title=diff_title(key, cname, results.top_keys(diffnlrs),
                                                 results.culprit_keys(diffnlrs)), key=i == 0), file=stream)
    if html and diffs:
        write_diffnlr_html(results, html, diffnlrs, diffs, force=force)
        p(f"diffNLR page written to {html}")
    p()
    p("Summary for a ticket:")
    p(ticket_summary(results, diffs))
    if out:
        p(f"results written to {out}")


def write_diffnlr_html(results, path, count, diffs=None, force=False):
    """The diffNLRs of the ``count`` traces the text output shows, as one HTML page."""
    diffs = diffs if diffs is not None else suspect_diffs(results, count)
    parts = [diffnlr.render_html(blocks, bodies, title=diff_title(key, cname, results.top_keys(count),
                                                                  results.culprit_keys(count)),
                                 max_boxes=PAGE_DIFF_BOXES, see_all=full_diff_command(key, cname))
             for key, cname, blocks, bodies in diffs]
    page = ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>diffNLR</title></head><body>"
            + "".join(parts) + "</body></html>")
    write_text_atomic(path, page, force=force)
