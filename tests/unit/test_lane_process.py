"""A checking guest's lanes past the first run in forked processes: what crosses the fork
(the stop flag, the write baton, the lane's report or its error) and what must not (the
fork never comes back into the caller's code)."""

from __future__ import annotations

import os
import select
import signal
from pathlib import Path

import pytest

from crashcases.crash import lanes
from crashcases.crash.guest import _add_lane_reports, _lane_report
from crashcases.crash.lanes import Baton, Flag, LaneProcess, raise_first
from framework.core.errors import DeviceBusy, PowercutError


def test_a_lanes_report_comes_back_from_its_process() -> None:
    lane = LaneProcess(2, lambda: {"tally": {"checked": 3}, "pid": os.getpid()}, Flag())
    report = lane.wait()
    assert report["tally"] == {"checked": 3}
    assert report["pid"] != os.getpid()  # it ran in another process
    assert lane.error is None
    raise_first([lane])  # nothing to raise


def test_a_powercut_error_in_a_lane_keeps_its_kind_and_names_the_lane() -> None:
    def work() -> dict[str, object]:
        raise DeviceBusy("/dev/mapper/pc-snap-2: still open")

    lane = LaneProcess(2, work, Flag())
    assert lane.wait() == {}
    with pytest.raises(DeviceBusy, match=r"checking lane 2: /dev/mapper/pc-snap-2: still open"):
        raise_first([lane])


def test_any_other_error_in_a_lane_is_reported_with_its_type() -> None:
    def work() -> dict[str, object]:
        raise KeyError("size")

    lane = LaneProcess(3, work, Flag())
    lane.wait()
    assert isinstance(lane.error, PowercutError)
    assert str(lane.error) == "checking lane 3: KeyError: 'size'"


def test_a_lane_killed_before_its_report_says_how_it_ended() -> None:
    def work() -> dict[str, object]:
        os.kill(os.getpid(), signal.SIGKILL)
        return {}

    lane = LaneProcess(2, work, Flag())
    lane.wait()
    assert str(lane.error) == "checking lane 2 ended without a report (killed by signal 9)"


def test_the_fork_never_returns_into_the_callers_code(tmp_path: Path) -> None:
    # A lane that raises SystemExit (or anything else) must end in its process: were it to
    # come back, it would run the rest of this test, and the cleanup of the caller's disks.
    marker = tmp_path / "returned"

    def work() -> dict[str, object]:
        raise SystemExit(0)

    lane = LaneProcess(2, work, Flag())
    with open(marker, "a") as f:
        f.write(f"{os.getpid()}\n")
    lane.wait()
    assert marker.read_text().split() == [str(os.getpid())]
    assert "SystemExit" in str(lane.error)


def test_the_stop_flag_crosses_the_fork_both_ways() -> None:
    stop = Flag()

    def work() -> dict[str, object]:
        stop.set()
        return {"seen": True}

    lane = LaneProcess(2, work, Flag())
    assert lane.wait() == {"seen": True}
    assert stop.is_set()  # set in the lane's process, seen here

    stop = Flag()
    stop.set()
    lane = LaneProcess(2, lambda: {"seen": stop.is_set()}, Flag())
    assert lane.wait() == {"seen": True}


def _race(path: Path, parent_baton: Baton, child_baton: Baton, *,
          wait_s: float) -> tuple[list[str], bool]:
    """The parent writes half a line holding its baton and lets the child go; the child
    writes its line holding its own. Returns the file's lines and whether the child wrote
    while the parent held its baton."""
    go_r, go_w = os.pipe()
    done_r, done_w = os.pipe()

    def child() -> dict[str, object]:
        os.read(go_r, 1)
        with child_baton, open(path, "a") as out:
            out.write("b\n")
        os.write(done_w, b".")
        return {}

    lane = LaneProcess(2, child, Flag())
    with open(path, "a") as out, parent_baton:
        out.write("a-first ")
        out.flush()
        os.write(go_w, b".")
        # Held for wait_s, or until the child has written, whichever comes first.
        wrote_meanwhile = bool(select.select([done_r], [], [], wait_s)[0])
        out.write("a-second\n")
        out.flush()
    assert select.select([done_r], [], [], 30.0)[0], "the child never wrote"
    lane.wait()
    assert lane.error is None
    for fd in (go_r, go_w, done_r, done_w):
        os.close(fd)
    return path.read_text().splitlines(), wrote_meanwhile


def test_the_baton_keeps_two_processes_writes_apart(tmp_path: Path) -> None:
    baton = Baton()
    # A child that could write now would do so well within a second.
    lines, wrote_meanwhile = _race(tmp_path / "results", baton, baton, wait_s=1.0)
    assert not wrote_meanwhile
    assert lines == ["a-first a-second", "b"]


def test_without_a_shared_baton_the_writes_interleave(tmp_path: Path) -> None:
    # The control: a baton each, so none held in common; the child's line lands inside
    # the parent's.
    lines, wrote_meanwhile = _race(tmp_path / "results", Baton(), Baton(), wait_s=60.0)
    assert wrote_meanwhile
    assert lines == ["a-first b", "a-second"]


def test_a_failing_lane_stops_the_others_at_once_and_a_good_one_does_not() -> None:
    stop = Flag()

    def work() -> dict[str, object]:
        raise DeviceBusy("pc-snap-2: still open")

    lane = LaneProcess(2, work, stop)
    lane.wait()
    assert stop.is_set()

    stop = Flag()
    LaneProcess(2, lambda: {}, stop).wait()
    assert not stop.is_set()


def test_a_report_cut_short_is_a_lane_that_ended_without_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # As if the process died halfway through writing its report.
    monkeypatch.setattr(lanes.json, "dumps", lambda obj: '{"report": {"tally": {"che')
    lane = LaneProcess(2, lambda: {"tally": {}}, Flag())
    assert lane.wait() == {}
    assert str(lane.error) == "checking lane 2 ended without a report (exit status 0)"


class _FakeReplayer:
    def __init__(self, written: int, discarded: int, applied: int) -> None:
        self.bytes_written, self.bytes_discarded, self.entries_applied = written, discarded, applied


class _FakeDisk:
    def __init__(self, replay_s: float, written: int) -> None:
        self.spent = {"index_s": 1.0, "replay_s": replay_s}
        self.rep = _FakeReplayer(written, 7, 3)


def test_the_summary_adds_the_first_lanes_disks_and_every_forked_lanes_report() -> None:
    """The first lane's two disks (data and journal) and a forked lane's report, which came
    through JSON, add up field by field; no count is lost or taken twice."""
    import json

    first = _lane_report({"checked": 2, "check_s": 0.5},
                         [_FakeDisk(2.0, 100), _FakeDisk(0.5, 10)])
    forked = json.loads(json.dumps(_lane_report({"checked": 3, "check_s": 1.5},
                                                [_FakeDisk(4.0, 1000)])))
    total = _add_lane_reports([first, forked])
    assert total == {"tally": {"checked": 5, "check_s": 2.0},
                     "spent": {"index_s": 3.0, "replay_s": 6.5},
                     "written": 1110, "discarded": 21, "applied": 9}
    assert _add_lane_reports([first]) == first  # one lane: its own report


def test_a_lane_reports_nothing_unless_the_request_measures() -> None:
    """The tallies are made for bench/crash.py only: a run's lanes send no report."""
    assert _lane_report(None, [_FakeDisk(2.0, 100)]) == {}
