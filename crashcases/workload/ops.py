"""Crash workload operations: what each op is, its arguments, and the facts about it.

A ``Workload`` is a list of ``Op``s on paths relative to a root directory.
An op's ``kind`` (``OpKind``, crashcases.vocabulary) says what it does; the
rules of each kind are a class in crashcases.workload.kinds, which the
functions at the end of this module ask. Durability operations
(``DURABILITY_OPS``: fsync, fdatasync, sync, syncfs, directory fsync,
msync(MS_SYNC), writes through O_SYNC or O_DSYNC descriptors) are followed
by a log mark when a workload is executed (crashcases.execute).
sync_file_range(2) is deliberately not one: it promises nothing.

Some operations exist only on some filesystems (reflinks, collapse and
insert range, ...): ``required_capability`` names what an op needs, in the
words of the filesystem adapters' ``capabilities``.

Data written is never stored: it is generated from (workload seed, op
index), so a workload replays byte for byte and the oracle keeps only sizes
and block hashes.
"""

from __future__ import annotations

import json
import mmap
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from crashcases.vocabulary import DURABILITY_OPS, OpKind
from crashcases.workload.kinds import SPECS, FallocMode
from framework.core.errors import PowercutError

MAX_MARK_CHARS = 32


class WorkloadError(PowercutError):
    """A workload is malformed or an operation cannot be applied to the tree it meets."""


#: What generators before generator 3 took every filesystem to have: their
#: fallocate ops were skipped in the guest where the filesystem refused them.
ASSUMED_CAPABILITIES = frozenset({"fallocate", "punch-hole", "zero-range"})


@dataclass(frozen=True, slots=True)
class Op:
    """One operation; unused fields keep their defaults (and are left out of JSON)."""

    kind: OpKind
    path: str = ""
    dst: str = ""
    target: str = ""
    offset: int = 0
    length: int = 0
    size: int = 0
    falloc: FallocMode = FallocMode.ALLOCATE
    xattr: str = ""
    dst_offset: int = 0  # copy_file_range, clone_range, dedupe_range: where in `dst`
    mode: int = 0  # chmod: the permission bits
    uid: int = -1  # chown: the new owner (-1: unchanged)
    gid: int = -1  # chown: the new group (-1: unchanged)
    atime_ns: int = -1  # utimes: ns since the epoch, or kinds.UTIME_OMIT (-1) or UTIME_NOW (-2)
    mtime_ns: int = -1
    flags: int = 0  # setflags: the inode flags among kinds.MANAGED_FLAGS

    def describe(self) -> str:
        """Short human form, e.g. ``pwrite s0003/f0 @4096+100``."""
        return SPECS[self.kind].describe(self)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": str(self.kind)}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "kind" and value != f.default:
                out[f.name] = str(value) if isinstance(value, StrEnum) else value
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Op:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise WorkloadError(f"op {raw!r}: unknown key {unknown[0]!r}")
        try:
            kw = dict(raw)
            kw["kind"] = OpKind(raw["kind"])
            if "falloc" in raw:
                kw["falloc"] = FallocMode(raw["falloc"])
            return cls(**kw)
        except (KeyError, ValueError, TypeError) as exc:
            raise WorkloadError(f"op {raw!r}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    seed: int
    ops: tuple[Op, ...] = field(default_factory=tuple)

    @property
    def durability_count(self) -> int:
        return sum(1 for op in self.ops if op.kind in DURABILITY_OPS)

    def to_json(self) -> str:
        return json.dumps(
            {"name": self.name, "seed": self.seed, "ops": [op.to_dict() for op in self.ops]},
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> Workload:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"workload JSON is not valid JSON: {exc}") from exc
        if not isinstance(raw, dict) or set(raw) != {"name", "seed", "ops"}:
            raise WorkloadError("workload JSON must be an object with keys name, seed, ops")
        return cls(
            name=str(raw["name"]),
            seed=int(raw["seed"]),
            ops=tuple(Op.from_dict(o) for o in raw["ops"]),
        )


def op_data(seed: int, index: int, length: int) -> bytes:
    """The bytes op ``index`` of a workload with ``seed`` writes (random, so no two blocks match)."""
    import random  # only the recording guest writes data: a checking guest's start skips it

    # A str seed goes through sha512 in random.seed(), stable across runs and Python versions.
    return random.Random(f"powercut:{seed}:{index}").randbytes(length)


# ---------------------------------------------------------------------------
# The rules of an op's kind


def required_capability(op: Op) -> str | None:
    """The filesystem capability ``op`` needs (None: every filesystem has it)."""
    return SPECS[op.kind].required_capability(op)


def needs_data(op: Op) -> bool:
    return SPECS[op.kind].writes_data


def synced_range(op: Op, page_bytes: int = mmap.PAGESIZE) -> tuple[int, int] | None:
    """The byte range [start, end) whose data durability op ``op`` syncs (None: not a range):
    O_SYNC and O_DSYNC writes the bytes written, msync(MS_SYNC) the pages the range
    touches."""
    return SPECS[op.kind].synced_range(op, page_bytes)


def touched_paths(op: Op) -> tuple[str, ...]:
    """Paths whose subtree bindings ``op`` may change."""
    return SPECS[op.kind].touched(op)
