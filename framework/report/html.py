"""The report of a run or study: its data (also the --json output), its figures, its HTML.

The HTML is one self-contained file: figures are inline PNG data URIs, the
style is inline, nothing is fetched from anywhere, so it opens from disk and
can be attached to a CI job or a mail.
"""

from __future__ import annotations

import base64
import math
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from importlib import resources
from typing import Any

import jinja2

from crashcases.cut.summary import percentile
from framework.bench.design import one_factor_design
from framework.core.stats import StatsError, overhead_by_rep, quantile_interval, summarize
from framework.report import figures, tradeoff
from framework.report.findings import (
    failing_states,
    findings_of,
    rate_of,
    rerun_rate,
    summary_words,
)
from framework.report.results import Results, controls, primary_metric

OUTCOME_ORDER = ("ok", "recovered", "known", "data-loss", "corrupt", "unmountable", "hang")


@dataclass
class Report:
    """What the report says, as JSON-ready data, and its figures (PNG bytes by name)."""

    data: dict[str, Any]
    figures: dict[str, bytes] = field(default_factory=dict)
    draw: bool = True  # False: the data only (compare reads it), no figure rendered

    def figure(self, name: str, render: Callable[[], bytes]) -> None:
        if self.draw:
            self.figures[name] = render()


def _label(results: Results, target: str) -> str:
    """The target's name, with its journal placement when the journal has its own disk."""
    config = results.targets.get(target, {})
    journal = config.get("journal")
    return f"{target} (journal: {journal})" if journal == "external" else target


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, dict):
        for k in sorted(value):
            _flatten(f"{prefix}.{k}" if prefix else str(k), value[k], out)
    elif isinstance(value, list):
        out[prefix] = ", ".join(map(str, value)) if value else "-"
    else:
        out[prefix] = "-" if value is None else str(value)


def _spread(values: list[float]) -> dict[str, float] | None:
    xs = sorted(v for v in values if v is not None and not math.isnan(v))
    if not xs:
        return None
    return {"n": len(xs), "median": statistics.median(xs), "p90": percentile(xs, 90),
            "max": xs[-1]}


def crash_verdicts(r: Results) -> dict[str, str]:
    """Per target: ok (nothing failing), known (every failure explained) or fail; positive
    controls left out."""
    out: dict[str, str] = {}
    checks = r.checks[~r.checks["run_id"].isin(controls(r))]
    for target in dict.fromkeys(checks["target"]):
        rows = checks[checks["target"] == target]
        failing = [(o, k) for o, k in zip(rows["outcome"], rows["known"]) if r.fails(o, target)]
        out[target] = ("ok" if not failing else
                       "known" if all(k is not None for _, k in failing) else "fail")
    return out


def build(r: Results, *, draw: bool = True) -> Report:
    """The report's data and, unless draw is False, its figures."""
    report = Report({"run": {"id": r.top.id, "uuid": r.top.uuid, "kind": r.top.kind or "run",
                             "study": r.study, "status": r.top.status.value,
                             "started_at": r.top.started_at, "finished_at": r.top.finished_at,
                             "command_line": r.top.command_line,
                             "steps": [{"id": x.id, "kind": x.kind, "title": x.study,
                                        "status": x.status.value} for x in r.runs]},
                     "missing": []}, draw=draw)
    _crash(r, report)
    _cut(r, report)
    _bench(r, report)
    _trade_off(r, report)
    env: dict[str, str] = {}
    _flatten("", r.environment(), env)
    report.data["environment"] = env
    return report


def _crash(r: Results, report: Report) -> None:
    c = r.checks
    if c.empty:
        report.data["missing"].append("crash states: this run checked none (no crash step)")
        report.data["crash"] = None
        return
    fired: Counter[str] = Counter()
    control_runs = controls(r)
    for row in r.failing_checks().to_dict("records"):
        if row["run_id"] in control_runs:
            fired[f"{row['target']} {row['case']}"] += 1
    # Findings first, states second: each failing state (known ones apart) names its finding.
    runs = [x.id for x in r.runs if x.id not in control_runs]
    found = findings_of(r, runs)
    # States against findings per target and case (a finding may span cases).
    every = findings_of(r) if control_runs else found
    matrix = []
    for (target, case), rows in c.groupby(["target", "case"], sort=False):
        counts = Counter(r.labels(rows))
        # Failing and not known: fsck's repairs count for a journalled target only, so
        # whether "recovered" fails is the target's to say, never the outcome's alone.
        recovered_fails = r.fails("recovered", str(target))
        unexplained = sum(n for o, n in counts.items() if o != "known" and r.fails(o, str(target)))
        matrix.append({"target": target, "case": case, "states": len(rows),
                       "counts": {o: counts.get(o, 0) for o in OUTCOME_ORDER},
                       "failing": unexplained, "recovered_fails": recovered_fails,
                       "findings": sum(1 for f in every if f.target == target
                                       and any(s.case == case for s in f.states))})
    number = {s.id: n for n, f in enumerate(found, 1) for s in f.states}
    failing: list[dict[str, Any]] = []
    for s in failing_states(r, runs):
        if s.known is not None:
            continue
        rate = rate_of(r, s)
        failing.append({"target": s.target, "case": s.case, "state": s.key, "mark": s.last_mark,
                        "outcome": s.outcome, "finding": number[s.id],
                        "explanation": s.explanation, "reproducer": s.reproducer,
                        "fails": rate.words() if rate is not None else None})
    explained: Counter[str] = Counter()
    for ids in r.known_checks()["known"]:
        explained.update(ids)
    times = {t: {"mount_s": _spread(list(rows["mount_s"].dropna())),
                 "fsck_s": _spread(list(rows["fsck_s"].dropna()))}
             for t, rows in c.groupby("target", sort=False)}
    report.data["crash"] = {"matrix": matrix, "summary": summary_words(found),
                            "findings": [{"number": n, **f.to_dict()}
                                         for n, f in enumerate(found, 1)],
                            "failing": failing, "known": dict(explained),
                            "controls": dict(fired), "verdicts": crash_verdicts(r),
                            "times": times}
    mounts = {_label(r, str(t)): list(rows["mount_s"].dropna())
              for t, rows in c.groupby("target", sort=False)}
    report.figure("crash_times", lambda: figures.distributions(
        mounts, title="Mount time of every crash state (journal replay)", ylabel="mount, s"))


def _cut(r: Results, report: Report) -> None:
    v = r.recoveries
    if v.empty:
        report.data["missing"].append("recovery after power cuts: no cut step in this run")
        report.data["cut"] = None
        return
    rows_out = []
    failing = r.failing_recoveries()
    for target, rows in v.groupby("target", sort=False):
        counts = Counter(r.labels(rows))
        rates = []
        mine = failing[failing["target"] == target]
        for run_id, trial, outcome in zip(mine["run_id"], mine["trial"], mine["outcome"],
                                          strict=True):
            rate = rerun_rate(r, int(run_id), f"{target}#{trial}")
            if rate is not None:
                rates.append(f"#{trial} {outcome}: {rate.words()}")
        rows_out.append({"target": target, "trials": len(rows), "counts": dict(counts),
                         "rates": rates,
                         "recovery_s": _spread(list(rows["recovery_s"].dropna())),
                         "mount_s": _spread(list(rows["mount_s"].dropna())),
                         "fsck_s": _spread(list(rows["fsck_s"].dropna()))})
    report.data["cut"] = rows_out
    groups: dict[str, list[float]] = {}
    for target, rows in v.groupby("target", sort=False):
        groups[f"{_label(r, str(target))}\nmount"] = list(rows["mount_s"].dropna())
        groups[f"{_label(r, str(target))}\nfsck"] = list(rows["fsck_s"].dropna())
    report.figure("cut_times", lambda: figures.distributions(
        groups, title="Recovery after live power cuts: mount (journal replay) and fsck",
        ylabel="seconds"))
    flight = v.dropna(subset=["in_flight_bytes", "recovery_s"])
    if not flight.empty:
        report.figure("in_flight", lambda: figures.scatter(
            {_label(r, str(t)): list(zip(rows["in_flight_bytes"] / 2**20, rows["recovery_s"]))
             for t, rows in flight.groupby("target", sort=False)},
            title="Recovery time against data in flight at the cut",
            xlabel="written and not yet durable at the cut, MiB", ylabel="mount + fsck, s"))


def _bench(r: Results, report: Report) -> None:
    if r.bench.empty or not r.benches:
        report.data["missing"].append("throughput: no bench step in this run")
        report.data["bench"] = []
        return
    out = []
    for plan in r.benches:
        metric = primary_metric(r.bench, plan)
        rows = r.bench[(r.bench["run_id"] == plan.run_id) & (r.bench["metric"] == metric)]
        if metric is None or rows.empty:
            continue
        unit = str(rows["unit"].iloc[0])
        hib = bool(rows["higher_is_better"].iloc[0])
        measured = rows.dropna(subset=["value"])
        by_rep = {t: [(int(r), float(x)) for r, x in
                      measured[measured["target"] == t][["repetition", "value"]].itertuples(index=False)]
                  for t in plan.targets}
        values = {t: [x for _, x in pairs] for t, pairs in by_rep.items()}
        cells = []
        for t, xs in values.items():
            cell: dict[str, Any] = {"target": t, "n": len(xs)}
            if len(xs) >= 2:
                s = summarize(xs)
                ci = s.ci(plan.level)
                cell.update(mean=s.mean, low=ci.low, high=ci.high, cov=s.cov)
            elif xs:
                cell.update(mean=xs[0], low=xs[0], high=xs[0], cov=None)
            if t != plan.baseline and len(xs) >= 2 and len(values.get(plan.baseline, [])) >= 2:
                try:
                    o = overhead_by_rep(by_rep[t], by_rep[plan.baseline], plan.level,
                                        higher_is_better=hib, paired=plan.blocked)
                    cell["overhead"] = {"pct": o.percent, "low_pct": 100 * o.ci.low,
                                        "high_pct": 100 * o.ci.high}
                except StatsError as exc:
                    # Fieller's set is unbounded (the baseline is too noisy): the point
                    # estimate still exists and is shown, with no interval.
                    cell["overhead_error"] = str(exc)
                    ratio = statistics.fmean(xs) / statistics.fmean(values[plan.baseline])
                    cell["overhead_point_pct"] = 100 * ((1 - ratio) if hib else (ratio - 1))
            cells.append(cell)
        design, reps, why = one_factor_design(values, plan.level)
        anova = None
        if design is not None:
            anova = [{"term": t.name, "ss": t.sum_sq, "pct": t.percent, "df": t.df,
                      "ms": t.mean_sq, "f": t.f, "f_crit": t.f_crit, "p": t.p_value}
                     for t in design.terms]
            anova.append({"term": "errors", "ss": design.ss_error, "pct": design.error_percent,
                          "df": design.df_error, "ms": design.mean_sq_error, "f": None,
                          "f_crit": None, "p": None})
        out.append({"run_id": plan.run_id, "workload": plan.workload, "metric": metric,
                    "unit": unit, "higher_is_better": hib, "baseline": plan.baseline,
                    "level": plan.level, "targets": cells, "anova": anova,
                    "anova_note": why or f"{reps} repetitions per target"})
        drawn = [(c["target"], c["mean"], c["low"], c["high"]) for c in cells if "mean" in c]
        if drawn:
            title = f"{plan.workload}: {metric} per target ({100 * plan.level:g}% intervals)"
            report.figure(f"throughput_{plan.run_id}", partial(
                figures.means, drawn, title=title, ylabel=f"{metric}, {unit}"))
    report.data["bench"] = out


def _profile(r: Results, target: str) -> str:
    """The data disk's device profile of ``target`` as the run kept it ("" without one)."""
    config = r.targets.get(target) or {}
    profiles = config.get("disk_profiles") or {}
    return str(profiles.get("data") or "") if isinstance(profiles, dict) else ""


def _trade_off(r: Results, report: Report) -> None:
    """Recovery (p90 with an order-statistics interval) against overhead (Fieller) for every
    target with both, per device profile: the Pareto front, the dominated, the answer."""
    recovery = {str(t): [float(x) for x in rows["recovery_s"].dropna()]
                for t, rows in r.recoveries.groupby("target", sort=False)} \
        if not r.recoveries.empty else {}
    verdicts = (report.data.get("crash") or {}).get("verdicts", {})
    configs: list[tradeoff.Config] = []
    missing: list[str] = []
    metric = workload = None
    for b in report.data.get("bench") or []:
        metric, workload = metric or b["metric"], workload or b["workload"]
        for cell in b["targets"]:
            t = cell["target"]
            times = recovery.get(t, [])
            if t == b["baseline"]:
                over: dict[str, Any] | None = {"pct": 0.0, "low_pct": 0.0, "high_pct": 0.0}
            elif "overhead_point_pct" in cell:
                over = {"pct": cell["overhead_point_pct"], "low_pct": None, "high_pct": None}
            else:
                over = cell.get("overhead")
            if over is None or not times:
                missing.append(f"{t} (no {'cut' if not times else 'bench'} data)")
                continue
            p90 = quantile_interval(times, 0.9)
            configs.append(tradeoff.Config(
                t, _profile(r, t), over["pct"], over["low_pct"], over["high_pct"], p90.value,
                p90.interval.low, p90.interval.high, p90.interval.level,
                statistics.median(times), max(times), len(times),
                baseline=t == b["baseline"]))
    profiles = list(dict.fromkeys(c.profile for c in configs))
    panels = []
    for profile in profiles:
        mine = [c for c in configs if c.profile == profile]
        best = tradeoff.front(mine)
        panels.append({
            "profile": profile or "plain disks",
            "points": [{**c.to_dict(), "front": c in best,
                        "dominated_by": [o.name for o in tradeoff.dominators(c, mine)],
                        "verdict": verdicts.get(c.name, "none")} for c in mine],
            "answer": tradeoff.answer(mine, profile=profile, workload=workload or "?")})
    missing = list(dict.fromkeys(missing))  # a target of several bench steps: named once
    report.data["trade_off"] = {"metric": metric, "workload": workload, "panels": panels,
                                "left_out": missing}
    if panels and metric is not None:
        report.figure("trade_off", lambda: figures.trade_off(panels, metric))
    else:
        report.data["missing"].append(
            "the trade-off figure: it needs a bench step and a cut step over the same targets"
            + (f" (left out: {', '.join(missing)})" if missing else ""))


# ---- rendering --------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.{digits}g}"
    return str(value)


def render_html(report: Report) -> str:
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(lambda name: resources.files("framework.report")
                                     .joinpath("templates", name).read_text()),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
        lstrip_blocks=True)
    env.filters["fmt"] = _fmt
    images = {name: "data:image/png;base64," + base64.b64encode(data).decode()
              for name, data in report.figures.items()}
    return env.get_template("report.html.j2").render(d=report.data, images=images,
                                                     outcomes=OUTCOME_ORDER)
