"""Agent tasks of a crash run, performed inside the machine.

``crash-record``: dm-log-writes over the data disk, mkfs through it, mark
``mkfs``, mount, run the workload (marking after every durability op with
the in-process ioctl), unmount, remove the target. The oracle goes to the
shared run directory.

``crash-check``: replay the log onto the replay disk, advancing only
forward; for each state take a throwaway dm-snapshot of the replayed disk,
apply the variant's extra writes to the snapshot, check it, drop it. Each
result is appended to a JSON-lines file in the run directory as soon as it
is known, so the host keeps what was checked even if the guest hangs.

Requests carry the whole target, not its name: a target from the user's
own TOML file exists only on the host.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crashcases.check import CheckResult, Timeouts, check_state
from crashcases.operations import Workload, execute
from crashcases.oracle import OracleLog
from crashcases.outcomes import Outcome
from devicemapper.logformat import LogReader
from devicemapper.logwrites import recording
from devicemapper.replay import Replayer, apply_entries
from devicemapper.snapshot import SnapshotSlot
from framework.core import agent, clock
from framework.core.command import HostRunner
from recovery.filesystems import persistence_rules
from recovery.mount import mkfs, mounted
from recovery.targets import Target

if TYPE_CHECKING:  # the guest builds no crash state: points.py stays unread there
    from crashcases.points import CrashState

log = logging.getLogger(__name__)

RECORD_MOUNTPOINT = Path("/tmp/powercut/record")
CHECK_MOUNTPOINT = Path("/tmp/powercut/check")


# --- crash-record ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordRequest:
    """Record ``workload`` on ``target``: dm-log-writes from ``data_dev`` to ``log_dev``."""

    target: Target
    workload: Workload
    data_dev: str
    log_dev: str
    oracle_path: str  # where the guest writes the oracle (in the shared run directory)

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target.to_dict(), "workload": self.workload.to_json(),
                "data_dev": self.data_dev, "log_dev": self.log_dev, "oracle_path": self.oracle_path}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RecordRequest:
        return cls(Target.from_dict(raw["target"]), Workload.from_json(raw["workload"]),
                   str(raw["data_dev"]), str(raw["log_dev"]), str(raw["oracle_path"]))


@dataclass(frozen=True, slots=True)
class RecordResult:
    entries: int  # log entries, the mkfs included
    log_bytes: int
    marks: int  # durability marks of the workload
    record_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RecordResult:
        return cls(int(raw["entries"]), int(raw["log_bytes"]), int(raw["marks"]),
                   float(raw["record_s"]))


def record(req: RecordRequest) -> RecordResult:
    runner = HostRunner()
    start = clock.monotonic()
    with recording(runner, req.data_dev, req.log_dev) as lw:
        mkfs(runner, req.target, lw.path)
        lw.mark_fast("mkfs")
        RECORD_MOUNTPOINT.mkdir(parents=True, exist_ok=True)
        with mounted(runner, req.target, lw.path, os.fspath(RECORD_MOUNTPOINT), timeout_s=120):
            oracle = execute(req.workload, RECORD_MOUNTPOINT, lw.mark_fast)
        status = lw.status()
    Path(req.oracle_path).write_text(oracle.to_json())
    return RecordResult(entries=status.entries, log_bytes=status.next_sector * 512,
                        marks=len(oracle.marks), record_s=clock.monotonic() - start)


CRASH_RECORD = agent.Task("crash-record", RecordRequest, RecordResult, record)


# --- crash-check -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StateRecipe:
    """What the guest needs of a crash state: replay to ``base``, apply ``extra``, check."""

    key: str
    last_mark: str | None  # the oracle mark the state is checked against
    base: int
    extra: tuple[int, ...] = ()
    torn: Mapping[int, tuple[int, int]] = field(default_factory=dict)  # entry -> sector range

    @classmethod
    def of(cls, state: CrashState) -> StateRecipe:
        return cls(state.key, state.point.last_mark, state.base, tuple(state.extra),
                   dict(state.torn))

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "last_mark": self.last_mark, "base": self.base,
                "extra": list(self.extra), "torn": {str(k): list(v) for k, v in self.torn.items()}}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> StateRecipe:
        torn = {int(k): (int(v[0]), int(v[1])) for k, v in raw.get("torn", {}).items()}
        return cls(str(raw["key"]), raw["last_mark"], int(raw["base"]),
                   tuple(int(i) for i in raw.get("extra", ())), torn)


@dataclass(frozen=True, slots=True)
class CheckRequest:
    """Check ``states`` (in replay order) of the log on ``log_dev`` for ``target``."""

    target: Target
    log_dev: str
    replay_dev: str
    cow_dev: str
    oracle_path: str
    results_path: str  # JSON lines, one CheckResult per state, appended as each is known
    states: tuple[StateRecipe, ...]
    timeouts: Timeouts = field(default_factory=Timeouts)
    inject_hang: str | None = None  # fault injection: block at this state, as a stuck mount would

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target.to_dict(), "log_dev": self.log_dev,
                "replay_dev": self.replay_dev, "cow_dev": self.cow_dev,
                "oracle_path": self.oracle_path, "results_path": self.results_path,
                "states": [s.to_dict() for s in self.states], "timeouts": asdict(self.timeouts),
                "inject_hang": self.inject_hang}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> CheckRequest:
        return cls(Target.from_dict(raw["target"]), str(raw["log_dev"]), str(raw["replay_dev"]),
                   str(raw["cow_dev"]), str(raw["oracle_path"]), str(raw["results_path"]),
                   tuple(StateRecipe.from_dict(s) for s in raw["states"]),
                   Timeouts(**raw.get("timeouts", {})), raw.get("inject_hang"))


@dataclass(frozen=True, slots=True)
class CheckSummary:
    """What a crash-check task did; the checks themselves are in the results file."""

    checked: int
    abandoned: bool  # a step hung: the guest stopped there, nothing after it is trusted
    replay_written_bytes: int
    replay_discarded_bytes: int
    entries_applied: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> CheckSummary:
        return cls(int(raw["checked"]), bool(raw["abandoned"]), int(raw["replay_written_bytes"]),
                   int(raw["replay_discarded_bytes"]), int(raw["entries_applied"]))


def check(req: CheckRequest) -> CheckSummary:
    runner = HostRunner()
    oracle = OracleLog.from_json(Path(req.oracle_path).read_text())
    rules = persistence_rules(req.target)
    checked = 0
    abandoned = False
    with Replayer(req.log_dev, req.replay_dev) as rep, \
            LogReader(req.log_dev) as reader, open(req.results_path, "a") as out, \
            SnapshotSlot(runner, req.replay_dev, req.cow_dev) as slot:
        index = list(reader)  # headers only: payloads stay on the log disk
        for state in req.states:
            if state.key == req.inject_hang:
                # Fault injection for testing the host's hang handling: block
                # the way a mount stuck in the kernel would.
                runner.run(["sleep", "86400"], timeout_s=90000)
            if state.base >= 0 and state.base >= rep.position:
                rep.replay_to(state.base)
            with slot.fresh() as snap:
                if state.extra:
                    fd = os.open(snap.path, os.O_RDWR | os.O_CLOEXEC)
                    try:
                        torn = {k: range(*v) for k, v in state.torn.items()}
                        apply_entries([index[i] for i in state.extra], reader, fd, torn=torn)
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                result = check_state(runner, req.target, snap.path, CHECK_MOUNTPOINT, oracle=oracle,
                                     last_mark=state.last_mark, rules=rules, key=state.key,
                                     timeouts=req.timeouts)
            out.write(json.dumps(result.to_dict(), sort_keys=True) + "\n")
            out.flush()
            os.fsync(out.fileno())
            checked += 1
            if result.outcome is Outcome.HANG:
                # Something in the kernel is stuck; nothing more here is trustworthy.
                abandoned = True
                break
        return CheckSummary(checked=checked, abandoned=abandoned,
                            replay_written_bytes=rep.bytes_written,
                            replay_discarded_bytes=rep.bytes_discarded,
                            entries_applied=rep.entries_applied)


CRASH_CHECK = agent.Task("crash-check", CheckRequest, CheckSummary, check)


def parse_results(path: Path) -> list[CheckResult]:
    """Results a (possibly killed) crash-check task managed to write."""
    out: list[CheckResult] = []
    try:
        text = path.read_text()
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        try:
            out.append(CheckResult.from_dict(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            break  # a torn last line: the guest died while writing it
    return out
