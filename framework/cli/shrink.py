"""``powercut shrink``: minimise the workload of a failing crash state by delta debugging."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from crashcases.findings.shrink import Shrinker, ShrinkResult, load_failure
from framework.cli import add_machine_options, print_json
from framework.cli.crash import machine_factory
from framework.core import rundir
from framework.core.errors import PowercutError

DESCRIPTION = """\
Find a small workload that still fails like state STATE of the crash run
RUN_DIR, by delta debugging over its operations, and keep it as a new
crash run whose `powercut recheck` command reproduces the failure.

What must reproduce is the state's signature: its variant kind (prefix,
subset, torn, lying), its outcome, and the (finding kind, path) pairs of
its findings. A candidate workload reproduces when one of its crash states
of that variant kind has the same outcome and at least one finding with
the same kind and path (a state without findings, e.g. unmountable, needs
the outcome alone). Paths survive because operations keep theirs.

How: first the cheap cut (only the operations under the top-level
directories that the findings name, plus every sync), then ddmin over the
operations (complements first, granularity doubling). Each candidate is
recorded and its crash states checked in a fresh guest, with the run's
target, --points, --per-point and seed (about 20 s for a small workload
under TCG); candidates that are no valid workload (a write to a file they
never create) or promise nothing (no fsync, fdatasync, sync or directory
fsync) are skipped without a guest. The result is 1-minimal: dropping any
one operation no longer reproduces.

Candidates run in RUN_DIR/shrink-*/, each removed once tested, except the
smallest one that reproduced. That one is a complete crash run directory
with workload.json (usable as --case file:PATH) and shrink.json (this
report). Progress goes to stderr. Ctrl-C stops the search and prints the
best result found so far, which stays on disk.
"""

EPILOG = """\
exit status: 0 a smaller workload reproduces; 1 nothing smaller reproduces
(the original run stays the reproducer); 2 bad input; 130 interrupted.

examples:
  powercut crash --target ext4/nobarrier --case gen:seq2 --max-sequences 40
  powercut shrink results/crash-20260101T120000-ab12cd 351/prefix
  powercut shrink results/crash-.../ 1234/subset:77 --json > shrunk.json
  powercut recheck results/crash-.../shrink-.../ 9/prefix     # the new reproducer
  powercut crash --target ext4/ordered --case file:results/crash-.../shrink-.../workload.json
"""


def report(result: ShrinkResult) -> None:
    f = result.failure
    status = "interrupted, best so far" if result.interrupted else (
        "1-minimal" if result.minimal else "not minimal")
    print(f"{f.key} of {f.run_dir} ({f.plan.target}, {f.plan.case})")
    print(f"signature: {f.signature.describe()}")
    if result.reduced:
        print(f"{len(f.workload.ops)} ops -> {len(result.indices)} ops ({status}):")
        for op in result.ops:
            print(f"  {op.describe()}")
    else:
        print(f"no smaller workload reproduced ({status}); the original run is the reproducer")
    per_run = f", {result.guest_s / result.guest_runs:.1f} s each" if result.guest_runs else ""
    print(f"candidates: {result.candidates} ({result.guest_runs} in a guest{per_run}, "
          f"{result.unresolved} unresolved without one); wall time {result.wall_s:.1f} s")
    print(f"reproduce: {result.reproducer()}")
    if result.reproducer_dir is not None:
        print(f"workload:  {result.reproducer_dir / rundir.WORKLOAD}")


def cmd_shrink(args: argparse.Namespace) -> int:
    def progress(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    # Bad input fails here, before the kernel is looked up or anything is written.
    failure = load_failure(Path(args.run_dir), args.state)
    shrinker = Shrinker(failure, machine_factory(args), progress)
    try:
        result = shrinker.shrink()
    except KeyboardInterrupt:
        show(args, shrinker.result)
        return 130
    except PowercutError:
        show(args, shrinker.result)  # the harness broke: say what was found before it did
        raise
    show(args, result)
    return 0 if result.reduced else 1


def show(args: argparse.Namespace, result: ShrinkResult) -> None:
    if args.json:
        print_json(result.to_dict())
    else:
        report(result)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("shrink", help="minimise the workload of a failing crash state (delta debugging)",
                       description=DESCRIPTION, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a crash run directory (results/crash-...)")
    p.add_argument("state", metavar="STATE",
                   help="a failing state POINT/VARIANT of that run, e.g. 351/prefix or 120/subset:77")
    p.add_argument("--json", action="store_true",
                   help="print the result as JSON (the same as the kept shrink.json)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    add_machine_options(p)
    p.set_defaults(func=cmd_shrink)
