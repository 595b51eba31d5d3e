"""run-tier: options, the GPU gate before downloads, SPEC_METHODS selection, signals down the chain.

The chain is nox -> ``specsuite run-tier`` -> pytest -> llama-server; the tests here start the real chain
from run-tier down (with a fake llama-server that really serves HTTP) and signal it like a runner does.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakellama import fake_llama
from readonly import sandbox_dir, sandbox_env, specsuite_readonly

from specsuite import cli
from specsuite.common import errors, paths
from specsuite.common.errors import UserError
from specsuite.common.filehash import sha256_file
from specsuite.suite import tier
from specsuite.suite.tier import exit_code, parser, pytest_command

SYNTH = "tiny-simple-fixed"
DSPARK = "tiny-dspark-fixed"
# What a CUDA build prints on a machine without a GPU: the backend is named, no device listed.
NO_GPU = "ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected\nAvailable devices:\n"
# Counters every synthetic "-fixed" case passes: each of 4 drafts of 3 tokens fully accepted.
ALL_ACCEPTED = {"drafted": 12, "accepted": 12, "drafts": 4, "per_pos": [4, 4, 4]}
REFUSED = "--list-devices shows no GPU, and the selected cases are GPU tier"


@pytest.fixture
def sandbox() -> Iterator[Path]:
    with sandbox_dir() as folder:
        yield folder


def test_options_and_pytest_args_are_told_apart() -> None:
    args, rest = parser().parse_known_args(["smoke", "--allow-missing", "--repeat", "3", "-x", "--lf"])
    assert (args.tier, args.allow_missing, args.repeat, rest) == ("smoke", True, 3, ["-x", "--lf"])
    bad_ones = (["smoke", "--repeat", "0"], ["smoke", "--repeat", "abc"], ["smoke", "--repeat", "101"],
                ["smoke", "--rtol", "2"])  # fmt: skip
    for bad in bad_ones:
        with pytest.raises(SystemExit):
            parser().parse_args(bad)


def test_unknown_selector_is_one_clear_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LLAMA_SERVER_BIN_PATH", str(tmp_path / "absent"))
    with pytest.raises(UserError, match="unknown case or tier 'weekly'; valid tiers: smoke, synthetic"):
        tier.main(["weekly"])


def test_missing_binary_points_at_nox_build(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LLAMA_SERVER_BIN_PATH", str(tmp_path / "nope" / "llama-server"))
    monkeypatch.setenv("SPEC_RESULTS_DIR", str(tmp_path / "r"))
    with pytest.raises(UserError, match="specsuite build"):
        tier.main(["smoke"])
    assert not (tmp_path / "r").exists()  # nothing half-written


def test_pytest_command_has_junit_and_keeps_the_cache_in_the_per_user_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SPEC_CACHE_DIR", str(tmp_path / "cache"))
    cmd = pytest_command(Path("/r"), ["-x", "--lf"])
    assert cmd[1:3] == ["-m", "pytest"] and "--junitxml=/r/junit.xml" in cmd
    assert cmd[-2:] == ["-x", "--lf"] and "no:cacheprovider" not in cmd  # --lf needs the cache
    assert f"cache_dir={tmp_path / 'cache' / 'pytest'}" in cmd  # not beside an installed package's module
    ini = (Path(tier.__file__).parent / "pytest.ini").read_text()
    assert "no:cacheprovider" not in ini


def test_gpu_tier_on_a_cpu_build_is_refused_before_any_download(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("LLAMA_SERVER_BIN_PATH", str(fake_llama(tmp_path / "bin")))
    monkeypatch.setenv("SPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SPEC_MODEL_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("SPEC_RESULTS_DIR", str(tmp_path / "r"))
    monkeypatch.delenv("SPEC_ALLOW_CPU", raising=False)
    with pytest.raises(UserError, match="it is a CPU build, and the selected cases are GPU tier"):
        tier.main(["compact"])
    assert not (tmp_path / "models").exists() and not (tmp_path / "r").exists()


def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, exe: Path) -> None:
    monkeypatch.setenv("LLAMA_SERVER_BIN_PATH", str(exe))
    monkeypatch.setenv("SPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SPEC_MODEL_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("SPEC_RESULTS_DIR", str(tmp_path / "r"))
    monkeypatch.delenv("SPEC_ALLOW_CPU", raising=False)


def test_gpu_tier_on_a_gpu_build_without_a_gpu_is_one_line_before_any_download(
    tmp_path, monkeypatch, capsys
) -> None:
    _isolated(monkeypatch, tmp_path, fake_llama(tmp_path / "bin", devices=NO_GPU))
    assert cli.main(["run-tier", "compact"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "it is a cuda build but " + REFUSED in err
    assert not (tmp_path / "models").exists() and not (tmp_path / "r").exists()


def test_allow_cpu_lets_a_gpu_tier_past_the_gate(tmp_path, monkeypatch, capsys) -> None:
    _isolated(monkeypatch, tmp_path, fake_llama(tmp_path / "bin", devices=NO_GPU))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: the fetch after the gate fails
    monkeypatch.setenv("SPEC_FETCH_ATTEMPTS", "1")
    monkeypatch.setenv("SPEC_FETCH_BACKOFF_S", "0.01")
    assert cli.main(["run-tier", "compact", "--allow-cpu"]) != 0
    err = capsys.readouterr().err
    assert REFUSED not in err and "HF_ENDPOINT" in err, err  # it got as far as downloading


def test_allow_cpu_gpu_case_is_flagged_in_the_summarys_first_line(tmp_path, chain_env, monkeypatch) -> None:
    """The GPU-tier run the gate let through says so in its headline (a compact case on synthetic models)."""
    from specsuite.cases.schema import parse_case_file
    from specsuite.measure import runner
    from specsuite.suite import session as suite

    text = (paths.CASES_FILE.read_text().split("[[case]]")[0] + "[[case]]\n" + f"name = {SYNTH!r}\n"
            'tier = "compact"\nspec_type = "draft-simple"\ntarget = "synth-target-llama-fixed.gguf"\n'
            'draft = "synth-draft-llama-fixed.gguf"\nn_max = 3\nprompts = "synthetic"\nn_predict = 8\n'
            "min_accept_rate = 0.9\nmin_accept_len = 3.0\n")  # fmt: skip
    case = parse_case_file(text).cases[0]
    for key, value in chain_env.items():
        monkeypatch.setenv(key, value)
    exe = fake_llama(tmp_path / "bin", devices=NO_GPU, **ALL_ACCEPTED)
    monkeypatch.setenv("LLAMA_SERVER_BIN_PATH", str(exe))
    monkeypatch.setenv("SPEC_ALLOW_CPU", "1")
    session = suite.open_session(SYNTH, [case], tmp_path / "r")
    assert runner.run_case(case, session).status == "passed"
    assert suite.finish_session(session)
    summary = (tmp_path / "r" / "summary.md").read_text().splitlines()
    # a CUDA build without a GPU (NO_GPU): both are said
    headline = "PASSED, with warnings (GPU TIER WITHOUT A GPU; CUDA BINARY ON THE CPU): 1 passed"
    assert summary[0].endswith(headline), summary[0]
    assert "GPU TIER ON A CPU BUILD OR WITHOUT A GPU (--allow-cpu)" in summary[2]


@pytest.mark.parametrize("where", ["under a file", "read-only parent"])
def test_unwritable_results_folder_is_one_line_before_any_download(
    tmp_path, monkeypatch, capsys, where
) -> None:
    _isolated(monkeypatch, tmp_path, fake_llama(tmp_path / "bin"))
    parent = tmp_path / "parent"
    if where == "under a file":
        parent.write_text("x")
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder")
        parent.mkdir(mode=0o555)
    monkeypatch.setenv("SPEC_RESULTS_DIR", str(parent / "run"))
    assert cli.main(["run-tier", SYNTH]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"error: cannot create the results folder {parent / 'run'}")
    assert "SPEC_RESULTS_DIR" in err and not (tmp_path / "models").exists()


COLLECT = ("--collect-only", "-q")


def _collect(methods: str | None, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SPEC_METHODS"}
    if methods is not None:
        env["SPEC_METHODS"] = methods
    suite = pytest_command(Path("unused"), [])[:-1]  # run-tier's own pytest command, without --junitxml
    return subprocess.run(
        [*suite, *extra, *COLLECT],
        cwd=paths.REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_spec_methods_selection() -> None:
    smoke = _collect("smoke")
    assert "test_speculative[ngram-mod]" in smoke.stdout and "[mtp]" not in smoke.stdout
    both = _collect("mtp,eagle3")
    assert "test_speculative[mtp]" in both.stdout and "test_speculative[eagle3]" in both.stdout
    assert "[dflash]" not in both.stdout
    nothing = _collect(None)
    assert "test_speculative" not in nothing.stdout and "deselected" in nothing.stdout


def test_the_plugin_stays_out_of_another_projects_pytest_run(tmp_path) -> None:
    """specsuite in a venv must not change another project's pytest run there: the plugin is loaded by the
    suite's own pytest.ini only, so no SPEC_* variable is read (SPEC_REPEAT=abc ended one with exit 4)."""
    (tmp_path / "test_theirs.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('x', [1, 2])\ndef test_x(x):\n    assert x\n"
    )
    env = {**os.environ, "SPEC_REPEAT": "abc", "SPEC_METHODS": "smoke"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0 and "2 passed" in proc.stdout, proc.stdout + proc.stderr
    [plugins] = [ln for ln in proc.stdout.splitlines() if ln.startswith("plugins:")] or ["plugins: none"]
    assert "specsuite" not in plugins


def test_spec_methods_unknown_lists_valid_ones() -> None:
    bad = _collect("medusa")
    assert bad.returncode != 0
    assert "unknown case or tier 'medusa'" in bad.stderr and "valid cases: mtp" in bad.stderr


@pytest.mark.parametrize(
    ("typo", "meant"), [("tiny-mtp-rndom", "tiny-mtp-random"), ("smok", "smoke"), ("eagle-3", "eagle3")]
)
def test_a_mistyped_tier_or_case_is_answered_with_the_nearest_name(
    typo: str, meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["run-tier", typo]) == 2
    assert capsys.readouterr().err == (
        f"error: unknown case or tier {typo!r}: did you mean {meant!r}? "
        "(valid tiers: smoke, synthetic, compact, nightly, all)\n"
    )


def test_run_tier_help_says_where_other_arguments_go_and_what_limits_a_case(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["run-tier", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Every other argument goes to pytest: -x stops at the first failed case" in text
    assert "-v shows pytest's own line per case" in text
    assert "time budget is SPEC_BUDGET_MIN_S (60 s) + --budget-factor × the time its requests" in text
    assert "--budget-factor F a case may take F times its baseline's time for its requests" in text


# --- the real chain: run-tier -> pytest -> (fake) llama-server ------------------------------------------


@pytest.fixture
def chain_env(tmp_path: Path) -> dict[str, str]:
    from specsuite.models.fetch import FetchOptions, fetch_models

    models = tmp_path / "models"
    fetch_models(FetchOptions(methods=[SYNTH], model_dir=models, tty=False))
    return {
        **os.environ,
        "SPEC_MODEL_DIR": str(models),
        "SPEC_CACHE_DIR": str(tmp_path / "cache"),
        "SPEC_HISTORY": str(tmp_path / "history.sqlite"),
        "SPEC_RESULTS_DIR": str(tmp_path / "r"),
    }


def _run_tier(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specsuite", "run-tier", *args],
        cwd=paths.REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("flag", "code", "status"), [((), 1, "failed"), (("--allow-missing",), 1, "skipped")]
)
def test_lost_method_fails_by_default_and_all_skipped_is_not_green(
    tmp_path, chain_env, flag, code, status
) -> None:
    exe = fake_llama(tmp_path / "bin", drop_types=["draft-simple"])
    proc = _run_tier({**chain_env, "LLAMA_SERVER_BIN_PATH": str(exe)}, SYNTH, *flag)
    assert proc.returncode == code, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "r" / "results.json").read_text())
    assert (doc["cases"][SYNTH]["status"], doc["cases"][SYNTH]["reason"]) == (
        status,
        "binary_no_draft-simple",
    )
    summary = (tmp_path / "r" / "summary.md").read_text().splitlines()
    assert "FAILED" in summary[0]
    if flag:
        assert "no selected case ran" in summary[0] and "STRICT OFF" in "\n".join(summary[:6])


def test_binary_without_dspark_fails_strict(tmp_path, chain_env) -> None:
    exe = fake_llama(tmp_path / "bin", drop_types=["draft-dspark"])
    proc = _run_tier({**chain_env, "LLAMA_SERVER_BIN_PATH": str(exe)}, DSPARK)
    assert proc.returncode != 0 and "binary_no_dspark" in proc.stdout, proc.stdout + proc.stderr
    rec = json.loads((tmp_path / "r" / "results.json").read_text())["cases"][DSPARK]
    assert (rec["status"], rec["reason"]) == ("failed", "binary_no_dspark")


def test_binary_without_dspark_with_allow_missing_is_green_and_says_strict_off(tmp_path, chain_env) -> None:
    exe = fake_llama(tmp_path / "bin", drop_types=["draft-dspark"], **ALL_ACCEPTED)
    env = {**chain_env, "LLAMA_SERVER_BIN_PATH": str(exe)}
    proc = _run_tier(env, f"{SYNTH},{DSPARK}", "--allow-missing")  # one case must run to be green
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cases = json.loads((tmp_path / "r" / "results.json").read_text())["cases"]
    assert (cases[DSPARK]["status"], cases[DSPARK]["reason"]) == ("skipped", "binary_no_dspark")
    assert cases[SYNTH]["status"] == "passed"
    summary = (tmp_path / "r" / "summary.md").read_text().splitlines()
    assert summary[0].endswith("PASSED, with warnings (STRICT OFF: 1 skipped): 1 passed, 1 skipped")
    assert summary[2] == f"- **SKIPPED 1: {DSPARK} (binary_no_dspark)**"


def test_not_a_llama_server_fails_with_one_line(tmp_path, chain_env) -> None:
    exe = tmp_path / "llama-server"
    exe.write_text("#!/bin/sh\necho 'usage: --help'\n")
    exe.chmod(0o755)
    proc = _run_tier({**chain_env, "LLAMA_SERVER_BIN_PATH": str(exe)}, SYNTH)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: {exe}: not a llama-server with speculative decoding: its --help lists no --spec-type option"
        ". "
        "Build one with `specsuite build` or point LLAMA_SERVER_BIN_PATH at one."
    ]


def test_a_case_past_its_time_budget_fails_over_budget_naming_the_rate_it_decoded_at(
    tmp_path, chain_env
) -> None:
    """A speculative server 2500 times slower than its baseline (0.4 tok/s against 1000, each request 0.5 s):
    with a budget of 2 s + 1 × its tokens at the baseline's rate the case fails over_budget in seconds, the
    rate it decoded at named, instead of running into pytest-timeout's 900 s as a harness error."""
    exe = fake_llama(tmp_path / "bin", base_ms_per_token=1.0, spec_ms_per_token=2500.0, request_sleep_s=0.5)
    env = {**chain_env, "LLAMA_SERVER_BIN_PATH": str(exe)}
    env.update(SPEC_BUDGET_FACTOR="1", SPEC_BUDGET_MIN_S="2")
    proc = _run_tier(env, SYNTH)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rec = json.loads((tmp_path / "r" / "results.json").read_text())["cases"][SYNTH]
    assert (rec["status"], rec["reason"]) == ("failed", "over_budget")
    assert rec["wall_s"] < 60  # generous: the point is seconds, not pytest-timeout's 900 s
    assert re.fullmatch(
        r"over its time budget of 2\.[0-9] s = 2 s \+ 1 × 0\.[0-9]+ s, its baseline's time for 320 tokens at "
        r"1000\.0 tok/s and at most [0-9]+ prompt tokens at 3000\.0 tok/s: its "
        r"speculative server decoded at 0\.4 tok/s \([0-9]+ tokens finished\)\. A slower machine gets more "
        r"time by itself; raise it with run-tier --budget-factor \(SPEC_BUDGET_FACTOR, 0: no budget\) or "
        r"SPEC_BUDGET_MIN_S",
        rec["message"],
    ), rec["message"]
    assert f"[1/1] {SYNTH}: failed in " in proc.stdout and "(over_budget)" in proc.stdout
    assert _pids_of(str(exe)) == []  # both servers stopped


def _pids_of(pattern: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_run_tier_records_the_interrupted_case_and_leaves_nothing_running(
    tmp_path, chain_env, sig
) -> None:
    exe = fake_llama(tmp_path / "bin", request_sleep_s=60.0)  # the case hangs in its first request
    proc = subprocess.Popen(
        [sys.executable, "-m", "specsuite", "run-tier", SYNTH],
        cwd=paths.REPO_ROOT,
        env={**chain_env, "LLAMA_SERVER_BIN_PATH": str(exe)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    results = tmp_path / "r" / "results.json"
    deadline = time.monotonic() + 300  # generous: a loaded machine starts the chain slowly
    while time.monotonic() < deadline:  # until the speculative server serves its first (hanging) request
        if results.exists() and _pids_of(f"{exe}.*--spec-type"):
            break
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out
    rec = json.loads(results.read_text())["cases"][SYNTH]
    assert (rec["status"], rec["reason"]) == ("interrupted", "interrupted"), out
    first = (tmp_path / "r" / "summary.md").read_text().splitlines()[0]
    assert first.endswith(f": INTERRUPTED: 0 of 1 case(s) finished; stopped in {SYNTH}")
    for _ in range(50):
        if not _pids_of(str(exe)):
            break
        time.sleep(0.1)
    assert _pids_of(str(exe)) == []  # neither the baseline nor the speculative server outlived the run


# --- exit codes: pytest's mapped onto the suite's (common.errors) ----------------------------------------


@pytest.mark.parametrize(
    ("pytest_code", "summary", "ours"),
    [
        (0, True, errors.OK),
        (1, True, errors.FAILED),  # a red run: its summary says why
        (1, False, errors.INTERNAL),  # pytest failed but no verdict was written: not a regression
        (0, False, errors.INTERNAL),  # "passed" without a verdict: nothing ran that could be called green
        (2, False, errors.INTERRUPTED),
        (3, False, errors.INTERNAL),
        (4, False, errors.BAD_INPUT),  # pytest's usage error
        (5, False, errors.BAD_INPUT),  # no test collected: a -k that matches nothing
        (-9, False, errors.INTERNAL),  # killed
    ],
)
def test_pytests_exit_codes_become_the_suites(pytest_code: int, summary: bool, ours: int) -> None:
    assert exit_code(pytest_code, summary) == ours


def test_a_pytest_usage_error_is_bad_input_not_a_regression(tmp_path, chain_env) -> None:
    exe = fake_llama(tmp_path / "bin", **ALL_ACCEPTED)
    proc = _run_tier({**chain_env, "LLAMA_SERVER_BIN_PATH": str(exe)}, SYNTH, "--no-such-pytest-option")
    assert proc.returncode == errors.BAD_INPUT, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "results:" not in proc.stdout  # the folder (SPEC_RESULTS_DIR) holds nothing of a run (issue 35)


def test_a_folder_holding_an_earlier_runs_summary_is_refused_and_left_as_it_was(tmp_path, chain_env) -> None:
    exe = fake_llama(tmp_path / "bin", **ALL_ACCEPTED)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "summary.md").write_text("### an earlier run: PASSED\n")
    proc = _run_tier({**chain_env, "LLAMA_SERVER_BIN_PATH": str(exe)}, SYNTH)
    assert proc.returncode == errors.BAD_INPUT and "an earlier run" not in proc.stdout
    assert proc.stderr.startswith(
        f"error: the results folder {tmp_path / 'r'} already holds a run (summary.md)"
    )
    assert (tmp_path / "r" / "summary.md").read_text() == "### an earlier run: PASSED\n"


def test_a_read_only_results_folder_is_one_line_before_any_download(sandbox) -> None:
    exe = fake_llama(sandbox / "bin", **ALL_ACCEPTED)
    results = sandbox / "results"
    results.mkdir()
    env = sandbox_env(sandbox, LLAMA_SERVER_BIN_PATH=str(exe), SPEC_RESULTS_DIR=str(results),
                      SPEC_MODEL_DIR=str(sandbox / "models"))  # fmt: skip
    proc = specsuite_readonly("run-tier", SYNTH, folders=[results], env=env, cwd=paths.REPO_ROOT)
    assert proc.returncode == errors.BAD_INPUT, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"error: cannot write into the results folder {results}")
    assert proc.stderr.count("\n") == 1 and not (sandbox / "models").exists()


@pytest.mark.parametrize("plant", ["junit.xml", "logs"])
def test_a_link_planted_in_a_reused_results_folder_is_refused_before_anything(
    tmp_path, chain_env, plant: str
) -> None:
    """pytest writes junit.xml and the servers their logs by path: nothing may go through a planted link."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.xml").write_text("not yours\n")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / plant).symlink_to(outside / "victim.xml" if plant == "junit.xml" else outside)
    exe = fake_llama(tmp_path / "bin", **ALL_ACCEPTED)
    proc = _run_tier({**chain_env, "LLAMA_SERVER_BIN_PATH": str(exe)}, SYNTH)
    assert proc.returncode == errors.BAD_INPUT, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"error: the results folder {tmp_path / 'r'} holds a link: ")
    assert proc.stderr.count("\n") == 1
    assert [p.name for p in outside.iterdir()] == ["victim.xml"]
    assert (outside / "victim.xml").read_text() == "not yours\n"


# --- issue 35: a run's folder and id are its own --------------------------------------------------------

# run-tier with results/ under the test's folder and every run id of one second (the round saw two runs
# started in the same second share results/…T211307Z-synthetic): only these two names are patched.
SAME_SECOND = """
import pathlib, sys
from specsuite.common import paths
from specsuite.results import document
paths.RESULTS_DIR = pathlib.Path(sys.argv[1])
document.new_run_id = lambda selector: "20261204T211307Z-" + selector
sys.argv = ["specsuite", "run-tier", *sys.argv[2:]]
from specsuite.cli import entry
entry()
"""


def test_two_runs_started_in_the_same_second_get_their_own_folders_and_ids(tmp_path, chain_env) -> None:
    exe = fake_llama(tmp_path / "bin", **ALL_ACCEPTED)
    env = {k: v for k, v in chain_env.items() if k != "SPEC_RESULTS_DIR"}
    env["LLAMA_SERVER_BIN_PATH"] = str(exe)
    root = tmp_path / "results"
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", SAME_SECOND, str(root), SYNTH],
            cwd=paths.REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300)[0] for p in runs]
    assert [p.returncode for p in runs] == [0, 0], outs
    folders = sorted(p for p in root.iterdir())
    assert len(folders) == 2 and folders[0].name == f"20261204T211307Z-{SYNTH}", folders
    assert folders[1].name.startswith(f"20261204T211307Z-{SYNTH}-")  # the run that lost the name
    ids = {json.loads((f / "results.json").read_text())["run_id"] for f in folders}
    assert ids == {f.name for f in folders}
    named = [[f for f in folders if f"results: {f} (" in out] for out in outs]  # each run says its own
    assert sorted(n[0] for n in named if len(n) == 1) == folders, outs
    for folder in folders:
        assert (folder / "summary.md").is_file() and (folder / "logs" / f"{SYNTH}.log").is_file()
    import sqlite3

    with sqlite3.connect(env["SPEC_HISTORY"]) as conn:
        assert sorted(r[0] for r in conn.execute("SELECT run_id FROM runs")) == sorted(ids)


# --- issue 47: text from the binary and its build record is checked, and escaped in markdown -------------

MARKUP = "<img src=x onerror=alert(1)>\n## injected"


def test_a_forged_build_record_beside_the_binary_is_refused_in_one_line(tmp_path, chain_env) -> None:
    """A build-info.json that names this binary (its binary_sha256) but holds markup for a commit and a
    backend: refused before anything runs, one line naming the file, nothing written."""
    exe = fake_llama(tmp_path / "w" / "bin", **ALL_ACCEPTED)
    record = tmp_path / "w" / "build-info.json"
    record.write_text(json.dumps({"binary_sha256": sha256_file(exe), "commit": MARKUP, "backend": MARKUP}))
    job = tmp_path / "job-summary.md"
    env = {**chain_env, "LLAMA_SERVER_BIN_PATH": str(exe), "GITHUB_STEP_SUMMARY": str(job)}
    proc = _run_tier(env, SYNTH)
    assert proc.returncode == errors.BAD_INPUT, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"error: {record}: its commit ") and proc.stderr.count("\n") == 1
    assert "specsuite build" in proc.stderr and "<img" not in proc.stdout
    assert not (tmp_path / "r" / "results.json").exists() and not job.exists()


P_MIN = "minimum speculative decoding probability (greedy) (default: 0.00)"


def test_a_default_stated_in_markup_is_escaped_in_the_summary_and_plain_on_the_terminal(
    tmp_path, chain_env
) -> None:
    """A --help default that carries HTML and markdown, changed between two runs into one history: the
    CONFIGURATION CHANGED line of summary.md and the job summary shows it as text; the terminal plainly."""
    job = tmp_path / "job-summary.md"
    env = {**chain_env, "GITHUB_STEP_SUMMARY": str(job)}
    for commit, default in (("a1a1a1a", "<b>x</b>"), ("b2b2b2b", "**x** ## y")):
        exe = fake_llama(
            tmp_path / commit / "bin",
            version=f"version: 9999 (build 1, commit {commit})",
            help_subs=[[P_MIN, P_MIN.replace("0.00", default)]],
            **ALL_ACCEPTED,
        )
        proc = _run_tier(
            {**env, "LLAMA_SERVER_BIN_PATH": str(exe), "SPEC_RESULTS_DIR": str(tmp_path / commit)}, SYNTH
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
    changed = [ln for ln in (tmp_path / commit / "summary.md").read_text().splitlines() if "CHANGED" in ln]
    assert len(changed) == 1 and changed[0].endswith(
        r": default of --spec-draft-p-min: \<b>x\</b> -> \*\*x\*\* \#\# y**"
    ), changed
    assert changed[0] in job.read_text().splitlines()
    assert "default of --spec-draft-p-min: <b>x</b> -> **x** ## y**" in proc.stdout


# --- issue 51: the README's promises kept ----------------------------------------------------------------


def test_a_second_run_into_one_results_folder_is_refused_before_anything(tmp_path, chain_env) -> None:
    """SPEC_RESULTS_DIR is the folder of one run: a second run into it would overwrite the first's files and
    leave its server logs beside the new ones (83 logs beside a 1-case results.json). One error line, exit
    2, before any download; the first run's folder as it was."""
    exe = fake_llama(tmp_path / "bin", **ALL_ACCEPTED)
    env = {**chain_env, "LLAMA_SERVER_BIN_PATH": str(exe)}
    assert _run_tier(env, SYNTH).returncode == 0
    before = {
        p.relative_to(tmp_path / "r"): p.read_bytes() for p in (tmp_path / "r").rglob("*") if p.is_file()
    }
    proc = _run_tier({**env, "SPEC_MODEL_DIR": str(tmp_path / "models2")}, f"{SYNTH},{DSPARK}")
    assert proc.returncode == errors.BAD_INPUT, proc.stdout + proc.stderr
    assert proc.stderr == (
        f"error: the results folder {tmp_path / 'r'} already holds a run (results.json, summary.md, logs); "
        "SPEC_RESULTS_DIR is the folder of one run: give it a new folder, or unset it (each run then gets "
        "results/<run-id>/)\n"
    )
    after = {
        p.relative_to(tmp_path / "r"): p.read_bytes() for p in (tmp_path / "r").rglob("*") if p.is_file()
    }
    assert after == before and not (tmp_path / "models2").exists()


def test_lf_runs_again_the_cases_that_failed_in_the_last_run(tmp_path, chain_env) -> None:
    """The README's `--lf` (pytest's last-failed list, kept in <cache>/pytest): the second run takes only the
    case that failed in the first."""
    exe = fake_llama(tmp_path / "bin", drop_types=["draft-dspark"], **ALL_ACCEPTED)  # DSPARK fails (strict)
    env = {**chain_env, "LLAMA_SERVER_BIN_PATH": str(exe)}
    first = _run_tier({**env, "SPEC_RESULTS_DIR": str(tmp_path / "r1")}, f"{SYNTH},{DSPARK}")
    assert first.returncode == 1, first.stdout + first.stderr
    again = _run_tier({**env, "SPEC_RESULTS_DIR": str(tmp_path / "r2")}, f"{SYNTH},{DSPARK}", "--lf")
    assert again.returncode == 1, again.stdout + again.stderr
    assert f"[1/1] {DSPARK} ..." in again.stdout.splitlines() and f"] {SYNTH} ..." not in again.stdout
    assert list(json.loads((tmp_path / "r2" / "results.json").read_text())["cases"]) == [DSPARK]
    assert (tmp_path / "cache" / "pytest" / "v" / "cache" / "lastfailed").is_file()


def test_a_k_that_selects_no_case_is_one_error_line(tmp_path, chain_env) -> None:
    exe = fake_llama(tmp_path / "bin", **ALL_ACCEPTED)
    proc = _run_tier({**chain_env, "LLAMA_SERVER_BIN_PATH": str(exe)}, f"{SYNTH},{DSPARK}", "-k", "nosuch")
    assert proc.returncode == errors.BAD_INPUT, proc.stdout + proc.stderr
    assert proc.stderr == (
        f"error: `-k nosuch` selects none of the 2 case(s) of '{SYNTH},{DSPARK}' ({SYNTH}, {DSPARK}); -k "
        "matches case names: -k mtp, -k 'ngram and not mod'\n"
    )
    assert "deselected" not in proc.stdout and "verdict:" not in proc.stdout
    assert not (tmp_path / "r" / "results.json").exists()


def test_a_k_that_selects_no_case_leaves_no_results_folder_of_its_own(tmp_path, chain_env) -> None:
    """With no SPEC_RESULTS_DIR the run claimed results/<run-id>: a run of no case takes it away again."""
    exe = fake_llama(tmp_path / "bin", **ALL_ACCEPTED)
    env = {k: v for k, v in chain_env.items() if k != "SPEC_RESULTS_DIR"}
    env["LLAMA_SERVER_BIN_PATH"] = str(exe)
    proc = subprocess.run(
        [sys.executable, "-c", SAME_SECOND, str(tmp_path / "results"), SYNTH, "-k", "nosuch"],
        cwd=paths.REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == errors.BAD_INPUT and proc.stderr.startswith("error: `-k nosuch` selects none")
    assert list((tmp_path / "results").iterdir()) == []


def _recording_env(tmp_path: Path) -> Path:
    """The fake behind a wrapper that keeps each start's environment in ``tmp_path/env-<pid>.txt``."""
    fake = fake_llama(tmp_path / "fake", **ALL_ACCEPTED)
    exe = tmp_path / "bin" / "llama-server"
    exe.parent.mkdir()
    exe.write_text(f'#!/bin/sh\nenv > "{tmp_path}/env-$$.txt"\nexec {fake} "$@"\n')
    exe.chmod(0o755)
    return exe


def _servers_env(tmp_path: Path) -> list[dict[str, str]]:
    """The environment of each server started (not the probe's: a server is given --port)."""
    found = []
    for file in tmp_path.glob("env-*.txt"):
        env = dict(line.partition("=")[::2] for line in file.read_text().splitlines() if "=" in line)
        found.append(env)
    return found


def test_llama_arg_variables_are_named_in_one_warning(tmp_path, chain_env) -> None:
    """LLAMA_ARG_* (upstream's workflows set some) never reach llama-server: said once, naming them."""
    exe = _recording_env(tmp_path)
    env = {
        **chain_env,
        "LLAMA_SERVER_BIN_PATH": str(exe),
        "LLAMA_ARG_THREADS": "4",
        "LLAMA_ARG_LOG_VERBOSITY": "9",
    }
    proc = _run_tier(env, SYNTH)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    warned = [ln for ln in proc.stderr.splitlines() if "LLAMA_ARG" in ln]
    assert warned == [
        "warning: LLAMA_ARG_LOG_VERBOSITY, LLAMA_ARG_THREADS not passed to llama-server: LLAMA_ARG_* "
        "variables are flags the server would take behind the command line a run records; a case's flags go "
        "in cases.toml (server_args)"
    ]
    seen = _servers_env(tmp_path)
    assert len(seen) >= 3 and not [e for e in seen if any(k.startswith("LLAMA_ARG_") for k in e)]


@pytest.mark.parametrize("own", [None, ("OMP_WAIT_POLICY", "PASSIVE"), ("GOMP_SPINCOUNT", "300000")])
def test_cpu_servers_spin_briefly_unless_told_otherwise(tmp_path, chain_env, own) -> None:
    """Issue 51: OpenMP's long spin made a loaded machine 20 to 40 times slower; every server of a CPU run
    (the baseline and the case's alike) gets GOMP_SPINCOUNT=1000, and a user's own setting is kept."""
    exe = _recording_env(tmp_path)
    env = {k: v for k, v in chain_env.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env["LLAMA_SERVER_BIN_PATH"] = str(exe)
    if own:
        env[own[0]] = own[1]
    proc = _run_tier(env, SYNTH)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    servers = [
        e
        for e in _servers_env(tmp_path)
        if e.get("XDG_CONFIG_HOME", "").rpartition("/")[2].startswith("specsuite-xdg-")
    ]
    assert len(servers) == 2  # the speculation-off server and the case's
    waits = {(e.get("GOMP_SPINCOUNT"), e.get("OMP_WAIT_POLICY")) for e in servers}
    if own is None:
        assert waits == {("1000", None)}
    else:
        assert waits == {(own[1], None) if own[0] == "GOMP_SPINCOUNT" else (None, own[1])}
