"""/metrics parsing and deltas, on text in the exact layout llama-server writes (server-task.cpp)."""

from __future__ import annotations

import pytest

from specsuite.server.metrics import ACCEPTED, DRAFT_TOKENS, Delta, MetricsError, delta, parse


def _text(drafted: int, accepted: int, drafts: int, per_pos: list[int] | None) -> str:
    lines = [
        "# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.",
        "# TYPE llamacpp:tokens_predicted_total counter",
        "llamacpp:tokens_predicted_total 384",
        "# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated",
        "# TYPE llamacpp:spec_decode_num_draft_tokens_total counter",
        f"llamacpp:spec_decode_num_draft_tokens_total {drafted}",
        "# HELP llamacpp:spec_decode_num_accepted_tokens_total Speculative: Total draft tokens accepted",
        "# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter",
        f"llamacpp:spec_decode_num_accepted_tokens_total {accepted}",
        "# HELP llamacpp:spec_decode_num_drafts_total Speculative: Total speculative decoding steps",
        "# TYPE llamacpp:spec_decode_num_drafts_total counter",
        f"llamacpp:spec_decode_num_drafts_total {drafts}",
    ]
    if per_pos is not None:
        lines += [
            "# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per position",
            "# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter",
            *(
                f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {c}'
                for i, c in enumerate(per_pos)
            ),
        ]
    lines += [
        "# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s",
        "# TYPE llamacpp:predicted_tokens_seconds gauge",
        "llamacpp:predicted_tokens_seconds 100.79",
    ]
    return "\n".join(lines) + "\n"


def test_parse_counters_and_per_position() -> None:
    s = parse(_text(300, 200, 100, [90, 70, 40]), start_time="1764477000")
    assert (s.drafted, s.accepted, s.drafts, s.per_position) == (300, 200, 100, (90, 70, 40))
    assert s.start_time == "1764477000"


def test_missing_per_position_block_is_zeros() -> None:
    before = parse(_text(0, 0, 0, None))  # a fresh server: no speculative request finished yet
    assert before.per_position == ()
    after = parse(_text(300, 200, 100, [90, 70, 40]))
    d = delta(before, after)
    assert d == Delta(300, 200, 100, (90, 70, 40))
    assert d.accept_rate == pytest.approx(200 / 300)
    assert d.accept_len == pytest.approx(3.0)
    assert d.per_position_rate == pytest.approx([0.9, 0.7, 0.4])
    assert d.sanity_errors() == []


def test_delta_subtracts_cumulative_counters() -> None:
    d = delta(parse(_text(100, 50, 40, [30, 20])), parse(_text(160, 80, 60, [45, 30, 5])))
    assert d == Delta(60, 30, 20, (15, 10, 5))


def test_restart_detected_by_start_time_header() -> None:
    with pytest.raises(MetricsError, match="restarted between snapshots"):
        delta(parse(_text(10, 5, 4, [5]), "1000"), parse(_text(20, 9, 8, [9]), "2000"))


def test_restart_detected_by_counters_going_backwards() -> None:
    with pytest.raises(MetricsError, match="went backwards"):
        delta(parse(_text(300, 200, 100, [90, 70, 40])), parse(_text(30, 20, 10, [9, 7, 4])))


def test_missing_spec_counters_is_an_error() -> None:
    """One counter of three missing: a broken export, an error. All three missing: a build before b10289,
    which exports none (its counters come from the responses' timings)."""
    two = "".join(f"# TYPE {n} counter\n{n}_total 3\n" for n in (DRAFT_TOKENS, ACCEPTED))
    with pytest.raises(MetricsError, match="spec_decode_num_drafts_total"):
        parse(two)
    none = parse("# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total 1\n")
    assert not none.exported and (none.drafted, none.accepted, none.drafts) == (0, 0, 0)


def test_sanity_relations() -> None:
    assert Delta(10, 11, 5, (11,)).sanity_errors()[0] == "accepted 11 > drafted 10"
    assert "drafts 12 > drafted 10" in Delta(10, 4, 12, (4,)).sanity_errors()
    assert "sum to 5, not accepted 6" in Delta(10, 6, 5, (3, 2)).sanity_errors()[0]
    assert "sum to 0, not accepted 6" in Delta(10, 6, 5, ()).sanity_errors()[0]
    assert "increase with position" in Delta(10, 6, 5, (2, 4)).sanity_errors()[0]
    assert Delta(0, 0, 0).accept_rate is None and Delta(0, 0, 0).accept_len is None
