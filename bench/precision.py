"""How precise is one bench repetition? (a script, not a test): prints figures.

Boots one guest, runs ``--reps`` repetitions of one workload on one target
(default: fsmark on ext4/ordered at tiny scale; each on a fresh mkfs with
cold caches, as ``powercut bench`` does) and prints, per metric, the mean,
the coefficient of variation across repetitions, the 95% confidence
interval half width relative to the mean, and how many repetitions it
would take to get that half width under ``--target-pct`` percent of the
mean (``framework.core.stats.repetitions_needed``, t-based), plus wall times.

Knobs to find what makes repetitions noisy: ``--cpus`` (the guest's vCPUs; under TCG each
is a host thread competing with the host's other work), ``--disk-cache`` (qemu's cache mode
for the scratch disks: powercut's default ``unsafe`` serves them from the host's page cache
and drops flushes) and ``--warmup`` (one more repetition first, discarded, as ``powercut
bench --warmup``). Compare runs of the same workload with one knob changed.

Usage: python bench/precision.py [--workload fsmark] [--target ext4/ordered]
                                 [--reps 10] [--scale tiny] [--target-pct 5]
                                 [--cpus N] [--disk-cache unsafe] [--warmup]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, os.fspath(Path(__file__).resolve().parent.parent))

from framework.bench import engine as bench
from framework.bench.engine import BenchConfig
from framework.bench.report import print_progress
from framework.bench.workloads import Scale
from framework.cli.bench import BENCH_CPUS
from framework.core import clock
from framework.core.machine.qemu import QemuMachine
from framework.core.stats import StatsError, repetitions_needed, summarize
from recovery.filesystems import kernel_modules


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="fsmark")
    p.add_argument("--target", default="ext4/ordered")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--scale", choices=[s.value for s in Scale], default="tiny")
    p.add_argument("--target-pct", type=float, default=5.0,
                   help="wanted 95%% half width, percent of the mean (default: 5)")
    p.add_argument("--cpus", type=int, default=BENCH_CPUS,
                   help=f"guest vCPUs (default: {BENCH_CPUS}, as powercut bench)")
    p.add_argument("--disk-cache", default="unsafe",
                   choices=["unsafe", "writeback", "none", "directsync", "writethrough"],
                   help="qemu cache mode of the guest's disks (default: unsafe)")
    p.add_argument("--warmup", action="store_true",
                   help="run one more repetition first and discard it")
    args = p.parse_args()

    config = BenchConfig(targets=(args.target,), workload=args.workload, scale=Scale(args.scale),
                         reps=args.reps, seed=0, warmup=args.warmup, cpus=args.cpus)
    targets = bench.resolve_targets(config)
    start = clock.monotonic()
    with QemuMachine(disks=bench.disks_for(targets, config.scale),
                     modules=kernel_modules(t.fstype for t in targets),
                     cpus=args.cpus, disk_cache=args.disk_cache) as machine:
        machine.start()
        boot_s = clock.monotonic() - start
        run = bench.run_bench(config, bench.GuestExecutor(machine, config),
                              progress=print_progress)
        accel = machine.accel
    total_s = clock.monotonic() - start

    print(f"{args.workload} on {args.target} at {args.scale} scale, {args.reps} repetitions "
          f"(fresh mkfs, cold caches each), accel {accel}, {args.cpus} vCPUs, disk cache "
          f"{args.disk_cache}{', one warm-up repetition discarded' if args.warmup else ''}")
    print(f"wall time: {total_s:.1f} s in all, boot {boot_s:.1f} s, "
          f"{run.wall_s / len(run.samples):.1f} s per repetition (mkfs to unmount, incl. the "
          f"console round trip and python start in the guest)")
    if run.host_load is not None:
        print(f"host load average {run.host_load[0]:.2f} before, {run.host_load[1]:.2f} after "
              f"({os.cpu_count()} CPUs; other work on the host slows an emulated guest)")
    print()
    header = (f"{'metric':<22} {'unit':<15} {'mean':>12} {'CoV':>7} {'95% hw':>8} "
              f"{'reps for +-' + format(args.target_pct, 'g') + '%':>16}")
    print(header)
    print("-" * len(header))
    names: dict[str, str] = {}
    for sample in run.samples:
        for m in sample.result.metrics:
            names.setdefault(m.name, m.unit)
    for name, unit in names.items():
        values = bench.kept_values(run.samples, name, config.targets)[args.target]
        if len(values) < 2:
            print(f"{name:<22} {unit:<15} {'(fewer than 2 values)':>12}")
            continue
        s = summarize(values)
        try:
            need = str(repetitions_needed(values, args.target_pct / 100.0, 0.95))
        except StatsError as exc:
            need = f"- ({exc})"
        primary = " *" if name == run.primary else ""
        print(f"{name + primary:<22} {unit:<15} {s.mean:>12.4g} {100 * s.cov:>6.1f}% "
              f"{100 * s.half_width_ratio(0.95):>7.1f}% {need:>16}")
    print("\n* primary metric; CoV = stdev/mean across repetitions; 95% hw = t-interval half "
          "width / mean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
