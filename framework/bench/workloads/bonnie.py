"""bonnie++: block and per-character I/O throughput, seeks, small-file create/stat/delete."""

from __future__ import annotations

import csv
import functools
import re
from dataclasses import dataclass

from framework.bench.workloads.base import Benchmark, Metric, Scale, register
from framework.core.command import CommandResult

# bonnie++ 2.00a CSV (format 1.98, see bon_csv2txt): index of each figure.
# The create section's "Read" column is a stat() of every file, hence "stat".
_RATES: tuple[tuple[str, int, str], ...] = (
    ("per_char_write", 9, "KiB/s"),
    ("block_write", 11, "KiB/s"),
    ("rewrite", 13, "KiB/s"),
    ("per_char_read", 15, "KiB/s"),
    ("block_read", 17, "KiB/s"),
    ("random_seeks", 19, "seeks/s"),
    ("seq_create", 26, "files/s"),
    ("seq_stat", 28, "files/s"),
    ("seq_delete", 30, "files/s"),
    ("random_create", 32, "files/s"),
    ("random_stat", 34, "files/s"),
    ("random_delete", 36, "files/s"),
)
_LATENCY_FIRST = 38
_LATENCY_NAMES = (
    "per_char_write", "block_write", "rewrite", "per_char_read", "block_read",
    "random_seeks", "seq_create", "seq_stat", "seq_delete", "random_create",
    "random_stat", "random_delete",
)
_CSV_FIELDS = _LATENCY_FIRST + len(_LATENCY_NAMES)
_LATENCY_RE = re.compile(r"^(\d+(?:\.\d+)?)(us|ms|s)$")
_LATENCY_TO_US = {"us": 1.0, "ms": 1e3, "s": 1e6}


@dataclass(frozen=True, slots=True)
class BonnieSize:
    """bonnie++ sizes for one scale."""

    file_mib: int  # -s: must be at least twice ram_mib or bonnie++ refuses
    ram_mib: int  # -r: what bonnie++ assumes the page cache can hold
    seeks: int  # random seeks in total, spread over `seekers` processes
    seekers: int
    files_k: int  # -n: files for the create tests, in multiples of 1024
    max_file_bytes: int
    min_file_bytes: int
    dirs: int


_SIZES = {
    # tiny: 8 MiB keeps the per-character tests (one syscall per byte in a
    # slow guest) to seconds.
    Scale.TINY: BonnieSize(8, 4, 1024, 2, 1, 0, 0, 0),
    Scale.SMALL: BonnieSize(256, 128, 8192, 5, 8, 4096, 512, 4),
    Scale.FULL: BonnieSize(2048, 1024, 8192, 5, 64, 16384, 0, 16),
}
#: bonnie-block: block I/O only (-f skips the per-character tests, one syscall per byte),
#: so even the tiny scale writes a file big enough to time (8 MiB is "+++++" on ext4;
#: bonnie++ prints that for a test that took too little time to measure).
_BLOCK_SIZES = {
    Scale.TINY: BonnieSize(128, 64, 1024, 2, 0, 0, 0, 0),  # half the 256 MiB data disk
    Scale.SMALL: BonnieSize(512, 256, 8192, 5, 0, 0, 0, 0),
    Scale.FULL: BonnieSize(2048, 1024, 8192, 5, 0, 0, 0, 0),
}
#: bonnie-smallfiles: the file-creation tests only (-s 0 skips every block, per-character
#: and seek test): sequential and random create, stat and delete of empty files in one
#: directory, with bonnie++'s default file sizes. Seed 003 (Dell'Omodarme, 2001) ran
#: bonnie++'s default -n 16, 16 x 1024 files, and every scale runs that count: bonnie++
#: prints "+++++" instead of a rate for a phase shorter than 500 ms (bonnie++(8)), and under TCG
#: ext3 and ext4 create and delete 4 x 1024 files in less (measured: a whole -n 4 run of
#: the six phases took 1.5 s on ext3); at -n 16 each of those phases takes about a second.
#: A stat of a cached file is some ten times quicker and mostly prints "+++++" even so.
_FILES_SIZES = {
    Scale.TINY: BonnieSize(0, 0, 0, 0, 16, 0, 0, 0),
    Scale.SMALL: BonnieSize(0, 0, 0, 0, 16, 0, 0, 0),
    Scale.FULL: BonnieSize(0, 0, 0, 0, 16, 0, 0, 0),
}


@dataclass(frozen=True, slots=True)
class BonnieWorkload(Benchmark):
    """bonnie++ in CSV mode (``-q``: CSV on stdout, the text table on stderr)."""

    seed: int = 1
    name: str = "bonnie"
    tool: str = "bonnie++"
    package: str = "bonnie++"
    block_only: bool = False  # -f: no per-character tests, and no file-creation tests
    files_only: bool = False  # -s 0: the file-creation tests alone

    def argv(self, workdir: str, *, scale: Scale) -> list[str]:
        if self.block_only and self.files_only:
            raise ValueError("bonnie: block_only and files_only exclude each other")
        table = _BLOCK_SIZES if self.block_only else _FILES_SIZES if self.files_only else _SIZES
        size = table[scale]
        files = f"{size.files_k}"
        if size.max_file_bytes:
            files += f":{size.max_file_bytes}:{size.min_file_bytes}:{size.dirs}"
        # -s 0 skips the I/O tests, and with them bonnie++'s rule that the file be twice -r.
        io = (["-s", "0"] if self.files_only else
              ["-s", f"{size.file_mib}:8192:{size.seeks}:{size.seekers}", "-r", str(size.ram_mib)])
        return [
            self.tool, "-q",
            "-u", "root",  # bonnie++ refuses to run as root without naming a user
            "-d", self.datadir(workdir),
            *io,
            "-n", files,
            "-m", "powercut",
            "-z", str(self.seed),
            *(["-f"] if self.block_only else []),
        ]

    def parse(self, result: CommandResult) -> list[Metric]:
        self.require_success(result)
        rows = [r for r in csv.reader(result.stdout.splitlines()) if r]
        if len(rows) != 1 or len(rows[0]) < _CSV_FIELDS:
            raise self.fail(result, f"expected one CSV line of {_CSV_FIELDS} fields")
        row = rows[0]
        metrics = [
            Metric(name, self._rate(result, row[index], name), unit, True)
            for name, index, unit in _RATES
            if row[index] != ""  # empty: the test was skipped (-s 0 or -n 0)
        ]
        for offset, name in enumerate(_LATENCY_NAMES):
            field = row[_LATENCY_FIRST + offset]
            if field == "":
                continue
            m = _LATENCY_RE.match(field)
            if not m:
                raise self.fail(result, f"latency of {name} is {field!r}")
            value = float(m.group(1)) * _LATENCY_TO_US[m.group(2)]
            metrics.append(Metric(f"{name}_latency", value, "us", False))
        return metrics

    def _rate(self, result: CommandResult, field: str, name: str) -> float | None:
        # "+++++": the test took too little time for bonnie++ to time it.
        if field.startswith("+"):
            return None
        try:
            return float(field)
        except ValueError:
            raise self.fail(result, f"{name} is {field!r}, not a number") from None


register("bonnie", BonnieWorkload)
register("bonnie-block", functools.partial(BonnieWorkload, name="bonnie-block", block_only=True))
register("bonnie-smallfiles",
         functools.partial(BonnieWorkload, name="bonnie-smallfiles", files_only=True))
