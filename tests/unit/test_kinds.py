"""Operation kinds: every kind in every table keyed by kind, and the oracle's kinds typed.

A kind's rules are its class in crashcases.workload.kinds; how it is run
(crashcases.execute) and written in an fstests test (crashcases.findings.fstests) are
tables beside that code. A kind added to ``OpKind`` and left out of one of them would
fail only when a workload first used it, in a guest or in an export: here it fails at
once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from crashcases.execute import FALLOC_FLAGS, PERFORM, execute
from crashcases.findings.fstests import FALLOC_COMMANDS, FSTESTS_OPS
from crashcases.oracle.log import Cause, OracleError, OracleLog
from crashcases.vocabulary import (
    DURABILITY_OPS,
    FULL_SYNC_OPS,
    RANGE_SYNC_OPS,
    SYNC_ALL_OPS,
    WHOLE_FILE_SYNC_OPS,
    OpKind,
)
from crashcases.workload.cases import load_case
from crashcases.workload.kinds import FALLOC_CAPABILITY, SPECS, FallocMode, OpSpec

#: Every table keyed by a closed set: (the table, the members it must hold).
TABLES: dict[str, tuple[Mapping[Any, Any], Iterable[Any]]] = {
    "rules (crashcases.workload.kinds.SPECS)": (SPECS, OpKind),
    "syscalls (crashcases.execute.PERFORM)": (PERFORM, OpKind),
    "fstests (crashcases.findings.fstests.FSTESTS_OPS)": (FSTESTS_OPS, OpKind),
    "capabilities of fallocate modes (crashcases.workload.kinds)": (FALLOC_CAPABILITY, FallocMode),
    "fallocate flags (crashcases.execute)": (FALLOC_FLAGS, FallocMode),
    "fallocate in fstests (crashcases.findings.fstests)": (FALLOC_COMMANDS, FallocMode),
}


def missing(table: Mapping[Any, Any], members: Iterable[Any]) -> list[Any]:
    return [m for m in members if m not in table]


@pytest.mark.parametrize("name", TABLES)
def test_every_kind_is_in_every_table(name: str) -> None:
    table, members = TABLES[name]
    assert missing(table, members) == [], f"{name} lacks them"


@pytest.mark.parametrize("name", TABLES)
def test_a_kind_left_out_of_a_table_is_found(name: str) -> None:
    # The positive control: the same check on the table without one member.
    table, members = TABLES[name]
    gone = list(members)[len(table) // 2]
    assert missing({k: v for k, v in table.items() if k != gone}, members) == [gone]


def test_each_kind_has_one_class_that_names_it() -> None:
    assert all(spec.kind is kind for kind, spec in SPECS.items())
    with pytest.raises(TypeError, match="fsync has rules already"):
        type("FsyncAgain", (OpSpec,), {"kind": OpKind.FSYNC})
    assert type(SPECS[OpKind.FSYNC]).__name__ == "Fsync"


def unpromised(durable: Iterable[OpKind], *groups: Iterable[OpKind]) -> set[OpKind]:
    """The durability kinds no group of promises takes."""
    return set(durable) - {k for group in groups for k in group}


def test_every_durability_kind_promises_something() -> None:
    groups = (SYNC_ALL_OPS, WHOLE_FILE_SYNC_OPS, RANGE_SYNC_OPS, {OpKind.FSYNC_DIR})
    assert unpromised(DURABILITY_OPS, *groups) == set()
    assert unpromised(DURABILITY_OPS, *groups[1:]) == SYNC_ALL_OPS  # the positive control
    assert FULL_SYNC_OPS <= WHOLE_FILE_SYNC_OPS | RANGE_SYNC_OPS
    assert OpKind.SYNC_FILE_RANGE not in DURABILITY_OPS  # it promises nothing


def test_the_oracle_reads_kinds_and_causes_as_members(tmp_path: Path) -> None:
    w = load_case("hand:rename-dir", seed=0)
    oracle = execute(w, tmp_path, lambda name: None)
    text = oracle.to_json()
    again = OracleLog.from_json(text)
    assert again.to_json() == text  # the file format is the one written
    assert {type(m.kind) for m in again.mark_records} == {OpKind}
    causes = {b.cause for hist in again.paths.values() for b in hist}
    assert {type(c) for c in causes} == {Cause}
    assert {Cause.MKDIR, Cause.CREAT, Cause.RENAME, Cause.MOVED} <= causes
    doc = json.loads(text)
    doc["marks"][0][2] = "fsnyc"
    with pytest.raises(OracleError, match="malformed"):
        OracleLog.from_json(json.dumps(doc))
    doc = json.loads(text)
    path = next(iter(doc["paths"]))
    doc["paths"][path][0][2] = "renamed"
    with pytest.raises(OracleError, match="malformed"):
        OracleLog.from_json(json.dumps(doc))
