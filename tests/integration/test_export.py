"""Exported reproducers run where developers run them: the shell script reproduces a real
finding in a guest, and the fstests test fails on a planted wrong promise and passes where
the promise holds, under fstests' own ./check (when POWERCUT_XFSTESTS names a built
checkout, built with fstests' own make)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from crashcases.crash.plan import CrashPlan, validate_plan
from crashcases.crash.run import run_crash, run_spec
from crashcases.findings.export import load_export_state
from crashcases.findings.fstests import write_fstests
from crashcases.vocabulary import Outcome
from framework.core.lifecycle import run_lifecycle
from framework.core.machine.base import DiskSpec, Machine
from framework.core.machine.qemu import QemuMachine
from recovery.filesystems import kernel_modules
from tests.unit.test_export import (
    MARK_OP,
    copy_tree,
    findings_of,
    make_run,
    planted_workload,
    run_ops,
)


def factory(disks: Sequence[DiskSpec], rundir: Path, fstypes: tuple[str, ...]) -> Machine:
    return QemuMachine(disks=disks, modules=kernel_modules(fstypes), rundir=rundir).start()


def test_the_script_reproduces_a_real_finding_and_leaves_the_image_and_devices_alone(tmp_path):
    """ext4/nobarrier never flushes, so fsync'd data is gone at the marks (as in test_crash);
    the exported script, run as root in a fresh guest, says FAIL for it and exits 1."""
    plan = CrashPlan(target="ext4/nobarrier", case="hand:write-fsync-rename")
    with run_lifecycle(run_spec(plan), tmp_path / "results", None) as run:
        result = run_crash(validate_plan(plan), run, factory)
    lost = [k for k, r in result.results.items()
            if r.outcome is Outcome.DATA_LOSS and k.endswith("/prefix")]
    assert lost, {k: r.outcome for k, r in result.results.items()}
    key = lost[0]
    finding = result.results[key].findings[0]

    guest_dir = tmp_path / "guest"
    guest_dir.mkdir()
    script = guest_dir / "repro.sh"
    out = subprocess.run([sys.executable, "-m", "framework.cli", "export", str(result.run_dir),
                          key, "--script", str(script)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    image = guest_dir / "repro.img.gz"
    digest = hashlib.sha256(image.read_bytes()).hexdigest()

    with QemuMachine(modules=kernel_modules(("ext4",)), rundir=guest_dir) as guest:
        guest.start()
        ran = guest.run(["sh", str(script)], timeout_s=600, ok_status=None)
        left = guest.run(["sh", "-c", "DM_DISABLE_UDEV=1 dmsetup ls; losetup -a"], timeout_s=60)
    assert ran.status == 1, ran.stdout + ran.stderr
    lines = ran.stdout.splitlines()
    assert "ok: the state mounts" in lines
    failed = [ln for ln in lines if ln.startswith("FAIL: ")]
    assert any(ln.startswith(f"FAIL: {finding['path'] or '.'} ") for ln in failed), lines
    assert lines[-1] == f"reproduced: {script}"
    assert hashlib.sha256(image.read_bytes()).hexdigest() == digest
    assert "powercut-repro" not in left.stdout and left.stdout.strip() in ("", "No devices found")


XFSTESTS = os.environ.get("POWERCUT_XFSTESTS")
LOCAL_CONFIG = """\
export FSTYP=ext4
export TEST_DEV=/dev/vda
export TEST_DIR=/mnt/test
export SCRATCH_DEV=/dev/vdb
export SCRATCH_MNT=/mnt/scratch
export LOGWRITES_DEV=/dev/vdc
# No udevd in powercut's guests: libdevmapper makes the /dev/mapper nodes itself.
export DM_DISABLE_UDEV=1
export UDEV_SETTLE_PROG=true
unset UDEV_WAIT_PROG
"""


@pytest.mark.skipif(
    not XFSTESTS or not (Path(XFSTESTS) / "src/log-writes/replay-log").is_file(),
    reason="set POWERCUT_XFSTESTS to a built fstests checkout (fstests' own make)")
def test_the_fstests_test_fails_on_a_wrong_promise_and_passes_on_a_kept_one(tmp_path):
    """Two exports of the planted workload's state at pc-2 on ext4/ordered, under one ./check:
    generic/999 checks a promise a correct filesystem keeps (d/g exists, from a real finding
    on a tree that lost it) and must pass; generic/998 checks one edited to be false (d/f
    holds at least 99999 bytes) and must fail with its FAIL line in the output."""
    assert XFSTESTS is not None
    workload = planted_workload()
    oracle = run_ops(workload, tmp_path / "o")
    promised = tmp_path / "promised"
    run_ops(workload, promised, MARK_OP)
    broken = tmp_path / "broken"
    copy_tree(promised, broken)
    (broken / "d/g").unlink()
    kept = findings_of(broken, workload, oracle)
    assert [f["kind"] for f in kept] == ["data-loss"]
    wrong = [{"kind": "data-loss", "path": "d/f", "mark": "pc-0",
              "detail": "size 0 B; promised at pc-0 as of op 9 (fsync d/f): at least 99999 B"}]

    guest_dir = tmp_path / "guest"
    checkout = guest_dir / "xfstests"
    # Guests see the host read-only: the checkout runs from a copy in the run directory.
    shutil.copytree(XFSTESTS, checkout, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    shutil.rmtree(checkout / "results", ignore_errors=True)
    (checkout / "local.config").write_text(LOCAL_CONFIG)
    for name, findings in (("generic/999", kept), ("generic/998", wrong)):
        where = tmp_path / name.replace("/", "-")
        where.mkdir()
        state = load_export_state(make_run(where, workload, findings), "40/prefix")
        write_fstests(state, checkout, name)

    disks = [DiskSpec("test", 256 << 20), DiskSpec("scratch", 512 << 20),
             DiskSpec("logwrites", 512 << 20)]
    with QemuMachine(disks=disks, modules=(*kernel_modules(("ext4",)), "dm-thin-pool"),
                     rundir=guest_dir) as guest:
        guest.start()
        guest.run(["sh", "-c", "mkfs.ext4 -q -F /dev/vda && mkdir -p /mnt/test /mnt/scratch"],
                  timeout_s=120)
        ran = guest.run(["sh", "-c", f"cd {checkout} && ./check generic/998 generic/999"],
                        timeout_s=1500, ok_status=None)
    report = ran.stdout + ran.stderr
    assert "Ran: generic/998 generic/999" in report, report
    assert "Failures: generic/998" in report, report
    bad = (checkout / "results/generic/998.out.bad").read_text()
    assert "FAIL: d/f holds at least 99999 bytes (promised by fsync d/f at pc-0) -- size 12388" \
        in bad, bad
    assert not (checkout / "results/generic/999.out.bad").exists()
