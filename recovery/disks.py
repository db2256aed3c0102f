"""How big the scratch disks of a run must be for its targets (one rule for crash, cut and bench)."""

from __future__ import annotations

from collections.abc import Iterable

from recovery.filesystems import adapter_for
from recovery.targets import Target

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
