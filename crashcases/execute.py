"""Running a workload with real syscalls, marking the log after every durability op.

``execute`` performs each op under a root (on the device being recorded)
with the syscalls its kind names (``PERFORM``, a table keyed by kind),
keeps the ``FsModel`` in step, and after every durability operation places
a log mark and records the event in the ``OracleLog`` that the oracle later
checks crash states against. An op the filesystem refuses with EOPNOTSUPP
is recorded as skipped (a flag in the oracle log, ``OracleLog.skipped``).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import logging
import mmap
import os
import stat
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crashcases.oracle.log import (
    FS_IOC_GETFLAGS,
    MANAGED_FLAGS,
    Cause,
    NodeKind,
    OracleLog,
    Recorder,
)
from crashcases.vocabulary import (
    ATTR_OPS,
    COPY_OPS,
    DATA_OPS,
    DURABILITY_OPS,
    RENAME_OPS,
    XATTR_OPS,
    OpKind,
)
from crashcases.workload.kinds import SPECS, UTIME_NOW, UTIME_OMIT
from crashcases.workload.model import FsModel
from crashcases.workload.ops import (
    MAX_MARK_CHARS,
    FallocMode,
    Op,
    Workload,
    WorkloadError,
    needs_data,
    op_data,
    synced_range,
    touched_paths,
)

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------
# Execution with real syscalls


def _libc_fallocate() -> Callable[[int, int, int, int], int]:
    libc = ctypes.CDLL(None, use_errno=True)
    fn = libc.fallocate
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fn.restype = ctypes.c_int
    return fn


def _libc_call(name: str, argtypes: list[Any], args: tuple[Any, ...], what: Path) -> None:
    """Call libc ``name`` (which returns -1 and sets errno on failure); OSError on failure."""
    fn = getattr(ctypes.CDLL(None, use_errno=True), name)
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    if fn(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), os.fspath(what))


_UNSUPPORTED = {errno.EOPNOTSUPP, errno.ENOTSUP}
AT_FDCWD = -100
RENAME_NOREPLACE = 1 << 0  # include/uapi/linux/fs.h
RENAME_EXCHANGE = 1 << 1
RENAME_WHITEOUT = 1 << 2
SYNC_FILE_RANGE_ALL = 1 | 2 | 4  # WAIT_BEFORE | WRITE | WAIT_AFTER (sync_file_range(2))
FICLONE = 0x40049409  # _IOW(0x94, 9, int), include/uapi/linux/fs.h
FICLONERANGE = 0x4020940D  # _IOW(0x94, 13, struct file_clone_range)
FIDEDUPERANGE = 0xC0189436  # _IOWR(0x94, 54, struct file_dedupe_range)
FILE_DEDUPE_RANGE_DIFFERS = 1  # an info's status: the ranges differ, nothing was shared
FS_IOC_SETFLAGS = 0x40086602  # _IOW('f', 2, long), include/uapi/linux/fs.h; the kernel reads an int
# utimensat(2)'s tv_nsec values (include/uapi/linux/stat.h).
KERNEL_UTIME_NOW = (1 << 30) - 1
KERNEL_UTIME_OMIT = (1 << 30) - 2
#: fallocate(2)'s mode flags for each mode (include/uapi/linux/falloc.h).
FALLOC_FLAGS = {
    FallocMode.ALLOCATE: 0,
    FallocMode.KEEP_SIZE: 0x01,
    FallocMode.PUNCH_HOLE: 0x01 | 0x02,
    FallocMode.ZERO_RANGE: 0x10,
    FallocMode.COLLAPSE_RANGE: 0x08,
    FallocMode.INSERT_RANGE: 0x20,
    FallocMode.ZERO_RANGE_KEEP_SIZE: 0x10 | 0x01,
    FallocMode.UNSHARE_RANGE: 0x40,
}
#: How an op is done: (op, its path under the root, the root, the data it writes).
Do = Callable[[Op, Path, Path, bytes], None]


def _open_rw(path: Path, flags: int) -> int:
    return os.open(path, os.O_WRONLY | flags)


def _pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    """pwrite ``data`` at ``offset``, one call at least (a 0-byte write is a syscall too)."""
    done = 0
    while True:
        done += os.pwrite(fd, data[done:], offset + done)
        if done >= len(data):
            return


def _direct_write(path: Path, offset: int, data: bytes, flags: int = 0) -> None:
    # O_DIRECT wants an aligned buffer: an anonymous mapping starts on a page.
    fd = _open_rw(path, os.O_DIRECT | flags)
    buf = mmap.mmap(-1, max(len(data), mmap.PAGESIZE))
    try:
        buf[: len(data)] = data
        with memoryview(buf) as view:
            _pwrite_all(fd, view[: len(data)], offset)
    finally:
        buf.close()
        os.close(fd)


def _mapped(path: Path, offset: int, length: int) -> tuple[int, mmap.mmap, int]:
    """(fd, shared mapping of the pages holding [offset, offset+length), where offset is in it)."""
    start = offset // mmap.ALLOCATIONGRANULARITY * mmap.ALLOCATIONGRANULARITY
    fd = os.open(path, os.O_RDWR)
    try:
        m = mmap.mmap(fd, offset + length - start, mmap.MAP_SHARED,
                      mmap.PROT_READ | mmap.PROT_WRITE, offset=start)
    except BaseException:
        os.close(fd)
        raise
    return fd, m, offset - start


def _file_ioctl(fd: int, request: int, arg: int | bytes | bytearray, path: Path) -> None:
    try:
        fcntl.ioctl(fd, request, arg)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, os.fspath(path)) from None


def _two_files(transfer: Callable[[int, int, Op, Path], None]) -> Do:
    """Open ``path`` to read and ``dst`` to write, and ``transfer``(fd_in, fd_out, op, dst)."""
    def do(op: Op, p: Path, root: Path, data: bytes) -> None:
        dst = root / op.dst
        fd_in, fd_out = os.open(p, os.O_RDONLY), os.open(dst, os.O_WRONLY)
        try:
            transfer(fd_in, fd_out, op, dst)
        finally:
            os.close(fd_in)
            os.close(fd_out)
    return do


def _copy_file_range(fd_in: int, fd_out: int, op: Op, dst: Path) -> None:
    done = 0
    while True:  # one call at least: a 0-byte copy is a syscall too
        n = os.copy_file_range(fd_in, fd_out, op.length - done,
                               op.offset + done, op.dst_offset + done)
        done += n
        if n == 0 or done >= op.length:
            break


# Filesystem ioctls on regular files (ioctl_file_clone() in fs/ioctl.c).
def _clone(fd_in: int, fd_out: int, op: Op, dst: Path) -> None:
    _file_ioctl(fd_out, FICLONE, fd_in, dst)


def _clone_range(fd_in: int, fd_out: int, op: Op, dst: Path) -> None:
    # struct file_clone_range { s64 src_fd; u64 src_offset, src_length, dest_offset; }
    _file_ioctl(fd_out, FICLONERANGE,
                struct.pack("qQQQ", fd_in, op.offset, op.length, op.dst_offset), dst)


def _dedupe_range(fd_in: int, fd_out: int, op: Op, dst: Path) -> None:
    # struct file_dedupe_range { u64 src_offset, src_length; u16 dest_count, reserved1;
    # u32 reserved2; struct file_dedupe_range_info info[1] { s64 dest_fd; u64 dest_offset,
    # bytes_deduped; s32 status; u32 reserved; } }, on the source's descriptor
    # (ioctl_fideduperange(2)); the status says what happened to this destination.
    arg = bytearray(struct.pack("QQHHIqQQiI", op.offset, op.length, 1, 0, 0, fd_out,
                                op.dst_offset, 0, 0, 0))
    try:
        fcntl.ioctl(fd_in, FIDEDUPERANGE, arg)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, os.fspath(dst)) from None
    status = struct.unpack_from("i", arg, 24 + 24)[0]
    if status < 0:
        raise OSError(-status, os.strerror(-status), os.fspath(dst))


def _inode_flags(fd: int, path: Path) -> int:
    buf = bytearray(8)
    _file_ioctl(fd, FS_IOC_GETFLAGS, buf, path)
    return int(struct.unpack_from("i", buf)[0])


def _setflags(op: Op, p: Path, root: Path, data: bytes) -> None:
    # As chattr(1) does: read the flags, change the ones the op manages, write them back
    # (the others, such as ext4's extents flag, stay as they are).
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    try:
        flags = (_inode_flags(fd, p) & ~MANAGED_FLAGS) | op.flags
        _file_ioctl(fd, FS_IOC_SETFLAGS, struct.pack("q", flags), p)
    finally:
        os.close(fd)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _timespec(ns: int) -> _Timespec:
    if ns == UTIME_NOW:
        return _Timespec(0, KERNEL_UTIME_NOW)
    if ns == UTIME_OMIT:
        return _Timespec(0, KERNEL_UTIME_OMIT)
    return _Timespec(ns // 10**9, ns % 10**9)


def _utimes(op: Op, p: Path, root: Path, data: bytes) -> None:
    times = (_Timespec * 2)(_timespec(op.atime_ns), _timespec(op.mtime_ns))
    _libc_call("utimensat", [ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int],
               (AT_FDCWD, os.fsencode(p), ctypes.addressof(times), 0), p)


def _creat(op: Op, p: Path, root: Path, data: bytes) -> None:
    os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))


def _write_all(flags: int) -> Do:
    def do(op: Op, p: Path, root: Path, data: bytes) -> None:
        fd = _open_rw(p, flags)
        try:
            done = 0
            while True:  # one call at least: a 0-byte write is a syscall too
                done += os.write(fd, data[done:])
                if done >= len(data):
                    break
        finally:
            os.close(fd)
    return do


def _pwrite(flags: int) -> Do:
    def do(op: Op, p: Path, root: Path, data: bytes) -> None:
        fd = _open_rw(p, flags)
        try:
            _pwrite_all(fd, data, op.offset)
        finally:
            os.close(fd)
    return do


def _mmap_write(op: Op, p: Path, root: Path, data: bytes) -> None:
    fd, m, at = _mapped(p, op.offset, op.length)
    try:
        m[at : at + len(data)] = data  # munmap leaves the pages dirty, unwritten
    finally:
        m.close()
        os.close(fd)


def _msync(op: Op, p: Path, root: Path, data: bytes) -> None:
    fd, m, _ = _mapped(p, op.offset, op.length)
    try:
        m.flush()  # msync(MS_SYNC) over the whole mapping
    finally:
        m.close()
        os.close(fd)


def _sync_file_range(op: Op, p: Path, root: Path, data: bytes) -> None:
    fd = os.open(p, os.O_RDONLY)
    try:
        _libc_call("sync_file_range",
                   [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint],
                   (fd, op.offset, op.length, SYNC_FILE_RANGE_ALL), p)
    finally:
        os.close(fd)


def _syncfs(op: Op, p: Path, root: Path, data: bytes) -> None:
    fd = os.open(p, os.O_RDONLY)
    try:
        _libc_call("syncfs", [ctypes.c_int], (fd,), p)
    finally:
        os.close(fd)


def _renameat2(flag: int) -> Do:
    def do(op: Op, p: Path, root: Path, data: bytes) -> None:
        _libc_call("renameat2",
                   [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint],
                   (AT_FDCWD, os.fsencode(p), AT_FDCWD, os.fsencode(root / op.dst), flag), p)
    return do


def _fallocate(op: Op, p: Path, root: Path, data: bytes) -> None:
    fd = _open_rw(p, 0)
    try:
        if op.falloc is FallocMode.ALLOCATE:
            os.posix_fallocate(fd, op.offset, op.length)
        elif _libc_fallocate()(fd, FALLOC_FLAGS[op.falloc], op.offset, op.length) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), os.fspath(p))
    finally:
        os.close(fd)


def _fsync(flags: int, sync: Callable[[int], None]) -> Do:
    def do(op: Op, p: Path, root: Path, data: bytes) -> None:
        fd = os.open(p, os.O_RDONLY | flags)
        try:
            sync(fd)
        finally:
            os.close(fd)
    return do


#: How each op kind is done: (op, its path under the root, the root, the data it writes).
PERFORM: dict[OpKind, Do] = {
    OpKind.CREAT: _creat,
    OpKind.MKDIR: lambda op, p, root, data: os.mkdir(p, 0o755),
    OpKind.WRITE: _write_all(os.O_TRUNC),
    OpKind.PWRITE: _pwrite(0),
    OpKind.APPEND: _write_all(os.O_APPEND),
    OpKind.TRUNCATE: lambda op, p, root, data: os.truncate(p, op.size),
    OpKind.FALLOCATE: _fallocate,
    OpKind.RENAME: lambda op, p, root, data: os.rename(p, root / op.dst),
    OpKind.LINK: lambda op, p, root, data: os.link(p, root / op.dst),
    OpKind.UNLINK: lambda op, p, root, data: os.unlink(p),
    OpKind.RMDIR: lambda op, p, root, data: os.rmdir(p),
    OpKind.SYMLINK: lambda op, p, root, data: os.symlink(op.target, p),
    OpKind.SETXATTR: lambda op, p, root, data: os.setxattr(p, op.xattr, data),
    OpKind.REMOVEXATTR: lambda op, p, root, data: os.removexattr(p, op.xattr),
    OpKind.FSYNC: _fsync(0, os.fsync),
    OpKind.FDATASYNC: _fsync(0, os.fdatasync),
    OpKind.SYNC: lambda op, p, root, data: os.sync(),
    OpKind.FSYNC_DIR: _fsync(os.O_DIRECTORY, os.fsync),
    OpKind.DIRECT_WRITE: lambda op, p, root, data: _direct_write(p, op.offset, data),
    OpKind.MMAP_WRITE: _mmap_write,
    OpKind.MSYNC: _msync,
    OpKind.WRITE_OSYNC: _pwrite(os.O_SYNC),
    OpKind.WRITE_ODSYNC: _pwrite(os.O_DSYNC),
    OpKind.SYNC_FILE_RANGE: _sync_file_range,
    OpKind.SYNCFS: _syncfs,
    OpKind.RENAME_NOREPLACE: _renameat2(RENAME_NOREPLACE),
    OpKind.RENAME_EXCHANGE: _renameat2(RENAME_EXCHANGE),
    OpKind.COPY_FILE_RANGE: _two_files(_copy_file_range),
    OpKind.CLONE: _two_files(_clone),
    OpKind.CLONE_RANGE: _two_files(_clone_range),
    OpKind.DEDUPE_RANGE: _two_files(_dedupe_range),
    OpKind.RENAME_WHITEOUT: _renameat2(RENAME_WHITEOUT),
    OpKind.MKNOD: lambda op, p, root, data: os.mknod(p, 0o644 | stat.S_IFIFO),
    OpKind.CHMOD: lambda op, p, root, data: os.chmod(p, op.mode),
    OpKind.CHOWN: lambda op, p, root, data: os.chown(p, op.uid, op.gid),
    OpKind.UTIMES: _utimes,
    OpKind.SETFLAGS: _setflags,
    OpKind.DIRECT_WRITE_OSYNC: lambda op, p, root, data: _direct_write(p, op.offset, data,
                                                                       os.O_SYNC),
    OpKind.DIRECT_WRITE_ODSYNC: lambda op, p, root, data: _direct_write(p, op.offset, data,
                                                                        os.O_DSYNC),
}


def perform(op: Op, root: Path, data: bytes) -> None:
    """Do ``op`` under ``root`` with the syscalls it names."""
    PERFORM[op.kind](op, root / op.path if op.path else root, root, data)


#: The mark after mkfs, before the workload's first op.
MKFS_MARK = "mkfs"
#: In a two-disk recording the data log gets a second mark, NAME + ORDER_SUFFIX, right
#: after the journal log's NAME: nothing logged between the two says the data disk
#: completed nothing while the journal disk was marked (crashcases.crash.points).
ORDER_SUFFIX = ".j"


def mark_name(number: int) -> str:
    name = f"pc-{number}"
    assert len(name) <= MAX_MARK_CHARS
    return name


def execute(workload: Workload, root: Path, mark: Callable[[str], None]) -> OracleLog:
    """Run ``workload`` under ``root``; after every durability op call ``mark`` and record it.

    ``mark(name)`` is called after the durability syscall has returned, so
    everything the log holds before that mark was on stable storage when
    the promise was made. An op the filesystem does not support
    (EOPNOTSUPP: punch hole on ext2, reflinks on ext4, user xattrs when
    disabled) is recorded as skipped and changes nothing; so is a later
    non-durability op that the skip made invalid. Any other failure means
    the workload and the tree disagree: ``WorkloadError``.
    """
    model = FsModel()
    rec = Recorder(workload.name, workload.seed)
    marks = 0
    skipped = False
    for index, op in enumerate(workload.ops):
        reason = model.check(op)
        if reason and skipped and op.kind not in DURABILITY_OPS:
            # An earlier op was unsupported, so this one meets another tree than
            # the workload was made for (e.g. a size a skipped collapse did not
            # change): it is skipped too. Durability ops are never skipped: their
            # marks are numbered in workload order.
            log.info("op %d (%s) invalid after a skipped op, skipped: %s", index, op.describe(), reason)
            rec.op(index, op.describe(), skipped=reason)
            continue
        if reason:
            raise WorkloadError(
                f"workload {workload.name!r} op {index} ({op.describe()}): {reason}"
            )
        data = op_data(workload.seed, index, op.length) if needs_data(op) else b""
        before = {p: model.bindings(p) for p in touched_paths(op)}
        try:
            perform(op, root, data)
        except OSError as exc:
            if exc.errno in _UNSUPPORTED:
                log.info("op %d (%s) not supported here, skipped: %s", index, op.describe(), exc)
                rec.op(index, op.describe(), skipped="unsupported")
                skipped = True
                continue
            raise WorkloadError(
                f"workload {workload.name!r} op {index} ({op.describe()}) failed under {root}: {exc}"
            ) from exc
        rec.op(index, op.describe())
        model.apply(op, data)
        _record_effects(rec, model, op, index, before)
        if op.kind in ATTR_OPS:
            node_id = model.lookup(op.path)
            if node_id is not None:
                for name, value in observe_attributes(op, root / op.path,
                                                      model.nodes[node_id].kind).items():
                    rec.attr(node_id, index, name, value)
        if op.kind in DURABILITY_OPS:
            name = mark_name(marks)
            marks += 1
            mark(name)
            node_id = model.lookup(op.path)
            rec.mark(name, index, op.kind, op.path, node_id, synced_range(op))
    rec.finish(len(workload.ops))
    return rec.log


def _record_effects(
    rec: Recorder, model: FsModel, op: Op, index: int, before: dict[str, dict[str, int]]
) -> None:
    after = {p: model.bindings(p) for p in before}
    old: dict[str, int] = {}
    new: dict[str, int] = {}
    for p in before:
        old.update(before[p])
        new.update(after[p])
    for path in sorted(set(old) | set(new)):
        was, now = old.get(path), new.get(path)
        if was == now:
            continue
        if now is not None and now not in rec.known_inodes:
            node = model.nodes[now]
            rec.inode(now, node.kind, index, node.target)
            if node.kind is NodeKind.FILE:
                rec.data(now, index, b"")
        rec.bind(path, index, now, _cause(op, path, was, now))
    moved = op.kind in RENAME_OPS or op.kind in COPY_OPS or op.kind is OpKind.DEDUPE_RANGE
    node_id = model.lookup(op.dst if moved else op.path)
    if node_id is None:
        return
    node = model.nodes[node_id]
    changes_data = (op.kind in DATA_OPS or op.kind in COPY_OPS
                    or (op.kind is OpKind.CREAT and path_existed(before, op.path)))
    if (changes_data or op.kind is OpKind.DEDUPE_RANGE) and rec.has_attr(node_id, "mtime"):
        # The kernel sets the mtime of a file whose data it changes (file_update_time(),
        # file_modified(), the setattr of a truncate) to the time of day, read once or more
        # in the op: from here on it is not known (dedupe leaves it, but is not counted on).
        rec.attr(node_id, index, "mtime", None)
    if changes_data:
        if op.kind is OpKind.WRITE and rec.size_of(node_id):
            # open(O_TRUNC) is a change of its own before the new bytes: xfs_setattr_size()
            # and ext4_truncate() log the new size at once, while the write may wait for
            # writeback, so a crash in between finds the file empty.
            rec.data(node_id, index, b"")
        rec.data(node_id, index, bytes(node.data))
    elif op.kind in XATTR_OPS:
        rec.xattr(node_id, index, op.xattr, node.xattrs.get(op.xattr))


def observe_attributes(op: Op, path: Path, kind: NodeKind) -> dict[str, int | None]:
    """The attributes attribute op ``op`` just set on the object at ``path``, as the kernel
    keeps them (a time truncated to the filesystem's granularity, set-user-ID dropped by
    chown), read back: what the oracle then holds it to (crashcases.oracle.log.ATTRIBUTES).

    A time set to UTIME_NOW is not known (the time of day, which a run of the same workload
    elsewhere does not share), and a directory's mtime is never held (see ATTRIBUTES)."""
    st = os.lstat(path)
    if op.kind is OpKind.CHMOD:
        return {"mode": stat.S_IMODE(st.st_mode)}
    if op.kind is OpKind.CHOWN:
        return {"uid": st.st_uid, "gid": st.st_gid, "mode": stat.S_IMODE(st.st_mode)}
    if op.kind is OpKind.UTIMES:
        if kind is not NodeKind.FILE or op.mtime_ns == UTIME_OMIT:
            return {}
        return {"mtime": None if op.mtime_ns == UTIME_NOW else st.st_mtime_ns}
    if op.kind is OpKind.SETFLAGS:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            return {"flags": _inode_flags(fd, path) & MANAGED_FLAGS}
        finally:
            os.close(fd)
    return {}


def path_existed(before: dict[str, dict[str, int]], path: str) -> bool:
    return path in before.get(path, {})


def _cause(op: Op, path: str, was: int | None, now: int | None) -> Cause:
    """Why ``path`` changed binding: the op's own for its paths, ``moved`` for descendants."""
    if path not in (op.path, op.dst):
        return Cause.MOVED
    return SPECS[op.kind].cause(op, path, was)
