"""Chains (``gen:chain``): persist a file, then change it or what names it, then persist
again.

A seeded sample of chains (``max_sequences``, default ``CHAIN_DEFAULT``) on the
setup's file in a subdirectory: optionally a new directory beside it, a first
move, fsync of the file, a second move, then one durability op of the file or of
a directory that holds one of its names. A move changes the file's data or size,
gives it another name, or changes the names around it. Crash bugs of fsync logs
(a btrfs log tree, f2fs roll-forward, ext4 fast commits) live where an fsync
logged a file in the running transaction and a later change to it or its names is
logged incrementally: the chain is that shape, every move on every side of it.
"""

from __future__ import annotations

import random

from crashcases.oracle.log import NodeKind
from crashcases.vocabulary import OpKind
from crashcases.workload.kinds import FallocMode
from crashcases.workload.model import FsModel
from crashcases.workload.ops import Op
from crashcases.workload.selection import CLASSIC, OpSelection
from crashcases.workload.sequences import B, model_after, setup_ops
from crashcases.workload.tree import parent_of

CHAIN_DEFAULT = 200
_CHAIN_SUBJECT = "d/f1"  # the setup's file in a subdirectory: a parent that is not the root
_CHAIN_OTHER = "e"  # the setup's other directory


def _chain_moves(x: str, model: FsModel, tag: str) -> list[tuple[str, list[Op], str, bool]]:
    """(label, ops, subject after, whether it changed names) for each move on file ``x``.

    A move changes the file's data or size, gives it another name, or changes the names
    around it: a new directory beside it (``n``, made when a move needs it and not there),
    entries in that directory, or its parent moved away and its old name reused by a new
    file, which becomes the subject. ``tag`` keeps the names of two moves apart."""
    K, F = OpKind, FallocMode
    size, p = model.size_of(x), parent_of(x)
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
    setup = setup_ops()
    base = model_after(setup)
    assert base is not None
    preludes: list[tuple[str, list[Op]]] = [("", []), ("new-dir", [Op(OpKind.MKDIR, "d/n")])]
    for pre_label, prelude in preludes:
        start = model_after([*setup, *prelude])
        assert start is not None
        firsts = [("", [], _CHAIN_SUBJECT, False),
                  *_chain_moves(_CHAIN_SUBJECT, start, "a")]
        for a_label, a_ops, x, _ in firsts:
            head = [*setup, *prelude, *a_ops, Op(OpKind.FSYNC, x)]
            model = model_after(head)
            if model is None or not all(selection.allows(op) for op in a_ops):
                continue
            for b_label, b_ops, y, names in _chain_moves(x, model, "b"):
                if not all(selection.allows(op) for op in b_ops):
                    continue
                for final in _chain_finals(y, parent_of(x), names):
                    ops = [*head, *b_ops, final]
                    if not selection.allows_durable(final) or model_after(ops) is None:
                        continue
                    label = ";".join(w for w in (pre_label, a_label, f"fsync,{b_label}",
                                                 final.describe()) if w)
                    out.append((label, ops))
    return out


def chain(seed: int, count: int, selection: OpSelection = CLASSIC) -> list[tuple[int, str, list[Op]]]:
    """A seeded sample of ``count`` chains, numbered in a seeded order (see the module
    docstring), so that any first part of them is a sample of the whole."""
    found = chains(selection)
    order = list(range(len(found)))
    random.Random(f"powercut-chain:{seed}").shuffle(order)
    return [(n, *found[i]) for n, i in enumerate(order[:count])]
