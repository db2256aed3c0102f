"""The agent: framing, dispatch, errors crossing back to the host."""

from __future__ import annotations

import io
import json

import pytest

from framework.core import agent
from framework.core.errors import ConfigError, DeviceMapperError
from framework.core.machine.fake import FakeMachine


def test_serve_frames_results_and_errors():
    out = io.StringIO()
    assert agent.serve({"task": "echo", "payload": {"a": [1, "x"]}}, out) == 0
    assert list(agent.parse_frames("noise\n" + out.getvalue())) == [{"result": {"a": [1, "x"]}}]
    out = io.StringIO()
    assert agent.serve({"task": "nope"}, out) == 1
    assert json.loads(out.getvalue().removeprefix(agent.FRAME))["type"] == "ConfigError"


def test_call_raises_the_agents_error_type():
    fake = FakeMachine()
    fake.on("* -m framework.core.agent", status=1,
            stdout=agent.frame({"error": "dm device busy", "type": "DeviceMapperError"}) + "\n")
    with pytest.raises(DeviceMapperError, match="dm device busy"):
        agent.call(fake, {"task": "x"})
    assert json.loads(fake.inputs[0]) == {"task": "x"}


def test_call_returns_results_and_reports_a_dead_agent():
    fake = FakeMachine()
    fake.on("* -m framework.core.agent", stdout=agent.frame({"result": 1}) + "\nlog line\n"
            + agent.frame({"result": 2}) + "\n")
    assert agent.call(fake, {"task": "x"}) == [1, 2]
    fake.on("* -m framework.core.agent", status=137, stderr="Killed")
    with pytest.raises(agent.AgentError, match="status 137.*Killed"):
        agent.call(fake, {"task": "x"})


def test_unknown_task_is_config_error():
    with pytest.raises(ConfigError):
        agent._handler("no-such-task")
