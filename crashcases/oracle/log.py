"""The durability oracle: what a workload promised, and checking a crash state against it.

``execute`` (crashcases.execute) records an ``OracleLog``: for every path
the history of what it named (inode id or nothing, and which op did it),
for every inode the history of its size and per-block hashes and of its
xattrs, and every durability op with the mark placed after it. Contents
are never stored: a block is known by the blake2b hash of its 4 KiB,
zero-padded past the end of file.

``verify`` checks a crash state whose last completed mark is ``last_mark``.
With ``PersistenceRules`` it works out, for each path and inode, the last
*promise* at or before that mark (the op whose state was made durable) and
the *window*: every op after the mark up to the durability op of the next
mark, which may be applied fully, partly or not at all (nothing after the
next mark can be on disk before it). The acceptable states of a promised
thing are all the versions it had from its promise to the end of the
window:

- names: the path names one of the inodes it named in that span, or is
  absent if it was absent at some point in it. Renames are two paths: the
  old name is promised absent only once its removal is promised, the new
  name present only once its creation is.
- a name's promise is enforced only if its parent directory is *pinned*:
  promised itself and the same directory inode from the promise on, up to
  the root; else the observed directory may be another one (a rename not
  yet durable) and nothing about its entries can be concluded.
- file data: the size lies between the smallest and largest size of the
  versions; every block equals that block of one of the versions (a
  block-granular mix, as page writeback produces), where a block past a
  version's end counts as zeros. A rewrite (open with O_TRUNC, then the
  bytes) of a non-empty file has two versions: empty, then the new bytes.
  ``PersistenceRules`` widen this (torn blocks, stale blocks after
  extension) or narrow it (whole-version writes).
  O_SYNC and O_DSYNC writes and msync promise a byte range, not the file:
  the blocks it touches, and a size that holds its bytes; a block answers
  to the latest promise that covers it, and one that none covers is free.
  sync_file_range promises nothing and places no mark; syncfs is sync.
- xattrs: each name the inode ever had holds one of its values in the span.
- symlink targets and link counts, where the rules say metadata is atomic.

A path, data or xattr never promised is not required to be present, but an
entry in a directory whose identity is certain must be one the workload
made (``unexpected-entry``), and found objects must have a type the path
had. ``walk_tree`` reads everything, promised or not; EIO is a finding.
"""

from __future__ import annotations

import bisect
import json
import threading
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from crashcases.vocabulary import RANGE_SYNC_OPS, OpKind
from framework.core.errors import PowercutError

try:
    # What hashlib.blake2b is: CPython's own BLAKE2. Importing hashlib itself also loads
    # OpenSSL for constructors this module never uses, ~120 ms of an emulated task's start.
    from _blake2 import blake2b
except ImportError:  # a Python built without it
    from hashlib import blake2b

BLOCK_BYTES = 4096
#: 3: inodes may have attribute events ("attrs"); 2: skipped ops are a map of their own
#: ("skipped"); 1 wrote " [skipped: why]" after the op's words, read here into the same map.
_FORMAT = 3
_SKIP_WORDS = " [skipped: "


class OracleError(PowercutError):
    """An oracle log is malformed or asked about a mark it does not have."""


class NodeKind(StrEnum):
    FILE = "file"
    DIR = "dir"
    SYMLINK = "symlink"
    FIFO = "fifo"  # mknod(2) S_IFIFO
    WHITEOUT = "whiteout"  # a character device 0:0 that RENAME_WHITEOUT leaves


class Cause(StrEnum):
    """Why a path's binding changed: the op kind that bound or unbound it, told apart where
    the promises differ."""

    CREAT = "creat"
    MKDIR = "mkdir"
    SYMLINK = "symlink"
    LINK = "link"
    UNLINK = "unlink"
    RMDIR = "rmdir"
    RENAME = "rename"  # either name of a rename (or RENAME_NOREPLACE) that replaced nothing
    RENAME_REPLACE = "rename-replace"  # the new name of a rename that replaced what it named
    RENAME_EXCHANGE = "rename-exchange"  # both names of a RENAME_EXCHANGE
    RENAME_WHITEOUT = "rename-whiteout"  # the old name of a RENAME_WHITEOUT, now its whiteout
    MKNOD = "mknod"
    MOVED = "moved"  # an ancestor was renamed


_CAUSES = {c.value: c for c in Cause}


@dataclass(frozen=True, slots=True)
class Binding:
    """From op ``op`` on, the path names ``inode`` (None: nothing), because of ``cause``."""

    op: int
    inode: int | None
    cause: Cause


def binding_spans(hist: Sequence[Binding]) -> Iterator[tuple[Binding, float]]:
    """Each binding of a path's history, in order, with the op at which the next one took
    over (inf: none did): ``OracleLog.binding_at`` gives it after every op from its own up
    to that one, excluded."""
    for b, after in zip(hist, [*hist[1:], None], strict=True):
        yield b, (after.op if after is not None else float("inf"))


@dataclass(frozen=True, slots=True)
class DataVersion:
    op: int
    size_bytes: int
    blocks: tuple[str, ...]  # hash per block, zero-padded past the end


@dataclass(frozen=True, slots=True)
class XattrEvent:
    op: int
    name: str
    digest: str | None  # None: removed


#: The attributes the oracle holds an inode to, as attribute ops set them (ATTR_OPS):
#: - mode: the permission bits (stat.S_IMODE), after chmod and chown;
#: - uid, gid: after chown;
#: - mtime: a regular file's, in nanoseconds, set by utimes to a given time; a later change
#:   of the file's data makes it unknown again (the kernel reads the time of day for it). A
#:   directory's is never held: log replay at mount adds entries again through the
#:   directory operations, which set its times to the time of the replay
#:   (btrfs_add_link() from the log tree's replay, fs/btrfs/tree-log.c; f2fs_add_dentry()
#:   from recover_dentry(), fs/f2fs/recovery.c; ext4_fc_replay_link_internal() ->
#:   __ext4_link(), fs/ext4/fast_commit.c);
#: - flags: the inode flags among crashcases.workload.kinds.MANAGED_FLAGS, after setflags.
#: An attribute no op set is not held at all: its value at creation (umask, the parent's
#: set-group-ID bit, the time of day) is the kernel's.
ATTRIBUTES = ("mode", "uid", "gid", "mtime", "flags")

# Inode flags of FS_IOC_GETFLAGS and FS_IOC_SETFLAGS (include/uapi/linux/fs.h,
# ioctl_iflags(2)) that the workloads set: the ones ext4, xfs, btrfs and f2fs all take
# (ext4_fileattr_set(), xfs_fileattr_set(), btrfs_fileattr_set(), f2fs_fileattr_set(),
# Linux 6.1), on regular files only: a directory passes some of them on to what is made in
# it, each filesystem its own set.
FS_SYNC_FL = 0x08  # 'S': writes are synchronous (IS_SYNC(), as O_SYNC)
FS_IMMUTABLE_FL = 0x10  # 'i': no change at all
FS_APPEND_FL = 0x20  # 'a': opened for writing only with O_APPEND, never truncated
FS_NODUMP_FL = 0x40  # 'd': dump(8) skips it
FS_NOATIME_FL = 0x80  # 'A': no atime updates
#: The flags a ``setflags`` op sets or clears (the rest of the inode's flags stay as they are).
MANAGED_FLAGS = FS_SYNC_FL | FS_IMMUTABLE_FL | FS_APPEND_FL | FS_NODUMP_FL | FS_NOATIME_FL
#: The ioctl that reads them (_IOR('f', 1, long); the kernel writes an int).
FS_IOC_GETFLAGS = 0x80086601
#: The letters chattr(1) and lsattr(1) give each flag.
FLAG_LETTERS = {FS_SYNC_FL: "S", FS_IMMUTABLE_FL: "i", FS_APPEND_FL: "a", FS_NODUMP_FL: "d",
                FS_NOATIME_FL: "A"}


def flag_words(flags: int) -> str:
    """``flags`` in chattr(1)'s letters (``-`` for none)."""
    return "".join(letter for bit, letter in FLAG_LETTERS.items() if flags & bit) or "-"


@dataclass(frozen=True, slots=True)
class AttrEvent:
    op: int
    name: str  # one of ATTRIBUTES
    value: int | None  # None: not known from here on


@dataclass(frozen=True, slots=True)
class InodeRecord:
    kind: NodeKind
    created_op: int
    target: str = ""
    data: tuple[DataVersion, ...] = ()
    xattrs: tuple[XattrEvent, ...] = ()
    attrs: tuple[AttrEvent, ...] = ()


@dataclass(frozen=True, slots=True)
class MarkRecord:
    name: str
    op: int  # index of the durability op it follows
    kind: OpKind
    path: str
    inode: int | None
    #: For ops that sync a byte range of the file (RANGE_SYNC_OPS: O_SYNC/O_DSYNC
    #: writes, msync): [range_start, range_end). Both 0 for every other op.
    range_start: int = 0
    range_end: int = 0


def _attr_event(op: int, name: str, value: int | None) -> AttrEvent:
    if name not in ATTRIBUTES or not (value is None or isinstance(value, int)):
        raise ValueError(f"attribute event {[op, name, value]!r}")
    return AttrEvent(int(op), name, value)


def block_digest(chunk: bytes, block_bytes: int = BLOCK_BYTES) -> str:
    return blake2b(chunk.ljust(block_bytes, b"\0"), digest_size=16).hexdigest()


def data_digests(data: bytes, block_bytes: int = BLOCK_BYTES) -> tuple[str, ...]:
    return tuple(
        block_digest(data[i : i + block_bytes], block_bytes)
        for i in range(0, len(data), block_bytes)
    )


def value_digest(value: bytes) -> str:
    return blake2b(value, digest_size=16).hexdigest()


@dataclass(frozen=True)
class OracleLog:
    """What one execution of a workload did and promised (JSON-serialisable)."""

    workload: str
    seed: int
    n_ops: int
    ops: tuple[str, ...]  # describe() of each op, for findings
    mark_records: tuple[MarkRecord, ...]
    paths: dict[str, tuple[Binding, ...]]
    inodes: dict[int, InodeRecord]
    block_bytes: int = BLOCK_BYTES
    #: Ops the recording skipped, with why: unsupported there (EOPNOTSUPP), or made
    #: invalid by an earlier skip. They changed nothing on disk.
    skipped: dict[int, str] = field(default_factory=dict)
    _cache: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)
    # Checking lanes share one log: the second asks for what the first is still building
    # (the promise index of a long workload takes seconds) and waits for it.
    _cache_lock: threading.RLock = field(default_factory=threading.RLock, compare=False,
                                         repr=False)

    @property
    def marks(self) -> list[str]:
        return [m.name for m in self.mark_records]

    def mark_index(self, name: str | None) -> int:
        """Index of mark ``name`` (-1 for None: before the first mark)."""
        if name is None:
            return -1
        index = self._cached(
            "mark_index", lambda: {m.name: i for i, m in enumerate(self.mark_records)}
        )
        if name not in index:
            raise OracleError(
                f"mark {name!r} is not in the oracle log of workload {self.workload!r}"
            )
        return int(index[name])

    def _cached(self, key: Any, make: Any) -> Any:
        try:
            return self._cache[key]
        except KeyError:
            pass
        with self._cache_lock:
            if key not in self._cache:
                self._cache[key] = make()
            return self._cache[key]

    def to_json(self) -> str:
        table: dict[str, int] = {}

        def ref(digest: str) -> int:
            return table.setdefault(digest, len(table))

        inodes: dict[str, dict[str, Any]] = {}
        for ino, rec in self.inodes.items():
            inodes[str(ino)] = {
                "kind": str(rec.kind),
                "created": rec.created_op,
                "target": rec.target,
                "data": [[v.op, v.size_bytes, [ref(b) for b in v.blocks]] for v in rec.data],
                "xattrs": [[x.op, x.name, x.digest] for x in rec.xattrs],
            }
            if rec.attrs:
                inodes[str(ino)]["attrs"] = [[a.op, a.name, a.value] for a in rec.attrs]
        doc = {
            "format": _FORMAT,
            "workload": self.workload,
            "seed": self.seed,
            "n_ops": self.n_ops,
            "block_bytes": self.block_bytes,
            "ops": list(self.ops),
            "skipped": {str(i): why for i, why in sorted(self.skipped.items())},
            "marks": [
                [m.name, m.op, m.kind, m.path, m.inode]
                + ([m.range_start, m.range_end] if m.kind in RANGE_SYNC_OPS else [])
                for m in self.mark_records
            ],
            "paths": {p: [[b.op, b.inode, b.cause] for b in h] for p, h in self.paths.items()},
            "inodes": inodes,
            "hashes": list(table),
        }
        return json.dumps(doc, separators=(",", ":"))

    @classmethod
    def load(cls, path: Path) -> OracleLog:
        """The oracle log in ``path``; an OracleError naming the file if it is missing or
        malformed."""
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise OracleError(f"{path}: cannot read the oracle log: {exc.strerror}") from None
        try:
            return cls.from_json(text)
        except OracleError as exc:
            raise OracleError(f"{path}: {exc}") from None

    @classmethod
    def from_json(cls, text: str) -> OracleLog:
        try:
            doc = json.loads(text)
            if doc.get("format") not in (1, 2, _FORMAT):
                raise OracleError(f"oracle log format {doc.get('format')!r} is not {_FORMAT}")
            ops, skipped = list(doc["ops"]), {int(i): why for i, why in doc.get("skipped", {}).items()}
            if doc["format"] == 1:
                for i, text in enumerate(ops):
                    if text.endswith("]") and _SKIP_WORDS in text:
                        ops[i], _, why = text[:-1].partition(_SKIP_WORDS)
                        skipped[i] = why
            hashes = doc["hashes"]
            inodes = {
                int(ino): InodeRecord(
                    kind=NodeKind(r["kind"]),
                    created_op=int(r["created"]),
                    target=r["target"],
                    data=tuple(
                        DataVersion(o, s, tuple(hashes[i] for i in b)) for o, s, b in r["data"]
                    ),
                    xattrs=tuple(XattrEvent(o, n, d) for o, n, d in r["xattrs"]),
                    attrs=tuple(_attr_event(o, n, v) for o, n, v in r.get("attrs", ())),
                )
                for ino, r in doc["inodes"].items()
            }
            return cls(
                workload=doc["workload"],
                seed=int(doc["seed"]),
                n_ops=int(doc["n_ops"]),
                ops=tuple(ops),
                skipped=skipped,
                mark_records=tuple(MarkRecord(name, op, OpKind(kind), *rest)
                                   for name, op, kind, *rest in doc["marks"]),
                paths={p: tuple(Binding(op, ino, _CAUSES[cause]) for op, ino, cause in h)
                       for p, h in doc["paths"].items()},
                inodes=inodes,
                block_bytes=int(doc["block_bytes"]),
            )
        except OracleError:
            raise
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            raise OracleError(f"oracle log is malformed: {exc!r}") from exc

    # -- rule-independent indexes -------------------------------------------

    def children(self) -> dict[str, list[str]]:
        def make() -> dict[str, list[str]]:
            out: dict[str, list[str]] = defaultdict(list)
            for p in self.paths:
                out[p.rpartition("/")[0]].append(p)
            return dict(out)

        return self._cached("children", make)

    def written_blocks(self) -> dict[str, tuple[int, int]]:
        """Every non-zero block hash any file ever held -> (inode, op) of the first version with it."""
        def make() -> dict[str, tuple[int, int]]:
            zero = block_digest(b"", self.block_bytes)
            out: dict[str, tuple[int, int]] = {}
            for ino, rec in self.inodes.items():
                for v in rec.data:
                    for digest in v.blocks:
                        if digest != zero and (digest not in out or v.op < out[digest][1]):
                            out[digest] = (ino, v.op)
            return out

        return self._cached("written_blocks", make)

    def blocks_of(self, ino: int) -> frozenset[str]:
        """Every block hash inode ``ino`` ever held, at any offset."""
        return self._cached(("blocks_of", ino), lambda: frozenset(
            d for v in self.inodes[ino].data for d in v.blocks))

    def inode_paths(self) -> dict[int, list[str]]:
        def make() -> dict[int, list[str]]:
            out: dict[int, list[str]] = defaultdict(list)
            for p, hist in self.paths.items():
                for ino in {b.inode for b in hist if b.inode is not None}:
                    out[ino].append(p)
            return dict(out)

        return self._cached("inode_paths", make)

    def binding_at(self, path: str, op: int) -> Binding | None:
        """The binding of ``path`` in effect after op ``op`` (None: never bound yet)."""
        hist = self.paths.get(path, ())
        # One dict of per-path op lists, not a cache entry per path: this runs for every
        # name at every crash state.
        index: dict[str, list[int]] = self._cached("binding_ops", dict)
        ops = index.get(path)
        if ops is None:
            ops = index[path] = [b.op for b in hist]
        i = bisect.bisect_right(ops, op)
        return hist[i - 1] if i else None

    def bindings_between(self, path: str, start: int, end: int) -> set[int | None]:
        """Every inode (None: absent) ``path`` named after some op in [start, end]."""
        first = self.binding_at(path, start)
        out: set[int | None] = {first.inode if first else None}
        out.update(b.inode for b in self.paths.get(path, ()) if start < b.op <= end)
        return out

    def versions_between(self, ino: int, start: int, end: int) -> list[DataVersion]:
        data = self.inodes[ino].data
        out = [v for v in data if start < v.op <= end]
        before = [v for v in data if v.op <= start]
        return before[-1:] + out

    def describe_op(self, index: int) -> str:
        if not 0 <= index < len(self.ops):
            return f"op {index}"
        why = self.skipped.get(index)
        return f"op {index} ({self.ops[index]}{'' if why is None else _SKIP_WORDS + why + ']'})"


class Recorder:
    """Builds an ``OracleLog`` while a workload executes."""

    def __init__(self, workload: str, seed: int, block_bytes: int = BLOCK_BYTES) -> None:
        self.workload = workload
        self.seed = seed
        self.block_bytes = block_bytes
        self._ops: list[str] = []
        self._skipped: dict[int, str] = {}
        self._marks: list[MarkRecord] = []
        self._paths: dict[str, list[Binding]] = {}
        self._inodes: dict[int, dict[str, Any]] = {
            0: {"kind": NodeKind.DIR, "created": -1, "target": ""}
        }
        self._data: dict[int, list[DataVersion]] = defaultdict(list)
        self._xattrs: dict[int, list[XattrEvent]] = defaultdict(list)
        self._attrs: dict[int, list[AttrEvent]] = defaultdict(list)
        self._n_ops = 0

    @property
    def known_inodes(self) -> set[int]:
        return set(self._inodes)

    def op(self, index: int, text: str, *, skipped: str | None = None) -> None:
        """Op ``index`` in words; ``skipped``: why the recording did not perform it."""
        while len(self._ops) < index:
            self._ops.append("")
        self._ops.append(text)
        if skipped is not None:
            self._skipped[index] = skipped

    def inode(self, ino: int, kind: NodeKind, op: int, target: str = "") -> None:
        self._inodes[ino] = {"kind": kind, "created": op, "target": target}

    def bind(self, path: str, op: int, ino: int | None, cause: Cause) -> None:
        self._paths.setdefault(path, []).append(Binding(op, ino, cause))

    def data(self, ino: int, op: int, content: bytes) -> None:
        self._data[ino].append(
            DataVersion(op, len(content), data_digests(content, self.block_bytes))
        )

    def size_of(self, ino: int) -> int:
        """The size of inode ``ino``'s latest recorded version (0 when none is)."""
        versions = self._data.get(ino)
        return versions[-1].size_bytes if versions else 0

    def xattr(self, ino: int, op: int, name: str, value: bytes | None) -> None:
        self._xattrs[ino].append(
            XattrEvent(op, name, None if value is None else value_digest(value))
        )

    def attr(self, ino: int, op: int, name: str, value: int | None) -> None:
        """Attribute ``name`` of inode ``ino`` is ``value`` after op ``op`` (None: unknown)."""
        self._attrs[ino].append(_attr_event(op, name, value))

    def has_attr(self, ino: int, name: str) -> bool:
        return any(a.name == name for a in self._attrs.get(ino, ()))

    def mark(
        self,
        name: str,
        op: int,
        kind: OpKind,
        path: str,
        ino: int | None,
        byte_range: tuple[int, int] | None = None,
    ) -> None:
        start, end = byte_range or (0, 0)
        self._marks.append(MarkRecord(name, op, kind, path, ino, start, end))

    def finish(self, n_ops: int) -> None:
        self._n_ops = n_ops

    @property
    def log(self) -> OracleLog:
        return OracleLog(
            workload=self.workload,
            seed=self.seed,
            n_ops=self._n_ops,
            ops=tuple(self._ops),
            skipped=dict(self._skipped),
            mark_records=tuple(self._marks),
            paths={p: tuple(h) for p, h in self._paths.items()},
            inodes={
                ino: InodeRecord(
                    kind=r["kind"],
                    created_op=r["created"],
                    target=r["target"],
                    data=tuple(self._data.get(ino, ())),
                    xattrs=tuple(self._xattrs.get(ino, ())),
                    attrs=tuple(self._attrs.get(ino, ())),
                )
                for ino, r in self._inodes.items()
            },
            block_bytes=self.block_bytes,
        )


