"""The site in a real browser (headless Chromium, from file://): every page of a history of real
synthetic-tier runs plus crafted ones (a step, a drift, failures, a hostile results.json) loads without a
console error, every chart is drawn, the failing case is marked, the change point sits at its commit, a
point clicks through to its run, and every link resolves. The morning page (issue 51) at 1400 px: its
first screen says what changed since the last run, its badges are one line, its rows one line high, its
run page lists failures first. Screenshots of the index (whole, and its first screen), the stepped case's
page and a run page go to results/report-browser-test/."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
from browser import Browser, open_browser
from sitedata import (
    DRIFT_CASE,
    DRIFT_FROM,
    DRIFT_STEPS,
    HOSTILE,
    INACTIVE_CASE,
    NEW_RED,
    NOT_BUILT,
    STEP_AT,
    STEP_CASE,
    STILL_RED,
    SWEEP_MEMBERS,
    Story,
    drift_story,
    hostile_run,
    morning_story,
    story,
)

from specsuite.common import paths
from specsuite.report.data import METRICS
from specsuite.report.site import Sources, build_site

pytestmark = pytest.mark.slow
GROUP = "cpu-x86-64-avx2--cpu"
SHOTS = paths.RESULTS_DIR / "report-browser-test"
CHANGE_RGB = (225, 111, 0)  # site.js's change-point colour


@dataclass
class Site:
    story: Story
    out: Path

    def case(self, name: str) -> Path:
        return self.out / "cases" / GROUP / f"{name}.html"


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    yield from open_browser(tmp_path_factory.mktemp("chromium-profile"))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    tmp = tmp_path_factory.mktemp("browsed")
    s = story(tmp)
    hostile_run(s.db, s.results, n=20)
    build_site(Sources(s.db, s.results, s.mirror), tmp / "site")  # change points: history.changes
    return Site(s, tmp / "site")


def _charts(browser: Browser) -> list[dict[str, Any]]:
    """Each chart figure of the page: its id, whether it says it has no data, and how many of its
    canvas's pixels are painted."""
    return browser.js("""
        return [...document.querySelectorAll("figure.chart")].map((f) => {
          const c = f.querySelector("canvas");
          let painted = 0;
          if (c && c.width && c.height) {
            const px = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
            for (let i = 3; i < px.length; i += 4) if (px[i]) painted++;
          }
          return {id: f.id, nodata: f.classList.contains("nodata"), painted};
        });""")


def _shot(browser: Browser, name: str) -> None:
    shot = browser.screenshot(SHOTS / name)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    print(f"screenshot: {shot}")


def _links(browser: Browser) -> list[str]:
    return browser.js(
        "return [...document.querySelectorAll('a[href], script[src], link[href]')].map((e) => e.href||e.src)"
    )


def test_every_page_loads_clean_every_chart_is_drawn_every_link_resolves(
    browser: Browser, site: Site
) -> None:
    root = site.out.resolve()
    queue, seen, checked = deque([root / "index.html"]), {root / "index.html"}, 0
    while queue:
        page = queue.popleft()
        errors = browser.load(page)
        assert errors == [], f"{page.relative_to(root)}: {errors}"
        assert browser.js("return window.pwned") is None and browser.js("return document.images.length") == 0
        if page.parent.parent.name == "cases":
            charts = _charts(browser)
            # one per charted metric, acceptance by draft position, and a sweep member's speedup by np
            assert len(charts) == len(METRICS) + 1 + (page.stem in SWEEP_MEMBERS), page
            for c in charts:
                assert c["nodata"] or c["painted"] > 500, f"{page.relative_to(root)}: {c}"
        for href in _links(browser):
            url = urlparse(href)
            assert url.scheme == "file", f"{page.relative_to(root)} links out: {href}"
            target = Path(unquote(url.path))
            assert target.is_file() and target.is_relative_to(root), f"{page.relative_to(root)}: {href}"
            checked += 1
            if target.suffix == ".html" and target not in seen:
                seen.add(target)
                queue.append(target)
    s = site.story
    n_cases = len(list((site.out / "cases").rglob("*.html")))
    assert len(seen) == 1 + n_cases + len(s.run_ids) + 1  # every page is reachable (the hostile run too)
    assert checked > 500


def test_the_failing_case_is_marked_on_the_index(browser: Browser, site: Site) -> None:
    browser.load(site.out / "index.html")
    row = browser.js("""
        const r = document.querySelector(`tr[data-case="${arguments[0]}"]`), b = r.querySelector(".badge");
        return {cls: r.className, text: b.textContent, bg: getComputedStyle(b).backgroundColor,
                edge: getComputedStyle(r.cells[0]).borderLeftColor};""", INACTIVE_CASE)  # fmt: skip
    assert row == {"cls": "status-failed", "text": "failed: spec_inactive", "bg": "rgb(207, 34, 46)",
                   "edge": "rgb(207, 34, 46)"}  # fmt: skip
    drifted = browser.js(f"return document.querySelector('tr[data-case=\"{STEP_CASE}\"] .badge').textContent")
    assert drifted == "failed: drifted"
    text = browser.js("return document.body.innerText")
    assert HOSTILE in text  # the hostile case name, shown as text
    # a badge as long as the hostile reason ends in an ellipsis: the page still fits 1400 px
    assert browser.js("return document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    _shot(browser, "index.png")


def test_the_change_point_is_drawn_at_its_commit_and_points_open_their_runs(
    browser: Browser, site: Site
) -> None:
    s = site.story
    assert browser.load(site.case(STEP_CASE)) == []
    found = browser.js("""
        const u = window.specsuiteCharts["chart-accept_rate"], ctx = u.ctx;
        const x = Math.round(u.valToPos(arguments[0] - 0.5, "x", true));
        const hits = [];
        for (let dx = -2; dx <= 2; dx++) {
          const col = ctx.getImageData(x + dx, u.bbox.top, 1, u.bbox.height).data;
          for (let i = 0; i < col.length; i += 4) hits.push([col[i], col[i + 1], col[i + 2]]);
        }
        return hits;""", STEP_AT)  # fmt: skip
    orange = [p for p in found if all(abs(a - b) < 40 for a, b in zip(p, CHANGE_RGB, strict=True))]
    assert len(orange) > 50  # the dashed line between the last run before and the first after
    row = browser.js("return document.querySelector('table.changes tbody tr').dataset")
    assert row == {"index": str(STEP_AT), "last": str(STEP_AT), "after": s.commits[STEP_AT], "steps": "1"}
    _shot(browser, "case.png")
    # a click on the point of the last run opens that run's page
    from selenium.webdriver.common.action_chains import ActionChains

    where = browser.js("""
        const u = window.specsuiteCharts["chart-accept_rate"], i = arguments[0];
        const r = u.over.getBoundingClientRect();
        return [u.valToPos(i, "x") - r.width / 2, u.valToPos(u.data[1][i], "y") - r.height / 2];""",
        len(s.run_ids) - 1)  # fmt: skip
    over = browser.driver.find_element("css selector", "#chart-accept_rate .u-over")
    ActionChains(browser.driver).move_to_element_with_offset(
        over, int(where[0]), int(where[1])
    ).click().perform()
    assert browser.driver.current_url.endswith(f"/runs/{s.run_ids[-1]}.html")


# --- a drift: one span, one label; labels never overprint (issue 36) --------------------------------------

LABELS_DRAWN = """
const done = arguments[arguments.length - 1], out = {};
for (const [id, u] of Object.entries(window.specsuiteCharts)) {
  const ctx = u.ctx, own = ctx.fillText, drawn = (out[id] = []);
  ctx.fillText = function (text, x, y) {
    if (/%/.test(text)) drawn.push({text, x, y, w: ctx.measureText(text).width});
    return own.apply(this, arguments);
  };
  u.redraw(false, false);
  setTimeout(() => { ctx.fillText = own; }, 100);
}
setTimeout(() => done(out), 150);
"""


def _labels(browser: Browser) -> dict[str, list[dict[str, Any]]]:
    """Each chart's labels as its draw hook writes them (text, where, how wide), read on a redraw."""
    return browser.driver.execute_async_script(LABELS_DRAWN)


def _overprinted(labels: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [
        (a["text"], b["text"])
        for i, a in enumerate(labels)
        for b in labels[i + 1 :]
        if a["y"] == b["y"] and a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
    ]


@pytest.fixture(scope="module")
def drift_site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    tmp = tmp_path_factory.mktemp("drift-browsed")
    s = drift_story(tmp)
    build_site(Sources(s.db, s.results, s.mirror), tmp / "site")
    return Site(s, tmp / "site")


def test_a_drift_is_one_shaded_span_with_one_label(browser: Browser, drift_site: Site) -> None:
    s = drift_site.story
    assert browser.load(drift_site.case(DRIFT_CASE)) == []
    labels = _labels(browser)
    last = DRIFT_FROM + DRIFT_STEPS - 1
    [label] = [t["text"] for t in labels["chart-accept_rate"]]
    assert label.endswith(
        f" over {DRIFT_STEPS} commits, {s.commits[DRIFT_FROM - 1][:7]}..{s.commits[last][:7]}"
    )
    assert all(_overprinted(found) == [] for found in labels.values())
    # the span between its first and last step is shaded in the change colour
    shade = browser.js("""
        const u = window.specsuiteCharts["chart-accept_rate"];
        const at = (i) => u.valToPos(i - 0.5, "x", true);
        const x = Math.round((at(arguments[0]) + at(arguments[1])) / 2);
        return Array.from(u.ctx.getImageData(x, u.bbox.top + u.bbox.height - 4, 1, 1).data.slice(0, 3));""",
        DRIFT_FROM, last)  # fmt: skip
    assert shade[0] > shade[2] + 10, shade  # orange over white: more red than blue
    _shot(browser, "drift-case.png")


def test_labels_of_nearby_change_points_never_overprint(browser: Browser, site: Site, tmp_path: Path) -> None:
    """Two change points of one metric on neighbouring runs that are not one span (the second does not
    start where the first ended), and one of another metric: their labels would overlap on one line; each
    goes on a row of its own (or is left to the table)."""
    from types import SimpleNamespace

    s = site.story
    base = dict(case=STEP_CASE, metric="accept_rate", device_class="cpu-x86-64-avx2", backend="cpu",
                mean_before=0.5, mean_after=0.45, change=-0.1, p_value=None)  # fmt: skip
    cps = [
        SimpleNamespace(**{**base, **kw})
        for kw in (
            {"before_commit": s.commits[2], "after_commit": s.commits[3], "after_run_id": s.run_ids[3]},
            {"before_commit": s.commits[1], "after_commit": s.commits[4], "after_run_id": s.run_ids[4]},
            {"before_commit": s.commits[3], "after_commit": s.commits[4], "after_run_id": s.run_ids[4],
             "metric": "accept_len"},
        )
    ]  # fmt: skip
    build_site(Sources(s.db, s.results, s.mirror), tmp_path / "site", changes=cps)
    assert browser.load(tmp_path / "site" / "cases" / GROUP / f"{STEP_CASE}.html") == []
    labels = _labels(browser)
    rate = labels["chart-accept_rate"]
    assert len(rate) == 2 and len(labels["chart-accept_len"]) == 1
    assert rate[1]["x"] < rate[0]["x"] + rate[0]["w"]  # side by side they would overprint
    assert all(_overprinted(found) == [] for found in labels.values())


# --- the morning page (issue 51): what changed since the last run, on the first screen at 1400 px --------


@pytest.fixture(scope="module")
def morning_site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    tmp = tmp_path_factory.mktemp("morning-browsed")
    s = morning_story(tmp)
    build_site(Sources(s.db, s.results, s.mirror), tmp / "site")
    return Site(s, tmp / "site")


def _viewport(browser: Browser, width: int = 1400, height: int = 1000) -> None:
    """A viewport of ``width`` x ``height`` (the window is that and the browser's own bars)."""
    inner = browser.js("return [window.innerWidth, window.innerHeight]")
    size = browser.driver.get_window_size()
    browser.driver.set_window_size(size["width"] + width - inner[0], size["height"] + height - inner[1])


def _first_screen(browser: Browser, name: str) -> None:
    """The first screen as a reader at 1400 x 1000 sees it (the viewport alone, not the whole page)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    browser.js("window.scrollTo(0, 0)")
    shot = SHOTS / name
    browser.driver.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    print(f"screenshot: {shot}")


def test_the_first_screen_says_what_changed_since_the_last_run(browser: Browser, morning_site: Site) -> None:
    assert browser.load(morning_site.out / "index.html") == []
    _viewport(browser)
    seen = browser.js("""
        const view = window.innerHeight, box = (el) => el.getBoundingClientRect();
        const first = document.querySelector("article.since");
        const visible = (sel) => [...first.querySelectorAll(sel)].map((e) => ({text: e.textContent,
            bottom: box(e).bottom}));
        return {view, width: window.innerWidth, bottom: box(first).bottom, top: box(first).top,
                reds: visible("dd.new-reds a"), fixed: visible("dd.fixed a"), known: visible("dd.known a"),
                configs: visible("dd.configs li"), suspects: visible("dd.suspects li"),
                verdict: first.querySelector("p.verdict").textContent,
                table: box(document.querySelector("table.cases")).top};""")  # fmt: skip
    assert (seen["width"], seen["view"]) == (1400, 1000)
    assert seen["bottom"] <= seen["view"], seen  # the whole of the newest setup's answer, no scrolling
    assert seen["table"] > seen["top"]  # the table comes under it
    assert [r["text"] for r in seen["reds"]] == [NEW_RED] and seen["verdict"].startswith("FAILED: 2 of 26")
    assert len(seen["fixed"]) == 1 and len(seen["known"]) == 2 and len(seen["configs"]) == 1
    assert len(seen["suspects"]) == 1
    _first_screen(browser, "morning-first-screen.png")


def test_the_table_is_readable_at_1400_px(browser: Browser, morning_site: Site) -> None:
    """Badges are one line (they read "pass / ed" in a 45 px column), a case's row is one line of text
    plus its sparklines (a note wrapped one syllable per line made rows 300 px tall), the page needs no
    horizontal scrolling, failures come first."""
    assert browser.load(morning_site.out / "index.html") == []
    found = browser.js("""
        const badges = [...document.querySelectorAll("table.cases .badge")];
        const rows = [...document.querySelectorAll("table.cases tbody tr[data-case]")];
        const notes = [...document.querySelectorAll("table.cases tr.note")];
        return {badges: badges.map((b) => [b.textContent, b.getBoundingClientRect().height,
                                           b.scrollWidth <= b.clientWidth + 1]),
                rows: rows.map((r) => [r.dataset.case, r.getBoundingClientRect().height]),
                notes: notes.map((r) => r.getBoundingClientRect().height),
                line: parseFloat(getComputedStyle(badges[0]).lineHeight),
                scroll: document.documentElement.scrollWidth,
                width: document.documentElement.clientWidth};""")  # fmt: skip
    assert found["scroll"] <= found["width"], found["scroll"]
    for text, height, fits in found["badges"]:
        assert height < 1.6 * found["line"] and fits, (text, height)  # one line, unbroken
    assert max(h for _, h in found["rows"]) < 70, found[
        "rows"
    ]  # two sparklines' height, not a column of text
    assert max(found["notes"]) < 50, found["notes"]  # a note: a line or two the width of the table
    assert [c for c, _ in found["rows"][:2]] == [STILL_RED, NEW_RED]
    _shot(browser, "morning-index.png")


def test_a_run_page_opens_with_its_first_lines_then_its_failures(
    browser: Browser, morning_site: Site
) -> None:
    s = morning_site.story
    assert browser.load(morning_site.out / "runs" / f"{s.run_ids[-1]}.html") == []
    _viewport(browser)
    found = browser.js("""
        const rows = [...document.querySelectorAll("#summary-cases tbody tr")];
        return {rows: rows.map((r) => [r.className, r.textContent.trim().slice(0, 80)]),
                first: [...document.querySelectorAll("ul.first-lines li")].map((li) => li.textContent),
                details: [...document.querySelectorAll("#cases details.case > summary")].map(
                    (s) => s.firstChild.textContent.trim()),
                view: window.innerHeight,
                failure: document.querySelector("#summary-cases tr.status-failed")
                  .getBoundingClientRect().bottom};""")  # fmt: skip
    assert found["first"][0].startswith("CONFIGURATION CHANGED since")
    parts = [text for cls, text in found["rows"] if cls.startswith("part")]
    assert parts[:3] == ["failures (2)", "warnings (1)", "passed (19)"]
    assert parts[3].startswith(f"{len(NOT_BUILT)} case(s) not in this build")  # counted in one row
    rows = [cls for cls, _ in found["rows"]]
    assert rows[1:3] == ["status-failed", "status-failed"] and len(rows) == 3 + 2 + 1 + 19 + 1  # parts, cases
    assert not set(NOT_BUILT) & set(found["details"]) and found["details"][0] == STILL_RED
    assert found["failure"] <= found["view"]  # its first failure on the first screen
    _first_screen(browser, "morning-run-first-screen.png")


def test_axes_fit_what_they_show(browser: Browser, morning_site: Site) -> None:
    """A rate runs 0 to 1 (the position-0 rate's axis ran 0 to 2); a constant accept length sits mid-chart on
    an axis around it, not on one from 0 to twice it."""
    assert browser.load(morning_site.out / "cases" / GROUP / "tiny-mtp-fixed.html") == []
    scales = browser.js("""
        const out = {};
        for (const [id, u] of Object.entries(window.specsuiteCharts))
          out[id] = [u.scales.y.min, u.scales.y.max];
        return out;""")
    assert scales["chart-pos0_rate"] == [0, 1] and scales["chart-accept_rate"] == [0, 1]
    lo, hi = scales["chart-accept_len"]
    assert 3.0 < lo < 3.875 < hi < 4.8, (lo, hi)  # the real record's 3.875, every run
    _shot(browser, "morning-case.png")
