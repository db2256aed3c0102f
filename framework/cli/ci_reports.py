"""``powercut ci --report DIR``: a bug report's fstests tests on the baseline and the candidate.

A report folder (``powercut export RUN STATE --report DIR``) holds the fstests tests that
reproduce one bug. Judging a candidate fix means running them on the kernel without it
and the kernel with it: a test that fails on the baseline and passes on the candidate is
fixed; one that passes on the baseline and fails on the candidate is a regression (ci's
exit 1); one that fails on both is not fixed by the candidate (said, not a regression:
the candidate is judged against the baseline, not against the report). The verdicts are
fstests' own (framework.zoo.fstests), and they are added to the report's table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from crashcases.findings.export import ExportError
from crashcases.findings.fstests import copy_tests
from crashcases.findings.report import read_meta
from framework.core import junit
from framework.core.errors import ConfigError
from framework.core.machine.kernel import KernelSpec
from framework.zoo.fstests import built_checkout

#: What the pair of verdicts (baseline, candidate) says about the candidate.
STATUS = {("failed", "passed"): "fixed", ("passed", "failed"): "regression",
          ("failed", "failed"): "still fails", ("passed", "passed"): "passes on both"}


@dataclass(frozen=True, slots=True)
class ReportTest:
    """One fstests test of a report folder, run on both kernels."""

    report: Path
    test: str
    form: str
    baseline: str  # fstests' verdict: passed, failed, not run, missing, error
    candidate: str
    why: str = ""  # the candidate's: fstests' reason, or the first lines of the diff

    @property
    def status(self) -> str:
        return STATUS.get((self.baseline, self.candidate),
                          f"{self.baseline} on the baseline, {self.candidate} on the candidate")

    @property
    def regressed(self) -> bool:
        return self.status == "regression"

    def words(self) -> str:
        return (f"{self.report.name}: {self.test} ({self.form}): baseline {self.baseline}, "
                f"candidate {self.candidate}: {self.status}")


def checkout_of(given: str | None) -> Path:
    """The built fstests checkout the report tests run from: --xfstests, else
    POWERCUT_XFSTESTS; a one-line error when neither names one."""
    checkout = built_checkout(given, "--xfstests")
    if checkout is None:
        raise ConfigError("--report needs a built fstests checkout: --xfstests DIR or "
                          "POWERCUT_XFSTESTS")
    return checkout


def check_reports(folders: Sequence[str]) -> list[tuple[Path, dict[str, object]]]:
    """Each --report folder and its report.json, read before anything runs."""
    out = []
    for given in folders:
        folder = Path(given)
        try:
            meta = read_meta(folder)
        except ExportError as exc:
            raise ConfigError(f"--report {exc}") from exc
        if not meta["tests"]:
            raise ConfigError(f"--report {folder}: the report has no fstests test")
        out.append((folder, meta))
    return out


def run_reports(reports: Sequence[tuple[Path, dict[str, object]]], checkout: Path,
                baseline: KernelSpec, candidate: KernelSpec, workdir: Path) -> list[ReportTest]:
    """Every test of every report on the baseline kernel, then on the candidate."""
    from framework.zoo.fstests import run_test

    out = []
    for folder, meta in reports:
        tests = [(str(n), str(f)) for n, f in meta["tests"]]  # type: ignore[attr-defined]
        target = str(meta["target"])

        def add(copy: Path, folder: Path = folder, tests: list[tuple[str, str]] = tests) -> None:
            copy_tests(folder, copy, tests)

        for name, form in tests:
            verdicts = []
            for label, spec in (("baseline", baseline), ("candidate", candidate)):
                print(f"ci: {folder.name}: fstests {name} ({form}) on the {label} "
                      f"({spec.release}) ...", flush=True)
                v = run_test(checkout, name, target, spec,
                             workdir / f"{folder.name}-{name.replace('/', '-')}-{label}",
                             prepare=add)
                print(f"  {v.verdict}" + (f": {v.why}" if v.why else ""), flush=True)
                verdicts.append(v)
            out.append(ReportTest(folder, name, form, verdicts[0].verdict, verdicts[1].verdict,
                                  verdicts[1].why))
    return out


def markdown(tests: Sequence[ReportTest]) -> str:
    if not tests:
        return ""
    lines = ["", "## The reports' fstests tests", "",
             "| report | test | form | baseline | candidate | status |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {t.report.name} | {t.test} | {t.form} | {t.baseline} | {t.candidate} | "
              f"{t.status} |" for t in tests]
    return "\n".join([*lines, ""]) + "\n"


def junit_cases(tests: Sequence[ReportTest]) -> list[junit.Case]:
    return [junit.Case(f"{t.report.name} {t.test} ({t.form})", "powercut.ci.reports", 0.0,
                       t.words() if t.regressed else None, t.words())
            for t in tests]
