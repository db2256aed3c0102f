#!/usr/bin/env python3
"""Start-up time of the commands that need no guest, next to the interpreter's own.

Each command runs N times as a fresh process (the way a user or a CI step
runs it); the table gives the median and the fastest wall time. The anchor
is the same Python starting and doing nothing (``python -c pass``) in the
same run: what is left above it is powercut's own import and work. The
goal is under 0.15 s for ``--help``, ``targets`` and ``log info``; ``log replay-log``
(here ``--find``, a header walk) is listed because scripts start it once per state.

Run: .venv/bin/python bench/startup.py [--runs 15] [--checkout DIR]

``--checkout DIR`` times another checkout of powercut (an older commit, say)
with the same interpreter and virtualenv, for before/after figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.fspath(Path(__file__).resolve().parent.parent))

from devicemapper.logformat import LogWriter

GOAL_S = 0.15


def small_log(path: Path) -> Path:
    """A short log with writes, flushes, a FUA and marks (what `log info` summarises)."""
    with LogWriter(path) as w:
        w.mark("mkfs")
        for i in range(200):
            w.write(8 * i, bytes([i % 251]) * 4096)
            if i % 20 == 19:
                w.flush()
                w.mark(f"pc-{i // 20}")
        w.fua_write(0, b"\1" * 4096)
    return path


def time_command(argv: list[str], runs: int, cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> list[float] | str:
    """Wall times of ``runs`` runs, or why the command failed."""
    def once() -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              cwd=cwd, env=env)

    once()  # warm the page cache and the bytecode cache
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = once()
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-1:] or [""]
            return f"exit {done.returncode}: {tail[0][:60]}"
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=15, help="runs per command (default: 15)")
    ap.add_argument("--checkout", type=Path, metavar="DIR",
                    help="time the powercut in this checkout instead of the installed one")
    args = ap.parse_args()
    cwd, env = None, None
    script = Path(sys.executable).parent / "powercut"  # the entry point users run
    powercut = [os.fspath(script)] if script.exists() else [sys.executable, "-m", "framework.cli"]
    if args.checkout:
        cwd = args.checkout.resolve()
        env = {**os.environ, "PYTHONPATH": os.fspath(cwd)}
        powercut = [sys.executable, "-m", "framework.cli"]
        print(f"checkout: {cwd}")
    with tempfile.TemporaryDirectory() as tmp:
        log = small_log(Path(tmp) / "small.log")
        commands = {
            "python -c pass (anchor)": [sys.executable, "-c", "pass"],
            "powercut --help": [*powercut, "--help"],
            "powercut targets": [*powercut, "targets"],
            "powercut log info LOG": [*powercut, "log", "info", os.fspath(log)],
            # fstests-style scripts start replay-log once per state they check.
            "powercut log replay-log": [*powercut, "log", "replay-log", "--log", os.fspath(log),
                                        "--find", "--end-mark", "pc-5"],
            "powercut crash --help": [*powercut, "crash", "--help"],
        }
        print(f"{'command':<28} {'median s':>9} {'fastest s':>10} {'above anchor s':>15}  goal")
        anchor = None
        for name, argv in commands.items():
            times = time_command(argv, args.runs, cwd, env)
            if isinstance(times, str):
                print(f"{name:<28} failed ({times})")
                continue
            median = statistics.median(times)
            anchor = median if anchor is None else anchor
            light = name in ("powercut --help", "powercut targets", "powercut log info LOG")
            verdict = ("" if not light else "met" if median < GOAL_S else f"missed (< {GOAL_S} s)")
            print(f"{name:<28} {median:9.3f} {min(times):10.3f} {median - anchor:15.3f}  {verdict}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
