"""``powercut crash`` and ``powercut recheck``: crash-consistency runs."""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from crashcases.check import CheckResult, explain
from crashcases.crash.faults import Faults
from crashcases.crash.plan import (
    CrashPlan,
    CrashRunResult,
    MachineFactory,
    ValidatedPlan,
    load_plan,
    reproducer_command,
    validate_plan,
)
from crashcases.crash.points import Strategy, Variant, Variants
from crashcases.crash.run import recheck, run_crash, run_spec
from crashcases.group import findings_words
from crashcases.known import KnownList, KnownMatcher, load_known, recorded_marks
from crashcases.oracle.log import OracleLog
from crashcases.vocabulary import KNOWN, Outcome, fails
from crashcases.workload.cases import list_cases
from crashcases.workload.selection import parse_ops
from framework.cli import (
    add_machine_options,
    add_profile_option,
    add_target_options,
    case_of,
    named_user_targets,
)
from framework.cli.targets import lacking, skip_reason
from framework.cli.vm import machine_from_args, resolve_kernel
from framework.core import junit, rundir
from framework.core.errors import ConfigError, Unsupported
from framework.core.lifecycle import resumable_run, resumed_lifecycle, run_lifecycle
from framework.core.machine.base import DiskSpec, Machine
from framework.core.machine.qemu import GUEST_CPUS, guests_per_host
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
  known        failing, but known behaviour explains every finding (the shipped
               list, crashcases/known.toml, and --known FILE): reported, not failed;
               the raw outcome and the entry ids stay in results.json and the store

examples:
  powercut crash --target ext4/ordered --case gen:seq2 --max-sequences 40
  powercut crash --target ext4/nobarrier --case hand:write-fsync-rename   # positive control
  powercut crash --target ext4/journal --case random:200 --points every:25 --variants prefix,subset,torn
  powercut recheck results/crash-.../ 1234/subset:77     # rebuild and recheck one state
  powercut crash --target ext4/ordered --case gen:seq1 --known my-known.toml
  powercut crash --target xfs --case gen:seq2 --ops clone,clone_range,fsync --max-sequences 20
  powercut crash --target ext4/nobarrier --case hand:new-ops   # O_SYNC/O_DSYNC/msync/syncfs must lose data

operations (--ops names; gen:* and random:N use those the target's filesystem has):
  creat mkdir write pwrite append truncate fallocate rename link unlink rmdir symlink
  setxattr removexattr; direct_write (O_DIRECT) mmap_write sync_file_range (promises nothing)
  rename_noreplace rename_exchange copy_file_range clone clone_range (FICLONE, FICLONERANGE);
  durability ops: fsync fdatasync fsync_dir sync syncfs msync write_osync write_odsync
"""

KNOWN_HELP = ("a known-behaviour list in TOML (repeatable), in the format of the shipped "
              "crashcases/known.toml: failing states whose every finding an entry explains are "
              "reported as known, not failed")


def machine_factory(args: argparse.Namespace) -> MachineFactory:
    kernel = resolve_kernel(args)

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
    known = result.known
    rows = [(k, r) for k, r in result.results.items()
            if known is None or not known.is_known(k)]
    for outcome in Outcome:
        rs = [r for _, r in rows if r.outcome is outcome]
        if not rs:
            continue
        table.add_row(outcome.value, str(len(rs)), _spread([r.mount_s for r in rs]),
                      _spread([r.fsck_check_s for r in rs]))
    if known is not None:
        # Failing states that known behaviour explains; their raw outcomes in brackets.
        rs = [r for k, r in result.results.items() if known.is_known(k)]
        if rs:
            raw = ", ".join(f"{o.value} {n}" for o in Outcome
                            if (n := sum(1 for r in rs if r.outcome is o)))
            table.add_row(f"{KNOWN} ({raw})", str(len(rs)), _spread([r.mount_s for r in rs]),
                          _spread([r.fsck_check_s for r in rs]))
    return table


def print_findings(out: Console, result: CrashRunResult, *, failing: set[str],
                   most: int = 10) -> None:
    """The run's distinct findings first ("2 findings (412 states)"), each with how many
    states show it, its representative's explanation and the command that reproduces it;
    findings known behaviour explains are counted apart."""
    new = [g for g in result.findings if any(k in failing for k in g.states)]
    known = [g for g in result.findings if g not in new]
    if not result.findings:
        return
    out.print(f"findings: {findings_words(new)} new"
              + (f", {findings_words(known)} known" if known else ""))
    for n, g in enumerate(new[:most], 1):
        out.print(f"  {n}. {g.signature.words()}")
        out.print(f"     {len(g.states)} state{'s' if len(g.states) > 1 else ''}"
                  + (f", {g.rate.words()}" if g.rate is not None else "")
                  + f", e.g. {g.representative}: {g.explanation[:300]}")
        out.print(f"     reproduce: {reproducer_command(result.run_dir, g.representative)}")
    if len(new) > most:
        out.print(f"  ... and {len(new) - most} more findings (see results.json)")


def known_list(args: argparse.Namespace) -> KnownList:
    """The shipped known-behaviour list and the --known files (a bad file: a one-line error)."""
    known = load_known(getattr(args, "known", None) or ())
    return replace(known, ignore=True) if getattr(args, "ignore_known", False) else known


def known_cases(matchers: Sequence[KnownMatcher], classname: str) -> list[junit.Case]:
    """A passing case per known entry that applied but explained nothing (fixed?)."""
    return [junit.Case(f"known:{n['id']}", classname, 0.0, output=f"{n['message']}\n"
                       f"reason: {n['reason']}\nsource: {n['reference']}")
            for m in matchers for n in m.not_reproduced()]


def print_known(out: Console, matchers: Sequence[KnownMatcher]) -> None:
    """Which entries explained how many states, and which explained nothing here."""
    for m in matchers:
        for entry_id, n in m.counts().items():
            e = m.entry(entry_id)
            out.print(f"  {KNOWN:<11} {entry_id} ({m.scope.target}) matched {n} failing "
                      f"result{'s' if n != 1 else ''}: {e.reason} ({e.reference})", markup=False)
        for silent in m.not_reproduced():
            out.print(f"  {silent['message']}", markup=False)


def _spread(values: list[float | None]) -> str:
    xs = [v for v in values if v is not None]
    return f"{statistics.median(xs):.3f} / {max(xs):.3f}" if xs else "-"


def junit_cases(result: CrashRunResult, target: Target) -> list[junit.Case]:
    """One test case per checked state; it fails as ``fails`` says for the target (with
    "fails f/t" where the state's finding was checked again)."""
    rates = {k: g.rate for g in result.findings if g.rate is not None for k in g.states}
    cases = []
    for s in result.states:
        r = result.results.get(s.key)
        if r is None:
            continue
        failure = skipped = error = None
        if r.outcome is Outcome.ERROR:
            error = f"harness error: {r.explanation or explain(r)}"[:500]
        elif result.known is not None and result.known.is_known(s.key):
            # Expunged, as kdevops and xfstests report it: known behaviour, with its reason.
            skipped = f"{result.known.message(s.key)[:450]} [raw outcome: {r.outcome.value}]"
        elif fails(r.outcome, target):
            rate = rates.get(s.key)
            failure = (f"{r.outcome.value}" + (f" ({rate.words()})" if rate else "")
                       + f": {r.explanation or explain(r)}")[:500]
        details = "\n".join([f"reproduce: {reproducer_command(result.run_dir, s.key)}",
                             *(f"{f['kind']}: {f['path']}: {f['detail']}" for f in r.findings), *r.notes,
                             *(o for o in (r.fsck_check_output, r.fsck_repair_output) if o)])
        cases.append(junit.Case(f"{s.key} (last mark {s.point.last_mark})",
                                f"powercut.crash.{result.plan.target}.{result.plan.case}",
                                r.duration_s, failure, details, skipped=skipped, error=error))
    if result.known is not None:
        cases += known_cases([result.known], f"powercut.crash.{result.plan.target}.{result.plan.case}")
    return cases


def plan_from_args(args: argparse.Namespace, target: str,
                   user_targets: tuple[Target, ...] = ()) -> CrashPlan:
    """The plan for one ``target``; ``user_targets``: the --targets-file definitions it may name."""
    return CrashPlan(target=target, user_targets=user_targets, case=case_of(args), seed=args.seed,
                     points=Strategy.parse(args.points),
                     variants=Variants.parse(tuple(v.strip() for v in args.variants.split(",")
                                                   if v.strip())),
                     per_point=args.per_point, jobs=args.jobs, check_timeout_s=args.check_timeout,
                     faults=Faults.parse(hang=args.inject_hang, busy=args.inject_busy,
                                         panic=args.inject_panic),
                     reruns=args.reruns, max_reruns=args.max_reruns,
                     max_sequences=args.max_sequences,
                     data_mib=args.data_mib, ops=ops_from_args(args))


def ops_from_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The --ops names (an unknown one: a one-line error listing the known ones)."""
    text = getattr(args, "ops", None)
    if text is None:
        return ()
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    parse_ops(names, where="--ops")
    return names


def cmd_crash(args: argparse.Namespace) -> int:
    resume_dir = Path(args.resume) if args.resume else None
    if resume_dir is not None:
        if args.target:
            raise ConfigError("--resume takes the target and every option from the run's "
                              "plan.json; drop --target")
        plans = [load_plan(resume_dir)]
    elif not args.target:
        raise ConfigError("name a target (--target NAME) or a run to carry on (--resume RUN_DIR)")
    else:
        user = named_user_targets(args)  # the targets file is read once
        plans = [plan_from_args(args, name, user) for name in args.target]
    # Every plan is checked (and its workload built) before a run directory,
    # a store row or a guest exists: bad options create nothing.
    valid = [validate_plan(plan) for plan in plans]
    known = known_list(args)  # likewise the known-behaviour lists
    spec = resolve_kernel(args)  # and the kernel: a missing one creates nothing
    suites: list[tuple[str, list[junit.Case]]] = []
    # A target the kernel or this machine cannot run is skipped, the others run.
    missing = lacking((v.target for v in valid), spec)
    for name, why in missing.items():
        suites.append((f"powercut crash {name} {plans[0].case}", [junit.Case(
            "not run", f"powercut.crash.{name}", 0.0, skipped=skip_reason({name: why}))]))
    if missing and len(missing) == len(valid):
        if args.junit:
            junit.write_suites(Path(args.junit), suites)
        raise Unsupported(skip_reason(missing))
    for name, why in missing.items():
        print(f"powercut: skipped: {skip_reason({name: why})}", file=sys.stderr)
    valid = [v for v in valid if v.target.name not in missing]
    failed = False
    with Store(Path(args.db)) as store:
        if resume_dir is not None:
            resumable_run(store, resume_dir, "crash")  # before any progress bar
        for one in valid:
            plan = one.plan
            result = crash_one(args, store, one, known, resume_dir)
            cases = junit_cases(result, one.target)
            suites.append((f"powercut crash {plan.target} {plan.case}", cases))
            junit.write(result.run_dir / rundir.JUNIT, *suites[-1])
            failed |= any(c.failure for c in cases)
    if args.junit:
        junit.write_suites(Path(args.junit), suites)
    return 1 if failed else 0


def crash_one(args: argparse.Namespace, store: Store, valid: ValidatedPlan,
              known: KnownList | None = None, resume_dir: Path | None = None) -> CrashRunResult:
    """One target's crash run (or the rest of an interrupted one), with progress and summary."""
    plan, target = valid.plan, valid.target
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

        lifecycle = (run_lifecycle(run_spec(plan), Path(args.results), store)
                     if resume_dir is None else resumed_lifecycle(run_spec(plan), resume_dir, store))
        with lifecycle as run:
            result = run_crash(valid, run, machine_factory(args), progress=step,
                               on_planned=planned, known=known, resume=resume_dir is not None)
    out = Console()
    out.print(summary_table(result))
    failing = [s for s in result.states
               if s.key in result.results and fails(result.results[s.key].outcome, target)
               and not (result.known is not None and result.known.is_known(s.key))]
    out.print(f"log: {result.record['entries']} entries, {len(result.states)} states checked in "
              f"{result.wall_s:.1f} s; guests replaced after hangs or harness errors: "
              f"{result.replacements}")
    for key, why in result.harness_errors:
        again = result.results.get(key)
        out.print(f"{key}: {why[:300]} (checked again on a fresh guest: "
                  f"{again.outcome.value if again is not None else 'not yet'})")
    for why, n in result.unexplored.items():
        out.print(f"not explored: {n} states, {why} (see docs/explanation/two-disks.md)")
    reread = result.passed_on_other_reading()
    if reread:
        out.print(f"{len(reread)} states failed only in the log's order ({', '.join(reread[:4])}"
                  f"{', ...' if len(reread) > 4 else ''}): the log cannot order a FUA write "
                  "against plain writes over its sectors, and in the other order they pass; "
                  "not findings (their notes in results.json; docs/explanation/crash-model.md)")
    if result.shared():
        out.print(f"{result.shared()} states held the same bytes as the state checked before "
                  "them: each was checked against its own promises on that state's mount, and "
                  "shares its mount, tree read and fsck (same_as in results.json)")
    out.print(f"results: {result.run_dir}/results.json  junit: {result.run_dir}/junit.xml  "
              f"db: {args.db} (run {result.run_id})")
    print_findings(out, result, failing={s.key for s in failing})
    if result.known is not None:
        print_known(out, [result.known])
    return result


def cmd_recheck(args: argparse.Namespace) -> int:
    known = known_list(args)
    variant = Variant.parse(args.state.partition("/")[2]).kind.value
    base = machine_factory(args)
    guest: dict[str, str] = {}

    def factory(disks: Sequence[DiskSpec], rundir: Path, fstypes: tuple[str, ...]) -> Machine:
        machine = base(disks, rundir, fstypes)
        guest.update(machine.describe())  # the kernel release, for the known list
        return machine

    target, result = recheck(Path(args.run_dir), args.state, factory)
    if result.outcome is Outcome.ERROR:
        # The harness could not check the state (its guest was lost too often, or would
        # not boot): no verdict, and no rerun kept to count as a pass or a failure.
        print(f"{args.state}: error: the state could not be checked: "
              f"{'; '.join(result.notes) or 'no reason given'}", file=sys.stderr)
        return 2
    plan = load_plan(Path(args.run_dir))
    oracle = OracleLog.load(Path(args.run_dir) / rundir.ORACLE)
    matcher = known.matcher(run="crash", target=target, case=plan.case,
                            kernel=guest.get("kernel"), marks=recorded_marks(oracle),
                            variants=[variant])
    verdict = matcher.judge(args.state, result.outcome, result, variant)
    failed = fails(result.outcome, target) and not (verdict and verdict.known)
    if args.db:
        attempt = store_rerun(Path(args.db), Path(args.run_dir), args.state, result, failed)
        print(f"{args.state}: kept as rerun {attempt} in {args.db}")
    print(f"{args.state}: {result.outcome.value}"
          + (f" ({KNOWN}: {', '.join(verdict.ids)})" if verdict and verdict.known else ""))
    for f in result.findings:
        print(f"  {f['kind']}: {f['path']}: {f['detail']}")
    if result.mount_error:
        print(f"  mount failed: {result.mount_error}")
    for n in result.notes:
        print(f"  note: {n}")
    for output in (result.fsck_check_output, result.fsck_repair_output):
        if output:
            print("  " + output.replace("\n", "\n    "))
    print(f"  mount {result.mount_s}s, fsck {result.fsck_check} {result.fsck_check_s}s"
          + (f", repair {result.fsck_repair} {result.fsck_repair_s}s" if result.fsck_repair else ""))
    if verdict is not None:
        if verdict.known:
            print(f"  {matcher.message(args.state)}")
        else:
            print(f"  known entries {', '.join(verdict.ids)} explain part of it; not: "
                  f"{'; '.join(verdict.unexplained)}")
    return 1 if failed else 0


def store_rerun(db: Path, run_dir: Path, key: str, result: CheckResult, failed: bool) -> int:
    """Keep a recheck as the next rerun of ``key`` of the run in ``db`` whose directory is
    ``run_dir`` (so "fails f/t" can be traced to each check); returns its attempt number.
    A store without that run is a one-line error."""
    with Store(db) as store:
        want = run_dir.resolve()
        runs = [r for r in store.runs() if r.environment.get("run_dir")
                and Path(str(r.environment["run_dir"])).resolve() == want]
        if not runs:
            raise ConfigError(f"--db {db}: no run there was recorded in {run_dir}")
        run_id = runs[-1].id
        attempt = len(store.reruns(run_id).get(key, [])) + 1
        store.add_rerun(run_id, key, attempt=attempt, outcome=result.outcome.value,
                        failed=failed, findings=result.findings)
    return attempt


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "crash", help="record a workload and check every crash state",
        description="Record a workload on dm-log-writes in a guest, rebuild the disk at every "
                    "chosen crash point (and variants of it), and check that each state mounts, "
                    "keeps what fsync promised and fscks clean. Mount time (journal replay) and "
                    "fsck time are measured for every state. Exits 1 if any state fails.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_target_options(p, what="filesystem configurations to check, e.g. ext4/ordered; "
                               "one crash run each", required=False)
    add_profile_option(p)
    p.add_argument("--case", default="hand:write-fsync-rename",
                   help=f"workload: {', '.join(list_cases())}, random:N (default: hand:write-fsync-rename)")
    p.add_argument("--max-sequences", type=int, metavar="N",
                   help="gen:* cases: check a seeded sample of N sequences instead of all")
    p.add_argument("--ops", metavar="NAME[,NAME...]",
                   help="generated cases (gen:*, random:N, stress:N, ranges:N): use only these operations "
                        "(plus creat, mkdir, write and sync to set up), e.g. rename_exchange or "
                        "mmap_write,msync; named durability ops are then the only ones used. "
                        "Without it every operation the target's filesystem supports is used")
    p.add_argument("--seed", type=int, default=0, help="seed for the workload, sampling and variants (default: 0)")
    p.add_argument("--points", default="marks",
                   help="crash points: marks (after each durability op); distinct (the marks whose "
                        "operations since the mark before, each packed sequence's directory left "
                        "out, are new: a gen:* workload's setup is checked once, not before every "
                        "sequence); fua, flush, every:N, sample:K")
    p.add_argument("--variants", default="prefix",
                   help="comma list of prefix, subset (unflushed writes in any subset), torn "
                        "(a multi-sector write half done), lying (a disk that ignores flushes; "
                        "a positive control); on a target with an external journal also "
                        "journal-subset, journal-torn, journal-lying (the variant on the journal "
                        "disk, the data disk at the mark) (default: prefix)")
    p.add_argument("--per-point", type=int, default=2, metavar="N",
                   help="seeded variants of each kind per point (default: 2)")
    p.add_argument("--jobs", type=int, default=guests_per_host(),
                   help="guests checking states in parallel, each with up to two checking lanes "
                        f"(on {GUEST_CPUS} vCPUs unless POWERCUT_GUEST_CPUS says otherwise) "
                        f"(default: one per {GUEST_CPUS} host cores, here {guests_per_host()})")
    p.add_argument("--check-timeout", type=float, default=600.0, metavar="S",
                   help="seconds one state may take before it counts as a hang (default: 600)")
    p.add_argument("--data-mib", type=int, metavar="MIB", help="size of the data disk (default: 128, more if the filesystem needs it)")
    p.add_argument("--results", default="results", metavar="DIR", help="where run directories go (default: ./results)")
    p.add_argument("--junit", metavar="PATH",
                   help="also write one JUnit XML for all targets here (each run directory "
                        "always gets its own junit.xml)")
    p.add_argument("--db", metavar="PATH",
                   help="sqlite results store; every state is written as soon as it is checked "
                        "(default: powercut.sqlite in the --results directory)")
    p.add_argument("--known", action="append", default=[], metavar="FILE", help=KNOWN_HELP)
    p.add_argument("--ignore-known", action="store_true",
                   help="report states that known behaviour explains as failing too, and which "
                        "known entries reproduced and which did not (a kernel with the fix shows "
                        "its entry as not reproduced, with the fix named)")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="carry on a crash run that was interrupted (Ctrl-C, kill, a guest or "
                        "host that died) in its own directory and store row: its plan is "
                        "read from RUN_DIR/plan.json, a whole recording is reused, and states "
                        "already checked are not checked again")
    p.add_argument("--reruns", type=int, default=0, metavar="N",
                   help="check the representative state of each new finding N more times and "
                        "report how often it failed, 'fails f/t' (reliable only at t/t with t "
                        "at least 3); each rerun is kept in the store (default: 0)")
    p.add_argument("--max-reruns", type=int, default=10, metavar="N",
                   help="rerun at most N findings (default: 10)")
    p.add_argument("--inject-hang", metavar="STATE", help=argparse.SUPPRESS)
    p.add_argument("--inject-busy", metavar="STATE", help=argparse.SUPPRESS)
    p.add_argument("--inject-panic", metavar="STATE", help=argparse.SUPPRESS)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    add_machine_options(p)
    p.set_defaults(func=cmd_crash)

    r = sub.add_parser("recheck", help="rebuild one crash state of an earlier run and check it again",
                       description="Rebuild a crash state from the run's log and check it in a fresh guest. "
                                   "This is the reproducer command printed for every failing state.")
    r.add_argument("run_dir", help="the run directory (results/crash-...)")
    r.add_argument("state", help="the state key POINT/VARIANT, e.g. 120/prefix or 120/subset:77")
    r.add_argument("--known", action="append", default=[], metavar="FILE", help=KNOWN_HELP)
    r.add_argument("--db", metavar="PATH",
                   help="keep this check as a rerun of the state in the store that holds the "
                        "run (its 'fails f/t' then counts it); ci does this for its reruns")
    add_machine_options(r)
    r.set_defaults(func=cmd_recheck)
