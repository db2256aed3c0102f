"""Random streams: ``random:N``, ``stress:N`` and ``ranges:N``.

- ``random:N`` (``random_ops``): N random ops for the seed in one directory,
  durability ops interleaved; ``stress:N`` is the same with every size and
  offset scaled to 64 KiB blocks, for data-heavy logs like fsstress runs.
- ``ranges:N`` (``ranges_ops``): N random data ops on two files, every offset
  relative to the file's size at that point, durability ops interleaved.

Each draw consumes the stream's random numbers in order and keeps the first op
the model accepts, so a seed gives the same stream as long as the makers and
their order stay the same.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from crashcases.vocabulary import DURABILITY_OPS, OpKind
from crashcases.workload.kinds import CLASSIC_FALLOC_MODES, GEN3_FALLOC_MODES, FallocMode
from crashcases.workload.model import FsModel
from crashcases.workload.ops import Op
from crashcases.workload.selection import CLASSIC, OpSelection
from crashcases.workload.sequences import B

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
        falloc_modes = [m for m in GEN3_FALLOC_MODES
                        if selection.capable(Op(OpKind.FALLOCATE, falloc=m))]
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
    modes = [m for m in GEN3_FALLOC_MODES if (selection.extended or m in CLASSIC_FALLOC_MODES)]

    def ranges(size: int) -> list[tuple[int, int]]:
        last = (size - 1) // B * B if size else 0  # the block holding the end of file
        end = -(-size // B) * B
        inside = rng.randrange(0, max(last, B), B)
        return [(last, B), (last, 2 * B), (max(last - B, 0), 2 * B), (inside, B),
                (inside, 3 * B), (end, 2 * B)]

    def data_op(f: str) -> Op:
        size = model.size_of(f)
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
        size = model.size_of(f)
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
