"""The server's speculative-decoding counters from ``/metrics``: snapshots, deltas and their sanity checks.

Counters are cumulative since the server started and the per-position block is only emitted after the first
speculative request, so a measurement is always the difference of two snapshots of the same process.

Builds before b10289 export no ``spec_decode_*`` counters at all (they arrived between b10280 and b10289;
read from the PyPI sdists' ``tools/server/server-context.cpp``). There the counters come from the responses'
``timings`` (``draft_n``, ``draft_n_accepted``, per request since b9093), and the number of drafts (the
verification steps accept_len divides by) is in no response: a Delta says which source it has
(``source``), and ``drafts`` is None where none was exported.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client.parser import text_string_to_metric_families

PREFIX = "llamacpp:spec_decode_"
DRAFT_TOKENS = f"{PREFIX}num_draft_tokens"
ACCEPTED = f"{PREFIX}num_accepted_tokens"
DRAFTS = f"{PREFIX}num_drafts"
PER_POS = f"{PREFIX}num_accepted_tokens_per_pos"


class Timed(Protocol):
    """A request's answer as the counters read it (measure.outcome.Completion): read-only attributes, so a
    frozen dataclass satisfies it."""

    @property
    def draft_n(self) -> int: ...

    @property
    def draft_n_accepted(self) -> int: ...


class MetricsError(Exception):
    """The counters cannot be trusted (server restarted between snapshots, counters missing)."""


@dataclass(frozen=True)
class Snapshot:
    drafted: int
    accepted: int
    drafts: int
    per_position: tuple[int, ...]
    start_time: str | None = None  # Process-Start-Time-Unix header: identifies the server process
    has_per_position: bool = False  # the block is absent before the first speculative request (or ever)
    exported: bool = True  # False: /metrics has no spec_decode_* counters at all (a build before b10289)


METRICS, TIMINGS = "metrics", "timings"  # where a Delta's counters came from


@dataclass(frozen=True)
class Delta:
    drafted: int
    accepted: int
    drafts: int | None  # None: the build exports no count of drafts (counters from the timings)
    per_position: tuple[int, ...] = field(default=())
    per_position_exported: bool = True
    source: str = METRICS

    @property
    def accept_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def accept_len(self) -> float | None:
        return 1 + self.accepted / self.drafts if self.drafts else None

    def not_in_build(self) -> list[str]:
        """What this build's counters could not give (counters from the timings: no count of drafts, so
        no accept_len and no per-position counts)."""
        if self.source != TIMINGS:
            return []
        return [
            "spec_decode_* counters in /metrics (counters from the responses' timings: draft_n, "
            "draft_n_accepted)",
            "the number of drafts: no accept_len, no per-position counts, no bound on a plausible speedup",
        ]

    @property
    def per_position_rate(self) -> list[float]:
        return (
            [c / self.drafts for c in self.per_position] if self.drafts else [0.0 for _ in self.per_position]
        )

    def sanity_errors(self) -> list[str]:
        """Relations the server's own accounting guarantees; any violation is a server or harness bug."""
        errors = []
        if self.accepted > self.drafted:
            errors.append(f"accepted {self.accepted} > drafted {self.drafted}")
        if self.drafts is not None and self.drafts > self.drafted:
            errors.append(f"drafts {self.drafts} > drafted {self.drafted}")
        if self.per_position_exported and sum(self.per_position) != self.accepted:
            errors.append(
                f"per-position counts {list(self.per_position)} sum to {sum(self.per_position)}, "
                f"not accepted {self.accepted}"
            )
        if any(b > a for a, b in itertools.pairwise(self.per_position)):
            errors.append(f"per-position counts {list(self.per_position)} increase with position")
        return errors

    def warnings(self) -> list[str]:
        if not self.per_position_exported and self.drafts and self.source == METRICS:
            return [
                f"the binary exports no {PER_POS}_total counters: per-position rates and their sanity "
                "check are unavailable for this run"
            ]
        return []


def parse(text: str, start_time: str | None = None) -> Snapshot:
    """Parse the Prometheus text exposition; a missing per-position block means no speculative request yet."""
    values: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            # The parser strips `_total` from counter family names but keeps it on samples.
            name = sample.name.removesuffix("_total")
            if name == PER_POS:
                per_pos[int(sample.labels["position"])] = sample.value
            elif name in (DRAFT_TOKENS, ACCEPTED, DRAFTS):
                values[name] = sample.value
    bad = {n: v for n, v in [*values.items(), *((f"{PER_POS}[{k}]", v) for k, v in per_pos.items())]
           if not math.isfinite(v) or v < 0}  # fmt: skip
    if bad:
        raise MetricsError(f"/metrics has counters that are not finite non-negative numbers: {bad}")
    missing = [n for n in (DRAFT_TOKENS, ACCEPTED, DRAFTS) if n not in values]
    if len(missing) == 3 and not per_pos:  # a build before b10289: the timings hold the counters
        return Snapshot(0, 0, 0, (), start_time, False, exported=False)
    if missing:
        raise MetricsError(f"/metrics lacks {', '.join(m + '_total' for m in missing)} (server too old?)")
    positions = tuple(int(per_pos.get(i, 0)) for i in range(max(per_pos) + 1)) if per_pos else ()
    return Snapshot(
        int(values[DRAFT_TOKENS]),
        int(values[ACCEPTED]),
        int(values[DRAFTS]),
        positions,
        start_time,
        bool(per_pos),
    )


def from_timings(completions: Iterable[Timed]) -> Delta:
    """The counters of these requests from their ``timings`` (a build that exports none in /metrics)."""
    done = list(completions)
    drafted = sum(c.draft_n for c in done)
    accepted = sum(c.draft_n_accepted for c in done)
    if min([drafted, accepted, *(c.draft_n for c in done), *(c.draft_n_accepted for c in done), 0]) < 0:
        raise MetricsError(f"the timings hold negative draft counts (draft_n {drafted}, accepted {accepted})")
    return Delta(drafted, accepted, None, (), False, TIMINGS)


def delta(before: Snapshot, after: Snapshot, completions: Iterable[Timed] | None = None) -> Delta:
    """after - before; raises MetricsError when the two snapshots cannot come from one server process.
    Where the build exports no counters (``Snapshot.exported``), the counters of ``completions`` (the
    requests between the two snapshots) from their timings."""
    if not (before.exported and after.exported):
        if before.exported != after.exported:
            raise MetricsError("/metrics exported spec_decode_* counters in one snapshot and not the other")
        if completions is None:
            raise MetricsError("/metrics exports no spec_decode_* counters and no timings were given")
        return from_timings(completions)
    if before.start_time and after.start_time and before.start_time != after.start_time:
        raise MetricsError(
            f"server restarted between snapshots (start time {before.start_time} -> "
            f"{after.start_time}); counters are per process"
        )
    width = max(len(before.per_position), len(after.per_position))
    pad = lambda p: list(p) + [0] * (width - len(p))  # noqa: E731 - a missing block counts as zeros
    pos = [a - b for a, b in zip(pad(after.per_position), pad(before.per_position), strict=True)]
    d = Delta(
        after.drafted - before.drafted,
        after.accepted - before.accepted,
        after.drafts - before.drafts,
        tuple(pos),
        after.has_per_position,
    )
    if min(d.drafted, d.accepted, d.drafts, *pos, 0) < 0:
        raise MetricsError(f"counters went backwards ({before} -> {after}): the server restarted")
    return d
