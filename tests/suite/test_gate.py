"""The relative gate and the history record in whole runs, and the metrics in junit.xml.

Each run is the real chain ``specsuite run-tier CASE`` -> pytest -> a fake llama-server that really serves
HTTP (tests/fakellama.py), whose ``--version`` names the llama.cpp commit it stands in for and whose
counters are scripted. SPEC_HISTORY is a file in the test's folder. Run A (commit A) is recorded once per
module; each test copies that history and runs commit B against it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fakellama import fake_llama

from specsuite.common import paths
from specsuite.common.errors import UserError
from specsuite.history import queries, recording
from specsuite.results.document import load_run
from specsuite.results.junit import JUNIT_METRICS
from specsuite.suite import gate
from specsuite.tools.compare import compare_command

CASE = "tiny-simple-random"  # its floors (0.8271, 3.2444) pass A and the worse B alike: only the gate fails B
A, B = "a1a1a1a", "b2b2b2b"
# per request: drafted, accepted, drafts and per-position counts (3 prompts, n_max 3)
GOOD = {"drafted": 12, "accepted": 12, "drafts": 4, "per_pos": [4, 4, 4]}
WORSE = {
    "drafted": 12,
    "accepted": 11,
    "drafts": 4,
    "per_pos": [4, 4, 3],
}  # accept rate and length drop > 5 %
# the run's options and anything that would write outside the test's folder
DROPPED_ENV = (
    "SPEC_METHODS",
    "SPEC_STRICT",
    "SPEC_REPEAT",
    "SPEC_ALLOW_CPU",
    "SPEC_NO_HISTORY",
    "SPEC_RTOL",
    "SPEC_HISTORY_TIMEOUT_S",
    "GITHUB_STEP_SUMMARY",
)


@dataclass
class Run:
    proc: subprocess.CompletedProcess[str]
    dir: Path
    doc: dict[str, Any]

    @property
    def case(self) -> dict[str, Any]:
        return self.doc["cases"][CASE]

    @property
    def output(self) -> str:
        return self.proc.stdout + self.proc.stderr

    def summary_head(self, n: int = 8) -> str:
        return "\n".join((self.dir / "summary.md").read_text().splitlines()[:n])

    def junit_properties(self) -> dict[str, str]:
        [testcase] = ET.parse(self.dir / "junit.xml").getroot().iter("testcase")
        assert testcase.get("name") == f"test_speculative[{CASE}]"
        return {p.get("name", ""): p.get("value", "") for p in testcase.iter("property")}


def run_tier(
    folder: Path, models: Path, db: Path, commit: str, counters: dict, *args: str, **env: str
) -> Run:
    exe = fake_llama(folder / "bin", version=f"version: 9999 (build 1, commit {commit})", **counters)
    results = folder / "results"
    full_env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    full_env.update(
        SPEC_MODEL_DIR=str(models),
        SPEC_CACHE_DIR=str(folder / "cache"),
        SPEC_HISTORY=str(db),
        SPEC_RESULTS_DIR=str(results),
        LLAMA_SERVER_BIN_PATH=str(exe),
        **env,
    )
    proc = subprocess.run(
        [sys.executable, "-m", "specsuite", "run-tier", CASE, *args],
        cwd=paths.REPO_ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return Run(proc, results, json.loads((results / "results.json").read_text()))  # as written


@dataclass
class Seed:
    models: Path
    db: Path
    run: Run


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> Seed:
    from specsuite.models.fetch import FetchOptions, fetch_models

    root = tmp_path_factory.mktemp("seed")
    fetch_models(FetchOptions(methods=[CASE], model_dir=root / "models", tty=False))
    run = run_tier(root / "a", root / "models", root / "history.sqlite", A, GOOD)
    assert run.proc.returncode == 0, run.output
    return Seed(root / "models", root / "history.sqlite", run)


@pytest.fixture
def db(seed: Seed, tmp_path: Path) -> Path:
    """A copy of the history that holds run A only (closed: SQLite checkpointed its WAL into the file)."""
    copy = tmp_path / "history.sqlite"
    shutil.copyfile(seed.db, copy)
    assert len(queries.runs(copy)) == 1
    return copy


def run_b(seed: Seed, tmp_path: Path, db: Path, counters: dict, *args: str, **env: str) -> Run:
    return run_tier(tmp_path / "b", seed.models, db, B, counters, *args, **env)


def commits(db: Path) -> list[str]:
    return [r["llama_commit"] for r in queries.runs(db)]


def test_a_drop_against_the_earlier_commit_fails_regressed_naming_it(seed: Seed, db: Path, tmp_path) -> None:
    run = run_b(seed, tmp_path, db, WORSE)
    assert run.proc.returncode == 1, run.output
    rec = run.case
    assert (rec["status"], rec["reason"]) == ("failed", "regressed"), rec["message"]
    assert f"[regressed] accept_rate {rec['accept_rate']:.4f} is " in rec["message"]
    assert f"at baseline {A}" in rec["message"]
    assert rec["accept_rate"] >= rec["floors"]["min_accept_rate"]  # no floor failed: the gate did
    assert (rec["baseline"]["commit"], rec["baseline"]["run_id"]) == (A, seed.run.doc["run_id"])
    assert [m.split()[0] for m in rec["baseline"]["regressions"]] == ["accept_rate", "accept_len"]
    head = run.summary_head()
    assert "FAILED" in head.splitlines()[0]
    device = run.doc["device"]["class"]
    rtols = "rtol 5% (per-block overhead 20%)"
    line = f"baseline (latest earlier run, {device}/cpu, {rtols}, drift over the last 10 runs)"
    assert f"{line}: {A} (run " in head
    assert f"(run {seed.run.doc['run_id']}) for {CASE}" in head
    assert run.junit_properties()["history_baseline"] == A
    assert run.doc["history"]["recorded"] is True and commits(db) == [A, B]


def test_junit_has_a_property_per_metric(seed: Seed) -> None:
    props, rec = seed.run.junit_properties(), seed.run.case
    assert {k: float(props[k]) for k in JUNIT_METRICS} == {k: float(rec[k]) for k in JUNIT_METRICS}
    assert "history_baseline" not in props  # run A had no earlier commit to compare with


@pytest.mark.parametrize(("args", "env"), [(("--no-history",), {}), ((), {"SPEC_NO_HISTORY": "1"})])
def test_history_off_means_no_gate_and_no_record(seed: Seed, db: Path, tmp_path, args, env) -> None:
    run = run_b(seed, tmp_path, db, WORSE, *args, **env)
    assert run.proc.returncode == 0, run.output
    assert (run.case["status"], run.case["baseline"]) == ("passed", None)
    assert run.doc["options"]["history"] is False and run.doc.get("history") is None
    assert "RELATIVE GATE OFF" in run.summary_head()  # results.verdict reads options.history
    assert commits(db) == [A]


def test_a_larger_rtol_passes_the_same_drop(seed: Seed, db: Path, tmp_path) -> None:
    run = run_b(seed, tmp_path, db, WORSE, "--rtol", "0.1")
    assert run.proc.returncode == 0, run.output
    assert run.case["status"] == "passed"
    assert run.case["baseline"] == {**run.case["baseline"], "commit": A, "rtol": 0.1, "regressions": []}
    head = run.summary_head()
    assert (
        f"rtol 10% (per-block overhead 20%), drift over the last 10 runs): {A} (run {seed.run.doc['run_id']})"
        in head
    )
    assert commits(db) == [A, B]


def test_a_corrupt_history_warns_and_the_run_is_judged_on_its_floors(seed: Seed, tmp_path) -> None:
    db = tmp_path / "history.sqlite"
    junk = b"\0not a database\xff" * 300
    db.write_bytes(junk)
    run = run_b(seed, tmp_path, db, GOOD)
    assert run.proc.returncode == 0, run.output
    assert run.case["status"] == "passed" and run.case["baseline"] is None
    head = run.summary_head()  # what run-tier prints: pytest keeps a passing session's stderr to itself
    assert "PASSED" in head.splitlines()[0] and "HISTORY NOT RECORDED" in head
    assert f"history unreadable, no relative gate: history {db}: cannot read it" in head
    assert f"(this run was NOT recorded: file is not a database ({db}))" in head
    assert run.doc["history"]["recorded"] is False
    assert db.read_bytes() == junk  # left for the user to inspect


HOLD_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()  # hold the write lock until the test closes our stdin
conn.execute("ROLLBACK")
"""


def test_a_locked_history_warns_and_keeps_the_verdict(seed: Seed, db: Path, tmp_path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        run = run_b(seed, tmp_path, db, GOOD, SPEC_HISTORY_TIMEOUT_S="0.5")
    finally:
        holder.communicate("")
    assert run.proc.returncode == 0, run.output
    assert run.case["status"] == "passed"
    assert run.case["baseline"]["commit"] == A  # WAL: the lookup reads past another process's write lock
    head = run.summary_head()
    assert "PASSED" in head.splitlines()[0] and "HISTORY NOT RECORDED" in head
    assert (
        f"{A} (run {seed.run.doc['run_id']}) for {CASE} (this run was NOT recorded: database is locked"
        in head
    )
    assert run.doc["history"]["recorded"] is False and commits(db) == [A]


def test_judging_an_old_run_never_takes_a_later_one(seed: Seed, db: Path, tmp_path, monkeypatch) -> None:
    """``compare --against auto A`` after B was recorded: B started later, so A has no baseline."""
    run = run_b(seed, tmp_path, db, GOOD)
    assert run.proc.returncode == 0, run.output
    monkeypatch.setenv("SPEC_HISTORY", str(db))
    assert gate.baselines_for(load_run(seed.run.dir)) == {}
    with pytest.raises(UserError, match="no history baseline for any case of this run"):
        compare_command(a=None, b=seed.run.dir, against="auto", plot=False)
    found = gate.baselines_for(load_run(run.dir))
    assert found[CASE].commit == A  # the later run still finds the earlier one


def test_a_lookup_that_cannot_read_the_history_is_one_warning(
    seed: Seed, tmp_path, monkeypatch, capsys
) -> None:
    db = tmp_path / "history.sqlite"
    monkeypatch.setenv("SPEC_HISTORY", str(db))
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version = 99")  # a newer specsuite's file
    assert gate.baselines_for(load_run(seed.run.dir)) == {}
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"warning: history {db}: cannot read it") and line.endswith("upgrade specsuite")


@pytest.mark.parametrize("broken", ["{not json", "[" * 100_000, '{"accept_rate": "high"}'])
def test_a_broken_baseline_record_never_turns_a_green_run_red(
    seed: Seed, db: Path, tmp_path: Path, broken: str
) -> None:
    """A newer commit C, recorded after A, whose stored record is broken: skipped with a warning naming it,
    A judges B, and B is green; `compare --against auto` and `history` say the same, with no traceback."""
    from specsuite.results.document import decode_run

    c = dict(seed.run.doc, run_id="c-run", started=seed.run.doc["finished"])  # after A, before B
    c["binary"] = {**c["binary"], "commit": "c3c3c3c"}
    assert recording.record_run(decode_run(c, "c"), db) is not None
    with sqlite3.connect(db) as conn:
        c_id = "(SELECT id FROM runs WHERE run_id = 'c-run')"
        conn.execute(f"UPDATE case_texts SET record = ? WHERE run = {c_id}", (broken,))
    run = run_b(seed, tmp_path, db, GOOD)
    assert run.proc.returncode == 0, run.output
    assert run.case["status"] == "passed" and run.case["baseline"]["commit"] == A
    env = {**os.environ, "SPEC_HISTORY": str(db), "SPEC_CACHE_DIR": str(tmp_path / "cache")}
    errs = []
    for argv in (
        ["compare", "--against", "auto", "--no-plot", str(run.dir)],
        ["history"],
        ["history", "--json"],
    ):
        proc = subprocess.run([sys.executable, "-m", "specsuite", *argv], cwd=paths.REPO_ROOT, env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
        errs.append(proc.stderr)
    assert errs[0].startswith(f"warning: skipping a broken history record of {CASE!r} in run c-run: ")


def test_a_broken_baseline_record_is_a_warning_in_the_runs_summary_not_none_yet(
    seed: Seed, db: Path, monkeypatch
) -> None:
    """Issue 35: the only earlier record is broken. The verdict stays the floors' (green), but the run says
    so where a user reads it (run-tier prints summary.md; pytest keeps a passing case's stderr): an
    attention line, and a history line that does not say "none yet" (a commit was measured, its record is
    unreadable). Judged in process against the real run A's history, its record broken."""
    from specsuite.results.document import decode_run
    from specsuite.results.summary import summary_markdown
    from specsuite.results.verdict import verdict

    monkeypatch.setenv("SPEC_HISTORY", str(db))
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE case_texts SET record = '{not json'")
    later = dt.datetime.fromisoformat(seed.run.doc["started"]) + dt.timedelta(hours=1)  # A may take < 1 s
    b = dict(
        seed.run.doc,
        run_id="b-run",
        started=later.isoformat(),
        finished=None,
        binary={**seed.run.doc["binary"], "commit": B},
    )
    run = decode_run(b, "b")
    ctx = gate.context(run, 0.05)
    assert not isinstance(ctx, str)
    run.history = ctx.note
    assert gate.judge(ctx, run.cases[CASE]) == [] and run.cases[CASE].baseline is None
    broken = f"{CASE} at run {seed.run.doc['run_id']}"
    assert ctx.note.broken == [broken]
    ctx.note.line = ctx.note.render()
    assert "none yet" not in ctx.note.line and f"broken history record(s) skipped: {broken}" in ctx.note.line
    v = verdict(run)
    assert v.headline.startswith("PASSED")
    text = summary_markdown(run, v)
    assert f"BROKEN BASELINE RECORD(S) in the history, skipped: {broken}" in text and ctx.note.line in text


# --- the counters against the baseline's, and rounds that disagree ----------------------------------------


def test_counters_one_token_apart_are_named_in_the_summary(seed: Seed, db: Path, tmp_path) -> None:
    """Accept rate -2.8 %: inside rtol, so the case passes; the summary still says which position moved."""
    close = {"drafted": 12, "accepted": 12, "drafts": 4, "per_pos": [4, 4, 4]}
    off_by_one = [{"accepted": 12, "per_pos": [4, 4, 4]}] * 2 + [{"accepted": 11, "per_pos": [4, 4, 3]}]
    off_by_one += [{"accepted": 12, "per_pos": [4, 4, 4]}]
    run = run_b(seed, tmp_path, db, {**close, "by_request": off_by_one})
    assert run.proc.returncode == 0, run.output
    # requests: the cold pass (3 prompts: the reported counters), the warm-up, then 3 prompts a round: the
    # cold pass's third prompt is request 3
    assert run.case["accepted"] == 35 and run.case["nondeterministic"] is False
    assert run.case["baseline"]["counters"] == "accepted 36 → 35 (−1); position 2: 12 → 11 (−1)"
    assert "| accepted 36 → 35 (−1); position 2: 12 → 11 (−1) |" in (run.dir / "summary.md").read_text()


def test_rounds_that_disagree_mark_the_case_nondeterministic(seed: Seed, db: Path, tmp_path) -> None:
    # a cycle of 4 requests against the cold pass (requests 1-3), the warm-up (4) and rounds of 3 prompts
    # (5-7, 8-10, 11-13): rounds 2 and 3 differ (36 against 35 accepted)
    cycle = [{"accepted": 12, "per_pos": [4, 4, 4]}] * 2 + [{"accepted": 11, "per_pos": [4, 4, 3]}]
    cycle += [{"accepted": 12, "per_pos": [4, 4, 4]}]
    run = run_b(seed, tmp_path, db, {**GOOD, "by_request": cycle}, "--repeat", "3")
    assert run.proc.returncode == 0, run.output
    assert run.case["nondeterministic"] is True
    assert len({(r["accepted"], tuple(r["per_position"])) for r in run.case["rounds"]}) > 1
    assert run.case["baseline"]["counters"] == "nondeterministic"
    assert "| nondeterministic |" in (run.dir / "summary.md").read_text()


def test_a_twice_slower_speculative_path_fails_regressed_naming_speed_and_block_cost(
    seed: Seed, tmp_path: Path
) -> None:
    """The counters as they were, the speculative server twice as slow (the fake's scripted timings: 10 ->
    20 ms a token, the baseline 40): the speedup halves, a verification block costs twice the plain steps.

    Paced (a tenth of the scripted time on the clock): the case's sweep measures its aggregate speedup by
    the clock, and it still pays at np 1 at 2x; unpaced, both runs' clock speedups were noise around 1x, and
    a crossover that moved by chance (p < 0.05 in 2 of the 70 orders of 4 rounds against 4) came first."""
    db = tmp_path / "history.sqlite"
    timing = {**GOOD, "base_ms_per_token": 40.0, "pace": 0.1}
    a = run_tier(tmp_path / "a", seed.models, db, A, timing, "--repeat", "4")
    assert a.proc.returncode == 0, a.output
    b = run_tier(tmp_path / "b", seed.models, db, B, {**timing, "spec_ms_per_token": 20.0}, "--repeat", "4")
    assert b.proc.returncode == 1, b.output
    assert (b.case["status"], b.case["reason"]) == ("failed", "regressed")
    regs = b.case["baseline"]["regressions"]
    assert [m.split()[0] for m in regs] == ["speedup", "decode_tps", "block_ratio"], regs
    assert "50.0 % below" in regs[0] and "50.0 % below" in regs[1] and "100.0 % above" in regs[2]
    assert b.case["baseline"]["counters"] == "identical"  # the same tokens, only slower
    assert [r["concurrency"]["crossover_np"] for r in (a.case, b.case)] == [1, 1], b.output  # both paid
