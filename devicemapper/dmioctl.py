"""Sending a target message with the DM_TARGET_MSG ioctl, in-process.

A workload marks the log after every durability operation; a fork and
exec of dmsetup for each mark costs tens of milliseconds in an emulated
guest, the ioctl costs one syscall. Layout from include/uapi/linux/dm-ioctl.h.
"""

from __future__ import annotations

import fcntl
import os
import struct

from framework.errors import DeviceMapperError

CONTROL = "/dev/mapper/control"
DM_NAME_LEN = 128
DM_UUID_LEN = 129
# struct dm_ioctl: version[3], data_size, data_start, target_count, open_count,
# flags, event_nr, padding, dev, name, uuid, data[7]
_DM_IOCTL = struct.Struct(f"<3IIIIiIIIQ{DM_NAME_LEN}s{DM_UUID_LEN}s7s")
assert _DM_IOCTL.size == 312
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


class TargetMessenger:
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

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> TargetMessenger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
