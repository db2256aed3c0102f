"""What one fsync sends to the disk, per configuration (a script, not a test).

The trade-off study's overhead benchmark is fs_mark with sync method 1: create a file,
write 4 KiB, fsync it, close it, again and again. This script records the same loop on
dm-log-writes for each configuration of a targets file (default: the trade-off study's
nine, on its nvme profile: a profile adds delays and throttling, not writes) with
``powercut crash`` (the workload as a file; one crash state checked, ``--points
sample:1``), cuts the run's log at its marks (one after every durability op: ``powercut
log info --per-mark``) and counts each fsync's share: writes, KiB, runs (writes not
contiguous with the write completed before them), data-less flushes, writes with FUA.

Then, per device profile, what the profile charges for those requests
(recovery/builtin_profiles.toml): qemu's throttle admits ``iops`` requests a second, so
the requests of one fsync take at least requests / iops; dm-delay holds every write for
``write_ms`` and every flush (a REQ_PREFLUSH bio, with data or without) for ``flush_ms``.
The requests are counted as the log records them, before any merging below dm, so
requests / iops is an upper bound of the throttle's charge; waits that overlap are not
added up. The median over the loop's fsyncs is printed (the first few fsyncs of a fresh
filesystem are left out: --skip).

Usage: python bench/fsync_writes.py [--files 60] [--skip 10] [--data-mib 256]
           [--targets-file framework/study/studies/tradeoff-targets.toml]
           [--targets nvme/ext2,nvme/ext4-fast_commit] [--profiles nvme,hdd]
           [--kernel-release R] [--results DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, os.fspath(Path(__file__).resolve().parent.parent))

from crashcases.execute import ORDER_SUFFIX
from devicemapper.logformat import LogReader, MarkInterval, by_mark
from framework.core import clock, rundir
from framework.core.errors import ConfigError
from recovery.profiles import get_profile
from recovery.targets import load_targets

ROOT = Path(__file__).resolve().parent.parent
TRADEOFF_TARGETS = ROOT / "framework" / "study" / "studies" / "tradeoff-targets.toml"
FILE_BYTES = 4096  # fs_mark's -s in the trade-off study


def workload(files: int) -> dict[str, object]:
    """fs_mark's loop as powercut ops: a directory made durable, then create, write, fsync."""
    ops: list[dict[str, object]] = [{"kind": "mkdir", "path": "fsmark"}, {"kind": "sync"}]
    for n in range(files):
        path = f"fsmark/f{n:05d}"
        ops += [{"kind": "creat", "path": path},
                {"kind": "pwrite", "path": path, "offset": 0, "length": FILE_BYTES},
                {"kind": "fsync", "path": path}]
    return {"name": f"fsmark-{files}", "seed": 0, "ops": ops}


def record(target: str, case: Path, results: Path, args: argparse.Namespace) -> Path:
    """Run powercut crash on ``target``; the run directory it made."""
    before = set(results.glob("crash-*"))
    argv = [sys.executable, "-m", "framework.cli", "crash", "-q", "--target", target,
            "--targets-file", args.targets_file, "--case", f"file:{case}",
            "--points", "sample:1", "--data-mib", str(args.data_mib), "--results", str(results)]
    if args.kernel_release:
        argv += ["--kernel-release", args.kernel_release]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    made = sorted(set(results.glob("crash-*")) - before)
    # Exit 1 only says the state checked failed; the recording is what is measured here.
    if done.returncode not in (0, 1) or not made or not rundir.crash_log(made[-1]).is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"bench/fsync_writes.py: powercut crash --target {target} failed "
                         f"(exit {done.returncode}): {tail[0]}")
    return made[-1]


def fsyncs(run: Path, skip: int) -> list[MarkInterval]:
    """The intervals the loop's fsyncs close (the marks after the first, the setup's sync,
    without the first ``skip``): on a target with an external journal, the data disk's and
    the journal disk's, added up (both logs are marked together)."""
    per_log = []
    for name in (rundir.LOG, rundir.JOURNAL_LOG):
        path = rundir.crash_log(run, name)
        if path.is_file():
            with LogReader(path) as reader:
                per_log.append(_workload_marks(by_mark(reader)))
    out = []
    for same in zip(*per_log, strict=True):
        if len({i.mark for i in same}) != 1:
            raise SystemExit(f"bench/fsync_writes.py: {run}: the logs' marks differ: "
                             f"{[i.mark for i in same]}")
        out.append(_added(same[0].mark, same[0].index, same))
    return out[1 + skip:]


FIELDS = ("entries", "writes", "flushes", "fuas", "payload_bytes", "runs")


def _added(mark: str, index: int, parts: Sequence[MarkInterval]) -> MarkInterval:
    return MarkInterval(mark, index, *(sum(getattr(i, f) for i in parts) for f in FIELDS))


def _workload_marks(intervals: list[MarkInterval]) -> list[MarkInterval]:
    """The intervals of the workload's marks (pc-N). On a two-disk target the data log has
    a second mark after each (pc-N + ORDER_SUFFIX, crashcases.crash.guest._marks_both):
    what completed between the two is counted with the next workload mark."""
    out, carried = [], []
    for i in intervals:
        if i.mark.endswith(ORDER_SUFFIX):
            carried.append(i)
        elif i.mark.startswith("pc-"):
            out.append(_added(i.mark, i.index, [*carried, i]))
            carried = []
    return out


def median(values: list[int]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--files", type=int, default=60, help="files created and fsynced (default: 60)")
    p.add_argument("--skip", type=int, default=10,
                   help="first fsyncs of the loop left out of the medians (default: 10)")
    p.add_argument("--data-mib", type=int, default=256,
                   help="data disk size, as the benchmark's (default: 256, tiny scale's)")
    p.add_argument("--targets-file", default=os.fspath(TRADEOFF_TARGETS),
                   help="targets file (default: the trade-off study's)")
    p.add_argument("--targets", help="comma-separated targets (default: the file's nvme/*)")
    p.add_argument("--profiles", default="nvme,hdd",
                   help="device profiles to charge (default: nvme,hdd)")
    p.add_argument("--kernel-release", help="guest kernel (installed or in powercut's cache)")
    p.add_argument("--results", help="where the crash runs go (default: a temporary directory)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = p.parse_args()
    if args.files <= args.skip:
        p.error(f"--files {args.files} must be more than --skip {args.skip}")

    names = (args.targets.split(",") if args.targets else
             [n for n in load_targets(args.targets_file) if n.startswith("nvme/")])
    profiles = [get_profile(n) for n in args.profiles.split(",") if n]
    start = clock.monotonic()
    rows = []
    with tempfile.TemporaryDirectory(prefix="powercut-fsync-writes-") as scratch:
        results = Path(args.results) if args.results else Path(scratch)
        results.mkdir(parents=True, exist_ok=True)
        case = Path(scratch) / "fsmark.json"
        case.write_text(json.dumps(workload(args.files)))
        for name in names:
            print(f"recording {args.files} fsyncs on {name} ...", file=sys.stderr, flush=True)
            got = fsyncs(record(name, case, results, args), args.skip)
            # Requests are the log's entries: writes, data-less flushes, discards.
            requests = median([i.entries for i in got])
            flushes = median([i.flushes for i in got])
            row: dict[str, object] = {
                "target": name, "fsyncs": len(got), "requests": requests,
                "writes": median([i.writes for i in got]),
                "kib": median([i.payload_bytes for i in got]) / 1024,
                "runs": median([i.runs for i in got]),
                "flushes": flushes,  # with data or without: each waits flush_ms
                "fuas": median([i.fuas for i in got]),
            }
            for pr in profiles:
                row[f"{pr.name}_iops_ms"] = 1000.0 * requests / pr.iops if pr.iops else 0.0
                row[f"{pr.name}_flush_ms"] = flushes * pr.flush_ms
            rows.append(row)
    total_s = clock.monotonic() - start
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"fs_mark's loop (create, write {FILE_BYTES} B, fsync), {args.files} files on a "
          f"{args.data_mib} MiB data disk; medians over fsyncs {args.skip + 1} to "
          f"{args.files}; {total_s:.0f} s")
    head = (f"{'target':<24} {'writes':>6} {'KiB':>6} {'runs':>5} {'flushes':>7} {'FUAs':>5} "
            f"{'requests':>8}")
    for pr in profiles:
        head += f"  {pr.name + ' req/iops':>14} {pr.name + ' flush':>11}"
    print(head)
    for row in rows:
        line = (f"{row['target']:<24} {row['writes']:>6.1f} {row['kib']:>6.1f} "
                f"{row['runs']:>5.1f} {row['flushes']:>7.1f} {row['fuas']:>5.1f} "
                f"{row['requests']:>8.1f}")
        for pr in profiles:
            line += (f"  {row[pr.name + '_iops_ms']:>11.1f} ms {row[pr.name + '_flush_ms']:>8.1f} ms")
        print(line)
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except ConfigError as exc:  # a bad --targets-file, target or profile: one line
        raise SystemExit(f"bench/fsync_writes.py: {exc}") from None
