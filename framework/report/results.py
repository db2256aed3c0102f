"""A run's results as tables, read from the store: what report, compare and ci work on.

A run reference names a study run (then its steps are read) or a single
crash, cut or bench run. Every table carries the id and kind of the run a
row came from, so a study with two bench steps keeps them apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from crashcases.crash.points import Variant
from crashcases.vocabulary import VariantKind, fails
from framework.core import rundir
from framework.core.errors import ConfigError
from framework.core.store import Run, Store
from recovery.targets import Target, target_from_dict

CHECK_COLUMNS = ["run_id", "target", "case", "seed", "entry", "point_kind", "last_mark",
                 "variant", "variant_seed", "outcome", "known", "mount_s", "fsck_s",
                 "findings", "reproducer", "fsck_verdicts", "state", "signature", "ops_to_crash", "explanation"]
RECOVERY_COLUMNS = ["run_id", "target", "trial", "seed", "outcome", "known", "mount_s",
                    "fsck_s", "recovery_s", "in_flight_bytes", "in_flight_ops"]
#: What every bench repetition also records about itself (framework.bench.engine.StoreRecorder).
SETUP_METRICS = ("mkfs_s", "mount_s", "trial_wall_s")
BENCH_COLUMNS = ["run_id", "target", "workload", "metric", "unit", "higher_is_better",
                 "repetition", "trial_order", "value"]


@dataclass(frozen=True)
class BenchPlan:
    """What one bench run compared: its targets, baseline, primary metric and level."""

    run_id: int
    workload: str
    targets: tuple[str, ...]
    baseline: str
    metric: str | None  # None: "total" if reported, else the first metric
    level: float
    blocked: bool = False  # run in rounds of every target: overheads pair repetition k
    scale: str = ""  # the work a repetition did ("": a plan that did not say)
    duration_s: int | None = None  # a timed workload's seconds instead of its scale's

    def size(self) -> str:
        """The work a repetition did, in words: ``small scale, 10 s a repetition``."""
        scale = f"{self.scale or 'unknown'} scale"
        return scale if self.duration_s is None else f"{scale}, {self.duration_s} s a repetition"


@dataclass(frozen=True)
class Results:
    """Everything a run (or a study's steps) recorded, one DataFrame per kind of result."""

    top: Run
    runs: tuple[Run, ...]  # the runs the rows come from: a study's steps, or the run itself
    checks: pd.DataFrame
    recoveries: pd.DataFrame
    bench: pd.DataFrame
    benches: tuple[BenchPlan, ...]
    #: target name -> its configuration as the store keeps it (Target.to_dict())
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: (run id, state key) -> whether each check again failed, in order (crash --reruns)
    reruns: dict[tuple[int, str], list[bool]] = field(default_factory=dict)

    @property
    def is_study(self) -> bool:
        return self.top.kind == "study"

    @property
    def study(self) -> str:
        """What the run was: the study's name, or the command run on its own."""
        return self.top.study.removeprefix("study ") if self.is_study else self.top.study

    def environment(self) -> dict[str, Any]:
        """The run's environment, with the first booted guest's facts of any step."""
        env = dict(self.top.environment)
        for run in self.runs:
            if "guest" in run.environment and "guest" not in env:
                env["guest"] = run.environment["guest"]
        return env

    def fails(self, outcome: str, target: str) -> bool:
        """Whether ``outcome`` fails ``target`` (fsck repairs fail a journalled one)."""
        return fails(outcome, self._target(target))

    def _target(self, name: str) -> Target | None:
        """The stored definition of target ``name``; None when it cannot be read (the
        outcome alone decides then)."""
        config = self.targets.get(name)
        if not config:
            return None
        # Runs keep a target's definition (Target.to_dict()) with extras of their own.
        known = ("fstype", "mkfs_options", "mount_options", "journal", "journal_size_mib")
        try:
            return target_from_dict({"name": name, **{k: v for k, v in config.items()
                                                      if k in known}})
        except (ConfigError, KeyError, TypeError, ValueError):
            return None

    def _failing(self, frame: pd.DataFrame) -> pd.Series:
        return pd.Series([self.fails(o, t) for o, t in zip(frame["outcome"], frame["target"])],
                         index=frame.index, dtype=bool)

    def labels(self, frame: pd.DataFrame) -> pd.Series:
        """Each row's outcome as reports count it: "known" for a failure known behaviour
        explains, else the raw outcome (rows of ``checks`` or ``recoveries``)."""
        known = self._failing(frame) & frame["known"].notna()
        return frame["outcome"].astype(str).where(~known, "known")

    def all_failing_checks(self) -> pd.DataFrame:
        """Checked crash states that fail, those known behaviour explains included."""
        return self.checks[self._failing(self.checks)]

    def failing_checks(self) -> pd.DataFrame:
        """Checked crash states that fail and no known behaviour explains."""
        c = self.checks
        return c[self._failing(c) & c["known"].isna()]

    def known_checks(self) -> pd.DataFrame:
        """Failing crash states that known behaviour explains."""
        c = self.checks
        return c[self._failing(c) & c["known"].notna()]

    def failing_recoveries(self) -> pd.DataFrame:
        """Power-cut trials that fail and no known behaviour explains."""
        v = self.recoveries
        return v[self._failing(v) & v["known"].isna()]


def load(store: Store, ref: str) -> Results:
    """The results of run ``ref`` (id, uuid or 'latest'); StoreError names a bad one."""
    top = store.resolve(ref)
    runs = tuple(store.children(top.id)) if top.kind == "study" else (top,)
    checks, recoveries, bench, benches = [], [], [], []
    targets: dict[str, dict[str, Any]] = {}
    reruns: dict[tuple[int, str], list[bool]] = {}
    for run in runs:
        targets.update(store.targets(run.id))
        for key, rows in store.reruns(run.id).items():
            reruns[(run.id, key)] = [failed for _, failed in rows]
        for c in store.checks(run.id):
            checks.append([run.id, c.target, c.case_spec, c.seed, c.entry_index, c.kind,
                           c.last_mark, c.variant, c.variant_seed, c.outcome,
                           tuple(c.known) if c.known is not None else None, c.mount_s,
                           c.fsck_s, c.findings, c.reproducer, c.fsck_verdicts,
                           c.state or state_key(c.entry_index, c.variant, c.variant_seed),
                           c.signature, c.ops_to_crash, c.explanation])
        for v in store.recoveries(run.id):
            total = None if v.mount_s is None else v.mount_s + (v.fsck_s or 0.0)
            recoveries.append([run.id, v.target, v.trial, v.seed, v.outcome,
                               tuple(v.known) if v.known is not None else None, v.mount_s,
                               v.fsck_s, total, v.in_flight_bytes, v.in_flight_ops])
        samples = store.bench_samples(run.id)
        for b in samples:
            bench.append([run.id, b.target, b.workload, b.metric, b.unit, b.higher_is_better,
                          b.repetition, b.trial_order, b.value])
        if samples or run.kind == "bench":
            plan = run.environment.get("plan", {})
            names = tuple(plan.get("targets") or dict.fromkeys(s.target for s in samples))
            if names:
                benches.append(BenchPlan(run.id, str(plan.get("workload", samples[0].workload
                                                             if samples else "")),
                                         names, str(plan.get("baseline") or names[0]),
                                         plan.get("metric") or _primary_of(run),
                                         float(plan.get("level", 0.95)),
                                         bool(plan.get("blocked", False)),
                                         str(plan.get("scale") or ""),
                                         None if plan.get("duration_s") is None
                                         else int(plan["duration_s"])))
    return Results(top, runs,
                   pd.DataFrame(checks, columns=CHECK_COLUMNS),
                   pd.DataFrame(recoveries, columns=RECOVERY_COLUMNS),
                   pd.DataFrame(bench, columns=BENCH_COLUMNS),
                   tuple(benches), targets, reruns)


def state_key(entry: int, variant: str, seed: int) -> str:
    """A state's key from its stored parts, for rows stored before keys were kept (a
    variant on the journal disk of such a row reads as one on the data disk)."""
    try:
        return f"{entry}/{Variant(VariantKind(variant), seed).spec}"
    except ValueError:
        return f"{entry}/{variant}"


def _primary_of(run: Run) -> str | None:
    """The primary metric a finished bench run chose (its results.json), if it says."""
    run_dir = run.environment.get("run_dir")
    if not isinstance(run_dir, str):
        return None
    try:
        primary = rundir.read_results(Path(run_dir), "bench results").get("primary")
    except ConfigError:
        return None
    return primary if isinstance(primary, str) else None


def controls(results: Results) -> set[int]:
    """The runs of a study's positive-control steps (``expect = "fail"``): their failures
    are what the study asks of them, not findings."""
    steps = results.top.environment.get("plan", {}).get("steps", [])
    expect = {i: s.get("expect", "pass") for i, s in enumerate(steps, 1) if isinstance(s, dict)}
    numbered = {int(s["number"]): s.get("expect", "pass") for s in steps
                if isinstance(s, dict) and s.get("number")}
    expect.update(numbered)
    return {r.id for r in results.runs
            if expect.get(int(r.environment.get("study_step", 0) or 0)) == "fail"}


def primary_metric(bench: pd.DataFrame, plan: BenchPlan) -> str | None:
    """The metric a bench run's verdicts use: its --metric, else "total", else the first."""
    rows = bench[bench["run_id"] == plan.run_id]
    names = list(dict.fromkeys(rows["metric"]))
    if plan.metric:
        return plan.metric
    measured = [n for n in names if n not in SETUP_METRICS] or names
    if "total" in measured:
        return "total"
    return measured[0] if measured else None
