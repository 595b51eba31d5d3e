"""The site's change points across builds (issue 36, item 8): each noisy series is computed once and read
back while its runs stay the same; a series that gained or lost a run, or whose order changed, is computed
again, and what the site shows is what a build without the cache shows. Histories of real synthetic-tier
runs (tests/histories.py: real speed noise, four cases)."""

from __future__ import annotations

from pathlib import Path

import histories
import pytest
from histories import CASES, SHAPES
from sitedata import git_commits
from sitepage import page

from specsuite.cli import main as cli
from specsuite.history import recording
from specsuite.report.site import Built, Sources, build_site

GROUP = "cpu-x86-64-avx2--cpu"
NOISY = len(CASES) * 2  # each case's speedup and decode_tps (acceptance is exact: never cached)


def _history(tmp: Path, docs: list[dict]) -> Path:
    db = tmp / "h.sqlite"
    recording.import_runs(histories.write(docs, tmp / "runs"), db)
    return db


def _shown(out: Path) -> dict[str, list]:
    return {c: page(out, f"cases/{GROUP}/{c}.html").data["changes"] for c in CASES}


def _build(src: Sources, out: Path) -> tuple[Built, dict[str, list]]:
    built = build_site(src, out)
    return built, _shown(out)


def test_unchanged_series_come_from_the_cache_and_show_the_same(tmp_path: Path) -> None:
    speed = [1.0] * 6 + [0.2] * 6  # a collapse: every case has a speed change point to keep
    db = _history(tmp_path, histories.history_docs(SHAPES["step"], speed))
    cache, out = tmp_path / "cache" / "changes.json", tmp_path / "site"
    plain, expected = _build(Sources(db, None, tmp_path / "no-mirror"), out)
    assert (plain.series_cached, plain.series_computed) == (0, 0)  # no cache: none kept, none counted
    assert all(any(c["metric"] == "decode_tps" for c in rows) for rows in expected.values())
    src = Sources(db, None, tmp_path / "no-mirror", cache=cache)
    first, shown = _build(src, out)
    assert (first.series_cached, first.series_computed) == (0, NOISY) and shown == expected
    again, shown = _build(src, out)
    assert (again.series_cached, again.series_computed) == (NOISY, 0) and shown == expected
    # one case gains a run: its two noisy series are computed, the other cases' read back
    doc = histories.history_docs([*SHAPES["step"], 0.8], [*speed, 0.2])[-1]
    doc["cases"] = {CASES[0]: doc["cases"][CASES[0]]}
    recording.import_runs(histories.write([doc], tmp_path / "more"), db)
    gained, _ = _build(src, out)
    assert (gained.series_cached, gained.series_computed) == (NOISY - 2, 2)
    # every series loses its oldest run (a window of the last 12): all computed
    lost, shown = _build(Sources(db, None, tmp_path / "no-mirror", last=12, cache=cache), out)
    assert (lost.series_cached, lost.series_computed) == (0, NOISY)
    assert shown == _build(Sources(db, None, tmp_path / "no-mirror", last=12), tmp_path / "plain")[1]


def test_a_series_whose_order_changed_is_computed_again(tmp_path: Path) -> None:
    """The same runs ordered by time, then by the mirror's ancestry (they were run out of order)."""
    repo = tmp_path / "mirror"
    docs = histories.run_out_of_order(histories.history_docs(SHAPES["step"]), git_commits(repo, 12))
    db = _history(tmp_path, docs)
    cache, out = tmp_path / "changes.json", tmp_path / "site"
    by_time = build_site(Sources(db, None, tmp_path / "no-mirror", cache=cache), out)
    assert by_time.series_computed == NOISY
    by_ancestry = build_site(Sources(db, None, repo, cache=cache), out)
    assert (by_ancestry.series_cached, by_ancestry.series_computed) == (0, NOISY)
    assert build_site(Sources(db, None, repo, cache=cache), out).series_cached == NOISY


def test_the_command_keeps_its_cache_in_the_users_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPEC_CACHE_DIR", str(tmp_path / "cache"))
    db = _history(tmp_path, histories.history_docs(SHAPES["noise"]))
    argv = ["report", "--db", str(db), "--results", str(tmp_path / "none"), "--out", str(tmp_path / "site")]
    assert cli(argv) == 0
    assert f"change points: {NOISY} noisy series computed, 0 unchanged" in capsys.readouterr().out
    assert (tmp_path / "cache" / "report" / "changes.json").is_file()
    assert cli(argv) == 0
    assert f"change points: 0 noisy series computed, {NOISY} unchanged" in capsys.readouterr().out
