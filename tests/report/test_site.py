"""The site built from a real history: its pages and links, the statuses on the index, change-point
markers, results folders copied safely, a hostile results.json escaped, the folder replaced whole."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sitedata import (
    FLOOR_CASE,
    HOSTILE,
    INACTIVE_CASE,
    N_COMMITS,
    STEP_AT,
    STEP_CASE,
    SWEEP,
    SWEEP_MEMBERS,
    SWEEP_NPS,
    Story,
    at,
    hostile_run,
    real,
    record,
    speedups,
    story,
)
from sitepage import Page, page

from specsuite.cli import main as cli
from specsuite.common.errors import UserError
from specsuite.report import site
from specsuite.report.site import MARKER, Sources, build_site

CLASS = "cpu-x86-64-avx2"
GROUP = f"{CLASS}--cpu"


@dataclass
class Built:
    story: Story
    out: Path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    tmp = tmp_path_factory.mktemp("site")
    s = story(tmp)
    out = tmp / "site"
    build_site(Sources(s.db, s.results, s.mirror), out)
    return Built(s, out)


def test_pages_for_the_index_every_case_and_every_run(built: Built) -> None:
    out = built.out
    assert (out / "index.html").is_file() and (out / MARKER).is_file()
    cases = sorted(p.stem for p in (out / "cases" / GROUP).glob("*.html"))
    assert cases == sorted([*real(2)["cases"], *SWEEP_MEMBERS[1:]])
    assert sorted(p.stem for p in (out / "runs").glob("*.html")) == sorted(built.story.run_ids)
    assert {p.name for p in (out / "assets" / "vendor").iterdir()} == {
        "uPlot.iife.min.js", "uPlot.min.css", "uPlot.LICENSE"
    }  # fmt: skip


def _row(index: Page, case: str) -> dict[str, str]:
    (row,) = index.find("tr", **{"data-case": case})
    return row


def test_the_index_marks_the_failing_and_the_drifted_case(built: Built) -> None:
    index = page(built.out, "index.html")
    assert _row(index, INACTIVE_CASE)["class"] == "status-failed"
    assert _row(index, STEP_CASE)["class"] == "status-drifted"
    assert _row(index, FLOOR_CASE)["class"] == "status-passed"  # it failed before; the latest run passed
    # its reason on its badge, its message on the row under it (issue 51: no longer a column of syllables)
    (note,) = index.find("tr", **{"data-note-for": INACTIVE_CASE})
    assert note["class"] == "note status-failed" and "failed: spec_inactive" in index.text
    html = (built.out / "index.html").read_text()
    row = re.search(rf'<tr [^>]*data-note-for="{INACTIVE_CASE}">(.*?)</tr>', html)
    assert row and Page(row[1]).text == "the server drafted no token: speculative decoding never ran"
    assert "9 runs over 9 commits, in ancestry order" in index.text
    # a sparkline of each case's accept rate and speedup (where one of its runs measured it); the sweep's
    # np-2 and np-4 members are copies of its np-1 member's record
    sparks = index.find("div", **{"class": "spark-row"})
    assert len(index.find("svg", **{"class": "spark"})) == len(sparks) > len(real(2)["cases"])
    for metric in ("accept_rate", "speedup"):
        measured = [
            c for c in real(2)["cases"] if any(real(i)["cases"][c][metric] is not None for i in range(3))
        ]
        members = len(SWEEP_MEMBERS) - 1 if SWEEP in measured else 0
        assert sum(d["data-metric"] == metric for d in sparks) == len(measured) + members > 20, metric


def test_a_case_page_holds_its_series_in_commit_order(built: Built) -> None:
    s = built.story
    p = page(built.out, f"cases/{GROUP}/{STEP_CASE}.html")
    d = p.data
    assert d["commit"] == s.commits and d["run"] == s.run_ids
    rates = d["values"]["accept_rate"]
    before, after = (
        real(2)["cases"][STEP_CASE]["accept_rate"],
        round(real(2)["cases"][STEP_CASE]["accept_rate"] * 0.9, 4),
    )
    assert rates[STEP_AT - 1] == before and rates[STEP_AT] == after
    assert (
        d["kind"][-1] == "drifted"
        and d["floors"]["accept_rate"][-1] == real(2)["cases"][STEP_CASE]["floors"]["min_accept_rate"]
    )
    # the A-B-B-A rounds of the real run with repeats: the band around the median
    assert d["speed_lo"][-1] <= d["values"]["speedup"][-1] <= d["speed_hi"][-1]
    pp = d["per_position"]
    assert (
        pp["latest"]["run"] == s.run_ids[-1]
        and pp["latest"]["rates"] == real(2)["cases"][STEP_CASE]["per_position_rate"]
    )
    assert pp["baseline"]["commit"] == s.commits[-2]


def test_a_sweep_members_page_charts_its_speedup_by_np_beside_its_baseline(built: Built) -> None:
    s = built.story
    for name in SWEEP_MEMBERS:
        p = page(built.out, f"cases/{GROUP}/{name}.html")
        assert p.find("figure", id="chart-by-np"), name
        by_np = p.data["by_np"]
        assert by_np["sweep"] == SWEEP
        latest, base = by_np["latest"], by_np["baseline"]
        assert (latest["run"], latest["nps"]) == (s.run_ids[-1], list(SWEEP_NPS))
        assert latest["speedups"] == [speedups(N_COMMITS - 1)[n] for n in SWEEP_NPS]  # np 2: 0.9
        assert base["commit"] == s.commits[-2]  # no gate baseline recorded: the nearest earlier commit
        assert base["speedups"] == [speedups(N_COMMITS - 2)[n] for n in SWEEP_NPS]
    other = page(built.out, f"cases/{GROUP}/{STEP_CASE}.html")
    assert not other.find("figure", id="chart-by-np") and other.data["by_np"] is None


def test_a_run_page_has_its_summary_counters_commands_and_logs(built: Built) -> None:
    s = built.story
    last = s.run_ids[-1]
    p = page(built.out, f"runs/{last}.html")
    n = len(real(2)["cases"]) + len(SWEEP_MEMBERS) - 1  # 26 real cases and the sweep's np-2 and np-4
    assert f"FAILED: 2 of {n} case(s): {INACTIVE_CASE} (spec_inactive), {STEP_CASE} (drifted)" in p.text
    cases = {c["record"]["name"]: c for c in p.data["cases"]}
    rec = real(2)["cases"]["tiny-mtp-fixed"]
    mtp = cases["tiny-mtp-fixed"]
    # the record as results.json holds it (counters, command, samples); fields added since at their defaults
    # (a prompt's stream, for instance: None outside a concurrent case)
    shown = {k: mtp["record"][k] for k in rec}
    for p_shown, p_real in zip(shown["prompts"], rec["prompts"], strict=True):
        assert all(v is None for k, v in p_shown.items() if k not in p_real)
    shown["prompts"] = [
        {k: v for k, v in q.items() if k in r} for q, r in zip(shown["prompts"], rec["prompts"], strict=True)
    ]
    assert shown == rec
    assert mtp["kind"] == "passed" and cases[INACTIVE_CASE]["status"] == "failed: spec_inactive"
    assert mtp["log_href"] == f"{last}/logs/tiny-mtp-fixed.log.txt"  # published as text (issue 35)
    assert (built.out / "runs" / mtp["log_href"]).read_bytes() == (
        s.results / last / "logs" / "tiny-mtp-fixed.log"
    ).read_bytes()
    assert (built.out / "runs" / last / "results.json").is_file()
    assert mtp["case_href"] == f"../cases/{GROUP}/tiny-mtp-fixed.html"
    assert f"first bad commit {s.commits[STEP_AT]}" in p.text and "step 2" in p.text  # its bisect
    assert "Bisect" not in page(built.out, f"runs/{s.run_ids[-2]}.html").text
    first = page(built.out, f"runs/{s.run_ids[0]}.html")  # a real run: its own headline, its summary.md
    assert real(0)["verdict"] in first.text and first.find("a", href=f"{s.run_ids[0]}/summary.md")


def _links(root: Path) -> list[tuple[Path, str]]:
    found = []
    for html in root.rglob("*.html"):
        p = Page(html.read_text(encoding="utf-8"))
        found += [(html, a["href"]) for t, a in p.elements if t == "a" and "href" in a]
        found += [(html, a["src"]) for t, a in p.elements if t == "script" and "src" in a]
        found += [(html, a["href"]) for t, a in p.elements if t == "link"]
    return found


def test_every_static_link_resolves_inside_the_site(built: Built) -> None:
    links = _links(built.out)
    assert len(links) > 100
    for html, href in links:
        if href.startswith("#"):  # a place on the page itself (the first screen's link to a table)
            assert f'id="{href[1:]}"' in html.read_text(encoding="utf-8"), (
                f"{html.relative_to(built.out)}: {href}"
            )
            continue
        target = (html.parent / href.split("#")[0]).resolve()
        assert target.is_file(), f"{html.relative_to(built.out)}: {href}"
        assert target.is_relative_to(built.out.resolve())


def _cp(s: Story, **kw: Any) -> Any:
    from types import SimpleNamespace

    fields = dict(case=STEP_CASE, metric="accept_rate", device_class=CLASS, backend="cpu",
                  before_commit=s.commits[STEP_AT - 1], after_commit=s.commits[STEP_AT],
                  after_run_id=s.run_ids[STEP_AT], mean_before=0.4775, mean_after=0.4298, change=-0.1,
                  p_value=None)  # fmt: skip
    return SimpleNamespace(**{**fields, **kw})


def test_change_points_are_marked_at_their_commit(tmp_path: Path, built: Built) -> None:
    s = built.story
    out = tmp_path / "site"
    other = _cp(s, metric="speedup", after_run_id="not-a-run", change=0.2, p_value=0.004)  # found by commit
    build_site(Sources(s.db, s.results, s.mirror), out, changes=[_cp(s), other])
    p = page(out, f"cases/{GROUP}/{STEP_CASE}.html")
    rows = p.find("tr", **{"data-after": s.commits[STEP_AT]})
    assert [r["data-index"] for r in rows] == [str(STEP_AT)] * 2
    assert [(c["metric"], c["index"]) for c in p.data["changes"]] == [("accept_rate", 5), ("speedup", 5)]
    assert p.find("a", href=f"../../runs/{s.run_ids[STEP_AT]}.html")
    index = page(out, "index.html")
    assert f"at {s.commits[STEP_AT][:7]}" in index.text and index.find(
        "a", href=f"runs/{s.run_ids[STEP_AT]}.html"
    )
    elsewhere = page(out, f"cases/{GROUP}/tiny-mtp-fixed.html")
    assert elsewhere.data["changes"] == [] and "tiny-mtp-fixed" in elsewhere.text


def test_the_detector_finds_the_step_at_its_commit(tmp_path: Path, built: Built) -> None:
    s = built.story
    env = {"SPEC_CACHE_DIR": str(tmp_path)}
    (tmp_path / "llama.cpp").mkdir()
    os.symlink(s.mirror, tmp_path / "llama.cpp" / "git")
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        build_site(Sources(s.db, s.results, s.mirror), tmp_path / "site")
    p = page(tmp_path / "site", f"cases/{GROUP}/{STEP_CASE}.html")
    rate = [c for c in p.data["changes"] if c["metric"] == "accept_rate"]
    assert [(c["after_commit"], c["index"]) for c in rate] == [(s.commits[STEP_AT], STEP_AT)]


def test_a_hostile_results_json_lands_as_text(tmp_path: Path) -> None:
    db, results, out = tmp_path / "h.sqlite", tmp_path / "results", tmp_path / "site"
    hostile_run(db, results)
    build_site(Sources(db, results, None), out)
    files = [p for p in out.rglob("*") if p.is_file()]
    assert all(p.resolve().is_relative_to(out.resolve()) for p in files)
    for html in (p for p in files if p.suffix == ".html"):
        text = html.read_text(encoding="utf-8")
        assert "<script>window" not in text and "<img" not in text, html
        Page(text)  # its data parses
    run = page(out, "runs/hostile-run.html")
    (bad,) = [c for c in run.data["cases"] if c["record"]["name"] == HOSTILE]
    assert (
        bad["record"]["message"] == HOSTILE
        and HOSTILE in bad["record"]["command"]
        and bad["log_href"] is None
    )
    assert not (out / "runs" / "hostile-run" / "logs" / "passwd.log").exists()
    assert "not copied: logs/passwd.log: a symlink (not followed)" in run.text
    assert (out / "runs" / "hostile-run" / "logs" / f"{'x' * 10}.log.txt").is_file()


# --- issue 35: logs as text only; a run the site cannot render is left out, not the site --------------------

PLANTED = {
    "evil.html": "<script>window.pwned=1</script>",
    "evil.svg": '<svg xmlns="http://www.w3.org/2000/svg" onload="window.pwned=2"/>',
    "evil.js": "window.pwned=3",
    "page.htm": "<script>window.pwned=4</script>",
    "notes.LOG": "<script>window.pwned=5</script> as text",
    "tiny-mtp-fixed.log": "<script>window.pwned=6</script> a log line",
    "server.txt": "plain text",
    "server": "no suffix",
    "tiny-mtp-fixed.log.txt": "its name is taken by tiny-mtp-fixed.log's",
}


def test_only_text_logs_are_published_and_as_txt(tmp_path: Path) -> None:
    db, results, out = tmp_path / "h.sqlite", tmp_path / "results", tmp_path / "site"
    folder = record(at(real(0), "a" * 40, 0, run_id="planted"), db, results)
    (folder / "logs").mkdir()
    for name, text in PLANTED.items():
        (folder / "logs" / name).write_text(text)
    os.mkfifo(folder / "logs" / "fifo.log")  # opened by the copy, it would wait for a writer for ever
    build_site(Sources(db, results, None), out)
    published = sorted(p.name for p in (out / "runs" / "planted" / "logs").iterdir())
    assert published == ["notes.log.txt", "server.txt", "tiny-mtp-fixed.log.txt"]
    assert not [p for p in out.rglob("*") if p.suffix in (".svg", ".js", ".htm") and "assets" not in p.parts]
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.html") if "evil" in p.name) == []
    run = page(out, "runs/planted.html")
    for name in ("evil.html", "evil.svg", "evil.js", "page.htm", "server"):
        assert f"not copied: logs/{name}: not a text log (only .log and .txt are published)" in run.text
    assert "logs/tiny-mtp-fixed.log.txt: its published name is another log's" in run.text
    assert "fifo.log: not a regular file" in run.text
    assert (out / "runs" / "planted" / "logs" / "tiny-mtp-fixed.log.txt").read_text() == PLANTED[
        "tiny-mtp-fixed.log"
    ]  # the bytes as they were: a text file, served as text/plain


def test_an_html_log_of_an_older_site_is_not_carried_over(tmp_path: Path, monkeypatch) -> None:
    """A site built before issue 35 published logs/evil.html; the next build renders the page again."""
    from specsuite.report import runpages

    db, results, out = tmp_path / "h.sqlite", tmp_path / "results", tmp_path / "site"
    folder = record(at(real(0), "a" * 40, 0, run_id="planted"), db, results)
    (folder / "logs").mkdir()
    (folder / "logs" / "evil.html").write_text(PLANTED["evil.html"])
    monkeypatch.setattr(runpages, "PUBLISHING", "1")
    build_site(Sources(db, results, None), out)
    (out / "runs" / "planted" / "logs").mkdir(parents=True, exist_ok=True)
    (out / "runs" / "planted" / "logs" / "evil.html").write_text(PLANTED["evil.html"])  # as the old rules did
    monkeypatch.undo()
    build_site(Sources(db, results, None), out)
    assert not (out / "runs" / "planted" / "logs" / "evil.html").exists()


def test_a_run_the_site_cannot_render_is_left_out_with_a_warning(tmp_path: Path, capsys) -> None:
    """A run id of 300 characters (a history from before issue 35 checked it) stopped the site with an
    UnboundLocalError in folders.folder_stat; now the run's page is made, or the run is left out alone."""
    import sqlite3

    db, results, out = tmp_path / "h.sqlite", tmp_path / "results", tmp_path / "site"
    record(at(real(0), "a" * 40, 0, run_id="good"), db, results)
    record(at(real(0), "b" * 40, 1, run_id="long"), db, results)
    with sqlite3.connect(db) as conn:  # import refuses such an id today: written as an old history holds it
        conn.execute("UPDATE runs SET run_id = ? WHERE run_id = 'long'", ("L" * 300,))
    assert cli(["report", "--db", str(db), "--results", str(results), "--out", str(out)]) == 0
    assert (out / "runs" / "good.html").is_file() and len(list((out / "runs").glob("L*.html"))) == 1
    record(at(real(0), "c" * 40, 2, run_id="broken"), db, results)
    capsys.readouterr()
    real_render = site.runpages.render_run

    def fails_for_broken(w: Any, group: Any, run: Any, *rest: Any) -> None:
        if run.run_id == "broken":  # the one fault injected: a full disk cannot be made for one file here
            raise OSError("No space left on device")
        real_render(w, group, run, *rest)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(site.runpages, "render_run", fails_for_broken)
        assert cli(["report", "--db", str(db), "--results", str(results), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: report: run 'broken' left out of the site: No space left on device" in err
    assert (out / "runs" / "good.html").is_file() and not (out / "runs" / "broken.html").exists()


def test_the_out_folder_is_replaced_whole_and_only_a_site(tmp_path: Path) -> None:
    db, results = tmp_path / "h.sqlite", tmp_path / "results"
    record(at(real(0), "a" * 40, 0), db, results)
    src, out = Sources(db, results, None), tmp_path / "site"
    build_site(src, out)
    (out / "stale.html").write_text("old")
    build_site(src, out)
    assert not (out / "stale.html").exists() and (out / "index.html").is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".site")] == []  # no staging left
    foreign = tmp_path / "home"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="a folder that holds something else"):
        build_site(src, foreign)
    assert (foreign / "notes.txt").read_text() == "mine"
    os.symlink(out, tmp_path / "link")
    with pytest.raises(UserError, match="a symlink"):
        build_site(src, tmp_path / "link")


def test_a_failed_build_leaves_the_old_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db, results = tmp_path / "h.sqlite", tmp_path / "results"
    record(at(real(0), "a" * 40, 0), db, results)
    src, out = Sources(db, results, None), tmp_path / "site"
    build_site(src, out)
    before = (out / "index.html").read_text()

    def broken(*a: Any, **k: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(site, "_index_group", broken)
    with pytest.raises(OSError, match="disk full"):
        build_site(src, out)
    assert (out / "index.html").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.sqlite", "results", "site"]


def test_page_weight_for_a_thousand_runs(tmp_path: Path) -> None:
    """A case page with 1 000 runs, with everything it loads, stays under 2 MB."""
    from specsuite.history import recording, schema
    from specsuite.results.document import decode_run

    doc = real(2)
    doc["cases"] = {k: doc["cases"][k] for k in ("tiny-mtp-random", "tiny-simple-fixed")}
    path = tmp_path / "h.sqlite"
    import contextlib

    with contextlib.closing(schema.connect(path)) as conn, schema.transaction(conn):
        for n in range(1000):
            recording.insert_run(conn, decode_run(at(doc, f"{n:040x}", n), "bench"))
    out = tmp_path / "site"
    build_site(Sources(path, None, None), out)
    html = out / "cases" / GROUP / "tiny-mtp-random.html"
    loaded = [
        html,
        *(
            html.parent / a["src"]
            for a in page(out, f"cases/{GROUP}/tiny-mtp-random.html").find("script")
            if "src" in a
        ),
    ]
    loaded += [html.parent / a["href"] for a in page(out, f"cases/{GROUP}/tiny-mtp-random.html").find("link")]
    weight = sum(p.resolve().stat().st_size for p in loaded)
    assert len(page(out, f"cases/{GROUP}/tiny-mtp-random.html").data["run"]) == 1000
    assert weight < 2_000_000, weight
    assert (out / "index.html").stat().st_size < 2_000_000


def test_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, results = tmp_path / "h.sqlite", tmp_path / "results"
    monkeypatch.setenv("SPEC_HISTORY", str(db))  # the default history, none recorded yet
    assert cli(["report", "--out", str(tmp_path / "empty")]) == 0
    assert "no runs recorded yet" in capsys.readouterr().out
    assert "No runs recorded yet" in page(tmp_path / "empty", "index.html").text
    record(at(real(0), "a" * 40, 0), db, results)
    assert cli(["report", "--db", str(db), "--results", str(results), "--out", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    assert re.search(
        r"report: 1 runs on 1 device class\(es\), 26 case pages, 1 results folders found -> .*index\.html",
        out,
    )
    assert cli(["report", "--db", str(db), "--device", "h200", "--out", str(tmp_path / "s")]) == 2
    assert "error: --device 'h200': not in the history" in capsys.readouterr().err


def test_a_new_run_renders_its_page_and_the_others_are_carried_over(tmp_path: Path) -> None:
    db, results, out = tmp_path / "h.sqlite", tmp_path / "results", tmp_path / "site"
    for n in range(3):
        record(at(real(n), f"{n:040x}", n), db, results)
    src = Sources(db, results, None)
    assert build_site(src, out).rendered == 3
    ids = [p.name for p in (out / "runs").glob("*.html")]
    inode = {name: (out / "runs" / name).stat().st_ino for name in ids}
    again = build_site(src, out)
    assert again.rendered == 0 and again.run_folders == 3
    assert {name: (out / "runs" / name).stat().st_ino for name in ids} == inode  # the same files, linked
    doc = at(real(2), "f" * 40, 3)
    record(doc, db, results)
    assert build_site(src, out).rendered == 1 and (out / "runs" / f"{doc['run_id']}.html").is_file()
    (results / at(real(0), "0" * 40, 0)["run_id"] / "summary.md").write_text("### a summary written later\n")
    assert build_site(src, out).rendered == 1  # its results folder changed


def test_last_keeps_the_newest_runs_of_each_device(tmp_path: Path) -> None:
    db, results, out = tmp_path / "h.sqlite", tmp_path / "results", tmp_path / "site"
    docs = [at(real(0), f"{n:040x}", n) for n in range(3)]
    for doc in docs:
        record(doc, db, results)
    build_site(Sources(db, results, None, last=2), out)
    assert sorted(p.stem for p in (out / "runs").glob("*.html")) == [d["run_id"] for d in docs[1:]]
    assert "the last 2 of 3 runs" in page(out, "index.html").text
    assert page(out, f"cases/{GROUP}/tiny-mtp-fixed.html").data["run"] == [d["run_id"] for d in docs[1:]]
    assert cli(["report", "--db", str(db), "--last", "-1", "--out", str(out)]) == 2
