"""Benchmark workloads: wrappers that run a real tool and parse its output into metrics.

Each workload builds the argv of a Debian-packaged tool (bonnie++, postmark,
dbench, fio, fs_mark) or of the phase module run inside the machine, aimed at
a directory on the filesystem under test, and turns the tool's output into
``Metric`` values with units. The built-in workloads are loaded on first use
of ``get_workload``/``list_workloads`` (not here, so that ``python -m
framework.bench.workloads.phases`` imports nothing it does not need).
"""

from framework.bench.workloads.base import (
    Benchmark,
    BenchmarkError,
    Metric,
    Scale,
    get_workload,
    list_workloads,
    run_workload,
)

__all__ = [
    "Benchmark",
    "BenchmarkError",
    "Metric",
    "Scale",
    "get_workload",
    "list_workloads",
    "run_workload",
]
