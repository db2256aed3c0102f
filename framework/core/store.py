"""The results store: one sqlite database per run directory (the only SQL in powercut).

WAL journal, one transaction per result: a run killed half-way keeps every
result it finished, and ``done_keys`` tells a resumed run what to skip.
Rows carry natural keys (run uuid, target name, case, seed, entry, variant)
so that the databases of CI shards merge without id collisions.
The schema is versioned with ``PRAGMA user_version``; ``MIGRATIONS[i]``
takes a database from version i to i + 1.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import sqlite3
import time
import uuid as uuidlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from framework.core import clock
from framework.core.errors import PowercutError

log = logging.getLogger(__name__)


class StoreError(PowercutError):
    """The results database cannot be used (names the file)."""


class RunStatus(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


MIGRATIONS: tuple[str, ...] = (
    # 0 -> 1
    """
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        uuid TEXT NOT NULL UNIQUE,
        started_at TEXT NOT NULL,
        finished_at TEXT,
        command_line TEXT NOT NULL,
        study TEXT NOT NULL,
        status TEXT NOT NULL,
        git_revision TEXT,
        environment TEXT NOT NULL
    );
    CREATE TABLE targets (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        config TEXT NOT NULL,
        UNIQUE (run_id, name)
    );
    CREATE TABLE recordings (
        id INTEGER PRIMARY KEY,
        target_id INTEGER NOT NULL REFERENCES targets(id) ON DELETE CASCADE,
        case_spec TEXT NOT NULL,
        seed INTEGER NOT NULL,
        log_path TEXT,
        entries INTEGER NOT NULL,
        marks INTEGER NOT NULL,
        UNIQUE (target_id, case_spec, seed)
    );
    CREATE TABLE crash_points (
        id INTEGER PRIMARY KEY,
        recording_id INTEGER NOT NULL REFERENCES recordings(id) ON DELETE CASCADE,
        entry_index INTEGER NOT NULL,
        kind TEXT NOT NULL,
        last_mark TEXT,
        UNIQUE (recording_id, entry_index, kind)
    );
    CREATE TABLE checks (
        id INTEGER PRIMARY KEY,
        crash_point_id INTEGER NOT NULL REFERENCES crash_points(id) ON DELETE CASCADE,
        variant TEXT NOT NULL,
        variant_seed INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        mount_s REAL,
        fsck_s REAL,
        fsck_verdicts TEXT NOT NULL,
        findings TEXT NOT NULL,
        reproducer TEXT,
        image_path TEXT,
        created_at TEXT NOT NULL,
        UNIQUE (crash_point_id, variant, variant_seed)
    );
    CREATE TABLE recoveries (
        id INTEGER PRIMARY KEY,
        target_id INTEGER NOT NULL REFERENCES targets(id) ON DELETE CASCADE,
        trial INTEGER NOT NULL,
        seed INTEGER,
        outcome TEXT NOT NULL,
        in_flight_bytes INTEGER,
        in_flight_ops INTEGER,
        mount_s REAL,
        fsck_s REAL,
        replay_messages TEXT NOT NULL,
        created_at TEXT NOT NULL,
        UNIQUE (target_id, trial)
    );
    CREATE TABLE bench_samples (
        id INTEGER PRIMARY KEY,
        target_id INTEGER NOT NULL REFERENCES targets(id) ON DELETE CASCADE,
        workload TEXT NOT NULL,
        repetition INTEGER NOT NULL,
        trial_order INTEGER NOT NULL,
        metric TEXT NOT NULL,
        value REAL,
        unit TEXT NOT NULL,
        higher_is_better INTEGER NOT NULL,
        warmup INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        UNIQUE (target_id, workload, repetition, metric)
    );
    CREATE TABLE artifacts (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        kind TEXT NOT NULL,
        size_bytes INTEGER NOT NULL,
        UNIQUE (run_id, path)
    );
    CREATE INDEX checks_outcome ON checks(outcome);
    CREATE INDEX bench_by_workload ON bench_samples(workload, metric);
    """,
    # 1 -> 2: known behaviour. ``outcome`` stays the raw outcome; ``known`` is the JSON
    # list of the known-behaviour entries that explain a failing result, NULL otherwise.
    """
    ALTER TABLE checks ADD COLUMN known TEXT;
    ALTER TABLE recoveries ADD COLUMN known TEXT;
    """,
    # 2 -> 3: what a run is (crash, cut, bench, study) and the study run it is a step of.
    # Runs from before are top-level; their kind is read from their command line.
    """
    ALTER TABLE runs ADD COLUMN kind TEXT NOT NULL DEFAULT '';
    ALTER TABLE runs ADD COLUMN parent_id INTEGER REFERENCES runs(id) ON DELETE CASCADE;
    UPDATE runs SET kind = CASE
        WHEN command_line LIKE 'powercut crash%' THEN 'crash'
        WHEN command_line LIKE 'powercut cut%' THEN 'cut'
        WHEN command_line LIKE 'powercut bench%' THEN 'bench'
        ELSE '' END;
    CREATE INDEX runs_by_parent ON runs(parent_id);
    """,
    # 3 -> 4: where each target's journal was and the device profile of each disk, as
    # columns, so reports and compare can group results by them. Filled from the stored
    # config; NULL profile: the disk ran without one (a sparse file as qemu gives it).
    """
    ALTER TABLE targets ADD COLUMN placement TEXT;
    ALTER TABLE targets ADD COLUMN data_profile TEXT;
    ALTER TABLE targets ADD COLUMN journal_profile TEXT;
    UPDATE targets SET placement = json_extract(config, '$.journal'),
        data_profile = json_extract(config, '$.disk_profiles.data'),
        journal_profile = json_extract(config, '$.disk_profiles.journal');
    """,
    # 4 -> 5: recovery sweeps. One row per point: the filesystem's size, its populated
    # files, the data in flight at the cut and the journal size (NULL: not sized), and the
    # recovery as timed step by step. ``details`` holds the rest of the point's result.
    """
    CREATE TABLE sweep_points (
        id INTEGER PRIMARY KEY,
        target_id INTEGER NOT NULL REFERENCES targets(id) ON DELETE CASCADE,
        point INTEGER NOT NULL,
        rep INTEGER NOT NULL,
        size_mib INTEGER NOT NULL,
        files INTEGER NOT NULL,
        dirty_mib INTEGER NOT NULL,
        journal_mib INTEGER,
        outcome TEXT NOT NULL,
        mount_s REAL,
        fsck_s REAL,
        journal_only_s REAL,
        replay_messages TEXT NOT NULL,
        details TEXT NOT NULL,
        created_at TEXT NOT NULL,
        UNIQUE (target_id, point)
    );
    """,
    # 5 -> 6: every time a failing state or trial was checked again (crash --reruns, cut
    # --reruns, ci): its outcome and findings, so a finding's "fails f/t" can be traced
    # to each check. ``key``: the crash state's key, or the trial's (TARGET#N).
    """
    CREATE TABLE reruns (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        key TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        failed INTEGER NOT NULL,
        findings TEXT NOT NULL,
        created_at TEXT NOT NULL,
        UNIQUE (run_id, key, attempt)
    );
    """,
    # 6 -> 7: what reports need to speak in findings. ``state``: the crash state's key as
    # results.json and reruns name it; ``signature``: the JSON of a failing state's finding
    # signature (crashcases.group), made when it was checked, with the workload and oracle at
    # hand; ``ops_to_crash``: the workload ops up to its crash point (the shortest state
    # stands for its finding); ``explanation``: why it is not ok, in words. NULL in rows
    # from before: reports derive what they can (the key from entry and variant).
    """
    ALTER TABLE checks ADD COLUMN state TEXT;
    ALTER TABLE checks ADD COLUMN signature TEXT;
    ALTER TABLE checks ADD COLUMN ops_to_crash INTEGER;
    ALTER TABLE checks ADD COLUMN explanation TEXT;
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)
#: What sqlite's PRAGMA quick_check says of a sound database.
QUICK_CHECK_SOUND = "ok"


# ---- rows returned by queries ------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class BenchSample:
    target: str
    workload: str
    repetition: int
    trial_order: int
    metric: str
    value: float | None
    unit: str
    higher_is_better: bool
    warmup: bool


@dataclass(frozen=True, slots=True)
class TargetPlacement:
    """Where a run's target kept its journal and the device profile of each disk (None: none)."""

    placement: str | None  # internal | external | none, as the target's ``journal`` says
    data_profile: str | None
    journal_profile: str | None


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


@dataclass(frozen=True, slots=True)
class Artifact:
    path: str
    sha256: str
    kind: str
    size_bytes: int


# The natural key of a check, as a resumed run enumerates them.
CheckKey = tuple[str, str, int, int, str, str, int]  # target, case, seed, entry, kind, variant, vseed
BenchKey = tuple[str, str, int]  # target, workload, repetition
RecoveryKey = tuple[str, int]  # target, trial


@dataclass(frozen=True, slots=True)
class DoneKeys:
    """What a run already holds; a resumed run skips these."""

    checks: frozenset[CheckKey]
    bench: frozenset[BenchKey]
    recoveries: frozenset[RecoveryKey]


class MetricLike(Protocol):
    """What ``add_bench_samples`` needs of a metric (framework.bench.workloads.Metric fits)."""

    @property
    def name(self) -> str: ...
    @property
    def value(self) -> float | None: ...
    @property
    def unit(self) -> str: ...
    @property
    def higher_is_better(self) -> bool: ...


def _placement_columns(config: Mapping[str, Any]) -> tuple[str | None, str | None, str | None]:
    """The placement and profile columns of a target row, read from its config."""
    profiles = config.get("disk_profiles") or {}
    if not isinstance(profiles, Mapping):
        profiles = dict(profiles)  # (role, name) pairs
    journal = config.get("journal")
    return (None if journal is None else str(journal), profiles.get("data"),
            profiles.get("journal"))


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True)


def _known_json(ids: Sequence[str] | None) -> str | None:
    return None if ids is None else _json(list(ids))


def _known_ids(text: str | None) -> list[str] | None:
    return None if text is None else list(_cell(text))


def _cell(text: str | bytes) -> Any:
    """A stored JSON value; a damaged one is a StoreError, not a traceback."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise StoreError(f"a stored value is damaged, not JSON ({exc}): the database was "
                         "changed outside powercut") from None


class Store:
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

    # ---- plumbing --------------------------------------------------------

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

    def __enter__(self) -> Store:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

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

    # ---- runs and targets -------------------------------------------------

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
                 RunStatus.RUNNING.value, git_revision, _json(dict(environment or {})), kind,
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
            env = {**_cell(row["environment"]), **facts}
            db.execute("UPDATE runs SET environment = ? WHERE id = ?", (_json(env), run_id))

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

    def run_by_uuid(self, uuid: str) -> Run | None:
        row = self._db.execute("SELECT * FROM runs WHERE uuid = ?", (uuid,)).fetchone()
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
                   row["git_revision"], _cell(row["environment"]), row["kind"],
                   row["parent_id"])

    def add_target(self, run_id: int, name: str, config: Mapping[str, Any] | None = None) -> int:
        """The target's id in this run, recording it (with its config) the first time."""
        with self.transaction() as db:
            return self._target_id(db, run_id, name, config)

    def targets(self, run_id: int) -> dict[str, dict[str, Any]]:
        rows = self._db.execute("SELECT name, config FROM targets WHERE run_id = ? ORDER BY id",
                                (run_id,)).fetchall()
        return {r["name"]: _cell(r["config"]) for r in rows}

    def placements(self, run_id: int) -> dict[str, TargetPlacement]:
        """Per target of the run: where its journal was and each disk's device profile."""
        rows = self._db.execute("SELECT name, placement, data_profile, journal_profile FROM targets"
                                " WHERE run_id = ? ORDER BY id", (run_id,)).fetchall()
        return {r["name"]: TargetPlacement(r["placement"], r["data_profile"], r["journal_profile"])
                for r in rows}

    @staticmethod
    def _target_id(db: sqlite3.Connection, run_id: int, name: str,
                   config: Mapping[str, Any] | None = None) -> int:
        row = db.execute("SELECT id FROM targets WHERE run_id = ? AND name = ?",
                         (run_id, name)).fetchone()
        if row is not None:
            if config:
                db.execute("UPDATE targets SET config = ?, placement = ?, data_profile = ?,"
                           " journal_profile = ? WHERE id = ?",
                           (_json(dict(config)), *_placement_columns(config), row["id"]))
            return int(row["id"])
        cur = db.execute("INSERT INTO targets (run_id, name, config, placement, data_profile,"
                         " journal_profile) VALUES (?, ?, ?, ?, ?, ?)",
                         (run_id, name, _json(dict(config or {})),
                          *_placement_columns(config or {})))
        return int(cur.lastrowid or 0)

    # ---- crash runs --------------------------------------------------------

    def add_recording(self, run_id: int, target: str, *, case_spec: str, seed: int,
                      log_path: str | None, entries: int, marks: int) -> int:
        """A dm-log-writes recording; recording the same case again returns its id."""
        with self.transaction() as db:
            return self._recording_id(db, run_id, target, case_spec, seed, log_path, entries,
                                      marks)

    def _recording_id(self, db: sqlite3.Connection, run_id: int, target: str, case_spec: str,
                      seed: int, log_path: str | None, entries: int, marks: int) -> int:
        target_id = self._target_id(db, run_id, target)
        db.execute(
            "INSERT INTO recordings (target_id, case_spec, seed, log_path, entries, marks)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (target_id, case_spec, seed) DO UPDATE"
            " SET log_path = excluded.log_path, entries = excluded.entries,"
            " marks = excluded.marks",
            (target_id, case_spec, seed, log_path, entries, marks))
        row = db.execute("SELECT id FROM recordings WHERE target_id = ? AND case_spec = ?"
                         " AND seed = ?", (target_id, case_spec, seed)).fetchone()
        return int(row["id"])

    def add_crash_point(self, recording_id: int, *, entry_index: int,
                        kind: str, last_mark: str | None = None) -> int:
        with self.transaction() as db:
            return self._crash_point_id(db, recording_id, entry_index, str(kind),
                                        last_mark)

    @staticmethod
    def _crash_point_id(db: sqlite3.Connection, recording_id: int, entry_index: int,
                        kind: str, last_mark: str | None) -> int:
        db.execute("INSERT INTO crash_points (recording_id, entry_index, kind, last_mark)"
                   " VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                   (recording_id, entry_index, kind, last_mark))
        row = db.execute("SELECT id FROM crash_points WHERE recording_id = ? AND entry_index = ?"
                         " AND kind = ?", (recording_id, entry_index, kind)).fetchone()
        return int(row["id"])

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
                 mount_s, fsck_s, _json(dict(fsck_verdicts or {})), _json(list(findings)),
                 reproducer, image_path, clock.timestamp(), _known_json(known), state,
                 None if signature is None else _json(dict(signature)), ops_to_crash,
                 explanation))
            return int(cur.lastrowid or 0)

    def add_rerun(self, run_id: int, key: str, *, attempt: int, outcome: str, failed: bool,
                  findings: Sequence[Any] = ()) -> None:
        """One more check of a failing state or trial (``attempt`` 1 is the first rerun)."""
        with self.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO reruns (run_id, key, attempt, outcome, failed, findings,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (run_id, key, attempt, str(outcome), int(failed), _json(list(findings)),
                 clock.timestamp()))

    def reruns(self, run_id: int) -> dict[str, list[tuple[str, bool]]]:
        """Per key, each rerun's outcome and whether it failed, in order."""
        out: dict[str, list[tuple[str, bool]]] = {}
        for r in self._db.execute("SELECT key, outcome, failed FROM reruns WHERE run_id = ?"
                                  " ORDER BY key, attempt", (run_id,)):
            out.setdefault(r["key"], []).append((r["outcome"], bool(r["failed"])))
        return out

    def checks(self, run_id: int, *, outcome: str | None = None) -> list[CheckRow]:
        sql = ("SELECT c.*, t.name AS target, r.case_spec, r.seed, p.entry_index, p.kind,"
               " p.last_mark FROM checks c JOIN crash_points p ON c.crash_point_id = p.id"
               " JOIN recordings r ON p.recording_id = r.id JOIN targets t ON r.target_id = t.id"
               " WHERE t.run_id = ?")
        args: list[Any] = [run_id]
        if outcome is not None:
            sql += " AND c.outcome = ?"
            args.append(str(outcome))
        rows = self._db.execute(sql + " ORDER BY t.id, r.id, p.entry_index, c.id", args)
        return [
            CheckRow(r["id"], r["target"], r["case_spec"], r["seed"], r["entry_index"],
                     r["kind"], r["last_mark"], r["variant"],
                     r["variant_seed"], r["outcome"], r["mount_s"], r["fsck_s"],
                     _cell(r["fsck_verdicts"]), _cell(r["findings"]),
                     r["reproducer"], r["image_path"], _known_ids(r["known"]), r["created_at"],
                     r["state"], None if r["signature"] is None else _cell(r["signature"]),
                     r["ops_to_crash"], r["explanation"])
            for r in rows
        ]

    def outcome_counts(self, run_id: int, *, target: str | None = None) -> dict[str, int]:
        sql = ("SELECT c.outcome, count(*) AS n FROM checks c"
               " JOIN crash_points p ON c.crash_point_id = p.id"
               " JOIN recordings r ON p.recording_id = r.id JOIN targets t ON r.target_id = t.id"
               " WHERE t.run_id = ?")
        args: list[Any] = [run_id]
        if target is not None:
            sql += " AND t.name = ?"
            args.append(target)
        rows = self._db.execute(sql + " GROUP BY c.outcome", args)
        return {r["outcome"]: int(r["n"]) for r in rows}

    # ---- power-cut recoveries ----------------------------------------------

    def add_recovery(self, run_id: int, target: str, *, trial: int, outcome: str,
                     seed: int | None = None, in_flight_bytes: int | None = None,
                     in_flight_ops: int | None = None, mount_s: float | None = None,
                     fsck_s: float | None = None, replay_messages: Sequence[str] = (),
                     known: Sequence[str] | None = None) -> None:
        with self.transaction() as db:
            target_id = self._target_id(db, run_id, target)
            db.execute(
                "INSERT OR REPLACE INTO recoveries (target_id, trial, seed, outcome,"
                " in_flight_bytes, in_flight_ops, mount_s, fsck_s, replay_messages, created_at,"
                " known) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (target_id, trial, seed, str(outcome), in_flight_bytes, in_flight_ops,
                 mount_s, fsck_s, _json(list(replay_messages)), clock.timestamp(),
                 _known_json(known)))

    def recoveries(self, run_id: int, *, target: str | None = None) -> list[Recovery]:
        sql = ("SELECT v.*, t.name AS target FROM recoveries v JOIN targets t"
               " ON v.target_id = t.id WHERE t.run_id = ?")
        args: list[Any] = [run_id]
        if target is not None:
            sql += " AND t.name = ?"
            args.append(target)
        rows = self._db.execute(sql + " ORDER BY t.id, v.trial", args)
        return [Recovery(r["target"], r["trial"], r["seed"], r["outcome"],
                         r["in_flight_bytes"], r["in_flight_ops"], r["mount_s"], r["fsck_s"],
                         _cell(r["replay_messages"]), _known_ids(r["known"])) for r in rows]

    # ---- recovery sweeps ------------------------------------------------------

    def add_sweep_point(self, run_id: int, target: str, *, point: int, rep: int, size_mib: int,
                        files: int, dirty_mib: int, journal_mib: int | None, outcome: str,
                        mount_s: float | None = None, fsck_s: float | None = None,
                        journal_only_s: float | None = None,
                        replay_messages: Sequence[str] = (),
                        details: Mapping[str, Any] | None = None) -> None:
        with self.transaction() as db:
            target_id = self._target_id(db, run_id, target)
            db.execute(
                "INSERT OR REPLACE INTO sweep_points (target_id, point, rep, size_mib, files,"
                " dirty_mib, journal_mib, outcome, mount_s, fsck_s, journal_only_s,"
                " replay_messages, details, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (target_id, point, rep, size_mib, files, dirty_mib, journal_mib, str(outcome),
                 mount_s, fsck_s, journal_only_s, _json(list(replay_messages)),
                 _json(dict(details or {})), clock.timestamp()))

    def sweep_points(self, run_id: int, *, target: str | None = None) -> list[SweepPointRow]:
        sql = ("SELECT s.*, t.name AS target FROM sweep_points s JOIN targets t"
               " ON s.target_id = t.id WHERE t.run_id = ?")
        args: list[Any] = [run_id]
        if target is not None:
            sql += " AND t.name = ?"
            args.append(target)
        rows = self._db.execute(sql + " ORDER BY t.id, s.point", args)
        return [SweepPointRow(r["target"], r["point"], r["rep"], r["size_mib"], r["files"],
                              r["dirty_mib"], r["journal_mib"], r["outcome"], r["mount_s"],
                              r["fsck_s"], r["journal_only_s"], _cell(r["replay_messages"]),
                              _cell(r["details"])) for r in rows]

    # ---- benchmarks ---------------------------------------------------------

    def add_bench_samples(self, run_id: int, target: str, workload: str, *, repetition: int,
                          metrics: Iterable[MetricLike], trial_order: int | None = None,
                          warmup: bool = False) -> None:
        """Every metric of one benchmark repetition, in one transaction."""
        with self.transaction() as db:
            target_id = self._target_id(db, run_id, target)
            order = repetition if trial_order is None else trial_order
            now = clock.timestamp()
            for m in metrics:
                db.execute(
                    "INSERT OR REPLACE INTO bench_samples (target_id, workload, repetition,"
                    " trial_order, metric, value, unit, higher_is_better, warmup, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (target_id, workload, repetition, order, m.name,
                     None if m.value is None else float(m.value), m.unit,
                     int(m.higher_is_better), int(warmup), now))

    def add_bench_sample(self, run_id: int, target: str, workload: str, *, repetition: int,
                         metric: MetricLike, trial_order: int | None = None,
                         warmup: bool = False) -> None:
        self.add_bench_samples(run_id, target, workload, repetition=repetition,
                               metrics=[metric], trial_order=trial_order, warmup=warmup)

    def bench_samples(self, run_id: int, *, target: str | None = None,
                      workload: str | None = None, metric: str | None = None,
                      include_warmup: bool = False) -> list[BenchSample]:
        sql = ("SELECT b.*, t.name AS target FROM bench_samples b JOIN targets t"
               " ON b.target_id = t.id WHERE t.run_id = ?")
        args: list[Any] = [run_id]
        for column, value in (("t.name", target), ("b.workload", workload),
                              ("b.metric", metric)):
            if value is not None:
                sql += f" AND {column} = ?"
                args.append(value)
        if not include_warmup:
            sql += " AND b.warmup = 0"
        rows = self._db.execute(sql + " ORDER BY t.id, b.workload, b.trial_order, b.metric", args)
        return [BenchSample(r["target"], r["workload"], r["repetition"], r["trial_order"],
                            r["metric"], r["value"], r["unit"], bool(r["higher_is_better"]),
                            bool(r["warmup"])) for r in rows]

    # ---- artifacts -----------------------------------------------------------

    def add_artifact(self, run_id: int, path: str, *, sha256: str, kind: str,
                     size_bytes: int) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO artifacts (run_id, path, sha256, kind, size_bytes)"
                       " VALUES (?, ?, ?, ?, ?)", (run_id, path, sha256, kind, size_bytes))

    def artifacts(self, run_id: int) -> list[Artifact]:
        rows = self._db.execute("SELECT * FROM artifacts WHERE run_id = ? ORDER BY path",
                                (run_id,))
        return [Artifact(r["path"], r["sha256"], r["kind"], r["size_bytes"]) for r in rows]

    # ---- resume ----------------------------------------------------------------

    def done_keys(self, run_id: int) -> DoneKeys:
        checks = self._db.execute(
            "SELECT t.name, r.case_spec, r.seed, p.entry_index, p.kind, c.variant,"
            " c.variant_seed FROM checks c JOIN crash_points p ON c.crash_point_id = p.id"
            " JOIN recordings r ON p.recording_id = r.id JOIN targets t ON r.target_id = t.id"
            " WHERE t.run_id = ?", (run_id,)).fetchall()
        bench = self._db.execute(
            "SELECT DISTINCT t.name, b.workload, b.repetition FROM bench_samples b"
            " JOIN targets t ON b.target_id = t.id WHERE t.run_id = ?", (run_id,)).fetchall()
        recoveries = self._db.execute(
            "SELECT t.name, v.trial FROM recoveries v JOIN targets t ON v.target_id = t.id"
            " WHERE t.run_id = ?", (run_id,)).fetchall()
        return DoneKeys(
            checks=frozenset(tuple(r) for r in checks),
            bench=frozenset(tuple(r) for r in bench),
            recoveries=frozenset(tuple(r) for r in recoveries),
        )

    # ---- merging -----------------------------------------------------------------

    def merge_from(self, other: Store) -> None:
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
                         _json(run.environment), run.kind, parent))
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
                    env = _cell(row["environment"])
                    seen = env.setdefault("shards_merged", {})
                    seen.update(run.environment.get("shards_merged") or {})
                    seen[str(plan["shard_index"])] = run.status.value
                    db.execute("UPDATE runs SET environment = ? WHERE id = ?",
                               (_json(env), run_id))
                self._copy_run(db, other, run.id, run_id)

    def _copy_run(self, db: sqlite3.Connection, other: Store, src_run: int, run_id: int) -> None:
        src = other._db
        for name, config in other.targets(src_run).items():
            self._target_id(db, run_id, name, config)
        recordings = src.execute(
            "SELECT r.*, t.name AS target FROM recordings r JOIN targets t"
            " ON r.target_id = t.id WHERE t.run_id = ?", (src_run,)).fetchall()
        for rec in recordings:
            rec_id = self._recording_id(db, run_id, rec["target"], rec["case_spec"],
                                        rec["seed"], rec["log_path"], rec["entries"],
                                        rec["marks"])
            points = src.execute("SELECT * FROM crash_points WHERE recording_id = ?",
                                 (rec["id"],)).fetchall()
            for point in points:
                point_id = self._crash_point_id(db, rec_id, point["entry_index"],
                                                point["kind"],
                                                point["last_mark"])
                for c in src.execute("SELECT * FROM checks WHERE crash_point_id = ?",
                                     (point["id"],)):
                    db.execute(
                        "INSERT OR IGNORE INTO checks (crash_point_id, variant, variant_seed,"
                        " outcome, mount_s, fsck_s, fsck_verdicts, findings, reproducer,"
                        " image_path, created_at, known, state, signature, ops_to_crash,"
                        " explanation) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (point_id, c["variant"], c["variant_seed"], c["outcome"],
                         c["mount_s"], c["fsck_s"], c["fsck_verdicts"], c["findings"],
                         c["reproducer"], c["image_path"], c["created_at"], c["known"],
                         c["state"], c["signature"], c["ops_to_crash"], c["explanation"]))
        for v in src.execute("SELECT v.*, t.name AS target FROM recoveries v JOIN targets t"
                             " ON v.target_id = t.id WHERE t.run_id = ?", (src_run,)):
            db.execute(
                "INSERT OR IGNORE INTO recoveries (target_id, trial, seed, outcome,"
                " in_flight_bytes, in_flight_ops, mount_s, fsck_s, replay_messages, created_at,"
                " known) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (self._target_id(db, run_id, v["target"]), v["trial"], v["seed"], v["outcome"],
                 v["in_flight_bytes"], v["in_flight_ops"], v["mount_s"], v["fsck_s"],
                 v["replay_messages"], v["created_at"], v["known"]))
        for b in src.execute("SELECT b.*, t.name AS target FROM bench_samples b JOIN targets t"
                             " ON b.target_id = t.id WHERE t.run_id = ?", (src_run,)):
            db.execute(
                "INSERT OR IGNORE INTO bench_samples (target_id, workload, repetition,"
                " trial_order, metric, value, unit, higher_is_better, warmup, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (self._target_id(db, run_id, b["target"]), b["workload"], b["repetition"],
                 b["trial_order"], b["metric"], b["value"], b["unit"], b["higher_is_better"],
                 b["warmup"], b["created_at"]))
        for p in src.execute("SELECT s.*, t.name AS target FROM sweep_points s JOIN targets t"
                             " ON s.target_id = t.id WHERE t.run_id = ?", (src_run,)):
            db.execute(
                "INSERT OR IGNORE INTO sweep_points (target_id, point, rep, size_mib, files,"
                " dirty_mib, journal_mib, outcome, mount_s, fsck_s, journal_only_s,"
                " replay_messages, details, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (self._target_id(db, run_id, p["target"]), p["point"], p["rep"], p["size_mib"],
                 p["files"], p["dirty_mib"], p["journal_mib"], p["outcome"], p["mount_s"],
                 p["fsck_s"], p["journal_only_s"], p["replay_messages"], p["details"],
                 p["created_at"]))
        for r in src.execute("SELECT * FROM reruns WHERE run_id = ?", (src_run,)):
            db.execute("INSERT OR IGNORE INTO reruns (run_id, key, attempt, outcome, failed,"
                       " findings, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (run_id, r["key"], r["attempt"], r["outcome"], r["failed"], r["findings"],
                        r["created_at"]))
        for a in src.execute("SELECT * FROM artifacts WHERE run_id = ?", (src_run,)):
            db.execute("INSERT OR IGNORE INTO artifacts (run_id, path, sha256, kind, size_bytes)"
                       " VALUES (?, ?, ?, ?, ?)",
                       (run_id, a["path"], a["sha256"], a["kind"], a["size_bytes"]))


# A merged run is as bad as its worst shard; a shard still "running" never finished.
_STATUS_RANK = {RunStatus.FINISHED: 0, RunStatus.INTERRUPTED: 1, RunStatus.RUNNING: 2,
                RunStatus.FAILED: 3}


def _merged_status(a: RunStatus, b: RunStatus) -> RunStatus:
    return max(a, b, key=_STATUS_RANK.__getitem__)


def merge(into_path: str | os.PathLike[str],
          from_paths: Iterable[str | os.PathLike[str]]) -> None:
    """Merge the databases of CI shards into ``into_path`` (created if absent)."""
    with Store(into_path) as into:
        for path in from_paths:
            if not Path(path).is_file():
                raise StoreError(f"{path}: no such results database")
            with Store(path) as shard:
                into.merge_from(shard)
