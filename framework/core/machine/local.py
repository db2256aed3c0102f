"""Running powercut's work directly on this host (needs device-mapper here)."""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from framework.core import command
from framework.core.command import Argv, CommandResult
from framework.core.errors import ScratchDeviceError
from framework.core.machine.base import DiskSpec, Machine

log = logging.getLogger(__name__)


class LocalMachine(Machine):
    """This host. Scratch disks are loop devices over sparse files in the run dir,
    or block devices the user named explicitly (``devices``), never any other."""

    name = "local"
    runs_here = True  # callers may use in-process syscalls instead of commands

    def __init__(
        self,
        *,
        disks: Iterable[DiskSpec] = (),
        devices: dict[str, str] | None = None,
        rundir: Path | None = None,
    ) -> None:
        self._stack = contextlib.ExitStack()
        if rundir is None:
            tmp = self._stack.enter_context(tempfile.TemporaryDirectory(prefix="powercut-"))
            rundir = Path(tmp)
        self.rundir = rundir
        self._devices: dict[str, str] = {}
        try:
            for name, path in (devices or {}).items():
                if not Path(path).is_block_device():
                    raise ScratchDeviceError(f"{path}: not a block device (disk {name!r})")
                self._devices[name] = path
            for spec in disks:
                self._devices[spec.name] = self._loop_disk(spec)
        except BaseException:
            self._stack.close()
            raise

    def _loop_disk(self, spec: DiskSpec) -> str:
        image = self.rundir / f"{spec.name}.img"
        with open(image, "wb") as f:
            f.truncate(spec.size_bytes)
        dev = command.run(["losetup", "--find", "--show", "--direct-io=on", image]).stdout.strip()
        self._stack.callback(self._detach, dev)
        return dev

    @staticmethod
    def _detach(dev: str) -> None:
        try:
            command.run(["losetup", "-d", dev])
        except Exception as exc:  # teardown must not hide the original error
            log.warning("could not detach %s: %s", dev, exc)

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
        return command.run(argv, timeout_s=timeout_s, ok_status=ok_status, input=input, env=env,
                           watch=watch)

    def disk(self, name: str) -> str:
        try:
            return self._devices[name]
        except KeyError:
            raise ScratchDeviceError(f"no scratch disk named {name!r} on this machine") from None

    def describe(self) -> dict[str, str]:
        return {"machine": "local", "kernel": platform.release(), "accel": "native",
                "host": os.uname().nodename}

    def close(self) -> None:
        self._stack.close()
