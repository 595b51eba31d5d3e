"""The index's first screen: what changed since the last run, for each device class and backend.

Its newest run (by start time) against what each of its cases did the time before (the case's previous
run on that setup: a run of a few cases compares them with their own last runs): the cases that turned
red, those still red, those fixed; the known upstream bugs its cases reproduce (still present, fixed, not
seen); its configuration changes; its suspects (the upstream changes that touch what a red or fixed case
exercises); and all its first lines, as summary.md has them. Each names its case and links to it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specsuite.common.errors import UserError
from specsuite.history.changes import ConfigChange
from specsuite.report import data, folders, pages
from specsuite.report.data import Group, Point, RunRow
from specsuite.results.document import Run
from specsuite.results.merge import NOT_RUN
from specsuite.results.record import CaseRecord, bug_name
from specsuite.results.summary import config_lines, first_lines, run_config_line, suspect_lines
from specsuite.results.verdict import KNOWN_HEADS, verdict

SHOWN = 12  # cases named in one line of the first screen; the rest are counted, with a link to the table


def _order(run: RunRow) -> tuple[str, int]:
    return run.started, run.pk


def latest_runs(group: Group) -> tuple[RunRow, RunRow | None]:
    """The group's newest run by start time, and the one before it."""
    by_time = sorted(group.runs, key=_order)
    return by_time[-1], (by_time[-2] if len(by_time) > 1 else None)


def _document(db: Path, results: Path | None, run: RunRow, change: ConfigChange | None) -> Run:
    """The run as its page shows it: its results.json where the site finds it, else the history's record."""
    try:
        folder = folders.find_folder(results, run)
    except (OSError, ValueError, UserError) as exc:  # as a run page: one run's folder, not the site
        print(
            f"warning: report: run {run.run_id[:80]!r}: {' '.join(str(exc).split())[:300]}", file=sys.stderr
        )
        folder = None
    if folder is not None:
        doc = folder.run
    else:
        records = next((recs for _, recs in data.case_records(db, [run])), [])
        doc = data.run_document(run, records)
    return pages.restored(doc, change)


def _before(series: Sequence[Point], run: RunRow) -> Point | None:
    """A case's record in the last run before ``run`` (by start time) that ran it."""
    earlier = [p for p in series if _order(p.run) < _order(run)]
    return max(earlier, key=lambda p: _order(p.run)) if earlier else None


def _item(group: Group, name: str, why: str, rec: CaseRecord | None = None) -> dict[str, Any]:
    return {
        "case": name,
        "href": pages.case_href(group, name),
        "why": why,
        "title": pages.first_line(rec.message) if rec is not None else "",
    }


def _cases(group: Group, doc: Run) -> tuple[dict[str, list[dict[str, Any]]], list[RunRow]]:
    """The run's cases by what changed since each one's previous run (new reds, still red, fixed), and
    those previous runs, newest first."""
    out: dict[str, list[dict[str, Any]]] = {"new_reds": [], "still_red": [], "fixed": []}
    latest = latest_runs(group)[0]
    before: dict[int, RunRow] = {}
    for name, rec in doc.cases.items():
        if rec.reason == NOT_RUN:  # an interrupted run's cases it never reached: its headline says so
            continue
        kind, _ = pages.status_of(rec.status, rec.reason, rec.uncalibrated)
        prior = _before(group.series.get(name, []), latest)
        if prior is not None:
            before[prior.run.pk] = prior.run
        was = pages.point_status(prior) if prior is not None else None
        was_bad = was is not None and was[0] in pages.BAD
        if kind in pages.BAD:
            said = rec.reason or rec.status or "?"
            out["still_red" if was_bad else "new_reds"].append(_item(group, name, said, rec))
        elif was_bad and rec.status == "passed" and was is not None:
            out["fixed"].append(_item(group, name, f"was {was[1]}", rec))
    return out, sorted(before.values(), key=_order, reverse=True)


# A known bug's state as the first screen says it (the verdict's order: fixed first)
KNOWN_STATES = {"fixed": "fixed upstream (the case passes)", "present": "still present (not a failure)",
                "not_seen": "not seen this run (intermittent: not yet believed fixed)",
                "absent": "not there yet (a build older than the pin)"}  # fmt: skip


def _lines(group: Group, doc: Run, lines: Sequence[str]) -> list[dict[str, Any]]:
    """Lines of the run's first lines, each with links to the cases it names (a name as a whole word)."""
    out = []
    for line in lines:
        named = [n for n in doc.cases if re.search(rf"(?<![\w.-]){re.escape(n)}(?![\w-])", line)]
        out.append({"text": line, "cases": [_item(group, n, "", doc.cases[n]) for n in named]})
    return out


def _known(group: Group, doc: Run) -> list[dict[str, Any]]:
    """The known upstream bugs the run's cases reproduce, by state (fixed first, as the verdict says
    them), each bug once with its cases."""
    out = []
    for state in KNOWN_HEADS:
        bugs: dict[str, list[dict[str, Any]]] = {}
        for name, rec in doc.cases.items():
            if (ref := rec.known_bug) is not None and ref.state == state:
                bugs.setdefault(bug_name(ref.issue, ref.title), []).append(_item(group, name, "", rec))
        if bugs:
            found = [{"bug": bug, "cases": cases} for bug, cases in bugs.items()]
            out.append({"state": state, "words": KNOWN_STATES.get(state, state), "bugs": found})
    return out


def since_last(
    group: Group, db: Path, results: Path | None, config_of: dict[str, ConfigChange]
) -> dict[str, Any]:
    """What the group's newest run says changed since the run before it, as the index's first screen
    lays it out."""
    latest, _ = latest_runs(group)
    doc = _document(db, results, latest, config_of.get(latest.run_id))
    v = verdict(doc)
    first = first_lines(doc, v)
    cases, before = _cases(group, doc)
    configs = [*run_config_line(doc), *config_lines(doc, True), *config_lines(doc, False)]
    return {
        "slug": group.slug,
        "device_class": group.device_class,
        "backend": group.backend,
        "latest": _run(latest, doc),
        "before": [_run(run, None) for run in before],  # the runs its cases are compared with
        "headline": doc.verdict or v.headline,
        "green": v.green,
        **{k: {"shown": items[:SHOWN], "more": max(0, len(items) - SHOWN)} for k, items in cases.items()},
        "known": _known(group, doc),
        "configs": _lines(group, doc, configs),
        "suspects": _lines(group, doc, suspect_lines(doc)),
        "first": [{"loud": loud, "text": line} for loud, line in first],
        "n_cases": len(doc.cases),
    }


def _run(run: RunRow, doc: Run | None) -> dict[str, Any]:
    build = f"b{run.build}" if run.build is not None else None
    return {
        "run_id": run.run_id,
        "href": f"runs/{run.slug}.html",
        "commit": run.commit,
        "build": build if build != run.commit else None,
        "started": run.started,
        "tier": (doc.tier if doc is not None else run.row.get("tier")) or "?",
    }


def mornings(
    groups: Sequence[Group], db: Path, results: Path | None, configs: Sequence[ConfigChange]
) -> list[dict[str, Any]]:
    """Every group's ``since_last``, the group whose newest run is newest first."""
    config_of = {c.after_run_id: c for c in configs}
    ordered = sorted(groups, key=lambda g: _order(latest_runs(g)[0]), reverse=True)
    return [since_last(g, db, results, config_of) for g in ordered if g.runs]
