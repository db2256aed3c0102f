"""Real mkfs, mount, fsck on loop devices over sparse files (root on the host)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from framework.core import command
from framework.core.machine import LocalMachine
from framework.core.machine.base import DiskSpec
from recovery.filesystems import adapter_for
from recovery.filesystems.base import FsckVerdict
from recovery.fsck import run_fsck
from recovery.mount import missing_prerequisites, mkfs, mount_timed, mounted, umount
from recovery.targets import Target, get_target

pytestmark = [
    pytest.mark.host_root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for loop devices and mount"),
    pytest.mark.skipif(shutil.which("losetup") is None, reason="needs losetup (util-linux)"),
]

MIB = 1024 * 1024
MachineFactory = Callable[[Target], LocalMachine]
TIMEOUT_S = 60.0


def _data_size(target: Target) -> int:
    # Sparse files: the size costs nothing until written. XFS needs > 300 MiB.
    return max(128 * MIB, adapter_for(target.fstype).min_size_bytes)


@pytest.fixture
def machine_for(tmp_path: Path) -> Iterator[MachineFactory]:
    """Build a LocalMachine with a data (and journal) loop disk for a target; detach after."""
    made: list[LocalMachine] = []

    def make(target: Target) -> LocalMachine:
        disks = [DiskSpec("data", _data_size(target))]
        if target.needs_journal_disk:
            journal_bytes = max(32 * MIB, adapter_for(target.fstype).min_journal_size_bytes)
            disks.append(DiskSpec("journal", journal_bytes))
        machine = LocalMachine(disks=disks, rundir=tmp_path)
        made.append(machine)
        return machine

    yield make
    for machine in made:
        machine.close()


def _skip_unless_tools(machine: LocalMachine, target: Target, *, kernel: bool) -> None:
    missing = missing_prerequisites(machine, target)
    if not kernel:
        missing = [m for m in missing if not m.startswith("kernel filesystem")]
    if missing:
        pytest.skip(f"{target.name}: missing {'; '.join(missing)}")


def _disks(machine: LocalMachine, target: Target) -> tuple[str, str | None]:
    return machine.disk("data"), machine.disk("journal") if target.needs_journal_disk else None


def _mountpoint(tmp_path: Path) -> str:
    mnt = tmp_path / "mnt"
    mnt.mkdir(exist_ok=True)
    return os.fspath(mnt)


@pytest.mark.parametrize(
    "name", ["ext2", "ext4/ordered", "ext3/logdev", "ext4/logdev", "xfs", "xfs/logdev", "btrfs",
             "f2fs", "jfs", "reiserfs"],
)
def test_mkfs_mount_write_umount_check_clean(name: str, machine_for: MachineFactory, tmp_path: Path) -> None:
    target = get_target(name)
    machine = machine_for(target)
    _skip_unless_tools(machine, target, kernel=True)
    dev, journal = _disks(machine, target)
    mkfs(machine, target, dev, journal_dev=journal)
    mnt = _mountpoint(tmp_path)
    with mounted(machine, target, dev, mnt, journal_dev=journal, timeout_s=TIMEOUT_S) as result:
        assert result.ok
        assert result.duration_s > 0
        assert result.replay_messages == ()  # fresh filesystem: nothing to replay
        payload = os.urandom(64 * 1024)
        with open(os.path.join(mnt, "file"), "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
    check = run_fsck(machine, target, dev, repair=False, journal_dev=journal, timeout_s=TIMEOUT_S)
    assert check.verdict is FsckVerdict.CLEAN, check.output_tail
    with (
        mounted(machine, target, dev, mnt, journal_dev=journal, readonly=True, timeout_s=TIMEOUT_S),
        open(os.path.join(mnt, "file"), "rb") as f,
    ):
        assert f.read() == payload


@pytest.mark.parametrize("name", ["f2fs", "jfs", "jfs/logdev", "reiserfs"])
def test_tools_alone_make_and_check_a_clean_filesystem(name: str, machine_for: MachineFactory) -> None:
    """mkfs and fsck are user space: their argv is checked even where the kernel lacks the fs."""
    target = get_target(name)
    machine = machine_for(target)
    _skip_unless_tools(machine, target, kernel=False)
    dev, journal = _disks(machine, target)
    mkfs(machine, target, dev, journal_dev=journal)
    for repair in (False, True):
        result = run_fsck(machine, target, dev, repair=repair, journal_dev=journal, timeout_s=TIMEOUT_S)
        assert result.verdict is FsckVerdict.CLEAN, result.output_tail


def _make_file(machine: LocalMachine, target: Target, dev: str, tmp_path: Path) -> int:
    """Mount, write one file, unmount; the file's inode number."""
    mnt = _mountpoint(tmp_path)
    with mounted(machine, target, dev, mnt, timeout_s=TIMEOUT_S):
        path = os.path.join(mnt, "victim")
        with open(path, "wb") as f:
            f.write(b"x" * 4096)
        return os.stat(path).st_ino


def test_positive_control_ext4_cleared_inode(machine_for: MachineFactory, tmp_path: Path) -> None:
    target = get_target("ext4/ordered")
    machine = machine_for(target)
    _skip_unless_tools(machine, target, kernel=True)
    dev = machine.disk("data")
    mkfs(machine, target, dev)
    ino = _make_file(machine, target, dev, tmp_path)
    # Clear the inode behind a live directory entry: e2fsck must notice.
    command.run(["debugfs", "-w", "-R", f"clri <{ino}>", dev])
    check = run_fsck(machine, target, dev, repair=False, timeout_s=TIMEOUT_S)
    assert check.verdict is FsckVerdict.CORRUPT, check.output_tail
    assert check.status & 4
    repair = run_fsck(machine, target, dev, repair=True, timeout_s=TIMEOUT_S)
    assert repair.verdict is FsckVerdict.REPAIRED, repair.output_tail
    again = run_fsck(machine, target, dev, repair=False, timeout_s=TIMEOUT_S)
    assert again.verdict is FsckVerdict.CLEAN, again.output_tail


def test_positive_control_xfs_wrong_link_count(machine_for: MachineFactory, tmp_path: Path) -> None:
    target = get_target("xfs")
    machine = machine_for(target)
    _skip_unless_tools(machine, target, kernel=True)
    dev = machine.disk("data")
    mkfs(machine, target, dev)
    ino = _make_file(machine, target, dev, tmp_path)
    # xfs_db recomputes the inode CRC, so only the link count is wrong.
    command.run(["xfs_db", "-x", "-c", f"inode {ino}", "-c", "write core.nlinkv2 7", dev])
    check = run_fsck(machine, target, dev, repair=False, timeout_s=TIMEOUT_S)
    assert check.verdict is FsckVerdict.CORRUPT, check.output_tail
    repair = run_fsck(machine, target, dev, repair=True, timeout_s=TIMEOUT_S)
    assert repair.verdict is FsckVerdict.REPAIRED, repair.output_tail
    again = run_fsck(machine, target, dev, repair=False, timeout_s=TIMEOUT_S)
    assert again.verdict is FsckVerdict.CLEAN, again.output_tail


@pytest.mark.parametrize("name", ["ext4/ordered", "xfs"])
def test_mount_after_shutdown_reports_journal_replay(name: str, machine_for: MachineFactory, tmp_path: Path) -> None:
    """Shut the fs down with fsynced data only in the journal; the next mount must replay it."""
    if shutil.which("xfs_io") is None:
        pytest.skip("needs xfs_io (xfsprogs) for the shutdown ioctl")
    target = get_target(name)
    machine = machine_for(target)
    _skip_unless_tools(machine, target, kernel=True)
    dev = machine.disk("data")
    mkfs(machine, target, dev)
    mnt = _mountpoint(tmp_path)
    first = mount_timed(machine, target, dev, mnt, timeout_s=TIMEOUT_S)
    assert first.ok and first.replay_messages == ()
    try:
        command.run(["xfs_io", "-f", "-c", "pwrite 0 64k", "-c", "fsync", os.path.join(mnt, "f")])
        # No -f: the log is not flushed to its final place, like a power cut.
        command.run(["xfs_io", "-x", "-c", "shutdown", mnt])
    finally:
        umount(machine, mnt)
    second = mount_timed(machine, target, dev, mnt, timeout_s=TIMEOUT_S)
    try:
        assert second.ok, second.error
        assert second.replay_messages, second.kernel_messages
        assert os.path.getsize(os.path.join(mnt, "f")) == 64 * 1024
    finally:
        umount(machine, mnt)
