"""Checking one crash state: step order, outcome per step, hangs as findings."""

from __future__ import annotations

import pytest

from crashcases.check import CheckResult, check_state, check_states, outcome_of
from crashcases.execute import execute
from crashcases.vocabulary import Outcome, fails
from crashcases.workload.cases import load_case
from framework.core.errors import CommandTimeout
from framework.core.machine.fake import FakeMachine
from recovery.filesystems import persistence_rules
from recovery.mount import Timeouts
from recovery.targets import get_target


@pytest.fixture
def tree(tmp_path):
    """A 'mounted' tree that holds exactly what the workload did, and its oracle."""
    root = tmp_path / "mnt"
    root.mkdir()
    oracle = execute(load_case("hand:write-fsync-rename", seed=0), root, lambda name: None)
    return root, oracle


def run(tree, target="ext4/ordered", fake=None):
    root, oracle = tree
    fake = fake or FakeMachine(rundir=root.parent)
    return check_state(fake, get_target(target), "/dev/mapper/snap", root, oracle=oracle,
                       last_mark=oracle.marks[-1], rules=persistence_rules(get_target(target)), key="7/prefix",
                       timeouts=Timeouts(mount_s=5, fsck_s=5, umount_s=5)), fake


def commands(fake):
    return [c[0] for c in fake.calls if c[0] in ("mount", "umount", "e2fsck")]


def test_intact_state_is_ok_and_steps_run_in_order(tree):
    result, fake = run(tree)
    assert result.outcome is Outcome.OK and result.findings == []
    assert commands(fake) == ["mount", "umount", "e2fsck"]
    assert result.mount_ok and result.fsck_check == "clean" and result.fsck_repair == ""


def test_lost_file_is_data_loss(tree):
    (tree[0] / "h" / "data").unlink()
    result, _ = run(tree)
    assert result.outcome is Outcome.DATA_LOSS
    assert result.findings[0]["kind"] == "data-loss" and result.findings[0]["path"] == "h/data"


def test_fsck_repair_means_recovered_and_unrepairable_means_corrupt(tree):
    fake = FakeMachine(rundir=tree[0].parent)
    fake.on("e2fsck -f -n *", status=4, stdout="Inode 12 has bad blocks")
    fake.on("e2fsck -f -y *", status=1, stdout="FILE SYSTEM WAS MODIFIED")
    result, _ = run(tree, fake=fake)
    assert (result.fsck_check, result.fsck_repair, result.outcome) == ("corrupt", "repaired", Outcome.RECOVERED)
    fake.on("e2fsck -f -y *", status=4, stdout="errors left uncorrected")
    result, _ = run(tree, fake=fake)
    assert result.outcome is Outcome.CORRUPT


def test_refused_mount_is_unmountable(tree):
    fake = FakeMachine(rundir=tree[0].parent)
    fake.on("mount *", status=32, stderr="mount: wrong fs type, bad superblock")
    result, _ = run(tree, fake=fake)
    assert result.outcome is Outcome.UNMOUNTABLE and "bad superblock" in result.mount_error
    assert "umount" not in commands(fake)


def test_a_mount_past_its_deadline_is_a_hang(tree):
    def stuck(argv, _input):
        raise CommandTimeout("command timed out after 5 s: mount /dev/mapper/snap")

    fake = FakeMachine(rundir=tree[0].parent)
    fake.on("mount *", respond=stuck)
    result, _ = run(tree, fake=fake)
    assert result.outcome is Outcome.HANG and "timed out" in result.notes[0]


def test_unjournalled_targets_get_fsck_before_mount(tree):
    fake = FakeMachine(rundir=tree[0].parent)
    fake.on("e2fsck -f -y *", status=1)
    calls = iter([4, 0])  # errors before the repair, clean after it
    fake.on("e2fsck -f -n *", respond=lambda argv, _i: (next(calls), "", ""))
    result, _ = run(tree, target="ext2", fake=fake)
    assert commands(fake) == ["e2fsck", "e2fsck", "mount", "umount", "e2fsck"]
    assert result.outcome is Outcome.RECOVERED


def test_outcome_picks_the_worst_step():
    r = CheckResult(key="k", mount_ok=True, fsck_check="corrupt", fsck_repair="repaired",
                    findings=[{"kind": "data-loss", "path": "a", "detail": "", "mark": "pc-1"}])
    assert outcome_of(r) is Outcome.DATA_LOSS
    r.findings = [{"kind": "io-error", "path": "a", "detail": "EIO", "mark": None}]
    assert outcome_of(r) is Outcome.CORRUPT
    r.mount_ok = False
    assert outcome_of(r) is Outcome.UNMOUNTABLE
    assert CheckResult.from_dict(r.to_dict()) == r


def test_a_read_only_check_that_stopped_at_damage_the_repair_fixed_is_recovered():
    # e2fsck -n: "Directory inode 26631, block #0, offset 0: directory corrupted /
    # Salvage? no / e2fsck: aborted" (exit 8); e2fsck -y then repaired it.
    r = CheckResult(key="k", mount_ok=True, fsck_check="failed", fsck_repair="repaired")
    assert outcome_of(r) is Outcome.RECOVERED
    assert fails(outcome_of(r), get_target("ext4/ordered"))  # a journal must not need it
    assert not fails(outcome_of(r), get_target("ext2"))  # repair at boot is ext2's recovery
    r.fsck_repair = "failed"
    assert outcome_of(r) is Outcome.CORRUPT




def jfs_fake(tree):
    """A JFS state whose log still needs replay: jfs_fsck -n says dirty (exit 4) until -a ran."""
    fake = FakeMachine(rundir=tree[0].parent)
    replayed = {"done": False}

    def replay(argv, _input):
        replayed["done"] = True
        return 0, "**Phase 0 - Replay Journal Log\nFilesystem is clean.", ""

    def check(argv, _input):
        if replayed["done"]:
            return 0, "File system checked READ ONLY.\nFilesystem is clean.", ""
        return 4, "The superblock does not describe a correct jfs file system.\nFile system is dirty.", ""

    fake.on("jfs_fsck -a *", respond=replay)
    fake.on("jfs_fsck -n *", respond=check)
    fake.on("jfs_fsck -a -f *", status=0)
    return fake


def test_jfs_log_is_replayed_by_its_checker_before_the_read_only_check(tree):
    # The kernel never replays a JFS log; jfs_fsck -n does not either. Without the
    # replay step every crashed JFS volume was reported corrupt (check said dirty)
    # and its committed transactions were never applied before the oracle ran.
    fake = jfs_fake(tree)
    result, _ = run(tree, target="jfs", fake=fake)
    jfs = [c for c in fake.calls if c[0] == "jfs_fsck"]
    assert [c[1] for c in jfs[:2]] == ["-a", "-n"]
    assert result.fsck_check == "clean" and result.fsck_repair == ""
    assert result.log_replay_s is not None and result.outcome is Outcome.OK
    assert result.replay_messages and result.replay_messages[0].startswith("jfs_fsck -a")
    assert result.explanation == ""


def test_every_failing_outcome_is_explained_in_the_checkers_words(tree):
    fake = FakeMachine(rundir=tree[0].parent)
    fake.on("e2fsck -f -n *", status=4, stdout="Pass 2: Checking directory structure\n"
                                              "Entry 'x' in / (2) has deleted/unused inode 13.")
    fake.on("e2fsck -f -y *", status=4, stdout="***** FILE SYSTEM WAS MODIFIED *****\n"
                                             "e2fsck: aborted")
    result, _ = run(tree, fake=fake)
    assert result.outcome is Outcome.CORRUPT
    assert "deleted/unused inode 13" in result.explanation and "e2fsck: aborted" in result.explanation
    assert "e2fsck -f -n" in result.fsck_check_output

    (tree[0] / "h" / "data").unlink()
    result, _ = run(tree)
    assert result.outcome is Outcome.DATA_LOSS and result.explanation.startswith("data-loss: h/data")

    fake = FakeMachine(rundir=tree[0].parent)
    fake.on("mount *", status=32, stderr="mount: wrong fs type, bad superblock")
    result, _ = run(tree, fake=fake)
    assert "mount failed" in result.explanation and "bad superblock" in result.explanation


def test_no_outcome_but_ok_is_left_without_an_explanation():
    from crashcases.check import explain

    for outcome in Outcome:
        r = CheckResult(key="k", outcome=outcome, mount_ok=True)
        assert bool(explain(r)) is (outcome is not Outcome.OK)


def run_shared(tree, states, fake=None):
    root, oracle = tree
    fake = fake or FakeMachine(rundir=root.parent)
    target = get_target("ext4/ordered")
    return check_states(fake, target, "/dev/mapper/snap", root, oracle=oracle, states=states,
                        rules=persistence_rules(target),
                        timeouts=Timeouts(mount_s=5, fsck_s=5, umount_s=5)), fake


def test_states_with_the_same_bytes_share_one_mount_and_fsck_but_not_their_promises(tree):
    root, oracle = tree
    (root / "h" / "data").unlink()
    fake = FakeMachine(rundir=root.parent)
    fake.on("e2fsck -f -n *", status=4, stdout="Inode 12 has bad blocks")
    fake.on("e2fsck -f -y *", status=1, stdout="FILE SYSTEM WAS MODIFIED")
    # Nothing promised yet, then everything: the same disk, two verdicts.
    results, fake = run_shared(tree, [("3/prefix", None), ("5/prefix", oracle.marks[-1])], fake)
    assert commands(fake) == ["mount", "umount", "e2fsck", "e2fsck"]
    first, second = results
    assert (first.key, first.same_as, second.key, second.same_as) == ("3/prefix", "", "5/prefix",
                                                                        "3/prefix")
    assert first.findings == [] and first.outcome is Outcome.RECOVERED
    assert second.findings[0]["kind"] == "data-loss" and second.outcome is Outcome.DATA_LOSS
    assert "data-loss: h/data" in second.explanation
    for field in ("mount_ok", "mount_s", "fsck_check", "fsck_check_s", "fsck_repair",
                  "fsck_repair_output"):
        assert getattr(second, field) == getattr(first, field), field


def test_after_a_hang_only_the_first_of_the_shared_states_has_a_result(tree):
    def stuck(argv, _input):
        raise CommandTimeout("command timed out after 5 s: mount /dev/mapper/snap")

    fake = FakeMachine(rundir=tree[0].parent)
    fake.on("mount *", respond=stuck)
    results, _ = run_shared(tree, [("3/prefix", None), ("5/prefix", None)], fake)
    assert [(r.key, r.outcome) for r in results] == [("3/prefix", Outcome.HANG)]
