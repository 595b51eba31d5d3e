"""specsuite.suite.session: the run's header (what harness produced the numbers)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from specsuite.suite.session import harness_info


def _git(folder: Path, *args: str) -> str:
    cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, cwd=folder, check=True, capture_output=True, text=True).stdout.strip()


def test_harness_commit_and_whether_the_tree_was_dirty(tmp_path: Path) -> None:
    _git(tmp_path, "init", "--quiet")
    (tmp_path / "cases.toml").write_text("version = 1\n")
    _git(tmp_path, "add", "cases.toml")
    _git(tmp_path, "commit", "--quiet", "-m", "cases")
    head = _git(tmp_path, "rev-parse", "HEAD")
    (tmp_path / "scratch.txt").write_text("untracked files do not make a run dirty\n")
    assert harness_info(tmp_path)["commit"] == head and harness_info(tmp_path)["dirty"] is False
    (tmp_path / "cases.toml").write_text("version = 1\n# an edited floor\n")
    assert harness_info(tmp_path) == {
        "commit": head,
        "dirty": True,
        "version": harness_info(tmp_path)["version"],
    }


def test_outside_a_git_checkout_nothing_is_claimed(tmp_path: Path) -> None:
    info = harness_info(tmp_path)
    assert info["commit"] is None and info["dirty"] is None
