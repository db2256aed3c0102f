"""Crash states with the same bytes are checked on one mount: which states count as the same."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from crashcases.crash.guest import (
    DiskRecipe,
    StateRecipe,
    _Disk,
    content_changes,
    same_content_runs,
)
from devicemapper.logformat import LogReader, LogWriter


def disk_of(tmp_path: Path, name: str, build: Callable[[LogWriter], None]) -> _Disk:
    path = tmp_path / name
    with LogWriter(path, sectorsize=512) as w:
        build(w)
    with LogReader(path) as reader:
        entries = list(reader)
    disk = object.__new__(_Disk)  # only the headers matter here, no guest devices
    disk.index, disk.changes = entries, content_changes(entries)
    return disk


def data_log(w: LogWriter) -> None:
    w.write(0, b"a" * 512)  # 0
    w.mark("pc-0")          # 1
    w.flush()               # 2
    w.mark("pc-1")          # 3: nothing written since pc-0
    w.write(8, b"b" * 512)  # 4
    w.mark("pc-2")          # 5
    w.discard(8, 1)         # 6
    w.mark("pc-3")          # 7
    w.mark("pc-4")          # 8


def keys(runs: list[list[StateRecipe]]) -> list[list[str]]:
    return [[s.key for s in run] for run in runs]


def test_consecutive_prefixes_with_no_write_or_discard_between_them_form_one_run(tmp_path):
    data = disk_of(tmp_path, "data.log", data_log)
    states = [StateRecipe(f"{i}/prefix", f"pc-{n}", i) for n, i in enumerate((1, 3, 5, 7, 8))]
    assert keys(list(same_content_runs(states, data, None))) == [
        ["1/prefix", "3/prefix"], ["5/prefix"], ["7/prefix", "8/prefix"]]
    # The content changes counted: a write, a discard; flushes and marks (the writer's
    # closing mark among them) are not.
    assert data.changes == [0, 1, 1, 1, 1, 2, 2, 3, 3, 3, 3]


def test_extra_entries_torn_writes_and_fault_injection_split_a_run(tmp_path):
    data = disk_of(tmp_path, "data.log", data_log)
    states = [StateRecipe("1/prefix", "pc-0", 1), StateRecipe("1/subset", "pc-0", 1, (4,)),
              StateRecipe("3/subset", "pc-1", 3, (4,)),
              StateRecipe("3/torn", "pc-1", 3, (4,), {4: (0, 1)}),
              StateRecipe("7/prefix", "pc-3", 7), StateRecipe("8/prefix", "pc-4", 8)]
    assert keys(list(same_content_runs(states, data, None, alone={"8/prefix"}))) == [
        ["1/prefix"], ["1/subset", "3/subset"], ["3/torn"], ["7/prefix"], ["8/prefix"]]
    # A fault-injection state neither joins a run nor starts one others join.
    assert keys(list(same_content_runs(states, data, None, alone={"7/prefix"}))) == [
        ["1/prefix"], ["1/subset", "3/subset"], ["3/torn"], ["7/prefix"], ["8/prefix"]]
    assert keys(list(same_content_runs(states, data, None))) == [
        ["1/prefix"], ["1/subset", "3/subset"], ["3/torn"], ["7/prefix", "8/prefix"]]


def test_a_two_disk_state_is_the_same_only_if_both_disks_are(tmp_path):
    data = disk_of(tmp_path, "data.log", data_log)

    def journal_log(w: LogWriter) -> None:
        w.mark("pc-0")          # 0
        w.write(0, b"j" * 512)  # 1
        w.mark("pc-1")          # 2

    journal = disk_of(tmp_path, "journal.log", journal_log)
    states = [StateRecipe("1/prefix", "pc-0", 1, journal=DiskRecipe(0)),
              StateRecipe("3/prefix", "pc-1", 3, journal=DiskRecipe(2)),
              StateRecipe("3/journal-lying", "pc-1", 3, journal=DiskRecipe(2)),
              StateRecipe("3/alone", "pc-1", 3)]
    assert keys(list(same_content_runs(states, data, journal))) == [
        ["1/prefix"], ["3/prefix", "3/journal-lying"], ["3/alone"]]


def test_a_run_counts_its_shared_states_and_saves_the_count(tmp_path):
    from crashcases.check import CheckResult
    from crashcases.crash.plan import CrashPlan, CrashRunResult
    from crashcases.crash.results import save_results

    result = CrashRunResult(tmp_path, CrashPlan(target="ext4/ordered", case="hand:write-fsync-rename"),
                            {"entries": 10}, [])
    result.results = {"3/prefix": CheckResult("3/prefix"),
                      "5/prefix": CheckResult("5/prefix", same_as="3/prefix"),
                      "7/prefix": CheckResult("7/prefix", same_as="3/prefix"),
                      "9/prefix": CheckResult("9/prefix")}
    assert result.shared() == 2
    saved: dict[str, dict] = {}

    class Run:
        def save_results(self, data: dict) -> None:
            saved["results.json"] = data

    save_results(result, Run())  # type: ignore[arg-type]
    assert saved["results.json"]["shared"] == 2


def test_a_check_summary_carries_where_the_guests_time_went():
    from crashcases.crash.guest import CheckDone, CheckSummary

    summary = CheckSummary(12, 4096, 0, 40, shared=2, setup_s=1.5, prepare_s=2.0,
                           check_s=7.25, oracle_load_s=0.5, index_s=1.0, replay_s=1.25,
                           snapshot_s=0.75, extra_s=0.125, wall_s=6.0)
    assert CheckSummary.from_dict(summary.to_dict()) == summary
    # The task's end carries it only when the request measured.
    assert CheckDone.from_dict(CheckDone(False, summary).to_dict()).summary == summary
    assert CheckDone.from_dict(CheckDone(True).to_dict()) == CheckDone(True, None)
    # A summary without the timings (an older guest's) still reads, with zeros.
    old = {k: v for k, v in summary.to_dict().items() if not k.endswith("_s")}
    assert CheckSummary.from_dict(old).check_s == 0.0


def test_the_phase_table_counts_a_shared_state_once_and_names_what_is_left():
    from bench.crash import phase_table
    from crashcases.check import CheckResult
    from crashcases.crash.guest import CheckSummary

    summary = CheckSummary(3, 0, 0, 0, shared=1, setup_s=1.5, prepare_s=3.0,
                           check_s=7.0, oracle_load_s=0.5, index_s=1.0, replay_s=1.5,
                           snapshot_s=0.75, extra_s=0.0, wall_s=6.0)
    first = CheckResult("a", mount_s=1.0, umount_s=0.5, fsck_check_s=2.0, oracle_s=0.5,
                        tree_s=0.25)
    shared = CheckResult("b", mount_s=1.0, umount_s=0.5, fsck_check_s=2.0, oracle_s=0.125,
                         tree_s=0.25, same_as="a")
    alone = CheckResult("c", mount_s=1.0, umount_s=0.5, fsck_check_s=1.0, oracle_s=0.5,
                        tree_s=0.25)
    table = phase_table(summary, [first, shared, alone], boot_s=9.0, task_s=8.5, lanes=2)
    seconds = {line[:30].strip(): float(line[30:].split()[0]) for line in table.splitlines()[1:]}
    assert seconds["guest start (boot, host)"] == 9.0
    assert seconds["task start (python, imports)"] == 2.5  # 8.5 s on the host, 6 in the task
    assert seconds["mount (journal replay)"] == 2.0  # the shared state's mount is its first's
    assert seconds["oracle check"] == 1.1  # each state checks its own promises
    assert seconds["fsck"] == 3.0 and seconds["unmount"] == 1.0 and seconds["tree read"] == 0.5
    # Lanes: 3.0 s building and releasing states + 7.0 checking them; named 1.5 + 0.75
    # + 0 + 2 + 1.125 + 0.5 + 3 + 1 = 9.875: 0.125 s is other.
    assert seconds["other, in the lanes"] == 0.1
    assert "summed over 2 lanes" in table and "3 states" in table


def test_the_crash_bench_counts_outcomes_and_states_left_unchecked():
    from bench.crash import outcome_line
    from crashcases.check import CheckResult
    from crashcases.vocabulary import Outcome

    ok = [CheckResult(f"{i}/prefix") for i in range(3)]
    assert outcome_line(ok, 3) == "outcomes: 3 ok (of 3 states planned)"
    lost = CheckResult("9/prefix", outcome=Outcome.DATA_LOSS)
    assert outcome_line([*ok, lost], 6) == \
        "outcomes: 3 ok, 1 data-loss (of 6 states planned); 2 not checked"
    assert outcome_line([], 2) == "outcomes: none (of 2 states planned); 2 not checked"
