"""The order dm-log-writes cannot keep: a FUA write logged before plain writes over its
sectors that may have reached the disk first, and the other reading of such a state."""

from __future__ import annotations

import random

import pytest

from crashcases.check import CheckResult
from crashcases.crash.guest import StateRecipe, _other_readings
from crashcases.crash.points import (
    MARKS,
    PREFIX_ONLY,
    CrashState,
    Variant,
    Variants,
    _Spans,
    annotate,
    build_state,
    enumerate_points,
    order_alternate,
    plan_states,
    unordered_fuas,
)
from crashcases.vocabulary import OTHER_READING_PASSED, Outcome, PointKind, VariantKind
from devicemapper.logformat import LogEntry, LogFlag
from recovery.targets import get_target

W, F, FUA, M, D = LogFlag.NONE, LogFlag.FLUSH, LogFlag.FUA, LogFlag.MARK, LogFlag.DISCARD


def log(*spec: tuple[LogFlag, int, int, str | None]) -> list[LogEntry]:
    """Entries from (flags, sector, nr_sectors, mark)."""
    return [LogEntry(i, sector, n, fl, 0, mark, 0, 0, 512)
            for i, (fl, sector, n, mark) in enumerate(spec)]


# The shape a direct write on an FS_SYNC_FL file leaves: the mapped page's writeback (8,
# plain) completes, then the O_DIRECT write over it (6, FUA) is issued and logged at
# once; the plain write waits for the sync's flush and is logged after the FUA write.
DIO = log(
    (W, 0, 8, None), (F, 0, 0, None), (M, 0, 0, "mkfs"),     # 0-2
    (W, 40, 8, None), (F, 0, 0, None), (M, 0, 0, "pc-0"),     # 3-5
    (FUA, 64, 8, None), (M, 0, 0, "pc-1"),                     # 6-7
    (W, 64, 8, None), (W, 200, 8, None), (F, 0, 0, None),     # 8-10
    (M, 0, 0, "pc-2"), (M, 0, 0, "dm-log-writes-end"),        # 11-12
)


def test_a_fua_write_is_unordered_against_later_plain_writes_over_it_until_a_flush():
    assert unordered_fuas(DIO) == {6: (8,)}
    entries = log(
        (FUA, 10, 4, None),          # 0: against 1 (overlaps) and 3 (discard), not 2
        (W, 12, 4, None), (W, 20, 4, None), (D, 8, 4, None),
        (FUA, 10, 1, None),          # 4: a FUA write over it: ordered after 0
        (W, 10, 4, None),            # 5: after 4 for 0; unordered against 4
        (F, 0, 0, None),             # 6
        (W, 10, 4, None),            # 7: after the flush: ordered
        (F | FUA, 30, 2, None),      # 8: a preflush write: never a candidate
        (W, 30, 2, None),
    )
    assert unordered_fuas(entries) == {0: (1, 3), 4: (5,)}


def test_only_states_holding_both_writes_get_the_other_reading():
    points = enumerate_points(DIO, MARKS, workload_marks=["pc-0", "pc-1", "pc-2"])
    states = {s.point.last_mark: s for s in plan_states(
        DIO, points, PREFIX_ONLY, workload_marks=["pc-0", "pc-1", "pc-2"])}
    assert states["pc-0"].reorder == () and states["pc-1"].reorder == ()
    assert states["pc-2"].reorder == (6,)
    assert "FUA entry 6 against plain entry 8" in states["pc-2"].reorder_note
    assert states["pc-2"].to_dict()["reorder"] == [6]
    # A reproducer rebuilds the same reading from the key.
    point = annotate(DIO, [(11, PointKind.SAMPLE)], {"pc-0", "pc-1", "pc-2"})[0]
    again = build_state(DIO, point, Variant(VariantKind.PREFIX), ["pc-0", "pc-1", "pc-2"])
    assert again is not None and again.reorder == (6,)


def last_writers(entries: list[LogEntry], order: list[int], torn: dict[int, tuple[int, int]]
                 ) -> dict[int, int]:
    """Sector -> the entry that wrote it last, applying ``order``."""
    disk: dict[int, int] = {}
    for k in order:
        e = entries[k]
        lo, hi = e.sector, e.sector + e.nr_sectors
        if k in torn:
            lo, hi = e.sector + torn[k][0], e.sector + torn[k][1]
        for s in range(lo, hi):
            disk[s] = k
    return disk


def random_log(rng: random.Random, sectors: int = 24) -> list[LogEntry]:
    spec: list[tuple[LogFlag, int, int, str | None]] = [(W, 0, 4, None), (F, 0, 0, None),
                                                        (M, 0, 0, "mkfs")]
    for n in range(rng.randrange(10, 40)):
        roll = rng.random()
        if roll < 0.1:
            spec.append((F, 0, 0, None))
        elif roll < 0.2:
            spec.append((M, 0, 0, f"pc-{n}"))
        else:
            flags = rng.choice([W, W, W, FUA, FUA, D, F | FUA])
            spec.append((flags, rng.randrange(0, sectors), rng.randrange(1, 8), None))
    return log(*spec)


@pytest.mark.parametrize("sectors", [24, 120])
@pytest.mark.parametrize("seed", range(40))
def test_the_other_reading_is_the_log_with_each_fua_write_moved_after_its_plain_writes(
        seed, sectors):
    """state + reorder must hold exactly the bytes of the moved order, in every variant
    (on a small disk most entries overlap; on a wider one few do)."""
    rng = random.Random(seed)
    entries = random_log(rng, sectors)
    marks = [e.mark for e in entries if e.is_mark and e.mark != "mkfs"]
    unordered = unordered_fuas(entries)
    points = enumerate_points(entries, MARKS.parse("every:1"), workload_marks=marks)
    variants = Variants.parse(["prefix", "subset", "torn", "lying"])
    states = plan_states(entries, points, variants, workload_marks=marks, seed=seed, per_point=3)
    for state in states:
        data = [e.index for e in entries[: state.base + 1]
                if (e.is_write or e.is_discard) and not e.is_mark]
        order = data + list(state.extra)
        moved = list(order)
        for d in sorted(unordered):
            later = [c for c in unordered[d] if c in order]
            if d in order and later:
                moved.remove(d)
                moved.insert(moved.index(later[-1]) + 1, d)
        torn = dict(state.torn)
        if moved == order:
            assert state.reorder == ()
            continue
        assert state.reorder, state.key
        want = last_writers(entries, moved, torn)
        got = last_writers(entries, order + list(state.reorder), torn)
        assert got == want, state.key


def recipe(key: str, reorder: tuple[int, ...] = ()) -> StateRecipe:
    return StateRecipe(key, "pc-2", 10, reorder=reorder, reorder_note="the log cannot order x")


class Lane:
    def __init__(self) -> None:
        self.target = get_target("ext4/ordered")


def test_a_failure_that_holds_only_in_the_logs_order_is_not_a_finding():
    group = [recipe("10/prefix", (6,)), recipe("11/prefix", (6,))]
    first = [CheckResult(key="10/prefix", outcome=Outcome.DATA_LOSS, explanation="lost bytes"),
             CheckResult(key="11/prefix", outcome=Outcome.OK)]
    asked: list[list[tuple[str, str | None]]] = []

    def other(lane, r, states):
        asked.append(states)
        return [CheckResult(key=k, outcome=Outcome.OK) for k, _ in states]

    out = _other_readings(group, first, Lane(), other)
    assert asked == [[("10/prefix", "pc-2")]]  # only the failing state, once
    assert out[0].outcome is Outcome.OK and out[0].notes[0].startswith("not a finding")
    assert "lost bytes" in out[0].notes[0] and "entries 6" in out[0].notes[0]
    assert out[1] is first[1]


def test_a_failure_in_both_orders_stays_and_a_state_without_another_reading_is_not_asked():
    """The positive control: the second check cannot hide a failure that holds anyway."""
    group = [recipe("10/prefix", (6,)), recipe("10/lying:3")]
    first = [CheckResult(key="10/prefix", outcome=Outcome.CORRUPT),
             CheckResult(key="10/lying:3", outcome=Outcome.DATA_LOSS)]

    def other(lane, r, states):
        assert [k for k, _ in states] == ["10/prefix"]
        return [CheckResult(key=k, outcome=Outcome.CORRUPT) for k, _ in states]

    out = _other_readings(group, first, Lane(), other)
    assert [r.outcome for r in out] == [Outcome.CORRUPT, Outcome.DATA_LOSS]
    assert out[0].notes[-1].startswith("fails in both orders")
    assert out[1].notes == []


@pytest.mark.parametrize("seed", range(20))
def test_sector_spans_answer_overlaps_as_a_set_of_sectors_does(seed):
    rng = random.Random(seed)
    spans, sectors = _Spans(), set()
    for _ in range(40):
        lo = rng.randrange(0, 200)
        hi = lo + rng.randrange(1, 20)
        q_lo = rng.randrange(0, 200)
        q_hi = q_lo + rng.randrange(1, 20)
        assert spans.overlaps(q_lo, q_hi) == bool(sectors & set(range(q_lo, q_hi)))
        spans.add(lo, hi)
        sectors |= set(range(lo, hi))
        assert all(a < b for a, b in zip(spans.ends, spans.starts[1:]))  # disjoint, sorted


def test_recipes_carry_the_other_reading_to_the_guest():
    state = order_alternate(DIO, CrashState(annotate(DIO, [(11, PointKind.MARK)], {"pc-2"})[0],
                                            Variant(VariantKind.PREFIX), 11), unordered_fuas(DIO))
    r = StateRecipe.of(state)
    assert r.reorder == (6,) and r.other_reading.extra == (6,)
    assert StateRecipe.from_dict(r.to_dict()) == r
    plain = StateRecipe.from_dict({"key": "1/prefix", "last_mark": None, "base": 1})
    assert plain.reorder == () and "reorder" not in plain.to_dict()


def test_a_run_counts_the_states_that_passed_on_their_other_reading():
    from crashcases.crash.plan import CrashRunResult
    result = CrashRunResult.__new__(CrashRunResult)
    result.results = {
        "9/prefix": CheckResult(key="9/prefix", notes=[OTHER_READING_PASSED + "x"]),
        "3/prefix": CheckResult(key="3/prefix", notes=[OTHER_READING_PASSED + "y"]),
        "4/prefix": CheckResult(key="4/prefix", outcome=Outcome.CORRUPT,
                                notes=["fails in both orders: z"]),
    }
    assert result.passed_on_other_reading() == ["3/prefix", "9/prefix"]
