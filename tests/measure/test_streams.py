"""Concurrent streams of requests (suite.streams): their order, that they are in flight together, errors,
and the numbers a client sees. The server is a function here; the real llama-server runs them in the
synthetic tier, the fake in tests/suite/test_runner.py."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from specsuite.measure.concurrency import Throughput
from specsuite.measure.outcome import Completion
from specsuite.measure.streams import Pass, run_streams, schedule

PROMPTS = [("a", "A"), ("b", "B"), ("c", "C")]


def answering(post: Any) -> Any:
    """A ``connect`` whose every connection posts through ``post``."""

    @contextlib.contextmanager
    def connect() -> Iterator[Any]:
        yield post

    return connect


def echo(path: str, body: dict) -> dict:
    text = body["prompt"]
    return {"tokens": [ord(text)] * 2, "timings": {"predicted_n": 2, "predicted_ms": 1.0, "draft_n": 3}}


def test_stream_s_sends_the_whole_prompt_set_starting_at_prompt_s() -> None:
    assert schedule(PROMPTS, 4) == [
        [("a", "A"), ("b", "B"), ("c", "C")],
        [("b", "B"), ("c", "C"), ("a", "A")],
        [("c", "C"), ("a", "A"), ("b", "B")],
        [("a", "A"), ("b", "B"), ("c", "C")],
    ]


def test_one_stream_is_the_single_stream_pass_and_names_no_stream() -> None:
    done = run_streams(answering(echo), PROMPTS, 8, 1)
    assert [(c.id, c.stream, c.tokens, c.draft_n) for c in done.completions] == [
        ("a", None, (65, 65), 3),
        ("b", None, (66, 66), 3),
        ("c", None, (67, 67), 3),
    ]


def test_the_streams_are_in_flight_together() -> None:
    """Each request waits until every stream has one in flight: they complete only if the streams run at
    once (one after another, the first would wait for the others forever and the barrier breaks)."""
    together = threading.Barrier(4, timeout=30)

    def post(path: str, body: dict) -> dict:
        together.wait()
        return echo(path, body)

    done = run_streams(answering(post), PROMPTS, 8, 4)
    assert [c.key for c in done.completions] == [(s, p) for s in range(4) for p, _ in schedule(PROMPTS, 4)[s]]
    assert {c.stream for c in done.completions} == {0, 1, 2, 3}


def test_a_failing_stream_is_raised_after_the_others_stopped() -> None:
    sent: list[str] = []

    def post(path: str, body: dict) -> dict:
        sent.append(body["prompt"])
        if body["prompt"] == "B":
            raise RuntimeError("server died")
        return echo(path, body)

    with pytest.raises(RuntimeError, match="server died"):
        run_streams(answering(post), PROMPTS, 8, 3)
    assert "B" in sent


def test_a_stream_that_cannot_connect_releases_the_others() -> None:
    calls = 0

    @contextlib.contextmanager
    def connect() -> Iterator[Any]:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError("no connection")
        yield echo

    with pytest.raises(OSError, match="no connection"):
        run_streams(connect, PROMPTS, 8, 3)  # the other two would wait at the start without it


def completion(tokens: int, decode_ms: float, wall_ms: float) -> Completion:
    return Completion("a", (1,) * tokens, tokens, decode_ms, wall_ms=wall_ms)


def test_what_a_client_sees_aggregate_per_request_and_first_token() -> None:
    spec = Pass([completion(100, 50.0, 80.0), completion(100, 100.0, 150.0)], wall_s=0.2)
    base = Pass([completion(100, 200.0, 210.0), completion(100, 200.0, 400.0)], wall_s=0.4)
    assert spec.aggregate_tps == 1000.0 and base.aggregate_tps == 500.0
    assert [c.ttft_ms for c in spec.completions] == [30.0, 50.0]  # wall less the server's decode time
    seen = Throughput()
    seen.add("spec", spec)
    seen.add("base", base)
    assert seen.as_dict() == {
        "spec_tps": [1000.0],
        "base_tps": [500.0],
        "speedups": [2.0],
        "speedup": 2.0,
        "request_tps": {"median": 1500.0, "worst": 1000.0},  # 100 tokens in 50 and in 100 ms
        "base_request_tps": {"median": 500.0, "worst": 500.0},
        "ttft_ms": {"median": 40.0, "worst": 50.0},
        "base_ttft_ms": {"median": 105.0, "worst": 200.0},
    }
