"""JUnit XML for CI systems: crash states, power-cut trials and benchmark comparisons as test cases.

A case fails (``failure``), could not run (``error``: a harness error,
never a verdict on the filesystem), is skipped (``skipped``: what xfstests and
kdevops users see for expunged tests; powercut uses it for known
behaviour) or passes; ``output`` goes to ``<system-out>``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    classname: str
    time_s: float
    failure: str | None = None  # one-line message; None: passed
    details: str = ""
    skipped: str | None = None  # one-line message: reported, neither passed nor failed
    output: str = ""  # <system-out>
    error: str | None = None  # one-line message: the harness could not run the case


def write(path: Path, suite: str, cases: Iterable[Case]) -> None:
    write_suites(path, [(suite, cases)])


def write_suites(path: Path, suites: Iterable[tuple[str, Iterable[Case]]]) -> None:
    """One file, one <testsuite> per (name, cases): e.g. one per target of a run."""
    root = ET.Element("testsuites")
    for suite, cases in suites:
        items = list(cases)
        ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(items)),
                           failures=str(sum(1 for c in items if c.failure)),
                           errors=str(sum(1 for c in items if c.error and not c.failure)),
                           skipped=str(sum(1 for c in items if c.skipped and not c.failure)),
                           time=f"{sum(c.time_s for c in items):.3f}")
        for c in items:
            tc = ET.SubElement(ts, "testcase", name=c.name, classname=c.classname,
                               time=f"{c.time_s:.3f}")
            if c.failure:
                f = ET.SubElement(tc, "failure", message=c.failure)
                f.text = c.details
            elif c.error:
                f = ET.SubElement(tc, "error", message=c.error)
                f.text = c.details
            elif c.skipped:
                f = ET.SubElement(tc, "skipped", message=c.skipped)
                f.text = c.details
            if c.output:
                ET.SubElement(tc, "system-out").text = c.output
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def kcidb(cases: Iterable[Case], *, origin: str, run: str, missing: Iterable[str] = ()) -> dict:
    """The same verdicts in KernelCI's KCIDB words (schema 4: "tests" with a status of
    PASS, FAIL, ERROR, MISS or SKIP): a failure is FAIL, a harness error ERROR, a skipped
    case SKIP, a passing one PASS; ``missing`` names tests that should have run and did not
    (MISS)."""
    tests = []
    for n, c in enumerate(cases):
        status = ("FAIL" if c.failure else "ERROR" if c.error else "SKIP" if c.skipped
                  else "PASS")
        tests.append({"id": f"{origin}:{run}:{n}", "origin": origin,
                      "path": f"{c.classname}.{c.name}".replace(" ", "_"), "status": status,
                      "comment": c.failure or c.error or c.skipped or "",
                      "duration": c.time_s})
    for m, name in enumerate(missing):
        tests.append({"id": f"{origin}:{run}:miss{m}", "origin": origin,
                      "path": name.replace(" ", "_"), "status": "MISS",
                      "comment": "did not run", "duration": 0.0})
    return {"version": {"major": 4, "minor": 3}, "tests": tests}
