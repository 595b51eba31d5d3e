"""Divergence from the baseline, decode speed and the derived numbers of one case."""

from __future__ import annotations

import pytest

from specsuite.measure.outcome import (
    Completion,
    RequestOutcome,
    Speed,
    abba,
    decode_tps,
    divergence,
    first_diff,
    identical_fraction,
    request_body,
    run_prompts,
    spec_result_line,
    usage_problem,
)
from specsuite.results.record import CaseRecord
from specsuite.server.metrics import Delta


def _c(pid: str, tokens: list[int], n: int = 128, ms: float = 1000.0) -> Completion:
    return Completion(pid, tuple(tokens), n, ms)


def test_first_diff() -> None:
    assert first_diff([1, 2, 3], [1, 2, 3]) is None
    assert first_diff([1, 2, 3], [1, 9, 3]) == 1
    assert first_diff([1, 2, 3], [1, 2]) == 2  # truncated output is not "equal" (Spec-Bench's zip bug)
    assert first_diff([], []) is None


def test_divergence_per_prompt_and_fractions() -> None:
    base = [_c("fib", [1, 2, 3, 4]), _c("tcp", [5, 6, 7, 8]), _c("paris", [9, 9])]
    spec = [_c("fib", [1, 2, 3, 4]), _c("tcp", [5, 6, 0, 8]), _c("paris", [9, 9])]
    divs = divergence(base, spec)
    assert [(d.id, d.identical, d.first_diff) for d in divs] == [
        ("fib", True, None),
        ("tcp", False, 2),
        ("paris", True, None),
    ]
    assert divs[1].prefix_fraction == 0.5
    assert identical_fraction(divs) == pytest.approx(2 / 3)
    assert identical_fraction([]) is None


def test_decode_tps_from_server_timings() -> None:
    assert decode_tps([_c("a", [], 100, 1000.0), _c("b", [], 300, 1000.0)]) == 200.0
    assert decode_tps([_c("a", [], 0, 0.0)]) is None


def test_outcome_numbers_and_result_line() -> None:
    comps = [_c("fib", [1, 2], 120, 1000.0)]
    out = RequestOutcome(
        Delta(90, 60, 30, (25, 20, 15)), comps, divergence(comps, comps), Speed([120.0], [60.0])
    )
    n = out.numbers()
    assert (n["accept_rate"], n["accept_len"], n["speedup"]) == (0.6667, 3.0, 2.0)
    assert n["per_position_rate"] == [0.8333, 0.6667, 0.5] and n["pos0_rate"] == 0.8333
    assert (n["decode_tps"], n["baseline_decode_tps"]) == (120.0, 60.0)
    assert n["identical_fraction"] == 1.0
    rec = CaseRecord(name="x")
    out.fill(rec)
    line = spec_result_line(rec)
    assert line == (
        "SPEC_RESULT x: drafted=90 accepted=60 steps=30 accept_rate=0.6667 accept_len=3.0000 speedup=2.000"
    )


def test_requests_are_greedy_seeded_uncached() -> None:
    body = request_body("hi", 64)
    assert body == {
        "prompt": "hi",
        "temperature": 0,
        "top_k": 1,
        "seed": 42,
        "n_predict": 64,
        "cache_prompt": False,
        "return_tokens": True,
    }


def test_run_prompts_reads_timings_and_tokens() -> None:
    sent = []

    def post(path: str, body: dict) -> dict:  # the server's reply shape (server-common.cpp to_json)
        sent.append((path, body["prompt"]))
        return {
            "tokens": [7, 8],
            "timings": {"predicted_n": 2, "predicted_ms": 10.0, "draft_n": 4, "draft_n_accepted": 3},
        }

    prompts = (("fox", "Hello world"), ("count", "1 2 3"))
    comps = run_prompts(post, prompts, 16)
    assert sent == [("/completion", "Hello world"), ("/completion", "1 2 3")]
    assert comps[0] == Completion("fox", (7, 8), 2, 10.0, 4, 3)


def test_abba_rounds_alternate_which_side_goes_first() -> None:
    assert abba(1) == [("base", "spec")]
    assert abba(4) == [("base", "spec"), ("spec", "base"), ("base", "spec"), ("spec", "base")]


def test_speed_pairs_rounds_and_reports_median_and_spread() -> None:
    sp = Speed(spec_tps=[30.0, 20.0, 33.0], base_tps=[10.0, 10.0, 11.0])
    d = sp.as_dict()
    assert d["speedups"] == [3.0, 2.0, 3.0] and d["speedup_median"] == 3.0 and d["speedup_spread"] == 1.0
    assert Speed().as_dict()["speedup_median"] is None


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"usage": {"completion_tokens": 16}, "timings": {"predicted_n": 16}}, None),
        ({"usage": {"completion_tokens": 0}, "timings": {"predicted_n": 16}}, "is 0"),
        ({"timings": {"predicted_n": 16}}, "is None"),
        ({"usage": {"completion_tokens": 15}, "timings": {"predicted_n": 16}}, "= 15 but"),
        ({"usage": None, "timings": {"predicted_n": 0}}, None),  # nothing produced: nothing to check
    ],
)
def test_usage_problem(body, problem) -> None:
    got = usage_problem(body)
    assert (got is None) if problem is None else (problem in got)


def test_no_per_position_block_gives_no_rates_and_a_warning() -> None:
    d = Delta(12, 9, 4, (), per_position_exported=False)
    assert d.sanity_errors() == [] and "exports no" in d.warnings()[0]
    n = RequestOutcome(d, [], []).numbers()
    assert n["per_position_rate"] == [] and n["pos0_rate"] is None


A, B = Delta(90, 60, 30, (25, 20, 15)), Delta(90, 61, 30, (25, 21, 15))


@pytest.mark.parametrize(
    ("rounds", "nondeterministic"),
    [
        ([A, A, A, A], False),
        ([A], False),
        ([A, B], True),  # two rounds that disagree
        ([A, A, B, A], True),
        ([A, B, B, B], False),  # the first round differs, the later ones agree: a method that learns
        ([B, A, A], False),
    ],
)
def test_rounds_that_disagree_are_nondeterministic(rounds: list[Delta], nondeterministic: bool) -> None:
    out = RequestOutcome(rounds[0], [], rounds=rounds)
    assert out.nondeterministic is nondeterministic
    rec = CaseRecord(name="c")
    out.fill(rec)
    assert rec.nondeterministic is nondeterministic
    assert [(c.drafted, c.accepted, c.drafts, c.per_position) for c in rec.rounds] == [
        (d.drafted, d.accepted, d.drafts, list(d.per_position)) for d in rounds
    ]
    assert rec.accepted == rounds[0].accepted  # the first round is the one reported
