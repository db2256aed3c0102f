"""fio: sequential and Iometer-style access patterns on one file, JSON output.

The profiles follow the pgmeter workloads of Bryant et al. (2002), which
are patterned on the access specifications distributed with Intel's
Iometer: sequential 8 KB and 64 KB reads and writes; the Web Server mix
(512 B to 512 KB, all reads, all random); the File Server mix (512 B to
64 KB, 80% reads, all random); and 8K OLTP (8 KB, 67% reads, all random).
The size mixes are Iometer's standard percentages, given to fio as bssplit.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass
from typing import Any

from framework.bench.workloads.base import Benchmark, Metric, Scale, register
from framework.core.command import CommandResult
from framework.core.errors import ConfigError


@dataclass(frozen=True, slots=True)
class FioProfile:
    name: str
    rw: str  # fio's rw: read, write, randread, randwrite, randrw
    bs: str = ""  # a fixed block size, or
    bssplit: str = ""  # size/percent pairs
    rwmixread: int | None = None

    @property
    def writes(self) -> bool:
        return self.rw in ("write", "randwrite", "randrw", "rw")

    @property
    def sequential(self) -> bool:
        return self.rw in ("read", "write", "rw")


PROFILES: tuple[FioProfile, ...] = (
    FioProfile("seq-read-8k", "read", bs="8k"),
    FioProfile("seq-write-8k", "write", bs="8k"),
    FioProfile("seq-read-64k", "read", bs="64k"),
    FioProfile("seq-write-64k", "write", bs="64k"),
    FioProfile(
        "web-server", "randread",
        bssplit="512/22:1k/15:2k/8:4k/23:8k/15:16k/2:32k/6:64k/7:128k/1:512k/1",
    ),
    FioProfile(
        "file-server", "randrw",
        bssplit="512/10:1k/5:2k/5:4k/60:8k/2:16k/4:32k/4:64k/10", rwmixread=80,
    ),
    FioProfile("oltp-8k", "randrw", bs="8k", rwmixread=67),
)


@dataclass(frozen=True, slots=True)
class FioSize:
    file_mib: int
    runtime_s: int  # for the random mixes; sequential profiles do one pass


_SIZES = {
    Scale.TINY: FioSize(32, 5),
    Scale.SMALL: FioSize(256, 30),
    # pgmeter's small system used one 1 GB file.
    Scale.FULL: FioSize(1024, 120),
}


@dataclass(frozen=True, slots=True)
class FioWorkload(Benchmark):
    """One fio profile: a single job, buffered I/O through the page cache."""

    profile: FioProfile = PROFILES[0]
    ioengine: str = "psync"
    #: Seconds per random mix instead of the scale's (None: the scale's).
    duration_s: int | None = None
    name: str = ""
    tool: str = "fio"
    package: str = "fio"

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", f"fio-{self.profile.name}")

    def argv(self, workdir: str, *, scale: Scale) -> list[str]:
        size = _SIZES[scale]
        p = self.profile
        argv = [
            self.tool, "--output-format=json",
            f"--directory={self.datadir(workdir)}",
            f"--name={p.name}",
            f"--rw={p.rw}",
            f"--size={size.file_mib}M",
            f"--ioengine={self.ioengine}",
            "--direct=0", "--iodepth=1", "--numjobs=1",
            "--randrepeat=1",
        ]
        argv.append(f"--bssplit={p.bssplit}" if p.bssplit else f"--bs={p.bs}")
        if p.rwmixread is not None:
            argv.append(f"--rwmixread={p.rwmixread}")
        if not p.sequential:
            argv += [f"--runtime={self._runtime_s(scale)}", "--time_based"]
        if p.writes:
            # Without it buffered writes only reach the page cache and the
            # journal never enters the measurement.
            argv.append("--end_fsync=1")
        return argv

    def _runtime_s(self, scale: Scale) -> int:
        return self.duration_s if self.duration_s is not None else _SIZES[scale].runtime_s

    def timeout_s(self, scale: Scale) -> float:
        return self._runtime_s(scale) * 4 + 600.0

    def with_duration(self, seconds: int) -> FioWorkload:
        if self.profile.sequential:
            raise ConfigError(f"workload {self.name!r} reads or writes its file once, not for a "
                              "time: --duration applies to fio's random mixes only")
        return dataclasses.replace(self, duration_s=seconds)

    def parse(self, result: CommandResult) -> list[Metric]:
        self.require_success(result)
        # fio may print notes before the JSON document on stdout.
        start = result.stdout.find("{")
        try:
            doc: dict[str, Any] = json.loads(result.stdout[start:]) if start >= 0 else {}
        except json.JSONDecodeError as exc:
            raise self.fail(result, f"output is not JSON ({exc.msg} at {exc.pos})") from None
        jobs = doc.get("jobs")
        if not jobs:
            raise self.fail(result, "no jobs in the JSON output")
        job = jobs[0]
        if job.get("error"):
            raise self.fail(result, f"job {job.get('jobname')!r} reports error {job['error']}")
        metrics: list[Metric] = []
        for direction in ("read", "write"):
            stats = job.get(direction) or {}
            if not stats.get("io_bytes"):
                continue
            clat = stats.get("clat_ns", {})
            p99 = clat.get("percentile", {}).get("99.000000")
            metrics += [
                Metric(f"{direction}_bw", stats["bw_bytes"] / 1e6, "MB/s", True),
                Metric(f"{direction}_iops", float(stats["iops"]), "IOPS", True),
                Metric(f"{direction}_clat_mean", clat["mean"] / 1e3, "us", False),
                Metric(f"{direction}_clat_p99",
                       None if p99 is None else p99 / 1e3, "us", False),
            ]
        if not metrics:
            raise self.fail(result, "the job moved no data")
        return metrics


for _profile in PROFILES:
    register(f"fio-{_profile.name}", functools.partial(FioWorkload, profile=_profile))
