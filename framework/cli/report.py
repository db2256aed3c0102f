"""``powercut report``: one self-contained HTML file of a run or study, and its summary."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from framework.cli import print_json
from framework.core import rundir
from framework.core.files import write_atomic
from framework.core.rundir import write_json_atomic
from framework.core.store import Store, StoreError

DESCRIPTION = """\
Write the report of a run or a study run (default: the latest top-level run)
as one HTML file that opens from disk: figures inline, nothing fetched.

It shows, for what the run has: recovery time against journal overhead per
target (overhead of the bench's primary metric against its baseline with
its Fieller interval; recovery after power cuts as median, p90 and max; the
crash verdict as the marker), recovery-time distributions, recovery against
the data in flight at the cut, throughput with intervals and the ANOVA
table, the crash outcome matrix (target x case), the distinct findings (failing
states grouped by signature, each with its states, "fails f/t" where it was
checked again, its representative and reproducer), then every failing state
with its finding, and the environment. A summary of the same goes to the
terminal; --json prints the report's data instead.
"""

EPILOG = """\
examples:
  powercut report                               # latest run in results/powercut.sqlite
  powercut report 12 -o study.html
  powercut report latest --db ci.sqlite --json > report.json
"""


def cmd_report(args: argparse.Namespace) -> int:
    from framework.report.html import build, render_html
    from framework.report.results import load

    db = Path(args.db)
    if not db.is_file():
        raise StoreError(f"{db}: no such results database")
    with Store(db) as store:
        results = load(store, args.run)
    report = build(results)
    out = Path(args.output) if args.output else default_path(results.top.environment, db,
                                                             results.top.id)
    if not args.no_html:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out, render_html(report))
        report.data["html"] = os.fspath(out)
        if args.json_file:
            write_json_atomic(Path(args.json_file), report.data)
    if args.json:
        print_json(report.data)
    else:
        summary(report.data, Console())
        if not args.no_html:
            print(f"report: {out}")
    return 0


def default_path(environment: dict[str, object], db: Path, run_id: int) -> Path:
    run_dir = environment.get("run_dir")
    if isinstance(run_dir, str) and Path(run_dir).is_dir():
        return Path(run_dir) / rundir.REPORT
    return db.parent / rundir.report_for(run_id)


def summary(d: dict[str, object], out: Console) -> None:
    run = d["run"]
    assert isinstance(run, dict)
    out.print(f"{run['study']}: run {run['id']} ({run['kind']}), {run['status']}", markup=False)
    for m in d.get("missing", []) or []:  # type: ignore[attr-defined]
        out.print(f"  not in this run: {m}", markup=False)
    trade = d.get("trade_off") or {}
    assert isinstance(trade, dict)
    for panel in trade.get("panels") or []:
        t = Table(title=f"recovery against overhead ({trade['metric']}, {panel['profile']})")
        for col in ("configuration", "overhead %", "recovery s p90", "front", "crash"):
            # Names are never cut short; figures fold onto a second line if they must.
            t.add_column(col, no_wrap=col == "configuration", overflow="fold")
        for p in panel["points"]:
            over = ("unbounded" if p["overhead_low"] is None else
                    f"[{p['overhead_low']:+.1f}, {p['overhead_high']:+.1f}]")
            t.add_row(p["name"], f"{p['overhead_pct']:+.1f} {over}",
                      f"{p['recovery_p90_s']:.3g} [{p['recovery_low']:.3g}, "
                      f"{p['recovery_high']:.3g}] {100 * p['recovery_coverage']:.0f}%",
                      "yes" if p["front"] else ("dominated" if p["dominated_by"] else ""),
                      p["verdict"])
        out.print(t)
        for line in panel["answer"]:
            out.print(f"  {line}", markup=False)
    crash = d.get("crash")
    if isinstance(crash, dict):
        t = Table(title="crash states")
        for col in ("target", "case", "states", "ok", "recovered", "known", "failing",
                    "findings"):
            t.add_column(col, no_wrap=col == "target")  # names are never cut short
        for m in crash["matrix"]:
            c = m["counts"]
            t.add_row(m["target"], m["case"], str(m["states"]), str(c["ok"]),
                      str(c["recovered"]), str(c["known"]), str(m["failing"]), str(m["findings"]))
        out.print(t)
        print_findings(crash, out)
    cut = d.get("cut")
    if isinstance(cut, list):
        t = Table(title="power cuts")
        for col in ("target", "trials", "outcomes", "recovery s median", "p90", "max"):
            t.add_column(col, no_wrap=col == "target")  # names are never cut short
        for c in cut:
            r = c["recovery_s"] or {}
            t.add_row(c["target"], str(c["trials"]),
                      ", ".join(f"{o} {n}" for o, n in c["counts"].items()),
                      *(f"{r[k]:.3g}" if r else "-" for k in ("median", "p90", "max")))
        out.print(t)


def print_findings(crash: dict[str, Any], out: Console, most: int = 10) -> None:
    """Findings first ("2 findings (5 states) new, ..."), each with its states, how reliably
    it fails and its representative; then the failing states, each with its finding."""
    out.print(f"findings: {crash['summary']}", markup=False)
    for f in crash["findings"][:most]:
        rep = f["representative"]
        out.print(f"  {f['number']}. {f['words']}" + (" (known)" if f["known"] else ""),
                  markup=False)
        out.print(f"     {f['target']}: {f['states']} state{'' if f['states'] == 1 else 's'}"
                  + (f", {f['fails']['words']}" if f["fails"] else "")
                  + f", e.g. {rep['case']} {rep['state']} (run {rep['run_id']}): "
                  f"{f['explanation'][:300]}", markup=False)
        out.print(f"     reproduce: {f['reproducer']}", markup=False)
    if len(crash["findings"]) > most:
        out.print(f"  ... and {len(crash['findings']) - most} more findings (see the report)")
    failing = crash["failing"]
    if failing:
        out.print(f"failing states ({len(failing)}), by finding:", markup=False)
    for s in failing[:most]:
        out.print(f"  [{s['finding']}] {s['outcome']:<11} {s['target']} {s['case']} {s['state']}"
                  + (f" ({s['fails']})" if s["fails"] else "")
                  + f": {s['explanation'][:200]}", markup=False)
    if len(failing) > most:
        out.print(f"  ... and {len(failing) - most} more states (see the report)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="one self-contained HTML report of a run or study",
                       description=DESCRIPTION, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", nargs="?", default="latest",
                   help="run id, uuid (prefix) or 'latest' (default: the latest top-level run)")
    p.add_argument("--db", default=f"results/{rundir.DB}", metavar="PATH",
                   help="results database (default: results/powercut.sqlite)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="HTML file (default: report.html in the run's directory)")
    p.add_argument("--json", action="store_true", help="print the report's data as JSON")
    p.add_argument("--json-file", metavar="FILE", help="also write the report's data as JSON")
    p.add_argument("--no-html", action="store_true", help="write no HTML file")
    p.set_defaults(func=cmd_report)
