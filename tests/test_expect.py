"""Floors, sanity, self-tests: each failure names the number and the bound it missed."""

from __future__ import annotations

from casetext import HEAD

from specsuite.cases import parse_cases
from specsuite.expect import check
from specsuite.measure import Completion

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


def _n(drafted=90, accepted=60, drafts=30, pos=(30, 20, 10), ident=1.0):
    return {
        "drafted": drafted,
        "accepted": accepted,
        "drafts": drafts,
        "per_position": list(pos),
        "accept_rate": accepted / drafted if drafted else None,
        "accept_len": 1 + accepted / drafts if drafts else None,
        "identical_fraction": ident,
        "prompts": [{"id": "fib", "identical": ident == 1.0, "first_diff": None if ident == 1.0 else 54}],
    }


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


def test_expect_no_drafts_and_log() -> None:
    c = parse_cases(
        CASE.replace("min_accept_rate = 0.5\nmin_accept_len = 2.0\n", "expect_no_drafts = true\n")
    )[0]
    assert check(c, _n(0, 0, 0, ()), OK, [], "") == []
    assert _reasons(check(c, _n(), OK, [], "")) == ["self_test"]
    c = _case('expect_log = ["clamping to 7"]\n')
    assert _reasons(check(c, _n(), OK, [], "W requested draft size ... clamping to 6")) == ["log"]
    assert check(c, _n(), OK, [], "W requested draft size ... clamping to 7") == []
