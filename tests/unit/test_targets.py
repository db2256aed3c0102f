"""Targets: built-ins, user TOML files and their validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framework.core.errors import ConfigError
from recovery.filesystems import adapter_for
from recovery.targets import (
    JournalPlacement,
    Target,
    get_target,
    list_targets,
    load_targets,
    parse_targets,
    target_from_dict,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "recovery"

BUILTIN_NAMES = [
    "ext2", "ext3", "ext3/logdev", "ext4/ordered", "ext4/writeback", "ext4/journal", "ext4/nojournal",
    "ext4/fast_commit", "ext4/logdev", "ext4/nobarrier", "xfs", "xfs/logdev", "btrfs",
    "f2fs", "jfs", "jfs/logdev", "reiserfs",
]


def test_builtin_targets_are_the_xfstests_style_set() -> None:
    assert [t.name for t in list_targets()] == BUILTIN_NAMES


@pytest.mark.parametrize("name", BUILTIN_NAMES)
def test_every_builtin_has_an_adapter_and_a_description(name: str) -> None:
    target = get_target(name)
    adapter = adapter_for(target.fstype)
    assert target.fstype in adapter.fstypes
    assert target.description
    if target.needs_journal_disk:
        assert adapter.supports_external_journal


def test_journal_placements_of_builtins() -> None:
    external = {t.name for t in list_targets() if t.needs_journal_disk}
    assert external == {"ext3/logdev", "ext4/logdev", "xfs/logdev", "jfs/logdev"}
    none = {t.name for t in list_targets() if t.journal is JournalPlacement.NONE}
    assert none == {"ext2", "ext4/nojournal"}


def test_ext4_modes_differ_only_where_they_should() -> None:
    assert "data=writeback" in get_target("ext4/writeback").mount_options
    assert "data=journal" in get_target("ext4/journal").mount_options
    assert get_target("ext4/nojournal").mkfs_options == ("-O", "^has_journal")
    assert get_target("ext4/fast_commit").mkfs_options == ("-O", "fast_commit")
    nobarrier = get_target("ext4/nobarrier")
    assert "barrier=0" in nobarrier.mount_options
    assert "data=ordered" in nobarrier.mount_options


def test_unknown_target_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown target 'ext5'.*ext4/ordered"):
        get_target("ext5")


def test_load_good_file() -> None:
    targets = load_targets(FIXTURES / "targets_good.toml")
    assert list(targets) == ["ext4/bigjournal", "xfs/slowlog"]
    big = targets["ext4/bigjournal"]
    assert big == Target(
        name="ext4/bigjournal",
        fstype="ext4",
        mkfs_options=("-O", "metadata_csum"),
        mount_options=("data=journal", "commit=1"),
        journal=JournalPlacement.INTERNAL,
        journal_size_mib=64,
        description="ext4 data=journal with a 64 MiB journal",
    )
    slow = targets["xfs/slowlog"]
    assert slow.needs_journal_disk
    # User targets are found next to the built-ins.
    assert get_target("xfs/slowlog", targets) is slow
    assert get_target("xfs", targets).name == "xfs"
    assert [t.name for t in list_targets(targets)][-2:] == ["ext4/bigjournal", "xfs/slowlog"]


def test_unknown_key_names_key_and_file() -> None:
    path = FIXTURES / "targets_unknown_key.toml"
    with pytest.raises(ConfigError) as err:
        load_targets(path)
    message = str(err.value)
    assert "'mount_option'" in message
    assert str(path) in message
    assert "ext4/typo" in message


def test_bad_syntax_names_file_and_line() -> None:
    path = FIXTURES / "targets_bad_syntax.toml"
    with pytest.raises(ConfigError) as err:
        load_targets(path)
    message = str(err.value)
    assert str(path) in message
    assert "line 4" in message


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read target file"):
        load_targets(tmp_path / "nope.toml")


def test_redefining_a_builtin_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text('[targets."xfs"]\nfstype = "xfs"\n')
    with pytest.raises(ConfigError, match="redefines a built-in target"):
        load_targets(path)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('fstype = "zfs"', "unknown filesystem type 'zfs'"),
        ('fstype = "btrfs"\njournal = "external"', "cannot put its journal on its own disk"),
        ('fstype = "ext4"\njournal = "sideways"', "'sideways' is not one of internal, external, none"),
        ('fstype = "ext4"\njournal_size_mib = 0', "journal_size_mib: must be a positive integer"),
        ('fstype = "ext4"\njournal = "none"\njournal_size_mib = 8', "set, but journal is 'none'"),
        ('fstype = "ext4"\nmount_options = "data=journal"', "must be a list of strings"),
        ('fstype = "ext4"\ndisk_profiles = { log = "ssd" }', "unknown disk role 'log'"),
        ('fstype = "ext4"\ndisk_profiles = { journal = "ssd" }', "journal: set, but journal is 'internal'"),
        ('fstype = "ext4"\ndisk_profiles = { data = "floppy" }',
         "disk_profiles.data: unknown device profile 'floppy' .known: ram, nvme, ssd, hdd, usb-flash"),
        ('mount_options = []', "missing key 'fstype'"),
    ],
)
def test_invalid_targets_are_rejected_with_the_key(body: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(")) as err:
        parse_targets(f'[targets."mine"]\n{body}\n', source="mine.toml")
    assert str(err.value).startswith("mine.toml: targets.'mine'")


def test_top_level_keys_other_than_targets_are_rejected() -> None:
    with pytest.raises(ConfigError, match="unknown key 'target'"):
        parse_targets('[target."x"]\nfstype = "ext4"\n', source="t.toml")


@pytest.mark.parametrize("name", BUILTIN_NAMES)
def test_builtin_targets_round_trip_through_dicts(name: str) -> None:
    target = get_target(name)
    data = target.to_dict()
    assert json.loads(json.dumps(data)) == data  # JSON-ready, as guest tasks send it
    assert target_from_dict(data) == target


def test_user_targets_round_trip_through_dicts() -> None:
    for target in load_targets(FIXTURES / "targets_good.toml").values():
        assert target_from_dict(json.loads(json.dumps(target.to_dict()))) == target


def test_from_dict_validates_like_a_toml_table() -> None:
    data = get_target("ext4/journal").to_dict() | {"name": "mine", "mount_options": ["data=bogus"]}
    with pytest.raises(ConfigError, match=r"targets.'mine'.mount_options: unknown ext4 data mode"):
        target_from_dict(data)
    with pytest.raises(ConfigError, match="unknown key 'colour'"):
        target_from_dict({"name": "mine", "fstype": "xfs", "colour": "red"})


def test_shadowing_a_builtin_names_the_file_and_the_target(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('[targets."ext4/ordered"]\nfstype = "ext4"\nmount_options = ["data=journal"]\n')
    with pytest.raises(ConfigError) as err:
        load_targets(path)
    assert str(err.value) == f"{path}: targets.'ext4/ordered': redefines a built-in target"


# What the filesystems' own tools print (dumpe2fs 1.47.0 -h, xfs_db 6.1 "info",
# jfs_tune 1.1.15 -l) for a volume made with its journal on another disk.
DUMPE2FS_EXTERNAL = """\
Filesystem features:      has_journal ext_attr resize_inode dir_index filetype extent 64bit
Journal UUID:             fe05c371-2189-40b7-97ae-b57f348096b5
Journal device:\t          0x0700
Journal backup:           inode blocks
"""
DUMPE2FS_INTERNAL = """\
Journal inode:            8
Journal backup:           inode blocks
Journal size:             4096k
"""
XFS_DB_EXTERNAL = """\
meta-data=/tmp/x.img             isize=512    agcount=4, agsize=20480 blks
log      =external               bsize=4096   blocks=20480, version=2
realtime =none                   extsz=4096   blocks=0, rtextents=0
"""
JFS_TUNE_EXTERNAL = """\
JFS flags:\t\tJFS_LINUX  JFS_COMMIT  JFS_GROUPCOMMIT
Aggregate block size:\t4096 bytes
Log device number:\t0x701
External log UUID:\t8a2ed385-67f3-418e-b1b2-e2b6241ff588
"""


@pytest.mark.parametrize(("fstype", "output", "expected"), [
    ("ext4", DUMPE2FS_EXTERNAL, ["Journal UUID: fe05c371-2189-40b7-97ae-b57f348096b5",
                                 "Journal device: 0x0700"]),
    ("ext4", DUMPE2FS_INTERNAL, ["Journal inode: 8", "Journal size: 4096k"]),
    ("xfs", XFS_DB_EXTERNAL, ["log =external bsize=4096 blocks=20480, version=2"]),
    ("jfs", JFS_TUNE_EXTERNAL, ["JFS flags: JFS_LINUX JFS_COMMIT JFS_GROUPCOMMIT",
                                "Log device number: 0x701",
                                "External log UUID: 8a2ed385-67f3-418e-b1b2-e2b6241ff588"]),
])
def test_the_journal_location_comes_from_the_filesystems_own_tool(
        fstype: str, output: str, expected: list[str]) -> None:
    adapter = adapter_for(fstype)
    assert adapter.journal_location_argv("/dev/vdb") is not None
    assert adapter.journal_location_lines(output) == expected
