"""The relative regression gate: one case record against the same case at a baseline commit. Pure.

Floors catch a method that broke; this gate catches a commit that made a method worse: a 14 % relative
drop in acceptance still clears a floor calibrated with margin. It judges every gated metric of the
registry (results.metrics) by its row: which way is worse, which options set its tolerance, and its gate.
Every check is one-sided (an improvement never fails), and a number the current run lost (null or NaN)
while the baseline had one is a regression, never a pass.

Acceptance (``exact``: accept_rate, accept_len, pos0_rate) is deterministic on one device and binary, so a
plain relative tolerance is the gate. Speed (``rounds``: the speedup, decode tokens/s, the per-block cost,
tokens per block, prefill and time to first token against plain) is noisy, so a move counts only when it is
both significant (one-sided Mann–Whitney U, p < ALPHA, over the per-round samples) and larger than its
tolerance. With 3 samples a side the smallest attainable p is 1/20 = 0.05, so speed can only fail from 4
rounds on. A speed that was physically impossible on either side (``implausible_speed``) is not compared.
Each Regression carries ``line``: what moved in a few words, the first lines' words for it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specsuite.common.errors import UserError
from specsuite.llamacpp.identity import short
from specsuite.results import metrics
from specsuite.results.crossover import Point, pays_up_to, speedup
from specsuite.results.metrics import Metric
from specsuite.results.record import CaseRecord, CategoryStats, finite, is_number

METRICS = tuple(m.name for m in metrics.GATED if m.gate == "exact")
ALPHA = 0.05
MIN_SAMPLES = 3
EXACT_MAX_N = 60  # n + m up to this: exact distribution; beyond, the normal approximation
EPS = 1e-12  # a drop of exactly rtol, give or take float rounding, is not a regression
BLOCK_RTOL = metrics.BLOCK_RTOL


@dataclass(frozen=True)
class Regression:
    metric: str
    current: float | None  # None: the current run has no number (null or NaN)
    baseline: float
    change: float  # (current - baseline) / baseline; NaN when current is missing
    message: str
    line: str = ""  # what moved, in a few words: "prefill 0.98 -> 0.66x of plain, -32.7 %, 4 rounds vs 4"
    rank: int = 9  # results.metrics.Metric.rank: the first lines name the lowest first


def _pct(x: float) -> str:
    return f"{x * 100:.1f} %"


def _moved(x: float) -> str:
    """A relative change as a line says it: ``+720.2 %``, ``-32.7 %``."""
    return f"{x * 100:+.1f} %"


def _check_exact(m: Metric, current: CaseRecord, baseline: CaseRecord, tol: tuple[str, float], at: str
                 ) -> Regression | None:  # fmt: skip
    base = m.of(baseline)
    if base is None:
        return None  # nothing to compare against (also when both sides are null)
    cur = m.of(current)
    if cur is None:
        shown = m.raw(current)
        what = "null" if shown is None else repr(shown)
        message = f"{m.name} is missing ({what}) here but {base:.4f} at baseline {at}"
        return Regression(m.name, None, base, math.nan, message, f"{m.label} missing (was {m.text(base)})")
    if base <= 0:
        return None  # a zero baseline cannot drop (rates and lengths are never negative)
    change = (cur - base) / base
    if m.worse(change) <= tol[1] + EPS:
        return None
    way = "below" if m.higher_is_better else "above"
    message = (
        f"{m.name} {cur:.4f} is {_pct(m.worse(change))} {way} {base:.4f} at baseline {at} "
        f"({_tol(tol)} {tol[1] * 100:g} %)"
    )
    line = f"{m.label} {m.text(base)} -> {m.text(cur)}, {_moved(change)}"
    return Regression(m.name, cur, base, change, message, line, m.rank)


def _tol(tol: tuple[str, float]) -> str:
    """The option that set a tolerance, as a message names it: ``rtol``, ``block rtol``."""
    return tol[0].replace("_", " ")


def _check_rounds(m: Metric, current: CaseRecord, baseline: CaseRecord, tol: tuple[str, float], at: str
                  ) -> Regression | None:  # fmt: skip
    """A move of the median the wrong way beyond the tolerance that is significant (one-sided Mann–Whitney
    over the rounds). A round without a sample is a regression, unless the metric may have none (``gaps``:
    a round that drafted nothing has no block)."""
    if m.plausible and (current.implausible_speed or baseline.implausible_speed):
        return None  # one side's speed was measured wrong: nothing to compare
    cur_raw, base_raw = m.samples(current), m.samples(baseline)
    base = [v for v in map(finite, base_raw or []) if v is not None]
    cur_all = [finite(x) for x in cur_raw or []]
    cur = [v for v in cur_all if v is not None]
    if len(base) < MIN_SAMPLES or cur_raw is None or len(cur if m.gaps else cur_all) < MIN_SAMPLES:
        return None  # gated only where both runs repeated it enough to judge noise
    base_med = statistics.median(base)
    if len(cur) < len(cur_all) and not m.gaps:
        message = f"{m.name} samples {cur_raw} include null/NaN; median {base_med:.3f} at baseline {at}"
        return Regression(m.name, None, base_med, math.nan, message, f"{m.label} not measured in every round")
    cur_med = statistics.median(cur)
    change = (cur_med - base_med) / base_med if base_med > 0 else 0.0
    p = mann_whitney_less(cur, base) if m.higher_is_better else mann_whitney_less(base, cur)
    if p >= ALPHA or m.worse(change) <= tol[1] + EPS:
        return None
    way = "below" if m.higher_is_better else "above"
    shown = metrics.BY_NAME[m.shown_as] if m.shown_as else None
    pair = (shown.of(baseline), shown.of(current)) if shown else (None, None)
    also = f"; {shown.label} {pair[0]} -> {pair[1]} {shown.unit}" if shown and None not in pair else ""
    message = (
        f"{m.name} median {cur_med:.3f} is {_pct(m.worse(change))} {way} {base_med:.3f} at baseline {at}"
        f"{also} (Mann–Whitney p = {p:.3g}, n = {len(cur)}/{len(base)}; {_tol(tol)} {tol[1] * 100:g} %)"
    )
    return Regression(m.name, cur_med, base_med, change, message, _line(m, shown, (current, baseline),
                      (cur_med, base_med), change, (len(cur), len(base))), m.rank)  # fmt: skip


def _line(m: Metric, shown: Metric | None, recs: tuple[CaseRecord, CaseRecord], meds: tuple[float, float],
          change: float, n: tuple[int, int]) -> str:  # fmt: skip
    """``label before -> after unit, change, N rounds vs M``: the medians of the rounds, or (``shown_as``)
    the numbers of the metric a reader knows it by, with this one's change."""
    rounds = f"{n[0]} rounds vs {n[1]}"
    cur, base = (shown.of(recs[0]), shown.of(recs[1])) if shown else (None, None)
    if shown is None or cur is None or base is None:
        return f"{m.label} {_number(m, meds[1])} -> {m.text(meds[0])}, {_moved(change)}, {rounds}"
    return (f"{m.label} {_number(shown, base)} -> {shown.text(cur)}, {_moved(change)} in {m.unit}, "
            f"{rounds}")  # fmt: skip


def _number(m: Metric, value: float) -> str:
    return f"{value:.{m.digits}f}"


def _fraction(name: str, value: float) -> None:
    if not (is_number(value) and 0 <= value < 1):
        raise UserError(f"{name} {value!r} is not a fraction in [0, 1): give e.g. 0.05 for 5 %")


def regressions(
    current: CaseRecord,
    baseline: CaseRecord,
    *,
    rtol: float = 0.05,
    block_rtol: float = BLOCK_RTOL,
    speed_rtol: float | None = None,
    decode_rtol: float | None = None,
    tolerances: Mapping[str, float | None] | None = None,
    baseline_commit: str,
) -> list[Regression]:
    """The regressions of ``current`` against ``baseline`` (the same case at two commits), in the registry's
    order; none: []. Each gated metric's tolerance is the first of its options given (results.metrics):
    ``tolerances`` (a case's own, by cases.toml key: speed_rtol, decode_rtol, prefill_rtol), then
    ``speed_rtol``, ``decode_rtol``, ``block_rtol``, ``rtol``."""
    given = {"rtol": rtol, "block_rtol": block_rtol, "speed_rtol": speed_rtol, "decode_rtol": decode_rtol}
    given.update({k: v for k, v in (tolerances or {}).items() if v is not None})
    for key, value in given.items():
        if value is not None:
            _fraction(key.replace("_", " "), value)
    at = short(baseline_commit, 7)
    found: list[Regression | None] = []
    for m in metrics.GATED:
        check = _check_exact if m.gate == "exact" else _check_rounds
        found.append(check(m, current, baseline, m.tolerance_of(given), at))
    found += _check_categories(current, baseline, rtol, at)
    return [r for r in found if r is not None]


def first_lines(found: Sequence[Regression]) -> list[str]:
    """What moved, the most specific first (``rank``: acceptance, then what a block or the prefill costs,
    then decode speed, then the speedup they make): what a case's first line names."""
    return [r.line for r in sorted(found, key=lambda r: r.rank) if r.line]


def _check_categories(current: CaseRecord, baseline: CaseRecord, rtol: float, at: str) -> list[Regression]:
    """Each prompt category's acceptance by the same one-sided rule: a category can drop while the case's
    total holds (one category's loss hidden by another's gain)."""
    out = []
    for name, base_cat in baseline.categories.items():
        cur_cat = current.categories.get(name)
        for metric in ("accept_rate", "accept_len"):
            base, cur = finite(getattr(base_cat, metric)), finite(getattr(cur_cat, metric, None))
            if base is None or base <= 0 or (cur is not None and (base - cur) / base <= rtol + EPS):
                continue
            shown = "missing here but" if cur is None else f"{cur:.4f}, {_pct((base - cur) / base)} below"
            message = (
                f"category {name!r}: {metric} {shown} {base:.4f} at baseline {at} (rtol {rtol * 100:g} %)"
            )
            change = math.nan if cur is None else (cur - base) / base
            m = metrics.BY_NAME[metric]
            line = f"category {name!r}: {m.label} {m.text(base)} -> {m.text(cur)}"
            out.append(Regression(f"{name}/{metric}", cur, base, change, message, line, m.rank))
    return out


# --- the crossover of a sweep ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Moved:
    gated: bool  # significant: the case fails with reason crossover_moved; else a warning
    message: str


def crossover_moved(
    current: CaseRecord, baseline: CaseRecord, earlier: Sequence[CaseRecord], *, baseline_commit: str
) -> Moved | None:
    """A sweep's member at np k where speculation stopped paying in this run (every smaller np of the sweep
    paid: ``earlier``, this run's members before it), while the baseline's sweep still paid at k
    (its recorded crossover, results.crossover). Gated as a speed drop is: only where this member's
    per-round aggregate speedups are significantly below the baseline's at k (one-sided Mann–Whitney,
    p < ALPHA, MIN_SAMPLES rounds or more a side); a move that is not is a warning."""
    was = baseline.concurrency.crossover_np if baseline.concurrency is not None else None
    if current.sweep is None or current.concurrency is None or was is None or was < current.parallel:
        return None
    lower = [r for r in earlier if r.sweep == current.sweep and r.parallel < current.parallel]
    points = [Point(r.parallel, speedup(r)) for r in [*lower, current]]
    now = pays_up_to(points)
    if now is None or now != max((p.parallel for p in points[:-1]), default=0):
        return None  # it still pays here, or it stopped paying at a smaller np (judged there)
    assert baseline.concurrency is not None  # it recorded a crossover
    cur = [v for v in map(finite, current.concurrency.speedups) if v is not None]
    base = [v for v in map(finite, baseline.concurrency.speedups) if v is not None]
    head = (
        f"{current.sweep}: speculation paid up to np {was} at baseline {short(baseline_commit, 7)}, now up "
        "to np "
        f"{now}: at np {current.parallel} {_x(speedup(current))} against {_x(speedup(baseline))}"
    )
    if len(cur) < MIN_SAMPLES or len(base) < MIN_SAMPLES:
        n = f"{len(cur)}/{len(base)}"
        return Moved(False, f"{head}; not gated: {n} rounds (the gate needs {MIN_SAMPLES + 1} a side)")
    p = mann_whitney_less(cur, base)
    rounds = f"aggregate speedup per round {[round(x, 3) for x in cur]} against {[round(x, 3) for x in base]}"
    if p >= ALPHA:
        return Moved(False, f"{head}; not significant ({rounds}, Mann–Whitney p = {p:.3g})")
    return Moved(True, f"{head} ({rounds}, Mann–Whitney p = {p:.3g})")


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


# --- the counters, exactly ------------------------------------------------------------------------------

COUNTERS = ("drafted", "accepted", "drafts")


def _signed(n: int) -> str:
    return f"+{n}" if n > 0 else f"−{-n}"


def counter_changes(current: CaseRecord, baseline: CaseRecord) -> str:
    """The acceptance counters against the baseline's, exactly (one device class, backend and model make
    them deterministic, so a change of one token is a change): ``identical``; the changes, e.g.
    ``accepted 36 -> 33 (−3); position 2: 12 -> 9 (−3)``; ``nondeterministic`` when either run's own
    rounds disagreed (the counters mean nothing exact then); or ``not recorded``."""
    if current.nondeterministic or baseline.nondeterministic:
        return "nondeterministic"
    if any(getattr(r, k) is None for r in (current, baseline) for k in COUNTERS):
        return "not recorded"
    parts = _changes(current, baseline)
    parts += _category_changes(current, baseline)
    return "; ".join(parts) or "identical"


def _changes(current: CaseRecord | CategoryStats, baseline: CaseRecord | CategoryStats) -> list[str]:
    parts = []
    for k in COUNTERS:
        a, b = getattr(baseline, k), getattr(current, k)
        if a != b:
            parts.append(f"{k} {a} → {b} ({_signed((b or 0) - (a or 0))})")
    if current.per_position and baseline.per_position:  # empty: the binary exports no per-position block
        width = max(len(current.per_position), len(baseline.per_position))
        pad = lambda p: [*p, *[0] * (width - len(p))]  # noqa: E731 - a missing position counted nothing
        pairs = zip(pad(baseline.per_position), pad(current.per_position), strict=True)
        parts += [f"position {i}: {a} → {b} ({_signed(b - a)})" for i, (a, b) in enumerate(pairs) if a != b]
    return parts


def _category_changes(current: CaseRecord, baseline: CaseRecord) -> list[str]:
    """Each prompt category's counters against the baseline's category, exactly (``category NAME: ...``);
    a category one side lacks is named (the prompt set changed, or the baseline predates categories)."""
    parts = []
    for name in dict.fromkeys([*baseline.categories, *current.categories]):
        a, b = baseline.categories.get(name), current.categories.get(name)
        if a is None or b is None:
            parts.append(f"category {name}: {'new' if a is None else 'gone'}")
        elif changed := _changes(b, a):
            parts.append(f"category {name}: {', '.join(changed)}")
    return parts


# --- Mann–Whitney U -------------------------------------------------------------------------------------
# Written by hand, not scipy.stats.mannwhitneyu: its method="exact" counts the arrangements as if no two
# values were tied, and the speedups, recorded to 4 decimals, tie (scipy 1.17.1, x = [1, 2, 2, 3] below
# y = [2, 3, 3, 4]: 0.100, where counting all C(8, 4) = 70 arrangements gives 1/7 = 0.143); its
# PermutationMethod is exact only where it enumerates every arrangement (C(60, 30) for 30 repeats a side),
# else a random estimate. The exact distribution with ties, for the repeats a run makes, is a short dynamic
# program; and scipy is no runtime dependency (importing scipy.stats: 1.7 s, history/changes.py).


def _doubled_midranks(values: Sequence[float]) -> list[int]:
    """2 x the midrank of each value in ``values`` (ties share the mean rank; doubling keeps integers)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = i + j + 2  # (i+1 + j+1) / 2, doubled
        i = j + 1
    return ranks


def _exact_cdf(ranks2: list[int], n: int, w2: int) -> float:
    """P(sum of n of ``ranks2`` drawn without replacement <= w2): counts every subset by rank sum."""
    import numpy as np  # heavy: imported only where a test of speed runs, not by every `specsuite` command

    top = sum(sorted(ranks2)[-n:])
    ways = np.zeros((n + 1, top + 1))  # ways[k, s]: subsets of k items with rank sum s (float: no overflow)
    ways[0, 0] = 1.0
    for r in ranks2:
        for k in range(n, 0, -1):
            ways[k, r:] += ways[k - 1, : top + 1 - r]
    return float(ways[n, : min(w2, top) + 1].sum() / ways[n].sum())


def _normal_cdf(ranks2: list[int], n: int, w2: int) -> float:
    """Normal approximation of the rank-sum CDF with the tie correction and a continuity correction."""
    total, m = len(ranks2), len(ranks2) - n
    ties: dict[int, int] = {}
    for r in ranks2:
        ties[r] = ties.get(r, 0) + 1
    tie_term = sum(t**3 - t for t in ties.values()) / (total * (total - 1))
    var = n * m / 12 * (total + 1 - tie_term)
    if var <= 0:
        return 1.0  # every value tied: no evidence either way
    z = (w2 / 2 + 0.5 - n * (total + 1) / 2) / math.sqrt(var)
    return 0.5 * math.erfc(-z / math.sqrt(2))


def mann_whitney_less(x: Sequence[float], y: Sequence[float]) -> float:
    """One-sided Mann–Whitney p-value for "x tends to be smaller than y".

    p = P(W <= W_obs) for W the rank sum of x, under the null that every assignment of the pooled ranks
    (midranks for ties) to x is equally likely: exact for n + m <= EXACT_MAX_N, else the normal
    approximation. E.g. x entirely below y with 3 values each: p = 1/C(6,3) = 1/20.
    """
    if not x or not y:
        raise ValueError("Mann–Whitney needs at least one sample on each side")
    ranks2 = _doubled_midranks([*x, *y])
    n, w2 = len(x), sum(ranks2[: len(x)])
    if len(ranks2) <= EXACT_MAX_N:
        return min(1.0, _exact_cdf(ranks2, n, w2))
    return _normal_cdf(ranks2, n, w2)
