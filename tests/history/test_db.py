"""The run history on real SQLite files: recording, refusals, broken databases, migrations, concurrent
writers in real processes, reading, and the baseline lookup."""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import platform
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from testdata import DATA_ROOT

from specsuite.common import settings
from specsuite.common.errors import UserError
from specsuite.history import baseline, queries, recording, schema
from specsuite.history.baseline import find_baseline
from specsuite.history.queries import runs
from specsuite.history.recording import record_run
from specsuite.history.schema import MIGRATIONS, connect, migrate
from specsuite.results.document import HistoryNote, Run, decode_run, load_run
from specsuite.results.record import CaseRecord, decode_record, finite

REAL = DATA_ROOT / "results" / "smoke-real-1" / "results.json"
H200 = {"name": "NVIDIA H200", "class": "nvidia-h200", "driver": "580.82.07", "cuda": "13.0"}
CASES_SHA = "c" * 64


def case(
    accept_rate: float | None = 0.63, status: str = "passed", reason: str | None = None, **kw: Any
) -> dict:
    return {
        "name": kw.pop("name", "mtp"),
        "tier": "compact",
        "status": status,
        "reason": reason,
        "message": None,
        "spec_type": "draft-mtp",
        "n_max": 3,
        "target": "Qwen3.5-4B-MTP-Q4_K_M.gguf",
        "draft": None,
        "drafted": 300,
        "accepted": 189,
        "drafts": 100,
        "accept_rate": accept_rate,
        "accept_len": 2.89,
        "per_position": [80, 60, 49],
        "per_position_rate": [0.8, 0.6, 0.49],
        "pos0_rate": 0.8,
        "decode_tps": 150.0,
        "baseline_decode_tps": 90.0,
        "speedup": 1.667,
        "speed": {
            "repeat": 3,
            "spec_tps": [150.0, 151.0, 149.0],
            "base_tps": [90.0, 90.5, 89.5],
            "speedups": [1.667, 1.669, 1.665],
            "speedup_median": 1.667,
            "speedup_spread": 0.004,
        },
        "identical_fraction": 1.0,
        "wall_s": 12.5,
        "warnings": [],
        **kw,
    }


def doc(
    commit: str | None,
    started: str = "2026-12-01T10:00:00+00:00",
    *,
    cases: dict[str, dict] | None = None,
    device: dict | None = None,
    backend: str = "cuda",
    cases_sha256: str = CASES_SHA,
    run_id: str | None = None,
) -> Run:
    """A schema-2 run, as results.json stores it."""
    return decode_run(raw(commit, started, cases=cases, device=device, backend=backend,
                          cases_sha256=cases_sha256, run_id=run_id), "test")  # fmt: skip


def raw(
    commit: str | None,
    started: str = "2026-12-01T10:00:00+00:00",
    *,
    cases: dict[str, dict] | None = None,
    device: dict | None = None,
    backend: str = "cuda",
    cases_sha256: str = CASES_SHA,
    run_id: str | None = None,
) -> dict[str, Any]:
    """The same run as the JSON document."""
    return {
        "schema": 2,
        "run_id": run_id or f"{started[:19].replace('-', '').replace(':', '')}Z-compact-{commit}",
        "tier": "compact",
        "selector": "compact",
        "started": started,
        "finished": started,
        "wall_s": 600.0,
        "harness": {"commit": "1" * 40, "version": "0.1.0"},
        "cases_sha256": cases_sha256,
        "binary": {
            "path": "/b/llama-server",
            "sha256": "b" * 64,
            "commit": commit,
            "backend": backend,
            "version_text": "v",
            "source": {"kind": "ref", "mirror": None},
        },
        "device": device or H200,
        "host": "runner-1",
        "options": {"strict": False, "repeat": 3, "rtol": 0.05, "history": True},
        "models": {"Qwen3.5-4B-MTP-Q4_K_M.gguf": {"sha256": "d" * 64, "size": 2_500_000_000}},
        # each record under its own name, as a run files it
        "cases": {k: {**v, "name": k} for k, v in cases.items()} if cases is not None else {"mtp": case()},
    }


def rows(path: Path, sql: str, *args: Any) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return conn.execute(sql, args).fetchall()


def warned(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("warning: history not recorded: ") and line.endswith(f" ({path})")
    return line


# --- recording -------------------------------------------------------------------------------------------


def test_default_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SPEC_HISTORY", raising=False)
    monkeypatch.setenv("SPEC_CACHE_DIR", str(tmp_path / "cache"))
    assert schema.default_path() == tmp_path / "cache" / "history.sqlite"
    monkeypatch.setenv("SPEC_HISTORY", str(tmp_path / "h.sqlite"))
    assert schema.default_path() == tmp_path / "h.sqlite"


def test_a_real_schema1_run_is_recorded_with_every_metric(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    run = json.loads(REAL.read_text())
    assert record_run(load_run(REAL), db) == 1
    [r] = runs(db)
    assert (r["run_id"], r["llama_commit"], r["backend"]) == (run["run_id"], run["binary"]["commit"], "cpu")
    assert (r["device_name"], r["device_class"]) == ("cpu", f"cpu-{platform.machine()}")  # no 'device' in v1
    assert r["models"] == run["models"] and r["started"] == run["started"] and r["cases_sha256"] is None
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        sql = "SELECT * FROM cases c JOIN case_texts t ON t.run = c.run AND t.name = c.name"
        got = {r["name"]: dict(r) for r in conn.execute(sql)}
    assert set(got) == set(run["cases"])
    for name, c in run["cases"].items():
        row = got[name]
        assert decode_record(name, json.loads(row["record"])) == decode_record(name, c)
        stored = json.loads(row["metrics"])  # the registered metrics (results.metrics), schema v8 on
        assert stored["pos0_rate"] == c["per_position_rate"][0]  # schema 1 has no pos0_rate
        assert json.loads(row["per_position_rate"]) == c["per_position_rate"]
        assert row["measured"] == (c["status"] == "passed")
        for key in ("status", "reason", "message", "spec_type", "n_max", "target", "draft", "drafted"):
            assert row[key] == c[key], key
        for key in ("accepted", "drafts", "baseline_decode_tps", "wall_s"):
            assert row[key] == c[key], key
        for key in ("accept_rate", "accept_len", "decode_tps", "identical_fraction"):
            assert stored.get(key) == c[key], key
        assert stored.get("speedup") == ((c.get("speed") or {}).get("speedup_median") or c["speedup"])
        assert row["accept_rate"] is None  # the column v1 to v7 kept it in: null from v8 on


def test_a_schema2_run_keeps_device_harness_options_and_speed_samples(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    d = doc("ABCDEF0123456", cases={"mtp": case(accept_len=math.nan), "eagle3": case(pos0_rate=None)})
    record_run(d, db)
    [r] = runs(db)
    assert r["llama_commit"] == "abcdef0123456"  # lower-cased, as ancestry prints it
    assert (r["device_name"], r["device_class"], r["driver"], r["cuda"]) == tuple(H200.values())
    assert (r["harness_commit"], r["harness_version"], r["cases_sha256"]) == ("1" * 40, "0.1.0", CASES_SHA)
    assert r["options"] == msgspec.to_builtins(d.options) and r["source_kind"] == "ref"
    assert r["results_schema"] == 2
    cols = "speedups, spec_tps, metrics, speed_repeat, record"
    [(speedups, spec_tps, stored, repeat, record)] = rows(
        db, f"SELECT {cols} FROM cases c JOIN case_texts t USING (run, name) WHERE name='mtp'"
    )
    median, length = json.loads(stored)["speedup"], json.loads(stored).get("accept_len")
    speed = d.cases["mtp"].speed
    assert (
        speed is not None
        and json.loads(speedups) == speed.speedups
        and json.loads(spec_tps) == speed.spec_tps
    )
    assert (median, repeat, length) == (1.667, 3, None)  # NaN is stored as null
    assert json.loads(record)["accept_len"] is None and "NaN" not in record  # strict JSON
    [(pos0,)] = rows(db, "SELECT json_extract(metrics, '$.pos0_rate') FROM cases WHERE name='eagle3'")
    assert pos0 == 0.8  # per_position_rate[0] when pos0_rate is null


def test_a_sweeps_members_keep_their_slots_aggregate_speedup_and_crossover(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    conc = {"parallel": 4, "streams": 4, "speedups": [0.7, 0.8], "speedup": 0.75, "crossover_np": 2}
    member = case(name="mtp-np4", parallel=4, streams=4, sweep="mtp", concurrency=conc)
    assert record_run(doc("abcdef0", cases={"mtp": case(), "mtp-np4": member}), db) is not None
    found = rows(db, "SELECT name, parallel, streams, sweep, aggregate_speedup, crossover_np FROM cases")
    assert found == [("mtp", 1, 1, None, None, None), ("mtp-np4", 4, 4, "mtp", 0.75, 2)]


def test_recording_the_same_run_again_replaces_it(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    record_run(doc("abcdef0"), db)
    record_run(doc("abcdef0", cases={"mtp": case(0.7)}), db)
    assert rows(db, "SELECT count(*) FROM runs") == [(1,)]
    assert rows(db, "SELECT json_extract(metrics, '$.accept_rate') FROM cases") == [(0.7,)]


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (doc(None), "binary.commit, binary.build and binary.tree_sha256 are null"),
        (doc("unknown"), "binary.commit 'unknown' is not a git commit"),
        (doc("abc"), "binary.commit 'abc' is not a git commit"),
        (decode_run({**raw("abcdef0"), "binary": None}, "test"), "binary.commit, binary.build and"),
    ],
)
def test_refused_documents_warn_and_write_nothing(
    bad: Any, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "h.sqlite"
    assert record_run(bad, db) is None
    assert why in warned(capsys, db)
    assert not db.exists()


def test_a_corrupt_database_warns_and_is_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "h.sqlite"
    junk = b"this is not sqlite\n" * 400
    db.write_bytes(junk)
    assert record_run(doc("abcdef0"), db) is None
    assert "file is not a database" in warned(capsys, db)
    assert db.read_bytes() == junk


def test_an_unopenable_database_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "h.sqlite"
    folder.mkdir()  # a folder where the file should be
    assert record_run(doc("abcdef0"), folder) is None
    assert "unable to open database file" in warned(capsys, folder)
    (tmp_path / "file").write_text("x")
    below_a_file = tmp_path / "file" / "h.sqlite"
    assert record_run(doc("abcdef0"), below_a_file) is None
    warned(capsys, below_a_file)


HOLD_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()  # hold the lock until the test closes our stdin
conn.execute("ROLLBACK")
"""


def test_a_database_locked_by_another_process_warns_then_recovers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "h.sqlite"
    record_run(doc("abcdef0"), db)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        assert record_run(doc("1234567"), db, timeout_s=0.3) is None
        assert "database is locked" in warned(capsys, db)
    finally:
        holder.communicate("")
    assert holder.returncode == 0
    assert record_run(doc("1234567"), db, timeout_s=0.3) == 2
    assert rows(db, "SELECT llama_commit FROM runs ORDER BY id") == [("abcdef0",), ("1234567",)]


def test_the_lock_wait_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "h.sqlite"
    record_run(doc("abcdef0"), db)
    monkeypatch.setenv("SPEC_HISTORY_TIMEOUT_S", "0.3")
    assert schema.busy_timeout_s() == 0.3
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        t0 = time.monotonic()
        assert record_run(doc("1234567"), db) is None  # no timeout_s given: the environment's
        waited = time.monotonic() - t0
    finally:
        holder.communicate("")
    assert "database is locked" in warned(capsys, db)
    assert waited < settings.Settings().history_timeout_s / 2  # gave up after 0.3 s, not the default wait


def test_a_writer_waiting_for_another_says_so_and_names_it(tmp_path: Path) -> None:
    """A real `specsuite history import` while another process holds the write lock: after a second it says
    who it waits for (that process's pid, from the kernel's table of locks), then imports once it is free."""
    db, src = tmp_path / "h.sqlite", tmp_path / "results.json"
    record_run(doc("abcdef0"), db)
    src.write_text(json.dumps(raw("1234567")))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        waiter = subprocess.Popen(
            [sys.executable, "-m", "specsuite", "history", "import", str(src), "--db", str(db)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "SPEC_HISTORY_TIMEOUT_S": "30"},
        )  # fmt: skip
        assert waiter.stderr is not None
        line = waiter.stderr.readline()  # blocks until the line comes: the lock is still held meanwhile
        assert holder.poll() is None
    finally:
        holder.communicate("")
    out, err = waiter.communicate(timeout=60)
    assert line.startswith(f"history: waiting up to 29 s more for pid {holder.pid} (")
    assert line.endswith(f"), which is writing {db}\n")
    assert err == f"history: got {db}\n" and waiter.returncode == 0, out + err
    assert rows(db, "SELECT llama_commit FROM runs ORDER BY id") == [("abcdef0",), ("1234567",)]


@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan", "inf"])
def test_a_bad_lock_wait_is_one_line_naming_the_variable(
    value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "h.sqlite"
    record_run(doc("abcdef0"), db)
    monkeypatch.setenv("SPEC_HISTORY_TIMEOUT_S", value)
    assert record_run(doc("1234567"), db) is None
    line = warned(capsys, db)
    assert f"SPEC_HISTORY_TIMEOUT_S={value!r}" in line and "a finite number > 0" in line
    with pytest.raises(UserError, match=r"SPEC_HISTORY_TIMEOUT_S=.* or unset it"):
        runs(db)
    monkeypatch.delenv("SPEC_HISTORY_TIMEOUT_S")
    assert [r["llama_commit"] for r in runs(db)] == ["abcdef0"]


HOLD_NEW_FILE = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")  # another run, first to create the history file, still writing it
print("locked", flush=True)
time.sleep(0.5)
conn.execute("COMMIT")
"""


def test_a_new_file_held_by_another_writer_is_waited_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # SQLite answers a journal-mode change "database is locked" at once, without its busy timeout:
    # record_run must wait for the other writer itself, not drop this run
    db = tmp_path / "h.sqlite"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_NEW_FILE, str(db)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        assert record_run(doc("abcdef0"), db, timeout_s=30) == 1
    finally:
        holder.communicate()
    assert capsys.readouterr().err == "" and rows(db, "PRAGMA journal_mode") == [("wal",)]


def test_a_failure_inside_the_transaction_leaves_nothing_half_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "h.sqlite"
    connect(db).close()
    with sqlite3.connect(db) as conn:  # a real SQLite failure on the second case's insert
        conn.execute(
            "CREATE TRIGGER boom BEFORE INSERT ON cases WHEN NEW.name = 'dflash' "
            "BEGIN SELECT RAISE(ABORT, 'disk says no'); END"
        )
    two = doc("abcdef0", cases={"mtp": case(), "dflash": case()})
    assert record_run(two, db) is None
    assert "disk says no" in warned(capsys, db)
    assert rows(db, "SELECT count(*) FROM runs") == [(0,)] and rows(db, "SELECT count(*) FROM cases") == [
        (0,)
    ]


def test_a_newer_database_is_not_touched(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "h.sqlite"
    connect(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    assert record_run(doc("abcdef0"), db) is None
    assert f"schema v{len(MIGRATIONS) + 1} is newer" in warned(capsys, db)
    with pytest.raises(UserError, match="upgrade specsuite"):
        runs(db)


WRITER = """
import json, os, sys, time
from pathlib import Path
from specsuite.history.recording import record_run
from specsuite.results.document import decode_run
db, doc = Path(sys.argv[1]), decode_run(json.loads(Path(sys.argv[2]).read_text()), "doc")
ready, go = Path(sys.argv[3]), Path(sys.argv[4])
ready.touch()
while not go.exists():
    time.sleep(0.0005)
print(record_run(doc, db))
"""


@pytest.mark.slow
@pytest.mark.parametrize("fresh", [True, False], ids=["new-file", "existing-file"])
def test_two_processes_recording_at_the_same_moment_both_land(tmp_path: Path, fresh: bool) -> None:
    for attempt in range(6):
        db = tmp_path / f"h{attempt}.sqlite"
        if not fresh:
            record_run(doc("0000000", "2026-11-01T00:00:00+00:00"), db)
        go, procs = tmp_path / f"go{attempt}", []
        for i, commit in enumerate(["aaaaaaa", "bbbbbbb"]):
            big = {f"case{k}": case(name=f"case{k}") for k in range(40)}  # a transaction worth waiting for
            src = tmp_path / f"doc{attempt}-{i}.json"
            src.write_text(json.dumps(raw(commit, f"2026-12-01T10:00:0{i}+00:00", cases=big)))
            ready = tmp_path / f"ready{attempt}-{i}"
            args = [sys.executable, "-c", WRITER, str(db), str(src), str(ready), str(go)]
            procs.append(
                (subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), ready)
            )
        deadline = time.monotonic() + 60
        while not all(r.exists() for _, r in procs) and time.monotonic() < deadline:
            time.sleep(0.005)
        go.touch()  # both writers are spinning on this file: they call record_run together
        outs = [p.communicate(timeout=60) for p, _ in procs]
        assert [err for _, err in outs] == ["", ""]
        assert all(out.strip().isdigit() for out, _ in outs), outs
        commits = {c for (c,) in rows(db, "SELECT llama_commit FROM runs")}
        assert {"aaaaaaa", "bbbbbbb"} <= commits
        assert rows(
            db, "SELECT count(*) FROM cases c JOIN runs r ON r.id = c.run WHERE r.llama_commit != '0000000'"
        ) == [(80,)]


# --- migrations ------------------------------------------------------------------------------------------


def test_an_empty_v0_database_is_migrated_to_the_current_schema(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    sqlite3.connect(db).close()  # an existing, empty file: user_version 0
    assert rows(db, "PRAGMA user_version") == [(0,)]
    assert record_run(doc("abcdef0"), db) == 1
    assert rows(db, "PRAGMA user_version") == [(len(MIGRATIONS),)]
    assert rows(db, "PRAGMA journal_mode") == [("wal",)]


def _v1_metric_columns(rec: CaseRecord) -> dict[str, float | None]:
    """The metrics v1 kept in columns of ``cases`` (v8 keeps them in its metrics JSON)."""
    speed = rec.speed
    return {"accept_rate": finite(rec.accept_rate), "accept_len": finite(rec.accept_len),
            "pos0_rate": finite(rec.pos0), "decode_tps": finite(rec.decode_tps),
            "speedup": finite(rec.speedup), "speedup_median": finite(speed.speedup_median) if speed else None,
            "identical_fraction": finite(rec.identical_fraction)}  # fmt: skip


def _v1_database_with_a_run(db: Path) -> None:
    """A history as v1 wrote it: the record and the message in the cases table."""
    conn = sqlite3.connect(db, isolation_level=None)
    migrate(conn, MIGRATIONS[:1])
    d = doc("abcdef0")
    with schema.transaction(conn):
        later_runs = ("config", "llama_build")  # columns of later versions
        run_row = {k: v for k, v in recording._run_row(d, "abcdef0").items() if k not in later_runs}
        run = recording._insert(conn, "runs", run_row)
        for rec in d.cases.values():
            later = ("nondeterministic", "metrics", *recording._concurrency_columns(rec),
                     *(c.split()[-2] for c in schema._V6))  # columns of later versions  # fmt: skip
            row = {
                "run": run,
                **{k: v for k, v in recording._case_row(rec).items() if k not in later},
                **_v1_metric_columns(rec),
                "message": "v1 text",
                "record": recording._json(rec),
            }
            recording._insert(conn, "cases", row)
    conn.close()


def test_v2_moves_the_texts_out_of_the_cases_table(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    _v1_database_with_a_run(db)
    connect(db).close()  # opening migrates
    assert rows(db, "PRAGMA user_version") == [(len(MIGRATIONS),)]
    assert "record" not in [c for (_, c, *_) in rows(db, "PRAGMA table_info(cases)")]
    [(name, message, record)] = rows(db, "SELECT name, message, record FROM case_texts")
    assert (name, message, json.loads(record)["name"]) == ("mtp", "v1 text", "mtp")
    base = find_baseline(db, case="mtp", device_class=H200["class"], backend="cuda", cases_sha256=CASES_SHA,
                         commit="bbbbbbb", ancestors=None)  # fmt: skip
    assert base is not None and base.record.name == "mtp"


def test_an_older_database_is_migrated_in_order_keeping_its_runs(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    _v1_database_with_a_run(db)
    # the next schema version, as a future migration would write it: a column and its backfill
    v2 = (
        "ALTER TABLE runs ADD COLUMN commit_short TEXT",
        "UPDATE runs SET commit_short = substr(llama_commit, 1, 7)",
    )
    conn = sqlite3.connect(db, isolation_level=None)
    assert migrate(conn, [*MIGRATIONS, v2]) == len(MIGRATIONS) + 1
    conn.close()
    assert rows(db, "PRAGMA user_version") == [(len(MIGRATIONS) + 1,)]
    assert rows(db, "SELECT llama_commit, commit_short FROM runs") == [("abcdef0", "abcdef0")]
    assert rows(db, "SELECT name FROM cases") == [("mtp",)]


def test_a_failing_migration_rolls_back_every_step(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    _v1_database_with_a_run(db)
    v2 = ("CREATE TABLE notes (run INTEGER)",)
    v3 = ("ALTER TABLE no_such_table ADD COLUMN x TEXT",)
    conn = sqlite3.connect(db, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError, match="no_such_table"):
        migrate(conn, [*MIGRATIONS, v2, v3])
    conn.close()
    assert rows(db, "PRAGMA user_version") == [(1,)]
    assert (
        rows(db, "SELECT name FROM sqlite_master WHERE name = 'notes'") == []
    )  # undone with the failing step
    assert rows(db, "SELECT count(*) FROM runs") == [(1,)]


# --- reading ---------------------------------------------------------------------------------------------


@pytest.fixture
def three_runs(tmp_path: Path) -> Path:
    db = tmp_path / "h.sqlite"
    cpu = {"name": "cpu", "class": "cpu-x86_64", "driver": None, "cuda": None}
    record_run(doc("aaaaaaa", "2026-12-01T10:00:00+00:00"), db)
    record_run(doc("bbbbbbb", "2026-12-02T10:00:00+00:00", device=cpu, backend="cpu"), db)
    record_run(doc("ccccccc", "2026-12-03T10:00:00+00:00", cases={"dflash": case(name="dflash")}), db)
    return db


def test_runs_oldest_first_with_filters(three_runs: Path) -> None:
    commits = lambda **kw: [r["llama_commit"] for r in runs(three_runs, **kw)]  # noqa: E731
    assert commits() == ["aaaaaaa", "bbbbbbb", "ccccccc"]
    assert commits(last=2) == ["bbbbbbb", "ccccccc"]
    assert commits(case="mtp") == ["aaaaaaa", "bbbbbbb"]
    assert commits(case="mtp", last=1) == ["bbbbbbb"]
    assert commits(device="NVIDIA H200") == commits(device="nvidia-h200") == ["aaaaaaa", "ccccccc"]
    assert commits(device="cpu-x86_64", case="dflash") == []


def test_case_rows_over_commits(three_runs: Path) -> None:
    got = queries.case_rows(three_runs, case="mtp")
    assert [(r["commit"], r["device"], r["case"], r["accept_rate"], r["speedup"]) for r in got] == [
        ("aaaaaaa", "NVIDIA H200", "mtp", 0.63, 1.667),
        ("bbbbbbb", "cpu", "mtp", 0.63, 1.667),
    ]
    assert [r["case"] for r in queries.case_rows(three_runs, last=2)] == ["dflash", "mtp"]
    devices = sorted(["NVIDIA H200", "nvidia-h200", "cpu", "cpu-x86_64"])
    assert queries.names(three_runs) == (["dflash", "mtp"], devices)


def test_reading_never_creates_the_file(tmp_path: Path) -> None:
    absent = tmp_path / "none" / "h.sqlite"
    assert runs(absent) == [] and queries.case_rows(absent) == [] and queries.names(absent) == ([], [])
    assert base(absent, A) is None
    assert not absent.parent.exists()


def test_reading_a_corrupt_database_is_a_user_error(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    db.write_bytes(b"\0garbage" * 100)
    with pytest.raises(UserError, match=f"history {db}: cannot read it .*move it aside"):
        runs(db)


# --- the baseline ----------------------------------------------------------------------------------------


def base(db: Path, commit: str, ancestors: list[str] | None = None, **kw: Any) -> baseline.Baseline | None:
    args: dict[str, Any] = {
        "case": "mtp",
        "device_class": "nvidia-h200",
        "backend": "cuda",
        "cases_sha256": CASES_SHA,
        **kw,
    }
    return find_baseline(db, commit=commit, ancestors=ancestors, **args)


A, B, C, X = ("a" * 40, "b" * 40, "c" * 40, "e" * 40)  # X: a commit on another branch


@pytest.fixture
def lineage(tmp_path: Path) -> Path:
    db = tmp_path / "h.sqlite"
    record_run(doc(A[:7], "2026-12-01T10:00:00+00:00", cases={"mtp": case(0.61)}), db)  # short sha recorded
    record_run(doc(B, "2026-12-02T10:00:00+00:00", cases={"mtp": case(0.62)}), db)
    record_run(doc(B, "2026-12-02T12:00:00+00:00", cases={"mtp": case(0.625)}), db)  # a rerun of B
    record_run(doc(X, "2026-12-03T10:00:00+00:00", cases={"mtp": case(0.70)}), db)
    return db


def test_without_ancestry_the_latest_other_commit_by_time(lineage: Path) -> None:
    found = base(lineage, C)
    assert found is not None and (found.commit, found.record.accept_rate) == (X, 0.70)
    assert found.started == "2026-12-03T10:00:00+00:00" and found.run_id.endswith(X)
    # a commit is never its own baseline, whether spelled short or full
    assert base(lineage, X).commit == B  # type: ignore[union-attr]
    assert base(lineage, X[:9]).commit == B  # type: ignore[union-attr]


def test_with_ancestry_the_nearest_ancestor_with_a_run(lineage: Path) -> None:
    found = base(lineage, C, [B, A])
    assert found is not None and found.commit == B and found.record.accept_rate == 0.625  # B's latest run
    found = base(lineage, B, [A])
    assert found is not None and found.commit == A[:7]  # recorded short, matched by prefix
    assert base(lineage, C, ["f" * 40, A]).commit == A[:7]  # type: ignore[union-attr]  # skips unrun ancestors
    assert base(lineage, A, []) is None  # a root: X ran later but is no ancestor


def test_only_runs_that_started_before_the_judged_one_qualify(lineage: Path) -> None:
    """``compare --against auto`` on an old run: a run recorded after it is never its baseline."""

    def rate(before: str | None, ancestors: list[str] | None = None) -> float | None:
        found = base(lineage, C, ancestors, before=before)
        return None if found is None else found.record.accept_rate

    assert rate(None) == 0.70  # every run: the latest, X
    assert rate("2026-12-02T11:00:00+00:00") == 0.62  # between B's run and its rerun: B's first run
    assert rate("2026-12-02T11:00:00+00:00", [B, A]) == 0.62  # with ancestry too
    assert rate("2026-12-02T12:30:00+02:00") == 0.62  # an instant, whatever the offset's spelling
    assert rate("2026-12-02T10:30:00Z") == 0.62
    assert rate("2026-12-01T10:00:00+00:00") is None  # A started then: not earlier
    with pytest.raises(UserError, match="start time 'yesterday' is not an ISO 8601 time"):
        rate("yesterday")


def _build_doc(build: int | None, started: str, rate: float, commit: str | None = None) -> Run:
    """A run of an upstream build with no commit known (a PyPI sdist): its key is b<N>."""
    d = doc(commit, started, cases={"mtp": case(rate)})
    return msgspec.structs.replace(d, binary=msgspec.structs.replace(d.binary, build=build))


def test_without_ancestry_builds_by_number_the_nearest_lower_one(tmp_path: Path) -> None:
    """Upstream's build numbers order a linear history: the nearest lower build is the baseline, whatever
    the order the runs were recorded in; a higher build never is; runs with no number come after."""
    db = tmp_path / "h.sqlite"
    record_run(_build_doc(9246, "2026-12-01T10:00:00+00:00", 0.30), db)
    record_run(_build_doc(11434, "2026-12-02T10:00:00+00:00", 0.50), db)
    record_run(_build_doc(9113, "2026-12-03T10:00:00+00:00", 0.94), db)  # recorded last, oldest build
    record_run(_build_doc(None, "2026-12-04T10:00:00+00:00", 0.70, commit=X), db)  # a commit, no number
    assert rows(db, "SELECT llama_commit, llama_build FROM runs ORDER BY id") == [
        ("b9246", 9246),
        ("b11434", 11434),
        ("b9113", 9113),
        (X, None),
    ]

    def at(build: int) -> tuple[str, float | None] | None:
        found = base(db, f"b{build}", build=build)
        return None if found is None else (found.commit, found.record.accept_rate)

    assert at(9246) == ("b9113", 0.94)  # not b11434, recorded before it and a higher build
    assert at(10000) == ("b9246", 0.30)
    assert at(11434) == ("b9246", 0.30)  # its own build is never its baseline
    assert at(9113) == (X, 0.70)  # no lower build: the unnumbered run, by time
    assert at(9000) == (X, 0.70)


def test_the_same_build_number_and_another_commit_is_judged_by_time(tmp_path: Path) -> None:
    """A fork, a branch, a local patch on a release: two commits that report one build number. The number
    cannot order them, so the latest earlier run of the other commit is the baseline (nearer than any lower
    build), and the Baseline says it was chosen by time; never a run that started later, never itself."""
    db = tmp_path / "h.sqlite"
    record_run(_build_doc(11300, "2026-12-01T10:00:00+00:00", 0.80, commit=C), db)
    record_run(_build_doc(11311, "2026-12-02T10:00:00+00:00", 0.90, commit=A), db)
    record_run(_build_doc(11311, "2026-12-03T10:00:00+00:00", 0.95, commit=B), db)  # B's own earlier run
    record_run(_build_doc(11311, "2026-12-05T10:00:00+00:00", 0.10, commit=X), db)  # after the judged run

    found = base(db, B, build=11311, before="2026-12-04T10:00:00+00:00")
    assert found is not None and (found.commit, found.record.accept_rate) == (A, 0.90)
    assert found.order == "by time: the same build number 11311, another commit"
    found = base(db, A, build=11311, before="2026-12-02T11:00:00+00:00")  # A's run: only b11300 before it
    assert found is not None and (found.commit, found.order) == (C, "nearest lower build")
    found = base(db, B, ancestors=[C], build=11311)  # ancestry, where the mirror knows B: A is no ancestor
    assert found is not None and (found.commit, found.order) == (C, "nearest ancestor")


def _why(db: Path, commit: str = B, **kw: Any) -> str:
    args: dict[str, Any] = {"case": "mtp", "device_class": "nvidia-h200", "backend": "cuda",
                            "cases_sha256": CASES_SHA, "ancestors": None, **kw}  # fmt: skip
    assert base(db, commit, **{k: v for k, v in args.items() if k != "ancestors"},
                ancestors=args["ancestors"]) is None  # fmt: skip
    return baseline.why_none(db, commit=commit, **args)


def test_no_baseline_says_which_rule_left_none(tmp_path: Path) -> None:
    """ "none yet" never says that no other commit was measured where one was: it names the rule that left
    every measured run out, as find_baseline applies them."""
    db = tmp_path / "h.sqlite"
    assert _why(db) == "no history yet"
    record_run(_build_doc(9246, "2026-12-01T10:00:00+00:00", 0.30, commit=A), db)
    assert _why(db, build=9113) == "only higher builds than b9113 measured it (b9246)"
    assert _why(db, case="eagle3") == "no run of it in this history yet"
    assert _why(db, A) == "only runs of this same commit measured it"
    assert _why(db, before="2026-12-01T09:00:00+00:00") == "only runs that started after this one measured it"
    assert _why(db, ancestors=[C]) == (
        "only commits the mirror does not know as ancestors of this one measured it (aaaaaaaaaaaa)"
    )
    assert _why(db, device_class="nvidia-h100") == (
        "only runs on another device or backend measured it (nvidia-h200/cuda)"
    )
    assert (
        _why(db, backend="vulkan") == "only runs on another device or backend measured it (nvidia-h200/cuda)"
    )
    assert _why(db, cases_sha256="f" * 64) == "only runs with another cases.toml measured it on this setup"
    failed = tmp_path / "failed.sqlite"
    record_run(doc(A, cases={"mtp": case(None, "error", "crashed")}), failed)
    assert _why(failed) == "no earlier run on this setup measured it (each failed before its numbers)"


def test_the_history_line_says_why_there_is_no_baseline() -> None:
    higher, new = "only higher builds than b9113 measured it (b9246)", "no run of it in this history yet"
    note = HistoryNote(basis="nearest lower build, cpu-x/cpu, rtol 5%")
    note.missing = ["tiny-a", "tiny-b"]
    note.missing_why = {higher: ["tiny-a", "tiny-b"]}
    assert note.render() == f"baseline (nearest lower build, cpu-x/cpu, rtol 5%): none yet: {higher}"
    note.missing_why = {new: ["tiny-b"], higher: ["tiny-a"]}
    assert note.render().endswith(f"none yet: {new} for tiny-b; {higher} for tiny-a")
    note.used = {"b9100 (run r1)": ["tiny-c"]}
    line = note.render()
    assert line.endswith(f": b9100 (run r1) for tiny-c; {new} for tiny-b; {higher} for tiny-a")
    assert "none yet" not in line
    other = HistoryNote(basis=note.basis, missing=["tiny-d"], missing_why={new: ["tiny-d"]})
    assert note.merged(other).missing_why == {new: ["tiny-b", "tiny-d"], higher: ["tiny-a"]}


def test_a_build_key_matches_only_itself(tmp_path: Path) -> None:
    """b924 is not b9246, though a commit's short spelling matches its full one."""
    db = tmp_path / "h.sqlite"
    record_run(_build_doc(9246, "2026-12-01T10:00:00+00:00", 0.30), db)
    record_run(_build_doc(924, "2026-12-02T10:00:00+00:00", 0.90), db)
    found = base(db, "b9246", build=9246)
    assert found is not None and found.commit == "b924"


def test_only_the_same_setup_and_measured_cases_qualify(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    record_run(doc(A, "2026-12-01T10:00:00+00:00"), db)  # the one good candidate
    later = [
        doc(B, "2026-12-02T10:00:00+00:00", backend="vulkan"),
        doc(B, "2026-12-02T11:00:00+00:00", device={"name": "NVIDIA H100", "class": "nvidia-h100"}),
        doc(B, "2026-12-02T12:00:00+00:00", cases_sha256="f" * 64),
        doc(B, "2026-12-02T13:00:00+00:00", cases={"mtp": case(None, "skipped", "binary_no_mtp")}),
        doc(B, "2026-12-02T14:00:00+00:00", cases={"mtp": case(0.1, "failed", "diverged")}),
        doc(B, "2026-12-02T15:00:00+00:00", cases={"mtp": case(0.1, "error", "crashed")}),
        doc(B, "2026-12-02T16:00:00+00:00", cases={"dflash": case(name="dflash")}),
    ]
    for d in later:
        record_run(d, db)
    assert base(db, C).commit == A  # type: ignore[union-attr]
    record_run(doc(B, "2026-12-02T17:00:00+00:00", cases={"mtp": case(0.5, "failed", "floor")}), db)
    found = base(db, C)
    assert found is not None and found.commit == B and found.record.reason == "floor"
    assert base(db, C, case="eagle3") is None


def test_baseline_record_round_trips(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    d = doc(A)
    record_run(copy.deepcopy(d), db)
    found = base(db, B)
    assert found is not None and found.record == d.cases["mtp"]


@pytest.mark.parametrize("broken", ["{not json", '{"accept_rate": "high"}', "[" * 100_000])
def test_a_broken_baseline_record_is_skipped_for_the_next_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], broken: str
) -> None:
    """A history row that is not a record never decides a run: warned, and the next ancestor judges."""
    db = tmp_path / "h.sqlite"
    record_run(doc(A, "2026-12-01T10:00:00+00:00", cases={"mtp": case(0.61)}), db)
    record_run(doc(B, "2026-12-02T10:00:00+00:00", cases={"mtp": case(0.62)}), db)
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE case_texts SET record = ? WHERE run = (SELECT id FROM runs WHERE llama_commit = ?)",
            (broken, B),
        )
    found = base(db, C, [B, A])
    assert found is not None and found.commit == A and found.record.accept_rate == 0.61
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("warning: skipping a broken history record of 'mtp' in run ") and B in line


# --- readers never write (issue 19): read-only opens, no migration, no journal-mode switch ---------------


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _foreign(db: Path, user_version: int = 0) -> None:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.execute("INSERT INTO notes VALUES ('mine')")
        conn.execute(f"PRAGMA user_version = {user_version}")
        conn.commit()


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda db: _foreign(db), "is not a specsuite history (it holds the table(s) notes)"),
        (lambda db: _foreign(db, len(MIGRATIONS) + 1), "upgrade specsuite"),
        (lambda db: db.write_bytes(b""), None),  # empty: no run yet, and no schema written into it
    ],
    ids=["foreign", "newer", "empty"],
)
def test_a_reader_writes_nothing_into_any_file(tmp_path: Path, make: Any, error: str | None) -> None:
    db = tmp_path / "h.sqlite"
    make(db)
    before = _files(tmp_path)
    readers = (
        lambda: runs(db),
        lambda: queries.case_rows(db),
        lambda: queries.names(db),
        lambda: base(db, C),
    )
    for read in readers:
        if error is None:
            assert read() in ([], ([], []), None)
        else:
            with pytest.raises(UserError, match=re.escape(error)):
                read()
    assert _files(tmp_path) == before  # no -wal/-shm, no schema, no journal-mode switch


def test_reading_our_own_wal_history_leaves_no_wal_or_shm_file(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    record_run(doc(A, "2026-12-01T10:00:00+00:00"), db)
    before = _files(tmp_path)
    assert [r["llama_commit"] for r in runs(db)] == [A] and base(db, C) is not None
    assert _files(tmp_path) == before


def test_a_writer_refuses_a_foreign_file_and_leaves_it_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "h.sqlite"
    _foreign(db)
    before = _files(tmp_path)
    assert record_run(doc(A), db) is None
    assert "is not a specsuite history (it holds the table(s) notes)" in warned(capsys, db)
    assert _files(tmp_path) == before


def test_a_v1_history_is_read_as_it_is_never_migrated_by_a_reader(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    _v1_database_with_a_run(db)
    before = _files(tmp_path)
    assert [r["llama_commit"] for r in runs(db)] == ["abcdef0"]
    found = base(db, "bbbbbbb")
    assert found is not None and found.record.name == "mtp"
    assert _files(tmp_path) == before and rows(db, "PRAGMA user_version") == [(1,)]


def test_a_valid_history_reads_on_a_read_only_filesystem(tmp_path: Path) -> None:
    from readonly import sandbox_dir, sandbox_env, specsuite_readonly

    with sandbox_dir() as box:
        folder = box / "history"
        folder.mkdir()
        db = folder / "h.sqlite"
        record_run(doc(A, "2026-12-01T10:00:00+00:00"), db)
        before = _files(folder)
        proc = specsuite_readonly(
            "history", "--json", folders=[folder], env=sandbox_env(box, SPEC_HISTORY=str(db))
        )
        assert proc.returncode == 0, proc.stderr
        assert [r["commit"] for r in json.loads(proc.stdout)] == [A] and "move it aside" not in proc.stderr
        assert _files(folder) == before


# --- importing finished runs -----------------------------------------------------------------------------


def _real_files(tmp_path: Path, n: int = 3) -> list[Path]:
    import histories

    return histories.write(histories.history_docs([1.0] * n), tmp_path / "runs")


def test_import_twice_enters_each_run_once(tmp_path: Path) -> None:
    db, files = tmp_path / "h.sqlite", _real_files(tmp_path)
    assert recording.import_runs(files, db) == ["h00", "h01", "h02"]
    assert recording.import_runs([*files, files[0].parent], db) == []  # again, also as a folder
    assert rows(db, "SELECT run_id, count(*) FROM runs GROUP BY run_id") == [
        ("h00", 1),
        ("h01", 1),
        ("h02", 1),
    ]
    assert rows(db, "SELECT count(*) FROM cases") == [(12,)]
    got = load_run(files[1])
    base = find_baseline(db, case="tiny-simple-random", device_class=str(got.device_class), backend="cpu",
                         cases_sha256=str(got.cases_sha256), commit="ffffffff", ancestors=None)  # fmt: skip
    assert base is not None and base.run_id == "h02"  # imported runs are baselines like live ones


def test_import_is_all_or_nothing(tmp_path: Path) -> None:
    db, files = tmp_path / "h.sqlite", _real_files(tmp_path)
    doc = json.loads(files[2].read_text())
    doc["binary"]["commit"] = "not-a-commit"
    files[2].write_text(json.dumps(doc))
    with pytest.raises(
        UserError, match=r"h02/results.json: binary.commit 'not-a-commit' is not a git commit"
    ):
        recording.import_runs(files, db)
    assert not db.exists()  # the good documents before it were not entered either
    (tmp_path / "bad.json").write_text('{"cases": ')
    with pytest.raises(UserError, match=r"bad.json: cannot read it as a JSON results file"):
        recording.import_runs([files[0], tmp_path / "bad.json"], db)
    (tmp_path / "empty.json").write_text(json.dumps({**json.loads(files[0].read_text()), "cases": {}}))
    with pytest.raises(UserError, match=r"empty\.json: no cases: nothing to enter"):
        recording.import_runs([tmp_path / "empty.json"], db)
    assert not db.exists()


def test_history_import_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from specsuite import cli

    db, files = tmp_path / "h.sqlite", _real_files(tmp_path, 2)
    assert cli.main(["history", "import", *map(str, files), "--db", str(db)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "entered h00",
        "entered h01",
        f"2 of 2 run(s) entered into {db}",
    ]
    assert cli.main(["history", "import", str(files[0]), "--db", str(db)]) == 0
    assert "0 of 1 run(s) entered" in capsys.readouterr().out
    assert cli.main(["history", "import", str(tmp_path / "nope"), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "no results.json there" in err


# --- per-block overhead (v4) -----------------------------------------------------------------------------


def test_per_block_overhead_and_an_implausible_speed_are_columns_of_the_case(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    blocks = {"block_ms": 4.2, "token_ms": 1.1, "block_ratio": 3.82, "tokens_per_block": 3.875,
              "blocks": {"ratios": [3.8, 3.82, 3.9], "block_ms": [4.2] * 3}}  # fmt: skip
    wrong = {"implausible_speed": "implausible_speed: speedup 2150.161 is above ..."}
    cases = {"mtp": case(**blocks), "odd": case(name="odd", **wrong)}
    assert record_run(doc("aaaaaaa", cases=cases), db)
    metric = "json_extract(metrics, '$.{}')".format  # the registered ones: in the case's metrics JSON
    got = rows(db, f"SELECT name, {metric('block_ms')}, token_ms, {metric('block_ratio')}, "
                   f"{metric('tokens_per_block')}, block_ratios, implausible_speed FROM cases "
                   "ORDER BY name")  # fmt: skip
    assert got == [
        ("mtp", 4.2, 1.1, 3.82, 3.875, "[3.8,3.82,3.9]", 0),
        ("odd", None, None, None, None, None, 1),
    ]
    series = {r["case"]: r for r in queries.series(db)}
    assert series["mtp"]["block_ratio"] == 3.82 and not series["mtp"]["implausible_speed"]
    assert series["odd"]["implausible_speed"] == 1
    [row] = queries.case_rows(db, case="mtp")
    assert (row["block_ratio"], row["block_ms"]) == (3.82, 4.2)
