"""powercut ci --report DIR: a bug report's fstests tests on the baseline and the candidate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framework.cli import ci_reports, main
from framework.core.errors import ConfigError
from framework.core.machine.kernel import KernelSpec
from framework.zoo import fstests as zoo_fstests


def report_folder(tmp_path: Path) -> Path:
    """A report folder as powercut export --report writes it: report.json and its tests."""
    folder = tmp_path / "ext4-fc-bug"
    for name in ("998", "999"):
        (folder / "tests" / "ext4").mkdir(parents=True, exist_ok=True)
        (folder / "tests" / "ext4" / name).write_text(f"#! /bin/bash\n# test {name}\n")
        (folder / "tests" / "ext4" / f"{name}.out").write_text(f"QA output created by {name}\n")
    (folder / "report.json").write_text(json.dumps({
        "target": "ext4/fast_commit", "state": "147/prefix", "case": "file:workload.json",
        "tests": [["ext4/998", "flakey"], ["ext4/999", "log-writes"]], "fstests": []}))
    return folder


def spec(release: str) -> KernelSpec:
    return KernelSpec(image=Path(f"/k/{release}/bzImage"), release=release,
                      modules_root=Path(f"/k/{release}"))


@pytest.mark.parametrize(("base", "cand", "status", "regressed"), [
    ("failed", "passed", "fixed", False),
    ("failed", "failed", "still fails", False),
    ("passed", "failed", "regression", True),
    ("passed", "passed", "passes on both", False),
    ("failed", "not run", "failed on the baseline, not run on the candidate", False),
])
def test_each_pair_of_verdicts_says_what_the_candidate_did(base, cand, status, regressed):
    t = ci_reports.ReportTest(Path("r"), "ext4/998", "flakey", base, cand)
    assert (t.status, t.regressed) == (status, regressed)


def test_the_tests_run_on_both_kernels_from_the_report_folder(tmp_path, monkeypatch):
    folder = report_folder(tmp_path)
    checkout = tmp_path / "xfstests"
    (checkout / "tests" / "ext4").mkdir(parents=True)
    (checkout / "tests" / "ext4" / "group.list").write_text("001 auto quick\n")
    seen = []

    def fake_run(co, test, target, kernel, workdir, *, prepare=None):
        copy = workdir / "copy"
        copy.mkdir(parents=True)
        (copy / "tests" / "ext4").mkdir(parents=True)
        (copy / "tests" / "ext4" / "group.list").write_text("001 auto quick\n")
        prepare(copy)  # the report's tests, copied into the guest's checkout and registered
        assert (copy / "tests" / "ext4" / test.split("/")[1]).is_file()
        listed = (copy / "tests" / "ext4" / "group.list").read_text().split("\n")
        assert any(ln.startswith(test.split("/")[1] + " ") for ln in listed)
        seen.append((test, target, kernel.release))
        verdict = "passed" if kernel.release == "fixed" else "failed"
        return zoo_fstests.Verdict(test, kernel.release, verdict)

    monkeypatch.setattr(zoo_fstests, "run_test", fake_run)
    reports = ci_reports.check_reports([str(folder)])
    out = ci_reports.run_reports(reports, checkout, spec("7.3-unpatched"), spec("fixed"),
                                 tmp_path / "work")
    assert seen == [("ext4/998", "ext4/fast_commit", "7.3-unpatched"),
                    ("ext4/998", "ext4/fast_commit", "fixed"),
                    ("ext4/999", "ext4/fast_commit", "7.3-unpatched"),
                    ("ext4/999", "ext4/fast_commit", "fixed")]
    assert [t.status for t in out] == ["fixed", "fixed"]
    assert "| ext4-fc-bug | ext4/998 | flakey | failed | passed | fixed |" in \
        ci_reports.markdown(out)


def test_a_folder_that_is_not_a_report_is_one_line(tmp_path):
    with pytest.raises(ConfigError) as info:
        ci_reports.check_reports([str(tmp_path)])
    assert str(info.value) == (f"--report {tmp_path}: not a report folder (no report.json; "
                               "powercut export --report writes one)")


def test_report_tests_need_a_baseline_kernel_and_a_built_checkout(tmp_path, monkeypatch,
                                                                  capsys):
    folder = report_folder(tmp_path)
    monkeypatch.delenv("POWERCUT_XFSTESTS", raising=False)
    assert main(["ci", "--baseline", "latest", "--report", str(folder),
                 "--results", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err.strip() == ("powercut: --report needs a built fstests "
                                               "checkout: --xfstests DIR or POWERCUT_XFSTESTS")
    checkout = tmp_path / "xfstests"
    (checkout / "ltp").mkdir(parents=True)
    (checkout / "check").write_text("#!/bin/sh\n")
    (checkout / "ltp" / "fsx").write_text("")
    assert main(["ci", "--baseline", "latest", "--report", str(folder), "--xfstests",
                 str(checkout), "--results", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("powercut: --report runs its tests on two kernels: name the baseline "
                          "as a kernel")
    assert not (tmp_path / "r").exists()
