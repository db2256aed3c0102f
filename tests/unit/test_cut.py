"""Power-cut runs without a guest: cut planning, the live workload, the dm sequence, tables."""

from __future__ import annotations

import dataclasses
import errno
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from crashcases.check import CheckResult
from crashcases.cut import engine as cut
from crashcases.cut import guest as cuttrial
from crashcases.cut.engine import plan_cut
from crashcases.cut.guest import (
    CutPoint,
    DriveResult,
    OracleRequest,
    OracleResult,
    TrialOutcome,
    TrialRequest,
    drive,
)
from crashcases.cut.summary import TrialResult, percentile, summarize
from crashcases.execute import execute, perform
from crashcases.vocabulary import Outcome
from crashcases.workload.cases import load_case
from crashcases.workload.ops import Op, OpKind, Workload
from devicemapper.table import FlakeyMode
from framework.cli import build_parser
from framework.cli.cut import summary_table, trial_table
from framework.core import agent
from framework.core.errors import ConfigError
from framework.core.machine.fake import FakeMachine
from framework.core.store import Store
from recovery.mount import Timeouts
from recovery.targets import get_target, target_from_dict

K = OpKind


def small_workload() -> Workload:
    return Workload("small", 7, (
        Op(K.CREAT, "a"), Op(K.WRITE, "a", length=5000), Op(K.FSYNC, "a"),   # 0..2, mark pc-0
        Op(K.CREAT, "b"), Op(K.APPEND, "b", length=300), Op(K.FSYNC, "b"),  # 3..5, mark pc-1
        Op(K.MKDIR, "d"), Op(K.CREAT, "d/c"), Op(K.WRITE, "d/c", length=100),
        Op(K.FSYNC_DIR, "d"),                                                # 9, mark pc-2
        Op(K.APPEND, "a", length=10), Op(K.SYNC),                            # 11, mark pc-3
        Op(K.CREAT, "e"),
    ))


# --- planning -------------------------------------------------------------------


def test_plan_cut_lands_between_the_promise_and_the_next_durability_op() -> None:
    w = small_workload()
    for trial in range(30):
        p = plan_cut(w, trial_seed=f"s:{trial}", cut_after_ops=2)
        assert p.before_op is not None and 6 <= p.before_op <= 9


def test_plan_cut_is_seeded_and_leaves_a_durability_op_after_the_cut() -> None:
    w = load_case("random:200", seed=0)
    points = [plan_cut(w, trial_seed=f"0:t:{i}") for i in range(10)]
    assert points == [plan_cut(w, trial_seed=f"0:t:{i}") for i in range(10)]
    assert len({p.before_op for p in points}) > 3
    last_durable = cut.durability_indices(w)[-1]
    assert all(p.before_op is not None and p.before_op <= last_durable for p in points)


def test_plan_cut_rejects_bad_requests() -> None:
    w = small_workload()
    with pytest.raises(ConfigError, match="has 4 durability ops"):
        plan_cut(w, trial_seed="x", cut_after_ops=5)
    with pytest.raises(ConfigError, match="must be positive"):
        plan_cut(w, trial_seed="x", cut_after_s=0)
    with pytest.raises(ConfigError, match="no durability op"):
        plan_cut(Workload("w", 0, (Op(K.CREAT, "f"),)), trial_seed="x")
    assert plan_cut(w, trial_seed="x", cut_after_s=2.5) == CutPoint(after_s=2.5)


# --- the live workload ----------------------------------------------------------


def test_drive_cuts_before_the_op_and_counts_what_was_in_flight(tmp_path: Path) -> None:
    w = small_workload()
    seen: list[int] = []

    def do_cut() -> None:
        seen.append(len(list(tmp_path.iterdir())))

    r = drive(w, tmp_path, CutPoint(before_op=8), do_cut, continue_syncs=1)
    assert seen == [3]  # a, b, d existed: ops 0..7 ran before the cut
    assert (r.promised, r.last_mark, r.cut_op) == (2, "pc-1", 8)
    assert (r.in_flight_ops, r.in_flight_bytes) == (2, 0)  # mkdir d, creat d/c
    # After the cut: write d/c and fsync_dir d, then it stops (one sync).
    assert r.post_cut_ops == 2 and r.post_cut_promises == ["pc-2"]
    assert not (tmp_path / "e").exists()
    assert r.post_cut_errors == {}


def test_drive_counts_written_bytes_in_flight(tmp_path: Path) -> None:
    r = drive(small_workload(), tmp_path, CutPoint(before_op=5), lambda: None, continue_syncs=0)
    assert (r.promised, r.in_flight_ops, r.in_flight_bytes) == (1, 2, 300)
    assert r.post_cut_ops == 0


def test_drive_tolerates_eio_after_the_cut_and_records_it(tmp_path: Path) -> None:
    state = {"cut": False}

    def failing(op: Op, root: Path, data: bytes) -> None:
        if state["cut"] and op.kind in (K.FSYNC, K.FSYNC_DIR, K.SYNC):
            raise OSError(errno.EIO, "Input/output error")
        if state["cut"] and op.kind is K.CREAT:
            raise OSError(errno.EROFS, "Read-only file system")
        perform(op, root, data)

    r = drive(small_workload(), tmp_path, CutPoint(before_op=3), lambda: state.update(cut=True),
              continue_syncs=5, perform_op=failing)
    assert r.promised == 1 and r.last_mark == "pc-0"
    assert r.post_cut_errors["EIO"] == 3
    assert r.post_cut_errors["EROFS"] == 3  # creat b, d/c, e
    assert r.post_cut_errors["ENOENT"] == 2  # writes to the files that were not created
    assert r.post_cut_promises == []  # no fsync after the cut succeeded


def test_drive_raises_on_errors_before_the_cut_but_skips_unsupported(tmp_path: Path) -> None:
    def unsupported(op: Op, root: Path, data: bytes) -> None:
        if op.kind is K.APPEND:
            raise OSError(errno.EOPNOTSUPP, "not supported")
        perform(op, root, data)

    r = drive(small_workload(), tmp_path, CutPoint(before_op=12), lambda: None, perform_op=unsupported)
    assert r.skipped_ops == 2 and r.promised == 4

    def broken(op: Op, root: Path, data: bytes) -> None:
        raise OSError(errno.EIO, "Input/output error")

    with pytest.raises(cuttrial.WorkloadError, match="op 0 .* before the cut"):
        drive(small_workload(), tmp_path / "x", CutPoint(before_op=3), lambda: None, perform_op=broken)


def test_drive_timer_cut_fires_during_the_workload(tmp_path: Path) -> None:
    slow_ops = []

    def slow(op: Op, root: Path, data: bytes) -> None:
        slow_ops.append(op)
        if len(slow_ops) == 4:
            import time

            time.sleep(0.3)  # the timer fires while op 3 runs
        perform(op, root, data)

    r = drive(small_workload(), tmp_path, CutPoint(after_s=0.1), lambda: None, continue_syncs=1,
              perform_op=slow)
    assert (r.promised, r.last_mark) == (1, "pc-0")
    assert r.cut_op == 4  # op 3 had started: it is in flight
    assert r.in_flight_ops == 1 and not r.ended_before_cut
    assert r.post_cut_promises == ["pc-1"]


def test_drive_timer_longer_than_the_workload_cuts_at_the_end(tmp_path: Path) -> None:
    r = drive(small_workload(), tmp_path, CutPoint(after_s=60), lambda: None)
    assert r.ended_before_cut and r.promised == 4 and r.in_flight_ops == 1


# --- the dm sequence in a trial -------------------------------------------------


def _fake_machine() -> FakeMachine:
    m = FakeMachine()
    m.on("blockdev --getsz *", stdout="262144\n")
    m.on("dmesg", stdout="[    1.000000] booted\n")
    m.on("e2fsck *", status=0)
    return m


def test_trial_cuts_with_nolockfs_unmounts_under_the_cut_and_restores_before_recovery(tmp_path: Path) -> None:
    machine = _fake_machine()
    target = get_target("ext4/ordered")
    w = small_workload()
    oracle_root = tmp_path / "ref"
    oracle_root.mkdir()
    oracle = execute(w, oracle_root, lambda _n: None)
    live, check = tmp_path / "live", tmp_path / "check"
    out = cuttrial.run_trial(machine, target, "/dev/vdb", w, oracle, CutPoint(before_op=6),
                        FlakeyMode.DROP_WRITES, continue_syncs=1, count_post_cut=False, key="t",
                        timeouts=Timeouts(), live=live, check_mp=check, forget_caches=lambda: None)
    calls = [" ".join(c) for c in machine.calls]

    def at(prefix: str, start: int = 0) -> int:
        return next(i for i, c in enumerate(calls) if i >= start and c.startswith(prefix))

    create = at("dmsetup create pc-flakey")
    assert "flakey /dev/vdb 0 180 0" in (machine.inputs[create] or "")  # pass-through
    mkfs = at("mke2fs")
    suspend = at("dmsetup suspend", mkfs)
    assert "--nolockfs" in calls[suspend]  # no freeze: a power cut
    load = at("dmsetup load", suspend)
    assert "drop_writes" in (machine.inputs[load] or "")
    resume = at("dmsetup resume", load)
    umount = at(f"umount {live}", resume)
    flush = at("blockdev --flushbufs", umount)
    restore_suspend = at("dmsetup suspend", flush)
    restore_load = at("dmsetup load", restore_suspend)
    assert "drop_writes" not in (machine.inputs[restore_load] or "")
    at("dmsetup resume", restore_load)
    recovery_mount = at("mount -t ext4", restore_load)
    assert at("e2fsck", recovery_mount) > recovery_mount
    remove = at("dmsetup remove pc-flakey")
    assert remove > recovery_mount
    # The workload ran in the live mount point until one durability op after the cut.
    assert out.drive.promised == 2 and out.drive.post_cut_promises == ["pc-2"]
    assert out.checked_mark == "pc-1"


def test_trial_positive_control_checks_the_post_cut_promise(tmp_path: Path) -> None:
    machine = _fake_machine()
    w = small_workload()
    (tmp_path / "ref").mkdir()
    oracle = execute(w, tmp_path / "ref", lambda _n: None)
    out = cuttrial.run_trial(machine, get_target("ext4/ordered"), "/dev/vdb", w, oracle,
                        CutPoint(before_op=3), FlakeyMode.ERROR_WRITES, continue_syncs=1,
                        count_post_cut=True, key="t", timeouts=Timeouts(), live=tmp_path / "l",
                        check_mp=tmp_path / "c", forget_caches=lambda: None)
    load = next(i for i, c in enumerate(machine.calls) if c[:2] == ("dmsetup", "load"))
    assert "error_writes" in (machine.inputs[load] or "")
    assert out.checked_mark == "pc-1"
    # The "mounted" check dir is empty here, so the oracle finds pc-1's file missing.
    assert out.check.outcome is Outcome.DATA_LOSS


# --- results and tables ---------------------------------------------------------


def _trial(target: str, trial: int, outcome: Outcome, mount_s: float, fsck_s: float,
           in_flight: int = 2) -> TrialResult:
    d = DriveResult(promised=3, last_mark="pc-2", cut_op=10, cut_s=0.5, cut_swap_s=0.1,
                    in_flight_ops=in_flight, in_flight_bytes=100 * in_flight, post_cut_ops=4,
                    post_cut_errors={"EIO": 1}, post_cut_promises=[], skipped_ops=0,
                    ended_before_cut=False, workload_s=1.0)
    c = CheckResult(key=f"{target}#{trial}", outcome=outcome, mount_ok=True, mount_s=mount_s,
                    replay_messages=["EXT4-fs (dm-0): recovery complete"], fsck_check="clean",
                    fsck_check_s=fsck_s)
    return TrialResult(target, trial, CutPoint(before_op=10), outcome, d, c, checked_mark="pc-2")


def test_summary_has_median_p90_and_max() -> None:
    trials = [_trial("ext4/ordered", i, Outcome.OK, m, f) for i, (m, f) in
              enumerate([(0.1, 1.0), (0.2, 2.0), (0.3, 3.0), (0.4, 4.0), (1.0, 5.0)])]
    s = summarize(get_target("ext4/ordered"), trials)
    assert s.mount_median_s == pytest.approx(0.3)
    assert s.mount_p90_s == pytest.approx(0.76)  # linear interpolation between 0.4 and 1.0
    assert s.mount_max_s == pytest.approx(1.0)
    assert (s.fsck_median_s, s.fsck_max_s) == (3.0, 5.0)
    assert s.outcomes == {"ok": 5} and s.failing == 0
    assert s.post_cut_errors == {"EIO": 5}


def test_recovered_fails_a_journalled_target_but_not_ext2() -> None:
    assert summarize(get_target("ext4/ordered"), [_trial("ext4/ordered", 0, Outcome.RECOVERED, 0.1, 1)]).failing == 1
    assert summarize(get_target("ext2"), [_trial("ext2", 0, Outcome.RECOVERED, 0.1, 1)]).failing == 0
    assert summarize(get_target("ext2"), [_trial("ext2", 0, Outcome.DATA_LOSS, 0.1, 1)]).failing == 1
    # A reader that cannot tell the target (its stored definition unreadable) does not hide a
    # repair; a harness error fails no target.
    from crashcases.vocabulary import fails
    assert fails(Outcome.RECOVERED, None) and fails("data-loss", None)
    assert not fails(Outcome.OK, None) and not fails(Outcome.ERROR, None)


def _render(table: Any) -> str:
    console = Console(record=True, width=250)
    console.print(table)
    return console.export_text()


def test_tables_render_the_figures() -> None:
    trials = [_trial("ext2", 0, Outcome.RECOVERED, 0.05, 0.5), _trial("ext2", 1, Outcome.OK, 0.07, 0.25)]
    text = _render(summary_table([summarize(get_target("ext2"), trials)]))
    assert "ext2" in text and "ok 1, recovered 1" in text
    assert "0.060 / 0.068 / 0.070" in text  # mount median / p90 / max
    assert "0.375 / 0.500" in text  # fsck median / max
    assert "EIO 2" in text
    rows = _render(trial_table("ext2", trials))
    assert "before op 10" in rows and "recovery complete" in rows and "2 / 200" in rows


def test_trials_land_in_the_store(tmp_path: Path) -> None:
    trials = [_trial("ext4/ordered", 0, Outcome.OK, 0.2, 0.3)]
    with Store(tmp_path / "db.sqlite") as store:
        run_id = store.start_run(command_line="test", study="cut")
        engine = cut.CutEngine.__new__(cut.CutEngine)
        engine.store, engine.run_id = store, run_id
        engine.plan = cut.CutPlan(targets=("ext4/ordered",), case="random:10", seed=4)
        engine.store_trial(trials[0])
        rows = store.recoveries(run_id)
    assert len(rows) == 1
    r = rows[0]
    assert (r.target, r.outcome, r.seed, r.in_flight_ops, r.in_flight_bytes) == (
        "ext4/ordered", Outcome.OK, 4, 2, 200)
    assert r.mount_s == pytest.approx(0.2) and r.fsck_s == pytest.approx(0.3)
    assert r.replay_messages == ["EXT4-fs (dm-0): recovery complete"]


def test_cli_parses_the_cut_options() -> None:
    args = build_parser().parse_args(["cut", "--target", "ext4/ordered", "--target", "ext2",
                                      "--case", "random:200", "--trials", "5",
                                      "--cut-after-ops", "3", "--mode", "error_writes", "--json"])
    assert args.target == ["ext4/ordered", "ext2"] and args.cut_after_ops == 3
    assert args.mode == "error_writes" and args.json
    with pytest.raises(SystemExit):
        build_parser().parse_args(["cut", "--target", "ext2", "--cut-after-ops", "1",
                                   "--cut-after-s", "2"])


def test_results_json_round_trips(tmp_path: Path) -> None:
    result = cut.CutRunResult(tmp_path, cut.CutPlan(targets=("ext2",), case="random:10"),
                              [_trial("ext2", 0, Outcome.OK, 0.1, 0.2)])
    doc = json.loads(json.dumps(result.to_dict()))
    assert doc["plan"]["mode"] == "drop_writes"
    assert doc["summaries"][0]["outcomes"] == {"ok": 1}
    assert DriveResult.from_dict(doc["trials"][0]["drive"]).in_flight_ops == 2


def test_junit_has_one_case_per_trial_and_fails_by_target(tmp_path: Path) -> None:
    from framework.cli.cut import junit_cases
    from framework.core import junit

    trials = [_trial("ext4/ordered", 0, Outcome.OK, 0.1, 0.2),
              _trial("ext4/ordered", 1, Outcome.RECOVERED, 0.1, 0.2),  # a journal must not need repair
              _trial("ext2", 0, Outcome.RECOVERED, 0.1, 0.2)]  # e2fsck -p at boot is ext2's recovery
    result = cut.CutRunResult(tmp_path, cut.CutPlan(targets=("ext4/ordered", "ext2"),
                                                    case="random:10"), trials)
    cases = junit_cases(result)
    assert [c.name for c in cases] == ["ext4/ordered #0", "ext4/ordered #1", "ext2 #0"]
    assert [c.failure is not None for c in cases] == [False, True, False]
    assert cases[1].failure is not None and cases[1].failure.startswith("recovered")
    junit.write(tmp_path / "j.xml", "cut", cases)
    suite = ET.parse(tmp_path / "j.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "3" and suite.get("failures") == "1"


# --- the 90th percentile, without numpy -------------------------------------------


@given(st.lists(st.floats(min_value=-1e9, max_value=1e9, allow_nan=False), min_size=1, max_size=40),
       st.sampled_from([0, 10, 25, 50, 75, 90, 95, 99, 100]) | st.floats(0, 100))
def test_percentile_is_numpys_default_to_the_last_bit(values: list[float], q: float) -> None:
    assert percentile(values, q) == float(np.percentile(values, q))


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([0.4, 0.1, 1.0, 0.3, 0.2], 90) == pytest.approx(0.76)
    assert percentile([5.0], 90) == 5.0
    with pytest.raises(ValueError):
        percentile([], 90)


# --- the engine's requests: the whole target travels --------------------------------


def test_engine_sends_the_whole_target_and_keeps_the_guests_outcome(tmp_path: Path) -> None:
    mine = target_from_dict({"name": "ext4/mine", "fstype": "ext4",
                             "mount_options": ["data=journal"]})
    workload = small_workload()
    sent: list[dict[str, Any]] = []

    def guest(argv: tuple[str, ...], text: str | None) -> tuple[int, str, str]:
        raw = json.loads(text or "{}")
        sent.append(dict(raw))
        task = raw.pop("task")
        if task == "cut-oracle":
            assert OracleRequest.from_dict(raw).target == mine
            return 0, agent.frame({"result": OracleResult(4, len(workload.ops), 0.1).to_dict()}), ""
        trial = TrialRequest.from_dict(raw)
        assert trial.target == mine  # decoded whole: the guest never looks a name up
        drive = _trial("ext4/mine", 0, Outcome.OK, 0.2, 0.3).drive
        assert drive is not None
        outcome = TrialOutcome(drive, CheckResult(key=trial.key, mount_s=0.2), "pc-2")
        return 0, agent.frame({"result": outcome.to_dict()}), ""

    def factory(disks: Any, rundir: Path, fstypes: Any) -> FakeMachine:
        rundir.mkdir(parents=True, exist_ok=True)
        return FakeMachine(rundir=rundir).on("* -m framework.cli.guest", respond=guest)

    plan = cut.CutPlan(targets=("ext4/mine",), case="random:10", cut_after_ops=2)
    engine = cut.CutEngine(cut.ValidatedCutPlan(plan, (mine,), workload), tmp_path, factory)
    result = engine.run_trial("ext4/mine", 0)
    engine.close()
    assert [r["task"] for r in sent] == ["cut-oracle", "cut-trial"]
    assert all(r["target"] == mine.to_dict() for r in sent)
    assert sent[1]["point"] == result.point.to_dict() and sent[1]["key"] == "ext4/mine#0"
    assert (result.outcome, result.mount_s, result.checked_mark) == (Outcome.OK, 0.2, "pc-2")


def test_a_trial_follows_the_one_guest_policy(tmp_path: Path) -> None:
    """A guest killed under a trial is replaced and the trial run again, up to three guests
    (as crash and sweep do); one whose kernel panics twice under it is a finding."""
    from framework.core.errors import GuestDied

    workload = small_workload()
    deaths: list[bool] = []  # how the next trials' guests die, one entry per death

    def guest(argv: tuple[str, ...], text: str | None) -> tuple[int, str, str]:
        raw = json.loads(text or "{}")
        if raw.pop("task") == "cut-oracle":
            return 0, agent.frame({"result": OracleResult(4, len(workload.ops), 0.1).to_dict()}), ""
        if deaths:
            panicked = deaths.pop(0)
            raise GuestDied("qemu exited", console="Kernel panic" if panicked else "",
                            panicked=panicked)
        trial = TrialRequest.from_dict(raw)
        drive = _trial("ext4/ordered", 0, Outcome.OK, 0.2, 0.3).drive
        assert drive is not None
        outcome = TrialOutcome(drive, CheckResult(key=trial.key, mount_s=0.2), "pc-2")
        return 0, agent.frame({"result": outcome.to_dict()}), ""

    def factory(disks: Any, rundir: Path, fstypes: Any) -> FakeMachine:
        rundir.mkdir(parents=True, exist_ok=True)
        return FakeMachine(rundir=rundir).on("* -m framework.cli.guest", respond=guest)

    plan = cut.CutPlan(targets=("ext4/ordered",), case="random:10", cut_after_ops=2)
    engine = cut.CutEngine(cut.ValidatedCutPlan(plan, (get_target("ext4/ordered"),), workload),
                           tmp_path, factory)
    try:
        deaths[:] = [False, False]  # killed twice, the third guest runs it
        assert engine.run_trial("ext4/ordered", 0).outcome is Outcome.OK
        deaths[:] = [False, False, False]
        assert engine.run_trial("ext4/ordered", 1).outcome is Outcome.ERROR
        deaths[:] = [True, False, True]
        assert engine.run_trial("ext4/ordered", 2).outcome is Outcome.HANG
        assert not deaths and engine.replacements == 8
    finally:
        engine.close()


def test_trial_requests_and_outcomes_round_trip_through_json() -> None:
    req = TrialRequest(get_target("xfs"), "xfs#3", "/run/w.json", "/run/o.json", "/dev/vda",
                       CutPoint(after_s=1.5), FlakeyMode.ERROR_WRITES, continue_syncs=3,
                       count_post_cut_promises=True, timeouts=Timeouts(mount_s=5.0))
    assert TrialRequest.from_dict(json.loads(json.dumps(req.to_dict()))) == req
    t = _trial("xfs", 3, Outcome.DATA_LOSS, 0.5, 1.0)
    assert t.drive is not None and t.check is not None
    seen = TrialOutcome(t.drive, t.check, "pc-1")
    assert TrialOutcome.from_dict(json.loads(json.dumps(seen.to_dict()))) == seen


def test_a_resumed_cut_run_keeps_saved_trials_and_runs_only_the_rest(tmp_path: Path) -> None:
    """Killed after trial 0 of 3 was saved: --resume keeps it as it was and runs 1 and 2."""
    from framework.core.lifecycle import resumed_lifecycle, run_lifecycle
    from framework.core.store import RunStatus

    workload = small_workload()
    target = get_target("ext4/ordered")
    trials_run: list[str] = []

    def guest(argv: tuple[str, ...], text: str | None) -> tuple[int, str, str]:
        raw = json.loads(text or "{}")
        task = raw.pop("task")
        if task == "cut-oracle":
            return 0, agent.frame({"result": OracleResult(4, len(workload.ops), 0.1).to_dict()}), ""
        trial = TrialRequest.from_dict(raw)
        trials_run.append(trial.key)
        drive = _trial("ext4/ordered", 0, Outcome.OK, 0.2, 0.3).drive
        assert drive is not None
        outcome = TrialOutcome(drive, CheckResult(key=trial.key, mount_s=0.25), "pc-1")
        return 0, agent.frame({"result": outcome.to_dict()}), ""

    def factory(disks: Any, rundir: Path, fstypes: Any) -> FakeMachine:
        rundir.mkdir(parents=True, exist_ok=True)
        return FakeMachine(rundir=rundir).on("* -m framework.cli.guest", respond=guest)

    plan = cut.CutPlan(targets=("ext4/ordered",), case="random:10", trials=3, cut_after_ops=2)
    valid = cut.ValidatedCutPlan(plan, (target,), workload)
    with Store(tmp_path / "db.sqlite") as store:
        with pytest.raises(KeyboardInterrupt), \
                run_lifecycle(cut.run_spec(plan), tmp_path, store) as run:
            saved = cut.CutRunResult(run.run_dir, plan, [_trial("ext4/ordered", 0, Outcome.OK,
                                                                0.5, 0.7)], run_id=run.run_id)
            run.save_json("results.json", saved.to_dict())  # what a run stopped here leaves
            raise KeyboardInterrupt
        assert store.run(run.run_id or 0).status is RunStatus.INTERRUPTED
        assert cut.load_cut_plan(run.run_dir) == plan
        with resumed_lifecycle(cut.run_spec(plan), run.run_dir, store) as again:
            assert again.run_id == run.run_id
            result = cut.run_cut(valid, again, factory, resume=True)
        assert store.run(run.run_id or 0).status is RunStatus.FINISHED
        rows = store.recoveries(run.run_id or 0)
    assert trials_run == ["ext4/ordered#1", "ext4/ordered#2"]
    assert [t.trial for t in result.trials] == [0, 1, 2]
    assert result.trials[0].mount_s == 0.5  # kept as saved, not run again
    assert [r.trial for r in rows] == [0, 1, 2]
    on_disk = json.loads((run.run_dir / "results.json").read_text())
    assert [t["trial"] for t in on_disk["trials"]] == [0, 1, 2]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "plan.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"bad/plan.json: not a power-cut plan"):
        cut.load_cut_plan(tmp_path / "bad")


def test_a_flaky_failing_trial_is_run_again_and_reported_as_f_of_t(tmp_path: Path) -> None:
    """A planted flaky cut: trial 0 loses data 2 times of 3, trial 1 every time, trial 2
    never; with --reruns 2 the first two are run again at the same cut and say so everywhere."""
    from framework.cli import cut as cut_cli
    from framework.core.lifecycle import run_lifecycle
    from framework.report import html
    from framework.report.results import load

    planted = {0: [Outcome.DATA_LOSS, Outcome.OK, Outcome.DATA_LOSS],
               1: [Outcome.DATA_LOSS] * 3, 2: [Outcome.OK]}
    ran: list[int] = []

    def run_trial(self: cut.CutEngine, target: str, n: int) -> TrialResult:
        outcome = planted[n][sum(1 for r in ran if r == n)]
        ran.append(n)
        return _trial(target, n, outcome, 0.1, 0.2)

    mp = pytest.MonkeyPatch()
    mp.setattr(cut.CutEngine, "run_trial", run_trial)
    plan = cut.CutPlan(targets=("ext4/ordered",), case="random:10", trials=3, reruns=2)
    try:
        with Store(tmp_path / "db.sqlite") as store:
            with run_lifecycle(cut.run_spec(plan), tmp_path, store) as run:
                result = cut.run_cut(
                    cut.ValidatedCutPlan(plan, (get_target("ext4/ordered"),), small_workload()),
                    run, lambda *a: FakeMachine())
            stored = store.reruns(run.run_id or 0)
            report = html.build(load(store, str(run.run_id)))
            page = html.render_html(report)
    finally:
        mp.undo()
    assert ran == [0, 1, 2, 0, 0, 1, 1]
    rates = [t.rate.words() if t.rate else None for t in result.trials]
    assert rates == ["fails 2/3, flaky 66%", "fails 3/3, reliable", None]
    assert stored == {"ext4/ordered#0": [("ok", False), ("data-loss", True)],
                      "ext4/ordered#1": [("data-loss", True), ("data-loss", True)]}
    doc = json.loads((run.run_dir / "results.json").read_text())
    assert doc["trials"][0]["rate"] == {"failed": 2, "runs": 3, "reliable": False,
                                        "words": "fails 2/3, flaky 66%"}
    assert cut.TrialResult.from_dict(doc["trials"][0]).rate == result.trials[0].rate
    failures = [c.failure for c in cut_cli.junit_cases(result)]
    assert failures[0] is not None and failures[0].startswith(
        "data-loss (fails 2/3, flaky 66%: data-loss, ok, data-loss)")
    assert failures[2] is None
    assert "fails 3/3, reliable" in _render(trial_table("ext4/ordered", result.trials, result))
    (row,) = report.data["cut"]
    assert row["rates"] == ["#0 data-loss: fails 2/3, flaky 66%", "#1 data-loss: fails 3/3, reliable"]
    assert "<br>#0 data-loss: fails 2/3, flaky 66%" in page


def test_two_jobs_run_every_trial_once_in_two_guests_and_save_them_in_the_plans_order(
        tmp_path: Path) -> None:
    """--jobs 2: two guests (each with its own run subdirectory and oracle) take the trials
    of one random order; each trial runs once, at the same cut point as with one job, is
    stored once, and results.json and the result list them in the plan's order."""
    import threading

    from framework.core.lifecycle import run_lifecycle

    workload = small_workload()
    seen: list[tuple[str, str, str]] = []  # (guest's rundir, task, key)
    lock = threading.Lock()
    both_busy = threading.Barrier(2, timeout=10)

    def factory(disks: Any, rundir: Path, fstypes: Any) -> FakeMachine:
        rundir.mkdir(parents=True, exist_ok=True)

        def guest(argv: tuple[str, ...], text: str | None) -> tuple[int, str, str]:
            raw = json.loads(text or "{}")
            task = raw.pop("task")
            if task == "cut-oracle":
                with lock:
                    seen.append((rundir.name, task, ""))
                both_busy.wait()  # the second guest is up while the first one works
                return 0, agent.frame({"result": OracleResult(4, len(workload.ops), 0.1).to_dict()}), ""
            trial = TrialRequest.from_dict(raw)
            with lock:
                seen.append((rundir.name, task, trial.key))
            drive = _trial(trial.target.name, 0, Outcome.OK, 0.2, 0.3).drive
            assert drive is not None
            outcome = TrialOutcome(drive, CheckResult(key=trial.key, mount_s=0.2), "pc-1")
            return 0, agent.frame({"result": outcome.to_dict()}), ""

        return FakeMachine(rundir=rundir).on("* -m framework.cli.guest", respond=guest)

    targets = ("ext4/ordered", "xfs")
    plan = cut.CutPlan(targets=targets, case="random:10", trials=4, cut_after_ops=2,
                       order="random", jobs=2)
    one_job = dataclasses.replace(plan, jobs=1)
    valid = cut.ValidatedCutPlan(plan, tuple(get_target(t) for t in targets), workload)
    with Store(tmp_path / "db.sqlite") as store:
        with run_lifecycle(cut.run_spec(plan), tmp_path, store) as run:
            result = cut.run_cut(valid, run, factory)
        rows = store.recoveries(run.run_id or 0)
        assert "guest" in store.run(run.run_id or 0).environment  # the first lane's facts
    keys = [k for _, task, k in seen if task == "cut-trial"]
    assert sorted(keys) == sorted(f"{t}#{n}" for t in targets for n in range(4))
    assert {d for d, task, _ in seen if task == "cut-trial"} == {"vm", "vm-1"}
    assert sorted(d for d, task, _ in seen if task == "cut-oracle") == ["vm", "vm", "vm-1", "vm-1"]
    order = plan.trial_order()
    assert [(t.target, t.trial) for t in result.trials] == order
    assert sorted((r.target, r.trial) for r in rows) == sorted(order)  # each stored once
    on_disk = json.loads((run.run_dir / "results.json").read_text())
    assert [(t["target"], t["trial"]) for t in on_disk["trials"]] == order
    engine = cut.CutEngine(cut.ValidatedCutPlan(one_job, valid.targets, workload), tmp_path / "one",
                           factory)
    assert all(t.point == engine.point_for(t.target, t.trial) for t in result.trials)
    engine.close()


def test_an_error_in_one_jobs_guest_stops_the_run_and_is_raised(tmp_path: Path) -> None:
    """A harness error in one guest's thread (here: a bug) is raised by run_cut once the other
    guest has ended its trial, and no trial is started after it."""
    from framework.core.lifecycle import run_lifecycle

    started: list[int] = []

    def run_trial(self: cut.CutEngine, target: str, n: int) -> TrialResult:
        started.append(n)
        if n == 1:
            raise RuntimeError("planted: the engine broke")
        return _trial(target, n, Outcome.OK, 0.1, 0.2)

    mp = pytest.MonkeyPatch()
    mp.setattr(cut.CutEngine, "run_trial", run_trial)
    plan = cut.CutPlan(targets=("ext4/ordered",), case="random:10", trials=50, jobs=2)
    try:
        with Store(tmp_path / "db.sqlite") as store, \
                pytest.raises(RuntimeError, match="planted"), \
                run_lifecycle(cut.run_spec(plan), tmp_path, store) as run:
            cut.run_cut(cut.ValidatedCutPlan(plan, (get_target("ext4/ordered"),),
                                             small_workload()), run, lambda *a: FakeMachine())
    finally:
        mp.undo()
    assert 1 in started and len(started) < 50


def test_jobs_must_be_at_least_one() -> None:
    with pytest.raises(ConfigError, match="--jobs must be at least 1, got 0"):
        cut.validate_cut_plan(cut.CutPlan(targets=("ext4/ordered",), case="random:10", jobs=0))
