"""Device-mapper tables and verbs (against the fake machine)."""

from __future__ import annotations

import struct

import pytest

from devicemapper import table
from devicemapper.delay import delay_device, delayed_path
from devicemapper.dmsetup import DmSetup
from devicemapper.flakey import cut_together, flakey_device, restore_together
from devicemapper.ioctl import DM_TARGET_MSG, pack_target_msg
from devicemapper.logwrites import LogWritesStatus, check_mark, recording
from devicemapper.table import FlakeyMode
from framework.core.errors import DeviceMapperError
from framework.core.machine.fake import FakeMachine


def test_tables_match_the_kernel_syntax():
    assert str(table.log_writes("/dev/vda", "/dev/vdb", 2048)) == "0 2048 log-writes /dev/vda /dev/vdb\n"
    assert str(table.flakey("/dev/vda", 100)) == "0 100 flakey /dev/vda 0 180 0\n"
    assert str(table.flakey("/dev/vda", 100, FlakeyMode.DROP_WRITES)) == \
        "0 100 flakey /dev/vda 0 0 180 1 drop_writes\n"
    assert str(table.flakey("/dev/vda", 100, FlakeyMode.ERROR_WRITES, up_s=5, down_s=2)) == \
        "0 100 flakey /dev/vda 0 5 2 1 error_writes\n"
    assert str(table.snapshot("/dev/a", "/dev/b", 64)) == "0 64 snapshot /dev/a /dev/b N 8\n"
    assert str(table.delay("/dev/a", 64, 5)) == "0 64 delay /dev/a 0 5\n"
    assert str(table.delay("/dev/a", 64, 5, 10)) == "0 64 delay /dev/a 0 5 /dev/a 0 10\n"
    # the 9-argument form: flushes get their own delay (writes default to reads)
    assert (str(table.delay("/dev/a", 64, 5, 10, flush_ms=30))
            == "0 64 delay /dev/a 0 5 /dev/a 0 10 /dev/a 0 30\n")
    assert (str(table.delay("/dev/a", 64, 5, flush_ms=30))
            == "0 64 delay /dev/a 0 5 /dev/a 0 5 /dev/a 0 30\n")
    with pytest.raises(ValueError, match="length must be positive"):
        table.linear("/dev/a", 0)


def dm_fake() -> FakeMachine:
    fake = FakeMachine()
    fake.on("blockdev --getsz *", stdout="131072\n")
    fake.on("dmsetup status pc-logw", stdout="0 131072 log-writes 12 4095\n")
    fake.on("dmsetup targets", stdout="flakey v1.5.0\nlinear v1.4.0\n")
    return fake


def test_flakey_cut_swaps_without_freezing_and_restores_before_remove():
    fake = dm_fake()
    with flakey_device(fake, "/dev/vda") as fd:
        fd.cut(FlakeyMode.DROP_WRITES)
    verbs = [c[1:] for c in fake.calls if c[0] == "dmsetup"]
    assert verbs == [
        ("create", "pc-flakey"),
        ("suspend", "--nolockfs", "pc-flakey"), ("load", "pc-flakey"), ("resume", "pc-flakey"),
        ("suspend", "--nolockfs", "pc-flakey"), ("load", "pc-flakey"), ("resume", "pc-flakey"),
        ("remove", "pc-flakey"),
    ]
    tables = [i for c, i in zip(fake.calls, fake.inputs) if c[:2] == ("dmsetup", "load")]
    assert tables[0].endswith("1 drop_writes\n") and tables[1].endswith(" 180 0\n")


def test_a_data_disk_and_its_journal_disk_lose_power_at_one_instant():
    """Both are suspended before either gets its cut table, and neither resumes before
    both have it: no write reaches the journal after the data disk lost power."""
    fake = dm_fake()
    with flakey_device(fake, "/dev/vda") as data, \
            flakey_device(fake, "/dev/vdb", name="pc-flakey-journal") as journal:
        start = len(fake.calls)
        cut_together([data, journal], FlakeyMode.DROP_WRITES)
        cut = [c[1:] for c in fake.calls[start:] if c[0] == "dmsetup"]
        start = len(fake.calls)
        restore_together([data, journal])
        restored = [c[1:] for c in fake.calls[start:] if c[0] == "dmsetup"]
    both = [("suspend", "--nolockfs", "pc-flakey"), ("suspend", "--nolockfs", "pc-flakey-journal"),
            ("load", "pc-flakey"), ("load", "pc-flakey-journal"),
            ("resume", "pc-flakey"), ("resume", "pc-flakey-journal")]
    assert cut == both and restored == both
    tables = [i for c, i in zip(fake.calls, fake.inputs) if c[:2] == ("dmsetup", "load")]
    assert [t.split()[3] for t in tables] == ["/dev/vda", "/dev/vdb", "/dev/vda", "/dev/vdb"]
    assert all(t.endswith("1 drop_writes\n") for t in tables[:2])
    assert all(t.endswith(" 180 0\n") for t in tables[2:])
    assert data.mode is journal.mode is FlakeyMode.PASS


def test_a_failed_joint_cut_resumes_every_suspended_disk():
    fake = dm_fake()
    fake.on("dmsetup load pc-flakey-journal", status=1, stderr="device-mapper: reload ioctl failed")
    with flakey_device(fake, "/dev/vda") as data, \
            flakey_device(fake, "/dev/vdb", name="pc-flakey-journal") as journal:
        with pytest.raises(DeviceMapperError, match="reload ioctl failed"):
            cut_together([data, journal])
        resumed = [c[2] for c in fake.calls if c[:2] == ("dmsetup", "resume")]
        assert resumed == ["pc-flakey", "pc-flakey-journal"]


def test_delay_device_spans_the_whole_device_and_is_removed_on_error():
    fake = dm_fake()
    with pytest.raises(RuntimeError, match="workload failed"), \
            delay_device(fake, "/dev/vda", read_ms=5, write_ms=20) as dev:
        assert dev.path == "/dev/mapper/pc-delay"
        raise RuntimeError("workload failed")
    verbs = [c[1:] for c in fake.calls if c[0] == "dmsetup"]
    assert verbs == [("create", "pc-delay"), ("remove", "pc-delay")]
    created = next(i for c, i in zip(fake.calls, fake.inputs) if c[:2] == ("dmsetup", "create"))
    assert created == "0 131072 delay /dev/vda 0 5 /dev/vda 0 20\n"


def test_delayed_path_stacks_dm_delay_only_for_a_profile_with_delays():
    fake = dm_fake()
    with delayed_path(fake, "/dev/vdb", None, name="pc-delay-data") as path:
        assert path == "/dev/vdb"
    assert not [c for c in fake.calls if c[0] == "dmsetup"]
    with delayed_path(fake, "/dev/vdb", (8, 4, 12), name="pc-delay-data") as path:
        assert path == "/dev/mapper/pc-delay-data"
    created = next(i for c, i in zip(fake.calls, fake.inputs) if c[:2] == ("dmsetup", "create"))
    assert created == "0 131072 delay /dev/vdb 0 8 /dev/vdb 0 4 /dev/vdb 0 12\n"
    assert fake.calls[-1][:3] == ("dmsetup", "remove", "pc-delay-data")


def test_resume_happens_even_if_load_fails():
    fake = dm_fake()
    fake.on("dmsetup load *", status=1, stderr="device-mapper: reload ioctl failed")
    dm = DmSetup(fake)
    with pytest.raises(DeviceMapperError, match="reload ioctl failed"):
        dm.swap("x", table.linear("/dev/a", 8))
    assert fake.calls[-1] == ("dmsetup", "resume", "x")


def test_recording_zeroes_the_log_and_reads_status():
    fake = dm_fake()
    with recording(fake, "/dev/vda", "/dev/vdb") as lw:
        assert lw.status() == LogWritesStatus(entries=12, next_sector=4096)
        lw.mark("after-fsync-1")
    assert fake.calls[0][:3] == ("dd", "if=/dev/zero", "of=/dev/vdb")
    assert ("dmsetup", "message", "pc-logw", "0", "mark after-fsync-1") in fake.calls
    assert fake.calls[-1] == ("dmsetup", "remove", "pc-logw")


def test_full_log_is_reported():
    fake = dm_fake()
    fake.on("dmsetup status pc-logw", stdout="0 131072 log-writes 900 131070\n")
    with pytest.raises(DeviceMapperError, match="log device /dev/vdb is full after 900 entries"), \
            recording(fake, "/dev/vda", "/dev/vdb"):
        pass
    assert fake.calls[-1] == ("dmsetup", "remove", "pc-logw")


def test_marks_are_checked():
    assert check_mark("pc-7") == "pc-7"
    for bad in ("", "has space", "x" * 401, "semi;colon"):
        with pytest.raises(DeviceMapperError):
            check_mark(bad)


def test_target_msg_ioctl_layout():
    buf = pack_target_msg("pc-logw", "mark m1")
    assert len(buf) % 8 == 0
    version, data_size, data_start = struct.unpack_from("<3I", buf)[0], *struct.unpack_from("<II", buf, 12)
    assert version == 4 and data_size == len(buf) and data_start == 312
    assert buf[48:48 + 8] == b"pc-logw\0"
    assert struct.unpack_from("<Q", buf, 312)[0] == 0
    assert buf[320:320 + 8] == b"mark m1\0"
    # _IOWR(0xfd, 14, struct dm_ioctl) as in <linux/dm-ioctl.h>
    assert DM_TARGET_MSG == 0xC138FD0E
