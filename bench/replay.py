"""Replay throughput benchmark (a script, not a test): prints figures.

Builds a synthetic dm-log-writes log of ``--size-mib`` of payload with a
realistic mix (mostly 4 KiB-512 KiB writes, partly sequential streams,
flushes, FUAs, a few discards, a mark every ``--mark-every`` entries),
then on the same disk:

* replays it whole onto a fresh sparse file and compares the rate with a
  plain sequential copy of the same number of bytes (both start with the
  source evicted from the page cache and end with fsync);
* replays to every FUA entry in turn from one header index, as the checking
  guest does, on the Python path and the compiled one;
* visits ``--marks`` marks incrementally with one Replayer, and from
  entry 0 for every mark onto a fresh file each time (what xfstests'
  generic/482 does), and reports both times and bytes written.

``--log PATH`` takes a recorded log (e.g. a crash run's log.img) instead of
the synthetic one. First, on a regular file and (as root, through ``losetup``)
on a loop block device, best of ``--reps``, the race: powercut in process on
the Python path (``native=False``, the reference), on the compiled path, and
on the compiled path with ``latest`` (each block written once per call);
``powercut log replay-log`` as a command, compiled and with
``POWERCUT_NATIVE=0``; with ``--baseline DIR``, the command of another
powercut tree (a checkout from before a change); and, with ``--replay-log
PATH`` (fstests' src/log-writes/replay-log), replay-log itself. Every method
must leave the same image, byte for byte. replay-log fsyncs its target at the
end; powercut fsyncs a block device at the end and leaves a file to its page
cache (every reader of a file goes through it), so on a file the race also
times the compiled replay with that fsync. Each race also times the interpreter's
bare start (``python -c pass``) and prints the floor of any replay command written
in Python: that start plus the compiled replay in process, against replay-log.

Usage: python bench/replay.py [--size-mib 256] [--marks 8] [--dir DIR]
                              [--log PATH] [--replay-log PATH] [--baseline DIR]
                              [--no-block]
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import fcntl
import hashlib
import math
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, os.fspath(Path(__file__).resolve().parent.parent))

from devicemapper import native
from devicemapper.logformat import LogFlag, LogReader, LogSummary, LogWriter, summarize
from devicemapper.logindex import LogIndex
from devicemapper.replay import Replayer

MIB = 1 << 20


def evict(path: Path) -> None:
    """Drop one file's pages from the page cache (fair cold start, no global drop)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def fresh_sparse(path: Path, size_bytes: int) -> None:
    path.unlink(missing_ok=True)
    with open(path, "wb") as f:
        f.truncate(size_bytes)


def build_log(
    path: Path,
    *,
    size_bytes: int,
    device_bytes: int,
    mark_every: int,
    seed: int,
    max_write_bytes: int = 512 * 1024,
) -> None:
    rng = random.Random(seed)
    max_write_log2 = math.log2(max_write_bytes / 4096)
    sectorsize = 512
    device_sectors = device_bytes // sectorsize
    pool = os.urandom(8 * MIB)
    written = 0
    stream_next = 0
    with LogWriter(path, sectorsize=sectorsize) as w:
        while written < size_bytes:
            # Log-uniform sizes between 4 KiB and the maximum, in 4 KiB units.
            size = 4096 * int(2 ** rng.uniform(0, max_write_log2))
            nr = size // sectorsize
            if rng.random() < 0.7 and stream_next + nr < device_sectors:
                sector = stream_next  # a file being written sequentially
            else:
                sector = rng.randrange(0, (device_sectors - nr) // 8) * 8
            stream_next = sector + nr
            start = rng.randrange(0, len(pool) - size)
            flags = LogFlag.NONE
            if rng.random() < 0.05:
                flags = LogFlag.FUA  # journal commit blocks
            elif rng.random() < 0.1:
                flags = LogFlag.METADATA
            w.write(sector, pool[start : start + size], flags)
            written += size
            roll = rng.random()
            if roll < 0.05:
                w.flush()
            elif roll < 0.06:
                dnr = rng.randint(8, 2048)
                w.discard(rng.randrange(0, device_sectors - dnr), dnr)
            if w.nr_entries % mark_every == 0:
                w.mark(f"point-{w.nr_entries}")
    evict(path)


def settle(*paths: Path) -> None:
    """Remove scratch files and write everything back, outside any timing."""
    for path in paths:
        if not path.is_block_device():
            path.unlink(missing_ok=True)
    os.sync()


def plain_copy(src: Path, dst: Path, nbytes: int) -> float:
    """Sequential copy of ``nbytes`` with big buffers; seconds, fsync included."""
    evict(src)
    dst.unlink(missing_ok=True)
    buf = bytearray(8 * MIB)
    view = memoryview(buf)
    t0 = time.perf_counter()
    sfd = os.open(src, os.O_RDONLY)
    dfd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        done = 0
        while done < nbytes:
            n = os.preadv(sfd, [view[: min(len(buf), nbytes - done)]], done)
            if n <= 0:
                break
            os.pwrite(dfd, view[:n], done)
            done += n
        os.fsync(dfd)
    finally:
        os.close(sfd)
        os.close(dfd)
    return time.perf_counter() - t0


def prepare(log: Path, target: Path, device_bytes: int,
            fresh: Callable[[], None] | None) -> None:
    """Before a timed replay: the log out of the page cache, and the target emptied by
    ``fresh`` (default: a new sparse file)."""
    evict(log)
    if fresh is None:
        fresh_sparse(target, device_bytes)
    else:
        fresh()


def full_replay(log: Path, target: Path, device_bytes: int, last: int,
                sync: bool | None = None, *, native_loop: bool | None = None,
                latest: bool = False, fresh: Callable[[], None] | None = None) -> float:
    """Seconds of one whole replay in process; ``sync`` as Replayer takes it (None: a file
    target is not fsynced, a block device is; True: one fsync at the end, as replay-log
    does); ``fresh`` empties the target (default: a new sparse file)."""
    prepare(log, target, device_bytes, fresh)
    t0 = time.perf_counter()
    with Replayer(log, target, sync=sync, native=native_loop, latest=latest) as rp:
        rp.replay_to(last)
    return time.perf_counter() - t0


def per_entry_replay(log: Path, target: Path, device_bytes: int) -> float:
    """The simple way (replay-log's): read each payload whole, one pwrite per entry.

    Kept as the "before" figure the engine's batching is measured against.
    """
    evict(log)
    fresh_sparse(target, device_bytes)
    t0 = time.perf_counter()
    fd = os.open(target, os.O_WRONLY)
    try:
        with LogReader(log) as reader:
            for entry in reader:
                if entry.is_write:
                    os.pwrite(fd, reader.read_payload(entry), entry.byte_offset)
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--size-mib", type=int, default=256, help="payload in the log (default 256)"
    )
    parser.add_argument("--marks", type=int, default=8, help="marks visited (default 8)")
    parser.add_argument(
        "--mark-every", type=int, default=64, help="entries between marks in the log (default 64)"
    )
    parser.add_argument("--reps", type=int, default=5, help="repetitions of the rate test")
    parser.add_argument(
        "--device-factor", type=int, default=8, help="replay device size / payload (default 8)"
    )
    parser.add_argument(
        "--max-write-kib", type=int, default=512, help="largest write, KiB (default 512)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (default: temp)")
    parser.add_argument("--log", type=Path, default=None,
                        help="a recorded log to replay instead of the synthetic one")
    parser.add_argument("--replay-log", type=Path, default=None, metavar="PATH",
                        help="fstests' replay-log binary, to race against")
    parser.add_argument("--baseline", type=Path, default=None, metavar="DIR",
                        help="another powercut tree (e.g. before a change) whose "
                             "`powercut log replay-log` joins the race")
    parser.add_argument("--no-block", action="store_true",
                        help="race on a regular file only (the loop device needs root)")
    args = parser.parse_args(argv)
    for what, path, ok in (("--dir", args.dir, Path.is_dir), ("--log", args.log, Path.is_file),
                           ("--replay-log", args.replay_log, Path.is_file),
                           ("--baseline", args.baseline, Path.is_dir)):
        if path is not None and not ok(path):
            kind = "directory" if what in ("--dir", "--baseline") else "file"
            parser.error(f"{what} {path}: no such {kind}")
    return args


def device_bytes_of(log: Path) -> int:
    """How big a target must be for every entry of ``log`` to land on it."""
    with LogReader(log) as reader:
        return max((e.byte_offset + e.byte_length for e in reader if not e.is_mark),
                   default=reader.sectorsize)


def command_replay(argv: list[str], log: Path, target: Path, device_bytes: int,
                   fresh: Callable[[], None] | None = None,
                   env: dict[str, str] | None = None, cwd: Path | None = None) -> float:
    """Seconds one replay command takes end to end (process start and its fsync included)."""
    prepare(log, target, device_bytes, fresh)
    t0 = time.perf_counter()
    subprocess.run([*argv, "--log", os.fspath(log), "--replay", os.fspath(target)], check=True,
                   env=env, cwd=cwd)
    return time.perf_counter() - t0


BLKDISCARD = 0x1277  # _IO(0x12, 119)


@contextlib.contextmanager
def loop_device(backing: Path, size_bytes: int) -> Iterator[Path]:
    """A loop block device over a new sparse file, detached on the way out."""
    fresh_sparse(backing, size_bytes)
    dev = subprocess.run(["losetup", "--find", "--show", os.fspath(backing)], check=True,
                         capture_output=True, text=True).stdout.strip()
    try:
        yield Path(dev)
    finally:
        subprocess.run(["losetup", "--detach", dev], check=False)
        backing.unlink(missing_ok=True)


def discard_device(dev: Path) -> None:
    """Empty a loop device: BLKDISCARD punches its backing file and drops its cache."""
    fd = os.open(dev, os.O_WRONLY)
    try:
        size = os.lseek(fd, 0, os.SEEK_END)
        fcntl.ioctl(fd, BLKDISCARD, struct.pack("=QQ", 0, size))
    finally:
        os.close(fd)


def digest(path: Path, chunk: int = 8 * MIB) -> str:
    """A hash of a file's or device's whole content."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while data := f.read(chunk):
            h.update(data)
    return h.hexdigest()


def race_methods(log: Path, target: Path, device_bytes: int, last: int, reps: int,
                 replay_log: Path | None, fresh: Callable[[], None] | None,
                 block: bool, baseline: Path | None) -> dict[str, list[float]]:
    """Every replay method onto ``target`` (a file, or a block device ``fresh`` empties),
    best of ``reps``; prints the times and checks that all leave the same image."""
    powercut = [sys.executable, "-m", "framework.cli", "log", "replay-log"]
    python_env = {**os.environ, "POWERCUT_NATIVE": "0"}
    # The command starts as an installed one does, from compiled bytecode: where
    # PYTHONDONTWRITEBYTECODE is set, every start would compile every module it imports.
    root = Path(__file__).resolve().parent.parent
    for package in ("framework", "devicemapper", "crashcases", "recovery"):
        compileall.compile_dir(root / package, quiet=1)
    jobs: dict[str, Callable[[], float]] = {}
    if replay_log is not None:
        jobs["replay-log"] = lambda: command_replay([os.fspath(replay_log)], log, target,
                                                    device_bytes, fresh)
    jobs["command"] = lambda: command_replay(powercut, log, target, device_bytes, fresh)
    jobs["command, Python"] = lambda: command_replay(powercut, log, target, device_bytes, fresh,
                                                     python_env)
    if baseline is not None:
        # `python -m` looks in its working directory first: the baseline tree's modules.
        base_env = {**os.environ, "PYTHONPATH": os.fspath(baseline)}
        jobs["command, baseline"] = lambda: command_replay(powercut, log, target, device_bytes,
                                                           fresh, base_env, baseline)
        for package in ("framework", "devicemapper", "crashcases", "recovery"):
            compileall.compile_dir(baseline / package, quiet=1)
    jobs["Python"] = lambda: full_replay(log, target, device_bytes, last, native_loop=False,
                                         fresh=fresh)
    jobs["compiled"] = lambda: full_replay(log, target, device_bytes, last, native_loop=True,
                                           fresh=fresh)
    jobs["compiled, latest"] = lambda: full_replay(log, target, device_bytes, last,
                                                   native_loop=True, latest=True, fresh=fresh)
    if not block:
        # What replay-log's final fsync costs on a file.
        jobs["compiled + fsync"] = lambda: full_replay(log, target, device_bytes, last, sync=True,
                                                       native_loop=True, fresh=fresh)
    images: dict[str, str] = {}

    def keeping_image(name: str, job: Callable[[], float]) -> Callable[[], float]:
        def run() -> float:
            seconds = job()
            if name not in images:  # the first run's image, hashed outside the timing
                images[name] = digest(target)
            return seconds
        return run

    timed_jobs = {name: keeping_image(name, job) for name, job in jobs.items()}
    # The interpreter's own start, as the command's starts (site included): with the
    # compiled replay in process it is the least any command in Python can take.
    timed_jobs[START] = lambda: timed(lambda: subprocess.run([sys.executable, "-c", "pass"],
                                                             check=True))
    runs = race(timed_jobs, reps, target if not block else Path("/nonexistent"))
    starts = runs.pop(START)
    anchor = "replay-log" if "replay-log" in runs else "Python"
    best = {name: min(ts) for name, ts in runs.items()}
    for name, ts in runs.items():
        print(f"  {name:<17} best {best[name]:.3f} s, median {statistics.median(ts):.3f} s, "
              f"{best[anchor] / best[name]:5.2f}x {anchor}'s speed  "
              f"(runs, s: {', '.join(f'{t:.3f}' for t in ts)})")
    print(f"  {command_floor(best, min(starts), anchor)}")
    different = [name for name in images if images[name] != images[anchor]]
    print(f"  images identical to {anchor}'s: "
          f"{'all' if not different else 'NOT ' + ', '.join(different)}")
    return runs


START = "interpreter start"


def command_floor(best: dict[str, float], start: float, anchor: str) -> str:
    """The floor of a replay command written in Python: the interpreter's start (best of
    the same race) plus the compiled replay in process, with no option parsing, no import
    of powercut and no set-up; and how far the command is above it."""
    floor = start + best["compiled"]
    return (f"floor of a command in Python: interpreter start {start * 1000:.1f} ms + "
            f"compiled {best['compiled']:.3f} s = {floor:.3f} s, "
            f"{best[anchor] / floor:.2f}x {anchor}'s speed; the command takes "
            f"{(best['command'] - floor) * 1000:.0f} ms more")


def against_replay_log(log: Path, replay_log: Path | None, work: Path, device_bytes: int,
                       last: int, reps: int, block: bool, baseline: Path | None) -> None:
    """The race on a regular file and on a loop block device."""
    target = work / "race.img"
    print(f"replay of the whole log onto a regular file, best of {reps}:")
    race_methods(log, target, device_bytes, last, reps, replay_log, None, block=False,
                 baseline=baseline)
    settle(target)
    if not block:
        return
    if os.geteuid() != 0 or shutil.which("losetup") is None:
        print("no block-device race: it needs root and losetup (or pass --no-block)")
        return
    with loop_device(work / "loop-backing.img", device_bytes) as dev:
        print(f"replay of the whole log onto a loop block device ({dev}), best of {reps}:")
        race_methods(log, dev, device_bytes, last, reps, replay_log,
                     lambda: discard_device(dev), block=True, baseline=baseline)


def describe_log(log: Path, t_build: float) -> tuple[LogSummary, int]:
    """Print what the log holds and how fast its headers scan; its summary and last index."""
    with LogReader(log) as reader:
        summary = summarize(reader)
        last = reader.nr_entries - 1
        t_scan = timed(lambda: sum(1 for _ in reader))
        t_index = {
            walk: min(timed(lambda w=walk: LogIndex(reader, native_walk=w).extend_to(last + 1))
                      for _ in range(3))
            for walk in ((False, True) if native.available() else (False,))
        }
    print(
        f"log: {log.stat().st_size / MIB:.1f} MiB, {summary.entries} entries, "
        f"{summary.writes} writes, {summary.flushes} flushes, {summary.fuas} FUAs, "
        f"{summary.discards} discards, {len(summary.marks)} marks; built in {t_build:.1f} s"
    )
    print(
        f"header scan (headers only): {t_scan * 1000:.0f} ms "
        f"({summary.entries / t_scan / 1000:.0f}k entries/s); header index, best of 3: "
        + ", ".join(f"{'compiled' if walk else 'Python'} {t * 1000:.1f} ms"
                    for walk, t in t_index.items())
    )
    return summary, last


def race(jobs: dict[str, Callable[[], float]], reps: int, scratch: Path) -> dict[str, list[float]]:
    """Seconds of each job per repetition, the order rotated every repetition."""
    runs: dict[str, list[float]] = {name: [] for name in jobs}
    order = list(jobs)
    for rep in range(reps):
        # Rotate the order so no method always runs first (or last).
        shift = rep % len(order)
        for name in order[shift:] + order[:shift]:
            runs[name].append(jobs[name]())
            settle(scratch)
    return runs


def print_rates(runs: dict[str, list[float]], payload: int) -> None:
    # Best of N shows what each method costs when nothing else competes
    # for the disk and CPUs; the median shows a typical run.
    best = {name: payload / MIB / min(ts) for name, ts in runs.items()}
    typical = {name: payload / MIB / statistics.median(ts) for name, ts in runs.items()}
    labels = {
        "copy": f"plain sequential copy of {payload / MIB:.0f} MiB",
        "replay": "replay (Replayer, fsync at the end)",
        "per-entry": "replay, one pread+pwrite per entry",
    }
    for name, ts in runs.items():
        print(
            f"{labels[name]:<38} best {best[name]:5.0f} MiB/s, median {typical[name]:5.0f} "
            f"MiB/s  (runs, s: {', '.join(f'{t:.3f}' for t in ts)})"
        )
    print(
        f"replay / copy ratio: best {best['replay'] / best['copy']:.2f}, "
        f"median {typical['replay'] / typical['copy']:.2f}  "
        f"(per-entry / copy: best {best['per-entry'] / best['copy']:.2f}, "
        f"median {typical['per-entry'] / typical['copy']:.2f})"
    )


def choose_marks(summary: LogSummary, count: int) -> list[str]:
    """Up to ``count`` of the log's marks, spread evenly over it."""
    # The synthetic log's points; a recorded log's own marks (pc-N, mkfs).
    marks = ([name for _, name in summary.marks if name.startswith("point-")]
             or list(dict.fromkeys(name for _, name in summary.marks)))
    step = max(1, len(marks) // count)
    return marks[step - 1 :: step][:count]


def every_fua(log: Path, work: Path, device_bytes: int, reps: int) -> None:
    """The checking guest's pattern: one header index, then a replay to every FUA entry
    in turn (no fsync, so the figures are the replay's own), Python against compiled."""
    with LogReader(log) as reader:
        index = LogIndex(reader)
        index.extend_to(reader.nr_entries)
        fuas = [e.index for e in index if e.is_fua]
        if not fuas:
            print("the log has no FUA entries to visit")
            return
        target = work / "fua.img"

        def visit(**options: bool) -> Callable[[], float]:
            def run() -> float:
                fresh_sparse(target, device_bytes)
                t0 = time.perf_counter()
                with Replayer(log, target, sync=False, index=index, **options) as rp:
                    for k in fuas:
                        rp.replay_to(k)
                return time.perf_counter() - t0
            return run

        jobs = {"Python": visit(native=False), "compiled": visit(native=True)}
        if native.available():
            jobs["compiled, latest"] = visit(native=True, latest=True)
        runs = race(jobs, reps, target)
    print(f"a replay to each of {len(fuas)} FUA entries in turn, one index, best of {reps}: "
          + ", ".join(f"{name} {min(ts):.3f} s" for name, ts in runs.items()))


def visit_incrementally(
    log: Path, target: Path, device_bytes: int, marks: list[str]
) -> tuple[float, int]:
    """One Replayer moves forward from mark to mark; seconds and bytes written."""
    evict(log)
    fresh_sparse(target, device_bytes)
    t0 = time.perf_counter()
    with Replayer(log, target) as rp:
        for name in marks:
            rp.replay_to_mark(name)
        written = rp.bytes_written
    seconds = time.perf_counter() - t0
    settle(target)
    return seconds, written


def visit_from_scratch(
    log: Path, work: Path, device_bytes: int, marks: list[str]
) -> tuple[float, int]:
    """Every mark replayed from entry 0 onto its own fresh file; seconds and bytes written."""
    # One fresh file per point, made beforehand and removed afterwards:
    # freeing blocks (with online discard) must not land in the timing.
    targets = [work / f"scratch-{i}.img" for i in range(len(marks))]
    for path in targets:
        fresh_sparse(path, device_bytes)
    evict(log)
    written = 0
    t0 = time.perf_counter()
    for name, path in zip(marks, targets, strict=True):
        with Replayer(log, path) as rp:
            rp.replay_to_mark(name)
            written += rp.bytes_written
    seconds = time.perf_counter() - t0
    settle(*targets)
    return seconds, written


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    size_bytes = args.size_mib * MIB
    # A device much larger than the payload keeps overwrites (which the page
    # cache would absorb and so flatter the replay) rare.
    device_bytes = args.device_factor * size_bytes
    with tempfile.TemporaryDirectory(prefix="powercut-bench-", dir=args.dir) as tmp:
        work = Path(tmp)
        if args.log is not None:
            log, t_build = args.log, 0.0
            device_bytes = device_bytes_of(log)
        else:
            log = work / "bench.log"
            t_build = timed(
                lambda: build_log(
                    log,
                    size_bytes=size_bytes,
                    device_bytes=device_bytes,
                    mark_every=args.mark_every,
                    seed=args.seed,
                    max_write_bytes=args.max_write_kib * 1024,
                )
            )
        summary, last = describe_log(log, t_build)
        payload = summary.payload_bytes
        against_replay_log(log.resolve(), args.replay_log, work.resolve(), device_bytes, last,
                           args.reps, block=not args.no_block,
                           baseline=None if args.baseline is None else args.baseline.resolve())

        out = work / "out.img"
        runs = race(
            {
                "copy": lambda: plain_copy(log, out, payload),
                # fsynced like the copy and the per-entry loop, so the rates compare.
                "replay": lambda: full_replay(log, out, device_bytes, last, sync=True),
                "per-entry": lambda: per_entry_replay(log, out, device_bytes),
            },
            args.reps,
            out,
        )
        print_rates(runs, payload)

        every_fua(log, work, device_bytes, args.reps)
        chosen = choose_marks(summary, args.marks)
        if not chosen:
            print("the log has no marks to visit")
            return 0
        inc_s, inc_bytes = visit_incrementally(log, work / "inc.img", device_bytes, chosen)
        scratch_s, scratch_bytes = visit_from_scratch(log, work, device_bytes, chosen)
        print(
            f"{len(chosen)} marks incrementally: {inc_s:.2f} s, {inc_bytes / MIB:.0f} MiB written"
        )
        print(
            f"{len(chosen)} marks from entry 0:  {scratch_s:.2f} s, "
            f"{scratch_bytes / MIB:.0f} MiB written  "
            f"(x{scratch_s / inc_s:.1f} time, x{scratch_bytes / max(inc_bytes, 1):.1f} bytes)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
