"""The in-memory model of a tree: what it should look like after each op, no crash involved.

Generators ask it whether an op applies to the tree it meets (``FsModel.check``);
execution keeps it in step with the real tree and records what changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from crashcases.oracle.log import NodeKind
from crashcases.workload.ops import (
    _DST_DATA_OPS,
    _FILE_OPS,
    _RENAME_OPS,
    _WRITE_AT_OPS,
    ALIGN_BYTES,
    FallocMode,
    Op,
    OpKind,
    _check_path,
    parent_of,
)

# ---------------------------------------------------------------------------
# The model


@dataclass(slots=True)
class _Node:
    kind: NodeKind
    data: bytearray = field(default_factory=bytearray)
    entries: dict[str, int] = field(default_factory=dict)
    target: str = ""
    xattrs: dict[str, bytes] = field(default_factory=dict)


class FsModel:
    """What the tree under the root should look like after each op (no crash involved)."""

    ROOT = 0

    def __init__(self) -> None:
        self.nodes: dict[int, _Node] = {self.ROOT: _Node(NodeKind.DIR)}
        self._next_id = 1

    def lookup(self, path: str) -> int | None:
        node_id = self.ROOT
        if path == "":
            return node_id
        for name in path.split("/"):
            node = self.nodes[node_id]
            if node.kind is not NodeKind.DIR or name not in node.entries:
                return None
            node_id = node.entries[name]
        return node_id

    def kind_of(self, path: str) -> NodeKind | None:
        node_id = self.lookup(path)
        return None if node_id is None else self.nodes[node_id].kind

    def bindings(self, prefix: str) -> dict[str, int]:
        """Path -> node id for ``prefix`` and everything below it (empty if it is absent)."""
        out: dict[str, int] = {}
        node_id = self.lookup(prefix)
        if node_id is None:
            return out
        stack = [(prefix, node_id)]
        while stack:
            path, nid = stack.pop()
            out[path] = nid
            node = self.nodes[nid]
            for name, child in node.entries.items():
                stack.append((f"{path}/{name}" if path else name, child))
        return out

    def check(self, op: Op) -> str | None:
        """Why ``op`` cannot be applied now, or None if it can."""
        k = op.kind
        bad = _check_path(op.path, root_ok=k in (OpKind.SYNC, OpKind.FSYNC_DIR, OpKind.SYNCFS))
        if bad:
            return bad
        if min(op.offset, op.length, op.size, op.dst_offset) < 0:
            return "offset, length, size and dst_offset must not be negative"
        kind = self.kind_of(op.path)
        parent_kind = self.kind_of(parent_of(op.path)) if op.path else NodeKind.DIR
        if k is OpKind.SYNC:
            return None
        if k is OpKind.SYNCFS:
            return None if kind is not None else f"{op.path} does not exist"
        if k is OpKind.FSYNC_DIR:
            return None if kind is NodeKind.DIR else f"{op.path or '.'} is not a directory"
        if k in (OpKind.CREAT, OpKind.MKDIR, OpKind.SYMLINK):
            if parent_kind is not NodeKind.DIR:
                return f"parent of {op.path} is not a directory"
            if k is OpKind.CREAT:
                return None if kind in (None, NodeKind.FILE) else f"{op.path} exists as {kind}"
            if k is OpKind.SYMLINK and not op.target:
                return "symlink needs a target"
            return None if kind is None else f"{op.path} exists"
        if k in _FILE_OPS:
            if kind is not NodeKind.FILE:
                return f"{op.path} is not a regular file"
            return self._range_problem(op)
        if k in _DST_DATA_OPS:
            bad = _check_path(op.dst, root_ok=False)
            if bad:
                return bad
            if kind is not NodeKind.FILE:
                return f"{op.path} is not a regular file"
            if self.kind_of(op.dst) is not NodeKind.FILE:
                return f"{op.dst} is not a regular file"
            src, dst = self.lookup(op.path), self.lookup(op.dst)
            assert src is not None and dst is not None
            return _copy_problem(
                op, len(self.nodes[src].data), len(self.nodes[dst].data), same=src == dst
            )
        if k in (OpKind.SETXATTR, OpKind.REMOVEXATTR):
            if kind not in (NodeKind.FILE, NodeKind.DIR) or not op.path:
                return f"{op.path} is not a file or directory below the root"
            if not op.xattr.startswith("user."):
                return f"xattr {op.xattr!r} is not in the user. namespace"
            node = self.nodes[self.lookup(op.path) or 0]
            if k is OpKind.REMOVEXATTR and op.xattr not in node.xattrs:
                return f"{op.path} has no xattr {op.xattr}"
            return None
        if k is OpKind.UNLINK:
            return None if kind in (NodeKind.FILE, NodeKind.SYMLINK) else f"{op.path} is not a file"
        if k is OpKind.RMDIR:
            node_id = self.lookup(op.path)
            if kind is not NodeKind.DIR or node_id is None:
                return f"{op.path} is not a directory"
            return None if not self.nodes[node_id].entries else f"{op.path} is not empty"
        if k in _RENAME_OPS or k is OpKind.LINK:
            bad = _check_path(op.dst, root_ok=False)
            if bad:
                return bad
            if kind is None:
                return f"{op.path} does not exist"
            if self.kind_of(parent_of(op.dst)) is not NodeKind.DIR:
                return f"parent of {op.dst} is not a directory"
            dst_kind = self.kind_of(op.dst)
            if k is OpKind.LINK:
                if kind is not NodeKind.FILE:
                    return f"{op.path} is not a regular file"
                return None if dst_kind is None else f"{op.dst} exists"
            if op.dst == op.path or op.dst.startswith(op.path + "/"):
                return f"cannot rename {op.path} onto itself or below itself"
            if k is OpKind.RENAME_EXCHANGE:
                # renameat2(2): EINVAL for an ancestor of the other name, ENOENT if dst is absent.
                if dst_kind is None:
                    return f"{op.dst} does not exist"
                if op.path.startswith(op.dst + "/"):
                    return f"cannot exchange {op.path} with its ancestor {op.dst}"
                if self.lookup(op.dst) == self.lookup(op.path):
                    return f"{op.path} and {op.dst} are the same inode"
                return None
            if dst_kind is None:
                return None
            if k is OpKind.RENAME_NOREPLACE:
                return f"{op.dst} exists (RENAME_NOREPLACE fails with EEXIST)"
            if self.lookup(op.dst) == self.lookup(op.path):
                # rename(2) between two links of one inode does nothing; keep the model simple.
                return f"{op.path} and {op.dst} are the same inode"
            if (kind is NodeKind.DIR) != (dst_kind is NodeKind.DIR):
                return f"cannot rename a {kind} over a {dst_kind}"
            dst_node = self.nodes[self.lookup(op.dst) or 0]
            if dst_kind is NodeKind.DIR and dst_node.entries:
                return f"{op.dst} is a non-empty directory"
            return None
        return f"unknown op kind {k}"

    def _range_problem(self, op: Op) -> str | None:
        """Why the offsets and lengths of a single-file op do not fit the file, if they do not."""
        k = op.kind
        node_id = self.lookup(op.path)
        assert node_id is not None
        size = len(self.nodes[node_id].data)
        if k is OpKind.DIRECT_WRITE and (op.offset % ALIGN_BYTES or op.length % ALIGN_BYTES):
            return f"direct I/O offset and length must be multiples of {ALIGN_BYTES}"
        if k in (OpKind.MMAP_WRITE, OpKind.MSYNC):
            # A store past the end of the file is SIGBUS, and mmap(2) of length 0 is EINVAL.
            if op.length == 0:
                return f"{k} needs a length above 0"
            if op.offset + op.length > size:
                return f"{k} range {op.offset}+{op.length} runs past the end of {op.path} ({size} B)"
        if k in (OpKind.WRITE_OSYNC, OpKind.WRITE_ODSYNC) and op.length == 0:
            # generic_write_sync() runs only after a write of at least one byte.
            return f"{k} of 0 bytes syncs nothing"
        if k is OpKind.FALLOCATE:
            return _falloc_problem(op, size)
        return None

    def _new(self, node: _Node) -> int:
        node_id = self._next_id
        self._next_id += 1
        self.nodes[node_id] = node
        return node_id

    def _attach(self, path: str, node_id: int) -> None:
        parent = self.nodes[self.lookup(parent_of(path)) or 0]
        parent.entries[path.rpartition("/")[2]] = node_id

    def _detach(self, path: str) -> None:
        parent = self.nodes[self.lookup(parent_of(path)) or 0]
        del parent.entries[path.rpartition("/")[2]]

    def apply(self, op: Op, data: bytes = b"") -> None:
        """Apply ``op`` (already checked); ``data`` is what write ops write."""
        k = op.kind
        node_id = self.lookup(op.path)
        node = self.nodes[node_id] if node_id is not None else None
        if k is OpKind.CREAT:
            if node is None:
                self._attach(op.path, self._new(_Node(NodeKind.FILE)))
            else:
                del node.data[:]
        elif k is OpKind.MKDIR:
            self._attach(op.path, self._new(_Node(NodeKind.DIR)))
        elif k is OpKind.SYMLINK:
            self._attach(op.path, self._new(_Node(NodeKind.SYMLINK, target=op.target)))
        elif node is not None and k is OpKind.WRITE:
            node.data[:] = data
        elif node is not None and k in _WRITE_AT_OPS:
            _write_at(node.data, op.offset, data)
        elif node is not None and k is OpKind.APPEND:
            node.data += data
        elif node is not None and k is OpKind.TRUNCATE:
            _resize(node.data, op.size)
        elif node is not None and k is OpKind.FALLOCATE:
            _fallocate(node.data, op.falloc, op.offset, op.length)
        elif k in (OpKind.RENAME, OpKind.RENAME_NOREPLACE) and node_id is not None:
            dst_id = self.lookup(op.dst)
            if dst_id is not None:
                self._detach(op.dst)
            self._detach(op.path)
            self._attach(op.dst, node_id)
        elif k is OpKind.RENAME_EXCHANGE and node_id is not None:
            dst_id = self.lookup(op.dst)
            assert dst_id is not None
            self._attach(op.path, dst_id)
            self._attach(op.dst, node_id)
        elif node is not None and k in _DST_DATA_OPS:
            dst = self.nodes[self.lookup(op.dst) or 0]
            start, count = _source_range(op, len(node.data))
            if count:
                _write_at(dst.data, op.dst_offset, bytes(node.data[start : start + count]))
        elif k is OpKind.LINK and node_id is not None:
            self._attach(op.dst, node_id)
        elif k in (OpKind.UNLINK, OpKind.RMDIR) and node_id is not None:
            self._detach(op.path)
        elif node is not None and k is OpKind.SETXATTR:
            node.xattrs[op.xattr] = data
        elif node is not None and k is OpKind.REMOVEXATTR:
            del node.xattrs[op.xattr]


def _write_at(buf: bytearray, offset: int, data: bytes) -> None:
    if not data:
        # write(2): a zero count on a regular file returns 0 "without causing any other
        # effect" -- a pwrite of nothing past the end does not extend the file.
        return
    if offset > len(buf):
        buf.extend(bytes(offset - len(buf)))
    buf[offset : offset + len(data)] = data


def _resize(buf: bytearray, size: int) -> None:
    if size < len(buf):
        del buf[size:]
    else:
        buf.extend(bytes(size - len(buf)))


def _falloc_problem(op: Op, size: int) -> str | None:
    # fallocate(2): EINVAL for a length of 0 in every mode (vfs_fallocate(), fs/open.c).
    if op.length == 0:
        return "fallocate needs a length above 0"
    if op.falloc in (FallocMode.COLLAPSE_RANGE, FallocMode.INSERT_RANGE):
        if op.offset % ALIGN_BYTES or op.length % ALIGN_BYTES:
            return f"{op.falloc} offset and length must be multiples of {ALIGN_BYTES}"
        # vfs_fallocate() refuses a collapse reaching the end (that is a truncate);
        # ext4_insert_range() and xfs_insert_file_space() refuse an offset at or past it.
        if op.falloc is FallocMode.COLLAPSE_RANGE and op.offset + op.length >= size:
            return f"collapse-range {op.offset}+{op.length} must end before the end ({size} B)"
        if op.falloc is FallocMode.INSERT_RANGE and op.offset >= size:
            return f"insert-range offset {op.offset} must be before the end ({size} B)"
    return None


def _source_range(op: Op, src_size: int) -> tuple[int, int]:
    """(offset, byte count) of the source that a copy or clone op transfers."""
    if op.kind is OpKind.CLONE:
        return 0, src_size
    if op.kind is OpKind.CLONE_RANGE and op.length == 0:
        # FICLONERANGE with src_length 0 clones to the end of the source.
        return op.offset, max(0, src_size - op.offset)
    # copy_file_range(2) stops at the end of the source (generic_copy_file_checks()).
    return op.offset, max(0, min(op.length, src_size - op.offset))


def _copy_problem(op: Op, src_size: int, dst_size: int, *, same: bool) -> str | None:
    """Why a copy or clone op would fail on these sizes (the kernel's EINVAL cases), or None."""
    start, count = _source_range(op, src_size)
    if op.kind is OpKind.COPY_FILE_RANGE:
        if same and op.dst_offset + count > start and op.dst_offset < start + count:
            return "copy_file_range ranges overlap in one file"
        return None
    # Reflinks: generic_remap_file_range_prep(), generic_remap_checks() and
    # generic_remap_check_len() in fs/remap_range.c (Linux 6.1).
    if op.kind is OpKind.CLONE and (op.offset or op.length or op.dst_offset):
        return "clone takes no offsets or length (see clone_range)"
    if op.kind is OpKind.CLONE_RANGE and op.length == 0 and op.offset == src_size:
        return None  # nothing to clone: the kernel returns at once
    if count == 0:
        return None if op.kind is OpKind.CLONE else f"clone source range starts at the end of {op.path}"
    if op.offset % ALIGN_BYTES or op.dst_offset % ALIGN_BYTES:
        return f"clone offsets must be multiples of {ALIGN_BYTES}"
    if op.kind is OpKind.CLONE_RANGE and op.length and op.offset + op.length > src_size:
        return f"clone source range {op.offset}+{op.length} runs past the end of {op.path}"
    to_eof = start + count == src_size
    if count % ALIGN_BYTES and not to_eof:
        return f"clone length must be a multiple of {ALIGN_BYTES} unless it ends at the end of the source"
    if count % ALIGN_BYTES and op.dst_offset + count < dst_size:
        return "an unaligned end of file cannot be cloned into the middle of the destination"
    if op.dst_offset > dst_size:
        return f"clone destination offset {op.dst_offset} is past the end of {op.dst}"
    span = -(-count // ALIGN_BYTES) * ALIGN_BYTES if to_eof else count
    if same and op.dst_offset + span > start and op.dst_offset < start + span:
        return "clone ranges overlap in one file"
    return None


def _fallocate(buf: bytearray, mode: FallocMode, offset: int, length: int) -> None:
    end = offset + length
    if mode is FallocMode.ALLOCATE:
        if end > len(buf):
            _resize(buf, end)
    elif mode is FallocMode.PUNCH_HOLE:
        stop = min(end, len(buf))
        if stop > offset:
            buf[offset:stop] = bytes(stop - offset)
    elif mode is FallocMode.ZERO_RANGE:
        if end > len(buf):
            _resize(buf, end)
        buf[offset:end] = bytes(length)
    elif mode is FallocMode.COLLAPSE_RANGE:
        del buf[offset:end]
    elif mode is FallocMode.INSERT_RANGE:
        buf[offset:offset] = bytes(length)
    # KEEP_SIZE: blocks past EOF are allocated, nothing readable changes.


