"""bench/boot.py: the guest it takes turns with, and what it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.boot import IntxMachine, parse_args
from framework.core.machine.kernel import KernelSpec
from framework.core.machine.qemu import QemuMachine


def test_the_intx_guest_differs_only_by_acpi_noirq(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    image = tmp_path / "bzImage"
    image.write_bytes(b"\0" * 1024)
    (tmp_path / "config-6.1.0-test").write_text("CONFIG_PCI_MSI=y\n")
    kernel = KernelSpec(image, "6.1.0-test", tmp_path)
    now = QemuMachine(kernel=kernel, rundir=tmp_path / "vm").qemu_argv(tmp_path / "i", "tcg")
    before = IntxMachine(kernel=kernel, rundir=tmp_path / "vm").qemu_argv(tmp_path / "i", "tcg")
    at = now.index("-append") + 1
    assert now[:at] + now[at + 1:] == before[:at] + before[at + 1:]
    assert [w for w in now[at].split() if w != "acpi=noirq"] == before[at].split()
    assert "acpi=noirq" in now[at].split() and "acpi=noirq" not in before[at].split()


@pytest.mark.parametrize("argv, error", [
    (["--boots", "0"], "--boots 0: expected 1 or more"),
    (["--disks", "21"], "--disks 21: expected 0 to 20"),
])
def test_bad_counts_are_one_line(argv: list[str], error: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert error in capsys.readouterr().err


def test_the_signed_guests_keep_the_signatures(tmp_path: Path) -> None:
    from bench.boot import BeforeMachine, SignedMachine

    image = tmp_path / "bzImage"
    image.write_bytes(b"\0" * 1024)
    (tmp_path / "config-6.1.0-test").write_text("CONFIG_PCI_MSI=y\nCONFIG_MODULE_SIG=y\n")
    kernel = KernelSpec(image, "6.1.0-test", tmp_path)
    assert QemuMachine(kernel=kernel, rundir=tmp_path / "a").unsigned_modules
    assert not SignedMachine(kernel=kernel, rundir=tmp_path / "b").unsigned_modules
    before = BeforeMachine(kernel=kernel, rundir=tmp_path / "c")
    assert not before.unsigned_modules and isinstance(before, IntxMachine)
