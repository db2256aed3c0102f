"""Packing: many generated sequences in one workload, one recording.

Every recording costs a mkfs and a mount in a VM, so generated sequences
are *packed*: each runs in its own directory (``s0017/`` is always the
sequence numbered 17 of its enumeration), one after the other, each
starting from a synced setup (two files with content, an xattr, a
subdirectory and an empty directory; crashcases.workload.sequences) so that
its operation has something to act on.

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

import random
from collections.abc import Sequence
from dataclasses import replace

from crashcases.oracle.log import NodeKind
from crashcases.vocabulary import OpKind
from crashcases.workload.model import FsModel
from crashcases.workload.ops import Op, Workload, WorkloadError

RETIRE_EVERY = 16  # sequences per retirement of finished namespaces (see above)


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


def sample(
    items: Sequence[tuple[int, str, list[Op]]], limit: int | None, seed: int
) -> list[tuple[int, str, list[Op]]]:
    """A seeded sample of ``limit`` of the numbered sequences ``items`` (all for None), in
    their order."""
    if limit is None or limit >= len(items):
        return list(items)
    chosen = random.Random(f"powercut-sample:{seed}").sample(range(len(items)), limit)
    return [items[i] for i in sorted(chosen)]


def pack_numbered(spec: str, items: Sequence[tuple[int, str, list[Op]]], seed: int) -> Workload:
    """(number, label, ops) sequences packed as ``spec``: each in the directory of its
    number, retired every ``RETIRE_EVERY``."""
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
