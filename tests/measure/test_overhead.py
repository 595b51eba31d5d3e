"""Per-block overhead (suite.overhead) and the physical bound on a speedup (suite.plausible), from the
numbers a round measures: the server's timings and the drafts counter."""

from __future__ import annotations

import pytest

from specsuite.measure import overhead, plausible
from specsuite.measure.outcome import Completion, Speed, decode_steps, interleaved_round
from specsuite.results.record import CaseRecord, Counters, SpeedSamples
from specsuite.server.metrics import Delta


def _comps(ms: float, n: int, k: int = 3) -> list[Completion]:
    return [Completion(str(i), (), n, ms) for i in range(k)]


def _speed(rounds: list[tuple[float, float]], n: int = 33) -> Speed:
    """Rounds of 3 requests of ``n`` tokens a side: (speculative, baseline) ms per request."""
    speed = Speed()
    for spec_ms, base_ms in rounds:
        speed.add(_comps(spec_ms, n), _comps(base_ms, n))
    return speed


def test_the_first_token_of_a_request_is_not_a_decode_step() -> None:
    """predicted_ms spans predicted_n - 1 steps: the first token comes from the prompt's logits."""
    assert decode_steps([Completion("a", (), 33, 1.0), Completion("b", (), 1, 1.0)]) == 32
    assert decode_steps([Completion("a", (), 0, 0.0)]) == 0


def test_block_cost_per_round_and_the_speedup_identity() -> None:
    """3 requests of 33 tokens: 96 decode steps a side. The speculative side in 24 blocks (4 tokens each)
    at 40 ms a request, the baseline at 32 ms a request (1 ms a step): a block costs 5 ms, 5 plain steps;
    in the second round the baseline is twice as slow."""
    speed = _speed([(40.0, 32.0), (40.0, 64.0)])
    rounds = [Delta(72, 72, 24, (24, 24, 24))] * 2
    cost = overhead.block_cost(speed, rounds)
    assert cost is not None
    assert cost.block_ms == [5.0, 5.0] and cost.token_ms == [1.0, 2.0]
    assert cost.ratios == [5.0, 2.5] and cost.tokens_per_block == [4.0, 4.0]
    # every step drafted: speedup = tokens per block / ratio, round by round
    assert speed.speedups == pytest.approx([4.0 / 5.0, 4.0 / 2.5])
    rec = CaseRecord(name="c")
    overhead.fill(rec, speed, rounds)
    assert (rec.block_ms, rec.token_ms, rec.block_ratio, rec.tokens_per_block) == (5.0, 1.5, 3.75, 4.0)


def test_no_block_where_nothing_was_drafted_and_none_without_rounds() -> None:
    cost = overhead.block_cost(_speed([(32.0, 32.0)]), [Delta(0, 0, 0, ())])
    assert cost is not None and cost.block_ms == [None] and cost.ratios == [None] and cost.token_ms == [1.0]
    rec = CaseRecord(name="c")
    overhead.fill(rec, _speed([(32.0, 32.0)]), [Delta(0, 0, 0, ())])
    assert rec.block_ratio is None and rec.token_ms == 1.0
    assert overhead.block_cost(Speed(), []) is None


def _rec(speedup: float, rounds: list[tuple[int, int]]) -> CaseRecord:
    return CaseRecord(
        name="c",
        speedup=speedup,
        speed=SpeedSamples(speedups=[speedup], base_tps=[100.0]),
        rounds=[Counters(drafted=d * 3, accepted=a, drafts=d) for d, a in rounds],
    )


def test_a_speedup_above_the_rounds_accept_length_plus_the_margin_is_implausible() -> None:
    # 8 drafts, 23 accepted: accept length 3.875 (the synthetic tier's fixed models)
    assert plausible.check(_rec(3.875 * (1 + plausible.MARGIN), [(8, 23)])) is None
    why = plausible.check(_rec(2150.161, [(8, 23)]))
    assert why is not None and why.startswith("implausible_speed: speedup 2150.161")
    assert "accept length of its rounds, 3.875" in why and "not gated" in why


def test_a_round_that_drafted_nothing_may_not_be_faster_than_plain_decoding() -> None:
    assert plausible.check(_rec(1.0 + plausible.MARGIN, [(0, 0)])) is None
    assert plausible.check(_rec(1.01 + plausible.MARGIN, [(0, 0)])) is not None
    assert plausible.check(CaseRecord(name="c", speedup=9.0)) is None  # no round: nothing to bound it by
    assert plausible.check(CaseRecord(name="c", rounds=[Counters(drafted=0, accepted=0, drafts=0)])) is None


def test_a_round_pairs_each_prompts_two_requests_alternating_which_goes_first() -> None:
    sent: list[tuple[str, str]] = []

    def side(name: str):
        def ask(pid: str, text: str) -> Completion:
            sent.append((name, pid))
            return Completion(pid, (), 2, 1.0)

        return ask

    prompts = (("a", "x"), ("b", "y"), ("c", "z"))
    got = interleaved_round(side("spec"), side("base"), prompts, 0)
    assert [c.id for c in got["spec"]] == ["a", "b", "c"] == [c.id for c in got["base"]]
    assert sent == [("base", "a"), ("spec", "a"), ("spec", "b"), ("base", "b"), ("base", "c"), ("spec", "c")]
    sent.clear()
    interleaved_round(side("spec"), side("base"), prompts, 3)  # the next round goes on: B-A first
    assert sent[:2] == [("spec", "a"), ("base", "a")]
