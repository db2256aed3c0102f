"""Power-cut runs on dm-flakey, driven from the host: where each trial cuts, the trials, the results.

A run boots one guest, has it execute the workload once without a cut per
target (``cut-oracle``: the promises a trial is checked against), then
runs each trial (``cut-trial``, see ``crashcases.cut.guest``) at its own
seeded cut point. Every trial is stored as soon as it is known; a trial
that hangs is recorded as ``hang`` and the guest is replaced. With
``jobs`` above 1, that many guests take the trials from one queue in the
plan's order, each with disks, oracles and a run subdirectory of its own
(``vm``, ``vm-1``, ...); the host stores them as they come and saves them
in the plan's order. Summaries per target are in ``crashcases.cut.summary``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from crashcases.cut.guest import (
    CUT_MODES,
    CUT_ORACLE,
    CUT_TRIAL,
    CutPoint,
    OracleRequest,
    TrialRequest,
)
from crashcases.cut.summary import TargetSummary, TrialResult, summarize
from crashcases.known import KnownList, KnownMatcher, KnownVerdict, guest_kernel, mark_ops
from crashcases.vocabulary import Outcome, Rate, fails
from crashcases.workload.cases import load_case
from crashcases.workload.ops import DURABILITY_OPS, Workload
from devicemapper.flakey import FlakeyMode
from framework.core import clock, rundir
from framework.core.errors import ConfigError, PowercutError
from framework.core.lifecycle import EngineRun, Run, RunSpec, read_plan
from framework.core.machine.base import DiskSpec, Machine
from framework.core.machine.slot import GuestLost, GuestSlot, Verdict
from framework.core.store import Store
from recovery.disks import MiB, plan_disks
from recovery.filesystems import tool_versions
from recovery.mount import Timeouts
from recovery.targets import Target, resolve, target_from_dict

log = logging.getLogger(__name__)


MachineFactory = Callable[[Sequence[DiskSpec], Path, tuple[str, ...]], Machine]


# --- where to cut --------------------------------------------------------------


def durability_indices(workload: Workload) -> list[int]:
    return [i for i, op in enumerate(workload.ops) if op.kind in DURABILITY_OPS]


def plan_cut(workload: Workload, *, trial_seed: str, cut_after_ops: int | None = None,
             cut_after_s: float | None = None) -> CutPoint:
    """The cut point of one trial (seeded by ``trial_seed``).

    ``cut_after_s``: the cut is a timer, ``after_s`` seconds into the
    workload. Otherwise the cut comes after durability op number
    ``cut_after_ops`` (seeded in 1..D-1 when None, so that at least one
    durability op runs after the cut) and after a seeded number of the
    non-durability ops that follow it: those are the in-flight ops, whose
    effects a disk may or may not hold.
    """
    if cut_after_s is not None:
        if cut_after_ops is not None:
            raise ConfigError("give either --cut-after-ops or --cut-after-s, not both")
        if cut_after_s <= 0:
            raise ConfigError(f"--cut-after-s must be positive, got {cut_after_s:g}")
        return CutPoint(after_s=float(cut_after_s))
    rng = random.Random(f"powercut-cut:{trial_seed}")
    durable = durability_indices(workload)
    if not durable:
        raise ConfigError(f"case {workload.name!r} has no durability op: nothing is promised, "
                          "so a power cut checks nothing")
    if cut_after_ops is None:
        k = rng.randint(1, max(1, len(durable) - 1))
    else:
        if not 0 <= cut_after_ops <= len(durable):
            raise ConfigError(f"--cut-after-ops {cut_after_ops}: case {workload.name!r} has "
                              f"{len(durable)} durability ops")
        k = cut_after_ops
    start = durable[k - 1] + 1 if k > 0 else 0
    stop = durable[k] if k < len(durable) else len(workload.ops)
    # Anything from "right after the promise" to "right before the next one".
    return CutPoint(before_op=rng.randint(start, stop))


# --- the run -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CutPlan:
    targets: tuple[str, ...]
    case: str
    trials: int = 5
    seed: int = 0
    cut_after_ops: int | None = None
    cut_after_s: float | None = None
    mode: FlakeyMode = FlakeyMode.DROP_WRITES
    continue_syncs: int = 2
    max_sequences: int | None = None
    data_mib: int | None = None
    count_post_cut_promises: bool = False  # positive control: must report data loss
    trial_timeout_s: float = 900.0
    user_targets: tuple[Target, ...] = ()  # definitions from --targets-file the plan may name
    #: "targets": every trial of the first target, then the next; "random": the trials of all
    #: targets in one seeded random order, so that drift in the host (caches, load) spreads
    #: over every target instead of biasing the ones that ran last.
    order: str = "targets"
    #: Run each new failing trial this many more times, at the same cut ("fails f/t").
    reruns: int = 0
    #: ... for at most this many trials.
    max_reruns: int = 10
    #: Guests running trials at once. Each trial's cut point and workload are the same
    #: whatever the number; the seconds are measured with the other guests running beside
    #: it (under TCG each guest keeps a core busy, so more jobs than host cores slow all).
    jobs: int = 1

    def spec(self, name: str) -> Target:
        return resolve(name, self.user_targets)

    def trial_order(self) -> list[tuple[str, int]]:
        """(target, trial) in the order they run."""
        pairs = [(t, n) for t in self.targets for n in range(self.trials)]
        if self.order == "random":
            random.Random(f"powercut-cut-order:{self.seed}").shuffle(pairs)
        return pairs


@dataclass
class CutRunResult(EngineRun[CutPlan]):
    trials: list[TrialResult] = field(default_factory=list)
    #: Known-behaviour verdicts per target, keyed by trial_key() (empty: no list given).
    known: dict[str, KnownMatcher] = field(default_factory=dict)
    #: Per target with an external journal: where its journal is, in its own tool's words.
    journal_evidence: dict[str, str] = field(default_factory=dict)

    def for_target(self, target: str) -> list[TrialResult]:
        return [t for t in self.trials if t.target == target]

    def summaries(self) -> list[TargetSummary]:
        return [summarize(self.plan.spec(t), self.for_target(t)) for t in self.plan.targets]

    def verdict(self, trial: TrialResult) -> KnownVerdict | None:
        m = self.known.get(trial.target)
        return m.verdicts.get(trial_key(trial)) if m is not None else None

    def is_known(self, trial: TrialResult) -> bool:
        """Whether known behaviour explains everything this failing trial found (never, with
        the list set aside: --ignore-known)."""
        m = self.known.get(trial.target)
        return m is not None and m.is_known(trial_key(trial))

    def failing(self, trial: TrialResult) -> bool:
        """Whether the trial fails its target and no known behaviour explains it."""
        return fails(trial.outcome, self.plan.spec(trial.target)) and not self.is_known(trial)

    def not_reproduced(self) -> list[dict[str, Any]]:
        return [n for m in self.known.values() for n in m.not_reproduced()]

    def to_dict(self) -> dict[str, Any]:
        plan = asdict(self.plan)
        plan["mode"] = self.plan.mode.value
        summaries = []
        for s in self.summaries():
            trials = self.for_target(s.target)
            # "outcomes" are raw; "failing" counts only what known behaviour does not explain.
            summaries.append({**s.to_dict(), "known": sum(1 for t in trials if self.is_known(t)),
                              "failing": sum(1 for t in trials if self.failing(t))})
        rows = []
        for tr in self.trials:
            v = self.verdict(tr)
            rows.append({**tr.to_dict(), "known": v.to_dict() if v is not None else None})
        return {"run_dir": os.fspath(self.run_dir), "plan": plan, "run_id": self.run_id,
                "replacements": self.replacements, "wall_s": self.wall_s,
                "journal_evidence": self.journal_evidence,
                "summaries": summaries, "trials": rows,
                "known": [m.report() for m in self.known.values()] if self.known else None}


def trial_key(trial: TrialResult) -> str:
    return f"{trial.target}#{trial.trial}"


def slug(target: str) -> str:
    return target.replace("/", "-")


def timeouts_for(budget_s: float) -> Timeouts:
    return Timeouts.within(budget_s, shares=4)


@dataclass(frozen=True, slots=True)
class ValidatedCutPlan:
    """A plan whose options were checked (``validate_cut_plan``), with the targets it names
    and the workload it makes: what a power-cut run carries from start to end."""

    plan: CutPlan
    targets: tuple[Target, ...]
    workload: Workload


def validate_cut_plan(plan: CutPlan) -> ValidatedCutPlan:
    """Fail on bad options before anything is created or a guest boots."""
    if plan.trials < 1:
        raise ConfigError(f"--trials must be at least 1, got {plan.trials}")
    if plan.jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {plan.jobs}")
    if plan.continue_syncs < 0:
        raise ConfigError(f"continue_syncs must not be negative, got {plan.continue_syncs}")
    if plan.reruns < 0 or plan.max_reruns < 0:
        raise ConfigError(f"--reruns {plan.reruns} / --max-reruns {plan.max_reruns}: "
                          "must be 0 or more")
    if plan.order not in ("targets", "random"):
        raise ConfigError(f"--order {plan.order}: expected targets or random")
    if FlakeyMode(plan.mode) not in CUT_MODES:
        raise ConfigError(f"--mode {plan.mode}: expected drop_writes or error_writes")
    targets = tuple(plan.spec(t) for t in plan.targets)
    return ValidatedCutPlan(plan, targets, load_case(plan.case, seed=plan.seed,
                                                     max_sequences=plan.max_sequences))


class CutEngine:
    """Boots a guest, prepares each target's oracle, runs the trials, replaces hung guests."""

    def __init__(self, valid: ValidatedCutPlan, run_dir: Path, factory: MachineFactory, *,
                 store: Store | None = None, run_id: int | None = None,
                 lane: int = 0) -> None:
        self.plan, self.run_dir, self.factory = valid.plan, run_dir, factory
        self.store, self.run_id = store, run_id
        self.targets, self.workload = valid.targets, valid.workload
        # Requests carry the whole target: a user-defined one exists only here.
        self.by_name = {t.name: t for t in self.targets}
        self.vm_dir = run_dir / ("vm" if lane == 0 else f"vm-{lane}")
        # A target with an external journal gets a journal disk; the trial cuts both.
        # Device profiles that throttle a disk differently give their targets disks of their own.
        data_mib = self.plan.data_mib
        self.disk_plan = plan_disks(self.targets, data_bytes=data_mib * MiB if data_mib else None)
        self.disks = list(self.disk_plan.specs)
        self.journal_evidence: dict[str, str] = {}
        self.fstypes = tuple(dict.fromkeys(t.fstype for t in self.targets))
        self.oracles: set[str] = set()
        self.slot = GuestSlot(lambda: self.factory(self.disks, self.vm_dir, self.fstypes),
                              name="cut guest", on_start=self._prepare)

    def _prepare(self, machine: Machine) -> None:
        self.oracles.clear()  # made on the data disk, which a new guest gets afresh
        (self.vm_dir / rundir.WORKLOAD).write_text(self.workload.to_json())

    @property
    def replacements(self) -> int:
        return self.slot.replacements

    def close(self) -> None:
        self.slot.close()

    def _oracle_path(self, target: str) -> Path:
        return self.vm_dir / rundir.cut_oracle(slug(target))

    def _ensure_oracle(self, target: Target) -> None:
        if target.name in self.oracles:
            return

        def request(machine: Machine) -> OracleRequest:
            return OracleRequest(target, workload_path=os.fspath(self.vm_dir / rundir.WORKLOAD),
                                 oracle_path=os.fspath(self._oracle_path(target.name)),
                                 data_dev=machine.disk(self.disk_plan.disk(target, "data")),
                                 journal_dev=self._journal_dev(machine, target))

        made = self.slot.perform(CUT_ORACLE, request, timeout_s=self.plan.trial_timeout_s)
        if made.journal_evidence:
            log.info("%s: %s", target.name, made.journal_evidence)
            self.journal_evidence[target.name] = made.journal_evidence
        self.oracles.add(target.name)

    def _journal_dev(self, machine: Machine, target: Target) -> str | None:
        return (machine.disk(self.disk_plan.disk(target, "journal"))
                if target.needs_journal_disk else None)

    def point_for(self, target: str, trial: int) -> CutPoint:
        return plan_cut(self.workload, trial_seed=f"{self.plan.seed}:{target}:{trial}",
                        cut_after_ops=self.plan.cut_after_ops, cut_after_s=self.plan.cut_after_s)

    def run_trial(self, target: str, trial: int) -> TrialResult:
        point = self.point_for(target, trial)
        spec = self.by_name[target]

        def request(machine: Machine) -> TrialRequest:
            return TrialRequest(
                spec, key=f"{target}#{trial}",
                workload_path=os.fspath(self.vm_dir / rundir.WORKLOAD),
                oracle_path=os.fspath(self._oracle_path(target)),
                data_dev=machine.disk(self.disk_plan.disk(spec, "data")),
                point=point, mode=FlakeyMode(self.plan.mode),
                continue_syncs=self.plan.continue_syncs,
                count_post_cut_promises=self.plan.count_post_cut_promises,
                timeouts=timeouts_for(self.plan.trial_timeout_s * 0.8),
                journal_dev=self._journal_dev(machine, spec))

        # A guest lost under the trial: a hang (a step stuck in the kernel, or a guest that
        # stopped answering) is a finding for it, and nothing in that guest is trusted after
        # it; a guest that died or met a harness error (a device that stayed busy, a guest
        # killed from outside) is replaced and the trial tried again, as the slot's policy
        # says (framework.core.machine.slot).
        losses: list[GuestLost] = []
        while True:
            try:
                self._ensure_oracle(spec)
                seen = self.slot.perform(CUT_TRIAL, request, timeout_s=self.plan.trial_timeout_s)
            except GuestLost as exc:
                verdict = self.slot.lost(exc, losses)
                if verdict is Verdict.AGAIN:
                    continue
                return TrialResult(target, trial, point, Outcome(verdict.value), None, None,
                                   notes=[str(exc)])
            return TrialResult(target, trial, point, seen.check.outcome, seen.drive, seen.check,
                               checked_mark=seen.checked_mark)

    def rerun_trial(self, trial: TrialResult) -> Rate:
        """Run failing ``trial`` ``plan.reruns`` more times, cut at the same point of the same
        workload on a fresh mkfs; each run is stored as a rerun of the trial. What differs
        between runs is timing (writeback, the log's background pushes), so the rate says how
        reliably the cut at that point breaks a promise."""
        spec = self.by_name[trial.target]
        failed = 1
        trial.reruns = []  # a resumed run starts a trial's reruns over
        for attempt in range(1, self.plan.reruns + 1):
            again = self.run_trial(trial.target, trial.trial)
            bad = fails(again.outcome, spec)
            failed += bad
            trial.reruns.append(again.outcome.value)
            if self.store is not None and self.run_id is not None:
                self.store.add_rerun(self.run_id, trial_key(trial), attempt=attempt,
                                     outcome=again.outcome.value, failed=bad,
                                     findings=again.check.findings if again.check else ())
        trial.rate = Rate(failed, 1 + self.plan.reruns)
        return trial.rate

    def store_trial(self, result: TrialResult, known: Sequence[str] | None = None) -> None:
        """Write ``result`` to the results store (one transaction), if the run has one.

        ``known``: the known-behaviour entries that explain it (its outcome stays raw)."""
        if self.store is None or self.run_id is None:
            return
        d = result.drive
        self.store.add_recovery(
            self.run_id, result.target, trial=result.trial, outcome=result.outcome,
            seed=self.plan.seed, in_flight_bytes=d.in_flight_bytes if d else None,
            in_flight_ops=d.in_flight_ops if d else None, mount_s=result.mount_s,
            fsck_s=result.fsck_s,
            replay_messages=result.check.replay_messages if result.check else (), known=known)


def load_cut_plan(run_dir: Path) -> CutPlan:
    """The plan of an earlier power-cut run (its plan.json), user targets included."""
    path = run_dir / rundir.PLAN
    raw = read_plan(run_dir, "cut")
    try:
        raw["targets"] = tuple(raw["targets"])
        raw["mode"] = FlakeyMode(raw.get("mode", FlakeyMode.DROP_WRITES.value))
        raw["user_targets"] = tuple(target_from_dict(t) for t in raw.get("user_targets", ()))
        return CutPlan(**raw)
    except (TypeError, KeyError, ValueError, AttributeError) as exc:
        raise ConfigError(f"{path}: not a power-cut plan ({exc})") from None


def earlier_trials(run_dir: Path) -> dict[tuple[str, int], TrialResult]:
    """The trials an interrupted run saved in its results.json, by (target, trial)."""
    if not (run_dir / rundir.RESULTS).exists():
        return {}
    try:
        rows = rundir.read_results(run_dir, "power-cut run's results")["trials"]
        trials = [TrialResult.from_dict(r) for r in rows]
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{run_dir / rundir.RESULTS}: not a power-cut run's results "
                          f"({exc})") from None
    return {(t.target, t.trial): t for t in trials}


def run_spec(plan: CutPlan) -> RunSpec:
    """How a power-cut run of ``plan`` is recorded (see framework.core.lifecycle)."""
    plan_doc = asdict(plan)
    plan_doc["mode"] = FlakeyMode(plan.mode).value
    targets = {t: {**plan.spec(t).to_dict(), "case": plan.case, "mode": plan_doc["mode"]}
               for t in plan.targets}
    return RunSpec("cut", f"cut {' '.join(plan.targets)} {plan.case}", plan=plan_doc,
                   seeds={"workload": plan.seed}, targets=targets,
                   tool_versions=tool_versions(plan.spec(t).fstype for t in plan.targets))


def run_cut(valid: ValidatedCutPlan, run: Run, factory: MachineFactory, *,
            progress: Callable[[TrialResult], None] | None = None,
            known: KnownList | None = None, resume: bool = False) -> CutRunResult:
    """All trials of ``valid.plan`` inside ``run``; each is stored and saved as soon as it is
    known.

    ``valid``: the plan validate_cut_plan() checked before the run was opened, with its
    targets and workload. ``known``: the known-behaviour list that trials are judged
    against. ``resume``:
    ``run`` is an interrupted run reopened; the trials its results.json holds are kept
    (each is saved there as it finishes) and the others are run."""
    start = clock.monotonic()
    plan = valid.plan
    result = CutRunResult(run.run_dir, plan, run_id=run.run_id)
    earlier = earlier_trials(run.run_dir) if resume else {}
    marks = mark_ops(valid.workload) if known is not None else {}

    def judged(tr: TrialResult) -> tuple[str, ...] | None:
        if known is None:
            return None
        m = result.known.get(tr.target)
        if m is None:
            # After the target's first trial a guest has booted: its kernel is recorded.
            m = result.known[tr.target] = known.matcher(
                run="cut", target=plan.spec(tr.target), case=plan.case,
                kernel=guest_kernel(run.environment), marks=marks)
        m.judge(trial_key(tr), tr.outcome, tr.check)
        return m.known_ids(trial_key(tr))

    started = threading.Lock()

    def booted(disks: Sequence[DiskSpec], rundir: Path, fstypes: tuple[str, ...]) -> Machine:
        machine = factory(disks, rundir, fstypes)  # with --jobs, the lanes boot at once
        # The first guest's facts go to the store, from whichever lane boots first; the lock
        # makes that the one write a lane's thread does, before any trial can end.
        with started:
            return run.started(machine)

    engines: list[CutEngine] = []
    pairs = plan.trial_order()
    order = {pair: i for i, pair in enumerate(pairs)}

    def finished(tr: TrialResult) -> None:
        result.trials.append(tr)
        result.trials.sort(key=lambda t: order[(t.target, t.trial)])
        engines[0].store_trial(tr, known=judged(tr))
        run.save_results(result.to_dict())
        if progress is not None:
            progress(tr)

    try:
        engines = [CutEngine(valid, run.run_dir, booted, store=run.store, run_id=run.run_id,
                             lane=lane) for lane in range(plan.jobs)]
        todo = [pair for pair in pairs if pair not in earlier]
        for pair in pairs:
            if pair in earlier:
                finished(earlier[pair])
        if plan.jobs == 1:
            for target, trial in todo:
                finished(engines[0].run_trial(target, trial))
        else:
            _run_in_parallel(engines, todo, finished)
        if plan.reruns > 0:
            again = [t for t in result.trials if result.failing(t) and t.rate is None]
            for tr in again[:plan.max_reruns]:
                engines[0].rerun_trial(tr)
                run.save_results(result.to_dict())
        return result
    finally:
        for engine in engines:
            result.replacements += engine.replacements
            result.journal_evidence.update(engine.journal_evidence)
            engine.close()
        result.wall_s = clock.monotonic() - start
        with contextlib.suppress(PowercutError, OSError):
            run.save_results(result.to_dict())


def _run_in_parallel(engines: Sequence[CutEngine], todo: Sequence[tuple[str, int]],
                     finished: Callable[[TrialResult], None]) -> None:
    """Each engine's guest takes the next trial of ``todo`` until none is left; ``finished``
    runs here, in the calling thread (the store's connection is this thread's), for each
    trial as it ends. An error in a guest's thread stops the others taking trials and is
    raised here once they have ended theirs."""
    pending: queue.SimpleQueue[tuple[str, int]] = queue.SimpleQueue()
    for pair in todo:
        pending.put(pair)
    done: queue.SimpleQueue[TrialResult | BaseException | None] = queue.SimpleQueue()
    stop = threading.Event()

    def work(engine: CutEngine) -> None:
        try:
            while not stop.is_set():
                try:
                    target, trial = pending.get_nowait()
                except queue.Empty:
                    break
                done.put(engine.run_trial(target, trial))
        except BaseException as exc:  # handed to the calling thread, which raises it
            stop.set()
            done.put(exc)
        finally:
            done.put(None)

    threads = [threading.Thread(target=work, args=(e,), name=f"cut-{lane}", daemon=True)
               for lane, e in enumerate(engines)]
    for t in threads:
        t.start()
    error: BaseException | None = None
    try:
        running = len(threads)
        while running:
            item = done.get()
            if item is None:
                running -= 1
            elif isinstance(item, BaseException):
                error = error or item
            elif error is None:
                finished(item)
    except BaseException:
        stop.set()  # interrupted: the caller closes the guests, which ends the threads
        raise
    if error is not None:
        raise error
