"""``powercut run`` with a small study: steps run, controls are judged, exit status follows."""

from __future__ import annotations

import subprocess
import sys

STUDY = """
[study]
name = "tiny"
description = "one honest step, one positive control that fires, one that cannot"

[[step]]
command = "crash"
targets = ["ext4/ordered"]
options = { case = "hand:append-fdatasync", quiet = true }

[[step]]
command = "crash"
targets = ["ext4/nobarrier"]
options = { case = "hand:write-fsync-rename", quiet = true }
expect = "fail"
"""


def run_study(tmp_path, text):
    study = tmp_path / "study.toml"
    study.write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "framework.cli", "run", str(study), "--results", str(tmp_path / "r"),
         "--db", str(tmp_path / "db.sqlite")], capture_output=True, text=True, timeout=900)


def test_study_runs_steps_and_judges_controls(tmp_path):
    out = run_study(tmp_path, STUDY)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "powercut crash --target ext4/ordered --case hand:append-fdatasync" in out.stdout
    assert out.stdout.count("as expected") == 2


def test_a_control_that_stays_quiet_fails_the_study(tmp_path):
    quiet_control = STUDY.replace('targets = ["ext4/nobarrier"]', 'targets = ["ext4/journal"]')
    out = run_study(tmp_path, quiet_control.split("[[step]]")[0] + "[[step]]" + quiet_control.split("[[step]]")[2])
    assert out.returncode == 1
    assert "UNEXPECTED" in out.stdout
