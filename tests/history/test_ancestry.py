"""Ancestry on a real git repository built in tmp_path: a side branch merged back, and a bare mirror."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from specsuite.history.ancestry import ancestors

ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], env=ENV, check=True, capture_output=True, text=True
    ).stdout.strip()


def commit(repo: Path, name: str) -> str:
    (repo / name).write_text(name)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", name)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """a - b - c ------ m - e      (d1, d2 on a side branch from b, merged at m)
    ....... \\- d1 - d2 -/"""
    path = tmp_path_factory.mktemp("llama.cpp")
    git(path, "init", "-q", "-b", "master")
    c = {n: commit(path, n) for n in ("a", "b")}
    git(path, "checkout", "-q", "-b", "side")
    c |= {n: commit(path, n) for n in ("d1", "d2")}
    git(path, "checkout", "-q", "master")
    c["c"] = commit(path, "c")
    git(path, "merge", "-q", "--no-ff", "-m", "m", "side")
    c["m"] = git(path, "rev-parse", "HEAD")
    c["e"] = commit(path, "e")
    return path, c


def test_nearest_first_commit_excluded_full_shas(repo: tuple[Path, dict[str, str]]) -> None:
    path, c = repo
    got = ancestors(path, c["e"])
    assert got is not None and c["e"] not in got
    assert set(got) == {c[n] for n in ("a", "b", "c", "d1", "d2", "m")}
    assert got[0] == c["m"] and got[-2:] == [c["b"], c["a"]]
    assert all(len(sha) == 40 for sha in got)
    # topological: every commit before its parents, on both sides of the merge
    for child, parent in [("d2", "d1"), ("d1", "b"), ("c", "b"), ("m", "c"), ("m", "d2")]:
        assert got.index(c[child]) < got.index(c[parent])


def test_a_side_branch_sees_only_its_own_history(repo: tuple[Path, dict[str, str]]) -> None:
    path, c = repo
    assert ancestors(path, c["d2"]) == [c["d1"], c["b"], c["a"]]
    assert ancestors(path, c["a"]) == []  # the root has no ancestors


def test_short_sha_and_limit(repo: tuple[Path, dict[str, str]]) -> None:
    path, c = repo
    assert ancestors(path, c["d2"][:8]) == [c["d1"], c["b"], c["a"]]
    assert ancestors(path, c["d2"].upper()) == [c["d1"], c["b"], c["a"]]
    assert ancestors(path, c["d2"], limit=2) == [c["d1"], c["b"]]
    assert ancestors(path, c["d2"], limit=0) == []


def test_a_bare_mirror_works(repo: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    path, c = repo
    mirror = tmp_path / "llama.cpp.git"
    subprocess.run(["git", "clone", "-q", "--mirror", str(path), str(mirror)], env=ENV, check=True)
    assert ancestors(mirror, c["e"]) == ancestors(path, c["e"])


def test_none_when_the_answer_cannot_be_had(repo: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    path, c = repo
    assert ancestors(tmp_path / "missing", c["e"]) is None
    assert ancestors(path, "0" * 40) is None  # not in the mirror
    assert ancestors(path, "--all") is None  # never handed to git as an option
    assert ancestors(path, "master") is None  # a branch name is not a commit
    (tmp_path / "plain").mkdir()
    assert ancestors(tmp_path / "plain", c["e"]) is None
    # a folder that is not a repository, inside one: not resolved to the repository around it
    inside = path / "not-a-mirror"
    inside.mkdir(exist_ok=True)
    assert ancestors(inside, c["e"]) is None
