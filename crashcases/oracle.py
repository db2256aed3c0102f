"""The durability oracle: what a workload promised, and checking a crash state against it.

``execute`` (crashcases.operations) records an ``OracleLog``: for every path
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
  version's end counts as zeros. ``PersistenceRules`` widen this (torn
  blocks, stale blocks after extension) or narrow it (whole-version writes).
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
import errno
import hashlib
import json
import os
import stat
import threading
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from framework.core.errors import PowercutError
from recovery.persistence import PersistenceRules

BLOCK_BYTES = 4096
_FORMAT = 1


class OracleError(PowercutError):
    """An oracle log is malformed or asked about a mark it does not have."""


class NodeKind(StrEnum):
    FILE = "file"
    DIR = "dir"
    SYMLINK = "symlink"


class FindingKind(StrEnum):
    DATA_LOSS = "data-loss"  # a promised name, size or block is gone
    WRONG_CONTENT = "wrong-content"  # data matches no version it may legitimately have
    UNEXPECTED_ENTRY = "unexpected-entry"  # a name promised absent, or never made, is there
    WRONG_TYPE = "wrong-type"  # a name refers to an object of a type it never had
    WRONG_TARGET = "wrong-target"  # a symlink's target is not the one it was made with
    WRONG_XATTR = "wrong-xattr"  # an xattr value matches no version since its promise
    LINK_COUNT = "link-count"  # st_nlink differs from the names found
    IDENTITY = "identity"  # names of one inode are different inodes, or the reverse
    IO_ERROR = "io-error"  # reading, listing or stat failed


@dataclass(frozen=True, slots=True)
class Finding:
    kind: FindingKind
    path: str
    detail: str
    mark: str | None = None  # the mark whose promise is broken, if any

    def __str__(self) -> str:
        return f"{self.kind}: {self.path or '.'}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Binding:
    """From op ``op`` on, the path names ``inode`` (None: nothing), because of ``cause``."""

    op: int
    inode: int | None
    cause: str  # the op kind, "rename-replace", or "moved" (an ancestor was renamed)


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


@dataclass(frozen=True, slots=True)
class InodeRecord:
    kind: NodeKind
    created_op: int
    target: str = ""
    data: tuple[DataVersion, ...] = ()
    xattrs: tuple[XattrEvent, ...] = ()


@dataclass(frozen=True, slots=True)
class MarkRecord:
    name: str
    op: int  # index of the durability op it follows
    kind: str
    path: str
    inode: int | None
    #: For ops that sync a byte range of the file (O_SYNC/O_DSYNC writes,
    #: msync): [range_start, range_end). Both 0 for every other op.
    range_start: int = 0
    range_end: int = 0


# Mark kinds and what they promise (see _promises).
SYNC_KINDS = ("sync", "syncfs")  # everything done before
WHOLE_FILE_KINDS = ("fsync", "fdatasync")  # all of the file's data
RANGE_KINDS = ("write_osync", "write_odsync", "msync")  # the data of a byte range
FULL_KINDS = ("fsync", "write_osync")  # also the inode's other metadata (xattrs, names)


def block_digest(chunk: bytes, block_bytes: int = BLOCK_BYTES) -> str:
    return hashlib.blake2b(chunk.ljust(block_bytes, b"\0"), digest_size=16).hexdigest()


def data_digests(data: bytes, block_bytes: int = BLOCK_BYTES) -> tuple[str, ...]:
    return tuple(
        block_digest(data[i : i + block_bytes], block_bytes)
        for i in range(0, len(data), block_bytes)
    )


def value_digest(value: bytes) -> str:
    return hashlib.blake2b(value, digest_size=16).hexdigest()


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

        inodes = {}
        for ino, rec in self.inodes.items():
            inodes[str(ino)] = {
                "kind": str(rec.kind),
                "created": rec.created_op,
                "target": rec.target,
                "data": [[v.op, v.size_bytes, [ref(b) for b in v.blocks]] for v in rec.data],
                "xattrs": [[x.op, x.name, x.digest] for x in rec.xattrs],
            }
        doc = {
            "format": _FORMAT,
            "workload": self.workload,
            "seed": self.seed,
            "n_ops": self.n_ops,
            "block_bytes": self.block_bytes,
            "ops": list(self.ops),
            "marks": [
                [m.name, m.op, m.kind, m.path, m.inode]
                + ([m.range_start, m.range_end] if m.kind in RANGE_KINDS else [])
                for m in self.mark_records
            ],
            "paths": {p: [[b.op, b.inode, b.cause] for b in h] for p, h in self.paths.items()},
            "inodes": inodes,
            "hashes": list(table),
        }
        return json.dumps(doc, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> OracleLog:
        try:
            doc = json.loads(text)
            if doc.get("format") != _FORMAT:
                raise OracleError(f"oracle log format {doc.get('format')!r} is not {_FORMAT}")
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
                )
                for ino, r in doc["inodes"].items()
            }
            return cls(
                workload=doc["workload"],
                seed=int(doc["seed"]),
                n_ops=int(doc["n_ops"]),
                ops=tuple(doc["ops"]),
                mark_records=tuple(MarkRecord(*m) for m in doc["marks"]),
                paths={p: tuple(Binding(*b) for b in h) for p, h in doc["paths"].items()},
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
        return f"op {index} ({self.ops[index]})" if 0 <= index < len(self.ops) else f"op {index}"


class Recorder:
    """Builds an ``OracleLog`` while a workload executes."""

    def __init__(self, workload: str, seed: int, block_bytes: int = BLOCK_BYTES) -> None:
        self.workload = workload
        self.seed = seed
        self.block_bytes = block_bytes
        self._ops: list[str] = []
        self._marks: list[MarkRecord] = []
        self._paths: dict[str, list[Binding]] = {}
        self._inodes: dict[int, dict[str, Any]] = {
            0: {"kind": NodeKind.DIR, "created": -1, "target": ""}
        }
        self._data: dict[int, list[DataVersion]] = defaultdict(list)
        self._xattrs: dict[int, list[XattrEvent]] = defaultdict(list)
        self._n_ops = 0

    @property
    def known_inodes(self) -> set[int]:
        return set(self._inodes)

    def op(self, index: int, text: str) -> None:
        while len(self._ops) < index:
            self._ops.append("")
        self._ops.append(text)

    def inode(self, ino: int, kind: NodeKind, op: int, target: str = "") -> None:
        self._inodes[ino] = {"kind": kind, "created": op, "target": target}

    def bind(self, path: str, op: int, ino: int | None, cause: str) -> None:
        self._paths.setdefault(path, []).append(Binding(op, ino, cause))

    def data(self, ino: int, op: int, content: bytes) -> None:
        self._data[ino].append(
            DataVersion(op, len(content), data_digests(content, self.block_bytes))
        )

    def xattr(self, ino: int, op: int, name: str, value: bytes | None) -> None:
        self._xattrs[ino].append(
            XattrEvent(op, name, None if value is None else value_digest(value))
        )

    def mark(
        self,
        name: str,
        op: int,
        kind: str,
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
            mark_records=tuple(self._marks),
            paths={p: tuple(h) for p, h in self._paths.items()},
            inodes={
                ino: InodeRecord(
                    kind=r["kind"],
                    created_op=r["created"],
                    target=r["target"],
                    data=tuple(self._data.get(ino, ())),
                    xattrs=tuple(self._xattrs.get(ino, ())),
                )
                for ino, r in self._inodes.items()
            },
            block_bytes=self.block_bytes,
        )


# ---------------------------------------------------------------------------
# Promises under a set of rules


@dataclass(slots=True)
class _Promises:
    """Per mark index, what became durable; each value is (mark index, version op)."""

    entry: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))
    data: dict[int, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))
    xattr: dict[int, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))
    syncs: list[tuple[int, int]] = field(default_factory=list)
    #: Data of a byte range only: (mark index, version op, range start, range end).
    ranges: dict[int, list[tuple[int, int, int, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )


def _ancestors(path: str) -> Iterable[str]:
    while "/" in path:
        path = path.rpartition("/")[0]
        yield path


def _promises(oracle: OracleLog, rules: PersistenceRules) -> _Promises:
    prom = _Promises()
    replaced = [
        (p, b) for p, hist in oracle.paths.items() for b in hist if b.cause == "rename-replace"
    ]

    def promise_entry(path: str, m: int, d: int) -> None:
        prom.entry[path].append((m, d))
        eff = oracle.binding_at(path, d)
        if (
            rules.rename_replace_flushes_data
            and eff is not None
            and eff.cause == "rename-replace"
            and eff.inode is not None
            and oracle.inodes[eff.inode].kind is NodeKind.FILE
        ):
            prom.data[eff.inode].append((m, eff.op))

    def inode_durable(ino: int, m: int) -> bool:
        """Whether inode ``ino`` itself was made durable at or before mark ``m``.

        Without atomic metadata, fsync of a directory writes the directory's
        blocks and inode, not the inodes its new entries name: ext4 without a
        journal (and ext2, served by ext4) syncs only the directory's
        associated buffers and inode (ext4_fsync_nojournal(),
        fs/ext4/fsync.c), while a new inode's table block is dirtied with no
        owner (ext4_do_update_inode() -> ext4_handle_dirty_metadata(handle,
        NULL, bh), fs/ext4/inode.c), and e2fsck pass 2 clears an entry that
        names an unused inode. So the entry is owed only once its inode is:
        by fsync/fdatasync of that inode or a sync after it was made. Linux
        6.1 and 6.12.
        """
        created = oracle.inodes[ino].created_op
        for rec in oracle.mark_records[: m + 1]:
            if rec.kind in SYNC_KINDS and rec.op >= created:
                return True
            # O_SYNC/O_DSYNC writes and msync reach the same ->fsync with a range,
            # and the range limits only which data pages are written.
            if (rec.kind in WHOLE_FILE_KINDS or rec.kind in RANGE_KINDS) and rec.inode == ino:
                return True
        return False

    def promise_new_ancestors(path: str, m: int, d: int) -> None:
        for anc in _ancestors(path):
            eff = oracle.binding_at(anc, d)
            if eff is not None and eff.cause == "mkdir":
                promise_entry(anc, m, d)

    for m, mk in enumerate(oracle.mark_records):
        d = mk.op
        # syncfs(2) is sync(2) for one filesystem: SYSCALL_DEFINE1(syncfs) calls
        # sync_filesystem() (fs/sync.c, Linux 6.1), which writes back every
        # inode, has the filesystem commit (->sync_fs with wait) and flushes
        # its block device, like ksys_sync() does for every filesystem. The
        # workload lives on one filesystem, so both promise everything before.
        if mk.kind in SYNC_KINDS:
            prom.syncs.append((m, d))
            if rules.rename_replace_flushes_data:
                for path, b in replaced:
                    if oracle.binding_at(path, d) == b and b.inode is not None:
                        prom.data[b.inode].append((m, b.op))
        elif mk.kind == "fsync_dir":
            for child in oracle.children().get(mk.path, ()):
                eff = oracle.binding_at(child, d)
                if (
                    rules.metadata_atomic
                    or eff is None
                    or eff.inode is None
                    or inode_durable(eff.inode, m)
                ):
                    promise_entry(child, m, d)
            if mk.inode is not None:
                prom.xattr[mk.inode].append((m, d))
        elif (mk.kind in WHOLE_FILE_KINDS or mk.kind in RANGE_KINDS) and mk.inode is not None:
            # The range kinds are fsync and fdatasync of a byte range, so they
            # promise what those do with the data limited to the range:
            # - an O_SYNC write is fsync(2) of what it wrote: generic_write_sync()
            #   (include/linux/fs.h, Linux 6.1 and 6.12) calls
            #   vfs_fsync_range(file, pos - count, pos - 1, datasync=0) after the
            #   write; open(2): O_SYNC gives "synchronized I/O file integrity
            #   completion", data and all metadata, like fsync.
            # - an O_DSYNC write is fdatasync(2) of what it wrote: the same call
            #   with datasync=1; open(2): O_DSYNC gives "synchronized I/O data
            #   integrity completion".
            # - msync(MS_SYNC) is fdatasync of the pages the range touches:
            #   msync() in mm/msync.c (Linux 6.1 and 6.12) calls
            #   vfs_fsync_range(file, fstart, fend, 1) for each shared mapping.
            # vfs_fsync_range() passes the range to ->fsync (ext4_sync_file(),
            # xfs_file_fsync(), btrfs_sync_file(), f2fs_sync_file()), which
            # write back the dirty pages in it (file_write_and_wait_range(),
            # whole folios, so whole 4 KiB blocks) and then commit as fsync or
            # fdatasync would: the inode's other metadata as for the whole call.
            ino = mk.inode
            if mk.kind in RANGE_KINDS:
                prom.ranges[ino].append((m, d, mk.range_start, mk.range_end))
            else:
                prom.data[ino].append((m, d))
            full = mk.kind in FULL_KINDS
            if full:
                prom.xattr[ino].append((m, d))
            for path in oracle.inode_paths().get(ino, ()):
                eff = oracle.binding_at(path, d)
                if eff is None:
                    continue
                if eff.inode == ino and (
                    (full and rules.fsync_file_persists_names and eff.cause != "moved"
                     and (eff.cause != "rename-exchange"
                          or rules.fsync_file_persists_exchanged_names))
                    or (not full and rules.fdatasync_persists_new_names and eff.cause == "creat")
                ):
                    promise_entry(path, m, d)
                    promise_new_ancestors(path, m, d)
                elif (
                    full
                    and rules.fsync_file_persists_names
                    and eff.inode is None
                    and eff.cause in ("unlink", "rename")
                ):
                    prev = oracle.binding_at(path, eff.op - 1)
                    if prev is not None and prev.inode == ino:
                        promise_entry(path, m, d)
    return prom


@dataclass(frozen=True, slots=True)
class _RangePromise:
    """Data promised at mark ``mark`` as of op ``op``: bytes [start, end) (end -1: all)."""

    op: int
    mark: int
    start: int
    end: int
    versions: list[DataVersion]  # the versions the data may be in: from op to the window's end

    @property
    def key(self) -> tuple[int, int]:
        return (self.op, self.mark)

    def covers(self, block: int, block_bytes: int) -> bool:
        if self.end < 0:
            return True
        return block * block_bytes < self.end and (block + 1) * block_bytes > self.start

    def blocks(self, block_bytes: int) -> range:
        if self.end < 0:
            return range(max(-(-v.size_bytes // block_bytes) for v in self.versions))
        return range(self.start // block_bytes, -(-self.end // block_bytes))

    def min_size(self) -> int:
        """The smallest size the file may have: it must hold the promised bytes."""
        if self.end < 0:
            return min(v.size_bytes for v in self.versions)
        # Of a version of `size` bytes, [start, min(end, size)) is promised.
        return min(min(v.size_bytes, self.end) if v.size_bytes > self.start else 0
                   for v in self.versions)


def _block(v: DataVersion, b: int, zero: str) -> str:
    """Block ``b`` of version ``v`` (zeros past its end)."""
    return v.blocks[b] if b < len(v.blocks) else zero


# ---------------------------------------------------------------------------
# Reading the crash state


@dataclass(frozen=True, slots=True)
class _Seen:
    kind: NodeKind | None  # None: something else (device, fifo)
    st: os.stat_result


def _kind_of(mode: int) -> NodeKind | None:
    if stat.S_ISREG(mode):
        return NodeKind.FILE
    if stat.S_ISDIR(mode):
        return NodeKind.DIR
    if stat.S_ISLNK(mode):
        return NodeKind.SYMLINK
    return None


def _read_file(path: str | Path) -> bytes:
    with open(path, "rb", buffering=0) as f:
        chunks = []
        while chunk := f.read(1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)


def walk_tree(root: Path) -> list[Finding]:
    """Read every file, list every directory and readlink every symlink under ``root``."""
    findings: list[Finding] = []
    base = os.fspath(root)
    stack = [""]
    while stack:
        rel = stack.pop()
        here = f"{base}/{rel}" if rel else base
        try:
            names = sorted(os.listdir(here))
        except OSError as exc:
            findings.append(Finding(FindingKind.IO_ERROR, rel, f"listing the directory: {exc}"))
            continue
        for name in names:
            child = f"{rel}/{name}" if rel else name
            p = f"{base}/{child}"
            try:
                st = os.lstat(p)
                if stat.S_ISDIR(st.st_mode):
                    stack.append(child)
                elif stat.S_ISLNK(st.st_mode):
                    os.readlink(p)
                elif stat.S_ISREG(st.st_mode):
                    _read_file(p)
            except OSError as exc:
                findings.append(Finding(FindingKind.IO_ERROR, child, f"reading: {exc}"))
    return sorted(findings, key=lambda f: f.path)


# ---------------------------------------------------------------------------
# Verification


def _path_trees(paths: Iterable[str]) -> list[tuple[str, bool, list[str]]]:
    """Each top-level name, whether it is a path of its own, and the paths below it,
    parents before children."""
    names = set(paths)
    below: dict[str, list[str]] = defaultdict(list)
    for path in sorted(names):
        head, sep, _ = path.partition("/")
        if sep:
            below[head].append(path)
        else:
            below.setdefault(head, [])
    return [(head, head in names, rest) for head, rest in sorted(below.items())]


def verify(
    oracle: OracleLog, root: Path, *, last_mark: str | None, rules: PersistenceRules
) -> list[Finding]:
    """Check the crash state under ``root`` whose last completed mark is ``last_mark``.

    Sound by construction: a finding is only reported for a state no
    filesystem obeying ``rules`` may produce (see the module docstring).
    """
    k = oracle.mark_index(last_mark)
    return _Checker(oracle, root, k, rules).run()


class _Checker:
    def __init__(self, oracle: OracleLog, root: Path, k: int, rules: PersistenceRules,
                 *, prune: bool = True) -> None:
        self.o = oracle
        self.prune = prune
        self.root = root
        # Plain strings, not Path: the checks join thousands of paths per state.
        self._root_s = os.fspath(root)
        self.k = k
        self.rules = rules
        marks = oracle.mark_records
        # Ops up to the durability op of the next mark may be on disk in any part.
        self.end = marks[k + 1].op if k + 1 < len(marks) else oracle.n_ops - 1
        self.prom: _Promises = oracle._cached(("promises", rules), lambda: _promises(oracle, rules))
        self.last_sync: tuple[int, int] | None = None
        for m, d in self.prom.syncs:
            if m <= k:
                self.last_sync = (d, m)
        self.findings: list[Finding] = []
        self._seen: dict[str, _Seen | None] = {}
        self._missing: set[str] = set()  # lstat said ENOENT or ENOTDIR
        self._content: dict[str, bytes | None] = {}
        self._pinned: dict[tuple[str, int], int | None] = {}
        self._identified: dict[tuple[str, int], int | None] = {}

    # -- promises -----------------------------------------------------------

    def _last(self, table: list[tuple[int, int]]) -> tuple[int, int] | None:
        best: tuple[int, int] | None = None
        for m, v in table:
            if m <= self.k and (best is None or v > best[0]):
                best = (v, m)
        return best

    def entry_promise(self, path: str) -> tuple[int, int] | None:
        """(version op, mark index) of the last promise of ``path``'s entry."""
        best = self._last(self.prom.entry.get(path, []))
        hist = self.o.paths.get(path, ())
        s = self.last_sync
        if s is not None and hist and hist[0].op <= s[0] and (best is None or s[0] > best[0]):
            best = s
        return best

    def inode_promise(
        self, table: dict[int, list[tuple[int, int]]], ino: int
    ) -> tuple[int, int] | None:
        best = self._last(table.get(ino, []))
        s = self.last_sync
        if (
            s is not None
            and self.o.inodes[ino].created_op <= s[0]
            and (best is None or s[0] > best[0])
        ):
            best = s
        return best

    def range_promises(self, ino: int, after: int) -> list[_RangePromise]:
        """Promises of byte ranges of ``ino`` at marks up to k, later than op ``after``, in order."""
        out = []
        for m, v, start, end in self.prom.ranges.get(ino, ()):
            if m <= self.k and v > after:
                out.append(_RangePromise(v, m, start, end, self.o.versions_between(ino, v, self.end)))
        return sorted(out, key=lambda r: r.op)

    def note(self, promise: tuple[int, int]) -> str:
        v, m = promise
        mk = self.o.mark_records[m]
        return f"promised at {mk.name} as of {self.o.describe_op(v)}"

    def mark_name(self, promise: tuple[int, int]) -> str:
        return self.o.mark_records[promise[1]].name

    # -- which directory is which ------------------------------------------

    def pinned(self, path: str, since: int) -> int | None:
        """The dir inode certainly at ``path`` at the crash, there since op ``since``."""
        if path == "":
            return 0
        key = (path, since)
        if key not in self._pinned:
            self._pinned[key] = None
            p = self.entry_promise(path)
            if p is not None:
                lo = min(p[0], since)
                vals = self.o.bindings_between(path, lo, self.end)
                if len(vals) == 1:
                    (ino,) = vals
                    if (
                        ino is not None
                        and self.o.inodes[ino].kind is NodeKind.DIR
                        and self.pinned(path.rpartition("/")[0], lo) is not None
                    ):
                        self._pinned[key] = ino
        return self._pinned[key]

    def identified(self, path: str, since: int) -> int | None:
        """The dir inode a directory found at ``path`` must be (there since ``since``), if known."""
        pinned = self.pinned(path, since)
        if pinned is not None:
            return pinned
        key = (path, since)
        if key not in self._identified:
            self._identified[key] = None
            # Stable: only one inode ever had this name and it never had another,
            # so a directory found here is that one, in any state it ever had.
            inos = self.o.bindings_between(path, -1, self.o.n_ops) - {None}
            if len(inos) == 1:
                (ino,) = inos
                if (
                    ino is not None
                    and self.o.inodes[ino].kind is NodeKind.DIR
                    and self.o.inode_paths().get(ino) == [path]
                    and self.identified(path.rpartition("/")[0], -1) is not None
                ):
                    self._identified[key] = ino
        return self._identified[key]

    # -- observing -----------------------------------------------------------

    def at(self, path: str) -> str:
        return f"{self._root_s}/{path}"

    def seen(self, path: str) -> _Seen | None:
        if path not in self._seen:
            try:
                st = os.lstat(self.at(path))
                self._seen[path] = _Seen(_kind_of(st.st_mode), st)
            except (FileNotFoundError, NotADirectoryError):
                self._seen[path] = None
                self._missing.add(path)
            except OSError as exc:
                self.add(FindingKind.IO_ERROR, path, f"lstat: {exc}")
                self._seen[path] = None
        return self._seen[path]

    def content(self, path: str) -> bytes | None:
        if path not in self._content:
            try:
                self._content[path] = _read_file(self.at(path))
            except OSError as exc:
                self.add(FindingKind.IO_ERROR, path, f"reading: {exc}")
                self._content[path] = None
        return self._content[path]

    def add(self, kind: FindingKind, path: str, detail: str, mark: str | None = None) -> None:
        self.findings.append(Finding(kind, path, detail, mark))

    # -- the checks ----------------------------------------------------------

    def run(self) -> list[Finding]:
        identity: dict[int, dict[tuple[int, int], str]] = defaultdict(dict)
        # Below a directory that is missing and may be missing (see
        # check_path), nothing can be seen and nothing can be owed: skip it.
        # In a long packed workload most names belong to sequences that
        # have not started or have been removed, so this is most of them.
        gone: set[str] = set()
        # A top-level name that is not in the root directory and that names nothing at the
        # window's end (so "absent" is among the states it may legally be in) is what
        # check_path returns True for, found without an lstat or a promise lookup each:
        # a long workload has thousands of such names, one per finished sequence.
        top = self._root_names()
        for name, is_path, below in self.o._cached("path_trees", lambda: _path_trees(self.o.paths)):
            if not is_path:
                pass  # only names below it were ever made: they are checked on their own
            elif top is not None and name not in top:
                bound = self.o.binding_at(name, self.end)
                if bound is None or bound.inode is None:
                    self._seen[name] = None
                    self._missing.add(name)
                    if self.prune:
                        continue  # and nothing below it either
            if is_path and self.check_path(name, identity) and self.prune:
                continue
            for path in below:
                if path.rpartition("/")[0] in gone:
                    gone.add(path)
                    continue
                if self.check_path(path, identity) and self.prune:
                    gone.add(path)
        self.check_identity(identity)
        if self.rules.metadata_atomic:
            self.check_link_counts()
        unique = {(f.kind, f.path, f.detail): f for f in self.findings}
        return sorted(unique.values(), key=lambda f: (f.path, f.kind, f.detail))

    def _root_names(self) -> frozenset[str] | None:
        """The names in the root directory (None if it cannot be listed: lstat decides)."""
        try:
            return frozenset(os.listdir(self._root_s))
        except OSError:
            return None

    def check_path(self, path: str, identity: dict[int, dict[tuple[int, int], str]]) -> bool:
        """Check one name; True if it is absent and nothing below it can matter.

        That holds when the name is not there (ENOENT/ENOTDIR, not an I/O
        error) and it may legally be absent (no promise, or the name was
        absent at some op between its promise and the window's end). Then
        no directory can be *pinned* at it for any promise below it, so no
        name below it can be owed (data-loss needs a pinned parent), and
        none can be seen (the kernel shows nothing under a missing name).
        """
        promise = self.entry_promise(path)
        since = promise[0] if promise is not None else -1
        parent = path.rpartition("/")[0]
        if self.identified(parent, since) is None:
            return False  # the directory found at the parent path may be another one
        cands = self.o.bindings_between(path, since, self.end)
        obs = self.seen(path)
        if obs is None:
            if path in self._missing and (promise is None or None in cands):
                return True
            if (
                promise is not None
                and None not in cands
                and self.pinned(parent, promise[0]) is not None
            ):
                want = ", ".join(
                    self.o.inodes[c].kind + f" #{c}"
                    for c in sorted(cands, key=str)
                    if c is not None
                )
                self.add(
                    FindingKind.DATA_LOSS,
                    path,
                    f"missing; {self.note(promise)}: {want}",
                    self.mark_name(promise),
                )
            return False
        live = {c for c in cands if c is not None}
        if not live:
            if promise is not None:
                detail = f"present ({obs.kind}); {self.note(promise)}: absent"
            else:
                # Only ops after the next mark ever made this name: they cannot be on disk yet.
                first = next(b.op for b in self.o.paths[path] if b.inode is not None)
                detail = f"present ({obs.kind}); first made by {self.o.describe_op(first)}, after the window"
            mark = self.mark_name(promise) if promise else None
            self.add(FindingKind.UNEXPECTED_ENTRY, path, detail, mark)
            return False
        typed = sorted(c for c in live if self.o.inodes[c].kind == obs.kind)
        if not typed:
            kinds = "/".join(sorted({self.o.inodes[c].kind for c in live}))
            mark = self.mark_name(promise) if promise else None
            self.add(
                FindingKind.WRONG_TYPE,
                path,
                f"found {obs.kind or 'special file'}, expected {kinds}",
                mark,
            )
            return False
        if len(typed) == 1:
            identity[typed[0]][(obs.st.st_dev, obs.st.st_ino)] = path
        outcomes = [self.check_object(c, path, obs) for c in typed]
        if all(outcomes):
            best = min(outcomes, key=len)
            extra = (
                f" (nor any of {len(typed) - 1} other inodes the name had)"
                if len(typed) > 1
                else ""
            )
            for f in best:
                self.findings.append(Finding(f.kind, f.path, f.detail + extra, f.mark))
        if obs.kind is NodeKind.DIR and self.identified(path, -1) is not None:
            self.check_listing(path)
        return False

    def check_listing(self, path: str) -> None:
        try:
            names = os.listdir(self.at(path))
        except OSError as exc:
            self.add(FindingKind.IO_ERROR, path, f"listing the directory: {exc}")
            return
        for name in sorted(names):
            child = f"{path}/{name}"
            if child not in self.o.paths:
                self.add(
                    FindingKind.UNEXPECTED_ENTRY, child, "the workload never created this name"
                )

    def check_object(self, ino: int, path: str, obs: _Seen) -> list[Finding]:
        """Findings if the object at ``path`` is inode ``ino`` (empty: it may be)."""
        out: list[Finding] = []
        rec = self.o.inodes[ino]
        if rec.kind is NodeKind.SYMLINK:
            if self.rules.metadata_atomic:
                try:
                    target = os.readlink(self.at(path))
                except OSError as exc:
                    return [Finding(FindingKind.IO_ERROR, path, f"readlink: {exc}")]
                if target != rec.target:
                    out.append(
                        Finding(
                            FindingKind.WRONG_TARGET,
                            path,
                            f"target {target!r}, made as {rec.target!r}",
                        )
                    )
            return out
        if rec.kind is NodeKind.FILE:
            dp = self.inode_promise(self.prom.data, ino)
            ranges = self.range_promises(ino, dp[0] if dp is not None else -1)
            if dp is not None or ranges:
                out += self.check_data(ino, path, dp, ranges)
        xp = self.inode_promise(self.prom.xattr, ino)
        if xp is not None and rec.xattrs:
            out += self.check_xattrs(ino, path, xp)
        return out

    def check_data(
        self,
        ino: int,
        path: str,
        promise: tuple[int, int] | None,
        ranges: list[_RangePromise] | None = None,
    ) -> list[Finding]:
        """Findings on the data at ``path`` if it is inode ``ino``.

        ``promise`` covers every block (fsync, fdatasync, sync); each of
        ``ranges``, later than it, the blocks its byte range touches. A
        block answers to the latest promise that covers it; a block no
        promise covers is not compared.
        """
        data = self.content(path)
        if data is None:
            return []  # the read error is its own finding
        B = self.o.block_bytes
        ranges = ranges or []
        whole = (
            _RangePromise(promise[0], promise[1], 0, -1,
                          self.o.versions_between(ino, promise[0], self.end))
            if promise is not None
            else None
        )
        size = len(data)
        found = data_digests(data, B)
        zero = block_digest(b"", B)
        if self.rules.data_writes_atomic:
            base = whole.versions if whole is not None else self.o.versions_between(ino, -1, self.end)

            def keeps(v: DataVersion, r: _RangePromise) -> bool:
                return v in r.versions or all(
                    _block(v, b, zero) in {_block(w, b, zero) for w in r.versions}
                    for b in r.blocks(B)
                )

            if any(
                v.size_bytes == size and v.blocks == found and all(keeps(v, r) for r in ranges)
                for v in base
            ):
                return []
            last = ranges[-1] if ranges else whole
            assert last is not None
            return [
                Finding(
                    FindingKind.WRONG_CONTENT,
                    path,
                    f"{size} B matching none of {len(base)} whole versions; {self.note(last.key)}",
                    self.mark_name(last.key),
                )
            ]
        for p in ([whole] if whole is not None else []) + ranges:
            need = p.min_size()
            if size < need:
                return [
                    Finding(
                        FindingKind.DATA_LOSS,
                        path,
                        f"size {size} B; {self.note(p.key)}: at least {need} B",
                        self.mark_name(p.key),
                    )
                ]
        if whole is not None and size > max(v.size_bytes for v in whole.versions):
            return [
                Finding(
                    FindingKind.WRONG_CONTENT,
                    path,
                    f"size {size} B; {self.note(whole.key)}: at most "
                    f"{max(v.size_bytes for v in whole.versions)} B",
                    self.mark_name(whole.key),
                )
            ]
        out = []
        for b, digest in enumerate(found):
            gov = whole
            for r in ranges:
                if r.covers(b, B) and (gov is None or r.op >= gov.op):
                    gov = r
            if gov is None:
                continue  # no promise reaches this block
            versions = gov.versions
            if (
                gov is not whole
                and size < (b + 1) * B
                and size not in {v.size_bytes for v in versions}
            ):
                # The file ends inside this block at a size from before the range
                # was synced (the size need not be durable beyond the range): the
                # block's bytes up to there cannot be told apart by a block hash.
                continue
            allowed = {_block(v, b, zero) for v in versions}
            if digest in allowed:
                continue
            if self.rules.stale_data_after_extension and any(
                v.size_bytes < (b + 1) * B for v in versions
            ):
                continue  # allocated by an in-flight extension: old disk contents are legitimate
            if not self.rules.data_block_atomic and len(allowed) > 1:
                continue  # overwritten in flight: a torn block cannot be told from a mix of versions
            what = "zeros" if digest == zero else "other data"
            kind = FindingKind.DATA_LOSS if digest == zero else FindingKind.WRONG_CONTENT
            out.append(
                Finding(
                    kind,
                    path,
                    f"block {b} (bytes {b * B}-{min(size, (b + 1) * B) - 1}) holds {what}; "
                    f"{self.note(gov.key)}",
                    self.mark_name(gov.key),
                )
            )
        return out

    def check_xattrs(self, ino: int, path: str, promise: tuple[int, int]) -> list[Finding]:
        events = self.o.inodes[ino].xattrs
        out = []
        for name in sorted({e.name for e in events}):
            mine = [e for e in events if e.name == name]
            before = [e.digest for e in mine if e.op <= promise[0]]
            allowed = {before[-1] if before else None}
            allowed.update(e.digest for e in mine if promise[0] < e.op <= self.end)
            try:
                got: str | None = value_digest(
                    os.getxattr(self.at(path), name, follow_symlinks=False)
                )
            except OSError as exc:
                if exc.errno == errno.ENODATA:
                    got = None
                else:
                    out.append(Finding(FindingKind.IO_ERROR, path, f"getxattr {name}: {exc}"))
                    continue
            if got not in allowed:
                have = "absent" if got is None else "a value it never had since"
                out.append(
                    Finding(
                        FindingKind.WRONG_XATTR,
                        path,
                        f"xattr {name} is {have}; {self.note(promise)}",
                        self.mark_name(promise),
                    )
                )
        return out

    def check_identity(self, identity: dict[int, dict[tuple[int, int], str]]) -> None:
        owners: dict[tuple[int, int], dict[int, str]] = defaultdict(dict)
        for ino, seen in identity.items():
            if len(seen) > 1:
                paths = sorted(seen.values())
                self.add(
                    FindingKind.IDENTITY,
                    paths[0],
                    f"names of one inode are different inodes: {', '.join(paths)}",
                )
            for key, path in seen.items():
                owners[key][ino] = path
        for inos in owners.values():
            # Two model inodes on one on-disk inode: only impossible if metadata is atomic
            # (else a freed inode number may be reused while the old name survives).
            if len(inos) > 1 and self.rules.metadata_atomic:
                paths = sorted(inos.values())
                self.add(
                    FindingKind.IDENTITY,
                    paths[0],
                    f"names of different inodes are one inode: {', '.join(paths)}",
                )

    def check_link_counts(self) -> None:
        names: dict[tuple[int, int], list[str]] = defaultdict(list)
        nlink: dict[tuple[int, int], int] = {}
        stack = [""]
        while stack:
            rel = stack.pop()
            try:
                entries = list(os.scandir(self.at(rel) if rel else self._root_s))
            except OSError:
                continue  # walk_tree reports unreadable directories
            for e in entries:
                child = f"{rel}/{e.name}" if rel else e.name
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    stack.append(child)
                elif stat.S_ISREG(st.st_mode):
                    key = (st.st_dev, st.st_ino)
                    names[key].append(child)
                    nlink[key] = st.st_nlink
        for key, found in names.items():
            if nlink[key] != len(found):
                found.sort()
                self.add(
                    FindingKind.LINK_COUNT,
                    found[0],
                    f"st_nlink {nlink[key]} but {len(found)} names found: {', '.join(found)}",
                )
