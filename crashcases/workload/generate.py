"""Crash workloads by name: hand-written cases, generated sequences, random runs.

Specs:

- ``hand:<name>``: a known idiom (atomic replace, log append, ...).
- ``gen:seq1``: every operation variant on a small file set, followed by
  each durability op that could make it durable.
- ``gen:seq2``: every ordered pair of operation variants, each followed
  by a durability op (rotating through the ones that apply).
- ``gen:seq3``: a seeded sample of triples (``max_sequences``, default
  ``SEQ3_DEFAULT``).
- ``gen:burst``: a seeded sample of bounded bursts (``max_sequences``,
  default ``BURST_DEFAULT``): two or three operations with mostly no
  durability op between them, on a small set of names some of which the
  burst must create (a new directory, a file in it), then one durability op
  of a file or directory the burst named or of one above it.
- ``gen:chain``: a seeded sample of chains (``max_sequences``, default
  ``CHAIN_DEFAULT``) on the setup's file in a subdirectory: optionally a new
  directory beside it, a first move, fsync of the file, a second move, then one
  durability op of the file or of a directory that holds one of its names. A
  move changes the file's data or size, gives it another name, or changes the
  names around it. Crash bugs of fsync logs (a btrfs log tree, f2fs
  roll-forward, ext4 fast commits) live where an fsync logged a file in the
  running transaction and a later change to it or its names is logged
  incrementally: the chain is that shape, every move on every side of it.
- ``random:N``: N random ops for the seed, durability ops interleaved.
- ``ranges:N``: N random data ops on two files, every offset relative to the
  file's size at that point, durability ops interleaved (see ``ranges_ops``).

Which operations the generators use is an ``OpSelection``: given a
target's capabilities (``load_case(..., capabilities=...)``, as ``powercut
crash`` does) they add the newer operations (direct I/O, mmap and msync,
O_SYNC/O_DSYNC writes, sync_file_range, syncfs, renameat2, copy_file_range,
reflinks, collapse/insert range) the target's filesystem has, and argument
partitions in the manner of CM-IOCov (sizes below, at and across page and
block boundaries, unaligned offsets, writes at the end and into holes,
zero-length calls where the syscall allows them). Without capabilities
they keep the classic operation set, so a seed gives the workload it always
gave. ``ops`` (``--ops``) narrows the generated operations to some kinds.

Every recording costs a mkfs and a mount in a VM, so generated sequences
are *packed*: each runs in its own directory (``s0017/`` is always the
sequence numbered 17 of its enumeration), one after the other, each
starting from a synced setup (two files with content, an xattr, a
subdirectory and an empty directory) so that its operation has something
to act on.

A packed tree would grow with every sequence, and every crash state
checks the whole tree: the check of a late state would cost as much as
hundreds of early ones. So every ``RETIRE_EVERY`` sequences the packer
*retires* the finished ones: it unlinks and removes everything in their
directories, deepest first, and syncs. The sequences run exactly as
before; the removal is one more workload step whose crash states are
checked like any other, and it makes the filesystem reuse freed blocks
and inodes, which is where crash bugs like to hide.
"""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from crashcases.oracle.log import NodeKind
from crashcases.workload.kinds import CLASSIC_FALLOC_MODES
from crashcases.workload.model import FsModel
from crashcases.workload.ops import (
    ASSUMED_CAPABILITIES,
    DURABILITY_OPS,
    FallocMode,
    Op,
    OpKind,
    Workload,
    WorkloadError,
    required_capability,
)
from crashcases.workload.tree import parent_of
from framework.core.errors import ConfigError

SEQ3_DEFAULT = 200
RETIRE_EVERY = 16  # sequences per retirement of finished namespaces (see above)
B = 4096

# ---------------------------------------------------------------------------
# Packing


def _prefix(path: str, ns: str) -> str:
    return f"{ns}/{path}" if path else ns


def pack(
    workloads: Sequence[Workload],
    *,
    name: str = "packed",
    seed: int = 0,
    namespaces: Sequence[str] | None = None,
    retire_every: int | None = None,
) -> Workload:
    """One workload running each of ``workloads`` in its own top-level directory, in turn.

    Paths (and ``fsync_dir`` of the root) move under the namespace;
    ``sync`` stays global; symlink targets must be relative to stay inside.
    With ``retire_every=N``, after every N workloads (and after the last)
    the directories of those N are emptied and removed, then synced.
    """
    if retire_every is not None and retire_every < 1:
        raise WorkloadError(f"pack {name!r}: retire_every must be at least 1, got {retire_every}")
    names = (
        list(namespaces) if namespaces is not None else [f"s{i:04d}" for i in range(len(workloads))]
    )
    if len(names) != len(workloads) or len(set(names)) != len(names):
        raise WorkloadError(
            f"pack {name!r}: need {len(workloads)} distinct namespaces, got {names!r}"
        )
    ops: list[Op] = []
    model = FsModel()  # the tree so far, for retirement only

    def add(op: Op) -> None:
        ops.append(op)
        if retire_every is not None:
            problem = model.check(op)
            if problem is not None:
                raise WorkloadError(f"pack {name!r}: {op.describe()}: {problem}")
            model.apply(op, bytes(op.length))

    live: list[str] = []
    for ns, w in zip(names, workloads, strict=True):
        if "/" in ns or not ns:
            raise WorkloadError(f"pack {name!r}: namespace {ns!r} must be one path component")
        if retire_every is not None and len(live) == retire_every:
            for op in _retire(live, model):
                add(op)
            live = []
        live.append(ns)
        add(Op(OpKind.MKDIR, ns))
        for op in w.ops:
            if op.kind is OpKind.SYMLINK and op.target.startswith("/"):
                raise WorkloadError(f"pack {name!r}: {w.name} has an absolute symlink target")
            if op.kind is OpKind.SYNC:
                add(op)
            else:
                add(
                    replace(
                        op, path=_prefix(op.path, ns), dst=_prefix(op.dst, ns) if op.dst else ""
                    )
                )
    if retire_every is not None and live:
        for op in _retire(live, model):
            add(op)
    return Workload(name=name, seed=seed, ops=tuple(ops))


def _retire(namespaces: Sequence[str], model: FsModel) -> list[Op]:
    """Ops that remove ``namespaces`` and all they hold (deepest first), then ``sync``."""
    out: list[Op] = []
    for ns in namespaces:
        paths = sorted(model.bindings(ns), key=lambda p: (-p.count("/"), p))
        for path in paths:
            kind = model.kind_of(path)
            out.append(Op(OpKind.RMDIR if kind is NodeKind.DIR else OpKind.UNLINK, path))
    out.append(Op(OpKind.SYNC))
    return out


# ---------------------------------------------------------------------------
# Which operations a generator may use


@dataclass(frozen=True, slots=True)
class OpSelection:
    """Which operations generated workloads use (see the module docstring).

    ``capabilities`` None and ``kinds`` None: the classic set only.
    Otherwise the classic set and the newer operations, those that need a
    capability only if it is in ``capabilities``; ``kinds`` keeps only
    those op kinds. Durability ops named in ``kinds`` are the only ones
    that follow each op; if it names none, every one that applies may.
    """

    capabilities: frozenset[str] | None = None
    kinds: frozenset[OpKind] | None = None

    @property
    def extended(self) -> bool:
        return self.capabilities is not None or self.kinds is not None

    def capable(self, op: Op) -> bool:
        need = required_capability(op)
        if need is None:
            return True
        if self.capabilities is None:
            return need in ASSUMED_CAPABILITIES
        return need in self.capabilities

    def allows(self, op: Op) -> bool:
        """Whether ``op`` may be one of the generated operations."""
        return (self.kinds is None or op.kind in self.kinds) and self.capable(op)

    def allows_durable(self, op: Op) -> bool:
        """Whether durability op ``op`` may follow an operation to make it durable."""
        if self.kinds is not None and self.kinds & DURABILITY_OPS and op.kind not in self.kinds:
            return False
        return self.capable(op)


CLASSIC = OpSelection()


def parse_ops(names: Iterable[str], *, where: str = "ops") -> frozenset[OpKind]:
    """Op kinds by name; ConfigError naming the first unknown one and listing the known ones."""
    out = set()
    for name in names:
        try:
            out.add(OpKind(name.strip()))
        except ValueError:
            known = ", ".join(sorted(k.value for k in OpKind))
            raise ConfigError(f"{where}: unknown operation {name.strip()!r} (known: {known})") from None
    if not out:
        raise ConfigError(f"{where}: name at least one operation")
    return frozenset(out)


# ---------------------------------------------------------------------------
# The file set and the operation variants


def _setup() -> list[Op]:
    return [
        Op(OpKind.MKDIR, "d"),
        Op(OpKind.MKDIR, "e"),
        Op(OpKind.CREAT, "f0"),
        Op(OpKind.WRITE, "f0", length=2 * B + 100),
        Op(OpKind.SETXATTR, "f0", xattr="user.pc", length=16),
        Op(OpKind.CREAT, "d/f1"),
        Op(OpKind.WRITE, "d/f1", length=B + 904),
        Op(OpKind.SYNC),
    ]


def _variants() -> list[tuple[str, Op]]:
    """(label, op) for every operation with its parameter variants, on the setup's file set."""
    F = FallocMode
    return [
        ("creat-new", Op(OpKind.CREAT, "f2")),
        ("creat-new-in-subdir", Op(OpKind.CREAT, "d/f2")),
        ("creat-truncates", Op(OpKind.CREAT, "f0")),
        ("mkdir", Op(OpKind.MKDIR, "d2")),
        ("mkdir-nested", Op(OpKind.MKDIR, "d/e2")),
        ("write-small", Op(OpKind.WRITE, "f0", length=100)),
        ("write-large", Op(OpKind.WRITE, "f0", length=3 * B + 7)),
        ("pwrite-aligned", Op(OpKind.PWRITE, "f0", offset=B, length=B)),
        ("pwrite-unaligned", Op(OpKind.PWRITE, "f0", offset=10, length=100)),
        ("pwrite-past-eof", Op(OpKind.PWRITE, "f0", offset=4 * B, length=B)),
        ("append-small", Op(OpKind.APPEND, "f0", length=100)),
        ("append-blocks", Op(OpKind.APPEND, "f0", length=2 * B)),
        ("truncate-zero", Op(OpKind.TRUNCATE, "f0", size=0)),
        ("truncate-shrink", Op(OpKind.TRUNCATE, "f0", size=B + 10)),
        ("truncate-grow", Op(OpKind.TRUNCATE, "f0", size=5 * B)),
        ("fallocate", Op(OpKind.FALLOCATE, "f0", offset=2 * B, length=2 * B, falloc=F.ALLOCATE)),
        (
            "fallocate-keep-size",
            Op(OpKind.FALLOCATE, "f0", offset=2 * B, length=4 * B, falloc=F.KEEP_SIZE),
        ),
        ("punch-hole", Op(OpKind.FALLOCATE, "f0", offset=0, length=B, falloc=F.PUNCH_HOLE)),
        ("zero-range", Op(OpKind.FALLOCATE, "f0", offset=B, length=B, falloc=F.ZERO_RANGE)),
        ("rename-new-name", Op(OpKind.RENAME, "f0", dst="f2")),
        ("rename-replace", Op(OpKind.RENAME, "f0", dst="d/f1")),
        ("rename-to-subdir", Op(OpKind.RENAME, "d/f1", dst="f3")),
        ("rename-dir", Op(OpKind.RENAME, "d", dst="d2")),
        ("link", Op(OpKind.LINK, "f0", dst="f2")),
        ("link-to-subdir", Op(OpKind.LINK, "f0", dst="d/f2")),
        ("unlink", Op(OpKind.UNLINK, "f0")),
        ("unlink-in-subdir", Op(OpKind.UNLINK, "d/f1")),
        ("rmdir", Op(OpKind.RMDIR, "e")),
        ("symlink", Op(OpKind.SYMLINK, "l", target="f0")),
        ("setxattr-new", Op(OpKind.SETXATTR, "f0", xattr="user.new", length=20)),
        ("setxattr-replace", Op(OpKind.SETXATTR, "f0", xattr="user.pc", length=30)),
        ("removexattr", Op(OpKind.REMOVEXATTR, "f0", xattr="user.pc")),
    ]


def _newer_variants() -> list[tuple[str, Op]]:
    """Argument partitions of the classic ops, and the newer ops, on the setup's file set.

    The setup's f0 has 2 blocks + 100 B, d/f1 1 block + 904 B. Writes into
    holes come from pairs: truncate-grow or punch-hole, then a pwrite there.
    """
    F, K = FallocMode, OpKind
    return [
        ("pwrite-below-page", Op(K.PWRITE, "f0", offset=0, length=B - 1)),
        ("pwrite-across-page", Op(K.PWRITE, "f0", offset=B - 10, length=20)),
        ("pwrite-unaligned-blocks", Op(K.PWRITE, "f0", offset=100, length=2 * B)),
        ("pwrite-at-eof", Op(K.PWRITE, "f0", offset=2 * B + 100, length=10)),
        ("pwrite-hole", Op(K.PWRITE, "f0", offset=4 * B + 7, length=300)),
        ("pwrite-zero", Op(K.PWRITE, "f0", offset=10, length=0)),
        ("write-zero", Op(K.WRITE, "f0", length=0)),
        ("append-across-page", Op(K.APPEND, "f0", length=B)),
        ("truncate-block", Op(K.TRUNCATE, "f0", size=2 * B)),
        ("truncate-same", Op(K.TRUNCATE, "f0", size=2 * B + 100)),
        ("truncate-grow-unaligned", Op(K.TRUNCATE, "f0", size=3 * B + 1)),
        ("punch-unaligned", Op(K.FALLOCATE, "f0", offset=100, length=B, falloc=F.PUNCH_HOLE)),
        ("zero-range-extend", Op(K.FALLOCATE, "f0", offset=2 * B, length=2 * B, falloc=F.ZERO_RANGE)),
        ("direct-write", Op(K.DIRECT_WRITE, "f0", offset=0, length=B)),
        ("direct-write-extend", Op(K.DIRECT_WRITE, "f0", offset=3 * B, length=2 * B)),
        ("direct-write-zero", Op(K.DIRECT_WRITE, "f0", offset=0, length=0)),
        ("mmap-write", Op(K.MMAP_WRITE, "f0", offset=100, length=B)),
        ("mmap-write-tail", Op(K.MMAP_WRITE, "f0", offset=2 * B, length=100)),
        ("write-osync", Op(K.WRITE_OSYNC, "f0", offset=B, length=100)),
        ("write-osync-extend", Op(K.WRITE_OSYNC, "f0", offset=2 * B + 100, length=B)),
        ("write-odsync", Op(K.WRITE_ODSYNC, "f0", offset=10, length=2 * B)),
        ("write-odsync-extend", Op(K.WRITE_ODSYNC, "d/f1", offset=B + 904, length=3000)),
        ("sync-file-range", Op(K.SYNC_FILE_RANGE, "f0", offset=0, length=B)),
        ("sync-file-range-all", Op(K.SYNC_FILE_RANGE, "f0")),
        ("rename-noreplace", Op(K.RENAME_NOREPLACE, "f0", dst="f2")),
        ("rename-noreplace-dir", Op(K.RENAME_NOREPLACE, "d", dst="d2")),
        ("rename-exchange", Op(K.RENAME_EXCHANGE, "f0", dst="d/f1")),
        ("rename-exchange-dirs", Op(K.RENAME_EXCHANGE, "d", dst="e")),
        ("rename-exchange-file-dir", Op(K.RENAME_EXCHANGE, "f0", dst="e")),
        ("copy-file-range", Op(K.COPY_FILE_RANGE, "f0", dst="d/f1", offset=0, length=B)),
        (
            "copy-file-range-extend",
            Op(K.COPY_FILE_RANGE, "f0", dst="d/f1", offset=B, length=B + 100, dst_offset=B + 904),
        ),
        ("copy-file-range-zero", Op(K.COPY_FILE_RANGE, "f0", dst="d/f1", offset=0, length=0)),
        ("clone", Op(K.CLONE, "f0", dst="d/f1")),
        ("clone-range", Op(K.CLONE_RANGE, "f0", dst="d/f1", offset=0, length=B, dst_offset=B)),
        # The source's unaligned end of file, to the destination's end (length 0: to EOF).
        ("clone-range-eof", Op(K.CLONE_RANGE, "d/f1", dst="f0", offset=B, dst_offset=2 * B)),
        ("collapse-range", Op(K.FALLOCATE, "f0", offset=0, length=B, falloc=F.COLLAPSE_RANGE)),
        ("insert-range", Op(K.FALLOCATE, "f0", offset=B, length=B, falloc=F.INSERT_RANGE)),
        ("insert-range-start", Op(K.FALLOCATE, "f0", offset=0, length=2 * B, falloc=F.INSERT_RANGE)),
    ]


def variants(selection: OpSelection = CLASSIC) -> list[tuple[str, Op]]:
    """The (label, op) variants a selection allows: the classic ones, then the newer ones."""
    found = _variants() + (_newer_variants() if selection.extended else [])
    return [(label, op) for label, op in found if selection.allows(op)]


def durables(op: Op, model: FsModel, selection: OpSelection = CLASSIC) -> list[Op]:
    """Durability ops that could make ``op`` durable, valid in ``model`` (after ``op``)."""
    K = OpKind
    moves = (K.RENAME, K.LINK, K.RENAME_NOREPLACE, K.RENAME_EXCHANGE, K.COPY_FILE_RANGE,
             K.CLONE, K.CLONE_RANGE)
    subject = op.dst if op.kind in moves else op.path
    out: list[Op] = []
    kind = model.kind_of(subject)
    if kind is NodeKind.FILE:
        out += [Op(OpKind.FSYNC, subject), Op(OpKind.FDATASYNC, subject)]
        if selection.extended:
            out += _msyncs(op, subject, model)
    if kind is NodeKind.DIR:
        out.append(Op(OpKind.FSYNC_DIR, subject))
    out.append(Op(OpKind.FSYNC_DIR, parent_of(subject)))
    renames = (K.RENAME, K.RENAME_NOREPLACE, K.RENAME_EXCHANGE)
    if op.kind in renames and parent_of(op.path) != parent_of(op.dst):
        out.append(Op(OpKind.FSYNC_DIR, parent_of(op.path)))
    out.append(Op(OpKind.SYNC))
    if selection.extended:
        out.append(Op(OpKind.SYNCFS, ""))
    return [d for d in out if model.check(d) is None and selection.allows_durable(d)]


def _msyncs(op: Op, subject: str, model: FsModel) -> list[Op]:
    """msync of what ``op`` changed in ``subject`` if that is a byte range, else of all of it."""
    node_id = model.lookup(subject)
    size = len(model.nodes[node_id].data) if node_id is not None else 0
    start, end = 0, size
    if op.kind in (OpKind.PWRITE, OpKind.DIRECT_WRITE, OpKind.MMAP_WRITE) and op.length:
        start, end = op.offset, min(op.offset + op.length, size)
    elif op.kind in (OpKind.COPY_FILE_RANGE, OpKind.CLONE_RANGE) and op.length:
        start, end = op.dst_offset, min(op.dst_offset + op.length, size)
    return [Op(OpKind.MSYNC, subject, offset=start, length=end - start)] if end > start else []


def _try(ops: Sequence[Op]) -> FsModel | None:
    """The model after ``ops``, or None if one of them cannot be applied."""
    model = FsModel()
    for op in ops:
        if model.check(op) is not None:
            return None
        model.apply(op, bytes(op.length))
    return model


def _rotation(turns: list[int]) -> Callable[[list[Op]], Op]:
    """A picker choosing entry ``turns[n] % len`` at its n-th call."""
    it = iter(turns)
    return lambda choices: choices[next(it) % len(choices)]


def _sequence(
    ops: Sequence[Op], pick: Callable[[list[Op]], Op], selection: OpSelection = CLASSIC
) -> list[Op] | None:
    """Setup, then each op followed by a durability op ``pick``ed from those that apply.

    If the selection leaves none that applies, the op is followed by none
    (it may be a durability op itself).
    """
    out = _setup()
    model = _try(out)
    assert model is not None
    for op in ops:
        if model.check(op) is not None:
            return None
        model.apply(op, bytes(op.length))
        out.append(op)
        choices = durables(op, model, selection)
        if choices:
            sync_op = pick(choices)
            out.append(sync_op)
            model.apply(sync_op)
    return out


def seq1(selection: OpSelection = CLASSIC) -> list[tuple[str, list[Op]]]:
    """Every op variant followed by every durability op that applies to it."""
    out = []
    for label, op in variants(selection):
        model = _try([*_setup(), op])
        assert model is not None, label
        choices = durables(op, model, selection)
        for d in choices:
            out.append((f"{label}+{d.describe()}", [*_setup(), op, d]))
        if not choices:
            out.append((label, [*_setup(), op]))
    return out


def seq2(selection: OpSelection = CLASSIC) -> list[tuple[str, list[Op]]]:
    """Every valid ordered pair of op variants, each followed by a rotating durability op."""
    return [(label, list(ops)) for label, ops in _seq2(selection)]


@functools.lru_cache(maxsize=8)
def _seq2(selection: OpSelection) -> tuple[tuple[str, tuple[Op, ...]], ...]:
    # Thousands of pairs, each checked against the model: seconds of work that a
    # study's steps (one per target, often the same selection) would otherwise repeat.
    found = variants(selection)
    out = []
    for (i, (la, a)), (j, (lb, b)) in itertools.product(enumerate(found), repeat=2):
        ops = _sequence((a, b), _rotation([i + j, i * 7 + j * 3]), selection)
        if ops is not None:
            out.append((f"{la},{lb}", tuple(ops)))
    return tuple(out)


def seq3(seed: int, count: int, selection: OpSelection = CLASSIC) -> list[tuple[int, str, list[Op]]]:
    """A seeded sample of ``count`` valid triples, each op followed by a random durability op."""
    rng = random.Random(f"powercut-seq3:{seed}")
    variants_ = variants(selection)
    out: list[tuple[int, str, list[Op]]] = []
    attempts = 0
    while variants_ and len(out) < count and attempts < count * 50:
        attempts += 1
        picks = [rng.randrange(len(variants_)) for _ in range(3)]
        ops = _sequence([variants_[p][1] for p in picks], rng.choice, selection)
        if ops is not None:
            index = (picks[0] * len(variants_) + picks[1]) * len(variants_) + picks[2]
            out.append((index, ",".join(variants_[p][0] for p in picks), ops))
    return out


# ---------------------------------------------------------------------------
# Bounded bursts


BURST_DEFAULT = 200
#: The burst's names: some exist after the setup (f0, d/f1, d, e), some do not
#: (f2, d/f2, the directory n and what is under it), so that a burst creates,
#: reuses and moves names, a file's name may become a directory's, and a burst
#: works in a directory it made itself.
_BURST_FILES = ("f0", "f2", "d/f1", "d/f2", "n/f0", "n/f1")
_BURST_DIRS = ("d", "e", "n", "n/m")


#: How often a burst's operation names something an earlier one of the burst named.
_BURST_CHAIN = 0.6


def _burst_makers(
    rng: random.Random, selection: OpSelection, touched: list[str]
) -> list[Callable[[], Op]]:
    """Core operations of a burst, each with names from the burst's pool.

    Crash bugs live in relations between operations (the file an earlier op
    changed, a directory made in the same burst): after the first operation, a
    name is ``_BURST_CHAIN`` of the time one that ``touched`` (the burst's names
    so far) already holds.
    """
    K = OpKind

    def pick(pool: tuple[str, ...]) -> str:
        seen = [name for name in touched if name in pool]
        return rng.choice(seen if seen and rng.random() < _BURST_CHAIN else pool)

    def f() -> str:
        return pick(_BURST_FILES)

    def any_name() -> str:
        return pick(_BURST_FILES + _BURST_DIRS)

    modes = [m for m in FallocMode if (selection.extended or m in CLASSIC_FALLOC_MODES)]
    makers: list[Callable[[], Op]] = [
        lambda: Op(K.CREAT, f()),
        lambda: Op(K.MKDIR, pick(_BURST_DIRS + _BURST_FILES)),
        lambda: Op(K.WRITE, f(), length=rng.choice((1, B + 5, 2 * B + 5))),
        lambda: Op(K.PWRITE, f(), offset=rng.choice((0, 100, B, 2 * B, 4 * B)),
                   length=rng.choice((100, B, 2 * B + 5))),
        lambda: Op(K.APPEND, f(), length=rng.choice((100, B + 1))),
        lambda: Op(K.TRUNCATE, f(), size=rng.choice((0, 0, B + 10, 3 * B))),
        # Aligned ranges over the end of the setup's files and past it (punch and zero
        # over the page holding a new end of file, allocation past it).
        lambda: Op(K.FALLOCATE, f(), offset=rng.choice((0, B, 2 * B)),
                   length=rng.choice((B, 2 * B)), falloc=rng.choice(modes)),
        lambda: Op(K.LINK, f(), dst=f()),
        lambda: Op(K.RENAME, any_name(), dst=any_name()),
        lambda: Op(K.UNLINK, f()),
        lambda: Op(K.RMDIR, pick(_BURST_DIRS)),
        lambda: Op(K.SYMLINK, rng.choice(("l", "d/l", "n/l")), target=rng.choice(("f0", "../f0"))),
        lambda: Op(K.SETXATTR, any_name(), xattr=rng.choice(("user.pc", "user.b")), length=30),
    ]
    if selection.extended:
        makers += [
            lambda: Op(K.RENAME_EXCHANGE, any_name(), dst=any_name()),
            lambda: Op(K.DIRECT_WRITE, f(), offset=rng.choice((0, B, 3 * B)), length=B),
            lambda: Op(K.MMAP_WRITE, f(), offset=rng.choice((0, 100, B)), length=100),
            lambda: Op(K.SYNC_FILE_RANGE, f(), offset=rng.choice((0, B)),
                       length=rng.choice((0, B))),
        ]
    return makers


def _dependencies(op: Op, model: FsModel) -> list[Op]:
    """What ``op`` needs first in ``model``: its missing parent directories, and the file
    it acts on if that is missing (as ACE adds them)."""
    out: list[Op] = []
    for path in (op.path, op.dst):
        parts = path.split("/")[:-1] if path else []
        for n in range(1, len(parts) + 1):
            d = "/".join(parts[:n])
            if model.kind_of(d) is None and Op(OpKind.MKDIR, d) not in out:
                out.append(Op(OpKind.MKDIR, d))
    creates = (OpKind.CREAT, OpKind.MKDIR, OpKind.SYMLINK, OpKind.RMDIR, OpKind.RENAME,
               OpKind.RENAME_NOREPLACE, OpKind.RENAME_EXCHANGE, OpKind.SETXATTR)
    if op.kind not in creates and op.path and model.kind_of(op.path) is None:
        out.append(Op(OpKind.CREAT, op.path))
    return out


def _final_durables(ops: Sequence[Op], model: FsModel, selection: OpSelection) -> list[Op]:
    """Each durability op of every file and directory a burst named, ancestors included."""
    names: dict[str, None] = {}
    for op in ops:
        for path in (op.path, op.dst):
            while path:
                names[path] = None
                path = parent_of(path)
    names[""] = None
    out: list[Op] = []
    for name in names:
        kind = model.kind_of(name)
        if kind is NodeKind.FILE:
            out += [Op(OpKind.FSYNC, name), Op(OpKind.FDATASYNC, name)]
        elif kind is NodeKind.DIR:
            out.append(Op(OpKind.FSYNC_DIR, name))
    return [d for d in out if model.check(d) is None and selection.allows_durable(d)]


def burst(seed: int, count: int, selection: OpSelection = CLASSIC) -> list[tuple[int, str, list[Op]]]:
    """A seeded sample of ``count`` bounded bursts (see ``load_case``'s ``gen:burst``).

    After the setup, two or three core operations (with the parents or file each
    needs added in front, as ACE does), each followed by nothing or, one time in
    three, by a durability op of what it changed; then one durability op drawn from
    those of every file and directory the burst named, ancestors included.
    """
    rng = random.Random(f"powercut-burst:{seed}")
    touched: list[str] = []
    makers = _burst_makers(rng, selection, touched)
    out: list[tuple[int, str, list[Op]]] = []
    attempts = 0
    while len(out) < count and attempts < count * 50:
        attempts += 1
        ops = _setup()
        model = _try(ops)
        assert model is not None
        core: list[Op] = []
        touched.clear()
        steps = rng.choice((2, 3, 3))
        for n in range(steps):
            op = None
            for _ in range(50):
                candidate = rng.choice(makers)()
                if not selection.allows(candidate) or not selection.capable(candidate):
                    continue
                deps = _dependencies(candidate, model)
                trial = _try([*ops, *deps, candidate])
                if trial is not None:
                    op, model = candidate, trial
                    break
            if op is None:
                break
            ops += [*deps, op]
            core += [*deps, op]
            for name in (op.path, op.dst):
                while name:
                    touched.append(name)
                    name = parent_of(name)
            if n < steps - 1 and rng.random() < 1 / 3:
                middle = [d for d in durables(op, model, selection)
                          if d.kind not in (OpKind.SYNC, OpKind.SYNCFS)]
                if middle:
                    ops.append(rng.choice(middle))
                    model.apply(ops[-1])
        finals = _final_durables(core, model, selection) if core else []
        if not finals:
            continue
        ops.append(rng.choice(finals))
        label = ";".join(op.describe() for op in ops[len(_setup()):])
        out.append((len(out), label, ops))
    return out


# ---------------------------------------------------------------------------
# Chains: persist a file, then change it or what names it, then persist again

CHAIN_DEFAULT = 200
_CHAIN_SUBJECT = "d/f1"  # the setup's file in a subdirectory: a parent that is not the root
_CHAIN_OTHER = "e"  # the setup's other directory


def _size(model: FsModel, path: str) -> int:
    node_id = model.lookup(path)
    return len(model.nodes[node_id].data) if node_id is not None else 0


def _chain_moves(x: str, model: FsModel, tag: str) -> list[tuple[str, list[Op], str, bool]]:
    """(label, ops, subject after, whether it changed names) for each move on file ``x``.

    A move changes the file's data or size, gives it another name, or changes the names
    around it: a new directory beside it (``n``, made when a move needs it and not there),
    entries in that directory, or its parent moved away and its old name reused by a new
    file, which becomes the subject. ``tag`` keeps the names of two moves apart."""
    K, F = OpKind, FallocMode
    size, p = _size(model, x), parent_of(x)
    eof = size // B * B
    under = (lambda name: f"{p}/{name}") if p else (lambda name: name)
    newdir = under("n")
    mk = [] if model.kind_of(newdir) is NodeKind.DIR else [Op(K.MKDIR, newdir)]
    other = _CHAIN_OTHER if not x.startswith(_CHAIN_OTHER + "/") else ""
    elsewhere = f"{other}/r{tag}" if other else f"r{tag}"
    moves: list[tuple[str, list[Op], str, bool]] = [
        ("overwrite", [Op(K.PWRITE, x, offset=0, length=B)], x, False),
        ("extend", [Op(K.PWRITE, x, offset=size, length=B + 5)], x, False),
        ("truncate-zero", [Op(K.TRUNCATE, x, size=0)], x, False),
        ("truncate-grow", [Op(K.TRUNCATE, x, size=size + 3 * B)], x, False),
        ("punch-eof", [Op(K.FALLOCATE, x, offset=eof, length=B, falloc=F.PUNCH_HOLE)], x, False),
        ("zero-eof", [Op(K.FALLOCATE, x, offset=eof, length=2 * B, falloc=F.ZERO_RANGE)], x,
         False),
        ("setxattr", [Op(K.SETXATTR, x, xattr="user.pc", length=30)], x, False),
        ("link", [Op(K.LINK, x, dst=under(f"l{tag}"))], x, True),
        ("link-new-dir", [*mk, Op(K.LINK, x, dst=f"{newdir}/l{tag}")], x, True),
        ("rename", [Op(K.RENAME, x, dst=under(f"r{tag}"))], under(f"r{tag}"), True),
        ("rename-new-dir", [*mk, Op(K.RENAME, x, dst=f"{newdir}/r{tag}")], f"{newdir}/r{tag}",
         True),
        ("rename-elsewhere", [Op(K.RENAME, x, dst=elsewhere)], elsewhere, True),
        ("new-entries-beside", [*mk, Op(K.CREAT, f"{newdir}/h{tag}")], x, True),
    ]
    if size > 100:
        moves.append(("truncate-in-block", [Op(K.TRUNCATE, x, size=size - 100)], x, False))
    if p and other and not other.startswith(p + "/"):
        # The parent moved away and its old name reused by a new file.
        moves.append(("reuse-parent-name", [Op(K.RENAME, p, dst=f"{other}/p{tag}"),
                                            Op(K.CREAT, p)], p, True))
    return moves


def _chain_finals(x: str, old_parent: str, names: bool) -> list[Op]:
    """The durability ops that end a chain: of the file after a data move; after a move of
    names, of the file and of the directories that hold its old and its new name."""
    if not names:
        return [Op(OpKind.FSYNC, x), Op(OpKind.FDATASYNC, x)]
    out = [Op(OpKind.FSYNC_DIR, parent_of(x)), Op(OpKind.FSYNC, x)]
    if old_parent != parent_of(x):
        out.append(Op(OpKind.FSYNC_DIR, old_parent))
    return out


def chains(selection: OpSelection = CLASSIC) -> list[tuple[str, list[Op]]]:
    """Every chain on the setup's file in a subdirectory, in enumeration order (see
    ``chain``)."""
    out: list[tuple[str, list[Op]]] = []
    setup = _setup()
    base = _try(setup)
    assert base is not None
    preludes: list[tuple[str, list[Op]]] = [("", []), ("new-dir", [Op(OpKind.MKDIR, "d/n")])]
    for pre_label, prelude in preludes:
        start = _try([*setup, *prelude])
        assert start is not None
        firsts = [("", [], _CHAIN_SUBJECT, False),
                  *_chain_moves(_CHAIN_SUBJECT, start, "a")]
        for a_label, a_ops, x, _ in firsts:
            head = [*setup, *prelude, *a_ops, Op(OpKind.FSYNC, x)]
            model = _try(head)
            if model is None or not all(selection.allows(op) for op in a_ops):
                continue
            for b_label, b_ops, y, names in _chain_moves(x, model, "b"):
                if not all(selection.allows(op) for op in b_ops):
                    continue
                for final in _chain_finals(y, parent_of(x), names):
                    ops = [*head, *b_ops, final]
                    if not selection.allows_durable(final) or _try(ops) is None:
                        continue
                    label = ";".join(w for w in (pre_label, a_label, f"fsync,{b_label}",
                                                 final.describe()) if w)
                    out.append((label, ops))
    return out


def chain(seed: int, count: int, selection: OpSelection = CLASSIC) -> list[tuple[int, str, list[Op]]]:
    """A seeded sample of ``count`` chains, numbered in a seeded order (see ``load_case``'s
    ``gen:chain``), so that any first part of them is a sample of the whole."""
    found = chains(selection)
    order = list(range(len(found)))
    random.Random(f"powercut-chain:{seed}").shuffle(order)
    return [(n, *found[i]) for n, i in enumerate(order[:count])]


def _sample(
    items: Sequence[tuple[int, str, list[Op]]], limit: int | None, seed: int
) -> list[tuple[int, str, list[Op]]]:
    if limit is None or limit >= len(items):
        return list(items)
    chosen = random.Random(f"powercut-sample:{seed}").sample(range(len(items)), limit)
    return [items[i] for i in sorted(chosen)]


def _packed(spec: str, items: Sequence[tuple[int, str, list[Op]]], seed: int) -> Workload:
    seen: dict[str, None] = {}
    workloads, names = [], []
    for index, label, ops in items:
        ns = f"s{index:04d}" if index < 10_000 else f"s{index}"
        if ns in seen:
            continue  # a sample may draw the same triple twice
        seen[ns] = None
        workloads.append(Workload(name=label, seed=seed, ops=tuple(ops)))
        names.append(ns)
    return pack(workloads, name=spec, seed=seed, namespaces=names, retire_every=RETIRE_EVERY)


# ---------------------------------------------------------------------------
# Random workloads


_RANDOM_FILES = ("f0", "f1", "f2", "d0/f0", "d0/f1", "d1/f0")
_RANDOM_DIRS = ("d0", "d1", "d2", "d0/e")


def _first_valid(make: Callable[[], Op], valid: Callable[[Op], bool], tries: int = 200) -> Op:
    """The first of ``tries`` ops ``make`` draws that is ``valid``; a ``sync`` if none is
    (the random streams' draw: every draw consumes the stream's random numbers in order)."""
    for _ in range(tries):
        op = make()
        if valid(op):
            return op
    return Op(OpKind.SYNC)


def random_ops(
    n_ops: int, seed: int, *, block: int = B, selection: OpSelection = CLASSIC
) -> list[Op]:
    """``n_ops`` valid random ops in directory ``r``, about one in four a durability op.

    ``block`` scales every size and offset: 4 KiB gives small metadata-heavy
    logs; 64 KiB (``stress:N``) gives data-heavy logs like fsstress runs.
    With a selection that names op kinds, creat, mkdir and write stay
    available so that the named ops find files with data to act on.
    """
    B = block
    rng = random.Random(f"powercut-random:{seed}" + ("" if block == 4096 else f":{block}"))
    ops: list[Op] = [Op(OpKind.MKDIR, "r")]
    model = FsModel()
    model.apply(ops[0])

    def path(pool: Sequence[str]) -> str:
        return "r/" + rng.choice(pool)

    def anything() -> str:
        return path(_RANDOM_FILES + _RANDOM_DIRS + ("l0", "d0/l1"))

    falloc_modes: list[FallocMode] = list(CLASSIC_FALLOC_MODES)
    if selection.extended:
        falloc_modes = [m for m in FallocMode if selection.capable(Op(OpKind.FALLOCATE, falloc=m))]
    makers: list[Callable[[], Op]] = [
        lambda: Op(OpKind.CREAT, path(_RANDOM_FILES)),
        lambda: Op(OpKind.MKDIR, path(_RANDOM_DIRS)),
        lambda: Op(OpKind.WRITE, path(_RANDOM_FILES), length=rng.choice((1, 100, B, 2 * B + 5))),
        lambda: Op(
            OpKind.PWRITE,
            path(_RANDOM_FILES),
            offset=rng.randrange(0, 4 * B, 512),
            length=rng.choice((7, 512, B)),
        ),
        lambda: Op(OpKind.APPEND, path(_RANDOM_FILES), length=rng.choice((1, 300, B + 1))),
        lambda: Op(OpKind.TRUNCATE, path(_RANDOM_FILES), size=rng.choice((0, 100, B, 3 * B + 1))),
        lambda: Op(
            OpKind.FALLOCATE,
            path(_RANDOM_FILES),
            offset=rng.randrange(0, 3 * B, B),
            length=rng.choice((B, 2 * B)),
            falloc=rng.choice(falloc_modes),
        ),
        lambda: Op(OpKind.RENAME, anything(), dst=anything()),
        lambda: Op(OpKind.LINK, path(_RANDOM_FILES), dst=path(_RANDOM_FILES)),
        lambda: Op(OpKind.UNLINK, anything()),
        lambda: Op(OpKind.RMDIR, path(_RANDOM_DIRS)),
        lambda: Op(
            OpKind.SYMLINK, path(("l0", "d0/l1")), target=rng.choice(("f0", "../f1", "nowhere"))
        ),
        lambda: Op(
            OpKind.SETXATTR,
            anything(),
            xattr=rng.choice(("user.a", "user.b")),
            length=rng.choice((1, 40)),
        ),
        lambda: Op(OpKind.REMOVEXATTR, anything(), xattr=rng.choice(("user.a", "user.b"))),
    ]
    durable_makers: list[Callable[[], Op]] = [
        lambda: Op(OpKind.FSYNC, path(_RANDOM_FILES)),
        lambda: Op(OpKind.FDATASYNC, path(_RANDOM_FILES)),
        lambda: Op(OpKind.FSYNC_DIR, rng.choice(("r", *(f"r/{d}" for d in _RANDOM_DIRS)))),
        lambda: Op(OpKind.SYNC),
    ]
    if selection.extended:
        makers, durable_makers = _newer_makers(
            selection, rng, path, anything, B, makers, durable_makers, bool(falloc_modes)
        )
    def draw(pool: Sequence[Callable[[], Op]]) -> Op:
        return _first_valid(lambda: rng.choice(pool)(),
                            lambda op: model.check(op) is None and selection.capable(op))

    while len(ops) < n_ops:
        pool = durable_makers if rng.random() < 0.25 or not makers else makers
        pool = pool or makers
        op = draw(pool)
        model.apply(op, bytes(op.length))
        ops.append(op)
    return ops[:n_ops]


#: The two files of ``ranges:N``: ranges and durability ops of one interleave with the
#: other's, so a log or a fast commit holds both.
_RANGES_FILES = ("q/a", "q/b")
#: The operations ``ranges:N`` draws from (``--ops`` must name at least one of them).
RANGES_KINDS = frozenset({
    OpKind.PWRITE, OpKind.APPEND, OpKind.TRUNCATE, OpKind.FALLOCATE, OpKind.DIRECT_WRITE,
    OpKind.MMAP_WRITE, OpKind.FSYNC, OpKind.FDATASYNC, OpKind.WRITE_OSYNC, OpKind.WRITE_ODSYNC,
    OpKind.SYNC,
})


def ranges_ops(n_ops: int, seed: int, *, selection: OpSelection = CLASSIC) -> list[Op]:
    """``n_ops`` valid random data ops on two files, about one in four a durability op.

    Every offset is drawn relative to the file's size at that point: writes at the end,
    past it (leaving a hole) and inside, appends, truncations below, at and above the end,
    and fallocate ranges over the block that holds the end of file, the one before it, a
    block inside, and past the end. So the stream makes what data-path crash bugs need
    that fixed offsets seldom give: a size not yet durable when a range op drops the page
    holding it, files cut into many extents by holes and written back into them, and a
    second fsync of a file in the transaction of the first. With capabilities it uses
    the newer data ops the filesystem has (collapse and insert range, direct I/O, mmap,
    O_SYNC/O_DSYNC writes); ``selection.kinds`` narrows the ops as for ``random:N``.
    """
    K, F = OpKind, FallocMode
    rng = random.Random(f"powercut-ranges:{seed}")
    model = FsModel()
    ops: list[Op] = [Op(K.MKDIR, "q")]
    # The first file is preallocated, then written (as databases and VM images are): its
    # blocks sit where the allocator's goal was, not where delayed allocation would
    # round them to.
    prealloc = Op(K.FALLOCATE, _RANGES_FILES[0], length=15 * B, falloc=F.ALLOCATE)
    ops += [Op(K.CREAT, _RANGES_FILES[0]),
            *([prealloc] if selection.capable(prealloc) else []),
            Op(K.PWRITE, _RANGES_FILES[0], offset=0, length=15 * B),
            Op(K.CREAT, _RANGES_FILES[1]), Op(K.PWRITE, _RANGES_FILES[1], offset=0, length=2 * B),
            Op(K.SYNC)]
    for op in ops:
        model.apply(op, bytes(op.length))
    modes = [m for m in FallocMode if (selection.extended or m in CLASSIC_FALLOC_MODES)]

    def ranges(size: int) -> list[tuple[int, int]]:
        last = (size - 1) // B * B if size else 0  # the block holding the end of file
        end = -(-size // B) * B
        inside = rng.randrange(0, max(last, B), B)
        return [(last, B), (last, 2 * B), (max(last - B, 0), 2 * B), (inside, B),
                (inside, 3 * B), (end, 2 * B)]

    def data_op(f: str) -> Op:
        size = _size(model, f)
        end = -(-size // B) * B
        pick = rng.randrange(11)
        if pick < 2:
            return Op(K.PWRITE, f, offset=size, length=rng.choice((1, 100, B + 5, 3 * B)))
        if pick == 2:
            return Op(K.PWRITE, f, offset=end + rng.choice((B, 3 * B)),
                      length=rng.choice((100, B)))
        if pick == 3:
            return Op(K.PWRITE, f, offset=rng.randrange(0, max(size, 1), 512),
                      length=rng.choice((512, B, 2 * B + 5)))
        if pick == 4:
            return Op(K.APPEND, f, length=rng.choice((100, B + 1)))
        if pick == 5:
            return Op(K.TRUNCATE, f, size=rng.choice((max(size - 100, 0), size // B * B,
                                                       size + 3 * B + 7)))
        if pick < 9:
            offset, length = rng.choice(ranges(size))
            return Op(K.FALLOCATE, f, offset=offset, length=length, falloc=rng.choice(modes))
        if pick == 9:
            return Op(K.DIRECT_WRITE, f, offset=rng.choice((0, size // B * B, end)), length=B)
        return Op(K.MMAP_WRITE, f, offset=rng.randrange(0, max(size, 1)),
                  length=rng.choice((1, 100, B)))

    def durable_op(f: str) -> Op:
        size = _size(model, f)
        pick = rng.randrange(8)
        if pick < 3:
            return Op(K.FSYNC, f)
        if pick < 6:
            return Op(K.FDATASYNC, f)
        if pick == 6:
            return Op(rng.choice((K.WRITE_OSYNC, K.WRITE_ODSYNC)), f,
                      offset=rng.choice((0, size)), length=rng.choice((100, B)))
        return Op(K.SYNC)

    kinds = selection.kinds
    named_durable = kinds is not None and bool(kinds & DURABILITY_OPS)
    classic = frozenset(_CLASSIC_MAKER_KINDS + _CLASSIC_DURABLE_KINDS)

    def wanted(op: Op, durable: bool) -> bool:
        if not selection.extended:
            return op.kind in classic
        if kinds is None or (durable and not named_durable):
            return True
        return op.kind in kinds

    def draw(durable: bool) -> Op:
        make = durable_op if durable else data_op
        return _first_valid(lambda: make(rng.choice(_RANGES_FILES)),
                            lambda op: wanted(op, durable) and selection.capable(op)
                            and model.check(op) is None)

    while len(ops) < n_ops:
        op = draw(rng.random() < 0.25)
        model.apply(op, bytes(op.length))
        ops.append(op)
    return ops[:n_ops]


_CLASSIC_MAKER_KINDS = (
    OpKind.CREAT, OpKind.MKDIR, OpKind.WRITE, OpKind.PWRITE, OpKind.APPEND, OpKind.TRUNCATE,
    OpKind.FALLOCATE, OpKind.RENAME, OpKind.LINK, OpKind.UNLINK, OpKind.RMDIR, OpKind.SYMLINK,
    OpKind.SETXATTR, OpKind.REMOVEXATTR,
)
_CLASSIC_DURABLE_KINDS = (OpKind.FSYNC, OpKind.FDATASYNC, OpKind.FSYNC_DIR, OpKind.SYNC)
_SETUP_KINDS = frozenset({OpKind.CREAT, OpKind.MKDIR, OpKind.WRITE})


def _newer_makers(
    selection: OpSelection,
    rng: random.Random,
    path: Callable[[Sequence[str]], str],
    anything: Callable[[], str],
    B: int,
    makers: list[Callable[[], Op]],
    durable_makers: list[Callable[[], Op]],
    falloc: bool = True,
) -> tuple[list[Callable[[], Op]], list[Callable[[], Op]]]:
    """random_ops' makers with the newer ops and argument partitions, as ``selection`` allows.

    ``falloc``: whether the filesystem has any fallocate mode (else that maker goes).
    """
    K = OpKind
    # Partitions: below, at and across a page and block, unaligned, and zero where allowed.
    sizes = (0, 1, B - 1, B, B + 1, 2 * B + 5)
    offsets = (0, 1, B - 1, B, 3 * B + 512)
    aligned = (0, B, 2 * B, 3 * B)

    def file() -> str:
        return path(_RANDOM_FILES)

    newer: list[tuple[OpKind, Callable[[], Op]]] = [
        (K.PWRITE, lambda: Op(K.PWRITE, file(), offset=rng.choice(offsets), length=rng.choice(sizes))),
        (K.DIRECT_WRITE, lambda: Op(K.DIRECT_WRITE, file(), offset=rng.choice(aligned),
                                    length=rng.choice((0, B, 2 * B)))),
        (K.MMAP_WRITE, lambda: Op(K.MMAP_WRITE, file(), offset=rng.choice(offsets),
                                  length=rng.choice(sizes[1:]))),
        (K.SYNC_FILE_RANGE, lambda: Op(K.SYNC_FILE_RANGE, file(), offset=rng.choice(offsets),
                                       length=rng.choice(sizes))),
        (K.RENAME_NOREPLACE, lambda: Op(K.RENAME_NOREPLACE, anything(), dst=anything())),
        (K.RENAME_EXCHANGE, lambda: Op(K.RENAME_EXCHANGE, anything(), dst=anything())),
        (K.COPY_FILE_RANGE, lambda: Op(K.COPY_FILE_RANGE, file(), dst=file(),
                                       offset=rng.choice(offsets), length=rng.choice(sizes),
                                       dst_offset=rng.choice(offsets))),
        (K.CLONE, lambda: Op(K.CLONE, file(), dst=file())),
        (K.CLONE_RANGE, lambda: Op(K.CLONE_RANGE, file(), dst=file(), offset=rng.choice(aligned),
                                   length=rng.choice((0, B, 2 * B)),
                                   dst_offset=rng.choice(aligned))),
    ]
    newer_durable: list[tuple[OpKind, Callable[[], Op]]] = [
        (K.MSYNC, lambda: Op(K.MSYNC, file(), offset=rng.choice(offsets),
                             length=rng.choice(sizes[1:]))),
        (K.WRITE_OSYNC, lambda: Op(K.WRITE_OSYNC, file(), offset=rng.choice(offsets),
                                   length=rng.choice(sizes[1:]))),
        (K.WRITE_ODSYNC, lambda: Op(K.WRITE_ODSYNC, file(), offset=rng.choice(offsets),
                                    length=rng.choice(sizes[1:]))),
        (K.SYNCFS, lambda: Op(K.SYNCFS, "r")),
    ]
    kinds = selection.kinds
    keep = (lambda k: True) if kinds is None else (lambda k: k in kinds or k in _SETUP_KINDS)
    durable_named = kinds is not None and bool(kinds & DURABILITY_OPS)
    keep_durable = (lambda k: True) if not durable_named else (lambda k: k in (kinds or ()))
    out = [m for k, m in zip(_CLASSIC_MAKER_KINDS, makers, strict=True)
           if keep(k) and (falloc or k is not K.FALLOCATE)]
    out += [m for k, m in newer if keep(k)]
    out_durable = [m for k, m in zip(_CLASSIC_DURABLE_KINDS, durable_makers, strict=True)
                   if keep_durable(k)]
    out_durable += [m for k, m in newer_durable if keep_durable(k)]
    return out, out_durable


# ---------------------------------------------------------------------------
# Hand-written cases


