"""Filesystem adapters (argv, exit codes, replay lines), run_fsck and mount_timed on a fake machine."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from framework.core.errors import CommandError, CommandTimeout, ConfigError
from framework.core.machine import FakeMachine
from recovery.filesystems import ADAPTERS, adapter_for, fstypes, kernel_modules, tools
from recovery.filesystems.base import FilesystemAdapter, FsckVerdict
from recovery.fsck import run_fsck
from recovery.mount import (
    about_devices,
    kernel_name,
    missing_prerequisites,
    mkfs,
    mount_argv,
    mount_timed,
    mounted,
    new_kernel_lines,
)
from recovery.targets import get_target, list_targets

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "recovery"
CLEAN, REPAIRED, CORRUPT, FAILED = (
    FsckVerdict.CLEAN, FsckVerdict.REPAIRED, FsckVerdict.CORRUPT, FsckVerdict.FAILED,
)


@pytest.fixture
def make_fake(tmp_path: Path) -> Iterator[Callable[..., FakeMachine]]:
    """FakeMachines with their run directory in tmp_path, closed after the test."""
    made: list[FakeMachine] = []

    def make(*, strict: bool = False) -> FakeMachine:
        fake = FakeMachine(strict=strict, rundir=tmp_path)
        made.append(fake)
        return fake

    yield make
    for fake in made:
        fake.close()


# --- mkfs argv ---------------------------------------------------------------------------


def test_every_fstype_has_exactly_one_adapter() -> None:
    assert fstypes() == ["btrfs", "ext2", "ext3", "ext4", "f2fs", "jfs", "reiserfs", "xfs"]
    assert len({a.family for a in ADAPTERS}) == len(ADAPTERS)


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.family)
def test_every_adapter_declares_its_modules_and_tools(adapter: FilesystemAdapter) -> None:
    assert adapter.kernel_modules and all(m for m in adapter.kernel_modules)
    assert adapter.tools
    for tool in adapter.tools:
        assert tool.binary and tool.package and tool.version_argv
    # The tools the adapter's own commands run are among those it declares.
    declared = {t.binary for t in adapter.tools}
    target = next(t for t in list_targets() if t.fstype in adapter.fstypes)
    assert adapter.mkfs_argv(target, "/dev/vdb")[0] in declared
    assert adapter.fsck_argv("/dev/vdb", repair=False)[0] in declared


def test_kernel_modules_of_fstypes_once_in_order() -> None:
    assert kernel_modules(["ext2", "xfs", "ext4", "xfs"]) == ("ext4", "xfs")
    assert kernel_modules([]) == ()
    with pytest.raises(ConfigError, match=r"unknown filesystem type 'zfs' \(known: btrfs, ext2"):
        kernel_modules(["zfs"])


def test_tools_listing_names_each_binary_once_with_its_package() -> None:
    listed = tools()
    assert len({t.binary for t in listed}) == len(listed)
    assert {t.binary for t in listed} == {t.binary for a in ADAPTERS for t in a.tools}
    # The default study runs ext targets only: their tools are the required ones.
    assert {t.package for t in listed if t.required} == {"e2fsprogs"}


def test_mkfs_ext4_ordered() -> None:
    t = get_target("ext4/ordered")
    assert adapter_for("ext4").mkfs_argv(t, "/dev/vdb") == [
        "mke2fs", "-F", "-q", "-t", "ext4", "-E", "lazy_itable_init=0,lazy_journal_init=0",
        "/dev/vdb",
    ]


def test_mkfs_ext_variants_carry_their_options_and_size() -> None:
    ext = adapter_for("ext4")
    argv = ext.mkfs_argv(get_target("ext4/nojournal"), "/dev/vdb", size_bytes=64 << 20)
    assert argv[-3:] == ["^has_journal", "/dev/vdb", "65536k"]
    assert ext.mkfs_argv(get_target("ext2"), "/dev/vdb")[3:5] == ["-t", "ext2"]
    assert "fast_commit" in ext.mkfs_argv(get_target("ext4/fast_commit"), "/dev/vdb")


def test_mkfs_ext4_logdev_formats_the_journal_first() -> None:
    t = get_target("ext4/logdev")
    ext = adapter_for("ext4")
    assert ext.journal_mkfs_argv(t, "/dev/vdc") == [
        "mke2fs", "-F", "-q", "-O", "journal_dev", "-b", "4096", "/dev/vdc",
    ]
    argv = ext.mkfs_argv(t, "/dev/vdb", journal_dev="/dev/vdc")
    assert argv[-4:] == ["4096", "-J", "device=/dev/vdc", "/dev/vdb"]
    assert ext.journal_mkfs_argv(get_target("ext4/ordered"), "/dev/vdc") is None


def test_external_journal_must_be_given_exactly_when_needed() -> None:
    with pytest.raises(ConfigError, match="needs a journal device"):
        adapter_for("ext4").mkfs_argv(get_target("ext4/logdev"), "/dev/vdb")
    with pytest.raises(ConfigError, match="its journal is internal"):
        adapter_for("xfs").mkfs_argv(get_target("xfs"), "/dev/vdb", journal_dev="/dev/vdc")


def test_mkfs_xfs() -> None:
    xfs = adapter_for("xfs")
    assert xfs.mkfs_argv(get_target("xfs"), "/dev/vdb") == ["mkfs.xfs", "-f", "-q", "/dev/vdb"]
    assert xfs.mkfs_argv(get_target("xfs/logdev"), "/dev/vdb", journal_dev="/dev/vdc",
                         size_bytes=400 << 20) == [
        "mkfs.xfs", "-f", "-q", "-l", "logdev=/dev/vdc", "-d", f"size={400 << 20}", "/dev/vdb",
    ]


def test_mkfs_btrfs_f2fs_reiserfs() -> None:
    assert adapter_for("btrfs").mkfs_argv(get_target("btrfs"), "/dev/vdb", size_bytes=1 << 30) == [
        "mkfs.btrfs", "-f", "-q", "-b", str(1 << 30), "/dev/vdb",
    ]
    assert adapter_for("f2fs").mkfs_argv(get_target("f2fs"), "/dev/vdb", size_bytes=1 << 20) == [
        "mkfs.f2fs", "-f", "-q", "/dev/vdb", "2048",
    ]
    assert adapter_for("reiserfs").mkfs_argv(get_target("reiserfs"), "/dev/vdb") == [
        "mkreiserfs", "-q", "-f", "-f", "/dev/vdb",
    ]


def test_mkfs_jfs_inline_and_external_log() -> None:
    jfs = adapter_for("jfs")
    assert jfs.mkfs_argv(get_target("jfs"), "/dev/vdb") == ["jfs_mkfs", "-q", "/dev/vdb"]
    t = get_target("jfs/logdev")
    assert jfs.journal_mkfs_argv(t, "/dev/vdc") == ["jfs_mkfs", "-q", "-J", "journal_dev", "/dev/vdc"]
    assert jfs.mkfs_argv(t, "/dev/vdb", journal_dev="/dev/vdc") == [
        "jfs_mkfs", "-q", "-J", "device=/dev/vdc", "/dev/vdb",
    ]
    assert jfs.attach_journal_argv(t, "/dev/vdb", "/dev/vdc") == [
        "jfs_tune", "-J", "device=/dev/vdc", "/dev/vdb",
    ]
    assert not jfs.mount_replays_journal


# --- mount options -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ext4/ordered", ["mount", "-t", "ext4", "-o", "data=ordered", "/dev/vdb", "/mnt"]),
        ("ext4/nobarrier", ["mount", "-t", "ext4", "-o", "data=ordered,barrier=0", "/dev/vdb", "/mnt"]),
        ("xfs", ["mount", "-t", "xfs", "/dev/vdb", "/mnt"]),
        ("ext2", ["mount", "-t", "ext2", "/dev/vdb", "/mnt"]),
    ],
)
def test_mount_argv(name: str, expected: list[str]) -> None:
    assert mount_argv(get_target(name), "/dev/vdb", "/mnt") == expected


@pytest.mark.parametrize(
    ("name", "option"),
    [("ext4/logdev", "journal_path=/dev/vdc"), ("xfs/logdev", "logdev=/dev/vdc")],
)
def test_external_journal_mount_options(name: str, option: str) -> None:
    t = get_target(name)
    assert option in adapter_for(t.fstype).mount_options(t, journal_dev="/dev/vdc")


def test_mount_argv_readonly_and_extra_options() -> None:
    argv = mount_argv(get_target("xfs"), "/dev/vdb", "/mnt", extra_options=["norecovery"], readonly=True)
    assert argv == ["mount", "-t", "xfs", "-o", "norecovery,ro", "/dev/vdb", "/mnt"]


# --- fsck argv ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fstype", "check", "repair"),
    [
        ("ext4", ["e2fsck", "-f", "-n", "D"], ["e2fsck", "-f", "-y", "D"]),
        ("xfs", ["xfs_repair", "-n", "D"], ["xfs_repair", "-e", "D"]),
        ("btrfs", ["btrfs", "check", "--readonly", "D"], ["btrfs", "check", "--repair", "--force", "D"]),
        ("f2fs", ["fsck.f2fs", "-f", "--dry-run", "D"], ["fsck.f2fs", "-f", "D"]),
        ("jfs", ["jfs_fsck", "-n", "D"], ["jfs_fsck", "-a", "-f", "D"]),
        ("reiserfs", ["reiserfsck", "--check", "-y", "-q", "D"],
         ["reiserfsck", "--fix-fixable", "-y", "-q", "D"]),
    ],
)
def test_fsck_argv(fstype: str, check: list[str], repair: list[str]) -> None:
    adapter = adapter_for(fstype)
    assert adapter.fsck_argv("D", repair=False) == check
    assert adapter.fsck_argv("D", repair=True) == repair


def test_fsck_argv_names_the_external_journal() -> None:
    assert adapter_for("ext4").fsck_argv("D", repair=False, journal_dev="J") == [
        "e2fsck", "-f", "-n", "-j", "J", "D"]
    assert adapter_for("xfs").fsck_argv("D", repair=True, journal_dev="J") == [
        "xfs_repair", "-e", "-l", "J", "D"]
    assert adapter_for("jfs").fsck_argv("D", repair=False, journal_dev="J") == [
        "jfs_fsck", "-n", "-j", "J", "D"]


def test_xfs_repair_never_zeroes_the_log() -> None:
    assert "-L" not in adapter_for("xfs").fsck_argv("D", repair=True)


# --- exit-status classification ----------------------------------------------------------

# (status, read-only verdict, repair verdict), from each tool's manual.
FSCK8_CODES = [
    (0, CLEAN, CLEAN),
    (1, CORRUPT, REPAIRED),
    (2, CORRUPT, REPAIRED),
    (3, CORRUPT, REPAIRED),
    (4, CORRUPT, CORRUPT),
    (5, CORRUPT, CORRUPT),
    (8, FAILED, FAILED),
    (12, FAILED, FAILED),
    (16, FAILED, FAILED),
    (32, FAILED, FAILED),
    (128, FAILED, FAILED),
]


@pytest.mark.parametrize("fstype", ["ext2", "ext3", "ext4", "jfs", "f2fs"])
@pytest.mark.parametrize(("status", "check", "repair"), FSCK8_CODES)
def test_fsck8_style_codes(fstype: str, status: int, check: FsckVerdict, repair: FsckVerdict) -> None:
    adapter = adapter_for(fstype)
    assert adapter.classify_fsck(status, "", "", repair=False) is check
    assert adapter.classify_fsck(status, "", "", repair=True) is repair


def test_f2fs_minus_one_is_damage_only_without_a_filesystem() -> None:
    f2fs = adapter_for("f2fs")
    assert f2fs.classify_fsck(255, "\tCan't find a valid F2FS superblock at 0x0\n", "",
                              repair=False) is CORRUPT
    assert f2fs.classify_fsck(255, "\tError: Failed to open the device!\n", "", repair=True) is FAILED


@pytest.mark.parametrize(
    ("status", "repair", "verdict"),
    [
        (0, False, CLEAN), (1, False, CORRUPT), (2, False, FAILED),
        (0, True, CLEAN), (4, True, REPAIRED), (2, True, CORRUPT), (1, True, FAILED),
    ],
)
def test_xfs_repair_codes(status: int, repair: bool, verdict: FsckVerdict) -> None:
    assert adapter_for("xfs").classify_fsck(status, "", "", repair=repair) is verdict


@pytest.mark.parametrize(
    ("status", "repair", "verdict"),
    [
        (0, False, CLEAN), (1, False, CORRUPT), (6, False, CORRUPT), (4, False, CORRUPT),
        (1, True, REPAIRED), (2, True, REPAIRED), (4, True, CORRUPT), (6, True, CORRUPT),
        (8, False, FAILED), (16, True, FAILED),
    ],
)
def test_reiserfsck_codes(status: int, repair: bool, verdict: FsckVerdict) -> None:
    assert adapter_for("reiserfs").classify_fsck(status, "", "", repair=repair) is verdict


def test_reiserfsck_fix_fixable_exits_1_even_when_clean() -> None:
    out = "Checking Semantic tree:\nfinished\nNo corruptions found\nThere are on the filesystem:\n"
    assert adapter_for("reiserfs").classify_fsck(1, out, "", repair=True) is CLEAN


BTRFS_CLEAN = "[4/7] checking fs roots\nfound 147456 bytes used, no error found\n"
BTRFS_DAMAGED = (
    "[4/7] checking fs roots\nroot 5 inode 257 errors 2001, no inode item, link count wrong\n"
    "ERROR: errors found in fs roots\nfound 147456 bytes used, error(s) found\n"
)


@pytest.mark.parametrize(
    ("status", "out", "err", "repair", "verdict"),
    [
        (0, BTRFS_CLEAN, "", False, CLEAN),
        (1, BTRFS_DAMAGED, "", False, CORRUPT),
        (1, "No valid Btrfs found on /dev/vdb\n", "ERROR: cannot open file system\n", False, CORRUPT),
        (1, "", "ERROR: mount check: cannot open /dev/nope: No such file or directory\n", False, FAILED),
        (1, "", "ERROR: /dev/vdb is currently mounted, use --force if you really intend to check",
         False, FAILED),
        (0, "usage: btrfs check [options] <device>\n", "", False, FAILED),
        (0, "[1/7] checking root items\nFixed 0 roots.\n" + BTRFS_CLEAN, "", True, CLEAN),
        (0, BTRFS_DAMAGED.replace("error(s) found", "no error found"), "", True, REPAIRED),
        (1, BTRFS_DAMAGED, "", True, CORRUPT),
    ],
)
def test_btrfs_check_outcomes(status: int, out: str, err: str, repair: bool, verdict: FsckVerdict) -> None:
    assert adapter_for("btrfs").classify_fsck(status, out, err, repair=repair) is verdict


# --- journal replay lines ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("fstype", "expected"),
    [
        ("xfs", ["XFS (loop1): Starting recovery (logdev: internal)",
                 "XFS (loop1): Ending recovery (logdev: internal)"]),
        ("ext4", ["EXT4-fs (loop2): recovery complete"]),
        ("btrfs", ["BTRFS info (device loop3): start tree-log replay"]),
        ("reiserfs", ["REISERFS (device loop4): replayed 3 transactions in 0 seconds"]),
        ("jfs", []),
    ],
)
def test_replay_lines_are_found_only_for_their_family(fstype: str, expected: list[str]) -> None:
    adapter = adapter_for(fstype)
    replay = (FIXTURES / "dmesg_replay.txt").read_text()
    clean = (FIXTURES / "dmesg_clean.txt").read_text()
    assert [line.split("] ", 1)[1] for line in adapter.journal_replay_messages(replay)] == expected
    assert adapter.journal_replay_messages(clean) == []


def test_new_kernel_lines_by_timestamp() -> None:
    before = "[  1.000000] a\n[  2.000000] b\n[  2.000000] c\n"
    after = "[  2.000000] b\n[  2.000000] c\n[  2.000000] d\n[  3.500000] e\n  continued\n"
    # "a" fell out of the ring buffer; that must not shift anything.
    assert new_kernel_lines(before, after) == ["d", "e", "continued"]
    assert new_kernel_lines("", "[ 1.0] x\n") == ["x"]
    assert new_kernel_lines("plain\n", "plain\nnew\n") == ["new"]


# --- run_fsck / mkfs / mount on a fake machine -------------------------------------------


def test_run_fsck_records_verdict_and_accepts_every_status(make_fake: Callable[..., FakeMachine]) -> None:
    fake = make_fake(strict=True)
    fake.on("e2fsck -f -n *", status=4, stdout="Pass 1\nEntry 'f' has deleted/unused inode 12.\n",
            stderr="e2fsck 1.47.0\n")
    result = run_fsck(fake, get_target("ext4/ordered"), "/dev/vdb", repair=False, timeout_s=10)
    assert result.verdict is CORRUPT
    assert result.status == 4
    assert result.argv == ("e2fsck", "-f", "-n", "/dev/vdb")
    assert "deleted/unused inode 12" in result.output_tail
    assert not result.repair
    assert fake.inputs == [None]  # stdin closed


def test_run_fsck_timeout_propagates(make_fake: Callable[..., FakeMachine]) -> None:
    fake = make_fake()

    def hang(argv: tuple[str, ...], _input: str | None) -> tuple[int, str, str]:
        raise CommandTimeout(f"command timed out after 1 s: {' '.join(argv)}")

    fake.on("xfs_repair *", respond=hang)
    with pytest.raises(CommandTimeout):
        run_fsck(fake, get_target("xfs"), "/dev/vdb", repair=True, timeout_s=1)


def test_mkfs_runs_journal_then_filesystem(make_fake: Callable[..., FakeMachine]) -> None:
    fake = make_fake(strict=True)
    fake.on("mke2fs *", status=0)
    fake.on("sync *", status=0)
    mkfs(fake, get_target("ext4/logdev"), "/dev/vdb", journal_dev="/dev/vdc")
    assert [c[-1] for c in fake.calls[:2]] == ["/dev/vdc", "/dev/vdb"]
    assert "journal_dev" in fake.calls[0]
    # Then both devices are flushed: mke2fs leaves the journal's user list unflushed.
    assert list(fake.calls[2]) == ["sync", "/dev/vdb", "/dev/vdc"]
    assert len(fake.calls) == 3


def test_mkfs_failure_raises(make_fake: Callable[..., FakeMachine]) -> None:
    fake = make_fake(strict=True)
    fake.on("mkfs.xfs *", status=1, stderr="Filesystem must be larger than 300MB.\n")
    with pytest.raises(CommandError, match="larger than 300MB"):
        mkfs(fake, get_target("xfs"), "/dev/vdb")


def _kernel_log(fake: FakeMachine, before: str, after: str) -> None:
    logs = [before, after]

    def respond(_argv: tuple[str, ...], _input: str | None) -> tuple[int, str, str]:
        return 0, logs.pop(0) if len(logs) > 1 else logs[0], ""

    fake.on("dmesg", respond=respond)


def test_mount_timed_reports_replay_from_new_kernel_lines(make_fake: Callable[..., FakeMachine]) -> None:
    fake = make_fake(strict=True)
    old = "[  5.000000] XFS (vdb): Starting recovery (logdev: internal)\n"  # an earlier mount
    new = (old + "[  9.100000] XFS (vdb): Mounting V5 Filesystem\n"
           "[  9.200000] XFS (vdb): Starting recovery (logdev: internal)\n"
           "[  9.300000] XFS (vdb): Ending recovery (logdev: internal)\n")
    _kernel_log(fake, old, new)
    fake.on("mount -t xfs /dev/vdb /mnt", status=0)
    result = mount_timed(fake, get_target("xfs"), "/dev/vdb", "/mnt", timeout_s=30)
    assert result.ok and result.kernel_log_read
    assert result.replay_messages == (
        "XFS (vdb): Starting recovery (logdev: internal)",
        "XFS (vdb): Ending recovery (logdev: internal)",
    )
    assert len(result.kernel_messages) == 3


def test_another_devices_kernel_lines_during_a_mount_are_not_its_own(
        make_fake: Callable[..., FakeMachine]) -> None:
    # Two checking lanes mount at the same time: each keeps its own device's lines.
    fake = make_fake(strict=True)
    new = ("[  9.100000] XFS (vdc): Starting recovery (logdev: internal)\n"
           "[  9.200000] XFS (vdb): Starting recovery (logdev: internal)\n"
           "[  9.300000] XFS (vdc): Ending recovery (logdev: internal)\n"
           "[  9.400000] a line that names no device\n")
    _kernel_log(fake, "", new)
    fake.on("mount -t xfs /dev/vdb /mnt", status=0)
    result = mount_timed(fake, get_target("xfs"), "/dev/vdb", "/mnt", timeout_s=30)
    assert result.replay_messages == ("XFS (vdb): Starting recovery (logdev: internal)",)
    assert result.kernel_messages == ("XFS (vdb): Starting recovery (logdev: internal)",
                                      "a line that names no device")
    # An external journal's device counts as the mount's own; dm-1 is not dm-12.
    assert about_devices(["EXT4-fs (dm-12): x", "JBD2 on dm-1: y", "EXT4-fs (dm-3): z"],
                         "/dev/dm-3", "/dev/dm-1") == ["JBD2 on dm-1: y", "EXT4-fs (dm-3): z"]


def test_mount_timed_failure_is_a_result(make_fake: Callable[..., FakeMachine]) -> None:
    fake = make_fake(strict=True)
    _kernel_log(fake, "", "[ 1.0] EXT4-fs (vdb): VFS: Can't find ext4 filesystem\n")
    fake.on("mount *", status=32, stderr="mount: /mnt: wrong fs type, bad option, bad superblock\n")
    result = mount_timed(fake, get_target("ext4/ordered"), "/dev/vdb", "/mnt", timeout_s=30)
    assert not result.ok
    assert result.status == 32
    assert "bad superblock" in result.error
    assert result.replay_messages == ()


def test_mount_timed_without_kernel_log_still_mounts(make_fake: Callable[..., FakeMachine]) -> None:
    fake = make_fake(strict=True)
    fake.on("dmesg", status=1, stderr="dmesg: read kernel buffer failed: Operation not permitted")
    fake.on("mount *", status=0)
    result = mount_timed(fake, get_target("btrfs"), "/dev/vdb", "/mnt", timeout_s=30)
    assert result.ok and not result.kernel_log_read


def test_mount_timed_attaches_jfs_external_log_first(make_fake: Callable[..., FakeMachine]) -> None:
    fake = make_fake()
    mount_timed(fake, get_target("jfs/logdev"), "/dev/vdb", "/mnt", journal_dev="/dev/vdc", timeout_s=5)
    assert fake.calls[0] == ("jfs_tune", "-J", "device=/dev/vdc", "/dev/vdb")
    assert ("mount", "-t", "jfs", "/dev/vdb", "/mnt") in fake.calls


def test_mounted_unmounts_and_keeps_the_original_error(make_fake: Callable[..., FakeMachine]) -> None:
    fake = make_fake()
    fake.on("umount *", status=32, stderr="umount: /mnt: target is busy.")
    with pytest.raises(RuntimeError, match="workload broke"), \
            mounted(fake, get_target("ext4/ordered"), "/dev/vdb", "/mnt", timeout_s=5):
        raise RuntimeError("workload broke")
    assert fake.calls[-1] == ("umount", "/mnt")


def test_mounted_unmounts_on_success_and_refuses_failed_mounts(make_fake: Callable[..., FakeMachine]) -> None:
    fake = make_fake()
    with mounted(fake, get_target("xfs"), "/dev/vdb", "/mnt", timeout_s=5) as result:
        assert result.ok
    assert fake.calls[-1] == ("umount", "/mnt")
    fake.on("mount *", status=32, stderr="mount: bad superblock")
    with pytest.raises(CommandError, match="mount failed with status 32"), \
            mounted(fake, get_target("xfs"), "/dev/vdb", "/mnt", timeout_s=5):
        pytest.fail("the block must not run when the mount failed")


def test_missing_prerequisites_names_packages_and_modules(make_fake: Callable[..., FakeMachine]) -> None:
    fake = make_fake()
    fake.on("which *", status=0)
    fake.on("which jfs_tune", status=1)
    fake.on("cat /proc/filesystems", stdout="nodev\tproc\n\text4\n\txfs\n")
    fake.on("modprobe jfs", status=1, stderr="modprobe: FATAL: Module jfs not found")
    missing = missing_prerequisites(fake, get_target("jfs"))
    assert missing == [
        "program jfs_tune (install Debian package jfsutils)",
        "kernel filesystem jfs (modprobe jfs: modprobe: FATAL: Module jfs not found)",
    ]
    assert missing_prerequisites(fake, get_target("xfs")) == []


def test_a_run_records_the_versions_of_its_filesystem_tools() -> None:
    import shutil

    from recovery.filesystems import tool_versions

    if shutil.which("mke2fs") is None:
        pytest.skip("e2fsprogs not installed ('make setup')")
    versions = tool_versions(["ext4", "ext2"])
    assert set(versions) >= {"mke2fs", "e2fsck"}
    assert all(any(ch.isdigit() for ch in v) for v in versions.values()), versions


def test_a_device_node_of_another_name_is_known_by_its_kernel_name(tmp_path: Path) -> None:
    # dm devices made in-process are nodes under /dev/mapper, not symlinks to /dev/dm-N:
    # their kernel lines say dm-N, which the node's own name does not.
    import os

    blocks = sorted(Path("/sys/dev/block").glob("*:*")) if Path("/sys/dev/block").is_dir() else []
    if not blocks or os.geteuid() != 0:
        pytest.skip("needs root and a block device in /sys/dev/block")
    major, minor = (int(x) for x in blocks[0].name.split(":"))
    node = tmp_path / "pc-flakey"
    os.mknod(node, 0o600 | 0o060000, os.makedev(major, minor))
    name = blocks[0].resolve().name
    assert kernel_name(os.fspath(node)) == name
    assert about_devices([f"EXT4-fs ({name}): recovery complete", "EXT4-fs (dm-99): x"],
                         os.fspath(node)) == [f"EXT4-fs ({name}): recovery complete"]
    assert kernel_name("/no/such/vdb") == "vdb"


# --- the checker's static build ------------------------------------------------------------


def _ext4_image(tmp_path: Path) -> Path:
    import shutil
    import subprocess

    if shutil.which("mke2fs") is None or shutil.which("debugfs") is None:
        pytest.skip("e2fsprogs not installed ('make setup')")
    image = tmp_path / "fs.img"
    with open(image, "wb") as f:
        f.truncate(16 << 20)
    subprocess.run(["mke2fs", "-F", "-q", "-t", "ext4", image], check=True)
    return image


def test_a_crash_check_runs_e2fscks_static_build_with_the_same_verdict(tmp_path: Path) -> None:
    """quick_start runs e2fsck.static where it is installed and says e2fsck's version; on a
    clean image and on a damaged one (the control: a root directory whose link count is
    wrong must be found) it says what e2fsck says, word for word."""
    import shutil
    import subprocess

    from framework.core.command import HostRunner

    if shutil.which("e2fsck.static") is None:
        pytest.skip("e2fsck-static not installed ('make setup')")
    image = _ext4_image(tmp_path)
    target = get_target("ext4/ordered")
    for damaged in (False, True):
        if damaged:
            subprocess.run(["debugfs", "-w", "-R", "sif <2> links_count 7", image],
                           check=True, capture_output=True)
        quick = run_fsck(HostRunner(), target, str(image), repair=False, timeout_s=60,
                         quick_start=True)
        plain = run_fsck(HostRunner(), target, str(image), repair=False, timeout_s=60)
        assert quick.argv[0] == "e2fsck.static" and plain.argv[0] == "e2fsck"
        assert quick.argv[1:] == plain.argv[1:]
        assert (quick.verdict, quick.status, quick.output_tail) == (
            plain.verdict, plain.status, plain.output_tail)
        assert quick.verdict is (CORRUPT if damaged else FsckVerdict.CLEAN), quick.output_tail


def test_the_static_build_runs_only_where_it_says_the_same_version_and_runs_here(
        monkeypatch: pytest.MonkeyPatch, make_fake: Callable[..., FakeMachine]) -> None:
    import shutil

    from framework.core.command import HostRunner
    from recovery import fsck

    target = get_target("ext4/ordered")
    fake = make_fake(strict=True)
    fake.on("e2fsck -f -n *", status=0)
    # A runner whose commands run elsewhere: the program named, never a local build's.
    assert run_fsck(fake, target, "/dev/vdb", repair=False, timeout_s=10,
                    quick_start=True).argv[0] == "e2fsck"
    versions = {"e2fsck": "e2fsck 1.47.0 (5-Feb-2023)", "e2fsck.static": "e2fsck 1.46.5 (30-Dec-2021)"}
    monkeypatch.setattr(fsck, "tool_version", lambda binary, argv: versions[binary])
    monkeypatch.setattr(shutil, "which", lambda name: f"/sbin/{name}")
    fsck._same_version.cache_clear()
    try:
        assert not fsck.static_build("e2fsck", "e2fsck.static")  # another release: not it
        fsck._same_version.cache_clear()
        versions["e2fsck.static"] = versions["e2fsck"]
        assert fsck.static_build("e2fsck", "e2fsck.static")
        fsck._same_version.cache_clear()
        monkeypatch.setattr(shutil, "which", lambda name: None)
        assert not fsck.static_build("e2fsck", "e2fsck.static")  # not installed
        # A filesystem without a static checker keeps its own.
        assert not dict(adapter_for("xfs").static_checkers)
        assert run_fsck(HostRunner(), get_target("ext4/ordered"), "/dev/null", repair=False,
                        timeout_s=10, quick_start=True).argv[0] == "e2fsck"
    finally:
        fsck._same_version.cache_clear()
