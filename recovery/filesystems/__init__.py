"""One adapter per filesystem family: mkfs, mount options, fsck and its exit codes,
persistence rules, kernel modules and tools.

No other package knows these details; everything else asks
``adapter_for(target.fstype)`` or one of the functions below.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from framework.core.command import Tool, tool_version
from framework.core.errors import ConfigError
from recovery.filesystems.base import FilesystemAdapter, FsckVerdict
from recovery.filesystems.btrfs import BtrfsAdapter
from recovery.filesystems.ext import ExtAdapter
from recovery.filesystems.f2fs import F2fsAdapter
from recovery.filesystems.jfs import JfsAdapter
from recovery.filesystems.reiserfs import ReiserfsAdapter
from recovery.filesystems.xfs import XfsAdapter

if TYPE_CHECKING:
    from recovery.persistence import PersistenceRules
    from recovery.target import Target

ADAPTERS: tuple[FilesystemAdapter, ...] = (
    ExtAdapter(),
    XfsAdapter(),
    BtrfsAdapter(),
    F2fsAdapter(),
    JfsAdapter(),
    ReiserfsAdapter(),
)

_BY_FSTYPE = {fstype: adapter for adapter in ADAPTERS for fstype in adapter.fstypes}


def adapter_for(fstype: str, *, where: str = "") -> FilesystemAdapter:
    """The adapter for mount type ``fstype``; ``where`` prefixes the error message."""
    try:
        return _BY_FSTYPE[fstype]
    except KeyError:
        prefix = f"{where}.fstype: " if where else ""
        known = ", ".join(sorted(_BY_FSTYPE))
        raise ConfigError(f"{prefix}unknown filesystem type {fstype!r} (known: {known})") from None


def fstypes() -> list[str]:
    return sorted(_BY_FSTYPE)


def persistence_rules(target: Target) -> PersistenceRules:
    """What fsync, fdatasync and sync promise on ``target`` (its adapter decides)."""
    return adapter_for(target.fstype).persistence_rules(target)


#: What a plain guest (`powercut vm run/shell`) can mount without asking: the
#: ext family shares one module, so ext2, ext3 and ext4 all come with it.
GUEST_FSTYPES: tuple[str, ...] = ("ext4",)

#: The targets ``powercut sweep`` measures when none is named: one of each kind of
#: recovery, with the journal where it can be (none: fsck; jbd2 and the XFS log, on
#: the data disk and on their own; the btrfs log tree).
SWEEP_TARGETS: tuple[str, ...] = ("ext2", "ext4/ordered", "ext4/logdev", "xfs", "xfs/logdev",
                                  "btrfs")


def kernel_modules(fstypes: Iterable[str]) -> tuple[str, ...]:
    """The kernel modules these filesystem types need, each once, in order.

    An unknown type is a ConfigError naming the known ones.
    """
    out: list[str] = []
    for fstype in fstypes:
        for module in adapter_for(fstype).kernel_modules:
            if module not in out:
                out.append(module)
    return tuple(out)


def tool_versions(fstypes: Iterable[str]) -> dict[str, str]:
    """The versions of the programs these filesystem types are made and checked with.

    A run records them: a finding may depend on the mkfs defaults or fsck of one release."""
    import shutil  # here: with bz2 and lzma, a cost of every emulated task's start otherwise

    out: dict[str, str] = {}
    for fstype in dict.fromkeys(fstypes):
        for tool in adapter_for(fstype).tools:
            if tool.binary not in out and shutil.which(tool.binary):
                out[tool.binary] = tool_version(tool.binary, tool.version_argv)
    return out


def tools() -> tuple[Tool, ...]:
    """Every program the adapters run, each binary once, in adapter order."""
    seen: dict[str, Tool] = {}
    for adapter in ADAPTERS:
        for tool in adapter.tools:
            seen.setdefault(tool.binary, tool)
    return tuple(seen.values())


__all__ = [
    "ADAPTERS",
    "GUEST_FSTYPES",
    "SWEEP_TARGETS",
    "BtrfsAdapter",
    "ExtAdapter",
    "F2fsAdapter",
    "FilesystemAdapter",
    "FsckVerdict",
    "JfsAdapter",
    "ReiserfsAdapter",
    "Tool",
    "XfsAdapter",
    "adapter_for",
    "fstypes",
    "kernel_modules",
    "persistence_rules",
    "tool_versions",
    "tools",
]
