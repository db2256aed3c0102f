"""The mongo-like phase workload: runs ``framework.bench.workloads.phases`` in the machine."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from framework.bench.workloads.base import Benchmark, Metric, Scale, register
from framework.bench.workloads.phases import PHASES
from framework.core.command import CommandResult

# The 1000-byte case of Dell'Omodarme (2001) had 11,616 files; the
# 100-byte case 68,952.
_FILES = {Scale.TINY: 1000, Scale.SMALL: 11_616, Scale.FULL: 68_952}


@dataclass(frozen=True, slots=True)
class MongoWorkload(Benchmark):
    """Seconds per phase (create, copy, symlink, read, stat, rename, delete).

    ``python`` is the interpreter inside the machine; the bench runner
    passes ``machine.python_argv()``.
    """

    python: tuple[str, ...] = (sys.executable,)
    size_bytes: int = 1000
    seed: int = 1
    drop_caches: bool = True
    name: str = "mongo"
    tool: str = "python3"
    package: str = "python3"

    def argv(self, workdir: str, *, scale: Scale) -> list[str]:
        argv = [
            *self.python, "-m", "framework.bench.workloads.phases", self.datadir(workdir),
            "--files", str(_FILES[scale]), "--seed", str(self.seed),
            "--size-bytes", str(self.size_bytes),
        ]
        if self.drop_caches:
            argv.append("--drop-caches")
        return argv

    def parse(self, result: CommandResult) -> list[Metric]:
        self.require_success(result)
        lines = [ln for ln in result.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            raise self.fail(result, "no JSON report line in the output")
        try:
            report = json.loads(lines[-1])
            phases = report["phases"]
            metrics = [Metric(p, float(phases[p]), "s", False) for p in PHASES]
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise self.fail(result, f"malformed report line ({exc})") from None
        metrics.append(Metric("total", sum(m.value or 0.0 for m in metrics), "s", False))
        return metrics


register("mongo", MongoWorkload)
