"""Checking one crash state: mount, oracle, read everything, fsck.

Order per state: mount (timed: this is journal replay), verify what the
oracle says was promised, walk and read the whole tree, unmount, fsck
read-only, and only if that finds errors, fsck repair (timed). A mount
or fsck that outlives its deadline is a *finding* (``hang``), not a
harness error. Filesystems whose kernel driver does not replay the
journal at mount (JFS) get fsck repair first, as their users would.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from crashcases.oracle import Finding, FindingKind, OracleLog, verify, walk_tree
from crashcases.outcomes import Outcome, worst
from framework.core import clock
from framework.core.command import CommandRunner
from framework.core.errors import CommandError, CommandTimeout
from recovery.filesystems import FsckVerdict, adapter_for
from recovery.fsck import run_fsck
from recovery.mount import mount_timed, umount
from recovery.persistence import PersistenceRules
from recovery.targets import JournalPlacement, Target

log = logging.getLogger(__name__)


LOSS_KINDS = {FindingKind.DATA_LOSS, FindingKind.WRONG_CONTENT, FindingKind.UNEXPECTED_ENTRY,
              FindingKind.WRONG_TYPE, FindingKind.WRONG_TARGET, FindingKind.WRONG_XATTR,
              FindingKind.LINK_COUNT, FindingKind.IDENTITY}


@dataclass(frozen=True, slots=True)
class Timeouts:
    mount_s: float = 120.0
    fsck_s: float = 300.0
    umount_s: float = 60.0


@dataclass(slots=True)
class CheckResult:
    key: str
    outcome: Outcome = Outcome.OK
    mount_ok: bool = False
    mount_s: float | None = None
    mount_error: str = ""
    replay_messages: list[str] = field(default_factory=list)
    fsck_check: str = ""
    fsck_check_s: float | None = None
    fsck_repair: str = ""
    fsck_repair_s: float | None = None
    findings: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["outcome"] = self.outcome.value
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CheckResult:
        d = dict(d)
        d["outcome"] = Outcome(d["outcome"])
        return cls(**d)


def outcome_of(result: CheckResult) -> Outcome:
    """The outcome implied by what the steps recorded."""
    found = {Outcome.OK}
    kinds = {FindingKind(f["kind"]) for f in result.findings}
    if kinds & LOSS_KINDS:
        found.add(Outcome.DATA_LOSS)
    if FindingKind.IO_ERROR in kinds:
        found.add(Outcome.CORRUPT)
    if not result.mount_ok:
        found.add(Outcome.UNMOUNTABLE)
    if result.fsck_check == FsckVerdict.CORRUPT.value:
        found.add(Outcome.RECOVERED if result.fsck_repair == FsckVerdict.REPAIRED.value else Outcome.CORRUPT)
    elif result.fsck_check == FsckVerdict.FAILED.value:
        found.add(Outcome.CORRUPT)
    if result.fsck_repair in (FsckVerdict.CORRUPT.value, FsckVerdict.FAILED.value):
        found.add(Outcome.CORRUPT)
    return worst(*found)


def _findings(items: list[Finding]) -> list[dict[str, Any]]:
    return [{"kind": f.kind.value, "path": f.path, "detail": f.detail, "mark": f.mark} for f in items]


def _fsck(runner: CommandRunner, target: Target, dev: str, result: CheckResult,
          timeouts: Timeouts) -> None:
    """Read-only check (timed); only if it finds errors, repair (timed)."""
    fck = run_fsck(runner, target, dev, repair=False, timeout_s=timeouts.fsck_s)
    result.fsck_check, result.fsck_check_s = fck.verdict.value, fck.duration_s
    if fck.verdict is not FsckVerdict.CLEAN:
        rep = run_fsck(runner, target, dev, repair=True, timeout_s=timeouts.fsck_s)
        result.fsck_repair, result.fsck_repair_s = rep.verdict.value, rep.duration_s
        if fck.verdict is FsckVerdict.FAILED:
            result.notes.append(f"read-only fsck failed to run: {fck.output_tail}")


def fsck_first(target: Target) -> bool:
    """Whether recovery is fsck before mount: no journal, or a kernel driver that
    does not replay its journal at mount (JFS). That is what such systems do at
    boot after a crash; reading an unrepaired tree would test nothing real."""
    return target.journal is JournalPlacement.NONE or not adapter_for(target.fstype).mount_replays_journal


def check_state(runner: CommandRunner, target: Target, dev: str, mountpoint: Path, *,
                oracle: OracleLog, last_mark: str | None, rules: PersistenceRules, key: str,
                timeouts: Timeouts = Timeouts()) -> CheckResult:
    """Check the crash state on ``dev`` (a throwaway snapshot: this writes to it)."""
    start = clock.monotonic()
    result = CheckResult(key=key)
    mountpoint.mkdir(parents=True, exist_ok=True)
    early = fsck_first(target)
    try:
        if early:
            _fsck(runner, target, dev, result, timeouts)
        mres = mount_timed(runner, target, dev, os.fspath(mountpoint), timeout_s=timeouts.mount_s)
        result.mount_ok, result.mount_s = mres.ok, mres.duration_s
        result.replay_messages = list(mres.replay_messages)
        if not mres.ok:
            result.mount_error = mres.error
        else:
            try:
                found = verify(oracle, mountpoint, last_mark=last_mark, rules=rules)
                found += walk_tree(mountpoint)
                result.findings = _findings(found)
            finally:
                umount(runner, os.fspath(mountpoint), timeout_s=timeouts.umount_s)
        if not early:
            _fsck(runner, target, dev, result, timeouts)
        elif result.mount_ok:
            # After repair, mount and unmount, the filesystem must check clean.
            after = run_fsck(runner, target, dev, repair=False, timeout_s=timeouts.fsck_s)
            if after.verdict is not FsckVerdict.CLEAN:
                result.notes.append(f"fsck after repair and remount: {after.verdict.value}: "
                                    f"{after.output_tail}")
                result.fsck_repair = FsckVerdict.CORRUPT.value
        result.outcome = outcome_of(result)
    except CommandTimeout as exc:
        result.outcome = Outcome.HANG
        result.notes.append(str(exc))
    except CommandError as exc:
        # umount failing after a successful mount: the state is not usable.
        result.notes.append(str(exc))
        result.outcome = worst(outcome_of(result), Outcome.CORRUPT)
    result.duration_s = clock.monotonic() - start
    return result
