"""The guest program: ``python -m framework.cli.guest`` performs one agent task inside a machine.

The host starts it through ``framework.core.agent.call`` with the request
on stdin. Every task it offers is named here with the module that defines
it; only the module of the task a request names is imported, and the unit
test imports them all, so a task that was renamed or moved fails there,
not when a run first reaches it in a guest.

Start-up is paid once per task, in a guest that reads every module over
9p, often under an emulated CPU: this module and the task modules keep to
what the tasks need (no numpy, scipy, pandas or rich, and nothing outside
the standard library: the guest starts it with ``python -S``).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from framework.core import agent
from framework.core.command import HostRunner
from framework.core.errors import PowercutError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EnvRequest:
    """Ask for the facts about the machine; there is nothing to say."""

    def to_dict(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> EnvRequest:
        return cls()


@dataclass(frozen=True, slots=True)
class EnvFacts:
    """Facts about the machine the agent runs in."""

    kernel: str
    python: str
    cpus: int | None
    dm_targets: tuple[str, ...]  # empty when dmsetup could not say
    filesystems: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "python": self.python, "cpus": self.cpus,
                "dm_targets": list(self.dm_targets), "filesystems": list(self.filesystems)}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> EnvFacts:
        cpus = raw.get("cpus")
        return cls(str(raw["kernel"]), str(raw["python"]), None if cpus is None else int(cpus),
                   tuple(raw["dm_targets"]), tuple(raw["filesystems"]))


def environment(_req: EnvRequest) -> EnvFacts:
    from devicemapper.features import loaded_targets

    try:
        dm_targets = loaded_targets(HostRunner())
    except PowercutError as exc:
        # The doctor reports missing targets; an answer without them still
        # says which kernel and filesystems the guest has.
        log.warning("could not list device-mapper targets: %s", exc)
        dm_targets = []
    with open("/proc/filesystems") as f:
        filesystems = sorted({ln.split()[-1] for ln in f if ln.strip()})
    import platform  # only this task needs it

    return EnvFacts(kernel=platform.release(), python=platform.python_version(),
                    cpus=os.cpu_count(), dm_targets=tuple(dm_targets),
                    filesystems=tuple(filesystems))


ENV = agent.Task("env", EnvRequest, EnvFacts, environment)

TASKS = agent.LazyTasks({
    "echo": agent.ECHO,
    "env": ENV,
    "crash-record": "crashcases.crash.guest:CRASH_RECORD",
    "crash-check": "crashcases.crash.guest:CRASH_CHECK",
    "cut-oracle": "crashcases.cut.guest:CUT_ORACLE",
    "cut-trial": "crashcases.cut.guest:CUT_TRIAL",
    "bench-rep": "framework.bench.task:BENCH_REPETITION",
    "sweep-point": "crashcases.sweep.guest:SWEEP_POINT",
})


def main() -> int:
    return agent.main(TASKS)


if __name__ == "__main__":
    sys.exit(main())
