"""Operations: JSON, the model against real syscalls, marks after durability ops."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from crashcases.cases import load_case, random_ops
from crashcases.operations import (
    FallocMode,
    FsModel,
    Op,
    OpKind,
    Workload,
    WorkloadError,
    execute,
    needs_data,
    op_data,
)
from crashcases.oracle import NodeKind, verify
from recovery.persistence import posix_strict

K = OpKind
B = 4096


def model_after(workload: Workload) -> FsModel:
    model = FsModel()
    for i, op in enumerate(workload.ops):
        model.apply(op, op_data(workload.seed, i, op.length) if needs_data(op) else b"")
    return model


def assert_tree_matches(model: FsModel, root: Path) -> None:
    expected = {p: n for p, n in model.bindings("").items() if p}
    found = {str(p.relative_to(root)) for p in root.rglob("*")}
    assert found == set(expected)
    for path, node_id in expected.items():
        node = model.nodes[node_id]
        p = root / path
        if node.kind is NodeKind.FILE:
            assert p.read_bytes() == bytes(node.data), path
            for name, value in node.xattrs.items():
                assert os.getxattr(p, name) == value
        elif node.kind is NodeKind.SYMLINK:
            assert os.readlink(p) == node.target
        else:
            assert p.is_dir() and not p.is_symlink()


def test_workload_json_round_trip() -> None:
    w = load_case("random:60", seed=3)
    text = w.to_json()
    assert Workload.from_json(text) == w
    assert '"falloc"' not in Workload(name="x", seed=0, ops=(Op(K.CREAT, "f"),)).to_json()


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "x", "seed": 1}',
        '{"name": "x", "seed": 1, "ops": [{"kind": "creat", "colour": 1}]}',
        '{"name": "x", "seed": 1, "ops": [{"kind": "explode"}]}',
        "not json",
    ],
)
def test_bad_workload_json_is_rejected(text: str) -> None:
    with pytest.raises(WorkloadError):
        Workload.from_json(text)


def test_op_data_is_deterministic_per_seed_and_index() -> None:
    assert op_data(1, 5, 9000) == op_data(1, 5, 9000)
    assert op_data(1, 5, 100) == op_data(1, 5, 9000)[:100]
    assert op_data(1, 5, 100) != op_data(1, 6, 100) != op_data(2, 5, 100)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_execute_matches_the_model(seed: int, tmp_path: Path) -> None:
    w = Workload(name="r", seed=seed, ops=tuple(random_ops(150, seed)))
    execute(w, tmp_path, lambda name: None)
    assert_tree_matches(model_after(w), tmp_path)


def test_every_op_kind_against_the_model(tmp_path: Path) -> None:
    F = FallocMode
    ops = (
        Op(K.MKDIR, "d"),
        Op(K.CREAT, "d/f"),
        Op(K.WRITE, "d/f", length=3 * B),
        Op(K.PWRITE, "d/f", offset=5 * B + 3, length=10),
        Op(K.APPEND, "d/f", length=7),
        Op(K.TRUNCATE, "d/f", size=7 * B),
        Op(K.FALLOCATE, "d/f", offset=6 * B, length=4 * B, falloc=F.ALLOCATE),
        Op(K.FALLOCATE, "d/f", offset=0, length=B, falloc=F.PUNCH_HOLE),
        Op(K.FALLOCATE, "d/f", offset=B, length=100, falloc=F.ZERO_RANGE),
        Op(K.FALLOCATE, "d/f", offset=9 * B, length=4 * B, falloc=F.KEEP_SIZE),
        Op(K.FSYNC, "d/f"),
        Op(K.FDATASYNC, "d/f"),
        Op(K.LINK, "d/f", dst="g"),
        Op(K.RENAME, "d", dst="e"),
        Op(K.SYMLINK, "l", target="e/f"),
        Op(K.SETXATTR, "g", xattr="user.a", length=9),
        Op(K.SETXATTR, "e", xattr="user.b", length=3),
        Op(K.REMOVEXATTR, "e", xattr="user.b"),
        Op(K.UNLINK, "g"),
        Op(K.MKDIR, "x"),
        Op(K.RMDIR, "x"),
        Op(K.CREAT, "e/f"),
        Op(K.FSYNC_DIR, "e"),
        Op(K.FSYNC_DIR, ""),
        Op(K.SYNC),
    )
    w = Workload(name="all", seed=4, ops=ops)
    assert {op.kind for op in ops} == set(OpKind)
    execute(w, tmp_path, lambda name: None)
    assert_tree_matches(model_after(w), tmp_path)


def test_marks_follow_each_durability_op_after_it_returned(tmp_path: Path) -> None:
    ops = (
        Op(K.CREAT, "f"),
        Op(K.WRITE, "f", length=100),
        Op(K.FSYNC, "f"),
        Op(K.RENAME, "f", dst="g"),
        Op(K.FSYNC_DIR, ""),
        Op(K.SYNC),
        Op(K.FDATASYNC, "g"),
    )
    w = Workload(name="m", seed=1, ops=ops)
    seen: list[tuple[str, list[str]]] = []
    oracle = execute(w, tmp_path, lambda name: seen.append((name, sorted(os.listdir(tmp_path)))))
    names = [n for n, _ in seen]
    assert names == oracle.marks == ["pc-0", "pc-1", "pc-2", "pc-3"]
    assert all(len(n) <= 32 and n.isascii() for n in names)
    # The mark after the fsync of the directory sees the rename done.
    assert seen[0][1] == ["f"] and seen[1][1] == ["g"]
    assert [m.op for m in oracle.mark_records] == [2, 4, 5, 6]


def test_invalid_op_is_a_workload_error(tmp_path: Path) -> None:
    w = Workload(name="bad", seed=1, ops=(Op(K.CREAT, "f"), Op(K.RMDIR, "f")))
    with pytest.raises(WorkloadError, match=r"op 1 \(rmdir f\): f is not a directory"):
        execute(w, tmp_path, lambda name: None)


@pytest.mark.parametrize(
    ("op", "reason"),
    [
        (Op(K.CREAT, "/abs"), "relative"),
        (Op(K.CREAT, "a/../b"), "relative"),
        (Op(K.WRITE, "missing", length=1), "not a regular file"),
        (Op(K.RENAME, "d", dst="d/x"), "below itself"),
        (Op(K.RENAME, "f", dst="d"), "cannot rename a file over a dir"),
        (Op(K.RENAME, "f", dst="h"), "same inode"),
        (Op(K.SETXATTR, "f", xattr="trusted.x"), "user."),
        (Op(K.REMOVEXATTR, "f", xattr="user.none"), "no xattr"),
        (Op(K.RMDIR, "d"), "not empty"),
        (Op(K.FSYNC_DIR, "f"), "not a directory"),
        (Op(K.SYMLINK, "s"), "target"),
    ],
)
def test_model_rejects_invalid_ops(op: Op, reason: str) -> None:
    model = FsModel()
    for setup in (Op(K.MKDIR, "d"), Op(K.CREAT, "d/x"), Op(K.CREAT, "f"), Op(K.LINK, "f", dst="h")):
        model.apply(setup)
    bad = model.check(op)
    assert bad is not None and reason in bad


def test_unsupported_op_is_skipped_and_not_promised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_xattrs(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(os, "setxattr", no_xattrs)
    w = Workload(
        name="x",
        seed=1,
        ops=(Op(K.CREAT, "f"), Op(K.SETXATTR, "f", xattr="user.a", length=4), Op(K.FSYNC, "f")),
    )
    oracle = execute(w, tmp_path, lambda name: None)
    assert "skipped" in oracle.ops[1]
    assert verify(oracle, tmp_path, last_mark="pc-0", rules=posix_strict()) == []


def test_other_syscall_failures_are_workload_errors(tmp_path: Path) -> None:
    (tmp_path / "f").mkdir()  # the tree disagrees with the workload
    w = Workload(name="x", seed=1, ops=(Op(K.CREAT, "f"),))
    with pytest.raises(WorkloadError, match="failed under"):
        execute(w, tmp_path, lambda name: None)
