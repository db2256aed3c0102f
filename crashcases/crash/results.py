"""A crash run's results.json: its one writer (``save_results``) and its one reader
(``CrashResults``).

results.json holds the run's plan and recording summary, its outcome counts and
findings, and every planned state with its result (none if the run stopped before
it) and its known-behaviour verdict. It carries the format number of
``framework.core.rundir``; a file written before the number existed is format 1 and
reads as it always did. Which states fail is ``CrashResults.failing``, decided by
``crashcases.vocabulary.fails`` for the run's own target: every reader asks there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crashcases.check import CheckResult
from crashcases.crash.plan import CrashPlan, CrashRunResult, load_plan, reproducer_command
from crashcases.vocabulary import Outcome, fails
from framework.core import rundir
from framework.core.errors import ConfigError
from framework.core.lifecycle import Run
from recovery.targets import Target, resolve, target_from_dict


@dataclass(frozen=True, slots=True)
class StateRow:
    """One planned state of a run, as results.json keeps it."""

    key: str
    point: int
    point_kind: str
    last_mark: str | None
    variant: str
    result: CheckResult | None  # None: never checked (the run stopped before it)
    #: A failing state whose every finding known behaviour explains.
    known: bool = False
    #: The known-behaviour entries that explain (part of) it.
    known_ids: tuple[str, ...] = ()

    @property
    def outcome(self) -> Outcome | None:
        return self.result.outcome if self.result is not None else None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> StateRow:
        key = str(raw["key"])
        point, _, variant = key.partition("/")  # the key is POINT/VARIANT
        result = raw.get("result")
        return cls(key, int(raw.get("point", point)), str(raw.get("point_kind", "")),
                   raw.get("last_mark"), str(raw.get("variant", variant)),
                   CheckResult.from_dict({"key": key, **result}) if result else None,
                   bool((raw.get("known") or {}).get("known")),
                   tuple(str(i) for i in (raw.get("known") or {}).get("ids") or ()))


@dataclass(frozen=True, slots=True)
class FindingRow:
    """One distinct finding of a run (crashcases.group), as results.json keeps it."""

    states: tuple[str, ...]
    representative: str
    explanation: str
    known: bool  # known behaviour explains all of its states

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> FindingRow:
        return cls(tuple(str(k) for k in raw["states"]), str(raw.get("representative") or ""),
                   str(raw.get("explanation") or ""), bool(raw.get("known")))


@dataclass(frozen=True, slots=True)
class CrashResults:
    """What a crash run's results.json says, typed."""

    path: Path
    #: The run's target (None: its plan names one this powercut cannot resolve).
    target: Target | None
    states: tuple[StateRow, ...]
    findings: tuple[FindingRow, ...]
    #: The guest kernel's release, as the guest reported it (None: not recorded).
    kernel: str | None = None
    #: The run's case (the workload's spec), from its plan.
    case: str = ""

    @classmethod
    def read(cls, run_dir: Path) -> CrashResults:
        """The results.json of ``run_dir``; a missing, damaged or foreign one is a one-line
        ConfigError naming it."""
        data = rundir.read_results(run_dir, "crash run's results")
        try:
            states = tuple(StateRow.from_dict(s) for s in data["states"])
            findings = tuple(FindingRow.from_dict(f) for f in data.get("findings") or ())
            plan = data.get("plan") or {}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"{run_dir / rundir.RESULTS}: not a crash run's results "
                              f"({exc!r})") from None
        kernel = (data.get("known") or {}).get("kernel")
        return cls(run_dir / rundir.RESULTS, _target(plan), states, findings,
                   str(kernel) if kernel else None, str(plan.get("case", "")))

    def checked(self) -> list[StateRow]:
        """The states with a result."""
        return [s for s in self.states if s.result is not None]

    def failing(self) -> list[StateRow]:
        """The checked states whose outcome fails the run's target, known ones included."""
        return [s for s in self.states
                if s.result is not None and fails(s.result.outcome, self.target)]

    def state(self, key: str) -> StateRow | None:
        return next((s for s in self.states if s.key == key), None)


def _target(plan: Mapping[str, Any]) -> Target | None:
    try:
        return resolve(str(plan["target"]),
                       tuple(target_from_dict(t) for t in plan.get("user_targets") or ()))
    except (ConfigError, KeyError, TypeError, ValueError, AttributeError):
        return None


def save_results(result: CrashRunResult, run: Run) -> None:
    """Write the run's results.json (the only writer of a crash run's)."""
    # "counts" are raw outcomes; a state that known behaviour explains keeps its raw
    # outcome in "result" and has "known": {"known": true, "ids": [...]} beside it.
    known = result.known
    run.save_results({
        "plan": result.plan.to_dict(), "record": result.record, "wall_s": result.wall_s,
        "replacements": result.replacements, "counts": result.counts(),
        "findings": [{**g.to_dict(), "known": bool(known is not None and all(
            known.is_known(k) for k in g.states))} for g in result.findings],
        "harness_errors": [{"state": key, "error": why} for key, why in result.harness_errors],
        "unexplored": result.unexplored, "shared": result.shared(),
        "known": known.report() if known is not None else None,
        "states": [
            {**s.to_dict(),
             "result": result.results[s.key].to_dict() if s.key in result.results else None,
             "reproducer": reproducer_command(result.run_dir, s.key),
             "known": (known.verdicts[s.key].to_dict()
                       if known is not None and s.key in known.verdicts else None)}
            for s in result.states
        ],
    })


def load_checked(run_dir: Path, key: str, needs: Sequence[str] = (rundir.PLAN, rundir.RESULTS)
                 ) -> tuple[CrashPlan, StateRow]:
    """The plan of a finished crash run and state ``key``'s row in its results.json (with a
    result), after checking that ``needs`` are there; bad input is a one-line ConfigError."""
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: no such run directory")
    for name in needs:
        path = rundir.crash_log(run_dir, name) if name in (rundir.LOG, rundir.JOURNAL_LOG) \
            else run_dir / name
        if not path.is_file():
            raise ConfigError(f"{run_dir}: not a finished crash run directory (no {name})")
    results = CrashResults.read(run_dir)
    row = results.state(key)
    if row is None:
        failing = [s.key for s in results.failing()]
        hint = (f"failing states: {', '.join(failing[:5])}{' ...' if len(failing) > 5 else ''}"
                if failing else "it has no failing state")
        raise ConfigError(f"state {key!r}: not a state of {run_dir} ({hint})")
    if row.result is None:
        raise ConfigError(f"state {key!r}: never checked (the run stopped before it)")
    return load_plan(run_dir), row
