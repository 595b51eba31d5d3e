"""``specsuite bisect``: git bisect run over real git repositories, and the bisect of a red night.

Unit tests: a small local repository made here, whose every commit holds ``fake.json`` (the accepted count
the "build" of that commit reports, whether its build fails, which spec types it lacks). The fake builder
(``fake_build``, loaded by the bisect's steps as ``test_bisect:fake_build``) turns a checkout into a fake
llama-server (tests/fakellama.py, a real HTTP server), because compiling llama.cpp per commit does not fit in
unit-test time; everything else is real: the mirror clone, the worktree, git bisect run, the step
subprocesses, ``specsuite run-tier`` with the suite on the synthetic tier's generated models.

Integration test: a repository made from the pinned llama.cpp tree, one commit of which breaks the
draft-simple loop; the real CPU build of every tested commit finds it.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import ccachelog
import histories
import msgspec
import pytest
import stepenv
from fakellama import fake_llama

from specsuite import cli
from specsuite.bisect import command as bisect
from specsuite.bisect import git as bisect_git
from specsuite.bisect import night
from specsuite.bisect.build import BuildFailed
from specsuite.bisect.judge import judge
from specsuite.bisect.report import commit_url
from specsuite.common import paths
from specsuite.common.errors import UserError
from specsuite.llamacpp import cmake as build_cmake
from specsuite.llamacpp import info as buildinfo
from specsuite.llamacpp import toolchain
from specsuite.results.record import CaseRecord

HERE = Path(__file__).resolve().parent  # the steps load this module as test_bisect
CASE = stepenv.CASE
GOOD = {"accepted": 11}  # per request of the fake: 12 drafted in 4 drafts -> accept_rate 0.9167
WORSE = {"accepted": 10}  # 0.8333: above the floor, 9.1 % below good -> bad by the relative rule
BROKEN = {"accepted": 6}  # 0.5: below the floor -> bad by the floor


# --- the fake builder and the test repository ------------------------------------------------------------


def _per_pos(accepted: int) -> list[int]:
    """Per-position accepted counts of 4 drafts of 3 tokens that sum to ``accepted``."""
    return [min(4, max(0, accepted - 4 * i)) for i in range(3)]


def fake_build(tree: Path, log: Path, build_argv: list[str]) -> Path:
    """A commit "builds" into a fake llama-server whose counters come from the checkout's fake.json."""
    cfg = json.loads((tree / "fake.json").read_text())
    log.write_text(f"fake build of {tree} with {build_argv}\n")
    if cfg.get("build_sleep_s"):
        time.sleep(cfg["build_sleep_s"])  # a long build, to be interrupted
    if cfg.get("build_fails"):
        raise BuildFailed("fake compile error: common/speculative.cpp:1: error")
    acc = cfg["accepted"]
    # a fresh folder per step: the probe caches per binary path, size and mtime
    return fake_llama(
        log.parent / "bin", accepted=acc, per_pos=_per_pos(acc), drop_types=cfg.get("lacks", [])
    )


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    }
    cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args]
    return subprocess.run(cmd, cwd=repo, check=True, capture_output=True, text=True, env=env).stdout.strip()


def make_repo(path: Path, configs: list[dict[str, Any]]) -> list[str]:
    """One commit per config (the first is the good one); their full hashes."""
    path.mkdir(parents=True)
    _git(path, "init", "--quiet", "--initial-branch=master")
    shas = []
    for i, cfg in enumerate(configs):
        (path / "fake.json").write_text(json.dumps({**cfg, "n": i}))  # every commit changes the file
        _git(path, "add", "fake.json")
        _git(path, "commit", "--quiet", "-m", f"commit {i}: {json.dumps(cfg)}")
        shas.append(_git(path, "rev-parse", "HEAD"))
    return shas


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stepenv.synthetic_models(tmp_path_factory)


@pytest.fixture
def env(tmp_path: Path, models: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private cache (mirror, worktree, probe cache), the models, and this folder importable by steps."""
    return stepenv.isolate(tmp_path, models, HERE, monkeypatch)


def _repo(env: Path, monkeypatch: pytest.MonkeyPatch, configs: list[dict[str, Any]]) -> list[str]:
    shas = make_repo(env / "llama.cpp", configs)
    monkeypatch.setenv("LLAMA_CPP_REPO", str(env / "llama.cpp"))
    return shas


def _args(env: Path, good: str, bad: str, *extra: str) -> list[str]:
    out = ["--out", str(env / "out"), "--builder", "test_bisect:fake_build"]
    return ["--good", good, "--bad", bad, "--case", CASE, *out, *extra]


def _tree(env: Path) -> Path:
    return bisect_git.tree_path(env / "cache", str(env / "llama.cpp"))


def _first_midpoint(repo: Path, good: str, bad: str) -> str:
    """The first commit git bisect tests (git rev-list --bisect: the one halfway between)."""
    return _git(repo, "rev-list", "--bisect", bad, f"^{good}")


def _no_bisect_left(env: Path) -> None:
    tree = _tree(env)
    assert (tree / ".git").is_file()
    res = subprocess.run(["git", "bisect", "log"], cwd=tree, capture_output=True, text=True)
    assert res.returncode != 0, res.stdout  # "We are not bisecting."


def _result(env: Path) -> dict[str, Any]:
    return json.loads((env / "out" / "bisect.json").read_text())


# --- finding the commit --------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("first_bad", [1, 6])
def test_finds_the_first_bad_commit_in_log2_steps(env, monkeypatch, capfd, first_bad) -> None:
    shas = _repo(env, monkeypatch, [GOOD] * first_bad + [WORSE] * (9 - first_bad))
    assert bisect.main(_args(env, shas[0], shas[-1])) == 0

    doc = _result(env)
    assert doc["status"] == "found"
    assert doc["first_bad"]["commit"] == shas[first_bad]
    assert doc["first_bad"]["subject"] == f"commit {first_bad}: {json.dumps(WORSE)}"
    assert doc["commits_in_range"] == 8
    assert doc["steps"] == math.ceil(math.log2(8)) == doc["log2_bound"]
    tested = {s["commit"]: s for s in doc["tested"]}
    assert tested[shas[0]]["label"] == "good" and tested[shas[-1]]["label"] == "bad"
    bad = tested[shas[first_bad]]
    assert (bad["verdict"], bad["rule"], bad["value"]) == (
        "bad",
        "relative",
        pytest.approx(10 / 12, abs=1e-4),
    )
    assert "9.1 % below 0.9167" in bad["detail"]
    for s in doc["tested"]:  # every step measured the metric, by a real run of the case
        assert s["value"] == pytest.approx((11 if s["verdict"] == "good" else 10) / 12, abs=1e-4)
        assert (env / "out" / s["folder"] / "run" / "results.json").is_file()
    out = capfd.readouterr().out
    assert f"first bad commit {shas[first_bad]} 'commit {first_bad}:" in out
    assert out.count("-> BAD (relative: accept_rate 0.8333 is 9.1 % below") == 1 + sum(
        1 for s in doc["tested"] if s["verdict"] == "bad" and s["label"] != "bad"
    )
    summary = (env / "out" / "summary.md").read_text()
    assert shas[first_bad][:10] in summary and "bad (first bad)" in summary
    _no_bisect_left(env)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("broken", "rule"),
    [({"build_fails": True}, "build"), ({"lacks": ["draft-simple"]}, "binary_no_draft-simple")],
    ids=["build-fails", "binary-lacks-method"],
)
def test_a_commit_that_cannot_be_measured_is_skipped(env, monkeypatch, broken, rule) -> None:
    configs = [GOOD] * 6 + [BROKEN] * 3  # commit 6 drops acceptance below the floor
    configs[4] = {**GOOD, **broken}  # the first commit git tests (checked below)
    shas = _repo(env, monkeypatch, configs)
    assert _first_midpoint(env / "llama.cpp", shas[0], shas[-1]) == shas[4]
    assert bisect.main(_args(env, shas[0], shas[-1])) == 0

    doc = _result(env)
    assert (doc["status"], doc["first_bad"]["commit"]) == ("found", shas[6])
    tested = {s["commit"]: s for s in doc["tested"]}
    skipped = tested[shas[4]]
    assert [skipped[k] for k in ("label", "verdict", "rule", "exit_code", "value")] == [
        "step 1",
        "skip",
        rule,
        125,
        None,
    ]
    first_bad = tested[shas[6]]
    assert (first_bad["verdict"], first_bad["rule"]) == ("bad", "floor")
    assert first_bad["detail"] == "accept_rate 0.5000 < floor 0.8271; accept_len 2.5000 < floor 3.2444"
    _no_bisect_left(env)


@pytest.mark.slow
def test_only_skipped_commits_left_is_undecided(env, monkeypatch, capfd) -> None:
    configs = [GOOD] * 5 + [BROKEN] * 4
    configs[4] = {**GOOD, "build_fails": True}  # right before the first bad commit 5: never measurable
    shas = _repo(env, monkeypatch, configs)
    assert bisect.main(_args(env, shas[0], shas[-1])) == 1

    doc = _result(env)
    assert doc["status"] == "undecided" and doc["first_bad"] is None
    assert sorted(doc["candidates"]) == sorted([shas[4], shas[5]])
    assert "could not decide" in capfd.readouterr().out
    _no_bisect_left(env)


# --- the endpoints ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_good_commit_that_fails_the_case_stops_before_bisecting(env, monkeypatch) -> None:
    shas = _repo(env, monkeypatch, [BROKEN, BROKEN, BROKEN])
    with pytest.raises(
        UserError, match=r"--good \w+ is not good for tiny-simple-random: bad \(floor: acc"
    ) as e:
        bisect.main(_args(env, shas[0], shas[-1]))
    assert e.value.code == 1
    doc = _result(env)
    assert doc["status"] == "not_bracketed" and [s["label"] for s in doc["tested"]] == ["good"]
    _no_bisect_left(env)


@pytest.mark.slow
def test_a_bad_commit_that_is_not_worse_means_nothing_to_bisect(env, monkeypatch) -> None:
    shas = _repo(env, monkeypatch, [GOOD, WORSE, {"accepted": 11}])
    with pytest.raises(UserError, match=r"--bad \w+ is not bad .*nothing to bisect.*within_rtol") as e:
        bisect.main(_args(env, shas[0], shas[-1]))
    assert e.value.code == 1
    assert [s["label"] for s in _result(env)["tested"]] == ["good", "bad"]
    _no_bisect_left(env)


# --- bad input: one clear message, exit 2, nothing written -----------------------------------------------


_SHA = "0123456789abcdef0123456789abcdef01234567"
BAD_INPUT = {  # name: (options changed in a valid command line; GOOD and BAD stand for the two commits)
    "unknown-sha": ({"--good": _SHA}, rf"--good {_SHA} is not a commit in .*llama.cpp \(fetched just now\)"),
    "not-a-sha": ({"--good": "main..HEAD"}, r"--good 'main..HEAD' is not a commit; give a commit hash"),
    "good-after-bad": ({"--good": "BAD", "--bad": "GOOD"}, r"--good \w{12} is not an ancestor of --bad"),
    "same": ({"--bad": "GOOD"}, r"--good and --bad are the same commit"),
    "unknown-case": (
        {"--case": "tiny-nope"},
        r"--case 'tiny-nope' is not a case of cases.toml: did you mean 'tiny-none'\?",
    ),
    "tier": ({"--case": "synthetic"}, r"--case 'synthetic' is a tier; bisect takes one case name"),
    "metric": ({"--metric": "drafted"}, r"--metric 'drafted': choose one of accept_rate, accept_len"),
    "rtol": ({"--rtol": "1.5"}, r"--rtol '1.5': give a fraction between 0 and 1"),
    "rtol-text": ({"--rtol": "x"}, r"--rtol 'x': give a fraction"),
    "speedup-repeat": ({"--metric": "speedup"}, r"--metric speedup needs --repeat 4 or more"),
    "decode-tps-repeat": ({"--metric": "decode_tps"}, r"--metric decode_tps needs --repeat 4 or more"),
    "unknown-option": ({"--bogus": "1"}, r"unknown arguments --bogus 1: bisect takes --good"),
    "out-in-use": ({"--out": "USED"}, r"--out .*/used exists and is not an empty folder; give a new one"),
}


@pytest.mark.parametrize("name", BAD_INPUT)
def test_bad_input_is_one_clear_error_before_any_build(env, monkeypatch, capfd, name) -> None:
    shas = _repo(env, monkeypatch, [GOOD, WORSE])
    (env / "used" / "step-01-abc").mkdir(parents=True)
    change, message = BAD_INPUT[name]
    options = {"--good": "GOOD", "--bad": "BAD", "--case": CASE, "--out": str(env / "out"), **change}
    named = {"GOOD": shas[0], "BAD": shas[1], "USED": str(env / "used")}
    options = {k: named.get(v, v) for k, v in options.items()}
    argv = ["bisect", *[x for kv in options.items() for x in kv], "--builder", "test_bisect:fake_build"]
    assert cli.main(argv) == 2
    err = capfd.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert re.search(message, err), err
    assert not (env / "out").exists()  # validated before anything was built or written
    assert not _tree(env).exists()  # nor was the worktree made


def test_one_bisect_per_repository_at_a_time(env, monkeypatch, capfd) -> None:
    from filelock import FileLock

    shas = _repo(env, monkeypatch, [GOOD, WORSE])
    _tree(env).parent.mkdir(parents=True)
    with FileLock(str(_tree(env)) + ".lock"):  # held as by a bisect running in another process
        assert cli.main(["bisect", *_args(env, shas[0], shas[1])]) == 2
    assert "error: another bisect of this repository is running (lock " in capfd.readouterr().err
    assert not (env / "out").exists()


def _leftovers(marker: str) -> list[str]:
    """Command lines of live processes that mention ``marker``."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace").replace("\0", " ")
            state = next(ln for ln in (proc / "status").read_text().splitlines() if ln.startswith("State:"))
        except (OSError, StopIteration):
            continue
        if marker in cmdline and "zombie" not in state:
            found.append(cmdline)
    return found


def _wait_until(what: str, done: Any, proc: subprocess.Popen[bytes], limit_s: float = 120) -> None:
    """Poll ``done()`` while ``proc`` runs; the limit only stops a broken test from hanging."""
    deadline = time.monotonic() + limit_s
    while not done():
        assert time.monotonic() < deadline and proc.poll() is None, f"never {what}"
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_mid_bisect_resets_the_worktree(env, monkeypatch, sig) -> None:
    configs = [GOOD] * 5 + [WORSE] * 4
    configs[4] = {**GOOD, "build_sleep_s": 600}  # the first commit git tests: a build that does not end
    shas = _repo(env, monkeypatch, configs)
    out, err = env / "stdout.txt", env / "stderr.txt"
    with open(out, "wb") as o, open(err, "wb") as e:
        cmd = [sys.executable, "-m", "specsuite", "bisect", *_args(env, shas[0], shas[-1])]
        proc = subprocess.Popen(cmd, stdout=o, stderr=e)
    try:
        _wait_until("reached step 1's build", lambda: any(env.glob("out/step-01-*/build.log")), proc)
        proc.send_signal(sig)  # what a terminal's Ctrl-C (SIGINT) or nox cancelling a job (SIGTERM) sends
        proc.wait(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err.read_text()
    assert err.read_text().strip().endswith("interrupted")
    doc = _result(env)
    assert doc["status"] == "interrupted" and [s["label"] for s in doc["tested"]] == ["good", "bad"]
    assert "bisect: interrupted" in out.read_text()
    _no_bisect_left(env)
    assert bisect_git.head(_tree(env)) == shas[-1]  # reset went back to where bisect started: the bad end
    # the step (with its sleeping "build") ends with the bisect; it may still be exiting, so wait for it
    _wait_until("saw the step exit", lambda: not _leftovers(str(env / "out")), proc, 30)


# --- the verdict of one step (pure) ----------------------------------------------------------------------


def _rec(
    status: str = "passed", reason: str | None = None, rate: float | None = 0.9, **kw: Any
) -> CaseRecord:
    floors = {"min_accept_rate": 0.8, "min_accept_len": 3.0, "min_speedup": None}
    numbers = {"accept_rate": rate, "accept_len": 3.5, "pos0_rate": 0.95, **kw}
    return CaseRecord(name=CASE, status=status, reason=reason, floors=floors, **numbers)


@pytest.mark.parametrize(
    ("rec", "reference", "expected"),
    [
        (_rec(), None, ("good", "passed")),
        (_rec(rate=0.86), msgspec.to_builtins(_rec(rate=0.9)), ("good", "within_rtol")),  # -4.4 %
        (
            _rec(rate=0.855),
            msgspec.to_builtins(_rec(rate=0.9)),
            ("good", "within_rtol"),
        ),  # exactly -5 %: not more
        (_rec(rate=0.85), msgspec.to_builtins(_rec(rate=0.9)), ("bad", "relative")),  # -5.6 %
        (
            _rec(rate=0.99),
            msgspec.to_builtins(_rec(rate=0.9)),
            ("good", "within_rtol"),
        ),  # better is never bad
        (_rec("failed", "floor", rate=0.7, message="c: 1 check(s) failed"), None, ("bad", "floor")),
        (_rec("failed", "speed", speedup=0.8), None, ("bad", "speed")),
        (_rec("skipped", "binary_no_mtp", rate=None), None, ("skip", "binary_no_mtp")),
        (_rec("failed", "binary_no_mtp", rate=None), None, ("skip", "binary_no_mtp")),  # strict run
        (_rec("failed", "crashed", rate=None, message="killed by SIGSEGV"), None, ("skip", "crashed")),
        (
            _rec("failed", "diverged"),
            msgspec.to_builtins(_rec()),
            ("skip", "diverged"),
        ),  # numbers, but not clean
        (_rec("error", "timeout", rate=None), None, ("skip", "timeout")),
        (None, None, ("skip", "no_result")),
    ],
)
def test_judge(rec, reference, expected) -> None:
    j = judge(rec, "accept_rate", 0.05, reference, "a" * 40)
    assert (j.verdict, j.rule) == expected
    assert j.exit_code == {"good": 0, "bad": 1, "skip": 125}[j.verdict]


def test_judge_says_the_numbers() -> None:
    j = judge(_rec("failed", "floor", rate=0.7), "accept_rate", 0.05)
    assert j.detail == "accept_rate 0.7000 < floor 0.8000"
    j = judge(_rec(rate=0.85), "accept_rate", 0.05, msgspec.to_builtins(_rec(rate=0.9)), "abcdef0123")
    assert j.detail == "accept_rate 0.8500 is 5.6 % below 0.9000 at baseline abcdef0 (rtol 5 %)"
    j = judge(_rec(rate=0.9), "pos0_rate", 0.05, msgspec.to_builtins(_rec()), "abcdef0123")
    assert (j.value, j.detail) == (0.95, "pos0_rate 0.9500 vs 0.9500 at good abcdef0 (+0.0 %, rtol 5 %)")
    j = judge(_rec("failed", "crashed", rate=None, message="killed by SIGSEGV\nlog..."), "accept_rate", 0.05)
    assert j.detail == "not a measurement: failed (crashed): killed by SIGSEGV"


# --- the real thing: the pinned llama.cpp tree, the real CPU build -----------------------------------------

# A one-line bug in draft-simple's drafting loop: the draft model is fed the last target token again instead
# of the token it just drafted, so every draft position after the first is guessed from the wrong context.
# Losslessness holds (the target verifies), acceptance drops (measured: see the test's printed table).
REGRESSION = (
    "common/speculative.cpp",
    "                batch.add(id, dp.pos0 + i + 1, seq_id, true);\n",
    "                batch.add(dp.id_last, dp.pos0 + i + 1, seq_id, true);\n",
)


def _edit(repo: Path, path: str, old: str, new: str) -> None:
    text = (repo / path).read_text()
    assert text.count(old) >= 1, f"{path} no longer has {old!r}: pick another line"
    (repo / path).write_text(text.replace(old, new, 1))  # the first: draft-simple's loop


def make_llama_repo(dest: Path) -> list[str]:
    """A git repository of the pinned llama.cpp tree with 5 commits; the third breaks draft-simple."""
    from specsuite.llamacpp.source import load_pin, source_from_pin

    tree = source_from_pin(load_pin(), paths.cache_dir()).path
    shutil.copytree(tree, dest, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    _git(dest, "init", "--quiet", "--initial-branch=master")
    _git(dest, "add", "--all", "--force")  # the tree as vendored, including what its .gitignore names
    _git(dest, "commit", "--quiet", "-m", "llama.cpp 0c1e570 as vendored in llama-cpp-python 0.3.36")
    for subject, change in [
        ("docs : mention bisect in the build notes", ("docs/build.md", "\n", "\n\n<!-- bisect 1 -->\n")),
        ("speculative : draft-simple drafts from the last token", REGRESSION),
        (
            "docs : a second note",
            ("docs/build.md", "<!-- bisect 1 -->", "<!-- bisect 1 -->\n<!-- bisect 2 -->"),
        ),
        ("README : a third note", ("README.md", "\n", "\n\n<!-- bisect 3 -->\n")),
    ]:
        _edit(dest, *change)
        _git(dest, "commit", "--quiet", "--all", "-m", subject)
    return _git(dest, "rev-list", "--reverse", "HEAD").split()


# The per-user ccache that `nox -s build` filled (the build's own choice of it), read before any test
# moves SPEC_CACHE_DIR.
MAIN_CCACHE = build_cmake.tool_env()["CCACHE_DIR"]


def _main_build_is_cpu_under_ccache() -> bool:
    """Whether `nox -s build` published a CPU build compiled through MAIN_CCACHE: then its objects are
    what the bisect's first build must take (a CUDA build's CPU files are compiled with other defines)."""
    info = buildinfo.load()
    launcher = "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
    return bool(info and info["backend"] == "cpu" and launcher in info["cmake_flags"])


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(3600)
def test_real_build_finds_the_injected_regression(env, monkeypatch, capfd) -> None:
    """The first build takes from `nox -s build`'s ccache every object whose file the repository did not
    change (build.build_place: both trees compile ``../llama.cpp/...``), so CI compiles llama.cpp once."""
    if shutil.which("git") is None or shutil.which("c++") is None:
        pytest.skip("needs git and a C++ compiler")
    monkeypatch.setenv("LLAMA_CPP_REPO", str(env / "llama.cpp"))
    monkeypatch.setenv("CCACHE_DIR", MAIN_CCACHE)
    monkeypatch.setenv("CCACHE_STATSLOG", str(env / "ccache-stats.log"))
    shas = make_llama_repo(env / "llama.cpp")
    t0 = time.monotonic()
    code = bisect.main(
        ["--good", shas[0], "--bad", shas[-1], "--case", CASE, "--cpu", "--out", str(env / "out")]
    )
    wall = time.monotonic() - t0
    out = capfd.readouterr().out
    compiles = ccachelog.outcomes(env / "ccache-stats.log")
    missed = sorted(f for f, what in compiles.items() if what == "miss")
    with capfd.disabled():  # the measurement, for the record
        print(out[out.rfind("\nbisect: ") :], f"\nwall {wall:.0f} s", flush=True)
        print(f"ccache: {len(compiles) - len(missed)} of {len(compiles)} files from {MAIN_CCACHE}; "
              f"compiled: {missed}")  # fmt: skip
    assert code == 0, out[-3000:]
    ccache_on = not os.environ.get("CCACHE_DISABLE")
    if ccache_on:  # installed into this venv where missing (it is not the build session's venv)
        assert toolchain.find_ccache() and len(compiles) > 100, "the bisect built without ccache"
    if _main_build_is_cpu_under_ccache() and ccache_on:  # both builds through one ccache
        # Compiled here, and only these: what holds the commit (ggml.c, build-info.cpp), the broken
        # speculative.cpp, and llama's unity batch files (CMake before 4.0 includes their sources by absolute
        # path: CMAKE_UNITY_BUILD_RELOCATABLE is 4.0's). Every other object came from the main build.
        own = {"../llama.cpp/ggml/src/ggml.c", "common/build-info.cpp", "../llama.cpp/common/speculative.cpp"}
        unexpected = [f for f in missed if f not in own and "/Unity/unity_" not in f]
        assert not unexpected, missed
    doc = _result(env)
    assert doc["first_bad"] == {
        "commit": shas[2],
        "subject": "speculative : draft-simple drafts from the last token",
    }
    assert doc["steps"] == doc["log2_bound"] == 2  # 4 commits in range
    tested = {s["commit"]: s for s in doc["tested"]}
    good, first_bad = tested[shas[0]], tested[shas[2]]
    assert good["verdict"] == "good" and first_bad["verdict"] == "bad"
    assert first_bad["value"] < good["value"] * 0.95
    _no_bisect_left(env)


# --- the mirror is keyed by its remote (issue 19) -----------------------------------------------------------


def _has(mirror: Path, sha: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=mirror).returncode == 0


def test_a_changed_llama_cpp_repo_gets_its_own_mirror(env, monkeypatch) -> None:
    """A mirror of another repository in the cache is never bisected instead, nor fetched into."""
    one = make_repo(env / "one", [GOOD, WORSE])
    two = make_repo(env / "two", [GOOD, GOOD, WORSE])
    first = bisect_git.mirror(env / "cache", str(env / "one"))
    monkeypatch.setenv("LLAMA_CPP_REPO", str(env / "two"))
    assert bisect.main(_args(env, two[0], two[-1])) == 0
    assert _result(env)["first_bad"]["commit"] == two[2]
    second = bisect_git.mirror(env / "cache", str(env / "two"))
    assert first != second and _has(second, two[2]) and not _has(first, two[2])
    assert bisect_git.mirror(env / "cache", str(env / "one")) == first and _has(first, one[1])


def test_a_mirror_cloned_from_another_remote_is_refused_in_one_line(env) -> None:
    """The default mirror (an older specsuite kept one for every repository) cloned from elsewhere."""
    from specsuite.llamacpp import source

    make_repo(env / "elsewhere", [GOOD])
    pinned = source.load_pin().repository
    path = source.mirror_path(env / "cache", pinned)
    path.parent.mkdir(parents=True)
    subprocess.run(["git", "clone", "--bare", "--quiet", str(env / "elsewhere"), str(path)], check=True)
    with pytest.raises(UserError) as exc:
        bisect_git.mirror(env / "cache", pinned)
    message = str(exc.value)
    assert message.startswith(f"the llama.cpp mirror {path} was cloned from {env / 'elsewhere'}, not ")
    assert "\n" not in message


# --- a red night: the plan from a run's results, the bounds, a plan case after case --------------------

BAD_COMMIT = "ee" * 20


def _red_run(tmp_path: Path) -> Path:
    """A real run's results with four cases failed in four ways (as the gate writes them)."""
    doc = histories.history_docs([1.0])[0]
    doc["binary"]["commit"] = BAD_COMMIT
    simple, mtp, dspark, dflash = (doc["cases"][n] for n in histories.CASES)
    base = {"commit": "aa" * 20, "run_id": "r1", "rtol": 0.05}
    dropped = ["speedup median 1.2 is 20.0 % below 1.5 at baseline aaaaaaa (...)", "accept_rate 0.5 is ..."]
    simple.update(status="failed", reason="regressed", baseline={**base, "regressions": dropped})
    mtp.update(status="failed", reason="drifted", baseline=base, drift={
        "metric": "accept_len", "before_commit": "bb" * 20, "after_commit": "cc" * 20, "after_run_id": "r7",
        "mean_before": 2.4, "mean_after": 2.2, "change": -0.083, "p_value": None, "runs": 10})  # fmt: skip
    dspark.update(status="failed", reason="floor", baseline=base)
    dflash.update(status="failed", reason="diverged")  # not a measurement: nothing to bisect
    return histories.write([doc], tmp_path)[0]


def test_the_plan_names_each_case_its_commits_and_metric(tmp_path: Path) -> None:
    from specsuite.results.document import load_run

    entries, notes = night.plan([load_run(_red_run(tmp_path))])
    assert [(e["case"], e["good"], e["metric"], e["reason"], e["repeat"]) for e in entries] == [
        ("tiny-simple-random", "aa" * 20, "speedup", "regressed", 4),
        ("tiny-mtp-random", "bb" * 20, "accept_len", "drifted", 4),
        ("tiny-dspark-random", "aa" * 20, "accept_rate", "floor", 4),
    ]
    assert {e["bad"] for e in entries} == {BAD_COMMIT} and notes == []


def test_an_absolute_decode_speed_drop_is_bisected_by_it_with_enough_rounds(tmp_path: Path) -> None:
    from specsuite.results.document import load_run

    path = _red_run(tmp_path)
    doc = json.loads(path.read_text())
    dropped = ["decode_tps median 100.000 is 33.3 % below 150.000 at baseline aaaaaaa (...)"]
    doc["cases"]["tiny-simple-random"]["baseline"]["regressions"] = dropped
    doc["options"]["repeat"] = 1
    path.write_text(json.dumps(doc))
    [entry, *_] = night.plan([load_run(path)])[0]
    assert (entry["case"], entry["metric"], entry["repeat"]) == ("tiny-simple-random", "decode_tps", 4)


def test_a_failed_case_without_a_baseline_is_said_not_bisected(tmp_path: Path) -> None:
    from specsuite.results.document import load_run

    path = _red_run(tmp_path)
    doc = json.loads(path.read_text())
    doc["cases"]["tiny-dspark-random"]["baseline"] = None
    path.write_text(json.dumps(doc))
    entries, notes = night.plan([load_run(path)])
    assert "tiny-dspark-random" not in {e["case"] for e in entries}
    assert notes == [
        "tiny-dspark-random (floor): no earlier commit measured on this setup, nothing to bisect"
    ]


def test_plan_command_writes_github_outputs(tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "out"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    assert bisect.main(["--plan", str(_red_run(tmp_path).parent)]) == 0
    printed = json.loads(capsys.readouterr().out)
    lines = out.read_text().splitlines()
    assert lines[0] == f"plan={json.dumps(printed, separators=(',', ':'))}"
    assert lines[1] == "cases=tiny-simple-random,tiny-mtp-random,tiny-dspark-random"


@pytest.mark.parametrize(
    ("text", "why"),
    [("{", "not a bisect plan"), ('[{"case": "x"}]', "a JSON list of objects with bad, case, good")],
)
def test_a_plan_that_is_not_one(text: str, why: str) -> None:
    with pytest.raises(UserError, match=why):
        night.parse_plan(text)


def test_commit_links() -> None:
    sha = "ab" * 20
    for repo in ("https://github.com/ggml-org/llama.cpp", "https://github.com/ggml-org/llama.cpp.git",
                 "git@github.com:ggml-org/llama.cpp.git"):  # fmt: skip
        assert commit_url(repo, sha) == f"https://github.com/ggml-org/llama.cpp/commit/{sha}"
    assert commit_url("/srv/mirror/llama.cpp", sha) is None


# --- the bounds, on a real git bisect ---------------------------------------------------------------------


@pytest.mark.slow
def test_max_steps_stops_and_gives_the_range_left(env, monkeypatch, capfd) -> None:
    shas = _repo(env, monkeypatch, [GOOD] * 6 + [WORSE] * 11)  # 16 commits to bisect: 4 steps
    summary = env / "job-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert bisect.main(_args(env, shas[0], shas[-1], "--max-steps", "1")) == 1
    doc = _result(env)
    assert doc["status"] == "stopped" and doc["first_bad"] is None and doc["steps"] == 1
    good, bad, left = doc["range_left"]
    assert shas.index(good) < 6 <= shas.index(bad) and left == shas.index(bad) - shas.index(good)
    assert left < 16  # one step halved it
    first = summary.read_text().splitlines()[0]
    assert first.startswith("### specsuite bisect: could not pin it (tiny-simple-random, accept_rate")
    assert "--max-steps 1 reached" in first and f"{good[:10]}..{bad[:10]} ({left} commits)" in first
    assert "could not pin it" in capfd.readouterr().out
    _no_bisect_left(env)


@pytest.mark.slow
def test_a_plan_is_bisected_case_after_case(env, monkeypatch, capfd) -> None:
    shas = _repo(env, monkeypatch, [GOOD] * 2 + [WORSE] * 2)
    summary = env / "job-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.chdir(env)
    entry = {"case": CASE, "metric": "accept_rate", "rtol": 0.05, "repeat": 1}
    plan = [{**entry, "good": shas[0], "bad": shas[-1]}, {**entry, "good": shas[0], "bad": shas[1]}]
    argv = ["--from-plan", json.dumps(plan), "--max-steps", "5", "--builder", "test_bisect:fake_build"]
    monkeypatch.setattr("specsuite.common.paths.RESULTS_DIR", env / "results")
    assert bisect.main(argv) == 1  # the second entry is not bracketed: its bad commit is good
    lines = summary.read_text().splitlines()
    assert lines[0].startswith(f"### specsuite bisect: first bad commit {shas[2]} 'commit 2:")
    assert any(line.startswith("### specsuite bisect: not_bracketed") for line in lines)
    assert any("could not bisect tiny-simple-random by accept_rate" in line for line in lines)


def test_range_left_reads_the_marks_of_the_log() -> None:
    g, b1, b2 = "1" * 40, "2" * 40, "3" * 40
    log = f"# bad: [{b1}] c8\n# good: [{g}] c1\ngit bisect start 'x' 'y'\n# bad: [{b2}] c4\n"
    log += f"git bisect bad {b2}"
    assert bisect_git.range_left(log) == (g, b2)
    assert bisect_git.range_left(f"# bad: [{b1}] c8\n") is None
