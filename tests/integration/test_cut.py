"""``powercut cut`` end to end in a guest: real power cuts on dm-flakey, and controls that must fire."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from crashcases.cut.engine import CutEngine, CutPlan, ValidatedCutPlan
from crashcases.vocabulary import Outcome
from crashcases.workload.cases import load_case
from framework.core.machine.qemu import QemuMachine
from recovery.filesystems import kernel_modules
from recovery.targets import target_from_dict

POWERCUT = [sys.executable, "-m", "framework.cli"]


def powercut_cut(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*POWERCUT, "cut", "--results", str(tmp_path / "results"),
                           "--db", str(tmp_path / "db.sqlite"), "-q", *args],
                          capture_output=True, text=True, timeout=900)


def results_of(tmp_path: Path) -> dict[str, Any]:
    (path,) = (tmp_path / "results").glob("cut-*/results.json")
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def test_cut_ext4_ordered_recovers_every_promise(tmp_path: Path) -> None:
    res = powercut_cut(tmp_path, "--target", "ext4/ordered", "--case", "random:200", "--trials", "2",
                       "--seed", "3")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "recovery after power cuts" in res.stdout and "ext4/ordered" in res.stdout
    assert "mount s median / p90 / max" in res.stdout
    doc = results_of(tmp_path)
    assert len(doc["trials"]) == 2
    for t in doc["trials"]:
        # A journalled target must recover at mount: fsck finds nothing to repair.
        assert t["outcome"] == "ok", t
        assert t["mount_s"] > 0 and t["fsck_s"] > 0
        assert t["drive"]["promised"] >= 1 and t["drive"]["post_cut_ops"] >= 1
        assert t["check"]["fsck_check"] == "clean"
        assert t["checked_mark"] == t["drive"]["last_mark"]


def test_cut_error_writes_makes_the_workload_see_eio(tmp_path: Path) -> None:
    res = powercut_cut(tmp_path, "--target", "ext4/ordered", "--case", "hand:append-fdatasync",
                       "--trials", "1", "--cut-after-ops", "3", "--mode", "error_writes", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    (trial,) = doc["trials"]
    # The control: fdatasync after the cut must fail, not pretend.
    assert trial["drive"]["post_cut_errors"].get("EIO", 0) >= 1, trial["drive"]
    assert trial["drive"]["post_cut_promises"] == []
    assert trial["outcome"] == "ok" and trial["drive"]["promised"] == 3


def test_cut_positive_control_counting_lied_fsyncs_finds_data_loss(tmp_path: Path) -> None:
    """With drop_writes, fsyncs after the cut return success and their data vanishes."""
    res = powercut_cut(tmp_path, "--target", "ext4/ordered", "--case", "hand:append-fdatasync",
                       "--trials", "1", "--cut-after-ops", "3", "--count-post-cut-fsync")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "data-loss" in res.stdout
    (trial,) = results_of(tmp_path)["trials"]
    assert trial["outcome"] == "data-loss"
    assert trial["drive"]["post_cut_promises"] and trial["checked_mark"] == trial["drive"]["post_cut_promises"][-1]


def test_a_target_only_the_host_knows_is_cut_and_checked_in_the_guest(tmp_path: Path) -> None:
    """The requests carry the whole target: the guest never looks a name up."""
    mine = target_from_dict({"name": "ext4/commit1", "fstype": "ext4",
                             "mount_options": ["data=ordered", "commit=1"]})
    plan = CutPlan(targets=(mine.name,), case="random:60", trials=1, seed=5)

    def factory(disks: Any, rundir: Path, fstypes: tuple[str, ...]) -> QemuMachine:
        return QemuMachine(disks=disks, modules=kernel_modules(fstypes), rundir=rundir).start()

    engine = CutEngine(ValidatedCutPlan(plan, (mine,), load_case("random:60", seed=5)), tmp_path,
                       factory)
    try:
        trial = engine.run_trial(mine.name, 0)
    finally:
        engine.close()
    assert trial.outcome is Outcome.OK, trial
    assert trial.check is not None and trial.check.mount_ok and trial.drive is not None
    assert trial.checked_mark == trial.drive.last_mark


def test_a_cut_takes_the_external_journal_disk_down_with_the_data_disk(tmp_path: Path) -> None:
    """The journal on its own disk: both disks are cut, recovery is given the journal
    device, and the filesystem's own tool shows the journal is on the other disk."""
    res = powercut_cut(tmp_path, "--target", "ext4/logdev,xfs/logdev", "--case", "random:150",
                       "--trials", "1", "--seed", "5")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = results_of(tmp_path)
    evidence = doc["journal_evidence"]
    assert evidence["ext4/logdev"].startswith("dumpe2fs -h ") and \
        "Journal device:" in evidence["ext4/logdev"], evidence
    assert "Journal inode:" not in evidence["ext4/logdev"]
    assert "log =external" in evidence["xfs/logdev"], evidence
    assert "journal of ext4/logdev: dumpe2fs" in res.stdout
    replays = {}
    for t in doc["trials"]:
        assert t["outcome"] == "ok", t
        assert t["drive"]["post_cut_ops"] >= 1, t["drive"]
        assert t["mount_s"] > 0 and t["fsck_s"] > 0
        replays[t["target"]] = " | ".join(t["check"]["replay_messages"])
    # The cut left both journals to replay at mount; xfs names the device it replayed.
    assert "recovery complete" in replays["ext4/logdev"], replays
    assert "Ending recovery (logdev: /dev/mapper/pc-flakey-journal)" in replays["xfs/logdev"]
