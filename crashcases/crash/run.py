"""A crash run from its validated plan to its results: record, plan, check, rerun, keep.

``run_crash`` drives a ``CrashEngine`` inside a run (framework.core.lifecycle):
every state's result goes to the store as soon as it is known (``StoreSink``),
the failing states are grouped into findings, and results.json is written
whether the run ends or is interrupted. ``recheck`` rebuilds one state of a
finished run and checks it again, as the reproducer each failing state prints.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from crashcases.check import CheckResult
from crashcases.crash.engine import CrashEngine, check_request, checker_disks, guest_files
from crashcases.crash.guest import CRASH_CHECK, parse_results
from crashcases.crash.plan import (
    CrashPlan,
    CrashRunResult,
    MachineFactory,
    ValidatedPlan,
    disk_sizes,
    reproducer_command,
)
from crashcases.crash.points import CrashState
from crashcases.crash.results import save_results
from crashcases.crash.rundir import CrashRunDir, load_state
from crashcases.group import FindingGroup, Grouper, group_states
from crashcases.known import KnownList, KnownMatcher, guest_kernel, recorded_marks
from crashcases.oracle.log import OracleError, OracleLog
from crashcases.vocabulary import Outcome, fails
from crashcases.workload.ops import Workload
from devicemapper.logformat import LogEntry
from framework.core import clock, rundir
from framework.core.errors import BootError, PowercutError
from framework.core.lifecycle import Run, RunSpec
from framework.core.machine.base import DiskSpec, Machine
from framework.core.machine.slot import GuestLost, GuestSlot, Verdict
from framework.core.store import Store
from recovery.filesystems import tool_versions
from recovery.targets import Target

log = logging.getLogger(__name__)


class StoreSink:
    """Writes every checked state to the results store, one transaction each."""

    def __init__(self, store: Store, run_id: int, plan: CrashPlan, run_dir: Path) -> None:
        self.store, self.run_id, self.plan, self.run_dir = store, run_id, plan, run_dir
        self.target = plan.spec
        self.recording_id: int | None = None
        self.states: dict[str, CrashState] = {}
        self.known: KnownMatcher | None = None
        self.grouper: Grouper | None = None

    def recorded(self, info: dict[str, Any], states: list[CrashState],
                 grouper: Grouper | None = None) -> None:
        """The recording is made and its states planned; ``grouper`` signs failing states
        (the store keeps each one's signature, so reports group them without the oracle)."""
        self.grouper = grouper
        self.recording_id = self.store.add_recording(
            self.run_id, self.plan.target, case_spec=self.plan.case, seed=self.plan.seed,
            log_path=os.fspath(self.run_dir / rundir.LOG), entries=int(info["entries"]),
            marks=int(info["marks"]))
        self.states = {s.key: s for s in states}

    def __call__(self, result: CheckResult) -> None:
        state = self.states.get(result.key)
        if state is None or self.recording_id is None:
            return
        cp = self.store.add_crash_point(self.recording_id, entry_index=state.point.index,
                                        kind=state.point.kind, last_mark=state.point.last_mark)
        if self.known is not None:
            self.known.judge(result.key, result.outcome, result, state.variant.kind.value)
        signature = ops_to_crash = None
        if self.grouper is not None and fails(result.outcome, self.target):
            signature = self.grouper.signature(result, state.point.last_mark).to_dict()
            ops_to_crash = self.grouper.length(state.point.last_mark)
        self.store.add_check(
            cp, variant=state.variant.kind, variant_seed=state.variant.seed, outcome=result.outcome,
            mount_s=result.mount_s, fsck_s=result.fsck_check_s,
            fsck_verdicts={"check": result.fsck_check, "repair": result.fsck_repair,
                           "repair_s": result.fsck_repair_s, "replay": result.replay_messages,
                           "notes": result.notes},
            findings=result.findings, reproducer=reproducer_command(self.run_dir, result.key),
            known=self.known.known_ids(result.key) if self.known is not None else None,
            state=result.key, signature=signature, ops_to_crash=ops_to_crash,
            explanation=result.explanation or None)


def run_spec(plan: CrashPlan) -> RunSpec:
    """How a crash run of ``plan`` is recorded (see framework.core.lifecycle)."""
    target = plan.spec
    return RunSpec("crash", f"crash {plan.target} {plan.case}", plan=plan.to_dict(),
                   seeds={"workload": plan.seed}, targets={target.name: target.to_dict()},
                   tool_versions=tool_versions([target.fstype]))


def run_crash(valid: ValidatedPlan, run: Run, factory: MachineFactory,
              progress: Callable[[int, int, CheckResult | None], None] | None = None,
              on_planned: Callable[[int], None] | None = None,
              known: KnownList | None = None, resume: bool = False) -> CrashRunResult:
    """Record, plan and check inside ``run``; every result is stored as soon as it is known.

    ``valid``: the plan validate_plan() checked before the run was opened (so that bad
    options create no run), with its target and workload. ``known``: the known-behaviour
    list that states are judged against. ``resume``: ``run`` is an interrupted run
    reopened; its whole recording is reused (else made again) and states it checked are
    not checked again."""
    start = clock.monotonic()
    plan = valid.plan
    sink: StoreSink | None = None
    if run.store is not None and run.run_id is not None:
        sink = StoreSink(run.store, run.run_id, plan, run.run_dir)

    def booted(disks: Sequence[DiskSpec], rundir: Path, fstypes: tuple[str, ...]) -> Machine:
        return run.started(factory(disks, rundir, fstypes))

    engine = CrashEngine(valid, run.run_dir, booted, progress, sink)
    files = engine.files
    saved = files.saved_record() if resume else None
    machine: Machine | None = None
    if saved is not None:
        info = saved
    else:
        files.forget_recording()
        machine, info = engine.record()
    result = CrashRunResult(run.run_dir, plan, info, [], run_id=run.run_id)
    if known is not None:
        # The recording guest has booted: its kernel release is in the run's environment.
        result.known = known.matcher(
            run="crash", target=valid.target, case=plan.case,
            kernel=guest_kernel(run.environment), marks=recorded_marks(files.oracle()),
            variants=[k.value for k in plan.variants.kinds])
        if sink is not None:
            sink.known = result.known
    entries: list[LogEntry] = []
    try:
        entries = engine.entries()
        result.states = engine.plan_states(entries)
        result.unexplored = dict(engine.unexplored)
        if sink is not None:
            sink.recorded(info, result.states, Grouper(
                valid.target.fstype, valid.workload, files.oracle()))
        if on_planned:
            on_planned(len(result.states))
        todo = result.states
        if saved is not None:
            earlier = files.harvest()
            for s in result.states:
                if s.key in earlier:
                    engine._store(earlier[s.key], len(result.states))
            todo = [s for s in result.states if s.key not in engine.results]
            log.info("resuming: %d of %d states checked before", len(result.states) - len(todo),
                     len(result.states))
        engine.check(todo, machine, total=len(result.states))
        machine = None
        if plan.reruns > 0:
            result.results = dict(engine.results)
            result.findings = group_findings(result, valid.workload, files.oracle())
            engine.rerun_findings(result, run)
    finally:
        if machine is not None:
            machine.close()
        result.results = dict(engine.results)
        if result.known is not None:
            for s in result.states:
                r = result.results.get(s.key)
                if r is not None:
                    result.known.judge(s.key, r.outcome, r, s.variant.kind.value)
        result.replacements = engine.replacements
        result.harness_errors = list(engine.harness_errors)
        if not result.findings:  # grouped before the reruns, or not yet
            with contextlib.suppress(OSError, OracleError):  # no oracle yet: nothing failed
                result.findings = group_findings(result, valid.workload, files.oracle())
        result.wall_s = clock.monotonic() - start
        save_results(result, run)
    for path, kind in engine.keep_artifacts(result, entries):
        run.add_artifact(path, kind)
    return result


def group_findings(result: CrashRunResult, workload: Workload,
                   oracle: OracleLog) -> list[FindingGroup]:
    """The run's failing states, known ones included, grouped into distinct findings."""
    target = result.plan.spec
    grouper = Grouper(target.fstype, workload, oracle)
    failing = [(s.key, s.point.last_mark, result.results[s.key]) for s in result.states
               if s.key in result.results and fails(result.results[s.key].outcome, target)]
    return group_states(failing, grouper.signature, grouper.length)


def recheck(run_dir: Path, key: str, factory: MachineFactory) -> tuple[Target, CheckResult]:
    """Rebuild and check one state of a finished run; returns its target and the result.

    The guest is lost and replaced as in a run (the guest policy, framework.core.machine.slot):
    a hang is the state's finding, a guest that died is tried again, and one lost too often,
    or one that would not boot, is a harness error (``error``): neither a pass nor a failure."""
    plan, state = load_state(run_dir, key)
    target = plan.spec
    files = CrashRunDir(run_dir, two_disks=target.needs_journal_disk)
    scratch = files.scratch("recheck")
    disks = checker_disks(disk_sizes(target, plan.data_mib), files.verified_logs())
    slot = GuestSlot(lambda: factory(disks, scratch, (target.fstype,)), name="rechecking guest")
    losses: list[GuestLost] = []
    try:
        while True:
            try:
                results_path = guest_files(slot.machine(), files.oracle_file)
                slot.perform(CRASH_CHECK, lambda machine: check_request(
                    machine, target, [state], budget_s=plan.check_timeout_s),
                    timeout_s=plan.check_timeout_s + 120)
                results = parse_results(results_path)
            except GuestLost as exc:
                verdict = slot.lost(exc, losses)
                if verdict is Verdict.AGAIN:
                    continue
                results = [CheckResult(key=key, outcome=Outcome(verdict.value), notes=[str(exc)])]
            except BootError as exc:
                results = [CheckResult(key=key, outcome=Outcome.ERROR, notes=[str(exc)])]
            break
    finally:
        slot.close()
        shutil.rmtree(scratch, ignore_errors=True)
    if not results:
        raise PowercutError(f"recheck of {key}: the guest returned no result")
    return target, results[0]
