"""A server's life as a case's data: its ``sequence`` of requests on one fresh server, each compared with
itself sent alone to a fresh server (``order_dependent``).

A request's counters and tokens must not depend on the requests before it: a drafter's state that leaks from
one request into the next (upstream's #27852: ngram-cache kept a long request's n-grams, and the short one
after it drafted nothing, 86 % -> 11 % acceptance) is invisible to a case that sends its prompts once to a
fresh server. The first request of the sequence is alone on its server already, so it is its own
reference; every other prompt of the sequence gets a fresh server of the case's own command, one request.
Counters are the requests' own (``timings.draft_n``, ``draft_n_accepted``): exact per request, where a
``/metrics`` delta would need a snapshot between every two.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from specsuite.cases.schema import Case
from specsuite.measure.judge import Failure
from specsuite.measure.outcome import Completion
from specsuite.measure.streams import run_streams
from specsuite.results.record import RequestCounters
from specsuite.server.process import LlamaServer

# (what the server is for, in its log's name) -> a fresh server of the case's command for a ``with``
Serve = Callable[[str], AbstractContextManager[LlamaServer]]


def _send(srv: LlamaServer, case: Case, pids: tuple[str, ...]) -> list[Completion]:
    texts = dict(case.prompt_texts)
    out: list[Completion] = []
    for pid in pids:  # one after another on the one server: the order is the point
        out += run_streams(
            srv.connection, ((pid, texts[pid]),), case.n_predict, 1, case.temperature
        ).completions
    return out


def run_sequence(case: Case, serve: Serve) -> tuple[list[Completion], dict[str, Completion]]:
    """The case's sequence on one fresh server, and each of its prompts alone on a fresh server."""
    with serve("sequence") as srv:
        done = _send(srv, case, case.sequence)
    alone = {done[0].id: done[0]}  # the first request met a fresh server: it is alone already
    for pid in dict.fromkeys(case.sequence[1:]):
        if pid not in alone:
            with serve(f"alone-{pid}") as srv:
                alone[pid] = _send(srv, case, (pid,))[0]
    return done, alone


def order_dependent(done: list[Completion], alone: dict[str, Completion]) -> Failure | None:
    """The first request of the sequence whose counters or tokens differ from its own sent alone, naming
    it, both counter sets and the request before it; None when every one is the same."""
    for k, got in enumerate(done):
        ref = alone[got.id]
        if (got.draft_n, got.draft_n_accepted, got.tokens) == (ref.draft_n, ref.draft_n_accepted, ref.tokens):
            continue
        same = got.tokens == ref.tokens
        tokens = "the same tokens" if same else f"other tokens from token {_first_diff(got, ref)}"
        return Failure(
            "order_dependent",
            f"request {k + 1} of the sequence ({got.id!r}, after {done[k - 1].id!r}): drafted {got.draft_n} "
            f"accepted {got.draft_n_accepted}, {tokens}; sent alone to a fresh server: drafted {ref.draft_n} "
            f"accepted {ref.draft_n_accepted}: the requests before it changed it (state kept across them)",
        )
    return None


def counters(done: list[Completion]) -> list[RequestCounters]:
    """Each request's own counters, as results.json keeps them."""
    return [RequestCounters(prompt=c.id, drafted=c.draft_n, accepted=c.draft_n_accepted) for c in done]


def _first_diff(a: Completion, b: Completion) -> int:
    return next((i for i, (x, y) in enumerate(zip(a.tokens, b.tokens, strict=False)) if x != y),
                min(len(a.tokens), len(b.tokens)))  # fmt: skip
