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

A sequence can pass alone on both kernels where its failure needs the whole history
before it: a journal whose head has wrapped needs thousands of operations. Then the
failing state itself is rebuilt from the recorded log and checked on each kernel
(``powercut recheck``): the image is the same, so a state that fails on the zoo kernel and
passes on the fixed one fails by the zoo kernel's recovery, where the reverted fix is.
That confirms it too (``same_image``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from crashcases.crash.results import load_checked
from crashcases.execute import mark_name
from crashcases.findings.shrink import cheap_cut, load_failure
from crashcases.workload.ops import DURABILITY_OPS, Op, OpKind, Workload
from framework.core import clock
from framework.core.rundir import write_json_atomic
from framework.zoo import steps as crash_steps
from framework.zoo.commands import run_command
from framework.zoo.kernels import Kernel
from framework.zoo.steps import Step

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
        kept = mark_cut(ops, load_checked(run_dir, key)[1].last_mark)
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
    results.mkdir(parents=True, exist_ok=True)
    step = Step(kernel.name, target, f"file:{path}",
                crash_steps.crash_argv(kernel, target, f"file:{path}", options, seed, results,
                                       results / "confirm.sqlite"))
    crash_steps.run_step(step, results, CONFIRM_TIMEOUT_S, say)
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
    out = {"state": key, "run_dir": str(run_dir), "workload": str(path),
           "ops": len(workload.ops), "zoo": zoo, "fixed": base,
           "confirmed": zoo["failing"] > 0 and base["failing"] == 0 and base["states"] > 0,
           "false_alarm": base["failing"] > 0}
    if lacks_same_image(out):
        add_same_image(out, kernel, fixed, say)
    return out


def lacks_same_image(confirmation: dict[str, Any]) -> bool:
    """Whether a confirmation's sequence passed alone on both kernels and its state has not
    been rechecked on them (a confirmation made before that step existed lacks it)."""
    zoo, base = confirmation.get("zoo") or {}, confirmation.get("fixed") or {}
    return (zoo.get("failing") == 0 and base.get("failing") == 0
            and "same_image" not in confirmation)


def add_same_image(confirmation: dict[str, Any], kernel: Kernel, fixed: Kernel,
                   say: Callable[[str], None]) -> None:
    """The confirmation's state rebuilt from its run's log and checked on both kernels; it
    confirms when it fails on ``kernel`` and passes on ``fixed``."""
    run_dir, key = Path(confirmation["run_dir"]), confirmation["state"]
    same = {k.name: recheck_on(run_dir, key, k, say) for k in (kernel, fixed)}
    confirmation["same_image"] = {"zoo": same[kernel.name], "fixed": same[fixed.name]}
    confirmation["confirmed"] = same[kernel.name]["fails"] and same[fixed.name]["passes"]


def recheck_on(run_dir: Path, key: str, kernel: Kernel,
               say: Callable[[str], None]) -> dict[str, Any]:
    """State ``key`` of ``run_dir`` rebuilt from its log and checked on ``kernel``
    (``powercut recheck``): whether it fails (exit 1) or passes (exit 0); anything else (a
    harness error) is neither."""
    argv = [sys.executable, "-m", "framework.cli", "recheck", os.fspath(run_dir), key,
            "--kernel", os.fspath(kernel.image), "--modules", os.fspath(kernel.modules)]
    end = clock.monotonic() + CONFIRM_TIMEOUT_S
    code, out, _, late = run_command(argv, lambda _now: end, keep_stdout=True)
    said = (out.strip().splitlines() or [""])[0]
    if late:
        code, said = -1, f"no answer in {CONFIRM_TIMEOUT_S:.0f} s"
    say(f"zoo: recheck {key} on {kernel.name}: {said or f'exit {code}'}")
    return {"argv": argv, "exit": code, "said": said, "fails": code == 1, "passes": code == 0}
