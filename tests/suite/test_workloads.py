"""Issue 34's workloads end to end: a dataset-backed prompt set fetched from the fake Hub (a dataset
repository, like SPEED-Bench's) and run category by category on the real CPU build; the nightly tier's
SPEED-Bench prompt set taken from the fake Hub at the lock's own repository, revision and path."""

from __future__ import annotations

import json

import pytest

from specsuite.cases.dataset import with_prompts
from specsuite.cases.schema import load_cases, parse_case_file, select_cases
from specsuite.common import paths
from specsuite.measure import runner
from specsuite.models.fetch import FetchOptions, fetch_models, select_entries
from specsuite.models.lock import HfDatasetEntry, load_lock
from specsuite.results.document import load_run
from specsuite.suite import session as suite

pytest_plugins = ["fakehub"]
REV = "0123456789abcdef0123456789abcdef01234567"
ROWS = [
    {"id": "w1", "category": "words", "turns": ["Hello world, the quick brown fox"]},
    {"id": "d1", "category": "digits", "turns": ["1 2 3 4 5 6 7 8"]},
    {"id": "w2", "category": "words", "turns": ["the the the"]},
    {"id": "d2", "category": "digits", "turns": ["8 7 6 5 4 3 2 1"]},
    {"id": "w3", "category": "words", "turns": ["not taken: two per category"]},
]
CASES = """version = 1
[[prompt_set]]
name = "hub"
dataset = {{ file = "prompts.jsonl", format = "jsonl", text = "turns", per_category = 2 }}

[[case]]
name = "{name}"
tier = "synthetic"
spec_type = "draft-simple"
target = "synth-target-llama-random.gguf"
draft = "synth-draft-llama-random.gguf"
n_max = 3
prompts = "hub"
n_predict = 16
server_args = ["--threads", "1"]
min_accept_rate = 0.0
min_accept_len = 1.0
min_identical_fraction = 1.0
category_floors = {{ words = {{ min_accept_rate = {floor} }}, digits = {{ min_accept_len = 1.0 }} }}
"""


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_dataset_prompt_set_from_the_hub_runs_category_by_category(tmp_path, hf_home, monkeypatch) -> None:
    from fakehub import FakeHub
    from fakeserver import real_binary

    data = "".join(json.dumps(r) + "\n" for r in ROWS).encode()
    lock = tmp_path / "models.lock"
    lock.write_text(
        paths.MODELS_LOCK.read_text() + '\n[[model]]\nname = "prompts.jsonl"\nsource = "hf-dataset"\n'
        f'repo = "test-org/prompts"\nrevision = "{REV}"\npath = "data/prompts.jsonl"\nlocked = false\n'
    )
    monkeypatch.setattr(paths, "MODELS_LOCK", lock)  # store.locate reads the lock the suite runs with
    for var, value in {"LLAMA_SERVER_BIN_PATH": str(real_binary()), "SPEC_MODEL_DIR": str(tmp_path / "m"),
                       "SPEC_HISTORY": str(tmp_path / "h.sqlite")}.items():  # fmt: skip
        monkeypatch.setenv(var, value)
    for var in ("SPEC_STRICT", "SPEC_REPEAT", "SPEC_NO_HISTORY"):
        monkeypatch.delenv(var, raising=False)
    passing, failing = (parse_case_file(CASES.format(name=n, floor=f)).cases[0]
                        for n, f in (("by-category", 0.0), ("words-floor", 1.0)))  # fmt: skip
    with FakeHub({"data/prompts.jsonl": data}, repo="test-org/prompts", repo_type="dataset") as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        fetch_models(FetchOptions(lock=lock, models=passing.models, tty=False))
    s = suite.open_session("workloads", [passing, failing], tmp_path / "r")
    try:
        for case in (passing, failing):
            runner.run_case(case, s)
    finally:
        suite.finish_session(s)
    run = load_run(tmp_path / "r")
    rec = run.cases["by-category"]
    assert rec.status == "passed", rec.message
    assert list(rec.categories) == ["words", "digits"]  # the file's order of first rows
    words, digits = rec.categories["words"], rec.categories["digits"]
    assert (words.prompts, digits.prompts) == (2, 2) and words.prompt_tokens and digits.prompt_tokens
    for key in ("drafted", "accepted", "drafts"):  # one /metrics delta per category: they add up exactly
        assert getattr(words, key) + getattr(digits, key) == getattr(rec, key)
    assert [a + b for a, b in zip(words.per_position, digits.per_position, strict=True)] == rec.per_position
    assert words.decode_tps and words.baseline_decode_tps and words.identical_fraction == 1.0
    assert [p.id for p in rec.prompts] == ["w1", "w2", "d1", "d2"]
    bad = run.cases["words-floor"]
    assert words.accept_rate < 1.0  # the random draft is rejected somewhere in "words" ...
    assert (bad.status, bad.reason) == ("failed", "floor")  # ... so its floor of 1.0 fails, named
    assert "category 'words': accept_rate" in (bad.message or "")
    summary = (tmp_path / "r" / "summary.md").read_text()
    assert "categories of by-category (2): accept_rate " in summary


def test_the_nightly_tier_takes_speed_bench_from_the_hub(tmp_path, hf_home, monkeypatch) -> None:
    """The lock's SPEED-Bench entry (repository, revision, path), served by a fake Hub as a Parquet file
    of SPEED-Bench's columns: fetched like a model, and the nightly case's 110 prompts read from it."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    from fakehub import FakeHub

    lock = load_lock()
    entry = lock.entries["speed-bench-qualitative.parquet"]
    assert isinstance(entry, HfDatasetEntry)
    nightly = {e.name for e in select_entries(lock, tier="nightly")}
    assert {"speed-bench-qualitative.parquet", "speed-bench-throughput-8k.parquet"} <= nightly
    cats = [f"cat{i}" for i in range(11)]
    empty = dict.fromkeys(("sub_category", "source", "src_id", "difficulty"), "")
    rows = [{"question_id": f"{c}-{j}", "category": c, "turns": [f"{c} prompt {j}", "2nd"], "multiturn": True,
             **empty} for j in range(12) for c in cats]  # fmt: skip
    path = tmp_path / "q.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    with FakeHub({entry.path: path}, repo=entry.repo, revision=entry.revision, repo_type="dataset") as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        got = fetch_models(FetchOptions(models=[entry.name], model_dir=tmp_path / "m", tty=False))
    (case,) = select_cases(load_cases(lock_names=lock.names()), "dflash2-speed-bench")
    ready = with_prompts(case, got[entry.name])
    assert len(ready.prompt_texts) == 110 and list(dict.fromkeys(ready.prompt_categories)) == cats
    assert ready.prompt_texts[:2] == (("cat0-0", "cat0 prompt 0"), ("cat0-1", "cat0 prompt 1"))
