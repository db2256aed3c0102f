"""The error hierarchy: one base, a few kinds, each with a one-line message.

Three things are kept apart, as xfstests does: a missing prerequisite
(``MissingPrerequisite``: skip, say what to install), the filesystem
misbehaving (a *result*, never an exception) and the harness breaking
(every other error here).
"""

from __future__ import annotations

#: Every error class by its dotted name (module and qualified name), filled as
#: each is defined, so an error raised in a guest can be raised again on the
#: host with its own type (see framework.core.agent).
_KINDS: dict[str, type[PowercutError]] = {}


class PowercutError(Exception):
    """Base of every error powercut raises on purpose; str() is one line."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        _KINDS[kind_name(cls)] = cls


def kind_name(cls: type[PowercutError]) -> str:
    """The name an error type travels under: short names clash (two WorkloadErrors)."""
    return f"{cls.__module__}.{cls.__qualname__}"


def error_kind(name: str) -> type[PowercutError] | None:
    """The error class named ``name`` by kind_name(), if its module is imported here."""
    return _KINDS.get(name)


def pack(exc: PowercutError) -> dict[str, str]:
    """An error ready to travel to another process: its message and its kind_name(), the
    two things revive() raises it again from."""
    return {"error": str(exc), "type": kind_name(type(exc))}


def revive(name: str | None, message: str, default: type[PowercutError]) -> PowercutError:
    """An error that travelled as its kind_name() and message, raised again on this side:
    of its own kind where that is known here and takes a message, else ``default``."""
    kind = error_kind(str(name)) or default
    try:
        return kind(message)
    except TypeError:  # an error class whose constructor wants more than a message
        return default(message)


_KINDS[kind_name(PowercutError)] = PowercutError


class ConfigError(PowercutError):
    """A study, target or option is wrong (names the file and the key)."""


class MissingPrerequisite(PowercutError):
    """A tool, package or kernel feature is absent; the message says the fix."""


class Unsupported(MissingPrerequisite):
    """A target the guest kernel or this machine cannot run (a module or a tool it lacks): the
    command is skipped (exit SKIPPED), which is neither a failure nor a pass."""


#: The exit status of a skipped command, as automake's and meson's test harnesses count a skip.
SKIPPED = 77


class CommandError(PowercutError):
    """An external command exited with a status the caller did not accept."""

    def __init__(self, message: str, result: object | None = None) -> None:
        super().__init__(message)
        self.result = result


class CommandTimeout(CommandError):
    """An external command outlived its deadline."""


class MachineError(PowercutError):
    """A machine (VM or local) could not be used."""


class BootError(MachineError):
    """A guest kernel did not boot to the ready marker."""


class ConsoleTimeout(MachineError):
    """The guest console did not answer before the deadline; the guest is gone."""


class GuestDied(MachineError):
    """qemu exited while the guest was working: killed from outside, or the guest kernel
    panicked. ``console``: its last console lines; ``panicked``: they show a kernel
    panic or oops (the work in hand may be what killed it)."""

    def __init__(self, message: str, *, console: str = "", panicked: bool = False) -> None:
        super().__init__(message)
        self.console = console
        self.panicked = panicked


class DeviceMapperError(PowercutError):
    """A dmsetup verb failed or a target is not available."""


class DeviceBusy(PowercutError):
    """A device or mount stayed in use after every wait; the message names the holders.

    A harness problem, never a verdict on the filesystem: the state being checked is
    recorded as a harness error and checked again on a fresh guest."""


class LogFormatError(PowercutError):
    """A dm-log-writes log is malformed (names the entry index and byte offset)."""


class ScratchDeviceError(PowercutError):
    """A device is not one powercut may write to."""
