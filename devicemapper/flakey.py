"""Power cuts on a live filesystem with dm-flakey.

As fstests does it: the device runs a pass-through table; to cut, the
table is swapped for one that drops (or fails) every write, with
``suspend --nolockfs`` so the filesystem is not frozen first; the
pass-through table is restored before unmounting, or the unmount hangs.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence

from devicemapper import table
from devicemapper.dmsetup import DmSetup, device_sectors
from devicemapper.table import FlakeyMode
from framework.core.command import CommandRunner

__all__ = ["FlakeyDevice", "FlakeyMode", "cut_together", "flakey_device", "restore_together"]

log = logging.getLogger(__name__)


class FlakeyDevice:
    def __init__(self, runner: CommandRunner, name: str, dev: str) -> None:
        self.dm = DmSetup(runner)
        self.name = name
        self.dev = dev
        self.size = device_sectors(runner, dev)
        self.mode = FlakeyMode.PASS

    @property
    def path(self) -> str:
        return f"/dev/mapper/{self.name}"

    def table_for(self, mode: FlakeyMode) -> table.Table:
        return table.flakey(self.dev, self.size, mode)

    def cut(self, mode: FlakeyMode = FlakeyMode.DROP_WRITES) -> None:
        """Cut the power: from now on writes vanish (or fail, with error_writes)."""
        self.dm.swap(self.name, self.table_for(mode), lockfs=False)
        self.mode = mode

    def restore(self) -> None:
        """Back to pass-through (needed before unmount, or it hangs)."""
        self.dm.swap(self.name, self.table_for(FlakeyMode.PASS), lockfs=False)
        self.mode = FlakeyMode.PASS


def cut_together(devices: Sequence[FlakeyDevice], mode: FlakeyMode = FlakeyMode.DROP_WRITES) -> None:
    """Cut the power of several disks at one instant: every device is suspended (no
    freeze) before any gets its cut table, and none resumes before all have it, so no
    write reaches one disk after another has lost power (a data disk and its external
    journal)."""
    _swap_together(devices, mode)


def restore_together(devices: Sequence[FlakeyDevice]) -> None:
    _swap_together(devices, FlakeyMode.PASS)


def _swap_together(devices: Sequence[FlakeyDevice], mode: FlakeyMode) -> None:
    suspended: list[FlakeyDevice] = []
    try:
        for fd in devices:
            fd.dm.suspend(fd.name, lockfs=False)
            suspended.append(fd)
        for fd in devices:
            fd.dm.load(fd.name, fd.table_for(mode))
    finally:
        for fd in suspended:  # always resume: a suspended device hangs every writer
            fd.dm.resume(fd.name)
    for fd in devices:
        fd.mode = mode


@contextlib.contextmanager
def flakey_device(runner: CommandRunner, dev: str, *, name: str = "pc-flakey") -> Iterator[FlakeyDevice]:
    fd = FlakeyDevice(runner, name, dev)
    fd.dm.create(name, fd.table_for(FlakeyMode.PASS))
    try:
        yield fd
    finally:
        try:
            if fd.mode is not FlakeyMode.PASS:
                fd.restore()
        except Exception as exc:
            log.warning("could not restore %s: %s", name, exc)
        try:
            fd.dm.remove(name)
        except Exception as exc:
            log.warning("could not remove %s: %s", name, exc)
