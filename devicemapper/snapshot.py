"""Throwaway copies of a replayed state (dm-snapshot)."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Iterator

from devicemapper import table
from devicemapper.dmsetup import DmDevice, DmSetup, device_sectors
from devicemapper.ioctl import Control
from framework.core.command import CommandRunner
from framework.core.errors import DeviceBusy
from framework.core.handle import Handle
from framework.core.holders import device_holders
from framework.core.syscalls import runs_here

log = logging.getLogger(__name__)


@contextlib.contextmanager
def throwaway_snapshot(runner: CommandRunner, origin: str, cow_dev: str, *,
                       name: str = "pc-snap", chunk_sectors: int = 8) -> Iterator[DmDevice]:
    """A non-persistent snapshot of ``origin``: writes (journal replay at mount,
    fsck repairs) go to ``cow_dev`` and vanish when the block ends, so the
    origin stays exactly as replayed.

    ``cow_dev`` must be a scratch device (a disk or a RAM-backed loop device);
    it is overwritten. This drives dmsetup through ``runner``; checks that
    run here use :class:`SnapshotSlot`, which needs no process at all.
    """
    dm = DmSetup(runner)
    size = device_sectors(runner, origin)
    # A stale exception store header on the COW device must not be reused.
    runner.run(["dd", "if=/dev/zero", f"of={cow_dev}", "bs=4096", "count=1", "conv=fsync",
                "status=none"], timeout_s=60)
    with dm.device(name, table.snapshot(origin, cow_dev, size, persistent=False,
                                        chunk_sectors=chunk_sectors)) as dev:
        yield dev


BLKFLSBUF = 0x1261  # _IO(0x12, 97): write back and drop a block device's page cache


class SnapshotSlot(Handle):
    """Throwaway snapshots of ``origin``, one after another, on one dm device.

    Creating and removing a dm device costs tens of milliseconds in an
    emulated guest (most of it the gendisk teardown at removal); swapping
    the table of an unused device costs a few. Between uses the device is
    *parked* on an ``error`` table: the snapshot is gone and nothing can
    read a stale state, the replay can move the origin on, and the next
    snapshot does not meet an old one on the same COW device (the kernel
    would hand the old one's exceptions over to it). Each :meth:`fresh`
    zeroes the COW header and loads a new, empty snapshot, so every state
    starts from the origin exactly as replayed.

    Runners that do not run here fall back to :func:`throwaway_snapshot`.
    """

    def __init__(self, runner: CommandRunner, origin: str, cow_dev: str, *,
                 name: str = "pc-snap", chunk_sectors: int = 8) -> None:
        self.runner = runner
        self.origin, self.cow_dev = origin, cow_dev
        self.name, self.chunk_sectors = name, chunk_sectors
        self._control: Control | None = None
        self._line: table.TableLine | None = None  # the same snapshot table every time
        self._path: str | None = None
        self._snapshot_live = False

    @contextlib.contextmanager
    def fresh(self) -> Iterator[DmDevice]:
        if not runs_here(self.runner):
            with throwaway_snapshot(self.runner, self.origin, self.cow_dev, name=self.name,
                                    chunk_sectors=self.chunk_sectors) as dev:
                yield dev
            return
        if self._control is None:
            self._control = Control()
        control = self._control
        if self._snapshot_live:
            self._park()  # the last park failed: do not zero a COW in use
        _zero_cow_header(self.cow_dev)
        if self._line is None or self._path is None:
            self._line = line = table.snapshot(self.origin, self.cow_dev, _sectors(self.origin),
                                               persistent=False,
                                               chunk_sectors=self.chunk_sectors).lines[0]
            self._path = control.create(self.name, line.start, line.length, line.target,
                                        " ".join(line.args))
        else:
            line = self._line
            control.load(self.name, line.start, line.length, line.target, " ".join(line.args))
            control.resume(self.name)
            _drop_page_cache(self._path)
        self._snapshot_live = True
        try:
            yield DmDevice(self.name, self._path)
        except BaseException:
            try:
                self._park()
            except Exception as exc:  # never hide the original exception; fresh() retries
                log.warning("could not park dm device %s: %s", self.name, exc)
            raise
        # A device still open now (DeviceBusy) must not pass for a finished state.
        self._park()

    def _park(self) -> None:
        assert self._control is not None and self._line is not None
        _wait_unused(self._control, self.name, self._path or '')
        self._control.load(self.name, 0, self._line.length, "error", "")
        self._control.resume(self.name)
        self._snapshot_live = False

    def close(self) -> None:
        if self._control is None:
            return
        try:
            if self._path is not None:
                _wait_unused(self._control, self.name, self._path or '')
                self._control.remove(self.name)
        finally:
            self._path = None
            self._snapshot_live = False
            self._control.close()
            self._control = None



def _wait_unused(control: Control, name: str, path: str, attempts: int = 20) -> None:
    # The last close of a just-unmounted device can lag the umount a moment;
    # a table swapped under an opener would show it another state.
    for attempt in range(attempts):
        count = control.open_count(name)
        if count == 0:
            return
        time.sleep(0.02 * (attempt + 1))
    held = device_holders(path)
    raise DeviceBusy(f"dm device {name} is still open after {attempts} tries "
                            f"({count} opener{'s' if count != 1 else ''}: "
                            f"{'; '.join(held) or 'none visible in /proc'})")


def _drop_page_cache(path: str) -> None:
    """Nothing cached from the previous table may be read through the new one."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, BLKFLSBUF)
    finally:
        os.close(fd)


def _zero_cow_header(cow_dev: str) -> None:
    """A stale exception store header on the COW device must not be reused."""
    fd = os.open(cow_dev, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.pwrite(fd, bytes(4096), 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def _sectors(dev: str) -> int:
    fd = os.open(dev, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.lseek(fd, 0, os.SEEK_END) // 512
    finally:
        os.close(fd)

