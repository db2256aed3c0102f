"""The newer operations in a guest: each runs for real, keeps its promises on
correct filesystems, and the newer durability ops lose data without flushes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crashcases.oracle.log import OracleLog
from crashcases.vocabulary import Outcome
from tests.integration.test_crash import crash, outcomes

NEW_DURABILITY = {"write_osync", "write_odsync", "msync", "syncfs"}


# ext4 runs the newer ops in test_crash's generated pairs; xfs is the one with reflinks.
@pytest.mark.parametrize("target", ["xfs"])
def test_every_newer_op_keeps_its_promises(tmp_path: Path, target: str) -> None:
    """Negative control: hand:new-ops (every newer op once) is clean at every mark;
    on xfs the reflinks and collapse/insert run (on ext4 the reflinks are skipped)."""
    result = crash(tmp_path, target=target, case="hand:new-ops", per_point=1)
    bad = {k: (o, result.results[k].findings[:1]) for k, o in outcomes(result).items()
           if o is not Outcome.OK}
    assert not bad
    oracle = OracleLog.from_json((result.run_dir / "oracle.json").read_text())
    assert {m.kind for m in oracle.mark_records} == NEW_DURABILITY
    skipped = {oracle.ops[i].split()[0] for i in oracle.skipped}
    assert skipped == ({"clone", "clone_range"} if target == "ext4/ordered" else set())


def test_newer_durability_ops_lose_data_without_flushes(tmp_path: Path) -> None:
    """Positive control: without cache flushes nothing the workload wrote is in the
    log at its marks, so each O_SYNC, O_DSYNC, msync and syncfs promise is broken."""
    result = crash(tmp_path, target="ext4/nobarrier", case="hand:new-ops", per_point=1)
    oracle = OracleLog.from_json((result.run_dir / "oracle.json").read_text())
    kind_of = {m.name: m.kind for m in oracle.mark_records}
    broken = {kind_of[f["mark"]] for r in result.results.values()
              for f in r.findings if f["kind"] == "data-loss" and f.get("mark") in kind_of}
    assert broken == NEW_DURABILITY, json.dumps(
        {k: r.findings[:2] for k, r in result.results.items()}, indent=1)
