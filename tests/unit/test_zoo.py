"""The zoo's entry files, its kernel tree's bookkeeping and the recall report."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path
from typing import ClassVar

import pytest

from framework.core.errors import ConfigError
from framework.core.machine.build import APPLIED, config_sha256
from framework.zoo import steps as crash_steps
from framework.zoo.entry import KEYS, entries_dir, load_entries, parse_entry
from framework.zoo.kernels import revert, zoo_tree
from framework.zoo.plans import WorkloadPlan
from framework.zoo.recall import RecallPlan, table


def test_every_shipped_entry_loads_with_its_patch_and_targets() -> None:
    entries = load_entries()
    assert len(entries) >= 12
    by_fs: dict[str, int] = {}
    for e in entries:
        by_fs[e.filesystem] = by_fs.get(e.filesystem, 0) + 1
        assert e.patch.read_text().count("\n+++ ") >= 1, e.name
        assert e.thread.startswith("https://"), e.name
    assert sum(1 for n in by_fs.values() if n >= 2) >= 4, by_fs


ENTRY = """\
name = "{name}"
filesystem = "ext4"
targets = ["ext4/fast_commit"]
fix = "0123456789ab"
subject = "ext4: fix something"
fixed_in = "v6.1"
stable_in = ""
patch = "x.patch"
hand_port = false
port_notes = ""
fstests = ""
thread = "https://lore.kernel.org/x"
symptom = "..."
"""


@pytest.mark.parametrize("change,message", [
    (lambda t: t + 'extra = "1"\n', "unknown key 'extra'"),
    (lambda t: t.replace('fix = "0123456789ab"', 'fix = "nothex"'), "is not a commit id"),
    (lambda t: t.replace('patch = "x.patch"', 'patch = "gone.patch"'), "is not beside it"),
    (lambda t: t.replace('targets = ["ext4/fast_commit"]', 'targets = ["ext9"]'), "ext9"),
    (lambda t: t.replace('filesystem = "ext4"', 'filesystem = "zfs"'), "is not one of"),
    (lambda t: t.replace("hand_port = false", "hand_port = true"), "must say what it changed"),
    (lambda t: t.replace('symptom = "..."\n', ""), "missing key 'symptom'"),
    (lambda t: t.replace("[", "", 1), "not a zoo entry"),
])
def test_a_bad_entry_is_one_line_naming_the_file(tmp_path: Path, change, message) -> None:
    (tmp_path / "x.patch").write_text("--- a/f\n+++ b/f\n")
    path = tmp_path / "x.toml"
    path.write_text(change(ENTRY.format(name="x")))
    with pytest.raises(ConfigError, match=message) as err:
        parse_entry(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    assert set(KEYS) == {"name", "filesystem", "targets", "fix", "subject", "fixed_in",
                         "stable_in", "patch", "hand_port", "port_notes", "fstests",
                         "thread", "symptom"}


def test_a_revert_that_only_removes_code_is_not_taken_for_applied(tmp_path: Path) -> None:
    """A patch that only removes lines also applies backwards to the fixed tree (it would
    add them twice): the tree's marker, not patch -R --dry-run, says what is applied, and
    a marker whose patch is not in is dropped without touching the tree."""
    tree = tmp_path / "linux-6.12"
    (tree / "fs").mkdir(parents=True)
    (tree / "Makefile").write_text("")
    (tree / ".config").write_text("")
    (tree / ".powercut-config").write_text(config_sha256())
    source = "a\nb\nc\nd\ne\nf\ng\n"
    (tree / "fs/x.c").write_text(source)
    entries = tmp_path / "entries"
    entries.mkdir()
    (entries / "x.patch").write_text(
        "--- a/fs/x.c\n+++ b/fs/x.c\n@@ -2,5 +2,4 @@\n b\n c\n-d\n e\n f\n")
    (entries / "x.toml").write_text(ENTRY.format(name="x"))
    entry = parse_entry(entries / "x.toml")
    said: list[str] = []
    kt = zoo_tree(tmp_path, "6.12", say=said.append)
    (tree / APPLIED).write_text("x")  # killed between the marker and the patch
    kt.prepare([revert(entry)])
    assert (tree / "fs/x.c").read_text() == source and not (tree / APPLIED).exists()
    assert said == []
    # Applied for real (the marker, then the patch), then interrupted: taken out.
    (tree / APPLIED).write_text("x")
    kt._patch(revert(entry))
    assert (tree / "fs/x.c").read_text() == "a\nb\nc\ne\nf\ng\n"
    kt.prepare([revert(entry)])
    assert (tree / "fs/x.c").read_text() == source and said == [
        "zoo: taking out x, left in by an interrupted build"]


CONFIRMED = {"state": "1/prefix", "ops": 12, "confirmed": True, "false_alarm": False,
             "zoo": {"failing": 2, "states": 5}, "fixed": {"failing": 0, "states": 5}}


def test_the_report_says_recall_and_false_alarms() -> None:
    def row(name: str, detected: bool, t: float | None) -> dict:
        return {"name": name, "fix": "0123456789abcdef", "filesystem": "btrfs",
                "detected": detected, "time_to_first_failure_s": t,
                "states": 40, "failing_states": 3 if detected else 0,
                "findings": 1 if detected else 0, "steps": [],
                "fstests": "generic/782", "fstests_verdict": "fails on the zoo kernel, passes "
                                                              "on the fixed one",
                **({"confirm": CONFIRMED} if detected else {})}
    report = {"entries": [row("a", True, 95.0), row("b", False, None)],
              "recall": {"detected": 1, "entries": 2, "share": 0.5}, "false_alarms": 0,
              "budget_s": 900.0, "wall_s": 3600.0, "shares": True, "jobs": 2}
    text = table(report)
    assert ("| a | 0123456789ab | btrfs | yes | 95 s | 40 | 3 | 1 | confirmed, 12 ops: 2 "
            "failing on the zoo kernel, 0 of 5 on the fixed one | generic/782: fails on "
            "the zoo kernel") in text
    assert "| b | 0123456789ab | btrfs | no | - | 40 | 0 | 0 | - | generic/782: fails" in text
    assert "recall: 1/2 (50%); false alarms on the fixed kernel: 0" in text
    assert "a share of what is left per workload (equal); 2 at a time; wall 60 min" in text
    assert entries_dir().is_dir()


def test_a_detection_whose_sequence_fails_on_the_fixed_kernel_too_is_not_recall() -> None:
    def row(name: str, fixed_failing: int) -> dict:
        confirm = {"state": "1/prefix", "ops": 12, "confirmed": fixed_failing == 0,
                   "false_alarm": fixed_failing > 0,
                   "zoo": {"failing": 2, "states": 5}, "fixed": {"failing": fixed_failing,
                                                                 "states": 5}}
        return {"name": name, "fix": "0123456789abcdef", "filesystem": "ext4",
                "detected": True, "time_to_first_failure_s": 50.0, "states": 40,
                "failing_states": 2, "findings": 1, "steps": [], "fstests": "",
                "confirm": confirm}
    from framework.zoo import recall

    report = recall.totals({"entries": [row("mine", 0), row("shared", 2)],
                            "fixed": {"ext4/fast_commit": [step("gen:seq1", 1, 30),
                                                           step("gen:burst", 0, 20)]},
                            "budget_s": 360.0, "wall_s": 600.0, "shares": True, "jobs": 2})
    assert report["recall"] == {"detected": 1, "entries": 2, "share": 0.5, "unconfirmed": 0}
    assert report["false_alarms"] == 1 and report["fixed_failing_in_confirmations"] == 2
    text = table(report)
    assert "| mine | 0123456789ab | ext4 | yes | 50 s |" in text
    assert ("| shared | 0123456789ab | ext4 | no: its failing sequence fails on the fixed "
            "kernel too, a bug both have | 50 s |") in text
    assert ("false alarms on the fixed kernel: 1 in 50 states (and 2 failing states of "
            "detections' sequences alone on it)") in text


def step(case: str, failing: int, states: int, error: str = "") -> dict:
    return {"kernel": "fixed", "target": "ext4/fast_commit", "case": case, "argv": [],
            "run_dir": "", "wall_s": 60.0, "states": states, "failing": failing, "known": 0,
            "findings": 0, "first_failure": "", "representative": "", "interrupted": False,
            "error": error}


@pytest.mark.parametrize("confirm, words", [
    ({"state": "1/prefix", "error": "state 1/prefix: its sequence could not be cut out",
      "confirmed": False, "false_alarm": False},
     "unconfirmed, not counted: its confirmation could not run (state 1/prefix: its sequence "
     "could not be cut out)"),
    (None, "unconfirmed, not counted: its sequence was not run alone on both kernels"),
])
def test_an_unconfirmed_detection_is_shown_as_such_and_not_counted(confirm, words) -> None:
    """A detection whose confirmation raised an error has no verdict on the fixed kernel:
    it was counted as found; it is shown as unconfirmed and counted apart."""
    from framework.zoo import recall

    row = {"name": "e", "fix": "0123456789abcdef", "filesystem": "ext4", "detected": True,
           "time_to_first_failure_s": 50.0, "states": 40, "failing_states": 2, "findings": 1,
           "steps": [], "fstests": "", **({"confirm": confirm} if confirm else {})}
    report = recall.totals({"entries": [row], "fixed": {}, "budget_s": 360.0, "wall_s": 60.0})
    assert report["recall"] == {"detected": 0, "entries": 1, "share": 0.0, "unconfirmed": 1}
    text = table(report)
    assert f"| e | 0123456789ab | ext4 | {words} | 50 s |" in text
    assert "recall: 0/1 (0%) (and 1 detected but unconfirmed, not counted)" in text


def test_a_fixed_kernel_workload_that_errored_or_checked_nothing_is_not_measured() -> None:
    """False alarms: 0 said nothing of a workload that checked no state there."""
    from framework.zoo import recall

    report = recall.totals({
        "entries": [], "budget_s": 600.0, "wall_s": 60.0,
        "workloads": [{"case": c, "options": []} for c in
                      ("gen:seq1", "gen:burst", "stress:400", "ranges:600")],
        "fixed": {"btrfs": [step("gen:seq1", 0, 80), step("gen:burst", 0, 0),
                            step("stress:400", 0, 3, error="twice: exit 2: powercut: boot")]}})
    assert report["false_alarms"] == 0 and report["false_alarm_states"] == 83
    assert report["false_alarms_not_measured"] == [
        "btrfs gen:burst: checked no state",
        "btrfs stress:400: error (twice: exit 2: powercut: boot)",
        "btrfs ranges:600: not run (the budget ended first)"]
    text = table(report)
    assert "false alarms on the fixed kernel: 0 in 83 states" in text
    assert "false alarms not measured: btrfs ranges:600: not run (the budget ended first)" in text


def test_each_workload_gets_an_equal_share_of_what_is_left() -> None:
    plan = RecallPlan(budget_s=900.0)  # w8: five workloads, equal shares
    assert plan.step_limit(900.0, 0) == 180.0  # five workloads: a fifth each at first
    assert plan.step_limit(800.0, 1) == 200.0  # what the first did not use passes on
    assert plan.step_limit(90.0, 2) == 60.0  # never less than a guest start and a recording
    assert plan.step_limit(40.0, 2) == 40.0  # ... unless less than that is left
    assert plan.step_limit(300.0, 4) == 300.0  # the last takes all that is left
    assert RecallPlan(shares=False).step_limit(900.0, 0) == 900.0


def test_a_plans_weights_give_a_workload_a_larger_share() -> None:
    from framework.zoo.plans import W9

    plan = RecallPlan(budget_s=700.0, workloads=W9)  # weights 3, 1, 1, 1, 1
    assert plan.step_limit(700.0, 0) == 300.0  # three sevenths
    assert plan.step_limit(400.0, 1) == 100.0  # then a quarter of what is left each
    assert plan.step_limit(400.0, 4) == 400.0
    with pytest.raises(ValueError, match="one positive weight per workload"):
        dataclasses.replace(W9, weights=(1.0, 2.0))


def test_a_detection_is_confirmed_by_its_sequence_alone_on_both_kernels(tmp_path, monkeypatch):
    from framework.zoo import confirm as confirm_mod
    from framework.zoo import recall
    from framework.zoo.kernels import Kernel
    from tests.unit.test_shrink import fake_run

    run_dir = fake_run(tmp_path)  # its findings name directory c: the cut keeps c and syncs
    cut = confirm_mod.cut_workload(run_dir, "110/prefix")
    assert [op.describe() for op in cut.ops] == [
        "mkdir c", "creat c/f", "write c/f 8192B", "fsync c/f", "creat c/g", "write c/g 100B"]

    ran: list[tuple[str, str]] = []

    def fake_step(step, results, timeout_s, say):  # one crash run of the cut, per kernel
        ran.append((step.kernel, step.case))
        step.states = 4
        step.failing = 2 if step.kernel == "zoo" else fixed_failing

    monkeypatch.setattr(crash_steps, "run_step", fake_step)
    kernel = Kernel("zoo", tmp_path / "zoo", "6.12.117", "x", "y", 0.0)
    fixed = Kernel("fixed", tmp_path / "fixed", "6.12.117", "", "y", 0.0)
    for fixed_failing, confirmed, alarm in ((0, True, False), (1, False, True)):
        got = confirm_mod.confirm(run_dir, "110/prefix", "ext4/ordered", kernel, fixed,
                                  tmp_path / f"confirm-{fixed_failing}", 0, lambda _: None)
        assert (got["confirmed"], got["false_alarm"], got["ops"]) == (confirmed, alarm, 6)
        assert Workload_from(got["workload"]).ops == cut.ops
    assert [k for k, _ in ran] == ["zoo", "fixed", "zoo", "fixed"]
    assert all(case.startswith("file:") for _, case in ran)
    row = {"confirm": got}
    assert recall._confirmed(row).startswith("NOT confirmed, 6 ops: 2 failing on the zoo kernel, "
                                            "1 of 4 on the fixed one")


def test_a_sequence_that_passes_alone_is_confirmed_by_its_image_on_both_kernels(
        tmp_path, monkeypatch):
    """A failure that needs the whole history (a wrapped journal) passes as a sequence alone;
    the state rebuilt from the recorded log then decides: failing on the zoo kernel and
    passing on the fixed one confirms it, anything else does not."""
    from framework.zoo import confirm as confirm_mod
    from framework.zoo import recall
    from framework.zoo.kernels import Kernel
    from tests.unit.test_shrink import fake_run

    run_dir = fake_run(tmp_path)

    def fake_step(step, results, timeout_s, say):  # the sequence alone passes on both
        step.states, step.failing = 4, 0

    monkeypatch.setattr(crash_steps, "run_step", fake_step)
    exits: dict[str, int] = {}
    argvs: list[list[str]] = []

    def fake_recheck(argv, ends, keep_stdout=False):
        argvs.append(argv)
        kernel = Path(argv[argv.index("--modules") + 1]).name
        return exits[kernel], "110/prefix: x\n", "", False

    monkeypatch.setattr(confirm_mod, "run_command", fake_recheck)
    kernel = Kernel("zoo", tmp_path / "zoo", "6.12.117", "x", "y", 0.0)
    fixed = Kernel("fixed", tmp_path / "fixed", "6.12.117", "", "y", 0.0)
    said: list[str] = []
    for (zoo_exit, fixed_exit), confirmed in (((1, 0), True), ((1, 1), False),
                                              ((0, 0), False), ((2, 0), False)):
        exits.update(zoo=zoo_exit, fixed=fixed_exit)
        got = confirm_mod.confirm(run_dir, "110/prefix", "ext4/ordered", kernel, fixed,
                                  tmp_path / f"c-{zoo_exit}{fixed_exit}", 0, said.append)
        assert (got["confirmed"], got["false_alarm"]) == (confirmed, False), (zoo_exit, fixed_exit)
        assert (got["same_image"]["zoo"]["exit"], got["same_image"]["fixed"]["exit"]) == (
            zoo_exit, fixed_exit)
    assert argvs[0][3:6] == ["recheck", str(run_dir), "110/prefix"]
    assert "zoo: recheck 110/prefix on zoo: 110/prefix: x" in said
    words = recall._confirmed({"confirm": got})
    assert words.startswith("NOT confirmed, 6 ops: 0 failing on the zoo kernel, 0 of 4 on the "
                            "fixed one; state 110/prefix rebuilt from its log gives no answer "
                            "on the zoo kernel and passes on the fixed one")
    exits.update(zoo=1, fixed=0)
    got = confirm_mod.confirm(run_dir, "110/prefix", "ext4/ordered", kernel, fixed,
                              tmp_path / "c-last", 0, said.append)
    assert recall.counts_as_detected({"confirm": got, "detected": True})
    # A sequence that fails alone is decided by its runs alone: no recheck.
    monkeypatch.setattr(crash_steps, "run_step",
                        lambda step, *a: setattr(step, "failing", 1) or setattr(step, "states", 4))
    before = len(argvs)
    got = confirm_mod.confirm(run_dir, "110/prefix", "ext4/ordered", kernel, fixed,
                              tmp_path / "c-alone", 0, said.append)
    assert "same_image" not in got and len(argvs) == before
    # A confirmation made before the recheck existed gets it from zoo complete's helper.
    older = {"run_dir": str(run_dir), "state": "110/prefix", "confirmed": False,
             "zoo": {"failing": 0}, "fixed": {"failing": 0, "states": 4}}
    assert confirm_mod.lacks_same_image(older)
    confirm_mod.add_same_image(older, kernel, fixed, said.append)
    assert older["confirmed"] and not confirm_mod.lacks_same_image(older)


def test_a_failure_that_names_no_path_is_cut_to_the_directory_of_its_mark() -> None:
    from crashcases.workload.ops import Op
    from crashcases.workload.ops import OpKind as K
    from framework.zoo.confirm import mark_cut

    ops = [Op(K.MKDIR, "s0"), Op(K.CREAT, "s0/f"), Op(K.SYNC), Op(K.MKDIR, "s1"),
           Op(K.CREAT, "s1/f"), Op(K.FSYNC, "s1/f"), Op(K.MKDIR, "s2"), Op(K.FSYNC_DIR, "s2")]
    # pc-0 follows the sync (no directory), pc-1 the fsync in s1, pc-2 the fsync of s2.
    assert mark_cut(ops, "pc-0") is None
    assert mark_cut(ops, "pc-1") == (2, 3, 4, 5)  # s1 up to its fsync, and the sync before
    assert mark_cut(ops, "pc-2") == (2, 6, 7)
    assert mark_cut(ops, "pc-9") is None and mark_cut(ops, None) is None


def Workload_from(path: str):  # type: ignore[no-untyped-def]
    from crashcases.workload.ops import Workload

    return Workload.from_json(Path(path).read_text())


def test_a_recall_killed_half_way_keeps_its_finished_kernels(tmp_path, monkeypatch) -> None:
    import json

    from framework.zoo import recall
    from framework.zoo.kernels import Kernel

    entries = load_entries()[:2]

    def kernel(name: str) -> Kernel:
        return Kernel(name, tmp_path / name, "6.12.117", "", "y", 0.0)

    monkeypatch.setattr(recall, "installed", lambda cache, name: kernel(name))
    monkeypatch.setattr(recall, "run_kernel", lambda *a, **k: [])
    out = tmp_path / "zoo.json"
    seen: ClassVar[list[dict]] = []

    def entry_row(entry, *args):  # type: ignore[no-untyped-def]
        if out.exists():
            seen.append(json.loads(out.read_text()))
        if entry is entries[1]:
            raise KeyboardInterrupt  # the kill, while the second entry's kernel runs
        return {"name": entry.name, "detected": True, "steps": [], "fix": entry.fix,
                "filesystem": entry.filesystem, "time_to_first_failure_s": 9.0, "states": 3,
                "failing_states": 1, "findings": 1, "fstests": "", "confirm": CONFIRMED}

    monkeypatch.setattr(recall, "_entry_row", entry_row)
    with pytest.raises(KeyboardInterrupt):
        recall.run_recall(entries, tmp_path, tmp_path / "runs", RecallPlan(jobs=1), out=out,
                          say=lambda _: None)
    kept = json.loads(out.read_text())
    assert kept["complete"] is False
    assert [r["name"] for r in kept["entries"]] == [entries[0].name]
    assert kept["recall"] == {"detected": 1, "entries": 1, "share": 1.0, "unconfirmed": 0}
    assert kept["plan"]["version"] == "w8"  # the frozen plan the figure was measured with
    assert seen and all(s["complete"] is False for s in seen)
    assert "unfinished: the run stopped with 1 entries" in table(kept)


def test_a_workloads_share_counts_from_the_end_of_its_recording(tmp_path) -> None:
    import sys

    from framework.zoo.steps import Step, run_step

    # A stand-in for 'powercut crash': its recording takes 1.5 s, then it checks forever.
    script = ("import os, sys, time; d = os.path.join(sys.argv[1], 'crash-1'); os.makedirs(d); "
              "time.sleep(1.5); open(os.path.join(d, 'record.json'), 'w').write('{}'); "
              "time.sleep(60)")
    for left_s, least, most in ((20.0, 2.5, 15.0), (0.8, 0.0, 1.4)):
        results = tmp_path / f"left-{left_s}"
        results.mkdir()
        step = Step("k", "ext4/ordered", "gen:seq1",
                    [sys.executable, "-c", script, str(results)])
        run_step(step, results, 1.0, lambda _: None, left_s=left_s)
        # A 1 s share after a 1.5 s recording; what is left of the budget bounds it all.
        assert step.interrupted and least <= step.wall_s <= most, (left_s, step.wall_s)
        assert step.run_dir.endswith("crash-1") and step.states == 0


def test_a_stopped_recall_stops_its_running_steps_and_keeps_no_half_kernel(tmp_path,
                                                                           monkeypatch) -> None:
    import json
    import sys
    import time

    from framework.zoo import recall
    from framework.zoo.kernels import Kernel

    entries = load_entries()[:1]
    monkeypatch.setattr(recall, "installed",
                        lambda cache, name: Kernel(name, tmp_path / name, "6.12.117", "", "y", 0))

    def fixed_kernel(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(1.0)
        raise KeyboardInterrupt  # SIGTERM, as the CLI turns it, while the entry's step runs

    def entry_row(entry, *args):  # type: ignore[no-untyped-def]
        step = recall.Step(entry.name, "btrfs", "gen:seq1",
                           [sys.executable, "-c", "import time; time.sleep(120)"])
        crash_steps.run_step(step, tmp_path, 600.0, lambda _: None)
        return {"name": entry.name, "detected": False, "steps": [step.to_dict()]}

    monkeypatch.setattr(recall, "run_kernel", fixed_kernel)
    monkeypatch.setattr(recall, "_entry_row", entry_row)
    out = tmp_path / "zoo.json"
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        recall.run_recall(entries, tmp_path, tmp_path / "runs", RecallPlan(jobs=2), out=out,
                          say=lambda _: None)
    assert time.monotonic() - start < 30  # the two-minute step was told to stop
    assert not out.exists() or json.loads(out.read_text())["entries"] == []
    assert not recall._STOP.event.is_set()  # the next recall in this process starts afresh


def test_a_command_whose_waiting_thread_is_interrupted_is_told_to_stop_and_waited_for(
        tmp_path) -> None:
    """Ctrl-C or SIGTERM of the recall can arrive in the thread that waits for a command (the
    confirmations run in the main thread): the command gets SIGTERM, so it closes its guest,
    and has ended before the exception goes on."""
    import signal
    import sys
    import time

    from framework.zoo import commands

    said = tmp_path / "said"
    script = ("import os, signal, sys, time\n"
              "def bye(*_): open(sys.argv[1], 'w').write(str(os.getpid())); sys.exit(3)\n"
              "signal.signal(signal.SIGTERM, bye)\n"
              "open(sys.argv[1] + '.up', 'w').close()\n"
              "time.sleep(120)\n")

    def interrupt(*_):  # type: ignore[no-untyped-def]
        if not (tmp_path / "said.up").exists():  # not yet ready for SIGTERM: ask again later
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            return
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    start = time.monotonic()
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(KeyboardInterrupt):
            commands.run_command([sys.executable, "-c", script, str(said)],
                                 lambda now: now + 600)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert time.monotonic() - start < 30
    pid = int(said.read_text())  # it was told with SIGTERM, not killed
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # and it has ended (and been reaped)
    assert not commands.STOP.live
    # Its time's end: SIGTERM too, and the caller learns it was stopped.
    said.unlink()
    (tmp_path / "said.up").unlink()
    up: list[float] = []

    def ends(now: float) -> float:  # one second after it is ready for SIGTERM
        if not up and (tmp_path / "said.up").exists():
            up.append(now)
        return up[0] + 1.0 if up else now + 5.0

    code, _, _, stopped = commands.run_command([sys.executable, "-c", script, str(said)], ends)
    assert (code, stopped) == (3, True) and said.exists()


def test_a_crash_command_that_fails_is_tried_again_then_recorded_and_the_recall_goes_on(
        tmp_path, monkeypatch) -> None:
    """A zoo kernel that panicked while booting (crash exits 2) ended the whole recall: now
    the step runs once more, and a second failure is the step's error in the table."""
    import sys

    from framework.zoo import recall
    from framework.zoo.kernels import Kernel

    kernel = Kernel("k", tmp_path / "k", "6.12.117", "", "y", 0.0)
    one = WorkloadPlan("t", (("gen:seq1", ()),), 120.0, True, "entry", (), "")
    ran = tmp_path / "ran"  # a line per run of the stand-in crash command

    def argv(*args, **kwargs):  # type: ignore[no-untyped-def]
        # A crash command that dies as it does when its guest panicked while booting.
        return [sys.executable, "-c", f"import sys; open({str(ran)!r}, 'a').write('x\\n'); "
                "print('powercut: qemu exited during boot; Kernel panic', file=sys.stderr); "
                "sys.exit(2)"]

    monkeypatch.setattr(crash_steps, "crash_argv", argv)
    steps = recall.run_kernel(kernel, "xfs", tmp_path / "r",
                              RecallPlan(budget_s=120.0, workloads=one),
                              stop_at_detection=True, say=lambda _: None)
    assert len(ran.read_text().splitlines()) == 2 and len(steps) == 1
    assert steps[0].error.startswith("twice: exit 2: powercut: qemu exited during boot")
    row = {"name": "e", "fix": "0123456789ab", "filesystem": "xfs", "detected": False,
           "time_to_first_failure_s": None, "states": 0, "failing_states": 0, "findings": 0,
           "fstests": "", "steps": [steps[0].to_dict()],
           "errors": [f"xfs gen:seq1: {steps[0].error}"]}
    text = table({"entries": [row], "recall": {"detected": 0, "entries": 1, "share": 0.0},
                  "false_alarms": 0, "budget_s": 120.0, "wall_s": 60.0})
    assert "| e | 0123456789ab | xfs | no (1 step failed: xfs gen:seq1: twice: exit 2" in text


def test_complete_runs_the_named_entries_and_saves_after_each(tmp_path, monkeypatch) -> None:
    from framework.zoo import recall
    from framework.zoo.kernels import Kernel

    entries = {e.name: e for e in load_entries()}
    names = ["btrfs-new-name-last-log-commit", "btrfs-link-after-truncate-zero-size",
             "xfs-delalloc-writeback-stale-data"]

    def row(name: str) -> dict:
        return {"name": name, "fix": entries[name].fix, "filesystem": entries[name].filesystem,
                "detected": False, "time_to_first_failure_s": None, "states": 5,
                "failing_states": 0, "findings": 0, "steps": [], "fstests": "generic/788"}

    report = {"entries": [row(n) for n in names], "fixed": {}, "budget_s": 60.0, "seed": 0,
              "wall_s": 60.0, "shares": True, "jobs": 1}
    monkeypatch.setattr(recall, "installed",
                        lambda cache, name: Kernel(name, tmp_path, "6.12.117", "", "y", 0.0))
    ran: list[str] = []

    def fake_verdicts(entry, checkout, kernel, fixed, work, say):
        ran.append(entry.name)
        return {"fstests": entry.fstests, "fstests_verdict": "failed on the zoo kernel, "
                "passed on the fixed one", "fstests_agrees": True,
                "fstests_runs": [{"verdict": "failed"}, {"verdict": "passed"}]}

    monkeypatch.setattr(recall, "fstests_verdicts", fake_verdicts)
    saved: list[list[str]] = []
    done = recall.complete(report, list(entries.values()), tmp_path, tmp_path,
                           fstests=tmp_path, say=lambda _: None, only=names[1:],
                           after=lambda r: saved.append([x["name"] for x in r["entries"]
                                                         if "fstests_runs" in x]))
    assert ran == names[1:]  # the first was not named
    assert saved == [names[1:2], names[1:]]  # written after each entry it completed
    # The report names the test the entry names today (the run named an older number).
    assert "generic/789: failed on the zoo kernel, passed on the fixed one" in table(done)
    # A verdict fstests did not give (the test missing, ./check silent) is asked for again.
    done["entries"][1]["fstests_runs"] = [{"verdict": "error"}, {"verdict": "passed"}]
    ran.clear()
    recall.complete(done, list(entries.values()), tmp_path, tmp_path, fstests=tmp_path,
                    only=names[1:])
    assert ran == names[1:2]
    with pytest.raises(ConfigError, match="no-such-entry not in this report"):
        recall.complete(report, list(entries.values()), tmp_path, tmp_path, fstests=tmp_path,
                        only=["no-such-entry"])


def test_known_behaviour_does_not_hide_a_zoo_kernels_failure(tmp_path, monkeypatch) -> None:
    """A zoo kernel's known-explained failing state is a candidate where the fixed kernel
    checked the same mark cleanly; it counts only if it fails alone on every zoo-kernel run
    and on no fixed-kernel run."""
    import json

    from framework.zoo import masked, recall
    from framework.zoo.kernels import Kernel
    from tests.unit.test_shrink import fake_run

    zoo_dir = fake_run(tmp_path)  # state 110/prefix fails; the cut keeps directory c
    data = json.loads((zoo_dir / "results.json").read_text())
    for state, mark in zip(data["states"], ("pc-3", "pc-5", "pc-9"), strict=True):
        state["last_mark"] = mark
    data["states"][1]["result"] = data["states"][0]["result"]  # 111 fails too, at pc-5
    data["states"][2]["result"] = data["states"][0]["result"]  # 112 at pc-9
    data["findings"] = [{"known": True, "explanation": "f2fs: old data after fsync",
                         "states": ["110/prefix", "111/prefix", "112/prefix"]}]
    (zoo_dir / "results.json").write_text(json.dumps(data))
    base_dir = tmp_path / "fixed-run"
    base_dir.mkdir()
    ok, bad = {"outcome": "ok"}, {"outcome": "data-loss"}
    (base_dir / "results.json").write_text(json.dumps({"states": [
        {"key": "7/prefix", "last_mark": "pc-3", "result": ok},  # the fixed kernel passed it
        {"key": "8/prefix", "last_mark": "pc-5", "result": bad}]}))  # failed there too; pc-9 unseen
    step = {"target": "f2fs", "case": "gen:burst", "known": 3, "run_dir": str(zoo_dir), "states": 9,
            "wall_s": 100.0}
    fixed_steps = {"f2fs": [{"case": "gen:seq1", "run_dir": ""},
                            {"case": "gen:burst", "run_dir": str(base_dir)}]}
    found = masked.candidates([step], fixed_steps)
    assert [(c["state"], c["mark"]) for c in found] == [("110/prefix", "pc-3")]
    assert masked.candidates([{**step, "case": "gen:seq2"}], fixed_steps) == []  # not run there

    fixed_failing: list[int] = []
    ran: list[tuple[str, tuple[str, ...]]] = []

    def fake_step(step, results, timeout_s, say):
        ran.append((step.kernel, tuple(step.argv)))
        step.states = 3
        step.failing = 1 if step.kernel == "zoo" else fixed_failing.pop(0)

    monkeypatch.setattr(crash_steps, "run_step", fake_step)
    kernel = Kernel("zoo", tmp_path / "zoo", "6.12.117", "x", "y", 0.0)
    fixed = Kernel("fixed", tmp_path / "fixed", "6.12.117", "", "y", 0.0)
    row = {"name": "f2fs-x", "fix": "0123456789abcdef", "filesystem": "f2fs", "detected": False,
           "time_to_first_failure_s": None, "states": 9, "failing_states": 0, "findings": 0,
           "steps": [step], "fstests": ""}
    fixed_failing[:] = [0, 0, 0]
    got = masked.second_look(row, fixed_steps, kernel, fixed, tmp_path / "m1", 0, lambda _: None)
    assert got is not None and got["confirmed"]
    assert [k for k, _ in ran] == ["zoo", "zoo", "fixed", "fixed", "fixed"]
    assert all("--ignore-known" in argv for _, argv in ran)  # the known list would hide it
    row["masked"] = got
    assert recall.counts_as_detected(row)
    text = table(recall.totals({"entries": [row], "fixed": {}, "budget_s": 60.0,
                                "wall_s": 60.0}))
    assert "| f2fs-x | 0123456789ab | f2fs | yes, under a known behaviour |" in text
    assert ("known-explained state 110/prefix (gen:burst, 6 ops): failing alone in 2 of 2 "
            "zoo-kernel runs, 0 of 3 fixed-kernel runs") in text
    # One failing fixed-kernel run of three and it is a behaviour both kernels have.
    fixed_failing[:] = [0, 1, 0]
    got = masked.second_look(row, fixed_steps, kernel, fixed, tmp_path / "m2", 0, lambda _: None)
    assert got is not None and not got["confirmed"]
    row["masked"] = got
    assert not recall.counts_as_detected(row)
    assert "| f2fs-x | 0123456789ab | f2fs | no |" in table(recall.totals(
        {"entries": [row], "fixed": {}, "budget_s": 60.0, "wall_s": 60.0}))


def test_the_second_look_tries_first_the_workload_that_fails_more_than_on_the_fixed_kernel(
        tmp_path) -> None:
    """Candidates come from the step whose share of known failing states most exceeds the
    fixed kernel's on the same workload, then one from each step in turn: a behaviour both
    kernels show at random does not use up every try."""
    import json

    from framework.zoo import masked
    from tests.unit.test_shrink import fake_run

    zoo_dir = fake_run(tmp_path)
    data = json.loads((zoo_dir / "results.json").read_text())
    for state, mark in zip(data["states"], ("pc-3", "pc-5", "pc-9"), strict=True):
        state["last_mark"] = mark
        state["result"] = data["states"][0]["result"]
    data["findings"] = [{"known": True, "explanation": "f2fs: no node block",
                         "states": ["110/prefix", "111/prefix", "112/prefix"]}]
    (zoo_dir / "results.json").write_text(json.dumps(data))
    base_dir = tmp_path / "fixed-run"
    base_dir.mkdir()
    (base_dir / "results.json").write_text(json.dumps({"states": [
        {"key": f"{n}/prefix", "last_mark": m, "result": {"outcome": "ok"}}
        for n, m in ((7, "pc-3"), (8, "pc-5"), (9, "pc-9"))]}))
    steps = [{"target": "f2fs", "case": c, "known": 3, "states": 30, "run_dir": str(zoo_dir)}
             for c in ("gen:seq1", "gen:chain")]
    fixed_steps = {"f2fs": [
        {"case": "gen:seq1", "known": 3, "states": 30, "run_dir": str(base_dir)},  # as often
        {"case": "gen:chain", "known": 0, "states": 30, "run_dir": str(base_dir)}]}
    found = masked.candidates(steps, fixed_steps, limit=4)
    assert [(c["case"], c["state"]) for c in found] == [
        ("gen:chain", "110/prefix"), ("gen:seq1", "110/prefix"),
        ("gen:chain", "111/prefix"), ("gen:seq1", "111/prefix")]
    assert [c["case"] for c in masked.candidates(steps, fixed_steps)] == ["gen:chain",
                                                                          "gen:seq1"]
    # Equal shares: the order the steps ran.
    fixed_steps["f2fs"][1]["known"] = 3
    assert [c["case"] for c in masked.candidates(steps, fixed_steps)] == ["gen:seq1",
                                                                          "gen:chain"]


def test_the_confirmation_and_the_second_look_need_no_recall_to_run_their_steps() -> None:
    """A step (its command, running it, reading its run) is framework.zoo.steps: the recall,
    its confirmations and its second look all import it, and neither confirm nor masked
    imports the recall back (no import circle, not even inside a function)."""
    import grimp

    graph = grimp.build_graph("framework", cache_dir=None)
    for module in ("framework.zoo.confirm", "framework.zoo.masked", "framework.zoo.steps"):
        assert graph.find_shortest_chain(importer=module,
                                         imported="framework.zoo.recall") is None, module
    for module in ("framework.zoo.recall", "framework.zoo.confirm", "framework.zoo.masked"):
        assert graph.find_shortest_chain(importer=module,
                                         imported="framework.zoo.steps") is not None, module


def test_every_fstests_option_takes_only_a_built_checkout(tmp_path, monkeypatch) -> None:
    from framework.cli.ci_reports import checkout_of
    from framework.zoo.fstests import built_checkout, check_built

    monkeypatch.delenv("POWERCUT_XFSTESTS", raising=False)
    checkout = tmp_path / "xfstests"
    checkout.mkdir()
    (checkout / "check").write_text("#!/bin/bash\n")
    # A clone that was never built has `check` but not fstests' built helpers.
    for call in (lambda: check_built(checkout, "--run-fstests"),
                 lambda: built_checkout(str(checkout), "--fstests"),
                 lambda: checkout_of(str(checkout))):
        with pytest.raises(ConfigError, match=r"not a built fstests checkout \(no ltp/fsx"):
            call()
    with pytest.raises(ConfigError, match="^--fstests .*run make in it"):
        built_checkout(str(checkout), "--fstests")
    (checkout / "ltp").mkdir()
    (checkout / "ltp" / "fsx").write_text("")
    assert check_built(checkout, "--run-fstests") == checkout
    assert checkout_of(str(checkout)) == checkout
    assert built_checkout(None, "--fstests") is None
    with pytest.raises(ConfigError, match="--report needs a built fstests checkout"):
        checkout_of(None)
    monkeypatch.setenv("POWERCUT_XFSTESTS", str(checkout))
    assert built_checkout(None, "--fstests") == checkout
    assert checkout_of(None) == checkout


def test_the_readmes_held_out_figure_is_the_kept_zoo_json() -> None:
    import json

    from framework.zoo.recall import counts_as_detected, load_report, totals

    root = Path(__file__).resolve().parents[2]
    kept = root / "docs" / "measurements" / "data" / "2026-11-29-zoo-7.3-w8.json"
    report = totals(load_report(kept))
    assert report["plan"]["version"] == "w8"
    row = next(line for line in (root / "README.md").read_text().splitlines()
               if line.startswith("| zoo-7.3 (7.3.4) | w8"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[3:5] == [str(report["recall"]["entries"]), str(report["recall"]["detected"])]
    assert cells[5].startswith(f"{report['false_alarms']} in {report['false_alarm_states']:,} states")
    # No path of the machine it ran on.
    assert "/root/" not in json.dumps(json.loads(kept.read_text()))

    # The row after the mkfs flush: the held-out run's detected entries, with those of the
    # entries run again replaced by the second run's verdicts.
    again = load_report(kept.with_name("2026-11-29-zoo-7.3-w8-logdev-again.json"))
    assert again["plan"]["version"] == "w8"
    verdicts = {e["name"]: counts_as_detected(e) for e in load_report(kept)["entries"]}
    verdicts.update({e["name"]: counts_as_detected(e) for e in again["entries"]})
    second = totals(again)
    row = next(line for line in (root / "README.md").read_text().splitlines()
               if line.startswith("| zoo-7.3 (7.3.4), after the mkfs flush |"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[3:5] == [str(len(verdicts)), str(sum(verdicts.values()))]
    assert cells[5].startswith(f"{second['false_alarms']} in {second['false_alarm_states']:,} states")
    assert "/root/" not in json.dumps(again) and "/work/" not in json.dumps(again)


class FakeFstestsGuest:
    """Stands in for the fstests guest of framework.zoo.fstests.run_test: keeps the disks it
    was given and the commands it ran (``seen``, one record a guest), boots through
    ``boot`` (which may raise), and answers every command with a passing ./check."""

    seen: ClassVar[list[dict]] = []
    boot = staticmethod(lambda: None)

    def __init__(self, **kwargs) -> None:
        self.seen.append({"disks": [(d.name, d.size_bytes) for d in kwargs["disks"]], "runs": []})

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def start(self) -> None:
        self.boot()

    def disk(self, name: str) -> str:
        return f"/dev/disk-{name}"

    def run(self, argv, **kwargs):
        self.seen[-1]["runs"].append(list(argv))
        return subprocess.CompletedProcess(argv, 0, "Ran: generic/997\nPassed all 1 tests\n", "")


def fake_fstests(tmp_path, monkeypatch, boot=lambda: None):
    """run_test's guest faked (a fresh FakeFstestsGuest class, whose ``seen`` is returned),
    a checkout holding generic/997 and a kernel spec: (checkout, spec, seen)."""
    from framework.core.machine.kernel import KernelSpec
    from framework.zoo import fstests as zoo_fstests

    guest = type("Guest", (FakeFstestsGuest,), {"seen": [], "boot": staticmethod(boot)})
    monkeypatch.setattr(zoo_fstests, "QemuMachine", guest)
    checkout = tmp_path / "xfstests"
    (checkout / "tests" / "generic").mkdir(parents=True)
    (checkout / "tests" / "generic" / "997").write_text("#!/bin/bash\n")
    return checkout, KernelSpec(tmp_path / "vmlinuz", "7.3.4-test", tmp_path), guest.seen


def test_a_two_disk_target_gets_the_journal_disk_and_a_test_device_without_it(
        tmp_path, monkeypatch) -> None:
    """run_test for ext4/logdev: a fourth disk of the journal disk's size, named in
    local.config as SCRATCH_LOGDEV with USE_EXTERNAL=yes; the test device made with its
    journal inside (no journal disk is needed there). ext4/ordered: three disks, neither
    line. The guest is a fake that keeps what it was given."""
    from framework.zoo import fstests as zoo_fstests

    checkout, spec, seen = fake_fstests(tmp_path, monkeypatch)
    configs = {}
    for target in ("ext4/logdev", "ext4/ordered"):
        verdict = zoo_fstests.run_test(checkout, "generic/997", target, spec,
                                       tmp_path / target.replace("/", "-"))
        assert verdict.verdict == "passed", verdict
        configs[target] = (tmp_path / target.replace("/", "-") / "xfstests" /
                           "local.config").read_text()
    two, one = seen
    assert [n for n, _ in two["disks"]] == ["test", "scratch", "logwrites", "logdev"]
    assert two["disks"][3][1] == 128 << 20
    assert [n for n, _ in one["disks"]] == ["test", "scratch", "logwrites"]
    assert "export SCRATCH_LOGDEV=/dev/vdd\nexport USE_EXTERNAL=yes\n" in configs["ext4/logdev"]
    assert "SCRATCH_LOGDEV" not in configs["ext4/ordered"]
    mkfs_test = next(r for r in two["runs"] if r[0] == "mke2fs")
    assert mkfs_test[-1] == "/dev/disk-test" and not any("device=" in a for a in mkfs_test)


