"""One adapter per filesystem family: mkfs, mount options, fsck and its exit codes.

No other package knows these details; everything else asks
``adapter_for(target.fstype)``.
"""

from __future__ import annotations

from framework.core.errors import ConfigError
from recovery.filesystems.base import FilesystemAdapter, FsckVerdict
from recovery.filesystems.btrfs import BtrfsAdapter
from recovery.filesystems.ext import ExtAdapter
from recovery.filesystems.f2fs import F2fsAdapter
from recovery.filesystems.jfs import JfsAdapter
from recovery.filesystems.reiserfs import ReiserfsAdapter
from recovery.filesystems.xfs import XfsAdapter

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


__all__ = [
    "ADAPTERS",
    "BtrfsAdapter",
    "ExtAdapter",
    "F2fsAdapter",
    "FilesystemAdapter",
    "FsckVerdict",
    "JfsAdapter",
    "ReiserfsAdapter",
    "XfsAdapter",
    "adapter_for",
    "fstypes",
]
