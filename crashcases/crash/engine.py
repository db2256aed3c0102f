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
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gzip
import itertools
import json
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from crashcases.check import CheckResult
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
    CrashPlan,
    CrashRunResult,
    MachineFactory,
    disk_sizes,
    load_state,
    reproducer_command,
    timeouts_for,
    validate_plan,
    write_json_lines,
)
from crashcases.crash.points import (
    CrashState,
    DiskState,
    distinct_marks,
    enumerate_points,
    parse_variants,
    plan_states,
    plan_two_disk_states,
)
from crashcases.group import FindingGroup, Grouper, group_states
from crashcases.known import KnownList, KnownMatcher, guest_kernel, recorded_marks
from crashcases.oracle.log import OracleError, OracleLog
from crashcases.vocabulary import Outcome, Rate, fails
from crashcases.workload.ops import Workload
from devicemapper.logformat import LogEntry, LogReader
from devicemapper.replay import Replayer, apply_entries
from framework.core import agent, clock, rundir
from framework.core.errors import (
    MachineError,
    PowercutError,
    ScratchDeviceError,
)
from framework.core.lifecycle import Run, RunSpec
from framework.core.machine.base import DiskSpec, Machine
from framework.core.machine.slot import GuestLost, GuestSlot, Verdict, boot_retrying
from framework.core.rundir import write_json_atomic
from framework.core.store import Store
from recovery.disks import throttle
from recovery.filesystems import adapter_for, tool_versions
from recovery.targets import Target

log = logging.getLogger(__name__)


class CrashEngine:
    def __init__(self, plan: CrashPlan, run_dir: Path, factory: MachineFactory,
                 progress: Callable[[int, int, CheckResult | None], None] | None = None,
                 sink: Callable[[CheckResult], None] | None = None,
                 checked: tuple[Target, Workload] | None = None) -> None:
        self.plan = plan
        self.sink = sink
        self.run_dir = run_dir
        self.factory = factory
        self.progress = progress or (lambda done, total, r: None)
        # ``checked``: validate_plan() already ran (run_crash validates first).
        self.target, self.workload = checked or validate_plan(plan)
        self.sizes = disk_sizes(self.target, plan.data_mib)
        self.two_disks = self.target.needs_journal_disk
        self.fstypes = (self.target.fstype,)
        #: Two-disk runs: states left out because their halves may never have coexisted.
        self.unexplored: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()  # set on Ctrl-C: workers end, nothing counts as a hang
        self._slots: set[GuestSlot] = set()
        self.inject_key: str | None = None
        self.inject_busy_key: str | None = None
        self.inject_panic_key: str | None = None
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

    # -- recording ----------------------------------------------------------

    def record(self) -> tuple[Machine, dict[str, Any]]:
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
        machine = boot_retrying(lambda: self.factory(disks, self.run_dir / "vm-0", self.fstypes),
                                "recording guest")
        # The guest writes only into its run directory (the rest of the host
        # is read-only or hidden there).
        request = RecordRequest(self.target, workload, data_dev=machine.disk("data"),
                                log_dev=machine.disk("log"),
                                oracle_path=os.fspath(machine.rundir / rundir.ORACLE),
                                journal_dev=machine.disk("journal") if self.two_disks else None,
                                journal_log_dev=machine.disk("journal-log") if self.two_disks else None)
        try:
            recorded = agent.perform(machine, CRASH_RECORD, request, timeout_s=3600)
            shutil.copyfile(machine.rundir / rundir.ORACLE, self.oracle_path)
            info = {**recorded.to_dict(), "workload": workload.name, "ops": len(workload.ops)}
            # What each log holds, so that a later recheck, export or --resume can tell a
            # damaged or replaced log from the recorded one.
            for path in self._logs().values():
                info[path.name + rundir.DIGEST_SUFFIX] = rundir.content_digest(path)
            # Written last: its presence says the recording is whole (what --resume reuses).
            write_json_atomic(self.run_dir / rundir.RECORD, info)
        except BaseException:
            machine.close()
            raise
        return machine, info

    # -- resuming -----------------------------------------------------------

    def saved_record(self) -> dict[str, Any] | None:
        """The whole recording an interrupted run left (its info), or None: record again."""
        kept = self.run_dir / rundir.LOG
        if kept.exists() and not self.log_path.exists():  # killed while keeping artifacts
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            os.replace(kept, self.log_path)
        if self.two_disks:
            kept_journal = self.run_dir / rundir.JOURNAL_LOG
            if kept_journal.exists() and not self.journal_log_path.exists():
                os.replace(kept_journal, self.journal_log_path)
        if not (self.log_path.exists() and self.oracle_path.exists()
                and (self.run_dir / rundir.RECORD).exists()
                and (not self.two_disks or self.journal_log_path.exists())):
            return None
        info: dict[str, Any] = rundir.read_json_object(self.run_dir / rundir.RECORD,
                                                       "recording's summary")
        for name in self._logs():
            rundir.verified_log(self.run_dir, rundir.JOURNAL_LOG if name == "journal-log"
                                else rundir.LOG)
        return info

    def harvest(self) -> dict[str, CheckResult]:
        """Every state result an interrupted run left on disk (by key), gathered into one file.

        The guests append a line per state to their results files, so a run killed with
        SIGKILL still has everything its guests finished; results.json holds what an
        interrupted run saved. Guest directories are cleared for the guests to come."""
        found: dict[str, CheckResult] = {}
        saved = self.run_dir / rundir.RESULTS
        if saved.exists():
            try:
                for s in json.loads(saved.read_text()).get("states", []):
                    if s.get("result"):
                        found[s["key"]] = CheckResult.from_dict(s["result"])
            except (ValueError, KeyError, TypeError, AttributeError):
                log.warning("%s: unreadable, its results are checked again", saved)
        for path in (self.run_dir / rundir.HARVEST, *sorted(self.run_dir.glob(f"vm-*/{rundir.GUEST_RESULTS}"))):
            for r in parse_results(path):
                found[r.key] = r
        write_json_lines(self.run_dir / rundir.HARVEST, [r.to_dict() for r in found.values()])
        for vm in self.run_dir.glob("vm-*"):
            if vm.name == "vm-0":  # the recording's disks, the log among them
                for name in (rundir.GUEST_RESULTS, rundir.ORACLE):
                    (vm / name).unlink(missing_ok=True)
            else:
                shutil.rmtree(vm, ignore_errors=True)
        return found

    @property
    def log_path(self) -> Path:
        return self.run_dir / rundir.RECORDING_DISKS / rundir.LOG

    @property
    def journal_log_path(self) -> Path:
        return self.run_dir / rundir.RECORDING_DISKS / rundir.JOURNAL_LOG

    @property
    def oracle_path(self) -> Path:
        return self.run_dir / rundir.ORACLE

    # -- planning -----------------------------------------------------------

    def entries(self) -> list[LogEntry]:
        with LogReader(self.log_path) as reader:
            return list(reader)

    def plan_states(self, entries: list[LogEntry]) -> list[CrashState]:
        oracle = OracleLog.load(self.oracle_path)
        marks = oracle.marks
        only = None
        if self.plan.points == "distinct":
            only = distinct_marks(oracle.ops, ((m.name, m.op) for m in oracle.mark_records))
            log.info("--points distinct: %d of %d marks have a window of their own",
                     len(only), len(marks))
        points = enumerate_points(entries, self.plan.points, workload_marks=marks,
                                  seed=self.plan.seed, only=only)
        if not self.two_disks:
            return plan_states(entries, points, self.plan.variants, workload_marks=marks,
                               seed=self.plan.seed, per_point=self.plan.per_point)
        with LogReader(self.journal_log_path) as reader:
            journal_entries = list(reader)
        states, self.unexplored = plan_two_disk_states(
            entries, journal_entries, points, self.plan.variants, workload_marks=marks,
            seed=self.plan.seed, per_point=self.plan.per_point)
        for why, n in self.unexplored.items():
            log.info("%d states left out: %s", n, why)
        return states

    # -- checking -----------------------------------------------------------

    def _logs(self) -> dict[str, Path]:
        logs = {"log": self.log_path}
        if self.two_disks:
            logs["journal-log"] = self.journal_log_path
        return logs

    def _checker(self, shard: int) -> Machine:
        return self.factory(checker_disks(self.sizes, self._logs()),
                            self.run_dir / f"vm-{shard + 1}", self.fstypes)

    def check_shard(self, shard: int, states: list[CrashState], machine: Machine | None,
                    total: int) -> None:
        slot = GuestSlot(lambda: self._checker(shard), name=f"checking guest {shard + 1}")
        slot.adopt(machine)
        with self._lock:
            self._slots.add(slot)
        todo = list(states)
        try:
            while todo and not self._stop.is_set():
                results_path = guest_files(slot.machine(), self.oracle_path)
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
        target = self.target
        by_key = {s.key: s for s in result.states}
        new = [g for g in result.findings
               if result.known is None or not all(result.known.is_known(k) for k in g.states)]
        slot = GuestSlot(lambda: self.factory(checker_disks(self.sizes, self._logs()),
                                              self.run_dir / "vm-rerun", self.fstypes),
                         name="rerun guest")
        try:
            for group in new[:self.plan.max_reruns]:
                state = by_key[group.representative]
                failed = 1  # the first check
                for attempt in range(1, self.plan.reruns + 1):
                    again = self._recheck(slot, state)
                    bad = fails(again.outcome, target)
                    failed += bad
                    if run.store is not None and run.run_id is not None:
                        run.store.add_rerun(run.run_id, state.key, attempt=attempt,
                                            outcome=again.outcome, failed=bad,
                                            findings=again.findings)
                group.rate = Rate(failed, 1 + self.plan.reruns)
                log.info("finding %s: %s", group.representative, group.rate.words())
        finally:
            slot.close()
            shutil.rmtree(self.run_dir / "vm-rerun", ignore_errors=True)

    def _recheck(self, slot: GuestSlot, state: CrashState) -> CheckResult:
        """``state`` checked once more in ``slot``'s guest (a hang is the result)."""
        budget = self.plan.check_timeout_s
        losses: list[GuestLost] = []
        while True:
            results_path = guest_files(slot.machine(), self.oracle_path)
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
            if self.inject_panic_key:  # an injected "once" panic is spent
                self.inject_panic_key = ",".join(
                    item for item in self.inject_panic_key.split(",")
                    if not (item.endswith("@once") and
                            item.partition("@")[0] in {s.key for s in pending})) or None
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
            losses = self.losses.setdefault(result.key, [])
            # An injected fault is injected once: the fresh guest checks the state as it is.
            if self.inject_busy_key:
                self.inject_busy_key = ",".join(
                    item for item in self.inject_busy_key.split(",")
                    if item.partition("@")[0] != result.key) or None
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
                machine, self.target, chunk, budget_s=budget, inject_hang=self.inject_key,
                inject_busy=self.inject_busy_key, inject_panic=self.inject_panic_key),
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
        self.inject_key = injected_key(self.plan.inject_hang, states)
        self.inject_busy_key = ",".join(
            f"{injected_key(key, states)}{at}{seconds}"
            for key, at, seconds in (item.partition("@")
                                     for item in (self.plan.inject_busy or "").split(",") if item)
        ) or None
        self.inject_panic_key = ",".join(
            f"{injected_key(key, states)}{at}{how}"
            for key, at, how in (item.partition("@")
                                 for item in (self.plan.inject_panic or "").split(",") if item)
        ) or None
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

    # -- artifacts ----------------------------------------------------------

    def keep_artifacts(self, result: CrashRunResult,
                       entries: list[LogEntry]) -> list[tuple[Path, str]]:
        """Keep the log beside the results and crash images of the first failures; list them."""
        final_log = self.run_dir / rundir.LOG
        if self.log_path.exists():
            os.replace(self.log_path, final_log)
        kept = [(final_log, "log")]
        final_journal_log = self.run_dir / rundir.JOURNAL_LOG
        if self.two_disks:
            if self.journal_log_path.exists():
                os.replace(self.journal_log_path, final_journal_log)
            kept.append((final_journal_log, "journal-log"))
        for vm in self.run_dir.glob("vm-*"):
            shutil.rmtree(vm, ignore_errors=True)
        bad = [s for s in result.states
               if s.key in result.results and result.results[s.key].outcome is not Outcome.OK
               and result.results[s.key].outcome is not Outcome.RECOVERED]
        for state in bad[: self.plan.max_images]:
            image = self.run_dir / rundir.state_image(state.key)
            write_image(final_log, entries, state, image, self.sizes["data"])
            kept.append((image, "crash-image"))
            if state.journal is not None:
                jimage = self.run_dir / rundir.state_image(state.key, "journal")
                with LogReader(final_journal_log) as reader:
                    jentries = list(reader)
                write_image(final_journal_log, jentries, state.journal, jimage,
                            self.sizes["journal"])
                kept.append((jimage, "crash-image"))
        return kept


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


def injected_key(inject: str | None, states: Sequence[CrashState]) -> str | None:
    """The state a fault-injection option names: "#N" is the N-th state, else a key."""
    if inject and inject.startswith("#") and inject[1:].isdigit() and 0 < int(inject[1:]) <= len(states):
        return states[int(inject[1:]) - 1].key
    return inject


def check_request(machine: Machine, target: Target, states: Sequence[CrashState], *,
                  budget_s: float, inject_hang: str | None = None,
                  inject_busy: str | None = None,
                  inject_panic: str | None = None) -> CheckRequest:
    """The crash-check request for ``states`` on ``machine``: its log, replay and cow disks, the
    files guest_files() puts in its run directory, and step deadlines from the per-state
    ``budget_s``. Crash runs, recheck and bench/crash.py all ask through here."""
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
        inject_hang=inject_hang, inject_busy=inject_busy, journal=journal, lanes=lanes,
        inject_panic=inject_panic)


def write_image(log_path: Path, entries: list[LogEntry], state: CrashState | DiskState, out: Path,
                size_bytes: int) -> None:
    """The crash state (or a two-disk state's journal disk) as a gzip-compressed raw image
    (the bytes before mount)."""
    raw = out.with_suffix("")
    with open(raw, "wb") as f:
        f.truncate(size_bytes)
    with Replayer(log_path, raw) as rep:
        if state.base >= 0:
            rep.replay_to(state.base)
    if state.extra:
        with LogReader(log_path) as reader:
            fd = os.open(raw, os.O_RDWR)
            try:
                torn = {k: range(*v) for k, v in state.torn.items()}
                apply_entries([entries[i] for i in state.extra], reader, fd, torn=torn)
            finally:
                os.close(fd)
    with open(raw, "rb") as src, gzip.open(out, "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    raw.unlink()


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
    return RunSpec("crash", f"crash {plan.target} {plan.case}", plan=asdict(plan),
                   seeds={"workload": plan.seed}, targets={target.name: target.to_dict()},
                   tool_versions=tool_versions([target.fstype]))


def run_crash(plan: CrashPlan, run: Run, factory: MachineFactory,
              progress: Callable[[int, int, CheckResult | None], None] | None = None,
              on_planned: Callable[[int], None] | None = None,
              checked: tuple[Target, Workload] | None = None,
              known: KnownList | None = None, resume: bool = False) -> CrashRunResult:
    """Record, plan and check inside ``run``; every result is stored as soon as it is known.

    ``checked``: what validate_plan() returned, when the caller validated
    before opening the run (so that bad options create no run). ``known``:
    the known-behaviour list that states are judged against. ``resume``: ``run``
    is an interrupted run reopened; its whole recording is reused (else made
    again) and states it checked are not checked again."""
    start = clock.monotonic()
    checked = checked or validate_plan(plan)
    sink: StoreSink | None = None
    if run.store is not None and run.run_id is not None:
        sink = StoreSink(run.store, run.run_id, plan, run.run_dir)

    def booted(disks: Sequence[DiskSpec], rundir: Path, fstypes: tuple[str, ...]) -> Machine:
        return run.started(factory(disks, rundir, fstypes))

    engine = CrashEngine(plan, run.run_dir, booted, progress, sink, checked)
    saved = engine.saved_record() if resume else None
    machine: Machine | None = None
    if saved is not None:
        info = saved
    else:
        for stale in (engine.run_dir / rundir.HARVEST, engine.run_dir / rundir.RESULTS):
            stale.unlink(missing_ok=True)  # results of another recording mean nothing here
        shutil.rmtree(engine.run_dir / "vm-0", ignore_errors=True)
        machine, info = engine.record()
    result = CrashRunResult(run.run_dir, plan, info, [], run_id=run.run_id)
    if known is not None:
        # The recording guest has booted: its kernel release is in the run's environment.
        result.known = known.matcher(
            run="crash", target=checked[0], case=plan.case, kernel=guest_kernel(run.environment),
            marks=recorded_marks(OracleLog.load(engine.oracle_path)),
            variants=[k.value for k in (*parse_variants(plan.variants),
                                        *parse_variants(plan.variants, journal=True))])
        if sink is not None:
            sink.known = result.known
    entries: list[LogEntry] = []
    try:
        entries = engine.entries()
        result.states = engine.plan_states(entries)
        result.unexplored = dict(engine.unexplored)
        if sink is not None:
            sink.recorded(info, result.states, Grouper(
                checked[0].fstype, checked[1], OracleLog.load(engine.oracle_path)))
        if on_planned:
            on_planned(len(result.states))
        todo = result.states
        if saved is not None:
            earlier = engine.harvest()
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
            result.findings = group_findings(result, checked[1],
                                             OracleLog.load(engine.oracle_path))
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
                result.findings = group_findings(
                    result, checked[1], OracleLog.load(engine.oracle_path))
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


def save_results(result: CrashRunResult, run: Run) -> None:
    # "counts" are raw outcomes; a state that known behaviour explains keeps its raw
    # outcome in "result" and has "known": {"known": true, "ids": [...]} beside it.
    known = result.known
    data = {
        "plan": asdict(result.plan), "record": result.record, "wall_s": result.wall_s,
        "replacements": result.replacements, "counts": result.counts(),
        "findings": [{**g.to_dict(), "known": bool(known is not None and all(
            known.is_known(k) for k in g.states))} for g in result.findings],
        "harness_errors": [{"state": key, "error": why} for key, why in result.harness_errors],
        "unexplored": result.unexplored, "shared": result.shared(),
        "known": known.report() if known is not None else None,
        "states": [
            {**s.to_dict(), "result": result.results[s.key].to_dict() if s.key in result.results else None,
             "reproducer": reproducer_command(result.run_dir, s.key),
             "known": (known.verdicts[s.key].to_dict()
                       if known is not None and s.key in known.verdicts else None)}
            for s in result.states
        ],
    }
    run.save_results(data)


# -- reproducers --------------------------------------------------------------


def recheck(run_dir: Path, key: str, factory: MachineFactory) -> tuple[Target, CheckResult]:
    """Rebuild and check one state of a finished run; returns its target and the result."""
    plan, state = load_state(run_dir, key)
    target = plan.spec
    sizes = disk_sizes(target, plan.data_mib)
    logs = {"log": rundir.verified_log(run_dir)}
    if target.needs_journal_disk:
        logs["journal-log"] = rundir.verified_log(run_dir, rundir.JOURNAL_LOG)
    scratch = run_dir / f"recheck-{uuid.uuid4().hex[:6]}"
    machine = factory(checker_disks(sizes, logs), scratch, (target.fstype,))
    try:
        results_path = guest_files(machine, run_dir / rundir.ORACLE)
        agent.perform(machine, CRASH_CHECK,
                      check_request(machine, target, [state], budget_s=plan.check_timeout_s),
                      timeout_s=plan.check_timeout_s + 120)
        results = parse_results(results_path)
    except MachineError as exc:
        results = [CheckResult(key=key, outcome=Outcome.HANG, notes=[str(exc)])]
    finally:
        machine.close()
        shutil.rmtree(scratch, ignore_errors=True)
    if not results:
        raise PowercutError(f"recheck of {key}: the guest returned no result")
    return target, results[0]
