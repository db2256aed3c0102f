#!/usr/bin/env python3
"""Crash states checked per second: powercut's engine versus a naive loop.

The naive loop does what xfstests generic/482 does: for every crash point,
replay the log from entry 0 onto the device, mount that device itself (so
journal replay and fsck writes land on it), unmount and fsck. powercut
replays forward only and checks each state on a throwaway dm-snapshot.
Both run on the same recorded log in the same guest; only prefix states at
the chosen points are checked. powercut does more per state (the oracle
check and a full read of the tree), the naive loop only mounts and fscks.

The naive loop's replay grows with the point's position in the log, so
the ratio grows with log length. The default is the negative-control
workload (all of gen:seq2, a ~100 MiB log) at a seeded sample of points
spread over the whole log; checking all of its 2,867 marks the naive way
would take over an hour under TCG. On a short log (``--case random:600``,
15 MiB) the mount and fsck that both loops pay dominate, and the ratio is
near 4x.

Run: .venv/bin/python bench/crash.py [--target ext4/ordered] [--case gen:seq2]
     [--max-sequences N] [--points sample:150]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from crashcases.check import Timeouts
from crashcases.engine import CrashEngine, CrashPlan, guest_files, timeouts_for
from framework.core import agent, clock
from framework.core.agent import Emit
from framework.core.command import HostRunner
from framework.core.machine.base import DiskSpec
from framework.core.machine.qemu import QemuMachine

MiB = 1 << 20


class ToolRunner(HostRunner):
    runs_here = False  # no in-process mount(2): what a shell script does


@agent.task("crash-naive")
def naive(task: dict[str, Any], emit: Emit) -> None:
    """generic/482's loop: replay 0..p onto the device, mount it, umount, fsck."""
    from devicemapper.replay import Replayer
    from recovery.fsck import run_fsck
    from recovery.mount import mount_timed, umount
    from recovery.targets import get_target

    # The tools as generic/482 runs them: mount(8), umount(8), fsck, each a process.
    runner = ToolRunner()
    target = get_target(task["target"])
    timeouts = Timeouts(**task["timeouts"])
    mnt = Path("/tmp/powercut/naive")
    mnt.mkdir(parents=True, exist_ok=True)
    replayed = 0
    start = clock.monotonic()
    for point in task["points"]:
        # Fresh device every time: the previous mount and fsck wrote to it.
        runner.run(["blkdiscard", "-f", task["replay_dev"]], timeout_s=120, ok_status=None)
        with Replayer(task["log_dev"], task["replay_dev"]) as rep:
            rep.replay_to(point)
            replayed += rep.bytes_written
        res = mount_timed(runner, target, task["replay_dev"], os.fspath(mnt), timeout_s=timeouts.mount_s)
        if res.ok:
            umount(runner, os.fspath(mnt))
        run_fsck(runner, target, task["replay_dev"], repair=False, timeout_s=timeouts.fsck_s)
    emit({"result": {"states": len(task["points"]), "seconds": clock.monotonic() - start,
                     "replay_bytes": replayed}})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="ext4/ordered")
    ap.add_argument("--case", default="gen:seq2")
    ap.add_argument("--max-sequences", type=int, default=None,
                    help="gen:* cases: a seeded sample of N sequences (default: all)")
    ap.add_argument("--points", default="sample:150")
    ap.add_argument("--limit", type=int, default=0, help="check at most this many points (0: all)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="powercut-bench-crash-"))
    plan = CrashPlan(target=args.target, case=args.case, max_sequences=args.max_sequences,
                     points=args.points)

    def factory(disks, rundir, fstypes):  # type: ignore[no-untyped-def]
        return QemuMachine(disks=disks, fstypes=fstypes, rundir=rundir).start()

    engine = CrashEngine(plan, work, factory)
    recorder, info = engine.record()
    recorder.close()
    entries = engine.entries()
    states = engine.plan_states(entries)
    if args.limit:
        states = states[: args.limit]
    log_bytes = max(e.payload_end for e in entries)
    capped = f" (max {args.max_sequences} sequences)" if args.max_sequences else ""
    print(f"recorded {args.case}{capped} at points {args.points} on {args.target}: "
          f"{info['entries']} entries, {log_bytes / MiB:.1f} MiB of log, {len(states)} crash states")

    disks = [DiskSpec("log", engine.log_path.stat().st_size, image=engine.log_path, readonly=True),
             DiskSpec("replay", engine.sizes["replay"]), DiskSpec("cow", engine.sizes["cow"])]
    machine = QemuMachine(disks=disks, fstypes=(engine.target.fstype,), rundir=work / "bench")
    machine.start()
    try:
        results_path = guest_files(machine, engine.oracle_path)
        timeouts = timeouts_for(600)
        t0 = clock.monotonic()
        ours = agent.call(machine, {
            "task": "crash-check", "target": args.target, "log_dev": machine.disk("log"),
            "replay_dev": machine.disk("replay"), "cow_dev": machine.disk("cow"),
            "oracle_path": os.fspath(machine.rundir / "oracle.json"),
            "results_path": os.fspath(results_path), "states": [s.to_dict() for s in states],
            "timeouts": asdict(timeouts),
        }, timeout_s=36000)
        ours_s = clock.monotonic() - t0
        ours_bytes = ours[-1]["replay_written_bytes"]
        t0 = clock.monotonic()
        naive_res = agent.call(machine, {
            "task": "crash-naive", "module": "bench.crash", "target": args.target,
            "log_dev": machine.disk("log"), "replay_dev": machine.disk("replay"),
            "points": [s.point.index for s in states],
            "timeouts": asdict(timeouts),
        }, timeout_s=36000)[0]
        naive_s = clock.monotonic() - t0
    finally:
        machine.close()
    n = len(states)
    print(f"{'':<10}{'states/s':>10}{'seconds':>10}{'replay MiB':>12}{'x log size':>12}")
    print(f"{'powercut':<10}{n / ours_s:>10.2f}{ours_s:>10.1f}{ours_bytes / MiB:>12.1f}{ours_bytes / log_bytes:>12.2f}")
    print(f"{'naive':<10}{n / naive_s:>10.2f}{naive_s:>10.1f}{naive_res['replay_bytes'] / MiB:>12.1f}"
          f"{naive_res['replay_bytes'] / log_bytes:>12.2f}")
    print(f"speed-up {naive_s / ours_s:.1f}x in states/s; replay bytes "
          f"{ours_bytes / log_bytes:.2f}x the log for powercut vs {naive_res['replay_bytes'] / log_bytes:.1f}x naive")
    print(f"(run directory kept for inspection: {work})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
