"""Device-mapper tables: the only place powercut builds table strings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class TableLine:
    start: int  # 512-byte sectors
    length: int
    target: str
    args: tuple[str, ...]

    def __str__(self) -> str:
        return " ".join([str(self.start), str(self.length), self.target, *self.args])


@dataclass(frozen=True, slots=True)
class Table:
    lines: tuple[TableLine, ...]

    def __str__(self) -> str:
        return "\n".join(str(line) for line in self.lines) + "\n"

    @property
    def size_sectors(self) -> int:
        return sum(line.length for line in self.lines)


def _one(length: int, target: str, args: Sequence[object]) -> Table:
    if length <= 0:
        raise ValueError(f"{target} table: length must be positive, got {length}")
    return Table((TableLine(0, length, target, tuple(str(a) for a in args)),))


def linear(dev: str, size_sectors: int, offset: int = 0) -> Table:
    return _one(size_sectors, "linear", [dev, offset])


def log_writes(data_dev: str, log_dev: str, size_sectors: int) -> Table:
    return _one(size_sectors, "log-writes", [data_dev, log_dev])


class FlakeyMode(StrEnum):
    PASS = "pass"  # every I/O passes (up interval only)
    DROP_WRITES = "drop_writes"  # writes silently vanish: a power cut
    ERROR_WRITES = "error_writes"  # writes fail with EIO
    ERROR_READS = "error_reads"  # reads fail with EIO (newer kernels)


# An interval long enough that a run never sees the other state.
FOREVER_S = 180


def flakey(dev: str, size_sectors: int, mode: FlakeyMode = FlakeyMode.PASS, *,
           up_s: int | None = None, down_s: int | None = None, offset: int = 0) -> Table:
    """A flakey table as fstests uses it: pass-through, or always down in ``mode``.

    With explicit ``up_s``/``down_s`` the device alternates: up for up_s
    seconds, then down (misbehaving as ``mode``) for down_s seconds.
    """
    if mode is FlakeyMode.PASS:
        up, down = (FOREVER_S if up_s is None else up_s), (0 if down_s is None else down_s)
        return _one(size_sectors, "flakey", [dev, offset, up, down])
    up, down = (0 if up_s is None else up_s), (FOREVER_S if down_s is None else down_s)
    return _one(size_sectors, "flakey", [dev, offset, up, down, 1, mode.value])


def snapshot(origin: str, cow_dev: str, size_sectors: int, *, persistent: bool = False,
             chunk_sectors: int = 8) -> Table:
    """A snapshot of origin whose changes go to cow_dev (N: not persistent)."""
    return _one(size_sectors, "snapshot", [origin, cow_dev, "P" if persistent else "N", chunk_sectors])


def delay(dev: str, size_sectors: int, read_ms: int, write_ms: int | None = None,
          offset: int = 0, *, flush_ms: int | None = None) -> Table:
    """dm-delay: reads wait read_ms, writes write_ms (default: read_ms) and flushes
    flush_ms (default: write_ms).

    The 3, 6 and 9 argument forms of Documentation/admin-guide/device-mapper/
    delay.rst: with 9, a bio with REQ_PREFLUSH (an empty flush, or a write
    that asks for one) is the flush class (delay_map() in drivers/md/dm-delay.c,
    Linux 6.1).
    """
    args: list[object] = [dev, offset, read_ms]
    if write_ms is not None or flush_ms is not None:
        args += [dev, offset, read_ms if write_ms is None else write_ms]
    if flush_ms is not None:
        args += [dev, offset, flush_ms]
    return _one(size_sectors, "delay", args)


def zero(size_sectors: int) -> Table:
    return _one(size_sectors, "zero", [])
