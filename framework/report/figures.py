"""The report's figures, drawn with matplotlib (Agg) and returned as PNG bytes."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

#: Crash verdict per target -> (marker, colour) on the trade-off figure.
VERDICT_STYLE = {"ok": ("o", "tab:green"), "known": ("s", "tab:orange"),
                 "fail": ("X", "tab:red"), "none": ("D", "tab:gray")}


@dataclass(frozen=True, slots=True)
class TradeOffPoint:
    target: str
    overhead_pct: float
    overhead_low_pct: float | None  # None: the interval is unbounded (Fieller)
    overhead_high_pct: float | None
    recovery_median_s: float
    recovery_p90_s: float
    recovery_max_s: float
    verdict: str  # a key of VERDICT_STYLE


def png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def trade_off(points: Sequence[TradeOffPoint], metric: str) -> bytes:
    """Overhead against the baseline (x, with its interval) and recovery time (y: median,
    a bar to the 90th percentile, a tick at the maximum); the marker is the crash verdict."""
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    unbounded = False
    for p in points:
        marker, colour = VERDICT_STYLE[p.verdict]
        low, high = p.overhead_low_pct, p.overhead_high_pct
        bounded = low is not None and high is not None
        xerr = ([[p.overhead_pct - low], [high - p.overhead_pct]]
                if low is not None and high is not None else None)
        ax.errorbar(p.overhead_pct, p.recovery_median_s, xerr=xerr,
                    yerr=[[0.0], [max(p.recovery_p90_s - p.recovery_median_s, 0.0)]],
                    fmt=marker, color=colour, ecolor=colour, capsize=4, markersize=9,
                    mfc=colour if bounded else "none")
        if not bounded:
            # No finite interval: a dotted line across the whole axis says so.
            unbounded = True
            ax.axhline(p.recovery_median_s, color=colour, linestyle=":", linewidth=1)
        ax.plot([p.overhead_pct], [p.recovery_max_s], marker="_", color=colour, markersize=14)
        label = p.target if bounded else f"{p.target} (interval unbounded)"
        ax.annotate(label, (p.overhead_pct, p.recovery_median_s), textcoords="offset points",
                    xytext=(7, 5), fontsize=9)
    for verdict, (marker, colour) in VERDICT_STYLE.items():
        ax.plot([], [], marker, color=colour, label=f"crash: {verdict}")
    if unbounded:
        ax.plot([], [], "o", mfc="none", color="0.3",
                label="hollow: overhead interval unbounded (noisy baseline)")
    ax.axvline(0, color="0.6", linewidth=0.8)
    ax.set_xlabel(f"overhead against the baseline, % of {metric} (95% Fieller interval)")
    ax.set_ylabel("recovery time after a power cut, s\n(median; bar to p90, tick at max)")
    ax.set_title("Recovery time against journal overhead")
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    return png(fig)


def distributions(groups: Mapping[str, Sequence[float]], *, title: str, ylabel: str) -> bytes:
    """Box plots with every value drawn over its box."""
    names = list(groups)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(names) + 2), 4.2))
    data = [list(groups[n]) or [float("nan")] for n in names]
    ax.boxplot(data, showfliers=False)
    for i, values in enumerate(data, 1):
        ax.scatter([i + 0.08 * ((k % 5) - 2) for k in range(len(values))], values, s=12,
                   alpha=0.6, color="tab:blue", zorder=3)
    ax.set_xticks(range(1, len(names) + 1), names, rotation=20, ha="right", fontsize=9)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    return png(fig)


def scatter(points: Mapping[str, Sequence[tuple[float, float]]], *, title: str, xlabel: str,
            ylabel: str) -> bytes:
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name, xy in points.items():
        ax.scatter([x for x, _ in xy], [y for _, y in xy], label=name, s=18)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return png(fig)


def means(rows: Sequence[tuple[str, float, float, float]], *, title: str, ylabel: str) -> bytes:
    """Bars of (name, mean, interval low, interval high)."""
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(rows) + 2), 4.2))
    names = [r[0] for r in rows]
    heights = [r[1] for r in rows]
    err = [[r[1] - r[2] for r in rows], [r[3] - r[1] for r in rows]]
    ax.bar(names, heights, yerr=err, capsize=5, color="tab:blue", alpha=0.8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.tick_params(axis="x", rotation=20)
    ax.grid(axis="y", alpha=0.3)
    return png(fig)
