"""Which kernel a guest boots: the installed Debian kernel or one under test."""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import lzma
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from framework.core import command
from framework.core.errors import ConfigError, MissingPrerequisite
from framework.core.files import write_atomic
from framework.core.machine.initramfs import cache_dir

log = logging.getLogger(__name__)

# Kernels whose name says they are not the generic Debian build.
_SKIP = re.compile(r"-(rt|cloud)-")


@dataclass(frozen=True, slots=True)
class KernelSpec:
    image: Path
    release: str
    modules_root: Path  # holds lib/modules/<release>

    @property
    def modules_dir(self) -> Path:
        return self.modules_root / "lib" / "modules" / self.release

    def config_path(self) -> Path | None:
        """The kernel's .config: Debian's /boot/config-RELEASE, or one beside a built image."""
        for path in (self.image.parent / f"config-{self.release}", self.image.parent / ".config",
                     self.modules_root / "boot" / f"config-{self.release}",
                     self.modules_dir / "config",
                     self.modules_dir / "build" / ".config",
                     Path("/boot") / f"config-{self.release}"):
            if path.is_file():
                return path
        return None

    def config_has(self, symbol: str) -> bool:
        """Whether the kernel's .config sets ``CONFIG_<symbol>=y``; False when no .config is
        found (a bare bzImage): what the config does not say is not assumed."""
        config = self.config_path()
        if config is None:
            return False
        st = config.stat()
        return f"CONFIG_{symbol}" in _built_in(config, st.st_mtime_ns, st.st_size)

    def has_msi(self) -> bool:
        """Whether the kernel's config has CONFIG_PCI_MSI=y, so that its guests leave PCI
        interrupt routing out (qemu.py's acpi=noirq) and its virtio devices use MSI-X."""
        return self.config_has("PCI_MSI")

    def loads_unsigned_modules(self) -> bool:
        """Whether the kernel loads a module without a signature (and taints itself 'E'):
        its config is found and neither enforces signatures (CONFIG_MODULE_SIG_FORCE) nor
        forces a lockdown that does (kernel/module/signing.c, module_sig_check())."""
        if self.config_path() is None:
            return False
        return not any(self.config_has(s) for s in (
            "MODULE_SIG_FORCE", "LOCK_DOWN_KERNEL_FORCE_INTEGRITY",
            "LOCK_DOWN_KERNEL_FORCE_CONFIDENTIALITY"))

    def facts(self) -> dict[str, str]:
        """What a run records about its kernel: release, image and config hash."""
        config = self.config_path()
        digest = hashlib.sha256(config.read_bytes()).hexdigest()[:16] if config else "unknown"
        return {"kernel": self.release, "kernel_image": os.fspath(self.image),
                "kernel_config_sha256": digest}


@functools.lru_cache(maxsize=8)
def _built_in(config: Path, mtime_ns: int, size: int) -> frozenset[str]:
    """The symbols a .config sets to y (cached per file version: every boot asks)."""
    return frozenset(m.group(1) for m in _BUILT_IN.finditer(config.read_text(errors="replace")))


_BUILT_IN = re.compile(r"^(CONFIG_\w+)=y$", re.MULTILINE)


def bzimage_release(image: Path) -> str:
    """The release string from a bzImage's setup header (boot protocol >= 2.00)."""
    try:
        with open(image, "rb") as f:
            head = f.read(0x10000)
    except FileNotFoundError:
        raise MissingPrerequisite(f"{image}: kernel image not found") from None
    except IsADirectoryError:
        raise MissingPrerequisite(f"{image}: is a directory, not a kernel image") from None
    if len(head) < 0x210 or head[0x202:0x206] != b"HdrS":
        raise MissingPrerequisite(f"{image}: not an x86 bzImage (no 'HdrS' setup header)")
    ptr = int.from_bytes(head[0x20E:0x210], "little")
    start = ptr + 0x200
    if ptr == 0 or start >= len(head):
        raise MissingPrerequisite(f"{image}: bzImage has no kernel version string")
    raw = head[start : head.index(b"\0", start)].decode("ascii", "replace")
    return raw.split()[0]


# Debian's meta-package for the generic kernel: it depends on the one release
# the distribution currently ships, so it is the stable default. Merely
# installing another kernel (say a 6.12 next to 6.1) must not change it.
META_PACKAGE = "linux-image-amd64"


@dataclass(frozen=True, slots=True)
class InstalledKernel:
    """A kernel image in ROOT/boot and whether ROOT/lib/modules has its modules."""
    release: str
    image: Path
    has_modules: bool


@dataclass(frozen=True, slots=True)
class DefaultChoice:
    """The default guest kernel and the rule that chose it."""
    spec: KernelSpec
    reason: str


def installed_kernels(root: Path = Path("/")) -> list[InstalledKernel]:
    """Every ROOT/boot/vmlinuz-RELEASE, oldest first."""
    found = []
    for image in (root / "boot").glob("vmlinuz-*"):
        release = image.name.removeprefix("vmlinuz-")
        has_modules = (root / "lib" / "modules" / release / "modules.dep").exists()
        found.append(InstalledKernel(release, image, has_modules))
    return sorted(found, key=lambda k: (_version_key(k.release), k.release))


def meta_package_release(root: Path = Path("/")) -> str | None:
    """The release linux-image-amd64 depends on, from ROOT's dpkg database (None: not installed)."""
    admindir = root / "var" / "lib" / "dpkg"
    try:
        result = command.run(["dpkg-query", f"--admindir={os.fspath(admindir)}", "-W",
                              "-f=${Depends}", META_PACKAGE], timeout_s=30, ok_status=None)
    except MissingPrerequisite:  # no dpkg: not a Debian host
        return None
    if not result.ok:
        return None
    return release_of_depends(result.stdout)


def release_of_depends(depends: str) -> str | None:
    """'linux-image-6.1.0-56-amd64 (= 6.1.192-2)' -> '6.1.0-56-amd64'."""
    for clause in depends.split(","):
        for alternative in clause.split("|"):
            name = alternative.strip().split(" ")[0].split(":")[0]
            if name.startswith("linux-image-") and not name.endswith("-unsigned"):
                return name.removeprefix("linux-image-")
    return None


def _spec(kernel: InstalledKernel, root: Path) -> KernelSpec:
    return KernelSpec(image=kernel.image, release=kernel.release, modules_root=root)


def choose_default(root: Path = Path("/")) -> DefaultChoice:
    """The release linux-image-amd64 depends on if installed with modules, else the newest with modules."""
    usable = [k for k in installed_kernels(root) if k.has_modules]
    meta = meta_package_release(root)
    if meta is not None:
        for k in usable:
            if k.release == meta:
                return DefaultChoice(_spec(k, root), f"the release {META_PACKAGE} depends on")
    generic = [k for k in usable if not _SKIP.search(k.release)]
    if not generic:
        raise MissingPrerequisite(
            f"no guest kernel: {root / 'boot'} has no vmlinuz-* with modules; "
            f"install {META_PACKAGE} (make setup)"
        )
    why = (f"{META_PACKAGE} is not installed" if meta is None
           else f"{META_PACKAGE} depends on {meta}, which is not installed with modules")
    return DefaultChoice(_spec(generic[-1], root), f"the newest installed kernel with modules ({why})")


def default_kernel(root: Path = Path("/")) -> KernelSpec:
    """The default guest kernel (see ``choose_default``), with the rule logged."""
    choice = choose_default(root)
    log.info("guest kernel %s: %s", choice.spec.release, choice.reason)
    return choice.spec


def release_kernel(release: str, root: Path = Path("/"), cache: Path | None = None) -> KernelSpec:
    """A Debian kernel by release: ROOT/boot/vmlinuz-RELEASE with ROOT/lib/modules/RELEASE, or
    one fetched into the kernel cache (``powercut kernels fetch``)."""
    if "/" in release:
        raise ConfigError(f"--kernel-release {release}: expected a release such as "
                          "6.12.107+deb12-amd64 (what follows vmlinuz-), not a path")
    if not release or release != release.strip():
        raise ConfigError(f"--kernel-release {release!r}: expected a release such as 6.12.107+deb12-amd64")
    if release.startswith("linux-image-"):
        raise ConfigError(f"--kernel-release {release}: give the release, not the package name "
                          f"(--kernel-release {release.removeprefix('linux-image-')})")
    installed = installed_kernels(root)
    match = next((k for k in installed if k.release == release), None)
    if match is not None and match.has_modules:
        return _spec(match, root)
    fetched = cached_kernel(release, cache)
    if fetched is not None:
        return fetched.spec()
    listed = ", ".join([*(k.release + ("" if k.has_modules else " (no modules)") for k in installed),
                        *(f"{k.release} (cache)" for k in cached_kernels(cache))]) or "none"
    if match is not None:
        dep = root / "lib" / "modules" / release / "modules.dep"
        raise MissingPrerequisite(f"kernel release {release} has no modules (no {dep}); available: "
                                  f"{listed}; fetch it into the cache with 'powercut kernels fetch "
                                  f"{release}'")
    raise MissingPrerequisite(f"kernel release {release} is neither installed (no "
                              f"{root / 'boot' / f'vmlinuz-{release}'}) nor in the kernel cache "
                              f"({kernel_cache(cache) / 'kernels'}); available: {listed}; fetch it "
                              f"with 'powercut kernels fetch {release}' ('powercut kernels list' "
                              "shows what the archive offers)")


# --- the kernel cache --------------------------------------------------------------

#: In a fetched kernel's directory: what it was fetched from; written last, so a directory
#: without it is no kernel (framework.core.machine.archive fills the cache).
KERNEL_FILE = "kernel.json"


def kernel_cache(override: Path | None = None) -> Path:
    """Where fetched kernels, kernel sources and powercut's apt directory live:
    POWERCUT_KERNEL_CACHE, else the cache directory."""
    if override is not None:
        return override
    chosen = os.environ.get("POWERCUT_KERNEL_CACHE")
    return Path(chosen).resolve() if chosen else cache_dir()


@dataclass(frozen=True, slots=True)
class CachedKernel:
    """A Debian kernel fetched into the cache: DIRECTORY/root is its packages' files."""

    release: str
    version: str  # the Debian package version
    suite: str
    directory: Path
    image: Path

    def spec(self) -> KernelSpec:
        return KernelSpec(image=self.image, release=self.release,
                          modules_root=self.directory / "root")


def cached_kernel(release: str, cache: Path | None = None) -> CachedKernel | None:
    """The fetched kernel ``release``, if the cache holds it whole."""
    directory = kernel_cache(cache) / "kernels" / release
    try:
        meta = json.loads((directory / KERNEL_FILE).read_text())
        image = directory / "root" / str(meta["image"])
        kernel = CachedKernel(str(meta["release"]), str(meta["version"]), str(meta["suite"]),
                              directory, image)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if kernel.release != release or not image.is_file():
        return None
    return kernel


def source_tarball(series: str, cache: Path | None = None,
                   root: Path = Path("/")) -> Path | None:
    """The tarball of Debian's linux-source-SERIES: installed in ROOT/usr/src, else the
    newest version fetched into the kernel cache (``powercut kernels source SERIES``)."""
    name = f"linux-source-{series}.tar.xz"
    installed = root / "usr" / "src" / name
    if installed.is_file():
        return installed
    from debian.debian_support import Version  # here: only source look-ups need it

    fetched = [(d.name.partition("_")[2], d / "usr" / "src" / name)
               for d in (kernel_cache(cache) / "sources").glob(f"linux-source-{series}_*")]
    fetched = [(v, p) for v, p in fetched if p.is_file()]
    return max(fetched, key=lambda vp: Version(vp[0]))[1] if fetched else None


def cached_kernels(cache: Path | None = None) -> list[CachedKernel]:
    """Every kernel the cache holds whole, oldest first."""
    try:
        names = [p.name for p in (kernel_cache(cache) / "kernels").iterdir()
                 if not p.name.startswith(".")]
    except OSError:
        return []
    found = [k for k in (cached_kernel(n, cache) for n in names) if k is not None]
    return sorted(found, key=lambda k: (_version_key(k.release), k.release))


def _version_key(release: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", release))


def kernel_spec(kernel: str | os.PathLike[str] | None, modules: str | os.PathLike[str] | None,
                release: str | None = None, *, root: Path = Path("/")) -> KernelSpec:
    """Resolve ``--kernel``/``--modules``/``--kernel-release`` into a KernelSpec
    (default: the kernel linux-image-amd64 depends on; ``root`` holds boot/ and lib/modules/)."""
    if release is not None:
        if kernel is not None or modules is not None:
            raise ConfigError("--kernel-release boots a Debian kernel with its own modules; "
                              "drop --kernel/--modules or --kernel-release")
        return release_kernel(release, root)
    if kernel is None:
        if modules is not None:
            raise MissingPrerequisite("--modules needs --kernel (the image those modules belong to)")
        return default_kernel(root)
    image = Path(kernel)
    if not image.exists():
        raise MissingPrerequisite(f"{image}: kernel image not found")
    release = bzimage_release(image)
    mod_root = Path(modules) if modules is not None else root
    if not mod_root.is_dir():
        raise MissingPrerequisite(f"{mod_root}: modules directory not found")
    spec = KernelSpec(image=image, release=release, modules_root=mod_root)
    if not (spec.modules_dir / "modules.dep").exists():
        raise MissingPrerequisite(
            f"{spec.modules_dir}: no modules.dep for kernel {release} "
            f"(install the modules with INSTALL_MOD_PATH={mod_root} and run depmod)"
        )
    return spec


# --- booting without self-decompression ------------------------------------------

# Under TCG a bzImage spends seconds decompressing itself. When the kernel has a
# PVH entry point (CONFIG_PVH), qemu boots the uncompressed ELF vmlinux directly.
_XEN_ELFNOTE_PHYS32_ENTRY = 18
_PT_NOTE = 4


def _payload(head: bytes) -> bytes | None:
    """The compressed kernel inside a bzImage (boot protocol >= 2.08)."""
    if len(head) < 0x250 or head[0x202:0x206] != b"HdrS":
        return None
    if int.from_bytes(head[0x206:0x208], "little") < 0x208:
        return None
    setup_sects = head[0x1F1] or 4
    start = (setup_sects + 1) * 512 + int.from_bytes(head[0x248:0x24C], "little")
    length = int.from_bytes(head[0x24C:0x250], "little")
    return head[start:start + length]


class _NoDecoder(Exception):
    """The payload's format is known but its decoder is not installed."""


def _decompress(payload: bytes) -> bytes | None:
    if payload.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(payload)
    if payload.startswith(b"\x1f\x8b"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(payload)
    if payload.startswith(b"\x28\xb5\x2f\xfd"):  # zstd (CONFIG_KERNEL_ZSTD: Debian's 7.x)
        try:
            import zstandard  # here: only an image's first boot needs it
        except ImportError:
            raise _NoDecoder from None
        # One frame, then the 4-byte size the kernel's build appends: decompressobj stops
        # at the frame's end.
        return zstandard.ZstdDecompressor().decompressobj().decompress(payload)
    return None  # lz4, lzo, bzip2...: boot the bzImage as it is


def has_pvh_entry(elf: bytes) -> bool:
    """Whether an ELF vmlinux carries the Xen PHYS32_ENTRY note (PVH boot)."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2:  # 64-bit only
        return False
    phoff = int.from_bytes(elf[0x20:0x28], "little")
    phentsize = int.from_bytes(elf[0x36:0x38], "little")
    phnum = int.from_bytes(elf[0x38:0x3A], "little")
    for i in range(phnum):
        ph = elf[phoff + i * phentsize: phoff + (i + 1) * phentsize]
        if int.from_bytes(ph[0:4], "little") != _PT_NOTE:
            continue
        off, size = int.from_bytes(ph[8:16], "little"), int.from_bytes(ph[32:40], "little")
        pos, end = off, off + size
        while pos + 12 <= end:
            namesz, descsz, ntype = (int.from_bytes(elf[pos + k: pos + k + 4], "little") for k in (0, 4, 8))
            name = elf[pos + 12: pos + 12 + namesz].rstrip(b"\0")
            if name == b"Xen" and ntype == _XEN_ELFNOTE_PHYS32_ENTRY:
                return True
            pos += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


def boot_image(image: Path, cache: Path) -> Path:
    """The file qemu's -kernel should get: a cached uncompressed vmlinux with a
    PVH entry if the bzImage holds one, else the bzImage itself."""
    data = image.read_bytes()
    key = hashlib.sha256(data).hexdigest()[:20]
    out = cache / f"{key}.vmlinux"
    marker = cache / f"{key}.bzimage-only"
    if out.exists():
        return out
    if marker.exists():
        return image
    payload = _payload(data)
    try:
        elf = _decompress(payload) if payload else None
    except _NoDecoder:
        return image  # no verdict cached: installing the decoder makes the next boot faster
    cache.mkdir(parents=True, exist_ok=True)
    if elf is None or not has_pvh_entry(elf):
        marker.touch()
        return image
    write_atomic(out, elf)
    return out
