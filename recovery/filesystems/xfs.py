"""XFS (xfsprogs)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

from framework.core.command import Tool
from recovery.filesystems.base import FilesystemAdapter, FsckVerdict
from recovery.persistence import PersistenceRules, journalled

if TYPE_CHECKING:
    from recovery.target import Target

# mkfs.xfs (xfsprogs >= 5.19) refuses data sections of 300 MiB or less.
MIN_SIZE_BYTES = 300 * 1024 * 1024 + 1


class XfsAdapter(FilesystemAdapter):
    family = "xfs"
    fstypes = ("xfs",)
    fstests_dirs = ("xfs",)
    capabilities = frozenset({"direct-io", "reflink", "fallocate", "punch-hole", "zero-range",
                              "collapse-range", "insert-range", "rename-exchange",  # xfs_file_fallocate()
                              "rename-whiteout", "setflags", "dedupe", "unshare-range"})
    kernel_modules = ("xfs",)
    tools = (
        Tool("mkfs.xfs", "xfsprogs", ("-V",), required=False),
        Tool("xfs_repair", "xfsprogs", ("-V",), required=False),
    )
    supports_external_journal = True
    # Two copies of one filesystem can be checked at once if the second is mounted with
    # nouuid: xfs_uuid_mount() refuses a UUID already in its table of mounted filesystems
    # ("Filesystem has duplicate UUID"), and nouuid skips that table. In Linux 6.1 and 6.12
    # (fs/xfs/xfs_mount.c) xfs_uuid_mount() and xfs_uuid_unmount() are the only places that
    # look at the option; log recovery, which checks the log's UUID against the superblock's
    # (xlog_header_check_mount()), does not. The first lane mounts the target unchanged.
    concurrent_copies_mount = True
    second_copy_mount_options = ("nouuid",)
    journal_sizable = True  # mkfs.xfs -l size=, internal or external
    min_size_bytes = MIN_SIZE_BYTES
    # "Log size must be at least 64MB." (mkfs.xfs 6.1, internal and external logs)
    min_journal_size_bytes = 64 * 1024 * 1024
    replay_patterns = (
        # fs/xfs/xfs_log_recover.c around log recovery.
        re.compile(r"XFS \(.*\): Starting recovery"),
        re.compile(r"XFS \(.*\): Ending recovery"),
    )

    def persistence_rules(self, target: Target) -> PersistenceRules:
        # Every metadata change is logged, and fsync forces the log up to the
        # inode's last change (xfs_file_fsync(), fs/xfs/xfs_file.c, Linux 6.1).
        # Data overwrites are in place (no data journal, no copy-on-write
        # without reflink sharing), so a torn in-flight block is legitimate.
        # Wherever the log lives, the promises are the same. A RENAME_EXCHANGE
        # of files logs neither inode (xfs_cross_rename(), fs/xfs/xfs_inode.c,
        # Linux 6.1), so fsync of one does not make the exchange durable.
        return replace(journalled("xfs"), fsync_file_persists_exchanged_names=False)

    def _mkfs_argv(self, target: Target, dev: str, journal_dev: str | None,
                   size_bytes: int | None) -> list[str]:
        # -f: overwrite an existing signature; -q: no geometry report.
        argv = ["mkfs.xfs", "-f", "-q"]
        log = []
        if journal_dev is not None:
            log.append(f"logdev={journal_dev}")
        if target.journal_size_mib is not None:
            log.append(f"size={target.journal_size_mib}m")
        if log:
            argv += ["-l", ",".join(log)]
        if size_bytes is not None:
            argv += ["-d", f"size={size_bytes}"]
        return [*argv, *target.mkfs_options, dev]

    def mount_options(self, target: Target, *, journal_dev: str | None = None) -> list[str]:
        opts = list(target.mount_options)
        if journal_dev is not None:
            # XFS does not record where an external log lives: it must be named.
            opts.append(f"logdev={journal_dev}")
        return opts

    # xfs_db(8) "info" prints the geometry as mkfs.xfs does: "log =external" or
    # "log =internal log", with the log's size in blocks.
    journal_location_prefixes = ("log ",)

    def journal_location_argv(self, dev: str) -> list[str] | None:
        return ["xfs_db", "-r", "-c", "info", dev]

    def fsck_argv(self, dev: str, *, repair: bool, journal_dev: str | None = None) -> list[str]:
        # Repair never gets -L: zeroing a dirty log throws away the metadata
        # updates the mount should have replayed, which would hide exactly
        # the recovery bugs being looked for. A dirty log is a finding.
        # -e makes "repaired something" visible as status 4.
        argv = ["xfs_repair", "-e" if repair else "-n"]
        if journal_dev is not None:
            argv += ["-l", journal_dev]
        return [*argv, dev]

    def classify_fsck(
        self, status: int, stdout: str, stderr: str, *, repair: bool
    ) -> FsckVerdict:
        # xfs_repair(8) EXIT STATUS: with -n, 1 = corruption found, 0 = none.
        # Without -n: 0 = fine, 4 (with -e) = corruption found and fixed,
        # 1 = runtime error (restart it), 2 = dirty log it cannot replay.
        if not repair:
            return {0: FsckVerdict.CLEAN, 1: FsckVerdict.CORRUPT}.get(status, FsckVerdict.FAILED)
        if status == 0:
            return FsckVerdict.CLEAN
        if status == 4:
            return FsckVerdict.REPAIRED
        if status == 2:
            # The log still holds updates and repair refuses to go on: the
            # filesystem is left inconsistent (the mount that should have
            # replayed the log failed or was skipped).
            return FsckVerdict.CORRUPT
        return FsckVerdict.FAILED
