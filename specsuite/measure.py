"""Requests and the numbers derived from them: prompts, decode speed, divergence from the baseline.

Every number here comes from the server: tokens and ``timings`` from ``/completion``, counters from the
``/metrics`` delta (see metrics.py). Nothing is estimated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .metrics import Delta

# The seed suite's three prompts (Fibonacci with memoization, TCP vs UDP, capital of France), and the
# synthetic tier's (tiny generated vocabularies: short ASCII that every test tokenizer can encode).
PROMPT_SETS: dict[str, tuple[tuple[str, str], ...]] = {
    "seed": (
        ("fib", "Write a Python function that computes the n-th Fibonacci number using memoization."),
        ("tcp", "Explain the difference between TCP and UDP."),
        ("paris", "What is the capital of France?"),
    ),
    "synthetic": (
        ("fox", "Hello world, the quick brown fox"),
        ("count", "1 2 3 4 5 6 7 8"),
        ("the", "the the the"),
    ),
}
N_PREDICT = 128
SEED = 42


def request_body(prompt: str, n_predict: int = N_PREDICT) -> dict[str, Any]:
    """Greedy and reproducible: no prompt cache (slot reuse changes batch shapes), fixed seed (synthetic
    acceptance draws from the request seed), tokens returned for the divergence check."""
    return {
        "prompt": prompt,
        "temperature": 0,
        "top_k": 1,
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

    @classmethod
    def from_response(cls, prompt_id: str, body: dict[str, Any]) -> Completion:
        t = body.get("timings", {})
        return cls(
            prompt_id,
            tuple(body.get("tokens") or ()),
            int(t.get("predicted_n", 0)),
            float(t.get("predicted_ms", 0.0)),
            int(t.get("draft_n", 0)),
            int(t.get("draft_n_accepted", 0)),
        )


def run_prompts(post: Any, prompt_set: str = "seed", n_predict: int = N_PREDICT) -> list[Completion]:
    """Send every prompt of the set through ``post(path, body) -> dict`` (LlamaServer.post)."""
    return [
        Completion.from_response(pid, post("/completion", request_body(text, n_predict)))
        for pid, text in PROMPT_SETS[prompt_set]
    ]


def decode_tps(completions: list[Completion]) -> float | None:
    """Decode tokens/s over all requests, from the server's own predicted_n / predicted_ms."""
    ms = sum(c.predicted_ms for c in completions)
    return 1000.0 * sum(c.predicted_n for c in completions) / ms if ms > 0 else None


def first_diff(ref: tuple[int, ...] | list[int], got: tuple[int, ...] | list[int]) -> int | None:
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

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "n_tokens": self.n_tokens,
            "identical": self.identical,
            "first_diff": self.first_diff,
            "prefix_fraction": round(self.prefix_fraction, 4),
        }


def divergence(baseline: list[Completion], spec: list[Completion]) -> list[PromptDivergence]:
    ref = {c.id: c.tokens for c in baseline}
    out = []
    for c in spec:
        r = ref[c.id]
        d = first_diff(r, c.tokens)
        prefix = len(r) if d is None else d
        out.append(PromptDivergence(c.id, len(c.tokens), d is None, d, prefix / len(r) if r else 1.0))
    return out


def identical_fraction(divs: list[PromptDivergence]) -> float | None:
    return sum(d.identical for d in divs) / len(divs) if divs else None


@dataclass
class Outcome:
    """Everything one case measured; ``numbers()`` is what results.json and the SPEC_RESULT line show."""

    delta: Delta
    completions: list[Completion]
    divergences: list[PromptDivergence] = field(default_factory=list)
    baseline_decode_tps: float | None = None

    @property
    def decode_tps(self) -> float | None:
        return decode_tps(self.completions)

    @property
    def speedup(self) -> float | None:
        tps, base = self.decode_tps, self.baseline_decode_tps
        return tps / base if tps and base else None

    def numbers(self) -> dict[str, Any]:
        d = self.delta
        return {
            "drafted": d.drafted,
            "accepted": d.accepted,
            "drafts": d.drafts,
            "accept_rate": _r(d.accept_rate),
            "accept_len": _r(d.accept_len),
            "per_position": list(d.per_position),
            "per_position_rate": [_r(x) for x in d.per_position_rate],
            "decode_tps": _r(self.decode_tps, 2),
            "baseline_decode_tps": _r(self.baseline_decode_tps, 2),
            "speedup": _r(self.speedup, 3),
            "identical_fraction": _r(identical_fraction(self.divergences)),
            "prompts": [dv.as_dict() for dv in self.divergences],
        }


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def spec_result_line(name: str, n: dict[str, Any]) -> str:
    """The seed suite's line, extended with the speedup."""

    def f(v: Any, fmt: str) -> str:
        return "n/a" if v is None else format(v, fmt)

    return (
        f"SPEC_RESULT {name}: drafted={n['drafted']} accepted={n['accepted']} steps={n['drafts']} "
        f"accept_rate={f(n['accept_rate'], '.4f')} accept_len={f(n['accept_len'], '.4f')} "
        f"speedup={f(n['speedup'], '.3f')}"
    )
