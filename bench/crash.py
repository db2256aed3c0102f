#!/usr/bin/env python3
"""Crash states checked per second: powercut's engine versus a naive loop.

The naive loop does what xfstests generic/482 does: for every crash point,
replay the log from entry 0 onto the device, mount that device itself (so
journal replay and fsck writes land on it), unmount and fsck (with the checker
powercut's check runs: e2fsck's static build where it is installed, which
generic/482 would not use; that makes the naive loop faster, not slower). powercut
replays forward only and checks each state on a throwaway dm-snapshot.
Both run on the same recorded log in the same guest; only prefix states at
the chosen points are checked. powercut does more per state (the oracle
check and a full read of the tree), the naive loop only mounts and fscks.
powercut checks two states at once (one lane per guest CPU) and checks a
state with the same bytes as the one before it on that state's mount; the
naive loop does neither.

The naive loop's replay grows with the point's position in the log, so
the ratio grows with log length. The default is the negative-control
workload (all of gen:seq2, a 378 MiB log with 2,867 durability marks) at a
seeded sample of 150 points spread over the whole log; the naive loop alone
takes about 40 minutes of it under TCG. On a short log (``--case
random:600``, 16 MiB) the mount and fsck that both loops pay dominate.

Besides states per second it prints the floor: the mount, unmount and fsck
that the states needed, as powercut's own checks timed them in the run, and
a table of where powercut's time went, phase by phase: the guest's boot and
the check task's start (on the host's clock), then, from the guest's own
timers, loading the oracle, indexing the log headers, replaying, snapshots,
mount, the oracle check, the tree read, fsck and unmount.

Run: .venv/bin/python bench/crash.py [--target ext4/ordered] [--case gen:seq2]
     [--max-sequences N] [--points sample:150]

In the guest the naive loop runs as this script's own guest program
(``python -m bench.crash --agent``); powercut's check is the usual
``crash-check`` task of ``framework.cli.guest``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from crashcases.check import CheckResult
from crashcases.crash.engine import CrashEngine, check_request, guest_files
from crashcases.crash.guest import CRASH_CHECK, CheckSummary, parse_results
from crashcases.crash.plan import CHECK_DISKS, LANE_DISKS, CrashPlan, validate_plan
from crashcases.crash.points import Strategy
from framework.core import agent, clock, rundir
from framework.core.command import HostRunner
from framework.core.machine.base import DiskSpec
from framework.core.machine.qemu import QemuMachine
from recovery.filesystems import kernel_modules
from recovery.mount import Timeouts
from recovery.targets import Target, target_from_dict

MiB = 1 << 20


class ToolRunner(HostRunner):
    runs_here = False  # no in-process mount(2): what a shell script does


@dataclass(frozen=True, slots=True)
class NaiveRequest:
    """Check the prefix states at ``points`` the naive way."""

    target: Target
    log_dev: str
    replay_dev: str
    points: tuple[int, ...]
    timeouts: Timeouts

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target.to_dict(), "log_dev": self.log_dev,
                "replay_dev": self.replay_dev, "points": list(self.points),
                "timeouts": asdict(self.timeouts)}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> NaiveRequest:
        return cls(target_from_dict(raw["target"]), str(raw["log_dev"]), str(raw["replay_dev"]),
                   tuple(int(p) for p in raw["points"]), Timeouts(**raw["timeouts"]))


@dataclass(frozen=True, slots=True)
class NaiveResult:
    states: int
    seconds: float
    replay_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> NaiveResult:
        return cls(int(raw["states"]), float(raw["seconds"]), int(raw["replay_bytes"]))


def naive(req: NaiveRequest) -> NaiveResult:
    """generic/482's loop: replay 0..p onto the device, mount it, umount, fsck."""
    from devicemapper.replay import Replayer
    from recovery.fsck import run_fsck
    from recovery.mount import mount_timed, umount

    # The tools as generic/482 runs them: mount(8), umount(8), fsck, each a process.
    runner = ToolRunner()
    mnt = Path("/tmp/powercut/naive")
    mnt.mkdir(parents=True, exist_ok=True)
    replayed = 0
    start = clock.monotonic()
    for point in req.points:
        # Fresh device every time: the previous mount and fsck wrote to it.
        runner.run(["blkdiscard", "-f", req.replay_dev], timeout_s=120, ok_status=None)
        with Replayer(req.log_dev, req.replay_dev) as rep:
            rep.replay_to(point)
            replayed += rep.bytes_written
        res = mount_timed(runner, req.target, req.replay_dev, os.fspath(mnt),
                          timeout_s=req.timeouts.mount_s)
        if res.ok:
            umount(runner, os.fspath(mnt))
        # The checker powercut's lanes run (its static build where there is one), so the
        # two loops differ in how they reach a state, not in what checks it.
        run_fsck(HostRunner(), req.target, req.replay_dev, repair=False,
                 timeout_s=req.timeouts.fsck_s, quick_start=True)
    return NaiveResult(states=len(req.points), seconds=clock.monotonic() - start,
                       replay_bytes=replayed)


CRASH_NAIVE = agent.Task("crash-naive", NaiveRequest, NaiveResult, naive)


def phase_table(summary: CheckSummary, checked: Sequence[CheckResult], *, boot_s: float,
                task_s: float, lanes: int) -> str:
    """Where powercut's time went, phase by phase: the guest's start and the task's own
    start (host side), its set-up, then what the lanes spent building and checking states
    (summed over the lanes: with two, they add up to about twice their wall time)."""
    own = [r for r in checked if not r.same_as]  # a shared state's mount, tree and fsck are its first's

    def total(name: str, rows: Sequence[CheckResult]) -> float:
        return sum(getattr(r, name) or 0.0 for r in rows)

    rows = [
        ("guest start (boot, host)", boot_s, "wall"),
        ("task start (python, imports)", max(0.0, task_s - summary.wall_s), "wall"),
        ("oracle load", summary.oracle_load_s, "wall, beside the index"),
        ("log header index", summary.index_s, "wall"),
        ("replay forward", summary.replay_s, "lanes"),
        ("snapshot make + remove", summary.snapshot_s, "lanes"),
        ("extra entries", summary.extra_s, "lanes"),
        ("mount (journal replay)", total("mount_s", own), "lanes"),
        ("oracle check", total("oracle_s", checked), "lanes"),
        ("tree read", total("tree_s", own), "lanes"),
        ("fsck", total("fsck_check_s", own) + total("fsck_repair_s", own)
         + total("log_replay_s", own), "lanes"),
        ("unmount", total("umount_s", own), "lanes"),
    ]
    lane_s = summary.prepare_s + summary.check_s
    named = sum(seconds for _, seconds, kind in rows if kind == "lanes")
    rows.append(("other, in the lanes", max(0.0, lane_s - named), "lanes"))
    n = max(1, len(checked))
    width = max(len(name) for name, _, _ in rows)
    out = [f"{'phase':<{width}}  {'seconds':>8}  {'ms/state':>8}  counted"]
    for name, seconds, kind in rows:
        counted = kind if kind != "lanes" else f"summed over {lanes} lane{'s' * (lanes > 1)}"
        out.append(f"{name:<{width}}  {seconds:>8.1f}  {1000 * seconds / n:>8.0f}  {counted}")
    out.append(f"{'the task, wall (guest clock)':<{width}}  {summary.wall_s:>8.1f}  "
               f"{1000 * summary.wall_s / n:>8.0f}  {len(checked)} states")
    return "\n".join(out)


def outcome_line(checked: Sequence[CheckResult], planned: int) -> str:
    """What the checks said, state by state, counted: a run whose states are not all ok
    (or not all checked) is no figure of speed until the outcomes are explained."""
    counts = Counter(str(result.outcome) for result in checked)
    said = ", ".join(f"{n} {outcome}" for outcome, n in counts.most_common())
    line = f"outcomes: {said or 'none'} (of {planned} states planned)"
    if len(checked) < planned:
        line += f"; {planned - len(checked)} not checked"
    return line


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="ext4/ordered")
    ap.add_argument("--case", default="gen:seq2")
    ap.add_argument("--max-sequences", type=int, default=None,
                    help="gen:* cases: a seeded sample of N sequences (default: all)")
    ap.add_argument("--points", default="sample:150")
    ap.add_argument("--limit", type=int, default=0, help="check at most this many points (0: all)")
    ap.add_argument("--no-naive", action="store_true",
                    help="time powercut and the floor only (the naive loop of a long log takes long)")
    ap.add_argument("--agent", action="store_true", help=argparse.SUPPRESS)  # in the guest
    args = ap.parse_args()
    if args.agent:
        return agent.main(agent.table(CRASH_NAIVE))

    work = Path(tempfile.mkdtemp(prefix="powercut-bench-crash-"))
    plan = CrashPlan(target=args.target, case=args.case, max_sequences=args.max_sequences,
                     points=Strategy.parse(args.points))

    def factory(disks: Sequence[DiskSpec], rundir: Path, fstypes: tuple[str, ...]) -> QemuMachine:
        return QemuMachine(disks=disks, modules=kernel_modules(fstypes), rundir=rundir).start()

    engine = CrashEngine(validate_plan(plan), work, factory)
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

    disks = [DiskSpec("log", engine.files.log_path.stat().st_size, image=engine.files.log_path,
                      readonly=True),
             *(DiskSpec(name, engine.sizes[name]) for name in (*CHECK_DISKS, *LANE_DISKS))]
    machine = QemuMachine(disks=disks, modules=kernel_modules((engine.target.fstype,)),
                          rundir=work / "bench")
    t0 = clock.monotonic()
    machine.start()
    boot_s = clock.monotonic() - t0
    try:
        guest_files(machine, engine.files.oracle_file)
        request = check_request(machine, engine.target, states, budget_s=plan.check_timeout_s,
                                measure=True)
        t0 = clock.monotonic()
        done = agent.perform(machine, CRASH_CHECK, request, timeout_s=36000)
        ours_s = clock.monotonic() - t0
        assert done.summary is not None  # asked for (measure=True)
        ours = done.summary
        ours_bytes = ours.replay_written_bytes
        naive_res, naive_s = None, 0.0
        if not args.no_naive:
            t0 = clock.monotonic()
            naive_res = agent.perform(
                machine, CRASH_NAIVE,
                NaiveRequest(engine.target, machine.disk("log"), machine.disk("replay"),
                             tuple(s.point.index for s in states), request.timeouts),
                module="bench.crash", args=("--agent",), timeout_s=36000)
            naive_s = clock.monotonic() - t0
    finally:
        machine.close()
    n = len(states)
    # The floor: what any checker pays per state, the mount (journal replay), unmount and
    # fsck (and the checker's own log replay where the kernel has none), as powercut's
    # own checks timed them in this run. A state with the same bytes as the one before
    # it needs no mount or fsck of its own: it adds nothing to the floor.
    checked = parse_results(machine.rundir / rundir.GUEST_RESULTS)
    shared = [r for r in checked if r.same_as]
    floor_s = sum((r.mount_s or 0.0) + (r.umount_s or 0.0) + (r.fsck_check_s or 0.0)
                  + (r.fsck_repair_s or 0.0) + (r.log_replay_s or 0.0)
                  for r in checked if not r.same_as)
    print(f"{'':<10}{'states/s':>10}{'seconds':>10}{'replay MiB':>12}{'x log size':>12}")
    print(f"{'powercut':<10}{n / ours_s:>10.2f}{ours_s:>10.1f}{ours_bytes / MiB:>12.1f}{ours_bytes / log_bytes:>12.2f}")
    if naive_res is not None:
        print(f"{'naive':<10}{n / naive_s:>10.2f}{naive_s:>10.1f}"
              f"{naive_res.replay_bytes / MiB:>12.1f}{naive_res.replay_bytes / log_bytes:>12.2f}")
        print(f"speed-up {naive_s / ours_s:.1f}x in states/s; replay bytes "
              f"{ours_bytes / log_bytes:.2f}x the log for powercut vs "
              f"{naive_res.replay_bytes / log_bytes:.1f}x naive")
    lanes = 1 + len(request.lanes)
    print()
    print(phase_table(ours, checked, boot_s=boot_s, task_s=ours_s, lanes=lanes))
    print()
    print(f"powercut in the guest: set-up {ours.setup_s:.1f} s (oracle, log headers); summed over "
          f"{lanes} lane{'s' if lanes > 1 else ''}: building states {ours.prepare_s:.1f} s "
          f"(replay, snapshot), checking them {ours.check_s:.1f} s; wall {ours_s:.1f} s, "
          f"the guest's task start included")
    print(f"states with the same bytes as the state before them (one mount and fsck for "
          f"both, their own promises verified): {len(shared)} of {len(checked)}")
    print(outcome_line(checked, n))
    if checked and floor_s > 0:
        distinct = len(checked) - len(shared)
        print(f"floor (mount + umount + fsck, timed in the same run): {floor_s:.1f} s, "
              f"{1000 * floor_s / distinct:.0f} ms per mounted state; powercut "
              f"{1000 * ours_s / n:.0f} ms per state, {ours_s:.1f} s = {ours_s / floor_s:.2f}x "
              f"the floor")
    print(f"(run directory kept for inspection: {work})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
