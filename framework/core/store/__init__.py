"""The results store: one sqlite database per run directory (the only SQL in powercut).

WAL journal, one transaction per result: a run killed half-way keeps every
result it finished.
Rows carry natural keys (run uuid, target name, case, seed, entry, variant)
so that the databases of CI shards merge without id collisions.
The schema is versioned with ``PRAGMA user_version``; ``MIGRATIONS[i]``
takes a database from version i to i + 1.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from framework.core.store.bench import BenchSample, BenchSamples, MetricLike
from framework.core.store.crash import CheckRow, CrashResults
from framework.core.store.database import StoreError
from framework.core.store.merge import Merging
from framework.core.store.recoveries import Recoveries, Recovery, SweepPointRow
from framework.core.store.runs import Artifact, Run, RunStatus, TargetPlacement
from framework.core.store.schema import MIGRATIONS, SCHEMA_VERSION

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Artifact",
    "BenchSample",
    "CheckRow",
    "MetricLike",
    "Recovery",
    "Run",
    "RunStatus",
    "Store",
    "StoreError",
    "SweepPointRow",
    "TargetPlacement",
    "merge",
]


class Store(Merging, CrashResults, Recoveries, BenchSamples):
    """An open results database; use as a context manager.

    Each part of it is in a module of its own: runs and their targets (``runs``),
    crash runs' checks (``crash``), power-cut and sweep recoveries (``recoveries``),
    benchmark samples (``bench``) and merging (``merge``)."""


def merge(into_path: str | os.PathLike[str],
          from_paths: Iterable[str | os.PathLike[str]]) -> None:
    """Merge the databases of CI shards into ``into_path`` (created if absent)."""
    with Store(into_path) as into:
        for path in from_paths:
            if not Path(path).is_file():
                raise StoreError(f"{path}: no such results database")
            with Store(path) as shard:
                into.merge_from(shard)
