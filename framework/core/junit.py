"""JUnit XML for CI systems: one testcase per checked crash state."""

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


def write(path: Path, suite: str, cases: Iterable[Case]) -> None:
    items = list(cases)
    root = ET.Element("testsuites")
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(items)),
                       failures=str(sum(1 for c in items if c.failure)), errors="0",
                       time=f"{sum(c.time_s for c in items):.3f}")
    for c in items:
        tc = ET.SubElement(ts, "testcase", name=c.name, classname=c.classname, time=f"{c.time_s:.3f}")
        if c.failure:
            f = ET.SubElement(tc, "failure", message=c.failure)
            f.text = c.details
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
