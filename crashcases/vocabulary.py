"""powercut's words: outcomes, crash-point kinds, variant kinds, operation kinds.

An outcome is what one crash state or power-cut trial came to: ok = mounted,
kept every promise, fsck clean; recovered = kept every promise but fsck had
to repair; data-loss = broke a durability promise; corrupt = fsck could not
repair it, or reading failed; unmountable = the kernel refused it; hang =
mount, umount or fsck outlived its deadline; error = the harness could not
finish the check (a device or mount stayed busy): not a verdict on the
filesystem, and the state is checked again on a fresh guest before it is
recorded so. A crash point is where in the recorded log a crash is placed;
a variant is how the writes not yet flushed there are treated. ``fails`` is
the one definition of a failing outcome.

An operation kind is what a workload op does (creat, pwrite, fsync, ...). The
oracle, a floor below the workloads, knows a durability op only by its kind,
so the kinds and their groups are words here, where it can read them: which
ops are followed by a log mark, and what each of those promises (everything
before it, a file's data, a byte range of it, the inode's other metadata
too). The rules of each kind (its words, when it applies to a tree, what it
does to it) are its class in crashcases.workload.kinds.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from recovery.targets import Target


class Outcome(StrEnum):
    OK = "ok"
    RECOVERED = "recovered"
    DATA_LOSS = "data-loss"
    CORRUPT = "corrupt"
    UNMOUNTABLE = "unmountable"
    HANG = "hang"
    ERROR = "error"


# Worst first: a state gets the worst outcome any of its steps shows.
SEVERITY = (Outcome.ERROR, Outcome.HANG, Outcome.UNMOUNTABLE, Outcome.DATA_LOSS, Outcome.CORRUPT,
            Outcome.RECOVERED, Outcome.OK)

#: Outcomes that fail any target.
ALWAYS_FAILING = frozenset({Outcome.DATA_LOSS, Outcome.CORRUPT, Outcome.UNMOUNTABLE, Outcome.HANG})

#: How a failing state is reported when known behaviour explains every finding
#: (crashcases.known). Not an Outcome: the raw outcome is kept beside it.
KNOWN = "known"

#: How the first note of a state begins when it failed only in the log's order and passed
#: in the other order the log cannot rule out (crashcases.crash.points.order_alternate).
OTHER_READING_PASSED = "not a finding: "


def worst(*outcomes: Outcome) -> Outcome:
    return min(outcomes, key=SEVERITY.index)


def fails(outcome: Outcome | str, target: Target | None) -> bool:
    """Whether ``outcome`` is a failure of ``target``; every reader of results decides so.

    A journalled filesystem promises a consistent state after replay, so a
    state that needed fsck repair fails it; for a filesystem without a
    journal, repair at boot is the expected recovery (ext2's e2fsck -p). With
    no target (a stored configuration that cannot be read) a repair fails, as
    for the journalled filesystems most targets are: a reader does not hide
    what it cannot judge.
    """
    outcome = Outcome(outcome)
    return outcome in ALWAYS_FAILING or (
        outcome is Outcome.RECOVERED and (target is None or target.journalled))


class CrashPointKind(StrEnum):
    """How a crash point was chosen."""

    MARK = "mark"
    FUA = "fua"
    FLUSH = "flush"
    EVERY = "every"
    SAMPLE = "sample"


class VariantKind(StrEnum):
    """Which state is built at a crash point (see the module docstring)."""

    PREFIX = "prefix"
    SUBSET = "subset"
    TORN = "torn"
    LYING = "lying"


PointKind = CrashPointKind


@dataclass(frozen=True, slots=True)
class Rate:
    """How often a failing state failed when it was checked: ``failed`` of ``runs``
    checks, the first included. Reliable only when every check failed and there were at
    least RELIABLE_RUNS of them (fstests' runners print "Flaky NN% (f/t)" otherwise)."""

    failed: int
    runs: int

    @property
    def reliable(self) -> bool:
        return self.runs >= RELIABLE_RUNS and self.failed == self.runs

    def words(self) -> str:
        f_t = f"{self.failed}/{self.runs}"
        if self.runs <= 1:
            return f"fails {f_t} (not checked again)"
        if self.reliable:
            return f"fails {f_t}, reliable"
        if self.failed == self.runs:
            return f"fails {f_t} (reliable only at {RELIABLE_RUNS} checks or more)"
        return f"fails {f_t}, flaky {100 * self.failed // self.runs}%"

    def to_dict(self) -> dict[str, int | bool | str]:
        return {"failed": self.failed, "runs": self.runs, "reliable": self.reliable,
                "words": self.words()}


#: Checks a failing state needs, all failing, to be called reliable.
RELIABLE_RUNS = 3


class OpKind(StrEnum):
    """What a workload operation does (its fields: crashcases.workload.ops.Op)."""

    CREAT = "creat"  # creat(2): create, or truncate an existing file to 0
    MKDIR = "mkdir"
    WRITE = "write"  # rewrite the whole file: O_TRUNC then `length` new bytes
    PWRITE = "pwrite"  # overwrite/extend `length` bytes at `offset`
    APPEND = "append"  # O_APPEND write of `length` bytes
    TRUNCATE = "truncate"  # to `size`
    FALLOCATE = "fallocate"  # `falloc` mode over [offset, offset+length)
    RENAME = "rename"  # path -> dst (replaces dst if it exists)
    LINK = "link"  # hard link path -> dst
    UNLINK = "unlink"
    RMDIR = "rmdir"
    SYMLINK = "symlink"  # path becomes a symlink whose text is `target`
    SETXATTR = "setxattr"  # `xattr` = `length` generated bytes
    REMOVEXATTR = "removexattr"
    FSYNC = "fsync"
    FDATASYNC = "fdatasync"
    SYNC = "sync"
    FSYNC_DIR = "fsync_dir"
    DIRECT_WRITE = "direct_write"  # O_DIRECT pwrite at `offset`; offset and length 4 KiB aligned
    MMAP_WRITE = "mmap_write"  # store through a shared mapping; the range lies inside the file
    MSYNC = "msync"  # msync(MS_SYNC) of a shared mapping of [offset, offset+length)
    WRITE_OSYNC = "write_osync"  # pwrite through an O_SYNC descriptor
    WRITE_ODSYNC = "write_odsync"  # pwrite through an O_DSYNC descriptor
    SYNC_FILE_RANGE = "sync_file_range"  # WAIT_BEFORE|WRITE|WAIT_AFTER; length 0: to the end
    SYNCFS = "syncfs"  # syncfs(2) on a descriptor of `path` (any name on the filesystem)
    RENAME_NOREPLACE = "rename_noreplace"  # renameat2 RENAME_NOREPLACE: dst must not exist
    RENAME_EXCHANGE = "rename_exchange"  # renameat2 RENAME_EXCHANGE: swap path and dst
    COPY_FILE_RANGE = "copy_file_range"  # path[offset:+length] -> dst at dst_offset
    CLONE = "clone"  # ioctl FICLONE: dst shares all of path's data from offset 0
    CLONE_RANGE = "clone_range"  # ioctl FICLONERANGE: path[offset:+length] -> dst at dst_offset
    # The kinds below came with the input-coverage workload (cover:N); the older generators
    # never draw them.
    DEDUPE_RANGE = "dedupe_range"  # ioctl FIDEDUPERANGE: share path[offset:+length] with dst
    RENAME_WHITEOUT = "rename_whiteout"  # renameat2 RENAME_WHITEOUT: path becomes a whiteout
    MKNOD = "mknod"  # mknod(2) S_IFIFO: a FIFO at `path`
    CHMOD = "chmod"  # chmod(2): permission bits `mode`
    CHOWN = "chown"  # chown(2): `uid` and `gid` (-1: unchanged)
    UTIMES = "utimes"  # utimensat(2): `atime_ns`, `mtime_ns` (or UTIME_NOW, UTIME_OMIT)
    SETFLAGS = "setflags"  # ioctl FS_IOC_SETFLAGS: the inode flags in `flags` (ioctl_iflags(2))
    DIRECT_WRITE_OSYNC = "direct_write_osync"  # pwrite through an O_DIRECT|O_SYNC descriptor
    DIRECT_WRITE_ODSYNC = "direct_write_odsync"  # pwrite through an O_DIRECT|O_DSYNC descriptor


#: Durability operations: a log mark follows each (crashcases.execute), and the oracle
#: records what it promised. sync_file_range(2) is deliberately not one: it promises
#: nothing.
DURABILITY_OPS = frozenset({
    OpKind.FSYNC, OpKind.FDATASYNC, OpKind.SYNC, OpKind.FSYNC_DIR, OpKind.MSYNC,
    OpKind.WRITE_OSYNC, OpKind.WRITE_ODSYNC, OpKind.SYNCFS, OpKind.DIRECT_WRITE_OSYNC,
    OpKind.DIRECT_WRITE_ODSYNC,
})
# What a durability op promises, by kind (crashcases.oracle.promises says why);
# FSYNC_DIR, the one left, promises its directory's entries.
#: Everything done before it, on the whole filesystem.
SYNC_ALL_OPS = frozenset({OpKind.SYNC, OpKind.SYNCFS})
#: All the data of one file.
WHOLE_FILE_SYNC_OPS = frozenset({OpKind.FSYNC, OpKind.FDATASYNC})
#: The data of a byte range of one file (its mark records the range).
RANGE_SYNC_OPS = frozenset({OpKind.WRITE_OSYNC, OpKind.WRITE_ODSYNC, OpKind.MSYNC,
                            OpKind.DIRECT_WRITE_OSYNC, OpKind.DIRECT_WRITE_ODSYNC})
#: The two above: a file's own ->fsync, over all of it or a range.
FILE_SYNC_OPS = WHOLE_FILE_SYNC_OPS | RANGE_SYNC_OPS
#: Of those, the ones that also promise the inode's other metadata (xattrs, names), as
#: fsync does and fdatasync does not.
FULL_SYNC_OPS = frozenset({OpKind.FSYNC, OpKind.WRITE_OSYNC, OpKind.DIRECT_WRITE_OSYNC})

#: Ops that write generated bytes at `offset`.
WRITE_AT_OPS = frozenset({
    OpKind.PWRITE, OpKind.DIRECT_WRITE, OpKind.MMAP_WRITE, OpKind.WRITE_OSYNC,
    OpKind.WRITE_ODSYNC, OpKind.DIRECT_WRITE_OSYNC, OpKind.DIRECT_WRITE_ODSYNC,
})
#: Ops that change the data or size of the file at `path`.
DATA_OPS = WRITE_AT_OPS | {OpKind.WRITE, OpKind.APPEND, OpKind.TRUNCATE, OpKind.FALLOCATE}
#: Ops that change the data of `dst` from the data of `path`.
COPY_OPS = frozenset({OpKind.COPY_FILE_RANGE, OpKind.CLONE, OpKind.CLONE_RANGE})
RENAME_OPS = frozenset({OpKind.RENAME, OpKind.RENAME_NOREPLACE, OpKind.RENAME_EXCHANGE,
                        OpKind.RENAME_WHITEOUT})
#: Ops that bind or unbind names: the oracle records each change of what a path names.
NAME_OPS = frozenset({
    OpKind.CREAT, OpKind.MKDIR, OpKind.SYMLINK, OpKind.LINK, OpKind.UNLINK, OpKind.RMDIR,
    OpKind.MKNOD,
}) | RENAME_OPS
XATTR_OPS = frozenset({OpKind.SETXATTR, OpKind.REMOVEXATTR})
#: Ops that set an inode's attributes (crashcases.oracle.log.ATTRIBUTES): its mode, owner,
#: times or inode flags.
ATTR_OPS = frozenset({OpKind.CHMOD, OpKind.CHOWN, OpKind.UTIMES, OpKind.SETFLAGS})
