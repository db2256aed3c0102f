"""A crash run's plan, checked once before anything runs, and its result."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from crashcases.check import CheckResult
from crashcases.crash.faults import NO_FAULTS, Faults
from crashcases.crash.points import MARKS, PREFIX_ONLY, CrashState, Strategy, Variants
from crashcases.group import FindingGroup
from crashcases.known import KnownMatcher
from crashcases.vocabulary import OTHER_READING_PASSED, Outcome
from crashcases.workload.cases import load_case
from crashcases.workload.ops import ASSUMED_CAPABILITIES, Workload
from framework.core import rundir
from framework.core.errors import ConfigError
from framework.core.lifecycle import EngineRun, read_plan
from framework.core.machine.base import DiskSpec, Machine
from recovery.disks import disk_bytes
from recovery.filesystems import adapter_for
from recovery.mount import Timeouts
from recovery.targets import Target, resolve, target_from_dict

log = logging.getLogger(__name__)


MiB = 1 << 20
CHUNK = 100  # states per agent call: each call starts python and loads the oracle and log index;
# a hang costs nothing extra, since the watchdog spots it per state and results are per state
MachineFactory = Callable[[Sequence[DiskSpec], Path, tuple[str, ...]], Machine]


@dataclass(frozen=True, slots=True)
class CrashPlan:
    """What a crash run is asked, its options parsed where they came in (the command line,
    a plan.json): nothing downstream parses them again."""

    target: str
    case: str
    seed: int = 0
    points: Strategy = MARKS
    variants: Variants = PREFIX_ONLY
    per_point: int = 2
    jobs: int = 1
    check_timeout_s: float = 600.0
    #: Check the representative of each new finding this many more times ("fails f/t").
    reruns: int = 0
    #: ... for at most this many findings.
    max_reruns: int = 10
    #: Faults injected to test the run's own handling of them (crashcases.crash.faults).
    faults: Faults = NO_FAULTS
    max_images: int = 5
    data_mib: int | None = None
    max_sequences: int | None = None
    #: Definitions of user targets (from --targets-file) the plan may name; kept in
    #: plan.json so a reproducer rebuilds the state with the same configuration.
    user_targets: tuple[Target, ...] = ()
    #: Op kinds the generated workload is restricted to (--ops); empty: all the target has.
    ops: tuple[str, ...] = ()
    #: Which generator made the workload: 1 = the classic operations only (plans
    #: written before the capability-driven operations), 2 = every operation the
    #: target's filesystem supports but fallocate, punch hole and zero range taken
    #: as everywhere, 3 = those too only where the filesystem has them. Kept so
    #: that an old run's plan regenerates its own workload (shrink, export) byte
    #: for byte.
    generator: int = 3

    @property
    def spec(self) -> Target:
        return resolve(self.target, self.user_targets)

    def to_dict(self) -> dict[str, Any]:
        """The plan as plan.json and results.json keep it: its options as they were given."""
        out = asdict(self)
        del out["faults"]
        return out | {"points": self.points.spec, "variants": list(self.variants.names),
                      **self.faults.options()}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> CrashPlan:
        """The inverse of to_dict; a plan without ``generator`` predates generator 2."""
        fields = dict(raw)
        faults = Faults.parse(hang=fields.pop("inject_hang", None),
                              busy=fields.pop("inject_busy", None),
                              panic=fields.pop("inject_panic", None))
        return cls(**fields | {
            "points": Strategy.parse(fields.get("points", MARKS.spec)),
            "variants": Variants.parse(tuple(fields.get("variants", PREFIX_ONLY.names))),
            "faults": faults, "ops": tuple(fields.get("ops", ())),
            "generator": fields.get("generator", 1),
            "user_targets": tuple(target_from_dict(t) for t in fields.get("user_targets", ()))})


@dataclass(frozen=True, slots=True)
class ValidatedPlan:
    """A plan whose options were checked (``validate_plan``), with the target it names and
    the workload it makes: what a crash run carries from start to end."""

    plan: CrashPlan
    target: Target
    workload: Workload


@dataclass
class CrashRunResult(EngineRun[CrashPlan]):
    record: dict[str, Any]
    states: list[CrashState]
    results: dict[str, CheckResult] = field(default_factory=dict)
    #: Harness errors met (state key, why): each state was checked again on a fresh guest.
    harness_errors: list[tuple[str, str]] = field(default_factory=list)
    #: The known-behaviour verdicts of this run's states (None: no list was given).
    known: KnownMatcher | None = None
    #: Two-disk runs: states not explored, by reason (their halves may never have coexisted).
    unexplored: dict[str, int] = field(default_factory=dict)
    #: The failing states grouped into distinct findings (crashcases.group).
    findings: list[FindingGroup] = field(default_factory=list)

    def shared(self) -> int:
        """States checked on the mount and fsck of the state before them (the same bytes)."""
        return sum(1 for r in self.results.values() if r.same_as)

    def passed_on_other_reading(self) -> list[str]:
        """States that failed only in the log's order (their note says so), in key order."""
        return sorted(k for k, r in self.results.items()
                      if r.notes and r.notes[0].startswith(OTHER_READING_PASSED))

    def counts(self) -> dict[str, int]:
        out = {o.value: 0 for o in Outcome}
        for r in self.results.values():
            out[r.outcome.value] += 1
        return out


GENERATORS = (1, 2, 3)


def disk_sizes(target: Target, data_mib: int | None) -> dict[str, int]:
    sizes = disk_bytes([target], data_bytes=data_mib * MiB if data_mib else None)
    data = sizes["data"]
    # The log holds mkfs (full metadata init) plus every workload write, overwrites
    # included: all of gen:seq2 on ext4 (17,130 operations) outgrew 320 MiB. Log disks
    # are sparse files, so only what is logged takes space.
    out = {"data": data, "log": 8 * data + 64 * MiB, "replay": data, "cow": 96 * MiB,
           "replay-2": data, "cow-2": 96 * MiB}
    if "journal" in sizes:  # a journal disk of its own: recorded on a second log
        journal = sizes["journal"]
        out |= {"journal": journal, "journal-log": 8 * journal + 64 * MiB,
                "journal-replay": journal, "journal-cow": 64 * MiB}
    return out


#: Disks of the recording guest and of a checking guest; a two-disk run adds the journal's.
RECORD_DISKS = ("data", "log")
CHECK_DISKS = ("replay", "cow")
#: A second checking lane's disks (single-disk targets): two states are checked at once.
LANE_DISKS = ("replay-2", "cow-2")
JOURNAL_RECORD_DISKS = ("journal", "journal-log")
JOURNAL_CHECK_DISKS = ("journal-replay", "journal-cow")


def check_target(target: Target, variants: Variants) -> None:
    named = variants.on_journal
    if named and not target.needs_journal_disk:
        raise ConfigError(f"--variants {named[0]}: target {target.name} has no journal disk "
                          "(journal-* variants are for targets with journal = \"external\")")


def validate_plan(plan: CrashPlan) -> ValidatedPlan:
    """Fail on bad options before anything is created or a guest boots."""
    target = plan.spec
    if plan.reruns < 0 or plan.max_reruns < 0:
        raise ConfigError(f"--reruns {plan.reruns} / --max-reruns {plan.max_reruns}: "
                          "must be 0 or more")
    check_target(target, plan.variants)
    if plan.generator not in GENERATORS:
        raise ConfigError(f"plan: generator {plan.generator} is not one this powercut knows "
                          f"({', '.join(map(str, GENERATORS))}); upgrade powercut")
    capabilities = (adapter_for(target.fstype).target_capabilities(target)
                    if plan.generator >= 2 else None)
    if capabilities is not None and plan.generator == 2:
        # Generator 2 took every filesystem to have these and let the guest skip them.
        capabilities |= ASSUMED_CAPABILITIES
    return ValidatedPlan(plan, target, load_case(
        plan.case, seed=plan.seed, max_sequences=plan.max_sequences, capabilities=capabilities,
        ops=plan.ops or None))


def reproducer_command(run_dir: Path, key: str) -> str:
    return f"powercut recheck {os.fspath(run_dir)} {key}"


def timeouts_for(budget_s: float) -> Timeouts:
    return Timeouts.within(budget_s, shares=3)


def load_plan(run_dir: Path) -> CrashPlan:
    """The plan of an earlier crash run, user targets included (no targets file needed)."""
    raw = read_plan(run_dir, "crash")
    try:
        return CrashPlan.from_dict(raw)
    except ConfigError as exc:  # an option this powercut does not take
        raise ConfigError(f"{run_dir / rundir.PLAN}: {exc}") from None
    except (TypeError, AttributeError, KeyError) as exc:
        raise ConfigError(f"{run_dir / rundir.PLAN}: not a crash plan ({exc})") from None
