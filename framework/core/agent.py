"""The in-machine agent: ``python -m framework.core.agent`` performs one task.

The host sends a task as JSON on stdin (``{"task": NAME, ...}``); the agent
runs it with local subprocesses and writes results to stdout as framed
JSON lines, one per result, so the host can stream and parse them:

    @@powercut {"result": ...}
    @@powercut {"error": "one-line message", "type": "DeviceMapperError"}

Bulky artifacts (logs, images) go to the shared run directory instead.
Task handlers register themselves with ``@task(NAME)``; the modules that
define them are imported lazily by name (``TASK_MODULES``).
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from framework.core import errors
from framework.core.command import CommandResult

FRAME = "@@powercut "
log = logging.getLogger(__name__)

Emit = Callable[[dict[str, Any]], None]
Handler = Callable[[dict[str, Any], Emit], None]

_HANDLERS: dict[str, Handler] = {}

# Modules that define agent tasks, imported on demand by task name prefix.
TASK_MODULES: dict[str, str] = {
    "env": "framework.core.agent",
    "echo": "framework.core.agent",
    "bench-rep": "framework.bench.task",
    "crash-record": "crashcases.tasks",
    "crash-check": "crashcases.tasks",
    "cut-oracle": "crashcases.cut",
    "cut-trial": "crashcases.cut",
}


def task(name: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        _HANDLERS[name] = fn
        return fn

    return register


def register_module(task_name: str, module: str) -> None:
    TASK_MODULES[task_name] = module


def frame(obj: dict[str, Any]) -> str:
    return FRAME + json.dumps(obj, separators=(",", ":"), sort_keys=True)


def parse_frames(text: str) -> Iterator[dict[str, Any]]:
    """Yield the framed objects in agent output; other lines are ignored."""
    for line in text.splitlines():
        if line.startswith(FRAME):
            yield json.loads(line[len(FRAME):])


def _handler(name: str, module: str | None = None) -> Handler:
    if name not in _HANDLERS and (module or name in TASK_MODULES):
        importlib.import_module(module or TASK_MODULES[name])
    try:
        return _HANDLERS[name]
    except KeyError:
        raise errors.ConfigError(f"agent: unknown task {name!r}") from None


def serve(task_obj: dict[str, Any], out: Any = None) -> int:
    stream = out or sys.stdout

    def emit(obj: dict[str, Any]) -> None:
        stream.write(frame(obj) + "\n")
        stream.flush()

    try:
        name = task_obj.get("task")
        if not isinstance(name, str):
            raise errors.ConfigError("agent: the task has no 'task' name")
        module = task_obj.get("module")
        _handler(name, module if isinstance(module, str) else None)(task_obj, emit)
    except errors.PowercutError as exc:
        emit({"error": str(exc), "type": type(exc).__name__})
        return 1
    except Exception as exc:  # the harness broke: keep the traceback for the log
        emit({"error": f"{type(exc).__name__}: {exc}", "type": "InternalError",
              "traceback": traceback.format_exc()})
        return 3
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="agent %(levelname)s %(name)s: %(message)s")
    raw = sys.stdin.read()
    try:
        task_obj = json.loads(raw)
    except ValueError as exc:
        print(frame({"error": f"agent: task is not valid JSON: {exc}", "type": "ConfigError"}))
        return 1
    return serve(task_obj)


# --- host side ---------------------------------------------------------------


class AgentError(errors.PowercutError):
    """The agent reported an error while performing a task."""


def call(machine: Any, task_obj: dict[str, Any], *, timeout_s: float = 600.0,
         watch: Callable[[], str | None] | None = None) -> list[dict[str, Any]]:
    """Run one task in ``machine`` and return its results; raise on an agent error.

    ``watch`` (machines that support it) is asked about once a second whether
    the task is stuck, so a hang is noticed before the whole deadline."""
    extra = {"watch": watch} if watch is not None else {}
    result: CommandResult = machine.run(
        [*machine.python_argv(), "-m", "framework.core.agent"],
        input=json.dumps(task_obj),
        timeout_s=timeout_s,
        ok_status=None,
        **extra,
    )
    frames = list(parse_frames(result.stdout))
    for f in frames:
        if "error" in f:
            kind = getattr(errors, str(f.get("type")), None)
            exc_type = kind if isinstance(kind, type) and issubclass(kind, errors.PowercutError) else AgentError
            if f.get("traceback"):
                log.error("agent traceback:\n%s", f["traceback"])
            raise exc_type(str(f["error"]))
    if result.status != 0:
        tail = " | ".join(result.stderr.strip().splitlines()[-5:])
        raise AgentError(f"agent exited with status {result.status} for task {task_obj.get('task')!r}: {tail}")
    return [f["result"] for f in frames if "result" in f]


# --- built-in tasks ----------------------------------------------------------


@task("echo")
def _echo(t: dict[str, Any], emit: Emit) -> None:
    """Send the payload back (round-trip check)."""
    emit({"result": t.get("payload")})


@task("env")
def _env(t: dict[str, Any], emit: Emit) -> None:
    """Facts about the machine the agent runs in."""
    import os
    import platform

    targets = ""
    try:
        from framework.core.command import run

        targets = run(["dmsetup", "targets"], timeout_s=30, env={"DM_DISABLE_UDEV": "1"}).stdout
    except errors.PowercutError as exc:
        targets = f"error: {exc}"
    with open("/proc/filesystems") as f:
        filesystems = sorted({ln.split()[-1] for ln in f if ln.strip()})
    emit({"result": {
        "kernel": platform.release(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "dm_targets": sorted(ln.split()[0] for ln in targets.splitlines() if ln.strip()
                             and not ln.startswith("error")),
        "filesystems": filesystems,
    }})


if __name__ == "__main__":
    # Run through the imported module so that task modules, which import
    # framework.core.agent, register into the same table main() reads.
    from framework.core import agent as _agent

    sys.exit(_agent.main())
