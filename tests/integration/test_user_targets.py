"""A user target from --targets-file goes through crash, cut, bench and run like a built-in one.

The target is ext4 with data=journal under a name of its own: the guest must
mount it with the user's options (it gets the whole target, not a name) and
check it with exactly the rules of ext4/journal (derived from its options).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from framework.core.store import RunStatus, Store

TARGETS = """
[targets."mine"]
fstype = "ext4"
mount_options = ["data=journal", "commit=1"]
description = "ext4 data=journal under a user's name"
"""

STUDY = """
[study]
name = "user-target"
description = "every command on one user target"
targets_file = "mine.toml"

[[step]]
command = "crash"
targets = ["mine"]
options = { case = "hand:append-fdatasync", quiet = true }

[[step]]
command = "cut"
targets = ["mine"]
options = { case = "random:40", trials = 1, quiet = true }

[[step]]
command = "bench"
targets = ["ext4/ordered", "mine"]
options = { workload = "fsmark", reps = 2, seed = 1, quiet = true }
"""

POWERCUT = [sys.executable, "-m", "framework.cli"]


def test_a_study_runs_crash_cut_and_bench_on_a_user_target_and_recheck_needs_no_file(
        tmp_path: Path) -> None:
    (tmp_path / "mine.toml").write_text(TARGETS)
    (tmp_path / "study.toml").write_text(STUDY)
    db = tmp_path / "db.sqlite"
    out = subprocess.run([*POWERCUT, "run", str(tmp_path / "study.toml"), "--results",
                          str(tmp_path / "r"), "--db", str(db)],
                         capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("as expected") == 3
    with Store(db) as store:
        runs = store.runs()
        assert [r.study.split()[0] for r in runs] == ["crash", "cut", "bench"]
        for run in runs:
            assert run.status is RunStatus.FINISHED
            config = store.targets(run.id)["mine"]
            assert config["mount_options"] == ["data=journal", "commit=1"]
        # The guest mounted the user's options, not a built-in target's.
        assert "data=journal" in store.targets(runs[2].id)["mine"]["applied_mount_options"]
    # The crash run keeps the definition, so its reproducer needs no targets file.
    (run_dir,) = (tmp_path / "r").glob("crash-*")
    plan = json.loads((run_dir / "plan.json").read_text())
    assert [t["name"] for t in plan["user_targets"]] == ["mine"]
    (tmp_path / "mine.toml").unlink()
    last = json.loads((run_dir / "results.json").read_text())["states"][-1]["key"]
    again = subprocess.run([*POWERCUT, "recheck", str(run_dir), last],
                           capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert again.stdout.startswith(f"{last}: ok")
