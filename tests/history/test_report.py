"""``history``: tables per case over commits, JSON, the trend plot, and its messages, on real SQLite files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from testdata import DATA_ROOT

from specsuite.common.errors import UserError
from specsuite.history import queries, schema
from specsuite.history.command import history_command
from specsuite.history.recording import record_run
from specsuite.results.document import decode_run

REAL = DATA_ROOT / "results"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """The two real smoke runs, the second as if built from a later llama.cpp commit."""
    path = tmp_path / "h.sqlite"
    one = json.loads((REAL / "smoke-real-1" / "results.json").read_text())
    two = json.loads((REAL / "smoke-real-2" / "results.json").read_text())
    two["binary"]["commit"] = "1234567890abcdef"
    two["cases"]["ngram-mod"]["accept_rate"] = 0.8
    assert record_run(decode_run(one, "one"), path) and record_run(decode_run(two, "two"), path)
    return path


def run(capsys: pytest.CaptureFixture[str], **kw) -> tuple[int, str]:
    args = {"path": None, "case": None, "device": None, "last": None, "plot": None, "as_json": False, **kw}
    code = history_command(**args)
    return code, capsys.readouterr().out


def test_one_table_per_case_over_commits(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, path=db)
    assert code == 0
    glance, columns, *tables = out.strip().split("\n\n")  # the latest runs, the columns, then the cases
    assert glance.startswith("latest runs") and columns.startswith("columns:")
    blocks = {b.splitlines()[0]: b.splitlines()[1:] for b in tables}
    cases = json.loads((REAL / "smoke-real-1" / "results.json").read_text())["cases"]
    assert set(blocks) == set(cases)
    header, _, first, second = blocks["ngram-mod"]
    assert header.split("  ")[0] == "commit" and "accept rate" in header
    assert header.endswith("speedup  block cost  prefill")  # the registry's labels (results.metrics)
    rec = cases["ngram-mod"]
    assert first.split()[:6] == ["0c1e570", "2026-11-30", "05:05", "cpu", "cpu", "passed"]
    assert first.split()[6:] == [
        f"{rec['accept_rate']:.4f}",
        f"{rec['accept_len']:.4f}",
        "1.0000",
        f"{rec['speedup']:.3f}",
        "—",  # recorded before per-block overhead was measured
        "—",  # ... and before the prefill was
    ]
    assert second.split()[0] == "1234567" and second.split()[6] == "0.8000"  # the later commit below
    zero = blocks["synth-zero"][2]
    assert "failed (diverged)" in zero  # run 1's synth-zero, with its reason


def test_filters_and_last(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out = run(capsys, path=db, case="ngram-mod", device="cpu", last=1)
    columns, table_ = out.strip().split("\n\n")  # one case: its table is the glance, no latest runs
    lines = table_.splitlines()
    assert columns.startswith("columns:") and "latest runs" not in out
    assert lines[0] == "ngram-mod" and len(lines) == 4 and lines[3].startswith("1234567")


def test_json_rows(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out = run(capsys, path=db, case="ngram-mod", as_json=True)
    rows = json.loads(out)
    assert [(r["commit"][:7], r["case"], r["accept_rate"]) for r in rows] == [
        ("0c1e570", "ngram-mod", 1.0),
        ("1234567", "ngram-mod", 0.8),
    ]
    assert rows == queries.case_rows(db, case="ngram-mod")


def test_an_empty_history_is_one_line_and_creates_nothing(tmp_path: Path, capsys) -> None:
    absent = tmp_path / "none" / "h.sqlite"
    code, out = run(capsys, path=absent)
    assert (
        code == 0
        and out == f"no runs recorded yet in {absent}: every suite run records itself there when it ends\n"
    )
    assert not absent.parent.exists()
    empty = tmp_path / "empty.sqlite"
    schema.connect(empty).close()
    code, out = run(capsys, path=empty, case="mtp")
    assert code == 0 and out.startswith("no runs recorded yet")


def test_unknown_filters_say_what_exists(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(
        UserError, match=r"no case 'mtp' in the history; choose from 6: draft-simple, ngram-mod, ngram-simple"
    ):
        run(capsys, path=db, case="mtp")
    with pytest.raises(UserError, match=r"no case 'ngram-mdo' in the history: did you mean 'ngram-mod'\?$"):
        run(capsys, path=db, case="ngram-mdo")  # a typo: the nearest name, not every name
    with pytest.raises(UserError, match=r"no device 'NVIDIA H200' in the history; choose from 2: cpu, cpu-"):
        run(capsys, path=db, device="NVIDIA H200")
    with pytest.raises(UserError, match="--last 0: give a number of runs"):
        run(capsys, path=db, last=0)


def test_a_corrupt_history_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "h.sqlite"
    bad.write_bytes(b"not a database at all" * 50)
    with pytest.raises(UserError, match="cannot read it"):
        run(capsys, path=bad)


def test_trend_plot(db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plots" / "trend.png"
    assert history_command(path=db, case=None, device=None, last=None, plot=out, as_json=True) == 0
    printed = capsys.readouterr()
    assert len(json.loads(printed.out)) == 12 and printed.err == f"plot: {out}\n"  # stdout stays JSON
    assert out.read_bytes()[:8] == PNG_MAGIC and out.stat().st_size > 10_000
    assert [p.name for p in out.parent.iterdir()] == ["trend.png"]


def test_plot_to_an_unwritable_place(db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match=r"cannot write the plot to .*give a writable \.png path"):
        run(capsys, path=db, plot=tmp_path / "file" / "trend.png")


def test_plot_without_matplotlib(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # matplotlib is installed here; a None entry in sys.modules makes its import fail as if it were not
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(UserError, match=r"--plot needs matplotlib, the optional `plot` extra: pip install"):
        run(capsys, path=db, plot=tmp_path / "trend.png")
    assert capsys.readouterr().out == ""  # the message alone, no table before it
    assert not (tmp_path / "trend.png").exists()


# --- a broken row is skipped with a warning naming it, never a traceback ----------------------------------


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        # a registered metric is a key of the case's metrics JSON (schema v8; JSON holds no bytes)
        (
            "UPDATE cases SET metrics = json_set(metrics, '$.accept_rate', 'high') WHERE run = 2",
            "accept_rate is 'high', not a number",
        ),
        (
            "UPDATE cases SET metrics = json_set(metrics, '$.speedup', json('[1]')) WHERE run = 2",
            "speedup is [1], not a number",
        ),
        ("UPDATE runs SET llama_commit = x'05' WHERE id = 2", "commit is b'\\x05', not text"),
        ("UPDATE runs SET started = x'07' WHERE id = 2", "started is b'\\x07', not text"),
        ("UPDATE cases SET status = x'03' WHERE run = 2", "status is b'\\x03', not text"),
    ],
)
@pytest.mark.parametrize("as_json", [False, True])
def test_a_broken_row_is_skipped_with_a_warning_naming_it(
    db: Path, capsys: pytest.CaptureFixture[str], sql: str, why: str, as_json: bool
) -> None:
    import sqlite3

    with sqlite3.connect(db) as conn:
        conn.execute(sql)
    code = history_command(path=db, case="ngram-mod", device=None, last=None, plot=None, as_json=as_json)
    out, err = capsys.readouterr()
    assert code == 0
    [line] = [ln for ln in err.splitlines() if ln.startswith("warning:")]
    assert line.startswith("warning: skipping a broken history row of 'ngram-mod' in run ") and why in line
    shown = json.loads(out) if as_json else out.strip().split("\n\n")[-1].splitlines()[3:]
    assert len(shown) == 1  # the other commit's row is listed


def test_a_broken_models_or_options_text_is_skipped_too(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import sqlite3

    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET models = '{not json', options = '[' WHERE id = 1")
    rows = queries.runs(db)
    assert (rows[0]["models"], rows[0]["options"]) == (None, None) and rows[1]["models"] is not None
    assert "warning: broken JSON in history run " in capsys.readouterr().err


# --- for people: the latest runs at a glance, the columns explained (issue 51, item 2) --------------------


def test_the_latest_runs_come_first_newest_first(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out = run(capsys, path=db)
    glance = out.split("\n\n")[0].splitlines()
    assert glance[0] == "latest runs, newest first (all 2 run(s))"
    assert glance[1].split() == ["started", "run", "llama.cpp", "device/backend", "tier", "cases"]
    newest, older = glance[3], glance[4]
    assert newest.split()[2:4] == ["20261130T050517Z-calibrate-smoke-2", "1234567"]
    assert newest.split(maxsplit=6)[6] == "6 passed"
    # run 1's synth-zero diverged: the failing status first, naming its case
    assert older.split()[3] == "0c1e570" and older.endswith("smoke  1 failed (synth-zero), 5 passed")
    _, out = run(capsys, path=db, last=1)
    assert out.startswith("latest runs, newest first (all 1 run(s))\n")


def test_a_long_history_shows_the_newest_five(tmp_path: Path, capsys) -> None:
    db = tmp_path / "h.sqlite"
    doc = json.loads((REAL / "smoke-real-1" / "results.json").read_text())
    for i in range(7):
        one = {**doc, "run_id": f"r{i}", "started": f"2026-12-0{i + 1}T00:00:00+00:00"}
        assert record_run(decode_run(one, f"r{i}"), db)
    _, out = run(capsys, path=db)
    glance = out.split("\n\n")[0].splitlines()
    assert glance[0] == "latest runs, newest first (5 of 7 runs)"
    assert [line.split()[2] for line in glance[3:]] == ["r6", "r5", "r4", "r3", "r2"]


def test_every_metric_column_is_explained(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """pos0, block cost and every other number column of the case tables get a line under `columns:`."""
    from specsuite.history.command import EXPLAINED, HEADER, PLAIN_COLUMNS

    numbers = [c for c in HEADER if c not in PLAIN_COLUMNS]
    assert numbers and all(c in EXPLAINED for c in numbers), set(numbers) - set(EXPLAINED)
    _, out = run(capsys, path=db)
    columns = out.split("\n\n")[1].splitlines()
    assert columns[0] == "columns:" and [ln.split(":")[0].strip() for ln in columns[1:]] == numbers
