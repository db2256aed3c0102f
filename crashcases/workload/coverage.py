"""Input coverage: which syscalls, flags and argument partitions a workload produces before
each durability call, counted in cells.

A *cell* is one partition of one argument of one syscall with its flag or mode (a *row*:
``pwrite``, ``fallocate:punch-hole``, ``rename_exchange``): ``pwrite offset=eof``,
``truncate to=grow-past-block``, ``setxattr size=large``; or the durability call that
comes after it, ``pwrite then=fdatasync``. The partitions follow the argument's meaning
to the kernel, as CM-IOCov partitions inputs: offsets and lengths relative to the file's
size and to a block (zero, inside a block, a block boundary, at the end, past it; a part
of a block, a block, blocks, an unaligned run of blocks), sizes that change the inode's
layout (empty, less than a block, which btrfs and f2fs may keep inline, blocks, 64 KiB
and more, and the op that moves a file from one of these to another), names long enough
that a directory leaves its inline form, xattr values that fit in the inode and those
that do not, every fallocate mode and renameat2 flag, what each attribute op sets.

An op counts only once a durability op follows it: its cells are those of the inputs the
filesystem had to make durable (``cells``, ``then`` cells by what the durability op
covers: the op's own file, the directory of a name it changed, or everything). A cell
needs the filesystem's capability for its row (``offered``): clone on ext4 is no cell.

Nothing here runs a syscall: coverage is a property of the generated ops and the model
of the tree they act on (crashcases.workload.model).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from crashcases.oracle.log import NodeKind
from crashcases.vocabulary import (
    DURABILITY_OPS,
    RANGE_SYNC_OPS,
    SYNC_ALL_OPS,
    OpKind,
)
from crashcases.workload.cells import (
    DIR_INLINE_BYTES,
    FAST_SYMLINK,
    LARGE,
    LONG_NAME,
    ROWS,
    SIZES,
    THEN,
    XATTR_MEDIUM,
    XATTR_SMALL,
    B,
    Cell,
    row_of,
)
from crashcases.workload.kinds import (
    FS_APPEND_FL,
    FS_IMMUTABLE_FL,
    FS_NOATIME_FL,
    FS_NODUMP_FL,
    FS_SYNC_FL,
    UTIME_NOW,
    UTIME_OMIT,
    FallocMode,
)
from crashcases.workload.model import FsModel
from crashcases.workload.ops import Op, Workload
from crashcases.workload.tree import parent_of

# ---------------------------------------------------------------------------
# Classifying one op


def offset_class(offset: int, size: int) -> str:
    if offset == 0:
        return "zero"
    if offset > size:
        return "past-eof"
    if offset == size:
        return "eof"
    return "boundary" if offset % B == 0 else "in-block"


def length_class(length: int) -> str:
    if length == 0:
        return "zero"
    if length < B:
        return "sub-block"
    if length == B:
        return "block"
    return "blocks" if length % B == 0 else "unaligned"


def end_class(end: int, size: int) -> str:
    return "inside" if end < size else "at-eof" if end == size else "extends"


def size_class(size: int) -> str:
    if size == 0:
        return "empty"
    if size < B:
        return "small"
    return "blocks" if size < LARGE else "large"


def change_class(before: int, after: int) -> str:
    a, b = SIZES.index(size_class(before)), SIZES.index(size_class(after))
    return "same-class" if a == b else "grows-class" if b > a else "shrinks-class"


def name_class(path: str) -> str:
    return "long" if len(path.rpartition("/")[2]) >= LONG_NAME else "short"


def dir_bytes(model: FsModel, path: str) -> int:
    node_id = model.lookup(path)
    if node_id is None:
        return 0
    return sum(len(name) + 8 for name in model.nodes[node_id].entries)


def dir_class(size: int) -> str:
    return "inline" if size < DIR_INLINE_BYTES else "block" if size < B else "blocks"


def xattr_class(length: int) -> str:
    if length == 0:
        return "empty"
    return "small" if length <= XATTR_SMALL else "medium" if length <= XATTR_MEDIUM else "large"


def _kind_word(kind: NodeKind | None) -> str:
    return {NodeKind.FILE: "file", NodeKind.DIR: "dir", NodeKind.SYMLINK: "symlink",
            NodeKind.FIFO: "fifo", NodeKind.WHITEOUT: "whiteout"}.get(kind, "none") \
        if kind is not None else "none"


def _data(op: Op, model: FsModel) -> dict[str, str]:
    """Cells of an op on one file's data at offset/length (before ``model``)."""
    size = model.size_of(op.path)
    out = {"offset": offset_class(op.offset, size), "length": length_class(op.length)}
    if op.length:
        out["end"] = end_class(op.offset + op.length, size)
    return out


def _resized(out: dict[str, str], before: int, after: int) -> dict[str, str]:
    out["size-after"] = size_class(after)
    out["change"] = change_class(before, after)
    return out


def size_after(op: Op, model: FsModel) -> int:
    """The size of the file whose data ``op`` changes (``dst`` for copies), after ``op``
    on the tree ``model``."""
    K, F = OpKind, FallocMode
    size = model.size_of(op.path)
    end = op.offset + op.length
    if op.kind in (K.COPY_FILE_RANGE, K.CLONE_RANGE, K.CLONE):
        dst = model.size_of(op.dst)
        if op.kind is K.CLONE:
            return size if size else dst
        count = (size - op.offset if op.length == 0 and op.kind is K.CLONE_RANGE
                 else max(0, min(op.length, size - op.offset)))
        return max(dst, op.dst_offset + count) if count > 0 else dst
    if op.kind is K.WRITE:
        return op.length
    if op.kind is K.APPEND:
        return size + op.length
    if op.kind is K.TRUNCATE:
        return op.size
    if op.kind in (K.PWRITE, K.WRITE_OSYNC, K.WRITE_ODSYNC, K.DIRECT_WRITE,
                   K.DIRECT_WRITE_OSYNC, K.DIRECT_WRITE_ODSYNC):
        return max(size, end) if op.length else size
    if op.kind is K.FALLOCATE:
        if op.falloc in (F.ALLOCATE, F.ZERO_RANGE):
            return max(size, end)
        if op.falloc is F.COLLAPSE_RANGE:
            return size - op.length
        if op.falloc is F.INSERT_RANGE:
            return size + op.length
    return size


def classify(op: Op, model: FsModel) -> dict[str, str]:
    """The argument cells of ``op`` on the tree ``model`` (before the op), axis -> value."""
    K = OpKind
    kind = op.kind
    size = model.size_of(op.path)
    new = size_after(op, model)
    if kind in (K.PWRITE, K.WRITE_OSYNC, K.WRITE_ODSYNC, K.DIRECT_WRITE,
                K.DIRECT_WRITE_OSYNC, K.DIRECT_WRITE_ODSYNC):
        return _resized(_data(op, model), size, new)
    if kind is K.MMAP_WRITE or kind is K.MSYNC:
        out = _data(op, model)
        if kind is K.MMAP_WRITE:
            out["size-after"] = size_class(new)
        return out
    if kind is K.SYNC_FILE_RANGE:
        return {"offset": offset_class(op.offset, size), "length": length_class(op.length)}
    if kind is K.WRITE:
        return {"length": length_class(op.length), "replaces": size_class(size),
                "change": change_class(size, new)}
    if kind is K.APPEND:
        eof = "empty" if size == 0 else "aligned" if size % B == 0 else "unaligned"
        return _resized({"length": length_class(op.length), "eof": eof}, size, new)
    if kind is K.TRUNCATE:
        return {"to": _truncate_class(size, op.size), "size-after": size_class(op.size),
                "change": change_class(size, op.size)}
    if kind is K.FALLOCATE:
        out = _data(op, model)
        out["change"] = change_class(size, new)
        return out
    if kind is K.COPY_FILE_RANGE:
        dst_size = model.size_of(op.dst)
        out = {"src-offset": offset_class(op.offset, size), "length": length_class(op.length),
               "dst-offset": offset_class(op.dst_offset, dst_size),
               "files": "one" if model.lookup(op.path) == model.lookup(op.dst) else "two"}
        count = max(0, min(op.length, size - op.offset))
        if count:
            out["dst-end"] = end_class(op.dst_offset + count, dst_size)
        return out
    if kind is K.CLONE:
        dst_size = model.size_of(op.dst)
        source = "empty" if size == 0 else "aligned" if size % B == 0 else "unaligned-eof"
        dest = "empty" if dst_size == 0 else "shorter" if dst_size <= size else "longer"
        return {"source": source, "dest": dest}
    if kind in (K.CLONE_RANGE, K.DEDUPE_RANGE):
        dst_size = model.size_of(op.dst)
        count = (size - op.offset) if op.length == 0 else min(op.length, size - op.offset)
        if op.length == 0:
            length = "to-eof"
        elif op.offset + op.length == size and op.length % B:
            length = "unaligned-eof"
        else:
            length = length_class(op.length)
        out = {"src-offset": offset_class(op.offset, size), "length": length,
               "dst-offset": offset_class(op.dst_offset, dst_size),
               "files": "one" if model.lookup(op.path) == model.lookup(op.dst) else "two"}
        if kind is K.CLONE_RANGE:
            out["dst-end"] = end_class(op.dst_offset + count, dst_size)
        else:
            src, dst = model.lookup(op.path), model.lookup(op.dst)
            same = (src is not None and dst is not None and
                    model.nodes[src].data[op.offset:op.offset + op.length]
                    == model.nodes[dst].data[op.dst_offset:op.dst_offset + op.length])
            out["content"] = "same" if same else "differs"
        return out
    return _classify_names_and_attrs(op, model)


def _truncate_class(size: int, new: int) -> str:
    if new == 0:
        return "zero"
    if new == size:
        return "same"
    if new < size:
        return "shrink-to-boundary" if new % B == 0 else "shrink-in-block"
    if new <= -(-size // B) * B:
        return "grow-in-block"
    return "grow-to-boundary" if new % B == 0 else "grow-past-block"


def _where(op: Op) -> str:
    return "same-dir" if parent_of(op.path) == parent_of(op.dst) else "other-dir"


def _classify_names_and_attrs(op: Op, model: FsModel) -> dict[str, str]:
    K = OpKind
    kind = op.kind
    here = model.kind_of(op.path)
    parent = "root" if "/" not in op.path.strip("/") else "subdir"
    if kind is K.CREAT:
        target = ("new" if here is None else
                  "existing-empty" if model.size_of(op.path) == 0 else "existing-data")
        grown = 0 if here is not None else len(op.path.rpartition("/")[2]) + 8
        return {"target": target, "name": name_class(op.path), "parent": parent,
                "dir-size": dir_class(dir_bytes(model, parent_of(op.path)) + grown)}
    if kind is K.MKDIR:
        grown = len(op.path.rpartition("/")[2]) + 8
        return {"name": name_class(op.path), "parent": parent,
                "dir-size": dir_class(dir_bytes(model, parent_of(op.path)) + grown)}
    if kind is K.MKNOD:
        return {"name": name_class(op.path), "parent": parent}
    if kind is K.SYMLINK:
        base = parent_of(op.path)
        resolved = model.kind_of(f"{base}/{op.target}" if base else op.target)
        return {"target": "inline" if len(op.target) < FAST_SYMLINK else "block",
                "resolves": "dangling" if resolved is None else "yes",
                "name": name_class(op.path)}
    if kind is K.LINK:
        links = _links(model, model.lookup(op.path))
        grown = len(op.dst.rpartition("/")[2]) + 8
        return {"where": _where(op), "links-after": "two" if links + 1 == 2 else "more",
                "name": name_class(op.dst),
                "dir-size": dir_class(dir_bytes(model, parent_of(op.dst)) + grown)}
    if kind is K.UNLINK:
        links = _links(model, model.lookup(op.path))
        what = _kind_word(here)
        if here is NodeKind.FILE and links > 1:
            what = "hard-link"
        out = {"what": what,
               "dir-size": dir_class(dir_bytes(model, parent_of(op.path))
                                     - len(op.path.rpartition("/")[2]) - 8)}
        if here is NodeKind.FILE:
            out["data"] = size_class(model.size_of(op.path))
        return out
    if kind is K.RMDIR:
        return {"parent": parent, "name": name_class(op.path)}
    if kind in (K.RENAME, K.RENAME_NOREPLACE, K.RENAME_WHITEOUT):
        there = model.kind_of(op.dst)
        out = {"where": _where(op), "what": _kind_word(here)}
        if kind is not K.RENAME_NOREPLACE:
            out["over"] = ("new-name" if there is None else
                           "empty-dir" if there is NodeKind.DIR else "file")
        if kind is K.RENAME:
            grown = 0 if there is not None else len(op.dst.rpartition("/")[2]) + 8
            out["name"] = name_class(op.dst)
            out["dir-size"] = dir_class(dir_bytes(model, parent_of(op.dst)) + grown)
        return out
    if kind is K.RENAME_EXCHANGE:
        pair = sorted((_kind_word(here), _kind_word(model.kind_of(op.dst))))
        words = {("file", "file"): "file-file", ("dir", "dir"): "dir-dir",
                 ("dir", "file"): "file-dir"}
        return {"where": _where(op), "pair": words.get((pair[0], pair[1]), "special")}
    if kind is K.CHMOD:
        return {"on": _kind_word(here), "mode": _mode_class(op.mode)}
    if kind is K.CHOWN:
        change = "both" if op.uid != -1 and op.gid != -1 else "uid" if op.uid != -1 else "gid"
        return {"on": _kind_word(here), "change": change}
    if kind is K.UTIMES:
        if op.mtime_ns == UTIME_OMIT:
            how = "atime-only"
        elif op.mtime_ns == UTIME_NOW:
            how = "now"
        else:
            how = "seconds" if op.mtime_ns % 10**9 == 0 else "nanoseconds"
        return {"on": _kind_word(here), "how": how}
    if kind is K.SETFLAGS:
        return {"flag": _flag_class(op.flags)}
    if kind in (K.SETXATTR, K.REMOVEXATTR):
        node_id = model.lookup(op.path)
        xattrs = model.nodes[node_id].xattrs if node_id is not None else {}
        if kind is K.SETXATTR:
            return {"on": _kind_word(here), "size": xattr_class(op.length),
                    "exists": "replace" if op.xattr in xattrs else "new"}
        return {"on": _kind_word(here), "size": xattr_class(len(xattrs.get(op.xattr, b""))),
                "left": "others" if len(xattrs) > 1 else "none"}
    return {}


def _mode_class(mode: int) -> str:
    if mode & 0o7000:
        return "special"
    if not mode & 0o222:
        return "read-only"
    return "private" if not mode & 0o077 else "shared"


def _flag_class(flags: int) -> str:
    for bit, word in ((FS_IMMUTABLE_FL, "immutable"), (FS_APPEND_FL, "append"),
                      (FS_SYNC_FL, "sync"), (FS_NOATIME_FL, "noatime"),
                      (FS_NODUMP_FL, "nodump")):
        if flags & bit:
            return word
    return "clear"


# ---------------------------------------------------------------------------
# A workload's cells


@dataclass(slots=True)
class _Pending:
    """An op not yet followed by a durability op: its cells, and what a durability op must
    name to cover it."""

    row: str
    cells: dict[str, str]
    subject: int | None  # the inode it changed
    parents: frozenset[int]  # the directories whose entries it changed


@dataclass(slots=True)
class _Dirty:
    """What changed in each inode since a durability op last covered it."""

    level: dict[int, str] = field(default_factory=dict)

    def touch(self, ino: int | None, level: str) -> None:
        if ino is None:
            return
        if self.level.get(ino) != "data" and self.level.get(ino) != "entries":
            self.level[ino] = level

    def of(self, ino: int | None) -> str:
        return self.level.get(ino, "clean") if ino is not None else "clean"


def _subject(op: Op, model: FsModel, before: int | None) -> int | None:
    K = OpKind
    moved = op.kind in (K.RENAME, K.RENAME_NOREPLACE, K.RENAME_EXCHANGE, K.RENAME_WHITEOUT,
                        K.LINK, K.COPY_FILE_RANGE, K.CLONE, K.CLONE_RANGE, K.DEDUPE_RANGE)
    node = model.lookup(op.dst if moved else op.path)
    return node if node is not None else before


def _then(op: Op, node: int | None, pending: _Pending) -> str | None:
    """The ``then`` value of durability op ``op`` (of inode ``node``) for ``pending``, or
    None when it covers nothing the pending op changed."""
    if op.kind in SYNC_ALL_OPS:
        return "sync"
    if op.kind is OpKind.FSYNC_DIR:
        if node is not None and node == pending.subject:
            return "fsync_dir(self)"
        return "fsync_dir(parent)" if node in pending.parents else None
    if node is None or node != pending.subject:
        return None
    return "range-sync" if op.kind in RANGE_SYNC_OPS else op.kind.value


def fill(index: int, length: int) -> bytes:
    """Bytes op ``index`` writes in the model: different from any other op's, as the
    recording's random data is, so that two ranges are equal only where one was copied
    from the other (dedupe's ``content`` cells)."""
    return ((index + 1).to_bytes(4, "little") * (length // 4 + 1))[:length]


class Tracker:
    """Follows a workload op by op: the tree, what each inode has pending, the ops not
    yet followed by a durability op, and the cells each durability op makes count."""

    def __init__(self) -> None:
        self.model = FsModel()
        self.dirty = _Dirty()
        self.pending: list[_Pending] = []
        self.index = 0

    def args(self, op: Op) -> dict[str, str]:
        """The argument cells of ``op`` on the tree now (the op is not applied)."""
        K = OpKind
        model = self.model
        node = model.lookup(op.path)
        pre: dict[str, str] = {}
        if op.kind is K.FSYNC:
            pre = {"dirty": self.dirty.of(node), "links": "one" if _links(model, node) <= 1
                   else "more"}
        elif op.kind is K.FDATASYNC:
            pre = {"dirty": self.dirty.of(node)}
        elif op.kind is K.FSYNC_DIR:
            pre = {"of": "root" if op.path == "" else "subdir", "dirty": self.dirty.of(node)}
        elif op.kind in SYNC_ALL_OPS:
            pre = {"pending": "some" if self.pending or self.dirty.level else "none"}
        row = row_of(op)
        declared = ROWS[row].axis_names() if row in ROWS else frozenset()
        return {axis: value for axis, value in (pre or classify(op, model)).items()
                if axis in declared}

    def then_cells(self, op: Op) -> list[Cell]:
        """The ``then`` cells durability op ``op`` would give the pending ops now."""
        node = self.model.lookup(op.path)
        out = []
        for p in self.pending:
            then = _then(op, node, p)
            if then is not None:
                out.append(Cell(p.row, THEN, then))
        return out

    def step(self, op: Op) -> list[Cell]:
        """Apply ``op``; the cells that count at it (none but at a durability op). An op
        the tree refuses (skipped where it ran, after an unsupported one) is no input."""
        index, self.index = self.index, self.index + 1
        model = self.model
        if model.check(op) is not None:
            return []
        before = model.lookup(op.path)
        parents = frozenset(p for p in (model.lookup(parent_of(op.path)),
                                        model.lookup(parent_of(op.dst)) if op.dst else None)
                            if p is not None)
        row = row_of(op)
        args = self.args(op)
        model.apply(op, fill(index, op.length))
        subject = _subject(op, model, before)
        _mark_dirty(op, model, self.dirty, subject, parents)
        if op.kind not in DURABILITY_OPS:
            self.pending.append(_Pending(row, args, subject, parents))
            return []
        node = model.lookup(op.path)
        out = []
        for p in self.pending:
            out += [Cell(p.row, axis, value) for axis, value in p.cells.items()]
            then = _then(op, node, p)
            if then is not None:
                out.append(Cell(p.row, THEN, then))
        out += [Cell(row, axis, value) for axis, value in args.items()]
        self.pending.clear()
        _clean(op, node, model, self.dirty)
        return out


def _links(model: FsModel, node: int | None) -> int:
    return sum(1 for n in model.nodes.values() for c in n.entries.values() if c == node)


def workload_cells(ops: Sequence[Op]) -> Iterator[tuple[int, Cell]]:
    """(index of the durability op that makes it count, cell) for each cell ``ops``
    produce, in order; an op no durability op follows produces none."""
    tracker = Tracker()
    for index, op in enumerate(ops):
        for cell in tracker.step(op):
            yield index, cell


def _mark_dirty(op: Op, model: FsModel, dirty: _Dirty, subject: int | None,
                parents: frozenset[int]) -> None:
    K = OpKind
    if op.kind in DURABILITY_OPS and op.kind not in (K.WRITE_OSYNC, K.WRITE_ODSYNC,
                                                     K.DIRECT_WRITE_OSYNC,
                                                     K.DIRECT_WRITE_ODSYNC):
        return
    if op.kind is K.SYNC_FILE_RANGE:
        return
    for p in parents:
        if op.kind in (K.CREAT, K.MKDIR, K.MKNOD, K.SYMLINK, K.LINK, K.UNLINK, K.RMDIR,
                       K.RENAME, K.RENAME_NOREPLACE, K.RENAME_EXCHANGE, K.RENAME_WHITEOUT):
            dirty.level[p] = "entries"
    level = "data" if op.kind in (
        K.PWRITE, K.WRITE, K.APPEND, K.TRUNCATE, K.FALLOCATE, K.MMAP_WRITE, K.DIRECT_WRITE,
        K.COPY_FILE_RANGE, K.CLONE, K.CLONE_RANGE) else "metadata"
    dirty.touch(subject, level)


def _clean(op: Op, node: int | None, model: FsModel, dirty: _Dirty) -> None:
    if op.kind in SYNC_ALL_OPS:
        dirty.level.clear()
    elif node is not None:
        dirty.level.pop(node, None)


# ---------------------------------------------------------------------------
# Tallies


@dataclass(slots=True)
class Tally:
    """How often each cell came up, and in which workloads."""

    counts: Counter[Cell] = field(default_factory=Counter)
    by_workload: dict[str, Counter[Cell]] = field(default_factory=dict)

    def add(self, name: str, cells: Iterable[Cell]) -> None:
        mine = self.by_workload.setdefault(name, Counter())
        for cell in cells:
            self.counts[cell] += 1
            mine[cell] += 1

    def covered(self, within: frozenset[Cell]) -> frozenset[Cell]:
        return frozenset(c for c in self.counts if c in within)


def tally(named: Iterable[tuple[str, Workload, int | None]]) -> Tally:
    """The cells of each (name, workload, last durability op index counted or None: all)."""
    out = Tally()
    for name, workload, until in named:
        out.add(name, (cell for index, cell in workload_cells(workload.ops)
                       if until is None or index <= until))
    return out


def by_row(cells: Iterable[Cell]) -> dict[str, list[Cell]]:
    out: dict[str, list[Cell]] = {}
    for cell in sorted(cells):
        out.setdefault(cell.row, []).append(cell)
    return out


def group_of(row: str) -> str:
    return ROWS[row].group if row in ROWS else "data"
