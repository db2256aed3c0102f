"""The agent protocol: framing, dispatch, typed requests and results, errors crossing back."""

from __future__ import annotations

import importlib
import io
import json
import pkgutil
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from devicemapper.logwrites import LogFullError
from framework.core import agent, errors
from framework.core.errors import ConfigError, DeviceMapperError, PowercutError
from framework.core.machine.fake import FakeMachine


@dataclass(frozen=True, slots=True)
class Count:
    n: int

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Count:
        return cls(int(raw["n"]))


def _fill_log(req: Count) -> Count:
    raise LogFullError(f"log device full after {req.n} entries")


def _crash(req: Count) -> Count:
    return Count(1 // req.n)


TASKS = agent.table(agent.ECHO, agent.Task("fill", Count, Count, _fill_log),
                    agent.Task("crash", Count, Count, _crash))


def guest(fake: FakeMachine, tasks: Mapping[str, agent.Task[Any, Any]] = TASKS) -> FakeMachine:
    """A fake machine whose guest program serves ``tasks`` in this process."""

    def respond(_argv: tuple[str, ...], stdin: str | None) -> tuple[int, str, str]:
        out = io.StringIO()
        status = agent.serve(tasks, json.loads(stdin or "{}"), out)
        return status, "console noise\n" + out.getvalue(), ""

    return fake.on(f"* -m {agent.GUEST_MODULE}", respond=respond)


def test_serve_frames_results_and_errors() -> None:
    out = io.StringIO()
    assert agent.serve(TASKS, {"task": "echo", "payload": {"a": [1, "x"]}}, out) == 0
    assert list(agent.parse_frames("noise\n" + out.getvalue())) == [
        {"result": {"payload": {"a": [1, "x"]}}}]
    for bad, why in (({"task": "nope"}, "unknown task 'nope' .*known: crash, echo, fill"),
                     ({"task": "fill"}, "malformed 'fill' request"),
                     ({"payload": 1}, "no 'task' name")):
        out = io.StringIO()
        assert agent.serve(TASKS, bad, out) == 1
        (f,) = agent.parse_frames(out.getvalue())
        assert f["type"] == errors.kind_name(ConfigError)
        assert re.search(why, f["error"])


def test_perform_sends_a_typed_request_and_returns_a_typed_result() -> None:
    fake = guest(FakeMachine())
    assert agent.perform(fake, agent.ECHO, agent.Echo({"a": [1, "x"]})) == agent.Echo({"a": [1, "x"]})
    assert json.loads(fake.inputs[0] or "") == {"task": "echo", "payload": {"a": [1, "x"]}}
    assert fake.calls[0][-2:] == ("-m", "framework.cli.guest")


def test_a_guest_error_is_raised_on_the_host_with_its_own_type() -> None:
    with pytest.raises(LogFullError, match="log device full after 7 entries"):
        agent.perform(guest(FakeMachine()), TASKS["fill"], Count(7))


def test_a_harness_bug_in_the_guest_is_an_agent_error_with_its_message() -> None:
    with pytest.raises(agent.AgentError, match="ZeroDivisionError"):
        agent.perform(guest(FakeMachine()), TASKS["crash"], Count(0))


def test_call_raises_the_agents_error_type() -> None:
    fake = FakeMachine()
    fake.on("* -m framework.cli.guest", status=1, stdout=agent.frame(
        {"error": "dm device busy", "type": errors.kind_name(DeviceMapperError)}) + "\n")
    with pytest.raises(DeviceMapperError, match="dm device busy"):
        agent.call(fake, {"task": "x"})
    assert json.loads(fake.inputs[0] or "") == {"task": "x"}
    fake.on("* -m framework.cli.guest", status=1, stdout=agent.frame(
        {"error": "who knows", "type": "nowhere.SomeError"}) + "\n")
    with pytest.raises(agent.AgentError, match="who knows"):
        agent.call(fake, {"task": "x"})


def test_call_returns_results_and_reports_a_dead_agent() -> None:
    fake = FakeMachine()
    fake.on("* -m framework.cli.guest", stdout=agent.frame({"result": 1}) + "\nlog line\n"
            + agent.frame({"result": 2}) + "\n")
    assert agent.call(fake, {"task": "x"}) == [1, 2]
    with pytest.raises(agent.AgentError, match="returned 2 results, expected 1"):
        agent.perform(fake, agent.ECHO, agent.Echo())
    fake.on("* -m framework.cli.guest", status=137, stderr="Killed")
    with pytest.raises(agent.AgentError, match="status 137.*Killed"):
        agent.call(fake, {"task": "x"})


def test_call_runs_the_guest_program_it_is_told() -> None:
    fake = FakeMachine()
    fake.on("* -m bench.crash --agent", stdout=agent.frame({"result": {"payload": 3}}) + "\n")
    assert agent.perform(fake, agent.ECHO, agent.Echo(3), module="bench.crash",
                         args=("--agent",)) == agent.Echo(3)


def test_a_task_named_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="'echo' is defined twice"):
        agent.table(agent.ECHO, agent.Task("echo", Count, Count, _crash))


# --- every error type can cross from guest to host ----------------------------------


def _import_project() -> None:
    for root in ("framework", "crashcases", "recovery", "devicemapper"):
        package = importlib.import_module(root)
        for info in pkgutil.walk_packages(package.__path__, root + "."):
            if not info.name.endswith(".__main__"):  # runs the command line
                importlib.import_module(info.name)


def _subclasses(cls: type[PowercutError]) -> set[type[PowercutError]]:
    out = set(cls.__subclasses__())
    for sub in list(out):
        out |= _subclasses(sub)
    return out


def test_every_error_class_in_the_project_is_found_by_its_name() -> None:
    _import_project()
    kinds = {c for c in _subclasses(PowercutError)
             if c.__module__.split(".")[0] in ("framework", "crashcases", "recovery", "devicemapper")}
    # Positive controls: the walk found errors of every layer, and the two
    # Errors of the same short name in two modules would stay apart too.
    names = {errors.kind_name(c) for c in kinds}
    assert {"devicemapper.logwrites.LogFullError", "crashcases.workload.ops.WorkloadError",
            "framework.bench.workloads.base.BenchmarkError", "framework.core.agent.AgentError",
            "framework.core.store.database.StoreError"} <= names
    for cls in kinds | {PowercutError}:
        assert errors.error_kind(errors.kind_name(cls)) is cls, cls


def test_a_packed_error_is_revived_as_the_same_kind_with_the_same_message() -> None:
    packed = errors.pack(errors.DeviceBusy("pc-snap-2: still open"))
    assert packed == {"error": "pc-snap-2: still open", "type": errors.kind_name(errors.DeviceBusy)}
    again = errors.revive(packed["type"], packed["error"], agent.AgentError)
    assert type(again) is errors.DeviceBusy and str(again) == "pc-snap-2: still open"


def test_an_error_is_revived_as_its_kind_or_else_as_the_default() -> None:
    class NeedsMore(PowercutError):
        def __init__(self, message: str, where: str) -> None:
            super().__init__(f"{message} at {where}")

    busy = errors.revive(errors.kind_name(errors.DeviceBusy), "pc-snap-2: still open", agent.AgentError)
    assert type(busy) is errors.DeviceBusy and str(busy) == "pc-snap-2: still open"
    # Unknown here, no type at all, or a constructor that wants more: the default.
    for name in ("nowhere.NoSuchError", None, errors.kind_name(NeedsMore)):
        revived = errors.revive(name, "it broke", agent.AgentError)
        assert type(revived) is agent.AgentError and str(revived) == "it broke", name
