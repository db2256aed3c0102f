"""Running external commands: one ``run()`` for the whole project.

Every command is an argv list (never a shell string). The result records
argv, exit status, stdout, stderr and duration; a status the caller did
not accept raises ``CommandError`` whose message is the copy-pasteable
command and the tail of stderr.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from framework.core import clock
from framework.core.errors import CommandError, CommandTimeout, MissingPrerequisite, PowercutError

log = logging.getLogger(__name__)

Argv = Sequence[str | os.PathLike[str]]


@dataclass(frozen=True, slots=True)
class CommandResult:
    argv: tuple[str, ...]
    status: int
    stdout: str
    stderr: str
    duration_s: float

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    @property
    def ok(self) -> bool:
        return self.status == 0


def normalize_argv(argv: Argv) -> tuple[str, ...]:
    if isinstance(argv, str | bytes):
        raise TypeError("argv must be a list of arguments, not a string")
    return tuple(os.fspath(a) for a in argv)


def _tail(text: str, lines: int = 5) -> str:
    body = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(body[-lines:])


def check_status(result: CommandResult, ok_status: Iterable[int] | None) -> CommandResult:
    """Raise ``CommandError`` unless the status is accepted (None accepts all)."""
    if ok_status is None or result.status in tuple(ok_status):
        return result
    tail = _tail(result.stderr) or _tail(result.stdout)
    msg = f"command failed with status {result.status}: {result.command}"
    if tail:
        msg += f" -- {tail}"
    raise CommandError(msg, result)


class CommandRunner(Protocol):
    """Something that runs argv somewhere: the host, a guest, a fake."""

    def run(
        self,
        argv: Argv,
        *,
        timeout_s: float = 60.0,
        ok_status: Iterable[int] | None = (0,),
        input: str | None = None,
        env: dict[str, str] | None = None,
    ) -> CommandResult: ...


def run(
    argv: Argv,
    *,
    timeout_s: float | None = 60.0,
    ok_status: Iterable[int] | None = (0,),
    input: str | None = None,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    watch: Callable[[], str | None] | None = None,
) -> CommandResult:
    """Run argv on this machine and return its result.

    ``watch``, if given, is asked about once a second; a non-empty answer
    (why the command is stuck) kills it and raises CommandTimeout."""
    args = normalize_argv(argv)
    log.debug("+ %s", shlex.join(args))
    full_env = None
    if env:
        full_env = dict(os.environ)
        full_env.update(env)
    start = clock.monotonic()
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            env=full_env,
            cwd=cwd,
        )
    except FileNotFoundError as exc:
        raise MissingPrerequisite(
            f"{args[0]}: not found; run 'make setup' to install powercut's tools"
        ) from exc
    deadline = None if timeout_s is None else start + timeout_s
    stuck = ""
    try:
        while True:
            slice_s = None if watch is None else 1.0
            if deadline is not None:
                left = max(deadline - clock.monotonic(), 0.0)
                slice_s = left if slice_s is None else min(slice_s, left)
            try:
                stdout, stderr = proc.communicate(input, timeout=slice_s)
                break
            except subprocess.TimeoutExpired:
                input = None  # already sent
                if deadline is not None and clock.monotonic() >= deadline:
                    raise
                stuck = watch() or "" if watch is not None else ""
                if stuck:
                    raise
    except subprocess.TimeoutExpired:
        proc.kill()
        try:
            proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            # A process stuck in the kernel (a hung mount) cannot die: leave it
            # rather than wait forever; the caller records a hang.
            log.warning("could not reap %s after killing it", args[0])
        if stuck:
            raise CommandTimeout(f"{shlex.join(args)}: {stuck}") from None
        raise CommandTimeout(
            f"command timed out after {timeout_s:g} s: {shlex.join(args)}"
        ) from None
    except BaseException:
        proc.kill()
        raise
    result = CommandResult(
        argv=args,
        status=proc.returncode,
        stdout=stdout,
        stderr=stderr,
        duration_s=clock.monotonic() - start,
    )
    if result.status != 0:
        log.debug("exit %s after %.3fs: %s", result.status, result.duration_s, _tail(result.stderr))
    return check_status(result, ok_status)


class HostRunner:
    """The command protocol on this machine (the agent's runner inside a guest)."""

    runs_here = True  # callers may use in-process syscalls instead of commands

    def run(
        self,
        argv: Argv,
        *,
        timeout_s: float = 60.0,
        ok_status: Iterable[int] | None = (0,),
        input: str | None = None,
        env: dict[str, str] | None = None,
    ) -> CommandResult:
        return run(argv, timeout_s=timeout_s, ok_status=ok_status, input=input, env=env)


@dataclass(frozen=True, slots=True)
class Tool:
    """A program powercut runs, the Debian package that ships it, how it tells its version."""

    binary: str
    package: str
    #: Arguments that print the version (None: the program has no such option).
    version_argv: tuple[str, ...] | None = None
    #: Whether ``powercut doctor`` fails without it (else it only warns).
    required: bool = True
    #: Whether its filesystem's commands need it (False: run instead of another when
    #: installed, as a checker's static build is; its absence stops nothing).
    needed: bool = True


def tool_version(binary: str, version_argv: Sequence[str] | None) -> str:
    """What a program says its version is, in one line ("present" if it will not say).

    The first output line with a digit in it: dmsetup, for one, first complains
    about a host kernel without device-mapper, then prints its versions.
    """
    if version_argv is None:
        return "present"
    try:
        res = run([binary, *version_argv], timeout_s=10, ok_status=None)
    except PowercutError:
        return "present"
    lines = [ln.strip() for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
    numbered = [ln for ln in lines if any(ch.isdigit() for ch in ln)]
    text = (numbered or lines)[:1]
    return text[0][:70] if text else "present"
