"""Merging databases: the shards of a CI run (or any runs) copied into one database."""

from __future__ import annotations

import sqlite3
from typing import Any

from framework.core.store.crash import crash_point_id, recording_id
from framework.core.store.database import from_json, insert, target_id, to_json
from framework.core.store.runs import Runs, RunStatus

# A merged run is as bad as its worst shard; a shard still "running" never finished.
_STATUS_RANK = {RunStatus.FINISHED: 0, RunStatus.INTERRUPTED: 1, RunStatus.RUNNING: 2,
                RunStatus.FAILED: 3}


def _merged_status(a: RunStatus, b: RunStatus) -> RunStatus:
    return max(a, b, key=_STATUS_RANK.__getitem__)


def _copy(db: sqlite3.Connection, table: str, row: sqlite3.Row, **ids: int) -> None:
    """Row ``row`` of another database into ``table``, with the ids of this one (``ids``:
    column: id); a row whose natural key is here already stays as it is."""
    # sqlite3.Row iterates over its values; its keys() are the column names.
    values: dict[str, Any] = {k: v for k, v in zip(row.keys(), row, strict=True)
                              if k not in ("id", "target")}
    insert(db, table, values | ids, conflict="IGNORE")


class Merging(Runs):
    """Copying the runs of another database into this one."""

    def merge_from(self, other: Runs) -> None:
        """Copy every run of ``other`` into this database, one transaction per run.

        Runs are matched by uuid (shards of one CI run share it); targets,
        recordings, crash points and results by their natural keys, so merging
        the same shard twice changes nothing.
        """
        for run in other.runs():
            with self.transaction() as db:
                mine = db.execute("SELECT id, status, finished_at FROM runs WHERE uuid = ?",
                                  (run.uuid,)).fetchone()
                if mine is None:
                    parent = None
                    if run.parent_id is not None:
                        # Runs are copied in id order, so a study run is here before its steps.
                        p = db.execute("SELECT id FROM runs WHERE uuid = ?",
                                       (other.run(run.parent_id).uuid,)).fetchone()
                        parent = None if p is None else int(p["id"])
                    cur = db.execute(
                        "INSERT INTO runs (uuid, started_at, finished_at, command_line, study,"
                        " status, git_revision, environment, kind, parent_id)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (run.uuid, run.started_at, run.finished_at, run.command_line,
                         run.study, run.status.value, run.git_revision,
                         to_json(run.environment), run.kind, parent))
                    run_id = int(cur.lastrowid or 0)
                else:
                    run_id = int(mine["id"])
                    status = _merged_status(RunStatus(mine["status"]), run.status)
                    finished = max(filter(None, (mine["finished_at"], run.finished_at)),
                                   default=None)
                    db.execute("UPDATE runs SET status = ?, finished_at = ? WHERE id = ?",
                               (status.value, finished, run_id))
                plan = run.environment.get("plan") or {}
                if isinstance(plan, dict) and "shard_index" in plan:
                    # Which shards of a sharded study this run now holds, and how each ended.
                    row = db.execute("SELECT environment FROM runs WHERE id = ?",
                                     (run_id,)).fetchone()
                    env = from_json(row["environment"])
                    seen = env.setdefault("shards_merged", {})
                    seen.update(run.environment.get("shards_merged") or {})
                    seen[str(plan["shard_index"])] = run.status.value
                    db.execute("UPDATE runs SET environment = ? WHERE id = ?",
                               (to_json(env), run_id))
                _copy_run(db, other, run.id, run_id)


def _copy_run(db: sqlite3.Connection, other: Runs, src_run: int, run_id: int) -> None:
    """The targets and results of run ``src_run`` of ``other`` into run ``run_id`` of ``db``."""
    src = other._db
    for name, config in other.targets(src_run).items():
        target_id(db, run_id, name, config)
    recordings = src.execute(
        "SELECT r.*, t.name AS target FROM recordings r JOIN targets t"
        " ON r.target_id = t.id WHERE t.run_id = ?", (src_run,)).fetchall()
    for rec in recordings:
        rec_id = recording_id(db, run_id, rec["target"], rec["case_spec"], rec["seed"],
                              rec["log_path"], rec["entries"], rec["marks"])
        points = src.execute("SELECT * FROM crash_points WHERE recording_id = ?",
                             (rec["id"],)).fetchall()
        for point in points:
            point_id = crash_point_id(db, rec_id, point["entry_index"], point["kind"],
                                      point["last_mark"])
            for c in src.execute("SELECT * FROM checks WHERE crash_point_id = ?",
                                 (point["id"],)):
                _copy(db, "checks", c, crash_point_id=point_id)
    for table, alias in (("recoveries", "v"), ("bench_samples", "b"), ("sweep_points", "s")):
        for row in src.execute(f"SELECT {alias}.*, t.name AS target FROM {table} {alias}"
                               f" JOIN targets t ON {alias}.target_id = t.id WHERE t.run_id = ?",
                               (src_run,)):
            _copy(db, table, row, target_id=target_id(db, run_id, row["target"]))
    for table in ("reruns", "artifacts"):
        for row in src.execute(f"SELECT * FROM {table} WHERE run_id = ?", (src_run,)):
            _copy(db, table, row, run_id=run_id)
