"""A scripted machine for unit tests (labgrid's FakeCommandDriver)."""

from __future__ import annotations

import fnmatch
import shlex
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from framework.core.command import Argv, CommandResult, check_status, normalize_argv
from framework.core.machine.base import Machine

Responder = Callable[[tuple[str, ...], str | None], tuple[int, str, str]]


@dataclass
class _Rule:
    pattern: str
    respond: Responder


class FakeMachine(Machine):
    """Answers commands from rules matched on the shell-joined argv (fnmatch).

    Unmatched commands succeed with empty output unless ``strict`` is set,
    in which case they fail with status 127 like a missing command.
    Every call is kept in ``calls`` for assertions.
    """

    name = "fake"

    def __init__(self, *, strict: bool = False, rundir: Path | None = None) -> None:
        self.strict = strict
        self.rules: list[_Rule] = []
        self.calls: list[tuple[str, ...]] = []
        self.inputs: list[str | None] = []
        self._cleanup: weakref.finalize | None = None
        if rundir is None:
            rundir = Path(tempfile.mkdtemp(prefix="powercut-fake-"))
            # Removed on close() or when the fake is collected, without a warning.
            self._cleanup = weakref.finalize(self, shutil.rmtree, rundir, True)
        self.rundir = rundir
        self.disks: dict[str, str] = {}

    def on(
        self,
        pattern: str,
        *,
        status: int = 0,
        stdout: str = "",
        stderr: str = "",
        respond: Responder | None = None,
    ) -> FakeMachine:
        """Answer commands matching ``pattern``; later rules win."""
        if respond is None:

            def respond(_argv: tuple[str, ...], _input: str | None) -> tuple[int, str, str]:
                return status, stdout, stderr

        self.rules.insert(0, _Rule(pattern, respond))
        return self

    def run(
        self,
        argv: Argv,
        *,
        timeout_s: float = 60.0,
        ok_status: Iterable[int] | None = (0,),
        input: str | None = None,
        env: dict[str, str] | None = None,
        watch: Callable[[], str | None] | None = None,
    ) -> CommandResult:
        args = normalize_argv(argv)
        self.calls.append(args)
        self.inputs.append(input)
        joined = shlex.join(args)
        for rule in self.rules:
            if fnmatch.fnmatchcase(joined, rule.pattern):
                status, out, err = rule.respond(args, input)
                break
        else:
            status, out, err = (127, "", f"{args[0]}: not scripted") if self.strict else (0, "", "")
        return check_status(CommandResult(args, status, out, err, 0.0), ok_status)

    def disk(self, name: str) -> str:
        return self.disks.setdefault(name, f"/dev/fake-{name}")

    def close(self) -> None:
        if self._cleanup is not None:
            self._cleanup()
