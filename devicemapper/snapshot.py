"""Throwaway copies of a replayed state (dm-snapshot) and latency (dm-delay)."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator

from devicemapper import table
from devicemapper.dmioctl import Control
from devicemapper.dmsetup import DmDevice, DmSetup, device_sectors
from framework.command import CommandRunner
from framework.errors import DeviceMapperError
from framework.syscalls import runs_here

log = logging.getLogger(__name__)


@contextlib.contextmanager
def throwaway_snapshot(runner: CommandRunner, origin: str, cow_dev: str, *,
                       name: str = "pc-snap", chunk_sectors: int = 8) -> Iterator[DmDevice]:
    """A non-persistent snapshot of ``origin``: writes (journal replay at mount,
    fsck repairs) go to ``cow_dev`` and vanish when the block ends, so the
    origin stays exactly as replayed.

    ``cow_dev`` must be a scratch device (a disk or a RAM-backed loop device);
    it is overwritten.
    """
    if runs_here(runner):
        # In-process: no dd, blockdev or dmsetup processes (each costs more
        # than the check itself under an emulated CPU).
        size = _zero_header_and_size(origin, cow_dev)
        snap = table.snapshot(origin, cow_dev, size, persistent=False, chunk_sectors=chunk_sectors)
        line = snap.lines[0]
        with Control() as control:
            path = control.create(name, line.start, line.length, line.target, " ".join(line.args))
            try:
                yield DmDevice(name, path)
            finally:
                try:
                    _remove_retrying(control, name)
                except Exception as exc:  # never hide the original exception
                    log.warning("could not remove dm device %s: %s", name, exc)
        return
    dm = DmSetup(runner)
    size = device_sectors(runner, origin)
    # A stale exception store header on the COW device must not be reused.
    runner.run(["dd", "if=/dev/zero", f"of={cow_dev}", "bs=4096", "count=1", "conv=fsync",
                "status=none"], timeout_s=60)
    with dm.device(name, table.snapshot(origin, cow_dev, size, persistent=False,
                                        chunk_sectors=chunk_sectors)) as dev:
        yield dev


def _zero_header_and_size(origin: str, cow_dev: str) -> int:
    fd = os.open(cow_dev, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.pwrite(fd, bytes(4096), 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    fd = os.open(origin, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.lseek(fd, 0, os.SEEK_END) // 512
    finally:
        os.close(fd)


def _remove_retrying(control: Control, name: str, attempts: int = 20) -> None:
    # The last close of a just-unmounted device can lag the umount a moment.
    for attempt in range(attempts):
        try:
            control.remove(name)
            return
        except DeviceMapperError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.02 * (attempt + 1))


@contextlib.contextmanager
def delayed(runner: CommandRunner, dev: str, *, read_ms: int, write_ms: int | None = None,
            name: str = "pc-delay") -> Iterator[DmDevice]:
    """``dev`` behind dm-delay: every read waits read_ms, every write write_ms."""
    dm = DmSetup(runner)
    size = device_sectors(runner, dev)
    with dm.device(name, table.delay(dev, size, read_ms, write_ms)) as d:
        yield d
