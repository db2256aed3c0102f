"""``powercut coverage``: which inputs a set of workloads gives a filesystem, in cells.

A cell is a syscall with its flag or mode, one partition of one of its arguments, or the
durability op after it (crashcases.workload.coverage). The workloads are generated for
the target's capabilities, as ``powercut crash`` would generate them, and followed on the
model of the tree: no guest is needed. ``--budget-s`` estimates which of their crash
states a budget reaches when they run as the zoo runs a plan (each workload a share of
what is left, its states checked in order), from the recording and checking times
measured in earlier crash runs (``--timings``), and counts only the cells of the ops up to
the last state reached.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crashcases.crash.plan import CrashPlan, validate_plan
from crashcases.crash.points import Strategy, distinct_marks
from crashcases.execute import mark_name
from crashcases.vocabulary import DURABILITY_OPS
from crashcases.workload import coverage
from crashcases.workload.cells import GROUPS, ROWS, Cell, offered
from crashcases.workload.coverage import Tally
from crashcases.workload.ops import Workload
from framework.cli import add_target_options, named_user_targets, print_json
from framework.core.errors import ConfigError
from recovery.filesystems import adapter_for
from recovery.targets import Target

#: Workloads to follow, each a case and its options, and their weights in the budget's
#: shares (None: equal).
Plan = tuple[tuple[tuple[str, tuple[str, ...]], ...], tuple[float, ...] | None]


def plan_named(name: str) -> Plan:
    """A zoo workload plan's workloads and weights by its version (framework.zoo.plans)."""
    from framework.zoo.plans import plan_named as zoo_plan

    plan = zoo_plan(name)
    return plan.workloads, plan.weights


@dataclass(frozen=True, slots=True)
class Timing:
    """How long a crash run takes: a guest's start, mkfs and the recording (``start_s``, and
    ``mark_s`` per durability op: each mark is a round trip to device-mapper), then the
    checking guest's start (``first_state_s``) and one state after another (``state_s``, the
    guest's lanes together)."""

    start_s: float
    mark_s: float
    first_state_s: float
    state_s: float


#: Without measured runs (--timings): rough figures of a crash run under TCG on two cores.
DEFAULT_TIMING = Timing(start_s=60.0, mark_s=0.25, first_state_s=35.0, state_s=1.5)


@dataclass(frozen=True, slots=True)
class _Run:
    target: str
    case: str
    marks: int
    record_s: float
    first_state_s: float | None
    state_s: float | None


def _median(xs: Sequence[float]) -> float:
    xs = sorted(xs)
    return (xs[len(xs) // 2] + xs[(len(xs) - 1) // 2]) / 2


@dataclass(slots=True)
class Timings:
    """Crash-run times measured in a results directory, by target and case: the recording of
    a case measured as such, or fitted over the target's runs by its marks; the checking
    from the target's runs of the case, or of any case."""

    runs: list[_Run] = field(default_factory=list)

    def _of(self, target: str, case: str | None = None) -> list[_Run]:
        return [r for r in self.runs if r.target == target and (case is None or r.case == case)]

    def record_s(self, target: str, case: str, marks: int) -> float:
        same = self._of(target, case)
        if same:
            return _median([r.record_s for r in same])
        mine = self._of(target)
        if len({r.marks for r in mine}) < 2:
            return DEFAULT_TIMING.start_s + DEFAULT_TIMING.mark_s * marks
        # Least squares of the recording's length on its marks.
        n = len(mine)
        mx = sum(r.marks for r in mine) / n
        my = sum(r.record_s for r in mine) / n
        slope = (sum((r.marks - mx) * (r.record_s - my) for r in mine)
                 / sum((r.marks - mx) ** 2 for r in mine))
        slope = max(slope, 0.0)
        return max(my - slope * mx, 0.0) + slope * marks

    def checking(self, target: str, case: str) -> tuple[float, float]:
        """(first_state_s, state_s) of ``case`` on ``target``."""
        for runs in (self._of(target, case), self._of(target)):
            runs = [r for r in runs if r.state_s is not None and r.first_state_s is not None]
            if runs:
                return (_median([r.first_state_s for r in runs if r.first_state_s is not None]),
                        _median([r.state_s for r in runs if r.state_s is not None]))
        return DEFAULT_TIMING.first_state_s, DEFAULT_TIMING.state_s


def read_timings(results: Path) -> Timings:
    """The times of the crash runs in ``results`` (each run directory's plan, record and
    results files, by when each was written): the recording from the plan to the record,
    the checking from the record to the results; a state's time is its check's, divided
    among the lanes a guest checks at once (two where the filesystem mounts two copies)."""
    import json

    out = Timings()
    for run in sorted(results.glob("**/crash-*")):
        try:
            plan = json.loads((run / "plan.json").read_text())
            record = json.loads((run / "record.json").read_text())
            done = json.loads((run / "results.json").read_text())
        except (OSError, ValueError):
            continue  # a run without its record or results: nothing was timed
        start = (run / "plan.json").stat().st_mtime
        recorded = (run / "record.json").stat().st_mtime
        finished = (run / "results.json").stat().st_mtime
        checked = [s["result"] for s in done.get("states", []) if s.get("result")]
        target = plan["target"]
        first = each = None
        if checked:
            spec = validate_target(target, plan)
            lanes = 2 if (adapter_for(spec.fstype).concurrent_copies_mount
                          and not spec.needs_journal_disk) else 1
            busy = sum(float(c.get("duration_s") or 0.0) for c in checked) / lanes
            each = busy / len(checked)
            first = max(finished - recorded - busy, 0.0)
        out.runs.append(_Run(target, plan["case"], int(record.get("marks", 0)),
                             recorded - start, first, each))
    return out


def validate_target(name: str, plan: dict[str, Any]) -> Target:
    from recovery.targets import resolve, target_from_dict

    users = tuple(target_from_dict(t) for t in plan.get("user_targets", ()))
    return resolve(name, users)


@dataclass(slots=True)
class Step:
    """One workload of a plan on one target: its states, and how far a budget reaches."""

    case: str
    options: tuple[str, ...]
    workload: Workload
    states: list[int]  # the op index of each crash state's mark, in order
    reached: int | None = None  # states a budget reaches (None: no budget, all)
    seconds: float = 0.0  # what the step takes of the budget

    @property
    def until(self) -> int | None:
        """The index of the last op whose cells count (None: all)."""
        if self.reached is None:
            return None
        return self.states[self.reached - 1] if self.reached else -1


@dataclass(slots=True)
class TargetCoverage:
    target: str
    offered: frozenset[Cell]
    steps: list[Step]
    tally: Tally = field(default_factory=Tally)

    def covered(self, name: str | None = None) -> frozenset[Cell]:
        counts = self.tally.counts if name is None else self.tally.by_workload.get(name)
        return frozenset(c for c in counts or () if c in self.offered)


def _case_options(options: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="case options", add_help=False)
    p.add_argument("--max-sequences", type=int)
    p.add_argument("--points", default="marks")
    p.add_argument("--ops")
    try:
        return p.parse_args(list(options))
    except SystemExit:
        raise ConfigError(f"case options {shlex.join(options)!r}: expected --max-sequences, "
                          "--points and --ops") from None


def build_step(target: str, user: tuple[Target, ...], case: str, options: Sequence[str],
               seed: int) -> Step:
    """The workload of ``case`` as ``powercut crash --target target --case case OPTIONS``
    generates it, and the op index of each crash state it checks."""
    opts = _case_options(options)
    ops = tuple(o.strip() for o in opts.ops.split(",")) if opts.ops else ()
    if opts.points not in ("marks", "distinct"):
        raise ConfigError(f"case {case}: --points {opts.points}: coverage follows mark points "
                          "(marks, distinct)")
    plan = CrashPlan(target=target, user_targets=user, case=case, seed=seed,
                     points=Strategy.parse(opts.points), max_sequences=opts.max_sequences, ops=ops)
    workload = validate_plan(plan).workload
    marks = [(mark_name(n), i) for n, i in enumerate(
        i for i, op in enumerate(workload.ops) if op.kind in DURABILITY_OPS)]
    if opts.points == "distinct":
        kept = set(distinct_marks([op.describe() for op in workload.ops], marks))
        marks = [(name, i) for name, i in marks if name in kept]
    return Step(case, tuple(options), workload, [i for _, i in marks])


def spend(steps: Sequence[Step], target: str, timings: Timings, budget_s: float,
          weights: Sequence[float] | None = None) -> None:
    """How far each step gets in ``budget_s``, as the zoo spends a budget on a plan: each
    step may check for its share of what is left (framework.zoo.plans.step_share) counted
    from the end of its recording, what it leaves passes on, and a step starts only with
    30 s left (framework.zoo.recall.run_kernel)."""
    from framework.zoo.plans import step_share

    every = tuple(weights or (1.0,) * len(steps))
    left = budget_s
    for n, step in enumerate(steps):
        if left < 30:
            step.reached, step.seconds = 0, 0.0
            continue
        share = step_share(left, every[n:])
        marks = sum(1 for op in step.workload.ops if op.kind in DURABILITY_OPS)
        record = timings.record_s(target, step.case, marks)
        first, each = timings.checking(target, step.case)
        checking = max(0.0, min(share, left - record))
        states = math.floor(max(0.0, checking - first) / each)
        step.reached = min(len(step.states), states)
        done = first + len(step.states) * each if step.reached == len(step.states) else checking
        step.seconds = min(left, record + done)
        left -= step.seconds


def measure(target: Target, user: tuple[Target, ...], plan: Sequence[tuple[str, Sequence[str]]],
            seed: int, budget_s: float | None, timings: Timings | None = None,
            weights: Sequence[float] | None = None) -> TargetCoverage:
    capabilities = adapter_for(target.fstype).target_capabilities(target)
    steps = [build_step(target.name, user, case, options, seed) for case, options in plan]
    if budget_s is not None:
        spend(steps, target.name, timings or Timings(), budget_s, weights)
    out = TargetCoverage(target.name, offered(capabilities), steps)
    for step in steps:
        until = step.until
        out.tally.add(step.case, (cell for index, cell in coverage.workload_cells(step.workload.ops)
                                  if until is None or index <= until))
    return out


# ---------------------------------------------------------------------------
# Output


def _pct(n: int, of: int) -> str:
    return f"{n}/{of} ({100 * n / of:.0f}%)" if of else "-"


def table(results: Sequence[tuple[str, TargetCoverage]], *, rows: bool) -> str:
    """Cells covered of those offered, per group (or row), per plan and workload."""
    lines = []
    for target in dict.fromkeys(t.target for _, t in results):
        mine = [(name, t) for name, t in results if t.target == target]
        offered = mine[0][1].offered
        columns: list[tuple[str, frozenset[Cell]]] = []
        for name, t in mine:
            if len(mine) == 1:
                columns += [(s.case, t.covered(s.case)) for s in t.steps]
            columns.append((name if len(mine) > 1 else "all", t.covered()))
        keys = (sorted({c.row for c in offered}, key=lambda r: (GROUPS.index(ROWS[r].group), r))
                if rows else list(GROUPS))
        head = ["group" if not rows else "row", "offered", *(c for c, _ in columns)]
        body = []
        for key in keys:
            cells = {c for c in offered if (c.row == key if rows else ROWS[c.row].group == key)}
            body.append([key, str(len(cells)),
                         *(_pct(len(cells & cov), len(cells)) for _, cov in columns)])
        body.append(["all", str(len(offered)),
                     *(_pct(len(cov), len(offered)) for _, cov in columns)])
        widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
        lines.append(f"{target}")
        for r in [head, *body]:
            lines.append("  " + "  ".join(v.ljust(w) if i == 0 else v.rjust(w)
                                          for i, (v, w) in enumerate(zip(r, widths, strict=True))))
        for name, t in mine:
            for s in t.steps:
                if s.reached is not None:
                    lines.append(f"  {name}: {s.case}: {s.reached} of {len(s.states)} states "
                                 f"in {s.seconds:.0f} s, ops 0-{s.until} of "
                                 f"{len(s.workload.ops)}")
        lines.append("")
    return "\n".join(lines)


def missing(results: Sequence[tuple[str, TargetCoverage]]) -> str:
    lines = []
    for name, t in results:
        gone = sorted(t.offered - t.covered())
        lines.append(f"{t.target} {name}: {len(gone)} cells not covered")
        for row, cells in coverage.by_row(gone).items():
            lines.append(f"  {row}: {' '.join(f'{c.axis}={c.value}' for c in cells)}")
    return "\n".join(lines)


def to_json(results: Sequence[tuple[str, TargetCoverage]], budget_s: float | None) -> dict[str, Any]:
    out: dict[str, Any] = {"budget_s": budget_s, "targets": []}
    for name, t in results:
        out["targets"].append({
            "target": t.target, "plan": name, "offered": len(t.offered),
            "covered": len(t.covered()),
            "groups": {g: {"offered": len({c for c in t.offered if ROWS[c.row].group == g}),
                           "covered": len({c for c in t.covered() if ROWS[c.row].group == g})}
                       for g in GROUPS},
            "steps": [{"case": s.case, "options": list(s.options), "ops": len(s.workload.ops),
                       "states": len(s.states), "reached": s.reached, "seconds": s.seconds,
                       "until_op": s.until, "covered": len(t.covered(s.case))}
                      for s in t.steps],
            "cells": [{"row": c.row, "axis": c.axis, "value": c.value,
                       "count": t.tally.counts.get(c, 0),
                       "by": {w: n[c] for w, n in t.tally.by_workload.items() if n.get(c)}}
                      for c in sorted(t.offered)],
        })
    return out


def figure(results: Sequence[tuple[str, TargetCoverage]], path: Path) -> None:
    """One panel per target: the share of each group's offered cells covered, a bar per
    plan."""
    from framework.report.figures import plt, png  # matplotlib only when a figure is asked for

    targets = list(dict.fromkeys(t.target for _, t in results))
    plans = list(dict.fromkeys(name for name, _ in results))
    fig, axes = plt.subplots(1, len(targets), figsize=(3.6 * len(targets), 3.4), squeeze=False,
                             sharey=True)
    keys = [*GROUPS, "all"]
    width = 0.8 / len(plans)
    for ax, target in zip(axes[0], targets, strict=True):
        for k, plan in enumerate(plans):
            t = next(t for name, t in results if name == plan and t.target == target)
            cov = t.covered()
            shares = []
            for key in keys:
                cells = t.offered if key == "all" else {c for c in t.offered
                                                        if ROWS[c.row].group == key}
                shares.append(100 * len(cells & cov) / len(cells) if cells else 0)
            xs = [i + (k - (len(plans) - 1) / 2) * width for i in range(len(keys))]
            ax.bar(xs, shares, width, label=plan)
        ax.axhline(95, color="0.5", linewidth=0.8, linestyle="--")
        ax.set_xticks(range(len(keys)), keys, rotation=30, ha="right")
        ax.set_title(f"{target} ({len(t.offered)} cells)")
        ax.set_ylim(0, 100)
    axes[0][0].set_ylabel("offered cells covered, %")
    axes[0][-1].legend(fontsize=8, loc="lower right")
    path.write_bytes(png(fig))


def cmd_coverage(args: argparse.Namespace) -> int:
    user = named_user_targets(args)
    from recovery.targets import get_target

    extra = {t.name: t for t in user}
    plans: list[tuple[str, Plan]] = []
    if args.cases:
        options = (*(("--max-sequences", str(args.max_sequences)) if args.max_sequences else ()),
                   "--points", args.points)
        plans.append(("cases", (tuple((c, options) for c in args.cases), None)))
    plans += [(name, plan_named(name)) for name in args.plan or ()]
    if not plans:
        raise ConfigError("name cases (CASE...) or a plan (--plan VERSION)")
    budget = (args.budget_min * 60.0 if args.budget_min is not None else args.budget_s)
    timings = read_timings(Path(args.timings)) if args.timings else Timings()
    results = [(name, measure(extra.get(t) or get_target(t), user, workloads, args.seed,
                              budget, timings, weights))
               for t in args.target for name, (workloads, weights) in plans]
    if args.json:
        print_json(to_json(results, budget))
    else:
        print(table(results, rows=args.rows))
        if args.missing:
            print(missing(results))
    if args.figure:
        figure(results, Path(args.figure))
        print(f"figure: {args.figure}", file=sys.stderr)
    return 0


EPILOG = """\
examples:
  powercut coverage gen:burst ranges:600 --target ext4/ordered
  powercut coverage --plan w8 --plan w9 --target ext4/ordered,btrfs,xfs,f2fs \\
      --budget-min 6 --figure coverage.png
  powercut coverage cover:600 --target xfs --rows --missing
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "coverage", help="which syscalls, flags and argument classes workloads give a filesystem",
        description=(
            "Generate workloads for a target's filesystem and count the input cells they "
            "produce before each durability op: every syscall with its flag or mode, the "
            "partition of each argument (offsets and lengths against the file's size and a "
            "block, sizes that change the inode's layout, names, xattr sizes, what an "
            "attribute op sets) and the durability op that follows, out of the cells the "
            "filesystem offers. No guest is needed. With --budget-min, only the cells of the "
            "crash states a budget reaches when the workloads run as the zoo runs a plan."),
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cases", nargs="*", metavar="CASE",
                   help="workloads, as powercut crash --case names them")
    add_target_options(p, what="filesystem configurations, e.g. ext4/ordered")
    p.add_argument("--plan", action="append", metavar="VERSION",
                   help="a zoo workload plan by version, e.g. w8 or w9 "
                        "(framework/zoo/plans.py); repeatable")
    p.add_argument("--seed", type=int, default=0, help="workload seed (default: 0)")
    p.add_argument("--max-sequences", type=int, metavar="N", help="for CASEs: gen:* sample size")
    p.add_argument("--points", default="marks", choices=("marks", "distinct"),
                   help="for CASEs: the crash points a run checks (default: marks)")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--budget-s", type=float, metavar="S",
                        help="count only the crash states a budget of S seconds per target "
                             "reaches, the workloads run in order with the plan's shares")
    budget.add_argument("--budget-min", type=float, metavar="M", help="the same in minutes")
    p.add_argument("--timings", metavar="RESULTS_DIR",
                   help="estimate the budget's reach from the crash runs in this results "
                        "directory or under it, as a zoo run's --results keeps them (their "
                        "recording and checking times, by target and case); "
                        "without it, rough figures of a run under TCG on two cores")
    p.add_argument("--rows", action="store_true", help="a line per syscall row, not per group")
    p.add_argument("--missing", action="store_true", help="list the cells not covered")
    p.add_argument("--figure", metavar="PNG", help="write a figure of the coverage per group")
    p.add_argument("--json", action="store_true", help="print the coverage as JSON, every cell")
    p.set_defaults(func=cmd_coverage)
