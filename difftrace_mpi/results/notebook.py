"""A ``Results`` in a notebook: HTML, the verdict first (``Results._repr_html_``)."""
from ..escape import html_text
from .tables import CULPRIT_COLUMNS

REPR_CULPRITS = 5         # culprits a notebook shows
REPR_NOTES = 5            # notes it lists


def html(results):
    """The verdict first (kind, confidence, the first culprits), then where to look next."""
    v = results.verdict or {}
    culprits = v.get("culprits", [])[:REPR_CULPRITS]
    cells = lambda c: "".join(f"<td>{html_text('' if c.get(k) is None else c.get(k))}</td>"  # noqa: E731
                              for k in CULPRIT_COLUMNS)
    table = ("<table><thead><tr>" + "".join(f"<th>{k}</th>" for k in CULPRIT_COLUMNS) + "</tr></thead><tbody>"
             + "".join(f"<tr>{cells(c)}</tr>" for c in culprits) + "</tbody></table>") if culprits else ""
    confidence = v.get("confidence") or {}
    against = html_text(results.normal_path) if results.normal_path else "its own ranks and time steps (no normal run)"
    notes = "".join(f"<li>{html_text(n)}</li>" for n in results.notes[:REPR_NOTES])
    return (f'<div class="difftrace-results"><p><b>Verdict: {html_text(v.get("kind", "none written"))}</b>'
            + (f' (confidence {html_text(confidence.get("level"))})' if confidence else "")
            + f"</p><p>{html_text(v.get('summary', ''))}</p>{table}"
            f"<p>{html_text(results.faulty_path)} against {against}: {len(results.objects)} traces, "
            f"{len(results.combos)} settings, {len(results.rows)} ranking rows. More: <code>culprits_table()</code>, "
            "<code>divergence_table()</code>, <code>hang_table()</code>, <code>ranking_table()</code>, "
            "<code>events(rank, thread)</code>, <code>difftrace_mpi.diffnlr(r, rank, thread)</code>.</p>"
            + (f"<details><summary>{len(results.notes)} notes</summary><ul>{notes}</ul></details>" if notes else "")
            + "</div>")
