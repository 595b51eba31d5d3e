"""suspects with git: a small repository (the fake tree, tests/suspecttree.py) whose second commit changes
one function of ngram-map-k's struct, a third another type's, a fourth a file outside every case's paths:
each case names the commits that touch what it exercises, with sha, subject and PR number, and the total."""

from __future__ import annotations

from pathlib import Path

import pytest
from suspecttree import SPECULATIVE, git, make_tree

from specsuite.cases.schema import load_cases
from specsuite.suspects import cause, exercised, gitlog
from specsuite.suspects.trees import Tree


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, list[str]]:
    """base; ngram-map-k's accept() fixed (#12345); draft-simple's draft() changed (#222); the vocabulary."""
    root = make_tree(tmp_path / "repo")
    git(root, "init", "-q", "-b", "master")
    steps = [
        ("base", {}),
        ("speculative : fix ngram-map-k accept (#12345)", {"common/speculative.cpp": SPECULATIVE.replace(
            "        map.n -= n;\n", "        map.n -= n;\n        map.n = map.n < 0 ? 0 : map.n;\n")}),
        ("speculative : simple draft (#222)", {"common/speculative.cpp": None}),
        ("vocab : count (#333)", {"src/llama-vocab.cpp": "int llama_vocab_n() {\n    return 2;\n}\n"}),
    ]  # fmt: skip
    commits = []
    for subject, changes in steps:
        for rel, text in changes.items():
            path = root / rel
            text = (
                text
                if text is not None
                else path.read_text().replace("        n += x;\n", "        n += 3;\n")
            )
            path.write_text(text)
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", subject)
        commits.append(git(root, "rev-parse", "HEAD"))
    git(root, "tag", "b1", commits[0])
    return root, commits


def find(repo: Path, base: Tree, head: Tree, name: str, cache: Path) -> cause.Suspects:
    case = next(c for c in load_cases() if c.name == name)
    finder = cause.Finder(base, head, repo=repo, cache=cache)
    assert finder.route == cause.GIT
    return finder.find(exercised.for_case(case, "cpu", on_disk=lambda _: None))


def test_the_commit_that_changed_the_cases_function_is_named(repo, tmp_path: Path) -> None:
    root, c = repo
    found = find(root, Tree("b1", build=1), Tree("b4", commit=c[3]), "tiny-ngram-map-k", tmp_path)
    assert [x.sha for x in found.commits] == [c[1]]
    assert found.commits[0].pr == 12345 and found.range_total == 3
    # the method, read from the file as the commit left it (git's own hunk header says only the struct)
    assert found.commits[0].entities == (
        ("common/speculative.cpp", "common_speculative_impl_ngram_map_k::accept()"),
    )
    assert found.line() == (
        f"suspects for tiny-ngram-map-k (b1 -> b4): 1 of 3 commits touch the case's paths, newest first: "
        f"{c[1][:7]} speculative : fix ngram-map-k accept (#12345)"
    )


def test_each_case_names_its_own_types_commit(repo, tmp_path: Path) -> None:
    root, c = repo
    found = find(root, Tree("b1", build=1), Tree("b4", commit=c[3]), "tiny-simple-fixed", tmp_path)
    assert [(x.sha, x.pr) for x in found.commits] == [(c[2], 222)]


def test_a_range_touching_nothing_of_the_case_says_so(repo, tmp_path: Path) -> None:
    root, c = repo
    found = find(root, Tree("b3", commit=c[2]), Tree("b4", commit=c[3]), "tiny-ngram-map-k", tmp_path)
    assert found.line() == (
        "no cause found in the source between b3 and b4 for tiny-ngram-map-k (1 commits, none touching the "
        "case's paths)"
    )


def test_newest_first_capped_with_the_total_said(repo, tmp_path: Path, monkeypatch) -> None:
    root, c = repo
    monkeypatch.setattr(cause, "COMMITS_SHOWN", 1)
    case = next(x for x in load_cases() if x.name == "tiny-ngram-map-k")
    ex = exercised.for_case(case, "cpu", on_disk=lambda _: None)
    every = exercised.Exercised(ex.case, ex.paths)  # no type's block set apart: all three touch its paths
    found = cause.Finder(Tree("b1", build=1), Tree("b4", commit=c[3]), repo=root, cache=tmp_path).find(every)
    assert [x.sha for x in found.commits] == [c[2], c[1]]
    assert found.line().endswith(f"2 of 3 commits touch the case's paths, newest first: {c[2][:7]} "
                                 "speculative : simple draft (#222); and 1 more")  # fmt: skip


def test_a_repository_that_lacks_one_end_is_no_route(repo, tmp_path: Path) -> None:
    root, _ = repo
    finder = cause.Finder(Tree("b1", build=1), Tree("b9", build=9), repo=root, cache=tmp_path)
    assert finder.git is None and finder.route == cause.NONE


def test_the_command_names_the_commit_and_says_when_git_lacks_an_end(repo, cache, capsys) -> None:
    from specsuite import cli

    root, c = repo
    argv = ["suspects", "--git", str(root), "--backend", "cpu", "tiny-ngram-map-k"]
    assert cli.main([*argv, "--base", c[0][:10], "--head", c[3]]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line == (
        f"suspects for tiny-ngram-map-k ({c[0][:7]} -> {c[3][:7]}): 1 of 3 commits touch the case's paths, "
        f"newest first: {c[1][:7]} speculative : fix ngram-map-k accept (#12345)"
    )
    assert cli.main([*argv, "--base", c[0], "--head", "abcdef1234"]) == 0
    assert f"note: --git {root} does not know both {c[0][:7]} and abcdef1" in capsys.readouterr().err


def test_a_log_parses_into_commits_with_their_hunks() -> None:
    text = (
        "\x1eabc123\x1fggml : fix (#7)\n\ndiff --git a/x.c b/x.c\n--- a/x.c\n+++ b/x.c\n"
        "@@ -1 +1 @@ void f(int a)\n-a\n+b\n@@ -9,0 +10 @@\n+c\n"
    )
    assert gitlog.parse_patches(text) == [
        ("abc123", "ggml : fix (#7)", {"x.c": [gitlog.Hunk("void f(int a)", (1, 1), (1, 1)),
                                               gitlog.Hunk("", (9, 0), (10, 1))]})
    ]  # fmt: skip
    assert gitlog.Commit("abc123", "ggml : fix (#7)", ("x.c",)).pr == 7
