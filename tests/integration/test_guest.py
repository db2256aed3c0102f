"""The qemu machine end to end: boot, round trips, timeouts, teardown, doctor."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from crashcases.crash.guest import CRASH_CHECK, CheckRequest
from crashcases.oracle.log import OracleError
from framework.cli.guest import ENV, EnvRequest
from framework.core import agent
from framework.core.errors import ConsoleTimeout
from framework.core.machine.kernel import default_kernel
from framework.core.machine.qemu import QemuMachine
from recovery.targets import get_target

POWERCUT = [sys.executable, "-m", "framework.cli"]


def test_status_and_output_round_trip(guest):
    assert guest.run(["sh", "-c", "exit 7"], ok_status=None).status == 7
    noise = "guest# $ __PC_deadbeef_0__ \\000\\001\\377\\033[2J end"
    res = guest.run(["sh", "-c", f"printf '{noise}'; printf 'to-stderr' >&2"])
    raw = res.stdout.encode("utf-8", "surrogateescape")
    assert raw.startswith(b"guest# $ __PC_deadbeef_0__ \x00\x01")
    assert res.stdout.endswith("\x1b[2J end") and res.stderr == "to-stderr"
    big = guest.run(["head", "-c", "3000000", "/dev/zero"])
    assert len(big.stdout) == 3_000_000


def test_guest_has_the_dm_targets_and_disks(guest):
    targets = guest.run(["dmsetup", "targets"]).stdout
    for name in ("log-writes", "flakey", "snapshot", "delay"):
        assert name in targets
    size = guest.run(["blockdev", "--getsize64", guest.disk("log")]).stdout.strip()
    assert int(size) == 128 << 20


def test_typed_tasks_and_their_errors_cross_the_console(guest):
    facts = agent.perform(guest, ENV, EnvRequest(), timeout_s=120)
    assert facts.kernel == guest.describe()["kernel"]
    assert {"log-writes", "flakey", "snapshot"} <= set(facts.dm_targets)
    assert agent.perform(guest, agent.ECHO, agent.Echo({"a": [1, "é"]})) == agent.Echo({"a": [1, "é"]})
    # A domain error raised in the guest arrives with its own type, not as AgentError.
    (guest.rundir / "bad-oracle.json").write_text('{"format": 99}')
    request = CheckRequest(get_target("ext4/ordered"), guest.disk("log"), guest.disk("data"),
                           guest.disk("scratch"), str(guest.rundir / "bad-oracle.json"),
                           str(guest.rundir / "results.jsonl"), states=())
    with pytest.raises(OracleError, match="format 99"):
        agent.perform(guest, CRASH_CHECK, request, timeout_s=120)


def test_cli_vm_run_exits_with_the_guest_status():
    out = subprocess.run([*POWERCUT, "vm", "run", "--", "sh", "-c", "dmsetup targets; exit 7"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 7, out.stderr
    assert "log-writes" in out.stdout and "flakey" in out.stdout


def test_timeout_raises_and_tears_the_guest_down(tmp_path):
    machine = QemuMachine(rundir=tmp_path / "run")
    machine.start()
    try:
        child = machine.child
        assert child is not None and child.isalive()
        with pytest.raises(ConsoleTimeout, match="timed out after 2 s: sleep 60"):
            machine.run(["sleep", "60"], timeout_s=2)
        assert not child.isalive()
    finally:
        machine.close()
    assert not (tmp_path / "run" / "disks").exists() or not any(
        p for p in (tmp_path / "run").rglob("*.img"))


def test_missing_kernel_is_a_one_line_error(tmp_path):
    out = subprocess.run([*POWERCUT, "vm", "run", "--kernel", str(tmp_path / "bzImage"), "--", "true"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 3
    assert out.stderr.strip().count("\n") == 0
    assert "bzImage: kernel image not found" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.skipif(shutil.which("depmod") is None, reason="depmod missing: install kmod")
def test_doctor_reports_a_kernel_without_dm_log_writes(tmp_path):
    """A modules tree without dm-log-writes: doctor flags it statically and in the booted guest."""
    kernel = default_kernel()
    src = kernel.modules_dir
    dst = tmp_path / "lib" / "modules" / kernel.release
    shutil.copytree(src, dst, symlinks=True, copy_function=os.link,
                    ignore=shutil.ignore_patterns("build", "source"))
    for ko in dst.rglob("dm-log-writes.ko*"):
        ko.unlink()
    subprocess.run(["depmod", "-b", str(tmp_path), kernel.release], check=True)
    out = subprocess.run([*POWERCUT, "doctor", "--boot", "--kernel", str(kernel.image),
                          "--modules", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAIL CONFIG_DM_LOG_WRITES" in out.stdout
    assert "FAIL dm target log-writes" in out.stdout
    assert "ok   dm target flakey" in out.stdout
    assert "CONFIG_DM_LOG_WRITES" in out.stderr


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_no_qemu_or_run_directory_survives_an_error(error):
    machine = QemuMachine()
    with pytest.raises(error), machine:
        machine.start()
        pid = machine.child.pid
        rundir = machine.rundir
        raise error("boom")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not rundir.exists()


def interruptible() -> None:
    """In the child before exec: Ctrl-C as a terminal gives it. A shell starts background
    jobs with SIGINT ignored, and Python then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_cli_tears_the_guest_down(sig):
    proc = subprocess.Popen([*POWERCUT, "vm", "run", "--", "sleep", "300"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=interruptible)
    try:
        qemu = None
        for _ in range(600):  # the guest boots in seconds; allow a loaded machine
            kids = subprocess.run(["pgrep", "-P", str(proc.pid), "-f", "qemu-system"],
                                  capture_output=True, text=True).stdout.split()
            if kids:
                qemu = int(kids[0])
                break
            time.sleep(0.2)
        assert qemu is not None, "qemu never started"
        time.sleep(8)  # let the guest reach its shell and start the command
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err
    with pytest.raises(ProcessLookupError):
        os.kill(qemu, 0)


def test_vm_shell_is_interactive():
    import pexpect

    child = pexpect.spawn(sys.executable, ["-m", "framework.cli", "vm", "shell", "--disk", "data:16M"],
                          timeout=300, encoding="utf-8")
    try:
        child.expect("disk data: /dev/vda")
        child.expect("guest shell")
        child.expect("guest# ")  # typed before the shell starts, a line would be lost
        child.sendline("echo answer-$((6 * 7)); blockdev --getsize64 /dev/vda")
        child.expect("answer-42")
        child.expect("16777216")
        child.sendline("exit")
        child.expect(pexpect.EOF, timeout=60)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


BUSY_UMOUNT = """
import os, subprocess, sys
import recovery.mount as m
from framework.core.command import HostRunner
from framework.core.errors import DeviceBusy
m.BUSY_WAIT_S = 4.0
os.makedirs("/tmp/busy", exist_ok=True)
hold = "import os, sys, time; d = os.open('/tmp/busy', os.O_RDONLY); print(1, flush=True); time.sleep(float(sys.argv[1]))"
for seconds in ("1", "600"):
    subprocess.run(["mount", "-t", "tmpfs", "none", "/tmp/busy"], check=True)
    holder = subprocess.Popen([sys.executable, "-c", hold, seconds], stdout=subprocess.PIPE)
    holder.stdout.readline()
    try:
        print("unmounted after", m.umount(HostRunner(), "/tmp/busy").duration_s, flush=True)
    except DeviceBusy as exc:
        print("busy:", exc, "holder", holder.pid, flush=True)
        holder.kill()
        holder.wait()
        m.umount(HostRunner(), "/tmp/busy")
"""


def test_an_unmount_waits_out_a_holder_and_names_one_that_stays(guest):
    """A checking lane forks (fsck, mkfs) while the other lane has files open under its
    mount; the child holds them until it execs, and the unmount right after saw EBUSY
    (issue: "pc-snap-2 is still open"). A holder that lets go within the wait is waited
    out; one that stays is named."""
    out = guest.run([*guest.python_argv(), "-c", BUSY_UMOUNT], timeout_s=120).stdout
    lines = out.splitlines()
    assert lines[0].startswith("unmounted after"), out
    assert 0.5 < float(lines[0].split()[-1]) < 4.0, out
    assert lines[1].startswith("busy: umount /tmp/busy: still busy after 4 s"), out
    holder = lines[1].split()[-1]
    assert f"held by: pid {holder} (python" in lines[1] and "-> /tmp/busy" in lines[1], out
