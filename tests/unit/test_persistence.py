"""Each persistence rule on its own: the state it forbids fires only when the rule is on."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from crashcases.operations import FallocMode, Op, OpKind, op_data
from crashcases.oracle import FindingKind, OracleLog, verify
from crashcases.persistence import PersistenceRules, for_filesystem, posix_strict
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
    assert verify(oracle, tmp_path / "r", last_mark=marks[1], rules=for_filesystem("xfs")) == []


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
        rules=with_rule(rename_replace_flushes_data=True),
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


@pytest.mark.parametrize(
    ("fstype", "options", "journal", "expect"),
    [
        (
            "ext4",
            (),
            True,
            dict(
                name="ext4/ordered",
                rename_replace_flushes_data=True,
                metadata_atomic=True,
                stale_data_after_extension=False,
            ),
        ),
        (
            "ext4",
            ("rw,data=writeback",),
            True,
            dict(rename_replace_flushes_data=False, stale_data_after_extension=True),
        ),
        ("ext4", ("noauto_da_alloc",), True, dict(rename_replace_flushes_data=False)),
        ("ext4/journal", (), True, dict(data_block_atomic=True, rename_replace_flushes_data=True)),
        ("ext4", (), False, dict(metadata_atomic=False, fsync_file_persists_names=False)),
        ("ext4/nojournal", (), True, dict(metadata_atomic=False)),
        ("ext3", (), True, dict(fsync_file_persists_names=True)),
        ("ext2", (), True, dict(metadata_atomic=False, fsync_file_persists_names=False)),
        ("xfs", (), True, dict(fsync_file_persists_names=True, data_block_atomic=False)),
        ("btrfs", (), True, dict(fsync_file_persists_names=True, data_block_atomic=True)),
        ("reiserfs", (), True, dict(metadata_atomic=True, fsync_file_persists_names=False)),
        ("nosuchfs", (), True, dict(fsync_file_persists_names=False, metadata_atomic=False)),
    ],
)
def test_for_filesystem(
    fstype: str, options: tuple[str, ...], journal: bool, expect: dict[str, object]
) -> None:
    rules = for_filesystem(fstype, mount_options=options, journal=journal)
    for key, value in expect.items():
        assert getattr(rules, key) == value, key
    assert not rules.data_writes_atomic
