"""The connection under every part of the store: opening, migrating, one transaction per result,
and the few helpers the parts share (JSON cells, rows written from a mapping, filtered reads).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from framework.core.errors import PowercutError
from framework.core.handle import Handle
from framework.core.store.schema import MIGRATIONS, SCHEMA_VERSION

log = logging.getLogger(__name__)

#: What sqlite's PRAGMA quick_check says of a sound database.
QUICK_CHECK_SOUND = "ok"


class StoreError(PowercutError):
    """The results database cannot be used (names the file)."""


def to_json(value: object) -> str:
    return json.dumps(value, sort_keys=True)


def from_json(text: str | bytes) -> Any:
    """A stored JSON value; a damaged one is a StoreError, not a traceback."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise StoreError(f"a stored value is damaged, not JSON ({exc}): the database was "
                         "changed outside powercut") from None


def insert(db: sqlite3.Connection, table: str, row: Mapping[str, Any], *,
           conflict: str) -> sqlite3.Cursor:
    """``INSERT OR <conflict>`` (REPLACE, IGNORE) of one row given as column: value."""
    columns = ", ".join(row)
    marks = ", ".join("?" * len(row))
    return db.execute(f"INSERT OR {conflict} INTO {table} ({columns}) VALUES ({marks})",
                      tuple(row.values()))


def _placement_columns(config: Mapping[str, Any]) -> tuple[str | None, str | None, str | None]:
    """The placement and profile columns of a target row, read from its config."""
    profiles = config.get("disk_profiles") or {}
    if not isinstance(profiles, Mapping):
        profiles = dict(profiles)  # (role, name) pairs
    journal = config.get("journal")
    return (None if journal is None else str(journal), profiles.get("data"),
            profiles.get("journal"))


def target_id(db: sqlite3.Connection, run_id: int, name: str,
              config: Mapping[str, Any] | None = None) -> int:
    """The id of target ``name`` in run ``run_id``, adding its row the first time (a config
    given replaces the stored one). Every result row hangs from its target's row."""
    row = db.execute("SELECT id FROM targets WHERE run_id = ? AND name = ?",
                     (run_id, name)).fetchone()
    if row is not None:
        if config:
            db.execute("UPDATE targets SET config = ?, placement = ?, data_profile = ?,"
                       " journal_profile = ? WHERE id = ?",
                       (to_json(dict(config)), *_placement_columns(config), row["id"]))
        return int(row["id"])
    cur = db.execute("INSERT INTO targets (run_id, name, config, placement, data_profile,"
                     " journal_profile) VALUES (?, ?, ?, ?, ?, ?)",
                     (run_id, name, to_json(dict(config or {})),
                      *_placement_columns(config or {})))
    return int(cur.lastrowid or 0)


class Database(Handle):
    """An open results database; use as a context manager."""

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot create its directory: {exc.strerror}") from exc
        try:
            # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE
            # takes the write lock up front, so two writers wait instead of
            # failing on a lock upgrade).
            # check_same_thread=False: parallel guests report through one store;
            # callers serialise their writes.
            self._db = sqlite3.connect(self.path, timeout=timeout_s, isolation_level=None,
                                       check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot open the results database: {exc}") from exc
        self._db.row_factory = sqlite3.Row
        # A damaged text cell reads with U+FFFD in it instead of failing the whole query.
        self._db.text_factory = lambda raw: raw.decode("utf-8", "replace")
        try:
            # A damaged page is found here, as a one-line error, not halfway through a report
            # (milliseconds for a database of megabytes).
            problem = self._db.execute("PRAGMA quick_check").fetchone()[0]
            if problem != QUICK_CHECK_SOUND:
                raise sqlite3.DatabaseError(problem)
            self._wal(timeout_s)
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable at checkpoint, never corrupt
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise StoreError(f"{self.path}: not a usable results database: {exc}") from exc
        except BaseException:
            self._db.close()
            raise

    def _wal(self, timeout_s: float) -> None:
        """Switch to write-ahead logging. On a new database that another process is
        creating or switching at the same moment, this pragma was seen to fail with
        "database is locked" at once instead of waiting out the connection's timeout: wait
        for it here, within the same timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def close(self) -> None:
        self._db.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One result: everything inside commits together or not at all. A database whose
        filesystem is full raises ENOSPC naming it (what was committed before stays)."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            if "full" not in str(exc):
                raise
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise OSError(errno.ENOSPC, f"No space left on device ({exc})",
                          os.fspath(self.path)) from exc

    @property
    def schema_version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        version = self.schema_version
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path}: schema version {version} is newer than this "
                             f"powercut's ({SCHEMA_VERSION}); upgrade powercut")
        for target in range(version, SCHEMA_VERSION):
            with self.transaction() as db:
                # Read again under the write lock: another process opening the same new
                # database may have migrated it while this one waited for the lock.
                if int(db.execute("PRAGMA user_version").fetchone()[0]) > target:
                    continue
                for statement in MIGRATIONS[target].split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {target + 1}")
            log.debug("%s: schema migrated to version %d", self.path, target + 1)

    def _select(self, sql: str, run_id: int, filters: Sequence[tuple[str, Any]],
                order_by: str) -> list[sqlite3.Row]:
        """The rows of ``sql`` (whose WHERE names the run) for ``run_id``, narrowed to each
        (column, value) of ``filters`` whose value is not None."""
        args: list[Any] = [run_id]
        for column, value in filters:
            if value is not None:
                sql += f" AND {column} = ?"
                args.append(value)
        return self._db.execute(f"{sql} ORDER BY {order_by}", args).fetchall()
