"""The cost model of ``bench_real.py`` and its projection to 4,096 x 8: the steps grouped by
what their cost grows with, the least-squares fits over the real pairs, the memory line and
the projection's tables (bench_real.py measures; this module models)."""
import re
import statistics

import numpy as np

RSS_KEY = "peak_rss_mb_rank"
OUTSIDE = "outside the steps (start-up, imports, output)"
SETTING_WORD = re.compile(r"^(\d+\.\w+\.K\d+|sing\.\w+|doub\.\w+)$")     # 11.mpi.K10, doub.log10
REAL_FAULTY = ("8x2-wrongop", "8x2-hang", "27x1-wrongop", "64x1-crash", "125x1-crash", "216x1-crash")

# the projection's fit: the pairs of the target's kind (LULESH -s 4 -i 10, a crash: every event decoded, every
# trace distinct, 128-432 of them); the others fitted beside it, to show how far the coefficients move
FIT_PAIRS = REAL_FAULTY[3:]
FITS = {"the -s 4 -i 10 crashes, 64-216 ranks (the projection's)": FIT_PAIRS,
        "all six real faulty pairs": REAL_FAULTY, "the four of the earlier fits, 8-64 ranks": REAL_FAULTY[:4]}

# the model's step groups (step names without the grid setting); anything else is per trace
PER_EVENT_STEPS = ("finding traces", "inputs", "reading traces", "global ids", "divergence hashes",
                   "divergence search", "trace states", "calls and open calls", "runs compared")
PER_DISTINCT_EVENT_STEPS = ("NLR discovery", "NLR", "NLR table", "NLR loop ids", "NLR global loops",
                            "divergence context")
# since b72760a the timings also hold the run's time outside the steps: a fixed cost (c0), as before
FIXED_STEPS = ("before the analysis (imports, MPI start)", "between the steps (gathers, broadcasts, bookkeeping)")
TARGET_RANKS, TARGET_THREADS = 4096, 8


def group_steps(values, add):
    """Per-step values combined over the grid's settings: "NLR 11.mpi.K10" and
    "NLR 11.every.K10" are "NLR"."""
    groups = {}
    for key, value in values.items():
        name = " ".join(w for w in key.split() if not SETTING_WORD.match(w))
        groups[name] = add(groups[name], value) if name in groups else value
    return groups


def step_groups(stages, wall):
    """Step seconds summed over the grid's settings, and what the job spent outside the steps."""
    groups = group_steps(stages, lambda a, b: a + b)
    groups[OUTSIDE] = max(0.0, wall - sum(stages.values()))
    return groups


# ---- the model and the projection ----------------------------------------------------------------


def model_parts(row):
    """CPU seconds of one 1-rank row by model term: per event, per event of a distinct trace
    (NLR), lattice, per distinct trace (the other steps), outside the steps."""
    groups = group_steps(row["stages"], lambda a, b: a + b)
    scale = row["cpu_s"] / row["wall_s"]        # steps are timed in wall seconds: their share of the CPU time
    per_event = scale * sum(v for k, v in groups.items() if k in PER_EVENT_STEPS)
    nlr = scale * sum(v for k, v in groups.items() if k in PER_DISTINCT_EVENT_STEPS)
    lattice = scale * sum(v for k, v in groups.items() if k.startswith("lattice"))
    jsm = scale * sum(v for k, v in groups.items() if k.startswith("JSM"))
    other = scale * sum(v for k, v in groups.items() if k not in FIXED_STEPS) - per_event - nlr - lattice - jsm
    return dict(per_event=per_event, nlr=nlr, lattice=lattice, jsm=jsm, other=other,
                outside=max(0.0, row["cpu_s"] - per_event - nlr - lattice - jsm - other))


def fit(rows, pairs=FIT_PAIRS):
    """The model's coefficients from the 1-rank rows of the real faulty pairs (``pairs``)."""
    use = [r for r in rows if r["mpi_ranks"] == 1 and r["pair"] in pairs]
    if not use:
        raise RuntimeError(f"the model needs 1-rank figures of at least one of {', '.join(pairs)}")
    parts = [model_parts(r) for r in use]

    def coef(values):
        return dict(v=statistics.median(values), lo=min(values), hi=max(values))
    # one lattice step builds the normal and the faulty run's lattice of one setting
    lattice_one = max(v / 2 * r["cpu_s"] / r["wall_s"] for r in use for k, v in r["stages"].items()
                      if k.startswith("lattice 11."))
    return dict(pairs=[r["pair"] for r in use],
                a=coef([p["per_event"] / r["events"] for p, r in zip(parts, use)]),
                b=coef([p["nlr"] / r["distinct_events"] for p, r in zip(parts, use)]),
                d=coef([p["other"] / r["distinct"] for p, r in zip(parts, use)]),
                lat=coef([p["lattice"] / r["distinct"] for p, r in zip(parts, use)]),
                j=coef([p["jsm"] / r["distinct"] for p, r in zip(parts, use)]),
                lattice_one=lattice_one,
                c0=coef([p["outside"] for p in parts]))


def fit_memory(rows, pairs=FIT_PAIRS):
    """Peak RSS of one rank: per trace, a line through the synthetic 1-rank runs (many
    traces, few distinct: the copies cost per trace, not per event: 1.1 GB at 1,024 traces,
    2.1 GB at 8,192), and per event of a distinct trace in the real pairs whose traces are all
    distinct (NLRs, attributes, lattices)."""
    synth = sorted((r["traces"], r["peak_rss_mib_per_rank"][0] * 2**20) for r in rows
                   if r["mpi_ranks"] == 1 and r["pair"].startswith("synthetic"))
    distinct = [r["peak_rss_mib_per_rank"][0] * 2**20 / r["distinct_events"] for r in rows
                if r["mpi_ranks"] == 1 and r["pair"] in pairs and r["distinct"] == r["traces"]]
    per_trace = None
    if len({n for n, _ in synth}) >= 2:
        slope, base = np.polyfit([n for n, _ in synth], [m for _, m in synth], 1)
        per_trace = dict(base=float(base), slope=float(slope))
    return dict(per_trace=per_trace,
                per_distinct_event=dict(v=statistics.median(distinct), lo=min(distinct), hi=max(distinct))
                if distinct else None)


def full_model(rows, synth, pairs=FIT_PAIRS):
    """The model fitted on ``pairs`` of the real 1-rank rows, with its memory line and its
    per-trace term from the synthetic rows; None if no row of ``pairs`` was measured."""
    if not any(r["mpi_ranks"] == 1 and r["pair"] in pairs for r in rows):
        return None
    model = fit(rows, pairs)
    model["memory"] = fit_memory(rows + synth, pairs)
    model["t"] = fit_per_trace(model, synth)
    model["t_from"] = [f"{r['pair']} ({r['traces']:,} traces)" for r in synth if r["mpi_ranks"] == 1]
    return model


def memory(model, q):
    """MiB on 1 rank: the larger of the two figures (None if neither was measured)."""
    m = model["memory"]
    parts = [m["per_trace"]["base"] + m["per_trace"]["slope"] * q["traces"]] if m["per_trace"] else []
    if m["per_distinct_event"]:
        parts.append(m["per_distinct_event"]["v"] * q["distinct_events"])
    return max(parts) / 2**20 if parts else None


def terms(model, q, which="v"):
    """The model's CPU seconds by term for quantities q; which: v (medians), lo, hi.  The lattice
    term is per distinct trace, except where q says the lattices are capped (``capped_lattices``:
    each costs at most ``lattice_one``, the largest lattice measured).  ``over_class_cap``: the
    settings whose traces are all distinct have more classes than the class cap, so they get
    neither lattice nor JSMs; what is left of both terms is the settings within the cap
    (their classes are the program's shapes, a few dozen: taken as nothing here)."""
    out = dict(c0=model["c0"][which], per_event=model["a"][which] * q["events"],
               nlr=model["b"][which] * q["distinct_events"], other=model["d"][which] * q["distinct"],
               lattice=model["lat"][which] * q["distinct"], jsm=model.get("j", {}).get(which, 0.0) * q["distinct"])
    if q.get("capped_lattices"):
        out["lattice"] = min(out["lattice"], q["capped_lattices"] * model["lattice_one"])
    if q.get("over_class_cap"):
        out["lattice"] = out["jsm"] = 0.0
    out["per_trace"] = model.get("t", 0.0) * q["traces"]
    out["total"] = sum(out.values())
    return out


def fit_per_trace(model, rows):
    """t, the CPU seconds per trace (distinct or not: the .info files, the divergence context,
    the per-trace output) that the other terms miss: least squares through the origin of the
    synthetic 1-rank runs' residuals against their traces (the real pairs have too few traces
    to show it)."""
    use = [r for r in rows if r["mpi_ranks"] == 1 and r["pair"].startswith("synthetic")]
    if not use:
        return 0.0
    model = dict(model, t=0.0)
    res = np.array([r["cpu_s"] - terms(model, r)["total"] for r in use])
    n = np.array([float(r["traces"]) for r in use])
    return max(0.0, float(res @ n / (n @ n)))


def count(n):
    """12,345 or 116.35 M or 9.35 G."""
    return f"{n / 1e9:.2f} G" if n >= 1e9 else f"{n / 1e6:.2f} M" if n >= 1e6 else f"{n:,.0f}"


def seconds(s):
    return f"{s:,.0f}" if s >= 100 else f"{s:.2f}"


def markdown_projection(model, synth_rows, targets):
    def c(name, unit, scale, fmt):
        m = model[name]
        return f"{m['v'] * scale:{fmt}} {unit} | {m['lo'] * scale:{fmt}}-{m['hi'] * scale:{fmt}}"
    out = ["Cost model, 1 MPI rank: CPU s = c0 + a x events + b x events of distinct traces + (l + j + d) x distinct "
           f"traces + t x traces, fitted on the 1-rank runs of {', '.join(model['pairs'])} (each coefficient: the median over "
           "the pairs, their range beside it):", "",
           "| coefficient | steps | median | range over the pairs |", "|---|---|---|---|",
           f"| a | {', '.join(PER_EVENT_STEPS)} | {c('a', 'ns per event', 1e9, '.2f')} |",
           f"| b | {', '.join(PER_DISTINCT_EVENT_STEPS)} | {c('b', 'ns per event of a distinct trace', 1e9, '.1f')} |",
           f"| l | lattice (where capped: at most {model['lattice_one']:.2f} s a lattice, the largest measured) "
           f"| {c('lat', 'ms per distinct trace', 1e3, '.1f')} |",
           f"| j | JSMs and clustering (none where every setting of distinct traces is over the class cap) "
           f"| {c('j', 'ms per distinct trace', 1e3, '.1f')} |",
           f"| d | every other step (attributes, ...) | {c('d', 'ms per distinct trace', 1e3, '.1f')} |",
           f"| c0 | outside the steps, {' and '.join(FIXED_STEPS)} | {c('c0', 's', 1, '.2f')} |",
           f"| t | what the terms above miss per trace, distinct or not (fitted on the residuals of "
           f"{', '.join(model.get('t_from', [])) or 'no synthetic run'}) | {model.get('t', 0.0) * 1e3:.2f} ms per trace | |",
           "", "Memory, peak RSS on 1 rank: "
           + (f"{model['memory']['per_trace']['base'] / 2**20:,.0f} MiB + "
              f"{model['memory']['per_trace']['slope'] / 2**10:,.0f} KiB per trace (a line through the synthetic runs); "
              if model["memory"]["per_trace"] else "")
           + (f"{model['memory']['per_distinct_event']['v']:.1f} bytes per event where every trace is distinct "
              f"({model['memory']['per_distinct_event']['lo']:.1f}-{model['memory']['per_distinct_event']['hi']:.1f}); "
              if model["memory"]["per_distinct_event"] else "")
           + "a projection takes the larger.", "",
           "| run | MPI ranks | traces (both runs) | events | distinct traces | events of distinct traces | c0 "
           "| a x events | b x distinct events | l x distinct | j x distinct | d x distinct | t x traces "
           "| CPU s, model (low-high) | CPU s measured | wall s measured | peak RSS MiB per rank | verdict |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    rows = [(r["pair"], r, r["mpi_ranks"]) for r in synth_rows] + [(name, q, None) for name, q in targets]
    for name, q, ranks in rows:
        t, lo, hi = terms(model, q), terms(model, q, "lo"), terms(model, q, "hi")
        rss = (f"{', '.join(f'{x:,.0f}' for x in q['peak_rss_mib_per_rank'])}" if ranks
               else f"model {memory(model, q) or float('nan'):,.0f} on 1 rank")
        verdict = (f"{q['verdict']}, {q['culprit']}" + ("" if q.get("as_expected", True) else f" (expected {q['expected'][1]})")
                   if ranks else "")
        out.append(f"| {name} | {ranks or 1} | {q['traces']:,} | {count(q['events'])} | {q['distinct']:,} "
                   f"| {count(q['distinct_events'])} | {seconds(t['c0'])} | {seconds(t['per_event'])} | {seconds(t['nlr'])} "
                   f"| {seconds(t['lattice'])} | {seconds(t['jsm'])} | {seconds(t['other'])} | {seconds(t['per_trace'])} "
                   f"| {seconds(t['total'])} "
                   f"({seconds(lo['total'])}-{seconds(hi['total'])}) | {q['cpu_s']:.1f} | {q['wall_s']:.1f} | {rss} | {verdict} |"
                   if ranks else
                   f"| {name} | model, 1 | {q['traces']:,} | {count(q['events'])} | {q['distinct']:,} "
                   f"| {count(q['distinct_events'])} | {seconds(t['c0'])} | {seconds(t['per_event'])} | {seconds(t['nlr'])} "
                   f"| {seconds(t['lattice'])} | {seconds(t['jsm'])} | {seconds(t['other'])} | {seconds(t['per_trace'])} "
                   f"| {seconds(t['total'])} "
                   f"({seconds(lo['total'])}-{seconds(hi['total'])}) | | | {rss} | |")
    return out


def markdown_fits(rows, synth, checks, targets):
    """The model fitted on each set of real faulty pairs of FITS: the
    coefficients, the projections, and each real 1-rank row and synthetic check against each
    fit (residual: measured CPU s over the model's, less 1)."""
    models = {k: m for k, m in ((k, full_model(rows, synth, v)) for k, v in FITS.items()) if m}

    def c(m, key, scale, fmt):
        return f"{m[key]['v'] * scale:{fmt}} ({m[key]['lo'] * scale:{fmt}}-{m[key]['hi'] * scale:{fmt}})"
    out = ["The model fitted on each set of real pairs (medians over its pairs, their range in brackets; "
           "t and the memory line refitted for each):", "", "| | " + " | ".join(models) + " |",
           "|---|" + "---|" * len(models)]
    for key, unit, scale, fmt in (("a", "ns per event", 1e9, ".2f"), ("b", "ns per event of a distinct trace", 1e9,
                                  ".1f"), ("lat", "ms per distinct trace", 1e3, ".2f"),
                                  ("j", "ms per distinct trace", 1e3, ".2f"), ("d", "ms per distinct trace", 1e3, ".2f"),
                                  ("c0", "s", 1, ".2f")):
        out.append(f"| {key.replace('lat', 'l')}, {unit} | " + " | ".join(c(m, key, scale, fmt)
                                                                          for m in models.values()) + " |")
    out.append("| t, ms per trace | " + " | ".join(f"{m['t'] * 1e3:.2f}" for m in models.values()) + " |")
    out.append("| memory, bytes per event where every trace is distinct | " + " | ".join(
        c(m["memory"], "per_distinct_event", 1, ".2f") if m["memory"]["per_distinct_event"] else "-"
        for m in models.values()) + " |")
    for name, q in targets:
        out.append(f"| {name}: CPU s (low-high), GiB on 1 rank | " + " | ".join(
            f"{seconds(terms(m, q)['total'])} ({seconds(terms(m, q, 'lo')['total'])}-"
            f"{seconds(terms(m, q, 'hi')['total'])}), {(memory(m, q) or float('nan')) / 1024:.1f}"
            for m in models.values()) + " |")
    use = [r for r in rows if r["mpi_ranks"] == 1 and r["pair"] in REAL_FAULTY] + [r for r in checks
                                                                                if r["mpi_ranks"] == 1]
    out += ["", "Each 1-rank row against each fit: the model's CPU s and the residual (measured / model - 1); "
            "* = a row that fit is made on (the synthetic rows also fit t):", "",
            "| row | events | distinct traces | CPU s measured | " + " | ".join(models) + " |",
            "|---|---|---|---|" + "---|" * len(models)]
    for r in use:
        cells = [f"{terms(m, r)['total']:.2f}, {r['cpu_s'] / terms(m, r)['total'] - 1:+.0%}"
                 + (" *" if r["pair"] in FITS[k] else "") for k, m in models.items()]
        out.append(f"| {r['pair']} | {count(r['events'])} | {r['distinct']:,} of {r['traces']:,} | {r['cpu_s']:.2f} | "
                   + " | ".join(cells) + " |")
    return out
