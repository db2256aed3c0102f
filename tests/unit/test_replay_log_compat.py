"""``powercut log replay-log``: fstests' replay-log command line, output and exit status.

The model is the disk image build_log() expects after each entry. With a built fstests
checkout (POWERCUT_XFSTESTS, built with fstests' own make) the same option sets also run
through src/log-writes/replay-log, and outputs, exit statuses and images must be equal.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from devicemapper.logformat import LogEntry, LogFlag
from framework.cli import main
from tests.unit.test_replay import build_log, entries_of, fresh_target, initial_image

S = 512


@pytest.fixture()
def logged(tmp_path: Path) -> tuple[Path, list[bytes], list[LogEntry]]:
    path = tmp_path / "test.log"
    images = build_log(path, seed=7, n=200)
    return path, images, entries_of(path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["log", "replay-log", *argv])
    out = capsys.readouterr()
    return status, out.out, out.err


def first(entries: list[LogEntry], flag: int, start: int = 0) -> LogEntry:
    return next(e for e in entries if e.index >= start and e.flags & flag)


def test_counts_summary_and_find(logged, capsys) -> None:
    path, _, entries = logged
    assert run(capsys, "--log", str(path), "--num-entries") == (0, f"{len(entries)}\n", "")
    assert run(capsys, "--log", str(path)) == (
        0, f"Log version=1, sectorsize={S}, entries={len(entries)}\n", "")
    mark = next(e for e in entries if e.mark and e.index > 50)
    # ENTRY@SECTOR: the entry, and where the next entry starts in log sectors.
    assert run(capsys, "--log", str(path), "--find", "--end-mark", str(mark.mark)) == (
        0, f"{mark.index}@{mark.payload_end // S}\n", "")
    fua = first(entries, LogFlag.FUA, 60)
    assert run(capsys, "--log", str(path), "--find", "--next-fua", "--start-entry", "60")[1] == (
        f"{fua.index}@{fua.payload_end // S}\n")
    flush = first(entries, LogFlag.FLUSH, 10)
    assert run(capsys, "--log", str(path), "--find", "--next-flush", "--start-entry", "10")[1] \
        .startswith(f"{flush.index}@")
    # --limit counts entries from the start entry, the one it stops at included.
    assert run(capsys, "--log", str(path), "--find", "--limit", "5", "--start-entry", "20")[1] \
        .startswith("24@")


def test_what_replay_log_refuses_is_exit_1_with_its_words(logged, capsys) -> None:
    path, _, entries = logged
    assert run(capsys, "--log", str(path), "--find", "--end-mark", "nosuch") == (
        1, "", "Couldn't find entry\n")
    assert run(capsys, "--log", str(path), "--start-mark", "nosuch", "--find", "--next-fua") == (
        1, "", "Couldn't find starting mark\n")
    assert run(capsys, "--log", str(path), "--start-entry", str(len(entries))) == (
        1, "", "Invalid entry number\n")
    # What it does not take is a usage error, as every bad option of powercut is.
    with pytest.raises(SystemExit) as stop:
        main(["log", "replay-log", "--log", str(path), "--fsck", "true", "--check", "fua"])
    assert stop.value.code == 2


def test_replay_to_a_mark_or_a_limit_gives_the_expected_image(logged, tmp_path, capsys) -> None:
    path, images, entries = logged
    mark = next(e for e in entries if e.mark and e.index > 100)
    target = fresh_target(tmp_path, seed=7)
    assert run(capsys, "--log", str(path), "--replay", str(target), "--end-mark",
               str(mark.mark)) == (0, "", "")
    assert target.read_bytes() == images[mark.index]
    target = fresh_target(tmp_path, "limit.img", seed=7)
    assert run(capsys, "--log", str(path), "--replay", str(target), "--limit", "37")[0] == 0
    assert target.read_bytes() == images[36]
    target = fresh_target(tmp_path, "all.img", seed=7)
    assert run(capsys, "--log", str(path), "--replay", str(target))[0] == 0
    assert target.read_bytes() == images[len(entries) - 1]


def test_a_start_entry_leaves_earlier_entries_unreplayed(logged, tmp_path, capsys) -> None:
    path, images, entries = logged
    # The target already holds the image after entry 79: replaying 80.. through the next
    # FUA gives the image after that FUA, as a whole replay would.
    target = tmp_path / "mid.img"
    target.write_bytes(images[79])
    fua = first(entries, LogFlag.FUA, 80)
    assert run(capsys, "--log", str(path), "--replay", str(target), "--next-fua",
               "--start-entry", "80")[0] == 0
    assert target.read_bytes() == images[fua.index]
    # On a fresh target, entries before 80 are missing: the image differs.
    fresh = fresh_target(tmp_path, "fresh.img", seed=7)
    run(capsys, "--log", str(path), "--replay", str(fresh), "--next-fua", "--start-entry", "80")
    assert fresh.read_bytes() != images[fua.index]
    assert initial_image(7) != images[fua.index]


REPLAY_LOG = Path(os.environ.get("POWERCUT_XFSTESTS", "/nonexistent")) / "src/log-writes/replay-log"

FIND_OPTIONS = [
    ["--num-entries"], [], ["--find", "--next-fua"], ["--find", "--next-flush", "--start-entry", "40"],
    ["--find", "--limit", "50"], ["--find", "--limit", "9", "--start-entry", "100"],
    ["--find", "--end-mark", "nosuch"], ["--find", "--start-mark", "nosuch", "--next-fua"],
    ["--start-entry", "100000"],
]
REPLAY_OPTIONS = [[], ["--limit", "120"], ["--next-fua", "--start-entry", "30"], ["--no-discard"],
                  ["--limit", "150", "--no-discard"]]


@pytest.mark.skipif(not REPLAY_LOG.is_file(),
                    reason="set POWERCUT_XFSTESTS to a built fstests checkout (fstests' own "
                           "make) to compare with its replay-log")
def test_the_same_answers_and_images_as_fstests_replay_log(logged, tmp_path) -> None:
    path, _, entries = logged
    marks = [str(e.mark) for e in entries if e.mark]
    finds = [*FIND_OPTIONS, ["--find", "--end-mark", marks[3]],
             ["--find", "--start-mark", marks[1], "--next-fua"]]
    powercut = [sys.executable, "-m", "framework.cli", "log", "replay-log"]
    for options in finds:
        theirs = subprocess.run([str(REPLAY_LOG), "--log", str(path), *options],
                                capture_output=True, text=True)
        ours = subprocess.run([*powercut, "--log", str(path), *options], capture_output=True,
                              text=True)
        assert (ours.returncode, ours.stdout, ours.stderr) == (
            theirs.returncode, theirs.stdout, theirs.stderr), options
    for options in [*REPLAY_OPTIONS, ["--end-mark", marks[-2]],
                    ["--start-mark", marks[0], "--end-mark", marks[5]]]:
        a, b = fresh_target(tmp_path, "a.img", seed=7), fresh_target(tmp_path, "b.img", seed=7)
        theirs = subprocess.run([str(REPLAY_LOG), "--log", str(path), "--replay", str(a), *options])
        ours = subprocess.run([*powercut, "--log", str(path), "--replay", str(b), *options])
        assert ours.returncode == theirs.returncode, options
        assert a.read_bytes() == b.read_bytes(), options


#: Modules `log replay-log` has no use for on its way to a replay; scripts start it once per
#: state, so each one imported at the top of a module on that path costs every start
#: (json, hashlib with OpenSSL and ctypes cost 6 to 10 ms together on the host).
NOT_AT_START = ("json", "hashlib", "ctypes")


def test_a_replay_imports_nothing_it_does_not_use(logged, tmp_path) -> None:
    path, _, _ = logged
    target = fresh_target(tmp_path, "t.img", seed=7)
    root = Path(__file__).resolve().parents[2]
    probe = ("import sys\nfrom framework.cli import main\n"
             f"status = main(['log', 'replay-log', '--log', {str(path)!r}, '--replay', "
             f"{str(target)!r}, '--next-fua'])\n"
             f"print(status, *sorted(m for m in {NOT_AT_START!r} if m in sys.modules))\n")
    # -I: no PYTHON* variables (the checkout is put on the path by hand), so the probe
    # sees what a user's start imports.
    done = subprocess.run([sys.executable, "-I", "-c",
                           f"import sys; sys.path.insert(0, {str(root)!r})\n" + probe],
                          capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0"], f"imported at start: {done.stdout.split()[1:]}"
    # The positive control: the same probe sees a module that is imported.
    shown = subprocess.run([sys.executable, "-I", "-c",
                            f"import sys, json; sys.path.insert(0, {str(root)!r})\n" + probe],
                           capture_output=True, text=True, cwd=root)
    assert shown.stdout.split() == ["0", "json"], shown.stderr
