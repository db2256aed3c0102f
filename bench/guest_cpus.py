#!/usr/bin/env python3
"""Guests of one vCPU against two: alone, and two guests side by side on the same cores.

Under TCG each vCPU is a host thread. A crash run's checking guest has two vCPUs by
default, one per checking lane; POWERCUT_GUEST_CPUS=1 gives it one, and the two lanes
then take turns. This script runs the same `powercut crash` (a fresh recording and
check each time) with each vCPU count, first alone and then two at once, the way a
test suite with two workers or a CI host with two shards runs them. It prints the
wall time and the CPU time the runs and their guests used (children's rusage), and
the states each run checked. The anchor is the two-vCPU figure of the same run:
alone, two vCPUs should be the faster (the lanes check at once); side by side on a
host with fewer cores than vCPUs, the question is what the second vCPU costs.

Run: .venv/bin/python bench/guest_cpus.py [--case random:200] [--target ext4/ordered]
     [--reps 1]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POWERCUT = [sys.executable, "-m", "framework.cli"]
ROOT = Path(__file__).resolve().parent.parent


def cpu_s() -> float:
    """CPU seconds of every child waited for so far, their own children (qemu) included."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def checked(results: Path) -> int:
    """The states a run checked, from its run directory's results."""
    (run,) = results.glob("crash-*/results.json")
    return len(json.loads(run.read_text())["states"])


def crash_runs(n: int, cpus: int, args: argparse.Namespace, scratch: Path) -> tuple[float, float, list[int]]:
    """``n`` crash runs started at once with guests of ``cpus`` vCPUs: wall s, CPU s, states."""
    env = {**os.environ, "POWERCUT_GUEST_CPUS": str(cpus)}
    dirs = [Path(tempfile.mkdtemp(prefix=f"cpus{cpus}-", dir=scratch)) for _ in range(n)]
    c0, t0 = cpu_s(), time.perf_counter()
    procs = [subprocess.Popen([*POWERCUT, "crash", "-q", "--target", args.target, "--case", args.case,
                               "--results", os.fspath(d), "--db", os.fspath(d / "db.sqlite")],
                              env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True) for d in dirs]
    for p in procs:
        _, err = p.communicate()
        if p.returncode not in (0, 1):  # 1: findings, still a whole run
            raise SystemExit(f"powercut crash failed ({p.returncode}): {err[-2000:]}")
    return time.perf_counter() - t0, cpu_s() - c0, [checked(d) for d in dirs]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", default="random:200")
    ap.add_argument("--target", default="ext4/ordered")
    ap.add_argument("--reps", type=int, default=1, help="each configuration this many times")
    args = ap.parse_args()
    print(f"host: {os.cpu_count()} cores; powercut crash --target {args.target} --case {args.case}")
    rows: dict[tuple[int, int], list[tuple[float, float, list[int]]]] = {}
    with tempfile.TemporaryDirectory(prefix="powercut-bench-cpus-") as tmp:
        for rep in range(args.reps):
            # Alternated, so a slow period of the host does not fall on one vCPU count.
            order = [(1, 2), (1, 1), (2, 1), (2, 2)] if rep % 2 else [(1, 1), (1, 2), (2, 2), (2, 1)]
            for runs, cpus in order:
                got = crash_runs(runs, cpus, args, Path(tmp))
                rows.setdefault((runs, cpus), []).append(got)
                print(f"  rep {rep + 1}: {runs} run(s) at once, {cpus} vCPU(s) a guest: "
                      f"{got[0]:.1f} s wall, {got[1]:.1f} s CPU, states {got[2]}", flush=True)
    print(f"\n{'runs at once':>12} {'vCPUs':>6} {'wall s':>8} {'CPU s':>8} {'states':>7}   (best of {args.reps})")
    for runs in (1, 2):
        for cpus in (2, 1):
            wall, cpu, states = min(rows[runs, cpus], key=lambda r: r[0])
            print(f"{runs:>12} {cpus:>6} {wall:>8.1f} {cpu:>8.1f} {sum(states):>7}")
        w2, c2 = min(r[0] for r in rows[runs, 2]), min(r[1] for r in rows[runs, 2])
        w1, c1 = min(r[0] for r in rows[runs, 1]), min(r[1] for r in rows[runs, 1])
        print(f"{'':>12} one vCPU against two: wall {w1 / w2:.2f}x, CPU {c1 / c2:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
