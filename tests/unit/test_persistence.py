"""Each persistence rule on its own: the state it forbids fires only when the rule is on;
and which rules a target gets: from its filesystem, journal and options, never its name."""

from __future__ import annotations

import os
from dataclasses import fields, replace
from pathlib import Path

import pytest

from crashcases.oracle.finding import FindingKind
from crashcases.oracle.log import OracleLog
from crashcases.oracle.verify import verify
from crashcases.workload.ops import FallocMode, Op, OpKind, op_data
from framework.core.errors import ConfigError
from recovery.filesystems import persistence_rules
from recovery.persistence import RULE_SENTENCES, PersistenceRules, posix_strict
from recovery.targets import Target, get_target, list_targets, parse_targets
from tests.unit.test_oracle import kinds, run

K = OpKind
B = 4096
POSIX = posix_strict()


def with_rule(**rule: bool) -> PersistenceRules:
    return replace(POSIX, name="one-rule", **rule)


def test_posix_strict_promises_only_posix() -> None:
    r = posix_strict()
    assert not (
        r.fsync_file_persists_names
        or r.fdatasync_persists_new_names
        or r.rename_replace_flushes_data
    )
    assert not (r.metadata_atomic or r.data_block_atomic or r.data_writes_atomic)
    assert r.stale_data_after_extension


@pytest.mark.parametrize("sync", [K.FSYNC, K.FDATASYNC])
def test_new_file_dentry_needs_rule_or_dir_fsync(sync: OpKind, tmp_path: Path) -> None:
    _, oracle, marks = run(
        [Op(K.MKDIR, "d"), Op(K.CREAT, "d/f"), Op(K.WRITE, "d/f", length=B), Op(sync, "d/f")],
        tmp_path / "r",
    )
    (tmp_path / "r/d/f").unlink()
    assert verify(oracle, tmp_path / "r", last_mark=marks[0], rules=POSIX) == []
    rule = "fsync_file_persists_names" if sync is K.FSYNC else "fdatasync_persists_new_names"
    found = verify(oracle, tmp_path / "r", last_mark=marks[0], rules=with_rule(**{rule: True}))
    assert kinds(found) == {(FindingKind.DATA_LOSS, "d/f")}
    other = "fdatasync_persists_new_names" if sync is K.FSYNC else "fsync_file_persists_names"
    assert (
        verify(oracle, tmp_path / "r", last_mark=marks[0], rules=with_rule(**{other: True})) == []
    )


def test_new_ancestor_dentry_follows_fsync_of_file(tmp_path: Path) -> None:
    _, oracle, marks = run(
        [Op(K.MKDIR, "d"), Op(K.CREAT, "d/f"), Op(K.FSYNC, "d/f")], tmp_path / "r"
    )
    os.rename(tmp_path / "r/d", tmp_path / "r/x")
    assert verify(oracle, tmp_path / "r", last_mark=marks[0], rules=POSIX) == []
    found = verify(
        oracle, tmp_path / "r", last_mark=marks[0], rules=with_rule(fsync_file_persists_names=True)
    )
    assert (FindingKind.DATA_LOSS, "d") in kinds(found)


def test_fsync_after_rename_persists_both_names_with_rule(tmp_path: Path) -> None:
    ops = [Op(K.CREAT, "a"), Op(K.SYNC), Op(K.RENAME, "a", dst="b"), Op(K.FSYNC, "b")]
    _, oracle, marks = run(ops, tmp_path / "r")
    os.rename(tmp_path / "r/b", tmp_path / "r/a")
    assert verify(oracle, tmp_path / "r", last_mark=marks[1], rules=POSIX) == []
    found = verify(
        oracle, tmp_path / "r", last_mark=marks[1], rules=with_rule(fsync_file_persists_names=True)
    )
    assert kinds(found) == {(FindingKind.DATA_LOSS, "b"), (FindingKind.UNEXPECTED_ENTRY, "a")}


def test_fsync_after_renaming_the_parent_promises_nothing_about_it(tmp_path: Path) -> None:
    # The rename of the parent is not the file's own change: not promised by fsync(file).
    ops = [
        Op(K.MKDIR, "d"),
        Op(K.CREAT, "d/f"),
        Op(K.SYNC),
        Op(K.RENAME, "d", dst="e"),
        Op(K.FSYNC, "e/f"),
    ]
    _, oracle, marks = run(ops, tmp_path / "r")
    os.rename(tmp_path / "r/e", tmp_path / "r/d")
    assert verify(oracle, tmp_path / "r", last_mark=marks[1], rules=persistence_rules(get_target("xfs"))) == []


def test_rename_replace_flushes_data(tmp_path: Path) -> None:
    ops = [
        Op(K.CREAT, "conf"),
        Op(K.WRITE, "conf", length=B + 10),
        Op(K.SYNC),
        Op(K.CREAT, "new"),
        Op(K.WRITE, "new", length=B + 300),
        Op(K.RENAME, "new", dst="conf"),
        Op(K.FSYNC_DIR, ""),
    ]
    _, oracle, marks = run(ops, tmp_path / "r")
    (tmp_path / "r/conf").write_bytes(b"")  # the name moved, the data never came (zero-length file)
    assert verify(oracle, tmp_path / "r", last_mark=marks[1], rules=POSIX) == []
    found = verify(
        oracle,
        tmp_path / "r",
        last_mark=marks[1],
        rules=with_rule(rename_replace_flushes_data=True, metadata_atomic=True),
    )
    assert kinds(found) == {(FindingKind.DATA_LOSS, "conf")}
    assert "at least 4396 B" in found[0].detail


def test_metadata_atomic_checks_symlink_target_and_link_count(tmp_path: Path) -> None:
    ops = [Op(K.CREAT, "f"), Op(K.SYMLINK, "l", target="f"), Op(K.FSYNC_DIR, "")]
    _, oracle, marks = run(ops, tmp_path / "r")
    (tmp_path / "r/l").unlink()
    (tmp_path / "r/l").symlink_to("garbage")
    os.link(tmp_path / "r/f", tmp_path / "outside")  # a name the walk of the root cannot see
    assert verify(oracle, tmp_path / "r", last_mark=marks[0], rules=POSIX) == []
    found = verify(
        oracle, tmp_path / "r", last_mark=marks[0], rules=with_rule(metadata_atomic=True)
    )
    assert kinds(found) == {(FindingKind.WRONG_TARGET, "l"), (FindingKind.LINK_COUNT, "f")}


def _overwritten(tmp_path: Path) -> tuple[OracleLog, list[str], bytes, bytes]:
    ops = [
        Op(K.CREAT, "f"),
        Op(K.WRITE, "f", length=2 * B),
        Op(K.SYNC),
        Op(K.PWRITE, "f", offset=0, length=2 * B),
        Op(K.SYNC),
    ]
    _, oracle, marks = run(ops, tmp_path / "r")
    return oracle, marks, op_data(1, 1, 2 * B), op_data(1, 3, 2 * B)


def test_data_block_atomic_forbids_torn_blocks(tmp_path: Path) -> None:
    oracle, marks, old, new = _overwritten(tmp_path)
    torn = new[:512] + old[512:]  # first sector of block 0 new, the rest old
    (tmp_path / "r/f").write_bytes(torn)
    assert verify(oracle, tmp_path / "r", last_mark=marks[0], rules=POSIX) == []
    found = verify(
        oracle, tmp_path / "r", last_mark=marks[0], rules=with_rule(data_block_atomic=True)
    )
    assert kinds(found) == {(FindingKind.WRONG_CONTENT, "f")}


def test_data_writes_atomic_forbids_block_mixes(tmp_path: Path) -> None:
    oracle, marks, old, new = _overwritten(tmp_path)
    (tmp_path / "r/f").write_bytes(new[:B] + old[B:])
    assert (
        verify(oracle, tmp_path / "r", last_mark=marks[0], rules=with_rule(data_block_atomic=True))
        == []
    )
    found = verify(
        oracle, tmp_path / "r", last_mark=marks[0], rules=with_rule(data_writes_atomic=True)
    )
    assert kinds(found) == {(FindingKind.WRONG_CONTENT, "f")}


def test_stale_data_after_extension(tmp_path: Path) -> None:
    ops = [
        Op(K.CREAT, "f"),
        Op(K.WRITE, "f", length=B),
        Op(K.SYNC),
        Op(K.APPEND, "f", length=B),
        Op(K.SYNC),
    ]
    _, oracle, marks = run(ops, tmp_path / "r")
    (tmp_path / "r/f").write_bytes(
        op_data(1, 1, B) + b"\xaa" * B
    )  # old disk contents in the new block
    assert verify(oracle, tmp_path / "r", last_mark=marks[0], rules=POSIX) == []
    no_stale = with_rule(stale_data_after_extension=False, data_block_atomic=True)
    assert kinds(verify(oracle, tmp_path / "r", last_mark=marks[0], rules=no_stale)) == {
        (FindingKind.WRONG_CONTENT, "f")
    }


def test_a_block_of_another_files_data_fires_only_under_its_rule(tmp_path: Path) -> None:
    ops = [
        Op(K.CREAT, "a"),
        Op(K.WRITE, "a", length=2 * B),
        Op(K.FSYNC, "a"),
        Op(K.UNLINK, "a"),
        Op(K.CREAT, "b"),
        Op(K.WRITE, "b", length=3 * B),  # never promised
        Op(K.FSYNC, "b"),
    ]
    _, oracle, marks = run(ops, tmp_path / "r")
    (tmp_path / "r/a").unlink(missing_ok=True)
    mine = op_data(1, 5, 3 * B)
    rule = with_rule(other_files_data_never_exposed=True)
    # Unpromised blocks: b's own data, zeros and bytes nobody wrote are all legitimate.
    for legit in (mine[:B] + bytes(B) + b"\xaa" * B, mine[:B] + mine[2 * B:] + mine[B:2 * B]):
        (tmp_path / "r/b").write_bytes(legit)
        assert verify(oracle, tmp_path / "r", last_mark=marks[0], rules=rule) == []
    # a's removed data read through b: only the rule makes it a finding.
    (tmp_path / "r/b").write_bytes(mine[:B] + op_data(1, 1, 2 * B)[B:] + bytes(B))
    assert verify(oracle, tmp_path / "r", last_mark=marks[0], rules=POSIX) == []
    found = verify(oracle, tmp_path / "r", last_mark=marks[0], rules=rule)
    assert kinds(found) == {(FindingKind.WRONG_CONTENT, "b")}
    assert found[0].block == 1 and found[0].names == ("a",)
    assert "another file's data, from op 1 (write a" in found[0].detail and "never had" in found[0].detail


def test_punched_hole_reads_zeros_once_promised(tmp_path: Path) -> None:
    ops = [
        Op(K.CREAT, "f"),
        Op(K.WRITE, "f", length=2 * B),
        Op(K.SYNC),
        Op(K.FALLOCATE, "f", offset=0, length=B, falloc=FallocMode.PUNCH_HOLE),
        Op(K.FSYNC, "f"),
    ]
    _, oracle, marks = run(ops, tmp_path / "r")
    (tmp_path / "r/f").write_bytes(op_data(1, 1, 2 * B))  # the hole came back
    assert verify(oracle, tmp_path / "r", last_mark=marks[0], rules=POSIX) == []
    assert kinds(verify(oracle, tmp_path / "r", last_mark=marks[1], rules=POSIX)) == {
        (FindingKind.WRONG_CONTENT, "f")
    }


# The rules every built-in target had when they were still chosen by target
# name: the move to the adapters must not change one of them. Columns, in
# field order: fsync names, fsync exchanged names, fdatasync new names,
# rename-replace flushes data, metadata atomic, data block atomic, data writes
# atomic, stale data after extension, other files' data never exposed ("T"
# holds, "." does not). The second column came later: xfs alone does not log
# the inodes of a RENAME_EXCHANGE; so did the one before last: f2fs, ext4 data=writeback
# and filesystems without a journal may show a freed block's old data; and the last, inode
# flags held with the inode's metadata, where a journal (or log) carries them.
FIELDS = ("fsync_file_persists_names", "fsync_file_persists_exchanged_names",
          "fdatasync_persists_new_names",
          "rename_replace_flushes_data", "metadata_atomic", "data_block_atomic",
          "data_writes_atomic", "stale_data_after_extension", "other_files_data_never_exposed",
          "inode_flags_durable")
PINNED = {
    "ext2": ("ext2", ".......T.."),
    "ext3": ("ext3/ordered", "TTTTT...TT"),
    "ext3/logdev": ("ext3/ordered", "TTTTT...TT"),
    "ext4/ordered": ("ext4/ordered", "TTTTT...TT"),
    "ext4/writeback": ("ext4/writeback", "TTT.T..T.T"),
    "ext4/journal": ("ext4/journal", "TTTTTT..TT"),
    "ext4/nojournal": ("ext4/nojournal", ".......T.."),
    "ext4/fast_commit": ("ext4/ordered", "TTTTT...TT"),
    "ext4/logdev": ("ext4/ordered", "TTTTT...TT"),
    "ext4/nobarrier": ("ext4/ordered", "TTTTT...TT"),
    "xfs": ("xfs", "T.T.T...TT"),
    "xfs/logdev": ("xfs", "T.T.T...TT"),
    "btrfs": ("btrfs", "TTT.TT..TT"),
    "f2fs": ("f2fs", "TTT.T....T"),
    "jfs": ("jfs", "....T..T.."),
    "jfs/logdev": ("jfs", "....T..T.."),
    "reiserfs": ("reiserfs", "....T..T.."),
}


def pinned(name: str) -> PersistenceRules:
    rules_name, flags = PINNED[name]
    return PersistenceRules(name=rules_name, **{f: c == "T" for f, c in zip(FIELDS, flags)})


def test_every_builtin_target_is_pinned() -> None:
    assert [t.name for t in list_targets()] == list(PINNED)
    assert tuple(f.name for f in fields(PersistenceRules) if f.name != "name") == FIELDS


@pytest.mark.parametrize("name", list(PINNED))
def test_builtin_rules_are_unchanged(name: str) -> None:
    assert persistence_rules(get_target(name)) == pinned(name)


def user_target(body: str, name: str = "mine") -> Target:
    return parse_targets(f'[targets."{name}"]\n{body}\n', source="mine.toml")[name]


def test_rules_follow_options_not_the_name() -> None:
    mine = user_target('fstype = "ext4"\nmount_options = ["data=journal"]')
    assert persistence_rules(mine) == persistence_rules(get_target("ext4/journal"))
    # A name that looks like a mode says nothing: the options decide.
    lying = user_target('fstype = "ext4"\nmount_options = ["data=writeback"]', name="ext4/journal2")
    assert persistence_rules(lying) == persistence_rules(get_target("ext4/writeback"))
    plain = user_target('fstype = "ext4"', name="ext4/mine")
    assert persistence_rules(plain) == persistence_rules(get_target("ext4/ordered"))


def test_last_data_option_wins_and_commas_split() -> None:
    mine = user_target('fstype = "ext4"\nmount_options = ["data=journal,noatime", "data=writeback"]')
    assert persistence_rules(mine) == persistence_rules(get_target("ext4/writeback"))


@pytest.mark.parametrize("option", ["noauto_da_alloc", "auto_da_alloc=0"])
@pytest.mark.parametrize("mode", ["ordered", "journal"])
def test_noauto_da_alloc_loses_rename_replace(mode: str, option: str) -> None:
    base = persistence_rules(get_target(f"ext4/{mode}"))
    mine = persistence_rules(user_target(
        f'fstype = "ext4"\nmount_options = ["data={mode}", "{option}"]'))
    assert base.rename_replace_flushes_data and not mine.rename_replace_flushes_data
    assert replace(mine, name=base.name, rename_replace_flushes_data=True) == base
    assert mine.name != base.name  # different checks, different name
    again = persistence_rules(user_target(
        f'fstype = "ext4"\nmount_options = ["data={mode}", "{option}", "auto_da_alloc"]'))
    assert again == base


def test_no_journal_comes_from_mkfs_options_and_placement() -> None:
    mine = user_target('fstype = "ext4"\nmkfs_options = ["-O", "metadata_csum,^has_journal"]\n'
                       'journal = "none"')
    assert persistence_rules(mine) == persistence_rules(get_target("ext4/nojournal"))
    ext3 = user_target('fstype = "ext3"\nmkfs_options = ["-O^has_journal"]\njournal = "none"')
    assert persistence_rules(ext3) == posix_strict("ext3/nojournal")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('fstype = "ext4"\nmount_options = ["data=journaled"]',
         "mount_options: unknown ext4 data mode 'journaled' (known: ordered, writeback, journal)"),
        ('fstype = "ext3"\nmount_options = ["rw,data="]', "unknown ext3 data mode ''"),
        ('fstype = "ext4"\njournal = "none"', "'none', but mke2fs makes ext4 with a journal"),
        ('fstype = "ext4"\nmkfs_options = ["-O", "^has_journal"]',
         "'internal', but mke2fs makes ext4 without a journal"),
        ('fstype = "ext2"', "'internal', but mke2fs makes ext2 without a journal"),
        ('fstype = "ext4"\nmkfs_options = ["-O", "^has_journal"]\njournal = "none"\n'
         'mount_options = ["data=journal"]', "data=journal needs a journal"),
        ('fstype = "xfs"\njournal = "none"', "xfs always has a journal"),
    ],
)
def test_bad_options_fail_at_load_time(body: str, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        user_target(body)
    message = str(err.value)
    assert message.startswith("mine.toml: targets.'mine'")
    assert expected in message
    assert "\n" not in message


def test_rules_of_an_unchecked_target_still_refuse_an_unknown_mode() -> None:
    target = Target(name="direct", fstype="ext4", mount_options=("data=bogus",))
    with pytest.raises(ConfigError, match=r"targets.'direct'.mount_options: unknown ext4 data mode"):
        persistence_rules(target)


def test_btrfs_nodatacow_gives_up_block_atomicity() -> None:
    cow = persistence_rules(get_target("btrfs"))
    nocow = persistence_rules(user_target('fstype = "btrfs"\nmount_options = ["nodatacow"]'))
    assert cow.data_block_atomic and not nocow.data_block_atomic
    assert replace(nocow, name=cow.name, data_block_atomic=True) == cow
    back = persistence_rules(user_target('fstype = "btrfs"\nmount_options = ["nodatacow,datacow"]'))
    assert back == cow


def test_every_rule_has_a_sentence() -> None:
    assert set(RULE_SENTENCES) == set(FIELDS)
    assert posix_strict().guarantees() == []
    assert pinned("ext4/journal").guarantees() == [
        "fsync_file_persists_names", "fsync_file_persists_exchanged_names",
        "fdatasync_persists_new_names",
        "rename_replace_flushes_data", "metadata_atomic", "data_block_atomic",
        "stale_data_after_extension", "other_files_data_never_exposed", "inode_flags_durable",
    ]
