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
import os
import sys
from pathlib import Path

from framework.cli import print_json
from framework.core import rundir
from framework.zoo.entry import load_entries
from framework.zoo.kernels import build_kernels, installed, zoo_cache

EPILOG = """\
The zoo measures what share of real, upstream-fixed crash-consistency bugs powercut's
general workloads catch. Each entry (framework/zoo/entries) reverts one fix on Debian's
linux-source-6.12 (6.12.117). 'zoo build' unpacks that source once into a cache outside
the checkout (--cache, POWERCUT_ZOO_CACHE, or ~/.cache/powercut/zoo), configures it for
powercut's guest, builds the fixed kernel (about 25 minutes on 2 cores the first time)
and then each entry's kernel incrementally (a minute or two each). 'zoo run' runs the
same workloads, chosen per filesystem without looking at the bugs, on each kernel within
a budget, and reports per entry: detected or missed, the time to the first failing
state, failing states, distinct findings, and recall; on the fixed kernel, any new
failing state is a false alarm.

examples:
  powercut zoo list
  powercut zoo build                      # everything, or name entries
  powercut zoo run --budget-min 15 --json
  powercut zoo run btrfs-new-name-last-log-commit --budget-min 5
  powercut zoo run --jobs 2               # two kernels at a time (two guests)
  powercut zoo report results/zoo/zoo.json
"""


def cmd_list(args: argparse.Namespace) -> int:
    entries = load_entries(names=tuple(args.entries))
    cache = zoo_cache(args.cache)
    if args.json:
        print_json([{**e.to_dict(), "built": installed(cache, e.name) is not None}
                    for e in entries])
        return 0
    for e in entries:
        built = "built" if installed(cache, e.name) is not None else "not built"
        print(f"{e.name:<40} {e.filesystem:<6} {e.fix[:12]} {e.fstests or '-':<12} "
              f"{'hand port' if e.hand_port else 'revert':<9} {built}")
        print(f"{'':<40} {e.subject}")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    entries = load_entries(names=tuple(args.entries))
    kernels = build_kernels(entries, zoo_cache(args.cache), force=args.force,
                            say=lambda line: print(line, flush=True))
    if args.json:
        print_json([k.to_dict() for k in kernels])
    else:
        print(f"zoo: {len(kernels)} kernels in {zoo_cache(args.cache) / 'kernels'}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from framework.zoo.recall import RecallPlan, run_recall

    entries = load_entries(names=tuple(args.entries))
    plan = RecallPlan(budget_s=args.budget_min * 60.0, seed=args.seed,
                      fstests=args.fstests or None, shares=not args.no_shares, jobs=args.jobs)
    out = Path(args.results) / rundir.ZOO_REPORT
    out.parent.mkdir(parents=True, exist_ok=True)
    report = run_recall(entries, zoo_cache(args.cache), Path(args.results), plan,
                        say=_say, out=out)
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
    fstests = args.fstests or os.environ.get("POWERCUT_XFSTESTS")
    # Named entries are checked against the zoo as the other verbs check them; complete()
    # then checks that the report has them.
    report = complete(report, load_entries(names=tuple(args.entries)), zoo_cache(args.cache),
                      path.parent,
                      fstests=Path(fstests) if fstests else None, say=_say,
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
    common.add_argument("--cache", metavar="DIR",
                        help="where the kernel tree and the kernels are (default: "
                             "POWERCUT_ZOO_CACHE, else ~/.cache/powercut/zoo)")
    common.add_argument("--json", action="store_true", help="print the answer as JSON")
    v = verbs.add_parser("list", parents=[common], help="the entries and which are built")
    v.set_defaults(func=cmd_list)
    v = verbs.add_parser("build", parents=[common],
                         help="build the fixed kernel and each entry's from one tree")
    v.add_argument("--force", action="store_true", help="build again what is up to date")
    v.set_defaults(func=cmd_build)
    v = verbs.add_parser("run", parents=[common],
                         help="the recall run: detected, missed and false alarms")
    v.add_argument("--budget-min", type=float, default=15.0, metavar="M",
                   help="minutes of checking per kernel and target (default: 15)")
    v.add_argument("--seed", type=int, default=0, help="seed of the workloads (default: 0)")
    v.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="kernels checked at once, each in a guest of its own (default: 1); "
                        "a guest under TCG keeps about one core busy")
    v.add_argument("--no-shares", action="store_true",
                   help="let each workload use all that is left of the budget instead of an "
                        "equal share of it (the first slow workload can then starve the rest)")
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
