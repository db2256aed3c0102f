"""The 7.3.4 findings study's page shows what its committed shard records hold: each row of
its table (states / known / new per workload, the totals, the power cuts) is made again here
from docs/measurements/data/2026-11-30-findings-7.3.4/ and compared, cell by cell."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs/measurements/2026-11-30-findings-7.3.4.md"
DATA = ROOT / "docs/measurements/data/2026-11-30-findings-7.3.4"
CASES = ["gen:seq1", "gen:seq2", "gen:burst", "gen:chain", "stress:400", "ranges:600"]


def rows_from_data() -> dict[str, list[str]]:
    cells: dict[str, dict[str, tuple[int, int, int]]] = defaultdict(dict)
    cuts: dict[str, dict[str, int]] = {}
    for path in sorted(DATA.glob("shard*.json")):
        record = json.loads(path.read_text())
        for m in record["matrix"]:
            cells[m["target"]][m["case"]] = (m["states"], m["counts"]["known"], m["failing"])
        for c in record["cut"] or []:
            cuts[c["target"]] = c["counts"]
    rows = {}
    for target, by_case in cells.items():
        row = [f"{s} / {k} / {f'**{n}**' if n else 0}" for s, k, n in
               (by_case[c] for c in CASES)]
        s, k, n = (sum(v[i] for v in by_case.values()) for i in range(3))
        row += [f"{s:,}", f"{k:,}", f"**{n}**" if n else "0",
                ", ".join(f"{o} {v}" for o, v in cuts[target].items() if v)]
        rows[target] = row
    return rows


def rows_on_page() -> dict[str, list[str]]:
    rows = {}
    for line in PAGE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 11 and cells[0] not in ("target", "all"):
            rows[cells[0]] = cells[1:]
    return rows


def test_the_pages_table_is_its_data() -> None:
    data, page = rows_from_data(), rows_on_page()
    assert sorted(page) == sorted(data) and len(data) == 11  # ReiserFS: not in 7.3.4
    for target, row in data.items():
        assert page[target] == row, target
    totals = [sum(int(data[t][i].replace(",", "").strip("*")) for t in data) for i in (6, 7, 8)]
    assert f"| all | | | | | | | {totals[0]:,} | {totals[1]:,} | **{totals[2]}** | 33 trials |" \
        in PAGE.read_text()
    assert totals == [14660, 1867, 29]
