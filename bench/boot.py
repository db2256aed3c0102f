#!/usr/bin/env python3
"""Boot-to-ready time of the qemu guest: median and max over N boots.

Ready means the guest shell answered a framed command (the initramfs is
cached before the first boot, so every boot is measured the same way).
Run: .venv/bin/python bench/boot.py [--boots 5] [--accel auto|kvm|tcg]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from framework.core.machine import initramfs
from framework.core.machine.kernel import default_kernel
from framework.core.machine.qemu import QemuMachine, choose_accel
from recovery.filesystems import kernel_modules


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--boots", type=int, default=5)
    ap.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto")
    ap.add_argument("--fs", action="append", default=["ext4"], help="filesystem types whose kernel modules to load")
    args = ap.parse_args()
    kernel = default_kernel()
    accel = choose_accel(kernel) if args.accel == "auto" else args.accel
    # Build (or reuse) the initramfs first: that cost is paid once, not per boot.
    initramfs.initramfs(initramfs.resolve_modules(initramfs.modules_for(kernel_modules(args.fs)), kernel.release)[0])
    host_s, guest_s = [], []
    for i in range(args.boots):
        machine = QemuMachine(kernel=kernel, accel=accel, modules=kernel_modules(args.fs))
        try:
            machine.start()
            assert machine.boot_s is not None
            host_s.append(machine.boot_s)
            guest_s.append(machine.guest_uptime_s or float("nan"))
            print(f"boot {i + 1}: ready in {machine.boot_s:.2f} s "
                  f"(guest uptime at /init's ready line {machine.guest_uptime_s:.2f} s)", flush=True)
        finally:
            machine.close()
    print(f"kernel {kernel.release}, accelerator {accel}, modules for {','.join(args.fs)}")
    print(f"boot-to-ready over {len(host_s)} boots: median {statistics.median(host_s):.2f} s, "
          f"max {max(host_s):.2f} s (guest uptime median {statistics.median(guest_s):.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
