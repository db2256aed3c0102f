"""powercut export --report: a bug report folder from a failing crash state."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from crashcases.findings.export import ExportError, load_export_state
from crashcases.findings.report import write_report
from crashcases.vocabulary import Outcome
from framework.cli import main
from tests.unit.test_export import make_run, one_finding, planted_workload


def with_kernel(run: Path, kernel: str, *, failing: bool = True) -> Path:
    """The run's results.json says which kernel checked it, as a real run's does."""
    data = json.loads((run / "results.json").read_text())
    data["known"] = {"kernel": kernel}
    data["plan"] = json.loads((run / "plan.json").read_text())
    if not failing:
        for s in data["states"]:
            s["result"].update(outcome="ok", findings=[])
    (run / "results.json").write_text(json.dumps(data))
    return run


def other_run(tmp_path: Path, run: Path, kernel: str, *, failing: bool) -> Path:
    """A run of the same workload and target on another kernel."""
    out = tmp_path / f"run-{kernel}"
    shutil.copytree(run, out)
    return with_kernel(out, kernel, failing=failing)


def test_a_report_says_what_fails_where_with_tests_and_workload(tmp_path) -> None:
    run = with_kernel(make_run(tmp_path, planted_workload(), one_finding()), "7.3.4+deb13-amd64")
    passes = other_run(tmp_path, run, "7.3.4-fixed", failing=False)
    cause = tmp_path / "cause.md"
    cause.write_text("ext4_fsync_journal() skips the flush (fs/ext4/fsync.c, 7.3.4).\n")
    fix = tmp_path / "fix.patch"
    fix.write_text("--- a/fs/ext4/fsync.c\n+++ b/fs/ext4/fsync.c\n")
    out = tmp_path / "report"
    files = write_report(load_export_state(run, "40/prefix"), out, also=[passes],
                         cause_file=cause, fix_file=fix)
    text = (out / "report.md").read_text()
    assert text.startswith("# ext4: loses what was made durable after a power cut following "
                           "`fsync_dir .` (ext4/ordered, Linux 7.3.4+deb13-amd64)")
    assert "- data-loss: `d/g`: " in text  # the broken promise, from the finding
    assert "  11  fsync_dir ." in text and "  12  " not in text  # up to the state's call
    assert "| 7.3.4+deb13-amd64 | fails | 1 | 1 | data-loss |" in text
    assert "| 7.3.4-fixed | passes | 1 | 0 | ok |" in text
    assert "ext4_fsync_journal() skips the flush" in text and "## Candidate fix" in text
    assert (out / "cause.md").read_text() == cause.read_text()
    assert (out / "fix.patch").read_text() == fix.read_text()
    assert json.loads((out / "workload.json").read_text())["ops"][0] == {"kind": "mkdir",
                                                                         "path": "d"}
    # Both fstests forms where the state allows them, the dm-flakey one first.
    assert files.tests == (("ext4/998", "flakey"), ("ext4/999", "log-writes"))
    assert (out / "tests/ext4/998").is_file() and (out / "tests/ext4/999.out").is_file()
    assert "`tests/ext4/998`: the dm-flakey form" in text


def test_a_run_of_another_workload_is_refused_in_one_line(tmp_path) -> None:
    run = with_kernel(make_run(tmp_path, planted_workload(), one_finding()), "7.3.4+deb13-amd64")
    other = other_run(tmp_path, run, "6.12.117", failing=True)
    plan = json.loads((other / "results.json").read_text())
    plan["plan"]["case"] = "gen:seq1"
    (other / "results.json").write_text(json.dumps(plan))
    with pytest.raises(ExportError) as info:
        write_report(load_export_state(run, "40/prefix"), tmp_path / "r", also=[other])
    assert f"--also {other}: a run of 'gen:seq1', not of this state's workload" in str(info.value)
    assert not (tmp_path / "r").exists()  # nothing written


def test_a_report_folder_that_is_not_empty_is_kept_unless_forced(tmp_path, capsys) -> None:
    run = with_kernel(make_run(tmp_path, planted_workload(), one_finding()), "7.3.4+deb13-amd64")
    out = tmp_path / "report"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["export", str(run), "40/prefix", "--report", str(out)]) == 2
    assert "already exists and is not empty" in capsys.readouterr().err
    assert main(["export", str(run), "40/prefix", "--report", str(out), "--force"]) == 0
    assert (out / "report.md").is_file() and (out / "notes.txt").read_text() == "mine"


def test_a_passing_state_has_no_report(tmp_path, capsys) -> None:
    run = make_run(tmp_path, planted_workload(), [], outcome=Outcome.OK)
    assert main(["export", str(run), "40/prefix", "--report", str(tmp_path / "r")]) == 2
    assert "passed (ok): nothing to reproduce" in capsys.readouterr().err


def test_fstests_verdicts_of_each_kernel_are_kept_side_by_side(tmp_path) -> None:
    from crashcases.findings.report import FstestsRun, read_meta

    run = with_kernel(make_run(tmp_path, planted_workload(), one_finding()), "7.3.4+deb13-amd64")
    out = tmp_path / "report"
    state = load_export_state(run, "40/prefix")
    write_report(state, out, runs=[FstestsRun("ext4/998", "flakey", "7.3.4+deb13-amd64",
                                              "failed", "ext4/998 - output mismatch")])
    # The same tests on a second kernel, then the first kernel's test again.
    write_report(state, out, force=True,
                 runs=[FstestsRun("ext4/998", "flakey", "7.3-fix", "passed", "Passed all 1")])
    write_report(state, out, force=True,
                 runs=[FstestsRun("ext4/998", "flakey", "7.3.4+deb13-amd64", "failed", "again")])
    meta = read_meta(out)
    assert meta["target"] == "ext4/ordered" and meta["state"] == "40/prefix"
    assert [(r["kernel"], r["verdict"]) for r in meta["fstests"]] == [
        ("7.3-fix", "passed"), ("7.3.4+deb13-amd64", "failed")]
    text = (out / "report.md").read_text()
    assert "| ext4/998 | flakey | 7.3-fix | passed |" in text
    assert "| ext4/998 | flakey | 7.3.4+deb13-amd64 | failed |" in text
    assert (out / "fstests-7.3-fix.txt").read_text().startswith("== ext4/998 (flakey) on 7.3-fix")
    assert "again" in (out / "fstests-7.3.4+deb13-amd64.txt").read_text()
    # Without --force a new export starts a new table: the folder is refused first.
    with pytest.raises(ExportError):
        write_report(state, out)


def test_a_workload_files_path_stays_out_of_the_report(tmp_path) -> None:
    workload = planted_workload()
    mine = tmp_path / "home-me" / "w.json"
    mine.parent.mkdir()
    mine.write_text(workload.to_json())
    run = with_kernel(make_run(tmp_path, workload, one_finding()), "7.3.4+deb13-amd64")
    for name in ("results.json", "plan.json"):
        data = json.loads((run / name).read_text())
        (data["plan"] if name == "results.json" else data)["case"] = f"file:{mine}"
        (run / name).write_text(json.dumps(data))
    out = tmp_path / "report"
    write_report(load_export_state(run, "40/prefix"), out)
    text = (out / "report.md").read_text()
    assert "home-me" not in text and "--case file:workload.json" in text


def test_a_cause_written_as_a_page_sits_under_the_reports_cause_heading() -> None:
    from crashcases.findings.report import demoted

    cause = "# ext4: x\n\n## Summary\n\ntext\n\n```\n# a shell comment\n```\n### Why\n"
    assert demoted(cause) == ("### ext4: x\n\n#### Summary\n\ntext\n\n```\n# a shell comment\n"
                              "```\n##### Why")
