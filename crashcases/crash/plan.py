"""A crash run's plan, its result, and reading them back from a run directory."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crashcases.check import CheckResult
from crashcases.crash.points import (
    CrashPoint,
    CrashState,
    Variant,
    build_state,
    journal_variants,
    parse_strategy,
    parse_variants,
)
from crashcases.group import FindingGroup
from crashcases.known import KnownMatcher
from crashcases.oracle.log import OracleLog
from crashcases.vocabulary import Outcome
from crashcases.workload.cases import load_case
from crashcases.workload.ops import ASSUMED_CAPABILITIES, Workload
from devicemapper.logformat import LogReader
from framework.core import rundir
from framework.core.errors import (
    ConfigError,
)
from framework.core.files import write_atomic
from framework.core.lifecycle import EngineRun, read_plan
from framework.core.machine.base import DiskSpec, Machine
from recovery.disks import disk_bytes
from recovery.filesystems import adapter_for
from recovery.mount import Timeouts
from recovery.targets import Target, resolve

log = logging.getLogger(__name__)


MiB = 1 << 20
#: In a guest's run directory: the oracle it checks against, the results it appends to.
#: In the run directory: what the recording reported (written once it is whole) and the
#: results a resumed run found from before.
#: A two-disk run's journal log, beside log.img once the run is over.


def write_json_lines(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """One JSON object per line, replacing ``path`` atomically."""
    write_atomic(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
CHUNK = 100  # states per agent call: each call starts python and loads the oracle and log index;
# a hang costs nothing extra, since the watchdog spots it per state and results are per state
MachineFactory = Callable[[Sequence[DiskSpec], Path, tuple[str, ...]], Machine]


@dataclass(frozen=True, slots=True)
class CrashPlan:
    target: str
    case: str
    seed: int = 0
    points: str = "marks"
    variants: tuple[str, ...] = ("prefix",)
    per_point: int = 2
    jobs: int = 1
    check_timeout_s: float = 600.0
    inject_hang: str | None = None
    #: Check the representative of each new finding this many more times ("fails f/t").
    reruns: int = 0
    #: ... for at most this many findings.
    max_reruns: int = 10
    #: Fault injection: comma-separated "#N" (or a key), each with an optional "@SECONDS":
    #: another process holds the N-th state's device open for that long, or for good.
    inject_busy: str | None = None
    #: Fault injection: comma-separated "#N" (or a key), each with an optional "@once": the
    #: guest kernel panics (sysrq c) when it starts to check the N-th state, every time or
    #: the first time only.
    inject_panic: str | None = None
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


def check_target(target: Target, variants: Sequence[str] = ()) -> None:
    named = journal_variants(variants)
    if named and not target.needs_journal_disk:
        raise ConfigError(f"--variants {named[0]}: target {target.name} has no journal disk "
                          "(journal-* variants are for targets with journal = \"external\")")


def validate_plan(plan: CrashPlan) -> tuple[Target, Workload]:
    """Fail on bad options before anything is created or a guest boots."""
    target = plan.spec
    parse_strategy(plan.points)
    parse_variants(plan.variants)
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
    return target, load_case(plan.case, seed=plan.seed, max_sequences=plan.max_sequences,
                             capabilities=capabilities, ops=plan.ops or None)


def reproducer_command(run_dir: Path, key: str) -> str:
    return f"powercut recheck {os.fspath(run_dir)} {key}"


def timeouts_for(budget_s: float) -> Timeouts:
    return Timeouts.within(budget_s, shares=3)


def load_plan(run_dir: Path) -> CrashPlan:
    """The plan of an earlier crash run, user targets included (no targets file needed)."""
    raw = read_plan(run_dir, "crash")
    try:
        raw["variants"] = tuple(raw.get("variants", ("prefix",)))
        raw["ops"] = tuple(raw.get("ops", ()))
        raw.setdefault("generator", 1)  # plans without the key predate generator 2
        raw["user_targets"] = tuple(Target.from_dict(t) for t in raw.get("user_targets", ()))
        return CrashPlan(**raw)
    except (TypeError, AttributeError, KeyError) as exc:
        raise ConfigError(f"{run_dir / rundir.PLAN}: not a crash plan ({exc})") from None


def load_checked(run_dir: Path, key: str, needs: Sequence[str] = (rundir.PLAN, rundir.RESULTS)
                 ) -> tuple[CrashPlan, dict[str, Any]]:
    """The plan of a finished crash run and state ``key``'s entry in its results.json (with a
    ``result``), after checking that ``needs`` are there; bad input is a one-line ConfigError."""
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: no such run directory")
    for name in needs:
        path = rundir.crash_log(run_dir, name) if name in (rundir.LOG, rundir.JOURNAL_LOG) \
            else run_dir / name
        if not path.is_file():
            raise ConfigError(f"{run_dir}: not a finished crash run directory (no {name})")
    try:
        states = json.loads((run_dir / rundir.RESULTS).read_text())["states"]
        by_key = {s["key"]: s for s in states}
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{run_dir / rundir.RESULTS}: not a crash run's results ({exc})") from None
    if key not in by_key:
        failing = [k for k, s in by_key.items() if s.get("result") and s["result"]["outcome"] != "ok"]
        hint = (f"failing states: {', '.join(failing[:5])}{' ...' if len(failing) > 5 else ''}"
                if failing else "it has no failing state")
        raise ConfigError(f"state {key!r}: not a state of {run_dir} ({hint})")
    entry = by_key[key]
    if not entry.get("result"):
        raise ConfigError(f"state {key!r}: never checked (the run stopped before it)")
    plan = load_plan(run_dir)
    return plan, entry


def load_state(run_dir: Path, key: str) -> tuple[CrashPlan, CrashState]:
    """Rebuild a state of an earlier run from its key (``POINT/VARIANT``)."""
    plan = load_plan(run_dir)
    point_text, sep, variant_text = key.partition("/")
    if not sep or not point_text.isdigit():
        raise ConfigError(f"state {key!r}: expected POINT/VARIANT, e.g. 120/prefix or 120/subset:77")
    variant = Variant.parse(variant_text)
    log_path = rundir.verified_log(run_dir)
    marks = OracleLog.load(run_dir / rundir.ORACLE).marks
    with LogReader(log_path) as reader:
        entries = list(reader)
    index = int(point_text)
    if index >= len(entries):
        raise ConfigError(f"state {key!r}: the log has only {len(entries)} entries")
    from crashcases.crash.points import TwoLogs, annotate
    from crashcases.vocabulary import PointKind

    point: CrashPoint = annotate(entries, [(index, PointKind.SAMPLE)], set(marks))[0]
    if plan.spec.needs_journal_disk:
        with LogReader(rundir.verified_log(run_dir, rundir.JOURNAL_LOG)) as reader:
            journal_entries = list(reader)
        state, why = TwoLogs(entries, journal_entries, marks).state(point, variant)
        if state is None and why is not None:
            raise ConfigError(f"state {key!r}: not explored in a two-disk run: {why.value}")
    else:
        if variant.on_journal:
            raise ConfigError(f"state {key!r}: target {plan.target} has no journal disk")
        state = build_state(entries, point, variant, marks)
    if state is None:
        raise ConfigError(f"state {key!r}: this variant does not exist at that point")
    return plan, state


