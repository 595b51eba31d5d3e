"""The morning page (issue 51): the index opens on what changed since the last run of each device class
(new reds, fixed cases, known upstream bugs, configuration changes, suspects, each linking to its case),
the full table below it puts failures first with their notes on rows of their own, and a run page opens
with the run's own first lines as summary.md has them, then its failures, warnings and the rest, the cases
not in its build counted."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from sitedata import (
    FIXED_CASE,
    INACTIVE_CASE,
    KNOWN_BUG,
    KNOWN_CASE,
    NEW_RED,
    NOT_BUILT,
    OTHER_CLASS,
    P_MIN,
    RED_BEFORE,
    STILL_RED,
    SUSPECTS,
    Story,
    at,
    morning_story,
    real,
    record,
    story,
)
from sitepage import page

from specsuite.common.table import markdown_plain
from specsuite.report import pages
from specsuite.report.site import Sources, build_site

GROUP = "cpu-x86-64-avx2--cpu"
BUG = f"llama.cpp #{KNOWN_BUG['issue']} ({KNOWN_BUG['title']})"


@dataclass
class Site:
    story: Story
    out: Path
    bare: Path  # the same history built without its results folders: the history's records alone


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    tmp = tmp_path_factory.mktemp("morning")
    s = morning_story(tmp)
    build_site(Sources(s.db, s.results, s.mirror), tmp / "site")
    build_site(Sources(s.db, None, s.mirror), tmp / "bare")
    return Site(s, tmp / "site", tmp / "bare")


def _between(text: str, start: str, end: str) -> str:
    at = text.index(start)
    return text[at : text.index(end, at)]


def _article(index: str, group: str) -> str:
    return _between(index, f'<article class="since" id="since-{group}"', "</article>")


def _dd(article: str, what: str) -> str:
    return _between(article, f'<dd class="{what}">', "</dd>")


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _links(fragment: str) -> list[tuple[str, str]]:
    return [
        (html.unescape(h), _text(t)) for h, t in re.findall(r'<a href="([^"]+)"[^>]*>(.*?)</a>', fragment)
    ]


def _case(name: str) -> tuple[str, str]:
    return f"cases/{GROUP}/{name}.html", name


def test_the_index_opens_on_what_changed_since_the_last_run(site: Site) -> None:
    s = site.story
    index = (site.out / "index.html").read_text(encoding="utf-8")
    # the first thing under the title, before any table; the newest setup's run first
    assert index.index('<section class="morning"') < index.index("<table")
    assert index.index(f'id="since-{GROUP}"') < index.index(f'id="since-{OTHER_CLASS}--cuda"')
    cpu = _article(index, GROUP)
    newest, before = s.run_ids[-1], s.run_ids[-2]
    assert (
        f'<a href="runs/{newest}.html">{newest}</a>' in cpu
    )  # its newest run, and the run it is held against
    assert "its cases against the run before: " in cpu and f'<a href="runs/{before}.html">{before}</a>' in cpu
    headline = f"FAILED: 2 of 26 case(s): {STILL_RED} (spec_inactive), {NEW_RED} (floor)"
    assert headline in _text(_between(cpu, '<p class="verdict red">', "</p>"))
    assert _links(_dd(cpu, "new-reds")) == [_case(NEW_RED)] and "(floor)" in _dd(cpu, "new-reds")
    assert _links(_dd(cpu, "fixed")) == [_case(RED_BEFORE)] and "was failed: floor" in _dd(cpu, "fixed")
    assert _links(_dd(cpu, "still-red")) == [_case(STILL_RED)]
    known = _dd(cpu, "known")
    assert _text(known) == (
        f"fixed upstream (the case passes) {BUG}: {FIXED_CASE} "
        f"still present (not a failure) {BUG}: {KNOWN_CASE}"
    )
    assert _links(known) == [_case(FIXED_CASE), _case(KNOWN_CASE)]
    # the run's line, then a link to the case that failed under it
    change = (
        f"CONFIGURATION CHANGED since {s.commits[-2][:12]} (run {before}): default of {P_MIN}: 0.75 -> 0.00; "
        f"failed under it: {NEW_RED} (floor)"
    )
    configs = _dd(cpu, "configs")
    assert _text(configs) == f"{change} · {NEW_RED}"
    assert _links(configs) == [_case(NEW_RED)]
    assert _text(_dd(cpu, "suspects")) == f"{SUSPECTS} · {NEW_RED}"
    assert _links(_dd(cpu, "suspects")) == [_case(NEW_RED)]
    # every link of the first screen opens a page of the site
    for href, _ in _links(cpu):
        assert (site.out / href.split("#")[0]).is_file() or href.startswith("#"), href
    # the other setup: one green run, nothing before it
    h200 = _article(index, f"{OTHER_CLASS}--cuda")
    assert "none of its cases ran before on this setup" in h200 and "PASSED: 26 passed" in h200
    assert [_text(_dd(h200, k)) for k in ("new-reds", "fixed", "configs")] == [
        "none", "none", "no change since the run before"
    ]  # fmt: skip


def test_the_index_says_the_same_from_the_history_alone(site: Site) -> None:
    """Without the results folders (a site built from an imported history), the configuration change
    comes from the configurations the history keeps; the rest from the stored records."""
    s = site.story
    cpu = _article((site.bare / "index.html").read_text(encoding="utf-8"), GROUP)
    change = (
        f"CONFIGURATION CHANGED since {s.commits[-2][:12]} (run {s.run_ids[-2]}): default of {P_MIN}: "
        f"0.75 -> 0.00; failed under it: {NEW_RED} (floor)"
    )
    assert _text(_dd(cpu, "configs")) == f"{change} · {NEW_RED}"
    assert _links(_dd(cpu, "new-reds")) == [_case(NEW_RED)] and _links(_dd(cpu, "fixed")) == [
        _case(RED_BEFORE)
    ]
    assert [c for _, c in _links(_dd(cpu, "known"))] == [FIXED_CASE, KNOWN_CASE]
    run = page(site.bare, f"runs/{s.run_ids[-1]}.html").text
    assert change in run  # the run page's first lines too


def _first_lines(root: Path, run_id: str) -> list[str]:
    text = (root / "runs" / f"{run_id}.html").read_text(encoding="utf-8")
    return [
        _text(li)
        for li in re.findall(r"<li[^>]*>(.*?)</li>", _between(text, '<ul class="attention', "</ul>"))
    ]


def test_a_run_page_opens_with_its_first_lines_as_summary_md_has_them(site: Site) -> None:
    s = site.story
    newest = s.run_ids[-1]
    md = (s.results / newest / "summary.md").read_text(encoding="utf-8").split("\n\nbinary: ")[0]
    bullets = [markdown_plain(line[2:]).removeprefix("**").removesuffix("**")
               for line in md.splitlines() if line.startswith("- ")]  # fmt: skip
    shown = _first_lines(site.out, newest)
    assert shown == bullets and len(shown) >= 4
    assert shown[0].startswith("CONFIGURATION CHANGED since") and SUSPECTS in shown
    text = (site.out / "runs" / f"{newest}.html").read_text(encoding="utf-8")
    assert (
        text.index("CONFIGURATION CHANGED") < text.index('id="summary-cases"') < text.index("<dt>tier</dt>")
    )


def test_a_run_page_lists_failures_then_warnings_then_the_rest(site: Site) -> None:
    cases = page(site.out, f"runs/{site.story.run_ids[-1]}.html").data["cases"]
    parts = [c["part"] for c in cases]
    assert parts == sorted(parts, key=pages.PARTS.index)  # in PARTS' order
    by = {p: [c["record"]["name"] for c in cases if c["part"] == p] for p in pages.PARTS}
    assert by["failures"] == [STILL_RED, NEW_RED]  # in the run's order within a part
    assert by["warnings"] == [KNOWN_CASE]
    assert by["not in this build"] == list(NOT_BUILT)
    assert len(by["passed"]) == 26 - 2 - 1 - len(NOT_BUILT)
    assert {c["kind"] for c in cases if c["part"] == "warnings"} == {"known"}


def test_the_full_table_puts_failures_first_with_notes_on_rows_of_their_own(site: Site) -> None:
    index = (site.out / "index.html").read_text(encoding="utf-8")
    table = _between(index, f'<section class="group" id="{GROUP}"', "</table>")
    rows = re.findall(r'<tr class="(status-[a-z]+)" data-case="([^"]+)"', table)
    kinds = [k for k, _ in rows]
    assert kinds[:2] == ["status-failed"] * 2 and kinds[2] == "status-known"
    assert kinds[-len(NOT_BUILT) :] == ["status-skipped"] * len(NOT_BUILT)
    assert {c for _, c in rows[:3]} == {STILL_RED, NEW_RED, KNOWN_CASE}
    # a note sits on the row under its case, the width of the table; a case not in this build keeps its
    # note to the badge's tooltip
    note_row = r'<tr class="note [^"]+" data-note-for="([^"]+)"><td></td><td colspan="\d+">(.*?)</td></tr>'
    notes = dict(re.findall(note_row, table))
    assert (
        "the server drafted no token" in notes[STILL_RED]
        and "accept_rate 0.1000 &lt; floor" in notes[NEW_RED]
    )
    assert "known bug, still present" in notes[KNOWN_CASE]
    assert not set(NOT_BUILT) & set(notes)
    said = "not in this build: binary_no_dspark · llama-server cannot run this case: no dspark"
    assert f'class="badge skipped" title="{said}"' in table
    # the status cell holds the badge alone
    cell = _between(table, f'data-case="{STILL_RED}"', "</tr>")
    assert re.search(r'<td><span class="badge failed" title="[^"]+">failed: spec_inactive</span></td>', cell)


def test_the_story_sites_index_keeps_its_failing_cases_on_top(tmp_path: Path) -> None:
    """The history of issue 36's story: its latest run failed two cases; they lead its table."""
    s = story(tmp_path)
    build_site(Sources(s.db, s.results, s.mirror), tmp_path / "site")
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    rows = re.findall(r'<tr class="status-([a-z]+)" data-case="([^"]+)"', index)
    assert [k for k, _ in rows[:2]] == ["failed", "drifted"] and rows[0][1] == INACTIVE_CASE
    assert all(k not in pages.BAD for k, _ in rows[2:])


def test_an_interrupted_run_names_the_case_it_stopped_in_not_those_never_reached(
    tmp_path: Path,
) -> None:
    db, results = tmp_path / "h.sqlite", tmp_path / "results"
    record(at(real(2), "a" * 40, 0), db, results)
    doc = at(real(2), "b" * 40, 1)
    names = list(doc["cases"])
    for i, name in enumerate(names):
        doc["cases"][name].update(status="interrupted", reason="interrupted" if i == 0 else "not_run")
    doc.pop("verdict", None)
    record(doc, db, results)
    build_site(Sources(db, results, None), tmp_path / "site")
    cpu = _article((tmp_path / "site" / "index.html").read_text(encoding="utf-8"), GROUP)
    assert _links(_dd(cpu, "new-reds")) == [_case(names[0])]
    assert _text(_between(cpu, '<p class="verdict red">', "</p>")).startswith(
        f"INTERRUPTED: 0 of 26 case(s) finished; stopped in {names[0]}; not run: "
    )
