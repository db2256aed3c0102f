"""``powercut sweep`` end to end in a guest: real mkfs, power cuts on dm-flakey, timed recovery."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from framework.core.store import Store


def test_a_tiny_sweep_times_each_recovery_step_and_fits_lines(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "framework.cli", "sweep", "--target", "ext4/ordered",
         "--sizes", "32,64", "--files", "50", "--dirty", "0,1", "--journal-sizes", "4",
         "--results", str(tmp_path / "results"), "--db", str(tmp_path / "db.sqlite"), "-q"],
        capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "recovery sweep (4 points)" in res.stdout and "fitted lines" in res.stdout
    (path,) = (tmp_path / "results").glob("sweep-*/results.json")
    doc = json.loads(path.read_text())
    rows = doc["rows"]
    assert sorted((r["point"]["size_mib"], r["point"]["dirty_mib"]) for r in rows) == [
        (32, 0), (32, 1), (64, 0), (64, 1)]
    for r in rows:
        result = r["result"]
        assert r["outcome"] == "ok", r
        # Real timings of each step, and the light oracle saw every file.
        assert result["mount_s"] > 0 and result["fsck_s"] > 0 and result["journal_only_s"] > 0
        assert result["fsck_verdict"] == "clean" and result["journal_only_verdict"] == "clean"
        # The mount before the cut left the journal marked for recovery: e2fsck replayed it.
        assert "recovering journal" in result["journal_only_says"], result
        assert result["files_found"] == 50
        assert result["dirty_files_ok"] == result["dirty_files"] == 4 * r["point"]["dirty_mib"]
        if r["point"]["dirty_mib"]:
            # The cut left committed transactions: the kernel says it replayed them.
            assert any("recovery complete" in m for m in result["replay_messages"]), result
    (fits,) = doc["fits"]
    by_response = {f["response"]: f for f in fits["fits"]}
    assert set(by_response) == {"mount_s", "fsck_s", "journal_only_s"}
    mount = by_response["mount_s"]
    assert mount["reason"] == "" and mount["n"] == 4 and mount["dropped"] == ["files_k",
                                                                              "journal_mib"]
    for slope in mount["slopes"].values():
        assert slope["low"] <= slope["estimate"] <= slope["high"]
    assert (path.parent / "results.csv").read_text().count("\n") == 5
    with Store(tmp_path / "db.sqlite") as store:
        (run,) = store.runs()
        assert run.kind == "sweep" and len(store.sweep_points(run.id)) == 4
        assert store.placements(run.id)["ext4/ordered"].placement == "internal"
