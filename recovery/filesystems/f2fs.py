"""f2fs (f2fs-tools)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

from framework.core.command import Tool
from recovery.filesystems.base import FilesystemAdapter, FsckVerdict, classify_fsck8_status
from recovery.persistence import PersistenceRules, journalled

if TYPE_CHECKING:
    from recovery.target import Target

SECTOR_BYTES = 512

# fsck.f2fs exits with -1 (255) when it cannot even load the superblock or
# checkpoint: on a crash state that is damage, not a broken tool.
_NO_FILESYSTEM = re.compile(
    r"Can't find a valid F2FS superblock|Failed to get valid F2FS checkpoint|"
    r"Magic Mismatch|Wrong segment_count|Invalid SB",
    re.IGNORECASE,
)


class F2fsAdapter(FilesystemAdapter):
    family = "f2fs"
    fstypes = ("f2fs",)
    fstests_dirs = ("f2fs",)
    capabilities = frozenset({"direct-io", "fallocate", "punch-hole", "zero-range", "collapse-range",
                              "insert-range", "rename-exchange",  # f2fs_fallocate()
                              "rename-whiteout", "setflags"})
    kernel_modules = ("f2fs",)
    tools = (
        Tool("mkfs.f2fs", "f2fs-tools", ("-V",), required=False),
        Tool("fsck.f2fs", "f2fs-tools", ("-V",), required=False),
    )

    def persistence_rules(self, target: Target) -> PersistenceRules:
        # fsync of a new file carries its dentry in roll-forward recovery
        # (recover_dentry(), fs/f2fs/recovery.c), and hard links, renames
        # and parents not yet checkpointed make fsync write a checkpoint
        # (need_do_checkpoint(), fs/f2fs/file.c, Linux 6.1). Data is written
        # out of place, but one block is not promised atomic here.
        # stale_data_after_extension=False is kept as it was; Linux 6.1's
        # checkpoint does not wait for regular file data
        # (f2fs_is_cp_guaranteed(), fs/f2fs/data.c), so a positive finding
        # of this kind deserves a second look before it is reported. For the
        # same reason a block may read another file's old data after a
        # checkpoint: other_files_data_never_exposed is not promised.
        return replace(journalled("f2fs"), other_files_data_never_exposed=False)

    def _mkfs_argv(self, target: Target, dev: str, journal_dev: str | None,
                   size_bytes: int | None) -> list[str]:
        # -f: overwrite an existing signature; -q: no progress output.
        argv = ["mkfs.f2fs", "-f", "-q", *target.mkfs_options, dev]
        if size_bytes is not None:
            # mkfs.f2fs takes the size as a trailing count of 512-byte sectors.
            argv.append(str(size_bytes // SECTOR_BYTES))
        return argv

    def fsck_argv(self, dev: str, *, repair: bool, journal_dev: str | None = None) -> list[str]:
        # -f: check everything even if the checkpoint says clean. Without
        # --dry-run or -f, a damaged image makes fsck.f2fs ask "Do you want
        # to fix this partition? [Y/N]" and loop on a closed stdin.
        # --dry-run keeps the fix logic (so errors are counted) but never writes.
        if repair:
            return ["fsck.f2fs", "-f", dev]
        return ["fsck.f2fs", "-f", "--dry-run", dev]

    def classify_fsck(
        self, status: int, stdout: str, stderr: str, *, repair: bool
    ) -> FsckVerdict:
        # Since f2fs-tools 1.14 fsck.f2fs uses fsck(8) codes (the man page
        # still says "0 or -1"): 0 clean, 1 corrected, 4 left uncorrected,
        # 8 operational error, 16 usage. A dry run that "corrected" something
        # found errors it did not write back: corrupt.
        if status == 255:
            output = f"{stdout}\n{stderr}"
            return FsckVerdict.CORRUPT if _NO_FILESYSTEM.search(output) else FsckVerdict.FAILED
        return classify_fsck8_status(status, repair=repair)
