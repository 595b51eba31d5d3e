"""``python -m specsuite run-tier TIER [posargs]``: fetch the tier's models, check the binary, run the suite.

nox passes the same posargs to every session of one invocation (``nox -s build test_smoke -- --cpu -x``),
so build flags are dropped here and the rest goes to pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from . import paths
from .cases import TIERS
from .errors import UserError
from .results import append_step_summary, default_results_dir

BUILD_FLAGS = ("--cpu", "--cuda", "--configure-only", "--cublas-from-wheel")


def split_posargs(argv: list[str]) -> tuple[list[str], list[str]]:
    """(pytest args, dropped build flags)."""
    keep, dropped = [], []
    for arg in argv:
        (dropped if arg in BUILD_FLAGS or arg.startswith("-D") else keep).append(arg)
    return keep, dropped


def _check_binary() -> Path:
    binary = paths.server_binary()
    if not binary.is_file():
        raise UserError(
            f"llama-server not found at {binary}; build it first with `nox -s build` "
            "(or point LLAMA_SERVER_BIN_PATH at one)"
        )
    return binary


def pytest_command(results_dir: Path, pytest_args: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        str(paths.REPO_ROOT / "tests" / "spec"),
        "-p",
        "no:cacheprovider",
        f"--junitxml={results_dir / 'junit.xml'}",
        *pytest_args,
    ]


def run_tier(tier: str, results_dir: Path, pytest_args: list[str]) -> int:
    """Fetch and verify the tier's models, then run the suite on it; returns pytest's exit code."""
    if tier not in TIERS:
        raise UserError(f"unknown tier {tier!r}; valid tiers: {', '.join(TIERS)}")
    binary = _check_binary()
    from .fetch import fetch_models  # the fetcher pulls in the Hub client; only tiers need it

    fetch_models(tier=tier)
    results_dir = Path(results_dir).resolve()
    results_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "SPEC_METHODS": tier,
        "SPEC_RESULTS_DIR": str(results_dir),
        "LLAMA_SERVER_BIN_PATH": str(binary),
    }
    print(f"running the {tier} tier with {binary}; results in {results_dir}", flush=True)
    return subprocess.call(pytest_command(results_dir, pytest_args), cwd=paths.REPO_ROOT, env=env)


def run_tier_command(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        raise UserError(f"usage: python -m specsuite run-tier {{{','.join(TIERS)}}} [pytest args…]")
    tier, rest = argv[0], argv[1:]
    pytest_args, dropped = split_posargs(rest)
    if dropped:
        print(f"note: build flags {' '.join(dropped)} are for `nox -s build`; not passed to pytest")
    results_dir = Path(os.environ.get("SPEC_RESULTS_DIR") or default_results_dir(tier))
    code = run_tier(tier, results_dir, pytest_args)
    summary = results_dir / "summary.md"  # written by the suite when its session ends
    if summary.is_file():
        print(summary.read_text())
        append_step_summary(summary)
    print(f"results: {results_dir} (results.json, summary.md, junit.xml, logs/)")
    return code
