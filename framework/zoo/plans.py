"""The recall's workload plans: frozen, versioned, and said where they came from.

A plan is everything a recall decides before it looks at a kernel: the workloads in their
order (case and options), the budget per kernel, whether each workload gets an equal share
of what is left, and which targets an entry's kernel is checked on. A plan, once a recall
figure was reported with it, is never changed: a change is a new version. Every zoo.json
names its plan's version, so each recall figure says which workloads it measured, and
whether they were tuned on the entries measured (changed after studying those entries'
misses) or held out (frozen before the set was first run).

``tests/unit/test_zoo_plans.py`` holds each version to its digest.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from framework.core.errors import ConfigError


@dataclass(frozen=True, slots=True)
class WorkloadPlan:
    version: str
    #: The workloads of every target, in order: (case, more options); the seed is the run's.
    workloads: tuple[tuple[str, tuple[str, ...]], ...]
    #: Checking time per kernel: an entry's targets share it; the fixed kernel has it for
    #: each target it is run on.
    budget_s: float
    #: Each workload may check for at most an equal share of what is left of the budget.
    shares: bool
    #: Which targets an entry's kernel is checked on: "entry", each entry's own ``targets``
    #: (the configuration whose code its fix is in, as the entry says).
    targets: str
    #: The entry sets whose misses this plan's changes were made after studying (its figure
    #: on those sets is tuned; on any other set, measured once with it first, held out).
    tuned_on: tuple[str, ...]
    #: Where each workload and rule came from, in words.
    origin: str

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "workloads": [[c, list(o)] for c, o in self.workloads],
                "budget_s": self.budget_s, "shares": self.shares, "targets": self.targets,
                "tuned_on": list(self.tuned_on), "origin": self.origin}

    def digest(self) -> str:
        """What a frozen plan is held to (its origin's wording may be corrected)."""
        data = {k: v for k, v in self.to_dict().items() if k not in ("origin",)}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


#: The plan of the eighth recall of the 6.12 zoo (2026-11-27, "with data ranges"): the one
#: every later figure was measured with until a new version is made.
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

PLANS: dict[str, WorkloadPlan] = {p.version: p for p in (W8,)}
#: The version a recall uses unless told otherwise.
CURRENT = "w8"


def plan_named(version: str | None) -> WorkloadPlan:
    """The plan of ``version`` (default: CURRENT); an unknown one is a one-line error."""
    name = version or CURRENT
    if name not in PLANS:
        raise ConfigError(f"--plan {name!r}: no such workload plan (versions: "
                          f"{', '.join(PLANS)})")
    return PLANS[name]
