"""Enumerated sequences: every operation variant on a small file set, alone, in pairs and
in triples, each followed by a durability op that could make it durable.

- ``gen:seq1`` (``seq1``): every operation variant on a small file set,
  followed by each durability op that could make it durable.
- ``gen:seq2`` (``seq2``): every ordered pair of operation variants, each
  followed by a durability op (rotating through the ones that apply).
- ``gen:seq3`` (``seq3``): a seeded sample of triples (``max_sequences``,
  default ``SEQ3_DEFAULT``).

Every sequence starts from the same synced setup (``setup_ops``), so its
operations have something to act on; bursts and chains (crashcases.workload.
bursts, crashcases.workload.chains) start from it too. The variants are the
classic operations with their parameter variants, and with an extended
selection (crashcases.workload.selection) the newer operations and argument
partitions.
"""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Callable, Sequence

from crashcases.oracle.log import NodeKind
from crashcases.vocabulary import OpKind
from crashcases.workload.kinds import FallocMode
from crashcases.workload.model import FsModel
from crashcases.workload.ops import Op
from crashcases.workload.selection import CLASSIC, OpSelection
from crashcases.workload.tree import parent_of

SEQ3_DEFAULT = 200
B = 4096  # a block: the sizes and offsets of generated ops are blocks and parts of one


def setup_ops() -> list[Op]:
    """The synced tree every generated sequence starts from: two files with content (one in a
    subdirectory), an xattr, and an empty directory."""
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


def model_after(ops: Sequence[Op]) -> FsModel | None:
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
    out = setup_ops()
    model = model_after(out)
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
        model = model_after([*setup_ops(), op])
        assert model is not None, label
        choices = durables(op, model, selection)
        for d in choices:
            out.append((f"{label}+{d.describe()}", [*setup_ops(), op, d]))
        if not choices:
            out.append((label, [*setup_ops(), op]))
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
