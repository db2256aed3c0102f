"""Recording with dm-log-writes: the device, marks, status, a full log."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass

from devicemapper import table
from devicemapper.dmsetup import DmSetup, device_sectors
from devicemapper.ioctl import TargetMessenger
from framework.core.command import CommandRunner
from framework.core.errors import DeviceMapperError

log = logging.getLogger(__name__)

# The kernel caps a mark at sectorsize - 32 - 1 bytes; keep well under 512.
MAX_MARK_LEN = 400
_MARK_OK = re.compile(r"^[A-Za-z0-9_.:@+=-]+$")


class LogFullError(DeviceMapperError):
    """The log device filled up; the kernel stopped logging."""


@dataclass(frozen=True, slots=True)
class LogWritesStatus:
    entries: int  # entries logged so far
    next_sector: int  # next 512-byte sector of the log device to be written

    @classmethod
    def parse(cls, text: str) -> LogWritesStatus:
        # The target reports "<logged entries> <next sector - 1>".
        parts = text.split()
        try:
            return cls(int(parts[0]), int(parts[1]) + 1)
        except (IndexError, ValueError):
            raise DeviceMapperError(f"unexpected log-writes status {text!r}") from None


def check_mark(name: str) -> str:
    if not name or len(name) > MAX_MARK_LEN or not _MARK_OK.match(name):
        raise DeviceMapperError(
            f"mark {name!r}: use 1-{MAX_MARK_LEN} characters from A-Z a-z 0-9 _ . : @ + = -"
        )
    return name


class LogWritesDevice:
    """A live dm-log-writes device over ``data_dev`` logging to ``log_dev``."""

    def __init__(self, runner: CommandRunner, name: str, data_dev: str, log_dev: str) -> None:
        self.dm = DmSetup(runner)
        self.runner = runner
        self.name = name
        self.data_dev = data_dev
        self.log_dev = log_dev
        self.log_sectors = device_sectors(runner, log_dev)
        self._messenger: TargetMessenger | None = None

    @property
    def path(self) -> str:
        return f"/dev/mapper/{self.name}"

    def mark(self, name: str) -> None:
        """Append a mark entry (dmsetup message; see mark_fast for the ioctl)."""
        self.dm.message(self.name, f"mark {check_mark(name)}")

    def mark_fast(self, name: str) -> None:
        """Append a mark with the DM_TARGET_MSG ioctl from this process."""
        if self._messenger is None:
            self._messenger = TargetMessenger(self.name)
        self._messenger.send(f"mark {check_mark(name)}")

    def status(self) -> LogWritesStatus:
        return LogWritesStatus.parse(self.dm.status(self.name))

    def check_not_full(self) -> LogWritesStatus:
        """Raise LogFullError if the kernel ran out of log space."""
        st = self.status()
        # The kernel stops logging once next_sector would reach the end.
        if st.next_sector >= self.log_sectors - 1:
            raise LogFullError(
                f"log device {self.log_dev} is full after {st.entries} entries "
                f"({self.log_sectors * 512 // (1 << 20)} MiB); use a larger log disk"
            )
        return st

    def close_messenger(self) -> None:
        if self._messenger is not None:
            self._messenger.close()
            self._messenger = None


@contextlib.contextmanager
def recording(runner: CommandRunner, data_dev: str, log_dev: str, *,
              name: str = "pc-logw", zero_log_super: bool = True) -> Iterator[LogWritesDevice]:
    """A dm-log-writes device for the duration of the block.

    The log super is zeroed first so that a stale log from an earlier run
    can never be mistaken for this one. On removal the kernel logs the
    writes still waiting for a flush, then the mark ``dm-log-writes-end``.
    """
    if zero_log_super:
        runner.run(["dd", "if=/dev/zero", f"of={log_dev}", "bs=4096", "count=1", "conv=fsync",
                    "status=none"], timeout_s=60)
    size = device_sectors(runner, data_dev)
    dm = DmSetup(runner)
    dm.create(name, table.log_writes(data_dev, log_dev, size))
    dev = LogWritesDevice(runner, name, data_dev, log_dev)
    try:
        yield dev
        dev.check_not_full()
    finally:
        dev.close_messenger()
        try:
            dm.remove(name)
        except Exception as exc:
            log.warning("could not remove %s: %s", name, exc)
