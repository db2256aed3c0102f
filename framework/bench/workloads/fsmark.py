"""fs_mark: synchronous small-file creation (write, fsync, close) in loops."""

from __future__ import annotations

import re
from dataclasses import dataclass

from framework.bench.workloads.base import Benchmark, Metric, Scale, register
from framework.core.command import CommandResult

# FSUse%  Count  Size  Files/sec  App Overhead
_ROW_RE = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+(\d+)\s*$")


@dataclass(frozen=True, slots=True)
class FsmarkSize:
    files: int  # per loop
    loops: int


_SIZES = {
    Scale.TINY: FsmarkSize(200, 3),
    Scale.SMALL: FsmarkSize(2000, 5),
    Scale.FULL: FsmarkSize(10_000, 10),
}


@dataclass(frozen=True, slots=True)
class FsmarkWorkload(Benchmark):
    """fs_mark with one thread; sync method 1 is fsync() before every close()."""

    file_bytes: int = 4096
    sync_method: int = 1
    name: str = "fsmark"
    tool: str = "fs_mark"
    package: str = "fsmark"

    def argv(self, workdir: str, *, scale: Scale) -> list[str]:
        size = _SIZES[scale]
        # fs_mark rejects a directory path of 39 bytes or more, and writes its
        # log into the current directory (read-only in a guest): run it from
        # the work directory with relative names (env -C is coreutils').
        return [
            "env", "-C", workdir,
            self.tool, "-d", self.name, "-n", str(size.files),
            "-s", str(self.file_bytes), "-S", str(self.sync_method),
            "-L", str(size.loops), "-t", "1", "-l", f"{self.name}.log",
        ]

    def parse(self, result: CommandResult) -> list[Metric]:
        self.require_success(result)
        rows = [m for m in map(_ROW_RE.match, result.stdout.splitlines()) if m]
        if not rows:
            raise self.fail(result, "no result rows in the output")
        rates = [float(r.group(4)) for r in rows]
        if min(rates) <= 0:
            raise self.fail(result, "a loop reports 0 files/s")
        # Every loop creates the same number of files, so the overall rate
        # (files / total time) is the harmonic mean of the loop rates.
        overall = len(rates) / sum(1.0 / r for r in rates)
        overhead = sum(float(r.group(5)) for r in rows) / len(rows)
        return [
            Metric("files", overall, "files/s", True),
            Metric("app_overhead", overhead, "us", False),
        ]


register("fsmark", FsmarkWorkload)
