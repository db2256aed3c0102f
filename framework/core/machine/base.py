"""The machine protocol shared by the local host, qemu guests and the fake."""

from __future__ import annotations

import abc
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from framework.core.command import Argv, CommandResult
from framework.core.handle import Handle


@dataclass(frozen=True, slots=True)
class DiskSpec:
    """A scratch disk the machine provides: a sparse raw file of this size."""

    name: str
    size_bytes: int
    image: Path | None = None  # an existing image to attach instead of a new sparse file
    readonly: bool = False
    #: Throttling of the disk as a whole (a device profile's bandwidth and IOPS), None: none.
    bandwidth_bytes_s: int | None = None
    iops: int | None = None


class Machine(Handle):
    """A Linux kernel with device-mapper, reached through ``run()``.

    ``rundir`` is a directory that the host and the machine both see at the
    same path: bulky artifacts (logs, images, agent I/O) go there.
    """

    name: str = "machine"
    rundir: Path

    @abc.abstractmethod
    def run(
        self,
        argv: Argv,
        *,
        timeout_s: float = 60.0,
        ok_status: Iterable[int] | None = (0,),
        input: str | None = None,
        env: dict[str, str] | None = None,
        watch: Callable[[], str | None] | None = None,
    ) -> CommandResult:
        """Run argv in the machine; raise CommandError unless status is in ok_status.

        ``watch``, if given, is asked about once a second while the command
        runs; a non-empty answer (why it is stuck) ends it with a timeout error.
        """

    @abc.abstractmethod
    def disk(self, name: str) -> str:
        """Block device path, inside the machine, of the scratch disk ``name``."""

    def python_argv(self) -> list[str]:
        """The interpreter that runs powercut's modules inside the machine."""
        return [sys.executable]

    def kernel_death(self) -> str | None:
        """The line in which the machine's kernel said it died (an oops, a BUG()) while the
        machine stayed up, or None: a command waiting on a dead kernel thread would wait for
        its whole timeout. Machines without their own kernel have none to lose."""
        return None

    def describe(self) -> dict[str, str]:
        """Environment facts for the results store (kernel, accelerator...)."""
        return {"machine": self.name}

    def close(self) -> None:
        """Release everything the machine holds."""


def project_root() -> Path:
    """The source checkout (the guest sees it at the same path over 9p)."""
    return Path(__file__).resolve().parents[3]


def venv_python() -> str:
    """The virtualenv's python; the guest reaches the same path over 9p."""
    return os.fspath(Path(sys.prefix) / "bin" / "python")
