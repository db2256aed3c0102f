"""One guest at a time for an engine: started when first needed, replaced when it cannot go on.

Crash, cut and sweep engines all drive a guest the same way: boot it on the
first task, hand it task after task, and when a task hangs, the guest stops
answering, dies or a device in it stays busy, give that guest up and boot a
fresh one for what remains. Tasks go through ``perform``: the errors that
mean "this guest cannot go on" come back as ``GuestLost``, after the guest
is already gone.

What the task in flight comes to is one policy for every engine
(``GuestPolicy``, ``DEFAULT_POLICY``): a hang (a step past its deadline, a
guest that stopped answering) is the task's finding at once. A guest that
died under the task (qemu exited: its kernel panicked, or it was killed from
outside) or was given up for a harness error (a device that stayed busy) is
a *death*: the task is tried again on a fresh guest, until its guest's
kernel has panicked twice under it (a finding, ``hang``: the task brings the
kernel down) or it has lost its guest three times (a harness error, not a
verdict on the filesystem).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from framework.core import agent
from framework.core.errors import (
    CommandTimeout,
    DeviceBusy,
    GuestDied,
    MachineError,
    PowercutError,
)
from framework.core.machine.base import Machine

log = logging.getLogger(__name__)

Req = TypeVar("Req", bound=agent.Message)
Res = TypeVar("Res", bound=agent.Message)


class GuestLost(PowercutError):
    """The guest could not finish a task and was given up; ``hung``: it hung or died (a
    finding for the task), else a harness error (the task may be tried again)."""

    def __init__(self, message: str, *, hung: bool, died: GuestDied | None = None) -> None:
        super().__init__(message)
        self.hung = hung
        #: The guest died under the task (qemu exited): killed from outside, or its
        #: kernel panicked. Then ``hung`` is False and the engine decides.
        self.died = died


class Verdict(StrEnum):
    """What a task whose guest was lost comes to (the outcome words of the same name)."""

    AGAIN = "again"  # try it again on a fresh guest
    HANG = "hang"  # a finding: the task hangs, or brings the guest's kernel down
    ERROR = "error"  # a harness error: the guest was lost too often for other reasons


@dataclass(frozen=True, slots=True)
class GuestPolicy:
    """The limits of the module docstring's policy."""

    #: Panics of the guest kernel under one task that make it a finding (``hang``).
    panics_before_hang: int = 2
    #: Guests one task may lose (deaths and harness errors, panics among them) before it is
    #: a harness error.
    deaths_before_error: int = 3

    def verdict(self, losses: Sequence[GuestLost]) -> Verdict:
        """What a task comes to that lost its guest ``losses`` times, the last just now."""
        if losses and losses[-1].hung:
            return Verdict.HANG
        panics = sum(1 for lost in losses if lost.died is not None and lost.died.panicked)
        if panics >= self.panics_before_hang:
            return Verdict.HANG
        if len(losses) >= self.deaths_before_error:
            return Verdict.ERROR
        return Verdict.AGAIN


#: The policy crash, cut and sweep use.
DEFAULT_POLICY = GuestPolicy()


class GuestSlot:
    """The guest an engine (or one shard of it) works in."""

    def __init__(self, start: Callable[[], Machine], *, name: str = "guest",
                 on_start: Callable[[Machine], None] | None = None,
                 policy: GuestPolicy = DEFAULT_POLICY) -> None:
        """``start`` boots a guest; ``on_start`` prepares each new one (files it expects)."""
        self._start, self._on_start = start, on_start
        self.name = name
        self.policy = policy
        self.current: Machine | None = None
        self.replacements = 0

    def lost(self, lost: GuestLost, losses: list[GuestLost]) -> Verdict:
        """Count ``lost`` among one task's ``losses`` (kept by the caller, one list per task
        and attempt series); what the task comes to by the policy."""
        losses.append(lost)
        return self.policy.verdict(losses)

    def machine(self) -> Machine:
        """The guest, booted now if there is none (the machine boots a second time itself when
        the first fails: QemuMachine.start)."""
        if self.current is None:
            self.current = self._start()
            if self._on_start is not None:
                self._on_start(self.current)
        return self.current

    def adopt(self, machine: Machine | None) -> None:
        """Take over a guest booted elsewhere (the one that recorded, say)."""
        if machine is not None and self.current is None:
            self.current = machine

    def replace(self, why: str) -> None:
        """Give the guest up; the next task boots a fresh one."""
        if self.current is not None:
            with contextlib.suppress(Exception):  # it may be stuck or dead already
                self.current.close()
        self.current = None
        self.replacements += 1
        log.warning("%s replaced: %s", self.name, why)

    def perform(self, task: agent.Task[Req, Res], request: Req | Callable[[Machine], Req], *,
                timeout_s: float, module: str = agent.GUEST_MODULE, args: Sequence[str] = (),
                watch: Callable[[], str | None] | None = None) -> Res:
        """``task`` in the guest. ``request`` may be made from the guest (its disks).
        A hang, a guest that died, or a device that stayed busy: the guest is replaced
        and ``GuestLost`` raised."""
        machine = self.machine()
        req: Any = request(machine) if callable(request) else request
        try:
            return agent.perform(machine, task, req, module=module, args=args,
                                 timeout_s=timeout_s, watch=watch)
        except PowercutError as exc:
            if isinstance(exc, GuestDied):
                self.replace(f"{task.name}: {exc}")
                raise GuestLost(str(exc), hung=False, died=exc) from exc
            if isinstance(exc, (CommandTimeout, MachineError)):
                self.replace(f"{task.name}: {exc}")
                raise GuestLost(str(exc), hung=True) from exc
            if isinstance(exc, DeviceBusy):
                self.replace(f"{task.name}: {exc}")
                raise GuestLost(f"harness error: {exc}", hung=False) from exc
            raise

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None

    def kill(self) -> None:
        """Stop the guest now (Ctrl-C): what it finished is already stored."""
        if self.current is not None:
            getattr(self.current, "kill", self.current.close)()

    def __enter__(self) -> GuestSlot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
