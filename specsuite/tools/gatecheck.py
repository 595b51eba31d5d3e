"""The gate's error rates, measured on N runs of one commit (what ``calibrate`` prints after the floors).

N runs of one binary are N answers to "did anything change?" whose true answer is no. Judged against each
other as the gates would judge them (every later run against every earlier one: ``regress.regressions``;
each run as the last of a window: ``changes.drift``), every failure is a false alarm. The same runs give
the speed noise: the spread of the per-round speedups within a run and of the run medians between runs
(coefficients of variation), and from it the smallest speed drop the relative gate catches in 95 % of
comparisons at the runs' repeats: simulated with that noise, judged by the gate's own rule (one-sided
Mann–Whitney p < ALPHA over the rounds, and a median drop beyond rtol). Every metric the relative gate
judges (results.metrics) counts its false alarms; the per-block cost's spread is reported as the speedup's.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specsuite.common import table
from specsuite.history import changes, regress
from specsuite.results import metrics
from specsuite.results.document import Run
from specsuite.results.record import CaseRecord, finite

POWER = 0.95
SIMULATIONS = 2000
_SEED = 17

GATED = tuple(m.name for m in metrics.GATED)  # every metric the relative gate judges (results.metrics)
_BLOCK = metrics.get("block_ratio")  # its spread is a column of its own


@dataclass
class CaseCheck:
    name: str
    pairs: int = 0  # (earlier, later) pairs judged by the relative gate
    false_alarms: dict[str, int] = field(default_factory=dict)  # metric -> pairs it failed
    windows: int = 0  # windows the drift gate judged
    drift_alarms: int = 0
    cv_within: float | None = None  # speedup rounds around their run's mean
    cv_between: float | None = None  # run means around the grand mean, the rounds' share removed
    block_cv_within: float | None = None  # the same for the per-round block ratios
    block_cv_between: float | None = None
    repeat: int = 0
    mde: float | None = None  # smallest drop caught with POWER; None: speed not gated (too few rounds)


def _samples(rec: CaseRecord) -> list[float]:
    return [v for v in (finite(x) for x in rec.speed_samples or []) if v is not None]


def spread(runs: Sequence[Sequence[float]]) -> tuple[float, float] | None:
    """(within-run CV, between-run CV) of speed rounds, one list per run (one-way analysis of variance:
    the between-run variance is that of the run means less the rounds' share of it)."""
    runs = [r for r in runs if len(r) >= 2]
    if len(runs) < 2:
        return None
    grand = statistics.fmean(v for r in runs for v in r)
    if grand <= 0:
        return None
    within = statistics.fmean(statistics.variance(r) for r in runs)
    k = statistics.fmean(len(r) for r in runs)
    between = max(0.0, statistics.variance([statistics.fmean(r) for r in runs]) - within / k)
    return math.sqrt(within) / grand, math.sqrt(between) / grand


def power(drop: float, cv_within: float, cv_between: float, repeat: int, rtol: float, sims: int) -> float:
    """The share of simulated comparisons the relative gate fails when the speedup fell by ``drop``: run
    means drawn with the between-run CV, their rounds around them with the within-run CV."""
    import numpy as np

    rng = np.random.default_rng(_SEED)
    means = 1 + rng.normal(0, cv_between, (2, sims, 1))
    base = means[0] * (1 + rng.normal(0, cv_within, (sims, repeat)))
    cur = (1 - drop) * means[1] * (1 + rng.normal(0, cv_within, (sims, repeat)))
    # Without ties the gate's p depends on the rank sum of the current rounds alone: one exact p per sum.
    ranks = (np.concatenate([cur, base], axis=1).argsort(axis=1).argsort(axis=1) + 1)[:, :repeat]
    sums = ranks.sum(axis=1).tolist()
    p_of: dict[int, float] = {}
    for w, row in zip(sums, ranks.tolist(), strict=True):
        if w not in p_of:
            y = [float(r) for r in range(1, 2 * repeat + 1) if r not in row]
            p_of[w] = regress.mann_whitney_less([float(r) for r in row], y)
    p = np.array([p_of[w] for w in sums])
    change = np.median(cur, axis=1) / np.median(base, axis=1) - 1
    return float(np.mean((p < regress.ALPHA) & (-change > rtol + regress.EPS)))


def smallest_drop(
    cv_within: float, cv_between: float, repeat: int, rtol: float, sims: int = SIMULATIONS
) -> float | None:
    """The smallest speedup drop (a fraction, to 0.5 %) caught in POWER of comparisons; None when not even
    a 90 % drop is (too few rounds for the test)."""
    if repeat < regress.MIN_SAMPLES or power(0.9, cv_within, cv_between, repeat, rtol, sims) < POWER:
        return None
    lo, hi = 0, 180  # in steps of 0.5 %: lo is not enough, hi is
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if power(mid / 200, cv_within, cv_between, repeat, rtol, sims) >= POWER:
            hi = mid
        else:
            lo = mid
    return hi / 200


def check(
    runs: Sequence[Run],
    names: Sequence[str],
    rtol: float,
    window: int,
    block_rtol: float = regress.BLOCK_RTOL,
    speed_rtols: Mapping[str, float] | None = None,
    decode_rtols: Mapping[str, float] | None = None,
    rtols: Mapping[str, Mapping[str, float | None]] | None = None,
) -> list[CaseCheck]:
    """Per case: false alarms of the relative gate over every (earlier, later) pair of ``runs`` (in the
    given order), of the drift gate over every window, the speed spread and the smallest drop caught.
    ``rtols``: each case's own tolerances by cases.toml key (``Case.rtols``); ``speed_rtols``,
    ``decode_rtols``: two of them given alone."""
    out = []
    for name in names:
        own: dict[str, float | None] = {
            "speed_rtol": (speed_rtols or {}).get(name),
            "decode_rtol": (decode_rtols or {}).get(name),
            **{k: v for k, v in (rtols or {}).get(name, {}).items() if v is not None},
        }
        speed_rtol = own["speed_rtol"]
        recs = [r.cases[name] for r in runs if name in r.cases and r.cases[name].measured]
        c = CaseCheck(name, false_alarms=dict.fromkeys(GATED, 0))
        for j, cur in enumerate(recs):
            for base in recs[:j]:
                c.pairs += 1
                regs = regress.regressions(
                    cur, base, rtol=rtol, block_rtol=block_rtol, tolerances=own, baseline_commit="a"
                )
                for reg in regs:
                    c.false_alarms[reg.metric] += 1
        c.windows, c.drift_alarms = _drift_alarms(recs, rtol, window, own)
        rounds = [_samples(r) for r in recs]
        c.repeat = min((len(r) for r in rounds), default=0)
        if (found := spread(rounds)) is not None:
            c.cv_within, c.cv_between = found
            c.mde = smallest_drop(found[0], found[1], c.repeat, rtol if speed_rtol is None else speed_rtol)
        blocks = [[v for v in (finite(x) for x in _BLOCK.samples(r) or []) if v is not None] for r in recs]
        if (found := spread(blocks)) is not None:
            c.block_cv_within, c.block_cv_between = found
        out.append(c)
    return out


def _drift_alarms(
    recs: Sequence[CaseRecord], rtol: float, window: int, own: Mapping[str, float | None] | None = None
) -> tuple[int, int]:
    """Each run as the last of a window of the runs before it, as if each were a new commit (each metric at
    its tolerance, the case's own ``own`` first, as the drift gate judges it)."""
    tol = {m.name: m.tolerance_of({"rtol": rtol, **(own or {})})[1] for m in metrics.DRIFT}
    # each run stands for a commit of its own
    rows = [changes.record_row(r, f"run {i + 1}", f"{i:07x}", None) for i, r in enumerate(recs)]
    judged = alarms = 0
    for j in range(changes.MIN_DRIFT_RUNS - 1, len(rows)):
        part = rows[max(0, j - window + 1) : j + 1]
        judged += 1
        alarms += any(
            changes.drift(changes.points_of(part, m), m, rtol=tol.get(m, rtol)) for m in changes.DRIFT_METRICS
        )
    return judged, alarms


HEADER = ("case", "pairs", f"false alarms ({'/'.join(m.short for m in metrics.GATED)})", "drift alarms",
          "speed CV in run", "between runs", "drop caught 95 %",
          "block ratio CV in run / between")  # fmt: skip


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.1f} %"


def render(checks: Sequence[CaseCheck], rtol: float) -> str:
    rows = []
    for c in checks:
        fa = "/".join(str(c.false_alarms[m]) for m in GATED)
        mde = (
            _pct(c.mde)
            if c.mde is not None
            else ("no speed gate" if c.repeat < regress.MIN_SAMPLES else "> 90 %")
        )
        blocks = f"{_pct(c.block_cv_within)} / {_pct(c.block_cv_between)}"
        rows.append([c.name, str(c.pairs), fa, f"{c.drift_alarms}/{c.windows}", _pct(c.cv_within),
                     _pct(c.cv_between), mde, blocks])  # fmt: skip
    pairs = sum(c.pairs for c in checks)
    alarms = sum(sum(c.false_alarms.values()) for c in checks)
    head = (
        f"gate check: {pairs} comparisons of runs of one commit (later against earlier, "
        f"rtol {rtol * 100:g} %), "
        f"{alarms} false alarm(s); drift windows {sum(c.windows for c in checks)}, "
        f"{sum(c.drift_alarms for c in checks)} false alarm(s)"
    )
    return f"{head}\n{table.render(HEADER, rows)}"
