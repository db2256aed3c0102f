"""One class per operation kind: its words, when it applies to a tree, what it does to it,
and what it needs of the filesystem.

Each class names its ``kind`` and adds itself to ``SPECS``; ``Op.describe``,
``FsModel.check`` and ``FsModel.apply`` (crashcases.workload.model) and the
generators ask the spec of an op's kind. How a kind is run and how an fstests
test writes it are tables keyed by kind beside the code that runs or writes it
(``crashcases.execute.PERFORM``, ``crashcases.findings.fstests.FSTESTS_OPS``).
Adding a kind: its member in ``OpKind`` (crashcases.vocabulary, and the groups
there it belongs to), its class here, its entries in those two tables;
tests/unit/test_kinds.py fails until every table has it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar, Protocol

from crashcases.oracle.log import (
    FS_APPEND_FL,
    FS_IMMUTABLE_FL,
    FS_NOATIME_FL,
    FS_NODUMP_FL,
    FS_SYNC_FL,
    MANAGED_FLAGS,
    Cause,
    NodeKind,
    flag_words,
)
from crashcases.vocabulary import OpKind
from crashcases.workload.tree import Node, Tree, parent_of, resize, write_at

#: The alignment direct I/O and reflinks get here: a page, and a block of
#: every filesystem the adapters make (a multiple of any smaller block).
ALIGN_BYTES = 4096


class FallocMode(StrEnum):
    ALLOCATE = "allocate"  # mode 0: allocate, extend the size, zeros past the old end
    KEEP_SIZE = "keep-size"  # FALLOC_FL_KEEP_SIZE: allocate only, nothing visible changes
    PUNCH_HOLE = "punch-hole"  # PUNCH_HOLE|KEEP_SIZE: the range reads zeros
    ZERO_RANGE = "zero-range"  # FALLOC_FL_ZERO_RANGE: zeros, may extend the size
    COLLAPSE_RANGE = "collapse-range"  # FALLOC_FL_COLLAPSE_RANGE: remove the range, shift down
    INSERT_RANGE = "insert-range"  # FALLOC_FL_INSERT_RANGE: insert a hole, shift up
    # FALLOC_FL_ZERO_RANGE|FALLOC_FL_KEEP_SIZE: zeros inside the file, the size stays.
    ZERO_RANGE_KEEP_SIZE = "zero-range-keep-size"
    UNSHARE_RANGE = "unshare-range"  # FALLOC_FL_UNSHARE_RANGE: private copies of shared blocks


#: The modes every generator has used from the start (random streams depend on this order).
CLASSIC_FALLOC_MODES = (
    FallocMode.ALLOCATE, FallocMode.KEEP_SIZE, FallocMode.PUNCH_HOLE, FallocMode.ZERO_RANGE,
)
#: The modes the generators of generator 3 draw from, in their order: ``gen:*``, ``random:N``,
#: ``stress:N`` and ``ranges:N`` list these, never FallocMode itself, so that a mode added to
#: it leaves their workloads as they were (old runs are rebuilt from their plans).
GEN3_FALLOC_MODES = (
    *CLASSIC_FALLOC_MODES, FallocMode.COLLAPSE_RANGE, FallocMode.INSERT_RANGE,
)
# vfs_fallocate() (fs/open.c, Linux 6.1) returns EOPNOTSUPP where the filesystem has
# no ->fallocate (jfs, reiserfs); ext4_fallocate() (fs/ext4/extents.c) punches holes
# in any file but allocates and zeroes ranges only in files with extents.
FALLOC_CAPABILITY = {
    FallocMode.ALLOCATE: "fallocate",
    FallocMode.KEEP_SIZE: "fallocate",
    FallocMode.PUNCH_HOLE: "punch-hole",
    FallocMode.ZERO_RANGE: "zero-range",
    FallocMode.COLLAPSE_RANGE: "collapse-range",
    FallocMode.INSERT_RANGE: "insert-range",
    # ext4_zero_range(), xfs_file_fallocate(), btrfs_zero_range() and f2fs_zero_range()
    # take FALLOC_FL_KEEP_SIZE with FALLOC_FL_ZERO_RANGE.
    FallocMode.ZERO_RANGE_KEEP_SIZE: "zero-range",
    FallocMode.UNSHARE_RANGE: "unshare-range",
}


#: The inode flags a setflags op may set, each alone (FLAG_LETTERS says which is which).
SETTABLE_FLAGS = (FS_APPEND_FL, FS_IMMUTABLE_FL, FS_SYNC_FL, FS_NOATIME_FL, FS_NODUMP_FL)

#: What a file with FS_IMMUTABLE_FL or FS_APPEND_FL may still have done to it: syncs open
#: it read-only, and setflags clears the flag; an append-only file takes O_APPEND writes
#: (may_open() and do_truncate(), fs/namei.c and fs/open.c; setattr_prepare() and
#: xattr_permission() refuse the rest with EPERM).
IMMUTABLE_OK = frozenset({OpKind.SETFLAGS, OpKind.FSYNC, OpKind.FDATASYNC, OpKind.SYNC,
                          OpKind.SYNCFS, OpKind.SYNC_FILE_RANGE})
APPEND_ONLY_OK = IMMUTABLE_OK | {OpKind.APPEND}

#: utimensat(2)'s special times, as an op's ``atime_ns`` and ``mtime_ns`` carry them (every
#: other value is nanoseconds since the epoch).
UTIME_OMIT = -1  # leave the time as it is
UTIME_NOW = -2  # the current time


def check_path(path: str, *, root_ok: bool) -> str | None:
    """Why ``path`` cannot name something under the root ("" is the root), or None."""
    if path == "":
        return None if root_ok else "needs a path"
    if path.startswith("/") or any(c in ("", ".", "..") for c in path.split("/")):
        return f"path {path!r} must be relative, without empty, '.' or '..' components"
    return None


class OpFields(Protocol):
    """What the rules read of an op: the fields of crashcases.workload.ops.Op."""

    @property
    def kind(self) -> OpKind: ...
    @property
    def path(self) -> str: ...
    @property
    def dst(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def offset(self) -> int: ...
    @property
    def length(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def falloc(self) -> FallocMode: ...
    @property
    def xattr(self) -> str: ...
    @property
    def dst_offset(self) -> int: ...
    @property
    def mode(self) -> int: ...
    @property
    def uid(self) -> int: ...
    @property
    def gid(self) -> int: ...
    @property
    def atime_ns(self) -> int: ...
    @property
    def mtime_ns(self) -> int: ...
    @property
    def flags(self) -> int: ...


#: Every kind's rules, by kind: each class below that names a kind adds itself.
SPECS: dict[OpKind, OpSpec] = {}


class OpSpec:
    """The rules of one operation kind: its words, when it applies to a tree, what it does
    to it, and what it needs of the filesystem.

    How a kind is run and how an fstests test writes it are tables keyed by kind beside
    the code that does so (crashcases.execute.PERFORM, crashcases.findings.fstests.
    FSTESTS_OPS); tests/unit/test_kinds.py holds every kind to be in each.
    """

    kind: ClassVar[OpKind]
    #: Whether the root (path "") is a subject the op may name.
    on_root: ClassVar[bool] = False
    #: Whether the op writes ``length`` generated bytes (``op_data``).
    writes_data: ClassVar[bool] = False
    #: What the op needs of the filesystem, in the words of the adapters' ``capabilities``.
    capability: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            if cls.kind in SPECS:
                raise TypeError(f"{cls.__name__}: {cls.kind} has rules already "
                                f"({type(SPECS[cls.kind]).__name__})")
            SPECS[cls.kind] = cls()

    def describe(self, op: OpFields) -> str:
        return f"{op.kind} {op.path or '.'}"

    def required_capability(self, op: OpFields) -> str | None:
        return self.capability

    def check(self, op: OpFields, tree: Tree) -> str | None:
        """Why ``op`` cannot be applied to ``tree`` now, or None; its path and numbers are
        valid already (``FsModel.check``)."""
        return None

    def apply(self, op: OpFields, tree: Tree, data: bytes) -> None:
        """Change ``tree`` as ``op`` (checked) does; ``data`` is what it writes."""

    def touched(self, op: OpFields) -> tuple[str, ...]:
        """Paths whose subtree bindings ``op`` may change."""
        return ()

    def cause(self, op: OpFields, path: str, was: int | None) -> Cause:
        """Why ``op`` changed the binding of its own ``path`` (or ``dst``), which named
        ``was`` before."""
        return Cause(self.kind.value)

    def synced_range(self, op: OpFields, page_bytes: int) -> tuple[int, int] | None:
        """The byte range [start, end) whose data durability op ``op`` syncs (None: not a
        range)."""
        return None


# -- names made: creat, mkdir, symlink


class _Create(OpSpec):
    def check(self, op: OpFields, tree: Tree) -> str | None:
        if tree.kind_of(parent_of(op.path)) is not NodeKind.DIR:
            return f"parent of {op.path} is not a directory"
        return self.exists_problem(op, tree.kind_of(op.path))

    def exists_problem(self, op: OpFields, kind: NodeKind | None) -> str | None:
        return None if kind is None else f"{op.path} exists"

    def touched(self, op: OpFields) -> tuple[str, ...]:
        return (op.path,)


class Creat(_Create):
    kind = OpKind.CREAT

    def exists_problem(self, op: OpFields, kind: NodeKind | None) -> str | None:
        return None if kind in (None, NodeKind.FILE) else f"{op.path} exists as {kind}"

    def apply(self, op: OpFields, tree: Tree, data: bytes) -> None:
        node_id = tree.lookup(op.path)
        if node_id is None:
            tree.attach(op.path, tree.new(Node(NodeKind.FILE)))
        else:
            del tree.nodes[node_id].data[:]


class Mkdir(_Create):
    kind = OpKind.MKDIR

    def apply(self, op: OpFields, tree: Tree, data: bytes) -> None:
        tree.attach(op.path, tree.new(Node(NodeKind.DIR)))


class Symlink(_Create):
    kind = OpKind.SYMLINK

    def describe(self, op: OpFields) -> str:
        return f"symlink {op.path} -> {op.target!r}"

    def exists_problem(self, op: OpFields, kind: NodeKind | None) -> str | None:
        if not op.target:
            return "symlink needs a target"
        return super().exists_problem(op, kind)

    def apply(self, op: OpFields, tree: Tree, data: bytes) -> None:
        tree.attach(op.path, tree.new(Node(NodeKind.SYMLINK, target=op.target)))


class Mknod(_Create):
    kind = OpKind.MKNOD

    def describe(self, op: OpFields) -> str:
        return f"mknod {op.path} fifo"

    def apply(self, op: OpFields, tree: Tree, data: bytes) -> None:
        tree.attach(op.path, tree.new(Node(NodeKind.FIFO)))


# -- one regular file: its data, its size, syncing it


class _OneFile(OpSpec):
    def check(self, op: OpFields, tree: Tree) -> str | None:
        if tree.kind_of(op.path) is not NodeKind.FILE:
            return f"{op.path} is not a regular file"
        return self.range_problem(op, tree.size_of(op.path))

    def range_problem(self, op: OpFields, size: int) -> str | None:
        """Why the offsets and lengths of ``op`` do not fit a file of ``size`` bytes."""
        return None

    def apply(self, op: OpFields, tree: Tree, data: bytes) -> None:
        node_id = tree.lookup(op.path)
        if node_id is not None:
            self.change(op, tree.nodes[node_id].data, data)

    def change(self, op: OpFields, buf: bytearray, data: bytes) -> None:
        """Change the file's bytes ``buf`` as ``op`` does."""


class _Ranged(_OneFile):
    def describe(self, op: OpFields) -> str:
        return f"{op.kind} {op.path} @{op.offset}+{op.length}"


class Write(_OneFile):
    kind = OpKind.WRITE
    writes_data = True

    def describe(self, op: OpFields) -> str:
        return f"{op.kind} {op.path} {op.length}B"

    def change(self, op: OpFields, buf: bytearray, data: bytes) -> None:
        buf[:] = data


class Append(Write):
    kind = OpKind.APPEND

    def change(self, op: OpFields, buf: bytearray, data: bytes) -> None:
        buf += data


class Pwrite(_Ranged):
    kind = OpKind.PWRITE
    writes_data = True

    def change(self, op: OpFields, buf: bytearray, data: bytes) -> None:
        write_at(buf, op.offset, data)


class DirectWrite(Pwrite):
    kind = OpKind.DIRECT_WRITE
    capability = "direct-io"

    def range_problem(self, op: OpFields, size: int) -> str | None:
        if op.offset % ALIGN_BYTES or op.length % ALIGN_BYTES:
            return f"direct I/O offset and length must be multiples of {ALIGN_BYTES}"
        return None


def _mapped_range_problem(op: OpFields, size: int) -> str | None:
    # A store past the end of the file is SIGBUS, and mmap(2) of length 0 is EINVAL.
    if op.length == 0:
        return f"{op.kind} needs a length above 0"
    if op.offset + op.length > size:
        return f"{op.kind} range {op.offset}+{op.length} runs past the end of {op.path} ({size} B)"
    return None


class MmapWrite(Pwrite):
    kind = OpKind.MMAP_WRITE

    def range_problem(self, op: OpFields, size: int) -> str | None:
        return _mapped_range_problem(op, size)


class WriteOsync(Pwrite):
    kind = OpKind.WRITE_OSYNC

    def range_problem(self, op: OpFields, size: int) -> str | None:
        # generic_write_sync() runs only after a write of at least one byte.
        return f"{op.kind} of 0 bytes syncs nothing" if op.length == 0 else None

    def synced_range(self, op: OpFields, page_bytes: int) -> tuple[int, int] | None:
        # generic_write_sync() (include/linux/fs.h) calls vfs_fsync_range() over the
        # bytes just written.
        return op.offset, op.offset + op.length


class WriteOdsync(WriteOsync):
    kind = OpKind.WRITE_ODSYNC


class DirectWriteOsync(DirectWrite):
    kind = OpKind.DIRECT_WRITE_OSYNC

    def range_problem(self, op: OpFields, size: int) -> str | None:
        if op.length == 0:
            return f"{op.kind} of 0 bytes syncs nothing"
        return super().range_problem(op, size)

    def synced_range(self, op: OpFields, page_bytes: int) -> tuple[int, int] | None:
        # iomap_dio_rw() (fs/iomap/direct-io.c) and __generic_file_write_iter() end an
        # O_DIRECT write of an O_SYNC or O_DSYNC descriptor in generic_write_sync() over the
        # bytes written, as a buffered one; iomap may instead write them with FUA and skip
        # it when the blocks were allocated already (IOMAP_DIO_WRITE_THROUGH, O_DSYNC only).
        return op.offset, op.offset + op.length


class DirectWriteOdsync(DirectWriteOsync):
    kind = OpKind.DIRECT_WRITE_ODSYNC


class Truncate(_OneFile):
    kind = OpKind.TRUNCATE

    def describe(self, op: OpFields) -> str:
        return f"truncate {op.path} {op.size}B"

    def change(self, op: OpFields, buf: bytearray, data: bytes) -> None:
        resize(buf, op.size)


class Fallocate(_OneFile):
    kind = OpKind.FALLOCATE

    def describe(self, op: OpFields) -> str:
        return f"fallocate {op.path} {op.falloc} @{op.offset}+{op.length}"

    def required_capability(self, op: OpFields) -> str | None:
        return FALLOC_CAPABILITY.get(op.falloc)

    def range_problem(self, op: OpFields, size: int) -> str | None:
        # fallocate(2): EINVAL for a length of 0 in every mode (vfs_fallocate(), fs/open.c).
        if op.length == 0:
            return "fallocate needs a length above 0"
        if op.falloc in (FallocMode.COLLAPSE_RANGE, FallocMode.INSERT_RANGE):
            if op.offset % ALIGN_BYTES or op.length % ALIGN_BYTES:
                return f"{op.falloc} offset and length must be multiples of {ALIGN_BYTES}"
            # vfs_fallocate() refuses a collapse reaching the end (that is a truncate);
            # ext4_insert_range() and xfs_insert_file_space() refuse an offset at or past it.
            if op.falloc is FallocMode.COLLAPSE_RANGE and op.offset + op.length >= size:
                return (f"collapse-range {op.offset}+{op.length} must end before the end "
                        f"({size} B)")
            if op.falloc is FallocMode.INSERT_RANGE and op.offset >= size:
                return f"insert-range offset {op.offset} must be before the end ({size} B)"
        if op.falloc is FallocMode.UNSHARE_RANGE and op.offset + op.length > size:
            # Without KEEP_SIZE an unshare past the end would also extend the file
            # (xfs_falloc_unshare_range()); the workloads keep it inside.
            return f"unshare-range {op.offset}+{op.length} runs past the end ({size} B)"
        return None

    def change(self, op: OpFields, buf: bytearray, data: bytes) -> None:
        mode, offset, end = op.falloc, op.offset, op.offset + op.length
        if mode is FallocMode.ALLOCATE:
            if end > len(buf):
                resize(buf, end)
        elif mode is FallocMode.PUNCH_HOLE:
            stop = min(end, len(buf))
            if stop > offset:
                buf[offset:stop] = bytes(stop - offset)
        elif mode is FallocMode.ZERO_RANGE:
            if end > len(buf):
                resize(buf, end)
            buf[offset:end] = bytes(op.length)
        elif mode is FallocMode.COLLAPSE_RANGE:
            del buf[offset:end]
        elif mode is FallocMode.INSERT_RANGE:
            buf[offset:offset] = bytes(op.length)
        elif mode is FallocMode.ZERO_RANGE_KEEP_SIZE:
            stop = min(end, len(buf))
            if stop > offset:
                buf[offset:stop] = bytes(stop - offset)
        # KEEP_SIZE: blocks past EOF are allocated, nothing readable changes; UNSHARE_RANGE
        # gives the range blocks of its own, the bytes stay.


class Fsync(_OneFile):
    kind = OpKind.FSYNC


class Fdatasync(_OneFile):
    kind = OpKind.FDATASYNC


class Msync(_Ranged):
    kind = OpKind.MSYNC

    def range_problem(self, op: OpFields, size: int) -> str | None:
        return _mapped_range_problem(op, size)

    def synced_range(self, op: OpFields, page_bytes: int) -> tuple[int, int] | None:
        # msync() (mm/msync.c) calls vfs_fsync_range() over the mapped pages the range
        # touches, from the page holding `offset` to the end of the page holding the last
        # byte.
        start = op.offset // page_bytes * page_bytes
        end = -(-(op.offset + op.length) // page_bytes) * page_bytes
        return start, end


class SyncFileRange(_Ranged):
    kind = OpKind.SYNC_FILE_RANGE


# -- the data of `dst` from the data of `path`: copy_file_range, reflinks


class _Copy(OpSpec):
    def describe(self, op: OpFields) -> str:
        return f"{op.kind} {op.path} @{op.offset}+{op.length} -> {op.dst} @{op.dst_offset}"

    def check(self, op: OpFields, tree: Tree) -> str | None:
        bad = check_path(op.dst, root_ok=False)
        if bad:
            return bad
        if tree.kind_of(op.path) is not NodeKind.FILE:
            return f"{op.path} is not a regular file"
        if tree.kind_of(op.dst) is not NodeKind.FILE:
            return f"{op.dst} is not a regular file"
        src, dst = tree.lookup(op.path), tree.lookup(op.dst)
        assert src is not None and dst is not None
        return self.copy_problem(op, len(tree.nodes[src].data), len(tree.nodes[dst].data),
                                 same=src == dst)

    def source_range(self, op: OpFields, src_size: int) -> tuple[int, int]:
        """(offset, byte count) of the source that ``op`` transfers."""
        # copy_file_range(2) stops at the end of the source (generic_copy_file_checks()).
        return op.offset, max(0, min(op.length, src_size - op.offset))

    def copy_problem(self, op: OpFields, src_size: int, dst_size: int, *, same: bool) -> str | None:
        """Why ``op`` would fail on these sizes (the kernel's EINVAL cases), or None."""
        start, count = self.source_range(op, src_size)
        if same and op.dst_offset + count > start and op.dst_offset < start + count:
            return "copy_file_range ranges overlap in one file"
        return None

    def apply(self, op: OpFields, tree: Tree, data: bytes) -> None:
        node_id = tree.lookup(op.path)
        if node_id is None:
            return
        src = tree.nodes[node_id].data
        dst = tree.nodes[tree.lookup(op.dst) or 0]
        start, count = self.source_range(op, len(src))
        if count:
            write_at(dst.data, op.dst_offset, bytes(src[start : start + count]))


class CopyFileRange(_Copy):
    kind = OpKind.COPY_FILE_RANGE


class CloneRange(_Copy):
    kind = OpKind.CLONE_RANGE
    capability = "reflink"

    def source_range(self, op: OpFields, src_size: int) -> tuple[int, int]:
        if op.length == 0:
            # FICLONERANGE with src_length 0 clones to the end of the source.
            return op.offset, max(0, src_size - op.offset)
        return super().source_range(op, src_size)

    def copy_problem(self, op: OpFields, src_size: int, dst_size: int, *, same: bool) -> str | None:
        if op.length == 0 and op.offset == src_size:
            return None  # nothing to clone: the kernel returns at once
        start, count = self.source_range(op, src_size)
        if count == 0:
            return f"clone source range starts at the end of {op.path}"
        return self.remap_problem(op, start, count, src_size, dst_size, same=same)

    def remap_problem(self, op: OpFields, start: int, count: int, src_size: int, dst_size: int, *,
                      same: bool) -> str | None:
        """Why the kernel refuses to share these ``count`` bytes, or None: the checks of
        generic_remap_file_range_prep(), generic_remap_checks() and
        generic_remap_check_len() in fs/remap_range.c (Linux 6.1)."""
        if op.offset % ALIGN_BYTES or op.dst_offset % ALIGN_BYTES:
            return f"clone offsets must be multiples of {ALIGN_BYTES}"
        if op.length and op.offset + op.length > src_size:
            return f"clone source range {op.offset}+{op.length} runs past the end of {op.path}"
        to_eof = start + count == src_size
        if count % ALIGN_BYTES and not to_eof:
            return (f"clone length must be a multiple of {ALIGN_BYTES} unless it ends at the "
                    "end of the source")
        if count % ALIGN_BYTES and op.dst_offset + count < dst_size:
            return "an unaligned end of file cannot be cloned into the middle of the destination"
        if op.dst_offset > dst_size:
            return f"clone destination offset {op.dst_offset} is past the end of {op.dst}"
        span = -(-count // ALIGN_BYTES) * ALIGN_BYTES if to_eof else count
        if same and op.dst_offset + span > start and op.dst_offset < start + span:
            return "clone ranges overlap in one file"
        return None


class Clone(CloneRange):
    kind = OpKind.CLONE

    def describe(self, op: OpFields) -> str:
        return f"{op.kind} {op.path} -> {op.dst}"

    def source_range(self, op: OpFields, src_size: int) -> tuple[int, int]:
        return 0, src_size

    def copy_problem(self, op: OpFields, src_size: int, dst_size: int, *, same: bool) -> str | None:
        if op.offset or op.length or op.dst_offset:
            return "clone takes no offsets or length (see clone_range)"
        if src_size == 0:
            return None
        return self.remap_problem(op, 0, src_size, src_size, dst_size, same=same)


class DedupeRange(_Copy):
    kind = OpKind.DEDUPE_RANGE
    capability = "dedupe"

    def copy_problem(self, op: OpFields, src_size: int, dst_size: int, *, same: bool) -> str | None:
        """The EINVAL cases of vfs_dedupe_file_range() and generic_remap_checks()
        (fs/remap_range.c, Linux 6.1): both ranges within their files, block-aligned starts,
        a length that is aligned or ends both files (else the kernel shortens it)."""
        if op.length == 0:
            return "dedupe_range needs a length above 0"
        if op.offset % ALIGN_BYTES or op.dst_offset % ALIGN_BYTES:
            return f"dedupe offsets must be multiples of {ALIGN_BYTES}"
        if op.offset + op.length > src_size or op.dst_offset + op.length > dst_size:
            return "dedupe ranges must lie inside both files"
        to_eof = op.offset + op.length == src_size and op.dst_offset + op.length == dst_size
        if op.length % ALIGN_BYTES and not to_eof:
            return (f"dedupe length must be a multiple of {ALIGN_BYTES} unless it ends both "
                    "files")
        span = -(-op.length // ALIGN_BYTES) * ALIGN_BYTES
        if same and op.dst_offset + span > op.offset and op.dst_offset < op.offset + span:
            return "dedupe ranges overlap in one file"
        return None

    def apply(self, op: OpFields, tree: Tree, data: bytes) -> None:
        # FIDEDUPERANGE shares the two ranges only where their bytes are equal and reports
        # FILE_DEDUPE_RANGE_DIFFERS, changing nothing, where they are not
        # (ioctl_fideduperange(2)): what either file reads stays the same.
        return


# -- xattrs


class _Xattr(OpSpec):
    def describe(self, op: OpFields) -> str:
        return f"{op.kind} {op.path} {op.xattr}"

    def check(self, op: OpFields, tree: Tree) -> str | None:
        if tree.kind_of(op.path) not in (NodeKind.FILE, NodeKind.DIR) or not op.path:
            return f"{op.path} is not a file or directory below the root"
        if not op.xattr.startswith("user."):
            return f"xattr {op.xattr!r} is not in the user. namespace"
        return self.xattr_problem(op, tree.nodes[tree.lookup(op.path) or 0])

    def xattr_problem(self, op: OpFields, node: Node) -> str | None:
        return None

    def apply(self, op: OpFields, tree: Tree, data: bytes) -> None:
        node_id = tree.lookup(op.path)
        if node_id is not None:
            self.change(op, tree.nodes[node_id].xattrs, data)

    def change(self, op: OpFields, xattrs: dict[str, bytes], data: bytes) -> None:
        xattrs[op.xattr] = data


class Setxattr(_Xattr):
    kind = OpKind.SETXATTR
    writes_data = True


class Removexattr(_Xattr):
    kind = OpKind.REMOVEXATTR

    def xattr_problem(self, op: OpFields, node: Node) -> str | None:
        return None if op.xattr in node.xattrs else f"{op.path} has no xattr {op.xattr}"

    def change(self, op: OpFields, xattrs: dict[str, bytes], data: bytes) -> None:
        del xattrs[op.xattr]


# -- names removed: unlink, rmdir


class _Remove(OpSpec):
    def touched(self, op: OpFields) -> tuple[str, ...]:
        return (op.path,)

    def apply(self, op: OpFields, tree: Tree, data: bytes) -> None:
        if tree.lookup(op.path) is not None:
            tree.detach(op.path)


class Unlink(_Remove):
    kind = OpKind.UNLINK

    def check(self, op: OpFields, tree: Tree) -> str | None:
        kind = tree.kind_of(op.path)
        if kind in (NodeKind.FILE, NodeKind.SYMLINK, NodeKind.FIFO, NodeKind.WHITEOUT):
            return None
        return f"{op.path} is not a file"


class Rmdir(_Remove):
    kind = OpKind.RMDIR

    def check(self, op: OpFields, tree: Tree) -> str | None:
        node_id = tree.lookup(op.path)
        if node_id is None or tree.nodes[node_id].kind is not NodeKind.DIR:
            return f"{op.path} is not a directory"
        return None if not tree.nodes[node_id].entries else f"{op.path} is not empty"


# -- a second name: link, the renames


class _Move(OpSpec):
    def describe(self, op: OpFields) -> str:
        return f"{op.kind} {op.path} -> {op.dst}"

    def check(self, op: OpFields, tree: Tree) -> str | None:
        bad = check_path(op.dst, root_ok=False)
        if bad:
            return bad
        kind = tree.kind_of(op.path)
        if kind is None:
            return f"{op.path} does not exist"
        if tree.kind_of(parent_of(op.dst)) is not NodeKind.DIR:
            return f"parent of {op.dst} is not a directory"
        return self.move_problem(op, tree, kind, tree.kind_of(op.dst))

    def move_problem(self, op: OpFields, tree: Tree, kind: NodeKind,
                     dst_kind: NodeKind | None) -> str | None:
        """Why ``op`` cannot give the ``kind`` at its path the name ``dst`` (now naming
        ``dst_kind``), or None."""
        return None

    def touched(self, op: OpFields) -> tuple[str, ...]:
        return (op.path, op.dst)


class Link(_Move):
    kind = OpKind.LINK

    def move_problem(self, op: OpFields, tree: Tree, kind: NodeKind,
                     dst_kind: NodeKind | None) -> str | None:
        if kind is not NodeKind.FILE:
            return f"{op.path} is not a regular file"
        return None if dst_kind is None else f"{op.dst} exists"

    def apply(self, op: OpFields, tree: Tree, data: bytes) -> None:
        node_id = tree.lookup(op.path)
        if node_id is not None:
            tree.attach(op.dst, node_id)


class Rename(_Move):
    kind = OpKind.RENAME

    def move_problem(self, op: OpFields, tree: Tree, kind: NodeKind,
                     dst_kind: NodeKind | None) -> str | None:
        if op.dst == op.path or op.dst.startswith(op.path + "/"):
            return f"cannot rename {op.path} onto itself or below itself"
        return self.replace_problem(op, tree, kind, dst_kind)

    def replace_problem(self, op: OpFields, tree: Tree, kind: NodeKind,
                        dst_kind: NodeKind | None) -> str | None:
        if dst_kind is None:
            return None
        if tree.lookup(op.dst) == tree.lookup(op.path):
            # rename(2) between two links of one inode does nothing; keep the model simple.
            return f"{op.path} and {op.dst} are the same inode"
        if (kind is NodeKind.DIR) != (dst_kind is NodeKind.DIR):
            return f"cannot rename a {kind} over a {dst_kind}"
        dst_node = tree.nodes[tree.lookup(op.dst) or 0]
        if dst_kind is NodeKind.DIR and dst_node.entries:
            return f"{op.dst} is a non-empty directory"
        return None

    def apply(self, op: OpFields, tree: Tree, data: bytes) -> None:
        node_id = tree.lookup(op.path)
        if node_id is None:
            return
        if tree.lookup(op.dst) is not None:
            tree.detach(op.dst)
        tree.detach(op.path)
        tree.attach(op.dst, node_id)

    def cause(self, op: OpFields, path: str, was: int | None) -> Cause:
        return Cause.RENAME_REPLACE if path == op.dst and was is not None else Cause.RENAME


class RenameNoreplace(Rename):
    kind = OpKind.RENAME_NOREPLACE

    def replace_problem(self, op: OpFields, tree: Tree, kind: NodeKind,
                        dst_kind: NodeKind | None) -> str | None:
        return None if dst_kind is None else f"{op.dst} exists (RENAME_NOREPLACE fails with EEXIST)"

    def cause(self, op: OpFields, path: str, was: int | None) -> Cause:
        return Cause.RENAME  # a rename that never replaces: the same promises as rename


class RenameExchange(Rename):
    kind = OpKind.RENAME_EXCHANGE
    capability = "rename-exchange"

    def describe(self, op: OpFields) -> str:
        return f"{op.kind} {op.path} <-> {op.dst}"

    def replace_problem(self, op: OpFields, tree: Tree, kind: NodeKind,
                        dst_kind: NodeKind | None) -> str | None:
        # renameat2(2): EINVAL for an ancestor of the other name, ENOENT if dst is absent.
        if dst_kind is None:
            return f"{op.dst} does not exist"
        if op.path.startswith(op.dst + "/"):
            return f"cannot exchange {op.path} with its ancestor {op.dst}"
        if tree.lookup(op.dst) == tree.lookup(op.path):
            return f"{op.path} and {op.dst} are the same inode"
        return None

    def apply(self, op: OpFields, tree: Tree, data: bytes) -> None:
        node_id = tree.lookup(op.path)
        if node_id is None:
            return
        dst_id = tree.lookup(op.dst)
        assert dst_id is not None
        tree.attach(op.path, dst_id)
        tree.attach(op.dst, node_id)

    def cause(self, op: OpFields, path: str, was: int | None) -> Cause:
        return Cause.RENAME_EXCHANGE  # both names stay bound; no data is flushed for it


class RenameWhiteout(Rename):
    kind = OpKind.RENAME_WHITEOUT
    capability = "rename-whiteout"

    def replace_problem(self, op: OpFields, tree: Tree, kind: NodeKind,
                        dst_kind: NodeKind | None) -> str | None:
        # The workloads move files and special files with it: a whiteout over a directory's
        # old name is left to overlayfs, which uses it.
        if kind is NodeKind.DIR:
            return f"{op.path} is a directory (rename_whiteout moves other files here)"
        return super().replace_problem(op, tree, kind, dst_kind)

    def apply(self, op: OpFields, tree: Tree, data: bytes) -> None:
        # renameat2(2): RENAME_WHITEOUT creates a whiteout object (a character device 0:0)
        # at the source in the same operation as the rename.
        super().apply(op, tree, data)
        tree.attach(op.path, tree.new(Node(NodeKind.WHITEOUT)))

    def cause(self, op: OpFields, path: str, was: int | None) -> Cause:
        if path == op.path:
            return Cause.RENAME_WHITEOUT
        return super().cause(op, path, was)


# -- an inode's attributes: chmod, chown, utimes, setflags


class _Attr(OpSpec):
    #: The kinds of object the op may name.
    subjects: ClassVar[tuple[NodeKind, ...]] = (NodeKind.FILE, NodeKind.DIR, NodeKind.FIFO)

    def check(self, op: OpFields, tree: Tree) -> str | None:
        if tree.kind_of(op.path) not in self.subjects:
            kinds = ", ".join(k.value for k in self.subjects)
            return f"{op.path or '.'} is not one of {kinds}"
        return self.value_problem(op)

    def value_problem(self, op: OpFields) -> str | None:
        return None


class Chmod(_Attr):
    kind = OpKind.CHMOD

    def describe(self, op: OpFields) -> str:
        return f"chmod {op.path} {op.mode:04o}"

    def value_problem(self, op: OpFields) -> str | None:
        return None if 0 <= op.mode <= 0o7777 else f"mode {op.mode:o} is not permission bits"


class Chown(_Attr):
    kind = OpKind.CHOWN

    def describe(self, op: OpFields) -> str:
        return f"chown {op.path} {op.uid}:{op.gid}"

    def value_problem(self, op: OpFields) -> str | None:
        if min(op.uid, op.gid) < -1 or (op.uid == -1 and op.gid == -1):
            return "chown needs a uid or a gid (-1 leaves one as it is)"
        return None


class Utimes(_Attr):
    kind = OpKind.UTIMES

    def describe(self, op: OpFields) -> str:
        def word(ns: int) -> str:
            return {UTIME_OMIT: "omit", UTIME_NOW: "now"}.get(ns, f"{ns // 10**9}.{ns % 10**9:09d}")
        return f"utimes {op.path} atime={word(op.atime_ns)} mtime={word(op.mtime_ns)}"

    def value_problem(self, op: OpFields) -> str | None:
        if min(op.atime_ns, op.mtime_ns) < UTIME_NOW:
            return "utimes takes nanoseconds, UTIME_NOW or UTIME_OMIT"
        if op.atime_ns == op.mtime_ns == UTIME_OMIT:
            return "utimes with both times omitted changes nothing"
        return None


class Setflags(_Attr):
    kind = OpKind.SETFLAGS
    capability = "setflags"
    subjects = (NodeKind.FILE,)

    def describe(self, op: OpFields) -> str:
        return f"setflags {op.path} {flag_words(op.flags)}"

    def value_problem(self, op: OpFields) -> str | None:
        if op.flags & ~MANAGED_FLAGS:
            return f"flags {op.flags:#x} are not among {MANAGED_FLAGS:#x}"
        return None

    def apply(self, op: OpFields, tree: Tree, data: bytes) -> None:
        node_id = tree.lookup(op.path)
        if node_id is not None:
            tree.nodes[node_id].flags = op.flags


# -- the filesystem or a directory: sync, syncfs, fsync of a directory


class Sync(OpSpec):
    kind = OpKind.SYNC
    on_root = True

    def describe(self, op: OpFields) -> str:
        return "sync"


class Syncfs(OpSpec):
    kind = OpKind.SYNCFS
    on_root = True

    def check(self, op: OpFields, tree: Tree) -> str | None:
        return None if tree.kind_of(op.path) is not None else f"{op.path} does not exist"


class FsyncDir(OpSpec):
    kind = OpKind.FSYNC_DIR
    on_root = True

    def check(self, op: OpFields, tree: Tree) -> str | None:
        if tree.kind_of(op.path) is not NodeKind.DIR:
            return f"{op.path or '.'} is not a directory"
        return None


#: Every capability an op may need.
CAPABILITIES = (frozenset(s.capability for s in SPECS.values() if s.capability)
                | frozenset(FALLOC_CAPABILITY.values()))
