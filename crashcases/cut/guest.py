"""One power-cut trial, inside the machine: a live workload on dm-flakey, the cut, the recovery.

``cut-trial``: dm-flakey in pass-through over the data disk (and over the
journal disk of a target whose journal has a disk of its own), mkfs, mount,
and the workload runs with real syscalls. At the chosen moment (before a
chosen op, or after T seconds) the table is swapped for ``drop_writes`` or
``error_writes`` with ``suspend --nolockfs``: no freeze_fs(), so this is a
power cut and not a clean snapshot. Two disks are both suspended before
either gets its cut table, so neither takes a write after the other lost
power. The workload goes on for a few more
durability ops (writes vanish, or fail with EIO), the filesystem is
unmounted *under the cut table* (what the kernel writes at unmount, dirty
pages and the last journal commit, is lost like everything else after the
cut; the device is resumed, so the unmount does not hang), the
pass-through table is restored and recovery is measured with
``crashcases.check.check_state``: timed mount (journal replay, with the
kernel's messages), the oracle at the last durability op completed before
the cut, a read of the whole tree, fsck.

``cut-oracle``: the same workload executed once, without a cut, on a fresh
filesystem of the same target. The workload is deterministic (its data is
generated from seed and op index) and which ops a filesystem skips as
unsupported depends only on the filesystem, so the promise at mark
``pc-K`` is the same in every trial, also in trials whose workload stopped
on EIO.

This module is imported by the guest program: it keeps to what a trial
needs (no numpy, no case generator), since every import is read over 9p
under an emulated CPU. The host side is ``crashcases.cut.engine``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from crashcases.check import CheckResult, check_state
from crashcases.execute import execute, mark_name, perform
from crashcases.oracle.log import OracleLog
from crashcases.workload.ops import DURABILITY_OPS, Op, Workload, WorkloadError, needs_data, op_data
from devicemapper.delay import delayed_path
from devicemapper.flakey import FlakeyMode, cut_together, flakey_device, restore_together
from framework.core import agent, clock
from framework.core.command import CommandRunner, HostRunner
from framework.core.errors import CommandError, ConfigError
from framework.core.syscalls import drop_caches
from recovery.filesystems import adapter_for, persistence_rules
from recovery.fsck import C_LOCALE
from recovery.mount import Timeouts, mkfs, mount_timed, mounted
from recovery.targets import Target, target_from_dict

log = logging.getLogger(__name__)


LIVE_MOUNTPOINT = Path("/tmp/powercut/cut-live")
CHECK_MOUNTPOINT = Path("/tmp/powercut/cut-check")
ORACLE_MOUNTPOINT = Path("/tmp/powercut/cut-oracle")
CUT_MODES = (FlakeyMode.DROP_WRITES, FlakeyMode.ERROR_WRITES)
_UNSUPPORTED = {errno.EOPNOTSUPP, errno.ENOTSUP}

PerformOp = Callable[[Op, Path, bytes], None]


# --- where to cut --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CutPoint:
    """When a trial cuts: before op ``before_op`` starts, or ``after_s`` into the workload."""

    before_op: int | None = None
    after_s: float | None = None

    def __post_init__(self) -> None:
        if (self.before_op is None) == (self.after_s is None):
            raise ConfigError("a cut point needs exactly one of before_op and after_s")

    def describe(self) -> str:
        return f"before op {self.before_op}" if self.before_op is not None else f"at {self.after_s:g} s"

    def to_dict(self) -> dict[str, Any]:
        return {"before_op": self.before_op, "after_s": self.after_s}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> CutPoint:
        return cls(before_op=raw.get("before_op"), after_s=raw.get("after_s"))


# --- the live workload ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DriveResult:
    """What the live workload saw around the cut."""

    promised: int  # durability ops completed before the cut began
    last_mark: str | None  # the oracle mark of the last of them
    cut_op: int  # ops [0, cut_op) had started when the cut took effect
    cut_s: float  # seconds into the workload when the cut took effect
    cut_swap_s: float  # how long suspend/load/resume took
    in_flight_ops: int  # ops after the last promise that started before the cut
    in_flight_bytes: int  # data bytes those ops wrote
    post_cut_ops: int  # ops completed after the cut began
    post_cut_errors: dict[str, int]  # errno name -> count, after the cut
    post_cut_promises: list[str]  # marks of durability ops that returned success after the cut
    skipped_ops: int  # ops the filesystem does not support (skipped, as execute() does)
    ended_before_cut: bool  # the workload ran out before the timer fired
    workload_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> DriveResult:
        return cls(**raw)


class _Drive:
    """Runs ops one by one; a cut may happen between ops or, from a timer, during one."""

    def __init__(self, workload: Workload, root: Path, point: CutPoint, cut: Callable[[], None],
                 continue_syncs: int, perform_op: PerformOp) -> None:
        self.workload, self.root, self.point = workload, root, point
        self.cut_fn, self.continue_syncs, self.perform_op = cut, continue_syncs, perform_op
        self.lock = threading.Lock()
        self.start = clock.monotonic()
        self.started = 0  # ops started so far (the next op's index)
        self.done_durable = 0
        self.last_durable_index = -1
        self.ordinal = 0  # durability ops seen: mark numbering as execute() does it
        self.skipped: set[int] = set()
        self.cutting = False
        self.cut_done = False
        self.promised = 0
        self.promised_index = -1
        self.cut_op = 0
        self.cut_s = 0.0
        self.cut_swap_s = 0.0
        self.post_ops = 0
        self.post_syncs = 0
        self.errors: Counter[str] = Counter()
        self.post_promises: list[str] = []
        self.timer_error: BaseException | None = None

    def do_cut(self) -> None:
        with self.lock:
            if self.cutting:
                return
            self.cutting = True
            # Promises are counted before the swap starts: a durability op
            # that returns during the swap may or may not have reached the
            # disk, so it is not held against the filesystem.
            self.promised = self.done_durable
            self.promised_index = self.last_durable_index
        t0 = clock.monotonic()
        self.cut_fn()
        with self.lock:
            self.cut_done = True
            self.cut_op = self.started
            self.cut_s = clock.monotonic() - self.start
            self.cut_swap_s = clock.monotonic() - t0

    def _timer_cut(self) -> None:
        try:
            self.do_cut()
        except BaseException as exc:  # re-raised in the workload's thread
            self.timer_error = exc

    def run(self) -> DriveResult:
        ops = self.workload.ops
        timer: threading.Timer | None = None
        if self.point.after_s is not None:
            timer = threading.Timer(self.point.after_s, self._timer_cut)
            timer.daemon = True
            timer.start()
        ended_before_cut = False
        try:
            for index, op in enumerate(ops):
                if self.point.before_op == index:
                    self.do_cut()
                with self.lock:
                    if self.cut_done and self.post_syncs >= self.continue_syncs:
                        break
                    self.started = index + 1
                self._one(index, op)
                if self.timer_error is not None:
                    raise self.timer_error
        finally:
            if timer is not None:
                timer.cancel()
                timer.join()
        if self.timer_error is not None:
            raise self.timer_error
        if not self.cutting:
            # The workload ran out first (a timer longer than the workload,
            # or a cut point at its very end): cut now, nothing is in flight.
            ended_before_cut = self.point.after_s is not None
            self.do_cut()
        in_flight = [i for i in range(self.promised_index + 1, self.cut_op) if i not in self.skipped]
        return DriveResult(
            promised=self.promised,
            last_mark=mark_name(self.promised - 1) if self.promised else None,
            cut_op=self.cut_op,
            cut_s=self.cut_s,
            cut_swap_s=self.cut_swap_s,
            in_flight_ops=len(in_flight),
            in_flight_bytes=sum(ops[i].length for i in in_flight if needs_data(ops[i])),
            post_cut_ops=self.post_ops,
            post_cut_errors=dict(sorted(self.errors.items())),
            post_cut_promises=list(self.post_promises),
            skipped_ops=len(self.skipped),
            ended_before_cut=ended_before_cut,
            workload_s=clock.monotonic() - self.start,
        )

    def _one(self, index: int, op: Op) -> None:
        data = op_data(self.workload.seed, index, op.length) if needs_data(op) else b""
        ok = True
        try:
            self.perform_op(op, self.root, data)
        except OSError as exc:
            with self.lock:
                after_cut = self.cutting
            if exc.errno in _UNSUPPORTED:  # the filesystem's limit, not the cut's doing
                log.info("op %d (%s) not supported here, skipped", index, op.describe())
                with self.lock:
                    self.skipped.add(index)
                return
            if not after_cut:
                raise WorkloadError(f"workload {self.workload.name!r} op {index} "
                                    f"({op.describe()}) failed before the cut: {exc}") from exc
            # After the cut anything may fail: EIO under error_writes, then
            # EROFS once the filesystem gives up, ENOENT for what a failed
            # op did not create. These are what the workload observed.
            ok = False
            with self.lock:
                self.errors[errno.errorcode.get(exc.errno or 0, str(exc.errno))] += 1
        with self.lock:
            if op.kind in DURABILITY_OPS:
                name = mark_name(self.ordinal)
                self.ordinal += 1
                if not self.cutting:
                    self.done_durable += 1
                    self.last_durable_index = index
                else:
                    self.post_syncs += 1
                    if ok:
                        self.post_promises.append(name)
            if self.cutting:
                self.post_ops += 1


def drive(workload: Workload, root: Path, point: CutPoint, cut: Callable[[], None], *,
          continue_syncs: int = 2, perform_op: PerformOp = perform) -> DriveResult:
    """Run ``workload`` under ``root`` and call ``cut`` at ``point``.

    After the cut the workload goes on until ``continue_syncs`` more
    durability ops have been attempted (or it ends), tolerating every
    error; before the cut only unsupported ops are tolerated (skipped).
    """
    return _Drive(workload, root, point, cut, continue_syncs, perform_op).run()


# --- cut-oracle ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OracleRequest:
    """Run the workload at ``workload_path`` uncut on a fresh ``target``; write its oracle."""

    target: Target
    workload_path: str
    oracle_path: str
    data_dev: str
    journal_dev: str | None = None  # the external journal's disk, for targets with one

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target.to_dict(), "workload_path": self.workload_path,
                "oracle_path": self.oracle_path, "data_dev": self.data_dev,
                "journal_dev": self.journal_dev}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> OracleRequest:
        return cls(target_from_dict(raw["target"]), str(raw["workload_path"]),
                   str(raw["oracle_path"]), str(raw["data_dev"]), raw.get("journal_dev"))


@dataclass(frozen=True, slots=True)
class OracleResult:
    marks: int
    ops: int
    oracle_s: float
    # Where the journal is, in the filesystem's own tool's words (external journals).
    journal_evidence: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> OracleResult:
        return cls(int(raw["marks"]), int(raw["ops"]), float(raw["oracle_s"]),
                   str(raw.get("journal_evidence", "")))


def make_oracle(req: OracleRequest) -> OracleResult:
    """Execute the workload without a cut on a fresh filesystem; keep its oracle."""
    runner = HostRunner()
    workload = Workload.from_json(Path(req.workload_path).read_text())
    start = clock.monotonic()
    mkfs(runner, req.target, req.data_dev, journal_dev=req.journal_dev)
    evidence = journal_evidence(runner, req.target, req.data_dev) if req.journal_dev else ""
    ORACLE_MOUNTPOINT.mkdir(parents=True, exist_ok=True)
    with mounted(runner, req.target, req.data_dev, os.fspath(ORACLE_MOUNTPOINT),
                 journal_dev=req.journal_dev, timeout_s=120):
        oracle = execute(workload, ORACLE_MOUNTPOINT, lambda _name: None)
    Path(req.oracle_path).write_text(oracle.to_json())
    return OracleResult(marks=len(oracle.marks), ops=len(workload.ops),
                        oracle_s=clock.monotonic() - start, journal_evidence=evidence)


def journal_evidence(runner: CommandRunner, target: Target, dev: str) -> str:
    """What the filesystem's own tool says of where ``dev``'s journal is."""
    adapter = adapter_for(target.fstype)
    argv = adapter.journal_location_argv(dev)
    if argv is None:
        return ""
    result = runner.run(argv, timeout_s=60, ok_status=None, env=C_LOCALE)
    lines = adapter.journal_location_lines(result.stdout + result.stderr)
    return f"{' '.join(argv)}: " + (" | ".join(lines) or f"no journal line (exit {result.status})")


CUT_ORACLE = agent.Task("cut-oracle", OracleRequest, OracleResult, make_oracle)


# --- cut-trial -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrialRequest:
    """One trial: cut ``target`` on ``data_dev`` at ``point`` with ``mode``, then check it."""

    target: Target
    key: str  # names the trial in its check result
    workload_path: str
    oracle_path: str
    data_dev: str
    point: CutPoint
    mode: FlakeyMode
    continue_syncs: int = 2
    count_post_cut_promises: bool = False  # positive control: must report data loss
    timeouts: Timeouts = field(default_factory=Timeouts)
    journal_dev: str | None = None  # the external journal's disk, cut with the data disk

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target.to_dict(), "key": self.key,
                "workload_path": self.workload_path, "oracle_path": self.oracle_path,
                "data_dev": self.data_dev, "point": self.point.to_dict(), "mode": self.mode.value,
                "continue_syncs": self.continue_syncs,
                "count_post_cut_promises": self.count_post_cut_promises,
                "timeouts": asdict(self.timeouts), "journal_dev": self.journal_dev}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TrialRequest:
        return cls(target_from_dict(raw["target"]), str(raw["key"]), str(raw["workload_path"]),
                   str(raw["oracle_path"]), str(raw["data_dev"]), CutPoint.from_dict(raw["point"]),
                   FlakeyMode(raw["mode"]), int(raw.get("continue_syncs", 2)),
                   bool(raw.get("count_post_cut_promises", False)),
                   Timeouts(**raw.get("timeouts", {})), raw.get("journal_dev"))


@dataclass(frozen=True, slots=True)
class TrialOutcome:
    """What one trial saw: the live workload around the cut, and the check after recovery."""

    drive: DriveResult
    check: CheckResult
    checked_mark: str | None  # the oracle mark the recovered filesystem was checked against

    def to_dict(self) -> dict[str, Any]:
        return {"drive": self.drive.to_dict(), "check": self.check.to_dict(),
                "checked_mark": self.checked_mark}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TrialOutcome:
        return cls(DriveResult.from_dict(raw["drive"]), CheckResult.from_dict(raw["check"]),
                   raw.get("checked_mark"))


def cut_trial(req: TrialRequest) -> TrialOutcome:
    workload = Workload.from_json(Path(req.workload_path).read_text())
    oracle = OracleLog.load(Path(req.oracle_path))
    return run_trial(HostRunner(), req.target, req.data_dev, workload, oracle, req.point, req.mode,
                     continue_syncs=req.continue_syncs, count_post_cut=req.count_post_cut_promises,
                     key=req.key, timeouts=req.timeouts, journal_dev=req.journal_dev)


CUT_TRIAL = agent.Task("cut-trial", TrialRequest, TrialOutcome, cut_trial)


def run_trial(runner: CommandRunner, target: Target, data_dev: str, workload: Workload,
              oracle: OracleLog, point: CutPoint, mode: FlakeyMode, *, continue_syncs: int,
              count_post_cut: bool, key: str, timeouts: Timeouts,
              live: Path = LIVE_MOUNTPOINT, check_mp: Path = CHECK_MOUNTPOINT,
              forget_caches: Callable[[], None] = drop_caches,
              journal_dev: str | None = None) -> TrialOutcome:
    """One power-cut trial on ``data_dev`` (and the external journal on ``journal_dev``,
    cut at the same instant): the live workload, the cut, the recovery check."""
    if mode not in CUT_MODES:
        raise ConfigError(f"cut mode {mode!r}: expected one of {', '.join(CUT_MODES)}")
    live.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        # A device profile's latency sits under the cut: the filesystem, its recovery and the
        # cut itself see the modelled disk (fs -> dm-flakey -> dm-delay -> disk).
        data_dev = stack.enter_context(
            delayed_path(runner, data_dev, target.delays("data"), name="pc-delay-data"))
        if journal_dev is not None:
            journal_dev = stack.enter_context(
                delayed_path(runner, journal_dev, target.delays("journal"), name="pc-delay-journal"))
        fd = stack.enter_context(flakey_device(runner, data_dev))
        fj = (stack.enter_context(flakey_device(runner, journal_dev, name="pc-flakey-journal"))
              if journal_dev is not None else None)
        disks = [fd] if fj is None else [fd, fj]
        jpath = fj.path if fj is not None else None
        mkfs(runner, target, fd.path, journal_dev=jpath)
        mres = mount_timed(runner, target, fd.path, os.fspath(live), journal_dev=jpath,
                           timeout_s=timeouts.mount_s)
        if not mres.ok:
            raise CommandError(f"mount of fresh {target.name} on {fd.path} failed: {mres.error}")
        try:
            result = drive(workload, live, point, lambda: cut_together(disks, mode),
                           continue_syncs=continue_syncs)
        except BaseException:
            try:
                runner.run(["umount", os.fspath(live)], timeout_s=timeouts.umount_s)
            except Exception as exc:  # teardown must not hide the original error
                log.warning("could not unmount %s: %s", live, exc)
            raise
        # Unmount under the cut table: unmount writes back dirty pages and
        # commits the journal, and at a real power cut none of that would
        # reach the disk either. The cut table is live (resumed), so the
        # unmount completes; only a *suspended* device makes it hang.
        runner.run(["umount", os.fspath(live)], timeout_s=timeouts.umount_s)
        # Drop the block devices' cached buffers while writes still vanish:
        # they hold metadata as the dead filesystem last saw it, not as the
        # disk has it.
        for disk in disks:
            runner.run(["blockdev", "--flushbufs", disk.path], timeout_s=60, ok_status=None)
        restore_together(disks)
        forget_caches()
        last_mark: str | None = result.last_mark
        if count_post_cut and result.post_cut_promises:
            # Positive control: also trust the fsyncs that returned after the
            # cut. The device lied to them, so the check must find data loss.
            last_mark = result.post_cut_promises[-1]
        check = check_state(runner, target, fd.path, check_mp, oracle=oracle, last_mark=last_mark,
                            rules=persistence_rules(target), key=key, timeouts=timeouts,
                            journal_dev=jpath)
    return TrialOutcome(result, check, last_mark)
