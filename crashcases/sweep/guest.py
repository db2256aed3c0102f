"""One point of a recovery sweep, inside the machine: a filesystem of a given size, files and
work in flight, a power cut, and the recovery timed step by step.

``sweep-point``: dm-flakey in pass-through over the data disk (and over the
journal disk of a target whose journal has one); mkfs of ``size_mib`` on a
prefix of the disk; mount; ``files`` small files (4 KiB, 100 to a
directory) and ``sync``; unmount and mount again, so the journal starts
empty and checkpointed; then the work in flight: ``dirty_mib`` of new data
in 256 KiB files, each fsynced (a journal commit: ext4 and XFS leave the
committed metadata for a later checkpoint, btrfs puts it in its log tree).
Right after the last fsync returns both disks are cut together
(``drop_writes``, ``suspend --nolockfs``: no freeze), the filesystem is
unmounted under the cut table, and the pass-through table comes back.

Then, in this order, each step timed on its own:

1. where the checker can replay the journal alone (e2fsck ``-E
   journal_only``), it does so on a throwaway dm-snapshot of the crashed
   disks, so the mount below still finds the journal as the cut left it;
2. a target without a journal gets its repairing fsck here, as at boot;
3. the mount (the kernel's journal replay, with its messages);
4. the light oracle: every populated file is there, every fsynced file
   has its size and bytes;
5. after the unmount, a forced full read-only fsck (``e2fsck -f -n``,
   ``xfs_repair -n``, ``btrfs check --readonly``).

The guest runs it as its own small program (``framework.cli.sweepguest``):
importing the whole guest program (every task, the crash checker and its
oracle) costs seconds per point over 9p under an emulated CPU, more than
most points' recovery. So this module keeps to what a point needs (no
crash checker, no numpy). The host side is ``crashcases.sweep.engine``.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from crashcases.vocabulary import Outcome, worst
from devicemapper.flakey import FlakeyMode, cut_together, flakey_device, restore_together
from devicemapper.snapshot import throwaway_snapshot
from framework.core import agent, clock
from framework.core.command import CommandRunner, HostRunner
from framework.core.errors import CommandError
from framework.core.syscalls import drop_caches
from recovery.filesystems import FsckVerdict, adapter_for
from recovery.fsck import FsckResult, run_fsck, run_journal_only
from recovery.mount import Timeouts, mkfs, mount_timed, umount
from recovery.targets import Target, target_from_dict

MiB = 1 << 20
# The guest covers /mnt with a tmpfs of its own (framework.core.machine.initramfs).
LIVE_MOUNTPOINT = Path("/mnt/powercut-sweep")
FILE_BYTES = 4096  # each populated file: one block, so fsck has an inode and a block to walk
FILES_PER_DIR = 100
DIRTY_FILE_BYTES = 256 * 1024  # the work in flight comes in files of this size, each fsynced
POPULATED = "populated"
IN_FLIGHT = "in-flight"


@dataclass(frozen=True, slots=True)
class PointRequest:
    """One sweep point: ``target`` (its journal size set, if swept) made ``size_mib`` large."""

    target: Target
    key: str
    data_dev: str
    size_mib: int
    files: int
    dirty_mib: int
    seed: int = 0
    journal_dev: str | None = None  # the external journal's disk
    cow_dev: str | None = None  # scratch disk for the snapshot the checker's replay writes to
    cow_journal_dev: str | None = None  # the same for the external journal's snapshot
    timeouts: Timeouts = field(default_factory=Timeouts)

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target.to_dict(), "key": self.key, "data_dev": self.data_dev,
                "size_mib": self.size_mib, "files": self.files, "dirty_mib": self.dirty_mib,
                "seed": self.seed, "journal_dev": self.journal_dev, "cow_dev": self.cow_dev,
                "cow_journal_dev": self.cow_journal_dev, "timeouts": asdict(self.timeouts)}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> PointRequest:
        return cls(target_from_dict(raw["target"]), str(raw["key"]), str(raw["data_dev"]),
                   int(raw["size_mib"]), int(raw["files"]), int(raw["dirty_mib"]),
                   int(raw.get("seed", 0)), raw.get("journal_dev"), raw.get("cow_dev"),
                   raw.get("cow_journal_dev"), Timeouts(**raw.get("timeouts", {})))


@dataclass(frozen=True, slots=True)
class PointResult:
    """What one point measured; durations in seconds, None where the step did not run."""

    outcome: Outcome
    mkfs_s: float
    populate_s: float
    dirty_s: float  # writing and fsyncing the work in flight
    cut_swap_s: float
    journal_only_s: float | None  # the checker's journal-only replay (on a snapshot)
    journal_only_verdict: str | None
    journal_only_says: str  # the checker's last lines ("recovering journal" when it replayed)
    mount_s: float | None  # the kernel's journal replay at mount
    replay_messages: tuple[str, ...]
    fsck_s: float | None  # the forced full fsck
    fsck_verdict: str | None
    fsck_repair: bool  # True: the fsck repaired before the mount (no journal)
    files_found: int  # populated files seen after recovery
    dirty_files_ok: int  # fsynced files with their size and bytes after recovery
    dirty_files: int
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["outcome"] = self.outcome.value
        d["replay_messages"] = list(self.replay_messages)
        d["notes"] = list(self.notes)
        return d

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> PointResult:
        d = dict(raw)
        d["outcome"] = Outcome(d["outcome"])
        d["replay_messages"] = tuple(d.get("replay_messages", ()))
        d["notes"] = tuple(d.get("notes", ()))
        return cls(**d)


# --- the filesystem's contents ---------------------------------------------------


def populated_path(root: Path, index: int) -> Path:
    return root / POPULATED / f"d{index // FILES_PER_DIR:04d}" / f"f{index:06d}"


def in_flight_path(root: Path, index: int) -> Path:
    return root / IN_FLIGHT / f"w{index:05d}"


def dirty_file_count(dirty_mib: int) -> int:
    return dirty_mib * MiB // DIRTY_FILE_BYTES


def in_flight_bytes(seed: int, index: int) -> bytes:
    """The content of in-flight file ``index``: seeded, and different in every file."""
    base = random.Random(f"powercut-sweep:{seed}").randbytes(DIRTY_FILE_BYTES)
    return index.to_bytes(8, "little") + base[8:]


def populate(root: Path, files: int) -> None:
    """``files`` files of FILE_BYTES under ``root``, FILES_PER_DIR to a directory."""
    block = b"p" * FILE_BYTES
    for index in range(files):
        path = populated_path(root, index)
        if index % FILES_PER_DIR == 0:
            path.parent.mkdir(parents=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, block)
        finally:
            os.close(fd)


def write_in_flight(root: Path, dirty_mib: int, seed: int) -> int:
    """The work in flight: ``dirty_mib`` in new files, each fsynced (a journal commit), and
    their directory fsynced last; the number of files."""
    count = dirty_file_count(dirty_mib)
    if count == 0:
        return 0
    (root / IN_FLIGHT).mkdir()
    for index in range(count):
        fd = os.open(in_flight_path(root, index), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, in_flight_bytes(seed, index))
            os.fsync(fd)
        finally:
            os.close(fd)
    dfd = os.open(root / IN_FLIGHT, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return count


def verify(root: Path, files: int, dirty_files: int, seed: int) -> tuple[int, int, list[str]]:
    """The light oracle: (populated files found, fsynced files intact, what is missing)."""
    missing: list[str] = []
    found = 0
    for index in range(files):
        path = populated_path(root, index)
        try:
            if path.stat().st_size == FILE_BYTES:
                found += 1
                continue
        except OSError:
            pass
        missing.append(os.fspath(path.relative_to(root)))
    ok = 0
    for index in range(dirty_files):
        path = in_flight_path(root, index)
        try:
            if path.read_bytes() == in_flight_bytes(seed, index):
                ok += 1
                continue
        except OSError:
            pass
        missing.append(os.fspath(path.relative_to(root)))
    return found, ok, missing


# --- one point ----------------------------------------------------------------------


def _fsck_outcome(result: FsckResult, *, repaired_ok: bool) -> Outcome:
    if result.verdict is FsckVerdict.CLEAN:
        return Outcome.OK
    if result.verdict is FsckVerdict.REPAIRED:
        return Outcome.OK if repaired_ok else Outcome.RECOVERED
    return Outcome.CORRUPT


def sweep_point(req: PointRequest) -> PointResult:
    return run_point(HostRunner(), req)


SWEEP_POINT = agent.Task("sweep-point", PointRequest, PointResult, sweep_point)


def run_point(runner: CommandRunner, req: PointRequest, *, live: Path = LIVE_MOUNTPOINT,
              forget_caches: Callable[[], None] = drop_caches) -> PointResult:
    """Make, fill, cut and recover one point; every step's time in the result."""
    target, t = req.target, req.timeouts
    adapter = adapter_for(target.fstype)
    live.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    with contextlib.ExitStack() as stack:
        fd = stack.enter_context(flakey_device(runner, req.data_dev))
        fj = (stack.enter_context(flakey_device(runner, req.journal_dev, name="pc-flakey-journal"))
              if req.journal_dev is not None else None)
        disks = [fd] if fj is None else [fd, fj]
        jpath = fj.path if fj is not None else None
        start = clock.monotonic()
        mkfs(runner, target, fd.path, journal_dev=jpath, size_bytes=req.size_mib * MiB)
        mkfs_s = clock.monotonic() - start

        def mount_live() -> None:
            mres = mount_timed(runner, target, fd.path, os.fspath(live), journal_dev=jpath,
                               timeout_s=t.mount_s)
            if not mres.ok:
                raise CommandError(f"mount of {target.name} on {fd.path} before the cut "
                                   f"failed: {mres.error}")

        mount_live()
        try:
            start = clock.monotonic()
            populate(live, req.files)
            os.sync()
            populate_s = clock.monotonic() - start
            # A clean unmount checkpoints the journal: what the cut leaves to replay is
            # the work in flight alone, not the population.
            umount(runner, os.fspath(live), timeout_s=t.umount_s)
            mount_live()
            start = clock.monotonic()
            dirty_files = write_in_flight(live, req.dirty_mib, req.seed)
            dirty_s = clock.monotonic() - start
            start = clock.monotonic()
            cut_together(disks, FlakeyMode.DROP_WRITES)
            cut_swap_s = clock.monotonic() - start
        except BaseException:
            with contextlib.suppress(Exception):
                umount(runner, os.fspath(live), timeout_s=t.umount_s)
            raise
        # Unmount under the cut table: what it writes would be lost at a power cut too.
        umount(runner, os.fspath(live), timeout_s=t.umount_s)
        for disk in disks:
            # Cached buffers hold metadata as the dead filesystem saw it, not as the disk has it.
            runner.run(["blockdev", "--flushbufs", disk.path], timeout_s=60, ok_status=None)
        restore_together(disks)
        forget_caches()

        journal_only: FsckResult | None = None
        if (target.journalled and req.cow_dev is not None
                and adapter.journal_only_argv(fd.path) is not None):
            journal_only = _journal_only_on_snapshot(runner, req, fd.path, jpath, t)
            forget_caches()

        outcome = Outcome.OK
        fsck: FsckResult | None = None
        if not target.journalled:
            # No journal: the checker is the recovery, before the mount, as at boot.
            fsck = run_fsck(runner, target, fd.path, repair=True, journal_dev=jpath,
                            timeout_s=t.fsck_s)
            outcome = _fsck_outcome(fsck, repaired_ok=True)
            forget_caches()
        mres = mount_timed(runner, target, fd.path, os.fspath(live), journal_dev=jpath,
                           timeout_s=t.mount_s)
        found = dirty_ok = 0
        if not mres.ok:
            outcome = worst(outcome, Outcome.UNMOUNTABLE)
            notes.append(f"mount after the cut failed: {mres.error}")
        else:
            try:
                found, dirty_ok, missing = verify(live, req.files, dirty_files, req.seed)
            finally:
                umount(runner, os.fspath(live), timeout_s=t.umount_s)
            if missing:
                outcome = worst(outcome, Outcome.DATA_LOSS)
                notes.append(f"{len(missing)} files missing or wrong, e.g. {', '.join(missing[:3])}")
        if target.journalled:
            forget_caches()
            fsck = run_fsck(runner, target, fd.path, repair=False, journal_dev=jpath,
                            timeout_s=t.fsck_s)
            outcome = worst(outcome, _fsck_outcome(fsck, repaired_ok=False))
        if fsck is not None and fsck.verdict not in (FsckVerdict.CLEAN, FsckVerdict.REPAIRED):
            notes.append(f"fsck {fsck.verdict}: {fsck.output_tail.splitlines()[-1:] or ''}")
    return PointResult(
        outcome=outcome, mkfs_s=mkfs_s, populate_s=populate_s, dirty_s=dirty_s,
        cut_swap_s=cut_swap_s,
        journal_only_s=journal_only.duration_s if journal_only is not None else None,
        journal_only_verdict=journal_only.verdict.value if journal_only is not None else None,
        journal_only_says=journal_only.output_tail[-500:] if journal_only is not None else "",
        mount_s=mres.duration_s if mres.ok else None, replay_messages=mres.replay_messages,
        fsck_s=fsck.duration_s if fsck is not None else None,
        fsck_verdict=fsck.verdict.value if fsck is not None else None,
        fsck_repair=not target.journalled, files_found=found, dirty_files_ok=dirty_ok,
        dirty_files=dirty_files, notes=tuple(notes))


def _journal_only_on_snapshot(runner: CommandRunner, req: PointRequest, dev: str,
                              jdev: str | None, t: Timeouts) -> FsckResult | None:
    """The checker's journal-only replay on throwaway snapshots of the crashed disks: it
    writes there, and the disks keep the journal for the mount that follows."""
    if req.cow_dev is None or (jdev is not None and req.cow_journal_dev is None):
        return None  # never on the disks themselves: the mount must find the journal intact
    with contextlib.ExitStack() as stack:
        snap = stack.enter_context(throwaway_snapshot(runner, dev, req.cow_dev,
                                                      name="pc-sweep-snap"))
        jsnap = None
        if jdev is not None and req.cow_journal_dev is not None:  # both, or neither above
            jsnap = stack.enter_context(throwaway_snapshot(runner, jdev, req.cow_journal_dev,
                                                           name="pc-sweep-snap-journal"))
        return run_journal_only(runner, req.target, snap.path,
                                journal_dev=jsnap.path if jsnap is not None else None,
                                timeout_s=t.fsck_s)
