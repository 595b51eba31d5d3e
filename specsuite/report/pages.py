"""What each page shows, as plain data: the index's rows, a case's series over commits (columns for its
charts), a run's header and cases. The templates lay these out; the page's script draws the charts and
the long tables from the JSON part."""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from typing import Any, NamedTuple

from specsuite.report.data import ChangePointLike, Group, RunRow, slug
from specsuite.report.folders import Bisect, Folder
from specsuite.report.render import sparkline
from specsuite.results.document import Run
from specsuite.results.record import CaseRecord, finite
from specsuite.results.verdict import verdict


class Metric(NamedTuple):
    key: str
    label: str
    floor: str | None  # the floor of a case record that applies to it
    digits: int  # as summary.md prints it


METRICS = (
    Metric("accept_rate", "accept rate", "min_accept_rate", 4),
    Metric("accept_len", "accept length", "min_accept_len", 4),
    Metric("pos0_rate", "position-0 rate", None, 4),
    Metric("speedup", "speedup", "min_speedup", 3),
)
SPARK_RUNS = 30
BAD = frozenset({"failed", "drifted", "error", "interrupted"})
Series = list[tuple[RunRow, CaseRecord]]


def status_of(rec: CaseRecord) -> tuple[str, str]:
    """(kind, words): kind is one of passed, uncalibrated, failed, drifted, skipped, error, interrupted,
    unknown (a CSS class too); the words say why where the run said why."""
    status, reason = rec.status or "unknown", rec.reason
    if status == "passed":
        return ("uncalibrated", "passed, uncalibrated") if rec.uncalibrated else ("passed", "passed")
    if status == "failed" and reason == "drifted":
        return "drifted", "failed: drifted"
    kind = status if status in ("failed", "skipped", "error", "interrupted") else "unknown"
    return kind, f"{status}: {reason}" if reason else status


def value(rec: CaseRecord, key: str) -> float | None:
    """A metric of a record as the history lists it: pos0 with its fallback, speedup as the median of the
    A-B-B-A rounds where there were rounds."""
    if key == "speedup":
        median = rec.speed.speedup_median if rec.speed is not None else None
        return finite(median) if finite(median) is not None else finite(rec.speedup)
    return finite(rec.metric(key))


def spread(rec: CaseRecord) -> tuple[float | None, float | None]:
    """The lowest and highest per-round speedup of the A-B-B-A samples (two rounds or more)."""
    samples = [s for s in (finite(v) for v in (rec.speed_samples or [])) if s is not None]
    return (min(samples), max(samples)) if len(samples) > 1 else (None, None)


def first_line(text: str | None, limit: int = 240) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def case_href(group: Group, case: str) -> str:
    """A case page from the site's root."""
    return f"cases/{group.slug}/{slug(case)}.html"


# --- change points ---------------------------------------------------------------------------------------


def located(series: Series, cps: Sequence[ChangePointLike]) -> list[tuple[int, ChangePointLike]]:
    """Each change point at the index of its first run after the change (by run id, else by commit)."""
    at_run = {run.run_id: i for i, (run, _) in reversed(list(enumerate(series)))}
    out = []
    for cp in cps:
        index = at_run.get(cp.after_run_id)
        if index is None:
            after = cp.after_commit.lower()
            index = next((i for i, (run, _) in enumerate(series) if _same(run.commit, after)), None)
        if index is not None:
            out.append((index, cp))
    return sorted(out, key=lambda pair: pair[0])


def _same(a: str, b: str) -> bool:
    return bool(a) and bool(b) and (a.startswith(b) or b.startswith(a))


def change_row(index: int, cp: ChangePointLike, series: Series) -> dict[str, Any]:
    run = series[index][0]
    return {
        "index": index,
        "metric": cp.metric,
        "before_commit": cp.before_commit,
        "after_commit": cp.after_commit,
        "mean_before": finite(cp.mean_before),
        "mean_after": finite(cp.mean_after),
        "change": cp.change if isinstance(cp.change, float) and math.isfinite(cp.change) else None,
        "p_value": finite(cp.p_value),
        "run": run.run_id,
        "slug": run.slug,
    }


# --- the index -------------------------------------------------------------------------------------------


def index_row(group: Group, case: str, series: Series, changes: list[dict[str, Any]]) -> dict[str, Any]:
    """One case of a device class and backend: its latest run's numbers and status, a sparkline of its last
    runs, and the last change point."""
    run, rec = series[-1]
    kind, words = status_of(rec)
    tail = series[-SPARK_RUNS:]
    key = "accept_rate" if any(value(r, "accept_rate") is not None for _, r in tail) else "speedup"
    spark = sparkline([value(r, key) for _, r in tail], [status_of(r)[0] in BAD for _, r in tail])
    return {
        "case": case,
        "href": case_href(group, case),
        "kind": kind,
        "status": words,
        "message": first_line(rec.message) if kind != "passed" else "",
        "numbers": [(value(rec, m.key), f".{m.digits}f") for m in METRICS],
        "spark": spark,
        "spark_metric": key.replace("_", " "),
        "run": run.run_id,
        "run_href": f"runs/{run.slug}.html",
        "commit": run.commit,
        "change": changes[-1] if changes else None,
    }


# --- a case page -----------------------------------------------------------------------------------------


def _floor(rec: CaseRecord, name: str | None) -> float | None:
    return finite(rec.floors.get(name)) if name else None


def per_position(series: Series) -> dict[str, Any]:
    """The latest run's acceptance by draft position, beside its baseline's (the run the relative gate
    compared it with; else the nearest earlier run in this order that has one)."""
    with_rates = [(run, rec) for run, rec in series if rec.per_position_rate]
    if not with_rates:
        return {"latest": None, "baseline": None, "note": "no run of this case recorded per-position rates"}
    run, rec = with_rates[-1]
    base, note = None, "the run the relative gate compared it with"
    if rec.baseline is not None:
        base = next(((r, c) for r, c in reversed(series) if r.run_id == rec.baseline.run_id), None)
    if base is None:
        earlier = [(r, c) for r, c in with_rates[:-1] if r.commit != run.commit]
        base, note = (earlier[-1], "the nearest earlier commit in this order") if earlier else (None, "")
    if base is None:
        note = "no earlier commit recorded per-position rates"
    return {"latest": _rates(run, rec), "baseline": _rates(*base) if base else None, "note": note}


def _rates(run: RunRow, rec: CaseRecord) -> dict[str, Any]:
    return {"run": run.run_id, "slug": run.slug, "commit": run.commit, "rates": rec.per_position_rate}


def case_data(group: Group, case: str, series: Series, changes: list[dict[str, Any]]) -> dict[str, Any]:
    """The columns of a case's charts and runs table: one entry per run, in commit order."""
    kinds = [status_of(rec) for _, rec in series]
    lows_highs = [spread(rec) for _, rec in series]
    return {
        "case": case,
        "commit": [run.commit for run, _ in series],
        "run": [run.run_id for run, _ in series],
        "slug": [run.slug for run, _ in series],
        "started": [run.started for run, _ in series],
        "kind": [k for k, _ in kinds],
        "status": [w for _, w in kinds],
        "message": [first_line(rec.message) for _, rec in series],
        "metrics": [m._asdict() for m in METRICS],
        "values": {m.key: [value(rec, m.key) for _, rec in series] for m in METRICS},
        "floors": {m.key: [_floor(rec, m.floor) for _, rec in series] for m in METRICS if m.floor},
        "speed_lo": [lo for lo, _ in lows_highs],
        "speed_hi": [hi for _, hi in lows_highs],
        "changes": changes,
        "per_position": per_position(series),
        "ordered_by": group.ordered_by,
    }


# --- a run page ------------------------------------------------------------------------------------------


def run_header(run: Run, folder: Folder | None, bisects: list[Bisect]) -> dict[str, Any]:
    v = verdict(run)
    return {
        "headline": run.verdict or v.headline,
        "green": v.green,
        "attention": v.attention,
        "history_line": run.history.line if run.history is not None else None,
        "models": sorted(run.models.items()),
        "baselines": sorted(run.baselines.items()),
        "files": folder.files if folder else {},
        "logs": folder.logs if folder else {},
        "skipped": folder.skipped if folder else [],
        "bisects": bisects,
    }


def run_cases(run: Run, group: Group, folder: Folder | None, slugs: dict[str, str]) -> list[dict[str, Any]]:
    """Every case of the run for its page's script: the record's numbers, counters, server command and
    the links that exist in this site (its log, its case page, its baseline's run page)."""
    logs = folder.logs if folder else {}
    out = []
    for rec in run.cases.values():
        kind, words = status_of(rec)
        out.append(
            {
                "name": rec.name,
                "kind": kind,
                "status": words,
                "message": rec.message,
                "method": rec.method,
                "spec_type": rec.spec_type,
                "n_max": rec.n_max,
                "target": rec.target,
                "draft": rec.draft,
                "floors": rec.floors,
                "values": {m.key: value(rec, m.key) for m in METRICS},
                "identical_fraction": finite(rec.identical_fraction),
                "counters": {"drafted": rec.drafted, "accepted": rec.accepted, "drafts": rec.drafts},
                "per_position": rec.per_position,
                "per_position_rate": rec.per_position_rate,
                "decode_tps": finite(rec.decode_tps),
                "baseline_decode_tps": finite(rec.baseline_decode_tps),
                "speedups": rec.speed_samples or [],
                "baseline": _baseline(rec, slugs),
                "command": shlex.join(rec.command or []),
                "log_href": logs.get(rec.log or ""),
                "case_href": "../" + case_href(group, rec.name),
                "wall_s": finite(rec.wall_s),
                "warnings": rec.warnings,
            }
        )
    return out


def _baseline(rec: CaseRecord, slugs: dict[str, str]) -> dict[str, Any] | None:
    base = rec.baseline
    if base is None:
        return None
    where = slugs.get(base.run_id or "")
    return {"commit": base.commit, "run": base.run_id, "regressions": base.regressions, "slug": where}
