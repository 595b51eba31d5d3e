"""Compare on recorded results (hand-made fixtures and real runs): the bottom line first, one row per case
that changed, the whole matrix behind --all; floors, relative drops, one-sided cases, bad input."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from testdata import DATA_ROOT, as_history_run

from specsuite.common.errors import UserError
from specsuite.history import regress
from specsuite.results.document import decode_run, load_run
from specsuite.tools.compare import CHANGED_HEADER, compare_command, rows

DATA = DATA_ROOT / "results"
BASE, REGRESSED, IMPROVED = (DATA / n for n in ("fixture-base", "fixture-regressed", "fixture-improved"))


def _cmp(a: Path | None, b: Path, capsys: pytest.CaptureFixture[str], **kw) -> tuple[int, str]:
    code = compare_command(a=a, b=b, plot=False, **kw)
    return code, capsys.readouterr().out


def _matrix(a: Path | None, b: Path, capsys: pytest.CaptureFixture[str], **kw) -> tuple[int, str]:
    """The whole matrix (--all), and only it: what comes after its heading."""
    code, out = _cmp(a, b, capsys, everything=True, **kw)
    return code, out.split("\nevery case\n", 1)[1]


def _changed(out: str) -> dict[str, list[str]]:
    """The text table of the cases that changed: each row's cells by case (columns split on 2+ spaces)."""
    lines = out.split("\nevery case\n", 1)[0].split("\nwhy\n", 1)[0].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("case ") and "status A -> B" in line)
    return {cells[0]: cells for cells in (re.split(r"  +", ln.strip()) for ln in lines[start + 2 :] if ln)}


def _edited(tmp_path: Path, src: Path, **cases: dict) -> Path:
    data = json.loads((src / "results.json").read_text())
    for name, change in cases.items():
        data["cases"][name].update(change)
    out = tmp_path / f"run-{len(list(tmp_path.iterdir()))}"
    out.mkdir()
    (out / "results.json").write_text(json.dumps(data))
    return out


def test_regression_fails(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _cmp(BASE, REGRESSED, capsys, markdown=False, everything=True)
    assert code == 1 and out.startswith("B regresses in 1 case(s): ngram\n")
    ngram = next(line for line in out.split("\nevery case\n")[1].splitlines() if line.startswith("ngram "))
    assert "accept rate 0.4500 < 0.5000" in ngram and "accept length 1.6000 < 1.8000" in ngram
    assert "accept_rate 0.4500 is 27.4 % below 0.6200 at baseline" in ngram
    assert "-0.1700" in ngram  # accept rate 0.45 - 0.62


def test_improvement_never_fails_but_a_relative_drop_does(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _matrix(BASE, IMPROVED, capsys, markdown=False)
    assert code == 0, out
    simple = next(line for line in out.splitlines() if line.startswith("simple "))
    assert "+0.0500" in simple and simple.rstrip().endswith("ok")
    # the other way round: above every floor B ran with, but ngram's rate fell 11 % (0.70 -> 0.62)
    code, out = _matrix(IMPROVED, BASE, capsys, markdown=False)
    assert code == 1, out
    assert "-0.0800" in out and "accept_rate 0.6200 is 11.4 % below 0.7000" in out
    code, out = _cmp(IMPROVED, BASE, capsys, markdown=False, rtol=0.2)  # a looser gate lets it through
    assert code == 0, out


def test_case_in_one_run_only(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _matrix(BASE, IMPROVED, capsys, markdown=False)
    dropped = next(line for line in out.splitlines() if line.startswith("dropped"))
    assert "(only in A)" in dropped and code == 0
    _, out = _matrix(BASE, REGRESSED, capsys, markdown=False)
    added = next(line for line in out.splitlines() if line.startswith("added"))
    assert "(only in B)" in added and added.rstrip().endswith("ok")


def test_only_in_b_still_checked_against_its_floors(tmp_path: Path, capsys) -> None:
    b = _edited(tmp_path, REGRESSED, added={"accept_rate": 0.3})
    code, out = _cmp(BASE, b, capsys, markdown=False)
    assert code == 1 and "B regresses in 2 case(s): ngram, added" in out


def test_error_in_b_fails_without_numbers(tmp_path: Path, capsys) -> None:
    b = _edited(tmp_path, IMPROVED, simple={"status": "error", "reason": "crashed", "accept_rate": None,
                                             "accept_len": None})  # fmt: skip
    code, out = _matrix(BASE, b, capsys, markdown=False)
    assert code == 1
    assert "error: crashed" in next(line for line in out.splitlines() if line.startswith("simple "))


def test_nan_metric_never_passes_its_floor(tmp_path: Path, capsys) -> None:
    b = _edited(tmp_path, IMPROVED, simple={"accept_rate": float("nan")})
    code, out = _matrix(BASE, b, capsys, markdown=False)
    assert code == 1
    assert "accept rate is nan, not a number" in next(
        line for line in out.splitlines() if line.startswith("simple")
    )


def test_text_floor_is_a_failure_not_ignored(tmp_path: Path, capsys) -> None:
    data = json.loads((IMPROVED / "results.json").read_text())
    b = _edited(
        tmp_path, IMPROVED, simple={"floors": {**data["cases"]["simple"]["floors"], "min_accept_rate": "0.9"}}
    )
    with pytest.raises(
        UserError, match=r"case 'simple': floors.min_accept_rate must be a number or null, got '0.9'"
    ):
        _cmp(BASE, b, capsys, markdown=False)  # a bad document is bad input, never a comparison


def test_runs_with_no_case_in_common_cannot_pass(tmp_path: Path, capsys) -> None:
    data = json.loads((BASE / "results.json").read_text())
    data["cases"] = {"other-" + k: v for k, v in data["cases"].items()}
    (tmp_path / "results.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match="no case in common: nothing to compare"):
        compare_command(a=BASE, b=tmp_path, plot=False)


def test_a_plot_that_cannot_be_saved_is_a_note_not_a_regression(tmp_path: Path, capsys) -> None:
    pytest.importorskip("matplotlib")
    b = tmp_path / "run-b"
    shutil.copytree(IMPROVED, b)
    (b / "per_position.png").mkdir()  # the PNG cannot be written there
    code = compare_command(a=BASE, b=b, markdown=False, plot=True)
    assert code == 0
    assert "the plot could not be saved" in capsys.readouterr().err


def test_markdown_and_text(capsys: pytest.CaptureFixture[str]) -> None:
    _, md = _cmp(BASE, REGRESSED, capsys, markdown=True, everything=True)
    assert "| case | A | B | accept rate A |" in md and "|---|" in md
    assert "| ngram | passed | failed (floor) | 0.6200 | 0.4500 | -0.1700 |" in md
    assert "| ngram | passed -> failed (floor) | pos0 rate | 1.0000 | 0.4444 | -55.6 % | exact |" in md
    assert md.startswith("**B regresses in 1 case(s): ngram**\n")
    _, text = _matrix(BASE, REGRESSED, capsys, markdown=False)
    assert "| ngram |" not in text
    header, _dashes, first = text.splitlines()[:3]
    assert header.index("accept rate A") == first.index("0.6200")  # columns line up
    # capsys is not a terminal: the default is markdown, for job summaries
    _, auto = _cmp(BASE, REGRESSED, capsys)
    assert "|---|" in auto


def test_rows_order_b_first_then_a_only() -> None:
    names = [r.name for r in rows(load_run(BASE).cases, load_run(REGRESSED).cases)]
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
    code, out = _matrix(run2, run1, capsys, markdown=False)
    assert code == 1
    assert "identical 0.6667 < 1.0000" in next(
        line for line in out.splitlines() if line.startswith("synth-zero")
    )


def test_against_auto_uses_the_history_baseline(tmp_path: Path, monkeypatch, capsys) -> None:
    from specsuite.history import recording

    monkeypatch.setenv("SPEC_HISTORY", str(tmp_path / "h.sqlite"))
    monkeypatch.setenv("SPEC_CACHE_DIR", str(tmp_path / "cache"))

    with pytest.raises(UserError, match="no history baseline"):
        b = tmp_path / "b"
        b.mkdir()
        (b / "results.json").write_text(
            json.dumps(as_history_run(REGRESSED, "b" * 40, "2026-12-02T00:00:00+00:00"))
        )
        compare_command(a=None, b=b, against="auto", plot=False)
    assert (
        recording.record_run(decode_run(as_history_run(BASE, "a" * 40, "2026-12-01T00:00:00+00:00"), "a"))
        is not None
    )
    code, out = _cmp(None, b, capsys, against="auto", markdown=False, everything=True)
    assert code == 1 and "history baseline, commit(s) aaaaaaaaaaaa" in out
    assert "accept_rate 0.4500 is 27.4 % below 0.6200" in out


# --- for people: the bottom line first, what changed, the matrix behind --all (issue 51, item 2) ---------


def test_the_bottom_line_comes_first_then_one_row_per_changed_case(capsys) -> None:
    code, out = _cmp(BASE, REGRESSED, capsys, markdown=False)
    lines = out.splitlines()
    assert code == 1 and lines[0] == "B regresses in 1 case(s): ngram"
    assert lines[1].startswith("A: fixture-base") and lines[2].startswith("B: fixture-regressed")
    assert lines[4] == (
        "4 of 4 cases changed (1 worse, 1 better, 1 only in A, 1 only in B); 0 the same "
        "(--all: every case and metric)"
    )
    rows_ = _changed(out)
    assert list(rows_) == ["ngram", "simple", "added", "dropped"]
    # the worst move first: position 0's rate 1.00 -> 0.44, an exact counter; the others beside it
    assert rows_["ngram"] == [
        "ngram", "passed -> failed (floor)", "pos0 rate", "1.0000", "0.4444", "-55.6 %", "exact",
        "accept rate -27.4 %, accept length -23.8 %",
        "under its floor: accept rate, accept length; worse than A beyond the gate: accept rate, accept len, "
        "pos0 rate",
    ]  # fmt: skip
    assert rows_["simple"][1:7] == ["passed", "accept rate", "0.8000", "0.9000", "+12.5 %", "exact"]
    assert rows_["simple"][-1] == "no"  # better is never a failure
    assert rows_["added"][1] == "absent -> passed" and rows_["dropped"][1] == "passed -> absent"
    assert "accept rate A" not in out  # the 19 columns only behind --all
    assert len(CHANGED_HEADER) == 9


def test_a_run_against_itself_changed_nothing(capsys) -> None:
    code, out = _cmp(IMPROVED, IMPROVED, capsys, markdown=False)
    assert code == 0 and out.splitlines()[0].startswith("B passes every floor it ran with")
    assert "0 of 2 cases changed; 2 the same" in out and "status A -> B" not in out


def test_a_speed_move_shows_its_p_from_the_rounds(capsys) -> None:
    """Two real synthetic runs with 4 A-B-B-A rounds each (site-real-2, -3): a speedup that fell
    significantly is a row with the one-sided Mann–Whitney p of its rounds, checked against scipy's; the
    speeds that moved within noise are not rows."""
    stats = pytest.importorskip("scipy.stats")
    a, b = DATA / "site-real-2", DATA / "site-real-3"
    code, out = _cmp(a, b, capsys, markdown=False)
    row = _changed(out)["tiny-dspark-p05"]
    assert code == 1 and row[2:5] == ["speedup", "191.625", "11.581"] and row[5] == "-94.0 %"
    sa = load_run(a).cases["tiny-dspark-p05"].speed_samples
    sb = load_run(b).cases["tiny-dspark-p05"].speed_samples
    p = stats.mannwhitneyu(sb, sa, alternative="less", method="exact").pvalue
    assert row[6] == f"{p:.3g}" and float(row[6]) < regress.ALPHA
    assert "decode tps -13.9 % (p 0.0143)" in row[7]  # the gate's other speed metric, with its own p
    same = [n for n in load_run(a).cases if n not in _changed(out)]
    assert "tiny-simple-fixed" in same  # its speedup moved 28 % between the two runs, within its noise


def test_no_python_none_in_prose(tmp_path: Path, capsys) -> None:
    """A passed case whose accept rate is missing: said in words against its floor, never as None."""
    b = _edited(tmp_path, IMPROVED, simple={"accept_rate": None})
    code, out = _cmp(BASE, b, capsys, markdown=False, everything=True)
    assert code == 1 and "None" not in out
    assert "accept rate is missing, not a number, against floor 0.7000" in out
    assert _changed(out)["simple"][2:5] == ["accept rate", "0.8000", "missing"]


def test_a_case_that_failed_outright_says_so_once(tmp_path: Path, capsys) -> None:
    """A binary that drafts nothing: each case one row, its failure once, the numbers it lost together."""
    lost = {"status": "failed", "reason": "spec_inactive", "message": "the server drafted nothing",
            "accept_rate": None, "accept_len": None, "speedup": None, "identical_fraction": None}  # fmt: skip
    b = _edited(tmp_path, BASE, ngram=lost, simple=lost)
    code, out = _cmp(BASE, b, capsys, markdown=False)
    assert code == 1 and out.splitlines()[0] == "B regresses in 2 case(s): ngram, simple"
    for name in ("ngram", "simple"):
        row = _changed(out)[name]
        assert row[1] == "passed -> failed (spec_inactive)" and row[3:5] == [row[3], "missing"]
        assert row[7] == "accept length, speedup, identical missing"
        assert row[8] == "failed (spec_inactive)"  # not again for each floor it can no longer meet
    assert out.count("spec_inactive") == 4


def test_many_failing_cases_are_named_briefly_in_the_bottom_line(tmp_path: Path, capsys) -> None:
    data = json.loads((DATA / "synthetic-tier-real" / "results.json").read_text())
    for rec in data["cases"].values():
        rec.update(status="failed", reason="spec_inactive", accept_rate=None, accept_len=None)
    (tmp_path / "results.json").write_text(json.dumps(data))
    code, out = _cmp(DATA / "synthetic-tier-real", tmp_path, capsys, markdown=False)
    first = out.splitlines()[0]
    assert code == 1 and first.startswith("B regresses in 26 case(s): all 26 cases")
    assert len(_changed(out)) == 26
