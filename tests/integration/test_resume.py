"""--resume after powercut is killed with SIGKILL, in a study's crash step and again in its
bench step: the study completes in its own run and directories, nothing finished is lost or
done twice, and the crash outcomes equal an uninterrupted run's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from framework.core.store import RunStatus, Store

CRASH = ["--target", "ext4/ordered", "--case", "gen:seq1", "--max-sequences", "4",
         "--variants", "prefix"]
STUDY = """
[study]
name = "resumable"
description = "a crash step and a bench step, killed and resumed"

[[step]]
command = "crash"
targets = ["ext4/ordered"]
options = { case = "gen:seq1", max-sequences = 4, variants = "prefix", quiet = true }

[[step]]
command = "bench"
targets = ["ext4/ordered"]
options = { workload = "fsmark", reps = 2, seed = 7, quiet = true }
"""


def powercut(tmp_path: Path, name: str, *argv: str) -> subprocess.Popen[str]:
    # A session of its own: SIGKILL of the group takes powercut and its qemu guests at once,
    # as a killed terminal or CI job would.
    with open(tmp_path / f"{name}.out", "w") as out:
        return subprocess.Popen([sys.executable, "-m", "framework.cli", *argv],
                                stdout=out, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)


def kill_when(proc: subprocess.Popen[str], ready: Callable[[], bool], log: Path) -> None:
    deadline = time.monotonic() + 900
    while not ready():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "nothing to interrupt within 15 minutes"
        time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def lines(pattern: str, root: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in root.glob(pattern))


def by_mark(results_json: Path) -> dict[tuple[str, str], str]:
    """Outcome per (last mark, variant): comparable across recordings (entry indices are not)."""
    states = json.loads(results_json.read_text())["states"]
    return {(s["last_mark"], s["variant"]): s["result"]["outcome"] for s in states}


def test_a_study_killed_in_crash_and_in_bench_resumes_to_the_whole_result(tmp_path: Path) -> None:
    study, results, db = tmp_path / "study.toml", tmp_path / "r", tmp_path / "db.sqlite"
    study.write_text(STUDY)
    where = ["--results", str(results), "--db", str(db)]

    # 1. Killed while the crash step's guest has checked a few states (the host has stored
    # none of them yet: it stores a chunk when the guest returns it).
    first = powercut(tmp_path, "first", "run", str(study), *where)
    kill_when(first, lambda: lines("crash-*/vm-*/results.jsonl", results) >= 3,
              tmp_path / "first.out")
    (study_dir,) = results.glob("study-*")
    (crash_dir,) = results.glob("crash-*")
    assert not (crash_dir / "results.json").exists()

    # 2. Resumed: the crash step carries on its run; killed again in the bench step once a
    # repetition is written.
    second = powercut(tmp_path, "second", "run", "--resume", str(study_dir), *where)
    kill_when(second, lambda: lines("bench-*/samples.jsonl", results) >= 1,
              tmp_path / "second.out")
    assert (crash_dir / "results.json").exists()
    (bench_dir,) = results.glob("bench-*")
    measured = [json.loads(x) for x in (bench_dir / "samples.jsonl").read_text().splitlines()]

    # 3. Resumed again: finishes.
    third = powercut(tmp_path, "third", "run", "--resume", str(study_dir), *where)
    assert third.wait(timeout=1800) == 0, (tmp_path / "third.out").read_text()[-3000:]
    assert "done before (exit 0): not run again" in (tmp_path / "third.out").read_text()

    with Store(db) as store:
        (top,) = [r for r in store.runs() if r.parent_id is None]
        assert top.kind == "study" and top.status is RunStatus.FINISHED
        assert len(top.environment["resumed"]) == 2
        kids = store.children(top.id)
        assert [(k.kind, k.status, k.environment["study_step"]) for k in kids] == [
            ("crash", RunStatus.FINISHED, 1), ("bench", RunStatus.FINISHED, 2)]
        checks = store.checks(kids[0].id)
        samples = store.bench_samples(kids[1].id, metric="trial_wall_s")
    states = json.loads((crash_dir / "results.json").read_text())["states"]
    assert all(s["result"] for s in states) and len(checks) == len(states)
    earlier = [json.loads(x) for x in
               (crash_dir / "resumed-results.jsonl").read_text().splitlines()]
    assert len(earlier) >= 3
    final = {s["key"]: s["result"] for s in states}
    assert all(final[r["key"]] == r for r in earlier)  # taken over, not checked again
    # Every repetition exactly once; those measured before the kill kept as they were.
    assert sorted((s.target, s.repetition) for s in samples) == [
        ("ext4/ordered", 1), ("ext4/ordered", 2)]
    rows = [json.loads(x) for x in (bench_dir / "samples.jsonl").read_text().splitlines()]
    assert sorted(r["seq"] for r in rows) == [0, 1]
    assert rows[:len(measured)] == measured

    # The same crash plan uninterrupted: the same states and outcomes.
    whole = powercut(tmp_path, "whole", "crash", *CRASH, "-q", "--results",
                     str(tmp_path / "whole"), "--db", str(tmp_path / "whole.sqlite"))
    assert whole.wait(timeout=1800) == 0, (tmp_path / "whole.out").read_text()[-3000:]
    (whole_dir,) = (tmp_path / "whole").glob("crash-*")
    assert by_mark(crash_dir / "results.json") == by_mark(whole_dir / "results.json")


def test_resume_refuses_what_it_cannot_carry_on(tmp_path: Path) -> None:
    def run(command: str, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "framework.cli", command, *argv,
                               "--db", str(tmp_path / "db.sqlite")],
                              capture_output=True, text=True, timeout=120)

    for command, what in (("crash", "crash"), ("cut", "cut"), ("bench", "bench"),
                          ("run", "study")):
        missing = run(command, "--resume", str(tmp_path / "nope"))
        assert missing.returncode == 2, missing.stderr
        assert missing.stderr.strip().endswith(
            f"not a powercut {what} run directory (no plan.json)")
    both = run("crash", "--resume", str(tmp_path), "--target", "ext4/ordered")
    assert both.returncode == 2 and "drop --target" in both.stderr
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "plan.json").write_text(json.dumps({"target": "ext4/ordered", "case": "gen:seq1"}))
    unknown = run("crash", "--resume", str(stray))
    assert unknown.returncode == 2 and "no run in" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1
