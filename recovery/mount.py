"""mkfs, timed mount (journal replay) and unmount of a target's filesystem.

Everything goes through a ``CommandRunner``, so the same code runs on the
host and inside a guest. The mount time is the duration of the mount
command, which includes the kernel's journal replay; what the kernel said
about the replay is taken from the kernel log lines that appeared during
the mount.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from framework.core import clock, syscalls
from framework.core.command import CommandResult, CommandRunner, check_status
from framework.core.errors import CommandError, DeviceBusy
from framework.core.holders import mount_holders
from recovery.filesystems import adapter_for
from recovery.filesystems.base import FilesystemAdapter
from recovery.fsck import C_LOCALE, output_tail
from recovery.target import Target

log = logging.getLogger(__name__)

MKFS_TIMEOUT_S = 300.0
UMOUNT_TIMEOUT_S = 120.0
DMESG_TIMEOUT_S = 30.0

# dmesg's default format: "[  12.345678] text"; records spanning several
# lines print the later ones without a timestamp.
_STAMP = re.compile(r"^\[\s*(\d+\.\d+)\]\s?(.*)$")


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Deadlines of a check's steps (mount, fsck, unmount): a step that outlives its own
    is a hang."""

    mount_s: float = 120.0
    fsck_s: float = 300.0
    umount_s: float = 60.0

    @classmethod
    def within(cls, budget_s: float, *, shares: int) -> Timeouts:
        """Deadlines that fit a budget: mount and fsck a ``shares``-th of it each, the
        unmount a tenth (at least 10 s)."""
        return cls(mount_s=budget_s / shares, fsck_s=budget_s / shares,
                   umount_s=max(budget_s / 10, 10))


@dataclass(frozen=True, slots=True)
class MountResult:
    ok: bool
    duration_s: float
    status: int
    error: str  # tail of mount's output when it failed, else ""
    replay_messages: tuple[str, ...]  # kernel lines reporting journal replay
    kernel_messages: tuple[str, ...]  # every kernel line logged during the mount
    kernel_log_read: bool  # False if dmesg could not be read (messages then empty)
    argv: tuple[str, ...]


def mkfs(
    runner: CommandRunner,
    target: Target,
    dev: str,
    *,
    journal_dev: str | None = None,
    size_bytes: int | None = None,
    timeout_s: float = MKFS_TIMEOUT_S,
) -> CommandResult:
    """Make ``target``'s filesystem on ``dev`` (formatting its journal device first),
    then flush every device it wrote: the made filesystem is on stable storage when
    this returns.

    The flush is not a formality. mke2fs 1.47 records the filesystem in an external
    journal's superblock (``s_nr_users``, ``s_users``: ``ext2fs_add_journal_device()``
    in lib/ext2fs/mkjournal.c) with a plain write and never fsyncs the journal
    device, and nothing the workload does before its first journal commit flushes
    that device either (``ext4_sync_fs()``, fs/ext4/super.c, 7.3, flushes only the
    filesystem's own device). dm-log-writes logs an unflushed write only at the next
    flush (``normal_end_io()``, drivers/md/dm-log-writes.c), so without this flush
    every crash state before that commit holds a journal with no user, which does
    not mount ("External journal has more than one user - 0"): a fact about mkfs,
    not about the filesystem under test. ``sync FILE`` fsyncs each device, and
    fsync on a block device sends a cache flush (``blkdev_fsync()``, block/fops.c).
    """
    adapter = adapter_for(target.fstype)
    argv = adapter.mkfs_argv(target, dev, journal_dev=journal_dev, size_bytes=size_bytes)
    devices = [dev]
    if journal_dev is not None:
        journal_argv = adapter.journal_mkfs_argv(target, journal_dev)
        if journal_argv is not None:
            runner.run(journal_argv, timeout_s=timeout_s, env=C_LOCALE)
        devices.append(journal_dev)
    result = runner.run(argv, timeout_s=timeout_s, env=C_LOCALE)
    runner.run(["sync", *devices], timeout_s=timeout_s, env=C_LOCALE)
    return result


def _records(dmesg_text: str) -> list[tuple[float | None, str]]:
    records: list[tuple[float | None, str]] = []
    for line in dmesg_text.splitlines():
        m = _STAMP.match(line)
        if m:
            records.append((float(m.group(1)), m.group(2)))
        elif line.strip():
            stamp = records[-1][0] if records else None
            records.append((stamp, line.strip()))
    return records


def new_kernel_lines(before: str, after: str) -> list[str]:
    """Kernel log lines in ``after`` that were not yet in ``before`` (two dmesg outputs).

    Compares timestamps rather than lengths: the ring buffer may have
    dropped old records between the two reads.
    """
    old = _records(before)
    new = _records(after)
    stamps = [s for s, _ in old if s is not None]
    if not stamps:
        if after.startswith(before):
            return [text for _, text in _records(after[len(before):])]
        return [text for _, text in new]
    last = stamps[-1]
    # Records that share the last timestamp: skip as many as were seen.
    seen_at_last = sum(1 for s, _ in old if s == last)
    lines: list[str] = []
    for stamp, text in new:
        if stamp is None:
            continue
        if stamp > last:
            lines.append(text)
        elif stamp == last:
            if seen_at_last > 0:
                seen_at_last -= 1
            else:
                lines.append(text)
    return lines


def _read_kernel_log(runner: CommandRunner) -> str | None:
    result = runner.run(["dmesg"], timeout_s=DMESG_TIMEOUT_S, ok_status=None, env=C_LOCALE)
    if result.status != 0:
        log.warning("cannot read the kernel log (dmesg status %d): %s", result.status,
                    output_tail(result.stdout, result.stderr, 2))
        return None
    return result.stdout


def mount_argv(
    target: Target,
    dev: str,
    mountpoint: str,
    *,
    journal_dev: str | None = None,
    extra_options: Sequence[str] = (),
    readonly: bool = False,
) -> list[str]:
    adapter = adapter_for(target.fstype)
    options = adapter.mount_options(target, journal_dev=journal_dev) + list(extra_options)
    if readonly:
        options.append("ro")
    argv = ["mount", "-t", target.fstype]
    if options:
        argv += ["-o", ",".join(options)]
    return [*argv, dev, mountpoint]


def mount_timed(
    runner: CommandRunner,
    target: Target,
    dev: str,
    mountpoint: str,
    *,
    journal_dev: str | None = None,
    extra_options: Sequence[str] = (),
    readonly: bool = False,
    timeout_s: float,
) -> MountResult:
    """Mount ``dev`` and time it; a failed mount is a result, a hung one raises CommandTimeout."""
    adapter = adapter_for(target.fstype)
    if journal_dev is not None:
        attach = adapter.attach_journal_argv(target, dev, journal_dev)
        if attach is not None:
            runner.run(attach, timeout_s=timeout_s, env=C_LOCALE)
    argv = mount_argv(target, dev, mountpoint, journal_dev=journal_dev,
                      extra_options=extra_options, readonly=readonly)
    if syscalls.runs_here(runner):
        return _mount_here(target, adapter, argv, journal_dev)
    before = _read_kernel_log(runner)
    result = runner.run(argv, timeout_s=timeout_s, ok_status=None, env=C_LOCALE)
    after = _read_kernel_log(runner) if before is not None else None
    kernel: list[str] = []
    if before is not None and after is not None:
        kernel = about_devices(new_kernel_lines(before, after), dev, journal_dev)
    replay = adapter.journal_replay_messages("\n".join(kernel))
    ok = result.status == 0
    log.info("mount %s (%s) on %s: %s in %.3f s%s", dev, target.name, mountpoint,
             "ok" if ok else f"failed (status {result.status})", result.duration_s,
             f"; replay: {' | '.join(replay)}" if replay else "")
    return MountResult(
        ok=ok,
        duration_s=result.duration_s,
        status=result.status,
        error="" if ok else output_tail(result.stdout, result.stderr, 5),
        replay_messages=tuple(replay),
        kernel_messages=tuple(kernel),
        kernel_log_read=before is not None and after is not None,
        argv=result.argv,
    )


#: Block device names as the kernel prints them in its messages ("EXT4-fs (dm-3): ...").
_KERNEL_DEVICE = re.compile(r"\b(?:dm-\d+|loop\d+|vd[a-z]+\d*|sd[a-z]+\d*|nvme\d+n\d+(?:p\d+)?)\b")


def kernel_name(dev: str) -> str:
    """The name the kernel gives block device ``dev`` in its messages ("dm-3" for
    /dev/mapper/pc-snap, whether that is a symlink or a device node of its own)."""
    try:
        st = os.stat(dev)
        if stat.S_ISBLK(st.st_mode):
            sysfs = f"/sys/dev/block/{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
            if os.path.exists(sysfs):
                return os.path.basename(os.path.realpath(sysfs))
    except OSError:
        pass
    return os.path.basename(os.path.realpath(dev))


def about_devices(lines: Sequence[str], *devices: str | None) -> list[str]:
    """Kernel lines that name none of the block devices, or one of ``devices``: while
    other mounts run at the same time (checking lanes), their lines are left out."""
    ours = {kernel_name(d) for d in devices if d} | {os.path.basename(d) for d in devices if d}
    kept = []
    for line in lines:
        named = set(_KERNEL_DEVICE.findall(line))
        if not named or named & ours:
            kept.append(line)
    return kept


#: Kernel lines that report an error (ext4_error(), "... failed", BUG), for mount errors.
_ERROR_LINE = re.compile(r"error|failed|BUG|corrupt|already allocated", re.IGNORECASE)


def _mount_here(target: Target, adapter: FilesystemAdapter, argv: list[str],
                journal_dev: str | None = None) -> MountResult:
    """mount(2) in-process: what mount(8) would do, without its fork and exec."""
    dev, mountpoint = argv[-2], argv[-1]
    options = argv[argv.index("-o") + 1].split(",") if "-o" in argv else []
    try:
        klog: syscalls.KernelLog | None = syscalls.KernelLog()
    except OSError:
        klog = None
    start = clock.monotonic()
    error = ""
    try:
        syscalls.mount(dev, mountpoint, target.fstype, options)
    except OSError as exc:
        error = str(exc.strerror or exc)
    duration = clock.monotonic() - start
    kernel = about_devices(klog.read(), dev, journal_dev) if klog is not None else []
    if klog is not None:
        klog.close()
    replay = adapter.journal_replay_messages("\n".join(kernel))
    if error and kernel:
        # The last lines say how the mount ended; the first error line often says why
        # (a replay that went wrong long before the mount gave up).
        shown = kernel[-3:]
        first = next((line for line in kernel if _ERROR_LINE.search(line)), None)
        if first is not None and first not in shown:
            shown = [first, "...", *shown]
        error += " -- " + " | ".join(line.split("] ", 1)[-1] for line in shown)
    return MountResult(ok=not error, duration_s=duration, status=32 if error else 0, error=error,
                       replay_messages=tuple(replay), kernel_messages=tuple(kernel),
                       kernel_log_read=klog is not None, argv=tuple(argv))


#: How long an unmount waits out EBUSY. A process that forked while another checking lane
#: had a file open under the mountpoint holds that descriptor until it execs; under
#: emulation that lasts long enough for the unmount right after to see EBUSY.
BUSY_WAIT_S = 10.0


def umount(runner: CommandRunner, mountpoint: str, *, timeout_s: float = UMOUNT_TIMEOUT_S) -> CommandResult:
    """Unmount ``mountpoint``, waiting out a holder that lets go within BUSY_WAIT_S; raises
    DeviceBusy naming the holders if it stays busy, CommandError if it fails otherwise."""
    start = clock.monotonic()
    pause = 0.05
    while True:
        busy = _umount_once(runner, mountpoint, timeout_s=timeout_s)
        if busy is None:
            return CommandResult(("umount", mountpoint), 0, "", "", clock.monotonic() - start)
        if clock.monotonic() - start >= BUSY_WAIT_S:
            held = mount_holders(mountpoint) if syscalls.runs_here(runner) else []
            raise DeviceBusy(f"umount {mountpoint}: still busy after {BUSY_WAIT_S:g} s ({busy}); "
                             f"held by: {'; '.join(held) or 'nothing visible in /proc'}")
        clock.sleep(pause)
        pause = min(pause * 2, 1.0)


def _umount_once(runner: CommandRunner, mountpoint: str, *, timeout_s: float) -> str | None:
    """One unmount: None when done, the error text when the mount is busy."""
    if syscalls.runs_here(runner):
        try:
            syscalls.umount(mountpoint)
        except OSError as exc:
            if exc.errno == errno.EBUSY:
                return str(exc.strerror)
            raise CommandError(f"umount {mountpoint} failed: {exc.strerror}") from exc
        return None
    result = runner.run(["umount", mountpoint], timeout_s=timeout_s, ok_status=None, env=C_LOCALE)
    said = output_tail(result.stdout, result.stderr, 2)
    if result.status == 0:
        return None
    if "busy" in said:  # util-linux: "target is busy"
        return said
    check_status(result, (0,))
    return None


@contextlib.contextmanager
def mounted(
    runner: CommandRunner,
    target: Target,
    dev: str,
    mountpoint: str,
    *,
    journal_dev: str | None = None,
    extra_options: Sequence[str] = (),
    readonly: bool = False,
    timeout_s: float,
) -> Iterator[MountResult]:
    """Mount for the duration of a ``with`` block; always unmounts.

    A failed mount raises CommandError (use mount_timed() to record it as
    a result). An unmount failure is logged and never hides an exception
    raised inside the block.
    """
    result = mount_timed(runner, target, dev, mountpoint, journal_dev=journal_dev,
                         extra_options=extra_options, readonly=readonly, timeout_s=timeout_s)
    if not result.ok:
        raise CommandError(
            f"mount failed with status {result.status}: {' '.join(result.argv)} -- "
            f"{result.error.replace(chr(10), ' | ')}",
            result,
        )
    try:
        yield result
    except BaseException:
        try:
            umount(runner, mountpoint)
        except Exception as exc:  # teardown must not hide the original error
            log.warning("could not unmount %s: %s", mountpoint, exc)
        raise
    umount(runner, mountpoint)


def missing_prerequisites(runner: CommandRunner, target: Target) -> list[str]:
    """What this machine lacks to mkfs, mount and check ``target`` (empty: nothing).

    Loads the kernel module if the filesystem is not registered yet.
    """
    adapter = adapter_for(target.fstype)
    missing: list[str] = []
    for tool in (t for t in adapter.tools if t.needed):
        if runner.run(["which", tool.binary], timeout_s=DMESG_TIMEOUT_S, ok_status=None).status != 0:
            missing.append(f"program {tool.binary} (install Debian package {tool.package})")
    if not _fs_registered(runner, target.fstype):
        probes = [(module, runner.run(["modprobe", module], timeout_s=DMESG_TIMEOUT_S,
                                      ok_status=None, env=C_LOCALE))
                  for module in adapter.kernel_modules]
        if not _fs_registered(runner, target.fstype):
            failed = [(m, r) for m, r in probes if r.status != 0] or probes
            why = "; ".join(
                f"modprobe {module}: "
                + (output_tail(r.stdout, r.stderr, 1) or f"modprobe status {r.status}")
                for module, r in failed) or "no kernel module known"
            missing.append(f"kernel filesystem {target.fstype} ({why})")
    return missing


def _fs_registered(runner: CommandRunner, fstype: str) -> bool:
    result = runner.run(["cat", "/proc/filesystems"], timeout_s=DMESG_TIMEOUT_S, ok_status=None)
    return any(line.split()[-1:] == [fstype] for line in result.stdout.splitlines())
