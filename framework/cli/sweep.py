"""``powercut sweep``: recovery time against filesystem size, files, data in flight and journal
size, with a fitted line per target."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from crashcases.sweep.engine import (
    DESIGNS,
    PREDICTOR_UNITS,
    PREDICTORS,
    SweepPlan,
    SweepResult,
    SweepRow,
    TargetFit,
    design_points,
    load_sweep_plan,
    run_spec,
    run_sweep,
    validate_sweep_plan,
)
from framework.cli import add_machine_options, add_target_options, named_user_targets
from framework.cli.crash import machine_factory
from framework.cli.targets import require_supported
from framework.cli.vm import resolve_kernel
from framework.core.errors import ConfigError
from framework.core.lifecycle import resumable_run, resumed_lifecycle, run_lifecycle
from framework.core.store import Store
from recovery.filesystems import SWEEP_TARGETS

#: The guest program a sweep's points run in: it imports only the point task, which
#: saves seconds of start-up per point under an emulated CPU.
GUEST_MODULE = "framework.cli.sweepguest"
DEFAULT_TARGETS = SWEEP_TARGETS

EPILOG = """\
one point, in the guest:
  mkfs at SIZE on a prefix of the data disk (journal of JOURNAL MiB where mkfs
  sizes it: ext4 -J size=, a journal device of that size, xfs -l size=); mount;
  FILES files of 4 KiB, sync; unmount and mount again, so the journal starts
  empty; then DIRTY MiB of new data in 256 KiB files, each fsynced: committed
  to the journal, not yet checkpointed. Right after the last fsync both disks
  are cut (dm-flakey drop_writes, suspend --nolockfs: no freeze), the
  filesystem is unmounted under the cut and pass-through comes back. Then,
  each timed on its own and in this order:
    journal-only  e2fsck -E journal_only on a throwaway dm-snapshot of the
                  crashed disks (ext4 only; the disks keep their journal)
    mount         the kernel's journal replay (its messages are kept); a
                  target without a journal (ext2) gets e2fsck -f -y first,
                  as at boot, and that is its fsck time
    oracle        every file is there, every fsynced file has its bytes
    fsck          after unmount, a forced full read-only check: e2fsck -f -n,
                  xfs_repair -n, btrfs check --readonly
  A point whose recovery failed (data-loss, corrupt, unmountable, hang, error)
  is listed with its reason and left out of the fits.

design:
  sizes x dirty levels, with the file counts laid over that grid as a cyclic
  Latin square (--design latin: count number (i+j) mod k at size i, dirty j),
  so every file count meets every size and dirty level equally often and the
  three effects are estimated independently; --design full crosses all three.
  Journal sizes are crossed with the grid on ext4 and xfs targets. Points run
  in a seeded random order per target. Per target an OLS line (statsmodels) of
  mount and fsck time on size GiB, files/1000, dirty MiB (and journal MiB when
  it varies) gives each slope with its 95% interval and R^2; a fit that is
  not possible (too few points or levels) says so.

examples:
  powercut sweep                                   # the six default targets, 9 points each
  powercut sweep --target ext4/ordered --reps 2
  powercut sweep --target xfs --sizes 512,1024,2048,4096 --files 1000,2000,4000,8000 \\
      --dirty 0,16,32,64
  powercut sweep --target ext4/ordered --journal-sizes 16,48,96 --design full
"""


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected whole numbers, e.g. 512,1024") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one number")
    return values


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def points_table(result: SweepResult) -> Table:
    table = Table(title=f"recovery sweep ({len(result.rows)} points)")
    for name, justify in (("target", "left"), ("size MiB", "right"), ("files", "right"),
                          ("dirty MiB", "right"), ("journal MiB", "right"),
                          ("journal-only s", "right"), ("mount s", "right"),
                          ("replayed", "left"), ("fsck s", "right"), ("outcome", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for target in result.plan.targets:
        for r in result.for_target(target):
            p, res = r.point, r.result
            table.add_row(
                p.target, str(p.size_mib), str(p.files), str(p.dirty_mib),
                "n/a" if p.journal_mib is None else str(p.journal_mib),
                _s(res.journal_only_s) if res else "-", _s(res.mount_s) if res else "-",
                ("yes" if res.replay_messages else "no") if res else "-",
                (_s(res.fsck_s) + (" (repair)" if res.fsck_repair else "")) if res else "-",
                r.outcome if r.timed else f"{r.outcome}: {'; '.join(r.notes)[:120]}")
    return table


def _slope_cell(fit_slope: object) -> str:
    from framework.core.stats import Slope

    if not isinstance(fit_slope, Slope):
        return "-"
    lo, hi = fit_slope.interval.low, fit_slope.interval.high
    mark = " *" if fit_slope.significant else ""
    return f"{fit_slope.estimate:+.4f} [{lo:+.4f}, {hi:+.4f}]{mark}"


def fits_table(fits: Sequence[TargetFit]) -> Table:
    table = Table(title="fitted lines: seconds per unit of each factor, [95% interval]",
                  caption="*: the interval excludes 0 (the factor changes the time)")
    table.add_column("target")
    table.add_column("time")
    table.add_column("n", justify="right")
    for p in PREDICTORS:
        table.add_column(f"s per {PREDICTOR_UNITS[p]}", justify="right")
    table.add_column("R²", justify="right")
    for tf in fits:
        for f in tf.fits:
            if not f.ok:
                table.add_row(tf.target, f.response, str(f.n), f"no fit: {f.reason}",
                              *([""] * len(PREDICTORS)))
                continue
            cells = [_slope_cell(f.slope(p)) if p not in f.dropped else "one level"
                     for p in PREDICTORS]
            table.add_row(tf.target, f.response, str(f.n), *cells,
                          "-" if f.r_squared is None else f"{f.r_squared:.2f}")
    return table


def plan_from_args(args: argparse.Namespace) -> SweepPlan:
    return SweepPlan(targets=tuple(args.target or DEFAULT_TARGETS), sizes_mib=args.sizes,
                     files=args.files, dirty_mib=args.dirty, journal_mib=args.journal_sizes,
                     reps=args.reps, design=args.design, seed=args.seed,
                     point_timeout_s=args.point_timeout,
                     user_targets=named_user_targets(args) if args.target else ())


def cmd_sweep(args: argparse.Namespace) -> int:
    resume_dir = Path(args.resume) if args.resume else None
    if resume_dir is not None:
        if args.target:
            raise ConfigError("--resume takes the targets and every option from the run's "
                              "plan.json; drop --target")
        plan = load_sweep_plan(resume_dir)
    else:
        plan = plan_from_args(args)
    targets = validate_sweep_plan(plan)  # bad options fail before a guest boots
    total = len(design_points(plan, targets))
    factory = machine_factory(args)
    require_supported(targets, resolve_kernel(args))  # one run: every target or none
    if resume_dir is not None:
        with Store(Path(args.db)) as store:
            resumable_run(store, resume_dir, "sweep")
    err = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[status]}"), TimeRemainingColumn(),
                  console=err, transient=False, disable=args.quiet or args.json) as progress:
        task = progress.add_task(f"sweep of {', '.join(plan.targets)}", total=total, status="")

        def step(row: SweepRow) -> None:
            p = row.point
            what = row.outcome if row.result is None else (
                f"mount {_s(row.result.mount_s)} s, fsck {_s(row.result.fsck_s)} s, {row.outcome}")
            progress.update(task, advance=1, status=f"{p.target} {p.size_mib} MiB "
                                                    f"{p.files} files {p.dirty_mib} MiB: {what}")

        with Store(Path(args.db)) as store, \
                (run_lifecycle(run_spec(plan), Path(args.results), store) if resume_dir is None
                 else resumed_lifecycle(run_spec(plan), resume_dir, store)) as run:
            result = run_sweep(plan, run, factory, progress=step, targets=targets,
                               resume=resume_dir is not None, guest_module=GUEST_MODULE)
    broken = [r for r in result.rows if not r.timed]
    if args.json:
        print(json.dumps(result.to_dict(), indent=1, sort_keys=True))
        return 1 if broken else 0
    out = Console()
    if not out.is_terminal:
        out = Console(width=220)  # piped: keep rows whole
    out.print(points_table(result))
    out.print(fits_table(result.fits()))
    out.print(f"results: {result.run_dir}/results.json, results.csv  db: {args.db} "
              f"(run {result.run_id}); {result.wall_s:.1f} s; guests replaced after hangs: "
              f"{result.replacements}")
    if broken:
        out.print(f"{len(broken)} points did not recover cleanly; they are left out of the fits")
    return 1 if broken else 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep", help="recovery time against size, files, data in flight, journal size",
        description="Measure how recovery after a power cut grows with the filesystem's size, "
                    "the number of files in it, the data in flight at the cut and the journal's "
                    "size: per point the kernel's journal replay at mount, the checker's "
                    "journal-only replay (ext4) and a forced full fsck are timed on their own. "
                    "Prints every point and, per target, the fitted seconds per GiB, per 1,000 "
                    "files and per MiB in flight with 95% intervals. Exits 1 if a point did "
                    "not recover cleanly.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_target_options(p, what="filesystem configurations (default: "
                               f"{','.join(DEFAULT_TARGETS)})", required=False)
    p.add_argument("--sizes", type=_ints, default=(512, 1024, 2048), metavar="MIB[,MIB...]",
                   help="filesystem sizes in MiB (default: 512,1024,2048; xfs needs more "
                        "than 300)")
    p.add_argument("--files", type=_ints, default=(500, 1000, 2000), metavar="N[,N...]",
                   help="files populated before the cut, 4 KiB each (default: 500,1000,2000)")
    p.add_argument("--dirty", type=_ints, default=(0, 8, 32), metavar="MIB[,MIB...]",
                   help="data written and fsynced right before the cut, in MiB "
                        "(default: 0,8,32)")
    p.add_argument("--journal-sizes", type=_ints, default=(64,), metavar="MIB[,MIB...]",
                   help="journal sizes for targets whose mkfs sizes the journal (ext4, xfs; "
                        "xfs needs at least 64); others record n/a (default: 64, so the "
                        "filesystem size does not change the journal)")
    p.add_argument("--design", choices=DESIGNS, default="latin",
                   help="latin: file counts laid over sizes x dirty as a Latin square; "
                        "full: every combination (default: latin)")
    p.add_argument("--reps", type=int, default=1, metavar="N",
                   help="repetitions of every point (default: 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the run order and the data "
                                                       "(default: 0)")
    p.add_argument("--point-timeout", type=float, default=600.0, metavar="S",
                   help="seconds one point may take before it counts as a hang (default: 600)")
    p.add_argument("--results", default="results", metavar="DIR",
                   help="where run directories go (default: ./results)")
    p.add_argument("--db", metavar="PATH",
                   help="sqlite results store, one row per point (default: powercut.sqlite in "
                        "the --results directory)")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of tables")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="carry on an interrupted sweep in its own directory and store row; "
                        "points it saved are not run again")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    add_machine_options(p)
    p.set_defaults(func=cmd_sweep)
