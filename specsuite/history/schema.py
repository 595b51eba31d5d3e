"""The history's file: its tables, their versions and migrations, and opening it to write or to read.

The file is ``$SPEC_HISTORY``, else ``<cache>/history.sqlite``; ``$SPEC_HISTORY_TIMEOUT_S`` (default 30)
is how long a run waits for another process's lock on it. WAL and a busy timeout let runs from several
processes on one machine record at the same moment. Its schema is versioned with ``PRAGMA user_version``;
``MIGRATIONS`` are applied in order, all in one transaction, when a writer opens it (``connect``). A reader
(``reading``) never migrates or writes: it reads an older schema as it is (``schema_version`` says which
columns it has), and refuses a newer or foreign file with one line saying what to do.
"""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from specsuite.common import locks, paths, settings
from specsuite.common.errors import UserError

# v1. Times are ISO 8601 text as results.json has them; JSON columns hold lists and tables.
_V1 = (
    """CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        llama_commit TEXT NOT NULL,          -- lower-case hex, 7 to 40 digits (from v7 b<N> or tree-<hash>)
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
# v6: per-block overhead (measure.overhead: ms per verification block, the baseline's ms per token, their
# ratio per round and its median, tokens per block) and whether the speed was physically impossible
# (measure.plausible: not gated, left out of the speed change points); null in runs recorded before.
_V6 = tuple(
    f"ALTER TABLE cases ADD COLUMN {col}"
    for col in ("block_ms REAL", "token_ms REAL", "block_ratio REAL", "tokens_per_block REAL",
                "block_ratios TEXT", "implausible_speed INTEGER")
)  # fmt: skip
# v7: real history without git (llamacpp.identity): upstream's build number of the run's llama.cpp, which
# orders runs where no mirror knows their commits; llama_commit may then be ``b<N>`` (a build whose commit
# nobody named) or ``tree-<hash>`` (a tree nothing names); null build in runs recorded before.
_V7 = ("ALTER TABLE runs ADD COLUMN llama_build INTEGER",)
# v8: every registered metric of a case (results.metrics) in one JSON object, ``metrics`` (its name -> its
# number; a metric the case has no number for is left out): a metric added later needs no column and no
# migration. Filled here from the columns v1 to v7 kept them in (null from v8 on: the registry's metrics are
# written to ``metrics`` only), and the prefill, never a column, from each stored record. A value of no JSON
# type (a blob a hand-edited row may hold) is left out; a text stays text, and readers skip its row with a
# warning as they did. Frozen: a later metric's backfill is a later migration, never an edit of this one.
_V8_FROM_COLUMNS = (
    ("accept_rate", "cases.accept_rate"),
    ("accept_len", "cases.accept_len"),
    ("pos0_rate", "cases.pos0_rate"),
    ("speedup", "COALESCE(cases.speedup_median, cases.speedup)"),
    ("decode_tps", "cases.decode_tps"),
    ("block_ratio", "cases.block_ratio"),
    ("tokens_per_block", "cases.tokens_per_block"),
    ("block_ms", "cases.block_ms"),
    ("identical_fraction", "cases.identical_fraction"),
)
_V8_FROM_RECORDS = (  # (key, its SQL over a stored record t.record, the record's numbers it needs)
    ("prefill_ratio", "json_extract(t.record, '$.prefill.ratio')", ("$.prefill.ratio",)),
    ("ttft_ratio", "round(json_extract(t.record, '$.prefill.ttft_ms') * 1.0 / "
                   "json_extract(t.record, '$.prefill.base_ttft_ms'), 4)",
     ("$.prefill.ttft_ms", "$.prefill.base_ttft_ms")),
)  # fmt: skip
_V8_VALUES = " UNION ALL ".join(
    [f"SELECT '{key}' AS k, {expr} AS v" for key, expr in _V8_FROM_COLUMNS]
    + [
        f"SELECT '{key}', {expr} FROM case_texts t WHERE t.run = cases.run AND t.name = cases.name "
        "AND json_valid(t.record) "
        + " ".join(f"AND json_type(t.record, '{n}') IN ('integer', 'real')" for n in numbers)
        for key, expr, numbers in _V8_FROM_RECORDS
    ]
)
_V8 = (
    "ALTER TABLE cases ADD COLUMN metrics TEXT",
    f"UPDATE cases SET metrics = (SELECT json_group_object(k, v) FROM ({_V8_VALUES}) "
    "WHERE v IS NOT NULL AND typeof(v) IN ('integer', 'real', 'text'))",
)
MIGRATIONS: tuple[tuple[str, ...], ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8)


class SchemaTooNew(sqlite3.DatabaseError):
    """The file was written by a newer specsuite; an older one must not guess at its tables."""


class NotAHistory(sqlite3.DatabaseError):
    """A SQLite file of something else (tables, no schema version of ours): never written, never read."""


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
    if schema_version(conn) == target:
        return target
    with transaction(conn):
        version = schema_version(conn)  # again, under the write lock: another process may have just migrated
        if version > target:
            raise SchemaTooNew(f"history schema v{version} is newer than this specsuite's v{target}")
        for step in steps[version:]:
            for statement in step:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {target}")
    return target


def schema_version(conn: sqlite3.Connection) -> int:
    """The history's schema version as it is (a reader never migrates): which columns it has."""
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _checked_version(conn: sqlite3.Connection, target: int = len(MIGRATIONS)) -> int:
    """The schema version, once the file is known to be ours (or empty): reading it writes nothing.

    SchemaTooNew for a newer specsuite's file, NotAHistory for a file with tables but no version of ours.
    Both read in one transaction: another process creating the history may commit its tables and version
    between two separate reads, and an empty file would then look like a stranger's."""
    conn.execute("BEGIN")
    try:
        found = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY 1")]
        version = schema_version(conn)
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


# --- reading ---------------------------------------------------------------------------------------------


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
        yield conn if schema_version(conn) else None
    except sqlite3.Error as exc:
        raise _unreadable(target, exc) from None
    finally:
        conn.close()
