"""``powercut crash`` and ``powercut recheck``: crash-consistency runs."""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from crashcases.cases import list_cases
from crashcases.check import CheckResult
from crashcases.engine import (
    CrashPlan,
    CrashRunResult,
    MachineFactory,
    recheck,
    reproducer_command,
    run_crash,
    run_spec,
    validate_plan,
)
from crashcases.operations import Workload
from crashcases.outcomes import Outcome, fails
from framework.cli import (
    add_machine_options,
    add_target_options,
    named_user_targets,
)
from framework.cli.vm import machine_from_args
from framework.core import junit
from framework.core.lifecycle import run_lifecycle
from framework.core.machine.base import DiskSpec, Machine
from framework.core.machine.kernel import kernel_spec
from framework.core.store import Store
from recovery.targets import Target

EPILOG = """\
outcomes:
  ok           mounted, every promise kept, fsck clean
  recovered    every promise kept, but fsck had to repair (a failure for journalled targets)
  data-loss    something promised durable by fsync/fdatasync/sync is missing or wrong
  corrupt      fsck could not repair it, or reading the tree failed
  unmountable  the kernel refused to mount the state
  hang         mount, umount or fsck outlived its deadline (the guest is replaced)

examples:
  powercut crash --target ext4/ordered --case gen:seq2 --max-sequences 40
  powercut crash --target ext4/nobarrier --case hand:write-fsync-rename   # positive control
  powercut crash --target ext4/journal --case random:200 --points every:25 --variants prefix,subset,torn
  powercut recheck results/crash-.../ 1234/subset:77     # rebuild and recheck one state
"""


def machine_factory(args: argparse.Namespace) -> MachineFactory:
    kernel = kernel_spec(args.kernel, args.modules)

    def factory(disks: Sequence[DiskSpec], rundir: Path, fstypes: tuple[str, ...]) -> Machine:
        return machine_from_args(args, disks=disks, fstypes=fstypes, rundir=rundir,
                                 kernel=kernel).start()

    return factory


def summary_table(result: CrashRunResult) -> Table:
    table = Table(title=f"{result.plan.target} · {result.plan.case} · {len(result.states)} crash states")
    table.add_column("outcome")
    table.add_column("states", justify="right")
    table.add_column("mount s (median / max)", justify="right")
    table.add_column("fsck s (median / max)", justify="right")
    for outcome in Outcome:
        rs = [r for r in result.results.values() if r.outcome is outcome]
        if not rs:
            continue
        table.add_row(outcome.value, str(len(rs)), _spread([r.mount_s for r in rs]),
                      _spread([r.fsck_check_s for r in rs]))
    return table


def _spread(values: list[float | None]) -> str:
    xs = [v for v in values if v is not None]
    return f"{statistics.median(xs):.3f} / {max(xs):.3f}" if xs else "-"


def junit_cases(result: CrashRunResult, target: Target) -> list[junit.Case]:
    """One test case per checked state; it fails as ``fails`` says for the target."""
    cases = []
    for s in result.states:
        r = result.results.get(s.key)
        if r is None:
            continue
        failure = None
        if fails(r.outcome, target):
            first = r.findings[0]["detail"] if r.findings else (
                r.mount_error or (r.notes[0] if r.notes else ""))
            failure = f"{r.outcome.value}: {first}"[:500]
        details = "\n".join([f"reproduce: {reproducer_command(result.run_dir, s.key)}",
                             *(f"{f['kind']}: {f['path']}: {f['detail']}" for f in r.findings), *r.notes])
        cases.append(junit.Case(f"{s.key} (last mark {s.point.last_mark})",
                                f"powercut.crash.{result.plan.target}.{result.plan.case}",
                                r.duration_s, failure, details))
    return cases


def plan_from_args(args: argparse.Namespace, target: str,
                   user_targets: tuple[Target, ...] = ()) -> CrashPlan:
    """The plan for one ``target``; ``user_targets``: the --targets-file definitions it may name."""
    return CrashPlan(target=target, user_targets=user_targets, case=args.case, seed=args.seed,
                     points=args.points, variants=tuple(v.strip() for v in args.variants.split(",") if v.strip()),
                     per_point=args.per_point, jobs=args.jobs, check_timeout_s=args.check_timeout,
                     inject_hang=args.inject_hang, max_sequences=args.max_sequences,
                     data_mib=args.data_mib)


def cmd_crash(args: argparse.Namespace) -> int:
    user = named_user_targets(args)  # the targets file is read once
    plans = [plan_from_args(args, name, user) for name in args.target]
    # Every plan is checked (and its workload built) before a run directory,
    # a store row or a guest exists: bad options create nothing.
    checked = [validate_plan(plan) for plan in plans]
    suites: list[tuple[str, list[junit.Case]]] = []
    failed = False
    with Store(Path(args.db)) as store:
        for plan, plan_checked in zip(plans, checked):
            result = crash_one(args, store, plan, plan_checked)
            cases = junit_cases(result, plan.spec)
            suites.append((f"powercut crash {plan.target} {plan.case}", cases))
            junit.write(result.run_dir / "junit.xml", *suites[-1])
            failed |= any(c.failure for c in cases)
    if args.junit:
        junit.write_suites(Path(args.junit), suites)
    return 1 if failed else 0


def crash_one(args: argparse.Namespace, store: Store, plan: CrashPlan,
              checked: tuple[Target, Workload]) -> CrashRunResult:
    """One target's crash run, with its progress bar and summary."""
    target = checked[0]
    err = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[status]}"), TimeRemainingColumn(),
                  console=err, transient=False, disable=args.quiet) as progress:
        task = progress.add_task(f"recording {plan.case} on {plan.target}", total=None, status="")
        bad = {"n": 0}

        def planned(n: int) -> None:
            progress.update(task, description=f"checking {plan.target}", total=n, completed=0)

        def step(done: int, total: int, r: CheckResult | None) -> None:
            if r is not None and fails(r.outcome, target):
                bad["n"] += 1
            progress.update(task, completed=done, status=f"{bad['n']} failing")

        with run_lifecycle(run_spec(plan), Path(args.results), store) as run:
            result = run_crash(plan, run, machine_factory(args), progress=step,
                               on_planned=planned, checked=checked)
    out = Console()
    out.print(summary_table(result))
    failing = [s for s in result.states
               if s.key in result.results and fails(result.results[s.key].outcome, target)]
    out.print(f"log: {result.record['entries']} entries, {len(result.states)} states checked in "
              f"{result.wall_s:.1f} s; guests replaced after hangs: {result.replacements}")
    out.print(f"results: {result.run_dir}/results.json  junit: {result.run_dir}/junit.xml  "
              f"db: {args.db} (run {result.run_id})")
    for s in failing[:10]:
        r = result.results[s.key]
        why = "; ".join(([f"mount: {r.mount_error}"] if r.mount_error else []) + r.notes)[:200]
        what = r.findings[0] if r.findings else {"kind": "", "path": "", "detail": why}
        out.print(f"  {r.outcome.value:<11} {s.key:<22} {what['kind']} {what['path']} {what['detail']}")
        out.print(f"              reproduce: {reproducer_command(result.run_dir, s.key)}")
    if len(failing) > 10:
        out.print(f"  ... and {len(failing) - 10} more (see results.json)")
    return result


def cmd_recheck(args: argparse.Namespace) -> int:
    target, result = recheck(Path(args.run_dir), args.state, machine_factory(args))
    print(f"{args.state}: {result.outcome.value}")
    for f in result.findings:
        print(f"  {f['kind']}: {f['path']}: {f['detail']}")
    if result.mount_error:
        print(f"  mount failed: {result.mount_error}")
    for n in result.notes:
        print(f"  note: {n}")
    print(f"  mount {result.mount_s}s, fsck {result.fsck_check} {result.fsck_check_s}s"
          + (f", repair {result.fsck_repair} {result.fsck_repair_s}s" if result.fsck_repair else ""))
    return 1 if fails(result.outcome, target) else 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "crash", help="record a workload and check every crash state",
        description="Record a workload on dm-log-writes in a guest, rebuild the disk at every "
                    "chosen crash point (and variants of it), and check that each state mounts, "
                    "keeps what fsync promised and fscks clean. Mount time (journal replay) and "
                    "fsck time are measured for every state. Exits 1 if any state fails.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_target_options(p, what="filesystem configurations to check, e.g. ext4/ordered; "
                               "one crash run each")
    p.add_argument("--case", default="hand:write-fsync-rename",
                   help=f"workload: {', '.join(list_cases())}, random:N (default: hand:write-fsync-rename)")
    p.add_argument("--max-sequences", type=int, metavar="N",
                   help="gen:* cases: check a seeded sample of N sequences instead of all")
    p.add_argument("--seed", type=int, default=0, help="seed for the workload, sampling and variants (default: 0)")
    p.add_argument("--points", default="marks",
                   help="crash points: marks (after each durability op), fua, flush, every:N, sample:K")
    p.add_argument("--variants", default="prefix",
                   help="comma list of prefix, subset (unflushed writes in any subset), torn "
                        "(a multi-sector write half done), lying (a disk that ignores flushes; "
                        "a positive control) (default: prefix)")
    p.add_argument("--per-point", type=int, default=2, metavar="N",
                   help="seeded variants of each kind per point (default: 2)")
    p.add_argument("--jobs", type=int, default=1, help="guests checking states in parallel (default: 1)")
    p.add_argument("--check-timeout", type=float, default=600.0, metavar="S",
                   help="seconds one state may take before it counts as a hang (default: 600)")
    p.add_argument("--data-mib", type=int, metavar="MIB", help="size of the data disk (default: 128, more if the filesystem needs it)")
    p.add_argument("--results", default="results", metavar="DIR", help="where run directories go (default: ./results)")
    p.add_argument("--junit", metavar="PATH",
                   help="also write one JUnit XML for all targets here (each run directory "
                        "always gets its own junit.xml)")
    p.add_argument("--db", default="results/powercut.sqlite", metavar="PATH",
                   help="sqlite results store; every state is written as soon as it is checked "
                        "(default: results/powercut.sqlite)")
    p.add_argument("--inject-hang", metavar="STATE", help=argparse.SUPPRESS)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    add_machine_options(p)
    p.set_defaults(func=cmd_crash)

    r = sub.add_parser("recheck", help="rebuild one crash state of an earlier run and check it again",
                       description="Rebuild a crash state from the run's log and check it in a fresh guest. "
                                   "This is the reproducer command printed for every failing state.")
    r.add_argument("run_dir", help="the run directory (results/crash-...)")
    r.add_argument("state", help="the state key POINT/VARIANT, e.g. 120/prefix or 120/subset:77")
    add_machine_options(r)
    r.set_defaults(func=cmd_recheck)
