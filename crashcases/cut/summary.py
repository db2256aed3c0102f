"""What a power-cut run found: each trial as the host records it, and a summary per target.

The summary gives recovery time as median, 90th percentile and maximum.
The percentile is computed here rather than with numpy, whose import
alone costs a tenth of a second, with the same arithmetic as
``numpy.percentile``'s default method, so the figures are identical.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from crashcases.check import CheckResult
from crashcases.cut.guest import CutPoint, DriveResult
from crashcases.vocabulary import Outcome, Rate, fails
from recovery.targets import Target


@dataclass
class TrialResult:
    """One trial as the host records it; a trial that hung has no drive and no check."""

    target: str
    trial: int
    point: CutPoint
    outcome: Outcome
    drive: DriveResult | None
    check: CheckResult | None
    checked_mark: str | None = None
    notes: list[str] = field(default_factory=list)
    #: A failing trial run again (cut --reruns): the outcome of each run after the first.
    reruns: list[str] = field(default_factory=list)
    #: How often it failed, the first run included (None: not run again).
    rate: Rate | None = None

    @property
    def mount_s(self) -> float | None:
        return self.check.mount_s if self.check else None

    @property
    def fsck_s(self) -> float | None:
        """Recovery by fsck: the check, plus the repair when one was needed."""
        if self.check is None or self.check.fsck_check_s is None:
            return None
        return self.check.fsck_check_s + (self.check.fsck_repair_s or 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "trial": self.trial, "point": self.point.to_dict(),
                "outcome": self.outcome.value,
                "drive": self.drive.to_dict() if self.drive else None,
                "check": self.check.to_dict() if self.check else None,
                "checked_mark": self.checked_mark, "notes": list(self.notes),
                "mount_s": self.mount_s, "fsck_s": self.fsck_s,
                "reruns": list(self.reruns),
                "rate": self.rate.to_dict() if self.rate is not None else None}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TrialResult:
        """A trial as to_dict() wrote it (results.json), for a resumed run."""
        rate = raw.get("rate")
        return cls(raw["target"], int(raw["trial"]), CutPoint.from_dict(raw["point"]),
                   Outcome(raw["outcome"]),
                   DriveResult.from_dict(raw["drive"]) if raw.get("drive") else None,
                   CheckResult.from_dict(raw["check"]) if raw.get("check") else None,
                   raw.get("checked_mark"), list(raw.get("notes", [])),
                   list(raw.get("reruns", [])),
                   Rate(int(rate["failed"]), int(rate["runs"])) if rate else None)



@dataclass(frozen=True, slots=True)
class TargetSummary:
    target: str
    trials: int
    outcomes: dict[str, int]
    failing: int
    mount_median_s: float | None
    mount_p90_s: float | None
    mount_max_s: float | None
    fsck_median_s: float | None
    fsck_max_s: float | None
    in_flight_ops_median: float | None
    in_flight_bytes_median: float | None
    post_cut_errors: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(target: Target, trials: Sequence[TrialResult]) -> TargetSummary:
    mounts = [t.mount_s for t in trials if t.mount_s is not None]
    fscks = [t.fsck_s for t in trials if t.fsck_s is not None]
    drives = [t.drive for t in trials if t.drive is not None]
    errors: Counter[str] = Counter()
    for d in drives:
        errors.update(d.post_cut_errors)
    return TargetSummary(
        target=target.name,
        trials=len(trials),
        outcomes={o.value: n for o in Outcome if (n := sum(1 for t in trials if t.outcome is o))},
        failing=sum(1 for t in trials if fails(t.outcome, target)),
        mount_median_s=statistics.median(mounts) if mounts else None,
        mount_p90_s=percentile(mounts, 90) if mounts else None,
        mount_max_s=max(mounts) if mounts else None,
        fsck_median_s=statistics.median(fscks) if fscks else None,
        fsck_max_s=max(fscks) if fscks else None,
        in_flight_ops_median=statistics.median([d.in_flight_ops for d in drives]) if drives else None,
        in_flight_bytes_median=statistics.median([d.in_flight_bytes for d in drives]) if drives else None,
        post_cut_errors=dict(sorted(errors.items())),
    )


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100), interpolated linearly between the closest ranks.

    numpy.percentile's default ("linear", Hyndman and Fan's type 7), step for
    step: position (n - 1) * q / 100, and numpy's interpolation, which for a
    weight of 1/2 or more steps back from the upper neighbour (fewer rounding
    errors near it)."""
    if not values:
        raise ValueError("percentile of no values")
    xs = sorted(values)
    position = (len(xs) - 1) * (q / 100)
    below = math.floor(position)
    if below >= len(xs) - 1:
        return float(xs[-1])
    low, high = xs[below], xs[below + 1]
    weight = position - below
    if weight >= 0.5:
        return float(high - (high - low) * (1 - weight))
    return float(low + (high - low) * weight)
