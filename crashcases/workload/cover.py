"""Coverage-directed windows (``cover:N``): every input cell a filesystem offers, the least
covered first, each window of operations closed by one durability op.

The cells are crashcases.workload.coverage's: a syscall with its flag or mode, one
partition of one of its arguments, or the durability op that follows it. The generator
builds the workload window by window. It draws concrete operations for the rows whose
offered cells have been produced least (every row's makers name files, directories and
offsets relative to the tree as it is then), scores each by the cells it would produce,
weighting a cell by 1/(1 + times produced so far)², and keeps the best; up to seven more
operations on the same name follow while they still bring at least a third of its
weight, then the durability op that covers them and brings the rarest cells of its own. So a budget that checks only the first states of the workload has seen
every cell once before it sees any twice: the cells are sampled evenly within any prefix,
instead of one list walked in order.

The tree is a fixed pool of names at the root and in three directories, one of them
filled with long names so that a directory outgrows its inline and single-block forms;
it never holds more than the pool, so a late state is as cheap to check as an early one.
Every operation of crashcases.workload.kinds that the filesystem has is used: the
attribute ops (chmod, chown, utimes, setflags), mknod of a FIFO, every fallocate mode and
renameat2 flag, dedupe, and the O_DIRECT writes through O_SYNC and O_DSYNC descriptors.
"""

from __future__ import annotations

import copy
import random
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

from crashcases.oracle.log import NodeKind
from crashcases.vocabulary import DURABILITY_OPS, OpKind
from crashcases.workload.cells import ROWS, THEN, Cell, offered, row_of
from crashcases.workload.coverage import Tracker
from crashcases.workload.kinds import (
    FS_APPEND_FL,
    FS_IMMUTABLE_FL,
    SETTABLE_FLAGS,
    UTIME_NOW,
    UTIME_OMIT,
    FallocMode,
)
from crashcases.workload.ops import ASSUMED_CAPABILITIES, Op
from crashcases.workload.selection import OpSelection
from crashcases.workload.tree import parent_of

#: The operations only cover:N draws: the generators before it keep what they drew (their
#: workloads are rebuilt from old plans).
COVER_ONLY_KINDS = frozenset({
    OpKind.DEDUPE_RANGE, OpKind.RENAME_WHITEOUT, OpKind.MKNOD, OpKind.CHMOD, OpKind.CHOWN,
    OpKind.UTIMES, OpKind.SETFLAGS, OpKind.DIRECT_WRITE_OSYNC, OpKind.DIRECT_WRITE_ODSYNC,
})
COVER_ONLY_FALLOC_MODES = frozenset({FallocMode.ZERO_RANGE_KEEP_SIZE, FallocMode.UNSHARE_RANGE})
B = 4096
LONG = "x" * 200  # a long name's stem: a name of 202 bytes (NAME_MAX is 255)
#: The pool: directories, and the files and other names in each.
DIRS = ("d0", "d1", "d0/e", "big")
PLACES = ("", "d0", "d1", "d0/e")
FILES = tuple(f"{d}/{n}" if d else n for d in PLACES for n in ("f0", "f1", "f2"))
LONG_FILES = tuple(f"d1/{LONG}{i:02d}" for i in range(2))
#: Long names in ``big``: 210 bytes of entries each. The first BIG_FIRST of them are made
#: at the start, 3,990 bytes: one name more takes the directory past a 4 KiB block (the
#: ``dir-size=blocks`` cells of every name op in ``big``), one fewer keeps it in one.
BIG = tuple(f"big/{LONG}{i:02d}" for i in range(24))
BIG_FIRST = 19
OTHERS = tuple(f"{d}/{n}" if d else n for d in PLACES for n in ("s0", "p0", "w0"))
XATTRS = ("user.a", "user.b")
#: Explicit times for utimes: whole seconds, and nanoseconds.
SECONDS_NS = 1_600_000_000 * 10**9
NANOSECONDS_NS = 1_700_000_000 * 10**9 + 123_456_789
WINDOW_MAX = 8  # operations in one window before its durability op
TOP_ROWS = 6  # rows whose makers are asked for candidates, per choice
FIRST_ROWS = 6  # rows, the neediest, a window's first op is drawn from
PER_ROW = 24  # candidates a row's maker gives, at most (a seeded sample of them)

Maker = Callable[["_Gen"], Iterator[list[Op]]]


def _ranges(size: int) -> list[tuple[int, int]]:
    """(offset, length) pairs relative to a file of ``size`` bytes: at its start, inside a
    block, on a boundary, at its end and past it, a part of a block, a block, blocks, an
    unaligned run."""
    offsets = sorted({0, 100, B, size, size - 10 if size > 10 else 0, size + B + 7,
                      (size // B) * B})
    lengths = (0, 100, B, 2 * B, B + 5, 17 * B)
    return [(o, n) for o in offsets for n in lengths]


class _Gen:
    """The state of one generation: the tracker (tree, pending ops), the counts."""

    def __init__(self, seed: int, selection: OpSelection) -> None:
        self.rng = random.Random(f"powercut-cover:{seed}")
        self.selection = selection
        self.tracker = Tracker()
        self.counts: Counter[Cell] = Counter()
        self.offered = offered(ASSUMED_CAPABILITIES if selection.capabilities is None
                               else selection.capabilities)
        self.ops: list[Op] = []
        # What the makers ask again and again, kept until the tree or the counts change.
        self._kinds: dict[str, NodeKind | None] = {}
        self._row_weights: dict[str, float] = {}

    def fork(self) -> _Gen:
        """A copy to try operations on: its own tree and counts, the same random stream."""
        other = copy.copy(self)
        other.tracker = copy.deepcopy(self.tracker)
        other.counts = Counter(self.counts)
        other.ops = []
        other._kinds = dict(self._kinds)
        other._row_weights = dict(self._row_weights)
        return other

    # -- the tree as it is

    def kind(self, path: str) -> NodeKind | None:
        if path not in self._kinds:
            self._kinds[path] = self.tracker.model.kind_of(path)
        return self._kinds[path]

    def size(self, path: str) -> int:
        return self.tracker.model.size_of(path)

    def files(self) -> list[str]:
        return [p for p in (*FILES, *LONG_FILES, *BIG) if self.kind(p) is NodeKind.FILE]

    def dirs(self) -> list[str]:
        return [d for d in DIRS if self.kind(d) is NodeKind.DIR]

    def free(self, pool: Sequence[str]) -> list[str]:
        return [p for p in pool if self.kind(p) is None and self.kind(parent_of(p)) is NodeKind.DIR]

    # -- scoring

    def weight(self, cell: Cell) -> float:
        if cell not in self.offered:
            return 0.0
        return 1.0 / (1 + self.counts[cell]) ** 2

    def row_weight(self, row: str) -> float:
        """How much a row's offered cells are still needed: the sum of their weights."""
        if row not in self._row_weights:
            cells = [c for c in ROWS[row].cells() if c in self.offered]
            self._row_weights[row] = sum(self.weight(c) for c in cells)
        return self._row_weights[row]

    def valid(self, ops: Sequence[Op]) -> bool:
        if not all(self.selection.allows(op) or op.kind in _SETUP for op in ops):
            return False
        if len(ops) == 1:
            return self.tracker.model.check(ops[0]) is None
        trial = copy.deepcopy(self.tracker.model)
        for op in ops:
            if trial.check(op) is not None:
                return False
            trial.apply(op, bytes(op.length))
        return True

    def then_weight(self, row: str) -> float:
        """The weight of the rarest ``then`` cell of ``row``: what the best durability op
        after an op of it may bring."""
        return max((self.weight(Cell(row, THEN, t)) for t in ROWS[row].then), default=0.0)

    def score(self, ops: Sequence[Op]) -> float:
        """The weight of the argument cells ``ops`` would produce, and of the rarest
        ``then`` cell the last of them could get from the durability op after it."""
        last = row_of(ops[-1])
        total = self.then_weight(last) if last in ROWS else 0.0
        if len(ops) == 1:
            return total + sum(self.weight(Cell(last, a, v))
                               for a, v in self.tracker.args(ops[0]).items())
        trial = copy.deepcopy(self.tracker)
        for op in ops:
            row = row_of(op)
            total += sum(self.weight(Cell(row, a, v)) for a, v in trial.args(op).items())
            trial.step(op)
        return total

    def emit(self, op: Op) -> None:
        self.ops.append(op)
        self._kinds.clear()
        cells = self.tracker.step(op)
        if cells:
            self._row_weights.clear()
        for cell in cells:
            self.counts[cell] += 1


_SETUP = frozenset({OpKind.CREAT, OpKind.MKDIR, OpKind.WRITE, OpKind.PWRITE})


# ---------------------------------------------------------------------------
# Makers: for each row, candidate operations (or short runs of them) on the tree now


def _data_makers() -> dict[str, Maker]:
    K, F = OpKind, FallocMode

    def on_files(make: Callable[[_Gen, str, int], Iterator[list[Op]]]) -> Maker:
        def maker(g: _Gen) -> Iterator[list[Op]]:
            files = g.files()
            g.rng.shuffle(files)
            for f in files[:3]:
                yield from make(g, f, g.size(f))
        return maker

    def written(kind: OpKind, lengths: Sequence[int] | None = None,
                aligned: bool = False) -> Maker:
        def make(g: _Gen, f: str, size: int) -> Iterator[list[Op]]:
            for offset, length in _ranges(size):
                if lengths is not None and length not in lengths:
                    continue
                if aligned and (offset % B or length % B):
                    continue
                yield [Op(kind, f, offset=offset, length=length)]
        return on_files(make)

    def whole(kind: OpKind) -> Maker:
        def make(g: _Gen, f: str, size: int) -> Iterator[list[Op]]:
            for length in (0, 100, B, 2 * B, B + 5, 17 * B):
                yield [Op(kind, f, length=length)]
        return on_files(make)

    def truncate(g: _Gen, f: str, size: int) -> Iterator[list[Op]]:
        top = -(-size // B) * B
        for new in {0, size, max(size - 100, 0), size // B * B, size + 10, top + B,
                    top + B + 7, 17 * B + 3}:
            yield [Op(K.TRUNCATE, f, size=new)]

    def falloc(mode: FallocMode, aligned: bool = False) -> Maker:
        def make(g: _Gen, f: str, size: int) -> Iterator[list[Op]]:
            for offset, length in _ranges(size):
                if length == 0 or (aligned and (offset % B or length % B)):
                    continue
                yield [Op(K.FALLOCATE, f, offset=offset, length=length, falloc=mode)]
        return on_files(make)

    def two_files(make: Callable[[_Gen, str, str], Iterator[list[Op]]]) -> Maker:
        def maker(g: _Gen) -> Iterator[list[Op]]:
            files = g.files()
            g.rng.shuffle(files)
            for src in files[:2]:
                for dst in [*files[:3], src]:
                    yield from make(g, src, dst)
        return maker

    def copy_range(g: _Gen, src: str, dst: str) -> Iterator[list[Op]]:
        size, dsize = g.size(src), g.size(dst)
        offsets = sorted({0, 100, B, size, size + B})
        ats = sorted({0, 100, B, dsize, dsize + B + 7})
        for _ in range(12):  # a sample of the offsets, lengths and places
            yield [Op(K.COPY_FILE_RANGE, src, dst=dst, offset=g.rng.choice(offsets),
                      length=g.rng.choice((0, 100, B, 2 * B, B + 5)),
                      dst_offset=g.rng.choice(ats))]

    def clone(g: _Gen, src: str, dst: str) -> Iterator[list[Op]]:
        yield [Op(K.CLONE, src, dst=dst)]

    def clone_range(g: _Gen, src: str, dst: str) -> Iterator[list[Op]]:
        size, dsize = g.size(src), g.size(dst)
        for offset in (0, B):
            for length in {0, B, 2 * B, max(size - offset, 0)}:
                for at in {0, B, dsize // B * B}:
                    yield [Op(K.CLONE_RANGE, src, dst=dst, offset=offset, length=length,
                              dst_offset=at)]

    def dedupe(g: _Gen, src: str, dst: str) -> Iterator[list[Op]]:
        size = g.size(src)
        for offset in (0, B):
            for length in {B, 2 * B, max(size - offset, 0)}:
                for at in (0, B):
                    op = Op(K.DEDUPE_RANGE, src, dst=dst, offset=offset, length=length,
                            dst_offset=at)
                    yield [op]
                    if src != dst:
                        # The same bytes first, so that the ranges are shared.
                        yield [Op(K.COPY_FILE_RANGE, src, dst=dst, offset=offset,
                                  length=length, dst_offset=at), op]

    def mmap(g: _Gen, f: str, size: int) -> Iterator[list[Op]]:
        for offset, length in _ranges(size):
            if length and offset + length <= size:
                yield [Op(K.MMAP_WRITE, f, offset=offset, length=length)]

    makers: dict[str, Maker] = {
        "pwrite": written(K.PWRITE),
        "write": whole(K.WRITE),
        "append": whole(K.APPEND),
        "direct_write": written(K.DIRECT_WRITE, aligned=True),
        "mmap_write": on_files(mmap),
        "truncate": on_files(truncate),
        "sync_file_range": written(K.SYNC_FILE_RANGE, (0, 100, B, 2 * B, B + 5)),
        "copy_file_range": two_files(copy_range),
        "clone": two_files(clone),
        "clone_range": two_files(clone_range),
        "dedupe_range": two_files(dedupe),
    }
    for mode in FallocMode:
        aligned = mode in (F.COLLAPSE_RANGE, F.INSERT_RANGE)
        makers[f"fallocate:{mode}"] = falloc(mode, aligned)
    return makers


def _name_makers() -> dict[str, Maker]:
    K = OpKind

    def new_names(g: _Gen) -> list[str]:
        """Free names: four of the pool's, and a long one (``name=long``), in ``big``
        where one is free (``dir-size=blocks``)."""
        free = g.free((*FILES, *LONG_FILES, *BIG, *OTHERS))
        g.rng.shuffle(free)
        long = [p for p in free if p.startswith("big/")][:1] or [
            p for p in free if p in LONG_FILES][:1]
        return free[:4] + [p for p in long if p not in free[:4]]

    def creat(g: _Gen) -> Iterator[list[Op]]:
        for p in new_names(g) + g.files()[:3]:
            yield [Op(K.CREAT, p)]
        # A directory's first block filled with long names, then one more.
        free = g.free(BIG)
        if len(free) > 1:
            yield [Op(K.CREAT, p) for p in free]

    def mkdir(g: _Gen) -> Iterator[list[Op]]:
        for d in DIRS:
            if g.kind(d) is None and g.kind(parent_of(d)) is NodeKind.DIR:
                yield [Op(K.MKDIR, d)]
        for p in new_names(g):
            yield [Op(K.MKDIR, p)]

    def mknod(g: _Gen) -> Iterator[list[Op]]:
        for p in new_names(g):
            yield [Op(K.MKNOD, p)]

    def symlink(g: _Gen) -> Iterator[list[Op]]:
        for p in new_names(g):
            for target in ("f0", "nowhere", "../" * 20 + "f1", LONG):
                yield [Op(K.SYMLINK, p, target=target)]

    def link(g: _Gen) -> Iterator[list[Op]]:
        for f in g.files()[:4]:
            for p in new_names(g):
                yield [Op(K.LINK, f, dst=p)]

    def unlink(g: _Gen) -> Iterator[list[Op]]:
        names = [p for p in (*FILES, *LONG_FILES, *BIG, *OTHERS)
                 if g.kind(p) not in (None, NodeKind.DIR)]
        g.rng.shuffle(names)
        for p in names[:8]:
            yield [Op(K.UNLINK, p)]

    def rmdir(g: _Gen) -> Iterator[list[Op]]:
        for p in (*DIRS, *FILES, *LONG_FILES, *BIG, *OTHERS):
            if g.kind(p) is NodeKind.DIR:
                yield [Op(K.RMDIR, p)]

    def renames(kind: OpKind) -> Maker:
        def maker(g: _Gen) -> Iterator[list[Op]]:
            # Not the pool's directories: renamed away (or over), they would take every
            # name of the pool inside them out of the makers' reach. A directory mkdir
            # made on a name of the pool holds no name of the pool, and is renamed.
            names = [p for p in (*FILES, *LONG_FILES, *BIG, *OTHERS)
                     if g.kind(p) is not None]
            g.rng.shuffle(names)
            # A name of every kind there is (``what``, and each ``pair`` of an exchange),
            # then the first of the shuffled rest.
            by_kind: dict[NodeKind | None, list[str]] = {}
            for p in names:
                by_kind.setdefault(g.kind(p), []).append(p)
            picked = [group[0] for group in by_kind.values()]
            picked += [p for p in names if p not in picked][:max(0, 4 - len(picked))]
            others = [group[-1] for group in by_kind.values()]
            for src in picked:
                for dst in dict.fromkeys(new_names(g) + others + names[:4]):
                    if src != dst:
                        yield [Op(kind, src, dst=dst)]
        return maker

    return {"creat": creat, "mkdir": mkdir, "mknod": mknod, "symlink": symlink, "link": link,
            "unlink": unlink, "rmdir": rmdir, "rename": renames(K.RENAME),
            "rename_noreplace": renames(K.RENAME_NOREPLACE),
            "rename_exchange": renames(K.RENAME_EXCHANGE),
            "rename_whiteout": renames(K.RENAME_WHITEOUT)}


def _attr_makers() -> dict[str, Maker]:
    K = OpKind

    def subjects(g: _Gen) -> list[str]:
        names = [p for p in (*FILES, *OTHERS, *DIRS) if g.kind(p) in
                 (NodeKind.FILE, NodeKind.DIR, NodeKind.FIFO)]
        g.rng.shuffle(names)
        return names[:5]

    def chmod(g: _Gen) -> Iterator[list[Op]]:
        for p in subjects(g):
            for mode in (0o444, 0o600, 0o755, 0o1777):
                yield [Op(K.CHMOD, p, mode=mode)]

    def chown(g: _Gen) -> Iterator[list[Op]]:
        for p in subjects(g):
            for uid, gid in ((1000, -1), (-1, 1000), (1001, 1001)):
                yield [Op(K.CHOWN, p, uid=uid, gid=gid)]

    def utimes(g: _Gen) -> Iterator[list[Op]]:
        for p in subjects(g):
            for atime, mtime in ((SECONDS_NS, SECONDS_NS), (NANOSECONDS_NS, NANOSECONDS_NS),
                                 (UTIME_NOW, UTIME_NOW), (SECONDS_NS, UTIME_OMIT)):
                yield [Op(K.UTIMES, p, atime_ns=atime, mtime_ns=mtime)]

    def setflags(g: _Gen) -> Iterator[list[Op]]:
        for f in g.files()[:4]:
            for flags in (*SETTABLE_FLAGS, 0):
                yield [Op(K.SETFLAGS, f, flags=flags)]

    def setxattr(g: _Gen) -> Iterator[list[Op]]:
        for p in subjects(g):
            for name in XATTRS:
                for length in (0, 30, 200, 700):
                    yield [Op(K.SETXATTR, p, xattr=name, length=length)]

    def removexattr(g: _Gen) -> Iterator[list[Op]]:
        for p in subjects(g):
            for name in XATTRS:
                yield [Op(K.REMOVEXATTR, p, xattr=name)]

    return {"chmod": chmod, "chown": chown, "utimes": utimes, "setflags": setflags,
            "setxattr": setxattr, "removexattr": removexattr}


MAKERS: dict[str, Maker] = {**_data_makers(), **_name_makers(), **_attr_makers()}


def _durables(g: _Gen, subject: str, links: Sequence[str] = ()) -> Iterator[Op]:
    """Durability ops that could cover an op on ``subject``: its own, its directory's, every
    one's; ``links``: other names of the inode an unlink took a name from."""
    K = OpKind
    for other in links:
        yield Op(K.FSYNC, other)
    kind = g.kind(subject)
    if kind is NodeKind.FILE:
        size = g.size(subject)
        yield Op(K.FSYNC, subject)
        yield Op(K.FDATASYNC, subject)
        for offset, length in _ranges(size):
            if length and length <= 2 * B:
                if offset + length <= size:
                    yield Op(K.MSYNC, subject, offset=offset, length=length)
                yield Op(K.WRITE_OSYNC, subject, offset=offset, length=length)
                yield Op(K.WRITE_ODSYNC, subject, offset=offset, length=length)
                if offset % B == 0 and length % B == 0:
                    yield Op(K.DIRECT_WRITE_OSYNC, subject, offset=offset, length=length)
                    yield Op(K.DIRECT_WRITE_ODSYNC, subject, offset=offset, length=length)
    if kind is NodeKind.DIR:
        yield Op(K.FSYNC_DIR, subject)
    yield Op(K.FSYNC_DIR, parent_of(subject))
    yield Op(K.SYNC)
    yield Op(K.SYNCFS, "")


def _subject(ops: Sequence[Op]) -> str:
    """The name a window's durability op should cover: the last op's file or its name."""
    op = ops[-1]
    moved = op.kind in (OpKind.RENAME, OpKind.RENAME_NOREPLACE, OpKind.RENAME_EXCHANGE,
                        OpKind.RENAME_WHITEOUT, OpKind.LINK, OpKind.COPY_FILE_RANGE,
                        OpKind.CLONE, OpKind.CLONE_RANGE, OpKind.DEDUPE_RANGE)
    return op.dst if moved else op.path


def _candidates(g: _Gen, rows: Sequence[str], want: int = TOP_ROWS,
                keep: Callable[[list[Op]], bool] = lambda ops: True) -> list[list[Op]]:
    """Valid candidates from the makers of the first ``want`` of ``rows`` that have any
    (the rows are in order of need)."""
    out = []
    served = 0
    for row in rows:
        maker = MAKERS.get(row)
        if maker is None:
            continue
        found = []
        drawn = list(maker(g))
        g.rng.shuffle(drawn)
        for ops in drawn:
            if keep(ops) and g.valid(ops):
                found.append(ops)
                if len(found) == PER_ROW:
                    break
        if found:
            out += found
            served += 1
            if served == want:
                break
    return out


def _on(subject: str) -> Callable[[list[Op]], bool]:
    """Whether a candidate is one op on ``subject``: a window's ops after its first."""
    return lambda ops: len(ops) == 1 and _subject(ops) == subject


def _best(g: _Gen, candidates: list[list[Op]]) -> tuple[list[Op], float] | None:
    """The candidate whose cells are rarest (per op, a run of ops less than its length),
    and its score."""
    g.rng.shuffle(candidates)
    scored = [(g.score(ops) / len(ops) ** 0.5, ops) for ops in candidates]
    if not scored:
        return None
    best = max(scored, key=lambda pair: pair[0])
    return best[1], best[0]


def _rows_by_need(g: _Gen) -> list[str]:
    rows = [r for r in MAKERS if r in ROWS and any(c in g.offered for c in ROWS[r].cells())]
    g.rng.shuffle(rows)
    rows.sort(key=g.row_weight, reverse=True)
    return rows


def _start(g: _Gen) -> None:
    """The pool's directories and a file in each, with data: what the makers act on."""
    K = OpKind
    for d in DIRS:
        g.emit(Op(K.MKDIR, d))
    for f in ("f0", "d0/f0", "d1/f0", "d0/e/f0"):
        g.emit(Op(K.CREAT, f))
        g.emit(Op(K.PWRITE, f, offset=0, length=2 * B + 100))
    for f in BIG[:BIG_FIRST]:
        g.emit(Op(K.CREAT, f))
    g.emit(Op(K.SYNC))


def cover_ops(n_ops: int, seed: int, selection: OpSelection) -> list[Op]:
    """About ``n_ops`` operations in windows, each closed by a durability op, that produce
    the offered cells least produced so far first (see the module docstring)."""
    g = _Gen(seed, selection)
    _start(g)
    stale = 0
    while len(g.ops) < n_ops and stale < 20:
        rows = _rows_by_need(g)
        found = _best(g, _candidates(g, rows, want=FIRST_ROWS))
        if found is None:
            stale += 1
            continue
        first, first_score = found
        lone = _lone_durable(g)
        if lone is not None and lone[1] > first_score:
            g.emit(lone[0])
            continue
        window = [*first]
        trial = g.fork()
        links = _other_links(trial, first[-1])
        for op in first:
            trial.emit(op)
        subject = _subject(first)
        while len(window) < WINDOW_MAX:
            more = _best(trial, _candidates(trial, _rows_by_need(trial), keep=_on(subject)))
            if more is None or more[1] < first_score / 3 or more[1] <= 0:
                break
            window += more[0]
            links = _other_links(trial, more[0][0]) or links
            trial.emit(more[0][0])
            subject = _subject(more[0])
        durable = _choose_durable(trial, subject, links)
        if durable is None:
            stale += 1
            continue
        stale = 0
        for op in window:
            g.emit(op)
        g.emit(durable[0])
    # Files left immutable or append-only get their flags cleared, so that what ran the
    # workload can remove them (setflags clear is a cell of its own).
    for f in g.files():
        node = g.tracker.model.lookup(f)
        if node is not None and g.tracker.model.nodes[node].flags & (FS_IMMUTABLE_FL |
                                                                      FS_APPEND_FL):
            g.emit(Op(OpKind.SETFLAGS, f, flags=0))
    if not g.ops or g.ops[-1].kind not in DURABILITY_OPS:
        g.emit(Op(OpKind.SYNC))
    return g.ops


def _choose_durable(g: _Gen, subject: str,
                    links: Sequence[str] = ()) -> tuple[Op, float] | None:
    """The durability op after a window on ``subject`` that brings the rarest cells, and
    their weight."""
    best: tuple[float, Op] | None = None
    options = [d for d in _durables(g, subject, links)
               if g.selection.allows_durable(d) and g.tracker.model.check(d) is None]
    g.rng.shuffle(options)
    for d in options:
        row = row_of(d)
        value = sum(g.weight(c) for c in g.tracker.then_cells(d))
        value += sum(g.weight(Cell(row, a, v)) for a, v in g.tracker.args(d).items())
        if best is None or value > best[0]:
            best = (value, d)
    return (best[1], best[0]) if best is not None else None


def _other_links(g: _Gen, op: Op) -> list[str]:
    """The other names in the pool of the file ``op`` unlinks."""
    model = g.tracker.model
    if op.kind is not OpKind.UNLINK:
        return []
    node = model.lookup(op.path)
    return [p for p in (*FILES, *LONG_FILES, *BIG, *OTHERS)
            if p != op.path and node is not None and model.lookup(p) == node]


def _lone_durable(g: _Gen) -> tuple[Op, float] | None:
    """A durability op with no op before it, where its own cells are rare (a sync with
    nothing pending, an fsync of a clean file)."""
    best: tuple[float, Op] | None = None
    names = [*g.files()[:3], *g.dirs()[:2], ""]
    for name in names:
        for d in _durables(g, name):
            if not g.selection.allows_durable(d) or g.tracker.model.check(d) is not None:
                continue
            row = row_of(d)
            value = sum(g.weight(Cell(row, a, v)) for a, v in g.tracker.args(d).items())
            if best is None or value > best[0]:
                best = (value, d)
    return (best[1], best[0]) if best is not None else None
