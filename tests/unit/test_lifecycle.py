"""The run lifecycle every command shares: directory, store row, environment, how it ended."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framework.core.lifecycle import RunSpec, run_lifecycle
from framework.core.store import RunStatus, Store


class Guest:
    def describe(self) -> dict[str, str]:
        return {"kernel": "6.1.0-test", "accel": "tcg"}


SPEC = RunSpec("crash", "crash ext4/ordered gen:seq1", plan={"case": "gen:seq1", "seed": 3},
               seeds={"workload": 3}, targets={"ext4/ordered": {"fstype": "ext4"}},
               tool_versions={"mkfs.ext4": "1.47.0"})


def test_a_finished_run_has_its_environment_plan_targets_and_artifacts(tmp_path: Path) -> None:
    with Store(tmp_path / "db.sqlite") as store:
        with run_lifecycle(SPEC, tmp_path / "results", store) as run:
            assert run.started(Guest()).describe()["accel"] == "tcg"
            run.started(Guest())  # only the first guest is recorded
            (run.run_dir / "log.img").write_bytes(b"x" * 10)
            run.add_artifact(run.run_dir / "log.img", "log")
            run.save_json("results.json", {"states": 1})
        (row,) = store.runs()
        assert row.status is RunStatus.FINISHED and row.finished_at is not None
        env = row.environment
        assert env["guest"] == {"kernel": "6.1.0-test", "accel": "tcg"}
        assert env["seeds"] == {"workload": 3} and env["plan"]["case"] == "gen:seq1"
        assert env["tools"] == {"mkfs.ext4": "1.47.0"} and "powercut" in env and "python" in env
        assert store.targets(row.id) == {"ext4/ordered": {"fstype": "ext4"}}
        (art,) = store.artifacts(row.id)
        assert art.path == "log.img" and art.size_bytes == 10 and len(art.sha256) == 64
    assert run.run_dir.name.startswith("crash-") and run.run_dir.is_absolute()
    assert json.loads((run.run_dir / "plan.json").read_text()) == {"case": "gen:seq1", "seed": 3}
    assert json.loads((run.run_dir / "results.json").read_text()) == {"states": 1}
    assert not list(run.run_dir.glob("*.tmp"))


@pytest.mark.parametrize(("exc", "status"), [(KeyboardInterrupt, RunStatus.INTERRUPTED),
                                             (RuntimeError, RunStatus.FAILED)])
def test_an_unfinished_run_says_how_it_ended(tmp_path: Path, exc: type[BaseException],
                                             status: RunStatus) -> None:
    with Store(tmp_path / "db.sqlite") as store:
        with pytest.raises(exc), run_lifecycle(SPEC, tmp_path, store) as run:
            run.save_json("results.json", {"partial": True})
            raise exc
        (row,) = store.runs()
        assert row.status is status
    assert json.loads((run.run_dir / "results.json").read_text()) == {"partial": True}


def test_without_a_store_the_run_directory_still_gets_its_files(tmp_path: Path) -> None:
    with run_lifecycle(SPEC, tmp_path, None) as run:
        run.started(Guest())
        run.add_artifact(run.run_dir / "missing", "log")  # no store: nothing to record
    assert run.run_id is None and (run.run_dir / "plan.json").exists()
