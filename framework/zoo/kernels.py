"""The zoo's kernels: the fixed one and one per entry, all from one configured tree.

An entry set's Debian source (``linux-source-BASE``: 6.12.117 for the built-in set) is
unpacked once into the set's cache outside the checkout (``zoo_cache()/SET``) and
configured for powercut's guest (framework.core.machine.build). The fixed kernel is built
first; then each entry's revert is applied, the tree is rebuilt (incrementally: only what
the patch touches) and installed under its own name, and the revert is taken back out,
so the tree is always the fixed source between entries. A run that was interrupted with
a revert still applied is cleaned up first.

Each installed kernel is a directory ``kernels/NAME`` of the set's cache with
``bzImage``, its ``lib/modules/RELEASE`` (for ``--modules``) and ``build.json``, and is
booted with ``powercut ... --kernel DIR/bzImage --modules DIR``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from framework.core.machine.build import BuiltKernel, Patch, SourceTree, built
from framework.core.machine.initramfs import cache_dir
from framework.zoo.entry import EntrySet, ZooEntry

FIXED = "fixed"
#: A kernel the zoo built and installed: boot it with --kernel image --modules modules.
Kernel = BuiltKernel


def zoo_cache(override: str | None = None) -> Path:
    """Where the sets' trees and kernels live: --cache, POWERCUT_ZOO_CACHE, or the cache dir."""
    chosen = override or os.environ.get("POWERCUT_ZOO_CACHE")
    return Path(chosen).resolve() if chosen else cache_dir() / "zoo"


def set_cache(entry_set: EntrySet, override: str | None = None) -> Path:
    """The tree and the kernels of one entry set: a directory of its own under zoo_cache()."""
    return zoo_cache(override) / entry_set.name


def installed(cache: Path, name: str) -> Kernel | None:
    """The kernel ``name`` if it is built and installed in ``cache``."""
    return built(cache / "kernels", name)


def revert(entry: ZooEntry) -> Patch:
    """An entry's revert, as the tree applies it."""
    return Patch(entry.name, entry.patch, f"{entry.fix[:12]} reverted")


def zoo_tree(cache: Path, base: str, *, say: Callable[[str], None] = print) -> SourceTree:
    return SourceTree(base, cache, say=say, prefix="zoo")


def build_kernels(entries: Sequence[ZooEntry], cache: Path, base: str, *, force: bool = False,
                  say: Callable[[str], None] = print) -> list[Kernel]:
    """The fixed kernel, then one per entry, from one tree of linux-source-``base``."""
    tree = zoo_tree(cache, base, say=say)
    tree.prepare([revert(e) for e in entries])
    kernels = [tree.build(FIXED, force=force)]
    for entry in entries:
        kernels.append(tree.build(entry.name, revert(entry), force=force))
    return kernels
