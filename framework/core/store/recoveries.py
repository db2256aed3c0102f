"""Recoveries in the store: power-cut trials (cut) and the points of recovery sweeps (sweep)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from framework.core import clock
from framework.core.store.crash import known_ids, known_json
from framework.core.store.database import Database, from_json, target_id, to_json


@dataclass(frozen=True, slots=True)
class Recovery:
    target: str
    trial: int
    seed: int | None
    outcome: str  # crashcases.vocabulary.Outcome
    in_flight_bytes: int | None
    in_flight_ops: int | None
    mount_s: float | None
    fsck_s: float | None
    replay_messages: list[str]
    known: list[str] | None = None  # entries that explain it (then reported as known)


@dataclass(frozen=True, slots=True)
class SweepPointRow:
    """One point of a recovery sweep as stored (durations in seconds; None: not run)."""

    target: str
    point: int
    rep: int
    size_mib: int
    files: int
    dirty_mib: int
    journal_mib: int | None
    outcome: str  # crashcases.vocabulary.Outcome, or "error" when the point could not run
    mount_s: float | None
    fsck_s: float | None
    journal_only_s: float | None
    replay_messages: list[str]
    details: dict[str, Any]


class Recoveries(Database):
    """What cut and sweep runs store: a recovery per trial, a row per sweep point."""

    def add_recovery(self, run_id: int, target: str, *, trial: int, outcome: str,
                     seed: int | None = None, in_flight_bytes: int | None = None,
                     in_flight_ops: int | None = None, mount_s: float | None = None,
                     fsck_s: float | None = None, replay_messages: Sequence[str] = (),
                     known: Sequence[str] | None = None) -> None:
        with self.transaction() as db:
            target_row = target_id(db, run_id, target)
            db.execute(
                "INSERT OR REPLACE INTO recoveries (target_id, trial, seed, outcome,"
                " in_flight_bytes, in_flight_ops, mount_s, fsck_s, replay_messages, created_at,"
                " known) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (target_row, trial, seed, str(outcome), in_flight_bytes, in_flight_ops,
                 mount_s, fsck_s, to_json(list(replay_messages)), clock.timestamp(),
                 known_json(known)))

    def recoveries(self, run_id: int, *, target: str | None = None) -> list[Recovery]:
        rows = self._select("SELECT v.*, t.name AS target FROM recoveries v JOIN targets t"
                            " ON v.target_id = t.id WHERE t.run_id = ?", run_id,
                            [("t.name", target)], "t.id, v.trial")
        return [Recovery(r["target"], r["trial"], r["seed"], r["outcome"],
                         r["in_flight_bytes"], r["in_flight_ops"], r["mount_s"], r["fsck_s"],
                         from_json(r["replay_messages"]), known_ids(r["known"])) for r in rows]

    def add_sweep_point(self, run_id: int, target: str, *, point: int, rep: int, size_mib: int,
                        files: int, dirty_mib: int, journal_mib: int | None, outcome: str,
                        mount_s: float | None = None, fsck_s: float | None = None,
                        journal_only_s: float | None = None,
                        replay_messages: Sequence[str] = (),
                        details: Mapping[str, Any] | None = None) -> None:
        with self.transaction() as db:
            target_row = target_id(db, run_id, target)
            db.execute(
                "INSERT OR REPLACE INTO sweep_points (target_id, point, rep, size_mib, files,"
                " dirty_mib, journal_mib, outcome, mount_s, fsck_s, journal_only_s,"
                " replay_messages, details, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (target_row, point, rep, size_mib, files, dirty_mib, journal_mib, str(outcome),
                 mount_s, fsck_s, journal_only_s, to_json(list(replay_messages)),
                 to_json(dict(details or {})), clock.timestamp()))

    def sweep_points(self, run_id: int, *, target: str | None = None) -> list[SweepPointRow]:
        rows = self._select("SELECT s.*, t.name AS target FROM sweep_points s JOIN targets t"
                            " ON s.target_id = t.id WHERE t.run_id = ?", run_id,
                            [("t.name", target)], "t.id, s.point")
        return [SweepPointRow(r["target"], r["point"], r["rep"], r["size_mib"], r["files"],
                              r["dirty_mib"], r["journal_mib"], r["outcome"], r["mount_s"],
                              r["fsck_s"], r["journal_only_s"], from_json(r["replay_messages"]),
                              from_json(r["details"])) for r in rows]
