"""What became durable at each mark, under a filesystem's persistence rules.

For every mark of an ``OracleLog``, ``promises`` works out which names,
data (whole files or byte ranges) and xattrs the durability op made
durable; ``RangePromise`` is one such promise of a file's data with the
versions the data may be in until the end of the window.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from crashcases.oracle.log import Binding, Cause, DataVersion, NodeKind, OracleLog, binding_spans
from crashcases.vocabulary import FILE_SYNC_OPS, FULL_SYNC_OPS, RANGE_SYNC_OPS, SYNC_ALL_OPS, OpKind
from recovery.persistence import PersistenceRules

# ---------------------------------------------------------------------------
# Promises under a set of rules


@dataclass(slots=True)
class Promises:
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


class _ReplacedInEffect:
    """The bindings a rename over an existing name made that are still in effect after a
    given op, asked for at op after op (the syncs of a workload, in mark order).

    Each is in effect from its op until the path's next binding (``binding_at``), so a
    sweep in op order adds those that began and drops those that ended: a long packed
    workload has thousands of them and hundreds of syncs, and testing every one at every
    sync was most of the time a checking guest spent on its promises.
    """

    def __init__(self, oracle: OracleLog) -> None:
        # (start op, end op, the binding), in the order of oracle.paths and each history.
        self.spans: list[tuple[int, float, Binding]] = []
        for hist in oracle.paths.values():
            for b, end in binding_spans(hist):
                if b.cause is Cause.RENAME_REPLACE:
                    self.spans.append((b.op, end, b))
        self._by_start = sorted(range(len(self.spans)), key=lambda i: self.spans[i][0])
        self._rewind()

    def _rewind(self) -> None:
        self._next = 0  # into _by_start: the first span not begun yet
        self._active: set[int] = set()
        self._last_op = -1

    def at(self, op: int) -> list[Binding]:
        """The bindings in effect after op ``op``, in the order of ``spans``."""
        if op < self._last_op:
            self._rewind()  # asked out of order: sweep again from the start
        self._last_op = op
        while self._next < len(self._by_start) and self.spans[self._by_start[self._next]][0] <= op:
            self._active.add(self._by_start[self._next])
            self._next += 1
        self._active = {i for i in self._active if op < self.spans[i][1]}
        return [self.spans[i][2] for i in sorted(self._active)]


class _InodeDurable:
    """Whether an inode itself was made durable at or before a mark.

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

    Asked for every entry of every directory fsync, so the marks are read once: per
    mark, the latest op of a sync at or before it; per inode, the first mark of an
    fsync-like call of it.
    """

    def __init__(self, oracle: OracleLog) -> None:
        self.oracle = oracle
        self.latest_sync_op: list[float] = []  # -inf: no sync yet
        self.first_own: dict[int, int] = {}
        for m, rec in enumerate(oracle.mark_records):
            latest = self.latest_sync_op[-1] if self.latest_sync_op else float("-inf")
            self.latest_sync_op.append(max(latest, rec.op) if rec.kind in SYNC_ALL_OPS else latest)
            # O_SYNC/O_DSYNC writes and msync reach the same ->fsync with a range, and
            # the range limits only which data pages are written.
            if rec.kind in FILE_SYNC_OPS and rec.inode is not None:
                self.first_own.setdefault(rec.inode, m)

    def __call__(self, ino: int, m: int) -> bool:
        """Whether inode ``ino`` was made durable at or before mark ``m``: a sync after it
        was made, or an fsync-like call of it."""
        own = self.first_own.get(ino)
        return ((own is not None and own <= m)
                or self.latest_sync_op[m] >= self.oracle.inodes[ino].created_op)


def durable_at_marks(oracle: OracleLog, rules: PersistenceRules) -> Promises:
    prom = Promises()
    in_effect = _ReplacedInEffect(oracle)

    def promise_entry(path: str, m: int, d: int) -> None:
        prom.entry[path].append((m, d))
        eff = oracle.binding_at(path, d)
        if (
            rules.rename_replace_flushes_data
            and eff is not None
            and eff.cause is Cause.RENAME_REPLACE
            and eff.inode is not None
            and oracle.inodes[eff.inode].kind is NodeKind.FILE
        ):
            prom.data[eff.inode].append((m, eff.op))

    inode_durable = _InodeDurable(oracle)

    def promise_new_ancestors(path: str, m: int, d: int) -> None:
        for anc in _ancestors(path):
            eff = oracle.binding_at(anc, d)
            if eff is not None and eff.cause is Cause.MKDIR:
                promise_entry(anc, m, d)

    for m, mk in enumerate(oracle.mark_records):
        d = mk.op
        # syncfs(2) is sync(2) for one filesystem: SYSCALL_DEFINE1(syncfs) calls
        # sync_filesystem() (fs/sync.c, Linux 6.1), which writes back every
        # inode, has the filesystem commit (->sync_fs with wait) and flushes
        # its block device, like ksys_sync() does for every filesystem. The
        # workload lives on one filesystem, so both promise everything before.
        if mk.kind in SYNC_ALL_OPS:
            prom.syncs.append((m, d))
            if rules.rename_replace_flushes_data:
                for b in in_effect.at(d):
                    if b.inode is not None:
                        prom.data[b.inode].append((m, b.op))
        elif mk.kind is OpKind.FSYNC_DIR:
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
        elif mk.kind in FILE_SYNC_OPS and mk.inode is not None:
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
            if mk.kind in RANGE_SYNC_OPS:
                prom.ranges[ino].append((m, d, mk.range_start, mk.range_end))
            else:
                prom.data[ino].append((m, d))
            full = mk.kind in FULL_SYNC_OPS
            if full:
                prom.xattr[ino].append((m, d))
            for path in oracle.inode_paths().get(ino, ()):
                eff = oracle.binding_at(path, d)
                if eff is None:
                    continue
                if eff.inode == ino and (
                    (full and rules.fsync_file_persists_names and eff.cause is not Cause.MOVED
                     and (eff.cause is not Cause.RENAME_EXCHANGE
                          or rules.fsync_file_persists_exchanged_names))
                    or (not full and rules.fdatasync_persists_new_names
                        and eff.cause is Cause.CREAT)
                ):
                    promise_entry(path, m, d)
                    promise_new_ancestors(path, m, d)
                elif (
                    full
                    and rules.fsync_file_persists_names
                    and eff.inode is None
                    and eff.cause in (Cause.UNLINK, Cause.RENAME)
                ):
                    prev = oracle.binding_at(path, eff.op - 1)
                    if prev is not None and prev.inode == ino:
                        promise_entry(path, m, d)
    return prom


@dataclass(frozen=True, slots=True)
class RangePromise:
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


def block_of(v: DataVersion, b: int, zero: str) -> str:
    """Block ``b`` of version ``v`` (zeros past its end)."""
    return v.blocks[b] if b < len(v.blocks) else zero


