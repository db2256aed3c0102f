"""A kernel qemu cannot boot is a harness error: one line that says why, exit 2, and
the run's files and database rows stay for the post-mortem."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from framework.core.machine.kernel import default_kernel

POWERCUT = [sys.executable, "-m", "framework.cli"]

STUDY = """
[study]
name = "boot-check"
description = "one crash step"

[[step]]
command = "crash"
targets = ["ext4/ordered"]
options = { case = "hand:write-fsync-rename" }

[[step]]
command = "cut"
targets = ["ext4/ordered"]
options = { case = "random:50", trials = 1 }
"""


def unbootable_copy(tmp_path: Path) -> Path:
    """The default kernel with its boot protocol version set to 1.00 in the setup header
    (offset 0x206, Documentation/arch/x86/boot.rst): the release string still reads, and
    qemu refuses to load an initramfs for such an old kernel and exits at once."""
    image = bytearray(default_kernel().image.read_bytes())
    assert image[0x202:0x206] == b"HdrS"
    image[0x206:0x208] = (0x0100).to_bytes(2, "little")
    bad = tmp_path / "bzImage"
    bad.write_bytes(bytes(image))
    return bad


def test_ci_on_a_kernel_that_does_not_boot_is_a_one_line_error_exit_2(tmp_path: Path) -> None:
    bad = unbootable_copy(tmp_path)
    study = tmp_path / "study.toml"
    study.write_text(STUDY)
    db, results = tmp_path / "ci.sqlite", tmp_path / "results"
    out = subprocess.run([*POWERCUT, "ci", "--study", str(study), "--db", str(db),
                          "--results", str(results), "--accel", "tcg",
                          "--baseline-kernel", str(bad), "--baseline-modules", "/",
                          "--kernel", str(bad), "--modules", "/"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("powercut: ")]
    # The step says why the guest did not boot; ci's last word names the step.
    assert any("qemu exited during boot" in ln and "too old to load a ram disk" in ln
               for ln in errors), out.stderr
    assert errors[-1].startswith("powercut: baseline: step 1 could not run (exit 2"), out.stderr
    assert "candidate" not in out.stdout + out.stderr  # the baseline failed: nothing more ran
    # The study boots its kernel once: step 2 is not tried on a kernel that did not boot.
    assert sum("qemu exited during boot" in ln for ln in errors) == 1, out.stderr
    assert "not run: the guest did not boot in step 1" in out.stdout, out.stdout
    # Nothing was deleted: the study run and its step are in the database, the guest's
    # console transcript is in the step's run directory.
    with sqlite3.connect(db) as con:
        rows = sorted(con.execute("select kind, status from runs"))
    assert rows == [("crash", "failed"), ("study", "finished")], rows
    consoles = list(results.glob("**/console.log"))
    assert consoles and "too old to load a ram disk" in consoles[0].read_text(errors="replace")
