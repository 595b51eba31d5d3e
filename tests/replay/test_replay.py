"""``specsuite replay``: real-history replays over upstream builds, end to end but for the compile.

The builds come from a fake package index on loopback (tests/fakeindex.py: the real Simple API's shape);
each build "compiles" into a fake llama-server (tests/fakellama.py, a real HTTP server) that says
``build N, commit unknown`` as a tree without git does, because compiling llama.cpp per build does not fit
in test time (docs/replay.md has the real replay over real builds). Everything else is real: the index
asked, the replay's state and resume, ``specsuite run-tier`` on each build with the suite on the synthetic
tier's generated models, the history recording and its baselines by build number, the story.

The three builds, all older than the pin (so what they lack is ``not in this build``):
- b100 has no draft-simple at all: the case is not in this build;
- b200 has it, but exports no ``spec_decode_*`` counters (a build before b10289): counters from the
  responses' timings, said as such;
- b300 changed the p_min default 0.00 -> 0.75 and accepts fewer tokens (10 of 12, not 11): red against
  b200, the changed default named first.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import stepenv
from fakeindex import FakeIndex
from fakellama import fake_llama

from specsuite import cli
from specsuite.history import queries
from specsuite.history.ancestry import BUILD, in_commit_order
from specsuite.llamacpp.inplace import BuildFailed
from specsuite.replay import state as st
from specsuite.results.document import load_run

HERE = Path(__file__).resolve().parent  # the replay loads this module as test_replay
CASE = stepenv.CASE
P_MIN = "minimum speculative decoding probability (greedy) (default: 0.00)"
BUILDS: dict[str, dict[str, Any]] = {
    "100": {"drop_types": ["draft-simple"]},
    "200": {"spec_metrics": False},
    "300": {"accepted": 10, "help_subs": [[P_MIN, P_MIN.replace("0.00", "0.75")]]},
}


def _per_pos(accepted: int) -> list[int]:
    """Per-position accepted counts of 4 drafts of 3 tokens that sum to ``accepted``."""
    return [min(4, max(0, accepted - 4 * i)) for i in range(3)]


def fake_build(number: int, log: Path, build_argv: list[str]) -> Path:
    """Build ``number`` "compiles" into a fake llama-server as FAKE_BUILDS describes it; each call is
    logged (FAKE_BUILD_CALLS), so a resumed replay can be seen not to build again."""
    with open(os.environ["FAKE_BUILD_CALLS"], "a", encoding="utf-8") as fh:
        fh.write(f"{number}\n")
    cfg = json.loads(Path(os.environ["FAKE_BUILDS"]).read_text())[str(number)]
    if cfg.get("interrupt"):
        raise KeyboardInterrupt  # the user's Ctrl-C during this build
    if cfg.get("second") and "FAKE_SECOND" not in os.environ:
        _second_replay(log.parent.parent)
    if cfg.get("fails"):
        raise BuildFailed("fake compile error: common/speculative.cpp:1: error")
    log.write_text(f"fake build of b{number} with {build_argv}\n")
    acc = cfg.get("accepted", 11)
    fake = {k: v for k, v in cfg.items() if k in ("drop_types", "spec_metrics", "help_subs")}
    version = f"version: 0.6.0-dev (build {number}, commit unknown)"  # a tree without git names no commit
    return fake_llama(log.parent / "bin", version=version, accepted=acc, per_pos=_per_pos(acc), **fake)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _second_replay(out: Path) -> None:
    """The same replay started again while this one builds (a second terminal, a CI job retried): how it
    ended and whether it changed anything in the folder, into FAKE_SECOND_REPORT for the test."""
    before = _files(out)
    argv = json.loads(os.environ["FAKE_SECOND_ARGV"])
    env = {**os.environ, "FAKE_SECOND": "1"}  # its own builds, if it ran any, start no third
    proc = subprocess.run([sys.executable, "-m", "specsuite", *argv], env=env, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    report = {"code": proc.returncode, "err": proc.stderr, "same": _files(out) == before}
    Path(os.environ["FAKE_SECOND_REPORT"]).write_text(json.dumps(report))


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stepenv.synthetic_models(tmp_path_factory)


@pytest.fixture
def env(tmp_path: Path, models: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FAKE_BUILD_CALLS", str(tmp_path / "calls.txt"))
    stepenv.isolate(tmp_path, models, HERE, monkeypatch)
    _builds(tmp_path, BUILDS)
    return tmp_path


def _builds(tmp_path: Path, builds: dict[str, dict[str, Any]]) -> None:
    (tmp_path / "builds.json").write_text(json.dumps(builds))
    os.environ["FAKE_BUILDS"] = str(tmp_path / "builds.json")


def _replay(env: Path, index: FakeIndex, *extra: str, builds: str = "b100,b200,b300") -> int:
    argv = ["replay", "--tier", CASE, "--builds", builds, "--out", str(env / "out")]
    old = os.environ.get("PIP_INDEX_URL")
    os.environ["PIP_INDEX_URL"] = index.url
    try:
        return cli.main([*argv, "--builder", "test_replay:fake_build", *extra])
    finally:
        os.environ.pop("PIP_INDEX_URL") if old is None else os.environ.update(PIP_INDEX_URL=old)


def _calls(env: Path) -> list[int]:
    return [int(x) for x in (env / "calls.txt").read_text().split()]


def test_a_replay_tells_which_build_changed_what(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeIndex([100, 200, 300, 400]) as index:
        assert _replay(env, index) == 0
    out = capsys.readouterr().out
    assert "replay: [1/3] b100: building" in out and "build(s) left, about" in out  # progress, an estimate
    replay = st.load(env / "out")
    assert replay is not None and [e.status for e in replay.entries] == [st.DONE] * 3
    runs = {e.build: load_run(Path(str(e.results))) for e in replay.entries}

    # b100 predates the case's method: not in this build, not a failure; its run is green
    r100 = runs[100].cases[CASE]
    assert (r100.status, r100.reason) == ("not_in_build", "binary_no_draft-simple")
    assert "b100 predates the pin (b11311): not in this build yet" in str(r100.message)
    assert runs[100].verdict is not None and runs[100].verdict.startswith("FAILED: no selected case ran")
    # b200: counters from the timings, said as such; the number of drafts is not in this build
    r200 = runs[200].cases[CASE]
    assert (r200.status, r200.counters_source, r200.drafts, r200.accept_len) == (
        "passed",
        "timings",
        None,
        None,
    )
    assert (r200.drafted, r200.accepted) == (12 * 3, 11 * 3)  # three prompts, 12 drafted and 11 accepted each
    assert any("spec_decode_* counters in /metrics" in w for w in r200.not_in_build)
    summary200 = (Path(str(replay.entry(200).results)) / "summary.md").read_text()
    assert "NOT IN THIS BUILD: spec_decode_* counters in /metrics" in summary200
    # b300: red against b200, its nearest lower build; the changed default named in the first lines
    r300 = runs[300].cases[CASE]
    assert (r300.status, r300.reason) == ("failed", "regressed")
    assert r300.baseline is not None and r300.baseline.commit == "b200"
    summary300 = (Path(str(replay.entry(300).results)) / "summary.md").read_text().splitlines()
    assert summary300[0].startswith("### specsuite synthetic run `") and "-b300-run-1`" in summary300[0]
    assert summary300[0].endswith(
        "FAILED: 1 of 1 case(s): tiny-simple-random (regressed: accept rate 0.9167 -> 0.8333, -9.1 %)"
    )
    # the cause first, once: the binary's default against the run before on this setup, with the case
    assert summary300[2].startswith("- **CONFIGURATION CHANGED since b200 (run ")
    assert summary300[2].endswith(
        "default of --spec-draft-p-min: 0.00 -> 0.75; failed under it: tiny-simple-random (regressed)**"
    )
    assert "CONFIGURATION CHANGED under" not in "\n".join(summary300)  # not said twice
    assert "nearest lower build" in "\n".join(summary300[:6])
    # b200 had no baseline for the case (b100 could not run it), and still names what b100 had as defaults
    summary200 = (Path(str(replay.entry(200).results)) / "summary.md").read_text()
    assert "CONFIGURATION CHANGED since" not in summary200  # b100 and b200 differ in no default

    story = (env / "out" / "story.md").read_text()
    assert story == out[out.index("### specsuite replay") :].rstrip("\n") + "\n"
    b200 = story[story.index("**b200**") : story.index("**b300**")]
    b300 = story[story.index("**b300**") :]
    assert "new in this build: tiny-simple-random" in b200
    assert "default of --spec-draft-p-min: 0.00 -> 0.75" in b300
    assert "accept rate moved in 1 case(s): tiny-simple-random 0.9167 -> 0.8333" in b300
    assert "NEWLY RED in this build: tiny-simple-random" in b300  # green at b200
    assert "counters from /metrics' spec_decode_* now (from the responses' timings" in b300


def test_the_history_orders_the_builds_by_number(env: Path) -> None:
    """b150, replayed after the others, takes its place by number: between b100 and b200, with no git."""
    _builds(env, {**BUILDS, "150": {"accepted": 11}})
    with FakeIndex([100, 150, 200, 300]) as index:
        assert _replay(env, index) == 0
        argv = ["replay", "--tier", CASE, "--builds", "b150", "--out", str(env / "later")]
        os.environ["PIP_INDEX_URL"] = index.url
        try:
            assert cli.main([*argv, "--builder", "test_replay:fake_build"]) == 0
        finally:
            del os.environ["PIP_INDEX_URL"]
    rows = queries.series(Path(os.environ["SPEC_HISTORY"]), case=CASE)  # the measured runs, in time order
    assert [r["commit"] for r in rows] == ["b200", "b300", "b150"]
    ordered, how = in_commit_order(rows, lambda r: str(r["commit"]), None, lambda r: r["build"])
    assert how == BUILD and [r["commit"] for r in ordered] == ["b150", "b200", "b300"]
    with sqlite3.connect(os.environ["SPEC_HISTORY"]) as conn:
        stored = conn.execute("SELECT llama_commit, llama_build FROM runs ORDER BY id").fetchall()
    assert stored == [("b100", 100), ("b200", 200), ("b300", 300), ("b150", 150)]
    # b150's baseline: the nearest lower build that measured the case; b100 measured nothing, so none
    later = load_run(next((env / "later" / "b150").glob("b150-run-*/results.json")))
    assert later.cases[CASE].baseline is None


def test_an_interrupted_replay_resumes_where_it_stopped(env: Path) -> None:
    _builds(env, {**BUILDS, "300": {**BUILDS["300"], "interrupt": True}})
    with FakeIndex([100, 200, 300]) as index:
        assert _replay(env, index) == 130
        replay = st.load(env / "out")
        assert replay is not None and [e.status for e in replay.entries] == [st.DONE, st.DONE, st.PENDING]
        assert (env / "out" / "story.md").is_file()  # the story so far, even when interrupted
        _builds(env, BUILDS)
        asked = len(index.requests("/simple"))
        assert _replay(env, index) == 0
        assert len(index.requests("/simple")) == asked  # resuming a named list asks the index nothing
    assert _calls(env) == [100, 200, 300, 300]  # b100 and b200 were not built again
    assert [e.status for e in st.load(env / "out").entries] == [st.DONE] * 3  # type: ignore[union-attr]


def test_a_build_that_does_not_compile_is_said_and_the_replay_goes_on(env: Path) -> None:
    _builds(env, {**BUILDS, "200": {"fails": True}})
    with FakeIndex([100, 200, 300]) as index:
        assert _replay(env, index) == 1  # a build could not be measured
    replay = st.load(env / "out")
    assert replay is not None
    assert [e.status for e in replay.entries] == [st.DONE, st.BUILD_FAILED, st.DONE]
    story = (env / "out" / "story.md").read_text()
    assert "**b200**: does not build here: fake compile error" in story
    # b300 stands against b100 in the story: the build before it that ran
    assert "new in this build: tiny-simple-random" in story[story.index("**b300**") :]


def test_a_build_the_index_lacks_is_one_line_naming_the_nearest(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeIndex([100, 200, 400]) as index:
        assert _replay(env, index) == 2
    err = capsys.readouterr().err
    assert "b300: the nearest it has: b200 and b400 (3 builds, b100 to b400)" in err
    assert not (env / "out").exists() and not (env / "calls.txt").exists()


def test_another_plan_in_the_folder_is_refused(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeIndex([100, 200, 300]) as index:
        _replay(env, index)
        argv = ["replay", "--tier", CASE, "--builds", "b100,b300", "--out", str(env / "out")]
        os.environ["PIP_INDEX_URL"] = index.url
        try:
            code = cli.main([*argv, "--builder", "test_replay:fake_build"])
        finally:
            del os.environ["PIP_INDEX_URL"]
    assert code == 2 and "holds another replay" in capsys.readouterr().err


def test_a_second_replay_into_a_busy_folder_is_refused_and_writes_nothing(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same command started again while the first builds (a real second process): one error line
    naming the folder and the first replay's pid, nothing written there, nothing built twice."""
    _builds(env, {"100": {"second": True}})
    argv = ["replay", "--tier", CASE, "--builds", "b100", "--out", str(env / "out")]
    monkeypatch.setenv("FAKE_SECOND_ARGV", json.dumps([*argv, "--builder", "test_replay:fake_build"]))
    monkeypatch.setenv("FAKE_SECOND_REPORT", str(env / "second.json"))
    with FakeIndex([100]) as index:
        assert _replay(env, index, builds="b100") == 0
        second = json.loads((env / "second.json").read_text())
        err = second["err"].splitlines()
        assert second["code"] == 2 and len(err) == 1, second
        assert err[0].startswith(f"error: another replay (pid {os.getpid()} (") and str(env / "out") in err[0]
        assert second["same"]  # it wrote nothing into the folder
        capsys.readouterr()
        # the lock goes with the first replay: the same command again finds its work done
        assert _replay(env, index, builds="b100") == 0
    assert "resuming" in capsys.readouterr().out
    assert _calls(env) == [100]  # built once, by the first


def test_range_and_count_take_builds_the_index_has() -> None:
    from specsuite.llamacpp import builds

    available = [9093, 9113, 9246, 9247, 9254, 9265, 10280, 10289, 11311, 11434]
    assert builds.spread(9100, 11434, 4, available) == [9113, 9254, 10280, 11434]  # indexes 0, 3, 5, 8 of 9
    assert builds.spread(9113, 9246, 8, available) == [9113, 9246]  # nothing between on PyPI
    assert builds.parse_range("b9113..b11434") == (9113, 11434)
    assert builds.parse_builds("b9246, 9113,b9246") == [9113, 9246]
    with pytest.raises(Exception, match="lower first"):
        builds.parse_range("b11434..b9113")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
