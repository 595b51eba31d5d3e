"""The crossover of a sweep: up to which number of slots speculation still beats plain decoding.

A sweep's members (``parallel = [1, 2, 4, ...]`` in cases.toml) each measure the aggregate tokens/s of
their streams on the speculative server and on its baseline at the same slots and streams; the speedup
of a member is the median of its rounds' ratios (``concurrency.speedup``). The crossover is the largest
np whose member pays (speedup above 1) with every smaller np's member paying too: 0 when np 1 already
does not, None when there is nothing to judge (no np-1 member measured speed in this run). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from specsuite.results.record import CaseRecord, finite


@dataclass(frozen=True)
class Point:
    parallel: int
    speedup: float | None  # None: the member measured no speed (acceptance only, or it failed first)


@dataclass(frozen=True)
class Crossover:
    sweep: str
    method: str
    points: tuple[Point, ...]  # this run's members, by np

    @property
    def pays_up_to(self) -> int | None:
        return pays_up_to(self.points)

    def line(self) -> str:
        """``dflash: pays up to np 2; at np 4 0.74x (np 1 1.42x · np 2 1.10x · np 4 0.74x)``."""
        shown = " · ".join(f"np {p.parallel} {_x(p.speedup)}" for p in self.points)
        up = self.pays_up_to
        if up is None:
            return f"{self.sweep}: no crossover (no speed measured at np 1 in this run) ({shown})"
        after = next((p for p in self.points if p.parallel > up), None)
        if up == 0:
            head = f"does not pay at np 1 ({_x(self.points[0].speedup)})"
        elif after is None:
            head = f"pays up to np {up}, the largest measured"
        elif after.speedup is None:
            head = f"pays up to np {up}; np {after.parallel} not measured"
        else:
            head = f"pays up to np {up}; at np {after.parallel} {_x(after.speedup)}"
        return f"{self.sweep}: {head} ({shown})"


def _x(speedup: float | None) -> str:
    return "n/a" if speedup is None else f"{speedup:.2f}x"


def speedup(rec: CaseRecord) -> float | None:
    """A member's aggregate speedup (median of its rounds'), or None."""
    return finite(rec.concurrency.speedup) if rec.concurrency is not None else None


def pays_up_to(points: Iterable[Point]) -> int | None:
    """The largest np paying with every smaller one (points by np, np 1 first); 0, or None (see module)."""
    ordered = sorted(points, key=lambda p: p.parallel)
    if not ordered or ordered[0].parallel != 1 or ordered[0].speedup is None:
        return None
    up = 0
    for p in ordered:
        if p.speedup is None or p.speedup <= 1.0:
            break
        up = p.parallel
    return up


def crossovers(records: Iterable[CaseRecord]) -> list[Crossover]:
    """One per sweep among ``records`` (a run's cases), in the order the sweeps first appear."""
    members: dict[str, list[CaseRecord]] = {}
    for rec in records:
        if rec.sweep is not None:
            members.setdefault(rec.sweep, []).append(rec)
    return [
        Crossover(
            sweep,
            recs[0].method,
            tuple(Point(r.parallel, speedup(r)) for r in sorted(recs, key=lambda r: r.parallel)),
        )
        for sweep, recs in members.items()
    ]


def annotate(records: Iterable[CaseRecord]) -> list[Crossover]:
    """Write each sweep's crossover into its members' records (the history keeps it); the crossovers."""
    recs = list(records)
    found = crossovers(recs)
    by_sweep = {c.sweep: c.pays_up_to for c in found}
    for rec in recs:
        if rec.sweep is not None and rec.concurrency is not None:
            rec.concurrency.crossover_np = by_sweep[rec.sweep]
    return found
