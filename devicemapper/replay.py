"""Replay a dm-log-writes log onto a block device or a regular file.

Replay of entry i writes its payload at ``sector * S``; a discard
BLKDISCARDs (block device) or punches/zeroes (file) ``nr_sectors * S``
bytes at ``sector * S``; flush and mark entries write nothing. This is
what xfstests' replay-log does, so both tools build the same image, with
one deliberate difference: where BLKDISCARD is not available replay-log
leaves discards over 128 MiB alone, while this engine still makes them
read as zeros, as a discarding disk would.

``Replayer`` is incremental: it remembers how far it got, so going from
crash point k to k+1 applies only the entries in between; the total I/O
of visiting every crash point stays near one pass over the log.

For speed the engine reads the log in sequential spans into one reusable
buffer and writes runs of payloads that are adjacent on the target with
one ``pwritev``; nothing is done per sector. The buffer is 1 MiB: with
8 MiB a span no longer sits in the CPU cache between its read and its
write, and bench/replay.py measured 128 MiB of large writes 1.3x slower.
"""

from __future__ import annotations

import bisect
import ctypes
import enum
import errno
import fcntl
import logging
import os
import stat
import struct
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType

from devicemapper.logformat import LogEntry, LogReader
from framework.core.errors import PowercutError, ScratchDeviceError

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
MAX_AHEAD_ENTRIES = 1 << 16
"""Scanned-ahead entries kept in memory (a few MiB); beyond, headers are re-read."""
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


def _fallocate_punch(fd: int, offset: int, length: int) -> bool:
    """Punch a hole keeping the size; False if the filesystem cannot."""
    libc = _libc()
    if libc is None:
        return False
    rc = libc.fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length)
    if rc != 0:
        log.debug("fallocate(PUNCH_HOLE) failed: %s", os.strerror(ctypes.get_errno()))
        return False
    return True


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL | None:
    global _LIBC
    if _LIBC is None:
        try:
            lib = ctypes.CDLL(None, use_errno=True)
            lib.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
            lib.fallocate.restype = ctypes.c_int
        except (OSError, AttributeError):
            return None
        _LIBC = lib
    return _LIBC


def _after(index: int) -> str:
    return " in the log" if index < 0 else f" after entry {index}"


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
            raise ReplayError(
                f"{self.target_name}: entry {index}: write at byte {offset} is beyond any device"
            )
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
            raise ReplayError(
                f"{self.target_name}: entry {index}: writing {total} bytes at byte {offset} "
                f"failed: {exc.strerror}"
            ) from exc
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
    buffer_bytes = min(DEFAULT_BUFFER_BYTES, max(entry.payload_length, reader.sectorsize))
    applier = _Applier(
        reader,
        fd,
        target_name=target_name or f"fd {fd}",
        discard=discard,
        buffer_bytes=buffer_bytes,
    )
    applier.add(entry, sectors)
    applier.flush()
    return applier.stats


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


class Replayer:
    """Replays a log onto a target, forward only, remembering its position.

    Positions are entry indices and inclusive: ``replay_to(5)`` leaves the
    target as the disk was after entry 5. Going backwards is an error:
    start a new Replayer on a fresh target instead.
    """

    def __init__(
        self,
        log_path: str | os.PathLike[str],
        target_path: str | os.PathLike[str],
        *,
        discard: bool = True,
        sync: bool | None = None,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    ) -> None:
        self.reader = LogReader(log_path)
        self.target_path = os.fspath(target_path)
        # sync: the target is never power-cut itself, so the order of its
        # writes is irrelevant and flush entries need no fsync. A block
        # device's other readers bypass the page cache we wrote into (a
        # dm-snapshot or a filesystem submits bios to the device itself), so
        # on a block device each replay call ends with one fsync to make the
        # state visible there. A regular file is read by everything through
        # its page cache: read(2), a loop device's backing-file reads, and
        # O_DIRECT reads, which write dirty pages of their range back first
        # (filemap_write_and_wait_range() in iomap_dio_rw(), Linux 6.1). So
        # by default (None) a file is not fsynced; that was half the time of
        # a 128 MiB replay, measured in bench/replay.py.
        try:
            # No O_CREAT: a mistyped device path must not become a new file.
            self._fd = os.open(self.target_path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as exc:
            self.reader.close()
            raise ReplayError(
                f"{self.target_path}: cannot open replay target: {exc.strerror}"
            ) from exc
        try:
            self._applier = _Applier(
                self.reader,
                self._fd,
                target_name=self.target_path,
                discard=discard,
                buffer_bytes=buffer_bytes,
            )
        except BaseException:
            self.close()
            raise
        self.sync: bool = self._applier.is_block if sync is None else sync
        self._next_index = 0
        self._next_offset = self.reader.first_entry_offset
        self.last_entry: LogEntry | None = None
        # What scanning has seen so far, so repeated searches do not re-read
        # headers: entries below _seen_index are indexed here.
        self._seen_index = 0
        self._seen_offset = self.reader.first_entry_offset
        self._marks: dict[str, list[int]] = {}
        self._fuas: list[int] = []
        self._flushes: list[int] = []
        # Entries a search scanned but that are not applied yet, contiguous
        # from the position: applying them next needs no second header read.
        self._ahead: deque[LogEntry] = deque()
        self._failed = False

    # -- lifecycle -------------------------------------------------------

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.reader.close()

    def __enter__(self) -> Replayer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- state -----------------------------------------------------------

    @property
    def position(self) -> int:
        """Index of the next entry to apply (entries below it are on the target)."""
        return self._next_index

    @property
    def entries_applied(self) -> int:
        return self._applier.entries_applied

    @property
    def bytes_written(self) -> int:
        return self._applier.bytes_written

    @property
    def bytes_discarded(self) -> int:
        return self._applier.bytes_discarded

    @property
    def nr_entries(self) -> int:
        return self.reader.nr_entries

    # -- scanning --------------------------------------------------------

    def _note(self, entry: LogEntry) -> None:
        if entry.index != self._seen_index:
            return
        if entry.mark is not None:
            self._marks.setdefault(entry.mark, []).append(entry.index)
        if entry.is_fua:
            self._fuas.append(entry.index)
        if entry.is_flush:
            self._flushes.append(entry.index)
        self._seen_index = entry.index + 1
        self._seen_offset = entry.payload_end

    def _scan_for(self, known: list[int] | Callable[[], list[int]], after: int) -> int | None:
        """First index above ``after`` in an index list, scanning headers as needed."""
        while True:
            found = known() if callable(known) else known
            i = bisect.bisect_right(found, after)
            if i < len(found):
                return found[i]
            if self._seen_index >= self.reader.nr_entries:
                return None
            # Scan on in chunks so a hit near the frontier stops early.
            for scanned, entry in enumerate(
                self.reader.iter_entries(self._seen_index, self._seen_offset), 1
            ):
                self._note(entry)
                self._keep_ahead(entry)
                if scanned >= 256:
                    break

    def _keep_ahead(self, entry: LogEntry) -> None:
        expected = self._ahead[-1].index + 1 if self._ahead else self._next_index
        if entry.index == expected and len(self._ahead) < MAX_AHEAD_ENTRIES:
            self._ahead.append(entry)

    # -- replaying -------------------------------------------------------

    def replay_to(self, entry_index: int) -> LogEntry | None:
        """Apply entries up to and including ``entry_index``; returns that entry."""
        if entry_index >= self.reader.nr_entries:
            raise ReplayError(
                f"{self.reader.path}: no entry {entry_index}: the log has "
                f"{self.reader.nr_entries} entries"
            )
        if entry_index < self._next_index - 1:
            raise ReplayError(
                f"{self.target_path}: already replayed through entry {self._next_index - 1}; "
                f"cannot go back to entry {entry_index} (replay onto a fresh target)"
            )
        self._advance(entry_index + 1)
        return self.last_entry

    def replay_range(
        self, start: int, stop: int, *, until: Callable[[LogEntry], bool] | None = None
    ) -> LogEntry | None:
        """Apply entries ``start <= i < stop``, skipping any between the position and ``start``.

        ``until``, if given, is asked about each entry once it is applied, and
        the replay stops after the first one it answers True for: a stop rule
        costs no second pass over the headers.
        """
        if start < self._next_index:
            raise ReplayError(
                f"{self.target_path}: already replayed through entry {self._next_index - 1}; "
                f"cannot start at entry {start}"
            )
        if stop > self.reader.nr_entries or stop < start:
            raise ReplayError(
                f"{self.reader.path}: bad entry range {start}..{stop} "
                f"(the log has {self.reader.nr_entries} entries)"
            )
        # Walk (headers only) over the entries being skipped.
        while self._ahead and self._ahead[0].index < start:
            entry = self._ahead.popleft()
            self._next_index, self._next_offset = entry.index + 1, entry.payload_end
        if self._next_index < start:
            for entry in self.reader.iter_entries(self._next_index, self._next_offset):
                if entry.index >= start:
                    break
                self._note(entry)
                self._next_index, self._next_offset = entry.index + 1, entry.payload_end
        self._advance(stop, until)
        return self.last_entry

    def replay_to_mark(self, name: str, *, after: int = -1) -> LogEntry:
        """Replay through the first mark ``name`` with an index above ``after``."""
        return self._replay_first(lambda: self._marks.get(name, []), after, f"mark {name!r}")

    def replay_next_fua(self, after: int) -> LogEntry:
        """Replay through the first FUA entry with an index above ``after``."""
        return self._replay_first(self._fuas, after, "FUA entry")

    def replay_next_flush(self, after: int) -> LogEntry:
        """Replay through the first flush entry with an index above ``after``."""
        return self._replay_first(self._flushes, after, "flush entry")

    def _replay_first(self, found: list[int] | Callable[[], list[int]], after: int, what: str) -> LogEntry:
        """Replay through the first entry ``found`` lists above ``after``."""
        index = self._scan_for(found, after)
        if index is None:
            raise ReplayError(f"{self.reader.path}: no {what}{_after(after)}")
        entry = self.replay_to(index)
        assert entry is not None
        return entry

    def _advance(self, stop: int, until: Callable[[LogEntry], bool] | None = None) -> None:
        """Apply entries from the position up to (not including) ``stop``, or through the
        first entry ``until`` answers True for."""
        if self._failed:
            raise ReplayError(
                f"{self.target_path}: an earlier replay step failed, so the target is in "
                "an unknown state; replay onto a fresh target"
            )
        if stop <= self._next_index:
            return
        add = self._applier.add
        last: LogEntry | None = None
        try:
            while self._ahead and self._next_index < stop:
                last = self._ahead.popleft()
                add(last)
                self._next_index = last.index + 1
                if until is not None and until(last):
                    stop = self._next_index
            if self._next_index < stop:
                if last is not None:
                    self._next_offset = last.payload_end
                # The per-entry loop is the hot path of a replay: position
                # bookkeeping happens once, after it.
                for entry in self.reader.iter_entries(self._next_index, self._next_offset):
                    if entry.index == self._seen_index:
                        self._note(entry)
                    add(entry)
                    last = entry
                    if entry.index + 1 >= stop or (until is not None and until(entry)):
                        break
            self._applier.flush()
            if self.sync:
                os.fsync(self._fd)
        except BaseException:
            self._failed = True
            raise
        finally:
            if last is not None:
                self.last_entry = last
                self._next_index = last.index + 1
                self._next_offset = last.payload_end


def require_unused(target: str | os.PathLike[str]) -> None:
    """Refuse a block device that is mounted or held by another device.

    For paths a user names: O_EXCL on a block device fails with EBUSY while
    a filesystem, a dm table or another exclusive opener holds it, so a
    mistyped path cannot overwrite a live filesystem. Not for the engine's
    own replay disks, which dm-snapshot claims while they are in use.
    """
    path = os.fspath(target)
    try:
        if not stat.S_ISBLK(os.stat(path).st_mode):
            return
        fd = os.open(path, os.O_RDONLY | os.O_EXCL | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # Replayer reports a missing target itself
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            raise ScratchDeviceError(
                f"{path}: in use (mounted, or held by another device); refusing to replay onto it"
            ) from None
        raise ReplayError(f"{path}: cannot open replay target: {exc.strerror}") from exc
    os.close(fd)
