"""The in-memory model of a tree: what it should look like after each op, no crash involved.

Generators ask it whether an op applies to the tree it meets (``FsModel.check``);
execution keeps it in step with the real tree and records what changed. What each
kind of op needs and does is its class in crashcases.workload.kinds.
"""

from __future__ import annotations

from crashcases.workload.kinds import (
    APPEND_ONLY_OK,
    FS_APPEND_FL,
    FS_IMMUTABLE_FL,
    IMMUTABLE_OK,
    SPECS,
    check_path,
)
from crashcases.workload.ops import Op
from crashcases.workload.tree import Tree


class FsModel(Tree):
    """What the tree under the root should look like after each op (no crash involved)."""

    def check(self, op: Op) -> str | None:
        """Why ``op`` cannot be applied now, or None if it can."""
        spec = SPECS[op.kind]
        bad = check_path(op.path, root_ok=spec.on_root)
        if bad:
            return bad
        if min(op.offset, op.length, op.size, op.dst_offset) < 0:
            return "offset, length, size and dst_offset must not be negative"
        return self.flags_problem(op) or spec.check(op, self)

    def flags_problem(self, op: Op) -> str | None:
        """Why an inode flag of what ``op`` names refuses it (EPERM), or None."""
        for path in (op.path, op.dst) if op.dst else (op.path,):
            node_id = self.lookup(path)
            flags = self.nodes[node_id].flags if node_id is not None else 0
            if flags & FS_IMMUTABLE_FL and op.kind not in IMMUTABLE_OK:
                return f"{path} is immutable"
            if flags & FS_APPEND_FL and op.kind not in APPEND_ONLY_OK:
                return f"{path} is append-only"
        return None

    def apply(self, op: Op, data: bytes = b"") -> None:
        """Apply ``op`` (already checked); ``data`` is what write ops write."""
        SPECS[op.kind].apply(op, self, data)
