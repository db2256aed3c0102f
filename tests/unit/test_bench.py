"""powercut bench: run order, warm-up, the CI stopping rule, analysis wiring and rendering."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import re
from collections import Counter

import pytest

from framework.bench import engine as bench
from framework.bench import task as benchtask
from framework.bench.analysis import analyse
from framework.bench.design import one_factor_design
from framework.bench.engine import BenchConfig, Sample, Scheduler, Trial
from framework.bench.report import format_report, print_progress, report_json
from framework.bench.task import RepetitionRequest, RepetitionResult
from framework.bench.workloads import Metric, Scale
from framework.cli import build_parser
from framework.core import agent, rundir
from framework.core.errors import CommandError, ConfigError
from framework.core.factorial import full_factorial
from framework.core.machine import FakeMachine
from framework.core.stats import overhead, paired_overhead
from recovery.targets import Target, get_target


def result(target: str, value: float | None, *, seconds: float = 1.0) -> RepetitionResult:
    """A repetition of a fake workload: one throughput and the bench's own timings."""
    return RepetitionResult(
        spec=Target(target, "ext4"), workload="fsmark", scale=Scale.TINY,
        metrics=(Metric("files", value, "files/s", True),
                 Metric("run_s", seconds, "s", False),
                 Metric("umount_s", seconds / 10, "s", False),
                 Metric("durable_s", seconds * 1.1, "s", False)),
        mkfs_s=0.1, mount_s=0.05, run_s=seconds, umount_s=seconds / 10,
        kernel="6.1.0-test", mount_options="rw,relatime",
    )


class FakeExecute:
    """Draws each target's throughput from its own normal distribution (seeded)."""

    def __init__(self, means: dict[str, float], stdevs: dict[str, float], seed: int = 7,
                 warm: float | None = None) -> None:
        self.means, self.stdevs = means, stdevs
        self.rng = random.Random(seed)
        self.warm = warm
        self.trials: list[Trial] = []

    def __call__(self, trial: Trial) -> RepetitionResult:
        self.trials.append(trial)
        if trial.warmup and self.warm is not None:
            return result(trial.target, self.warm)
        m, s = self.means[trial.target], self.stdevs[trial.target]
        value = self.rng.gauss(m, s)
        return result(trial.target, value, seconds=100.0 / value)


TARGETS = ("ext2", "ext4/ordered", "ext4/journal")


# ---- run order ------------------------------------------------------------


def test_order_is_a_seeded_shuffle_with_every_repetition():
    config = BenchConfig(targets=TARGETS, workload="fsmark", reps=5, seed=11, blocked=False)
    first = Scheduler(config).first_round()
    again = Scheduler(config).first_round()
    other = Scheduler(BenchConfig(targets=TARGETS, workload="fsmark", reps=5, seed=12,
                                  blocked=False)).first_round()
    assert [t.target for t in first] == [t.target for t in again]
    assert [t.target for t in first] != [t.target for t in other]
    assert Counter(t.target for t in first) == dict.fromkeys(TARGETS, 5)
    assert [t.seq for t in first] == list(range(15))
    # Interleaved, not blocked by target: a blocked order has only 2 target changes.
    changes = sum(1 for a, b in itertools.pairwise(first) if a.target != b.target)
    assert changes > 2
    for target in TARGETS:
        assert [t.rep for t in first if t.target == target] == [1, 2, 3, 4, 5]
        assert not any(t.warmup for t in first)


def test_blocked_order_is_rounds_of_every_target_each_in_its_own_shuffle():
    config = BenchConfig(targets=TARGETS, workload="fsmark", reps=6, seed=11, warmup=True)
    first = Scheduler(config).first_round()
    assert [t.target for t in first] == [t.target for t in Scheduler(config).first_round()]
    rounds = [first[i:i + len(TARGETS)] for i in range(0, len(first), len(TARGETS))]
    assert len(rounds) == 7
    assert all(t.warmup for t in rounds[0]) and not any(t.warmup for r in rounds[1:] for t in r)
    for k, block in enumerate(rounds):
        assert sorted(t.target for t in block) == sorted(TARGETS)
        assert {t.rep for t in block} == {k}  # repetition k of every target is in round k
    # Each round is shuffled on its own: not one order repeated.
    assert len({tuple(t.target for t in block) for block in rounds}) > 1
    # Positive control: a plain shuffle of the same trials is not in complete rounds.
    plain = Scheduler(BenchConfig(targets=TARGETS, workload="fsmark", reps=6, seed=11,
                                  warmup=True, blocked=False)).first_round()
    assert any(len({t.target for t in plain[i:i + 3]}) < 3 for i in range(0, len(plain), 3))


def test_blocked_until_ci_runs_every_target_while_any_is_unsatisfied():
    config = BenchConfig(targets=("quiet", "noisy"), workload="fsmark", reps=3, seed=5,
                         until_ci_pct=5.0, max_reps=12)
    fake = FakeExecute({"quiet": 100.0, "noisy": 100.0}, {"quiet": 0.5, "noisy": 60.0})
    run = bench.run_bench(config, fake)
    assert Counter(s.trial.target for s in run.samples) == {"quiet": 12, "noisy": 12}
    for k in range(12):
        assert {s.trial.target for s in run.samples[2 * k:2 * k + 2]} == {"quiet", "noisy"}


def test_paired_overheads_cancel_the_drift_the_rounds_share():
    """Every round's figures move together (the host's speed); the blocked run's paired
    interval is narrow and holds the true 10% cost, the same samples taken as independent
    give an interval many times wider."""
    config = BenchConfig(targets=("base", "slow"), workload="fsmark", reps=10, seed=3)
    drift = iter([1.0, 1.0, 0.7, 0.7, 1.3, 1.3, 0.9, 0.9, 1.1, 1.1, 0.8, 0.8, 1.2, 1.2,
                  1.0, 1.0, 0.75, 0.75, 1.25, 1.25])
    noise = random.Random(4)

    def execute(trial: Trial) -> RepetitionResult:
        mean = 100.0 if trial.target == "base" else 90.0
        return result(trial.target, mean * next(drift) * (1 + noise.gauss(0, 0.01)))

    run = bench.run_bench(config, execute)
    paired = analyse(run).overhead_of("slow", "files").overhead
    assert paired is not None and paired.pairs == 10 and paired.ci.contains(0.10)
    assert paired.ci.high - paired.ci.low < 0.05
    unpaired = analyse(dataclasses.replace(
        run, config=dataclasses.replace(config, blocked=False))).overhead_of("slow", "files").overhead
    assert unpaired is not None and unpaired.pairs == 0
    assert unpaired.ci.high - unpaired.ci.low > 4 * (paired.ci.high - paired.ci.low)


def test_warmup_is_the_first_trial_of_each_target_and_is_discarded():
    config = BenchConfig(targets=TARGETS, workload="fsmark", reps=4, warmup=True, seed=3)
    fake = FakeExecute(dict.fromkeys(TARGETS, 100.0), dict.fromkeys(TARGETS, 1.0), warm=1e6)
    run = bench.run_bench(config, fake)
    assert len(run.samples) == 15
    for target in TARGETS:
        mine = [s.trial for s in run.samples if s.trial.target == target]
        assert mine[0].warmup and mine[0].rep == 0
        assert [t.rep for t in mine[1:]] == [1, 2, 3, 4] and not any(t.warmup for t in mine[1:])
    a = analyse(run)
    for target in TARGETS:
        cell = a.cell(target, "files")
        assert len(cell.values) == 4
        assert cell.summary is not None and cell.summary.mean < 200  # the 1e6 warm-up is gone
    # Positive control: without the warm-up flag the outlier would dominate the mean.
    assert bench.kept_values([Sample(Trial(0, "ext2", 1), result("ext2", 1e6), 0.0)],
                             "files", TARGETS)["ext2"] == [1e6]


def test_until_ci_stops_each_target_on_its_own_and_respects_the_cap():
    config = BenchConfig(targets=("quiet", "noisy"), workload="fsmark", reps=3, seed=5,
                         until_ci_pct=5.0, max_reps=12, blocked=False)
    fake = FakeExecute({"quiet": 100.0, "noisy": 100.0}, {"quiet": 0.5, "noisy": 60.0})
    run = bench.run_bench(config, fake)
    counts = Counter(s.trial.target for s in run.samples)
    assert counts["quiet"] == 3  # +-0.5 on 100: the interval is well under 5% after 3
    assert counts["noisy"] == 12  # never tight enough: stopped by the cap
    quiet = bench.kept_values(run.samples, "files", ("quiet",))["quiet"]
    assert bench.relative_half_width(quiet) < 0.05
    noisy = bench.kept_values(run.samples, "files", ("noisy",))["noisy"]
    assert bench.relative_half_width(noisy) > 0.05


def test_until_ci_stops_as_soon_as_the_interval_is_tight():
    config = BenchConfig(targets=("a", "b"), workload="fsmark", reps=2, seed=1,
                         until_ci_pct=10.0, max_reps=50, blocked=False)
    fake = FakeExecute({"a": 100.0, "b": 50.0}, {"a": 8.0, "b": 4.0}, seed=2)
    run = bench.run_bench(config, fake)
    for target in ("a", "b"):
        values = bench.kept_values(run.samples, "files", (target,))[target]
        assert len(values) < 50
        assert bench.relative_half_width(values) <= 0.10
        # It stopped at the first n where the rule held, not later.
        assert bench.relative_half_width(values[:-1]) > 0.10


def test_until_ci_order_is_reproducible():
    def order() -> list[str]:
        config = BenchConfig(targets=TARGETS, workload="fsmark", reps=2, seed=9,
                             until_ci_pct=2.0, max_reps=6)
        fake = FakeExecute(dict.fromkeys(TARGETS, 100.0), dict.fromkeys(TARGETS, 10.0), seed=4)
        return [s.trial.target for s in bench.run_bench(config, fake).samples]

    assert order() == order()


def test_each_sample_is_recorded_before_the_next_trial_and_interrupt_keeps_them():
    events: list[str] = []

    class Recorder:
        def add(self, sample: Sample) -> None:
            events.append(f"stored {sample.trial.seq}")

    def execute(trial: Trial) -> RepetitionResult:
        if trial.seq == 3:
            raise KeyboardInterrupt
        events.append(f"ran {trial.seq}")
        return result(trial.target, 10.0 + trial.seq)

    config = BenchConfig(targets=TARGETS, workload="fsmark", reps=2, seed=0)
    with pytest.raises(KeyboardInterrupt):
        bench.run_bench(config, execute, recorder=Recorder())
    assert events == ["ran 0", "stored 0", "ran 1", "stored 1", "ran 2", "stored 2"]


def test_config_is_checked():
    with pytest.raises(ConfigError, match="baseline 'xfs' is not one of the targets"):
        BenchConfig(targets=TARGETS, workload="fsmark", baseline="xfs").validate()
    with pytest.raises(ConfigError, match="at least 2"):
        BenchConfig(targets=TARGETS, workload="fsmark", reps=1).validate()
    with pytest.raises(ConfigError, match="named twice"):
        BenchConfig(targets=("ext2", "ext2"), workload="fsmark").validate()
    with pytest.raises(ConfigError, match="--max-reps 3 is below --reps 5"):
        BenchConfig(targets=TARGETS, workload="fsmark", reps=5, until_ci_pct=5,
                    max_reps=3).validate()


def test_a_metric_the_workload_does_not_report_is_named():
    config = BenchConfig(targets=TARGETS, workload="fsmark", reps=2, metric="bogus")
    fake = FakeExecute(dict.fromkeys(TARGETS, 100.0), dict.fromkeys(TARGETS, 1.0))
    with pytest.raises(ConfigError, match="metric 'bogus' not reported by fsmark.*files"):
        bench.run_bench(config, fake)


# ---- analysis ---------------------------------------------------------------


def run_of(values: dict[str, list[float]], **kw: object) -> bench.BenchRun:
    """A run of these values, target after target (so not in rounds, unless blocked=True
    is given to pretend it was)."""
    kw.setdefault("blocked", False)
    config = BenchConfig(targets=tuple(values), workload="fsmark", reps=len(next(iter(values.values()))),
                         **kw)  # type: ignore[arg-type]
    samples = []
    seq = 0
    for target, vs in values.items():
        for i, v in enumerate(vs):
            samples.append(Sample(Trial(seq, target, i + 1), result(target, v, seconds=100.0 / v), 1.0))
            seq += 1
    return bench.BenchRun(config, tuple(samples), "files", 12.5)


def test_overhead_sign_and_interval_come_from_stats():
    values = {"ext2": [100.0, 102.0, 98.0, 101.0, 99.0],
              "ext4/journal": [80.0, 81.0, 79.0, 82.0, 78.0]}
    a = analyse(run_of(values))
    o = a.overhead_of("ext4/journal", "files").overhead
    assert o is not None
    expected = overhead(values["ext4/journal"], values["ext2"], 0.95, higher_is_better=True)
    assert o == expected
    assert o.overhead == pytest.approx(0.20) and o.significant  # 20% of throughput lost
    # Blocked: repetition i of each target is a pair.
    p = analyse(run_of(values, blocked=True)).overhead_of("ext4/journal", "files").overhead
    assert p == paired_overhead(values["ext4/journal"], values["ext2"], 0.95, higher_is_better=True)
    assert p is not None and p.pairs == 5 and p.df == 4
    # Time (lower is better): 25% more time for the same loss; same sign.
    t = a.overhead_of("ext4/journal", "run_s").overhead
    assert t is not None and t.overhead > 0.2 and not t.higher_is_better
    with pytest.raises(KeyError):
        a.overhead_of("ext2", "files")  # the baseline is not compared with itself


def test_baseline_can_be_another_target_and_a_faster_target_has_negative_overhead():
    values = {"ext2": [100.0, 102.0, 98.0], "ext4/ordered": [90.0, 91.0, 89.0]}
    a = analyse(run_of(values, baseline="ext4/ordered"))
    o = a.overhead_of("ext2", "files").overhead
    assert o is not None and o.overhead < 0 and o.ci.high < 0


def test_one_factor_anova_matches_full_factorial_and_its_verdicts():
    values = {"ext2": [100.0, 102.0, 98.0, 101.0], "ext4/ordered": [95.0, 97.0, 94.0, 96.0],
              "ext4/journal": [80.0, 81.0, 79.0, 82.0]}
    a = analyse(run_of(values))
    assert a.design is not None and a.design_replications == 4
    direct = full_factorial([{"target": t, "y": y} for t, vs in values.items() for y in vs],
                            ["target"], "y", level=0.95)
    assert a.design == direct
    assert a.design.term("target").significant
    assert a.design.term("target").percent > 90
    # Negative control: the same numbers for every target explain nothing.
    same = [100.0, 103.0, 97.0, 101.0]
    flat = analyse(run_of({"ext2": same, "ext4/ordered": same[::-1], "ext4/journal": same}))
    assert flat.design is not None and not flat.design.term("target").significant
    assert flat.design.term("target").percent == pytest.approx(0.0, abs=1e-9)


def test_unbalanced_counts_use_the_first_r_of_each_target():
    values = {"a": [10.0, 11.0, 12.0, 13.0, 50.0], "b": [20.0, 21.0, 22.0]}
    design, r, why = one_factor_design(values, 0.95)
    assert r == 3 and not why and design is not None
    assert design.grand_mean == pytest.approx((10 + 11 + 12 + 20 + 21 + 22) / 6)
    none, _, reason = one_factor_design({"a": [1.0, 2.0]}, 0.95)
    assert none is None and "one target" in reason


def test_the_report_shows_means_intervals_overhead_and_anova():
    values = {"ext2": [100.0, 102.0, 98.0, 101.0], "ext4/ordered": [95.0, 97.0, 94.0, 96.0],
              "ext4/journal": [80.0, 81.0, 79.0, 82.0]}
    run = run_of(values, warmup=True, seed=4)
    text = format_report(run, analyse(run))
    s = analyse(run).cell("ext4/journal", "files").summary
    assert s is not None
    ci = s.ci(0.95)
    journal_line = next(ln for ln in text.splitlines() if ln.startswith("files *"))
    assert f"80.50 [{ci.low:.2f}, {ci.high:.2f}]" in journal_line
    assert "Overhead against ext2" in text and "positive: the target is worse" in text
    overhead_line = [ln for ln in text.splitlines() if ln.startswith("files *")][1]
    assert "+19.7% [" in overhead_line
    assert "n.s." not in overhead_line
    assert "SST" in text and "errors" in text and "target explains" in text
    assert "the targets differ at 95%" in text
    assert "seed 4" in text and "warm-up" in text and "kernel 6.1.0-test" in text
    loaded = format_report(dataclasses.replace(run, host_load=(1.5, 2.25)), analyse(run))
    assert "host load average 1.50 before, 2.25 after" in loaded


def test_json_report_is_data():
    values = {"ext2": [100.0, 102.0, 98.0], "ext4/ordered": [95.0, 97.0, 94.0]}
    run = run_of(values)
    doc = json.loads(json.dumps(report_json(run, analyse(run))))
    assert doc["primary"] == "files" and doc["baseline"] == "ext2"
    assert doc["means"]["files"]["ext2"]["mean"] == pytest.approx(100.0)
    assert doc["overhead"]["files"]["ext4/ordered"]["overhead"] == pytest.approx(0.0467, abs=1e-3)
    assert doc["anova"]["df_target"] == 1 and doc["anova"]["df_error"] == 4
    assert [o["target"] for o in doc["order"]] == ["ext2"] * 3 + ["ext4/ordered"] * 3


def test_primary_metric_prefers_total():
    r = result("ext2", 1.0)
    assert bench.choose_primary(r, None) == "files"
    with_total = dataclasses.replace(r, metrics=(Metric("create", 1.0, "s", False),
                                                 Metric("total", 3.0, "s", False)))
    assert bench.choose_primary(with_total, None) == "total"
    assert bench.choose_primary(with_total, "create") == "create"
    # A workload's own primary comes before "total"; one it did not report is passed over.
    assert bench.choose_primary(with_total, None, "create") == "create"
    assert bench.choose_primary(with_total, None, "run_s") == "total"
    assert bench.choose_primary(with_total, "total", "create") == "total"


def test_postmark_is_judged_by_its_finely_timed_run_not_its_whole_second_rates():
    from framework.bench.workloads import get_workload

    assert get_workload("postmark").primary == "run_s"
    assert get_workload("fsmark").primary is None
    run = bench.run_bench(BenchConfig(targets=("ext2",), workload="postmark", reps=2, seed=1),
                          FakeExecute({"ext2": 100.0}, {"ext2": 1.0}))
    assert run.primary == "run_s"
    fsmark = bench.run_bench(BenchConfig(targets=("ext2",), workload="fsmark", reps=2, seed=1),
                             FakeExecute({"ext2": 100.0}, {"ext2": 1.0}))
    assert fsmark.primary == "files"  # control: the same results under a workload without one


def test_the_guest_cpus_are_in_the_plan_and_an_old_plan_ran_with_two(tmp_path):
    config = BenchConfig(targets=("ext2",), workload="fsmark", reps=2, seed=1, cpus=1)
    doc = bench.plan_document(config)
    assert doc["cpus"] == 1
    del doc["cpus"]
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    assert bench.config_from_plan(tmp_path).cpus == 2
    with pytest.raises(ConfigError, match="--cpus 0: the guest needs at least one vCPU"):
        dataclasses.replace(config, cpus=0).validate()


# ---- the guest side, over fakes --------------------------------------------


def test_guest_executor_sends_one_task_per_trial_with_the_right_disks():
    fake = FakeMachine()

    def respond(_argv: tuple[str, ...], stdin: str | None) -> tuple[int, str, str]:
        # Decoded as the guest does: the target arrives whole, not as a name to look up.
        req = RepetitionRequest.from_dict(json.loads(stdin or "{}"))
        done = dataclasses.replace(result(req.target.name, 42.0), spec=req.target)
        return 0, agent.frame({"result": done.to_dict()}) + "\n", ""

    fake.on("* -m framework.cli.guest", respond=respond)
    config = BenchConfig(targets=("ext2", "ext4/logdev"), workload="fsmark", reps=2, seed=1)
    run = bench.run_bench(config, bench.GuestExecutor(fake, config))
    tasks = [json.loads(i or "{}") for i in fake.inputs]
    assert len(tasks) == 4 and {t["task"] for t in tasks} == {"bench-rep"}
    for t in tasks:
        assert t["data_dev"] == "/dev/fake-data" and t["scale"] == "tiny"
        assert t["target"] == get_target(t["target"]["name"]).to_dict()
        assert t["journal_dev"] == ("/dev/fake-journal" if t["target"]["name"] == "ext4/logdev"
                                    else None)
    assert [s.result.metric("files").value for s in run.samples] == [42.0] * 4
    assert {s.result.spec for s in run.samples} == {get_target("ext2"), get_target("ext4/logdev")}


def test_disks_follow_the_targets_needs():
    small = bench.disks_for([get_target("ext2"), get_target("ext4/ordered")], Scale.TINY)
    assert [d.name for d in small] == ["data"] and small[0].size_bytes == 256 << 20
    big = bench.disks_for([get_target("xfs"), get_target("ext4/logdev")], Scale.TINY)
    assert [d.name for d in big] == ["data", "journal"]
    assert big[0].size_bytes > 300 * 1000 * 1000
    assert big[1].size_bytes >= 128 << 20


def test_repetition_runs_mkfs_mount_workload_umount_in_order(monkeypatch, tmp_path):
    monkeypatch.setattr(benchtask, "drop_caches", lambda: None)
    monkeypatch.setattr(benchtask, "_mount_options", lambda _mnt: "rw,data=journal")
    fake = FakeMachine()
    fake.on("env -C * fs_mark *", stdout="     0         200         4096       1234.5          5678\n")
    req = RepetitionRequest(get_target("ext4/journal"), "fsmark", Scale.TINY, "/dev/vda",
                            mountpoint=str(tmp_path / "mnt"))
    res = benchtask.run_repetition(fake, req)
    tools = [c[0] if c[0] != "env" else c[3] for c in fake.calls if c[0] != "dmesg"]
    assert tools == ["mke2fs", "sync", "mount", "mkdir", "fs_mark", "umount"]
    mount = next(c for c in fake.calls if c[0] == "mount")
    assert "data=journal" in mount[mount.index("-o") + 1]
    assert res.metric("files").value == pytest.approx(1234.5)
    assert res.metric("durable_s").value == pytest.approx(res.run_s + res.umount_s)
    assert res.mount_options == "rw,data=journal"
    assert RepetitionResult.from_dict(json.loads(json.dumps(res.to_dict()))) == res
    assert RepetitionRequest.from_dict(json.loads(json.dumps(req.to_dict()))) == req


def test_repetition_unmounts_when_the_workload_fails(monkeypatch, tmp_path):
    monkeypatch.setattr(benchtask, "drop_caches", lambda: None)
    monkeypatch.setattr(benchtask, "_mount_options", lambda _mnt: "")
    fake = FakeMachine()
    fake.on("env -C * fs_mark *", status=1, stderr="fs_mark: no space left")
    req = RepetitionRequest(get_target("ext2"), "fsmark", Scale.TINY, "/dev/vda",
                            mountpoint=str(tmp_path / "m"))
    with pytest.raises(CommandError, match="fs_mark failed"):
        benchtask.run_repetition(fake, req)
    assert fake.calls[-1][0] == "umount"


def test_a_logdev_target_without_a_journal_disk_is_refused(tmp_path):
    req = RepetitionRequest(get_target("ext4/logdev"), "fsmark", Scale.TINY, "/dev/vda",
                            mountpoint=str(tmp_path / "m"))
    with pytest.raises(ConfigError, match="needs a journal disk"):
        benchtask.run_repetition(FakeMachine(), req)


# ---- command line ----------------------------------------------------------


def test_help_teaches_overhead_sign_and_interval(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--help"])
    text = capsys.readouterr().out
    assert "Positive means" in text and "1 - target/baseline" in text
    assert "95% confidence" in text and "--until-ci" in text and "--warmup" in text


def test_cli_builds_the_config():
    from framework.cli.bench import config_from_args

    args = build_parser().parse_args(["bench", "--targets", "ext2, ext4/ordered", "--workload",
                                      "fsmark", "--reps", "5", "--seed", "3", "--until-ci", "5"])
    config = config_from_args(args)
    assert config.targets == ("ext2", "ext4/ordered") and config.seed == 3
    assert config.until_ci_pct == 5.0 and config.max_reps == 30 and config.baseline_target == "ext2"
    bad = build_parser().parse_args(["bench", "--targets", "ext2", "--workload", "fsmark",
                                     "--baseline", "xfs"])
    with pytest.raises(ConfigError, match="baseline"):
        config_from_args(bad)
    assert config.duration_s is None
    timed = build_parser().parse_args(["bench", "--targets", "ext2", "--workload", "dbench",
                                       "--duration", "20"])
    assert config_from_args(timed).duration_s == 20
    fixed = build_parser().parse_args(["bench", "--targets", "ext2", "--workload", "fsmark",
                                       "--duration", "20"])
    with pytest.raises(ConfigError, match="--duration does not apply"):
        config_from_args(fixed)


def test_store_recorder_keeps_every_sample_of_an_interrupted_run(tmp_path):
    from framework.core.store import RunStatus, Store

    config = BenchConfig(targets=("ext2", "ext4/ordered"), workload="fsmark", reps=3, seed=2,
                         warmup=True)
    fake = FakeExecute({"ext2": 100.0, "ext4/ordered": 90.0}, {"ext2": 1.0, "ext4/ordered": 1.0})

    def execute(trial: Trial) -> RepetitionResult:
        if trial.seq == 5:
            raise KeyboardInterrupt
        return fake(trial)

    with Store(tmp_path / "results.db") as store:
        run_id = store.start_run(command_line="powercut bench", study="bench",
                                 environment={"plan": bench.plan_document(config)})
        recorder = bench.StoreRecorder(store, run_id, config)
        with pytest.raises(KeyboardInterrupt):
            bench.run_bench(config, execute, recorder=recorder)
        store.finish_run(run_id, RunStatus.INTERRUPTED)
    with Store(tmp_path / "results.db") as store:
        assert store.run(run_id).status is RunStatus.INTERRUPTED
        assert store.run(run_id).environment["plan"]["seed"] == 2
        rows = store.bench_samples(run_id, metric="files", include_warmup=True)
        assert sorted(r.trial_order for r in rows) == [0, 1, 2, 3, 4]
        ran = {(t.target, t.rep, t.warmup) for t in fake.trials}
        assert {(r.target, r.repetition, r.warmup) for r in rows} == ran
        assert any(r.warmup for r in rows)  # warm-ups are stored, flagged
        assert {r.metric for r in store.bench_samples(run_id)} >= {"files", "durable_s", "mkfs_s",
                                                                   "mount_s", "trial_wall_s"}
        assert store.targets(run_id)["ext2"]["applied_mount_options"] == "rw,relatime"


def test_a_metric_missing_from_one_repetition_is_left_out_not_zero():
    samples = [Sample(Trial(0, "ext2", 1), result("ext2", 10.0), 1.0),
               Sample(Trial(1, "ext2", 2), dataclasses.replace(result("ext2", 12.0), metrics=()), 1.0),
               Sample(Trial(2, "ext2", 3), result("ext2", None), 1.0),
               Sample(Trial(3, "ext2", 4), result("ext2", 14.0), 1.0)]
    assert bench.kept_values(samples, "files", ("ext2",)) == {"ext2": [10.0, 14.0]}


def test_progress_lines_name_target_rep_metric_so_far_and_eta():
    import io

    lines = io.StringIO()
    config = BenchConfig(targets=("ext2", "ext4/ordered"), workload="fsmark", reps=3, seed=1,
                         warmup=True)
    fake = FakeExecute({"ext2": 100.0, "ext4/ordered": 90.0}, {"ext2": 1.0, "ext4/ordered": 1.0})
    bench.run_bench(config, fake, progress=lambda s, st: print_progress(s, st, lines))
    out = lines.getvalue().splitlines()
    assert len(out) == 8 and all(ln.startswith(f"[{i + 1}/8] ") for i, ln in enumerate(out))
    assert sum("warm-up: files" in ln for ln in out) == 2
    assert any(re.search(r"rep 3: files [\d.]+ files/s \(mean [\d.]+ \+-[\d.]+%, n=3\)", ln)
               for ln in out)
    assert all("ETA" in ln for ln in out)


def test_until_ci_cap_counts_trials_even_when_the_metric_is_never_measured():
    config = BenchConfig(targets=("ext2", "ext4/ordered"), workload="fsmark", reps=2, seed=1,
                         until_ci_pct=5.0, max_reps=4, warmup=True)
    run = bench.run_bench(config, lambda trial: result(trial.target, None))
    counts = Counter(s.trial.target for s in run.samples if not s.trial.warmup)
    assert counts == {"ext2": 4, "ext4/ordered": 4}
    assert sum(s.trial.warmup for s in run.samples) == 2


# ---- JUnit ------------------------------------------------------------------


def test_junit_fails_only_targets_whose_whole_overhead_interval_is_above_the_bound():
    from framework.cli.bench import junit_cases

    config = BenchConfig(targets=TARGETS, workload="fsmark", reps=8, seed=5)
    # ext4/ordered loses about 5%, ext4/journal about 40% of ext2's files/s.
    fake = FakeExecute({"ext2": 100.0, "ext4/ordered": 95.0, "ext4/journal": 60.0},
                       dict.fromkeys(TARGETS, 1.0))
    analysis = analyse(bench.run_bench(config, fake))
    free = junit_cases(analysis, None)
    assert [c.name for c in free] == ["ext4/ordered vs ext2: files", "ext4/journal vs ext2: files"]
    assert not any(c.failure for c in free)
    bounded = {c.name.split()[0]: c for c in junit_cases(analysis, 20.0)}
    assert bounded["ext4/ordered"].failure is None
    assert "above the bound of 20%" in (bounded["ext4/journal"].failure or "")


def test_a_resumed_bench_takes_the_finished_trials_and_runs_the_rest_in_the_same_order(tmp_path):
    """Interrupted at trial 5 of an until-CI bench: --resume keeps trials 0-4 as measured,
    runs the rest in the order an uninterrupted run takes, and ends with the same samples."""
    import dataclasses
    import json

    from framework.core.store import Store

    config = BenchConfig(targets=("ext2", "ext4/ordered"), workload="fsmark", reps=3, seed=5,
                         warmup=True, until_ci_pct=1.0, max_reps=6)
    means, stdevs = {"ext2": 100.0, "ext4/ordered": 90.0}, {"ext2": 3.0, "ext4/ordered": 3.0}
    whole = bench.run_bench(config, FakeExecute(means, stdevs))

    fake = FakeExecute(means, stdevs)

    def stopped(trial: Trial) -> RepetitionResult:
        if trial.seq == 5:
            raise KeyboardInterrupt
        return fake(trial)

    run_dir = tmp_path / "bench-run"
    run_dir.mkdir()
    (run_dir / "plan.json").write_text(json.dumps(bench.plan_document(config)))
    with Store(tmp_path / "results.db") as store:
        run_id = store.start_run(command_line="powercut bench", study="bench")
        recorder = bench.StoreRecorder(store, run_id, config, run_dir)
        with pytest.raises(KeyboardInterrupt):
            bench.run_bench(config, stopped, recorder=recorder)
        # The plan names the baseline it used (the first target when none was given).
        assert bench.config_from_plan(run_dir) == dataclasses.replace(config, baseline="ext2")
        earlier = bench.earlier_samples(run_dir)
        assert sorted(earlier) == [0, 1, 2, 3, 4]
        rest: list[Trial] = []

        def carry_on(trial: Trial) -> RepetitionResult:
            rest.append(trial)
            return fake(trial)  # the same draws an uninterrupted run would make

        resumed = bench.run_bench(config, carry_on, recorder=recorder, earlier=earlier)
        stored = store.bench_samples(run_id, metric="files", include_warmup=True)
    assert [t.seq for t in rest] == list(range(5, len(whole.samples)))
    assert [s.trial for s in resumed.samples] == [s.trial for s in whole.samples]
    assert [s.result for s in resumed.samples] == [s.result for s in whole.samples]
    assert len(stored) == len(whole.samples)  # each repetition once
    lines = (run_dir / rundir.SAMPLES).read_text().splitlines()
    assert [json.loads(x)["seq"] for x in lines] == list(range(len(whole.samples)))
    (run_dir / rundir.SAMPLES).write_text("\n".join(lines[:3]) + "\n{\"seq\": 3, \"tar")
    assert sorted(bench.earlier_samples(run_dir)) == [0, 1, 2]  # a torn last line is dropped


def test_a_factorial_bench_runs_every_cell_shuffled_and_finds_the_effect_it_was_given(tmp_path):
    from framework.bench.design import parse_factor

    base = BenchConfig(targets=("ext4/ordered", "ext3"), workload="fsmark", reps=4, seed=9)
    config = bench.with_factors(base, [parse_factor("journal-size=4,128")])
    config.validate()
    assert config.bases == ("ext4/ordered", "ext3") and len(config.targets) == 4
    assert config.targets[0] == "ext4/ordered[journal-size=4]"
    assert config.baseline_target == "ext4/ordered[journal-size=4]"
    # The journal size costs 20 files/s; ext3 and ext4 are alike (no target effect).
    means = {name: 100.0 - (20.0 if "=4]" in name else 0.0) for name in config.targets}
    fake = FakeExecute(means, dict.fromkeys(config.targets, 1.0), seed=3)
    run = bench.run_bench(config, fake)
    order = [s.trial.target for s in run.samples]
    assert Counter(order) == dict.fromkeys(config.targets, 4)
    assert sum(1 for a, b in itertools.pairwise(order) if a != b) > 3  # cells interleaved
    a = analyse(run)
    assert a.design is not None and a.design.factors == ("target", "journal-size")
    size, target = a.design.term("journal-size"), a.design.term("target")
    assert size.significant and size.percent > 90
    assert not target.significant  # positive control's twin: no effect, none found
    effect = a.design.effect({"journal-size": "128"})
    assert effect.value == pytest.approx(10.0, abs=1.5) and effect.ci.low > 0
    text = format_report(run, a)
    assert "Full factorial design for files [files/s]: factors target (2 levels), " \
           "journal-size (2 levels), 4 replications per cell" in text
    assert re.search(r"journal-size: 9\d\.\d% of the variation, .*: significant at 95%", text)
    doc = report_json(run, a)
    assert [t["term"] for t in doc["anova"]["terms"]] == [
        ["target"], ["journal-size"], ["target", "journal-size"]]
    # The plan keeps factors and cells: a resumed run rebuilds the same design.
    (tmp_path / "plan.json").write_text(json.dumps(bench.plan_document(config)))
    again = bench.config_from_plan(tmp_path)
    assert again.factors == config.factors and again.targets == config.targets
    assert [c.name for c in bench.design_cells(again)] == list(config.targets)


def test_a_metric_factor_needs_metrics_the_workload_reported():
    from framework.bench.design import parse_factor

    config = bench.with_factors(BenchConfig(targets=("ext2", "ext4/ordered"), workload="fsmark",
                                            reps=3, seed=1),
                                [parse_factor("metric=files,inodes")])
    assert config.targets == ("ext2", "ext4/ordered")  # no cells of its own
    run = bench.run_bench(config, FakeExecute({"ext2": 100.0, "ext4/ordered": 90.0},
                                              {"ext2": 1.0, "ext4/ordered": 1.0}))
    a = analyse(run)  # the samples are kept; the design says why it is missing
    assert a.design is None
    assert a.design_error.startswith("--factor metric: the workload reports no metric 'inodes'")
    two = bench.with_factors(BenchConfig(targets=("ext2", "ext4/ordered"), workload="fsmark",
                                         reps=3, seed=1), [parse_factor("metric=files,run_s")])
    a = analyse(bench.run_bench(two, FakeExecute({"ext2": 100.0, "ext4/ordered": 90.0},
                                                       {"ext2": 1.0, "ext4/ordered": 1.0})))
    assert a.design is not None and a.design.factors == ("target", "metric")


def test_factor_options_errors_are_one_line(capsys):
    from framework.cli import main

    for argv, message in [
        (["--target", "ext2", "--workload", "fsmark", "--factor", "journal-size=4,32"],
         "target 'ext2' cannot take journal-size=4"),
        (["--target", "ext4/ordered", "--workload", "fsmark", "--factor", "size=1,2"],
         "unknown factor 'size'"),
        (["--target", "ext4/ordered", "--workload", "fsmark", "--factor", "journal-size=4,32",
          "--factor", "journal-size=8,16"], "given twice"),
        (["--target", "ext4/ordered", "--workload", "fsmark", "--factor", "journal-size=4,32",
          "--baseline", "ext4/ordered"], "baseline 'ext4/ordered' is not one of the cells"),
    ]:
        assert main(["bench", *argv, "--results", "/nonexistent/never"]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err, err


def test_a_duration_travels_in_the_plan_and_the_guests_request(monkeypatch, tmp_path):
    config = BenchConfig(targets=("ext2", "xfs"), workload="fio-web-server", reps=2, seed=1,
                         duration_s=10)
    config.validate()
    doc = bench.plan_document(config)
    assert doc["duration_s"] == 10
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    assert bench.config_from_plan(tmp_path) == dataclasses.replace(config, baseline="ext2")
    del doc["duration_s"]  # a plan written before --duration: the scale's time
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    assert bench.config_from_plan(tmp_path).duration_s is None
    longer = bench.GuestExecutor(FakeMachine(), dataclasses.replace(config, duration_s=100))
    assert bench.GuestExecutor(FakeMachine(), config).timeout_s < longer.timeout_s
    # The guest runs fio for the plan's seconds, not the scale's.
    monkeypatch.setattr(benchtask, "drop_caches", lambda: None)
    monkeypatch.setattr(benchtask, "_mount_options", lambda _mnt: "")
    fake = FakeMachine()
    fake.on("fio *", stdout=json.dumps({"jobs": [{"jobname": "w", "read": {
        "io_bytes": 1, "bw_bytes": 1e6, "iops": 250.0, "clat_ns": {"mean": 1e3}}}]}))
    req = RepetitionRequest(get_target("ext2"), "fio-web-server", Scale.TINY, "/dev/vda",
                            mountpoint=str(tmp_path / "mnt"), duration_s=7)
    assert RepetitionRequest.from_dict(json.loads(json.dumps(req.to_dict()))) == req
    benchtask.run_repetition(fake, req)
    fio = next(c for c in fake.calls if c[0] == "fio")
    assert "--runtime=7" in fio and "--runtime=5" not in fio


def test_a_duration_is_refused_below_a_second_and_for_a_workload_of_fixed_work():
    config = BenchConfig(targets=("ext2",), workload="dbench", reps=2, seed=1)
    with pytest.raises(ConfigError, match="--duration 0: must be at least 1 second"):
        dataclasses.replace(config, duration_s=0).validate()
    with pytest.raises(ConfigError, match="'fsmark' does a fixed amount of work"):
        dataclasses.replace(config, workload="fsmark", duration_s=10).validate()
    dataclasses.replace(config, duration_s=10).validate()  # control: dbench runs for a time
