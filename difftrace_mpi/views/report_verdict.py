"""The report's answer sections, read first: the verdict box, the per-trace divergences,
the hang (least progressed traces, calls where stopped), the changes of the suspects,
the timing flags and the ticket text.  ``report`` assembles the page around them."""
from ..escape import html_lines, html_text as esc
from ..naming import plural, shorten

TIMING_ROWS = 50              # timing flags shown per setting (all are in the results file)
DIVERGENCE_ROWS = 50          # per-trace divergences shown at once
DIVERGENCE_MORE = 950         # ... and behind a <details> (all are in /divergence of the results file)
VICTIMS_SHOWN = 4             # victim groups in the verdict box (the hang section lists all the verdict has)
LONG_TEXT = 300               # characters of a name or sentence in a cell (the whole in its title, up to 4000)
KIND_WORDS = {"crash": "crash", "hang": "hang", "changed": "changed behaviour", "timing": "timing only",
              "none": "no difference"}


# --------------------------------------------------------------------------- timing

def timing_flags(rep):
    """[(combo, flags, rule)] for every setting with timing flags (traces with timestamps:
    uftrace, OTF2), the ranking's order of settings first; flags as dicts, largest change
    first."""
    stored = list(rep.results.combos)
    order = list(dict.fromkeys([rep.combo_of(r) for r in rep.rows if rep.combo_of(r) in stored] + stored))
    out = []
    for combo in order:
        view = rep.results.combos[combo].loop_timing
        if view and view["flags"]:
            out.append((combo, [f.as_dict() for f in view["flags"]], view["rule"]))
    return out


def timing_html(rep, per_setting=TIMING_ROWS):
    """The timing view: loops whose mean iteration time changed while their structure did
    not, per setting, on both clocks; "" when no setting has a flag."""
    from .text import timing_factor, timing_rule_text
    from ..stages.diagnose.timing import format_ns
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
                labels[loop] = " ".join(rep.results.loop_labels(combo, loop))
            body = labels[loop]
            ratio, own_ratio = float(f["ratio"]), float(f["own_ratio"])
            other = "" if f["same_nlr"] else " (other loops of this trace changed)"
            rows.append(
                f'<tr data-combo="{esc(combo)}" data-rank="{int(f["rank"])}" data-thread="{int(f["thread"])}" '
                f'data-loop="{loop}"><td>{esc(combo)}</td><td class="num">{int(f["rank"])}</td>'
                f'<td class="num">{int(f["thread"])}</td><td>L{loop}</td>'
                f'<td class="body" title="{esc(shorten(body, 4000))}">{esc(shorten(body, 120))}</td>'
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


# --------------------------------------------------------------------------- verdict

def cell_html(value, limit=LONG_TEXT, cls=""):
    """A table cell of a name or sentence (hostile input): escaped, cut at ``limit``
    characters with the whole (up to 4000) in its title."""
    text = "" if value is None else str(value)
    title = f' title="{esc(shorten(text, 4000))}"' if len(text) > limit else ""
    klass = f' class="{cls}"' if cls else ""
    return f"<td{klass}{title}>{esc(shorten(text, limit))}</td>"


def _clock(value):
    return "?" if value is None else str(int(value))


def where_words(where):
    """The verdict's place in words: ``iteration 7 of 20 of [..] in main``, else the loop,
    else None."""
    if where.get("iteration") is not None and where.get("loop"):
        return f"iteration {where['iteration']} of {where['iterations']} of {where['loop']}"
    return where.get("loop")


def verdict_html(rep):
    """The verdict box that leads the page; "" for a file written before the verdict."""
    v = rep.verdict
    if not v:
        return ""
    kind = str(v["kind"])
    out = [f'<section id="verdict" class="verdict kind-{esc(kind)}" data-kind="{esc(kind)}">',
           f'<h2 id="verdict-h">Verdict: {esc(KIND_WORDS.get(kind, kind).upper())}</h2>',
           f'<p class="verdict-summary">{esc(v["summary"])}</p>']
    culprits, where = v["culprits"], v["where"]
    if culprits:
        c = culprits[0]
        tied = int(v.get("tied") or 0)
        who = f"rank {int(c['rank'])} thread {int(c['thread'])}" + (
            f" (tied with {plural(tied - 1, 'other')} at the same point)" if tied > 1 else "")
        rows = [("culprit", who, "who"), ("why", c["why"], "why")]
        if where.get("call_path"):
            rows.append(("call path", where["call_path"], "call-path"))
        if where_words(where):
            rows.append(("loop", where_words(where), "loop"))
        if where.get("normal") or where.get("faulty"):
            rows.append(("normal run called", where.get("normal") or "(nothing here)", "normal"))
            rows.append(("faulty run called", where.get("faulty") or "(nothing here)", "faulty"))
        confidence = v.get("confidence")
        if confidence:
            rows.append(("confidence", f"{confidence['level']}: {confidence['why']}"
                         + (f"; to raise it: {confidence['raise']}" if confidence["raise"] else ""), "confidence"))
        if c.get("clock") is not None:
            rows.append(("logical clock", f"{_clock(c['clock'])} (MPI collectives its process entered before)",
                         "clock"))
        out.append(f'<table class="plain verdict-first" data-rank="{int(c["rank"])}" data-thread="{int(c["thread"])}">'
                   f'<tbody>{"".join(f"<tr><th>{esc(label)}</th>{cell_html(value, cls=cls)}</tr>" for label, value, cls in rows)}'
                   '</tbody></table>')
    if len(culprits) > 1:
        body = "".join(
            f'<tr data-rank="{int(c["rank"])}" data-thread="{int(c["thread"])}"><td class="num">{i}</td>'
            f'<td class="num">{int(c["rank"])}</td><td class="num">{int(c["thread"])}</td>'
            f'<td class="num">{esc(_clock(c.get("clock")))}</td><td>{esc(c.get("status") or "")}</td>'
            f'{cell_html(c["why"])}</tr>' for i, c in enumerate(culprits[1:], 2))
        out.append('<h3>Next culprits</h3><p class="small">Ordered by the logical clock (MPI collectives '
                   'the process entered before the trace left the normal path); main threads before the '
                   'processes that died, those before worker threads.</p>'
                   '<table class="plain culprits"><thead><tr><th>#</th><th>rank</th><th>thread</th><th>clock</th>'
                   f'<th>status</th><th>why</th></tr></thead><tbody>{body}</tbody></table>')
    if int(v.get("candidates") or 0) > len(culprits):
        out.append(f'<p class="small">{esc(plural(int(v["candidates"]) - len(culprits), "more candidate"))} '
                   f'not listed (the verdict keeps the first {len(culprits)}).</p>')
    if v["died"]:
        body = "".join(f'<tr data-rank="{int(d["rank"])}" data-thread="{int(d["thread"])}"><td class="num">'
                       f'{int(d["rank"])}</td><td class="num">{int(d["thread"])}</td>{cell_html(d["how"])}</tr>'
                       for d in v["died"])
        out.append('<h3>Processes that died</h3><p class="small">The first to die first.</p>'
                   '<table class="plain died"><thead><tr><th>rank</th><th>thread</th><th>how</th></tr></thead>'
                   f'<tbody>{body}</tbody></table>')
    if v["victims"]:
        out.append('<h3>Stopped, waiting (victims)</h3>' + _victims_table(v["victims"][:VICTIMS_SHOWN]))
        if len(v["victims"]) > VICTIMS_SHOWN:
            out.append(f'<p class="small">{esc(plural(len(v["victims"]) - VICTIMS_SHOWN, "more group"))} in '
                       f'<a href="#hang-h">the hang section</a>.</p>')
    out.append("</section>")
    return "".join(out)


def _victims_table(victims):
    body = "".join(f'<tr class="{"main" if g["main"] else "workers"}">{cell_html(g["stack"], cls="stack")}'
                   f'<td class="num">{int(g["count"])}</td>{cell_html(g["members"])}'
                   f'<td>{"main threads" if g["main"] else "worker threads"}</td></tr>' for g in victims)
    return ('<table class="plain victims"><thead><tr><th>stopped in</th><th>traces</th><th>members</th>'
            f'<th>threads</th></tr></thead><tbody>{body}</tbody></table>')


# --------------------------------------------------------------------------- hang, divergences

def _loops_text(loops, shown=None):
    """Every loop level of a divergence, outermost first: ``iteration 7 of 20 of [a b c]
    in main``; ``shown``: labels of each body before an ellipsis (None: all)."""
    def body(b):
        return " ".join(b if shown is None or len(b) <= shown else b[:shown] + ["\u2026"])
    return "; ".join(f"iteration {i} of {n} of [{body(b)}] in {frame}" for frame, b, i, n in loops)


def _loops_cell(loops, limit=200):
    short, full = _loops_text(loops, 3), _loops_text(loops)
    title = f' title="{esc(shorten(full, 4000))}"' if short != full or len(short) > limit else ""
    return f"<td{title}>{esc(shorten(short, limit))}</td>"


def _divergence_order(d):
    """Traces that left the normal path first, by logical clock, main threads first."""
    return (not d.left_path, float("inf") if d.clock is None else d.clock, d.key[1] != 0, d.key)


def _divergence_rows(divergences, culprits):
    rows = []
    for d in divergences:
        rank, thread = d.key
        cls = "culprit" if d.key in culprits else ""
        rows.append(f'<tr class="{cls}" data-rank="{int(rank)}" data-thread="{int(thread)}" '
                    f'data-status="{esc(d.status)}"><td class="num">{int(rank)}</td><td class="num">{int(thread)}</td>'
                    f'<td>{esc(d.status)}</td><td class="num">{int(d.position)}</td>'
                    f'<td class="num">{esc(_clock(d.clock))}</td>{cell_html(" ".join(d.normal), 160)}'
                    f'{cell_html(" ".join(d.faulty), 160)}{cell_html(" > ".join(d.call_path), 160)}'
                    f'{_loops_cell(d.loops)}{cell_html((d.stack_end or "(no open call)") if d.stopped else "", 160)}</tr>')
    return rows


def divergences_html(rep, shown=DIVERGENCE_ROWS, more=DIVERGENCE_MORE):
    """The per-trace divergences table: the first ``shown`` rows, the next ``more`` behind a
    ``<details>``, a note for the rest; "" when no trace differs."""
    ds = sorted(rep.divergences, key=_divergence_order)
    if not ds:
        return ""
    culprits = set(rep.culprit_keys)
    head = ('<thead><tr><th>rank</th><th>thread</th><th>status</th><th>position</th><th>clock</th>'
            '<th>normal run called</th><th>faulty run called</th><th>call path</th><th>loops (iteration of)</th>'
            '<th>stopped in</th></tr></thead>')
    rows = _divergence_rows(ds[:shown + more], culprits)
    out = [f'<p class="small">{esc(plural(len(ds), "trace"))} differ from their normal twins: where each '
           f'first leaves it (position: event index; clock: MPI collectives its process entered before). '
           f'Traces that left the normal path first, by clock; then those that only stopped on it. '
           f'The verdict\'s culprits are highlighted.</p>',
           f'<table id="divergences" class="plain divergences">{head}<tbody>{"".join(rows[:shown])}</tbody></table>']
    if len(rows) > shown:
        out.append(f'<details class="more-divergences"><summary>{esc(plural(len(rows) - shown, "more trace"))}'
                   f'</summary><table class="plain divergences">{head}<tbody>{"".join(rows[shown:])}</tbody>'
                   f'</table></details>')
    if len(ds) > len(rows):
        out.append(f'<p class="small">{esc(plural(len(ds) - len(rows), "more trace"))} not shown (see '
                   f'/divergence in the results file).</p>')
    return "".join(out)


def hang_html(rep):
    """The hang section when the faulty run stopped early: the stopped traces by the calls
    they stopped in (the verdict's victims, and where its culprits stopped), the hang
    view's progress and the per-trace divergences; "" when nothing stopped."""
    from .text import hang_text
    stopped = rep.stopped
    progress = hang_text(rep.results)
    if not stopped and not (rep.verdict is None and progress):
        return ""
    out = ['<section id="hang" class="hang"><h2 id="hang-h">Where the faulty run stopped</h2>']
    if stopped:
        out.append(f'<p>The faulty run stopped early: {esc(plural(len(stopped), "trace"))} of '
                   f'{int(rep.present[1].sum())} stopped before their normal twins did (hung, killed or died).</p>')
    if rep.verdict and rep.verdict["victims"]:
        out.append('<h3>Stopped traces by the calls they stopped in</h3><p class="small">Traces that only '
                   'stopped on the normal path (waiting for others), grouped STAT-style; main threads apart from '
                   'worker threads.</p>' + _victims_table(rep.verdict["victims"]))
    named = set(rep.culprit_keys)
    own = [d for d in stopped if d.key in named]
    if own:
        out.append('<p class="culprits-stopped">The culprits stopped in: ' + "; ".join(
            f"rank {int(d.key[0])} thread {int(d.key[1])}: {esc(shorten(d.stack_end or '(no open call)', 200))}"
            for d in sorted(own, key=lambda d: rep.culprit_keys.index(d.key))[:10]) + ".</p>")
    if progress:
        out.append(f'<details class="hang-view"{" open" if rep.verdict is None else ""}><summary>Progress of the '
                   f'stopped traces (calls entered, as a share of the normal run\'s)</summary>'
                   f'<pre class="hang-progress">{html_lines(progress)}</pre></details>')
    table = divergences_html(rep)
    if table:
        out.append('<h3>Where each trace differs</h3>' + table)
    out.append("</section>")
    return "".join(out)


def changes_html(rep):
    """The per-trace divergences of a run that did not stop; "" when it stopped (the hang
    section has them) or no trace differs."""
    if rep.stopped or not rep.divergences:
        return ""
    return ('<section id="changes" class="changes"><h2 id="divergences-h">Where each trace differs</h2>'
            + divergences_html(rep) + "</section>")


# --------------------------------------------------------------------------- summary

def ticket_text(rep, diffs):
    """The same ticket summary as ``analyze`` prints, from the stored results."""
    from .text import ticket_summary
    if not rep.rows and not rep.no_difference:
        head = f"Verdict: {rep.verdict['summary']}.\n" if rep.verdict else ""
        return head + "The results file has no ranking rows."
    return ticket_summary(rep.results, [(key, combo, blocks, bodies) for key, combo, blocks, bodies, primary in diffs
                                        if primary])
