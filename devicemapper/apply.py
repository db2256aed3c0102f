"""Entries of a dm-log-writes log written onto an open target: the replay's hands.

Replay of entry i writes its payload at ``sector * S``; a discard
BLKDISCARDs (block device) or punches/zeroes (file) ``nr_sectors * S``
bytes at ``sector * S``; flush and mark entries write nothing. This is
what xfstests' replay-log does, so both tools build the same image, with
one deliberate difference: where BLKDISCARD is not available replay-log
leaves discards over 128 MiB alone, while this engine still makes them
read as zeros, as a discarding disk would.

For speed the applier reads the log in sequential spans into one reusable
buffer and writes runs of payloads that are adjacent on the target with
one ``pwritev``; nothing is done per sector. The buffer is 1 MiB: with
8 MiB a span no longer sits in the CPU cache between its read and its
write, and bench/replay.py measured 128 MiB of large writes 1.3x slower.
devicemapper/native.py runs the same loop in C; this is the reference.
"""

from __future__ import annotations

import bisect
import enum
import errno
import fcntl
import logging
import os
import stat
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from devicemapper.logformat import LogEntry, LogReader
from framework.core.errors import PowercutError

if TYPE_CHECKING:
    import ctypes

log = logging.getLogger(__name__)

DEFAULT_BUFFER_BYTES = 1 << 20
"""Log bytes read per span: enough to amortise syscalls over 256 4 KiB writes, small
enough to stay in the CPU cache between the read and the write."""
MAX_SPAN_GAP_BYTES = 256 << 10
"""A subset may skip entries; a hole up to this size is read through rather than re-seeked."""
MAX_DISCARD_CHUNK_BYTES = 1 << 30
"""One BLKDISCARD at most this large, as replay-log does, to keep each ioctl short."""
DISCARD_PROBE_BYTES = 64 << 10
MIN_PUNCH_BYTES = 1 << 20
"""Discards on a file smaller than this are written as zeros instead of punched."""
MAX_OFFSET = (1 << 63) - 1
"""off_t is signed 64-bit: a sector past this came from a corrupt log."""

BLKDISCARD = 0x1277  # _IO(0x12, 119)
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02

_IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024)
_ZEROS = bytes(1 << 20)


class DiscardMethod(enum.StrEnum):
    IOCTL = "ioctl"  # BLKDISCARD on a block device
    PUNCH = "punch"  # fallocate(PUNCH_HOLE) on a file
    ZERO = "zero"  # write zeros: the fallback that always works


class ReplayError(PowercutError):
    """A replay could not be done as asked (bad position, unwritable target)."""


@dataclass(frozen=True, slots=True)
class ApplyStats:
    entries_applied: int
    bytes_written: int
    bytes_discarded: int


def beyond_any_device(target_name: str, index: int, offset: int) -> ReplayError:
    """Entry ``index`` writes past any device (off_t is signed 64-bit)."""
    return ReplayError(f"{target_name}: entry {index}: write at byte {offset} is beyond any device")


def write_failed(
    target_name: str, index: int, total: int, offset: int, strerror: str | None
) -> ReplayError:
    """Writing a run of ``total`` bytes that starts with entry ``index`` failed."""
    return ReplayError(
        f"{target_name}: entry {index}: writing {total} bytes at byte {offset} failed: {strerror}"
    )


def _fallocate_punch(fd: int, offset: int, length: int) -> bool:
    """Punch a hole keeping the size; False if the filesystem cannot."""
    libc = _libc()
    if libc is None:
        return False
    rc = libc.fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length)
    if rc != 0:
        import ctypes

        log.debug("fallocate(PUNCH_HOLE) failed: %s", os.strerror(ctypes.get_errno()))
        return False
    return True


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL | None:
    global _LIBC
    if _LIBC is None:
        # Imported here, not at the top: only a discard onto a file needs it, and every
        # command that replays would pay its load at start.
        import ctypes

        try:
            lib = ctypes.CDLL(None, use_errno=True)
            lib.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
            lib.fallocate.restype = ctypes.c_int
        except (OSError, AttributeError):
            return None
        _LIBC = lib
    return _LIBC


def _pieces(entry: LogEntry, sectors: range | None) -> list[tuple[int, int]]:
    """(offset within the entry, length) byte pieces covering ``sectors`` of it."""
    size = entry.sectorsize
    if sectors is None:
        return [(0, entry.byte_length)] if entry.nr_sectors else []
    if sectors.step == 1:
        if len(sectors) == 0:
            return []
        if sectors.start < 0 or sectors.stop > entry.nr_sectors:
            raise ReplayError(
                f"entry {entry.index}: sectors {sectors} outside the entry's "
                f"{entry.nr_sectors} sectors"
            )
        return [(sectors.start * size, len(sectors) * size)]
    chosen = sorted(set(sectors))
    if chosen and (chosen[0] < 0 or chosen[-1] >= entry.nr_sectors):
        raise ReplayError(
            f"entry {entry.index}: sectors {sectors} outside the entry's {entry.nr_sectors} sectors"
        )
    out: list[tuple[int, int]] = []
    for s in chosen:
        if out and out[-1][0] + out[-1][1] == s * size:
            out[-1] = (out[-1][0], out[-1][1] + size)
        else:
            out.append((s * size, size))
    return out


class _Applier:
    """Applies entries to one open target, batching reads and writes.

    Writes are queued until a discard (order matters), a full buffer or
    ``flush()``; queued writes are issued in entry order, so an overlapping
    later write still wins.
    """

    def __init__(
        self,
        reader: LogReader,
        fd: int,
        *,
        target_name: str,
        discard: bool = True,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    ) -> None:
        self.reader = reader
        self.fd = fd
        self.target_name = target_name
        self.discard = discard
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISBLK(mode)):
            raise ReplayError(f"{target_name}: not a regular file or block device")
        self.is_block = stat.S_ISBLK(mode)
        self._buf = bytearray(max(buffer_bytes, reader.sectorsize))
        self._view = memoryview(self._buf)
        # Queued writes: (log offset, length, target offset, entry index).
        self._queue: list[tuple[int, int, int, int]] = []
        self._span_start = 0
        self._span_end = 0
        self._discard_method = DiscardMethod.IOCTL if self.is_block else DiscardMethod.PUNCH
        self._discard_verified = False
        self.entries_applied = 0
        self.bytes_written = 0
        self.bytes_discarded = 0

    @property
    def stats(self) -> ApplyStats:
        return ApplyStats(self.entries_applied, self.bytes_written, self.bytes_discarded)

    # -- entries ---------------------------------------------------------

    def add(self, entry: LogEntry, sectors: range | None = None) -> None:
        if entry.is_discard:
            if self.discard:
                self.flush()
                for rel, length in _pieces(entry, sectors):
                    self._discard(entry.byte_offset + rel, length, entry.index)
        elif entry.is_write:
            if sectors is None:  # the common case, kept lean: it runs per entry
                self._enqueue(
                    entry.payload_offset,
                    entry.nr_sectors * entry.sectorsize,
                    entry.sector * entry.sectorsize,
                    entry.index,
                )
                self.entries_applied += 1
                return
            for rel, length in _pieces(entry, sectors):
                self._enqueue(
                    entry.payload_offset + rel, length, entry.byte_offset + rel, entry.index
                )
        # Flush and mark entries write nothing, and a flush needs no fsync
        # of the target either: the target is never power-cut itself, so
        # the order in which its writes reach the media cannot matter. The
        # Replayer fsyncs once per call, for readers that bypass our page
        # cache (a dm-snapshot over the device).
        self.entries_applied += 1

    def add_latest(self, entries: Sequence[LogEntry], pieces: Iterable[Piece]) -> None:
        """Apply ``entries`` (consecutive, in log order) as ``latest_pieces`` planned them:
        each target block once, as the latest of them left it."""
        if entries:
            self.extend_to(max((e.byte_offset + e.byte_length for e in entries if e.is_write),
                               default=0))
        first = entries[0].index if entries else 0
        for index, sector, nr_sectors, is_discard in pieces:
            entry = entries[index - first]
            size = entry.sectorsize
            if is_discard:
                self.flush()
                self._discard((entry.sector + sector) * size, nr_sectors * size, index)
            else:
                self._enqueue(entry.payload_offset + sector * size, nr_sectors * size,
                              (entry.sector + sector) * size, index)
        self.entries_applied += len(entries)

    def extend_to(self, end: int) -> None:
        """Grow a file target to ``end`` bytes, as the writes of a planned range would have:
        a write left out because a later discard covers it still made the file longer."""
        if not self.is_block and end > self._target_size():
            try:
                os.ftruncate(self.fd, end)
            except OSError as exc:
                raise ReplayError(
                    f"{self.target_name}: growing the file to {end} bytes failed: {exc.strerror}"
                ) from exc

    def _enqueue(self, log_off: int, length: int, target_off: int, index: int) -> None:
        cap = len(self._buf)
        if length > cap:
            self.flush()
            self._stream(log_off, length, target_off, index)
            return
        if self._queue and (
            log_off < self._span_end
            or log_off - self._span_end > MAX_SPAN_GAP_BYTES
            or log_off + length - self._span_start > cap
        ):
            self.flush()
        if not self._queue:
            self._span_start = self._span_end = log_off
        self._queue.append((log_off, length, target_off, index))
        self._span_end = log_off + length

    def _stream(self, log_off: int, length: int, target_off: int, index: int) -> None:
        """A payload bigger than the buffer, in buffer-sized pieces."""
        cap = len(self._buf)
        done = 0
        while done < length:
            n = min(cap, length - done)
            self.reader.readinto(self._view[:n], log_off + done, index=index)
            self._writev([self._view[:n]], target_off + done, index)
            done += n

    def flush(self) -> None:
        """Issue every queued write."""
        if not self._queue:
            return
        queue, self._queue = self._queue, []
        base = self._span_start
        span = self._span_end - base
        self.reader.readinto(self._view[:span], base, index=queue[0][3])
        run: list[memoryview] = []
        run_start = run_end = 0
        run_index = queue[0][3]
        for log_off, length, target_off, index in queue:
            piece = self._view[log_off - base : log_off - base + length]
            if run and target_off == run_end and len(run) < _IOV_MAX:
                run.append(piece)
                run_end += length
                continue
            if run:
                self._writev(run, run_start, run_index)
            run = [piece]
            run_start, run_end, run_index = target_off, target_off + length, index
        if run:
            self._writev(run, run_start, run_index)

    def _writev(self, pieces: list[memoryview], offset: int, index: int) -> None:
        total = sum(len(p) for p in pieces)
        if offset + total > MAX_OFFSET:
            raise beyond_any_device(self.target_name, index, offset)
        try:
            written = os.pwritev(self.fd, pieces, offset)
            if written < total:
                # A short gathered write (signal, device end): finish it piecewise.
                rest = memoryview(b"".join(pieces))[written:]
                while rest:
                    n = os.pwrite(self.fd, rest, offset + total - len(rest))
                    if n <= 0:
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                    rest = rest[n:]
        except OSError as exc:
            raise write_failed(self.target_name, index, total, offset, exc.strerror) from exc
        self.bytes_written += total

    # -- discards --------------------------------------------------------

    def _target_size(self) -> int:
        if self.is_block:
            return os.lseek(self.fd, 0, os.SEEK_END)
        return os.fstat(self.fd).st_size

    def _discard(self, offset: int, length: int, index: int) -> None:
        # Past the end of a file there is nothing to zero (a later write
        # extends it with zeros); past the end of a device there is no disk.
        size = self._target_size()
        if offset >= size:
            log.debug(
                "entry %d: discard at byte %d beyond the target (%d bytes)", index, offset, size
            )
            return
        if offset + length > size:
            length = size - offset
        done = 0
        while done < length:
            n = min(MAX_DISCARD_CHUNK_BYTES, length - done)
            self._discard_chunk(offset + done, n, index)
            done += n
        self.bytes_discarded += length

    def _discard_chunk(self, offset: int, length: int, index: int) -> None:
        if not self.is_block:
            self._clear_file_range(offset, length, index)
            return
        if self._discard_method == DiscardMethod.IOCTL:
            try:
                fcntl.ioctl(self.fd, BLKDISCARD, struct.pack("=QQ", offset, length))
            except OSError as exc:
                log.info(
                    "%s: BLKDISCARD failed (%s); discards are written as zeros",
                    self.target_name,
                    exc.strerror,
                )
                self._discard_method = DiscardMethod.ZERO
            else:
                self._verify_zeros(offset, length)
        if self._discard_method == DiscardMethod.ZERO:
            self._zero(offset, length, index)

    def _clear_file_range(self, offset: int, length: int, index: int) -> None:
        """Make a file range read as zeros, touching only the parts holding data.

        A discard mostly lands where nothing was written yet, which
        SEEK_DATA finds without I/O. Small data parts are written as zeros:
        punching makes the filesystem write back and drop the range's cached
        pages in a journal transaction, milliseconds each. Big parts are
        punched, which keeps the image sparse (mkfs discards whole devices).
        """
        end = offset + length
        pos = offset
        while pos < end:
            try:
                start = os.lseek(self.fd, pos, os.SEEK_DATA)
                stop = min(os.lseek(self.fd, start, os.SEEK_HOLE), end)
            except OSError as exc:
                if exc.errno == errno.ENXIO:
                    return  # nothing but holes from pos to the end of the file
                start, stop = pos, end  # no SEEK_DATA here: treat it all as data
            if start >= end:
                return
            size = stop - start
            if self._discard_method == DiscardMethod.PUNCH and size >= MIN_PUNCH_BYTES:
                if _fallocate_punch(self.fd, start, size):
                    self._verify_zeros(start, size)
                else:
                    log.info("%s: cannot punch holes; writing zeros", self.target_name)
                    self._discard_method = DiscardMethod.ZERO
            if self._discard_method == DiscardMethod.ZERO or size < MIN_PUNCH_BYTES:
                self._zero(start, size, index)
            pos = stop

    def _verify_zeros(self, offset: int, length: int) -> None:
        """Check once that a discarded range reads back as zeros, else write zeros from now on."""
        if self._discard_verified:
            return
        # A device may discard without reading back zeros afterwards; a
        # replayed image must not depend on that.
        self._discard_verified = True
        probe = os.pread(self.fd, min(length, DISCARD_PROBE_BYTES), offset)
        if probe.count(0) != len(probe):
            log.info(
                "%s: discarded range does not read back as zeros; writing zeros instead",
                self.target_name,
            )
            self._discard_method = DiscardMethod.ZERO

    def _zero(self, offset: int, length: int, index: int) -> None:
        zeros = memoryview(_ZEROS)
        done = 0
        while done < length:
            n = min(length - done, len(_ZEROS) * _IOV_MAX)
            full, tail = divmod(n, len(_ZEROS))
            pieces = [zeros] * full + ([zeros[:tail]] if tail else [])
            try:
                written = os.pwritev(self.fd, pieces, offset + done)
            except OSError as exc:
                raise ReplayError(
                    f"{self.target_name}: entry {index}: zeroing {n} bytes at byte "
                    f"{offset + done} failed: {exc.strerror}"
                ) from exc
            if written <= 0:
                raise ReplayError(
                    f"{self.target_name}: entry {index}: zeroing at byte {offset + done} "
                    "wrote nothing"
                )
            done += written


Piece = tuple[int, int, int, bool]
"""(entry index, first sector within the entry, sectors, is a discard)."""


def latest_pieces(entries: Iterable[LogEntry], *, discard: bool = True) -> list[Piece]:
    """The parts of ``entries`` that no later one among them overwrites, in log order.

    Applied in any order they leave the target as applying every entry in order does:
    they are disjoint, and each holds what the latest entry covering it wrote (a
    discard overwrites too, when discards are applied, with zeros). What a range of a
    replay writes is then each target block once. The file size is the one thing they
    do not carry: ``_Applier.add_latest`` grows a file first.
    """
    # Walked from the last entry back, keeping the union of what later entries cover
    # as sorted disjoint [start, end) sector intervals.
    starts: list[int] = []
    ends: list[int] = []
    out: list[Piece] = []
    for entry in reversed(list(entries)):
        if not entry.nr_sectors or (entry.is_discard and not discard):
            continue
        lo, hi = entry.sector, entry.sector + entry.nr_sectors
        pos = lo
        for k in range(bisect.bisect_right(ends, lo), len(starts)):
            if starts[k] >= hi:
                break
            if starts[k] > pos:
                out.append((entry.index, pos - lo, starts[k] - pos, entry.is_discard))
            pos = max(pos, ends[k])
        if pos < hi:
            out.append((entry.index, pos - lo, hi - pos, entry.is_discard))
        # Cover [lo, hi), merging with every interval it touches.
        i, j = bisect.bisect_left(ends, lo), bisect.bisect_right(starts, hi)
        if i < j:
            lo, hi = min(lo, starts[i]), max(hi, ends[j - 1])
        starts[i:j], ends[i:j] = [lo], [hi]
    out.sort()
    return out


def apply_entry(
    entry: LogEntry,
    reader: LogReader,
    fd: int,
    *,
    sectors: range | None = None,
    discard: bool = True,
    target_name: str | None = None,
) -> ApplyStats:
    """Apply one entry to the open target ``fd``; ``sectors`` (indices within
    the entry) applies only part of it, e.g. a torn write."""
    return apply_entries([entry], reader, fd, discard=discard,
                         torn=None if sectors is None else {entry.index: sectors},
                         target_name=target_name,
                         buffer_bytes=min(DEFAULT_BUFFER_BYTES,
                                          max(entry.payload_length, reader.sectorsize)))


def apply_entries(
    entries: Iterable[LogEntry],
    reader: LogReader,
    fd: int,
    *,
    discard: bool = True,
    torn: Mapping[int, range] | None = None,
    target_name: str | None = None,
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
) -> ApplyStats:
    """Apply any subset of entries, in the order given.

    ``torn`` maps an entry index to the sectors (indices within that
    entry) that reach the disk; other entries apply whole.
    """
    applier = _Applier(
        reader,
        fd,
        target_name=target_name or f"fd {fd}",
        discard=discard,
        buffer_bytes=buffer_bytes,
    )
    torn = torn or {}
    for entry in entries:
        applier.add(entry, torn.get(entry.index))
    applier.flush()
    return applier.stats


#: _IO(0x12, 127) in include/uapi/linux/fs.h: zero a byte range of a block device.
BLKZEROOUT = 0x127F


def zero_target(path: str | os.PathLike[str]) -> None:
    """Zero a replay target (a block device with BLKZEROOUT, else written with zeros), so a
    replay can start again from the state before the log's first entry."""
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        size = os.lseek(fd, 0, os.SEEK_END)
        try:
            fcntl.ioctl(fd, BLKZEROOUT, struct.pack("QQ", 0, size))
        except OSError:
            chunk = bytes(1 << 20)
            for offset in range(0, size, len(chunk)):
                os.pwrite(fd, chunk[: size - offset], offset)
        os.fsync(fd)
    finally:
        os.close(fd)
