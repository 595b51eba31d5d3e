"""results.json: the document, its loader, the typed case record, the verdict and summary.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specsuite.errors import UserError
from specsuite.results import (
    CaseRecord,
    RunResults,
    load_run,
    new_run_id,
    summary_markdown,
    verdict,
    write_summary,
)
from specsuite.tier import append_step_summary

HEADER = {"binary": {"path": "/b/llama-server", "sha256": "0" * 64, "commit": "0c1e570", "backend": "cpu"}}


def _rec(name: str, status: str = "passed", reason: str | None = None, **kw: object) -> CaseRecord:
    base = dict(accept_rate=0.61234, accept_len=2.5, speedup=1.25, identical_fraction=1.0)
    floors = {
        "min_accept_rate": 0.5,
        "min_accept_len": 2.0,
        "min_identical_fraction": None,
        "min_speedup": None,
    }
    return CaseRecord(name=name, status=status, reason=reason, floors=floors, **{**base, **kw})  # type: ignore[arg-type]


def test_results_json_is_written_on_every_change(tmp_path) -> None:
    r = RunResults(tmp_path / "20261130T043000Z-smoke", tier="smoke", selector="smoke", header=HEADER)
    r.add_model("m.gguf", "a" * 64, 123)
    r.add_case(_rec("ngram-mod"))
    doc = json.loads(r.path.read_text())
    assert doc["schema"] == 2 and doc["run_id"] == "20261130T043000Z-smoke" and doc["tier"] == "smoke"
    assert doc["cases"]["ngram-mod"]["status"] == "passed"
    assert doc["models"] == {"m.gguf": {"sha256": "a" * 64, "size": 123}}
    assert doc["binary"]["commit"] == "0c1e570" and doc["wall_s"] >= 0
    assert r.logs.is_dir() and r.rel(r.logs / "x.log") == "logs/x.log"
    assert not list(r.dir.glob(".*.tmp"))
    assert [c.name for c in r.records()] == ["ngram-mod"]


def test_unwritable_results_folder_is_one_clear_error(tmp_path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match=r"cannot create the results folder .*SPEC_RESULTS_DIR"):
        RunResults(tmp_path / "file" / "run", tier="smoke", selector="smoke", header={})


def test_summary_table_and_step_summary(tmp_path, monkeypatch) -> None:
    r = RunResults(tmp_path / "run", tier="compact", selector="compact", header=HEADER)
    r.add_case(_rec("mtp"))
    r.add_case(_rec("dspark", "skipped", "binary_no_dspark", accept_rate=None, accept_len=None, speedup=None,
                    identical_fraction=None))  # fmt: skip
    md = summary_markdown(json.loads(r.path.read_text()))
    assert md.splitlines()[0].endswith("PASSED: 1 passed, 1 skipped")
    assert md.splitlines()[2] == "- **SKIPPED 1: dspark (binary_no_dspark)**"
    assert "| mtp | passed |  | 0.6123 (≥ 0.5000) | 2.5000 (≥ 2.0000) | 1.250 | 1.00 |" in md
    assert "| dspark | skipped | binary_no_dspark | – | – | – | – |" in md
    step = tmp_path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    out = write_summary(r.dir)
    assert out is not None and out.read_text() == md and not step.exists()  # only the tier command appends
    append_step_summary(out)
    assert step.read_text() == md + "\n"
    assert write_summary(tmp_path / "empty") is None


def _doc(*recs: CaseRecord, **extra: object) -> dict:
    return {"cases": {r.name: r.to_dict() for r in recs}, **extra}


def test_verdict_is_never_green_on_a_failure_or_when_nothing_ran() -> None:
    assert verdict(_doc(_rec("a"), _rec("b"))).green
    bad = verdict(_doc(_rec("a"), _rec("b", "failed", "regressed")))
    assert not bad.green and bad.headline == "FAILED: 1 of 2 case(s): b (regressed)"
    assert not verdict(_doc(_rec("a", "interrupted", "interrupted"))).green
    nothing = verdict(_doc(_rec("a", "skipped", "binary_no_mtp")))
    assert not nothing.green and "no selected case ran" in nothing.headline
    assert not verdict(_doc()).green


def test_green_run_says_what_weakens_it_first() -> None:
    v = verdict(
        _doc(
            _rec(
                "a",
                warnings=[
                    "the binary exports no llamacpp:spec_decode_num_accepted_tokens_per_pos_total counters"
                ],
            ),
            _rec("b", uncalibrated=True),
            _rec("c", "skipped", "binary_no_dspark"),
            options={"strict": False, "allow_cpu": True},
            tier="compact",
        )
    )
    assert v.green
    text = "\n".join(v.attention)
    for word in ("SKIPPED 1: c", "STRICT OFF", "UNCALIBRATED (report-only, floors not enforced): b",
                 "MISSING COUNTERS", "GPU TIER ON A CPU BUILD"):  # fmt: skip
        assert word in text


def test_load_run_refuses_junk_with_one_line(tmp_path: Path) -> None:
    for name, content in [("bad.json", b"{not json"), ("latin1.json", b"\xff\xfe"), ("list.json", b"[1, 2]"),
                          ("cases.json", b'{"cases": {"a": 3}}')]:  # fmt: skip
        (tmp_path / name).write_bytes(content)
        with pytest.raises(UserError, match=name):
            load_run(tmp_path / name)
    with pytest.raises(UserError, match=r"no results\.json there"):
        load_run(tmp_path / "missing")


def test_schema1_records_are_read() -> None:
    doc = load_run(Path(__file__).parent / "data" / "results" / "smoke-real-1")
    rec = CaseRecord.from_dict("ngram-mod", doc["cases"]["ngram-mod"])
    assert rec.accept_rate == 1.0 and rec.pos0_rate == rec.per_position_rate[0]


def test_run_id_is_timestamp_and_selector() -> None:
    rid = new_run_id("mtp,eagle3")
    assert rid.endswith("-mtp_eagle3") and rid[8] == "T" and rid[15] == "Z"
