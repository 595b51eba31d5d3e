"""bench.json for github-action-benchmark's customBiggerIsBetter, from a real run and hand-made records."""

from __future__ import annotations

import json
import math
from pathlib import Path

from testdata import DATA_ROOT

from specsuite.results.benchjson import entries, write_bench_json
from specsuite.results.document import decode_run, load_run

REAL = DATA_ROOT / "results" / "smoke-real-1" / "results.json"


def _strict(text: str) -> object:
    """Parse as the action's JSON.parse would: NaN and Infinity are not JSON."""

    def refuse(token: str) -> None:
        raise ValueError(f"non-JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def test_one_entry_per_measured_case_and_metric_from_a_real_run() -> None:
    doc = json.loads(REAL.read_text())
    got = {e["name"]: e for e in entries(decode_run(doc, "test"))}
    measured = [n for n, c in doc["cases"].items() if c["status"] == "passed"]
    assert "synth-zero" not in measured  # run 1's synth-zero failed "diverged": no numbers to chart
    assert set(got) == {f"{n} {m}" for n in measured for m in ("accept_rate", "accept_len", "speedup")}
    for name in measured:
        rec = doc["cases"][name]
        for metric in ("accept_rate", "accept_len", "speedup"):
            entry = got[f"{name} {metric}"]
            assert entry["value"] == rec[metric]
            assert isinstance(entry["unit"], str) and entry["unit"]
            assert entry["extra"] == "llama.cpp 0c1e570 on cpu; passed"


def test_the_entry_shape_is_the_actions_benchmark_result() -> None:
    # github-action-benchmark's BenchmarkResult: name, value, unit; optional range and extra strings
    for entry in entries(load_run(REAL)):
        assert set(entry) <= {"name", "value", "unit", "range", "extra"}
        assert isinstance(entry["name"], str) and isinstance(entry["value"], float)
        assert all(isinstance(entry[k], str) for k in ("unit", "range", "extra") if k in entry)


def test_nulls_and_nans_are_left_out_and_failed_floors_kept() -> None:
    doc = {
        "binary": {"commit": "abcdef0123", "backend": "cuda"},
        "device": {"name": "NVIDIA H200"},
        "cases": {
            "mtp": {"status": "passed", "accept_rate": 0.8, "accept_len": math.nan, "speedup": None},
            "dflash": {"status": "failed", "reason": "floor", "accept_rate": 0.5, "accept_len": 2.0},
            "eagle3": {"status": "skipped", "reason": "binary_no_eagle3", "accept_rate": None},
            "dspark": {"status": "error", "reason": "crashed", "accept_rate": 0.9},
        },
    }
    got = entries(decode_run(doc, "test"))
    assert [e["name"] for e in got] == ["mtp accept_rate", "dflash accept_rate", "dflash accept_len"]
    assert got[1]["extra"] == "llama.cpp abcdef0 on NVIDIA H200; failed"


def test_repeated_speed_gives_the_median_and_its_range() -> None:
    rec = {
        "status": "passed",
        "accept_rate": 0.7,
        "speedup": 1.9,
        "speed": {"repeat": 3, "speedups": [1.8, 2.1, 2.0], "speedup_median": 2.0},
    }
    [*_, speed] = entries(decode_run({"cases": {"mtp": rec}}, "test"))
    assert speed == {
        "name": "mtp speedup",
        "unit": "x",
        "value": 2.0,
        "range": "1.800 to 2.100 over 3 repeats",
        "extra": "llama.cpp ? on ?; passed",
    }


def test_write_is_atomic_and_strict_json(tmp_path: Path) -> None:
    out = tmp_path / "run" / "bench.json"
    doc = json.loads(REAL.read_text())
    doc["cases"]["ngram-mod"]["speedup"] = math.nan
    assert write_bench_json(decode_run(doc, "test"), out) == out
    first = _strict(out.read_text())
    assert isinstance(first, list) and "ngram-mod speedup" not in {e["name"] for e in first}
    write_bench_json(decode_run({"cases": {}}, "test"), out)  # replaces the previous file whole
    assert _strict(out.read_text()) == []
    assert [p.name for p in out.parent.iterdir()] == ["bench.json"]  # no temp file left behind
