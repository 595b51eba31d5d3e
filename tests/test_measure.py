"""Divergence from the baseline, decode speed and the derived numbers of one case."""

from __future__ import annotations

import pytest

from specsuite.measure import (
    PROMPT_SETS,
    Completion,
    Outcome,
    decode_tps,
    divergence,
    first_diff,
    identical_fraction,
    request_body,
    run_prompts,
    spec_result_line,
)
from specsuite.metrics import Delta


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
    out = Outcome(Delta(90, 60, 30, (25, 20, 15)), comps, divergence(comps, comps), baseline_decode_tps=60.0)
    n = out.numbers()
    assert (n["accept_rate"], n["accept_len"], n["speedup"]) == (0.6667, 3.0, 2.0)
    assert n["per_position_rate"] == [0.8333, 0.6667, 0.5]
    assert n["identical_fraction"] == 1.0
    line = spec_result_line("x", n)
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
    assert [p for p, _ in PROMPT_SETS["seed"]] == ["fib", "tcp", "paris"]


def test_run_prompts_reads_timings_and_tokens() -> None:
    sent = []

    def post(path: str, body: dict) -> dict:  # the server's reply shape (server-common.cpp to_json)
        sent.append((path, body["prompt"]))
        return {
            "tokens": [7, 8],
            "timings": {"predicted_n": 2, "predicted_ms": 10.0, "draft_n": 4, "draft_n_accepted": 3},
        }

    comps = run_prompts(post, "synthetic", 16)
    assert [s[1] for s in sent] == [t for _, t in PROMPT_SETS["synthetic"]]
    assert comps[0] == Completion("fox", (7, 8), 2, 10.0, 4, 3)
