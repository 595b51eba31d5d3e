"""What the site reads from the history: runs, records (a broken one shown from its numbers), commit order
(ancestry from a real git repository, else time), page names from data."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sitedata import at, git_commits, real, record

from specsuite.common.errors import UserError
from specsuite.report import data
from specsuite.report.data import slug


@pytest.mark.parametrize(
    ("text", "safe"),
    [("tiny-mtp-random", True), ("20261201T000000Z-synthetic", True), ("../../etc/passwd", False),
     ("a b", False), ("<img src=x>", False), ("", False), (".hidden", False)],
)  # fmt: skip
def test_slug_is_the_name_itself_or_a_safe_name_with_its_hash(text: str, safe: bool) -> None:
    name = slug(text)
    assert (name == text) is safe
    assert name and "/" not in name and not name.startswith(".")
    assert all(c.isalnum() or c in "._-" for c in name)
    assert slug(text) == name  # stable: the same page on every build


def test_two_names_that_clean_alike_stay_apart() -> None:
    assert slug("a b") != slug("a/b") != slug("a_b")


@pytest.fixture
def three(tmp_path: Path) -> tuple[Path, list[str], list[str]]:
    """Runs of commits 0, 2, then 1 (a rerun of an older commit last): time order differs from ancestry."""
    commits = git_commits(tmp_path / "mirror", 3)
    db, results = tmp_path / "h.sqlite", tmp_path / "results"
    ids = []
    for n, c in enumerate([commits[0], commits[2], commits[1]]):
        doc = at(real(0), c, n)
        doc["cases"] = {k: v for k, v in list(doc["cases"].items())[:2]}
        record(doc, db, results)
        ids.append(doc["run_id"])
    return db, commits, ids


def test_ancestry_orders_the_runs_where_the_mirror_knows_every_commit(tmp_path: Path, three) -> None:
    db, commits, _ = three
    (group,) = data.groups(data.load_runs(db, None), tmp_path / "mirror").values()
    assert group.ordered_by == "ancestry"
    assert [r.commit for r in group.runs] == commits


def test_time_orders_them_without_a_mirror_or_with_an_unknown_commit(tmp_path: Path, three) -> None:
    db, commits, _ = three
    in_time = [commits[0], commits[2], commits[1]]
    for mirror in (None, tmp_path / "nowhere", tmp_path):  # none, missing, not a repository
        (group,) = data.groups(data.load_runs(db, None), mirror).values()
        assert group.ordered_by == "time" and [r.commit for r in group.runs] == in_time
    other = git_commits(tmp_path / "other", 2)  # a repository that lacks these commits
    (group,) = data.groups(data.load_runs(db, None), tmp_path / "other").values()
    assert group.ordered_by == "time" and other


def test_build_numbers_order_runs_no_mirror_knows(tmp_path: Path) -> None:
    """PyPI's builds (no commit, no git): the site orders them by upstream's build number, which counts
    master's commits, not by when they ran; one run without a number puts the group back in time order."""
    db, results = tmp_path / "h.sqlite", tmp_path / "results"
    for n, build in enumerate([11434, 9113, 10289]):
        doc = at(real(0), None, n)  # type: ignore[arg-type]
        doc["binary"].update(commit=None, build=build)
        doc["cases"] = {k: v for k, v in list(doc["cases"].items())[:2]}
        record(doc, db, results)
    (group,) = data.groups(data.load_runs(db, None), None).values()
    assert group.ordered_by == "build number"
    assert [r.commit for r in group.runs] == ["b9113", "b10289", "b11434"]
    doc = at(real(0), "abcdef0", 3)
    doc["cases"] = {k: v for k, v in list(doc["cases"].items())[:2]}
    record(doc, db, results)
    (group,) = data.groups(data.load_runs(db, None), None).values()
    assert group.ordered_by == "time" and [r.commit for r in group.runs] == [
        "b11434",
        "b9113",
        "b10289",
        "abcdef0",
    ]


def test_records_come_back_run_by_run(three) -> None:
    db, _, ids = three
    runs = data.load_runs(db, None)
    got = {run.run_id: [r.name for r in recs] for run, recs in data.case_records(db, runs)}
    assert list(got) == ids and all(
        names == ["tiny-simple-fixed", "tiny-mtp-fixed"] for names in got.values()
    )


def test_a_broken_stored_record_shows_its_numbers(three, capsys: pytest.CaptureFixture[str]) -> None:
    db, _, ids = three
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE case_texts SET record = '{\"name\": [' WHERE name = 'tiny-mtp-fixed'")
    runs = data.load_runs(db, None)
    recs = {run.run_id: {r.name: r for r in rs} for run, rs in data.case_records(db, runs)}
    rec = recs[ids[0]]["tiny-mtp-fixed"]
    assert rec.status == "passed" and rec.accept_rate == real(0)["cases"]["tiny-mtp-fixed"]["accept_rate"]
    assert rec.command is None  # only the numbers survive
    assert capsys.readouterr().err.count("warning: report: the stored record of 'tiny-mtp-fixed'") == 3


def test_device_filter_and_unknown_device(three) -> None:
    db, _, _ = three
    assert len(data.load_runs(db, "cpu-x86-64-avx2")) == 3
    with pytest.raises(UserError, match=r"--device 'h200': not in the history; it has: .*cpu-x86-64-avx2"):
        data.load_runs(db, "h200")


def test_a_run_recorded_twice_gets_two_pages(tmp_path: Path) -> None:
    """A history written before run ids were unique (issue 35) may hold two runs under one id."""
    db, results = tmp_path / "h.sqlite", tmp_path / "r"
    a = at(real(0), "a" * 40, 0, run_id="same")
    b = at(real(0), "b" * 40, 1, run_id="same-b")
    record(a, db, results)
    record(b, db, results)
    with sqlite3.connect(db) as conn:  # today's history refuses a second run under one id: made by hand
        conn.execute("UPDATE runs SET run_id = 'same' WHERE run_id = 'same-b'")
    assert [r.slug for r in data.load_runs(db, None)] == ["same", f"same-{data.load_runs(db, None)[1].pk}"]
