"""Running commands over a guest's serial console.

The console carries only short, framed control lines. A command's argv,
stdin, stdout and stderr travel as files in the run directory that host
and guest share, so output that contains prompt text, markers or binary
noise cannot confuse the framing, and no line exceeds the tty's limit.
Each command ends with a marker that holds a random token and ``$?``;
every wait takes the remaining time of one deadline.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shlex
from collections.abc import Callable, Iterable
from pathlib import Path

import pexpect

from framework.core import clock
from framework.core.command import Argv, CommandResult, check_status, normalize_argv
from framework.core.errors import ConsoleTimeout, GuestDied

log = logging.getLogger(__name__)


def frame_line(script: Path, token: str) -> str:
    """The console line that runs a script and reports its status.

    The echoed line reads ``__PC_%s_%s__`` literally, so only the printed
    marker, never the echo, matches ``marker_pattern(token)``.
    """
    return f"sh {shlex.quote(os.fspath(script))}; printf '\\n__PC_%s_%s__\\n' {token} $?\n"


def marker_pattern(token: str) -> re.Pattern[bytes]:
    return re.compile(rb"__PC_" + token.encode() + rb"_(\d+)__")


def command_script(
    argv: tuple[str, ...],
    *,
    stdin: Path | None,
    stdout: Path,
    stderr: Path,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> str:
    """Shell script that runs argv with its streams redirected to files."""
    lines = ["#!/bin/sh"]
    if cwd:
        lines.append(f"cd {shlex.quote(cwd)} || exit 126")
    prefix = ""
    if env:
        prefix = "env " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()) + " "
    src = shlex.quote(os.fspath(stdin)) if stdin else "/dev/null"
    lines.append(
        f"exec {prefix}{shlex.join(argv)} <{src} >{shlex.quote(os.fspath(stdout))} "
        f"2>{shlex.quote(os.fspath(stderr))}"
    )
    return "\n".join(lines) + "\n"


def parse_status(match: re.Match[bytes]) -> int:
    return int(match.group(1))


class ConsoleRunner:
    """The command protocol over a pexpect-driven serial console."""

    def __init__(self, child: pexpect.spawn, exchange_dir: Path,
                 token_factory: Callable[[], str] | None = None) -> None:
        self.child = child
        self._token = token_factory or (lambda: secrets.token_hex(6))
        self.exchange_dir = exchange_dir
        self.exchange_dir.mkdir(parents=True, exist_ok=True)
        self._counter = 0

    def _expect(self, pattern: re.Pattern[bytes], deadline: clock.Deadline, what: str,
                watch: Callable[[], str | None] | None = None) -> re.Match[bytes]:
        while True:
            # With a watch, wait in short slices and ask it between them
            # whether the command still makes progress.
            slice_s = deadline.remaining() if watch is None else min(deadline.remaining(), 1.0)
            try:
                self.child.expect([pattern], timeout=max(slice_s, 0.01))
                break
            except pexpect.TIMEOUT:
                if deadline.expired:
                    raise ConsoleTimeout(
                        f"{what}: no answer from the guest within {deadline.timeout_s:g} s"
                    ) from None
                stalled = watch() if watch is not None else None
                if stalled:
                    raise ConsoleTimeout(f"{what}: {stalled}") from None
            except pexpect.EOF:
                raise GuestDied(f"{what}: the guest went away (qemu exited)") from None
        match = self.child.match
        assert isinstance(match, re.Match)
        return match

    def sync(self, timeout_s: float = 30.0) -> None:
        """Prepare the shell (no echo, no prompt) and wait until it answers."""
        token = self._token()
        self.child.send("stty -echo 2>/dev/null; PS1=''; PS2=''\n")
        self.child.send(f"printf '__PC_%s_%s__\\n' {token} 0\n")
        self._expect(marker_pattern(token), clock.Deadline(timeout_s), "console sync")

    def run(
        self,
        argv: Argv,
        *,
        timeout_s: float = 60.0,
        ok_status: Iterable[int] | None = (0,),
        input: str | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        watch: Callable[[], str | None] | None = None,
    ) -> CommandResult:
        """Run argv in the guest. ``watch``, if given, is called about once a
        second while waiting; a non-empty answer (why the command is stuck)
        ends the wait with ConsoleTimeout."""
        args = normalize_argv(argv)
        self._counter += 1
        stem = self.exchange_dir / f"c{self._counter}"
        paths = {k: stem.with_suffix(f".{k}") for k in ("sh", "in", "out", "err")}
        if input is not None:
            paths["in"].write_text(input)
        paths["sh"].write_text(
            command_script(
                args,
                stdin=paths["in"] if input is not None else None,
                stdout=paths["out"],
                stderr=paths["err"],
                env=env,
                cwd=cwd,
            )
        )
        token = self._token()
        log.debug("guest+ %s", shlex.join(args))
        deadline = clock.Deadline(timeout_s)
        start = clock.monotonic()
        self.child.send(frame_line(paths["sh"], token))
        try:
            match = self._expect(marker_pattern(token), deadline, shlex.join(args), watch)
        except ConsoleTimeout as exc:
            if not deadline.expired:
                raise
            raise ConsoleTimeout(
                f"guest command timed out after {timeout_s:g} s: {shlex.join(args)}"
            ) from exc
        duration = clock.monotonic() - start
        status = parse_status(match)
        out = _read_and_remove(paths["out"])
        err = _read_and_remove(paths["err"])
        for k in ("sh", "in"):
            paths[k].unlink(missing_ok=True)
        if status == 126 and not paths["out"].exists() and not err:
            err = f"could not run the command script {paths['sh']}"
        result = CommandResult(args, status, out, err, duration)
        return check_status(result, ok_status)


def _read_and_remove(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return ""
    path.unlink(missing_ok=True)
    return data.decode("utf-8", errors="replace")
