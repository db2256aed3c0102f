"""Machines: where a Linux kernel with device-mapper runs powercut's work.

Every machine speaks one small command protocol,
``run(argv, *, timeout_s, ok_status) -> CommandResult``: the local
runner (a host that has device-mapper), the console runner (a qemu guest
driven over its serial console) and a fake for unit tests.
"""

from framework.core.machine.base import Machine
from framework.core.machine.fake import FakeMachine
from framework.core.machine.local import LocalMachine

__all__ = ["FakeMachine", "LocalMachine", "Machine"]
