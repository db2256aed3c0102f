"""The results database's schema: ``MIGRATIONS[i]`` takes a database from version i to i + 1.

The version is sqlite's ``PRAGMA user_version``. A migration is only ever
appended: a database made by an older powercut is brought up to date when
it is opened, and one made by a newer powercut is refused.
"""

from __future__ import annotations

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
