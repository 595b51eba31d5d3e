"""The one git runner: every git command of the suite (the source checkout, the llama.cpp mirror and its
worktrees, bisect, a commit's ancestry) runs here, in the one child environment and the C locale (so its
output parses the same everywhere)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from specsuite.common.errors import UserError
from specsuite.common.procs import child_env


def run(
    args: Sequence[str], cwd: Path | None = None, *, timeout: float | None = None, ceiling: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``git ARGS`` in ``cwd``; never raises for git's own failure (look at ``returncode``). ``ceiling``:
    a folder that is not a repository must not resolve to a repository above it (GIT_CEILING_DIRECTORIES).
    """
    env = {**child_env(), "LC_ALL": "C"}
    if ceiling is not None:
        env["GIT_CEILING_DIRECTORIES"] = str(ceiling)
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=False, env=env, timeout=timeout,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def output(args: Sequence[str], cwd: Path) -> str:
    """stdout of a git command that must succeed; one UserError with git's own message otherwise."""
    res = run(args, cwd)
    if res.returncode != 0:
        raise UserError(f"git {' '.join(args)} failed in {cwd}: {res.stderr.strip()[-400:]}")
    return res.stdout.strip()
