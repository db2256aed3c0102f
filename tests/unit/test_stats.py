"""framework.core.stats against numpy/scipy/statsmodels and against numbers derived by hand."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.formula.api import ols
from statsmodels.stats.anova import anova_lm

from framework.bench import report as report_stats
from framework.core import factorial, stats
from framework.core.errors import PowercutError
from framework.core.stats import StatsError

# --------------------------------------------------------------------------
# summarize


@pytest.fixture
def lognormal_sample() -> np.ndarray:
    return np.random.default_rng(20020101).lognormal(mean=2.0, sigma=0.4, size=25)


def test_summary_fields_match_numpy_and_scipy(lognormal_sample: np.ndarray) -> None:
    x = lognormal_sample
    s = stats.summarize(x)
    assert s.n == 25
    assert s.mean == pytest.approx(np.mean(x))
    assert s.median == pytest.approx(np.median(x))
    assert s.geometric_mean == pytest.approx(math.exp(np.mean(np.log(x))))
    assert s.harmonic_mean == pytest.approx(len(x) / np.sum(1 / x))
    assert s.stdev == pytest.approx(np.std(x, ddof=1))
    assert s.cov == pytest.approx(np.std(x, ddof=1) / np.mean(x))
    # Adjusted Fisher-Pearson G1, written out so it does not just repeat scipy.
    n, m = len(x), np.mean(x)
    m2, m3 = np.mean((x - m) ** 2), np.mean((x - m) ** 3)
    assert s.skewness == pytest.approx(math.sqrt(n * (n - 1)) / (n - 2) * m3 / m2**1.5)
    assert s.skewness == pytest.approx(sps.skew(x, bias=False))
    q1, q3 = np.percentile(x, [25, 75])
    assert (s.q1, s.q3) == (pytest.approx(q1), pytest.approx(q3))
    assert s.siqr == pytest.approx((q3 - q1) / 2)
    assert (s.min, s.max) == (x.min(), x.max())
    assert s.range == pytest.approx(np.ptp(x))
    # Ordering of means for positive data (AM >= GM >= HM), a property, not a copy.
    assert s.mean > s.geometric_mean > s.harmonic_mean  # type: ignore[operator]


def test_siqr_uses_interpolated_jain_rank() -> None:
    # Jain's alpha-quantile sits at rank (n-1)*alpha + 1: for 1..8, Q1 at rank 2.75
    # -> 2.75, Q3 at rank 6.25 -> 6.25; SIQR = 1.75 (rounding would give 1.5 or 2).
    s = stats.summarize([8, 3, 5, 1, 7, 2, 6, 4])
    assert (s.q1, s.q3, s.siqr) == (2.75, 6.25, 1.75)


def test_summary_of_non_positive_data_has_no_geometric_or_harmonic_mean() -> None:
    s = stats.summarize([-1.0, 0.0, 2.0, 5.0])
    assert s.geometric_mean is None
    assert s.harmonic_mean is None
    assert s.mean == 1.5
    assert math.isnan(stats.summarize([-1.0, 1.0]).cov)


def test_constant_sample_is_degenerate_but_defined() -> None:
    s = stats.summarize([4.0, 4.0, 4.0])
    assert s.stdev == 0.0
    assert s.skewness == 0.0
    ci = s.ci(0.99)
    assert (ci.low, ci.high) == (4.0, 4.0)
    assert s.half_width_ratio() == 0.0


def test_ci_matches_printed_t_table() -> None:
    # 1..5: mean 3, s = sqrt(2.5); t[0.975; 4] = 2.776 from a printed t table.
    s = stats.summarize([1, 2, 3, 4, 5])
    ci = s.ci(0.95)
    half = 2.776 * math.sqrt(2.5) / math.sqrt(5)
    assert ci.low == pytest.approx(3 - half, abs=1e-3)
    assert ci.high == pytest.approx(3 + half, abs=1e-3)
    assert (ci.low + ci.high) / 2 == pytest.approx(3.0)
    assert s.half_width_ratio(0.95) == pytest.approx(half / 3, abs=1e-3)
    # Wider at higher confidence.
    assert s.ci(0.99).half_width > ci.half_width > s.ci(0.90).half_width


def test_ci_matches_scipy_t_interval(lognormal_sample: np.ndarray) -> None:
    x = lognormal_sample
    low, high = sps.t.interval(0.9, len(x) - 1, loc=np.mean(x), scale=sps.sem(x))
    ci = stats.summarize(x).ci(0.9)
    assert (ci.low, ci.high, ci.level) == (pytest.approx(low), pytest.approx(high), 0.9)


def test_ci_coverage_on_normal_data_is_near_nominal() -> None:
    # 1000 seeded samples of n=6 from N(10, 2): the 90% t-interval must cover
    # the true mean in about 900 of them (binomial sd ~9.5; allow 4 sd).
    rng = np.random.default_rng(7)
    data = rng.normal(10.0, 2.0, size=(1000, 6))
    covered = sum(stats.summarize(row).ci(0.90).contains(10.0) for row in data)
    assert 860 <= covered <= 940
    # Positive control: a z interval (what n < 30 must not use) under-covers.
    z_half = sps.norm.ppf(0.95) * data.std(axis=1, ddof=1) / math.sqrt(6)
    z_cov = int(np.sum(np.abs(data.mean(axis=1) - 10.0) <= z_half))
    assert z_cov < covered


# --------------------------------------------------------------------------
# geometric / harmonic mean, Q-Q


def test_geometric_and_harmonic_mean() -> None:
    assert stats.geometric_mean([1, 4, 16]) == pytest.approx(4.0)
    assert stats.harmonic_mean([1, 4, 4]) == pytest.approx(2.0)


@pytest.mark.parametrize("func", [stats.geometric_mean, stats.harmonic_mean])
@pytest.mark.parametrize("bad", [[1.0, 0.0, 2.0], [1.0, -3.0]])
def test_geometric_and_harmonic_mean_reject_non_positive(
    func: Callable[..., object], bad: list[float]
) -> None:
    with pytest.raises(StatsError, match="positive samples") as info:
        func(bad)
    assert "\n" not in str(info.value)


# --------------------------------------------------------------------------
# repetitions_needed


def test_repetitions_needed_is_smallest_n_meeting_the_t_criterion() -> None:
    pilot = np.random.default_rng(11).normal(20.0, 5.0, size=12)
    s = stats.summarize(pilot)
    n = stats.repetitions_needed(pilot, rel_half_width=0.05, level=0.95)

    def half_ratio(k: int) -> float:
        return sps.t.ppf(0.975, k - 1) * s.stdev / math.sqrt(k) / s.mean

    assert half_ratio(n) <= 0.05 < half_ratio(n - 1)
    # Never below Jain's z-based (100 z s / (r x))^2.
    z_n = math.ceil((100 * 1.96 * s.stdev / (5 * s.mean)) ** 2)
    assert n >= z_n


def test_repetitions_needed_monotone() -> None:
    pilot = [9.8, 10.4, 10.1, 9.5, 10.9, 10.2, 9.9]
    widths = [0.2, 0.1, 0.05, 0.02, 0.01, 0.005]
    ns = [stats.repetitions_needed(pilot, w, 0.95) for w in widths]
    assert ns == sorted(ns)
    assert ns[0] < ns[-1]
    levels = [0.80, 0.90, 0.95, 0.99]
    ns = [stats.repetitions_needed(pilot, 0.01, lv) for lv in levels]
    assert ns == sorted(ns)
    assert ns[0] < ns[-1]
    assert stats.repetitions_needed([5.0, 5.0, 5.0]) == 2


def test_repetitions_needed_rejects_bad_input() -> None:
    with pytest.raises(StatsError, match="rel_half_width"):
        stats.repetitions_needed([1.0, 2.0], rel_half_width=0)
    with pytest.raises(StatsError, match="mean is 0"):
        stats.repetitions_needed([-1.0, 1.0])
    with pytest.raises(StatsError, match="confidence level"):
        stats.repetitions_needed([1.0, 2.0], level=1.5)


# --------------------------------------------------------------------------
# compare


def test_compare_matches_welch_ttest() -> None:
    rng = np.random.default_rng(5)
    a, b = rng.normal(10, 1, 12), rng.normal(11, 2, 9)
    c = stats.compare(a, b, level=0.9)
    ref = sps.ttest_ind(a, b, equal_var=False)
    ci = ref.confidence_interval(0.9)
    assert c.difference == pytest.approx(np.mean(a) - np.mean(b))
    assert (c.ci.low, c.ci.high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert (c.statistic, c.p_value, c.df) == (
        pytest.approx(ref.statistic),
        pytest.approx(ref.pvalue),
        pytest.approx(ref.df),
    )
    # Welch-Satterthwaite df written out.
    va, vb = np.var(a, ddof=1) / 12, np.var(b, ddof=1) / 9
    assert c.df == pytest.approx((va + vb) ** 2 / (va**2 / 11 + vb**2 / 8))


def test_compare_significance_positive_and_negative_control() -> None:
    rng = np.random.default_rng(9)
    base = rng.normal(100, 1, 10)
    assert stats.compare(base + 5, base).significant
    same = stats.compare(rng.normal(100, 1, 10), rng.normal(100, 1, 10), level=0.99)
    assert not same.significant
    exact = stats.compare([2.0, 2.0], [1.0, 1.0])
    assert exact.significant and exact.difference == 1.0 and exact.p_value == 0.0


# --------------------------------------------------------------------------
# overhead


def test_overhead_sign_conventions() -> None:
    base, slow = [10.0, 10.2, 9.8, 10.1], [12.0, 12.2, 11.8, 12.1]
    # Times: 20% longer is +20% overhead.
    t = stats.overhead(slow, base, higher_is_better=False)
    assert t.ratio == pytest.approx(1.2, rel=1e-3)
    assert t.overhead == pytest.approx(0.2, rel=1e-2)
    assert t.percent == pytest.approx(100 * t.overhead)
    assert t.significant and t.ci.contains(t.overhead)
    # Throughput: target with 10/12 of the baseline lost 1/6.
    th = stats.overhead(base, slow, higher_is_better=True)
    assert th.overhead == pytest.approx(1 - 10.025 / 12.025)
    assert th.ci.low < th.overhead < th.ci.high
    assert th.ci.low == pytest.approx(1 - th.ratio_ci.high)


def test_overhead_fieller_interval_agrees_with_bootstrap() -> None:
    rng = np.random.default_rng(2002)
    target, baseline = rng.normal(95.0, 4.0, 30), rng.normal(100.0, 3.0, 30)
    ours = stats.overhead(target, baseline, level=0.95, higher_is_better=True)

    def loss(t: np.ndarray, b: np.ndarray, axis: int) -> np.ndarray:
        return 1 - np.mean(t, axis=axis) / np.mean(b, axis=axis)

    boot = sps.bootstrap(
        (target, baseline),
        loss,
        n_resamples=4000,
        vectorized=True,
        confidence_level=0.95,
        method="percentile",
        rng=np.random.default_rng(1),
    )
    width = ours.ci.high - ours.ci.low
    assert ours.ci.low == pytest.approx(boot.confidence_interval.low, abs=0.15 * width)
    assert ours.ci.high == pytest.approx(boot.confidence_interval.high, abs=0.15 * width)
    # The delta-method standard error is another independent check of the width.
    mt, mb = target.mean(), baseline.mean()
    se = (mt / mb) * math.sqrt(
        np.var(target, ddof=1) / 30 / mt**2 + np.var(baseline, ddof=1) / 30 / mb**2
    )
    assert width / 2 == pytest.approx(sps.t.ppf(0.975, ours.df) * se, rel=0.05)


def test_paired_overhead_ends_are_where_the_paired_t_test_of_the_difference_rejects() -> None:
    """Fieller's paired set is {R: |t| of the one-sample t-test of target - R baseline <= q}:
    at either end of the ratio interval scipy's paired t-test has p exactly 1 - level."""
    rng = np.random.default_rng(7)
    drift = rng.normal(0, 0.1, 12)
    base = 100 * (1 + drift + rng.normal(0, 0.02, 12))
    target = 90 * (1 + drift + rng.normal(0, 0.02, 12))
    o = stats.paired_overhead(target, base, 0.95, higher_is_better=True)
    assert o.pairs == 12 and o.df == 11
    for end in (o.ratio_ci.low, o.ratio_ci.high):
        assert sps.ttest_1samp(target - end * base, 0.0).pvalue == pytest.approx(0.05, abs=1e-9)
    assert o.ci.contains(0.10)
    # The same samples as independent: the shared drift widens the interval several times.
    unpaired = stats.overhead(target, base, 0.95, higher_is_better=True)
    assert unpaired.ci.half_width > 3 * o.ci.half_width
    with pytest.raises(StatsError, match="differ in length"):
        stats.paired_overhead(target[:5], base, higher_is_better=True)


def test_paired_overhead_covers_the_true_ratio_95_times_in_100() -> None:
    rng = np.random.default_rng(11)
    hits = 0
    for _ in range(2000):
        drift = rng.normal(0, 0.1, 8)
        base = 100 * (1 + drift + rng.normal(0, 0.05, 8))
        target = 80 * (1 + drift + rng.normal(0, 0.05, 8))
        hits += stats.paired_overhead(target, base, higher_is_better=False).ci.contains(-0.2)
    assert 0.935 <= hits / 2000 <= 0.965


def test_overhead_by_rep_pairs_only_the_repetitions_both_have() -> None:
    target = [(1, 90.0), (2, 70.0), (4, 110.0), (5, 95.0)]
    base = [(1, 100.0), (2, 80.0), (3, 60.0), (4, 120.0), (5, 104.0)]
    paired = stats.overhead_by_rep(target, base, higher_is_better=True, paired=True)
    assert paired == stats.paired_overhead([90, 70, 110, 95], [100, 80, 120, 104],
                                           higher_is_better=True)
    unpaired = stats.overhead_by_rep(target, base, higher_is_better=True, paired=False)
    assert unpaired == stats.overhead([90, 70, 110, 95], [100, 80, 60, 120, 104],
                                      higher_is_better=True)
    with pytest.raises(StatsError, match="1 round\\(s\\) measured both targets"):
        stats.overhead_by_rep([(1, 90.0), (7, 80.0)], base, higher_is_better=True, paired=True)


def test_overhead_not_significant_when_equal_and_unbounded_baseline_raises() -> None:
    rng = np.random.default_rng(4)
    same = stats.overhead(rng.normal(50, 2, 10), rng.normal(50, 2, 10), higher_is_better=True)
    assert same.ci.contains(0.0) and not same.significant
    with pytest.raises(StatsError, match="not significantly different from 0"):
        stats.overhead([1.0, 2.0, 3.0], [-1.0, 1.0, 0.5], higher_is_better=False)
    with pytest.raises(StatsError, match="baseline mean is 0"):
        stats.overhead([1.0, 2.0], [-1.0, 1.0], higher_is_better=False)


# --------------------------------------------------------------------------
# full factorial designs


def _hand_design() -> list[dict[str, object]]:
    cells = {
        ("a1", "b1"): (1.0, 3.0),
        ("a2", "b1"): (5.0, 7.0),
        ("a1", "b2"): (2.0, 4.0),
        ("a2", "b2"): (10.0, 12.0),
    }
    return [{"A": a, "B": b, "y": y} for (a, b), ys in cells.items() for y in ys]


def test_full_factorial_hand_example() -> None:
    # Cell means 2, 6 / 3, 11; grand mean 5.5; alpha = -3, +3; beta = -1.5, +1.5;
    # gamma = +-1. SSA = r*b*sum(alpha^2) = 2*2*18 = 72, SSB = 2*2*4.5 = 18,
    # SSAB = r*sum(gamma^2) = 8, SSE = 8 (every observation is cell mean +-1),
    # SST = 106 = 72+18+8+8, SSY = 348, SS0 = 8 * 5.5^2 = 242. MSE = 8/4 = 2.
    d = factorial.full_factorial(_hand_design(), ["A", "B"], "y", level=0.90)
    assert d.replications == 2 and d.n_observations == 8
    assert d.levels == (("a1", "a2"), ("b1", "b2"))
    assert d.grand_mean == 5.5
    assert (d.ss_y, d.ss_0, d.ss_total, d.ss_error) == (348, 242, 106, 8)
    assert (d.df_error, d.mean_sq_error) == (4, 2.0)
    a, b, ab = d.term("A"), d.term("B"), d.term("B", "A")
    assert (a.sum_sq, b.sum_sq, ab.sum_sq) == (
        pytest.approx(72),
        pytest.approx(18),
        pytest.approx(8),
    )
    assert (a.f, b.f, ab.f) == (pytest.approx(36), pytest.approx(9), pytest.approx(4))
    assert a.percent == pytest.approx(100 * 72 / 106)
    assert d.error_percent == pytest.approx(100 * 8 / 106)
    # F[0.90; 1, 4] = 4.54 in printed tables: A and B significant, AB (F = 4) not.
    assert a.f_crit == pytest.approx(4.54, abs=0.01)
    assert a.significant and b.significant and not ab.significant
    assert d.effect({"A": "a1"}).value == pytest.approx(-3)
    assert d.effect({"B": "b2"}).value == pytest.approx(1.5)
    assert d.effect({"B": "b1", "A": "a1"}).value == pytest.approx(1.0)
    assert d.effect({"A": "a2", "B": "b1"}).value == pytest.approx(-1.0)
    # s(effect) = s_e sqrt(df/N) = sqrt(2) * sqrt(1/8) = 0.5; t[0.95; 4] = 2.132.
    e = d.effect({"A": "a1"})
    assert e.stdev == pytest.approx(0.5)
    assert (e.ci.low, e.ci.high) == (
        pytest.approx(-4.066, abs=1e-3),
        pytest.approx(-1.934, abs=1e-3),
    )
    assert d.grand_mean_stdev == pytest.approx(0.5)


def _random_design(shape: tuple[int, ...], r: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    names = "FGH"[: len(shape)]
    rows = []
    cell_effect = rng.normal(0, 2, size=shape)
    for idx in itertools.product(*(range(k) for k in shape)):
        for _ in range(r):
            row: dict[str, object] = {names[i]: f"{names[i].lower()}{j}" for i, j in enumerate(idx)}
            row["y"] = 50 + cell_effect[idx] + rng.normal(0, 1)
            rows.append(row)
    return pd.DataFrame(rows).sample(frac=1.0, random_state=seed)  # order must not matter


@pytest.mark.parametrize(
    ("shape", "r"),
    [((2, 3), 4), ((3, 2, 2), 3), ((4, 2, 3), 2)],
)
def test_full_factorial_agrees_with_statsmodels(shape: tuple[int, ...], r: int) -> None:
    frame = _random_design(shape, r, seed=sum(shape) * 10 + r)
    factors = list("FGH"[: len(shape)])
    d = factorial.full_factorial(frame, factors, "y", level=0.95)
    fit = ols("y ~ " + " * ".join(f"C({f})" for f in factors), data=frame).fit()
    table = anova_lm(fit, typ=2)
    for row in d.terms:
        ref = table.loc[":".join(f"C({f})" for f in row.factors)]
        assert row.sum_sq == pytest.approx(ref["sum_sq"], rel=1e-9)
        assert row.df == ref["df"]
        assert row.f == pytest.approx(ref["F"], rel=1e-9)
        assert row.p_value == pytest.approx(ref["PR(>F)"], rel=1e-6, abs=1e-300)
        assert row.f_crit == pytest.approx(sps.f.ppf(0.95, row.df, d.df_error))
        assert row.mean_sq == pytest.approx(row.sum_sq / row.df)
    assert d.ss_error == pytest.approx(table.loc["Residual", "sum_sq"], rel=1e-9)
    assert d.df_error == table.loc["Residual", "df"]
    assert d.mean_sq_error == pytest.approx(fit.mse_resid)
    assert d.ss_total == pytest.approx(fit.centered_tss)
    assert d.ss_total == pytest.approx(d.ss_y - d.ss_0)
    # Allocation of variation is complete: terms + error = 100%.
    assert sum(t.percent for t in d.terms) + d.error_percent == pytest.approx(100.0)
    assert 100 - d.error_percent == pytest.approx(100 * fit.rsquared)
    # Number of terms: 2^k - 1; number of effects: prod over terms of levels.
    assert len(d.terms) == 2 ** len(shape) - 1
    # Model = grand mean + all effects reproduces every cell mean.
    means = frame.groupby(factors)["y"].mean()
    for key, cell_mean in means.items():
        key = key if isinstance(key, tuple) else (key,)
        level_of = dict(zip(factors, key))
        fitted = d.grand_mean + sum(
            e.value
            for e in d.effects
            if all(level_of[f] == lv for f, lv in zip(e.factors, e.levels))
        )
        assert fitted == pytest.approx(cell_mean)


def test_effects_sum_to_zero_along_every_factor() -> None:
    frame = _random_design((3, 2, 4), 2, seed=42)
    d = factorial.full_factorial(frame, ["F", "G", "H"], "y")
    for row in d.terms:
        for f in row.factors:
            # Fix every other factor of the term; summing over f gives zero.
            groups: dict[tuple[object, ...], float] = {}
            for e in d.effects_of(*row.factors):
                key = tuple(lv for g, lv in zip(e.factors, e.levels) if g != f)
                groups[key] = groups.get(key, 0.0) + e.value
            assert all(abs(v) < 1e-9 for v in groups.values()), (row.name, f)


def test_effect_intervals_follow_jain_formula() -> None:
    frame = _random_design((2, 3), 5, seed=8)
    d = factorial.full_factorial(frame, ["F", "G"], "y", level=0.90)
    n = d.n_observations
    t = sps.t.ppf(0.95, d.df_error)
    s_e = math.sqrt(d.ss_error / d.df_error)
    for factors, df in ((("F",), 1), (("G",), 2), (("F", "G"), 2)):
        for e in d.effects_of(*factors):
            assert e.stdev == pytest.approx(s_e * math.sqrt(df / n))
            assert e.ci.half_width == pytest.approx(t * e.stdev)
    assert d.grand_mean_ci.half_width == pytest.approx(t * s_e / math.sqrt(n))


def test_interaction_positive_and_negative_control() -> None:
    rng = np.random.default_rng(12)
    rows = []
    for a, b in itertools.product(("x", "y"), ("p", "q")):
        crossed = 5.0 if (a, b) in {("x", "p"), ("y", "q")} else -5.0
        for _ in range(4):
            rows.append(
                {
                    "A": a,
                    "B": b,
                    "with": 100 + crossed + rng.normal(),
                    "without": 100 + rng.normal(),
                }
            )
    frame = pd.DataFrame(rows)
    assert factorial.full_factorial(frame, ["A", "B"], "with").term("A", "B").significant
    assert (
        factorial.full_factorial(frame, ["A", "B"], "without", level=0.99).term("A", "B").p_value > 0.01
    )


def test_records_and_dataframe_give_the_same_design() -> None:
    records = _hand_design()
    assert factorial.full_factorial(records, ["A", "B"], "y") == factorial.full_factorial(
        pd.DataFrame(records), ["A", "B"], "y"
    )


# --------------------------------------------------------------------------
# errors


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert text and "\n" not in text
    return text


@pytest.mark.parametrize("func", [stats.summarize, stats.repetitions_needed])
@pytest.mark.parametrize("bad", [[], [1.0]])
def test_fewer_than_two_samples(func: Callable[..., object], bad: list[float]) -> None:
    with pytest.raises(StatsError, match="at least 2") as info:
        func(bad)
    _one_line(info.value)


def test_stats_error_is_a_powercut_value_error() -> None:
    with pytest.raises(ValueError) as info:
        stats.summarize([1.0])
    assert isinstance(info.value, PowercutError)


def test_bad_samples_rejected() -> None:
    with pytest.raises(StatsError, match="NaN"):
        stats.summarize([1.0, math.nan])
    with pytest.raises(StatsError, match="one-dimensional"):
        stats.summarize(np.ones((2, 2)))
    with pytest.raises(StatsError, match="not numbers"):
        stats.summarize(["a", "b"])  # type: ignore[list-item]
    with pytest.raises(StatsError, match="second sample"):
        stats.compare([1.0, 2.0], [1.0])
    with pytest.raises(StatsError, match="confidence level"):
        stats.summarize([1.0, 2.0]).ci(95)


def test_unbalanced_design_rejected() -> None:
    records = _hand_design()[:-1]
    with pytest.raises(StatsError, match="unbalanced design") as info:
        factorial.full_factorial(records, ["A", "B"], "y")
    msg = _one_line(info.value)
    assert "'a2'" in msg and "'b2'" in msg and "1 observation" in msg


def test_missing_cell_rejected() -> None:
    records = [r for r in _hand_design() if (r["A"], r["B"]) != ("a2", "b2")]
    with pytest.raises(StatsError, match=r"unbalanced design: cell \{'A': 'a2', 'B': 'b2'\} has 0"):
        factorial.full_factorial(records, ["A", "B"], "y")


def test_design_input_errors() -> None:
    records = _hand_design()
    single = [dict(r, C="only") for r in records]
    with pytest.raises(StatsError, match="single level 'only'"):
        factorial.full_factorial(single, ["A", "C"], "y")
    once = records[::2]
    with pytest.raises(StatsError, match="replications"):
        factorial.full_factorial(once, ["A", "B"], "y")
    with pytest.raises(StatsError, match="lacks column"):
        factorial.full_factorial(records, ["A", "D"], "y")
    with pytest.raises(StatsError, match="NaN"):
        factorial.full_factorial([dict(r, y=math.nan) for r in records], ["A", "B"], "y")
    with pytest.raises(StatsError, match="distinct"):
        factorial.full_factorial(records, ["A", "A"], "y")
    d = factorial.full_factorial(records, ["A", "B"], "y")
    with pytest.raises(StatsError, match="no term"):
        d.term("C")
    with pytest.raises(StatsError, match="no effect"):
        d.effect({"A": "a9"})


# --------------------------------------------------------------------------
# text tables


def test_format_anova_and_effects_show_every_term() -> None:
    d = factorial.full_factorial(_hand_design(), ["A", "B"], "y", level=0.90)
    table = report_stats.format_anova(d)
    lines = {line.split()[0]: line.split() for line in table.splitlines()[2:]}
    assert lines["SST"][1:4] == ["106.0000", "100.00", "7"]
    assert lines["A"][1:6] == ["72.0000", "67.92", "1", "72.0000", "36.00"]
    assert lines["A:B"][1:3] == ["8.0000", "7.55"]
    assert lines["errors"][1:5] == ["8.0000", "7.55", "4", "2.0000"]
    assert "F-crit (90%)" in table
    effects = report_stats.format_effects(d)
    assert "A=a1, B=b1" in effects and "-4.0659" in effects
    assert all(line == line.rstrip() for line in effects.splitlines())


def test_format_summaries_marks_undefined_means() -> None:
    text = report_stats.format_summaries(
        {"pos": stats.summarize([1.0, 2.0, 4.0]), "mixed": stats.summarize([-1.0, 2.0])},
        level=0.9,
        unit="s",
    )
    rows = {line.rsplit(maxsplit=2)[0].strip(): line.split()[-2:] for line in text.splitlines()[2:]}
    assert rows["geometric mean"] == ["2.0000", "-"]
    assert rows["mean [s]"] == ["2.3333", "0.5000"]
    assert "90% CI low" in rows


def test_nearly_constant_samples_do_not_warn():
    # Equal floats whose mean is not exactly representable: stdev ~1e-17, not 0.
    s = stats.summarize([0.1, 0.1, 0.1])
    assert s.skewness == 0.0 and s.stdev < 1e-15
