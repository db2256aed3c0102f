"""``powercut log info|list|replay`` handlers, driven through their own parser."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import pytest

from devicemapper.logformat import LogFlag, LogWriter
from framework.cli.log import add_parser


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="powercut")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    rc: int = args.func(args)
    return rc


@pytest.fixture()
def small_log(tmp_path: Path) -> Path:
    path = tmp_path / "small.log"
    with LogWriter(path) as w:
        w.write(0, bytes([1]) * 1024)  # 0
        w.flush()  # 1
        w.mark("mkfs")  # 2
        w.write(4, bytes([2]) * 512, LogFlag.FUA)  # 3
        w.discard(0, 1)  # 4
        w.write(8, bytes([3]) * 512)  # 5
        w.flush()  # 6
        w.mark("fsync-1")  # 7
    return path


def test_info_text_and_json(small_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["log", "info", str(small_log)]) == 0
    out = capsys.readouterr().out
    assert "entries:       9" in out
    assert "FUAs:          1" in out
    assert "mkfs" in out and "dm-log-writes-end" in out

    assert run_cli(["log", "info", str(small_log), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["entries"] == 9
    assert data["flushes"] == 2
    assert data["fuas"] == 1
    assert data["discards"] == 1
    assert data["payload_bytes"] == 2048
    assert data["sectorsize"] == 512
    assert data["marks"] == [
        {"index": 2, "mark": "mkfs"},
        {"index": 7, "mark": "fsync-1"},
        {"index": 8, "mark": "dm-log-writes-end"},
    ]


def test_info_per_mark_says_what_each_mark_closes(small_log: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["log", "info", str(small_log), "--per-mark", "--json"]) == 0
    per = {m["mark"]: m for m in json.loads(capsys.readouterr().out)["per_mark"]}
    assert per["mkfs"] | {"index": 0} == {"mark": "mkfs", "index": 0, "entries": 2, "writes": 1,
                                          "flushes": 1, "fuas": 0, "payload_bytes": 1024,
                                          "runs": 1}
    # sector 4 (FUA) and sector 8: two places; the discard is an entry, not a write.
    assert (per["fsync-1"]["writes"], per["fsync-1"]["runs"], per["fsync-1"]["entries"],
            per["fsync-1"]["fuas"], per["fsync-1"]["flushes"]) == (2, 2, 4, 1, 1)
    assert per["dm-log-writes-end"]["entries"] == 0
    assert run_cli(["log", "info", str(small_log), "--per-mark"]) == 0
    out = capsys.readouterr().out
    assert "runs flushes  FUAs" in out
    assert [line.split()[-1] for line in out.splitlines()[-3:]] == [
        "mkfs", "fsync-1", "dm-log-writes-end"]


def test_list_text_json_and_window(small_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["log", "list", str(small_log)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + 9
    assert lines[4].split() == ["3", "4", "1", "FUA"]
    assert lines[3].split() == ["2", "0", "0", "MARK", "mkfs"]

    assert run_cli(["log", "list", str(small_log), "--json", "--start", "3", "--limit", "2"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["index"], r["flags"], r["sector"], r["nr_sectors"]) for r in rows] == [
        (3, "FUA", 4, 1),
        (4, "DISCARD", 0, 1),
    ]


@pytest.mark.parametrize(
    ("how", "last"),
    [
        (["--to", "3"], 3),
        (["--to-mark", "fsync-1"], 7),
        (["--next-fua", "-1"], 3),
        (["--next-flush", "1"], 6),
    ],
)
def test_replay_variants(
    small_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], how: list[str], last: int
) -> None:
    target = tmp_path / "disk.img"
    target.write_bytes(bytes([0xEE]) * 8192)
    assert run_cli(["log", "replay", str(small_log), str(target), *how, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["last_entry"] == last
    expected = bytearray([0xEE]) * 8192
    # What entries 0..last of small_log do to the disk, by entry index.
    effects = {
        0: (0, bytes([1]) * 1024),
        3: (2048, bytes([2]) * 512),
        4: (0, bytes(512)),
        5: (4096, bytes([3]) * 512),
    }
    for index in range(last + 1):
        if index in effects:
            offset, data = effects[index]
            expected[offset : offset + len(data)] = data
    assert target.read_bytes() == bytes(expected)


def test_replay_no_discard(
    small_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "disk.img"
    target.write_bytes(bytes([0xEE]) * 8192)
    assert run_cli(["log", "replay", str(small_log), str(target), "--to", "8", "--no-discard"]) == 0
    assert "replayed entries 0..8" in capsys.readouterr().out
    data = target.read_bytes()
    assert data[:1024] == bytes([1]) * 1024
    assert data[4096:4608] == bytes([3]) * 512


def _assert_one_line_error(capsys: pytest.CaptureFixture[str], fragment: str) -> None:
    captured = capsys.readouterr()
    err = captured.err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("powercut: ")
    assert fragment in err
    assert "Traceback" not in err + captured.out


def test_bad_log_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.log"
    bad.write_bytes(b"not a log at all" * 64)
    for verb in (["info"], ["list"]):
        assert run_cli(["log", *verb, str(bad)]) == 2
        _assert_one_line_error(capsys, "bad magic")
    target = tmp_path / "disk.img"
    target.write_bytes(bytes(4096))
    assert run_cli(["log", "replay", str(bad), str(target), "--to", "0"]) == 2
    _assert_one_line_error(capsys, "bad magic")


def test_corrupt_entry_and_missing_things(
    small_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = bytearray(small_log.read_bytes())
    raw[512 + 16] = 0xFF  # unknown flags in entry 0
    corrupt = tmp_path / "corrupt.log"
    corrupt.write_bytes(bytes(raw))
    assert run_cli(["log", "list", str(corrupt)]) == 2
    _assert_one_line_error(capsys, "entry 0 at byte 528")

    target = tmp_path / "disk.img"
    target.write_bytes(bytes(4096))
    assert run_cli(["log", "replay", str(small_log), str(target), "--to-mark", "nope"]) == 2
    _assert_one_line_error(capsys, "no mark 'nope'")
    assert run_cli(["log", "replay", str(small_log), str(tmp_path / "none"), "--to", "1"]) == 2
    _assert_one_line_error(capsys, "cannot open replay target")
    assert run_cli(["log", "info", str(tmp_path / "none.log")]) == 2
    _assert_one_line_error(capsys, "cannot open log")


def test_replay_needs_exactly_one_stop(small_log: Path, tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        run_cli(["log", "replay", str(small_log), str(tmp_path / "t")])
    with pytest.raises(SystemExit):
        run_cli(
            ["log", "replay", str(small_log), str(tmp_path / "t"), "--to", "1", "--to-mark", "x"]
        )


@pytest.mark.host_root
def test_replay_refuses_a_mounted_device(
    small_log: Path, tmp_path: Path, loop_ext4, capsys: pytest.CaptureFixture[str]
) -> None:
    dev, image = loop_ext4.dev, loop_ext4.image
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        subprocess.run(["mount", dev, str(mnt)], check=True)
        (mnt / "keep").write_text("precious")
        # Read-only from here: the journal's commit timer can no longer write, so the
        # image changes only if the replay writes (it is still mounted: in use).
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        before = image.read_bytes()[:1 << 20]
        assert run_cli(["log", "replay", str(small_log), dev, "--to", "1"]) == 2
        _assert_one_line_error(capsys, "in use (mounted")
        assert (mnt / "keep").read_text() == "precious"
        assert image.read_bytes()[:1 << 20] == before
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
