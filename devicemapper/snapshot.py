"""Throwaway copies of a replayed state (dm-snapshot) and latency (dm-delay)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from devicemapper import table
from devicemapper.dmsetup import DmDevice, DmSetup, device_sectors
from framework.command import CommandRunner

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
    dm = DmSetup(runner)
    size = device_sectors(runner, origin)
    # A stale exception store header on the COW device must not be reused.
    runner.run(["dd", "if=/dev/zero", f"of={cow_dev}", "bs=4096", "count=1", "conv=fsync",
                "status=none"], timeout_s=60)
    with dm.device(name, table.snapshot(origin, cow_dev, size, persistent=False,
                                        chunk_sectors=chunk_sectors)) as dev:
        yield dev


@contextlib.contextmanager
def delayed(runner: CommandRunner, dev: str, *, read_ms: int, write_ms: int | None = None,
            name: str = "pc-delay") -> Iterator[DmDevice]:
    """``dev`` behind dm-delay: every read waits read_ms, every write write_ms."""
    dm = DmSetup(runner)
    size = device_sectors(runner, dev)
    with dm.device(name, table.delay(dev, size, read_ms, write_ms)) as d:
        yield d
