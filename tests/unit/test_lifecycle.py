"""The run lifecycle every command shares: directory, store row, environment, how it ended."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framework.core import rundir
from framework.core.errors import ConfigError
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


@pytest.mark.parametrize("damage", [
    lambda b: b[: len(b) // 2],  # cut short
    lambda b: b[:20] + bytes([0xFF, 0xC5]) + b[22:],  # bytes that are not UTF-8
    lambda b: b"",
])
def test_a_damaged_run_file_is_a_one_line_error_naming_it(tmp_path: Path, damage) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"target": "ext4/ordered", "case": "gen:seq1", "seed": 0}))
    path.write_bytes(damage(path.read_bytes()))
    before = path.read_bytes()
    with pytest.raises(ConfigError) as caught:
        rundir.read_json(path, "crash plan")
    message = str(caught.value)
    assert message.startswith(f"{path}: the crash plan is not valid JSON") and "\n" not in message
    assert path.read_bytes() == before


def test_a_log_is_checked_against_the_digest_its_recording_noted(tmp_path: Path) -> None:
    run_dir = tmp_path / "crash-1"
    run_dir.mkdir()
    log = run_dir / rundir.LOG
    with open(log, "wb") as f:  # sparse: data at 0 and at 1 MiB, holes elsewhere
        f.write(b"header" * 100)
        f.seek(1 << 20)
        f.write(b"\x01" * 5000)
        f.truncate(8 << 20)
    digest = rundir.content_digest(log)
    # The same bytes with the holes filled in (a plain copy) have the same digest.
    filled = tmp_path / "filled.img"
    filled.write_bytes(log.read_bytes())
    assert rundir.content_digest(filled) == digest
    (run_dir / rundir.RECORD).write_text(json.dumps({rundir.LOG + rundir.DIGEST_SUFFIX: digest}))
    assert rundir.verified_log(run_dir) == log
    data = bytearray(log.read_bytes())
    data[(1 << 20) + 10] ^= 0xFF  # one byte of an entry's payload
    log.write_bytes(bytes(data))
    with pytest.raises(ConfigError) as caught:
        rundir.verified_log(run_dir)
    assert str(caught.value).startswith(f"{log}: the log changed since it was recorded")
    # A run recorded before digests were noted is taken as it is.
    (run_dir / rundir.RECORD).write_text("{}")
    assert rundir.verified_log(run_dir) == log


def test_a_file_is_replaced_whole_or_not_at_all(tmp_path: Path) -> None:
    from framework.core.files import replacing, write_atomic

    path = tmp_path / "cache.bin"
    write_atomic(path, b"old")
    with pytest.raises(RuntimeError), replacing(path) as tmp:
        tmp.write_bytes(b"half of the n")
        raise RuntimeError("killed mid-write")
    assert path.read_bytes() == b"old" and sorted(tmp_path.iterdir()) == [path]
    write_atomic(path, "new, in UTF-8: é", mode=0o755)
    assert path.read_text() == "new, in UTF-8: é" and path.stat().st_mode & 0o777 == 0o755
    assert sorted(tmp_path.iterdir()) == [path]


def test_results_carry_a_format_number_and_old_ones_still_read(tmp_path: Path) -> None:
    with run_lifecycle(SPEC, tmp_path, None) as run:
        run.save_results({"states": []})
    path = run.run_dir / rundir.RESULTS
    assert json.loads(path.read_text())["format"] == rundir.RESULTS_FORMAT == 1
    assert rundir.read_results(run.run_dir, "crash run's results") == {"states": [], "format": 1}
    # Written before the number existed: format 1, read as it always was.
    path.write_text(json.dumps({"states": [{"key": "3/prefix"}]}))
    assert rundir.read_results(run.run_dir, "crash run's results")["states"][0]["key"] == "3/prefix"
    # A format this powercut does not know is a one-line error naming the file.
    path.write_text(json.dumps({"format": 2, "states": []}))
    with pytest.raises(ConfigError) as caught:
        rundir.read_results(run.run_dir, "crash run's results")
    message = str(caught.value)
    assert message.startswith(f"{path}: results of format 2") and "\n" not in message
