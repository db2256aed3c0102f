"""The workload protocol: build a tool's argv, run it, parse its output into metrics."""

from __future__ import annotations

import abc
import importlib
import logging
import os
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from framework.core.command import CommandResult, CommandRunner
from framework.core.errors import CommandError, ConfigError, MissingPrerequisite

log = logging.getLogger(__name__)


class Scale(StrEnum):
    """How much work one run does.

    ``tiny`` finishes in seconds even under an emulated (TCG) guest; ``small``
    in about a minute on real hardware; ``full`` follows the sizes of the
    published studies as far as a test disk allows.
    """

    TINY = "tiny"
    SMALL = "small"
    FULL = "full"


@dataclass(frozen=True, slots=True)
class Metric:
    """One figure a benchmark reported.

    ``value`` is None when the tool ran but could not measure the figure
    (bonnie++'s ``+++++``: the test finished too fast to time); such a
    metric must not be read as zero.
    """

    name: str
    value: float | None
    unit: str
    higher_is_better: bool


class BenchmarkError(CommandError):
    """A benchmark tool failed or printed output that cannot be parsed."""


class Benchmark(abc.ABC):
    """A benchmark run against a directory on the filesystem under test.

    Subclasses set ``name`` (unique, used in studies), ``tool`` (the binary)
    and ``package`` (the Debian package that ships it).
    """

    name: str
    tool: str
    package: str
    #: The metric bench judges by default (CI rule, ANOVA, overhead) when --metric names
    #: none; None: "total" if reported, else the first.
    primary: ClassVar[str | None] = None

    def datadir(self, workdir: str) -> str:
        """The directory inside ``workdir`` that this workload writes to."""
        return posixpath.join(os.fspath(workdir), self.name)

    @abc.abstractmethod
    def argv(self, workdir: str, *, scale: Scale) -> list[str]:
        """The command that runs the benchmark on ``workdir``."""

    @abc.abstractmethod
    def parse(self, result: CommandResult) -> list[Metric]:
        """Metrics from a finished run; raises BenchmarkError if it failed."""

    def stdin(self, workdir: str, *, scale: Scale) -> str | None:
        """Text fed to the tool's standard input (None: nothing)."""
        return None

    def prepare(self, runner: CommandRunner, workdir: str) -> None:
        """Create the data directory; the tools do not all create it themselves."""
        runner.run(["mkdir", "-p", self.datadir(workdir)], timeout_s=60.0)

    def timeout_s(self, scale: Scale) -> float:
        """Deadline for one run; generous because a TCG guest is slow."""
        return {Scale.TINY: 600.0, Scale.SMALL: 3600.0, Scale.FULL: 4 * 3600.0}[scale]

    def with_duration(self, seconds: int) -> Benchmark:
        """This workload run for ``seconds`` instead of its scale's time (``bench --duration``).

        Only a workload that runs for a time (fio's random mixes, dbench) has one to
        change; one that does a fixed amount of work refuses with a ConfigError.
        """
        raise ConfigError(f"workload {self.name!r} does a fixed amount of work, not a timed "
                          "run: --duration does not apply to it")

    # Helpers for parsers.

    def fail(self, result: CommandResult, what: str) -> BenchmarkError:
        """An error naming the tool, what is wrong and the command."""
        tail = " | ".join(
            ln.strip() for ln in (result.stderr or result.stdout).strip().splitlines()[-3:]
        )
        msg = f"{self.name}: {what} (status {result.status}): {result.command}"
        if tail:
            msg += f" -- {tail}"
        return BenchmarkError(msg, result)

    def require_success(self, result: CommandResult) -> None:
        if result.status == 127:  # a shell's or env's "command not found"
            if "error while loading shared libraries" in (result.stderr or ""):
                # ld.so exits 127 too: the tool is there but would not start, as fio (with
                # its Ceph libraries) does not in a guest of 160 MiB.
                raise self.fail(result, f"{self.tool} could not load its shared libraries "
                                "(a guest with too little memory for them? --memory-mib)")
            raise MissingPrerequisite(
                f"{self.tool}: not found; install the Debian package {self.package}"
            )
        if result.status != 0:
            raise self.fail(result, f"{self.tool} failed")
        if not result.stdout.strip():
            raise self.fail(result, f"{self.tool} printed nothing")


def run_workload(
    runner: CommandRunner, workload: Benchmark, workdir: str, *, scale: Scale
) -> list[Metric]:
    """Prepare, run and parse one benchmark run; the caller owns mkfs and mount."""
    workdir = os.fspath(workdir)
    try:
        workload.prepare(runner, workdir)
        result = runner.run(
            workload.argv(workdir, scale=scale),
            timeout_s=workload.timeout_s(scale),
            ok_status=None,  # the parser names the tool in its error
            input=workload.stdin(workdir, scale=scale),
        )
    except MissingPrerequisite as exc:
        raise MissingPrerequisite(
            f"{workload.tool}: not found; install the Debian package {workload.package}"
        ) from exc
    metrics = workload.parse(result)
    log.debug("%s at %s scale: %d metrics in %.1f s", workload.name, scale,
              len(metrics), result.duration_s)
    return metrics


# The registry: names used in studies -> factories of default-configured workloads.

_FACTORIES: dict[str, Callable[[], Benchmark]] = {}
_BUILTIN_MODULES = ("bonnie", "postmark", "dbench", "fio", "fsmark", "mongo")


def register(name: str, factory: Callable[[], Benchmark]) -> None:
    if name in _FACTORIES:
        raise ValueError(f"workload {name!r} is registered twice")
    _FACTORIES[name] = factory


def _load_builtins() -> None:
    for module in _BUILTIN_MODULES:
        importlib.import_module(f"framework.bench.workloads.{module}")


def list_workloads() -> list[str]:
    _load_builtins()
    return sorted(_FACTORIES)


def get_workload(name: str, *, duration_s: int | None = None) -> Benchmark:
    """A fresh workload with its default settings, by study name; with ``duration_s``, run
    for that many seconds a repetition (``with_duration``, which a fixed-work one refuses)."""
    _load_builtins()
    try:
        factory = _FACTORIES[name]
    except KeyError:
        known = ", ".join(sorted(_FACTORIES))
        raise ConfigError(f"unknown workload {name!r}; known: {known}") from None
    workload = factory()
    return workload if duration_s is None else workload.with_duration(duration_s)

