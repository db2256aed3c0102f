"""A tree of files, directories and symlinks in memory: inodes, the names that bind them,
and each file's bytes.

``FsModel`` (crashcases.workload.model) is this tree kept in step with a workload; the
rules of each operation kind (crashcases.workload.ops) read and change it through the
verbs here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from crashcases.oracle.log import NodeKind


@dataclass(slots=True)
class Node:
    kind: NodeKind
    data: bytearray = field(default_factory=bytearray)
    entries: dict[str, int] = field(default_factory=dict)
    target: str = ""
    xattrs: dict[str, bytes] = field(default_factory=dict)
    flags: int = 0  # inode flags a setflags op set (crashcases.workload.kinds.MANAGED_FLAGS)


def parent_of(path: str) -> str:
    return path.rpartition("/")[0]


class Tree:
    """Inodes by id (the root is ``ROOT``), each directory's entries naming them."""

    ROOT = 0

    def __init__(self) -> None:
        self.nodes: dict[int, Node] = {self.ROOT: Node(NodeKind.DIR)}
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

    def size_of(self, path: str) -> int:
        """The size of the file at ``path`` (0 when nothing is there)."""
        node_id = self.lookup(path)
        return len(self.nodes[node_id].data) if node_id is not None else 0

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

    def new(self, node: Node) -> int:
        """Add ``node``, bound by no name yet; its id."""
        node_id = self._next_id
        self._next_id += 1
        self.nodes[node_id] = node
        return node_id

    def attach(self, path: str, node_id: int) -> None:
        """Bind ``path`` (in a directory that exists) to ``node_id``, replacing what it named."""
        parent = self.nodes[self.lookup(parent_of(path)) or 0]
        parent.entries[path.rpartition("/")[2]] = node_id

    def detach(self, path: str) -> None:
        parent = self.nodes[self.lookup(parent_of(path)) or 0]
        del parent.entries[path.rpartition("/")[2]]


def write_at(buf: bytearray, offset: int, data: bytes) -> None:
    if not data:
        # write(2): a zero count on a regular file returns 0 "without causing any other
        # effect" -- a pwrite of nothing past the end does not extend the file.
        return
    if offset > len(buf):
        buf.extend(bytes(offset - len(buf)))
    buf[offset : offset + len(data)] = data


def resize(buf: bytearray, size: int) -> None:
    if size < len(buf):
        del buf[size:]
    else:
        buf.extend(bytes(size - len(buf)))
