"""results.json document, summary.md and the GitHub step summary."""

from __future__ import annotations

import json

from specsuite.results import RunResults, append_step_summary, new_run_id, summary_markdown, write_summary


def _case(status="passed", reason=None):
    return {
        "status": status,
        "reason": reason,
        "accept_rate": 0.61234,
        "accept_len": 2.5,
        "speedup": 1.25,
        "identical_fraction": 1.0,
        "floors": {"min_accept_rate": 0.5, "min_accept_len": 2.0, "min_identical_fraction": None},
    }


def test_results_json_is_written_on_every_change(tmp_path) -> None:
    r = RunResults(tmp_path / "20261130T043000Z-smoke", tier="smoke", selector="smoke")
    r.set_binary(
        {
            "path": "/b/llama-server",
            "sha256": "0" * 64,
            "commit": "0c1e570",
            "backend": "cpu",
            "version_text": "v",
        }
    )
    r.add_model("m.gguf", "a" * 64, 123)
    r.add_case("ngram-mod", _case())
    doc = json.loads(r.path.read_text())
    assert doc["schema"] == 1 and doc["run_id"] == "20261130T043000Z-smoke" and doc["tier"] == "smoke"
    assert doc["cases"]["ngram-mod"]["status"] == "passed"
    assert doc["models"] == {"m.gguf": {"sha256": "a" * 64, "size": 123}}
    assert doc["binary"]["commit"] == "0c1e570" and doc["wall_s"] >= 0
    assert r.logs.is_dir() and r.rel(r.logs / "x.log") == "logs/x.log"
    assert not list(r.dir.glob(".*.tmp"))


def test_summary_table_and_step_summary(tmp_path, monkeypatch) -> None:
    r = RunResults(tmp_path / "run", tier="compact", selector="compact")
    r.add_case("mtp", _case())
    r.add_case(
        "dspark",
        {
            **_case("skipped", "binary_no_dspark"),
            "accept_rate": None,
            "accept_len": None,
            "speedup": None,
            "identical_fraction": None,
        },
    )
    md = summary_markdown(json.loads(r.path.read_text()))
    assert "| mtp | passed |  | 0.6123 (≥ 0.5000) | 2.5000 (≥ 2.0000) | 1.250 | 1.00 |" in md
    assert "| dspark | skipped | binary_no_dspark | – | – | – | – |" in md
    step = tmp_path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    out = write_summary(r.dir)
    assert out.read_text() == md and not step.exists()  # only the tier command appends
    append_step_summary(out)
    assert step.read_text() == md + "\n"
    assert write_summary(tmp_path / "empty") is None


def test_run_id_is_timestamp_and_selector() -> None:
    rid = new_run_id("mtp,eagle3")
    assert rid.endswith("-mtp_eagle3") and rid[8] == "T" and rid[15] == "Z"
