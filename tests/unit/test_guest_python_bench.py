"""bench/guest_python.py: which interpreters it times, and what it refuses."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from bench.guest_python import interpreters, parse_args


def test_the_virtualenvs_interpreter_comes_first_and_each_binary_once(tmp_path: Path) -> None:
    alias = tmp_path / "python-alias"
    alias.symlink_to(os.path.realpath(sys.executable))
    assert interpreters([os.fspath(alias)]) == [sys.executable]
    other = tmp_path / "other-python"
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    assert interpreters([os.fspath(other), os.fspath(alias)]) == [sys.executable, os.fspath(other)]


def test_a_path_that_is_no_interpreter_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-python"
    with pytest.raises(SystemExit, match=f"{missing}: not an executable interpreter"):
        interpreters([os.fspath(missing)])


def test_runs_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--runs", "0"])
    assert "--runs 0: must be at least 1" in capsys.readouterr().err
