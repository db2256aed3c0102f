"""The report's figures, drawn with matplotlib (Agg) and returned as PNG bytes."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

#: Crash verdict per target -> (marker, colour) on the trade-off figure.
VERDICT_STYLE = {"ok": ("o", "tab:green"), "known": ("s", "tab:orange"),
                 "fail": ("X", "tab:red"), "none": ("D", "tab:gray")}


def png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def trade_off(panels: Sequence[Mapping[str, Any]], metric: str) -> bytes:
    """One panel per device profile: overhead against the baseline (x, Fieller interval) and
    recovery after a power cut (y: p90, its order-statistics interval); the Pareto front
    marked and joined, configurations dominated with certainty grey, the crash verdict as
    the marker."""
    fig, axes = plt.subplots(1, len(panels), figsize=(6.4 * len(panels), 4.8), squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=True):
        points = panel["points"]
        for i, p in enumerate(sorted(points, key=lambda p: p["recovery_p90_s"])):
            marker, colour = VERDICT_STYLE[p["verdict"]]
            if p["dominated_by"]:
                colour = "0.7"
            low, high = p["overhead_low"], p["overhead_high"]
            bounded = low is not None and high is not None
            xerr = ([[p["overhead_pct"] - low], [high - p["overhead_pct"]]] if bounded else None)
            yerr = [[p["recovery_p90_s"] - p["recovery_low"]],
                    [p["recovery_high"] - p["recovery_p90_s"]]]
            ax.errorbar(p["overhead_pct"], p["recovery_p90_s"], xerr=xerr, yerr=yerr,
                        fmt=marker, color=colour, ecolor=colour, capsize=4, markersize=9,
                        mfc=colour if bounded else "none",
                        markeredgewidth=2.5 if p["front"] else 1.0)
            label = p["name"] + ("" if bounded else " (overhead interval unbounded)")
            # Neighbours in recovery time alternate above and below, so close labels part.
            ax.annotate(label, (p["overhead_pct"], p["recovery_p90_s"]),
                        textcoords="offset points", xytext=(7, 5 if i % 2 else -12), fontsize=8,
                        color="0.45" if p["dominated_by"] else "black")
        best = sorted((p for p in points if p["front"]), key=lambda p: p["overhead_pct"])
        if len(best) > 1:
            ax.plot([p["overhead_pct"] for p in best], [p["recovery_p90_s"] for p in best],
                    "-", color="tab:blue", linewidth=1.2, zorder=0, label="Pareto front")
        ax.axvline(0, color="0.6", linewidth=0.8)
        ax.set_title(f"{panel['profile']}")
        ax.set_xlabel(f"overhead against the baseline, % of {metric} (95% Fieller)")
        ax.set_ylabel("recovery after a power cut, s: p90\n(bar: order-statistics interval)")
        ax.grid(alpha=0.3)
    for verdict, (marker, colour) in VERDICT_STYLE.items():
        axes[0][0].plot([], [], marker, color=colour, label=f"crash: {verdict}")
    axes[0][0].plot([], [], "o", color="0.7", label="dominated with certainty")
    axes[0][0].legend(fontsize=7, loc="best")
    fig.suptitle("Recovery time against journal overhead")
    return png(fig)


def trade_off_moves(moves: Sequence[Any], metric: str) -> bytes:
    """Each configuration's point in run A and an arrow to where it is in run B, a panel
    per device profile; red: left the Pareto front, green: joined it."""
    profiles = list(dict.fromkeys(m.profile for m in moves))
    fig, axes = plt.subplots(1, max(len(profiles), 1), figsize=(6.4 * max(len(profiles), 1), 4.8),
                             squeeze=False)
    for ax, profile in zip(axes[0], profiles, strict=False):
        for m in (m for m in moves if m.profile == profile):
            colour = "tab:red" if m.left_front else "tab:green" if m.joined_front else "0.3"
            ax.plot(*m.a, "o", color=colour, mfc="none")
            ax.annotate("", xy=m.b, xytext=m.a,
                        arrowprops={"arrowstyle": "->", "color": colour, "lw": 1.4})
            ax.annotate(m.name + (" (left the front)" if m.left_front else
                                  " (joined the front)" if m.joined_front else ""),
                        m.b, textcoords="offset points", xytext=(6, 4), fontsize=8, color=colour)
        ax.set_title(profile)
        ax.set_xlabel(f"overhead against the baseline, % of {metric}")
        ax.set_ylabel("recovery after a power cut, s (p90)")
        ax.grid(alpha=0.3)
    fig.suptitle("Trade-off, run A (hollow) to run B (arrow head)")
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
