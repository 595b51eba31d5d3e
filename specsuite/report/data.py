"""What the site shows, read from the history: every run (with its case records, streamed run by run), each
device class and backend's runs in commit order, and the change points of the history.

Commit order: ``history.ancestry.in_commit_order``, as ``specsuite changes`` orders its series: ancestry
from the llama.cpp mirror where it knows every commit of a device class and backend (runs of one commit by
time), else time. A stored record that cannot be decoded is shown from the numbers of
its ``cases`` row, with one warning line.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
import sqlite3
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from specsuite.common.errors import UserError
from specsuite.history import queries, schema
from specsuite.history.ancestry import in_commit_order
from specsuite.history.changecache import SplitCache
from specsuite.history.changes import ChangePoint, ConfigChange, config_changes, find_changes
from specsuite.results import metrics
from specsuite.results.config import RunConfig
from specsuite.results.document import Binary, BinarySource, Device, Harness, ModelRef, Run, RunOptions
from specsuite.results.record import STATUSES, CaseRecord, SpeedSamples, decode_record, finite

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
_RECORD = msgspec.json.Decoder(CaseRecord)
_NUMBERS = msgspec.json.Decoder(list[float | None])


class RunRow:
    """One run of the history: its ``runs`` row (every column; models and options as stored JSON)."""

    __slots__ = ("build", "commit", "group", "pk", "row", "run_id", "slug", "started")

    def __init__(self, row: dict[str, Any]) -> None:
        self.row = row
        self.pk = int(row["id"])
        self.run_id = str(row["run_id"])
        self.commit = str(row["llama_commit"])
        self.build = queries.stored_build(row.get("llama_build"))  # schema v7 on
        self.started = str(row["started"] or row["recorded"] or "")
        self.group = (str(row["device_class"]), str(row["backend"]))
        self.slug = ""  # its page: runs/<slug>.html

    @property
    def of_runs(self) -> int:
        """How many runs its device class and backend has in the history (the site may show fewer)."""
        return int(self.row.get("of_runs") or 0)

    @property
    def speed_judged(self) -> bool:
        """Whether the run judged speed (not one of cases side by side on a CPU build: acceptance only)."""
        options = _stored(self.row.get("options"), RunOptions)
        return options is None or options.speed


class Metric(NamedTuple):
    """A metric the site charts and lists: the registry's (results.metrics) as a page's script gets it."""

    key: str
    label: str
    floor: str | None  # the floor of a case record that applies to it
    digits: int  # as summary.md prints it
    speed: bool = False  # a speed: not charted from a run whose speed was physically impossible

    def shown(self) -> dict[str, Any]:
        """What a page's script gets."""
        return {"key": self.key, "label": self.label, "floor": self.floor, "digits": self.digits}


def _charted(m: metrics.Metric) -> Metric:
    unit = f" ({m.unit})" if m.unit and m.unit != "x" else ""  # "block cost (plain decode steps)"
    return Metric(m.name, m.label + unit, m.floor, m.digits, m.plausible)


METRICS = tuple(_charted(m) for m in metrics.in_table("site"))  # speedup: the median of the rounds


@dataclass(eq=False, slots=True)
class Point:
    """One case at one run, as the charts and the index need it: the numbers of its ``cases`` row, its
    message, and from its stored record the floors, whether it was calibrated and its baseline run."""

    run: RunRow
    case: str
    status: str | None
    reason: str | None
    message: str | None
    values: dict[str, float | None]  # each of METRICS by its key
    speedups: list[float | None]
    per_position_rate: str | None  # JSON, read for the few points that show it
    floors: dict[str, float | None] = field(default_factory=dict)
    uncalibrated: bool = False
    baseline_run: str | None = None

    @property
    def speedup(self) -> float | None:
        return self.values.get("speedup")

    def rates(self) -> list[float | None]:
        return _numbers(self.per_position_rate)


@dataclass(eq=False)
class Group:
    """One device class and backend: its runs in commit order, and each case's records over them."""

    device_class: str
    backend: str
    runs: list[RunRow] = field(default_factory=list)
    ordered_by: str = (
        "time"  # "ancestry" when the mirror knew every commit, "build number" when every run had one
    )
    series: dict[str, list[Point]] = field(default_factory=dict)

    @property
    def slug(self) -> str:
        return slug(f"{self.device_class}--{self.backend}")

    @property
    def key(self) -> tuple[str, str]:
        return self.device_class, self.backend


@functools.lru_cache(maxsize=4096)
def slug(text: str, limit: int = 80) -> str:
    """A file name from data: safe characters only; a stable hash of the text where they changed it (two
    names that clean to the same one stay apart)."""
    clean = _SAFE.sub("_", text).strip("._-")[:limit]
    if clean == text and clean:
        return clean
    import hashlib

    return f"{clean or 'x'}-{hashlib.sha256(text.encode('utf-8', 'replace')).hexdigest()[:8]}"


LAST = 1000  # runs per device class and backend the site shows by default


_RUNS_SQL = """
SELECT r.*, w.t, w.nth, w.of_runs FROM (
    SELECT r.id, COALESCE(r.started, r.recorded) AS t, ROW_NUMBER() OVER (
        PARTITION BY r.device_class, r.backend ORDER BY COALESCE(r.started, r.recorded) DESC, r.id DESC
    ) AS nth, COUNT(*) OVER (PARTITION BY r.device_class, r.backend) AS of_runs
    FROM runs r WHERE {where}
) w JOIN runs r ON r.id = w.id WHERE :last <= 0 OR w.nth <= :last ORDER BY w.t, r.id
"""  # the window over narrow rows, then the whole rows of the runs shown (each holds its models' JSON)


def load_runs(path: Path, device: str | None, last: int = LAST) -> list[RunRow]:
    """The ``last`` newest runs of each device class and backend (all with 0), on ``device`` (a name or
    class) when given, oldest first, each with a page name of its own.

    An unknown device is a UserError naming the devices the history has."""
    where, args = "1", {"last": last, "device": device}
    if device is not None:
        _, devices = queries.names(path)
        if device.lower() not in {d.lower() for d in devices}:
            have = ", ".join(devices) or "none"
            raise UserError(f"--device {device!r}: not in the history; it has: {have}")
        where = "lower(r.device_name) = lower(:device) OR lower(r.device_class) = lower(:device)"
    with schema.reading(path) as conn:
        if conn is None:
            return []
        conn.row_factory = sqlite3.Row
        rows = [RunRow(dict(r)) for r in conn.execute(_RUNS_SQL.format(where=where), args)]
    taken: set[str] = set()
    for run in sorted(rows, key=lambda r: r.pk):
        name = slug(run.run_id)
        run.slug = name if name not in taken else f"{name}-{run.pk}"  # one run id recorded twice
        taken.add(run.slug)
    return rows


# --- the series: every case of every run, as numbers -------------------------------------------------------

_POINTS_SQL = """
SELECT c.run, c.name, c.status, c.reason, t.message, c.speedups, c.per_position_rate, {metrics}
FROM cases c LEFT JOIN case_texts t ON t.run = c.run AND t.name = c.name
WHERE c.run IN (SELECT id FROM temp.site_runs) ORDER BY c.run, c.rowid
"""
# A few fields of one stored record, read by SQLite (no record is decoded in Python for the charts)
_FIELDS_SQL = """
SELECT CASE WHEN json_valid(record)
            THEN json_extract(record, '$.floors', '$.uncalibrated', '$.baseline.run_id') END
FROM case_texts WHERE run = ? AND name = ?
"""
_FIELDS = msgspec.json.Decoder(tuple[dict[str, float | None] | None, bool | None, str | None])


def _temp_runs(conn: sqlite3.Connection, runs: Sequence[RunRow]) -> None:
    """The runs' ids in a temp table: an IN list of 10 000 parameters would pass SQLite's limit."""
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS site_runs (id INTEGER PRIMARY KEY)")
    conn.execute("DELETE FROM temp.site_runs")
    conn.executemany("INSERT INTO temp.site_runs VALUES (?)", [(r.pk,) for r in runs])


def _finite(value: Any) -> float | None:
    """``finite`` with a fast path for what SQLite's REAL columns hold (a float or NULL); anything else a
    hand-edited database holds goes the long way."""
    if value is None:
        return None
    if value.__class__ is float:
        return value if value - value == 0.0 else None  # NaN and infinities fail this
    return finite(value)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _fields(conn: sqlite3.Connection, p: Point) -> tuple[dict[str, float | None], bool, str | None]:
    (extra,) = conn.execute(_FIELDS_SQL, (p.run.pk, p.case)).fetchone() or (None,)
    try:
        floors, uncalibrated, base = _FIELDS.decode(extra) if extra else (None, None, None)
    except (msgspec.DecodeError, msgspec.ValidationError):  # a record of another shape: none of them
        floors, uncalibrated, base = None, None, None
    return floors or {}, bool(uncalibrated), _text(base)


def points(path: Path, runs: Sequence[RunRow]) -> list[Point]:
    """Every case of ``runs`` as a Point, run by run (by id), cases in their recorded order.

    Floors and "uncalibrated" come from cases.toml, so they are read from one record per case and
    cases.toml (its sha256; every record of a run that names none); the baseline run only for the
    points ``baselines`` is asked about."""
    by_pk = {r.pk: r for r in runs}
    with schema.reading(path) as conn:
        if conn is None or not by_pk:
            return []
        _temp_runs(conn, runs)
        cur = conn.execute(_POINTS_SQL.format(metrics=queries.metric_columns(conn)))
        names = [d[0] for d in cur.description][
            7:
        ]  # the registry's metrics (or their JSON), the speed's flag
        out = [
            Point(by_pk[pk], str(name), _text(status), _text(reason), _text(message),
                  _values(by_pk[pk], dict(zip(names, numbers, strict=True))), _numbers(speedups), _text(ppr))
            for pk, name, status, reason, message, speedups, ppr, *numbers in cur
        ]  # fmt: skip
        same: dict[tuple[str, str], Point] = {}
        for p in out:  # the newest record of each case and cases.toml speaks for them all
            sha = p.run.row.get("cases_sha256")
            same[(sha if isinstance(sha, str) else f"run {p.run.pk}", p.case)] = p
        fields = {key: _fields(conn, p) for key, p in same.items()}
    for p in out:
        sha = p.run.row.get("cases_sha256")
        p.floors, p.uncalibrated, _ = fields[(sha if isinstance(sha, str) else f"run {p.run.pk}", p.case)]
    return out


def _values(run: RunRow, row: dict[str, Any]) -> dict[str, float | None]:
    """Each charted metric of a case row (queries.metric_columns), a speed of an implausible run left out."""
    found = queries.with_metrics({**row, "run_id": run.run_id})
    wrong = found.get("implausible_speed") == 1
    return {m.key: None if m.speed and wrong else _finite(found.get(m.key)) for m in METRICS}


def baselines(path: Path, wanted: Iterable[Point]) -> None:
    """Fill in the baseline run of each of ``wanted`` (from its stored record)."""
    with schema.reading(path) as conn:
        if conn is not None:
            for p in wanted:
                p.baseline_run = _fields(conn, p)[2]


# --- sweeps: each run's members of each sweep, by np ------------------------------------------------------

_SWEEPS_SQL = """
SELECT c.run, c.sweep, c.parallel, c.name, c.aggregate_speedup FROM cases c
WHERE c.sweep IS NOT NULL AND c.run IN (SELECT id FROM temp.site_runs) ORDER BY c.run, c.parallel
"""


@dataclass(frozen=True, slots=True)
class Member:
    """A sweep's member at one run: its np, case and aggregate speedup over its baseline at that np."""

    parallel: int
    case: str
    speedup: float | None


def sweeps(path: Path, runs: Sequence[RunRow]) -> dict[int, dict[str, list[Member]]]:
    """For each run (by id), its sweeps' members by np; none in a history from before sweeps (schema v3)."""
    with schema.reading(path) as conn:
        if conn is None or not runs:
            return {}
        if "sweep" not in {row[1] for row in conn.execute("PRAGMA table_info(cases)")}:
            return {}
        _temp_runs(conn, runs)
        out: dict[int, dict[str, list[Member]]] = {}
        for pk, sweep, parallel, name, speedup in conn.execute(_SWEEPS_SQL):
            if isinstance(sweep, str) and isinstance(parallel, int):
                member = Member(parallel, str(name), _finite(speedup))
                out.setdefault(int(pk), {}).setdefault(sweep, []).append(member)
        return out


# --- case records, run by run ----------------------------------------------------------------------------

_CASES_SQL = """
SELECT c.run, c.name, c.status, c.reason, c.per_position_rate, c.speedups, t.record, {metrics}
FROM cases c LEFT JOIN case_texts t ON t.run = c.run AND t.name = c.name
WHERE c.run IN (SELECT id FROM temp.site_runs) ORDER BY c.run, c.rowid
"""


def case_records(path: Path, runs: Sequence[RunRow]) -> Iterator[tuple[RunRow, list[CaseRecord]]]:
    """Each run with its case records, in ``runs``' order of ids; one query, read as it goes."""
    by_pk = {r.pk: r for r in runs}
    if not by_pk:
        return
    with schema.reading(path) as conn:
        if conn is None:
            return
        conn.row_factory = sqlite3.Row
        found = set()
        _temp_runs(conn, runs)
        cur = conn.execute(_CASES_SQL.format(metrics=queries.metric_columns(conn)))
        for pk, rows in itertools.groupby(cur, key=lambda r: int(r["run"])):
            run = by_pk[pk]
            found.add(pk)
            yield run, [_record(run, row) for row in rows]
    for pk, run in by_pk.items():  # a run recorded with no case (a selector that matched none)
        if pk not in found:
            yield run, []


def _record(run: RunRow, row: sqlite3.Row) -> CaseRecord:
    name, text = str(row["name"]), row["record"]
    if text is not None:
        try:
            rec = _RECORD.decode(text)  # as the history wrote it: the fast path
            rec.name = name
            return rec
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass
        try:  # an older record: the tolerant reader (schema 1 spellings, nulls)
            return decode_record(name, json.loads(text), f"history run {run.run_id}")
        except (TypeError, ValueError, RecursionError, UserError) as exc:
            why = " ".join(str(exc).split())[:300]
            print(f"warning: report: the stored record of {name!r} in run {run.run_id} is broken ({why}); "
                  "showing its numbers only", file=sys.stderr)  # fmt: skip
    return _from_columns(name, queries.with_metrics({**dict(row), "run_id": run.run_id}))


def _numbers(text: Any) -> list[float | None]:
    try:
        return _NUMBERS.decode(text) if isinstance(text, (str, bytes)) else []
    except (msgspec.DecodeError, msgspec.ValidationError):
        return []


def _from_columns(name: str, row: dict[str, Any]) -> CaseRecord:
    """A case record from the numbers of its ``cases`` row (its stored record is missing or broken): the
    registered metrics by name (queries.with_metrics)."""
    speedups = _numbers(row["speedups"])
    return CaseRecord(
        name=name,
        status=row["status"] if row["status"] in STATUSES else None,  # a hand-edited row: no status
        reason=row["reason"] if isinstance(row["reason"], str) else None,
        accept_rate=finite(row["accept_rate"]),
        accept_len=finite(row["accept_len"]),
        pos0_rate=finite(row["pos0_rate"]),
        speedup=finite(row["speedup"]),
        per_position_rate=_numbers(row["per_position_rate"]),
        speed=SpeedSamples(speedups=speedups) if speedups else None,
    )


def _stored(text: Any, kind: Any) -> Any:
    """A JSON column of the runs row as ``kind``; None when it is not that."""
    try:
        return msgspec.json.decode(text, type=kind) if isinstance(text, (str, bytes)) else None
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def run_document(run: RunRow, records: Sequence[CaseRecord]) -> Run:
    """The run as results.json would hold it, from its history row and records (no results folder)."""
    r = run.row
    return Run(
        schema=r.get("results_schema") or 2,
        run_id=run.run_id,
        tier=r.get("tier"),
        selector=r.get("selector"),
        started=r.get("started"),
        finished=r.get("finished"),
        wall_s=finite(r.get("wall_s")),
        host=r.get("host"),
        harness=Harness(commit=r.get("harness_commit"), version=r.get("harness_version")),
        cases_sha256=r.get("cases_sha256"),
        binary=Binary(  # commit: the history's key (a commit, b<N> or tree-<hash>), as the page shows it
            sha256=r.get("binary_sha256"),
            commit=run.commit,
            build=run.build,
            backend=r.get("backend"),
            source=BinarySource(kind=r.get("source_kind")),
        ),
        device=Device(
            name=r.get("device_name"),
            device_class=r.get("device_class"),
            driver=r.get("driver"),
            cuda=r.get("cuda"),
        ),
        options=_stored(r.get("options"), RunOptions),
        config=_stored(r.get("config"), RunConfig),  # schema v4 on: the binary's defaults and build
        models=_stored(r.get("models"), dict[str, ModelRef]) or {},
        cases={rec.name: rec for rec in records},
    )


# --- commit order ---------------------------------------------------------------------------------------


def groups(runs: Sequence[RunRow], mirror: Path | None) -> dict[tuple[str, str], Group]:
    """The runs by device class and backend, each in commit order."""
    out: dict[tuple[str, str], Group] = {}
    for run in sorted(runs, key=lambda r: (r.started, r.pk)):
        out.setdefault(run.group, Group(*run.group)).runs.append(run)
    for group in out.values():
        group.runs, group.ordered_by = in_commit_order(
            group.runs, lambda r: r.commit, mirror, lambda r: r.build
        )
    return out


# --- change points ---------------------------------------------------------------------------------------


def change_points(
    path: Path, device: str | None, mirror: Path, runs: list[RunRow], cache: SplitCache | None = None
) -> list[ChangePoint]:
    """The change points (``history.changes``) among the runs the site shows, its commits ordered by the
    same mirror and rule as the site's series (``ancestry.in_commit_order``); ``cache``: the splits of
    series the last builds computed."""
    return find_changes(path, device=device, mirror=mirror, runs={run.run_id for run in runs}, cache=cache)


def configuration_changes(
    path: Path, device: str | None, mirror: Path | None, runs: Sequence[RunRow]
) -> list[ConfigChange]:
    """The configuration changes (``history.changes.config_changes``) among the runs the site shows."""
    return config_changes(path, device=device, mirror=mirror, runs={run.run_id for run in runs})
