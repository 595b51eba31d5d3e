"""Requests and the numbers derived from them: prompts, decode speed, divergence from the baseline.

Every number here comes from the server: tokens and ``timings`` from ``/completion``, counters from the
``/metrics`` delta (see metrics.py). Nothing is estimated. The prompt texts are data (cases.toml).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec

from specsuite.results.record import CaseRecord, CategoryStats, Counters, PromptCheck, SpeedSamples
from specsuite.server.metrics import Delta

SEED = 42
WARMUP_N_PREDICT = 16
Post = Callable[[str, dict[str, Any]], dict[str, Any]]
Prompts = Sequence[tuple[str, str]]


def request_body(prompt: str, n_predict: int, temperature: float = 0.0) -> dict[str, Any]:
    """Greedy and reproducible: no prompt cache (slot reuse changes batch shapes), fixed seed (synthetic
    acceptance draws from the request seed), tokens returned for the divergence check.

    With ``temperature`` > 0: pure temperature sampling from the target's distribution (no top-k, top-p or
    min-p cut, as vLLM's temperature-1.0 gate), from the same seed on both servers."""
    sampling: dict[str, Any] = {"temperature": 0, "top_k": 1}
    if temperature > 0:
        sampling = {"temperature": temperature, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    return {
        "prompt": prompt,
        **sampling,
        "seed": SEED,
        "n_predict": n_predict,
        "cache_prompt": False,
        "return_tokens": True,
    }


@dataclass(frozen=True)
class Completion:
    id: str
    tokens: tuple[int, ...]
    predicted_n: int
    predicted_ms: float
    draft_n: int = 0  # timings carry draft_n / draft_n_accepted only when something was drafted
    draft_n_accepted: int = 0
    prompt_n: int = 0  # the prompt's tokens the server processed (what a long-input bucket is)
    prompt_ms: float = 0.0  # how long that took: a non-streamed request's time to its first token
    stream: int | None = None  # which of several concurrent streams sent it (None: the only one)
    wall_ms: float = 0.0  # from sending the request to reading its answer, on the client

    @classmethod
    def from_response(
        cls, prompt_id: str, body: dict[str, Any], stream: int | None = None, wall_ms: float = 0.0
    ) -> Completion:
        t = body.get("timings") or {}
        return cls(
            prompt_id,
            tuple(body.get("tokens") or ()),
            int(t.get("predicted_n", 0)),
            float(t.get("predicted_ms", 0.0)),
            int(t.get("draft_n", 0)),
            int(t.get("draft_n_accepted", 0)),
            int(t.get("prompt_n", 0)),
            float(t.get("prompt_ms", 0.0)),
            stream,
            wall_ms,
        )

    @property
    def key(self) -> tuple[int | None, str]:
        """Which request it answers: a stream sends each prompt once, so (stream, prompt) names it."""
        return (self.stream, self.id)

    @property
    def tps(self) -> float | None:
        """This request's decode tokens/s, from the server's own timings."""
        return 1000.0 * self.predicted_n / self.predicted_ms if self.predicted_ms > 0 else None

    @property
    def ttft_ms(self) -> float:
        """Time to first token: the client's wall time less the server's decode time, which starts at the
        first token (``timings.predicted_ms``: server_slot_stats::t_gen_ms, from the end of the prompt):
        queueing for a slot, the prompt and the HTTP round trip, without streaming the answer."""
        return max(0.0, self.wall_ms - self.predicted_ms)


def run_prompts(post: Post, prompts: Prompts, n_predict: int, temperature: float = 0.0) -> list[Completion]:
    """Send every prompt through ``post(path, body) -> dict`` (LlamaServer.post)."""
    return [
        Completion.from_response(pid, post("/completion", request_body(text, n_predict, temperature)))
        for pid, text in prompts
    ]


def decode_tps(completions: list[Completion]) -> float | None:
    """Decode tokens/s over all requests, from the server's own predicted_n / predicted_ms."""
    ms = sum(c.predicted_ms for c in completions)
    return 1000.0 * sum(c.predicted_n for c in completions) / ms if ms > 0 else None


def abba(pairs: int) -> list[tuple[str, str]]:
    """Measurement order of ``pairs`` request pairs, A = baseline, B = speculative: A-B, B-A, A-B, …
    (A-B-B-A-A-B…), so a machine that slows down or speeds up over the run favours neither side."""
    return [("base", "spec") if r % 2 == 0 else ("spec", "base") for r in range(pairs)]


def decode_steps(completions: list[Completion]) -> int:
    """Tokens decoded after each request's first: the first comes from the prompt's logits (its time is
    the prompt's), so ``predicted_ms`` spans ``predicted_n - 1`` tokens (server-common.h n_gen_steps)."""
    return sum(max(0, c.predicted_n - 1) for c in completions)


T = TypeVar("T")
Side = Callable[[str, str], T]  # (prompt id, text) -> one request's answer on one server


def interleaved_round(spec: Side[T], base: Side[T], prompts: Prompts, first: int) -> dict[str, list[T]]:
    """One round: every prompt on both servers, the two requests of a prompt back to back, their order
    alternating request pair by request pair (A-B, B-A, …, counted from ``first``, so the next round goes on
    where this one stopped). On shared cores another process's burst then lands on both sides of a pair,
    not on a whole side of the round: measured on the 2-core machine at load 6, the per-round speedup of a
    1 ms-per-token target varied by CV 27 % this way against 44-51 % with each side's prompts in a row."""
    out: dict[str, list[T]] = {"spec": [], "base": []}
    for (pid, text), order in zip(prompts, abba(first + len(prompts))[first:], strict=True):
        for side in order:
            out[side].append((spec if side == "spec" else base)(pid, text))
    return out


@dataclass
class Speed:
    """Decode speed per round: the speculative server and the baseline, paired by round; and what the
    per-block overhead is computed from (each round's decode milliseconds and decoded tokens, per side)."""

    spec_tps: list[float] = field(default_factory=list)
    base_tps: list[float] = field(default_factory=list)
    spec_ms: list[float] = field(default_factory=list)
    base_ms: list[float] = field(default_factory=list)
    spec_steps: list[int] = field(default_factory=list)
    base_steps: list[int] = field(default_factory=list)

    def add(self, spec: list[Completion], base: list[Completion]) -> None:
        """One round's two sides."""
        self.spec_tps.append(decode_tps(spec) or 0.0)
        self.base_tps.append(decode_tps(base) or 0.0)
        self.spec_ms.append(sum(c.predicted_ms for c in spec))
        self.base_ms.append(sum(c.predicted_ms for c in base))
        self.spec_steps.append(decode_steps(spec))
        self.base_steps.append(decode_steps(base))

    @property
    def speedups(self) -> list[float]:
        return [s / b for s, b in zip(self.spec_tps, self.base_tps, strict=False) if b > 0]

    def as_dict(self) -> dict[str, Any]:
        ups = self.speedups
        return {
            "repeat": len(ups),
            "spec_tps": [round(x, 2) for x in self.spec_tps],
            "base_tps": [round(x, 2) for x in self.base_tps],
            "speedups": [round(x, 4) for x in ups],
            "speedup_median": round(statistics.median(ups), 4) if ups else None,
            "speedup_spread": round(max(ups) - min(ups), 4) if ups else None,
        }


def first_diff(ref: Sequence[int], got: Sequence[int]) -> int | None:
    """Index of the first differing token (a length mismatch differs at the shorter length); None if equal."""
    for i, (a, b) in enumerate(zip(ref, got, strict=False)):
        if a != b:
            return i
    return None if len(ref) == len(got) else min(len(ref), len(got))


@dataclass(frozen=True)
class PromptDivergence:
    id: str
    n_tokens: int
    identical: bool
    first_diff: int | None
    prefix_fraction: float  # share of the baseline's tokens reproduced before the first difference
    stream: int | None = None  # of several concurrent streams

    def as_dict(self) -> dict[str, Any]:
        out = {
            "id": self.id,
            "n_tokens": self.n_tokens,
            "identical": self.identical,
            "first_diff": self.first_diff,
            "prefix_fraction": round(self.prefix_fraction, 4),
        }
        return out if self.stream is None else {**out, "stream": self.stream}


def divergence(baseline: list[Completion], spec: list[Completion]) -> list[PromptDivergence]:
    """Each request's tokens against the baseline's answer to the same request (stream and prompt)."""
    ref = {c.key: c.tokens for c in baseline}
    out = []
    for c in spec:
        r = ref[c.key]
        d = first_diff(r, c.tokens)
        prefix = len(r) if d is None else d
        share = prefix / len(r) if r else 1.0
        out.append(PromptDivergence(c.id, len(c.tokens), d is None, d, share, c.stream))
    return out


def identical_fraction(divs: list[PromptDivergence]) -> float | None:
    return sum(d.identical for d in divs) / len(divs) if divs else None


def usage_problem(body: dict[str, Any]) -> str | None:
    """What is wrong with an OpenAI-style answer's ``usage`` (the front end's backfill bug), or None.

    llama-server reports ``timings.predicted_n``; ``usage.completion_tokens`` must be there and equal it
    whenever tokens were produced (front ends show tokens/s from it)."""
    predicted = (body.get("timings") or {}).get("predicted_n")
    usage = body.get("usage")
    if not isinstance(predicted, int) or predicted <= 0:
        return None  # nothing was produced (or the server reports no timings): nothing to check against
    got = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if not isinstance(got, int) or got == 0:
        return f"usage.completion_tokens is {got!r} (usage {usage!r}) while timings.predicted_n = {predicted}"
    if got != predicted:
        return f"usage.completion_tokens = {got} but timings.predicted_n = {predicted}"
    return None


def chat_body(prompt: str, max_tokens: int = 16) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "top_k": 1,
        "seed": SEED,
        "cache_prompt": False,
    }


@dataclass
class RequestOutcome:
    """Everything one case measured; ``numbers()`` is what results.json and the SPEC_RESULT line show."""

    delta: Delta  # the cold pass: the counters reported and judged
    completions: list[Completion]  # ... and its tokens
    divergences: list[PromptDivergence] = field(default_factory=list)
    speed: Speed = field(default_factory=Speed)
    rounds: list[Delta] = field(default_factory=list)  # every warmed speculative round's counters
    categories: dict[str, dict[str, Any]] = field(default_factory=dict)  # per prompt category (categories.py)

    @property
    def nondeterministic(self) -> bool:
        """Two warmed speculative rounds of the same prompts disagree in a counter. The cold pass (``delta``)
        is not compared with them: it alone starts from a fresh server, so a drafter that keeps state across
        requests (ngram-mod) counts differently there by design; whether it repeats is what two runs of one
        commit show in the history. From three rounds on, a first round that differs from later rounds that
        agree is such a method still learning from the requests before it, not noise."""
        seen = [counters(d) for d in self.rounds]
        later = seen[1:] if len(seen) > 2 else seen
        return len(set(later)) > 1

    @property
    def speedup(self) -> float | None:
        s = self.speed.as_dict()["speedup_median"]
        return None if s is None or not math.isfinite(s) else float(s)

    def numbers(self) -> dict[str, Any]:
        """The record's numbers as plain data: built once per case, by ``fill``."""
        acceptance = counter_numbers(self.delta)
        rates = acceptance["per_position_rate"]
        return {
            **acceptance,
            "pos0_rate": rates[0] if rates else None,
            "decode_tps": _r(statistics.median(self.speed.spec_tps), 2) if self.speed.spec_tps else None,
            "baseline_decode_tps": _r(statistics.median(self.speed.base_tps), 2)
            if self.speed.base_tps
            else None,
            "speedup": _r(self.speedup, 3),
            "speed": self.speed.as_dict() if self.speed.spec_tps else None,  # none: acceptance only
            "identical_fraction": _r(identical_fraction(self.divergences)),
            "prompts": [dv.as_dict() for dv in self.divergences],
            "categories": self.categories,
        }

    def fill(self, rec: CaseRecord) -> None:
        """Put ``numbers()`` and the rounds' counters into the case's typed record."""
        n = self.numbers()
        typed = {
            "speed": SpeedSamples | None,
            "prompts": list[PromptCheck],
            "categories": dict[str, CategoryStats],
        }
        for key, value in n.items():
            setattr(rec, key, msgspec.convert(value, typed[key]) if key in typed else value)
        rec.rounds = [Counters(drafted=d.drafted, accepted=d.accepted, drafts=d.drafts,
                               per_position=list(d.per_position)) for d in self.rounds]  # fmt: skip
        rec.nondeterministic = self.nondeterministic


def counter_numbers(d: Delta) -> dict[str, Any]:
    """A ``/metrics`` delta's counters and the rates derived from them (a case's, or one category's)."""
    return {
        "drafted": d.drafted,
        "accepted": d.accepted,
        "drafts": d.drafts,
        "counters_source": d.source,
        "accept_rate": _r(d.accept_rate),
        "accept_len": _r(d.accept_len),
        "per_position": list(d.per_position) if d.per_position_exported else [],
        "per_position_rate": [_r(x) for x in d.per_position_rate] if d.per_position_exported else [],
    }


def counters(d: Delta) -> tuple[int, int, int | None, tuple[int, ...]]:
    return (d.drafted, d.accepted, d.drafts, tuple(d.per_position))


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def spec_result_line(rec: CaseRecord) -> str:
    """The seed suite's line, extended with the speedup."""

    def f(v: Any, fmt: str) -> str:
        return "n/a" if v is None else format(v, fmt)

    return (
        f"SPEC_RESULT {rec.name}: drafted={rec.drafted} accepted={rec.accepted} steps={rec.drafts} "
        f"accept_rate={f(rec.accept_rate, '.4f')} accept_len={f(rec.accept_len, '.4f')} "
        f"speedup={f(rec.speedup, '.3f')}"
    )
