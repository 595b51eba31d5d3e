"""Per prompt category: the cold pass's counters, tokens and speed, category by category.

The cold pass sends a categorised prompt set one category after another and reads ``/metrics`` after each
(``measure.cold``), so each category's counters are an exact delta of the server's own counters, as
the case's are (their sum is the case's). Its decode speed is the cold pass's (the speculative side) and
the first baseline round's (the same prompts without speculation); a long-input bucket also records how
many prompt tokens the server processed, so the bucket's size is measured, not assumed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specsuite.cases.schema import Case
from specsuite.measure.outcome import (
    Completion,
    PromptDivergence,
    counter_numbers,
    decode_tps,
    identical_fraction,
)
from specsuite.server.metrics import Delta


@dataclass(frozen=True)
class CategoryPass:
    """One category's part of the cold pass: its name, prompt ids and counters."""

    name: str
    ids: tuple[str, ...]
    delta: Delta


def groups(case: Case) -> list[tuple[str, list[tuple[str, str]]]]:
    """The prompts as consecutive (category, prompts) groups; one group named "" when uncategorised.

    The schema orders a categorised set's prompts category by category (``cases.schema``), so each
    category is one group."""
    out: list[tuple[str, list[tuple[str, str]]]] = []
    cats = case.prompt_categories or ("",) * len(case.prompt_texts)
    for prompt, cat in zip(case.prompt_texts, cats, strict=True):
        if not out or out[-1][0] != cat:
            out.append((cat, []))
        out[-1][1].append(prompt)
    return out


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def _one(p: CategoryPass, spec: Sequence[Completion], base: Sequence[Completion],
         divs: Sequence[PromptDivergence]) -> dict[str, Any]:  # fmt: skip
    ids = set(p.ids)
    mine = [c for c in spec if c.id in ids]
    theirs = [c for c in base if c.id in ids]
    return {
        "prompts": len(p.ids),
        "prompt_tokens": sum(c.prompt_n for c in mine),
        **counter_numbers(p.delta),
        "identical_fraction": _r(identical_fraction([v for v in divs if v.id in ids])),
        "decode_tps": _r(decode_tps(mine), 2),
        "baseline_decode_tps": _r(decode_tps(theirs), 2),
    }


def numbers(
    passes: Sequence[CategoryPass],
    spec: Sequence[Completion],
    base: Sequence[Completion],
    divs: Sequence[PromptDivergence],
) -> dict[str, dict[str, Any]]:
    """Each category's numbers (the shape of ``record.CategoryStats``); empty when uncategorised."""
    return {p.name: _one(p, spec, base, divs) for p in passes if p.name}
