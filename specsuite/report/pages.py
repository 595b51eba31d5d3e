"""What each page shows, as plain data: the index's rows, a case's series over commits (columns for its
charts), a run's header and cases. The templates lay these out; the page's script draws the charts and
the long tables from the JSON part."""

from __future__ import annotations

from typing import Any

import msgspec

from specsuite.history.changes import ConfigChange
from specsuite.llamacpp.identity import short
from specsuite.report import events
from specsuite.report.data import METRICS, Group, Member, Point, slug
from specsuite.report.folders import Bisect, Folder
from specsuite.report.render import sparkline
from specsuite.results.document import HistoryNote, Run
from specsuite.results.names import names_phrase
from specsuite.results.record import KNOWN_BUG, NOT_IN_BUILD, CaseRecord
from specsuite.results.summary import first_lines
from specsuite.results.verdict import verdict

SPARK_RUNS = 30
# The index's sparklines: acceptance and speed, so a case that lost speed while its counters held still
# shows it (one entry more to add a metric)
SPARK_METRICS = tuple(m for m in METRICS if m.key in ("accept_rate", "speedup"))
BAD = frozenset({"failed", "drifted", "error", "interrupted"})
# Where a case stands in the index's table and on a run page: failures first, then what weakens a green
# (a known bug, a status the site does not know, a skip), then the passed; cases that did not run (not in
# this build) last, counted
RANK = {"failed": 0, "drifted": 0, "error": 0, "interrupted": 0, "known": 1, "unknown": 1,
        "uncalibrated": 2, "passed": 2, "skipped": 3}  # fmt: skip
Series = list[Point]


def status_of(status: str | None, reason: str | None, uncalibrated: bool) -> tuple[str, str]:
    """(kind, words): kind is one of passed, uncalibrated, failed, drifted, known (a known upstream bug,
    still present), skipped (not in this build too), error, interrupted, unknown (a CSS class too); the
    words say why where the run said why."""
    status = status or "unknown"
    if status == "passed":
        return ("uncalibrated", "passed, uncalibrated") if uncalibrated else ("passed", "passed")
    if status == "failed" and reason == "drifted":
        return "drifted", "failed: drifted"
    kind = status if status in ("failed", "skipped", "error", "interrupted") else "unknown"
    kind = "skipped" if status == NOT_IN_BUILD else "known" if status == KNOWN_BUG else kind
    # a known bug's case shows as the bug (still present: a fixed one's case passed); its message names it
    words: dict[str, str] = {NOT_IN_BUILD: "not in this build", KNOWN_BUG: "known bug"}
    said = words.get(status, status)
    return kind, f"{said}: {reason}" if reason else said


def point_status(p: Point) -> tuple[str, str]:
    return status_of(p.status, p.reason, p.uncalibrated)


def spread(p: Point) -> tuple[float | None, float | None]:
    """The lowest and highest per-round speedup of the A-B-B-A samples (two rounds or more)."""
    samples = [v for v in p.speedups if v is not None]  # decoded as JSON numbers: finite
    return (min(samples), max(samples)) if len(samples) > 1 else (None, None)


def first_line(text: str | None, limit: int = 240) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def case_href(group: Group, case: str) -> str:
    """A case page from the site's root."""
    return f"cases/{group.slug}/{slug(case)}.html"


# --- the index -------------------------------------------------------------------------------------------


def index_row(group: Group, case: str, series: Series, changes: list[dict[str, Any]]) -> dict[str, Any]:
    """One case of a device class and backend: its latest run's numbers and status (with why a passed
    speedup below 1.0 passed), a sparkline of each of ``SPARK_METRICS`` over its last runs, and its last
    change point (the whole span of adjacent ones)."""
    latest = series[-1]
    kind, words = point_status(latest)
    tail = series[-SPARK_RUNS:]
    bad = [point_status(p)[0] in BAD for p in tail]
    sparks = []
    for m in SPARK_METRICS:
        values = [p.values[m.key] for p in tail]
        if any(v is not None for v in values):
            sparks.append({"metric": m.key, "label": m.label, "svg": sparkline(values, bad, m.label)})
    message = first_line(latest.message) if kind != "passed" else ""
    notes = [n for n in (message, speed_note(latest)) if n]
    return {
        "case": case,
        "href": case_href(group, case),
        "kind": kind,
        "rank": RANK.get(kind, 1),
        "status": words,
        "message": message,
        "speed_note": speed_note(latest),
        # a detail row under the case's row (its message, why a speedup below 1.0 passed); a case that did
        # not run keeps its note to the badge's tooltip
        "notes": notes if kind != "skipped" else [],
        "tooltip": " · ".join([words, *notes]),  # the badge's words whole (a long one ends in an ellipsis)
        "numbers": [(latest.values[m.key], f".{m.digits}f") for m in METRICS],
        "sparks": sparks,
        "run": latest.run.run_id,
        "run_href": f"runs/{latest.run.slug}.html",
        "commit": latest.run.commit,
        "change": events.latest(changes, [m.key for m in METRICS]),
    }


def speed_note(p: Point) -> str:
    """Why a passed case with a speedup below 1.0 passed: its run did not judge speed, it has no speed
    floor, or its floor is lower; with the A-B-B-A rounds' range where there is one. '' otherwise."""
    if p.status != "passed" or p.speedup is None or p.speedup >= 1.0:
        return ""
    floor = p.floors.get("min_speedup")
    if not p.run.speed_judged:
        why = "speed not judged in this run (cases side by side on a CPU build: acceptance only)"
    elif floor is None:
        why = "no speed floor for this case (min_speedup): its speed is reported, not judged"
    elif p.speedup >= floor:
        why = f"at or above its speed floor {floor:.3f}"
    else:
        why = f"its speed floor {floor:.3f} was not applied"
    lo, hi = spread(p)
    rounds = (
        f"; its A-B-B-A rounds ranged {lo:.3f} to {hi:.3f}"
        if lo is not None and hi is not None and hi > lo
        else ""
    )
    return f"speedup {p.speedup:.3f} < 1: {why}{rounds}"


# --- a case page -----------------------------------------------------------------------------------------


def per_position(series: Series) -> dict[str, Any]:
    """The latest run's acceptance by draft position, beside its baseline's (the run the relative gate
    compared it with; else the nearest earlier commit in this order that has one)."""
    with_rates = [p for p in series if p.per_position_rate]
    if not with_rates:
        return {"latest": None, "baseline": None, "note": "no run of this case recorded per-position rates"}
    latest = with_rates[-1]
    note = "the run the relative gate compared it with"
    base = next((p for p in reversed(series) if p.run.run_id == latest.baseline_run), None)
    if base is None:
        earlier = [p for p in with_rates[:-1] if p.run.commit != latest.run.commit]
        base, note = (earlier[-1], "the nearest earlier commit in this order") if earlier else (None, "")
    if base is None:
        note = "no earlier commit recorded per-position rates"
    return {"latest": _rates(latest), "baseline": _rates(base) if base else None, "note": note}


def by_np(series: Series, sweeps: dict[int, dict[str, list[Member]]]) -> dict[str, Any] | None:
    """A sweep member's page: the aggregate speedup over plain decoding by np of its sweep, at the latest
    run and at the run its gate compared it with, else the nearest earlier commit in this order that ran
    the sweep (None for a case of no sweep)."""
    latest = series[-1]
    found = next(
        ((s, m) for s, m in sweeps.get(latest.run.pk, {}).items() if any(x.case == latest.case for x in m)),
        None,
    )
    if found is None:
        return None
    sweep, members = found
    ran = [p for p in series[:-1] if sweep in sweeps.get(p.run.pk, {}) and p.run.commit != latest.run.commit]
    base = next((p for p in series if p.run.run_id == latest.baseline_run), ran[-1] if ran else None)
    was = sweeps.get(base.run.pk, {}).get(sweep) if base is not None else None
    return {
        "sweep": sweep,
        "latest": _members(latest, members),
        "baseline": _members(base, was) if base is not None and was else None,
    }


def _members(p: Point, members: list[Member]) -> dict[str, Any]:
    return {
        "run": p.run.run_id,
        "commit": p.run.commit,
        "nps": [m.parallel for m in members],
        "speedups": [m.speedup for m in members],
    }


def _rates(p: Point) -> dict[str, Any]:
    return {"run": p.run.run_id, "slug": p.run.slug, "commit": p.run.commit, "rates": p.rates()}


def case_data(
    group: Group,
    case: str,
    series: Series,
    changes: list[dict[str, Any]],
    configs: list[dict[str, Any]] | None = None,
    sweeps: dict[int, dict[str, list[Member]]] | None = None,
) -> dict[str, Any]:
    """The columns of a case's charts and runs table: one entry per run, in commit order; a sweep's member
    also its sweep's speedup by np."""
    kinds = [point_status(p) for p in series]
    lows_highs = [spread(p) for p in series]
    return {
        "case": case,
        "commit": [p.run.commit for p in series],
        "run": [p.run.run_id for p in series],
        "slug": [p.run.slug for p in series],
        "started": [p.run.started for p in series],
        "kind": [k for k, _ in kinds],
        "status": [w for _, w in kinds],
        "message": [first_line(p.message) for p in series],
        "metrics": [m.shown() for m in METRICS],
        "values": {m.key: [p.values[m.key] for p in series] for m in METRICS},
        "floors": {m.key: [p.floors.get(m.floor) for p in series] for m in METRICS if m.floor},
        "speed_lo": [lo for lo, _ in lows_highs],
        "speed_hi": [hi for _, hi in lows_highs],
        "changes": changes,
        "events": [events.change_event(row).as_dict() for row in changes]
        + [events.config_event(row).as_dict() for row in configs or []],
        "config": configs or [],  # configuration changes: the table's rows
        "per_position": per_position(series),
        "by_np": by_np(series, sweeps or {}),
        "ordered_by": group.ordered_by,
    }


# --- a run page ------------------------------------------------------------------------------------------


def run_header(run: Run, folder: Folder | None, bisects: list[Bisect]) -> dict[str, Any]:
    """The top of a run page: its verdict and its first lines as summary.md has them (loud ones first:
    configuration changes, drifts, known bugs, what weakens a green; then its baseline)."""
    v = verdict(run)
    return {
        "headline": run.verdict or v.headline,
        "green": v.green,
        "first": [{"loud": loud, "text": line} for loud, line in first_lines(run, v)],
        "files": folder.files if folder else {},
        "logs": folder.logs if folder else {},
        "skipped": folder.skipped if folder else [],
        "bisects": bisects,
    }


def restored(run: Run, change: ConfigChange | None) -> Run:
    """``run`` with a history note where its document has none (the history's own record of it, or a
    results.json that kept none): rebuilt from what the history keeps, so that its first lines still name
    its baselines (those its case records name) and its configuration change (``change``: the history's,
    between it and the run before it on its setup, in the site's order)."""
    if run.history is not None:
        return run
    used: dict[str, list[str]] = {}
    for r in run.cases.values():
        if r.baseline is not None:
            base = f"{short(r.baseline.commit, 12)} (run {r.baseline.run_id or '?'})"
            used.setdefault(base, []).append(r.name)
    note = HistoryNote(basis="as its case records name them", used=used)
    said = [f"{base} for {names_phrase(names, len(run.cases))}" for base, names in used.items()]
    note.line = f"baseline ({note.basis}): {'; '.join(said)}" if said else None
    if change is not None:
        note.config_base = f"{short(change.before_commit, 12)} (run {change.before_run_id})"
        note.config_changes = list(change.changes)
    return msgspec.structs.replace(run, history=note)


def run_data(run: Run, group: Group, folder: Folder | None, slugs: dict[str, str]) -> dict[str, Any]:
    """What the run page's script lays out: the cases, the models, the speculation-off servers."""
    logs = folder.logs if folder else {}
    servers = [
        {"key": k, "command": b.command, "log_href": logs.get(b.log or "")}
        for k, b in sorted(run.baselines.items())
    ]
    return {"cases": run_cases(run, group, folder, slugs), "models": run.models, "servers": servers}


# A run page's parts, in order: its cases by PARTS, each case in its part in the run's order
PARTS = ("failures", "warnings", "passed", "not in this build")


def part_of(rec: CaseRecord, kind: str) -> str:
    """Which part of a run page a case is listed in: a failure, a warning (a known bug, a skip, an
    impossible speed, a warning of its own), passed, or not in this build (counted, not listed)."""
    if kind in BAD:
        return "failures"
    if rec.status == NOT_IN_BUILD:
        return "not in this build"
    if kind in ("known", "unknown", "skipped") or rec.warnings or rec.implausible_speed:
        return "warnings"
    return "passed"


def run_cases(run: Run, group: Group, folder: Folder | None, slugs: dict[str, str]) -> list[dict[str, Any]]:
    """Every case of the run for its page's script, failures first (``PARTS``): the record as it is
    (msgspec encodes it as results.json has it), its status in words, its part, and the links that exist
    in this site (its log, its case page, its baseline's run page)."""
    logs = folder.logs if folder else {}
    out = []
    for rec in run.cases.values():
        kind, words = status_of(rec.status, rec.reason, rec.uncalibrated)
        base = rec.baseline.run_id if rec.baseline is not None else None
        out.append(
            {
                "record": rec,
                "kind": kind,
                "status": words,
                "part": part_of(rec, kind),
                "log_href": logs.get(rec.log or ""),
                "case_href": "../" + case_href(group, rec.name),
                "baseline_slug": slugs.get(base or ""),
            }
        )
    return sorted(out, key=lambda c: PARTS.index(c["part"]))
