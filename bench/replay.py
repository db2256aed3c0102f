"""Replay throughput benchmark (a script, not a test): prints figures.

Builds a synthetic dm-log-writes log of ``--size-mib`` of payload with a
realistic mix (mostly 4 KiB-512 KiB writes, partly sequential streams,
flushes, FUAs, a few discards, a mark every ``--mark-every`` entries),
then on the same disk:

* replays it whole onto a fresh sparse file and compares the rate with a
  plain sequential copy of the same number of bytes (both start with the
  source evicted from the page cache and end with fsync);
* visits ``--marks`` marks incrementally with one Replayer, and from
  entry 0 for every mark onto a fresh file each time (what xfstests'
  generic/482 does), and reports both times and bytes written.

Usage: python bench/replay.py [--size-mib 256] [--marks 8] [--dir DIR]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, os.fspath(Path(__file__).resolve().parent.parent))

from devicemapper.logformat import LogFlag, LogReader, LogWriter, summarize
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


def full_replay(log: Path, target: Path, device_bytes: int, last: int) -> float:
    evict(log)
    fresh_sparse(target, device_bytes)
    t0 = time.perf_counter()
    with Replayer(log, target) as rp:
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


def main(argv: list[str] | None = None) -> int:
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
    args = parser.parse_args(argv)

    size_bytes = args.size_mib * MIB
    # A device much larger than the payload keeps overwrites (which the page
    # cache would absorb and so flatter the replay) rare.
    device_bytes = args.device_factor * size_bytes
    with tempfile.TemporaryDirectory(prefix="powercut-bench-", dir=args.dir) as tmp:
        work = Path(tmp)
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
        with LogReader(log) as reader:
            summary = summarize(reader)
            last = reader.nr_entries - 1
            t_scan = timed(lambda: sum(1 for _ in reader))
        payload = summary.payload_bytes
        print(
            f"log: {log.stat().st_size / MIB:.1f} MiB, {summary.entries} entries, "
            f"{summary.writes} writes, {summary.flushes} flushes, {summary.fuas} FUAs, "
            f"{summary.discards} discards, {len(summary.marks)} marks; built in {t_build:.1f} s"
        )
        print(
            f"header scan (headers only): {t_scan * 1000:.0f} ms "
            f"({summary.entries / t_scan / 1000:.0f}k entries/s)"
        )

        runs: dict[str, list[float]] = {"copy": [], "replay": [], "per-entry": []}
        jobs: dict[str, Callable[[], float]] = {
            "copy": lambda: plain_copy(log, work / "out.img", payload),
            "replay": lambda: full_replay(log, work / "out.img", device_bytes, last),
            "per-entry": lambda: per_entry_replay(log, work / "out.img", device_bytes),
        }
        order = list(jobs)
        for rep in range(args.reps):
            # Rotate the order so no method always runs first (or last).
            for name in order[rep % 3 :] + order[: rep % 3]:
                runs[name].append(jobs[name]())
                settle(work / "out.img")
        # Best of N shows what each method costs when nothing else competes
        # for the disk and CPUs; the median shows a typical run.
        best = {name: payload / MIB / min(ts) for name, ts in runs.items()}
        typical = {name: payload / MIB / statistics.median(ts) for name, ts in runs.items()}
        labels = {
            "copy": f"plain sequential copy of {payload / MIB:.0f} MiB",
            "replay": "replay (Replayer)",
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

        marks = [name for _, name in summary.marks if name.startswith("point-")]
        step = max(1, len(marks) // args.marks)
        chosen = marks[step - 1 :: step][: args.marks]
        target = work / "inc.img"
        evict(log)
        fresh_sparse(target, device_bytes)
        t0 = time.perf_counter()
        with Replayer(log, target) as rp:
            for name in chosen:
                rp.replay_to_mark(name)
            inc_bytes = rp.bytes_written
        inc_s = time.perf_counter() - t0
        settle(target)

        # One fresh file per point, made beforehand and removed afterwards:
        # freeing blocks (with online discard) must not land in the timing.
        targets = [work / f"scratch-{i}.img" for i in range(len(chosen))]
        for path in targets:
            fresh_sparse(path, device_bytes)
        evict(log)
        scratch_bytes = 0
        t0 = time.perf_counter()
        for name, path in zip(chosen, targets, strict=True):
            with Replayer(log, path) as rp:
                rp.replay_to_mark(name)
                scratch_bytes += rp.bytes_written
        scratch_s = time.perf_counter() - t0
        settle(*targets)
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
