"""The steps of a recall: each one ``powercut crash`` command, run and read back.

A step is a crash run on one kernel and target (a workload of the recall, a confirmation's
sequence alone, a masked candidate's runs). It is printed as the command it is, run in a
session of its own under the recall's stop (``framework.zoo.commands``), and read back from
its run directory through the crash run's own results reader. The recall
(``framework.zoo.recall``), its confirmations (``framework.zoo.confirm``) and its second
look (``framework.zoo.masked``) all run their steps through here.
"""

from __future__ import annotations

import datetime as dt
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crashcases.crash.results import CrashResults
from framework.core import clock, rundir
from framework.core.errors import ConfigError
from framework.core.store import Store
from framework.zoo.commands import STOP, run_command
from framework.zoo.kernels import Kernel


@dataclass(slots=True)
class Step:
    """One crash run of the recall: what ran, and what it found."""

    kernel: str
    target: str
    case: str
    argv: list[str]
    run_dir: str = ""
    wall_s: float = 0.0
    states: int = 0
    failing: int = 0  # failing states no known behaviour explains
    known: int = 0  # failing states known behaviour explains
    findings: int = 0  # distinct findings among the unexplained failing states
    first_failure: str = ""  # timestamp of the first unexplained failing state
    representative: str = ""  # the first new finding's representative state
    interrupted: bool = False  # the budget ended it
    error: str = ""  # the crash command failed (exit 2) twice: why, in its last line

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


def crash_argv(kernel: Kernel, target: str, case: str, options: Sequence[str], seed: int,
                results: Path, db: Path) -> list[str]:
    return [sys.executable, "-m", "framework.cli", "crash", "-q", "--target", target,
            "--case", case, *options, "--seed", str(seed), "--kernel", os.fspath(kernel.image),
            "--modules", os.fspath(kernel.modules), "--results", os.fspath(results),
            "--db", os.fspath(db)]


def run_step(step: Step, results: Path, timeout_s: float, say: Callable[[str], None], *,
              left_s: float | None = None) -> None:
    """Run one crash command; SIGTERM when its share ends (it keeps what it checked).

    The share ``timeout_s`` counts from the end of the recording (the run directory's
    record.json), so a workload whose recording is long still gets its share of checking;
    ``left_s`` (default: the share) bounds the whole step, recording included."""
    before = set(results.glob("crash-*")) if results.is_dir() else set()
    say("zoo: + " + shlex.join(["powercut", *step.argv[3:]]))
    start = clock.monotonic()
    hard = start + max(left_s if left_s is not None else timeout_s, 1.0)
    checking_since: float | None = None if left_s is not None else start

    def ends(now: float) -> float:
        nonlocal checking_since
        if checking_since is None and any(
                (d / rundir.RECORD).is_file() for d in set(results.glob("crash-*")) - before):
            checking_since = now
        if checking_since is None:
            return hard
        return min(hard, checking_since + max(timeout_s, 1.0))

    code, _, err, step.interrupted = run_command(step.argv, ends)
    if STOP.event.is_set():
        step.interrupted = True
    step.wall_s = clock.monotonic() - start
    made = sorted(set(results.glob("crash-*")) - before)
    if code not in (0, 1) and not step.interrupted:
        # The crash command's own error (a guest that panicked while booting, a harness
        # error): the step is recorded with it and the recall goes on.
        last = err.strip().splitlines()[-1:] or [f"exit {code}"]
        step.error = f"exit {code}: {last[0]}"
        say(f"zoo: step failed: {shlex.join(step.argv)} -- {step.error}")
    if made:
        step.run_dir = os.fspath(made[-1])
        read_step(step, made[-1])


def read_step(step: Step, run_dir: Path) -> None:
    """What the crash run in ``run_dir`` checked and found, read into ``step``: its failing
    states are those of its findings that no known behaviour explains."""
    try:
        results = CrashResults.read(run_dir)
    except ConfigError:
        return  # killed before its first results: nothing checked
    step.states = len(results.checked())
    new = [f for f in results.findings if not f.known]
    step.findings = len(new)
    failing = {k for f in new for k in f.states}
    step.failing = len(failing)
    step.known = sum(len(f.states) for f in results.findings if f.known)
    if failing:
        step.first_failure = first_check(run_dir, failing)
        step.representative = new[0].representative


def first_check(run_dir: Path, keys: set[str]) -> str:
    """When the first of ``keys`` was checked (the store's timestamp of its check)."""
    db = run_dir.parent / rundir.ZOO_DB
    with Store(db) as store:
        runs = [r for r in store.runs() if r.environment.get("run_dir") == os.fspath(run_dir)]
        if not runs:
            return ""
        checks = store.checks(runs[0].id)
    points = {key.partition("/")[0] for key in keys}
    return min((c.created_at for c in checks if str(c.entry_index) in points), default="")


def seconds_between(start: str, end: str) -> float | None:
    if not start or not end:
        return None
    return (dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)).total_seconds()


def run_started(run_dir: Path) -> str:
    """When the crash run of ``run_dir`` started, from its store."""
    with Store(run_dir.parent / rundir.ZOO_DB) as store:
        runs = [r for r in store.runs() if r.environment.get("run_dir") == os.fspath(run_dir)]
    return runs[0].started_at if runs else ""
