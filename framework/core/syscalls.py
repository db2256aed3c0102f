"""mount(2), umount2(2) and the kernel log, in-process.

Under an emulated CPU every fork and exec costs a tenth of a second or
more, which dwarfs a mount of a small filesystem; code that runs on the
machine it acts on (a runner with ``runs_here``) uses these instead of
mount(8), umount(8) and dmesg(1). Results are the same; only the cost
differs.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Sequence
from functools import cache

from framework.core.handle import Handle

# <linux/mount.h> MS_* flags that mount(8) turns options into; every other
# option goes to the filesystem as data.
MS_FLAGS = {
    "ro": 1, "nosuid": 2, "nodev": 4, "noexec": 8, "sync": 16, "mand": 64, "dirsync": 128,
    "noatime": 1024, "nodiratime": 2048, "relatime": 1 << 21, "strictatime": 1 << 24,
    "lazytime": 1 << 25,
}
CLEARS = {"rw": 1, "suid": 2, "dev": 4, "exec": 8, "async": 16, "atime": 1024, "diratime": 2048}
MNT_DETACH = 2


def runs_here(runner: object) -> bool:
    """Whether the runner's commands run on this very machine."""
    return bool(getattr(runner, "runs_here", False))


@cache
def _libc() -> ctypes.CDLL:
    # The running program's symbols, libc's among them (dlopen(3) of NULL). find_library("c")
    # would start ldconfig -p, a process of its own in every guest task.
    return ctypes.CDLL(None, use_errno=True)


def split_options(options: Sequence[str]) -> tuple[int, str]:
    """mount(8)-style options into (MS_* flags, filesystem data string)."""
    flags = 0
    data: list[str] = []
    for opt in options:
        if opt in MS_FLAGS:
            flags |= MS_FLAGS[opt]
        elif opt in CLEARS:
            flags &= ~CLEARS[opt]
        elif opt in ("defaults", ""):
            continue
        else:
            data.append(opt)
    return flags, ",".join(data)


def mount(source: str, target: str, fstype: str, options: Sequence[str] = ()) -> None:
    """mount(2); raises OSError with the kernel's errno."""
    flags, data = split_options(options)
    rc = _libc().mount(source.encode(), target.encode(), fstype.encode(), ctypes.c_ulong(flags),
                       data.encode() if data else None)
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def umount(target: str, *, detach: bool = False) -> None:
    rc = _libc().umount2(target.encode(), MNT_DETACH if detach else 0)
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"umount {target}: {os.strerror(err)}")


class KernelLog(Handle):
    """Kernel messages logged from now on, read from /dev/kmsg."""

    def __init__(self) -> None:
        self._fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        os.lseek(self._fd, 0, os.SEEK_END)

    def read(self) -> list[str]:
        """The new records' text, in order ('[seconds] text' like dmesg)."""
        lines = []
        while True:
            try:
                record = os.read(self._fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten while we read: go on
                    continue
                raise
            head, _, text = record.decode("utf-8", "replace").partition(";")
            fields = head.split(",")
            usec = int(fields[2]) if len(fields) > 2 and fields[2].isdigit() else 0
            lines.append(f"[{usec / 1e6:12.6f}] {text.splitlines()[0] if text else ''}")
        return lines

    def close(self) -> None:
        os.close(self._fd)



def drop_caches() -> None:
    """Write back dirty pages, then drop the clean page cache, dentries and inodes.

    vm.drop_caches frees only clean objects (Documentation/admin-guide/sysctl/vm.rst),
    so the sync before it is what makes the next read come from the disk.
    """
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
