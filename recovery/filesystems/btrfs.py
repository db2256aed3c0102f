"""btrfs (btrfs-progs)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

from framework.core.command import Tool
from recovery.filesystems.base import FilesystemAdapter, FsckVerdict, split_options
from recovery.persistence import PersistenceRules, journalled

if TYPE_CHECKING:
    from recovery.target import Target

# Output of `btrfs check` that means it never looked at the filesystem
# (bad invocation, missing or busy device) rather than found it damaged.
_TOOL_FAILURE = (
    re.compile(r"^usage: btrfs check", re.MULTILINE),
    re.compile(r"ERROR: mount check: cannot open"),
    re.compile(r"ERROR: could not check mount status"),
    re.compile(r"is currently mounted"),
)

# What `btrfs check` prints when it found damage ("found N bytes used,
# error(s) found", per-inode "errors 2001" reports, ERROR lines) and what
# --repair prints when it changed something. A clean run ends with "no
# error found" and --repair always says "Fixed 0 roots.", so counts of 0
# do not count.
_DAMAGE_REPORTED = re.compile(
    r"error\(s\) found|^ERROR:|\berrors [0-9a-f]+\b|^(Repaired|Deleted|Moving file|reset isize|"
    r"reset nbytes|Recreating|Trying to rebuild)|^Fixed [1-9]\d* roots",
    re.MULTILINE,
)


class BtrfsAdapter(FilesystemAdapter):
    family = "btrfs"
    fstypes = ("btrfs",)
    fstests_dirs = ("btrfs",)
    capabilities = frozenset({"direct-io", "reflink", "rename-exchange", "fallocate", "punch-hole",
                              "zero-range",  # no collapse/insert/unshare: btrfs_fallocate()
                              "rename-whiteout", "setflags", "dedupe"})
    kernel_modules = ("btrfs",)
    tools = (Tool("mkfs.btrfs", "btrfs-progs", ("--version",), required=False),
             Tool("btrfs", "btrfs-progs", ("--version",), required=False))
    # btrfs has no journal device; its log tree lives among the data.
    supports_external_journal = False
    min_size_bytes = 128 * 1024 * 1024
    replay_patterns = (
        # fs/btrfs/disk-io.c before btrfs_recover_log_trees().
        re.compile(r"BTRFS info \(device .*\): start tree-log replay"),
        re.compile(r"BTRFS .*: (log replay|replaying log)", re.IGNORECASE),
    )

    def persistence_rules(self, target: Target) -> PersistenceRules:
        # fsync logs the inode, its new names and new ancestors in the log
        # tree (btrfs_sync_file(), fs/btrfs/file.c; btrfs_log_inode_parent(),
        # fs/btrfs/tree-log.c, Linux 6.1), and data is copy-on-write: an
        # overwrite goes to a new extent (cow_file_range(), fs/btrfs/inode.c).
        # nodatacow makes new files overwrite in place (btrfs_new_inode()
        # sets BTRFS_INODE_NODATACOW, and should_nocow() then skips COW), so
        # a torn block is legitimate again. btrfs_parse_options()
        # (fs/btrfs/super.c) applies the options in order: the last of
        # datacow/nodatacow wins.
        cow = True
        for opt in split_options(target.mount_options):
            if opt in ("datacow", "nodatacow"):
                cow = opt == "datacow"
        if not cow:
            return journalled("btrfs/nodatacow")
        return replace(journalled("btrfs"), data_block_atomic=True)

    def _mkfs_argv(self, target: Target, dev: str, journal_dev: str | None,
                   size_bytes: int | None) -> list[str]:
        # -f: overwrite an existing signature; -q: no summary.
        argv = ["mkfs.btrfs", "-f", "-q"]
        if size_bytes is not None:
            argv += ["-b", str(size_bytes)]
        return [*argv, *target.mkfs_options, dev]

    def fsck_argv(self, dev: str, *, repair: bool, journal_dev: str | None = None) -> list[str]:
        if not repair:
            # --readonly is the default; say it anyway: this must never write.
            return ["btrfs", "check", "--readonly", dev]
        # --repair is the dangerous mode (btrfs-check(8) says to use it only
        # when advised); here it runs on a throw-away snapshot of a crash
        # state. --force skips the 10 s "think twice" delay, which would
        # otherwise be counted as repair time; it also skips the mounted
        # check, so callers must only repair unmounted devices.
        return ["btrfs", "check", "--repair", "--force", dev]

    def classify_fsck(
        self, status: int, stdout: str, stderr: str, *, repair: bool
    ) -> FsckVerdict:
        # btrfs-check(8): zero if it succeeds, non-zero on failure. Nothing
        # finer is documented, so the output separates "never got to look"
        # from "found damage", and (--repair exits 0 either way) "repaired
        # damage" from "nothing to do".
        output = f"{stdout}\n{stderr}"
        if any(p.search(output) for p in _TOOL_FAILURE):
            return FsckVerdict.FAILED
        if status != 0:
            # Includes "No valid Btrfs found" / "cannot open file system":
            # on a crash state an unreadable superblock or tree root is damage.
            return FsckVerdict.CORRUPT
        if repair and _DAMAGE_REPORTED.search(output):
            return FsckVerdict.REPAIRED
        return FsckVerdict.CLEAN
