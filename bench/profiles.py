"""Do the device profiles differ? (a script, not a test): prints fio figures per profile.

Boots one guest with one data disk per device profile, each throttled by
qemu as its profile says, and for each profile puts the disk behind
dm-delay with the profile's read/write/flush delays (as crash, cut and
bench do) and runs fio on the block device: 4 KiB random writes,
O_DIRECT, queue depth 1, an fsync after every write (``--fsync=1``, so
every write pays the write delay and every fsync a cache flush). Prints,
per profile, the write IOPS and the fsync latency (mean, median, 99th
percentile) fio measured, next to the profile's own numbers.

Run under emulation the guest adds its own CPU cost to every I/O, so the
figures are for comparing profiles with one another, not with hardware.

Usage: python bench/profiles.py [--profiles ram,nvme,ssd,hdd,usb-flash]
                                [--runtime 8] [--size-mib 64]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.fspath(Path(__file__).resolve().parent.parent))

from devicemapper.delay import delayed_path
from framework.core import clock
from framework.core.machine.base import DiskSpec
from framework.core.machine.qemu import QemuMachine
from recovery.profiles import builtin_profiles, get_profile

MiB = 1024 * 1024


def fio_argv(dev: str, *, runtime_s: int, size_mib: int) -> list[str]:
    return ["fio", "--output-format=json", "--name=profile", f"--filename={dev}",
            "--rw=randwrite", "--bs=4k", "--ioengine=psync", "--direct=1", "--iodepth=1",
            "--fsync=1", f"--size={size_mib}M", f"--runtime={runtime_s}", "--time_based",
            "--randrepeat=1", "--norandommap"]


def parse_fio(stdout: str) -> tuple[float, float, float, float]:
    """(write IOPS, fsync mean, median, p99 in ms) from fio's JSON output."""
    doc = json.loads(stdout[stdout.find("{"):])
    job = doc["jobs"][0]
    sync = job["sync"]["lat_ns"]
    pct = sync.get("percentile", {})
    return (float(job["write"]["iops"]), sync["mean"] / 1e6,
            pct.get("50.000000", 0) / 1e6, pct.get("99.000000", 0) / 1e6)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profiles", default=",".join(builtin_profiles()),
                   help="comma-separated profile names (default: every built-in one)")
    p.add_argument("--runtime", type=int, default=8, help="seconds of fio per profile (default: 8)")
    p.add_argument("--size-mib", type=int, default=64, help="disk and fio region size (default: 64)")
    args = p.parse_args()

    profiles = [get_profile(n) for n in args.profiles.split(",") if n]
    disks = [DiskSpec(f"data-{pr.name}", args.size_mib * MiB,
                      bandwidth_bytes_s=pr.bandwidth_bytes_s, iops=pr.iops) for pr in profiles]
    rows = []
    start = clock.monotonic()
    with QemuMachine(disks=disks) as machine:
        machine.start()
        for pr in profiles:
            with delayed_path(machine, machine.disk(f"data-{pr.name}"), pr.delays,
                              name="pc-delay-bench") as dev:
                out = machine.run(fio_argv(dev, runtime_s=args.runtime, size_mib=args.size_mib),
                                  timeout_s=args.runtime * 10 + 120)
            rows.append((pr, *parse_fio(out.stdout)))
        accel = machine.accel
    total_s = clock.monotonic() - start

    print(f"fio 4 KiB random writes, O_DIRECT, iodepth 1, fsync after each write, "
          f"{args.runtime} s per profile on a {args.size_mib} MiB data disk; accel {accel}, "
          f"wall {total_s:.0f} s")
    header = (f"{'profile':<10} {'r/w/flush ms':>13} {'throttle':>22} {'write IOPS':>11} "
              f"{'fsync mean':>11} {'p50':>8} {'p99':>8}")
    print(header)
    print("-" * len(header))
    for pr, iops, mean, p50, p99 in rows:
        limits = " ".join(filter(None, (
            f"{pr.bandwidth_mb_s:g}MB/s" if pr.bandwidth_mb_s is not None else "",
            f"{pr.iops}IOPS" if pr.iops is not None else ""))) or "-"
        print(f"{pr.name:<10} {f'{pr.read_ms}/{pr.write_ms}/{pr.flush_ms}':>13} {limits:>22} "
              f"{iops:>11.1f} {mean:>9.2f}ms {p50:>6.2f}ms {p99:>6.2f}ms")
    print("\nfsync latency: fio's sync latency (the fsync after each write); p50/p99 are fio's "
          "percentile buckets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
