"""The durability oracle: clean on every legitimate state, firing on each kind of loss."""

from __future__ import annotations

import errno
import os
import random
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crashcases import oracle as oracle_mod
from crashcases.cases import load_case, pack, random_ops
from crashcases.operations import (
    DURABILITY_OPS,
    Op,
    OpKind,
    Workload,
    execute,
    mark_name,
    needs_data,
    op_data,
    perform,
)
from crashcases.oracle import (
    Finding,
    FindingKind,
    OracleError,
    OracleLog,
    verify,
    walk_tree,
)
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


def prefix_states(workload: Workload, root: Path) -> Iterator[tuple[int, str | None]]:
    """Apply the ops one by one under ``root``; after each prefix yield (ops done, last mark)."""
    root.mkdir(parents=True, exist_ok=True)
    last: str | None = None
    marks = 0
    yield 0, None
    for index, op in enumerate(workload.ops):
        data = op_data(workload.seed, index, op.length) if needs_data(op) else b""
        perform(op, root, data)
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


def test_deleted_promised_dentry_is_data_loss(promised: tuple[OracleLog, Path, str]) -> None:
    oracle, root, last = promised
    (root / "d/h").unlink()
    found = verify(oracle, root, last_mark=last, rules=posix_strict())
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
    found = verify(oracle, root, last_mark=last, rules=posix_strict())
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
    """The checker skips names below a directory that is missing and may be;
    on damaged trees (whole directories and files removed at random, at any
    mark) it must report exactly what the full check reports."""
    tmp = tmp_path_factory.mktemp("prune")
    seqs = [Workload(name=f"w{i}", seed=seed + i, ops=tuple(random_ops(12, seed + i))) for i in range(4)]
    w = pack(seqs, name="p", seed=seed, retire_every=2)
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
