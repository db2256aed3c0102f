"""The crash engine's host side with fake guests: sharding, hangs, replacement."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from crashcases.crash.engine import (
    CrashEngine,
    check_request,
    checker_disks,
    progress_watch,
)
from crashcases.crash.guest import (
    CheckDone,
    CheckRequest,
    LaneDisks,
    RecordRequest,
    RecordResult,
)
from crashcases.crash.plan import (
    CrashPlan,
    ValidatedPlan,
    disk_sizes,
    timeouts_for,
    validate_plan,
)
from crashcases.crash.points import CrashPoint, CrashState, Variant, Variants
from crashcases.crash.run import recheck
from crashcases.vocabulary import CrashPointKind, Outcome, VariantKind
from crashcases.workload.cases import load_case
from framework.core import agent, rundir
from framework.core.errors import ConfigError, ConsoleTimeout, GuestDied
from framework.core.machine.fake import FakeMachine
from framework.core.rundir import GUEST_STARTED
from recovery.filesystems import adapter_for
from recovery.targets import Target, get_target, target_from_dict


def states(n: int) -> list[CrashState]:
    return [CrashState(CrashPoint(i, CrashPointKind.MARK, f"pc-{i}", i - 1), Variant(VariantKind.PREFIX), i)
            for i in range(n)]


class Guests:
    """A factory of fake guests whose crash-check task writes one result line per state.

    ``hang_at`` makes the check of that state report a hang (the guest then
    stops, as the real agent does); ``stall_at`` makes the guest stop answering.
    """

    def __init__(self, tmp: Path, hang_at: str = "", stall_at: str = "",
                 interrupt_at: str = "", die_at: dict[str, list[bool]] | None = None,
                 lanes: int = 0) -> None:
        self.tmp, self.hang_at, self.stall_at = tmp, hang_at, stall_at
        #: 0: the guest says nothing of what it began (as a guest that dies in its set-up);
        #: 1 or 2: it marks each state begun, on that many lanes (the next state with it).
        self.lanes = lanes
        #: State key -> how the guest dies at it, one entry per death (True: a kernel panic,
        #: False: qemu killed from outside); it checks the state once they are used up.
        self.die_at = die_at or {}
        self.chunks: list[list[str]] = []
        self.interrupt_at = interrupt_at  # Ctrl-C or SIGTERM reaches powercut at this state
        self.booted = 0
        self.machines: list[FakeMachine] = []

    def __call__(self, disks, rundir, fstypes):  # type: ignore[no-untyped-def]
        self.booted += 1
        rundir.mkdir(parents=True, exist_ok=True)
        machine = FakeMachine(rundir=rundir)
        self.machines.append(machine)
        for spec in disks:
            machine.disks[spec.name] = f"/dev/fake-{spec.name}"

        def guest(argv, text):  # type: ignore[no-untyped-def]
            task = json.loads(text)
            checked, hung = 0, False
            self.chunks.append([s["key"] for s in task["states"]])
            begun = Path(task["results_path"]).with_name(GUEST_STARTED)
            with open(task["results_path"], "a") as out, open(begun, "a") as marks:
                for i, s in enumerate(task["states"]):
                    if self.lanes:
                        marks.write("".join(f"{t['key']}\n"
                                            for t in task["states"][i:i + self.lanes]))
                        marks.flush()
                    if self.die_at.get(s["key"]):
                        panicked = self.die_at[s["key"]].pop(0)
                        tail = "Kernel panic - not syncing: sysrq triggered crash" if panicked else "ok"
                        raise GuestDied("crash-check: the guest went away (qemu exited); last "
                                        f"console lines: {tail}", console=tail, panicked=panicked)
                    if s["key"] == self.interrupt_at:
                        out.flush()
                        raise KeyboardInterrupt
                    if s["key"] == self.stall_at:
                        self.stall_at = ""  # the replacement guest behaves
                        raise ConsoleTimeout("no crash state finished for 99 s")
                    outcome = Outcome.HANG if s["key"] == self.hang_at else Outcome.OK
                    out.write(json.dumps({"key": s["key"], "outcome": outcome.value}) + "\n")
                    checked += 1
                    if outcome is Outcome.HANG:
                        self.hang_at, hung = "", True
                        break
            done = CheckDone(hung)
            return 0, agent.frame({"result": done.to_dict()}) + "\n", ""

        machine.on("* -m framework.cli.guest", respond=guest)
        return machine


def engine(tmp_path: Path, guests: Guests, jobs: int = 1) -> CrashEngine:
    eng = CrashEngine(validate_plan(CrashPlan(target="ext4/ordered",
                                              case="hand:write-fsync-rename", jobs=jobs)),
                      tmp_path, guests)
    (tmp_path / "vm-0" / "disks").mkdir(parents=True)
    eng.files.log_path.write_bytes(b"")
    eng.files.oracle_file.write_text("{}")
    return eng


def test_every_state_is_checked_once_across_shards(tmp_path):
    guests = Guests(tmp_path)
    eng = engine(tmp_path, guests, jobs=2)
    eng.check(states(30), None)
    assert sorted(eng.results) == sorted(s.key for s in states(30))
    assert guests.booted == 2 and eng.replacements == 0


def test_a_hang_replaces_the_guest_and_the_run_goes_on(tmp_path):
    guests = Guests(tmp_path, hang_at="5/prefix")
    eng = engine(tmp_path, guests)
    eng.check(states(10), None)
    assert eng.results["5/prefix"].outcome is Outcome.HANG
    assert [k for k, r in eng.results.items() if r.outcome is Outcome.OK] == [
        s.key for s in states(10) if s.key != "5/prefix"]
    assert guests.booted == 2 and eng.replacements == 1


def test_a_guest_that_stops_answering_costs_one_state(tmp_path):
    guests = Guests(tmp_path, stall_at="3/prefix")
    eng = engine(tmp_path, guests)
    eng.check(states(6), None)
    hung = eng.results["3/prefix"]
    assert hung.outcome is Outcome.HANG and "stopped answering" in hung.notes[0]
    assert sum(r.outcome is Outcome.OK for r in eng.results.values()) == 5


def test_a_guest_killed_from_outside_costs_no_state(tmp_path):
    # qemu killed mid-check: the guest is replaced and the state in flight checked again.
    guests = Guests(tmp_path, die_at={"4/prefix": [False]})
    eng = engine(tmp_path, guests)
    eng.check(states(10), None)
    assert all(r.outcome is Outcome.OK for r in eng.results.values()) and len(eng.results) == 10
    assert guests.booted == 2 and eng.replacements == 1
    assert [k for k, _ in eng.harness_errors] == ["4/prefix"]
    # Died with several states in flight: the first two went alone, then chunks again.
    assert guests.chunks[1:4] == [["4/prefix"], ["5/prefix"], [s.key for s in states(10)[6:]]]


def test_a_state_that_kills_the_guest_kernel_twice_is_a_finding_with_its_console(tmp_path):
    guests = Guests(tmp_path, die_at={"4/prefix": [True, True, True]})
    eng = engine(tmp_path, guests)
    eng.check(states(10), None)
    found = eng.results["4/prefix"]
    assert found.outcome is Outcome.HANG
    assert "died checking this state, 2 times in 2 checks" in found.notes[0]
    assert "Kernel panic - not syncing" in found.notes[0]
    assert [k for k, r in eng.results.items() if r.outcome is Outcome.OK] == [
        s.key for s in states(10) if s.key != "4/prefix"]
    # Three deaths: the first with ten states in flight, then twice alone.
    assert guests.booted == 4 and guests.die_at["4/prefix"] == []


def test_the_states_a_dead_guest_had_begun_are_the_ones_checked_alone(tmp_path):
    # The guest marks what its two lanes began: the death at 4 had 4 and 5 in flight, so
    # those two go alone, whatever else of the chunk was left.
    guests = Guests(tmp_path, die_at={"4/prefix": [True, True, True]}, lanes=2)
    eng = engine(tmp_path, guests)
    eng.check(states(10), None)
    assert eng.results["4/prefix"].outcome is Outcome.HANG
    assert [k for k, _ in eng.harness_errors] == ["4/prefix"] * 3
    assert guests.chunks[1:4] == [["4/prefix"], ["4/prefix"], ["5/prefix"]]
    # One lane in flight: each death is that state's, so none goes alone.
    guests = Guests(tmp_path / "b", die_at={"4/prefix": [True, True, True]}, lanes=1)
    eng = engine(tmp_path / "b", guests)
    eng.check(states(10), None)
    assert "died checking this state, 2 times in 2 checks" in eng.results["4/prefix"].notes[0]
    assert guests.booted == 3 and guests.die_at["4/prefix"] == [True]
    rest = [s.key for s in states(10)[4:]]
    assert guests.chunks[1:] == [rest, rest[1:]]


def test_a_state_whose_guest_is_killed_three_times_is_a_harness_error_not_a_finding(tmp_path):
    guests = Guests(tmp_path, die_at={"2/prefix": [False, False, False, False]})
    eng = engine(tmp_path, guests)
    eng.check(states(5), None)
    error = eng.results["2/prefix"]
    assert error.outcome is Outcome.ERROR and "died 3 times" in error.notes[0]
    assert sum(r.outcome is Outcome.OK for r in eng.results.values()) == 4
    # One panic among kills is not two: still a harness error, never a finding.
    guests = Guests(tmp_path / "b", die_at={"2/prefix": [True, False, False, False]})
    eng = engine(tmp_path / "b", guests)
    eng.check(states(5), None)
    assert eng.results["2/prefix"].outcome is Outcome.ERROR


def test_a_run_stopped_mid_chunk_keeps_what_its_guest_finished_of_it(tmp_path):
    # SIGTERM while a chunk of 100 states is in the guest: the 42 it wrote results for are
    # kept (a budget that ends a run no longer throws away up to a chunk of checks).
    for jobs in (1, 2):
        guests = Guests(tmp_path / f"j{jobs}", interrupt_at="42/prefix")
        eng = engine(tmp_path / f"j{jobs}", guests, jobs=jobs)
        with pytest.raises(KeyboardInterrupt):
            eng.check(states(150), None)
        kept = {s.key for s in states(42)}
        assert kept <= set(eng.results), jobs
        assert "42/prefix" not in eng.results


def test_progress_watch_fires_only_after_a_stall(tmp_path, monkeypatch):
    now = [0.0]
    monkeypatch.setattr("framework.core.clock.monotonic", lambda: now[0])
    path = tmp_path / "results.jsonl"
    watch = progress_watch(path, budget_s=10)
    assert watch() is None
    now[0] = 30.0
    path.write_text("x\n")
    assert watch() is None  # progress: the clock restarts
    now[0] = 65.0
    assert watch() is None
    now[0] = 71.0
    assert "no crash state finished" in (watch() or "")


def test_journal_variants_need_a_journal_disk_and_disks_fit_the_filesystem():
    variants = Variants.parse(("prefix", "journal-lying"))
    with pytest.raises(ConfigError, match="ext4/ordered has no journal disk"):
        validate_plan(CrashPlan(target="ext4/ordered", case="hand:write-fsync-rename",
                                variants=variants))
    two = CrashEngine(validate_plan(CrashPlan(target="ext4/logdev", case="hand:write-fsync-rename",
                                              variants=variants)), Path("."), Guests(Path(".")))
    assert two.two_disks and {"journal-log", "journal-replay", "journal-cow"} <= set(two.sizes)
    assert disk_sizes(get_target("xfs"), None)["data"] > 300 << 20
    assert disk_sizes(get_target("ext4/ordered"), None)["data"] == 128 << 20


def test_run_and_guest_directories_are_absolute(tmp_path, monkeypatch):
    """A relative --results (the default) must reach the guest as a full path."""
    from framework.core.lifecycle import new_run_dir
    from framework.core.machine.kernel import KernelSpec
    from framework.core.machine.qemu import QemuMachine

    monkeypatch.chdir(tmp_path)
    run_dir = new_run_dir(Path("results"), "cut")
    assert run_dir.is_absolute() and run_dir.parent == tmp_path / "results"
    assert run_dir.name.startswith("cut-")
    machine = QemuMachine(kernel=KernelSpec(Path("/nonexistent"), "r", Path("/")), rundir=Path("vm"))
    assert machine.rundir == tmp_path / "vm"


# ---- requests: built in one place, the whole target in them ----------------------


def user_target() -> Target:
    """A target only the host knows (from a --targets-file): the guest cannot look it up."""
    return target_from_dict({"name": "ext4/mine", "fstype": "ext4",
                             "mkfs_options": ["-O", "^metadata_csum"],
                             "mount_options": ["data=ordered", "commit=1"]})


def test_check_requests_carry_the_whole_target_and_each_states_recipe(tmp_path):
    guests = Guests(tmp_path)
    plan = CrashPlan(target="ext4/mine", case="hand:write-fsync-rename", check_timeout_s=90)
    eng = CrashEngine(ValidatedPlan(plan, user_target(),
                                    load_case("hand:write-fsync-rename", seed=0)),
                      tmp_path, guests)
    (tmp_path / "vm-0" / "disks").mkdir(parents=True)
    eng.files.log_path.write_bytes(b"")
    eng.files.oracle_file.write_text("{}")
    todo = states(3)
    eng.check(todo, None)
    (machine,) = {id(m): m for m in guests.machines}.values()
    sent = [json.loads(i) for i in machine.inputs if i]
    assert [t["task"] for t in sent] == ["crash-check"]
    request = CheckRequest.from_dict({k: v for k, v in sent[0].items() if k != "task"})
    assert request == check_request(machine, user_target(), todo, budget_s=90)
    assert request.target == user_target() and request.timeouts == timeouts_for(90)
    assert not request.measure  # a run's guests make no measurements: bench/crash.py asks
    assert [(r.key, r.last_mark, r.base) for r in request.states] == [
        (s.key, s.point.last_mark, s.base) for s in todo]
    # A single-disk target gets a second lane on the guest's own lane disks.
    assert request.lanes == (LaneDisks(machine.disk("replay-2"), machine.disk("cow-2")),)


def test_a_second_lane_only_for_several_states_of_a_single_disk_target(tmp_path):
    machine = FakeMachine(rundir=tmp_path)
    assert check_request(machine, get_target("ext4/ordered"), states(3), budget_s=60).lanes
    assert not check_request(machine, get_target("ext4/ordered"), states(1), budget_s=60).lanes
    assert not check_request(machine, get_target("ext4/logdev"), states(3), budget_s=60).lanes
    # xfs mounts the second copy with nouuid; btrfs takes both copies for one device.
    assert check_request(machine, get_target("xfs"), states(3), budget_s=60).lanes
    assert not check_request(machine, get_target("xfs/logdev"), states(3), budget_s=60).lanes
    assert not check_request(machine, get_target("btrfs"), states(3), budget_s=60).lanes
    assert adapter_for("xfs").second_copy_mount_options == ("nouuid",)
    assert adapter_for("ext4").second_copy_mount_options == ()
    assert check_request(machine, get_target("ext2"), states(3), budget_s=60).lanes
    # The disks a checking guest gets: the lane's for one disk, the journal's for two.
    logs = {"log": tmp_path / "log.img"}
    logs["log"].write_bytes(b"")
    sizes = disk_sizes(get_target("ext4/ordered"), None)
    assert [d.name for d in checker_disks(sizes, logs)] == ["log", "replay", "cow", "replay-2",
                                                            "cow-2"]


def test_recheck_sends_the_same_request_as_a_run(tmp_path, monkeypatch):
    plan = CrashPlan(target="ext4/ordered", case="hand:write-fsync-rename", check_timeout_s=60)
    state = states(5)[4]
    monkeypatch.setattr("crashcases.crash.run.load_state", lambda run_dir, key: (plan, state))
    (tmp_path / "log.img").write_bytes(b"\0" * 4096)
    (tmp_path / "oracle.json").write_text("{}")
    guests = Guests(tmp_path)
    target, result = recheck(tmp_path, state.key, guests)
    assert target == get_target("ext4/ordered") and result.key == state.key
    (machine,) = guests.machines
    sent = json.loads(next(i for i in machine.inputs if i))
    request = CheckRequest.from_dict({k: v for k, v in sent.items() if k != "task"})
    assert request == check_request(machine, target, [state], budget_s=60)


def test_the_recording_request_carries_the_whole_target(tmp_path):
    seen: list[RecordRequest] = []

    def factory(disks, rundir, fstypes):  # type: ignore[no-untyped-def]
        rundir.mkdir(parents=True, exist_ok=True)
        machine = FakeMachine(rundir=rundir)

        def guest(argv, text):  # type: ignore[no-untyped-def]
            raw = json.loads(text)
            assert raw.pop("task") == "crash-record"
            req = RecordRequest.from_dict(raw)
            seen.append(req)
            Path(req.oracle_path).write_text("{}")
            (rundir / "disks").mkdir(exist_ok=True)
            (rundir / "disks" / "log.img").write_bytes(b"the log")
            done = RecordResult(entries=40, log_bytes=1 << 20, marks=3, record_s=1.5)
            return 0, agent.frame({"result": done.to_dict()}) + "\n", ""

        machine.on("* -m framework.cli.guest", respond=guest)
        return machine

    workload = load_case("hand:write-fsync-rename", seed=0)
    eng = CrashEngine(ValidatedPlan(CrashPlan(target="ext4/mine", case="hand:write-fsync-rename"),
                                    user_target(), workload), tmp_path, factory)
    machine, info = eng.record()
    machine.close()
    assert seen[0].target == user_target() and seen[0].workload == workload
    assert info == {"entries": 40, "log_bytes": 1 << 20, "marks": 3, "record_s": 1.5,
                    "workload": workload.name, "ops": len(workload.ops),
                    "log.img_digest": rundir.content_digest(eng.files.log_path)}
    assert eng.files.oracle_file.read_text() == "{}"


def test_a_plan_with_a_user_target_survives_plan_json(tmp_path):
    """recheck rebuilds the plan from plan.json (written from asdict) without the targets file."""
    from crashcases.crash.plan import CrashPlan, load_plan
    from crashcases.crash.run import run_spec
    from framework.core.lifecycle import run_lifecycle
    from recovery.targets import target_from_dict

    mine = target_from_dict({"name": "mine", "fstype": "ext4", "mount_options": ["data=journal"]})
    plan = CrashPlan(target="mine", case="hand:append-fdatasync", user_targets=(mine,))
    with run_lifecycle(run_spec(plan), tmp_path, None) as run:  # writes plan.json
        pass
    again = load_plan(run.run_dir)
    assert again == plan and again.spec == mine


def test_a_plan_from_before_generator_2_regenerates_its_classic_workload(tmp_path):
    import json

    from crashcases.crash.plan import CrashPlan, load_plan, validate_plan
    from crashcases.workload.cases import load_case

    new = validate_plan(CrashPlan(target="ext4/ordered", case="gen:seq1", max_sequences=5)).workload
    raw = {"target": "ext4/ordered", "case": "gen:seq1", "seed": 0, "points": "marks",
           "variants": ["prefix"], "per_point": 2, "jobs": 1, "check_timeout_s": 600.0,
           "inject_hang": None, "max_images": 5, "data_mib": None, "max_sequences": 5,
           "user_targets": []}
    (tmp_path / "plan.json").write_text(json.dumps(raw))
    old_plan = load_plan(tmp_path)
    assert old_plan.generator == 1
    old = validate_plan(old_plan).workload
    assert old.ops == load_case("gen:seq1", seed=0, max_sequences=5).ops
    assert old.ops != new.ops  # generator 2 adds the newer operations ext4 has


def test_generator_2_plans_keep_assuming_fallocate_everywhere() -> None:
    """Generator 2 let the guest skip fallocate where the filesystem has none; its
    workloads regenerate unchanged. Generator 3 leaves those ops out (a skipped
    zero-range left the msync after it out of range, and the recording failed)."""
    import dataclasses

    from crashcases.crash.plan import CrashPlan, validate_plan
    from crashcases.workload.ops import OpKind

    g3 = CrashPlan(target="ext2", case="gen:seq1")
    g2 = dataclasses.replace(g3, generator=2)
    ops2, ops3 = validate_plan(g2).workload.ops, validate_plan(g3).workload.ops
    falloc2 = {op.falloc for op in ops2 if op.kind is OpKind.FALLOCATE}
    falloc3 = {op.falloc for op in ops3 if op.kind is OpKind.FALLOCATE}
    assert {"zero-range", "allocate"} <= {str(m) for m in falloc2}
    assert {str(m) for m in falloc3} == {"punch-hole"}  # ext4_fallocate() punches any file
    assert len(ops2) == 5800  # as generator 2 recorded it


@pytest.mark.parametrize("name", ["ext2", "ext3", "ext4/ordered", "ext4/nojournal", "xfs",
                                  "btrfs", "f2fs", "jfs", "reiserfs"])
def test_generated_workloads_use_only_what_the_target_has(name: str) -> None:
    from crashcases.crash.plan import CrashPlan, validate_plan
    from crashcases.workload.ops import required_capability
    from recovery.filesystems import adapter_for

    for case in ("gen:seq1", "gen:seq2", "random:400"):
        valid = validate_plan(CrashPlan(target=name, case=case))
        target, workload = valid.target, valid.workload
        has = adapter_for(target.fstype).target_capabilities(target)
        needs = {required_capability(op) for op in workload.ops} - {None}
        assert needs <= has, (case, needs - has)


def test_a_two_disk_run_records_and_checks_both_disks_with_each_states_journal_recipe(tmp_path):
    from crashcases.crash.guest import DiskRecipe, JournalDisks
    from crashcases.crash.points import DiskState
    seen: list[tuple[list[str], dict]] = []  # type: ignore[type-arg]

    def factory(disks, rundir, fstypes):  # type: ignore[no-untyped-def]
        rundir.mkdir(parents=True, exist_ok=True)
        machine = FakeMachine(rundir=rundir)
        for spec in disks:
            machine.disks[spec.name] = f"/dev/fake-{spec.name}"

        def guest(argv, text):  # type: ignore[no-untyped-def]
            raw = json.loads(text)
            seen.append(([d.name for d in disks], raw))
            if raw["task"] == "crash-record":
                Path(raw["oracle_path"]).write_text("{}")
                (rundir / "disks").mkdir(exist_ok=True)
                for name in ("log.img", "journal-log.img"):
                    (rundir / "disks" / name).write_bytes(name.encode())
                done: object = RecordResult(entries=40, log_bytes=1 << 20, marks=3, record_s=1.0)
            else:
                done = CheckDone(False)
            return 0, agent.frame({"result": done.to_dict()}) + "\n", ""  # type: ignore[attr-defined]

        machine.on("* -m framework.cli.guest", respond=guest)
        return machine

    eng = CrashEngine(validate_plan(CrashPlan(target="ext4/logdev", case="hand:write-fsync-rename",
                                              check_timeout_s=60)), tmp_path, factory)
    machine, _ = eng.record()
    disks, raw = seen[0]
    assert {"journal", "journal-log", "journal-replay", "journal-cow"} <= set(disks)
    req = RecordRequest.from_dict({k: v for k, v in raw.items() if k != "task"})
    assert (req.journal_dev, req.journal_log_dev) == ("/dev/fake-journal", "/dev/fake-journal-log")
    state = CrashState(CrashPoint(7, CrashPointKind.MARK, "pc-1", 6), Variant(VariantKind.LYING, 3,
                       on_journal=True), 7, journal=DiskState(4, (5, 6), {6: (0, 2)}))
    request = check_request(machine, eng.target, [state], budget_s=60)
    assert request.journal == JournalDisks("/dev/fake-journal-log", "/dev/fake-journal-replay",
                                           "/dev/fake-journal-cow")
    again = CheckRequest.from_dict(json.loads(json.dumps(request.to_dict())))
    assert again == request
    assert again.states[0].journal == DiskRecipe(4, (5, 6), {6: (0, 2)})
    assert again.states[0].key == "7/journal-lying:3"
    machine.close()


@pytest.mark.parametrize("first, said", [
    ("sleep 30", "did not reach the ready marker"),  # silent: qemu or the kernel hung
    ("echo Kernel panic - not syncing; sleep 30", "Kernel panic"),  # died early (an oops in
    # sched_clock, an RCU stall past the timeout on a busy host): not the kernel's last word
])
def test_a_boot_that_fails_is_tried_once_more_and_the_second_failure_is_the_error(
        tmp_path, monkeypatch, caplog, first, said):
    from framework.core.errors import BootError
    from framework.core.machine import initramfs
    from framework.core.machine.kernel import KernelSpec
    from framework.core.machine.qemu import QemuMachine

    monkeypatch.setattr(initramfs, "resolve_modules", lambda *a, **k: ([], []))
    monkeypatch.setattr(initramfs, "initramfs", lambda modules, **kw: tmp_path / "initrd")
    argvs = iter([["sh", "-c", first], ["sh", "-c", "echo second boot; exit 1"]])
    calls: list[int] = []

    def argv(self, initrd, accel):  # type: ignore[no-untyped-def]
        calls.append(1)
        return next(argvs)

    monkeypatch.setattr(QemuMachine, "qemu_argv", argv)
    machine = QemuMachine(kernel=KernelSpec(Path("/nonexistent"), "r", Path("/")), accel="tcg",
                          boot_timeout_s=2, rundir=tmp_path / "vm")
    with caplog.at_level(logging.WARNING), pytest.raises(BootError, match="second boot"):
        machine.start()
    assert len(calls) == 2
    assert any(said in r.getMessage() and "booting it again" in r.getMessage()
               for r in caplog.records)


def test_a_command_ends_at_once_when_the_guest_kernel_kills_a_task(tmp_path, monkeypatch):
    # A dead dm-log-writes thread (list corruption, then BUG()) left a recording waiting for
    # its whole timeout; the watch ends it at the line that says so, and a soft lockup that
    # an emulated CPU lives on from does not. (The kernel writes to the console; the
    # command's own output goes to files.)
    from crashcases.crash.engine import death_watch
    from framework.core.errors import ConsoleTimeout
    from framework.core.machine import initramfs
    from framework.core.machine.kernel import KernelSpec
    from framework.core.machine.qemu import QemuMachine

    monkeypatch.setattr(initramfs, "resolve_modules", lambda *a, **k: ([], []))
    monkeypatch.setattr(initramfs, "initramfs", lambda modules, **kw: tmp_path / "initrd")
    monkeypatch.setattr(QemuMachine, "qemu_argv", lambda self, initrd, accel: [
        "sh", "-c", f"echo {initramfs.READY_MARKER} 1.5; exec sh"])
    machine = QemuMachine(kernel=KernelSpec(Path("/nonexistent"), "r", Path("/")), accel="tcg",
                          boot_timeout_s=20, rundir=tmp_path / "vm").start()
    try:
        lockup = machine.run(["sh", "-c", "echo 'watchdog: BUG: soft lockup - CPU#0 stuck "
                              "for 23s!' >/dev/tty; sleep 2; echo done"], timeout_s=30,
                             watch=death_watch(machine))
        assert "done" in lockup.stdout and machine.kernel_death() is None
        began = time.monotonic()
        with pytest.raises(ConsoleTimeout, match=r"the guest kernel died: \[ 9.1\] kernel BUG at "
                                                 r"lib/list_debug\.c:32!"):
            machine.run(["sh", "-c", "echo '[ 9.1] kernel BUG at lib/list_debug.c:32!' >/dev/tty; "
                         "sleep 60"], timeout_s=120, watch=death_watch(machine))
        assert time.monotonic() - began < 30
    finally:
        machine.close()


# ---- one run, end to end with fake guests: what is read and parsed, and how often ----------


def recording_guests(tmp_path: Path) -> Callable[..., FakeMachine]:
    """Fake guests that record (an oracle from really running the workload in a directory, a
    log with a write, a flush and a mark per durability op) and check (the first state loses
    data, every other is ok)."""
    from crashcases.execute import MKFS_MARK, execute
    from devicemapper.logformat import LogWriter

    def factory(disks, rundir, fstypes):  # type: ignore[no-untyped-def]
        rundir.mkdir(parents=True, exist_ok=True)
        machine = FakeMachine(rundir=rundir)
        for spec in disks:
            machine.disks[spec.name] = f"/dev/fake-{spec.name}"

        def guest(argv, text):  # type: ignore[no-untyped-def]
            raw = json.loads(text)
            if raw.pop("task") == "crash-record":
                req = RecordRequest.from_dict(raw)
                marks: list[str] = []
                tree = tmp_path / f"tree-{len(list(tmp_path.glob('tree-*')))}"
                tree.mkdir()
                Path(req.oracle_path).write_text(execute(req.workload, tree, marks.append).to_json())
                (rundir / "disks").mkdir(exist_ok=True)
                with LogWriter(rundir / "disks" / "log.img") as log:
                    log.write(0, b"m" * 512)
                    log.flush()
                    log.mark(MKFS_MARK)
                    for n, name in enumerate(marks, 1):
                        log.write(8 * n, b"w" * 1024)
                        log.flush()
                        log.mark(name)
                done: Any = RecordResult(entries=log.nr_entries, log_bytes=log.size_bytes,
                                         marks=len(marks), record_s=0.5)
            else:
                req = CheckRequest.from_dict(raw)
                with open(req.results_path, "a") as out:
                    for n, s in enumerate(req.states):
                        lost = n == 0
                        finding = {"kind": "data-loss", "path": "f", "detail": "gone",
                                   "mark": s.last_mark}
                        out.write(json.dumps({
                            "key": s.key, "outcome": "data-loss" if lost else "ok",
                            "mount_ok": True, "findings": [finding] if lost else [],
                            "explanation": "lost" if lost else ""}) + "\n")
                done = CheckDone(False)
            return 0, agent.frame({"result": done.to_dict()}) + "\n", ""

        machine.on("* -m framework.cli.guest", respond=guest)
        return machine

    return factory


def planned_and_checked(tmp_path: Path, argv: Sequence[str]) -> Any:
    """A crash run as ``powercut crash ARGV`` makes it, its guests faked: the plan from the
    command line, validated, recorded, planned, checked, its findings checked again."""
    from crashcases.crash.run import run_crash, run_spec
    from crashcases.known import load_known
    from framework.cli import build_parser
    from framework.cli import crash as crash_cli
    from framework.core.lifecycle import run_lifecycle
    from framework.core.store import Store

    args = build_parser().parse_args(["crash", "--target", "ext4/ordered", *argv])
    plan = crash_cli.plan_from_args(args, "ext4/ordered")
    valid = validate_plan(plan)
    with Store(tmp_path / "db.sqlite") as store, \
            run_lifecycle(run_spec(plan), tmp_path, store) as run:
        return run_crash(valid, run, recording_guests(tmp_path), known=load_known())


def test_the_plans_options_are_parsed_once_per_run(tmp_path, monkeypatch):
    """--points, --variants and the fault options become typed values where they come in;
    nothing after that (validation, planning the states, the known-behaviour matcher, the
    checking guests' requests, the reruns) parses them again."""
    from collections import Counter

    from crashcases.crash.faults import Faults
    from crashcases.crash.points import Strategy

    calls: Counter[str] = Counter()
    for cls in (Strategy, Variants, Faults):
        def counting(*args, _cls=cls, _parse=cls.parse, **kwargs):  # type: ignore[no-untyped-def]
            calls[_cls.__name__] += 1
            return _parse(*args, **kwargs)
        monkeypatch.setattr(cls, "parse", staticmethod(counting))
    result = planned_and_checked(tmp_path, [
        "--points", "marks", "--variants", "prefix,subset", "--reruns", "1",
        "--inject-busy", "#99@1", "--inject-panic", "#98@once"])
    assert len(result.states) > 3 and len(result.results) == len(result.states)
    assert result.findings and result.findings[0].rate is not None  # the rerun ran
    assert calls == {"Strategy": 1, "Variants": 1, "Faults": 1}


def test_the_oracle_is_read_once_per_run(tmp_path, monkeypatch):
    """Planning the points, the known-behaviour matcher, the store's signer, the findings
    before the reruns and after them all use one reading of oracle.json."""
    from crashcases.oracle.log import OracleLog

    loads: list[Path] = []
    load = OracleLog.load

    def counting(path):  # type: ignore[no-untyped-def]
        loads.append(path)
        return load(path)

    monkeypatch.setattr(OracleLog, "load", staticmethod(counting))
    result = planned_and_checked(tmp_path, ["--variants", "prefix,subset", "--reruns", "1"])
    assert result.findings and result.known is not None
    assert loads == [result.run_dir / rundir.ORACLE]


@pytest.mark.parametrize("lost, recorded", [(1, True), (2, True), (3, False)])
def test_a_recording_guest_the_harness_loses_is_replaced_and_the_recording_made_again(
        tmp_path, lost, recorded):
    """Under a loaded host a guest command can pass its deadline while recording (the log
    disk's first block zeroed in 60 s): the recording is made again on a fresh guest, up to
    the guest policy's three lost guests, and then the error is the run's."""
    from framework.core.errors import CommandTimeout

    booted: list[FakeMachine] = []
    closed: list[int] = []

    def factory(disks, rundir, fstypes):  # type: ignore[no-untyped-def]
        rundir.mkdir(parents=True, exist_ok=True)
        machine = FakeMachine(rundir=rundir)
        booted.append(machine)
        number = len(booted)
        machine.close = lambda: closed.append(number)  # type: ignore[method-assign]
        for spec in disks:
            machine.disks[spec.name] = f"/dev/fake-{spec.name}"

        def guest(argv, text):  # type: ignore[no-untyped-def]
            if number <= lost:
                raise CommandTimeout("command timed out after 60 s: dd if=/dev/zero "
                                     "of=/dev/vdb bs=4096 count=1 conv=fsync status=none")
            req = RecordRequest.from_dict({k: v for k, v in json.loads(text).items()
                                           if k != "task"})
            Path(req.oracle_path).write_text("{}")
            (rundir / "disks").mkdir(exist_ok=True)
            (rundir / "disks" / "log.img").write_bytes(b"the log")
            done = RecordResult(entries=40, log_bytes=1 << 20, marks=3, record_s=1.5)
            return 0, agent.frame({"result": done.to_dict()}) + "\n", ""

        machine.on("* -m framework.cli.guest", respond=guest)
        return machine

    eng = CrashEngine(validate_plan(CrashPlan(target="ext4/ordered",
                                              case="hand:write-fsync-rename")), tmp_path, factory)
    if recorded:
        machine, info = eng.record()
        machine.close()
        assert info["entries"] == 40 and eng.replacements == lost
        assert len(booted) == lost + 1
    else:
        with pytest.raises(CommandTimeout, match="dd if=/dev/zero"):
            eng.record()
        assert len(booted) == 3
    # Each lost guest was shut down (the last one by the test or by the error).
    assert closed[:lost] == list(range(1, lost + 1))


@pytest.mark.parametrize("deaths, outcome, boots", [
    (1, Outcome.OK, 2),      # a guest killed once: checked again on a fresh one
    (3, Outcome.ERROR, 3),   # lost three times: a harness error, neither pass nor failure
])
def test_recheck_loses_and_replaces_guests_as_a_run_does(tmp_path, monkeypatch, deaths,
                                                         outcome, boots):
    plan = CrashPlan(target="ext4/ordered", case="hand:write-fsync-rename", check_timeout_s=60)
    state = states(5)[4]
    monkeypatch.setattr("crashcases.crash.run.load_state", lambda run_dir, key: (plan, state))
    (tmp_path / "log.img").write_bytes(b"\0" * 4096)
    (tmp_path / "oracle.json").write_text("{}")
    guests = Guests(tmp_path, die_at={state.key: [False] * deaths})  # killed from outside
    _, result = recheck(tmp_path, state.key, guests)
    assert result.outcome is outcome and guests.booted == boots


def test_a_recheck_whose_kernel_panics_twice_is_a_hang(tmp_path, monkeypatch):
    plan = CrashPlan(target="ext4/ordered", case="hand:write-fsync-rename", check_timeout_s=60)
    state = states(5)[4]
    monkeypatch.setattr("crashcases.crash.run.load_state", lambda run_dir, key: (plan, state))
    (tmp_path / "log.img").write_bytes(b"\0" * 4096)
    (tmp_path / "oracle.json").write_text("{}")
    guests = Guests(tmp_path, die_at={state.key: [True, True]})
    _, result = recheck(tmp_path, state.key, guests)
    assert result.outcome is Outcome.HANG and "Kernel panic" in result.notes[0]
