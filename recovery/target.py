"""A target: a filesystem configuration under test, named like xfstests-bld configs.

This module holds what a target is; the filesystem adapters read it.
Where targets come from (the built-in ones, a user's TOML file, a guest
task's request) and their validation, which asks each target's adapter,
are in ``recovery.targets``, above the adapters.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from recovery.profiles import DeviceProfile


class JournalPlacement(StrEnum):
    INTERNAL = "internal"  # on the data disk (for btrfs/f2fs: their log tree / roll-forward log)
    EXTERNAL = "external"  # on a disk of its own
    NONE = "none"  # no journal at all: recovery is fsck's job


#: Disk roles a target may give a device profile to.
DISK_ROLES = ("data", "journal")


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    fstype: str  # the mount type: ext2, ext3, ext4, xfs, btrfs, f2fs, jfs, reiserfs
    mkfs_options: tuple[str, ...] = ()
    mount_options: tuple[str, ...] = ()
    journal: JournalPlacement = JournalPlacement.INTERNAL
    journal_size_mib: int | None = None
    description: str = ""
    #: (disk role, device profile name) pairs; roles are those in DISK_ROLES.
    disk_profiles: tuple[tuple[str, str], ...] = ()
    #: The definitions of the profiles disk_profiles names (built in or the user's), so a
    #: target carries its device model into plans, guest requests and the store.
    profile_defs: tuple[DeviceProfile, ...] = ()

    def profile(self, role: str) -> DeviceProfile | None:
        """The device profile of disk ``role`` (data, journal), None if it has none."""
        name = dict(self.disk_profiles).get(role)
        return next((p for p in self.profile_defs if p.name == name), None)

    def delays(self, role: str) -> tuple[int, int, int] | None:
        """dm-delay's (read, write, flush) ms for disk ``role``; None: not delayed."""
        profile = self.profile(role)
        return None if profile is None else profile.delays

    @property
    def needs_journal_disk(self) -> bool:
        return self.journal is JournalPlacement.EXTERNAL

    @property
    def journalled(self) -> bool:
        return self.journal is not JournalPlacement.NONE

    def to_dict(self) -> dict[str, Any]:
        """The target as JSON-ready data (guest task requests, stored runs); read back with
        ``recovery.targets.target_from_dict``."""
        return {"name": self.name, "fstype": self.fstype, "mkfs_options": list(self.mkfs_options),
                "mount_options": list(self.mount_options), "journal": self.journal.value,
                "journal_size_mib": self.journal_size_mib, "description": self.description,
                "disk_profiles": dict(self.disk_profiles),
                "profile_defs": {p.name: p.to_dict() for p in self.profile_defs}}
