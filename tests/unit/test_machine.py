"""The command protocol: run(), the fake machine, kernel selection."""

from __future__ import annotations

import struct

import pytest

from framework import command
from framework.errors import CommandError, CommandTimeout, MissingPrerequisite
from framework.machine.fake import FakeMachine
from framework.machine.kernel import bzimage_release, kernel_spec


def test_run_records_everything():
    res = command.run(["sh", "-c", "printf out; printf err >&2; exit 3"], ok_status=(3,))
    assert (res.argv, res.status, res.stdout, res.stderr) == (
        ("sh", "-c", "printf out; printf err >&2; exit 3"), 3, "out", "err")
    assert res.duration_s >= 0


def test_run_failure_message_is_copy_pasteable_with_stderr_tail():
    with pytest.raises(CommandError) as info:
        command.run(["sh", "-c", "echo boom >&2; exit 2"])
    msg = str(info.value)
    assert "status 2" in msg and "sh -c 'echo boom >&2; exit 2'" in msg and "boom" in msg
    assert "\n" not in msg


def test_run_rejects_shell_strings_and_reports_missing_tools():
    with pytest.raises(TypeError):
        command.run("ls -l")  # type: ignore[arg-type]
    with pytest.raises(MissingPrerequisite, match="no-such-tool-xyz: not found"):
        command.run(["no-such-tool-xyz"])


def test_run_timeout():
    with pytest.raises(CommandTimeout, match="timed out after 0.2 s: sleep 5"):
        command.run(["sleep", "5"], timeout_s=0.2)


def test_fake_machine_scripts_and_records():
    fake = FakeMachine(strict=True)
    fake.on("dmsetup status *", stdout="0 100 log-writes 7 99\n")
    fake.on("mount *", status=32, stderr="mount: wrong fs type")
    assert fake.run(["dmsetup", "status", "x"]).stdout.startswith("0 100")
    with pytest.raises(CommandError, match="wrong fs type"):
        fake.run(["mount", "/dev/x", "/mnt"])
    assert fake.run(["mount", "a", "b"], ok_status=None).status == 32
    assert fake.run(["unknown"], ok_status=None).status == 127
    assert fake.calls[0] == ("dmsetup", "status", "x")
    fake.close()


def fake_bzimage(path, version: bytes = b"6.9.0-test (builder@host) #1 SMP"):
    head = bytearray(0x4000)
    head[0x202:0x206] = b"HdrS"
    offset = 0x1000
    head[0x20E:0x210] = struct.pack("<H", offset - 0x200)
    head[offset:offset + len(version) + 1] = version + b"\0"
    path.write_bytes(bytes(head))
    return path


def test_bzimage_release_is_read_from_setup_header(tmp_path):
    assert bzimage_release(fake_bzimage(tmp_path / "bzImage")) == "6.9.0-test"


def test_kernel_errors_are_one_line(tmp_path):
    with pytest.raises(MissingPrerequisite, match="kernel image not found"):
        kernel_spec(tmp_path / "nope", None)
    (tmp_path / "junk").write_bytes(b"not a kernel" * 100)
    with pytest.raises(MissingPrerequisite, match="not an x86 bzImage"):
        kernel_spec(tmp_path / "junk", None)
    image = fake_bzimage(tmp_path / "bzImage")
    with pytest.raises(MissingPrerequisite, match="no modules.dep for kernel 6.9.0-test"):
        kernel_spec(image, tmp_path)
    with pytest.raises(MissingPrerequisite, match="--modules needs --kernel"):
        kernel_spec(None, tmp_path)
