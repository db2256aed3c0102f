"""A run's failing crash states as distinct findings: what report, compare and ci name first.

crash signs each failing state as it stores it (crashcases.group: the filesystem, the
kind of broken promise, the durability op that made it, the ops since the durable point
before, names normalised), with the workload and oracle at hand; here the states of each
target are grouped by the stored signature with ``group_signed``, the grouping crash
itself uses, so a report says what the run's terminal said. A state stored before
signatures were kept is signed again from its run's plan and oracle while its run
directory is there, else by kind alone (its words say so).

A finding is known when known behaviour explains every one of its states. Its rate
("fails 3/3, reliable") comes from the store's reruns of one of its states (crash
--reruns checks the representative again); that state then stands for the finding.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crashcases.check import CheckResult, explain
from crashcases.crash.plan import load_plan, validate_plan
from crashcases.group import (
    FindingGroup,
    Grouper,
    Signature,
    findings_words,
    group_signed,
    signature_by_kind,
)
from crashcases.oracle.log import OracleLog
from crashcases.vocabulary import Outcome, Rate
from framework.core import rundir
from framework.core.errors import PowercutError
from framework.core.store import Run
from framework.report.results import Results


@dataclass(frozen=True, slots=True)
class FailingState:
    """One failing crash state as the store keeps it."""

    run_id: int
    target: str
    case: str
    key: str  # the state's key in its run ("20/prefix")
    last_mark: str | None
    seed: int  # the workload's
    variant: str  # its kind (prefix, subset, ...)
    outcome: str
    known: tuple[str, ...] | None  # the entries that explain it (None: none does)
    reproducer: str | None
    explanation: str

    @property
    def id(self) -> str:
        """Unique among the states of a study (keys repeat from run to run)."""
        return f"{self.run_id}:{self.key}"

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "target": self.target, "case": self.case,
                "state": self.key, "mark": self.last_mark, "outcome": self.outcome,
                "known": list(self.known) if self.known is not None else None,
                "reproducer": self.reproducer, "explanation": self.explanation}


@dataclass(frozen=True, slots=True)
class TargetFinding:
    """One distinct finding on one target: its signature, its states (in run order), the
    state that stands for it and how reliably that one fails."""

    target: str
    signature: Signature
    states: tuple[FailingState, ...]
    representative: FailingState
    known: bool  # known behaviour explains every state
    rate: Rate | None = None  # None: not checked again

    @property
    def words(self) -> str:
        return self.signature.words()

    def count(self) -> str:
        """"3 states, fails 1/3, flaky 33%"."""
        n = len(self.states)
        return (f"{n} state{'' if n == 1 else 's'}"
                + (f", {self.rate.words()}" if self.rate is not None else ""))

    def to_dict(self) -> dict[str, Any]:
        rep = self.representative
        return {"target": self.target, "known": self.known, "words": self.words,
                "signature": self.signature.to_dict(), "states": len(self.states),
                "state_keys": [{"run_id": s.run_id, "state": s.key} for s in self.states],
                "representative": rep.to_dict(), "explanation": rep.explanation,
                "reproducer": rep.reproducer,
                "fails": self.rate.to_dict() if self.rate is not None else None}


def words(findings: Sequence[TargetFinding]) -> str:
    """"3 findings (412 states)"."""
    return findings_words([FindingGroup(f.signature, [s.id for s in f.states])
                           for f in findings])


def summary_words(findings: Sequence[TargetFinding]) -> str:
    """"2 findings (5 states) new, 1 finding (3 states) known"."""
    new = [f for f in findings if not f.known]
    known = [f for f in findings if f.known]
    return f"{words(new)} new" + (f", {words(known)} known" if known else "")


def rate_of(r: Results, state: FailingState) -> Rate | None:
    """How often ``state`` failed: its first check and every rerun the store keeps (None:
    it was not checked again)."""
    return rerun_rate(r, state.run_id, state.key)


def rerun_rate(r: Results, run_id: int, key: str) -> Rate | None:
    """How often the failing state or power-cut trial ``key`` of run ``run_id`` failed: its
    first check and every rerun the store keeps (None: it was not checked again)."""
    again = r.reruns.get((run_id, key))
    return None if again is None else Rate(1 + sum(again), 1 + len(again))


def failing_states(r: Results, runs: Collection[int] | None = None) -> list[FailingState]:
    """The failing crash states of ``r`` (of ``runs`` only, when given), in run order."""
    return [state for state, _, _ in _signed(r, runs)]


def findings_of(r: Results, runs: Collection[int] | None = None) -> list[TargetFinding]:
    """The failing crash states of ``r`` (of ``runs`` only) grouped into distinct findings
    per target: new findings first, then known ones, each with the most states first."""
    by_target: dict[str, list[tuple[str, Signature, int, str]]] = {}
    states: dict[str, FailingState] = {}
    for state, sig, length in _signed(r, runs):
        states[state.id] = state
        by_target.setdefault(state.target, []).append((state.id, sig, length,
                                                       state.explanation))
    out = []
    for target, signed in by_target.items():
        for group in group_signed(signed):
            mine = tuple(states[i] for i in group.states)
            # The state crash checked again, if any, stands for the finding.
            rep = next((s for s in mine if rate_of(r, s) is not None),
                       states[group.representative])
            rate = rate_of(r, rep)
            out.append(TargetFinding(target, group.signature, mine, rep,
                                     all(s.known is not None for s in mine), rate))
    return sorted(out, key=lambda f: (f.known, -len(f.states)))


def _signed(r: Results, runs: Collection[int] | None
            ) -> Iterable[tuple[FailingState, Signature, int]]:
    """Each failing state with its signature and the ops up to its crash point."""
    frame = r.all_failing_checks()
    if runs is not None:
        frame = frame[frame["run_id"].isin(list(runs))]
    signers: dict[int, Grouper | None] = {}
    by_id = {run.id: run for run in r.runs}
    for row in frame.to_dict("records"):
        row = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        known = row["known"]
        result = CheckResult(key=str(row["state"]), outcome=Outcome(row["outcome"]),
                             mount_ok=True, findings=list(row["findings"] or []),
                             fsck_check=str((row["fsck_verdicts"] or {}).get("check") or ""),
                             fsck_repair=str((row["fsck_verdicts"] or {}).get("repair") or ""),
                             notes=list((row["fsck_verdicts"] or {}).get("notes") or []))
        state = FailingState(int(row["run_id"]), str(row["target"]), str(row["case"]),
                             str(row["state"]), row["last_mark"], int(row["seed"]),
                             str(row["variant"]), str(row["outcome"]),
                             tuple(known) if known is not None else None, row["reproducer"],
                             row["explanation"] or explain(result))
        sig, length = row["signature"], row["ops_to_crash"]
        if sig is not None:
            yield state, Signature.from_dict(sig), int(length or 0)
            continue
        run_id = state.run_id
        if run_id not in signers:
            signers[run_id] = _signer(by_id[run_id]) if run_id in by_id else None
        signer = signers[run_id]
        if signer is not None:
            yield state, signer.signature(result, state.last_mark), signer.length(state.last_mark)
        else:  # by kind alone; the log position orders its states as ops would
            fstype = str(r.targets.get(state.target, {}).get("fstype") or state.target)
            sig_by_kind = signature_by_kind(fstype, state.outcome, result.findings)
            yield state, sig_by_kind, int(row["entry"])


def _signer(run: Run) -> Grouper | None:
    """What signs the states of ``run`` stored without a signature: its plan and oracle,
    while its run directory is there."""
    run_dir = run.environment.get("run_dir")
    if not isinstance(run_dir, str):
        return None
    try:
        valid = validate_plan(load_plan(Path(run_dir)))
        return Grouper(valid.target.fstype, valid.workload,
                       OracleLog.load(Path(run_dir) / rundir.ORACLE))
    except (PowercutError, OSError, ValueError, TypeError):
        return None
