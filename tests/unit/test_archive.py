"""Kernels from Debian's archive: the system's sources read, apt kept to powercut's own
directory, offers ordered by Debian's version rules, a fetch unpacked into the cache and
found by --kernel-release (apt and dpkg-deb are stand-ins here; the integration test
fetches for real)."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest

from framework.cli import main
from framework.core.command import CommandResult
from framework.core.errors import CommandError, ConfigError, MissingPrerequisite
from framework.core.machine import archive
from framework.core.machine.archive import (
    EXTRA_SUITES,
    AptSource,
    Archive,
    Offer,
    archive_sources,
    check_spec,
    choose,
    newest_first,
    parse_madison,
    system_sources,
)
from framework.core.machine.kernel import (
    KernelSpec,
    cached_kernel,
    cached_kernels,
    release_kernel,
)

NEW = "7.3.4+deb13-amd64"

DEB822 = """\
Types: deb
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main

Types: deb
URIs: http://mirror.example/debian
Suites: bookworm-backports
Components: main
Enabled: no
"""


def etc_apt(tmp_path: Path) -> tuple[Path, Path]:
    etc = tmp_path / "etc" / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    (etc / "sources.list.d" / "debian.sources").write_text(DEB822)
    # Not Debian's release: another vendor's suites are left out.
    (etc / "sources.list.d" / "vendor.sources").write_text(
        "Types: deb\nURIs: https://vendor.example/node\nSuites: nodistro\nComponents: main\n")
    (etc / "sources.list.d" / "cloud.list").write_text(
        "deb https://vendor.example/apt cloud-sdk-bookworm main\n")
    (etc / "sources.list").write_text("# one-line format\n"
                                      "deb [arch=amd64] http://old.example/debian bookworm-updates main contrib\n"
                                      "deb-src http://old.example/debian bookworm main\n")
    os_release = tmp_path / "os-release"
    os_release.write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nVERSION_CODENAME=bookworm\n')
    return etc, os_release


def test_the_system_sources_of_its_own_release_are_read(tmp_path):
    etc, os_release = etc_apt(tmp_path)
    sources = system_sources(etc, os_release)
    assert [(s.uri, s.suites) for s in sources] == [
        ("http://old.example/debian", ("bookworm-updates",)),
        ("http://mirror.example/debian", ("bookworm", "bookworm-updates")),
        ("http://mirror.example/debian-security", ("bookworm-security",)),
    ]
    assert sources[1].signed_by == "/usr/share/keyrings/debian-archive-keyring.gpg"


def test_the_extra_suites_go_on_the_mirror_of_the_release(tmp_path):
    etc, os_release = etc_apt(tmp_path)
    sources = archive_sources(system_sources(etc, os_release))
    extra = sources[-1]
    assert extra.uri == "http://mirror.example/debian"
    assert extra.suites == EXTRA_SUITES == ("trixie-backports", "sid", "experimental")
    assert extra.lines()[0] == ("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
                                "http://mirror.example/debian trixie-backports main")


def test_no_debian_mirror_is_one_line_naming_what_was_looked_for(tmp_path):
    with pytest.raises(MissingPrerequisite) as info:
        archive_sources([AptSource("http://security.example/", ("bookworm-security",), ("main",))])
    assert "no Debian mirror in the system's apt sources" in str(info.value)
    assert "\n" not in str(info.value)


MADISON = """\
linux-image-7.3.4+deb13-amd64 | 7.3.4-1~bpo13+1 | http://m/debian trixie-backports/main amd64 Packages
linux-image-7.3-amd64 | 7.3~rc7-1~exp1 | http://m/debian experimental/main amd64 Packages
linux-image-7.2.13+deb14-amd64 |   7.2.13-1 | http://m/debian sid/main amd64 Packages
linux-image-6.12.117+deb12-amd64 | 6.12.117-1~deb12u1 | http://m/debian-security bookworm-security/main amd64 Packages
linux-image-6.1.0-56-amd64 | 6.1.192-2 | http://m/debian-security bookworm-security/main amd64 Packages
linux-source-7.3 | 7.3.4-1~bpo13+1 | http://m/debian trixie-backports/main Sources
linux-source-7.3 | 7.3.4-1~bpo13+1 | http://m/debian trixie-backports/main amd64 Packages
"""


def test_offers_are_ordered_by_debian_versions_newest_first():
    offers = newest_first(parse_madison(MADISON))
    assert [o.package for o in offers] == [
        "linux-source-7.3", "linux-image-7.3.4+deb13-amd64", "linux-image-7.3-amd64",
        "linux-image-7.2.13+deb14-amd64", "linux-image-6.12.117+deb12-amd64",
        "linux-image-6.1.0-56-amd64"]
    assert offers[1].suite == "trixie-backports" and offers[1].release == NEW
    assert offers[0].release == "7.3"  # a source package's series


@pytest.mark.parametrize("spec, release", [
    ("newest", NEW), ("7", NEW), ("7.3", NEW), ("7.2", "7.2.13+deb14-amd64"),
    ("6.12", "6.12.117+deb12-amd64"), ("6", "6.12.117+deb12-amd64"),
    ("6.1", "6.1.0-56-amd64"), ("7.3-amd64", "7.3-amd64"), ("70", None), ("6.13", None),
])
def test_a_spec_names_a_release_a_series_or_the_newest(spec, release):
    images = [o for o in newest_first(parse_madison(MADISON)) if o.package.startswith("linux-image-")]
    chosen = choose(images, spec)
    assert (chosen.release if chosen else None) == release


@pytest.mark.parametrize("bad", ["linux-image-7.3.4+deb13-amd64", "/boot/vmlinuz", "", " 7"])
def test_a_package_name_or_a_path_is_refused_in_one_line(bad):
    with pytest.raises(ConfigError) as info:
        check_spec(bad)
    assert "\n" not in str(info.value)


# --- a fetch, with apt and dpkg-deb standing in ----------------------------------------

SPLIT = {  # what the split packages of 6.19 and later hold
    f"linux-binary-{NEW}": [f"usr/lib/modules/{NEW}/vmlinuz"],
    f"linux-modules-{NEW}": [f"usr/lib/modules/{NEW}/kernel/fs/ext4/ext4.ko.xz",
                             f"usr/lib/modules/{NEW}/modules.order"],
    f"linux-base-{NEW}": [f"usr/lib/modules/{NEW}/config", f"usr/lib/modules/{NEW}/System.map"],
    f"linux-image-{NEW}": [],
}


class FakeApt:
    """apt-get, apt-cache, dpkg-deb and depmod as far as a fetch uses them."""

    def __init__(self, refuse: str = "") -> None:
        self.calls: list[tuple[str, ...]] = []
        self.refuse = refuse

    def __call__(self, argv, *, timeout_s=60.0, ok_status=(0,), cwd=None, **_):
        argv = tuple(str(a) for a in argv)
        self.calls.append(argv)
        out = ""
        if argv[0] in ("apt-get", "apt-cache"):
            assert argv[1] == "-c" and Path(argv[2]).is_file()  # always the private config
            verb = argv[3] if argv[3] != "-q" else argv[4]
            if verb == "search":
                out = "".join(f"{n} - Linux\n" for n in (
                    f"linux-image-{NEW}", "linux-image-7.3.4+deb13-cloud-amd64",
                    "linux-image-6.12.117+deb12-amd64"))
            elif verb == "madison":
                out = MADISON
            elif verb == "show":
                name = argv[4].split("=")[0]
                depends = ", ".join(f"{n} (= 7.3.4-1~bpo13+1)" for n in SPLIT if n != name)
                out = f"Package: {name}\nDepends: dracut | initramfs-tools, {depends}\nSize: 1000000\n\n"
            elif verb == "download":
                name, version = argv[-1].split("=")
                if name == self.refuse:
                    result = CommandResult(argv, 100, "", f"E: Can't find a source to download "
                                           f"version '{version}' of '{name}:amd64'\n", 0.1)
                    raise CommandError("command failed", result)
                (Path(cwd) / f"{name}_{version}_amd64.deb").write_text(name)
        elif argv[0] == "dpkg-deb":
            name = Path(argv[2]).read_text()
            for rel in SPLIT[name]:
                path = Path(argv[3]) / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(b"CONFIG_PCI_MSI=y\n" if rel.endswith("config") else b"x")
        elif argv[0] == "depmod":
            (Path(argv[2]) / "lib" / "modules" / argv[3] / "modules.dep").write_text(
                "kernel/fs/ext4/ext4.ko.xz:\n")
        return CommandResult(argv, 0, out, "", 0.0)


def fake_archive(tmp_path, monkeypatch, fake: FakeApt) -> Archive:
    monkeypatch.setattr(archive, "run", fake)
    sources = [AptSource("http://mirror.example/debian", ("bookworm",), ("main",))]
    return Archive(tmp_path / "cache", archive_sources(sources), say=lambda line: None)


def test_a_fetch_unpacks_the_split_packages_and_boots_from_the_cache(tmp_path, monkeypatch):
    fake = FakeApt()
    kernel = fake_archive(tmp_path, monkeypatch, fake).fetch_kernel("newest")
    assert kernel.release == NEW and kernel.suite == "trixie-backports"
    downloads = [c[-1] for c in fake.calls if "download" in c]
    assert downloads == [f"{n}=7.3.4-1~bpo13+1" for n in (
        f"linux-image-{NEW}", f"linux-binary-{NEW}", f"linux-modules-{NEW}", f"linux-base-{NEW}")]
    root = tmp_path / "cache" / "kernels" / NEW / "root"
    assert (root / "lib").is_symlink() and (root / "lib" / "modules" / NEW / "modules.dep").is_file()
    spec = release_kernel(NEW, root=tmp_path / "no-boot", cache=tmp_path / "cache")
    assert spec.image == root / "lib" / "modules" / NEW / "vmlinuz"
    assert spec.config_path() == root / "lib" / "modules" / NEW / "config"
    assert spec.has_msi()
    assert [k.release for k in cached_kernels(tmp_path / "cache")] == [NEW]
    # The private configuration keeps every list and cache in powercut's directory and
    # clears the system's update hooks.
    config = (tmp_path / "cache" / "apt" / "apt.conf").read_text()
    assert f'Dir::State::Lists "{tmp_path / "cache" / "apt" / "lists"}";' in config
    assert f'Dir::Cache "{tmp_path / "cache" / "apt" / "cache"}";' in config
    assert "#clear APT::Update::Post-Invoke-Success;" in config
    listing = (tmp_path / "cache" / "apt" / "sources.list").read_text()
    assert "http://mirror.example/debian sid main" in listing
    # No staging directories are left behind.
    assert sorted(p.name for p in (tmp_path / "cache" / "kernels").iterdir()) == [NEW]


def test_a_second_fetch_downloads_nothing_and_fresh_lists_are_not_read_again(tmp_path, monkeypatch):
    fake = FakeApt()
    archive_ = fake_archive(tmp_path, monkeypatch, fake)
    archive_.fetch_kernel(NEW)
    fake.calls.clear()
    archive_.fetch_kernel("7.3")
    assert not [c for c in fake.calls if "download" in c or "update" in c]


def test_a_refused_package_is_one_line_naming_it_and_leaves_no_kernel(tmp_path, monkeypatch):
    fake = FakeApt(refuse=f"linux-modules-{NEW}")
    with pytest.raises(MissingPrerequisite) as info:
        fake_archive(tmp_path, monkeypatch, fake).fetch_kernel(NEW)
    msg = str(info.value)
    assert "\n" not in msg and f"'linux-modules-{NEW}:amd64'" in msg
    assert msg.startswith("the Debian archive: E: Can't find a source to download")
    assert cached_kernel(NEW, tmp_path / "cache") is None
    assert not list((tmp_path / "cache" / "kernels").iterdir())


def test_an_unknown_series_names_the_series_offered(tmp_path, monkeypatch):
    with pytest.raises(MissingPrerequisite) as info:
        fake_archive(tmp_path, monkeypatch, FakeApt()).fetch_kernel("5.10")
    assert "series offered: 6.1, 6.12, 7.2, 7.3" in str(info.value)


def test_an_installed_release_comes_before_the_cache(tmp_path, monkeypatch):
    fake_archive(tmp_path, monkeypatch, FakeApt()).fetch_kernel(NEW)
    root = tmp_path / "sys"
    (root / "boot").mkdir(parents=True)
    (root / "boot" / f"vmlinuz-{NEW}").write_bytes(b"k")
    (root / "lib" / "modules" / NEW).mkdir(parents=True)
    (root / "lib" / "modules" / NEW / "modules.dep").write_text("")
    spec = release_kernel(NEW, root=root, cache=tmp_path / "cache")
    assert spec == KernelSpec(root / "boot" / f"vmlinuz-{NEW}", NEW, root)


def test_a_kernel_directory_without_its_record_is_no_kernel(tmp_path, monkeypatch):
    fake_archive(tmp_path, monkeypatch, FakeApt()).fetch_kernel(NEW)
    record = tmp_path / "cache" / "kernels" / NEW / "kernel.json"
    meta = json.loads(record.read_text())
    assert meta["packages"][0] == f"linux-image-{NEW}=7.3.4-1~bpo13+1"
    record.unlink()  # a fetch killed before its last step
    assert cached_kernel(NEW, tmp_path / "cache") is None
    with pytest.raises(MissingPrerequisite, match="nor in the kernel cache"):
        release_kernel(NEW, root=tmp_path / "none", cache=tmp_path / "cache")


def test_kernels_list_cached_reads_no_package_lists(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    fake_archive(tmp_path, monkeypatch, FakeApt()).fetch_kernel(NEW)
    monkeypatch.setenv("POWERCUT_KERNEL_CACHE", str(cache))
    monkeypatch.setattr(archive, "run", lambda *a, **k: pytest.fail("apt was run"))
    assert main(["kernels", "list", "--cached"]) == 0
    out = capsys.readouterr().out
    assert f"{NEW} (7.3.4-1~bpo13+1, trixie-backports)" in out


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="needs Debian's dpkg")
def test_the_version_order_is_debians(tmp_path):
    """python-debian's order agrees with dpkg's own on the versions the archive mixes."""
    import subprocess

    offers = [Offer("p", v, "s") for v in ("7.3~rc7-1~exp1", "7.3.4-1~bpo13+1", "7.3-1",
                                           "7.2.13-1", "6.12.117-1~deb12u1")]
    ordered = [o.version for o in newest_first(offers)]
    for newer, older in itertools.pairwise(ordered):
        assert subprocess.run(["dpkg", "--compare-versions", newer, "gt", older]).returncode == 0
