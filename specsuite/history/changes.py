"""Change points over the history: where a case's metric changed, between which commits, by how much, and
how sure that is; and the drift rule the drift gate applies to a case's last runs.

A series is one case's metric on one device class, backend and cases.toml, one value per run, ordered by
commit ancestry when the llama.cpp mirror knows every commit of it (else by time). Two kinds:

- Acceptance (accept_rate, accept_len, pos0_rate) comes from counters that are deterministic for one device
  class, backend and model: any change between two commits is a change point, with no statistics
  (``p_value`` None). A series where two runs of one commit disagree, or a run's own speculative rounds
  did (``nondeterministic``), is judged as noisy instead.
- Speed (every metric the registry gates over rounds, results.metrics: the speedup, tokens/s, the per-block
  cost, the prefill against plain) is noisy; it counts from runs that repeated it, and a run whose speed
  was physically impossible (``implausible_speed``) has none. A change point is where the values before and
  after differ more than a reshuffle of the same values would: Pettitt's rank scan (the largest
  standardised Mann–Whitney difference over the splits between commits; ranks, so one outlier run moves
  nothing) with its p-value from a permutation test (the significance test of E-Divisive, Matteson &
  James, as Apache Otava uses it on MongoDB's history), applied by binary segmentation: the best split of
  a stretch, if significant, then the best split of each side.

Not a change-point package: apache-otava 0.8.0 pins numpy 2.2.* and pulls BigQuery, Postgres and Slack
clients; signal-processing-algorithms (MongoDB's E-Divisive) supports Python 3.11 only, with numpy < 2 and
gevent; ruptures finds segmentations by a penalised cost, with no significance, and the penalty has to be
tuned to each series' noise. And not scipy.stats either, though it has both pieces: the ranks
(``ranks_of``) and the permutation test (``permutation_p``) are written here with numpy, because the test
only ever decides whether p < alpha and can stop once that is settled, which ``scipy.stats.permutation_test``
cannot, and because importing scipy.stats alone takes as long as thousands of such tests. Measured
2026-12-06 (scipy 1.17.1, numpy 2.4.6, Python 3.11, 2 x86-64 cores under a compile's load):
``python -X importtime -c "import scipy.stats"``: 1.7 to 1.9 s, numpy's import included. One series
without a change, 1 999 reshuffles, ``python -m timeit`` of ``permutation_p(ranks, ks, ALPHA)`` against
``stats.permutation_test`` with ``_scan`` as its vectorised statistic: 0.07 ms against 5.0 ms at 40 runs,
0.22 ms against 21.7 ms at 200 (counted to the end by hand: 1.8 ms and 11.2 ms). scipy is a test dependency
only: tests/history/test_changes.py checks ``ranks_of`` against ``scipy.stats.rankdata`` and the p-value
against ``permutation_test``'s.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from specsuite.common.errors import UserError
from specsuite.history import queries
from specsuite.history.ancestry import default_mirror, in_commit_order
from specsuite.history.changecache import SplitCache, series_key
from specsuite.results import config, metrics
from specsuite.results.record import CaseRecord

METRICS = tuple(m.name for m in metrics.GATED)  # every metric the relative gate judges (results.metrics)
DETERMINISTIC = frozenset(m.name for m in metrics.GATED if m.gate == "exact")
DRIFT_METRICS = tuple(m.name for m in metrics.DRIFT)
_SPEEDS = frozenset(m.name for m in metrics.GATED if m.plausible)  # none from an implausible speed
ALPHA = 0.01  # a speed change point needs p below this (about 1 % of noise-only stretches show one)
RESAMPLES = 1999  # random reshuffles per test: p to about +-0.005 at 0.01; seeded, so the same answer
FIRST_BATCH = 64  # reshuffles drawn at once first, then twice as many each time (at most 1999 in all)
ALGORITHM = 2  # the detector's version, part of every cached series' key: bump when its answer changes
MIN_SPEED_SAMPLES = 3  # speed is judged only over runs that repeated it (regress.MIN_SAMPLES)
MIN_DRIFT_RUNS = 3  # a drift is more than one step
_EPS = 1e-12


@dataclass(frozen=True)
class ChangePoint:
    case: str
    metric: str
    device_class: str
    backend: str
    before_commit: str  # last commit before the change
    after_commit: str  # first commit after it
    after_run_id: str
    mean_before: float
    mean_after: float
    change: float  # (mean_after - mean_before) / mean_before; +-inf from a zero mean
    p_value: float | None  # None: a deterministic counter changed (exact, no statistics)
    cases_sha256: str = ""  # the cases.toml of the series (a changed one starts a new series)
    runs_before: int = 0  # the runs of the stretch before the change point (its mean's support)
    runs_after: int = 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: a non-finite change is null."""
        out = dict(self.__dict__)
        out["change"] = self.change if math.isfinite(self.change) else None
        return out


class Point(NamedTuple):
    """One run's value of one metric (a tuple: a site's series make tens of thousands)."""

    run_id: str
    commit: str
    started: str
    value: float
    nondeterministic: bool = False


@dataclass(frozen=True)
class Split:
    index: int  # the first point after the change
    p_value: float | None
    mean_before: float
    mean_after: float
    runs_before: int
    runs_after: int

    @property
    def change(self) -> float:
        return relative(self.mean_before, self.mean_after)


def relative(before: float, after: float) -> float:
    if before == 0:
        return 0.0 if after == 0 else math.copysign(math.inf, after)
    return (after - before) / abs(before)


# --- the statistics --------------------------------------------------------------------------------------


def _boundaries(points: Sequence[Point]) -> list[int]:
    """Where a split may fall: between two commits, never between two runs of one commit."""
    return [k for k in range(1, len(points)) if points[k].commit != points[k - 1].commit]


def is_deterministic(metric: str, points: Sequence[Point]) -> bool:
    """An acceptance metric whose runs agree wherever they can be compared (same commit, own rounds)."""
    if metric not in DETERMINISTIC or any(p.nondeterministic for p in points):
        return False
    seen: dict[str, float] = {}
    return all(seen.setdefault(p.commit, p.value) == p.value for p in points)


def _scan(ranks: Any, ks: Any) -> Any:
    """Pettitt's statistic along the last axis: the largest |rank sum of the first k - its expectation|,
    standardised by sqrt(k (n - k)), over the allowed splits ``ks``."""
    import numpy as np

    n = ranks.shape[-1]
    firsts = np.cumsum(ranks, axis=-1)[..., ks - 1]
    return (np.abs(firsts - ks * (n + 1) / 2) / np.sqrt(ks * (n - ks))).max(axis=-1)


def _scanner(n: int, ks: Any) -> Any:
    """``_scan`` over rows of ``n`` ranks, its constants computed once and its work done in place (a
    permutation test calls it for every batch)."""
    import numpy as np

    every = len(ks) == n - 1  # every split allowed (one run a commit): a slice, not a gather
    at = slice(0, n - 1) if every else ks - 1
    expected, scale = ks * (n + 1) / 2, 1 / np.sqrt(ks * (n - ks))

    def stat(ranks: Any) -> Any:
        firsts = np.cumsum(ranks, axis=-1)[..., at]
        firsts -= expected
        np.abs(firsts, out=firsts)
        firsts *= scale
        return firsts.max(axis=-1)

    return stat


def ranks_of(values: Sequence[float]) -> Any:
    """Ranks from 1, ties sharing their mean rank: what ``scipy.stats.rankdata`` gives (a test compares
    them), without importing scipy.stats (1.7 s; the module's docstring has the measurement)."""
    import numpy as np

    a = np.asarray(values, dtype=float)
    order = np.argsort(a, kind="stable")
    ordered = a[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], len(a)]
    out = np.empty(len(a))
    out[order] = np.repeat((starts + ends + 1) / 2, ends - starts)
    return out


def permutation_p(ranks: Any, allowed: Any, alpha: float) -> float:
    """The p-value of the scan statistic under "no change" (every order of the values equally likely): the
    share of ``RESAMPLES`` seeded reshuffles at least as extreme, counted as scipy's permutation_test counts
    them ((hits + 1) / (resamples + 1), ties within 100 ulps).

    By hand, in batches, because the answer is only ever compared with ``alpha``: once so many reshuffles
    were as extreme that p cannot end below alpha, the rest cannot change that decision, and the test stops
    (a series without a change, the usual one, stops after one batch). A p-value below alpha is exact; one
    returned early is at least alpha. scipy's permutation_test has no such stop, and draws its permutations
    by sorting random keys: counted to the end it still took 2 to 3 times as long as this loop (the
    module's docstring)."""
    import numpy as np

    stat = _scanner(len(ranks), allowed)
    observed = float(stat(ranks))
    floor = observed - abs(observed) * 100 * np.finfo(float).eps
    rng = np.random.default_rng(0)
    settled = math.ceil(alpha * (RESAMPLES + 1)) - 1  # this many as extreme: p >= alpha, whatever follows
    hits = done = 0
    batch = FIRST_BATCH  # doubling: a series far from a change settles in the first, small one
    while done < RESAMPLES and hits < settled:
        batch = min(batch, RESAMPLES - done)
        shuffled = rng.permuted(np.broadcast_to(ranks, (batch, len(ranks))), axis=1)
        hits += int(np.count_nonzero(stat(shuffled) >= floor))
        done += batch
        batch *= 2
    return (hits + 1) / (done + 1)


def _best(
    values: Sequence[float], ks: list[int], with_p: bool, alpha: float = ALPHA
) -> tuple[int, float | None] | None:
    """The best split among ``ks`` and its permutation p-value (None without ``with_p``; exact below
    ``alpha``, at least alpha otherwise); None when no split separates anything (every value equal)."""
    import numpy as np

    if not ks:
        return None
    ranks = ranks_of(values)
    allowed = np.asarray(ks, dtype=int)
    devs = np.abs(np.cumsum(ranks)[allowed - 1] - allowed * (len(values) + 1) / 2)
    if devs.max() <= _EPS:
        return None
    k = int(allowed[np.argmax(devs / np.sqrt(allowed * (len(values) - allowed)))])
    return (k, permutation_p(ranks, allowed, alpha)) if with_p else (k, None)


def _split(points: Sequence[Point], k: int, p: float | None, lo: int = 0, hi: int | None = None) -> Split:
    hi = len(points) if hi is None else hi
    before = [q.value for q in points[lo:k]]
    after = [q.value for q in points[k:hi]]
    return Split(k, p, statistics.fmean(before), statistics.fmean(after), len(before), len(after))


def best_split(points: Sequence[Point], metric: str, alpha: float = ALPHA) -> Split | None:
    """The most prominent change in ``points`` (oldest first): its place, the means of the two sides,
    and its p-value (None for a deterministic metric, whose any change is real; for a noisy one exact
    below ``alpha``, at least alpha otherwise)."""
    ks = _boundaries(points)
    det = is_deterministic(metric, points)
    found = _best([p.value for p in points], ks, with_p=not det, alpha=alpha)
    return None if found is None else _split(points, found[0], found[1])


def splits(points: Sequence[Point], metric: str, alpha: float = ALPHA) -> list[Split]:
    """Every change point of a series (oldest first), the means being those of the stretches between them.

    Deterministic: each commit whose value differs from the previous commit's. Noisy: binary segmentation,
    each split kept when its p-value is below ``alpha``."""
    if is_deterministic(metric, points):
        cuts = [k for k in _boundaries(points) if points[k].value != points[k - 1].value]
        ps: dict[int, float | None] = dict.fromkeys(cuts)
    else:
        ps = {}
        _segment(points, 0, len(points), alpha, ps)
        cuts = sorted(ps)
    edges = [0, *cuts, len(points)]
    return [_split(points, k, ps[k], edges[i], edges[i + 2]) for i, k in enumerate(cuts)]


def _segment(points: Sequence[Point], lo: int, hi: int, alpha: float, found: dict[int, float | None]) -> None:
    part = points[lo:hi]
    found_here = _best([p.value for p in part], _boundaries(part), with_p=True, alpha=alpha)
    if found_here is None or found_here[1] is None or found_here[1] >= alpha:
        return
    k = lo + found_here[0]
    found[k] = found_here[1]
    _segment(points, lo, k, alpha, found)
    _segment(points, k, hi, alpha, found)


# --- the drift rule --------------------------------------------------------------------------------------


def drift_window(rows: Sequence[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    """The earlier runs a drift is judged over (``rows`` nearest first, as baseline.earlier_runs gives
    them), oldest first: the nearest ``size - 1``, cut after the nearest one that already failed
    ``regressed`` or ``drifted``. That red run named its change; the window starts at its level, so one
    change is red once and a drift that goes on is red again when it has lost rtol more."""
    out: list[dict[str, Any]] = []
    for row in rows[: max(0, size - 1)]:
        out.append(row)
        if row.get("reason") in ("regressed", "drifted"):
            break
    return out[::-1]


def record_row(rec: CaseRecord, run_id: str, commit: str, started: str | None) -> dict[str, Any]:
    """A case record as a history row (the judged run is recorded only when it ends)."""
    return {
        "run_id": run_id,
        "commit": commit,
        "started": started,
        "reason": None,
        **{m.name: m.of(rec) for m in metrics.REGISTRY},
        "speed_repeat": rec.speed.repeat if rec.speed is not None else None,
        "nondeterministic": rec.nondeterministic,
        "implausible_speed": rec.implausible_speed is not None,
    }


def points_of(rows: Iterable[dict[str, Any]], metric: str) -> list[Point]:
    """The runs' values of ``metric`` (history rows); a run without one is left out, and speed counts
    only from runs that repeated it ``MIN_SPEED_SAMPLES`` times and measured a possible speed."""
    return points_by_metric(rows, (metric,))[metric]


def points_by_metric(rows: Iterable[dict[str, Any]], wanted: Sequence[str]) -> dict[str, list[Point]]:
    """``points_of`` for each of ``wanted``, in one pass over the rows."""
    out: dict[str, list[Point]] = {m: [] for m in wanted}
    for row in rows:
        run_id, commit, started = row["run_id"], row["commit"], str(row["started"] or "")
        # speed counts from runs that repeated it, and whose speed was physically possible
        repeated = (row.get("speed_repeat") or 0) >= MIN_SPEED_SAMPLES
        possible = not row.get("implausible_speed")
        nondet = bool(row.get("nondeterministic"))
        for metric in wanted:
            value = row.get(metric)
            if value is None or not math.isfinite(value):
                continue
            if metric not in DETERMINISTIC and not (repeated and (possible or metric not in _SPEEDS)):
                continue
            out[metric].append(Point(run_id, commit, started, float(value), nondet))
    return out


def drift(points: Sequence[Point], metric: str, *, rtol: float, alpha: float = ALPHA) -> Split | None:
    """The drop of more than ``rtol`` over ``points`` (a case's last runs oldest first, the judged run
    last): the best split's mean after is below its mean before by more than rtol, and for a noisy metric
    the split is significant. Improvements never count."""
    if len(points) < MIN_DRIFT_RUNS:
        return None
    found = best_split(points, metric, alpha)
    if found is None or found.mean_before <= 0 or found.change >= -rtol - _EPS:
        return None
    if found.p_value is not None and found.p_value >= alpha:
        return None
    return found


# --- over the whole history ------------------------------------------------------------------------------


def check_metric(metric: str | None) -> None:
    if metric is not None and metric not in METRICS:
        raise UserError(f"--metric {metric!r}: choose one of {', '.join(METRICS)}")


SeriesKey = tuple[str, str, str, str]  # case, device class, backend, cases.toml's sha256


def _series(rows: list[dict[str, Any]], mirror: Path) -> dict[SeriesKey, list[dict[str, Any]]]:
    """The rows as series, each in commit order: one order per device class and backend
    (``ancestry.in_commit_order``, the site's), so every case of it is on one line of commits."""
    devices: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        devices.setdefault((row["device_class"], row["backend"]), []).append(row)
    out: dict[SeriesKey, list[dict[str, Any]]] = {}
    for (device_class, backend), group in devices.items():
        for row in in_commit_order(group, lambda r: str(r["commit"]), mirror, lambda r: r["build"])[0]:
            key = (row["case"], device_class, backend, str(row["cases_sha256"] or ""))
            out.setdefault(key, []).append(row)
    return dict(sorted(out.items()))


def cached_splits(points: Sequence[Point], metric: str, cache: SplitCache | None) -> list[Split]:
    """``splits``, read from ``cache`` where this very series was computed before (noisy series only: a
    deterministic one costs a pass over its values; one of fewer than two runs, a metric those runs did not
    measure, has no split to keep)."""
    if cache is None or len(points) < 2 or is_deterministic(metric, points):
        return splits(points, metric)
    key = series_key(
        (ALGORITHM, ALPHA, RESAMPLES), metric, [(p.commit, p.value, p.nondeterministic) for p in points]
    )
    rows = cache.get(key)
    if rows is None:
        found = splits(points, metric)
        cache.put(
            key,
            [(s.index, s.p_value, s.mean_before, s.mean_after, s.runs_before, s.runs_after) for s in found],
        )
        return found
    return [Split(*row) for row in rows]


def find_changes(
    path: Path | None = None,
    *,
    case: str | None = None,
    metric: str | None = None,
    device: str | None = None,
    mirror: Path | None = None,
    runs: Collection[str] | None = None,
    cache: SplitCache | None = None,
) -> list[ChangePoint]:
    """Every change point in the history (``case``, ``metric``, ``device`` — a name or a class — narrow
    it), per series in commit order. ``mirror``: the llama.cpp git mirror that orders commits (default
    ``default_mirror()``; a missing one orders by time). ``runs``: only these runs (their run ids), as
    the site's window of the last runs: the permutation tests cost grows with the series, and a change
    point outside the window would mark nothing. ``cache``: the splits of series computed before. An
    unknown metric is a UserError."""
    check_metric(metric)
    rows = queries.series(path, case=case, device=device, runs=runs)
    out = []
    for key, series in _series(rows, default_mirror() if mirror is None else mirror).items():
        for m, points in points_by_metric(series, [metric] if metric else METRICS).items():
            out += [_change_point(key, m, points, s) for s in cached_splits(points, m, cache)]
    return out


def _change_point(key: SeriesKey, metric: str, points: Sequence[Point], s: Split) -> ChangePoint:
    name, device_class, backend, cases_sha = key
    after = points[s.index]
    return ChangePoint(
        case=name,
        metric=metric,
        device_class=device_class,
        backend=backend,
        before_commit=points[s.index - 1].commit,
        after_commit=after.commit,
        after_run_id=after.run_id,
        mean_before=s.mean_before,
        mean_after=s.mean_after,
        change=s.change,
        p_value=s.p_value,
        cases_sha256=cases_sha,
        runs_before=s.runs_before,
        runs_after=s.runs_after,
    )


# --- configuration changes -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigChange:
    """Two consecutive runs of one device class and backend whose configuration differs (the binary's
    --help defaults or its build options: results.config.changes)."""

    device_class: str
    backend: str
    before_commit: str
    before_run_id: str
    after_commit: str
    after_run_id: str
    changes: tuple[str, ...]


def config_changes(
    path: Path | None = None,
    *,
    device: str | None = None,
    mirror: Path | None = None,
    runs: Collection[str] | None = None,
) -> list[ConfigChange]:
    """Every configuration change in the history, per device class and backend in commit order (as the
    change points: ancestry where the mirror knows every commit, else build numbers where every run has
    one, else time)."""
    rows = queries.config_series(path, device=device)
    if runs is not None:
        rows = [row for row in rows if row["run_id"] in runs]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["device_class"], row["backend"]), []).append(row)
    where = default_mirror() if mirror is None else mirror
    out = []
    for (device_class, backend), group in groups.items():
        ordered, _ = in_commit_order(group, lambda r: str(r["commit"]), where, lambda r: r["build"])
        for a, b in itertools.pairwise(ordered):
            found = config.changes((a["config"], None), (b["config"], None), (a["commit"], b["commit"]))
            if found:
                out.append(ConfigChange(device_class, backend, a["commit"], a["run_id"], b["commit"],
                                        b["run_id"], tuple(found)))  # fmt: skip
    return out


def across(point: ChangePoint, found: Sequence[ConfigChange]) -> list[str]:
    """The configuration changes between a change point's last commit before and its first after."""
    return [
        line
        for c in found
        if (c.device_class, c.backend, c.after_commit)
        == (point.device_class, point.backend, point.after_commit)
        for line in c.changes
    ]
