"""Tier runner: posargs splitting, bad input, and SPEC_METHODS selection in the suite's conftest."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from specsuite import paths
from specsuite.errors import UserError
from specsuite.tier import pytest_command, run_tier, run_tier_command, split_posargs


def test_build_flags_are_dropped_from_posargs() -> None:
    keep, dropped = split_posargs(
        ["--cpu", "-x", "-DGGML_NATIVE=OFF", "-k", "mtp", "--configure-only", "--cuda", "--cublas-from-wheel"]
    )
    assert keep == ["-x", "-k", "mtp"]
    assert dropped == ["--cpu", "-DGGML_NATIVE=OFF", "--configure-only", "--cuda", "--cublas-from-wheel"]


def test_unknown_tier_and_usage() -> None:
    with pytest.raises(UserError, match="unknown tier 'weekly'; valid tiers: smoke, synthetic"):
        run_tier("weekly", paths.RESULTS_DIR / "x", [])
    with pytest.raises(UserError, match="usage: python -m specsuite run-tier"):
        run_tier_command([])


def test_missing_binary_points_at_nox_build(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LLAMA_SERVER_BIN_PATH", str(tmp_path / "nope" / "llama-server"))
    with pytest.raises(UserError, match="nox -s build"):
        run_tier("smoke", tmp_path / "r", [])
    assert not (tmp_path / "r").exists()  # nothing half-written


def test_pytest_command_has_junit_and_no_cache(tmp_path) -> None:
    cmd = pytest_command(tmp_path, ["-x"])
    assert cmd[1:3] == ["-m", "pytest"] and f"--junitxml={tmp_path / 'junit.xml'}" in cmd
    assert cmd[-1] == "-x" and "no:cacheprovider" in cmd


COLLECT = ("--collect-only", "-q", "-p", "no:cacheprovider")


def _collect(methods: str | None, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SPEC_METHODS"}
    if methods is not None:
        env["SPEC_METHODS"] = methods
    return subprocess.run(
        [sys.executable, "-m", "pytest", "tests/spec", *extra, *COLLECT],
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


def test_unset_spec_methods_keeps_the_projects_parametrized_tests() -> None:
    """The suite's deselection hook sees the whole session: it must drop only tests/spec items."""
    both = _collect(None, "tests/test_probe.py")
    assert "test_speculative" not in both.stdout
    assert "test_every_variant_parses_its_own_spec_flag[current]" in both.stdout, both.stdout
    assert "1 deselected" in both.stdout, both.stdout


def test_spec_methods_unknown_lists_valid_ones() -> None:
    bad = _collect("medusa")
    assert bad.returncode != 0
    assert "unknown case or tier 'medusa'" in bad.stderr and "valid cases: mtp" in bad.stderr


def _fake_binary(tmp_path, drop_type: str):
    """A stand-in llama-server that only answers the probe: the pinned build's recorded --help with one
    spec type removed (a real older/newer binary is not available here)."""
    help_text = (paths.REPO_ROOT / "tests" / "data" / "help" / "current.txt").read_text()
    (tmp_path / "help.txt").write_text(help_text.replace(f",{drop_type}", ""))
    exe = tmp_path / "llama-server"
    exe.write_text(
        "#!/bin/sh\n"
        f'case "$1" in --help) cat {tmp_path / "help.txt"};; --version) echo "version: 1 (build 1, commit '
        'abc1234)";; --list-devices) printf "Available devices:\\n";; esac\n'
    )
    exe.chmod(0o755)
    return exe


@pytest.mark.parametrize(
    ("strict", "word", "status"), [("", "1 skipped", "skipped"), ("1", "1 failed", "failed")]
)
def test_method_missing_from_binary_skips_or_fails_strict(tmp_path, strict, word, status) -> None:
    exe = _fake_binary(tmp_path, "draft-dspark")
    env = {
        **os.environ,
        "SPEC_METHODS": "dspark",
        "LLAMA_SERVER_BIN_PATH": str(exe),
        "SPEC_STRICT": strict,
        "SPEC_RESULTS_DIR": str(tmp_path / "r"),
        "SPEC_CACHE_DIR": str(tmp_path / "cache"),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/spec", "-rA", "-p", "no:cacheprovider"],
        cwd=paths.REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert word in proc.stdout and "binary_no_dspark" in proc.stdout, proc.stdout
    rec = json.loads((tmp_path / "r" / "results.json").read_text())["cases"]["dspark"]
    assert (rec["status"], rec["reason"]) == (status, "binary_no_dspark")
    assert (tmp_path / "r" / "summary.md").read_text().count("binary_no_dspark") == 1


def test_missing_model_points_at_fetch_models(tmp_path) -> None:
    exe = _fake_binary(tmp_path, "no-such-type")  # every method present; no server is ever started
    env = {
        **os.environ,
        "SPEC_METHODS": "ngram-mod",
        "LLAMA_SERVER_BIN_PATH": str(exe),
        "SPEC_RESULTS_DIR": str(tmp_path / "r"),
        "SPEC_CACHE_DIR": str(tmp_path / "cache"),
        "SPEC_MODEL_DIR": str(tmp_path / "empty"),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/spec", "-p", "no:cacheprovider"],
        cwd=paths.REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "invoke fetch-models --tier smoke" in proc.stdout, proc.stdout
    rec = json.loads((tmp_path / "r" / "results.json").read_text())["cases"]["ngram-mod"]
    assert (rec["status"], rec["command"]) == ("error", None)
