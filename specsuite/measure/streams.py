"""Concurrent streams of requests on one server (what a client sees of them: ``measure.concurrency``).

A stream is a closed-loop client: it sends the prompt set one request after another, each as soon as the
previous answer arrived. ``streams`` of them run at once, stream ``s`` starting at prompt ``s`` (so that
the streams are not on the same prompt at the same time), all released together. One stream is the suite's
single-stream pass: the prompts in order, one at a time.

Threads, not asyncio: a request is the blocking ``LlamaServer.post`` (requests), which releases the GIL
while it waits on its socket, and there are at most 64 streams; asyncio would need an asynchronous HTTP
client (a new dependency) or these same threads under an executor. Each stream has its own connection
(``LlamaServer.connection``: one shared session stalls requests by seconds). Threads are daemons and the
caller stops the server on any error, which ends a stream still waiting on it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from specsuite.measure.outcome import WARMUP_N_PREDICT, Completion, Post, Prompts, request_body

Connect = Callable[[], AbstractContextManager[Post]]  # LlamaServer.connection


def schedule(prompts: Prompts, streams: int) -> list[list[tuple[str, str]]]:
    """Each stream's requests in order: the whole prompt set, stream ``s`` starting at prompt ``s``."""
    n = len(prompts)
    return [[prompts[(s + k) % n] for k in range(n)] for s in range(streams)]


@dataclass
class Pass:
    """One pass of the streams: every answer (by stream, in each stream's order) and the wall time from
    their release to the last answer."""

    completions: list[Completion]
    wall_s: float

    def __add__(self, other: Pass) -> Pass:
        """Two passes one after the other (a categorised prompt set's categories)."""
        return Pass([*self.completions, *other.completions], self.wall_s + other.wall_s)

    @property
    def aggregate_tps(self) -> float | None:
        """Tokens/s over all streams together, on the client's clock: what the server delivers."""
        n = sum(c.predicted_n for c in self.completions)
        return n / self.wall_s if self.wall_s > 0 else None


def run_streams(
    connect: Connect, prompts: Prompts, n_predict: int, streams: int = 1, temperature: float = 0.0
) -> Pass:
    """The prompt set on ``streams`` concurrent streams (see the module); the first error is raised after
    every stream stopped sending (a stream waiting at the start is released by aborting the barrier)."""
    plan = schedule(prompts, streams)
    start: list[float] = []
    gate = threading.Barrier(streams, action=lambda: start.append(time.perf_counter()))
    answers: list[list[Completion]] = [[] for _ in plan]
    errors: list[BaseException] = []

    def stream(s: int) -> None:
        try:
            with connect() as post:
                gate.wait()
                for pid, text in plan[s]:
                    t0 = time.perf_counter()
                    body = post("/completion", request_body(text, n_predict, temperature))
                    ms = (time.perf_counter() - t0) * 1000.0
                    answers[s].append(Completion.from_response(pid, body, s if streams > 1 else None, ms))
        except BaseException as exc:  # raised again in the caller's thread, below
            if not isinstance(exc, threading.BrokenBarrierError):
                errors.append(exc)
            gate.abort()

    if streams == 1:
        stream(0)
    else:
        threads = [threading.Thread(target=stream, args=(s,), daemon=True) for s in range(streams)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    return Pass([c for a in answers for c in a], time.perf_counter() - start[0])


def warm_up(connect: Connect, prompts: Prompts, streams: int = 1, temperature: float = 0.0) -> None:
    """One discarded short request per stream, all at once: the first batch of each size pays for
    allocations and graph setup."""
    run_streams(connect, prompts[:1], WARMUP_N_PREDICT, streams, temperature)
