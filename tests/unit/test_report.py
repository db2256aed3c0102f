"""powercut report from a database made with the store's API: every section, inline PNG
figures only, reproducers, the JSON data, and what a run without some steps says."""

from __future__ import annotations

import base64
import json
import re
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from crashcases.vocabulary import CrashPointKind
from framework.bench.workloads import Metric
from framework.cli import main
from framework.core.store import Store
from framework.report.html import Report, _trade_off

EXT4 = {"name": "ext4/ordered", "fstype": "ext4", "mkfs_options": [], "mount_options": [],
        "journal": "internal"}
EXT2 = {"name": "ext2", "fstype": "ext2", "mkfs_options": [], "mount_options": [],
        "journal": "none"}
STEPS = [{"argv": ["crash"], "expect": "pass"}, {"argv": ["crash"], "expect": "fail"},
         {"argv": ["cut"], "expect": "pass"}, {"argv": ["bench"], "expect": "pass"}]


def make_study(db: Path, run_dir: Path, *, crash_only: bool = False,
               noisy_baseline: bool = False, blocked: bool = False) -> int:
    run_dir.mkdir(parents=True, exist_ok=True)
    with Store(db) as store:
        top = store.start_run(command_line="powercut run tiny", study="study tiny", kind="study",
                              environment={"plan": {"steps": STEPS}, "run_dir": str(run_dir),
                                           "host_kernel": "6.1-host"})

        def step(kind: str, number: int) -> int:
            return store.start_run(command_line=f"powercut {kind}", study=f"{kind} step",
                                   kind=kind, parent_id=top,
                                   environment={"study_step": number,
                                                "guest": {"kernel": "6.1.0-test"}})

        crash = step("crash", 1)
        control = step("crash", 2)
        for run_id, target, config, outcomes in (
                (crash, "ext4/ordered", EXT4, ["ok", "ok", "data-loss", "data-loss"]),
                (control, "ext4/nobarrier", {**EXT4, "name": "ext4/nobarrier"},
                 ["data-loss", "data-loss"])):
            store.add_target(run_id, target, config)
            rec = store.add_recording(run_id, target, case_spec="gen:seq1", seed=0,
                                      log_path=None, entries=40, marks=4)
            for i, outcome in enumerate(outcomes):
                cp = store.add_crash_point(rec, entry_index=10 * i, kind=CrashPointKind.MARK,
                                           last_mark=f"pc-{i}")
                known = ["some-known-id"] if (run_id, i) == (crash, 3) else None
                store.add_check(cp, variant="prefix", variant_seed=0, outcome=outcome,
                                mount_s=0.01 * (i + 1), fsck_s=0.3,
                                findings=[] if outcome == "ok" else [
                                    {"kind": "data-loss", "path": f"s{i}/f", "detail": "missing"}],
                                reproducer=f"powercut recheck /runs/{run_id} {10 * i}/prefix",
                                known=known)
        if crash_only:
            return top
        cut = step("cut", 3)
        for target, config, base in (("ext2", EXT2, 1.0), ("ext4/ordered", EXT4, 0.3)):
            store.add_target(cut, target, config)
            for trial in range(4):
                store.add_recovery(cut, target, trial=trial, outcome="ok",
                                   mount_s=0.02 * base, fsck_s=base + 0.05 * trial,
                                   in_flight_bytes=(trial + 1) << 20, in_flight_ops=trial)
        bench = store.start_run(command_line="powercut bench", study="bench step", kind="bench",
                                parent_id=top, environment={"study_step": 4, "plan": {
                                    "targets": ["ext2", "ext4/ordered"], "workload": "fsmark",
                                    "baseline": "ext2", "metric": "files", "level": 0.95,
                                    "blocked": blocked}})
        for target, mean in (("ext2", 300.0), ("ext4/ordered", 240.0)):
            for rep in range(1, 5):
                # A baseline this noisy leaves Fieller's overhead interval unbounded.
                spread = 290 * (-1) ** rep if noisy_baseline and target == "ext2" else 3 * rep
                store.add_bench_samples(bench, target, "fsmark", repetition=rep, metrics=[
                    Metric("files", mean + spread, "files/s", True),
                    Metric("app_overhead", 10.0 * rep, "us", False)])
        return top


def images(html: str) -> dict[str, bytes]:
    found = re.findall(r'<img (?:id|class)="([^"]+)"[^>]*src="data:image/png;base64,([^"]+)"',
                       html)
    return {name: base64.b64decode(data) for name, data in found}


def test_the_data_without_figures_is_the_same_data(tmp_path: Path) -> None:
    """compare reads a report's data only: built with draw=False it renders no figure and
    says exactly what the drawn report says."""
    from framework.report.html import build
    from framework.report.results import load

    db = tmp_path / "r.db"
    top = make_study(db, tmp_path / "study-run")
    with Store(db) as store:
        drawn, bare = build(load(store, str(top))), build(load(store, str(top)), draw=False)
    assert set(drawn.figures) == {"trade_off", "cut_times", "in_flight", "crash_times"} | {
        k for k in drawn.figures if k.startswith("throughput_")}
    assert any(k.startswith("throughput_") for k in drawn.figures)
    assert bare.figures == {}
    assert json.dumps(bare.data, sort_keys=True, default=str) == json.dumps(
        drawn.data, sort_keys=True, default=str)


def test_the_report_has_every_section_and_inline_figures(tmp_path: Path, capsys) -> None:
    db = tmp_path / "r.db"
    top = make_study(db, tmp_path / "study-run")
    assert main(["report", str(top), "--db", str(db)]) == 0
    out = capsys.readouterr().out
    html_path = tmp_path / "study-run" / "report.html"  # the run's own directory by default
    assert f"report: {html_path}" in out
    html = html_path.read_text()
    figs = images(html)
    assert set(figs) == {"fig-trade-off", "fig-cut", "fig-in-flight", "fig-crash-times",
                         "fig-throughput"}
    assert all(data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000
               for data in figs.values())
    assert html.count("<img") == len(figs)  # every image is inline
    assert not re.search(r"https?://|<script|<link", html)
    for section in ("Recovery time against journal overhead", "Recovery time", "Throughput",
                    "ANOVA term", "Crash states", "Environment"):
        assert section in html
    # The failing state that no known behaviour explains, with its reproducer; the known
    # one counted by its id; the positive control's failures reported as the control firing.
    assert "powercut recheck /runs/2 20/prefix" in html
    assert "powercut recheck /runs/2 30/prefix" not in html
    assert "<code>some-known-id</code> 1" in html
    assert "Positive controls" in html and "ext4/nobarrier gen:seq1: 2 failing states" in html
    assert "6.1.0-test" in html  # the guest kernel from the environment


def test_json_has_the_figures_data(tmp_path: Path, capsys) -> None:
    db = tmp_path / "r.db"
    top = make_study(db, tmp_path / "study-run")
    assert main(["report", str(top), "--db", str(db), "--json", "--no-html"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert not (tmp_path / "study-run" / "report.html").exists()
    (matrix_ext4, matrix_control) = d["crash"]["matrix"]
    assert matrix_ext4["counts"]["ok"] == 2 and matrix_ext4["counts"]["known"] == 1
    assert matrix_ext4["counts"]["data-loss"] == 1
    assert matrix_control["target"] == "ext4/nobarrier"
    assert matrix_control["counts"]["data-loss"] == 2
    assert d["crash"]["verdicts"] == {"ext4/ordered": "fail"}  # the control is left out
    (bench,) = d["bench"]
    ext4 = next(c for c in bench["targets"] if c["target"] == "ext4/ordered")
    assert ext4["overhead"]["pct"] == pytest.approx(20.0, abs=0.5)  # 240 against 300 files/s
    assert bench["anova"][0]["term"] == "target"
    (panel,) = d["trade_off"]["panels"]
    points = {p["name"]: p for p in panel["points"]}
    assert points["ext2"]["overhead_pct"] == 0.0 and points["ext4/ordered"]["verdict"] == "fail"
    assert points["ext2"]["recovery_median_s"] == pytest.approx(1.02 + 0.075)
    assert points["ext2"]["baseline"] and panel["answer"][0].startswith("on plain disks with ")
    assert d["missing"] == []


def test_a_crash_only_run_says_what_is_missing(tmp_path: Path, capsys) -> None:
    db = tmp_path / "r.db"
    top = make_study(db, tmp_path / "study-run", crash_only=True)
    out = tmp_path / "out.html"
    assert main(["report", str(top), "--db", str(db), "-o", str(out)]) == 0
    html = out.read_text()
    assert "Not in this run: recovery after power cuts" in html
    assert "Not in this run: throughput" in html
    assert set(images(html)) == {"fig-crash-times"}


def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, capsys) -> None:
    db = tmp_path / "r.db"
    make_study(db, tmp_path / "study-run")
    assert main(["report", "77", "--db", str(db), "-o", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert "run '77': no run with that id" in err and "\n" not in err
    assert not (tmp_path / "x.html").exists()
    assert main(["report", "--db", str(tmp_path / "none.db")]) == 2
    assert not (tmp_path / "none.db").exists()


def test_a_blocked_bench_step_reports_the_paired_overhead(tmp_path: Path, capsys) -> None:
    from framework.core.stats import overhead, paired_overhead

    ext2 = [300.0 + 3 * rep for rep in range(1, 5)]
    ext4 = [240.0 + 3 * rep for rep in range(1, 5)]
    for blocked, expected in ((True, paired_overhead(ext4, ext2, higher_is_better=True)),
                              (False, overhead(ext4, ext2, higher_is_better=True))):
        db = tmp_path / f"r{blocked}.db"
        top = make_study(db, tmp_path / f"run{blocked}", blocked=blocked)
        assert main(["report", str(top), "--db", str(db), "--json", "--no-html"]) == 0
        (bench,) = json.loads(capsys.readouterr().out)["bench"]
        cell = next(c for c in bench["targets"] if c["target"] == "ext4/ordered")["overhead"]
        assert cell["low_pct"] == pytest.approx(100 * expected.ci.low)
        assert cell["high_pct"] == pytest.approx(100 * expected.ci.high)
    # The rounds move both alike: paired, the interval is the narrower of the two.
    assert paired_overhead(ext4, ext2, higher_is_better=True).ci.half_width < \
        overhead(ext4, ext2, higher_is_better=True).ci.half_width / 2


def test_an_unbounded_overhead_interval_still_draws_its_point(tmp_path: Path, capsys) -> None:
    db = tmp_path / "r.db"
    top = make_study(db, tmp_path / "study-run", noisy_baseline=True)
    assert main(["report", str(top), "--db", str(db), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    ext4 = next(c for c in d["bench"][0]["targets"] if c["target"] == "ext4/ordered")
    assert "overhead" not in ext4 and "unbounded" in ext4["overhead_error"]
    points = {p["name"]: p for p in d["trade_off"]["panels"][0]["points"]}
    assert points["ext4/ordered"]["overhead_pct"] == pytest.approx(100 * (1 - 247.5 / 300))
    assert points["ext4/ordered"]["overhead_low"] is None
    html = (tmp_path / "study-run" / "report.html").read_text()
    assert "fig-trade-off" in images(html)
    assert "overhead interval is unbounded" in html
    assert main(["report", str(top), "--db", str(db), "--no-html"]) == 0  # the terminal summary
    assert re.search(r"ext4/ordered\W+\S+\W+unbounded", capsys.readouterr().out)  # whole name


def test_a_trade_off_with_no_point_says_why(tmp_path: Path, capsys) -> None:
    db = tmp_path / "r.db"
    top = make_study(db, tmp_path / "study-run")
    with sqlite3.connect(db) as con:  # the cut step has no trial left
        con.execute("DELETE FROM recoveries")
    assert main(["report", str(top), "--db", str(db), "--json", "--no-html"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["trade_off"]["panels"] == []
    (why,) = [m for m in d["missing"] if m.startswith("the trade-off figure")]
    assert "ext2 (no cut data)" in why and "ext4/ordered (no cut data)" in why


def test_a_target_of_several_bench_steps_is_left_out_of_the_trade_off_once() -> None:
    """A study whose bench steps share targets (seed 002: ext2 and xfs in four of them) and has
    no cut step names each target once among those the trade-off leaves out, not once a step."""
    step = {"metric": "read_iops", "workload": "fio-file-server", "baseline": "ext2",
            "targets": [{"target": "ext2"}, {"target": "xfs", "overhead": None}]}
    report = Report({"bench": [step, dict(step)], "missing": []}, draw=False)
    _trade_off(SimpleNamespace(recoveries=pd.DataFrame(), targets={}), report)  # type: ignore[arg-type]
    assert report.data["trade_off"]["left_out"] == ["ext2 (no cut data)", "xfs (no cut data)"]
    (why,) = report.data["missing"]
    assert why.endswith("(left out: ext2 (no cut data), xfs (no cut data))")


def test_a_repaired_journalled_state_counts_as_failing_and_a_journal_less_one_does_not(
        tmp_path: Path, capsys) -> None:
    """fsck's repair is recovery for ext2 and a failure for a journalled ext4: the crash
    table's "failing" column and the JSON follow the target, not the outcome alone.
    Positive control: the ext4 row's recovered state is counted (it was 0 before)."""
    db = tmp_path / "r.sqlite"
    with Store(db) as store:
        run = store.start_run(command_line="powercut crash", study="crash", kind="crash",
                              environment={"guest": {"kernel": "7.3.4"}})
        for target, config in (("ext4/ordered", EXT4), ("ext2", EXT2)):
            store.add_target(run, target, config)
            rec = store.add_recording(run, target, case_spec="gen:seq1", seed=0, log_path=None,
                                      entries=20, marks=2)
            for i, outcome in enumerate(("ok", "recovered")):
                cp = store.add_crash_point(rec, entry_index=10 * i, kind=CrashPointKind.MARK,
                                           last_mark=f"pc-{i}")
                store.add_check(cp, variant="prefix", variant_seed=0, outcome=outcome,
                                mount_s=0.01, fsck_s=0.3, findings=[],
                                reproducer=f"powercut recheck /runs/{run} {10 * i}/prefix")
    assert main(["report", "--db", str(db), "--json", "--no-html"]) == 0
    rows = {m["target"]: m for m in json.loads(capsys.readouterr().out)["crash"]["matrix"]}
    assert (rows["ext4/ordered"]["failing"], rows["ext4/ordered"]["recovered_fails"]) == (1, True)
    assert (rows["ext2"]["failing"], rows["ext2"]["recovered_fails"]) == (0, False)
    assert main(["report", "--db", str(db), "--no-html"]) == 0
    table = capsys.readouterr().out
    ext4_row = next(line for line in table.splitlines() if "ext4/ordered" in line)
    ext2_row = next(line for line in table.splitlines() if "ext2" in line)
    # columns: target, case, states, ok, recovered, known, failing, findings
    assert re.findall(r"\d+", ext4_row.split("gen:seq1")[1])[:5] == ["2", "1", "1", "0", "1"]
    assert re.findall(r"\d+", ext2_row.split("gen:seq1")[1])[:5] == ["2", "1", "1", "0", "0"]
