"""The results store: schema, round trips, resume, shard merge, WAL and crash safety."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from crashcases.vocabulary import CrashPointKind, Outcome
from crashcases.vocabulary import VariantKind as Variant
from framework.bench.workloads import Metric
from framework.core.store import (
    MIGRATIONS,
    SCHEMA_VERSION,
    RunStatus,
    Store,
    StoreError,
    TargetPlacement,
    merge,
)

ROOT = Path(__file__).resolve().parents[2]


def fill_crash(store: Store, run_id: int, target: str, *, points: int, seed: int = 1) -> None:
    """A recording with ``points`` crash points, one prefix check each."""
    rec = store.add_recording(run_id, target, case_spec="fsync-append", seed=seed,
                              log_path=f"logs/{target}.log", entries=100, marks=points)
    for i in range(points):
        cp = store.add_crash_point(rec, entry_index=10 * i, kind=CrashPointKind.MARK,
                                   last_mark=f"fsync-{i}")
        store.add_check(cp, variant=Variant.PREFIX, variant_seed=0,
                        outcome=Outcome.OK if i % 2 == 0 else Outcome.RECOVERED,
                        mount_s=0.1 * i, fsck_s=0.2, fsck_verdicts={"readonly": 0},
                        findings=[], reproducer=f"powercut log replay --entry {10 * i}")


def metrics(n: int, scale: float = 1.0) -> list[Metric]:
    return [Metric(f"m{i}", scale * (i + 1), "MB/s", True) for i in range(n)]


def outcome_counts(store: Store, run_id: int, *, target: str | None = None) -> Counter[str]:
    return Counter(c.outcome for c in store.checks(run_id) if target in (None, c.target))


def bench_keys(store: Store, run_id: int) -> set[tuple[str, str, int]]:
    """(target, workload, repetition) of every stored benchmark repetition."""
    return {(s.target, s.workload, s.repetition)
            for s in store.bench_samples(run_id, include_warmup=True)}


def test_schema_is_created_and_versioned(tmp_path: Path) -> None:
    with Store(tmp_path / "r.db") as store:
        assert store.schema_version == SCHEMA_VERSION == len(MIGRATIONS)
    db = sqlite3.connect(tmp_path / "r.db")
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"runs", "targets", "recordings", "crash_points", "checks", "recoveries",
            "bench_samples", "artifacts"} <= tables
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()
    with Store(tmp_path / "r.db") as store:  # reopening migrates nothing
        assert store.runs() == []


def test_newer_schema_and_garbage_files_are_refused(tmp_path: Path) -> None:
    newer = tmp_path / "newer.db"
    db = sqlite3.connect(newer)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(StoreError, match="newer than this powercut"):
        Store(newer)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="garbage.db: not a usable results database"):
        Store(garbage)


def test_run_lifecycle(tmp_path: Path) -> None:
    with Store(tmp_path / "r.db") as store:
        run_id = store.start_run(command_line="powercut run quick", study="quick",
                                 environment={"kernel": "6.1.0", "accel": "tcg"},
                                 git_revision="abc123")
        run = store.run(run_id)
        assert run.status is RunStatus.RUNNING and run.finished_at is None
        assert run.environment == {"kernel": "6.1.0", "accel": "tcg"}
        store.finish_run(run_id, RunStatus.INTERRUPTED)
        store.resume_run(run_id)
        store.finish_run(run_id, "finished")
        run = store.run(run_id)
        assert run.status is RunStatus.FINISHED and run.finished_at is not None
        assert store.resolve(run.uuid) == run
        with pytest.raises(StoreError, match="no run with id 99"):
            store.finish_run(99, RunStatus.FAILED)
        with pytest.raises(ValueError):
            store.finish_run(run_id, "exploded")


def test_check_round_trip(tmp_path: Path) -> None:
    with Store(tmp_path / "r.db") as store:
        run_id = store.start_run(command_line="c", study="s")
        store.add_target(run_id, "ext4/ordered", {"mkfs": ["-t", "ext4"]})
        fill_crash(store, run_id, "ext4/ordered", points=5)
        rec = store.add_recording(run_id, "xfs", case_spec="rename", seed=2, log_path=None,
                                  entries=10, marks=1)
        cp = store.add_crash_point(rec, entry_index=7, kind="fua")
        store.add_check(cp, variant="subset", variant_seed=42, outcome="data-loss",
                        findings=[{"path": "a", "missing": True}],
                        image_path="images/xfs-7.img.zst")
        checks = store.checks(run_id)
        assert len(checks) == 6
        loss = store.checks(run_id, outcome=Outcome.DATA_LOSS)
        assert len(loss) == 1
        row = loss[0]
        assert (row.target, row.case_spec, row.seed, row.entry_index, row.kind) == (
            "xfs", "rename", 2, 7, CrashPointKind.FUA)
        assert row.variant == Variant.SUBSET and row.variant_seed == 42
        assert row.findings == [{"path": "a", "missing": True}]
        assert row.image_path == "images/xfs-7.img.zst"
        first = checks[0]
        assert first.last_mark == "fsync-0" and first.fsck_verdicts == {"readonly": 0}
        assert first.reproducer == "powercut log replay --entry 0"
        assert outcome_counts(store, run_id) == {Outcome.OK: 3, Outcome.RECOVERED: 2,
                                                Outcome.DATA_LOSS: 1}
        assert outcome_counts(store, run_id, target="xfs") == {Outcome.DATA_LOSS: 1}
        assert store.targets(run_id) == {"ext4/ordered": {"mkfs": ["-t", "ext4"]}, "xfs": {}}


def test_bench_and_recovery_round_trip(tmp_path: Path) -> None:
    with Store(tmp_path / "r.db") as store:
        run_id = store.start_run(command_line="c", study="s")
        store.add_bench_samples(run_id, "ext4", "fio-oltp-8k", repetition=0, warmup=True,
                                metrics=metrics(2, 9.0))
        store.add_bench_samples(run_id, "ext4", "fio-oltp-8k", repetition=1, trial_order=3,
                                metrics=metrics(2))
        store.add_bench_samples(run_id, "ext4", "bonnie", repetition=1,
                                metrics=[Metric("block_read", None, "KiB/s", True)])
        samples = store.bench_samples(run_id, workload="fio-oltp-8k")
        assert [(s.repetition, s.trial_order, s.metric, s.value) for s in samples] == [
            (1, 3, "m0", 1.0), (1, 3, "m1", 2.0)]
        assert len(store.bench_samples(run_id, workload="fio-oltp-8k",
                                       include_warmup=True)) == 4
        (unmeasured,) = store.bench_samples(run_id, workload="bonnie")
        assert unmeasured.value is None and unmeasured.unit == "KiB/s"  # no value, not 0
        assert store.bench_samples(run_id, metric="m1", target="xfs") == []

        store.add_recovery(run_id, "ext4", trial=0, outcome="recovered", in_flight_bytes=4096,
                           in_flight_ops=3, mount_s=0.25, fsck_s=0.5,
                           replay_messages=["EXT4-fs: recovery complete"])
        (rec,) = store.recoveries(run_id)
        assert rec.outcome == Outcome.RECOVERED and rec.in_flight_bytes == 4096
        assert rec.replay_messages == ["EXT4-fs: recovery complete"]

        store.add_artifact(run_id, "logs/ext4.log", sha256="00" * 32, kind="log",
                           size_bytes=1024)
        assert store.artifacts(run_id)[0].kind == "log"


def test_a_resumed_run_keeps_its_results(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    with Store(path) as store:
        run_id = store.start_run(command_line="c", study="s")
        fill_crash(store, run_id, "ext4", points=3)
        store.add_bench_samples(run_id, "ext4", "dbench", repetition=0, metrics=metrics(3))
        store.add_recovery(run_id, "ext4", trial=4, outcome="ok")
        store.finish_run(run_id, RunStatus.INTERRUPTED)
    with Store(path) as store:  # a new process resumes
        (run,) = store.runs()
        store.resume_run(run.id)
        assert {(c.target, c.case_spec, c.seed, c.entry_index, c.kind, c.variant, c.variant_seed)
                for c in store.checks(run.id)} == {
            ("ext4", "fsync-append", 1, i * 10, "mark", "prefix", 0) for i in range(3)}
        assert bench_keys(store, run.id) == {("ext4", "dbench", 0)}
        assert {(r.target, r.trial) for r in store.recoveries(run.id)} == {("ext4", 4)}
        # Re-recording the same case and point reuses rows instead of duplicating.
        fill_crash(store, run.id, "ext4", points=4)
        assert len(store.checks(run.id)) == 4


def test_an_exception_inside_a_result_keeps_earlier_results(tmp_path: Path) -> None:
    with Store(tmp_path / "r.db") as store:
        run_id = store.start_run(command_line="c", study="s")
        store.add_bench_samples(run_id, "ext4", "fsmark", repetition=0, metrics=metrics(2))

        def broken() -> object:
            yield from metrics(2)
            raise RuntimeError("tool died half-way through the repetition")

        with pytest.raises(RuntimeError, match="half-way"):
            store.add_bench_samples(run_id, "ext4", "fsmark", repetition=1,
                                    metrics=broken())  # type: ignore[arg-type]
        # No half repetition: repetition 1 is absent, so a resume redoes it whole.
        assert bench_keys(store, run_id) == {("ext4", "fsmark", 0)}
        assert len(store.bench_samples(run_id)) == 2
        store.add_bench_samples(run_id, "ext4", "fsmark", repetition=1, metrics=metrics(2))
        assert len(store.bench_samples(run_id)) == 4


def _python(code: str, *args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout_s, check=False)


def test_a_killed_writer_loses_only_its_open_transaction(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    proc = _python("""
        import os, sys
        from framework.core.store import Store
        from framework.bench.workloads import Metric
        store = Store(sys.argv[1])
        run = store.start_run(command_line="c", study="s")
        for rep in range(3):
            store.add_bench_samples(run, "ext4", "w", repetition=rep,
                                    metrics=[Metric("x", rep, "s", False)])
        with store.transaction() as db:
            db.execute("UPDATE runs SET status = 'finished'")
            os._exit(9)  # the power goes out mid-transaction
    """, str(path))
    assert proc.returncode == 9, proc.stderr
    with Store(path) as store:
        (run,) = store.runs()
        assert run.status is RunStatus.RUNNING  # the open transaction is gone
        assert bench_keys(store, run.id) == {("ext4", "w", r) for r in range(3)}
        assert store._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_reader_in_another_process_is_not_blocked_by_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    with Store(path) as store:
        run_id = store.start_run(command_line="c", study="s")
        store.add_bench_samples(run_id, "ext4", "w", repetition=0, metrics=metrics(1))
        with store.transaction() as db:  # an uncommitted write holds the write lock
            db.execute("UPDATE runs SET study = 'uncommitted'")
            reader = _python("""
                import sys
                from framework.core.store import Store
                with Store(sys.argv[1], timeout_s=2) as store:
                    (run,) = store.runs()
                    print(run.study, len(store.bench_samples(run.id)))
            """, str(path), timeout_s=30)
            assert reader.returncode == 0, reader.stderr
            assert reader.stdout.split() == ["s", "1"]  # committed state, no wait


def test_two_processes_writing_one_database_at_once_lose_nothing(tmp_path: Path) -> None:
    # Two powercut runs given one --db: each stores its checks a transaction at a time while
    # the other does too. Both finish, every row is there, no "database is locked".
    path = tmp_path / "r.db"
    Store(path).close()  # the schema exists before the race, as after any earlier run
    writer = """
        import sys
        from crashcases.vocabulary import CrashPointKind, Outcome
        from framework.core.store import Store
        with Store(sys.argv[1]) as store:
            run = store.start_run(command_line=sys.argv[2], study="s")
            rec = store.add_recording(run, "ext4/ordered", case_spec="c", seed=0,
                                      log_path=None, entries=1, marks=1)
            for i in range(300):
                cp = store.add_crash_point(rec, entry_index=i, kind=CrashPointKind.MARK,
                                           last_mark=f"pc-{i}")
                store.add_check(cp, variant="prefix", variant_seed=0, outcome=Outcome.OK,
                                mount_s=0.1, fsck_s=0.1, fsck_verdicts={}, findings=[],
                                reproducer=None)
    """
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(writer), str(path), name],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name in ("first", "second")]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0 and "locked" not in err, err
    with Store(path) as store:
        runs = store.runs()
        assert sorted(r.command_line for r in runs) == ["first", "second"]
        assert [len(store.checks(r.id)) for r in runs] == [300, 300]
        assert store._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_processes_opening_one_new_database_at_once_all_get_its_schema(tmp_path: Path) -> None:
    # Two studies started together on a new --db: each finds no schema and creates it. The
    # second must not create it again once the first has ("table runs already exists").
    path = tmp_path / "new.db"
    opener = """
        import sys, time
        from framework.core.store import Store
        time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # all open at one moment
        with Store(sys.argv[1]) as store:
            store.start_run(command_line="c", study=sys.argv[3])
    """
    at = time.time() + 2.0
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(opener), str(path), str(at),
                               f"s{i}"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for i in range(6)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, [err for _, err in outs]
    with Store(path) as store:
        assert sorted(r.study for r in store.runs()) == [f"s{i}" for i in range(6)]
        assert store.schema_version == SCHEMA_VERSION


def old_database(path: Path, version: int, *rows: str) -> None:
    """A database as schema ``version`` left it, holding ``rows`` (INSERT statements)."""
    db = sqlite3.connect(path)
    for statement in ";".join(MIGRATIONS[:version]).split(";"):
        if statement.strip():
            db.execute(statement)
    db.execute(f"PRAGMA user_version = {version}")
    for row in rows:
        db.execute(row)
    db.commit()
    db.close()


def make_shard(path: Path, *, uuid: str, target: str, status: RunStatus) -> None:
    with Store(path) as store:
        run_id = store.start_run(command_line="powercut ci --shard", study="ci", uuid=uuid)
        fill_crash(store, run_id, target, points=2)
        store.add_bench_samples(run_id, target, "dbench", repetition=0, metrics=metrics(2))
        store.add_recovery(run_id, target, trial=0, outcome="ok", mount_s=0.3)
        store.add_artifact(run_id, f"logs/{target}.log", sha256="ab" * 32, kind="log",
                           size_bytes=10)
        store.finish_run(run_id, status)


def test_merge_of_shards(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "c.db"
    make_shard(a, uuid="ci-1", target="ext4", status=RunStatus.FINISHED)
    make_shard(b, uuid="ci-1", target="xfs", status=RunStatus.FAILED)
    make_shard(c, uuid="other", target="btrfs", status=RunStatus.FINISHED)
    into = tmp_path / "all.db"
    merge(into, [a, b, c])
    merge(into, [a])  # merging a shard twice adds nothing
    with Store(into) as store:
        runs = {r.uuid: r for r in store.runs()}
        assert set(runs) == {"ci-1", "other"}
        ci = runs["ci-1"]
        assert ci.status is RunStatus.FAILED  # as bad as its worst shard
        assert set(store.targets(ci.id)) == {"ext4", "xfs"}
        assert len(store.checks(ci.id)) == 4
        assert outcome_counts(store, ci.id) == {Outcome.OK: 2, Outcome.RECOVERED: 2}
        assert len(store.bench_samples(ci.id)) == 4
        assert {r.target for r in store.recoveries(ci.id)} == {"ext4", "xfs"}
        assert {x.path for x in store.artifacts(ci.id)} == {"logs/ext4.log", "logs/xfs.log"}
        other = runs["other"]
        assert [c.target for c in store.checks(other.id)] == ["btrfs", "btrfs"]
        assert bench_keys(store, other.id) == {("btrfs", "dbench", 0)}
    with pytest.raises(StoreError, match="missing.db: no such results database"):
        merge(into, [tmp_path / "missing.db"])


def test_store_creates_its_directory(tmp_path):
    from framework.core.store import Store

    with Store(tmp_path / "new" / "dir" / "powercut.sqlite") as store:
        assert store.runs() == []


def test_study_runs_have_their_steps_as_children(tmp_path: Path) -> None:
    from framework.core.lifecycle import RunSpec, run_lifecycle, steps_of

    db = tmp_path / "r.db"
    with Store(db) as store:
        lone = store.start_run(command_line="powercut crash", study="crash x", kind="crash")
        with run_lifecycle(RunSpec("study", "study tiny"), tmp_path, store) as study:
            with steps_of(study), Store(db) as step_store:  # a step opens the db itself
                with run_lifecycle(RunSpec("crash", "crash ext4"), tmp_path, step_store):
                    pass
                with run_lifecycle(RunSpec("bench", "bench a,b"), tmp_path, step_store):
                    pass
            with run_lifecycle(RunSpec("cut", "cut after"), tmp_path, store):  # not a step
                pass
        assert study.run_id is not None
        kids = store.children(study.run_id)
        assert [(r.kind, r.study, r.parent_id) for r in kids] == [
            ("crash", "crash ext4", study.run_id), ("bench", "bench a,b", study.run_id)]
        assert store.run(study.run_id).kind == "study"
        assert store.resolve("latest").study == "cut after"  # newest top-level run
        assert store.resolve(str(lone)).id == lone
        assert store.resolve(kids[0].uuid[:8]).id == kids[0].id
        # A uuid whose first eight characters are digits (about one in 40) is still found.
        with store.transaction() as tx:
            tx.execute("UPDATE runs SET uuid = ? WHERE id = ?",
                       ("12798811-0000-4000-8000-000000000000", kids[1].id))
        assert store.resolve("12798811").id == kids[1].id
        for bad, message in [("999", r"run '999': no run with that id .*\(ids 1 to 5\)"),
                             ("nonsense", r"run 'nonsense': not a run id, uuid or 'latest'")]:
            with pytest.raises(StoreError, match=message):
                store.resolve(bad)
        with pytest.raises(StoreError, match="no run with id 77 to be a step of"):
            store.start_run(command_line="x", study="x", parent_id=77)
    # Merged into another database, the study keeps its steps.
    into = tmp_path / "into.db"
    with Store(into) as other:
        other.start_run(command_line="powercut bench", study="older", kind="bench")
    merge(into, [db])
    with Store(into) as merged:
        copy = next(r for r in merged.runs() if r.kind == "study")
        assert [r.study for r in merged.children(copy.id)] == ["crash ext4", "bench a,b"]
    with Store(tmp_path / "empty.db") as empty, pytest.raises(StoreError, match="no runs yet"):
        empty.resolve("latest")


def test_a_version_2_database_migrates_with_kinds_from_command_lines(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    old_database(path, 2,
                 "INSERT INTO runs (uuid, started_at, command_line, study, status, environment)"
                 " VALUES ('u1', 't', 'powercut cut --target xfs', 'cut xfs', 'finished', '{}')")
    with Store(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        (run,) = store.runs()
        assert (run.kind, run.parent_id) == ("cut", None)


def test_merge_command_combines_databases_and_names_a_missing_one(tmp_path: Path, capsys) -> None:
    from framework.cli import main

    make_shard(tmp_path / "a.db", uuid="ci-9", target="ext4", status=RunStatus.FINISHED)
    make_shard(tmp_path / "b.db", uuid="ci-9", target="xfs", status=RunStatus.FINISHED)
    assert main(["merge", str(tmp_path / "all.db"), str(tmp_path / "a.db"),
                 str(tmp_path / "b.db")]) == 0
    out = capsys.readouterr().out
    assert "all.db: 1 runs (1 top-level) from 2 database(s)" in out
    with Store(tmp_path / "all.db") as store:
        (run,) = store.runs()
        assert set(store.targets(run.id)) == {"ext4", "xfs"}
    assert main(["merge", str(tmp_path / "all.db"), str(tmp_path / "nope.db")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("nope.db: no such results database") and "\n" not in err
    assert main(["merge", str(tmp_path / "a.db"), str(tmp_path / "a.db")]) == 2


def test_each_target_row_keeps_its_journal_placement_and_disk_profiles(tmp_path: Path) -> None:
    # A version 3 database: its target configs hold the placement; migration reads them out.
    path = tmp_path / "v3.db"
    old_database(path, 3,
                 "INSERT INTO runs (uuid, started_at, command_line, study, status, environment)"
                 " VALUES ('u1', 't', 'powercut cut --target xfs/logdev', 'cut', 'finished', '{}')",
                 "INSERT INTO targets (run_id, name, config) VALUES (1, 'xfs/logdev',"
                 " '{\"journal\": \"external\", \"disk_profiles\": {\"journal\": \"ram\"}}')")
    with Store(path) as store:
        assert store.placements(1) == {"xfs/logdev": TargetPlacement("external", None, "ram")}
        run = store.start_run(command_line="powercut bench", study="b", kind="bench")
        store.add_target(run, "ext4/logdev", {"journal": "external",
                                              "disk_profiles": [("data", "hdd"), ("journal", "ram")]})
        store.add_target(run, "ext2", {"journal": "none"})
        store.add_target(run, "ext2", {"journal": "none", "disk_profiles": {"data": "usb-flash"}})
        assert store.placements(run) == {
            "ext4/logdev": TargetPlacement("external", "hdd", "ram"),
            "ext2": TargetPlacement("none", "usb-flash", None)}
    merge(tmp_path / "into.db", [path])
    with Store(tmp_path / "into.db") as merged:
        assert merged.placements(2)["ext4/logdev"] == TargetPlacement("external", "hdd", "ram")


def test_a_version_6_database_migrates_and_checks_keep_their_findings_signature(
        tmp_path: Path) -> None:
    """Checks of a database from before signatures read with none (reports derive the rest);
    new checks keep their key, signature, ops to the crash point and explanation, and a
    merge copies them."""
    path = tmp_path / "v6.db"
    old_database(path, 6,
                 "INSERT INTO runs (uuid, started_at, command_line, study, status, environment,"
                 " kind) VALUES ('u1', 't', 'powercut crash', 'crash', 'finished', '{}', 'crash')",
                 "INSERT INTO targets (run_id, name, config) VALUES (1, 'ext4', '{}')",
                 "INSERT INTO recordings (target_id, case_spec, seed, entries, marks)"
                 " VALUES (1, 'c', 0, 10, 1)",
                 "INSERT INTO crash_points (recording_id, entry_index, kind, last_mark)"
                 " VALUES (1, 7, 'mark', 'pc-0')",
                 "INSERT INTO checks (crash_point_id, variant, variant_seed, outcome,"
                 " fsck_verdicts, findings, created_at) VALUES (1, 'subset', 3, 'data-loss', '{}',"
                 " '[]', 't')")
    signature = {"fstype": "ext4", "promise": "missing name", "durability": "fsync",
                 "ops": ["creat n1", "fsync n1"]}
    with Store(path) as store:
        assert store.schema_version == SCHEMA_VERSION == 7
        (old,) = store.checks(1)
        assert (old.outcome, old.state, old.signature, old.ops_to_crash, old.explanation) == (
            "data-loss", None, None, None, None)
        cp = store.add_crash_point(1, entry_index=9, kind="mark", last_mark="pc-1")
        store.add_check(cp, variant="prefix", variant_seed=0, outcome="data-loss",
                        state="9/prefix", signature=signature, ops_to_crash=2,
                        explanation="data-loss: f: missing")
    merge(tmp_path / "into.db", [path])
    with Store(tmp_path / "into.db") as merged:
        new = merged.checks(1)[1]
        assert (new.state, new.signature, new.ops_to_crash, new.explanation) == (
            "9/prefix", signature, 2, "data-loss: f: missing")


def test_two_processes_writing_one_database_at_once_both_finish_and_lose_nothing(
        tmp_path: Path) -> None:
    """Fault campaign, short form: two powercut processes store into one database at the
    same time (two studies on one --db); each transaction waits for the other's write lock
    (BEGIN IMMEDIATE), so neither sees "database is locked" and every row is there."""
    path = tmp_path / "r.db"
    with Store(path):
        pass  # the schema exists before both start
    writer = """
        import sys
        from framework.core.store import Store
        from framework.bench.workloads import Metric
        with Store(sys.argv[1]) as store:
            run = store.start_run(command_line="c", study=sys.argv[2])
            for rep in range(150):
                store.add_bench_samples(run, "ext4", "w", repetition=rep,
                                        metrics=[Metric("x", rep, "s", False)])
        print("done")
    """
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(writer), str(path), name],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for name in ("a", "b")]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert all("locked" not in err for _, err in outs), outs
    with Store(path) as store:
        runs = {r.study: r.id for r in store.runs()}
        assert set(runs) == {"a", "b"}
        assert all(len(store.bench_samples(runs[s])) == 150 for s in ("a", "b"))
        assert store._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
