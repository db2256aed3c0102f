"""The error hierarchy: one base, a few kinds, each with a one-line message.

Three things are kept apart, as xfstests does: a missing prerequisite
(``MissingPrerequisite``: skip, say what to install), the filesystem
misbehaving (a *result*, never an exception) and the harness breaking
(every other error here).
"""

from __future__ import annotations


class PowercutError(Exception):
    """Base of every error powercut raises on purpose; str() is one line."""


class ConfigError(PowercutError):
    """A study, target or option is wrong (names the file and the key)."""


class MissingPrerequisite(PowercutError):
    """A tool, package or kernel feature is absent; the message says the fix."""


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


class DeviceMapperError(PowercutError):
    """A dmsetup verb failed or a target is not available."""


class LogFormatError(PowercutError):
    """A dm-log-writes log is malformed (names the entry index and byte offset)."""


class ScratchDeviceError(PowercutError):
    """A device is not one powercut may write to."""
