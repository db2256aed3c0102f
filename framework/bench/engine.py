"""Throughput overhead of journalling: repeated benchmark runs per target.

Procedure (Jain, ch. 13 and 22): every target gets ``reps`` repetitions of
one workload, each on a freshly made filesystem with cold caches (see
``framework.bench.task``). The trials of all targets are interleaved in a
seeded random order, so slow drift of the machine (host load, a warming
disk image) cannot masquerade as the effect of one target.

The order is *blocked* by default (a randomised complete block design):
round k runs every target once, in a fresh random order, and holds each
target's repetition k. An emulated guest's speed drifts with the host
(successive trials' figures correlate), and within a round the targets
share that drift: the analysis pairs repetition k of two targets
(``framework.core.stats.paired_overhead``) and the drift cancels, where
the plain shuffle (``blocked=False``, older runs) can only spread it over
all targets as extra noise. Optionally the first round is a discarded
warm-up, and with ``until_ci_pct`` more rounds run until the 95%
confidence interval of the primary metric's mean is within that many
percent of the mean for every target, or ``max_reps`` is reached; in a
blocked run an extra round runs every target, so rounds stay complete.

The analysis of a run is in ``framework.bench.analysis``, its report in
``framework.bench.report``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from framework.bench import design as factorial_design
from framework.bench.task import (
    BENCH_REPETITION,
    RepetitionRequest,
    RepetitionResult,
)
from framework.bench.workloads import Metric, Scale, get_workload
from framework.core import agent, clock, rundir
from framework.core.errors import ConfigError
from framework.core.lifecycle import read_plan
from framework.core.machine.base import DiskSpec, Machine
from framework.core.stats import StatsError, summarize
from framework.core.store import Store
from recovery.disks import plan_disks
from recovery.targets import Target, resolve, target_from_dict

log = logging.getLogger(__name__)

MIB = 1 << 20

#: Data disk per scale; sparse, so only what the filesystem touches costs space.
DATA_DISK_BYTES = {Scale.TINY: 256 * MIB, Scale.SMALL: 2048 * MIB, Scale.FULL: 8192 * MIB}
#: Added to the workload's own deadline: python start, mkfs, mount and unmount in a slow guest.
REPETITION_OVERHEAD_S = 300.0


@dataclass(frozen=True, slots=True)
class BenchConfig:
    targets: tuple[str, ...]
    workload: str
    scale: Scale = Scale.TINY
    reps: int = 10  # kept repetitions per target (the minimum with until_ci_pct)
    warmup: bool = False  # one more trial per target, the first, discarded
    until_ci_pct: float | None = None  # rerun until the CI half width is under this % of the mean
    max_reps: int = 30  # cap on kept repetitions per target when until_ci_pct is set
    seed: int = 0
    baseline: str | None = None  # default: the first target
    metric: str | None = None  # primary metric; default: "total" if reported, else the first
    level: float = 0.95
    #: The guest's vCPUs (BENCH_CPUS unless given; older plans without it ran with 2).
    cpus: int = 2
    user_targets: tuple[Target, ...] = ()  # definitions from --targets-file the targets may name
    #: Factors beyond the target (framework.bench.design); with any, ``targets`` are the
    #: cells (every base target at every combination of levels) and ``bases`` the targets named.
    factors: tuple[factorial_design.Factor, ...] = ()
    bases: tuple[str, ...] = ()
    #: Rounds with every target once each (pairs for the analysis); False: one shuffle.
    blocked: bool = True
    #: Seconds a timed workload runs per repetition instead of its scale's (None: the scale's).
    duration_s: int | None = None

    @property
    def baseline_target(self) -> str:
        return self.baseline or self.targets[0]

    def validate(self) -> None:
        if not self.targets:
            raise ConfigError("bench: no targets given")
        if len(set(self.targets)) != len(self.targets):
            raise ConfigError(f"bench: targets {','.join(self.targets)}: a target is named twice")
        if self.reps < 2:
            raise ConfigError(f"bench: --reps {self.reps}: at least 2 are needed for an interval")
        if self.cpus < 1:
            raise ConfigError(f"bench: --cpus {self.cpus}: the guest needs at least one vCPU")
        if self.until_ci_pct is not None:
            if not self.until_ci_pct > 0:
                raise ConfigError(f"bench: --until-ci {self.until_ci_pct}: must be a positive percentage")
            if self.max_reps < self.reps:
                raise ConfigError(f"bench: --max-reps {self.max_reps} is below --reps {self.reps}")
        if self.baseline_target not in self.targets:
            raise ConfigError(f"bench: baseline {self.baseline_target!r} is not one of the targets "
                              f"({', '.join(self.targets)})")
        if not 0 < self.level < 1:
            raise ConfigError(f"bench: confidence level {self.level} is not between 0 and 1")
        if self.duration_s is not None:
            if self.duration_s < 1:
                raise ConfigError(f"bench: --duration {self.duration_s}: must be at least 1 second")
            # Refuses a workload that does not run for a time.
            get_workload(self.workload, duration_s=self.duration_s)


def with_factors(config: BenchConfig, factors: Sequence[factorial_design.Factor]) -> BenchConfig:
    """``config`` with its targets expanded into the cells of ``factors`` (a full factorial)."""
    if not factors:
        return config
    bases = config.targets
    cells = factorial_design.expand([resolve(n, config.user_targets) for n in bases], factors)
    names = tuple(c.name for c in cells)
    made = tuple(c.target for c in cells if c.name not in bases)
    baseline = config.baseline
    if baseline is not None and baseline not in names:
        raise ConfigError(f"bench: baseline {baseline!r} is not one of the cells "
                          f"({', '.join(names)})")
    return dataclasses.replace(config, targets=names, factors=tuple(factors), bases=bases,
                               user_targets=(*config.user_targets, *made))


def design_cells(config: BenchConfig) -> list[factorial_design.Cell]:
    """The cells of a factorial run, rebuilt from its config (as a resumed run does)."""
    return factorial_design.expand([resolve(n, config.user_targets) for n in config.bases],
                                   config.factors)


def resolve_targets(config: BenchConfig) -> list[Target]:
    """The configuration's targets, built in or user-defined (ConfigError names an unknown one)."""
    return [resolve(n, config.user_targets) for n in config.targets]


def disks_for(targets: Sequence[Target], scale: Scale) -> list[DiskSpec]:
    """Scratch disks for a bench over ``targets``: data, plus journal if any needs one (a disk
    per device profile that throttles a role differently)."""
    return list(plan_disks(targets, data_bytes=DATA_DISK_BYTES[scale]).specs)


# --------------------------------------------------------------------------
# Order of trials


@dataclass(frozen=True, slots=True)
class Trial:
    """One run of a target; ``rep`` counts that target's trials from 1 (0 is its warm-up)."""

    seq: int  # position in the run order, from 0
    target: str
    rep: int
    warmup: bool = False


class Scheduler:
    """The seeded run order: the first ``reps`` repetitions (and warm-ups), then extra
    rounds for the CI rule.

    Blocked: a warm-up round, then one round per repetition, each every target once in
    a random order; an extra round runs every target below the cap while any is
    unsatisfied. Not blocked: the first repetitions in one shuffle, an extra round only
    the unsatisfied targets. Every permutation is drawn from one ``random.Random(seed)``,
    so the same seed and the same measurements give the same order.
    """

    def __init__(self, config: BenchConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self._seq = 0
        self._trials: dict[str, int] = dict.fromkeys(config.targets, 0)

    def _trial(self, target: str) -> Trial:
        warm = self.config.warmup and self._trials[target] == 0
        rep = self._trials[target] if self.config.warmup else self._trials[target] + 1
        self._trials[target] += 1
        t = Trial(self._seq, target, rep, warm)
        self._seq += 1
        return t

    def kept_trials(self, target: str) -> int:
        """Trials scheduled for ``target`` so far, its warm-up not counted."""
        return self._trials[target] - (1 if self.config.warmup and self._trials[target] else 0)

    def first_round(self) -> list[Trial]:
        per_target = self.config.reps + (1 if self.config.warmup else 0)
        if not self.config.blocked:
            names = [t for t in self.config.targets for _ in range(per_target)]
            self.rng.shuffle(names)
            return [self._trial(n) for n in names]
        out: list[Trial] = []
        for _ in range(per_target):
            block = list(self.config.targets)
            self.rng.shuffle(block)
            out += [self._trial(n) for n in block]
        return out

    def unsatisfied(self, kept: Mapping[str, Sequence[float]]) -> list[str]:
        """Targets whose primary metric's interval is still too wide and below the cap."""
        pct = self.config.until_ci_pct
        if pct is None:
            return []
        out = []
        for target in self.config.targets:
            # The cap counts trials, not values: a metric the tool could not
            # measure (None) must not keep a target running for ever.
            if self.kept_trials(target) >= self.config.max_reps:
                continue
            if relative_half_width(list(kept.get(target, ())), self.config.level) > pct / 100.0:
                out.append(target)
        return out

    def next_round(self, kept: Mapping[str, Sequence[float]]) -> list[Trial]:
        """One more trial for every unsatisfied target (blocked: for every target below the
        cap while any is unsatisfied), shuffled; empty when done."""
        names = self.unsatisfied(kept)
        if names and self.config.blocked:
            names = [t for t in self.config.targets if self.kept_trials(t) < self.config.max_reps]
        self.rng.shuffle(names)
        return [self._trial(n) for n in names]


def relative_half_width(values: Sequence[float], level: float = 0.95) -> float:
    """CI half width of the mean over |mean|; inf when it cannot be computed yet."""
    if len(values) < 2:
        return math.inf
    try:
        return summarize(values).half_width_ratio(level)
    except StatsError:
        return math.inf


# --------------------------------------------------------------------------
# Running


@dataclass(frozen=True, slots=True)
class Sample:
    """One finished trial: what ran, its result and the host-side wall time."""

    trial: Trial
    result: RepetitionResult
    wall_s: float


Execute = Callable[[Trial], RepetitionResult]


class Recorder(Protocol):
    """Where each sample goes as soon as it is measured (the results store)."""

    def add(self, sample: Sample) -> None: ...


Progress = Callable[[Sample, "BenchState"], None]


@dataclass
class BenchState:
    """What is known while the bench runs (for progress reports)."""

    config: BenchConfig
    started_s: float
    planned: int = 0
    samples: list[Sample] = field(default_factory=list)
    primary: str | None = None

    def kept(self, metric: str) -> dict[str, list[float]]:
        return kept_values(self.samples, metric, self.config.targets)

    def eta_s(self) -> float:
        done = len(self.samples)
        if done == 0:
            return math.nan
        per = (clock.monotonic() - self.started_s) / done
        return per * max(0, self.planned - done)


def kept_values(samples: Iterable[Sample], metric: str, targets: Sequence[str]) -> dict[str, list[float]]:
    """Values of ``metric`` per target in run order, warm-ups and unmeasured ones left out."""
    return {t: [v for _, v in pairs] for t, pairs in kept_by_rep(samples, metric, targets).items()}


def kept_by_rep(samples: Iterable[Sample], metric: str,
                targets: Sequence[str]) -> dict[str, list[tuple[int, float]]]:
    """(repetition, value) of ``metric`` per target in run order, warm-ups and unmeasured
    ones left out; in a blocked run, repetition k of every target is from round k."""
    out: dict[str, list[tuple[int, float]]] = {t: [] for t in targets}
    for s in samples:
        if s.trial.warmup:
            continue
        # A tool may leave a figure out of one run (dbench omits operations
        # it did not do): that repetition has no value, not a zero.
        value = next((m.value for m in s.result.metrics if m.name == metric), None)
        if value is not None:
            out.setdefault(s.trial.target, []).append((s.trial.rep, value))
    return out


def choose_primary(result: RepetitionResult, wanted: str | None,
                   preferred: str | None = None) -> str:
    """The metric the CI rule and the ANOVA use: the asked one, else the workload's own
    (``preferred``, Benchmark.primary), else "total", else the first."""
    names = [m.name for m in result.metrics]
    if wanted is not None:
        result.metric(wanted)  # ConfigError naming the metrics the workload reports
        return wanted
    if preferred is not None and preferred in names:
        return preferred
    if "total" in names:
        return "total"
    return names[0]


@dataclass(frozen=True, slots=True)
class BenchRun:
    config: BenchConfig
    samples: tuple[Sample, ...]
    primary: str
    wall_s: float
    #: Host 1-minute load average before and after: emulated guests are slowed
    #: by anything else running on the host, so say how busy it was.
    host_load: tuple[float, float] | None = None


def run_bench(
    config: BenchConfig,
    execute: Execute,
    *,
    recorder: Recorder | None = None,
    progress: Progress | None = None,
    earlier: Mapping[int, Sample] | None = None,
) -> BenchRun:
    """Run every trial in the seeded order; each sample is recorded before the next trial.

    A KeyboardInterrupt propagates after the samples measured so far were recorded.
    ``earlier``: samples an interrupted run of the same config measured, by position in
    the run order; those trials are taken, not run again (the order depends only on the
    seed and on the measurements, so it is the same order again).
    """
    earlier = earlier or {}
    config.validate()
    scheduler = Scheduler(config)
    preferred = get_workload(config.workload).primary
    state = BenchState(config, clock.monotonic())
    load_before = _load_average()
    pending = scheduler.first_round()
    state.planned = len(pending)
    while pending:
        for trial in pending:
            before = earlier.get(trial.seq)
            if before is not None and before.trial == trial:
                state.samples.append(before)
                if state.primary is None:
                    state.primary = choose_primary(before.result, config.metric, preferred)
                if progress is not None:
                    progress(before, state)
                continue
            start = clock.monotonic()
            result = execute(trial)
            if result.target != trial.target:
                raise ConfigError(f"bench: trial of {trial.target!r} returned a result of {result.target!r}")
            if state.primary is None:
                state.primary = choose_primary(result, config.metric, preferred)
            sample = Sample(trial, result, clock.monotonic() - start)
            state.samples.append(sample)
            if recorder is not None:
                recorder.add(sample)
            if progress is not None:
                progress(sample, state)
        assert state.primary is not None  # the first round is never empty
        pending = scheduler.next_round(state.kept(state.primary))
        state.planned += len(pending)
    assert state.primary is not None
    load_after = _load_average()
    load = None if load_before is None or load_after is None else (load_before, load_after)
    return BenchRun(config, tuple(state.samples), state.primary,
                    clock.monotonic() - state.started_s, load)


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


#: In a bench run directory: one line per finished trial (what --resume takes over).


def earlier_samples(run_dir: Path) -> dict[int, Sample]:
    """The samples an interrupted bench run wrote to its rundir.SAMPLES, by run-order position."""
    out: dict[int, Sample] = {}
    path = run_dir / rundir.SAMPLES
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            raw = json.loads(line)
            trial = Trial(int(raw["seq"]), str(raw["target"]), int(raw["rep"]),
                          bool(raw["warmup"]))
            out[trial.seq] = Sample(trial, RepetitionResult.from_dict(raw["result"]),
                                    float(raw["wall_s"]))
        except (ValueError, KeyError, TypeError):
            break  # a torn last line: killed while writing it
    return out


class StoreRecorder:
    """Writes each sample to the results store, one transaction per sample, and to the
    run directory's rundir.SAMPLES (whole results, for --resume) when given one."""

    def __init__(self, store: Store, run_id: int, config: BenchConfig,
                 run_dir: Path | None = None) -> None:
        self.store = store
        self.run_id = run_id
        self.config = config
        self.run_dir = run_dir
        self._described: set[str] = set()

    def add(self, sample: Sample) -> None:
        r = sample.result
        if r.target not in self._described:
            # What the kernel really applied, next to what the target asked for
            # (the target as the guest ran it: built-in or the user's own).
            self._described.add(r.target)
            target = r.spec
            self.store.add_target(self.run_id, r.target, {
                **target.to_dict(), "applied_mount_options": r.mount_options,
                "kernel": r.kernel})
        setup = (Metric("mkfs_s", r.mkfs_s, "s", False), Metric("mount_s", r.mount_s, "s", False),
                 Metric("trial_wall_s", sample.wall_s, "s", False))
        self.store.add_bench_samples(self.run_id, r.target, self.config.workload,
                                     repetition=sample.trial.rep, metrics=[*r.metrics, *setup],
                                     trial_order=sample.trial.seq, warmup=sample.trial.warmup)
        # After the store: a trial in the file is in the store too; one in the store only
        # (killed in between) is run again by --resume and replaces its rows.
        if self.run_dir is not None:
            line = json.dumps({"seq": sample.trial.seq, "target": sample.trial.target,
                               "rep": sample.trial.rep, "warmup": sample.trial.warmup,
                               "wall_s": sample.wall_s, "result": sample.result.to_dict()},
                              sort_keys=True)
            with open(self.run_dir / rundir.SAMPLES, "a", encoding="utf-8") as f:
                f.write(line + "\n")
                f.flush()
                os.fsync(f.fileno())


def config_from_plan(run_dir: Path) -> BenchConfig:
    """The config of an earlier bench run, from the plan.json plan_document() wrote."""
    path = run_dir / rundir.PLAN
    doc = read_plan(run_dir, "bench")
    try:
        config = BenchConfig(
            targets=tuple(doc["targets"]), workload=str(doc["workload"]),
            scale=Scale(doc["scale"]), reps=int(doc["reps"]), warmup=bool(doc["warmup"]),
            until_ci_pct=doc["until_ci_pct"], max_reps=int(doc["max_reps"]),
            seed=int(doc["seed"]), baseline=doc["baseline"], metric=doc["metric"],
            level=float(doc["level"]), cpus=int(doc.get("cpus", 2)),
            user_targets=tuple(target_from_dict(t) for t in doc.get("user_targets", ())),
            factors=tuple(factorial_design.parse_factor(f) for f in doc.get("factors", ())),
            bases=tuple(doc.get("bases", ())),
            # Plans written before blocked orders ran one shuffle: resume them as they began.
            blocked=bool(doc.get("blocked", False)),
            duration_s=None if doc.get("duration_s") is None else int(doc["duration_s"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: not a bench plan ({exc})") from None
    config.validate()
    return config


def plan_document(config: BenchConfig) -> dict[str, Any]:
    """The bench plan as the run directory and the store keep it."""
    return {"targets": list(config.targets), "workload": config.workload, "scale": str(config.scale),
            "reps": config.reps, "warmup": config.warmup, "until_ci_pct": config.until_ci_pct,
            "max_reps": config.max_reps, "seed": config.seed, "baseline": config.baseline_target,
            "metric": config.metric, "level": config.level, "cpus": config.cpus,
            "user_targets": [t.to_dict() for t in config.user_targets],
            "factors": [f.describe() for f in config.factors], "bases": list(config.bases),
            "blocked": config.blocked, "duration_s": config.duration_s}


class GuestExecutor:
    """Runs each trial as one ``bench-rep`` agent task in a booted machine."""

    def __init__(self, machine: Machine, config: BenchConfig) -> None:
        self.machine = machine
        self.config = config
        workload = get_workload(config.workload, duration_s=config.duration_s)
        self.timeout_s = workload.timeout_s(config.scale) + REPETITION_OVERHEAD_S
        self._targets = {t.name: t for t in resolve_targets(config)}
        self._disks = plan_disks(self._targets.values(), data_bytes=DATA_DISK_BYTES[config.scale])

    def request(self, trial: Trial) -> RepetitionRequest:
        target = self._targets[trial.target]
        journal = (self.machine.disk(self._disks.disk(target, "journal"))
                   if target.needs_journal_disk else None)
        return RepetitionRequest(target=target, workload=self.config.workload,
                                 scale=self.config.scale, duration_s=self.config.duration_s,
                                 data_dev=self.machine.disk(self._disks.disk(target, "data")),
                                 journal_dev=journal)

    def __call__(self, trial: Trial) -> RepetitionResult:
        return agent.perform(self.machine, BENCH_REPETITION, self.request(trial),
                             timeout_s=self.timeout_s)
