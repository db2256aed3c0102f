"""Statistics for benchmark samples, after Jain, *The Art of Computer
Systems Performance Analysis* (1991): summaries (ch. 12), confidence
intervals and sample sizes (ch. 13), comparing alternatives (ch. 13),
linear regression (ch. 14, 15), the overhead of a target against a
baseline with an interval, and quantiles with distribution-free intervals.
Full factorial designs with replications and ANOVA (ch. 22, 23) are in
``framework.core.factorial``.

Distributions come from scipy (``scipy.stats.t``, ``scipy.stats.norm``,
``scipy.stats.binom``). Every function takes plain sequences or numpy
arrays, so callers need no pandas unless they have a table already.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from scipy import stats as sps

from framework.core.errors import PowercutError

log = logging.getLogger(__name__)

Samples = Sequence[float] | npt.NDArray[np.floating[Any]] | npt.NDArray[np.integer[Any]]
FloatArray = npt.NDArray[np.float64]

# Jain's SIQR is (Q3 - Q1) / 2 with the alpha-quantile at rank (n-1)*alpha + 1.
# numpy's "linear" method (Hyndman & Fan type 7, also R's default and
# spreadsheets' QUARTILE) interpolates between the ranks around exactly that
# position instead of rounding it to the nearest integer.
QUANTILE_METHOD: Final = "linear"


class StatsError(PowercutError, ValueError):
    """Samples or a design cannot be analysed as asked (too few, unbalanced, non-positive)."""


# --------------------------------------------------------------------------
# Intervals and summaries


@dataclass(frozen=True, slots=True)
class Interval:
    """A two-sided confidence interval at ``level`` (e.g. 0.95)."""

    low: float
    high: float
    level: float

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def check_level(level: float) -> None:
    """A confidence level must lie strictly between 0 and 1."""
    if not 0.0 < level < 1.0:
        raise StatsError(f"confidence level {level!r} is not between 0 and 1 (exclusive)")


def _as_samples(
    samples: Samples | Iterable[float], *, what: str = "samples", min_n: int = 2
) -> FloatArray:
    try:
        arr = np.asarray(
            list(samples) if not isinstance(samples, np.ndarray) else samples, dtype=float
        )
    except (TypeError, ValueError) as exc:
        raise StatsError(f"{what} are not numbers: {exc}") from exc
    if arr.ndim != 1:
        raise StatsError(f"{what} must be one-dimensional, got shape {arr.shape}")
    if arr.size < min_n:
        raise StatsError(f"{what} has {arr.size} value(s); at least {min_n} are needed")
    if not np.all(np.isfinite(arr)):
        raise StatsError(f"{what} contain NaN or infinite values")
    return arr


def _t_interval(mean: float, stdev: float, n: int, level: float) -> Interval:
    check_level(level)
    if stdev == 0.0:
        # scipy rejects scale=0; a constant sample gives a degenerate interval.
        return Interval(mean, mean, level)
    low, high = sps.t.interval(level, df=n - 1, loc=mean, scale=stdev / math.sqrt(n))
    return Interval(float(low), float(high), level)


def geometric_mean(samples: Samples) -> float:
    """Geometric mean; every sample must be positive (Jain 12.5: for ratios and rates)."""
    arr = _as_samples(samples, min_n=1)
    if np.any(arr <= 0):
        raise StatsError(f"geometric mean needs positive samples, got minimum {arr.min()!r}")
    return float(sps.gmean(arr))


def harmonic_mean(samples: Samples) -> float:
    """Harmonic mean; every sample must be positive (Jain 12.5: for rates over fixed work)."""
    arr = _as_samples(samples, min_n=1)
    if np.any(arr <= 0):
        raise StatsError(f"harmonic mean needs positive samples, got minimum {arr.min()!r}")
    return float(sps.hmean(arr))


@dataclass(frozen=True, slots=True)
class Summary:
    """Jain's summary of one sample (ch. 12). Means of positive data only, else None."""

    n: int
    mean: float
    median: float
    geometric_mean: float | None
    harmonic_mean: float | None
    stdev: float  # sample standard deviation, ddof=1
    cov: float  # coefficient of variation stdev / mean; NaN when the mean is 0
    # Adjusted Fisher-Pearson G1 = sqrt(n(n-1))/(n-2) * m3/m2^1.5 (scipy bias=False;
    # what spreadsheets' SKEW and SAS/SPSS report). 0.0 for a constant sample.
    skewness: float
    q1: float  # quantiles by QUANTILE_METHOD
    q3: float
    siqr: float  # semi-interquartile range (q3 - q1) / 2
    min: float
    max: float

    @property
    def range(self) -> float:
        return self.max - self.min

    def ci(self, level: float = 0.95) -> Interval:
        """t-based confidence interval of the mean (Jain 13.2), valid for any n >= 2."""
        return _t_interval(self.mean, self.stdev, self.n, level)

    def half_width_ratio(self, level: float = 0.95) -> float:
        """CI half width relative to the mean: 0.05 means the mean is known to +-5%."""
        if self.mean == 0.0:
            return math.inf
        return self.ci(level).half_width / abs(self.mean)


def summarize(samples: Samples) -> Summary:
    """Summarise a sample of at least two observations."""
    arr = _as_samples(samples)
    mean = float(np.mean(arr))
    stdev = float(np.std(arr, ddof=1))
    positive = bool(np.all(arr > 0))
    q1 = float(np.quantile(arr, 0.25, method=QUANTILE_METHOD))
    q3 = float(np.quantile(arr, 0.75, method=QUANTILE_METHOD))
    # scipy warns (and returns NaN) on a constant sample; it is symmetric, so 0.
    # Equal floats like [0.1, 0.1, 0.1] can leave a stdev of ~1e-17 from
    # rounding alone: treat a spread below the values' own precision as none.
    constant = stdev <= 64 * np.finfo(float).eps * max(abs(mean), float(np.max(np.abs(arr))))
    skew = 0.0 if constant else float(sps.skew(arr, bias=False))
    return Summary(
        n=int(arr.size),
        mean=mean,
        median=float(np.median(arr)),
        geometric_mean=float(sps.gmean(arr)) if positive else None,
        harmonic_mean=float(sps.hmean(arr)) if positive else None,
        stdev=stdev,
        cov=stdev / mean if mean != 0.0 else math.nan,
        skewness=skew,
        q1=q1,
        q3=q3,
        siqr=(q3 - q1) / 2,
        min=float(arr.min()),
        max=float(arr.max()),
    )


def repetitions_needed(samples: Samples, rel_half_width: float = 0.05, level: float = 0.95) -> int:
    """Repetitions for a CI of the mean within +-rel_half_width of it, from a pilot sample.

    Jain (13.9) gives n = (100 z s / (r x))^2 with z the normal quantile. Here
    the t quantile with n-1 degrees of freedom replaces z, because the final
    interval will be t-based at that n (Jain 13.2 for n < 30): the answer is
    the smallest n >= 2 with t[1-a/2; n-1] s / sqrt(n) <= rel_half_width |x|,
    s and x taken from the pilot. It is never below the z-based estimate.
    """
    check_level(level)
    if not rel_half_width > 0:
        raise StatsError(f"rel_half_width {rel_half_width!r} must be positive")
    s = summarize(samples)
    if s.mean == 0.0:
        raise StatsError(
            "repetitions_needed: the pilot mean is 0, a relative half width is undefined"
        )
    if s.stdev == 0.0:
        return 2
    target = rel_half_width * abs(s.mean)
    alpha_q = 1 - (1 - level) / 2

    def fits(n: int) -> bool:
        return float(sps.t.ppf(alpha_q, n - 1)) * s.stdev / math.sqrt(n) <= target

    z = float(sps.norm.ppf(alpha_q))
    lo = max(2, math.ceil((z * s.stdev / target) ** 2))
    if fits(lo):
        return lo
    # t > z so the answer lies above; double, then bisect (t falls fast in n).
    hi = lo * 2
    while not fits(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi


# --------------------------------------------------------------------------
# Comparing two alternatives


@dataclass(frozen=True, slots=True)
class Comparison:
    """Welch's unpaired comparison of mean(a) - mean(b) (Jain 13.4.2)."""

    mean_a: float
    mean_b: float
    difference: float
    ci: Interval
    statistic: float
    df: float  # Welch-Satterthwaite degrees of freedom
    p_value: float

    @property
    def significant(self) -> bool:
        """True when the interval of the difference excludes zero."""
        return not self.ci.contains(0.0)


def compare(a: Samples, b: Samples, level: float = 0.95) -> Comparison:
    """Welch t-test of two independent samples with the CI of the difference of means.

    Jain's unpaired test uses a slightly different degrees-of-freedom formula
    (with n+1 in the denominators, minus 2); scipy's Welch-Satterthwaite is
    the one in current use and differs from it by well under one degree.
    """
    check_level(level)
    xa = _as_samples(a, what="first sample")
    xb = _as_samples(b, what="second sample")
    mean_a, mean_b = float(xa.mean()), float(xb.mean())
    if np.ptp(xa) == 0 and np.ptp(xb) == 0:
        # Both constant: scipy warns and returns NaN; the difference is exact.
        d = mean_a - mean_b
        p = 1.0 if d == 0 else 0.0
        stat = 0.0 if d == 0 else math.copysign(math.inf, d)
        return Comparison(mean_a, mean_b, d, Interval(d, d, level), stat, math.inf, p)
    res = sps.ttest_ind(xa, xb, equal_var=False)
    ci = res.confidence_interval(confidence_level=level)
    return Comparison(
        mean_a=mean_a,
        mean_b=mean_b,
        difference=mean_a - mean_b,
        ci=Interval(float(ci.low), float(ci.high), level),
        statistic=float(res.statistic),
        df=float(res.df),
        p_value=float(res.pvalue),
    )


# --------------------------------------------------------------------------
# Overhead of a target against a baseline


@dataclass(frozen=True, slots=True)
class Overhead:
    """Relative cost of a target against a baseline; positive means the target is worse.

    Lower-is-better metrics (times): overhead = target/baseline - 1, the
    fraction of extra time. Higher-is-better metrics (throughput):
    overhead = 1 - target/baseline, the fraction of throughput lost.
    """

    ratio: float  # mean(target) / mean(baseline)
    ratio_ci: Interval
    overhead: float
    ci: Interval
    higher_is_better: bool
    df: float  # degrees of freedom of the t quantile: Welch-Satterthwaite's, or pairs - 1
    pairs: int = 0  # paired samples the interval came from; 0 when unpaired (independent)

    @property
    def percent(self) -> float:
        return 100.0 * self.overhead

    @property
    def significant(self) -> bool:
        """True when the interval excludes zero overhead."""
        return not self.ci.contains(0.0)


def _fieller_interval(mean_t: float, mean_b: float, v_t: float, v_b: float, c_tb: float,
                      q: float, level: float) -> Interval:
    """The R with (x_t - R x_b)^2 <= q^2 (v_t - 2 R c_tb + R^2 v_b): Fieller's set for
    mean_t / mean_b, where v are the variances of the two means and c_tb their covariance
    (0 for independent samples). It is the interval between the roots of a quadratic in R."""
    a = mean_b**2 - q**2 * v_b
    if a <= 0:
        # The baseline mean is not distinguishable from 0 at this level:
        # Fieller's set is unbounded and no finite ratio interval exists.
        raise StatsError(
            f"baseline mean {mean_b:g} is not significantly different from 0 at level {level:g}; "
            "the overhead interval is unbounded (take more baseline samples)"
        )
    half_b = mean_t * mean_b - q**2 * c_tb
    disc = half_b**2 - a * (mean_t**2 - q**2 * v_t)
    root = math.sqrt(max(disc, 0.0))
    return Interval((half_b - root) / a, (half_b + root) / a, level)


def _fieller_ratio(
    mean_t: float, var_t: float, n_t: int, mean_b: float, var_b: float, n_b: int, level: float
) -> tuple[float, Interval, float]:
    """Fieller's interval for mean_t / mean_b of two independent normal samples.

    The set of R with (x_t - R x_b)^2 <= t^2 (v_t + R^2 v_b), v = s^2/n, is
    the interval between the roots of a quadratic in R. The variances differ,
    so t has Welch-Satterthwaite degrees of freedom for x_t - R x_b, taken at
    the point estimate R.
    """
    ratio = mean_t / mean_b
    v_t, v_b = var_t / n_t, var_b / n_b
    num = (v_t + ratio**2 * v_b) ** 2
    den = v_t**2 / (n_t - 1) + ratio**4 * v_b**2 / (n_b - 1)
    df = num / den if den > 0 else math.inf
    if num == 0.0:
        return ratio, Interval(ratio, ratio, level), df
    t = float(sps.t.ppf(1 - (1 - level) / 2, df))
    return ratio, _fieller_interval(mean_t, mean_b, v_t, v_b, 0.0, t, level), df


def _as_overhead(ratio: float, ratio_ci: Interval, higher_is_better: bool, df: float,
                 pairs: int) -> Overhead:
    level = ratio_ci.level
    if higher_is_better:
        value, ci = 1.0 - ratio, Interval(1.0 - ratio_ci.high, 1.0 - ratio_ci.low, level)
    else:
        value, ci = ratio - 1.0, Interval(ratio_ci.low - 1.0, ratio_ci.high - 1.0, level)
    return Overhead(ratio, ratio_ci, value, ci, higher_is_better, df, pairs)


def overhead(
    target_samples: Samples,
    baseline_samples: Samples,
    level: float = 0.95,
    *,
    higher_is_better: bool,
) -> Overhead:
    """Overhead of ``target`` over ``baseline`` with Fieller's confidence interval.

    Fieller's interval is exact for normal means, unlike the delta method, and
    stays asymmetric around the estimate as a ratio should.
    """
    check_level(level)
    xt = _as_samples(target_samples, what="target samples")
    xb = _as_samples(baseline_samples, what="baseline samples")
    mean_b = float(xb.mean())
    if mean_b == 0.0:
        raise StatsError("baseline mean is 0; a relative overhead is undefined")
    ratio, ratio_ci, df = _fieller_ratio(
        float(xt.mean()),
        float(xt.var(ddof=1)),
        xt.size,
        mean_b,
        float(xb.var(ddof=1)),
        xb.size,
        level,
    )
    return _as_overhead(ratio, ratio_ci, higher_is_better, df, 0)


def paired_overhead(
    target_samples: Samples,
    baseline_samples: Samples,
    level: float = 0.95,
    *,
    higher_is_better: bool,
) -> Overhead:
    """Overhead of ``target`` over ``baseline`` from paired samples: the i-th of each was
    measured in the same block (one round of a blocked run order, every target once).

    Fieller's interval with the covariance of the two means (Fieller 1954; the paired
    case of the ratio of means), t with n - 1 degrees of freedom: what both members of a
    pair share (the host's speed drifting between rounds) cancels in x_t - R x_b, as in a
    paired t-test, instead of widening the interval as it does when the samples are
    treated as independent.
    """
    check_level(level)
    xt = _as_samples(target_samples, what="target samples")
    xb = _as_samples(baseline_samples, what="baseline samples")
    if xt.size != xb.size:
        raise StatsError(f"paired samples differ in length: {xt.size} target, {xb.size} baseline")
    n = xt.size
    mean_t, mean_b = float(xt.mean()), float(xb.mean())
    if mean_b == 0.0:
        raise StatsError("baseline mean is 0; a relative overhead is undefined")
    ratio = mean_t / mean_b
    cov = np.cov(xt, xb, ddof=1)
    v_t, v_b, c_tb = float(cov[0, 0]) / n, float(cov[1, 1]) / n, float(cov[0, 1]) / n
    if v_t + ratio**2 * v_b - 2 * ratio * c_tb <= 0.0:
        ratio_ci = Interval(ratio, ratio, level)  # the pairs are exactly proportional
    else:
        q = float(sps.t.ppf(1 - (1 - level) / 2, n - 1))
        ratio_ci = _fieller_interval(mean_t, mean_b, v_t, v_b, c_tb, q, level)
    return _as_overhead(ratio, ratio_ci, higher_is_better, float(n - 1), n)


def overhead_by_rep(
    target: Sequence[tuple[int, float]],
    baseline: Sequence[tuple[int, float]],
    level: float = 0.95,
    *,
    higher_is_better: bool,
    paired: bool,
) -> Overhead:
    """``target``'s overhead against ``baseline`` from (repetition, value) samples: paired
    on the repetitions both have when ``paired`` (a blocked run, where repetition k of
    every target is from round k), else with the samples taken as independent."""
    if not paired:
        return overhead([v for _, v in target], [v for _, v in baseline], level,
                        higher_is_better=higher_is_better)
    base = dict(baseline)
    mine = [(r, v) for r, v in target if r in base]
    if len(mine) < 2:
        raise StatsError(f"{len(mine)} round(s) measured both targets; a paired interval "
                         "needs at least 2")
    return paired_overhead([v for _, v in mine], [base[r] for r, _ in mine], level,
                           higher_is_better=higher_is_better)


# --------------------------------------------------------------------------
# Linear regression (Jain ch. 14, 15): a response against several predictors


@dataclass(frozen=True, slots=True)
class Slope:
    """One predictor's coefficient: how much the response grows per unit of it."""

    predictor: str
    estimate: float
    interval: Interval
    p_value: float

    @property
    def significant(self) -> bool:
        """Whether the interval excludes zero."""
        return not self.interval.contains(0.0)


@dataclass(frozen=True, slots=True)
class LinearFit:
    """An ordinary least squares fit, or why none was possible (``reason``)."""

    response: str
    n: int
    intercept: float | None = None
    slopes: tuple[Slope, ...] = ()
    r_squared: float | None = None
    dropped: tuple[str, ...] = ()  # predictors with one level only: no slope to fit
    reason: str = ""  # non-empty: no fit

    @property
    def ok(self) -> bool:
        return not self.reason

    def slope(self, predictor: str) -> Slope | None:
        return next((s for s in self.slopes if s.predictor == predictor), None)


def linear_fit(rows: Sequence[Mapping[str, float | None]], response: str,
               predictors: Sequence[str], level: float = 0.95) -> LinearFit:
    """OLS of ``response`` on ``predictors`` (statsmodels), with ``level`` intervals.

    Rows whose response is missing are left out. A predictor with a single
    distinct value is dropped and named; with no residual degree of freedom
    left (too few rows for the predictors), the fit says so in ``reason``
    instead of printing intervals it cannot have.
    """
    import statsmodels.api as sm  # heavy: only a fit pays for it

    check_level(level)
    used = [r for r in rows if r.get(response) is not None
            and all(r.get(p) is not None for p in predictors)]
    n = len(used)
    kept = [p for p in predictors if len({float(r[p]) for r in used}) > 1]  # type: ignore[arg-type]
    dropped = tuple(p for p in predictors if p not in kept)
    if not kept:
        return LinearFit(response, n, dropped=dropped,
                         reason=f"{n} points, no predictor with two or more levels")
    if n - len(kept) - 1 < 1:
        return LinearFit(response, n, dropped=dropped,
                         reason=f"{n} points for {len(kept)} slopes and an intercept: "
                                "no degree of freedom left for an interval")
    x = np.array([[float(r[p]) for p in kept] for r in used])  # type: ignore[arg-type]
    y = np.array([float(r[response]) for r in used])  # type: ignore[arg-type]
    design = sm.add_constant(x, has_constant="add")
    if np.linalg.matrix_rank(design) < design.shape[1]:
        return LinearFit(response, n, dropped=dropped,
                         reason="the predictors are confounded (their levels move together)")
    model = sm.OLS(y, design).fit()
    ci = model.conf_int(alpha=1 - level)
    slopes = tuple(Slope(p, float(model.params[i + 1]),
                         Interval(float(ci[i + 1][0]), float(ci[i + 1][1]), level),
                         float(model.pvalues[i + 1]))
                   for i, p in enumerate(kept))
    return LinearFit(response, n, intercept=float(model.params[0]), slopes=slopes,
                     r_squared=float(model.rsquared), dropped=dropped)


# --------------------------------------------------------------------------
# Quantiles


@dataclass(frozen=True, slots=True)
class QuantileEstimate:
    """A sample quantile with a distribution-free interval between two order statistics.

    ``interval.level`` is the coverage the order statistics actually give, which with few
    samples is below the level asked for: with 5 samples no two order statistics bound
    the 90th percentile with 95% confidence (it takes 29), and [min, max] covers it with
    probability 1 - 0.9**5 - 0.1**5 = 41%. ``exact`` says whether the level asked for was
    reached."""

    q: float
    value: float
    interval: Interval
    n: int
    exact: bool


def quantile_interval(samples: Samples, q: float, level: float = 0.95) -> QuantileEstimate:
    """The ``q``-quantile of ``samples`` (numpy's linear method) with the shortest interval
    [x(l), x(u)] of order statistics whose coverage P(l <= B < u), B ~ Binomial(n, q),
    reaches ``level``; if none does, [min, max] with the coverage it has (Conover,
    *Practical Nonparametric Statistics*, 3rd ed., 1999, section 3.2; Hahn and Meeker,
    *Statistical Intervals*, 1991, section 5.2)."""
    check_level(level)
    if not 0 < q < 1:
        raise StatsError(f"quantile {q}: expected a fraction between 0 and 1")
    x = np.sort(_as_samples(samples, min_n=1))
    n = len(x)
    value = float(np.quantile(x, q, method=QUANTILE_METHOD))
    cdf = sps.binom.cdf(np.arange(-1, n + 1), n, q)  # cdf[k + 1] = P(B <= k)
    best: tuple[int, int, float] | None = None
    for lo in range(1, n + 1):
        for hi in range(lo + 1, n + 1):
            coverage = float(cdf[hi] - cdf[lo])  # P(lo <= B <= hi - 1)
            if coverage >= level and (best is None or x[hi - 1] - x[lo - 1] < x[best[1] - 1] - x[best[0] - 1]):
                best = (lo, hi, coverage)
    if best is None:
        coverage = float(cdf[n] - cdf[1]) if n > 1 else 0.0
        return QuantileEstimate(q, value, Interval(float(x[0]), float(x[-1]), coverage), n, False)
    lo, hi, coverage = best
    return QuantileEstimate(q, value, Interval(float(x[lo - 1]), float(x[hi - 1]), coverage),
                            n, True)
