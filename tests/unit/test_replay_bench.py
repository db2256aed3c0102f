"""bench/replay.py: the race on a file, and the floor of a command it prints beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.replay import MIB, build_log, command_floor, race_methods
from devicemapper.logformat import LogReader


def test_the_floor_is_the_interpreter_start_plus_the_compiled_replay() -> None:
    best = {"replay-log": 0.065, "compiled": 0.047, "command": 0.094}
    line = command_floor(best, 0.011, "replay-log")
    assert "interpreter start 11.0 ms + compiled 0.047 s = 0.058 s" in line
    assert "1.12x replay-log's speed" in line
    assert line.endswith("the command takes 36 ms more")


def test_a_race_on_a_file_prints_the_floor_and_every_image_agrees(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log, target = tmp_path / "log.img", tmp_path / "race.img"
    build_log(log, size_bytes=MIB, device_bytes=8 * MIB, mark_every=16, seed=7)
    with LogReader(log) as reader:
        last = reader.nr_entries - 1
    runs = race_methods(log, target, 8 * MIB, last, 1, None, None, block=False, baseline=None)
    out = capsys.readouterr().out
    assert set(runs) == {"command", "command, Python", "Python", "compiled", "compiled, latest",
                         "compiled + fsync"}
    floor = next(line for line in out.splitlines() if "floor of a command in Python" in line)
    assert "x Python's speed" in floor
    assert "images identical to Python's: all" in out
