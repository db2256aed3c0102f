#!/usr/bin/env python3
"""One checking lane against two: the same crash states, the same guest, what changes.

A checking guest has two CPUs and checks two states at once where a second
copy of the filesystem can be mounted beside the first. For xfs the second
copy needs ``nouuid`` (the first lane mounts the target unchanged). This
script records a workload once, then checks the same states in one guest
twice: on one lane, then on two. It prints the wall time of each and, state
by state, anything the check saw differently: the outcome, the findings,
the fsck verdicts, whether the mount replayed the log. Zero differences is
the answer to "does the option change what the check sees"; the speed-up is
what the lane buys.

The positive control: a third pass checks a spread of the same states on one
lane with a mount option that must change what the check sees (``norecovery``
with ``ro`` by default: the log is not replayed). The comparison must find
differences there, or the script fails: a comparison that cannot see a
changed mount is no answer.

Run: .venv/bin/python bench/lanes.py [--target xfs] [--case gen:seq2]
     [--max-sequences 30] [--points marks] [--control-options norecovery,ro]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from crashcases.check import CheckResult
from crashcases.crash.engine import CrashEngine, check_request, guest_files
from crashcases.crash.guest import CRASH_CHECK, parse_results
from crashcases.crash.plan import CHECK_DISKS, LANE_DISKS, CrashPlan, validate_plan
from crashcases.crash.points import Strategy
from framework.core import agent, clock
from framework.core.machine.base import DiskSpec
from framework.core.machine.qemu import QemuMachine
from recovery.filesystems import kernel_modules


def seen(r: CheckResult) -> tuple[object, ...]:
    """What a check saw of a state, timings left out."""
    return (r.outcome.value, tuple(sorted((f["kind"], f["path"], f["detail"]) for f in r.findings)),
            r.mount_ok, r.fsck_check, r.fsck_repair, bool(r.replay_messages))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="xfs")
    ap.add_argument("--case", default="gen:seq2")
    ap.add_argument("--max-sequences", type=int, default=30)
    ap.add_argument("--points", default="marks")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--control-options", default="norecovery,ro",
                    help="mount options of the positive control pass (must change what the "
                         "check sees)")
    ap.add_argument("--control-states", type=int, default=30,
                    help="states the control pass checks, spread over the run")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="powercut-bench-lanes-"))
    plan = CrashPlan(target=args.target, case=args.case, max_sequences=args.max_sequences,
                     points=Strategy.parse(args.points), seed=args.seed)

    def factory(disks: Sequence[DiskSpec], rundir: Path, fstypes: tuple[str, ...]) -> QemuMachine:
        return QemuMachine(disks=disks, modules=kernel_modules(fstypes), rundir=rundir).start()

    engine = CrashEngine(validate_plan(plan), work, factory)
    recorder, _ = engine.record()
    recorder.close()
    states = engine.plan_states(engine.entries())
    disks = [DiskSpec("log", engine.files.log_path.stat().st_size, image=engine.files.log_path,
                      readonly=True),
             *(DiskSpec(name, engine.sizes[name]) for name in (*CHECK_DISKS, *LANE_DISKS))]
    machine = QemuMachine(disks=disks, modules=kernel_modules((engine.target.fstype,)),
                          rundir=work / "bench")
    machine.start()
    walls: dict[int, float] = {}
    results: dict[int, dict[str, CheckResult]] = {}
    try:
        guest_files(machine, engine.files.oracle_file)
        two = check_request(machine, engine.target, states, budget_s=plan.check_timeout_s)
        if not two.lanes:
            print(f"{args.target}: its filesystem checks one state at a time; nothing to compare")
            return 2
        step = max(1, len(two.states) // max(1, args.control_states))
        planted = dataclasses.replace(
            two, lanes=(), states=two.states[::step],
            target=dataclasses.replace(two.target, mount_options=(
                *two.target.mount_options, *args.control_options.split(","))))
        for lanes, request in ((1, dataclasses.replace(two, lanes=())), (2, two), (0, planted)):
            out = machine.rundir / f"results-{lanes}.jsonl"  # the guest sees the run directory
            request = dataclasses.replace(request, results_path=str(out))
            t0 = clock.monotonic()
            agent.perform(machine, CRASH_CHECK, request, timeout_s=36000)
            walls[lanes] = clock.monotonic() - t0
            results[lanes] = {r.key: r for r in parse_results(out)}
    finally:
        machine.close()
    one, both, control = results[1], results[2], results[0]
    differ = [k for k in one if k in both and seen(one[k]) != seen(both[k])]
    fired = [k for k in control if k in one and seen(one[k]) != seen(control[k])]
    missing = sorted(set(one) ^ set(both))
    outcomes = Counter(r.outcome.value for r in one.values())
    print(f"{args.target}, {args.case} (max {args.max_sequences} sequences), points {args.points}: "
          f"{len(states)} states; outcomes on one lane: "
          + ", ".join(f"{o} {n}" for o, n in sorted(outcomes.items())))
    print(f"{'lanes':<8}{'wall s':>10}{'ms/state':>10}")
    for lanes in (1, 2):
        print(f"{lanes:<8}{walls[lanes]:>10.1f}{1000 * walls[lanes] / len(states):>10.0f}")
    print(f"speed-up of two lanes: {walls[1] / walls[2]:.2f}x")
    print(f"states seen differently: {len(differ)} of {len(one)}; checked on one run only: "
          f"{len(missing)}")
    for k in differ[:10]:
        print(f"  {k}: one lane {seen(one[k])}; two lanes {seen(both[k])}")
    print(f"positive control (one lane, mounted {args.control_options}): {len(fired)} of "
          f"{len(control)} states seen differently"
          + ("" if fired else ": the comparison saw no change, so its zero above proves nothing"))
    print(f"(run directory kept for inspection: {work})")
    return 1 if differ or missing or not fired else 0


if __name__ == "__main__":
    sys.exit(main())
