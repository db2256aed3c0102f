"""The seed studies' medium-scale pages show what their committed run records hold: each row
of a page's table (wall, CPU and guest seconds, the verdicts' counts) is made again here from
the page's data folder and compared cell by cell, the totals line is summed from the records,
and every claim that is not comparable in those records has a row in the page's table of open
claims with the count of repetitions its record says would decide it.

Three pages: the first medium runs, in one shuffled order (2026-11-30-seeds-medium), the
runs in rounds with paired intervals (2026-11-30-seeds-blocked), whose totals add the first
page's records of the studies it did not run again, and seed 000 at 24 repetitions a target
(2026-11-30-seeds-levers), whose totals take every other study's latest record."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MEASUREMENTS = ROOT / "docs/measurements"
VERDICTS = ("agree", "disagree", "not comparable")


@dataclass(frozen=True)
class Page:
    name: str
    #: The records the page's table is built from, in its order, as (data folder, record);
    #: earlier runs of the same study and kernel are in the folders too and named on the
    #: page, not in the table.
    table: tuple[tuple[str, str], ...]
    #: The records summed in the page's "all five on 6.12.117" line.
    totals: tuple[tuple[str, str], ...]

    @property
    def text(self) -> str:
        return (MEASUREMENTS / f"{self.name}.md").read_text()


MEDIUM = "2026-11-30-seeds-medium"
BLOCKED = "2026-11-30-seeds-blocked"
LEVERS = "2026-11-30-seeds-levers"
FIRST = (
    (MEDIUM, "seed000-bonnie-6.12.117"),
    (MEDIUM, "seed001-dbench-6.12.117"),
    (MEDIUM, "seed002-servers-6.12.117-2"),
    (MEDIUM, "seed003-smallfiles-6.12.117"),
    (MEDIUM, "seed004-flash-journal-6.12.117-2"),
)
AGAIN = (
    (BLOCKED, "seed000-bonnie-6.12.117"),
    (BLOCKED, "seed001-dbench-6.12.117"),
    (BLOCKED, "seed002-servers-6.12.117"),
)
PAGES = [
    Page(MEDIUM, (*FIRST, (MEDIUM, "seed004-flash-journal-7.3.4")), FIRST),
    Page(BLOCKED, AGAIN, (*AGAIN, *FIRST[3:])),
    Page(LEVERS, ((LEVERS, "seed000-bonnie-6.12.117"),),
         ((LEVERS, "seed000-bonnie-6.12.117"), *AGAIN[1:], *FIRST[3:])),
]


def record(folder: str, name: str) -> dict:
    return json.loads((MEASUREMENTS / "data" / folder / f"{name}.json").read_text())


def row(rec: dict) -> list[str]:
    counts = Counter(c["verdict"] for c in rec["claims"])
    cost = rec["cost"]
    return [rec["study"], rec["kernel"].split("+")[0], f"`{rec['git_revision'][:7]}`",
            str(len(rec["steps"])), f"{cost['wall_s']:,.0f} s", f"{cost['cpu_s']:,.0f}",
            f"{cost['guest_s']:,.0f}", *(str(counts[v]) for v in VERDICTS)]


def page_rows(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| seed") and len(cells) == 10:
            rows.append(cells)
    return rows


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_pages_table_is_its_data(page: Page) -> None:
    assert page_rows(page.text) == [row(record(*key)) for key in page.table]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_pages_totals_are_its_data(page: Page) -> None:
    on_612 = [record(*key) for key in page.totals]
    assert all(r["kernel"].startswith("6.12.117") for r in on_612)
    assert sorted(r["study"] for r in on_612) == [f"seed00{i}" + s for i, s in enumerate(
        ("-bonnie", "-dbench", "-servers", "-smallfiles", "-flash-journal"))]
    counts = Counter(c["verdict"] for r in on_612 for c in r["claims"])
    total = sum(counts.values())
    line = (f"| all five on 6.12.117 | | | | | | | {counts['agree']} | {counts['disagree']} | "
            f"{counts['not comparable']} of {total} |")
    assert line in page.text


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_claim_not_comparable_is_explained_on_the_page(page: Page) -> None:
    text = page.text
    for key in dict.fromkeys((*page.table, *page.totals)):
        rec = record(*key)
        for claim in rec["claims"]:
            if claim["verdict"] == "not comparable":
                kernel = rec["kernel"].split("+")[0]
                rows = [line for line in text.splitlines()
                        if line.startswith(f"| {rec['study']} ({kernel}) | `{claim['id']}` |")]
                assert len(rows) == 1, (rec["study"], kernel, claim["id"])
                count = re.search(r"about (\d+) repetitions", claim["why"])
                assert count and f"| {count.group(1)} |" in rows[0], (claim["id"], claim["why"])
