"""Compare on recorded (hand-made fixture) results: a regression, an improvement, one-sided cases."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specsuite.compare import compare_command, load_run, rows
from specsuite.errors import UserError

DATA = Path(__file__).parent / "data" / "results"
BASE, REGRESSED, IMPROVED = (DATA / n for n in ("fixture-base", "fixture-regressed", "fixture-improved"))


def _cmp(a: Path, b: Path, capsys: pytest.CaptureFixture[str], **kw) -> tuple[int, str]:
    code = compare_command(a=a, b=b, plot=False, **kw)
    return code, capsys.readouterr().out


def test_regression_fails(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _cmp(BASE, REGRESSED, capsys, markdown=False)
    assert code == 1
    ngram = next(line for line in out.splitlines() if line.startswith("ngram "))
    assert "accept rate 0.4500 < 0.5000" in ngram and "accept len 1.6000 < 1.8000" in ngram
    assert "-0.1700" in ngram  # accept rate 0.45 - 0.62
    assert "B fails 1 case(s): ngram" in out


def test_improvement_never_fails(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _cmp(BASE, IMPROVED, capsys, markdown=False)
    assert code == 0, out
    simple = next(line for line in out.splitlines() if line.startswith("simple "))
    assert "+0.0500" in simple and simple.rstrip().endswith("ok")
    # the other way round B is worse than A, but above every floor it ran with: still passes
    code, out = _cmp(IMPROVED, BASE, capsys, markdown=False)
    assert code == 0, out
    assert "-0.0800" in out  # ngram accept rate 0.62 - 0.70


def test_case_in_one_run_only(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _cmp(BASE, IMPROVED, capsys, markdown=False)
    dropped = next(line for line in out.splitlines() if line.startswith("dropped"))
    assert "(only in A)" in dropped and code == 0
    _, out = _cmp(BASE, REGRESSED, capsys, markdown=False)
    added = next(line for line in out.splitlines() if line.startswith("added"))
    assert "(only in B)" in added and added.rstrip().endswith("ok")


def test_only_in_b_still_checked_against_its_floors(tmp_path: Path, capsys) -> None:
    data = json.loads((REGRESSED / "results.json").read_text())
    data["cases"]["added"]["accept_rate"] = 0.3
    (tmp_path / "results.json").write_text(json.dumps(data))
    code, out = _cmp(BASE, tmp_path / "results.json", capsys, markdown=False)
    assert code == 1 and "B fails 2 case(s): ngram, added" in out


def test_error_in_b_fails_without_numbers(tmp_path: Path, capsys) -> None:
    data = json.loads((IMPROVED / "results.json").read_text())
    data["cases"]["simple"].update(status="error", reason="crashed", accept_rate=None, accept_len=None)
    (tmp_path / "results.json").write_text(json.dumps(data))
    code, out = _cmp(BASE, tmp_path, capsys, markdown=False)
    assert code == 1
    assert "error: crashed" in next(line for line in out.splitlines() if line.startswith("simple "))


def test_markdown_and_text(capsys: pytest.CaptureFixture[str]) -> None:
    _, md = _cmp(BASE, REGRESSED, capsys, markdown=True)
    assert "| case | A | B | accept rate A |" in md and "|---|" in md
    assert "| ngram | passed | failed (floor) | 0.6200 | 0.4500 | -0.1700 |" in md
    _, text = _cmp(BASE, REGRESSED, capsys, markdown=False)
    assert "|" not in text
    header, first = text.splitlines()[3:5]
    assert header.index("accept rate A") == first.index("0.6200")  # columns line up
    # capsys is not a terminal: the default is markdown, for job summaries
    _, auto = _cmp(BASE, REGRESSED, capsys)
    assert "|---|" in auto
    # invoke may hand the flag over as text
    _, text2 = _cmp(BASE, REGRESSED, capsys, markdown="false")
    assert text2 == text


def test_rows_order_b_first_then_a_only() -> None:
    names = [r.name for r in rows(load_run(BASE), load_run(REGRESSED))]
    assert names == ["ngram", "simple", "added", "dropped"]


def test_bad_paths(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"no results\.json"):
        compare_command(a=tmp_path, b=BASE, plot=False)
    (tmp_path / "results.json").write_text(json.dumps({"schema": 1}))
    with pytest.raises(UserError, match=r"not a specsuite results\.json"):
        compare_command(a=BASE, b=tmp_path, plot=False)


def test_plot_saved_with_b(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    b = tmp_path / "run-b"
    shutil.copytree(REGRESSED, b)
    compare_command(a=BASE, b=b / "results.json", markdown=True, plot=True)
    png = b / "per_position.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "plot: " in capsys.readouterr().err


def test_recorded_real_smoke_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """Two real CPU smoke runs: run 1's synth-zero diverged (identical 0.6667 < its floor then, 1.0)."""
    run1, run2 = DATA / "smoke-real-1", DATA / "smoke-real-2"
    code, out = _cmp(run1, run2, capsys, markdown=False)
    assert code == 0, out
    code, out = _cmp(run2, run1, capsys, markdown=False)
    assert code == 1
    assert "identical 0.6667 < 1.0000" in next(
        line for line in out.splitlines() if line.startswith("synth-zero")
    )
