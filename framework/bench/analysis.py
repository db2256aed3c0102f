"""The analysis of a bench run (Jain, ch. 13 and 22).

Per target and metric the mean with its t-based interval; the overhead of
each target against the baseline with Fieller's interval (positive means the
target is worse): in a blocked run from the repetitions both measured, pair
by pair (``framework.core.stats.overhead_by_rep``), else from the two samples
as independent; and a
one-factor design (factor: target, replications: repetitions) with its
allocation of variation and F-test for the primary metric, or the full
factorial design of the factors the run was given. Metrics of one workload
have different units, so they are analysed one at a time, never as a
second factor (unless the run makes ``metric`` a factor).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from framework.bench import design as factorial_design
from framework.bench.engine import BenchConfig, BenchRun, design_cells, kept_by_rep, kept_values
from framework.core.errors import ConfigError
from framework.core.factorial import FactorialDesign
from framework.core.stats import Overhead, StatsError, Summary, overhead_by_rep, summarize


@dataclass(frozen=True, slots=True)
class MetricInfo:
    name: str
    unit: str
    higher_is_better: bool


@dataclass(frozen=True, slots=True)
class Cell:
    """One metric of one target: its summary, or why there is none."""

    target: str
    metric: str
    values: tuple[float, ...]
    summary: Summary | None
    reps: tuple[int, ...] = ()  # the repetition of each value (its round, in a blocked run)


@dataclass(frozen=True, slots=True)
class OverheadCell:
    target: str
    metric: str
    overhead: Overhead | None
    error: str = ""  # why there is no overhead (too few samples, baseline near 0)


@dataclass(frozen=True, slots=True)
class BenchAnalysis:
    config: BenchConfig
    primary: MetricInfo
    metrics: tuple[MetricInfo, ...]
    cells: tuple[Cell, ...]
    overheads: tuple[OverheadCell, ...]
    design: FactorialDesign | None
    design_replications: int  # repetitions per target used in the design (the fewest any has)
    design_error: str  # why there is no design

    def cell(self, target: str, metric: str) -> Cell:
        for c in self.cells:
            if c.target == target and c.metric == metric:
                return c
        raise KeyError((target, metric))

    def overhead_of(self, target: str, metric: str) -> OverheadCell:
        for o in self.overheads:
            if o.target == target and o.metric == metric:
                return o
        raise KeyError((target, metric))


def analyse(run: BenchRun) -> BenchAnalysis:
    config = run.config
    level = config.level
    kept = [s for s in run.samples if not s.trial.warmup]
    if not kept:
        raise ConfigError("bench: no kept repetitions to analyse")
    infos: dict[str, MetricInfo] = {}
    for s in kept:
        for m in s.result.metrics:
            infos.setdefault(m.name, MetricInfo(m.name, m.unit, m.higher_is_better))
    cells: list[Cell] = []
    overheads: list[OverheadCell] = []
    base = config.baseline_target
    for info in infos.values():
        by_rep = kept_by_rep(kept, info.name, config.targets)
        values = {t: [v for _, v in pairs] for t, pairs in by_rep.items()}
        for target in config.targets:
            v = values.get(target, [])
            cells.append(Cell(target, info.name, tuple(v), summarize(v) if len(v) >= 2 else None,
                              tuple(r for r, _ in by_rep.get(target, []))))
        for target in config.targets:
            if target == base:
                continue
            try:
                o = overhead_by_rep(by_rep[target], by_rep[base], level,
                                    higher_is_better=info.higher_is_better, paired=config.blocked)
                overheads.append(OverheadCell(target, info.name, o))
            except StatsError as exc:
                overheads.append(OverheadCell(target, info.name, None, str(exc)))
    primary = infos[run.primary]
    if config.factors:
        def cell_values(target: str, metric: str) -> Sequence[float]:
            return kept_values(kept, metric, [target]).get(target, [])

        try:
            # Workloads name their metrics only in their results: a metric level the run
            # did not report is known only now, and the samples are stored by then.
            factorial_design.check_metrics(config.factors, infos)
        except ConfigError as exc:
            design, r, why = None, 0, str(exc)
        else:
            design, r, why = factorial_design.factorial(design_cells(config), config.factors,
                                                        cell_values, run.primary, level)
    else:
        design, r, why = factorial_design.one_factor_design(kept_values(kept, run.primary, config.targets), level)
    return BenchAnalysis(config, primary, tuple(infos.values()), tuple(cells), tuple(overheads),
                         design, r, why)
