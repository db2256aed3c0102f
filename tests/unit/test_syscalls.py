"""In-process mount, umount and kernel log; dm table-load layout."""

from __future__ import annotations

import os
import struct
import subprocess

import pytest

from devicemapper import ioctl
from devicemapper.ioctl import decode_dev, pack_table_load, reply_dev
from framework.core import syscalls
from framework.core.command import HostRunner
from framework.core.machine.fake import FakeMachine
from recovery.mount import mount_timed, umount
from recovery.targets import get_target


def test_options_split_into_flags_and_data():
    assert syscalls.split_options(["ro", "noatime", "data=journal", "barrier=0"]) == (
        1 | 1024, "data=journal,barrier=0")
    assert syscalls.split_options(["ro", "rw", "defaults"]) == (0, "")


def test_runners_say_where_they_run():
    assert syscalls.runs_here(HostRunner())
    assert not syscalls.runs_here(FakeMachine())


def test_table_load_layout_matches_dm_ioctl_h():
    buf = pack_table_load("pc-snap", 0, 2048, "snapshot", "/dev/vda /dev/vdb N 8")
    assert struct.unpack_from("<I", buf, 12)[0] == len(buf)  # data_size
    assert struct.unpack_from("<I", buf, 20)[0] == 1  # target_count
    start, length, status, nxt, ttype = struct.unpack_from("<QQiI16s", buf, 312)
    assert (start, length, status) == (0, 2048, 0) and ttype.rstrip(b"\0") == b"snapshot"
    assert nxt % 8 == 0 and buf[312 + 40:].rstrip(b"\0") == b"/dev/vda /dev/vdb N 8"
    assert decode_dev((253 << 8) | 5) == (253, 5)
    assert decode_dev((253 << 8) | 0x34 | (0x12 << 20)) == (253, 0x1234)


def test_reply_fields_are_read_at_their_dm_ioctl_h_offsets():
    # struct dm_ioctl: open_count is the s32 at byte 24, dev the u64 at byte 40
    # (after the u32 padding at 36). A reply built by hand with other fields
    # set to noise must give back exactly those two.
    reply = bytearray(b"\xee" * 312)
    struct.pack_into("<i", reply, 24, 3)
    struct.pack_into("<I", reply, 36, 0xDEAD)
    struct.pack_into("<Q", reply, 40, (253 << 8) | 7)
    assert reply_dev(reply) == (253 << 8) | 7
    assert ioctl._DM_IOCTL.unpack_from(reply)[ioctl._OPEN_COUNT] == 3


@pytest.mark.host_root
def test_in_process_mount_times_and_reports_journal_replay(loop_ext4, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    target = get_target("ext4/ordered")
    runner = HostRunner()
    first = mount_timed(runner, target, loop_ext4.dev, str(mnt), timeout_s=60)
    assert first.ok and first.duration_s > 0 and first.replay_messages == ()
    (mnt / "f").write_bytes(b"x" * 5000)
    fd = os.open(mnt / "f", os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    # Shut the filesystem down as a crash would: the journal must be replayed.
    subprocess.run(["xfs_io", "-x", "-c", "shutdown -f", str(mnt)], check=True)
    umount(runner, str(mnt))
    again = mount_timed(runner, target, loop_ext4.dev, str(mnt), timeout_s=60)
    try:
        assert again.ok and again.kernel_log_read
        assert any("recovery complete" in m for m in again.replay_messages), again.kernel_messages
        assert (mnt / "f").read_bytes() == b"x" * 5000
    finally:
        umount(runner, str(mnt))


@pytest.mark.host_root
def test_in_process_mount_failure_is_a_result(loop_ext4, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    res = mount_timed(HostRunner(), get_target("xfs"), loop_ext4.dev, str(mnt), timeout_s=60)
    assert not res.ok and res.status != 0 and res.error
