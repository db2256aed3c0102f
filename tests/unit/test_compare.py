"""powercut compare: planted regressions are flagged, runs of one configuration are not."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from crashcases.vocabulary import CrashPointKind
from framework.bench.workloads import Metric
from framework.cli import main
from framework.core.errors import ConfigError
from framework.core.store import Store
from framework.report.compare import Rule, StateStatus, Verdict, compare_results
from framework.report.results import load

EXT4 = {"name": "ext4/ordered", "fstype": "ext4", "mkfs_options": [], "mount_options": [],
        "journal": "internal"}


def study(db: Path, *, files: dict[str, list[float]] | None = None,
          recovery: list[float] | None = None,
          states: list[tuple[int, str, str, list[str] | None]] = (),  # type: ignore[assignment]
          cut_outcomes: list[str] | None = None, name: str = "nightly",
          size: dict[str, object] | None = None) -> int:
    """A study run with a bench step (fsmark files/s per target), a cut step (recovery
    times) and a crash step (entry, mark, outcome, known ids per state)."""
    with Store(db) as store:
        top = store.start_run(command_line="powercut run", study=f"study {name}", kind="study")
        if files:
            bench = store.start_run(command_line="powercut bench", study="bench", kind="bench",
                                    parent_id=top, environment={"plan": {
                                        "targets": list(files), "workload": "fsmark",
                                        "baseline": next(iter(files)), "level": 0.95,
                                        **(size or {})}})
            for target, values in files.items():
                for rep, v in enumerate(values, 1):
                    store.add_bench_samples(bench, target, "fsmark", repetition=rep, metrics=[
                        Metric("files", v, "files/s", True), Metric("mkfs_s", 9.0 * rep, "s",
                                                                    False)])
        if recovery is not None or cut_outcomes is not None:
            cut = store.start_run(command_line="powercut cut", study="cut", kind="cut",
                                  parent_id=top)
            store.add_target(cut, "ext4/ordered", {**EXT4, "case": "random:10", "mode": "x"})
            times = recovery or [0.5] * len(cut_outcomes or [])
            for trial, t in enumerate(times):
                outcome = (cut_outcomes or ["ok"] * len(times))[trial]
                store.add_recovery(cut, "ext4/ordered", trial=trial, outcome=outcome,
                                   mount_s=t / 2, fsck_s=t / 2)
        if states:
            crash = store.start_run(command_line="powercut crash", study="crash", kind="crash",
                                    parent_id=top)
            store.add_target(crash, "ext4/ordered", EXT4)
            rec = store.add_recording(crash, "ext4/ordered", case_spec="gen:seq1", seed=0,
                                      log_path=None, entries=100, marks=10)
            for entry, mark, outcome, known in states:
                cp = store.add_crash_point(rec, entry_index=entry, kind=CrashPointKind.MARK,
                                           last_mark=mark)
                store.add_check(cp, variant="prefix", variant_seed=0, outcome=outcome,
                                findings=[{"kind": "data-loss", "path": "a/f",
                                           "detail": "missing"}] if outcome != "ok" else [],
                                reproducer=f"powercut recheck RUN {entry}/prefix", known=known)
        return top


def compared(db: Path, a: int, b: int, **rule: object):
    with Store(db) as store:
        return compare_results(load(store, str(a)), load(store, str(b)), Rule(**rule))  # type: ignore[arg-type]


def normal(mean: float, n: int = 10, cov: float = 0.05, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(x) for x in rng.normal(mean, cov * mean, n)]


def test_a_planted_throughput_regression_is_flagged_and_exits_1(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    a = study(db, files={"ext2": normal(300, seed=1), "ext4/ordered": normal(200, seed=2)})
    b = study(db, files={"ext2": normal(300, seed=3), "ext4/ordered": normal(140, seed=4)})
    c = compared(db, a, b)
    verdicts = {(m.target, m.metric): m.verdict for m in c.metrics}
    assert verdicts == {("ext2", "files"): Verdict.NO_CHANGE,
                        ("ext4/ordered", "files"): Verdict.REGRESSION,
                        # The ratio to the run's baseline target (ext2), Fieller's interval.
                        ("ext4/ordered", "files / ext2"): Verdict.REGRESSION}  # no setup metrics
    absolute, relative = c.regressions
    assert absolute.change == pytest.approx(-0.3, abs=0.05)
    assert relative.change == pytest.approx(-0.3, abs=0.05) and relative.unit == "x"
    assert relative.a.low < relative.a.mean < relative.a.high  # type: ignore[operator]
    assert main(["compare", str(a), str(b), "--db", str(db)]) == 1
    # The other way round it is an improvement, not a regression.
    assert compared(db, b, a).metrics[1].verdict is Verdict.IMPROVEMENT
    assert main(["compare", str(b), str(a), "--db", str(db)]) == 0


def test_the_relative_view_cancels_the_machines_speed_on_the_day(tmp_path: Path) -> None:
    """Run B on a machine 30% slower for every target: the absolute figures regress,
    each target's ratio to the baseline target does not."""
    db = tmp_path / "r.db"
    a = study(db, files={"ext2": normal(300, seed=1), "ext4/ordered": normal(200, seed=2)})
    b = study(db, files={"ext2": normal(210, seed=3), "ext4/ordered": normal(140, seed=4)})
    assert compared(db, a, b).regressed
    assert compared(db, a, b, bench="absolute").regressed
    relative = compared(db, a, b, bench="relative")
    assert [(m.target, m.metric, m.verdict) for m in relative.metrics] == [
        ("ext4/ordered", "files / ext2", Verdict.NO_CHANGE)]
    assert main(["compare", str(a), str(b), "--db", str(db), "--bench", "relative"]) == 0
    assert main(["compare", str(a), str(b), "--db", str(db), "--bench", "sideways"]) == 2


def test_runs_of_one_configuration_flag_nothing(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    for pair in range(3):
        seeds = [10 * pair + k for k in range(4)]
        a = study(db, files={"ext2": normal(300, seed=seeds[0]),
                             "ext4/ordered": normal(200, seed=seeds[1])},
                  recovery=normal(0.5, seed=seeds[2]))
        b = study(db, files={"ext2": normal(300, seed=seeds[2]),
                             "ext4/ordered": normal(200, seed=seeds[3])},
                  recovery=normal(0.5, seed=seeds[3]))
        for test in ("intervals", "welch"):
            c = compared(db, a, b, test=test)
            assert not c.regressed, [m for m in c.metrics if m.verdict is not Verdict.NO_CHANGE]


def test_the_threshold_and_the_test_decide_small_changes(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    tight_a = [100.0 + 0.1 * k for k in range(10)]
    tight_b = [95.0 + 0.1 * k for k in range(10)]  # 5% slower, intervals far apart
    a, b = study(db, files={"ext2": tight_a}), study(db, files={"ext2": tight_b})
    assert not compared(db, a, b).regressed
    assert compared(db, a, b, rel_threshold=0.03).regressed
    welch = compared(db, a, b, test="welch", rel_threshold=0.03).metrics[0]
    assert welch.verdict is Verdict.REGRESSION and welch.p_value is not None
    assert welch.p_value < 1e-6
    # Wide samples: a 5% difference Welch cannot tell from noise is no change.
    wide_a, wide_b = normal(100, cov=0.3, seed=5), normal(95, cov=0.3, seed=6)
    a, b = study(db, files={"ext2": wide_a}), study(db, files={"ext2": wide_b})
    assert compared(db, a, b, test="welch", rel_threshold=0.0).metrics[0].verdict is (
        Verdict.NO_CHANGE)
    one = study(db, files={"ext2": [100.0]})
    assert compared(db, a, one).metrics[0].verdict is Verdict.TOO_FEW


def test_slower_recovery_is_a_regression(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    a = study(db, recovery=normal(0.5, seed=1))
    b = study(db, recovery=normal(0.9, seed=2))
    c = compared(db, a, b)
    assert {m.metric for m in c.regressions} == {"recovery_s", "mount_s", "fsck_s"}
    assert all(m.group == "recovery" and not m.higher_is_better for m in c.metrics)


def test_crash_states_new_gone_known_by_mark_not_by_entry(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    a = study(db, states=[(10, "pc-0", "ok", None), (20, "pc-1", "data-loss", None),
                          (30, "pc-2", "ok", None), (40, "pc-3", "ok", None)])
    # Another recording: other entry numbers for the same marks.
    b = study(db, states=[(11, "pc-0", "data-loss", None), (23, "pc-1", "ok", None),
                          (35, "pc-2", "data-loss", ["some-known-id"]),
                          (47, "pc-3", "recovered", None)])
    c = compared(db, a, b)
    by_mark = {s.last_mark: s.status for s in c.states}
    # pc-3: fsck repaired a journalled ext4: a failure (crashcases.vocabulary.fails).
    assert by_mark == {"pc-0": StateStatus.NEW, "pc-1": StateStatus.GONE,
                       "pc-2": StateStatus.KNOWN, "pc-3": StateStatus.NEW}
    new = {s.last_mark: s for s in c.new_states}
    assert new["pc-0"].reproducer == "powercut recheck RUN 11/prefix"
    assert "a/f" in new["pc-0"].findings
    assert c.regressed
    only_gone = study(db, states=[(20, "pc-1", "ok", None)])
    assert not compared(db, a, only_gone).regressed  # something failing stopped failing
    only_known = study(db, states=[(20, "pc-1", "data-loss", ["k"])])
    assert not compared(db, only_gone, only_known).regressed


def test_new_failing_power_cuts_are_a_regression(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    a = study(db, cut_outcomes=["ok", "ok", "ok"])
    b = study(db, cut_outcomes=["ok", "data-loss", "ok"])
    c = compared(db, a, b)
    (cut,) = c.cuts
    assert (cut.failing_a, cut.failing_b, cut.new_failures) == (0, 1, True) and c.regressed


def test_json_and_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    a = study(db, files={"ext2": normal(300, seed=1)})
    b = study(db, files={"ext2": normal(200, seed=2)})
    other = study(db, files={"ext2": normal(300, seed=1)}, name="weekly")
    assert main(["compare", str(a), str(b), "--db", str(db), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["regressed"] and doc["counts"]["regressions"] == 1
    assert doc["metrics"][0]["verdict"] == "regression"
    for argv, message in [
        ([str(a), str(other)], "ran different things; --force compares"),
        ([str(a), "99"], "run '99': no run with that id"),
        ([str(a), str(b), "--rel-threshold", "12"], "--rel-threshold 12.0: expected a fraction"),
    ]:
        assert main(["compare", *argv, "--db", str(db)]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err
    assert main(["compare", str(a), str(other), "--db", str(db), "--force"]) == 0
    assert main(["compare", "1", "2", "--db", str(tmp_path / "none.db")]) == 2
    assert not (tmp_path / "none.db").exists()  # a missing database is not created
    # B from another database.
    db2 = tmp_path / "b.db"
    b2 = study(db2, files={"ext2": normal(200, seed=2)})
    assert main(["compare", str(a), str(b2), "--db", str(db), "--db-b", str(db2)]) == 1


def test_a_ratio_to_a_baseline_that_measured_nothing_or_too_little_is_not_judged(
        tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    a = study(db, files={"ext2": [0.0, 0.0, 0.0], "ext4/ordered": normal(200, seed=2)})
    b = study(db, files={"ext2": [1.0, -1.0, 0.5], "ext4/ordered": normal(140, seed=4)})
    (ratio,) = [m for m in compared(db, a, b, bench="relative").metrics]
    assert ratio.verdict is Verdict.TOO_FEW and ratio.a.mean is None
    # B's baseline mean cannot be told from 0: a point estimate without an interval.
    assert ratio.b.mean is not None and ratio.b.bounds is None


def test_runs_whose_repetitions_did_different_work_are_not_compared(tmp_path: Path,
                                                                     capsys) -> None:
    db = tmp_path / "r.db"
    files = {"ext2": normal(300, seed=1)}
    tiny = study(db, files=files, size={"scale": "tiny"})
    small = study(db, files=files, size={"scale": "small"})
    short = study(db, files=files, size={"scale": "small", "duration_s": 10})
    again = study(db, files=files, size={"scale": "small"})
    unsaid = study(db, files=files)  # a plan that did not record its scale
    assert not compared(db, small, again).regressed  # control: the same work is compared
    assert not compared(db, unsaid, small).regressed
    with Store(db) as store:
        for x, y, words in [(tiny, small, "fsmark at tiny scale against small scale"),
                            (small, short, "fsmark at small scale against small scale, 10 s a repetition")]:
            with pytest.raises(ConfigError, match=f"ran {words}.*--force compares them anyway"):
                compare_results(load(store, str(x)), load(store, str(y)))
        forced = compare_results(load(store, str(tiny)), load(store, str(small)), force=True)
    assert [m.metric for m in forced.metrics if m.group == "bench fsmark"] == ["files"]
    assert main(["compare", str(tiny), str(small), "--db", str(db)]) == 2
    assert "not comparable" in capsys.readouterr().err
