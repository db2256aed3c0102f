"""Crash points in a recorded log and the crash states built at each point.

A crash point is a log entry index p: the disk as it was right after
entry p. At every point powercut can build several *variants*:

- ``prefix``: entries 0..p in order, what an honest disk with a volatile
  cache is guaranteed to hold (dm-log-writes logs a plain write only once
  a later flush has completed). One order the log cannot keep: a FUA write
  is logged when it completes, a plain write only at the next flush, so a
  plain write over the same sectors that completed *before* the FUA write
  was issued is logged after it (see ``unordered_fuas``). Such a state has
  a second reading, ``reorder``, checked when the first fails.
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

import bisect
import dataclasses
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from crashcases.execute import MKFS_MARK, ORDER_SUFFIX
from crashcases.vocabulary import PointKind, VariantKind
from devicemapper.logformat import LogEntry
from framework.core.errors import ConfigError

END_MARK = "dm-log-writes-end"


@dataclass(frozen=True, slots=True)
class CrashPoint:
    index: int
    kind: PointKind
    last_mark: str | None  # the last workload mark at or before index
    last_barrier: int  # the last flush/FUA entry at or before index (-1: none)


#: A variant built on the journal disk of a two-disk run is named with this prefix
#: (``journal-lying:SEED``); the data disk stays at the mark.
JOURNAL_PREFIX = "journal-"


@dataclass(frozen=True, slots=True)
class Variant:
    kind: VariantKind
    seed: int = 0
    on_journal: bool = False  # built on the journal disk of a two-disk run

    @property
    def spec(self) -> str:
        base = self.kind.value if self.kind is VariantKind.PREFIX else f"{self.kind.value}:{self.seed}"
        return JOURNAL_PREFIX + base if self.on_journal else base

    @classmethod
    def parse(cls, spec: str) -> Variant:
        on_journal = spec.startswith(JOURNAL_PREFIX) and spec != JOURNAL_PREFIX + "prefix"
        kind, _, seed = spec.removeprefix(JOURNAL_PREFIX if on_journal else "").partition(":")
        try:
            vk = VariantKind(kind)
            return cls(vk, int(seed) if seed else 0, on_journal)
        except ValueError:
            raise ConfigError(
                f"variant {spec!r}: expected prefix, subset:SEED, torn:SEED or lying:SEED "
                f"(on the journal disk: {JOURNAL_PREFIX}subset:SEED, ...)"
            ) from None


@dataclass(frozen=True, slots=True)
class DiskState:
    """The journal disk's part of a two-disk state: its log replayed to ``base``, then
    ``extra`` entries applied (``torn`` limits some of them to a range of sectors)."""

    base: int
    extra: tuple[int, ...] = ()
    torn: dict[int, tuple[int, int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {"base": self.base, "extra": list(self.extra),
                "torn": {str(k): list(v) for k, v in self.torn.items()}}


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
    #: Two-disk runs: the journal disk's state (the fields above are the data disk's).
    journal: DiskState | None = None
    #: The state's other reading when the log cannot order a FUA write against plain
    #: writes over its sectors (``order_alternate``): these entries applied on top, in
    #: order; empty when the log's order is the only one. ``reorder_note`` says which.
    reorder: tuple[int, ...] = ()
    reorder_note: str = ""

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
            "journal": self.journal.to_dict() if self.journal is not None else None,
            **({"reorder": list(self.reorder), "reorder_note": self.reorder_note}
               if self.reorder else {}),
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


_STRATEGIES = {"marks": PointKind.MARK, "mark": PointKind.MARK, "distinct": PointKind.MARK,
               "fua": PointKind.FUA, "flush": PointKind.FLUSH, "every": PointKind.EVERY,
               "sample": PointKind.SAMPLE}


@dataclass(frozen=True, slots=True)
class Strategy:
    """Which crash points a run checks (``--points``): ``name`` as given, the kind of point
    it selects and its number (every:N, sample:K; else 0)."""

    name: str
    kind: PointKind
    arg: int = 0

    @property
    def spec(self) -> str:
        """The strategy as ``--points`` takes it (plan.json keeps it so)."""
        return f"{self.name}:{self.arg}" if self.arg else self.name

    @property
    def distinct(self) -> bool:
        """Only the marks whose window no earlier mark had (``distinct_marks``)."""
        return self.name == "distinct"

    @classmethod
    def parse(cls, text: str) -> Strategy:
        """``--points``'s value; a bad one is a one-line ConfigError."""
        name, _, arg = text.partition(":")
        if name not in _STRATEGIES:
            raise ConfigError(
                f"--points {text!r}: expected marks, distinct, fua, flush, every:N or sample:K")
        kind = _STRATEGIES[name]
        if kind in (PointKind.EVERY, PointKind.SAMPLE):
            if not arg.isdigit() or int(arg) < 1:
                raise ConfigError(f"--points {text!r}: {name} needs a positive whole number, "
                                  f"e.g. {name}:10")
            return cls(name, kind, int(arg))
        if arg:
            raise ConfigError(f"--points {text!r}: {name} takes no argument")
        return cls(name, kind)


MARKS = Strategy("marks", PointKind.MARK)


def enumerate_points(entries: Sequence[LogEntry], strategy: Strategy, *,
                     workload_marks: Iterable[str], seed: int = 0,
                     only: Iterable[str] | None = None) -> list[CrashPoint]:
    """The crash points a strategy selects, in log order (``only``: the marks a mark
    strategy may select, of ``workload_marks``; None: all)."""
    kind, arg = strategy.kind, strategy.arg
    marks = set(workload_marks)
    wanted = marks if only is None else marks & set(only)
    start = first_point(entries)
    chosen: list[tuple[int, PointKind]] = []
    selects = {
        PointKind.MARK: lambda e: e.is_mark and e.mark in wanted,
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


#: A packed sequence's directory (``s0017``) in an op's words.
_SEQUENCE_DIR = re.compile(r"\bs\d{4,}\b")


def distinct_marks(ops: Sequence[str], marks: Iterable[tuple[str, int]]) -> list[str]:
    """The marks ``--points distinct`` checks: each whose *window* (the ops after the mark
    before it, up to and including its own durability op, with every packed sequence's
    directory name left out) no earlier mark had.

    ``marks`` are (name, op index) in workload order. A packed workload (``gen:*``) runs the
    same setup, ending in ``sync``, before every sequence: that state is checked once, not
    once per sequence, and a budget reaches a third to a half more sequences.
    """
    seen: set[tuple[str, ...]] = set()
    keep: list[str] = []
    start = 0
    for name, op in marks:
        window = tuple(_SEQUENCE_DIR.sub("s*", text) for text in ops[start : op + 1])
        start = op + 1
        if window not in seen:
            seen.add(window)
            keep.append(name)
    return keep


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


@dataclass(frozen=True, slots=True)
class Variants:
    """The variant kinds a run builds at each point (``--variants``): ``names`` as given,
    the kinds built on the data disk, and those built on a journal disk of its own
    (``journal-lying``: the data disk stays at the mark)."""

    names: tuple[str, ...]
    data: tuple[VariantKind, ...]
    journal: tuple[VariantKind, ...] = ()

    @classmethod
    def parse(cls, names: Sequence[str]) -> Variants:
        """Variant kinds from their names; an unknown name is a one-line ConfigError.
        Whether the target has a journal disk for the journal's is the caller's question."""
        if not names:
            raise ConfigError("--variants: name at least one of prefix, subset, torn, lying")
        data: list[VariantKind] = []
        journal: list[VariantKind] = []
        for v in names:
            name = v.partition(":")[0]
            on_journal = name.startswith(JOURNAL_PREFIX)
            try:
                kind = VariantKind(name.removeprefix(JOURNAL_PREFIX))
            except ValueError:
                raise ConfigError(f"--variants {v!r}: expected prefix, subset, torn or lying "
                                  f"(or {JOURNAL_PREFIX}subset, {JOURNAL_PREFIX}torn, "
                                  f"{JOURNAL_PREFIX}lying on a journal disk)") from None
            if on_journal and kind is VariantKind.PREFIX:
                raise ConfigError(f"--variants {v!r}: the prefix state has both disks at the "
                                  "mark already; name it prefix")
            (journal if on_journal else data).append(kind)
        return cls(tuple(names), tuple(data), tuple(journal))

    @property
    def on_journal(self) -> tuple[str, ...]:
        """The names of the variants built on a journal disk."""
        return tuple(v for v in self.names if v.startswith(JOURNAL_PREFIX))

    @property
    def kinds(self) -> tuple[VariantKind, ...]:
        """Every kind named, on either disk."""
        return (*self.data, *self.journal)


PREFIX_ONLY = Variants(("prefix",), (VariantKind.PREFIX,))


def plan_states(entries: Sequence[LogEntry], points: Sequence[CrashPoint], variants: Variants,
                *, workload_marks: Iterable[str], seed: int = 0, per_point: int = 2) -> list[CrashState]:
    """Every crash state to check, sorted so the replay base only moves forward.

    ``variants``' kinds on the data disk are built (prefix, subset, torn, lying);
    ``per_point`` caps the seeded variants of each kind at each point. Variants that
    would equal the prefix state are skipped.
    """
    marks = set(workload_marks)
    kinds = variants.data
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
    unordered = unordered_fuas(entries)
    states = [order_alternate(entries, s, unordered) for s in states]
    states.sort(key=lambda s: (s.base, s.point.index, s.variant.kind != VariantKind.PREFIX, s.key))
    return states


class Unexplored(StrEnum):
    """Why a two-disk state was left out: its two halves may never have coexisted."""

    UNORDERED_MARK = "the data disk completed writes while the journal disk was marked"
    JOURNAL_BUSY = "the journal disk wrote in the window, in an order against the data disk's writes that the logs do not keep"


def plan_two_disk_states(entries: Sequence[LogEntry], journal_entries: Sequence[LogEntry],
                         points: Sequence[CrashPoint], variants: Variants, *,
                         workload_marks: Iterable[str], seed: int = 0, per_point: int = 2
                         ) -> tuple[list[CrashState], dict[str, int]]:
    """The states of a run that recorded the data disk and the journal disk on two logs.

    Both logs carry every workload mark; the data log also has NAME + ORDER_SUFFIX
    right after the journal's NAME. The logs keep each disk's order, never the
    order between the disks, so a state pairs a data-disk state with the one
    journal-disk state that must have existed at the same instant:

    - at a mark: the data disk's state (any variant) with the journal disk at the
      same mark, if the data log holds nothing between NAME and NAME + ORDER_SUFFIX
      (both disks stood still while they were marked);
    - inside a window (after mark m, before the next): the data disk's state with
      the journal disk at m, only if the journal log holds no write or flush in that
      window (its state could not have moved);
    - journal variants (``journal-lying`` ...) at a mark: the journal disk's variant
      with the data disk at the same mark.

    Returns the states in replay order and how many were left out, by reason.
    """
    logs = TwoLogs(entries, journal_entries, workload_marks)
    data_kinds, journal_kinds = variants.data, variants.journal
    states: list[CrashState] = []
    keys: set[str] = set()
    skipped: dict[str, int] = {}
    for point in points:
        chosen = [Variant(VariantKind.PREFIX)] if VariantKind.PREFIX in data_kinds else []
        chosen += [Variant(kind, _derive(seed, point.index, kind, n))
                   for kind in data_kinds if kind is not VariantKind.PREFIX for n in range(per_point)]
        chosen += [Variant(kind, _derive(seed, point.index, kind, n) ^ 1, on_journal=True)
                   for kind in journal_kinds for n in range(per_point)]
        for variant in chosen:
            state, why = logs.state(point, variant)
            if state is None:
                if why is not None:
                    skipped[why.value] = skipped.get(why.value, 0) + 1
            elif state.key not in keys:
                keys.add(state.key)
                states.append(state)
    states.sort(key=lambda s: (s.base, s.journal.base if s.journal else -1, s.point.index,
                               s.variant.kind != VariantKind.PREFIX, s.key))
    return states, skipped


class TwoLogs:
    """The data log and the journal log of a two-disk recording, indexed by mark."""

    def __init__(self, entries: Sequence[LogEntry], journal_entries: Sequence[LogEntry],
                 workload_marks: Iterable[str]) -> None:
        self.entries, self.journal_entries = entries, journal_entries
        self.marks = list(workload_marks)
        self.mark_set = set(self.marks)
        self.data_marks = _first_marks(entries)
        self.journal_marks = _first_marks(journal_entries)
        self._busy: dict[int, bool] = {}
        self._fuas: Unordered | None = None

    def state(self, point: CrashPoint, variant: Variant) -> tuple[CrashState | None, Unexplored | None]:
        """The two-disk state of ``variant`` at ``point`` (a data-log index), or None and
        why (the reason is None when the variant does not exist there)."""
        window = point.last_mark or MKFS_MARK
        data_at = self.data_marks.get(window)
        journal_at = self.journal_marks.get(window)
        after = self.data_marks.get(window + ORDER_SUFFIX)
        if data_at is None or journal_at is None or after is None or any(
                _is_data(e) or _is_barrier(e) for e in self.entries[data_at + 1: after]):
            return None, Unexplored.UNORDERED_MARK
        at_mark = point.index in (data_at, after)
        if variant.on_journal:
            if not at_mark:
                return None, None
            jlog = self.journal_entries
            jpoint = annotate(jlog, [(journal_at, PointKind.MARK)], self.mark_set)[0]
            jwindow = [e for e in jlog[jpoint.last_barrier + 1: journal_at + 1] if _is_data(e)]
            jstate = _variant_state(jlog, jpoint, variant.kind, variant.seed, jwindow, self.mark_set)
            if jstate is None:
                return None, None
            return order_alternate(self.entries, CrashState(
                point, variant, point.index,
                journal=DiskState(jstate.base, jstate.extra, jstate.torn)), self._unordered()), None
        if not at_mark and self._journal_busy(journal_at):
            return None, Unexplored.JOURNAL_BUSY
        state = build_state(self.entries, point, variant, self.marks, self._unordered())
        if state is None:
            return None, None
        return dataclasses.replace(state, journal=DiskState(journal_at)), None

    def _unordered(self) -> Unordered:
        if self._fuas is None:
            self._fuas = unordered_fuas(self.entries)
        return self._fuas

    def _journal_busy(self, start: int) -> bool:
        """Whether the journal log holds a write or flush after mark ``start``, before the
        next workload mark (or its end)."""
        if start not in self._busy:
            busy = False
            for e in self.journal_entries[start + 1:]:
                if e.is_mark and e.mark in self.mark_set:
                    break
                if _is_data(e) or _is_barrier(e):
                    busy = True
                    break
            self._busy[start] = busy
        return self._busy[start]


def _first_marks(entries: Sequence[LogEntry]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in entries:
        if e.is_mark and e.mark is not None:
            out.setdefault(e.mark, e.index)
    return out


def _derive(seed: int, index: int, kind: VariantKind, n: int) -> int:
    return random.Random(f"{seed}:{index}:{kind.value}:{n}").randrange(1, 2**31)


def build_state(entries: Sequence[LogEntry], point: CrashPoint, variant: Variant,
                workload_marks: Iterable[str],
                unordered: Unordered | None = None) -> CrashState | None:
    """Rebuild a state from its point and variant spec (for reproducers); ``unordered``:
    the log's ``unordered_fuas``, when the caller has them."""
    if unordered is None:
        unordered = unordered_fuas(entries)
    if variant.kind is VariantKind.PREFIX:
        return order_alternate(entries, CrashState(point, variant, point.index), unordered)
    window = [e for e in entries[point.last_barrier + 1: point.index + 1] if _is_data(e)]
    state = _variant_state(entries, point, variant.kind, variant.seed, window, set(workload_marks))
    return None if state is None else order_alternate(entries, state, unordered)


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


# --- the order the log cannot keep --------------------------------------------------

class Unordered(dict[int, tuple[int, ...]]):
    """FUA entry -> the plain entries the log cannot order against it (``unordered_fuas``),
    with ``reach``: every entry that a state's other reading could ever apply again (the
    FUA writes, and each later entry over sectors an entry already reached wrote)."""

    reach: frozenset[int] = frozenset()
    reach_sorted: tuple[int, ...] = ()


class _Spans:
    """Disjoint half-open sector ranges, sorted: overlap tests in O(log n)."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def overlaps(self, lo: int, hi: int) -> bool:
        i = bisect.bisect_right(self.starts, lo) - 1
        if i >= 0 and self.ends[i] > lo:
            return True
        return i + 1 < len(self.starts) and self.starts[i + 1] < hi

    def add(self, lo: int, hi: int) -> None:
        i = bisect.bisect_left(self.ends, lo)  # the first range that ends at or after lo
        j = bisect.bisect_right(self.starts, hi)  # ranges from i to j-1 touch [lo, hi)
        if i < j:
            lo, hi = min(lo, self.starts[i]), max(hi, self.ends[j - 1])
        self.starts[i:j] = [lo]
        self.ends[i:j] = [hi]


def unordered_fuas(entries: Sequence[LogEntry]) -> Unordered:
    """Each FUA write the log may have placed too early: its index, and the plain writes
    and discards logged after it over its sectors that may have reached the disk first.

    dm-log-writes logs a FUA write as soon as it completes, but a plain write only when
    the next flush completes (drivers/md/dm-log-writes.c, normal_end_io, 7.3;
    Documentation/admin-guide/device-mapper/log-writes.rst). A plain write over the same
    sectors that completed before the FUA write was even issued (page-cache writeback
    that a direct write on an O_DSYNC or FS_SYNC_FL file waits for, mm/filemap.c
    kiocb_invalidate_pages, before iomap issues it with REQ_FUA, fs/iomap/direct-io.c)
    is logged after it, and so is one issued after the FUA write completed: the log
    holds both in one order. The candidates stop at the next flush (after it the log's
    order is the disk's again) and at a later FUA write over the same sectors (FUA
    writes are logged in completion order among themselves). A write with a preflush is
    not a candidate: plain writes completed before it are logged before it.
    """
    out = Unordered()
    for pos, d in enumerate(entries):
        if not (d.is_write and d.is_fua) or d.is_flush or d.is_mark:
            continue
        lo, hi = d.sector, d.sector + d.nr_sectors
        later: list[int] = []
        for e in entries[pos + 1:]:
            if e.is_flush:
                break
            if not _is_data(e) or e.sector >= hi or e.sector + e.nr_sectors <= lo:
                continue
            if e.is_fua:
                break
            later.append(e.index)
        if later:
            out[d.index] = tuple(later)
    if out:
        # An entry a state's other reading applies again overlaps a moved FUA write or an
        # entry applied again before it; moved writes only go later, so every such entry
        # overlaps one of these, earlier in the log.
        spans = _Spans()
        reach: set[int] = set()
        for e in entries[min(out):]:
            if not _is_data(e):
                continue
            lo, hi = e.sector, e.sector + e.nr_sectors
            if e.index in out or spans.overlaps(lo, hi):
                reach.add(e.index)
                spans.add(lo, hi)
        out.reach, out.reach_sorted = frozenset(reach), tuple(sorted(reach))
    return out


def order_alternate(entries: Sequence[LogEntry], state: CrashState,
                    unordered: Unordered) -> CrashState:
    """``state`` with its other reading attached when it applies a FUA write of
    ``unordered`` before plain writes the log cannot order against it.

    The other reading applies each such FUA write right after the last of those plain
    writes the state holds. It is built as the state plus ``reorder``: the moved FUA
    writes and every later entry over sectors they (or an entry already taken) touch,
    in the new order, applied on top. A sector no taken entry writes keeps the state's
    bytes; a sector one writes ends with its last writer in the new order, because any
    later writer of it is taken too. Only entries of ``unordered.reach`` can be taken, so
    only they are looked at.
    """
    if not unordered:
        return state
    applied = set(state.extra)
    held = [d for d in unordered if d <= state.base or d in applied]
    moves = {d: [c for c in unordered[d] if c <= state.base or c in applied] for d in held}
    moves = {d: cs for d, cs in moves.items() if cs}
    if not moves:
        return state
    # The state's order from the first moved FUA write on, of the entries that could be
    # taken (a state's extra entries come after its base, in log order).
    start, reach = min(moves), unordered.reach
    low = bisect.bisect_left(unordered.reach_sorted, start)
    high = bisect.bisect_right(unordered.reach_sorted, state.base)
    order = list(unordered.reach_sorted[low:high]) + [
        i for i in state.extra if i >= start and i in reach]
    new = list(order)
    for d, cs in sorted(moves.items()):
        new.remove(d)
        new.insert(new.index(cs[-1]) + 1, d)
    first = next(i for i, (a, b) in enumerate(zip(order, new)) if a != b)
    taken: list[int] = []
    spans = _Spans()
    for k in new[first:]:
        e = entries[k]
        lo, hi = e.sector, e.sector + e.nr_sectors
        if k in moves or spans.overlaps(lo, hi):
            taken.append(k)
            spans.add(lo, hi)
    pairs = "; ".join(f"FUA entry {d} against plain {'entries' if len(cs) > 1 else 'entry'} "
                      f"{', '.join(map(str, cs))}" for d, cs in sorted(moves.items()))
    note = (f"the log cannot order {pairs} over the same sectors: dm-log-writes logs a FUA "
            "write when it completes and a plain write only at the next flush, so the plain "
            "write may have reached the disk first (log-writes.rst; dm-log-writes.c "
            "normal_end_io)")
    return dataclasses.replace(state, reorder=tuple(taken), reorder_note=note)
