"""Faults a long run meets, in short: bench/faults.py injects each of them at many random
points and prints the table. Here once each, on real guests: a checking guest killed from
outside, a guest kernel that panics during a check (once, and at every check of one
state), and a results filesystem that fills up."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

CRASH = ["crash", "--target", "ext4/ordered", "--case", "gen:burst", "--max-sequences", "4",
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


def test_killed_and_panicking_guests_lose_no_state_and_a_panic_at_every_check_is_a_finding(
        tmp_path: Path) -> None:
    results = tmp_path / "r"
    # State 2 panics the guest kernel once, state 5 at every check; once 7 states are
    # checked, the checking guest's qemu is killed from outside.
    proc = powercut(tmp_path, "crash", *CRASH, "--results", str(results),
                    "--db", str(tmp_path / "db.sqlite"), "--inject-panic", "#2@once,#5")
    deadline = time.monotonic() + 900
    while sum(len(p.read_text().splitlines())
              for p in results.glob("crash-*/vm-*/results.jsonl")) < 7 or len(
                  guests := qemu_pids(results)) != 1:
        assert proc.poll() is None, (tmp_path / "crash.out").read_text()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.3)
    os.kill(guests[0], signal.SIGKILL)
    assert proc.wait(timeout=1200) == 1, (tmp_path / "crash.out").read_text()[-3000:]

    (run_dir,) = results.glob("crash-*")
    data = json.loads((run_dir / "results.json").read_text())
    states = data["states"]
    outcomes = [s["result"]["outcome"] for s in states]
    # Every state checked; only the one that kills its kernel every time fails.
    assert outcomes[4] == "hang" and outcomes[:4] + outcomes[5:] == ["ok"] * (len(states) - 1)
    notes = " ".join(states[4]["result"]["notes"])
    assert "the guest kernel died checking this state, 2 times" in notes
    assert "Kernel panic - not syncing: sysrq triggered crash" in notes
    # The deaths were harness errors on the way, each naming how the guest ended.
    deaths = [h["error"] for h in data["harness_errors"]]
    assert any("qemu ended by SIGKILL" in why for why in deaths), deaths
    assert sum("Kernel panic" in why for why in deaths) >= 3, deaths
    assert data["replacements"] >= 4


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
        lines = [ln for ln in full.stderr.splitlines() if not ln.startswith("INFO ")]
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
