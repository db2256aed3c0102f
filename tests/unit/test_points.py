"""Crash points and crash-state variants from a log index."""

from __future__ import annotations

import pytest

from crashcases.crash.points import (
    Strategy,
    Variant,
    Variants,
    build_state,
    distinct_marks,
    enumerate_points,
    plan_states,
)
from crashcases.vocabulary import CrashPointKind, VariantKind
from devicemapper.logformat import LogEntry, LogFlag
from framework.core.errors import ConfigError

W, F, FUA, M = LogFlag.NONE, LogFlag.FLUSH, LogFlag.FUA, LogFlag.MARK


def log(*spec: tuple[LogFlag, int, str | None]) -> list[LogEntry]:
    """Entries from (flags, nr_sectors, mark) triples; offsets do not matter here."""
    return [LogEntry(i, 100 * i, n, fl, 0, mark, 0, 0, 512) for i, (fl, n, mark) in enumerate(spec)]


# mkfs writes, flush, mkfs mark, then two fsync rounds each ending with a mark.
ENTRIES = log(
    (W, 8, None), (F, 0, None), (M, 0, "mkfs"),          # 0-2
    (W, 8, None), (W, 4, None), (F, 0, None), (M, 0, "pc-0"),  # 3-6
    (W, 8, None), (FUA, 2, None), (W, 1, None), (W, 16, None),  # 7-10
    (F, 0, None), (M, 0, "pc-1"), (W, 8, None), (M, 0, "dm-log-writes-end"),  # 11-14
)
MARKS = ["pc-0", "pc-1"]


def test_mark_points_follow_the_workload_marks_only():
    points = enumerate_points(ENTRIES, Strategy.parse("marks"), workload_marks=MARKS)
    assert [(p.index, p.last_mark, p.last_barrier) for p in points] == [(6, "pc-0", 5), (12, "pc-1", 11)]


def test_distinct_checks_a_packed_setup_once_and_every_new_window():
    """Two packed sequences with the same setup: the second setup's sync is not checked
    again; a window that differs anywhere but in the sequence's directory name is."""
    setup = ["mkdir {ns}", "creat {ns}/f0", "write {ns}/f0 100B", "sync"]
    ops = [t.format(ns="s0000") for t in setup] + ["rename s0000/f0 -> s0000/g", "fsync_dir s0000"]
    ops += [t.format(ns="s0001") for t in setup] + ["rename s0001/f0 -> s0001/h", "fsync_dir s0001"]
    ops += ["unlink s0000/g", "unlink s0001/h", "sync"]
    marks = [(f"pc-{n}", i) for n, i in enumerate(i for i, t in enumerate(ops)
                                                 if t == "sync" or t.startswith("fsync"))]
    assert [i for _, i in marks] == [3, 5, 9, 11, 14]
    assert distinct_marks(ops, marks) == ["pc-0", "pc-1", "pc-3", "pc-4"]
    # The strategy keeps the marks given and the points' last marks.
    points = enumerate_points(ENTRIES, Strategy.parse("distinct"), workload_marks=MARKS, only=["pc-1"])
    assert [(p.index, p.last_mark) for p in points] == [(12, "pc-1")]
    assert Strategy.parse("distinct").kind is Strategy.parse("marks").kind
    assert Strategy.parse("distinct").distinct and not Strategy.parse("marks").distinct


def test_flush_fua_every_and_sample_start_after_mkfs():
    assert [p.index for p in enumerate_points(ENTRIES, Strategy.parse("flush"), workload_marks=MARKS)] == [5, 11]
    assert [p.index for p in enumerate_points(ENTRIES, Strategy.parse("fua"), workload_marks=MARKS)] == [8]
    assert [p.index for p in enumerate_points(ENTRIES, Strategy.parse("every:4"), workload_marks=MARKS)] == [2, 6, 10]
    a = enumerate_points(ENTRIES, Strategy.parse("sample:5"), workload_marks=MARKS, seed=3)
    assert a == enumerate_points(ENTRIES, Strategy.parse("sample:5"), workload_marks=MARKS, seed=3)
    assert len(a) == 5 and all(2 <= p.index < 14 for p in a)
    assert all(p.kind is CrashPointKind.SAMPLE for p in a)


@pytest.mark.parametrize("bad", ["every", "every:0", "sample:x", "marks:3", "nope"])
def test_bad_strategies_are_one_line_errors(bad):
    with pytest.raises(ConfigError, match="--points"):
        Strategy.parse(bad)


def test_prefix_subset_torn_and_lying_states():
    point = enumerate_points(ENTRIES, Strategy.parse("every:1"), workload_marks=MARKS)
    at10 = next(p for p in point if p.index == 10)
    assert at10.last_barrier == 8  # the FUA write is a barrier
    states = plan_states(ENTRIES, [at10], Variants.parse(["prefix", "subset", "torn", "lying"]),
                         workload_marks=MARKS, seed=1, per_point=4)
    kinds = {s.variant.kind for s in states}
    assert VariantKind.PREFIX in kinds and VariantKind.SUBSET in kinds and VariantKind.TORN in kinds
    for s in states:
        if s.variant.kind is VariantKind.SUBSET:
            assert s.base == 8 and set(s.extra) < {9, 10}  # a proper subset of the unflushed writes
        if s.variant.kind is VariantKind.TORN:
            (victim, (lo, hi)), = s.torn.items()
            assert victim == 10 and lo == 0 and 1 <= hi < 16
        if s.variant.kind is VariantKind.LYING:
            # Back to the mark before pc-0 (mkfs): flushes in between are ignored.
            assert s.base == 2 and set(s.extra) < {3, 4, 7, 8, 9, 10}
    assert [s.base for s in states] == sorted(s.base for s in states)


def test_states_rebuild_from_their_key():
    points = enumerate_points(ENTRIES, Strategy.parse("every:1"), workload_marks=MARKS)
    states = plan_states(ENTRIES, points, Variants.parse(["prefix", "subset", "torn", "lying"]),
                         workload_marks=MARKS, seed=9)
    assert len({s.key for s in states}) == len(states)
    for s in states:
        again = build_state(ENTRIES, s.point, Variant.parse(s.key.split("/")[1]), MARKS)
        assert again == s


def test_variant_specs_parse_or_fail_clearly():
    assert Variant.parse("subset:17") == Variant(VariantKind.SUBSET, 17)
    assert Variant.parse("prefix").spec == "prefix"
    with pytest.raises(ConfigError, match="variant 'half:3'"):
        Variant.parse("half:3")
    with pytest.raises(ConfigError, match="--variants"):
        Variants.parse(["bogus"])


# A two-disk recording: both logs carry every mark, the data log a second NAME.j mark
# right after the journal's NAME. The data disk completed a flush while the journal
# disk was being marked pc-1 (11-12); the journal disk wrote in the windows after mkfs
# and after pc-2, and stood still between pc-0 and pc-1.
DATA = log(
    (W, 8, None), (F, 0, None), (M, 0, "mkfs"), (M, 0, "mkfs.j"),            # 0-3
    (W, 8, None), (F, 0, None), (M, 0, "pc-0"), (M, 0, "pc-0.j"),            # 4-7
    (W, 8, None), (F, 0, None), (M, 0, "pc-1"), (W, 8, None), (F, 0, None),  # 8-12
    (M, 0, "pc-1.j"), (W, 8, None), (F, 0, None), (M, 0, "pc-2"),            # 13-16
    (M, 0, "pc-2.j"), (W, 8, None), (F, 0, None), (M, 0, "dm-log-writes-end"),  # 17-20
)
JOURNAL = log(
    (W, 8, None), (F, 0, None), (M, 0, "mkfs"),                            # 0-2
    (W, 8, None), (FUA, 1, None), (M, 0, "pc-0"), (M, 0, "pc-1"),          # 3-6
    (W, 8, None), (F, 0, None), (M, 0, "pc-2"), (W, 8, None), (F, 0, None),  # 7-11
    (M, 0, "dm-log-writes-end"),                                            # 12
)
MARKS3 = ["pc-0", "pc-1", "pc-2"]


def two_disk(points: str, variants: list[str]):
    from crashcases.crash.points import plan_two_disk_states
    pts = enumerate_points(DATA, Strategy.parse(points), workload_marks=MARKS3)
    return plan_two_disk_states(DATA, JOURNAL, pts, Variants.parse(variants),
                                workload_marks=MARKS3, seed=5,
                                per_point=1)


def test_two_disk_marks_pair_both_logs_at_the_same_mark_unless_the_data_disk_moved():
    from crashcases.crash.points import Unexplored
    states, skipped = two_disk("marks", ["prefix"])
    assert {s.key: (s.base, s.journal.base) for s in states} == {"6/prefix": (6, 5),
                                                                "16/prefix": (16, 9)}
    # pc-1: the data log has a write and a flush between pc-1 and pc-1.j.
    assert skipped == {Unexplored.UNORDERED_MARK.value: 1}


def test_two_disk_points_inside_a_window_need_a_journal_that_stood_still():
    from crashcases.crash.points import Unexplored
    states, skipped = two_disk("flush", ["prefix"])
    # Only the flush after pc-0 (entry 9): the journal logged nothing until pc-1.
    assert [(s.key, s.journal.base) for s in states] == [("9/prefix", 5)]
    assert skipped == {Unexplored.JOURNAL_BUSY.value: 2, Unexplored.UNORDERED_MARK.value: 2}


def test_journal_variants_move_only_the_journal_disk_and_rebuild_from_their_key():
    from crashcases.crash.points import TwoLogs, annotate
    states, _ = two_disk("marks", ["prefix", "journal-lying"])
    lying = [s for s in states if s.variant.on_journal]
    assert lying and all(s.key.split("/")[1].startswith("journal-lying:") for s in lying)
    at_pc2 = next(s for s in lying if s.point.index == 16)
    # The data disk at pc-2; the journal back at pc-1, its writes since then a seeded subset.
    assert at_pc2.base == 16 and at_pc2.extra == () and at_pc2.journal.base == 6
    assert set(at_pc2.journal.extra) <= {7}
    assert [s.base for s in states] == sorted(s.base for s in states)
    logs = TwoLogs(DATA, JOURNAL, MARKS3)
    for s in states:
        point = annotate(DATA, [(s.point.index, CrashPointKind.SAMPLE)], set(MARKS3))[0]
        again, why = logs.state(point, Variant.parse(s.key.split("/")[1]))
        assert why is None and again is not None
        assert (again.key, again.base, again.extra, again.journal) == (s.key, s.base, s.extra, s.journal)


def test_journal_variant_names_parse_and_need_a_kind():
    assert Variant.parse("journal-lying:4") == Variant(VariantKind.LYING, 4, on_journal=True)
    assert Variant.parse("journal-lying:4").spec == "journal-lying:4"
    both = Variants.parse(["prefix", "journal-lying"])
    assert (both.data, both.journal) == ((VariantKind.PREFIX,), (VariantKind.LYING,))
    assert both.on_journal == ("journal-lying",)
    with pytest.raises(ConfigError, match="journal-prefix"):
        Variants.parse(["journal-prefix"])
    with pytest.raises(ConfigError, match="journal-half"):
        Variants.parse(["journal-half"])


@pytest.mark.parametrize("text", ["marks", "distinct", "fua", "flush", "every:25", "sample:150"])
def test_a_strategy_reads_back_as_it_was_given(text: str) -> None:
    """plan.json keeps --points as given: the parsed strategy writes the same words."""
    assert Strategy.parse(text).spec == text
