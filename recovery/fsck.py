"""Running a filesystem's checker and recording its verdict and duration."""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass

from framework.core.command import CommandRunner, tool_version
from framework.core.syscalls import runs_here
from recovery.filesystems import adapter_for
from recovery.filesystems.base import FsckVerdict
from recovery.target import Target

log = logging.getLogger(__name__)

#: How many trailing output lines an FsckResult keeps.
TAIL_LINES = 40

# Checkers' messages are parsed where their exit status is not enough.
C_LOCALE = {"LC_ALL": "C", "LANG": "C"}


@dataclass(frozen=True, slots=True)
class FsckResult:
    verdict: FsckVerdict
    status: int
    duration_s: float
    output_tail: str  # last TAIL_LINES lines of stdout then stderr
    argv: tuple[str, ...]
    repair: bool


def output_tail(stdout: str, stderr: str, lines: int = TAIL_LINES) -> str:
    body = [ln.rstrip() for ln in (stdout + "\n" + stderr).splitlines() if ln.strip()]
    return "\n".join(body[-lines:])


def run_fsck(
    runner: CommandRunner,
    target: Target,
    dev: str,
    *,
    repair: bool,
    journal_dev: str | None = None,
    timeout_s: float,
    quick_start: bool = False,
) -> FsckResult:
    """Check (``repair=False``: never writes) or repair ``dev`` as ``target``'s filesystem.

    Every exit status is data here; a checker that outlives ``timeout_s``
    raises ``CommandTimeout`` (the caller records a hang).

    ``quick_start``: run the checker's statically linked build where the filesystem has one,
    it is installed and it says the same version (``static_build``). The verdict is the
    same program's; the time lacks the loading of its shared libraries, which under an
    emulated CPU is most of the check of a small filesystem (e2fsck: 70 to 100 ms of about 150).
    For a crash state's check, whose time is not a recovery figure: recovery timings
    (``powercut cut``, ``sweep``) run the checker a booting system runs.
    """
    adapter = adapter_for(target.fstype)
    argv = adapter.fsck_argv(dev, repair=repair, journal_dev=journal_dev)
    if quick_start and runs_here(runner):
        static = dict(adapter.static_checkers).get(argv[0])
        if static is not None and static_build(argv[0], static):
            argv = [static, *argv[1:]]
    return _run_checker(runner, target, dev, argv, repair=repair, timeout_s=timeout_s,
                        what="repair" if repair else "check")


_version_lock = threading.Lock()


def static_build(program: str, static: str) -> bool:
    """Whether ``static`` is installed and says the same version as ``program`` (asked once
    per process: two short commands, the first time a check needs them)."""
    with _version_lock:  # a checking guest's lanes ask at the same time
        return _same_version(program, static)


@functools.cache
def _same_version(program: str, static: str) -> bool:
    import shutil  # lazily: recovery.filesystems says why

    if shutil.which(static) is None:
        return False
    said = tool_version(static, ("-V",))
    return said != "present" and said == tool_version(program, ("-V",))


def _run_checker(runner: CommandRunner, target: Target, dev: str, argv: list[str], *,
                 repair: bool, timeout_s: float, what: str) -> FsckResult:
    """Run one checker command and turn its exit status into the adapter's verdict."""
    adapter = adapter_for(target.fstype)
    # ok_status=None: "errors found" and "errors corrected" are results.
    # No input: stdin is closed, so a checker that still asks gets EOF.
    result = runner.run(argv, timeout_s=timeout_s, ok_status=None, env=C_LOCALE)
    verdict = adapter.classify_fsck(result.status, result.stdout, result.stderr, repair=repair)
    log.info("%s %s on %s: %s (status %d, %.3f s)",
             what, target.name, dev, verdict, result.status, result.duration_s)
    return FsckResult(verdict=verdict, status=result.status, duration_s=result.duration_s,
                      output_tail=output_tail(result.stdout, result.stderr), argv=result.argv,
                      repair=repair)


def run_log_replay(
    runner: CommandRunner,
    target: Target,
    dev: str,
    *,
    journal_dev: str | None = None,
    timeout_s: float,
) -> FsckResult | None:
    """Replay ``dev``'s journal with its checker, for filesystems whose kernel does not.

    Returns None when the adapter has no such step (the kernel replays at
    mount). The verdict is the checker's: a replay that also had to repair
    says so in its exit status.
    """
    argv = adapter_for(target.fstype).journal_replay_argv(dev, journal_dev=journal_dev)
    if argv is None:
        return None
    return _run_checker(runner, target, dev, argv, repair=True, timeout_s=timeout_s,
                        what="journal replay")


def run_journal_only(
    runner: CommandRunner,
    target: Target,
    dev: str,
    *,
    journal_dev: str | None = None,
    timeout_s: float,
) -> FsckResult | None:
    """The checker's journal-only replay of ``dev`` (timed), or None where the checker has
    none. It writes: give it a throwaway copy when the mount is to replay the same journal."""
    argv = adapter_for(target.fstype).journal_only_argv(dev, journal_dev=journal_dev)
    if argv is None:
        return None
    return _run_checker(runner, target, dev, argv, repair=True, timeout_s=timeout_s,
                        what="journal-only replay")
