"""Small llama.cpp-shaped trees and git repositories for the source and identity tests (test modules
cannot import each other: importlib mode; helpers live beside them, as tests/fakeindex.py does)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def make_tree(root: Path, marker: str = "one") -> Path:
    """The files every llama.cpp tree has (source.check_tree), ``marker`` in its CMakeLists.txt."""
    (root / "include").mkdir(parents=True)
    (root / "tools" / "server").mkdir(parents=True)
    (root / "CMakeLists.txt").write_text(f"# {marker}\n")
    (root / "include" / "llama.h").write_text("/* fake */\n")
    (root / "tools" / "server" / "server.cpp").write_text("")
    return root


def git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "PATH": os.environ["PATH"],
    }
    res = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, env=env)
    return res.stdout.strip()


def make_repo(root: Path) -> tuple[Path, list[str]]:
    """A llama.cpp-shaped git repository with two commits; returns (path, [commit1, commit2])."""
    make_tree(root, "one")
    git(root, "init", "-q", "-b", "master")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "one")
    first = git(root, "rev-parse", "HEAD")
    (root / "CMakeLists.txt").write_text("# two\n")
    git(root, "commit", "-q", "-am", "two")
    return root, [first, git(root, "rev-parse", "HEAD")]
