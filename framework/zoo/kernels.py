"""The zoo's kernels: the fixed one and one per entry, all from one configured tree.

Debian's ``linux-source-6.12`` (6.12.117) is unpacked once into a cache
outside the checkout and configured for powercut's guest (x86_64_defconfig,
the kernel's kvm_guest.config and ``guest.config`` beside this module:
virtio, 9p, the dm targets, every zoo filesystem built in). The fixed kernel
is built first; then each entry's revert is applied, the tree is rebuilt
(incrementally: only what the patch touches) and installed under its own
name, and the revert is taken back out, so the tree is always the fixed
6.12.117 between entries. A run that was interrupted with a revert still
applied is cleaned up first.

Each installed kernel is a directory ``kernels/NAME`` with ``bzImage``, its
``lib/modules/RELEASE`` (for ``--modules``) and ``build.json`` (release, the
patch's sha256, the configuration's, the build time), and is booted with
``powercut ... --kernel DIR/bzImage --modules DIR``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from framework.core import clock
from framework.core.command import run
from framework.core.errors import ConfigError, MissingPrerequisite
from framework.core.files import write_atomic
from framework.core.machine.initramfs import cache_dir
from framework.core.machine.kernel import source_tarball
from framework.zoo.entry import ZooEntry

log = logging.getLogger(__name__)

SOURCE_SERIES = "6.12"
SOURCE_PACKAGE = f"linux-source-{SOURCE_SERIES}"
FIXED = "fixed"
GUEST_CONFIG = Path(__file__).with_name("guest.config")
BUILD_FILE = "build.json"
#: In the tree: the entry whose revert is applied now (absent: none, the tree is fixed).
APPLIED = ".powercut-applied"
#: make -j: both cores; the build is the only work while it runs.
JOBS = os.cpu_count() or 2
BUILD_TIMEOUT_S = 4 * 3600.0


def zoo_cache(override: str | None = None) -> Path:
    """Where the tree and the kernels live: --cache, POWERCUT_ZOO_CACHE, or the cache dir."""
    chosen = override or os.environ.get("POWERCUT_ZOO_CACHE")
    return Path(chosen).resolve() if chosen else cache_dir() / "zoo"


@dataclass(frozen=True, slots=True)
class Kernel:
    """A kernel the zoo built and installed: boot it with --kernel image --modules modules."""

    name: str
    directory: Path
    release: str
    patch_sha256: str  # "" for the fixed kernel
    config_sha256: str
    build_s: float

    @property
    def image(self) -> Path:
        return self.directory / "bzImage"

    @property
    def modules(self) -> Path:
        return self.directory

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "release": self.release, "patch_sha256": self.patch_sha256,
                "config_sha256": self.config_sha256, "build_s": self.build_s}


def installed(cache: Path, name: str) -> Kernel | None:
    """The kernel ``name`` if it is built and installed in ``cache``."""
    directory = cache / "kernels" / name
    try:
        meta = json.loads((directory / BUILD_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not (directory / "bzImage").is_file():
        return None
    return Kernel(name, directory, str(meta["release"]), str(meta["patch_sha256"]),
                  str(meta["config_sha256"]), float(meta["build_s"]))


class KernelTree:
    """One configured linux-source-6.12 tree in the zoo cache."""

    def __init__(self, cache: Path, *, say: Callable[[str], None] = print) -> None:
        self.cache = cache
        self.tree = cache / "linux-6.12"
        self.say = say

    # -- the tree -------------------------------------------------------------

    def prepare(self, entries: Sequence[ZooEntry]) -> None:
        """Unpack (once), take out any revert an interrupted build left in, configure."""
        self.cache.mkdir(parents=True, exist_ok=True)
        if not (self.tree / "Makefile").is_file():
            tarball = source_tarball(SOURCE_SERIES)
            if tarball is None:
                raise MissingPrerequisite(
                    f"{SOURCE_PACKAGE} is missing: fetch it with 'powercut kernels source "
                    f"{SOURCE_SERIES}' or install the Debian package "
                    f"(apt-get install {SOURCE_PACKAGE} build-essential flex bison bc libelf-dev "
                    "libssl-dev)")
            self.say(f"zoo: unpacking {tarball} into {self.tree}")
            partial = self.cache / "unpacking"
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir()
            run(["tar", "-C", os.fspath(partial), "-xJf", os.fspath(tarball)],
                timeout_s=1800)
            (top,) = list(partial.iterdir())
            top.rename(self.tree)
            partial.rmdir()
        # A revert that applies backwards is not proof it is in: one that only removes
        # code applies backwards to the fixed tree too. The marker says which one is.
        left = self._applied()
        if left is not None:
            entry = next((e for e in entries if e.name == left), None)
            if entry is None:
                raise ConfigError(f"{self.tree}: entry {left!r} is still applied and is not "
                                  f"among the entries given; unpack the tree again")
            # Killed between the marker and the patch: it may not be in after all.
            if not self._applies(entry) and self._applies(entry, reverse=True):
                self.say(f"zoo: taking out {entry.name}, left in by an interrupted build")
                self._patch(entry, reverse=True)
            self._mark(None)
        self._configure()

    def _applied(self) -> str | None:
        marker = self.tree / APPLIED
        return marker.read_text().strip() or None if marker.is_file() else None

    def _mark(self, entry: ZooEntry | None) -> None:
        marker = self.tree / APPLIED
        if entry is None:
            marker.unlink(missing_ok=True)
        else:
            write_atomic(marker, entry.name)

    def _configure(self) -> None:
        want = self.config_sha256()
        stamp = self.tree / ".powercut-config"
        if stamp.is_file() and stamp.read_text() == want and (self.tree / ".config").is_file():
            return
        self.say("zoo: configuring the tree (x86_64_defconfig + kvm_guest.config + guest.config)")
        self._make("x86_64_defconfig")
        run([os.fspath(self.tree / "scripts/kconfig/merge_config.sh"), "-m", ".config",
             "kernel/configs/kvm_guest.config", os.fspath(GUEST_CONFIG)],
            cwd=self.tree, timeout_s=600)
        self._make("olddefconfig")
        config = (self.tree / ".config").read_text().splitlines()
        # merge_config warns and carries on when an option does not take: refuse instead.
        for line in GUEST_CONFIG.read_text().splitlines():
            if line.startswith("CONFIG_") and line.endswith("=y") and line not in config:
                raise ConfigError(f"{GUEST_CONFIG}: {line} did not take in the kernel's .config")
        write_atomic(stamp, want)

    @staticmethod
    def config_sha256() -> str:
        return hashlib.sha256(GUEST_CONFIG.read_bytes()).hexdigest()

    def _make(self, *targets: str, timeout_s: float = 600.0) -> None:
        run(["make", "-s", f"-j{JOBS}", *targets], cwd=self.tree, timeout_s=timeout_s)

    def _applies(self, entry: ZooEntry, *, reverse: bool = False) -> bool:
        argv = ["patch", "-p1", "--dry-run", "-s", "-f", "-i", os.fspath(entry.patch)]
        if reverse:
            argv.insert(2, "-R")
        return run(argv, cwd=self.tree, timeout_s=120, ok_status=None).status == 0

    def _patch(self, entry: ZooEntry, *, reverse: bool = False) -> None:
        argv = ["patch", "-p1", "-s", "-f", "-i", os.fspath(entry.patch)]
        if reverse:
            argv.insert(2, "-R")
        run(argv, cwd=self.tree, timeout_s=120)

    # -- building -----------------------------------------------------------

    def build(self, name: str, patch: ZooEntry | None = None, *, force: bool = False) -> Kernel:
        """Build the tree as it is (with ``patch`` applied for the time of the build) and
        install it as ``name``; an up-to-date installed kernel is kept unless ``force``."""
        have = installed(self.cache, name)
        sha = patch.patch_sha256 if patch is not None else ""
        if (have is not None and not force and have.patch_sha256 == sha
                and have.config_sha256 == self.config_sha256()):
            self.say(f"zoo: {name}: up to date ({have.release}, built in {have.build_s:.0f} s)")
            return have
        if patch is not None and not self._applies(patch):
            raise ConfigError(f"{patch.patch}: does not apply to {self.tree} "
                              f"(patch -p1 --dry-run fails)")
        start = clock.monotonic()
        self.say(f"zoo: building {name}" + (f" ({patch.fix[:12]} reverted)" if patch else ""))
        if patch is not None:
            self._mark(patch)  # before: a kill between the two leaves it marked, not lost
            self._patch(patch)
        try:
            self._make("bzImage", "modules", timeout_s=BUILD_TIMEOUT_S)
            release = run(["make", "-s", "kernelrelease"], cwd=self.tree,
                          timeout_s=120).stdout.strip()
            target = self.cache / "kernels" / name
            staging = target.with_name(f".{name}.tmp")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            run(["make", "-s", "modules_install", f"INSTALL_MOD_PATH={staging}"], cwd=self.tree,
                timeout_s=1800)
            shutil.copy(self.tree / "arch/x86/boot/bzImage", staging / "bzImage")
            shutil.copy(self.tree / ".config", staging / f"config-{release}")
        finally:
            if patch is not None:
                self._patch(patch, reverse=True)
                self._mark(None)
        kernel = Kernel(name, target, release, sha, self.config_sha256(),
                        clock.monotonic() - start)
        (staging / BUILD_FILE).write_text(json.dumps(kernel.to_dict(), indent=1))
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        self.say(f"zoo: {name}: {release} built and installed in {kernel.build_s:.0f} s: {target}")
        return kernel


def build_kernels(entries: Sequence[ZooEntry], cache: Path, *, force: bool = False,
                  say: Callable[[str], None] = print) -> list[Kernel]:
    """The fixed kernel, then one per entry, from one tree."""
    tree = KernelTree(cache, say=say)
    tree.prepare(entries)
    kernels = [tree.build(FIXED, force=force)]
    for entry in entries:
        kernels.append(tree.build(entry.name, entry, force=force))
    return kernels
