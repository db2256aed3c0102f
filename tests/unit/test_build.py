"""Kernels built from a Debian source with a patch, as `powercut ci --kernel-source --patch`
builds them: here the source is a small tree whose Makefile stands in for the kernel's
(real tar, make and patch run on it), so a patch that does not apply, a missing source and
a failed build are each checked for their one-line error."""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path

import pytest

from framework.cli import ci as cli_ci
from framework.cli import main
from framework.core.machine import build, kernel
from framework.core.machine.build import first_error

MAKEFILE = """\
# Stands in for the kernel's top Makefile: the targets powercut's build runs.
x86_64_defconfig:
\t@echo '# defconfig' > .config
olddefconfig:
\t@true
bzImage:
\t@if grep -q BROKEN fs/ext4/super.c; then \\
\t  echo 'fs/ext4/super.c: In function ext4_fill_super:' >&2; \\
\t  echo "fs/ext4/super.c:3:1: error: expected ';' before '}' token" >&2; \\
\t  echo 'make[4]: *** [scripts/Makefile.build:243: fs/ext4/super.o] Error 1' >&2; exit 2; fi
\t@mkdir -p arch/x86/boot && cat fs/ext4/super.c > arch/x86/boot/bzImage
modules:
\t@true
kernelrelease:
\t@echo 7.3.4$(LOCALVERSION)
modules_install:
\t@mkdir -p $(INSTALL_MOD_PATH)/lib/modules/7.3.4$(LOCALVERSION) && touch $(INSTALL_MOD_PATH)/lib/modules/7.3.4$(LOCALVERSION)/modules.dep
"""

MERGE = """#!/bin/sh
# Stands in for scripts/kconfig/merge_config.sh -m .config A B: appends the fragments.
shift 2
for f in "$@"; do cat "$f" >> .config; done
"""


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """linux-source-7.3.tar.xz of a tree with fs/ext4/super.c, the stand-in Makefile and
    merge_config.sh."""
    top = tmp_path / "src" / "linux-source-7.3"
    (top / "fs" / "ext4").mkdir(parents=True)
    (top / "fs" / "ext4" / "super.c").write_text("int ext4_fill_super(void)\n{\n}\n")
    (top / "Makefile").write_text(MAKEFILE)
    (top / "scripts" / "kconfig").mkdir(parents=True)
    (top / "scripts" / "kconfig" / "merge_config.sh").write_text(MERGE)
    (top / "scripts" / "kconfig" / "merge_config.sh").chmod(0o755)
    (top / "kernel" / "configs").mkdir(parents=True)
    (top / "kernel" / "configs" / "kvm_guest.config").write_text("CONFIG_KVM_GUEST=y\n")
    tarball = tmp_path / "linux-source-7.3.tar.xz"
    subprocess.run(["tar", "-C", str(tmp_path / "src"), "-cJf", str(tarball), "linux-source-7.3"],
                   check=True)
    return tarball


def patch_file(tmp_path: Path, old: str, new: str, name: str = "fix.patch") -> Path:
    path = tmp_path / name
    path.write_text("--- a/fs/ext4/super.c\n+++ b/fs/ext4/super.c\n@@ -1,3 +1,3 @@\n"
                    f" int ext4_fill_super(void)\n-{old}\n+{new}\n }}\n")
    return path


def ci_args(tmp_path: Path, patch: Path) -> argparse.Namespace:
    return argparse.Namespace(kernel_source="7.3", patch=str(patch), kernel=None, modules=None,
                              kernel_release=None, baseline=None, baseline_kernel=None,
                              baseline_modules=None, baseline_kernel_release=None)


def test_the_baseline_and_the_patched_kernel_are_built_and_named(tmp_path, source, monkeypatch):
    monkeypatch.setattr(kernel, "source_tarball", lambda series, *a, **k: source)
    args = ci_args(tmp_path, patch_file(tmp_path, "{", "{ /* fixed */"))
    said: list[str] = []
    cli_ci.build_patched(args, say=said.append)
    builds = Path(kernel.kernel_cache()) / "builds" / "kernels"
    base, candidate = Path(args.baseline_kernel).parent, Path(args.kernel).parent
    assert base.parent == candidate.parent == builds
    assert base.name == "7.3-unpatched" and candidate.name.startswith("7.3-fix-")
    assert "fixed" in Path(args.kernel).read_text() and "fixed" not in Path(
        args.baseline_kernel).read_text()
    # Each build says which it is: the release carries its name (make LOCALVERSION=).
    assert (base / "lib" / "modules" / "7.3.4-unpatched" / "modules.dep").is_file()
    release = f"7.3.4-{candidate.name.removeprefix('7.3-')}"
    assert (candidate / "lib" / "modules" / release / "modules.dep").is_file()
    # The tree is the source as shipped again, and a second call builds nothing.
    tree = builds.parent / "linux-7.3"
    assert "fixed" not in (tree / "fs" / "ext4" / "super.c").read_text()
    assert not (tree / build.APPLIED).exists()
    said.clear()
    cli_ci.build_patched(ci_args(tmp_path, tmp_path / "fix.patch"), say=said.append)
    assert [line.split(":")[1].strip() for line in said] == ["7.3-unpatched", Path(
        args.kernel).parent.name]
    assert all("up to date" in line for line in said)


def test_a_patch_that_does_not_apply_is_one_line_and_builds_nothing(tmp_path, source, monkeypatch,
                                                                      capsys):
    monkeypatch.setattr(kernel, "source_tarball", lambda series, *a, **k: source)
    bad = patch_file(tmp_path, "{ not this line", "{", name="stale.patch")
    status = main(["ci", "--kernel-source", "7.3", "--patch", str(bad),
                   "--results", str(tmp_path / "r")])
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert err.startswith(f"powercut: {bad}: does not apply to linux-source-7.3")
    assert "FAILED" in err  # patch's own words: Hunk #1 FAILED at 1.
    assert not (Path(kernel.kernel_cache()) / "builds" / "kernels").exists()


def test_a_missing_source_is_one_line(tmp_path, monkeypatch, capsys):
    from framework.core.errors import MissingPrerequisite
    from framework.core.machine import archive

    monkeypatch.setattr(kernel, "source_tarball", lambda series, *a, **k: None)

    def offered_none(self, spec, force=False):  # the archive has no such series
        raise MissingPrerequisite(f"kernel source {spec!r}: the archive offers no linux-source "
                                  "package of that series (offered: 6.1, 6.12, 7.2, 7.3)")

    monkeypatch.setattr(archive.Archive, "fetch_source", offered_none)
    status = main(["ci", "--kernel-source", "7.9", "--patch", str(patch_file(tmp_path, "{", "{ ")),
                   "--results", str(tmp_path / "r")])
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert err == ("powercut: missing prerequisite: kernel source '7.9': the archive offers no "
                   "linux-source package of that series (offered: 6.1, 6.12, 7.2, 7.3)")


def test_a_failed_build_is_one_line_with_the_first_error(tmp_path, source, monkeypatch, capsys):
    monkeypatch.setattr(kernel, "source_tarball", lambda series, *a, **k: source)
    broken = patch_file(tmp_path, "{", "{ BROKEN", name="broken.patch")
    status = main(["ci", "--kernel-source", "7.3", "--patch", str(broken),
                   "--results", str(tmp_path / "r")])
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert err.endswith("make bzImage modules failed: fs/ext4/super.c:3:1: error: expected ';' "
                        "before '}' token")
    # The patch is out of the tree again, and no kernel was installed for it.
    tree = Path(kernel.kernel_cache()) / "builds" / "linux-7.3"
    assert "BROKEN" not in (tree / "fs" / "ext4" / "super.c").read_text()
    assert not list((tree.parent / "kernels").glob("7.3-broken-*"))


@pytest.mark.parametrize("argv, message", [
    (["--patch", "x.patch"], "--patch needs --kernel-source SERIES (e.g. 7.3): the source the "
     "patch applies to"),
    (["--kernel-source", "7.3"], "--kernel-source needs --patch FILE: the change to judge"),
    (["--kernel-source", "7.3", "--patch", "x.patch", "--kernel-release", "7.3.4+deb13-amd64"],
     "--kernel-source builds both kernels; drop --kernel-release"),
    (["--kernel-source", "7.3", "--patch", "no-such.patch"], "--patch no-such.patch: no such file"),
])
def test_options_that_do_not_go_together_are_one_line(argv, message, tmp_path, monkeypatch,
                                                      capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.patch").write_text("")
    assert main(["ci", *argv, "--results", "r"]) == 2
    assert capsys.readouterr().err.strip() == f"powercut: {message}"


def test_the_first_error_is_the_compilers_not_makes_last_word():
    text = ("  CC      fs/ext4/super.o\nfs/ext4/super.c: In function 'f':\n"
            "fs/ext4/super.c:3:1: error: expected ';'\nmake[4]: *** [x] Error 1\n"
            "make: *** [Makefile:1] Error 2\n")
    assert first_error(text) == "fs/ext4/super.c:3:1: error: expected ';'"
    assert first_error("ld: vmlinux: undefined reference\nmake: *** [vmlinux] Error 1\n") == \
        "make: *** [vmlinux] Error 1"
    assert first_error("") == "no output"


def test_kernels_build_prints_the_options_that_boot_each_build(tmp_path, source, monkeypatch,
                                                                capsys):
    monkeypatch.setattr(kernel, "source_tarball", lambda series, *a, **k: source)
    fix = patch_file(tmp_path, "{", "{ /* fixed */")
    assert main(["kernels", "build", "7.3", "--patch", str(fix)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["unpatched", "patched"]
    patched = lines[1].split()
    image = Path(patched[patched.index("--kernel") + 1])
    assert image.name == "bzImage" and "fixed" in image.read_text()
    assert Path(patched[patched.index("--modules") + 1]) == image.parent
    # Without --patch: the source as shipped alone.
    assert main(["kernels", "build", "7.3"]) == 0
    assert [ln.split(":")[0] for ln in capsys.readouterr().out.splitlines()] == ["unpatched"]


def test_a_long_build_says_how_many_objects_it_compiled_against_the_last_whole_build(tmp_path):
    said: list[str] = []
    tree = build.SourceTree("7.3", tmp_path, say=said.append)
    (tree.tree / "fs").mkdir(parents=True)
    (tree.tree / "fs" / "old.o").write_text("")  # from before this build: not counted
    os.utime(tree.tree / "fs" / "old.o", (1, 1))
    with tree._progress("7.3-unpatched", every_s=0.05):
        time.sleep(0.02)  # file times run on the kernel's coarse clock, a tick behind
        for name in ("super.o", "inode.o", "super.c"):
            (tree.tree / "fs" / name).write_text("")
        time.sleep(0.3)
    assert said, "no progress line in 0.3 s at one every 0.05 s"
    assert said[-1].startswith("build: 7.3-unpatched: 2 object files compiled, ")
    # The next build counts against this tree's whole build: its three object files.
    said.clear()
    with tree._progress("7.3-fix", every_s=0.05):
        time.sleep(0.2)
    assert said[-1].startswith("build: 7.3-fix: 0 of about 3 object files compiled, ")
