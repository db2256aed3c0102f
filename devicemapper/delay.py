"""Slow storage with dm-delay: every I/O to a device waits a fixed time.

Recovery time depends on the latency of the disk under the filesystem; a
RAM-backed scratch device has almost none. A device profile puts the
scratch device behind dm-delay to measure journal replay and fsck as a
slower disk would see them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from devicemapper import table
from devicemapper.dmsetup import DmDevice, DmSetup, device_sectors
from framework.core.command import CommandRunner


@contextlib.contextmanager
def delay_device(
    runner: CommandRunner,
    dev: str,
    *,
    read_ms: int,
    write_ms: int | None = None,
    name: str = "pc-delay",
) -> Iterator[DmDevice]:
    """``dev`` behind dm-delay: reads wait ``read_ms``, writes and flushes ``write_ms``.

    Without ``write_ms`` writes and flushes wait ``read_ms`` too (dm-delay's
    three-argument table). The device is removed when the block ends.
    """
    delays = table.delay(dev, device_sectors(runner, dev), read_ms, write_ms)
    with DmSetup(runner).device(name, delays) as delayed:
        yield delayed
