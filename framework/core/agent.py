"""The agent protocol: the host has a machine perform one task and reads back its result.

The host starts a *guest program* in the machine (``python -m MODULE``)
and sends it the request as JSON on stdin (``{"task": NAME, ...}``); the
program performs the task with local subprocesses and writes what it has
to say to stdout as framed JSON lines, so that console noise around them
cannot be mistaken for a result:

    @@powercut {"result": {...}}
    @@powercut {"error": "one-line message", "type": "devicemapper.logwrites.LogFullError"}

Bulky artifacts (logs, images) go to the shared run directory instead.

A task is a ``Task``: its name, the frozen dataclasses of its request and
result, and the function that performs it. The guest program is the
application's (powercut's is ``framework.cli.guest``): it imports the
tasks it offers and hands them to ``main``. This module names no task of
the domain; it only starts the program, as a shell starts a binary.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, Self, TextIO, TypeVar

from framework.core import errors, rundir
from framework.core.command import CommandResult
from framework.core.errors import PowercutError

FRAME = "@@powercut "
#: The guest program ``call`` starts unless told another: the application's
#: entry point, which holds the task table. Started by name, never imported here.
GUEST_MODULE = "framework.cli.guest"
#: Guest programs that import only the standard library and the checkout. A machine that
#: runs them from the checkout (``runs_from_checkout``) starts them with ``python -S``: no
#: site-packages scan and no editable-install finder, about a second of every start under
#: an emulated CPU. tests/unit/test_guest.py imports each of them that way.
SITE_FREE_PROGRAMS = frozenset({GUEST_MODULE, "framework.cli.sweepguest"})

log = logging.getLogger(__name__)


class Message(Protocol):
    """A request or a result: a frozen dataclass that converts to and from JSON-ready data."""

    def to_dict(self) -> dict[str, Any]: ...

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Self: ...


Req = TypeVar("Req", bound=Message)
Res = TypeVar("Res", bound=Message)


@dataclass(frozen=True, slots=True)
class Task(Generic[Req, Res]):
    """One kind of work a guest performs: its name, payload types and the function doing it."""

    name: str
    request: type[Req]
    result: type[Res]
    perform: Callable[[Req], Res]

    def encode(self, request: Req) -> dict[str, Any]:
        return {"task": self.name, **request.to_dict()}


class LazyTasks(Mapping[str, "Task[Any, Any]"]):
    """A guest program's tasks by name, each either a Task or where one is defined
    ("package.module:NAME"): a module is imported when a request names one of its tasks,
    so a start pays only for the task it performs (every module's top level runs under
    the guest's CPU, often emulated). ``check()`` imports them all, for unit tests."""

    def __init__(self, tasks: Mapping[str, Task[Any, Any] | str]) -> None:
        self._where = dict(tasks)

    def __getitem__(self, name: str) -> Task[Any, Any]:
        where = self._where[name]
        if isinstance(where, str):
            module, _, attr = where.partition(":")
            task = getattr(importlib.import_module(module), attr)
            if not isinstance(task, Task) or task.name != name:
                raise errors.ConfigError(f"agent: {where} is not the task {name!r}")
            self._where[name] = where = task
        return where

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def check(self) -> dict[str, Task[Any, Any]]:
        return {name: self[name] for name in self}


def table(*tasks: Task[Any, Any]) -> dict[str, Task[Any, Any]]:
    """The tasks by name; a name given twice is an error when the guest program is imported."""
    out: dict[str, Task[Any, Any]] = {}
    for t in tasks:
        if t.name in out:
            raise errors.ConfigError(f"agent: task {t.name!r} is defined twice")
        out[t.name] = t
    return out


def frame(obj: dict[str, Any]) -> str:
    return FRAME + json.dumps(obj, separators=(",", ":"), sort_keys=True)


def parse_frames(text: str) -> Iterator[dict[str, Any]]:
    """Yield the framed objects in agent output; other lines are ignored."""
    for line in text.splitlines():
        if line.startswith(FRAME):
            yield json.loads(line[len(FRAME):])


# --- guest side --------------------------------------------------------------


def _decode(task: Task[Req, Any], raw: Mapping[str, Any]) -> Req:
    fields = {k: v for k, v in raw.items() if k != "task"}
    try:
        return task.request.from_dict(fields)
    except (KeyError, TypeError, ValueError) as exc:
        raise errors.ConfigError(f"agent: malformed {task.name!r} request ({exc!r})") from exc


def serve(tasks: Mapping[str, Task[Any, Any]], raw: Mapping[str, Any], out: TextIO | None = None) -> int:
    """Perform the task ``raw`` asks for; write its result or error as a frame; return the exit status."""
    stream = out or sys.stdout

    def emit(obj: dict[str, Any]) -> None:
        stream.write(frame(obj) + "\n")
        stream.flush()

    try:
        name = raw.get("task")
        if not isinstance(name, str):
            raise errors.ConfigError("agent: the request has no 'task' name")
        task = tasks.get(name)
        if task is None:
            raise errors.ConfigError(f"agent: unknown task {name!r} (known: {', '.join(sorted(tasks))})")
        emit({"result": task.perform(_decode(task, raw)).to_dict()})
    except errors.PowercutError as exc:
        emit(errors.pack(exc))
        return 1
    except Exception as exc:  # the harness broke: keep the traceback for the log
        emit({"error": f"{type(exc).__name__}: {exc}", "type": "InternalError",
              "traceback": traceback.format_exc()})
        return 3
    return 0


def main(tasks: Mapping[str, Task[Any, Any]]) -> int:
    """The guest program's body: read one request from stdin and serve it."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="agent %(levelname)s %(name)s: %(message)s")
    try:
        raw = json.loads(sys.stdin.read())
        if not isinstance(raw, dict):
            raise ValueError(f"expected an object, got {type(raw).__name__}")
    except ValueError as exc:
        bad = errors.ConfigError(f"agent: the request is not a JSON object: {exc}")
        print(frame(errors.pack(bad)))
        return 1
    return serve(tasks, raw)


# --- host side ---------------------------------------------------------------


class AgentError(errors.PowercutError):
    """The agent reported an error while performing a task."""


def _raise_error(f: Mapping[str, Any]) -> None:
    if f.get("traceback"):
        log.error("agent traceback:\n%s", f["traceback"])
    raise errors.revive(f.get("type"), str(f["error"]), AgentError)


def call(machine: Any, request: Mapping[str, Any], *, module: str = GUEST_MODULE,
         args: Sequence[str] = (), timeout_s: float = 600.0,
         watch: Callable[[], str | None] | None = None) -> list[dict[str, Any]]:
    """Send ``request`` (JSON-ready) to ``python -m module [args]`` in ``machine``; return its results.

    An error the guest reports is raised here with the guest's error type
    when that type is known here, else as AgentError. ``watch`` (machines
    that support it) is asked about once a second whether the task is stuck,
    so a hang is noticed before the whole deadline."""
    extra = {"watch": watch} if watch is not None else {}
    lean = module in SITE_FREE_PROGRAMS and getattr(machine, "runs_from_checkout", False)
    result: CommandResult = machine.run(
        [*machine.python_argv(), *(["-S"] if lean else []), "-m", module, *args],
        input=json.dumps(request),
        timeout_s=timeout_s,
        ok_status=None,
        **extra,
    )
    frames = list(parse_frames(result.stdout))
    for f in frames:
        if "error" in f:
            _raise_error(f)
    if result.status != 0:
        tail = " | ".join(result.stderr.strip().splitlines()[-5:])
        raise AgentError(f"agent exited with status {result.status} for task "
                         f"{request.get('task')!r}: {tail}")
    return [f["result"] for f in frames if "result" in f]


def perform(machine: Any, task: Task[Req, Res], request: Req, *, module: str = GUEST_MODULE,
            args: Sequence[str] = (), timeout_s: float = 600.0,
            watch: Callable[[], str | None] | None = None) -> Res:
    """Have ``machine`` perform ``task`` on ``request``; its one result, typed.

    When the task fails and the filesystem of the guest's run directory (its disks, its
    exchange files) is full, that is what is raised: ENOSPC naming the directory."""
    try:
        results = call(machine, task.encode(request), module=module, args=args,
                       timeout_s=timeout_s, watch=watch)
    except PowercutError as exc:
        rundir_ = getattr(machine, "rundir", None)
        full = rundir.space_problem(rundir_) if rundir_ is not None else None
        if full is not None:
            raise full from exc
        raise
    if len(results) != 1:
        raise AgentError(f"task {task.name!r} returned {len(results)} results, expected 1")
    try:
        return task.result.from_dict(results[0])
    except (KeyError, TypeError, ValueError) as exc:
        raise AgentError(f"task {task.name!r} returned a malformed result ({exc!r})") from exc


# --- a task every guest program offers ------------------------------------------


@dataclass(frozen=True, slots=True)
class Echo:
    """A round trip through the protocol: the payload (any JSON value) comes back unchanged."""

    payload: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {"payload": self.payload}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Echo:
        return cls(raw.get("payload"))


def _echo(request: Echo) -> Echo:
    return request


ECHO: Task[Echo, Echo] = Task("echo", Echo, Echo, _echo)
