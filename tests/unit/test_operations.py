"""Operations: JSON, the model against real syscalls, marks after durability ops."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from crashcases.execute import execute
from crashcases.oracle.log import NodeKind, OracleLog
from crashcases.oracle.verify import verify
from crashcases.workload.cases import load_case
from crashcases.workload.kinds import CAPABILITIES
from crashcases.workload.model import FsModel
from crashcases.workload.ops import (
    DURABILITY_OPS,
    FallocMode,
    Op,
    OpKind,
    Workload,
    WorkloadError,
    needs_data,
    op_data,
    required_capability,
    synced_range,
)
from crashcases.workload.streams import random_ops
from recovery.persistence import posix_strict

K = OpKind
B = 4096


def model_after(workload: Workload, skipped: frozenset[int] = frozenset()) -> FsModel:
    model = FsModel()
    for i, op in enumerate(workload.ops):
        if i not in skipped:
            model.apply(op, op_data(workload.seed, i, op.length) if needs_data(op) else b"")
    return model


def skipped_ops(oracle: OracleLog) -> frozenset[int]:
    return frozenset(oracle.skipped)


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
        elif node.kind is NodeKind.FIFO:
            assert stat.S_ISFIFO(p.lstat().st_mode)
        elif node.kind is NodeKind.WHITEOUT:
            st = p.lstat()
            assert stat.S_ISCHR(st.st_mode) and st.st_rdev == 0
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


def test_a_zero_length_write_past_the_end_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    # write(2): a zero count on a regular file has no effect; the model once grew the
    # file to the offset, and the next mmap_write of stress:3000 on ext4 then failed.
    w = Workload(name="z", seed=0, ops=(Op(K.CREAT, "f"), Op(K.PWRITE, "f", offset=3 * 65536),
                                        Op(K.DIRECT_WRITE, "f", offset=65536)))
    execute(w, tmp_path, lambda name: None)
    assert (tmp_path / "f").stat().st_size == 0
    assert_tree_matches(model_after(w), tmp_path)


def test_a_generated_case_with_ext4s_capabilities_matches_the_model(tmp_path: Path) -> None:
    from recovery.filesystems import adapter_for

    w = load_case("stress:400", seed=0, capabilities=adapter_for("ext4").capabilities)
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
        # The newer syscalls, each where the model and the kernel could disagree.
        Op(K.WRITE, "e/f", length=3 * B + 10),
        Op(K.DIRECT_WRITE, "e/f", offset=B, length=B),  # overwrite
        Op(K.DIRECT_WRITE, "e/f", offset=5 * B, length=2 * B),  # past the end: a hole before it
        Op(K.DIRECT_WRITE, "e/f", offset=0, length=0),
        Op(K.MMAP_WRITE, "e/f", offset=B - 10, length=30),  # across a page boundary
        Op(K.MSYNC, "e/f", offset=100, length=B),
        Op(K.WRITE_OSYNC, "e/f", offset=7 * B + 5, length=100),  # extends
        Op(K.WRITE_ODSYNC, "e/f", offset=3, length=2 * B),
        Op(K.SYNC_FILE_RANGE, "e/f", offset=0, length=B),
        Op(K.SYNC_FILE_RANGE, "e/f", offset=B, length=0),  # to the end
        Op(K.SYNCFS, "e"),
        Op(K.CREAT, "p"),
        Op(K.WRITE, "p", length=B + 1),
        Op(K.COPY_FILE_RANGE, "e/f", dst="p", offset=10, length=B, dst_offset=B + 1),  # extends
        Op(K.COPY_FILE_RANGE, "e/f", dst="p", offset=8 * B, length=50, dst_offset=0),  # past EOF
        Op(K.COPY_FILE_RANGE, "e/f", dst="e/f", offset=0, length=100, dst_offset=B),
        Op(K.FALLOCATE, "e/f", offset=B, length=B, falloc=F.COLLAPSE_RANGE),
        Op(K.FALLOCATE, "e/f", offset=2 * B, length=3 * B, falloc=F.INSERT_RANGE),
        Op(K.RENAME_NOREPLACE, "p", dst="q"),
        Op(K.MKDIR, "e/sub"),
        Op(K.RENAME_EXCHANGE, "q", dst="e/sub"),  # a file and a directory swap names
        Op(K.RENAME_EXCHANGE, "l", dst="e/f"),
        Op(K.CREAT, "c"),
        Op(K.CLONE, "e/sub", dst="c"),
        Op(K.CLONE_RANGE, "l", dst="c", offset=B, length=B, dst_offset=0),
        # The kinds of cover:N.
        Op(K.WRITE, "c", length=3 * B),
        Op(K.COPY_FILE_RANGE, "c", dst="e/sub", offset=0, length=B, dst_offset=0),
        Op(K.DEDUPE_RANGE, "c", dst="e/sub", offset=0, length=B, dst_offset=0),
        Op(K.FALLOCATE, "c", offset=100, length=B, falloc=F.ZERO_RANGE_KEEP_SIZE),
        Op(K.FALLOCATE, "c", offset=0, length=B, falloc=F.UNSHARE_RANGE),
        Op(K.DIRECT_WRITE_OSYNC, "c", offset=B, length=B),
        Op(K.DIRECT_WRITE_ODSYNC, "c", offset=4 * B, length=B),  # extends
        Op(K.MKNOD, "e/fifo"),
        Op(K.RENAME_WHITEOUT, "e/fifo", dst="fifo"),  # e/fifo becomes a whiteout
        Op(K.CHMOD, "c", mode=0o600),
        Op(K.CHMOD, "e", mode=0o1777),
        Op(K.CHOWN, "c", uid=1000, gid=-1),
        Op(K.CHOWN, "fifo", uid=-1, gid=1000),
        Op(K.UTIMES, "c", atime_ns=10**18, mtime_ns=10**18 + 5),
        Op(K.UTIMES, "e", atime_ns=-2, mtime_ns=-1),  # UTIME_NOW, UTIME_OMIT
        Op(K.SETFLAGS, "c", flags=0x20),  # append-only: O_APPEND writes still go
        Op(K.APPEND, "c", length=5),
        Op(K.SETFLAGS, "c", flags=0),
        Op(K.UNLINK, "e/fifo"),  # the whiteout
    )
    w = Workload(name="all", seed=4, ops=ops)
    assert {op.kind for op in ops} == set(OpKind)
    assert {op.falloc for op in ops} == set(FallocMode)
    oracle = execute(w, tmp_path, lambda name: None)
    # Only reflinks, dedupe and unshare may be unsupported here (most filesystems have none).
    skipped = skipped_ops(oracle)
    assert {ops[i].kind for i in skipped} <= {K.CLONE, K.CLONE_RANGE, K.DEDUPE_RANGE,
                                              K.FALLOCATE}
    assert {ops[i].falloc for i in skipped if ops[i].kind is K.FALLOCATE} <= {F.UNSHARE_RANGE}
    assert_tree_matches(model_after(w, skipped), tmp_path)
    st = (tmp_path / "c").stat()
    assert (st.st_mode & 0o7777, st.st_uid) == (0o600, 1000)
    # The explicit mtime is what the oracle holds until the append sets another.
    c = next(ino for ino, r in oracle.inodes.items() if any(a.name == "flags" for a in r.attrs))
    assert [a.value for a in oracle.inodes[c].attrs if a.name == "mtime"] == [10**18 + 5, None]
    assert (tmp_path / "fifo").stat().st_gid == 1000 and (tmp_path / "e").stat().st_mode & 0o1000
    assert {i.kind for i in oracle.inodes.values()} >= {NodeKind.FIFO}


def test_capabilities_name_what_adapters_declare() -> None:
    from recovery.filesystems.base import CAPABILITIES as DECLARED

    assert CAPABILITIES <= DECLARED
    assert required_capability(Op(K.CLONE, "a", dst="b")) == "reflink"
    assert required_capability(Op(K.FALLOCATE, "a", length=B, falloc=FallocMode.INSERT_RANGE)) == (
        "insert-range"
    )
    assert required_capability(Op(K.FALLOCATE, "a", length=B)) == "fallocate"
    assert required_capability(Op(K.FALLOCATE, "a", length=B, falloc=FallocMode.PUNCH_HOLE)) == (
        "punch-hole"
    )
    assert required_capability(Op(K.PWRITE, "a", length=B)) is None
    assert required_capability(Op(K.WRITE_OSYNC, "a", length=1)) is None


def test_synced_ranges_of_the_range_durability_ops() -> None:
    assert synced_range(Op(K.WRITE_OSYNC, "f", offset=10, length=100)) == (10, 110)
    assert synced_range(Op(K.WRITE_ODSYNC, "f", offset=B, length=B)) == (B, 2 * B)
    # msync syncs whole pages: from the page of the first byte to the end of the last one.
    assert synced_range(Op(K.MSYNC, "f", offset=B + 5, length=B), page_bytes=B) == (B, 3 * B)
    assert synced_range(Op(K.FSYNC, "f")) is None
    assert K.SYNC_FILE_RANGE not in DURABILITY_OPS  # sync_file_range(2) promises nothing
    assert {K.MSYNC, K.WRITE_OSYNC, K.WRITE_ODSYNC, K.SYNCFS} <= DURABILITY_OPS


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
        (Op(K.FALLOCATE, "f", offset=0, length=0), "length above 0"),
        (Op(K.DIRECT_WRITE, "f", offset=10, length=B), "multiples of 4096"),
        (Op(K.DIRECT_WRITE, "f", offset=0, length=100), "multiples of 4096"),
        (Op(K.MMAP_WRITE, "f", offset=2 * B, length=2 * B), "past the end"),
        (Op(K.MMAP_WRITE, "f", offset=0, length=0), "length above 0"),
        (Op(K.MSYNC, "f", offset=0, length=0), "length above 0"),
        (Op(K.MSYNC, "d", offset=0, length=1), "not a regular file"),
        (Op(K.WRITE_OSYNC, "f", offset=0, length=0), "syncs nothing"),
        (Op(K.WRITE_ODSYNC, "f", offset=5, length=0), "syncs nothing"),
        (Op(K.SYNC_FILE_RANGE, "d"), "not a regular file"),
        (Op(K.SYNCFS, "nowhere"), "does not exist"),
        (Op(K.RENAME_NOREPLACE, "f", dst="d/x"), "EEXIST"),
        (Op(K.RENAME_NOREPLACE, "d", dst="d/y"), "below itself"),
        (Op(K.RENAME_EXCHANGE, "f", dst="g"), "does not exist"),
        (Op(K.RENAME_EXCHANGE, "d/x", dst="d"), "ancestor"),
        (Op(K.RENAME_EXCHANGE, "d", dst="d/x"), "below itself"),
        (Op(K.RENAME_EXCHANGE, "f", dst="h"), "same inode"),
        (Op(K.COPY_FILE_RANGE, "f", dst="d"), "d is not a regular file"),
        (Op(K.COPY_FILE_RANGE, "f", dst="f", offset=0, length=B, dst_offset=100), "overlap"),
        (Op(K.CLONE, "f", dst="h"), "overlap"),  # two names of one inode
        (Op(K.CLONE, "f", dst="d/x", offset=B), "no offsets"),
        (Op(K.CLONE_RANGE, "f", dst="d/x", offset=100, length=B), "multiples of 4096"),
        (Op(K.CLONE_RANGE, "f", dst="d/x", offset=0, length=100), "unless it ends"),
        (Op(K.CLONE_RANGE, "f", dst="d/x", offset=B, length=2 * B), "runs past the end"),
        (Op(K.CLONE_RANGE, "f", dst="d/x", offset=3 * B, length=0), "starts at the end"),
        (Op(K.CLONE_RANGE, "f", dst="d/x", offset=0, length=B, dst_offset=3 * B), "past the end"),
        (Op(K.CLONE_RANGE, "f", dst="big", offset=2 * B, length=0), "into the middle"),
        (Op(K.FALLOCATE, "f", offset=100, length=B, falloc=FallocMode.COLLAPSE_RANGE), "multiples"),
        (Op(K.FALLOCATE, "f", offset=B, length=2 * B, falloc=FallocMode.COLLAPSE_RANGE), "end before"),
        (Op(K.FALLOCATE, "f", offset=3 * B, length=B, falloc=FallocMode.INSERT_RANGE), "before the end"),
        (Op(K.PWRITE, "f", offset=0, length=1, dst_offset=-1), "negative"),
    ],
)
def test_model_rejects_invalid_ops(op: Op, reason: str) -> None:
    model = FsModel()
    setup = (Op(K.MKDIR, "d"), Op(K.CREAT, "d/x"), Op(K.CREAT, "f"), Op(K.LINK, "f", dst="h"),
             Op(K.TRUNCATE, "f", size=2 * B + 100), Op(K.CREAT, "big"),
             Op(K.TRUNCATE, "big", size=8 * B))
    for s in setup:
        model.apply(s)
    bad = model.check(op)
    assert bad is not None and reason in bad, bad


@pytest.mark.parametrize(
    "op",
    [
        Op(K.CLONE, "f", dst="d/x"),  # the source's unaligned end lands at the destination's end
        Op(K.CLONE_RANGE, "f", dst="d/x", offset=B, length=B),
        Op(K.CLONE_RANGE, "f", dst="big", offset=0, length=2 * B, dst_offset=4 * B),
        Op(K.CLONE_RANGE, "f", dst="big", offset=2 * B, length=0, dst_offset=8 * B),
        Op(K.CLONE_RANGE, "f", dst="f", offset=0, length=B, dst_offset=2 * B),  # EOF block: 3 B
        Op(K.COPY_FILE_RANGE, "f", dst="d/x", offset=0, length=0),
        Op(K.COPY_FILE_RANGE, "f", dst="f", offset=0, length=B, dst_offset=B),
        Op(K.RENAME_EXCHANGE, "f", dst="d"),
        Op(K.SYNCFS, ""),
        Op(K.SYNC_FILE_RANGE, "f"),
        Op(K.FALLOCATE, "f", offset=B, length=B, falloc=FallocMode.COLLAPSE_RANGE),
        Op(K.FALLOCATE, "f", offset=2 * B, length=B, falloc=FallocMode.INSERT_RANGE),
    ],
)
def test_model_accepts_valid_edge_ops(op: Op) -> None:
    model = FsModel()
    for s in (Op(K.MKDIR, "d"), Op(K.CREAT, "d/x"), Op(K.CREAT, "f"),
              Op(K.TRUNCATE, "f", size=2 * B + 100), Op(K.CREAT, "big"),
              Op(K.TRUNCATE, "big", size=8 * B)):
        model.apply(s)
    assert model.check(op) is None


def test_model_swaps_names_on_exchange_and_shifts_data_on_collapse_and_insert() -> None:
    model = FsModel()
    for s in (Op(K.MKDIR, "d"), Op(K.CREAT, "d/x"), Op(K.CREAT, "f")):
        model.apply(s)
    f, d, x = model.lookup("f"), model.lookup("d"), model.lookup("d/x")
    model.apply(Op(K.RENAME_EXCHANGE, "f", dst="d"))
    assert (model.lookup("d"), model.lookup("f"), model.lookup("f/x")) == (f, d, x)
    data = bytes(range(256)) * 48  # 3 blocks
    model.apply(Op(K.WRITE, "d", length=len(data)), data)
    model.apply(Op(K.FALLOCATE, "d", offset=0, length=B, falloc=FallocMode.COLLAPSE_RANGE))
    assert bytes(model.nodes[f or 0].data) == data[B:]
    model.apply(Op(K.FALLOCATE, "d", offset=B, length=B, falloc=FallocMode.INSERT_RANGE))
    assert bytes(model.nodes[f or 0].data) == data[B : 2 * B] + bytes(B) + data[2 * B :]


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
    assert oracle.skipped == {1: "unsupported"} and oracle.ops[1] == "setxattr f user.a"
    assert verify(oracle, tmp_path, last_mark="pc-0", rules=posix_strict()) == []


def test_other_syscall_failures_are_workload_errors(tmp_path: Path) -> None:
    (tmp_path / "f").mkdir()  # the tree disagrees with the workload
    w = Workload(name="x", seed=1, ops=(Op(K.CREAT, "f"),))
    with pytest.raises(WorkloadError, match="failed under"):
        execute(w, tmp_path, lambda name: None)
