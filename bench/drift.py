"""Does the machine drift between bench trials? (a script, not a test): prints figures.

Reads a results database and, for every bench run in it and every metric, puts each
kept trial's value as its deviation from its target's mean (value / mean - 1), in
run order, and prints the coefficient of variation of those deviations and their
lag-1 autocorrelation: near 0 when trials vary independently, positive when the
machine's speed drifts over several trials (an emulated guest follows the host's
load). A positive figure is what a blocked run order (``powercut bench --order
blocks``, the default) cancels by pairing the trials of one round; the last column
says how much of the deviations' variance pairing neighbours removes in that run
(1 - var(deviation - mean of its 2 neighbours on each side) / (1.25 var(deviation)),
the 1.25 being the variance the neighbour mean adds to independent deviations).

Usage: python bench/drift.py RESULTS.sqlite [--metric NAME ...] [--min-trials 10]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, os.fspath(Path(__file__).resolve().parent.parent))

from framework.core.store import Store


def deviations(rows: list[tuple[int, str, float]]) -> list[float]:
    """(trial order, target, value) -> each value's deviation from its target's mean, in
    run order; targets whose mean is 0 are left out."""
    by_target: dict[str, list[float]] = defaultdict(list)
    for _, target, value in rows:
        by_target[target].append(value)
    means = {t: statistics.fmean(v) for t, v in by_target.items()}
    return [value / means[target] - 1 for _, target, value in sorted(rows) if means[target]]


def lag1(series: list[float]) -> float:
    mean = statistics.fmean(series)
    var = sum((x - mean) ** 2 for x in series)
    if var == 0:
        return 0.0
    return sum((a - mean) * (b - mean) for a, b in itertools.pairwise(series)) / var


def neighbour_share(series: list[float], k: int = 2) -> float:
    """The share of the variance that the mean of the k trials on each side explains."""
    adjusted = []
    for i, x in enumerate(series):
        around = series[max(0, i - k):i] + series[i + 1:i + k + 1]
        adjusted.append(x - statistics.fmean(around))
    var = statistics.pvariance(series)
    return 1 - statistics.pvariance(adjusted) / ((1 + 1 / (2 * k)) * var) if var else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db", type=Path)
    parser.add_argument("--metric", action="append",
                        help="only these metrics (repeatable; default: all)")
    parser.add_argument("--min-trials", type=int, default=10,
                        help="leave out series with fewer kept trials (default: 10)")
    args = parser.parse_args(argv)
    if not args.db.is_file():
        parser.error(f"{args.db}: no such results database")
    print(f"{'run':>4} {'workload':<18} {'metric':<22} {'trials':>6} {'cv':>6} {'lag-1':>6} "
          f"{'drift share':>11}")
    with Store(args.db) as store:
        for run in store.runs():
            series: dict[tuple[str, str], list[tuple[int, str, float]]] = defaultdict(list)
            for s in store.bench_samples(run.id):
                if s.value is not None and (not args.metric or s.metric in args.metric):
                    series[(s.workload, s.metric)].append((s.trial_order, s.target, s.value))
            for (workload, metric), rows in series.items():
                dev = deviations(rows)
                if len(dev) < args.min_trials:
                    continue
                print(f"{run.id:>4} {workload:<18} {metric:<22} {len(dev):>6} "
                      f"{statistics.pstdev(dev):>6.3f} {lag1(dev):>+6.2f} "
                      f"{neighbour_share(dev):>11.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
