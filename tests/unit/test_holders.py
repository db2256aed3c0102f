"""Who holds a mount or device busy, and an unmount that waits a passing holder out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import recovery.mount as fsmount
from framework.core.command import CommandResult
from framework.core.errors import CommandError, DeviceBusy
from framework.core.holders import device_holders, mount_holders


def test_a_process_with_a_file_open_under_a_directory_is_named(tmp_path: Path):
    (tmp_path / "f").write_text("x")
    hold = ("import os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); "
            "print(fd, flush=True); time.sleep(60)")
    with subprocess.Popen([sys.executable, "-c", hold, str(tmp_path / "f")],
                          stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            fd = proc.stdout.readline().strip()
            named = mount_holders(str(tmp_path))
            assert f"pid {proc.pid} (python" in " ".join(named)
            assert any(n.endswith(f"fd {fd} -> {tmp_path}/f") for n in named), named
        finally:
            proc.kill()
    # Negative control: once it is gone, nothing is named.
    assert not any(f"pid {proc.pid} " in n for n in mount_holders(str(tmp_path)))


def test_a_path_that_is_no_block_device_has_no_holders(tmp_path: Path):
    assert device_holders(str(tmp_path)) == []
    assert device_holders(str(tmp_path / "missing")) == []


class BusyRunner:
    """umount(8) that says "target is busy" ``busy`` times, then unmounts (runs_here False)."""

    def __init__(self, busy: int, *, other: str = "") -> None:
        self.busy, self.other, self.calls = busy, other, 0

    def run(self, argv, *, timeout_s=60.0, ok_status=(0,), input=None, env=None):
        self.calls += 1
        if self.other:
            return CommandResult(tuple(argv), 32, "", self.other, 0.0)
        if self.calls <= self.busy:
            return CommandResult(tuple(argv), 32, "", "umount: /mnt: target is busy.", 0.0)
        return CommandResult(tuple(argv), 0, "", "", 0.0)


@pytest.fixture
def no_sleep(monkeypatch):
    slept: list[float] = []
    now = [0.0]

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    monkeypatch.setattr(fsmount.clock, "sleep", sleep)
    monkeypatch.setattr(fsmount.clock, "monotonic", lambda: now[0])
    return slept


def test_an_unmount_waits_out_a_passing_holder(no_sleep):
    runner = BusyRunner(busy=3)
    fsmount.umount(runner, "/mnt")
    assert runner.calls == 4 and no_sleep == [0.05, 0.1, 0.2]


def test_a_holder_that_stays_is_a_device_busy_error(no_sleep):
    with pytest.raises(DeviceBusy, match=r"umount /mnt: still busy after 10 s .*target is busy"):
        fsmount.umount(BusyRunner(busy=10**6), "/mnt")
    assert sum(no_sleep) >= fsmount.BUSY_WAIT_S


def test_other_unmount_failures_are_command_errors_at_once(no_sleep):
    runner = BusyRunner(busy=0, other="umount: /mnt: not mounted.")
    with pytest.raises(CommandError, match="not mounted"):
        fsmount.umount(runner, "/mnt")
    assert runner.calls == 1 and no_sleep == []
