"""ext2, ext3 and ext4 (e2fsprogs; one kernel driver, ext4, serves all three)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from recovery.filesystems.base import FilesystemAdapter, FsckVerdict, classify_fsck8_status

if TYPE_CHECKING:
    from recovery.targets import Target

# Block size used when the journal has a device of its own: mke2fs picks the
# block size from the device size (1 KiB below 512 MiB), and the journal
# device and the filesystem must agree on it.
EXTERNAL_JOURNAL_BLOCK_SIZE = 4096


class ExtAdapter(FilesystemAdapter):
    family = "ext"
    fstypes = ("ext2", "ext3", "ext4")
    kernel_module = "ext4"
    tools = ("mke2fs", "e2fsck")
    package = "e2fsprogs"
    supports_external_journal = True
    replay_patterns = (
        # fs/ext4/super.c after jbd2_journal_load() replayed the log.
        re.compile(r"EXT[234]-fs \(.*\): recovery complete"),
        re.compile(r"EXT[234]-fs \(.*\): INFO: recovery required"),
        re.compile(r"EXT[234]-fs \(.*\): write access will be enabled during recovery"),
        # Orphan processing is the other half of crash recovery at mount.
        re.compile(r"EXT[234]-fs \(.*\): \d+ (orphan inodes? deleted|truncates? cleaned up)"),
        re.compile(r"JBD2: .*recover", re.IGNORECASE),
    )

    @staticmethod
    def _block_size(target: Target) -> int:
        opts = list(target.mkfs_options)
        for i, opt in enumerate(opts):
            if opt == "-b" and i + 1 < len(opts):
                return int(opts[i + 1])
        return EXTERNAL_JOURNAL_BLOCK_SIZE

    def mkfs_argv(
        self,
        target: Target,
        dev: str,
        *,
        journal_dev: str | None = None,
        size_bytes: int | None = None,
    ) -> list[str]:
        journal_dev = self._require_journal_dev(target, journal_dev)
        # -F: no "proceed anyway?" on whole disks; -q: no progress output.
        argv = ["mke2fs", "-F", "-q", "-t", target.fstype]
        # Zero the inode tables and journal now: the default lazy init runs
        # in a kernel thread after the first mount and adds writes nobody
        # asked for to the recording and to throughput samples.
        argv += ["-E", "lazy_itable_init=0,lazy_journal_init=0"]
        if target.journal_size_mib is not None and journal_dev is None:
            argv += ["-J", f"size={target.journal_size_mib}"]
        if journal_dev is not None and "-b" not in target.mkfs_options:
            argv += ["-b", str(EXTERNAL_JOURNAL_BLOCK_SIZE)]
        argv += list(target.mkfs_options)
        if journal_dev is not None:
            argv += ["-J", f"device={journal_dev}"]
        argv.append(dev)
        if size_bytes is not None:
            argv.append(f"{size_bytes // 1024}k")
        return argv

    def journal_mkfs_argv(self, target: Target, journal_dev: str) -> list[str] | None:
        if not target.needs_journal_disk:
            return None
        argv = ["mke2fs", "-F", "-q", "-O", "journal_dev", "-b", str(self._block_size(target))]
        if target.journal_size_mib is not None:
            # A journal device's size is given in filesystem blocks.
            blocks = target.journal_size_mib * 1024 * 1024 // self._block_size(target)
            return [*argv, journal_dev, str(blocks)]
        return [*argv, journal_dev]

    def mount_options(self, target: Target, *, journal_dev: str | None = None) -> list[str]:
        opts = list(target.mount_options)
        if journal_dev is not None:
            # The superblock records the journal's device number at mkfs time,
            # which need not match the device the crash state is checked on
            # (replay copies, another machine): name it by path instead.
            opts.append(f"journal_path={journal_dev}")
        return opts

    def fsck_argv(self, dev: str, *, repair: bool, journal_dev: str | None = None) -> list[str]:
        # -f: check even if the superblock says clean (a crash state often does).
        argv = ["e2fsck", "-f", "-y" if repair else "-n"]
        if journal_dev is not None:
            argv += ["-j", journal_dev]
        return [*argv, dev]

    def classify_fsck(
        self, status: int, stdout: str, stderr: str, *, repair: bool
    ) -> FsckVerdict:
        # e2fsck(8) EXIT CODE: 0 none, 1 corrected, 2 corrected + reboot,
        # 4 left uncorrected, 8 operational, 16 usage, 32 cancelled,
        # 128 shared library error; the status is their sum.
        return classify_fsck8_status(status, repair=repair)
