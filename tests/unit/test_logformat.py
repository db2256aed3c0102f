"""The dm-log-writes log format: layout, reading, writing, malformed input."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from devicemapper.logformat import (
    END_MARK,
    MAGIC,
    LogEntry,
    LogFlag,
    LogReader,
    LogWriter,
    by_mark,
    find_mark,
    flags_str,
    max_mark_bytes,
    summarize,
)
from framework.core.errors import LogFormatError

# -- a log built by hand, the way drivers/md/dm-log-writes.c lays it out ------


def kernel_block(sectorsize: int, *fields: bytes) -> bytes:
    """One metadata block: the struct (and mark text), zero-filled to the sector."""
    body = b"".join(fields)
    assert len(body) <= sectorsize
    return body + bytes(sectorsize - len(body))


def kernel_super(sectorsize: int, nr_entries: int) -> bytes:
    # struct log_write_super: le64 magic, le64 version, le64 nr_entries, le32 sectorsize.
    return kernel_block(sectorsize, struct.pack("<QQQI", MAGIC, 1, nr_entries, sectorsize))


def kernel_entry(
    sectorsize: int, sector: int, nr_sectors: int, flags: int, text: bytes = b""
) -> bytes:
    # struct log_write_entry: le64 sector, le64 nr_sectors, le64 flags, le64 data_len.
    return kernel_block(
        sectorsize, struct.pack("<QQQQ", sector, nr_sectors, flags, len(text)), text
    )


def hand_built_log(sectorsize: int) -> tuple[bytes, list[bytes]]:
    """A log with every kind of entry; returns the bytes and the write payloads."""
    s = sectorsize
    p0 = bytes([0xA1]) * (2 * s)
    p1 = bytes(range(256)) * (s // 256)
    p2 = bytes([0x5C]) * s
    body = [
        kernel_entry(s, 8, 2, 0),  # plain write
        p0,
        kernel_entry(s, 0, 0, 1),  # flush without data
        kernel_entry(s, 3, 1, 2 | 16),  # FUA write of metadata
        p1,
        kernel_entry(s, 0, 0, 8, b"mkfs"),  # mark
        kernel_entry(s, 8, 2, 4),  # discard: no payload
        kernel_entry(s, 10, 1, 1 | 2),  # flush+FUA write with data
        p2,
        kernel_entry(s, 0, 0, 8, END_MARK.encode()),
    ]
    return kernel_super(s, 7) + b"".join(body), [p0, p1, p2]


def write_same_log(path: Path, sectorsize: int) -> None:
    with LogWriter(path, sectorsize=sectorsize) as w:
        w.write(8, bytes([0xA1]) * (2 * sectorsize))
        w.flush()
        w.fua_write(3, bytes(range(256)) * (sectorsize // 256), LogFlag.METADATA)
        w.mark("mkfs")
        w.discard(8, 2)
        w.write(10, bytes([0x5C]) * sectorsize, LogFlag.FLUSH | LogFlag.FUA)


@pytest.mark.parametrize("sectorsize", [512, 4096])
def test_writer_matches_kernel_layout_byte_for_byte(tmp_path: Path, sectorsize: int) -> None:
    expected, _ = hand_built_log(sectorsize)
    path = tmp_path / "w.log"
    write_same_log(path, sectorsize)
    assert path.read_bytes() == expected


@pytest.mark.parametrize("sectorsize", [512, 4096])
def test_reader_parses_hand_built_log(tmp_path: Path, sectorsize: int) -> None:
    raw, payloads = hand_built_log(sectorsize)
    path = tmp_path / "k.log"
    path.write_bytes(raw)
    s = sectorsize
    with LogReader(path) as reader:
        assert reader.super.nr_entries == 7
        assert reader.sectorsize == s
        entries = list(reader)
        got = [(e.index, e.sector, e.nr_sectors, int(e.flags), e.mark) for e in entries]
        assert got == [
            (0, 8, 2, 0, None),
            (1, 0, 0, 1, None),
            (2, 3, 1, 18, None),
            (3, 0, 0, 8, "mkfs"),
            (4, 8, 2, 4, None),
            (5, 10, 1, 3, None),
            (6, 0, 0, 8, END_MARK),
        ]
        # Offsets: super, then header+payload blocks back to back; discards skip none.
        assert [e.header_offset // s for e in entries] == [1, 4, 5, 7, 8, 9, 11]
        assert entries[0].byte_offset == 8 * s and entries[0].byte_length == 2 * s
        assert entries[4].payload_length == 0 and entries[4].byte_length == 2 * s
        assert entries[3].data_len == 4
        assert entries[6].payload_end == len(raw)
        writes = [e for e in entries if e.is_write]
        assert [reader.read_payload(e) for e in writes] == payloads
        assert [e.is_flush for e in entries] == [False, True, False, False, False, True, False]
        assert [e.is_fua for e in entries] == [False, False, True, False, False, True, False]
        assert entries[4].is_discard and entries[3].is_mark
        assert reader.entry(5) == entries[5]


def test_round_trip_random_writes(tmp_path: Path) -> None:
    import random

    rng = random.Random(7)
    path = tmp_path / "r.log"
    written: list[tuple[int, bytes, LogFlag]] = []
    with LogWriter(path, sectorsize=1024) as w:
        for i in range(200):
            data = rng.randbytes(1024 * rng.randint(1, 9))
            flags = rng.choice([LogFlag.NONE, LogFlag.FUA, LogFlag.METADATA])
            sector = rng.randrange(0, 4096)
            w.write(sector, data, flags)
            written.append((sector, data, flags))
            if i % 17 == 0:
                w.mark(f"m{i}")
    with LogReader(path) as reader:
        writes = [e for e in reader if e.is_write]
        assert [(e.sector, reader.read_payload(e), e.flags) for e in writes] == written
        assert reader.super.nr_entries == 200 + len(range(0, 200, 17)) + 1


def test_super_is_rewritten_after_fua_and_mark_like_the_kernel(tmp_path: Path) -> None:
    path = tmp_path / "s.log"

    def nr_entries_on_disk() -> int:
        with LogReader(path) as reader:
            return reader.nr_entries

    w = LogWriter(path)
    w.write(0, bytes(512))
    assert nr_entries_on_disk() == 0  # a plain write does not update the super
    w.fua_write(1, bytes(512))
    assert nr_entries_on_disk() == 2
    w.write(2, bytes(512))
    w.flush()
    assert nr_entries_on_disk() == 2
    w.mark("x")
    assert nr_entries_on_disk() == 5
    w.close()
    with LogReader(path) as reader:
        assert reader.nr_entries == 6
        assert list(reader)[-1].mark == END_MARK


def test_close_without_end_mark_and_after_error(tmp_path: Path) -> None:
    with LogWriter(tmp_path / "a.log", end_mark=False) as w:
        w.write(0, bytes(512))
    with LogReader(tmp_path / "a.log") as reader:
        assert [e.mark for e in reader] == [None]
    with pytest.raises(RuntimeError), LogWriter(tmp_path / "b.log") as w:
        w.write(0, bytes(512))
        raise RuntimeError("workload failed")
    with LogReader(tmp_path / "b.log") as reader:
        # Closed with a consistent super, but not marked as a clean end.
        assert [e.mark for e in reader] == [None]


def test_mark_is_truncated_as_the_kernel_does(tmp_path: Path) -> None:
    path = tmp_path / "m.log"
    with LogWriter(path, end_mark=False) as w:
        w.mark("x" * 1000)
        w.mark("a\0b")
    with LogReader(path) as reader:
        marks = [e.mark for e in reader]
    assert marks == ["x" * max_mark_bytes(512), "a"]
    assert max_mark_bytes(512) == 479


def test_writer_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        LogWriter(tmp_path / "x.log", sectorsize=1000)
    with LogWriter(tmp_path / "y.log") as w:
        with pytest.raises(ValueError):
            w.write(0, b"short")
        with pytest.raises(ValueError):
            w.write(0, bytes(512), LogFlag.DISCARD)
        with pytest.raises(ValueError):
            w.discard(0, 0)


def test_find_helpers_and_summary(tmp_path: Path) -> None:
    raw, _ = hand_built_log(512)
    path = tmp_path / "k.log"
    path.write_bytes(raw)
    with LogReader(path) as reader:
        assert find_mark(reader, "mkfs") is not None
        assert find_mark(reader, "mkfs", after=3) is None
        assert find_mark(reader, "nope") is None
        summary = summarize(reader)
    assert summary.entries == 7
    assert summary.writes == 3
    assert summary.flushes == 2
    assert summary.fuas == 2
    assert summary.discards == 1
    assert summary.discard_bytes == 1024
    assert summary.payload_bytes == 4 * 512
    assert summary.marks == ((3, "mkfs"), (6, END_MARK))
    assert summary.to_dict()["marks"] == [
        {"index": 3, "mark": "mkfs"},
        {"index": 6, "mark": END_MARK},
    ]
    assert flags_str(LogFlag.FLUSH | LogFlag.FUA) == "FLUSH|FUA"
    assert flags_str(LogFlag.NONE) == "NONE"


def test_entry_properties() -> None:
    e = LogEntry(
        index=0,
        sector=4,
        nr_sectors=3,
        flags=LogFlag.DISCARD,
        data_len=0,
        mark=None,
        header_offset=512,
        payload_offset=1024,
        sectorsize=512,
    )
    assert (e.byte_offset, e.byte_length, e.payload_length, e.payload_end) == (2048, 1536, 0, 1024)
    assert e.is_discard and not e.is_write


# -- malformed logs ------------------------------------------------------------


def _patch(raw: bytes, offset: int, data: bytes) -> bytes:
    return raw[:offset] + data + raw[offset + len(data) :]


S = 512
VALID, _ = hand_built_log(S)
# Header offsets of the hand-built log's entries, in bytes.
H = [n * S for n in (1, 4, 5, 7, 8, 9, 11)]

MALFORMED: dict[str, tuple[bytes, str, str]] = {
    # name: (log bytes, expected "where" part, expected "what" pattern)
    "wrong magic": (
        _patch(VALID, 0, struct.pack("<Q", 0x1234)),
        "super block at byte 0",
        "bad magic",
    ),
    "unknown version": (
        _patch(VALID, 8, struct.pack("<Q", 2)),
        "super block at byte 8",
        "unknown version 2",
    ),
    "sectorsize not a power of two": (
        _patch(VALID, 24, struct.pack("<I", 1000)),
        "super block at byte 24",
        "bad sectorsize 1000",
    ),
    "sectorsize zero": (
        _patch(VALID, 24, struct.pack("<I", 0)),
        "super block at byte 24",
        "bad sectorsize 0",
    ),
    "truncated super": (VALID[:20], "super block at byte 0", r"truncated super block \(20 of 28"),
    "super shorter than its sector": (
        VALID[:300],
        "super block at byte 0",
        r"truncated super block \(300 of 512",
    ),
    "nr_entries beyond the file": (
        _patch(VALID, 16, struct.pack("<Q", 1000)),
        "super block at byte 16",
        "nr_entries 1000 is beyond the log",
    ),
    "truncated payload": (
        _patch(VALID, 16, struct.pack("<Q", 1))[: H[0] + S + 100],
        f"entry 0 at byte {H[0] + S + 100}",
        r"truncated payload \(100 of 1024",
    ),
    "truncated entry header": (
        VALID[: H[6] + 100],
        f"entry 6 at byte {H[6]}",
        r"truncated entry header \(100 of 512",
    ),
    "entry past the end": (
        _patch(VALID, 16, struct.pack("<Q", 8)) + bytes(S),
        f"entry 7 at byte {H[6] + S}",
        "all-zero entry header",
    ),
    "data_len larger than the header block": (
        _patch(VALID, H[3] + 24, struct.pack("<Q", 481)),
        f"entry 3 at byte {H[3] + 24}",
        "data_len 481 larger than the header block",
    ),
    "unknown flag bits": (
        _patch(VALID, H[2] + 16, struct.pack("<Q", 2 | 64)),
        f"entry 2 at byte {H[2] + 16}",
        "unknown flag bits 0x40",
    ),
    "garbage after a header": (
        _patch(VALID, H[1] + 40, b"\x07"),
        f"entry 1 at byte {H[1] + 40}",
        "non-zero bytes after the entry header",
    ),
    "payload runs past the end": (
        _patch(VALID, H[5] + 8, struct.pack("<Q", 50)),
        f"entry 5 at byte {len(VALID)}",
        r"truncated payload \(1024 of 25600",
    ),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_log_names_file_entry_and_offset(tmp_path: Path, name: str) -> None:
    raw, where, what = MALFORMED[name]
    path = tmp_path / "bad.log"
    path.write_bytes(raw)
    with pytest.raises(LogFormatError) as info, LogReader(path) as reader:
        for entry in reader:
            reader.read_payload(entry)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: {where}: "), message
    assert re.search(what, message), message


def test_entry_past_the_end_of_a_device_sized_log(tmp_path: Path) -> None:
    # A super that counts an entry whose header lies wholly beyond the file.
    raw = kernel_super(S, 2) + kernel_entry(S, 0, 1, 0) + bytes(S)
    path = tmp_path / "short.log"
    path.write_bytes(raw)
    with pytest.raises(
        LogFormatError, match=rf"entry 1 at byte {3 * S}: entry starts past the end"
    ):
        list(LogReader(path))


def test_reading_beyond_nr_entries_is_refused(tmp_path: Path) -> None:
    # The bytes after the counted entries may be stale: nr_entries is the truth.
    path = tmp_path / "k.log"
    path.write_bytes(VALID)
    with LogReader(path) as reader:
        last = reader.entry(reader.nr_entries - 1)
        with pytest.raises(
            LogFormatError,
            match=rf"entry {reader.nr_entries} at byte {last.payload_end}: past the last entry",
        ):
            reader.read_entry(reader.nr_entries, last.payload_end)


def test_missing_log_and_bad_kind(tmp_path: Path) -> None:
    with pytest.raises(LogFormatError, match="cannot open log"):
        LogReader(tmp_path / "absent.log")
    with pytest.raises(LogFormatError, match="not a regular file or block device"):
        LogReader(tmp_path)
    path = tmp_path / "k.log"
    path.write_bytes(VALID)
    with LogReader(path) as reader, pytest.raises(LogFormatError, match="no entry 9"):
        reader.entry(9)


# -- fuzzing -------------------------------------------------------------------

_INTERESTING = [0, 8, 16, 24, *[h + k for h in H for k in (0, 8, 16, 24, 32)]]


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Module scope: hypothesis runs many examples per test call.
    return tmp_path_factory.mktemp("fuzz")


def _read_everything(path: Path) -> None:
    with LogReader(path) as reader:
        for entry in reader:
            data = reader.read_payload(entry)
            assert len(data) == entry.payload_length
            assert entry.payload_end <= reader.size_bytes


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mutations=st.lists(
        st.tuples(
            st.one_of(st.sampled_from(_INTERESTING), st.integers(0, len(VALID) - 1)),
            st.binary(min_size=1, max_size=8),
        ),
        max_size=4,
    ),
    cut=st.one_of(st.none(), st.integers(0, len(VALID))),
)
def test_fuzzed_log_gives_entries_or_log_format_error(
    fuzz_dir: Path, mutations: list[tuple[int, bytes]], cut: int | None
) -> None:
    raw = VALID
    for offset, data in mutations:
        raw = _patch(raw, offset, data)[: len(raw)]
    if cut is not None:
        raw = raw[:cut]
    path = fuzz_dir / "fuzz.log"
    path.write_bytes(raw)
    try:
        _read_everything(path)
        event("valid")
    except LogFormatError as exc:
        event("LogFormatError")
        assert "\n" not in str(exc)


# -- block devices ---------------------------------------------------------------


@pytest.mark.host_root
def test_reader_reads_a_log_on_a_block_device(tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("losetup") is None:
        pytest.skip("needs root and losetup (util-linux)")
    raw, payloads = hand_built_log(512)
    backing = tmp_path / "logdev.img"
    backing.write_bytes(raw)
    with open(backing, "r+b") as f:
        f.truncate(1 << 20)  # the device is larger than the log, as log devices are
    dev = subprocess.run(
        ["losetup", "--find", "--show", os.fspath(backing)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    try:
        with LogReader(dev) as reader:
            assert reader.size_bytes == 1 << 20
            entries = list(reader)
            assert [reader.read_payload(e) for e in entries if e.is_write] == payloads
    finally:
        subprocess.run(["losetup", "--detach", dev], check=False)


def test_io_error_is_a_log_format_error_naming_the_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "k.log"
    path.write_bytes(VALID)
    with LogReader(path) as reader:

        def eio(fd: int, length: int, offset: int) -> bytes:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(os, "pread", eio)
        with pytest.raises(
            LogFormatError, match=rf"entry 0 at byte {S}: read failed: Input/output"
        ):
            list(reader)


def test_by_mark_counts_what_each_mark_closes(tmp_path: Path) -> None:
    path = tmp_path / "log"
    block = b"\xab" * 4096
    with LogWriter(path, sectorsize=512) as w:
        w.write(0, block)           # setup
        w.mark("setup")
        w.write(800, block)         # a run of two contiguous writes ...
        w.write(808, block)
        w.write(8, block)           # ... a second place ...
        w.flush()
        w.fua_write(100, block)     # ... and a third, with FUA
        w.mark("fsync-1")
        w.flush()                   # a mark with nothing but a flush before it
        w.mark("fsync-2")
        w.write(200, block)         # after the last mark: no mark closes it
    with LogReader(path) as reader:
        got = [(i.mark, i.writes, i.runs, i.flushes, i.fuas, i.payload_bytes)
               for i in by_mark(reader)]
    # The end mark closes the last write: it is an interval of its own.
    assert got == [("setup", 1, 1, 0, 0, 4096), ("fsync-1", 4, 3, 1, 1, 4 * 4096),
                   ("fsync-2", 0, 0, 1, 0, 0), (END_MARK, 1, 1, 0, 0, 4096)]
    # The control: one write moved next to the one before it makes one run fewer.
    with LogWriter(tmp_path / "log2", sectorsize=512, end_mark=False) as w:
        w.write(800, block)
        w.write(808, block)
        w.write(816, block)
        w.mark("m")
    with LogReader(tmp_path / "log2") as reader:
        assert [i.runs for i in by_mark(reader)] == [1]
