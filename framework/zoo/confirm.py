"""A detection confirmed: the failing sequence alone, on the zoo kernel and on the fixed one.

The recall's false-alarm count comes from the fixed kernel's own workload steps, which a
budget may end before they reach the sequence that failed on a zoo kernel. So each
detection is also checked directly: the operations of the first new finding's
representative state that touch the directories its findings name, plus every ``sync``
(shrink's cheap cut: the packed sequence alone, without its neighbours; for a failure
that names no path, the ops of the directory its mark's durability op is in, up to it), are
written as a workload file and run with ``powercut crash --case file:PATH`` on the zoo kernel and on
the fixed one. Confirmed means the zoo kernel fails it and the fixed kernel does not; a
fixed kernel that fails it is a false alarm.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crashcases.crash.plan import load_checked
from crashcases.execute import mark_name
from crashcases.findings.shrink import cheap_cut, load_failure
from crashcases.workload.ops import DURABILITY_OPS, Op, OpKind, Workload
from framework.core.rundir import write_json_atomic
from framework.zoo.kernels import Kernel

if TYPE_CHECKING:
    from framework.zoo.recall import Step

#: A confirmation run is small (one sequence); this bounds a kernel that hangs on it.
CONFIRM_TIMEOUT_S = 900.0


def cut_workload(run_dir: Path, key: str) -> Workload:
    """The failing state's own sequence: shrink's cheap cut of its run's workload, or, for
    a failure that names no path (a mount that failed, fsck errors), the directory of the
    durability op the state follows, up to that op."""
    failure = load_failure(run_dir, key)
    ops = failure.workload.ops
    kept = cheap_cut(ops, failure.signature)
    if kept is None:
        kept = mark_cut(ops, load_checked(run_dir, key)[1].get("last_mark"))
    chosen = ops if kept is None else tuple(ops[i] for i in kept)
    return Workload(name=f"{failure.workload.name}, cut for state {key}",
                    seed=failure.workload.seed, ops=chosen)


def mark_cut(ops: Sequence[Op], mark: str | None) -> tuple[int, ...] | None:
    """Indices of the ops in the top-level directory of mark ``mark``'s durability op, up
    to that op, plus every ``sync`` before it; None when that op names no directory (a
    ``sync``) or the cut would keep every op."""
    durable = [i for i, op in enumerate(ops) if op.kind in DURABILITY_OPS]
    at = next((i for n, i in enumerate(durable) if mark_name(n) == mark), None)
    if at is None or not ops[at].path:
        return None
    top = ops[at].path.split("/")[0]

    def inside(path: str) -> bool:
        return bool(path) and path.split("/")[0] == top

    kept = tuple(i for i, op in enumerate(ops[:at + 1])
                 if op.kind is OpKind.SYNC or inside(op.path) or inside(op.dst))
    return kept if len(kept) < len(ops) else None


def write_cut(run_dir: Path, key: str, work: Path) -> tuple[Workload, Path]:
    """State ``key``'s cut (``cut_workload``), written as ``work``/workload.json."""
    work.mkdir(parents=True, exist_ok=True)
    workload = cut_workload(run_dir, key)
    path = work / "workload.json"
    write_json_atomic(path, json.loads(workload.to_json()))
    return workload, path


def run_alone(path: Path, target: str, kernel: Kernel, results: Path, seed: int,
              say: Callable[[str], None], options: Sequence[str] = ()) -> Step:
    """One ``powercut crash --case file:PATH`` run of a cut on ``kernel``, into ``results``."""
    from framework.zoo.recall import Step, _crash_argv, _run_step  # recall imports this module

    results.mkdir(parents=True, exist_ok=True)
    step = Step(kernel.name, target, f"file:{path}",
                _crash_argv(kernel, target, f"file:{path}", options, seed, results,
                            results / "confirm.sqlite"))
    _run_step(step, results, CONFIRM_TIMEOUT_S, say)
    return step


def confirm(run_dir: Path, key: str, target: str, kernel: Kernel, fixed: Kernel,
            work: Path, seed: int, say: Callable[[str], None]) -> dict[str, Any]:
    """Run state ``key``'s sequence of ``run_dir`` on ``kernel`` and on ``fixed``."""
    workload, path = write_cut(run_dir, key, work)
    runs = {}
    for k in (kernel, fixed):
        step = run_alone(path, target, k, work / k.name, seed, say)
        say(f"zoo: confirm {key} on {k.name}: {step.states} states, {step.failing} failing, "
            f"{step.known} known")
        runs[k.name] = step.to_dict()
    zoo, base = runs[kernel.name], runs[fixed.name]
    return {"state": key, "run_dir": str(run_dir), "workload": str(path),
            "ops": len(workload.ops), "zoo": zoo, "fixed": base,
            "confirmed": zoo["failing"] > 0 and base["failing"] == 0 and base["states"] > 0,
            "false_alarm": base["failing"] > 0}
