"""What the site shows, read from the history: every run (with its case records, streamed run by run), each
device class and backend's runs in commit order, and the change points of the history.

Commit order: ancestry from the llama.cpp mirror where it knows every commit of a device class and backend
(runs of one commit by time), else time. A stored record that cannot be decoded is shown from the numbers of
its ``cases`` row, with one warning line.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import re
import sqlite3
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import msgspec

from specsuite.common import paths
from specsuite.common.errors import UserError
from specsuite.history import db as history
from specsuite.history.ancestry import ancestors
from specsuite.results.document import Binary, BinarySource, Device, Harness, Run, RunOptions
from specsuite.results.record import CaseRecord, SpeedSamples, decode_record, finite

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
_RECORD = msgspec.json.Decoder(CaseRecord)
_NUMBERS = msgspec.json.Decoder(list[float | None])


class ChangePointLike(Protocol):
    """What the site reads of a change point (``history.changes.ChangePoint``, issue 17's detector)."""

    @property
    def case(self) -> str: ...
    @property
    def metric(self) -> str: ...
    @property
    def device_class(self) -> str: ...
    @property
    def backend(self) -> str: ...
    @property
    def before_commit(self) -> str: ...
    @property
    def after_commit(self) -> str: ...
    @property
    def after_run_id(self) -> str: ...
    @property
    def mean_before(self) -> float: ...
    @property
    def mean_after(self) -> float: ...
    @property
    def change(self) -> float: ...
    @property
    def p_value(self) -> float | None: ...


@dataclass(eq=False)
class RunRow:
    """One run of the history: its ``runs`` row (every column, models and options parsed)."""

    row: dict[str, Any]
    slug: str = ""  # its page: runs/<slug>.html

    @property
    def pk(self) -> int:
        return int(self.row["id"])

    @property
    def run_id(self) -> str:
        return str(self.row["run_id"])

    @property
    def commit(self) -> str:
        return str(self.row["llama_commit"])

    @property
    def started(self) -> str:
        return str(self.row["started"] or self.row["recorded"] or "")

    @property
    def group(self) -> tuple[str, str]:
        return str(self.row["device_class"]), str(self.row["backend"])


@dataclass(eq=False)
class Group:
    """One device class and backend: its runs in commit order, and each case's records over them."""

    device_class: str
    backend: str
    runs: list[RunRow] = field(default_factory=list)
    ordered_by: str = "time"  # "ancestry" when the mirror knew every commit
    series: dict[str, list[tuple[RunRow, CaseRecord]]] = field(default_factory=dict)

    @property
    def slug(self) -> str:
        return slug(f"{self.device_class}--{self.backend}")


def slug(text: str, limit: int = 80) -> str:
    """A file name from data: safe characters only; a stable hash of the text where they changed it (two
    names that clean to the same one stay apart)."""
    clean = _SAFE.sub("_", text).strip("._-")[:limit]
    if clean == text and clean:
        return clean
    import hashlib

    return f"{clean or 'x'}-{hashlib.sha256(text.encode('utf-8', 'replace')).hexdigest()[:8]}"


def load_runs(path: Path, device: str | None) -> list[RunRow]:
    """Every run (on ``device``: a name or class), oldest first, each with a page name of its own.

    An unknown device is a UserError naming the devices the history has."""
    if device is not None:
        _, devices = history.names(path)
        if device.lower() not in {d.lower() for d in devices}:
            have = ", ".join(devices) or "none"
            raise UserError(f"--device {device!r}: not in the history; it has: {have}")
    rows = [RunRow(r) for r in history.runs(path, device=device)]
    taken: set[str] = set()
    for run in rows:
        name = slug(run.run_id)
        run.slug = name if name not in taken else f"{name}-{run.pk}"  # one run id recorded twice
        taken.add(run.slug)
    return rows


# --- case records, run by run ----------------------------------------------------------------------------

_CASES_SQL = """
SELECT c.run, c.name, c.status, c.reason, c.accept_rate, c.accept_len, c.pos0_rate,
       COALESCE(c.speedup_median, c.speedup) AS speedup, c.per_position_rate, c.speedups, t.record
FROM cases c LEFT JOIN case_texts t ON t.run = c.run AND t.name = c.name
WHERE c.run IN ({runs}) ORDER BY c.run, c.rowid
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
        # the ids ride in a temp table: an IN list of 10 000 parameters passes SQLite's limit
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS site_runs (id INTEGER PRIMARY KEY)")
        conn.execute("DELETE FROM site_runs")
        conn.executemany("INSERT INTO site_runs VALUES (?)", [(pk,) for pk in by_pk])
        cur = conn.execute(_CASES_SQL.format(runs="SELECT id FROM site_runs"))
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


def run_document(run: RunRow, records: Sequence[CaseRecord]) -> Run:
    """The run as results.json would hold it, from its history row and records (no results folder)."""
    r = run.row
    options = None
    if isinstance(r.get("options"), dict):
        try:
            options = msgspec.convert(r["options"], RunOptions)
        except msgspec.ValidationError:
            options = None
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
        options=options,
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


def changes_available() -> bool:
    """Whether this specsuite has the change-point detector (issue 17's ``history.changes``)."""
    return importlib.util.find_spec("specsuite.history.changes") is not None


def change_points(path: Path, device: str | None, mirror: Path | None) -> list[ChangePointLike]:
    """Every change point of the history (``history.changes.find_changes``, issue 17's detector); none
    while that module is not installed."""
    try:  # a bridge until issue 17 lands: then a plain import
        changes: Any = importlib.import_module("specsuite.history.changes")
    except ImportError:
        return []
    return list(changes.find_changes(path, device=device, mirror=mirror))
