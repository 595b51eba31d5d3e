"""The site tells the story (issue 36): change points on consecutive commits are one span that says the
whole drift, the index's sparklines show the speed that moved and not only acceptance, a passed speedup
below 1.0 says why it passed, and the site orders its runs as ``specsuite changes`` orders its series."""

from __future__ import annotations

import re
import statistics
import subprocess
from pathlib import Path

import pytest
from sitedata import (
    DRIFT_CASE,
    DRIFT_FROM,
    DRIFT_STEPS,
    SPEED_CASE,
    SPEED_STEPS,
    Story,
    at,
    drift_story,
    git_commits,
    real,
    record,
)
from sitepage import Page, page

from specsuite.history import ancestry
from specsuite.history.changes import find_changes, relative
from specsuite.report import data
from specsuite.report.render import SPARK_H
from specsuite.report.site import Sources, build_site

GROUP = "cpu-x86-64-avx2--cpu"


@pytest.fixture(scope="module")
def drifted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Story, Path]:
    tmp = tmp_path_factory.mktemp("drift")
    s = drift_story(tmp)
    build_site(Sources(s.db, s.results, s.mirror), tmp / "site")  # change points: the real detector
    return s, tmp / "site"


def _row_html(index: str, case: str) -> str:
    """A case's row of the index, and the row of its note under it where it has one."""
    start = index.index(f'data-case="{case}"')
    end = index.index("</tr>", start)
    if index.startswith('\n<tr class="note', end + 5) and f'data-note-for="{case}"' in index[end : end + 200]:
        end = index.index("</tr>", end + 5)
    return index[start:end]


def _whole_change(values: list[float], first: int, last: int) -> float:
    return relative(statistics.fmean(values[:first]), statistics.fmean(values[last:]))


def test_change_points_on_consecutive_commits_are_one_span_with_the_whole_drift(drifted) -> None:
    s, out = drifted
    d = page(out, f"cases/{GROUP}/{DRIFT_CASE}.html").data
    last = DRIFT_FROM + DRIFT_STEPS - 1
    change = _whole_change(d["values"]["accept_rate"], DRIFT_FROM, last)
    span = f"{s.commits[DRIFT_FROM - 1][:7]}..{s.commits[last][:7]}"
    label = f"{change * 100:+.1f} % over {DRIFT_STEPS} commits, {span}"
    assert label.startswith("-11.")  # 0.97 ** 4: the whole drift, not its last 3 % step
    [row] = [c for c in d["changes"] if c["metric"] == "accept_rate"]
    assert (row["index"], row["last"], row["label"]) == (DRIFT_FROM, last, label)
    assert [st["commit"] for st in row["steps"]] == s.commits[DRIFT_FROM : last + 1]
    assert all(-0.031 < st["change"] < -0.029 for st in row["steps"])
    # one event a chart draws: a span from the first step to the last, one label
    assert [e for e in d["events"] if e["metric"] == "accept_rate"] == [
        {"kind": "change", "metric": "accept_rate", "first": DRIFT_FROM, "last": last, "label": label}
    ]
    # the index says the whole drift, not its last step
    cell = Page(_row_html((out / "index.html").read_text(), DRIFT_CASE)).text
    assert f"accept rate {label}" in cell


def _polyline_ys(svg: str) -> list[float]:
    points = re.search(r'<polyline class="spark-line" points="([^"]+)"', svg)
    assert points, svg
    return [float(p.split(",")[1]) for p in points.group(1).split()]


def _sparks(row: str) -> dict[str, str]:
    return dict(re.findall(r'<div class="spark-row" data-metric="([a-z_0-9]+)">(.*?)</div>', row))


def test_the_index_sparkline_shows_the_speed_that_moved(drifted) -> None:
    _, out = drifted
    row = _row_html((out / "index.html").read_text(), SPEED_CASE)
    sparks = _sparks(row)
    assert set(sparks) == {"accept_rate", "speedup"}
    accept, speed = _polyline_ys(sparks["accept_rate"]), _polyline_ys(sparks["speedup"])
    assert max(accept) - min(accept) == 0  # its counters held
    assert speed[-1] - speed[0] > 0.5 * SPARK_H  # lower is further down: -16.7 % over six commits
    assert speed[:-SPEED_STEPS] == [speed[0]] * (len(speed) - SPEED_STEPS)


def test_a_passed_speedup_below_one_says_why(drifted, tmp_path: Path) -> None:
    _, out = drifted
    index = (out / "index.html").read_text()
    why = Page(_row_html(index, SPEED_CASE)).text
    assert "passed" in why and "speedup 0.958 < 1: no speed floor for this case (min_speedup)" in why
    real_one = Page(_row_html(index, "tiny-auto-mtp")).text  # a real CPU run: 0.884, its rounds' range
    assert re.search(
        r"speedup 0\.884 < 1: no speed floor .*; its A-B-B-A rounds ranged 0\.\d+ to \d", real_one
    )
    assert "< 1:" not in Page(_row_html(index, "tiny-dflash-fixed")).text  # 325.7: nothing to explain
    case = page(out, f"cases/{GROUP}/{SPEED_CASE}.html").text
    assert "speedup 0.958 < 1: no speed floor" in case
    # an acceptance-only run (cases side by side on a CPU build) did not judge speed at all
    db, results = tmp_path / "h.sqlite", tmp_path / "results"
    doc = at(real(2), "a" * 40, 0)
    doc["options"]["speed"] = False
    record(doc, db, results)
    build_site(Sources(db, results, None), tmp_path / "site")
    text = Page(_row_html((tmp_path / "site" / "index.html").read_text(), "tiny-auto-mtp")).text
    assert "speedup 0.884 < 1: speed not judged in this run" in text


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args]
    return subprocess.run(cmd, cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def test_the_site_orders_runs_as_changes_orders_series(tmp_path: Path) -> None:
    """Runs on two sibling branches, recorded out of order: the site orders them by ancestry as the change
    points' series are (one function, ``ancestry.in_commit_order``), so each change point sits where the
    site's values change; there is one ``default_mirror``."""
    repo = tmp_path / "mirror"
    main = git_commits(repo, 3)
    _git(repo, "checkout", "-q", "-b", "side", main[0])
    for i in range(2):
        _git(repo, "commit", "-q", "--allow-empty", "-m", f"side {i}")
    side = _git(repo, "rev-list", "--reverse", f"{main[-1]}..side").split()
    db, results = tmp_path / "h.sqlite", tmp_path / "results"
    order = [main[2], side[1], main[0], side[0], main[1]]  # the time order of the runs
    for n, commit in enumerate(order):
        doc = at(real(2), commit, n)
        doc["cases"] = {k: doc["cases"][k] for k in ("tiny-mtp-random", "tiny-mtp-fixed")}
        rec = doc["cases"]["tiny-mtp-random"]
        if commit in side:  # the side branch accepts less: one change point between the branches
            rec["accept_rate"] = round(rec["accept_rate"] * 0.8, 4)
        record(doc, db, results)
    build_site(Sources(db, results, repo), tmp_path / "site")
    d = page(tmp_path / "site", f"cases/{GROUP}/tiny-mtp-random.html").data
    assert d["ordered_by"] == "ancestry"
    expected, by_ancestry = ancestry.in_commit_order(order, lambda c: c, repo)
    assert by_ancestry and d["commit"] == expected != order
    [cp] = find_changes(db, metric="accept_rate", mirror=repo)
    [row] = d["changes"]
    assert (d["commit"][row["index"] - 1], d["commit"][row["index"]]) == (cp.before_commit, cp.after_commit)
    rates = d["values"]["accept_rate"]
    assert rates[row["index"] - 1] != rates[row["index"]]
    assert not hasattr(data, "default_mirror")
