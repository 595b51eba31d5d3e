"""Per-block overhead of a case, from the server's own timings and the drafts counter, round by round.

A verification block is one speculative step: the drafter drafts, the target verifies the draft in one
batch. Its cost is the speculative server's decode milliseconds of a round over that round's drafts (the
``/metrics`` delta); the plain decode cost per token is the baseline's decode milliseconds over its decoded
tokens in the same round; their ratio says how many plain decode steps a block costs. Acceptance and the
drafter's own speed can stay put while this ratio grows: llama.cpp issue 25908 (draft-simple 937 -> 165
tok/s at the same acceptance and drafter speed, about 20 ms more per block). Where every step drafts,
``speedup = tokens_per_block / ratio``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from specsuite.measure.outcome import Speed
from specsuite.results.record import BlockCost, CaseRecord
from specsuite.server.metrics import Delta


def _div(a: float, b: float | None) -> float | None:
    """a / b; None where b is 0 or unknown (no count of drafts: counters from a build's timings)."""
    return a / b if b else None


def block_cost(speed: Speed, rounds: Sequence[Delta]) -> BlockCost | None:
    """Each round's numbers (None where the round drafted nothing); None without speed rounds."""
    if not speed.spec_ms:
        return None
    out = BlockCost()
    for spec_ms, spec_steps, base_ms, base_steps, delta in zip(
        speed.spec_ms, speed.spec_steps, speed.base_ms, speed.base_steps, rounds, strict=False
    ):
        block, token = _div(spec_ms, delta.drafts), _div(base_ms, base_steps)
        out.block_ms.append(_round(block, 4))
        out.token_ms.append(_round(token, 4))
        out.ratios.append(_round(_div(block, token) if block is not None and token else None, 4))
        out.tokens_per_block.append(_round(_div(spec_steps, delta.drafts), 4))
    return out


def _round(x: float | None, nd: int) -> float | None:
    return None if x is None else round(x, nd)


def _median(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return round(statistics.median(got), 4) if got else None


def fill(rec: CaseRecord, speed: Speed, rounds: Sequence[Delta]) -> None:
    """The record's per-block numbers: each round's, and their medians."""
    rec.blocks = block_cost(speed, rounds)
    if rec.blocks is None:
        return
    rec.block_ms = _median(rec.blocks.block_ms)
    rec.token_ms = _median(rec.blocks.token_ms)
    rec.block_ratio = _median(rec.blocks.ratios)
    rec.tokens_per_block = _median(rec.blocks.tokens_per_block)
