"""The oracle on what the cover:N operations change: an inode's mode, owner, times and
flags, FIFOs and whiteouts, dedupe, removed xattrs, sizes after a growing truncate.

Each promise is checked both ways: a state that keeps it is clean (the negative control)
and the same state with the promised thing undone fires (the positive control)."""

from __future__ import annotations

import fcntl
import json
import os
import struct
from dataclasses import replace
from pathlib import Path

import pytest

from crashcases.oracle.finding import Broken, FindingKind
from crashcases.oracle.log import FS_IOC_GETFLAGS, OracleLog
from crashcases.oracle.verify import verify
from crashcases.workload.kinds import FS_APPEND_FL, FS_NODUMP_FL, UTIME_NOW
from crashcases.workload.ops import Op, OpKind, Workload
from recovery.filesystems import persistence_rules
from recovery.persistence import posix_strict
from recovery.targets import get_target
from tests.unit.test_oracle import ALL_RULES, assert_clean_everywhere, kinds, run

K = OpKind
B = 4096
EXT4 = persistence_rules(get_target("ext4/ordered"))
ATOMIC = replace(posix_strict("atomic"), metadata_atomic=True)
MTIME = 1_600_000_000 * 10**9 + 123_456_789

#: A file whose attributes are set, then fsynced; a directory whose mode is set, then
#: fsynced itself.
ATTRS = [
    Op(K.MKDIR, "d"),
    Op(K.CREAT, "d/f"),
    Op(K.WRITE, "d/f", length=B + 10),
    Op(K.SYNC),
    Op(K.CHMOD, "d/f", mode=0o600),
    Op(K.CHOWN, "d/f", uid=1000, gid=1001),
    Op(K.UTIMES, "d/f", atime_ns=MTIME, mtime_ns=MTIME),
    Op(K.SETFLAGS, "d/f", flags=FS_NODUMP_FL),
    Op(K.FSYNC, "d/f"),
    Op(K.CHMOD, "d", mode=0o700),
    Op(K.FSYNC_DIR, "d"),
]


def flags_of(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = bytearray(8)
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, buf)
        return int(struct.unpack_from("i", buf)[0])
    finally:
        os.close(fd)


def set_flags(path: Path, flags: int) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, 0x40086602, struct.pack("q", flags))  # FS_IOC_SETFLAGS
    finally:
        os.close(fd)


def attr_findings(oracle: OracleLog, root: Path, mark: str, rules=EXT4) -> dict[str, str]:
    return {f.attribute: f.mark or "" for f in verify(oracle, root, last_mark=mark, rules=rules)
            if f.broken is Broken.ATTR}


def test_attribute_ops_are_clean_at_every_prefix(tmp_path: Path) -> None:
    ops = [*ATTRS, Op(K.SETFLAGS, "d/f", flags=FS_APPEND_FL), Op(K.APPEND, "d/f", length=7),
           Op(K.FSYNC, "d/f"), Op(K.SETFLAGS, "d/f", flags=0),
           Op(K.UTIMES, "d/f", atime_ns=UTIME_NOW, mtime_ns=UTIME_NOW), Op(K.SYNC)]
    assert_clean_everywhere(Workload("a", 1, tuple(ops)), tmp_path)


def test_fsync_promises_mode_owner_mtime_and_flags(tmp_path: Path) -> None:
    _, oracle, marks = run(ATTRS, tmp_path / "r")
    f = tmp_path / "r/d/f"
    fsynced = marks[1]
    assert attr_findings(oracle, tmp_path / "r", fsynced) == {}  # the state as it was
    os.chmod(f, 0o644)
    os.chown(f, 0, 1001)
    os.utime(f, ns=(MTIME, MTIME + 1))
    set_flags(f, flags_of(f) & ~FS_NODUMP_FL)
    found = attr_findings(oracle, tmp_path / "r", fsynced)
    assert found == {"mode": fsynced, "uid": fsynced, "mtime": fsynced, "flags": fsynced}
    # Before the fsync's mark nothing was promised but the sync before the ops.
    assert attr_findings(oracle, tmp_path / "r", marks[0]) == {}
    # Rules without a journal do not hold the flags (POSIX has none).
    assert set(attr_findings(oracle, tmp_path / "r", fsynced, posix_strict())) == {
        "mode", "uid", "mtime"}


def test_a_directorys_own_fsync_promises_its_mode_not_its_mtime(tmp_path: Path) -> None:
    ops = [Op(K.MKDIR, "d"), Op(K.SYNC), Op(K.CHMOD, "d", mode=0o700),
           Op(K.UTIMES, "d", atime_ns=MTIME, mtime_ns=MTIME), Op(K.FSYNC_DIR, "d")]
    _, oracle, marks = run(ops, tmp_path / "r")
    d = tmp_path / "r/d"
    os.utime(d, ns=(MTIME, MTIME + 1))  # log replay sets a directory's times
    assert attr_findings(oracle, tmp_path / "r", marks[-1]) == {}
    os.chmod(d, 0o755)
    assert attr_findings(oracle, tmp_path / "r", marks[-1]) == {"mode": marks[-1]}


def test_fdatasync_promises_no_attribute(tmp_path: Path) -> None:
    ops = [Op(K.CREAT, "f"), Op(K.WRITE, "f", length=100), Op(K.SYNC),
           Op(K.CHMOD, "f", mode=0o600), Op(K.UTIMES, "f", atime_ns=MTIME, mtime_ns=MTIME),
           Op(K.FDATASYNC, "f")]
    _, oracle, marks = run(ops, tmp_path / "r")
    f = tmp_path / "r/f"
    os.chmod(f, 0o644)
    os.utime(f, ns=(MTIME, MTIME + 7))
    assert attr_findings(oracle, tmp_path / "r", marks[-1]) == {}
    # The control: fsync in its place owes both, and the same state fires.
    ops[-1] = Op(K.FSYNC, "f")
    _, oracle, marks = run(ops, tmp_path / "s")
    f = tmp_path / "s/f"
    os.chmod(f, 0o644)
    os.utime(f, ns=(MTIME, MTIME + 7))
    assert attr_findings(oracle, tmp_path / "s", marks[-1]) == {"mode": marks[-1],
                                                                  "mtime": marks[-1]}


def test_a_change_in_the_window_may_be_on_disk_or_not(tmp_path: Path) -> None:
    ops = [Op(K.CREAT, "f"), Op(K.CHMOD, "f", mode=0o600), Op(K.FSYNC, "f"),
           Op(K.CHMOD, "f", mode=0o640), Op(K.FSYNC_DIR, "")]
    _, oracle, marks = run(ops, tmp_path / "r")
    f = tmp_path / "r/f"
    for mode in (0o600, 0o640):  # either side of the in-flight chmod
        os.chmod(f, mode)
        assert attr_findings(oracle, tmp_path / "r", marks[0]) == {}
    os.chmod(f, 0o644)  # neither: the value at creation, lost
    found = [x for x in verify(oracle, tmp_path / "r", last_mark=marks[0], rules=EXT4)
             if x.broken is Broken.ATTR]
    assert len(found) == 1 and found[0].kind is FindingKind.DATA_LOSS
    assert found[0].found == "0644" and set(found[0].expected) == {"0600", "0640"}


def test_a_data_change_makes_the_mtime_unknown(tmp_path: Path) -> None:
    ops = [Op(K.CREAT, "f"), Op(K.UTIMES, "f", atime_ns=MTIME, mtime_ns=MTIME),
           Op(K.PWRITE, "f", offset=0, length=10), Op(K.FSYNC, "f")]
    _, oracle, marks = run(ops, tmp_path / "r")
    os.utime(tmp_path / "r/f", ns=(MTIME, 5 * 10**18))
    assert attr_findings(oracle, tmp_path / "r", marks[-1]) == {}
    # The control: without the write the explicit time is held.
    del ops[2]
    _, oracle, marks = run(ops, tmp_path / "s")
    os.utime(tmp_path / "s/f", ns=(MTIME, 5 * 10**18))
    assert attr_findings(oracle, tmp_path / "s", marks[-1]) == {"mtime": marks[-1]}


def test_attributes_survive_the_oracle_file(tmp_path: Path) -> None:
    _, oracle, _ = run(ATTRS, tmp_path / "r")
    text = oracle.to_json()
    doc = json.loads(text)
    assert doc["format"] == 3 and any("attrs" in i for i in doc["inodes"].values())
    assert OracleLog.from_json(text) == oracle
    # A log of format 2 has no attributes: it reads, and holds none.
    for inode in doc["inodes"].values():
        inode.pop("attrs", None)
    doc["format"] = 2
    old = OracleLog.from_json(json.dumps(doc))
    assert all(not i.attrs for i in old.inodes.values())


def test_fifo_and_whiteout_are_names_like_others(tmp_path: Path) -> None:
    ops = [Op(K.MKDIR, "d"), Op(K.CREAT, "d/f"), Op(K.SYNC), Op(K.MKNOD, "d/p"),
           Op(K.RENAME_WHITEOUT, "d/f", dst="d/g"), Op(K.FSYNC_DIR, "d")]
    _, oracle, marks = run(ops, tmp_path / "r")
    root = tmp_path / "r"
    for rules in ALL_RULES:
        assert verify(oracle, root, last_mark=marks[-1], rules=rules) == []
    (root / "d/f").unlink()  # the whiteout
    (root / "d/p").unlink()
    found = verify(oracle, root, last_mark=marks[-1], rules=ATOMIC)
    assert kinds(found) == {(FindingKind.DATA_LOSS, "d/f"), (FindingKind.DATA_LOSS, "d/p")}
    assert any("whiteout" in f.detail for f in found) and any("fifo" in f.detail for f in found)
    (root / "d/f").write_bytes(b"")  # a regular file where the whiteout must be
    found = verify(oracle, root, last_mark=marks[-1], rules=ATOMIC)
    assert (FindingKind.WRONG_TYPE, "d/f") in kinds(found)
    assert_clean_everywhere(Workload("w", 1, tuple(ops)), tmp_path / "prefix")


def test_dedupe_changes_no_data(tmp_path: Path) -> None:
    # FIDEDUPERANGE shares equal ranges and leaves different ones: either way the bytes
    # stay (where the filesystem has it; elsewhere the op is skipped).
    ops = [Op(K.CREAT, "a"), Op(K.WRITE, "a", length=2 * B), Op(K.CREAT, "b"),
           Op(K.COPY_FILE_RANGE, "a", dst="b", offset=0, length=2 * B), Op(K.SYNC),
           Op(K.DEDUPE_RANGE, "a", dst="b", offset=0, length=2 * B, dst_offset=0),
           Op(K.FSYNC, "b")]
    _, oracle, marks = run(ops, tmp_path / "r")
    assert [v.op for v in oracle.inodes[2].data][-1] == 3  # b: no version after the copy
    assert verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=EXT4) == []
    with open(tmp_path / "r/b", "r+b") as out:  # the control: b's promised bytes changed
        out.write(b"\1")
    assert kinds(verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=EXT4)) == {
        (FindingKind.WRONG_CONTENT, "b")}


def test_a_removed_xattr_that_is_back_fires(tmp_path: Path) -> None:
    ops = [Op(K.CREAT, "f"), Op(K.SETXATTR, "f", xattr="user.x", length=800), Op(K.FSYNC, "f"),
           Op(K.REMOVEXATTR, "f", xattr="user.x"), Op(K.FSYNC, "f")]
    _, oracle, marks = run(ops, tmp_path / "r")
    f = tmp_path / "r/f"
    assert verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=EXT4) == []
    os.setxattr(f, "user.x", b"\0" * 800)  # not the value it had either
    found = verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=EXT4)
    assert kinds(found) == {(FindingKind.WRONG_XATTR, "f")} and found[0].mark == marks[-1]
    # At the first fsync's mark the removal is in flight: present or not, both are fine.
    os.removexattr(f, "user.x")
    assert verify(oracle, tmp_path / "r", last_mark=marks[0], rules=EXT4) == []


@pytest.mark.parametrize("rules", [posix_strict(), EXT4], ids=lambda r: r.name)
def test_a_grown_size_is_promised_and_reads_zeros(rules, tmp_path: Path) -> None:
    ops = [Op(K.CREAT, "f"), Op(K.WRITE, "f", length=B + 10), Op(K.FSYNC, "f"),
           Op(K.TRUNCATE, "f", size=5 * B + 7), Op(K.FSYNC, "f")]
    _, oracle, marks = run(ops, tmp_path / "r")
    f = tmp_path / "r/f"
    assert verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=rules) == []
    os.truncate(f, B + 10)  # the size before the truncate: lost
    found = verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=rules)
    assert [f.broken for f in found] == [Broken.SIZE_BELOW] and found[0].bound == 5 * B + 7
    os.truncate(f, 5 * B + 7)
    with open(f, "r+b") as out:  # the grown part must read zeros
        out.seek(3 * B)
        out.write(b"\1" * 100)
    found = verify(oracle, tmp_path / "r", last_mark=marks[-1], rules=rules)
    assert [(x.broken, x.block) for x in found] == [(Broken.BLOCK, 3)]
