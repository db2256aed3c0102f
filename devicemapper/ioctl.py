"""Device-mapper ioctls on /dev/mapper/control, from this process.

Target messages (:class:`TargetMessenger`) and one-line devices created,
loaded, resumed and removed (:class:`Control`) without dmsetup. A
workload marks the log after every durability operation, and a check
swaps a snapshot table for every state; a fork and exec of dmsetup for
each costs tens of milliseconds in an emulated guest, the ioctl one
syscall. Layout from include/uapi/linux/dm-ioctl.h.
"""

from __future__ import annotations

import fcntl
import os
import struct

from framework.core.errors import DeviceMapperError
from framework.core.handle import FdHandle

CONTROL = "/dev/mapper/control"
DM_NAME_LEN = 128
DM_UUID_LEN = 129
# struct dm_ioctl: version[3], data_size, data_start, target_count, open_count,
# flags, event_nr, padding, dev, name, uuid, data[7]
_DM_IOCTL = struct.Struct(f"<3IIIIiIIIQ{DM_NAME_LEN}s{DM_UUID_LEN}s7s")
assert _DM_IOCTL.size == 312
_OPEN_COUNT, _DEV = 6, 10  # field positions in an unpacked struct dm_ioctl
_DM_TARGET_MSG_CMD = 14
_IOC_READ_WRITE = 3
DM_TARGET_MSG = (_IOC_READ_WRITE << 30) | (_DM_IOCTL.size << 16) | (0xFD << 8) | _DM_TARGET_MSG_CMD


def pack_target_msg(name: str, message: str, sector: int = 0) -> bytes:
    body = struct.pack("<Q", sector) + message.encode() + b"\0"
    total = _DM_IOCTL.size + len(body)
    total += -total % 8
    header = _DM_IOCTL.pack(4, 0, 0, total, _DM_IOCTL.size, 0, 0, 0, 0, 0, 0,
                            name.encode(), b"", b"")
    return (header + body).ljust(total, b"\0")


class TargetMessenger(FdHandle):
    """Keeps /dev/mapper/control open and sends messages to one device."""

    def __init__(self, name: str) -> None:
        if len(name.encode()) >= DM_NAME_LEN:
            raise DeviceMapperError(f"dm device name too long: {name!r}")
        self.name = name
        self._fd = os.open(CONTROL, os.O_RDWR | os.O_CLOEXEC)

    def send(self, message: str, sector: int = 0) -> None:
        buf = bytearray(pack_target_msg(self.name, message, sector))
        try:
            fcntl.ioctl(self._fd, DM_TARGET_MSG, buf)
        except OSError as exc:
            raise DeviceMapperError(f"dm message {message!r} to {self.name}: {exc.strerror}") from exc



# --- creating and removing devices without dmsetup ----------------------------

_DM_DEV_CREATE_CMD = 3
_DM_DEV_REMOVE_CMD = 4
_DM_DEV_SUSPEND_CMD = 6
_DM_DEV_STATUS_CMD = 7
_DM_TABLE_LOAD_CMD = 9
# struct dm_target_spec: sector_start, length, status, next, target_type[16]
_TARGET_SPEC = struct.Struct("<QQiI16s")


def _ioc(cmd: int) -> int:
    return (_IOC_READ_WRITE << 30) | (_DM_IOCTL.size << 16) | (0xFD << 8) | cmd


def _header(name: str, total: int, *, flags: int = 0, target_count: int = 0) -> bytes:
    return _DM_IOCTL.pack(4, 0, 0, total, _DM_IOCTL.size, target_count, 0, flags, 0, 0, 0,
                          name.encode(), b"", b"")


def pack_table_load(name: str, start: int, length: int, target: str, params: str) -> bytes:
    """DM_TABLE_LOAD for a one-line table (the layout dmsetup sends)."""
    spec_params = params.encode() + b"\0"
    spec_len = _TARGET_SPEC.size + len(spec_params)
    spec_len += -spec_len % 8
    spec = _TARGET_SPEC.pack(start, length, 0, spec_len, target.encode()) + spec_params
    body = spec.ljust(spec_len, b"\0")
    return _header(name, _DM_IOCTL.size + len(body), target_count=1) + body


def reply_dev(reply: bytes | bytearray) -> int:
    """The encoded device number the kernel put in a struct dm_ioctl reply."""
    return int(_DM_IOCTL.unpack_from(reply)[_DEV])


def decode_dev(dev: int) -> tuple[int, int]:
    """The kernel's huge_encode_dev() back into (major, minor)."""
    major = (dev & 0xFFF00) >> 8
    minor = (dev & 0xFF) | ((dev >> 12) & 0xFFF00)
    return major, minor


class Control(FdHandle):
    """Device-mapper control ioctls from this process (needs root)."""

    def __init__(self) -> None:
        self._fd = os.open(CONTROL, os.O_RDWR | os.O_CLOEXEC)

    def _call(self, cmd: int, buf: bytes, what: str) -> bytearray:
        data = bytearray(buf)
        try:
            fcntl.ioctl(self._fd, _ioc(cmd), data)
        except OSError as exc:
            raise DeviceMapperError(f"{what}: {exc.strerror}") from exc
        return data

    def create(self, name: str, start: int, length: int, target: str, params: str) -> str:
        """Create, load and resume a one-line device; returns its /dev/dm-N path."""
        if len(name.encode()) >= DM_NAME_LEN:
            raise DeviceMapperError(f"dm device name too long: {name!r}")
        reply = self._call(_DM_DEV_CREATE_CMD, _header(name, _DM_IOCTL.size), f"create {name}")
        try:
            self.load(name, start, length, target, params)
            self.resume(name)
        except DeviceMapperError:
            self.remove(name)
            raise
        # devtmpfs made the node before the ioctl returned.
        return f"/dev/dm-{decode_dev(reply_dev(reply))[1]}"

    def remove(self, name: str) -> None:
        self._call(_DM_DEV_REMOVE_CMD, _header(name, _DM_IOCTL.size), f"remove {name}")

    def open_count(self, name: str) -> int:
        """How many openers the device has now (DM_DEV_STATUS)."""
        reply = self._call(_DM_DEV_STATUS_CMD, _header(name, _DM_IOCTL.size), f"status of {name}")
        return int(_DM_IOCTL.unpack_from(reply)[_OPEN_COUNT])

    def resume(self, name: str) -> None:
        """Make the loaded table live (suspending the old one first, if any).

        DM_DEV_SUSPEND without the suspend flag is a resume."""
        self._call(_DM_DEV_SUSPEND_CMD, _header(name, _DM_IOCTL.size), f"resume {name}")

    def load(self, name: str, start: int, length: int, target: str, params: str) -> None:
        """Load a one-line table; it becomes live at the next resume."""
        self._call(_DM_TABLE_LOAD_CMD, pack_table_load(name, start, length, target, params),
                   f"load {target} table into {name}")

