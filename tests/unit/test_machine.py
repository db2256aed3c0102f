"""The command protocol: run(), the fake machine, kernel selection."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from framework.core import command
from framework.core.errors import CommandError, CommandTimeout, MissingPrerequisite
from framework.core.machine.fake import FakeMachine
from framework.core.machine.kernel import bzimage_release, kernel_spec


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


def fake_elf(with_pvh: bool) -> bytes:
    """A minimal 64-bit ELF with one PT_NOTE segment holding a Xen note."""
    note_type = 18 if with_pvh else 6
    note = struct.pack("<III", 4, 8, note_type) + b"Xen\0" + b"\0" * 8
    phoff, notes_at = 64, 64 + 56
    header = bytearray(64)
    header[:5] = b"\x7fELF\x02"
    header[0x20:0x28] = phoff.to_bytes(8, "little")
    header[0x36:0x38] = (56).to_bytes(2, "little")
    header[0x38:0x3A] = (1).to_bytes(2, "little")
    ph = struct.pack("<IIQQQQQQ", 4, 0, notes_at, 0, 0, len(note), len(note), 4)
    return bytes(header) + ph + note


def fake_bzimage_with(payload: bytes) -> bytes:
    head = bytearray(0x1000)
    head[0x1F1] = 1  # setup sectors: protected-mode code at (1 + 1) * 512
    head[0x202:0x206] = b"HdrS"
    head[0x206:0x208] = (0x20F).to_bytes(2, "little")
    head[0x248:0x24C] = (0x100).to_bytes(4, "little")
    head[0x24C:0x250] = len(payload).to_bytes(4, "little")
    start = 2 * 512 + 0x100
    return bytes(head[:start]) + payload + b"\0" * 64


def test_pvh_kernels_boot_uncompressed_and_others_as_they_are(tmp_path):
    import gzip

    from framework.core.machine.kernel import boot_image, has_pvh_entry

    assert has_pvh_entry(fake_elf(True)) and not has_pvh_entry(fake_elf(False))
    pvh = tmp_path / "pvh.bzImage"
    pvh.write_bytes(fake_bzimage_with(gzip.compress(fake_elf(True))))
    out = boot_image(pvh, tmp_path / "cache")
    assert out.suffix == ".vmlinux" and out.read_bytes() == fake_elf(True)
    plain = tmp_path / "plain.bzImage"
    plain.write_bytes(fake_bzimage_with(gzip.compress(fake_elf(False))))
    assert boot_image(plain, tmp_path / "cache") == plain
    assert boot_image(plain, tmp_path / "cache") == plain  # the verdict is cached too


def test_a_zstd_kernel_boots_uncompressed_too(tmp_path, monkeypatch):
    """Debian's 7.x images are zstd (CONFIG_KERNEL_ZSTD), with the 4-byte size the kernel's
    build appends after the frame; without the decoder the image boots as it is and no
    verdict is kept, so the next boot with the decoder unpacks it."""
    import builtins

    import zstandard

    from framework.core.machine.kernel import boot_image

    image = tmp_path / "zstd.bzImage"
    elf = fake_elf(True)
    image.write_bytes(fake_bzimage_with(zstandard.ZstdCompressor().compress(elf)
                                        + len(elf).to_bytes(4, "little")))
    real_import = builtins.__import__

    def no_zstandard(name, *args, **kwargs):
        if name == "zstandard":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_zstandard)
    assert boot_image(image, tmp_path / "cache") == image
    monkeypatch.setattr(builtins, "__import__", real_import)
    out = boot_image(image, tmp_path / "cache")
    assert out.suffix == ".vmlinux" and out.read_bytes() == elf


def test_run_watch_ends_a_stuck_command_early():
    calls = []

    def watch():
        calls.append(1)
        return "no progress" if len(calls) >= 2 else None

    with pytest.raises(CommandTimeout, match="sleep 30: no progress"):
        command.run(["sleep", "30"], timeout_s=60, watch=watch)
    assert len(calls) == 2
    assert command.run(["sh", "-c", "cat"], input="in", watch=lambda: None).stdout == "in"


def test_the_default_guests_are_one_per_two_cores_and_at_least_one() -> None:
    from framework.core.machine.qemu import GUEST_CPUS, guests_per_host

    assert GUEST_CPUS == 2  # a checking guest's two lanes keep two cores busy under TCG
    assert [guests_per_host(c) for c in (1, 2, 3, 4, 8, 16)] == [1, 1, 1, 2, 4, 8]


def test_guest_cpus_come_from_the_environment_or_the_default(monkeypatch, tmp_path) -> None:
    from framework.core.errors import ConfigError
    from framework.core.machine.kernel import KernelSpec
    from framework.core.machine.qemu import (
        GUEST_CPUS_VARIABLE,
        QemuMachine,
        guest_cpus,
        guests_per_host,
    )

    kernel = KernelSpec(Path("/nonexistent"), "r", Path("/"))
    monkeypatch.delenv(GUEST_CPUS_VARIABLE, raising=False)
    assert guest_cpus() == 2
    assert QemuMachine(kernel=kernel, rundir=tmp_path / "a").cpus == 2
    monkeypatch.setenv(GUEST_CPUS_VARIABLE, " 1 ")
    assert guest_cpus() == 1
    assert QemuMachine(kernel=kernel, rundir=tmp_path / "b").cpus == 1
    assert QemuMachine(kernel=kernel, rundir=tmp_path / "c", cpus=3).cpus == 3  # asked: kept
    assert guests_per_host(4) == 2  # --jobs' default does not follow it
    for bad in ("0", "-1", "two", "1.5"):
        monkeypatch.setenv(GUEST_CPUS_VARIABLE, bad)
        with pytest.raises(ConfigError, match=rf"POWERCUT_GUEST_CPUS='{re.escape(bad)}': not a "
                                              r"number of vCPUs \(1 or more\)"):
            guest_cpus()


def test_kernel_config_symbols_are_read_from_the_config_beside_the_image(tmp_path) -> None:
    from framework.core.machine.kernel import KernelSpec

    image = tmp_path / "bzImage"
    image.write_bytes(b"")
    kernel = KernelSpec(image, "6.12.0-test", tmp_path)
    assert not kernel.config_has("PCI_MSI")  # no config found: not assumed
    config = tmp_path / "config-6.12.0-test"
    config.write_text("CONFIG_PCI=y\n# CONFIG_PCI_MSI is not set\nCONFIG_VIRTIO_PCI=m\n")
    assert kernel.config_has("PCI") and not kernel.config_has("PCI_MSI")
    assert not kernel.config_has("VIRTIO_PCI")  # a module is not built in
    assert not kernel.config_has("PC")  # whole names only
    config.write_text("CONFIG_PCI=y\nCONFIG_PCI_MSI=y\n")  # edited: read again
    assert kernel.config_has("PCI_MSI")


@pytest.mark.parametrize("config, noirq", [
    ("CONFIG_PCI_MSI=y\n", True),
    ("# CONFIG_PCI_MSI is not set\n", False),
    (None, False),
])
def test_pci_interrupts_skip_acpi_routing_only_on_a_kernel_with_msi(tmp_path, monkeypatch, config,
                                                                    noirq):
    from framework.core.machine.kernel import KernelSpec
    from framework.core.machine.qemu import QemuMachine

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # boot_image's verdict

    image = tmp_path / "bzImage"
    image.write_bytes(b"\0" * 1024)
    if config is not None:
        (tmp_path / "config-6.1.0-test").write_text(config)
    machine = QemuMachine(kernel=KernelSpec(image, "6.1.0-test", tmp_path), rundir=tmp_path / "vm")
    argv = machine.qemu_argv(tmp_path / "initrd", "tcg")
    words = argv[argv.index("-append") + 1].split()
    assert ("acpi=noirq" in words) == noirq
    assert "console=ttyS0" in words


@pytest.mark.parametrize("config, unsigned", [
    ("CONFIG_MODULE_SIG=y\n", True),
    ("CONFIG_MODULE_SIG=y\nCONFIG_MODULE_SIG_FORCE=y\n", False),
    ("CONFIG_MODULE_SIG=y\nCONFIG_LOCK_DOWN_KERNEL_FORCE_INTEGRITY=y\n", False),
    ("CONFIG_MODULE_SIG=y\nCONFIG_LOCK_DOWN_KERNEL_FORCE_CONFIDENTIALITY=y\n", False),
    ("# CONFIG_MODULES is not set\n", True),  # nothing signed, nothing to keep
    (None, False),  # no config: signatures kept
])
def test_modules_go_without_signatures_only_where_the_kernel_loads_them(tmp_path, config,
                                                                         unsigned):
    from framework.core.machine.kernel import KernelSpec
    from framework.core.machine.qemu import QemuMachine

    image = tmp_path / "bzImage"
    image.write_bytes(b"")
    if config is not None:
        (tmp_path / "config-6.1.0-test").write_text(config)
    kernel = KernelSpec(image, "6.1.0-test", tmp_path)
    assert kernel.loads_unsigned_modules() == unsigned
    assert QemuMachine(kernel=kernel, rundir=tmp_path / "vm").unsigned_modules == unsigned


def test_one_guest_policy_a_hang_at_once_two_panics_a_hang_three_deaths_an_error() -> None:
    """What a task whose guest was lost comes to, for crash, cut and sweep alike."""
    from framework.core.errors import GuestDied
    from framework.core.machine.slot import DEFAULT_POLICY, GuestLost, GuestSlot, Verdict

    def died(panicked: bool) -> GuestLost:
        return GuestLost("qemu exited", hung=False,
                         died=GuestDied("qemu exited", console="x", panicked=panicked))

    busy = GuestLost("harness error: the device stayed busy", hung=False)
    hung = GuestLost("no answer", hung=True)
    assert (DEFAULT_POLICY.panics_before_hang, DEFAULT_POLICY.deaths_before_error) == (2, 3)
    slot = GuestSlot(lambda: FakeMachine())
    for losses, verdict in (
            ([hung], Verdict.HANG),
            ([died(True)], Verdict.AGAIN),
            ([died(True), died(True)], Verdict.HANG),
            ([died(False), died(True)], Verdict.AGAIN),
            ([died(False), busy], Verdict.AGAIN),
            ([died(False), busy, died(False)], Verdict.ERROR),
            ([died(True), busy, died(False)], Verdict.ERROR),  # one panic is no finding
            ([busy, died(True), died(True)], Verdict.HANG)):
        kept: list[GuestLost] = []
        got = [slot.lost(lost, kept) for lost in losses]
        assert got[-1] is verdict and kept == losses, losses
        assert all(v is Verdict.AGAIN for v in got[:-1])
