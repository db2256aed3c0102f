"""Which kernel a guest boots: the installed Debian kernel or one under test."""

from __future__ import annotations

import hashlib
import lzma
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from framework.core.errors import MissingPrerequisite

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
                     self.modules_dir / "build" / ".config",
                     Path("/boot") / f"config-{self.release}"):
            if path.is_file():
                return path
        return None

    def facts(self) -> dict[str, str]:
        """What a run records about its kernel: release, image and config hash."""
        config = self.config_path()
        digest = hashlib.sha256(config.read_bytes()).hexdigest()[:16] if config else "unknown"
        return {"kernel": self.release, "kernel_image": os.fspath(self.image),
                "kernel_config_sha256": digest}


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


def default_kernel() -> KernelSpec:
    """The newest installed Debian kernel that has modules on this host."""
    candidates = []
    for image in Path("/boot").glob("vmlinuz-*"):
        release = image.name.removeprefix("vmlinuz-")
        if _SKIP.search(release) or not (Path("/lib/modules") / release / "modules.dep").exists():
            continue
        candidates.append((_version_key(release), image, release))
    if not candidates:
        raise MissingPrerequisite(
            "no guest kernel: /boot has no vmlinuz-* with modules; install linux-image-amd64 (make setup)"
        )
    _, image, release = max(candidates)
    return KernelSpec(image=image, release=release, modules_root=Path("/"))


def _version_key(release: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", release))


def kernel_spec(kernel: str | os.PathLike[str] | None, modules: str | os.PathLike[str] | None) -> KernelSpec:
    """Resolve ``--kernel``/``--modules`` into a KernelSpec (defaults: the Debian kernel)."""
    if kernel is None:
        if modules is not None:
            raise MissingPrerequisite("--modules needs --kernel (the image those modules belong to)")
        return default_kernel()
    image = Path(kernel)
    if not image.exists():
        raise MissingPrerequisite(f"{image}: kernel image not found")
    release = bzimage_release(image)
    root = Path(modules) if modules is not None else Path("/")
    if not root.is_dir():
        raise MissingPrerequisite(f"{root}: modules directory not found")
    spec = KernelSpec(image=image, release=release, modules_root=root)
    if not (spec.modules_dir / "modules.dep").exists():
        raise MissingPrerequisite(
            f"{spec.modules_dir}: no modules.dep for kernel {release} "
            f"(install the modules with INSTALL_MOD_PATH={root} and run depmod)"
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


def _decompress(payload: bytes) -> bytes | None:
    if payload.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(payload)
    if payload.startswith(b"\x1f\x8b"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(payload)
    return None  # zstd, lz4, lzo...: boot the bzImage as it is


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
    elf = _decompress(payload) if payload else None
    cache.mkdir(parents=True, exist_ok=True)
    if elf is None or not has_pvh_entry(elf):
        marker.touch()
        return image
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(elf)
    os.replace(tmp, out)
    return out
