"""The durability oracle: clean on every legitimate state, firing on each kind of loss."""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crashcases.execute import execute, mark_name, perform
from crashcases.oracle import verify as oracle_mod
from crashcases.oracle.finding import Finding, FindingKind
from crashcases.oracle.log import OracleError, OracleLog, Recorder
from crashcases.oracle.promises import _InodeDurable, _ReplacedInEffect
from crashcases.oracle.verify import verify, walk_tree
from crashcases.vocabulary import RANGE_SYNC_OPS, SYNC_ALL_OPS, WHOLE_FILE_SYNC_OPS
from crashcases.workload.cases import load_case
from crashcases.workload.ops import (
    DURABILITY_OPS,
    FallocMode,
    Op,
    OpKind,
    Workload,
    needs_data,
    op_data,
)
from crashcases.workload.packing import pack
from crashcases.workload.streams import random_ops
from recovery.filesystems import persistence_rules
from recovery.persistence import PersistenceRules, posix_strict
from recovery.targets import get_target

K = OpKind
B = 4096
ALL_RULES = [
    posix_strict(),
    persistence_rules(get_target("ext2")),
    persistence_rules(get_target("ext4/ordered")),
    persistence_rules(get_target("ext4/writeback")),
    persistence_rules(get_target("ext4/journal")),
    persistence_rules(get_target("ext4/nojournal")),
    persistence_rules(get_target("xfs")),
    persistence_rules(get_target("btrfs")),
    persistence_rules(get_target("f2fs")),
    persistence_rules(get_target("jfs")),
]


def record(workload: Workload, root: Path) -> tuple[OracleLog, list[str]]:
    root.mkdir(parents=True, exist_ok=True)
    marks: list[str] = []
    return execute(workload, root, marks.append), marks


def packed_random(seed: int, ops: int, sequences: int = 4) -> Workload:
    """``sequences`` random workloads of ``ops`` ops each (seeds from ``seed`` on), packed."""
    seqs = [Workload(name=f"w{i}", seed=seed + i, ops=tuple(random_ops(ops, seed + i)))
            for i in range(sequences)]
    return pack(seqs, name="p", seed=seed, retire_every=2)


def prefix_states(workload: Workload, root: Path) -> Iterator[tuple[int, str | None]]:
    """Apply the ops one by one under ``root``; after each prefix yield (ops done, last mark)."""
    root.mkdir(parents=True, exist_ok=True)
    last: str | None = None
    marks = 0
    yield 0, None
    for index, op in enumerate(workload.ops):
        data = op_data(workload.seed, index, op.length) if needs_data(op) else b""
        try:
            perform(op, root, data)
        except OSError as exc:
            if exc.errno != errno.EOPNOTSUPP or op.kind in DURABILITY_OPS:
                raise
            continue  # as execute() skips it (reflinks on ext4)
        if op.kind in DURABILITY_OPS:
            last = mark_name(marks)
            marks += 1
        yield index + 1, last


def assert_clean_everywhere(
    workload: Workload, tmp: Path, rules_list: list[PersistenceRules] = ALL_RULES
) -> None:
    oracle, _ = record(workload, tmp / "recorded")
    for done, last in prefix_states(workload, tmp / "prefix"):
        for rules in rules_list:
            found = verify(oracle, tmp / "prefix", last_mark=last, rules=rules)
            assert found == [], f"after {done} ops, last mark {last}, rules {rules.name}: {found}"


def kinds(findings: list[Finding]) -> set[tuple[FindingKind, str]]:
    return {(f.kind, f.path) for f in findings}


def run(ops: list[Op], root: Path, seed: int = 1) -> tuple[Workload, OracleLog, list[str]]:
    w = Workload(name="t", seed=seed, ops=tuple(ops))
    oracle, marks = record(w, root)
    return w, oracle, marks


# -- negative controls: legitimate states ------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        "hand:write-fsync-rename",
        "hand:replace-rename-nofsync",
        "hand:append-fdatasync",
        "hand:create-dir-fsync",
        "hand:rename-dir",
        "hand:link-unlink",
        "hand:truncate-fallocate",
        "hand:xattr-fsync",
        "hand:symlink-fsync-dir",
        "hand:new-ops",
    ],
)
def test_every_prefix_state_of_hand_cases_is_clean(spec: str, tmp_path: Path) -> None:
    assert_clean_everywhere(load_case(spec, seed=3), tmp_path)


def test_generated_sequences_are_clean_at_every_prefix(tmp_path: Path) -> None:
    w = load_case("gen:seq2", seed=5, max_sequences=6)
    assert_clean_everywhere(
        w, tmp_path, [posix_strict(), persistence_rules(get_target("ext4/ordered")), persistence_rules(get_target("btrfs"))]
    )


def test_final_state_is_clean_at_last_mark(tmp_path: Path) -> None:
    w = load_case("gen:seq1", seed=2)
    oracle, marks = record(w, tmp_path)
    for rules in ALL_RULES:
        assert verify(oracle, tmp_path, last_mark=marks[-1], rules=rules) == []


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32), n_ops=st.integers(2, 35))
def test_random_workloads_clean_at_every_prefix(
    tmp_path_factory: pytest.TempPathFactory, seed: int, n_ops: int
) -> None:
    tmp = tmp_path_factory.mktemp("random")
    w = Workload(name="r", seed=seed, ops=tuple(random_ops(n_ops, seed)))
    assert_clean_everywhere(w, tmp)


def test_block_mix_of_in_flight_overwrite_is_accepted(tmp_path: Path) -> None:
    # fsync 2 blocks, then overwrite both in one pwrite: a crash may keep one old, one new.
    ops = [
        Op(K.CREAT, "f"),
        Op(K.WRITE, "f", length=2 * B),
        Op(K.FSYNC, "f"),
        Op(K.FSYNC_DIR, ""),
        Op(K.PWRITE, "f", offset=0, length=2 * B),
        Op(K.FSYNC, "f"),
    ]
    _, oracle, marks = run(ops, tmp_path / "r")
    old, new = op_data(1, 1, 2 * B), op_data(1, 4, 2 * B)
    (tmp_path / "r/f").write_bytes(old[:B] + new[B:])
    for rules in ALL_RULES:
        assert verify(oracle, tmp_path / "r", last_mark=marks[1], rules=rules) == []
    # After the second fsync the new data is promised: the same state loses block 0.
    found = verify(oracle, tmp_path / "r", last_mark=marks[2], rules=posix_strict())
    assert kinds(found) == {(FindingKind.WRONG_CONTENT, "f")}
    assert "block 0" in found[0].detail and marks[2] in found[0].detail


def test_in_flight_extension_may_show_zeros(tmp_path: Path) -> None:
    ops = [
        Op(K.CREAT, "f"),
        Op(K.WRITE, "f", length=B),
        Op(K.FSYNC, "f"),
        Op(K.FSYNC_DIR, ""),
        Op(K.APPEND, "f", length=B),
        Op(K.FSYNC, "f"),
    ]
    _, oracle, marks = run(ops, tmp_path / "r")
    # Size updated, data not yet written: the new block reads zeros.
    (tmp_path / "r/f").write_bytes(op_data(1, 1, B) + bytes(B))
    for rules in ALL_RULES:
        assert verify(oracle, tmp_path / "r", last_mark=marks[1], rules=rules) == []


def test_rename_in_flight_may_show_either_name(tmp_path: Path) -> None:
    ops = [
        Op(K.CREAT, "a"),
        Op(K.WRITE, "a", length=100),
        Op(K.FSYNC, "a"),
        Op(K.FSYNC_DIR, ""),
        Op(K.RENAME, "a", dst="b"),
        Op(K.FSYNC_DIR, ""),
    ]
    _, oracle, marks = run(ops, tmp_path / "r")
    os.rename(tmp_path / "r/b", tmp_path / "r/a")  # the rename did not reach the disk
    for rules in ALL_RULES:
        assert verify(oracle, tmp_path / "r", last_mark=marks[1], rules=rules) == []


def test_before_first_mark_nothing_is_promised(tmp_path: Path) -> None:
    ops = [Op(K.CREAT, "f"), Op(K.WRITE, "f", length=B), Op(K.FSYNC, "f")]
    _, oracle, _ = run(ops, tmp_path / "r")
    (tmp_path / "r/f").unlink()
    assert verify(oracle, tmp_path / "r", last_mark=None, rules=persistence_rules(get_target("ext4/ordered"))) == []


# -- positive controls: each loss fires ---------------------------------------

PROMISED = [
    Op(K.MKDIR, "d"),
    Op(K.CREAT, "d/f"),
    Op(K.WRITE, "d/f", length=3 * B),
    Op(K.SETXATTR, "d/f", xattr="user.x", length=8),
    Op(K.SYMLINK, "d/l", target="f"),
    Op(K.LINK, "d/f", dst="d/h"),
    Op(K.FSYNC, "d/f"),
    Op(K.FSYNC_DIR, "d"),
    Op(K.FSYNC_DIR, ""),
    Op(K.CREAT, "d/g"),
    Op(K.RENAME, "d/g", dst="d/g2"),
    Op(K.FSYNC_DIR, "d"),
]


@pytest.fixture
def promised(tmp_path: Path) -> tuple[OracleLog, Path, str]:
    root = tmp_path / "r"
    _, oracle, marks = run(PROMISED, root)
    return oracle, root, marks[-1]


def test_truncated_promised_file_is_data_loss(promised: tuple[OracleLog, Path, str]) -> None:
    oracle, root, last = promised
    os.truncate(root / "d/f", B)
    found = verify(oracle, root, last_mark=last, rules=posix_strict())
    assert (FindingKind.DATA_LOSS, "d/f") in kinds(found)
    assert any("at least 12288 B" in f.detail and f.mark == "pc-0" for f in found)


ATOMIC = replace(posix_strict("atomic"), metadata_atomic=True)


def test_fsync_dir_owes_names_of_durable_inodes(tmp_path: Path) -> None:
    # ext2 / ext4 without a journal: fsync(dir) writes the directory, not the new
    # inode its entry names, and e2fsck removes an entry naming an unused inode.
    ops = [Op(K.MKDIR, "d"), Op(K.SYNC), Op(K.CREAT, "d/new"), Op(K.CREAT, "d/kept"),
           Op(K.FSYNC, "d/kept"), Op(K.FSYNC_DIR, "d")]
    _, oracle, marks = run(ops, tmp_path / "r")
    (tmp_path / "r/d/new").unlink()
    (tmp_path / "r/d/kept").unlink()
    found = verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=posix_strict())
    assert kinds(found) == {(FindingKind.DATA_LOSS, "d/kept")}  # its inode was fsynced first
    found = verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=ATOMIC)
    assert kinds(found) == {(FindingKind.DATA_LOSS, "d/kept"), (FindingKind.DATA_LOSS, "d/new")}


def test_fsync_of_a_file_owes_only_names_whose_change_logged_the_inode(tmp_path: Path) -> None:
    # Seen on xfs (Linux 6.1): after sync, RENAME_EXCHANGE f0 <-> d/f1 and fsync(d/f1)
    # left the old names. xfs_cross_rename() (fs/xfs/xfs_inode.c) logs the exchanged
    # inodes only when a directory changes parent, so the clean inode is not pinned and
    # xfs_file_fsync() forces nothing. ext4_cross_rename() (fs/ext4/namei.c) marks both
    # inodes dirty in the rename's handle, so ext4's fsync waits for it.
    xfs, ext4 = (persistence_rules(get_target(n)) for n in ("xfs", "ext4/ordered"))
    ops = [Op(K.MKDIR, "d"), Op(K.CREAT, "f0"), Op(K.WRITE, "f0", length=300),
           Op(K.CREAT, "d/f1"), Op(K.WRITE, "d/f1", length=100), Op(K.SYNC),
           Op(K.RENAME_EXCHANGE, "f0", dst="d/f1"), Op(K.FSYNC, "d/f1")]
    _, oracle, marks = run(ops, tmp_path / "r")
    root = tmp_path / "r"
    os.rename(root / "f0", root / "swap")  # the exchange undone: the state xfs left
    os.rename(root / "d/f1", root / "f0")
    os.rename(root / "swap", root / "d/f1")
    assert verify(oracle, root, last_mark=marks[-1], rules=xfs) == []
    assert (FindingKind.DATA_LOSS, "d/f1") in kinds(
        verify(oracle, root, last_mark=marks[-1], rules=ext4))
    # A name that changed because an ancestor was renamed: the inode itself was not
    # touched, so neither ext4 (i_sync_tid, ext4_fsync_journal()) nor xfs (no pinned
    # inode) commits the rename for fsync(file); fsync of the new parent would.
    ops = [Op(K.MKDIR, "a"), Op(K.CREAT, "a/f"), Op(K.WRITE, "a/f", length=100), Op(K.SYNC),
           Op(K.RENAME, "a", dst="b"), Op(K.FSYNC, "b/f")]
    _, oracle, marks = run(ops, tmp_path / "m")
    os.rename(tmp_path / "m/b", tmp_path / "m/a")
    for rules in (xfs, ext4):
        assert verify(oracle, tmp_path / "m", last_mark=marks[-1], rules=rules) == []


def test_deleted_promised_dentry_is_data_loss(promised: tuple[OracleLog, Path, str]) -> None:
    oracle, root, last = promised
    (root / "d/h").unlink()
    # The name is owed by fsync(d) only where creating it is one atomic transaction
    # (or its inode was made durable too); see test_fsync_dir_owes_names_of_durable_inodes.
    found = verify(oracle, root, last_mark=last, rules=ATOMIC)
    assert kinds(found) == {(FindingKind.DATA_LOSS, "d/h")}
    assert "missing" in found[0].detail and found[0].mark == "pc-3"


def test_corrupt_promised_block_is_wrong_content(promised: tuple[OracleLog, Path, str]) -> None:
    oracle, root, last = promised
    with open(root / "d/f", "r+b") as f:
        f.seek(B + 17)
        f.write(b"\xff")
    found = verify(oracle, root, last_mark=last, rules=persistence_rules(get_target("xfs")))
    assert kinds(found) == {(FindingKind.WRONG_CONTENT, "d/f"), (FindingKind.WRONG_CONTENT, "d/h")}
    assert all("block 1" in f.detail for f in found)


def test_a_block_left_as_it_was_before_the_promise_says_since_which_op(tmp_path: Path) -> None:
    # Seen on xfs (Linux 6.1 and 7.3): sync left an overwrite in the disk's cache, so the
    # block read as it was after the first write. The finding names that op; a block the
    # file never held there is other data, as before.
    ops = [Op(K.CREAT, "f"), Op(K.PWRITE, "f", offset=0, length=B), Op(K.FSYNC, "f"),
           Op(K.PWRITE, "f", offset=512, length=512), Op(K.SYNC)]
    w, oracle, marks = run(ops, tmp_path / "r")
    xfs = persistence_rules(get_target("xfs"))
    with open(tmp_path / "r/f", "r+b") as f:
        f.seek(512)
        f.write(op_data(w.seed, 1, B)[512:1024])  # the overwrite of op 3 lost
    (found,) = verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=xfs)
    assert (found.kind, found.block, found.mark) == (FindingKind.WRONG_CONTENT, 0, "pc-1")
    assert found.found == "older data, as of op 1 (pwrite f @0+4096)"
    assert found.detail.startswith("block 0 (bytes 0-4095) holds older data, as of op 1 ")
    with open(tmp_path / "r/f", "r+b") as f:
        f.write(b"\x01")  # bytes 0: no version of f ever held this block
    (found,) = verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=xfs)
    assert found.found == "other data"


def test_zeroed_promised_block_is_data_loss(promised: tuple[OracleLog, Path, str]) -> None:
    oracle, root, last = promised
    with open(root / "d/f", "r+b") as f:
        f.seek(2 * B)
        f.write(bytes(B))
    found = verify(oracle, root, last_mark=last, rules=posix_strict())
    assert (FindingKind.DATA_LOSS, "d/f") in kinds(found)
    assert any("zeros" in f.detail for f in found)


def test_reverted_promised_rename_fires(promised: tuple[OracleLog, Path, str]) -> None:
    oracle, root, last = promised
    os.rename(root / "d/g2", root / "d/g")
    found = verify(oracle, root, last_mark=last, rules=ATOMIC)
    assert kinds(found) == {(FindingKind.DATA_LOSS, "d/g2"), (FindingKind.UNEXPECTED_ENTRY, "d/g")}


def test_name_never_created_is_unexpected(promised: tuple[OracleLog, Path, str]) -> None:
    oracle, root, last = promised
    (root / "d/stray").write_bytes(b"x")
    found = verify(oracle, root, last_mark=last, rules=posix_strict())
    assert kinds(found) == {(FindingKind.UNEXPECTED_ENTRY, "d/stray")}


def test_entry_from_after_the_window_is_unexpected(tmp_path: Path) -> None:
    ops = [
        Op(K.MKDIR, "d"),
        Op(K.SYNC),
        Op(K.CREAT, "d/a"),
        Op(K.SYNC),
        Op(K.CREAT, "d/b"),
        Op(K.SYNC),
    ]
    _, oracle, marks = run(ops, tmp_path / "r")
    found = verify(oracle, tmp_path / "r", last_mark=marks[0], rules=posix_strict())
    assert kinds(found) == {(FindingKind.UNEXPECTED_ENTRY, "d/b")}


def test_wrong_type_fires(promised: tuple[OracleLog, Path, str]) -> None:
    oracle, root, last = promised
    (root / "d/l").unlink()
    (root / "d/l").mkdir()
    found = verify(oracle, root, last_mark=last, rules=posix_strict())
    assert kinds(found) == {(FindingKind.WRONG_TYPE, "d/l")}


def test_wrong_xattr_fires(promised: tuple[OracleLog, Path, str]) -> None:
    oracle, root, last = promised
    os.setxattr(root / "d/f", "user.x", b"changed")
    found = verify(oracle, root, last_mark=last, rules=posix_strict())
    assert kinds(found) == {(FindingKind.WRONG_XATTR, "d/f"), (FindingKind.WRONG_XATTR, "d/h")}
    os.removexattr(root / "d/f", "user.x")
    found = verify(oracle, root, last_mark=last, rules=posix_strict())
    assert any("absent" in f.detail for f in found)


def test_identity_fires_when_hard_links_split(promised: tuple[OracleLog, Path, str]) -> None:
    oracle, root, last = promised
    data = (root / "d/h").read_bytes()
    (root / "d/h").unlink()
    (root / "d/h").write_bytes(data)
    os.setxattr(root / "d/h", "user.x", os.getxattr(root / "d/f", "user.x"))
    found = verify(oracle, root, last_mark=last, rules=posix_strict())
    assert kinds(found) == {(FindingKind.IDENTITY, "d/f")}


def test_a_removed_name_back_after_sync_is_charged_to_the_sync_not_left_without_a_promise(
        tmp_path: Path) -> None:
    """rmdir r/d1; sync; rename r/l0 -> r/d1: a state at the sync whose r/d1 is another
    directory than r/l0 is the removal the sync promised, undone (the directory writes of the
    rmdir still in the disk's cache). The one-inode finding names that promise, so a known
    entry about sync can explain it; a split with no such name stays no promise's."""
    ops = [Op(K.MKDIR, "r"), Op(K.MKDIR, "r/d1"), Op(K.MKDIR, "r/l0"), Op(K.SYNC),
           Op(K.RMDIR, "r/d1"), Op(K.SYNC), Op(K.RENAME, "r/l0", dst="r/d1")]
    _, oracle, marks = run(ops, tmp_path / "recorded")
    state = tmp_path / "state"
    for d in ("r", "r/d1", "r/l0"):
        (state / d).mkdir(parents=True)  # r/d1 survived the rmdir; l0 not renamed yet
    for rules in (posix_strict(), persistence_rules(get_target("ext2"))):
        found = verify(oracle, state, last_mark=marks[-1], rules=rules)
        assert [(f.kind, f.path, f.mark, f.op) for f in found] == [
            (FindingKind.IDENTITY, "r/d1", marks[-1], 5)], found
        assert "r/d1, r/l0" in found[0].detail
    # A hard link split with no name that came to the inode after its promise: no promise.
    ops = [Op(K.CREAT, "f"), Op(K.LINK, "f", dst="g"), Op(K.SYNC)]
    _, oracle, marks = run(ops, tmp_path / "linked")
    state = tmp_path / "split"
    state.mkdir()
    (state / "f").write_bytes(b"")
    (state / "g").write_bytes(b"")
    found = verify(oracle, state, last_mark=marks[-1], rules=posix_strict())
    assert [(f.kind, f.mark) for f in found] == [(FindingKind.IDENTITY, None)], found


def test_unknown_mark_is_an_error(promised: tuple[OracleLog, Path, str]) -> None:
    oracle, root, _ = promised
    with pytest.raises(OracleError, match="'mkfs'"):
        verify(oracle, root, last_mark="mkfs", rules=posix_strict())


# -- serialisation and walking --------------------------------------------------


def test_oracle_json_round_trip(promised: tuple[OracleLog, Path, str]) -> None:
    oracle, root, last = promised
    again = OracleLog.from_json(oracle.to_json())
    assert again == oracle
    assert again.marks == oracle.marks == ["pc-0", "pc-1", "pc-2", "pc-3"]
    os.truncate(root / "d/f", 0)
    assert verify(again, root, last_mark=last, rules=posix_strict()) != []


def test_oracle_json_keeps_no_contents(tmp_path: Path) -> None:
    ops = [Op(K.CREAT, "f"), Op(K.WRITE, "f", length=64 * B), Op(K.FSYNC, "f")]
    _, oracle, _ = run(ops, tmp_path / "r")
    text = oracle.to_json()
    assert len(text) < 64 * B // 8  # hashes of blocks, not the blocks
    assert op_data(1, 1, 16).hex() not in text


def test_malformed_oracle_json_is_an_error() -> None:
    with pytest.raises(OracleError):
        OracleLog.from_json('{"format": 1}')
    with pytest.raises(OracleError, match="format"):
        OracleLog.from_json('{"format": 99}')


def test_walk_tree_reads_everything_and_reports_errors(
    promised: tuple[OracleLog, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, root, _ = promised
    assert walk_tree(root) == []
    real = oracle_mod._read_file

    def failing(path: str | Path) -> bytes:
        if os.path.basename(path) == "h":
            raise OSError(errno.EIO, "Input/output error")
        return real(path)

    monkeypatch.setattr(oracle_mod, "_read_file", failing)
    found = walk_tree(root)
    assert [(f.kind, f.path) for f in found] == [(FindingKind.IO_ERROR, "d/h")]
    assert "Input/output error" in found[0].detail


def test_verify_reports_read_errors(
    promised: tuple[OracleLog, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    oracle, root, last = promised

    def failing(path: Path) -> bytes:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(oracle_mod, "_read_file", failing)
    found = verify(oracle, root, last_mark=last, rules=posix_strict())
    assert (FindingKind.IO_ERROR, "d/f") in kinds(found)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32), cut=st.integers(0, 10_000), damage=st.integers(0, 2**32))
def test_skipping_below_missing_directories_changes_no_finding(
    tmp_path_factory: pytest.TempPathFactory, seed: int, cut: int, damage: int
) -> None:
    """The checker skips names below a directory that is missing and may be,
    and top-level names that the root directory does not list and that name
    nothing at the window's end; on damaged trees (whole directories and
    files removed at random, at any mark) it must report exactly what the
    full check reports."""
    tmp = tmp_path_factory.mktemp("prune")
    w = packed_random(seed, 12)
    oracle, _ = record(w, tmp / "recorded")
    states = list(prefix_states(w, tmp / "state"))
    # Rebuild the tree up to a random op, then damage it.
    done, last = states[cut % len(states)]
    shutil.rmtree(tmp / "state")
    for d, _ in prefix_states(w, tmp / "state"):
        if d == done:
            break
    rng = random.Random(damage)
    entries = sorted((tmp / "state").rglob("*"))
    for victim in rng.sample(entries, min(len(entries), rng.randrange(0, 4))):
        if victim.is_symlink() or victim.is_file():
            victim.unlink(missing_ok=True)
        elif victim.is_dir():
            shutil.rmtree(victim, ignore_errors=True)
    for rules in (posix_strict(), persistence_rules(get_target("ext4/ordered")), persistence_rules(get_target("ext2"))):
        k = oracle.mark_index(last)
        full = oracle_mod._Checker(oracle, tmp / "state", k, rules, prune=False).run()
        pruned = oracle_mod._Checker(oracle, tmp / "state", k, rules).run()
        assert pruned == full, (done, last, rules.name)



def test_the_last_sync_before_a_mark_is_the_one_a_scan_of_every_sync_finds(tmp_path: Path) -> None:
    """The checker finds the last sync at or before its mark by bisection over the syncs'
    marks; it must be the one a scan of all of them in order finds, at every mark."""
    oracle, _ = record(packed_random(5, 40, sequences=6), tmp_path / "recorded")
    (tmp_path / "state").mkdir()
    rules = persistence_rules(get_target("ext4/ordered"))
    syncs = oracle_mod.durable_at_marks(oracle, rules).syncs
    assert 1 < len(syncs) < len(oracle.mark_records)  # some marks before the first, some between
    for k in range(len(oracle.mark_records)):
        scanned = None
        for m, d in syncs:
            if m <= k:
                scanned = (d, m)
        assert oracle_mod._Checker(oracle, tmp_path / "state", k, rules).last_sync == scanned, k



def test_prepare_builds_what_a_check_would_build_on_its_first_state(tmp_path: Path) -> None:
    """A checking guest prepares the oracle beside its log's header walk so that its lanes'
    first states find everything built: after prepare() a check adds nothing to the
    oracle's cache but the per-inode block sets it looks up as it goes and the table of
    mark names (one dict entry per mark)."""
    w = packed_random(9, 30)
    # The state at the op where the tree holds the most files (all are retired at the end).
    state = tmp_path / "state"
    most, when = -1, None
    for done, last in prefix_states(w, state):
        files = sum(1 for p in state.rglob("*") if p.is_file())
        if files > most:
            most, when = files, (done, last)
    assert when is not None and most > 3
    shutil.rmtree(state)
    for done, last in prefix_states(w, state):
        if (done, last) == when:
            break
    for rules in (EXT4, persistence_rules(get_target("f2fs"))):
        oracle, _ = record(w, tmp_path / "recorded")
        cold = set(oracle._cache)
        verify(oracle, state, last_mark=last, rules=rules)
        built_by_a_check = set(oracle._cache) - cold
        # The control: a check builds these itself.
        assert {("promises", rules), "top_names"} <= built_by_a_check
        assert ("written_blocks" in built_by_a_check) == rules.other_files_data_never_exposed

        oracle, _ = record(w, tmp_path / "recorded")
        oracle_mod.prepare(oracle, rules)
        prepared = set(oracle._cache)
        verify(oracle, state, last_mark=last, rules=rules)
        late = {key for key in set(oracle._cache) - prepared - {"mark_index"}
                if not (isinstance(key, tuple) and key[0] == "blocks_of")}
        assert not late, (rules.name, late)



@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32))
def test_the_promise_indexes_answer_as_a_scan_of_every_mark_and_binding(
    tmp_path_factory: pytest.TempPathFactory, seed: int
) -> None:
    """durable_at_marks asks two questions thousands of times on a long workload and
    answers them from indexes: which rename-replace bindings are in effect after an op,
    and whether an inode was made durable by a mark. Both must answer as the plain scans
    do, for every sync's op (in order and out of it) and every inode at every mark."""
    tmp = tmp_path_factory.mktemp("indexes")
    oracle, _ = record(packed_random(seed, 25), tmp / "recorded")
    replaced = [(p, b) for p, hist in oracle.paths.items() for b in hist
                if b.cause == "rename-replace"]
    in_effect = _ReplacedInEffect(oracle)
    ops = [r.op for r in oracle.mark_records if r.kind in SYNC_ALL_OPS]
    for op in [*ops, *reversed(ops), *range(oracle.n_ops)]:
        assert in_effect.at(op) == [b for p, b in replaced if oracle.binding_at(p, op) == b], op
    durable = _InodeDurable(oracle)
    for m in range(len(oracle.mark_records)):
        for ino, rec in oracle.inodes.items():
            scanned = any(
                (r.kind in SYNC_ALL_OPS and r.op >= rec.created_op)
                or ((r.kind in WHOLE_FILE_SYNC_OPS or r.kind in RANGE_SYNC_OPS) and r.inode == ino)
                for r in oracle.mark_records[: m + 1])
            assert durable(ino, m) == scanned, (ino, m)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32))
def test_the_top_name_index_answers_as_a_scan_of_every_binding(
    tmp_path_factory: pytest.TempPathFactory, seed: int
) -> None:
    """The names a state's check visits without a look at each are those bound to an inode
    after its window's end: at every op, exactly the top-level names binding_at says are
    (one op too few or too many is a name skipped or visited for nothing)."""
    tmp = tmp_path_factory.mktemp("top-names")
    oracle, _ = record(packed_random(seed, 25), tmp / "recorded")
    trees = oracle_mod._trees(oracle)
    index = oracle_mod._TopNames(oracle, trees)
    for op in range(-1, oracle.n_ops + 1):
        scanned = set()
        for i, (name, is_path, _) in enumerate(trees):
            bound = oracle.binding_at(name, op) if is_path else None
            if bound is not None and bound.inode is not None:
                scanned.add(i)
        assert index.named_at(op) == scanned, op


# -- the range durability ops, syncfs, sync_file_range and the newer ops ------

EXT4 = persistence_rules(get_target("ext4/ordered"))


def zero_block(path: Path, block: int) -> None:
    with open(path, "r+b") as f:
        f.seek(block * B)
        f.write(bytes(B))


def test_osync_write_promises_its_range_its_name_and_xattrs(tmp_path: Path) -> None:
    ops = [
        Op(K.MKDIR, "d"),
        Op(K.SYNC),
        Op(K.CREAT, "d/f"),
        Op(K.WRITE, "d/f", length=3 * B),  # never synced as a whole
        Op(K.SETXATTR, "d/f", xattr="user.x", length=5),
        Op(K.WRITE_OSYNC, "d/f", offset=B + 10, length=100),
    ]
    _, oracle, marks = run(ops, tmp_path / "r")
    f = tmp_path / "r/d/f"
    assert oracle.mark_records[-1].range_start == B + 10
    for rules in ALL_RULES:
        assert verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=rules) == []
    # Blocks outside the written range were never promised.
    zero_block(f, 0)
    zero_block(f, 2)
    for rules in ALL_RULES:
        assert verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=rules) == []
    # The written block is: lost, it fires at the O_SYNC write's mark.
    zero_block(f, 1)
    found = verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=posix_strict())
    assert kinds(found) == {(FindingKind.DATA_LOSS, "d/f")}
    assert found[0].mark == marks[-1] and "block 1" in found[0].detail
    # Before the write's mark it is in flight: nothing is owed.
    assert verify(oracle, tmp_path / "r", last_mark=marks[0], rules=posix_strict()) == []
    # Like fsync, O_SYNC covers the inode's metadata: xattrs, and names where fsync does.
    os.removexattr(f, "user.x")
    found = verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=posix_strict())
    assert (FindingKind.WRONG_XATTR, "d/f") in kinds(found)
    f.unlink()
    assert verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=posix_strict()) == []
    found = verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=EXT4)
    assert kinds(found) == {(FindingKind.DATA_LOSS, "d/f")} and found[0].mark == marks[-1]


def test_odsync_write_promises_its_range_and_a_new_name_not_xattrs(tmp_path: Path) -> None:
    ops = [
        Op(K.MKDIR, "d"),
        Op(K.SYNC),
        Op(K.CREAT, "d/f"),
        Op(K.SETXATTR, "d/f", xattr="user.x", length=5),
        Op(K.WRITE_ODSYNC, "d/f", offset=0, length=2 * B + 10),  # extends: the size is owed
    ]
    _, oracle, marks = run(ops, tmp_path / "r")
    f = tmp_path / "r/d/f"
    os.removexattr(f, "user.x")  # fdatasync does not cover xattrs
    for rules in ALL_RULES:
        assert verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=rules) == []
    os.truncate(f, B)
    found = verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=posix_strict())
    assert kinds(found) == {(FindingKind.DATA_LOSS, "d/f")}
    assert "at least 8202 B" in found[0].detail and found[0].mark == marks[-1]
    f.unlink()  # a new file's name comes with fdatasync where the rules say so
    assert verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=posix_strict()) == []
    found = verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=EXT4)
    assert kinds(found) == {(FindingKind.DATA_LOSS, "d/f")}


def test_msync_promises_the_pages_of_its_range(tmp_path: Path) -> None:
    ops = [
        Op(K.CREAT, "f"),
        Op(K.FSYNC_DIR, ""),
        Op(K.WRITE, "f", length=4 * B),
        Op(K.MMAP_WRITE, "f", offset=B + 100, length=200),
        Op(K.MSYNC, "f", offset=B + 100, length=200),  # syncs the page [B, 2B)
    ]
    _, oracle, marks = run(ops, tmp_path / "r")
    f = tmp_path / "r/f"
    assert (oracle.mark_records[-1].range_start, oracle.mark_records[-1].range_end) == (B, 2 * B)
    for block in (0, 2, 3):
        zero_block(f, block)
    for rules in ALL_RULES:
        assert verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=rules) == []
    zero_block(f, 1)
    found = verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=posix_strict())
    assert kinds(found) == {(FindingKind.DATA_LOSS, "f")} and found[0].mark == marks[-1]
    os.truncate(f, B + 50)  # the synced page must be there in full
    found = verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=posix_strict())
    assert "at least 8192 B" in found[0].detail


def test_a_range_promise_allows_an_older_size_ending_inside_the_block(tmp_path: Path) -> None:
    # A file synced at 200 B grows to 3 blocks unsynced; an O_DSYNC write of
    # 100 B at 0 writes page 0 and need not make the new size durable: the
    # file may read back 200 B whose first 100 are new.
    ops = [
        Op(K.CREAT, "f"),
        Op(K.WRITE, "f", length=200),
        Op(K.SYNC),
        Op(K.APPEND, "f", length=3 * B),
        Op(K.WRITE_ODSYNC, "f", offset=0, length=100),
    ]
    _, oracle, marks = run(ops, tmp_path / "r")
    f = tmp_path / "r/f"
    f.write_bytes(op_data(1, 4, 100) + op_data(1, 1, 200)[100:])
    for rules in ALL_RULES:
        assert verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=rules) == []
    os.truncate(f, 50)  # below the written range: lost
    found = verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=posix_strict())
    assert kinds(found) == {(FindingKind.DATA_LOSS, "f")}


def test_range_promises_under_whole_version_rules(tmp_path: Path) -> None:
    atomic = replace(posix_strict("atomic"), data_writes_atomic=True)
    ops = [
        Op(K.CREAT, "f"),
        Op(K.FSYNC_DIR, ""),
        Op(K.WRITE, "f", length=2 * B),
        Op(K.WRITE_ODSYNC, "f", offset=B, length=B),
    ]
    _, oracle, marks = run(ops, tmp_path / "r")
    assert verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=atomic) == []
    (tmp_path / "r/f").write_bytes(op_data(1, 2, 2 * B))  # the version before the write
    found = verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=atomic)
    assert kinds(found) == {(FindingKind.WRONG_CONTENT, "f")} and found[0].mark == marks[-1]


def test_syncfs_promises_everything_like_sync(tmp_path: Path) -> None:
    ops = [
        Op(K.MKDIR, "d"),
        Op(K.CREAT, "d/f"),
        Op(K.WRITE, "d/f", length=B + 5),
        Op(K.SYNCFS, "d"),
    ]
    _, oracle, marks = run(ops, tmp_path / "r")
    for rules in ALL_RULES:
        assert verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=rules) == []
    zero_block(tmp_path / "r/d/f", 0)
    found = verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=posix_strict())
    assert kinds(found) == {(FindingKind.DATA_LOSS, "d/f")} and found[0].mark == marks[-1]
    shutil.rmtree(tmp_path / "r/d")
    found = verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=posix_strict())
    assert (FindingKind.DATA_LOSS, "d") in kinds(found)


@pytest.mark.parametrize("rules", ALL_RULES, ids=lambda r: r.name)
def test_sync_file_range_promises_nothing(rules: PersistenceRules, tmp_path: Path) -> None:
    # sync_file_range(2): "There are no guarantees that the data will be
    # available after a crash": no mark, and a state without the data is fine.
    ops = [
        Op(K.CREAT, "f"),
        Op(K.FSYNC, "f"),
        Op(K.FSYNC_DIR, ""),
        Op(K.WRITE, "f", length=2 * B),
        Op(K.SYNC_FILE_RANGE, "f", offset=0, length=0),
        Op(K.FSYNC_DIR, ""),
    ]
    _, oracle, marks = run(ops, tmp_path / "r")
    assert [m.kind for m in oracle.mark_records] == ["fsync", "fsync_dir", "fsync_dir"]
    os.truncate(tmp_path / "r/f", 0)
    assert verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=rules) == []
    # The control: fdatasync in its place owes the data, and the same state fires.
    ops[4] = Op(K.FDATASYNC, "f")
    _, oracle, marks = run(ops, tmp_path / "s")
    os.truncate(tmp_path / "s/f", 0)
    found = verify(oracle, tmp_path / "s", last_mark=marks[-1], rules=rules)
    assert kinds(found) == {(FindingKind.DATA_LOSS, "f")}


def test_rename_exchange_swaps_promised_names(tmp_path: Path) -> None:
    ops = [
        Op(K.CREAT, "a"),
        Op(K.WRITE, "a", length=100),
        Op(K.CREAT, "b"),
        Op(K.WRITE, "b", length=B + 1),
        Op(K.SYNC),
        Op(K.RENAME_EXCHANGE, "a", dst="b"),
        Op(K.FSYNC_DIR, ""),
    ]
    _, oracle, marks = run(ops, tmp_path / "r")
    for rules in ALL_RULES:
        assert verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=rules) == []
    os.rename(tmp_path / "r/a", tmp_path / "r/t")  # undo the exchange
    os.rename(tmp_path / "r/b", tmp_path / "r/a")
    os.rename(tmp_path / "r/t", tmp_path / "r/b")
    for rules in ALL_RULES:  # in flight at the sync's mark
        assert verify(oracle, tmp_path / "r", last_mark=marks[0], rules=rules) == []
    found = verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=ATOMIC)
    assert {f.path for f in found} == {"a", "b"}  # each name holds the other file's data


@pytest.mark.parametrize(
    "op",
    [
        Op(K.COPY_FILE_RANGE, "s", dst="t", offset=100, length=B, dst_offset=B - 1),
        Op(K.DIRECT_WRITE, "t", offset=B, length=B),
        Op(K.FALLOCATE, "t", offset=0, length=B, falloc=FallocMode.COLLAPSE_RANGE),
        Op(K.FALLOCATE, "t", offset=B, length=B, falloc=FallocMode.INSERT_RANGE),
    ],
    ids=lambda op: op.describe(),
)
def test_fsync_owes_the_data_of_the_newer_data_ops(op: Op, tmp_path: Path) -> None:
    ops = [
        Op(K.CREAT, "s"),
        Op(K.WRITE, "s", length=2 * B),
        Op(K.CREAT, "t"),
        Op(K.WRITE, "t", length=2 * B + 10),
        Op(K.SYNC),
        op,
        Op(K.FSYNC, "t"),
    ]
    _, oracle, marks = run(ops, tmp_path / "r")
    for rules in ALL_RULES:
        assert verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=rules) == []
    # The state from before the op: right at the sync's mark, wrong at the fsync's.
    before = tmp_path / "b"
    before.mkdir()
    (before / "s").write_bytes(op_data(1, 1, 2 * B))
    (before / "t").write_bytes(op_data(1, 3, 2 * B + 10))
    assert verify(oracle, before, last_mark=marks[0], rules=posix_strict()) == []
    found = verify(oracle, before, last_mark=marks[-1], rules=posix_strict())
    assert found and {f.path for f in found} == {"t"} and {f.mark for f in found} == {marks[-1]}


def test_range_marks_survive_json(tmp_path: Path) -> None:
    ops = [Op(K.CREAT, "f"), Op(K.WRITE_OSYNC, "f", offset=5, length=10), Op(K.FSYNC, "f")]
    _, oracle, _ = run(ops, tmp_path / "r")
    again = OracleLog.from_json(oracle.to_json())
    assert again == oracle
    assert [(m.range_start, m.range_end) for m in again.mark_records] == [(5, 15), (0, 0)]


def test_two_lanes_asking_for_one_index_build_it_once(tmp_path: Path) -> None:
    import threading
    import time

    oracle, _ = record(load_case("hand:write-fsync-rename", seed=0), tmp_path / "mnt")
    built: list[int] = []

    def slow() -> int:
        built.append(1)
        time.sleep(0.2)  # long enough for the other thread to ask meanwhile
        return 42

    got: list[int] = []
    threads = [threading.Thread(target=lambda: got.append(oracle._cached("slow", slow)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [42, 42] and built == [1]


def test_skipped_ops_are_a_flag_and_an_old_log_reads_the_same() -> None:
    rec = Recorder("w", 1)
    rec.op(0, "creat f")
    rec.op(1, "clone f -> g", skipped="unsupported")
    rec.finish(2)
    log = rec.log
    assert log.ops == ("creat f", "clone f -> g") and log.skipped == {1: "unsupported"}
    assert log.describe_op(1) == "op 1 (clone f -> g [skipped: unsupported])"
    again = OracleLog.from_json(log.to_json())
    assert again.skipped == {1: "unsupported"} and again.ops == log.ops
    # Format 1 kept the reason in the op's words: read into the same flag.
    doc = json.loads(log.to_json())
    doc["format"], doc["ops"] = 1, ["creat f", "clone f -> g [skipped: unsupported]"]
    del doc["skipped"]
    old = OracleLog.from_json(json.dumps(doc))
    assert old.ops == log.ops and old.skipped == log.skipped


def test_a_rewrite_in_flight_may_show_the_file_empty(tmp_path: Path) -> None:
    """WRITE opens with O_TRUNC: the truncation reaches the log before the new bytes are
    written back, so a crash after a later rewrite may find a promised file empty (xfs/logdev
    on a power cut after `sync; write`); once the rewrite is promised, empty is data loss."""
    ops = [
        Op(K.CREAT, "f"),
        Op(K.WRITE, "f", length=B),
        Op(K.FSYNC, "f"),
        Op(K.FSYNC_DIR, ""),
        Op(K.WRITE, "f", length=100),
        Op(K.FSYNC, "f"),
    ]
    _, oracle, marks = run(ops, tmp_path / "r")
    (tmp_path / "r/f").write_bytes(b"")
    for rules in ALL_RULES:
        assert verify(oracle, tmp_path / "r", last_mark=marks[1], rules=rules) == [], rules
    found = verify(oracle, tmp_path / "r", last_mark=marks[2], rules=posix_strict())
    assert kinds(found) == {(FindingKind.DATA_LOSS, "f")}
    assert "at least 100 B" in found[0].detail
