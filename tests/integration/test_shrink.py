"""Shrinking a planted failure in the guest: 20 ops, one fsync on a disk that ignores flushes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from crashcases.crash.plan import CrashPlan, validate_plan
from crashcases.crash.run import recheck, run_crash, run_spec
from crashcases.vocabulary import Outcome
from framework.core.lifecycle import run_lifecycle
from framework.core.machine.base import DiskSpec, Machine
from framework.core.machine.qemu import QemuMachine
from recovery.filesystems import kernel_modules
from tests.unit.test_shrink import MINIMAL, planted_workload


def factory(disks: Sequence[DiskSpec], rundir: Path, fstypes: tuple[str, ...]) -> Machine:
    return QemuMachine(disks=disks, modules=kernel_modules(fstypes), rundir=rundir).start()


def test_a_planted_fsync_failure_shrinks_to_three_ops_with_a_working_reproducer(tmp_path):
    """ext4/nobarrier never flushes, so the one fsync'd file (c/f) is lost at its mark. Of
    20 ops in four directories, the cut keeps c's 6; ddmin drops c/g and the write."""
    case = tmp_path / "planted.json"
    case.write_text(planted_workload().to_json())
    plan = CrashPlan(target="ext4/nobarrier", case=f"file:{case}")
    with run_lifecycle(run_spec(plan), tmp_path / "results", None) as run:
        original = run_crash(validate_plan(plan), run, factory)
    (key,) = [k for k, r in original.results.items() if r.outcome is Outcome.DATA_LOSS]

    out = subprocess.run([sys.executable, "-m", "framework.cli", "shrink", str(original.run_dir),
                          key, "--json"], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["ops"] == MINIMAL and got["minimal"]
    assert (got["guest_runs"], got["unresolved"]) == (4, 16)  # the cut, then 5, 4 and 3 ops
    assert "candidate 4: 3 ops, reproduces" in out.stderr

    kept = list(original.run_dir.glob("shrink-*"))
    assert kept == [Path(got["reproducer_dir"])]
    for name in ("plan.json", "workload.json", "oracle.json", "log.img", "results.json", "shrink.json"):
        assert (kept[0] / name).is_file(), name
    _, again = recheck(kept[0], got["reproducer_state"], factory)
    assert again.outcome is Outcome.DATA_LOSS
    assert {(f["kind"], f["path"]) for f in again.findings} & {("data-loss", "c"), ("data-loss", "c/f")}
