"""Two runs (or study runs) side by side: which metrics changed significantly, which crash
states fail anew. Pure functions over framework.report.results.Results; no printing.

A metric's change is significant, by default, when the two confidence intervals of the
mean do not overlap and the relative difference is at least a threshold (10%): the rule
seed 002 uses for its benchmark figures. ``test="welch"`` asks Welch's t-test instead
(p below 1 - level), with the same threshold on the size of the change. A significant
change for the worse is a regression.

Crash states are matched by (target, case, seed, last mark, variant): the index of a
log entry depends on the recording, the marks do not. A key fails when any of its
checked states fails; a failing key whose states known behaviour explains is known.
Findings (framework.report.findings) are matched by target and signature: new in B,
gone in B, still there, or known; a finding is said first, its states second.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import pandas as pd

from crashcases.group import Signature
from framework.core.errors import ConfigError
from framework.core.stats import StatsError, overhead, summarize
from framework.core.stats import compare as welch
from framework.report.findings import FailingState, TargetFinding, findings_of
from framework.report.results import SETUP_METRICS, BenchPlan, Results, primary_metric


class Verdict(StrEnum):
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    NO_CHANGE = "no change"
    TOO_FEW = "too few samples"


class StateStatus(StrEnum):
    NEW = "new"  # fails in B, passed or was not checked in A
    GONE = "gone"  # failed in A, passes in B
    STILL = "still failing"
    KNOWN = "known"  # fails in B, explained by known behaviour


@dataclass(frozen=True, slots=True)
class Side:
    """One run's sample of a metric: its size, mean and interval half width."""

    n: int
    mean: float | None
    half_width: float | None
    #: An asymmetric interval (a ratio's, by Fieller): its bounds; half_width is then
    #: half its length.
    low: float | None = None
    high: float | None = None

    @property
    def bounds(self) -> tuple[float, float] | None:
        if self.low is not None and self.high is not None:
            return self.low, self.high
        if self.mean is None or self.half_width is None:
            return None
        return self.mean - self.half_width, self.mean + self.half_width

    def describe(self, unit: str) -> str:
        if self.mean is None:
            return f"n={self.n}"
        if self.low is not None and self.high is not None:
            interval = f" [{self.low:.4g}, {self.high:.4g}]"
        else:
            interval = f" ± {self.half_width:.4g}" if self.half_width is not None else ""
        return f"{self.mean:.4g}{interval} {unit} (n={self.n})".replace("  ", " ")


@dataclass(frozen=True, slots=True)
class MetricChange:
    group: str  # "bench fsmark" or "recovery"
    target: str
    metric: str
    unit: str
    higher_is_better: bool
    a: Side
    b: Side
    change: float | None  # (mean B - mean A) / mean A
    verdict: Verdict
    p_value: float | None = None  # Welch's, when that test was asked for

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "target": self.target, "metric": self.metric,
                "unit": self.unit, "higher_is_better": self.higher_is_better,
                "a": {"n": self.a.n, "mean": self.a.mean, "half_width": self.a.half_width},
                "b": {"n": self.b.n, "mean": self.b.mean, "half_width": self.b.half_width},
                "change": self.change, "verdict": self.verdict.value, "p_value": self.p_value}


@dataclass(frozen=True, slots=True)
class StateChange:
    target: str
    case: str
    seed: int
    last_mark: str | None
    variant: str
    status: StateStatus
    outcome_a: str | None  # None: not checked in A
    outcome_b: str | None
    reproducer: str | None  # B's (A's for a state gone in B)
    findings: str = ""
    known: tuple[str, ...] = ()
    state: str = ""  # the key of the state shown (B's; A's for a state gone in B)

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "case": self.case, "seed": self.seed,
                "last_mark": self.last_mark, "variant": self.variant,
                "status": self.status.value, "outcome_a": self.outcome_a,
                "outcome_b": self.outcome_b, "reproducer": self.reproducer,
                "findings": self.findings, "known": list(self.known), "state": self.state}


@dataclass(frozen=True, slots=True)
class FindingChange:
    """One finding in A, B or both (by target and signature); ``finding`` is B's (A's for
    a finding gone in B); ``new``: its states in B that fail anew there."""

    status: StateStatus
    finding: TargetFinding
    states_a: int
    states_b: int
    new: tuple[FailingState, ...] = ()

    @property
    def new_states(self) -> int:
        return len(self.new)

    @property
    def target(self) -> str:
        return self.finding.target

    @property
    def signature(self) -> Signature:
        return self.finding.signature

    def to_dict(self) -> dict[str, Any]:
        return {**self.finding.to_dict(), "status": self.status.value,
                "states_a": self.states_a, "states_b": self.states_b,
                "new_states": self.new_states}


@dataclass(frozen=True, slots=True)
class CutChange:
    target: str
    trials_a: int
    failing_a: int
    trials_b: int
    failing_b: int
    known_b: int

    @property
    def new_failures(self) -> bool:
        return self.failing_b > 0 and self.failing_a == 0

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "trials_a": self.trials_a, "failing_a": self.failing_a,
                "trials_b": self.trials_b, "failing_b": self.failing_b,
                "known_b": self.known_b, "new_failures": self.new_failures}


BENCH_VIEWS = ("both", "absolute", "relative")


@dataclass(frozen=True, slots=True)
class Rule:
    test: str = "intervals"  # or "welch"
    rel_threshold: float = 0.10
    level: float = 0.95
    #: Which benchmark figures are judged: each target's own (absolute), each target's
    #: ratio to its run's baseline target (relative: what the machine's speed on the
    #: day cancels out of), or both.
    bench: str = "both"

    def __post_init__(self) -> None:
        if self.test not in ("intervals", "welch"):
            raise ConfigError(f"--test {self.test!r}: expected intervals or welch")
        if self.bench not in BENCH_VIEWS:
            raise ConfigError(f"--bench {self.bench!r}: expected one of {', '.join(BENCH_VIEWS)}")
        if not 0 <= self.rel_threshold < 10:
            raise ConfigError(f"--rel-threshold {self.rel_threshold}: expected a fraction "
                              "such as 0.10 for 10%")
        if not 0 < self.level < 1:
            raise ConfigError(f"--level {self.level}: expected a confidence level "
                              "between 0 and 1, such as 0.95")

    def describe(self) -> str:
        pct = f"{100 * self.rel_threshold:g}%"
        if self.test == "welch":
            return (f"Welch's t-test at p < {1 - self.level:g} and a change of at least "
                    f"{pct}")
        return (f"{100 * self.level:g}% intervals that do not overlap and a change of at "
                f"least {pct}")


@dataclass(frozen=True)
class Comparison:
    a: Results
    b: Results
    rule: Rule
    metrics: tuple[MetricChange, ...] = ()
    states: tuple[StateChange, ...] = ()
    cuts: tuple[CutChange, ...] = field(default_factory=tuple)
    #: The trade-off figure's configurations in both runs (see trade_off_moves).
    moves: tuple[TradeOffMove, ...] = field(default_factory=tuple)
    findings: tuple[FindingChange, ...] = field(default_factory=tuple)

    @property
    def regressions(self) -> list[MetricChange]:
        return [m for m in self.metrics if m.verdict is Verdict.REGRESSION]

    @property
    def new_states(self) -> list[StateChange]:
        return [s for s in self.states if s.status is StateStatus.NEW]

    @property
    def new_findings(self) -> list[FindingChange]:
        return [f for f in self.findings if f.status is StateStatus.NEW]

    @property
    def regressing_findings(self) -> list[FindingChange]:
        """New findings, and findings A had with states failing anew in B (what ci checks
        again)."""
        return [f for f in self.findings if f.status is StateStatus.NEW
                or (f.status is StateStatus.STILL and f.new_states)]

    @property
    def new_cut_failures(self) -> list[CutChange]:
        return [c for c in self.cuts if c.new_failures]

    @property
    def regressed(self) -> bool:
        return bool(self.regressions or self.new_states or self.new_findings
                    or self.new_cut_failures)

    def to_dict(self) -> dict[str, Any]:
        def run(r: Results) -> dict[str, Any]:
            return {"id": r.top.id, "uuid": r.top.uuid, "kind": r.top.kind, "study": r.study,
                    "kernel": r.environment().get("guest", {}).get("kernel")}

        return {"a": run(self.a), "b": run(self.b), "rule": self.rule.describe(),
                "regressed": self.regressed,
                "counts": {"regressions": len(self.regressions),
                           **{f"{st.value.replace(' ', '_')}_findings": sum(
                               1 for f in self.findings if f.status is st)
                              for st in StateStatus},
                           "improvements": sum(1 for m in self.metrics
                                               if m.verdict is Verdict.IMPROVEMENT),
                           "new_states": len(self.new_states),
                           "gone_states": sum(1 for s in self.states
                                              if s.status is StateStatus.GONE),
                           "known_states": sum(1 for s in self.states
                                               if s.status is StateStatus.KNOWN),
                           "new_cut_failures": len(self.new_cut_failures)},
                "metrics": [m.to_dict() for m in self.metrics],
                "findings": [f.to_dict() for f in self.findings],
                "states": [s.to_dict() for s in self.states],
                "cuts": [c.to_dict() for c in self.cuts],
                "trade_off": [m.to_dict() for m in self.moves]}


def compare_results(a: Results, b: Results, rule: Rule | None = None, *,
                    force: bool = False) -> Comparison:
    """B against A. ConfigError when they ran different studies (unless ``force``)."""
    rule = rule or Rule()
    if not force and (a.top.kind, a.study) != (b.top.kind, b.study):
        raise ConfigError(
            f"run {a.top.id} ({a.top.kind or 'run'} {a.study!r}) and run {b.top.id} "
            f"({b.top.kind or 'run'} {b.study!r}) ran different things; --force compares "
            "what they have in common")
    if not force and (differ := _sizes_differ(a, b)):
        raise ConfigError(
            f"run {a.top.id} and run {b.top.id} ran {differ}: their figures are not comparable; "
            "--force compares them anyway")
    metrics = [*(_bench_changes(a, b, rule) if rule.bench != "relative" else ()),
               *(_relative_changes(a, b, rule) if rule.bench != "absolute" else ()),
               *_recovery_changes(a, b, rule)]
    moves = tuple(trade_off_moves(a, b)) if not (a.recoveries.empty or b.recoveries.empty
                                                  or a.bench.empty or b.bench.empty) else ()
    states = tuple(_state_changes(a, b))
    return Comparison(a, b, rule, tuple(metrics), states, tuple(_cut_changes(a, b)), moves,
                      tuple(_finding_changes(a, b, states)))


# ---- metrics -------------------------------------------------------------------------


def _sizes_differ(a: Results, b: Results) -> str:
    """The first workload both ran with different work a repetition (scale, --duration), in
    words; "" when none did. A plan that did not record its scale matches any."""
    def sizes(r: Results) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for plan in r.benches:
            if plan.scale:
                out.setdefault(plan.workload, set()).add(plan.size())
        return out

    sa, sb = sizes(a), sizes(b)
    for workload in sorted(set(sa) & set(sb)):
        if sa[workload] != sb[workload]:
            return (f"{workload} at {' and '.join(sorted(sa[workload]))} against "
                    f"{' and '.join(sorted(sb[workload]))}")
    return ""


def judge(values_a: Sequence[float], values_b: Sequence[float], *, higher_is_better: bool,
          rule: Rule) -> tuple[Side, Side, float | None, Verdict, float | None]:
    """Both sides, the relative change and the verdict on one metric."""
    side_a, side_b = _side(values_a, rule.level), _side(values_b, rule.level)
    if side_a.mean is None or side_b.mean is None:
        return side_a, side_b, None, Verdict.TOO_FEW, None
    change = ((side_b.mean - side_a.mean) / abs(side_a.mean)) if side_a.mean else (
        0.0 if side_b.mean == side_a.mean else math.copysign(math.inf, side_b.mean))
    if side_a.n < 2 or side_b.n < 2:
        return side_a, side_b, change, Verdict.TOO_FEW, None
    p_value = None
    if rule.test == "welch":
        try:
            p_value = welch(list(values_b), list(values_a), rule.level).p_value
        except StatsError:
            return side_a, side_b, change, Verdict.TOO_FEW, None
        differs = p_value < 1 - rule.level
    else:
        differs = _apart(side_a, side_b)
    return side_a, side_b, change, _verdict(side_a, side_b, change, differs, higher_is_better,
                                            rule), p_value


def _apart(side_a: Side, side_b: Side) -> bool:
    """Whether the two intervals do not overlap."""
    ba, bb = side_a.bounds, side_b.bounds
    assert ba is not None and bb is not None
    return ba[1] < bb[0] or bb[1] < ba[0]


def _verdict(side_a: Side, side_b: Side, change: float, differs: bool, higher_is_better: bool,
             rule: Rule) -> Verdict:
    assert side_a.mean is not None and side_b.mean is not None
    if not differs or abs(change) < rule.rel_threshold:
        return Verdict.NO_CHANGE
    worse = side_b.mean < side_a.mean if higher_is_better else side_b.mean > side_a.mean
    return Verdict.REGRESSION if worse else Verdict.IMPROVEMENT


def _side(values: Sequence[float], level: float) -> Side:
    xs = [float(v) for v in values if v is not None and not math.isnan(v)]
    if not xs:
        return Side(0, None, None)
    if len(xs) < 2:
        return Side(1, xs[0], None)
    s = summarize(xs)
    ci = s.ci(level)
    return Side(s.n, s.mean, (ci.high - ci.low) / 2)


def _bench_changes(a: Results, b: Results, rule: Rule) -> Iterable[MetricChange]:
    def groups(r: Results) -> dict[tuple[str, str, str], tuple[str, bool, list[float]]]:
        out: dict[tuple[str, str, str], tuple[str, bool, list[float]]] = {}
        for row in _records(r.bench):
            value = row["value"]
            if row["metric"] in SETUP_METRICS or value is None or pd.isna(value):
                continue
            key = (str(row["workload"]), str(row["target"]), str(row["metric"]))
            out.setdefault(key, (str(row["unit"]), bool(row["higher_is_better"]), []))[2].append(
                float(value))
        return out

    ga, gb = groups(a), groups(b)
    for key in sorted(set(ga) & set(gb)):
        workload, target, metric = key
        unit, hib, values_a = ga[key]
        side_a, side_b, change, verdict, p = judge(values_a, gb[key][2],
                                                   higher_is_better=hib, rule=rule)
        yield MetricChange(f"bench {workload}", target, metric, unit, hib, side_a, side_b,
                           change, verdict, p)


def _ratio_side(r: Results, plan: BenchPlan, target: str, metric: str,
                rule: Rule) -> tuple[Side, bool]:
    """``target``'s mean over the baseline's, in the run of ``plan``, with Fieller's interval
    (framework.core.stats.overhead); and whether higher is better."""
    rows = r.bench[(r.bench["run_id"] == plan.run_id) & (r.bench["metric"] == metric)]

    def values(t: str) -> list[float]:
        return [float(v) for v in rows[rows["target"] == t]["value"] if not pd.isna(v)]

    xt, xb = values(target), values(plan.baseline)
    hib = bool(rows["higher_is_better"].iloc[0]) if len(rows) else True
    n = min(len(xt), len(xb))
    if n < 2:
        return Side(n, None, None), hib
    mean_b = sum(xb) / len(xb)
    if mean_b == 0:
        return Side(n, None, None), hib  # no ratio to a baseline that measured nothing
    try:
        o = overhead(xt, xb, rule.level, higher_is_better=hib)
    except StatsError:  # a baseline mean not told apart from 0: the interval is unbounded
        return Side(n, sum(xt) / len(xt) / mean_b, None), hib
    return Side(n, o.ratio, (o.ratio_ci.high - o.ratio_ci.low) / 2, o.ratio_ci.low,
                o.ratio_ci.high), hib


def _relative_changes(a: Results, b: Results, rule: Rule) -> Iterable[MetricChange]:
    """Each target's primary metric as a ratio to its run's baseline target (the overhead
    the report draws), A against B: the machine's speed on the day cancels out of it.
    Judged by the intervals rule whatever ``rule.test`` says: Welch's test needs samples,
    a ratio of means has none."""
    def plans(r: Results) -> dict[tuple[str, str, str], BenchPlan]:
        out = {}
        for plan in r.benches:
            metric = primary_metric(r.bench, plan)
            if metric:
                out[(plan.workload, plan.baseline, metric)] = plan
        return out

    pa, pb = plans(a), plans(b)
    for key in sorted(set(pa) & set(pb)):
        workload, baseline, metric = key
        targets = [t for t in pa[key].targets if t in pb[key].targets and t != baseline]
        for target in targets:
            side_a, hib = _ratio_side(a, pa[key], target, metric, rule)
            side_b, _ = _ratio_side(b, pb[key], target, metric, rule)
            if side_a.mean is None or side_b.mean is None:
                change, verdict = None, Verdict.TOO_FEW
            else:
                change = (side_b.mean - side_a.mean) / abs(side_a.mean)
                if side_a.bounds is None or side_b.bounds is None:
                    verdict = Verdict.TOO_FEW
                else:
                    verdict = _verdict(side_a, side_b, change, _apart(side_a, side_b), hib, rule)
            yield MetricChange(f"bench {workload}", target, f"{metric} / {baseline}", "x", hib,
                               side_a, side_b, change, verdict)


def _recovery_changes(a: Results, b: Results, rule: Rule) -> Iterable[MetricChange]:
    targets = sorted(set(a.recoveries["target"]) & set(b.recoveries["target"]))
    for target in targets:
        for metric in ("recovery_s", "mount_s", "fsck_s"):
            def values(r: Results, t: str = target, m: str = metric) -> list[float]:
                rows = r.recoveries[r.recoveries["target"] == t][m]
                return [float(v) for v in rows if v is not None and not pd.isna(v)]

            side_a, side_b, change, verdict, p = judge(values(a), values(b),
                                                       higher_is_better=False, rule=rule)
            yield MetricChange("recovery", target, metric, "s", False, side_a, side_b,
                               change, verdict, p)


# ---- crash states and power cuts ---------------------------------------------------------


StateKey = tuple[str, str, int, str | None, str]


def _states(r: Results) -> dict[StateKey, dict[str, Any]]:
    """Per key: whether it fails, whether every failing state is known, and an example."""
    out: dict[StateKey, dict[str, Any]] = {}
    for row in _records(r.checks):
        key: StateKey = (str(row["target"]), str(row["case"]), int(row["seed"]),
                         None if row["last_mark"] is None else str(row["last_mark"]),
                         str(row["variant"]))
        failing = r.fails(str(row["outcome"]), str(row["target"]))
        known = tuple(row["known"]) if failing and row["known"] is not None else ()
        entry = out.setdefault(key, {"fails": False, "unknown": False,
                                     "outcome": row["outcome"], "reproducer": row["reproducer"],
                                     "findings": "", "known": (), "state": row["state"]})
        example = {"outcome": row["outcome"], "reproducer": row["reproducer"],
                   "findings": _findings_text(row["findings"]), "state": row["state"]}
        if failing and not entry["fails"]:
            entry.update(fails=True, **example)
        if failing:
            entry["known"] = tuple(dict.fromkeys((*entry["known"], *known)))
            if not known:
                entry["unknown"] = True
                entry.update(example)
    return out


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as plain dicts (a NaN left by pandas in an object column read as None)."""
    return [{str(k): (None if isinstance(v, float) and math.isnan(v) else v)
             for k, v in row.items()} for row in frame.to_dict("records")]


def _findings_text(findings: Any) -> str:
    if not findings:
        return ""
    parts = []
    for f in findings[:3]:
        if isinstance(f, dict):
            parts.append(f"{f.get('kind', '?')}: {f.get('path', '?')}: {f.get('detail', '')}")
        else:
            parts.append(str(f))
    more = f" (+{len(findings) - 3} more)" if len(findings) > 3 else ""
    return "; ".join(parts)[:400] + more


def _state_changes(a: Results, b: Results) -> Iterable[StateChange]:
    sa, sb = _states(a), _states(b)
    for key in sorted(set(sa) | set(sb), key=lambda k: tuple(str(x) for x in k)):
        ea, eb = sa.get(key), sb.get(key)
        fails_a = bool(ea and ea["fails"])
        fails_b = bool(eb and eb["fails"])
        if not (fails_a or fails_b):
            continue
        if fails_b and eb is not None and not eb["unknown"]:
            status = StateStatus.KNOWN
        elif fails_b:
            status = StateStatus.STILL if fails_a else StateStatus.NEW
        else:
            status = StateStatus.GONE
        shown = eb if fails_b else ea
        assert shown is not None
        yield StateChange(*key, status=status,
                          outcome_a=None if ea is None else str(ea["outcome"]),
                          outcome_b=None if eb is None else str(eb["outcome"]),
                          reproducer=shown["reproducer"], findings=shown["findings"],
                          known=tuple(eb["known"]) if eb is not None else (),
                          state=str(shown["state"]))


def _finding_changes(a: Results, b: Results,
                     states: Sequence[StateChange]) -> Iterable[FindingChange]:
    """B's findings, new, still there or known, then A's that are gone; each matched by
    target and signature."""
    fa = {(f.target, f.signature): f for f in findings_of(a)}
    fb = findings_of(b)
    new = {(s.target, s.case, s.seed, s.last_mark, s.variant) for s in states
           if s.status is StateStatus.NEW}

    def is_new(s: FailingState) -> bool:
        return (s.target, s.case, s.seed, s.last_mark, s.variant) in new

    for f in fb:
        before = fa.get((f.target, f.signature))
        status = (StateStatus.KNOWN if f.known else
                  StateStatus.STILL if before is not None else StateStatus.NEW)
        yield FindingChange(status, f, len(before.states) if before else 0, len(f.states),
                            tuple(s for s in f.states if is_new(s)))
    seen = {(f.target, f.signature) for f in fb}
    for key, f in fa.items():
        if key not in seen:
            yield FindingChange(StateStatus.GONE, f, len(f.states), 0)


def _cut_changes(a: Results, b: Results) -> Iterable[CutChange]:
    for target in sorted(set(a.recoveries["target"]) | set(b.recoveries["target"])):
        def counts(r: Results, t: str = target) -> tuple[int, int, int]:
            rows = r.recoveries[r.recoveries["target"] == t]
            failing = r.failing_recoveries()
            known = int((r.labels(rows) == "known").sum())
            return len(rows), int((failing["target"] == t).sum()), known

        ta, fa, _ = counts(a)
        tb, fb, kb = counts(b)
        yield CutChange(target, ta, fa, tb, fb, kb)


# ---- the trade-off: how the points moved ------------------------------------------------


@dataclass(frozen=True, slots=True)
class TradeOffMove:
    """One configuration on one device profile in both runs: where it was, where it is."""

    profile: str
    name: str
    a: tuple[float, float]  # (overhead %, recovery p90 s) in A
    b: tuple[float, float]
    front_a: bool
    front_b: bool

    @property
    def left_front(self) -> bool:
        return self.front_a and not self.front_b

    @property
    def joined_front(self) -> bool:
        return self.front_b and not self.front_a

    def to_dict(self) -> dict[str, Any]:
        return {"profile": self.profile, "name": self.name, "a": list(self.a), "b": list(self.b),
                "front_a": self.front_a, "front_b": self.front_b,
                "left_front": self.left_front, "joined_front": self.joined_front}


def trade_off_moves(a: Results, b: Results) -> list[TradeOffMove]:
    """The configurations on the trade-off figure of both runs, matched by profile and
    name, with their front membership before and after."""
    from framework.report.html import build

    def points(r: Results) -> dict[tuple[str, str], dict[str, Any]]:
        data = build(r, draw=False).data.get("trade_off") or {}
        return {(panel["profile"], p["name"]): p for panel in data.get("panels", [])
                for p in panel["points"]}

    pa, pb = points(a), points(b)
    moves = []
    for (profile, name), p in pa.items():
        q = pb.get((profile, name))
        if q is not None:
            moves.append(TradeOffMove(profile, name, (p["overhead_pct"], p["recovery_p90_s"]),
                                      (q["overhead_pct"], q["recovery_p90_s"]),
                                      bool(p["front"]), bool(q["front"])))
    return moves
