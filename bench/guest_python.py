#!/usr/bin/env python3
"""What a guest program's start costs in the guest, per Python interpreter.

Every task a guest performs is a fresh ``python -S -m framework.cli.guest``,
run under emulation from the host's files over 9p. Before the task does any
work, the interpreter starts and imports the task's modules: the "task start"
line of bench/crash.py, seconds per guest under TCG. This script boots one
guest and times, inside it, for each interpreter given:

- ``-S -c pass``: the interpreter's own start;
- ``-S -c "import framework.cli.guest, crashcases.crash.guest"``: the start
  plus the modules of a crash check task.

The interpreters take turns (the order changes every round) and the table
gives the median and the fastest of the runs. The anchor is the first
interpreter: the virtualenv's, which is what powercut runs. By default the
second is Debian's /usr/bin/python3 when it is another interpreter, so the
figures say what the virtualenv's choice of interpreter costs every task.

Run: .venv/bin/python bench/guest_python.py [--runs 7] [--python PATH ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, os.fspath(ROOT))

from framework.core.machine.qemu import QemuMachine  # noqa: E402

COMMANDS = {
    "start (-S -c pass)": "pass",
    "check task's imports": "import framework.cli.guest, crashcases.crash.guest",
}

# Runs in the guest: argv[1] is JSON {"pythons": [...], "commands": {...}, "runs": N, "root": DIR}.
GUEST_PROGRAM = r"""
import json, os, subprocess, sys, time
spec = json.loads(sys.argv[1])
env = dict(os.environ, PYTHONPATH=spec["root"], PYTHONDONTWRITEBYTECODE="1")
times = {py: {name: [] for name in spec["commands"]} for py in spec["pythons"]}
for r in range(spec["runs"]):
    order = spec["pythons"][r % len(spec["pythons"]):] + spec["pythons"][:r % len(spec["pythons"])]
    for py in order:
        for name, code in spec["commands"].items():
            t0 = time.perf_counter()
            subprocess.run([py, "-S", "-c", code], check=True, cwd=spec["root"], env=env)
            times[py][name].append(time.perf_counter() - t0)
print("@@times " + json.dumps(times))
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7, help="runs of each command per interpreter (default 7)")
    ap.add_argument("--python", action="append", default=[], metavar="PATH",
                    help="another interpreter to time (repeatable; default: /usr/bin/python3 "
                         "when it is not the virtualenv's)")
    ap.add_argument("--cpus", type=int, default=2, help="the guest's vCPUs (default 2, powercut's default)")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error(f"--runs {args.runs}: must be at least 1")
    return args


def interpreters(extra: list[str]) -> list[str]:
    """The virtualenv's interpreter first, then the others, one entry per real binary."""
    chosen = [sys.executable, *(extra or ["/usr/bin/python3"])]
    seen: set[str] = set()
    out = []
    for py in chosen:
        real = os.path.realpath(py)
        if not os.access(real, os.X_OK):
            raise SystemExit(f"guest_python: {py}: not an executable interpreter")
        if real not in seen:
            seen.add(real)
            out.append(py)
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    pythons = interpreters(args.python)
    for py in pythons:
        print(f"interpreter: {py} -> {os.path.realpath(py)}")
    if len(pythons) == 1:
        print("(only one interpreter to time: the virtualenv's is the one given)")
    spec = {"pythons": pythons, "commands": COMMANDS, "runs": args.runs, "root": os.fspath(ROOT)}
    with tempfile.TemporaryDirectory(prefix="powercut-bench-python-") as scratch:
        machine = QemuMachine(rundir=Path(scratch) / "run", cpus=args.cpus).start()
        try:
            res = machine.run([sys.executable, "-S", "-c", GUEST_PROGRAM, json.dumps(spec)],
                              timeout_s=120 + 60 * args.runs * len(pythons))
        finally:
            machine.close()
    (line,) = [ln for ln in res.stdout.splitlines() if ln.startswith("@@times ")]
    times = json.loads(line[len("@@times "):])
    anchor = pythons[0]
    print(f"\nin the guest ({args.cpus} vCPUs), {args.runs} runs each; anchor: {anchor}")
    print(f"{'interpreter':44s} {'command':22s} {'median s':>9s} {'fastest s':>9s} {'x anchor':>9s}")
    for py in pythons:
        for name in COMMANDS:
            m = statistics.median(times[py][name])
            ratio = m / statistics.median(times[anchor][name])
            print(f"{py[-44:]:44s} {name:22s} {m:9.3f} {min(times[py][name]):9.3f} {ratio:8.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
