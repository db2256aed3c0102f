"""ReiserFS 3.6 (reiserfsprogs).

Deprecated since Linux 5.18 and removed in 6.13; Debian's 6.1 kernel still
ships it as a module (CONFIG_REISERFS_FS=m).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

from framework.core.command import Tool
from recovery.filesystems.base import FilesystemAdapter, FsckVerdict, checker_argv
from recovery.persistence import PersistenceRules, posix_strict

if TYPE_CHECKING:
    from recovery.target import Target

FS_BLOCK_BYTES = 4096

_NO_CORRUPTION = re.compile(r"^No corruptions found", re.MULTILINE)


class ReiserfsAdapter(FilesystemAdapter):
    family = "reiserfs"
    fstypes = ("reiserfs",)
    capabilities = frozenset({"direct-io"})  # no fallocate; reiserfs_rename() takes only RENAME_NOREPLACE
    kernel_modules = ("reiserfs",)
    tools = (Tool("mkreiserfs", "reiserfsprogs", ("-V",), required=False),
             Tool("reiserfsck", "reiserfsprogs", ("-V",), required=False))
    supports_external_journal = True
    replay_patterns = (
        # fs/reiserfs/journal.c, journal_read(); its "checking transaction
        # log" line appears on every mount, replay or not.
        re.compile(r"REISERFS .*: replayed \d+ transactions"),
        re.compile(r"REISERFS .*: replaying"),
    )

    def persistence_rules(self, target: Target) -> PersistenceRules:
        # Metadata is journalled (journal_mark_dirty() and do_journal_end(),
        # fs/reiserfs/journal.c), and fsync commits the inode's transaction
        # (reiserfs_sync_file() -> reiserfs_commit_for_inode(), Linux 6.1).
        # Its data= modes (ordered by default, journal, writeback) are not
        # told apart: POSIX plus atomic metadata is sound for all three.
        return replace(posix_strict("reiserfs"), metadata_atomic=True)

    def _mkfs_argv(self, target: Target, dev: str, journal_dev: str | None,
                   size_bytes: int | None) -> list[str]:
        # -f twice: no confirmation even on a whole disk; -q: script mode.
        argv = ["mkreiserfs", "-q", "-f", "-f"]
        if journal_dev is not None:
            argv += ["-j", journal_dev]
        if target.journal_size_mib is not None:
            argv += ["-s", str(target.journal_size_mib * 1024 * 1024 // FS_BLOCK_BYTES)]
        argv += [*target.mkfs_options, dev]
        if size_bytes is not None:
            argv.append(str(size_bytes // FS_BLOCK_BYTES))
        return argv

    def mount_options(self, target: Target, *, journal_dev: str | None = None) -> list[str]:
        opts = list(target.mount_options)
        if journal_dev is not None:
            opts.append(f"jdev={journal_dev}")
        return opts

    def fsck_argv(self, dev: str, *, repair: bool, journal_dev: str | None = None) -> list[str]:
        # -y: without it reiserfsck asks "type Yes" and exits 16 on a closed
        # stdin. -q: no progress meter. Note that both modes replay a
        # pending journal first (it is not a pure read-only check on an
        # unreplayed image); checks normally run after the mount replayed it.
        return checker_argv(["reiserfsck", "--fix-fixable" if repair else "--check", "-y", "-q"],
                            dev, journal_dev)

    def classify_fsck(
        self, status: int, stdout: str, stderr: str, *, repair: bool
    ) -> FsckVerdict:
        # reiserfsck(8) EXIT CODES: 0 none, 1 corrected, 2 reboot needed,
        # 4 fatal errors left (needs --rebuild-tree), 6 fixable errors left
        # (needs --fix-fixable), 8 operational error, 16 usage.
        if status == 0:
            return FsckVerdict.CLEAN
        if status in (1, 2):
            if not repair:
                return FsckVerdict.CORRUPT
            # --fix-fixable exits 1 even when it reports "No corruptions found".
            if _NO_CORRUPTION.search(stdout) or _NO_CORRUPTION.search(stderr):
                return FsckVerdict.CLEAN
            return FsckVerdict.REPAIRED
        if status in (4, 6):
            return FsckVerdict.CORRUPT
        return FsckVerdict.FAILED
