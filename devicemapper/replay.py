"""Replay a dm-log-writes log onto a block device or a regular file.

``Replayer`` is incremental: it remembers how far it got, so going from
crash point k to k+1 applies only the entries in between; the total I/O
of visiting every crash point stays near one pass over the log.

The writing itself is devicemapper/apply.py's (and devicemapper/native.py's,
in C, when it is built): each entry as xfstests' replay-log writes it, with
the one difference said there.
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import stat
from collections import deque
from collections.abc import Callable

from devicemapper.apply import (
    _IOV_MAX,
    DEFAULT_BUFFER_BYTES,
    MAX_SPAN_GAP_BYTES,
    ApplyStats,
    ReplayError,
    _Applier,
    apply_entries,
    apply_entry,
    latest_pieces,
    zero_target,
)
from devicemapper.logformat import HEADER_WINDOW_BYTES, LogEntry, LogFlag, LogReader
from devicemapper.logindex import LogIndex
from devicemapper.native import apply_error, library
from framework.core.errors import LogFormatError, ScratchDeviceError
from framework.core.handle import FdHandle

__all__ = [
    "ApplyStats",
    "ReplayError",
    "Replayer",
    "apply_entries",
    "apply_entry",
    "require_unused",
    "zero_target",
]

log = logging.getLogger(__name__)

MAX_AHEAD_ENTRIES = 1 << 16
"""Scanned-ahead entries kept in memory (a few MiB); beyond, headers are re-read."""


def _after(index: int) -> str:
    return " in the log" if index < 0 else f" after entry {index}"


class Replayer(FdHandle):
    """Replays a log onto a target, forward only, remembering its position.

    Positions are entry indices and inclusive: ``replay_to(5)`` leaves the
    target as the disk was after entry 5. Going backwards is an error:
    start a new Replayer on a fresh target instead.

    ``native`` chooses the compiled walk and replay loop (devicemapper/native.py:
    None uses it when built, unless POWERCUT_NATIVE=0); ``index`` shares the header
    index of another Replayer or reader of the same log. ``latest``: each replay call
    writes every target block once, as the last entry of its range that covers it left
    it, and leaves out what a later entry of the range overwrites (the image is the
    same; a call with a stop rule, ``until``, applies every entry).
    """

    def __init__(
        self,
        log_path: str | os.PathLike[str],
        target_path: str | os.PathLike[str],
        *,
        discard: bool = True,
        sync: bool | None = None,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        native: bool | None = None,
        latest: bool = False,
        index: LogIndex | None = None,
    ) -> None:
        self._lib = library(native)
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
        self.latest = latest
        self._index: LogIndex | None = None
        if index is not None and (index.reader.nr_entries, index.reader.sectorsize) != (
            self.reader.nr_entries, self.reader.sectorsize):
            self.close()
            raise ReplayError(f"{self.reader.path}: the index given is of another log "
                              f"({index.reader.path})")
        if self._lib is not None:
            self._index = index if index is not None else LogIndex(self.reader, native_walk=True)
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
        super().close()
        self.reader.close()

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
            try:
                for scanned, entry in enumerate(
                    self.reader.iter_entries(self._seen_index, self._seen_offset), 1
                ):
                    self._note(entry)
                    self._keep_ahead(entry)
                    if scanned >= 256:
                        break
            except LogFormatError:
                # A bad header is reported only if the search had to read past it.
                found = known() if callable(known) else known
                i = bisect.bisect_right(found, after)
                if i < len(found):
                    return found[i]
                raise

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
        if self._index is not None:
            self._index.extend_to(start)
            if start > self._next_index:
                self._next_index, self._next_offset = start, self._index.payload_end(start - 1)
            self._advance(stop, until)
            return self.last_entry
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
        if self._index is not None:
            return self._replay_first(self._index.find_mark(name, after), after, f"mark {name!r}")
        found = self._scan_for(lambda: self._marks.get(name, []), after)
        return self._replay_first(found, after, f"mark {name!r}")

    def replay_next_fua(self, after: int) -> LogEntry:
        """Replay through the first FUA entry with an index above ``after``."""
        if self._index is not None:
            return self._replay_first(self._index.find(LogFlag.FUA, after), after, "FUA entry")
        return self._replay_first(self._scan_for(self._fuas, after), after, "FUA entry")

    def replay_next_flush(self, after: int) -> LogEntry:
        """Replay through the first flush entry with an index above ``after``."""
        if self._index is not None:
            found = self._index.find(LogFlag.FLUSH, after)
        else:
            found = self._scan_for(self._flushes, after)
        return self._replay_first(found, after, "flush entry")

    def _replay_first(self, index: int | None, after: int, what: str) -> LogEntry:
        """Replay through entry ``index``, the first ``what`` above ``after`` if not None."""
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
        if self._index is not None:
            self._advance_native(stop, until)
            return
        if self.latest and until is None:
            self._advance_latest(stop)
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


    def _advance_latest(self, stop: int) -> None:
        """The Python path of ``latest``: the range's headers, then its planned pieces."""
        entries: list[LogEntry] = []
        try:
            while self._ahead and self._ahead[0].index < stop:
                entries.append(self._ahead.popleft())
            offset = entries[-1].payload_end if entries else self._next_offset
            if self._next_index + len(entries) < stop:
                for entry in self.reader.iter_entries(self._next_index + len(entries), offset):
                    self._note(entry)
                    entries.append(entry)
                    if entry.index + 1 >= stop:
                        break
            self._applier.add_latest(entries, latest_pieces(entries, discard=self._applier.discard))
            self._applier.flush()
            if self.sync:
                os.fsync(self._fd)
        except BaseException:
            self._failed = True
            raise
        finally:
            if entries:
                self.last_entry = entries[-1]
                self._next_index = entries[-1].index + 1
                self._next_offset = entries[-1].payload_end

    def _advance_native(self, stop: int, until: Callable[[LogEntry], bool] | None) -> None:
        """The compiled path of ``_advance``."""
        index = self._index
        assert index is not None and self._lib is not None
        start = self._next_index
        try:
            if self.latest and until is None:
                index.extend_to(stop)  # the Python path reads the range's headers first too
                self._apply_latest_native(index, start, stop)
            else:
                stop = self._apply_in_order(index, start, stop, until)
            if self.sync:
                os.fsync(self._fd)
        except BaseException:
            self._failed = True
            raise
        self._next_index = stop
        self._next_offset = index.payload_end(stop - 1)
        self.last_entry = index.entry(stop - 1)

    def _apply_in_order(self, index: LogIndex, start: int, stop: int,
                        until: Callable[[LogEntry], bool] | None) -> int:
        """Entries from ``start`` in log order, as the Python path writes them: indexed
        ones from the index, the rest indexed and written in one pass over the log; where
        the range ends (``until`` may end it early)."""
        bad_header: LogFormatError | None = None
        if until is not None:
            try:
                stop = self._stop_rule(index, start, stop, until)
            except LogFormatError as exc:
                # The Python path writes what it flushes before it reads the bad header
                # (so a write error there comes first), then raises.
                bad_header, stop = exc, len(index)
        # A queue of writes does not carry over from the indexed entries to the rest (a
        # failed write there may name another run than the Python path does).
        known = min(stop, len(index))
        i = start
        while i < known:
            i = self._apply_native(index, i, known, final_flush=bad_header is None)
            if i < known:
                self._applier.add(index.entry(i))  # a discard: the Python side's job
                i += 1
        if bad_header is not None:
            raise bad_header
        while i < stop:
            i = self._walk_apply_native(index, i, stop)
        return stop

    @staticmethod
    def _stop_rule(
        index: LogIndex, start: int, stop: int, until: Callable[[LogEntry], bool]
    ) -> int:
        """Where ``until`` stops a range, asking about each entry once, in order; a bad
        header raises only if the range reaches it (the entries before it are indexed)."""
        i = start
        while i < stop:
            error: LogFormatError | None = None
            try:
                index.extend_to(min(stop, i + 256))
            except LogFormatError as exc:
                error = exc
            for k in range(i, min(stop, len(index))):
                if until(index.entry(k)):
                    return k + 1
            if error is not None:
                raise error
            i = min(stop, len(index))
        return stop

    def _apply_native(self, index: LogIndex, start: int, stop: int, *,
                      final_flush: bool = True, pieces: bytes | None = None) -> int:
        """Entries ``start..stop-1`` (or ``pieces``) written in C, up to the first discard;
        where it stopped."""
        assert self._lib is not None
        applier = self._applier
        next_index, entries, written, failure = self._lib.apply(
            self.reader.fileno(), self._fd, index.records, self.reader.sectorsize, start, stop,
            applier._buf, _IOV_MAX, MAX_SPAN_GAP_BYTES, applier.discard, final_flush, pieces)
        applier.entries_applied += entries
        applier.bytes_written += written
        if failure is not None:
            raise apply_error(self.reader, self.target_path, failure)
        return int(next_index)

    def _walk_apply_native(self, index: LogIndex, start: int, stop: int) -> int:
        """Entries ``start..stop-1`` (the first not indexed yet) indexed and written in one
        pass in C, up to and including the first discard; where it stopped."""
        assert self._lib is not None and start == len(index)
        applier, reader = self._applier, self.reader
        records, marks, _, offset, discard_at, entries, written, failure = self._lib.walk_apply(
            reader.fileno(), self._fd, reader.size_bytes, reader.sectorsize, reader.nr_entries,
            start, index.next_offset, stop, HEADER_WINDOW_BYTES, applier._buf, _IOV_MAX,
            MAX_SPAN_GAP_BYTES, applier.discard)
        index.absorb(records, marks, offset)
        applier.entries_applied += entries
        applier.bytes_written += written
        if failure is not None:
            raise apply_error(reader, self.target_path, failure)
        if discard_at < 0:
            return stop
        applier.add(index.entry(discard_at))
        return int(discard_at) + 1

    def _apply_latest_native(self, index: LogIndex, start: int, stop: int) -> None:
        assert self._lib is not None
        applier = self._applier
        writes, discards, max_end = self._lib.plan(index.records, start, stop, applier.discard)
        size = self.reader.sectorsize
        applier.extend_to(max_end * size)
        self._apply_native(index, start, start, pieces=writes)
        for i, sector, nr_sectors in discards:
            applier._discard((index.entry(i).sector + sector) * size, nr_sectors * size, i)
        applier.entries_applied += stop - start


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
