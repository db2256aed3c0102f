"""Agent tasks of a crash run, performed inside the machine.

``crash-record``: dm-log-writes over the data disk, mkfs through it, mark
``mkfs``, mount, run the workload (marking after every durability op with
the in-process ioctl), unmount, remove the target. The oracle goes to the
shared run directory.

``crash-check``: replay the log onto the replay disk, advancing only
forward; for each state take a throwaway dm-snapshot of the replayed disk,
apply the variant's extra writes to the snapshot, check it, drop it. Each
result is appended to a JSON-lines file in the run directory as soon as it
is known, so the host keeps what was checked even if the guest hangs.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from crashcases.check import CheckResult, Timeouts, check_state
from crashcases.operations import Workload, execute
from crashcases.oracle import OracleLog
from crashcases.outcomes import Outcome
from crashcases.persistence import for_target
from devicemapper.logformat import LogReader
from devicemapper.logwrites import recording
from devicemapper.replay import Replayer, apply_entries
from devicemapper.snapshot import SnapshotSlot
from framework.core import agent, clock
from framework.core.agent import Emit
from framework.core.command import HostRunner
from recovery.mount import mkfs, mounted
from recovery.targets import get_target

log = logging.getLogger(__name__)

RECORD_MOUNTPOINT = Path("/tmp/powercut/record")
CHECK_MOUNTPOINT = Path("/tmp/powercut/check")


@agent.task("crash-record")
def record(task: dict[str, Any], emit: Emit) -> None:
    runner = HostRunner()
    target = get_target(task["target"])
    workload = Workload.from_json(task["workload"])
    start = clock.monotonic()
    with recording(runner, task["data_dev"], task["log_dev"]) as lw:
        mkfs(runner, target, lw.path)
        lw.mark_fast("mkfs")
        RECORD_MOUNTPOINT.mkdir(parents=True, exist_ok=True)
        with mounted(runner, target, lw.path, os.fspath(RECORD_MOUNTPOINT), timeout_s=120):
            oracle = execute(workload, RECORD_MOUNTPOINT, lw.mark_fast)
        status = lw.status()
    Path(task["oracle_path"]).write_text(oracle.to_json())
    emit({"result": {"entries": status.entries, "log_bytes": status.next_sector * 512,
                     "marks": len(oracle.marks), "record_s": clock.monotonic() - start}})


@agent.task("crash-check")
def check(task: dict[str, Any], emit: Emit) -> None:
    runner = HostRunner()
    target = get_target(task["target"])
    oracle = OracleLog.from_json(Path(task["oracle_path"]).read_text())
    rules = for_target(target)
    timeouts = Timeouts(**task.get("timeouts", {}))
    results_path = Path(task["results_path"])
    with Replayer(task["log_dev"], task["replay_dev"], discard=task.get("discard", True)) as rep, \
            LogReader(task["log_dev"]) as reader, open(results_path, "a") as out, \
            SnapshotSlot(runner, task["replay_dev"], task["cow_dev"]) as slot:
        index = list(reader)  # headers only: payloads stay on the log disk
        for state in task["states"]:
            if state["key"] == task.get("inject_hang"):
                # Fault injection for testing the host's hang handling: block
                # the way a mount stuck in the kernel would.
                runner.run(["sleep", "86400"], timeout_s=90000)
            base = int(state["base"])
            if base >= 0 and base >= rep.position:
                rep.replay_to(base)
            with slot.fresh() as snap:
                if state["extra"]:
                    fd = os.open(snap.path, os.O_RDWR | os.O_CLOEXEC)
                    try:
                        torn = {int(k): range(*v) for k, v in state["torn"].items()}
                        apply_entries([index[i] for i in state["extra"]], reader, fd, torn=torn)
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                result = check_state(runner, target, snap.path, CHECK_MOUNTPOINT, oracle=oracle,
                                     last_mark=state["last_mark"], rules=rules, key=state["key"],
                                     timeouts=timeouts)
            line = json.dumps(result.to_dict(), sort_keys=True)
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())
            emit({"result": result.to_dict()})
            if result.outcome is Outcome.HANG:
                # Something in the kernel is stuck; nothing more here is trustworthy.
                emit({"result": {"abandoned": True}})
                return
        emit({"result": {"replay_written_bytes": rep.bytes_written,
                         "replay_discarded_bytes": rep.bytes_discarded,
                         "entries_applied": rep.entries_applied}})


def parse_results(path: Path) -> list[CheckResult]:
    """Results a (possibly killed) crash-check task managed to write."""
    out: list[CheckResult] = []
    try:
        text = path.read_text()
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        try:
            out.append(CheckResult.from_dict(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            break  # a torn last line: the guest died while writing it
    return out
