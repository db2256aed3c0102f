"""Kernels built from a Debian kernel source, each with at most one patch applied.

Debian's ``linux-source-SERIES`` (installed in /usr/src, or fetched into the
kernel cache with ``powercut kernels source SERIES``) is unpacked once into a
cache and configured for powercut's guest: x86_64_defconfig, the kernel's
kvm_guest.config and ``guest.config`` beside this module (virtio, 9p, the dm
targets, the filesystems built in). A build applies its patch (a fix under
test, or the revert of one), builds incrementally (after the first build, only
what the patch touches), installs the result under its own name and takes the
patch back out, so the tree is the unpatched source between builds. A build
that was killed with a patch still applied is cleaned up first.

Each installed kernel is a directory ``NAME`` under the kernels directory with
``bzImage``, its ``lib/modules/RELEASE`` (for ``--modules``), its config, and
``build.json`` (release, the patch's sha256, the configuration's, the build
time); it boots with ``--kernel DIR/bzImage --modules DIR``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from framework.core import clock
from framework.core.command import CommandResult, run
from framework.core.errors import CommandError, ConfigError, MissingPrerequisite
from framework.core.files import write_atomic
from framework.core.machine.kernel import KernelSpec, source_tarball

log = logging.getLogger(__name__)

GUEST_CONFIG = Path(__file__).with_name("guest.config")
BUILD_FILE = "build.json"
#: In the tree: the patch applied now (absent: none, the tree is the unpatched source).
APPLIED = ".powercut-applied"
#: make -j: both cores; the build is the only work while it runs.
JOBS = os.cpu_count() or 2
BUILD_TIMEOUT_S = 4 * 3600.0
#: How often a build says how far it got (a first build runs for about 35 minutes).
PROGRESS_EVERY_S = 60.0
#: In the tree: how many object files its last whole build made (a later build's "of about").
OBJECTS = ".powercut-objects"
#: What a kernel build needs besides make and gcc (Debian packages, by a program or header).
BUILD_TOOLS = (("flex", "flex"), ("bison", "bison"), ("bc", "bc"),
               ("/usr/include/libelf.h", "libelf-dev"), ("/usr/include/openssl/ssl.h", "libssl-dev"))


@dataclass(frozen=True, slots=True)
class Patch:
    """A patch a build applies with ``patch -p1``: a fix under test, or a fix's revert."""

    name: str  # what the build is called by in the tree's marker and in messages
    path: Path
    label: str = ""  # a few words for the build's progress line

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


@dataclass(frozen=True, slots=True)
class BuiltKernel:
    """A kernel built and installed from a source tree."""

    name: str
    directory: Path
    release: str
    patch_sha256: str  # "" for the unpatched source
    config_sha256: str
    build_s: float

    @property
    def image(self) -> Path:
        return self.directory / "bzImage"

    @property
    def modules(self) -> Path:
        return self.directory

    def spec(self) -> KernelSpec:
        return KernelSpec(image=self.image, release=self.release, modules_root=self.directory)

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "release": self.release, "patch_sha256": self.patch_sha256,
                "config_sha256": self.config_sha256, "build_s": self.build_s}


def count_objects(tree: Path, since: float) -> int:
    """The object files (``*.o``) under ``tree`` written at or after ``since`` (epoch s)."""
    count = 0
    for directory, _dirs, files in os.walk(tree):
        for file in files:
            if file.endswith(".o"):
                try:
                    if os.stat(os.path.join(directory, file)).st_mtime >= since:
                        count += 1
                except OSError:
                    continue  # removed by make since the listing
    return count


def built(kernels: Path, name: str) -> BuiltKernel | None:
    """The kernel ``name`` if it is built and installed under ``kernels``."""
    directory = kernels / name
    try:
        meta = json.loads((directory / BUILD_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not (directory / "bzImage").is_file():
        return None
    return BuiltKernel(name, directory, str(meta["release"]), str(meta["patch_sha256"]),
                       str(meta["config_sha256"]), float(meta["build_s"]))


def config_sha256() -> str:
    return hashlib.sha256(GUEST_CONFIG.read_bytes()).hexdigest()


def missing_build_tools() -> list[str]:
    """The Debian packages a kernel build needs that are not installed."""
    missing = []
    for what, package in (("make", "make"), ("gcc", "gcc"), *BUILD_TOOLS):
        present = Path(what).is_file() if what.startswith("/") else shutil.which(what)
        if not present:
            missing.append(package)
    return missing


def first_error(text: str) -> str:
    """The first line a compiler, the linker or make calls an error, else the last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for line in lines:
        if re.search(r"(^|: )(fatal )?error:|\*\*\* ", line):
            return line
    return lines[-1] if lines else "no output"


class SourceTree:
    """One configured tree of linux-source-SERIES in ``cache``; kernels go to ``kernels``."""

    def __init__(self, series: str, cache: Path, *, kernels: Path | None = None,
                 say: Callable[[str], None] = print, prefix: str = "build",
                 tarball: Path | None = None) -> None:
        self.series = series
        self.cache = cache
        self.tree = cache / f"linux-{series}"
        self.kernels = kernels or cache / "kernels"
        self.say = say
        self.prefix = prefix  # the first word of every progress line
        self._tarball = tarball

    @property
    def package(self) -> str:
        return f"linux-source-{self.series}"

    # -- the tree ---------------------------------------------------------------

    def prepare(self, patches: Sequence[Patch] = ()) -> None:
        """Unpack (once), take out a patch an interrupted build left in, configure."""
        self.cache.mkdir(parents=True, exist_ok=True)
        if not (self.tree / "Makefile").is_file():
            tarball = self._tarball or source_tarball(self.series)
            if tarball is None:
                raise MissingPrerequisite(
                    f"{self.package} is missing: fetch it with 'powercut kernels source "
                    f"{self.series}' (or apt-get install {self.package})")
            self.say(f"{self.prefix}: unpacking {tarball} into {self.tree}")
            partial = self.cache / "unpacking"
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir()
            run(["tar", "-C", os.fspath(partial), "-xJf", os.fspath(tarball)], timeout_s=1800)
            (top,) = list(partial.iterdir())
            top.rename(self.tree)
            partial.rmdir()
        # A patch that applies backwards is not proof it is in: one that only removes code
        # applies backwards to the unpatched tree too. The marker says which one is.
        left = self._applied()
        if left is not None:
            patch = next((p for p in patches if p.name == left), None)
            if patch is None:
                raise ConfigError(f"{self.tree}: {left!r} is still applied and is not among the "
                                  "patches given; unpack the tree again")
            # Killed between the marker and the patch: it may not be in after all.
            if not self._applies(patch) and self._applies(patch, reverse=True):
                self.say(f"{self.prefix}: taking out {patch.name}, left in by an interrupted build")
                self._patch(patch, reverse=True)
            self._mark(None)
        self._configure()

    def _applied(self) -> str | None:
        marker = self.tree / APPLIED
        return marker.read_text().strip() or None if marker.is_file() else None

    def _mark(self, patch: Patch | None) -> None:
        marker = self.tree / APPLIED
        if patch is None:
            marker.unlink(missing_ok=True)
        else:
            write_atomic(marker, patch.name)

    def _configure(self) -> None:
        want = config_sha256()
        stamp = self.tree / ".powercut-config"
        if stamp.is_file() and stamp.read_text() == want and (self.tree / ".config").is_file():
            return
        self.say(f"{self.prefix}: configuring {self.tree} (x86_64_defconfig + kvm_guest.config + "
                 "guest.config)")
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

    def local_version(self, name: str) -> str:
        """The build's LOCALVERSION: its name without the series, so that every build of one
        source reports a release of its own (``uname -r``: 7.3.4-unpatched, 7.3.4-fix-0123...):
        runs on two builds of 7.3.4 are told apart by the kernel they say they ran on."""
        tag = name.removeprefix(f"{self.series}-")
        return "-" + (re.sub(r"[^A-Za-z0-9._+-]", "-", tag) or "build")

    def _make(self, *targets: str, timeout_s: float = 600.0, local: str = "") -> None:
        extra = [f"LOCALVERSION={local}"] if local else []
        try:
            run(["make", "-s", f"-j{JOBS}", *extra, *targets], cwd=self.tree,
                timeout_s=timeout_s)
        except CommandError as exc:
            result = exc.result
            text = (getattr(result, "stderr", "") or "") + "\n" + (getattr(result, "stdout", "") or "")
            raise CommandError(f"{self.tree}: make {' '.join(targets)} failed: "
                               f"{first_error(text)}", result) from None

    @contextmanager
    def _progress(self, name: str, every_s: float | None = None) -> Iterator[None]:
        """While make runs: every ``every_s`` seconds, how many object files it has written
        so far and for how long, against the count of the tree's last whole build when there
        was one. The count is kept in the tree for the next build."""
        every_s = PROGRESS_EVERY_S if every_s is None else every_s
        since = time.time()
        stamp = self.tree / OBJECTS
        try:
            whole = int(stamp.read_text()) if stamp.is_file() else 0
        except ValueError:
            whole = 0
        stop = threading.Event()

        def report() -> None:
            while not stop.wait(every_s):
                done = count_objects(self.tree, since)
                of = f" of about {whole:,}" if whole else ""
                self.say(f"{self.prefix}: {name}: {done:,}{of} object files compiled, "
                         f"{(time.time() - since) / 60:.0f} min")

        reporter = threading.Thread(target=report, name="build-progress", daemon=True)
        reporter.start()
        try:
            yield
        finally:
            stop.set()
            reporter.join()
        write_atomic(stamp, str(count_objects(self.tree, 0.0)))

    def _applies(self, patch: Patch, *, reverse: bool = False) -> bool:
        return self._dry_run(patch, reverse=reverse).status == 0

    def _dry_run(self, patch: Patch, *, reverse: bool = False) -> CommandResult:
        argv = ["patch", "-p1", "--dry-run", "-f", "-i", os.fspath(patch.path)]
        if reverse:
            argv.insert(2, "-R")
        return run(argv, cwd=self.tree, timeout_s=120, ok_status=None)

    def check_applies(self, patch: Patch) -> None:
        """A one-line ConfigError naming the patch and patch's first complaint unless it
        applies to the tree as it is."""
        dry = self._dry_run(patch)
        if dry.status == 0:
            return
        text = dry.stdout + "\n" + dry.stderr
        why = next((ln.strip() for ln in text.splitlines()
                    if re.search(r"FAILED|malformed|Only garbage|can't find file|No file to "
                                 r"patch|Reversed", ln)), first_error(text))
        raise ConfigError(f"{patch.path}: does not apply to {self.package} ({self.tree}): {why}")

    def _patch(self, patch: Patch, *, reverse: bool = False) -> None:
        argv = ["patch", "-p1", "-s", "-f", "-i", os.fspath(patch.path)]
        if reverse:
            argv.insert(2, "-R")
        run(argv, cwd=self.tree, timeout_s=120)

    # -- building ---------------------------------------------------------------

    def build(self, name: str, patch: Patch | None = None, *, force: bool = False) -> BuiltKernel:
        """Build the tree (with ``patch`` applied for the time of the build) and install it as
        ``name``; an up-to-date installed kernel is kept unless ``force``."""
        have = built(self.kernels, name)
        sha = patch.sha256 if patch is not None else ""
        local = self.local_version(name)
        if (have is not None and not force and have.patch_sha256 == sha
                and have.config_sha256 == config_sha256() and have.release.endswith(local)):
            self.say(f"{self.prefix}: {name}: up to date ({have.release}, built in "
                     f"{have.build_s:.0f} s)")
            return have
        if patch is not None:
            self.check_applies(patch)
        missing = missing_build_tools()
        if missing:
            raise MissingPrerequisite(f"a kernel build needs Debian packages {', '.join(missing)} "
                                      f"(apt-get install {' '.join(missing)})")
        start = clock.monotonic()
        self.say(f"{self.prefix}: building {name}" + (f" ({patch.label or patch.path.name})"
                                                      if patch else ""))
        if patch is not None:
            self._mark(patch)  # before: a kill between the two leaves it marked, not lost
            self._patch(patch)
        target = self.kernels / name
        staging = target.with_name(f".{name}.tmp")
        try:
            with self._progress(name):
                self._make("bzImage", "modules", timeout_s=BUILD_TIMEOUT_S, local=local)
            release = run(["make", "-s", f"LOCALVERSION={local}", "kernelrelease"],
                          cwd=self.tree, timeout_s=120).stdout.strip()
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            run(["make", "-s", f"LOCALVERSION={local}", "modules_install",
                 f"INSTALL_MOD_PATH={staging}"], cwd=self.tree, timeout_s=1800)
            shutil.copy(self.tree / "arch/x86/boot/bzImage", staging / "bzImage")
            shutil.copy(self.tree / ".config", staging / f"config-{release}")
        finally:
            if patch is not None:
                self._patch(patch, reverse=True)
                self._mark(None)
        kernel = BuiltKernel(name, target, release, sha, config_sha256(),
                             clock.monotonic() - start)
        (staging / BUILD_FILE).write_text(json.dumps(kernel.to_dict(), indent=1))
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        self.say(f"{self.prefix}: {name}: {release} built and installed in {kernel.build_s:.0f} s: "
                 f"{target}")
        return kernel
