"""specsuite.results.merge (parts of one run as that run) and results.junit.junit_xml (its junit.xml).

The parts are a real smoke run (tests/data/results/smoke-real-cal-1) cut into shards, as ``run-tier
--shard`` would have written them: each with its share of the cases and the whole run as ``planned``."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import msgspec
import pytest
from testdata import DATA_ROOT, write_shards

from specsuite import cli
from specsuite.common import paths
from specsuite.common.errors import UserError
from specsuite.common.filehash import sha256_text
from specsuite.results.document import Device, Harness, HistoryNote, Run, RunOptions, encode, load_run
from specsuite.results.junit import junit_xml
from specsuite.results.merge import check_parts, merge_runs, not_run
from specsuite.results.record import CaseRecord, CategoryStats
from specsuite.results.verdict import verdict

REAL = DATA_ROOT / "results" / "smoke-real-cal-1"


def _whole() -> Run:
    run = load_run(REAL)
    run.options = RunOptions()
    return run


def _shards(run: Run, n: int) -> list[Run]:
    names = list(run.cases)
    out = []
    for k in range(n):
        mine = names[k::n]
        out.append(
            msgspec.structs.replace(
                run,
                run_id=f"{run.run_id}-s{k + 1}",
                shard=f"{k + 1}/{n}",
                planned=names,
                cases={m: run.cases[m] for m in mine},
            )
        )
    return out


def test_shards_merged_are_the_run() -> None:
    whole = _whole()
    parts = _shards(whole, 3)
    check_parts([(p.run_id, p) for p in parts])
    merged = merge_runs(parts, run_id="merged", shard=None)
    assert list(merged.cases) == list(whole.cases)  # the planned order
    assert merged.cases == whole.cases and merged.planned == list(whole.cases)
    assert verdict(merged) == verdict(whole)
    assert merged.run_id == "merged" and merged.shard is None and merged.binary == whole.binary


def test_parts_times_and_hosts() -> None:
    parts = _shards(_whole(), 2)
    parts[0].started, parts[0].finished, parts[0].wall_s, parts[0].host = (
        "2026-12-01T10:00:00+00:00",
        "2026-12-01T10:05:00+00:00",
        300.0,
        "a",
    )
    parts[1].started, parts[1].finished, parts[1].wall_s, parts[1].host = (
        "2026-12-01T10:01:00+00:00",
        "2026-12-01T10:04:00+00:00",
        180.0,
        "b",
    )
    merged = merge_runs(parts, run_id="m", shard=None)
    assert (merged.started, merged.finished, merged.wall_s, merged.host) == (
        "2026-12-01T10:00:00+00:00",
        "2026-12-01T10:05:00+00:00",
        300.0,
        "a,b",
    )


def test_a_case_no_shard_ran_is_a_not_run_failure() -> None:
    parts = _shards(_whole(), 3)
    lost = list(parts[1].cases)
    merged = merge_runs([parts[0], parts[2]], run_id="m", shard=None)  # shard 2 crashed: no results.json
    assert [(merged.cases[n].status, merged.cases[n].reason) for n in lost] == [("failed", "not_run")] * len(
        lost
    )
    v = verdict(merged)
    assert not v.green and all(f"{n} (not_run)" in v.headline for n in lost)
    interrupted = not_run("x", "the run was interrupted", interrupted=True)
    assert (interrupted.status, interrupted.reason) == ("interrupted", "not_run")  # never started


def test_a_case_two_shards_ran_keeps_its_worst_outcome() -> None:
    whole = _whole()
    name = next(iter(whole.cases))
    retry = msgspec.structs.replace(
        whole, cases={name: CaseRecord(name=name, status="failed", reason="floor")}
    )
    merged = merge_runs([whole, retry], run_id="m", shard=None)
    assert merged.cases[name].reason == "floor"
    merged = merge_runs([retry, whole], run_id="m", shard=None)
    assert merged.cases[name].reason == "floor"  # whichever came first


def _other(run: Run, what: str) -> Run:
    """``run`` as a shard of another run, differing in ``what``."""
    r = msgspec.structs.replace
    changes = {
        "llama.cpp builds": lambda: r(run, binary=r(run.binary, commit="b2b2b2b")),
        "harness commits": lambda: r(run, harness=Harness(commit="c" * 40)),
        "tiers": lambda: r(run, tier="synthetic"),
        "cases files": lambda: r(run, cases_sha256="0" * 64),
        "device classes": lambda: r(run, device=r(run.device, device_class="nvidia-h200")),
        "backends": lambda: r(run, binary=r(run.binary, backend="cuda")),
        "run options": lambda: r(run, options=RunOptions(repeat=4)),
        "plans (shard counts)": lambda: r(run, shard="1/3"),
    }
    return changes[what]()


@pytest.mark.parametrize(
    "what",
    [
        "llama.cpp builds",
        "harness commits",
        "tiers",
        "cases files",
        "device classes",
        "backends",
        "run options",
        "plans (shard counts)",
    ],
)
def test_shards_of_different_runs_are_refused_with_one_line(what: str) -> None:
    a, b = _shards(_whole(), 2)
    a.device = a.device or Device(device_class="cpu-x86-64")
    b = _other(msgspec.structs.replace(b, device=a.device), what)
    with pytest.raises(UserError) as err:
        check_parts([("shard-a", a), ("shard-b", b)])
    text = str(err.value)
    assert text.startswith(f"cannot merge: these are shards of different {what}: ") and "\n" not in text
    assert "(shard-a)" in text and "(shard-b)" in text


def test_history_notes_of_the_parts_merge() -> None:
    a, b = _shards(_whole(), 2)
    basis = "nearest ancestor, cpu-x86-64/cpu, rtol 5%"
    new = "no run of it in this history yet"
    a.history = HistoryNote(
        basis=basis, used={"aaaa (run 1)": ["x"]}, missing=["y"], missing_why={new: ["y"]}
    )
    b.history = HistoryNote(basis=basis, used={"aaaa (run 1)": ["z"], "bbbb (run 2)": ["w"]}, recorded=False,
                            missing=["v"], missing_why={new: ["v"]})  # fmt: skip
    note = merge_runs([a, b], run_id="m", shard=None).history
    assert note is not None and note.recorded is None
    assert note.line == f"baseline ({basis}): aaaa (run 1) for x, z; bbbb (run 2) for w; {new} for y, v"


def test_junit_from_the_records() -> None:
    run = merge_runs(_shards(_whole(), 2)[:1], run_id="m", shard=None)  # half of it ran
    root = ET.fromstring(junit_xml(run))
    (suite,) = root.iter("testsuite")
    assert suite.get("name") == run.tier  # named after the tier, as run-tier's own junit.xml
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert suite.get("tests") == str(len(run.cases)) == str(len(cases))
    assert int(suite.get("failures") or 0) == sum(
        r.status not in ("passed", "skipped") for r in run.cases.values()
    )
    for name, rec in run.cases.items():
        case = cases[f"test_speculative[{name}]"]
        failure = case.find("failure")
        assert (failure is not None) == (rec.status not in ("passed", "skipped"))
        if rec.reason == "not_run":
            assert failure is not None and failure.get("message", "").startswith("[not_run] no shard")
        if rec.status == "passed":
            props = {p.get("name"): p.get("value") for p in case.iter("property")}
            assert float(props["accept_rate"]) == rec.accept_rate


# --- issue 47, item 5: `specsuite merge` judges a shard's rates by its counters, and every floor again ----


@pytest.fixture
def merging(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where a merge writes (its history off; no step summary)."""
    monkeypatch.setenv("SPEC_HISTORY", str(tmp_path / "history.sqlite"))
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return tmp_path / "merged"


def _merge(shard: Path, out: Path) -> int:
    return cli.main(["merge", str(shard), "--out", str(out), "--no-history"])


def test_a_shard_whose_rate_its_counters_do_not_give_is_refused(
    tmp_path: Path, merging: Path, capsys
) -> None:
    """The round's attack: accept_rate 0.01, under draft-simple's floor of 0.97, over counters that give
    1.0 merged as passed (the floor was judged on the counters; the stated rate was never compared)."""
    write_shards(tmp_path / "a", history=False)
    shard = tmp_path / "a" / "shard-3"
    doc = json.loads((shard / "results.json").read_text())
    doc["cases"]["draft-simple"]["accept_rate"] = 0.01
    (shard / "results.json").write_text(json.dumps(doc))
    assert _merge(shard, merging) == 2
    assert capsys.readouterr().err == (
        f"error: cannot merge: {shard}: case 'draft-simple': accept_rate 0.01 disagrees with its counters: "
        "accepted 285 / drafted 285 = 1; not a shard the suite wrote\n"
    )
    assert not merging.exists()


CATEGORIES = "tiny-simple-categories"  # the one case with category floors (words >= 0.7662, digits >= 0.97)


def _categories_shard(folder: Path, words: dict[str, Any]) -> Path:
    """A shard 1/1 of the plan ``tiny-simple-categories``: the real record of tiny-simple-random (the same
    models and method; its counters are the ones cases.toml notes for the categories case: 77/66/27) with
    the two categories, digits as measured (8 drafts, 23 drafted, 23 accepted), words as ``words``."""
    run = load_run(DATA_ROOT / "results" / "synthetic-tier-real")
    rec = msgspec.structs.replace(run.cases["tiny-simple-random"], name=CATEGORIES, log=None)
    for name, c in {"words": words, "digits": {"drafted": 23, "accepted": 23, "drafts": 8}}.items():
        rates = {"accept_rate": c["accepted"] / c["drafted"], "accept_len": 1 + c["accepted"] / c["drafts"]}
        rec.categories[name] = CategoryStats(prompts=1, **c, **{k: round(v, 4) for k, v in rates.items()})
    shard = msgspec.structs.replace(
        run, run_id="shard-1", selector=CATEGORIES, shard="1/1", planned=[CATEGORIES],
        cases={CATEGORIES: rec}, cases_sha256=sha256_text(paths.CASES_FILE.read_text(encoding="utf-8")),
        options=msgspec.structs.replace(run.run_options, history=False),
    )  # fmt: skip
    folder.mkdir(parents=True)
    (folder / "results.json").write_bytes(encode(shard))
    return folder


def test_a_category_under_its_floor_fails_the_case_at_merge(tmp_path: Path, merging: Path) -> None:
    """A shard's passed case whose category 'words' is under its floor (30 of 54 accepted: 0.5556 < 0.7662,
    its rates what its counters give) is failed at the merge: the category floors are floors too."""
    measured = _categories_shard(tmp_path / "ok", {"drafted": 54, "accepted": 43, "drafts": 19})
    assert _merge(measured, merging) == 0
    shard = _categories_shard(tmp_path / "low", {"drafted": 54, "accepted": 30, "drafts": 19})
    assert _merge(shard, tmp_path / "merged-low") == 1
    rec = load_run(tmp_path / "merged-low").cases[CATEGORIES]
    assert (rec.status, rec.reason) == ("failed", "floor")
    assert (
        rec.message
        and "judged again at merge by cases.toml: [floor] category 'words': accept_rate "
        "0.5556 < floor 0.7662 (accepted=30 drafted=54 steps=19)"
        in rec.message
    )
