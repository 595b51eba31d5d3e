"""A physical bound on a measured speedup: above it the measurement is wrong, not the method.

A speculative step yields at most its accepted tokens plus one (the accept length, on average) and costs
at least one plain decode step (the target's verification of the draft is at least a forward pass; the
drafter adds to it). So decoding with speculation cannot be faster than accept length times plain decoding:
a round that drafted nothing not faster than plain decoding at all. A speedup above that bound plus a
margin means the two sides were not measured alike (the issue's baseline ran with another thread count
than its case: a speedup of 2150), or the machine stole one side's time: such a speed is recorded as
``implausible_speed``, not gated (neither its floor nor the history's relative gate judges it), and the
run's first lines say so.

MARGIN: the bound holds for the true speeds; a measured round adds noise to both sides. Measured on the
pinned CPU build (docs/speed.md): the rounds' speedup over their accept length, in cases whose bound is
nearly reached (nothing drafted: tiny-off, tiny-none; every step drafted for nothing), stayed within it.
"""

from __future__ import annotations

import statistics

from specsuite.results.record import CaseRecord, finite

MARGIN = 0.25


def round_lengths(rec: CaseRecord) -> list[float]:
    """Each speed round's accept length from its own counters (1.0 where it drafted nothing); none at all
    where a round's build counts no drafts (counters from the timings, before b10289): no bound then."""
    if any(r.drafts is None for r in rec.rounds):
        return []
    return [1 + r.accepted / r.drafts if r.drafts else 1.0 for r in rec.rounds]


def check(rec: CaseRecord, margin: float = MARGIN) -> str | None:
    """Why ``rec``'s speedup is impossible, or None (also where no speedup or no round was measured)."""
    up, lengths = finite(rec.speedup), round_lengths(rec)
    if up is None or not lengths:
        return None
    length = statistics.median(lengths)
    limit = length * (1 + margin)
    if up <= limit:
        return None
    speed = rec.speed
    rounds = ", ".join(f"{x:.3f}" for x in (speed.speedups if speed else []) if x is not None)
    base = ", ".join(f"{x:g}" for x in (speed.base_tps if speed else []) if x is not None)
    return (
        f"implausible_speed: speedup {up:.3f} is above the accept length of its rounds, {length:.3f}, plus "
        f"{margin:.0%} ({limit:.3f}); a speculative step yields at most accept-length tokens and costs at "
        f"least one plain decode step, so the measurement is wrong, not the method (round speedups "
        f"[{rounds}], baseline tokens/s [{base}]); this speed is not gated"
    )
