"""``specsuite bisect --good bN --bad bN``: a bisect over PyPI's upstream builds, with no git at all.

The builds come from a fake package index on loopback (tests/fakeindex.py); each "compiles" into a fake
llama-server (tests/fakellama.py, a real HTTP server) whose accepted count FAKE_BUILDS sets, because
compiling llama.cpp per build does not fit in test time. The steps are real: ``specsuite run-tier`` with
the suite on the synthetic tier's generated models, judged as a git bisect's steps are.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import stepenv
import suspecttree
from fakeindex import FakeIndex
from fakellama import fake_llama

from specsuite import cli
from specsuite.common import table
from specsuite.llamacpp.inplace import BuildFailed
from specsuite.suspects import trees

HERE = Path(__file__).resolve().parent  # the bisect loads this module as test_bisect_builds
CASE = stepenv.CASE
INDEX = [100, 110, 120, 130, 200, 300]


def fake_build(number: int, log: Path, build_argv: list[str]) -> Path:
    """Build ``number``: a fake llama-server accepting FAKE_BUILDS[number] of 12 drafted tokens."""
    with open(os.environ["FAKE_BUILD_CALLS"], "a", encoding="utf-8") as fh:
        fh.write(f"{number}\n")
    accepted = json.loads(Path(os.environ["FAKE_BUILDS"]).read_text())[str(number)]
    if accepted is None:
        raise BuildFailed("fake compile error: ggml/src/ggml.c:1: error")
    log.write_text(f"fake build of b{number}\n")
    per_pos = [min(4, max(0, accepted - 4 * i)) for i in range(3)]
    version = f"version: 0.6.0-dev (build {number}, commit unknown)"
    return fake_llama(log.parent / "bin", version=version, accepted=accepted, per_pos=per_pos)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stepenv.synthetic_models(tmp_path_factory)


@pytest.fixture
def env(tmp_path: Path, models: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FAKE_BUILD_CALLS", str(tmp_path / "calls.txt"))
    monkeypatch.setenv("FAKE_BUILDS", str(tmp_path / "builds.json"))
    return stepenv.isolate(tmp_path, models, HERE, monkeypatch)


def _bisect(env: Path, accepted: dict[int, int | None], good: str, bad: str, *extra: str) -> int:
    (env / "builds.json").write_text(json.dumps({str(k): v for k, v in accepted.items()}))
    args = ["bisect", "--good", good, "--bad", bad, "--case", CASE, "--out", str(env / "out")]
    with FakeIndex(INDEX) as index:
        os.environ["PIP_INDEX_URL"] = index.url
        try:
            return cli.main([*args, "--builder", "test_bisect_builds:fake_build", *extra])
        finally:
            del os.environ["PIP_INDEX_URL"]


def _report(env: Path) -> dict[str, Any]:
    return json.loads((env / "out" / "bisect.json").read_text())


def _calls(env: Path) -> list[int]:
    return [int(x) for x in (env / "calls.txt").read_text().split()]


def test_the_first_bad_build_and_the_commits_it_leaves_open(env: Path) -> None:
    # 11 of 12 accepted is good; b130 accepts 10 (9 % below b100: bad by the relative rule)
    accepted = {100: 11, 110: 11, 120: 11, 130: 10, 200: 10, 300: 6}
    assert _bisect(env, accepted, "b100", "b300") == 0
    doc = _report(env)
    assert doc["status"] == "found" and doc["first_bad"]["commit"] == "b130" and doc["unit"] == "build"
    assert doc["commits_in_range"] == 5  # the builds after good, up to bad: 110, 120, 130, 200, 300
    assert _calls(env)[:2] == [100, 300]  # the endpoints first
    assert _calls(env)[2:] == [120, 130]  # the middle of 110..200 (good), then of 130..200 (bad)
    headline = doc["headline"]
    assert headline.startswith(
        "first bad build b130 (tiny-simple-random, accept_rate, rtol 0.05; 2 bisect steps)"
    )
    assert (
        "no build between b120 (good) and b130, so the change is one of the 10 upstream commits" in headline
    )
    assert "b121..b130" in headline
    summary = (env / "out" / "summary.md").read_text()
    assert summary.startswith(f"### specsuite bisect: {headline}")
    assert "| build | tested as |" in summary and "| b130 " in summary
    assert doc["suspects"] == [  # neither tree here (a fake builder built nothing), no git
        "no suspects for tiny-simple-random (b120 -> b130): no tree of b120 on this machine (`specsuite "
        "suspects --fetch` fetches its sdist); no tree of b130 on this machine (`specsuite suspects --fetch` "
        "fetches its sdist); and no git repository here knows both (the llama.cpp mirror, a checkout)"
    ]


def test_the_range_it_ends_on_names_the_changes_that_touch_the_case(env: Path, tmp_path: Path) -> None:
    """Of the commits between the last good build and the first bad one, the suspects name what touches the
    case: its type's function in the two builds' trees (fake trees recorded as b120's and b130's); with no
    tree of b130 the line says what is missing instead."""
    fixed = suspecttree.SPECULATIVE.replace("        n += x;\n", "        n += 2 * x;\n", 1)
    trees.remember("b120", suspecttree.make_tree(tmp_path / "t120"))
    trees.remember("b130", suspecttree.make_tree(tmp_path / "t130", {"common/speculative.cpp": fixed}))
    accepted = {100: 11, 110: 11, 120: 11, 130: 10, 200: 10, 300: 6}
    assert _bisect(env, accepted, "b100", "b300") == 0
    doc = _report(env)
    assert doc["suspects"] == [
        "suspects for tiny-simple-random (b120 -> b130): common/speculative.cpp +1 -1 in "
        "common_speculative_impl_draft_simple::draft()"
    ]
    summary = (env / "out" / "summary.md").read_text().splitlines()
    assert summary[2] == "- **" + table.markdown_text(doc["suspects"][0]) + "**"


def test_a_build_that_does_not_compile_is_skipped(env: Path) -> None:
    """b120 does not build: b130 is bad and b110 good, so the first bad one is b120 or b130: undecided, as
    git bisect says of skipped commits, with both named."""
    accepted = {100: 11, 110: 11, 120: None, 130: 10, 200: 10, 300: 6}
    assert _bisect(env, accepted, "b100", "b300") == 1
    doc = _report(env)
    assert doc["status"] == "undecided" and doc["candidates"] == ["b120", "b130"]
    skipped = [s for s in doc["tested"] if s["commit"] == "b120"]
    assert skipped and skipped[0]["verdict"] == "skip" and skipped[0]["rule"] == "build"
    assert "first bad is one of ['b120', 'b130']" in doc["headline"]


def test_consecutive_builds_name_one_build(env: Path) -> None:
    """When the index has the build right before the first bad one, there is nothing left open."""
    index_builds = {100: 11, 110: 11, 120: 11, 130: 11, 200: 10, 300: 6}
    assert _bisect(env, index_builds, "b100", "b300") == 0
    assert _report(env)["first_bad"]["commit"] == "b200"
    assert "upstream commits b131..b200" in _report(env)["headline"]  # 70 commits: still a range


def test_endpoints_that_do_not_bracket_are_said(env: Path) -> None:
    accepted = {100: 11, 110: 11, 120: 11, 130: 11, 200: 11, 300: 11}
    assert _bisect(env, accepted, "b100", "b300") == 1
    assert _report(env)["status"] == "not_bracketed"


def test_a_build_the_index_lacks_and_mixed_forms_are_one_line(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _bisect(env, {}, "b100", "b250") == 2
    assert "b250: the nearest it has: b200 and b300" in capsys.readouterr().err
    assert _bisect(env, {}, "b100", "deadbeef") == 2
    assert "give both as upstream builds" in capsys.readouterr().err
    assert _bisect(env, {}, "b300", "b100") == 2
    assert "--good b300 is not below --bad b100" in capsys.readouterr().err
    assert not (env / "calls.txt").exists()  # nothing was built
