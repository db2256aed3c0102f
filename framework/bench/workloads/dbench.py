"""dbench: the NetBench file-server load replayed by N clients for a fixed time."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from framework.bench.workloads.base import Benchmark, Metric, Scale, register
from framework.core.command import CommandResult

# Debian's dbench package ships the client load file here.
CLIENT_LOADFILE = "/usr/share/dbench/client.txt"

_THROUGHPUT_RE = re.compile(
    r"^Throughput ([\d.]+) MB/sec\s+(\d+) clients\s+(\d+) procs\s+max_latency=([\d.]+) ms", re.M
)
_OP_ROW_RE = re.compile(r"^\s*([A-Za-z]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s*$")


@dataclass(frozen=True, slots=True)
class DbenchSize:
    seconds: int
    clients: int


_SIZES = {
    Scale.TINY: DbenchSize(10, 2),
    Scale.SMALL: DbenchSize(60, 4),
    Scale.FULL: DbenchSize(300, 8),
}


@dataclass(frozen=True, slots=True)
class DbenchWorkload(Benchmark):
    """``dbench -D DIR -t SECONDS -c client.txt N``; dbench warms up before it measures."""

    loadfile: str = CLIENT_LOADFILE
    name: str = "dbench"
    tool: str = "dbench"
    package: str = "dbench"
    #: Seconds of load instead of the scale's (None: the scale's).
    duration_s: int | None = None

    def _seconds(self, scale: Scale) -> int:
        return self.duration_s if self.duration_s is not None else _SIZES[scale].seconds

    def argv(self, workdir: str, *, scale: Scale) -> list[str]:
        return [
            self.tool, "-D", self.datadir(workdir), "-t", str(self._seconds(scale)),
            "-c", self.loadfile, str(_SIZES[scale].clients),
        ]

    def timeout_s(self, scale: Scale) -> float:
        # Time-based, plus warm-up and clean-up that a slow guest stretches.
        return self._seconds(scale) * 4 + 300.0

    def with_duration(self, seconds: int) -> DbenchWorkload:
        return dataclasses.replace(self, duration_s=seconds)

    def parse(self, result: CommandResult) -> list[Metric]:
        self.require_success(result)
        m = _THROUGHPUT_RE.search(result.stdout)
        if m is None:
            raise self.fail(result, "no Throughput line in the output")
        metrics = [
            Metric("throughput", float(m.group(1)), "MB/s", True),
            Metric("max_latency", float(m.group(4)), "ms", False),
        ]
        table = result.stdout.split("Operation", 1)
        if len(table) != 2:
            raise self.fail(result, "no per-operation table in the output")
        total_ops = 0
        for line in table[1].splitlines():
            row = _OP_ROW_RE.match(line)
            if row is None:
                continue
            op = row.group(1).lower()
            count = int(row.group(2))
            total_ops += count
            metrics += [
                Metric(f"{op}_count", float(count), "ops", True),
                Metric(f"{op}_avg_latency", float(row.group(3)), "ms", False),
                Metric(f"{op}_max_latency", float(row.group(4)), "ms", False),
            ]
        if total_ops == 0:
            raise self.fail(result, "the per-operation table is empty")
        metrics.append(Metric("operations", float(total_ops), "ops", True))
        return metrics


register("dbench", DbenchWorkload)
