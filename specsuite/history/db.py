"""The suite's memory: every run's results in one SQLite file, and the baseline lookup over it.

One row per run (llama.cpp and harness commits, tier, device, backend, driver/CUDA, cases.toml hash,
model sha256s, times) and one per case (every metric of the case record, plus the record itself as JSON).
A run is written in ONE transaction when it ends (``record_run``); WAL and a busy timeout let runs from
several processes on one machine record at the same moment. Recording never breaks a run: a database
that is broken, unreadable, corrupt, locked too long or newer than this code gets one warning line.

The file is ``$SPEC_HISTORY``, else ``<cache>/history.sqlite``; ``$SPEC_HISTORY_TIMEOUT_S`` (default 30)
is how long a run waits for another process's lock on it. Its schema is versioned with ``PRAGMA
user_version``; ``MIGRATIONS`` are applied in order, all in one transaction, when it is opened.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import random
import re
import sqlite3
import statistics
import sys
import time
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from specsuite.common import locks, paths, settings
from specsuite.common.errors import UserError
from specsuite.results import checks
from specsuite.results.config import RunConfig
from specsuite.results.document import Device, Harness, Run, load_run
from specsuite.results.record import CaseRecord, SpeedSamples, decode_record, finite

_HEX = re.compile(r"[0-9a-f]{7,40}")

# v1. Times are ISO 8601 text as results.json has them; JSON columns hold lists and tables.
_V1 = (
    """CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        llama_commit TEXT NOT NULL,          -- lower-case hex, 7 to 40 digits, as the binary reported it
        harness_commit TEXT,
        harness_version TEXT,
        results_schema INTEGER,
        tier TEXT,
        selector TEXT,
        device_name TEXT NOT NULL,
        device_class TEXT NOT NULL,
        backend TEXT NOT NULL,
        driver TEXT,
        cuda TEXT,
        cases_sha256 TEXT,
        binary_sha256 TEXT,
        source_kind TEXT,
        host TEXT,
        started TEXT,
        finished TEXT,
        wall_s REAL,
        recorded TEXT NOT NULL,
        models TEXT NOT NULL,                -- {"<lock name>": {"sha256": ..., "size": ...}}
        options TEXT                         -- {"strict": ..., "repeat": ..., "rtol": ..., ...}
    )""",
    """CREATE TABLE cases (
        run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        status TEXT,
        reason TEXT,
        message TEXT,
        measured INTEGER NOT NULL,           -- regress.is_measured: usable as a baseline
        spec_type TEXT,
        n_max INTEGER,
        target TEXT,
        draft TEXT,
        drafted INTEGER,
        accepted INTEGER,
        drafts INTEGER,
        accept_rate REAL,
        accept_len REAL,
        pos0_rate REAL,
        per_position_rate TEXT,              -- JSON list
        decode_tps REAL,
        baseline_decode_tps REAL,
        speedup REAL,
        speedup_median REAL,
        speedup_spread REAL,
        speed_repeat INTEGER,
        spec_tps TEXT,                       -- JSON lists of the speed samples
        base_tps TEXT,
        speedups TEXT,
        identical_fraction REAL,
        wall_s REAL,
        record TEXT NOT NULL,                -- the whole case record
        PRIMARY KEY (run, name)
    )""",
    "CREATE INDEX runs_by_setup ON runs (device_class, backend, cases_sha256)",
    "CREATE INDEX runs_by_time ON runs (started)",
    "CREATE INDEX cases_by_name ON cases (name, measured)",
)
# v2: the texts (the whole record, the failure message: kilobytes per case) move out of `cases` into
# `case_texts`, so a listing over 10 000 runs scans compact rows of numbers, and a record is read only for
# the one baseline it returns.
_V2 = (
    """CREATE TABLE case_texts (
        run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        message TEXT,
        record TEXT NOT NULL,                -- the whole case record
        PRIMARY KEY (run, name)
    )""",
    "INSERT INTO case_texts (run, name, message, record) SELECT run, name, message, record FROM cases",
    "ALTER TABLE cases DROP COLUMN record",
    "ALTER TABLE cases DROP COLUMN message",
)
# v3: whether the run's speculative rounds disagreed in a counter (the change points and the drift gate
# treat such a case's acceptance as noisy); null in runs recorded before it was measured.
_V3 = ("ALTER TABLE cases ADD COLUMN nondeterministic INTEGER",)
# v4: the run's configuration as the binary states it (its --help defaults, its build options:
# results.config.RunConfig), so that a change of either is named beside the change points; null before.
_V4 = ("ALTER TABLE runs ADD COLUMN config TEXT",)
# v5: the concurrency axis (docs/concurrency.md): slots and streams, the sweep a case is a member of, its
# aggregate speedup and the sweep's crossover in that run; null in runs recorded before.
_V5 = (
    "ALTER TABLE cases ADD COLUMN parallel INTEGER",
    "ALTER TABLE cases ADD COLUMN streams INTEGER",
    "ALTER TABLE cases ADD COLUMN sweep TEXT",
    "ALTER TABLE cases ADD COLUMN aggregate_speedup REAL",
    "ALTER TABLE cases ADD COLUMN crossover_np INTEGER",
)
# v6: per-block overhead (suite.overhead: ms per verification block, the baseline's ms per token, their
# ratio per round and its median, tokens per block) and whether the speed was physically impossible
# (suite.plausible: not gated, left out of the speed change points); null in runs recorded before.
_V6 = tuple(
    f"ALTER TABLE cases ADD COLUMN {col}"
    for col in ("block_ms REAL", "token_ms REAL", "block_ratio REAL", "tokens_per_block REAL",
                "block_ratios TEXT", "implausible_speed INTEGER")
)  # fmt: skip
MIGRATIONS: tuple[tuple[str, ...], ...] = (_V1, _V2, _V3, _V4, _V5, _V6)


class SchemaTooNew(sqlite3.DatabaseError):
    """The file was written by a newer specsuite; an older one must not guess at its tables."""


class NotAHistory(sqlite3.DatabaseError):
    """A SQLite file of something else (tables, no schema version of ours): never written, never read."""


@dataclass(frozen=True)
class Baseline:
    run_id: str
    commit: str
    started: str  # the run's start time (its record time when the run had none)
    record: CaseRecord  # the case record at that run
    config: RunConfig | None = None  # that run's configuration (None: recorded before it was)


def default_path() -> Path:
    """``$SPEC_HISTORY``, else ``<cache>/history.sqlite``."""
    if env := settings.load().history_path:
        return Path(env).expanduser()
    return paths.cache_dir() / "history.sqlite"


def busy_timeout_s() -> float:
    """``$SPEC_HISTORY_TIMEOUT_S`` (30 s: another run's commit takes milliseconds; a lock held longer is a
    stuck process): how long to wait for another process's lock."""
    return settings.load().history_timeout_s


# --- opening and migrating --------------------------------------------------------------------------------


# SQLite's write lock of a WAL database: a POSIX lock on this byte of its -shm file (WALINDEX_LOCK_OFFSET)
_WAL_WRITE_LOCK = 120
_QUIET_WAIT_MS = 1000  # another run's commit takes milliseconds: a wait this short is not worth a line


def _begin(conn: sqlite3.Connection, wait_ms: int) -> bool:
    """BEGIN IMMEDIATE within ``wait_ms``; False when another process still holds the write lock."""
    conn.execute(f"PRAGMA busy_timeout = {wait_ms}")
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc):
            raise
        return False
    return True


def _begin_immediate(conn: sqlite3.Connection) -> None:
    """BEGIN IMMEDIATE; when another process is still writing after a second, one line: who (from the
    kernel's table of locks), which file, and how much longer this one waits (the busy timeout)."""
    wait_ms = int(conn.execute("PRAGMA busy_timeout").fetchone()[0])
    quiet = min(wait_ms, _QUIET_WAIT_MS)
    try:
        if _begin(conn, quiet):
            return
        file = conn.execute("PRAGMA database_list").fetchone()[2]
        who = locks.describe(locks.holders(f"{file}-shm", offset=_WAL_WRITE_LOCK))
        if quiet < wait_ms:
            more = f"up to {(wait_ms - quiet) / 1000:g} s more"
            print(f"history: waiting {more} for {who}, which is writing {file}", file=sys.stderr)
            if _begin(conn, wait_ms - quiet):
                print(f"history: got {file}", file=sys.stderr)
                return
        raise sqlite3.OperationalError(f"database is locked: {who} held it for {wait_ms / 1000:g} s")
    finally:
        conn.execute(f"PRAGMA busy_timeout = {wait_ms}")


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE (the write lock up front: no deadlock upgrading a read) ... COMMIT, or ROLLBACK."""
    _begin_immediate(conn)
    try:
        yield conn
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def migrate(conn: sqlite3.Connection, steps: Sequence[Sequence[str]] = MIGRATIONS) -> int:
    """Bring the database to ``len(steps)``: the missing steps in order, in one transaction. The version."""
    target = len(steps)
    if _version(conn) == target:
        return target
    with transaction(conn):
        version = _version(conn)  # again, under the write lock: another process may have just migrated
        if version > target:
            raise SchemaTooNew(f"history schema v{version} is newer than this specsuite's v{target}")
        for step in steps[version:]:
            for statement in step:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {target}")
    return target


def _version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def schema_version(conn: sqlite3.Connection) -> int:
    """The history's schema version as it is (a reader never migrates): which columns it has."""
    return _version(conn)


def _checked_version(conn: sqlite3.Connection, target: int = len(MIGRATIONS)) -> int:
    """The schema version, once the file is known to be ours (or empty): reading it writes nothing.

    SchemaTooNew for a newer specsuite's file, NotAHistory for a file with tables but no version of ours.
    Both read in one transaction: another process creating the history may commit its tables and version
    between two separate reads, and an empty file would then look like a stranger's."""
    conn.execute("BEGIN")
    try:
        found = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY 1")]
        version = _version(conn)
    finally:
        conn.execute("COMMIT")
    if version > target:
        raise SchemaTooNew(f"history schema v{version} is newer than this specsuite's v{target}")
    if version == 0 and found:
        raise NotAHistory(f"it is not a specsuite history (it holds the table(s) {', '.join(found)})")
    return version


def _wal(conn: sqlite3.Connection, timeout_s: float) -> None:
    """Switch to WAL (persistent: readers never block the writer), retrying while another process holds
    the file: SQLite answers "database is locked" to a journal-mode change at once, without calling the
    busy handler, so two runs creating the history together would otherwise lose one record."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(random.uniform(0.005, 0.05))  # jitter: two waiters do not retry in lockstep


def connect(path: Path, *, timeout_s: float | None = None) -> sqlite3.Connection:
    """Open (creating it and its folder if needed) and migrate the history; autocommit mode.

    ``timeout_s``: how long to wait for another process's lock (default: ``busy_timeout_s()``)."""
    timeout_s = busy_timeout_s() if timeout_s is None else timeout_s
    path.parent.mkdir(parents=True, exist_ok=True)
    # isolation_level=None: transactions are only the explicit ones (``transaction``), never implicit
    conn = sqlite3.connect(str(path), timeout=timeout_s, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
        _checked_version(conn)  # a foreign or newer file: refused before its journal mode is touched
        _wal(conn, timeout_s)
        conn.execute("PRAGMA foreign_keys = ON")
        migrate(conn)
    except BaseException:
        conn.close()
        raise
    return conn


# --- recording -------------------------------------------------------------------------------------------


def _json(value: Any) -> str | None:
    """Compact JSON of a typed value; NaN and infinities become null (strict JSON has neither)."""
    return None if value is None else msgspec.json.encode(value).decode()


def _commit(run: Run) -> tuple[str | None, str | None]:
    """(the llama.cpp commit, None) or (None, why the run cannot be placed in history)."""
    raw = run.binary.commit
    if raw is None:
        return None, "binary.commit is null: a run without its llama.cpp commit has no place in history"
    commit = raw.strip().lower()
    if not _HEX.fullmatch(commit):
        return None, f"binary.commit {raw!r} is not a git commit (7 to 40 hex digits)"
    return commit, None


def device_class(name: str) -> str:
    """A device's class from its name when results.json has none: 'NVIDIA H200' -> 'nvidia-h200'.

    CPU runs become ``cpu-<machine>`` (as schema 2 writes them); schema-1 results are recorded on the
    machine that ran them, so its architecture is the run's."""
    if name.lower() == "cpu":
        return f"cpu-{platform.machine() or 'unknown'}"
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def _run_row(run: Run, commit: str) -> dict[str, Any]:
    device, harness, name = run.device or Device(), run.harness or Harness(), run.device_name
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    return {
        "run_id": run.run_id or f"unnamed-{now}",
        "llama_commit": commit,
        "harness_commit": harness.commit,
        "harness_version": harness.version,
        "results_schema": run.schema,
        "tier": run.tier,
        "selector": run.selector,
        "device_name": name,
        "device_class": device.device_class or device_class(name),
        "backend": run.binary.backend or "unknown",
        "driver": device.driver,
        "cuda": device.cuda,
        "cases_sha256": run.cases_sha256,
        "binary_sha256": run.binary.sha256,
        "source_kind": run.binary.source.kind,
        "host": run.host,
        "started": run.started or now,
        "finished": run.finished,
        "wall_s": finite(run.wall_s),
        "recorded": now,
        "models": _json(run.models),
        "options": _json(run.options),
        "config": _json(run.config),
    }


def _case_row(rec: CaseRecord) -> dict[str, Any]:
    speed = rec.speed or SpeedSamples()
    return {
        "name": rec.name,
        "status": rec.status,
        "reason": rec.reason,
        "measured": int(rec.measured),
        "spec_type": rec.spec_type,
        "n_max": rec.n_max,
        "target": rec.target,
        "draft": rec.draft,
        "drafted": rec.drafted,
        "accepted": rec.accepted,
        "drafts": rec.drafts,
        "accept_rate": finite(rec.accept_rate),
        "accept_len": finite(rec.accept_len),
        "pos0_rate": finite(rec.pos0),
        "per_position_rate": _json(rec.per_position_rate),
        "decode_tps": finite(rec.decode_tps),
        "baseline_decode_tps": finite(rec.baseline_decode_tps),
        "speedup": finite(rec.speedup),
        "speedup_median": finite(speed.speedup_median),
        "speedup_spread": finite(speed.speedup_spread),
        "speed_repeat": speed.repeat,
        "spec_tps": _json(speed.spec_tps) if rec.speed else None,
        "base_tps": _json(speed.base_tps) if rec.speed else None,
        "speedups": _json(rec.speed_samples),
        "identical_fraction": finite(rec.identical_fraction),
        "wall_s": finite(rec.wall_s),
        "nondeterministic": int(rec.nondeterministic) if rec.rounds else None,
        "block_ms": finite(rec.block_ms),
        "token_ms": finite(rec.token_ms),
        "block_ratio": finite(rec.block_ratio),
        "tokens_per_block": finite(rec.tokens_per_block),
        "block_ratios": _json(rec.block_samples),
        "implausible_speed": int(rec.implausible_speed is not None) if rec.speed else None,
        **_concurrency_columns(rec),
    }


def _concurrency_columns(rec: CaseRecord) -> dict[str, Any]:
    conc = rec.concurrency
    return {
        "parallel": rec.parallel,
        "streams": rec.streams,
        "sweep": rec.sweep,
        "aggregate_speedup": finite(conc.speedup) if conc is not None else None,
        "crossover_np": conc.crossover_np if conc is not None else None,
    }


def _insert(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> int:
    cols = ", ".join(row)
    marks = ", ".join(f":{k}" for k in row)
    cur = conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", row)
    return int(cur.lastrowid or 0)


def insert_run(conn: sqlite3.Connection, run: Run) -> int:
    """Write one run and its cases inside the caller's transaction; the run's row id.

    The same run recorded again (same run_id and start time) replaces the earlier record; another run under
    the same id (another start) is RunIdTaken: a history never holds two runs with one id."""
    commit, why = _commit(run)
    if commit is None:
        raise ValueError(why)
    row = _run_row(run, commit)
    _check_id(conn, row["run_id"], row["started"])
    conn.execute("DELETE FROM runs WHERE run_id = ? AND started = ?", (row["run_id"], row["started"]))
    run_pk = _insert(conn, "runs", row)
    for rec in run.cases.values():
        _insert(conn, "cases", {"run": run_pk, **_case_row(rec)})
        text = {"run": run_pk, "name": rec.name, "message": rec.message, "record": _json(rec)}
        _insert(conn, "case_texts", text)
    return run_pk


def _problem(why: str, path: Path) -> str:
    why = " ".join(why.split())  # one line, whatever the error text
    return f"{why} ({path})"


def try_record(
    run: Run, path: Path | None = None, *, timeout_s: float | None = None
) -> tuple[int | None, str | None]:
    """Record one finished run in one transaction: (its row id, None), or (None, ``<why> (<path>)``)
    when nothing of it could be written.

    Never raises for the history's sake: a refused document (no llama.cpp commit, no cases) or a
    database that cannot be opened, is corrupt, locked for ``timeout_s`` (default ``busy_timeout_s()``)
    or newer than this code is the second element."""
    target = Path(path) if path is not None else default_path()
    commit, why = _commit(run)
    if commit is None:
        return None, _problem(str(why), target)
    try:
        with contextlib.closing(connect(target, timeout_s=timeout_s)) as conn, transaction(conn):
            return insert_run(conn, run), None
    except UserError as exc:  # a bad SPEC_HISTORY_TIMEOUT_S: its own message says what to do
        return None, _problem(str(exc), target)
    except Exception as exc:  # history is auxiliary: whatever went wrong, the run itself must go on
        kind = "" if isinstance(exc, (sqlite3.Error, OSError, RunIdTaken)) else f"{type(exc).__name__}: "
        return None, _problem(f"{kind}{exc}", target)


def record_run(run: Run, path: Path | None = None, *, timeout_s: float | None = None) -> int | None:
    """``try_record``, its problem printed as one ``warning: history not recorded: ...`` line on stderr."""
    row, problem = try_record(run, path, timeout_s=timeout_s)
    if problem:
        print(f"warning: history not recorded: {problem}", file=sys.stderr)
    return row


# --- importing finished runs -----------------------------------------------------------------------------


def importable(file: Path) -> Run:
    """A finished run's document, checked as strictly as a live run's record: read as results.json (a
    regular file, bounded), every case record in range and keeping the server's counter relations
    (``results.checks``), a llama.cpp commit, some cases. UserError: one line naming the file and the
    first problem (and how many more there are)."""
    run = load_run(file)
    commit, why = _commit(run)
    problems = checks.run_problems(run) + ([str(why)] if commit is None else [])
    if not run.cases:
        problems.append("no cases: nothing to enter")
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise UserError(f"{file}: {problems[0]}{more}; not a run the suite wrote, nothing of it entered")
    return run


class RunIdTaken(ValueError):
    """The history holds another run (another start) under this run id: a run id names one run."""


def _check_id(conn: sqlite3.Connection, run_id: str, started: str) -> None:
    """RunIdTaken when the history holds another run (another start) under ``run_id``."""
    for (other,) in conn.execute("SELECT COALESCE(started, '') FROM runs WHERE run_id = ?", (run_id,)):
        if other != started:
            raise RunIdTaken(
                f"run id {run_id!r} already names another run in the history (started {other or '?'}, "
                f"this one {started or '?'}); a run id names one run: give each run a results folder of its "
                "own (with SPEC_RESULTS_DIR unset every run gets a new results/<run-id>)"
            )


def import_runs(files: Sequence[str | Path], db_path: Path | None = None) -> list[str]:
    """Enter finished runs (``results.json`` files or ``results/<run>`` folders) into the history; the run
    ids entered, in order. The one way a run from elsewhere (an artifact, another machine, an older cache,
    the shards of ``merge``) reaches the history.

    Idempotent by run id: a run the history already holds (same id, same start) is left as it is (and not
    returned), so importing the same runs twice enters each once. Every document is read and checked first,
    as strictly as a live run's record (``importable``), and the call is all or nothing, as its one
    transaction is: any refused document enters nothing, and ``Refused`` holds one line per refused file. A
    run whose id the history (or another document of the call) holds for another run is refused too: a
    history never holds two runs under one id."""
    runs: list[tuple[Path, Run]] = []
    refused: list[str] = []
    for f in files:
        try:
            runs.append((Path(f), importable(Path(f))))
        except UserError as exc:
            refused.append(str(exc))
    if refused:
        raise Refused(refused, len(files))
    target = Path(db_path) if db_path is not None else default_path()
    entered: list[str] = []
    try:
        with contextlib.closing(connect(target)) as conn, transaction(conn):
            for file, run in runs:
                try:
                    _check_id(conn, run.run_id, str(run.started))
                except RunIdTaken as exc:
                    refused.append(f"{file}: {exc}")
                    continue
                if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run.run_id,)).fetchone():
                    continue  # entered before (by an earlier call, or as an earlier file of this one)
                insert_run(conn, run)
                entered.append(run.run_id)
            if refused:
                raise Refused(refused, len(files))  # rolls the transaction back: nothing entered
    except (sqlite3.Error, OSError) as exc:  # nothing was entered: the transaction rolled back
        fix = "upgrade specsuite" if isinstance(exc, SchemaTooNew) else "check the file and try again"
        raise UserError(f"history {target}: nothing entered ({' '.join(str(exc).split())}); {fix}") from None
    return entered


class Refused(UserError):
    """The documents ``import_runs`` refused, one line each (``lines``); nothing of the call was entered."""

    def __init__(self, lines: list[str], given: int) -> None:
        others = given - len(lines)
        tail = (
            f"; nothing entered: all or nothing, so the other {others} file(s) were not entered either"
            if others
            else ""
        )
        self.lines = [*lines[:-1], lines[-1] + tail]
        super().__init__("\n".join(self.lines))


# --- reading ---------------------------------------------------------------------------------------------

_TIME = "COALESCE(r.started, r.recorded)"
_CASE_COLS = (
    f"r.run_id, r.llama_commit AS 'commit', {_TIME} AS started, r.device_name AS device, r.device_class, "
    "r.backend, r.tier, c.name AS 'case', c.status, c.reason, c.accept_rate, c.accept_len, c.pos0_rate, "
    "COALESCE(c.speedup_median, c.speedup) AS speedup"
)


def overhead_columns(conn: sqlite3.Connection) -> str:
    """The per-block overhead's columns; a history older than v6 (read as it is, never migrated by a
    reader) has none: nulls."""
    if _version(conn) >= 6:
        return "c.block_ratio, c.block_ms, c.implausible_speed"
    return "NULL AS block_ratio, NULL AS block_ms, NULL AS implausible_speed"


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
    sql = f"SELECT r.id FROM runs r WHERE {where} ORDER BY {_TIME} DESC, r.id DESC LIMIT ?"
    return sql, [*args, -1 if last is None else last]


def _dicts(cur: sqlite3.Cursor) -> list[dict[str, Any]]:
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row, strict=True)) for row in cur]


def _unreadable(path: Path, exc: BaseException) -> UserError:
    if isinstance(exc, SchemaTooNew):
        fix = "upgrade specsuite"
    elif isinstance(exc, NotAHistory):
        fix = "point SPEC_HISTORY at a specsuite history (or at a new file)"
    else:
        fix = "it is damaged or not SQLite: move it aside (the next recording run starts a new one)"
    return UserError(f"history {path}: cannot read it ({' '.join(str(exc).split())}); {fix}")


def open_read_only(path: Path, timeout_s: float | None = None) -> sqlite3.Connection:
    """The history opened so that SQLite writes nothing: ``mode=ro`` (no schema, no migration, no
    journal-mode switch), and ``immutable=1`` when no write-ahead log is in use or this process cannot
    write the folder (a read-only filesystem): a read-only open of a WAL database otherwise creates -wal
    and -shm files it cannot remove. With no -wal file no writer has the database open, so the file
    holds every committed run; a writer starting meanwhile can at worst make this read fail (an error
    line), never change the file."""
    timeout_s = busy_timeout_s() if timeout_s is None else timeout_s
    uri = f"{path.absolute().as_uri()}?mode=ro"
    wal = path.with_name(path.name + "-wal")
    if not wal.exists() or not os.access(path.parent, os.W_OK):
        uri += "&immutable=1"
    conn = sqlite3.connect(uri, uri=True, timeout=timeout_s, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
        _checked_version(conn)
    except BaseException:
        conn.close()
        raise
    return conn


@contextlib.contextmanager
def reading(path: Path | None, *, recording: bool = False) -> Iterator[sqlite3.Connection | None]:
    """The history for reading; None when there is no file or it holds no schema yet (reading never
    creates or changes one). ``recording``: the lookups of a run that records itself at its end, which
    may open it as its writer does (migrating an older schema); every other reader opens it read-only.

    A broken, foreign or newer file is a UserError naming it and what to do."""
    target = Path(path) if path is not None else default_path()
    if not target.exists():
        yield None
        return
    try:
        conn = connect(target) if recording else open_read_only(target)
    except (sqlite3.Error, OSError) as exc:
        raise _unreadable(target, exc) from None
    try:
        yield conn if _version(conn) else None
    except sqlite3.Error as exc:
        raise _unreadable(target, exc) from None
    finally:
        conn.close()


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
            conn.execute(f"SELECT r.* FROM runs r WHERE r.id IN ({sel}) ORDER BY {_TIME}, r.id", args)
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
_NUMBERS = ("accept_rate", "accept_len", "pos0_rate", "speedup", "block_ratio", "block_ms")


def _broken(row: dict[str, Any]) -> str | None:
    for key in (*_TEXT, *_TEXT_OR_NULL):
        if not isinstance(row[key], str) and not (row[key] is None and key in _TEXT_OR_NULL):
            return f"{key} is {row[key]!r}, not text"
    for key in _NUMBERS:
        if row[key] is not None and finite(row[key]) is None:
            return f"{key} is {row[key]!r}, not a number"
    return None


def _sound(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        if (why := _broken(row)) is None:
            out.append(row)
            continue
        print(f"warning: skipping a broken history row of {row['case']!r} in run {row['run_id']}: {why}",
              file=sys.stderr)  # fmt: skip
    return out


def case_rows(
    path: Path | None = None,
    *,
    case: str | None = None,
    device: str | None = None,
    last: int | None = None,
) -> list[dict[str, Any]]:
    """Per-case rows over commits, for the runs ``runs`` selects: grouped by case, oldest first.

    Each: run_id, commit, started, device, device_class, backend, tier, case, status, reason, accept_rate,
    accept_len, pos0_rate, speedup (the median of the repeats where there were repeats), block_ratio,
    block_ms, implausible_speed."""
    sel, args = _selected_runs(case, device, last)
    where, params = f"c.run IN ({sel})", args
    if case is not None:
        where, params = f"{where} AND c.name = ?", [*args, case]
    order = f"c.name, {_TIME}, r.id"
    with reading(path) as conn:
        if conn is None:
            return []
        cols = f"{_CASE_COLS}, {overhead_columns(conn)}"
        sql = f"SELECT {cols} FROM cases c JOIN runs r ON r.id = c.run WHERE {where} ORDER BY {order}"
        return _sound(_dicts(conn.execute(sql, params)))


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
        f"AND (:device_class IS NULL OR r.device_class = :device_class) ORDER BY {_TIME} DESC, r.id DESC"
    )
    seen: dict[str, list[float]] = {}
    with reading(path) as conn:
        rows = [] if conn is None else conn.execute(sql, {"device_class": device_class}).fetchall()
    for name, wall in rows:
        times = seen.setdefault(str(name), [])
        if len(times) < last:
            times.append(float(wall))
    return {name: statistics.median(times) for name, times in seen.items()}


# --- the baseline ----------------------------------------------------------------------------------------


def _same_commit(a: str, b: str) -> bool:
    """Short and full spellings of one commit match (either is a prefix of the other)."""
    return a.startswith(b) or b.startswith(a)


def _by_ancestry(rows: list[sqlite3.Row], ancestors: list[str]) -> list[sqlite3.Row]:
    """The rows of ancestor commits, nearest ancestor first (a commit's latest run first)."""
    by_prefix: dict[str, list[sqlite3.Row]] = {}
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
    table = "case_texts" if _version(conn) >= 2 else "cases"
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
) -> Baseline | None:
    """The run to judge ``case`` at ``commit`` against: the nearest earlier measured llama.cpp commit.

    Candidates ran on the same device class and backend with the same cases.toml (same prompts, n_max and
    models), and measured the case (passed, or failed only for a floor or regression, with numbers).

    With ``ancestors`` (``commit``'s ancestry from the llama.cpp mirror, nearest first) the nearest
    ancestor that has such a run wins (its latest run), and only ancestors qualify: a sibling branch's
    commit says nothing about what this commit changed. Without, the latest such run by time.

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
        rows = _candidates(conn, case, device_class, backend, cases_sha256, commit, ancestors, before)
        for row in rows:
            if (record := _stored_record(conn, row, case, skipped)) is not None:  # a broken row: the next
                config = _configs(conn, [row["run_id"]]).get(row["run_id"])
                return Baseline(row["run_id"], row["llama_commit"], row["t"], record, config)
    return None


def _configs(conn: sqlite3.Connection, run_ids: Sequence[str]) -> dict[str, RunConfig | None]:
    """The stored configuration of each run (None: none recorded, or it does not decode)."""
    if _version(conn) < 4 or not run_ids:
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
        return {} if conn is None else _configs(conn, run_ids)


def config_series(path: Path | None = None, *, device: str | None = None) -> list[dict[str, Any]]:
    """Every run with a recorded configuration, oldest first: run_id, commit, started, device_class,
    backend and its ``config`` (a RunConfig); a run whose configuration does not decode is left out."""
    where, args = _run_filter(None, device)
    with reading(path) as conn:
        if conn is None or _version(conn) < 4:
            return []
        sql = (
            f"SELECT r.run_id, r.llama_commit AS 'commit', {_TIME} AS started, r.device_class, r.backend, "
            f"r.config FROM runs r WHERE r.config IS NOT NULL AND {where} ORDER BY {_TIME}, r.id"
        )
        rows = _dicts(conn.execute(sql, args))
    out = []
    for row in rows:
        if (config := _decoded_config(row["run_id"], row.pop("config"))) is not None:
            out.append({**row, "config": config})
    return out


def _series_cols(conn: sqlite3.Connection) -> str:
    """The numbers of a case at a run that the change points and the drift gate read (no record decoded);
    a history older than v3 (read as it is, never migrated by a reader) has no nondeterministic column."""
    flag = "c.nondeterministic" if _version(conn) >= 3 else "NULL AS nondeterministic"
    return (
        f"r.run_id, r.llama_commit, {_TIME} AS t, c.run, c.status, c.reason, c.accept_rate, c.accept_len, "
        f"c.pos0_rate, COALESCE(c.speedup_median, c.speedup) AS speedup, c.decode_tps, c.speed_repeat, "
        f"{flag}, {overhead_columns(conn)}"
    )


def _candidates(
    conn: sqlite3.Connection,
    case: str,
    device_class: str,
    backend: str,
    cases_sha256: str,
    commit: str,
    ancestors: list[str] | None,
    before: str | None,
) -> list[sqlite3.Row]:
    """find_baseline's candidates for ``case`` at ``commit``, nearest first (see there)."""
    commit = commit.strip().lower()
    # julianday: times compare as instants whatever their offset spelling (+00:00, Z, +02:00)
    sql = (
        f"SELECT {_series_cols(conn)} FROM cases c JOIN runs r ON r.id = c.run "
        "WHERE c.name = :case AND c.measured = 1 AND r.device_class = :device_class "
        "AND r.backend = :backend AND r.cases_sha256 = :cases_sha256 "
        f"AND (:before IS NULL OR julianday({_TIME}) < julianday(:before)) ORDER BY {_TIME} DESC, r.id DESC"
    )
    args = {"case": case, "device_class": device_class, "backend": backend, "cases_sha256": cases_sha256}
    _check_time(conn, before)
    conn.row_factory = sqlite3.Row
    found = conn.execute(sql, {**args, "before": before}).fetchall()
    rows = [r for r in found if not _same_commit(r["llama_commit"], commit)]
    return _by_ancestry(rows, ancestors) if ancestors is not None else rows


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
) -> list[dict[str, Any]]:
    """The ``limit`` runs nearest before ``commit`` that measured ``case``, by find_baseline's rule
    (same setup, measured, ancestors only when ``ancestors`` is given, started ``before``), nearest first.

    Each: run_id, commit, started, status, reason, accept_rate, accept_len, pos0_rate, speedup (the median
    of the repeats), decode_tps, speed_repeat, nondeterministic (1, 0, or None: not recorded), block_ratio,
    block_ms, implausible_speed. ``recording`` as in find_baseline."""
    with reading(path, recording=recording) as conn:
        if conn is None:
            return []
        rows = _candidates(conn, case, device_class, backend, cases_sha256, commit, ancestors, before)
        return [_series_row(r) for r in rows[:limit]]


def _series_row(row: sqlite3.Row) -> dict[str, Any]:
    out = {k: row[k] for k in row.keys() if k not in ("llama_commit", "t", "run")}  # noqa: SIM118
    return {**out, "commit": row["llama_commit"], "started": row["t"]}


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
            f"SELECT {_series_cols(conn)}, c.name AS 'case', r.device_class, r.backend, r.cases_sha256 "
            f"FROM cases c JOIN runs r ON r.id = c.run WHERE c.measured = 1 AND {where} "
            + ("AND c.name = ? " if case is not None else "")
            + f"ORDER BY c.name, {_TIME}, r.id"
        )
        conn.row_factory = sqlite3.Row
        return [_series_row(r) for r in conn.execute(sql, [*args, *([case] if case is not None else [])])]
