"""Power-cut runs on dm-flakey: a live workload, a cut, and the recovery after it.

One trial, inside the machine (``cut-trial``): dm-flakey in pass-through
over the data disk, mkfs, mount, and the workload runs with real
syscalls. At the chosen moment (after K durability ops and a seeded number
of the ops that follow, or after T seconds) the table is swapped for
``drop_writes`` or ``error_writes`` with ``suspend --nolockfs``: no
freeze_fs(), so this is a power cut and not a clean snapshot. The workload
goes on for a few more durability ops (writes vanish, or fail with EIO),
the filesystem is unmounted *under the cut table* (what the kernel writes
at unmount, dirty pages and the last journal commit, is lost like
everything else after the cut; the device is resumed, so the unmount does
not hang), the pass-through table is restored and recovery is measured
with ``crashcases.check.check_state``: timed mount (journal replay, with
the kernel's messages), the oracle at the last durability op completed
before the cut, a read of the whole tree, fsck.

The oracle comes from ``cut-oracle``: the same workload executed once,
without a cut, on a fresh filesystem of the same target. The workload is
deterministic (its data is generated from seed and op index) and which ops
a filesystem skips as unsupported depends only on the filesystem, so the
promise at mark ``pc-K`` is the same in every trial, also in trials whose
workload stopped on EIO.

The host side (``run_cut``) boots one guest, computes each trial's cut
point, runs the trials, stores every trial as soon as it is known and
replaces the guest if a trial hangs.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import random
import statistics
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from crashcases.cases import load_case
from crashcases.check import CheckResult, Timeouts, check_state
from crashcases.operations import (
    DURABILITY_OPS,
    Op,
    Workload,
    WorkloadError,
    execute,
    mark_name,
    needs_data,
    op_data,
    perform,
)
from crashcases.oracle import OracleLog
from crashcases.outcomes import Outcome, fails
from crashcases.persistence import for_target
from devicemapper.flakey import FlakeyMode, flakey_device
from framework.core import agent, clock
from framework.core.agent import Emit
from framework.core.command import CommandRunner, HostRunner
from framework.core.errors import (
    CommandError,
    CommandTimeout,
    ConfigError,
    MachineError,
    PowercutError,
)
from framework.core.lifecycle import Run, RunSpec
from framework.core.machine.base import DiskSpec, Machine
from framework.core.store import Store
from recovery.disks import MiB, disk_bytes
from recovery.mount import mkfs, mount_timed, mounted
from recovery.targets import JournalPlacement, Target, get_target

log = logging.getLogger(__name__)

LIVE_MOUNTPOINT = Path("/tmp/powercut/cut-live")
CHECK_MOUNTPOINT = Path("/tmp/powercut/cut-check")
ORACLE_MOUNTPOINT = Path("/tmp/powercut/cut-oracle")
CUT_MODES = (FlakeyMode.DROP_WRITES, FlakeyMode.ERROR_WRITES)
_UNSUPPORTED = {errno.EOPNOTSUPP, errno.ENOTSUP}

MachineFactory = Callable[[Sequence[DiskSpec], Path, tuple[str, ...]], Machine]
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
    def from_dict(cls, raw: dict[str, Any]) -> CutPoint:
        return cls(before_op=raw.get("before_op"), after_s=raw.get("after_s"))


def durability_indices(workload: Workload) -> list[int]:
    return [i for i, op in enumerate(workload.ops) if op.kind in DURABILITY_OPS]


def plan_cut(workload: Workload, *, trial_seed: str, cut_after_ops: int | None = None,
             cut_after_s: float | None = None) -> CutPoint:
    """The cut point of one trial (seeded by ``trial_seed``).

    ``cut_after_s``: the cut is a timer, ``after_s`` seconds into the
    workload. Otherwise the cut comes after durability op number
    ``cut_after_ops`` (seeded in 1..D-1 when None, so that at least one
    durability op runs after the cut) and after a seeded number of the
    non-durability ops that follow it: those are the in-flight ops, whose
    effects a disk may or may not hold.
    """
    if cut_after_s is not None:
        if cut_after_ops is not None:
            raise ConfigError("give either --cut-after-ops or --cut-after-s, not both")
        if cut_after_s <= 0:
            raise ConfigError(f"--cut-after-s must be positive, got {cut_after_s:g}")
        return CutPoint(after_s=float(cut_after_s))
    rng = random.Random(f"powercut-cut:{trial_seed}")
    durable = durability_indices(workload)
    if not durable:
        raise ConfigError(f"case {workload.name!r} has no durability op: nothing is promised, "
                          "so a power cut checks nothing")
    if cut_after_ops is None:
        k = rng.randint(1, max(1, len(durable) - 1))
    else:
        if not 0 <= cut_after_ops <= len(durable):
            raise ConfigError(f"--cut-after-ops {cut_after_ops}: case {workload.name!r} has "
                              f"{len(durable)} durability ops")
        k = cut_after_ops
    start = durable[k - 1] + 1 if k > 0 else 0
    stop = durable[k] if k < len(durable) else len(workload.ops)
    # Anything from "right after the promise" to "right before the next one".
    return CutPoint(before_op=rng.randint(start, stop))


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
    def from_dict(cls, raw: dict[str, Any]) -> DriveResult:
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


# --- agent tasks ---------------------------------------------------------------


def drop_caches() -> None:
    """Forget cached pages so the recovery mount reads what the disk holds."""
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


@agent.task("cut-oracle")
def make_oracle(task: dict[str, Any], emit: Emit) -> None:
    """Execute the workload without a cut on a fresh filesystem; keep its oracle."""
    runner = HostRunner()
    target = get_target(task["target"])
    workload = Workload.from_json(Path(task["workload_path"]).read_text())
    start = clock.monotonic()
    mkfs(runner, target, task["data_dev"])
    ORACLE_MOUNTPOINT.mkdir(parents=True, exist_ok=True)
    with mounted(runner, target, task["data_dev"], os.fspath(ORACLE_MOUNTPOINT), timeout_s=120):
        oracle = execute(workload, ORACLE_MOUNTPOINT, lambda _name: None)
    Path(task["oracle_path"]).write_text(oracle.to_json())
    emit({"result": {"marks": len(oracle.marks), "ops": len(workload.ops),
                     "oracle_s": clock.monotonic() - start}})


@agent.task("cut-trial")
def cut_trial(task: dict[str, Any], emit: Emit) -> None:
    runner = HostRunner()
    target = get_target(task["target"])
    workload = Workload.from_json(Path(task["workload_path"]).read_text())
    oracle = OracleLog.from_json(Path(task["oracle_path"]).read_text())
    point = CutPoint.from_dict(task["point"])
    mode = FlakeyMode(task["mode"])
    timeouts = Timeouts(**task.get("timeouts", {}))
    outcome = run_trial(runner, target, task["data_dev"], workload, oracle, point, mode,
                        continue_syncs=int(task.get("continue_syncs", 2)),
                        count_post_cut=bool(task.get("count_post_cut_promises", False)),
                        key=str(task.get("key", "trial")), timeouts=timeouts)
    emit({"result": outcome})


def run_trial(runner: CommandRunner, target: Target, data_dev: str, workload: Workload,
              oracle: OracleLog, point: CutPoint, mode: FlakeyMode, *, continue_syncs: int,
              count_post_cut: bool, key: str, timeouts: Timeouts,
              live: Path = LIVE_MOUNTPOINT, check_mp: Path = CHECK_MOUNTPOINT,
              forget_caches: Callable[[], None] = drop_caches) -> dict[str, Any]:
    """One power-cut trial on ``data_dev``; returns the drive and the check as a dict."""
    if mode not in CUT_MODES:
        raise ConfigError(f"cut mode {mode!r}: expected one of {', '.join(CUT_MODES)}")
    live.mkdir(parents=True, exist_ok=True)
    with flakey_device(runner, data_dev) as fd:
        mkfs(runner, target, fd.path)
        mres = mount_timed(runner, target, fd.path, os.fspath(live), timeout_s=timeouts.mount_s)
        if not mres.ok:
            raise CommandError(f"mount of fresh {target.name} on {fd.path} failed: {mres.error}")
        try:
            result = drive(workload, live, point, lambda: fd.cut(mode), continue_syncs=continue_syncs)
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
        # Drop the block device's cached buffers while writes still vanish:
        # they hold metadata as the dead filesystem last saw it, not as the
        # disk has it.
        runner.run(["blockdev", "--flushbufs", fd.path], timeout_s=60, ok_status=None)
        fd.restore()
        forget_caches()
        last_mark: str | None = result.last_mark
        if count_post_cut and result.post_cut_promises:
            # Positive control: also trust the fsyncs that returned after the
            # cut. The device lied to them, so the check must find data loss.
            last_mark = result.post_cut_promises[-1]
        check = check_state(runner, target, fd.path, check_mp, oracle=oracle, last_mark=last_mark,
                            rules=for_target(target), key=key, timeouts=timeouts)
    return {"drive": result.to_dict(), "check": check.to_dict(), "checked_mark": last_mark}


# --- the host side -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CutPlan:
    targets: tuple[str, ...]
    case: str
    trials: int = 5
    seed: int = 0
    cut_after_ops: int | None = None
    cut_after_s: float | None = None
    mode: FlakeyMode = FlakeyMode.DROP_WRITES
    continue_syncs: int = 2
    max_sequences: int | None = None
    data_mib: int | None = None
    count_post_cut_promises: bool = False  # positive control: must report data loss
    trial_timeout_s: float = 900.0


@dataclass
class TrialResult:
    target: str
    trial: int
    point: CutPoint
    outcome: Outcome
    drive: DriveResult | None
    check: CheckResult | None
    checked_mark: str | None = None
    notes: list[str] = field(default_factory=list)

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
                "mount_s": self.mount_s, "fsck_s": self.fsck_s}


@dataclass
class CutRunResult:
    run_dir: Path
    plan: CutPlan
    trials: list[TrialResult] = field(default_factory=list)
    replacements: int = 0
    wall_s: float = 0.0
    run_id: int | None = None

    def for_target(self, target: str) -> list[TrialResult]:
        return [t for t in self.trials if t.target == target]

    def to_dict(self) -> dict[str, Any]:
        plan = asdict(self.plan)
        plan["mode"] = self.plan.mode.value
        return {"run_dir": os.fspath(self.run_dir), "plan": plan, "run_id": self.run_id,
                "replacements": self.replacements, "wall_s": self.wall_s,
                "summaries": [summarize(t, self.for_target(t)).to_dict() for t in self.plan.targets],
                "trials": [t.to_dict() for t in self.trials]}


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


def summarize(target: str, trials: Sequence[TrialResult]) -> TargetSummary:
    mounts = [t.mount_s for t in trials if t.mount_s is not None]
    fscks = [t.fsck_s for t in trials if t.fsck_s is not None]
    drives = [t.drive for t in trials if t.drive is not None]
    errors: Counter[str] = Counter()
    for d in drives:
        errors.update(d.post_cut_errors)
    spec = get_target(target)
    return TargetSummary(
        target=target,
        trials=len(trials),
        outcomes={o.value: n for o in Outcome if (n := sum(1 for t in trials if t.outcome is o))},
        failing=sum(1 for t in trials if fails(t.outcome, spec)),
        mount_median_s=statistics.median(mounts) if mounts else None,
        mount_p90_s=float(np.percentile(mounts, 90)) if mounts else None,
        mount_max_s=max(mounts) if mounts else None,
        fsck_median_s=statistics.median(fscks) if fscks else None,
        fsck_max_s=max(fscks) if fscks else None,
        in_flight_ops_median=statistics.median([d.in_flight_ops for d in drives]) if drives else None,
        in_flight_bytes_median=statistics.median([d.in_flight_bytes for d in drives]) if drives else None,
        post_cut_errors=dict(sorted(errors.items())),
    )



def slug(target: str) -> str:
    return target.replace("/", "-")


def timeouts_for(budget_s: float) -> Timeouts:
    return Timeouts(mount_s=budget_s / 4, fsck_s=budget_s / 4, umount_s=max(budget_s / 10, 10))


def validate_cut_plan(plan: CutPlan) -> tuple[list[Target], Workload]:
    """Fail on bad options before anything is created or a guest boots."""
    if plan.trials < 1:
        raise ConfigError(f"--trials must be at least 1, got {plan.trials}")
    if plan.continue_syncs < 0:
        raise ConfigError(f"continue_syncs must not be negative, got {plan.continue_syncs}")
    if FlakeyMode(plan.mode) not in CUT_MODES:
        raise ConfigError(f"--mode {plan.mode}: expected drop_writes or error_writes")
    targets = [get_target(t) for t in plan.targets]
    for t in targets:
        if t.journal is JournalPlacement.EXTERNAL:
            raise ConfigError(f"target {t.name}: power-cut runs cut one disk; an external "
                              "journal on a second disk would outlive the cut")
    return targets, load_case(plan.case, seed=plan.seed, max_sequences=plan.max_sequences)


class CutEngine:
    """Boots a guest, prepares each target's oracle, runs the trials, replaces hung guests."""

    def __init__(self, plan: CutPlan, run_dir: Path, factory: MachineFactory, *,
                 store: Store | None = None, run_id: int | None = None,
                 progress: Callable[[TrialResult], None] | None = None,
                 checked: tuple[list[Target], Workload] | None = None) -> None:
        self.plan, self.run_dir, self.factory = plan, run_dir, factory
        self.store, self.run_id, self.progress = store, run_id, progress
        # ``checked``: validate_cut_plan() already ran (run_cut validates first).
        self.targets, self.workload = checked or validate_cut_plan(plan)
        self.vm_dir = run_dir / "vm"
        self.disks = [DiskSpec("data", disk_bytes(
            self.targets, data_bytes=plan.data_mib * MiB if plan.data_mib else None)["data"])]
        self.fstypes = tuple(dict.fromkeys(t.fstype for t in self.targets))
        self.machine: Machine | None = None
        self.replacements = 0
        self.oracles: set[str] = set()

    def _machine(self) -> Machine:
        if self.machine is None:
            self.machine = self.factory(self.disks, self.vm_dir, self.fstypes)
            self.oracles.clear()  # made on the data disk, which a new guest gets afresh
            (self.vm_dir / "workload.json").write_text(self.workload.to_json())
        return self.machine

    def _replace(self) -> None:
        if self.machine is not None:
            with contextlib.suppress(Exception):
                self.machine.close()
        self.machine = None
        self.replacements += 1

    def close(self) -> None:
        if self.machine is not None:
            self.machine.close()
            self.machine = None

    def _oracle_path(self, target: str) -> Path:
        return self.vm_dir / f"oracle-{slug(target)}.json"

    def _ensure_oracle(self, machine: Machine, target: str) -> None:
        if target in self.oracles:
            return
        agent.call(machine, {"task": "cut-oracle", "target": target,
                             "workload_path": os.fspath(self.vm_dir / "workload.json"),
                             "oracle_path": os.fspath(self._oracle_path(target)),
                             "data_dev": machine.disk("data")},
                   timeout_s=self.plan.trial_timeout_s)
        self.oracles.add(target)

    def point_for(self, target: str, trial: int) -> CutPoint:
        return plan_cut(self.workload, trial_seed=f"{self.plan.seed}:{target}:{trial}",
                        cut_after_ops=self.plan.cut_after_ops, cut_after_s=self.plan.cut_after_s)

    def run_trial(self, target: str, trial: int) -> TrialResult:
        point = self.point_for(target, trial)
        machine = self._machine()
        self._ensure_oracle(machine, target)
        task = {"task": "cut-trial", "target": target, "key": f"{target}#{trial}",
                "workload_path": os.fspath(self.vm_dir / "workload.json"),
                "oracle_path": os.fspath(self._oracle_path(target)),
                "data_dev": machine.disk("data"), "point": point.to_dict(),
                "mode": FlakeyMode(self.plan.mode).value, "continue_syncs": self.plan.continue_syncs,
                "count_post_cut_promises": self.plan.count_post_cut_promises,
                "timeouts": asdict(timeouts_for(self.plan.trial_timeout_s * 0.8))}
        try:
            raw = agent.call(machine, task, timeout_s=self.plan.trial_timeout_s)[-1]
        except (CommandTimeout, MachineError) as exc:
            # A step stuck in the kernel (or a guest that stopped answering):
            # a finding for this trial; nothing in that guest is trusted after it.
            log.warning("trial %d on %s hung: %s", trial, target, exc)
            self._replace()
            return TrialResult(target, trial, point, Outcome.HANG, None, None, notes=[str(exc)])
        check = CheckResult.from_dict(raw["check"])
        return TrialResult(target, trial, point, check.outcome, DriveResult.from_dict(raw["drive"]),
                           check, checked_mark=raw.get("checked_mark"))

    def record(self, result: TrialResult) -> None:
        if self.store is None or self.run_id is None:
            return
        d = result.drive
        self.store.add_recovery(
            self.run_id, result.target, trial=result.trial, outcome=result.outcome,
            seed=self.plan.seed, in_flight_bytes=d.in_flight_bytes if d else None,
            in_flight_ops=d.in_flight_ops if d else None, mount_s=result.mount_s,
            fsck_s=result.fsck_s,
            replay_messages=result.check.replay_messages if result.check else ())


def run_spec(plan: CutPlan) -> RunSpec:
    """How a power-cut run of ``plan`` is recorded (see framework.core.lifecycle)."""
    plan_doc = asdict(plan)
    plan_doc["mode"] = FlakeyMode(plan.mode).value
    targets = {t: {**get_target(t).to_dict(), "case": plan.case, "mode": plan_doc["mode"]}
               for t in plan.targets}
    return RunSpec("cut", f"cut {' '.join(plan.targets)} {plan.case}", plan=plan_doc,
                   seeds={"workload": plan.seed}, targets=targets)


def run_cut(plan: CutPlan, run: Run, factory: MachineFactory, *,
            progress: Callable[[TrialResult], None] | None = None,
            checked: tuple[list[Target], Workload] | None = None) -> CutRunResult:
    """All trials of ``plan`` inside ``run``; each is stored and saved as soon as it is known."""
    start = clock.monotonic()
    checked = checked or validate_cut_plan(plan)
    result = CutRunResult(run.run_dir, plan, run_id=run.run_id)

    def booted(disks: Sequence[DiskSpec], rundir: Path, fstypes: tuple[str, ...]) -> Machine:
        return run.started(factory(disks, rundir, fstypes))

    engine: CutEngine | None = None
    try:
        engine = CutEngine(plan, run.run_dir, booted, store=run.store, run_id=run.run_id,
                           progress=progress, checked=checked)
        for target in plan.targets:
            for trial in range(plan.trials):
                tr = engine.run_trial(target, trial)
                result.trials.append(tr)
                engine.record(tr)
                run.save_json("results.json", result.to_dict())
                if progress is not None:
                    progress(tr)
        return result
    finally:
        if engine is not None:
            result.replacements = engine.replacements
            engine.close()
        result.wall_s = clock.monotonic() - start
        with contextlib.suppress(PowercutError, OSError):
            run.save_json("results.json", result.to_dict())
