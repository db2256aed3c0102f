"""A paper's claims, judged against what a study measured today.

A study may name a claims file (``[study] claims = "FILE"``): one
``[[claim]]`` per statement of the paper, with where the paper says it,
the sentence or figure, the study step whose results judge it, and a
test. Each claim ends ``agree``, ``disagree`` or ``not comparable``, with
one line that says why in numbers::

    [[claim]]
    id = "ext2-reads-faster"
    section = "3.2"
    paper = "ext2fs is about 0.6 MB/s faster at reading [than ext3fs]"
    step = 1
    test = "order"                    # order | similar | overhead-above | overhead-below
                                      # | share-greater | share-at-most | significant
    metric = "block_read"
    better = "ext2"
    worse = "ext3"

Tests, on a bench step's results.json:

``order``
    ``worse``'s cost against ``better`` on ``metric`` (Fieller's interval for
    the ratio of their means, in the metric's own direction) lies wholly
    above 0: agree; wholly below: disagree; with ``alike_pct`` (optional:
    the smallest difference the paper's statement means), a whole interval
    within +-``alike_pct``% is a disagreement too (the two are alike today);
    otherwise not comparable. Results without the samples fall back to
    disjoint confidence intervals of the two means.
``similar``
    ``target``'s overhead against the step's baseline on ``metric`` lies
    within +-``within_pct``% (its whole Fieller interval): agree; the
    whole interval outside: disagree; else not comparable.
``overhead-above`` / ``overhead-below``
    ``target``'s overhead against the baseline on ``metric`` (positive: it
    costs) lies wholly above / below ``pct``%: agree; wholly on the other
    side: disagree; the interval straddles ``pct``: not comparable.
``share-greater``
    ANOVA term ``term`` explains more of the variation than ``than``.
``share-at-most``
    ANOVA term ``term`` explains at most ``pct``% of the variation.
``significant``
    ANOVA term ``term``'s F-test rejects "no effect" at the step's level:
    agree; it does not: not comparable (no effect detectable is not proof
    of none).

Terms are factor names joined by ``:`` (``target:metric``); a one-factor
bench step has the single term ``target``.

A claim left not comparable by an interval says how many repetitions would
decide it if the difference measured is the true one (the interval narrows as
1/sqrt(n)); a claim on a point at its bound has no such count.

A claim that only some of the study's scales can test names them, with the
reason the others cannot (``scales = ["full"]``, ``scales_why = "..."``); at
another scale it is measured and shown but judged not comparable, with that
reason.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from framework.core.errors import ConfigError
from framework.core.stats import StatsError, overhead_by_rep

AGREE, DISAGREE, NOT_COMPARABLE = "agree", "disagree", "not comparable"
TESTS: dict[str, tuple[str, ...]] = {
    "order": ("metric", "better", "worse"),
    "similar": ("metric", "target", "within_pct"),
    "overhead-above": ("metric", "target", "pct"),
    "overhead-below": ("metric", "target", "pct"),
    "share-greater": ("term", "than"),
    "share-at-most": ("term", "pct"),
    "significant": ("term",),
}
_COMMON = ("id", "section", "paper", "step", "test")
_OPTIONAL = ("scales", "scales_why")
#: Keys a test takes besides its own required ones.
_TEST_OPTIONAL: dict[str, tuple[str, ...]] = {"order": ("alike_pct",)}


@dataclass(frozen=True, slots=True)
class Claim:
    id: str
    section: str
    paper: str
    step: int
    test: str
    args: tuple[tuple[str, Any], ...]
    scales: tuple[str, ...] = ()  # the scales that can test it; empty: every scale
    scales_why: str = ""  # why the others cannot

    def arg(self, name: str) -> Any:
        return dict(self.args)[name]

    def option(self, name: str) -> Any:
        return dict(self.args).get(name)


@dataclass(frozen=True, slots=True)
class Verdict:
    claim: Claim
    verdict: str
    measured: str  # what was measured, with its interval
    why: str


def parse_claims(text: str, *, source: str, steps: int,
                 scales: Sequence[str] = ()) -> tuple[Claim, ...]:
    """The claims of a file; ``steps``: how many steps the study has (a claim names one);
    ``scales``: the study's scales (a claim's ``scales`` must be among them)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    if set(raw) - {"claim"}:
        raise ConfigError(f"{source}: unknown table {sorted(set(raw) - {'claim'})[0]!r} "
                          "(expected only [[claim]])")
    items = raw.get("claim", [])
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{source}: no [[claim]]")
    claims: list[Claim] = []
    for i, item in enumerate(items, 1):
        where = f"{source}: claim {i}"
        test = item.get("test")
        if test not in TESTS:
            raise ConfigError(f"{where}: test must be one of {', '.join(TESTS)}, not {test!r}")
        wanted = set(_COMMON) | set(TESTS[test]) | set(_OPTIONAL) | set(_TEST_OPTIONAL.get(test, ()))
        if set(item) - wanted:
            raise ConfigError(f"{where}: unknown key {sorted(set(item) - wanted)[0]!r} "
                              f"(a {test} claim takes {', '.join(sorted(wanted))})")
        missing = [k for k in (*_COMMON, *TESTS[test]) if k not in item]
        if missing:
            raise ConfigError(f"{where}: missing key {missing[0]!r}")
        for key in ("id", "section", "paper"):
            if not isinstance(item[key], str) or not item[key]:
                raise ConfigError(f"{where}: {key} must be a non-empty string")
        step = item["step"]
        if isinstance(step, bool) or not isinstance(step, int) or not 1 <= step <= steps:
            raise ConfigError(f"{where}: step must be a step number from 1 to {steps}, got {step!r}")
        for key in ("within_pct", "pct", "alike_pct"):
            if key in item and (isinstance(item[key], bool) or not isinstance(item[key], int | float)
                                or item[key] < 0):
                raise ConfigError(f"{where}: {key} must be a non-negative number, got {item[key]!r}")
        if item["id"] in {c.id for c in claims}:
            raise ConfigError(f"{where}: id {item['id']!r} is used twice")
        only = item.get("scales", [])
        if (not isinstance(only, list) or not all(isinstance(x, str) for x in only)
                or ("scales" in item and not only)):
            raise ConfigError(f"{where}: scales must be a non-empty list of scale names, got {only!r}")
        why = item.get("scales_why", "")
        if bool(only) != bool(why) or not isinstance(why, str):
            raise ConfigError(f"{where}: scales and scales_why (why the other scales cannot "
                              "test the claim, one line) go together")
        unknown = [x for x in only if x not in scales]
        if unknown:
            raise ConfigError(f"{where}: scale {unknown[0]!r} is not one of the study's "
                              f"({', '.join(scales) or 'it names none'})")
        claims.append(Claim(item["id"], item["section"], item["paper"], step, test,
                            tuple((k, item[k]) for k in (*TESTS[test], *_TEST_OPTIONAL.get(test, ()))
                                  if k in item), tuple(only), why))
    return tuple(claims)


def load_claims(path: Path, *, steps: int, scales: Sequence[str] = ()) -> tuple[Claim, ...]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read claims file: {exc.strerror}") from None
    return parse_claims(text, source=str(path), steps=steps, scales=scales)


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def _mean(results: Mapping[str, Any], metric: str, target: str) -> tuple[float, float, float]:
    try:
        cell = results["means"][metric][target]
        low, high = cell["ci"]
        return float(cell["mean"]), float(low), float(high)
    except (KeyError, TypeError, ValueError):
        raise LookupError(f"no mean of {metric} for {target}") from None


def _term(results: Mapping[str, Any], term: str) -> dict[str, Any]:
    """The ANOVA row of ``term``: a factorial step's ``terms``, or a one-factor step's target."""
    anova = results.get("anova") or {}
    wanted = set(term.split(":"))
    for row in anova.get("terms", ()):
        if set(row["term"]) == wanted:
            return dict(row)
    if wanted == {"target"} and "percent_target" in anova:
        return {"percent": anova["percent_target"], "p": anova.get("p"),
                "significant": anova.get("significant")}
    raise LookupError(f"no ANOVA term {term!r} in the step's design")


def _values(results: Mapping[str, Any], metric: str,
            target: str) -> list[tuple[int, float]] | None:
    """The kept samples of ``target`` on ``metric`` as (repetition, value) when results.json
    has them (two or more); repetitions by position when it does not name them."""
    try:
        cell = results["means"][metric][target]
        values = [float(x) for x in cell["values"]]
        reps = [int(r) for r in cell.get("reps") or range(1, len(values) + 1)]
    except (KeyError, TypeError, ValueError):
        return None
    if len(reps) != len(values):
        return None
    return list(zip(reps, values, strict=True)) if len(values) >= 2 else None


def _count(results: Mapping[str, Any], metric: str, *targets: str) -> int | None:
    """The fewest repetitions any of ``targets`` has on ``metric``."""
    try:
        return min(int(results["means"][metric][t]["n"]) for t in targets)
    except (KeyError, TypeError, ValueError):
        return None


def reps_to_decide(n: int | None, low: float, high: float,
                   *ways: Sequence[float]) -> int | None:
    """About how many repetitions would decide a claim whose interval [low, high] came from
    ``n`` repetitions, if the interval's centre is the true value (its half width shrinks as
    1/sqrt(n)). Each of ``ways`` is a set of bounds the interval must clear (end on the
    centre's side of each) for one verdict, e.g. (0,) for an order, (-5, 5) for "within 5%";
    the count is the fewest over the ways. None when no count decides (no n, or the centre
    on a bound every way needs)."""
    if not n:
        return None
    centre, half = (low + high) / 2, (high - low) / 2
    counts = []
    for bounds in ways:
        straddled = [b for b in bounds if low <= b <= high]
        if any(b == centre for b in straddled):
            continue
        counts.append(max((math.floor(n * (half / abs(centre - b)) ** 2) + 1 for b in straddled),
                          default=n))
    return max(min(counts), n + 1) if counts else None


def _decide_hint(n: int | None, low: float, high: float, *ways: Sequence[float]) -> str:
    need = reps_to_decide(n, low, high, *ways)
    if need is None:
        return ""
    return f"; about {need} repetitions a target would decide it, if the difference is as measured"


def _share(results: Mapping[str, Any], term: str) -> float:
    return float(_term(results, term)["percent"])


def _overhead(results: Mapping[str, Any], metric: str, target: str) -> tuple[float, float, float]:
    """``target``'s overhead against the step's baseline on ``metric``, in percent, with its
    interval."""
    try:
        o = results["overhead"][metric][target]
        low, high = (100 * float(x) for x in o["ci"])
        return 100 * float(o["overhead"]), low, high
    except (KeyError, TypeError, ValueError):
        raise LookupError(f"no overhead of {target} on {metric} against the baseline "
                          f"{results.get('baseline')}") from None


def judge(claim: Claim, results: Mapping[str, Any], *, scale: str | None = None) -> Verdict:
    """One claim against a bench step's results.json, from a study run at ``scale``."""
    try:
        verdict = _judge(claim, results)
    except LookupError as exc:
        return Verdict(claim, NOT_COMPARABLE, "-", f"not measured: {exc.args[0]}")
    if claim.scales and scale not in claim.scales:
        return Verdict(claim, NOT_COMPARABLE, verdict.measured,
                       f"judged at scale {', '.join(claim.scales)} only: {claim.scales_why}")
    return verdict


def _judge(claim: Claim, results: Mapping[str, Any]) -> Verdict:
    a = claim.arg
    if claim.test == "order":
        metric = a("metric")
        higher = bool(results.get("higher_is_better", {}).get(metric, True))
        bm, bl, bh = _mean(results, metric, a("better"))
        wm, wl, wh = _mean(results, metric, a("worse"))
        unit = results.get("units", {}).get(metric, "")
        measured = (f"{a('better')} {_fmt(bm)} [{_fmt(bl)}, {_fmt(bh)}], {a('worse')} "
                    f"{_fmt(wm)} [{_fmt(wl)}, {_fmt(wh)}] {unit}")
        better_v, worse_v = _values(results, metric, a("better")), _values(results, metric, a("worse"))
        if better_v is not None and worse_v is not None:
            return _order(claim, results, metric, higher, measured, better_v, worse_v)
        better_wins = bl > wh if higher else bh < wl
        worse_wins = wl > bh if higher else wh < bl
        if better_wins:
            return Verdict(claim, AGREE, measured, f"{a('better')} is better, the intervals are apart")
        if worse_wins:
            return Verdict(claim, DISAGREE, measured, f"{a('worse')} is better, the intervals are apart")
        return Verdict(claim, NOT_COMPARABLE, measured,
                       "the intervals overlap: no difference detectable at this scale")
    if claim.test == "similar":
        metric, target, bound = a("metric"), a("target"), float(a("within_pct"))
        value, low, high = _overhead(results, metric, target)
        measured = f"{target} vs {results.get('baseline')}: {value:+.1f}% [{low:+.1f}%, {high:+.1f}%]"
        if -bound <= low and high <= bound:
            return Verdict(claim, AGREE, measured, f"the whole interval is within +-{bound:g}%")
        if high < -bound or low > bound:
            return Verdict(claim, DISAGREE, measured, f"the whole interval is beyond +-{bound:g}%")
        n = _count(results, metric, target, str(results.get("baseline")))
        return Verdict(claim, NOT_COMPARABLE, measured,
                       f"the interval is too wide to say whether it is within +-{bound:g}%"
                       + _decide_hint(n, low, high, (-bound, bound)))
    if claim.test in ("overhead-above", "overhead-below"):
        metric, target, bound = a("metric"), a("target"), float(a("pct"))
        value, low, high = _overhead(results, metric, target)
        measured = f"{target} vs {results.get('baseline')}: {value:+.1f}% [{low:+.1f}%, {high:+.1f}%]"
        above, below = low > bound, high < bound
        if not (above or below):
            n = _count(results, metric, target, str(results.get("baseline")))
            return Verdict(claim, NOT_COMPARABLE, measured, f"the interval straddles {bound:+g}%"
                           + _decide_hint(n, low, high, (bound,)))
        side = "above" if above else "below"
        wanted = claim.test.removeprefix("overhead-")
        return Verdict(claim, AGREE if side == wanted else DISAGREE, measured,
                       f"the whole interval is {side} {bound:+g}%")
    if claim.test == "significant":
        row = _term(results, a("term"))
        if row.get("p") is None:
            raise LookupError(f"no F-test of {a('term')!r} (too few replications?)")
        level = float(results.get("level", 0.95))
        measured = f"{a('term')}: {float(row['percent']):.1f}% of the variation, p = {float(row['p']):.3g}"
        if float(row["p"]) < 1 - level:
            return Verdict(claim, AGREE, measured, f"an effect at {level:.0%} confidence")
        return Verdict(claim, NOT_COMPARABLE, measured,
                       f"no effect detectable at {level:.0%} confidence at this scale")
    if claim.test == "share-greater":
        mine, other = _share(results, a("term")), _share(results, a("than"))
        measured = f"{a('term')} {mine:.1f}%, {a('than')} {other:.1f}% of the variation"
        if mine > other:
            return Verdict(claim, AGREE, measured, f"{a('term')} explains more")
        return Verdict(claim, DISAGREE, measured, f"{a('than')} explains as much or more")
    share = _share(results, a("term"))
    measured = f"{a('term')} {share:.1f}% of the variation"
    if share <= float(a("pct")):
        return Verdict(claim, AGREE, measured, f"at most {a('pct')}%")
    return Verdict(claim, DISAGREE, measured, f"more than {a('pct')}%")


def _order(claim: Claim, results: Mapping[str, Any], metric: str, higher: bool, measured: str,
           better: list[tuple[int, float]], worse: list[tuple[int, float]]) -> Verdict:
    """An order claim on the (repetition, value) samples: ``worse``'s cost against ``better``
    (positive: the claimed order), with Fieller's interval at the step's level, paired
    round by round when the step's order was blocked."""
    a = claim.arg
    level = float(results.get("level", 0.95))
    try:
        cost = overhead_by_rep(worse, better, level, higher_is_better=higher,
                               paired=bool(results.get("blocked")))
    except StatsError as exc:
        raise LookupError(f"no interval for {a('worse')} against {a('better')}: {exc}") from None
    low, high = 100 * cost.ci.low, 100 * cost.ci.high
    measured += f"; {a('worse')} costs {cost.percent:+.1f}% [{low:+.1f}%, {high:+.1f}%] against {a('better')}"
    if low > 0:
        return Verdict(claim, AGREE, measured,
                       f"{a('better')} is better: the whole interval of {a('worse')}'s cost is above 0")
    if high < 0:
        return Verdict(claim, DISAGREE, measured,
                       f"{a('worse')} is better: the whole interval of its cost is below 0")
    alike = claim.option("alike_pct")
    n = cost.pairs or min(len(better), len(worse))
    if alike is not None:
        alike = float(alike)
        if -alike <= low and high <= alike:
            return Verdict(claim, DISAGREE, measured,
                           f"the two are alike: the whole interval is within +-{alike:g}%, the "
                           "smallest difference the paper's statement means")
        return Verdict(claim, NOT_COMPARABLE, measured,
                       f"the interval holds 0 and reaches beyond +-{alike:g}%"
                       + _decide_hint(n, low, high, (0.0,), (-alike, alike)))
    return Verdict(claim, NOT_COMPARABLE, measured,
                   "the interval holds 0: no difference detectable at this scale"
                   + _decide_hint(n, low, high, (0.0,)))


def format_table(verdicts: Sequence[Verdict]) -> str:
    """Paper versus today, one block per claim (quotes are long: no fixed-width table)."""
    lines = ["paper versus today:"]
    for v in verdicts:
        c = v.claim
        lines.append(f"  [{v.verdict}] {c.id} (paper, {c.section}): \"{c.paper}\"")
        lines.append(f"      measured (step {c.step}): {v.measured}")
        lines.append(f"      why: {v.why}")
    counts = {k: sum(1 for v in verdicts if v.verdict == k) for k in (AGREE, DISAGREE, NOT_COMPARABLE)}
    lines.append("  " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    return "\n".join(lines)


def verdicts_json(verdicts: Sequence[Verdict]) -> list[dict[str, Any]]:
    return [{"id": v.claim.id, "section": v.claim.section, "paper": v.claim.paper,
             "step": v.claim.step, "test": v.claim.test, "verdict": v.verdict,
             "measured": v.measured, "why": v.why} for v in verdicts]
