"""Choosing the guest kernel: --kernel-release and the stable default, on a fake /boot tree."""

from __future__ import annotations

import functools
import logging
import re
import shutil
from pathlib import Path

import pytest

from framework.cli import build_parser, doctor, main
from framework.cli import run as cli_run
from framework.cli import vm as cli_vm
from framework.core.errors import ConfigError, MissingPrerequisite
from framework.core.machine import kernel as kernel_mod
from framework.core.machine.kernel import (
    choose_default,
    default_kernel,
    installed_kernels,
    kernel_spec,
    release_kernel,
    release_of_depends,
)

OLD, NEW, NEWER = "6.1.0-56-amd64", "6.12.107+deb12-amd64", "6.12.200+deb12-amd64"

needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-query") is None,
                                reason="dpkg-query missing: install dpkg (a Debian host)")


def fake_root(root: Path, *releases: str, without_modules: tuple[str, ...] = (),
              meta: str | None = None) -> Path:
    """ROOT/boot/vmlinuz-R, ROOT/lib/modules/R/modules.dep and, with ``meta``, a dpkg
    database in which linux-image-amd64 depends on linux-image-META."""
    (root / "boot").mkdir(parents=True, exist_ok=True)
    for release in (*releases, *without_modules):
        (root / "boot" / f"vmlinuz-{release}").write_bytes(b"kernel " + release.encode())
        (root / "boot" / f"config-{release}").write_text(f"# {release}\nCONFIG_DM_LOG_WRITES=m\n")
    for release in releases:
        (root / "lib" / "modules" / release).mkdir(parents=True)
        (root / "lib" / "modules" / release / "modules.dep").write_text("")
    if meta is not None:
        dpkg = root / "var" / "lib" / "dpkg"
        dpkg.mkdir(parents=True)
        (dpkg / "status").write_text(
            "Package: linux-image-amd64\nStatus: install ok installed\nPriority: optional\n"
            "Section: kernel\nMaintainer: Debian Kernel Team\nArchitecture: amd64\n"
            f"Version: 1.0\nDepends: linux-image-{meta} (= 1.0)\nDescription: Linux for 64-bit PCs\n\n")
    return root


# --- --kernel-release -------------------------------------------------------------


def test_an_installed_release_boots_its_image_with_its_modules(tmp_path):
    root = fake_root(tmp_path, OLD, NEW)
    spec = release_kernel(NEW, root)
    assert spec.image == root / "boot" / f"vmlinuz-{NEW}"
    assert spec.modules_dir == root / "lib" / "modules" / NEW
    assert spec == kernel_spec(None, None, NEW, root=root)


def test_a_release_run_records_that_release(tmp_path):
    root = fake_root(tmp_path, OLD, NEW)
    facts = release_kernel(NEW, root).facts()
    assert facts["kernel"] == NEW
    assert facts["kernel_image"] == str(root / "boot" / f"vmlinuz-{NEW}")
    assert facts["kernel_config_sha256"] != "unknown"  # its own /boot/config-RELEASE
    assert facts["kernel_config_sha256"] != release_kernel(OLD, root).facts()["kernel_config_sha256"]


def test_a_release_that_is_not_installed_is_one_line_with_the_list_and_the_fix(tmp_path):
    root = fake_root(tmp_path, OLD, NEW)
    with pytest.raises(MissingPrerequisite) as info:
        release_kernel("6.12.9+deb12-amd64", root)
    msg = str(info.value)
    assert "\n" not in msg
    assert "6.12.9+deb12-amd64 is neither installed" in msg and "nor in the kernel cache" in msg
    assert f"available: {OLD}, {NEW};" in msg
    assert "'powercut kernels fetch 6.12.9+deb12-amd64'" in msg


def test_a_release_without_modules_says_so(tmp_path):
    root = fake_root(tmp_path, OLD, without_modules=(NEW,))
    with pytest.raises(MissingPrerequisite) as info:
        release_kernel(NEW, root)
    assert f"{NEW} has no modules" in str(info.value)
    assert f"available: {OLD}, {NEW} (no modules);" in str(info.value)
    assert f"'powercut kernels fetch {NEW}'" in str(info.value)


def test_no_kernel_at_all_lists_none(tmp_path):
    with pytest.raises(MissingPrerequisite, match="available: none;"):
        release_kernel(NEW, tmp_path)


@pytest.mark.parametrize("bad, why", [
    ("/boot/vmlinuz-6.1.0-56-amd64", "not a path"),
    ("", "expected a release"),
    (f"linux-image-{NEW}", re.escape(f"not the package name (--kernel-release {NEW})")),
])
def test_a_malformed_release_is_a_config_error(tmp_path, bad, why):
    with pytest.raises(ConfigError, match=why):
        release_kernel(bad, fake_root(tmp_path, OLD))


def test_release_excludes_kernel_and_modules(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        build_parser(["vm"]).parse_args(["vm", "run", "--kernel", "bzImage", "--kernel-release", NEW])
    assert stop.value.code == 2
    assert "--kernel-release: not allowed with argument --kernel" in capsys.readouterr().err
    # Also when called directly, and with --modules (an installed kernel brings its own).
    with pytest.raises(ConfigError, match="drop --kernel/--modules or --kernel-release"):
        kernel_spec(None, tmp_path, NEW, root=fake_root(tmp_path, NEW))
    with pytest.raises(ConfigError, match="drop --kernel/--modules or --kernel-release"):
        kernel_spec(tmp_path / "bzImage", None, NEW, root=tmp_path)


def test_every_command_with_machine_options_takes_it():
    for argv in (["doctor"], ["vm", "run"], ["vm", "shell"], ["run"], ["crash", "--target", "t"],
                 ["recheck", "dir", "state"], ["cut", "--target", "t"],
                 ["bench", "--target", "t", "--workload", "w"]):
        args = build_parser(argv).parse_args([*argv, "--kernel-release", NEW])
        assert args.kernel_release == NEW, argv


# --- the default ------------------------------------------------------------------


@needs_dpkg
def test_the_default_is_what_the_meta_package_depends_on_not_the_newest(tmp_path, caplog):
    root = fake_root(tmp_path, OLD, NEW, meta=OLD)
    with caplog.at_level(logging.INFO, logger=kernel_mod.__name__):
        spec = default_kernel(root)
    assert spec.release == OLD and spec.image == root / "boot" / f"vmlinuz-{OLD}"
    assert f"guest kernel {OLD}: the release linux-image-amd64 depends on" in caplog.messages
    assert kernel_spec(None, None, root=root) == spec


@needs_dpkg
def test_the_meta_package_release_without_modules_falls_back_to_the_newest(tmp_path, caplog):
    root = fake_root(tmp_path, OLD, NEW, meta="6.1.0-99-amd64")
    with caplog.at_level(logging.INFO, logger=kernel_mod.__name__):
        assert default_kernel(root).release == NEW
    assert caplog.messages == [f"guest kernel {NEW}: the newest installed kernel with modules "
                               "(linux-image-amd64 depends on 6.1.0-99-amd64, which is not "
                               "installed with modules)"]


def test_without_the_meta_package_the_newest_with_modules_is_the_default(tmp_path, caplog):
    root = fake_root(tmp_path, OLD, NEW, without_modules=(NEWER,))
    (root / "boot" / "vmlinuz-6.13.0-1-cloud-amd64").write_bytes(b"cloud")
    (root / "lib" / "modules" / "6.13.0-1-cloud-amd64").mkdir()
    (root / "lib" / "modules" / "6.13.0-1-cloud-amd64" / "modules.dep").write_text("")
    with caplog.at_level(logging.INFO, logger=kernel_mod.__name__):
        assert default_kernel(root).release == NEW
    assert caplog.messages == [f"guest kernel {NEW}: the newest installed kernel with modules "
                               "(linux-image-amd64 is not installed)"]


def test_no_kernel_with_modules_is_a_missing_prerequisite(tmp_path):
    with pytest.raises(MissingPrerequisite, match="no guest kernel: .* install linux-image-amd64"):
        choose_default(fake_root(tmp_path, without_modules=(OLD,)))


def test_installed_kernels_are_ordered_by_version_not_by_name(tmp_path):
    root = fake_root(tmp_path, NEW, OLD, "6.1.0-9-amd64", without_modules=(NEWER,))
    assert [(k.release, k.has_modules) for k in installed_kernels(root)] == [
        ("6.1.0-9-amd64", True), (OLD, True), (NEW, True), (NEWER, False)]


@pytest.mark.parametrize("depends, release", [
    ("linux-image-6.1.0-56-amd64 (= 6.1.192-2)", "6.1.0-56-amd64"),
    ("linux-image-6.12.107+deb12-amd64 (= 6.12.107-1~deb12u1)", "6.12.107+deb12-amd64"),
    ("firmware-linux-free, linux-image-6.1.0-56-amd64-unsigned | linux-image-6.1.0-56-amd64",
     "6.1.0-56-amd64"),
    ("", None),
])
def test_release_of_the_meta_package_depends(depends, release):
    assert release_of_depends(depends) == release


# --- the commands -----------------------------------------------------------------


@pytest.fixture
def on_fake_root(tmp_path, monkeypatch):
    """The CLI resolves kernels in a fake root holding OLD and NEW."""
    root = fake_root(tmp_path / "root", OLD, NEW)
    monkeypatch.setattr(cli_vm, "kernel_spec", functools.partial(kernel_spec, root=root))
    monkeypatch.setattr(cli_run, "kernel_spec", functools.partial(kernel_spec, root=root))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


STORE = ["--results", "r", "--db", "r/db.sqlite"]


@pytest.mark.parametrize("argv", [
    ["crash", "--target", "ext4/ordered", "--case", "hand:write-fsync-rename", *STORE],
    ["cut", "--target", "ext4/ordered", "--trials", "1", *STORE],
    ["bench", "--target", "ext4/ordered", "--workload", "fsmark", *STORE],
    ["run", "quick", *STORE],
    ["vm", "run", "--kernel-release", "6.12.9+deb12-amd64", "--", "true"],
])
def test_a_missing_release_fails_in_one_line_and_creates_nothing(argv, on_fake_root, capsys):
    if "--kernel-release" not in argv:
        argv = [*argv, "--kernel-release", "6.12.9+deb12-amd64"]
    assert main(argv) == 3
    err = capsys.readouterr().err.strip()
    assert err.startswith("powercut: missing prerequisite: kernel release 6.12.9+deb12-amd64 "
                          "is neither installed") and "\n" not in err
    assert f"available: {OLD}, {NEW};" in err
    assert list(on_fake_root.iterdir()) == []  # no run directory, no store


def test_the_chosen_release_reaches_the_guest_machine(on_fake_root):
    args = build_parser(["vm"]).parse_args(["vm", "run", "--kernel-release", NEW, "--", "uname", "-r"])
    with cli_vm.machine_from_args(args, rundir=on_fake_root / "rundir") as machine:
        assert machine.kernel.release == NEW
        assert machine.kernel.facts()["kernel"] == NEW


def test_a_study_passes_the_release_to_every_step():
    args = build_parser(["run"]).parse_args(["run", "--kernel-release", NEW])
    argv = cli_run.machine_argv(args)
    assert argv[argv.index("--kernel-release") + 1] == NEW


# --- doctor -----------------------------------------------------------------------


@needs_dpkg
def test_doctor_lists_the_kernels_the_default_and_how_to_add_one(tmp_path):
    root = fake_root(tmp_path, OLD, NEW, without_modules=(NEWER,), meta=OLD)
    checks = {c.name: c for c in doctor.check_installed_kernels(root)}
    assert list(checks) == [OLD, NEW, NEWER, "another"]
    assert checks[OLD].ok and "the default: the release linux-image-amd64 depends on" in checks[OLD].detail
    assert checks[NEW].ok and f"--kernel-release {NEW}" in checks[NEW].detail
    assert not checks[NEWER].ok and not checks[NEWER].required  # a warning, not a failure
    assert "no modules" in checks[NEWER].detail
    assert "'powercut kernels list'" in checks["another"].detail
    assert "'powercut kernels fetch newest'" in checks["another"].detail
    lines: list[str] = []
    doctor.render(list(checks.values()), echo=lines.append)
    assert lines[0] == "kernels:"
    assert any(line.startswith("  warn " + NEWER) for line in lines)


def test_doctor_says_when_there_is_no_kernel_to_boot(tmp_path):
    checks = {c.name: c for c in doctor.check_installed_kernels(tmp_path)}
    assert list(checks) == ["default", "another"]
    assert not checks["default"].ok and "linux-image-amd64" in checks["default"].fix


# --- a target the kernel lacks ------------------------------------------------------


def with_modules(work: Path) -> None:
    """The fake NEW gets the modules of every target but ReiserFS (as 7.x has them)."""
    names = ["ext4", "xfs", "btrfs", "f2fs", "jfs"]
    dep = work.parent / "root" / "lib" / "modules" / NEW / "modules.dep"
    dep.write_text("".join(f"kernel/fs/{n}/{n}.ko.xz:\n" for n in names))


@pytest.mark.parametrize("argv", [
    ["crash", "--target", "reiserfs", "--case", "gen:seq1", *STORE],
    ["cut", "--target", "reiserfs", "--trials", "1", *STORE],
    ["bench", "--target", "ext4/ordered,reiserfs", "--workload", "fsmark", *STORE],
    ["sweep", "--target", "reiserfs", *STORE],
])
def test_a_target_the_kernel_lacks_is_a_one_line_skip_that_creates_nothing(argv, on_fake_root,
                                                                           capsys):
    with_modules(on_fake_root)
    assert main([*argv, "--kernel-release", NEW]) == 77
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert err.startswith("powercut: skipped: target ")
    assert f"target reiserfs needs kernel module reiserfs (not in kernel {NEW})" in err
    assert list(on_fake_root.iterdir()) == []  # no run directory, no store


def test_a_skipped_crash_target_is_a_skipped_junit_case(on_fake_root, capsys):
    with_modules(on_fake_root)
    junit_file = on_fake_root / "j.xml"
    assert main(["crash", "--target", "reiserfs", "--case", "gen:seq1", "--kernel-release", NEW,
                 "--junit", str(junit_file), *STORE]) == 77
    text = junit_file.read_text()
    assert 'skipped="1"' in text or "<skipped" in text
    assert "needs kernel module reiserfs" in text


def test_doctor_says_which_targets_a_cached_kernel_cannot_run(tmp_path):
    from framework.core.machine.kernel import KERNEL_FILE

    cache = tmp_path / "cache"
    root = cache / "kernels" / "7.3.4+deb13-amd64" / "root"
    modules = root / "lib" / "modules" / "7.3.4+deb13-amd64"
    modules.mkdir(parents=True)
    (modules / "vmlinuz").write_bytes(b"k")
    (root.parent / KERNEL_FILE).write_text(
        '{"release": "7.3.4+deb13-amd64", "version": "7.3.4-1~bpo13+1", '
        '"suite": "trixie-backports", "image": "lib/modules/7.3.4+deb13-amd64/vmlinuz"}')
    fake = fake_root(tmp_path / "sys", OLD)
    seen: list[str] = []

    def lacking(spec):
        seen.append(spec.release)
        return {"reiserfs": ("kernel module reiserfs (not in kernel 7.3.4+deb13-amd64)",)} \
            if spec.release.startswith("7.") else {}

    checks = {c.name: c for c in doctor.check_installed_kernels(fake, cache, lacking)}
    assert seen == [OLD, "7.3.4+deb13-amd64"]
    assert checks[OLD].detail.endswith("runs every target")
    new = checks["7.3.4+deb13-amd64"]
    assert new.ok and "in the cache (7.3.4-1~bpo13+1 from trixie-backports)" in new.detail
    assert new.detail.endswith("cannot run reiserfs (kernel module reiserfs (not in kernel "
                               "7.3.4+deb13-amd64))")
