"""``powercut ci``: a verdict on a kernel against a baseline, for CI on kernel patches."""

from __future__ import annotations

import argparse
import json
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from rich.console import Console

from crashcases.vocabulary import Rate
from framework.cli import add_machine_options, ci_reports
from framework.cli.compare import add_rule_options, render, rule_of, verdict_words
from framework.cli.run import kernel_argv
from framework.core import junit, rundir
from framework.core.errors import SKIPPED, ConfigError, MissingPrerequisite
from framework.core.machine.kernel import kernel_spec
from framework.core.store import Store
from framework.report.compare import (
    Comparison,
    FindingChange,
    StateChange,
    StateStatus,
    Verdict,
    compare_results,
)
from framework.report.findings import FailingState
from framework.report.results import Results, load
from framework.study.engine import load_study, missing_shards

DESCRIPTION = """\
Run a study (default: ci, about 10 to 15 minutes under TCG) on a candidate
kernel and judge it against a baseline:

1. the baseline is a run already in a database (--baseline RUN, or
   --baseline DB.sqlite for that database's latest run), or a kernel the
   same study runs on first (--baseline-kernel-release R, or
   --baseline-kernel BZIMAGE with --baseline-modules DIR);
2. the study runs on the candidate (--kernel/--modules or --kernel-release);
3. powercut compare judges the candidate against the baseline (metrics
   with intervals, crash states by mark, power cuts; the known-behaviour
   list the runs were judged with);
4. the failing states are grouped into findings (by signature) and every
   new finding, and every finding the baseline had that fails in more states
   now, is checked again up to --reruns times on the candidate (its representative, or its first new state when the
   baseline had the finding): "fails f/t", the first check included,
   reliable only at t/t with t at least 3, flaky otherwise;
5. with --report DIR (a bug report folder from powercut export --report),
   the report's fstests tests run on the baseline kernel and the candidate:
   fixed (fails on the baseline, passes on the candidate), still fails, or
   a regression (passes on the baseline only: exit 1);
6. a JUnit file and a markdown summary are written.

Exit status: 0 no regression; 1 regression (new failing states, named by
their findings first, with reproducers and "fails f/t", slower metrics, a positive
control of the study that stopped firing); 2 harness error (bad options, a
kernel that is missing or does not boot, a step that could not run).
"""

EPILOG = """\
examples:
  powercut ci --kernel-source 7.3 --patch fix.patch   # build both, judge the patch
  powercut ci --kernel-source 7.3 --patch REPORT/fix.patch --report REPORT --study FILE
  powercut kernels fetch 7.2 7.3         # Debian's builds, into the kernel cache
  powercut ci --kernel-release 7.3.4+deb13-amd64 --baseline-kernel-release 7.2.13+deb14-amd64
  powercut ci --kernel arch/x86/boot/bzImage --modules /tmp/mods --baseline results/ci.sqlite
  powercut ci --kernel-release 6.1.0-56-amd64 --baseline 12 --study quick --reruns 5
"""


@dataclass(frozen=True, slots=True)
class Rerun:
    """A finding with states failing anew, one of them checked again ``runs`` times on the
    candidate: its representative, or for a finding the baseline had, its first new state."""

    number: int  # the finding's number in the comparison
    finding: FindingChange
    state: FailingState
    runs: int
    failed: int

    @property
    def rate(self) -> Rate | None:
        """The first check counts: "fails 4/4, reliable" after 3 reruns that all failed."""
        return Rate(1 + self.failed, 1 + self.runs) if self.runs else None

    @property
    def label(self) -> str:
        return self.rate.words() if self.rate is not None else "not checked again"


def cmd_ci(args: argparse.Namespace) -> int:
    """The verdict; every harness error (a missing kernel included) is exit 2 here."""
    try:
        return judge_kernel(args)
    except MissingPrerequisite as exc:
        raise ConfigError(f"missing prerequisite: {exc}") from exc


def build_patched(args: argparse.Namespace, *, say: Callable[[str], None] = print) -> None:
    """--kernel-source SERIES --patch FILE: build the source as Debian ships it (the baseline)
    and with the patch (the candidate) in the kernel cache, and point the machine options at
    them. The source is fetched first when it is not there; the first build of a series
    takes about 35 minutes on 2 cores, later builds only what the patch touches."""
    from framework.cli.kernels import build_series

    if args.patch is None:
        raise ConfigError("--kernel-source needs --patch FILE: the change to judge")
    chosen = [o for o in ("kernel", "kernel_release", "baseline", "baseline_kernel",
                          "baseline_kernel_release") if getattr(args, o)]
    if chosen:
        raise ConfigError(f"--kernel-source builds both kernels; drop --{chosen[0].replace('_', '-')}")
    base, candidate = build_series(args.kernel_source, args.patch, say=say)
    assert candidate is not None
    args.kernel, args.modules = str(candidate.image), str(candidate.modules)
    args.baseline_kernel, args.baseline_modules = str(base.image), str(base.modules)


def judge_kernel(args: argparse.Namespace) -> int:
    from framework.cli import main as powercut
    from framework.cli.vm import resolve_kernel

    if args.kernel_source is not None or args.patch is not None:
        if args.kernel_source is None:
            raise ConfigError("--patch needs --kernel-source SERIES (e.g. 7.3): the source the "
                              "patch applies to")
        build_patched(args)

    baseline_kernel = kernel_argv(args.baseline_kernel, args.baseline_modules,
                                  args.baseline_kernel_release)
    if bool(args.baseline) == bool(baseline_kernel):
        raise ConfigError("name one baseline: --baseline RUN|DB, or a kernel to run it on "
                          "(--baseline-kernel-release R, --baseline-kernel BZIMAGE)")
    if args.baseline_modules and not args.baseline_kernel:
        raise ConfigError("--baseline-modules goes with --baseline-kernel")
    if args.reruns < 0:
        raise ConfigError(f"--reruns {args.reruns}: must be 0 or more")
    rule = rule_of(args)
    study = load_study(args.study)
    reports = ci_reports.check_reports(args.report)
    checkout = ci_reports.checkout_of(args.xfstests) if reports else None
    if reports and not baseline_kernel:
        raise ConfigError("--report runs its tests on two kernels: name the baseline as a "
                          "kernel (--baseline-kernel-release, --baseline-kernel or "
                          "--kernel-source), not as a run")
    resolve_kernel(args)  # a missing candidate kernel: a one-line error before anything runs
    if baseline_kernel:
        resolve_kernel(argparse.Namespace(kernel=args.baseline_kernel,
                                          modules=args.baseline_modules,
                                          kernel_release=args.baseline_kernel_release))
    db, results = Path(args.db), Path(args.results)
    common = ["--accel", args.accel, "--memory-mib", str(args.memory_mib), "--db", str(db),
              "--results", str(results)]

    def run_study_on(label: str, kernel: list[str], targets_file: str | None) -> int:
        extra = [*kernel, *(["--targets-file", targets_file] if targets_file else [])]
        print(f"\n=== ci: the {label}: powercut run {args.study} {shlex.join(extra)}", flush=True)
        status = powercut(["run", args.study, *extra, *common], nested=True)
        if status >= 2:
            raise ConfigError(f"{label}: the study could not run (exit {status}); see above")
        with Store(db) as store:
            top = store.resolve("latest")
            steps = json.loads((Path(top.environment["run_dir"]) / rundir.STEPS).read_text())
        broken = [s for s in steps if s["status"] >= 2 and s["status"] != SKIPPED]
        if broken:
            raise ConfigError(f"{label}: step {broken[0]['step']} could not run (exit "
                              f"{broken[0]['status']}: powercut {shlex.join(broken[0]['argv'])});"
                              f" see its output above")
        return top.id

    if baseline_kernel:
        base_db, base_ref = db, str(run_study_on("baseline", baseline_kernel,
                                                 args.baseline_targets_file or args.targets_file))
    elif Path(args.baseline).is_file():
        base_db, base_ref = Path(args.baseline), "latest"
    else:
        base_db, base_ref = db, args.baseline
    with Store(base_db) as store:
        # An unknown baseline, or one whose shards are not all there, fails before the
        # candidate runs: a baseline missing steps would pass whatever they would have found.
        gaps = missing_shards(store.resolve(base_ref))
        if gaps:
            raise ConfigError(f"baseline {base_ref} of {base_db}: {gaps[0]}"
                              + (f" (and {len(gaps) - 1} more)" if len(gaps) > 1 else ""))
    candidate = run_study_on("candidate", kernel_argv(args.kernel, args.modules,
                                                      args.kernel_release), args.targets_file)
    with Store(base_db) as store_a, Store(db) as store_b:
        comparison = compare_results(load(store_a, base_ref), load(store_b, str(candidate)),
                                     rule)
        top = store_b.run(candidate)
    steps = json.loads((Path(top.environment["run_dir"]) / rundir.STEPS).read_text())
    expect = {i: s.expect for i, s in enumerate(study.steps, 1)}
    quiet = [s for s in steps if expect.get(s["step"]) == "fail" and s["status"] not in (1, SKIPPED)]
    skipped = [s for s in steps if s["status"] == SKIPPED]
    numbers = {id(f): n for n, f in enumerate(comparison.findings, 1)}
    reruns = [rerun(numbers[id(f)], f, args.reruns,
                    kernel_argv(args.kernel, args.modules, args.kernel_release), powercut, db)
              for f in comparison.regressing_findings[:args.max_reruns]]
    report_tests: list[ci_reports.ReportTest] = []
    if reports:
        assert checkout is not None
        cand_spec = resolve_kernel(args)  # resolved once, before the studies ran
        base_spec = kernel_spec(args.baseline_kernel, args.baseline_modules,
                                args.baseline_kernel_release)
        report_tests = ci_reports.run_reports(reports, checkout, base_spec, cand_spec,
                                              Path(top.environment["run_dir"]) / "fstests")
    regressed = (comparison.regressed or bool(quiet)
                 or any(t.regressed for t in report_tests))
    out = Console()
    render(comparison, out)
    for s in quiet:
        out.print(f"  CONTROL QUIET step {s['step']}: powercut {shlex.join(s['argv'])} found "
                  "nothing on the candidate (it must fail)", markup=False)
    for s in skipped:
        out.print(f"  SKIPPED step {s['step']}: powercut {shlex.join(s['argv'])}: "
                  f"{s.get('skipped', 'its target cannot run on the candidate')}", markup=False)
    for r in reruns:
        out.print(f"  finding {r.number} ({r.finding.finding.words}), checked again as "
                  f"{r.state.case} {r.state.key}: {r.label}", markup=False)
    summary = Path(args.summary) if args.summary else Path(top.environment["run_dir"]) / rundir.CI_SUMMARY
    for t in report_tests:
        out.print(f"  REPORT TEST {t.words()}", markup=False)
    summary.write_text(markdown(comparison, reruns, quiet, regressed, skipped)
                       + ci_reports.markdown(report_tests))
    junit_path = Path(args.junit) if args.junit else Path(top.environment["run_dir"]) / rundir.CI_JUNIT
    cases = junit_cases(comparison, reruns, quiet, skipped) + ci_reports.junit_cases(report_tests)
    junit.write(junit_path, f"powercut ci {args.study}", cases)
    ran = {s["step"] for s in steps}
    kci = Path(args.kcidb) if args.kcidb else Path(top.environment["run_dir"]) / rundir.CI_KCIDB
    kci.write_text(json.dumps(junit.kcidb(
        cases, origin="powercut", run=top.uuid,
        missing=[f"powercut.ci.step.{i}" for i in expect if i not in ran]), indent=1))
    quiet_words = f"; {len(quiet)} positive controls quiet" if quiet else ""
    print(f"verdict: {'REGRESSION' if regressed else 'no regression'} "
          f"({verdict_words(comparison)}{quiet_words}); summary: {summary}; "
          f"junit: {junit_path}; kcidb: {kci}")
    return 1 if regressed else 0


def rerun(number: int, finding: FindingChange, times: int, kernel: Sequence[str],
          powercut: object, db: Path | None = None) -> Rerun:
    """Check a finding with states failing anew again ``times`` times on the candidate;
    with ``db`` (the candidate's store) each check is kept there as a rerun."""
    rep = finding.finding.representative
    state = rep if finding.status is StateStatus.NEW or not finding.new else finding.new[0]
    if times == 0 or not state.reproducer:
        return Rerun(number, finding, state, 0, 0)
    words = shlex.split(state.reproducer)  # powercut recheck RUN_DIR KEY
    assert callable(powercut)
    keep = ["--db", str(db)] if db is not None else []
    failed = sum(1 for _ in range(times)
                 if powercut(["recheck", *words[2:], *keep, *kernel], nested=True) == 1)
    return Rerun(number, finding, state, times, failed)


def finding_labels(c: Comparison, reruns: Sequence[Rerun]) -> dict[tuple[str, str, str], str]:
    """Per crash state of B (target, case, key): "finding N" and, where it was checked
    again, "fails f/t"."""
    rates = {id(r.finding): r.label for r in reruns}
    out = {}
    for n, f in enumerate(c.findings, 1):
        if f.status is StateStatus.GONE:
            continue
        label = f"finding {n}" + (f", {rates[id(f)]}" if id(f) in rates else "")
        for s in f.finding.states:
            out[(s.target, s.case, s.key)] = label
    return out


def state_key(s: StateChange) -> tuple[str, str, str]:
    """The state a StateChange shows, as finding_labels names it."""
    return (s.target, s.case, s.state)


def markdown(c: Comparison, reruns: Sequence[Rerun], quiet: Sequence[dict[str, object]],
             regressed: bool, skipped: Sequence[dict[str, object]] = ()) -> str:
    env_b = c.b.environment().get("guest", {})
    env_a = c.a.environment().get("guest", {})
    lines = [f"# powercut ci: {'regression' if regressed else 'no regression'}", "",
             f"- candidate: run {c.b.top.id}, kernel {env_b.get('kernel', '?')}, "
             f"{checked(c.b)}; {c.b.top.environment.get('run_dir', '?')}",
             f"- baseline: run {c.a.top.id}, kernel {env_a.get('kernel', '?')}, "
             f"{checked(c.a)}; {c.a.top.environment.get('run_dir', '?')}",
             f"- significant: {c.rule.describe()}", ""]
    lines += [f"Verdict: {'regression' if regressed else 'no regression'} "
              f"({verdict_words(c)}{f'; {len(quiet)} positive controls quiet' if quiet else ''})",
              ""]
    regressing = [(n, f) for n, f in enumerate(c.findings, 1) if f in c.regressing_findings]
    if regressing:
        rates = {id(r.finding): r.label for r in reruns}
        lines += ["## New findings, and findings failing in more states", "",
                  "| # | finding | target | status | states (new) | fails | example | reproducer |",
                  "|---|---|---|---|---|---|---|---|"]
        for n, f in regressing:
            rep = f.finding.representative
            lines.append(f"| {n} | {f.finding.words} | {f.target} | {f.status.value} | "
                         f"{f.states_b} ({f.new_states}) | "
                         f"{rates.get(id(f), 'not checked again')} | "
                         f"{rep.case} {rep.key}: {rep.explanation[:200]} | `{rep.reproducer}` |")
        lines.append("")
    if c.new_states:
        lines += ["## New failing crash states", "",
                  "| target | case | mark | variant | outcome | finding | reproducer |",
                  "|---|---|---|---|---|---|---|"]
        labels = finding_labels(c, reruns)
        for s in c.new_states:
            lines.append(f"| {s.target} | {s.case} | {s.last_mark} | {s.variant} | "
                         f"{s.outcome_b} | {labels.get(state_key(s), '-')} | "
                         f"`{s.reproducer}` |")
        lines.append("")
    changed = [m for m in c.metrics if m.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT)]
    if changed:
        lines += ["## Metrics that changed", "", "| group | target | metric | A | B | change |"
                  " verdict |", "|---|---|---|---|---|---|---|"]
        for m in changed:
            lines.append(f"| {m.group} | {m.target} | {m.metric} | {m.a.describe(m.unit)} | "
                         f"{m.b.describe(m.unit)} | {100 * (m.change or 0):+.1f}% | "
                         f"{m.verdict.value} |")
        lines.append("")
    if quiet:
        lines += ["## Positive controls that stopped firing", ""]
        lines += [f"- step {q['step']}: `powercut {shlex.join(map(str, q['argv']))}`"  # type: ignore[call-overload]
                  for q in quiet]
        lines.append("")
    if skipped:
        lines += ["## Steps skipped on the candidate", ""]
        lines += [f"- step {q['step']}: `powercut {shlex.join(map(str, q['argv']))}`"  # type: ignore[call-overload]
                  f": {q.get('skipped', 'its target cannot run here')}" for q in skipped]
        lines.append("")
    counts = c.to_dict()["counts"]
    lines.append("Counts: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counts.items()))
    return "\n".join(lines) + "\n"


def checked(r: Results) -> str:
    """What a side of the comparison holds: crash states and power cuts by label, bench
    repetitions."""
    def counted(frame: pd.DataFrame) -> str:
        if not len(frame):
            return ""
        counts = r.labels(frame).value_counts()
        return " (" + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ")"

    reps = r.bench.groupby(["target", "workload"])["repetition"].nunique().sum() if len(r.bench) else 0
    return (f"{len(r.checks)} crash states{counted(r.checks)}, {len(r.recoveries)} power cuts"
            f"{counted(r.recoveries)}, {reps} benchmark repetitions")


def junit_cases(c: Comparison, reruns: Sequence[Rerun], quiet: Sequence[dict[str, object]],
                skipped: Sequence[dict[str, object]] = ()) -> list[junit.Case]:
    cases = []
    for m in c.metrics:
        text = (f"A {m.a.describe(m.unit)}, B {m.b.describe(m.unit)}, "
                f"change {'-' if m.change is None else f'{100 * m.change:+.1f}%'}: "
                f"{m.verdict.value}")
        cases.append(junit.Case(f"{m.target}: {m.metric}", f"powercut.ci.{m.group}", 0.0,
                                text if m.verdict is Verdict.REGRESSION else None, text))
    labels = finding_labels(c, reruns)
    for s in c.states:
        failure = None
        if s.status.value == "new":
            failure = (f"{s.outcome_b}, new in the candidate; "
                       f"{labels.get(state_key(s), 'no finding')}; reproduce: {s.reproducer}")
        cases.append(junit.Case(f"{s.target} {s.case} {s.last_mark} {s.variant}",
                                "powercut.ci.crash", 0.0, failure,
                                f"{s.status.value}: {s.findings}",
                                skipped=f"known: {', '.join(s.known)}"
                                if s.status.value == "known" else None))
    for q in quiet:
        cases.append(junit.Case(f"control step {q['step']}", "powercut.ci.controls", 0.0,
                                "the positive control found nothing on the candidate"))
    for q in skipped:
        cases.append(junit.Case(f"step {q['step']}", "powercut.ci.steps", 0.0,
                                skipped=str(q.get("skipped", "its target cannot run here"))))
    return cases


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ci", help="run a study on a kernel and judge it against a baseline",
                       description=DESCRIPTION, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", metavar="RUN|DB",
                   help="a run in --db (id, uuid or 'latest'), or a database file whose latest "
                        "run is the baseline")
    p.add_argument("--baseline-kernel-release", metavar="RELEASE",
                   help="run the study on this Debian kernel first, as the baseline (installed "
                        "in /boot or fetched with 'powercut kernels fetch')")
    p.add_argument("--baseline-kernel", metavar="BZIMAGE",
                   help="run the study on this kernel image first, as the baseline")
    p.add_argument("--baseline-modules", metavar="DIR", help="modules for --baseline-kernel")
    p.add_argument("--kernel-source", metavar="SERIES",
                   help="judge a patch: build Debian's linux-source-SERIES (e.g. 7.3; fetched "
                        "into the kernel cache when missing) as shipped, as the baseline, and "
                        "with --patch, as the candidate (the first build about 35 minutes on 2 "
                        "cores, then a minute or two a patch)")
    p.add_argument("--patch", metavar="FILE",
                   help="with --kernel-source: the patch to judge (patch -p1 in the source)")
    p.add_argument("--study", default="ci", help="built-in study or TOML file (default: ci)")
    p.add_argument("--report", action="append", default=[], metavar="DIR",
                   help="a bug report folder (powercut export --report): run its fstests "
                        "tests on the baseline and the candidate kernel too; repeatable")
    p.add_argument("--xfstests", metavar="DIR",
                   help="the built fstests checkout --report's tests run from (default: "
                        "POWERCUT_XFSTESTS)")
    p.add_argument("--targets-file", metavar="FILE",
                   help="your own targets for the candidate's study (and the baseline's, "
                        "unless --baseline-targets-file): the same names defined otherwise "
                        "judge a configuration instead of a kernel, e.g. barrier=0")
    p.add_argument("--baseline-targets-file", metavar="FILE",
                   help="your own targets for the baseline kernel's run of the study")
    p.add_argument("--reruns", type=int, default=3, metavar="N",
                   help="check each finding with new failing states again N times on the "
                        "candidate to call it reliable or flaky (default: 3)")
    p.add_argument("--max-reruns", type=int, default=10, metavar="N",
                   help="rerun at most N findings (default: 10)")
    add_rule_options(p)
    p.add_argument("--db", metavar="PATH",
                   help="results database the runs go to (default: ci.sqlite in the --results "
                        "directory)")
    p.add_argument("--results", default="results", metavar="DIR",
                   help="where run directories go (default: ./results)")
    p.add_argument("--junit", metavar="PATH", help="JUnit file (default: ci.xml in the "
                                                   "candidate's study run directory)")
    p.add_argument("--summary", metavar="PATH", help="markdown summary (default: ci.md there)")
    p.add_argument("--kcidb", metavar="PATH",
                   help="the verdicts in KernelCI's KCIDB JSON, PASS, FAIL, ERROR, MISS or SKIP "
                        "per test (default: ci-kcidb.json there)")
    add_machine_options(p)
    p.set_defaults(func=cmd_ci, db_name=rundir.CI_DB)
