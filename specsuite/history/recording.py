"""Writing the history: a finished run in one transaction when it ends (``record_run``), and finished runs
from elsewhere (``import_runs``: an artifact, another machine, the shards of ``merge``).

One row per run (llama.cpp and harness commits, tier, device, backend, driver/CUDA, cases.toml hash,
model sha256s, times) and one per case (its counters and samples, every registered metric of the case
record as one JSON object, results.metrics; the record itself as JSON in ``case_texts``). Recording never
breaks a run: a database that is broken, unreadable, corrupt, locked too long or newer than this code gets
one warning line. An import is checked as strictly as a live run's record and is all or nothing. A
history never holds two runs under one run id.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import platform
import re
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from specsuite.common.errors import UserError
from specsuite.history.schema import SchemaTooNew, connect, default_path, transaction
from specsuite.llamacpp.identity import HEX_RE, SHA256_RE
from specsuite.results import checks, metrics
from specsuite.results.document import Device, Harness, Run, load_run
from specsuite.results.record import CaseRecord, SpeedSamples, finite


def _json(value: Any) -> str | None:
    """Compact JSON of a typed value; NaN and infinities become null (strict JSON has neither)."""
    return None if value is None else msgspec.json.encode(value).decode()


def _commit(run: Run) -> tuple[str | None, str | None]:
    """(the llama.cpp identity key: the commit, else b<N>, else tree-<hash>; None) or (None, why the run
    cannot be placed in history)."""
    raw, build = run.binary.commit, run.binary.build
    if raw is not None and not HEX_RE.fullmatch(raw.strip().lower()):
        return None, f"binary.commit {raw!r} is not a git commit (7 to 40 hex digits)"
    if build is not None and not 0 <= build < 10**7:
        return None, f"binary.build {build!r} is not an upstream build number (0 to 9999999)"
    if run.binary.tree_sha256 is not None and not SHA256_RE.fullmatch(run.binary.tree_sha256):
        return None, f"binary.tree_sha256 {run.binary.tree_sha256[:80]!r} is not a sha256 (64 hex digits)"
    binary = msgspec.structs.replace(run.binary, commit=raw.strip().lower() if raw else None)
    if binary.key is None:
        return None, (
            "binary.commit, binary.build and binary.tree_sha256 are null: a run without its llama.cpp "
            "identity has no place in history"
        )
    return binary.key, None


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
        "llama_build": run.binary.build,
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
    """A case's row: what it is, how it ended, its counters and samples, and every registered metric it has
    a number for in ``metrics`` (results.metrics; schema v8: the columns that held some of them before stay
    null)."""
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
        "metrics": _json(metrics.values(rec)),
        "per_position_rate": _json(rec.per_position_rate),
        "baseline_decode_tps": finite(rec.baseline_decode_tps),
        "speedup_spread": finite(speed.speedup_spread),
        "speed_repeat": speed.repeat,
        "spec_tps": _json(speed.spec_tps) if rec.speed else None,
        "base_tps": _json(speed.base_tps) if rec.speed else None,
        "speedups": _json(rec.speed_samples),
        "wall_s": finite(rec.wall_s),
        "nondeterministic": int(rec.nondeterministic) if rec.rounds else None,
        "token_ms": finite(rec.token_ms),
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
