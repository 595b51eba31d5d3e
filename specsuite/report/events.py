"""Events on a case's series: what its charts mark, at one run or over a stretch of runs, as plain data that
the page's script draws (a line, or a shaded span between two lines, with one label) and its tables list.

Two kinds: change points, and configuration changes (a changed ``--help`` default or build option between
two runs, ``history.changes.config_changes``: a dotted line on every chart of the case). Each is placed at
the first run after it; adjacent change points of one metric (each starting at the commit where the
previous one ended: a drift over consecutive commits) are one span with one label that says the whole
drift, ``-7.2 % over 4 commits, 555c3f9..68ee74f``: the change from the mean before the first step to the
mean after the last, and the commits as git writes a range (``git log 555c3f9..68ee74f`` lists the commits
of the drift). The script draws every kind the same way, in the kind's colour and dash.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from specsuite.history.changes import ChangePoint, ConfigChange, relative
from specsuite.llamacpp.identity import short
from specsuite.report.data import Point
from specsuite.report.render import percent
from specsuite.results.record import finite

STEPS_LISTED = 12  # a span's steps listed one by one on its page up to this many (else their count)


@dataclass(frozen=True)
class Event:
    kind: str  # "change", "config": a CSS class and the script's colour
    metric: str | None  # the chart it marks; None: every chart of the case
    first: int  # the index of the run it marks (a span: the first run after its first step)
    last: int  # a span: the first run after its last step; == first: one line
    label: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


_After = TypeVar("_After", ChangePoint, ConfigChange)


def located(series: Sequence[Point], cps: Sequence[_After]) -> list[tuple[int, _After]]:
    """Each change point (or configuration change) at the index of its first run after the change (by run
    id, else by commit)."""
    at_run = {p.run.run_id: i for i, p in reversed(list(enumerate(series)))}
    out = []
    for cp in cps:
        index = at_run.get(cp.after_run_id)
        if index is None:
            after = cp.after_commit.lower()
            index = next((i for i, p in enumerate(series) if _same(p.run.commit, after)), None)
        if index is not None:
            out.append((index, cp))
    return sorted(out, key=lambda pair: pair[0])


def _same(a: str, b: str) -> bool:
    a, b = a.lower(), b.lower()
    return bool(a) and bool(b) and (a.startswith(b) or b.startswith(a))


def spans(found: Sequence[tuple[int, ChangePoint]]) -> list[list[tuple[int, ChangePoint]]]:
    """The located change points of each metric, adjacent ones together (one starts at the commit where
    the previous one ended), in the order of their first runs."""
    by_metric: dict[str, list[list[tuple[int, ChangePoint]]]] = {}
    for index, cp in found:
        runs = by_metric.setdefault(cp.metric, [])
        if runs and _same(runs[-1][-1][1].after_commit, cp.before_commit):
            runs[-1].append((index, cp))
        else:
            runs.append([(index, cp)])
    return sorted((s for runs in by_metric.values() for s in runs), key=lambda s: (s[0][0], s[-1][0]))


def change_row(span: Sequence[tuple[int, ChangePoint]], series: Sequence[Point]) -> dict[str, Any]:
    """One span of change points as the case page's table, the index and the charts show it: the whole
    change (mean before its first step to mean after its last), its commits, its label."""
    (first, head), (last, tail) = span[0], span[-1]
    whole = relative(head.mean_before, tail.mean_after)
    change = whole if math.isfinite(whole) else None
    ps = [cp.p_value for _, cp in span]
    sure = None if any(p is None for p in ps) else max(p for p in ps if p is not None)
    if len(span) == 1:
        label = f"{percent(change)} at {short(head.after_commit, 7)}"
    else:
        since, until = short(head.before_commit, 7), short(tail.after_commit, 7)
        label = f"{percent(change)} over {len(span)} commits, {since}..{until}"
    run = series[first].run
    return {
        "index": first,
        "last": last,
        "metric": head.metric,
        "n_steps": len(span),
        "steps": [{"index": i, "commit": cp.after_commit, "change": finite(cp.change)} for i, cp in span]
        if len(span) <= STEPS_LISTED
        else [],
        "before_commit": head.before_commit,
        "after_commit": head.after_commit,
        "last_commit": tail.after_commit,
        "mean_before": finite(head.mean_before),
        "mean_after": finite(tail.mean_after),
        "change": change,
        "p_value": sure,  # a span is as sure as its least sure step (None: exact counters)
        "label": label,
        "run": run.run_id,
        "slug": run.slug,
    }


def change_event(row: dict[str, Any]) -> Event:
    return Event("change", row["metric"], row["index"], row["last"], row["label"])


def latest(rows: Sequence[dict[str, Any]], order: Sequence[str]) -> dict[str, Any] | None:
    """The span that ended last (the index's "last change point"); of spans ending at one run, the one of
    the first metric in ``order``."""
    rank = {m: i for i, m in enumerate(order)}
    return max(rows, key=lambda r: (r["last"], -rank.get(r["metric"], len(rank))), default=None)


def config_row(index: int, c: ConfigChange) -> dict[str, Any]:
    """A configuration change on a case page: the table's row and the charts' marker (its first line)."""
    between = f" between {short(c.before_commit, 7)} and {short(c.after_commit, 7)}"
    what = [line.removesuffix(between) for line in c.changes]
    label = what[0] + (f" (+{len(what) - 1})" if len(what) > 1 else "")
    return {"index": index, "before_commit": c.before_commit, "after_commit": c.after_commit, "what": what,
            "label": label}  # fmt: skip


def config_event(row: dict[str, Any]) -> Event:
    return Event("config", None, row["index"], row["index"], row["label"])
