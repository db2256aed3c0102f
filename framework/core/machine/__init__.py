"""Machines: where a Linux kernel with device-mapper runs powercut's work.

Every machine speaks one small command protocol,
``run(argv, *, timeout_s, ok_status) -> CommandResult``: the local
runner (a host that has device-mapper), the console runner (a qemu guest
driven over its serial console) and a fake for unit tests.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from framework.core.machine.base import Machine
    from framework.core.machine.fake import FakeMachine
    from framework.core.machine.local import LocalMachine

__all__ = ["FakeMachine", "LocalMachine", "Machine"]

_WHERE = {"Machine": "base", "FakeMachine": "fake", "LocalMachine": "local"}


def __getattr__(name: str) -> Any:
    # Imported on first use: commands that only read a kernel's facts
    # (powercut targets, doctor) need not load the machines.
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
