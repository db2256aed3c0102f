"""``powercut zoo``: detection power on real bugs.

    powercut zoo list                  the entries: fix, filesystem, fstests test
    powercut zoo build                 the fixed kernel and one per entry, from one tree
    powercut zoo run [--budget-min M]  the recall run: the same general workloads on every
                                       zoo kernel and the fixed one; recall and false alarms
    powercut zoo complete ZOO_JSON [ENTRY...]
                                       confirm a finished run's detections, take second looks
                                       at known-explained failures, add fstests verdicts
    powercut zoo report ZOO_JSON       a finished run's table again
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from framework.cli import print_json
from framework.core import rundir
from framework.zoo.entry import EntrySet, load_set
from framework.zoo.fstests import built_checkout
from framework.zoo.kernels import build_kernels, installed, set_cache

EPILOG = """\
The zoo measures what share of real, upstream-fixed crash-consistency bugs powercut's
workloads catch. An entry set is a directory of entries, each reverting one fix on the
Debian source its set.toml names (the built-in set, framework/zoo/entries: 14 fixes on
linux-source-6.12; --entries DIR for another, from anywhere). 'zoo build' unpacks that
source once into the set's cache outside the checkout (--cache, POWERCUT_ZOO_CACHE, or
~/.cache/powercut/zoo), configures it for powercut's guest, builds the fixed kernel
(about 35 minutes on 2 cores the first time) and then each entry's kernel incrementally
(a minute or two each). 'zoo run' runs a frozen, versioned workload plan (--plan; zoo.json
names it) on each kernel within a budget, and reports per entry: detected (confirmed: its
sequence alone fails on the entry's kernel and passes on the fixed one), unconfirmed or
missed, the time to the first failing state, failing states, distinct findings, and
recall; on the fixed kernel, any new failing state is a false alarm, and a workload that
errored or checked nothing there is "not measured". A figure is held out when the plan
was frozen before the set was first run, tuned when the plan changed after studying that
set's misses.

examples:
  powercut zoo list
  powercut zoo build                      # everything, or name entries
  powercut zoo run --json
  powercut zoo run btrfs-new-name-last-log-commit --budget-min 5
  powercut zoo run --jobs 2               # two kernels at a time (two guests)
  powercut zoo build --entries ~/zoo-7.3  # another set: set.toml says base = "7.3"
  powercut zoo run --entries ~/zoo-7.3 --plan w8 --results results/zoo-7.3
  powercut zoo report results/zoo/zoo.json
"""


def entry_set(args: argparse.Namespace) -> EntrySet:
    """The entries --entries names (default: the built-in set), only those named if any."""
    directory = Path(args.entries_dir) if getattr(args, "entries_dir", None) else None
    return load_set(directory, tuple(args.entries))


def cmd_list(args: argparse.Namespace) -> int:
    eset = entry_set(args)
    cache = set_cache(eset, args.cache)
    if args.json:
        print_json({**eset.to_dict(), "entries": [
            {**e.to_dict(), "built": installed(cache, e.name) is not None}
            for e in eset.entries]})
        return 0
    print(f"{eset.name}: {len(eset.entries)} entries reverted on linux-source-{eset.base} "
          f"({eset.directory})")
    for e in eset.entries:
        built = "built" if installed(cache, e.name) is not None else "not built"
        print(f"{e.name:<40} {e.filesystem:<6} {e.fix[:12]} {e.fstests or '-':<12} "
              f"{'hand port' if e.hand_port else 'revert':<9} {built}")
        print(f"{'':<40} {e.subject}")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    eset = entry_set(args)
    cache = set_cache(eset, args.cache)
    kernels = build_kernels(eset.entries, cache, eset.base, force=args.force,
                            say=lambda line: print(line, flush=True))
    if args.json:
        print_json([k.to_dict() for k in kernels])
    else:
        print(f"zoo: {len(kernels)} kernels in {cache / 'kernels'}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from framework.zoo.plans import plan_named
    from framework.zoo.recall import RecallPlan, run_recall

    eset = entry_set(args)
    workloads = plan_named(args.plan)
    budget_s = args.budget_min * 60.0 if args.budget_min is not None else workloads.budget_s
    # A checkout that is not built is said now, not after the kernels' crash runs.
    checkout = built_checkout(args.fstests, "--fstests")
    plan = RecallPlan(budget_s=budget_s, seed=args.seed,
                      fstests=str(checkout) if checkout else None,
                      shares=not args.no_shares, jobs=args.jobs, workloads=workloads)
    out = Path(args.results) / rundir.ZOO_REPORT
    out.parent.mkdir(parents=True, exist_ok=True)
    report = run_recall(eset.entries, set_cache(eset, args.cache), Path(args.results), plan,
                        say=_say, out=out, entry_set=eset.to_dict())
    return _show(report, out, args.json)


def _say(line: str) -> None:
    # One write per line: the recall's kernels report from threads of their own.
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _show(report: dict[str, object], path: Path, as_json: bool) -> int:
    """Print a recall's report (its table, or JSON) and where it is; exit 1 on a false alarm."""
    from framework.zoo.recall import table

    if as_json:
        print_json(report)
    else:
        print(table(report))
        print(f"zoo: {path}")
    return 0 if report["false_alarms"] == 0 else 1


def cmd_report(args: argparse.Namespace) -> int:
    from framework.zoo.recall import load_report, table, totals

    for path in args.reports:
        # Totals made from the rows by today's rules (a run keeps the ones of its day).
        report = totals(load_report(Path(path)))
        if args.json:
            print_json(report)
        else:
            print(table(report))
    return 0


def cmd_complete(args: argparse.Namespace) -> int:
    from framework.core.rundir import write_json_atomic
    from framework.zoo.recall import complete, load_report

    path = Path(args.report)
    report = load_report(path)
    fstests = built_checkout(args.fstests, "--fstests")
    # Named entries are checked against the zoo as the other verbs check them; complete()
    # then checks that the report has them.
    eset = entry_set(args)
    report = complete(report, eset.entries, set_cache(eset, args.cache), path.parent,
                      fstests=fstests, say=_say,
                      only=args.entries, after=lambda r: write_json_atomic(path, r))
    write_json_atomic(path, report)
    return _show(report, path, args.json)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("zoo", help="detection power on real bugs: build the zoo's kernels, "
                                   "run the recall", description=__doc__, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("entries", nargs="*", metavar="ENTRY",
                        help="entries by name (default: every one)")
    common.add_argument("--entries", dest="entries_dir", metavar="DIR",
                        help="an entry set: a directory with set.toml (its base, "
                             "linux-source-SERIES) and NAME.toml + NAME.patch per entry "
                             "(default: the built-in set, framework/zoo/entries)")
    common.add_argument("--cache", metavar="DIR",
                        help="where each set's kernel tree and kernels are, in a directory "
                             "named after the set (default: POWERCUT_ZOO_CACHE, else "
                             "~/.cache/powercut/zoo)")
    common.add_argument("--json", action="store_true", help="print the answer as JSON")
    v = verbs.add_parser("list", parents=[common], help="the entries and which are built")
    v.set_defaults(func=cmd_list)
    v = verbs.add_parser("build", parents=[common],
                         help="build the fixed kernel and each entry's from one tree")
    v.add_argument("--force", action="store_true", help="build again what is up to date")
    v.set_defaults(func=cmd_build)
    v = verbs.add_parser("run", parents=[common],
                         help="the recall run: detected, missed and false alarms")
    v.add_argument("--plan", metavar="VERSION",
                   help="the frozen workload plan to run (default: the current one; "
                        "framework/zoo/plans.py lists them with where each came from)")
    v.add_argument("--budget-min", type=float, metavar="M",
                   help="minutes of checking per kernel (default: the plan's)")
    v.add_argument("--seed", type=int, default=0, help="seed of the workloads (default: 0)")
    v.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="kernels checked at once, each in a guest of its own (default: 1); "
                        "a guest under TCG keeps about one core busy")
    v.add_argument("--no-shares", action="store_true",
                   help="let each workload use all that is left of the budget instead of its "
                        "share of it (the first slow workload can then starve the rest)")
    v.add_argument("--results", default="results/zoo", metavar="DIR",
                   help="where the runs and zoo.json go (default: results/zoo)")
    v.add_argument("--fstests", metavar="DIR",
                   help="a built fstests checkout: each entry's fstests test also runs on its "
                        "kernel and the fixed one (default: POWERCUT_XFSTESTS, else skipped)")
    v.set_defaults(func=cmd_run)
    v = verbs.add_parser("complete", help="add to a finished run what it lacks: each "
                         "detection confirmed alone on both kernels, a second look at "
                         "failures known behaviour explained, fstests verdicts")
    v.add_argument("report", metavar="ZOO_JSON", help="the zoo.json of a finished 'zoo run' "
                   "(written again after each entry)")
    v.add_argument("entries", nargs="*", metavar="ENTRY",
                   help="complete only these entries (default: every one)")
    v.add_argument("--entries", dest="entries_dir", metavar="DIR",
                   help="the entry set the report was run on (as for 'zoo run')")
    v.add_argument("--cache", metavar="DIR", help="where the kernels are (as for 'zoo run')")
    v.add_argument("--fstests", metavar="DIR",
                   help="a built fstests checkout (default: POWERCUT_XFSTESTS, else none)")
    v.add_argument("--json", action="store_true", help="print the report as JSON")
    v.set_defaults(func=cmd_complete)
    v = verbs.add_parser("report", help="the table of a recall run's zoo.json again")
    v.add_argument("reports", nargs="+", metavar="ZOO_JSON",
                   help="a zoo.json written by 'zoo run' (in its --results directory)")
    v.add_argument("--json", action="store_true", help="print the report as JSON")
    v.set_defaults(func=cmd_report)
