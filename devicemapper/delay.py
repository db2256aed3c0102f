"""Slow storage with dm-delay: every read, write and flush to a device waits a fixed time.

Recovery time and journalling overhead depend on the latency of the disk
under the filesystem; a scratch file served from the host's page cache has
almost none. A device profile (``recovery.profiles``) puts the disk behind
dm-delay so fsync, journal commits, journal replay and fsck pay what a
slower device would make them pay.
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
    flush_ms: int | None = None,
    name: str = "pc-delay",
) -> Iterator[DmDevice]:
    """``dev`` behind dm-delay: reads wait ``read_ms``, writes ``write_ms``, flushes ``flush_ms``.

    Without ``write_ms`` writes wait ``read_ms``; without ``flush_ms`` flushes
    wait as writes do (dm-delay's 3- and 6-argument tables). The device is
    removed when the block ends.
    """
    delays = table.delay(dev, device_sectors(runner, dev), read_ms, write_ms, flush_ms=flush_ms)
    with DmSetup(runner).device(name, delays) as delayed:
        yield delayed


@contextlib.contextmanager
def delayed_path(runner: CommandRunner, dev: str, delays: tuple[int, int, int] | None, *,
                 name: str) -> Iterator[str]:
    """The path to use for ``dev``: itself without ``delays``, else a dm-delay device over it
    with (read, write, flush) milliseconds, removed when the block ends."""
    if delays is None:
        yield dev
        return
    read_ms, write_ms, flush_ms = delays
    with delay_device(runner, dev, read_ms=read_ms, write_ms=write_ms, flush_ms=flush_ms,
                      name=name) as delayed:
        yield delayed.path
