"""What every filesystem adapter provides, and the fsck verdicts they share."""

from __future__ import annotations

import abc
import re
from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING

from framework.core.command import Tool
from framework.core.errors import ConfigError
from recovery.persistence import PersistenceRules

if TYPE_CHECKING:
    from recovery.target import Target


class FsckVerdict(StrEnum):
    """What one fsck run says about a filesystem."""

    CLEAN = "clean"  # no inconsistency found
    REPAIRED = "repaired"  # inconsistencies found and all corrected
    CORRUPT = "corrupt"  # inconsistencies found and left (read-only check, or repair gave up)
    FAILED = "failed"  # the tool itself broke (usage, I/O, cannot run): no verdict on the fs


def split_options(options: Sequence[str]) -> list[str]:
    """Mount options one per item: ``["rw,data=journal"]`` -> ``["rw", "data=journal"]``."""
    return [o.strip() for opt in options for o in opt.split(",") if o.strip()]


# Exit-status bits shared by e2fsck and jfs_fsck, and used by fsck.f2fs since
# f2fs-tools 1.14 (fsck(8)): they are summed, so test them as bits.
FSCK_CORRECTED = 1
FSCK_REBOOT = 2
FSCK_UNCORRECTED = 4
FSCK_OPERATIONAL = 8
FSCK_USAGE = 16
FSCK_CANCELLED = 32
FSCK_LIBRARY = 128


def classify_fsck8_status(status: int, *, repair: bool) -> FsckVerdict:
    """Classify an fsck(8)-style status (bit sum of the codes above)."""
    if status < 0 or status > 255:
        return FsckVerdict.FAILED
    if status & (FSCK_OPERATIONAL | FSCK_USAGE | FSCK_CANCELLED | FSCK_LIBRARY):
        return FsckVerdict.FAILED
    if status & FSCK_UNCORRECTED:
        return FsckVerdict.CORRUPT
    if status & (FSCK_CORRECTED | FSCK_REBOOT):
        # In a no-modify run "corrected" can only mean "found and would fix":
        # the image on disk still holds the inconsistency.
        return FsckVerdict.REPAIRED if repair else FsckVerdict.CORRUPT
    return FsckVerdict.CLEAN


def checker_argv(argv: Sequence[str], dev: str, journal_dev: str | None) -> list[str]:
    """A checker's command for ``dev``: ``argv``, then ``-j JOURNAL_DEV`` where the journal is on
    a disk of its own (e2fsck, jfs_fsck and reiserfsck all name it so), then ``dev``."""
    return [*argv, *(() if journal_dev is None else ("-j", journal_dev)), dev]


#: What some filesystems can do and others cannot, in the words crash
#: workloads use (crashcases.workload.ops.required_capability):
#: - direct-io: open(2) with O_DIRECT (the address space has ->direct_IO;
#:   do_dentry_open() in fs/open.c refuses it with EINVAL otherwise);
#: - reflink: the FICLONE and FICLONERANGE ioctls (->remap_file_range);
#: - fallocate: fallocate(2) allocating a range (mode 0 and FALLOC_FL_KEEP_SIZE);
#: - punch-hole, zero-range, collapse-range, insert-range, unshare-range: those
#:   fallocate(2) modes;
#: - rename-exchange, rename-whiteout: renameat2(2) RENAME_EXCHANGE, RENAME_WHITEOUT
#:   (->rename accepts the flag; the others return EINVAL);
#: - dedupe: the FIDEDUPERANGE ioctl (->remap_file_range takes REMAP_FILE_DEDUP);
#: - setflags: FS_IOC_SETFLAGS takes append-only, immutable, sync, nodump and noatime
#:   (->fileattr_set).
CAPABILITIES = frozenset(
    {"direct-io", "reflink", "fallocate", "punch-hole", "zero-range", "collapse-range",
     "insert-range", "rename-exchange", "rename-whiteout", "dedupe", "unshare-range",
     "setflags"}
)


def matching_lines(text: str, patterns: Iterable[re.Pattern[str]]) -> list[str]:
    """Lines of ``text`` that match any pattern, stripped, in order."""
    compiled = tuple(patterns)
    return [
        line.strip()
        for line in text.splitlines()
        if any(p.search(line) for p in compiled)
    ]


class FilesystemAdapter(abc.ABC):
    """One filesystem family: its mkfs, mount options, fsck and its exit codes.

    Subclasses set the class attributes and override the methods whose
    behaviour differs; the defaults describe a filesystem with an internal
    journal and no external-journal support.
    """

    #: Family name: ext, xfs, btrfs, f2fs, jfs, reiserfs.
    family: str = ""
    #: Mount types this adapter serves (``Target.fstype``).
    fstypes: tuple[str, ...] = ()
    #: Kernel modules the filesystem needs, in load order (the guest's
    #: initramfs loads them; availability probes modprobe them).
    kernel_modules: tuple[str, ...] = ()
    #: Programs the adapter runs, each with its Debian package.
    tools: tuple[Tool, ...] = ()
    #: Smallest data device mkfs accepts (0: no limit worth stating).
    min_size_bytes: int = 0
    #: Smallest external journal device mkfs accepts.
    min_journal_size_bytes: int = 0
    #: Whether a journal (or log) may live on its own device.
    supports_external_journal: bool = False
    #: Whether mkfs takes the journal's size (``Target.journal_size_mib``).
    journal_sizable: bool = False
    #: Whether the filesystem can be made without a journal (journal = "none").
    journal_optional: bool = False
    #: Whether the kernel replays the journal at mount. JFS does not: it
    #: refuses a dirty rw mount and leaves log replay to jfs_fsck.
    mount_replays_journal: bool = True
    #: Whether two copies of one filesystem (one UUID) may be mounted at the same time, each
    #: as itself: crash checks then run two states at once. Not where the kernel takes both
    #: devices for one: btrfs (device_list_add() keys devices by fsid and devid). xfs keeps
    #: a table of mounted UUIDs that the second copy skips with nouuid
    #: (second_copy_mount_options). Off unless an adapter says so.
    concurrent_copies_mount: bool = False
    #: Mount options the second of two copies mounted at once needs to be mounted at all
    #: (added to the target's own on the second checking lane only).
    second_copy_mount_options: tuple[str, ...] = ()
    #: Kernel-log lines that say a journal (or log tree) was replayed.
    replay_patterns: tuple[re.Pattern[str], ...] = ()
    #: Which of CAPABILITIES the filesystem has (as Linux 6.1 implements it);
    #: crash workload generators use an op only where its capability is.
    capabilities: frozenset[str] = frozenset()
    #: The mount types of it that have a test directory of their own in fstests
    #: (tests/TYPE/); a test of another type goes in tests/generic/.
    fstests_dirs: tuple[str, ...] = ()

    def target_capabilities(self, target: Target) -> frozenset[str]:
        """The capabilities ``target`` has: the class's, unless its options take some away."""
        return self.capabilities

    def check_target(self, target: Target, *, where: str) -> None:
        """Reject a target this filesystem cannot be, with a one-line ConfigError.

        Called when a target is loaded; ``where`` names the file and the
        target (``file: targets.'name'``). Subclasses that read options
        (persistence_rules) check them here too, so a bad option fails at
        load time rather than in the middle of a run.
        """
        if target.needs_journal_disk and not self.supports_external_journal:
            raise ConfigError(
                f"{where}.journal: {target.fstype} cannot put its journal on its own disk")
        if not target.journalled and not self.journal_optional:
            raise ConfigError(
                f"{where}.journal: {target.fstype} always has a journal; 'none' is not possible")

    @abc.abstractmethod
    def persistence_rules(self, target: Target) -> PersistenceRules:
        """What fsync, fdatasync and sync promise on ``target``, beyond POSIX.

        Derived from the filesystem type, the journal and the mount (and
        mkfs) options, never from the target's name. Raises ConfigError for
        options check_target() would reject.
        """

    def mkfs_argv(
        self,
        target: Target,
        dev: str,
        *,
        journal_dev: str | None = None,
        size_bytes: int | None = None,
    ) -> list[str]:
        """The non-interactive mkfs command for ``dev`` (and its external journal).

        ``journal_dev`` must be given exactly when the target's journal is on a disk of its
        own; ``size_bytes`` limits the filesystem's size (None: the whole device)."""
        return self._mkfs_argv(target, dev, self._require_journal_dev(target, journal_dev),
                               size_bytes)

    @abc.abstractmethod
    def _mkfs_argv(self, target: Target, dev: str, journal_dev: str | None,
                   size_bytes: int | None) -> list[str]:
        """mkfs_argv() once its journal device is checked."""

    def journal_mkfs_argv(self, target: Target, journal_dev: str) -> list[str] | None:
        """A command that formats the external journal device first, if one is needed."""
        return None

    def attach_journal_argv(self, target: Target, dev: str, journal_dev: str) -> list[str] | None:
        """A command that points the filesystem at its journal device before mount, if needed."""
        return None

    def mount_options(self, target: Target, *, journal_dev: str | None = None) -> list[str]:
        """Mount options: the target's own plus what the journal placement needs."""
        return list(target.mount_options)

    @abc.abstractmethod
    def fsck_argv(self, dev: str, *, repair: bool, journal_dev: str | None = None) -> list[str]:
        """A non-interactive fsck: no-modify check, or repair with every answer yes."""

    #: Checkers with a statically linked build of the same program, as (the checker, its
    #: static build) pairs. Where the time is not the answer (the check of a crash state)
    #: the static build runs instead when installed (recovery.fsck.run_fsck's
    #: ``quick_start``).
    static_checkers: tuple[tuple[str, str], ...] = ()

    #: How the lines of ``journal_location_argv``'s output that say where the journal is
    #: begin.
    journal_location_prefixes: tuple[str, ...] = ()

    def journal_location_argv(self, dev: str) -> list[str] | None:
        """A read-only command whose output says where ``dev``'s journal is; None if the
        filesystem has no such tool."""
        return None

    def journal_location_lines(self, output: str) -> list[str]:
        """The lines of ``journal_location_argv``'s output that say where the journal is,
        their runs of blanks made one."""
        return [" ".join(line.split()) for line in output.splitlines()
                if line.startswith(self.journal_location_prefixes)]

    def journal_replay_argv(self, dev: str, *, journal_dev: str | None = None) -> list[str] | None:
        """The checker's journal replay, run before anything else when the kernel does not
        replay at mount (``mount_replays_journal`` False); None where mount replays."""
        return None

    def journal_only_argv(self, dev: str, *, journal_dev: str | None = None) -> list[str] | None:
        """The checker replaying the journal and doing nothing else, where it can (e2fsck
        ``-E journal_only``), to time next to the kernel's replay at mount; None otherwise."""
        return None

    @abc.abstractmethod
    def classify_fsck(
        self, status: int, stdout: str, stderr: str, *, repair: bool
    ) -> FsckVerdict:
        """Turn the fsck exit status (and, where status is not enough, its output) into a verdict."""

    def journal_replay_messages(self, dmesg_text: str) -> list[str]:
        """The kernel-log lines that report journal replay at mount."""
        return matching_lines(dmesg_text, self.replay_patterns)

    # Helpers shared by subclasses.

    def _require_journal_dev(self, target: Target, journal_dev: str | None) -> str | None:
        """Check that ``journal_dev`` is given exactly when the target needs one."""
        if target.needs_journal_disk and not journal_dev:
            raise ConfigError(f"target {target.name!r}: needs a journal device (journal = external)")
        if journal_dev and not target.needs_journal_disk:
            raise ConfigError(
                f"target {target.name!r}: got journal device {journal_dev} "
                f"but its journal is {target.journal}"
            )
        return journal_dev
