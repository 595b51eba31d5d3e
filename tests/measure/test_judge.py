"""Floors, sanity, self-tests: each failure names the number and the bound it missed."""

from __future__ import annotations

import math

import msgspec
import pytest
from casetext import HEAD

from specsuite.cases.schema import CASE_TIERS, GPU_TIERS, load_cases, parse_cases
from specsuite.measure.judge import check
from specsuite.measure.outcome import Completion
from specsuite.results.record import CaseRecord, CategoryStats

CASE = (
    HEAD
    + """[[case]]
name = "c"
tier = "smoke"
spec_type = "draft-simple"
target = "t.gguf"
n_max = 3
min_accept_rate = 0.5
min_accept_len = 2.0
"""
)
OK = [Completion("fib", (1, 2, 3), 3, 10.0)]


def _case(extra: str = ""):
    return parse_cases(CASE + extra)[0]


def _numbers(drafted=90, accepted=60, drafts=30, pos=(30, 20, 10), ident=1.0) -> dict:
    return {
        "name": "c",
        "drafted": drafted,
        "accepted": accepted,
        "drafts": drafts,
        "per_position": list(pos),
        "per_position_rate": [c / drafts for c in pos] if drafts else [],
        "accept_rate": accepted / drafted if drafted else None,
        "accept_len": 1 + accepted / drafts if drafts else None,
        "identical_fraction": ident,
        "prompts": [{"id": "fib", "identical": ident == 1.0, "first_diff": None if ident == 1.0 else 54}],
    }


def _n(*args, **kwargs) -> CaseRecord:
    """The typed record the judgement reads, as the runner fills it."""
    return msgspec.convert(_numbers(*args, **kwargs), CaseRecord)


def _reasons(fails):
    return [f.reason for f in fails]


def test_pass_and_one_sided_floors() -> None:
    assert check(_case(), _n(), OK, [], "") == []
    assert check(_case(), _n(accepted=90, pos=(30, 30, 30)), OK, [], "") == []  # better never fails


def test_floor_failure_carries_numbers() -> None:
    fails = check(_case(), _n(accepted=24, pos=(20, 4, 0)), OK, [], "")
    assert _reasons(fails) == ["floor", "floor"]
    assert fails[0].message == "accept_rate 0.2667 < floor 0.5000 (accepted=24 / drafted=90)"
    assert fails[1].message == "accept_len 1.8000 < floor 2.0000 (1 + accepted=24 / steps=30)"
    assert check(_case(), _n(accepted=30, pos=(20, 10, 0)), OK, [], "")[0].message.startswith("accept_rate")


def test_no_drafting_reason_from_log() -> None:
    fails = check(_case(), _n(0, 0, 0, ()), OK, [], "")
    assert _reasons(fails) == ["spec_inactive"]
    log = "E srv  load_model: failed to initialize speculative decoding context\n"
    assert _reasons(check(_case(), _n(0, 0, 0, ()), OK, [], log)) == ["spec_init_failed"]


def test_empty_tokens_and_sanity() -> None:
    fails = check(_case(), _n(), [Completion("fib", (), 0, 0.0)], ["accepted 5 > drafted 4"], "")
    assert _reasons(fails) == ["no_tokens", "sanity"]


def test_identical_fraction_floor() -> None:
    fails = check(_case("min_identical_fraction = 1.0\n"), _n(ident=0.6667), OK, [], "")
    assert _reasons(fails) == ["diverged"]
    assert "fib@54" in fails[0].message


def test_self_tests() -> None:
    c = _case("expect_accepted = 0\n")
    assert "accepted=60, expected exactly 0" in check(c, _n(), OK, [], "")[0].message
    c = _case("expect_all_accepted = true\n")
    assert _reasons(check(c, _n(), OK, [], "")) == ["self_test"]
    assert check(c, _n(accepted=90, pos=(30, 30, 30)), OK, [], "") == []
    c = _case("expect_accept_len = 3.0\naccept_len_tolerance = 0.1\n")
    assert check(c, _n(), OK, [], "") == []
    assert "not within 3.0 ± 0.1" in check(c, _n(accepted=54, pos=(30, 20, 4)), OK, [], "")[-1].message
    c = _case("expect_draft_len = 3\n")
    assert check(c, _n(), OK, [], "") == []
    assert _reasons(check(c, _n(accepted=50, pos=(30, 20, 0)), OK, [], "")) == ["self_test"]
    c = _case("expect_full_positions = true\n")
    assert check(c, _n(accepted=90, pos=(30, 30, 30)), OK, [], "") == []
    assert _reasons(check(c, _n(), OK, [], "")) == ["self_test"]


def test_exact_counters_name_each_miss() -> None:
    c = _case("expect_drafted = 90\nexpect_accepted = 60\nexpect_drafts = 30\n")
    assert check(c, _n(), OK, [], "") == []
    fails = check(c, _n(drafted=91, drafts=29), OK, [], "")
    assert [f.message for f in fails] == ["drafted=91, expected exactly 90", "steps=29, expected exactly 30"]
    assert _reasons(fails) == ["self_test", "self_test"]


def test_expect_no_drafts_and_log() -> None:
    c = parse_cases(
        CASE.replace("min_accept_rate = 0.5\nmin_accept_len = 2.0\n", "expect_no_drafts = true\n")
    )[0]
    assert check(c, _n(0, 0, 0, ()), OK, [], "") == []
    assert _reasons(check(c, _n(), OK, [], "")) == ["self_test"]
    c = _case('expect_log = ["clamping to 7"]\n')
    assert _reasons(check(c, _n(), OK, [], "W requested draft size ... clamping to 6")) == ["log"]
    assert check(c, _n(), OK, [], "W requested draft size ... clamping to 7") == []


def _timed(up: float | None, rounds: tuple[float, ...] = (), **counters) -> CaseRecord:
    """Recorded numbers with a median speedup ``up`` over ``rounds`` (the per-round ratios)."""
    return msgspec.convert(
        {**_numbers(**counters), "speedup": up, "speed": {"speedups": list(rounds)}}, CaseRecord
    )


def test_min_speedup_on_recorded_results() -> None:
    c = _case("min_speedup = 1.0\n")
    assert check(c, _timed(1.05, (1.02, 1.05, 1.1)), OK, [], "") == []
    assert check(c, _timed(1.0, (1.0,)), OK, [], "") == []  # the floor itself passes
    fails = check(c, _timed(0.95, (0.9, 0.95, 1.01)), OK, [], "")
    assert _reasons(fails) == ["speed"]
    assert fails[0].message.startswith(
        "speedup 0.950 < floor 1.000 (median of 3 round(s): [0.900, 0.950, 1.010]"
    )


@pytest.mark.parametrize("up", [None, math.nan, math.inf])
def test_min_speedup_without_a_finite_speedup_never_passes(up) -> None:
    fails = check(_case("min_speedup = 1.0\n"), _timed(up), OK, [], "")
    assert _reasons(fails) == ["speed"] and "no speedup measured" in fails[0].message


def test_uncalibrated_case_keeps_its_identical_output_rule() -> None:
    """Greedy output identical to plain decoding is a product rule, not a measured floor: it holds before
    calibration (the 13 greedy GPU cases on quantised targets gate it from their first run)."""
    c = _case("uncalibrated = true\nmin_identical_fraction = 1.0\n")
    assert check(c, _n(accepted=9, pos=(9, 0, 0)), OK, [], "") == []  # a low rate: report-only
    [fail] = check(c, _n(ident=0.6667), OK, [], "")
    assert (fail.reason, fail.message) == (
        "diverged",
        "identical_fraction 0.6667 < floor 1.0 (first differing token per prompt: fib@54)",
    )


def test_uncalibrated_case_keeps_its_speed_floor_only() -> None:
    """Acceptance floors are report-only until calibrated; a named min_speedup is a product rule and holds."""
    c = _case("uncalibrated = true\nmin_speedup = 1.0\n")
    assert check(c, _timed(1.05, (1.05,), accepted=9, pos=(9, 0, 0)), OK, [], "") == []
    assert _reasons(check(c, _timed(0.95, (0.95,)), OK, [], "")) == ["speed"]
    assert _reasons(check(c, _timed(None), OK, [], "")) == ["speed"]
    assert check(_case("uncalibrated = true\n"), _timed(0.5, (0.5,)), OK, [], "") == []  # none named


def test_speed_floor_is_a_gpu_tier_rule_in_cases_toml() -> None:
    """Speculation must not be slower on a GPU: every compact and nightly case names min_speedup >= 1.0;
    smoke and synthetic speeds are CPU noise and name none. A self-draft (draft = target) is a check of the
    verifier, slower than plain decoding by construction: it names none; nor does a concurrency sweep's
    member, where speculation is expected to stop paying at some np (its speed rule is the crossover:
    docs/concurrency.md)."""
    cases = load_cases()
    assert {c.tier for c in cases} == set(CASE_TIERS)
    gpu = [c for c in cases if c.tier in GPU_TIERS and c.draft != c.target and c.sweep_name is None]
    assert gpu and [c.name for c in gpu if c.min_speedup is None or c.min_speedup < 1.0] == []
    assert [c.name for c in cases if c.tier not in GPU_TIERS and c.min_speedup is not None] == []


def test_category_floors_judge_each_category_on_its_own_counters() -> None:
    text = (CASE.replace('target = "t.gguf"', 'target = "t.gguf"\nprompts = "cat"')
            + "category_floors = { a = { min_accept_rate = 0.85 }, b = { min_accept_len = 2.0 } }\n"
            + '[[prompt_set]]\nname = "cat"\nprompts = [{ id = "p", text = "1", category = "a" }, '
              '{ id = "q", text = "2", category = "b" }]\n')  # fmt: skip
    case = parse_cases(text)[0]
    n = _n()

    def stats(*args: int, **kwargs: int) -> CategoryStats:
        counts = {k: v for k, v in _numbers(*args, **kwargs).items() if k not in ("name", "prompts")}
        return msgspec.convert(counts, CategoryStats)

    n.categories = {"a": stats(drafted=45, accepted=40, drafts=15), "b": stats(45, 20, 15)}
    assert check(case, n, OK, [], "") == []
    n.categories["a"] = stats(drafted=45, accepted=30, drafts=15)  # 0.667 < 0.85; the case's total holds
    [fail] = check(case, n, OK, [], "")
    assert fail.reason == "floor" and fail.message.startswith("category 'a': accept_rate 0.666")
    assert "accepted=30 drafted=45 steps=15" in fail.message
    del n.categories["b"]
    assert (
        "category 'b' has floors but the run measured no such category"
        in check(case, n, OK, [], "")[1].message
    )
    report_only = parse_cases(
        text.replace("min_accept_len = 2.0\n", "min_accept_len = 2.0\nuncalibrated = true\n", 1)
    )
    assert check(report_only[0], n, OK, [], "") == []
