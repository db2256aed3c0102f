"""Checking one crash state: mount, oracle, read everything, fsck.

Order per state: mount (timed: this is journal replay), verify what the
oracle says was promised, walk and read the whole tree, unmount, fsck
read-only, and only if that finds errors, fsck repair (timed). A mount
or fsck that outlives its deadline is a *finding* (``hang``), not a
harness error. Filesystems whose kernel driver does not replay the
journal at mount (JFS) have it replayed by their checker first (timed:
that is their journal replay), then checked read-only before the mount,
as their boot scripts do; filesystems without a journal are checked
before the mount too.

Every outcome but ``ok`` carries an ``explanation``: the broken promises,
the mount error, or the checker's own words.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from crashcases.oracle.finding import Finding, FindingKind
from crashcases.oracle.log import OracleLog
from crashcases.oracle.verify import verify, walk_tree
from crashcases.vocabulary import Outcome, worst
from framework.core import clock
from framework.core.command import CommandRunner
from framework.core.errors import CommandError, CommandTimeout
from recovery.filesystems import FsckVerdict, adapter_for
from recovery.fsck import FsckResult, run_fsck, run_log_replay
from recovery.mount import Timeouts, mount_timed, umount
from recovery.persistence import PersistenceRules
from recovery.targets import JournalPlacement, Target

log = logging.getLogger(__name__)


LOSS_KINDS = {FindingKind.DATA_LOSS, FindingKind.WRONG_CONTENT, FindingKind.UNEXPECTED_ENTRY,
              FindingKind.WRONG_TYPE, FindingKind.WRONG_TARGET, FindingKind.WRONG_XATTR,
              FindingKind.LINK_COUNT, FindingKind.IDENTITY}


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
    #: The checker's journal replay before mount (JFS: jfs_fsck -a), timed.
    log_replay_s: float | None = None
    #: The unmount after the tree was read (writeback, the last commit), timed.
    umount_s: float | None = None
    #: On the mounted state: checking the oracle's promises, and reading the whole tree.
    oracle_s: float | None = None
    tree_s: float | None = None
    #: The last lines each checker printed, when its verdict was not clean.
    fsck_check_output: str = ""
    fsck_repair_output: str = ""
    #: Why the outcome is not ok, in words (empty for ok).
    explanation: str = ""
    #: The state checked just before this one, when both had the same disk content: its
    #: mount, tree read and fsck (and their times) are this state's too, and only this
    #: state's own promises were verified, on that mount ("" when checked on its own).
    same_as: str = ""

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
    # A read-only check that stopped (e2fsck -n aborts at a directory it may not
    # salvage without writing, exit 8) found damage as surely as one that listed it:
    # if the repair then fixed it, the state was repairable, as after a check that
    # reported errors. Found on ext2 by the findings study (gen:seq2, a directory
    # block a crash left unwritten).
    if result.fsck_check in (FsckVerdict.CORRUPT.value, FsckVerdict.FAILED.value):
        found.add(Outcome.RECOVERED if result.fsck_repair == FsckVerdict.REPAIRED.value else Outcome.CORRUPT)
    if result.fsck_repair in (FsckVerdict.CORRUPT.value, FsckVerdict.FAILED.value):
        found.add(Outcome.CORRUPT)
    return worst(*found)


def _findings(items: list[Finding]) -> list[dict[str, Any]]:
    return [f.to_dict() for f in items]


#: Lines of a checker's output kept in a result (the end, where verdicts are).
OUTPUT_LINES = 40  # as many as recovery.fsck keeps: a known entry's fsck_says needs them all


def _tail(fsck: FsckResult) -> str:
    lines = fsck.output_tail.splitlines()[-OUTPUT_LINES:]
    return "\n".join([" ".join(fsck.argv) + f" (exit {fsck.status}):", *lines])


def _fsck(runner: CommandRunner, target: Target, dev: str, result: CheckResult,
          timeouts: Timeouts, journal_dev: str | None, quick_start: bool) -> None:
    """Read-only check (timed); only if it finds errors, repair (timed)."""
    fck = run_fsck(runner, target, dev, repair=False, journal_dev=journal_dev,
                   timeout_s=timeouts.fsck_s, quick_start=quick_start)
    result.fsck_check, result.fsck_check_s = fck.verdict.value, fck.duration_s
    if fck.verdict is not FsckVerdict.CLEAN:
        result.fsck_check_output = _tail(fck)
        rep = run_fsck(runner, target, dev, repair=True, journal_dev=journal_dev,
                       timeout_s=timeouts.fsck_s, quick_start=quick_start)
        result.fsck_repair, result.fsck_repair_s = rep.verdict.value, rep.duration_s
        result.fsck_repair_output = _tail(rep)
        if fck.verdict is FsckVerdict.FAILED:
            result.notes.append(f"read-only fsck stopped: {fck.output_tail}")


def _replay_log(runner: CommandRunner, target: Target, dev: str, result: CheckResult,
                timeouts: Timeouts, journal_dev: str | None) -> None:
    """The checker's journal replay, for filesystems whose kernel does not replay (timed)."""
    rep = run_log_replay(runner, target, dev, journal_dev=journal_dev, timeout_s=timeouts.fsck_s)
    if rep is None:
        return
    result.log_replay_s = rep.duration_s
    result.replay_messages = [f"{' '.join(rep.argv)}: exit {rep.status} in {rep.duration_s:.3f} s"]
    if rep.verdict in (FsckVerdict.CORRUPT, FsckVerdict.FAILED):
        result.notes.append(f"journal replay by the checker: {rep.verdict.value}: {_tail(rep)}")


def explain(result: CheckResult) -> str:
    """Why ``result`` is not ok, in words a user can act on ('' for ok)."""
    out = result.outcome
    if out is Outcome.OK:
        return ""
    if out is Outcome.HANG:
        return "; ".join(result.notes) or "a step outlived its deadline"
    if out is Outcome.ERROR:
        return "harness error: " + ("; ".join(result.notes) or "the check could not finish")
    parts: list[str] = []
    if result.findings:
        first = result.findings[0]
        more = len(result.findings) - 1
        parts.append(f"{first['kind']}: {first['path'] or '.'}: {first['detail']}"
                     + (f" (and {more} more finding{'s' if more > 1 else ''})" if more else ""))
    if not result.mount_ok and result.mount_error:
        parts.append(f"mount failed: {result.mount_error}")
    if result.fsck_check and result.fsck_check != FsckVerdict.CLEAN.value:
        said = _last_words(result.fsck_check_output)
        parts.append(f"read-only fsck: {result.fsck_check}" + (f" ({said})" if said else ""))
        if result.fsck_repair:
            said = _last_words(result.fsck_repair_output)
            parts.append(f"repair: {result.fsck_repair}" + (f" ({said})" if said else ""))
    elif result.fsck_repair == FsckVerdict.CORRUPT.value:
        parts.append("fsck after repair and remount was not clean")
    parts += result.notes
    return "; ".join(p for p in parts if p) or f"{out.value} (no step recorded why)"


def _last_words(output: str, lines: int = 3) -> str:
    """The checker's closing lines (its verdict), joined on one line."""
    body = [ln.strip() for ln in output.splitlines()[1:] if ln.strip()]
    return " / ".join(body[-lines:])


def fsck_first(target: Target) -> bool:
    """Whether recovery is fsck before mount: no journal, or a kernel driver that
    does not replay its journal at mount (JFS). That is what such systems do at
    boot after a crash; reading an unrepaired tree would test nothing real."""
    return target.journal is JournalPlacement.NONE or not adapter_for(target.fstype).mount_replays_journal


def check_state(runner: CommandRunner, target: Target, dev: str, mountpoint: Path, *,
                oracle: OracleLog, last_mark: str | None, rules: PersistenceRules, key: str,
                timeouts: Timeouts = Timeouts(), journal_dev: str | None = None) -> CheckResult:
    """Check the crash state on ``dev`` (a throwaway snapshot: this writes to it), with
    its external journal on ``journal_dev`` when the target has one."""
    return check_states(runner, target, dev, mountpoint, oracle=oracle, states=[(key, last_mark)],
                        rules=rules, timeouts=timeouts, journal_dev=journal_dev)[0]


def check_states(runner: CommandRunner, target: Target, dev: str, mountpoint: Path, *,
                 oracle: OracleLog, states: Sequence[tuple[str, str | None]],
                 rules: PersistenceRules, timeouts: Timeouts = Timeouts(),
                 journal_dev: str | None = None, quick_fsck: bool = False) -> list[CheckResult]:
    """Check crash states that have the same disk content, on ``dev``: ``states`` are
    (key, last mark) pairs. The first is checked in full; each other one shares its mount,
    tree read and fsck, and has its own promises (those up to its own last mark) verified
    on that mount. The promises differ, so the outcomes can. After a hang only the first
    state has a result. ``quick_fsck``: the checker's static build where there is one
    (run_fsck's ``quick_start``), for checks whose fsck time is not a recovery figure."""
    start = clock.monotonic()
    key, last_mark = states[0]
    result = CheckResult(key=key)
    others = [CheckResult(key=k, same_as=key) for k, _ in states[1:]]
    other_s = [0.0] * len(others)
    mountpoint.mkdir(parents=True, exist_ok=True)
    early = fsck_first(target)
    try:
        if early:
            _replay_log(runner, target, dev, result, timeouts, journal_dev)
            _fsck(runner, target, dev, result, timeouts, journal_dev, quick_fsck)
        mres = mount_timed(runner, target, dev, os.fspath(mountpoint), journal_dev=journal_dev,
                           timeout_s=timeouts.mount_s)
        result.mount_ok, result.mount_s = mres.ok, mres.duration_s
        result.replay_messages = [*result.replay_messages, *mres.replay_messages]
        if not mres.ok:
            result.mount_error = mres.error
        else:
            try:
                t0 = clock.monotonic()
                found = verify(oracle, mountpoint, last_mark=last_mark, rules=rules)
                t1 = clock.monotonic()
                tree = walk_tree(mountpoint)
                result.oracle_s, result.tree_s = t1 - t0, clock.monotonic() - t1
                result.findings = _findings(found + tree)
                for i, ((_, mark), other) in enumerate(zip(states[1:], others, strict=True)):
                    t0 = clock.monotonic()
                    other.findings = _findings(verify(oracle, mountpoint, last_mark=mark,
                                                      rules=rules) + tree)
                    other_s[i] = clock.monotonic() - t0
            finally:
                result.umount_s = umount(runner, os.fspath(mountpoint),
                                         timeout_s=timeouts.umount_s).duration_s
        if not early:
            _fsck(runner, target, dev, result, timeouts, journal_dev, quick_fsck)
        elif result.mount_ok:
            # After repair, mount and unmount, the filesystem must check clean.
            after = run_fsck(runner, target, dev, repair=False, journal_dev=journal_dev,
                             timeout_s=timeouts.fsck_s, quick_start=quick_fsck)
            if after.verdict is not FsckVerdict.CLEAN:
                result.notes.append(f"fsck after repair and remount: {after.verdict.value}: "
                                    f"{_tail(after)}")
                result.fsck_repair = FsckVerdict.CORRUPT.value
        result.outcome = outcome_of(result)
    except CommandTimeout as exc:
        result.outcome = Outcome.HANG
        result.notes.append(str(exc))
    except CommandError as exc:
        # umount failing after a successful mount: the state is not usable.
        result.notes.append(str(exc))
        result.outcome = worst(outcome_of(result), Outcome.CORRUPT)
        unusable = True
    else:
        unusable = False
    result.explanation = explain(result)
    result.duration_s = clock.monotonic() - start - sum(other_s)
    if result.outcome is Outcome.HANG:
        return [result]
    out = [result]
    for other, seconds in zip(others, other_s, strict=True):
        shared = replace(result, key=other.key, same_as=result.key, findings=other.findings)
        shared.outcome = outcome_of(shared)
        if unusable:
            shared.outcome = worst(shared.outcome, Outcome.CORRUPT)
        shared.explanation = explain(shared)
        shared.duration_s = shared.oracle_s = seconds
        out.append(shared)
    return out
