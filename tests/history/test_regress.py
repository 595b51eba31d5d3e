"""The relative regression gate on hand-made case records, and its Mann–Whitney U test."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import pytest

from specsuite.common.errors import UserError
from specsuite.history import regress
from specsuite.history.regress import mann_whitney_less
from specsuite.history.regress import regressions as _regressions
from specsuite.results.record import decode_record

BASE = {"accept_rate": 0.6301, "accept_len": 3.2, "pos0_rate": 0.81, "status": "passed", "reason": None}
AT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"


def _with(record: dict, **changes) -> dict:
    return {**record, **changes}


def _speed(samples: list[float]) -> dict:
    return {"speed": {"repeat": len(samples), "speedups": samples}}


def regressions(current: dict, baseline: dict, **kw):
    """The gate on two records written as they are stored (decoded as the history decodes them)."""
    return _regressions(decode_record("c", current), decode_record("c", baseline), **kw)


def is_measured(record: dict) -> bool:
    return decode_record("c", record).measured


def test_the_message_names_metric_numbers_drop_baseline_and_rtol() -> None:
    [reg] = regressions(_with(BASE, accept_rate=0.5406), BASE, baseline_commit=AT)
    assert reg.message == "accept_rate 0.5406 is 14.2 % below 0.6301 at baseline 0c1e570 (rtol 5 %)"
    assert (reg.metric, reg.current, reg.baseline) == ("accept_rate", 0.5406, 0.6301)
    assert reg.change == pytest.approx((0.5406 - 0.6301) / 0.6301)


@pytest.mark.parametrize(
    "changes",
    [
        {"accept_rate": 0.6301 * 0.98},  # -2 %
        {"accept_len": 3.2 * 0.951, "pos0_rate": 0.81 * 0.99},  # -4.9 %, -1 %
        {"accept_rate": 0.6301 * 0.95},  # exactly rtol: not "more than rtol"
        {},
    ],
)
def test_noise_level_changes_pass(changes: dict) -> None:
    assert regressions(_with(BASE, **changes), BASE, baseline_commit=AT) == []


@pytest.mark.parametrize("metric", ["accept_rate", "accept_len", "pos0_rate"])
def test_a_real_drop_fails_on_each_metric(metric: str) -> None:
    current = _with(BASE, **{metric: BASE[metric] * 0.90})
    [reg] = regressions(current, BASE, baseline_commit=AT)
    assert reg.metric == metric and reg.change == pytest.approx(-0.10)
    assert "10.0 % below" in reg.message and "0c1e570" in reg.message
    # the same drop is noise under a looser tolerance
    assert regressions(current, BASE, rtol=0.15, baseline_commit=AT) == []


def test_improvements_never_fail() -> None:
    better = {"accept_rate": 0.99, "accept_len": 7.5, "pos0_rate": 1.0, **_speed([3.0, 3.1, 3.2, 3.3, 3.4])}
    worse = {**BASE, **_speed([1.0, 1.1, 1.2, 1.3, 1.4])}
    assert regressions(better, worse, baseline_commit=AT) == []
    assert len(regressions(worse, better, baseline_commit=AT)) == 4  # and the reverse fails every metric


@pytest.mark.parametrize("wrong", ["0.63", True])
def test_a_number_of_the_wrong_type_is_refused_when_read(wrong) -> None:
    """A stored record with a text or a boolean where a number belongs never reaches the gate."""
    with pytest.raises(UserError, match="case 'c': accept_rate must be"):
        decode_record("c", _with(BASE, accept_rate=wrong))


@pytest.mark.parametrize("missing", [math.nan, None, math.inf])
def test_a_lost_number_never_passes(missing) -> None:
    [reg] = regressions(_with(BASE, accept_rate=missing), BASE, baseline_commit=AT)
    assert reg.metric == "accept_rate" and reg.current is None and math.isnan(reg.change)
    assert "missing" in reg.message and "0.6301 at baseline 0c1e570" in reg.message
    absent = {k: v for k, v in BASE.items() if k != "accept_len"}
    assert [r.metric for r in regressions(absent, BASE, baseline_commit=AT)] == ["accept_len"]


def test_nothing_to_compare_is_skipped() -> None:
    both_null = _with(BASE, pos0_rate=None)
    assert regressions(both_null, both_null, baseline_commit=AT) == []
    # the baseline had no number: the current one cannot have dropped from it
    assert regressions(BASE, _with(BASE, accept_len=math.nan), baseline_commit=AT) == []
    # a zero baseline cannot drop, but losing the number still fails
    zero = _with(BASE, accept_rate=0.0)
    assert regressions(zero, zero, baseline_commit=AT) == []
    assert [r.metric for r in regressions(_with(zero, accept_rate=None), zero, baseline_commit=AT)] == [
        "accept_rate"
    ]


def test_pos0_falls_back_to_the_first_per_position_rate() -> None:
    base = {"accept_rate": 0.6, "per_position_rate": [0.8, 0.5]}
    current = {"accept_rate": 0.6, "per_position_rate": [0.6, 0.5]}
    [reg] = regressions(current, base, baseline_commit=AT)
    assert (reg.metric, reg.current, reg.baseline) == ("pos0_rate", 0.6, 0.8)
    assert [
        r.metric
        for r in regressions({"accept_rate": 0.6, "per_position_rate": [math.nan]}, base, baseline_commit=AT)
    ] == ["pos0_rate"]


def test_speed_noise_passes() -> None:
    base = _with(BASE, **_speed([1.50, 1.55, 1.48, 1.52, 1.53]))
    noisy = _with(BASE, **_speed([1.47, 1.54, 1.46, 1.51, 1.49]))  # overlapping, median -2 %
    assert regressions(noisy, base, baseline_commit=AT) == []


def test_a_significant_speed_drop_fails() -> None:
    base = _with(BASE, **_speed([1.50, 1.55, 1.48, 1.52, 1.53]))
    slow = _with(BASE, **_speed([1.20, 1.25, 1.22, 1.18, 1.21]))
    [reg] = regressions(slow, base, baseline_commit=AT)
    assert reg.metric == "speedup" and reg.current == 1.21 and reg.baseline == 1.52
    assert reg.change == pytest.approx((1.21 - 1.52) / 1.52)
    assert f"p = {1 / 252:.3g}" in reg.message and "n = 5/5" in reg.message and "0c1e570" in reg.message


def test_speed_needs_both_significance_and_size() -> None:
    base = _with(BASE, **_speed([1.50, 1.51, 1.52, 1.53, 1.54]))
    small = _with(BASE, **_speed([1.45, 1.46, 1.47, 1.48, 1.49]))  # significant (p = 1/252) but -3 %
    assert regressions(small, base, baseline_commit=AT) == []
    # -33 % but 3 samples a side: complete separation gives p = 1/20, not below 0.05
    three = _with(BASE, **_speed([1.0, 1.01, 1.02])), _with(BASE, **_speed([1.5, 1.51, 1.52]))
    assert regressions(*three, baseline_commit=AT) == []
    four = _with(BASE, **_speed([1.0, 1.01, 1.02, 1.03])), _with(BASE, **_speed([1.5, 1.51, 1.52, 1.53]))
    assert [r.metric for r in regressions(*four, baseline_commit=AT)] == ["speedup"]  # p = 1/70


def test_speed_is_gated_only_with_enough_samples_on_both_sides() -> None:
    base = _with(BASE, **_speed([1.5, 1.5, 1.5, 1.5]))
    assert regressions(_with(BASE, **_speed([0.5, 0.5])), base, baseline_commit=AT) == []
    assert regressions(_with(BASE, speed=None, speedup=0.5), base, baseline_commit=AT) == []
    assert (
        regressions(_with(BASE, **_speed([0.5] * 4)), _with(BASE, **_speed([1.5, 1.5])), baseline_commit=AT)
        == []
    )


def test_nan_speed_samples_never_pass() -> None:
    base = _with(BASE, **_speed([1.5, 1.5, 1.5, 1.5]))
    [reg] = regressions(_with(BASE, **_speed([1.6, math.nan, 1.6, 1.6])), base, baseline_commit=AT)
    assert reg.metric == "speedup" and reg.current is None and "null/NaN" in reg.message


def test_a_cases_own_speed_rtol_replaces_rtol_for_its_speedup_only() -> None:
    base = _with(BASE, **_speed([1.50, 1.51, 1.52, 1.53]))
    slower = _with(BASE, **_speed([1.38, 1.39, 1.40, 1.41]), accept_rate=0.58)  # speedup -8 %, rate -8 %
    assert [r.metric for r in regressions(slower, base, baseline_commit=AT)] == ["accept_rate", "speedup"]
    [reg] = regressions(slower, base, speed_rtol=0.1, baseline_commit=AT)
    assert reg.metric == "accept_rate"  # the acceptance keeps the run's rtol
    much = _with(BASE, **_speed([1.20, 1.21, 1.22, 1.23]))
    [reg] = regressions(much, base, speed_rtol=0.1, baseline_commit=AT)
    assert reg.metric == "speedup" and "rtol 10 %" in reg.message


def test_a_cases_own_decode_rtol_is_the_tolerance_of_its_decode_speed() -> None:
    """The speculative server's own tokens/s 20 % lower, its speedup as it was (a busier machine slowed both
    sides): a decode_tps regression at rtol 5 % and at speed_rtol 15 %, none at decode_rtol 35 %."""
    base = _with(BASE, speed={"repeat": 4, "speedups": [1.2] * 4, "spec_tps": [900.0, 905.0, 910.0, 915.0]})
    busy = _with(BASE, speed={"repeat": 4, "speedups": [1.2] * 4, "spec_tps": [720.0, 722.0, 724.0, 726.0]})
    assert [r.metric for r in regressions(busy, base, baseline_commit=AT)] == ["decode_tps"]
    assert [r.metric for r in regressions(busy, base, speed_rtol=0.15, baseline_commit=AT)] == ["decode_tps"]
    assert regressions(busy, base, speed_rtol=0.15, decode_rtol=0.35, baseline_commit=AT) == []


def _blocks(ratios: list[float], ms: float | None = None) -> dict:
    return {"blocks": {"ratios": ratios}, "block_ms": ms}


def test_a_significant_rise_in_per_block_overhead_fails_with_its_own_rtol() -> None:
    """Issue 25908's regression: acceptance and the speedup rounds as they were, each block twice as dear."""
    base = _with(BASE, **_blocks([3.40, 3.45, 3.50, 3.42], 4.1))
    dear = _with(BASE, **_blocks([6.9, 7.0, 6.8, 7.1], 8.3))
    [reg] = regressions(dear, base, baseline_commit=AT)
    assert reg.metric == "block_ratio" and reg.current == 6.95 and reg.baseline == 3.435
    assert "block_ratio median 6.950 is 102.3 % above 3.435 at baseline 0c1e570" in reg.message
    assert "block time 4.1 -> 8.3 ms per block" in reg.message and "block rtol 20 %" in reg.message
    # what the first lines say: the block's milliseconds a reader knows, the ratio's change, the rounds
    assert reg.line == "block cost 4.10 -> 8.30 ms per block, +102.3 % in plain decode steps, 4 rounds vs 4"
    assert f"p = {1 / 70:.3g}" in reg.message
    half = _with(BASE, **_blocks([5.1, 5.2, 5.15, 5.12]))  # +50 %: caught at 20 %, within a 60 % tolerance
    assert [r.metric for r in regressions(half, base, baseline_commit=AT)] == ["block_ratio"]
    assert regressions(half, base, block_rtol=0.6, baseline_commit=AT) == []
    assert regressions(base, dear, baseline_commit=AT) == []  # cheaper blocks never fail


def test_per_block_overhead_needs_significance_size_and_rounds() -> None:
    base = _with(BASE, **_blocks([3.40, 3.45, 3.50, 3.42]))
    mixed = _with(BASE, **_blocks([3.3, 9.0, 3.5, 9.1]))  # median 6.25 (+82 %) but not significant
    assert regressions(mixed, base, baseline_commit=AT) == []
    small = _with(BASE, **_blocks([3.8, 3.85, 3.9, 3.95]))  # significant, +12 %: below the 20 % rtol
    assert regressions(small, base, baseline_commit=AT) == []
    three = _with(BASE, **_blocks([9.0, 9.1, 9.2])), _with(BASE, **_blocks([3.4, 3.45, 3.5]))
    assert regressions(*three, baseline_commit=AT) == []  # 3 rounds a side: p cannot go below 0.05
    undrafted = _with(BASE, **_blocks([None, None, None, None]))  # nothing drafted: no block to cost
    assert regressions(undrafted, base, baseline_commit=AT) == []


def test_an_implausible_speed_on_either_side_is_not_compared() -> None:
    base = _with(BASE, **_speed([1.50, 1.55, 1.48, 1.52]), **_blocks([3.4, 3.4, 3.4, 3.4]))
    worse = _with(BASE, **_speed([0.7, 0.7, 0.7, 0.7]), **_blocks([7.0, 7.0, 7.0, 7.0]))
    assert [r.metric for r in regressions(worse, base, baseline_commit=AT)] == ["speedup", "block_ratio"]
    wrong = "implausible_speed: speedup 2150 ..."
    assert regressions(_with(worse, implausible_speed=wrong), base, baseline_commit=AT) == []
    assert regressions(worse, _with(base, implausible_speed=wrong), baseline_commit=AT) == []


def test_a_slowdown_of_both_sides_fails_on_the_absolute_decode_speed() -> None:
    """A commit (or a build option) that slows speculative and plain decoding alike keeps the speedup: the
    speculative server's own tokens/s, gated by the same rule, sees it."""
    base = {**BASE, "speed": {"repeat": 5, "speedups": [1.5] * 5, "spec_tps": [150.0, 151, 149, 152, 150]}}
    both = {**BASE, "speed": {"repeat": 5, "speedups": [1.5] * 5, "spec_tps": [100.0, 101, 99, 102, 100]}}
    [reg] = regressions(both, base, baseline_commit=AT)
    assert reg.metric == "decode_tps" and reg.current == 100.0 and reg.baseline == 150.0
    assert reg.message.startswith("decode_tps median 100.000 is 33.3 % below 150.000 at baseline 0c1e570")
    noisy = {**BASE, "speed": {"repeat": 5, "speedups": [1.5] * 5, "spec_tps": [147.0, 152, 146, 151, 149]}}
    assert regressions(noisy, base, baseline_commit=AT) == []


def test_rtol_must_be_a_fraction() -> None:
    with pytest.raises(UserError, match="rtol 5 is not a fraction"):
        regressions(BASE, BASE, rtol=5, baseline_commit=AT)
    with pytest.raises(UserError, match=r"block rtol 1\.5 is not a fraction"):
        regressions(BASE, BASE, block_rtol=1.5, baseline_commit=AT)


def test_is_measured() -> None:
    assert is_measured(BASE)
    assert is_measured(_with(BASE, status="failed", reason="floor"))
    assert is_measured(_with(BASE, status="failed", reason="regressed"))
    assert not is_measured(_with(BASE, status="failed", reason="diverged"))
    assert not is_measured(_with(BASE, status="skipped", reason="binary_no_mtp"))
    assert not is_measured(_with(BASE, status="error", reason="crashed"))
    assert not is_measured(_with(BASE, accept_rate=None))


# --- Mann–Whitney ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "y", "p"),
    [
        ([1, 2, 3], [4, 5, 6], Fraction(1, 20)),  # complete separation: 1 of C(6,3) arrangements
        ([1, 2, 3, 4], [5, 6, 7, 8], Fraction(1, 70)),  # 1 of C(8,4)
        ([1, 2, 3, 5], [4, 6, 7, 8], Fraction(2, 70)),  # U = 1: two arrangements with U <= 1
        ([1, 2, 3, 4, 9], [5, 6, 7, 8, 10], Fraction(12, 252)),  # U = 4: the n=m=5 table's 0.0476
        ([4, 5, 6], [1, 2, 3], Fraction(1)),  # x above y: no evidence at all
        ([2, 2, 2], [2, 2, 2], Fraction(1)),  # all tied
        ([1, 2, 2, 3], [2, 3, 3, 4], Fraction(10, 70)),  # ties: scipy's method='exact' says 0.100
    ],
)
def test_mann_whitney_known_values(x: list[float], y: list[float], p: Fraction) -> None:
    assert mann_whitney_less(x, y) == pytest.approx(float(p), abs=1e-12)


def _brute_force_p(x: list[float], y: list[float]) -> Fraction:
    """Independent check: enumerate every split of the pooled values and count pairs, not ranks."""

    def u(a: tuple[float, ...], b: list[float]) -> Fraction:
        return sum(
            (Fraction(1) if i > j else Fraction(1, 2) if i == j else Fraction(0) for i in a for j in b),
            Fraction(0),
        )

    pooled, n = [*x, *y], len(x)
    u_obs = u(tuple(x), y)
    splits = list(itertools.combinations(range(len(pooled)), n))
    hits = 0
    for idx in splits:
        a = tuple(pooled[i] for i in idx)
        b = [pooled[i] for i in range(len(pooled)) if i not in idx]
        hits += u(a, b) <= u_obs
    return Fraction(hits, len(splits))


@pytest.mark.parametrize("seed", range(8))
def test_mann_whitney_matches_brute_force_with_ties(seed: int) -> None:
    rng = random.Random(seed)
    n, m = rng.randint(3, 6), rng.randint(3, 6)
    x = [rng.choice([1.0, 1.1, 1.2, 1.3, 1.4]) for _ in range(n)]  # few values: many ties
    y = [rng.choice([1.1, 1.2, 1.3, 1.4, 1.5]) for _ in range(m)]
    assert mann_whitney_less(x, y) == pytest.approx(float(_brute_force_p(x, y)), abs=1e-12)


def test_normal_approximation_agrees_with_the_exact_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    x = [rng.gauss(1.0, 0.1) for _ in range(20)]
    y = [rng.gauss(1.05, 0.1) for _ in range(20)]
    exact = mann_whitney_less(x, y)
    monkeypatch.setattr(regress, "EXACT_MAX_N", 0)  # the same samples through the large-sample path
    approx = mann_whitney_less(x, y)
    assert 0.001 < exact < 0.999 and approx == pytest.approx(exact, abs=0.005)


# --- the counters, exactly -------------------------------------------------------------------------------

COUNTED = {**BASE, "drafted": 111, "accepted": 53, "drafts": 38, "per_position": [34, 18, 1]}


def counters(current: dict, baseline: dict) -> str:
    return regress.counter_changes(decode_record("c", current), decode_record("c", baseline))


def test_identical_counters() -> None:
    assert counters(COUNTED, COUNTED) == "identical"


def test_a_change_of_one_token_is_named_with_its_position() -> None:
    # accept rate 53/111 -> 52/111: -1.9 %, far inside rtol, and still said exactly
    worse = _with(COUNTED, accepted=52, per_position=[34, 17, 1])
    assert counters(worse, COUNTED) == "accepted 53 → 52 (−1); position 1: 18 → 17 (−1)"
    assert regressions(_with(worse, accept_rate=52 / 111), _with(COUNTED, accept_rate=53 / 111),
                       baseline_commit=AT) == []  # fmt: skip
    longer = _with(COUNTED, drafted=114, drafts=39, per_position=[34, 18, 1, 0])
    assert counters(longer, COUNTED) == "drafted 111 → 114 (+3); drafts 38 → 39 (+1)"


def test_counters_not_compared() -> None:
    assert counters(_with(COUNTED, nondeterministic=True), COUNTED) == "nondeterministic"
    assert counters(COUNTED, _with(COUNTED, nondeterministic=True)) == "nondeterministic"
    assert counters(_with(COUNTED, accepted=None), COUNTED) == "not recorded"
    # a binary without the per-position block: the totals are still compared
    assert counters(_with(COUNTED, per_position=[]), COUNTED) == "identical"


# --- per prompt category ---------------------------------------------------------------------------------

WORDS = {"drafted": 54, "accepted": 43, "drafts": 19, "per_position": [16, 15, 12], "accept_rate": 0.7963,
         "accept_len": 3.2632}  # fmt: skip
DIGITS = {"drafted": 23, "accepted": 23, "drafts": 8, "per_position": [8, 8, 7], "accept_rate": 1.0,
          "accept_len": 3.875}  # fmt: skip
CATEGORISED = {**COUNTED, "categories": {"words": WORDS, "digits": DIGITS}}


def test_each_categorys_counters_are_compared_exactly() -> None:
    assert counters(CATEGORISED, CATEGORISED) == "identical"
    moved = {"words": {**WORDS, "accepted": 42, "per_position": [16, 14, 12]}, "digits": DIGITS}
    assert counters(_with(CATEGORISED, categories=moved), CATEGORISED) == (
        "category words: accepted 43 → 42 (−1), position 1: 15 → 14 (−1)"
    )
    assert counters(_with(CATEGORISED, categories={"words": WORDS}), CATEGORISED) == "category digits: gone"


def test_a_category_that_drops_beyond_rtol_regresses_while_the_total_holds() -> None:
    """One category's loss hidden in the case's total (another's gain) is still a regression."""
    worse = {"words": {**WORDS, "accept_rate": 0.70}, "digits": DIGITS}
    [reg] = regressions(_with(CATEGORISED, categories=worse), CATEGORISED, baseline_commit=AT)
    assert reg.metric == "words/accept_rate" and reg.current == 0.70
    assert reg.message.startswith("category 'words': accept_rate 0.7000, 12.1 % below 0.7963 at baseline")
    gone = regressions(_with(CATEGORISED, categories={"digits": DIGITS}), CATEGORISED, baseline_commit=AT)
    assert {r.metric for r in gone} == {"words/accept_rate", "words/accept_len"}
    assert "accept_rate missing here but 0.7963 at baseline" in gone[0].message
    within = {"words": {**WORDS, "accept_rate": 0.78}, "digits": DIGITS}  # -2.0 %: inside rtol 5 %
    assert regressions(_with(CATEGORISED, categories=within), CATEGORISED, baseline_commit=AT) == []
