"""A paper's claims judged against a study's results: parsing, each test, and bad files."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from framework.core.errors import ConfigError
from framework.study.claims import AGREE, DISAGREE, NOT_COMPARABLE, judge, parse_claims
from framework.study.engine import load_study

ORDER = """
[[claim]]
id = "a-beats-b"
section = "3.2"
paper = "A is faster than B"
step = 1
test = "order"
metric = "mb_s"
better = "a"
worse = "b"
"""


def results(a: tuple[float, float, float], b: tuple[float, float, float], *,
            overhead: tuple[float, float, float] = (0.01, -0.02, 0.03),
            shares: dict[str, float] | None = None) -> dict:
    """A bench results.json of targets a (the baseline) and b on one metric."""
    shares = shares or {"target": 20.0, "metric": 59.0, "target:metric": 19.5}
    return {
        "baseline": "a", "units": {"mb_s": "MB/s"}, "higher_is_better": {"mb_s": True},
        "means": {"mb_s": {"a": {"mean": a[0], "ci": [a[1], a[2]]},
                           "b": {"mean": b[0], "ci": [b[1], b[2]]}}},
        "overhead": {"mb_s": {"b": {"overhead": overhead[0], "ci": [overhead[1], overhead[2]]}}},
        "anova": {"terms": [{"term": t.split(":"), "percent": p} for t, p in shares.items()]},
    }


def one(text: str):
    (claim,) = parse_claims(text, source="c.toml", steps=1)
    return claim


@pytest.mark.parametrize(("a", "b", "verdict"), [
    ((13.1, 13.0, 13.2), (12.4, 12.3, 12.5), AGREE),
    ((12.4, 12.3, 12.5), (13.1, 13.0, 13.2), DISAGREE),
    ((13.0, 12.5, 13.5), (12.9, 12.4, 13.4), NOT_COMPARABLE),
])
def test_order_needs_intervals_apart(a, b, verdict) -> None:
    v = judge(one(ORDER), results(a, b))
    assert v.verdict == verdict
    assert "a 13" in v.measured or "a 12" in v.measured
    if verdict == NOT_COMPARABLE:
        assert "overlap" in v.why


def test_order_follows_the_metrics_direction() -> None:
    r = results((13.1, 13.0, 13.2), (12.4, 12.3, 12.5))
    r["higher_is_better"]["mb_s"] = False  # now a latency: smaller is better
    assert judge(one(ORDER), r).verdict == DISAGREE


@pytest.mark.parametrize(("overhead", "verdict"), [
    ((0.01, -0.02, 0.03), AGREE), ((0.20, 0.15, 0.25), DISAGREE), ((0.04, -0.01, 0.09), NOT_COMPARABLE),
])
def test_similar_asks_the_whole_overhead_interval(overhead, verdict) -> None:
    claim = one(ORDER.replace('test = "order"', 'test = "similar"').replace(
        'better = "a"\nworse = "b"', 'target = "b"\nwithin_pct = 5'))
    v = judge(claim, results((1, 1, 1), (1, 1, 1), overhead=overhead))
    assert v.verdict == verdict and "b vs a" in v.measured


def test_shares_of_variation() -> None:
    greater = one(ORDER.replace('test = "order"', 'test = "share-greater"').replace(
        'metric = "mb_s"\nbetter = "a"\nworse = "b"', 'term = "metric"\nthan = "target"'))
    at_most = one(ORDER.replace('test = "order"', 'test = "share-at-most"').replace(
        'metric = "mb_s"\nbetter = "a"\nworse = "b"', 'term = "metric:target"\npct = 2'))
    r = results((1, 1, 1), (1, 1, 1))
    assert judge(greater, r).verdict == AGREE
    v = judge(at_most, r)  # seed 000's "less than 2%": 19.5% measured
    assert v.verdict == DISAGREE and "19.5%" in v.measured
    r = results((1, 1, 1), (1, 1, 1), shares={"target": 70.0, "metric": 10.0, "target:metric": 1.0})
    assert judge(greater, r).verdict == DISAGREE and judge(at_most, r).verdict == AGREE


@pytest.mark.parametrize(("overhead", "above", "below"), [
    ((0.20, 0.15, 0.25), AGREE, DISAGREE),
    ((0.02, -0.01, 0.05), DISAGREE, AGREE),
    ((0.10, 0.05, 0.15), NOT_COMPARABLE, NOT_COMPARABLE),
])
def test_overhead_above_and_below_a_bound(overhead, above, below) -> None:
    def claim(test: str):
        return one(ORDER.replace('test = "order"', f'test = "{test}"').replace(
            'better = "a"\nworse = "b"', 'target = "b"\npct = 10'))
    r = results((1, 1, 1), (1, 1, 1), overhead=overhead)
    assert judge(claim("overhead-above"), r).verdict == above
    v = judge(claim("overhead-below"), r)
    assert v.verdict == below and "b vs a" in v.measured
    if below == NOT_COMPARABLE:
        assert "straddles +10%" in v.why


def test_significant_asks_the_f_test_and_a_one_factor_step_has_the_target_term() -> None:
    claim = one(ORDER.replace('test = "order"', 'test = "significant"').replace(
        'metric = "mb_s"\nbetter = "a"\nworse = "b"', 'term = "target"'))
    r = results((1, 1, 1), (1, 1, 1))
    r["anova"] = {"percent_target": 85.4, "p": 6.3e-07, "significant": True}  # seed 004, small
    v = judge(claim, r)
    assert v.verdict == AGREE and "p = 6.3e-07" in v.measured
    r["anova"]["p"] = 0.4
    assert judge(claim, r).verdict == NOT_COMPARABLE  # no effect seen is not proof of none
    r["anova"]["p"] = None
    assert judge(claim, r).why.startswith("not measured: no F-test of 'target'")


def test_a_claim_on_what_was_not_measured_is_not_comparable_and_says_why() -> None:
    v = judge(one(ORDER.replace('worse = "b"', 'worse = "zfs"')), results((1, 1, 1), (1, 1, 1)))
    assert v.verdict == NOT_COMPARABLE and v.why == "not measured: no mean of mb_s for zfs"


@pytest.mark.parametrize(("text", "message"), [
    ("[[claim]\nid=", "c.toml: not valid TOML"),
    ("[other]\nx = 1", "unknown table 'other'"),
    ("", "no [[claim]]"),
    (ORDER.replace('test = "order"', 'test = "vibes"'), "test must be one of order, similar"),
    (ORDER.replace('worse = "b"', 'worse = "b"\ncolour = 1'), "unknown key 'colour'"),
    (ORDER.replace('worse = "b"\n', ""), "missing key 'worse'"),
    (ORDER.replace("step = 1", "step = 3"), "step must be a step number from 1 to 1, got 3"),
    (ORDER + ORDER, "id 'a-beats-b' is used twice"),
    (ORDER + 'scales = ["full"]\n', "scales and scales_why"),
    (ORDER + 'scales = []\nscales_why = "x"\n', "scales must be a non-empty list"),
    (ORDER + 'scales = ["huge"]\nscales_why = "x"\n', "scale 'huge' is not one of the study's"),
    (ORDER + 'alike_pct = -2\n', "alike_pct must be a non-negative number, got -2"),
    (ORDER.replace('test = "order"', 'test = "similar"').replace(
        'better = "a"\nworse = "b"', 'target = "b"\nwithin_pct = 5\nalike_pct = 2'),
     "unknown key 'alike_pct'"),
])
def test_a_malformed_claims_file_is_one_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")) as err:
        parse_claims(text, source="c.toml", steps=1)
    assert "\n" not in str(err.value) and str(err.value).startswith("c.toml")


def test_a_claim_some_scales_cannot_test_is_measured_but_not_judged_at_the_others() -> None:
    text = ORDER + 'scales = ["full"]\nscales_why = "the tiny file stays in the page cache"\n'
    (claim,) = parse_claims(text, source="c.toml", steps=1, scales=("tiny", "full"))
    data = results((13.1, 13.0, 13.2), (12.4, 12.3, 12.5))
    assert judge(claim, data, scale="full").verdict == AGREE
    tiny = judge(claim, data, scale="tiny")
    assert tiny.verdict == NOT_COMPARABLE and tiny.measured == judge(claim, data).measured
    assert tiny.why == "judged at scale full only: the tiny file stays in the page cache"
    # positive control: without the restriction the same results are judged
    assert judge(one(ORDER), data, scale="tiny").verdict == AGREE


def test_a_study_loads_its_claims_and_a_bad_claims_file_stops_it_before_any_step(
        tmp_path: Path) -> None:
    study = load_study("seed000-bonnie")
    assert [c.id for c in study.claims][:2] == ["ext2-ext3-write-alike",
                                                "ext2-reads-faster-than-ext3"]
    assert "--factor" in study.steps[0].argv
    (tmp_path / "s.toml").write_text('[study]\nname = "s"\nclaims = "c.toml"\n'
                                     '[[step]]\ncommand = "bench"\ntargets = ["ext2"]\n'
                                     'options = { workload = "fsmark" }\n')
    with pytest.raises(ConfigError, match=r"s.toml: \[study\] claims 'c.toml': no such file"):
        load_study(str(tmp_path / "s.toml"))
    (tmp_path / "c.toml").write_text(ORDER.replace("step = 1", "step = 2"))
    with pytest.raises(ConfigError, match=r"c.toml: claim 1: step must be a step number"):
        load_study(str(tmp_path / "s.toml"))


def sampled(a: list[float], b: list[float]) -> dict:
    """results() with the samples kept, as bench writes them."""
    r = results((sum(a) / len(a), min(a), max(a)), (sum(b) / len(b), min(b), max(b)))
    for name, values in (("a", a), ("b", b)):
        r["means"]["mb_s"][name] |= {"values": values, "n": len(values)}
    return r


def test_an_order_on_the_samples_asks_the_ratio_interval_not_two_intervals_apart() -> None:
    # Means 13.1 and 12.8: each mean's own interval overlaps the other's, yet the
    # interval of their ratio lies wholly on one side.
    a, b = [13.0, 13.2, 13.1, 12.9, 13.3], [12.7, 12.9, 12.8, 12.6, 13.0]
    v = judge(one(ORDER), sampled(a, b))
    assert v.verdict == AGREE, v
    assert "b costs +2.3% [" in v.measured and "above 0" in v.why
    assert judge(one(ORDER), sampled(b, a)).verdict == DISAGREE
    r = sampled(a, b)
    r["higher_is_better"]["mb_s"] = False  # a latency: the smaller wins
    assert judge(one(ORDER), r).verdict == DISAGREE


def test_an_order_from_a_blocked_step_pairs_the_rounds() -> None:
    # Round k moved both targets alike (0.8 to 1.2 of their speed): a is 3% faster in
    # every round. Taken as independent the spread hides it; paired it is plain.
    speed = [1.0, 0.8, 1.2, 0.9, 1.1, 0.85]
    a = [13.0 * k for k in speed]
    b = [13.0 * k / 1.03 for k in speed]
    unblocked = judge(one(ORDER), sampled(a, b))
    assert unblocked.verdict == NOT_COMPARABLE, unblocked
    r = sampled(a, b)
    r["blocked"] = True
    for name in ("a", "b"):
        r["means"]["mb_s"][name]["reps"] = [1, 2, 3, 4, 5, 6]
    blocked = judge(one(ORDER), r)
    assert blocked.verdict == AGREE and "b costs +2.9% [+2.9%, +2.9%]" in blocked.measured, blocked
    # The pairs are the repetitions both have: b's round 6 lost, a's round 6 unpaired.
    r["means"]["mb_s"]["b"] |= {"values": b[:5], "reps": [1, 2, 3, 4, 5]}
    assert judge(one(ORDER), r).verdict == AGREE


def test_an_order_within_the_alike_margin_is_a_disagreement_and_a_wide_one_says_what_decides(
) -> None:
    claim = one(ORDER + "alike_pct = 5\n")
    alike = judge(claim, sampled([10.0, 10.2, 9.9, 10.1, 10.0, 9.8], [10.1, 9.9, 10.0, 10.2, 9.8, 10.0]))
    assert alike.verdict == DISAGREE and "alike" in alike.why and "+-5%" in alike.why
    # Without the margin the same samples cannot be judged: no difference detectable.
    plain = judge(one(ORDER), sampled([10.0, 10.2, 9.9, 10.1, 10.0, 9.8],
                                      [10.1, 9.9, 10.0, 10.2, 9.8, 10.0]))
    assert plain.verdict == NOT_COMPARABLE and "holds 0" in plain.why
    wide = judge(claim, sampled([10.0, 13.0, 8.0, 11.0], [9.0, 12.0, 7.0, 9.5]))
    assert wide.verdict == NOT_COMPARABLE and "repetitions a target would decide it" in wide.why


def test_the_repetitions_that_decide_a_claim_narrow_its_interval_past_the_bound() -> None:
    from framework.study.claims import reps_to_decide

    assert reps_to_decide(4, -1.0, 3.0, (0.0,)) == 17  # half 2, 1 from the bound: past 4 x 2^2
    # Centre 2, half width 4: clearing 0 takes more than 10 x (4/2)^2 = 40, staying within
    # +-5% (clearing 5; -5 is cleared already) more than 10 x (4/3)^2: the fewer counts.
    assert reps_to_decide(10, -2.0, 6.0, (0.0,)) == 41
    assert reps_to_decide(10, -2.0, 6.0, (0.0,), (-5.0, 5.0)) == math.floor(10 * (4 / 3) ** 2) + 1
    assert reps_to_decide(10, -6.0, 6.0, (0.0,)) is None  # centred on the bound: no count
    assert reps_to_decide(None, -1.0, 3.0, (0.0,)) is None
    for n, low, high, bound in [(5, -1.0, 4.0, 0.0), (3, 2.0, 30.0, 10.0), (8, -9.0, -2.0, -5.0)]:
        need = reps_to_decide(n, low, high, (bound,))
        centre, half = (low + high) / 2, (high - low) / 2 * math.sqrt(n / need)
        assert not centre - half <= bound <= centre + half  # cleared at that count
        half_before = (high - low) / 2 * math.sqrt(n / (need - 1))
        assert need == n + 1 or centre - half_before <= bound <= centre + half_before
