"""Device profiles: the catalogue, user profiles, --profile, the disks and the qemu drives."""

from __future__ import annotations

from pathlib import Path

import pytest

from framework.core.errors import ConfigError
from framework.core.machine.base import DiskSpec
from framework.core.machine.qemu import drive_argv
from recovery.disks import plan_disks
from recovery.profiles import (
    MIN_BANDWIDTH_MB_S,
    builtin_profiles,
    get_profile,
    parse_profile_option,
)
from recovery.targets import (
    DISK_ROLES,
    get_target,
    load_target_file,
    target_from_dict,
    with_profiles,
)

MiB = 1 << 20


def test_builtin_profiles_have_their_numbers_and_sources() -> None:
    profiles = builtin_profiles()
    assert list(profiles)[:5] == ["ram", "nvme", "ssd", "hdd", "usb-flash"]
    for p in profiles.values():
        assert p.source and p.description
        assert p.bandwidth_mb_s is None or p.bandwidth_mb_s >= MIN_BANDWIDTH_MB_S
    assert profiles["ram"].delays is None and profiles["ram"].bandwidth_bytes_s is None
    hdd = profiles["hdd"]
    assert hdd.delays == (8, 4, 12) and hdd.bandwidth_bytes_s == 150_000_000 and hdd.iops == 150
    # slower classes flush slower
    flush = [profiles[n].flush_ms for n in ("ram", "nvme", "ssd", "hdd", "usb-flash")]
    assert flush == sorted(flush)


def test_unknown_profile_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown device profile 'floppy' \(known: ram, nvme, "
                                          r"ssd, hdd, usb-flash\)"):
        get_profile("floppy")


@pytest.mark.parametrize(("text", "expected"), [
    ("data=hdd,journal=ram", {"data": "hdd", "journal": "ram"}),
    ("hdd", {"data": "hdd"}),
    (" journal=usb-flash ", {"journal": "usb-flash"}),
])
def test_profile_option(text: str, expected: dict[str, str]) -> None:
    assert parse_profile_option(text, DISK_ROLES) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("log=hdd", "unknown disk role 'log'"),
    ("data=", "no profile named for 'data'"),
    ("data=hdd,data=ssd", "'data' given twice"),
    (",", "expected ROLE=NAME"),
])
def test_bad_profile_option_is_one_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        parse_profile_option(text, DISK_ROLES)
    assert "\n" not in str(err.value) and str(err.value).startswith(f"--profile {text!r}")


def test_with_profiles_sets_and_carries_the_definitions() -> None:
    target = with_profiles(get_target("ext4/logdev"), {"data": "hdd", "journal": "ram"})
    assert target.disk_profiles == (("data", "hdd"), ("journal", "ram"))
    assert target.delays("data") == (8, 4, 12) and target.delays("journal") is None
    again = target_from_dict(target.to_dict())  # as a plan or the store gives it back
    assert again == target and again.profile("data") == get_profile("hdd")


def test_journal_profile_needs_a_journal_disk() -> None:
    with pytest.raises(ConfigError, match="--profile journal=ram: target 'ext4/ordered' has no "
                                          "journal disk"):
        with_profiles(get_target("ext4/ordered"), {"journal": "ram"})
    with pytest.raises(ConfigError, match="unknown device profile 'floppy'"):
        with_profiles(get_target("ext4/ordered"), {"data": "floppy"})


USER = """
[profiles.slow-sd]
description = "an SD card"
read_ms = 2
write_ms = 10
flush_ms = 40
bandwidth_mb_s = 10
iops = 50

[targets."sd"]
fstype = "ext4"
disk_profiles = { data = "slow-sd" }
"""


def test_user_profiles_in_a_targets_file(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text(USER)
    targets, profiles = load_target_file(path)
    assert profiles["slow-sd"].delays == (2, 10, 40)
    sd = targets["sd"]
    assert sd.profile("data") == profiles["slow-sd"]
    assert target_from_dict(sd.to_dict()) == sd  # carried without the file
    # --profile may name a user profile on a built-in target too
    assert with_profiles(get_target("ext2"), {"data": "slow-sd"}, profiles).delays("data") \
        == (2, 10, 40)


@pytest.mark.parametrize(("body", "message"), [
    ("[profiles.x]\nflush_ms = -1\n", r"profiles.'x'.flush_ms: must be an integer of at least 0, got -1"),
    ("[profiles.x]\nbandwidth_mb_s = 1\n", r"profiles.'x'.bandwidth_mb_s: must be a number of at least 2"),
    ("[profiles.x]\niops = 5\n", r"profiles.'x'.iops: must be an integer of at least 10"),
    ("[profiles.x]\nlatency = 3\n", r"profiles.'x': unknown key 'latency'"),
    ("[profiles.x]\nwrite_ms = 1.5\n", r"profiles.'x'.write_ms: must be an integer"),
    ("[profiles.hdd]\nflush_ms = 1\n", r"profiles.'hdd': redefines a built-in device profile"),
    ('[targets."t"]\nfstype = "ext4"\ndisk_profiles = { data = "nope" }\n',
     r"targets.'t'.disk_profiles.data: unknown device profile 'nope'"),
])
def test_bad_user_profiles_are_one_line_naming_file_and_key(tmp_path: Path, body: str,
                                                             message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=message) as err:
        load_target_file(path)
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)


def test_disks_per_throttle_and_one_disk_when_all_agree() -> None:
    ram = with_profiles(get_target("ext4/logdev"), {"journal": "ram"})
    usb = target_from_dict({**with_profiles(get_target("ext4/logdev"),
                                            {"journal": "usb-flash"}).to_dict(), "name": "usb"})
    plan = plan_disks([ram, usb], data_bytes=64 * MiB)
    assert [(s.name, s.bandwidth_bytes_s, s.iops) for s in plan.specs] == [
        ("data", None, None), ("journal@ram", None, None),
        ("journal@usb-flash", 20_000_000, 100)]
    assert plan.disk(usb, "journal") == "journal@usb-flash" and plan.disk(usb, "data") == "data"
    one = plan_disks([with_profiles(get_target("ext2"), {"data": "hdd"})], data_bytes=64 * MiB)
    assert [(s.name, s.iops) for s in one.specs] == [("data", 150)]


def test_qemu_drive_throttles_a_profiled_disk() -> None:
    plain = drive_argv(DiskSpec("data", MiB), 0, Path("d.img"), cache="unsafe")
    assert plain[1] == ("file=d.img,format=raw,if=none,id=disk0,cache=unsafe,discard=unmap,"
                        "werror=report,rerror=report")
    throttled = drive_argv(DiskSpec("journal", MiB, bandwidth_bytes_s=20_000_000, iops=100), 1,
                           Path("j.img"), cache="unsafe")
    assert throttled[1].endswith(",throttling.bps-total=20000000,throttling.iops-total=100")
    assert throttled[3] == "virtio-blk-pci,drive=disk1,serial=journal"
