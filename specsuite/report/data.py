"""What the site shows, read from the history: every run (with its case records, streamed run by run), each
device class and backend's runs in commit order, and the change points of the history.

Commit order: ancestry from the llama.cpp mirror where it knows every commit of a device class and backend
(runs of one commit by time), else time. A stored record that cannot be decoded is shown from the numbers of
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
from typing import Any

import msgspec

from specsuite.common import paths
from specsuite.common.errors import UserError
from specsuite.history import db as history
from specsuite.history.ancestry import ancestors
from specsuite.history.changes import ChangePoint, find_changes
from specsuite.results.document import Binary, BinarySource, Device, Harness, ModelRef, Run, RunOptions
from specsuite.results.record import CaseRecord, SpeedSamples, decode_record, finite

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
_RECORD = msgspec.json.Decoder(CaseRecord)
_NUMBERS = msgspec.json.Decoder(list[float | None])


class RunRow:
    """One run of the history: its ``runs`` row (every column; models and options as stored JSON)."""

    __slots__ = ("commit", "group", "pk", "row", "run_id", "slug", "started")

    def __init__(self, row: dict[str, Any]) -> None:
        self.row = row
        self.pk = int(row["id"])
        self.run_id = str(row["run_id"])
        self.commit = str(row["llama_commit"])
        self.started = str(row["started"] or row["recorded"] or "")
        self.group = (str(row["device_class"]), str(row["backend"]))
        self.slug = ""  # its page: runs/<slug>.html

    @property
    def of_runs(self) -> int:
        """How many runs its device class and backend has in the history (the site may show fewer)."""
        return int(self.row.get("of_runs") or 0)


@dataclass(eq=False, slots=True)
class Point:
    """One case at one run, as the charts and the index need it: the numbers of its ``cases`` row, its
    message, and from its stored record the floors, whether it was calibrated and its baseline run."""

    run: RunRow
    case: str
    status: str | None
    reason: str | None
    message: str | None
    accept_rate: float | None
    accept_len: float | None
    pos0_rate: float | None
    speedup: float | None  # the median of the A-B-B-A rounds where there were rounds
    speedups: list[float | None]
    per_position_rate: str | None  # JSON, read for the few points that show it
    floors: dict[str, float | None]
    uncalibrated: bool
    baseline_run: str | None
    block_ratio: float | None = None  # per-block overhead: a verification block in plain decode steps

    def rates(self) -> list[float | None]:
        return _numbers(self.per_position_rate)


@dataclass(eq=False)
class Group:
    """One device class and backend: its runs in commit order, and each case's records over them."""

    device_class: str
    backend: str
    runs: list[RunRow] = field(default_factory=list)
    ordered_by: str = "time"  # "ancestry" when the mirror knew every commit
    series: dict[str, list[Point]] = field(default_factory=dict)

    @property
    def slug(self) -> str:
        return slug(f"{self.device_class}--{self.backend}")


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
SELECT * FROM (
    SELECT r.*, COALESCE(r.started, r.recorded) AS t, ROW_NUMBER() OVER (
        PARTITION BY r.device_class, r.backend ORDER BY COALESCE(r.started, r.recorded) DESC, r.id DESC
    ) AS nth, COUNT(*) OVER (PARTITION BY r.device_class, r.backend) AS of_runs
    FROM runs r WHERE {where}
) WHERE :last <= 0 OR nth <= :last ORDER BY t, id
"""


def load_runs(path: Path, device: str | None, last: int = LAST) -> list[RunRow]:
    """The ``last`` newest runs of each device class and backend (all with 0), on ``device`` (a name or
    class) when given, oldest first, each with a page name of its own.

    An unknown device is a UserError naming the devices the history has."""
    where, args = "1", {"last": last, "device": device}
    if device is not None:
        _, devices = history.names(path)
        if device.lower() not in {d.lower() for d in devices}:
            have = ", ".join(devices) or "none"
            raise UserError(f"--device {device!r}: not in the history; it has: {have}")
        where = "lower(r.device_name) = lower(:device) OR lower(r.device_class) = lower(:device)"
    with history.reading(path) as conn:
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
SELECT c.run, c.name, c.status, c.reason, t.message, c.accept_rate, c.accept_len, c.pos0_rate,
       COALESCE(c.speedup_median, c.speedup) AS speedup, c.speedups, c.per_position_rate, {overhead}
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
    with history.reading(path) as conn:
        if conn is None or not by_pk:
            return []
        _temp_runs(conn, runs)
        out = [
            Point(by_pk[pk], str(name), _text(status), _text(reason), _text(message), _finite(rate),
                  _finite(length), _finite(pos0), _finite(speedup), _numbers(speedups), _text(ppr), {},
                  False, None, None if implausible else _finite(block))
            for pk, name, status, reason, message, rate, length, pos0, speedup, speedups, ppr, block, _,
                implausible in conn.execute(_POINTS_SQL.format(overhead=history.overhead_columns(conn)))
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


def baselines(path: Path, wanted: Iterable[Point]) -> None:
    """Fill in the baseline run of each of ``wanted`` (from its stored record)."""
    with history.reading(path) as conn:
        if conn is not None:
            for p in wanted:
                p.baseline_run = _fields(conn, p)[2]


# --- case records, run by run ----------------------------------------------------------------------------

_CASES_SQL = """
SELECT c.run, c.name, c.status, c.reason, c.accept_rate, c.accept_len, c.pos0_rate,
       COALESCE(c.speedup_median, c.speedup) AS speedup, c.per_position_rate, c.speedups, t.record
FROM cases c LEFT JOIN case_texts t ON t.run = c.run AND t.name = c.name
WHERE c.run IN (SELECT id FROM temp.site_runs) ORDER BY c.run, c.rowid
"""


def case_records(path: Path, runs: Sequence[RunRow]) -> Iterator[tuple[RunRow, list[CaseRecord]]]:
    """Each run with its case records, in ``runs``' order of ids; one query, read as it goes."""
    by_pk = {r.pk: r for r in runs}
    if not by_pk:
        return
    with history.reading(path) as conn:
        if conn is None:
            return
        conn.row_factory = sqlite3.Row
        found = set()
        _temp_runs(conn, runs)
        cur = conn.execute(_CASES_SQL)
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
    return _from_columns(name, row)


def _numbers(text: Any) -> list[float | None]:
    try:
        return _NUMBERS.decode(text) if isinstance(text, (str, bytes)) else []
    except (msgspec.DecodeError, msgspec.ValidationError):
        return []


def _from_columns(name: str, row: sqlite3.Row) -> CaseRecord:
    """A case record from the numbers of its ``cases`` row (its stored record is missing or broken)."""
    speedups = _numbers(row["speedups"])
    return CaseRecord(
        name=name,
        status=row["status"] if isinstance(row["status"], str) else None,
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
        binary=Binary(
            sha256=r.get("binary_sha256"),
            commit=run.commit,
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
        models=_stored(r.get("models"), dict[str, ModelRef]) or {},
        cases={rec.name: rec for rec in records},
    )


# --- commit order ----------------------------------------------------------------------------------------


def default_mirror() -> Path:
    """The llama.cpp mirror the builds clone (``<cache>/llama.cpp/git``): it orders commits by ancestry."""
    return paths.cache_dir() / "llama.cpp" / "git"


TIPS = 3  # commits tried as the head of the ancestry (a rerun of an older commit may be the newest run)
ANCESTRY_LIMIT = 100_000  # more than llama.cpp's whole history


def _positions(mirror: Path, runs: Sequence[RunRow]) -> dict[str, int] | None:
    """Each run's commit at its place in the ancestry of one of them (oldest 0): the first of the newest
    run's commits whose ancestry holds every other. None when none does (a sibling branch, a commit the
    mirror lacks, no mirror): half an ancestry is no order.

    (Issue 17 brings ``history.ancestry.topo_positions``, one ``git rev-list`` over all of them; this uses
    the ``ancestors`` lookup main has.)"""
    commits = {r.commit for r in runs}
    newest = list(
        dict.fromkeys(r.commit for r in sorted(runs, key=lambda r: (r.started, r.pk), reverse=True))
    )
    for tip in newest[:TIPS]:
        chain = ancestors(mirror, tip, limit=ANCESTRY_LIMIT)
        if chain is None:
            return None  # no mirror, or it lacks the newest commit
        found = _place(commits, [*reversed(chain), tip])
        if found is not None:
            return found
    return None


def _place(commits: set[str], line: list[str]) -> dict[str, int] | None:
    """Each commit (full or abbreviated) at its index in ``line`` (full shas, oldest first); None when one
    is not there."""
    by_prefix: dict[str, list[int]] = {}
    for i, sha in enumerate(line):
        by_prefix.setdefault(sha[:7], []).append(i)
    out: dict[str, int] = {}
    for commit in commits:
        at = [i for i in by_prefix.get(commit[:7], []) if line[i].startswith(commit)]
        if not at:
            return None
        out[commit] = at[0]
    return out


def groups(runs: Sequence[RunRow], mirror: Path | None) -> dict[tuple[str, str], Group]:
    """The runs by device class and backend, each in commit order."""
    out: dict[tuple[str, str], Group] = {}
    for run in sorted(runs, key=lambda r: (r.started, r.pk)):
        out.setdefault(run.group, Group(*run.group)).runs.append(run)
    for group in out.values():
        pos = _positions(mirror, group.runs) if mirror is not None else None
        if pos is not None:
            group.runs.sort(key=lambda r: pos[r.commit])  # stable: one commit's runs stay in time order
            group.ordered_by = "ancestry"
    return out


# --- change points ---------------------------------------------------------------------------------------


def change_points(
    path: Path, device: str | None, mirror: Path | None, runs: list[RunRow]
) -> list[ChangePoint]:
    """The change points (``history.changes``) among the runs the site shows, its commits ordered by the
    same mirror as the site's series."""
    return find_changes(path, device=device, mirror=mirror, runs={run.run_id for run in runs})
