"""One benchmark repetition, performed inside the machine as the agent task ``bench-rep``.

A repetition is: fresh mkfs of the target on the data disk (and on the
journal disk for an external journal), timed mount, ``sync`` and dropping
the page, dentry and inode caches, the workload, timed unmount. Doing it
all in one task costs one python start in the guest instead of one
console round trip per step.

Unmount time is not part of the tool's own figures (postmark, fio... time
themselves), but unmount writes back whatever the workload left dirty, so
it is part of what the workload cost to make durable. It is reported
apart, as ``umount_s``, and in ``durable_s`` = tool wall time + unmount.

This module is imported in the guest: it avoids pandas and scipy, whose
import alone takes seconds under an emulated CPU. The request carries the
whole target, not its name: a target from the user's own TOML file exists
only on the host.
"""

from __future__ import annotations

import contextlib
import logging
import platform
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from devicemapper.delay import delayed_path
from framework.bench.workloads import Metric, Scale, get_workload, run_workload
from framework.core import agent, clock
from framework.core.command import CommandRunner
from framework.core.errors import CommandError, ConfigError
from framework.core.machine.local import LocalMachine
from framework.core.syscalls import drop_caches
from recovery import mount as fsmount
from recovery.targets import Target, target_from_dict

log = logging.getLogger(__name__)

DEFAULT_MOUNTPOINT = "/mnt/powercut-bench"

#: Metrics every repetition adds to the workload's own, all lower-is-better seconds.
TIMING_METRICS = ("run_s", "umount_s", "durable_s")


@dataclass(frozen=True, slots=True)
class RepetitionRequest:
    """What one repetition runs: a target and a workload, on which disks."""

    target: Target
    workload: str
    scale: Scale
    data_dev: str
    journal_dev: str | None = None
    mountpoint: str = DEFAULT_MOUNTPOINT
    duration_s: int | None = None  # a timed workload's seconds (None: the scale's)

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target.to_dict(), "workload": self.workload,
                "scale": str(self.scale), "data_dev": self.data_dev,
                "journal_dev": self.journal_dev, "mountpoint": self.mountpoint,
                "duration_s": self.duration_s}

    @classmethod
    def from_dict(cls, t: Mapping[str, Any]) -> RepetitionRequest:
        return cls(
            target=target_from_dict(t["target"]),
            workload=str(t["workload"]),
            scale=Scale(t["scale"]),
            data_dev=str(t["data_dev"]),
            journal_dev=None if t.get("journal_dev") is None else str(t["journal_dev"]),
            mountpoint=str(t.get("mountpoint") or DEFAULT_MOUNTPOINT),
            duration_s=None if t.get("duration_s") is None else int(t["duration_s"]),
        )


@dataclass(frozen=True, slots=True)
class RepetitionResult:
    """The metrics of one repetition and the facts needed to trust them."""

    spec: Target  # the target as the guest ran it (built-in or the user's own)
    workload: str
    scale: Scale
    metrics: tuple[Metric, ...]
    mkfs_s: float
    mount_s: float
    run_s: float
    umount_s: float
    kernel: str
    mount_options: str  # as /proc/mounts shows them: what the kernel really applied
    kernel_messages: tuple[str, ...] = field(default=())

    @property
    def target(self) -> str:
        return self.spec.name

    def metric(self, name: str) -> Metric:
        for m in self.metrics:
            if m.name == name:
                return m
        known = ", ".join(m.name for m in self.metrics)
        raise ConfigError(f"metric {name!r} not reported by {self.workload} (reported: {known})")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(spec=self.spec.to_dict(), scale=str(self.scale),
                 metrics=[asdict(m) for m in self.metrics])
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RepetitionResult:
        return cls(
            spec=target_from_dict(d["spec"]),
            workload=str(d["workload"]),
            scale=Scale(d["scale"]),
            metrics=tuple(Metric(**m) for m in d["metrics"]),
            mkfs_s=float(d["mkfs_s"]),
            mount_s=float(d["mount_s"]),
            run_s=float(d["run_s"]),
            umount_s=float(d["umount_s"]),
            kernel=str(d["kernel"]),
            mount_options=str(d["mount_options"]),
            kernel_messages=tuple(d.get("kernel_messages", ())),
        )


def _mount_options(mountpoint: str) -> str:
    # /proc/mounts escapes spaces as \040; our mountpoint has none.
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1] == mountpoint:
            return fields[3]
    return ""


def run_repetition(runner: CommandRunner, req: RepetitionRequest) -> RepetitionResult:
    """mkfs, mount, drop caches, run the workload, unmount; on this machine."""
    target = req.target
    if target.needs_journal_disk and req.journal_dev is None:
        raise ConfigError(f"target {target.name!r} needs a journal disk, none was given")
    journal_dev = req.journal_dev if target.needs_journal_disk else None
    with contextlib.ExitStack() as stack:
        # The device profiles' latency under the filesystem (fs -> dm-delay -> disk).
        data_dev = stack.enter_context(
            delayed_path(runner, req.data_dev, target.delays("data"), name="pc-delay-data"))
        if journal_dev is not None:
            journal_dev = stack.enter_context(
                delayed_path(runner, journal_dev, target.delays("journal"), name="pc-delay-journal"))
        return _repetition(runner, req, data_dev, journal_dev)


def _repetition(runner: CommandRunner, req: RepetitionRequest, data_dev: str,
                journal_dev: str | None) -> RepetitionResult:
    target = req.target
    workload = get_workload(req.workload, duration_s=req.duration_s)
    start = clock.monotonic()
    fsmount.mkfs(runner, target, data_dev, journal_dev=journal_dev)
    mkfs_s = clock.monotonic() - start
    Path(req.mountpoint).mkdir(parents=True, exist_ok=True)
    mounted = fsmount.mount_timed(runner, target, data_dev, req.mountpoint,
                                  journal_dev=journal_dev, timeout_s=fsmount.UMOUNT_TIMEOUT_S)
    if not mounted.ok:
        raise CommandError(f"mount of {target.name} on {data_dev} failed "
                           f"(status {mounted.status}): {mounted.error.replace(chr(10), ' | ')}")
    try:
        options = _mount_options(req.mountpoint)
        drop_caches()
        start = clock.monotonic()
        metrics = run_workload(runner, workload, req.mountpoint, scale=req.scale)
        run_s = clock.monotonic() - start
    except BaseException:
        try:
            fsmount.umount(runner, req.mountpoint)
        except Exception as exc:  # teardown must not hide the original error
            log.warning("could not unmount %s: %s", req.mountpoint, exc)
        raise
    start = clock.monotonic()
    fsmount.umount(runner, req.mountpoint)
    umount_s = clock.monotonic() - start
    timings = [
        Metric("run_s", run_s, "s", False),
        Metric("umount_s", umount_s, "s", False),
        Metric("durable_s", run_s + umount_s, "s", False),
    ]
    return RepetitionResult(
        spec=target,
        workload=workload.name,
        scale=req.scale,
        metrics=(*metrics, *timings),
        mkfs_s=mkfs_s,
        mount_s=mounted.duration_s,
        run_s=run_s,
        umount_s=umount_s,
        kernel=platform.release(),
        mount_options=options,
        kernel_messages=mounted.kernel_messages,
    )


def _bench_rep(req: RepetitionRequest) -> RepetitionResult:
    # The scratch disks are the only devices this machine may write to.
    devices = {"data": req.data_dev}
    if req.journal_dev is not None:
        devices["journal"] = req.journal_dev
    runner = LocalMachine(devices=devices, rundir=Path(req.mountpoint).parent)
    try:
        return run_repetition(runner, req)
    finally:
        runner.close()


BENCH_REPETITION = agent.Task("bench-rep", RepetitionRequest, RepetitionResult, _bench_rep)
