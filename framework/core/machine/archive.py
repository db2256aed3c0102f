"""Debian kernels and kernel sources from any suite of the archive, kept in a cache.

Debian publishes its newest kernels outside the stable release: 7.x builds in
``trixie-backports``, ``sid`` and ``experimental``. powercut reaches them
through an apt directory of its own in the cache (``apt/``: a sources list, the
package lists, the download cache, an empty dpkg status), handed to apt-get and
apt-cache with ``-c apt/apt.conf``. That file is read after the system's
configuration, so the system's proxy and date-check settings still apply, and
it points every list, cache and state directory into the cache: nothing under
/etc/apt, /var/lib/apt or /var/cache/apt is written, and the system's update
hooks are cleared for these calls (apt.conf(5), ``#clear``).

The sources list names the Debian mirror the system already uses (read from its
sources, deb822 or one-line), with the system's own Debian suites and
:data:`EXTRA_SUITES` on the main mirror.

A fetched kernel is the directory ``kernels/RELEASE`` of the kernel cache
(framework.core.machine.kernel), unpacked from its packages with dpkg-deb as
they would install: the split packages of 6.19 and later (``linux-binary-``,
``linux-modules-``, ``linux-base-``) put the image, config and modules under
``usr/lib/modules/RELEASE/``; the single ``linux-image-`` package of older
releases puts them in ``boot/`` and ``lib/modules/``. ``lib`` is made a link to
``usr/lib`` where only the latter exists, depmod writes modules.dep, and
``kernel.json`` (written last) says what it came from. A kernel source is
``sources/linux-source-SERIES_VERSION/`` with the tarball Debian ships.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from framework.core import clock
from framework.core.command import run
from framework.core.errors import CommandError, ConfigError, MissingPrerequisite
from framework.core.files import write_atomic
from framework.core.machine.kernel import (
    KERNEL_FILE,
    CachedKernel,
    cached_kernel,
    kernel_cache,
)

#: Where Debian publishes kernels newer than bookworm's, on the same mirror.
EXTRA_SUITES = ("trixie-backports", "sid", "experimental")
DEFAULT_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
#: Package lists older than this are fetched again before a list or a fetch.
LISTS_MAX_AGE_S = 6 * 3600.0
#: A generic kernel's image package: linux-image-RELEASE with RELEASE ending in -amd64
#: and no flavour (-cloud-, -rt-) in it.
_IMAGE = re.compile(r"^linux-image-(\d[^ ]*-amd64)$")
_FLAVOUR = re.compile(r"-(cloud|rt)-amd64$")
_SOURCE = re.compile(r"^linux-source-(\d+\.\d+)$")
#: The parts a split kernel is packaged in (Debian 6.19 and later), besides linux-image-.
_PARTS = ("linux-binary-", "linux-modules-", "linux-base-")
#: Suites of the system's own release (bookworm, bookworm-updates, bookworm-security ...).
_SUITE_SUFFIXES = ("", "-updates", "-security", "-backports", "-proposed-updates")


@dataclass(frozen=True, slots=True)
class AptSource:
    """One enabled ``deb`` source of the system: a mirror and the suites it serves."""

    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]
    signed_by: str = ""

    def lines(self) -> list[str]:
        key = f"[signed-by={self.signed_by}] " if self.signed_by else ""
        return [f"deb {key}{self.uri} {suite} {' '.join(self.components)}" for suite in self.suites]


@dataclass(frozen=True, slots=True)
class Offer:
    """A package version the archive offers, and the suite it comes from."""

    package: str
    version: str
    suite: str

    @property
    def release(self) -> str:
        """The kernel release (linux-image-7.3.4+deb13-amd64 -> 7.3.4+deb13-amd64) or, for a
        source package, its series (linux-source-7.3 -> 7.3)."""
        return self.package.removeprefix("linux-image-").removeprefix("linux-source-")


def _codename(os_release: Path) -> str:
    try:
        text = os_release.read_text()
    except OSError:
        return ""
    m = re.search(r"^VERSION_CODENAME=\"?([a-z]+)", text, re.M)
    return m.group(1) if m else ""


def system_sources(etc: Path = Path("/etc/apt"),
                   os_release: Path = Path("/etc/os-release")) -> list[AptSource]:
    """The system's enabled Debian sources of its own release (read only: nothing is written),
    from sources.list, sources.list.d/*.list (one-line format) and *.sources (deb822)."""
    from debian.deb822 import Deb822  # here: only the kernels command reads sources

    codename = _codename(os_release)
    ours = {codename + s for s in _SUITE_SUFFIXES} if codename else set()
    found: list[AptSource] = []
    one_line = [etc / "sources.list", *sorted((etc / "sources.list.d").glob("*.list"))]
    for path in one_line:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            source = _one_line(line)
            if source is not None:
                found.append(source)
    for path in sorted((etc / "sources.list.d").glob("*.sources")):
        try:
            text = path.read_text()
        except OSError:
            continue
        for para in Deb822.iter_paragraphs(text.splitlines()):
            if "deb" not in para.get("Types", "").split() or para.get("Enabled", "yes") == "no":
                continue
            key = para.get("Signed-By", "").strip()
            found += [AptSource(uri, tuple(para.get("Suites", "").split()),
                                tuple(para.get("Components", "").split()),
                                key if key.startswith("/") else "")
                      for uri in para.get("URIs", "").split()]
    return [s for s in found if "main" in s.components and s.suites
            and all(suite in ours for suite in s.suites)]


def _one_line(line: str) -> AptSource | None:
    """A one-line ``deb [options] URI SUITE COMPONENT...`` entry (sources.list(5))."""
    line = line.split("#", 1)[0].strip()
    m = re.match(r"^deb\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)\s+(.+)$", line)
    if m is None:
        return None
    options = dict(o.split("=", 1) for o in (m.group(1) or "").split() if "=" in o)
    return AptSource(m.group(2), (m.group(3),), tuple(m.group(4).split()),
                     options.get("signed-by", ""))


def archive_sources(system: Sequence[AptSource]) -> list[AptSource]:
    """The system's Debian sources and :data:`EXTRA_SUITES` on the mirror that serves its
    release (the source whose suites include the bare codename)."""
    main = next((s for s in system if any("-" not in suite for suite in s.suites)), None)
    if main is None:
        raise MissingPrerequisite(
            "no Debian mirror in the system's apt sources (/etc/apt/sources.list or "
            "sources.list.d/*.sources with the release's own suite and component main): "
            "powercut fetches kernels from the mirror the system uses")
    extra = AptSource(main.uri, EXTRA_SUITES, ("main",), main.signed_by or DEFAULT_KEYRING)
    return [*system, extra]


class Archive:
    """The Debian archive through powercut's own apt directory (see the module's doc)."""

    def __init__(self, cache: Path | None = None, sources: Sequence[AptSource] | None = None, *,
                 say: Callable[[str], None] = print) -> None:
        self.cache = cache or kernel_cache()
        self.apt = self.cache / "apt"
        self._sources = sources
        self.say = say

    # -- the private apt directory --------------------------------------------------

    @property
    def config(self) -> Path:
        return self.apt / "apt.conf"

    def _prepare(self) -> None:
        sources = self._sources if self._sources is not None else archive_sources(system_sources())
        for d in ("lists/partial", "cache/archives/partial", "sources.list.d", "preferences.d"):
            (self.apt / d).mkdir(parents=True, exist_ok=True)
        (self.apt / "status").touch()
        listing = "".join(line + "\n" for s in sources for line in s.lines())
        _write_if_changed(self.apt / "sources.list", listing)
        a = self.apt
        config = "\n".join([
            "// powercut's own apt directory: read after the system's configuration.",
            "#clear APT::Update::Pre-Invoke;",
            "#clear APT::Update::Post-Invoke;",
            "#clear APT::Update::Post-Invoke-Success;",
            'Acquire::IndexTargets::deb::DEP-11::DefaultEnabled "false";',
            'Acquire::Languages "none";',
            f'Dir::Etc::SourceList "{a / "sources.list"}";',
            f'Dir::Etc::SourceParts "{a / "sources.list.d"}";',
            f'Dir::Etc::Preferences "{a / "preferences"}";',
            f'Dir::Etc::PreferencesParts "{a / "preferences.d"}";',
            f'Dir::State::Lists "{a / "lists"}";',
            f'Dir::State::status "{a / "status"}";',
            f'Dir::Cache "{a / "cache"}";',
            # Downloads land in the cache, which apt's unprivileged _apt user may not reach.
            *(['APT::Sandbox::User "root";'] if os.geteuid() == 0 else []),
            "",
        ])
        _write_if_changed(self.config, config)

    def _apt(self, tool: str, *args: str, timeout_s: float = 600.0,
             cwd: Path | None = None) -> str:
        try:
            return run([tool, "-c", os.fspath(self.config), *args], timeout_s=timeout_s,
                       cwd=cwd).stdout
        except CommandError as exc:
            raise MissingPrerequisite(f"the Debian archive: {_apt_error(exc)}") from None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """One powercut process at a time in the apt directory and the kernel cache."""
        self.cache.mkdir(parents=True, exist_ok=True)
        with open(self.cache / ".archive.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _lists_age_s(self) -> float | None:
        stamp = self.apt / "lists" / ".powercut-updated"
        try:
            return clock.wall() - stamp.stat().st_mtime
        except OSError:
            return None

    def update(self, *, force: bool = False) -> None:
        """Fetch the package lists when they are older than LISTS_MAX_AGE_S (or ``force``)."""
        self._prepare()
        age = self._lists_age_s()
        if not force and age is not None and age < LISTS_MAX_AGE_S:
            return
        self.say("kernels: reading the archive's package lists "
                 f"({', '.join(_suites(self.apt / 'sources.list'))})")
        out = self._apt("apt-get", "-q", "update", timeout_s=900)
        failed = [ln for ln in out.splitlines() if ln.startswith(("Err:", "E:"))]
        if failed:
            raise MissingPrerequisite(f"the Debian archive: {failed[0]}")
        (self.apt / "lists" / ".powercut-updated").touch()

    # -- what the archive offers ---------------------------------------------------

    def offers(self) -> list[Offer]:
        """Every generic kernel and kernel source the archive offers, newest first."""
        with self._locked():
            self.update()
            found = self._apt("apt-cache", "search", "--names-only", r"^linux-(image|source)-[0-9]")
            names = [line.split(" - ", 1)[0].strip() for line in found.splitlines()]
            wanted = sorted(n for n in names
                            if (_IMAGE.match(n) or _SOURCE.match(n)) and not _FLAVOUR.search(n))
            if not wanted:
                return []
            out = self._apt("apt-cache", "madison", *wanted)
        return newest_first(parse_madison(out))

    def newest(self, spec: str) -> Offer:
        """The kernel image ``spec`` names: a release as is, ``newest``, or a version prefix
        (``7``, ``6.12``) for the newest release in that series."""
        offers = [o for o in self.offers() if o.package.startswith("linux-image-")]
        chosen = choose(offers, spec)
        if chosen is None:
            series = sorted({_series(o.release) for o in offers}, key=_version_key)
            raise MissingPrerequisite(
                f"kernel {spec!r}: the archive offers no such linux-image package (series "
                f"offered: {', '.join(series) or 'none'}; 'powercut kernels list' shows them)")
        return chosen

    # -- fetching ----------------------------------------------------------------

    def fetch_kernel(self, spec: str, *, force: bool = False) -> CachedKernel:
        """Fetch the kernel ``spec`` names (see newest()) into the kernel cache."""
        offer = self.newest(spec)
        with self._locked():
            have = cached_kernel(offer.release, self.cache)
            if have is not None and not force and have.version == offer.version:
                self.say(f"kernels: {offer.release} is in the cache ({have.directory})")
                return have
            packages = self._kernel_packages(offer)
            target = self.cache / "kernels" / offer.release
            staging = target.with_name(f".{offer.release}.partial")
            shutil.rmtree(staging, ignore_errors=True)
            debs = staging.with_name(f".{offer.release}.debs")
            shutil.rmtree(debs, ignore_errors=True)
            debs.mkdir(parents=True)
            try:
                files = self._download(packages, debs, what=f"{offer.release} ({offer.version}, "
                                                            f"{offer.suite})")
                root = staging / "root"
                root.mkdir(parents=True)
                for deb in files:
                    run(["dpkg-deb", "-x", os.fspath(deb), os.fspath(root)], timeout_s=600)
                kernel = _install(root, staging, offer, packages)
            finally:
                shutil.rmtree(debs, ignore_errors=True)
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)
        found = cached_kernel(offer.release, self.cache)
        assert found is not None, kernel
        self.say(f"kernels: {offer.release} fetched into {target}; boot it with "
                 f"--kernel-release {offer.release}")
        return found

    def _kernel_packages(self, offer: Offer) -> list[tuple[str, str]]:
        """The image package and, for a split kernel, its binary, modules and base parts."""
        shown = self._apt("apt-cache", "show", f"{offer.package}={offer.version}")
        depends = _field(shown, "Depends")
        parts = [(part + offer.release, offer.version) for part in _PARTS
                 if re.search(rf"(^|[ ,|]){re.escape(part + offer.release)}( |,|$)", depends)]
        return [(offer.package, offer.version), *parts]

    def _download(self, packages: Sequence[tuple[str, str]], into: Path, *, what: str) -> list[Path]:
        sizes = {}
        for name, version in packages:
            size = _field(self._apt("apt-cache", "show", f"{name}={version}"), "Size")
            sizes[name] = int(size) if size.isdigit() else 0
        total = sum(sizes.values())
        self.say(f"kernels: downloading {what}: {len(packages)} package(s), {total / 1e6:.0f} MB")
        for i, (name, version) in enumerate(packages, 1):
            start = clock.monotonic()
            self._apt("apt-get", "-q", "download", f"{name}={version}", cwd=into, timeout_s=3600)
            self.say(f"  [{i}/{len(packages)}] {name} {version}: {sizes[name] / 1e6:.1f} MB in "
                     f"{clock.monotonic() - start:.1f} s")
        files = sorted(into.glob("*.deb"))
        if len(files) != len(packages):
            raise MissingPrerequisite(f"the Debian archive: {len(files)} of {len(packages)} "
                                      f"packages of {what} arrived in {into}")
        return files

    def fetch_source(self, spec: str, *, force: bool = False) -> Path:
        """The tarball of ``linux-source-SERIES`` (``spec``: a series such as 7.3, or newest),
        the newest version the archive offers, unpacked from its package into the cache."""
        offers = [o for o in self.offers() if o.package.startswith("linux-source-")]
        chosen = choose(offers, spec)
        if chosen is None:
            raise MissingPrerequisite(
                f"kernel source {spec!r}: the archive offers no linux-source package of that "
                f"series (offered: {', '.join(sorted({o.release for o in offers}, key=_version_key)) or 'none'})")
        with self._locked():
            directory = self.cache / "sources" / f"{chosen.package}_{chosen.version}"
            tarball = directory / "usr" / "src" / f"{chosen.package}.tar.xz"
            if tarball.is_file() and not force:
                self.say(f"kernels: {chosen.package} {chosen.version} is in the cache ({tarball})")
                return tarball
            debs = directory.with_name(f".{directory.name}.debs")
            staging = directory.with_name(f".{directory.name}.partial")
            for d in (debs, staging):
                shutil.rmtree(d, ignore_errors=True)
            debs.mkdir(parents=True)
            try:
                (deb,) = self._download([(chosen.package, chosen.version)], debs,
                                        what=f"{chosen.package} {chosen.version} ({chosen.suite})")
                run(["dpkg-deb", "-x", os.fspath(deb), os.fspath(staging)], timeout_s=1800)
            finally:
                shutil.rmtree(debs, ignore_errors=True)
            if not (staging / "usr" / "src" / tarball.name).is_file():
                raise MissingPrerequisite(f"{chosen.package} {chosen.version}: the package holds "
                                          f"no usr/src/{tarball.name}")
            shutil.rmtree(directory, ignore_errors=True)
            staging.rename(directory)
        self.say(f"kernels: {chosen.package} {chosen.version}: {tarball}")
        return tarball


def _install(root: Path, staging: Path, offer: Offer,
             packages: Sequence[tuple[str, str]]) -> dict[str, object]:
    """Make an unpacked kernel bootable from the cache: lib/modules, modules.dep, kernel.json."""
    release = offer.release
    if not (root / "lib").exists() and (root / "usr" / "lib" / "modules" / release).is_dir():
        (root / "lib").symlink_to("usr/lib")
    modules = root / "lib" / "modules" / release
    image = next((p for p in (modules / "vmlinuz", root / "boot" / f"vmlinuz-{release}")
                  if p.is_file()), None)
    if image is None or not modules.is_dir():
        raise MissingPrerequisite(
            f"{offer.package} {offer.version}: no kernel image or modules in its packages "
            f"({', '.join(n for n, _ in packages)})")
    run(["depmod", "-b", os.fspath(root), release], timeout_s=600)
    meta: dict[str, object] = {
        "release": release, "version": offer.version, "suite": offer.suite,
        "packages": [f"{n}={v}" for n, v in packages],
        "image": os.fspath(image.relative_to(root)), "fetched": clock.timestamp(),
    }
    (staging / KERNEL_FILE).write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def parse_madison(text: str) -> list[Offer]:
    """``apt-cache madison`` lines: 'name | version | URI suite/component arch Packages'."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) != 3 or not cells[2].endswith("Packages"):
            continue
        where = cells[2].split()
        suite = where[1].split("/")[0] if len(where) > 1 else ""
        out.append(Offer(cells[0], cells[1], suite))
    return out


def newest_first(offers: Sequence[Offer]) -> list[Offer]:
    from debian.debian_support import Version

    unique = {(o.package, o.version, o.suite): o for o in offers}
    return sorted(unique.values(), key=lambda o: (Version(o.version), o.package), reverse=True)


def choose(offers: Sequence[Offer], spec: str) -> Offer | None:
    """The offer ``spec`` names among ``offers`` (newest first): an exact release (or
    series), ``newest``, or a version prefix (``7`` matches 7.3.4, not 70.1)."""
    if spec == "newest":
        return offers[0] if offers else None
    exact = [o for o in offers if o.release == spec]
    if exact:
        return exact[0]
    if re.fullmatch(r"\d+(\.\d+)*", spec):
        return next((o for o in offers if re.match(rf"{re.escape(spec)}(\.|-|\+|~|$)",
                                                   o.release)), None)
    return None


def _series(release: str) -> str:
    m = re.match(r"(\d+\.\d+)", release)
    return m.group(1) if m else release


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


def _field(control: str, name: str) -> str:
    """The first ``Name:`` field of apt-cache show's output."""
    m = re.search(rf"^{name}: (.*)$", control, re.M)
    return m.group(1).strip() if m else ""


def _suites(sources_list: Path) -> list[str]:
    try:
        lines = sources_list.read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        source = _one_line(line)
        if source is not None:
            out += [s for s in source.suites if s not in out]
    return out


def _apt_error(exc: CommandError) -> str:
    """apt's own first error line (E:, Err:, W: ... Failed) or the command's message."""
    result = exc.result
    text = (getattr(result, "stderr", "") or "") + "\n" + (getattr(result, "stdout", "") or "")
    for line in text.splitlines():
        if line.startswith(("E:", "Err:")):
            return line.strip()
    return str(exc)


def _write_if_changed(path: Path, text: str) -> None:
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    write_atomic(path, text)


def check_spec(spec: str) -> str:
    """A kernel spec as the command line gives it: refuses paths and package names."""
    if spec.startswith("linux-image-") or spec.startswith("linux-source-"):
        raise ConfigError(f"{spec}: give the release or series, not the package name "
                          f"({spec.removeprefix('linux-image-').removeprefix('linux-source-')})")
    if "/" in spec or not spec or spec != spec.strip():
        raise ConfigError(f"{spec!r}: expected a release (7.3.4+deb13-amd64), a series (7.3, 7) "
                          "or newest")
    return spec
