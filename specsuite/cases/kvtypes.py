"""The KV-cache axis's values: a member's cache types (``"q8_0"``, ``"f16/q8_0"``), its name and its flags.

A value names the target's cache type and, after a slash, the draft's (one name: both); K and V take the
same type. The reference every member is judged against is f16 for both, llama-server's default.
"""

from __future__ import annotations

from dataclasses import dataclass

# The KV cache types the pinned build accepts (llama-server --help: -ctk/-ctv, -ctkd/-ctvd "allowed values").
KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
_ONE = "|".join(KV_TYPES)
PATTERN = rf"^({_ONE})(/({_ONE}))?$"
DESCRIPTION = f"a KV cache type ({', '.join(KV_TYPES)}) or TARGET/DRAFT"
# What a member's acceptance must reach, as a fraction of its f16 member's, where the case says nothing:
# upstream's #25725 went from 0.99 at f16 to 0.00-0.02 at q8_0; llama.cpp's own KV quantisation moved
# draft-simple on Gemma 3 270M to 0.96 (q8_0) and 0.75 (q4_0) of f16's (issue 49).
MIN_ACCEPT_FRACTION = 0.9
# The flags the axis owns, each the pinned build's first spelling: the target's K and V, the draft's K and V.
TARGET_FLAGS = ("--cache-type-k", "--cache-type-v")
DRAFT_FLAGS = ("--spec-draft-type-k", "--spec-draft-type-v")


@dataclass(frozen=True, order=True)
class KvPair:
    """One member's cache types: the target's and the draft's (each for K and V)."""

    target: str
    draft: str

    @classmethod
    def parse(cls, value: str) -> KvPair:
        """``"q8_0"`` (both) or ``"f16/q8_0"`` (target/draft); the value matched ``PATTERN`` already."""
        target, _, draft = value.partition("/")
        return cls(target, draft or target)

    @property
    def label(self) -> str:
        """The member's name suffix: ``q8_0``, or ``f16-q8_0`` where the two differ."""
        return self.target if self.target == self.draft else f"{self.target}-{self.draft}"

    @property
    def spelled(self) -> str:
        """For messages: ``q8_0/q8_0`` (target/draft)."""
        return f"{self.target}/{self.draft}"

    @property
    def flags(self) -> tuple[str, ...]:
        """The server flags that set it, appended to the case's ``server_args`` (always these eight)."""
        return (
            *(x for f in TARGET_FLAGS for x in (f, self.target)),
            *(x for f in DRAFT_FLAGS for x in (f, self.draft)),
        )


REFERENCE = KvPair("f16", "f16")


def member_name(table: str, pair: KvPair) -> str:
    """The table's name for its f16 member (the reference, as an np-1 member keeps a sweep's name),
    ``<table>-<label>`` for the others."""
    return table if pair == REFERENCE else f"{table}-{pair.label}"
