"""The cells of input coverage: every syscall with its flag or mode (a *row*), the
partitions of its arguments and the durability calls that may follow it, and which of
them a filesystem offers (crashcases.workload.coverage counts a workload's cells)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from crashcases.vocabulary import OpKind
from crashcases.workload.kinds import FallocMode
from crashcases.workload.ops import Op
from crashcases.workload.selection import OpSelection

B = 4096  # a page, and a block of xfs, btrfs and f2fs (four of ext4's on a small disk)
LARGE = 16 * B  # 64 KiB: more than a few extents' worth, an extent tree's worth of blocks
#: Bytes of a directory's entries (a name and 8 bytes each, as ext4 and xfs count them)
#: below which it fits in the inode (xfs short form, f2fs inline dentries, btrfs has no
#: such form), and at which it needs more than one block.
DIR_INLINE_BYTES = 256
LONG_NAME = 200  # a name this long or longer is long (NAME_MAX is 255)
FAST_SYMLINK = 60  # ext4 keeps a target shorter than this in the inode (i_block)
XATTR_SMALL, XATTR_MEDIUM = 64, 256  # in the inode; out of it on ext4 and f2fs; larger
THEN = "then"  # the axis of the durability op that follows

#: What the durability op that follows a row's op promises of it, as ``then`` values, by
#: the groups of crashcases.vocabulary: the file with its metadata (fsync), its data
#: (fdatasync), a byte range of it (msync, O_SYNC and O_DSYNC writes, buffered or direct:
#: RANGE_SYNC_OPS), the directory that holds a name the op changed, the directory the op
#: changed itself, everything (sync, syncfs). Each durability call has cells of its own
#: too, by its arguments (its row).
FILE_THEN = ("fsync", "fdatasync", "range-sync", "fsync_dir(parent)", "sync")
DIR_THEN = ("fsync_dir(self)", "fsync_dir(parent)", "sync")
ENTRY_THEN = ("fsync_dir(parent)", "sync")


class Cell(NamedTuple):
    """One input partition (a tuple: the generator hashes millions of them)."""

    row: str
    axis: str
    value: str

    def words(self) -> str:
        return f"{self.row} {self.axis}={self.value}"


@dataclass(frozen=True, slots=True)
class Row:
    """One syscall with its flag or mode, the partitions of its arguments, and the
    durability ops that may follow it."""

    name: str
    group: str  # data, names, attributes, durability
    sample: Op  # an op of the row: what it needs of the filesystem
    axes: tuple[tuple[str, tuple[str, ...]], ...]
    then: tuple[str, ...] = ()

    def axis_names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.axes)

    def cells(self) -> Iterator[Cell]:
        for axis, values in self.axes:
            for value in values:
                yield Cell(self.name, axis, value)
        for value in self.then:
            yield Cell(self.name, THEN, value)


OFFSETS = ("zero", "in-block", "boundary", "eof", "past-eof")
LENGTHS = ("zero", "sub-block", "block", "blocks", "unaligned")
ENDS = ("inside", "at-eof", "extends")
SIZES = ("empty", "small", "blocks", "large")
CHANGES = ("same-class", "grows-class", "shrinks-class")


def _ax(**axes: Sequence[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple((name.replace("_", "-"), tuple(values)) for name, values in axes.items())


def _rows() -> list[Row]:
    K, F = OpKind, FallocMode
    grows = CHANGES[:2]
    data = [
        Row("pwrite", "data", Op(K.PWRITE), _ax(
            offset=OFFSETS, length=LENGTHS, end=ENDS, size_after=SIZES, change=grows),
            FILE_THEN),
        Row("write", "data", Op(K.WRITE), _ax(
            length=LENGTHS, replaces=SIZES, change=CHANGES), FILE_THEN),
        Row("append", "data", Op(K.APPEND), _ax(
            length=LENGTHS, eof=("empty", "aligned", "unaligned"), size_after=SIZES[1:],
            change=grows), FILE_THEN),
        Row("direct_write", "data", Op(K.DIRECT_WRITE), _ax(
            offset=("zero", "boundary", "eof", "past-eof"), length=("zero", "block", "blocks"),
            end=ENDS, size_after=("empty", "blocks", "large"), change=grows), FILE_THEN),
        Row("mmap_write", "data", Op(K.MMAP_WRITE), _ax(
            offset=OFFSETS[:3], length=LENGTHS[1:], end=ENDS[:2], size_after=SIZES[1:]),
            FILE_THEN),
        Row("truncate", "data", Op(K.TRUNCATE), _ax(
            to=("zero", "same", "shrink-in-block", "shrink-to-boundary", "grow-in-block",
                "grow-to-boundary", "grow-past-block"),
            size_after=SIZES, change=CHANGES), FILE_THEN),
        Row("sync_file_range", "data", Op(K.SYNC_FILE_RANGE), _ax(
            offset=OFFSETS, length=LENGTHS), FILE_THEN),
        Row("fallocate:allocate", "data", Op(K.FALLOCATE, falloc=F.ALLOCATE), _ax(
            offset=OFFSETS, length=LENGTHS[1:], end=ENDS, change=grows), FILE_THEN),
        Row("fallocate:keep-size", "data", Op(K.FALLOCATE, falloc=F.KEEP_SIZE), _ax(
            offset=OFFSETS, length=LENGTHS[1:], end=ENDS), FILE_THEN),
        Row("fallocate:punch-hole", "data", Op(K.FALLOCATE, falloc=F.PUNCH_HOLE), _ax(
            offset=OFFSETS, length=LENGTHS[1:], end=ENDS), FILE_THEN),
        Row("fallocate:zero-range", "data", Op(K.FALLOCATE, falloc=F.ZERO_RANGE), _ax(
            offset=OFFSETS, length=LENGTHS[1:], end=ENDS, change=grows), FILE_THEN),
        Row("fallocate:zero-range-keep-size", "data",
            Op(K.FALLOCATE, falloc=F.ZERO_RANGE_KEEP_SIZE), _ax(
                offset=OFFSETS, length=LENGTHS[1:], end=ENDS), FILE_THEN),
        Row("fallocate:collapse-range", "data", Op(K.FALLOCATE, falloc=F.COLLAPSE_RANGE), _ax(
            offset=("zero", "boundary"), length=("block", "blocks"), end=("inside",),
            change=("same-class", "shrinks-class")), FILE_THEN),
        Row("fallocate:insert-range", "data", Op(K.FALLOCATE, falloc=F.INSERT_RANGE), _ax(
            offset=("zero", "boundary"), length=("block", "blocks"), end=ENDS, change=grows),
            FILE_THEN),
        Row("fallocate:unshare-range", "data", Op(K.FALLOCATE, falloc=F.UNSHARE_RANGE), _ax(
            offset=OFFSETS[:3], length=LENGTHS[1:], end=ENDS[:2]), FILE_THEN),
        Row("copy_file_range", "data", Op(K.COPY_FILE_RANGE), _ax(
            src_offset=OFFSETS, length=LENGTHS, dst_offset=OFFSETS, dst_end=ENDS,
            files=("two", "one")), FILE_THEN),
        Row("clone", "data", Op(K.CLONE), _ax(
            source=("empty", "unaligned-eof", "aligned"), dest=("empty", "shorter", "longer")),
            FILE_THEN),
        Row("clone_range", "data", Op(K.CLONE_RANGE), _ax(
            src_offset=("zero", "boundary"), length=("to-eof", "block", "blocks",
                                                     "unaligned-eof"),
            dst_offset=("zero", "boundary", "eof"), dst_end=ENDS, files=("two", "one")),
            FILE_THEN),
        Row("dedupe_range", "data", Op(K.DEDUPE_RANGE), _ax(
            src_offset=("zero", "boundary"), length=("block", "blocks", "unaligned-eof"),
            dst_offset=("zero", "boundary"), content=("same", "differs"),
            files=("two", "one")), FILE_THEN),
    ]
    short_long = ("short", "long")
    where = ("same-dir", "other-dir")
    dirs = ("inline", "block", "blocks")
    names = [
        Row("creat", "names", Op(K.CREAT), _ax(
            target=("new", "existing-empty", "existing-data"), name=short_long,
            parent=("root", "subdir"), dir_size=dirs), FILE_THEN),
        Row("mkdir", "names", Op(K.MKDIR), _ax(
            name=short_long, parent=("root", "subdir"), dir_size=dirs), DIR_THEN),
        Row("mknod", "names", Op(K.MKNOD), _ax(name=short_long, parent=("root", "subdir")),
            ENTRY_THEN),
        Row("symlink", "names", Op(K.SYMLINK), _ax(
            target=("inline", "block"), resolves=("yes", "dangling"), name=short_long),
            ENTRY_THEN),
        Row("link", "names", Op(K.LINK), _ax(
            where=where, links_after=("two", "more"), name=short_long, dir_size=dirs),
            FILE_THEN),
        Row("unlink", "names", Op(K.UNLINK), _ax(
            what=("file", "hard-link", "symlink", "fifo", "whiteout"), data=SIZES,
            dir_size=dirs), ("fsync", *ENTRY_THEN)),  # fsync: of another name of the file
        Row("rmdir", "names", Op(K.RMDIR), _ax(parent=("root", "subdir"), name=short_long),
            ENTRY_THEN),
        Row("rename", "names", Op(K.RENAME), _ax(
            where=where, what=("file", "dir", "symlink", "fifo"),
            over=("new-name", "file", "empty-dir"), name=short_long, dir_size=dirs),
            (*FILE_THEN, "fsync_dir(self)")),
        Row("rename_noreplace", "names", Op(K.RENAME_NOREPLACE), _ax(
            where=where, what=("file", "dir", "symlink", "fifo")),
            (*FILE_THEN, "fsync_dir(self)")),
        Row("rename_exchange", "names", Op(K.RENAME_EXCHANGE), _ax(
            where=where, pair=("file-file", "dir-dir", "file-dir", "special")),
            (*FILE_THEN, "fsync_dir(self)")),
        Row("rename_whiteout", "names", Op(K.RENAME_WHITEOUT), _ax(
            where=where, what=("file", "symlink", "fifo"), over=("new-name", "file")),
            FILE_THEN),
    ]
    on = ("file", "dir")
    attr_then = (*FILE_THEN, "fsync_dir(self)")
    attrs = [
        Row("chmod", "attributes", Op(K.CHMOD), _ax(
            on=(*on, "fifo"), mode=("read-only", "private", "shared", "special")), attr_then),
        Row("chown", "attributes", Op(K.CHOWN), _ax(
            on=(*on, "fifo"), change=("uid", "gid", "both")), attr_then),
        Row("utimes", "attributes", Op(K.UTIMES), _ax(
            on=on, how=("seconds", "nanoseconds", "now", "atime-only")), attr_then),
        Row("setflags", "attributes", Op(K.SETFLAGS), _ax(
            flag=("append", "immutable", "sync", "noatime", "nodump", "clear")), FILE_THEN),
        Row("setxattr", "attributes", Op(K.SETXATTR), _ax(
            on=on, size=("empty", "small", "medium", "large"), exists=("new", "replace")),
            attr_then),
        Row("removexattr", "attributes", Op(K.REMOVEXATTR), _ax(
            on=on, size=("empty", "small", "medium", "large"), left=("none", "others")),
            attr_then),
    ]
    dirty = ("data", "metadata", "clean")
    durability = [
        Row("fsync", "durability", Op(K.FSYNC), _ax(dirty=dirty, links=("one", "more"))),
        Row("fdatasync", "durability", Op(K.FDATASYNC), _ax(dirty=dirty)),
        Row("fsync_dir", "durability", Op(K.FSYNC_DIR), _ax(
            of=("root", "subdir"), dirty=("entries", "metadata", "clean"))),
        Row("sync", "durability", Op(K.SYNC), _ax(pending=("some", "none"))),
        Row("syncfs", "durability", Op(K.SYNCFS), _ax(pending=("some", "none"))),
        Row("msync", "durability", Op(K.MSYNC), _ax(
            offset=OFFSETS[:3], length=LENGTHS[1:], end=ENDS[:2])),
        Row("write_osync", "durability", Op(K.WRITE_OSYNC), _ax(
            offset=OFFSETS, length=LENGTHS[1:], end=ENDS, size_after=SIZES[1:], change=grows)),
        Row("write_odsync", "durability", Op(K.WRITE_ODSYNC), _ax(
            offset=OFFSETS, length=LENGTHS[1:], end=ENDS, size_after=SIZES[1:], change=grows)),
        Row("direct_write_osync", "durability", Op(K.DIRECT_WRITE_OSYNC), _ax(
            offset=("zero", "boundary", "eof", "past-eof"), length=("block", "blocks"),
            end=ENDS, size_after=SIZES[2:], change=grows)),
        Row("direct_write_odsync", "durability", Op(K.DIRECT_WRITE_ODSYNC), _ax(
            offset=("zero", "boundary", "eof", "past-eof"), length=("block", "blocks"),
            end=ENDS, size_after=SIZES[2:], change=grows)),
    ]
    return [*data, *names, *attrs, *durability]


ROWS: dict[str, Row] = {row.name: row for row in _rows()}
GROUPS = ("data", "names", "attributes", "durability")


def row_of(op: Op) -> str:
    return f"fallocate:{op.falloc}" if op.kind is OpKind.FALLOCATE else op.kind.value


def offered(capabilities: Iterable[str] | None) -> frozenset[Cell]:
    """Every cell a filesystem with ``capabilities`` offers (None: every cell)."""
    selection = OpSelection(None if capabilities is None else frozenset(capabilities))
    if capabilities is None:
        return frozenset(c for row in ROWS.values() for c in row.cells())
    return frozenset(c for row in ROWS.values() if selection.capable(row.sample)
                     for c in row.cells())
