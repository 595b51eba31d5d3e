"""A run a person can follow, on the real CPU build: a line per case as it starts and as it ends, an
interrupted run that says so first and names the cases it never ran, a tier that needs none of the `test`
extra, junit.xml named after the tier, no table of every case before the run.

Eight synthetic cases on one target (one baseline server): a few seconds of real llama-server work.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from fakeserver import real_binary

from specsuite.common import paths

CASES = [
    f"tiny-{method}-{kind}" for kind in ("fixed", "n8") for method in ("simple", "eagle3", "dflash", "dspark")
]
# The `test` extra's modules: a tier must run without any of them (the noxfile's tier sessions leave the
# extra out). A module finder that refuses them, in every Python of the run (run-tier, its pytest). The
# extra's pyyaml is not among them: gguf depends on it, so every install of specsuite has it.
TEST_EXTRA = ("selenium", "huggingface_hub", "uv")
BLOCKER = f"""
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {TEST_EXTRA!r}:
            raise ImportError(f"{{name}} is in the test extra, which a tier does not install")
sys.meta_path.insert(0, Refuse())
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from specsuite.cases.schema import load_cases, select_cases
    from specsuite.models.fetch import FetchOptions, fetch_models

    root = tmp_path_factory.mktemp("progress")
    models = sorted({m for c in select_cases(load_cases(), ",".join(CASES)) for m in c.models})
    fetch_models(FetchOptions(models=models, model_dir=root / "models", tty=False))
    (root / "site").mkdir()
    (root / "site" / "sitecustomize.py").write_text(BLOCKER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEC_")}
    return {
        **env,
        "LLAMA_SERVER_BIN_PATH": str(real_binary()),
        "SPEC_MODEL_DIR": str(root / "models"),
        "SPEC_HISTORY": str(root / "history.sqlite"),
        "SPEC_CACHE_DIR": str(root / "cache"),
        "PYTHONPATH": str(root / "site"),
        "OMP_WAIT_POLICY": "PASSIVE",
    }


def _start(env: dict[str, str], out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "specsuite", "run-tier", ",".join(CASES)],
        cwd=paths.REPO_ROOT, env={**env, "SPEC_RESULTS_DIR": str(out)}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip


def test_the_blocker_refuses_the_test_extra(env: dict[str, str]) -> None:
    """The run below proves something only if the test extra really cannot be imported there."""
    proc = subprocess.run([sys.executable, "-c", "import selenium"], env=env, capture_output=True, text=True)
    assert proc.returncode == 1 and "selenium is in the test extra" in proc.stderr


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_each_case_says_when_it_starts_and_how_it_ended(env: dict[str, str], tmp_path: Path) -> None:
    proc = _start(env, tmp_path / "r")
    out, _ = proc.communicate(timeout=500)
    assert proc.returncode == 0, out
    lines = out.splitlines()
    for i, name in enumerate(CASES, 1):
        start = lines.index(f"[{i}/8] {name} ...")
        [end] = [ln for ln in lines if ln.startswith(f"[{i}/8] {name}: ")]
        assert re.fullmatch(
            rf"\[{i}/8\] {name}: passed in [0-9.]+ s \(accept rate [01]\.[0-9]{{4}}, speedup [0-9.]+\)", end
        ), end
        assert lines.index(end) > start
    assert not any(re.fullmatch(r".*test_speculative\.py \.+.*|\.+", ln) for ln in lines), out  # no dots
    assert any(ln.startswith("time budget per case: 60 s + 10 × its requests' time") for ln in lines), out
    # pytest's plumbing stays out: its header (platform, rootdir, plugins, pytest-timeout's), the collected
    # count, the xml file and the "N passed in" footer; the run's last line is its verdict
    for plumbing in ("test session starts", "rootdir:", "plugins:", "timeout:", "collected ", "xml file"):
        assert plumbing not in out, out
    assert not re.search(r"\b8 passed in [0-9.]+s", out), out
    _ends_with_its_verdict(lines, "verdict: PASSED: 8 passed")
    assert "why not" not in out  # no table of every case before the run
    suite = ET.parse(tmp_path / "r" / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("name") == "synthetic"


def _ends_with_its_verdict(lines: list[str], said: str) -> None:
    """The results folder, the verdict, then only the verdict's own indented lines (what weakens it)."""
    at = max(i for i, ln in enumerate(lines) if ln.startswith("verdict: "))
    assert lines[at] == said and lines[at - 1].startswith("results: "), lines[-12:]
    assert all(ln.startswith("  ") for ln in lines[at + 1 :]), lines[-12:]


def _holding(folder: Path) -> Path:
    """The real build behind a wrapper that holds the sixth case's server (the only one given the EAGLE-3
    draft and a draft length of 8) before it starts, until a signal ends it: the interrupt then lands in
    that case however slowly the test reads the run's lines (tiny cases take a second each; on a busy
    machine the run was past the eighth before the test sent it)."""
    exe = folder / "llama-server"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(
        "#!/bin/sh\n"
        'case " $* " in *synth-draft-eagle3-fixed.gguf*"-max 8 "*) exec sleep 600;; esac\n'
        f'exec {shlex.quote(str(real_binary()))} "$@"\n'
    )
    exe.chmod(0o755)
    return exe


def _lines_until(proc: subprocess.Popen[str], wanted: str, seen: list[str]) -> None:
    timer = threading.Timer(300, proc.kill)  # a run that never gets there: the test fails, not hangs
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line.rstrip("\n"))
            if line.startswith(wanted):
                return
    finally:
        timer.cancel()


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_an_interrupted_run_says_so_first_and_names_the_cases_it_never_ran(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Ctrl-C (SIGINT to run-tier's process group, as a terminal sends it) while the sixth of eight cases
    runs: the first line of the summary says INTERRUPTED, how many finished, the case it stopped in and
    the cases it never ran; results.json records those as not run."""
    proc = _start({**env, "LLAMA_SERVER_BIN_PATH": str(_holding(tmp_path / "bin"))}, tmp_path / "r")
    seen: list[str] = []
    _lines_until(proc, f"[6/8] {CASES[5]} ...", seen)
    os.killpg(proc.pid, signal.SIGINT)
    rest, _ = proc.communicate(timeout=300)
    out = "\n".join(seen) + "\n" + rest
    assert proc.returncode == 130, out
    cases = json.loads((tmp_path / "r" / "results.json").read_text())["cases"]
    assert list(cases) == CASES  # every selected case is in the record, in order
    never = [n for n, c in cases.items() if c["reason"] == "not_run"]
    stopped = [n for n, c in cases.items() if c["reason"] == "interrupted"]
    finished = [n for n, c in cases.items() if c["status"] == "passed"]
    assert never and never == CASES[-len(never) :] and len(finished) >= 5
    assert finished == CASES[: len(finished)]
    assert all(cases[n]["status"] == "interrupted" for n in never + stopped)
    head = (tmp_path / "r" / "summary.md").read_text().splitlines()[0]
    said = [f"{len(finished)} of 8 case(s) finished"]
    said += [f"stopped in {', '.join(stopped)}"] if stopped else []
    said += [f"not run: {', '.join(never)}"]
    assert head.endswith(f"run `{json.loads((tmp_path / 'r' / 'results.json').read_text())['run_id']}`: "
                         f"INTERRUPTED: {'; '.join(said)}"), head  # fmt: skip
    assert head in out  # run-tier prints the summary: its first line is the headline
    # the run's last lines are its verdict (no green "5 passed" footer of pytest's before or after it)
    _ends_with_its_verdict(out.rstrip("\n").splitlines(), f"verdict: {head.partition('`: ')[2]}")
    assert not re.search(r"\b[0-9]+ passed", out.partition("[6/8]")[2]), out
    if stopped:
        assert f"[6/8] {stopped[0]}: interrupted after " in out or f"{stopped[0]}: interrupted" in out


# --- what a running case is doing (issue 51: 3 min 31 s with only `[1/8] ngram-simple ...` on screen) ----

ONE = "tiny-simple-fixed"
EVERY = ("-o", "spec_progress_s=0.3")  # a log's line every 0.3 s (30 s by default), for a test's short case


def _slow_start(folder: Path) -> Path:
    """The real build behind a wrapper whose speculative server (the only one given a draft model) takes 2 s
    before it starts: the case's line must say it is loading that server."""
    exe = folder / "llama-server"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(
        "#!/bin/sh\n"
        'case " $* " in *" --spec-draft-model "*) sleep 2;; esac\n'
        f'exec {shlex.quote(str(real_binary()))} "$@"\n'
    )
    exe.chmod(0o755)
    return exe


def _run_one(env: dict[str, str], out: Path, exe: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specsuite", "run-tier", ONE, *EVERY],
        cwd=paths.REPO_ROOT, env={**env, "SPEC_RESULTS_DIR": str(out), "LLAMA_SERVER_BIN_PATH": str(exe)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_in_a_log_a_running_case_says_again_what_it_is_doing(env: dict[str, str], tmp_path: Path) -> None:
    """Not a terminal (CI's log): the case's line again every spec_progress_s seconds, naming its step."""
    proc = _run_one(env, tmp_path / "r", _slow_start(tmp_path / "bin"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    loading = [ln for ln in lines if ln.startswith(f"[1/1] {ONE} ... loading the case's server (")]
    assert len(loading) >= 3, proc.stdout  # 2 s at a line every 0.3 s
    assert all(
        re.fullmatch(rf"\[1/1\] {ONE} \.\.\. loading the case's server \([0-9.]+ s\)", ln) for ln in loading
    )
    start, end = lines.index(f"[1/1] {ONE} ..."), lines.index(loading[0])
    assert start < end < next(i for i, ln in enumerate(lines) if ln.startswith(f"[1/1] {ONE}: passed in "))
    assert "\r" not in proc.stdout and "\x1b[" not in proc.stdout  # a log gets whole lines


def _fake_slow_requests(folder: Path) -> Path:
    """tests/fakellama.py (a fake: the real build answers the synthetic prompts in milliseconds): each
    speculative request takes 0.6 s, so each step of the case lasts long enough to be seen."""
    from fakellama import fake_llama

    return fake_llama(folder, request_sleep_s=0.6, drafted=12, accepted=12, drafts=4, per_pos=[4, 4, 4])


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_running_case_counts_the_requests_of_its_cold_pass_and_rounds(
    env: dict[str, str], tmp_path: Path
) -> None:
    proc = _run_one(env, tmp_path / "r", _fake_slow_requests(tmp_path / "bin"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = [ln.partition(" ... ")[2] for ln in proc.stdout.splitlines() if ln.startswith(f"[1/1] {ONE} ... ")]
    assert any(re.fullmatch(r"cold pass, request [1-3] of 3 \([0-9.]+ s\)", s) for s in said), said
    assert any(re.fullmatch(r"round 1 of 1, request [1-6] of 6 \([0-9.]+ s\)", s) for s in said), said
    steps = [s.partition(",")[0].partition(" (")[0] for s in said]
    assert steps.index("cold pass") < steps.index("round 1 of 1")  # in the order the case takes them


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_on_a_terminal_the_case_line_is_rewritten_in_place(env: dict[str, str], tmp_path: Path) -> None:
    """A terminal (a pseudo-terminal here): the case's one line, rewritten every second (carriage return,
    erase to the end of the line), then replaced by its end line."""
    import pty

    exe = _fake_slow_requests(tmp_path / "bin")
    main, child = pty.openpty()
    run_env = {
        **env,
        "SPEC_RESULTS_DIR": str(tmp_path / "r"),
        "LLAMA_SERVER_BIN_PATH": str(exe),
        "COLUMNS": "200",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "specsuite", "run-tier", ONE],
        cwd=paths.REPO_ROOT, env=run_env, stdout=child, stderr=child, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    os.close(child)
    got = b""
    while True:  # read until the run closes the terminal (EIO on Linux)
        try:
            chunk = os.read(main, 4096)
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    os.close(main)
    assert proc.wait(timeout=300) == 0, got.decode(errors="replace")
    text = got.decode(errors="replace")
    rewrite = "\r\x1b[K"
    assert f"{rewrite}[1/1] {ONE} ... cold pass, request " in text, text
    assert re.search(rf"\r\x1b\[K\[1/1\] {ONE}: passed in [0-9.]+ s \(accept rate 1\.0000", text), text
    assert f"[1/1] {ONE} ...\r\n" not in text  # the start line is rewritten, not left above the others
