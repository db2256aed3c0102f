"""Who holds a block device or a mount busy: processes, mounts, stacked devices.

When a device or mount that should be idle stays in use, the error must
name what holds it, or nobody can tell a lingering mount from a stray
descriptor. Read from procfs and sysfs (proc(5)): /proc/PID/fd, cwd and
root links, /proc/self/mountinfo's major:minor and mount point fields,
and /sys/dev/block/MAJ:MIN/holders (devices stacked on it,
block/holder.c).

A process that forks while another thread has a file open inherits that
descriptor until it execs (close-on-exec) or closes it; under emulation
that window can outlast an unmount that starts right after the file is
closed, which is why callers retry before they ask who holds what.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PROC = Path("/proc")
SYS = Path("/sys")


def device_number(path: str) -> tuple[int, int] | None:
    """(major, minor) of block device ``path``, None if it is not one."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISBLK(st.st_mode):
        return None
    return os.major(st.st_rdev), os.minor(st.st_rdev)


def device_holders(path: str, *, proc: Path = PROC, sys: Path = SYS) -> list[str]:
    """What holds block device ``path`` open, in words ("pid 12 (e2fsck) fd 3", "mounted on
    /mnt", "dm-4 stacked on it"); empty when nothing visible does."""
    number = device_number(path)
    if number is None:
        return []
    found = []
    for pid, comm, what, link in _links(proc):
        if not what.startswith("fd "):
            continue
        try:
            st = os.stat(link)
        except OSError:
            continue
        if stat.S_ISBLK(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == number:
            found.append(f"pid {pid} ({comm}) {what}")
    major, minor = number
    for fields in _mountinfo(proc):
        if fields[2] == f"{major}:{minor}":
            found.append(f"mounted on {fields[4]}")
    try:
        stacked = sorted(p.name for p in (sys / "dev" / "block" / f"{major}:{minor}" / "holders").iterdir())
    except OSError:
        stacked = []
    return found + [f"{name} stacked on it" for name in stacked]


def mount_holders(mountpoint: str, *, proc: Path = PROC) -> list[str]:
    """Processes using anything under ``mountpoint`` (an open file, their working or root
    directory), in words ("pid 12 (sleep) fd 3 -> /mnt/f0")."""
    top = os.path.realpath(mountpoint)
    found = []
    for pid, comm, what, link in _links(proc):
        try:
            target = os.readlink(link)
        except OSError:
            continue
        if target == top or target.startswith(top + "/"):
            found.append(f"pid {pid} ({comm}) {what} -> {target}")
    return found


def _links(proc: Path) -> list[tuple[str, str, str, Path]]:
    """(pid, command name, "fd N" | "cwd" | "root", link) of every process here."""
    out = []
    for pid_dir in proc.glob("[0-9]*"):
        try:
            comm = (pid_dir / "comm").read_text().strip()
            fds = list((pid_dir / "fd").iterdir())
        except OSError:
            continue  # gone, or not ours to read
        out += [(pid_dir.name, comm, name, pid_dir / name) for name in ("cwd", "root")]
        out += [(pid_dir.name, comm, f"fd {fd.name}", fd) for fd in fds]
    return sorted(out, key=lambda t: (int(t[0]), t[2]))


def _mountinfo(proc: Path) -> list[list[str]]:
    try:
        text = (proc / "self" / "mountinfo").read_text()
    except OSError:
        return []
    return [fields for line in text.splitlines() if len(fields := line.split()) > 4]
