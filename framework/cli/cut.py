"""``powercut cut``: power cuts on a live workload (dm-flakey) and the recovery after them."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from crashcases.check import explain
from crashcases.cut.engine import (
    CutPlan,
    CutRunResult,
    load_cut_plan,
    run_cut,
    run_spec,
    trial_key,
    validate_cut_plan,
)
from crashcases.cut.summary import TargetSummary, TrialResult, summarize
from crashcases.vocabulary import KNOWN, Outcome, fails
from crashcases.workload.cases import list_cases
from devicemapper.flakey import FlakeyMode
from framework.cli import (
    add_machine_options,
    add_profile_option,
    add_target_options,
    case_of,
    named_user_targets,
)
from framework.cli.crash import KNOWN_HELP, known_cases, known_list, machine_factory, print_known
from framework.cli.targets import require_supported
from framework.cli.vm import resolve_kernel
from framework.core import junit, rundir
from framework.core.errors import ConfigError
from framework.core.lifecycle import resumable_run, resumed_lifecycle, run_lifecycle
from framework.core.store import Store

EPILOG = """\
how a trial goes:
  mkfs and mount on dm-flakey (pass-through); run the workload; at the cut swap
  the table to drop_writes (writes vanish) or error_writes (writes fail with
  EIO) with 'dmsetup suspend --nolockfs' (no freeze: a power cut); let the
  workload go on for --continue-syncs durability ops; unmount (its writes are
  lost too); restore pass-through; then mount (timed: journal replay), check
  that everything fsync promised before the cut is there, read the tree, fsck.

outcomes: ok, recovered (fsck had to repair: a failure for journalled
targets), data-loss, corrupt, unmountable, hang; see 'powercut crash --help'.
A failing trial whose every finding known behaviour explains (the shipped
crashcases/known.toml and --known FILE) is reported as known, not failed.

examples:
  powercut cut --target ext4/ordered --case random:200 --trials 5
  powercut cut --target ext4/ordered --target ext2 --case gen:seq1 --max-sequences 20
  powercut cut --target xfs --case random:400 --cut-after-s 3 --mode error_writes
  powercut cut --target ext4/ordered --case hand:append-fdatasync --count-post-cut-fsync  # must fail
  powercut cut --target ext4/ordered --case random:200 --known my-known.toml
"""


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def summary_table(summaries: Sequence[TargetSummary], *, title: str = "recovery after power cuts",
                  known: dict[str, int] | None = None) -> Table:
    """One row per target; ``known``: target -> trials reported as known (their raw
    outcomes stay in the outcomes column)."""
    table = Table(title=title)
    table.add_column("target")
    table.add_column("trials", justify="right")
    table.add_column("outcomes")
    if known is not None:
        table.add_column(KNOWN, justify="right")
    table.add_column("in flight ops / B (median)", justify="right")
    table.add_column("mount s median / p90 / max", justify="right")
    table.add_column("fsck s median / max", justify="right")
    table.add_column("errors after cut")
    for s in summaries:
        outcomes = ", ".join(f"{k} {v}" for k, v in s.outcomes.items())
        in_flight = ("-" if s.in_flight_ops_median is None
                     else f"{s.in_flight_ops_median:g} / {s.in_flight_bytes_median:g}")
        errors = ", ".join(f"{k} {v}" for k, v in s.post_cut_errors.items()) or "none"
        known_cell = [] if known is None else [str(known.get(s.target, 0))]
        table.add_row(s.target, str(s.trials), outcomes, *known_cell, in_flight,
                      f"{_s(s.mount_median_s)} / {_s(s.mount_p90_s)} / {_s(s.mount_max_s)}",
                      f"{_s(s.fsck_median_s)} / {_s(s.fsck_max_s)}", errors)
    return table


def trial_table(target: str, trials: Sequence[TrialResult],
                result: CutRunResult | None = None) -> Table:
    """The trials of ``target``; with ``result``, known trials say so beside their raw outcome."""
    table = Table(title=f"{target}: trials")
    table.add_column("trial", justify="right")
    table.add_column("cut")
    table.add_column("promised", justify="right")
    table.add_column("in flight ops / B", justify="right")
    table.add_column("outcome")
    table.add_column("mount s", justify="right")
    table.add_column("fsck s", justify="right")
    table.add_column("journal replay")
    for t in trials:
        d = t.drive
        table.add_row(str(t.trial), t.point.describe(), str(d.promised) if d else "-",
                      f"{d.in_flight_ops} / {d.in_flight_bytes}" if d else "-",
                      f"{KNOWN} ({t.outcome.value})" if result and result.is_known(t)
                      else t.outcome.value + (f", {t.rate.words()}" if t.rate else ""),
                      _s(t.mount_s), _s(t.fsck_s),
                      " | ".join(t.check.replay_messages) if t.check and t.check.replay_messages else "-")
    return table


def failing_trials(result: CutRunResult) -> list[TrialResult]:
    """Trials that fail their target and that no known behaviour explains."""
    return [t for t in result.trials if result.failing(t)]


def trial_explanation(t: TrialResult) -> str:
    """Why a trial is not ok: its check's explanation, or the trial's own notes."""
    if t.check is not None and t.check.outcome is not Outcome.OK:
        return t.check.explanation or explain(t.check)
    return "; ".join(t.notes) or t.outcome.value


def junit_cases(result: CutRunResult) -> list[junit.Case]:
    """One test case per trial: it fails when the trial broke a promise or the fs needed repair."""
    cases = []
    for t in result.trials:
        notes = t.notes + (t.check.notes if t.check else [])
        findings = t.check.findings if t.check else []
        failure = skipped = None
        matcher = result.known.get(t.target)
        if matcher is not None and result.is_known(t):
            skipped = f"{matcher.message(trial_key(t))[:450]} [raw outcome: {t.outcome.value}]"
        elif fails(t.outcome, result.plan.spec(t.target)):
            rate = f" ({t.rate.words()}: {', '.join([t.outcome.value, *t.reruns])})" if t.rate else ""
            failure = f"{t.outcome.value}{rate}: {trial_explanation(t)}"[:500]
        details = "\n".join([f"cut {t.point.describe()}, checked at mark {t.checked_mark}",
                             *(f"{f['kind']}: {f['path']}: {f['detail']}" for f in findings),
                             *notes])
        time_s = (t.mount_s or 0.0) + (t.fsck_s or 0.0)
        cases.append(junit.Case(f"{t.target} #{t.trial}", f"powercut.cut.{t.target}.{result.plan.case}",
                                time_s, failure, details, skipped=skipped))
    for target, matcher in result.known.items():
        cases += known_cases([matcher], f"powercut.cut.{target}.{result.plan.case}")
    return cases


def plan_from_args(args: argparse.Namespace) -> CutPlan:
    return CutPlan(targets=tuple(dict.fromkeys(args.target)), case=case_of(args), trials=args.trials,
                   seed=args.seed, cut_after_ops=args.cut_after_ops, cut_after_s=args.cut_after_s,
                   mode=FlakeyMode(args.mode), continue_syncs=args.continue_syncs,
                   max_sequences=args.max_sequences, data_mib=args.data_mib,
                   count_post_cut_promises=args.count_post_cut_fsync,
                   trial_timeout_s=args.trial_timeout, user_targets=named_user_targets(args),
                   order=args.order, reruns=args.reruns, max_reruns=args.max_reruns,
                   jobs=args.jobs)


def cmd_cut(args: argparse.Namespace) -> int:
    resume_dir = Path(args.resume) if args.resume else None
    if resume_dir is not None:
        if args.target:
            raise ConfigError("--resume takes the targets and every option from the run's "
                              "plan.json; drop --target")
        plan = load_cut_plan(resume_dir)
    elif not args.target:
        raise ConfigError("name a target (--target NAME) or a run to carry on (--resume RUN_DIR)")
    else:
        plan = plan_from_args(args)
    targets = plan.targets
    valid = validate_cut_plan(plan)  # bad options fail before the progress bar appears
    known = known_list(args)  # so does a bad known-behaviour list
    factory = machine_factory(args)  # and a missing kernel
    require_supported(valid.targets, resolve_kernel(args))  # one run: every target or none
    if resume_dir is not None:
        with Store(Path(args.db)) as store:
            resumable_run(store, resume_dir, "cut")  # and a run that cannot be carried on
    err = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[status]}"), TimeRemainingColumn(),
                  console=err, transient=False, disable=args.quiet or args.json) as progress:
        task = progress.add_task(f"power cuts on {', '.join(targets)}", total=len(targets) * plan.trials,
                                 status="")
        bad = {"n": 0}

        def step(tr: TrialResult) -> None:
            if fails(tr.outcome, plan.spec(tr.target)):
                bad["n"] += 1
            progress.update(task, advance=1, status=f"{tr.target} #{tr.trial}: {tr.outcome.value}; "
                                                    f"{bad['n']} failing")

        with Store(Path(args.db)) as store, \
                (run_lifecycle(run_spec(plan), Path(args.results), store) if resume_dir is None
                 else resumed_lifecycle(run_spec(plan), resume_dir, store)) as run:
            result = run_cut(valid, run, factory, progress=step, known=known,
                             resume=resume_dir is not None)
    failing = failing_trials(result)
    junit_path = Path(args.junit) if args.junit else result.run_dir / rundir.JUNIT
    junit.write(junit_path, f"powercut cut {result.plan.case}", junit_cases(result))
    if args.json:
        print(json.dumps(result.to_dict(), indent=1, sort_keys=True))
        return 1 if failing else 0
    out = Console()
    if not out.is_terminal:
        # Piped or captured: keep table rows whole rather than folded to 80 columns.
        out = Console(width=200)
    for target in targets:
        out.print(trial_table(target, result.for_target(target), result))
    out.print(summary_table([summarize(plan.spec(t), result.for_target(t)) for t in targets],
                            title=f"recovery after power cuts ({plan.mode.value}, {plan.case})",
                            known={t: sum(1 for tr in result.for_target(t) if result.is_known(tr))
                                   for t in targets}))
    for target, evidence in result.journal_evidence.items():
        out.print(f"journal of {target}: {evidence}", markup=False)
    out.print(f"results: {result.run_dir}/results.json  junit: {junit_path}  "
              f"db: {args.db} (run {result.run_id}); "
              f"{result.wall_s:.1f} s; guests replaced after hangs: {result.replacements}")
    for t in failing:
        what = trial_explanation(t)[:300]
        rate = f"; {t.rate.words()}" if t.rate else ""
        out.print(f"  {t.outcome.value:<11} {t.target} #{t.trial} (cut {t.point.describe()}, "
                  f"checked at {t.checked_mark}{rate}): {what}")
    print_known(out, list(result.known.values()))
    return 1 if failing else 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "cut", help="power cuts on a live workload (dm-flakey) and the recovery after them",
        description="Run a workload on dm-flakey in a guest, cut the power at a seeded moment "
                    "(writes vanish or fail from then on), and measure the recovery: mount time "
                    "(journal replay), fsck time and verdict, and whether everything fsync promised "
                    "before the cut survived. Several trials per target give a recovery-time "
                    "distribution. Exits 1 if any trial broke a promise.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_target_options(p, what="filesystem configurations, e.g. ext4/ordered", required=False)
    add_profile_option(p)
    p.add_argument("--case", default="random:200",
                   help=f"workload: {', '.join(list_cases())}, random:N (default: random:200)")
    p.add_argument("--max-sequences", type=int, metavar="N", help="gen:* cases: a seeded sample of N sequences")
    p.add_argument("--trials", type=int, default=5, help="power cuts per target, fresh mkfs each (default: 5)")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="guests running trials at once, each taking the next trial of the "
                        "order; cut points and workloads do not change, but each trial's "
                        "seconds are measured beside the others. Under TCG each vCPU keeps a "
                        "host core busy: keep N times the guest's vCPUs (2 by default) within "
                        "the host's cores; on a 2-core host two guests took 19%% longer than "
                        "one and slowed each other's recovery 1.4 to 2 times (default: 1)")
    p.add_argument("--order", choices=("targets", "random"), default="targets",
                   help="run every trial of one target before the next, or all trials in one "
                        "seeded random order (default: targets)")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--cut-after-ops", type=int, metavar="K",
                      help="cut after K durability ops (and a seeded number of the ops after it); "
                           "default: K seeded per trial")
    when.add_argument("--cut-after-s", type=float, metavar="T",
                      help="cut T seconds into the workload, wherever it is")
    p.add_argument("--mode", choices=[m.value for m in (FlakeyMode.DROP_WRITES, FlakeyMode.ERROR_WRITES)],
                   default=FlakeyMode.DROP_WRITES.value,
                   help="drop_writes: writes vanish silently; error_writes: they fail with EIO "
                        "(default: drop_writes)")
    p.add_argument("--continue-syncs", type=int, default=2, metavar="N",
                   help="durability ops the workload attempts after the cut (default: 2)")
    p.add_argument("--count-post-cut-fsync", action="store_true",
                   help="positive control: also hold the filesystem to fsyncs that returned "
                        "after the cut (with drop_writes the device lied to them): must report data-loss")
    p.add_argument("--seed", type=int, default=0, help="seed of the workload and the cut points (default: 0)")
    p.add_argument("--data-mib", type=int, metavar="MIB", help="size of the data disk (default: 128)")
    p.add_argument("--trial-timeout", type=float, default=900.0, metavar="S",
                   help="seconds one trial may take before it counts as a hang (default: 900)")
    p.add_argument("--results", default="results", metavar="DIR", help="where run directories go (default: ./results)")
    p.add_argument("--junit", metavar="PATH", help="JUnit XML path (default: RUN_DIR/junit.xml)")
    p.add_argument("--db", metavar="PATH",
                   help="sqlite results store, one row per trial (default: powercut.sqlite in the "
                        "--results directory)")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of tables")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="carry on a power-cut run that was interrupted (Ctrl-C, kill, a guest "
                        "that died) in its own directory and store row: its plan is read from "
                        "RUN_DIR/plan.json and trials it saved are not run again")
    p.add_argument("--known", action="append", default=[], metavar="FILE", help=KNOWN_HELP)
    p.add_argument("--ignore-known", action="store_true",
                   help="report trials that known behaviour explains as failing too, and "
                        "which known entries reproduced and which did not")
    p.add_argument("--reruns", type=int, default=0, metavar="N",
                   help="run each new failing trial N more times, cut at the same operation on "
                        "a fresh mkfs, and report how often it failed, 'fails f/t' (reliable "
                        "only at t/t with t at least 3); each rerun is kept in the store "
                        "(default: 0)")
    p.add_argument("--max-reruns", type=int, default=10, metavar="N",
                   help="rerun at most N trials (default: 10)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    add_machine_options(p)
    p.set_defaults(func=cmd_cut)
