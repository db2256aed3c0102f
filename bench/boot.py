#!/usr/bin/env python3
"""Boot-to-ready time of the qemu guest: median and max over N boots.

Ready means the guest shell answered a framed command (the initramfs is
cached before the first boot, so every boot is measured the same way).
``--disks N`` attaches N scratch disks, as a crash run's guests have (a
checking guest has its data and log disks and more); every virtio device is
one more PCI device to set up at boot.

``--intx`` takes turns with a guest whose PCI interrupts are routed through
ACPI as they were before ``acpi=noirq`` (the kernel command line without that
word); ``--signed`` with a guest whose initramfs keeps the modules'
signatures, which the kernel then checks as it loads each one; ``--before``
with a guest that has both; ``--shipped`` with a guest that boots the bzImage as
it is (decompressing itself, not the unpacked image with its PVH entry) and loads
the modules as packaged (Debian's 6.12 and 7.x ship them xz-compressed).
Every guest's median comes from the same run: the anchors for what each change
saves. ``--kernel-release R`` boots another Debian kernel (installed or in the
kernel cache).

Run: .venv/bin/python bench/boot.py [--boots 5] [--disks 0] [--intx] [--signed] [--before]
                                    [--shipped] [--kernel-release R]
                                    [--fs ext4] [--accel auto|kvm|tcg]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from framework.core.machine import initramfs
from framework.core.machine.base import DiskSpec
from framework.core.machine.kernel import default_kernel, release_kernel
from framework.core.machine.qemu import ACPI_NOIRQ, QemuMachine, choose_accel
from recovery.filesystems import kernel_modules


class IntxMachine(QemuMachine):
    """The guest as it booted before: PCI interrupts routed through ACPI."""

    def qemu_argv(self, initrd: Path, accel: str) -> list[str]:
        argv = super().qemu_argv(initrd, accel)
        at = argv.index("-append") + 1
        argv[at] = " ".join(word for word in argv[at].split() if word != ACPI_NOIRQ)
        return argv


class SignedMachine(QemuMachine):
    """The guest with its modules signed, as they are installed."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.unsigned_modules = False


class BeforeMachine(IntxMachine, SignedMachine):
    """Both: the guest as it booted before either change."""


class ShippedMachine(QemuMachine):
    """The kernel as Debian ships it: the bzImage decompresses itself, the modules are
    loaded as packaged."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.unpack_modules = False

    def qemu_argv(self, initrd: Path, accel: str) -> list[str]:
        argv = super().qemu_argv(initrd, accel)
        argv[argv.index("-kernel") + 1] = str(self.kernel.image)
        return argv


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--boots", type=int, default=5, help="boots of each guest (default: 5)")
    ap.add_argument("--disks", type=int, default=0, help="scratch disks of 64 MiB (default: 0)")
    ap.add_argument("--intx", action="store_true",
                    help="take turns with a guest whose PCI interrupts go through ACPI")
    ap.add_argument("--signed", action="store_true",
                    help="take turns with a guest whose modules keep their signatures")
    ap.add_argument("--before", action="store_true",
                    help="take turns with a guest that has both of the above")
    ap.add_argument("--shipped", action="store_true",
                    help="take turns with a guest that boots the bzImage and its modules as "
                         "packaged")
    ap.add_argument("--kernel-release", metavar="RELEASE",
                    help="a Debian kernel installed in /boot or in the kernel cache "
                         "(default: the default guest kernel)")
    ap.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto")
    ap.add_argument("--fs", action="append",
                    help="filesystem types whose kernel modules to load, repeatable (default: ext4)")
    args = ap.parse_args(argv)
    args.fs = args.fs or ["ext4"]
    if args.boots < 1:
        ap.error(f"--boots {args.boots}: expected 1 or more")
    if not 0 <= args.disks <= 20:
        ap.error(f"--disks {args.disks}: expected 0 to 20 (a guest's limit)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    kernel = release_kernel(args.kernel_release) if args.kernel_release else default_kernel()
    if (args.intx or args.before) and not kernel.has_msi():
        sys.exit(f"{'--intx' if args.intx else '--before'}: kernel {kernel.release} has no "
                 f"CONFIG_PCI_MSI=y in a config found for it, so its guests route PCI "
                 f"interrupts through ACPI already")
    if (args.signed or args.before) and not kernel.loads_unsigned_modules():
        sys.exit(f"{'--signed' if args.signed else '--before'}: kernel {kernel.release} keeps "
                 f"its modules' signatures already (no config found for it, or it enforces "
                 f"signatures)")
    accel = choose_accel(kernel) if args.accel == "auto" else args.accel
    # Build (or reuse) the initramfs first: that cost is paid once, not per boot.
    modules = initramfs.resolve_modules(initramfs.modules_for(kernel_modules(args.fs)),
                                        kernel.release, kernel.modules_root)[0]
    initramfs.initramfs(modules, unsigned=kernel.loads_unsigned_modules())
    if args.signed or args.before:
        initramfs.initramfs(modules)
    if args.shipped:
        initramfs.initramfs(modules, unsigned=kernel.loads_unsigned_modules(), unpack=False)
    disks = [DiskSpec(f"d{i}", 64 << 20) for i in range(args.disks)]
    guests: dict[str, type[QemuMachine]] = {"powercut's guest": QemuMachine}
    if args.intx:
        guests["INTx through ACPI"] = IntxMachine
    if args.signed:
        guests["signed modules"] = SignedMachine
    if args.before:
        guests["both, as before"] = BeforeMachine
    if args.shipped:
        guests["as shipped"] = ShippedMachine
    host_s: dict[str, list[float]] = {name: [] for name in guests}
    guest_s: dict[str, list[float]] = {name: [] for name in guests}
    for i in range(args.boots):
        order = list(guests) if i % 2 == 0 else list(reversed(guests))
        for name in order:
            machine = guests[name](kernel=kernel, accel=accel, modules=kernel_modules(args.fs),
                                   disks=disks)
            try:
                machine.start()
                assert machine.boot_s is not None
                host_s[name].append(machine.boot_s)
                guest_s[name].append(machine.guest_uptime_s or float("nan"))
                print(f"boot {i + 1}, {name}: ready in {machine.boot_s:.2f} s "
                      f"(guest uptime at /init's ready line {machine.guest_uptime_s:.2f} s)", flush=True)
            finally:
                machine.close()
    print(f"kernel {kernel.release}, accelerator {accel}, modules for {','.join(args.fs)}, "
          f"{args.disks} scratch disks")
    for name in guests:
        print(f"{name:<17} boot-to-ready over {len(host_s[name])} boots: median "
              f"{statistics.median(host_s[name]):.2f} s, max {max(host_s[name]):.2f} s "
              f"(guest uptime median {statistics.median(guest_s[name]):.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
