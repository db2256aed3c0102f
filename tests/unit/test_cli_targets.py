"""``powercut targets`` and ``powercut targets show``: what a user reads, text and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framework.cli import doctor, main
from framework.cli import targets as cli_targets
from framework.core.machine.kernel import KernelSpec
from recovery.filesystems import ADAPTERS
from recovery.targets import list_targets

#: A guest kernel that has every filesystem module but reiserfs (gone since Linux 6.13).
KERNEL = cli_targets.KernelModules(
    "6.13.0-test",
    frozenset(m for a in ADAPTERS for m in a.kernel_modules if m != "reiserfs"),
)


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """This machine: every program there except those put in the returned set; KERNEL as guest."""
    absent: set[str] = set()
    monkeypatch.setattr(doctor, "find_tool",
                        lambda binary: None if binary in absent else f"/usr/sbin/{binary}")
    monkeypatch.setattr(cli_targets, "_default_kernel_modules", lambda: KERNEL)
    return absent


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_list_shows_every_target_with_fstype_journal_and_availability(
    machine: set[str], capsys: pytest.CaptureFixture[str]
) -> None:
    machine.add("mkfs.xfs")
    rc, out, _ = run(["targets"], capsys)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "FSTYPE", "JOURNAL", "AVAILABLE", "DESCRIPTION"]
    rows = {line.split()[0]: line.split() for line in lines[1:] if not line.startswith(" ")}
    assert list(rows) == [t.name for t in list_targets()]
    assert rows["ext4/logdev"][1:4] == ["ext4", "external", "yes"]
    assert rows["ext2"][1:4] == ["ext2", "none", "yes"]
    assert rows["xfs"][3] == rows["xfs/logdev"][3] == "no"
    assert rows["reiserfs"][3] == "no"
    # Each reason says what is missing and how to get it.
    assert out.count("missing: program mkfs.xfs (install Debian package xfsprogs)") == 2
    assert "missing: kernel module reiserfs (not in kernel 6.13.0-test)" in out
    assert "ext4 data=journal: data and metadata both go through the journal" in out


def test_list_json(machine: set[str], capsys: pytest.CaptureFixture[str]) -> None:
    machine.add("jfs_tune")
    rc, out, _ = run(["targets", "--json"], capsys)
    assert rc == 0
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["jfs"]["available"] is False
    assert rows["jfs"]["missing"] == ["program jfs_tune (install Debian package jfsutils)"]
    assert rows["ext4/ordered"] == {
        "name": "ext4/ordered", "fstype": "ext4", "journal": "internal", "available": True,
        "missing": [], "kernel": "6.13.0-test", "builtin": True,
        "description": "ext4 default: metadata journalled, data written before its metadata commits",
    }


def test_show_prints_options_commands_and_rules_in_words(
    machine: set[str], capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = run(["targets", "show", "ext4/journal"], capsys)
    assert rc == 0
    assert out.startswith("ext4/journal (built in)\n")
    assert "journal:         internal, on the data disk (mkfs default size)" in out
    assert "mount options:   data=journal" in out
    assert "mkfs command:    mke2fs -F -q -t ext4 " in out
    assert "available:       yes" in out
    assert "persistence rules (ext4/journal)" in out
    assert "- An overwrite of a data block leaves the old or the new block" in out
    assert "- Replacing a file by rename" in out


def test_show_external_journal_and_a_posix_only_filesystem(
    machine: set[str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = run(["targets", "show", "xfs/logdev"], capsys)
    assert "external, on a disk of its own" in out
    assert "mounted with:    logdev=JOURNAL_DEV" in out
    assert "Replacing a file by rename" not in out  # xfs does not promise it
    _, out, _ = run(["targets", "show", "ext2"], capsys)
    assert "none: recovery is fsck's job" in out
    assert "persistence rules (ext2)" in out and "- nothing more." in out


def test_show_json_and_option_order(machine: set[str], capsys: pytest.CaptureFixture[str]) -> None:
    machine.add("mkfs.btrfs")
    rc, out, _ = run(["targets", "--json", "show", "btrfs"], capsys)
    assert rc == 0
    data = json.loads(out)
    assert data["name"] == "btrfs" and data["fstype"] == "btrfs"
    assert data["available"] is False
    assert data["missing"] == ["program mkfs.btrfs (install Debian package btrfs-progs)"]
    assert data["persistence_rules"]["data_block_atomic"] is True
    assert data["persistence_rules"]["name"] == "btrfs"
    assert data["kernel_modules"] == ["btrfs"]
    assert {"binary": "mkfs.btrfs", "package": "btrfs-progs"} in data["tools"]
    # --json after the verb works the same.
    rc, again, _ = run(["targets", "show", "btrfs", "--json"], capsys)
    assert json.loads(again) == data


def test_user_targets_file_is_listed_and_shown(
    machine: set[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('[targets."mine"]\nfstype = "ext4"\nmount_options = ["data=journal"]\n'
                    'description = "my journal"\n')
    rc, out, _ = run(["targets", "--targets-file", str(path)], capsys)
    assert rc == 0
    assert out.splitlines()[-1].split()[:4] == ["mine", "ext4", "internal", "yes"]
    rc, out, _ = run(["targets", "show", "mine", "--targets-file", str(path), "--json"], capsys)
    data = json.loads(out)
    assert data["builtin"] is False
    # Rules come from the options: the same as the built-in data=journal target's.
    assert data["persistence_rules"]["name"] == "ext4/journal"
    _, out, _ = run(["targets", "--targets-file", str(path), "show", "mine"], capsys)
    assert out.startswith(f"mine (from {path})\n")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('[targets."mine"]\nfstype = "ext4"\nmount_option = ["data=journal"]\n',
         "targets.'mine': unknown key 'mount_option'"),
        ('[targets."xfs"]\nfstype = "xfs"\n', "targets.'xfs': redefines a built-in target"),
        ('[targets."mine"]\nfstype = "ext4"\nmount_options = ["data=jornal"]\n',
         "targets.'mine'.mount_options: unknown ext4 data mode 'jornal'"),
    ],
)
def test_bad_targets_file_is_one_line_naming_file_and_key(
    machine: set[str], capsys: pytest.CaptureFixture[str], tmp_path: Path, body: str, expected: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(body)
    rc, out, err = run(["targets", "--targets-file", str(path)], capsys)
    assert rc == 2 and out == ""
    assert err.startswith(f"powercut: {path}: {expected}")
    assert err.count("\n") == 1


def test_show_unknown_target_names_the_known_ones(
    machine: set[str], capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = run(["targets", "show", "ext5"], capsys)
    assert rc == 2
    assert "unknown target 'ext5'" in err and "ext4/ordered" in err


def test_guest_kernel_modules_from_modules_dep_and_builtin(tmp_path: Path) -> None:
    moddir = tmp_path / "lib/modules/6.1.0-test"
    moddir.mkdir(parents=True)
    (moddir / "modules.dep").write_text(
        "kernel/fs/xfs/xfs.ko: kernel/lib/libcrc32c.ko\nkernel/fs/btrfs/btrfs.ko.xz: \n")
    (moddir / "modules.builtin").write_text("kernel/fs/ext4/ext4.ko\n")
    kernel = cli_targets.guest_kernel_modules(KernelSpec(tmp_path / "vmlinuz", "6.1.0-test", tmp_path))
    assert isinstance(kernel, cli_targets.KernelModules)
    assert kernel.has("xfs") and kernel.has("btrfs") and kernel.has("ext4")
    assert not kernel.has("reiserfs")
    empty = cli_targets.guest_kernel_modules(KernelSpec(tmp_path / "vmlinuz", "other", tmp_path))
    assert isinstance(empty, str) and "no modules.dep" in empty
    assert cli_targets.guest_kernel_modules(None) == "no guest kernel found"


def test_without_a_kernel_modules_are_not_checked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(doctor, "find_tool", lambda binary: f"/usr/sbin/{binary}")
    monkeypatch.setattr(cli_targets, "_default_kernel", lambda: None)
    rc, out, _ = run(["targets"], capsys)
    assert rc == 0
    assert out.rstrip().endswith("kernel modules not checked: no guest kernel found")
    rows = [line.split() for line in out.splitlines()[1:] if line and not line.startswith(" ")]
    assert {row[3] for row in rows[:-1]} == {"yes"}  # every program there; modules unknown


def test_profiles_are_listed_with_their_numbers_and_the_users_own(
    machine: set[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('[profiles.sd]\nwrite_ms = 10\nflush_ms = 40\nbandwidth_mb_s = 10\n')
    rc, out, _ = run(["targets", "--profiles", "--targets-file", str(path)], capsys)
    assert rc == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:] if line[:1].strip()}
    assert rows["hdd"][1:6] == ["8ms", "4ms", "12ms", "150", "150"]
    assert rows["sd"][1:6] == ["0ms", "10ms", "40ms", "10", "-"]
    rc, out, _ = run(["targets", "--profiles", "--json"], capsys)
    listed = {p["name"]: p for p in json.loads(out)}
    assert list(listed) == ["ram", "nvme", "ssd", "hdd", "usb-flash"]
    assert listed["usb-flash"]["flush_ms"] == 20 and listed["usb-flash"]["builtin"]
