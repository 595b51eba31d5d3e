"""The baseline of a case: the run it is judged against (``find_baseline``: the nearest earlier measured
llama.cpp commit on the same setup, by ancestry where the mirror knows it), and the runs before it that the
drift gate reads (``earlier_runs``, by the same rule).
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from specsuite.common.errors import UserError
from specsuite.history.queries import (
    RUN_TIME,
    build_column,
    config_series,
    configs_of,
    series_columns,
    series_row,
    sound_series,
)
from specsuite.history.schema import reading, schema_version
from specsuite.llamacpp.identity import is_commit
from specsuite.results.config import RunConfig
from specsuite.results.record import CaseRecord, decode_record


@dataclass(frozen=True)
class Baseline:
    """The run a case is judged against, and the case's record there."""

    run_id: str
    commit: str
    started: str  # the run's start time (its record time when the run had none)
    record: CaseRecord  # the case record at that run
    config: RunConfig | None = None  # that run's configuration (None: recorded before it was)
    order: str = ""  # which order chose it (``order_of``): said beside it in the summary's baseline line


Row = TypeVar("Row", sqlite3.Row, Mapping[str, Any])  # a stored run: llama_commit, llama_build by name


def _same_commit(a: str, b: str) -> bool:
    """Short and full spellings of one commit match (either is a prefix of the other); a build (``b9246``)
    or a tree's content hash matches only itself (``b924`` is not ``b9246``)."""
    if not (is_commit(a) and is_commit(b)):
        return a == b
    return a.startswith(b) or b.startswith(a)


def _by_ancestry(rows: list[Row], ancestors: list[str]) -> list[Row]:
    """The rows of ancestor commits, nearest ancestor first (a commit's latest run first)."""
    by_prefix: dict[str, list[Row]] = {}
    for row in rows:  # newest first, so the first row of a commit is its latest run
        by_prefix.setdefault(row["llama_commit"][:7], []).append(row)
    out = []
    for anc in ancestors:
        anc = anc.lower()
        out += [row for row in by_prefix.get(anc[:7], ()) if _same_commit(anc, row["llama_commit"])]
    return out


def _stored_record(
    conn: sqlite3.Connection, row: sqlite3.Row, case: str, skipped: list[str] | None = None
) -> CaseRecord | None:
    """The case's stored record at ``row``'s run; None (a warning naming the run, which ``skipped`` also
    gets) when it is broken. (Schema v1, read as it is by a reader that never migrates, kept it in the
    cases table.)"""
    table = "case_texts" if schema_version(conn) >= 2 else "cases"
    found = conn.execute(f"SELECT record FROM {table} WHERE run = ? AND name = ?", (row["run"], case))
    (text,) = found.fetchone() or ("null",)
    try:
        return decode_record(case, json.loads(str(text)), f"history run {row['run_id']}")
    except (TypeError, ValueError, RecursionError, UserError) as exc:
        why = " ".join(str(exc).split())[:300]
        print(f"warning: skipping a broken history record of {case!r} in run {row['run_id']}: {why}",
              file=sys.stderr)  # fmt: skip
        if skipped is not None:
            skipped.append(str(row["run_id"]))
        return None


def _check_time(conn: sqlite3.Connection, when: str | None) -> None:
    """A time SQLite cannot read would silently match no run: say so instead."""
    if when is not None and conn.execute("SELECT julianday(?)", (when,)).fetchone()[0] is None:
        raise UserError(f"start time {when!r} is not an ISO 8601 time (e.g. 2026-12-01T10:00:00+00:00)")


def find_baseline(
    path: Path | None,
    *,
    case: str,
    device_class: str,
    backend: str,
    cases_sha256: str,
    commit: str,
    ancestors: list[str] | None,
    before: str | None = None,
    recording: bool = False,
    skipped: list[str] | None = None,
    build: int | None = None,
) -> Baseline | None:
    """The run to judge ``case`` at ``commit`` against: the nearest earlier measured llama.cpp commit.

    Candidates ran on the same device class and backend with the same cases.toml (same prompts, n_max and
    models), and measured the case (passed, or failed only for a floor or regression, with numbers).

    With ``ancestors`` (``commit``'s ancestry from the llama.cpp mirror, nearest first) the nearest
    ancestor that has such a run wins (its latest run), and only ancestors qualify: a sibling branch's
    commit says nothing about what this commit changed. Without, and with ``build`` (upstream's build
    number: a linear history, ``ancestry.in_commit_order``), the latest earlier run of the same build
    number and another commit wins (a fork, a branch, a local patch: the number cannot order them, time
    does), then the nearest lower build, then runs that recorded no build number by time; a higher build
    never qualifies. Without either, the latest such run by time. The Baseline says which order chose it.

    ``before`` (the judged run's start, ISO 8601): only runs that started earlier qualify, so judging an
    old run (``compare --against auto``) never takes a run recorded after it; None: every run.

    A run of ``commit`` itself is never its baseline: a rerun of a bad commit would otherwise compare
    with its own earlier run, pass, and hide the regression that commit introduced. Commits match by
    prefix, so a short recorded sha equals its full spelling. A candidate whose stored record is broken
    (not JSON, the wrong shape) is skipped with a warning, and its run id goes into ``skipped`` (for the
    run's summary: pytest keeps a passing case's stderr): the next one is the baseline. None when there is
    no candidate (or no history yet); a history that cannot be read is a UserError. ``recording``: the
    lookup of a run that records itself (see ``reading``); otherwise the file is opened read-only.
    """
    with reading(path, recording=recording) as conn:
        if conn is None:
            return None
        rows = _candidates(conn, case, device_class, backend, cases_sha256, commit, ancestors, before, build)
        for row in rows:
            if (record := _stored_record(conn, row, case, skipped)) is not None:  # a broken row: the next
                config = configs_of(conn, [row["run_id"]]).get(row["run_id"])
                order = order_of(row["llama_build"], ancestors, build)
                return Baseline(row["run_id"], row["llama_commit"], row["t"], record, config, order)
    return None


def usual_order(ancestors: list[str] | None, build: int | None) -> str:
    """The order find_baseline looks in, in the words of the summary's baseline line."""
    if ancestors is not None:
        return "nearest ancestor"
    return "latest earlier run" if build is None else "nearest lower build"


def order_of(candidate_build: Any, ancestors: list[str] | None, build: int | None) -> str:
    """Which order made a candidate the baseline: ``usual_order``, or by time where the build number could
    not order it (a run with none, or with the same number and another commit)."""
    if ancestors is not None or build is None:
        return usual_order(ancestors, build)
    if not isinstance(candidate_build, int):
        return "by time: its run recorded no build number"
    if candidate_build == build:
        return f"by time: the same build number {build}, another commit"
    return "nearest lower build"


def _candidates(
    conn: sqlite3.Connection,
    case: str,
    device_class: str,
    backend: str,
    cases_sha256: str,
    commit: str,
    ancestors: list[str] | None,
    before: str | None,
    build: int | None = None,
) -> list[sqlite3.Row]:
    """find_baseline's candidates for ``case`` at ``commit``, nearest first (see there)."""
    commit = commit.strip().lower()
    # julianday: times compare as instants whatever their offset spelling (+00:00, Z, +02:00)
    sql = (
        f"SELECT {series_columns(conn)} FROM cases c JOIN runs r ON r.id = c.run "
        "WHERE c.name = :case AND c.measured = 1 AND r.device_class = :device_class "
        "AND r.backend = :backend AND r.cases_sha256 = :cases_sha256 "
        f"AND (:before IS NULL OR julianday({RUN_TIME}) < julianday(:before)) "
        f"ORDER BY {RUN_TIME} DESC, r.id DESC"
    )
    args = {"case": case, "device_class": device_class, "backend": backend, "cases_sha256": cases_sha256}
    _check_time(conn, before)
    conn.row_factory = sqlite3.Row
    found = conn.execute(sql, {**args, "before": before}).fetchall()
    rows = [r for r in found if not _same_commit(r["llama_commit"], commit)]
    if ancestors is not None:
        return _by_ancestry(rows, ancestors)
    return _by_build(rows, build) if build is not None else rows


def _by_build(rows: list[Row], build: int) -> list[Row]:
    """The rows of the same build number (another commit: a fork, a branch, a local patch, a shallow clone),
    newest first: the build number cannot order them, so time does; then those of lower builds, nearest
    first (a build's latest run first); then those of runs that recorded no build number, newest first (the
    time rule they were judged by); higher builds never. ``rows`` come newest first, and Python's sort keeps
    that within a build."""
    numbered = [r for r in rows if isinstance(r["llama_build"], int) and r["llama_build"] <= build]
    unnumbered = [r for r in rows if not isinstance(r["llama_build"], int)]
    return sorted(numbered, key=lambda r: -r["llama_build"]) + unnumbered


def earlier_runs(
    path: Path | None,
    *,
    case: str,
    device_class: str,
    backend: str,
    cases_sha256: str,
    commit: str,
    ancestors: list[str] | None,
    before: str | None = None,
    limit: int,
    recording: bool = False,
    build: int | None = None,
) -> list[dict[str, Any]]:
    """The ``limit`` runs nearest before ``commit`` that measured ``case``, by find_baseline's rule
    (same setup, measured, ancestors only when ``ancestors`` is given, started ``before``), nearest first.

    Each: run_id, commit, started, status, reason, each registered metric by its name (results.metrics;
    speedup: the median of the rounds), speed_repeat, nondeterministic (1, 0, or None: not recorded),
    implausible_speed. ``recording`` as in find_baseline."""
    with reading(path, recording=recording) as conn:
        if conn is None:
            return []
        rows = _candidates(conn, case, device_class, backend, cases_sha256, commit, ancestors, before, build)
        return sound_series([series_row(r) for r in rows])[:limit]


def _earlier(started: Any, before: str | None) -> bool:
    """Whether a run that started at ``started`` started before ``before`` (None: any run is)."""
    if before is None:
        return True
    try:
        return datetime.fromisoformat(str(started)) < datetime.fromisoformat(before)
    except (TypeError, ValueError):
        return False  # a time that does not read orders nothing


@dataclass(frozen=True)
class PriorConfig:
    """The configuration of the run before this one on its setup (``previous_config``)."""

    commit: str  # its identity key
    run_id: str
    config: RunConfig


def previous_config(
    path: Path | None,
    *,
    device_class: str,
    backend: str,
    commit: str,
    ancestors: list[str] | None,
    build: int | None,
    before: str | None,
) -> PriorConfig | None:
    """The recorded configuration of the run nearest before ``commit`` on this device class and backend,
    whatever cases it ran, by find_baseline's order (ancestry, else build number, else time): what the
    binary's defaults and build were there. A case's baseline needs the case measured there; this needs
    only the run, so a changed default is named even where no case had a baseline (an older build whose
    cases could not all be measured)."""
    rows: list[Mapping[str, Any]] = [
        {"llama_commit": r["commit"], "llama_build": r["build"], **r}
        for r in reversed(config_series(path, device=device_class))  # newest first, as _candidates' rows
        if r["device_class"] == device_class and r["backend"] == backend
        and not _same_commit(str(r["commit"]), commit.lower()) and _earlier(r["started"], before)
    ]  # fmt: skip
    if ancestors is not None:
        rows = _by_ancestry(rows, ancestors)
    elif build is not None:
        rows = _by_build(rows, build)
    if not rows:
        return None
    return PriorConfig(str(rows[0]["commit"]), str(rows[0]["run_id"]), rows[0]["config"])


@dataclass(frozen=True)
class _Judged:
    """The judged run's side of find_baseline's rules."""

    device_class: str
    backend: str
    cases_sha256: str
    commit: str
    ancestors: list[str] | None
    before: str | None
    build: int | None


def why_none(
    path: Path | None,
    *,
    case: str,
    device_class: str,
    backend: str,
    cases_sha256: str,
    commit: str,
    ancestors: list[str] | None,
    before: str | None = None,
    recording: bool = False,
    build: int | None = None,
) -> str:
    """Why find_baseline found no run for ``case``: the first of its rules that leaves none, said as the
    summary's baseline line says it ("only higher builds measured it (b11434)"), so that "none yet" is
    never said where another commit was measured and judged out by a rule."""
    judged = _Judged(device_class, backend, cases_sha256, commit.strip().lower(), ancestors, before, build)
    with reading(path, recording=recording) as conn:
        if conn is None:
            return "no history yet"
        _check_time(conn, before)
        conn.row_factory = sqlite3.Row
        sql = (
            f"SELECT r.run_id, r.llama_commit, {build_column(conn)}, r.device_class, r.backend, "
            f"r.cases_sha256, c.measured, julianday({RUN_TIME}) < julianday(:before) AS earlier "
            "FROM cases c JOIN runs r ON r.id = c.run WHERE c.name = :case"
        )
        rows: list[Mapping[str, Any]] = conn.execute(sql, {"case": case, "before": before}).fetchall()
    if not rows:
        return "no run of it in this history yet"
    for why, keep in _rules():
        left = [r for r in rows if keep(r, judged)]
        if not left:
            return why(rows, judged) if callable(why) else why
        rows = left
    return "its earlier records are broken"  # every rule kept a run: find_baseline skipped them all


def _rules() -> list[tuple[Any, Callable[[Mapping[str, Any], _Judged], bool]]]:
    """find_baseline's rules in order: what a run must be to qualify, and what is said when none does
    (text, or a function of the runs the rule left out)."""
    return [
        (_other_setups, lambda r, j: (r["device_class"], r["backend"]) == (j.device_class, j.backend)),
        ("only runs with another cases.toml measured it on this setup",
         lambda r, j: r["cases_sha256"] == j.cases_sha256),
        ("no earlier run on this setup measured it (each failed before its numbers)",
         lambda r, j: bool(r["measured"])),
        ("only runs that started after this one measured it", lambda r, j: j.before is None or r["earlier"]),
        ("only runs of this same commit measured it",
         lambda r, j: not _same_commit(r["llama_commit"], j.commit)),
        (_not_ancestors, _is_ancestor),
        (_higher_builds, _not_higher),
    ]  # fmt: skip


def _is_ancestor(row: Mapping[str, Any], judged: _Judged) -> bool:
    return judged.ancestors is None or bool(_by_ancestry([row], judged.ancestors))


def _not_higher(row: Mapping[str, Any], judged: _Judged) -> bool:
    if judged.ancestors is not None or judged.build is None:
        return True  # ancestry decided, or no build number to order by
    return bool(_by_build([row], judged.build))


def _other_setups(rows: list[Mapping[str, Any]], judged: _Judged) -> str:
    setups = sorted({f"{r['device_class']}/{r['backend']}" for r in rows})
    return f"only runs on another device or backend measured it ({', '.join(setups[:3])})"


def _not_ancestors(rows: list[Mapping[str, Any]], judged: _Judged) -> str:
    commits = ", ".join(sorted({str(r["llama_commit"])[:12] for r in rows})[:3])
    return f"only commits the mirror does not know as ancestors of this one measured it ({commits})"


def _higher_builds(rows: list[Mapping[str, Any]], judged: _Judged) -> str:
    builds = ", ".join(f"b{b}" for b in sorted({int(r["llama_build"]) for r in rows})[:3])
    return f"only higher builds than b{judged.build} measured it ({builds})"
