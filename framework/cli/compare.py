"""``powercut compare A B``: what changed from run A to run B, and whether it is a regression."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from rich.console import Console
from rich.table import Table

from framework.cli import print_json
from framework.core import rundir
from framework.core.store import Store, StoreError
from framework.report.compare import Comparison, Rule, StateStatus, Verdict, compare_results
from framework.report.findings import words
from framework.report.results import load

DESCRIPTION = """\
Compare run B with run A (runs or study runs, by id, uuid or 'latest') and
say what changed:

- every benchmark metric (per workload and target) and the recovery times
  of power-cut trials (per target): A's and B's mean with its interval, the
  relative change, and a verdict. By default a change is significant when
  the two confidence intervals do not overlap and the change is at least
  10% (--rel-threshold), the rule seed 002 uses for its figures;
  --test welch asks Welch's t-test instead (p < 1 - level), with the same
  threshold on the size of the change. A significant change for the worse
  (less throughput, more time) is a regression.
- every benchmark target's primary metric as a ratio to its run's baseline
  target ("files / ext2"), with Fieller's interval, judged by the intervals
  rule. Under an emulated CPU the machine's speed drifts from run to run;
  the ratio cancels that drift, the absolute figures do not. --bench
  relative judges only the ratios, --bench absolute only the figures.
- crash findings first: the failing states of each run grouped by
  signature (filesystem, kind of broken promise, durability operation, the
  operations since the durable point before, names normalised), matched by
  target and signature: new in B, gone in B, still there (with how many
  states, how many of them new, "fails f/t" where B checked one again), and
  known. Then the crash states, matched by target, case, seed, last mark
  and variant (log entry numbers differ between recordings, marks do not):
  new in B (fails in B, passed or was not checked in A), gone in B, still
  failing, and known (explained by the known-behaviour list the run was
  judged with), each with the number of its finding.
- power-cut trials per target: failing in B where A had none.

Exit status: 0 no regression, 1 a regression (a metric, a new finding, a
new failing state or new failing power cuts), 2 bad input (an unknown run,
runs of different studies, or bench runs of one workload at different scales or
--duration, without --force).
"""

EPILOG = """\
examples:
  powercut compare 12 15                           # two runs in results/powercut.sqlite
  powercut compare latest latest --db base.sqlite --db-b candidate.sqlite
  powercut compare 3 9 --test welch --level 0.99 --json
  powercut compare 4 5 --rel-threshold 0.05        # flag changes of 5% and more
  powercut compare 4 5 --bench relative            # runs from different days or machines
"""


def cmd_compare(args: argparse.Namespace) -> int:
    rule = rule_of(args)
    db_b = Path(args.db_b or args.db)
    for path in {Path(args.db), db_b}:
        if not path.is_file():
            raise StoreError(f"{path}: no such results database")
    with contextlib.ExitStack() as stack:
        store_a = stack.enter_context(Store(args.db))
        store_b = store_a if db_b == Path(args.db) else stack.enter_context(Store(db_b))
        a, b = load(store_a, args.a), load(store_b, args.b)
    result = compare_results(a, b, rule, force=args.force)
    if args.figure and result.moves:
        from framework.report.figures import trade_off_moves

        Path(args.figure).write_bytes(trade_off_moves(result.moves, "the bench metric"))
    if args.json:
        print_json(result.to_dict())
    else:
        render(result, Console(width=None if Console().is_terminal else 160))
    return 1 if result.regressed else 0


def render(c: Comparison, out: Console) -> None:
    def name(r: object) -> str:
        from framework.report.results import Results

        assert isinstance(r, Results)
        kernel = r.environment().get("guest", {}).get("kernel")
        return f"run {r.top.id} ({r.study}{', ' + kernel if kernel else ''})"

    out.print(f"A: {name(c.a)}\nB: {name(c.b)}\nsignificant: {c.rule.describe()}",
              markup=False)
    if c.moves:
        table = Table(title="trade-off, B against A (overhead %, recovery p90 s)")
        for col in ("profile", "configuration", "A", "B", "front"):
            table.add_column(col)
        for move in c.moves:
            front = ("left the front" if move.left_front else "joined the front" if move.joined_front
                     else "on the front" if move.front_b else "")
            table.add_row(move.profile, move.name, f"{move.a[0]:+.1f}%, {move.a[1]:.3g} s",
                          f"{move.b[0]:+.1f}%, {move.b[1]:.3g} s", front,
                          style="bold red" if move.left_front else "")
        out.print(table)
    if c.metrics:
        table = Table(title="metrics, B against A")
        for col in ("group", "target", "metric", "A", "B", "change", "verdict"):
            table.add_column(col, justify="right" if col in ("A", "B", "change") else "left")
        for m in c.metrics:
            style = {Verdict.REGRESSION: "bold red", Verdict.IMPROVEMENT: "green"}.get(
                m.verdict, "")
            change = "-" if m.change is None else f"{100 * m.change:+.1f}%"
            p = f" (p={m.p_value:.3g})" if m.p_value is not None else ""
            table.add_row(m.group, m.target, m.metric, m.a.describe(m.unit),
                          m.b.describe(m.unit), change, m.verdict.value + p, style=style)
        out.print(table)
    else:
        out.print("metrics: no benchmark or power-cut metric in both runs")
    print_findings(c, out)
    failing = [s for s in c.states if s.status is not StateStatus.GONE]
    gone = [s for s in c.states if s.status is StateStatus.GONE]
    counts = {st: sum(1 for s in c.states if s.status is st) for st in StateStatus}
    out.print(f"crash states: {counts[StateStatus.NEW]} new in B, {counts[StateStatus.GONE]} "
              f"gone in B, {counts[StateStatus.STILL]} still failing, "
              f"{counts[StateStatus.KNOWN]} known")
    by_key = {(s.target, s.case, s.key): n for n, f in enumerate(c.findings, 1)
              if f.status is not StateStatus.GONE for s in f.finding.states}
    for s in failing:
        if s.status is StateStatus.KNOWN:
            continue
        n = by_key.get((s.target, s.case, s.state))
        out.print(f"  {s.status.value.upper():<13} {f'[{n}] ' if n else ''}{s.target} {s.case} "
                  f"{s.last_mark} {s.variant}: {s.outcome_b}"
                  f"{': ' + s.findings if s.findings else ''}", markup=False)
        if s.reproducer:
            out.print(f"                reproduce: {s.reproducer}", markup=False)
    for s in gone[:10]:
        out.print(f"  gone          {s.target} {s.case} {s.last_mark} {s.variant}: was "
                  f"{s.outcome_a}", markup=False)
    for cut in c.cuts:
        if cut.failing_a or cut.failing_b:
            mark = "NEW " if cut.new_failures else ""
            out.print(f"  {mark}power cuts on {cut.target}: {cut.failing_a}/{cut.trials_a} "
                      f"failing in A, {cut.failing_b}/{cut.trials_b} in B "
                      f"({cut.known_b} known)", markup=False)
    out.print(f"verdict: {'REGRESSION' if c.regressed else 'no regression'} "
              f"({verdict_words(c)})")


def verdict_words(c: Comparison) -> str:
    """What the verdict rests on, findings first: "1 finding (2 states) new, 3 new failing
    states; 0 metrics; 0 targets with new failing power cuts"."""
    new = [f.finding for f in c.new_findings]
    more = [f for f in c.regressing_findings if f.status is StateStatus.STILL]
    return (f"{words(new)} new"
            + (f", {len(more)} finding{'' if len(more) == 1 else 's'} of A failing in more "
               "states" if more else "")
            + f", {len(c.new_states)} new failing states; {len(c.regressions)} metrics; "
            f"{len(c.new_cut_failures)} targets with new failing power cuts")


def print_findings(c: Comparison, out: Console) -> None:
    """Findings first: new in B, still there, gone in B (by target and signature)."""
    by = {st: [f.finding for f in c.findings if f.status is st] for st in StateStatus}
    out.print(f"findings: {words(by[StateStatus.NEW])} new in B"
              + "".join(f", {words(by[st])} {what}" for st, what in (
                  (StateStatus.STILL, "still there"), (StateStatus.GONE, "gone in B"),
                  (StateStatus.KNOWN, "known")) if by[st]), markup=False)
    for n, f in enumerate(c.findings, 1):
        if f.status is StateStatus.KNOWN:
            continue
        rep = f.finding.representative
        label = {StateStatus.NEW: "NEW", StateStatus.STILL: "STILL",
                 StateStatus.GONE: "GONE"}[f.status]
        out.print(f"  {n}. {label:<5} {f.finding.words}", markup=False)
        states = (f"A {f.states_a}, B {f.states_b} states"
                  + (f" ({f.new_states} new)" if f.new_states else ""))
        rate = f", {f.finding.rate.words()}" if f.finding.rate is not None else ""
        out.print(f"     {f.target}: {states}{rate}, e.g. {rep.case} {rep.key}: "
                  f"{rep.explanation[:300]}", markup=False)
        if rep.reproducer and f.status is not StateStatus.GONE:
            out.print(f"     reproduce: {rep.reproducer}", markup=False)


def add_rule_options(p: argparse.ArgumentParser) -> None:
    """What makes a change significant (Rule): compare's options, and ci's."""
    p.add_argument("--test", choices=("intervals", "welch"), default="intervals",
                   help="what makes a change significant: non-overlapping intervals (default) "
                        "or Welch's t-test")
    p.add_argument("--rel-threshold", type=float, default=0.10, metavar="FRACTION",
                   help="smallest relative change that counts (default: 0.10, i.e. 10%%)")
    p.add_argument("--level", type=float, default=0.95,
                   help="confidence level of the intervals and the test (default: 0.95)")
    p.add_argument("--bench", default="both", metavar="VIEW",
                   help="which benchmark figures are judged: 'absolute' (each target's own), "
                        "'relative' (each target's ratio to its run's baseline target, which "
                        "the machine's speed on the day cancels out of) or 'both' (default)")


def rule_of(args: argparse.Namespace) -> Rule:
    return Rule(args.test, args.rel_threshold, args.level, args.bench)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="what changed from run A to run B; exit 1 on a regression",
                       description=DESCRIPTION, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", metavar="A", help="the baseline run: id, uuid (prefix) or 'latest'")
    p.add_argument("b", metavar="B", help="the run to judge: id, uuid (prefix) or 'latest'")
    p.add_argument("--db", default=f"results/{rundir.DB}", metavar="PATH",
                   help="results database of A (and of B without --db-b) "
                        "(default: results/powercut.sqlite)")
    p.add_argument("--db-b", metavar="PATH", help="results database of B, if another")
    add_rule_options(p)
    p.add_argument("--force", action="store_true",
                   help="compare runs of different studies, or a workload run at different "
                        "scales or --duration (what they have in common)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--figure", metavar="OUT.png",
                   help="draw how each configuration moved on the trade-off figure (recovery "
                        "p90 against overhead), A to B with arrows, one panel per device profile")
    p.set_defaults(func=cmd_compare)
