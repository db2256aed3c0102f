"""Which kernel a guest boots: the installed Debian kernel or one under test."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from framework.errors import MissingPrerequisite

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
