"""JFS (jfsutils)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from framework.core.command import Tool
from recovery.filesystems.base import (
    FilesystemAdapter,
    FsckVerdict,
    checker_argv,
    classify_fsck8_status,
)
from recovery.persistence import PersistenceRules, posix_strict

if TYPE_CHECKING:
    from recovery.target import Target

BLOCK_BYTES = 1024  # jfs_mkfs's trailing block count is in 1 KiB units


class JfsAdapter(FilesystemAdapter):
    family = "jfs"
    fstypes = ("jfs",)
    capabilities = frozenset({"direct-io"})  # no fallocate; jfs_rename() takes only RENAME_NOREPLACE
    kernel_modules = ("jfs",)
    tools = (
        Tool("jfs_mkfs", "jfsutils", ("-V",), required=False),
        Tool("jfs_fsck", "jfsutils", ("-V",), required=False),
        Tool("jfs_tune", "jfsutils", ("-V",), required=False),
    )
    supports_external_journal = True
    # fs/jfs/jfs_mount.c refuses a read-write mount of a dirty volume
    # ("File System Dirty"); the log is replayed by jfs_fsck (logredo).
    # Crash recovery for JFS is therefore: fsck first, then mount.
    mount_replays_journal = False
    # The kernel never replays a JFS log, so no kernel line reports one
    # (a dirty volume shows up as a failed mount instead).
    replay_patterns = ()

    def persistence_rules(self, target: Target) -> PersistenceRules:
        # Metadata changes are transactions in the log (txCommit(),
        # fs/jfs/jfs_txnmgr.c), which jfs_fsck replays; fsync commits the
        # inode (jfs_fsync() -> jfs_commit_inode(), fs/jfs/file.c and
        # inode.c, Linux 6.1). How far that reaches over names is not
        # promised anywhere, so only atomic metadata is added to POSIX.
        return replace(posix_strict("jfs"), metadata_atomic=True)

    def _mkfs_argv(self, target: Target, dev: str, journal_dev: str | None,
                   size_bytes: int | None) -> list[str]:
        # -q: no "Continue? (Y/N)" confirmation.
        argv = ["jfs_mkfs", "-q"]
        if target.journal_size_mib is not None and journal_dev is None:
            argv += ["-s", str(target.journal_size_mib)]  # inline log size in MiB
        if journal_dev is not None:
            # The journal device is formatted by journal_mkfs_argv() first.
            argv += ["-J", f"device={journal_dev}"]
        argv += [*target.mkfs_options, dev]
        if size_bytes is not None:
            argv.append(str(size_bytes // BLOCK_BYTES))
        return argv

    def journal_mkfs_argv(self, target: Target, journal_dev: str) -> list[str] | None:
        if not target.needs_journal_disk:
            return None
        return ["jfs_mkfs", "-q", "-J", "journal_dev", journal_dev]

    def attach_journal_argv(self, target: Target, dev: str, journal_dev: str) -> list[str] | None:
        # JFS has no mount option for the log device: the kernel opens the
        # device number recorded in the superblock at mkfs time. Record the
        # device the crash state is checked with (replays, other machines).
        return ["jfs_tune", "-J", f"device={journal_dev}", dev]

    def journal_replay_argv(self, dev: str, *, journal_dev: str | None = None) -> list[str] | None:
        # jfs_fsck(8): "-a Autocheck mode. Replay the transaction log and quit
        # fsck unless the aggregate state indicates a check is needed" -- what
        # fsck -a runs at boot. Without it a crashed volume is "dirty": the
        # read-only check (-n, which never replays) reports it with exit 4 and
        # the kernel refuses the mount (chkSuper(), fs/jfs/jfs_mount.c, Linux
        # 6.1: "Mount Failure: File System Dirty").
        return checker_argv(["jfs_fsck", "-a"], dev, journal_dev)

    # jfs_tune(8) -l: an external log shows as "External log UUID" and "Log device
    # number"; an inline one as the JFS_INLINELOG flag and "Inline log size".
    journal_location_prefixes = ("JFS flags:", "Log device number:", "External log UUID:",
                                 "Inline log size:")

    def journal_location_argv(self, dev: str) -> list[str] | None:
        return ["jfs_tune", "-l", dev]

    def fsck_argv(self, dev: str, *, repair: bool, journal_dev: str | None = None) -> list[str]:
        # -n: read-only, no log replay (run after journal_replay_argv()).
        # -a -f: replay the log, then force a full check and fix everything
        # without asking.
        return checker_argv(["jfs_fsck", *(["-a", "-f"] if repair else ["-n"])], dev, journal_dev)

    def classify_fsck(
        self, status: int, stdout: str, stderr: str, *, repair: bool
    ) -> FsckVerdict:
        # jfs_fsck(8) EXIT CODE: 0 none, 1 corrected and/or log replayed,
        # 2 corrected + reboot, 4 left uncorrected, 8 operational, 16 usage,
        # 128 shared library error.
        return classify_fsck8_status(status, repair=repair)
