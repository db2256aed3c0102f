"""What a durability operation promises, per filesystem: the rules the oracle checks against.

The baseline is POSIX as Linux implements it (``posix_strict``):

- ``fsync(file)``: the file's data, size and inode metadata (xattrs) are
  durable. NOT its directory entry: a new file needs an fsync of its parent
  directory, a renamed file an fsync of both directories.
- ``fdatasync(file)``: the data and the size needed to read it back; not
  other metadata (xattrs).
- ``fsync(dir)``: the directory's entries (every name -> which inode, and
  the absence of removed names) and the directory's own xattrs. Not the
  directory's own name in its parent.
- ``sync()``: everything done before it (Linux waits for it to finish).

Everything else is uncertain after a crash: an operation not yet covered by
a promise may be persisted, partly persisted or not at all. Each field of
``PersistenceRules`` is one stronger guarantee a filesystem gives (making
the oracle stricter), or one extra freedom it has (making it more lenient).
Every rule must stay *sound*: a rule may only promise what the
filesystem's maintainers treat a failure of as a bug.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PersistenceRules:
    """One filesystem's durability guarantees beyond (or below) POSIX; see each field."""

    name: str
    # fsync(file) also makes the file's names durable: every current name of
    # the inode (created by creat/link or renamed to), the removal of names it
    # lost by unlink or rename, and the mkdir-created ancestors of its names.
    # ext3/ext4 (a jbd2 commit carries every metadata change before it), xfs
    # (the log is forced up to the inode's last change, which includes the
    # create/link/rename transactions that logged it), btrfs (logs new names,
    # new ancestors, and the old name of a renamed inode).
    fsync_file_persists_names: bool = False
    # fdatasync(file) of a file created by creat makes its name (and
    # mkdir-created ancestors) durable: creating the inode is metadata needed
    # to read the data back. ext4 (creation sets the datasync tid), xfs
    # (creation logs the inode core), btrfs (a new inode needs a full sync).
    fdatasync_persists_new_names: bool = False
    # ext4 data=ordered/journal with auto_da_alloc: rename(tmp, existing)
    # starts writeback of tmp before the rename commits, so once the rename is
    # durable (by a directory fsync or sync) the data tmp had at rename time is
    # too — the "replace via rename" idiom works without fsync(tmp).
    rename_replace_flushes_data: bool = False
    # Namespace operations are atomic after recovery: a found file's link
    # count equals the names it has, a found symlink has its full target.
    # True for journalling and copy-on-write filesystems; False for ext2 and
    # ext4 without a journal, where only fsck restores consistency.
    metadata_atomic: bool = False
    # An in-flight overwrite of a data block leaves the old or the new block,
    # never a sector-level mix of both: data is written out of place (btrfs)
    # or through the journal (ext4 data=journal). Else a disk may tear a block
    # below its size, and a block that changes after its promise cannot be
    # told from a legitimate torn write, so it is not compared.
    data_block_atomic: bool = False
    # In-flight data writes are atomic per file: the file's content equals one
    # version it had, not a per-block mix of versions. No built-in filesystem
    # promises this; it exists for filesystems with atomic write support.
    data_writes_atomic: bool = False
    # Blocks an in-flight extension allocates may expose whatever the disk
    # held before (no ordering of data before metadata): ext4/ext3
    # data=writeback, ext2, ext4 without a journal. Else they read as the new
    # data or zeros.
    stale_data_after_extension: bool = True


if TYPE_CHECKING:
    from recovery.targets import Target


def posix_strict() -> PersistenceRules:
    """Only what POSIX promises: the weakest rules, sound for any filesystem."""
    return PersistenceRules(name="posix")


def _journalled(name: str) -> PersistenceRules:
    return PersistenceRules(
        name=name,
        fsync_file_persists_names=True,
        fdatasync_persists_new_names=True,
        metadata_atomic=True,
        stale_data_after_extension=False,
    )


def _ext4(name: str, mount_options: Sequence[str], journal: bool) -> PersistenceRules:
    if not journal:
        # No jbd2: ext4_sync_parent() helps new names, but nothing is atomic.
        return replace(posix_strict(), name=f"{name}/nojournal")
    opts = {o.strip() for opt in mount_options for o in opt.split(",") if o.strip()}
    mode = "ordered"
    for o in opts:
        if o.startswith("data="):
            mode = o.removeprefix("data=")
    rules = replace(
        _journalled(f"{name}/{mode}"), rename_replace_flushes_data="noauto_da_alloc" not in opts
    )
    if mode == "writeback":
        return replace(rules, rename_replace_flushes_data=False, stale_data_after_extension=True)
    if mode == "journal":
        return replace(rules, data_block_atomic=True)
    if mode != "ordered":
        log.warning("unknown ext4 data mode %r: using the ordered-mode rules", mode)
    return rules


def for_filesystem(
    fstype: str, *, mount_options: Sequence[str] = (), journal: bool = True
) -> PersistenceRules:
    """The rules for ``fstype`` (``ext4``, ``xfs``, ...) mounted with ``mount_options``.

    ``journal=False`` is ext3/ext4 made without a journal. ``fstype`` may
    also be a target name like ``ext4/writeback`` or ``ext4/nojournal``. An
    unknown filesystem gets ``posix_strict()``: weaker checks, never a
    false finding.
    """
    base, _, variant = fstype.partition("/")
    extra: list[str] = list(mount_options)
    if base in ("ext3", "ext4"):
        if variant in ("ordered", "writeback", "journal"):
            extra.append(f"data={variant}")
        elif variant == "nojournal":
            journal = False
        return _ext4(base, extra, journal)
    if base == "ext2":
        return replace(posix_strict(), name="ext2")
    if base == "xfs":
        # Overwrites are in place, so a torn in-flight block is legitimate.
        return _journalled("xfs")
    if base == "btrfs":
        return replace(_journalled("btrfs"), data_block_atomic=True)
    if base == "f2fs":
        # A fsynced new inode carries its dentry in roll-forward recovery;
        # renames and hard links force a checkpoint.
        return _journalled("f2fs")
    if base in ("jfs", "reiserfs"):
        # Metadata is journalled, but fsync's reach over names is not promised.
        return replace(posix_strict(), name=base, metadata_atomic=True)
    log.warning("no persistence rules for filesystem %r: using POSIX-only rules", fstype)
    return replace(posix_strict(), name=f"posix ({fstype})")


def for_target(target: Target) -> PersistenceRules:
    """The rules for a target: its filesystem, journal mode and mount options."""
    return for_filesystem(target.name, mount_options=target.mount_options)
