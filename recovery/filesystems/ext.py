"""ext2, ext3 and ext4 (e2fsprogs; one kernel driver, ext4, serves all three)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING

from framework.core.command import Tool
from framework.core.errors import ConfigError
from recovery.filesystems.base import (
    FilesystemAdapter,
    FsckVerdict,
    checker_argv,
    classify_fsck8_status,
    split_options,
)
from recovery.persistence import PersistenceRules, journalled, posix_strict

if TYPE_CHECKING:
    from recovery.target import Target

# Block size used when the journal has a device of its own: mke2fs picks the
# block size from the device size (1 KiB below 512 MiB), and the journal
# device and the filesystem must agree on it.
EXTERNAL_JOURNAL_BLOCK_SIZE = 4096


class DataMode(StrEnum):
    """The data= journalling modes (ext4_param_data in fs/ext4/super.c, Linux 6.1)."""

    ORDERED = "ordered"  # the default: data written before the metadata that points at it commits
    WRITEBACK = "writeback"  # metadata journalled, data order not kept
    JOURNAL = "journal"  # data goes through the journal too


@dataclass(frozen=True, slots=True)
class ExtMode:
    """What the ext4 driver does with a target, read from its options."""

    journal: bool
    data: DataMode
    auto_da_alloc: bool


def _features(mkfs_options: Sequence[str]) -> list[str]:
    """The -O feature edits of a mke2fs command line, in order."""
    out: list[str] = []
    opts = list(mkfs_options)
    for i, opt in enumerate(opts):
        if opt == "-O" and i + 1 < len(opts):
            out += opts[i + 1].split(",")
        elif opt.startswith("-O") and len(opt) > 2:
            out += opt[2:].split(",")
    return [f.strip().lower() for f in out if f.strip()]


def mkfs_makes_journal(fstype: str, mkfs_options: Sequence[str]) -> bool:
    """Whether ``mke2fs -t fstype`` with these options writes a journal.

    ext3 and ext4 have one unless ``-O ^has_journal`` (or ``none``) removes
    it; ext2 has none unless ``-j``, ``-J`` or ``-O has_journal`` adds it
    (mke2fs(8); feature edits as e2p_edit_feature2() in lib/e2p/feature.c
    reads them: ``^`` or ``-`` clears, ``+`` or nothing sets).
    """
    journal = fstype != "ext2"
    for feature in _features(mkfs_options):
        if feature in ("none", "clear"):
            journal = False
        elif feature.lstrip("+") == "has_journal":
            journal = True
        elif feature[:1] in ("^", "-") and feature[1:] == "has_journal":
            journal = False
    # -j and -J set a journal size, and PRS() in misc/mke2fs.c (e2fsprogs)
    # turns has_journal on for it after the feature edits.
    return journal or any(opt == "-j" or opt.startswith("-J") for opt in mkfs_options)


def ext_mode(target: Target, *, where: str) -> ExtMode:
    """Read ``target``'s journal, data mode and auto_da_alloc; ConfigError for an unknown data mode."""
    data = DataMode.ORDERED
    auto_da_alloc = True
    # ext4_parse_param() (fs/ext4/super.c, Linux 6.1) applies the options in
    # order, so the last data= and the last auto_da_alloc setting win.
    for opt in split_options(target.mount_options):
        key, eq, value = opt.partition("=")
        if key == "data" and eq:
            try:
                data = DataMode(value)
            except ValueError:
                known = ", ".join(m.value for m in DataMode)
                raise ConfigError(
                    f"{where}.mount_options: unknown {target.fstype} data mode {value!r} "
                    f"(known: {known})") from None
        elif opt == "noauto_da_alloc":
            auto_da_alloc = False
        elif key == "auto_da_alloc":
            # "auto_da_alloc=0" is noauto_da_alloc; a bare flag or any other number enables it.
            auto_da_alloc = not (eq and value.strip() == "0")
    return ExtMode(journal=mkfs_makes_journal(target.fstype, target.mkfs_options) and
                   target.journalled, data=data, auto_da_alloc=auto_da_alloc)


class ExtAdapter(FilesystemAdapter):
    family = "ext"
    fstypes = ("ext2", "ext3", "ext4")
    fstests_dirs = ("ext4",)
    capabilities = frozenset({"direct-io", "rename-exchange", "fallocate", "punch-hole", "zero-range",
                              "collapse-range", "insert-range", "rename-whiteout", "setflags"})
    # One driver serves all three: Debian's kernel has CONFIG_EXT4_USE_FOR_EXT2=y
    # and neither CONFIG_EXT2_FS nor CONFIG_EXT3_FS.
    kernel_modules = ("ext4",)
    # Required: the default study (quick) and the crash and cut defaults are ext targets.
    tools = (
        Tool("mke2fs", "e2fsprogs", ("-V",)),
        Tool("e2fsck", "e2fsprogs", ("-V",)),
        # e2fsck statically linked (Debian's e2fsck-static, built from the same source): a
        # crash state's check runs it when it says the same version as e2fsck.
        Tool("e2fsck.static", "e2fsck-static", ("-V",), required=False, needed=False),
    )
    static_checkers = (("e2fsck", "e2fsck.static"),)
    supports_external_journal = True
    # ext4_fill_super() (Linux 6.1) looks at no other mounted filesystem's UUID: copies of
    # one filesystem mount side by side.
    concurrent_copies_mount = True
    journal_optional = True
    journal_sizable = True  # mke2fs -J size=, or the journal device's size
    replay_patterns = (
        # fs/ext4/super.c after jbd2_journal_load() replayed the log.
        re.compile(r"EXT[234]-fs \(.*\): recovery complete"),
        re.compile(r"EXT[234]-fs \(.*\): INFO: recovery required"),
        re.compile(r"EXT[234]-fs \(.*\): write access will be enabled during recovery"),
        # Orphan processing is the other half of crash recovery at mount.
        re.compile(r"EXT[234]-fs \(.*\): \d+ (orphan inodes? deleted|truncates? cleaned up)"),
        re.compile(r"JBD2: .*recover", re.IGNORECASE),
    )

    def check_target(self, target: Target, *, where: str) -> None:
        super().check_target(target, where=where)
        mode = ext_mode(target, where=where)
        makes = mkfs_makes_journal(target.fstype, target.mkfs_options)
        if makes and not target.journalled:
            raise ConfigError(
                f"{where}.journal: 'none', but mke2fs makes {target.fstype} with a journal "
                f"(add \"-O\", \"^has_journal\" to mkfs_options)")
        if not makes and target.journalled:
            raise ConfigError(
                f"{where}.journal: {target.journal.value!r}, but mke2fs makes {target.fstype} "
                f"without a journal (set journal = \"none\")")
        if not mode.journal and mode.data is not DataMode.ORDERED:
            # __ext4_fill_super() refuses the mount: "can't mount with
            # data=, fs mounted w/o journal" (fs/ext4/super.c, Linux 6.1).
            raise ConfigError(
                f"{where}.mount_options: data={mode.data.value} needs a journal, "
                f"and this {target.fstype} has none")

    def target_capabilities(self, target: Target) -> frozenset[str]:
        # ext4_fallocate() (fs/ext4/extents.c, Linux 6.1) punches holes in any
        # file, but ext4_collapse_range(), ext4_insert_range(), ext4_zero_range()
        # and plain allocation return EOPNOTSUPP for a file without
        # EXT4_INODE_EXTENTS. mke2fs gives ext4 the extent feature and ext2 and
        # ext3 none, unless -O edits say otherwise.
        extents = target.fstype == "ext4"
        for feature in _features(target.mkfs_options):
            if feature.lstrip("^-+") in ("extent", "extents"):
                extents = feature[:1] not in ("^", "-")
        if extents:
            return self.capabilities
        return self.capabilities - {"fallocate", "zero-range", "collapse-range", "insert-range"}

    def persistence_rules(self, target: Target) -> PersistenceRules:
        mode = ext_mode(target, where=f"targets.{target.name!r}")
        if target.fstype == "ext2":
            # Whatever driver mounts it (ext2, or ext4 serving ext2), ext2 is
            # described by its on-disk format: no journal, POSIX only.
            return posix_strict("ext2")
        if not mode.journal:
            # No jbd2: ext4_fsync_nojournal() syncs the inode and, for a new
            # inode, its parents (ext4_sync_parent()), one buffer at a time:
            # nothing is atomic, nothing beyond POSIX is promised.
            return posix_strict(f"{target.fstype}/nojournal")
        name = f"{target.fstype}/{mode.data.value}"
        if mode.data is DataMode.WRITEBACK:
            # No data ordering: the replace-via-rename blocks may land after
            # the rename, and allocated blocks may show old disk contents.
            return replace(journalled(name), stale_data_after_extension=True,
                           other_files_data_never_exposed=False)
        if not mode.auto_da_alloc:
            # Different checks, a different name.
            name += ",noauto_da_alloc"
        rules = replace(journalled(name), rename_replace_flushes_data=mode.auto_da_alloc)
        if mode.data is DataMode.JOURNAL:
            return replace(rules, data_block_atomic=True)
        return rules

    @staticmethod
    def _block_size(target: Target) -> int:
        opts = list(target.mkfs_options)
        for i, opt in enumerate(opts):
            if opt == "-b" and i + 1 < len(opts):
                return int(opts[i + 1])
        return EXTERNAL_JOURNAL_BLOCK_SIZE

    def _mkfs_argv(self, target: Target, dev: str, journal_dev: str | None,
                   size_bytes: int | None) -> list[str]:
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

    # dumpe2fs(8) -h: an external journal shows as "Journal UUID" and "Journal device"
    # (the device number it was made on); an internal one as "Journal inode" and
    # "Journal size".
    journal_location_prefixes = ("Journal UUID:", "Journal device:", "Journal inode:",
                                 "Journal size:")

    def journal_location_argv(self, dev: str) -> list[str] | None:
        return ["dumpe2fs", "-h", dev]

    def fsck_argv(self, dev: str, *, repair: bool, journal_dev: str | None = None) -> list[str]:
        # -f: check even if the superblock says clean (a crash state often does).
        return checker_argv(["e2fsck", "-f", "-y" if repair else "-n"], dev, journal_dev)

    def journal_only_argv(self, dev: str, *, journal_dev: str | None = None) -> list[str] | None:
        # -E journal_only: replay the journal if needed and stop (e2fsck(8)); -p so it
        # asks nothing. -n would open read-only and skip the replay altogether.
        return checker_argv(["e2fsck", "-E", "journal_only", "-p"], dev, journal_dev)

    def classify_fsck(
        self, status: int, stdout: str, stderr: str, *, repair: bool
    ) -> FsckVerdict:
        # e2fsck(8) EXIT CODE: 0 none, 1 corrected, 2 corrected + reboot,
        # 4 left uncorrected, 8 operational, 16 usage, 32 cancelled,
        # 128 shared library error; the status is their sum.
        return classify_fsck8_status(status, repair=repair)
