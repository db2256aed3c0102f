"""The recall's workload plans: frozen, versioned, and said where they came from.

A plan is everything a recall decides before it looks at a kernel: the workloads in their
order (case and options), the budget per kernel, whether each workload gets a share of
what is left (equal, or by the plan's weights), and which targets an entry's kernel is checked on. A plan, once a recall
figure was reported with it, is never changed: a change is a new version. Every zoo.json
names its plan's version, so each recall figure says which workloads it measured, and
whether they were tuned on the entries measured (changed after studying those entries'
misses) or held out (frozen before the set was first run).

``tests/unit/test_zoo_plans.py`` holds each version to its digest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from framework.core.errors import ConfigError

#: No step is given less than this while the budget lasts (a guest start and a recording).
MIN_STEP_S = 60.0


def step_share(left: float, weights: Sequence[float], shares: bool = True) -> float:
    """Seconds the next workload may use, ``left`` seconds being left: its weight's part of
    what is left among the workloads still to run (``weights``, the next one first), at
    least MIN_STEP_S; what it does not use passes on. Without shares, or for the last
    workload, all that is left."""
    if not shares or len(weights) <= 1:
        return left
    return min(left, max(left * weights[0] / sum(weights), MIN_STEP_S))


@dataclass(frozen=True, slots=True)
class WorkloadPlan:
    version: str
    #: The workloads of every target, in order: (case, more options); the seed is the run's.
    workloads: tuple[tuple[str, tuple[str, ...]], ...]
    #: Checking time per kernel: an entry's targets share it; the fixed kernel has it for
    #: each target it is run on.
    budget_s: float
    #: Each workload may check for at most its share of what is left of the budget.
    shares: bool
    #: Which targets an entry's kernel is checked on: "entry", each entry's own ``targets``
    #: (the configuration whose code its fix is in, as the entry says).
    targets: str
    #: The entry sets whose misses this plan's changes were made after studying (its figure
    #: on those sets is tuned; on any other set, measured once with it first, held out).
    tuned_on: tuple[str, ...]
    #: Where each workload and rule came from, in words.
    origin: str
    #: Each workload's weight in the shares, in the workloads' order (None: equal shares).
    weights: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.weights is not None and (len(self.weights) != len(self.workloads)
                                         or min(self.weights) <= 0):
            raise ValueError(f"plan {self.version}: one positive weight per workload")

    def weights_from(self, n: int) -> tuple[float, ...]:
        """The weights of the workloads from the ``n``-th on (the next one first)."""
        return (self.weights or (1.0,) * len(self.workloads))[n:]

    def to_dict(self) -> dict[str, Any]:
        out = {"version": self.version, "workloads": [[c, list(o)] for c, o in self.workloads],
               "budget_s": self.budget_s, "shares": self.shares, "targets": self.targets,
               "tuned_on": list(self.tuned_on), "origin": self.origin}
        if self.weights is not None:  # a plan of equal shares has none (w8's digest holds)
            out["weights"] = list(self.weights)
        return out

    def digest(self) -> str:
        """What a frozen plan is held to (its origin's wording may be corrected)."""
        data = {k: v for k, v in self.to_dict().items() if k not in ("origin",)}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


#: The plan of the eighth recall of the 6.12 zoo (2026-11-27, "with data ranges"): the one
#: every recall figure until 2026-11-29 was measured with.
W8 = WorkloadPlan(
    version="w8",
    workloads=(
        ("gen:seq1", ("--max-sequences", "60", "--points", "distinct")),
        ("gen:burst", ("--points", "distinct")),
        ("gen:chain", ("--points", "distinct")),
        ("stress:400", ()),
        ("ranges:600", ()),
    ),
    budget_s=600.0,
    shares=True,
    targets="entry",
    tuned_on=("zoo-6.12",),
    origin=(
        "The first recall's workloads (gen:seq1, gen:seq2, random:400) were chosen before "
        "any bug was looked at. Every later change came after studying the 6.12 zoo's "
        "misses: gen:burst (bounded bursts without durability between operations) after "
        "the first recall; gen:seq1 sampled over its whole list (a budget had checked only "
        "its first operation kinds) and each generated sequence's setup checked once "
        "(--points distinct); gen:chain (fsync a file, change it or its names, fsync again) "
        "in place of gen:seq3 after three recalls' misses; stress:400 in place of "
        "random:400 once the oracle saw stale data; ranges:600 (data operations at offsets "
        "relative to each file's end) in place of gen:seq2, with the budget raised from 8 "
        "to 10 minutes; each entry checked only on the targets its fix's code runs in; an "
        "oracle rule (no block shows another file's data) and a confirmation of a failing "
        "state's own image on both kernels."),
)

#: The ninth plan (2026-11-29, "input coverage"): cover:600 in gen:seq1's place, first and
#: with a larger share, the rest as in w8.
W9 = replace(
    W8,
    version="w9",
    workloads=(("cover:600", ()), *W8.workloads[1:]),
    tuned_on=("zoo-6.12", "zoo-7.3"),
    origin=(
        "w8 with one change, made from the input-coverage table alone (powercut coverage: "
        "which syscall, flag, argument-partition and durability cells the workloads give "
        "each filesystem, before and within a budget), no zoo entry looked at: cover:600, "
        "a workload that walks the cells the filesystem offers in an order that touches "
        "each early, takes gen:seq1's place, first, with three times an equal share. The "
        "other four workloads are w8's, chosen after studying the 6.12 zoo's misses; the "
        "7.3 set's misses under w8 had been read before w9 was made (none of its changes "
        "came from them), so a w9 figure on either set is not held out."),
    weights=(3.0, 1.0, 1.0, 1.0, 1.0),
)

PLANS: dict[str, WorkloadPlan] = {p.version: p for p in (W8, W9)}
#: The version a recall uses unless told otherwise.
CURRENT = "w9"


def plan_named(version: str | None) -> WorkloadPlan:
    """The plan of ``version`` (default: CURRENT); an unknown one is a one-line error."""
    name = version or CURRENT
    if name not in PLANS:
        raise ConfigError(f"--plan {name!r}: no such workload plan (versions: "
                          f"{', '.join(PLANS)})")
    return PLANS[name]
