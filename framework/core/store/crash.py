"""Crash runs in the store: recordings, their crash points, each checked crash state and the
reruns of failing states."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from framework.core import clock
from framework.core.store.database import Database, from_json, target_id, to_json


@dataclass(frozen=True, slots=True)
class CheckRow:
    id: int
    target: str
    case_spec: str
    seed: int
    entry_index: int
    kind: str  # crashcases.vocabulary.CrashPointKind
    last_mark: str | None
    variant: str  # crashcases.vocabulary.VariantKind
    variant_seed: int
    outcome: str  # crashcases.vocabulary.Outcome
    mount_s: float | None
    fsck_s: float | None
    fsck_verdicts: dict[str, Any]
    findings: list[Any]
    reproducer: str | None
    image_path: str | None
    known: list[str] | None = None  # entries that explain it (then reported as known)
    created_at: str = ""  # when it was checked (UTC, ISO 8601)
    state: str | None = None  # the crash state's key (None: stored before keys were kept)
    signature: dict[str, Any] | None = None  # a failing state's finding signature, as JSON
    ops_to_crash: int | None = None  # workload ops up to the crash point
    explanation: str | None = None  # why it is not ok, in words


def known_json(ids: Sequence[str] | None) -> str | None:
    """The stored form of the known-behaviour entries that explain a result (None: none)."""
    return None if ids is None else to_json(list(ids))


def known_ids(text: str | None) -> list[str] | None:
    return None if text is None else list(from_json(text))


def recording_id(db: sqlite3.Connection, run_id: int, target: str, case_spec: str, seed: int,
                 log_path: str | None, entries: int, marks: int) -> int:
    """The id of a recording, adding or updating its row."""
    target_row = target_id(db, run_id, target)
    db.execute(
        "INSERT INTO recordings (target_id, case_spec, seed, log_path, entries, marks)"
        " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (target_id, case_spec, seed) DO UPDATE"
        " SET log_path = excluded.log_path, entries = excluded.entries,"
        " marks = excluded.marks",
        (target_row, case_spec, seed, log_path, entries, marks))
    row = db.execute("SELECT id FROM recordings WHERE target_id = ? AND case_spec = ?"
                     " AND seed = ?", (target_row, case_spec, seed)).fetchone()
    return int(row["id"])


def crash_point_id(db: sqlite3.Connection, recording: int, entry_index: int, kind: str,
                   last_mark: str | None) -> int:
    """The id of a crash point of a recording, adding its row the first time."""
    db.execute("INSERT INTO crash_points (recording_id, entry_index, kind, last_mark)"
               " VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
               (recording, entry_index, kind, last_mark))
    row = db.execute("SELECT id FROM crash_points WHERE recording_id = ? AND entry_index = ?"
                     " AND kind = ?", (recording, entry_index, kind)).fetchone()
    return int(row["id"])


class CrashResults(Database):
    """What crash runs store: recordings, crash points, checked states and reruns."""

    def add_recording(self, run_id: int, target: str, *, case_spec: str, seed: int,
                      log_path: str | None, entries: int, marks: int) -> int:
        """A dm-log-writes recording; recording the same case again returns its id."""
        with self.transaction() as db:
            return recording_id(db, run_id, target, case_spec, seed, log_path, entries, marks)

    def add_crash_point(self, recording_id: int, *, entry_index: int,
                        kind: str, last_mark: str | None = None) -> int:
        with self.transaction() as db:
            return crash_point_id(db, recording_id, entry_index, str(kind), last_mark)

    def add_check(self, crash_point_id: int, *, variant: str, variant_seed: int,
                  outcome: str, mount_s: float | None = None,
                  fsck_s: float | None = None, fsck_verdicts: Mapping[str, Any] | None = None,
                  findings: Sequence[Any] = (), reproducer: str | None = None,
                  image_path: str | None = None, known: Sequence[str] | None = None,
                  state: str | None = None, signature: Mapping[str, Any] | None = None,
                  ops_to_crash: int | None = None, explanation: str | None = None) -> int:
        """One checked crash state; checking the same state again replaces the result.

        ``known``: the known-behaviour entries that explain it (``outcome`` stays raw).
        ``state``, ``signature``, ``ops_to_crash``, ``explanation``: see migration 6 -> 7."""
        with self.transaction() as db:
            cur = db.execute(
                "INSERT OR REPLACE INTO checks (crash_point_id, variant, variant_seed, outcome,"
                " mount_s, fsck_s, fsck_verdicts, findings, reproducer, image_path, created_at,"
                " known, state, signature, ops_to_crash, explanation)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (crash_point_id, str(variant), variant_seed, str(outcome),
                 mount_s, fsck_s, to_json(dict(fsck_verdicts or {})), to_json(list(findings)),
                 reproducer, image_path, clock.timestamp(), known_json(known), state,
                 None if signature is None else to_json(dict(signature)), ops_to_crash,
                 explanation))
            return int(cur.lastrowid or 0)

    def add_rerun(self, run_id: int, key: str, *, attempt: int, outcome: str, failed: bool,
                  findings: Sequence[Any] = ()) -> None:
        """One more check of a failing state or trial (``attempt`` 1 is the first rerun)."""
        with self.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO reruns (run_id, key, attempt, outcome, failed, findings,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (run_id, key, attempt, str(outcome), int(failed), to_json(list(findings)),
                 clock.timestamp()))

    def reruns(self, run_id: int) -> dict[str, list[tuple[str, bool]]]:
        """Per key, each rerun's outcome and whether it failed, in order."""
        out: dict[str, list[tuple[str, bool]]] = {}
        for r in self._db.execute("SELECT key, outcome, failed FROM reruns WHERE run_id = ?"
                                  " ORDER BY key, attempt", (run_id,)):
            out.setdefault(r["key"], []).append((r["outcome"], bool(r["failed"])))
        return out

    def checks(self, run_id: int, *, outcome: str | None = None) -> list[CheckRow]:
        rows = self._select(
            "SELECT c.*, t.name AS target, r.case_spec, r.seed, p.entry_index, p.kind,"
            " p.last_mark FROM checks c JOIN crash_points p ON c.crash_point_id = p.id"
            " JOIN recordings r ON p.recording_id = r.id JOIN targets t ON r.target_id = t.id"
            " WHERE t.run_id = ?", run_id, [("c.outcome", None if outcome is None else str(outcome))],
            "t.id, r.id, p.entry_index, c.id")
        return [
            CheckRow(r["id"], r["target"], r["case_spec"], r["seed"], r["entry_index"],
                     r["kind"], r["last_mark"], r["variant"],
                     r["variant_seed"], r["outcome"], r["mount_s"], r["fsck_s"],
                     from_json(r["fsck_verdicts"]), from_json(r["findings"]),
                     r["reproducer"], r["image_path"], known_ids(r["known"]), r["created_at"],
                     r["state"], None if r["signature"] is None else from_json(r["signature"]),
                     r["ops_to_crash"], r["explanation"])
            for r in rows
        ]
