"""The site marks configuration changes on a case page's charts and lists them; a run page names them first
and shows each case's memory and prefill (its page data carries them)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from specsuite.history import recording
from specsuite.report.site import Sources, build_site
from specsuite.results.config import BuildOptions, RunConfig
from specsuite.results.document import Binary, Device, Run
from specsuite.results.record import BaselineRef, CaseRecord, Memory, Prefill

CASE = "tiny-simple-random"
LINE = "default of --spec-draft-p-min: 0.75 -> 0.00 between b2b2b2b and c3c3c3c"


def _run(commit: str, day: int, p_min: str, rate: float, changed: list[str] | None = None) -> Run:
    config = RunConfig(
        defaults={"--spec-draft-p-min": p_min}, build=BuildOptions(source="binary", backend="cpu")
    )
    base = BaselineRef(commit="b2b2b2b", run_id="r2", config_changes=changed) if changed else None
    rec = CaseRecord(
        name=CASE,
        status="failed" if changed else "passed",
        reason="regressed" if changed else None,
        accept_rate=rate,
        accept_len=3.0,
        baseline=base,
        memory=Memory(peak_rss_mib=22.5, base_peak_rss_mib=20.8, growth_mib=0.02, growth_requests=3),
        prefill=Prefill(ttft_ms=0.66, base_ttft_ms=1.15, prompt_tps=2265.0, base_prompt_tps=1396.0),
    )
    return Run(
        run_id=f"r{day}",
        tier="synthetic",
        started=f"2026-12-0{day}T10:00:00+00:00",
        cases_sha256="c" * 64,
        binary=Binary(commit=commit, backend="cpu"),
        device=Device(name="cpu", device_class="cpu-x86-64"),
        config=config,
        cases={CASE: rec},
    )


def _data(html: str) -> dict:
    found = re.search(r'<script id="site-data" type="application/json">(.*?)</script>', html, re.S)
    assert found is not None
    return json.loads(found.group(1))


def test_configuration_changes_on_the_case_page_and_first_on_the_run_page(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    for r in (
        _run("a1a1a1a", 1, "0.75", 1.0),
        _run("b2b2b2b", 2, "0.75", 1.0),
        _run("c3c3c3c", 3, "0.00", 0.8571, [LINE]),
    ):
        recording.record_run(r, db)
    out = tmp_path / "site"
    build_site(Sources(db, None, None), out)
    [case_page] = (out / "cases").glob(f"*/{CASE}.html")
    html = case_page.read_text()
    assert (
        "<h2>Configuration changes</h2>" in html and "default of --spec-draft-p-min: 0.75 -&gt; 0.00" in html
    )
    [marker] = _data(html)["config"]
    assert marker["index"] == 2 and marker["label"] == "default of --spec-draft-p-min: 0.75 -> 0.00"
    run_page = (out / "runs" / "r3.html").read_text()
    attention = re.search(
        r'<ul class="attention first-lines">\s*<li class="loud"><strong>(.*?)</strong>', run_page, re.S
    )
    # the run's own line, as its summary.md says it: the history keeps the binaries' configurations, so a
    # page built from the history alone still names the run before and the cases that failed under it
    # (issue 51: run pages dropped the run's CONFIGURATION CHANGED line)
    assert attention is not None and attention.group(1) == (
        "CONFIGURATION CHANGED since b2b2b2b (run r2): default of --spec-draft-p-min: 0.75 -&gt; 0.00; "
        f"failed under it: {CASE} (regressed)"
    )
    [case] = _data(run_page)["cases"]
    assert case["record"]["memory"]["peak_rss_mib"] == 22.5 and case["record"]["prefill"]["ttft_ms"] == 0.66
