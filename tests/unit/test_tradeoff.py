"""The trade-off answer: the Pareto front, dominance with certainty, and overlap said so."""

from __future__ import annotations

import json

import pytest

from framework.core.stats import quantile_interval
from framework.report.tradeoff import Config, answer, apart, beats_with_certainty, dominators, front


def cfg(name: str, over: float, over_half: float, p90: float, rec_half: float, *,
        baseline: bool = False) -> Config:
    return Config(name, "hdd", over, over - over_half, over + over_half, p90, p90 - rec_half,
                  p90 + rec_half, 0.41, p90 * 0.8, p90 * 1.2, 5, baseline)


def test_the_front_the_dominated_and_the_ones_that_cannot_be_told_apart() -> None:
    base = cfg("ext2", 0.0, 0.0, 9.0, 1.0, baseline=True)  # no journal: slow fsck
    fast = cfg("ext4/ordered", 5.0, 1.0, 0.5, 0.1)
    costly = cfg("ext4/journal", 40.0, 3.0, 2.0, 0.2)  # beaten by ordered beyond both intervals
    twin = cfg("ext4/writeback", 5.5, 1.0, 0.55, 0.1)  # off the front, within ordered's intervals
    points = [base, fast, costly, twin]
    assert [c.name for c in front(points)] == ["ext2", "ext4/ordered"]
    assert beats_with_certainty(fast, costly) and dominators(costly, points) == [fast, twin]
    assert not beats_with_certainty(fast, twin) and not apart(fast, twin)
    words = answer(points, profile="hdd", workload="fs_mark")
    assert words[0].startswith("on hdd with fs_mark: ext2 recovers in 9.00 s at p90 [8.00, "
                               "10.00] at the baseline; ext4/ordered recovers in 0.50 s")
    assert "ext4/journal is dominated by ext4/ordered, ext4/writeback" in words[1]
    assert "ext4/writeback" in words[2] and "cannot be told apart from ext4/ordered" in words[2]
    assert "cover it with 41% confidence" in words[-1]


def test_an_unbounded_overhead_never_dominates_with_certainty() -> None:
    a = Config("a", "", 1.0, None, None, 0.1, 0.05, 0.2, 0.41, 0.1, 0.2, 5)
    b = cfg("b", 50.0, 1.0, 5.0, 0.5)
    assert not beats_with_certainty(a, b) and front([a, b]) == [a]


@pytest.mark.parametrize("n,exact", [(5, False), (29, True)])
def test_the_p90_interval_says_its_coverage(n: int, exact: bool) -> None:
    est = quantile_interval([float(i) for i in range(1, n + 1)], 0.9)
    assert est.exact is exact
    if not exact:
        assert (est.interval.low, est.interval.high) == (1.0, 5.0)
        assert est.interval.level == pytest.approx(1 - 0.9 ** 5 - 0.1 ** 5)
    else:
        assert est.interval.level >= 0.95 and est.interval.high == 29.0


# ---- the report of a trade-off study, in a real browser -----------------------------------

CONFIGS = {  # name -> (fs_mark files/s, recovery seconds of its cuts)
    "ext2": (300.0, [2.0, 2.2, 2.5, 2.1, 2.4]),
    "ext4-ordered": (280.0, [0.30, 0.32, 0.35, 0.31, 0.33]),
    "ext4-journal": (150.0, [0.60, 0.62, 0.65, 0.61, 0.66]),
    "ext4-writeback": (282.0, [0.31, 0.33, 0.34, 0.32, 0.36]),
}


def tradeoff_db(db, run_dir, table=None) -> int:
    """A trade-off study's store as the tradeoff study leaves it, on two profiles (the
    configurations of ``table``, by default CONFIGS)."""
    table = CONFIGS if table is None else table
    from framework.bench.workloads.base import Metric
    from framework.core.store import Store

    run_dir.mkdir(parents=True, exist_ok=True)
    with Store(db) as store:
        top = store.start_run(command_line="powercut run tradeoff", study="study tradeoff",
                              kind="study", environment={"run_dir": str(run_dir), "plan": {
                                  "steps": [{"argv": ["cut"], "expect": "pass"},
                                            {"argv": ["bench"], "expect": "pass"}] * 2}})
        for n, profile in enumerate(("nvme", "hdd")):
            slow = 1.0 if profile == "nvme" else 4.0
            names = [f"{profile}/{c}" for c in table]
            configs = {name: {"name": name, "fstype": "ext2" if "ext2" in name else "ext4",
                              "mkfs_options": [], "mount_options": [],
                              "journal": "none" if "ext2" in name else "internal",
                              "disk_profiles": {"data": profile}} for name in names}
            cut = store.start_run(command_line="powercut cut", study="cut", kind="cut",
                                  parent_id=top, environment={"study_step": 2 * n + 1})
            bench = store.start_run(command_line="powercut bench", study="bench", kind="bench",
                                    parent_id=top, environment={"study_step": 2 * n + 2, "plan": {
                                        "targets": names, "workload": "fsmark",
                                        "baseline": f"{profile}/ext2", "metric": "files",
                                        "level": 0.95}})
            for name, (files, cuts) in zip(names, table.values(), strict=True):
                store.add_target(cut, name, configs[name])
                store.add_target(bench, name, configs[name])
                for trial, seconds in enumerate(cuts):
                    store.add_recovery(cut, name, trial=trial, outcome="ok",
                                       mount_s=0.1 * seconds * slow, fsck_s=0.9 * seconds * slow)
                for rep in range(1, 5):
                    store.add_bench_samples(bench, name, "fsmark", repetition=rep, metrics=[
                        Metric("files", files / slow + rep, "files/s", True)])
        return top


def test_the_tradeoff_report_opens_in_chromium_with_its_answer(tmp_path) -> None:
    import re
    import shutil
    import subprocess

    from framework.cli import main

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium not installed (Debian package chromium; 'make setup' installs it)")
    db = tmp_path / "r.db"
    top = tradeoff_db(db, tmp_path / "study")
    html = tmp_path / "report.html"
    assert main(["report", str(top), "--db", str(db), "-o", str(html)]) == 0
    text = html.read_text()
    assert "The answer on nvme" in text and "The answer on hdd" in text
    assert "ext4-journal is dominated by" in text  # slower and dearer beyond both intervals
    assert "ext4-writeback and nvme/ext4-ordered cannot be told apart" in text  # side by side
    browser = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
               "--v=0", "--window-size=1280,2400"]
    dom = subprocess.run([*browser, "--dump-dom", html.as_uri()], capture_output=True,
                         text=True, timeout=120)
    assert "fig-trade-off" in dom.stdout and "The answer on hdd" in dom.stdout
    console = [ln for ln in dom.stderr.splitlines() if "CONSOLE" in ln]
    assert not [ln for ln in console if re.search(r"error|uncaught", ln, re.I)], console
    shot = tmp_path / "report.png"
    subprocess.run([*browser, f"--screenshot={shot}", html.as_uri()], capture_output=True,
                   timeout=120, check=True)
    assert shot.stat().st_size > 50_000  # a page of figures, not a blank one


def test_compare_of_two_tradeoff_runs_moves_the_points_and_flags_one_that_left_the_front(
        tmp_path, capsys) -> None:
    from framework.cli import main

    db = tmp_path / "r.db"
    before = tradeoff_db(db, tmp_path / "a")
    # The second kernel (or mount option): ext4-ordered recovers three times slower, so
    # ext4-writeback, as cheap, now beats it on both axes.
    slower = {**CONFIGS, "ext4-ordered": (280.0, [3 * t for t in CONFIGS["ext4-ordered"][1]])}
    after = tradeoff_db(db, tmp_path / "b", slower)
    figure = tmp_path / "moves.png"
    status = main(["compare", str(before), str(after), "--db", str(db), "--figure", str(figure)])
    out = capsys.readouterr().out
    assert status in (0, 1)
    rows = [ln for ln in out.splitlines() if "ext4-ordered" in ln and "left the front" in ln]
    assert len(rows) == 2, out  # on both profiles
    assert not [ln for ln in out.splitlines() if "ext4-writeback" in ln and "left the front" in ln]
    assert figure.read_bytes().startswith(b"\x89PNG") and figure.stat().st_size > 20_000
    assert main(["compare", str(before), str(after), "--db", str(db), "--json"]) in (0, 1)
    moves = json.loads(capsys.readouterr().out)["trade_off"]
    left = {(m["profile"], m["name"]) for m in moves if m["left_front"]}
    assert left == {("nvme", "nvme/ext4-ordered"), ("hdd", "hdd/ext4-ordered")}
    ordered = next(m for m in moves if m["name"] == "nvme/ext4-ordered")
    assert ordered["b"][1] > 2.5 * ordered["a"][1]  # its p90 moved up with its cuts
