"""Does ``powercut compare`` flag a real regression, and nothing between runs of one
configuration? (a script, not a test): prints figures.

Runs one small study ``--same + 1`` times on one kernel, each a separate
``powercut run``: a benchmark (``--workload``, default fio's sequential 8 KiB
writes) on ext2 and on a target named "cmp-ext4", and power cuts on
"cmp-ext4". The first ``--same`` runs define cmp-ext4 as ext4 data=ordered;
the last defines the same name with the extra mount options ``--planted``
(default "sync": every write waits for the disk and its journal commit, a
throughput regression by construction). It then
compares run 1 with run 2, 2 with 3, ... (same configuration: nothing may be
flagged) and the last same-configuration run with the planted one (the
cmp-ext4 throughput must be flagged, ext2 must not), and prints for every
pair compare's exit status and each metric's means, change and verdict.

Usage: python bench/compare.py [--work DIR] [--same 4] [--reps 5] [--trials 3]
                               [--workload fio-seq-write-8k] [--planted sync]
                               [--kernel-release R]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent
POWERCUT = [sys.executable, "-m", "framework.cli"]

STUDY = """\
[study]
name = "compare-check"
description = "{workload} on ext2 and cmp-ext4, power cuts on cmp-ext4"

[[step]]
title = "throughput"
command = "bench"
targets = ["ext2", "cmp-ext4"]
options = {{ workload = "{workload}", reps = {reps}, seed = 1, baseline = "ext2" }}

[[step]]
title = "recovery after power cuts"
command = "cut"
targets = ["cmp-ext4"]
options = {{ case = "random:150", trials = {trials} }}
"""

TARGET = """\
[targets."cmp-ext4"]
fstype = "ext4"
mount_options = {options}
description = "{description}"
"""


def write_inputs(work: Path, args: argparse.Namespace) -> tuple[Path, Path, Path]:
    study = work / "study.toml"
    study.write_text(STUDY.format(workload=args.workload, reps=args.reps, trials=args.trials))
    same, planted = work / "same.toml", work / "planted.toml"
    same.write_text(TARGET.format(options=json.dumps(["data=ordered"]),
                                  description="ext4 data=ordered"))
    extra = [o for o in args.planted.split(",") if o]
    planted.write_text(TARGET.format(options=json.dumps(["data=ordered", *extra]),
                                     description=f"ext4 data=ordered,{args.planted} (planted)"))
    return study, same, planted


def run_study(study: Path, targets: Path, db: Path, work: Path, kernel: list[str]) -> tuple[int, float]:
    """One powercut run; its id in ``db`` and its wall time."""
    start = time.monotonic()
    out = subprocess.run([*POWERCUT, "run", str(study), "--targets-file", str(targets),
                          "--no-report", "--db", str(db), "--results", str(work / "results"),
                          *kernel], cwd=TOP, capture_output=True, text=True)
    wall = time.monotonic() - start
    if out.returncode >= 2:
        sys.exit(f"compare.py: powercut run failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
    with sqlite3.connect(db) as con:
        (run_id,) = con.execute("select max(id) from runs where kind = 'study'").fetchone()
    return int(run_id), wall


def compare(db: Path, a: int, b: int) -> tuple[int, dict]:
    out = subprocess.run([*POWERCUT, "compare", str(a), str(b), "--db", str(db), "--json"],
                         cwd=TOP, capture_output=True, text=True)
    if out.returncode >= 2:
        sys.exit(f"compare.py: powercut compare {a} {b} failed: {out.stderr.strip()}")
    return out.returncode, json.loads(out.stdout)


def show(label: str, status: int, result: dict) -> None:
    counts = result["counts"]
    print(f"\n{label}: compare {result['a']['id']} {result['b']['id']} -> exit {status}; "
          f"regressions {counts['regressions']}, improvements {counts['improvements']}, "
          f"new failing states {counts['new_states']}, new failing cuts "
          f"{counts['new_cut_failures']}")
    for m in result["metrics"]:
        def side(s: dict) -> str:
            if s["mean"] is None:
                return "-"
            hw = "" if s["half_width"] is None else f" ± {s['half_width']:.3g}"
            return f"{s['mean']:.4g}{hw} (n={s['n']})"
        change = "-" if m["change"] is None else f"{100 * m['change']:+.1f}%"
        print(f"  {m['group']:<13} {m['target']:<9} {m['metric']:<22} A {side(m['a']):<24} "
              f"B {side(m['b']):<24} {change:>8}  {m['verdict']}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, help="work directory (default: a new temporary one)")
    p.add_argument("--same", type=int, default=4,
                   help="runs of the unchanged configuration (pairs: one fewer; default 4)")
    p.add_argument("--workload", default="fio-seq-write-8k",
                   help="the benchmark (default: fio-seq-write-8k)")
    p.add_argument("--reps", type=int, default=5, help="repetitions per run (default 5)")
    p.add_argument("--trials", type=int, default=3, help="power cuts per run (default 3)")
    p.add_argument("--planted", default="sync",
                   help="mount options the planted run adds to cmp-ext4 (default: sync)")
    p.add_argument("--kernel-release", help="an installed Debian kernel (default: powercut's)")
    args = p.parse_args()
    if args.same < 2:
        p.error("--same: at least 2 runs make one pair")
    work = args.work or Path(tempfile.mkdtemp(prefix="powercut-compare-"))
    work.mkdir(parents=True, exist_ok=True)
    db = work / "compare.sqlite"
    kernel = ["--kernel-release", args.kernel_release] if args.kernel_release else []
    study, same, planted = write_inputs(work, args)
    print(f"work directory {work}; {args.same} runs of ext4 data=ordered, one with "
          f"+{args.planted}; {args.workload} {args.reps} reps, {args.trials} power cuts each", flush=True)

    runs: list[int] = []
    for i in range(args.same + 1):
        targets = planted if i == args.same else same
        run_id, wall = run_study(study, targets, db, work, kernel)
        runs.append(run_id)
        print(f"run {run_id} ({targets.stem}): {wall:.0f} s", flush=True)

    false_alarms = 0
    for a, b in itertools.pairwise(runs[:-1]):
        status, result = compare(db, a, b)
        false_alarms += status != 0
        show("same configuration", status, result)
    status, result = compare(db, runs[-2], runs[-1])
    show(f"planted (+{args.planted})", status, result)
    flagged = {(m["target"], m["metric"]) for m in result["metrics"] if m["verdict"] == "regression"}
    print(f"\nsame-configuration pairs flagged: {false_alarms} of {len(runs) - 2}; planted pair "
          f"flagged: {'yes' if status == 1 else 'NO'} "
          f"({', '.join(f'{t} {m}' for t, m in sorted(flagged)) or 'no metric'})")
    return 0 if false_alarms == 0 and status == 1 else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", os.fspath(TOP))
    raise SystemExit(main())
