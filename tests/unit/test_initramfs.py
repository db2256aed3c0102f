"""Initramfs: module resolution, archive layout, cache key."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from devicemapper import features as dm_features
from framework.core.errors import MissingPrerequisite
from framework.core.machine import initramfs
from framework.core.machine.fake import FakeMachine
from framework.core.machine.initramfs import KernelModule, parse_show_depends, resolve_modules
from recovery.filesystems import kernel_modules

SHOW_DEPENDS_DM = """\
insmod /lib/modules/r/kernel/drivers/md/dm-mod.ko
insmod /lib/modules/r/kernel/drivers/md/dm-log-writes.ko
"""


def test_parse_show_depends_keeps_order_and_builtins():
    files, builtins = parse_show_depends(SHOW_DEPENDS_DM + "builtin crc32c\n")
    assert [f.name for f in files] == ["dm-mod.ko", "dm-log-writes.ko"]
    assert builtins == ["crc32c"]


def fake_modprobe(answers: dict[str, str]) -> FakeMachine:
    fake = FakeMachine()

    def respond(argv, _input):
        name = argv[-1]
        if name in answers:
            return 0, answers[name], ""
        return 1, "", f"modprobe: FATAL: Module {name} not found in directory"

    fake.on("modprobe --show-depends *", respond=respond)
    return fake


def test_resolve_dedups_shared_dependencies_in_load_order():
    fake = fake_modprobe({
        "dm-log-writes": SHOW_DEPENDS_DM,
        "dm-flakey": "insmod /lib/modules/r/kernel/drivers/md/dm-mod.ko\n"
                     "insmod /lib/modules/r/kernel/drivers/md/dm-flakey.ko\n",
    })
    mods, missing = resolve_modules(["dm-log-writes", "dm-flakey"], "r", runner=fake)
    assert [m.name for m in mods] == ["dm-mod", "dm-log-writes", "dm-flakey"]
    assert missing == []
    assert fake.calls[0][:4] == ("modprobe", "--show-depends", "-S", "r")


def test_resolve_under_a_modules_root_passes_dash_d(tmp_path):
    fake = fake_modprobe({"dm-mod": f"insmod {tmp_path}/lib/modules/r/kernel/dm-mod.ko\n"})
    mods, _ = resolve_modules(["dm-mod"], "r", tmp_path, runner=fake)
    assert "-d" in fake.calls[0] and str(tmp_path) in fake.calls[0]
    assert mods[0].path == tmp_path / "lib/modules/r/kernel/dm-mod.ko"


def test_missing_module_is_an_error_naming_it_or_reported_when_allowed():
    fake = fake_modprobe({})
    with pytest.raises(MissingPrerequisite, match="module 'dm-log-writes' not found"):
        resolve_modules(["dm-log-writes"], "r", runner=fake)
    mods, missing = resolve_modules(["dm-log-writes"], "r", runner=fake, missing_ok=True)
    assert (mods, missing) == ([], ["dm-log-writes"])


def test_builtin_module_needs_no_file():
    fake = fake_modprobe({"ext4": "builtin ext4\n"})
    assert resolve_modules(["ext4"], "r", runner=fake) == ([], [])


def test_extra_modules_follow_the_base_ones_once():
    names = initramfs.modules_for(["xfs", "dm-mod", "xfs", "btrfs"])
    assert names == (*initramfs.BASE_MODULES, "xfs", "btrfs")


def test_the_guest_loads_what_the_filesystems_ask_for():
    # The application asks the adapters; the core only loads module names.
    names = initramfs.modules_for(kernel_modules(["ext2", "ext4", "xfs"]))
    assert names.count("ext4") == 1 and "xfs" in names and "dm-log-writes" in names


def test_base_modules_cover_device_mapper_features():
    # devicemapper/features.py is what doctor checks; the guest must load all of it.
    assert set(dm_features.kernel_modules()) <= set(initramfs.BASE_MODULES)


@pytest.fixture
def fake_inputs(tmp_path):
    busybox = tmp_path / "busybox"
    busybox.write_bytes(b"\x7fELF busybox")
    mod = tmp_path / "dm-mod.ko"
    mod.write_bytes(b"module bytes")
    return busybox, [KernelModule("dm-mod", mod)]


@pytest.mark.skipif(subprocess.run(["which", "cpio"], capture_output=True).returncode != 0,
                    reason="cpio not installed (Debian package cpio)")
def test_archive_unpacks_with_cpio(tmp_path, fake_inputs):
    busybox, mods = fake_inputs
    archive = initramfs.build_cpio(mods, busybox)
    out = tmp_path / "unpacked"
    out.mkdir()
    subprocess.run(["cpio", "-id", "--quiet"], input=archive, cwd=out, check=True)
    assert (out / "init").read_text().startswith("#!/bin/busybox sh")
    assert (out / "init").stat().st_mode & 0o111
    assert (out / "bin/busybox").read_bytes() == busybox.read_bytes()
    assert (out / "modules/dm-mod.ko").read_bytes() == b"module bytes"
    assert (out / "modules.order").read_text() == "dm-mod.ko\n"


def test_cache_key_changes_with_module_content(tmp_path, fake_inputs, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    busybox, mods = fake_inputs
    first = initramfs.initramfs(mods, busybox=busybox)
    assert initramfs.initramfs(mods, busybox=busybox) == first  # cached
    mods[0].path.write_bytes(b"rebuilt module")
    second = initramfs.initramfs(mods, busybox=busybox)
    assert second != first and second.exists()


def test_missing_busybox_names_the_package(tmp_path):
    with pytest.raises(MissingPrerequisite, match="busybox-static"):
        initramfs.build_cpio([], Path(tmp_path / "nope"))


def signed(code: bytes, signature: bytes) -> bytes:
    """A module as scripts/sign-file.c appends its signature: PKCS#7 blob, the 12-byte
    struct module_signature (sig_len big-endian at its end), the marker."""
    info = bytes([0, 0, 2, 0, 0, 0, 0, 0]) + len(signature).to_bytes(4, "big")
    return code + signature + info + initramfs.SIGNATURE_MARKER


def test_a_signature_is_dropped_and_nothing_else_is() -> None:
    code = b"\x7fELF module code" * 10
    assert initramfs.drop_signature(signed(code, b"S" * 40)) == code
    assert initramfs.drop_signature(code) == code  # unsigned: as it is
    # Not sign-file's layout: a length beyond the file, or none at all, keeps every byte.
    broken = code + bytes(8) + (10_000).to_bytes(4, "big") + initramfs.SIGNATURE_MARKER
    assert initramfs.drop_signature(broken) == broken
    empty = code + bytes(12) + initramfs.SIGNATURE_MARKER
    assert initramfs.drop_signature(empty) == empty
    assert initramfs.drop_signature(initramfs.SIGNATURE_MARKER) == initramfs.SIGNATURE_MARKER


def test_an_unsigned_archive_has_its_own_key_and_the_modules_without_signatures(
        tmp_path, fake_inputs, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    busybox, mods = fake_inputs
    mods[0].path.write_bytes(signed(b"module bytes", b"S" * 64))
    kept = initramfs.initramfs(mods, busybox=busybox)
    dropped = initramfs.initramfs(mods, busybox=busybox, unsigned=True)
    assert kept != dropped
    assert mods[0].path.read_bytes() in kept.read_bytes()  # signed, as installed
    assert initramfs.SIGNATURE_MARKER not in dropped.read_bytes()
    assert b"module bytes" in dropped.read_bytes()


@pytest.mark.parametrize("suffix, pack", [
    (".xz", lambda data: __import__("lzma").compress(data, format=__import__("lzma").FORMAT_XZ)),
    (".gz", lambda data: __import__("gzip").compress(data)),
    (".zst", lambda data: __import__("zstandard").ZstdCompressor().compress(data)),
])
def test_a_packed_module_is_unpacked_on_the_host_and_then_loses_its_signature(
        tmp_path, fake_inputs, monkeypatch, suffix, pack):
    """Debian's 6.12 and 7.x ship ext4.ko.xz: the archive holds ext4.ko, unpacked, and
    where the kernel loads unsigned modules the signature (inside the packed file, as
    sign-file signs before compression) goes too."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    busybox, _ = fake_inputs
    module = tmp_path / f"ext4.ko{suffix}"
    module.write_bytes(pack(signed(b"\x7fELF ext4 code", b"S" * 64)))
    mods = [initramfs.KernelModule("ext4", module)]
    assert initramfs.unpacked_module(module) == ("ext4.ko", signed(b"\x7fELF ext4 code", b"S" * 64))
    archive = initramfs.initramfs(mods, busybox=busybox, unsigned=True).read_bytes()
    assert b"modules/ext4.ko\0" in archive and b"ext4.ko\n" in archive  # modules.order
    assert b"\x7fELF ext4 code" in archive and initramfs.SIGNATURE_MARKER not in archive
    # As packaged (the bench's anchor): the file as it is, under its own name.
    shipped = initramfs.initramfs(mods, busybox=busybox, unsigned=True, unpack=False).read_bytes()
    assert module.read_bytes() in shipped and f"ext4.ko{suffix}\n".encode() in shipped


def test_a_damaged_packed_module_is_one_line_naming_it(tmp_path):
    module = tmp_path / "xfs.ko.xz"
    module.write_bytes(b"\xfd7zXZ\x00 not really")
    with pytest.raises(MissingPrerequisite) as info:
        initramfs.unpacked_module(module)
    assert str(info.value).startswith(f"{module}: not a readable xz module") and "\n" not in str(info.value)


def test_a_file_that_only_looks_packed_is_left_alone(tmp_path):
    other = tmp_path / "notes.xz"  # not a module: no .ko before the suffix
    other.write_bytes(b"plain")
    assert initramfs.unpacked_module(other) == ("notes.xz", b"plain")
