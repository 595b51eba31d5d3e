"""Speculation where a case says it is, and nowhere else: over a server's life, not only its first pass.

Two checks of what the servers' own counters say, each a failure of its own, named first, after which the
case's speed is not gated (its numbers are of another configuration than the case names):

- ``baseline_speculated``: the speculation-off server drafted. It is started with the build's own word for
  no speculation (``measure.plain.off_flags``), and the counters decide, not the flags: a build whose
  default speculates and whose ``--spec-type`` adds to the default (upstream's #28391) drafts there
  whatever the harness passed, and every speedup, block cost and relative speed gate against it measures
  speculation against speculation.
- ``spec_disengaged``: a request that drafted on the fresh server (the cold pass) drafts nothing, or less
  than a quarter of it, when the same request comes again later in the server's life (a round). Upstream's
  #27692: speculative prefill switched itself off after a few long requests, and a case that counts only
  its cold pass never sees it; on a CPU such a silent stop even raises the speedup. A drafter that learns
  (ngram-mod, ngram-cache) drafts more, not less, on a request it has seen: a quarter leaves room for the
  counts that vary with sampling (temperature > 0) and none for a drafter that stopped.
"""

from __future__ import annotations

from collections.abc import Sequence

from specsuite.measure.judge import Failure
from specsuite.measure.outcome import Completion
from specsuite.server import metrics
from specsuite.server.metrics import Delta

DISENGAGED_FRACTION = 0.25  # a later request drafting under this fraction of its cold-pass draft stopped


def plain_counters(before: metrics.Snapshot, after: metrics.Snapshot, done: Sequence[Completion]) -> Delta:
    """What the speculation-off server drafted between two of its snapshots: its ``/metrics`` delta, or
    its requests' own counters (``timings.draft_n``) where they say more; either is its word that it
    drafted (a build may export one and not the other)."""
    counted = metrics.delta(before, after, done)
    timed = metrics.from_timings(done)
    return timed if timed.drafted > counted.drafted else counted


def baseline_speculated(plain: Delta | None) -> Failure | None:
    """The speculation-off server's counters over the case's rounds (None: not read) drafted something."""
    if plain is None or not plain.drafted:
        return None
    return Failure(
        "baseline_speculated",
        f"the speculation-off server drafted {plain.drafted} tokens and accepted {plain.accepted} (its own "
        f"counters, from {plain.source}): it is not plain decoding, so no speedup, block cost or speed gate "
        "is computed against it (a build whose default speculates: upstream's #28391)",
    )


def disengaged(cold: Sequence[Completion], rounds: Sequence[Sequence[Completion]]) -> Failure | None:
    """The first request of a round that drafted under DISENGAGED_FRACTION of what the same request
    (prompt and stream) drafted in the cold pass, with the request before it; None when every one kept
    drafting."""
    fresh = _by_request(cold)
    for r, got in enumerate(rounds, 1):
        seen: dict[tuple[int | None, str], int] = {}
        for k, c in enumerate(got):
            key = (c.stream, c.id)
            before = fresh.get(key, [])
            first = before[seen.get(key, 0)] if seen.get(key, 0) < len(before) else None
            seen[key] = seen.get(key, 0) + 1
            if first is None or not first.draft_n or c.draft_n >= first.draft_n * DISENGAGED_FRACTION:
                continue
            prior = f"after request {got[k - 1].id!r}" if k else "first of the round"
            return Failure(
                "spec_disengaged",
                f"speculation stopped: round {r}, request {k + 1} of {len(got)} ({c.id!r}{_stream(c)}, "
                f"{prior}): drafted {c.draft_n} accepted {c.draft_n_accepted}, against drafted "
                f"{first.draft_n} accepted {first.draft_n_accepted} on the fresh server (the cold pass); "
                "speed not gated",
            )
    return None


def _by_request(done: Sequence[Completion]) -> dict[tuple[int | None, str], list[Completion]]:
    out: dict[tuple[int | None, str], list[Completion]] = {}
    for c in done:
        out.setdefault((c.stream, c.id), []).append(c)
    return out


def _stream(c: Completion) -> str:
    return "" if c.stream is None else f", stream {c.stream}"
