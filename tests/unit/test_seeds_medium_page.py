"""The seed studies' medium-scale page shows what its committed run records hold: each row of
its table (wall, CPU and guest seconds, the verdicts' counts) is made again here from
docs/measurements/data/2026-11-30-seeds-medium/ and compared cell by cell, and every claim
that is not comparable in those records has a row in the page's table of open claims with the
count of repetitions its record says would decide it."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs/measurements/2026-11-30-seeds-medium.md"
DATA = ROOT / "docs/measurements/data/2026-11-30-seeds-medium"
# The records the page's answer is built from, in its table's order; earlier runs of the
# same study and kernel are in the same folder and named on the page, not in the table.
RECORDS = [
    "seed000-bonnie-6.12.117",
    "seed001-dbench-6.12.117",
    "seed002-servers-6.12.117-2",
    "seed003-smallfiles-6.12.117",
    "seed004-flash-journal-6.12.117-2",
    "seed004-flash-journal-7.3.4",
]
VERDICTS = ("agree", "disagree", "not comparable")


def row(record: dict) -> list[str]:
    counts = Counter(c["verdict"] for c in record["claims"])
    cost = record["cost"]
    return [record["study"], record["kernel"].split("+")[0], f"`{record['git_revision'][:7]}`",
            str(len(record["steps"])), f"{cost['wall_s']:,.0f} s", f"{cost['cpu_s']:,.0f}",
            f"{cost['guest_s']:,.0f}", *(str(counts[v]) for v in VERDICTS)]


def records() -> list[dict]:
    return [json.loads((DATA / f"{name}.json").read_text()) for name in RECORDS]


def page_rows() -> list[list[str]]:
    rows = []
    for line in PAGE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| seed") and len(cells) == 10:
            rows.append(cells)
    return rows


def test_the_pages_table_is_its_data() -> None:
    assert page_rows() == [row(r) for r in records()]


def test_the_pages_totals_are_its_data() -> None:
    on_612 = [r for r in records() if r["kernel"].startswith("6.12.117")]
    assert sorted(r["study"] for r in on_612) == [f"seed00{i}" + s for i, s in enumerate(
        ("-bonnie", "-dbench", "-servers", "-smallfiles", "-flash-journal"))]
    counts = Counter(c["verdict"] for r in on_612 for c in r["claims"])
    total = sum(counts.values())
    line = (f"| all five on 6.12.117 | | | | | | | {counts['agree']} | {counts['disagree']} | "
            f"{counts['not comparable']} of {total} |")
    assert line in PAGE.read_text()


def test_every_claim_not_comparable_is_explained_on_the_page() -> None:
    text = PAGE.read_text()
    for record in records():
        for claim in record["claims"]:
            if claim["verdict"] == "not comparable":
                kernel = record["kernel"].split("+")[0]
                rows = [line for line in text.splitlines()
                        if line.startswith(f"| {record['study']} ({kernel}) | `{claim['id']}` |")]
                assert len(rows) == 1, (record["study"], kernel, claim["id"])
                count = re.search(r"about (\d+) repetitions", claim["why"])
                assert count and f"| {count.group(1)} |" in rows[0], (claim["id"], claim["why"])
