"""The dm-log-writes on-disk log: read it (streaming) and write it.

Layout, all little-endian, in units of the log's sector size ``S`` (the
logical block size of the recorded data device):

* block 0 holds ``struct log_write_super {le64 magic; le64 version;
  le64 nr_entries; le32 sectorsize;}``, the rest of the block zero;
* then ``nr_entries`` entries. Each is one ``S``-sized header block,
  ``struct log_write_entry {le64 sector; le64 nr_sectors; le64 flags;
  le64 data_len;}`` followed in the same block by ``data_len`` bytes of
  mark text (marks only; no NUL is counted) and zero padding; then
  ``nr_sectors`` blocks of payload, except for discards, which carry none.

``sector`` and ``nr_sectors`` are in units of ``S``. The kernel target
rewrites the super after every FUA and every mark, so ``nr_entries`` may
lag behind what is on the device; readers trust ``nr_entries``, as
xfstests' replay-log does.
"""

from __future__ import annotations

import enum
import logging
import os
import stat
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from types import TracebackType

from framework.core.errors import LogFormatError
from framework.core.handle import FdHandle

log = logging.getLogger(__name__)

MAGIC = 0x6A736677736872
VERSION = 1
END_MARK = "dm-log-writes-end"
"""The mark the kernel target appends when it is removed."""

HEADER_WINDOW_BYTES = 128 << 10
MIN_SECTORSIZE = 512
MAX_SECTORSIZE = 65536

SUPER = struct.Struct("<QQQI")
"""log_write_super without its tail padding (28 bytes)."""
ENTRY = struct.Struct("<QQQQ")
"""log_write_entry (32 bytes, no padding)."""


class LogFlag(enum.IntFlag):
    NONE = 0
    FLUSH = 1 << 0
    FUA = 1 << 1
    DISCARD = 1 << 2
    MARK = 1 << 3
    METADATA = 1 << 4  # the bio carried REQ_META


KNOWN_FLAGS = int(LogFlag.FLUSH | LogFlag.FUA | LogFlag.DISCARD | LogFlag.MARK | LogFlag.METADATA)
# IntFlag arithmetic builds new members on every operation, which shows up in
# a replay of tens of thousands of entries: the hot paths test plain ints.
_MEMBERS = {bits: LogFlag(bits) for bits in range(KNOWN_FLAGS + 1)}
_FLUSH, _FUA, _DISCARD, _MARK = 1, 2, 4, 8
_has = int.__and__
_FLAG_NAMES = (
    (LogFlag.FLUSH, "FLUSH"),
    (LogFlag.FUA, "FUA"),
    (LogFlag.DISCARD, "DISCARD"),
    (LogFlag.MARK, "MARK"),
    (LogFlag.METADATA, "METADATA"),
)


def flags_str(flags: int) -> str:
    """Flags as replay-log prints them: ``FLUSH|FUA``, or ``NONE``."""
    names = [name for bit, name in _FLAG_NAMES if flags & bit]
    return "|".join(names) if names else "NONE"


def max_mark_bytes(sectorsize: int) -> int:
    """Longest mark text the kernel keeps (it truncates to one byte less than the room)."""
    return sectorsize - ENTRY.size - 1


@dataclass(frozen=True, slots=True)
class LogSuper:
    nr_entries: int
    sectorsize: int


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One log entry; ``sector``/``nr_sectors`` are in units of ``sectorsize``."""

    index: int
    sector: int
    nr_sectors: int
    flags: LogFlag
    data_len: int
    mark: str | None
    header_offset: int
    payload_offset: int
    sectorsize: int

    @property
    def byte_offset(self) -> int:
        """Where on the data device the entry applies."""
        return self.sector * self.sectorsize

    @property
    def byte_length(self) -> int:
        """How many bytes of the data device the entry covers."""
        return self.nr_sectors * self.sectorsize

    @property
    def payload_length(self) -> int:
        """Bytes of payload stored in the log after the header (none for discards)."""
        return 0 if _has(self.flags, _DISCARD) else self.nr_sectors * self.sectorsize

    @property
    def payload_end(self) -> int:
        """Offset in the log just past this entry; the next header starts here."""
        if _has(self.flags, _DISCARD):
            return self.payload_offset
        return self.payload_offset + self.nr_sectors * self.sectorsize

    @property
    def is_mark(self) -> bool:
        return _has(self.flags, _MARK) != 0

    @property
    def is_flush(self) -> bool:
        return _has(self.flags, _FLUSH) != 0

    @property
    def is_fua(self) -> bool:
        return _has(self.flags, _FUA) != 0

    @property
    def is_discard(self) -> bool:
        return _has(self.flags, _DISCARD) != 0

    @property
    def is_write(self) -> bool:
        """Carries payload to write (plain, FUA or flush-with-data write)."""
        return self.nr_sectors > 0 and not _has(self.flags, _DISCARD)


def _is_valid_sectorsize(size: int) -> bool:
    return MIN_SECTORSIZE <= size <= MAX_SECTORSIZE and size & (size - 1) == 0


def _pread_exact(fd: int, length: int, offset: int) -> bytes:
    """pread until ``length`` bytes or end of file (short result means EOF)."""
    chunks: list[bytes] = []
    got = 0
    while got < length:
        chunk = os.pread(fd, length - got, offset + got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class LogReader(FdHandle):
    """Streams a log from a regular file or a block device; never holds payloads.

    Iterating yields entries by reading only their header blocks and
    seeking over payloads. Every problem is a ``LogFormatError`` naming the
    file, the entry index and the byte offset.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        try:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise LogFormatError(f"{self.path}: cannot open log: {exc.strerror}") from exc
        self._window = b""
        self._window_offset = 0
        self._large_gap = False
        self._reading_index = 0
        try:
            mode = os.fstat(self._fd).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISBLK(mode)):
                raise LogFormatError(f"{self.path}: not a regular file or block device")
            # lseek to the end gives the size of block devices as well as files.
            self.size_bytes = os.lseek(self._fd, 0, os.SEEK_END)
            self.super = self._read_super()
        except BaseException:
            os.close(self._fd)
            raise

    @property
    def sectorsize(self) -> int:
        return self.super.sectorsize

    @property
    def nr_entries(self) -> int:
        return self.super.nr_entries

    @property
    def first_entry_offset(self) -> int:
        return self.super.sectorsize

    # -- parsing ---------------------------------------------------------

    def _error(self, what: str, *, index: int | None, offset: int) -> LogFormatError:
        where = "super block" if index is None else f"entry {index}"
        return LogFormatError(f"{self.path}: {where} at byte {offset}: {what}")

    def _pread(self, length: int, offset: int, *, index: int | None) -> bytes:
        """Read up to ``length`` bytes (fewer only at the end); I/O errors name the place."""
        try:
            return _pread_exact(self._fd, length, offset)
        except OSError as exc:
            if index is None:
                raise self._error(f"read failed: {exc.strerror}", index=None, offset=offset) from exc
            raise self.read_failed(index, offset, exc.strerror) from exc

    def _read_super(self) -> LogSuper:
        raw = self._pread(SUPER.size, 0, index=None)
        if len(raw) < SUPER.size:
            raise self._error(
                f"truncated super block ({len(raw)} of {SUPER.size} bytes)", index=None, offset=0
            )
        magic, version, nr_entries, sectorsize = SUPER.unpack(raw)
        if magic != MAGIC:
            raise self._error(
                f"bad magic {magic:#x} (want {MAGIC:#x}); not a dm-log-writes log",
                index=None,
                offset=0,
            )
        if version != VERSION:
            raise self._error(f"unknown version {version} (want {VERSION})", index=None, offset=8)
        if not _is_valid_sectorsize(sectorsize):
            raise self._error(
                f"bad sectorsize {sectorsize} (want a power of two in "
                f"{MIN_SECTORSIZE}..{MAX_SECTORSIZE})",
                index=None,
                offset=24,
            )
        if self.size_bytes < sectorsize:
            raise self._error(
                f"truncated super block ({self.size_bytes} of {sectorsize} bytes)",
                index=None,
                offset=0,
            )
        # Every entry needs at least its header block: a count beyond that is
        # caught here rather than after streaming most of the log.
        room = self.size_bytes // sectorsize - 1
        if nr_entries > room:
            raise self._error(
                f"nr_entries {nr_entries} is beyond the log: {self.size_bytes} bytes hold "
                f"at most {room} entries",
                index=None,
                offset=16,
            )
        return LogSuper(nr_entries=nr_entries, sectorsize=sectorsize)

    def _header_block(self, offset: int) -> bytes:
        """The header block at ``offset`` (short at end of file), via a read-ahead window.

        Logs of small writes pack many headers into a few KiB; reading a
        window serves them with one syscall. After a large payload the next
        header is read alone, so big entries are not read twice.
        """
        size = self.super.sectorsize
        start = offset - self._window_offset
        if start >= 0 and start + size <= len(self._window):
            return self._window[start : start + size]
        want = size if self._large_gap else max(size, HEADER_WINDOW_BYTES)
        self._window = self._pread(want, offset, index=self._reading_index)
        self._window_offset = offset
        return self._window[:size]

    def read_entry(self, index: int, header_offset: int) -> LogEntry:
        """Parse the entry whose header block is at ``header_offset``."""
        # The hot path of every scan and replay: related checks share one test,
        # and a helper works out which one failed, and where, only then.
        size = self.super.sectorsize
        if index >= self.super.nr_entries or header_offset >= self.size_bytes:
            raise self._misplaced_entry(index, header_offset)
        self._reading_index = index
        block = self._header_block(header_offset)
        if len(block) < size:
            raise self._error(
                f"truncated entry header ({len(block)} of {size} bytes)",
                index=index,
                offset=header_offset,
            )
        sector, nr_sectors, flags, data_len = ENTRY.unpack_from(block)
        if flags & ~KNOWN_FLAGS or (flags == 0 and nr_sectors == 0) or data_len > size - ENTRY.size:
            raise self._bad_header(index, header_offset, nr_sectors, flags, data_len)
        # Only a mark's data_len counts text; the rest of the block is padding.
        mark: str | None = None
        text_end = ENTRY.size
        if flags & _MARK:
            text_end += data_len
            # surrogateescape: any bytes round-trip, nothing raises.
            mark = block[ENTRY.size : text_end].decode("utf-8", "surrogateescape")
        padding = block[text_end:]
        if padding.count(0) != len(padding):
            raise self._dirty_padding(index, header_offset + text_end, padding)
        entry = LogEntry(
            index=index,
            sector=sector,
            nr_sectors=nr_sectors,
            flags=_MEMBERS[flags],
            data_len=data_len,
            mark=mark,
            header_offset=header_offset,
            payload_offset=header_offset + size,
            sectorsize=size,
        )
        self._large_gap = entry.payload_length >= HEADER_WINDOW_BYTES // 8
        if entry.payload_end > self.size_bytes:
            raise self._truncated_payload(entry)
        return entry

    def _misplaced_entry(self, index: int, header_offset: int) -> LogFormatError:
        """Why entry ``index`` cannot be at ``header_offset``."""
        if index >= self.super.nr_entries:
            what = f"past the last entry (nr_entries {self.super.nr_entries})"
        else:
            what = f"entry starts past the end of the log ({self.size_bytes} bytes)"
        return self._error(what, index=index, offset=header_offset)

    def _bad_header(
        self, index: int, header_offset: int, nr_sectors: int, flags: int, data_len: int
    ) -> LogFormatError:
        """The first field of a header that no kernel writes, with its offset."""
        if flags & ~KNOWN_FLAGS:
            return self._error(
                f"unknown flag bits {flags & ~KNOWN_FLAGS:#x} in flags {flags:#x}",
                index=index,
                offset=header_offset + 16,
            )
        if flags == 0 and nr_sectors == 0:
            # replay-log rejects this too: a zeroed header means the log ends
            # before nr_entries says it does.
            return self._error(
                "all-zero entry header (log shorter than nr_entries?)",
                index=index,
                offset=header_offset,
            )
        room = self.super.sectorsize - ENTRY.size
        return self._error(
            f"data_len {data_len} larger than the header block ({room} bytes of room)",
            index=index,
            offset=header_offset + 24,
        )

    def _dirty_padding(self, index: int, padding_offset: int, padding: bytes) -> LogFormatError:
        """The first non-zero byte after the header fields and mark text."""
        bad = next(i for i, b in enumerate(padding) if b)
        return self._error(
            "non-zero bytes after the entry header (the kernel zero-fills them)",
            index=index,
            offset=padding_offset + bad,
        )

    def _truncated_payload(self, entry: LogEntry) -> LogFormatError:
        """The log ends inside the entry's payload."""
        present = max(0, self.size_bytes - entry.payload_offset)
        return self._error(
            f"truncated payload ({present} of {entry.payload_length} bytes in the log)",
            index=entry.index,
            offset=entry.payload_offset + present,
        )

    def iter_entries(
        self, start_index: int = 0, start_offset: int | None = None
    ) -> Iterator[LogEntry]:
        """Entries from ``start_index`` on.

        With ``start_offset`` (the header offset of entry ``start_index``,
        e.g. a previous entry's ``payload_end``) no earlier header is read;
        without it, earlier headers are walked to find the place.
        """
        index, offset = 0, self.first_entry_offset
        if start_offset is not None:
            index, offset = start_index, start_offset
        while index < self.super.nr_entries:
            entry = self.read_entry(index, offset)
            if index >= start_index:
                yield entry
            index += 1
            offset = entry.payload_end

    def __iter__(self) -> Iterator[LogEntry]:
        return self.iter_entries()

    def entry(self, index: int) -> LogEntry:
        """The entry with this index (walks the headers before it)."""
        if not 0 <= index < self.super.nr_entries:
            raise LogFormatError(
                f"{self.path}: no entry {index}: the log has {self.super.nr_entries} entries"
            )
        return next(self.iter_entries(index))

    # -- payloads --------------------------------------------------------

    def read_payload(self, entry: LogEntry) -> bytes:
        """The whole payload of one entry (empty for discards, flushes, marks)."""
        data = self._pread(entry.payload_length, entry.payload_offset, index=entry.index)
        if len(data) != entry.payload_length:
            raise self._error(
                f"truncated payload ({len(data)} of {entry.payload_length} bytes)",
                index=entry.index,
                offset=entry.payload_offset + len(data),
            )
        return data

    def readinto(self, view: memoryview, offset: int, *, index: int) -> None:
        """Fill ``view`` from log byte ``offset``; a short read is a truncated payload."""
        got = 0
        total = len(view)
        while got < total:
            try:
                n = os.preadv(self._fd, [view[got:]], offset + got)
            except OSError as exc:
                raise self.read_failed(index, offset + got, exc.strerror) from exc
            if n <= 0:
                raise self.short_read(index, offset + got, got, total)
            got += n

    def read_failed(self, index: int, offset: int, strerror: str | None) -> LogFormatError:
        """A read of entry ``index``'s header or payload failed at ``offset``."""
        return self._error(f"read failed: {strerror}", index=index, offset=offset)

    def short_read(self, index: int, offset: int, got: int, total: int) -> LogFormatError:
        """The log ended at ``offset``, ``got`` bytes into a ``total``-byte read of payload."""
        return self._error(
            f"truncated payload ({got} of {total} bytes readable)", index=index, offset=offset
        )

# -- searching ---------------------------------------------------------------


def find_mark(
    entries: LogReader | Iterable[LogEntry], name: str, *, after: int = -1
) -> LogEntry | None:
    """The first mark named ``name`` with an index above ``after``."""
    for entry in entries:
        if entry.index > after and entry.mark == name:
            return entry
    return None


@dataclass(frozen=True, slots=True)
class LogSummary:
    sectorsize: int
    entries: int
    writes: int
    flushes: int
    fuas: int
    discards: int
    payload_bytes: int
    discard_bytes: int
    marks: tuple[tuple[int, str], ...] = field(default=())
    """(entry index, mark text) in log order."""
    #: What each mark closes, when asked for (summarize(per_mark=True)).
    intervals: tuple[MarkInterval, ...] = field(default=())

    def to_dict(self) -> dict[str, object]:
        return {
            "sectorsize": self.sectorsize,
            "entries": self.entries,
            "writes": self.writes,
            "flushes": self.flushes,
            "fuas": self.fuas,
            "discards": self.discards,
            "payload_bytes": self.payload_bytes,
            "discard_bytes": self.discard_bytes,
            "marks": [{"index": i, "mark": m} for i, m in self.marks],
        }


def summarize(reader: LogReader, *, per_mark: bool = False) -> LogSummary:
    """Counts over the whole log (reads every header, no payload), in one pass; with
    ``per_mark``, also what each mark closes (``intervals``, see by_mark)."""
    counts = _Counts()
    interval = _Counts()
    marks: list[tuple[int, str]] = []
    intervals: list[MarkInterval] = []
    for entry in reader:
        counts.add(entry)
        if entry.mark is not None:
            marks.append((entry.index, entry.mark))
            if per_mark:
                intervals.append(interval.closed_by(entry))
                interval = _Counts()
        elif per_mark:
            interval.add(entry)
    return LogSummary(
        sectorsize=reader.sectorsize,
        entries=counts.entries,
        writes=counts.writes,
        flushes=counts.flushes,
        fuas=counts.fuas,
        discards=counts.discards,
        payload_bytes=counts.payload,
        discard_bytes=counts.discarded,
        marks=tuple(marks),
        intervals=tuple(intervals),
    )


@dataclass(slots=True)
class _Counts:
    entries: int = 0
    writes: int = 0
    flushes: int = 0
    fuas: int = 0
    discards: int = 0
    payload: int = 0
    discarded: int = 0
    #: Writes that do not start where the write before them ended: each begins a new run.
    runs: int = 0
    _end: int | None = None

    def add(self, entry: LogEntry) -> None:
        self.entries += 1
        if entry.is_write:
            self.writes += 1
            self.payload += entry.payload_length
            if entry.byte_offset != self._end:
                self.runs += 1
            self._end = entry.byte_offset + entry.byte_length
        if entry.is_flush:
            self.flushes += 1
        if entry.is_fua:
            self.fuas += 1
        if entry.is_discard:
            self.discards += 1
            self.discarded += entry.byte_length

    def closed_by(self, mark: LogEntry) -> MarkInterval:
        return MarkInterval(mark.mark or "", mark.index, self.entries, self.writes,
                            self.flushes, self.fuas, self.payload, self.runs)


@dataclass(frozen=True, slots=True)
class MarkInterval:
    """What reached the device between one mark and the next: the entries after the mark
    before (or the log's start) up to and including the mark ``mark`` at ``index``.

    The log holds writes in the order they completed, so ``runs`` (writes that do not
    start where the write completed before them ended) counts discontiguous places
    written, not the device's seeks: the block layer may have merged or reordered them.
    """

    mark: str
    index: int
    entries: int
    writes: int
    flushes: int
    fuas: int
    payload_bytes: int
    runs: int

    def to_dict(self) -> dict[str, object]:
        return {"mark": self.mark, "index": self.index, "entries": self.entries,
                "writes": self.writes, "flushes": self.flushes, "fuas": self.fuas,
                "payload_bytes": self.payload_bytes, "runs": self.runs}


def by_mark(reader: LogReader) -> list[MarkInterval]:
    """The log cut at its marks: one interval per mark, in log order (entries after the
    last mark, if any, are left out: no mark closes them)."""
    return list(summarize(reader, per_mark=True).intervals)


# -- writing -----------------------------------------------------------------


class LogWriter:
    """Writes a log laid out byte for byte as the kernel target does.

    Like the kernel, the super is rewritten after every FUA and every mark
    (``update_super=True``) and at close; ``close()`` appends the
    ``dm-log-writes-end`` mark the target adds on removal unless
    ``end_mark=False``. The kernel's super carries four uninitialised tail
    padding bytes; here they are zero, and readers ignore them.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        sectorsize: int = 512,
        update_super: bool = True,
        end_mark: bool = True,
    ) -> None:
        if not _is_valid_sectorsize(sectorsize):
            raise ValueError(f"sectorsize {sectorsize} is not a power of two in 512..65536")
        self.path = os.fspath(path)
        self.sectorsize = sectorsize
        self.update_super = update_super
        self.end_mark = end_mark
        self.nr_entries = 0
        self._offset = sectorsize
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        self._write_super()

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # After an error the log is still closed with a consistent super, but
        # no end mark: the recording did not end cleanly.
        self.close(end_mark=self.end_mark and exc_type is None)

    @property
    def size_bytes(self) -> int:
        return self._offset

    def _write_super(self) -> None:
        block = bytearray(self.sectorsize)
        SUPER.pack_into(block, 0, MAGIC, VERSION, self.nr_entries, self.sectorsize)
        os.pwrite(self._fd, block, 0)

    def _append(self, sector: int, nr_sectors: int, flags: int, text: bytes, payload: bytes) -> int:
        if self._fd < 0:
            raise ValueError(f"{self.path}: log writer is closed")
        block = bytearray(self.sectorsize)
        ENTRY.pack_into(block, 0, sector, nr_sectors, flags, len(text))
        block[ENTRY.size : ENTRY.size + len(text)] = text
        index = self.nr_entries
        # Header and payload in one gathered write, without copying the payload.
        total = len(block) + len(payload)
        written = os.pwritev(self._fd, [block, payload], self._offset)
        if written < total:
            rest = (bytes(block) + payload)[written:]
            while rest:
                n = os.pwrite(self._fd, rest, self._offset + total - len(rest))
                rest = rest[n:]
        self._offset += total
        self.nr_entries += 1
        if self.update_super and flags & (LogFlag.FUA | LogFlag.MARK):
            self._write_super()
        return index

    def write(self, sector: int, data: bytes, flags: LogFlag = LogFlag.NONE) -> int:
        """Log a completed write of ``data`` at ``sector``; returns the entry index."""
        if len(data) == 0 or len(data) % self.sectorsize:
            raise ValueError(
                f"write of {len(data)} bytes is not a positive multiple of {self.sectorsize}"
            )
        if flags & (LogFlag.DISCARD | LogFlag.MARK):
            raise ValueError("use discard() or mark() for discard and mark entries")
        return self._append(sector, len(data) // self.sectorsize, int(flags), b"", data)

    def fua_write(self, sector: int, data: bytes, flags: LogFlag = LogFlag.NONE) -> int:
        return self.write(sector, data, flags | LogFlag.FUA)

    def flush(self) -> int:
        """A data-less REQ_PREFLUSH: sector 0, no sectors, FLUSH."""
        return self._append(0, 0, int(LogFlag.FLUSH), b"", b"")

    def discard(self, sector: int, nr_sectors: int) -> int:
        if nr_sectors <= 0:
            raise ValueError(f"discard of {nr_sectors} sectors")
        return self._append(sector, nr_sectors, int(LogFlag.DISCARD), b"", b"")

    def mark(self, text: str) -> int:
        """A mark as ``dmsetup message ... mark TEXT`` leaves it (truncated like the kernel)."""
        raw = text.encode("utf-8", "surrogateescape")
        limit = max_mark_bytes(self.sectorsize)
        if len(raw) > limit:
            log.warning("mark %r truncated to %d bytes, as the kernel does", text, limit)
            raw = raw[:limit]
        if b"\0" in raw:
            # The kernel copies marks with strndup: text stops at the first NUL.
            raw = raw[: raw.index(b"\0")]
        return self._append(0, 0, int(LogFlag.MARK), raw, b"")

    def sync(self) -> None:
        """Rewrite the super with the current count and fsync."""
        self._write_super()
        os.fsync(self._fd)

    def close(self, *, end_mark: bool | None = None) -> None:
        if self._fd < 0:
            return
        try:
            if self.end_mark if end_mark is None else end_mark:
                self.mark(END_MARK)
            self._write_super()
        finally:
            os.close(self._fd)
            self._fd = -1
