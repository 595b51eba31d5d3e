"""What the history's readers ask of it: its runs (``runs``), each case over commits (``case_rows``, for
``specsuite history``), the names in it, each case's usual wall time (``case_durations``, for the shard
planner), the recorded configurations (``config_series``, ``run_configs``) and every measured case as
numbers (``series``, for ``specsuite changes`` and the site's change points).

A case's registered metrics (results.metrics) come as one key each, whatever the schema: from its
``metrics`` JSON (schema v8 on: ``metric_columns``, ``with_metrics``), or from the columns an older history,
read as it is, kept them in.

Every read goes through ``schema.reading``: read-only, an older schema read as it is. A row a damaged or
hand-edited file holds (text where a number belongs, broken JSON) is skipped or shown as null, with a
warning naming its run.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import sys
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import msgspec

from specsuite.common.errors import UserError
from specsuite.history.schema import reading, schema_version
from specsuite.results import metrics
from specsuite.results.config import RunConfig
from specsuite.results.record import finite

# A run's time in SQL over ``runs r``: its start, else when it was recorded (a run that gave no start)
RUN_TIME = "COALESCE(r.started, r.recorded)"
_CASE_COLS = (
    f"r.run_id, r.llama_commit AS 'commit', {RUN_TIME} AS started, r.device_name AS device, r.device_class, "
    "r.backend, r.tier, c.name AS 'case', c.status, c.reason"
)
_JSON = "metrics_json"  # the alias of a v8 case row's metrics object until ``with_metrics`` reads it
_OBJECT = msgspec.json.Decoder(dict[str, Any])  # a site reads hundreds of thousands: msgspec, not json


def metric_columns(conn: sqlite3.Connection) -> str:
    """SQL for the registered metrics of a case row ``c`` and whether its speed was implausible: its
    ``metrics`` JSON from schema v8 on; in an older history (read as it is, never migrated by a reader) the
    columns that held them, each under the metric's name (null where that schema has none)."""
    version = schema_version(conn)
    flag = "c.implausible_speed" if version >= 6 else "NULL AS implausible_speed"
    if version >= 8:
        return f"c.metrics AS {_JSON}, {flag}"
    old = [m.column if m.column and version >= m.since else "NULL" for m in metrics.REGISTRY]
    return ", ".join([*(f"{sql} AS {m.name}" for sql, m in zip(old, metrics.REGISTRY, strict=True)), flag])


def with_metrics(row: dict[str, Any]) -> dict[str, Any]:
    """The row with each registered metric under its name, read from its metrics JSON (an older history's
    row has them already); a JSON that does not read gives nulls, with a warning naming the run."""
    if _JSON not in row:
        return row
    text = row.pop(_JSON)
    try:
        found = _OBJECT.decode(text) if text is not None else {}
    except (TypeError, msgspec.DecodeError):  # not JSON, not an object, or not text at all
        found = None
    if not isinstance(found, dict):
        print(
            f"warning: broken JSON in history run {row['run_id']}: metrics (shown as null)", file=sys.stderr
        )
        found = {}
    row.update({m.name: found.get(m.name) for m in metrics.REGISTRY})
    return row


def _run_filter(case: str | None, device: str | None) -> tuple[str, list[Any]]:
    where, args = ["1"], []
    if device is not None:
        where.append("(lower(r.device_name) = lower(?) OR lower(r.device_class) = lower(?))")
        args += [device, device]
    if case is not None:
        where.append("EXISTS (SELECT 1 FROM cases c WHERE c.run = r.id AND c.name = ?)")
        args.append(case)
    return " AND ".join(where), args


def _selected_runs(case: str | None, device: str | None, last: int | None) -> tuple[str, list[Any]]:
    """SQL for the ids of the ``last`` newest runs matching the filters (all with last=None)."""
    where, args = _run_filter(case, device)
    sql = f"SELECT r.id FROM runs r WHERE {where} ORDER BY {RUN_TIME} DESC, r.id DESC LIMIT ?"
    return sql, [*args, -1 if last is None else last]


def _dicts(cur: sqlite3.Cursor) -> list[dict[str, Any]]:
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row, strict=True)) for row in cur]


def runs(
    path: Path | None = None,
    *,
    case: str | None = None,
    device: str | None = None,
    last: int | None = None,
) -> list[dict[str, Any]]:
    """The ``last`` newest runs (all by default) that include ``case`` on ``device`` (a device name or
    class), oldest first: every column, models and options parsed."""
    sel, args = _selected_runs(case, device, last)
    with reading(path) as conn:
        if conn is None:
            return []
        rows = _dicts(
            conn.execute(f"SELECT r.* FROM runs r WHERE r.id IN ({sel}) ORDER BY {RUN_TIME}, r.id", args)
        )
    for row in rows:
        for key in ("models", "options", "config"):
            if key in row:  # config: from schema v4 on
                row[key] = _parsed(row, key)
    return rows


def _parsed(row: dict[str, Any], key: str) -> Any:
    """A JSON column's value; None (and a warning naming the run) when the stored text is broken."""
    if row[key] is None:
        return None
    try:
        return json.loads(row[key])
    except (TypeError, ValueError, RecursionError):
        print(f"warning: broken JSON in history run {row['run_id']}: {key} (shown as null)", file=sys.stderr)
        return None


# What each listed column must hold (SQLite stores whatever it is given: a hand-edited or damaged row can
# hold text where a number belongs). A row that breaks this is skipped with a warning, not printed.
_TEXT = ("run_id", "commit", "device", "device_class", "backend", "case")
_TEXT_OR_NULL = ("started", "tier", "status", "reason")
_NUMBERS = tuple(m.name for m in metrics.REGISTRY)


def _broken(row: dict[str, Any]) -> str | None:
    for key in (*_TEXT, *_TEXT_OR_NULL):
        if not isinstance(row[key], str) and not (row[key] is None and key in _TEXT_OR_NULL):
            return f"{key} is {row[key]!r}, not text"
    for key in _NUMBERS:
        if row[key] is not None and finite(row[key]) is None:
            return f"{key} is {row[key]!r}, not a number"
    return None


# The numbers the change points and the drift gate read (series_columns): a text there was a TypeError and
# exit 3 in `changes`, `report` and a live run's drift gate.
_SERIES_NUMBERS = _NUMBERS
_SERIES_FLAGS = ("speed_repeat", "nondeterministic", "implausible_speed")


def _series_broken(row: dict[str, Any]) -> str | None:
    for key in _SERIES_NUMBERS:
        if row[key] is not None and finite(row[key]) is None:
            return f"{key} is {row[key]!r}, not a number"
    for key in _SERIES_FLAGS:
        if row[key] is not None and (not isinstance(row[key], int) or row[key] < 0):
            return f"{key} is {row[key]!r}, not a whole number"
    return None


def _sound(
    rows: list[dict[str, Any]], broken: Callable[[dict[str, Any]], str | None] = _broken
) -> list[dict[str, Any]]:
    """The rows ``broken`` finds nothing wrong with; one warning for each other one."""
    out = []
    for row in rows:
        if (why := broken(row)) is None:
            out.append(row)
            continue
        of = f" of {row['case']!r}" if "case" in row else ""
        print(f"warning: skipping a broken history row{of} in run {row['run_id']}: {why}", file=sys.stderr)
    return out


def sound_series(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``series_row`` rows whose numbers are numbers (a hand-edited history may hold text there)."""
    return _sound(rows, _series_broken)


def case_rows(
    path: Path | None = None,
    *,
    case: str | None = None,
    device: str | None = None,
    last: int | None = None,
) -> list[dict[str, Any]]:
    """Per-case rows over commits, for the runs ``runs`` selects: grouped by case, oldest first.

    Each: run_id, commit, started, device, device_class, backend, tier, case, status, reason, each
    registered metric by its name (results.metrics; speedup: the median of the rounds where there were
    rounds), implausible_speed."""
    sel, args = _selected_runs(case, device, last)
    where, params = f"c.run IN ({sel})", args
    if case is not None:
        where, params = f"{where} AND c.name = ?", [*args, case]
    order = f"c.name, {RUN_TIME}, r.id"
    with reading(path) as conn:
        if conn is None:
            return []
        cols = f"{_CASE_COLS}, {metric_columns(conn)}"
        sql = f"SELECT {cols} FROM cases c JOIN runs r ON r.id = c.run WHERE {where} ORDER BY {order}"
        return _sound([with_metrics(row) for row in _dicts(conn.execute(sql, params))])


def names(path: Path | None = None) -> tuple[list[str], list[str]]:
    """(every case name, every device name and class) in the history, sorted; empty lists for none."""
    with reading(path) as conn:
        if conn is None:
            return [], []
        cases = [r[0] for r in conn.execute("SELECT DISTINCT name FROM cases ORDER BY name")]
        pairs = conn.execute("SELECT DISTINCT device_name, device_class FROM runs").fetchall()
    return cases, sorted({v for pair in pairs for v in pair})


def case_durations(
    path: Path | None = None, *, device_class: str | None = None, last: int = 5
) -> dict[str, float]:
    """Each case's wall time in seconds: the median of its ``last`` runs that ran it to the end (passed or
    failed) on ``device_class`` (None: any), newest first; {} when there is no history yet."""
    sql = (
        "SELECT c.name, c.wall_s FROM cases c JOIN runs r ON r.id = c.run "
        "WHERE c.wall_s IS NOT NULL AND c.status IN ('passed', 'failed') "
        f"AND (:device_class IS NULL OR r.device_class = :device_class) ORDER BY {RUN_TIME} DESC, r.id DESC"
    )
    seen: dict[str, list[float]] = {}
    with reading(path) as conn:
        rows = [] if conn is None else conn.execute(sql, {"device_class": device_class}).fetchall()
    for name, wall in rows:
        times = seen.setdefault(str(name), [])
        if len(times) < last:
            times.append(float(wall))
    return {name: statistics.median(times) for name, times in seen.items()}


def configs_of(conn: sqlite3.Connection, run_ids: Sequence[str]) -> dict[str, RunConfig | None]:
    """The stored configuration of each run (None: none recorded, or it does not decode)."""
    if schema_version(conn) < 4 or not run_ids:
        return {}
    marks = ", ".join("?" for _ in run_ids)
    found = conn.execute(f"SELECT run_id, config FROM runs WHERE run_id IN ({marks})", list(run_ids))
    return {str(run_id): _decoded_config(run_id, text) for run_id, text in found}


def _decoded_config(run_id: str, text: str | None) -> RunConfig | None:
    if text is None:
        return None
    try:
        return msgspec.json.decode(text, type=RunConfig)
    except msgspec.DecodeError as exc:  # not JSON, or not a configuration (ValidationError is one)
        print(f"warning: history run {run_id}: its configuration does not decode ({exc})", file=sys.stderr)
    return None


def run_configs(
    path: Path | None, run_ids: Sequence[str], *, recording: bool = False
) -> dict[str, RunConfig | None]:
    """The recorded configuration of each of ``run_ids`` (absent or None: not recorded)."""
    with reading(path, recording=recording) as conn:
        return {} if conn is None else configs_of(conn, run_ids)


def config_series(path: Path | None = None, *, device: str | None = None) -> list[dict[str, Any]]:
    """Every run with a recorded configuration, oldest first: run_id, commit, started, device_class,
    backend and its ``config`` (a RunConfig); a run whose configuration does not decode is left out."""
    where, args = _run_filter(None, device)
    with reading(path) as conn:
        if conn is None or schema_version(conn) < 4:
            return []
        sql = (
            f"SELECT r.run_id, r.llama_commit AS 'commit', {RUN_TIME} AS started, r.device_class, r.backend, "
            f"{build_column(conn)}, r.config FROM runs r WHERE r.config IS NOT NULL AND {where} "
            f"ORDER BY {RUN_TIME}, r.id"
        )
        rows = _dicts(conn.execute(sql, args))
    out = []
    for row in rows:
        if (config := _decoded_config(row["run_id"], row.pop("config"))) is not None:
            out.append({**row, "build": stored_build(row.pop("llama_build")), "config": config})
    return out


def measured_below(
    case: str, device_class: str, backend: str, build: int, path: Path | None = None
) -> tuple[str, int] | None:
    """(run id, build) of the highest build below ``build`` that measured ``case`` on this device class
    and backend (any cases.toml), or None: whether a method a build lacks existed before it. A history
    that cannot be read says nothing (None), as before v7 (no build numbers)."""
    try:
        with reading(path) as conn:
            if conn is None or schema_version(conn) < 7:
                return None
            row = conn.execute(
                "SELECT r.run_id, r.llama_build FROM cases c JOIN runs r ON r.id = c.run WHERE c.name = ? "
                "AND c.measured = 1 AND r.device_class = ? AND r.backend = ? AND r.llama_build < ? "
                "AND typeof(r.llama_build) = 'integer' ORDER BY r.llama_build DESC LIMIT 1",
                (case, device_class, backend, build),
            ).fetchone()
    except UserError:
        return None
    return (str(row[0]), int(row[1])) if row else None


def build_column(conn: sqlite3.Connection) -> str:
    """The run's upstream build number; a history older than v7 has none: null."""
    return "r.llama_build" if schema_version(conn) >= 7 else "NULL AS llama_build"


def series_columns(conn: sqlite3.Connection) -> str:
    """The numbers of a case at a run that the change points and the drift gate read (no record decoded);
    a history older than v3 (read as it is, never migrated by a reader) has no nondeterministic column."""
    flag = "c.nondeterministic" if schema_version(conn) >= 3 else "NULL AS nondeterministic"
    return (
        f"r.run_id, r.llama_commit, {RUN_TIME} AS t, c.run, c.status, c.reason, c.speed_repeat, {flag}, "
        f"{metric_columns(conn)}, {build_column(conn)}"
    )


def series_row(row: sqlite3.Row) -> dict[str, Any]:
    """A row of ``series_columns`` as ``series`` and ``earlier_runs`` give it: commit and started by name,
    each registered metric by its name."""
    out = {k: row[k] for k in row.keys() if k not in ("llama_commit", "llama_build", "t", "run")}  # noqa: SIM118
    return with_metrics(
        {**out, "commit": row["llama_commit"], "build": stored_build(row["llama_build"]), "started": row["t"]}
    )


def stored_build(value: Any) -> int | None:
    """A stored build number, or None (a hand-edited row may hold anything there: it then orders nothing)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def series(
    path: Path | None = None,
    *,
    case: str | None = None,
    device: str | None = None,
    runs: Collection[str] | None = None,
) -> list[dict[str, Any]]:
    """Every measured case of every run (``case`` only; on ``device``, a name or a class; ``runs``: these
    run ids only), oldest first: earlier_runs' fields plus case, device_class, backend and cases_sha256."""
    where, args = _run_filter(None, device)
    with reading(path) as conn:
        if conn is None:
            return []
        if runs is not None:  # a temp table: an IN list of 10 000 parameters would pass SQLite's limit;
            # the cases of those runs by their key (scanning every case of the history took seconds)
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS series_runs (run_id TEXT PRIMARY KEY)")
            conn.execute("DELETE FROM temp.series_runs")
            conn.executemany("INSERT OR IGNORE INTO temp.series_runs VALUES (?)", [(r,) for r in runs])
            where += " AND c.run IN (SELECT id FROM runs WHERE run_id IN (SELECT * FROM temp.series_runs))"
        sql = (
            f"SELECT {series_columns(conn)}, c.name AS 'case', r.device_class, r.backend, r.cases_sha256 "
            f"FROM cases c JOIN runs r ON r.id = c.run WHERE c.measured = 1 AND {where} "
            + ("AND c.name = ? " if case is not None else "")
            + f"ORDER BY c.name, {RUN_TIME}, r.id"
        )
        conn.row_factory = sqlite3.Row
        found = conn.execute(sql, [*args, *([case] if case is not None else [])])
        return sound_series([series_row(r) for r in found])


def case_statuses(
    case: str, device_class: str, backend: str, before: str | None, path: Path | None = None, limit: int = 50
) -> list[str]:
    """How ``case`` ended in its last ``limit`` runs on this device class and backend that started before
    ``before`` (None: any), newest first: whether a known bug's clean streak goes on (measure.known). A
    history that cannot be read says nothing (an empty list: the streak is this run's alone)."""
    try:
        with reading(path, recording=True) as conn:
            if conn is None:
                return []
            rows = conn.execute(
                "SELECT c.status FROM cases c JOIN runs r ON r.id = c.run WHERE c.name = ? "
                "AND r.device_class = ? AND r.backend = ? "
                f"AND (? IS NULL OR julianday({RUN_TIME}) < julianday(?)) "
                f"ORDER BY {RUN_TIME} DESC, r.id DESC LIMIT ?",
                (case, device_class, backend, before, before, limit),
            ).fetchall()
    except (UserError, sqlite3.Error):
        return []
    return [str(status) for (status,) in rows]
