"""A case with several slots against the np-1 output of the same server command: each request's tokens
(``batch_variant``), the acceptance (``concurrency_collapse``), each request's own counters; and the
``concurrency`` block of its record, with the rounds as a client saw them (``Throughput``).

The np-1 reference is the cold pass of the same command with one slot, for the same prompts and
``n_predict``: that of a case of this run (a sweep's np-1 member runs before its other members, in one
group of its target), else measured for the case on a fresh one-slot server. One slot means one sequence
per batch, whatever the streams, so its tokens are the method's output without batching.

What the pinned CPU build showed (8 concurrent greedy requests of 128 tokens, n_max 3, np 1/4/8, the
synthetic models): tokens equal to np 1's in every configuration; draft-simple, MTP and DFlash counters
equal per request; DSpark's counters move in one or two requests of some runs at np 4 and 8 (drafted 204
-> 213, accepted 58 -> 55 on one request; acceptance about 1 % lower over the pass), never its tokens. So
tokens are compared exactly, the counters per request are reported (not judged), and acceptance is judged
relatively, with the run's rtol: DSpark's move stays inside it, a collapse as in llama.cpp issue 27117
(DFlash at 0.06-0.49 against 0.83-0.92) does not.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from specsuite.cases.schema import Case
from specsuite.measure.judge import EPS, Failure
from specsuite.measure.outcome import Completion, RequestOutcome, first_diff
from specsuite.measure.streams import Pass
from specsuite.results.record import CaseRecord, Concurrency, Np1, RequestCounters
from specsuite.server.metrics import Delta

SHOWN = 5  # differing requests named in a message; the rest are counted


@dataclass(frozen=True)
class Reference:
    """The np-1 cold pass of a server command: its answers and counters, and where it came from."""

    source: str
    completions: list[Completion]
    delta: Delta

    def answer(self, prompt: str) -> Completion:
        return next(c for c in self.completions if c.id == prompt)


def _who(c: Completion) -> str:
    return f"stream {c.stream}, prompt {c.id!r}" if c.stream is not None else f"prompt {c.id!r}"


def differing(
    ref: Reference, comps: list[Completion], labels: tuple[str, str], reason: str, what: str
) -> list[Failure]:
    """Every request whose tokens differ from the reference's for its prompt, each with its first
    differing token (``labels``: how the reference and this server are named in it), as one failure
    ``reason`` whose message begins "N of M request(s) differ from ``what``"."""
    bad = []
    for c in comps:
        want = ref.answer(c.id).tokens
        if (i := first_diff(want, c.tokens)) is not None:
            was, here = (t[i] if i < len(t) else "end" for t in (want, c.tokens))
            bad.append(
                f"{_who(c)}: first differing token at index {i} ({labels[0]}: {was}, {labels[1]}: {here})"
            )
    if not bad:
        return []
    more = f"; and {len(bad) - SHOWN} more" if len(bad) > SHOWN else ""
    head = f"{len(bad)} of {len(comps)} request(s) differ from {what}: "
    return [Failure(reason, head + "; ".join(bad[:SHOWN]) + more)]


def batch_variant(ref: Reference, comps: list[Completion], parallel: int) -> list[Failure]:
    """Every request whose tokens differ from np 1's for its prompt: the stream, the prompt and the first
    differing token."""
    return differing(
        ref, comps, ("np 1", f"np {parallel}"), "batch_variant", f"the np-1 output ({ref.source})"
    )


def collapse(ref: Reference, delta: Delta, parallel: int, rtol: float) -> list[Failure]:
    """Acceptance more than ``rtol`` below np 1's (each stream sends the whole prompt set, so the two
    passes hold the same prompts)."""
    out = []
    for metric in ("accept_rate", "accept_len"):
        was, now = getattr(ref.delta, metric), getattr(delta, metric)
        if was is None or now is None or was <= 0 or now >= was * (1 - rtol) - EPS:
            continue
        out.append(
            Failure(
                "concurrency_collapse",
                f"{metric} {now:.4f} at np {parallel} is {(was - now) / was:.1%} below np 1's {was:.4f} "
                f"({ref.source}; rtol {rtol:.0%}): accepted={delta.accepted} drafted={delta.drafted} "
                f"steps={delta.drafts} against {ref.delta.accepted}/{ref.delta.drafted}/{ref.delta.drafts}",
            )
        )
    return out


def counter_sum_errors(delta: Delta, comps: list[Completion]) -> list[str]:
    """The requests' own counters must add up to the /metrics delta over them (the server counts both from
    the same slot statistics); none checked where no request reported any (a binary without them)."""
    drafted, accepted = sum(c.draft_n for c in comps), sum(c.draft_n_accepted for c in comps)
    if not drafted or (drafted, accepted) == (delta.drafted, delta.accepted):
        return []
    return [
        f"the requests' own counters (timings.draft_n, draft_n_accepted) add up to drafted={drafted} "
        f"accepted={accepted}, /metrics counted drafted={delta.drafted} accepted={delta.accepted}"
    ]


def counters_vs_np1(ref: Reference, comps: list[Completion]) -> str:
    """Each request's counters against np 1's for its prompt: "identical per request", or the requests
    that differ (reported: a drafter whose drafts depend on the batch, as DSpark's, moves them)."""
    moved = []
    for c in comps:
        r = ref.answer(c.id)
        if (c.draft_n, c.draft_n_accepted) != (r.draft_n, r.draft_n_accepted):
            moved.append(
                f"{_who(c)} drafted {r.draft_n}->{c.draft_n} accepted {r.draft_n_accepted}->"
                f"{c.draft_n_accepted}"
            )
    if not moved:
        return "identical per request"
    more = f"; and {len(moved) - SHOWN} more" if len(moved) > SHOWN else ""
    return f"differ in {len(moved)} of {len(comps)} request(s): " + "; ".join(moved[:SHOWN]) + more


def np1_block(ref: Reference, delta: Delta, comps: list[Completion]) -> Np1:
    same = sum(first_diff(ref.answer(c.id).tokens, c.tokens) is None for c in comps)
    return Np1(
        source=ref.source,
        accept_rate=_r(ref.delta.accept_rate),
        accept_len=_r(ref.delta.accept_len),
        identical_fraction=_r(same / len(comps)) if comps else None,
        counters=counters_vs_np1(ref, comps),
    )


def block(
    parallel: int, streams: int, cold: list[Completion], throughput: Throughput, np1: Np1 | None
) -> Concurrency:
    """The record's ``concurrency`` block."""
    out = msgspec.convert(throughput.as_dict(), Concurrency)
    out.parallel, out.streams, out.requests, out.np1 = parallel, streams, len(cold), np1
    out.per_request = [
        RequestCounters(stream=c.stream, prompt=c.id, drafted=c.draft_n, accepted=c.draft_n_accepted)
        for c in cold
    ]
    return out


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


@dataclass
class Throughput:
    """The speed rounds of a concurrent case as a client sees them: each round's pass on the speculative
    server and on its baseline."""

    spec: list[Pass] = field(default_factory=list)
    base: list[Pass] = field(default_factory=list)

    def add(self, side: str, p: Pass) -> None:
        (self.spec if side == "spec" else self.base).append(p)

    @property
    def speedups(self) -> list[float]:
        pairs = zip(self.spec, self.base, strict=False)
        return [s / b for s, b in ((x.aggregate_tps, y.aggregate_tps) for x, y in pairs) if s and b]

    def as_dict(self) -> dict[str, Any]:
        """Aggregate tokens/s per round and their median speedup; per request (every round's), decode
        tokens/s (median and slowest) and time to first token (median and longest)."""
        ups = self.speedups
        return {
            "spec_tps": [_r(p.aggregate_tps, 2) for p in self.spec],
            "base_tps": [_r(p.aggregate_tps, 2) for p in self.base],
            "speedups": [round(x, 4) for x in ups],
            "speedup": round(statistics.median(ups), 4) if ups else None,
            "request_tps": _spread(self.spec, lambda c: c.tps, min),
            "base_request_tps": _spread(self.base, lambda c: c.tps, min),
            "ttft_ms": _spread(self.spec, lambda c: c.ttft_ms, max),
            "base_ttft_ms": _spread(self.base, lambda c: c.ttft_ms, max),
        }


def _spread(
    passes: list[Pass], value: Callable[[Completion], float | None], worst: Callable[[list[float]], float]
) -> dict[str, float | None] | None:
    """The median and the worst of one number over every request of the passes."""
    if not passes:
        return None
    got = [v for p in passes for c in p.completions if (v := value(c)) is not None]
    return {"median": _r(statistics.median(got), 2), "worst": _r(worst(got), 2)} if got else None


def check(
    case: Case,
    rec: CaseRecord,
    outcome: RequestOutcome,
    throughput: Throughput,
    ref: Reference | None,
    rtol: float,
) -> list[Failure]:
    """A case on the concurrency axis: its record's block; with several slots, its requests against the
    np-1 output ``ref`` (tokens exactly, acceptance within ``rtol``). Any other case: nothing."""
    if not case.concurrent:
        return []
    delta, comps = outcome.delta, outcome.completions
    np1 = np1_block(ref, delta, comps) if ref is not None else None
    rec.concurrency = block(case.parallel, case.streams, comps, throughput, np1)
    if ref is None:
        return []
    return batch_variant(ref, comps, case.parallel) + collapse(ref, delta, case.parallel, rtol)
