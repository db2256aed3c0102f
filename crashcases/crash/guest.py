"""Agent tasks of a crash run, performed inside the machine.

``crash-record``: dm-log-writes over the data disk, mkfs through it, mark
``mkfs``, mount, run the workload (marking after every durability op with
the in-process ioctl), unmount, remove the target. The oracle goes to the
shared run directory.

``crash-check``: replay the log onto the replay disk, advancing only
forward; for each state take a throwaway dm-snapshot of the replayed disk,
apply the variant's extra writes to the snapshot, check it, drop it. Each
result is appended to a JSON-lines file in the run directory as soon as it
is known, so the host keeps what was checked even if the guest hangs.

Requests carry the whole target, not its name: a target from the user's
own TOML file exists only on the host.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import gc
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crashcases.check import CheckResult, check_states, explain
from crashcases.crash.faults import NO_FAULTS, Faults
from crashcases.crash.lanes import Baton, Flag, LaneProcess, raise_first
from crashcases.oracle.log import OracleLog
from crashcases.oracle.verify import prepare
from crashcases.vocabulary import OTHER_READING_PASSED, Outcome, fails
from devicemapper.logformat import LogEntry, LogReader
from devicemapper.logindex import LogIndex
from devicemapper.replay import Replayer, apply_entries, zero_target
from devicemapper.snapshot import SnapshotSlot
from framework.core import agent, clock, rundir
from framework.core.command import HostRunner
from framework.core.errors import DeviceBusy
from recovery.filesystems import adapter_for, persistence_rules
from recovery.mount import Timeouts, mkfs, mounted
from recovery.persistence import PersistenceRules
from recovery.targets import Target, target_from_dict

if TYPE_CHECKING:  # the guest builds no crash state: points.py stays unread there
    from crashcases.crash.points import CrashState
    from crashcases.workload.ops import Workload
    from devicemapper.logwrites import LogWritesDevice

log = logging.getLogger(__name__)

RECORD_MOUNTPOINT = Path("/tmp/powercut/record")
CHECK_MOUNTPOINT = Path("/tmp/powercut/check")


# --- crash-record ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordRequest:
    """Record ``workload`` on ``target``: dm-log-writes from ``data_dev`` to ``log_dev``, and
    for a target whose journal has a disk of its own, from ``journal_dev`` to
    ``journal_log_dev``."""

    target: Target
    workload: Workload
    data_dev: str
    log_dev: str
    oracle_path: str  # where the guest writes the oracle (in the shared run directory)
    journal_dev: str | None = None
    journal_log_dev: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target.to_dict(), "workload": self.workload.to_json(),
                "data_dev": self.data_dev, "log_dev": self.log_dev, "oracle_path": self.oracle_path,
                "journal_dev": self.journal_dev, "journal_log_dev": self.journal_log_dev}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RecordRequest:
        from crashcases.workload.ops import Workload

        return cls(target_from_dict(raw["target"]), Workload.from_json(raw["workload"]),
                   str(raw["data_dev"]), str(raw["log_dev"]), str(raw["oracle_path"]),
                   raw.get("journal_dev"), raw.get("journal_log_dev"))


@dataclass(frozen=True, slots=True)
class RecordResult:
    entries: int  # log entries, the mkfs included
    log_bytes: int
    marks: int  # durability marks of the workload
    record_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RecordResult:
        return cls(int(raw["entries"]), int(raw["log_bytes"]), int(raw["marks"]),
                   float(raw["record_s"]))


def record(req: RecordRequest) -> RecordResult:
    # Imported here: the checking guest, which starts far more often, needs none of them.
    from crashcases.execute import MKFS_MARK, execute
    from devicemapper.delay import delayed_path
    from devicemapper.logwrites import recording

    runner = HostRunner()
    start = clock.monotonic()
    with contextlib.ExitStack() as stack:
        # A device profile's latency sits under the recorder (fs -> dm-log-writes -> dm-delay
        # -> disk): the workload runs at the modelled disk's pace, the log is the same.
        # Checking the crash states afterwards replays onto plain disks.
        data_dev = stack.enter_context(
            delayed_path(runner, req.data_dev, req.target.delays("data"), name="pc-delay-data"))
        lw = stack.enter_context(recording(runner, data_dev, req.log_dev))
        jlw = None
        if req.journal_dev is not None and req.journal_log_dev is not None:
            journal_dev = stack.enter_context(delayed_path(
                runner, req.journal_dev, req.target.delays("journal"), name="pc-delay-journal"))
            jlw = stack.enter_context(recording(runner, journal_dev, req.journal_log_dev,
                                                name="pc-logw-journal"))
        mark = lw.mark_fast if jlw is None else _marks_both(lw, jlw)
        mkfs(runner, req.target, lw.path, journal_dev=jlw.path if jlw else None)
        mark(MKFS_MARK)
        RECORD_MOUNTPOINT.mkdir(parents=True, exist_ok=True)
        with mounted(runner, req.target, lw.path, os.fspath(RECORD_MOUNTPOINT), timeout_s=120,
                     journal_dev=jlw.path if jlw else None):
            oracle = execute(req.workload, RECORD_MOUNTPOINT, mark)
        status = lw.status()
        if jlw is not None:
            jlw.check_not_full()
    Path(req.oracle_path).write_text(oracle.to_json())
    return RecordResult(entries=status.entries, log_bytes=status.next_sector * 512,
                        marks=len(oracle.marks), record_s=clock.monotonic() - start)


def _marks_both(data: LogWritesDevice, journal: LogWritesDevice) -> Callable[[str], None]:
    """Mark both logs: the data log, the journal log, the data log again (NAME +
    ORDER_SUFFIX). Nothing logged between the two data marks says the data disk
    completed nothing while the journal was marked (crashcases.crash.points.plan_two_disk_states)."""

    from crashcases.execute import ORDER_SUFFIX

    def mark(name: str) -> None:
        data.mark_fast(name)
        journal.mark_fast(name)
        data.mark_fast(name + ORDER_SUFFIX)

    return mark


CRASH_RECORD = agent.Task("crash-record", RecordRequest, RecordResult, record)


# --- crash-check -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DiskRecipe:
    """One disk's part of a state: replay its log to ``base``, apply ``extra`` on top."""

    base: int
    extra: tuple[int, ...] = ()
    torn: Mapping[int, tuple[int, int]] = field(default_factory=dict)  # entry -> sector range

    def to_dict(self) -> dict[str, Any]:
        return {"base": self.base, "extra": list(self.extra),
                "torn": {str(k): list(v) for k, v in self.torn.items()}}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> DiskRecipe:
        torn = {int(k): (int(v[0]), int(v[1])) for k, v in raw.get("torn", {}).items()}
        return cls(int(raw["base"]), tuple(int(i) for i in raw.get("extra", ())), torn)


@dataclass(frozen=True, slots=True)
class StateRecipe:
    """What the guest needs of a crash state: replay to ``base``, apply ``extra``, check;
    in a two-disk run the same for the journal disk (``journal``)."""

    key: str
    last_mark: str | None  # the oracle mark the state is checked against
    base: int
    extra: tuple[int, ...] = ()
    torn: Mapping[int, tuple[int, int]] = field(default_factory=dict)  # entry -> sector range
    journal: DiskRecipe | None = None
    #: The other reading of a state whose log cannot order a FUA write (points.order_alternate):
    #: entries applied on top of the data disk's state, and why.
    reorder: tuple[int, ...] = ()
    reorder_note: str = ""

    @classmethod
    def of(cls, state: CrashState) -> StateRecipe:
        j = state.journal
        return cls(state.key, state.point.last_mark, state.base, tuple(state.extra),
                   dict(state.torn), DiskRecipe(j.base, j.extra, dict(j.torn)) if j else None,
                   tuple(state.reorder), state.reorder_note)

    @property
    def data(self) -> DiskRecipe:
        """The data disk's part of the state, as the log orders it."""
        return DiskRecipe(self.base, self.extra, self.torn)

    @property
    def other_reading(self) -> DiskRecipe:
        """The data disk as the other order has it (the same base: no replay backwards)."""
        return DiskRecipe(self.base, (*self.extra, *self.reorder), self.torn)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "last_mark": self.last_mark, **self.data.to_dict(),
                "journal": self.journal.to_dict() if self.journal else None,
                **({"reorder": list(self.reorder), "reorder_note": self.reorder_note}
                   if self.reorder else {})}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> StateRecipe:
        data = DiskRecipe.from_dict(raw)
        journal = DiskRecipe.from_dict(raw["journal"]) if raw.get("journal") else None
        return cls(str(raw["key"]), raw["last_mark"], data.base, data.extra, data.torn, journal,
                   tuple(int(i) for i in raw.get("reorder", ())), str(raw.get("reorder_note", "")))


@dataclass(frozen=True, slots=True)
class JournalDisks:
    """A two-disk run's journal side in the checking guest: its log, the disk it is
    replayed onto and the snapshot's COW disk."""

    log_dev: str
    replay_dev: str
    cow_dev: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class LaneDisks:
    """A second checking lane's own disks: the log replayed onto ``replay_dev`` and the
    snapshot's COW disk. Each lane replays forward on its own disk and checks its share
    of the states, so two states are checked at once, one per guest CPU."""

    replay_dev: str
    cow_dev: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class CheckRequest:
    """Check ``states`` (in replay order) of the log on ``log_dev`` for ``target``; with
    ``lanes``, on that many more disks at the same time."""

    target: Target
    log_dev: str
    replay_dev: str
    cow_dev: str
    oracle_path: str
    results_path: str  # JSON lines, one CheckResult per state, appended as each is known
    states: tuple[StateRecipe, ...]
    timeouts: Timeouts = field(default_factory=Timeouts)
    journal: JournalDisks | None = None
    lanes: tuple[LaneDisks, ...] = ()  # single-disk targets: more lanes checking at once
    #: Faults to inject, their states named by key (crashcases.crash.faults): a check that
    #: blocks as a stuck mount would; another process holding a state's device open for a
    #: while (the lane waits it out) or for good (a harness error); the kernel panicking
    #: (sysrq c) as a state's check starts, as a kernel bug met by its mount would make it.
    faults: Faults = NO_FAULTS
    #: Say what the task spent, and where (CheckDone.summary): bench/crash.py asks.
    measure: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target.to_dict(), "log_dev": self.log_dev,
                "replay_dev": self.replay_dev, "cow_dev": self.cow_dev,
                "oracle_path": self.oracle_path, "results_path": self.results_path,
                "states": [s.to_dict() for s in self.states], "timeouts": asdict(self.timeouts),
                "journal": self.journal.to_dict() if self.journal else None,
                "lanes": [lane.to_dict() for lane in self.lanes],
                "faults": self.faults.to_dict(), "measure": self.measure}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> CheckRequest:
        journal = JournalDisks(**raw["journal"]) if raw.get("journal") else None
        return cls(target_from_dict(raw["target"]), str(raw["log_dev"]), str(raw["replay_dev"]),
                   str(raw["cow_dev"]), str(raw["oracle_path"]), str(raw["results_path"]),
                   tuple(StateRecipe.from_dict(s) for s in raw["states"]),
                   Timeouts(**raw.get("timeouts", {})), journal,
                   tuple(LaneDisks(**lane) for lane in raw.get("lanes", ())),
                   Faults.from_dict(raw.get("faults") or {}), bool(raw.get("measure")))


@dataclass(frozen=True, slots=True)
class CheckSummary:
    """What a crash-check task spent, and where: measurements for bench/crash.py, made only
    when the request asks for them."""

    checked: int
    replay_written_bytes: int
    replay_discarded_bytes: int
    entries_applied: int
    #: States whose disks held the same bytes as the state checked before them: checked on
    #: that state's mount, with its fsck (CheckResult.same_as).
    shared: int = 0
    #: Where the guest's time went: loading the oracle and indexing the logs' headers
    #: (wall), and, summed over the lanes, building each state and releasing it after its
    #: check (replay, snapshot, extra entries) and checking it (mount, oracle, tree read,
    #: fsck).
    setup_s: float = 0.0
    prepare_s: float = 0.0
    check_s: float = 0.0
    #: The same, finer (bench/crash.py's phase table): set-up is loading the oracle and,
    #: at the same time, indexing the log headers (each timed on its own, so the two add up
    #: to more than the set-up's wall time); building states, summed over the lanes, is replaying the
    #: log forward, making and removing each state's snapshot, and writing a state's extra
    #: entries onto it. wall_s is the task's own time, from its start to its summary.
    oracle_load_s: float = 0.0
    index_s: float = 0.0
    replay_s: float = 0.0
    snapshot_s: float = 0.0
    extra_s: float = 0.0
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> CheckSummary:
        seconds = {name: float(raw.get(name, 0.0)) for name in (
            "setup_s", "prepare_s", "check_s", "oracle_load_s", "index_s", "replay_s",
            "snapshot_s", "extra_s", "wall_s")}
        return cls(int(raw["checked"]), int(raw["replay_written_bytes"]),
                   int(raw["replay_discarded_bytes"]), int(raw["entries_applied"]),
                   int(raw.get("shared", 0)), **seconds)


@dataclass(frozen=True, slots=True)
class CheckDone:
    """The end of a crash-check task; the checks themselves are in the results file."""

    abandoned: bool  # a lane hung or failed: the guest stopped, nothing after it is trusted
    summary: CheckSummary | None = None  # only when the request asked (``measure``)

    def to_dict(self) -> dict[str, Any]:
        return {"abandoned": self.abandoned,
                "summary": self.summary.to_dict() if self.summary is not None else None}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> CheckDone:
        summary = raw.get("summary")
        return cls(bool(raw["abandoned"]),
                   CheckSummary.from_dict(summary) if summary is not None else None)


def content_changes(entries: Sequence[LogEntry]) -> list[int]:
    """``out[i]``: how many of the first ``i`` entries change the disk (writes, discards);
    two prefixes hold the same bytes when their counts are equal."""
    out = [0]
    for entry in entries:
        out.append(out[-1] + (entry.is_write or entry.is_discard))
    return out


class _Disk:
    """One recorded disk in the checking guest: its log replayed forward onto a disk and
    throwaway snapshots of that disk, one per state."""

    def __init__(self, stack: contextlib.ExitStack, runner: HostRunner, log_dev: str,
                 replay_dev: str, cow_dev: str, name: str, *, like: _Disk | None = None,
                 measure: bool = False) -> None:
        """``like``: a disk replaying the same log, whose header index this one shares."""
        self.log_dev, self.replay_dev = log_dev, replay_dev
        self.reader = stack.enter_context(LogReader(log_dev))
        # Headers only (five integers each, walked in C when it is built): payloads stay on
        # the log disk. A second lane, and every Replayer, reuses the first's.
        self.index: Sequence[LogEntry]
        self.changes: list[int]
        #: Seconds this disk spent on each part of building states (CheckSummary's names),
        #: when the request measures.
        self.spent = dict.fromkeys(("index_s", "replay_s", "snapshot_s", "extra_s"), 0.0) \
            if measure else None
        if like is not None:
            self.index, self.changes = like.index, like.changes
        else:
            t0 = clock.monotonic()
            index = LogIndex(self.reader)
            index.extend_to(self.reader.nr_entries)
            self.index, self.changes = index, index.content_changes()
            self._spend("index_s", clock.monotonic() - t0)
        self.rep = self._replayer()
        stack.callback(lambda: self.rep.close())
        self.slot = stack.enter_context(SnapshotSlot(runner, replay_dev, cow_dev, name=name))
        self.rewinds = 0

    def _spend(self, name: str, seconds: float) -> None:
        if self.spent is not None:
            self.spent[name] += seconds

    def _replayer(self) -> Replayer:
        index = self.index if isinstance(self.index, LogIndex) else None
        return Replayer(self.log_dev, self.replay_dev, index=index)

    def same_bytes(self, a: DiskRecipe, b: DiskRecipe) -> bool:
        """Whether two recipes leave this disk holding the same bytes: the same extra
        entries (torn alike) on bases with no write or discard between them."""
        return (a.extra == b.extra and dict(a.torn) == dict(b.torn)
                and self.changes[a.base + 1] == self.changes[b.base + 1])

    def move_to(self, base: int) -> None:
        t0 = clock.monotonic()
        try:
            self._move_to(base)
        finally:
            self._spend("replay_s", clock.monotonic() - t0)

    def _move_to(self, base: int) -> None:
        if base < 0:
            return
        if base < self.rep.position - 1:
            # Only journal-disk variants go back (the data disk's order is the plan's):
            # start again from a zeroed disk, as the recording did.
            self.rep.close()
            zero_target(self.replay_dev)
            self.rep = self._replayer()
            self.rewinds += 1
        if base >= self.rep.position:
            self.rep.replay_to(base)

    @contextlib.contextmanager
    def state(self, recipe: DiskRecipe) -> Iterator[str]:
        """A snapshot holding the disk as ``recipe`` has it; its path."""
        self.move_to(recipe.base)
        t0 = clock.monotonic()
        with self.slot.fresh() as snap:
            t1 = clock.monotonic()
            self._spend("snapshot_s", t1 - t0)
            if recipe.extra:
                fd = os.open(snap.path, os.O_RDWR | os.O_CLOEXEC)
                try:
                    torn = {k: range(*v) for k, v in recipe.torn.items()}
                    apply_entries([self.index[i] for i in recipe.extra], self.reader, fd, torn=torn)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                self._spend("extra_s", clock.monotonic() - t1)
            try:
                yield snap.path
            finally:
                t2 = clock.monotonic()
        self._spend("snapshot_s", clock.monotonic() - t2)


@dataclass(slots=True)
class _Lane:
    """A checking lane: its disks, its mountpoint, the runs of states it checks."""

    data: _Disk
    journal: _Disk | None
    mountpoint: Path
    target: Target  # as the lane mounts it
    runs: list[list[StateRecipe]] = field(default_factory=list)


def check(req: CheckRequest) -> CheckDone:
    start = clock.monotonic()
    runner = HostRunner()
    rules = persistence_rules(req.target)
    # The oracle is parsed, and what every check reads from it built, in a thread while
    # the first disk's log headers are indexed (a walk in C that lets other threads run):
    # on a long log each takes seconds in an emulated guest, and its two vCPUs do both at
    # once.
    loader = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="oracle-load")
    loading = loader.submit(_load_oracle, Path(req.oracle_path), rules)
    loader.shutdown(wait=False)  # the load runs on; nothing else is queued
    # Per process, when the request measures: a lane in a process of its own reports its
    # share at the end.
    tally: dict[str, float] | None = (
        {"checked": 0, "shared": 0, "prepare_s": 0.0, "check_s": 0.0} if req.measure else None)
    stop = Flag()  # a lane hung or failed: every lane stops after its current state
    baton = Baton()  # the lanes' writes to the results and started files, one at a time
    busy = req.faults.busy_seconds()
    panics = req.faults.panicking()
    started_path = Path(req.results_path).with_name(rundir.GUEST_STARTED)
    with contextlib.ExitStack() as stack, open(req.results_path, "a") as out, \
            open(started_path, "a") as started:
        try:
            data = _Disk(stack, runner, req.log_dev, req.replay_dev, req.cow_dev, "pc-snap",
                         measure=req.measure)
            journal = (_Disk(stack, runner, req.journal.log_dev, req.journal.replay_dev,
                             req.journal.cow_dev, "pc-snap-journal", measure=req.measure)
                       if req.journal else None)
            runs = list(same_content_runs(req.states, data, journal, req.faults.alone()))
            more = req.lanes[: max(0, len(runs) - 1)]
            # Dealt in turn, so the lanes stay near each other in the log and share the work
            # evenly (later states have fuller filesystems, so slower checks).
            shares: list[list[list[StateRecipe]]] = [runs[i::1 + len(more)]
                                                     for i in range(1 + len(more))]
        except BaseException:
            # The oracle is read first, as it was before the two were done at once: a bad
            # oracle is the error to report, not a log disk that fails after it.
            failed = loading.exception()
            if failed is not None:
                raise failed from None
            raise
        oracle, oracle_load_s = loading.result()
        setup_s = clock.monotonic() - start

        def check_lane(lane: _Lane) -> None:
            for group in lane.runs:
                if stop.is_set():
                    return
                first = group[0]
                with baton:
                    # What is in flight when the guest dies: the host checks exactly those
                    # states again, alone (begun here, no result yet).
                    started.write("".join(f"{s.key}\n" for s in group))
                    started.flush()
                    os.fsync(started.fileno())
                if first.key == req.faults.hang:
                    # Fault injection for testing the host's hang handling: block
                    # the way a mount stuck in the kernel would.
                    runner.run(["sleep", "86400"], timeout_s=90000)
                if first.key in panics:
                    # Fault injection: the kernel dies here, as one a state's mount
                    # meets a bug in would (Documentation/admin-guide/sysrq.rst: 'c').
                    Path("/proc/sysrq-trigger").write_text("c")
                try:
                    # Faults outlive the disks: an injected holder is there when the lane
                    # lets go of the device.
                    with contextlib.ExitStack() as faults, contextlib.ExitStack() as disks:
                        t0 = clock.monotonic()
                        dev = disks.enter_context(
                            lane.data.state(first.data))
                        if first.key in busy:
                            faults.enter_context(_held_open(dev, busy[first.key]))
                        journal_dev = (disks.enter_context(lane.journal.state(first.journal))
                                       if lane.journal is not None and first.journal is not None
                                       else None)
                        t1 = clock.monotonic()
                        results = check_states(runner, lane.target, dev, lane.mountpoint,
                                               oracle=oracle,
                                               states=[(s.key, s.last_mark) for s in group],
                                               rules=rules, timeouts=req.timeouts,
                                               journal_dev=journal_dev, quick_fsck=True)
                        t2 = clock.monotonic()
                    if results[0].outcome is not Outcome.HANG:
                        # Its disks released: the other reading takes the lane's snapshot.
                        results = _other_readings(group, results, lane, check_other)
                        t2 = clock.monotonic()
                except DeviceBusy as exc:
                    # A mount or device that stays busy is the harness's problem, not the
                    # filesystem's: say so for this state and give up this guest, whose lane
                    # cannot go on; the host checks the state again on a fresh one.
                    error = CheckResult(key=first.key, outcome=Outcome.ERROR,
                                        notes=[str(exc)])
                    error.explanation = explain(error)
                    with baton:
                        out.write(json.dumps(error.to_dict(), sort_keys=True) + "\n")
                        out.flush()
                        os.fsync(out.fileno())
                    stop.set()
                    return
                t3 = clock.monotonic()  # the state's disks and snapshots released
                if tally is not None:
                    tally["prepare_s"] += (t1 - t0) + (t3 - t2)
                    tally["check_s"] += t2 - t1
                    tally["checked"] += len(results)
                    tally["shared"] += len(results) - 1
                with baton:
                    for result in results:
                        out.write(json.dumps(result.to_dict(), sort_keys=True) + "\n")
                    out.flush()
                    os.fsync(out.fileno())
                if results[0].outcome is Outcome.HANG:
                    # Something in the kernel is stuck; nothing more here is trustworthy.
                    stop.set()
                    return

        def check_other(lane: _Lane, recipe: StateRecipe,
                        states: list[tuple[str, str | None]]) -> list[CheckResult]:
            """``states`` (one content) checked on the other reading of ``recipe``."""
            with contextlib.ExitStack() as disks:
                dev = disks.enter_context(lane.data.state(recipe.other_reading))
                journal_dev = (disks.enter_context(lane.journal.state(recipe.journal))
                               if lane.journal is not None and recipe.journal is not None
                               else None)
                return check_states(runner, lane.target, dev, lane.mountpoint, oracle=oracle,
                                    states=states, rules=rules, timeouts=req.timeouts,
                                    journal_dev=journal_dev, quick_fsck=True)

        # A second copy of the filesystem mounted beside the first may need an option to be
        # mounted at all (xfs: nouuid); the first lane mounts the target as it is.
        second = dataclasses.replace(req.target, mount_options=(
            *req.target.mount_options, *adapter_for(req.target.fstype).second_copy_mount_options))

        def other_lane(n: int, disks: LaneDisks, share: list[list[StateRecipe]]) -> dict[str, Any]:
            """Lane ``n``, in its own process: its disks opened and released there."""
            with contextlib.ExitStack() as own:
                disk = _Disk(own, runner, req.log_dev, disks.replay_dev, disks.cow_dev,
                             f"pc-snap-{n}", like=data, measure=req.measure)
                check_lane(_Lane(disk, None, CHECK_MOUNTPOINT.with_name(f"check-{n}"), second,
                                 share))
            return _lane_report(tally, [disk])

        lane = _Lane(data, journal, CHECK_MOUNTPOINT, req.target, shares[0])
        reports: list[dict[str, Any]] = []
        if more:
            # Each lane past the first is a process of its own, forked once everything they
            # share is built (the oracle, the log's index): the lanes' Python work (the oracle
            # check, the tree read) runs on both CPUs at once instead of in turns under one
            # interpreter lock. What a forked lane would otherwise ask again, it inherits.
            _warm_static_checkers(req.target)
            out.flush()
            started.flush()
            gc.freeze()  # the collector leaves the shared objects' pages unwritten in the forks
            others = [LaneProcess(n, functools.partial(other_lane, n, disks, share), stop)
                      for n, (disks, share) in enumerate(zip(more, shares[1:]), 2)]
            try:
                check_lane(lane)
            except BaseException:
                stop.set()  # the other lanes stop after their current state
                for other in others:
                    with contextlib.suppress(Exception):
                        other.wait()
                raise
            reports = [other.wait() for other in others]
            raise_first(others)
        else:
            check_lane(lane)
        own = _lane_report(tally, [d for d in (data, journal) if d is not None])
    if tally is None:
        return CheckDone(stop.is_set())
    total = _add_lane_reports([own, *reports])
    counts = total["tally"]
    return CheckDone(stop.is_set(), CheckSummary(
        checked=int(counts["checked"]), replay_written_bytes=total["written"],
        replay_discarded_bytes=total["discarded"], entries_applied=total["applied"],
        shared=int(counts["shared"]), setup_s=setup_s, prepare_s=counts["prepare_s"],
        check_s=counts["check_s"], oracle_load_s=oracle_load_s,
        wall_s=clock.monotonic() - start, **total["spent"]))


def _other_readings(group: Sequence[StateRecipe], results: list[CheckResult], lane: _Lane,
                    check_other: Callable[[_Lane, StateRecipe, list[tuple[str, str | None]]],
                                          list[CheckResult]]) -> list[CheckResult]:
    """``results`` of ``group``, each failing state that has another reading of its log
    (``StateRecipe.reorder``) checked again on it. A state that passes there is not a
    finding: the log cannot say which of its two orders the disk saw; its result is the
    other reading's, with a note of the failure in the log's order. One that fails there
    too keeps its result, with a note that the failure holds in both orders."""
    recipes = {s.key: s for s in group}
    failing = [r for r in results if recipes[r.key].reorder and fails(r.outcome, lane.target)]
    by_reading: dict[tuple[int, ...], list[CheckResult]] = {}
    for r in failing:
        by_reading.setdefault(recipes[r.key].reorder, []).append(r)
    if not by_reading:
        return results
    out = {r.key: r for r in results}
    for reorder, firsts in by_reading.items():
        recipe = recipes[firsts[0].key]
        again = check_other(lane, recipe, [(r.key, recipes[r.key].last_mark) for r in firsts])
        for first, other in zip(firsts, again):
            if fails(other.outcome, lane.target):
                first.notes.append(
                    f"fails in both orders: {recipe.reorder_note}; with entries "
                    f"{', '.join(map(str, reorder))} applied again on top it fails too "
                    f"({other.outcome.value})")
                continue
            said = first.explanation or first.outcome.value
            other.notes.insert(0, (
                f"{OTHER_READING_PASSED}{recipe.reorder_note}. In the log's order this state fails "
                f"({said}); with entries {', '.join(map(str, reorder))} applied again on "
                f"top, the order the log cannot rule out, it is {other.outcome.value}."))
            other.explanation = explain(other) if other.outcome is not Outcome.OK else ""
            out[first.key] = other
    return [out[r.key] for r in results]


def _lane_report(tally: dict[str, float] | None, disks: Sequence[_Disk]) -> dict[str, Any]:
    """What a lane did, as JSON-ready data: its tally, and the replay seconds, bytes and
    entries of its disks (nothing when the request does not measure). A forked lane sends
    it to the first, which adds them all up."""
    spent = [d.spent for d in disks if d.spent is not None]
    if tally is None or not spent:
        return {}
    return {"tally": dict(tally),
            "spent": {name: sum(s[name] for s in spent) for name in spent[0]},
            "written": sum(d.rep.bytes_written for d in disks),
            "discarded": sum(d.rep.bytes_discarded for d in disks),
            "applied": sum(d.rep.entries_applied for d in disks)}


def _add_lane_reports(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The lanes' reports added up, field by field (a tally and the seconds by name)."""
    total: dict[str, Any] = {}
    for key, value in reports[0].items():
        if isinstance(value, dict):
            total[key] = {name: sum(r[key][name] for r in reports) for name in value}
        else:
            total[key] = sum(r[key] for r in reports)
    return total


def _warm_static_checkers(target: Target) -> None:
    """Ask once, before the lanes fork, whether the static checkers may stand in (each
    process would otherwise ask for itself: two commands each)."""
    from recovery.fsck import static_build

    for program, static in adapter_for(target.fstype).static_checkers:
        static_build(program, static)


def _load_oracle(path: Path, rules: PersistenceRules) -> tuple[OracleLog, float]:
    """The oracle log at ``path``, prepared for checks under ``rules``, and the seconds
    that took."""
    t0 = clock.monotonic()
    oracle = OracleLog.load(path)
    prepare(oracle, rules)
    return oracle, clock.monotonic() - t0


CRASH_CHECK = agent.Task("crash-check", CheckRequest, CheckDone, check)


@contextlib.contextmanager
def _held_open(dev: str, seconds: float | None) -> Iterator[None]:
    """Fault injection: another process holds ``dev`` open for ``seconds`` from now (None:
    until the block ends), as a process that forked while a lane had it open would."""
    script = (f"import os, time\nfd = os.open({dev!r}, os.O_RDONLY)\nprint('held', flush=True)\n"
              f"time.sleep({seconds or 86400.0!r})\n")
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            proc.stdout.readline()  # open before the check starts
            yield
        finally:
            proc.kill()


def same_content_runs(states: Sequence[StateRecipe], data: _Disk, journal: _Disk | None,
                      alone: Collection[str] = ()) -> Iterator[list[StateRecipe]]:
    """``states`` in order, in runs of consecutive states whose disks hold the same bytes
    (no write or discard between their bases on any disk, the same extra entries): a run
    is mounted and fscked once (check_states). A fault-injection state (``alone``) stands
    alone."""
    group: list[StateRecipe] = []
    for state in states:
        if group and state.key not in alone and group[0].key not in alone \
                and _same_bytes(group[-1], state, data, journal):
            group.append(state)
            continue
        if group:
            yield group
        group = [state]
    if group:
        yield group


def _same_bytes(a: StateRecipe, b: StateRecipe, data: _Disk, journal: _Disk | None) -> bool:
    if not data.same_bytes(a.data, b.data):
        return False
    if a.journal is None or b.journal is None or journal is None:
        return a.journal is None and b.journal is None
    return journal.same_bytes(a.journal, b.journal)




def parse_started(path: Path) -> list[str]:
    """Keys of the states a (possibly killed) crash-check task began, in order: the lines
    of its results file's ``started.txt`` neighbour (a torn last line is dropped)."""
    try:
        text = path.with_name(rundir.GUEST_STARTED).read_text()
    except FileNotFoundError:
        return []
    return text.split("\n")[:-1]


def parse_results(path: Path) -> list[CheckResult]:
    """Results a (possibly killed) crash-check task managed to write."""
    out: list[CheckResult] = []
    try:
        text = path.read_text()
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        try:
            out.append(CheckResult.from_dict(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            break  # a torn last line: the guest died while writing it
    return out
