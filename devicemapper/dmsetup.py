"""dmsetup verbs, each a context manager where it creates a kernel object.

Everything goes through a ``CommandRunner`` so the same code drives the
host (LocalMachine) and, inside a guest, the agent's local runner.
udev is not running in powercut's guests: libdevmapper makes the
/dev/mapper nodes itself (DM_DISABLE_UDEV=1).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

from devicemapper.table import Table
from framework.core.command import CommandResult, CommandRunner
from framework.core.errors import CommandError, DeviceMapperError, MissingPrerequisite

log = logging.getLogger(__name__)

DM_ENV = {"DM_DISABLE_UDEV": "1"}


@dataclass(frozen=True, slots=True)
class DmDevice:
    name: str
    node: str = ""  # the block device node, if not /dev/mapper/NAME

    @property
    def path(self) -> str:
        return self.node or f"/dev/mapper/{self.name}"


class DmSetup:
    """The dmsetup verbs over one runner."""

    def __init__(self, runner: CommandRunner, *, timeout_s: float = 60.0) -> None:
        self.runner = runner
        self.timeout_s = timeout_s

    def _run(self, *args: str, input: str | None = None, ok: tuple[int, ...] = (0,)) -> CommandResult:
        argv = ["dmsetup", *args]
        try:
            return self.runner.run(argv, timeout_s=self.timeout_s, ok_status=ok, input=input, env=DM_ENV)
        except MissingPrerequisite:
            raise
        except CommandError as exc:
            raise DeviceMapperError(str(exc)) from exc

    def create(self, name: str, table: Table) -> DmDevice:
        self._run("create", name, input=str(table))
        return DmDevice(name)

    def load(self, name: str, table: Table) -> None:
        """Load an inactive table; it takes effect at the next resume."""
        self._run("load", name, input=str(table))

    def suspend(self, name: str, *, lockfs: bool = True, flush: bool = True) -> None:
        args = ["suspend"]
        if not lockfs:
            # --nolockfs: no freeze_fs(), the filesystem is not quiesced, so
            # swapping the table now is a power cut, not a clean snapshot.
            args.append("--nolockfs")
        if not flush:
            args.append("--noflush")
        self._run(*args, name)

    def resume(self, name: str) -> None:
        self._run("resume", name)

    def remove(self, name: str, *, retries: int = 5) -> None:
        """Remove a device; retry briefly while something still holds it open."""
        for attempt in range(retries):
            try:
                self._run("remove", name)
                return
            except DeviceMapperError:
                if attempt == retries - 1:
                    raise
                time.sleep(0.2 * (attempt + 1))

    def message(self, name: str, message: str, sector: int = 0) -> None:
        self._run("message", name, str(sector), message)

    def status(self, name: str) -> str:
        """The target's status line(s) without the start/length/target prefix."""
        out = self._run("status", name).stdout.strip()
        return "\n".join(" ".join(line.split()[3:]) for line in out.splitlines())

    def table(self, name: str) -> str:
        return self._run("table", name).stdout

    def targets(self) -> dict[str, str]:
        out = self._run("targets").stdout
        return {parts[0]: parts[1] for parts in (ln.split() for ln in out.splitlines()) if len(parts) >= 2}

    def exists(self, name: str) -> bool:
        return self._run("info", name, ok=(0, 1)).status == 0

    @contextlib.contextmanager
    def device(self, name: str, table: Table) -> Iterator[DmDevice]:
        """Create a device; it is removed when the block ends, also on error."""
        dev = self.create(name, table)
        try:
            yield dev
        finally:
            try:
                self.remove(name)
            except Exception as exc:  # never hide the original exception
                log.warning("could not remove dm device %s: %s", name, exc)

    @contextlib.contextmanager
    def suspended(self, name: str, *, lockfs: bool = False) -> Iterator[None]:
        """Suspend (no freeze by default); always resume, so unmount cannot hang."""
        self.suspend(name, lockfs=lockfs)
        try:
            yield
        finally:
            self.resume(name)

    def swap(self, name: str, table: Table, *, lockfs: bool = False) -> None:
        """Replace the live table: suspend, load, resume."""
        with self.suspended(name, lockfs=lockfs):
            self.load(name, table)


def device_sectors(runner: CommandRunner, dev: str) -> int:
    """Size of a block device in 512-byte sectors."""
    return int(runner.run(["blockdev", "--getsz", dev], timeout_s=30).stdout.strip())
