"""``specsuite merge``: shards' results folders as one run; and on the real CPU build, nine synthetic cases
in three shards (separate processes, as three runners would run them) merged against the nine run whole."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from testdata import DATA_ROOT, write_shards

from specsuite import cli
from specsuite.common import paths, procs
from specsuite.results.document import load_run

REAL = DATA_ROOT / "results" / "smoke-real-cal-1"  # write_shards cuts this real run into shards


@pytest.fixture
def history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPEC_HISTORY", str(tmp_path / "history.sqlite"))
    for var in ("SPEC_NO_HISTORY", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / "history.sqlite"


def _runs(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT run_id, started FROM runs").fetchall()


def test_merge_writes_one_run_and_records_it_once(tmp_path: Path, history: Path, capsys) -> None:
    names = write_shards(tmp_path / "artifacts")
    out = tmp_path / "merged"
    whole = load_run(REAL)
    code = cli.main(["merge", str(tmp_path / "artifacts"), "--out", str(out)])  # the folder that holds them
    merged = load_run(out)
    assert list(merged.cases) == names and merged.parts == ["shard-1", "shard-2", "shard-3"]
    assert {n: r.status for n, r in merged.cases.items()} == {n: r.status for n, r in whole.cases.items()}
    assert code == (0 if merged.verdict and merged.verdict.startswith("PASSED") else 1)
    assert (
        (out / "summary.md")
        .read_text()
        .startswith(f"### specsuite smoke run `{merged.run_id}`: {merged.verdict}")
    )
    assert "- merged from 3 shard(s): shard-1, shard-2, shard-3" in (out / "summary.md").read_text()
    assert sorted(p.name for p in (out / "logs").iterdir()) == sorted(f"{n}.log" for n in names)
    junit = [c.get("name") for c in ET.parse(out / "junit.xml").getroot().iter("testcase")]
    assert junit == [f"test_speculative[{n}]" for n in names]
    assert json.loads((out / "bench.json").read_text()) and f"merged: {out}" in capsys.readouterr().out
    assert _runs(history) == [(merged.run_id, merged.started)] and merged.history and merged.history.recorded
    assert (
        cli.main(
            ["merge", *(str(tmp_path / "artifacts" / f"shard-{k}") for k in (3, 1, 2)), "--out", str(out)]
        )
        == code
    )
    assert _runs(history) == [(merged.run_id, merged.started)]  # merged again: still one record


def test_a_shard_that_never_reported_makes_its_cases_not_run_and_the_run_red(
    tmp_path: Path, history: Path
) -> None:
    names = write_shards(tmp_path / "artifacts", skip=(2,), history=False)
    out = tmp_path / "merged"
    assert cli.main(["merge", str(tmp_path / "artifacts"), "--out", str(out)]) == 1
    merged = load_run(out)
    lost = names[1::3]
    assert [(merged.cases[n].status, merged.cases[n].reason) for n in lost] == [("failed", "not_run")] * len(
        lost
    )
    assert merged.verdict and merged.verdict.startswith("FAILED") and f"{lost[0]} (not_run)" in merged.verdict
    assert not history.exists()  # its shards ran without the history: the merged run is not recorded either


def test_shards_of_two_runs_are_refused_with_one_line(tmp_path: Path, history: Path, capsys) -> None:
    write_shards(tmp_path / "a")
    doc = json.loads((tmp_path / "a" / "shard-2" / "results.json").read_text())
    doc["binary"]["commit"] = "b2b2b2b"
    (tmp_path / "a" / "shard-2" / "results.json").write_text(json.dumps(doc))
    assert cli.main(["merge", str(tmp_path / "a"), "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: cannot merge: these are shards of different llama.cpp builds: ")
        and err.count("\n") == 1
    )
    assert not (tmp_path / "m").exists() and not history.exists()


def test_nothing_to_merge_and_a_shard_as_the_output_are_one_line(
    tmp_path: Path, history: Path, capsys
) -> None:
    (tmp_path / "empty").mkdir()
    assert cli.main(["merge", str(tmp_path / "empty")]) == 2
    assert "no results.json in" in capsys.readouterr().err
    write_shards(tmp_path / "a")
    assert cli.main(["merge", str(tmp_path / "a"), "--out", str(tmp_path / "a" / "shard-1")]) == 2
    assert "is one of the shards" in capsys.readouterr().err


def test_a_log_that_is_a_link_is_not_followed_and_a_taken_name_is_kept_apart(
    tmp_path: Path, history: Path
) -> None:
    names = write_shards(tmp_path / "a")
    secret = tmp_path / "secret.txt"
    secret.write_text("not a log")
    (tmp_path / "a" / "shard-1" / "logs" / "planted.log").symlink_to(secret)
    dup = tmp_path / "a" / "shard-1b"  # shard 1 again (a retry): its logs' names are taken
    dup.mkdir()
    (dup / "logs").mkdir()
    (dup / "results.json").write_bytes(
        (tmp_path / "a" / "shard-1" / "results.json").read_bytes().replace(b'"shard-1"', b'"shard-1b"')
    )
    (dup / "logs" / f"{names[0]}.log").write_text("the retry's log\n")
    out = tmp_path / "m"
    cli.main(["merge", str(tmp_path / "a"), "--out", str(out)])
    assert not (out / "logs" / "planted.log").exists()
    assert (out / "logs" / f"{names[0]}.log").read_text() == f"log of {names[0]} in shard 1\n"
    assert (out / "logs" / "shard-1b" / f"{names[0]}.log").read_text() == "the retry's log\n"


# --- issue 35: merge plans from cases.toml, checks each shard as `history import` does, judges again ------


def _edit(folder: Path, edit: Any) -> None:
    doc = json.loads((folder / "results.json").read_text())
    edit(doc)
    (folder / "results.json").write_text(json.dumps(doc))


def test_a_lone_shard_whose_plan_was_edited_does_not_merge_green(tmp_path: Path, history: Path) -> None:
    """The round's attack: shard 1 of 4 with ``planned`` cut to its own two cases merged green as the run."""
    write_shards(tmp_path / "a", n=4, history=False)
    lone = tmp_path / "a" / "shard-1"
    _edit(lone, lambda d: d.update(planned=list(d["cases"])))
    cmd = [sys.executable, "-m", "specsuite", "merge", str(lone), "--out", str(tmp_path / "m")]
    proc = subprocess.run(cmd, cwd=paths.REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == (
        f"error: cannot merge: {lone} says its run planned 2 case(s); cases.toml's 'smoke' has 8: "
        "not a shard of this plan\n"
    )
    assert not (tmp_path / "m").exists()


def test_a_lone_shard_merges_red_with_the_plans_other_cases_not_run(tmp_path: Path, history: Path) -> None:
    names = write_shards(tmp_path / "a", n=4, history=False)
    assert cli.main(["merge", str(tmp_path / "a" / "shard-1"), "--out", str(tmp_path / "m")]) == 1
    merged = load_run(tmp_path / "m")
    assert merged.planned == names and [n for n, r in merged.cases.items() if r.reason == "not_run"] == [
        n for i, n in enumerate(names) if i % 4 != 0
    ]


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (
            lambda d: d["cases"].update(extra={**d["cases"][next(iter(d["cases"]))], "name": "extra"}),
            "case 'extra' is not one of cases.toml's 'smoke'",
        ),
        (lambda d: d.update(cases_sha256="0" * 64), "ran another cases.toml (sha256 000000000000…"),
        (lambda d: d.update(shard="5/3"), "shard '5/3' is not K/N with 1 <= K <= N"),
        (
            lambda d: d["cases"]["draft-simple"].update(accept_rate="@NaN@"),
            "case 'draft-simple': accept_rate is nan, not a finite number; not a shard the suite wrote",
        ),
        (lambda d: d["cases"]["draft-simple"].update(accepted=10**6), "case 'draft-simple': counter sanity"),
    ],
    ids=["stray-case", "other-cases-file", "bad-shard", "nan-rate", "accepted>drafted"],
)
def test_a_shard_the_plan_or_a_live_run_could_not_give_is_refused(
    tmp_path: Path, history: Path, capsys, edit: Any, why: str
) -> None:
    write_shards(tmp_path / "a", history=False)
    if "draft-simple" not in json.loads((tmp_path / "a" / "shard-3" / "results.json").read_text())["cases"]:
        pytest.fail("write_shards put draft-simple elsewhere")
    _edit(tmp_path / "a" / "shard-3", edit)
    text = (tmp_path / "a" / "shard-3" / "results.json").read_text()
    (tmp_path / "a" / "shard-3" / "results.json").write_text(text.replace('"@NaN@"', "NaN"))
    assert cli.main(["merge", str(tmp_path / "a" / "shard-3"), "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot merge: {tmp_path / 'a' / 'shard-3'}") and why in err, err
    assert err.count("\n") == 1 and not (tmp_path / "m").exists()


@pytest.mark.parametrize("rate", [0.0, None])
def test_a_passed_case_is_judged_again_by_the_floors_of_cases_toml(
    tmp_path: Path, history: Path, rate: float | None
) -> None:
    """A shard's record that says passed with numbers under cases.toml's floors (consistent counters, or
    no rate at all) is failed at the merge: the shard's own verdict is not believed."""
    write_shards(tmp_path / "a", history=False)

    def below(d: dict[str, Any]) -> None:
        d["cases"]["draft-simple"].update(accepted=0, per_position=[0, 0, 0], accept_rate=rate,
                                          accept_len=1.0 if rate is not None else None,
                                          per_position_rate=[0.0, 0.0, 0.0], pos0_rate=0.0)  # fmt: skip

    _edit(tmp_path / "a" / "shard-3", below)
    assert cli.main(["merge", str(tmp_path / "a"), "--out", str(tmp_path / "m")]) == 1
    rec = load_run(tmp_path / "m").cases["draft-simple"]
    assert (rec.status, rec.reason) == ("failed", "floor")
    assert (
        rec.message and "the shard said passed; judged again at merge by cases.toml: [floor] " in rec.message
    )
    want = "accept_rate 0.0000 < floor 0.9700" if rate is not None else "accept_rate is None, not a number"
    assert want in rec.message


# --- the real CPU build: three shards in three processes, against the same cases run whole --------------

# Eleven of the synthetic tier's cases, every drafter among them, not all of them: the four runs share two
# cores in CI (docs/development.md, "CI's time"), and what is tested is the split and the merge, not the
# cases. Among them a sweep's members (tiny-mtp-random at np 1, 2 and 4), which shard and merge like any case.
CASES = ("tiny-simple-fixed", "tiny-mtp-fixed", "tiny-eagle3-fixed", "tiny-dflash-fixed", "tiny-dspark-fixed",
         "tiny-simple-random", "tiny-mtp-random", "tiny-mtp-random-np2", "tiny-mtp-random-np4", "tiny-ngram",
         "tiny-auto-mtp")  # fmt: skip
TIER = ",".join(CASES)
DROPPED = (
    "SPEC_GPUS",
    "SPEC_WORKERS",
    "SPEC_SHARD",
    "SPEC_PLAN",
    "SPEC_METHODS",
    "SPEC_REPEAT",
    "SPEC_NO_HISTORY",
    "SPEC_RESULTS_DIR",
    "GITHUB_STEP_SUMMARY",
)
COUNTERS = ("status", "reason", "drafted", "accepted", "drafts", "per_position", "accept_rate", "accept_len")


def _tier(env: dict[str, str], out: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "specsuite", "run-tier", TIER, *args],
        cwd=paths.REPO_ROOT,
        env={**env, "SPEC_RESULTS_DIR": str(out)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(2400)  # the cases whole and in three shards, side by side on a shared 2-core machine
def test_three_shards_of_synthetic_cases_merged_are_the_cases_run_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = paths.server_binary()
    if not binary.is_file():
        pytest.skip("no llama-server build (nox -s build)")
    for var in DROPPED:
        monkeypatch.delenv(var, raising=False)
    mine = {"SPEC_CACHE_DIR": "cache", "SPEC_HISTORY": "history.sqlite", "SPEC_MODEL_DIR": "models"}
    for var, name in mine.items():  # plan and merge run in this process: they read these too
        monkeypatch.setenv(var, str(tmp_path / name))
    env = dict(os.environ)
    from specsuite.cases.schema import load_cases, select_cases
    from specsuite.models.fetch import FetchOptions, fetch_models

    models = sorted({m for case in select_cases(load_cases(), TIER) for m in case.models})
    # once, before four runs read it
    fetch_models(FetchOptions(models=models, model_dir=tmp_path / "models", tty=False))
    plan = tmp_path / "plan.json"
    assert cli.main(["plan", TIER, "--shards", "3", "--out", str(plan)]) == 0  # one plan for every runner
    runs = [_tier({**env, "SPEC_HISTORY": str(tmp_path / "whole.sqlite")}, tmp_path / "whole")]
    runs += [
        _tier(env, tmp_path / "shards" / f"s{k}", "--shard", f"{k}/3", "--plan", str(plan)) for k in (1, 2, 3)
    ]
    for p in runs:
        out, _ = p.communicate(timeout=2000)
        assert p.returncode == 0, out
    assert cli.main(["merge", str(tmp_path / "shards"), "--out", str(tmp_path / "merged")]) == 0
    a, b = load_run(tmp_path / "whole"), load_run(tmp_path / "merged")
    assert list(a.cases) == list(b.cases)
    assert {n: [getattr(r, k) for k in COUNTERS] for n, r in a.cases.items()} == {
        n: [getattr(r, k) for k in COUNTERS] for n, r in b.cases.items()
    }
    assert a.verdict == b.verdict
    # the sweep's members ran in one shard, in order: np 4 against np 1's output of the same shard
    np4 = b.cases["tiny-mtp-random-np4"]
    assert np4.concurrency is not None and np4.concurrency.np1 is not None
    assert np4.concurrency.np1.source == "tiny-mtp-random (this run)"
    assert np4.concurrency.crossover_np is not None  # written when the merged run was judged
    assert "- crossover tiny-mtp-random: " in (tmp_path / "merged" / "summary.md").read_text()
    with sqlite3.connect(tmp_path / "history.sqlite") as db:  # the shards recorded nothing; the merge once
        assert db.execute("SELECT run_id FROM runs").fetchall() == [(b.run_id,)]

    # shard 2 again, its pytest killed (a runner that died) after its first case: the rest never ran
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    for k in (1, 3):
        os.symlink(tmp_path / "shards" / f"s{k}", crashed / f"s{k}")
    p = _tier(env, crashed / "s2", "--shard", "2/3", "--plan", str(plan))
    results = crashed / "s2" / "results.json"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not (results.exists() and json.loads(results.read_text())["cases"]):
        time.sleep(0.2)
    for pid in procs.children(p.pid):  # run-tier's child: pytest (its servers die with it)
        os.kill(pid, signal.SIGKILL)
    p.communicate(timeout=120)
    assert cli.main(["merge", str(crashed), "--out", str(tmp_path / "red"), "--no-history"]) == 1
    red = load_run(tmp_path / "red")
    not_run = [n for n, r in red.cases.items() if r.reason == "not_run"]
    assert not_run and red.verdict and red.verdict.startswith("FAILED")
    assert set(not_run) <= set(json.loads(plan.read_text())["include"][1]["cases"].split(","))
