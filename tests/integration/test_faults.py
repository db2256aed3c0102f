"""Faults a long run meets, in short: bench/faults.py injects each of them at many random
points and prints the table. Here once each, on real guests: a guest kernel that panics at
every check of one state, and a results filesystem that fills up."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

CRASH = ["crash", "--target", "ext4/ordered", "--case", "gen:burst", "--max-sequences", "3",
         "--seed", "3", "-q"]


def powercut(tmp_path: Path, name: str, *argv: str) -> subprocess.Popen[str]:
    with open(tmp_path / f"{name}.out", "w") as out:
        return subprocess.Popen([sys.executable, "-m", "framework.cli", *argv],
                                stdout=out, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)


def qemu_pids(tree: Path) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[0].endswith(b"qemu-system-x86_64") and any(os.fsencode(tree) in a for a in argv):
                found.append(int(proc.name))
    return found


def test_a_state_that_panics_its_guest_kernel_at_every_check_is_a_finding_and_none_is_lost(
        tmp_path: Path) -> None:
    # State 4 panics the guest kernel each time its check starts (sysrq c). A guest that
    # dies once, from a panic or killed from outside, is the same path with one death:
    # tests/unit/test_engine.py, and bench/faults.py at random points.
    results = tmp_path / "r"
    crash = subprocess.run([sys.executable, "-m", "framework.cli", *CRASH, "--results",
                            str(results), "--db", str(tmp_path / "db.sqlite"),
                            "--inject-panic", "#4"], capture_output=True, text=True, timeout=1200)
    assert crash.returncode == 1, crash.stderr[-3000:]

    (run_dir,) = results.glob("crash-*")
    data = json.loads((run_dir / "results.json").read_text())
    states = data["states"]
    outcomes = [s["result"]["outcome"] for s in states]
    # Every state checked; only the one that kills its kernel every time fails.
    assert outcomes[3] == "hang" and outcomes[:3] + outcomes[4:] == ["ok"] * (len(states) - 1)
    notes = " ".join(states[3]["result"]["notes"])
    assert "the guest kernel died checking this state, 2 times" in notes
    assert "Kernel panic - not syncing: sysrq triggered crash" in notes
    # The deaths were harness errors on the way, each with the console's panic line: the
    # first with the other lane's state in flight too (then both go alone) or with this
    # one alone (when the other lane was between states), then with it alone.
    deaths = [h["error"] for h in data["harness_errors"]]
    assert all("Kernel panic" in why for why in deaths) and len(deaths) in (2, 3), deaths
    assert data["replacements"] == len(deaths)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_full_results_filesystem_is_one_line_and_resume_completes(tmp_path: Path) -> None:
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "powercut-test", str(mnt)],
                   check=True)
    try:
        where = ["--results", str(mnt), "--db", str(mnt / "db.sqlite")]
        full = subprocess.run([sys.executable, "-m", "framework.cli", *CRASH, *where],
                              capture_output=True, text=True, timeout=900)
        assert full.returncode == 2, full.stderr[-3000:]
        # Log records (a guest booted again after a silent boot, say) are not the error.
        lines = [ln for ln in full.stderr.splitlines()
                 if not ln.startswith(("INFO ", "WARNING framework."))]
        assert len(lines) == 1 and lines[0].startswith(f"powercut: {mnt}/")
        assert "no space left on device" in lines[0] and "--resume" in lines[0]
        db = sqlite3.connect(mnt / "db.sqlite")
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        db.close()

        subprocess.run(["mount", "-o", "remount,size=1024m", str(mnt)], check=True)
        (run_dir,) = mnt.glob("crash-*")
        resumed = subprocess.run([sys.executable, "-m", "framework.cli", "crash", "--resume",
                                  str(run_dir), "--db", str(mnt / "db.sqlite"), "-q"],
                                 capture_output=True, text=True, timeout=900)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        states = json.loads((run_dir / "results.json").read_text())["states"]
        assert states and all(s["result"]["outcome"] == "ok" for s in states)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
