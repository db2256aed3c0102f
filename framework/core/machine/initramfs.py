"""The guest's initramfs: busybox-static, the kernel modules a run needs, /init.

/init loads the modules, mounts the host root read-only over 9p and
chroots into it, so the guest has the host's tools and virtualenv. The
per-run directory is mounted read-write at the same path it has on the
host. Archives are cached by the hash of everything that goes into them.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import logging
import lzma
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from framework.core import command
from framework.core.errors import MissingPrerequisite
from framework.core.files import write_atomic

log = logging.getLogger(__name__)

BUSYBOX = Path("/bin/busybox")
READY_MARKER = "POWERCUT-GUEST-READY"

# Always needed: virtio disks and 9p for the host root and the run directory,
# device-mapper with the targets powercut drives.
BASE_MODULES: tuple[str, ...] = (
    "virtio_pci",
    "virtio_blk",
    "9pnet_virtio",
    "9p",
    "dm-mod",
    "dm-log-writes",
    "dm-flakey",
    "dm-snapshot",
    "dm-delay",
    "loop",
)

# Directories the guest covers with its own tmpfs (see /init).
GUEST_TMPFS = ("/tmp", "/run", "/mnt", "/var/tmp")


def hidden_paths(paths: Iterable[Path]) -> list[Path]:
    """The paths that lie under a guest tmpfs and must be kept visible there."""
    out: list[Path] = []
    for p in paths:
        if any(p == Path(t) or p.is_relative_to(t) for t in GUEST_TMPFS) and p not in out:
            out.append(p)
    return out


@dataclass(frozen=True, slots=True)
class KernelModule:
    name: str
    path: Path


def modules_for(modules: Iterable[str]) -> tuple[str, ...]:
    """BASE_MODULES, then ``modules`` (what the run needs beyond them), each once.

    The caller names the modules: which ones a filesystem needs is its
    adapter's business (recovery.filesystems.kernel_modules()), and a run
    loads only what it uses: btrfs and its raid6/xor helpers benchmark
    their algorithms at load, which costs seconds under TCG.
    """
    names = list(BASE_MODULES)
    for mod in modules:
        if mod not in names:
            names.append(mod)
    return tuple(names)


_INSMOD = re.compile(r"^insmod\s+(\S+)")
_BUILTIN = re.compile(r"^builtin\s+(\S+)")


def parse_show_depends(text: str) -> tuple[list[Path], list[str]]:
    """Parse `modprobe --show-depends` output into (module files in load order, builtins)."""
    files: list[Path] = []
    builtins: list[str] = []
    for line in text.splitlines():
        if m := _INSMOD.match(line.strip()):
            files.append(Path(m.group(1)))
        elif m := _BUILTIN.match(line.strip()):
            builtins.append(m.group(1))
    return files, builtins


def resolve_modules(
    names: Sequence[str], kernel_release: str, modules_root: Path | None = None,
    *, runner: command.CommandRunner | None = None, missing_ok: bool = False,
) -> tuple[list[KernelModule], list[str]]:
    """Resolve module names and their dependencies, in load order, without duplicates.

    ``modules_root`` is the directory that holds ``lib/modules/<release>``
    (``/`` for the installed kernel, INSTALL_MOD_PATH for a kernel under test).
    A module that is built in needs no file; a module that is neither is an
    error, or with ``missing_ok`` is returned in the second list.
    """
    run = runner.run if runner is not None else command.run
    argv_base = ["modprobe", "--show-depends", "-S", kernel_release]
    root = Path(modules_root) if modules_root is not None else Path("/")
    if root != Path("/"):
        argv_base += ["-d", os.fspath(root)]
    ordered: list[KernelModule] = []
    seen: set[Path] = set()
    missing: list[str] = []
    for name in names:
        result = run([*argv_base, name], ok_status=None)
        files, builtins = parse_show_depends(result.stdout)
        if result.status != 0 or (not files and not builtins):
            if missing_ok:
                missing.append(name)
                continue
            where = root / "lib/modules" / kernel_release
            raise MissingPrerequisite(
                f"kernel {kernel_release}: module {name!r} not found in {where} "
                f"(the kernel needs it as a module or built in)"
            )
        for f in files:
            # modprobe prints paths under the root; keep them host-absolute.
            path = f if root == Path("/") or f.is_relative_to(root) else root / f.relative_to("/")
            if path not in seen:
                seen.add(path)
                ordered.append(KernelModule(path.name.removesuffix(".ko"), path))
    return ordered, missing


INIT_SCRIPT = r"""#!/bin/busybox sh
# powercut guest init: modules, host root over 9p (read-only), run dir (rw), chroot.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in $(cat /modules.order); do
  insmod "/modules/$m" || echo "powercut-init: insmod $m failed"
done
arg() { for w in $(cat /proc/cmdline); do case "$w" in "$1="*) echo "${w#*=}";; esac; done; }
rundir=$(arg powercut.rundir)
msize=$(arg powercut.msize)
mkdir -p /newroot
if ! mount -t 9p -o ro,trans=virtio,version=9p2000.L,cache=loose,msize=$msize hostroot /newroot; then
  echo "powercut-init: cannot mount the host root over 9p"; poweroff -f
fi
for d in dev proc sys; do mount --bind /$d /newroot/$d; done
# Host paths the guest needs (the checkout, the virtualenv) may lie under the
# directories made writable with tmpfs below: hold them aside and put them back.
keep=$(arg powercut.keep | tr ':' ' ')
i=0
for p in $keep; do
  mkdir -p /keep/$i && mount --bind "/newroot$p" /keep/$i; i=$((i+1))
done
mount -t tmpfs -o mode=1777 tmpfs /newroot/tmp
mount -t tmpfs tmpfs /newroot/run
mount -t tmpfs tmpfs /newroot/mnt
[ -d /newroot/var/tmp ] && mount -t tmpfs -o mode=1777 tmpfs /newroot/var/tmp
i=0
for p in $keep; do
  mkdir -p "/newroot$p" && mount --move /keep/$i "/newroot$p" \
    || echo "powercut-init: cannot keep $p visible"
  i=$((i+1))
done
if [ -n "$rundir" ]; then
  # The run directory may lie under a path the tmpfs mounts above hide.
  mkdir -p "/newroot$rundir" 2>/dev/null
  mount -t 9p -o trans=virtio,version=9p2000.L,cache=none,msize=$msize rundir "/newroot$rundir" \
    || { echo "powercut-init: cannot mount the run directory $rundir"; poweroff -f; }
fi
echo 1 > /proc/sys/kernel/sysrq
read up _ < /proc/uptime
echo "@READY@ $up"
HOME=/tmp TERM=dumb LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  DM_DISABLE_UDEV=1 PYTHONDONTWRITEBYTECODE=1 \
  setsid -c chroot /newroot /bin/sh -i
sync
poweroff -f
""".replace("@READY@", READY_MARKER)


def _cpio_entry(out: io.BufferedIOBase, name: str, mode: int, data: bytes = b"", ino: int = 0) -> None:
    """Append one 'newc' cpio record (the format the kernel unpacks)."""
    namez = name.encode() + b"\0"
    fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(namez), 0]
    header = b"070701" + b"".join(f"{v:08x}".encode() for v in fields)
    out.write(header + namez)
    out.write(b"\0" * (-(len(header) + len(namez)) % 4))
    out.write(data)
    out.write(b"\0" * (-len(data) % 4))


# The end of a signed module (scripts/sign-file.c): the PKCS#7 signature, then struct
# module_signature (include/linux/module_signature.h: five u8 fields, three bytes of
# padding, the signature's length as a big-endian u32), then this marker.
SIGNATURE_MARKER = b"~Module signature appended~\n"
_SIGNATURE_INFO = 12


def drop_signature(data: bytes) -> bytes:
    """A module without its appended signature; any other bytes as they are.

    Loading a signed module hashes it whole and checks the signature (module_sig_check()
    in kernel/module/signing.c), about 0.45 s of a guest's boot with ext4, xfs and btrfs
    under emulation. Without a signature, a kernel that does not enforce signatures loads
    the same code and marks itself tainted 'E' (TAINT_UNSIGNED_MODULE, load_module() in
    kernel/module/main.c), which changes nothing else."""
    if not data.endswith(SIGNATURE_MARKER):
        return data
    info_at = len(data) - len(SIGNATURE_MARKER) - _SIGNATURE_INFO
    if info_at < 0:
        return data
    sig_len = int.from_bytes(data[info_at + 8:info_at + 12], "big")
    if sig_len == 0 or sig_len > info_at:
        return data  # not the layout sign-file writes: leave it to the kernel
    return data[:info_at - sig_len]


#: A compressed module's suffix (CONFIG_MODULE_COMPRESS_*: Debian's 6.12 and 7.x builds
#: ship .ko.xz) and how to unpack it on the host.
_PACKED = {".xz": "xz", ".gz": "gzip", ".zst": "zstd"}


def unpacked_module(path: Path) -> tuple[str, bytes]:
    """A module's file name and bytes as the kernel loads them: a compressed module
    (ext4.ko.xz) unpacked here, as ext4.ko. Under emulation the guest would otherwise
    unpack every module at boot (busybox's insmod, or the kernel with
    CONFIG_MODULE_DECOMPRESS); the signature, which sign-file appends before compression,
    comes out with the code. A zstd module stays packed when the zstandard package is
    missing."""
    data = path.read_bytes()
    kind = _PACKED.get(path.suffix)
    if kind is None or not path.stem.endswith(".ko"):
        return path.name, data
    try:
        if kind == "xz":
            return path.stem, lzma.decompress(data)
        if kind == "gzip":
            return path.stem, gzip.decompress(data)
        import zstandard  # a dependency of powercut; here, as only packed modules need it

        return path.stem, zstandard.ZstdDecompressor().decompressobj().decompress(data)
    except ImportError:
        return path.name, data
    except (lzma.LZMAError, OSError, EOFError) as exc:
        raise MissingPrerequisite(f"{path}: not a readable {kind} module ({exc})") from None


def _module_entry(module: KernelModule, *, unsigned: bool, unpack: bool) -> tuple[str, bytes]:
    name, data = unpacked_module(module.path) if unpack else (module.path.name,
                                                               module.path.read_bytes())
    return name, drop_signature(data) if unsigned else data


def build_cpio(modules: Sequence[KernelModule], busybox: Path = BUSYBOX, *,
               unsigned: bool = False, unpack: bool = True) -> bytes:
    """The initramfs as an uncompressed newc archive (no decompression cost at boot);
    ``unsigned``: the modules without their signatures (see drop_signature()); ``unpack``:
    compressed modules unpacked on the host (see unpacked_module())."""
    if not busybox.exists():
        raise MissingPrerequisite(f"{busybox}: not found; install busybox-static (make setup)")
    out = io.BytesIO()
    ino = 1
    dirs = ["bin", "dev", "proc", "sys", "modules", "newroot"]
    for d in dirs:
        _cpio_entry(out, d, stat.S_IFDIR | 0o755, ino=ino)
        ino += 1
    entries = [_module_entry(m, unsigned=unsigned, unpack=unpack) for m in modules]
    files: list[tuple[str, int, bytes]] = [
        ("init", 0o755, INIT_SCRIPT.encode()),
        ("bin/busybox", 0o755, busybox.read_bytes()),
        ("modules.order", 0o644, "".join(f"{name}\n" for name, _ in entries).encode()),
    ]
    files += [(f"modules/{name}", 0o644, data) for name, data in entries]
    for name, perm, data in files:
        _cpio_entry(out, name, stat.S_IFREG | perm, data, ino=ino)
        ino += 1
    _cpio_entry(out, "TRAILER!!!", 0)
    return out.getvalue()


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "powercut"


def content_key(modules: Sequence[KernelModule], busybox: Path = BUSYBOX, *,
                unsigned: bool = False, unpack: bool = True) -> str:
    h = hashlib.sha256()
    h.update(INIT_SCRIPT.encode())
    if unsigned:
        h.update(b"modules without signatures")
    if not unpack:
        h.update(b"modules as packaged")
    for path in (busybox, *(m.path for m in modules)):
        st = path.stat()
        # Hash names and contents: a rebuilt module with the same name must miss.
        h.update(path.name.encode())
        h.update(str(st.st_size).encode())
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()[:20]


def initramfs(modules: Sequence[KernelModule], *, busybox: Path = BUSYBOX,
              unsigned: bool = False, unpack: bool = True) -> Path:
    """Return the cached initramfs for these modules, building it if needed."""
    key = content_key(modules, busybox, unsigned=unsigned, unpack=unpack)
    path = cache_dir() / "initramfs" / f"{key}.cpio"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, build_cpio(modules, busybox, unsigned=unsigned, unpack=unpack))
    log.info("built initramfs %s (%d modules)", path, len(modules))
    return path
