"""Benchmark samples in the store: every metric of every repetition of a bench run."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from framework.core import clock
from framework.core.store.database import Database, target_id


@dataclass(frozen=True, slots=True)
class BenchSample:
    target: str
    workload: str
    repetition: int
    trial_order: int
    metric: str
    value: float | None
    unit: str
    higher_is_better: bool
    warmup: bool


class MetricLike(Protocol):
    """What ``add_bench_samples`` needs of a metric (framework.bench.workloads.Metric fits)."""

    @property
    def name(self) -> str: ...
    @property
    def value(self) -> float | None: ...
    @property
    def unit(self) -> str: ...
    @property
    def higher_is_better(self) -> bool: ...


class BenchSamples(Database):
    """What bench runs store: a row per metric of each repetition."""

    def add_bench_samples(self, run_id: int, target: str, workload: str, *, repetition: int,
                          metrics: Iterable[MetricLike], trial_order: int | None = None,
                          warmup: bool = False) -> None:
        """Every metric of one benchmark repetition, in one transaction."""
        with self.transaction() as db:
            target_row = target_id(db, run_id, target)
            order = repetition if trial_order is None else trial_order
            now = clock.timestamp()
            for m in metrics:
                db.execute(
                    "INSERT OR REPLACE INTO bench_samples (target_id, workload, repetition,"
                    " trial_order, metric, value, unit, higher_is_better, warmup, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (target_row, workload, repetition, order, m.name,
                     None if m.value is None else float(m.value), m.unit,
                     int(m.higher_is_better), int(warmup), now))

    def bench_samples(self, run_id: int, *, target: str | None = None,
                      workload: str | None = None, metric: str | None = None,
                      include_warmup: bool = False) -> list[BenchSample]:
        sql = ("SELECT b.*, t.name AS target FROM bench_samples b JOIN targets t"
               " ON b.target_id = t.id WHERE t.run_id = ?")
        if not include_warmup:
            sql += " AND b.warmup = 0"
        rows = self._select(sql, run_id, [("t.name", target), ("b.workload", workload),
                                          ("b.metric", metric)],
                            "t.id, b.workload, b.trial_order, b.metric")
        return [BenchSample(r["target"], r["workload"], r["repetition"], r["trial_order"],
                            r["metric"], r["value"], r["unit"], bool(r["higher_is_better"]),
                            bool(r["warmup"])) for r in rows]
