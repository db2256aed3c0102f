"""powercut ci without a guest: the study's commands are stood in for by a fake that
records results depending on the kernel it is given; the judging, the reruns, JUnit and
the markdown summary are the real ones."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from crashcases.vocabulary import CrashPointKind
from framework.core.errors import SKIPPED, Unsupported
from framework.core.lifecycle import RunSpec, run_lifecycle
from framework.core.store import Store

STUDY = """
[study]
name = "tiny-ci"
description = "one crash step and a positive control"

[[step]]
command = "crash"
targets = ["ext4/ordered"]
options = { case = "gen:seq1", max-sequences = 3 }

[[step]]
command = "crash"
targets = ["ext4/nobarrier"]
options = { case = "hand:write-fsync-rename" }
expect = "fail"
"""

EXT4 = {"name": "ext4/ordered", "fstype": "ext4", "mkfs_options": [], "mount_options": [],
        "journal": "internal"}


def kernel_of(argv: list[str]) -> str:
    return argv[argv.index("--kernel-release") + 1] if "--kernel-release" in argv else "default"


def fake_step(argv: list[str], rechecks: list[list[str]]) -> int:
    """A crash step: on kernel 'broken' pc-1 of ext4/ordered loses data; on 'quiet' the
    positive control finds nothing. A recheck fails again on 'broken' ('flaky': every
    other time)."""
    kernel = kernel_of(argv)
    if argv[0] == "recheck":
        rechecks.append(argv)
        if kernel == "flaky":
            return 1 if len(rechecks) % 2 else 0
        return 1 if kernel in ("broken", "flaky") else 0
    target = argv[argv.index("--target") + 1]
    db, results = Path(argv[argv.index("--db") + 1]), Path(argv[argv.index("--results") + 1])
    failing = {("ext4/ordered", "pc-1")} if kernel in ("broken", "flaky") else set()
    if target == "ext4/nobarrier" and kernel != "quiet":
        failing = {("ext4/nobarrier", "pc-0")}
    with Store(db) as store, run_lifecycle(RunSpec("crash", f"crash {target}"), results,
                                           store) as run:
        assert run.run_id is not None
        store.update_environment(run.run_id, {"guest": {"kernel": kernel}})
        store.add_target(run.run_id, target, {**EXT4, "name": target})
        rec = store.add_recording(run.run_id, target, case_spec="gen:seq1", seed=0,
                                  log_path=None, entries=30, marks=3)
        for i in range(3):
            cp = store.add_crash_point(rec, entry_index=10 * i + len(kernel),
                                       kind=CrashPointKind.MARK, last_mark=f"pc-{i}")
            bad = (target, f"pc-{i}") in failing
            store.add_check(cp, variant="prefix", variant_seed=0,
                            outcome="data-loss" if bad else "ok",
                            reproducer=f"powercut recheck {run.run_dir} {10 * i}/prefix")
    return 1 if failing else 0


@pytest.fixture
def ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import framework.cli as cli
    from framework.cli import doctor, vm
    from framework.cli import run as run_command

    monkeypatch.setattr(run_command, "kernel_spec", lambda *a: None)  # fake kernel names
    monkeypatch.setattr(doctor, "failed", lambda checks: [])
    monkeypatch.setattr(doctor, "diagnose", lambda spec: [])
    monkeypatch.setattr(vm, "resolve_kernel", lambda args: None)
    real_main = cli.main
    rechecks: list[list[str]] = []

    def main(argv, on_error=None, nested=False):  # type: ignore[no-untyped-def]
        assert nested, argv  # a step of run or ci: an interrupt must stop the outer command
        if argv[0] in ("run", "ci", "compare"):
            return real_main(argv, on_error=on_error, nested=nested)
        if kernel_of(list(argv)) == "old" and "ext4/nobarrier" in argv:
            # As the real command skips a target whose module the kernel lacks.
            on_error(Unsupported("target ext4/nobarrier needs kernel module ext4 (not in "
                                 "kernel old)"))
            return SKIPPED
        return fake_step(list(argv), rechecks)

    monkeypatch.setattr(cli, "main", main)
    study = tmp_path / "study.toml"
    study.write_text(STUDY)

    def run(*argv: str) -> int:
        return real_main(["ci", "--study", str(study), "--db", str(tmp_path / "ci.sqlite"),
                          "--results", str(tmp_path / "r"), "--accel", "tcg", *argv])

    run.rechecks = rechecks  # type: ignore[attr-defined]
    return run


def test_the_same_kernel_against_itself_is_no_regression(ci, tmp_path: Path, capsys) -> None:
    assert ci("--kernel-release", "good", "--baseline-kernel-release", "good") == 0
    out = capsys.readouterr().out
    assert "verdict: no regression" in out
    summary = next((tmp_path / "r").glob("study-*/ci.md")).read_text()
    assert summary.startswith("# powercut ci: no regression")
    # Each side says what it holds: the positive control's failing state among them.
    assert summary.count("6 crash states (data-loss 1, ok 5), 0 power cuts, "
                         "0 benchmark repetitions") == 2


def test_a_kernel_that_breaks_a_promise_is_a_regression_named_with_its_reproducer(
        ci, tmp_path: Path, capsys) -> None:
    assert ci("--kernel-release", "broken", "--baseline-kernel-release", "good") == 1
    out = capsys.readouterr().out
    # Findings first: the new one, checked again (the first check counts: 1 + 3 reruns).
    assert "findings: 1 finding (1 state) new in B, 1 finding (1 state) still there" in out
    assert "NEW   ext4: " in out and "ext4/ordered: A 0, B 1 states (1 new)" in out
    assert "checked again as gen:seq1 16/prefix: fails 4/4, reliable" in out
    assert "verdict: REGRESSION (1 finding (1 state) new, 1 new failing states;" in out
    assert "NEW           [1] ext4/ordered gen:seq1 pc-1 prefix: data-loss" in out
    assert len(ci.rechecks) == 3
    assert all(r[r.index("--kernel-release") + 1] == "broken" for r in ci.rechecks)
    # Each recheck is kept in the candidate's store as a rerun (powercut recheck --db).
    assert all(r[r.index("--db") + 1] == str(tmp_path / "ci.sqlite") for r in ci.rechecks)
    (candidate,) = [p.parent for p in (tmp_path / "r").glob("study-*/ci.md")]
    summary = (candidate / "ci.md").read_text()
    assert "Verdict: regression (1 finding (1 state) new, 1 new failing states;" in summary
    assert summary.index("## New findings, and findings failing in more states") < summary.index(
        "## New failing crash states")
    assert "| 1 | ext4: " in summary and "| ext4/ordered | new | 1 (1) | fails 4/4, reliable |" in (
        summary)
    assert "| ext4/ordered | gen:seq1 | pc-1 | prefix | data-loss | finding 1, fails 4/4, " \
           "reliable |" in summary
    assert "`powercut recheck " in summary
    assert "kernel broken, 6 crash states (data-loss 2, ok 4)" in summary
    suite = ET.parse(candidate / "ci.xml").getroot()
    failures = [tc for tc in suite.iter("testcase") if tc.find("failure") is not None]
    assert [tc.get("name") for tc in failures] == ["ext4/ordered gen:seq1 pc-1 prefix"]
    assert "finding 1, fails 4/4, reliable" in failures[0].find("failure").get("message", "")


def test_flaky_states_and_a_database_as_baseline(ci, tmp_path: Path, capsys) -> None:
    assert ci("--kernel-release", "good", "--baseline-kernel-release", "good") == 0
    base = tmp_path / "base.sqlite"
    (tmp_path / "ci.sqlite").rename(base)
    capsys.readouterr()
    assert ci("--kernel-release", "flaky", "--baseline", str(base), "--reruns", "4") == 1
    # Two of four reruns fail, and the first check: "fails 3/5".
    assert "fails 3/5, flaky 60%" in capsys.readouterr().out


def test_a_positive_control_that_stops_firing_fails_the_candidate(ci, capsys) -> None:
    assert ci("--kernel-release", "quiet", "--baseline-kernel-release", "good") == 1
    assert "CONTROL QUIET step 2" in capsys.readouterr().out


def test_a_step_the_candidate_cannot_run_is_skipped_not_failed(ci, tmp_path: Path, capsys) -> None:
    assert ci("--kernel-release", "old", "--baseline-kernel-release", "good") == 0
    out = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert "CONTROL QUIET" not in out  # a skipped control is not a quiet one
    assert ("SKIPPED step 2: powercut crash --target ext4/nobarrier --case "
            "hand:write-fsync-rename: target ext4/nobarrier needs kernel module ext4 (not in "
            "kernel old)") in out
    assert "verdict: no regression" in out
    (candidate,) = [p.parent for p in (tmp_path / "r").glob("study-*/ci.md")]
    summary = (candidate / "ci.md").read_text()
    assert "## Steps skipped on the candidate" in summary
    suite = ET.parse(candidate / "ci.xml").getroot()
    (skipped,) = [tc for tc in suite.iter("testcase") if tc.get("classname") == "powercut.ci.steps"]
    assert skipped.get("name") == "step 2" and skipped.find("skipped") is not None
    assert "needs kernel module ext4" in skipped.find("skipped").get("message", "")


def test_harness_errors_exit_2(ci, capsys) -> None:
    assert ci("--kernel-release", "good") == 2
    assert "name one baseline" in capsys.readouterr().err
    assert ci("--kernel-release", "good", "--baseline", "42") == 2
    assert "run '42': " in capsys.readouterr().err


def test_verdicts_in_kernelci_words() -> None:
    from framework.core import junit

    cases = [junit.Case("a", "c", 0.1), junit.Case("b", "c", 0.2, failure="lost"),
             junit.Case("d", "c", 0.0, error="harness"), junit.Case("e", "c", 0.0, skipped="known")]
    out = junit.kcidb(cases, origin="powercut", run="u1", missing=["powercut.ci.step.4"])
    assert [t["status"] for t in out["tests"]] == ["PASS", "FAIL", "ERROR", "SKIP", "MISS"]
    assert out["tests"][1]["comment"] == "lost" and out["tests"][4]["path"] == "powercut.ci.step.4"
    assert len({t["id"] for t in out["tests"]}) == 5
