"""The trade-off answer: recovery after a power cut against what the journal costs.

Each configuration (a filesystem, journal mode and placement on one device
profile) is a point: its overhead against the non-journalled baseline on the
same workload and device (Fieller interval) and its recovery time after live
power cuts (mount replay plus fsck: the 90th percentile, with a
distribution-free interval between order statistics). Lower is better on both
axes.

- The *Pareto front* is the configurations no other one beats on both point
  estimates: for the throughput given up, nothing recovers faster.
- A configuration is *dominated with certainty* when another one's intervals
  lie wholly below its own on both axes; only then is it "never worth it".
- Where intervals overlap on an axis the two configurations *cannot be told
  apart* on it, and the answer says so instead of ranking them.

The intervals say what they cover: a p90 from 5 power cuts is bounded by the
fastest and slowest recovery with 41% coverage at best (29 cuts give 95%),
and the words carry that coverage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Config:
    """One configuration's two figures with their intervals (None: unbounded or unknown)."""

    name: str
    profile: str  # the data disk's device profile ("" without one)
    overhead_pct: float
    overhead_low: float | None
    overhead_high: float | None
    recovery_p90_s: float
    recovery_low: float
    recovery_high: float
    recovery_coverage: float  # what the recovery interval covers (see the module docstring)
    recovery_median_s: float
    recovery_max_s: float
    trials: int
    baseline: bool = False  # the non-journalled reference (overhead 0 by definition)

    def to_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__slots__}


def beats(a: Config, b: Config) -> bool:
    """``a`` is no worse than ``b`` on both point estimates and better on one."""
    return (a.overhead_pct <= b.overhead_pct and a.recovery_p90_s <= b.recovery_p90_s
            and (a.overhead_pct < b.overhead_pct or a.recovery_p90_s < b.recovery_p90_s))


def beats_with_certainty(a: Config, b: Config) -> bool:
    """``a``'s intervals lie wholly below ``b``'s on both axes (unbounded: never)."""
    if None in (a.overhead_high, b.overhead_low):
        return False
    assert a.overhead_high is not None and b.overhead_low is not None
    return a.overhead_high < b.overhead_low and a.recovery_high < b.recovery_low


def apart(a: Config, b: Config) -> bool:
    """Whether the two can be told apart on at least one axis (intervals that do not
    overlap)."""
    over = (a.overhead_high is not None and b.overhead_low is not None
            and b.overhead_high is not None and a.overhead_low is not None
            and (a.overhead_high < b.overhead_low or b.overhead_high < a.overhead_low))
    rec = a.recovery_high < b.recovery_low or b.recovery_high < a.recovery_low
    return over or rec


def front(configs: Sequence[Config]) -> list[Config]:
    """The configurations nothing beats on both point estimates, by overhead."""
    return sorted((c for c in configs if not any(beats(o, c) for o in configs if o is not c)),
                  key=lambda c: (c.overhead_pct, c.recovery_p90_s))


def dominators(c: Config, configs: Sequence[Config]) -> list[Config]:
    """The configurations that beat ``c`` with certainty."""
    return [o for o in configs if o is not c and beats_with_certainty(o, c)]


def _figures(c: Config) -> str:
    over = ("the baseline" if c.baseline else
            f"{c.overhead_pct:+.1f}% overhead"
            + (f" [{c.overhead_low:+.1f}, {c.overhead_high:+.1f}]"
               if c.overhead_low is not None and c.overhead_high is not None
               else " (interval unbounded)"))
    return (f"recovers in {c.recovery_p90_s:.2f} s at p90 "
            f"[{c.recovery_low:.2f}, {c.recovery_high:.2f}] at {over}")


def answer(configs: Sequence[Config], *, profile: str, workload: str) -> list[str]:
    """The answer in words for one device profile, from the numbers."""
    if not configs:
        return [f"on {profile or 'plain disks'}: no configuration has both figures"]
    on = f"on {profile or 'plain disks'} with {workload}"
    best = front(configs)
    lines = [f"{on}: " + "; ".join(f"{c.name} {_figures(c)}" for c in best)
             + (" (the Pareto front: nothing recovers faster for the throughput they give up)"
                if len(best) > 1 else " (nothing else is as fast for its cost)")]
    for i, c in enumerate(best):
        twins = [o.name for o in best[i + 1:] if not apart(c, o)]
        if twins:
            lines.append(f"{c.name} and {', '.join(twins)} cannot be told apart: their "
                         "intervals overlap on both axes, so neither is ranked above the other")
    for c in configs:
        if c in best:
            continue
        by = dominators(c, configs)
        if by:
            lines.append(f"{c.name} is dominated by {', '.join(o.name for o in by)}: it "
                         f"recovers slower and costs more, beyond both intervals")
        else:
            near = [o.name for o in best if not apart(o, c)]
            lines.append(f"{c.name} ({_figures(c)}) is off the front on the point estimates, "
                         + (f"but cannot be told apart from {', '.join(near)}: the intervals "
                            "overlap on both axes" if near else
                            "though no configuration beats it on both intervals"))
    coverage = min(c.recovery_coverage for c in configs)
    trials = min(c.trials for c in configs)
    lines.append(f"recovery intervals are order statistics around the p90 of {trials} or more "
                 f"power cuts and cover it with {100 * coverage:.0f}% confidence or more"
                 + ("" if coverage >= 0.95 else " (29 cuts give 95%)"))
    return lines
