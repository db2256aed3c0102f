"""A crash run, driven from the host: record once, then check every state.

1. Record the workload in a guest (``crash-record``); the log stays in the
   run directory as ``log.img`` and the oracle as ``oracle.json``.
2. Enumerate crash points and plan the states (host side, from the log).
3. Check the states in order of their replay base, in chunks, over one
   guest per job (``crash-check``): replay only moves forward and every
   check gets its own throwaway snapshot, so replay I/O stays near one pass
   over the log and mount/fsck never dirty the replayed disk.
4. A hang (a step past its deadline, or a guest that stops answering) is
   recorded for the state in progress; the guest is replaced and the run
   goes on with the next state.
5. A guest that dies (qemu exits: killed from outside, or its kernel
   panicked) is replaced and the states it had in flight are checked again,
   one at a time, on fresh guests. What a state whose check loses its guest
   comes to is the guest slot's policy (framework.core.machine.slot): a
   finding (``hang``, with the console lines) once it has brought the guest
   kernel down twice, a harness error once it has lost its guest three times.

How a whole run goes, from its validated plan to its results, is in
``crashcases.crash.run``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import logging
import os
import shutil
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from crashcases.check import CheckResult
from crashcases.crash.faults import NO_FAULTS, Faults
from crashcases.crash.guest import (
    CRASH_CHECK,
    CRASH_RECORD,
    CheckRequest,
    JournalDisks,
    LaneDisks,
    RecordRequest,
    StateRecipe,
    parse_results,
    parse_started,
)
from crashcases.crash.plan import (
    CHECK_DISKS,
    CHUNK,
    JOURNAL_CHECK_DISKS,
    JOURNAL_RECORD_DISKS,
    LANE_DISKS,
    RECORD_DISKS,
    CrashRunResult,
    MachineFactory,
    ValidatedPlan,
    disk_sizes,
    timeouts_for,
)
from crashcases.crash.points import (
    CrashState,
    distinct_marks,
    enumerate_points,
    plan_states,
    plan_two_disk_states,
)
from crashcases.crash.rundir import CrashRunDir
from crashcases.vocabulary import Outcome, Rate, fails
from devicemapper.logformat import LogEntry, LogReader
from framework.core import agent, clock, rundir
from framework.core.errors import CommandTimeout, DeviceBusy, MachineError, ScratchDeviceError
from framework.core.lifecycle import Run
from framework.core.machine.base import DiskSpec, Machine
from framework.core.machine.slot import DEFAULT_POLICY, GuestLost, GuestSlot, Verdict
from recovery.disks import throttle
from recovery.filesystems import adapter_for
from recovery.targets import Target

log = logging.getLogger(__name__)


class CrashEngine:
    def __init__(self, valid: ValidatedPlan, run_dir: Path, factory: MachineFactory,
                 progress: Callable[[int, int, CheckResult | None], None] | None = None,
                 sink: Callable[[CheckResult], None] | None = None) -> None:
        self.plan, self.target, self.workload = valid.plan, valid.target, valid.workload
        self.sink = sink
        self.factory = factory
        self.progress = progress or (lambda done, total, r: None)
        self.sizes = disk_sizes(self.target, self.plan.data_mib)
        self.two_disks = self.target.needs_journal_disk
        self.files = CrashRunDir(run_dir, two_disks=self.two_disks)
        self.fstypes = (self.target.fstype,)
        #: Two-disk runs: states left out because their halves may never have coexisted.
        self.unexplored: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()  # set on Ctrl-C: workers end, nothing counts as a hang
        self._slots: set[GuestSlot] = set()
        #: The plan's faults, their states named by key once the states are known.
        self.faults: Faults = NO_FAULTS
        #: The guests each state lost (deaths and harness errors), per state key: what the
        #: state comes to is the slot's policy.
        self.losses: dict[str, list[GuestLost]] = {}
        #: States that were in flight when a guest died with several: each is checked alone.
        self.suspects: set[str] = set()
        #: Harness errors met so far (the state and why), in order; a state that meets one
        #: is checked again on a fresh guest, as the slot's policy says.
        self.harness_errors: list[tuple[str, str]] = []
        self.results: dict[str, CheckResult] = {}
        self.replacements = 0

    @property
    def run_dir(self) -> Path:
        return self.files.path

    # -- recording ----------------------------------------------------------

    def record(self) -> tuple[Machine, dict[str, Any]]:
        """Record the workload (``_record_once``); a guest the harness lost meanwhile (a
        deadline passed under a loaded host, a busy device, a dead guest) is replaced and
        the recording made again, up to the guest policy's limit of lost guests."""
        for attempt in range(1, DEFAULT_POLICY.deaths_before_error + 1):
            try:
                return self._record_once()
            except (CommandTimeout, MachineError, DeviceBusy) as exc:
                if attempt == DEFAULT_POLICY.deaths_before_error:
                    raise
                log.warning("recording guest lost (%s); recording again on a fresh guest", exc)
                self.replacements += 1
        raise AssertionError("the loop returns or raises")

    def _record_once(self) -> tuple[Machine, dict[str, Any]]:
        workload = self.workload
        names = [*RECORD_DISKS, *CHECK_DISKS]
        if self.two_disks:
            names += [*JOURNAL_RECORD_DISKS, *JOURNAL_CHECK_DISKS]
        else:
            names += LANE_DISKS
        # The recorded disks are throttled as the target's device profiles say.
        limits = {"data": throttle(self.target, "data"), "journal": throttle(self.target, "journal")}
        disks = [DiskSpec(n, self.sizes[n], bandwidth_bytes_s=limits.get(n, (None, None))[0],
                          iops=limits.get(n, (None, None))[1]) for n in names]
        machine = self.factory(disks, self.files.guest(0), self.fstypes)
        # The guest writes only into its run directory (the rest of the host
        # is read-only or hidden there).
        request = RecordRequest(self.target, workload, data_dev=machine.disk("data"),
                                log_dev=machine.disk("log"),
                                oracle_path=os.fspath(machine.rundir / rundir.ORACLE),
                                journal_dev=machine.disk("journal") if self.two_disks else None,
                                journal_log_dev=machine.disk("journal-log") if self.two_disks else None)
        try:
            recorded = agent.perform(machine, CRASH_RECORD, request, timeout_s=3600,
                                     watch=death_watch(machine))
            shutil.copyfile(machine.rundir / rundir.ORACLE, self.files.oracle_file)
            info = {**recorded.to_dict(), "workload": workload.name, "ops": len(workload.ops)}
            # Written last: its presence says the recording is whole (what --resume reuses).
            self.files.write_record(info)
        except BaseException:
            machine.close()
            raise
        return machine, info

    # -- planning -----------------------------------------------------------

    def entries(self) -> list[LogEntry]:
        with LogReader(self.files.log_path) as reader:
            return list(reader)

    def plan_states(self, entries: list[LogEntry]) -> list[CrashState]:
        oracle = self.files.oracle()
        marks = oracle.marks
        only = None
        if self.plan.points.distinct:
            only = distinct_marks(oracle.ops, ((m.name, m.op) for m in oracle.mark_records))
            log.info("--points distinct: %d of %d marks have a window of their own",
                     len(only), len(marks))
        points = enumerate_points(entries, self.plan.points, workload_marks=marks,
                                  seed=self.plan.seed, only=only)
        if not self.two_disks:
            return plan_states(entries, points, self.plan.variants, workload_marks=marks,
                               seed=self.plan.seed, per_point=self.plan.per_point)
        with LogReader(self.files.recording_logs()["journal-log"]) as reader:
            journal_entries = list(reader)
        states, self.unexplored = plan_two_disk_states(
            entries, journal_entries, points, self.plan.variants, workload_marks=marks,
            seed=self.plan.seed, per_point=self.plan.per_point)
        for why, n in self.unexplored.items():
            log.info("%d states left out: %s", n, why)
        return states

    # -- checking -----------------------------------------------------------

    def _checker(self, shard: int) -> Machine:
        return self.factory(checker_disks(self.sizes, self.files.recording_logs()),
                            self.files.guest(shard + 1), self.fstypes)

    def check_shard(self, shard: int, states: list[CrashState], machine: Machine | None,
                    total: int) -> None:
        slot = GuestSlot(lambda: self._checker(shard), name=f"checking guest {shard + 1}")
        slot.adopt(machine)
        with self._lock:
            self._slots.add(slot)
        todo = list(states)
        try:
            while todo and not self._stop.is_set():
                results_path = guest_files(slot.machine(), self.files.oracle_file)
                # A state a dead guest had in flight goes alone, so a death is its own; any
                # other chunk stops before such a state.
                chunk = todo[:1] if todo[0].key in self.suspects else list(
                    itertools.takewhile(lambda s: s.key not in self.suspects, todo[:CHUNK]))
                done_before = len(parse_results(results_path))
                begun_before = len(parse_started(results_path))
                try:
                    lost = self._check_chunk(slot, chunk, results_path)
                except BaseException:
                    # Ctrl-C or SIGTERM mid-chunk (a budget ending the run): stop the guest,
                    # then keep all it finished of the chunk, not only the chunks before it.
                    with contextlib.suppress(Exception):
                        slot.kill()
                    for r in parse_results(results_path)[done_before:]:
                        if r.outcome is not Outcome.ERROR and r.key not in self.results:
                            self._store(r, total)
                    raise
                got = parse_results(results_path)[done_before:]
                finished = set()
                for r in got:
                    if r.outcome is Outcome.ERROR and self._harness_error(slot, r):
                        continue  # checked again on the fresh guest
                    self._store(r, total)
                    finished.add(r.key)
                if self._stop.is_set():
                    break  # interrupted: the guest was killed on purpose, not hung
                # The lanes mark each state as they begin it and write its result when done:
                # what a lost guest had in flight is begun without a result (not even an
                # error, which is checked again).
                pending = [s for s in chunk if s.key not in finished]
                begun = set(parse_started(results_path)[begun_before:]) - {r.key for r in got}
                in_flight = [s for s in pending if s.key in begun]
                if lost is not None and lost.died is not None:
                    result = self._died(slot, pending, lost, in_flight) if pending else None
                    if result is not None:
                        self._store(result, total)
                        finished.add(result.key)
                elif lost is not None and lost.hung:
                    # The state that hung: the one in flight (the other lane ran out of
                    # states before the watch gave up), else the first without a result.
                    if pending:
                        r = CheckResult(key=(in_flight or pending)[0].key, outcome=Outcome.HANG,
                                        notes=[f"guest stopped answering: {lost}"])
                        self._store(r, total)
                        finished.add(r.key)
                elif lost is not None and pending:
                    # The task itself met a harness error (a device that stayed busy before
                    # any lane began): counted against the state it was to begin with.
                    error = CheckResult(key=(in_flight or pending)[0].key,
                                        outcome=Outcome.ERROR, notes=[str(lost)])
                    error.explanation = str(lost)
                    if not self._harness_error(slot, error):
                        self._store(error, total)
                        finished.add(error.key)
                elif lost is None and any(r.outcome in (Outcome.HANG, Outcome.ERROR) for r in got):
                    # A step hung (the guest gave up and said so) or a device stayed busy:
                    # nothing more in that guest is trusted.
                    slot.replace(next(r.explanation for r in got
                                      if r.outcome in (Outcome.HANG, Outcome.ERROR)))
                todo = [s for s in todo if s.key not in finished]
        finally:
            slot.close()
            with self._lock:
                self._slots.discard(slot)
                self.replacements += slot.replacements


    def rerun_findings(self, result: CrashRunResult, run: Run) -> None:
        """Check the representative of each new finding ``plan.reruns`` more times, in one
        guest; each rerun is stored; the finding's rate says how often it failed."""
        by_key = {s.key: s for s in result.states}
        new = [g for g in result.findings
               if result.known is None or not all(result.known.is_known(k) for k in g.states)]
        slot = GuestSlot(lambda: self.factory(checker_disks(self.sizes, self.files.recording_logs()),
                                              self.files.rerun_guest, self.fstypes),
                         name="rerun guest")
        try:
            for group in new[:self.plan.max_reruns]:
                state = by_key[group.representative]
                failed = 1  # the first check
                for attempt in range(1, self.plan.reruns + 1):
                    again = self._recheck(slot, state)
                    bad = fails(again.outcome, self.target)
                    failed += bad
                    if run.store is not None and run.run_id is not None:
                        run.store.add_rerun(run.run_id, state.key, attempt=attempt,
                                            outcome=again.outcome, failed=bad,
                                            findings=again.findings)
                group.rate = Rate(failed, 1 + self.plan.reruns)
                log.info("finding %s: %s", group.representative, group.rate.words())
        finally:
            slot.close()
            shutil.rmtree(self.files.rerun_guest, ignore_errors=True)

    def _recheck(self, slot: GuestSlot, state: CrashState) -> CheckResult:
        """``state`` checked once more in ``slot``'s guest (a hang is the result)."""
        budget = self.plan.check_timeout_s
        losses: list[GuestLost] = []
        while True:
            results_path = guest_files(slot.machine(), self.files.oracle_file)
            before = len(parse_results(results_path))
            try:
                slot.perform(CRASH_CHECK, lambda machine: check_request(
                    machine, self.target, [state], budget_s=budget),
                    timeout_s=budget + 120, watch=progress_watch(results_path, budget))
            except GuestLost as exc:
                verdict = slot.lost(exc, losses)
                if verdict is Verdict.AGAIN:
                    continue
                return CheckResult(key=state.key, outcome=Outcome(verdict.value),
                                   notes=[str(exc)])
            got = parse_results(results_path)[before:]
            return got[0] if got else CheckResult(key=state.key, outcome=Outcome.ERROR,
                                                  notes=["the guest returned no result"])

    def _died(self, slot: GuestSlot, pending: list[CrashState], lost: GuestLost,
              in_flight: Sequence[CrashState] = ()) -> CheckResult | None:
        """A guest died with ``pending`` (the chunk's states without a result) left, of which
        its lanes had begun ``in_flight`` (empty if it died before any lane began).

        With several in flight, each is checked alone next (with none known, the first few
        pending: as many as the guest checks at once). With one, the death is that state's,
        and the slot's policy says what it comes to: None means check it again on a fresh
        guest."""
        died = lost.died
        assert died is not None
        suspects = list(in_flight) or pending[:2]  # two lanes: its first and LANE_DISKS'
        with self._lock:
            self.harness_errors.append((suspects[0].key, f"guest died: {died}"))
            # An injected "once" panic is spent.
            self.faults = self.faults.panics_spent({s.key for s in pending})
            if len(suspects) > 1 and suspects[0].key not in self.suspects:
                self.suspects.update(s.key for s in suspects)
                log.warning("a checking guest died with %d states in flight; checking each "
                            "alone: %s", len(suspects), died)
                return None
            key = suspects[0].key
            losses = self.losses.setdefault(key, [])
        verdict = slot.lost(lost, losses)
        deaths = [x.died for x in losses if x.died is not None]
        if verdict is Verdict.HANG:
            panics = sum(d.panicked for d in deaths)
            return CheckResult(key=key, outcome=Outcome.HANG, notes=[
                f"the guest kernel died checking this state, {panics} times in "
                f"{len(losses)} checks; last console lines: {died.console}"])
        if verdict is Verdict.ERROR:
            others = len(losses) - len(deaths)
            return CheckResult(key=key, outcome=Outcome.ERROR, notes=[
                f"harness error: the guest died {len(deaths)} times checking this state"
                + (f" and was given up {others} times for harness errors" if others else "")
                + f": {died}"])
        log.warning("state %s: its guest died (%s); checking it again on a fresh guest",
                    key, died)
        return None

    def _harness_error(self, slot: GuestSlot, result: CheckResult) -> bool:
        """Note a harness error the guest met checking a state; whether the state is checked
        again (on a fresh guest) rather than recorded as an error, by the slot's policy."""
        with self._lock:
            self.harness_errors.append((result.key, result.explanation))
            # An injected fault is injected once: the fresh guest checks the state as it is.
            self.faults = self.faults.without_busy(result.key)
            losses = self.losses.setdefault(result.key, [])
        again = slot.lost(GuestLost(result.explanation, hung=False), losses) is Verdict.AGAIN
        log.warning("state %s%s: %s", result.key,
                    ", checking it again on a fresh guest" if again else "", result.explanation)
        return again

    def _check_chunk(self, slot: GuestSlot, chunk: list[CrashState],
                     results_path: Path) -> GuestLost | None:
        """Check a chunk; None, or why the guest had to be given up."""
        budget = self.plan.check_timeout_s
        try:
            slot.perform(CRASH_CHECK, lambda machine: check_request(
                machine, self.target, chunk, budget_s=budget, faults=self.faults),
                timeout_s=budget * len(chunk) + 120, watch=progress_watch(results_path, budget))
        except GuestLost as exc:  # stuck (watchdog, deadline), died, or a device stayed busy
            return exc
        return None

    def _store(self, result: CheckResult, total: int) -> None:
        with self._lock:
            self.results[result.key] = result
            done = len(self.results)
            if self.sink is not None:
                self.sink(result)
        self.progress(done, total, result)

    def check(self, states: list[CrashState], first_machine: Machine | None,
              total: int | None = None) -> None:
        """Check ``states`` (of ``total`` in the run: a resumed run has some already)."""
        total = len(states) if total is None else total
        # Fault injection (tests of the hang handling): "#N" is the N-th state.
        self.faults = self.plan.faults.named([s.key for s in states])
        jobs = max(1, min(self.plan.jobs, len(states) or 1))
        # Contiguous shards: each machine's replay still moves forward only.
        size = -(-len(states) // jobs) if states else 0
        shards = [states[i * size:(i + 1) * size] for i in range(jobs)]
        if jobs == 1:
            self.check_shard(0, shards[0], first_machine, total)
            return
        if first_machine is not None:
            first_machine.close()
        pool = concurrent.futures.ThreadPoolExecutor(jobs)
        try:
            futures = [pool.submit(self.check_shard, i, shard, None, total)
                       for i, shard in enumerate(shards) if shard]
            for f in futures:
                f.result()
        except BaseException:
            # Ctrl-C (or a failed shard): stop the other guests now rather than
            # wait for their chunks; what they finished is already stored.
            self._stop.set()
            with self._lock:
                slots = list(self._slots)
            for slot in slots:
                slot.kill()
            raise
        finally:
            pool.shutdown(wait=True)

    def keep_artifacts(self, result: CrashRunResult,
                       entries: list[LogEntry]) -> list[tuple[Path, str]]:
        """Keep the log beside the results and crash images of the first failures; list them."""
        return self.files.keep(result, entries, self.sizes)


def death_watch(machine: Machine) -> Callable[[], str | None]:
    """Ends a command at once when the guest's kernel says it killed a task: a dead
    dm-log-writes thread (seen on 6.12.117) leaves the workload waiting on its writes for
    the command's whole timeout."""

    def watch() -> str | None:
        said = machine.kernel_death()
        return f"the guest kernel died: {said}" if said else None

    return watch


def progress_watch(results_path: Path, budget_s: float) -> Callable[[], str | None]:
    """A stall detector: no new result within one state's budget is a hang."""
    last = {"size": -1, "since": clock.monotonic()}

    def watch() -> str | None:
        try:
            size = results_path.stat().st_size
        except FileNotFoundError:
            size = 0
        now = clock.monotonic()
        if size != last["size"]:
            last["size"], last["since"] = size, now
            return None
        if now - last["since"] > budget_s + 30:
            return f"no crash state finished for {now - last['since']:.0f} s (budget {budget_s:g} s per state)"
        return None

    return watch


def checker_disks(sizes: dict[str, int], logs: dict[str, Path]) -> list[DiskSpec]:
    """The disks of a checking guest: each recorded log (read-only), and the disks its
    states are replayed onto and snapshotted on."""
    disks = [DiskSpec(name, path.stat().st_size, image=path, readonly=True)
             for name, path in logs.items()]
    names = [*CHECK_DISKS, *(JOURNAL_CHECK_DISKS if "journal-log" in logs else LANE_DISKS)]
    return disks + [DiskSpec(n, sizes[n]) for n in names]


def guest_files(machine: Machine, oracle: Path) -> Path:
    """Put the oracle where the guest can read it; return its results file."""
    copy = machine.rundir / rundir.ORACLE
    if not copy.exists():
        shutil.copyfile(oracle, copy)
    return machine.rundir / rundir.GUEST_RESULTS


def check_request(machine: Machine, target: Target, states: Sequence[CrashState], *,
                  budget_s: float, faults: Faults = NO_FAULTS,
                  measure: bool = False) -> CheckRequest:
    """The crash-check request for ``states`` on ``machine``: its log, replay and cow disks, the
    files guest_files() puts in its run directory, and step deadlines from the per-state
    ``budget_s``; ``measure``: the guest says what it spent (bench/crash.py). Crash runs,
    recheck and bench/crash.py all ask through here."""
    journal = (JournalDisks(machine.disk("journal-log"), machine.disk("journal-replay"),
                            machine.disk("journal-cow")) if target.needs_journal_disk else None)
    lanes: tuple[LaneDisks, ...] = ()
    if journal is None and len(states) > 1 and adapter_for(target.fstype).concurrent_copies_mount:
        try:
            lanes = (LaneDisks(*(machine.disk(name) for name in LANE_DISKS)),)
        except ScratchDeviceError:
            pass  # a guest without a second lane's disks checks one state at a time
    return CheckRequest(
        target=target, log_dev=machine.disk("log"), replay_dev=machine.disk("replay"),
        cow_dev=machine.disk("cow"), oracle_path=os.fspath(machine.rundir / rundir.ORACLE),
        results_path=os.fspath(machine.rundir / rundir.GUEST_RESULTS),
        states=tuple(StateRecipe.of(s) for s in states), timeouts=timeouts_for(budget_s),
        journal=journal, lanes=lanes, faults=faults, measure=measure)
