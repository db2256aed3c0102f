"""Bounded bursts (``gen:burst``): a few operations with mostly no durability op between
them, then one durability op of something they named.

A seeded sample of bursts (``max_sequences``, default ``BURST_DEFAULT``): two or
three operations on a small set of names some of which the burst must create (a
new directory, a file in it), then one durability op of a file or directory the
burst named or of one above it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from crashcases.oracle.log import NodeKind
from crashcases.vocabulary import OpKind
from crashcases.workload.kinds import CLASSIC_FALLOC_MODES, GEN3_FALLOC_MODES
from crashcases.workload.model import FsModel
from crashcases.workload.ops import Op
from crashcases.workload.selection import CLASSIC, OpSelection
from crashcases.workload.sequences import B, durables, model_after, setup_ops
from crashcases.workload.tree import parent_of

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

    modes = [m for m in GEN3_FALLOC_MODES if (selection.extended or m in CLASSIC_FALLOC_MODES)]
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
    """A seeded sample of ``count`` bounded bursts (see the module docstring).

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
        ops = setup_ops()
        model = model_after(ops)
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
                trial = model_after([*ops, *deps, candidate])
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
        label = ";".join(op.describe() for op in ops[len(setup_ops()):])
        out.append((len(out), label, ops))
    return out
