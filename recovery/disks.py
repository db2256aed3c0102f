"""How big the scratch disks of a run must be for its targets (one rule for crash, cut and bench)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from framework.core.machine.base import DiskSpec
from recovery.filesystems import adapter_for
from recovery.target import Target

MiB = 1 << 20
#: Data disk when the command names no size: room for mkfs and the small workloads.
DEFAULT_DATA_BYTES = 128 * MiB
#: Journal disk of targets whose journal lives on a disk of its own.
DEFAULT_JOURNAL_BYTES = 128 * MiB
#: Head room above a filesystem's own minimum (xfs refuses less than 300 MB).
MARGIN_BYTES = 16 * MiB


def _round_up(n: int) -> int:
    return -(-n // MiB) * MiB


def disk_bytes(targets: Iterable[Target], *, data_bytes: int | None = None) -> dict[str, int]:
    """Sizes of the ``data`` disk, and of the ``journal`` disk if a target needs one.

    ``data_bytes`` is what the user asked for (default DEFAULT_DATA_BYTES); a
    filesystem that needs more gets its minimum plus MARGIN_BYTES.
    """
    targets = list(targets)
    data = data_bytes or DEFAULT_DATA_BYTES
    for t in targets:
        data = max(data, _round_up(adapter_for(t.fstype).min_size_bytes) + MARGIN_BYTES)
    sizes = {"data": data}
    external = [t for t in targets if t.needs_journal_disk]
    if external:
        sizes["journal"] = max(
            DEFAULT_JOURNAL_BYTES,
            *(_round_up(adapter_for(t.fstype).min_journal_size_bytes) + MARGIN_BYTES for t in external))
    return sizes


def throttle(target: Target, role: str) -> tuple[int | None, int | None]:
    """qemu throttling of disk ``role`` as the target's device profile asks: (bytes/s, IOPS)."""
    profile = target.profile(role)
    return (None, None) if profile is None else (profile.bandwidth_bytes_s, profile.iops)


@dataclass(frozen=True, slots=True)
class DiskPlan:
    """The data and journal disks of a run's guest and which disk each target uses.

    qemu throttles a whole disk, so targets whose device profiles throttle a
    role differently get a disk each (``data@hdd``); when every target agrees
    the disk is just ``data`` (or ``journal``). Latency is applied per target
    in the guest (dm-delay) and needs no disk of its own.
    """

    specs: tuple[DiskSpec, ...]
    names: tuple[tuple[str, str, str], ...]  # (target name, role, disk name)

    def disk(self, target: Target, role: str) -> str:
        for name, r, disk in self.names:
            if name == target.name and r == role:
                return disk
        raise KeyError((target.name, role))


def plan_disks(targets: Iterable[Target], *, data_bytes: int | None = None) -> DiskPlan:
    """Disks for ``targets`` (sizes by disk_bytes), throttled as their device profiles say."""
    targets = list(targets)
    sizes = disk_bytes(targets, data_bytes=data_bytes)
    specs: list[DiskSpec] = []
    names: list[tuple[str, str, str]] = []
    for role, size in sizes.items():
        users = [t for t in targets if role == "data" or t.needs_journal_disk]
        limits = {t.name: throttle(t, role) for t in users}
        kinds = set(limits.values())
        made: dict[tuple[int | None, int | None], str] = {}
        for t in users:
            key = limits[t.name]
            if key not in made:
                profile = t.profile(role)
                made[key] = role if len(kinds) == 1 or profile is None else f"{role}@{profile.name}"
                specs.append(DiskSpec(made[key], size, bandwidth_bytes_s=key[0], iops=key[1]))
            names.append((t.name, role, made[key]))
    return DiskPlan(tuple(specs), tuple(names))
