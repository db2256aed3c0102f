"""What a durability operation promises: the rules the crash oracle checks against.

The baseline is POSIX as Linux implements it (``posix_strict``):

- ``fsync(file)``: the file's data, size and inode metadata are durable:
  its xattrs, its mode and owner, and the mtime utimensat(2) gave it
  (fsync(2): "fsync() also flushes the metadata information associated with
  the file (see inode(7))"; inode(7) lists the mode, owner and timestamps;
  with lazytime too, whose times reach the disk on fsync, mount(8)). A
  directory's times are not held: log replay adds its entries again and so
  sets them (crashcases.oracle.log.ATTRIBUTES names the code). Nor atime,
  which reading the crash state changes. NOT its directory entry: a new file needs an fsync of its parent
  directory, a renamed file an fsync of both directories (fsync(2): "Calling
  fsync() does not necessarily ensure that the entry in the directory
  containing the file has also reached disk").
- ``fdatasync(file)``: the data and the metadata needed to read it back
  (the size); not other metadata such as xattrs, mode, owner or mtime
  (fdatasync(2): "does not flush modified metadata unless that metadata is
  needed in order to allow a subsequent data retrieval").
- ``fsync(dir)``: the directory's entries (every name -> which inode, and
  the absence of removed names) and the directory's own metadata (xattrs,
  mode, owner). Not the
  directory's own name in its parent. A new entry is owed only if the
  inode it names is durable too (fsynced, or synced since it was made),
  unless metadata is atomic (the creating transaction carries the inode):
  without a journal, ext4 writes only the directory (ext4_fsync_nojournal(),
  fs/ext4/fsync.c) and e2fsck clears entries that name unused inodes.
- ``sync()``: everything done before it. POSIX lets sync() return before
  the writes finish; Linux waits for them (sync(2), NOTES; ``ksys_sync()``
  in fs/sync.c, Linux 6.1).

Everything else is uncertain after a crash: an operation not yet covered by
a promise may be persisted, partly persisted or not at all. Each field of
``PersistenceRules`` is one stronger guarantee a filesystem gives (making
the oracle stricter), or one extra freedom it has (making it more lenient).
Every rule must stay *sound*: a rule may only promise what the
filesystem's maintainers treat a failure of as a bug.

Which rules a target gets is its filesystem adapter's business
(``FilesystemAdapter.persistence_rules`` in recovery/filesystems/), derived
from the filesystem type, the journal and the mount options, never from
the target's name. The kernel sources cited below were read in Linux 6.1
(Debian bookworm's kernel, the default guest).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace


@dataclass(frozen=True, slots=True)
class PersistenceRules:
    """One filesystem's durability guarantees beyond (or below) POSIX; see each field."""

    #: Filesystem and mode the rules describe (``ext4/ordered``, ``xfs``): two
    #: targets with the same name here get the same checks.
    name: str
    # fsync(file) also makes the file's names durable: every current name of
    # the inode (created by creat/link or renamed to), the removal of names it
    # lost by unlink or rename, and the mkdir-created ancestors of its names.
    # ext3/ext4: ext4_fsync_journal() (fs/ext4/fsync.c) waits for the jbd2
    # transaction of the inode's last change (i_sync_tid), and a jbd2 commit
    # carries every metadata change made before it
    # (jbd2_journal_commit_transaction(), fs/jbd2/commit.c); with fast
    # commits, ext4_fc_commit() (fs/ext4/fast_commit.c) logs the tracked
    # dentry changes or falls back to that full commit. xfs:
    # xfs_file_fsync() forces the log up to the inode's last commit sequence
    # (xfs_fsync_seq() and xfs_log_force_seq(), fs/xfs/xfs_file.c), which is
    # after the create, link and rename transactions that logged it. btrfs:
    # btrfs_sync_file() (fs/btrfs/file.c) -> btrfs_log_inode_parent()
    # (fs/btrfs/tree-log.c) logs new names, new ancestors
    # (log_all_new_ancestors()) and, after a rename or unlink, every old
    # parent (btrfs_log_all_parents()). f2fs: f2fs_do_sync_file()
    # (fs/f2fs/file.c) writes a checkpoint when need_do_checkpoint() sees a
    # hard link, a rename (file_wrong_pino()) or a parent not yet
    # checkpointed; a new file's dentry is rebuilt by roll-forward
    # (recover_dentry(), fs/f2fs/recovery.c). All Linux 6.1.
    # Only names whose change touched the inode: a name a file has because an
    # ancestor directory was renamed is not owed, since that rename left the
    # inode clean (ext4 waits only for i_sync_tid; xfs_fsync_seq() forces
    # nothing for an unpinned inode; btrfs_sync_file() skips an inode already
    # in the committed transaction).
    fsync_file_persists_names: bool = False
    # ... and the names a RENAME_EXCHANGE gave it. ext4_cross_rename()
    # (fs/ext4/namei.c) sets both inodes' ctime and marks them dirty in the
    # rename's handle; btrfs_rename_exchange() (fs/btrfs/inode.c) updates both
    # and logs the new names; f2fs_cross_rename() (fs/f2fs/namei.c) marks
    # both with file_lost_pino(), which makes their fsync a checkpoint.
    # xfs_cross_rename() (fs/xfs/xfs_inode.c) logs the exchanged inodes only
    # when a directory changes parent, so fsync of a file finds it clean and
    # forces nothing. All Linux 6.1.
    fsync_file_persists_exchanged_names: bool = False
    # fdatasync(file) of a file created by creat makes its name (and
    # mkdir-created ancestors) durable: creating the inode is metadata needed
    # to read the data back. ext4: __ext4_new_inode() (fs/ext4/ialloc.c)
    # sets i_datasync_tid to the creating transaction, which fdatasync waits
    # for. xfs: xfs_fsync_seq() skips the log force on fdatasync only when
    # nothing but timestamps changed (ili_fsync_fields, set by
    # xfs_trans_log_inode() in fs/xfs/xfs_inode_item.c), and
    # xfs_init_new_inode() (fs/xfs/xfs_inode.c) logs the new inode's core.
    # btrfs: btrfs_sync_file() logs the same way for both calls, and a new
    # inode gets a full sync (btrfs_set_inode_full_sync() in
    # btrfs_new_inode(), fs/btrfs/inode.c). f2fs: f2fs_do_sync_file()
    # treats fsync and fdatasync alike for recovery. All Linux 6.1.
    fdatasync_persists_new_names: bool = False
    # rename(tmp, existing) starts writeback of tmp before the rename commits,
    # so once the rename is durable (by a directory fsync or sync) the data
    # tmp had at rename time is too: the "replace via rename" idiom works
    # without fsync(tmp). ext4 with auto_da_alloc: ext4_rename()
    # (fs/ext4/namei.c) calls ext4_alloc_da_blocks() (fs/ext4/inode.c) when
    # it replaces a name, and in data=ordered the commit writes the
    # allocated blocks first (journal_submit_data_buffers(),
    # fs/jbd2/commit.c); Documentation/admin-guide/ext4.rst, auto_da_alloc.
    # Linux 6.1.
    rename_replace_flushes_data: bool = False
    # Namespace operations are atomic after recovery: a found file's link
    # count equals the names it has, a found symlink has its full target.
    # True where every metadata change is a journal (or log, or
    # copy-on-write) transaction replayed whole or not at all: jbd2
    # (do_one_pass() in fs/jbd2/recovery.c replays only committed
    # transactions), xlog_recover() (fs/xfs/xfs_log_recover.c),
    # btrfs_commit_transaction() (fs/btrfs/transaction.c), txCommit()
    # (fs/jfs/jfs_txnmgr.c) and do_journal_end() (fs/reiserfs/journal.c).
    # False for ext2 and ext4 without a journal, where
    # ext4_fsync_nojournal() (fs/ext4/fsync.c) writes buffers one by one
    # and only fsck restores consistency. Linux 6.1.
    metadata_atomic: bool = False
    # An in-flight overwrite of a data block leaves the old or the new block,
    # never a sector-level mix of both: data is written out of place (btrfs:
    # cow_file_range() unless should_nocow(), fs/btrfs/inode.c) or through
    # the journal first (ext4 data=journal: "All data are committed into the
    # journal prior to being written into the main file system",
    # Documentation/admin-guide/ext4.rst). Else a disk may tear a block
    # below its size, and a block that changes after its promise cannot be
    # told from a legitimate torn write, so it is not compared. Linux 6.1.
    data_block_atomic: bool = False
    # In-flight data writes are atomic per file: the file's content equals one
    # version it had, not a per-block mix of versions. No built-in filesystem
    # promises this: write(2) and fsync(2) say nothing of atomicity across a
    # crash. It exists for filesystems with such a guarantee.
    data_writes_atomic: bool = False
    # Blocks an in-flight extension allocates may expose whatever the disk
    # held before (no ordering of data before metadata): ext4/ext3
    # data=writeback ("can potentially leave stale data exposed in recently
    # written files", Documentation/admin-guide/ext4.rst), ext2, ext4
    # without a journal. Else they read as the new data or zeros: ext4
    # data=ordered writes data before the commit; xfs raises the on-disk
    # size only after the data I/O completed (xfs_end_ioend() ->
    # xfs_setfilesize(), fs/xfs/xfs_aops.c); btrfs inserts the extent only
    # when its data is written (btrfs_finish_ordered_io(),
    # fs/btrfs/inode.c). Linux 6.1.
    stale_data_after_extension: bool = True
    # No block of a file, promised or not, ever reads data that was written
    # to another file: a freed block is handed out again only once its free
    # is durable, and a file points at a newly allocated block only once
    # the block's new data is written (or the extent is unwritten and reads
    # as zeros). ext4 with a journal, data=ordered or journal: blocks freed
    # in a transaction are not reused before it commits
    # (ext4_mb_free_metadata(), fs/ext4/mballoc.c), and "all data are forced
    # directly out to the main file system prior to its metadata being
    # committed to the journal" (Documentation/admin-guide/ext4.rst,
    # data=ordered); fast commits write the inode's data first
    # (ext4_fc_submit_inode_data_all(), fs/ext4/fast_commit.c). xfs: freed
    # extents stay busy until the free is on disk (xfs_extent_busy_insert(),
    # fs/xfs/xfs_extent_busy.c), and writeback of delayed allocations
    # allocates unwritten extents (xfs_bmapi_convert_one_delalloc(),
    # fs/xfs/libxfs/xfs_bmap.c, Linux 6.12; mainline a5949d3faedf "xfs:
    # force writes to delalloc regions to unwritten" calls a written
    # extent there stale data exposure). btrfs: freed extents stay pinned
    # until the transaction commits (btrfs_pin_extent(),
    # fs/btrfs/extent-tree.c), and a file extent item is inserted only
    # when its data is written (btrfs_finish_ordered_io(),
    # fs/btrfs/inode.c). Not f2fs: a checkpoint does not wait for regular
    # file data (f2fs_is_cp_guaranteed(), fs/f2fs/data.c), nor ext4
    # data=writeback, nor any filesystem without a journal. Linux 6.12.
    # Only a block that equals a block of another file's data is reported:
    # a torn or unknown block cannot be told from a legitimate one.
    other_files_data_never_exposed: bool = False
    # The inode flags FS_IOC_SETFLAGS sets (ioctl_iflags(2): append-only, immutable,
    # sync, nodump, noatime) are durable with the rest of the inode's metadata (fsync,
    # directory fsync, sync). They live in the on-disk inode and change in a transaction
    # of their own: ext4_fileattr_set() -> ext4_ioctl_setflags() marks the inode dirty in
    # a jbd2 handle (ext4_mark_iloc_dirty(), fs/ext4/ioctl.c), which fsync waits for;
    # xfs_fileattr_set() logs the inode core (xfs_ioctl_setattr_xflags() ->
    # xfs_trans_log_inode(), fs/xfs/xfs_ioctl.c), which fsync forces; btrfs_fileattr_set()
    # updates the inode item in a transaction (btrfs_update_inode(), fs/btrfs/ioctl.c),
    # and fsync logs the item whole (fill_inode_item(), fs/btrfs/tree-log.c);
    # f2fs_setflags_common() marks the inode dirty for fsync (fs/f2fs/file.c), and
    # roll-forward takes i_flags back from the fsynced inode (recover_inode(),
    # fs/f2fs/recovery.c). Linux 6.1 and 6.12. The rules of a filesystem without a
    # journal leave it out: nothing beyond POSIX, and POSIX has no such flags.
    inode_flags_durable: bool = False

    def guarantees(self) -> list[str]:
        """The rule fields that hold (for stale_data_after_extension: that does not), in order."""
        out = []
        for f in fields(self):
            if f.name == "name":
                continue
            value = getattr(self, f.name)
            if f.name == "stale_data_after_extension":
                value = not value
            if value:
                out.append(f.name)
        return out


#: One sentence per rule, for people (``powercut targets show``).
RULE_SENTENCES: dict[str, str] = {
    "fsync_file_persists_names": "fsync of a file also makes its names (new, renamed, removed) and its "
                                 "new parent directories durable.",
    "fsync_file_persists_exchanged_names": "fsync of a file also makes the names a RENAME_EXCHANGE "
                                           "gave it durable.",
    "fdatasync_persists_new_names": "fdatasync of a newly created file also makes its name durable.",
    "rename_replace_flushes_data": "Replacing a file by rename writes the new file's data before the "
                                   "rename commits, so no fsync of the new file is needed.",
    "metadata_atomic": "Namespace operations are atomic after a crash: link counts and symlink "
                       "targets are always whole.",
    "data_block_atomic": "An overwrite of a data block leaves the old or the new block, never a torn "
                         "mix.",
    "data_writes_atomic": "A write in flight leaves the file at one version it had, never a mix of "
                          "blocks.",
    "stale_data_after_extension": "Blocks that a crash leaves allocated by an unfinished append read "
                                  "as the new data or zeros, never old disk contents.",
    "other_files_data_never_exposed": "No block of a file ever reads data that was written to "
                                      "another file.",
    "inode_flags_durable": "Inode flags (append-only, immutable, sync, nodump, noatime) are "
                           "durable with the rest of the inode's metadata.",
}


def posix_strict(name: str = "posix") -> PersistenceRules:
    """Only what POSIX promises: the weakest rules, sound for any filesystem."""
    return PersistenceRules(name=name)


def journalled(name: str) -> PersistenceRules:
    """What every metadata journal the adapters know gives: fsync reaches names, atomic metadata."""
    return replace(
        posix_strict(name),
        fsync_file_persists_names=True,
        fsync_file_persists_exchanged_names=True,
        fdatasync_persists_new_names=True,
        metadata_atomic=True,
        stale_data_after_extension=False,
        other_files_data_never_exposed=True,
        inode_flags_durable=True,
    )
