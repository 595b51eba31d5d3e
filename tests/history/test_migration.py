"""A history written before the metric registry (schema v7, tests/data/history/v7-today.sqlite.gz: made by
that code from three real runs) opened by today's code: migrated to v8 when a writer opens it, every
number it held found again, and read the same by a reader that does not migrate it."""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest
from testdata import DATA_ROOT

from specsuite.history import queries, schema
from specsuite.history.baseline import find_baseline
from specsuite.history.recording import record_run
from specsuite.results import metrics
from specsuite.results.document import load_run

V7 = DATA_ROOT / "history" / "v7-today.sqlite.gz"
# where the v7 code kept each metric, as plain SQL over its cases row (the speedup: the rounds' median,
# else the one speedup schema 1 recorded)
LEGACY = {
    "accept_rate": "c.accept_rate",
    "accept_len": "c.accept_len",
    "pos0_rate": "c.pos0_rate",
    "speedup": "COALESCE(c.speedup_median, c.speedup)",
    "decode_tps": "c.decode_tps",
    "block_ratio": "c.block_ratio",
    "tokens_per_block": "c.tokens_per_block",
    "block_ms": "c.block_ms",
    "identical_fraction": "c.identical_fraction",
}


@pytest.fixture
def v7(tmp_path: Path) -> Path:
    db = tmp_path / "history.sqlite"
    with gzip.open(V7) as src, db.open("wb") as out:
        shutil.copyfileobj(src, out)
    return db


def _rows(db: Path, sql: str) -> list[sqlite3.Row]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.row_factory = sqlite3.Row
        return conn.execute(sql).fetchall()


def _old_numbers(db: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """Every number the v7 file holds, by (run id, case): the registered metrics' columns, read with plain
    SQL (not this code's readers), and the prefill of each stored record."""
    cols = ", ".join(f"{sql} AS {name}" for name, sql in LEGACY.items())
    sql = (f"SELECT r.run_id, c.name, {cols}, t.record FROM cases c JOIN runs r ON r.id = c.run "
           "JOIN case_texts t USING (run, name)")  # fmt: skip
    out = {}
    for row in _rows(db, sql):
        found = {name: row[name] for name in LEGACY if row[name] is not None}
        prefill = json.loads(row["record"]).get("prefill") or {}
        if prefill.get("ratio") is not None:
            found["prefill_ratio"] = prefill["ratio"]
            found["ttft_ratio"] = prefill["ttft_ms"] / prefill["base_ttft_ms"]
        out[(row["run_id"], row["name"])] = found
    return out


def test_the_registry_names_the_columns_v7_kept_its_metrics_in() -> None:
    """What a reader of an older history, which never migrates it, reads (results.metrics' ``column``)."""
    assert {m.name: m.column for m in metrics.REGISTRY if m.column} == LEGACY


def test_the_file_is_a_v7_history_of_three_real_runs_with_every_kind_of_number(v7: Path) -> None:
    assert _rows(v7, "PRAGMA user_version")[0][0] == 7
    old = _old_numbers(v7)
    assert {run for run, _ in old} == {"20261130T050517Z-calibrate-smoke-1", "sub-1", "20261207T005616Z-r2"}
    held = {name for numbers in old.values() for name in numbers}
    # acceptance, speed, the per-block cost (a v6 column) and the prefill (only in the stored records)
    assert {"accept_rate", "accept_len", "pos0_rate", "speedup", "decode_tps", "block_ratio"} <= held
    assert {"block_ms", "tokens_per_block", "identical_fraction", "prefill_ratio", "ttft_ratio"} <= held


def test_a_writer_migrates_it_and_finds_every_old_number(v7: Path) -> None:
    old = _old_numbers(v7)
    counts = [_rows(v7, f"SELECT count(*) FROM {t}")[0][0] for t in ("runs", "cases", "case_texts")]
    schema.connect(v7).close()  # a writer opens it: v8
    assert _rows(v7, "PRAGMA user_version")[0][0] == len(schema.MIGRATIONS) == 8
    assert [_rows(v7, f"SELECT count(*) FROM {t}")[0][0] for t in ("runs", "cases", "case_texts")] == counts
    sql = "SELECT r.run_id, c.name, c.metrics FROM cases c JOIN runs r ON r.id = c.run"
    stored = {(r["run_id"], r["name"]): json.loads(r["metrics"]) for r in _rows(v7, sql)}
    assert stored.keys() == old.keys()
    for key, numbers in old.items():
        assert set(stored[key]) == set(numbers), key  # nothing lost, nothing made up
        for name, value in numbers.items():
            tol = 1e-4 if name == "ttft_ratio" else 0  # rounded to 4 places, as a live run rounds it
            assert math.isclose(stored[key][name], value, rel_tol=tol), (key, name)
    # the readers give them by name, as before
    rows = {(r["run_id"], r["case"]): r for r in queries.case_rows(v7)}
    for key, numbers in old.items():
        for name, value in numbers.items():
            assert math.isclose(rows[key][name], value, rel_tol=1e-4), (key, name)


def test_a_reader_reads_the_v7_file_as_it_is_as_the_migrated_one(v7: Path, tmp_path: Path) -> None:
    before = v7.read_bytes()
    unmigrated = {(r["run_id"], r["case"]): r for r in queries.series(v7)}  # read-only: its columns
    assert v7.read_bytes() == before and _rows(v7, "PRAGMA user_version")[0][0] == 7
    copy = tmp_path / "migrated.sqlite"
    shutil.copyfile(v7, copy)
    schema.connect(copy).close()
    migrated = {(r["run_id"], r["case"]): r for r in queries.series(copy)}
    assert migrated.keys() == unmigrated.keys() and migrated
    for key, row in unmigrated.items():
        for name in LEGACY:  # what both schemas hold; the prefill only the migrated one (from the records)
            assert migrated[key][name] == row[name], (key, name)
    key = ("20261207T005616Z-r2", "tiny-mtp-long-prompt")
    assert migrated[key]["prefill_ratio"] == 0.5588 and unmigrated[key]["prefill_ratio"] is None


def test_a_migrated_history_judges_a_new_run_against_its_old_ones(v7: Path) -> None:
    """The old run is the baseline of the same case at a later commit, its record whole, and a new run
    recorded after it stores its metrics in the JSON."""
    run = load_run(DATA_ROOT / "results" / "prefill-real-1" / "results.json")
    old = run.cases["tiny-mtp-long-prompt"]
    binary = msgspec.structs.replace(run.binary, commit="1" * 40)
    later = msgspec.structs.replace(run, run_id="later", started="2026-12-08T00:00:00+00:00", binary=binary)
    assert record_run(later, v7) is not None  # the writer migrated it first
    found = find_baseline(v7, case=old.name, device_class=str(run.device_class), backend="cpu",
                          cases_sha256=str(run.cases_sha256), commit="1" * 40, ancestors=None)  # fmt: skip
    assert found is not None and found.run_id == "20261207T005616Z-r2"
    assert found.record.prefill is not None and old.prefill is not None
    assert found.record.prefill.ratio == old.prefill.ratio == 0.5588
    [(text,)] = _rows(
        v7, "SELECT c.metrics FROM cases c JOIN runs r ON r.id = c.run WHERE r.run_id = 'later'"
    )
    assert json.loads(text) == metrics.values(old)
