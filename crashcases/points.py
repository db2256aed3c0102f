"""Crash points in a recorded log and the crash states built at each point.

A crash point is a log entry index p: the disk as it was right after
entry p. At every point powercut can build several *variants*:

- ``prefix``: entries 0..p in order, what an honest disk with a volatile
  cache is guaranteed to hold (dm-log-writes logs a plain write only once
  a later flush has completed, so the prefix is always a legal state).
- ``subset:SEED``: the state at the last flush or FUA at or before p, plus
  a seeded subset of the writes logged after it: a disk may persist any of
  the writes still in its cache, in any order.
- ``torn:SEED``: like subset, with one multi-sector write only partly on disk.
- ``lying:SEED``: a disk that ignores flushes. Starting two marks back, a
  seeded subset of the writes is dropped whatever flushes came between; data
  promised durable may be lost. It is the positive control: a checker that
  reports nothing for lying states is broken.

Every state is a pure function of the log index and its variant spec, so a
state key such as ``1234/subset:77`` rebuilds the same bytes anywhere.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from devicemapper.logformat import LogEntry
from framework.core.errors import ConfigError


class CrashPointKind(StrEnum):
    """How a crash point was chosen."""

    MARK = "mark"
    FUA = "fua"
    FLUSH = "flush"
    EVERY = "every"
    SAMPLE = "sample"


class VariantKind(StrEnum):
    """Which state is built at a crash point (see the module docstring)."""

    PREFIX = "prefix"
    SUBSET = "subset"
    TORN = "torn"
    LYING = "lying"


PointKind = CrashPointKind

MKFS_MARK = "mkfs"
END_MARK = "dm-log-writes-end"


@dataclass(frozen=True, slots=True)
class CrashPoint:
    index: int
    kind: PointKind
    last_mark: str | None  # the last workload mark at or before index
    last_barrier: int  # the last flush/FUA entry at or before index (-1: none)


@dataclass(frozen=True, slots=True)
class Variant:
    kind: VariantKind
    seed: int = 0

    @property
    def spec(self) -> str:
        return self.kind.value if self.kind is VariantKind.PREFIX else f"{self.kind.value}:{self.seed}"

    @classmethod
    def parse(cls, spec: str) -> Variant:
        kind, _, seed = spec.partition(":")
        try:
            vk = VariantKind(kind)
            return cls(vk, int(seed) if seed else 0)
        except ValueError:
            raise ConfigError(
                f"variant {spec!r}: expected prefix, subset:SEED, torn:SEED or lying:SEED"
            ) from None


@dataclass(frozen=True, slots=True)
class CrashState:
    """How to build one crash state: replay entries 0..base, then apply
    ``extra`` entries (in order) on top; ``torn`` limits some of them to a
    range of their sectors."""

    point: CrashPoint
    variant: Variant
    base: int
    extra: tuple[int, ...] = ()
    torn: dict[int, tuple[int, int]] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.point.index}/{self.variant.spec}"

    def to_dict(self) -> dict[str, object]:
        return {
            "key": self.key,
            "point": self.point.index,
            "point_kind": self.point.kind.value,
            "last_mark": self.point.last_mark,
            "variant": self.variant.spec,
            "base": self.base,
            "extra": list(self.extra),
            "torn": {str(k): list(v) for k, v in self.torn.items()},
        }


def _is_barrier(e: LogEntry) -> bool:
    return e.is_flush or e.is_fua


def _is_data(e: LogEntry) -> bool:
    return (e.is_write or e.is_discard) and not e.is_mark


def first_point(entries: Sequence[LogEntry]) -> int:
    """Crash points start after mkfs: earlier states hold no filesystem yet."""
    for e in entries:
        if e.is_mark and e.mark == MKFS_MARK:
            return e.index
    return 0


def parse_strategy(strategy: str) -> tuple[PointKind, int]:
    name, _, arg = strategy.partition(":")
    try:
        kind = {"marks": PointKind.MARK, "mark": PointKind.MARK, "fua": PointKind.FUA,
                "flush": PointKind.FLUSH, "every": PointKind.EVERY, "sample": PointKind.SAMPLE}[name]
    except KeyError:
        raise ConfigError(
            f"--points {strategy!r}: expected marks, fua, flush, every:N or sample:K"
        ) from None
    if kind in (PointKind.EVERY, PointKind.SAMPLE):
        if not arg.isdigit() or int(arg) < 1:
            raise ConfigError(f"--points {strategy!r}: {name} needs a positive whole number, e.g. {name}:10")
        return kind, int(arg)
    if arg:
        raise ConfigError(f"--points {strategy!r}: {name} takes no argument")
    return kind, 0


def enumerate_points(entries: Sequence[LogEntry], strategy: str, *, workload_marks: Iterable[str],
                     seed: int = 0) -> list[CrashPoint]:
    """The crash points a strategy selects, in log order."""
    kind, arg = parse_strategy(strategy)
    marks = set(workload_marks)
    start = first_point(entries)
    chosen: list[tuple[int, PointKind]] = []
    selects = {
        PointKind.MARK: lambda e: e.is_mark and e.mark in marks,
        PointKind.FUA: lambda e: e.is_fua,
        PointKind.FLUSH: lambda e: e.is_flush,
        PointKind.EVERY: lambda e: (e.index - start) % arg == 0,
        PointKind.SAMPLE: lambda e: False,
    }[kind]
    for e in entries:
        if e.index >= start and not (e.is_mark and e.mark == END_MARK) and selects(e):
            chosen.append((e.index, kind))
    if kind is PointKind.SAMPLE:
        pool = [e.index for e in entries if e.index >= start and not (e.is_mark and e.mark == END_MARK)]
        picked = sorted(random.Random(seed).sample(pool, min(arg, len(pool))))
        chosen = [(i, kind) for i in picked]
    return annotate(entries, chosen, marks)


def annotate(entries: Sequence[LogEntry], chosen: Iterable[tuple[int, PointKind]],
             marks: set[str]) -> list[CrashPoint]:
    """Attach the last workload mark and the last barrier to each chosen index."""
    wanted = dict(chosen)
    points = []
    last_mark: str | None = None
    last_barrier = -1
    for e in entries:
        if e.is_mark and e.mark in marks:
            last_mark = e.mark
        if _is_barrier(e):
            last_barrier = e.index
        if e.index in wanted:
            points.append(CrashPoint(e.index, wanted[e.index], last_mark, last_barrier))
    return points


def _mark_before(entries: Sequence[LogEntry], point: CrashPoint, marks: set[str]) -> int:
    """Index of the workload mark before the point's last mark (or the mkfs mark)."""
    seen: list[int] = [first_point(entries)]
    for e in entries[: point.index + 1]:
        if e.is_mark and e.mark in marks:
            seen.append(e.index)
    return seen[-2] if len(seen) >= 2 else seen[0]


def parse_variants(variants: Sequence[str]) -> list[VariantKind]:
    """Variant kinds from their names; an unknown name is a one-line ConfigError."""
    kinds = []
    for v in variants:
        try:
            kinds.append(VariantKind(v.partition(":")[0]))
        except ValueError:
            raise ConfigError(f"--variants {v!r}: expected prefix, subset, torn or lying") from None
    if not kinds:
        raise ConfigError("--variants: name at least one of prefix, subset, torn, lying")
    return kinds


def plan_states(entries: Sequence[LogEntry], points: Sequence[CrashPoint], variants: Sequence[str],
                *, workload_marks: Iterable[str], seed: int = 0, per_point: int = 2) -> list[CrashState]:
    """Every crash state to check, sorted so the replay base only moves forward.

    ``variants`` names kinds (prefix, subset, torn, lying); ``per_point`` caps
    the seeded variants of each kind at each point. Variants that would equal
    the prefix state are skipped.
    """
    marks = set(workload_marks)
    kinds = parse_variants(variants)
    states: list[CrashState] = []
    for point in points:
        window = [e for e in entries[point.last_barrier + 1: point.index + 1] if _is_data(e)]
        for kind in kinds:
            if kind is VariantKind.PREFIX:
                states.append(CrashState(point, Variant(kind), point.index))
                continue
            for n in range(per_point):
                vseed = _derive(seed, point.index, kind, n)
                state = _variant_state(entries, point, kind, vseed, window, marks)
                if state is not None and state.key not in {s.key for s in states}:
                    states.append(state)
    states.sort(key=lambda s: (s.base, s.point.index, s.variant.kind != VariantKind.PREFIX, s.key))
    return states


def _derive(seed: int, index: int, kind: VariantKind, n: int) -> int:
    return random.Random(f"{seed}:{index}:{kind.value}:{n}").randrange(1, 2**31)


def build_state(entries: Sequence[LogEntry], point: CrashPoint, variant: Variant,
                workload_marks: Iterable[str]) -> CrashState | None:
    """Rebuild a state from its point and variant spec (for reproducers)."""
    if variant.kind is VariantKind.PREFIX:
        return CrashState(point, variant, point.index)
    window = [e for e in entries[point.last_barrier + 1: point.index + 1] if _is_data(e)]
    return _variant_state(entries, point, variant.kind, variant.seed, window, set(workload_marks))


def _variant_state(entries: Sequence[LogEntry], point: CrashPoint, kind: VariantKind, vseed: int,
                   window: list[LogEntry], marks: set[str]) -> CrashState | None:
    rng = random.Random(vseed)
    variant = Variant(kind, vseed)
    if kind is VariantKind.SUBSET:
        if not window:
            return None
        keep = tuple(e.index for e in window if rng.random() < 0.5)
        if len(keep) == len(window):  # identical to the prefix state
            keep = keep[:-1]
        return CrashState(point, variant, point.last_barrier, keep)
    if kind is VariantKind.TORN:
        multi = [e for e in window if e.is_write and e.nr_sectors >= 2]
        if not multi:
            return None
        victim = rng.choice(multi)
        cut = rng.randrange(1, victim.nr_sectors)
        extra = tuple(e.index for e in window if e.index <= victim.index)
        return CrashState(point, variant, point.last_barrier, extra, {victim.index: (0, cut)})
    if kind is not VariantKind.LYING:
        raise ConfigError(f"variant kind {kind!r}: expected one of {', '.join(k.value for k in VariantKind)}")
    # LYING: ignore flushes back to the mark before the last one.
    start = _mark_before(entries, point, marks)
    span = [e for e in entries[start + 1: point.index + 1] if _is_data(e)]
    if not span:
        return None
    keep = tuple(e.index for e in span if rng.random() < 0.5)
    if len(keep) == len(span):
        keep = keep[1:]
    return CrashState(point, variant, start, keep)
