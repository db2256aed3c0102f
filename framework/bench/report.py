"""Plain-text tables of framework.core.stats results, laid out as in Jain's examples.

Terminal summaries, logs and issue notes use these; the HTML report renders
its own tables from the same result objects.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from framework.core.stats import FactorialDesign, Summary


def _fmt(value: float | None, digits: int = 4) -> str:
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
