"""``history forget``: runs taken out of a real SQLite history by run id, all or nothing, each said; the
site built afterwards holds no trace of them (issue 51, item 2)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from testdata import DATA_ROOT

from specsuite import cli
from specsuite.common.errors import UserError
from specsuite.history import forget, queries, recording
from specsuite.results.document import load_run

REAL = DATA_ROOT / "results"
ONE, TWO = "20261130T050517Z-calibrate-smoke-1", "20261130T050517Z-calibrate-smoke-2"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """The two real smoke runs."""
    path = tmp_path / "h.sqlite"
    assert recording.import_runs([REAL / "smoke-real-1", REAL / "smoke-real-2"], path) == [ONE, TWO]
    return path


def _rows_of(db: Path, run_pk: int) -> dict[str, int]:
    """Rows that point at a run's key, in every table with a ``run`` column (the cascade reached them)."""
    with sqlite3.connect(db) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        with_run = [t for t in tables if "run" in [c[1] for c in conn.execute(f"PRAGMA table_info({t})")]]
        return {t: conn.execute(f"SELECT COUNT(*) FROM {t} WHERE run = ?", (run_pk,)).fetchone()[0]
                for t in with_run}  # fmt: skip


def _pk(db: Path, run_id: str) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT id FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0]


def test_forget_takes_the_run_and_its_cases_out_and_says_what_it_was(db: Path, capsys) -> None:
    pk = _pk(db, TWO)
    assert sum(_rows_of(db, pk).values()) >= 12  # its 6 cases, in `cases` and `case_texts`
    [was] = [r for r in queries.runs(db) if r["run_id"] == TWO]
    assert cli.main(["history", "forget", TWO, "--db", str(db)]) == 0
    out = capsys.readouterr().out.splitlines()
    when = str(load_run(REAL / "smoke-real-2").started)[:16].replace("T", " ")
    assert was["device_class"] == "cpu-x86_64" and when == "2026-11-30 05:29"
    assert out[0] == (
        f"forgot {TWO}: smoke run of llama.cpp 0c1e570 on cpu-x86_64/cpu, started {when}, 6 case record(s)"
    )
    assert out[1].startswith(f"1 run(s) taken out of {db}, 1 left; `specsuite report` builds the site")
    assert [r["run_id"] for r in queries.runs(db)] == [ONE]
    assert set(_rows_of(db, pk).values()) == {0}  # nothing of it left in any table


def test_a_dry_run_says_the_same_and_takes_nothing(db: Path, capsys) -> None:
    assert cli.main(["history", "forget", TWO, ONE, "--dry-run", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"would forget {TWO}: smoke run" in out and f"would forget {ONE}: smoke run" in out
    assert "2 run(s) would be taken out" in out and len(queries.runs(db)) == 2


def test_an_unknown_run_id_forgets_nothing_and_names_the_nearest(db: Path) -> None:
    typo = TWO.replace("smoke-2", "smoke-3")
    with pytest.raises(
        UserError, match=rf"^nothing forgotten: no run '{typo}' in the history .*: did you mean"
    ):
        forget.forget_runs([ONE, typo], db)  # all or nothing: ONE stays too
    assert len(queries.runs(db)) == 2
    with pytest.raises(UserError, match=rf"no run 'zz' in the history {db}; choose from 2: {TWO}, {ONE}$"):
        forget.forget_runs(["zz"], db)


def test_a_missing_history_is_one_line(tmp_path: Path, capsys) -> None:
    assert cli.main(["history", "forget", ONE, "--db", str(tmp_path / "none.sqlite")]) == 2
    assert "none.sqlite does not exist" in capsys.readouterr().err
    with pytest.raises(UserError, match="does not exist: nothing to forget"):
        forget.forget_runs([ONE], tmp_path / "none.sqlite")


def test_the_site_built_after_forget_holds_no_trace_of_the_run(tmp_path: Path, capsys) -> None:
    """Three real synthetic runs, their results folders beside them; the site is built, res2 forgotten,
    the site built again into the same folder: no page, copy or mention of res2 is left (the run pages
    carried over from the previous site are only those of runs the history still holds)."""
    results, db, site = tmp_path / "results", tmp_path / "h.sqlite", tmp_path / "site"
    for i in (1, 2, 3):
        shutil.copytree(REAL / f"site-real-{i}", results / f"res{i}")
    recording.import_runs(sorted(results.iterdir()), db)
    env = ["--db", str(db)]
    cache = ["--out", str(site), "--results", str(results)]
    assert cli.main(["report", *cache, *env]) == 0
    assert (site / "runs" / "res2.html").is_file() and _mentions(site, "res2")
    assert cli.main(["history", "forget", "res2", *env]) == 0
    assert cli.main(["report", *cache, *env]) == 0
    assert "report: 2 runs" in capsys.readouterr().out
    assert not (site / "runs" / "res2.html").exists() and not _mentions(site, "res2")
    assert (site / "runs" / "res1.html").is_file() and (site / "runs" / "res3.html").is_file()


def _mentions(site: Path, text: str) -> list[Path]:
    return [p for p in site.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def test_forget_has_its_own_help(capsys) -> None:
    assert cli.main(["history", "forget", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: specsuite history forget ") and "RUN-ID" in out and "--dry-run" in out
    assert "`specsuite history forget RUN-ID...`" in cli.command_parser("history").description
