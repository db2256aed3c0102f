"""``powercut bench``: the throughput cost of journalling, per target, with intervals."""

from __future__ import annotations

import argparse
import contextlib
import logging
import random
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from framework.bench.workloads import Scale, get_workload, list_workloads
from framework.cli import (
    add_machine_options,
    add_profile_option,
    add_target_options,
    named_user_targets,
    print_json,
)
from framework.core import command, junit, rundir
from framework.core.errors import ConfigError
from framework.core.lifecycle import RunSpec, resumable_run, resumed_lifecycle, run_lifecycle
from framework.core.store import Store
from recovery.filesystems import tool_versions

if TYPE_CHECKING:
    from framework.bench.analysis import BenchAnalysis
    from framework.bench.engine import BenchConfig

log = logging.getLogger(__name__)

#: The bench guest's vCPUs. bench/precision.py, 10 repetitions each on ext4/ordered at tiny
#: scale under TCG on a 2-core host, 2 vCPUs against 1: fs_mark files/s CoV 18.5% -> 10.9%,
#: fio-oltp-8k read_bw 7.1% -> 5.5%, PostMark run_s 3.7% -> 3.9% (a second vCPU is a second
#: host thread competing with qemu's I/O thread). The default stays 2: with one vCPU
#: bonnie++ reads tiny's cached 128 MiB file in under 500 ms and prints "+++++" instead of
#: a rate (bonnie++(8)), so seed000-bonnie lost every block_read figure. --cpus 1 is for
#: fs_mark- and fio-based comparisons.
BENCH_CPUS = 2

DESCRIPTION = """\
Measure what journalling costs in throughput: run one benchmark workload
on several targets (filesystem configurations), each repetition on a fresh
mkfs with cold caches, in one qemu guest, and compare every target with a
baseline target.

Each repetition: mkfs the target on the data disk (and its journal disk),
mount, sync and drop the page/dentry/inode caches, run the workload,
unmount. The tool's own figures (e.g. postmark transactions/s, fio MB/s)
exclude the unmount; run_s is the workload's wall time, umount_s the
unmount (it writes back what the workload left dirty) and durable_s their
sum. Trials of all targets run interleaved in a seeded random order
(printed), so drift of the machine does not pass for a target's effect:
by default in rounds (--order blocks), each every target once, and the
overheads pair the targets' trials of one round, so what the round's
trials share (an emulated guest's speed follows the host's load) cancels.

What the output means:
  mean [low, high]   the mean over the repetitions and its 95% confidence
                     interval (Student t, n-1 degrees of freedom): with
                     95% confidence the true mean lies in it. It narrows
                     as 1/sqrt(repetitions).
  overhead           the relative cost of a target against the baseline.
                     Positive means the target is worse: for throughput
                     (higher is better) it is the fraction lost,
                     1 - target/baseline; for times (lower is better) the
                     fraction added, target/baseline - 1. Negative means
                     the target is faster than the baseline. Its 95%
                     interval is Fieller's for a ratio of two means (of
                     paired samples with --order blocks); "n.s."
                     marks an interval that contains 0 (no detectable cost).
  ANOVA              one factor (target) with the repetitions as
                     replications, on the primary metric: how much of the
                     variation the choice of target explains versus
                     run-to-run noise, and the F-test of whether the
                     targets differ at all.

Factors (--factor, repeatable) make a full factorial: every target at
every combination of the factors' levels is a cell that runs like a
target of its own (named ext4/ordered[journal-size=32]), all cells in one
shuffled order. The ANOVA then has a row per factor and per interaction
(Jain's allocation of variation), and main effects with intervals.
  journal-size=4,32,128         journal size in MiB (mkfs -J size=, -l size=)
  placement=internal,external   where the journal lives
  data-profile=hdd,ssd          device profile of the data disk
  journal-profile=ram,usb-flash device profile of the journal disk
  mount=data=ordered,data=journal+nodelalloc
                                mount options per level (+ joins options;
                                one replaces the target's option of its name)
  metric=block_write,block_read several metrics of the workload as levels
                                of one factor (seed 000's access mode)
With several targets, the target is a factor too. A level a target cannot
take (a journal size on ext2) is an error before anything runs.
"""

EPILOG = """\
examples:
  powercut bench --targets ext2,ext4/ordered,ext4/journal --workload postmark --reps 10
  powercut bench --targets ext4/ordered,ext4/journal --workload fsmark --reps 3 \\
      --until-ci 5 --max-reps 20 --warmup
  powercut bench --targets ext3,ext4/ordered --workload dbench --reps 5 \\
      --factor journal-size=4,32,128
  powercut bench --targets ext2,ext3,reiserfs,ext4/ordered --workload bonnie --reps 10 \\
      --factor metric=block_write,block_read
"""


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    # scipy, statsmodels and pandas load in about half a second: only when benchmarking.
    from framework.bench.design import parse_factor
    from framework.bench.engine import BenchConfig, with_factors

    config = BenchConfig(
        targets=tuple(args.target),
        workload=args.workload,
        scale=Scale(args.scale),
        reps=args.reps,
        warmup=args.warmup,
        until_ci_pct=args.until_ci,
        max_reps=args.max_reps if args.max_reps is not None else max(args.reps, 30),
        seed=args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31),
        baseline=args.baseline,
        metric=args.metric,
        cpus=args.cpus if args.cpus is not None else BENCH_CPUS,
        user_targets=named_user_targets(args),
        blocked=args.order == "blocks",
        duration_s=args.duration,
    )
    factors = [parse_factor(text) for text in args.factor or ()]
    config = with_factors(config, factors)
    config.validate()
    return config


def cmd_bench(args: argparse.Namespace) -> int:
    from framework.bench import engine as bench
    from framework.bench.analysis import analyse
    from framework.bench.report import format_report, print_progress, report_json
    from framework.cli.targets import require_supported
    from framework.cli.vm import (  # boots qemu: imported only when used
        machine_from_args,
        resolve_kernel,
    )

    resume_dir = Path(args.resume) if args.resume else None
    if resume_dir is not None:
        if args.target or args.workload or args.factor:
            raise ConfigError("--resume takes the targets, workload, factors and every option "
                              "from the run's plan.json; drop --target, --workload and --factor")
        config = bench.config_from_plan(resume_dir)
    elif not (args.target and args.workload):
        raise ConfigError("name targets and a workload (--target A,B --workload NAME) or a run "
                          "to carry on (--resume RUN_DIR)")
    else:
        config = config_from_args(args)
    targets = bench.resolve_targets(config)
    get_workload(config.workload)  # an unknown name fails before the guest boots
    # A missing kernel fails before the run is opened; a target it cannot run skips the
    # bench (one run compares its targets: every target or none).
    require_supported(targets, resolve_kernel(args))
    if resume_dir is not None:
        with Store(args.db) as store:
            resumable_run(store, resume_dir, "bench")
    disks = bench.disks_for(targets, config.scale)
    fstypes = tuple(dict.fromkeys(t.fstype for t in targets))
    spec = RunSpec("bench", f"bench {','.join(config.targets)} {config.workload}",
                   plan=bench.plan_document(config), seeds={"order": config.seed},
                   targets={t.name: t.to_dict() for t in targets},
                   tool_versions={**tool_versions(t.fstype for t in targets),
                                  **benchmark_versions(config.workload)})
    with contextlib.ExitStack() as stack:
        store = stack.enter_context(Store(args.db))
        run = stack.enter_context(
            run_lifecycle(spec, Path(args.results), store) if resume_dir is None
            else resumed_lifecycle(spec, resume_dir, store))
        earlier = bench.earlier_samples(run.run_dir) if resume_dir is not None else {}
        machine = stack.enter_context(machine_from_args(args, disks=disks, fstypes=fstypes,
                                                        cpus=config.cpus))
        run.started(machine.start())
        assert run.run_id is not None
        recorder = bench.StoreRecorder(store, run.run_id, config, run.run_dir)
        done = bench.run_bench(config, bench.GuestExecutor(machine, config), recorder=recorder,
                               progress=None if args.quiet else print_progress,
                               earlier=earlier)
        analysis = analyse(done)
        report = report_json(done, analysis)
        run.save_results(report)
        junit_path = Path(args.junit) if args.junit else run.run_dir / rundir.JUNIT
        cases = junit_cases(analysis, args.max_overhead)
        junit.write(junit_path, f"powercut bench {config.workload}", cases)
    if args.json:
        report["db"], report["run_id"] = args.db, run.run_id
        print_json(report)
    else:
        sys.stdout.write(format_report(done, analysis))
        print(f"\nsamples stored in {args.db} (run {run.run_id}); results: "
              f"{run.run_dir}/results.json  junit: {junit_path}")
    failing = [c for c in cases if c.failure]
    for c in failing:
        print(f"  over the bound: {c.name}: {c.failure}", file=sys.stderr)
    return 1 if failing else 0


def benchmark_versions(workload: str) -> dict[str, str]:
    """The benchmark program's version, from its Debian package (most have no --version)."""
    bench = get_workload(workload)
    res = command.run(["dpkg-query", "-W", "-f", "${Version}", bench.package], timeout_s=10,
                      ok_status=None)
    return {bench.tool: f"{bench.package} {res.stdout.strip()}" if res.status == 0 else "unknown"}


def junit_cases(analysis: BenchAnalysis, max_overhead_pct: float | None) -> list[junit.Case]:
    """One test case per target compared with the baseline, on the primary metric.

    With ``max_overhead_pct`` a case fails when the whole interval of the
    overhead lies above the bound: exceeded with the interval's confidence,
    so run-to-run noise alone does not fail a CI job.
    """
    base = analysis.config.baseline_target
    metric = analysis.primary.name
    cases = []
    for o in analysis.overheads:
        if o.metric != metric:
            continue
        name = f"{o.target} vs {base}: {metric}"
        classname = f"powercut.bench.{analysis.config.workload}"
        if o.overhead is None:
            cases.append(junit.Case(name, classname, 0.0, None, f"no overhead: {o.error}"))
            continue
        ov = o.overhead
        text = (f"overhead {100 * ov.overhead:+.1f}% [{100 * ov.ci.low:+.1f}%, "
                f"{100 * ov.ci.high:+.1f}%] ({100 * analysis.config.level:g}% Fieller interval)")
        failure = None
        if max_overhead_pct is not None and 100 * ov.ci.low > max_overhead_pct:
            failure = f"{text} is above the bound of {max_overhead_pct:g}%"
        cases.append(junit.Case(name, classname, 0.0, failure, text))
    return cases


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench", help="throughput overhead of journalling per target, with intervals",
        description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_target_options(p, what="targets to compare, e.g. ext2,ext4/ordered,ext4/journal",
                       required=False)
    add_profile_option(p)
    p.add_argument("--workload", metavar="NAME",
                   help=f"benchmark workload: {', '.join(list_workloads())}")
    p.add_argument("--scale", choices=[s.value for s in Scale], default=Scale.TINY.value,
                   help="work per repetition: tiny (seconds in an emulated guest), small, full "
                        "(published sizes) (default: tiny)")
    p.add_argument("--duration", type=int, metavar="SECONDS",
                   help="seconds each repetition of a timed workload runs (fio's random mixes, "
                        "dbench) instead of its scale's: under emulation a repetition's spread "
                        "may not shrink with its length, and shorter ones give more "
                        "repetitions an hour (default: the scale's)")
    p.add_argument("--reps", type=int, default=10, metavar="N",
                   help="kept repetitions per target; with --until-ci the minimum (default: 10)")
    p.add_argument("--warmup", action="store_true",
                   help="run one more trial per target and discard each target's first")
    p.add_argument("--until-ci", type=float, metavar="PCT",
                   help="after --reps, rerun targets until the 95%% interval half width of the "
                        "primary metric is under PCT%% of its mean")
    p.add_argument("--max-reps", type=int, metavar="N",
                   help="cap on kept repetitions per target for --until-ci (default: 30)")
    p.add_argument("--order", choices=("blocks", "shuffle"), default="blocks",
                   help="blocks: round k runs every target once, in a random order, and the "
                        "overheads pair repetition k of two targets, so the host's drift "
                        "between rounds cancels; shuffle: all repetitions in one random order, "
                        "the samples analysed as independent (default: blocks)")
    p.add_argument("--seed", type=int, metavar="N",
                   help="seed of the random run order (default: a fresh one, printed)")
    p.add_argument("--baseline", metavar="TARGET",
                   help="target the others are compared with (default: the first target)")
    p.add_argument("--metric", metavar="NAME",
                   help="primary metric for --until-ci and the ANOVA (default: 'total' if the "
                        "workload reports it, else its first metric)")
    p.add_argument("--factor", action="append", metavar="NAME=LEVEL,LEVEL",
                   help="a factor beyond the target, for a full factorial design (repeatable): "
                        "journal-size, placement, data-profile, journal-profile, mount, metric "
                        "(see above)")
    p.add_argument("--max-overhead", type=float, metavar="PCT",
                   help="fail (exit 1, a failing JUnit case) when a target's overhead on the "
                        "primary metric is above PCT%% with the interval's confidence (its whole "
                        "interval lies above the bound)")
    p.add_argument("--results", default="results", metavar="DIR",
                   help="where run directories go (default: ./results)")
    p.add_argument("--junit", metavar="PATH", help="JUnit XML path (default: RUN_DIR/junit.xml)")
    p.add_argument("--db", metavar="PATH",
                   help="sqlite results store: every sample is written as soon as it is measured "
                        "(default: powercut.sqlite in the --results directory)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="carry on a bench run that was interrupted (Ctrl-C, kill, a guest that "
                        "died) in its own directory and store row: its plan, seed included, is "
                        "read from RUN_DIR/plan.json; trials it finished are kept and the rest "
                        "run in the same order")
    add_machine_options(p)
    p.add_argument("--cpus", type=int, metavar="N",
                   help=f"the guest's vCPUs (default: {BENCH_CPUS}; see bench/precision.py for how "
                        "the count changes the spread of repetitions under emulation)")
    p.set_defaults(func=cmd_bench)

