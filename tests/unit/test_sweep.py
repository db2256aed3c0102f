"""Recovery sweeps: the design, the fitted lines, the light oracle, the store and the CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from crashcases.sweep.engine import (
    DIRTY_MIB,
    ERROR,
    FILES_K,
    SIZE_GIB,
    SweepPlan,
    SweepPoint,
    SweepRow,
    design_points,
    disk_specs,
    fit_target,
    grid,
    rows_csv,
    validate_sweep_plan,
)
from crashcases.sweep.guest import (
    PointRequest,
    PointResult,
    dirty_file_count,
    in_flight_path,
    populate,
    populated_path,
    verify,
    write_in_flight,
)
from crashcases.vocabulary import Outcome
from framework.cli import main
from framework.core.errors import ConfigError
from framework.core.stats import linear_fit
from framework.core.store import Store, merge
from recovery.targets import get_target
from tests.unit.test_store import old_database

SIX = ("ext2", "ext4/ordered", "ext4/logdev", "xfs", "xfs/logdev", "btrfs")


# --- the design ----------------------------------------------------------------------


def test_the_latin_square_meets_every_file_count_once_per_size_and_per_dirty_level() -> None:
    sizes, files, dirty = (512, 1024, 2048), (500, 1000, 2000), (0, 8, 32)
    cells = grid(sizes, files, dirty, "latin")
    assert len(cells) == 9
    for s in sizes:
        assert sorted(f for size, f, _ in cells if size == s) == list(files)
    for d in dirty:
        assert sorted(f for _, f, dd in cells if dd == d) == list(files)
    # Main effects orthogonal: the centred columns of size, files and dirty are uncorrelated.
    x = np.array(cells, dtype=float)
    x -= x.mean(axis=0)
    gram = x.T @ x
    assert np.allclose(gram - np.diag(np.diag(gram)), 0.0)


def test_the_full_design_crosses_everything_and_an_unbalanced_square_is_refused() -> None:
    assert len(grid((1, 2), (3, 4, 5), (6, 7), "full")) == 12
    assert grid((1, 2), (3,), (6, 7), "latin") == [(1, 3, 6), (1, 3, 7), (2, 3, 6), (2, 3, 7)]
    with pytest.raises(ConfigError, match="cannot be balanced over 3 sizes x 3 dirty"):
        grid((1, 2, 3), (4, 5), (6, 7, 8), "latin")


def test_points_sweep_journal_sizes_only_where_mkfs_sizes_the_journal() -> None:
    plan = SweepPlan(SIX, journal_mib=(64, 96), reps=2)
    targets = validate_sweep_plan(plan)
    points = design_points(plan, targets)
    per = {t: [p for p in points if p.target == t] for t in SIX}
    assert len(per["ext2"]) == len(per["btrfs"]) == 9 * 2
    assert {p.journal_mib for p in per["ext2"]} == {p.journal_mib for p in per["btrfs"]} == {None}
    for t in ("ext4/ordered", "ext4/logdev", "xfs", "xfs/logdev"):
        assert len(per[t]) == 9 * 2 * 2 and {p.journal_mib for p in per[t]} == {64, 96}
        assert sorted(p.index for p in per[t]) == list(range(36))  # each point once
    # The order is random but seeded: the same plan runs in the same order.
    assert [p.key for p in design_points(plan, targets)] == [p.key for p in points]
    assert [p.index for p in per["ext2"]] != sorted(p.index for p in per["ext2"])


def test_disks_fit_the_largest_point_and_the_checkers_snapshot() -> None:
    plan = SweepPlan(("ext4/logdev", "xfs"), sizes_mib=(512, 1024), files=(100,),
                     dirty_mib=(0, 8))
    disks = {d.name: d.size_bytes for d in disk_specs(plan, validate_sweep_plan(plan))}
    assert set(disks) == {"data", "journal", "cow", "cow-journal"}
    assert disks["data"] > 1024 << 20 and disks["journal"] > 64 << 20
    only_xfs = SweepPlan(("xfs",), sizes_mib=(512,), files=(100,), dirty_mib=(0,))
    assert [d.name for d in disk_specs(only_xfs, validate_sweep_plan(only_xfs))] == ["data"]


@pytest.mark.parametrize("plan, message", [
    (SweepPlan(("xfs",), sizes_mib=(256, 512), files=(100,), dirty_mib=(0, 8)),
     "--sizes 256: xfs needs at least 301 MiB"),
    (SweepPlan(("jfs",)), "the sweep cannot do jfs: its kernel does not replay"),
    (SweepPlan(("xfs",), journal_mib=(32,)), "--journal-sizes 32: xfs needs at least 64 MiB"),
    (SweepPlan(("ext4/ordered",), sizes_mib=(128, 256), files=(100,), dirty_mib=(0, 8),
               journal_mib=(64,)), "an internal journal must stay under a quarter"),
    (SweepPlan(("ext2",), sizes_mib=(64, 128), files=(20000,), dirty_mib=(0, 8)),
     "20000 files and 8 MiB in flight need about"),
    (SweepPlan(("ext2",), sizes_mib=(512, 0)), "--sizes: 0 is not a positive number"),
    (SweepPlan(("ext2",), dirty_mib=(8, 8, 0)), "--dirty: a level is given twice"),
    (SweepPlan(("ext2",), reps=0), "--reps must be at least 1"),
    (SweepPlan(("nosuch",)), "unknown target 'nosuch'"),
])
def test_bad_plans_are_refused_before_anything_runs(plan: SweepPlan, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("+", r"\+")):
        validate_sweep_plan(plan)


# --- the fitted lines ------------------------------------------------------------------


def test_ols_recovers_a_known_slope_with_an_interval_around_it() -> None:
    rng = np.random.default_rng(7)
    rows = [{"a": a, "b": b, "y": 0.5 + 3.0 * a + 0.2 * b + rng.normal(0, 0.05)}
            for a in (1.0, 2.0, 4.0) for b in (0.0, 8.0, 32.0) for _ in range(2)]
    fit = linear_fit(rows, "y", ["a", "b"])
    assert fit.ok and fit.n == 18 and fit.r_squared is not None and fit.r_squared > 0.99
    a, b = fit.slope("a"), fit.slope("b")
    assert a is not None and b is not None
    assert a.interval.contains(3.0) and a.significant and abs(a.estimate - 3.0) < 0.1
    assert b.interval.contains(0.2) and b.significant


def test_ols_of_a_response_that_does_not_depend_on_a_factor_gives_an_interval_around_zero() -> None:
    # Positive control of the verdict "no dependence": pure noise against a factor.
    rng = np.random.default_rng(11)
    rows = [{"a": a, "y": 5.0 + rng.normal(0, 0.5)} for a in (0.5, 1.0, 2.0) for _ in range(4)]
    slope = linear_fit(rows, "y", ["a"]).slope("a")
    assert slope is not None and slope.interval.contains(0.0) and not slope.significant


def test_a_fit_that_is_not_possible_says_why() -> None:
    rows = [{"a": 1.0, "b": 1.0, "y": 1.0}, {"a": 2.0, "b": 1.0, "y": 2.0}]
    fit = linear_fit(rows, "y", ["a", "b"])
    assert not fit.ok and "no degree of freedom" in fit.reason and fit.dropped == ("b",)
    assert "no predictor with two or more levels" in linear_fit(rows[:1], "y", ["a"]).reason
    confounded = [{"a": float(i), "b": 2.0 * i, "y": float(i)} for i in range(5)]
    assert "confounded" in linear_fit(confounded, "y", ["a", "b"]).reason


def _result(mount_s: float, fsck_s: float, outcome: Outcome = Outcome.OK) -> PointResult:
    return PointResult(outcome, 1.0, 1.0, 1.0, 0.01, None, None, "", mount_s, ("recovery complete",),
                       fsck_s, "clean", False, 100, 4, 4)


def test_fits_leave_out_points_whose_recovery_failed() -> None:
    rows = []
    for i, (size, files, dirty) in enumerate(grid((512, 1024, 2048), (500, 1000, 2000),
                                                  (0, 8, 32), "latin")):
        point = SweepPoint("ext4/ordered", i, 0, size, files, dirty, 64)
        rows.append(SweepRow(point, "ok", _result(0.01 * dirty, 1.0 * size / 1024 + 0.001 * i)))
    rows.append(SweepRow(SweepPoint("ext4/ordered", 9, 0, 512, 500, 0, 64), ERROR, None, ("x",)))
    rows.append(SweepRow(SweepPoint("ext4/ordered", 10, 0, 512, 500, 32, 64), "data-loss",
                         _result(99.0, 99.0, Outcome.DATA_LOSS)))
    mount, fsck = fit_target(rows)
    assert mount.n == fsck.n == 9 and "journal_mib" in mount.dropped
    dirty = mount.slope(DIRTY_MIB)
    assert dirty is not None and abs(dirty.estimate - 0.01) < 1e-9
    size = fsck.slope(SIZE_GIB)
    assert size is not None and abs(size.estimate - 1.0) < 0.01 and fsck.slope(FILES_K)
    text = rows_csv(rows)
    assert text.splitlines()[0].startswith("target,index,rep,size_mib")
    assert len(text.splitlines()) == 12 and ",error," in text


# --- the light oracle, on a plain directory ------------------------------------------------


def test_verify_finds_every_file_and_fires_on_a_missing_or_changed_one(tmp_path: Path) -> None:
    populate(tmp_path, 150)
    count = write_in_flight(tmp_path, 1, seed=3)
    assert count == dirty_file_count(1) == 4
    assert verify(tmp_path, 150, count, seed=3) == (150, 4, [])
    populated_path(tmp_path, 120).unlink()
    with open(in_flight_path(tmp_path, 2), "r+b") as f:
        f.seek(4096)
        f.write(b"\0" * 512)
    found, ok, missing = verify(tmp_path, 150, count, seed=3)
    assert (found, ok) == (149, 3)
    assert missing == ["populated/d0001/f000120", "in-flight/w00002"]
    assert write_in_flight(tmp_path / "populated", 0, seed=3) == 0


def test_a_point_request_round_trips_with_its_target() -> None:
    req = PointRequest(get_target("ext4/logdev"), "ext4/logdev#3", "/dev/vda", 512, 1000, 8,
                       journal_dev="/dev/vdb", cow_dev="/dev/vdc", cow_journal_dev="/dev/vdd")
    assert PointRequest.from_dict(req.to_dict()) == req
    res = _result(0.1, 0.2)
    assert PointResult.from_dict(res.to_dict()) == res


# --- the store ---------------------------------------------------------------------------


def test_sweep_points_are_stored_migrated_and_merged(tmp_path: Path) -> None:
    path = tmp_path / "v4.db"
    old_database(path, 4)
    with Store(path) as store:
        run = store.start_run(command_line="powercut sweep", study="sweep", kind="sweep")
        store.add_target(run, "xfs/logdev", get_target("xfs/logdev").to_dict())
        store.add_sweep_point(run, "xfs/logdev", point=0, rep=0, size_mib=512, files=500,
                              dirty_mib=8, journal_mib=64, outcome="ok", mount_s=0.5, fsck_s=1.5,
                              replay_messages=["XFS (dm-0): Starting recovery"],
                              details={"mkfs_s": 1.0})
        store.add_sweep_point(run, "xfs/logdev", point=1, rep=0, size_mib=1024, files=500,
                              dirty_mib=0, journal_mib=None, outcome="error")
        rows = store.sweep_points(run)
        assert [(r.point, r.size_mib, r.journal_mib, r.outcome, r.mount_s) for r in rows] == [
            (0, 512, 64, "ok", 0.5), (1, 1024, None, "error", None)]
        assert rows[0].replay_messages == ["XFS (dm-0): Starting recovery"]
        assert rows[0].details == {"mkfs_s": 1.0}
        assert store.placements(run)["xfs/logdev"].placement == "external"
    merge(tmp_path / "into.db", [path, path])  # twice: nothing doubles
    with Store(tmp_path / "into.db") as merged:
        assert len(merged.sweep_points(1, target="xfs/logdev")) == 2


# --- the command line ---------------------------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["--target", "jfs"], "the sweep cannot do jfs"),
    (["--target", "xfs", "--sizes", "256,512,1024"], "--sizes 256: xfs needs at least 301 MiB"),
    (["--target", "ext2", "--files", "100,200"], "cannot be balanced"),
    (["--target", "ext2,nosuch"], "unknown target 'nosuch'"),
    (["--target", "btrfs", "--reps", "0"], "--reps must be at least 1"),
])
def test_bad_options_are_one_line_errors_and_create_nothing(argv, message, tmp_path, monkeypatch,
                                                            capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", *argv, "--results", "r", "--db", "r/db.sqlite"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("powercut: ") and "\n" not in err and message in err
    assert list(tmp_path.iterdir()) == []


def test_a_number_that_is_no_number_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["sweep", "--sizes", "512,big"])
    assert exc.value.code == 2
    assert "'512,big': expected whole numbers" in capsys.readouterr().err


def test_help_explains_a_point_and_the_design(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    out = capsys.readouterr().out
    for words in ("journal_only", "Latin square", "drop_writes", "xfs_repair -n", "--sizes"):
        assert words in out


def test_the_sweeps_guest_program_answers_and_skips_the_crash_checker() -> None:
    import subprocess
    import sys

    from framework.core import agent

    out = subprocess.run([sys.executable, "-m", "framework.cli.sweepguest"],
                         input='{"task": "echo", "payload": 5}', capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert list(agent.parse_frames(out.stdout)) == [{"result": {"payload": 5}}]
    probe = ("import sys, framework.cli.sweepguest as g; "
             "print(sorted(g.TASKS), 'crashcases.oracle.verify' in sys.modules)")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=60, check=True).stdout.split("]")
    assert "'sweep-point'" in loaded[0] and loaded[1].strip() == "False"


# --- the engine, with a scripted guest ------------------------------------------------------


def test_a_sweep_stores_each_point_replaces_a_hung_guest_and_resumes(tmp_path: Path) -> None:
    """Interrupted after four points (one of them hung): --resume runs only the other five."""
    import json
    from typing import Any

    from crashcases.sweep.engine import load_sweep_plan, run_spec, run_sweep
    from framework.core import agent
    from framework.core.errors import CommandTimeout
    from framework.core.lifecycle import resumed_lifecycle, run_lifecycle
    from framework.core.machine.fake import FakeMachine
    from framework.core.store import RunStatus

    seen: list[str] = []
    boots: list[int] = []
    stop_after = {"n": 4}

    def guest(argv: tuple[str, ...], text: str | None) -> tuple[int, str, str]:
        assert argv[-1] == "framework.cli.sweepguest"
        raw = json.loads(text or "{}")
        assert raw.pop("task") == "sweep-point"
        req = PointRequest.from_dict(raw)
        if len(seen) == stop_after["n"]:
            raise KeyboardInterrupt
        seen.append(req.key)
        if len(seen) == 2:
            raise CommandTimeout("mount outlived its deadline")
        assert req.target.journal_size_mib == 64 and req.cow_dev is not None
        result = _result(0.001 * req.dirty_mib, 0.5 * req.size_mib / 1024)
        return 0, agent.frame({"result": result.to_dict()}), ""

    def factory(disks: Any, rundir: Path, fstypes: Any) -> FakeMachine:
        boots.append(1)
        rundir.mkdir(parents=True, exist_ok=True)
        return FakeMachine(rundir=rundir).on("* -m framework.cli.sweepguest", respond=guest)

    plan = SweepPlan(("ext4/ordered",))
    with Store(tmp_path / "db.sqlite") as store:
        with pytest.raises(KeyboardInterrupt), \
                run_lifecycle(run_spec(plan), tmp_path / "results", store) as run:
            run_sweep(plan, run, factory, guest_module="framework.cli.sweepguest")
        run_dir = run.run_dir
        assert store.run(run.run_id or 0).status is RunStatus.INTERRUPTED
        assert len(store.sweep_points(run.run_id or 0)) == 4
        assert len(boots) == 2  # the hung guest was replaced
        resumed_plan = load_sweep_plan(run_dir)
        assert resumed_plan == plan
        stop_after["n"] = 99
        with resumed_lifecycle(run_spec(resumed_plan), run_dir, store) as again:
            result = run_sweep(resumed_plan, again, factory, resume=True,
                               guest_module="framework.cli.sweepguest")
        rows = store.sweep_points(again.run_id or 0)
    assert len(seen) == len(set(seen)) == 9  # every point once, none twice
    assert sorted(r.point for r in rows) == list(range(9))
    assert [r.outcome for r in rows].count("hang") == 1
    (fits,) = result.fits()
    mount = fits.fits[0]
    assert mount.ok and mount.n == 8  # the hung point is left out
    assert (run_dir / "results.csv").read_text().count("\n") == 10


def test_a_target_with_device_profiles_is_refused_not_run_on_plain_disks() -> None:
    from dataclasses import replace

    profiled = replace(get_target("ext4/ordered"), name="ext4/hdd", disk_profiles=(("data", "hdd"),))
    with pytest.raises(ConfigError, match="does not apply device profiles"):
        validate_sweep_plan(SweepPlan(("ext4/hdd",), user_targets=(profiled,)))


def test_a_point_follows_the_one_guest_policy(tmp_path: Path) -> None:
    """A device that stays busy, or a guest killed under a point, costs that guest: the
    point is measured again on a fresh one, up to three guests (as crash and cut do)."""
    import json
    from typing import Any

    from crashcases.sweep.engine import SweepEngine, design_points
    from framework.core import agent
    from framework.core.errors import DeviceBusy, GuestDied
    from framework.core.machine.fake import FakeMachine

    losses: list[Exception] = []  # what the next tries meet, one entry per lost guest

    def guest(argv: tuple[str, ...], text: str | None) -> tuple[int, str, str]:
        raw = json.loads(text or "{}")
        raw.pop("task")
        req = PointRequest.from_dict(raw)
        if losses:
            raise losses.pop(0)
        result = _result(0.001 * req.dirty_mib, 0.5)
        return 0, agent.frame({"result": result.to_dict()}), ""

    def factory(disks: Any, rundir: Path, fstypes: Any) -> FakeMachine:
        rundir.mkdir(parents=True, exist_ok=True)
        return FakeMachine(rundir=rundir).on("* -m framework.cli.sweepguest", respond=guest)

    plan = SweepPlan(("ext4/ordered",))
    targets = [get_target("ext4/ordered")]
    engine = SweepEngine(plan, tmp_path, factory, targets, guest_module="framework.cli.sweepguest")
    point = design_points(plan, targets)[0]
    try:
        losses[:] = [DeviceBusy("/dev/vda: still open (python, pid 7)")]
        assert engine.run_point(point).outcome == Outcome.OK.value
        losses[:] = [GuestDied("qemu exited"), DeviceBusy("still open"), GuestDied("qemu exited")]
        row = engine.run_point(point)
        assert row.outcome == ERROR and "qemu exited" in row.notes[0]
        assert not losses and engine.replacements == 4
    finally:
        engine.close()
