"""Whole runs whose speed moved, and what their first line says: the prefill gated (its floor and the relative
gate over the rounds) and a speed regression's moved metric named, before and after, with its rounds.

Each run is the real chain ``specsuite run-tier CASE`` -> pytest -> a fake llama-server that really serves
HTTP (tests/fakellama.py: a real build cannot be made slower on purpose), whose prompt and decode timings
are scripted; SPEC_HISTORY is a file in the test's folder (tests/tierrun.py's rule).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fakellama import fake_llama

from specsuite.common import paths

SIMPLE = "tiny-simple-fixed"  # every draft accepted (12 of 12 a request): its floors pass whatever the speed
LONG = "tiny-mtp-long-prompt"  # the synthetic tier's prefill case: min_prefill_ratio 0.4, repeat 8, pinned
ALL_ACCEPTED = {"drafted": 12, "accepted": 12, "drafts": 4, "per_pos": [4, 4, 4]}
PROMPT = {"spec_prompt_ms_per_token": 0.05, "base_prompt_ms_per_token": 0.05}  # a prompt as fast either way
DROPPED = ("SPEC_METHODS", "SPEC_STRICT", "SPEC_REPEAT", "SPEC_ALLOW_CPU", "SPEC_NO_HISTORY", "SPEC_RTOL",
           "SPEC_BLOCK_RTOL", "SPEC_HISTORY_TIMEOUT_S", "GITHUB_STEP_SUMMARY")  # fmt: skip


@dataclass
class Run:
    code: int
    output: str
    doc: dict[str, Any]
    summary: str

    def case(self, name: str) -> dict[str, Any]:
        return self.doc["cases"][name]

    @property
    def headline(self) -> str:
        return self.summary.splitlines()[0]


def run_tier(root: Path, models: Path, case: str, commit: str, script: dict[str, Any], *args: str) -> Run:
    """One run of ``case`` on the fake at ``commit``, into ``root/<commit>``; the history ``root/h.sqlite``
    (the runs of one test judge each other)."""
    exe = fake_llama(root / f"bin-{commit}", version=f"version: 9999 (build 1, commit {commit})", **script)
    results = root / commit
    env = {k: v for k, v in os.environ.items() if k not in DROPPED}
    env.update(SPEC_MODEL_DIR=str(models), SPEC_CACHE_DIR=str(root / "cache"),
               SPEC_HISTORY=str(root / "h.sqlite"), SPEC_RESULTS_DIR=str(results),
               LLAMA_SERVER_BIN_PATH=str(exe))  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "specsuite", "run-tier", case, *args], cwd=paths.REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    doc = json.loads((results / "results.json").read_text())
    return Run(proc.returncode, proc.stdout + proc.stderr, doc, (results / "summary.md").read_text())


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from specsuite.models.fetch import FetchOptions, fetch_models

    folder = tmp_path_factory.mktemp("models")
    fetch_models(FetchOptions(methods=[SIMPLE, LONG], model_dir=folder, tty=False))
    return folder


def test_a_prefill_twice_as_dear_is_regressed_and_its_first_line_says_prefill(
    models: Path, tmp_path: Path
) -> None:
    """The decode as it was, the speculative server's prompt processing twice as slow (0.05 -> 0.1 ms a
    token, the plain server's 0.05): the prefill ratio halves round by round, the TTFT doubles."""
    a = run_tier(tmp_path, models, SIMPLE, "a1a1a1a", {**ALL_ACCEPTED, **PROMPT}, "--repeat", "4")
    assert a.code == 0, a.output
    assert a.case(SIMPLE)["prefill"]["ratio_rounds"] == [1.0] * 4
    dear = {**ALL_ACCEPTED, **PROMPT, "spec_prompt_ms_per_token": 0.1}
    b = run_tier(tmp_path, models, SIMPLE, "b2b2b2b", dear, "--repeat", "4")
    assert b.code == 1, b.output
    rec = b.case(SIMPLE)
    assert (rec["status"], rec["reason"]) == ("failed", "regressed")
    assert [m.split()[0] for m in rec["baseline"]["regressions"]] == ["prefill_ratio", "ttft_ratio"]
    assert rec["baseline"]["moved"] == [
        "prefill 1.00 -> 0.50x of plain, -50.0 %, 4 rounds vs 4",
        "TTFT 1.00 -> 2.00x of plain, +100.0 %, 4 rounds vs 4",
    ]
    assert rec["baseline"]["counters"] == "identical"  # the same tokens, only a dearer prefill
    assert b.headline.endswith(
        f"FAILED: 1 of 1 case(s): {SIMPLE} (regressed: prefill 1.00 -> 0.50x of plain, -50.0 %, "
        "4 rounds vs 4; and 1 more)"
    )


def test_a_prefill_below_its_floor_fails_and_its_first_line_says_by_how_much(
    models: Path, tmp_path: Path
) -> None:
    """The prefill case (min_prefill_ratio 0.4) with the speculative server's prompt four times as slow as
    plain's: 0.25x, a floor that holds without any history."""
    slow = {**ALL_ACCEPTED, "spec_prompt_ms_per_token": 0.2, "base_prompt_ms_per_token": 0.05}
    run = run_tier(tmp_path, models, LONG, "c3c3c3c", slow)
    assert run.code == 1, run.output
    rec = run.case(LONG)
    assert (rec["status"], rec["reason"], rec["prefill"]["ratio"]) == ("failed", "speed", 0.25)
    assert rec["speed"]["repeat"] == 8  # the case's own rounds
    assert "- [speed] prefill 0.25x of plain < floor 0.40 (median of 8 round(s): " in rec["message"]
    assert run.headline.endswith(
        f"FAILED: 1 of 1 case(s): {LONG} (speed: prefill 0.25x of plain < floor 0.40)"
    )
    fine = run_tier(tmp_path, models, LONG, "d4d4d4d", {**slow, "spec_prompt_ms_per_token": 0.1})  # 0.5x
    assert fine.code == 0 and fine.case(LONG)["prefill"]["ratio"] == 0.5, fine.output


def test_a_slower_speculative_path_names_the_block_cost_first(models: Path, tmp_path: Path) -> None:
    """Issue 49's third finding: the counters as they were, each verification block twice as dear (10 -> 20
    ms a token on the speculative server, plain's 40): the speedup, the decode speed and the block cost all
    regress, and the first line names the block cost, its milliseconds before and after, and the rounds."""
    timing = {**ALL_ACCEPTED, "base_ms_per_token": 40.0}
    a = run_tier(tmp_path, models, SIMPLE, "e5e5e5e", timing, "--repeat", "4")
    assert a.code == 0, a.output
    b = run_tier(tmp_path, models, SIMPLE, "f6f6f6f", {**timing, "spec_ms_per_token": 20.0}, "--repeat", "4")
    assert b.code == 1, b.output
    rec = b.case(SIMPLE)
    assert [m.split()[0] for m in rec["baseline"]["regressions"]] == ["speedup", "decode_tps", "block_ratio"]
    moved = rec["baseline"]["moved"]
    assert [m.split(" ")[0] for m in moved] == ["block", "decode", "speedup"]  # the most specific first
    ms = (a.case(SIMPLE)["block_ms"], rec["block_ms"])
    assert ms[1] == pytest.approx(2 * ms[0])
    said = (
        f"block cost {ms[0]:.2f} -> {ms[1]:.2f} ms per block, +100.0 % in plain decode steps, 4 rounds vs 4"
    )
    assert moved[0] == said
    assert re.search(
        rf"FAILED: 1 of 1 case\(s\): {SIMPLE} \(regressed: {re.escape(said)}; and 2 more\)$", b.headline
    )
