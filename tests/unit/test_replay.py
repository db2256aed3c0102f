"""The replay engine: prefixes, marks, FUA/flush points, incremental, subsets, torn writes."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import devicemapper.apply as apply_mod
import devicemapper.replay as replay_mod
from devicemapper.logformat import LogEntry, LogFlag, LogReader, LogWriter
from devicemapper.replay import Replayer, ReplayError, apply_entries, apply_entry
from framework.core.errors import LogFormatError

S = 512
DISK_SECTORS = 512  # a 256 KiB disk keeps every test fast
DISK_BYTES = DISK_SECTORS * S


def build_log(path: Path, seed: int = 1, n: int = 300) -> list[bytes]:
    """A random log; returns the disk image expected after each entry (index i -> image)."""
    rng = random.Random(seed)
    disk = bytearray(rng.randbytes(DISK_BYTES))  # pre-existing content, to see discards
    images: list[bytes] = []
    with LogWriter(path, sectorsize=S) as w:
        for i in range(n):
            kind = rng.random()
            if kind < 0.65:
                nr = rng.choice([1, 1, 2, 8, 16, 64])
                sector = rng.randrange(0, DISK_SECTORS - nr)
                # Sometimes continue right after the previous write: exercises coalescing.
                data = rng.randbytes(nr * S)
                flags = LogFlag.FUA if rng.random() < 0.1 else LogFlag.NONE
                w.write(sector, data, flags)
                disk[sector * S : (sector + nr) * S] = data
            elif kind < 0.75:
                w.flush()
            elif kind < 0.85:
                nr = rng.randint(1, 32)
                sector = rng.randrange(0, DISK_SECTORS - nr)
                w.discard(sector, nr)
                disk[sector * S : (sector + nr) * S] = bytes(nr * S)
            else:
                w.mark(f"m{i}")
            images.append(bytes(disk))
        w.mark("end-of-test")
        images.append(bytes(disk))
    # The writer's end mark changes nothing on the disk.
    images.append(bytes(disk))
    return images


def initial_image(seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(DISK_BYTES)


@pytest.fixture()
def log_and_images(tmp_path: Path) -> tuple[Path, list[bytes]]:
    path = tmp_path / "test.log"
    return path, build_log(path)


def fresh_target(tmp_path: Path, name: str = "disk.img", seed: int = 1) -> Path:
    target = tmp_path / name
    target.write_bytes(initial_image(seed))
    return target


def entries_of(path: Path) -> list[LogEntry]:
    with LogReader(path) as reader:
        return list(reader)


def test_replay_to_every_entry_gives_the_expected_image(
    tmp_path: Path, log_and_images: tuple[Path, list[bytes]]
) -> None:
    log, images = log_and_images
    for n in (0, 1, 57, 150, len(images) - 1):
        target = fresh_target(tmp_path)
        with Replayer(log, target) as rp:
            last = rp.replay_to(n)
            assert last is not None and last.index == n
            assert rp.position == n + 1
        assert target.read_bytes() == images[n], f"entry {n}"


def test_incremental_replay_equals_replay_from_scratch(
    tmp_path: Path, log_and_images: tuple[Path, list[bytes]]
) -> None:
    log, images = log_and_images
    target = fresh_target(tmp_path)
    points = sorted(random.Random(3).sample(range(len(images)), 40))
    with Replayer(log, target) as rp:
        for n in points:
            rp.replay_to(n)
            assert target.read_bytes() == images[n], f"entry {n}"
        assert rp.entries_applied == points[-1] + 1
        rp.replay_to(points[-1])  # the same point again is a no-op
        assert rp.entries_applied == points[-1] + 1


def test_replay_to_marks_incrementally(
    tmp_path: Path, log_and_images: tuple[Path, list[bytes]]
) -> None:
    log, images = log_and_images
    marks = [e for e in entries_of(log) if e.mark is not None and e.mark.startswith("m")]
    assert len(marks) > 10
    target = fresh_target(tmp_path)
    with Replayer(log, target) as rp:
        for mark in marks:
            assert mark.mark is not None
            got = rp.replay_to_mark(mark.mark)
            assert got.index == mark.index
            assert target.read_bytes() == images[mark.index]
        # A mark already passed cannot be reached again on the same target.
        first = marks[0].mark
        assert first is not None
        with pytest.raises(ReplayError, match="cannot go back"):
            rp.replay_to_mark(first)


def test_replay_next_fua_and_next_flush_step_through_the_log(
    tmp_path: Path, log_and_images: tuple[Path, list[bytes]]
) -> None:
    log, images = log_and_images
    entries = entries_of(log)
    fuas = [e.index for e in entries if e.is_fua]
    flushes = [e.index for e in entries if e.is_flush]
    assert fuas and flushes

    target = fresh_target(tmp_path)
    with Replayer(log, target) as rp:
        seen: list[int] = []
        after = -1
        while True:
            try:
                entry = rp.replay_next_fua(after)
            except ReplayError as exc:
                assert "no FUA entry after" in str(exc)
                break
            seen.append(entry.index)
            assert target.read_bytes() == images[entry.index]
            after = entry.index
        assert seen == fuas

    target = fresh_target(tmp_path, "flush.img")
    with Replayer(log, target) as rp:
        entry = rp.replay_next_flush(flushes[2])
        assert entry.index == flushes[3]
        assert target.read_bytes() == images[flushes[3]]
        # Asking for a flush already behind us is going backwards.
        with pytest.raises(ReplayError, match="cannot go back"):
            rp.replay_next_flush(-1)


def test_replay_range_skips_and_applies(
    tmp_path: Path, log_and_images: tuple[Path, list[bytes]]
) -> None:
    log, images = log_and_images
    target = fresh_target(tmp_path)
    with Replayer(log, target) as rp:
        rp.replay_range(0, 100)
        assert target.read_bytes() == images[99]
        rp.replay_range(100, 200)
        assert target.read_bytes() == images[199]
        with pytest.raises(ReplayError, match="cannot start at entry 50"):
            rp.replay_range(50, 60)
    # A range that skips entries applies only the range.
    entries = entries_of(log)
    target = fresh_target(tmp_path, "skip.img")
    with Replayer(log, target) as rp:
        rp.replay_range(120, 130)
        assert rp.entries_applied == 10
    expected = bytearray(initial_image())
    with LogReader(log) as reader:
        for e in entries[120:130]:
            if e.is_write:
                expected[e.byte_offset : e.byte_offset + e.byte_length] = reader.read_payload(e)
            elif e.is_discard:
                expected[e.byte_offset : e.byte_offset + e.byte_length] = bytes(e.byte_length)
    assert target.read_bytes() == bytes(expected)


def test_bad_requests_leave_the_target_untouched(
    tmp_path: Path, log_and_images: tuple[Path, list[bytes]]
) -> None:
    log, images = log_and_images
    target = fresh_target(tmp_path)
    with Replayer(log, target) as rp:
        rp.replay_to(10)
        with pytest.raises(ReplayError, match="no mark 'absent' in the log"):
            rp.replay_to_mark("absent")
        with pytest.raises(ReplayError, match="no entry 100000"):
            rp.replay_to(100000)
        with pytest.raises(ReplayError, match="cannot go back to entry 5"):
            rp.replay_to(5)
        assert rp.position == 11
    assert target.read_bytes() == images[10]
    with pytest.raises(ReplayError, match="cannot open replay target"):
        Replayer(log, tmp_path / "absent.img")
    assert not (tmp_path / "absent.img").exists()


def test_counters(tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    with LogWriter(log) as w:
        w.write(0, bytes([1]) * 1024)
        w.flush()
        w.write(4, bytes([2]) * 512, LogFlag.FUA)
        w.discard(0, 1)
    target = fresh_target(tmp_path)
    with Replayer(log, target) as rp:
        rp.replay_to(4)
        assert rp.entries_applied == 5
        assert rp.bytes_written == 1536
        assert rp.bytes_discarded == 512


def test_discard_false_keeps_old_data(tmp_path: Path) -> None:
    log = tmp_path / "d.log"
    with LogWriter(log) as w:
        w.discard(2, 4)
    target = fresh_target(tmp_path)
    before = target.read_bytes()
    with Replayer(log, target, discard=False) as rp:
        rp.replay_to(1)
        assert rp.bytes_discarded == 0
    assert target.read_bytes() == before
    with Replayer(log, target) as rp:
        rp.replay_to(1)
    after = target.read_bytes()
    assert after[2 * S : 6 * S] == bytes(4 * S)
    assert after[: 2 * S] == before[: 2 * S] and after[6 * S :] == before[6 * S :]


def test_discard_falls_back_to_zeros_when_punching_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(apply_mod, "_fallocate_punch", lambda fd, off, n: False)
    monkeypatch.setattr(apply_mod, "MIN_PUNCH_BYTES", 0)
    log = tmp_path / "d.log"
    with LogWriter(log) as w:
        w.discard(2, 4)
        w.discard(100, 3)
    target = fresh_target(tmp_path)
    with Replayer(log, target) as rp:
        rp.replay_to(1)
    data = target.read_bytes()
    assert data[2 * S : 6 * S] == bytes(4 * S)
    assert data[100 * S : 103 * S] == bytes(3 * S)


def test_discard_that_does_not_read_back_zeros_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Positive control for the read-back check: a "punch" that succeeds
    # but leaves the data, like a device whose discard keeps old contents.
    monkeypatch.setattr(apply_mod, "_fallocate_punch", lambda fd, off, n: True)
    monkeypatch.setattr(apply_mod, "MIN_PUNCH_BYTES", 0)
    log = tmp_path / "d.log"
    with LogWriter(log) as w:
        w.discard(2, 4)
        w.discard(50, 2)
    target = fresh_target(tmp_path)
    with Replayer(log, target) as rp:
        rp.replay_to(1)
    data = target.read_bytes()
    assert data[2 * S : 6 * S] == bytes(4 * S)
    assert data[50 * S : 52 * S] == bytes(2 * S)


def test_large_discard_on_a_file_punches_a_hole(tmp_path: Path) -> None:
    log = tmp_path / "d.log"
    big = 4 << 20
    with LogWriter(log) as w:
        w.discard(2048, big // S)  # 4 MiB at 1 MiB
        w.discard(1, 2)  # small: written as zeros
    target = tmp_path / "big.img"
    target.write_bytes(b"\xff" * (8 << 20))
    blocks_before = target.stat().st_blocks
    with Replayer(log, target) as rp:
        rp.replay_to(1)
        assert rp.bytes_discarded == big + 2 * S
    data = target.read_bytes()
    assert data[1 << 20 : (1 << 20) + big] == bytes(big)
    assert data[S : 3 * S] == bytes(2 * S)
    assert data[:S] == b"\xff" * S and data[(1 << 20) + big :] == b"\xff" * (3 << 20)
    # The 4 MiB became a hole (where the filesystem supports punching).
    assert target.stat().st_blocks <= blocks_before - (big // 512) // 2


def test_discard_past_the_end_of_a_file_is_clamped(tmp_path: Path) -> None:
    log = tmp_path / "d.log"
    with LogWriter(log) as w:
        w.discard(DISK_SECTORS - 2, 1 << 40)
    target = fresh_target(tmp_path)
    with Replayer(log, target) as rp:
        rp.replay_to(0)
        assert rp.bytes_discarded == 2 * S
    assert target.stat().st_size == DISK_BYTES
    assert target.read_bytes()[-2 * S :] == bytes(2 * S)


def test_torn_write_applies_only_chosen_sectors(tmp_path: Path) -> None:
    log = tmp_path / "t.log"
    payload = b"".join(bytes([i + 1]) * S for i in range(8))
    with LogWriter(log) as w:
        w.write(10, payload)
    target = fresh_target(tmp_path)
    before = target.read_bytes()
    with LogReader(log) as reader:
        entry = next(iter(reader))
        fd = os.open(target, os.O_RDWR)
        try:
            stats = apply_entry(entry, reader, fd, sectors=range(2, 5))
            assert stats.bytes_written == 3 * S
            apply_entry(entry, reader, fd, sectors=range(7, 8))
            with pytest.raises(ReplayError, match="outside the entry's 8 sectors"):
                apply_entry(entry, reader, fd, sectors=range(6, 9))
        finally:
            os.close(fd)
    after = target.read_bytes()
    for i in range(8):
        got = after[(10 + i) * S : (11 + i) * S]
        want = (
            payload[i * S : (i + 1) * S]
            if i in (2, 3, 4, 7)
            else before[(10 + i) * S : (11 + i) * S]
        )
        assert got == want, f"sector {i}"
    assert after[: 10 * S] == before[: 10 * S] and after[18 * S :] == before[18 * S :]


def test_apply_entries_subset_in_any_order_with_torn_writes(
    tmp_path: Path, log_and_images: tuple[Path, list[bytes]]
) -> None:
    log, images = log_and_images
    entries = entries_of(log)
    rng = random.Random(11)
    base = 100
    tail = [e for e in entries[base + 1 : base + 60] if e.is_write]
    subset = rng.sample(tail, len(tail) // 2)
    subset.sort(key=lambda e: e.index)
    torn_entry = next(e for e in subset if e.nr_sectors > 1)
    torn = {torn_entry.index: range(0, 1)}

    target = fresh_target(tmp_path)
    with Replayer(log, target) as rp:
        rp.replay_to(base)
    expected = bytearray(images[base])
    with LogReader(log) as reader:
        for e in subset:
            data = reader.read_payload(e)
            if e.index in torn:
                data = data[:S]
            expected[e.byte_offset : e.byte_offset + len(data)] = data
        fd = os.open(target, os.O_RDWR)
        try:
            stats = apply_entries(subset, reader, fd, torn=torn, buffer_bytes=64 * 1024)
        finally:
            os.close(fd)
    assert stats.entries_applied == len(subset)
    assert target.read_bytes() == bytes(expected)


@pytest.mark.parametrize("buffer_bytes", [S, 4096, 40 * 1024, 8 << 20])
def test_buffer_size_does_not_change_the_result(
    tmp_path: Path, log_and_images: tuple[Path, list[bytes]], buffer_bytes: int
) -> None:
    log, images = log_and_images
    target = fresh_target(tmp_path)
    with Replayer(log, target, buffer_bytes=buffer_bytes) as rp:
        rp.replay_to(len(images) - 1)
    assert target.read_bytes() == images[-1]


def test_overlapping_writes_in_one_batch_keep_log_order(tmp_path: Path) -> None:
    log = tmp_path / "o.log"
    with LogWriter(log) as w:
        w.write(0, bytes([1]) * (4 * S))
        w.write(4, bytes([2]) * (4 * S))  # adjacent: coalesced into one pwritev
        w.write(2, bytes([3]) * (4 * S))  # overlaps both: must win
    target = fresh_target(tmp_path)
    with Replayer(log, target) as rp:
        rp.replay_to(2)
    data = target.read_bytes()[: 8 * S]
    assert data == bytes([1]) * (2 * S) + bytes([3]) * (4 * S) + bytes([2]) * (2 * S)


def test_replay_extends_a_short_file_target(tmp_path: Path) -> None:
    log = tmp_path / "e.log"
    with LogWriter(log) as w:
        w.write(1000, bytes([9]) * S)
    target = tmp_path / "empty.img"
    target.write_bytes(b"")
    with Replayer(log, target) as rp:
        rp.replay_to(0)
    data = target.read_bytes()
    assert len(data) == 1001 * S and data[-S:] == bytes([9]) * S and data[:-S] == bytes(1000 * S)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 80), data=st.data())
def test_property_incremental_equals_scratch(
    tmp_path: Path, seed: int, n: int, data: st.DataObject
) -> None:
    log = tmp_path / f"p{seed}.log"
    images = build_log(log, seed=seed, n=n)
    last = len(images) - 1
    points = sorted(set(data.draw(st.lists(st.integers(0, last), min_size=1, max_size=6))))
    target = tmp_path / f"p{seed}.img"
    target.write_bytes(initial_image(seed))
    with Replayer(log, target, buffer_bytes=data.draw(st.sampled_from([S, 8192, 1 << 20]))) as rp:
        for p in points:
            rp.replay_to(p)
            assert target.read_bytes() == images[p]
    log.unlink()
    target.unlink()


def test_corrupt_log_stops_replay_with_log_format_error(tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    with LogWriter(log) as w:
        w.write(0, bytes([1]) * S)
        w.write(1, bytes([2]) * S)
    raw = bytearray(log.read_bytes())
    raw[3 * S + 16] = 0x80  # unknown flag bit in entry 1
    log.write_bytes(bytes(raw))
    target = fresh_target(tmp_path)
    with Replayer(log, target) as rp, pytest.raises(LogFormatError, match="entry 1 at byte 1552"):
        rp.replay_to(1)


# -- block devices ---------------------------------------------------------------


@contextmanager
def loop_device(backing: Path) -> Iterator[str]:
    dev = subprocess.run(
        ["losetup", "--find", "--show", os.fspath(backing)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    try:
        yield dev
    finally:
        subprocess.run(["losetup", "--detach", dev], check=False)


@pytest.mark.host_root
def test_replay_onto_a_loop_device_with_blkdiscard(
    tmp_path: Path, log_and_images: tuple[Path, list[bytes]]
) -> None:
    if os.geteuid() != 0 or shutil.which("losetup") is None:
        pytest.skip("needs root and losetup (util-linux)")
    log, images = log_and_images
    backing = fresh_target(tmp_path)
    with loop_device(backing) as dev, Replayer(log, dev) as rp:
        for n in (40, 120, len(images) - 1):
            rp.replay_to(n)  # ends with fsync: the device holds the state
            with open(dev, "rb") as f:
                assert f.read() == images[n]
        assert rp.bytes_discarded > 0
    assert backing.read_bytes() == images[-1]


def test_range_after_a_search_scanned_ahead(
    tmp_path: Path, log_and_images: tuple[Path, list[bytes]]
) -> None:
    log, images = log_and_images
    entries = entries_of(log)
    target = fresh_target(tmp_path)
    with Replayer(log, target) as rp:
        fua = rp.replay_next_fua(-1)  # the search reads headers past the FUA
        k = fua.index
        rp.replay_range(k + 5, k + 20)
        assert rp.position == k + 20
    expected = bytearray(images[k])
    with LogReader(log) as reader:
        for e in entries[k + 5 : k + 20]:
            if e.is_write:
                expected[e.byte_offset : e.byte_offset + e.byte_length] = reader.read_payload(e)
            elif e.is_discard:
                expected[e.byte_offset : e.byte_offset + e.byte_length] = bytes(e.byte_length)
    assert target.read_bytes() == bytes(expected)


def test_scan_ahead_cap_does_not_change_results(
    tmp_path: Path, log_and_images: tuple[Path, list[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replay_mod, "MAX_AHEAD_ENTRIES", 3)
    log, images = log_and_images
    marks = [e for e in entries_of(log) if e.mark is not None]
    target = fresh_target(tmp_path)
    with Replayer(log, target) as rp:
        for mark in marks[::3]:
            assert mark.mark is not None
            rp.replay_to_mark(mark.mark, after=mark.index - 1)
            assert target.read_bytes() == images[mark.index]


def test_discards_on_a_sparse_file_zero_only_what_holds_data(tmp_path: Path) -> None:
    log = tmp_path / "sp.log"
    with LogWriter(log) as w:
        w.write(10, bytes([1]) * (4 * S))  # still dirty in the page cache when discarded
        w.discard(0, 100)
        w.write(50, bytes([2]) * S)
        w.write(3000, bytes([3]) * S)
        w.discard(40, 20)
        w.discard(4000, 4000)  # nothing but holes there
    target = tmp_path / "sparse.img"
    with open(target, "wb") as f:
        f.truncate(8 << 20)
    with Replayer(log, target) as rp:
        rp.replay_to(5)
    expected = bytearray(8 << 20)
    expected[3000 * S : 3001 * S] = bytes([3]) * S
    assert target.read_bytes() == bytes(expected)
    # Only the surviving write's block is allocated: discarding holes wrote nothing.
    assert target.stat().st_blocks * 512 <= 64 * 1024


def test_a_failed_write_poisons_the_replayer(
    tmp_path: Path, log_and_images: tuple[Path, list[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    log, _ = log_and_images
    target = fresh_target(tmp_path)

    def no_space(fd: int, buffers: object, offset: int) -> int:
        raise OSError(28, "No space left on device")

    # The Python path: the compiled one does not call os.pwritev (see
    # test_replay_native.py for its failed writes).
    with Replayer(log, target, native=False) as rp:
        rp.replay_to(5)
        monkeypatch.setattr(replay_mod.os, "pwritev", no_space)
        with pytest.raises(ReplayError, match=r"entry \d+: writing \d+ bytes at byte \d+ failed"):
            rp.replay_to(200)
        monkeypatch.undo()
        with pytest.raises(ReplayError, match="an earlier replay step failed"):
            rp.replay_to(250)


def _small_valid_log(path: Path) -> bytes:
    with LogWriter(path) as w:
        w.write(4, bytes([1]) * (2 * S))
        w.flush()
        w.fua_write(0, bytes([2]) * S)
        w.mark("m")
        w.discard(4, 1)
        w.write(6, bytes([3]) * S)
    return path.read_bytes()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
# The mark's flags made a mark of an entry with no text: the compiled walk gave None for it.
@example(mutations=[(528, b"\x0c")], cut=None)
@given(
    mutations=st.lists(
        st.tuples(st.integers(0, 9 * S), st.binary(min_size=1, max_size=8)), max_size=3
    ),
    cut=st.one_of(st.none(), st.integers(0, 10 * S)),
)
def test_fuzzed_log_replays_or_fails_cleanly(
    tmp_path: Path, mutations: list[tuple[int, bytes]], cut: int | None
) -> None:
    log = tmp_path / "fuzz.log"
    raw = _small_valid_log(log)
    for offset, data in mutations:
        raw = (raw[:offset] + data + raw[offset + len(data) :])[: len(raw)]
    if cut is not None:
        raw = raw[:cut]
    log.write_bytes(raw)
    target = tmp_path / "fuzz.img"
    target.write_bytes(bytes(16 * S))
    try:
        with Replayer(log, target, sync=False) as rp:
            rp.replay_to(rp.nr_entries - 1)
    except (LogFormatError, ReplayError) as exc:
        assert "\n" not in str(exc)
    finally:
        target.unlink()


def test_zero_target_clears_a_file_target_for_a_replay_from_the_start(tmp_path):
    from devicemapper.replay import zero_target
    target = tmp_path / "t.img"
    target.write_bytes(b"\xab" * (3 << 20) + b"\xcd" * 100)
    zero_target(target)
    data = target.read_bytes()
    assert len(data) == (3 << 20) + 100 and data.count(0) == len(data)


def test_a_file_target_is_not_fsynced_by_default_and_sync_true_fsyncs_each_call(
    tmp_path: Path, log_and_images: tuple[Path, list[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file is read through its page cache by every reader (loop devices
    # included), so the fsync that a block device needs is skipped for it.
    log, images = log_and_images
    synced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(replay_mod.os, "fsync", counting_fsync)
    with Replayer(log, fresh_target(tmp_path)) as rp:
        assert rp.sync is False
        rp.replay_to(100)
        rp.replay_to(200)
    assert synced == []
    target = fresh_target(tmp_path, "synced.img")
    with Replayer(log, target, sync=True) as rp:
        rp.replay_to(100)
        rp.replay_to(200)
    assert len(synced) == 2
    assert target.read_bytes() == images[200]


def test_replay_range_until_stops_after_the_first_entry_it_accepts(
    tmp_path: Path, log_and_images: tuple[Path, list[bytes]]
) -> None:
    log, images = log_and_images
    entries = entries_of(log)
    first_fua = next(e.index for e in entries if e.index >= 40 and e.flags & LogFlag.FUA)
    seen: list[int] = []

    def until(entry: LogEntry) -> bool:
        seen.append(entry.index)
        return bool(entry.flags & LogFlag.FUA)

    target = fresh_target(tmp_path)
    with Replayer(log, target) as rp:
        rp.replay_to(39)
        last = rp.replay_range(40, len(entries), until=until)
        assert last is not None and last.index == first_fua
        assert rp.position == first_fua + 1
    assert seen == list(range(40, first_fua + 1))
    assert target.read_bytes() == images[first_fua]
