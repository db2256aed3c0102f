"""Full factorial designs with replications (Jain, *The Art of Computer Systems Performance
Analysis*, 1991, ch. 22 and 23): effects with intervals, allocation of variation and ANOVA.

The sums of squares are Jain's closed forms over cell means, which the tests
cross-check against statsmodels ``ols`` + ``anova_lm``; the F distribution
comes from scipy (``scipy.stats.f``).
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy import stats as sps

from framework.core.stats import FloatArray, Interval, StatsError, check_level

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Effect:
    """One effect: a main effect (one factor) or an interaction at one level combination.

    A main effect is level mean - grand mean; an interaction is what the cell
    mean of its factors leaves after the grand mean and all lower-order
    effects (Jain 22.2). Effects of a term sum to zero over each factor.
    """

    factors: tuple[str, ...]
    levels: tuple[Any, ...]
    value: float
    stdev: float
    ci: Interval

    @property
    def significant(self) -> bool:
        return not self.ci.contains(0.0)


@dataclass(frozen=True, slots=True)
class AnovaRow:
    """One term of the ANOVA table (allocation of variation, Jain 22.4 and 22.5)."""

    factors: tuple[str, ...]
    sum_sq: float
    percent: float  # percentage of SST explained
    df: int
    mean_sq: float
    f: float
    f_crit: float  # F[level; df, df_error]
    p_value: float

    @property
    def name(self) -> str:
        return ":".join(self.factors)

    @property
    def significant(self) -> bool:
        """F test at the design's level: F computed > F from the table."""
        return self.f > self.f_crit


@dataclass(frozen=True, slots=True)
class FactorialDesign:
    """Analysis of a balanced full factorial design with r >= 2 replications."""

    factors: tuple[str, ...]
    levels: tuple[tuple[Any, ...], ...]  # levels per factor, in order of first appearance
    replications: int
    level: float  # confidence level of the intervals and of F-crit
    grand_mean: float
    grand_mean_stdev: float
    grand_mean_ci: Interval
    effects: tuple[Effect, ...]
    terms: tuple[AnovaRow, ...]  # main effects first, then interactions by order
    ss_y: float  # sum of squared observations
    ss_0: float  # N * grand mean^2
    ss_total: float  # SST = SSY - SS0
    ss_error: float
    df_error: int
    mean_sq_error: float

    @property
    def n_observations(self) -> int:
        return self.replications * math.prod(len(lv) for lv in self.levels)

    @property
    def error_percent(self) -> float:
        return 100.0 * self.ss_error / self.ss_total if self.ss_total > 0 else 0.0

    def term(self, *factors: str) -> AnovaRow:
        """The ANOVA row of a main effect (one factor) or interaction (several)."""
        wanted = frozenset(factors)
        for row in self.terms:
            if frozenset(row.factors) == wanted:
                return row
        raise StatsError(f"no term {':'.join(factors)!r} in a design of factors {self.factors}")

    def effect(self, levels: Mapping[str, Any]) -> Effect:
        """The effect at the given level of each named factor (one factor: main effect)."""
        wanted = frozenset(levels)
        for e in self.effects:
            if frozenset(e.factors) == wanted and all(
                levels[f] == lv for f, lv in zip(e.factors, e.levels)
            ):
                return e
        raise StatsError(f"no effect at {dict(levels)!r} in a design of factors {self.factors}")

    def effects_of(self, *factors: str) -> tuple[Effect, ...]:
        wanted = frozenset(factors)
        return tuple(e for e in self.effects if frozenset(e.factors) == wanted)


def _to_frame(
    data: pd.DataFrame | Iterable[Mapping[str, Any]], columns: Sequence[str]
) -> pd.DataFrame:
    frame = data if isinstance(data, pd.DataFrame) else pd.DataFrame.from_records(list(data))
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise StatsError(f"design table lacks column(s) {missing}; it has {list(frame.columns)}")
    return frame


def full_factorial(
    data: pd.DataFrame | Iterable[Mapping[str, Any]],
    factors: Sequence[str],
    response: str,
    level: float = 0.90,
) -> FactorialDesign:
    """Effects, allocation of variation and ANOVA of a balanced full factorial design.

    ``data`` is tidy: one row per observation with a column per factor (its
    level) and the ``response``. Every combination of levels must appear the
    same number of times r >= 2 (the replications that separate interactions
    from errors). ``level`` is the confidence of effect intervals and of the
    F-critical values (Jain's tables use 0.90).

    The sums of squares are Jain's closed forms, exact for balanced designs:
    SS(term) = N / prod(levels of its factors) * sum(effect^2), with
    prod(l_i - 1) degrees of freedom; s(effect) = s_e sqrt(df(term) / N).
    """
    check_level(level)
    factors = _check_factor_names(factors, response)
    frame = _to_frame(data, [*factors, response])
    y_all = _responses(frame, response)
    levels = _levels(frame, factors)
    shape = tuple(len(lv) for lv in levels)
    cells = _cells(frame, factors, levels)
    r = _replications(cells, factors, levels)

    n = y_all.size
    cell_means = np.bincount(cells, weights=y_all, minlength=math.prod(shape)).reshape(shape) / r
    grand = float(y_all.mean())
    df_error = math.prod(shape) * (r - 1)
    errors = _errors(y_all, grand, cell_means.reshape(-1)[cells], df_error, level)

    marginals = _marginal_means(cell_means)
    effects: list[Effect] = []
    rows: list[AnovaRow] = []
    for subset in _terms(len(factors)):
        names = tuple(factors[i] for i in subset)
        term_levels = tuple(levels[i] for i in subset)
        eff = _term_effects(marginals, subset)
        row = _anova_row(names, eff, tuple(len(lv) for lv in term_levels), errors)
        rows.append(row)
        effects.extend(_effects_at_levels(names, term_levels, eff, row.df, errors))

    grand_sd = errors.stdev / math.sqrt(n)
    t_q = errors.t_quantile
    log.debug(
        "full factorial %s: N=%d r=%d SST=%g SSE=%g", factors, n, r, errors.ss_total, errors.ss
    )
    return FactorialDesign(
        factors=factors,
        levels=levels,
        replications=r,
        level=level,
        grand_mean=grand,
        grand_mean_stdev=grand_sd,
        grand_mean_ci=Interval(grand - t_q * grand_sd, grand + t_q * grand_sd, level),
        effects=tuple(effects),
        terms=tuple(rows),
        ss_y=float(np.sum(y_all**2)),
        ss_0=n * grand**2,
        ss_total=errors.ss_total,
        ss_error=errors.ss,
        df_error=errors.df,
        mean_sq_error=errors.mean_sq,
    )


def _check_factor_names(factors: Sequence[str], response: str) -> tuple[str, ...]:
    names = tuple(factors)
    if not names:
        raise StatsError("full_factorial needs at least one factor")
    if len(set(names)) != len(names) or response in names:
        raise StatsError(
            f"factor names {names} must be distinct and differ from the response {response!r}"
        )
    return names


def _responses(frame: pd.DataFrame, response: str) -> FloatArray:
    """The observed values, which must all be finite numbers."""
    try:
        y_all = frame[response].to_numpy(dtype=float)
    except (TypeError, ValueError) as exc:
        raise StatsError(f"response column {response!r} is not numeric: {exc}") from exc
    if not np.all(np.isfinite(y_all)):
        raise StatsError(f"response column {response!r} contains NaN or infinite values")
    return y_all


def _levels(frame: pd.DataFrame, factors: tuple[str, ...]) -> tuple[tuple[Any, ...], ...]:
    """The levels of each factor in order of first appearance; at least two each."""
    if frame[list(factors)].isna().to_numpy().any():
        raise StatsError(f"factor columns {list(factors)} contain missing levels")
    levels = tuple(tuple(pd.unique(frame[f])) for f in factors)
    for f, lv in zip(factors, levels):
        if len(lv) < 2:
            raise StatsError(
                f"factor {f!r} has a single level {lv[0]!r}; a factor needs at least 2"
            )
    return levels


def _cells(
    frame: pd.DataFrame, factors: tuple[str, ...], levels: tuple[tuple[Any, ...], ...]
) -> npt.NDArray[np.intp]:
    """The cell (level combination, numbered in C order) of each observation."""
    codes = [pd.Categorical(frame[f], categories=list(lv)).codes for f, lv in zip(factors, levels)]
    return np.ravel_multi_index(codes, tuple(len(lv) for lv in levels))


def _replications(
    cells: npt.NDArray[np.intp], factors: tuple[str, ...], levels: tuple[tuple[Any, ...], ...]
) -> int:
    """r, the observations in every cell; the design must be balanced with r >= 2."""
    shape = tuple(len(lv) for lv in levels)
    counts = np.bincount(cells, minlength=math.prod(shape)).reshape(shape)
    values, freq = np.unique(counts, return_counts=True)
    r = int(values[np.argmax(freq)])
    if np.any(counts != r):
        idx = tuple(int(i) for i in np.argwhere(counts != r)[0])
        cell = {f: levels[i][j] for i, (f, j) in enumerate(zip(factors, idx))}
        raise StatsError(
            f"unbalanced design: cell {cell} has {int(counts[idx])} observation(s), "
            f"most cells {r}; every level combination needs the same number of replications"
        )
    if r < 2:
        raise StatsError(
            "design has one observation per cell; replications (r >= 2) are needed to estimate errors"
        )
    return r


@dataclass(frozen=True, slots=True)
class _Errors:
    """What the model leaves unexplained, which every term is tested against (Jain 22.4)."""

    n: int  # observations
    ss_total: float  # SST
    ss: float  # SSE
    df: int
    mean_sq: float  # MSE
    stdev: float  # s_e
    t_quantile: float  # t[1 - alpha/2; df] for the intervals
    level: float


def _errors(
    y_all: FloatArray, grand: float, cell_mean_of_each: FloatArray, df: int, level: float
) -> _Errors:
    # Deviations from the grand mean avoid the cancellation in SSY - SS0.
    ss_total = float(np.sum((y_all - grand) ** 2))
    ss_error = float(np.sum((y_all - cell_mean_of_each) ** 2))
    mse = ss_error / df
    return _Errors(
        n=y_all.size,
        ss_total=ss_total,
        ss=ss_error,
        df=df,
        mean_sq=mse,
        stdev=math.sqrt(mse),
        t_quantile=float(sps.t.ppf(1 - (1 - level) / 2, df)),
        level=level,
    )


def _marginal_means(cell_means: FloatArray) -> dict[tuple[int, ...], FloatArray]:
    """Means over every subset of factors (by position), as broadcastable arrays."""
    k = cell_means.ndim
    marginals: dict[tuple[int, ...], FloatArray] = {}
    for size in range(k + 1):
        for subset in itertools.combinations(range(k), size):
            other = tuple(i for i in range(k) if i not in subset)
            marginals[subset] = cell_means.mean(axis=other, keepdims=True) if other else cell_means
    return marginals


def _terms(k: int) -> Iterator[tuple[int, ...]]:
    """Every term of a k-factor model: main effects first, then interactions by order."""
    for size in range(1, k + 1):
        yield from itertools.combinations(range(k), size)


def _term_effects(
    marginals: Mapping[tuple[int, ...], FloatArray], subset: tuple[int, ...]
) -> FloatArray:
    """The effects of one term at every combination of its factors' levels."""
    # Inclusion-exclusion (Moebius inversion over the subset lattice):
    # effect_S = sum over T within S of (-1)^(|S|-|T|) * marginal mean_T.
    size = len(subset)
    eff = np.zeros_like(marginals[subset])
    for tsize in range(size + 1):
        for t_sub in itertools.combinations(subset, tsize):
            eff = eff + (-1) ** (size - tsize) * marginals[t_sub]
    return eff


def _anova_row(
    factors: tuple[str, ...], eff: FloatArray, term_shape: tuple[int, ...], errors: _Errors
) -> AnovaRow:
    """The variation one term explains, and its F test against the errors."""
    ss = float(errors.n / math.prod(term_shape) * np.sum(eff**2))
    df = math.prod(n_levels - 1 for n_levels in term_shape)
    ms = ss / df
    if errors.mean_sq > 0:
        f_val = ms / errors.mean_sq
        p_val = float(sps.f.sf(f_val, df, errors.df))
    else:
        f_val, p_val = (math.inf, 0.0) if ms > 0 else (math.nan, math.nan)
    return AnovaRow(
        factors=factors,
        sum_sq=ss,
        percent=100.0 * ss / errors.ss_total if errors.ss_total > 0 else 0.0,
        df=df,
        mean_sq=ms,
        f=f_val,
        f_crit=float(sps.f.ppf(errors.level, df, errors.df)),
        p_value=p_val,
    )


def _effects_at_levels(
    factors: tuple[str, ...],
    term_levels: tuple[tuple[Any, ...], ...],
    eff: FloatArray,
    df: int,
    errors: _Errors,
) -> Iterator[Effect]:
    """One Effect, with its interval, per combination of the term's levels."""
    sd = errors.stdev * math.sqrt(df / errors.n)
    t_q = errors.t_quantile
    values = eff.reshape(tuple(len(lv) for lv in term_levels))
    for idx in itertools.product(*(range(len(lv)) for lv in term_levels)):
        value = float(values[idx])
        yield Effect(
            factors=factors,
            levels=tuple(lv[j] for lv, j in zip(term_levels, idx)),
            value=value,
            stdev=sd,
            ci=Interval(value - t_q * sd, value + t_q * sd, errors.level),
        )
