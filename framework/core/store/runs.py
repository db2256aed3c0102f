"""Runs in the store: a run's row, its status, its targets and its artifacts."""

from __future__ import annotations

import os
import sqlite3
import uuid as uuidlib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from framework.core import clock
from framework.core.store.database import (
    Database,
    StoreError,
    from_json,
    target_id,
    to_json,
)


class RunStatus(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Run:
    id: int
    uuid: str
    started_at: str
    finished_at: str | None
    command_line: str
    study: str
    status: RunStatus
    git_revision: str | None
    environment: dict[str, Any]
    kind: str = ""  # crash, cut, bench, study ('' for a run of unknown kind)
    parent_id: int | None = None  # the study run this run is a step of

    @property
    def label(self) -> str:
        """How listings and reports name the run: id, kind and title."""
        return f"run {self.id} ({self.kind or 'run'}: {self.study})"


@dataclass(frozen=True, slots=True)
class TargetPlacement:
    """Where a run's target kept its journal and the device profile of each disk (None: none)."""

    placement: str | None  # internal | external | none, as the target's ``journal`` says
    data_profile: str | None
    journal_profile: str | None


@dataclass(frozen=True, slots=True)
class Artifact:
    path: str
    sha256: str
    kind: str
    size_bytes: int


class Runs(Database):
    """The runs of a results database, their targets and artifacts."""

    def start_run(self, *, command_line: str, study: str,
                  environment: Mapping[str, Any] | None = None,
                  git_revision: str | None = None, uuid: str | None = None,
                  kind: str = "", parent_id: int | None = None) -> int:
        """Record a new run and return its id; ``uuid`` lets CI shards share one run.

        ``parent_id``: the study run this run is a step of."""
        with self.transaction() as db:
            if parent_id is not None and db.execute(
                    "SELECT 1 FROM runs WHERE id = ?", (parent_id,)).fetchone() is None:
                raise StoreError(f"{self.path}: no run with id {parent_id} to be a step of")
            if uuid is not None and db.execute("SELECT 1 FROM runs WHERE uuid = ?",
                                               (uuid,)).fetchone() is not None:
                raise StoreError(f"{self.path}: it has a run with uuid {uuid} already "
                                 "(each shard writes its own database; merge them after)")
            cur = db.execute(
                "INSERT INTO runs (uuid, started_at, command_line, study, status, git_revision,"
                " environment, kind, parent_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (uuid or str(uuidlib.uuid4()), clock.timestamp(), command_line, study,
                 RunStatus.RUNNING.value, git_revision, to_json(dict(environment or {})), kind,
                 parent_id),
            )
            return int(cur.lastrowid or 0)

    def finish_run(self, run_id: int, status: RunStatus | str) -> None:
        status = RunStatus(status)
        with self.transaction() as db:
            cur = db.execute("UPDATE runs SET status = ?, finished_at = ? WHERE id = ?",
                             (status.value, clock.timestamp(), run_id))
            if cur.rowcount != 1:
                raise StoreError(f"{self.path}: no run with id {run_id}")

    def update_environment(self, run_id: int, facts: Mapping[str, Any]) -> None:
        """Merge ``facts`` into a run's environment (a guest's facts arrive after the run starts)."""
        with self.transaction() as db:
            row = db.execute("SELECT environment FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise StoreError(f"{self.path}: no run with id {run_id}")
            env = {**from_json(row["environment"]), **facts}
            db.execute("UPDATE runs SET environment = ? WHERE id = ?", (to_json(env), run_id))

    def resume_run(self, run_id: int) -> None:
        """Mark an interrupted run as running again (its results stay)."""
        with self.transaction() as db:
            cur = db.execute("UPDATE runs SET status = ?, finished_at = NULL WHERE id = ?",
                             (RunStatus.RUNNING.value, run_id))
            if cur.rowcount != 1:
                raise StoreError(f"{self.path}: no run with id {run_id}")

    def runs(self) -> list[Run]:
        rows = self._db.execute("SELECT * FROM runs ORDER BY id").fetchall()
        return [self._run(r) for r in rows]

    def run(self, run_id: int) -> Run:
        row = self._db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise StoreError(f"{self.path}: no run with id {run_id}")
        return self._run(row)

    def run_by_dir(self, run_dir: str | os.PathLike[str]) -> Run | None:
        """The run whose files are in ``run_dir`` (its environment's run_dir), if any."""
        row = self._db.execute(
            "SELECT * FROM runs WHERE json_extract(environment, '$.run_dir') = ?"
            " ORDER BY id DESC LIMIT 1", (os.fspath(run_dir),)).fetchone()
        return None if row is None else self._run(row)

    def children(self, run_id: int) -> list[Run]:
        """The step runs of study run ``run_id``, in the order they started."""
        rows = self._db.execute("SELECT * FROM runs WHERE parent_id = ? ORDER BY id",
                                (run_id,)).fetchall()
        return [self._run(r) for r in rows]

    def resolve(self, ref: str) -> Run:
        """The run ``ref`` names: an id, a uuid (or a unique prefix of one, 8+ characters),
        or ``latest`` (the newest top-level run: a study, or a command run on its own)."""
        text = ref.strip()
        if text == "latest":
            row = self._db.execute("SELECT * FROM runs WHERE parent_id IS NULL"
                                   " ORDER BY id DESC LIMIT 1").fetchone()
            if row is None:
                raise StoreError(f"{self.path}: no runs yet")
            return self._run(row)
        if text.isdigit():
            row = self._db.execute("SELECT * FROM runs WHERE id = ?", (int(text),)).fetchone()
            if row is not None:
                return self._run(row)
            if len(text) < 8:  # too short for a uuid prefix: it can only be an id
                raise StoreError(f"run {ref!r}: no run with that id in {self.path} "
                                 f"({self._id_range()})")
            # eight digits or more may also start a uuid (about one uuid in 40 does)
        if len(text) >= 8:
            rows = self._db.execute("SELECT * FROM runs WHERE uuid LIKE ? ORDER BY id",
                                    (text.replace("%", "").replace("_", "") + "%",)).fetchall()
            if len(rows) == 1:
                return self._run(rows[0])
            if len(rows) > 1:
                raise StoreError(f"run {ref!r}: {len(rows)} runs in {self.path} have uuids "
                                 "starting so; give more of it")
        raise StoreError(f"run {ref!r}: not a run id, uuid or 'latest' in {self.path} "
                         f"({self._id_range()})")

    def _id_range(self) -> str:
        row = self._db.execute("SELECT min(id), max(id) FROM runs").fetchone()
        return "it has no runs" if row[0] is None else f"ids {row[0]} to {row[1]}"

    @staticmethod
    def _run(row: sqlite3.Row) -> Run:
        return Run(row["id"], row["uuid"], row["started_at"], row["finished_at"],
                   row["command_line"], row["study"], RunStatus(row["status"]),
                   row["git_revision"], from_json(row["environment"]), row["kind"],
                   row["parent_id"])

    def add_target(self, run_id: int, name: str, config: Mapping[str, Any] | None = None) -> int:
        """The target's id in this run, recording it (with its config) the first time."""
        with self.transaction() as db:
            return target_id(db, run_id, name, config)

    def targets(self, run_id: int) -> dict[str, dict[str, Any]]:
        rows = self._db.execute("SELECT name, config FROM targets WHERE run_id = ? ORDER BY id",
                                (run_id,)).fetchall()
        return {r["name"]: from_json(r["config"]) for r in rows}

    def placements(self, run_id: int) -> dict[str, TargetPlacement]:
        """Per target of the run: where its journal was and each disk's device profile."""
        rows = self._db.execute("SELECT name, placement, data_profile, journal_profile FROM targets"
                                " WHERE run_id = ? ORDER BY id", (run_id,)).fetchall()
        return {r["name"]: TargetPlacement(r["placement"], r["data_profile"], r["journal_profile"])
                for r in rows}

    def add_artifact(self, run_id: int, path: str, *, sha256: str, kind: str,
                     size_bytes: int) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO artifacts (run_id, path, sha256, kind, size_bytes)"
                       " VALUES (?, ?, ?, ?, ?)", (run_id, path, sha256, kind, size_bytes))

    def artifacts(self, run_id: int) -> list[Artifact]:
        rows = self._db.execute("SELECT * FROM artifacts WHERE run_id = ? ORDER BY path",
                                (run_id,))
        return [Artifact(r["path"], r["sha256"], r["kind"], r["size_bytes"]) for r in rows]
