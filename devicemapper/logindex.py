"""An index of a log's headers: five integers per entry and the marks, grown on demand.

A checking guest walks every header of a log once (hundreds of thousands of entries)
and keeps them while it replays states; a ``LogEntry`` object per entry costs time and
memory there. The index keeps each entry as five uint64 in one ``array('Q')`` (sector,
nr_sectors, flags, data_len, header offset; the payload follows the header block), the
mark texts in a dict, and builds a ``LogEntry`` only when one is asked for. The
compiled walk (devicemapper/native.py) fills it in C; without it the reference parser,
``LogReader.iter_entries``, does, and both give the same records, marks and errors.

The index grows as far as it is asked (``extend_to``), so a replay to an early entry
reads no later header, and a corrupt header is reported only once something needs it.
"""

from __future__ import annotations

import bisect
import itertools
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import overload

from devicemapper import native
from devicemapper.logformat import _DISCARD, _MEMBERS, HEADER_WINDOW_BYTES, LogEntry, LogReader
from framework.core.errors import LogFormatError

GROW_ENTRIES = 4096
"""Entries indexed per step while a search looks for the next FUA, flush or mark."""


class LogIndex(Sequence[LogEntry]):
    """The first ``len(self)`` entries of the log ``reader`` reads (which must stay open)."""

    def __init__(self, reader: LogReader, *, native_walk: bool | None = None) -> None:
        self.reader = reader
        self._lib = native.library(native_walk)
        self.records = array("Q")
        self.marks: dict[int, str] = {}
        """Mark text by entry index."""
        self._by_name: dict[str, list[int]] = {}
        self._next_offset = reader.first_entry_offset

    @property
    def native(self) -> bool:
        """Whether the compiled walk fills this index."""
        return self._lib is not None

    @property
    def complete(self) -> bool:
        return len(self) >= self.reader.nr_entries

    def __len__(self) -> int:
        return len(self.records) // native.FIELDS

    # -- growing -----------------------------------------------------------

    def extend_to(self, stop: int) -> None:
        """Index the entries below ``stop``; the first bad header among them raises
        ``LogFormatError``, after the entries before it are indexed."""
        stop = min(stop, self.reader.nr_entries)
        if len(self) >= stop:
            return
        if self._lib is None:
            self._walk_python(stop)
        else:
            self._walk_native(stop)

    def _walk_python(self, stop: int) -> None:
        extend = self.records.extend
        for entry in self.reader.iter_entries(len(self), self._next_offset):
            extend((entry.sector, entry.nr_sectors, entry.flags, entry.data_len,
                    entry.header_offset))
            if entry.mark is not None:
                self._add_mark(entry.index, entry.mark)
            self._next_offset = entry.payload_end
            if entry.index + 1 >= stop:
                break

    def _walk_native(self, stop: int) -> None:
        assert self._lib is not None
        r = self.reader
        records, marks, _, offset, failure = self._lib.walk(
            r.fileno(), r.size_bytes, r.sectorsize, r.nr_entries, len(self), self._next_offset,
            stop, HEADER_WINDOW_BYTES)
        self.absorb(records, marks, offset)
        if failure is not None:
            raise native.walk_error(r, failure)

    @property
    def next_offset(self) -> int:
        """Where the header of the first entry not indexed yet starts."""
        return self._next_offset

    def absorb(self, records: bytes, marks: list[tuple[int, bytes]], next_offset: int) -> None:
        """Add what a compiled walk indexed after the last entry: its records, its marks
        and where it stopped."""
        self.records.frombytes(records)
        for index, text in marks:
            # surrogateescape, as LogReader decodes marks: any bytes round-trip.
            self._add_mark(index, text.decode("utf-8", "surrogateescape"))
        self._next_offset = next_offset

    def _add_mark(self, index: int, text: str) -> None:
        self.marks[index] = text
        self._by_name.setdefault(text, []).append(index)

    # -- entries -----------------------------------------------------------

    def entry(self, i: int) -> LogEntry:
        """Entry ``i`` (indexed already) as the reader would parse it."""
        base = i * native.FIELDS
        sector, nr_sectors, flags, data_len, header = self.records[base : base + native.FIELDS]
        size = self.reader.sectorsize
        return LogEntry(index=i, sector=sector, nr_sectors=nr_sectors, flags=_MEMBERS[flags],
                        data_len=data_len, mark=self.marks.get(i), header_offset=header,
                        payload_offset=header + size, sectorsize=size)

    @overload
    def __getitem__(self, i: int) -> LogEntry: ...

    @overload
    def __getitem__(self, i: slice) -> list[LogEntry]: ...

    def __getitem__(self, i: int | slice) -> LogEntry | list[LogEntry]:
        n = len(self)
        if isinstance(i, slice):
            return [self.entry(k) for k in range(*i.indices(n))]
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"entry {i} is not indexed ({n} are)")
        return self.entry(i)

    def __iter__(self) -> Iterator[LogEntry]:
        return (self.entry(i) for i in range(len(self)))

    def content_changes(self) -> list[int]:
        """``out[i]``: how many of the first ``i`` entries change the disk (writes and
        discards); two prefixes hold the same bytes when their counts are equal."""
        records, fields = self.records, native.FIELDS
        changes = (nr > 0 or flags & _DISCARD != 0 for nr, flags in zip(
            records[native.NR_SECTORS :: fields], records[native.FLAGS :: fields]))
        return list(itertools.accumulate(changes, initial=0))

    def payload_end(self, i: int) -> int:
        """Byte offset just past entry ``i``: where entry ``i + 1``'s header starts."""
        base = i * native.FIELDS
        nr, flags = self.records[base + native.NR_SECTORS], self.records[base + native.FLAGS]
        size = self.reader.sectorsize
        end = self.records[base + native.HEADER_OFFSET] + size
        return end if flags & _DISCARD else end + nr * size  # a discard carries no payload

    # -- searching ---------------------------------------------------------

    def find(self, flags: int, after: int) -> int | None:
        """The first entry above ``after`` with one of ``flags``, indexing on as needed."""
        return self._search(lambda start: self._find_indexed(flags, start), after)

    def find_mark(self, name: str, after: int) -> int | None:
        """The first mark ``name`` above ``after``, indexing on as needed."""

        def indexed(start: int) -> int | None:
            found = self._by_name.get(name, [])
            k = bisect.bisect_left(found, start)
            return found[k] if k < len(found) else None

        return self._search(indexed, after)

    def _search(self, indexed: Callable[[int], int | None], after: int) -> int | None:
        # A bad header is reported only if the search had to read past it.
        start = after + 1
        while True:
            found = indexed(start)
            if found is not None or self.complete:
                return found
            start = max(start, len(self))
            try:
                self.extend_to(len(self) + GROW_ENTRIES)
            except LogFormatError:
                found = indexed(start)
                if found is not None:
                    return found
                raise

    def _find_indexed(self, flags: int, start: int) -> int | None:
        if self._lib is not None:
            found: int = self._lib.find_flags(self.records, max(start, 0), len(self), flags)
            return found if found >= 0 else None
        records, fields, column = self.records, native.FIELDS, native.FLAGS
        return next((i for i in range(max(start, 0), len(self))
                     if records[i * fields + column] & flags), None)
