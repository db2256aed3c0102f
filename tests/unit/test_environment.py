"""The revision a run records: git's, or the one a copy without git's files was built from."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from framework.core.environment import REVISION_ENV, git_revision
from framework.core.machine.base import project_root


def test_a_copy_without_git_records_the_revision_it_was_built_from(tmp_path: Path,
                                                                    monkeypatch) -> None:
    monkeypatch.delenv(REVISION_ENV, raising=False)
    assert git_revision(tmp_path) is None
    monkeypatch.setenv(REVISION_ENV, "07de433-dirty")
    assert git_revision(tmp_path) == "07de433-dirty"


def test_git_wins_over_the_environment_in_a_checkout(monkeypatch) -> None:
    described = subprocess.run(["git", "-C", str(project_root()), "describe", "--always",
                                "--dirty"], capture_output=True, text=True)
    if described.returncode != 0:
        pytest.skip("not a git checkout")
    monkeypatch.setenv(REVISION_ENV, "not-this-one")
    assert git_revision() == described.stdout.strip()
