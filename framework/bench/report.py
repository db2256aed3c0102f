"""A bench run in plain text and JSON, and plain-text tables of the statistics' results
(summaries, ANOVA, effects) laid out as in Jain's examples.

The terminal report, logs and issue notes use these; the HTML report renders
its own tables from the same result objects.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from framework.bench import design as factorial_design
from framework.bench.analysis import BenchAnalysis
from framework.bench.engine import BenchRun, BenchState, Sample, design_cells
from framework.bench.task import TIMING_METRICS
from framework.core.factorial import FactorialDesign
from framework.core.stats import Interval, Summary, summarize


def _fmt(value: float | None, digits: int = 4) -> str:
    """A number in Jain's tables: ``digits`` decimals (significant digits when very large or
    very small)."""
    if value is None:
        return "-"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value != 0 and (abs(value) >= 1e6 or abs(value) < 10 ** (-digits)):
        return f"{value:.{digits}g}"
    return f"{value:.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(
            h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths))
        )
    ]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))
            )
        )
    return "\n".join(line.rstrip() for line in lines)


def format_summaries(summaries: Mapping[str, Summary], level: float = 0.95, unit: str = "") -> str:
    """One column per sample, one row per index (Jain's summary of observations)."""
    names = list(summaries)
    pct = f"{100 * level:g}%"
    u = f" [{unit}]" if unit else ""
    fields: list[tuple[str, list[str]]] = [
        ("n", [str(s.n) for s in summaries.values()]),
        (f"mean{u}", [_fmt(s.mean) for s in summaries.values()]),
        (f"{pct} CI low", [_fmt(s.ci(level).low) for s in summaries.values()]),
        (f"{pct} CI high", [_fmt(s.ci(level).high) for s in summaries.values()]),
        ("median", [_fmt(s.median) for s in summaries.values()]),
        ("geometric mean", [_fmt(s.geometric_mean) for s in summaries.values()]),
        ("harmonic mean", [_fmt(s.harmonic_mean) for s in summaries.values()]),
        ("stdev", [_fmt(s.stdev) for s in summaries.values()]),
        ("CoV", [_fmt(s.cov) for s in summaries.values()]),
        ("skewness", [_fmt(s.skewness) for s in summaries.values()]),
        ("SIQR", [_fmt(s.siqr) for s in summaries.values()]),
        ("min", [_fmt(s.min) for s in summaries.values()]),
        ("max", [_fmt(s.max) for s in summaries.values()]),
    ]
    return _table(["", *names], [[label, *vals] for label, vals in fields])


def format_anova(design: FactorialDesign) -> str:
    """The ANOVA table: SS, % of variation, D.O.F., mean square, F, F-crit, p."""
    pct = f"{100 * design.level:g}%"
    header = [
        "component",
        "sum of squares",
        "% variation",
        "dof",
        "mean square",
        "F",
        f"F-crit ({pct})",
        "p",
    ]
    rows = [
        ["SSY", _fmt(design.ss_y), "", str(design.n_observations), "", "", "", ""],
        ["SS0", _fmt(design.ss_0), "", "1", "", "", "", ""],
        ["SST", _fmt(design.ss_total), "100.00", str(design.n_observations - 1), "", "", "", ""],
    ]
    for t in design.terms:
        rows.append(
            [
                t.name,
                _fmt(t.sum_sq),
                f"{t.percent:.2f}",
                str(t.df),
                _fmt(t.mean_sq),
                _fmt(t.f, 2),
                _fmt(t.f_crit, 2),
                _fmt(t.p_value, 3),
            ]
        )
    rows.append(
        [
            "errors",
            _fmt(design.ss_error),
            f"{design.error_percent:.2f}",
            str(design.df_error),
            _fmt(design.mean_sq_error),
            "",
            "",
            "",
        ]
    )
    return _table(header, rows)


def format_effects(design: FactorialDesign) -> str:
    """Every effect with its standard deviation and confidence interval."""
    pct = f"{100 * design.level:g}%"
    rows = [
        [
            "mean",
            _fmt(design.grand_mean),
            _fmt(design.grand_mean_stdev),
            _fmt(design.grand_mean_ci.low),
            _fmt(design.grand_mean_ci.high),
        ]
    ]
    for e in design.effects:
        label = ", ".join(f"{f}={lv}" for f, lv in zip(e.factors, e.levels))
        rows.append([label, _fmt(e.value), _fmt(e.stdev), _fmt(e.ci.low), _fmt(e.ci.high)])
    return _table(["parameter", "effect", "stdev", f"{pct} low", f"{pct} high"], rows)


def _num(value: float | None, digits: int = 4) -> str:
    """A number in the run's report and progress lines: about ``digits`` significant digits,
    at most four decimals."""
    if value is None or math.isnan(value):
        return "-"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    magnitude = abs(value)
    if magnitude != 0 and (magnitude >= 1e6 or magnitude < 1e-3):
        return f"{value:.{digits}g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(magnitude))) if magnitude else 1
    return f"{value:.{min(decimals, 4)}f}"


def _pct(value: float) -> str:
    return f"{100 * value:+.1f}%"


def format_means(a: BenchAnalysis) -> str:
    pct = f"{100 * a.config.level:g}%"
    header = ["metric", "unit", *a.config.targets]
    rows = []
    for info in a.metrics:
        row = [info.name + (" *" if info.name == a.primary.name else ""), info.unit]
        for target in a.config.targets:
            c = a.cell(target, info.name)
            if c.summary is None:
                row.append(f"n={len(c.values)}")
            else:
                ci = c.summary.ci(a.config.level)
                row.append(f"{_num(c.summary.mean)} [{_num(ci.low)}, {_num(ci.high)}]")
        rows.append(row)
    title = (f"Mean and {pct} confidence interval of the mean (t, n-1 dof) per target; "
             f"* primary metric")
    return title + "\n" + _table(header, rows)


def format_overheads(a: BenchAnalysis) -> str:
    base = a.config.baseline_target
    others = [t for t in a.config.targets if t != base]
    pct = f"{100 * a.config.level:g}%"
    header = ["metric", "better", *others]
    rows = []
    for info in a.metrics:
        row = [info.name + (" *" if info.name == a.primary.name else ""),
               "higher" if info.higher_is_better else "lower"]
        for target in others:
            o = a.overhead_of(target, info.name)
            if o.overhead is None:
                row.append("-")
            else:
                ov = o.overhead
                mark = "" if ov.significant else " n.s."
                row.append(f"{_pct(ov.overhead)} [{_pct(ov.ci.low)}, {_pct(ov.ci.high)}]{mark}")
        rows.append(row)
    how = ("Fieller's, paired round by round" if a.config.blocked
           else "Fieller's, the samples independent")
    title = (f"Overhead against {base} with its {pct} interval ({how}); positive: the target "
             f"is worse (loses throughput, or takes longer); n.s.: the interval contains 0")
    notes = sorted({f"  {o.target} {o.metric}: {o.error}" for o in a.overheads if o.error})
    return title + "\n" + _table(header, rows) + ("\n" + "\n".join(notes) if notes else "")


def format_factorial(a: BenchAnalysis) -> str:
    """A multi-factor run: the ANOVA with interactions, each term's share, main effects."""
    pct = f"{100 * a.config.level:g}%"
    metric = next((f for f in a.config.factors if f.name == factorial_design.METRIC), None)
    response = "each metric's value" if metric is not None else \
        f"{a.primary.name} [{a.primary.unit}]"
    names = factorial_design.design_factors(design_cells(a.config), a.config.factors)
    d = a.design
    if d is None:
        return (f"Full factorial design over {', '.join(names) or 'nothing'} for {response}"
                f"\n  no analysis: {a.design_error}")
    factors = ", ".join(f"{f} ({len(lv)} levels)" for f, lv in zip(d.factors, d.levels, strict=True))
    lines = [f"Full factorial design for {response}: factors {factors}, "
             f"{a.design_replications} replications per cell", format_anova(d)]
    for t in d.terms:
        verdict = "significant" if t.significant else "not significant"
        lines.append(f"  {t.name}: {t.percent:.1f}% of the variation, F = {_num(t.f)}, "
                     f"p = {t.p_value:.3g}: {verdict} at {pct}")
    lines.append(f"  errors: {d.error_percent:.1f}%")
    lines.append(f"main effects (level mean - grand mean {_num(d.grand_mean)}):")
    rows = [[e.factors[0], str(e.levels[0]), _num(e.value), f"[{_num(e.ci.low)}, {_num(e.ci.high)}]"]
            for f in d.factors for e in d.effects_of(f)]
    lines.append(_table(["factor", "level", "effect", f"{pct} interval"], rows))
    return "\n".join(lines)


def format_design(a: BenchAnalysis) -> str:
    if a.config.factors:
        return format_factorial(a)
    pct = f"{100 * a.config.level:g}%"
    head = (f"One-factor design for {a.primary.name} [{a.primary.unit}]: factor target "
            f"({len(a.config.targets)} levels), {a.design_replications} replications each")
    if a.design is None:
        return head + f"\n  no analysis: {a.design_error}"
    d = a.design
    term = d.term("target")
    verdict = ("the targets differ" if term.significant else
               "no significant difference between the targets")
    lines = [
        head,
        format_anova(d),
        f"target explains {term.percent:.1f}% of the variation, errors {d.error_percent:.1f}%; "
        f"F = {_num(term.f)} {'>' if term.significant else '<='} F-crit({pct}) = {_num(term.f_crit)}"
        f", p = {term.p_value:.3g}: {verdict} at {pct}",
        "effects (target mean - grand mean " + _num(d.grand_mean) + "):",
    ]
    rows = [[", ".join(map(str, e.levels)), _num(e.value), f"[{_num(e.ci.low)}, {_num(e.ci.high)}]"]
            for e in d.effects_of("target")]
    lines.append(_table(["target", "effect", f"{pct} interval"], rows))
    return "\n".join(lines)


def format_report(run: BenchRun, a: BenchAnalysis) -> str:
    c = run.config
    kept = [s for s in run.samples if not s.trial.warmup]
    counts = {t: sum(1 for s in kept if s.trial.target == t) for t in c.targets}
    reps = (f"{min(counts.values())}" if len(set(counts.values())) == 1
            else ", ".join(f"{t}: {n}" for t, n in counts.items()))
    duration = "" if c.duration_s is None else f", {c.duration_s} s a repetition"
    header = (f"powercut bench: {c.workload} at {c.scale} scale{duration}; "
              f"repetitions per target: {reps}"
              f"{'; first trial of each target discarded (warm-up)' if c.warmup else ''}; "
              f"{'rounds of every target, each' if c.blocked else 'run order'} shuffled with seed "
              f"{c.seed}; wall time {run.wall_s:.1f} s")
    if run.host_load is not None:
        header += (f"\nhost load average {run.host_load[0]:.2f} before, {run.host_load[1]:.2f} after "
                   f"({os.cpu_count()} CPUs; a busy host slows an emulated guest)")
    order = "order: " + " ".join(
        f"{s.trial.target}{'(w)' if s.trial.warmup else ''}" for s in run.samples)
    timing = ("timings: run_s = workload wall time, umount_s = unmount (writes back what the "
              "workload left dirty), durable_s = run_s + umount_s; mkfs and mount are not counted")
    kernel = sorted({s.result.kernel for s in run.samples})
    opts = {s.result.target: s.result.mount_options for s in run.samples}
    env = f"kernel {', '.join(kernel)}; mount options: " + "; ".join(f"{t}: {o}" for t, o in opts.items())
    return "\n\n".join([header + "\n" + order + "\n" + env, format_means(a), timing,
                        format_overheads(a), format_design(a)]) + "\n"


def report_json(run: BenchRun, a: BenchAnalysis) -> dict[str, Any]:
    c = run.config
    level = c.level

    def interval(i: Interval) -> list[float]:
        return [i.low, i.high]

    means: dict[str, dict[str, Any]] = {}
    for cell in a.cells:
        entry: dict[str, Any] = {"n": len(cell.values), "values": list(cell.values),
                                 "reps": list(cell.reps)}
        if cell.summary is not None:
            s = cell.summary
            entry.update(mean=s.mean, stdev=s.stdev, cov=s.cov, median=s.median,
                         ci=interval(s.ci(level)))
        means.setdefault(cell.metric, {})[cell.target] = entry
    overheads: dict[str, dict[str, Any]] = {}
    for o in a.overheads:
        item: dict[str, Any] = {"error": o.error} if o.overhead is None else {
            "overhead": o.overhead.overhead, "ci": interval(o.overhead.ci),
            "ratio": o.overhead.ratio, "significant": o.overhead.significant,
            "pairs": o.overhead.pairs}
        overheads.setdefault(o.metric, {})[o.target] = item
    design: dict[str, Any] | None = None
    if a.design is not None and c.factors:
        design = {
            "replications": a.design_replications, "factors": list(a.design.factors),
            "ss_total": a.design.ss_total, "ss_error": a.design.ss_error,
            "percent_error": a.design.error_percent, "df_error": a.design.df_error,
            "terms": [{"term": list(t.factors), "ss": t.sum_sq, "percent": t.percent, "df": t.df,
                       "f": t.f, "f_crit": t.f_crit, "p": t.p_value, "significant": t.significant}
                      for t in a.design.terms],
            "effects": [{"factors": list(e.factors), "levels": [str(lv) for lv in e.levels],
                         "effect": e.value, "ci": interval(e.ci)} for e in a.design.effects],
        }
    elif a.design is not None:
        term = a.design.term("target")
        design = {
            "replications": a.design_replications,
            "ss_total": a.design.ss_total, "ss_target": term.sum_sq, "ss_error": a.design.ss_error,
            "percent_target": term.percent, "percent_error": a.design.error_percent,
            "f": term.f, "f_crit": term.f_crit, "p": term.p_value, "significant": term.significant,
            "df_target": term.df, "df_error": a.design.df_error,
            "effects": {str(e.levels[0]): {"effect": e.value, "ci": interval(e.ci)}
                        for e in a.design.effects_of("target")},
        }
    return {
        "workload": c.workload, "scale": str(c.scale), "duration_s": c.duration_s,
        "targets": list(c.targets),
        "baseline": c.baseline_target, "seed": c.seed, "warmup": c.warmup, "blocked": c.blocked,
        "until_ci_pct": c.until_ci_pct, "max_reps": c.max_reps, "level": level,
        "primary": a.primary.name, "wall_s": run.wall_s, "host_load": run.host_load,
        "units": {m.name: m.unit for m in a.metrics},
        "higher_is_better": {m.name: m.higher_is_better for m in a.metrics},
        "order": [{"seq": s.trial.seq, "target": s.trial.target, "rep": s.trial.rep,
                   "warmup": s.trial.warmup, "wall_s": s.wall_s} for s in run.samples],
        "means": means, "overhead": overheads, "anova": design,
        "design_error": a.design_error,
        "timing_metrics": list(TIMING_METRICS),
    }


def print_progress(sample: Sample, state: BenchState, stream: Any = None) -> None:
    """One plain line per trial on stderr: target, rep, the primary metric so far, ETA."""
    out = stream or sys.stderr
    primary = state.primary or ""
    t = sample.trial
    m = next((x for x in sample.result.metrics if x.name == primary), None)
    values = state.kept(primary).get(t.target, [])
    so_far = ""
    if len(values) >= 2:
        s = summarize(values)
        so_far = f" (mean {_num(s.mean)} +-{100 * s.half_width_ratio(state.config.level):.1f}%, n={s.n})"
    eta = state.eta_s()
    eta_text = "?" if math.isnan(eta) else f"{eta:.0f} s"
    kind = "warm-up" if t.warmup else f"rep {t.rep}"
    value = "-" if m is None or m.value is None else _num(m.value)
    unit = "" if m is None else m.unit
    print(f"[{len(state.samples)}/{state.planned}] {t.target} {kind}: {primary} {value} {unit}"
          f"{so_far} in {sample.wall_s:.1f} s; ETA {eta_text}", file=out, flush=True)
